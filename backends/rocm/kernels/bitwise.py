"""Elementwise bodies of the bitwise and shift ops (acl_core.spec.ops.bitwise), one per row of its table.

Rows of (name, signature, body) in the ufunc language of :mod:`acl_rocm.kernels.elementwise`. Integer
values travel as ``long long`` (``unsigned long long`` for UINT64) whatever their dtype, so a body names
the computation dtype's constants (:func:`acl_rocm.kernels.elementwise.dtype_constants`): ``acl_width``
(its bits; 1 for BOOL), ``acl_signed`` and ``acl_integral``. :func:`fit` wraps a value to that width
(sign- or zero-extended), as CANN's kernel holds it: a scalar operand past the dtype's range, a left
shift's carried-out bits.
"""

from __future__ import annotations

from typing import Final

from acl_core.spec.ops.bitwise import OPERATORS, Binary
from acl_core.spec.ops.bitwise import ROWS as SPEC_ROWS


def fit(v: str) -> str:
    """C expression: ``v`` (an integer) wrapped to the computation dtype's width, as a ``T``."""
    u = f"((unsigned long long)({v}))"
    signed = f"(unsigned long long)((long long)({u} << (64 - acl_width)) >> (64 - acl_width))"
    return f"((T)(acl_signed ? {signed} : ({u} & (~0ULL >> (64 - acl_width)))))"


def _logic(a: str, b: str, op: str) -> str:
    """And / Or / Xor: integers wrapped to the width (a scalar may carry bits past it); BOOL is logical."""
    return f"acl_integral ? {fit(f'{a} {op} {b}')} : (T)({a} {op} {b})"


def _left(a: str, b: str) -> str:
    """0 for a count < 0 or ≥ the width, else the bits shifted and wrapped (a scalar count wraps first)."""
    return (
        f"const T s = {fit(b)}; "
        f"if (s < T(0) || s >= T(acl_width)) r = T(0); "
        f"else r = {fit(f'((unsigned long long)({a})) << (int)s')};"
    )


def _right(a: str, b: str) -> str:
    """The count clamped to [0, width - 1]; signed values shift arithmetically (they are sign-extended)."""
    return (
        f"const T s = {b}; "
        "const int c = s < T(0) ? 0 : (s > T(acl_width - 1) ? (int)(acl_width - 1) : (int)s); "
        f"r = {a} >> c;"
    )


def _body(row: Binary) -> str:
    if row.operator == "lshift":
        return _left(row.a, row.b)
    if row.operator == "rshift":
        return _right(row.a, row.b)
    return _logic(row.a, row.b, OPERATORS[row.operator])


ROWS: Final[tuple[tuple[str, str, str], ...]] = (
    *((r.name, f"{r.a}:T, {r.b}:T -> out:T", _body(r)) for r in SPEC_ROWS),
    ("BitwiseNot", "self:T -> out:T", "acl_width == 1 ? (T)(!self) : (T)(~self)"),
)
"""Every bitwise and shift op's ufunc row."""

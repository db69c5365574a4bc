"""Reference kernels of the bitwise and shift ops (acl_core.spec.ops.bitwise), in the computation dtype.

Operands are converted to ``plan["compute"]`` (an integer scalar wraps to it) and combined with NumPy's
own integer operators on that dtype, so the result is exactly CANN's integer arithmetic; on BOOL the
operators are logical. The shift rules (counts out of range) are written out, not left to NumPy.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from acl_core.dtypes import DataType
from acl_core.spec.ops.bitwise import ROWS
from acl_core.spec.opspec import Kind
from acl_reference.call import RefCall
from acl_reference.kernels.elementwise import kernel

Array = np.ndarray


def _operand(k: RefCall, name: str, compute: DataType) -> Array:
    """Tensor or scalar ``name`` in the computation dtype (an integer scalar wraps, as a cast does)."""
    dt = compute.numpy
    if k.launch.spec.param(name).kind is Kind.SCALAR:
        value = k.value(name)
        if dt == np.bool_:
            return np.asarray(bool(value))
        return np.asarray(int(value) & (2**64 - 1), dtype=np.uint64).astype(dt)
    return k.read(name, dt)


def _count(s: Array, width: int) -> Array:
    """Shift counts as int64, an unsigned count past ``width`` capped at ``width`` (so it stays past it)."""
    if s.dtype.kind == "u":
        return np.minimum(s.astype(np.uint64), np.uint64(width)).astype(np.int64)
    return s.astype(np.int64)


def left_shift(a: Array, s: Array) -> Array:
    """``a << s`` in a's dtype: the two's-complement bits shifted and wrapped; 0 when s < 0 or s ≥ the width."""
    width = a.dtype.itemsize * 8
    count = _count(s, width)
    valid = (count >= 0) & (count < width)
    bits = np.left_shift(a.astype(np.uint64), np.where(valid, count, 0).astype(np.uint64))
    return np.where(valid, bits, np.uint64(0)).astype(a.dtype)


def right_shift(a: Array, s: Array) -> Array:
    """``a >> s`` in a's dtype (arithmetic for signed types), the count clamped to [0, width - 1]."""
    width = a.dtype.itemsize * 8
    count = np.clip(_count(s, width), 0, width - 1)
    return np.right_shift(a, count.astype(a.dtype))


BINARY: dict[str, Callable[[Array, Array], Array]] = {
    "and": np.bitwise_and,
    "or": np.bitwise_or,
    "xor": np.bitwise_xor,
    "lshift": left_shift,
    "rshift": right_shift,
}
"""Each row operator's function of two arrays of the computation dtype."""
_OPERATOR = {r.name: r for r in ROWS}


def _binary(k: RefCall) -> None:
    row = _OPERATOR[k.launch.spec.name]
    compute: DataType = k.plan["compute"]
    a, b = _operand(k, row.a, compute), _operand(k, row.b, compute)
    k.write("out", np.asarray(BINARY[row.operator](a, b), dtype=compute.numpy))


for _row in ROWS:
    kernel(_row.name)(_binary)


@kernel("BitwiseNot")
def bitwise_not(k: RefCall) -> None:
    """``~self`` (logical not on BOOL)."""
    k.write("out", np.invert(k.read("self")))

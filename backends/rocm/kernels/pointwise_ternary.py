"""Elementwise bodies of the clamp variants and Addcmul / Addcdiv (acl_core.spec.ops.pointwise_ternary).

Rows of (name, signature, body) in the ufunc language of :mod:`acl_rocm.kernels.elementwise`, the clamp
rows generated from the spec's table: Clamp's own ``acl_maximum`` / ``acl_minimum`` (NaN-propagating),
lower bound first. fp16/bf16 compute in float, as every elementwise body.
"""

from __future__ import annotations

from typing import Final

from acl_core.spec.ops.pointwise_ternary import CLAMPS, Clamp
from acl_rocm.kernels.bitwise import fit


def clamp_body(lower: str | None, upper: str | None) -> str:
    """``min(max(self, lower), upper)``, an absent bound skipped (Clamp's body)."""
    r = "self"
    if lower:
        r = f"acl_maximum({r}, {lower})"
    if upper:
        r = f"acl_minimum({r}, {upper})"
    return r


def _clamp(row: Clamp) -> tuple[str, str, str]:
    bounds = [b for b in (row.lower, row.upper) if b]
    signature = ", ".join(f"{n}:T" for n in ("self", *bounds)) + " -> out:T"
    return row.name, signature, clamp_body(row.lower, row.upper)


_ADDC = "self:T, tensor1:T, tensor2:T, value:T -> out:T"
_WRAPPED = (
    "(unsigned long long)self + (unsigned long long)value * (unsigned long long)tensor1 * (unsigned long long)tensor2"
)

ROWS: Final[tuple[tuple[str, str, str], ...]] = (
    *(_clamp(r) for r in CLAMPS),
    # integers wrap in their own width (two's complement, no signed overflow), floats in T (float for fp16/bf16),
    # each intermediate rounded on its own (no fused multiply-add: the spec's intermediates are values of T)
    ("Addcmul", _ADDC, f"acl_integral ? {fit(_WRAPPED)} : (T)(self + acl_mul_rn(acl_mul_rn(value, tensor1), tensor2))"),
    ("Addcdiv", _ADDC, "self + acl_mul_rn(value, tensor1 / tensor2)"),
)
"""Every op's ufunc row."""

VARIANTS: Final[tuple[tuple[str, str, str], ...]] = (
    ("ClampTensorUpper", "self:T, clipValueMax:T -> out:T", clamp_body(None, "clipValueMax")),
    ("ClampTensorLower", "self:T, clipValueMin:T -> out:T", clamp_body("clipValueMin", None)),
)
"""ClampTensor with one bound null (the runner picks them: a kernel reads only the tensors it is given)."""

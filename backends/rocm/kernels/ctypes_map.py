"""How each aclDataType lives in kernel code: its storage type, the type computations use, and the
conversions between them (as C expression templates), plus the ctypes type of a scalar argument.

fp16 and bf16 are stored as raw bits and computed in fp32; integers compute in 64 bits (as the
reference computes wide); converting a float to an integer truncates toward zero, maps NaN to 0 and
saturates to the target's range (CANN's Cast); converting to bool tests for non-zero.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.lowp import CAST_ENCODER, DECODER, LOW_PRECISION

Kind = Literal["float", "int", "uint64", "bool"]


@dataclass(frozen=True)
class CType:
    """The kernel-side description of one aclDataType."""

    dtype: D
    storage: str
    value: str
    kind: Kind
    decode: str = "{x}"
    encode: str = "{v}"
    lowp: bool = False
    """An 8- or 4-bit type of :mod:`acl_rocm.kernels.lowp`: its encoder takes any value type as it is."""
    packed: bool = False
    """Two elements per byte (element 2k in the low nibble of byte k)."""
    exact_decode: str | None = None
    """A decode that keeps every bit (NaN signs included) where ``decode`` may use a vendor conversion."""

    @property
    def lo(self) -> float:
        """Smallest value of an integer type (for saturating conversions)."""
        info = np.iinfo(self.dtype.numpy) if self.dtype.numpy is not None else None
        return float(info.min) if info is not None else 0.0

    @property
    def hi(self) -> float:
        """Largest value of an integer type (for saturating conversions)."""
        info = np.iinfo(self.dtype.numpy) if self.dtype.numpy is not None else None
        return float(info.max) if info is not None else 0.0

    @property
    def scalar_ctype(self) -> type[ctypes._SimpleCData]:
        """The ctypes type that passes a value of this type as a kernel argument."""
        return _SCALAR_CTYPES[self.value]


_EXACT_H2F: Final = "acl_h2f_soft({x})"
"""fp16 to float keeping NaN signs (the vendor conversion may return a canonical NaN)."""


def _lowp(dtype: D, value: str = "float", kind: Kind = "float") -> CType:
    packed = dtype.info.storage_bits == 4
    return CType(
        dtype, "unsigned char", value, kind, f"{DECODER[dtype]}({{x}})", f"{CAST_ENCODER[dtype]}({{v}})", True, packed
    )


def _int(dtype: D, storage: str) -> CType:
    return CType(dtype, storage, "long long", "int", "((long long)({x}))", f"(({storage})({{v}}))")


C_TYPES: Final[dict[D, CType]] = {
    D.ACL_FLOAT: CType(D.ACL_FLOAT, "float", "float", "float"),
    D.ACL_DOUBLE: CType(D.ACL_DOUBLE, "double", "double", "float"),
    D.ACL_FLOAT16: CType(
        D.ACL_FLOAT16, "unsigned short", "float", "float", "acl_h2f({x})", "acl_f2h({v})", exact_decode=_EXACT_H2F
    ),
    D.ACL_BF16: CType(D.ACL_BF16, "unsigned short", "float", "float", "acl_b2f({x})", "acl_f2b({v})"),
    D.ACL_INT8: _int(D.ACL_INT8, "signed char"),
    D.ACL_INT16: _int(D.ACL_INT16, "short"),
    D.ACL_INT32: _int(D.ACL_INT32, "int"),
    D.ACL_INT64: CType(D.ACL_INT64, "long long", "long long", "int"),
    D.ACL_UINT8: _int(D.ACL_UINT8, "unsigned char"),
    D.ACL_UINT16: _int(D.ACL_UINT16, "unsigned short"),
    D.ACL_UINT32: _int(D.ACL_UINT32, "unsigned int"),
    D.ACL_UINT64: CType(D.ACL_UINT64, "unsigned long long", "unsigned long long", "uint64"),
    D.ACL_BOOL: CType(D.ACL_BOOL, "unsigned char", "bool", "bool", "({x} != 0)", "((unsigned char)({v}))"),
    **{dt: _lowp(dt) for dt in sorted(LOW_PRECISION - {D.ACL_INT4})},
    D.ACL_INT4: _lowp(D.ACL_INT4, "long long", "int"),
}
"""Every dtype the HIP kernels compute with."""

SUPPORTED: Final[frozenset[D]] = frozenset(C_TYPES)

_SCALAR_CTYPES: Final[dict[str, type[ctypes._SimpleCData]]] = {
    "float": ctypes.c_float,
    "double": ctypes.c_double,
    "long long": ctypes.c_longlong,
    "unsigned long long": ctypes.c_ulonglong,
    "bool": ctypes.c_bool,
}


def ctype(dtype: D) -> CType:
    """The kernel description of ``dtype``; KeyError when the kernels do not support it."""
    return C_TYPES[dtype]


def convert(expr: str, src: CType, dst: CType) -> str:
    """C expression converting ``expr`` (a ``src.value``) to a ``dst.value``, with CANN's cast rules."""
    if dst.kind == "bool":
        return expr if src.kind == "bool" else f"(({expr}) != 0)"
    if src.kind == "float" and dst.kind == "int":
        return f"acl_f2i((double)({expr}), {dst.lo!r}, {dst.hi!r})"
    if src.kind == "float" and dst.kind == "uint64":
        return f"acl_f2u((double)({expr}), {dst.hi!r})"
    if src.value == dst.value:
        return expr
    return f"(({dst.value})({expr}))"


def load(pointer_expr: str, src: CType, dst: CType, exact: bool = False) -> str:
    """C expression reading one ``src`` element at ``pointer_expr`` as a ``dst.value`` (``exact``: keep NaN signs)."""
    decode = src.exact_decode if exact and src.exact_decode else src.decode
    return convert(decode.format(x=pointer_expr), src, dst)


def store(value_expr: str, src: CType, dst: CType) -> str:
    """C expression turning a ``src.value`` into the storage bits of a ``dst`` element.

    A low-precision ``dst`` encodes the value in its own type (one rounding, from the source's bits).
    """
    if dst.lowp:
        return dst.encode.format(v=value_expr)
    return dst.encode.format(v=convert(value_expr, src, dst))

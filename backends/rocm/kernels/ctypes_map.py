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


def _int(dtype: D, storage: str) -> CType:
    return CType(dtype, storage, "long long", "int", "((long long)({x}))", f"(({storage})({{v}}))")


C_TYPES: Final[dict[D, CType]] = {
    D.ACL_FLOAT: CType(D.ACL_FLOAT, "float", "float", "float"),
    D.ACL_DOUBLE: CType(D.ACL_DOUBLE, "double", "double", "float"),
    D.ACL_FLOAT16: CType(D.ACL_FLOAT16, "unsigned short", "float", "float", "acl_h2f({x})", "acl_f2h({v})"),
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


def load(pointer_expr: str, src: CType, dst: CType) -> str:
    """C expression reading one ``src`` element at ``pointer_expr`` as a ``dst.value``."""
    return convert(src.decode.format(x=pointer_expr), src, dst)


def store(value_expr: str, src: CType, dst: CType) -> str:
    """C expression turning a ``src.value`` into the storage bits of a ``dst`` element."""
    return dst.encode.format(v=convert(value_expr, src, dst))

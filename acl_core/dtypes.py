"""aclDataType with CANN's numbers, and each type's NumPy / ml_dtypes counterpart and packing."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from functools import cache

import ml_dtypes
import numpy as np


class DataType(IntEnum):
    """aclDataType (acl_base_rt.h): the values CANN code passes around."""

    ACL_DT_UNDEFINED = -1
    ACL_FLOAT = 0
    ACL_FLOAT16 = 1
    ACL_INT8 = 2
    ACL_INT32 = 3
    ACL_UINT8 = 4
    ACL_INT16 = 6
    ACL_UINT16 = 7
    ACL_UINT32 = 8
    ACL_INT64 = 9
    ACL_UINT64 = 10
    ACL_DOUBLE = 11
    ACL_BOOL = 12
    ACL_STRING = 13
    ACL_COMPLEX64 = 16
    ACL_COMPLEX128 = 17
    ACL_BF16 = 27
    ACL_INT4 = 29
    ACL_UINT1 = 30
    ACL_COMPLEX32 = 33
    ACL_HIFLOAT8 = 34
    ACL_FLOAT8_E5M2 = 35
    ACL_FLOAT8_E4M3FN = 36
    ACL_FLOAT8_E8M0 = 37
    ACL_FLOAT6_E3M2 = 38
    ACL_FLOAT6_E2M3 = 39
    ACL_FLOAT4_E2M1 = 40
    ACL_FLOAT4_E1M2 = 41

    @property
    def info(self) -> DataTypeInfo:
        """The static facts about this type (element bits, storage, NumPy dtype, category)."""
        return _INFO[self]

    @property
    def short(self) -> str:
        """A short lower-case name such as ``float16`` or ``bf16`` for messages and reports."""
        return self.info.short

    @property
    def numpy(self) -> np.dtype | None:
        """The NumPy dtype that holds one *unpacked* element, or None where NumPy has none."""
        return self.info.numpy

    @property
    def is_float(self) -> bool:
        """True for real floating-point types, the 8/6/4-bit formats included."""
        return self.info.category == "float"

    @property
    def is_integer(self) -> bool:
        """True for signed and unsigned integer types (bool excluded)."""
        return self.info.category in ("int", "uint")

    @property
    def is_complex(self) -> bool:
        """True for complex types."""
        return self.info.category == "complex"

    @property
    def is_packed(self) -> bool:
        """True where several elements share one byte of storage (4-bit and 1-bit types)."""
        return self in _PACKED


@dataclass(frozen=True)
class DataTypeInfo:
    """Facts about one aclDataType.

    ``element_bits`` is the width CANN documents; ``storage_bits`` is how many bits one element
    occupies in device memory here (sub-byte types pack little-nibble first: element 2k in the low
    nibble of byte k, element 2k+1 in the high nibble; the 6-bit floats take one byte each).
    """

    short: str
    element_bits: int
    storage_bits: int
    category: str  # float | int | uint | bool | complex | string | undefined
    numpy: np.dtype | None


def _info(short: str, bits: int, category: str, numpy: object, storage: int | None = None) -> DataTypeInfo:
    dt = None if numpy is None else np.dtype(numpy)  # type: ignore[call-overload]
    return DataTypeInfo(short, bits, bits if storage is None else storage, category, dt)


_INFO: dict[DataType, DataTypeInfo] = {
    DataType.ACL_DT_UNDEFINED: _info("undefined", 0, "undefined", None, 0),
    DataType.ACL_FLOAT: _info("float32", 32, "float", np.float32),
    DataType.ACL_FLOAT16: _info("float16", 16, "float", np.float16),
    DataType.ACL_INT8: _info("int8", 8, "int", np.int8),
    DataType.ACL_INT32: _info("int32", 32, "int", np.int32),
    DataType.ACL_UINT8: _info("uint8", 8, "uint", np.uint8),
    DataType.ACL_INT16: _info("int16", 16, "int", np.int16),
    DataType.ACL_UINT16: _info("uint16", 16, "uint", np.uint16),
    DataType.ACL_UINT32: _info("uint32", 32, "uint", np.uint32),
    DataType.ACL_INT64: _info("int64", 64, "int", np.int64),
    DataType.ACL_UINT64: _info("uint64", 64, "uint", np.uint64),
    DataType.ACL_DOUBLE: _info("float64", 64, "float", np.float64),
    DataType.ACL_BOOL: _info("bool", 8, "bool", np.bool_),
    DataType.ACL_STRING: _info("string", 0, "string", None, 0),
    DataType.ACL_COMPLEX64: _info("complex64", 64, "complex", np.complex64),
    DataType.ACL_COMPLEX128: _info("complex128", 128, "complex", np.complex128),
    DataType.ACL_BF16: _info("bf16", 16, "float", ml_dtypes.bfloat16),
    DataType.ACL_INT4: _info("int4", 4, "int", ml_dtypes.int4),
    DataType.ACL_UINT1: _info("uint1", 1, "uint", np.uint8),
    DataType.ACL_COMPLEX32: _info("complex32", 32, "complex", None),
    DataType.ACL_HIFLOAT8: _info("hifloat8", 8, "float", None),
    DataType.ACL_FLOAT8_E5M2: _info("float8_e5m2", 8, "float", ml_dtypes.float8_e5m2),
    DataType.ACL_FLOAT8_E4M3FN: _info("float8_e4m3fn", 8, "float", ml_dtypes.float8_e4m3fn),
    DataType.ACL_FLOAT8_E8M0: _info("float8_e8m0", 8, "float", ml_dtypes.float8_e8m0fnu),
    DataType.ACL_FLOAT6_E3M2: _info("float6_e3m2", 6, "float", ml_dtypes.float6_e3m2fn, 8),
    DataType.ACL_FLOAT6_E2M3: _info("float6_e2m3", 6, "float", ml_dtypes.float6_e2m3fn, 8),
    DataType.ACL_FLOAT4_E2M1: _info("float4_e2m1", 4, "float", ml_dtypes.float4_e2m1fn),
    DataType.ACL_FLOAT4_E1M2: _info("float4_e1m2", 4, "float", None),
}


_PACKED = frozenset(d for d, info in _INFO.items() if 0 < info.storage_bits < 8)


def storage_nbytes(dtype: DataType, count: int) -> int:
    """Bytes that ``count`` elements of ``dtype`` occupy in device memory (sub-byte types packed)."""
    bits = dtype.info.storage_bits
    if bits <= 0:
        raise ValueError(f"{dtype.name} has no storage size")
    return (count * bits + 7) // 8


@cache
def from_numpy(dtype: np.dtype | type) -> DataType:
    """The aclDataType that holds a NumPy / ml_dtypes dtype; ValueError when CANN has none."""
    dt = np.dtype(dtype)
    for acl_type, info in _INFO.items():
        if info.numpy is not None and info.numpy == dt and acl_type is not DataType.ACL_UINT1:
            return acl_type
    raise ValueError(f"no aclDataType holds NumPy dtype {dt}")


FLOAT_TYPES: frozenset[DataType] = frozenset(
    {DataType.ACL_FLOAT, DataType.ACL_FLOAT16, DataType.ACL_BF16, DataType.ACL_DOUBLE}
)
"""The floating types ordinary (non-quantised) arithmetic accepts."""

INT_TYPES: frozenset[DataType] = frozenset(
    {
        DataType.ACL_INT8,
        DataType.ACL_INT16,
        DataType.ACL_INT32,
        DataType.ACL_INT64,
        DataType.ACL_UINT8,
        DataType.ACL_UINT16,
        DataType.ACL_UINT32,
        DataType.ACL_UINT64,
    }
)
"""Byte-sized and wider integer types."""

FP8_TYPES: frozenset[DataType] = frozenset(
    {DataType.ACL_FLOAT8_E4M3FN, DataType.ACL_FLOAT8_E5M2, DataType.ACL_HIFLOAT8}
)
"""8-bit float element types (the E8M0 scale type excluded)."""

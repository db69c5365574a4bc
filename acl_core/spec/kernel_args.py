"""What a kernel receives in :attr:`acl_core.backend.Launch.args`: each argument in one plain, typed form.

Validation checks the caller's handles (aclScalar, aclIntArray, aclTensorList...); a kernel should not
have to unwrap them. :func:`kernel_args` converts a validated call's arguments once per validated
signature (phase 1's slow path), so the per-call path reuses the result:

* ``aclTensor*`` stays an :class:`~acl_core.tensor.AclTensor` (None for an absent optional);
* ``aclTensorList*`` becomes ``tuple[AclTensor, ...]``;
* ``aclScalar*`` becomes a :class:`Scalar` (its value in the Python type of its dtype, and the dtype);
* ``aclScalarList*`` becomes ``tuple[Scalar, ...]``;
* ``aclIntArray*`` / ``aclFloatArray*`` / ``aclBoolArray*`` become ``tuple[int | float | bool, ...]``;
* ``int`` / ``double`` / ``bool`` / ``char*`` / ``aclDataType`` are int, float, bool, str, DataType.

Any absent optional argument is None.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from acl_core.dtypes import DataType
from acl_core.spec.opspec import Kind, OpSpec
from acl_core.tensor import (
    AclBoolArray,
    AclFloatArray,
    AclIntArray,
    AclScalar,
    AclScalarList,
    AclTensorList,
)


@dataclass(frozen=True, slots=True)
class Scalar:
    """An aclScalar argument as a kernel receives it: ``value`` already converted to ``dtype``'s Python type.

    ``value`` is a bool for ACL_BOOL, an int for the integer types, a float (the value rounded to the
    dtype, held as a float64) for the float types and a complex for the complex types.
    """

    value: bool | int | float | complex
    dtype: DataType


KERNEL_TYPES: dict[Kind, str] = {
    Kind.TENSOR: "AclTensor",
    Kind.TENSOR_LIST: "tuple[AclTensor, ...]",
    Kind.SCALAR: "Scalar",
    Kind.SCALAR_LIST: "tuple[Scalar, ...]",
    Kind.INT_ARRAY: "tuple[int, ...]",
    Kind.FLOAT_ARRAY: "tuple[float, ...]",
    Kind.BOOL_ARRAY: "tuple[bool, ...]",
    Kind.INT: "int",
    Kind.FLOAT: "float",
    Kind.BOOL: "bool",
    Kind.STRING: "str",
    Kind.DTYPE: "DataType",
}
"""The Python type a kernel receives for each parameter kind (the rows of docs/KERNELS.md)."""


def scalar(handle: AclScalar) -> Scalar:
    """The kernel form of one aclScalar."""
    return Scalar(handle.value, handle.dtype)


def kernel_value(value: Any) -> Any:
    """One validated argument in its kernel form (a tensor, a plain value or None passes unchanged)."""
    kind = type(value)
    if kind is AclScalar:
        return Scalar(value.value, value.dtype)
    if kind is AclTensorList:
        return tuple(value.tensors)
    if kind is AclIntArray or kind is AclFloatArray or kind is AclBoolArray:
        return tuple(value.values)
    if kind is AclScalarList:
        return tuple([Scalar(s.value, s.dtype) for s in value.scalars])
    return value


_WRAPPED = (AclScalar, AclTensorList, AclIntArray, AclFloatArray, AclBoolArray, AclScalarList)


def kernel_args(spec: OpSpec, args: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments of a call validated against ``spec`` as its kernel receives them (mapped to the base op first)."""
    mapped = spec.base_args(dict(args)) if spec.base_args else args
    return {name: kernel_value(v) if isinstance(v, _WRAPPED) else v for name, v in mapped.items()}

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

from collections.abc import Callable, Mapping
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


def _scalar_list(value: AclScalarList) -> tuple[Scalar, ...]:
    return tuple([Scalar(s.value, s.dtype) for s in value.scalars])


_CONVERT: dict[type, Callable[[Any], Any]] = {
    AclScalar: scalar,
    AclTensorList: lambda v: tuple(v.tensors),
    AclIntArray: lambda v: tuple(v.values),
    AclFloatArray: lambda v: tuple(v.values),
    AclBoolArray: lambda v: tuple(v.values),
    AclScalarList: _scalar_list,
}
"""How each handle type becomes its kernel form (anything else passes unchanged)."""


def kernel_value(value: Any) -> Any:
    """One validated argument in its kernel form (a tensor, a plain value or None passes unchanged)."""
    convert = _CONVERT.get(type(value))
    return value if convert is None else convert(value)


def kernel_args(spec: OpSpec, args: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments of a call validated against ``spec`` as its kernel receives them (mapped to the base op first)."""
    mapped = spec.base_args(dict(args)) if spec.base_args else args
    get = _CONVERT.get
    out = dict(mapped)
    for name, v in out.items():
        convert = get(type(v))
        if convert is not None:
            out[name] = convert(v)
    return out

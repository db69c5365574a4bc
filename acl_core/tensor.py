"""The aclTensor model and the host-side argument objects of aclnn (scalars, arrays, lists).

An aclTensor is a *view* (dims, strides and offset in elements) over a *storage* (dims, format,
data address). The checks made here are the ones aclCreateTensor makes; per-operator checks live in
the op specs.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from acl_core.dtypes import DataType, storage_nbytes
from acl_core.errors import AclnnError, AclnnStatus
from acl_core.formats import Format

MAX_RANK = 8
"""Highest rank aclCreateTensor accepts (CANN operators document at most 8 dimensions)."""


def contiguous_strides(dims: Sequence[int]) -> tuple[int, ...]:
    """Row-major strides in elements for ``dims``."""
    strides = [1] * len(dims)
    for i in range(len(dims) - 2, -1, -1):
        strides[i] = strides[i + 1] * max(int(dims[i + 1]), 1)
    return tuple(strides)


def _invalid(message: str) -> AclnnError:
    return AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, message)


class Handle:
    """Identity-compared object that can be destroyed once, like a C handle."""

    destroyed: bool

    def check_alive(self, what: str) -> None:
        """Raise 161002 when the handle was already destroyed."""
        if self.destroyed:
            raise _invalid(f"{what} was already destroyed")


@dataclass(eq=False)
class AclTensor(Handle):
    """aclTensor: a strided view (in elements) over a storage at device address ``data``."""

    view_dims: tuple[int, ...]
    dtype: DataType
    strides: tuple[int, ...]
    offset: int
    format: Format
    storage_dims: tuple[int, ...]
    data: int
    destroyed: bool = field(default=False, repr=False)

    @classmethod
    def create(
        cls,
        view_dims: Sequence[int],
        dtype: DataType | int,
        strides: Sequence[int] | None = None,
        offset: int = 0,
        format: Format | int = Format.ACL_FORMAT_ND,
        storage_dims: Sequence[int] | None = None,
        data: int | None = 0,
    ) -> AclTensor:
        """Validate the arguments as aclCreateTensor does and build the tensor (raises AclnnError)."""
        try:
            dtype = DataType(int(dtype))
            format = Format(int(format))
        except ValueError as exc:
            raise _invalid(str(exc)) from None
        if dtype in (DataType.ACL_DT_UNDEFINED, DataType.ACL_STRING):
            raise _invalid(f"{dtype.name} cannot be a tensor element type")
        view = tuple(int(d) for d in view_dims)
        if len(view) > MAX_RANK:
            raise _invalid(f"rank {len(view)} exceeds the maximum of {MAX_RANK}")
        if any(d < 0 for d in view):
            raise _invalid(f"negative dimension in view dims {view}")
        stride = contiguous_strides(view) if strides is None else tuple(int(s) for s in strides)
        if len(stride) != len(view):
            raise _invalid(f"{len(stride)} strides given for a rank-{len(view)} view")
        if any(s < 0 for s in stride):
            raise _invalid(f"negative stride in {stride}")
        offset = int(offset)
        if offset < 0:
            raise _invalid(f"negative offset {offset}")
        if storage_dims is None:
            span = _max_index(view, stride, offset) + 1
            storage = view if stride == contiguous_strides(view) and offset == 0 else (span,)
        else:
            storage = tuple(int(d) for d in storage_dims)
        if any(d < 0 for d in storage):
            raise _invalid(f"negative dimension in storage dims {storage}")
        address = 0 if data is None else int(data)
        if address < 0:
            raise _invalid(f"negative data address {address:#x}")
        tensor = cls(view, dtype, stride, offset, format, storage, address)
        if not format.is_private and tensor.numel and _max_index(view, stride, offset) >= tensor.storage_numel:
            raise _invalid(
                f"view dims {view} with strides {stride} and offset {offset} reach element "
                f"{_max_index(view, stride, offset)}, outside storage dims {storage}"
            )
        return tensor

    @functools.cached_property
    def layout(self) -> tuple[object, ...]:
        """Everything but the data address, as one hashable value (for launch caches)."""
        return (self.view_dims, self.dtype, self.strides, self.offset, self.format, self.storage_dims)

    @functools.cached_property
    def layout_id(self) -> int:
        """A small int naming :attr:`layout`: equal ids mean equal layouts (cheap to hash in cache keys)."""
        return _layout_id(self.layout)

    @property
    def rank(self) -> int:
        """Number of view dimensions."""
        return len(self.view_dims)

    @property
    def shape(self) -> tuple[int, ...]:
        """The view dims (the logical shape an operator sees)."""
        return self.view_dims

    @property
    def numel(self) -> int:
        """Number of elements in the view."""
        return math.prod(self.view_dims)

    @property
    def storage_numel(self) -> int:
        """Number of elements the storage holds."""
        return math.prod(self.storage_dims)

    @property
    def is_contiguous(self) -> bool:
        """True when the view is row-major without gaps (size-1 dims ignored)."""
        expected = contiguous_strides(self.view_dims)
        return all(d == 1 or s == e for d, s, e in zip(self.view_dims, self.strides, expected))

    def byte_span(self) -> tuple[int, int]:
        """The [start, end) device byte range the view touches; (data, data) for an empty view."""
        if self.numel == 0:
            return self.data, self.data
        if self.format.is_private:
            return self.data, self.data + storage_nbytes(self.dtype, self.storage_numel)
        first = self.offset
        last = _max_index(self.view_dims, self.strides, self.offset)
        bits = self.dtype.info.storage_bits
        return self.data + (first * bits) // 8, self.data + ((last + 1) * bits + 7) // 8


_LAYOUT_IDS: dict[tuple[object, ...], int] = {}
_LAYOUT_IDS_LIMIT = 1 << 16
_next_layout_id = itertools.count(1)


def _layout_id(layout: tuple[object, ...]) -> int:
    """The id of ``layout``; ids are never reused, so forgetting the table only costs cache misses."""
    found = _LAYOUT_IDS.get(layout)
    if found is None:
        if len(_LAYOUT_IDS) >= _LAYOUT_IDS_LIMIT:
            _LAYOUT_IDS.clear()  # bounded memory for processes that see ever new shapes
        found = _LAYOUT_IDS.setdefault(layout, next(_next_layout_id))
    return found


def _max_index(view: Sequence[int], strides: Sequence[int], offset: int) -> int:
    if any(d == 0 for d in view):
        return offset - 1
    return offset + sum((d - 1) * s for d, s in zip(view, strides))


_SCALAR_KINDS = ("bool", "int", "uint", "float", "complex")


@dataclass(eq=False)
class AclScalar(Handle):
    """aclScalar: one host value with its aclDataType (the value is copied at creation)."""

    value: bool | int | float | complex
    dtype: DataType
    destroyed: bool = field(default=False, repr=False)

    @classmethod
    def create(cls, value: object, dtype: DataType | int) -> AclScalar:
        """Convert ``value`` to ``dtype`` as the C call would read it from host memory."""
        try:
            dtype = DataType(int(dtype))
        except ValueError as exc:
            raise _invalid(str(exc)) from None
        if dtype.info.category not in _SCALAR_KINDS or dtype.numpy is None:
            raise _invalid(f"{dtype.name} cannot be a scalar type")
        if not isinstance(value, (bool, int, float, complex, np.generic)):
            raise _invalid(f"scalar value must be a number, not {type(value).__name__}")
        stored = np.asarray(value).astype(dtype.numpy).item()
        if dtype.info.category == "float":
            stored = float(np.asarray(stored, dtype=dtype.numpy).astype(np.float64))
        return cls(stored, dtype)


@dataclass(eq=False)
class AclIntArray(Handle):
    """aclIntArray: int64 values on the host."""

    values: tuple[int, ...]
    destroyed: bool = field(default=False, repr=False)

    @classmethod
    def create(cls, values: Iterable[int]) -> AclIntArray:
        """Copy ``values`` as int64 (raises AclnnError when one does not fit)."""
        out = []
        for v in values:
            iv = int(v)
            if not -(2**63) <= iv < 2**63:
                raise _invalid(f"{iv} does not fit int64")
            out.append(iv)
        return cls(tuple(out))

    def __len__(self) -> int:
        return len(self.values)


@dataclass(eq=False)
class AclFloatArray(Handle):
    """aclFloatArray: float32 values on the host."""

    values: tuple[float, ...]
    destroyed: bool = field(default=False, repr=False)

    @classmethod
    def create(cls, values: Iterable[float]) -> AclFloatArray:
        """Copy ``values`` rounded to float32, as the C array is float."""
        return cls(tuple(float(np.float32(v)) for v in values))

    def __len__(self) -> int:
        return len(self.values)


@dataclass(eq=False)
class AclBoolArray(Handle):
    """aclBoolArray: bool values on the host."""

    values: tuple[bool, ...]
    destroyed: bool = field(default=False, repr=False)

    @classmethod
    def create(cls, values: Iterable[bool]) -> AclBoolArray:
        """Copy ``values`` as bools."""
        return cls(tuple(bool(v) for v in values))

    def __len__(self) -> int:
        return len(self.values)


@dataclass(eq=False)
class AclTensorList(Handle):
    """aclTensorList: owns its tensors (destroying the list destroys them)."""

    tensors: tuple[AclTensor, ...]
    destroyed: bool = field(default=False, repr=False)

    @classmethod
    def create(cls, tensors: Iterable[AclTensor | None]) -> AclTensorList:
        """Collect tensors; a null member is refused with 161001."""
        items = tuple(tensors)
        for i, t in enumerate(items):
            if t is None or (isinstance(t, int) and t == 0):
                raise AclnnError(AclnnStatus.ACLNN_ERR_PARAM_NULLPTR, f"tensor list member {i} is null")
            if not isinstance(t, AclTensor):
                raise _invalid(f"tensor list member {i} is a {type(t).__name__}, not an aclTensor")
            t.check_alive(f"tensor list member {i}")
        return cls(items)  # type: ignore[arg-type]

    def __len__(self) -> int:
        return len(self.tensors)


@dataclass(eq=False)
class AclScalarList(Handle):
    """aclScalarList: owns its scalars."""

    scalars: tuple[AclScalar, ...]
    destroyed: bool = field(default=False, repr=False)

    @classmethod
    def create(cls, scalars: Iterable[AclScalar | None]) -> AclScalarList:
        """Collect scalars; a null member is refused with 161001."""
        items = tuple(scalars)
        for i, s in enumerate(items):
            if s is None or (isinstance(s, int) and s == 0):
                raise AclnnError(AclnnStatus.ACLNN_ERR_PARAM_NULLPTR, f"scalar list member {i} is null")
            if not isinstance(s, AclScalar):
                raise _invalid(f"scalar list member {i} is a {type(s).__name__}, not an aclScalar")
        return cls(items)  # type: ignore[arg-type]

    def __len__(self) -> int:
        return len(self.scalars)

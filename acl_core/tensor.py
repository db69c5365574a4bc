"""The aclTensor model and the host-side argument objects of aclnn (scalars, arrays, lists).

An aclTensor is a *view* (dims, strides and offset in elements) over a *storage* (dims, format,
data address). The checks made here are the ones aclCreateTensor makes; per-operator checks live in
the op specs.
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

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


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
"""The range of the C ``int64_t`` that dims, strides, offsets and aclIntArray values travel in."""
OVERLAP_EXACT_LIMIT = 1 << 16
"""Views up to this many elements whose overlap the stride test cannot settle are checked element by element."""


def _invalid(message: str) -> AclnnError:
    return AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, message)


def _nullptr(message: str) -> AclnnError:
    return AclnnError(AclnnStatus.ACLNN_ERR_PARAM_NULLPTR, message)


def _int64(value: object, what: str) -> int:
    """``value`` as a C int64_t (161002 for a non-integer or a value outside its range)."""
    try:
        iv = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise _invalid(f"{what} must be an integer, not {type(value).__name__}") from None
    if not INT64_MIN <= iv <= INT64_MAX:
        raise _invalid(f"{what}={iv} does not fit int64_t")
    return iv


def _int64s(values: object, what: str) -> tuple[int, ...]:
    """An int64_t array argument (161001 when null, 161002 when it is not a sequence of int64_t)."""
    if values is None:
        raise _nullptr(f"{what} is null")
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise _invalid(f"{what} must be a sequence of integers, not {type(values).__name__}")
    return tuple(_int64(v, f"{what}[{i}]") for i, v in enumerate(values))


def _members(items: object, what: str) -> tuple[object, ...]:
    """The members of a list argument (161001 when null, 161002 when it is not a sequence)."""
    if items is None:
        raise _nullptr(f"{what} is null")
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        raise _invalid(f"{what} must be a sequence, not {type(items).__name__}")
    return tuple(items)


_Enum = TypeVar("_Enum", DataType, Format)


def _enum(kind: type[_Enum], value: object, what: str) -> _Enum:
    """An aclDataType / aclFormat argument (161002 for a non-integer or an unknown value)."""
    try:
        return kind(operator.index(value))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise _invalid(f"{what} {value!r} is not an {kind.__name__}") from None


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
        """Validate the arguments as aclCreateTensor does and build the tensor (raises AclnnError).

        Every number travels as the C int64_t it is (the address as a pointer): a value of another
        type or outside that range is refused with 161002, a null viewDims with 161001.
        """
        dtype = _enum(DataType, dtype, "dataType")
        format = _enum(Format, format, "format")
        if dtype in (DataType.ACL_DT_UNDEFINED, DataType.ACL_STRING):
            raise _invalid(f"{dtype.name} cannot be a tensor element type")
        view = _int64s(view_dims, "viewDims")
        if len(view) > MAX_RANK:
            raise _invalid(f"rank {len(view)} exceeds the maximum of {MAX_RANK}")
        if any(d < 0 for d in view):
            raise _invalid(f"negative dimension in view dims {view}")
        stride = contiguous_strides(view) if strides is None else _int64s(strides, "stride")
        if len(stride) != len(view):
            raise _invalid(f"{len(stride)} strides given for a rank-{len(view)} view")
        if any(s < 0 for s in stride):
            raise _invalid(f"negative stride in {stride}")
        offset = _int64(offset, "offset")
        if offset < 0:
            raise _invalid(f"negative offset {offset}")
        if storage_dims is None:
            span = _max_index(view, stride, offset) + 1
            storage = view if stride == contiguous_strides(view) and offset == 0 else (span,)
        else:
            storage = _int64s(storage_dims, "storageDims")
        if any(d < 0 for d in storage):
            raise _invalid(f"negative dimension in storage dims {storage}")
        address = 0 if data is None else _address(data)
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

    @functools.cached_property
    def numel(self) -> int:
        """Number of elements in the view."""
        return math.prod(self.view_dims)

    @functools.cached_property
    def overlaps_itself(self) -> bool:
        """True when two elements of the view share one storage location (a stride-0 broadcast, for one).

        Decided from dims and strides in time bounded by the rank, except for interleaved views that
        neither the stride test nor the pigeonhole test settles: those are checked element by element
        up to :data:`OVERLAP_EXACT_LIMIT` elements and taken as free of overlap beyond (as PyTorch
        does for the views its own test cannot settle).
        """
        if self.format.is_private:
            return False  # a private format's layout is the format's, not the strides'
        return _view_overlaps(self.view_dims, self.strides)

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


def _address(value: object) -> int:
    """A device address argument: an integer in [0, 2^64) (161002 otherwise)."""
    try:
        address = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise _invalid(f"data must be a device address (an integer), not {type(value).__name__}") from None
    if not 0 <= address < 2**64:
        raise _invalid(f"data address {address:#x} is not a 64-bit pointer")
    return address


def _view_overlaps(view: Sequence[int], strides: Sequence[int]) -> bool:
    dims = sorted((s, d) for d, s in zip(view, strides) if d > 1)
    if not dims:
        return False
    if dims[0][0] == 0:
        return True  # a stride-0 dim of size > 1 repeats one location
    reach = 0  # the largest index the dims taken so far reach
    for s, d in dims:
        if s <= reach:
            break
        reach += (d - 1) * s
    else:
        return False  # each stride steps past everything the smaller ones reach: no two elements meet
    count = math.prod(d for _, d in dims)
    span = sum((d - 1) * s for s, d in dims) + 1
    if count > span:
        return True  # more elements than distinct locations
    if count > OVERLAP_EXACT_LIMIT:
        return False
    index = np.zeros(1, dtype=np.int64)
    for s, d in dims:
        index = (index[:, None] + np.arange(d, dtype=np.int64) * s).reshape(-1)
    return bool(np.unique(index).size != index.size)


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
        """Convert ``value`` to ``dtype`` as the C call would read it from host memory.

        A value the type cannot hold is refused with 161002 (C could not have written it there): a
        complex value for a real type, an integer outside an integer type's range, a NaN or an
        infinity for an integer type, a finite value too large for a float type. A float for an
        integer type is truncated, as C converts it.
        """
        dtype = _enum(DataType, dtype, "dataType")
        category = dtype.info.category
        if category not in _SCALAR_KINDS or dtype.numpy is None:
            raise _invalid(f"{dtype.name} cannot be a scalar type")
        if value is None:
            raise _nullptr("scalar value is null")
        if isinstance(value, np.generic) and not isinstance(value, (np.number, np.bool_)):
            raise _invalid(f"scalar value must be a number, not {type(value).__name__}")
        if not isinstance(value, (bool, int, float, complex, np.generic)):
            raise _invalid(f"scalar value must be a number, not {type(value).__name__}")
        if isinstance(value, (complex, np.complexfloating)) and category != "complex":
            raise _invalid(f"a complex value ({value!r}) cannot be an {dtype.name} scalar")
        if category in ("int", "uint") and not isinstance(value, (bool, np.bool_)):
            value = _whole(value, dtype)
        try:
            with np.errstate(over="ignore"):
                stored = np.asarray(value).astype(dtype.numpy).item()
        except (OverflowError, ValueError, TypeError):
            raise _invalid(f"{value!r} cannot be an {dtype.name} scalar") from None
        if category == "float":
            stored = float(np.asarray(stored, dtype=dtype.numpy).astype(np.float64))
            if math.isinf(stored) and math.isfinite(value):  # type: ignore[arg-type]
                raise _invalid(f"{value!r} does not fit {dtype.name} (it would become {stored})")
        return cls(stored, dtype)


def _whole(value: object, dtype: DataType) -> int:
    """A number as a value of the integer ``dtype`` (floats truncated toward zero, as C converts them)."""
    if isinstance(value, (float, np.floating)):
        if not math.isfinite(value):
            raise _invalid(f"{value!r} cannot be an {dtype.name} scalar")
    whole = int(value)  # type: ignore[call-overload]
    limits = np.iinfo(dtype.numpy)
    if not int(limits.min) <= whole <= int(limits.max):
        raise _invalid(f"{value!r} does not fit {dtype.name} (range [{limits.min}, {limits.max}])")
    return whole


@dataclass(eq=False)
class AclIntArray(Handle):
    """aclIntArray: int64 values on the host."""

    values: tuple[int, ...]
    destroyed: bool = field(default=False, repr=False)

    @classmethod
    def create(cls, values: Iterable[int]) -> AclIntArray:
        """Copy ``values`` as int64 (161001 when null; 161002 for a non-integer or one that does not fit)."""
        return cls(_int64s(values, "aclIntArray value"))

    def __len__(self) -> int:
        return len(self.values)


@dataclass(eq=False)
class AclFloatArray(Handle):
    """aclFloatArray: float32 values on the host."""

    values: tuple[float, ...]
    destroyed: bool = field(default=False, repr=False)

    @classmethod
    def create(cls, values: Iterable[float]) -> AclFloatArray:
        """Copy ``values`` rounded to float32, as the C array is float (161001 when null; 161002 for a non-real)."""
        out = []
        for i, v in enumerate(_members(values, "aclFloatArray value")):
            if not isinstance(v, (bool, int, float, np.integer, np.floating, np.bool_)):
                raise _invalid(f"aclFloatArray value[{i}] must be a real number, not {type(v).__name__}")
            try:
                out.append(float(np.float32(float(v))))
            except OverflowError:
                raise _invalid(f"aclFloatArray value[{i}]={v!r} does not fit a float") from None
        return cls(tuple(out))

    def __len__(self) -> int:
        return len(self.values)


@dataclass(eq=False)
class AclBoolArray(Handle):
    """aclBoolArray: bool values on the host."""

    values: tuple[bool, ...]
    destroyed: bool = field(default=False, repr=False)

    @classmethod
    def create(cls, values: Iterable[bool]) -> AclBoolArray:
        """Copy ``values`` as bools (161001 when null; 161002 for a value that is not a bool or an integer)."""
        out = []
        for i, v in enumerate(_members(values, "aclBoolArray value")):
            if not isinstance(v, (bool, int, np.bool_, np.integer)):
                raise _invalid(f"aclBoolArray value[{i}] must be a bool, not {type(v).__name__}")
            out.append(bool(v))
        return cls(tuple(out))

    def __len__(self) -> int:
        return len(self.values)


@dataclass(eq=False)
class AclTensorList(Handle):
    """aclTensorList: owns its tensors (destroying the list destroys them)."""

    tensors: tuple[AclTensor, ...]
    destroyed: bool = field(default=False, repr=False)

    @classmethod
    def create(cls, tensors: Iterable[AclTensor | None]) -> AclTensorList:
        """Collect tensors; a null list or member is refused with 161001."""
        items = _members(tensors, "aclTensorList")
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
        """Collect scalars; a null list or member is refused with 161001."""
        items = _members(scalars, "aclScalarList")
        for i, s in enumerate(items):
            if s is None or (isinstance(s, int) and s == 0):
                raise AclnnError(AclnnStatus.ACLNN_ERR_PARAM_NULLPTR, f"scalar list member {i} is null")
            if not isinstance(s, AclScalar):
                raise _invalid(f"scalar list member {i} is a {type(s).__name__}, not an aclScalar")
        return cls(items)  # type: ignore[arg-type]

    def __len__(self) -> int:
        return len(self.scalars)

"""The Pythonic layer: NumPy in, NumPy out, one call per operator, typed exceptions.

``eager.run("Add", self=a, other=b, alpha=1.0)`` copies the arrays to the backend's device, allocates
the outputs from the operator's output rule, runs both aclnn phases on a stream, waits, and returns
the outputs as NumPy arrays keyed by their official names. Errors raise
:class:`~acl_core.errors.AclnnError` / :class:`~acl_core.errors.AclError` with the CANN code.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from acl_core.aclnn import execute, get_workspace_size
from acl_core.backend import Backend
from acl_core.dtypes import DataType, from_numpy, storage_nbytes
from acl_core.errors import AclnnError, AclnnStatus
from acl_core.formats import Format
from acl_core.plugin import get_backend
from acl_core.spec.ops import get_spec
from acl_core.spec.opspec import Kind, OpSpec, OutInfo, Param, Role, invalid
from acl_core.spec.runtime import MemcpyKind
from acl_core.spec.validate import check_inputs
from acl_core.tensor import (
    AclBoolArray,
    AclFloatArray,
    AclIntArray,
    AclScalar,
    AclScalarList,
    AclTensor,
    AclTensorList,
    contiguous_strides,
)

LAYOUTS = ("contiguous", "padded", "transposed", "offset", "expanded")
"""How :func:`to_device` lays a tensor out: packed; with gaps between rows and an offset; with reversed
dims; packed but starting :data:`VIEW_OFFSET` elements into a larger allocation; or, for an array that
NumPy holds as a broadcast view (zero strides, ``np.broadcast_to``), with those strides 0 over storage
of the smaller array (any other array is placed contiguous). Stride 0 is for inputs only: an output
with a zero stride would write one element many times."""
VIEW_OFFSET = 37
"""Elements before the view in the ``offset`` layout: odd, so no itemsize keeps the view 16-byte aligned."""


def _backend(backend: Backend | str | None) -> Backend:
    b = backend if isinstance(backend, Backend) else get_backend(backend)
    b.runtime.ensure_device()
    return b


class DeviceArray:
    """A tensor in a backend's device memory that Python owns: freed by :meth:`free` or garbage collection."""

    def __init__(
        self,
        backend: Backend,
        shape: Sequence[int],
        dtype: DataType,
        storage_elems: int,
        strides: Sequence[int] | None = None,
        offset: int = 0,
        format: Format = Format.ACL_FORMAT_ND,
        storage_dims: Sequence[int] | None = None,
    ) -> None:
        self.backend = backend
        self.shape = tuple(int(d) for d in shape)
        self.dtype = dtype
        self.strides = tuple(strides) if strides is not None else contiguous_strides(self.shape)
        self.offset = offset
        self.storage_elems = storage_elems
        self.storage_dims = tuple(storage_dims) if storage_dims is not None else (storage_elems,)
        self.format = format
        self.nbytes = max(storage_nbytes(dtype, storage_elems), 1)
        self.address = backend.runtime.malloc(self.nbytes)
        self._tensor: AclTensor | None = None
        self._release: Callable[[], None] | None = None
        self._exports = 0
        self._free_pending = False
        self._export_lock = threading.Lock()

    @classmethod
    def adopt(
        cls,
        backend: Backend,
        shape: Sequence[int],
        dtype: DataType,
        strides: Sequence[int],
        storage_elems: int,
        address: int,
        release: Callable[[], None],
    ) -> DeviceArray:
        """An array over memory someone else owns (a DLPack import); ``release`` runs once, at free()."""
        self = cls.__new__(cls)
        self.backend = backend
        self.shape = tuple(int(d) for d in shape)
        self.dtype = dtype
        self.strides = tuple(int(s) for s in strides)
        self.offset = 0
        self.storage_elems = storage_elems
        self.storage_dims = (storage_elems,)
        self.format = Format.ACL_FORMAT_ND
        self.nbytes = max(storage_nbytes(dtype, storage_elems), 1)
        self.address = address
        self._tensor = None
        self._release = release
        self._exports = 0
        self._free_pending = False
        self._export_lock = threading.Lock()
        return self

    def __dlpack__(
        self,
        *,
        stream: int | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        """A DLPack capsule over this array's memory, no copy (see :func:`acl_core.dlpack.export`)."""
        from acl_core import dlpack

        if copy:
            raise BufferError("acl-core exports its own memory only (copy=True is not supported)")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"the array lives on DLPack device {self.__dlpack_device__()}, not {tuple(dl_device)}")
        return dlpack.export(self, stream)

    def __dlpack_device__(self) -> tuple[int, int]:
        """(DLDeviceType, device id) of this array's memory."""
        from acl_core import dlpack

        return dlpack.device_of(self.backend)

    def _export_taken(self) -> None:
        """Count one more DLPack export (BufferError once the array is freed, even by another thread)."""
        with self._export_lock:
            if not self.address:
                raise BufferError("the device array was freed")
            self._exports += 1

    def _export_released(self) -> None:
        """Count an export's deleter; the last one runs a free() that was asked for meanwhile."""
        with self._export_lock:
            self._exports -= 1
            free_now = self._exports == 0 and self._free_pending
        if free_now:
            self.free()

    def tensor(self) -> AclTensor:
        """The aclTensor describing this array (made once)."""
        if self._tensor is None:
            self._tensor = AclTensor.create(
                self.shape, self.dtype, self.strides, self.offset, self.format, self.storage_dims, self.address
            )
        return self._tensor

    def follow_view(self) -> None:
        """Take the view dims an operator wrote back into this array's tensor (acl_core.runtime.view_writeback)."""
        if self._tensor is not None and self._tensor.view_dims != self.shape:
            self.shape = self._tensor.view_dims

    def storage_bytes(self) -> np.ndarray:
        """A host copy of the whole storage as bytes, once the device's queued work has run.

        Like torch's ``.cpu()``, reading waits for the device (aclrtMemcpy alone waits for no stream), so
        a result read here is never stale; a deferred kernel error surfaces here as its typed error.
        """
        host = np.empty(self.nbytes, dtype=np.uint8)
        rt = self.backend.runtime
        rt.synchronize_device()
        rt.register_host(host.ctypes.data, host.nbytes, host)
        try:
            rt.memcpy(host.ctypes.data, host.nbytes, self.address, self.nbytes, MemcpyKind.ACL_MEMCPY_DEVICE_TO_HOST)
        finally:
            rt.unregister(host.ctypes.data)
        return host

    def numpy(self) -> np.ndarray:
        """A host copy of the view (sub-byte types unpacked, one element per array item)."""
        np_dtype = self.dtype.numpy
        if np_dtype is None:
            raise TypeError(f"{self.dtype.name} has no NumPy dtype; use storage_bytes()")
        raw = self.storage_bytes()
        if self.dtype.is_packed:
            elems = _unpack4(raw, self.dtype)[: self.storage_elems]
        else:
            elems = raw[: self.storage_elems * np_dtype.itemsize].view(np_dtype)
        if math.prod(self.shape) == 0:
            return np.empty(self.shape, dtype=np_dtype)
        item = elems.itemsize
        bits = elems.view(np.uint8) if item == 1 else elems  # as_strided rejects float8_e5m2's typestr '<f1'
        view = np.lib.stride_tricks.as_strided(bits[self.offset :], self.shape, tuple(s * item for s in self.strides))
        return view.copy().view(np_dtype) if item == 1 else view.copy()

    def free(self) -> None:
        """Release the device memory now (idempotent), or when the last outstanding DLPack export is released."""
        # the decision and the claim of the address under the lock (an export's deleter may run on another
        # thread); the release itself outside it, since a release may unregister memory and re-enter
        with self._export_lock:
            if self._exports:
                self._free_pending = True
                return
            self._free_pending = False
            release, self._release = self._release, None
            address, self.address = self.address, 0
        if release is not None:
            release()
        elif address:
            self.backend.runtime.free(address)

    def __del__(self) -> None:
        try:
            self.free()
        except Exception:
            pass

    def __repr__(self) -> str:
        return (
            f"DeviceArray({list(self.shape)}, {self.dtype.short}, backend={self.backend.name!r}, at {self.address:#x})"
        )


def _unpack4(raw: np.ndarray, dtype: DataType) -> np.ndarray:
    nibbles = np.empty(raw.size * 2, dtype=np.uint8)
    nibbles[0::2], nibbles[1::2] = raw & 0x0F, raw >> 4
    np_dtype = dtype.numpy
    assert np_dtype is not None
    if dtype == DataType.ACL_INT4:
        return ((nibbles.astype(np.int8) ^ 8) - 8).astype(np_dtype)
    return nibbles.view(np_dtype)


def _pack4(values: np.ndarray, dtype: DataType) -> np.ndarray:
    codes = (values.astype(np.int8).view(np.uint8) if dtype == DataType.ACL_INT4 else values.view(np.uint8)) & 0x0F
    if codes.size % 2:
        codes = np.concatenate([codes, np.zeros(1, np.uint8)])
    return (codes[0::2] | (codes[1::2] << 4)).astype(np.uint8)


def empty(shape: Sequence[int], dtype: DataType | int, backend: Backend | str | None = None) -> DeviceArray:
    """An uninitialised contiguous device array."""
    dtype = DataType(int(dtype))
    return DeviceArray(_backend(backend), shape, dtype, max(math.prod(shape), 1), storage_dims=tuple(shape) or (1,))


def to_device(
    value: np.ndarray,
    backend: Backend | str | None = None,
    *,
    dtype: DataType | None = None,
    layout: str = "contiguous",
) -> DeviceArray:
    """Copy a NumPy array to the backend's device, laid out as ``layout`` (see :data:`LAYOUTS`)."""
    b = _backend(backend)
    arr = np.asarray(value)
    acl_dtype = from_numpy(arr.dtype) if dtype is None else dtype
    np_dtype = acl_dtype.numpy
    assert np_dtype is not None
    arr = arr.astype(np_dtype, copy=False)
    shape = arr.shape
    if layout == "contiguous" or (arr.ndim == 0 and layout != "offset") or acl_dtype.is_packed or arr.size == 0:
        storage = np.ascontiguousarray(arr).reshape(-1)
        da = DeviceArray(b, shape, acl_dtype, max(storage.size, 1), storage_dims=shape if arr.ndim else (1,))
    elif layout == "padded":
        padded = (*shape[:-1], shape[-1] * 2 + 1)
        offset = 3
        strides = contiguous_strides(padded)
        storage = np.zeros(offset + math.prod(padded), dtype=np_dtype)
        one_byte = storage.itemsize == 1  # as_strided rejects float8_e5m2's typestr '<f1': place bytes instead
        target = storage.view(np.uint8) if one_byte else storage
        np.lib.stride_tricks.as_strided(target[offset:], shape, tuple(s * storage.itemsize for s in strides))[...] = (
            arr.view(np.uint8) if one_byte else arr
        )
        da = DeviceArray(b, shape, acl_dtype, storage.size, strides, offset)
    elif layout == "transposed":
        storage = np.ascontiguousarray(np.transpose(arr)).reshape(-1)
        rev = contiguous_strides(shape[::-1])[::-1]
        da = DeviceArray(b, shape, acl_dtype, storage.size, rev, 0, storage_dims=shape[::-1])
    elif layout == "offset":
        # the elements around the view hold other values, so a kernel that ignores the offset reads wrong data
        flat = np.ascontiguousarray(arr).reshape(-1)
        storage = np.resize(flat[::-1], VIEW_OFFSET + flat.size + 5)
        storage[VIEW_OFFSET : VIEW_OFFSET + flat.size] = flat
        da = DeviceArray(b, shape, acl_dtype, storage.size, contiguous_strides(shape), VIEW_OFFSET)
    elif layout == "expanded":
        zero = tuple(st == 0 and n > 1 for st, n in zip(arr.strides, shape))
        base = np.ascontiguousarray(arr[tuple(slice(0, 1) if z else slice(None) for z in zero)])
        strides = tuple(0 if z else st for z, st in zip(zero, contiguous_strides(base.shape)))
        storage = base.reshape(-1)
        da = DeviceArray(b, shape, acl_dtype, storage.size, strides, 0, storage_dims=base.shape)
    else:
        raise ValueError(f"unknown layout {layout!r}; expected one of {LAYOUTS}")
    raw = _pack4(storage, acl_dtype) if acl_dtype.is_packed else storage.view(np.uint8)
    rt = b.runtime
    host = np.ascontiguousarray(raw)
    if host.nbytes:
        rt.register_host(host.ctypes.data, host.nbytes, host)
        try:
            rt.memcpy(da.address, da.nbytes, host.ctypes.data, host.nbytes, MemcpyKind.ACL_MEMCPY_HOST_TO_DEVICE)
        finally:
            rt.unregister(host.ctypes.data)
    return da


def to_scalar(value: Any) -> AclScalar:
    """An aclScalar for a Python or NumPy value: bool, int64, float64 or complex128 for Python values,
    the value's own dtype for NumPy scalars, ``(value, aclDataType)`` for an explicit type."""
    if isinstance(value, AclScalar):
        return value
    if isinstance(value, tuple) and len(value) == 2:
        return AclScalar.create(value[0], value[1])
    if isinstance(value, (bool, np.bool_)):
        return AclScalar.create(bool(value), DataType.ACL_BOOL)
    if isinstance(value, int):
        return AclScalar.create(value, DataType.ACL_INT64)
    if isinstance(value, np.generic):
        return AclScalar.create(value.item(), from_numpy(value.dtype))
    if isinstance(value, complex):
        return AclScalar.create(value, DataType.ACL_COMPLEX128)
    if isinstance(value, (str, bytes)):  # float("1") would parse it: a string is no number here
        raise AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, f"a scalar must be a number, not {type(value).__name__}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise AclnnError(
            AclnnStatus.ACLNN_ERR_PARAM_INVALID, f"a scalar must be a number, not {type(value).__name__}"
        ) from None
    return AclScalar.create(number, DataType.ACL_DOUBLE)


class _Arguments:
    """Converts Python values to aclnn arguments and remembers the device arrays it made."""

    def __init__(self, backend: Backend, layout: str) -> None:
        self.backend = backend
        self.layout = layout
        self.arrays: dict[str, DeviceArray | list[DeviceArray]] = {}

    def tensor(self, name: str, value: Any) -> AclTensor | None:
        if value is None:
            return None
        if isinstance(value, AclTensor):
            return value
        if isinstance(value, DeviceArray):
            return value.tensor()
        place = getattr(value, "acl_to_device", None)  # values in a private format (acl_core.nz.NzArray)
        da = (
            place(self.backend) if place is not None else to_device(np.asarray(value), self.backend, layout=self.layout)
        )
        self.arrays[name] = da
        return da.tensor()

    def convert(self, spec: OpSpec, kwargs: dict[str, Any]) -> dict[str, Any]:
        args: dict[str, Any] = {}
        for p in spec.params:
            try:
                self._convert_one(p, kwargs.get(p.name, p.default), args)
            except (TypeError, ValueError, OverflowError) as exc:  # a value no aclnn argument can carry
                raise AclnnError(
                    AclnnStatus.ACLNN_ERR_PARAM_INVALID,
                    f"{p.name}: {type(exc).__name__}: {exc} (cannot pass it as {p.kind.value})",
                ) from None
        return args

    def _convert_one(self, p: Param, value: Any, args: dict[str, Any]) -> None:
        """Put the aclnn form of ``value`` for ``p`` into ``args`` (TypeError/ValueError for what cannot be one)."""
        if value is None:
            args[p.name] = None
        elif p.kind is Kind.TENSOR:
            args[p.name] = self.tensor(p.name, value)
        elif p.kind is Kind.TENSOR_LIST:
            if isinstance(value, AclTensorList):
                args[p.name] = value
                return
            arrays: list[DeviceArray] = []
            self.arrays[p.name] = arrays  # filled as it goes, so a member that fails leaves none unfreed
            for v in value:
                place = getattr(v, "acl_to_device", None)  # a member in a private format (acl_core.nz.NzArray)
                if isinstance(v, DeviceArray):
                    arrays.append(v)
                elif place is not None:
                    arrays.append(place(self.backend))
                else:
                    arrays.append(to_device(np.asarray(v), self.backend, layout=self.layout))
            args[p.name] = AclTensorList.create([a.tensor() for a in arrays])
        elif p.kind is Kind.SCALAR:
            args[p.name] = to_scalar(value)
        elif p.kind is Kind.SCALAR_LIST:
            args[p.name] = (
                value if isinstance(value, AclScalarList) else AclScalarList.create([to_scalar(v) for v in value])
            )
        elif p.kind is Kind.INT_ARRAY:
            args[p.name] = value if isinstance(value, AclIntArray) else AclIntArray.create(value)
        elif p.kind is Kind.FLOAT_ARRAY:
            args[p.name] = value if isinstance(value, AclFloatArray) else AclFloatArray.create(value)
        elif p.kind is Kind.BOOL_ARRAY:
            args[p.name] = value if isinstance(value, AclBoolArray) else AclBoolArray.create(value)
        else:
            args[p.name] = value

    def free(self) -> None:
        for item in self.arrays.values():
            for da in item if isinstance(item, list) else [item]:
                da.free()


SENTINEL = 0xA5
"""Byte value that fills guarded storage around outputs (see ``run(guard=True)``)."""


class OutOfBoundsWrite(AssertionError):
    """An operator changed device bytes it does not own: outside an output's view, or in an input."""


def _guarded_empty(shape: Sequence[int], dtype: DataType, backend: Backend) -> DeviceArray:
    """An output whose view sits inside sentinel-filled storage: gaps between rows, before and after."""
    if dtype.is_packed or dtype.numpy is None:
        # sub-byte storage has no guard bands (see _check_guards), but it is still filled: a freed block
        # handed back with a previous run's result would otherwise pass for an operator that wrote nothing
        da = empty(shape, dtype, backend)
        backend.runtime.memset(da.address, da.nbytes, SENTINEL, da.nbytes)
        return da
    shape = tuple(shape)
    padded = (*shape[:-1], shape[-1] * 2 + 1) if shape else (1,)
    offset = 3
    strides = contiguous_strides(padded)[: len(shape)] if shape else ()
    elems = offset + math.prod(padded) + 3
    da = DeviceArray(backend, shape, dtype, elems, strides, offset)
    backend.runtime.memset(da.address, da.nbytes, SENTINEL, da.nbytes)
    return da


def _view_byte_mask(da: DeviceArray) -> np.ndarray:
    """True for the storage bytes that belong to ``da``'s view."""
    item = da.dtype.numpy.itemsize if da.dtype.numpy is not None else 1
    mask = np.zeros(da.nbytes, dtype=bool)
    if math.prod(da.shape) == 0:
        return mask
    index = np.arange(da.storage_elems)
    elems = np.lib.stride_tricks.as_strided(
        index[da.offset :], da.shape, tuple(s * index.itemsize for s in da.strides)
    ).reshape(-1)
    for k in range(item):
        mask[elems * item + k] = True
    return mask


def _check_guards(op: str, guarded: dict[str, DeviceArray], inputs: dict[str, tuple[DeviceArray, np.ndarray]]) -> None:
    for name, da in guarded.items():
        if da.dtype.is_packed or da.dtype.numpy is None:
            continue
        raw = da.storage_bytes()
        outside = ~_view_byte_mask(da)
        changed = int(np.count_nonzero(raw[outside] != SENTINEL))
        if changed:
            raise OutOfBoundsWrite(f"{op} changed {changed} bytes of {name}'s storage outside its view")
    for name, (da, before) in inputs.items():
        if not np.array_equal(da.storage_bytes(), before):
            raise OutOfBoundsWrite(f"{op} changed its input {name}")


def allocate_outputs(
    spec: OpSpec,
    args: dict[str, Any],
    backend: Backend,
    *,
    out_dtypes: Mapping[str, DataType] | None = None,
    make: Callable[[Sequence[int], DataType, Backend], DeviceArray] = empty,
) -> dict[str, DeviceArray | list[DeviceArray]]:
    """Allocate each output ``args`` leaves None by the operator's output rule and put its tensor into ``args``.

    ``out_dtypes`` overrides an output's dtype, ``make`` allocates (e.g. in sentinel-filled storage); returns the new
    arrays by parameter name, for the caller to free.
    """
    infos = check_inputs(spec, args, backend.runtime, outputs_required=False).plan["outputs"]
    made: dict[str, DeviceArray | list[DeviceArray]] = {}
    for p in spec.params:
        info = infos.get(p.name)
        if p.role is not Role.OUT or args[p.name] is not None or info is None:
            continue
        override = (out_dtypes or {}).get(p.name)
        if isinstance(info, list):
            arrays = [make(i.shape, i.dtype if override is None else override, backend) for i in info]
            args[p.name] = AclTensorList.create([a.tensor() for a in arrays])
            made[p.name] = arrays
        else:
            assert isinstance(info, OutInfo)
            da = make(info.shape, info.dtype if override is None else override, backend)
            args[p.name] = da.tensor()
            made[p.name] = da
    return made


def run(
    op: str,
    backend: Backend | str | None = None,
    *,
    layout: str = "contiguous",
    out_dtypes: dict[str, DataType] | None = None,
    op_args: Mapping[str, Any] | None = None,
    guard: bool = False,
    **kwargs: Any,
) -> dict[str, Any]:
    """Run operator ``op`` on NumPy inputs; return every output (and in-out) as NumPy, by official name.

    Outputs not given are allocated from the output rule (``out_dtypes`` overrides their dtype);
    in-out tensors (``selfRef``) are copied in and their new value returned. ``op_args`` carries
    operator arguments by official name too, for names that clash with this function's own keywords
    (ApplyRotaryPosEmb's ``layout``); its entries win over ``kwargs``; a name the operator does not
    have raises AclnnError 161002. With ``guard``, outputs sit
    in sentinel-filled storage and inputs are snapshotted: a write anywhere else raises
    :class:`OutOfBoundsWrite`.
    """
    if op_args:
        kwargs = {**kwargs, **op_args}
    spec = get_spec(op)
    unknown = [name for name in kwargs if name not in spec.param_names]
    if unknown:  # a misspelt argument would otherwise fall back to its default without a word
        raise invalid(f"{op} has no parameter {unknown[0]!r}; its parameters are {', '.join(spec.param_names)}")
    b = _backend(backend)
    conv = _Arguments(b, layout)
    guarded: dict[str, DeviceArray] = {}
    try:
        args = conv.convert(spec, kwargs)
        made = allocate_outputs(spec, args, b, out_dtypes=out_dtypes, make=_guarded_empty if guard else empty)
        conv.arrays.update(made)
        if guard:
            for name, new in made.items():
                if isinstance(new, list):
                    guarded.update({f"{name}[{i}]": a for i, a in enumerate(new)})
                else:
                    guarded[name] = new
        inputs = {}
        if guard:
            for p in spec.params:
                item = conv.arrays.get(p.name)
                if p.role is Role.IN and item is not None:
                    for i, da in enumerate(item if isinstance(item, list) else [item]):
                        inputs[f"{p.name}[{i}]" if isinstance(item, list) else p.name] = (da, da.storage_bytes())
        size, executor = get_workspace_size(spec, [], args, backend=b)
        workspace = b.runtime.malloc(size) if size else 0
        try:
            stream = b.runtime.create_stream()
            try:
                execute(spec, workspace, size, executor, stream)
                b.runtime.synchronize_stream(stream)
                for p in spec.outputs:
                    item = conv.arrays.get(p.name)
                    if isinstance(item, DeviceArray):
                        item.follow_view()  # an output whose real size the op wrote back (Nonzero)
            finally:
                b.runtime.destroy_stream(stream)
        finally:
            if workspace:
                b.runtime.free(workspace)
        if guard:
            _check_guards(op, guarded, inputs)
        return _collect(spec, conv)
    finally:
        conv.free()


def _collect(spec: OpSpec, conv: _Arguments) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for p in spec.outputs:
        item = conv.arrays.get(p.name)
        if item is None:
            continue
        results[p.name] = [a.numpy() for a in item] if isinstance(item, list) else item.numpy()
    return results


def ops() -> Iterable[str]:
    """Names of every declared operator."""
    from acl_core.spec.ops import all_specs

    return sorted(all_specs())

"""DLPack out of and into acl-core device arrays, by the public ``dlpack.h`` ABI through ctypes.

Export (:func:`export`, behind ``DeviceArray.__dlpack__``): a ``"dltensor"`` capsule whose
``DLManagedTensor`` points at the array's own memory; the array stays alive (and its memory
allocated, even after an explicit ``free()``) until the consumer calls the deleter. A capsule that
was never consumed calls the deleter itself when it is collected. Import (:func:`from_dlpack`): a
producer's device tensor becomes a :class:`~acl_core.eager.DeviceArray` over the same memory,
registered with the runtime as external device memory until the array is freed, when the producer's
deleter runs. Only the unversioned ``DLManagedTensor`` is produced (a consumer asking for
``max_version`` >= 1 accepts it, as the array API standard says).
"""

from __future__ import annotations

import ctypes
import math
import threading
from typing import TYPE_CHECKING, Any

from acl_core.dtypes import DataType
from acl_core.runtime import RangeKind

if TYPE_CHECKING:
    from acl_core.backend import Backend
    from acl_core.eager import DeviceArray

KDL_CPU = 1
KDL_CUDA = 2
KDL_CUDA_HOST = 3
KDL_ROCM = 10

_INT, _UINT, _FLOAT, _BFLOAT, _COMPLEX, _BOOL = 0, 1, 2, 4, 5, 6
_CODES: dict[DataType, tuple[int, int]] = {
    DataType.ACL_FLOAT: (_FLOAT, 32),
    DataType.ACL_FLOAT16: (_FLOAT, 16),
    DataType.ACL_DOUBLE: (_FLOAT, 64),
    DataType.ACL_BF16: (_BFLOAT, 16),
    DataType.ACL_INT8: (_INT, 8),
    DataType.ACL_INT16: (_INT, 16),
    DataType.ACL_INT32: (_INT, 32),
    DataType.ACL_INT64: (_INT, 64),
    DataType.ACL_UINT8: (_UINT, 8),
    DataType.ACL_UINT16: (_UINT, 16),
    DataType.ACL_UINT32: (_UINT, 32),
    DataType.ACL_UINT64: (_UINT, 64),
    DataType.ACL_BOOL: (_BOOL, 8),
    DataType.ACL_COMPLEX64: (_COMPLEX, 64),
    DataType.ACL_COMPLEX128: (_COMPLEX, 128),
}
_TYPES = {code: dt for dt, code in _CODES.items()}


class DLDevice(ctypes.Structure):
    """dlpack.h DLDevice."""

    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    """dlpack.h DLDataType."""

    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    """dlpack.h DLTensor (shape and strides in elements; strides may be NULL for row-major)."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    """dlpack.h DLManagedTensor (the legacy, unversioned struct of the ``"dltensor"`` capsule)."""


_Deleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", _Deleter),
]

# A private handle on the Python C API: ctypes.pythonapi's function objects are shared by every library in
# the process, and one that sets its own argtypes on them (py_object for a capsule) would break these calls.
_api = ctypes.PyDLL(None, handle=ctypes.pythonapi._handle)
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.c_void_p, ctypes.c_char_p]

# PyCapsule keeps the name pointer, not a copy: these buffers live as long as the module
_NAME = ctypes.create_string_buffer(b"dltensor")
_USED = ctypes.create_string_buffer(b"used_dltensor")


class _Export:
    """What one exported capsule keeps alive: the array, the structs, the shape and strides arrays."""

    def __init__(self, array: DeviceArray, managed: DLManagedTensor, shape: Any, strides: Any) -> None:
        self.array = array
        self.managed = managed
        self.shape = shape
        self.strides = strides


_lock = threading.Lock()
_exports: dict[int, _Export] = {}


@_Deleter
def _delete(managed: Any) -> None:
    """The deleter every exported DLManagedTensor carries: drop what the export kept alive."""
    key = int(managed.contents.manager_ctx or 0)
    with _lock:
        record = _exports.pop(key, None)
    if record is not None:
        record.array._export_released()


_CapsuleDestructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


@_CapsuleDestructor
def _capsule_destructor(capsule: int) -> None:
    """A capsule still named "dltensor" was never consumed: the producer frees it (dlpack.h's rule)."""
    if _api.PyCapsule_IsValid(capsule, _NAME):
        pointer = _api.PyCapsule_GetPointer(capsule, _NAME)
        managed = ctypes.cast(pointer, ctypes.POINTER(DLManagedTensor))
        managed.contents.deleter(managed)


def dlpack_code(dtype: DataType) -> tuple[int, int]:
    """(DLDataTypeCode, bits) of an aclDataType; BufferError for a type DLPack has no code for here."""
    try:
        return _CODES[dtype]
    except KeyError:
        raise BufferError(f"{dtype.name} has no DLPack data type this exporter supports") from None


def device_of(backend: Backend) -> tuple[int, int]:
    """The DLPack (device type, device id) of ``backend``'s memory (BufferError when it cannot be shared)."""
    found = backend.dlpack_device()
    if found is None:
        raise BufferError(f"the {backend.name} backend's memory cannot be shared through DLPack")
    return found


def export(array: DeviceArray, stream: int | None = None) -> Any:
    """A ``"dltensor"`` capsule over ``array``'s memory (no copy); the array lives until the deleter runs.

    ``stream`` is the consumer's (the array API's ``__dlpack__(stream=...)``): -1 asks for no
    synchronisation; any other value, or None, gets the data ready for that stream. acl-core does not
    track which stream last wrote an array, so that is a wait for the whole device, which is correct
    for every consumer stream.
    """
    code, bits = dlpack_code(array.dtype)
    if array.dtype.is_packed or array.format.is_private:
        raise BufferError(f"{array.dtype.name} / {array.format.name} storage cannot be described by DLPack")
    backend = array.backend
    device_type, device_id = device_of(backend)
    if device_type == KDL_CPU and stream is not None:
        raise BufferError("a CPU array takes stream=None")
    array._export_taken()  # first, so no other thread frees the memory while the capsule is built
    try:
        managed, shape, strides = _describe(array, backend, device_type, device_id, code, bits, stream)
    except BaseException:
        array._export_released()
        raise
    key = ctypes.addressof(managed)
    managed.manager_ctx = key
    managed.deleter = _delete
    with _lock:
        _exports[key] = _Export(array, managed, shape, strides)
    try:
        return _api.PyCapsule_New(
            key, ctypes.cast(_NAME, ctypes.c_char_p), ctypes.cast(_capsule_destructor, ctypes.c_void_p)
        )
    except BaseException:  # no capsule, so no deleter will ever run: undo the export
        with _lock:
            _exports.pop(key, None)
        array._export_released()
        raise


def _describe(
    array: DeviceArray, backend: Backend, device_type: int, device_id: int, code: int, bits: int, stream: int | None
) -> tuple[DLManagedTensor, Any, Any]:
    """The DLManagedTensor of ``array`` (its shape and stride arrays, which the export keeps alive), once the
    data is ready for ``stream``."""
    if stream != -1:
        # a consumer may run on a thread that never set a device (a worker, a deleter): like the rest of the
        # Pythonic layer it gets the array's device implicitly, rather than ACL_ERROR_RT_CONTEXT_NULL
        owner = backend.runtime.memory.find(array.address)
        backend.runtime.ensure_device(owner.device if owner is not None else 0)
        backend.runtime.synchronize_device()
    ndim = len(array.shape)
    shape = (ctypes.c_int64 * max(ndim, 1))(*array.shape)
    strides = (ctypes.c_int64 * max(ndim, 1))(*array.strides)
    item = bits // 8
    span = _span_bytes(array.shape, array.strides, array.offset, item)
    managed = DLManagedTensor()
    t = managed.dl_tensor
    t.data = backend.dlpack_pointer(array.address, max(span, 1))
    t.device = DLDevice(device_type, device_id)
    t.ndim = ndim
    t.dtype = DLDataType(code, bits, 1)
    t.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    t.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
    t.byte_offset = array.offset * item
    return managed, shape, strides


def outstanding() -> int:
    """Exported capsules whose consumer has not called the deleter yet."""
    with _lock:
        return len(_exports)


def _span_bytes(shape: tuple[int, ...], strides: tuple[int, ...], offset: int, item: int) -> int:
    if math.prod(shape) == 0:
        return 0
    return (offset + sum((d - 1) * s for d, s in zip(shape, strides)) + 1) * item


# ----------------------------------------------------------------------------- import
class _Imported:
    """One consumed capsule: the producer's DLManagedTensor, released (once) through its deleter."""

    def __init__(self, capsule: Any, managed: Any, backend: Backend, registered: int | None) -> None:
        self.capsule = capsule
        self.managed = managed
        self.backend = backend
        self.registered = registered
        self.done = False

    def release(self) -> None:
        """Forget the registered range and hand the tensor back to its producer."""
        if self.done:
            return
        self.done = True
        if self.registered is not None:
            _unregister(self.backend, self.registered)
        deleter = self.managed.contents.deleter
        if deleter:
            deleter(self.managed)


_registered: dict[tuple[int, int], int] = {}
"""(id(runtime), range start) -> how many imported arrays use that registered external range."""


def _register(backend: Backend, address: int, nbytes: int, keepalive: object) -> int | None:
    """Make [address, address + nbytes) device memory the runtime knows; the range start to release, or None."""
    runtime = backend.runtime
    with _lock:
        rng = runtime.memory.find(address)
        if rng is not None and rng.kind.on_device and address + nbytes <= rng.end:
            if rng.kind is RangeKind.DEVICE:
                return None  # acl-core's own allocation (a round trip): its producer keeps it alive
            key = (id(runtime), rng.start)
            if key in _registered:
                _registered[key] += 1
                return rng.start
        key = (id(runtime), address)
        runtime.register_device(address, nbytes, keepalive)
        _registered[key] = _registered.get(key, 0) + 1
        return address


def _unregister(backend: Backend, start: int) -> None:
    runtime = backend.runtime
    with _lock:
        key = (id(runtime), start)
        left = _registered.get(key, 0) - 1
        if left > 0:
            _registered[key] = left
            return
        _registered.pop(key, None)
        runtime.unregister(start)


def _consumer_stream(device_type: int) -> int | None:
    """The stream acl-core's work orders after: the legacy default stream, which blocking streams follow."""
    if device_type == KDL_CUDA:
        return 1
    if device_type == KDL_ROCM:
        return 0
    return None


def from_dlpack(obj: Any, backend: Backend | str | None = None) -> DeviceArray:
    """A device array over the memory of ``obj`` (any ``__dlpack__`` producer), without a copy.

    The producer's tensor must live on ``backend``'s device type and current device. For a backend
    whose device memory is host memory it manages itself (the reference), the values are copied in:
    its device is a simulated address space. The array keeps the producer's tensor alive; ``free()``
    (or collection) unregisters the memory and calls the producer's deleter.
    """
    from acl_core.eager import DeviceArray, _backend, to_device

    b = _backend(backend)
    want_type, want_id = device_of(b)
    got_type, got_id = (int(v) for v in obj.__dlpack_device__())
    if want_type == KDL_CPU:
        import numpy as np

        if got_type not in (KDL_CPU, KDL_CUDA_HOST):
            raise BufferError(f"the {b.name} backend takes host data; the producer's device type is {got_type}")
        return to_device(np.from_dlpack(obj), b)
    if (got_type, got_id) != (want_type, want_id):
        raise BufferError(
            f"the producer's tensor is on DLPack device ({got_type}, {got_id}); "
            f"the {b.name} backend's current device is ({want_type}, {want_id})"
        )
    capsule = obj.__dlpack__(stream=_consumer_stream(want_type))
    capsule_ptr = ctypes.c_void_p(id(capsule))
    if not _api.PyCapsule_IsValid(capsule_ptr, _NAME):
        raise BufferError("the producer did not return an unconsumed 'dltensor' capsule")
    managed = ctypes.cast(_api.PyCapsule_GetPointer(capsule_ptr, _NAME), ctypes.POINTER(DLManagedTensor))
    t = managed.contents.dl_tensor
    try:
        dtype = _TYPES[(t.dtype.code, t.dtype.bits)]
        if t.dtype.lanes != 1:
            raise KeyError
    except KeyError:
        raise BufferError(f"DLPack type code {t.dtype.code} bits {t.dtype.bits} lanes {t.dtype.lanes}") from None
    ndim = int(t.ndim)
    shape = tuple(int(t.shape[i]) for i in range(ndim))
    if t.strides:
        strides = tuple(int(t.strides[i]) for i in range(ndim))
    else:
        from acl_core.tensor import contiguous_strides

        strides = contiguous_strides(shape)
    if any(s < 0 for s in strides):
        raise BufferError("negative strides cannot be an aclTensor view")
    item = t.dtype.bits // 8
    if t.byte_offset % item:
        raise BufferError(f"byte_offset {t.byte_offset} is not a multiple of the element size {item}")
    address = int(t.data or 0) + int(t.byte_offset)
    nbytes = max(_span_bytes(shape, strides, 0, item), 1)
    _api.PyCapsule_SetName(capsule_ptr, _USED)  # consumed: from now on the deleter is ours to call
    owner = _Imported(capsule, managed, b, None)
    try:
        if address:
            owner.registered = _register(b, address, nbytes, capsule)
        storage = nbytes // item if nbytes >= item else 1
        return DeviceArray.adopt(b, shape, dtype, strides, storage, address, owner.release)
    except BaseException:
        owner.release()  # the tensor goes back to its producer; a registration made is forgotten
        raise

"""``acl.util``: host pointers for Python buffers, as pyACL's helpers give them.

Pointers handed out here are remembered by the runtime (the newest 4096), so that copies to and from
them are checked; a copy from an address nobody handed out is refused instead of crashing. These
helpers return no status code, so misuse raises :class:`AclError` with ACL_ERROR_INVALID_PARAM
(100000); pointers and sizes go through the runtime's C conversions (:mod:`acl_core.runtime.c_args`).
"""

from __future__ import annotations

import ctypes
import math

import numpy as np

from acl_core.acl._call import runtime
from acl_core.errors import AclError, AclErrorCode
from acl_core.runtime import RangeKind
from acl_core.runtime.c_args import INT32, POINTER, SIZE_T


def _refuse(message: str) -> AclError:
    return AclError(AclErrorCode.ACL_ERROR_INVALID_PARAM, message)


def bytes_to_ptr(data: bytes | bytearray) -> int:
    """The address of a bytes/bytearray object's buffer (keep the object alive while it is used)."""
    if isinstance(data, bytearray):
        address = ctypes.addressof((ctypes.c_char * len(data)).from_buffer(data)) if data else 0
    elif isinstance(data, bytes):
        address = ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value or 0
    else:
        raise _refuse(f"bytes_to_ptr takes bytes or bytearray, not {type(data).__name__}")
    if address:
        runtime().register_host(address, len(data), data)
    return address


def numpy_to_ptr(array: np.ndarray) -> int:
    """The address of a C-contiguous NumPy array's data (deprecated in pyACL; kept for ported code)."""
    if not isinstance(array, np.ndarray):
        raise _refuse(f"numpy_to_ptr takes a numpy.ndarray, not {type(array).__name__}")
    if not array.flags.c_contiguous:
        raise _refuse("numpy_to_ptr needs a C-contiguous array; use numpy_contiguous_to_ptr")
    address = int(array.ctypes.data)
    if array.nbytes:
        runtime().register_host(address, array.nbytes, array)
    return address


def numpy_contiguous_to_ptr(array: np.ndarray) -> int:
    """Like numpy_to_ptr, for an array made contiguous first (the copy is kept alive by the runtime)."""
    if not isinstance(array, np.ndarray):
        raise _refuse(f"numpy_contiguous_to_ptr takes a numpy.ndarray, not {type(array).__name__}")
    return numpy_to_ptr(np.ascontiguousarray(array))


def _host_range(address: int, size: int) -> None:
    rng = runtime().memory.resolve(address, size, "ptr")
    if rng.kind.on_device:
        raise AclError(
            AclErrorCode.ACL_ERROR_INVALID_PARAM, f"{address:#x} is device memory; copy it to the host first"
        )
    if rng.kind not in (RangeKind.HOST, RangeKind.HOST_PINNED):
        raise AclError(AclErrorCode.ACL_ERROR_INVALID_PARAM, f"{address:#x} is not host memory")


def ptr_to_bytes(ptr: int, size: int) -> bytes:
    """A copy of ``size`` bytes of host memory at ``ptr`` (raises AclError for unknown or device pointers)."""
    ptr, size = POINTER.convert("ptr_to_bytes: ptr", ptr), SIZE_T.convert("ptr_to_bytes: size", size)
    if size == 0:
        return b""
    _host_range(ptr, size)
    return ctypes.string_at(ptr, size)


def ptr_to_numpy(ptr: int, shape: tuple[int, ...], npy_type: int) -> np.ndarray:
    """A NumPy array viewing host memory at ``ptr``; ``npy_type`` is NumPy's type number (NPY_FLOAT=11...)."""
    ptr = POINTER.convert("ptr_to_numpy: ptr", ptr)
    npy_type = INT32.convert("ptr_to_numpy: npy_type", npy_type)
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)):
        raise _refuse(f"ptr_to_numpy: shape must be a tuple of sizes, not {type(shape).__name__}")
    shape = tuple(SIZE_T.convert("ptr_to_numpy: shape", d) for d in shape)
    dtype = next((np.dtype(t) for t in np.sctypeDict.values() if np.dtype(t).num == npy_type), None)
    if dtype is None:
        raise _refuse(f"unknown NumPy type number {npy_type}")
    count = math.prod(shape)
    _host_range(ptr, count * dtype.itemsize)
    raw = np.ctypeslib.as_array((ctypes.c_uint8 * (count * dtype.itemsize)).from_address(ptr))
    return raw.view(dtype).reshape(shape)

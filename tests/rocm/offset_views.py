"""Device arrays whose first element sits ``offset`` elements into their allocation (contiguous otherwise).

Used to steer the vector paths: an offset that breaks 16-byte alignment must fall back to narrower
vectors or to the scalar path and still compute the same values.
"""

from __future__ import annotations

import numpy as np

from acl_core.backend import Backend
from acl_core.dtypes import from_numpy
from acl_core.eager import DeviceArray
from acl_core.spec.runtime import MemcpyKind


def placed(backend: Backend, values: np.ndarray, offset: int) -> DeviceArray:
    """``values`` copied to the device, contiguous, starting ``offset`` elements into the allocation."""
    values = np.ascontiguousarray(values)
    storage = np.zeros(values.size + offset, values.dtype)
    storage[offset:] = values.reshape(-1)
    return _upload(
        backend, DeviceArray(backend, values.shape, from_numpy(values.dtype), storage.size, None, offset), storage
    )


def empty_placed(backend: Backend, shape: tuple[int, ...], dtype: np.dtype, offset: int) -> DeviceArray:
    """An output array (zeros) of ``shape`` starting ``offset`` elements into its allocation."""
    return placed(backend, np.zeros(shape, dtype), offset)


def rows_placed(backend: Backend, values: np.ndarray, row_stride: int, offset: int) -> DeviceArray:
    """2-D ``values`` whose rows start ``row_stride`` elements apart, the first ``offset`` into the allocation."""
    rows, cols = values.shape
    assert row_stride >= cols
    storage = np.zeros(offset + rows * row_stride, values.dtype)
    for r in range(rows):
        storage[offset + r * row_stride : offset + r * row_stride + cols] = values[r]
    da = DeviceArray(backend, values.shape, from_numpy(values.dtype), storage.size, (row_stride, 1), offset)
    return _upload(backend, da, storage)


def _upload(backend: Backend, da: DeviceArray, storage: np.ndarray) -> DeviceArray:
    """``da`` with its whole allocation filled from ``storage`` (registered host memory, then one copy)."""
    raw = storage.view(np.uint8)
    rt = backend.runtime
    rt.register_host(raw.ctypes.data, raw.nbytes, raw)
    try:
        rt.memcpy(da.address, da.nbytes, raw.ctypes.data, raw.nbytes, MemcpyKind.ACL_MEMCPY_HOST_TO_DEVICE)
    finally:
        rt.unregister(raw.ctypes.data)
    return da

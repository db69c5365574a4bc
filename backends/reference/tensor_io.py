"""Reading and writing aclTensor views of reference device memory as NumPy arrays."""

from __future__ import annotations

import numpy as np

from acl_core.dtypes import DataType
from acl_core.errors import AclnnError, AclnnStatus
from acl_core.tensor import AclTensor
from acl_reference.driver import ReferenceDriver


def _unsupported(t: AclTensor) -> AclnnError:
    return AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, f"the reference backend cannot compute with {t.dtype.short}")


def _storage_view(driver: ReferenceDriver, t: AclTensor) -> np.ndarray:
    """A strided NumPy view aliasing the tensor's device bytes (byte-sized element types)."""
    np_dtype = t.dtype.numpy
    if np_dtype is None or t.dtype.is_packed:
        raise _unsupported(t)
    if t.numel == 0:
        return np.empty(t.view_dims, dtype=np_dtype)
    key = (t.data, t.layout)
    view = driver.views.get(key)
    if view is None:
        buffer, start = driver.device_buffer(t.data)
        item = np_dtype.itemsize
        view = np.ndarray(
            t.view_dims,
            dtype=np_dtype,
            buffer=buffer,
            offset=start + t.offset * item,
            strides=tuple(s * item for s in t.strides),
        )
        if len(driver.views) < 4096:
            driver.views[key] = view
    return view


def _packed_storage(driver: ReferenceDriver, t: AclTensor) -> tuple[np.ndarray, np.ndarray]:
    """(raw bytes, unpacked elements) of a 4-bit tensor's storage, low nibble first (padded to even)."""
    np_dtype = t.dtype.numpy
    if np_dtype is None:
        raise _unsupported(t)
    count = t.storage_numel
    raw = driver.device_bytes(t.data, (count + 1) // 2)
    nibbles = np.empty(raw.size * 2, dtype=np.uint8)
    nibbles[0::2] = raw & 0x0F
    nibbles[1::2] = raw >> 4
    if t.dtype == DataType.ACL_INT4:
        values = ((nibbles.astype(np.int8) ^ 8) - 8).astype(np_dtype)
    else:
        values = nibbles.view(np_dtype)
    return raw, values


def read(driver: ReferenceDriver, t: AclTensor) -> np.ndarray:
    """The tensor's view as a NumPy array (aliasing device memory for byte-sized types; a copy otherwise)."""
    if not t.dtype.is_packed:
        return _storage_view(driver, t)
    if t.numel == 0:
        return np.empty(t.view_dims, dtype=t.dtype.numpy)
    _, values = _packed_storage(driver, t)
    item = values.itemsize
    return np.lib.stride_tricks.as_strided(
        values[t.offset :], shape=t.view_dims, strides=tuple(s * item for s in t.strides)
    ).copy()


def write(driver: ReferenceDriver, t: AclTensor, value: np.ndarray | float | int | bool) -> None:
    """Store ``value`` (broadcast to the view, cast to the tensor's dtype) into the tensor's view."""
    if t.numel == 0:
        return
    np_dtype = t.dtype.numpy
    if np_dtype is None:
        raise _unsupported(t)
    data = np.asarray(value)
    if data.dtype != np_dtype:
        data = cast(data, t.dtype)
    if not t.dtype.is_packed:
        np.copyto(_storage_view(driver, t), data, casting="unsafe")
        return
    raw, values = _packed_storage(driver, t)
    item = values.itemsize
    target = np.lib.stride_tricks.as_strided(
        values[t.offset :], shape=t.view_dims, strides=tuple(s * item for s in t.strides)
    )
    np.copyto(target, data, casting="unsafe")
    if t.dtype == DataType.ACL_INT4:
        codes = values.astype(np.int8).view(np.uint8) & 0x0F
    else:
        codes = values.view(np.uint8) & 0x0F
    raw[:] = codes[0::2] | (codes[1::2] << 4)


def cast(data: np.ndarray, dtype: DataType) -> np.ndarray:
    """Cast values to ``dtype`` the way CANN's Cast does (floats to ints truncate toward zero, NaN to 0)."""
    target = dtype.numpy
    if target is None:
        raise AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, f"the reference backend cannot produce {dtype.short}")
    data = np.asarray(data)
    if data.dtype.kind in "fV" and dtype.is_integer:
        wide = data.astype(np.float64)
        info = np.iinfo(target) if target.kind in "iu" else None
        wide = np.nan_to_num(np.trunc(wide), nan=0.0)
        if info is not None:
            wide = np.clip(wide, info.min, info.max)
        return wide.astype(target)
    if data.dtype.kind == "c" and dtype.info.category != "complex":
        data = data.real
    if dtype == DataType.ACL_BOOL:
        return data.astype(np.float64 if data.dtype.kind in "fV" else data.dtype) != 0
    with np.errstate(over="ignore", invalid="ignore"):
        if (
            data.dtype.kind == "V"
            or target.kind == "V"
            or data.dtype.itemsize != target.itemsize
            or data.dtype != target
        ):
            return data.astype(target)
    return data


def wide(dtype: DataType) -> np.dtype:
    """The NumPy dtype the reference computes in for results of ``dtype`` (float64/complex128/int64)."""
    category = dtype.info.category
    if category == "float":
        return np.dtype(np.float64)
    if category == "complex":
        return np.dtype(np.complex128)
    if dtype == DataType.ACL_UINT64:
        return np.dtype(np.uint64)
    if category in ("int", "uint"):
        return np.dtype(np.int64)
    return np.dtype(np.bool_)

"""Reading and writing what ``tensor_io`` cannot: HiFloat8 tensors (uint8 codes) and private-format storage.

HiFloat8 has no NumPy type, so its tensors are read and written as their bit patterns through a
``uint8`` view and decoded / encoded with :mod:`acl_core.lowp`. Private formats (FRACTAL_NZ) are read
and written as their whole storage (storage dims), which the layout kernels convert with
:mod:`acl_core.nz`.
"""

from __future__ import annotations

import math

import numpy as np

from acl_core import lowp
from acl_core.dtypes import DataType
from acl_core.errors import AclnnError, AclnnStatus
from acl_core.tensor import AclTensor
from acl_reference.call import RefCall
from acl_reference.driver import ReferenceDriver

HIF8 = DataType.ACL_HIFLOAT8


def _tensor(k: RefCall, name: str) -> AclTensor:
    t = k[name]
    assert isinstance(t, AclTensor), f"{name} is not a tensor"
    return t


def bits_view(driver: ReferenceDriver, t: AclTensor) -> np.ndarray:
    """A writable uint8 view of a 1-byte tensor's view (its bit patterns), aliasing device memory."""
    if t.numel == 0:
        return np.empty(t.view_dims, dtype=np.uint8)
    buffer, start = driver.device_buffer(t.data)
    return np.ndarray(t.view_dims, dtype=np.uint8, buffer=buffer, offset=start + t.offset, strides=t.strides)


def read_float(k: RefCall, name: str) -> np.ndarray:
    """Tensor ``name`` as float64 (HiFloat8 decoded from its codes)."""
    t = _tensor(k, name)
    if t.dtype == HIF8:
        return lowp.hifloat8_decode(bits_view(k.driver, t))
    return k.read(name, np.float64)


def write_float(k: RefCall, name: str, values: np.ndarray) -> None:
    """Store float64 values already rounded to ``name``'s type (HiFloat8 encoded; others as tensor_io casts)."""
    t = k[name]
    if t is None:
        return
    assert isinstance(t, AclTensor)
    if t.dtype == HIF8:
        np.copyto(bits_view(k.driver, t), lowp.hifloat8_encode(np.broadcast_to(values, t.view_dims)))
        return
    with np.errstate(over="ignore", invalid="ignore"):
        k.write(name, np.asarray(values))


def storage_count(t: AclTensor) -> int:
    """Elements the tensor's storage holds (its storage dims)."""
    return math.prod(t.storage_dims)


def _storage_bytes(driver: ReferenceDriver, t: AclTensor, count: int) -> np.ndarray:
    bits = t.dtype.info.storage_bits
    nbytes = (count * bits + 7) // 8
    first = (t.offset * bits) // 8
    try:
        return driver.device_bytes(t.data + first, nbytes)
    except Exception as exc:  # the allocation is shorter than the storage the tensor claims
        raise AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, f"storage does not fit its allocation: {exc}") from None


def read_storage(k: RefCall, name: str, count: int | None = None) -> np.ndarray:
    """The first ``count`` storage elements of tensor ``name`` (default: its storage dims), flat, as NumPy."""
    return storage_values(k.driver, _tensor(k, name), count)


def storage_values(driver: ReferenceDriver, t: AclTensor, count: int | None = None) -> np.ndarray:
    """The first ``count`` storage elements of ``t`` (default: its storage dims), flat, as NumPy."""
    n = storage_count(t) if count is None else count
    raw = _storage_bytes(driver, t, n)
    if t.dtype == HIF8:
        return raw.copy()
    np_dtype = t.dtype.numpy
    assert np_dtype is not None
    if t.dtype.is_packed:
        codes = lowp.unpack_nibbles(raw, n)
        if t.dtype == DataType.ACL_INT4:
            return lowp.int4_from_codes(codes).astype(np_dtype)
        return codes.view(np_dtype)
    return raw.view(np_dtype).copy()


def write_storage(k: RefCall, name: str, values: np.ndarray) -> None:
    """Store flat values (the tensor's dtype; HiFloat8 as uint8 codes) at the start of tensor ``name``'s storage."""
    t = _tensor(k, name)
    flat = np.ascontiguousarray(values).reshape(-1)
    raw = _storage_bytes(k.driver, t, flat.size)
    if t.dtype.is_packed:
        codes = lowp.int4_codes(flat) if t.dtype == DataType.ACL_INT4 else flat.view(np.uint8)
        packed = lowp.pack_nibbles(codes)
        if flat.size % 2:  # keep the neighbour nibble of the last byte
            packed[-1] = (packed[-1] & 0x0F) | (raw[-1] & 0xF0)
        raw[:] = packed
        return
    raw[:] = flat.view(np.uint8)


def cast_low_precision(k: RefCall) -> None:
    """Cast where ``self`` or ``out`` is an 8- or 4-bit type: decode exactly, then round once into ``out``.

    To FLOAT8/FLOAT4/HiFloat8: :func:`acl_core.lowp.cast_float8` (PyTorch's rules for the OCP types);
    to FLOAT8_E8M0: ml_dtypes' conversion; to INT4: truncation toward zero, saturated, NaN to 0 (the
    rule the reference's Cast uses for every integer type).
    """
    src = _tensor(k, "self")
    dst = _tensor(k, "out").dtype
    values = np.asarray(read_float(k, "self") if not src.dtype.is_complex else k.read("self").real, np.float64)
    if dst in (DataType.ACL_FLOAT8_E4M3FN, DataType.ACL_FLOAT8_E5M2, DataType.ACL_FLOAT4_E2M1, HIF8):
        write_float(k, "out", lowp.cast_float8(values, dst))
    elif dst == DataType.ACL_FLOAT8_E8M0:
        with np.errstate(over="ignore", invalid="ignore"):
            k.write("out", values.astype(dst.numpy))
    elif dst == DataType.ACL_INT4:
        k.write("out", lowp.saturate_int(np.trunc(values), DataType.ACL_INT4))
    else:
        k.write("out", values)

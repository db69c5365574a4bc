"""FRACTAL_NZ, Ascend's tiled matrix layout: shapes, the index formula, and the host helpers of CANN.

For an ND tensor of view shape ``(..., n, c)`` the NZ storage has shape
``(..., ceil(c / C0), ceil(n / 16), 16, C0)`` and

    NZ[..., j // C0, i // 16, i % 16, j % C0] = ND[..., i, j]

with zero padding where ``i >= n`` or ``j >= c`` (dropped again on NZ -> ND). ``C0`` is 32 bytes of
the element type (fp32/int32: 8, fp16/bf16: 16, 8-bit types: 32) and 64 for the 4-bit types;
``FRACTAL_NZ_C0_2/4/8/16/32`` pin it explicitly. The tiles are stored column-of-tiles first ("N"),
each 16 x C0 tile row-major ("Z").

The host helpers keep CANN's C names and pyACL's convention (out-parameters returned first, the
status last): :func:`aclnnNpuFormatCastCalculateSizeAndFormat`, :func:`aclnnCalculateMatmulWeightSize`
and :func:`aclnnCalculateMatmulWeightSizeV2`; ``acl_core.aclnn`` re-exports them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from acl_core.dtypes import DataType
from acl_core.errors import AclnnError, AclnnStatus
from acl_core.formats import Format
from acl_core.tensor import AclIntArray, AclTensor, contiguous_strides

if TYPE_CHECKING:
    from acl_core.backend import Backend
    from acl_core.eager import DeviceArray

M0: Final = 16
"""Rows of one NZ fractal."""
BLOCK_BYTES: Final = 32
"""Bytes of one fractal row (C0 elements)."""

NZ_FORMATS: Final[frozenset[Format]] = frozenset(
    {
        Format.ACL_FORMAT_FRACTAL_NZ,
        Format.ACL_FORMAT_FRACTAL_NZ_C0_2,
        Format.ACL_FORMAT_FRACTAL_NZ_C0_4,
        Format.ACL_FORMAT_FRACTAL_NZ_C0_8,
        Format.ACL_FORMAT_FRACTAL_NZ_C0_16,
        Format.ACL_FORMAT_FRACTAL_NZ_C0_32,
    }
)
"""FRACTAL_NZ and its pinned-C0 variants."""

_PINNED_C0: Final[dict[Format, int]] = {
    Format.ACL_FORMAT_FRACTAL_NZ_C0_2: 2,
    Format.ACL_FORMAT_FRACTAL_NZ_C0_4: 4,
    Format.ACL_FORMAT_FRACTAL_NZ_C0_8: 8,
    Format.ACL_FORMAT_FRACTAL_NZ_C0_16: 16,
    Format.ACL_FORMAT_FRACTAL_NZ_C0_32: 32,
}


def c0_for(dtype: DataType, format: Format = Format.ACL_FORMAT_FRACTAL_NZ) -> int:
    """C0 of ``dtype`` in ``format``: pinned by the _C0_n formats, else 32 bytes of elements (64 for 4-bit)."""
    if format in _PINNED_C0:
        return _PINNED_C0[format]
    bits = dtype.info.element_bits
    if bits <= 0:
        raise ValueError(f"{dtype.name} has no element size")
    if bits == 4:
        return 64
    return BLOCK_BYTES * 8 // bits


def nz_shape(nd_shape: Sequence[int], c0: int) -> tuple[int, ...]:
    """The NZ storage shape of an ND view shape (rank >= 2): ``(..., ceil(c/C0), ceil(n/16), 16, C0)``."""
    if len(nd_shape) < 2:
        raise ValueError(f"FRACTAL_NZ needs rank >= 2, got {list(nd_shape)}")
    *batch, n, c = (int(d) for d in nd_shape)
    return (*batch, -(-c // c0), -(-n // M0), M0, c0)


def nd_to_nz(nd: np.ndarray, c0: int) -> np.ndarray:
    """An ND array laid out as FRACTAL_NZ (zero padding), by the index formula."""
    a = np.asarray(nd)
    *batch, n, c = a.shape
    shape = nz_shape(a.shape, c0)
    n1, c1 = shape[-3], shape[-4]
    padded = np.zeros((*batch, n1 * M0, c1 * c0), dtype=a.dtype)
    padded[..., :n, :c] = a
    tiles = padded.reshape(*batch, n1, M0, c1, c0)
    k = len(batch)
    order = (*range(k), k + 2, k, k + 1, k + 3)
    return np.ascontiguousarray(tiles.transpose(order))


def nz_to_nd(nz: np.ndarray, nd_shape: Sequence[int]) -> np.ndarray:
    """The ND array a FRACTAL_NZ array holds (padding dropped)."""
    a = np.asarray(nz)
    *batch, c1, n1, m0, c0 = a.shape
    k = len(batch)
    order = (*range(k), k + 1, k + 2, k, k + 3)
    full = a.transpose(order).reshape(*batch, n1 * m0, c1 * c0)
    n, c = int(nd_shape[-2]), int(nd_shape[-1])
    return np.ascontiguousarray(full[..., :n, :c])


def is_nz(format: Format | int) -> bool:
    """True for FRACTAL_NZ and its pinned-C0 variants."""
    return Format(int(format)) in NZ_FORMATS


def check_nz_tensor(t: AclTensor, label: str) -> int:
    """Validate an NZ tensor's storage shape against its view (161002 otherwise); return its C0."""
    if t.rank < 2:
        raise _invalid(f"{label} in {t.format.name} needs a view of rank >= 2, got {list(t.view_dims)}")
    c0 = c0_for(t.dtype, t.format)
    if t.format == Format.ACL_FORMAT_FRACTAL_NZ and t.storage_dims and t.storage_dims[-1] != c0:
        raise _invalid(f"{label}: C0 of {t.dtype.short} in FRACTAL_NZ is {c0}, storage has {t.storage_dims[-1]}")
    expected = nz_shape(_logical_nd(t), c0)
    if tuple(t.storage_dims) != expected:
        raise _invalid(f"{label}: storage dims {list(t.storage_dims)} are not the NZ shape {list(expected)}")
    return c0


def _logical_nd(t: AclTensor) -> tuple[int, ...]:
    """The ND shape an NZ tensor's storage tiles: the view, or its last two dims swapped for a transposed view."""
    if nz_transposed(t):
        return (*t.view_dims[:-2], t.view_dims[-1], t.view_dims[-2])
    return tuple(t.view_dims)


def nz_transposed(t: AclTensor) -> bool:
    """True when an NZ tensor's view swaps its last two dims (strides of the transposed matrix)."""
    if t.rank < 2:
        return False
    dims = (*t.view_dims[:-2], t.view_dims[-1], t.view_dims[-2])
    swapped = contiguous_strides(dims)
    swapped = (*swapped[:-2], swapped[-1], swapped[-2])
    return tuple(t.strides) == swapped and tuple(t.strides) != contiguous_strides(t.view_dims)


def _invalid(message: str) -> AclnnError:
    return AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, message)


# ----------------------------------------------------------------------------- host helpers (CANN's C names)
_SAME_DTYPE_NZ: Final = frozenset(
    {
        DataType.ACL_FLOAT,
        DataType.ACL_FLOAT16,
        DataType.ACL_BF16,
        DataType.ACL_INT8,
        DataType.ACL_UINT8,
        DataType.ACL_INT32,
        DataType.ACL_FLOAT8_E4M3FN,
        DataType.ACL_FLOAT8_E5M2,
        DataType.ACL_HIFLOAT8,
        DataType.ACL_FLOAT4_E2M1,
    }
)
"""Types NpuFormatCast tiles as themselves (additionalDtype == the source dtype)."""

_PACKED_WEIGHT: Final[dict[DataType, frozenset[DataType]]] = {
    DataType.ACL_INT32: frozenset({DataType.ACL_FLOAT16, DataType.ACL_BF16, DataType.ACL_INT8}),
    DataType.ACL_FLOAT: frozenset(
        {DataType.ACL_FLOAT16, DataType.ACL_BF16, DataType.ACL_FLOAT8_E4M3FN, DataType.ACL_INT8}
    ),
}
"""Weight-quant packings (source dtype -> additionalDtype, the activation type) whose NZ C0 follows the activation."""


def calculate_size_and_format(src: AclTensor, dst_format: int, additional_dtype: int) -> tuple[list[int], Format]:
    """The storage shape and actual format NpuFormatCast writes for ``src`` (raises AclnnError).

    ND -> FRACTAL_NZ: with ``additionalDtype`` equal to the source dtype, C0 = 32 bytes (64 for fp4)
    and the format is FRACTAL_NZ; for packed weight-quant sources (INT32 / FLOAT holding int4 / fp4)
    a 2-byte additionalDtype gives FRACTAL_NZ_C0_16 and an 8-bit one FRACTAL_NZ_C0_32 (Ascend 950's
    rule). FRACTAL_NZ -> ND returns the view shape and ND.
    """
    try:
        target = Format(int(dst_format))
        extra = DataType(int(additional_dtype))
    except ValueError as exc:
        raise _invalid(str(exc)) from None
    if target == Format.ACL_FORMAT_ND:
        if not is_nz(src.format):
            raise _invalid(f"srcTensor is {src.format.name}; only FRACTAL_NZ -> ND is supported")
        return list(src.view_dims), Format.ACL_FORMAT_ND
    if target != Format.ACL_FORMAT_FRACTAL_NZ:
        raise _invalid(f"dstFormat {target.name} is not supported; expected FRACTAL_NZ or ND")
    if src.format not in (Format.ACL_FORMAT_ND, Format.ACL_FORMAT_NCL):
        raise _invalid(f"srcTensor must be ND to convert to FRACTAL_NZ, not {src.format.name}")
    if not 2 <= src.rank <= 6:
        raise _invalid(f"srcTensor must have rank 2 to 6 to convert to FRACTAL_NZ, got {src.rank}")
    if extra == src.dtype:
        if extra not in _SAME_DTYPE_NZ:
            raise _invalid(f"{extra.short} cannot be converted to FRACTAL_NZ")
        fmt = Format.ACL_FORMAT_FRACTAL_NZ
        c0 = c0_for(extra)
    else:
        allowed = _PACKED_WEIGHT.get(src.dtype, frozenset())
        if extra not in allowed:
            raise _invalid(
                f"additionalDtype {extra.short} is not supported for a {src.dtype.short} srcTensor "
                f"(same dtype, or int32/float packed weights with float16/bfloat16/int8/float8_e4m3fn)"
            )
        if src.rank not in (2, 3):
            raise _invalid("packed weight srcTensor must have rank 2 or 3")
        fmt = (
            Format.ACL_FORMAT_FRACTAL_NZ_C0_16 if extra.info.element_bits == 16 else Format.ACL_FORMAT_FRACTAL_NZ_C0_32
        )
        c0 = _PINNED_C0[fmt]
    return list(nz_shape(src.view_dims, c0)), fmt


def _status(exc: AclnnError) -> int:
    from acl_core.aclnn import _fail  # late: the front end keeps aclGetRecentErrMsg's record and imports us

    return int(_fail(exc))


def aclnnNpuFormatCastCalculateSizeAndFormat(
    srcTensor: AclTensor | None,
    dstFormat: int,
    additionalDtype: int,
) -> tuple[list[int] | None, int, int, int]:
    """``(dstShape, dstShapeSize, actualFormat, ret)``: the NZ storage shape to allocate for NpuFormatCast."""
    try:
        if srcTensor is None or (type(srcTensor) is int and srcTensor == 0):
            raise AclnnError(AclnnStatus.ACLNN_ERR_PARAM_NULLPTR, "srcTensor is null")
        if not isinstance(srcTensor, AclTensor):
            raise _invalid(f"srcTensor must be an aclTensor*, not {type(srcTensor).__name__}")
        srcTensor.check_alive("srcTensor")
        shape, fmt = calculate_size_and_format(srcTensor, dstFormat, additionalDtype)
    except AclnnError as exc:
        return None, 0, 0, _status(exc)
    return shape, len(shape), int(fmt), 0


def matmul_weight_size(shape: Sequence[int], dtype: DataType) -> int:
    """Elements a matmul weight of ``shape`` occupies once tiled: last two dims aligned to 16 and C0."""
    dims = [int(d) for d in shape]
    inner = 16 if dtype in (DataType.ACL_FLOAT16, DataType.ACL_BF16) else 32
    return math.prod(dims[:-2]) * (-(-dims[-2] // 16) * 16) * (-(-dims[-1] // inner) * inner)


def _weight_size(tensor_shape: Any, dtype: DataType, *, allow_zero: bool) -> int:
    if tensor_shape is None or (type(tensor_shape) is int and tensor_shape == 0):
        raise AclnnError(AclnnStatus.ACLNN_ERR_PARAM_NULLPTR, "tensorShape is null")
    values = tensor_shape.values if isinstance(tensor_shape, AclIntArray) else tuple(int(v) for v in tensor_shape)
    if not 2 <= len(values) <= 6:
        raise _invalid(f"tensorShape must have 2 to 6 dimensions, got {len(values)}")
    if any(v < 0 for v in values) or (not allow_zero and any(v == 0 for v in values)):
        raise _invalid(f"tensorShape {list(values)} has a zero or negative dimension")
    if dtype not in (DataType.ACL_FLOAT16, DataType.ACL_BF16, DataType.ACL_INT8):
        raise _invalid(f"dataType {dtype.name} is not supported; expected FLOAT16, BF16 or INT8")
    return matmul_weight_size(values, dtype)


def aclnnCalculateMatmulWeightSize(tensorShape: AclIntArray | Sequence[int] | None) -> tuple[int, int]:
    """``(weightTensorSize, ret)``: elements of a float16 matmul weight after TransMatmulWeight."""
    try:
        return _weight_size(tensorShape, DataType.ACL_FLOAT16, allow_zero=True), 0
    except AclnnError as exc:
        return 0, _status(exc)


def aclnnCalculateMatmulWeightSizeV2(
    tensorShape: AclIntArray | Sequence[int] | None,
    dataType: int,
) -> tuple[int, int]:
    """``(weightTensorSize, ret)``: elements of a FLOAT16/BF16/INT8 matmul weight after TransMatmulWeight."""
    try:
        try:
            dtype = DataType(int(dataType))
        except ValueError:
            raise _invalid(f"dataType {dataType!r} is not an aclDataType") from None
        return _weight_size(tensorShape, dtype, allow_zero=False), 0
    except AclnnError as exc:
        return 0, _status(exc)


# ----------------------------------------------------------------------------- NumPy <-> device, for tests and users
def to_device_nz(
    nd: np.ndarray,
    backend: Backend | str | None = None,
    *,
    dtype: DataType | None = None,
    format: Format = Format.ACL_FORMAT_FRACTAL_NZ,
    transposed: bool = False,
) -> DeviceArray:
    """Copy an ND array to the device as an NZ tensor: view dims = ND shape, storage dims = NZ shape.

    ``transposed`` stores the NZ tiling of the matrix's transpose and gives the view swapped strides
    (how CANN describes a transposed NZ weight).
    """
    from acl_core import eager
    from acl_core.dtypes import from_numpy

    arr = np.asarray(nd)
    acl_dtype = from_numpy(arr.dtype) if dtype is None else dtype
    np_dtype = acl_dtype.numpy
    assert np_dtype is not None
    arr = arr.astype(np_dtype, copy=False)
    c0 = c0_for(acl_dtype, format)
    stored = np.swapaxes(arr, -1, -2) if transposed else arr
    tiles = nd_to_nz(stored, c0)
    flat = eager.to_device(tiles.reshape(-1), backend, dtype=acl_dtype)
    strides = contiguous_strides(stored.shape)
    if transposed:
        strides = (*strides[:-2], strides[-1], strides[-2])
    da = eager.DeviceArray(
        flat.backend, arr.shape, acl_dtype, tiles.size, strides=strides, format=format, storage_dims=tiles.shape
    )
    rt = flat.backend.runtime
    from acl_core.spec.runtime import MemcpyKind

    if flat.nbytes:
        rt.memcpy(da.address, da.nbytes, flat.address, flat.nbytes, MemcpyKind.ACL_MEMCPY_DEVICE_TO_DEVICE)
    flat.free()
    return da


class NzArray(np.ndarray):
    """ND values that go to the device as a FRACTAL_NZ tensor: how a conformance sample names an NZ input.

    It is an ordinary array of the logical ND values (so sample tooling sees its dtype and shape);
    ``acl_core.eager`` places it with :func:`to_device_nz` instead of as an ND tensor.
    """

    acl_format: Format

    def __new__(cls, values: np.ndarray, format: Format = Format.ACL_FORMAT_FRACTAL_NZ) -> NzArray:
        """Wrap ``values`` (rank >= 2) for placement in ``format``."""
        obj = np.asarray(values).view(cls)
        obj.acl_format = Format(int(format))
        return obj

    def __array_finalize__(self, obj: Any) -> None:
        self.acl_format = getattr(obj, "acl_format", Format.ACL_FORMAT_FRACTAL_NZ)

    def acl_to_device(self, backend: Backend | str | None = None) -> DeviceArray:
        """The NZ device tensor holding these values."""
        return to_device_nz(np.asarray(self), backend, format=self.acl_format)


def storage_array(da: DeviceArray) -> np.ndarray:
    """A device array's whole storage as NumPy (its storage dims; sub-byte types unpacked)."""
    np_dtype = da.dtype.numpy
    assert np_dtype is not None
    raw = da.storage_bytes()
    count = math.prod(da.storage_dims)
    if da.dtype.is_packed:
        from acl_core.lowp import int4_from_codes, unpack_nibbles

        codes = unpack_nibbles(raw, count)
        values = int4_from_codes(codes).astype(np_dtype) if da.dtype == DataType.ACL_INT4 else codes.view(np_dtype)
    else:
        values = raw[: count * np_dtype.itemsize].view(np_dtype)
    return values.reshape(da.storage_dims)


def from_device_nz(da: DeviceArray) -> np.ndarray:
    """The ND array an NZ device array holds."""
    stored = storage_array(da)
    shape = da.shape
    swapped = len(shape) >= 2 and da.strides != contiguous_strides(shape)
    nd_shape = (*shape[:-2], shape[-1], shape[-2]) if swapped else shape
    nd = nz_to_nd(stored, nd_shape)
    return np.swapaxes(nd, -1, -2).copy() if swapped else nd


__all__ = [
    "M0",
    "NZ_FORMATS",
    "NzArray",
    "aclnnCalculateMatmulWeightSize",
    "aclnnCalculateMatmulWeightSizeV2",
    "aclnnNpuFormatCastCalculateSizeAndFormat",
    "c0_for",
    "calculate_size_and_format",
    "check_nz_tensor",
    "from_device_nz",
    "is_nz",
    "matmul_weight_size",
    "nd_to_nz",
    "nz_shape",
    "nz_to_nd",
    "nz_transposed",
    "storage_array",
    "to_device_nz",
]

"""FRACTAL_NZ on the reference against the documented index formula, shape rule, C0 table and worked example."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest
import torch

from acl_core import aclnn, eager, nz
from acl_core.dtypes import DataType as D
from acl_core.errors import AclnnError
from acl_core.formats import Format
from acl_core.spec.ops import layout
from acl_core.spec.runtime import MemcpyKind
from acl_core.tensor import AclTensor
from tests.conftest import assert_close
from tests.ops.torch_ref import ref

NZ = Format.ACL_FORMAT_FRACTAL_NZ


def _by_formula(nd: np.ndarray, c0: int) -> np.ndarray:
    """NZ[..., j // C0, i // 16, i % 16, j % C0] = ND[..., i, j], zero elsewhere, element by element."""
    *batch, n, c = nd.shape
    out = np.zeros((*batch, -(-c // c0), -(-n // 16), 16, c0), dtype=nd.dtype)
    for idx in itertools.product(*(range(b) for b in batch)):
        for i in range(n):
            for j in range(c):
                out[(*idx, j // c0, i // 16, i % 16, j % c0)] = nd[(*idx, i, j)]
    return out


@pytest.mark.parametrize("shape,c0", [((8, 100, 30), 16), ((17, 40), 32), ((2, 3, 5, 9), 8), ((16, 64), 64)])
def test_nd_to_nz_follows_the_index_formula(shape: tuple[int, ...], c0: int, rng: np.random.Generator) -> None:
    nd = rng.integers(1, 100, shape).astype(np.int32)
    tiles = nz.nd_to_nz(nd, c0)
    np.testing.assert_array_equal(tiles, _by_formula(nd, c0))
    np.testing.assert_array_equal(nz.nz_to_nd(tiles, shape), nd)
    assert np.count_nonzero(tiles) == nd.size  # everything else is zero padding


def test_worked_example_fp16_8x100x30() -> None:
    assert nz.nz_shape((8, 100, 30), nz.c0_for(D.ACL_FLOAT16)) == (8, 2, 7, 16, 16)
    tiles = nz.nd_to_nz(np.ones((8, 100, 30), np.float16), 16)
    three_d = tiles.reshape(8, 2, 7 * 16, 16)  # ATB's "[b, n1, m1*m0, n0]" spelling
    assert three_d.shape == (8, 2, 112, 16)
    assert three_d[:, :, 100:, :].sum() == 0 and three_d[:, 1, :, 14:].sum() == 0


def test_c0_per_dtype_and_pinned_formats() -> None:
    expected = {
        D.ACL_FLOAT: 8, D.ACL_INT32: 8, D.ACL_FLOAT16: 16, D.ACL_BF16: 16, D.ACL_INT8: 32, D.ACL_UINT8: 32,
        D.ACL_FLOAT8_E4M3FN: 32, D.ACL_FLOAT8_E5M2: 32, D.ACL_HIFLOAT8: 32, D.ACL_FLOAT4_E2M1: 64, D.ACL_INT4: 64,
    }  # fmt: skip
    for dtype, c0 in expected.items():
        assert nz.c0_for(dtype) == c0, dtype
    assert nz.c0_for(D.ACL_FLOAT, Format.ACL_FORMAT_FRACTAL_NZ_C0_16) == 16
    assert nz.c0_for(D.ACL_INT32, Format.ACL_FORMAT_FRACTAL_NZ_C0_4) == 4


# ----------------------------------------------------------------------------- host helpers
def _nd(shape: tuple[int, ...], dtype: D) -> AclTensor:
    return AclTensor.create(shape, dtype, data=0)


def test_calculate_size_and_format() -> None:
    shape, size, fmt, ret = aclnn.aclnnNpuFormatCastCalculateSizeAndFormat(_nd((8, 100, 30), D.ACL_FLOAT16), 29, 1)
    assert (shape, size, fmt, ret) == ([8, 2, 7, 16, 16], 5, 29, 0)
    shape, _, fmt, ret = aclnn.aclnnNpuFormatCastCalculateSizeAndFormat(_nd((64, 128), D.ACL_INT32), 29, 1)
    assert (shape, fmt, ret) == ([8, 4, 16, 16], int(Format.ACL_FORMAT_FRACTAL_NZ_C0_16), 0)
    shape, _, fmt, _ = aclnn.aclnnNpuFormatCastCalculateSizeAndFormat(_nd((40, 70), D.ACL_INT8), 29, 2)
    assert (shape, fmt) == ([3, 3, 16, 32], 29)
    shape, _, fmt, _ = aclnn.aclnnNpuFormatCastCalculateSizeAndFormat(_nd((16, 100), D.ACL_FLOAT4_E2M1), 29, 40)
    assert (shape, fmt) == ([2, 1, 16, 64], 29)
    assert aclnn.aclnnNpuFormatCastCalculateSizeAndFormat(_nd((4,), D.ACL_FLOAT16), 29, 1)[3] == 161002
    assert aclnn.aclnnNpuFormatCastCalculateSizeAndFormat(_nd((4, 4), D.ACL_FLOAT16), 3, 1)[3] == 161002
    assert aclnn.aclnnNpuFormatCastCalculateSizeAndFormat(None, 29, 1)[3] == 161001
    assert "null" in aclnn.aclGetRecentErrMsg()


def test_calculate_matmul_weight_size_documented_examples() -> None:
    assert aclnn.aclnnCalculateMatmulWeightSize([510, 510]) == (262144, 0)
    assert aclnn.aclnnCalculateMatmulWeightSizeV2([510, 510], int(D.ACL_BF16)) == (262144, 0)
    assert aclnn.aclnnCalculateMatmulWeightSizeV2([510, 270], int(D.ACL_INT8)) == (147456, 0)
    assert aclnn.aclnnCalculateMatmulWeightSizeV2([3, 510, 270], int(D.ACL_INT8)) == (3 * 147456, 0)
    assert aclnn.aclnnCalculateMatmulWeightSizeV2([510], int(D.ACL_INT8))[1] == 161002
    assert aclnn.aclnnCalculateMatmulWeightSizeV2([0, 5], int(D.ACL_INT8))[1] == 161002
    assert aclnn.aclnnCalculateMatmulWeightSizeV2([4, 5], int(D.ACL_FLOAT))[1] == 161002
    assert aclnn.aclnnCalculateMatmulWeightSizeV2(None, int(D.ACL_INT8))[1] == 161001


# ----------------------------------------------------------------------------- NpuFormatCast
def _nz_destination(nd_shape: tuple[int, ...], dtype: D, fill: int = 0x55) -> tuple[AclTensor, eager.DeviceArray]:
    """An NZ destination made as CANN's sample makes it: storage from CalculateSizeAndFormat, filled with garbage."""
    src = AclTensor.create(nd_shape, dtype, data=0)
    shape, _, fmt, ret = aclnn.aclnnNpuFormatCastCalculateSizeAndFormat(src, 29, int(dtype))
    assert ret == 0 and shape is not None
    count = int(np.prod(shape))
    storage = eager.to_device(np.full(max(count * dtype.info.storage_bits // 8, 1), fill, np.uint8), "reference")
    return AclTensor.create(nd_shape, dtype, None, 0, fmt, shape, storage.address), storage


@pytest.mark.parametrize(
    "dtype,values",
    [
        (D.ACL_FLOAT16, lambda r: r.standard_normal((2, 20, 37)).astype(np.float16)),
        (D.ACL_INT8, lambda r: r.integers(-100, 100, (33, 70)).astype(np.int8)),
        (D.ACL_FLOAT8_E4M3FN, lambda r: r.uniform(-50, 50, (18, 40)).astype(ml_dtypes.float8_e4m3fn)),
        (D.ACL_FLOAT4_E2M1, lambda r: r.uniform(-6, 6, (17, 70)).astype(ml_dtypes.float4_e2m1fn)),
    ],
    ids=lambda v: v.short if isinstance(v, D) else "",
)
def test_npu_format_cast_round_trip(dtype: D, values, rng: np.random.Generator) -> None:  # type: ignore[no-untyped-def]
    nd = values(rng)
    dst, storage = _nz_destination(nd.shape, dtype)
    ref("NpuFormatCast", srcTensor=nd, dstTensor=dst)
    raw = storage.storage_bytes()
    c0 = nz.c0_for(dtype)
    tiles = nz.nd_to_nz(nd, c0)
    if dtype.is_packed:
        from acl_core import lowp

        got = lowp.unpack_nibbles(raw, tiles.size).view(dtype.numpy)
    else:
        got = raw[: tiles.size * tiles.itemsize].view(dtype.numpy)
    np.testing.assert_array_equal(got.reshape(tiles.shape).view(np.uint8), tiles.view(np.uint8))  # zeros in padding
    back = nz.to_device_nz(nd, "reference")
    assert ref("NpuFormatCast", srcTensor=back)["dstTensor"].view(np.uint8).tolist() == nd.view(np.uint8).tolist()


def test_npu_format_cast_checks_the_nz_storage_shape(rng: np.random.Generator) -> None:
    nd = rng.standard_normal((20, 37)).astype(np.float16)
    storage = eager.to_device(np.zeros(4096, np.uint8), "reference")
    wrong = AclTensor.create(nd.shape, D.ACL_FLOAT16, None, 0, NZ, (2, 3, 16, 16), storage.address)  # M1, N1 swapped
    with pytest.raises(AclnnError) as info:
        ref("NpuFormatCast", srcTensor=nd, dstTensor=wrong)
    assert info.value.code == 161002 and "NZ shape" in info.value.message
    other = AclTensor.create(nd.shape, D.ACL_FLOAT, None, 0, NZ, (5, 2, 16, 8), storage.address)
    with pytest.raises(AclnnError):
        ref("NpuFormatCast", srcTensor=nd, dstTensor=other)


# ----------------------------------------------------------------------------- MatmulWeightNz / TransMatmulWeight
@pytest.mark.parametrize("transposed", [False, True])
def test_matmul_weight_nz_matches_torch(transposed: bool, rng: np.random.Generator) -> None:
    a = rng.standard_normal((5, 40)).astype(np.float16)
    b = rng.standard_normal((40, 23)).astype(np.float16)
    mat2 = nz.to_device_nz(b, "reference", transposed=transposed)
    got = ref("MatmulWeightNz", self=a, mat2=mat2, cubeMathType=0)["out"]
    want = (torch.from_numpy(a).double() @ torch.from_numpy(b).double()).half().numpy()
    assert_close(got, want, atol=0, rtol=0)
    np.testing.assert_array_equal(nz.from_device_nz(mat2), b)


def test_trans_matmul_weight_rewrites_the_tensor_as_nz(rng: np.random.Generator) -> None:
    w = rng.standard_normal((48, 32)).astype(np.float16)
    da = eager.to_device(w, "reference")
    ref("TransMatmulWeight", mmWeightRef=da)
    t = da.tensor()
    assert t.format == NZ and t.storage_dims == (2, 3, 16, 16) and t.view_dims == (48, 32)
    stored = da.storage_bytes()[: w.nbytes].view(np.float16).reshape(2, 3, 16, 16)
    np.testing.assert_array_equal(stored, nz.nd_to_nz(w, 16))
    a = rng.standard_normal((3, 48)).astype(np.float16)
    got = ref("MatmulWeightNz", self=a, mat2=da, cubeMathType=0)["out"]
    assert_close(got, (a.astype(np.float64) @ w.astype(np.float64)).astype(np.float16), atol=0, rtol=0)
    with pytest.raises(AclnnError) as info:  # the tensor is FRACTAL_NZ now: a second conversion is refused
        ref("TransMatmulWeight", mmWeightRef=da)
    assert info.value.code == 161002


def test_trans_matmul_weight_needs_the_calculated_size(rng: np.random.Generator) -> None:
    w = rng.integers(-100, 100, (20, 40)).astype(np.int8)
    with pytest.raises(AclnnError) as info:  # an ND-sized allocation cannot hold the padded NZ tiles
        ref("TransMatmulWeight", mmWeightRef=w)
    assert info.value.code == 161002
    size, ret = aclnn.aclnnCalculateMatmulWeightSizeV2(list(w.shape), int(D.ACL_INT8))
    assert (size, ret) == (32 * 64, 0)
    storage = eager.to_device(np.zeros(size, np.int8), "reference")
    host = eager.to_device(w, "reference")
    storage.backend.runtime.memcpy(
        storage.address, w.nbytes, host.address, w.nbytes, MemcpyKind.ACL_MEMCPY_DEVICE_TO_DEVICE
    )
    t = AclTensor.create(w.shape, D.ACL_INT8, None, 0, Format.ACL_FORMAT_ND, (size,), storage.address)
    ref("TransMatmulWeight", mmWeightRef=t)
    assert t.storage_dims == (2, 2, 16, 32)
    np.testing.assert_array_equal(storage.storage_bytes().view(np.int8).reshape(2, 2, 16, 32), nz.nd_to_nz(w, 32))


@pytest.mark.parametrize("spec", layout.SPECS, ids=lambda s: s.name)
def test_layout_samples_and_error_samples(spec) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(5)
    for sample in spec.samples(rng) if spec.samples else ():
        assert ref(spec.name, **sample.args)
    assert spec.error_samples is not None
    for err in spec.error_samples(rng):
        with pytest.raises(AclnnError) as info:
            ref(spec.name, **err.args)
        assert int(info.value.code) == err.code, f"{spec.name} {err.note}: {info.value}"

"""The GEMM variants' reference against PyTorch's CPU matmuls and against their base operators.

TransposeBatchMatMul and TransposeQuantBatchMatMul are compared with ``torch.bmm`` over permuted views
(float64), GroupedMatmul V1 with per-group ``torch.matmul``; the FRACTAL_NZ versions must equal their
base operator on the ND weight bit for bit (the same reference arithmetic on the same values), for a
plain and a transposed NZ view.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

from acl_core import lowp, nz
from acl_core.errors import AclnnError
from tests.conftest import assert_close
from tests.ops.torch_ref import ref, to_torch

TB = {"bias": None, "scale": None, "permY": [1, 0, 2], "cubeMathType": 0, "batchSplitFactor": 1}


def _bmm64(a: np.ndarray, b: np.ndarray) -> torch.Tensor:
    return torch.bmm(to_torch(a).double(), to_torch(b).double())


@pytest.mark.parametrize("perm_x1", [[0, 1, 2], [1, 0, 2]])
@pytest.mark.parametrize("perm_x2", [[0, 1, 2], [0, 2, 1]])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
def test_transpose_batch_matmul_matches_torch_bmm_of_the_permuted_views(
    perm_x1: list[int], perm_x2: list[int], dtype: type, rng: np.random.Generator
) -> None:
    b, m, k, n = 4, 6, 9, 5
    x1 = rng.uniform(-1, 1, [(b, m, k)[p] for p in perm_x1]).astype(dtype)
    x2 = rng.uniform(-1, 1, [(b, k, n)[p] for p in perm_x2]).astype(dtype)
    got = ref("TransposeBatchMatMul", x1=x1, x2=x2, permX1=perm_x1, permX2=perm_x2, **TB)["out"]
    a = np.transpose(x1.astype(np.float64), perm_x1)
    w = np.transpose(x2.astype(np.float64), perm_x2)
    want = _bmm64(a, w).permute(1, 0, 2).numpy()  # (M, B, N)
    assert got.shape == (m, b, n) and got.dtype == np.dtype(dtype)
    assert_close(got, want.astype(dtype), atol=0, rtol=0)


def test_batch_split_factor_cuts_the_columns_into_blocks(rng: np.random.Generator) -> None:
    b, m, k, n = 4, 3, 8, 2
    x1 = rng.uniform(-1, 1, (m, b, k)).astype(np.float32)
    x2 = rng.uniform(-1, 1, (b, k, n)).astype(np.float32)
    whole = ref("TransposeBatchMatMul", x1=x1, x2=x2, permX1=[1, 0, 2], permX2=[0, 1, 2], **TB)["out"]
    split = ref(
        "TransposeBatchMatMul", x1=x1, x2=x2, permX1=[1, 0, 2], permX2=[0, 1, 2], **{**TB, "batchSplitFactor": 2}
    )["out"]
    assert split.shape == (2, m, b * n // 2)
    flat = whole.reshape(m, b * n)
    np.testing.assert_array_equal(split[0], flat[:, : b * n // 2])
    np.testing.assert_array_equal(split[1], flat[:, b * n // 2 :])


def test_scale_gives_rounded_saturated_int8(rng: np.random.Generator) -> None:
    b, m, k, n = 2, 3, 4, 3
    x1 = rng.integers(-8, 9, (m, b, k)).astype(np.float16)
    x2 = rng.integers(-8, 9, (b, k, n)).astype(np.float16)
    scales = np.array([1.5, 0.75, 4.5, 9.0, 2.25, 6.0], np.float32)
    packed = lowp.encode_packed_scale(scales).view(np.int64)
    got = ref("TransposeBatchMatMul", x1=x1, x2=x2, permX1=[1, 0, 2], permX2=[0, 1, 2], **{**TB, "scale": packed})
    y = _bmm64(np.transpose(x1, (1, 0, 2)), x2).permute(1, 0, 2).reshape(m, 1, b * n).numpy()
    want = np.clip(np.round(y * scales.astype(np.float64)), -128, 127).astype(np.int8)  # numpy rounds half to even
    assert got["out"].dtype == np.int8
    np.testing.assert_array_equal(got["out"], want)
    assert np.any(np.abs(y * scales) > 127.5), "the case must exercise saturation"


def test_transpose_quant_batch_matmul_k_c_mode_matches_torch(rng: np.random.Generator) -> None:
    m, b, k, n = 3, 2, 512, 128
    x1 = rng.uniform(-8, 8, (m, b, k)).astype(ml_dtypes.float8_e4m3fn)
    x2 = rng.uniform(-8, 8, (b, k, n)).astype(ml_dtypes.float8_e4m3fn)
    s1 = rng.uniform(0.01, 0.1, m).astype(np.float32)
    s2 = rng.uniform(0.01, 0.1, n).astype(np.float32)
    got = ref(
        "TransposeQuantBatchMatMul",
        x1=x1,
        x2=x2,
        bias=None,
        x1Scale=s1,
        x2Scale=s2,
        dtype=27,
        groupSize=0,
        permX1=[1, 0, 2],
        permX2=[0, 1, 2],
        permY=[1, 0, 2],
        batchSplitFactor=1,
    )["out"]
    t1 = torch.from_numpy(x1.view(np.uint8).copy()).view(torch.float8_e4m3fn).double()
    t2 = torch.from_numpy(x2.view(np.uint8).copy()).view(torch.float8_e4m3fn).double()
    y = torch.bmm(t1.permute(1, 0, 2), t2).permute(1, 0, 2)
    want = (y * torch.from_numpy(s1).double()[:, None, None] * torch.from_numpy(s2).double()).numpy()
    assert got.dtype == ml_dtypes.bfloat16
    assert_close(got, want.astype(ml_dtypes.bfloat16), atol=0, rtol=0)


# ----------------------------------------------------------------------------- NZ versions equal their base
@pytest.mark.parametrize("transposed", [False, True])
def test_quant_matmul_weight_nz_equals_quant_matmul_v5(transposed: bool, rng: np.random.Generator) -> None:
    x1 = rng.integers(-128, 128, (5, 64)).astype(np.int8)
    x2 = rng.integers(-128, 128, (64, 24)).astype(np.int8)
    args = {"x1": x1, "x1Scale": rng.uniform(0.5, 2, 5).astype(np.float32)}
    args |= {"x2Scale": rng.uniform(1e-3, 1e-2, 24).astype(np.float32), "yScale": None, "x1Offset": None}
    args |= {"x2Offset": None, "yOffset": None, "bias": rng.standard_normal(24).astype(np.float32)}
    args |= {"transposeX1": False, "transposeX2": False, "groupSize": 0}
    want = ref("QuantMatmulV5", x2=x2, **args)["out"]
    got = ref("QuantMatmulWeightNz", x2=nz.to_device_nz(x2, "reference", transposed=transposed), **args)["out"]
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


@pytest.mark.parametrize("transposed", [False, True])
def test_weight_quant_batch_matmul_nz_equals_v2(transposed: bool, rng: np.random.Generator) -> None:
    x = rng.uniform(-1, 1, (3, 64)).astype(np.float16)
    w = rng.integers(-128, 128, (64, 40)).astype(np.int8)
    args = {"x": x, "antiquantScale": rng.uniform(1e-3, 1e-2, 40).astype(np.float16)}
    args |= {"antiquantOffsetOptional": rng.uniform(-3, 3, 40).astype(np.float16), "quantScaleOptional": None}
    args |= {"quantOffsetOptional": None, "biasOptional": None, "antiquantGroupSize": 0}
    want = ref("WeightQuantBatchMatmulV2", weight=w, **args)["y"]
    got = ref("WeightQuantBatchMatmulNz", weight=nz.to_device_nz(w, "reference", transposed=transposed), **args)["y"]
    np.testing.assert_array_equal(got, want)


def test_grouped_matmul_weight_nz_equals_v5(rng: np.random.Generator) -> None:
    x = rng.uniform(-1, 1, (20, 40)).astype(np.float16)
    w = rng.uniform(-1, 1, (3, 40, 24)).astype(np.float16)
    args = {"x": [x], "biasOptional": [rng.uniform(-1, 1, (3, 24)).astype(np.float16)]}
    args |= {"groupListOptional": np.array([5, 5, 20], np.int64), "splitItem": 2, "groupType": 0}
    args |= {"groupListType": 0, "actType": 0}
    want = ref("GroupedMatmulV5", weight=[w], **args)["out"][0]
    got = ref("GroupedMatmulWeightNz", weight=[nz.NzArray(w)], quantGroupSize=0, **args)["out"][0]
    np.testing.assert_array_equal(got, want)


# ----------------------------------------------------------------------------- GroupedMatmul V1
V1 = {"biasOptional": None, "scaleOptional": None, "offsetOptional": None, "antiquantScaleOptional": None}
V1 |= {"antiquantOffsetOptional": None, "groupListOptional": None}


def _mm64(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return (to_torch(x).double() @ to_torch(w).double()).numpy()


def test_grouped_matmul_v1_scenarios_match_per_group_torch_matmuls(rng: np.random.Generator) -> None:
    x = rng.uniform(-1, 1, (10, 8)).astype(np.float32)
    ws = [rng.uniform(-1, 1, (8, 6)).astype(np.float32) for _ in range(3)]
    ends = [3, 3, 10]
    starts = [0, 3, 3]
    parts = [_mm64(x[s:e], w) for s, e, w in zip(starts, ends, ws)]
    sms = ref("GroupedMatmul", x=[x], weight=ws, **{**V1, "groupListOptional": ends}, splitItem=2)["y"]
    assert len(sms) == 1
    assert_close(sms[0], np.concatenate(parts).astype(np.float32), atol=0, rtol=0)
    smm = ref("GroupedMatmul", x=[x], weight=ws, **{**V1, "groupListOptional": ends}, splitItem=0)["y"]
    assert [y.shape for y in smm] == [(3, 6), (0, 6), (7, 6)]
    for got, want in zip(smm, parts):
        assert_close(got, want.astype(np.float32), atol=0, rtol=0)
    xs = [x[s:e] for s, e in zip(starts, ends)]
    mms = ref("GroupedMatmul", x=xs, weight=ws, **V1, splitItem=3)["y"]
    np.testing.assert_array_equal(mms[0], sms[0])
    bias = [rng.uniform(-1, 1, 6).astype(np.float32) for _ in range(3)]
    mmm = ref("GroupedMatmul", x=xs, weight=ws, **{**V1, "biasOptional": bias}, splitItem=1)["y"]
    for got, want, b in zip(mmm, parts, bias):
        assert_close(got, (want + b).astype(np.float32), atol=0, rtol=0)


def test_grouped_matmul_v1_refuses_a_group_list_past_x_with_its_code(rng: np.random.Generator) -> None:
    x = rng.uniform(-1, 1, (4, 3)).astype(np.float32)
    ws = [rng.uniform(-1, 1, (3, 2)).astype(np.float32)] * 2
    with pytest.raises(AclnnError) as err:
        ref("GroupedMatmul", x=[x], weight=ws, **{**V1, "groupListOptional": [2, 5]}, splitItem=0)
    assert err.value.code == 161002

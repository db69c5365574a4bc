"""The GEMM variants on the GPU (GPU tier), compared with the reference under each op's accuracy class.

Every sample contiguous and transposed, every error sample's code, and shapes of the models that reach
them: DeepSeek MLA's TransposeBatchMatMul ((M, B, K) activations against per-head (B, K, N) weights),
MoE grouped GEMMs with uneven groups, W8A8 and W8A16 linear layers with FRACTAL_NZ weights. Runs on
the CPU kernel emulator with ``ACL_ROCM_EMULATE=1``.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from acl_core import lowp
from acl_core.backend import Backend
from acl_core.nz import NzArray
from acl_core.spec.ops import get_spec
from tests.rocm.against_reference import assert_errors_match_reference, assert_matches_reference

pytestmark = pytest.mark.gpu
OPS = [
    "TransposeBatchMatMul",
    "TransposeQuantBatchMatMul",
    "QuantMatmulWeightNz",
    "WeightQuantBatchMatmulNz",
    "GroupedMatmulWeightNz",
    "GroupedMatmul",
]


LAYOUTS = [(op, "contiguous") for op in OPS] + [(op, "transposed") for op in OPS if op != "TransposeQuantBatchMatMul"]
"""TransposeQuantBatchMatMul's samples have the documented K = 512, N = 128: one layout keeps the emulated run short."""


@pytest.mark.parametrize(("op", "layout"), LAYOUTS)
def test_samples_match_reference(rocm: Backend, reference: Backend, op: str, layout: str) -> None:
    for sample in get_spec(op).samples(np.random.default_rng(4)):  # type: ignore[misc]
        assert_matches_reference(rocm, reference, op, dict(sample.args), layout, sample.note)


@pytest.mark.parametrize("op", OPS)
def test_errors_match_reference(rocm: Backend, reference: Backend, op: str) -> None:
    assert_errors_match_reference(rocm, reference, op)


TB = {"bias": None, "scale": None, "permY": [1, 0, 2], "cubeMathType": 0, "batchSplitFactor": 1}


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16])
def test_mla_shaped_transpose_batch_matmul(rocm: Backend, reference: Backend, dtype: Any) -> None:
    rng = np.random.default_rng(1)
    heads, tokens, latent, v_dim = 16, 32, 512, 128  # DeepSeek MLA's W_UV: (M, B, K) x (B, K, N) -> (M, B, N)
    args = {
        **TB,
        "x1": rng.uniform(-1, 1, (tokens, heads, latent)).astype(dtype),
        "x2": rng.uniform(-1, 1, (heads, latent, v_dim)).astype(dtype),
        "permX1": [1, 0, 2],
        "permX2": [0, 1, 2],
    }
    assert_matches_reference(rocm, reference, "TransposeBatchMatMul", args, "contiguous", "MLA W_UV")
    split = {**args, "batchSplitFactor": 4, "x2": np.ascontiguousarray(np.swapaxes(args["x2"], 1, 2))}
    split["permX2"] = [0, 2, 1]
    assert_matches_reference(rocm, reference, "TransposeBatchMatMul", split, "contiguous", "split 4, (B, N, K)")


def test_transpose_batch_matmul_to_int8(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(2)
    b, m, k, n = 8, 24, 64, 64
    args = {
        **TB,
        "x1": rng.integers(-3, 4, (m, b, k)).astype(np.float16),
        "x2": rng.integers(-3, 4, (b, k, n)).astype(np.float16),
        "permX1": [1, 0, 2],
        "permX2": [0, 1, 2],
        "scale": lowp.encode_packed_scale(rng.uniform(0.02, 0.5, b * n)).view(np.int64),
    }
    assert_matches_reference(rocm, reference, "TransposeBatchMatMul", args, "contiguous", "INT8 out")


def test_transpose_quant_batch_matmul_k_c(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(3)
    m, b = 32, 2
    args = {
        "x1": rng.uniform(-6, 6, (m, b, 512)).astype(ml_dtypes.float8_e4m3fn),
        "x2": rng.uniform(-6, 6, (b, 512, 128)).astype(ml_dtypes.float8_e4m3fn),
        "bias": None,
        "x1Scale": rng.uniform(0.01, 0.1, m).astype(np.float32),
        "x2Scale": rng.uniform(0.01, 0.1, 128).astype(np.float32),
        "dtype": 27,
        "groupSize": 0,
        "permX1": [1, 0, 2],
        "permX2": [0, 1, 2],
        "permY": [1, 0, 2],
        "batchSplitFactor": 1,
    }
    assert_matches_reference(rocm, reference, "TransposeQuantBatchMatMul", args, "contiguous", "K-C fp8")


def test_w8a8_linear_with_an_nz_weight(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(4)
    m, k, n = 64, 256, 256
    args = {
        "x1": rng.integers(-128, 128, (m, k)).astype(np.int8),
        "x2": NzArray(rng.integers(-128, 128, (k, n)).astype(np.int8)),
        "x1Scale": rng.uniform(0.5, 2, m).astype(np.float32),
        "x2Scale": rng.uniform(1e-4, 1e-3, n).astype(np.float32),
        "bias": rng.standard_normal(n).astype(np.float32),
        **dict.fromkeys(("yScale", "x1Offset", "x2Offset", "yOffset")),
        "transposeX1": False,
        "transposeX2": False,
        "groupSize": 0,
    }
    assert_matches_reference(rocm, reference, "QuantMatmulWeightNz", args, "contiguous", "W8A8 per-token")


def test_w8a16_linear_with_an_nz_weight(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(5)
    m, k, n = 16, 256, 256
    args = {
        "x": rng.uniform(-1, 1, (m, k)).astype(ml_dtypes.bfloat16),
        "weight": NzArray(rng.integers(-128, 128, (k, n)).astype(np.int8)),
        "antiquantScale": rng.uniform(1e-3, 1e-2, n).astype(ml_dtypes.bfloat16),
        "antiquantOffsetOptional": None,
        "quantScaleOptional": None,
        "quantOffsetOptional": None,
        "biasOptional": rng.standard_normal(n).astype(np.float32),
        "antiquantGroupSize": 0,
    }
    assert_matches_reference(rocm, reference, "WeightQuantBatchMatmulNz", args, "contiguous", "W8A16")


def _moe_rows(rng: np.random.Generator, groups: int, total: int) -> np.ndarray:
    cuts = np.sort(rng.integers(0, total + 1, groups - 1))
    return np.diff(np.concatenate([[0], cuts, [total]])).astype(np.int64)


def test_moe_grouped_matmul_with_nz_weights(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(6)
    groups, m, k, n = 8, 300, 128, 128
    counts = _moe_rows(rng, groups, m)
    args = {
        "x": [rng.uniform(-1, 1, (m, k)).astype(ml_dtypes.bfloat16)],
        "weight": [NzArray(rng.uniform(-1, 1, (groups, k, n)).astype(ml_dtypes.bfloat16))],
        "biasOptional": [rng.uniform(-1, 1, (groups, n)).astype(np.float32)],
        "groupListOptional": counts,
        "splitItem": 3,
        "groupType": 0,
        "groupListType": 1,
        "actType": 0,
        "quantGroupSize": 0,
    }
    assert_matches_reference(rocm, reference, "GroupedMatmulWeightNz", args, "contiguous", "MoE, counts")


@pytest.mark.parametrize("split_item", [2, 0])
def test_moe_grouped_matmul_v1(rocm: Backend, reference: Backend, split_item: int) -> None:
    rng = np.random.default_rng(7)
    groups, m, k, n = 8, 600, 256, 192
    ends = np.cumsum(_moe_rows(rng, groups, m)).tolist()
    args = {
        "x": [rng.uniform(-1, 1, (m, k)).astype(np.float16)],
        "weight": [rng.uniform(-1, 1, (k, n)).astype(np.float16) for _ in range(groups)],
        **dict.fromkeys(("biasOptional", "scaleOptional", "offsetOptional", "antiquantScaleOptional")),
        "antiquantOffsetOptional": None,
        "groupListOptional": ends,
        "splitItem": split_item,
    }
    assert_matches_reference(rocm, reference, "GroupedMatmul", args, "contiguous", f"MoE, splitItem {split_item}")

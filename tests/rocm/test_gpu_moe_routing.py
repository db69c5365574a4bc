"""MoeGatingTopK, MoeTokenPermute, MoeTokenUnpermute and MoeInitRoutingV2 on the GPU against the reference (GPU tier).

Every sample in every layout under the op's class (expert numbers, permuted rows and positions exact),
then serving shapes: DeepSeek-V3 routing of 4,096 tokens over 256 experts (8 groups, top-4 groups,
top-8, sigmoid + bias), 2,048 experts of a softmax, near-tie and special rows; a permute of 4,096
tokens × top-8 over 64 experts with 2,048-wide bf16 rows (the 16-byte word path) and odd rows (the
element path), its unpermute and the round trip; MoeInitRoutingV2 dropless (counts, cumsum, activeNum)
and drop/pad at the same scale; MoeInitRoutingV3 as expert parallelism uses it (the experts of one
rank of eight, DeepSeek-V3's 7,168-wide rows, dynamic int8 with smooth scales, scatter indices) and
unquantised with key-value counts; MoeGatingTopKBackward from the DeepSeek-V3 forward's outputs and over 2,048
experts with repeated ones; the kernel-side index errors.
``ACL_ROCM_EMULATE=1`` runs it on the CPU kernel emulator (the serving shapes shrink).
"""

from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from tests.rocm.against_reference import (
    assert_errors_match_reference,
    assert_every_sample_matches,
    assert_matches_reference,
)
from tests.rocm.moe_routing_cases import ROUTING_OPS

pytestmark = pytest.mark.gpu

EMULATED = os.environ.get("ACL_ROCM_EMULATE") == "1"


@pytest.mark.parametrize("op", ROUTING_OPS)
def test_every_sample_matches_the_reference(rocm: Backend, reference: Backend, op: str) -> None:
    assert_every_sample_matches(rocm, reference, op, emulated_stride=4)


@pytest.mark.parametrize("op", ROUTING_OPS)
def test_errors_match_the_reference(rocm: Backend, reference: Backend, op: str) -> None:
    assert_errors_match_reference(rocm, reference, op)


def _gating(x: np.ndarray, bias: np.ndarray | None, **attrs: object) -> dict:
    base = {"x": x, "biasOptional": bias, "k": 8, "kGroup": 4, "groupCount": 8, "groupSelectMode": 1}
    base |= {"renorm": 0, "normType": 1, "outFlag": True, "routedScalingFactor": 2.5, "eps": 1e-20}
    return {**base, **attrs}


def test_gating_top_k_at_serving_shapes(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(1)
    tokens = 64 if EMULATED else 4096
    x = rng.standard_normal((tokens, 256)).astype(np.float32)
    bias = (rng.standard_normal(256) * 0.1).astype(np.float32)
    assert_matches_reference(rocm, reference, "MoeGatingTopK", _gating(x, bias), "contiguous", "DeepSeek-V3")
    bf = x.astype(np.float16)
    assert_matches_reference(rocm, reference, "MoeGatingTopK", _gating(bf, bias.astype(np.float16)), "padded", "fp16")
    wide = rng.standard_normal((8 if EMULATED else 256, 2048)).astype(np.float32)
    attrs = {"k": 16, "kGroup": 8, "groupCount": 64, "groupSelectMode": 0, "normType": 0, "renorm": 1}
    assert_matches_reference(rocm, reference, "MoeGatingTopK", _gating(wide, None, **attrs), "contiguous", "2048")


def test_gating_top_k_near_ties(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((16, 256)).astype(np.float32)
    x[0] = np.float32(0.5)  # all tied
    x[1] = np.float32(30.0) + np.arange(256, dtype=np.float32) * 2**-19  # sigmoid saturates in double
    x[2, ::3] = x[2, 1]
    x[3, 17], x[4, :] = np.nan, -np.inf
    bias = np.zeros(256, np.float32)
    bias[1::2] = np.float32(2.0**-40)  # moves double keys only
    for b in (None, bias):
        for norm in (0, 1):
            args = _gating(x, b, normType=norm)
            assert_matches_reference(rocm, reference, "MoeGatingTopK", args, "contiguous", f"ties norm {norm}")


def test_gating_top_k_backward_at_serving_shapes(rocm: Backend, reference: Backend) -> None:
    """DeepSeek-V3's router backward (256 experts, top-8) from the forward's own outputs, 2,048 experts, repeats."""
    rng = np.random.default_rng(4)
    tokens = 64 if EMULATED else 4096
    x = rng.standard_normal((tokens, 256)).astype(np.float32)
    bias = (rng.standard_normal(256) * 0.1).astype(np.float32)
    fwd = eager.run("MoeGatingTopK", rocm, **_gating(x, bias))
    attrs = {"renorm": 0, "normType": 1, "routedScalingFactor": 2.5, "eps": 1e-20}
    for dtype in (np.float32, ml_dtypes.bfloat16):
        grad = rng.standard_normal((tokens, 8)).astype(dtype)
        args = {"xNorm": fwd["outOut"], "gradY": grad, "expertIdx": fwd["expertIdxOut"], **attrs}
        assert_matches_reference(rocm, reference, "MoeGatingTopKBackward", args, "contiguous", f"DeepSeek-V3 {dtype}")
    rows = 8 if EMULATED else 512
    wide = rng.uniform(0.01, 0.99, (rows, 2048)).astype(np.float32)
    idx = np.stack([rng.permutation(2048)[:64] for _ in range(rows)]).astype(np.int32)
    idx[::3, 32:] = idx[::3, :32]  # every third row names each expert twice
    grad = rng.standard_normal((rows, 64)).astype(np.float16)
    args = {"xNorm": wide, "gradY": grad, "expertIdx": idx, **attrs}
    assert_matches_reference(rocm, reference, "MoeGatingTopKBackward", args, "transposed", "2048 experts, repeats")


def test_permute_and_unpermute_at_serving_shapes(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(3)
    tokens, hidden = (48, 64) if EMULATED else (4096, 2048)
    indices = np.stack([rng.choice(64, 8, replace=False) for _ in range(tokens)]).astype(np.int32)
    x = (rng.standard_normal((tokens, hidden))).astype(np.float16)
    for num_out in (0, tokens * 3, -tokens):
        args = {"tokens": x, "indices": indices, "numOutTokens": num_out, "paddedMode": False}
        assert_matches_reference(rocm, reference, "MoeTokenPermute", args, "contiguous", f"numOut {num_out}")
    odd = {"tokens": x[:, :7].copy(), "indices": indices.astype(np.int64), "numOutTokens": 0, "paddedMode": False}
    assert_matches_reference(rocm, reference, "MoeTokenPermute", odd, "transposed", "7-wide rows, int64")
    fwd = eager.run("MoeTokenPermute", rocm, tokens=x, indices=indices, numOutTokens=0, paddedMode=False)
    probs = rng.random((tokens, 8)).astype(np.float32)
    args = {"permutedTokens": fwd["permuteTokensOut"], "sortedIndices": fwd["sortedIndicesOut"]}
    args |= {"probsOptional": probs, "paddedMode": False, "restoreShapeOptional": None}
    assert_matches_reference(rocm, reference, "MoeTokenUnpermute", args, "contiguous", "unpermute")
    ones = {**args, "probsOptional": np.full((tokens, 8), 0.125, np.float32)}
    back = eager.run("MoeTokenUnpermute", rocm, **ones)["out"]
    np.testing.assert_array_equal(back, x)  # 8 × 0.125·x, exact in double then one rounding


def test_init_routing_v2_at_serving_shapes(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(6)
    tokens, hidden = (40, 32) if EMULATED else (4096, 2048)
    expert = np.stack([rng.choice(64, 8, replace=False) for _ in range(tokens)]).astype(np.int32)
    x = rng.standard_normal((tokens, hidden)).astype(np.float16)
    base = {"x": x, "expertIdx": expert, "activeNum": 0, "expertCapacity": tokens // 4, "expertNum": 64}
    cases = [(0, 1, False, 0), (0, 2, False, tokens * 5), (1, 0, True, 0)]
    for drop, flag, before, active in cases:
        args = {**base, "dropPadMode": drop, "expertTokensCountOrCumsumFlag": flag, "activeNum": active}
        args["expertTokensBeforeCapacityFlag"] = before
        assert_matches_reference(rocm, reference, "MoeInitRoutingV2", args, "contiguous", f"drop {drop} flag {flag}")


def test_init_routing_v3_at_serving_shapes(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(7)
    tokens, hidden = (40, 48) if EMULATED else (2048, 7168)
    expert = np.stack([rng.choice(256, 8, replace=False) for _ in range(tokens)]).astype(np.int32)
    x = rng.standard_normal((tokens, hidden)).astype(np.float32).astype(ml_dtypes.bfloat16)
    smooth = rng.uniform(0.5, 2.0, (32, hidden)).astype(np.float32)
    base = {"x": x, "expertIdx": expert, "scaleOptional": smooth, "offsetOptional": None, "activeNum": 0}
    base |= {"expertCapacity": 0, "expertNum": 256, "dropPadMode": 0, "expertTokensNumType": 1}
    base |= {"expertTokensNumFlag": True, "quantMode": 1, "activeExpertRangeOptional": [32, 64], "rowIdxType": 1}
    assert_matches_reference(rocm, reference, "MoeInitRoutingV3", base, "contiguous", "EP rank 1 of 8, dynamic int8")
    plain = {**base, "scaleOptional": None, "quantMode": -1, "activeExpertRangeOptional": None}
    plain |= {"expertTokensNumType": 2, "rowIdxType": 0, "x": x[:, :2048].copy()}
    assert_matches_reference(rocm, reference, "MoeInitRoutingV3", plain, "contiguous", "all experts, key-value")

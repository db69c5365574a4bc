"""MoeTokenPermuteGrad and MoeTokenUnpermuteGrad on the GPU against the reference (GPU tier).

Every sample in every layout under the op's class, the error samples (the kernel-side range and repeat checks
among them), then a training shape: 4,096 tokens × top-8 with 2,048-wide bf16 rows (float32 probs), the
backwards of a permute / unpermute round trip run on the GPU, and the adjoint identity ``<PermuteGrad(g), x> =
<g, Permute(x)>``. ``ACL_ROCM_EMULATE=1`` runs it on the CPU kernel emulator (the shapes shrink).
"""

from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.errors import AclnnError
from tests.rocm.against_reference import (
    assert_errors_match_reference,
    assert_every_sample_matches,
    assert_matches_reference,
)

pytestmark = pytest.mark.gpu

OPS = ("MoeTokenPermuteGrad", "MoeTokenUnpermuteGrad")
EMULATED = os.environ.get("ACL_ROCM_EMULATE") == "1"
BF16 = ml_dtypes.bfloat16


@pytest.mark.parametrize("op", OPS)
def test_every_sample_matches_the_reference(rocm: Backend, reference: Backend, op: str) -> None:
    assert_every_sample_matches(rocm, reference, op, emulated_stride=3)


@pytest.mark.parametrize("op", OPS)
def test_errors_match_the_reference(rocm: Backend, reference: Backend, op: str) -> None:
    assert_errors_match_reference(rocm, reference, op)


def _routing(rng: np.random.Generator, tokens: int, experts: int, top_k: int) -> np.ndarray:
    return np.stack([rng.choice(experts, top_k, replace=False) for _ in range(tokens)]).astype(np.int32)


def test_backwards_of_a_round_trip_at_training_shapes(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(16)
    tokens, hidden = (24, 40) if EMULATED else (4096, 2048)
    top_k, experts = 8, 64
    x = rng.standard_normal((tokens, hidden)).astype(BF16)
    indices = _routing(rng, tokens, experts, top_k)
    fwd = eager.run("MoeTokenPermute", rocm, tokens=x, indices=indices, numOutTokens=0, paddedMode=False)
    order = fwd["sortedIndicesOut"]
    grad_out = rng.standard_normal((tokens, hidden)).astype(BF16)
    probs = rng.random((tokens, top_k)).astype(np.float32)
    args = {"permutedTokens": fwd["permuteTokensOut"], "unpermutedTokensGrad": grad_out, "sortedIndices": order}
    args |= {"probsOptional": probs, "paddedMode": False, "restoreShapeOptional": None}
    assert_matches_reference(rocm, reference, "MoeTokenUnpermuteGrad", args, "contiguous", "bf16, float32 probs")
    grads = eager.run("MoeTokenUnpermuteGrad", rocm, **args)
    back = {"permutedOutputGrad": grads["permutedTokensGradOut"], "sortedIndices": order, "numTopk": top_k}
    assert_matches_reference(rocm, reference, "MoeTokenPermuteGrad", {**back, "paddedMode": False}, "contiguous", "all")
    kept = {**back, "permutedOutputGrad": grads["permutedTokensGradOut"][: tokens * 3], "paddedMode": False}
    assert_matches_reference(rocm, reference, "MoeTokenPermuteGrad", kept, "contiguous", "3/8 of the copies kept")
    plain = {**args, "probsOptional": None, "unpermutedTokensGrad": rng.standard_normal((tokens * top_k, hidden))}
    plain["unpermutedTokensGrad"] = plain["unpermutedTokensGrad"].astype(BF16)
    got = eager.run("MoeTokenUnpermuteGrad", rocm, **plain)["permutedTokensGradOut"]
    want = np.empty_like(plain["unpermutedTokensGrad"])
    want[order] = plain["unpermutedTokensGrad"]
    np.testing.assert_array_equal(got, want)  # without probs: each row copied to its sorted position


def test_permute_grad_is_the_adjoint_of_permute(rocm: Backend) -> None:
    rng = np.random.default_rng(17)
    tokens, hidden, top_k = (16, 24, 4) if EMULATED else (2048, 512, 8)
    x = rng.standard_normal((tokens, hidden)).astype(np.float32)
    indices = _routing(rng, tokens, 32, top_k)
    fwd = eager.run("MoeTokenPermute", rocm, tokens=x, indices=indices, numOutTokens=0, paddedMode=False)
    g = rng.standard_normal(fwd["permuteTokensOut"].shape).astype(np.float32)
    args = {"permutedOutputGrad": g, "sortedIndices": fwd["sortedIndicesOut"], "numTopk": top_k, "paddedMode": False}
    back = eager.run("MoeTokenPermuteGrad", rocm, **args)["out"]
    lhs = float(np.sum(back.astype(np.float64) * x))
    rhs = float(np.sum(g.astype(np.float64) * fwd["permuteTokensOut"]))
    assert lhs == pytest.approx(rhs, rel=1e-5)


def test_unpermute_grad_refuses_a_repeated_position_when_it_runs(rocm: Backend) -> None:
    rng = np.random.default_rng(18)
    order = rng.permutation(24).astype(np.int32)
    order[order == 5] = 11  # 11 named twice, 5 never
    args = {"permutedTokens": np.ones((24, 8), np.float32), "unpermutedTokensGrad": np.ones((6, 8), np.float32)}
    args |= {"sortedIndices": order, "probsOptional": np.ones((6, 4), np.float32), "paddedMode": False}
    with pytest.raises(AclnnError) as err:
        eager.run("MoeTokenUnpermuteGrad", rocm, **args, restoreShapeOptional=None)
    assert err.value.code == 161002

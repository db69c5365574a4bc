"""The class-index losses the rocm backend claims, run on the GPU and compared with the reference (GPU tier).

Cases: the op specs' own samples (every dtype, reduction, ignored samples, weights, smoothing, 0-sample and
one-class inputs, large logits) contiguous and, every third, as padded, transposed and offset views; long
rows that cross the block (C up to a Qwen3 vocabulary) and many samples; the [N, C, H, W] layout at a
tile-crossing size; the error cases; a bad target reported at synchronisation; stream capture; CrossEntropyLoss's
opt-in vector row kernel (``ACL_CE_ROWS=vec``: aligned, misaligned and odd rows, -inf logits, the samples).
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.errors import AclnnError
from acl_core.spec.ops import get_spec
from acl_rocm.ops import class_loss as class_ops
from tests.rocm.against_reference import assert_errors_match_reference, assert_matches_reference
from tests.rocm.capture_harness import replays_like_eager
from tests.rocm.class_loss_cases import vector_rows_case
from tests.rocm.switched import switched

pytestmark = pytest.mark.gpu

OPS = sorted(class_ops.OPS)
BF16 = ml_dtypes.bfloat16
DTYPES = [np.float32, np.float16, BF16]


@pytest.mark.parametrize("op", OPS)
def test_matches_reference(rocm: Backend, reference: Backend, op: str) -> None:
    samples = list(get_spec(op).samples(np.random.default_rng(2025)))  # type: ignore[misc]
    assert samples, f"{op} produced no samples"
    for i, sample in enumerate(samples):
        assert_matches_reference(rocm, reference, op, dict(sample.args), "contiguous", sample.note)
        if i % 3 == 0:
            for layout in ("padded", "transposed", "offset"):
                assert_matches_reference(rocm, reference, op, dict(sample.args), layout, sample.note)


def test_every_class_loss_is_claimed(rocm: Backend) -> None:
    assert set(OPS) <= set(rocm.capabilities().ops)


def _ce_args(n: int, c: int, dtype: Any, reduction: str, eps: float, weighted: bool, rng: np.random.Generator) -> dict:
    t = np.where(rng.random(n) < 0.1, -100, rng.integers(0, c, n)).astype(np.int64)
    return {
        "target": t,
        "weightOptional": rng.uniform(0.2, 2, c).astype(np.float32) if weighted else None,
        "reductionOptional": reduction,
        "ignoreIndex": -100,
        "labelSmoothing": eps,
        "lseSquareScaleForZloss": 0.0,
        "_x": rng.uniform(-8, 8, (n, c)),
    }


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f16", "bf16"])
@pytest.mark.parametrize(("n", "c"), [(3, 151936), (64, 4097), (1025, 255), (5, 1)])
def test_long_rows_and_many_samples(rocm: Backend, reference: Backend, dtype: Any, n: int, c: int) -> None:
    rng = np.random.default_rng(n + c)
    for reduction, eps, weighted in (("mean", 0.0, False), ("none", 0.1, True), ("sum", 0.0, True)):
        args = _ce_args(n, c, dtype, reduction, eps, weighted, rng)
        x = args.pop("_x")
        fwd = {**args, "input": x.astype(dtype), "returnZloss": False}
        assert_matches_reference(rocm, reference, "CrossEntropyLoss", fwd, "contiguous", f"[{n},{c}] {reduction}")
        lp = x - np.log(np.sum(np.exp(x - x.max(1, keepdims=True)), 1, keepdims=True)) - x.max(1, keepdims=True)
        g = rng.uniform(-2, 2, (n,) if reduction == "none" else ()).astype(dtype)
        bwd = {**args, "logProb": lp.astype(dtype), "gradLoss": g}
        assert_matches_reference(rocm, reference, "CrossEntropyLossGrad", bwd, "contiguous", f"[{n},{c}] {reduction}")
        nll = {
            "self": lp.astype(dtype),
            "target": args["target"],
            "weight": rng.uniform(0.2, 2, c).astype(dtype),
            "reduction": {"none": 0, "mean": 1, "sum": 2}[reduction],
            "ignoreIndex": -100,
        }
        assert_matches_reference(rocm, reference, "NLLLoss", nll, "contiguous", f"[{n},{c}] {reduction}")
        y = rng.random((n, c))
        xent = {"features": x.astype(dtype), "labels": (y / y.sum(1, keepdims=True)).astype(dtype)}
        assert_matches_reference(rocm, reference, "SoftmaxCrossEntropyWithLogits", xent, "contiguous", f"[{n},{c}]")


@pytest.mark.parametrize("reduction", [0, 1, 2], ids=["none", "mean", "sum"])
def test_nll_2d_at_an_image_size(rocm: Backend, reference: Backend, reduction: int) -> None:
    rng = np.random.default_rng(reduction)
    n, c, h, w = 2, 21, 67, 129
    x = rng.uniform(-5, 0, (n, c, h, w)).astype(np.float32)
    t = np.where(rng.random((n, h, w)) < 0.1, 255, rng.integers(0, c, (n, h, w))).astype(np.int64)
    args = {"self": x, "target": t, "weight": rng.uniform(0.2, 2, c).astype(np.float32), "reduction": reduction}
    args["ignoreIndex"] = 255
    assert_matches_reference(rocm, reference, "NLLLoss2d", args, "contiguous", "[2,21,67,129]")
    g = rng.uniform(-2, 2, (n, h, w) if reduction == 0 else ()).astype(np.float32)
    back = {**args, "gradOutput": g, "totalWeight": np.asarray(1234.5, np.float32)}
    assert_matches_reference(rocm, reference, "NLLLoss2dBackward", back, "contiguous", "[2,21,67,129]")
    assert_matches_reference(rocm, reference, "NLLLoss2dBackward", back, "transposed", "[2,21,67,129]")


@pytest.mark.parametrize("op", OPS)
def test_errors_match_the_reference(rocm: Backend, reference: Backend, op: str) -> None:
    assert_errors_match_reference(rocm, reference, op)


@pytest.mark.parametrize("bad", [7, -1])
def test_a_bad_target_fails_at_synchronisation(rocm: Backend, bad: int) -> None:
    rng = np.random.default_rng(1)
    args = {
        "input": rng.uniform(-1, 1, (4, 7)).astype(np.float32),
        "target": np.array([0, bad, 3, 6], np.int64),
        "weightOptional": None,
        "reductionOptional": "mean",
        "ignoreIndex": -100,
        "labelSmoothing": 0.0,
        "lseSquareScaleForZloss": 0.0,
        "returnZloss": False,
    }
    with pytest.raises(AclnnError) as info:
        eager.run("CrossEntropyLoss", rocm, **args)
    assert int(info.value.code) == 161002
    args["target"] = np.array([0, 1, 3, 6], np.int64)  # the stream is usable afterwards
    assert np.isfinite(eager.run("CrossEntropyLoss", rocm, **args)["lossOut"])


def test_a_reduced_cross_entropy_replays_bit_for_bit(rocm: Backend) -> None:
    if not rocm.capabilities().stream_capture:
        pytest.skip(f"no stream capture: {rocm.capabilities().notes.get('stream_capture')}")
    rng = np.random.default_rng(4)
    args = _ce_args(37, 1000, np.float32, "mean", 0.1, True, rng)
    args["input"] = args.pop("_x").astype(np.float32)
    args["returnZloss"] = False
    replays_like_eager(rocm, "CrossEntropyLoss", args)


VECTOR_ROWS = [
    (3, 151936, 151936, 0, 0, 0.0),  # a Qwen3 vocabulary, vector stores
    (3, 151936, 151936, 0, 0, 0.1),  # smoothed and weighted: the one-pass Σ w·(x - x0)
    (256, 151936, 151936, 0, 0, 0.0),  # many rows a block's grid-stride loop takes in turn
    (5, 4097, 4104, 8, 0, 0.1),  # odd rows on aligned starts: a one-element tail, element stores
    (7, 1000, 1000, 8, 1, 0.0),  # logProbOut misaligned: element stores
    (4, 998, 1000, 4, 0, 0.2),  # 8-byte aligned rows: 4-element bf16 vectors, a 2-element tail
]


@pytest.mark.parametrize("config", ["vec", "vec1024"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f16", "bf16"])
@pytest.mark.parametrize(("n", "c", "stride", "offset", "lp_offset", "eps"), VECTOR_ROWS)
def test_cross_entropy_vector_rows(
    rocm: Backend, dtype: Any, n: int, c: int, stride: int, offset: int, lp_offset: int, eps: float, config: str
) -> None:
    """``ACL_CE_ROWS=vec|vec1024`` (opt-in): the vector row kernel against the reference, -inf logits included."""
    vector_rows_case(rocm, n, c, dtype, stride, offset, lp_offset, eps, np.random.default_rng(n + c), config)


@pytest.mark.parametrize("op", ["CrossEntropyLoss"])
def test_cross_entropy_vector_rows_samples(rocm: Backend, reference: Backend, op: str) -> None:
    """The spec's samples and the long-row cases with ``ACL_CE_ROWS=vec`` (where rows allow it)."""
    with switched(rocm, "ACL_CE_ROWS", "vec"):
        for sample in get_spec(op).samples(np.random.default_rng(2025)):  # type: ignore[misc]
            for layout in ("contiguous", "padded", "transposed", "offset"):
                assert_matches_reference(rocm, reference, op, dict(sample.args), layout, sample.note)
        for dtype in DTYPES:
            rng = np.random.default_rng(9)
            for reduction, eps, weighted in (("mean", 0.0, False), ("none", 0.1, True), ("sum", 0.0, True)):
                args = _ce_args(64, 4096, dtype, reduction, eps, weighted, rng)
                x = args.pop("_x")
                fwd = {**args, "input": x.astype(dtype), "returnZloss": False}
                assert_matches_reference(rocm, reference, op, fwd, "contiguous", f"[64,4096] {reduction}")

"""The class-index losses above the provider seam, on a CPU: their row kernels run in the kernel emulator.

Tiny cases per op (every reduction, ignored samples, weights present and absent, label smoothing, the
[N, C, H, W] layout, a 16-bit dtype) compared with the reference under the op's accuracy class, and a
target out of range reported at synchronisation. ``tests/rocm/test_gpu_class_loss.py`` is the GPU tier.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.errors import AclnnError
from tests.rocm.against_reference import class_problems
from tests.rocm.class_loss_cases import vector_rows_case

RNG = np.random.default_rng(5)


def _check(backend: Backend, op: str, args: dict[str, Any]) -> None:
    expected = eager.run(op, "reference", **args)
    problems = class_problems(op, args, eager.run(op, backend, **args), expected)
    assert not problems, f"{op}: " + "; ".join(p.message for p in problems)


def _nll(shape: tuple[int, ...], dtype: Any, reduction: int, backward: bool) -> dict[str, Any]:
    c = shape[0] if len(shape) == 1 else shape[1]
    per_sample = shape[:1] + shape[2:] if len(shape) > 1 else ()
    t = np.where(RNG.random(per_sample) < 0.3, -100, RNG.integers(0, c, per_sample)).astype(np.int64)
    args: dict[str, Any] = {
        "self": RNG.uniform(-4, 1, shape).astype(dtype),
        "target": t,
        "weight": RNG.uniform(0.2, 2, c).astype(dtype),
        "reduction": reduction,
        "ignoreIndex": -100,
    }
    if backward:
        g_shape = per_sample if reduction == 0 and len(shape) > 1 else ()
        args["gradOutput"] = RNG.uniform(-2, 2, g_shape).astype(dtype)
        args["totalWeight"] = np.asarray(1.75, dtype)
    return args


@pytest.mark.parametrize("reduction", [0, 1, 2], ids=["none", "mean", "sum"])
@pytest.mark.parametrize("shape", [(5, 7), (6,), (2, 3, 2, 3)], ids=["NC", "C", "NCHW"])
def test_nll_and_its_gradient_match_the_reference(emulated: Backend, shape: tuple[int, ...], reduction: int) -> None:
    four = len(shape) == 4
    _check(emulated, "NLLLoss2d" if four else "NLLLoss", _nll(shape, np.float32, reduction, False))
    _check(emulated, "NLLLoss2dBackward" if four else "NLLLossBackward", _nll(shape, np.float32, reduction, True))


def _ce(n: int, c: int, dtype: Any, reduction: str | None, eps: float, weighted: bool, grad: bool) -> dict[str, Any]:
    x = RNG.uniform(-5, 5, (n, c))
    t = np.where(RNG.random(n) < 0.25, 2, RNG.integers(0, c, n)).astype(np.int64)
    args: dict[str, Any] = {
        "target": t,
        "weightOptional": RNG.uniform(0.2, 2, c).astype(np.float32) if weighted else None,
        "reductionOptional": reduction,
        "ignoreIndex": 2,
        "labelSmoothing": eps,
        "lseSquareScaleForZloss": 0.0,
    }
    if grad:
        lp = x - np.log(np.sum(np.exp(x), axis=1, keepdims=True))
        args.update(
            logProb=lp.astype(dtype), gradLoss=RNG.uniform(-2, 2, (n,) if reduction == "none" else ()).astype(dtype)
        )
    else:
        args.update(input=x.astype(dtype), returnZloss=False)
    return args


@pytest.mark.parametrize(
    ("reduction", "eps", "weighted"),
    [("mean", 0.0, True), ("sum", 0.2, False), ("none", 0.1, True), (None, 0.0, False)],
)
def test_cross_entropy_and_its_gradient_match_the_reference(
    emulated: Backend, reduction: str | None, eps: float, weighted: bool
) -> None:
    _check(emulated, "CrossEntropyLoss", _ce(4, 37, np.float32, reduction, eps, weighted, False))
    _check(emulated, "CrossEntropyLossGrad", _ce(4, 37, np.float32, reduction, eps, weighted, True))


def test_the_mean_gradient_is_zero_when_every_sample_is_ignored(emulated: Backend) -> None:
    args = _ce(3, 37, np.float32, "mean", 0.1, True, True)
    args["target"] = np.full(3, 2, np.int64)  # 2 is the ignoreIndex: the total weight is 0
    out = eager.run("CrossEntropyLossGrad", emulated, **args)["out"]
    assert not np.isnan(out).any()
    _check(emulated, "CrossEntropyLossGrad", args)


def test_cross_entropy_in_bfloat16_with_a_long_row(emulated: Backend) -> None:
    import ml_dtypes

    _check(emulated, "CrossEntropyLoss", _ce(2, 600, ml_dtypes.bfloat16, "mean", 0.1, False, False))


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
def test_softmax_cross_entropy_with_logits_matches_the_reference(emulated: Backend, dtype: Any) -> None:
    x = RNG.uniform(-6, 6, (3, 300))
    y = RNG.random((3, 300))
    y[0] /= y[0].sum()
    _check(emulated, "SoftmaxCrossEntropyWithLogits", {"features": x.astype(dtype), "labels": y.astype(dtype)})


def test_a_target_out_of_range_fails_at_synchronisation(emulated: Backend) -> None:
    args = _nll((3, 4), np.float32, 1, False)
    args["target"] = np.array([0, 4, 1], np.int64)
    with pytest.raises(AclnnError) as info:
        eager.run("NLLLoss", emulated, **args)
    assert int(info.value.code) == 161002


@pytest.mark.parametrize(
    ("n", "c", "stride", "offset", "lp_offset", "eps"),
    [
        (3, 4104, 4104, 0, 0, 0.0),  # rows longer than the block's 512 x 8 elements, vector stores
        (3, 1000, 1000, 8, 1, 0.1),  # logProbOut misaligned: element stores
        (2, 333, 336, 8, 0, 0.2),  # odd rows: a 5-element tail after the vectors
        (2, 90, 92, 4, 3, 0.1),  # 8-byte aligned rows: 4-element vectors
        (2, 9000, 9000, 0, 0, 0.1),  # ACL_CE_ROWS=vec1024: a 1,024-thread block
    ],
)
def test_cross_entropy_vector_rows_match_the_reference(
    emulated: Backend,
    caplog: pytest.LogCaptureFixture,
    n: int,
    c: int,
    stride: int,
    offset: int,
    lp_offset: int,
    eps: float,
) -> None:
    import ml_dtypes

    with caplog.at_level(logging.DEBUG, logger="acl_rocm.class_loss"):
        config = "vec1024" if c == 9000 else "vec"
        vector_rows_case(emulated, n, c, ml_dtypes.bfloat16, stride, offset, lp_offset, eps, RNG, config)
    vec, lpvec = (8, lp_offset == 0 and c % 8 == 0) if offset % 8 == 0 else (4, False)
    assert f"vector rows of {c}, {vec} elements a load, logProbOut {lpvec}" in caplog.text


def test_cross_entropy_with_minus_infinity_logits(emulated: Backend) -> None:
    """A masked logit (-inf) as a thread's first element of the element kernel adds nothing (it gave NaN rows)."""
    args = _ce(3, 300, np.float32, "none", 0.0, False, False)
    x = args["input"].copy()
    x[:, :7] = -np.inf
    args["input"] = x
    args["target"] = np.array([10, 2, 299], np.int64)
    _check(emulated, "CrossEntropyLoss", args)

"""The reference's class-index losses against torch (CPU, float64): nll_loss(2d), cross_entropy, autograd."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from acl_core.errors import AclnnError
from acl_core.spec.ops import get_spec
from tests.ops.torch_ref import check_samples_and_errors, ref

REDUCTION = {0: "none", 1: "mean", 2: "sum"}
RNG = np.random.default_rng(11)


def _t(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.asarray(a, dtype=np.float64))


def _close(got: np.ndarray, want: torch.Tensor, tol: float = 1e-6) -> None:
    np.testing.assert_allclose(np.asarray(got, np.float64), want.detach().numpy(), rtol=tol, atol=tol)


def _case(shape: tuple[int, ...], ignore: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    c = shape[0] if len(shape) == 1 else shape[1]
    per_sample = shape[:1] + shape[2:] if len(shape) > 1 else ()
    x = RNG.uniform(-4, 2, shape).astype(np.float32)
    t = RNG.integers(0, c, per_sample)
    t = np.where(RNG.random(per_sample) < 0.3, ignore, t).astype(np.int64)
    return x, t, RNG.uniform(0.2, 2.0, c).astype(np.float32)


@pytest.mark.parametrize("reduction", [0, 1, 2])
@pytest.mark.parametrize("shape", [(5, 7), (6,), (2, 4, 3, 5)], ids=["NC", "C", "NCHW"])
def test_nll_forward_and_total_weight(shape: tuple[int, ...], reduction: int) -> None:
    x, t, w = _case(shape, ignore=1)
    op = "NLLLoss2d" if len(shape) == 4 else "NLLLoss"
    got = ref(op, self=x, target=t, weight=w, reduction=reduction, ignoreIndex=1)
    aten = torch.ops.aten.nll_loss2d_forward if len(shape) == 4 else torch.ops.aten.nll_loss_forward
    loss, total = aten(_t(x), torch.from_numpy(t), _t(w), reduction, 1)
    _close(got["out"], loss)
    _close(got["totalWeightOut"], total)


@pytest.mark.parametrize("reduction", [0, 1, 2])
@pytest.mark.parametrize("shape", [(5, 7), (6,), (2, 4, 3, 5)], ids=["NC", "C", "NCHW"])
def test_nll_backward_matches_autograd(shape: tuple[int, ...], reduction: int) -> None:
    x, t, w = _case(shape, ignore=-100)
    tx = _t(x).requires_grad_()
    y = F.nll_loss(tx, torch.from_numpy(t), weight=_t(w), reduction=REDUCTION[reduction], ignore_index=-100)
    g = RNG.uniform(-2, 2, y.shape).astype(np.float32)
    (want,) = torch.autograd.grad(y, tx, _t(g))
    total = np.asarray(np.sum(np.where(t != -100, w[np.where(t != -100, t, 0)], 0.0)), np.float32)
    op = "NLLLoss2dBackward" if len(shape) == 4 else "NLLLossBackward"
    got = ref(
        op,
        gradOutput=g,
        self=x,
        target=t,
        weight=w,
        reduction=reduction,
        ignoreIndex=-100,
        totalWeight=total,
    )["out"]
    _close(got, want, 1e-5)


SETTINGS = [("mean", -100, 0.0), ("sum", 2, 0.1), ("none", 0, 0.0), (None, -100, 0.3), ("mean", 3, 0.2)]


@pytest.mark.parametrize("weighted", [False, True], ids=["plain", "weight"])
@pytest.mark.parametrize(("reduction", "ignore", "eps"), SETTINGS)
def test_cross_entropy_matches_torch(reduction: str | None, ignore: int, eps: float, weighted: bool) -> None:
    x, t, w = _case((6, 9), ignore)
    weight = w if weighted else None
    got = ref(
        "CrossEntropyLoss",
        input=x,
        target=t,
        weightOptional=weight,
        reductionOptional=reduction,
        ignoreIndex=ignore,
        labelSmoothing=eps,
        lseSquareScaleForZloss=0.0,
        returnZloss=False,
    )
    tw = None if weight is None else _t(weight)
    want = F.cross_entropy(
        _t(x), torch.from_numpy(t), weight=tw, ignore_index=ignore, reduction=reduction or "mean", label_smoothing=eps
    )
    _close(got["lossOut"], want)
    _close(got["logProbOut"], F.log_softmax(_t(x), dim=1))
    assert not np.any(got["zlossOut"]) and not np.any(got["lseForZlossOut"])


@pytest.mark.parametrize("weighted", [False, True], ids=["plain", "weight"])
@pytest.mark.parametrize(("reduction", "ignore", "eps"), SETTINGS)
def test_cross_entropy_grad_matches_autograd(reduction: str | None, ignore: int, eps: float, weighted: bool) -> None:
    x, t, w = _case((6, 9), ignore)
    weight = w if weighted else None
    tx = _t(x).requires_grad_()
    tw = None if weight is None else _t(weight)
    y = F.cross_entropy(
        tx, torch.from_numpy(t), weight=tw, ignore_index=ignore, reduction=reduction or "mean", label_smoothing=eps
    )
    g = RNG.uniform(-2, 2, y.shape).astype(np.float32)
    (want,) = torch.autograd.grad(y, tx, _t(g))
    log_prob = F.log_softmax(_t(x), dim=1).numpy()
    got = ref(
        "CrossEntropyLossGrad",
        gradLoss=g,
        logProb=log_prob.astype(np.float32),
        target=t,
        weightOptional=weight,
        gradZlossOptional=None,
        lseForZlossOptional=None,
        reductionOptional=reduction,
        ignoreIndex=ignore,
        labelSmoothing=eps,
        lseSquareScaleForZloss=0.0,
    )["out"]
    _close(got, want, 1e-5)


@pytest.mark.parametrize("normalised", [True, False])
def test_softmax_cross_entropy_with_logits_matches_torch(normalised: bool) -> None:
    x = RNG.uniform(-6, 6, (5, 11)).astype(np.float32)
    y = RNG.random((5, 11))
    y = (y / y.sum(1, keepdims=True) if normalised else y).astype(np.float32)
    got = ref("SoftmaxCrossEntropyWithLogits", features=x, labels=y)
    tx = _t(x).requires_grad_()
    loss = F.cross_entropy(tx, _t(y), reduction="none")  # probability targets
    _close(got["loss"], loss)
    _close(got["backprop"], torch.softmax(_t(x), 1) - _t(y))  # the page's formula, whatever the label sums
    if normalised:  # where the labels are distributions it is the gradient
        (grad,) = torch.autograd.grad(loss.sum(), tx)
        _close(got["backprop"], grad)


def test_target_out_of_range_is_refused() -> None:
    x, t, w = _case((4, 5), ignore=-100)
    t[1] = 5
    with pytest.raises(AclnnError) as info:
        ref("NLLLoss", self=x, target=t, weight=w, reduction=1, ignoreIndex=-100)
    assert int(info.value.code) == 161002


@pytest.mark.parametrize(
    "op",
    [
        "NLLLoss",
        "NLLLossBackward",
        "NLLLoss2d",
        "NLLLoss2dBackward",
        "CrossEntropyLoss",
        "CrossEntropyLossGrad",
        "SoftmaxCrossEntropyWithLogits",
    ],
)
def test_samples_and_errors(op: str) -> None:
    check_samples_and_errors(get_spec(op))

"""The reference's losses against torch.nn.functional (CPU, float64) and their backward ops against torch.autograd."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from acl_core.errors import AclnnError
from tests.ops.torch_ref import ref

BF16 = ml_dtypes.bfloat16
DTYPES = [np.float32, np.float16, BF16]
TOL = {np.float32: 3e-6, np.float16: 2e-3, BF16: 1.6e-2}
REDUCTION = {0: "none", 1: "mean", 2: "sum"}

T = torch.Tensor
Fn = Callable[[T, T, dict[str, Any], str], T]
# forward op → (backward op, backward's gradient name, torch loss(x, target, extras, reduction), attrs, domains)
LOSSES: dict[str, tuple[str, str, Fn, dict[str, Any], tuple[float, float], tuple[float, float]]] = {
    "MseLoss": (
        "MseLossBackward",
        "gradOutput",
        lambda x, t, e, r: F.mse_loss(x, t, reduction=r),
        {},
        (-3, 3),
        (-3, 3),
    ),
    "L1Loss": ("L1LossBackward", "gradOutput", lambda x, t, e, r: F.l1_loss(x, t, reduction=r), {}, (-3, 3), (-3, 3)),
    "SmoothL1Loss": (
        "SmoothL1LossBackward",
        "gradOut",
        lambda x, t, e, r: F.smooth_l1_loss(x, t, reduction=r, beta=0.75),
        {"beta": 0.75},
        (-3, 3),
        (-3, 3),
    ),
    "SoftMarginLoss": (
        "SoftMarginLossBackward",
        "gradOutput",
        lambda x, t, e, r: F.soft_margin_loss(x, t, reduction=r),
        {},
        (-3, 3),
        (-1.5, 1.5),
    ),
    "BinaryCrossEntropy": (
        "BinaryCrossEntropyBackward",
        "gradOutput",
        lambda x, t, e, r: F.binary_cross_entropy(x, t, weight=e.get("w"), reduction=r),
        {},
        (0.02, 0.98),
        (0.0, 1.0),
    ),
    "BinaryCrossEntropyWithLogits": (
        "BinaryCrossEntropyWithLogitsBackward",
        "gradOutput",
        lambda x, t, e, r: F.binary_cross_entropy_with_logits(
            x, t, weight=e.get("w"), pos_weight=e.get("pw"), reduction=r
        ),
        {},
        (-4, 4),
        (0.0, 1.0),
    ),
    "KlDiv": (
        "KlDivBackward",
        "gradOutput",
        lambda x, t, e, r: F.kl_div(x, t, reduction=r, log_target=e["logt"]),
        {"logTarget": False},
        (-3, 3),
        (0.05, 2.0),
    ),
}
WEIGHTS = {"BinaryCrossEntropy": ("weight", "weightOptional"), "BinaryCrossEntropyWithLogits": ("weightOptional",) * 2}


def _inputs(op: str, dtype: Any, shape: tuple[int, ...] = (3, 5), seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    _, _, _, _, xr, tr = LOSSES[op]
    rng = np.random.default_rng(seed)
    return rng.uniform(*xr, shape).astype(dtype), rng.uniform(*tr, shape).astype(dtype)


def _torch(a: np.ndarray) -> T:
    return torch.from_numpy(a.astype(np.float64))


def _close(got: np.ndarray, want: T, dtype: Any) -> None:
    np.testing.assert_allclose(got.astype(np.float64), want.detach().numpy(), rtol=TOL[dtype], atol=TOL[dtype])


def _extras(
    op: str, with_weights: bool, n: int, dtype: Any = np.float32
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(reference args, torch extras) of the optional weights: [n] weights, and a pos weight for the logits loss."""
    if not with_weights or op not in WEIGHTS:
        return {}, {}
    rng = np.random.default_rng(7)
    w = rng.uniform(0.2, 2.0, n).astype(dtype)
    args, extras = {WEIGHTS[op][0]: w}, {"w": _torch(w)}
    if op == "BinaryCrossEntropyWithLogits":
        pw = rng.uniform(0.2, 3.0, n).astype(dtype)
        args["posWeightOptional"], extras["pw"] = pw, _torch(pw)
    return args, extras


@pytest.mark.parametrize("weights", [False, True], ids=["plain", "weights"])
@pytest.mark.parametrize("reduction", [0, 1, 2], ids=["none", "mean", "sum"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("op", sorted(LOSSES))
def test_forward_matches_torch(op: str, dtype: Any, reduction: int, weights: bool) -> None:
    _, _, fn, attrs, _, _ = LOSSES[op]
    x, t = _inputs(op, dtype)
    args, extras = _extras(op, weights, 5, dtype)
    got = ref(op, self=x, target=t, reduction=reduction, **attrs, **args)
    (value,) = got.values()
    assert value.dtype == x.dtype and value.shape == ((3, 5) if reduction == 0 else ())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = fn(_torch(x.astype(np.float64)), _torch(t), {"logt": False, **extras}, REDUCTION[reduction])
    _close(value, want, dtype)


@pytest.mark.parametrize("weights", [False, True], ids=["plain", "weights"])
@pytest.mark.parametrize("reduction", [0, 1, 2], ids=["none", "mean", "sum"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("op", sorted(LOSSES))
def test_backward_matches_autograd(op: str, dtype: Any, reduction: int, weights: bool) -> None:
    backward, grad_name, fn, attrs, _, _ = LOSSES[op]
    x, t = _inputs(op, dtype)
    args, extras = _extras(op, weights, 5, dtype)
    if backward == "BinaryCrossEntropyBackward" and "weight" in args:
        args = {"weightOptional": args["weight"]}
    g = np.random.default_rng(3).uniform(-1, 2, (3, 5) if reduction == 0 else ()).astype(dtype)
    tx = _torch(x).requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = fn(tx, _torch(t), {"logt": False, **extras}, REDUCTION[reduction])
    (want,) = torch.autograd.grad(y, tx, _torch(g))
    got = ref(backward, **{grad_name: g}, self=x, target=t, reduction=reduction, **attrs, **args)
    (value,) = got.values()
    assert value.shape == (3, 5)
    _close(value, want, dtype)


@pytest.mark.parametrize("reduction", [0, 1, 2])
def test_kl_div_log_target_and_zero_targets(reduction: int) -> None:
    x, t = _inputs("KlDiv", np.float32)
    t[0, :2] = 0.0  # xlogy(0, 0) = 0
    for log_target in (False, True):
        target = np.log(np.maximum(t, 1e-3)).astype(np.float32) if log_target else t
        got = ref("KlDiv", self=x, target=target, reduction=reduction, logTarget=log_target)["out"]
        want = F.kl_div(_torch(x), _torch(target), reduction=REDUCTION[reduction], log_target=log_target)
        _close(got, want, np.float32)
        g = np.float32(1.5) if reduction else np.full((3, 5), 1.5, np.float32)
        tx = _torch(x).requires_grad_()
        y = F.kl_div(tx, _torch(target), reduction=REDUCTION[reduction], log_target=log_target)
        (dx,) = torch.autograd.grad(y, tx, torch.as_tensor(np.asarray(g, np.float64)))
        back = ref(
            "KlDivBackward", gradOutput=np.asarray(g), self=x, target=target, reduction=reduction, logTarget=log_target
        )
        _close(back["out"], dx, np.float32)


@pytest.mark.parametrize("beta", [0.0, 0.3, 2.0])
def test_smooth_l1_beta(beta: float) -> None:
    x, t = _inputs("SmoothL1Loss", np.float32, (64,))
    t[:4] = x[:4]  # d == 0: the gradient is 0 for every beta
    got = ref("SmoothL1Loss", self=x, target=t, reduction=0, beta=beta)["result"]
    _close(got, F.smooth_l1_loss(_torch(x), _torch(t), reduction="none", beta=beta), np.float32)
    tx = _torch(x).requires_grad_()
    (dx,) = torch.autograd.grad(F.smooth_l1_loss(tx, _torch(t), reduction="sum", beta=beta), tx)
    grad = ref("SmoothL1LossBackward", gradOut=np.float32(1.0), self=x, target=t, reduction=2, beta=beta)["gradInput"]
    _close(grad, dx, np.float32)


def test_bce_clamps_the_log_at_minus_100() -> None:
    x = np.array([0.0, 1.0, 0.0, 1.0, 0.5], np.float32)
    t = np.array([1.0, 0.0, 0.0, 1.0, 0.5], np.float32)
    got = ref("BinaryCrossEntropy", self=x, target=t, reduction=0)["out"]
    want = F.binary_cross_entropy(_torch(x), _torch(t), reduction="none")
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-6)
    assert got[0] == got[1] == 100.0


def test_broadcast_and_empty_reductions() -> None:
    x = np.random.default_rng(0).uniform(-2, 2, (4, 1, 3)).astype(np.float32)
    t = np.random.default_rng(1).uniform(-2, 2, (1, 5, 3)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for r in (0, 1, 2):
            want = F.mse_loss(_torch(x), _torch(t), reduction=REDUCTION[r])
            _close(ref("MseLoss", self=x, target=t, reduction=r)["out"], want, np.float32)
    empty = np.zeros((0, 3), np.float32)
    assert np.isnan(ref("MseLoss", self=empty, target=empty, reduction=1)["out"])
    assert ref("L1Loss", self=empty, target=empty, reduction=2)["out"] == 0.0
    one = ref("MseLoss", self=x, target=t, reduction=2, out=np.zeros((1,), np.float32))["out"]
    assert one.shape == (1,)


@pytest.mark.parametrize(
    ("op", "args"),
    [
        ("MseLoss", {"self": np.zeros((2, 3), np.float32), "target": np.zeros((4, 3), np.float32), "reduction": 0}),
        ("MseLoss", {"self": np.zeros((2, 3), np.float32), "target": np.zeros((2, 3), np.float32), "reduction": 3}),
        ("L1Loss", {"self": np.zeros((2, 3), np.int32), "target": np.zeros((2, 3), np.int32), "reduction": 0}),
        (
            "SmoothL1Loss",
            {"self": np.zeros(3, np.float32), "target": np.zeros(3, np.float32), "reduction": 0, "beta": -1.0},
        ),
        (
            "MseLoss",
            {
                "self": np.zeros(3, np.float32),
                "target": np.zeros(3, np.float32),
                "reduction": 1,
                "out": np.zeros(3, np.float32),
            },
        ),
    ],
    ids=["no-broadcast", "reduction-3", "int32", "negative-beta", "mean-into-[3]"],
)
def test_invalid_calls_are_161002(op: str, args: dict[str, Any]) -> None:
    with pytest.raises(AclnnError) as info:
        ref(op, **args)
    assert info.value.code == 161002


TARGET_BACKWARD = {
    "BinaryCrossEntropyWithLogits": "BinaryCrossEntropyWithLogitsTargetBackward",
    "KlDiv": "KlDivTargetBackward",
}


@pytest.mark.parametrize("variant", [False, True], ids=["plain", "weights-or-log-target"])
@pytest.mark.parametrize("reduction", [0, 1, 2], ids=["none", "mean", "sum"])
@pytest.mark.parametrize("op", sorted(TARGET_BACKWARD))
def test_target_backward_matches_autograd(op: str, reduction: int, variant: bool) -> None:
    _, _, fn, attrs, _, _ = LOSSES[op]
    x, t = _inputs(op, np.float32)
    args, extras = _extras(op, variant, 5)
    if op == "KlDiv":
        attrs = {"logTarget": variant}
        extras = {"logt": variant}
        if variant:
            t = np.log(t).astype(np.float32)
        else:
            t[0, :2] = 0.0  # xlogy(0, 0): the target gradient is 0 there (torch masks it)
    g = np.random.default_rng(4).uniform(-1, 2, (3, 5) if reduction == 0 else ()).astype(np.float32)
    tt = _torch(t).requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = fn(_torch(x), tt, {"logt": False, **extras}, REDUCTION[reduction])
    (want,) = torch.autograd.grad(y, tt, _torch(g))
    got = ref(TARGET_BACKWARD[op], gradOutput=g, self=x, target=t, reduction=reduction, **attrs, **args)["gradTarget"]
    if op == "KlDiv" and not variant:
        want = torch.where(_torch(t) == 0.0, torch.zeros_like(want), want)  # autograd's log(0) gives -inf·0 there
    _close(got, want, np.float32)

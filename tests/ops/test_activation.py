"""The reference's activations against torch (CPU) and their backward ops against torch.autograd."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from acl_core.errors import AclnnError
from tests.ops.torch_ref import ref, to_torch

BF16 = ml_dtypes.bfloat16
DTYPES = [np.float32, np.float16, BF16]
TOL = {np.float32: 2e-6, np.float16: 2e-3, BF16: 1.6e-2}

Fn = Callable[[torch.Tensor], torch.Tensor]
FORWARD: dict[str, tuple[dict[str, Any], Fn]] = {
    "Elu": ({"alpha": 0.5, "scale": 1.5, "inputScale": 2.0}, lambda t: torch.ops.aten.elu(t, 0.5, 1.5, 2.0)),
    "Celu": ({"alpha": 0.3}, lambda t: F.celu(t, 0.3)),
    "Selu": ({}, F.selu),
    "Hardswish": ({}, F.hardswish),
    "Hardsigmoid": ({}, F.hardsigmoid),
    "Hardtanh": ({"clipValueMin": -0.5, "clipValueMax": 2.0}, lambda t: F.hardtanh(t, -0.5, 2.0)),
    "Hardshrink": ({"lambd": 0.75}, lambda t: F.hardshrink(t, 0.75)),
    "Softshrink": ({"lambd": 0.75}, lambda t: F.softshrink(t, 0.75)),
    "Softplus": ({"beta": 2.0, "threshold": 3.0}, lambda t: F.softplus(t, 2.0, 3.0)),
    "Softsign": ({}, F.softsign),
    "LeakyRelu": ({"negativeSlope": 0.125}, lambda t: F.leaky_relu(t, 0.125)),
    "Mish": ({}, F.mish),
    "LogSigmoid": ({}, F.logsigmoid),
    "Threshold": ({"threshold": 0.5, "value": -2.0}, lambda t: F.threshold(t, 0.5, -2.0)),
    "Swish": ({"betaOptional": 1.5}, lambda t: t * torch.sigmoid(1.5 * t)),
}
"""Forward op → (its scalars, the torch function with the same scalars)."""

BACKWARD: dict[str, tuple[str, str, dict[str, Any], Fn, bool]] = {
    "SigmoidBackward": ("gradOutput", "output", {}, torch.sigmoid, True),
    "TanhBackward": ("gradOutput", "output", {}, torch.tanh, True),
    "SiluBackward": ("gradOutput", "self", {}, F.silu, False),
    "GeluBackward": ("gradOutput", "self", {}, F.gelu, False),
    "FastGeluBackward": ("gradOutput", "self", {}, lambda t: t * torch.sigmoid(1.702 * t), False),
    "SwishBackward": ("gradOutput", "self", {"betaOptional": 1.5}, lambda t: t * torch.sigmoid(1.5 * t), False),
    "SeluBackward": ("gradOutput", "result", {}, F.selu, True),
    "HardswishBackward": ("gradOutput", "self", {}, F.hardswish, False),
    "HardswishBackwardV2": ("gradOutput", "self", {}, F.hardswish, False),
    "HardsigmoidBackward": ("gradOutput", "self", {}, F.hardsigmoid, False),
    "HardtanhBackward": ("gradOutput", "self", {"min": -0.5, "max": 2.0}, lambda t: F.hardtanh(t, -0.5, 2.0), False),
    "HardshrinkBackward": ("gradOutput", "self", {"lambd": 0.75}, lambda t: F.hardshrink(t, 0.75), False),
    "SoftshrinkBackward": ("gradOutput", "self", {"lambda": 0.75}, lambda t: F.softshrink(t, 0.75), False),
    "SoftplusBackward": (
        "gradOutput",
        "self",
        {"beta": 2.0, "threshold": 3.0},
        lambda t: F.softplus(t, 2.0, 3.0),
        False,
    ),
    "SoftsignBackward": ("gradients", "features", {}, F.softsign, False),
    "LeakyReluBackward": (
        "gradOutput",
        "self",
        {"negativeSlope": 0.125, "selfIsResult": False},
        lambda t: F.leaky_relu(t, 0.125),
        False,
    ),
    "MishBackward": ("gradOutput", "self", {}, F.mish, False),
    "ThresholdBackward": ("gradOutput", "self", {"threshold": 0.5}, lambda t: F.threshold(t, 0.5, 0.0), False),
}
"""Backward op → (gradient name, input name, scalars, torch forward, whether the input is the forward's result)."""


def _x(dtype: Any, n: int = 257, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).uniform(-5.0, 5.0, n)
    kinks = [-3.0, 3.0, 0.0, 0.5, -0.75, 0.75]  # where the piecewise ops change branch
    x[: min(n, 6)] = kinks[: min(n, 6)]
    return x.astype(dtype)


def _close(got: np.ndarray, expected: torch.Tensor, dtype: Any) -> None:
    want = expected.double().numpy()
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("op", sorted(FORWARD))
def test_forward_matches_torch(op: str, dtype: Any) -> None:
    scalars, fn = FORWARD[op]
    x = _x(dtype)
    got = ref(op, self=x, **scalars)["out"]
    assert got.dtype == x.dtype
    _close(got, fn(to_torch(x).double()), dtype)


@pytest.mark.parametrize("op", sorted(FORWARD))
def test_special_values_match_torch(op: str) -> None:
    scalars, fn = FORWARD[op]
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e-30], np.float32)
    got = ref(op, self=x, **scalars)["out"]
    want = fn(torch.from_numpy(x.astype(np.float64))).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = ~np.isnan(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-6, atol=1e-37)


@pytest.mark.parametrize("op", ["Elu", "Celu", "Selu", "Hardswish", "Hardsigmoid", "Hardtanh", "LeakyRelu", "Mish"])
def test_inplace_twin_writes_its_input(op: str) -> None:
    scalars, _ = FORWARD[op]
    x = _x(np.float32)
    name = "self" if op in ("Hardswish", "Hardsigmoid") else "selfRef"
    got = ref(f"Inplace{op}", **{name: x.copy()}, **scalars)[name]
    np.testing.assert_array_equal(got, ref(op, self=x, **scalars)["out"])


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("op", sorted(BACKWARD))
def test_backward_matches_autograd(op: str, dtype: Any) -> None:
    grad_name, input_name, scalars, fn, from_result = BACKWARD[op]
    x = _x(dtype)
    g = _x(dtype, seed=1)
    t = torch.from_numpy(x.astype(np.float64)).requires_grad_()
    y = fn(t)
    (want,) = torch.autograd.grad(y, t, torch.from_numpy(g.astype(np.float64)))
    given = y.detach().numpy().astype(dtype) if from_result else x
    out = ref(op, **{grad_name: g, input_name: given}, **scalars)
    (got,) = out.values()
    if from_result and dtype is not np.float32:
        # the 16-bit rounding of the result moves the derivative by about one ulp of the result
        np.testing.assert_allclose(got.astype(np.float64), want.numpy(), rtol=3 * TOL[dtype], atol=3 * TOL[dtype])
    else:
        _close(got, want, dtype)


@pytest.mark.parametrize("is_result", [False, True])
def test_elu_backward_matches_torch(is_result: bool) -> None:
    x = _x(np.float32)
    g = _x(np.float32, seed=1)
    tx = torch.from_numpy(x.astype(np.float64))
    y = torch.ops.aten.elu(tx, 0.5, 1.5, 2.0)
    given = y.numpy().astype(np.float32) if is_result else x
    want = torch.ops.aten.elu_backward(
        torch.from_numpy(g.astype(np.float64)), 0.5, 1.5, 2.0, is_result, torch.from_numpy(given.astype(np.float64))
    )
    got = ref(
        "EluBackward",
        gradOutput=g,
        alpha=0.5,
        scale=1.5,
        inputScale=2.0,
        isResult=is_result,
        selfOrResult=given,
    )["gradInput"]
    np.testing.assert_allclose(got, want.numpy(), rtol=2e-6, atol=2e-6)


def test_backward_broadcasts_and_refuses_mismatched_shapes() -> None:
    g = _x(np.float32, 12).reshape(3, 4)
    x = _x(np.float32, 4)
    got = ref("ThresholdBackward", gradOutput=g, self=x, threshold=0.5)["out"]
    np.testing.assert_array_equal(got, np.where(x <= 0.5, 0.0, g).astype(np.float32))
    with pytest.raises(AclnnError) as err:
        ref("SigmoidBackward", gradOutput=g, output=_x(np.float32, 3))
    assert err.value.code == 161002


def test_elu_backward_refuses_negative_alpha_on_results() -> None:
    x = _x(np.float32, 5)
    with pytest.raises(AclnnError) as err:
        ref("EluBackward", gradOutput=x, alpha=-0.5, scale=1.0, inputScale=1.0, isResult=True, selfOrResult=x)
    assert err.value.code == 161002


def test_integer_inputs_are_refused() -> None:
    with pytest.raises(AclnnError) as err:
        ref("Mish", self=np.arange(4, dtype=np.int32))
    assert err.value.code == 161002


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_backward_v2_matches_autograd(approximate: str, dtype: Any) -> None:
    x, g = _x(dtype), _x(dtype, seed=1)
    t = torch.from_numpy(x.astype(np.float64)).requires_grad_()
    (want,) = torch.autograd.grad(F.gelu(t, approximate=approximate), t, torch.from_numpy(g.astype(np.float64)))
    got = ref("GeluBackwardV2", gradOutput=g, self=x, approximate=approximate)["gradInput"]
    _close(got, want, dtype)


def test_gelu_backward_v2_refuses_an_unknown_mode() -> None:
    x = _x(np.float32)
    with pytest.raises(AclnnError) as info:
        ref("GeluBackwardV2", gradOutput=x, self=x, approximate="erf")
    assert info.value.code == 161002


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "fp16", "bf16"])
def test_log_sigmoid_backward_matches_autograd_and_ignores_the_buffer(dtype: Any) -> None:
    x, g = _x(dtype) * 10, _x(dtype, seed=1)
    t = torch.from_numpy(x.astype(np.float64)).requires_grad_()
    (want,) = torch.autograd.grad(F.logsigmoid(t), t, torch.from_numpy(g.astype(np.float64)))
    for buffer in (x, np.full_like(x, np.nan)):
        got = ref("LogSigmoidBackward", gradOutput=g, self=x, buffer=buffer)["gradInput"]
        _close(got, want, dtype)


@pytest.mark.parametrize("eps", [-1.0, 0.0, 0.125])
def test_logit_grad_matches_autograd(eps: float) -> None:
    x = np.concatenate([np.linspace(0.0, 1.0, 33), [-0.5, 1.5, np.nan]]).astype(np.float32)
    g = np.random.default_rng(2).uniform(-2, 2, x.shape).astype(np.float32)
    t = torch.from_numpy(x.astype(np.float64)).requires_grad_()
    (want,) = torch.autograd.grad(
        torch.logit(t, eps=None if eps < 0 else eps), t, torch.from_numpy(g.astype(np.float64))
    )
    got = ref("LogitGrad", x=x, dy=g, eps=eps)["out"]
    inside = (x > 0) & (x < 1)  # at 0 and 1 torch's clamp routes the gradient differently; the page's rule is checked
    np.testing.assert_allclose(got[inside], want.numpy()[inside].astype(np.float32), rtol=2e-6)
    outside = ~((x >= max(eps, 0.0)) & (x <= 1.0 - max(eps, 0.0)))
    if eps < 0:
        assert np.isnan(got[(x < 0) | (x > 1) | np.isnan(x)]).all()
        assert np.isinf(got[(x == 0) | (x == 1)]).all()
    else:
        assert (got[outside & ~np.isnan(x)] == 0.0).all()


def test_hardswish_backward_v2_takes_its_pages_branches_at_minus_3_and_3() -> None:
    x = np.array([-3.5, -3.0, -2.9990234375, 0.0, 2.9990234375, 3.0, 3.5, np.nan], np.float32)
    g = np.full_like(x, 2.0)
    got = ref("HardswishBackwardV2", gradOutput=g, self=x)["out"]
    # 0 at self <= -3, gradOutput at self >= 3 (V1's page had -1/2 and 3/2 times gradOutput there); a NaN
    # self fails both comparisons and takes gradOutput, as torch's hardswish_backward does
    inner = [2 * (float(v) / 3 + 0.5) for v in (x[2], x[4])]
    want = np.array([0.0, 0.0, inner[0], 1.0, inner[1], 2.0, 2.0, 2.0], np.float32)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, ref("HardswishBackward", gradOutput=g, self=x)["out"])

"""The reference's ConvolutionBackward against torch autograd of conv1d/2d/3d and conv_transpose1d/2d/3d."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from acl_core.spec.ops import get_spec
from tests.conftest import assert_close
from tests.ops.test_convolution import CONV, CONV_T, DTYPES, PLAIN, TRANSPOSED
from tests.ops.torch_ref import check_samples_and_errors, ref


def _f64(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.asarray(a).astype(np.float64)).requires_grad_(True)


def torch_grads(args: dict[str, Any]) -> dict[str, np.ndarray]:
    """gradInput, gradWeight, gradBias of the call by torch autograd in float64 (bias of biasSizes, zero)."""
    x, w, dy = _f64(args["input"]), _f64(args["weight"]), _f64(args["gradOutput"]).detach()
    b = torch.zeros(args["biasSizes"][0], dtype=torch.float64, requires_grad=True)
    rank, pad = x.dim() - 2, list(args["padding"])
    if args["transposed"]:
        fn = CONV_T[rank]
        y = fn(x, w, b, args["stride"], pad, args["outputPadding"], args["groups"], args["dilation"])
    else:
        xp = x
        if len(pad) != rank:  # asymmetric: [left, right] or [top, bottom, left, right]
            xp = F.pad(x, [v for pair in reversed(list(zip(pad[::2], pad[1::2]))) for v in pair])
            pad = [0] * rank
        y = CONV[rank](xp, w, b, args["stride"], pad, args["dilation"], args["groups"])
    gx, gw, gb = torch.autograd.grad(y, (x, w, b), dy, allow_unused=True)
    return {"gradInput": gx.numpy(), "gradWeight": gw.numpy(), "gradBias": gb.numpy()}


def _args(x: np.ndarray, w: np.ndarray, dy: np.ndarray, geometry: dict[str, Any]) -> dict[str, Any]:
    return {
        "gradOutput": dy,
        "input": x,
        "weight": w,
        "biasSizes": [dy.shape[1]],
        "outputMask": [True, True, True],
        "cubeMathType": 0,
        **geometry,
    }


def _check(args: dict[str, Any]) -> None:
    got, want = ref("ConvolutionBackward", **args), torch_grads(args)
    for name in ("gradInput", "gradWeight", "gradBias"):
        assert got[name].dtype == (args["gradOutput"] if name == "gradBias" else args[name[4:].lower()]).dtype
        # a float64 answer rounded once to the output dtype; the half types carry one rounding of their own
        assert_close(got[name], want[name], atol=None if got[name].dtype == np.float32 else 4e-3)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("case", PLAIN, ids=lambda c: f"{len(c[0]) - 2}d-g{c[5]}-{c[0]}")
def test_plain_gradients_match_torch(dtype: type, case: tuple, rng: np.random.Generator) -> None:
    x_shape, w_shape, stride, padding, dilation, groups = case
    x = rng.uniform(-2, 2, x_shape).astype(dtype)
    w = rng.uniform(-1, 1, w_shape).astype(dtype)
    y = CONV[len(x_shape) - 2](torch.zeros(x_shape), torch.zeros(w_shape), None, stride, padding, dilation, groups)
    dy = rng.uniform(-1, 1, tuple(y.shape)).astype(dtype)
    geometry = dict(stride=stride, padding=padding, dilation=dilation, transposed=False, groups=groups)
    _check(_args(x, w, dy, {**geometry, "outputPadding": [0] * len(stride)}))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("case", TRANSPOSED, ids=lambda c: f"{len(c[0]) - 2}d-g{c[5]}-{c[0]}")
def test_transposed_gradients_match_torch(dtype: type, case: tuple, rng: np.random.Generator) -> None:
    x_shape, w_shape, stride, padding, dilation, groups, output_padding = case
    x = rng.uniform(-2, 2, x_shape).astype(dtype)
    w = rng.uniform(-1, 1, w_shape).astype(dtype)
    fn = CONV_T[len(x_shape) - 2]
    y = fn(torch.zeros(x_shape), torch.zeros(w_shape), None, stride, padding, output_padding, groups, dilation)
    dy = rng.uniform(-1, 1, tuple(y.shape)).astype(dtype)
    geometry = dict(stride=stride, padding=padding, dilation=dilation, transposed=True, groups=groups)
    _check(_args(x, w, dy, {**geometry, "outputPadding": output_padding}))


def test_conformance_samples_match_torch() -> None:
    spec = get_spec("ConvolutionBackward")
    assert spec.samples is not None
    cases = list(spec.samples(np.random.default_rng(0)))
    seen = {(len(c.args["input"].shape) - 2, bool(c.args["transposed"])) for c in cases}
    assert seen == {(1, False), (2, False), (3, False), (1, True), (2, True), (3, True)}
    for case in cases:
        got, want = ref("ConvolutionBackward", **case.args), torch_grads(case.args)
        for name, wanted in zip(("gradInput", "gradWeight", "gradBias"), case.args["outputMask"]):
            if not wanted:
                continue
            tol = 4e-3 if got[name].dtype != np.float32 else None
            if case.args["cubeMathType"]:  # HF32 operands: 11 significand bits each
                tol = 2e-3
            assert_close(got[name], want[name], atol=tol, rtol=tol), case.note


def test_masked_outputs_are_left_unwritten(rng: np.random.Generator) -> None:
    args = _args(
        rng.uniform(-1, 1, (1, 2, 4, 4)).astype(np.float32),
        rng.uniform(-1, 1, (3, 2, 3, 3)).astype(np.float32),
        rng.uniform(-1, 1, (1, 3, 2, 2)).astype(np.float32),
        dict(stride=[1, 1], padding=[0, 0], dilation=[1, 1], transposed=False, groups=1, outputPadding=[0, 0]),
    )
    sentinel = np.full((1, 2, 4, 4), 7.0, np.float32)
    got = ref("ConvolutionBackward", **{**args, "outputMask": [False, True, False], "gradInput": sentinel})
    assert np.all(got["gradInput"] == 7.0)
    assert_close(got["gradWeight"], torch_grads(args)["gradWeight"])


def test_hand_computed_1d() -> None:
    # y[o] = Σ_k w[k]·x[o + k]: dx[i] = Σ_k dy[i - k]·w[k], dw[k] = Σ_o dy[o]·x[o + k], db = Σ dy
    x = np.array([[[1.0, 2.0, 3.0, 4.0]]], np.float32)
    w = np.array([[[1.0, -1.0]]], np.float32)
    dy = np.array([[[1.0, 2.0, 3.0]]], np.float32)
    geometry = dict(stride=[1], padding=[0], dilation=[1], transposed=False, groups=1, outputPadding=[0])
    got = ref("ConvolutionBackward", **_args(x, w, dy, geometry))
    np.testing.assert_array_equal(got["gradInput"][0, 0], [1.0, 1.0, 1.0, -3.0])
    np.testing.assert_array_equal(got["gradWeight"][0, 0], [14.0, 20.0])
    np.testing.assert_array_equal(got["gradBias"], [6.0])


def test_samples_and_errors() -> None:
    check_samples_and_errors(get_spec("ConvolutionBackward"))


def test_half_bias_gradient_is_one_rounding_of_the_exact_sum(rng: np.random.Generator) -> None:
    # 4096 float16 terms per channel: a float16 running sum would drift by many ulps
    dy = rng.uniform(-1, 1, (16, 2, 16, 16)).astype(np.float16)
    geometry = dict(stride=[1, 1], padding=[1, 1], dilation=[1, 1], transposed=False, groups=1, outputPadding=[0, 0])
    args = _args(np.zeros((16, 3, 16, 16), np.float16), np.zeros((2, 3, 3, 3), np.float16), dy, geometry)
    got = ref("ConvolutionBackward", **{**args, "outputMask": [False, False, True]})["gradBias"]
    np.testing.assert_array_equal(got, dy.astype(np.float64).sum(axis=(0, 2, 3)).astype(np.float16))

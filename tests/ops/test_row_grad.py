"""The reference's row backward ops (acl_core.spec.ops.grad) against torch CPU in float64.

Softmax, LayerNorm and GroupNorm backward go through torch's own backward kernels
(``_softmax_backward_data``, ``native_layer_norm_backward``, ``native_group_norm_backward``), which take
the forward's result or statistics just as the aclnn ops do; RmsNorm and SwiGlu through autograd.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from acl_core import eager
from acl_core.aclnn import get_workspace_size
from acl_core.errors import AclnnError
from acl_core.plugin import get_backend
from acl_core.spec.ops import get_spec
from acl_core.tensor import AclBoolArray, AclIntArray
from tests.ops.torch_ref import ref

BF16 = ml_dtypes.bfloat16
DTYPES = [np.float32, np.float16, BF16]
REL = {np.float32: 1e-5, np.float16: 4e-3, BF16: 3e-2}
"""Error relative to the largest magnitude of an expected result (inputs are the same rounded values)."""


def t64(a: np.ndarray) -> torch.Tensor:
    """The exact values of ``a`` as a float64 torch tensor."""
    return torch.from_numpy(np.asarray(a).astype(np.float64))


def close(actual: np.ndarray, expected: torch.Tensor | np.ndarray, dtype: Any) -> None:
    """``actual`` within REL[dtype] of the expectation's largest magnitude (NaN where it is NaN)."""
    e = expected.detach().numpy() if isinstance(expected, torch.Tensor) else np.asarray(expected)
    a = np.asarray(actual).astype(np.float64)
    assert a.shape == e.shape
    scale = float(np.max(np.abs(e[np.isfinite(e)]), initial=1.0))
    np.testing.assert_allclose(a, e, rtol=REL[dtype], atol=REL[dtype] * scale, equal_nan=True)


def rand(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any, low: float = -2, high: float = 2) -> np.ndarray:
    return rng.uniform(low, high, shape).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize(("shape", "dim"), [((4, 9), -1), ((3, 5, 2), 1), ((6,), 0)])
def test_softmax_backward_matches_torch(dtype: Any, log: bool, shape: tuple[int, ...], dim: int) -> None:
    rng = np.random.default_rng(1)
    x = t64(rand(rng, shape, dtype, -3, 3))
    y = (torch.log_softmax if log else torch.softmax)(x, dim).numpy().astype(dtype)
    g = rand(rng, shape, dtype)
    op = "LogSoftmaxBackward" if log else "SoftmaxBackward"
    got = ref(op, gradOutput=g, output=y, dim=dim)["out"]
    assert got.dtype == np.dtype(dtype)
    back = torch.ops.aten._log_softmax_backward_data if log else torch.ops.aten._softmax_backward_data
    close(got, back(t64(g), t64(y), dim, torch.float64), dtype)


def test_softmax_backward_is_autograd_of_softmax() -> None:
    rng = np.random.default_rng(2)
    x = torch.tensor(rand(rng, (3, 7), np.float64), requires_grad=True)
    g = rand(rng, (3, 7), np.float32)
    y = torch.softmax(x, -1)
    y.backward(t64(g))
    got = ref("SoftmaxBackward", gradOutput=g, output=y.detach().numpy().astype(np.float32), dim=-1)["out"]
    close(got, x.grad, np.float32)  # type: ignore[arg-type]
    # every row of a softmax gradient sums to 0 (the probabilities' sum is constant)
    np.testing.assert_allclose(got.astype(np.float64).sum(-1), 0.0, atol=1e-6)


def _rms(x: np.ndarray, k: int, eps: float = 1e-6) -> np.ndarray:
    axes = tuple(range(x.ndim - k, x.ndim))
    return 1.0 / np.sqrt(np.mean(x.astype(np.float64) ** 2, axis=axes, keepdims=True) + eps)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("shape", "k"), [((5, 16), 1), ((2, 3, 4, 6), 2)])
def test_rms_norm_grad_matches_autograd(dtype: Any, shape: tuple[int, ...], k: int) -> None:
    rng = np.random.default_rng(3)
    x, dy = rand(rng, shape, dtype), rand(rng, shape, dtype)
    gamma = rand(rng, shape[len(shape) - k :], dtype, 0.5, 1.5)
    rstd = _rms(x, k).astype(np.float32)
    got = ref("RmsNormGrad", dy=dy, x=x, rstd=rstd, gamma=gamma)
    assert got["dxOut"].dtype == np.dtype(dtype) and got["dgammaOut"].dtype == np.float32
    xt, gt = t64(x).requires_grad_(), t64(gamma).requires_grad_()
    r = t64(rstd)  # the statistic as given (a constant of the backward, as in CANN)
    y = xt * r * gt
    # dx through rstd too: d rstd / dx = -rstd³·x / n
    axes = tuple(range(len(shape) - k, len(shape)))
    n = int(np.prod(shape[len(shape) - k :]))
    (y * t64(dy)).sum().backward()
    g = t64(dy) * t64(gamma)
    through = -(r**3) * t64(x) / n * (g * t64(x)).sum(dim=axes, keepdim=True)
    close(got["dxOut"], xt.grad + through, dtype)  # type: ignore[operator]
    close(got["dgammaOut"], gt.grad, np.float32 if dtype == np.float32 else dtype)  # type: ignore[arg-type]


def test_rms_norm_grad_is_autograd_of_rms_norm() -> None:
    rng = np.random.default_rng(4)
    x = torch.tensor(rand(rng, (4, 10), np.float64), requires_grad=True)
    gamma = torch.tensor(rand(rng, (10,), np.float64, 0.5, 1.5), requires_grad=True)
    dy = rand(rng, (4, 10), np.float32)
    F.rms_norm(x, (10,), gamma, eps=1e-6).backward(t64(dy))
    rstd = _rms(x.detach().numpy(), 1).astype(np.float32)
    got = ref(
        "RmsNormGrad",
        dy=dy,
        x=x.detach().numpy().astype(np.float32),
        rstd=rstd,
        gamma=gamma.detach().numpy().astype(np.float32),
    )
    close(got["dxOut"], x.grad, np.float32)  # type: ignore[arg-type]
    close(got["dgammaOut"], gamma.grad, np.float32)  # type: ignore[arg-type]


def _ln_stats(x: np.ndarray, k: int, eps: float = 1e-5) -> tuple[np.ndarray, np.ndarray]:
    axes = tuple(range(x.ndim - k, x.ndim))
    x = x.astype(np.float64)
    mean = x.mean(axis=axes, keepdims=True)
    return mean, 1.0 / np.sqrt(((x - mean) ** 2).mean(axis=axes, keepdims=True) + eps)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask", [(True, True, True), (True, False, True), (False, True, False)])
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_backward_matches_torch(dtype: Any, mask: tuple[bool, bool, bool], affine: bool) -> None:
    rng = np.random.default_rng(5)
    shape, norm = (2, 3, 4, 5), [4, 5]
    x, dy = rand(rng, shape, dtype), rand(rng, shape, dtype)
    mean, rstd = (s.astype(np.float32) for s in _ln_stats(x, 2))
    w = rand(rng, (4, 5), dtype, 0.5, 1.5) if affine else None
    b = rand(rng, (4, 5), dtype) if affine else None
    args: dict[str, Any] = {"gradOut": dy, "input": x, "normalizedShape": norm, "mean": mean, "rstd": rstd}
    if affine:
        args.update(weightOptional=w, biasOptional=b)
    got = ref("LayerNormBackward", **args, outputMask=list(mask))
    names = ("gradInputOut", "gradWeightOut", "gradBiasOut")
    assert set(got) == {n for n, m in zip(names, mask) if m}
    weight = t64(w) if w is not None else torch.ones(4, 5, dtype=torch.float64)
    expected = torch.ops.aten.native_layer_norm_backward(
        t64(dy), t64(x), norm, t64(mean), t64(rstd), weight, weight, [True, True, True]
    )
    for name, e in zip(names, expected):
        if name in got:
            assert got[name].dtype == np.dtype(dtype)
            close(got[name], e, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("shape", "group"), [((2, 6, 4, 3), 3), ((3, 4), 4), ((1, 4, 2, 2, 2), 1)])
def test_group_norm_backward_matches_torch(dtype: Any, shape: tuple[int, ...], group: int) -> None:
    rng = np.random.default_rng(6)
    n, c = shape[:2]
    hxw = int(np.prod(shape[2:]))
    x, dy = rand(rng, shape, dtype), rand(rng, shape, dtype)
    rows = x.astype(np.float64).reshape(n, group, -1)
    mean = rows.mean(-1)
    rstd = 1.0 / np.sqrt(rows.var(-1) + 1e-5)
    mean, rstd = mean.astype(dtype), rstd.astype(dtype)
    gamma = rand(rng, (c,), dtype, 0.5, 1.5)
    got = ref(
        "GroupNormBackward",
        gradOut=dy,
        input=x,
        mean=mean,
        rstd=rstd,
        gamma=gamma,
        N=n,
        C=c,
        HxW=hxw,
        group=group,
        outputMask=[True, True, True],
    )
    expected = torch.ops.aten.native_group_norm_backward(
        t64(dy), t64(x), t64(mean), t64(rstd), t64(gamma), n, c, hxw, group, [True, True, True]
    )
    for name, e in zip(("gradInput", "gradGammaOut", "gradBetaOut"), expected):
        close(got[name], e, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dsum", [True, False])
def test_add_layer_norm_grad_matches_torch(dtype: Any, dsum: bool) -> None:
    rng = np.random.default_rng(7)
    shape = (3, 4, 8)
    x1, x2, dy = rand(rng, shape, dtype), rand(rng, shape, dtype), rand(rng, shape, dtype)
    total = x1.astype(np.float64) + x2.astype(np.float64)
    mean, rstd = (s.astype(np.float32) for s in _ln_stats(total, 1))
    gamma = rand(rng, (8,), np.float32, 0.5, 1.5)
    extra = rand(rng, shape, dtype) if dsum else None
    args: dict[str, Any] = {"dy": dy, "x1": x1, "x2": x2, "rstd": rstd, "mean": mean, "gamma": gamma}
    if extra is not None:
        args["dsumOptional"] = extra
    got = ref("AddLayerNormGrad", **args)
    dx, dw, db = torch.ops.aten.native_layer_norm_backward(
        t64(dy), torch.from_numpy(total), [8], t64(mean), t64(rstd), t64(gamma), t64(gamma), [True, True, True]
    )
    if extra is not None:
        dx = dx + t64(extra)
    close(got["dxOut"], dx, dtype)
    assert got["dgammaOut"].dtype == np.float32 and got["dbetaOut"].dtype == np.float32
    close(got["dgammaOut"], dw, dtype)
    close(got["dbetaOut"], db, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("shape", "dim"), [((4, 10), -1), ((6, 3), 0), ((2, 8, 3), 1)])
def test_swiglu_grad_matches_autograd(dtype: Any, shape: tuple[int, ...], dim: int) -> None:
    rng = np.random.default_rng(8)
    x = rand(rng, shape, dtype, -8, 8)
    half = list(shape)
    half[dim] //= 2
    g = rand(rng, tuple(half), dtype)
    xt = t64(x).requires_grad_()
    a, b = torch.chunk(xt, 2, dim)
    (F.silu(a) * b).backward(t64(g))
    got = ref("SwiGluGrad", yGrad=g, x=x, dim=dim)["out"]
    close(got, xt.grad, dtype)  # type: ignore[arg-type]


def test_swiglu_grad_saturates_without_cancellation() -> None:
    a = np.array([-40.0, -15.0, 15.0, 40.0], np.float32)
    x = np.concatenate([a, np.ones(4, np.float32)])
    got = ref("SwiGluGrad", yGrad=np.ones(4, np.float32), x=x, dim=0)["out"]
    s = 1.0 / (1.0 + np.exp(-a.astype(np.float64)))
    np.testing.assert_allclose(got[:4], s * (1 + a * (1 - s)), rtol=1e-6)  # float64 1 - s: exact enough here
    np.testing.assert_allclose(got[4:], a * s, rtol=1e-6)


@pytest.mark.parametrize(
    "op", ["SoftmaxBackward", "LayerNormBackward", "GroupNormBackward", "RmsNormGrad", "SwiGluGrad"]
)
def test_error_samples_fail_with_their_codes(op: str) -> None:
    spec = get_spec(op)
    assert spec.error_samples is not None
    cases = list(spec.error_samples(np.random.default_rng(0)))
    assert cases
    for case in cases:
        with pytest.raises(AclnnError) as err:
            ref(op, **case.args)
        assert err.value.code == case.code, case.note


def _phase1_code(op: str, kwargs: dict[str, Any]) -> int:
    """The code of the C-shaped phase 1 (arrays on the reference device, bool lists as aclBoolArray)."""
    backend = get_backend("reference")
    args: dict[str, Any] = {}
    keep = []
    for p in get_spec(op).params:
        v = kwargs.get(p.name)
        if isinstance(v, np.ndarray):
            keep.append(eager.to_device(v, backend))
            args[p.name] = keep[-1].tensor()
        elif isinstance(v, list):
            args[p.name] = AclBoolArray.create(v) if isinstance(v[0], bool) else AclIntArray.create(v)
        else:
            args[p.name] = v
    with pytest.raises(AclnnError) as exc:
        get_workspace_size(get_spec(op), [], args, backend=backend)
    return exc.value.code


def test_masked_output_may_be_null_but_a_requested_one_may_not() -> None:
    rng = np.random.default_rng(9)
    x = rand(rng, (3, 4), np.float32)
    mean, rstd = (s.astype(np.float32) for s in _ln_stats(x, 1))
    args = {"gradOut": x, "input": x, "normalizedShape": [4], "mean": mean, "rstd": rstd}
    got = ref("LayerNormBackward", **args, outputMask=[False, False, True])
    assert set(got) == {"gradBiasOut"}
    np.testing.assert_allclose(got["gradBiasOut"], x.astype(np.float64).sum(0), rtol=1e-6)
    given = {**args, "outputMask": [True, False, True], "gradBiasOut": np.zeros(4, np.float32)}
    assert _phase1_code("LayerNormBackward", given) == 161001  # gradInputOut requested, null
    gn = {"gradOut": x, "input": x, "mean": mean[:, :1], "rstd": rstd[:, :1], "gamma": np.ones(4, np.float32)}
    gn.update(N=3, C=4, HxW=1, group=1, outputMask=[True, True, False], gradInput=np.zeros((3, 4), np.float32))
    assert _phase1_code("GroupNormBackward", gn) == 161001  # gradGammaOut requested, null

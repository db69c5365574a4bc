"""ApplyAdamW / ApplyAdamWV2 on the reference against one step of torch.optim.AdamW (CPU, float64)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from acl_core.errors import AclnnError
from tests.ops.torch_ref import ref

HYPER = [
    {"lr": 1e-3, "weightDecay": 1e-2, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8},
    {"lr": 0.05, "weightDecay": 0.1, "beta1": 0.75, "beta2": 0.96875, "eps": 1e-4},
]


def _f32(x: float) -> float:
    return float(np.float32(x))


def _torch_step(
    var: np.ndarray,
    m: np.ndarray,
    v: np.ndarray,
    grad: np.ndarray,
    vmax: np.ndarray | None,
    t: int,
    h: dict,
    maximize: bool,
) -> tuple[np.ndarray, ...]:
    """torch.optim.AdamW at step ``t`` from state (m, v[, vmax]), in float64, hyper-parameters rounded to float32."""
    p = torch.nn.Parameter(torch.from_numpy(var.astype(np.float64)))
    opt = torch.optim.AdamW(
        [p],
        lr=_f32(h["lr"]),
        betas=(_f32(h["beta1"]), _f32(h["beta2"])),
        eps=_f32(h["eps"]),
        weight_decay=_f32(h["weightDecay"]),
        amsgrad=vmax is not None,
        maximize=maximize,
        foreach=False,
    )
    p.grad = torch.from_numpy(grad.astype(np.float64))
    opt.step()  # creates the state; then overwrite it with ours and step again at t
    state = opt.state[p]
    p.data = torch.from_numpy(var.astype(np.float64))
    state["step"] = torch.tensor(float(t - 1))
    state["exp_avg"] = torch.from_numpy(m.astype(np.float64))
    state["exp_avg_sq"] = torch.from_numpy(v.astype(np.float64))
    if vmax is not None:
        state["max_exp_avg_sq"] = torch.from_numpy(vmax.astype(np.float64))
    opt.step()
    out = [p.detach().numpy(), state["exp_avg"].numpy(), state["exp_avg_sq"].numpy()]
    if vmax is not None:
        out.append(state["max_exp_avg_sq"].numpy())
    return tuple(out)


def _state(rng: np.random.Generator, shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    return {
        "varRef": rng.uniform(-2, 2, shape).astype(np.float32),
        "mRef": rng.uniform(-0.1, 0.1, shape).astype(np.float32),
        "vRef": rng.uniform(1e-4, 0.05, shape).astype(np.float32),
        "grad": rng.uniform(-1, 1, shape).astype(np.float32),
    }


@pytest.mark.parametrize("v2", [False, True])
@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("maximize", [False, True])
@pytest.mark.parametrize("h", HYPER)
@pytest.mark.parametrize("t", [1, 5])
def test_matches_torch_adamw(v2: bool, amsgrad: bool, maximize: bool, h: dict, t: int) -> None:
    rng = np.random.default_rng(t + 2 * amsgrad + 4 * maximize)
    s = _state(rng, (3, 17))
    vmax = rng.uniform(1e-4, 0.08, (3, 17)).astype(np.float32) if amsgrad else None
    args: dict[str, Any] = {**s, "amsgrad": amsgrad, "maximize": maximize}
    if v2:
        args.update({"step": np.array([t], np.int64), **h, "maxGradNormOptionalRef": vmax})
        got = ref("ApplyAdamWV2", **args)
    else:
        b1, b2 = _f32(h["beta1"]), _f32(h["beta2"])
        scal = {"beta1Power": b1**t, "beta2Power": b2**t, **h}
        args.update({k: np.array([val], np.float32) for k, val in scal.items()})
        args["maxGradNormOptional"] = vmax
        got = ref("ApplyAdamW", **args)
    want = _torch_step(s["varRef"], s["mRef"], s["vRef"], s["grad"], vmax, t, h, maximize)
    for name, w in zip(("varRef", "mRef", "vRef"), want):
        # the reference rounds once from double; torch's double result rounded to float32 may differ by an ulp
        np.testing.assert_allclose(got[name].astype(np.float64), w.astype(np.float32), rtol=2.5e-7, atol=1e-30)
    if v2 and amsgrad:
        np.testing.assert_allclose(got["maxGradNormOptionalRef"], want[3].astype(np.float32), rtol=2.5e-7)
    if not v2 and amsgrad:  # V1's max tensor is an input: left as it was
        np.testing.assert_array_equal(args["maxGradNormOptional"], vmax)


def test_amsgrad_needs_the_max_tensor() -> None:
    s = _state(np.random.default_rng(0), (4,))
    with pytest.raises(AclnnError) as e:
        ref("ApplyAdamWV2", **s, step=np.array([1], np.int64), **HYPER[0], amsgrad=True, maximize=False)
    assert e.value.code == 161001


def test_shapes_must_agree() -> None:
    s = _state(np.random.default_rng(0), (4,))
    s["grad"] = np.ones(5, np.float32)
    with pytest.raises(AclnnError) as e:
        ref("ApplyAdamWV2", **s, step=np.array([1], np.int64), **HYPER[0], amsgrad=False, maximize=False)
    assert e.value.code == 161002 and "grad" in str(e.value)

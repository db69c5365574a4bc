"""Reference kernels of the optimizer steps (acl_core.spec.ops.optim), written from the AdamW equations in double."""

from __future__ import annotations

import numpy as np

from acl_reference.call import RefCall
from acl_reference.kernels import kernel


def _f32(value: float) -> float:
    """A hyper-parameter as the kernel takes it: rounded to float32."""
    return float(np.float32(value))


def _adamw(k: RefCall, powers: tuple[float, float], hyper: dict[str, float], max_name: str, write_max: bool) -> None:
    var, m, v, grad = (k.read(n, np.float64) for n in ("varRef", "mRef", "vRef", "grad"))
    lr, wd, b1, b2, eps = (hyper[n] for n in ("lr", "weightDecay", "beta1", "beta2", "eps"))
    g = -grad if k.value("maximize") else grad
    with np.errstate(all="ignore"):
        var = var * (1.0 - lr * wd)
        m = b1 * m + (1.0 - b1) * g
        v = b2 * v + (1.0 - b2) * g * g
        v_hat = v
        if k.value("amsgrad"):
            v_hat = np.maximum(k.read(max_name, np.float64), v)
        bias1, bias2 = 1.0 - powers[0], 1.0 - powers[1]
        denom = np.sqrt(v_hat) / np.sqrt(bias2) + eps
        var = var - (lr / bias1) * m / denom
    k.write("varRef", var)
    k.write("mRef", m)
    k.write("vRef", v)
    if write_max and k.value("amsgrad"):
        k.write(max_name, v_hat)


@kernel("ApplyAdamW")
def apply_adam_w(k: RefCall) -> None:
    """One AdamW step; the bias corrections come from the beta powers beta1^t, beta2^t."""
    one = {n: _f32(float(k.read(n, np.float64).reshape(-1)[0])) for n in ("lr", "weightDecay", "beta1", "beta2", "eps")}
    powers = tuple(_f32(float(k.read(n, np.float64).reshape(-1)[0])) for n in ("beta1Power", "beta2Power"))
    _adamw(k, (powers[0], powers[1]), one, "maxGradNormOptional", write_max=False)


@kernel("ApplyAdamWV2")
def apply_adam_w_v2(k: RefCall) -> None:
    """One AdamW step; the bias corrections raise the betas to the step count."""
    hyper = {n: _f32(k.value(n)) for n in ("lr", "weightDecay", "beta1", "beta2", "eps")}
    t = float(k.read("step", np.float64).reshape(-1)[0])
    powers = (hyper["beta1"] ** t, hyper["beta2"] ** t)
    _adamw(k, powers, hyper, "maxGradNormOptionalRef", write_max=True)

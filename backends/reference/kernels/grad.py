"""Reference kernels of the row backward ops (acl_core.spec.ops.grad), in float64.

Each is the textbook gradient of its forward op, written over float64 copies of the inputs: softmax's
Jacobian-vector product, the normalisation backward through ``x̂`` (one function for RmsNorm,
LayerNorm, AddLayerNorm and GroupNorm rows), and SwiGlu's product rule.
"""

from __future__ import annotations

import numpy as np

from acl_reference.call import RefCall
from acl_reference.kernels import kernel

Array = np.ndarray
F64 = np.float64


@kernel("SoftmaxBackward", "LogSoftmaxBackward")
def softmax_backward(k: RefCall) -> None:
    """out = y·(g - Σ g·y) (softmax), out = g - exp(y)·Σ g (log-softmax), along dim."""
    g, y = k.read("gradOutput", F64), k.read("output", F64)
    dim = k.plan["dim"] if g.ndim else None
    with np.errstate(all="ignore"):
        if k.launch.spec.name == "LogSoftmaxBackward":
            result = g - np.exp(y) * np.sum(g, axis=dim, keepdims=g.ndim > 0)
        else:
            result = y * (g - np.sum(g * y, axis=dim, keepdims=g.ndim > 0))
    k.write("out", result)


def norm_backward(
    dy: Array, x: Array, mean: Array | None, rstd: Array, w: Array, axes: tuple[int, ...]
) -> tuple[Array, Array, Array]:
    """(dx, dy·x̂, dy) of a row norm over ``axes`` (``mean`` None: RmsNorm); sum the last two over rows."""
    with np.errstate(all="ignore"):
        xhat = (x - mean) * rstd if mean is not None else x * rstd
        g = dy * w
        inner = g - xhat * np.mean(g * xhat, axis=axes, keepdims=True) if x.size else g
        if mean is not None and x.size:
            inner = inner - np.mean(g, axis=axes, keepdims=True)
        return rstd * inner, dy * xhat, dy


def _stat(k: RefCall, name: str, kept: tuple[int, ...]) -> Array:
    return k.read(name, F64).reshape(kept)


def _rows(a: Array, lead: int) -> Array:
    with np.errstate(all="ignore"):
        return np.sum(a, axis=tuple(range(lead)))


@kernel("RmsNormGrad")
def rms_norm_grad(k: RefCall) -> None:
    """dx and dgamma (float32) of RmsNorm."""
    x, lead = k.read("x", F64), k.plan["lead"]
    kept = x.shape[:lead] + (1,) * (x.ndim - lead)
    dx, dw, _ = norm_backward(
        k.read("dy", F64), x, None, _stat(k, "rstd", kept), k.read("gamma", F64), tuple(range(lead, x.ndim))
    )
    k.write("dxOut", dx)
    k.write("dgammaOut", _rows(dw, lead))


@kernel("LayerNormBackward")
def layer_norm_backward(k: RefCall) -> None:
    """gradInput, gradWeight, gradBias of LayerNorm, each where outputMask asks for it."""
    x, lead = k.read("input", F64), k.plan["lead"]
    kept = x.shape[:lead] + (1,) * (x.ndim - lead)
    w = k.read("weightOptional", F64) if k["weightOptional"] is not None else np.ones(x.shape[lead:])
    dx, dw, db = norm_backward(
        k.read("gradOut", F64), x, _stat(k, "mean", kept), _stat(k, "rstd", kept), w, tuple(range(lead, x.ndim))
    )
    for name, value, wanted in zip(
        ("gradInputOut", "gradWeightOut", "gradBiasOut"), (dx, dw, db), k.plan["output_mask"]
    ):
        if wanted:
            k.write(name, value if name == "gradInputOut" else _rows(value, lead))


@kernel("AddLayerNormGrad")
def add_layer_norm_grad(k: RefCall) -> None:
    """LayerNorm's gradients of x1 + x2 (dx, the gradient of both, plus dsum); dgamma, dbeta float32."""
    lead = k.plan["lead"]
    with np.errstate(all="ignore"):
        x = k.read("x1", F64) + k.read("x2", F64)
    kept = x.shape[:lead] + (1,) * (x.ndim - lead)
    dx, dw, db = norm_backward(
        k.read("dy", F64),
        x,
        _stat(k, "mean", kept),
        _stat(k, "rstd", kept),
        k.read("gamma", F64),
        tuple(range(lead, x.ndim)),
    )
    if k["dsumOptional"] is not None:
        with np.errstate(all="ignore"):
            dx = dx + k.read("dsumOptional", F64)
    k.write("dxOut", dx)
    k.write("dgammaOut", _rows(dw, lead))
    k.write("dbetaOut", _rows(db, lead))


@kernel("GroupNormBackward")
def group_norm_backward(k: RefCall) -> None:
    """GroupNorm's gradients: rows are (sample, group), gamma per channel; weight gradients per channel."""
    x = k.read("input", F64)
    n, c, group = int(k.value("N")), int(k.value("C")), int(k.value("group"))
    spatial = x.size // (n * c) if n * c else 0
    per = c // group
    shaped, stats = (n, group, per * spatial), (n, group, 1)
    w = np.repeat(k.read("gamma", F64).reshape(group, per), spatial, axis=1)
    dx, dw, db = norm_backward(
        k.read("gradOut", F64).reshape(shaped),
        x.reshape(shaped),
        k.read("mean", F64).reshape(stats),
        k.read("rstd", F64).reshape(stats),
        w,
        (2,),
    )
    mask = k.plan["output_mask"]
    if mask[0]:
        k.write("gradInput", dx.reshape(x.shape))
    with np.errstate(all="ignore"):
        if mask[1]:
            k.write("gradGammaOut", np.sum(dw.reshape(n, c, spatial), axis=(0, 2)))
        if mask[2]:
            k.write("gradBetaOut", np.sum(db.reshape(n, c, spatial), axis=(0, 2)))


@kernel("SwiGluGrad")
def swiglu_grad(k: RefCall) -> None:
    """x = [a, b]: out = [yGrad·b·σ(a)·(1 + a·σ(-a)), yGrad·a·σ(a)] (SwiGlu = silu(a)·b)."""
    g, x = k.read("yGrad", F64), k.read("x", F64)
    dim = k.plan["dim"]
    a, b = np.split(x, 2, axis=dim)
    with np.errstate(all="ignore"):
        s, t = 1.0 / (1.0 + np.exp(-a)), 1.0 / (1.0 + np.exp(a))  # σ(a), σ(-a) = 1 - σ(a)
        da = g * b * s * (1.0 + a * t)
        db = g * a * s
    k.write("out", np.concatenate([da, db], axis=dim))

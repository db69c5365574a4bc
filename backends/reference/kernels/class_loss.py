"""Reference kernels of the class-index losses (acl_core.spec.ops.class_loss), in float64.

The class axis is moved last ([N, C, H, W] → [N, H, W, C]), the targets are checked (161002 for a value
outside [0, C) other than ignoreIndex, before anything is written), then each formula is written once as
torch defines it: per-sample terms and weights, reduced, or the gradient scattered back onto the classes.
"""

from __future__ import annotations

import numpy as np

from acl_core.spec.ops.class_loss import MEAN, NONE
from acl_reference.call import RefCall
from acl_reference.kernels import kernel
from acl_reference.kernels.movement import checked_index

Array = np.ndarray


def _last(x: Array) -> Array:
    """The class axis last (a single [C] sample stays)."""
    return x if x.ndim == 1 else np.moveaxis(x, 1, -1)


def _back(x: Array, ndim: int) -> Array:
    return x if ndim == 1 else np.moveaxis(x, -1, 1)


def targets(k: RefCall, classes: int) -> tuple[Array, Array]:
    """(class index per sample, 0 where ignored; kept mask), refusing indices out of range with 161002."""
    t = k.read("target").astype(np.int64)
    keep = t != int(k.value("ignoreIndex"))
    checked_index(t[keep], classes, "target")
    return np.where(keep, t, 0), keep


def _pick(values: Array, t: Array) -> Array:
    return np.take_along_axis(values, t[..., None], axis=-1)[..., 0]


def _reduce(terms: Array, w: Array, reduction: int) -> Array:
    if reduction == NONE:
        return terms
    total = np.sum(terms)
    return np.asarray(total / np.sum(w) if reduction == MEAN else total)


@kernel("NLLLoss", "NLLLoss2d")
def nll_loss(k: RefCall) -> None:
    """out = the reduced -w[t]·x[t]; totalWeightOut = Σ w[t] (0 for a batched 'none')."""
    x = _last(k.read("self", np.float64))
    weight = k.read("weight", np.float64)
    t, keep = targets(k, x.shape[-1])
    reduction = int(k.plan["reduction"])
    w = np.where(keep, weight[t], 0.0)
    with np.errstate(all="ignore"):
        loss = _reduce(np.where(keep, -w * _pick(x, t), 0.0), w, reduction)
    total = np.sum(w) if reduction != NONE or x.ndim == 1 else 0.0
    k.write("out", np.reshape(loss, k["out"].view_dims))
    k.write("totalWeightOut", np.reshape(total, k["totalWeightOut"].view_dims))


@kernel("NLLLossBackward", "NLLLoss2dBackward")
def nll_loss_backward(k: RefCall) -> None:
    """out = -w[t]·g (mean: / totalWeight) at each sample's target class, 0 elsewhere."""
    x = _last(k.read("self", np.float64))
    weight = k.read("weight", np.float64)
    t, keep = targets(k, x.shape[-1])
    g = k.read("gradOutput", np.float64)
    g = g.reshape(t.shape) if int(k.plan["reduction"]) == NONE and x.ndim > 1 else g.reshape(())
    if int(k.plan["reduction"]) == MEAN:
        with np.errstate(all="ignore"):
            g = g / k.read("totalWeight", np.float64).reshape(())
    grad = np.zeros(x.shape)
    with np.errstate(all="ignore"):
        value = np.where(keep, -weight[t] * g, 0.0)
    np.put_along_axis(grad, t[..., None], value[..., None], axis=-1)
    k.write("out", _back(grad, x.ndim))


def _reduction(k: RefCall) -> int:
    return int(k.plan["reduction"])


def _weights(k: RefCall, classes: int) -> Array:
    return np.ones(classes) if k["weightOptional"] is None else k.read("weightOptional", np.float64)


def log_softmax(x: Array) -> Array:
    """log(softmax(x)) along the last axis, in float64 (max subtracted first)."""
    if x.size == 0:
        return x.copy()
    top = np.max(x, axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    return x - top - np.log(np.sum(np.exp(x - top), axis=-1, keepdims=True))


@kernel("CrossEntropyLoss")
def cross_entropy(k: RefCall) -> None:
    """logProbOut = log_softmax(input); lossOut = the reduced smoothed NLL of it; zloss outputs 0."""
    x = k.read("input", np.float64)
    c = x.shape[-1]
    weight = _weights(k, c)
    t, keep = targets(k, c)
    eps = float(k.value("labelSmoothing"))
    with np.errstate(all="ignore"):
        lp = log_softmax(x)
        w = np.where(keep, weight[t], 0.0)
        nll = -w * _pick(lp, t)
        smooth = -np.sum(lp * weight, axis=-1)
        terms = np.where(keep, (1.0 - eps) * nll + eps / c * smooth, 0.0)
        loss = _reduce(terms, w, _reduction(k))
    k.write("logProbOut", lp)
    k.write("lossOut", np.reshape(loss, k["lossOut"].view_dims))
    k.write("zlossOut", np.zeros(k["zlossOut"].view_dims))
    k.write("lseForZlossOut", np.zeros(k["lseForZlossOut"].view_dims))


@kernel("CrossEntropyLossGrad")
def cross_entropy_grad(k: RefCall) -> None:
    """out = s_n·(p·(a_n + b) - a_n·[j = t_n] - ε/C·w_j): a_n = (1-ε)·w[t_n], b = ε/C·Σ w, p = exp(logProb)."""
    lp = k.read("logProb", np.float64)
    c = lp.shape[-1]
    weight = _weights(k, c)
    t, keep = targets(k, c)
    eps = float(k.value("labelSmoothing"))
    g = k.read("gradLoss", np.float64)
    reduction = _reduction(k)
    w = np.where(keep, weight[t], 0.0)
    with np.errstate(all="ignore"):
        s = g.reshape(t.shape) if reduction == NONE else np.full(t.shape, float(g.reshape(())))
        if reduction == MEAN:
            s = s / np.sum(w)
        s = np.where(keep, s, 0.0)
        a = (1.0 - eps) * w
        b = eps / c * np.sum(weight)
        grad = np.exp(lp) * (a + b)[:, None] - eps / c * weight[None, :]
        np.put_along_axis(grad, t[:, None], _pick(grad, t)[:, None] - a[:, None], axis=-1)
        grad = s[:, None] * grad
    k.write("out", grad)


@kernel("SoftmaxCrossEntropyWithLogits")
def softmax_cross_entropy(k: RefCall) -> None:
    """loss = -Σ y·log_softmax(x) per row; backprop = softmax(x) - y (the page's formulas)."""
    x, y = k.read("features", np.float64), k.read("labels", np.float64)
    with np.errstate(all="ignore"):
        lp = log_softmax(x)
        k.write("loss", -np.sum(y * lp, axis=-1))
        k.write("backprop", np.exp(lp) - y)

"""Reference kernels of the norm family: statistics and results in float64, cast to each output.

Conventions taken from CANN where the formula alone does not decide: variance is the population
variance (divide by n), rstd = 1 / sqrt(var + eps); statistics over zero elements are mean 0 and
rstd NaN (what aclnnLayerNorm, aclnnGroupNorm and aclnnBatchNorm write for empty inputs).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from acl_reference.call import RefCall
from acl_reference.kernels import kernel

Array = np.ndarray


def _optional(k: RefCall, name: str) -> Array | None:
    """Optional input ``name`` as float64, or None when it is absent."""
    return k.read(name, np.float64) if k[name] is not None else None


def moments(x: Array, axes: Sequence[int], eps: float) -> tuple[Array, Array]:
    """(mean, rstd) of ``x`` over ``axes``, kept as size-1 dims; mean 0 and rstd NaN over no elements."""
    axes = tuple(axes)
    count = math.prod(x.shape[a] for a in axes)
    kept = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    if count == 0:
        return np.zeros(kept), np.full(kept, np.nan)
    mean = x.mean(axis=axes, keepdims=True)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        var = np.square(x - mean).mean(axis=axes, keepdims=True)
        rstd = 1.0 / np.sqrt(var + eps)
    return mean, rstd


def rms_rstd(x: Array, axes: Sequence[int], eps: float) -> Array:
    """1 / sqrt(mean(x²) + eps) over ``axes``, kept as size-1 dims."""
    axes = tuple(axes)
    count = math.prod(x.shape[a] for a in axes)
    kept = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    if count == 0:
        return np.full(kept, np.nan)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        return 1.0 / np.sqrt(np.square(x).mean(axis=axes, keepdims=True) + eps)


def _affine(y: Array, weight: Array | None, bias: Array | None) -> Array:
    with np.errstate(invalid="ignore", over="ignore"):
        if weight is not None:
            y = y * weight
        if bias is not None:
            y = y + bias
    return y


@kernel("LayerNorm")
def layer_norm(k: RefCall) -> None:
    """out = (x - mean) * rstd * weight + bias over the trailing normalizedShape dims."""
    x = k.read("input", np.float64)
    mean, rstd = moments(x, k.plan["axes"], k.value("eps"))
    with np.errstate(invalid="ignore"):
        y = (x - mean) * rstd
    k.write("out", _affine(y, _optional(k, "weightOptional"), _optional(k, "biasOptional")))
    k.write("meanOutOptional", mean)
    k.write("rstdOutOptional", rstd)


@kernel("AddLayerNorm")
def add_layer_norm(k: RefCall) -> None:
    """x = x1 + x2 (+ bias); yOut = LayerNorm(x) * gamma + beta; meanOut, rstdOut float32; xOut on request."""
    with np.errstate(invalid="ignore", over="ignore"):
        x = k.read("x1", np.float64) + k.read("x2", np.float64)
        bias = _optional(k, "biasOptional")
        if bias is not None:
            x = x + bias
    mean, rstd = moments(x, k.plan["axes"], k.value("epsilon"))
    with np.errstate(invalid="ignore"):
        y = (x - mean) * rstd
    k.write("yOut", _affine(y, k.read("gamma", np.float64), k.read("beta", np.float64)))
    k.write("meanOut", mean)
    k.write("rstdOut", rstd)
    if k.value("additionalOutput"):
        k.write("xOut", x)


@kernel("RmsNorm")
def rms_norm(k: RefCall) -> None:
    """yOut = x * rstd * gamma with rstd = 1 / sqrt(mean(x²) + epsilon) over gamma's dims."""
    x = k.read("x", np.float64)
    rstd = rms_rstd(x, k.plan["axes"], k.value("epsilon"))
    with np.errstate(invalid="ignore", over="ignore"):
        k.write("yOut", x * rstd * k.read("gamma", np.float64))
    k.write("rstdOut", rstd)


@kernel("GemmaRmsNorm")
def gemma_rms_norm(k: RefCall) -> None:
    """yOut = x * rstd * (1 + gamma): RmsNorm with Gemma's zero-centred weight."""
    x = k.read("x", np.float64)
    rstd = rms_rstd(x, k.plan["axes"], k.value("epsilon"))
    with np.errstate(invalid="ignore", over="ignore"):
        k.write("yOut", x * rstd * (1.0 + k.read("gamma", np.float64)))
    k.write("rstdOut", rstd)


@kernel("AddRmsNorm")
def add_rms_norm(k: RefCall) -> None:
    """x = x1 + x2 (kept exact, not rounded to x1's dtype); yOut = RmsNorm(x); rstdOut; xOut = x."""
    with np.errstate(invalid="ignore", over="ignore"):
        x = k.read("x1", np.float64) + k.read("x2", np.float64)
    rstd = rms_rstd(x, k.plan["axes"], k.value("epsilon"))
    with np.errstate(invalid="ignore", over="ignore"):
        k.write("yOut", x * rstd * k.read("gamma", np.float64))
    k.write("rstdOut", rstd)
    k.write("xOut", x)


@kernel("GroupNorm")
def group_norm(k: RefCall) -> None:
    """Normalise each group of C/group channels of every sample; meanOut and rstdOut are [N, group]."""
    x = k.read("self", np.float64)
    n, c, group = k.value("N"), k.value("C"), k.value("group")
    if x.size == 0:
        k.write("meanOut", 0.0)
        k.write("rstdOut", np.nan)
        return
    grouped = x.reshape(n, group, -1)
    mean, rstd = moments(grouped, (2,), k.value("eps"))
    with np.errstate(invalid="ignore"):
        y = ((grouped - mean) * rstd).reshape(x.shape)
    per_channel = (1, c) + (1,) * (x.ndim - 2)
    weight, bias = _optional(k, "gamma"), _optional(k, "beta")
    y = _affine(
        y,
        None if weight is None else weight.reshape(per_channel),
        None if bias is None else bias.reshape(per_channel),
    )
    k.write("out", y)
    k.write("meanOut", mean[..., 0])
    k.write("rstdOut", rstd[..., 0])


@kernel("BatchNorm")
def batch_norm(k: RefCall) -> None:
    """Per-channel normalisation (channel = dim 1).

    Inference uses runningMean / runningVar (0 and 1 when absent). Training uses the batch's mean
    and population variance, writes saveMean and saveInvstd = 1 / sqrt(var + eps), and updates the
    running statistics in place: r = (1 - momentum)·r + momentum·s, with the unbiased variance.
    """
    x = k.read("input", np.float64)
    c = x.shape[1]
    per_channel = (1, c) + (1,) * (x.ndim - 2)
    axes = (0, *range(2, x.ndim))
    eps, momentum = k.value("eps"), k.value("momentum")
    weight, bias = _optional(k, "weight"), _optional(k, "bias")
    if x.size == 0:
        # CANN returns before computing: saveMean 0, saveInvstd NaN, running statistics untouched.
        k.write("saveMean", 0.0)
        k.write("saveInvstd", np.nan)
        return
    if not k.value("training"):
        running_mean, running_var = _optional(k, "runningMean"), _optional(k, "runningVar")
        mean = np.zeros(c) if running_mean is None else running_mean
        with np.errstate(invalid="ignore", divide="ignore"):
            rstd = 1.0 / np.sqrt((np.ones(c) if running_var is None else running_var) + eps)
        with np.errstate(invalid="ignore", over="ignore"):
            y = (x - mean.reshape(per_channel)) * rstd.reshape(per_channel)
    else:
        batch_mean, batch_rstd = moments(x, axes, eps)
        with np.errstate(invalid="ignore", over="ignore"):
            y = (x - batch_mean) * batch_rstd
        mean, rstd = batch_mean.reshape(c), batch_rstd.reshape(c)
        k.write("saveMean", mean)
        k.write("saveInvstd", rstd)
        count = x.size // c
        with np.errstate(invalid="ignore", divide="ignore"):
            variance = np.square(x - batch_mean).mean(axis=axes)
            unbiased = variance * count / (count - 1) if count > 1 else np.full(c, np.nan)
        if k["runningMean"] is not None:
            k.write("runningMean", (1.0 - momentum) * k.read("runningMean", np.float64) + momentum * mean)
        if k["runningVar"] is not None:
            k.write("runningVar", (1.0 - momentum) * k.read("runningVar", np.float64) + momentum * unbiased)
    k.write(
        "output",
        _affine(
            y,
            None if weight is None else weight.reshape(per_channel),
            None if bias is None else bias.reshape(per_channel),
        ),
    )

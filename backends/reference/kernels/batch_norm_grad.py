"""Reference kernels of BatchNorm's backward ops, in float64: per-channel sums over every dim but dim 1."""

from __future__ import annotations

import numpy as np

from acl_reference.call import RefCall
from acl_reference.kernels import kernel

Array = np.ndarray


def _axes(x: Array) -> tuple[int, ...]:
    return (0, *range(2, x.ndim))


def _channel(k: RefCall, name: str, default: float, x: Array) -> Array:
    """Per-channel vector ``name`` (``default`` when null) shaped to broadcast against ``x``."""
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    if k[name] is None:
        return np.full(shape, default)
    return k.read(name, np.float64).reshape(shape)


def _sums(dy: Array, x: Array, mean: Array) -> tuple[Array, Array]:
    """``Σdy`` and ``Σdy·(x - mean)`` per channel."""
    return dy.sum(axis=_axes(x)), (dy * (x - mean)).sum(axis=_axes(x))


@kernel("BatchNormBackward")
def batch_norm_backward(k: RefCall) -> None:
    """Training: through the saved batch statistics; inference: through the running ones."""
    dy, x = k.read("gradOut", np.float64), k.read("input", np.float64)
    want_input, want_weight, want_bias = k.plan["output_mask"]
    w = _channel(k, "weight", 1.0, x)
    with np.errstate(all="ignore"):
        if k.value("training"):
            mean, invstd = _channel(k, "saveMean", 0.0, x), _channel(k, "saveInvstd", 1.0, x)
        else:
            mean = _channel(k, "runningMean", 0.0, x)
            invstd = 1.0 / np.sqrt(_channel(k, "runningVar", 1.0, x) + k.value("eps"))
        sum_dy, sum_dy_xmu = _sums(dy, x, mean)
        if want_input:
            if k.value("training"):
                m = max(x.size // max(x.shape[1], 1), 1)
                shape = mean.shape
                xhat = (x - mean) * invstd
                proj = (sum_dy_xmu.reshape(shape) * invstd) / m
                k.write("gradInput", w * invstd * (dy - sum_dy.reshape(shape) / m - xhat * proj))
            else:
                k.write("gradInput", dy * w * invstd)
        if want_weight:
            k.write("gradWeight", sum_dy_xmu * invstd.reshape(-1))
        if want_bias:
            k.write("gradBias", sum_dy)


@kernel("BatchNormReduceBackward")
def batch_norm_reduce_backward(k: RefCall) -> None:
    """sumDy, sumDyXmu (inputG), gradWeight = sumDyXmu·invstd (weightG), gradBias = sumDy (biasG)."""
    dy, x = k.read("gradOut", np.float64), k.read("input", np.float64)
    sum_dy, sum_dy_xmu = _sums(dy, x, _channel(k, "mean", 0.0, x))
    want_sums, _, want_weight, want_bias = k.plan["output_mask"]
    if want_sums:
        k.write("sumDy", sum_dy)
        k.write("sumDyXmu", sum_dy_xmu)
    if want_weight:
        k.write("gradWeight", sum_dy_xmu * k.read("invstd", np.float64))
    if want_bias:
        k.write("gradBias", sum_dy)


@kernel("BatchNormElemtBackward")
def batch_norm_elemt_backward(k: RefCall) -> None:
    """gradInput = (dy - sumDy/n - (x - mean)·invstd²·sumDyXmu/n)·invstd·weight, n = Σ counter."""
    dy, x = k.read("gradOut", np.float64), k.read("input", np.float64)
    n = float(k.read("counter", np.float64).sum())
    mean, invstd, w = (_channel(k, name, d, x) for name, d in (("mean", 0.0), ("invstd", 1.0), ("weight", 1.0)))
    sum_dy, sum_dy_xmu = _channel(k, "sumDy", 0.0, x), _channel(k, "sumDyXmu", 0.0, x)
    with np.errstate(all="ignore"):
        k.write("gradInput", (dy - sum_dy / n - (x - mean) * invstd**2 * sum_dy_xmu / n) * invstd * w)

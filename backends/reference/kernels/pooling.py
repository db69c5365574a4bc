"""Reference kernels of the pooling family, written for obviousness: one strided slice per kernel offset.

Every kernel offset ``k`` (a tuple over the spatial dims) meets, for all outputs at once, the input
positions ``o·stride - pad + k·dilation``: a strided slice of the input padded on both sides (zeros
for an average, ``-inf`` and an "outside" mark for a max). Sums run in float64 and round once. The
backward ops add each output's share back through the same slices.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from acl_core.spec.ops.pooling import BY_NAME, GLOBAL, MAX_POOL, Geometry, adaptive_bounds
from acl_reference.call import RefCall
from acl_reference.kernels import kernel
from acl_reference.kernels.matmul import reduce_precision

Array = np.ndarray


def _padded_length(geo: Geometry, d: int) -> int:
    """Room for every window of dim ``d``: the padded input, or past it where ``ceilMode`` adds a window."""
    reach = (geo.sizes[d] - 1) * geo.stride[d] + geo.dilation[d] * (geo.kernel[d] - 1) + 1
    return max(geo.lengths[d] + 2 * geo.pad[d], reach)


def _pad(x: Array, geo: Geometry, fill: float) -> Array:
    """``x`` with its spatial dims padded by ``pad`` before and as far as every window reaches after."""
    s = geo.spatial
    widths = [(0, 0)] * (x.ndim - s)
    widths += [(p, _padded_length(geo, d) - p - n) for d, (p, n) in enumerate(zip(geo.pad, geo.lengths))]
    return np.pad(x, widths, constant_values=fill)


def _offsets(geo: Geometry) -> Iterator[tuple[tuple[int, ...], tuple[Any, ...]]]:
    """Each kernel offset (in window order) and the slice of the padded input its outputs read."""
    for k in itertools.product(*(range(n) for n in geo.kernel)):
        window = tuple(
            slice(kd * dd, kd * dd + sd * (od - 1) + 1, sd)
            for kd, dd, sd, od in zip(k, geo.dilation, geo.stride, geo.sizes)
        )
        index: tuple[Any, ...] = (Ellipsis, *window)
        yield k, index


def divisors(geo: Geometry) -> Array:
    """Each output's divisor: ``divisorOverride``, the window's size (to the right padding) or its input count."""
    if geo.divisor:
        return np.full(geo.sizes, float(geo.divisor))
    per_dim = []
    for d in range(geo.spatial):
        start = np.arange(geo.sizes[d]) * geo.stride[d] - geo.pad[d]
        end = np.minimum(start + geo.kernel[d], geo.lengths[d] + geo.pad[d])
        if not geo.count_include_pad:
            start, end = np.maximum(start, 0), np.minimum(end, geo.lengths[d])
        per_dim.append((end - start).astype(np.float64))
    return math.prod(np.ix_(*per_dim))  # type: ignore[return-value]


def avg_pool(x: Array, geo: Geometry) -> Array:
    """The average of every window (x in float64)."""
    padded = _pad(x, geo, 0.0)
    total = np.zeros((*x.shape[: x.ndim - geo.spatial], *geo.sizes))
    for _, window in _offsets(geo):
        total += padded[window]
    return total / divisors(geo)


def avg_pool_backward(grad: Array, geo: Geometry) -> Array:
    """Every input element's sum of ``grad / divisor`` over the windows covering it."""
    share = grad / divisors(geo)
    lead = grad.shape[: grad.ndim - geo.spatial]
    padded = np.zeros((*lead, *(_padded_length(geo, d) for d in range(geo.spatial))))
    for _, window in _offsets(geo):
        padded[window] += share  # one offset's outputs meet distinct positions
    crop: tuple[Any, ...] = (Ellipsis, *(slice(p, p + n) for p, n in zip(geo.pad, geo.lengths)))
    return padded[crop]


def max_pool(x: Array, geo: Geometry) -> tuple[Array, Array]:
    """Every window's maximum and its flat position in the plane (torch's: first maximum, last NaN)."""
    s = geo.spatial
    padded = _pad(x, geo, -np.inf)
    inside = _pad(np.ones(geo.lengths, bool), geo, False)
    grids = np.meshgrid(*(np.arange(n) for n in geo.lengths), indexing="ij")
    flat = _pad(np.ravel_multi_index(grids, geo.lengths), geo, -1)
    lead = x.shape[: x.ndim - s]
    best = np.full((*lead, *geo.sizes), -np.inf)
    where = np.full((*lead, *geo.sizes), -1, np.int64)
    for _, window in _offsets(geo):
        value = padded[window]
        valid = np.broadcast_to(inside[window[1:]], value.shape)
        position = np.broadcast_to(flat[window[1:]], value.shape)
        # torch's search: the first valid position starts it; a larger value, or any NaN, takes over
        first = valid & (where < 0)
        where = np.where(first, position, where)
        better = valid & ((value > best) | np.isnan(value))
        best = np.where(better, value, best)
        where = np.where(better, position, where)
    return best, where


def _at(index: tuple[Any, ...]) -> tuple[Any, ...]:
    """``index`` over the trailing dims (every leading dim kept)."""
    return (Ellipsis, *index)


def _adaptive_windows(geo: Geometry) -> Iterator[tuple[tuple[int, ...], tuple[Any, ...], Array]]:
    """Each output position of an adaptive pool, its window's slice, and the window's flat positions in the plane."""
    bounds = [adaptive_bounds(n, o) for n, o in zip(geo.lengths, geo.sizes)]
    for where in itertools.product(*(range(o) for o in geo.sizes)):
        ranges = [np.arange(*bounds[d][o]) for d, o in enumerate(where)]
        grid = np.meshgrid(*ranges, indexing="ij")
        window: tuple[Any, ...] = (Ellipsis, *(slice(*bounds[d][o]) for d, o in enumerate(where)))
        yield where, window, np.ravel_multi_index(grid, geo.lengths).reshape(-1)


def adaptive_avg_pool(x: Array, geo: Geometry) -> Array:
    """The mean of every adaptive window."""
    s = geo.spatial
    out = np.zeros((*x.shape[: x.ndim - s], *geo.sizes))
    for where, window, _ in _adaptive_windows(geo):
        out[_at(where)] = x[window].mean(axis=tuple(range(-s, 0)))
    return out


def adaptive_avg_pool_backward(grad: Array, geo: Geometry) -> Array:
    """Every input element's sum of ``grad / window size`` over the adaptive windows covering it."""
    s = geo.spatial
    result = np.zeros((*grad.shape[: grad.ndim - s], *geo.lengths))
    for where, window, flat in _adaptive_windows(geo):
        result[window] += (grad[_at(where)] / flat.size)[_at((None,) * s)]
    return result


def adaptive_max_pool(x: Array, geo: Geometry) -> tuple[Array, Array]:
    """Every adaptive window's maximum and its flat position (torch's: first maximum, last NaN)."""
    s = geo.spatial
    lead = x.shape[: x.ndim - s]
    best = np.zeros((*lead, *geo.sizes))
    index = np.zeros((*lead, *geo.sizes), np.int64)
    for where, window, flat in _adaptive_windows(geo):
        values = x[window].reshape(*lead, -1)
        nan = np.isnan(values)
        last_nan = values.shape[-1] - 1 - np.argmax(nan[..., ::-1], axis=-1)
        pick = np.where(nan.any(axis=-1), last_nan, np.argmax(np.where(nan, -np.inf, values), axis=-1))
        best[_at(where)] = np.take_along_axis(values, pick[..., None], axis=-1)[..., 0]
        index[_at(where)] = flat[pick]
    return best, index


def max_pool_backward(grad: Array, indices: Array, geo: Geometry) -> Array:
    """Each gradient added to the input position its index names (161002 for a position outside its plane)."""
    plane = math.prod(geo.lengths)
    lead = grad.shape[: grad.ndim - geo.spatial]
    if indices.size and (indices.min() < 0 or indices.max() >= plane):
        from acl_core.spec.opspec import invalid

        raise invalid(f"indices must lie in [0, {plane}) (the plane's positions)")
    rows = int(np.prod(lead, dtype=np.int64))
    result = np.zeros((rows, plane))
    np.add.at(
        result,
        (np.repeat(np.arange(rows), indices.size // max(rows, 1)), indices.reshape(-1)),
        grad.reshape(-1),
    )
    return result.reshape(*lead, *geo.lengths)


def _run(k: RefCall) -> None:
    pool, backward = BY_NAME[k.launch.spec.name]
    geo: Geometry = k.plan["pool"]
    with np.errstate(invalid="ignore", over="ignore"):
        if pool.adaptive and not backward:
            x = k.read("self", np.float64)
            if pool.kind == "avg":
                k.write(pool.forward_out, adaptive_avg_pool(x, geo))
                return
            best, where = adaptive_max_pool(x, geo)
            k.write(pool.forward_out, best)
            k.write(pool.indices_out, where)
        elif pool.adaptive and pool.kind == "avg":
            k.write(pool.backward_out, adaptive_avg_pool_backward(k.read("gradOutput", np.float64), geo))
        elif pool.kind == "avg":
            if backward:
                grad = reduce_precision(k.read("gradOutput"), geo.rounding)
                k.write(pool.backward_out, avg_pool_backward(grad, geo))
            else:
                x = reduce_precision(k.read("self"), geo.rounding)
                k.write(pool.forward_out, avg_pool(x, geo))
        elif backward:
            grad = k.read("gradOutput", np.float64)
            k.write(pool.backward_out, max_pool_backward(grad, k.read("indices").astype(np.int64), geo))
        else:
            best, where = max_pool(k.read("self", np.float64), geo)
            k.write(pool.forward_out, best)
            k.write(pool.indices_out, where)


for _name in BY_NAME:
    kernel(_name)(_run)


@kernel(*GLOBAL)
def global_pool(k: RefCall) -> None:
    """The mean or the maximum (NaN wins) of every plane, keeping its dims as 1."""
    x = k.read("self", np.float64)
    axes = tuple(range(2, x.ndim))
    reduce = np.mean if GLOBAL[k.launch.spec.name][0] == "mean" else np.max
    with np.errstate(invalid="ignore", over="ignore"):
        k.write("out", reduce(x, axis=axes, keepdims=True))


def max_values(x: Array, geo: Geometry) -> Array:
    """Every window's maximum in ``x``'s own dtype (integers exactly): the first in window order, NaN winning.

    Padding holds the type's lowest value and is never taken over an input (a window always holds one).
    """
    integer = x.dtype.kind in "iu"
    padded = _pad(x, geo, np.iinfo(x.dtype).min if integer else -np.inf)
    best: Array | None = None
    for _, window in _offsets(geo):
        value = padded[window]
        if best is None:
            best = value
            continue
        take = value > best if integer else (value > best) | np.isnan(value)
        best = np.where(take, value, best)
    assert best is not None
    return best


@kernel(MAX_POOL)
def onnx_max_pool(k: RefCall) -> None:
    """ONNX's MaxPool: the window maxima (begin pads in the geometry; the end pads only shaped the output)."""
    x = k.read("self")
    with np.errstate(invalid="ignore"):
        wide = x.astype(np.int64) if x.dtype.kind in "iu" else x.astype(np.float64)
        k.write("out", max_values(wide, k.plan["pool"]))

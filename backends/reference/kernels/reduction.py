"""Reference kernels of the reduction family: reduce wide (float64 / int64 / complex128), then cast to the output.

Where an operator takes an output ``dtype``, the input is first cast to that dtype the way CANN's Cast
does (so float → int truncates) and the reduction then runs wide. Orderings (sort, top-k, arg-extrema)
follow torch: NaN is greater than every number, -0.0 equals 0.0, and ties keep their original order.
"""

from __future__ import annotations

import numpy as np

from acl_core.dtypes import DataType
from acl_reference.call import RefCall
from acl_reference.kernels import kernel
from acl_reference.tensor_io import cast, wide

Array = np.ndarray


def _as_dtype(k: RefCall, name: str, dtype: DataType) -> Array:
    """Tensor ``name`` cast to ``dtype`` (CANN's Cast), then widened for exact accumulation."""
    return cast(k.read(name), dtype).astype(wide(dtype))


def _wide_read(k: RefCall, name: str) -> Array:
    return k.read(name).astype(wide(k.dtype(name)))


def _floats(k: RefCall, name: str) -> Array:
    return k.read(name, np.float64)


def _axes(x: Array, dims: tuple[int, ...]) -> tuple[int, ...]:
    """The NumPy axes of ``dims`` (a 0-d tensor accepts dim 0 / -1 but has no axis to reduce)."""
    return tuple(d for d in dims if d < x.ndim)


def _count(x: Array, axes: tuple[int, ...]) -> int:
    return int(np.prod([x.shape[a] for a in axes]))


# ----------------------------------------------------------------------------- softmax
@kernel("Softmax", "LogSoftmax")
def softmax(k: RefCall) -> None:
    """(log-)softmax along dim, shifted by the row maximum; NaN or +Inf in a row make the whole row NaN."""
    x = _floats(k, "self")
    if x.size == 0:
        return
    shape, dim = x.shape, k.plan["dim"]
    x = np.atleast_1d(x)
    with np.errstate(all="ignore"):
        shifted = x - x.max(axis=dim, keepdims=True)
        log_sum = np.log(np.exp(shifted).sum(axis=dim, keepdims=True))
        result = shifted - log_sum if k.launch.spec.name == "LogSoftmax" else np.exp(shifted - log_sum)
    k.write("out", result.reshape(shape))


# ----------------------------------------------------------------------------- sums, means, products
@kernel("ReduceSum")
def reduce_sum(k: RefCall) -> None:
    """Sum over dims after casting self to dtype."""
    x = _as_dtype(k, "self", DataType(k["dtype"]))
    k.write("out", np.sum(x, axis=_axes(x, k.plan["dims"]), keepdims=k["keepDims"]))


@kernel("Mean", "MeanV2")
def mean(k: RefCall) -> None:
    """Mean over dims after casting self to dtype (MeanV2: self's); an integer dtype truncates toward zero."""
    dtype = DataType(k["dtype"]) if "dtype" in k.launch.args else k.dtype("self")
    x = _as_dtype(k, "self", dtype)
    axes = _axes(x, k.plan["dims"])
    acc = x.astype(np.complex128 if dtype.is_complex else np.float64)
    with np.errstate(all="ignore"):
        result = np.sum(acc, axis=axes, keepdims=k["keepDim"]) / _count(x, axes)  # an empty reduction gives NaN
    k.write("out", cast(result, dtype))


@kernel("ReduceLogSum")
def reduce_log_sum(k: RefCall) -> None:
    """log of the sum over axes; with noopWithEmptyAxes and no axes, data itself (no log)."""
    x = _floats(k, "data")
    if k["noopWithEmptyAxes"] and not list(k["axes"]):
        k.write("reduce", x)
        return
    with np.errstate(all="ignore"):
        k.write("reduce", np.log(np.sum(x, axis=_axes(x, k.plan["dims"]), keepdims=k["keepDims"])))


@kernel("Prod", "ProdDim")
def prod(k: RefCall) -> None:
    """Product over every element (Prod) or one dim (ProdDim) after casting self to dtype; empty → 1."""
    x = _as_dtype(k, "self", DataType(k["dtype"]))
    with np.errstate(all="ignore"):
        if k.launch.spec.name == "Prod":
            k.write("out", np.prod(x))
        else:
            k.write("out", np.prod(x, axis=_axes(x, k.plan["dims"]), keepdims=k["keepDim"]))


@kernel("Cumsum")
def cumsum(k: RefCall) -> None:
    """Inclusive prefix sum along dim after casting self to dtype (integers wrap in the out dtype)."""
    x = _as_dtype(k, "self", DataType(k["dtype"]))
    with np.errstate(all="ignore"):
        k.write("out", np.cumsum(np.atleast_1d(x), axis=k.plan["dim"]).reshape(x.shape))


@kernel("Cumprod")
def cumprod(k: RefCall) -> None:
    """Inclusive prefix product along dim after casting input to dtype (ACL_DT_UNDEFINED: input's own)."""
    raw = DataType(k["dtype"])
    dtype = k.dtype("input") if raw == DataType.ACL_DT_UNDEFINED else raw
    x = _as_dtype(k, "input", dtype)
    with np.errstate(all="ignore"):
        k.write("out", np.cumprod(np.atleast_1d(x), axis=k.plan["dim"]).reshape(x.shape))


@kernel("Cummax", "Cummin")
def cum_extremum(k: RefCall) -> None:
    """Running max / min along dim and the index of its latest occurrence; a NaN takes over and sticks (torch)."""
    x = k.read("self")
    if x.size == 0:
        return
    axis = k.plan["dim"] if x.ndim else 0
    moved = np.moveaxis(np.atleast_1d(x), axis, 0)
    wide = moved.astype(np.float64) if moved.dtype.kind in "fV" else moved.astype(np.int64)
    better = np.greater_equal if k.launch.spec.name == "Cummax" else np.less_equal
    best, at = wide[0].copy(), np.zeros(wide.shape[1:], np.int64)
    values, indices = np.empty(wide.shape, wide.dtype), np.empty(wide.shape, np.int64)
    for i in range(wide.shape[0]):
        v = wide[i]
        with np.errstate(invalid="ignore"):
            take = np.isnan(v) | (~np.isnan(best) & better(v, best)) if v.dtype.kind == "f" else better(v, best)
        best, at = np.where(take, v, best), np.where(take, i, at)
        values[i], indices[i] = best, at
    k.write("valuesOut", np.moveaxis(values, 0, axis).reshape(x.shape))
    k.write("indicesOut", np.moveaxis(indices, 0, axis).reshape(x.shape))


# ----------------------------------------------------------------------------- extrema
@kernel("Amax", "Amin", "MaxV2")
def amax_amin(k: RefCall) -> None:
    """Max / min over dims (MaxV2: none with noopWithEmptyDims and empty dims), NaN-propagating."""
    x = _wide_read(k, "self")
    if x.size == 0:
        return  # the reduced dims are non-empty (checked), so the result is empty too
    fn = np.min if k.launch.spec.name == "Amin" else np.max
    keep = k["keepDims"] if "keepDims" in k.launch.args else k["keepDim"]
    k.write("out", fn(x, axis=_axes(x, k.plan["dims"]), keepdims=keep))


@kernel("Max", "Min")
def max_all(k: RefCall) -> None:
    """Max / min of every element, NaN-propagating; an empty self leaves out untouched, as CANN's aclnnMax does."""
    x = _wide_read(k, "self")
    if x.size == 0:
        return
    k.write("out", np.max(x) if k.launch.spec.name == "Max" else np.min(x))


def _order_keys(x: Array) -> tuple[Array, Array]:
    """(dense rank of each value, NaN mask): ranks order numbers with -0.0 == 0.0; NaN is ranked separately."""
    values = x.astype(np.float64) if x.dtype.kind in "fV" else x
    nan = np.isnan(values) if values.dtype.kind == "f" else np.zeros(values.shape, dtype=bool)
    values = np.where(nan, 0, values)
    _, rank = np.unique(values.reshape(-1), return_inverse=True)
    return rank.reshape(x.shape).astype(np.int64), nan


def stable_order(x: Array, axis: int, descending: bool) -> Array:
    """Indices that stably sort ``x`` along ``axis`` (torch's order: NaN above +Inf, ties by position)."""
    if x.ndim == 0:
        return np.zeros((), dtype=np.int64)
    moved = np.moveaxis(x, axis, -1)
    rank, nan = _order_keys(moved)
    # np.lexsort sorts by its last key first and is stable
    keys = (-rank, ~nan) if descending else (rank, nan)
    order = np.lexsort(keys, axis=-1) if moved.size else np.zeros(moved.shape, dtype=np.int64)
    return np.moveaxis(order.astype(np.int64), -1, axis)


def _first_extreme(x: Array, axis: int, largest: bool) -> Array:
    """Index of the first maximum (or minimum) along axis; a NaN counts as the extreme (torch's rule)."""
    order = stable_order(np.atleast_1d(x), axis if x.ndim else 0, largest)
    first = np.take(order, [0], axis=axis if x.ndim else 0)
    return first if x.ndim else first.reshape(())


def _first_min(x: Array, dim: int) -> Array:
    """Index of the first minimum along dim, kept; ascending order puts NaN last, but torch reports a NaN."""
    moved = np.atleast_1d(x)
    axis = dim if x.ndim else 0
    rank, nan = _order_keys(np.moveaxis(moved, axis, -1))
    order = np.lexsort((rank, ~nan), axis=-1)
    idx = np.moveaxis(order[..., :1], -1, axis).astype(np.int64)
    return idx.reshape(()) if x.ndim == 0 else idx


@kernel("MaxDim", "MinDim")
def max_dim(k: RefCall) -> None:
    """Max / min along dim with the index of its first occurrence (a NaN wins)."""
    x = k.read("self")
    if x.size == 0:
        return
    dim, keep = k.plan["dim"], k["keepdim"]
    idx = _first_extreme(x, dim, True) if k.launch.spec.name == "MaxDim" else _first_min(x, dim)
    values = np.take_along_axis(x, idx, axis=dim)
    k.write("out", values if keep else np.squeeze(values, axis=dim))
    k.write("indices", idx if keep else np.squeeze(idx, axis=dim))


@kernel("ArgMax", "ArgMin")
def arg_extremum(k: RefCall) -> None:
    """Index of the first max / min along dim (a NaN counts as both the max and the min, as in torch)."""
    x = k.read("self")
    if x.size == 0:
        return
    dim, keep = k.plan["dim"], k["keepdim"]
    idx = _first_extreme(x, dim, True) if k.launch.spec.name == "ArgMax" else _first_min(x, dim)
    if x.ndim and not keep:
        idx = np.squeeze(idx, axis=dim)
    k.write("out", idx)


# ----------------------------------------------------------------------------- top-k and sorting
@kernel("Topk")
def topk(k: RefCall) -> None:
    """The k largest (or smallest) values along dim, in sorted order, ties in their original order."""
    x = k.read("self")
    dim, count = k.plan["dim"], k["k"]
    order = stable_order(x, dim, k["largest"])
    idx = np.take(order, np.arange(count), axis=dim)
    k.write("valuesOut", np.take_along_axis(x, idx, axis=dim))
    k.write("indicesOut", idx)


@kernel("Sort")
def sort(k: RefCall) -> None:
    """Values and indices sorted along dim; always stable (a valid answer when stable is false too)."""
    x = k.read("self")
    dim = k.plan["dim"]
    order = stable_order(x, dim, k["descending"])
    k.write("valuesOut", np.take_along_axis(x, order, axis=dim))
    k.write("indicesOut", order)


@kernel("Argsort")
def argsort(k: RefCall) -> None:
    """The stable sorting permutation along dim."""
    k.write("out", stable_order(k.read("self"), k.plan["dim"], k["descending"]))


# ----------------------------------------------------------------------------- variance and standard deviation
def variance(x: Array, axes: tuple[int, ...], correction: int, keepdim: bool) -> Array:
    """Variance with CANN's degenerate cases: N = 0 → NaN; N ≤ correction → NaN when N = 1, else +Inf."""
    n = _count(x, axes)
    if n == 0 or n <= correction:
        shape = np.sum(np.zeros(x.shape), axis=axes, keepdims=keepdim).shape
        return np.full(shape, np.nan if n <= 1 else np.inf)
    with np.errstate(all="ignore"):
        mean = np.mean(x, axis=axes, keepdims=True)
        return np.asarray(np.sum((x - mean) ** 2, axis=axes, keepdims=keepdim) / (n - correction))


@kernel("Var", "VarCorrection", "VarMean", "Std", "StdMeanCorrection")
def var_std(k: RefCall) -> None:
    """Variance or standard deviation over dims (with the mean for VarMean / StdMeanCorrection)."""
    name = k.launch.spec.name
    x = _floats(k, "self")
    axes, keep = _axes(x, k.plan["dims"]), k["keepdim"]
    var = variance(x, axes, k.plan["correction"], keep)
    std = np.sqrt(var)
    if name in ("Var", "VarCorrection"):
        k.write("out", var)
    elif name == "Std":
        k.write("out", std)
    else:
        with np.errstate(all="ignore"):
            mean = np.sum(x, axis=axes, keepdims=keep) / _count(x, axes)  # an empty reduction gives NaN
        k.write("varOut" if name == "VarMean" else "stdOut", var if name == "VarMean" else std)
        k.write("meanOut", mean)

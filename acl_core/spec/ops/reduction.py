"""Operators of the reduction family: softmax, reductions over dims, arg-extrema, scans, top-k and sorting.

Dtype lists, null rules and error cases follow each operator's page in CANN's ops-math / ops-nn
documentation and the checks its ``op_api`` performs. Reduction dims arrive as aclIntArray; an empty
array means "every dim" (ReduceSum, Mean, Amax, Amin and the Var/Std family); only the Var/Std family
also accepts a null ``dim`` for that. None of these operators has an ``aclnnInplaceXxx`` twin in the
official prototype table.

The V2 reductions (MeanV2, MaxV2, ReduceLogSum) add ``noopWithEmptyAxes`` / ``noopWithEmptyDims``:
set, an empty dim array reduces nothing and out equals self (ONNX's flag; ReduceLogSum's page says the
output then equals the input, so no log is taken); unset, it reduces every dim. MeanV2 has no
``dtype``: it computes in self's dtype, so an integer self truncates its mean toward zero (as Mean with
an integer dtype; torch refuses integer means). ReduceLogSum is log(ReduceSum) in data's dtype (a zero
sum gives -Inf, a negative one NaN). MaxV2, like Amax, refuses a reduction over a size-0 dim (its
page: "不支持reduce轴为0"). Min and MinDim mirror Max and MaxDim (NaN wins; MinDim reports the first
index of the minimum, torch's rule). Cummax / Cummin follow torch where the pages are silent: a tie moves
the index to the later element, a NaN takes over and only a later NaN replaces it; a 0-d self takes
dim -1 or 0 (the page names both a [1, 8] rank and that case; we accept 0-d, as torch does).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.spec import samples as S
from acl_core.spec.accuracy import (
    Accuracy,
    composite,
    dim_length,
    exact,
    reduction,
    softmax_scale,
    variance_scale,
    with_accuracy,
)
from acl_core.spec.opspec import (
    INVALID,
    NULLPTR,
    Call,
    ErrorSample,
    Infos,
    OpSpec,
    Param,
    Sample,
    bool_attr,
    dtype_attr,
    int_array,
    int_attr,
    invalid,
    out,
    ref,
    scalar,
    tensor,
)
from acl_core.spec.plan import declare as declare_plan
from acl_core.spec.promotion import can_cast
from acl_core.spec.rules import (
    COMPLEX,
    FLOATS,
    FLOATS64,
    INTEGERS,
    REAL_BOOL,
    castable,
    listed,
    normalize_dim,
    normalize_dims,
    reduced_shape,
    same,
    tensor_arg,
)
from acl_core.tensor import AclIntArray, AclScalar, AclTensor

# the plan keys this family's rules write (acl_core.spec.plan; docs/KERNELS.md)
declare_plan("correction", "int", "the variance's degrees-of-freedom correction (1: unbiased)", int)

FAMILY = "reduction"

_UNSIGNED_WIDE = frozenset({D.ACL_UINT16, D.ACL_UINT32, D.ACL_UINT64})
SOFTMAX_DTYPES = FLOATS64
SUM_DTYPES = REAL_BOOL | COMPLEX
MEAN_DTYPES = FLOATS64 | INTEGERS | COMPLEX
EXTREMA_DTYPES = REAL_BOOL
"""Amax, Amin and Max."""
MAX_DIM_DTYPES = frozenset({D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16, D.ACL_INT32, D.ACL_INT64, D.ACL_BOOL})
ARG_DTYPES = FLOATS64 | INTEGERS
PROD_DTYPES = REAL_BOOL | COMPLEX
CUMSUM_DTYPES = FLOATS64 | INTEGERS | COMPLEX
CUMPROD_DTYPES = FLOATS64 | INTEGERS | _UNSIGNED_WIDE
TOPK_DTYPES = FLOATS64 | INTEGERS | _UNSIGNED_WIDE
SORT_DTYPES = FLOATS | INTEGERS | _UNSIGNED_WIDE | {D.ACL_BOOL}
SORT_VALUES_DTYPES = SORT_DTYPES | {D.ACL_DOUBLE}
ARGSORT_DTYPES = FLOATS | INTEGERS | _UNSIGNED_WIDE
VAR_DTYPES = FLOATS
INDEX_OUT = frozenset({D.ACL_INT32, D.ACL_INT64})
INT64_ONLY = frozenset({D.ACL_INT64})


# ----------------------------------------------------------------------------- rule helpers
def _reduce_dims(call: Call, name: str, rank: int) -> tuple[int, ...]:
    """Normalised reduction dims; an empty (or, where the param is optional, null) array means every dim."""
    arr = call.args[name]
    values = arr.values if isinstance(arr, AclIntArray) else ()
    if not values:
        return tuple(range(rank))
    return normalize_dims(values, rank, name)


def _no_empty_reduction(t: AclTensor, dims: Sequence[int], what: str) -> None:
    """Extrema have no identity: refuse a reduction over a zero-size dim (or over every dim of an empty tensor)."""
    if t.rank == 0:
        return
    if t.numel == 0 and any(t.shape[d] == 0 for d in dims):
        raise invalid(f"{what}: cannot reduce over a dimension of size 0 (self shape {list(t.shape)})")


def _scalar_out_shape(call: Call, name: str) -> tuple[int, ...]:
    """A whole-tensor result: CANN documents its shape as (1), torch gives 0-d; either is accepted."""
    o = call.args.get(name)
    if isinstance(o, AclTensor) and tuple(o.view_dims) == (1,):
        return (1,)
    return ()


def _check_castable(src: D, dst: D, what: str) -> None:
    if not can_cast(src, dst):
        raise invalid(f"{what}: {src.short} cannot be cast to {dst.short}")


def _no_empty_complex(t: AclTensor, dtype: D) -> None:
    if t.numel == 0 and dtype.is_complex:
        raise invalid(f"an empty self cannot produce a complex result ({dtype.short})")


def _dtype_arg(call: Call) -> D:
    return D(call.args["dtype"])


# ----------------------------------------------------------------------------- sample helpers
def _x(rng: np.random.Generator, shape: Sequence[int], dt: D, *, low: float = -4.0, high: float = 4.0) -> np.ndarray:
    return S.array(rng, shape, dt, low=low, high=high)


def _with_nan_inf(x: np.ndarray) -> np.ndarray:
    """A float array with NaN in its first element and +Inf in a later one (results stay defined: NaN / Inf)."""
    x = x.copy()
    flat = x.reshape(-1)
    if flat.size >= 6:
        flat[0] = np.nan
        flat[5] = np.inf
    return x


def _distinct(rng: np.random.Generator, shape: Sequence[int], dt: D) -> np.ndarray:
    """Values without ties (a permutation), so any correct sort gives the same indices."""
    n = int(np.prod(shape)) if shape else 1
    np_dtype = dt.numpy
    assert np_dtype is not None
    return rng.permutation(n).reshape(tuple(shape)).astype(np_dtype)


_REDUCE_CASES: tuple[tuple[tuple[int, ...], list[int], bool], ...] = (
    ((2, 3, 4), [1], False),
    ((2, 3, 4), [-1, 0], True),
    ((3, 5), [], False),
    ((), [], True),
    ((0, 3), [0], False),
    ((0, 3), [1], True),
)
"""(shape, dims, keepdim): one dim, negative dims with keepdim, every dim, 0-d, over an empty dim, empty result."""
_SHORT_CASES = (_REDUCE_CASES[1], _REDUCE_CASES[2])


# ----------------------------------------------------------------------------- softmax
def _softmax(name: str, min_rank: int) -> OpSpec:
    params = (tensor("self", SOFTMAX_DTYPES, min_rank=min_rank), int_attr("dim"), out("out", SOFTMAX_DTYPES))

    def infer(call: Call) -> Infos:
        t = tensor_arg(call, "self")
        call.plan["dim"] = normalize_dim(call.args["dim"], t.rank)
        return {"out": castable(t.shape, t.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16, D.ACL_DOUBLE):
            yield Sample({"self": _x(rng, (3, 7), dt), "dim": -1}, f"{dt.short} [3, 7] dim -1")
            yield Sample({"self": _x(rng, (2, 3, 4), dt), "dim": 1}, f"{dt.short} [2, 3, 4] dim 1")
        for dt in (D.ACL_FLOAT16, D.ACL_BF16):  # a row long enough that a 16-bit row sum is off by ulps
            yield Sample({"self": _x(rng, (2, 512), dt), "dim": -1}, f"{dt.short} [2, 512] dim -1 (long row)")
        special = np.array(
            [[-np.inf, 1.0, 2.0, -1.0], [np.nan, 0.0, 1.0, 2.0], [np.inf, 0.0, 1.0, 2.0], [80.0, 90.0, -90.0, 0.0]],
            np.float32,
        )
        yield Sample({"self": special, "dim": 1}, "float32 -Inf / NaN / +Inf / large rows")
        yield Sample({"self": _x(rng, (0, 4), D.ACL_FLOAT), "dim": 1}, "float32 empty")
        if min_rank == 0:
            yield Sample({"self": _x(rng, (), D.ACL_FLOAT), "dim": 0}, "float32 0-d")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        yield ErrorSample({"self": _x(rng, (2, 3), D.ACL_FLOAT), "dim": 2}, INVALID, "dim out of range")
        yield ErrorSample({"self": _x(rng, (2, 3), D.ACL_FLOAT), "dim": -3}, INVALID, "negative dim out of range")
        yield ErrorSample({"self": _x(rng, (2, 3), D.ACL_INT32), "dim": 1}, INVALID, "int32 self")
        yield ErrorSample(
            {"self": _x(rng, (2, 3), D.ACL_FLOAT), "dim": 1, "out": np.zeros((3, 2), np.float32)},
            INVALID,
            "out of the wrong shape",
        )

    return OpSpec(name, FAMILY, params, infer, samples=gen, error_samples=errors, summary=f"{name} along dim")


# ----------------------------------------------------------------------------- sum / mean / extrema over dims
def _reduce_sum() -> OpSpec:
    params = (
        tensor("self", SUM_DTYPES),
        int_array("dims"),
        bool_attr("keepDims"),
        dtype_attr("dtype", dtypes=SUM_DTYPES),
        out("out", SUM_DTYPES),
    )

    def infer(call: Call) -> Infos:
        t = tensor_arg(call, "self")
        dtype = _dtype_arg(call)
        dims = _reduce_dims(call, "dims", t.rank)
        _no_empty_complex(t, dtype)
        call.plan["dims"] = dims
        return {"out": same(reduced_shape(t.shape, dims, call.args["keepDims"]), dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for shape, dims, keep in _REDUCE_CASES:
            x = _x(rng, shape, D.ACL_FLOAT)
            args = {"dims": dims, "keepDims": keep, "dtype": int(D.ACL_FLOAT)}
            yield Sample({"self": x, **args}, f"float32 {list(shape)} dims {dims} keep={keep}")
        yield Sample(
            {"self": _with_nan_inf(_x(rng, (2, 3, 4), D.ACL_FLOAT)), "dims": [1], "keepDims": False, "dtype": 0},
            "float32 with NaN and +Inf",
        )
        pairs = (
            (D.ACL_FLOAT16, D.ACL_FLOAT16),
            (D.ACL_BF16, D.ACL_BF16),
            (D.ACL_DOUBLE, D.ACL_DOUBLE),
            (D.ACL_FLOAT, D.ACL_FLOAT16),
            (D.ACL_INT32, D.ACL_INT64),
            (D.ACL_INT8, D.ACL_INT8),
            (D.ACL_UINT8, D.ACL_INT32),
            (D.ACL_BOOL, D.ACL_INT64),
            (D.ACL_INT64, D.ACL_FLOAT),
            (D.ACL_COMPLEX64, D.ACL_COMPLEX64),
        )
        for src, dst in pairs:
            for shape, dims, keep in _SHORT_CASES:
                yield Sample(
                    {"self": _x(rng, shape, src), "dims": dims, "keepDims": keep, "dtype": int(dst)},
                    f"{src.short}→{dst.short} {list(shape)} dims {dims}",
                )
        for dt in (D.ACL_FLOAT16, D.ACL_BF16):  # long enough that a 16-bit accumulator is always caught
            x = _x(rng, (3, 1000), dt)
            yield Sample({"self": x, "dims": [1], "keepDims": False, "dtype": int(dt)}, f"{dt.short} [3, 1000] rows")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = _x(rng, (2, 3), D.ACL_FLOAT)
        base = {"self": x, "keepDims": False, "dtype": int(D.ACL_FLOAT)}
        yield ErrorSample({**base, "dims": [2]}, INVALID, "dim out of range")
        yield ErrorSample({**base, "dims": [0, -2]}, INVALID, "repeated dim")
        yield ErrorSample({**base, "dims": None}, NULLPTR, "null dims")
        yield ErrorSample({**base, "dims": [0], "out": np.zeros((3,), np.int32)}, INVALID, "out dtype differs")
        yield ErrorSample({**base, "dims": [0], "out": np.zeros((2,), np.float32)}, INVALID, "out of the wrong shape")
        yield ErrorSample(
            {**base, "self": _x(rng, (0, 3), D.ACL_FLOAT), "dims": [0], "dtype": int(D.ACL_COMPLEX64)},
            INVALID,
            "empty self with a complex result",
        )

    return OpSpec("ReduceSum", FAMILY, params, infer, samples=gen, error_samples=errors, summary="sum over dims")


def _mean() -> OpSpec:
    params = (
        tensor("self", MEAN_DTYPES),
        int_array("dim"),
        bool_attr("keepDim"),
        dtype_attr("dtype", dtypes=MEAN_DTYPES),
        out("out", MEAN_DTYPES),
    )

    def infer(call: Call) -> Infos:
        t = tensor_arg(call, "self")
        dtype = _dtype_arg(call)
        _check_castable(t.dtype, dtype, "self to dtype")
        dims = _reduce_dims(call, "dim", t.rank)
        _no_empty_complex(t, dtype)
        call.plan["dims"] = dims
        return {"out": castable(reduced_shape(t.shape, dims, call.args["keepDim"]), dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for shape, dims, keep in _REDUCE_CASES:
            x = _x(rng, shape, D.ACL_FLOAT)
            yield Sample(
                {"self": x, "dim": dims, "keepDim": keep, "dtype": int(D.ACL_FLOAT)},
                f"float32 {list(shape)} dims {dims} keep={keep}",
            )
        yield Sample(
            {"self": _with_nan_inf(_x(rng, (2, 3, 4), D.ACL_FLOAT)), "dim": [1], "keepDim": True, "dtype": 0},
            "float32 with NaN and +Inf",
        )
        pairs = (
            (D.ACL_FLOAT16, D.ACL_FLOAT16),
            (D.ACL_BF16, D.ACL_BF16),
            (D.ACL_DOUBLE, D.ACL_DOUBLE),
            (D.ACL_FLOAT16, D.ACL_FLOAT),
            (D.ACL_INT32, D.ACL_FLOAT),
            (D.ACL_UINT8, D.ACL_FLOAT16),
            (D.ACL_INT64, D.ACL_INT64),
            (D.ACL_COMPLEX64, D.ACL_COMPLEX64),
        )
        for src, dst in pairs:
            for shape, dims, keep in _SHORT_CASES:
                yield Sample(
                    {"self": _x(rng, shape, src), "dim": dims, "keepDim": keep, "dtype": int(dst)},
                    f"{src.short}→{dst.short} {list(shape)} dims {dims}",
                )

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        base = {"self": _x(rng, (2, 3), D.ACL_FLOAT), "keepDim": False, "dtype": int(D.ACL_FLOAT)}
        yield ErrorSample({**base, "dim": [-3]}, INVALID, "dim out of range")
        yield ErrorSample({**base, "dim": [1, 1]}, INVALID, "repeated dim")
        yield ErrorSample({**base, "dim": [0], "dtype": int(D.ACL_INT32)}, INVALID, "float self to int dtype")
        yield ErrorSample({**base, "dim": [0], "out": np.zeros((3,), np.int32)}, INVALID, "float result to int out")
        yield ErrorSample({**base, "self": _x(rng, (2, 3), D.ACL_BOOL), "dim": [0]}, INVALID, "bool self")

    return OpSpec("Mean", FAMILY, params, infer, samples=gen, error_samples=errors, summary="mean over dims")


_V2Sum = tuple[str, tuple[str, str, str, str, str], frozenset[D], tuple[D, ...], float]
"""(op, (input, dims, keep, noop, output) names, dtypes, sample dtypes beyond float32, the samples' low)."""
_V2_SUMS: tuple[_V2Sum, ...] = (
    (
        "MeanV2",
        ("self", "dim", "keepDim", "noopWithEmptyAxes", "out"),
        MEAN_DTYPES,
        (D.ACL_FLOAT16, D.ACL_BF16, D.ACL_DOUBLE, D.ACL_INT32, D.ACL_INT16, D.ACL_UINT8, D.ACL_INT64),
        -4.0,
    ),
    (
        "ReduceLogSum",
        ("data", "axes", "keepDims", "noopWithEmptyAxes", "reduce"),
        FLOATS,
        (D.ACL_FLOAT16, D.ACL_BF16),
        0.0,
    ),
)


def _v2_sum(
    name: str, names: tuple[str, str, str, str, str], dtypes: frozenset[D], extra: tuple[D, ...], low: float
) -> OpSpec:
    """A sum-like V2 reduction (MeanV2, ReduceLogSum): the result in the input's dtype, empty dims per ``noop``."""
    x_p, dim_p, keep_p, noop_p, out_p = names
    params = (tensor(x_p, dtypes), int_array(dim_p), bool_attr(keep_p), bool_attr(noop_p), out(out_p, dtypes))

    def infer(call: Call) -> Infos:
        t = tensor_arg(call, x_p)
        dims = _noop_dims(call, dim_p, noop_p, t.rank)
        _no_empty_complex(t, t.dtype)
        call.plan["dims"] = dims
        return {out_p: same(reduced_shape(t.shape, dims, call.args[keep_p]), t.dtype)}

    def sample(x: np.ndarray, dims: list[int], keep: bool, note: str, noop: bool = False) -> Sample:
        return Sample({x_p: x, dim_p: dims, keep_p: keep, noop_p: noop}, note)

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for shape, dims, keep in _REDUCE_CASES:
            x = _x(rng, shape, D.ACL_FLOAT, low=low)
            yield sample(x, dims, keep, f"float32 {list(shape)} dims {dims} keep={keep}")
        for noop_dims, keep in (([], False), ([1], True)):
            yield sample(_x(rng, (2, 3), D.ACL_FLOAT, low=low), noop_dims, keep, f"noop dims {noop_dims}", True)
        for dt in extra:
            shape, dims, keep = _SHORT_CASES[0]  # the kernel is ReduceSum's: one case a dtype
            yield sample(_x(rng, shape, dt, low=low), dims, keep, f"{dt.short} {list(shape)} dims {dims}")
        for dt in (D.ACL_FLOAT16, D.ACL_BF16):  # long rows: a 16-bit accumulator fails the class
            yield sample(_x(rng, (3, 1000), dt, low=low), [1], False, f"{dt.short} [3, 1000] rows")
        if low >= 0:
            x = _x(rng, (2, 4), D.ACL_FLOAT, low=low)
            x[0] = 0.0
            x[1, 1] = np.inf
            yield sample(x, [1], False, "float32 a zero row (-Inf) and +Inf")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        base = {x_p: _x(rng, (2, 3), D.ACL_FLOAT), keep_p: False, noop_p: False}
        yield ErrorSample({**base, dim_p: [2]}, INVALID, "dim out of range")
        yield ErrorSample({**base, dim_p: [0, -2]}, INVALID, "repeated dim")
        yield ErrorSample({**base, dim_p: None}, NULLPTR, "null dims")
        yield ErrorSample({**base, dim_p: [0], out_p: np.zeros((3,), np.float16)}, INVALID, "out dtype differs")
        yield ErrorSample({**base, dim_p: [0], out_p: np.zeros((2,), np.float32)}, INVALID, "out of the wrong shape")
        yield ErrorSample({**base, x_p: _x(rng, (2, 3), D.ACL_BOOL), dim_p: [0]}, INVALID, "bool input")
        if D.ACL_COMPLEX64 in dtypes:
            bad = {**base, x_p: _x(rng, (0, 3), D.ACL_COMPLEX64), dim_p: [0]}
            yield ErrorSample(bad, INVALID, "empty self, complex result")
        else:
            yield ErrorSample({**base, x_p: _x(rng, (2, 3), D.ACL_INT32), dim_p: [0]}, INVALID, "int32 input")

    return OpSpec(name, FAMILY, params, infer, samples=gen, error_samples=errors, summary=f"{name} over dims")


def _noop_dims(call: Call, name: str, noop: str | None, rank: int) -> tuple[int, ...]:
    """Reduction dims of a V2 reduction: with ``noop`` set, an empty array reduces nothing."""
    arr = call.args[name]
    if noop is not None and call.args[noop] and isinstance(arr, AclIntArray) and not arr.values:
        return ()
    return _reduce_dims(call, name, rank)


_V2_NAMES: dict[str, tuple[str, str, str | None]] = {
    "Amax": ("dim", "keepDim", None),
    "Amin": ("dim", "keepDim", None),
    "MaxV2": ("dims", "keepDims", "noopWithEmptyDims"),
}
"""(dims, keep, noop flag) parameter names of the over-dims extrema."""


def _amax_amin(name: str) -> OpSpec:
    dim_p, keep_p, noop = _V2_NAMES[name]
    params = (
        tensor("self", EXTREMA_DTYPES),
        int_array(dim_p),
        bool_attr(keep_p),
        *((bool_attr(noop),) if noop else ()),
        out("out", EXTREMA_DTYPES),
    )
    extra: dict[str, object] = {noop: False} if noop else {}

    def infer(call: Call) -> Infos:
        t = tensor_arg(call, "self")
        dims = _noop_dims(call, dim_p, noop, t.rank)
        _no_empty_reduction(t, dims, name)
        call.plan["dims"] = dims
        return {"out": same(reduced_shape(t.shape, dims, call.args[keep_p]), t.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for shape, dims, keep in _REDUCE_CASES:
            if shape == (0, 3) and dims == [0]:
                continue  # refused: no identity
            x = _x(rng, shape, D.ACL_FLOAT)
            yield Sample(
                {"self": x, dim_p: dims, keep_p: keep, **extra}, f"float32 {list(shape)} dims {dims} keep={keep}"
            )
        yield Sample(
            {"self": S.array(rng, (3, 8), D.ACL_FLOAT, special=True), dim_p: [1], keep_p: False, **extra},
            "float32 NaN / ±Inf / ±0 / extremes",
        )
        for dt in (D.ACL_FLOAT16, D.ACL_BF16, D.ACL_DOUBLE, D.ACL_INT8, D.ACL_UINT8, D.ACL_INT32, D.ACL_INT64):
            for shape, dims, keep in _SHORT_CASES if not noop else _SHORT_CASES[:1]:  # V2: Amax's rows
                yield Sample(
                    {"self": S.array(rng, shape, dt, special=True), dim_p: dims, keep_p: keep, **extra},
                    f"{dt.short} {list(shape)} dims {dims}",
                )
        yield Sample({"self": _x(rng, (4, 5), D.ACL_BOOL), dim_p: [0], keep_p: False, **extra}, "bool")
        if noop:
            x = _x(rng, (2, 3), D.ACL_FLOAT)
            yield Sample({"self": x, dim_p: [], keep_p: False, noop: True}, "float32 empty dims, noop: out = self")
            yield Sample(
                {"self": _x(rng, (2, 3), D.ACL_INT16), dim_p: [0], keep_p: True, noop: True}, "int16 noop, dim 0"
            )

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        base = {"self": _x(rng, (2, 3), D.ACL_FLOAT), keep_p: False, **extra}
        yield ErrorSample({**base, dim_p: [2]}, INVALID, "dim out of range")
        yield ErrorSample({**base, dim_p: [-1, 1]}, INVALID, "repeated dim")
        yield ErrorSample({**base, dim_p: [1], "out": np.zeros((2,), np.float16)}, INVALID, "out dtype differs")
        yield ErrorSample({**base, "self": _x(rng, (0, 3), D.ACL_FLOAT), dim_p: [0]}, INVALID, "reduce a size-0 dim")
        yield ErrorSample({**base, "self": _x(rng, (0, 3), D.ACL_FLOAT), dim_p: []}, INVALID, "reduce an empty tensor")

    return OpSpec(name, FAMILY, params, infer, samples=gen, error_samples=errors, summary=f"{name} over dims")


def _max(name: str) -> OpSpec:
    params = (tensor("self", EXTREMA_DTYPES), out("out", EXTREMA_DTYPES))

    def infer(call: Call) -> Infos:
        t = tensor_arg(call, "self")
        return {"out": listed(_scalar_out_shape(call, "out"), t.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16, D.ACL_DOUBLE, D.ACL_INT8, D.ACL_UINT8, D.ACL_INT64):
            yield Sample({"self": _x(rng, (3, 5), dt)}, f"{dt.short} [3, 5]")
        yield Sample({"self": S.array(rng, (2, 3, 4), D.ACL_FLOAT, special=True)}, "float32 with NaN")
        yield Sample({"self": np.array([-np.inf, 1.0, np.inf], np.float32)}, "float32 ±Inf")
        yield Sample({"self": _x(rng, (), D.ACL_INT32)}, "int32 0-d")
        yield Sample({"self": _x(rng, (6,), D.ACL_BOOL)}, "bool")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = _x(rng, (2, 3), D.ACL_FLOAT)
        yield ErrorSample({"self": x, "out": np.zeros((2,), np.float32)}, INVALID, "out of the wrong shape")
        yield ErrorSample({"self": x, "out": np.zeros((), np.complex64)}, INVALID, "complex out")

    summary = f"{name.lower()} of every element"
    return OpSpec(name, FAMILY, params, infer, samples=gen, error_samples=errors, summary=summary)


# ----------------------------------------------------------------------------- one-dim extrema and arg-extrema
def _dim_cases(rng: np.random.Generator, dt: D, *, zero_d: bool) -> Iterable[Sample]:
    yield Sample({"self": S.array(rng, (3, 5), dt, special=dt.is_float), "dim": 1, "keepdim": False}, f"{dt.short}")
    yield Sample({"self": _x(rng, (2, 3, 4), dt, low=-2, high=2), "dim": -3, "keepdim": True}, f"{dt.short} ties")
    if zero_d:
        yield Sample({"self": _x(rng, (), dt), "dim": 0, "keepdim": False}, f"{dt.short} 0-d")
    yield Sample({"self": _x(rng, (0, 4), dt), "dim": 1, "keepdim": True}, f"{dt.short} empty")


def _dim_errors(rng: np.random.Generator, out_name: str, extra: Mapping[str, object]) -> Iterable[ErrorSample]:
    x = _x(rng, (2, 3), D.ACL_FLOAT)
    yield ErrorSample({"self": x, "dim": 2, "keepdim": False, **extra}, INVALID, "dim out of range")
    yield ErrorSample({"self": x, "dim": -3, "keepdim": False, **extra}, INVALID, "negative dim out of range")
    yield ErrorSample(
        {"self": _x(rng, (3, 0), D.ACL_FLOAT), "dim": 1, "keepdim": False, **extra}, INVALID, "reduce a size-0 dim"
    )
    yield ErrorSample(
        {"self": x, "dim": 1, "keepdim": False, out_name: np.zeros((2,), np.float32), **extra},
        INVALID,
        f"float {out_name}",
    )


def _max_dim(name: str) -> OpSpec:
    params = (
        tensor("self", MAX_DIM_DTYPES, min_rank=1),
        int_attr("dim"),
        bool_attr("keepdim"),
        out("out", MAX_DIM_DTYPES),
        out("indices", INDEX_OUT),
    )

    def infer(call: Call) -> Infos:
        t = tensor_arg(call, "self")
        dim = normalize_dim(call.args["dim"], t.rank)
        _no_empty_reduction(t, (dim,), name)
        call.plan["dim"] = dim
        shape = reduced_shape(t.shape, (dim,), call.args["keepdim"])
        return {"out": same(shape, t.dtype), "indices": listed(shape, D.ACL_INT64)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16, D.ACL_INT32, D.ACL_INT64):
            yield from _dim_cases(rng, dt, zero_d=False)
        yield Sample({"self": _x(rng, (4, 3), D.ACL_BOOL), "dim": 0, "keepdim": False}, "bool")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        yield from _dim_errors(rng, "indices", {})
        yield ErrorSample({"self": _x(rng, (), D.ACL_FLOAT), "dim": 0, "keepdim": False}, INVALID, "0-d self")

    summary = f"{name[:3].lower()} along dim with indices"
    return OpSpec(name, FAMILY, params, infer, samples=gen, error_samples=errors, summary=summary)


def _arg_extremum(name: str) -> OpSpec:
    params = (tensor("self", ARG_DTYPES), int_attr("dim"), bool_attr("keepdim"), out("out", INDEX_OUT))

    def infer(call: Call) -> Infos:
        t = tensor_arg(call, "self")
        dim = normalize_dim(call.args["dim"], t.rank)
        _no_empty_reduction(t, (dim,), name)
        call.plan["dim"] = dim
        return {"out": listed(reduced_shape(t.shape, (dim,), call.args["keepdim"]), D.ACL_INT64)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16, D.ACL_DOUBLE, D.ACL_INT8, D.ACL_UINT8, D.ACL_INT64):
            yield from _dim_cases(rng, dt, zero_d=dt == D.ACL_FLOAT)

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        yield from _dim_errors(rng, "out", {})
        yield ErrorSample({"self": _x(rng, (2, 3), D.ACL_BOOL), "dim": 0, "keepdim": False}, INVALID, "bool self")

    return OpSpec(name, FAMILY, params, infer, samples=gen, error_samples=errors, summary=f"{name} along dim")


# ----------------------------------------------------------------------------- products and scans
def _prod() -> OpSpec:
    params = (tensor("self", PROD_DTYPES), dtype_attr("dtype", dtypes=PROD_DTYPES), out("out", PROD_DTYPES))

    def infer(call: Call) -> Infos:
        t = tensor_arg(call, "self")
        dtype = _dtype_arg(call)
        _check_castable(t.dtype, dtype, "self to dtype")
        _no_empty_complex(t, dtype)
        return {"out": same(_scalar_out_shape(call, "out"), dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        pairs = (
            (D.ACL_FLOAT, D.ACL_FLOAT),
            (D.ACL_FLOAT16, D.ACL_FLOAT16),
            (D.ACL_BF16, D.ACL_FLOAT),
            (D.ACL_DOUBLE, D.ACL_DOUBLE),
            (D.ACL_INT32, D.ACL_INT64),
            (D.ACL_INT8, D.ACL_INT8),
            (D.ACL_BOOL, D.ACL_BOOL),
            (D.ACL_COMPLEX64, D.ACL_COMPLEX64),
        )
        for src, dst in pairs:
            yield Sample({"self": _x(rng, (2, 5), src, low=-2, high=2), "dtype": int(dst)}, f"{src.short}→{dst.short}")
        yield Sample({"self": _x(rng, (0, 3), D.ACL_FLOAT), "dtype": 0}, "float32 empty (1)")
        yield Sample({"self": _x(rng, (), D.ACL_INT64), "dtype": int(D.ACL_INT64)}, "int64 0-d")
        yield Sample({"self": np.array([2.0, np.inf, 0.5], np.float32), "dtype": 0}, "float32 with +Inf")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = _x(rng, (2, 3), D.ACL_FLOAT)
        yield ErrorSample({"self": x, "dtype": int(D.ACL_INT32)}, INVALID, "float self to int dtype")
        yield ErrorSample({"self": x, "dtype": 0, "out": np.zeros((), np.float16)}, INVALID, "out dtype differs")
        yield ErrorSample({"self": x, "dtype": 0, "out": np.zeros((2,), np.float32)}, INVALID, "out of wrong shape")

    return OpSpec("Prod", FAMILY, params, infer, samples=gen, error_samples=errors, summary="product of every element")


def _prod_dim() -> OpSpec:
    params = (
        tensor("self", PROD_DTYPES),
        int_attr("dim"),
        bool_attr("keepDim"),
        dtype_attr("dtype", dtypes=PROD_DTYPES),
        out("out", PROD_DTYPES),
    )

    def infer(call: Call) -> Infos:
        t = tensor_arg(call, "self")
        dtype = _dtype_arg(call)
        _check_castable(t.dtype, dtype, "self to dtype")
        dim = normalize_dim(call.args["dim"], t.rank)
        _no_empty_complex(t, dtype)
        call.plan["dims"] = (dim,)
        return {"out": same(reduced_shape(t.shape, (dim,), call.args["keepDim"]), dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        pairs = (
            (D.ACL_FLOAT, D.ACL_FLOAT),
            (D.ACL_FLOAT16, D.ACL_FLOAT16),
            (D.ACL_BF16, D.ACL_BF16),
            (D.ACL_INT32, D.ACL_INT32),
            (D.ACL_UINT8, D.ACL_INT64),
            (D.ACL_BOOL, D.ACL_INT64),
        )
        for src, dst in pairs:
            x = _x(rng, (2, 3, 4), src, low=-2, high=2)
            yield Sample({"self": x, "dim": -1, "keepDim": False, "dtype": int(dst)}, f"{src.short}→{dst.short} dim -1")
            yield Sample({"self": x, "dim": 1, "keepDim": True, "dtype": int(dst)}, f"{src.short}→{dst.short} keep")
        yield Sample({"self": _x(rng, (3, 0), D.ACL_FLOAT), "dim": 1, "keepDim": False, "dtype": 0}, "empty dim (1)")
        yield Sample({"self": _x(rng, (), D.ACL_FLOAT), "dim": 0, "keepDim": False, "dtype": 0}, "float32 0-d")
        special = _with_nan_inf(_x(rng, (2, 3, 4), D.ACL_FLOAT, low=0.5, high=2))
        yield Sample({"self": special, "dim": 1, "keepDim": False, "dtype": 0}, "float32 with NaN and +Inf")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        base = {"self": _x(rng, (2, 3), D.ACL_FLOAT), "keepDim": False, "dtype": 0}
        yield ErrorSample({**base, "dim": 2}, INVALID, "dim out of range")
        yield ErrorSample({**base, "dim": 0, "dtype": int(D.ACL_INT64)}, INVALID, "float self to int dtype")
        yield ErrorSample({**base, "dim": 0, "out": np.zeros((3,), np.float64)}, INVALID, "out dtype differs")

    return OpSpec("ProdDim", FAMILY, params, infer, samples=gen, error_samples=errors, summary="product along dim")


def _cumsum() -> OpSpec:
    params = (
        tensor("self", CUMSUM_DTYPES),
        int_attr("dim"),
        dtype_attr("dtype", dtypes=CUMSUM_DTYPES),
        out("out", CUMSUM_DTYPES),
    )

    def infer(call: Call) -> Infos:
        t = tensor_arg(call, "self")
        dtype = _dtype_arg(call)
        _check_castable(t.dtype, dtype, "self to dtype")
        call.plan["dim"] = normalize_dim(call.args["dim"], t.rank)
        return {"out": same(t.shape, dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        pairs = (
            (D.ACL_FLOAT, D.ACL_FLOAT),
            (D.ACL_FLOAT16, D.ACL_FLOAT16),
            (D.ACL_BF16, D.ACL_BF16),
            (D.ACL_FLOAT16, D.ACL_FLOAT),
            (D.ACL_DOUBLE, D.ACL_DOUBLE),
            (D.ACL_INT32, D.ACL_INT64),
            (D.ACL_INT8, D.ACL_INT8),
            (D.ACL_UINT8, D.ACL_UINT8),
            (D.ACL_COMPLEX64, D.ACL_COMPLEX64),
        )
        for src, dst in pairs:
            x = _x(rng, (2, 3, 4), src)
            yield Sample({"self": x, "dim": 1, "dtype": int(dst)}, f"{src.short}→{dst.short} dim 1")
            yield Sample({"self": x, "dim": -1, "dtype": int(dst)}, f"{src.short}→{dst.short} dim -1")
        yield Sample({"self": _with_nan_inf(_x(rng, (2, 8), D.ACL_FLOAT)), "dim": 1, "dtype": 0}, "NaN and +Inf")
        yield Sample({"self": _x(rng, (), D.ACL_FLOAT), "dim": -1, "dtype": 0}, "float32 0-d")
        yield Sample({"self": _x(rng, (0, 3), D.ACL_INT32), "dim": 0, "dtype": int(D.ACL_INT32)}, "int32 empty")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = _x(rng, (2, 3), D.ACL_FLOAT)
        yield ErrorSample({"self": x, "dim": 2, "dtype": 0}, INVALID, "dim out of range")
        yield ErrorSample({"self": _x(rng, (), D.ACL_FLOAT), "dim": 1, "dtype": 0}, INVALID, "0-d dim out of [-1, 0]")
        yield ErrorSample({"self": x, "dim": 0, "dtype": int(D.ACL_INT32)}, INVALID, "float self to int dtype")
        yield ErrorSample(
            {"self": x, "dim": 0, "dtype": 0, "out": np.zeros((2, 3), np.float16)}, INVALID, "out dtype differs"
        )

    return OpSpec("Cumsum", FAMILY, params, infer, samples=gen, error_samples=errors, summary="inclusive prefix sum")


def _cumprod_dtype(call: Call, t: AclTensor) -> D:
    """Cumprod's compute dtype: ``dtype``, or input's where it is ACL_DT_UNDEFINED (or absent: the in-place twin)."""
    raw = call.args.get("dtype")
    dtype = t.dtype if raw is None or D(raw) == D.ACL_DT_UNDEFINED else D(raw)
    _check_castable(t.dtype, dtype, "input to dtype")
    return dtype


def _scalar_dim(call: Call, rank: int) -> int:
    s = call.args["dim"]
    value = s.value if isinstance(s, AclScalar) else s
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise invalid(f"dim must be an integer scalar, not {value!r}")
    return normalize_dim(int(value), rank)


def _cumprod_samples(inplace: bool) -> Callable[[np.random.Generator], Iterable[Sample]]:
    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        undefined = D.ACL_DT_UNDEFINED
        pairs = (
            (D.ACL_FLOAT, undefined),
            (D.ACL_FLOAT16, D.ACL_FLOAT16),
            (D.ACL_BF16, D.ACL_BF16),
            (D.ACL_FLOAT16, D.ACL_FLOAT),
            (D.ACL_DOUBLE, D.ACL_DOUBLE),
            (D.ACL_INT32, D.ACL_INT64),
            (D.ACL_INT8, D.ACL_INT8),
            (D.ACL_INT16, undefined),
            (D.ACL_UINT8, D.ACL_UINT8),
            (D.ACL_UINT16, D.ACL_UINT16),
            (D.ACL_UINT32, D.ACL_UINT32),
            (D.ACL_UINT64, D.ACL_UINT64),
        )
        for src, dst in pairs:
            if inplace and dst not in (D.ACL_DT_UNDEFINED, src):
                continue
            x = _x(rng, (2, 3, 4), src, low=-2, high=2)
            extra = {} if inplace else {"dtype": int(dst)}
            # the scan's stride across rows (dim 1) for every pair; the unit-stride last dim for float ones
            yield Sample({"input": x, "dim": 1, **extra}, f"{src.short}→{dst.short} dim 1")
            if src.is_float:
                yield Sample({"input": x, "dim": -1, **extra}, f"{src.short}→{dst.short} dim -1")
        extra = {} if inplace else {"dtype": int(D.ACL_DT_UNDEFINED)}
        x = _with_nan_inf(_x(rng, (2, 8), D.ACL_FLOAT, low=0.5, high=1.5))
        x[1, 2] = 0.0
        yield Sample({"input": x, "dim": 1, **extra}, "NaN, +Inf and a zero")
        yield Sample({"input": _x(rng, (3, 40), D.ACL_FLOAT, low=0.9, high=1.1), "dim": 1, **extra}, "long rows")
        yield Sample({"input": _x(rng, (), D.ACL_FLOAT), "dim": 0, **extra}, "float32 0-d")
        if not inplace:
            yield Sample({"input": _x(rng, (0, 3), D.ACL_INT32), "dim": 0, **extra}, "int32 empty")

    return gen


def _cumprod() -> OpSpec:
    params = (
        tensor("input", CUMPROD_DTYPES),
        scalar("dim", INTEGERS),
        dtype_attr("dtype", dtypes=CUMPROD_DTYPES | {D.ACL_DT_UNDEFINED}, c_type="const aclDataType"),
        out("out", CUMPROD_DTYPES),
    )

    def infer(call: Call) -> Infos:
        t = tensor_arg(call, "input")
        dtype = _cumprod_dtype(call, t)
        call.plan["dim"] = _scalar_dim(call, t.rank)
        return {"out": same(t.shape, dtype)}

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = _x(rng, (2, 3), D.ACL_FLOAT)
        undefined = int(D.ACL_DT_UNDEFINED)
        yield ErrorSample({"input": x, "dim": 2, "dtype": undefined}, INVALID, "dim out of range")
        yield ErrorSample({"input": x, "dim": 1.5, "dtype": undefined}, INVALID, "a float dim")
        yield ErrorSample({"input": x, "dim": 0, "dtype": int(D.ACL_INT32)}, INVALID, "float input to int dtype")
        yield ErrorSample({"input": _x(rng, (2, 3), D.ACL_BOOL), "dim": 0, "dtype": undefined}, INVALID, "bool input")
        yield ErrorSample(
            {"input": x, "dim": 0, "dtype": undefined, "out": np.zeros((2, 3), np.float16)},
            INVALID,
            "out dtype differs",
        )

    return OpSpec(
        "Cumprod",
        FAMILY,
        params,
        infer,
        samples=_cumprod_samples(False),
        error_samples=errors,
        summary="prefix product",
    )


def _inplace_cumprod(base: OpSpec) -> OpSpec:
    """aclnnInplaceCumprod: input = cumprod(input, dim) in input's dtype; an empty input is refused (its page)."""
    params = (ref("input", CUMPROD_DTYPES), scalar("dim", INTEGERS))

    def to_base(args: Mapping[str, object]) -> dict[str, object]:
        return {"input": args["input"], "dim": args["dim"], "dtype": D.ACL_DT_UNDEFINED, "out": args["input"]}

    def infer(call: Call) -> Infos:
        t = tensor_arg(call, "input")
        if t.numel == 0:
            raise invalid("InplaceCumprod does not take an empty input")
        call.plan["dim"] = _scalar_dim(call, t.rank)
        return {"input": same(t.shape, t.dtype)}

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        yield ErrorSample({"input": _x(rng, (2, 3), D.ACL_FLOAT), "dim": -3}, INVALID, "dim out of range")
        yield ErrorSample({"input": _x(rng, (0, 3), D.ACL_FLOAT), "dim": 0}, INVALID, "empty input")

    return OpSpec(
        "InplaceCumprod",
        FAMILY,
        params,
        infer,
        alias_ok=True,
        samples=_cumprod_samples(True),
        error_samples=errors,
        base=base.name,
        base_args=to_base,
        summary="prefix product in place",
    )


def _cum_extremum(name: str) -> OpSpec:
    params = (
        tensor("self", EXTREMA_DTYPES),
        int_attr("dim"),
        out("valuesOut", EXTREMA_DTYPES),
        out("indicesOut", INDEX_OUT),
    )

    def infer(call: Call) -> Infos:
        t = tensor_arg(call, "self")
        call.plan["dim"] = normalize_dim(call.args["dim"], t.rank)
        return {"valuesOut": same(t.shape, t.dtype), "indicesOut": listed(t.shape, D.ACL_INT64)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16, D.ACL_DOUBLE, D.ACL_INT8, D.ACL_UINT8, D.ACL_INT16):
            yield Sample({"self": S.array(rng, (3, 7), dt, special=dt.is_float), "dim": 1}, f"{dt.short} dim 1")
        for dt in (D.ACL_INT32, D.ACL_INT64, D.ACL_FLOAT):
            yield Sample({"self": _x(rng, (5, 2, 3), dt, low=-2, high=2), "dim": -3}, f"{dt.short} ties dim -3")
        yield Sample({"self": _x(rng, (4, 6), D.ACL_BOOL), "dim": 1}, "bool")
        nan = np.array([[1.0, np.nan, 5.0, np.nan, -np.inf, 2.0]], np.float32)
        yield Sample({"self": nan, "dim": 1}, "float32 NaN sticks, a later NaN moves the index")
        yield Sample({"self": _x(rng, (), D.ACL_FLOAT), "dim": -1}, "float32 0-d")
        yield Sample({"self": _x(rng, (0, 3), D.ACL_FLOAT), "dim": 0}, "float32 empty")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = _x(rng, (2, 3), D.ACL_FLOAT)
        yield ErrorSample({"self": x, "dim": 2}, INVALID, "dim out of range")
        yield ErrorSample({"self": _x(rng, (), D.ACL_FLOAT), "dim": 1}, INVALID, "0-d dim out of [-1, 0]")
        yield ErrorSample({"self": x, "dim": 0, "indicesOut": np.zeros((2, 3), np.float32)}, INVALID, "float indices")
        yield ErrorSample({"self": x, "dim": 0, "valuesOut": np.zeros((2, 3), np.float16)}, INVALID, "values dtype")
        yield ErrorSample({"self": x, "dim": 0, "valuesOut": np.zeros((3, 2), np.float32)}, INVALID, "values shape")

    return OpSpec(
        name, FAMILY, params, infer, samples=gen, error_samples=errors, summary=f"running {name[3:]} with indices"
    )


# ----------------------------------------------------------------------------- top-k and sorting
def _topk() -> OpSpec:
    params = (
        tensor("self", TOPK_DTYPES, min_rank=1),
        int_attr("k"),
        int_attr("dim"),
        bool_attr("largest"),
        bool_attr("sorted"),
        out("valuesOut", TOPK_DTYPES),
        out("indicesOut", INT64_ONLY),
    )

    def infer(call: Call) -> Infos:
        t = tensor_arg(call, "self")
        dim = normalize_dim(call.args["dim"], t.rank)
        k = call.args["k"]
        if not 0 <= k <= t.shape[dim]:
            raise invalid(f"k={k} is outside [0, {t.shape[dim]}] (self.size({dim}))")
        call.plan["dim"] = dim
        shape = tuple(k if i == dim else d for i, d in enumerate(t.shape))
        return {"valuesOut": same(shape, t.dtype), "indicesOut": same(shape, D.ACL_INT64)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16, D.ACL_DOUBLE, D.ACL_INT32, D.ACL_UINT8, D.ACL_INT64):
            x = S.array(rng, (3, 7), dt, special=dt.is_float)
            yield Sample({"self": x, "k": 3, "dim": -1, "largest": True, "sorted": True}, f"{dt.short} largest")
            ties = _x(rng, (5, 4), dt, low=0, high=3)
            args = {"self": ties, "k": 2, "dim": 0, "largest": False, "sorted": True}
            yield Sample(args, f"{dt.short} ties smallest")
        yield Sample({"self": _x(rng, (6,), D.ACL_FLOAT), "k": 6, "dim": 0, "largest": True, "sorted": True}, "k = n")
        yield Sample({"self": _x(rng, (2, 5), D.ACL_FLOAT), "k": 0, "dim": 1, "largest": True, "sorted": True}, "k = 0")
        yield Sample(
            {"self": _x(rng, (0, 5), D.ACL_FLOAT), "k": 2, "dim": 1, "largest": True, "sorted": True}, "empty rows"
        )
        yield Sample(
            {"self": _x(rng, (4, 4), D.ACL_UINT32, low=0, high=9), "k": 2, "dim": 1, "largest": True, "sorted": True},
            "uint32",
        )

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        base = {"self": _x(rng, (2, 5), D.ACL_FLOAT), "largest": True, "sorted": True}
        yield ErrorSample({**base, "k": 6, "dim": 1}, INVALID, "k larger than the dim")
        yield ErrorSample({**base, "k": -1, "dim": 1}, INVALID, "negative k")
        yield ErrorSample({**base, "k": 1, "dim": 2}, INVALID, "dim out of range")
        yield ErrorSample(
            {**base, "k": 2, "dim": 1, "indicesOut": np.zeros((2, 2), np.int32)}, INVALID, "int32 indicesOut"
        )
        yield ErrorSample(
            {**base, "k": 2, "dim": 1, "valuesOut": np.zeros((2, 3), np.float32)}, INVALID, "valuesOut of wrong shape"
        )
        yield ErrorSample({**base, "self": _x(rng, (), D.ACL_FLOAT), "k": 1, "dim": 0}, INVALID, "0-d self")

    return OpSpec("Topk", FAMILY, params, infer, samples=gen, error_samples=errors, summary="k extreme values")


def _sort() -> OpSpec:
    params = (
        tensor("self", SORT_DTYPES, min_rank=1),
        bool_attr("stable"),
        int_attr("dim"),
        bool_attr("descending"),
        out("valuesOut", SORT_VALUES_DTYPES),
        out("indicesOut", INT64_ONLY),
    )

    def infer(call: Call) -> Infos:
        t = tensor_arg(call, "self")
        call.plan["dim"] = normalize_dim(call.args["dim"], t.rank)
        return {"valuesOut": same(t.shape, t.dtype), "indicesOut": same(t.shape, D.ACL_INT64)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16, D.ACL_INT8, D.ACL_INT32, D.ACL_INT64, D.ACL_UINT8):
            x = S.array(rng, (3, 9), dt, special=dt.is_float)
            yield Sample({"self": x, "stable": True, "dim": -1, "descending": False}, f"{dt.short} ascending")
            ties = _x(rng, (6, 3), dt, low=0, high=3)
            yield Sample({"self": ties, "stable": True, "dim": 0, "descending": True}, f"{dt.short} ties descending")
        yield Sample({"self": _x(rng, (9,), D.ACL_BOOL), "stable": True, "dim": 0, "descending": True}, "bool")
        yield Sample(
            {"self": _distinct(rng, (4, 6), D.ACL_FLOAT), "stable": False, "dim": 1, "descending": False},
            "unstable, no ties",
        )
        yield Sample({"self": _x(rng, (0, 4), D.ACL_FLOAT), "stable": True, "dim": 1, "descending": False}, "empty")
        yield Sample(
            {"self": _x(rng, (3, 4), D.ACL_UINT64, low=0, high=5), "stable": True, "dim": 1, "descending": True},
            "uint64",
        )

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        base = {"self": _x(rng, (2, 5), D.ACL_FLOAT), "stable": True, "descending": False}
        yield ErrorSample({**base, "dim": 2}, INVALID, "dim out of range")
        yield ErrorSample({**base, "dim": -3}, INVALID, "negative dim out of range")
        yield ErrorSample({**base, "self": _x(rng, (), D.ACL_FLOAT), "dim": 0}, INVALID, "0-d self")
        yield ErrorSample({**base, "self": _x(rng, (4,), D.ACL_DOUBLE), "dim": 0}, INVALID, "float64 self")
        yield ErrorSample({**base, "dim": 1, "valuesOut": np.zeros((2, 5), np.float16)}, INVALID, "valuesOut dtype")
        yield ErrorSample({**base, "dim": 1, "indicesOut": np.zeros((2, 5), np.int32)}, INVALID, "int32 indicesOut")

    return OpSpec("Sort", FAMILY, params, infer, samples=gen, error_samples=errors, summary="sort along dim")


def _argsort() -> OpSpec:
    params = (tensor("self", ARGSORT_DTYPES), int_attr("dim"), bool_attr("descending"), out("out", INT64_ONLY))

    def infer(call: Call) -> Infos:
        t = tensor_arg(call, "self")
        call.plan["dim"] = normalize_dim(call.args["dim"], t.rank)
        return {"out": same(t.shape, D.ACL_INT64)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16, D.ACL_INT16, D.ACL_INT64, D.ACL_UINT8):
            x = S.array(rng, (4, 6), dt, special=dt.is_float)
            yield Sample({"self": x, "dim": 1, "descending": True}, f"{dt.short} descending")
            ties = _x(rng, (2, 5, 3), dt, low=0, high=2)
            yield Sample({"self": ties, "dim": -2, "descending": False}, f"{dt.short} ties ascending")
        yield Sample({"self": _x(rng, (), D.ACL_FLOAT), "dim": 0, "descending": False}, "0-d")
        yield Sample({"self": _x(rng, (3, 0), D.ACL_INT32), "dim": 1, "descending": False}, "empty")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = _x(rng, (2, 5), D.ACL_FLOAT)
        yield ErrorSample({"self": x, "dim": 2, "descending": False}, INVALID, "dim out of range")
        yield ErrorSample({"self": _x(rng, (5,), D.ACL_BOOL), "dim": 0, "descending": False}, INVALID, "bool self")
        yield ErrorSample(
            {"self": x, "dim": 0, "descending": False, "out": np.zeros((2, 5), np.int32)}, INVALID, "int32 out"
        )

    return OpSpec("Argsort", FAMILY, params, infer, samples=gen, error_samples=errors, summary="sorting permutation")


# ----------------------------------------------------------------------------- variance and standard deviation
_VarSpecKind = tuple[str, str, tuple[str, ...]]
"""(op name, correction parameter: 'unbiased' or 'correction', output names)."""
_VAR_OPS: tuple[_VarSpecKind, ...] = (
    ("Var", "unbiased", ("out",)),
    ("VarCorrection", "correction", ("out",)),
    ("VarMean", "correction", ("varOut", "meanOut")),
    ("Std", "correction", ("out",)),
    ("StdMeanCorrection", "correction", ("stdOut", "meanOut")),
)


def _var_family(name: str, corr: str, outs: tuple[str, ...]) -> OpSpec:
    corr_param: Param = bool_attr("unbiased") if corr == "unbiased" else int_attr("correction")
    params = (
        tensor("self", VAR_DTYPES),
        int_array("dim", optional=True),
        corr_param,
        bool_attr("keepdim"),
        *(out(o, VAR_DTYPES) for o in outs),
    )

    def infer(call: Call) -> Infos:
        t = tensor_arg(call, "self")
        dims = _reduce_dims(call, "dim", t.rank)
        call.plan["dims"] = dims
        call.plan["correction"] = int(call.args[corr])
        shape = reduced_shape(t.shape, dims, call.args["keepdim"])
        return {o: castable(shape, t.dtype) for o in outs}

    def corr_value(c: int) -> object:
        return bool(c) if corr == "unbiased" else c

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        cases: tuple[tuple[tuple[int, ...], list[int] | None, int, bool], ...] = (
            ((2, 3, 4), [1], 1, True),
            ((2, 3, 4), [-1, 0], 0, False),
            ((3, 5), None, 1, False),
            ((3, 5), [], 0, True),
        )
        for dt in (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16):
            for shape, dims, c, keep in cases:
                yield Sample(
                    {"self": _x(rng, shape, dt), "dim": dims, corr: corr_value(c), "keepdim": keep},
                    f"{dt.short} {list(shape)} dims {dims} {corr}={c} keep={keep}",
                )
        for dt in (D.ACL_FLOAT16, D.ACL_BF16):
            # rows long enough that a 16-bit accumulator fails the class at every seed, not by luck
            yield Sample(
                {"self": _x(rng, (4, 2048), dt, low=0.0), "dim": [1], corr: corr_value(1), "keepdim": False},
                f"{dt.short} [4, 2048] dims [1] long rows",
            )
        f32 = D.ACL_FLOAT
        yield Sample(
            {"self": _with_nan_inf(_x(rng, (2, 3, 4), f32)), "dim": [2], corr: corr_value(1), "keepdim": False},
            "float32 with NaN and +Inf",
        )
        yield Sample({"self": _x(rng, (1, 4), f32), "dim": [0], corr: corr_value(1), "keepdim": False}, "N = 1 (NaN)")
        yield Sample({"self": _x(rng, (0, 3), f32), "dim": [0], corr: corr_value(1), "keepdim": True}, "empty (NaN)")
        yield Sample({"self": _x(rng, (), f32), "dim": None, corr: corr_value(0), "keepdim": False}, "0-d")
        if corr == "correction":
            yield Sample({"self": _x(rng, (2, 3), f32), "dim": [1], "correction": 3, "keepdim": False}, "N ≤ c (Inf)")
            yield Sample({"self": _x(rng, (2, 6), f32), "dim": [1], "correction": 4, "keepdim": False}, "large c")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        base = {"self": _x(rng, (2, 3), D.ACL_FLOAT), corr: corr_value(1), "keepdim": False}
        yield ErrorSample({**base, "dim": [2]}, INVALID, "dim out of range")
        yield ErrorSample({**base, "dim": [0, -2]}, INVALID, "repeated dim")
        yield ErrorSample({**base, "self": _x(rng, (2, 3), D.ACL_INT32), "dim": [0]}, INVALID, "int32 self")
        yield ErrorSample({**base, "dim": [0], outs[0]: np.zeros((2,), np.float32)}, INVALID, "out of the wrong shape")

    return OpSpec(name, FAMILY, params, infer, samples=gen, error_samples=errors, summary=f"{name} over dims")


def _log_sum_scale(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> dict[str, Any]:
    """``S = 1 + |y|``: the log turns the sum's relative error into an absolute one, and rounds once."""
    y = np.abs(np.asarray(outputs["reduce"]).astype(np.float64))
    return {"reduce": 1.0 + y}


_ORDER_FREE = exact("selection: the result is one of the inputs; ±0 tie unspecified", signed_zero=False)
ACCURACY: dict[str, Accuracy] = {
    **{op: reduction() for op in ("ReduceSum", "Mean", "MeanV2", "Prod", "ProdDim")},
    "Cumsum": reduction(length_of=dim_length()),
    # a product's rounding is relative: the suite's M (the op on |input|) is Π|x|, the γ_n·Π|x| bound
    **{op: reduction(length_of=dim_length("input")) for op in ("Cumprod", "InplaceCumprod")},
    **{
        op: _ORDER_FREE
        for op in (
            "Amax",
            "Amin",
            "MaxV2",
            "Max",
            "Min",
            "MaxDim",
            "MinDim",
            "ArgMax",
            "ArgMin",
            "Topk",
            "Sort",
            "Cummax",
            "Cummin",
            "Argsort",
        )
    },
    # the row sum, then a log: the sum's relative error γ_n becomes an absolute one (positive terms)
    "ReduceLogSum": composite(steps=2, scale_of=_log_sum_scale, reason="log of a row sum in at least float32"),
    # x - max, exp (2 ulp), the row sum, the division (Softmax) or the log and a subtraction (LogSoftmax)
    "Softmax": composite(steps=4, length_of=dim_length(), scale_of=softmax_scale(log=False)),
    "LogSoftmax": composite(steps=4, length_of=dim_length(), scale_of=softmax_scale(log=True)),
    # the mean (a sum and a division), x - mean, the square, the row sum, / (N - c), and the root
    **{
        op: composite(
            steps=6,
            scale_of=variance_scale(root=op.startswith("Std"), correction="unbiased" if op == "Var" else "correction"),
            reason="a row variance in at least float32: γ_n·Σx²/(N-c), squares overflowing the accumulator uncompared",
        )
        for op, _, _ in _VAR_OPS
    },
}
"""Accuracy classes (no family default)."""

SPECS: list[OpSpec] = [
    _softmax("Softmax", 0),
    _softmax("LogSoftmax", 1),
    _reduce_sum(),
    _mean(),
    *(_v2_sum(*row) for row in _V2_SUMS),
    _amax_amin("Amax"),
    _amax_amin("Amin"),
    _amax_amin("MaxV2"),
    _max("Max"),
    _max("Min"),
    _max_dim("MaxDim"),
    _max_dim("MinDim"),
    _arg_extremum("ArgMax"),
    _arg_extremum("ArgMin"),
    _prod(),
    _prod_dim(),
    _cumsum(),
    _cumprod(),
    _cum_extremum("Cummax"),
    _cum_extremum("Cummin"),
    _topk(),
    _sort(),
    _argsort(),
    *(_var_family(*op) for op in _VAR_OPS),
]
SPECS.append(_inplace_cumprod(next(s for s in SPECS if s.name == "Cumprod")))
SPECS = with_accuracy(SPECS, ACCURACY)

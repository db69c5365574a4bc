"""Construction and index movement ops (issue 16): Range, Linspace, Eye, Diag, DiagFlat, OneHot, Roll,
Take, GatherNd and GatherV3. Family ``movement``: every element is a copy or one once-rounded value,
so results are exact.

Choices where the CANN docs are silent or not transcribed here (torch's behaviour unless said):

* Range is torch.range: ``end`` included, ``floor((end - start) / step) + 1`` elements; its values and
  out dtypes follow Arange (``start + i * step``, in int64 for an int64 out, else in double).
* Linspace: the reference computes in double with torch's symmetric rule (the first half from
  ``start``, the second from ``end``, ``step = (end - start) / (steps - 1)``) and rounds once to out's
  dtype (integer outs truncate toward zero); backends stepping in float32 land within 2 ulps (rocm
  computes the same double formula, without fused multiply-adds, and matches the reference exactly).
* Eye refuses negative ``n`` / ``m``; out must be ``[n, m]``.
* OneHot (doc: self UINT8 / INT32 / INT64, out FLOAT16 / FLOAT / INT8 / UINT8 / INT32 / INT64, axis in
  [-1, rank]): a self value outside [0, numClasses) gives a row of ``offValue`` (the doc's formula;
  no error), and only the first element of ``onValue`` / ``offValue`` is read.
* Take reads self in C order; index values count from the end when negative (down to ``-numel``).
* GatherNd: the last dim of ``indices`` (k components) indexes self's first k dims; negative values
  count from the end only with ``negativeIndexSupport``, else they are refused like values past the end.
* GatherV3: ``batchDims`` in [0, dim] and at most index's rank, index's first batchDims dims equal
  self's, out = ``self[:dim] + index[batchDims:] + self[dim + 1:]`` (TensorFlow's batched gather, which
  the doc's example describes); ``mode`` 0 and 1 are performance hints and give the same result;
  mode 2 (out-of-range indices allowed; the doc leaves the result unspecified) is refused.

Index values out of range are refused by the kernel with 161002 (they live in device memory).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.spec import samples as S
from acl_core.spec.accuracy import ulp
from acl_core.spec.ops.movement import (
    ARANGE_OUT,
    COPY_DTYPES,
    MAX_RANK,
    _check_step,
    _ints,
    int_values,
    scalar_arg,
)
from acl_core.spec.opspec import (
    INVALID,
    Call,
    ErrorSample,
    IndexOf,
    Infos,
    OpSpec,
    Sample,
    bool_attr,
    int_array,
    int_attr,
    invalid,
    out,
    scalar,
    tensor,
)
from acl_core.spec.plan import declare as declare_plan
from acl_core.spec.rules import ALL, INDEX, REAL_BOOL, listed, normalize_dim, same, tensor_arg
from acl_core.tensor import AclTensor

FAMILY = "movement"
BF16 = D.ACL_BF16.numpy

declare_plan("shifts", "list[tuple[int, int]]", "Roll's (dim, shift in [0, size)) per rolled dim; dim -1: flat", list)

_LINSPACE = ulp(
    2,
    reason="the reference computes in double and rounds once; CANN and torch step in float32 for float outs",
)
LINSPACE_OUT = frozenset(ARANGE_OUT | {D.ACL_INT8, D.ACL_INT16, D.ACL_UINT8})
ONE_HOT_IN = frozenset({D.ACL_UINT8, D.ACL_INT32, D.ACL_INT64})
ONE_HOT_OUT = frozenset({D.ACL_FLOAT16, D.ACL_FLOAT, D.ACL_INT8, D.ACL_UINT8, D.ACL_INT32, D.ACL_INT64})
GATHER_V3 = frozenset(
    {D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16, D.ACL_INT64, D.ACL_INT32, D.ACL_INT16, D.ACL_INT8, D.ACL_UINT8}
    | {D.ACL_BOOL, D.ACL_DOUBLE, D.ACL_COMPLEX64}
)


def _real(call: Call, name: str) -> float:
    v = scalar_arg(call, name).value
    return float(v.real if isinstance(v, complex) else v)


# ----------------------------------------------------------------------------- construction
def range_length(start: float, end: float, step: float) -> int:
    """torch.range's length, ``floor((end - start) / step) + 1`` in double (161002 for a step that cannot reach end)."""
    if not all(math.isfinite(v) for v in (start, end, step)):
        raise invalid(f"range bounds must be finite: start={start}, end={end}, step={step}")
    _check_step(start, end, step, "double")
    return math.floor((end - start) / step) + 1


def _range() -> OpSpec:
    params = (scalar("start", REAL_BOOL), scalar("end", REAL_BOOL), scalar("step", REAL_BOOL), out("out", ARANGE_OUT))

    def infer(call: Call) -> Infos:
        start, end, step = (_real(call, n) for n in ("start", "end", "step"))
        n = range_length(start, end, step)
        integral = all(not scalar_arg(call, s).dtype.is_float for s in ("start", "end", "step"))
        given = call.args.get("out")
        dtype = given.dtype if isinstance(given, AclTensor) else D.ACL_INT64 if integral else D.ACL_FLOAT
        if dtype in (D.ACL_INT32, D.ACL_INT64):
            _check_step(int(start), int(end), int(step), "int64")
        call.plan["int64"] = dtype == D.ACL_INT64
        return {"out": listed((n,), D.ACL_INT64 if integral else D.ACL_FLOAT)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        yield Sample({"start": 0, "end": 9, "step": 3}, "int, end reached")
        yield Sample({"start": 5, "end": -3, "step": -2}, "int descending")
        yield Sample({"start": 0.5, "end": 2.0, "step": 0.25}, "float")
        yield Sample({"start": -1.0, "end": 1.0, "step": 0.3, "out": np.zeros((7,), np.float16)}, "into float16")
        yield Sample({"start": -1.0, "end": 1.0, "step": 0.5, "out": np.zeros((5,), BF16)}, "into bf16")
        yield Sample({"start": 0.5, "end": 6.0, "step": 1.5, "out": np.zeros((4,), np.int64)}, "floats into int64")
        yield Sample({"start": 2, "end": 2, "step": 1, "out": np.zeros((1,), np.int32)}, "one element")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        yield ErrorSample({"start": 0, "end": 5, "step": 0}, INVALID, "step 0")
        yield ErrorSample({"start": 5, "end": 0, "step": 1}, INVALID, "step points away from end")
        yield ErrorSample({"start": 0, "end": 5, "step": 1, "out": np.zeros((5,), np.int64)}, INVALID, "out too short")
        yield ErrorSample({"start": 0.0, "end": float("inf"), "step": 1.0}, INVALID, "infinite end")

    return OpSpec("Range", FAMILY, params, infer, samples=gen, error_samples=errors)


def _linspace() -> OpSpec:
    params = (scalar("start", REAL_BOOL), scalar("end", REAL_BOOL), int_attr("steps"), out("out", LINSPACE_OUT))

    def infer(call: Call) -> Infos:
        steps = call.args["steps"]
        if steps < 0:
            raise invalid(f"steps={steps} must not be negative")
        for n in ("start", "end"):
            if not math.isfinite(_real(call, n)):
                raise invalid(f"{n} must be finite")
        return {"out": listed((steps,), D.ACL_FLOAT)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for np_dt in (np.float32, np.float16, BF16, np.float64, np.int32, np.int64, np.int8, np.uint8):
            yield Sample({"start": -3.0, "end": 10.0, "steps": 7, "out": np.zeros((7,), np_dt)}, f"{np.dtype(np_dt)}")
        yield Sample({"start": 1, "end": -2.5, "steps": 100}, "descending, 100 steps")
        yield Sample({"start": 4.0, "end": 9.0, "steps": 1}, "one step is start")
        yield Sample({"start": 4.0, "end": 9.0, "steps": 0}, "no steps")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        yield ErrorSample({"start": 0.0, "end": 1.0, "steps": -1}, INVALID, "negative steps")
        yield ErrorSample({"start": 0.0, "end": float("nan"), "steps": 3}, INVALID, "NaN end")
        yield ErrorSample({"start": 0.0, "end": 1.0, "steps": 3, "out": np.zeros((4,), np.float32)}, INVALID, "out 4")

    return OpSpec("Linspace", FAMILY, params, infer, samples=gen, error_samples=errors, accuracy=_LINSPACE)


def _eye() -> OpSpec:
    params = (int_attr("n"), int_attr("m"), out("out", REAL_BOOL))

    def infer(call: Call) -> Infos:
        n, m = call.args["n"], call.args["m"]
        if n < 0 or m < 0:
            raise invalid(f"n={n} and m={m} must not be negative")
        return {"out": listed((n, m), D.ACL_FLOAT)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for np_dt in (np.float32, BF16, np.int64, np.bool_):
            yield Sample({"n": 3, "m": 5, "out": np.zeros((3, 5), np_dt)}, f"{np.dtype(np_dt)} wide")
        yield Sample({"n": 6, "m": 2}, "tall")
        yield Sample({"n": 0, "m": 4}, "empty")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        yield ErrorSample({"n": -1, "m": 2}, INVALID, "negative n")
        yield ErrorSample({"n": 2, "m": 2, "out": np.zeros((2, 3), np.float32)}, INVALID, "out of another shape")

    return OpSpec("Eye", FAMILY, params, infer, samples=gen, error_samples=errors)


def diagonal_length(rows: int, cols: int, k: int) -> int:
    """Elements on diagonal ``k`` of a rows × cols matrix."""
    return max(min(rows, cols - k) if k >= 0 else min(rows + k, cols), 0)


def _diag(name: str) -> OpSpec:
    """Diag (1-d: a matrix with self on diagonal k; 2-d: diagonal k) and DiagFlat (self flattened, as 1-d)."""
    flat = name == "DiagFlat"
    params = (
        tensor("self", ALL, max_rank=MAX_RANK if flat else 2, min_rank=0 if flat else 1),
        int_attr("diagonal"),
        out("out", ALL),
    )

    def infer(call: Call) -> Infos:
        t = tensor_arg(call, "self")
        k = call.args["diagonal"]
        if flat or t.rank == 1:
            n = t.numel + abs(k)
            return {"out": same((n, n), t.dtype)}
        return {"out": same((diagonal_length(t.shape[0], t.shape[1], k),), t.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in COPY_DTYPES:
            yield Sample({"self": S.array(rng, (4,), dt), "diagonal": 1}, f"{dt.short} vector, k=1")
            shape = (2, 3) if flat else (4, 6)
            yield Sample({"self": S.array(rng, shape, dt), "diagonal": -2}, f"{dt.short} matrix, k=-2")
        yield Sample({"self": S.array(rng, (5, 3), D.ACL_COMPLEX64), "diagonal": 1}, "complex, k=1")
        yield Sample({"self": S.array(rng, (3,), D.ACL_FLOAT16, special=True), "diagonal": 0}, "specials")
        if flat:
            yield Sample({"self": np.array(2.5, np.float32), "diagonal": -1}, "0-d")
        else:
            yield Sample({"self": S.array(rng, (3, 4), D.ACL_INT8), "diagonal": 7}, "diagonal past the matrix")
        yield Sample({"self": np.zeros((0,), np.float32), "diagonal": 2}, "empty vector")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = S.array(rng, (3,), D.ACL_FLOAT)
        yield ErrorSample({"self": x, "diagonal": 0, "out": np.zeros((3, 4), np.float32)}, INVALID, "wrong out")
        if not flat:
            yield ErrorSample({"self": S.array(rng, (2, 2, 2), D.ACL_FLOAT), "diagonal": 0}, INVALID, "3-d self")

    return OpSpec(name, FAMILY, params, infer, samples=gen, error_samples=errors)


def _one_hot() -> OpSpec:
    params = (
        tensor("self", ONE_HOT_IN, min_rank=1),
        int_attr("numClasses", c_type="int"),
        tensor("onValue", ONE_HOT_OUT, min_rank=1),
        tensor("offValue", ONE_HOT_OUT, min_rank=1),
        int_attr("axis"),
        out("out", ONE_HOT_OUT),
    )

    def infer(call: Call) -> Infos:
        t, on, off = (tensor_arg(call, n) for n in ("self", "onValue", "offValue"))
        classes, axis = call.args["numClasses"], call.args["axis"]
        if classes < 0 or (classes == 0 and t.numel == 0):
            raise invalid(f"numClasses={classes}: at least 0, and more than 0 for an empty self")
        if not -1 <= axis <= t.rank:
            raise invalid(f"axis={axis} must lie in [-1, {t.rank}]")
        if on.numel == 0 or off.numel == 0:
            raise invalid("onValue and offValue must hold at least one element")
        if off.dtype != on.dtype:
            raise invalid(f"offValue has dtype {off.dtype.short}; onValue has {on.dtype.short}")
        at = t.rank if axis == -1 else axis
        shape = (*t.shape[:at], classes, *t.shape[at:])
        if len(shape) > MAX_RANK:
            raise invalid(f"out would have rank {len(shape)}; at most {MAX_RANK}")
        call.plan["dim"] = at
        return {"out": same(shape, on.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for np_dt in (np.float32, np.float16, np.int8, np.uint8, np.int32, np.int64):
            on, off = np.array([3], np_dt), np.array([1, 7], np_dt)
            idx = _ints(rng, 0, 5, (2, 3), np.int32)
            yield Sample(
                {"self": idx, "numClasses": 5, "onValue": on, "offValue": off, "axis": -1}, f"{np.dtype(np_dt)}"
            )
        on, off = np.array([1.0], np.float32), np.array([0.0], np.float32)
        idx = _ints(rng, -2, 6, (4,), np.int64)  # values outside [0, 4) give a row of offValue
        yield Sample({"self": idx, "numClasses": 4, "onValue": on, "offValue": off, "axis": 0}, "axis 0, out of range")
        idx = _ints(rng, 0, 3, (2, 3), np.int64).astype(np.uint8)
        yield Sample({"self": idx, "numClasses": 3, "onValue": on, "offValue": off, "axis": 1}, "uint8, axis 1")
        yield Sample({"self": idx, "numClasses": 0, "onValue": on, "offValue": off, "axis": 2}, "no classes")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        on, off = np.array([1.0], np.float32), np.array([0.0], np.float32)
        idx = np.array([0, 1], np.int64)
        base = {"self": idx, "onValue": on, "offValue": off}
        yield ErrorSample({**base, "numClasses": -1, "axis": -1}, INVALID, "negative numClasses")
        yield ErrorSample({**base, "numClasses": 2, "axis": 2}, INVALID, "axis past rank")
        yield ErrorSample({**base, "numClasses": 2, "axis": -2}, INVALID, "axis below -1")
        yield ErrorSample({**base, "offValue": off.astype(np.int32), "numClasses": 2, "axis": -1}, INVALID, "mixed")

    return OpSpec("OneHot", FAMILY, params, infer, samples=gen, error_samples=errors)


# ----------------------------------------------------------------------------- movement
def _roll() -> OpSpec:
    params = (tensor("x", ALL), int_array("shifts"), int_array("dims"), out("out", ALL))

    def infer(call: Call) -> Infos:
        t = tensor_arg(call, "x")
        shifts, dims = int_values(call, "shifts"), int_values(call, "dims")
        if not dims:
            if len(shifts) != 1:
                raise invalid(f"without dims, shifts must hold one value, not {len(shifts)}")
            call.plan["shifts"] = [(-1, shifts[0] % t.numel if t.numel else 0)]
        else:
            if len(shifts) != len(dims):
                raise invalid(f"shifts has {len(shifts)} values but dims has {len(dims)}")
            total: dict[int, int] = {}
            for d, s in zip(dims, shifts):  # a dim named twice rolls by the sum
                d = normalize_dim(d, t.rank, "dims")
                total[d] = total.get(d, 0) + s
            call.plan["shifts"] = [(d, s % t.shape[d] if t.shape[d] else 0) for d, s in sorted(total.items())]
        return {"out": same(t.shape, t.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in COPY_DTYPES:
            x = S.array(rng, (4, 5, 3), dt)
            yield Sample({"x": x, "shifts": [2, -1], "dims": [0, 2]}, f"{dt.short} two dims")
            yield Sample({"x": x, "shifts": [7], "dims": []}, f"{dt.short} flattened")
        x = S.array(rng, (3, 4), D.ACL_COMPLEX64)
        yield Sample({"x": x, "shifts": [1, 2], "dims": [-1, 1]}, "the same dim twice")
        yield Sample({"x": np.zeros((0, 3), np.float32), "shifts": [1], "dims": [1]}, "empty")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = S.array(rng, (3, 4), D.ACL_FLOAT)
        yield ErrorSample({"x": x, "shifts": [1, 2], "dims": [0]}, INVALID, "shifts and dims differ in length")
        yield ErrorSample({"x": x, "shifts": [1], "dims": [2]}, INVALID, "dim out of range")
        yield ErrorSample({"x": x, "shifts": [1, 1], "dims": []}, INVALID, "two shifts without dims")

    return OpSpec("Roll", FAMILY, params, infer, samples=gen, error_samples=errors)


def _take() -> OpSpec:
    params = (
        tensor("self", ALL),
        tensor("index", INDEX, index_of=IndexOf("self", negative="wrap")),
        out("out", ALL),
    )

    def infer(call: Call) -> Infos:
        t, idx = tensor_arg(call, "self"), tensor_arg(call, "index")
        if t.numel == 0 and idx.numel != 0:
            raise invalid("an empty self has no element to take")
        return {"out": same(idx.shape, t.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        # the first sample's self is 1-d: the generated out-of-range cases count along dim 0
        yield Sample({"self": S.array(rng, (7,), D.ACL_FLOAT), "index": _ints(rng, -7, 7, (3, 2))}, "1-d, negatives")
        for dt in COPY_DTYPES:
            x = S.array(rng, (3, 4), dt)
            yield Sample({"self": x, "index": _ints(rng, -12, 12, (5,), np.int32)}, f"{dt.short} 2-d self")
        yield Sample({"self": np.array(1.5, np.float64), "index": np.array([0, -1, 0])}, "0-d self")
        yield Sample({"self": S.array(rng, (3,), D.ACL_INT8), "index": np.zeros((0, 2), np.int64)}, "empty index")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = S.array(rng, (3, 4), D.ACL_FLOAT)
        yield ErrorSample({"self": x, "index": np.array([12])}, INVALID, "index past numel")
        yield ErrorSample({"self": x, "index": np.array([-13])}, INVALID, "index below -numel")
        yield ErrorSample({"self": x, "index": np.array([0.0], np.float32)}, INVALID, "float index")

    return OpSpec("Take", FAMILY, params, infer, samples=gen, error_samples=errors)


def _gather_nd() -> OpSpec:
    params = (
        tensor("self", ALL, min_rank=1),
        tensor("indices", INDEX, min_rank=1, index_of=IndexOf("self")),
        bool_attr("negativeIndexSupport"),
        out("out", ALL),
    )

    def infer(call: Call) -> Infos:
        t, idx = tensor_arg(call, "self"), tensor_arg(call, "indices")
        k = idx.shape[-1]
        if k > t.rank:
            raise invalid(f"indices' last dim holds {k} components but self has {t.rank} dims")
        shape = (*idx.shape[:-1], *t.shape[k:])
        if len(shape) > MAX_RANK:
            raise invalid(f"out would have rank {len(shape)}; at most {MAX_RANK}")
        return {"out": same(shape, t.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        # the first sample takes one component and refuses negatives: the generated cases count along dim 0
        x = S.array(rng, (5, 3), D.ACL_FLOAT)
        yield Sample({"self": x, "indices": _ints(rng, 0, 5, (4, 1)), "negativeIndexSupport": False}, "rows")
        for dt in COPY_DTYPES:
            x = S.array(rng, (4, 5, 3), dt)
            idx = np.stack([_ints(rng, -4, 4, (2, 3)), _ints(rng, -5, 5, (2, 3))], axis=-1).astype(np.int32)
            yield Sample({"self": x, "indices": idx, "negativeIndexSupport": True}, f"{dt.short} pairs, negatives")
        x = S.array(rng, (2, 3), D.ACL_COMPLEX64)
        idx = np.array([[1, 2], [0, 0]], np.int64)
        yield Sample({"self": x, "indices": idx, "negativeIndexSupport": False}, "every dim: elements")
        yield Sample({"self": x, "indices": np.zeros((0, 1), np.int64), "negativeIndexSupport": False}, "empty")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = S.array(rng, (3, 4), D.ACL_FLOAT)
        yield ErrorSample({"self": x, "indices": np.array([[1, 4]]), "negativeIndexSupport": True}, INVALID, "past")
        yield ErrorSample({"self": x, "indices": np.array([[-1, 0]]), "negativeIndexSupport": False}, INVALID, "neg")
        yield ErrorSample({"self": x, "indices": np.array([[-4, 0]]), "negativeIndexSupport": True}, INVALID, "-4")
        yield ErrorSample(
            {"self": x, "indices": np.zeros((1, 3), np.int64), "negativeIndexSupport": True}, INVALID, "k"
        )

    return OpSpec("GatherNd", FAMILY, params, infer, samples=gen, error_samples=errors)


def _gather_v3() -> OpSpec:
    params = (
        tensor("self", GATHER_V3, min_rank=1),
        int_attr("dim"),
        tensor("index", INDEX, index_of=IndexOf("self", "dim")),
        int_attr("batchDims"),
        int_attr("mode", choices=(0, 1)),
        out("out", GATHER_V3),
    )

    def infer(call: Call) -> Infos:
        t, idx = tensor_arg(call, "self"), tensor_arg(call, "index")
        dim = normalize_dim(call.args["dim"], t.rank)
        b = call.args["batchDims"]
        if not 0 <= b <= dim or b > idx.rank:
            raise invalid(f"batchDims={b} must lie in [0, dim={dim}] and be at most index's rank {idx.rank}")
        if tuple(idx.shape[:b]) != tuple(t.shape[:b]):
            raise invalid(f"index's first {b} dims {list(idx.shape[:b])} differ from self's {list(t.shape[:b])}")
        shape = (*t.shape[:dim], *idx.shape[b:], *t.shape[dim + 1 :])
        if len(shape) > MAX_RANK:
            raise invalid(f"out would have rank {len(shape)}; at most {MAX_RANK}")
        call.plan["dim"] = dim
        return {"out": same(shape, t.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        dtypes = (D.ACL_FLOAT, D.ACL_BF16, D.ACL_INT64, D.ACL_BOOL, D.ACL_COMPLEX64, D.ACL_DOUBLE)
        for mode, dt in enumerate(dtypes):
            x = S.array(rng, (4, 5, 3), dt)
            args: dict[str, Any] = {"self": x, "dim": 1, "index": _ints(rng, 0, 5, (2, 3), np.int32)}
            yield Sample({**args, "batchDims": 0, "mode": mode % 2}, f"{dt.short} dim 1")
        x = S.array(rng, (4, 5, 3), D.ACL_FLOAT16)
        batched = {"self": x, "dim": 1, "index": _ints(rng, 0, 5, (4, 6)), "batchDims": 1, "mode": 1}
        yield Sample(batched, "batchDims 1")
        yield Sample({**batched, "dim": -1, "index": _ints(rng, 0, 3, (4, 5, 2))}, "batchDims 1, dim -1, 3-d index")
        yield Sample({"self": x, "dim": 0, "index": np.array(3), "batchDims": 0, "mode": 0}, "0-d index")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = S.array(rng, (3, 4), D.ACL_FLOAT)
        base = {"self": x, "batchDims": 0, "mode": 0}
        yield ErrorSample({**base, "dim": 1, "index": np.array([4])}, INVALID, "index past the end")
        yield ErrorSample({**base, "dim": 1, "index": np.array([-1])}, INVALID, "negative index")
        yield ErrorSample({**base, "dim": 0, "index": np.array([0]), "batchDims": 1}, INVALID, "batchDims > dim")
        yield ErrorSample({**base, "dim": 1, "index": np.zeros((2, 1), np.int64), "batchDims": 1}, INVALID, "batch")
        yield ErrorSample({**base, "dim": 1, "index": np.array([0]), "mode": 2}, INVALID, "mode 2")

    return OpSpec("GatherV3", FAMILY, params, infer, samples=gen, error_samples=errors)


SPECS: list[OpSpec] = [
    _range(),
    _linspace(),
    _eye(),
    _diag("Diag"),
    _diag("DiagFlat"),
    _one_hot(),
    _roll(),
    _take(),
    _gather_nd(),
    _gather_v3(),
]

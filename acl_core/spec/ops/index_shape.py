"""Strided slicing, repeat-interleave and the embedding's dense backward (issue 16). Family ``movement``: slices
and repeats are copies (exact); RepeatInterleaveGrad and EmbeddingDenseBackward add rows (reduction class).

Choices where the CANN docs are silent (TensorFlow's StridedSlice and torch's behaviour unless said):

* StridedSlice follows TensorFlow's rule, which CANN's infershape implements: begin / end / strides name
  sparse dims (an ellipsis bit expands to the dims the others leave, a missing ellipsis is one at the end),
  negative positions count from the end and clamp to [0, N] for a positive stride, [-1, N - 1] for a
  negative one (so a negative stride runs backwards, down to the first element); a masked begin / end
  takes the whole dim in the stride's direction; a shrink bit keeps the one element at begin (refused
  when begin lies outside [-N, N), and with a negative stride, as the doc says) and drops the dim; a
  new-axis bit inserts a dim of 1 (an ellipsis bit wins over a new-axis bit, a new-axis bit over the
  rest). A spec naming more dims than self has is refused. COMPLEX32 and HIFLOAT8 are not declared:
  neither has a NumPy form in the reference.
* StridedSliceAssignV2: positions clamp as the doc says (``end < 0``: ``+ N``, then at least 0, at most N;
  begin likewise), every stride must be positive and the stride of varRef's last dim 1 (the doc's rule);
  axesOptional absent means the first ``len(begin)`` dims, an axis named twice is refused; inputValue
  must have exactly the slice's shape and varRef's dtype.
* RepeatInterleave*: out's shape comes from ``outputSize`` in phase 1 (torch_npu passes it, computing it on
  the host when torch's caller did not), so the caller sizes ``out``. A repeat count or a sum only the
  device knows (a repeats tensor) is checked by the kernel: a negative count, or counts whose total is
  not ``outputSize``, give 161002 (at synchronisation on asynchronous backends) and leave out unwritten.
* RepeatInterleaveGrad: a 0-d yGrad is refused (the doc's axis range [-n, n) is empty for it). out may
  have any shape holding the reduced elements (the doc's example); with one repeats value the group count
  is out's element count over the other dims (the value itself lives on the device), so ``out`` must be
  given, and a count whose groups do not cover yGrad's axis is refused by the kernel. An empty repeats
  is 561002 (the doc's code).
* EmbeddingDenseBackward: paddingIdx travels as uint64_t; values of 2^63 and above are the negative int64
  torch passes (-1: no padding row), and a paddingIdx that no index equals changes nothing. Indices are
  read as integers (float dtypes truncate toward zero, NaN is undefined); a value outside [0, numWeights)
  is refused by the kernel (161002). With scaleGradByFreq each row of grad is scaled by one over the
  number of times its index occurs (padding's occurrences included, as torch counts them).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.errors import AclnnError, AclnnStatus
from acl_core.spec import samples as S
from acl_core.spec.accuracy import reduction, with_accuracy
from acl_core.spec.ops.movement import COPY_DTYPES, MAX_RANK, _ints, int_values
from acl_core.spec.opspec import (
    INVALID,
    TILING,
    Call,
    ErrorSample,
    Infos,
    OpSpec,
    Param,
    Sample,
    bool_attr,
    int_array,
    int_attr,
    invalid,
    out,
    ref,
    tensor,
)
from acl_core.spec.plan import declare as declare_plan
from acl_core.spec.rules import ANY_STORAGE, FLOATS, INDEX, normalize_dim, normalize_dims, same, tensor_arg
from acl_core.tensor import AclTensor

FAMILY = "movement"
BF16 = D.ACL_BF16.numpy

declare_plan(
    "strided",
    "list[tuple[int, int, int]]",
    "StridedSlice's / StridedSliceAssignV2's (start, length, step) per dim of self, clamped",
    list,
)
declare_plan("gather", "list[int]", "StridedSlice's source dim per out dim (-1: a new axis; shrunk dims absent)", list)
declare_plan("size", "int", "RepeatInterleave*'s repeated length: the dim's size, or self's element count", int)
declare_plan("repeat_groups", "int", "RepeatInterleaveGrad's groups along axis (out's size there)", int)
declare_plan("padding", "int", "EmbeddingDenseBackward's paddingIdx as int64 (negative: no padding row)", int)

STRIDED_SLICE = frozenset(ANY_STORAGE | {D.ACL_FLOAT8_E5M2, D.ACL_FLOAT8_E4M3FN}) - {
    D.ACL_DOUBLE,
    D.ACL_COMPLEX128,
}
SLICE_ASSIGN = frozenset({D.ACL_FLOAT16, D.ACL_FLOAT, D.ACL_BF16, D.ACL_INT32, D.ACL_INT64, D.ACL_DOUBLE, D.ACL_INT8})
REPEAT = frozenset(
    {D.ACL_UINT8, D.ACL_INT8, D.ACL_INT16, D.ACL_INT32, D.ACL_INT64, D.ACL_BOOL, D.ACL_FLOAT16, D.ACL_BF16, D.ACL_FLOAT}
)
EMBEDDING_INDEX = frozenset(
    {D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_DOUBLE, D.ACL_INT32, D.ACL_INT64, D.ACL_INT16, D.ACL_INT8, D.ACL_UINT8}
    | {D.ACL_BOOL}
)
U64 = (0, 2**64 - 1)


# ----------------------------------------------------------------------------- StridedSlice
def _bit(mask: int, i: int) -> bool:
    return bool((mask >> i) & 1)


def strided_slice_plan(
    shape: tuple[int, ...],
    begin: tuple[int, ...],
    end: tuple[int, ...],
    strides: tuple[int, ...],
    masks: tuple[int, int, int, int, int],
) -> tuple[list[tuple[int, int, int]], list[int], tuple[int, ...]]:
    """TensorFlow's dense spec: (start, length, step) per dim of self, each out dim's source (-1 new), out's shape."""
    begin_mask, end_mask, ellipsis_mask, new_mask, shrink_mask = masks
    n, rank = len(begin), len(shape)
    ellipsis_at = next((i for i in range(n) if _bit(ellipsis_mask, i)), n)  # none: one after the last
    sparse = n + (ellipsis_at == n)
    added = sum(1 for i in range(ellipsis_at + 1, n) if _bit(new_mask, i) and not _bit(ellipsis_mask, i))
    dense: list[tuple[int, int, int, bool, bool, bool]] = []
    gather: list[int] = []
    for i in range(sparse):
        if i == ellipsis_at:
            upto = min(rank - (sparse - i) + 1 + added, rank)
            while len(dense) < upto:
                gather.append(len(dense))
                dense.append((0, 0, 1, True, True, False))
        elif _bit(new_mask, i):
            gather.append(-1)
        else:
            if len(dense) == rank:
                raise invalid(f"the slice spec names more dims than self's {rank}")
            shrink = _bit(shrink_mask, i)
            if not shrink:
                gather.append(len(dense))
            dense.append((begin[i], end[i], strides[i], _bit(begin_mask, i), _bit(end_mask, i), shrink))
    plan: list[tuple[int, int, int]] = []
    for d, (b, e, s, bm, em, shrink) in enumerate(dense):
        size = shape[d]
        if shrink:
            at = b + size if b < 0 else b
            if not 0 <= at < size:
                raise invalid(f"shrunk dim {d}: begin {b} lies outside [-{size}, {size})")
            plan.append((at, 1, 1))
            continue
        lo, hi = (0, size) if s > 0 else (-1, size - 1)
        first, last = (lo, hi) if s > 0 else (hi, lo)  # a masked begin / end: the stride's direction
        start = first if bm else min(max(b + size if b < 0 else b, lo), hi)
        stop = last if em else min(max(e + size if e < 0 else e, lo), hi)
        span = stop - start
        length = 0 if span == 0 or (span < 0) != (s < 0) else -(-span // s)
        plan.append((start, length, s))
    out_shape = tuple(1 if g < 0 else plan[g][1] for g in gather)
    return plan, gather, out_shape


def _strided_slice() -> OpSpec:
    params = (
        tensor("self", STRIDED_SLICE),
        int_array("begin"),
        int_array("end"),
        int_array("strides"),
        int_attr("beginMask"),
        int_attr("endMask"),
        int_attr("ellipsisMask"),
        int_attr("newAxisMask"),
        int_attr("shrinkAxisMask"),
        out("out", STRIDED_SLICE),
    )

    def infer(call: Call) -> Infos:
        t = tensor_arg(call, "self")
        begin, end, strides = (int_values(call, n) for n in ("begin", "end", "strides"))
        if not len(begin) == len(end) == len(strides):
            raise invalid(f"begin, end and strides hold {len(begin)}, {len(end)} and {len(strides)} values")
        if 0 in strides:
            raise invalid(f"strides {list(strides)} holds a 0")
        names = ("beginMask", "endMask", "ellipsisMask", "newAxisMask", "shrinkAxisMask")
        b, e, ell, new, shrink = (int(call.args[n]) for n in names)
        if ell & (ell - 1):
            raise invalid(f"ellipsisMask={ell} sets more than one bit")
        for i, s in enumerate(strides):
            if _bit(shrink, i) and s < 0:
                raise invalid(f"shrinkAxisMask sets bit {i}, whose stride {s} is negative")
        plan, gather, shape = strided_slice_plan(tuple(t.shape), begin, end, strides, (b, e, ell, new, shrink))
        if len(shape) > MAX_RANK:
            raise invalid(f"out would have rank {len(shape)}; at most {MAX_RANK}")
        call.plan["strided"], call.plan["gather"] = plan, gather
        return {"out": same(shape, t.dtype)}

    def masks(b: int = 0, e: int = 0, ell: int = 0, new: int = 0, shrink: int = 0) -> dict[str, int]:
        return {"beginMask": b, "endMask": e, "ellipsisMask": ell, "newAxisMask": new, "shrinkAxisMask": shrink}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in (*COPY_DTYPES, D.ACL_FLOAT16, D.ACL_INT8, D.ACL_UINT16, D.ACL_FLOAT8_E4M3FN):
            x = S.array(rng, (5, 6, 4), dt)
            spec = {"begin": [1, -5], "end": [5, 100], "strides": [2, 1]}
            yield Sample({"self": x, **spec, **masks()}, f"{dt.short} two dims, the rest whole")
        x = S.array(rng, (5, 6, 4), D.ACL_FLOAT)
        yield Sample({"self": x, "begin": [4, 5], "end": [0, -100], "strides": [-1, -2], **masks()}, "negative")
        yield Sample({"self": x, "begin": [0, 0], "end": [0, 0], "strides": [-1, 3], **masks(b=1, e=3)}, "masked")
        yield Sample(
            {"self": x, "begin": [0, 2, 0], "end": [0, 3, 1], "strides": [1, 1, 1], **masks(ell=1, shrink=2)},
            "ellipsis first, shrink, new axis at the end",
        )
        spec = {"begin": [-1, 0, 0, 1], "end": [0, 0, 0, 4], "strides": [1, 1, 1, 2]}
        yield Sample({"self": x, **spec, **masks(new=2, ell=4, shrink=1)}, "shrink -1, new axis, ellipsis")
        yield Sample({"self": x, "begin": [3], "end": [1], "strides": [1], **masks()}, "empty: end before begin")
        yield Sample({"self": x, "begin": [], "end": [], "strides": [], **masks()}, "no spec: a copy")
        yield Sample(
            {"self": np.array(2.5, np.float32), "begin": [0], "end": [0], "strides": [1], **masks(new=1)}, "0-d"
        )
        yield Sample(
            {"self": np.zeros((0, 3), np.int32), "begin": [0], "end": [2], "strides": [-1], **masks()}, "empty"
        )

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = S.array(rng, (3, 4), D.ACL_FLOAT)
        base = {"self": x, "begin": [0, 0], "end": [2, 2]}
        yield ErrorSample({**base, "strides": [1, 0], **masks()}, INVALID, "stride 0")
        yield ErrorSample({**base, "strides": [1], **masks()}, INVALID, "lengths differ")
        yield ErrorSample({**base, "strides": [1, 1], **masks(ell=3)}, INVALID, "two ellipsis bits")
        yield ErrorSample({**base, "strides": [-1, 1], **masks(shrink=1)}, INVALID, "shrink with a negative stride")
        yield ErrorSample(
            {**base, "begin": [3, 0], "strides": [1, 1], **masks(shrink=1)}, INVALID, "shrink past the end"
        )
        three = {"begin": [0, 0, 0], "end": [1, 1, 1], "strides": [1, 1, 1]}
        yield ErrorSample({"self": x, **three, **masks()}, INVALID, "more dims than self")
        yield ErrorSample({**base, "strides": [1, 1], **masks(), "out": np.zeros((2, 3), np.float32)}, INVALID, "out")

    return OpSpec("StridedSlice", FAMILY, params, infer, samples=gen, error_samples=errors)


def slice_assign_bounds(x: int, size: int) -> int:
    """The doc's clamp of a StridedSliceAssignV2 position: negatives count from the end, then into [0, size]."""
    x = x + size if x < 0 else x
    return min(max(x, 0), size)


def _strided_slice_assign() -> OpSpec:
    params = (
        ref("varRef", SLICE_ASSIGN),
        tensor("inputValue", SLICE_ASSIGN),
        int_array("begin"),
        int_array("end"),
        int_array("strides"),
        int_array("axesOptional", optional=True),
    )

    def infer(call: Call) -> Infos:
        var, value = tensor_arg(call, "varRef"), tensor_arg(call, "inputValue")
        if var.rank < 1:
            raise invalid("varRef must have at least one dim")
        if value.dtype != var.dtype:
            raise invalid(f"inputValue has dtype {value.dtype.short}; varRef has {var.dtype.short}")
        begin, end, strides = (int_values(call, n) for n in ("begin", "end", "strides"))
        axes = int_values(call, "axesOptional") if call.args.get("axesOptional") is not None else None
        if axes is None:
            axes = tuple(range(len(begin)))
        if not len(begin) == len(end) == len(strides) == len(axes):
            raise invalid("begin, end, strides and axesOptional must hold as many values each")
        dims = normalize_dims(axes, var.rank, "axesOptional")
        plan = [(0, n, 1) for n in var.shape]
        for d, b, e, s in zip(dims, begin, end, strides):
            if s <= 0:
                raise invalid(f"strides holds {s}; every stride must be positive")
            if d == var.rank - 1 and s != 1:
                raise invalid(f"the stride of varRef's last dim must be 1, not {s}")
            lo, hi = slice_assign_bounds(b, var.shape[d]), slice_assign_bounds(e, var.shape[d])
            plan[d] = (lo, max(-(-(hi - lo) // s), 0), s)
        want = tuple(n for _, n, _ in plan)
        if tuple(value.shape) != want:
            raise invalid(f"inputValue has shape {list(value.shape)}; the slice has {list(want)}")
        call.plan["strided"] = plan
        return {"varRef": same(var.shape, var.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in sorted(SLICE_ASSIGN, key=int):
            var = S.array(rng, (6, 5, 4), dt)
            value = S.array(rng, (3, 4, 4), dt)
            spec = {"begin": [-5, 0], "end": [100, 4], "strides": [2, 1], "axesOptional": [0, 1]}
            yield Sample({"varRef": var, "inputValue": value, **spec}, f"{dt.short} two axes")
        var = S.array(rng, (4, 3), D.ACL_FLOAT)
        yield Sample(
            {
                "varRef": var,
                "inputValue": S.array(rng, (2, 2), D.ACL_FLOAT),
                "begin": [1, 0],
                "end": [4, 2],
                "strides": [2, 1],
                "axesOptional": [0, 1],
            },
            "the doc's example",
        )
        value = S.array(rng, (4, 2), D.ACL_BF16)
        spec = {"begin": [-2], "end": [7], "strides": [1], "axesOptional": [-1]}
        yield Sample({"varRef": S.array(rng, (4, 3), D.ACL_BF16), "inputValue": value, **spec}, "last dim from -2")
        yield Sample(
            {
                "varRef": S.array(rng, (4, 3), D.ACL_INT32),
                "inputValue": S.array(rng, (2, 3), D.ACL_INT32),
                "begin": [0],
                "end": [4],
                "strides": [3],
            },
            "no axes: the first dims",
        )
        yield Sample(
            {
                "varRef": S.array(rng, (4, 3), D.ACL_INT8),
                "inputValue": np.zeros((0, 3), np.int8),
                "begin": [3],
                "end": [1],
                "strides": [1],
                "axesOptional": [0],
            },
            "empty slice",
        )

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        var = S.array(rng, (4, 3), D.ACL_FLOAT)
        value = S.array(rng, (2, 3), D.ACL_FLOAT)
        base = {"varRef": var, "inputValue": value, "begin": [0], "end": [4], "axesOptional": [0]}
        yield ErrorSample({**base, "strides": [0]}, INVALID, "stride 0")
        yield ErrorSample({**base, "strides": [-1]}, INVALID, "negative stride")
        yield ErrorSample({**base, "strides": [1]}, INVALID, "inputValue of another shape")
        yield ErrorSample({**base, "strides": [2], "axesOptional": [0, 1]}, INVALID, "lengths differ")
        one = {"varRef": var, "inputValue": S.array(rng, (4, 2), D.ACL_FLOAT), "begin": [0], "end": [3]}
        yield ErrorSample({**one, "strides": [2], "axesOptional": [1]}, INVALID, "last dim's stride 2")
        yield ErrorSample({**base, "strides": [2], "inputValue": value.astype(np.float16)}, INVALID, "dtypes differ")
        yield ErrorSample({**base, "strides": [2], "axesOptional": [2]}, INVALID, "axis out of range")

    return OpSpec("StridedSliceAssignV2", FAMILY, params, infer, samples=gen, error_samples=errors)


# ----------------------------------------------------------------------------- RepeatInterleave
REPEAT_FORMS: dict[str, tuple[bool, bool]] = {
    "RepeatInterleave": (True, False),
    "RepeatInterleaveWithDim": (True, True),
    "RepeatInterleaveInt": (False, False),
    "RepeatInterleaveIntWithDim": (False, True),
}
"""Each self-repeating form: (repeats is a tensor, it takes dim)."""


def _repeat_interleave(name: str) -> OpSpec:
    tensor_repeats, with_dim = REPEAT_FORMS[name]
    params: tuple[Param, ...] = (
        tensor("self", REPEAT, min_rank=1 if with_dim else 0),
        tensor("repeats", INDEX, max_rank=1) if tensor_repeats else int_attr("repeats"),
        *((int_attr("dim"),) if with_dim else ()),
        int_attr("outputSize"),
        out("out", REPEAT),
    )

    def infer(call: Call) -> Infos:
        t = tensor_arg(call, "self")
        total = int(call.args["outputSize"])
        if total < 0:
            raise invalid(f"outputSize={total} is negative")
        dim = normalize_dim(call.args["dim"], t.rank) if with_dim else -1
        size = t.shape[dim] if with_dim else t.numel
        if tensor_repeats:
            r = tensor_arg(call, "repeats")
            if r.numel not in (0, 1, size):
                raise invalid(f"repeats holds {r.numel} values; it needs 1 or {size}")
            if r.numel == 0 and size != 0:
                raise invalid("repeats is empty but self is not")
            if size == 0 and total != 0:
                raise invalid(f"outputSize={total}; nothing repeated gives 0")
        else:
            r_int = int(call.args["repeats"])
            if r_int < 0:
                raise invalid(f"repeats={r_int} is negative")
            if total != size * r_int:
                raise invalid(f"outputSize={total}; repeating {size} elements {r_int} times gives {size * r_int}")
        call.plan["dim"], call.plan["size"] = dim, size
        shape = (total,) if not with_dim else (*t.shape[:dim], total, *t.shape[dim + 1 :])
        return {"out": same(shape, t.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        dtypes = (D.ACL_FLOAT, D.ACL_BF16, D.ACL_INT64, D.ACL_BOOL, D.ACL_INT8, D.ACL_FLOAT16)
        for i, dt in enumerate(dtypes):
            x = S.array(rng, (3, 4), dt)
            size = 4 if with_dim else 12
            dim_arg = {"dim": -1} if with_dim else {}
            if tensor_repeats:
                reps = _ints(rng, 0, 4, (size,), np.int32 if i % 2 else np.int64)
                yield Sample({"self": x, "repeats": reps, **dim_arg, "outputSize": int(reps.sum())}, f"{dt.short}")
            else:
                yield Sample({"self": x, "repeats": 2, **dim_arg, "outputSize": 2 * size}, f"{dt.short} twice")
        x = S.array(rng, (3, 4, 2), D.ACL_INT32)
        size = 3 if with_dim else 24
        dim_arg = {"dim": 0} if with_dim else {}
        if tensor_repeats:
            yield Sample({"self": x, "repeats": np.array(3), **dim_arg, "outputSize": 3 * size}, "0-d repeats")
            yield Sample({"self": x, "repeats": np.array([2]), **dim_arg, "outputSize": 2 * size}, "one repeats value")
            reps = np.zeros((size,), np.int64)
            reps[1] = 2
            yield Sample({"self": x, "repeats": reps, **dim_arg, "outputSize": 2}, "mostly zero repeats")
        else:
            yield Sample({"self": x, "repeats": 0, **dim_arg, "outputSize": 0}, "zero repeats")
            yield Sample({"self": x, "repeats": 5, **dim_arg, "outputSize": 5 * size}, "five")
        if with_dim:  # rows of 16 bytes: whole words on rocm
            x = S.array(rng, (5, 8), D.ACL_BF16)
            reps_arg: Any = _ints(rng, 0, 4, (5,)) if tensor_repeats else 3
            total = int(np.sum(reps_arg)) if tensor_repeats else 15
            yield Sample({"self": x, "repeats": reps_arg, "dim": 0, "outputSize": total}, "bf16 rows of 8")
        else:
            reps_arg = np.array([4]) if tensor_repeats else 4
            yield Sample({"self": np.array(1.5, np.float16), "repeats": reps_arg, "outputSize": 4}, "0-d self")
        empty = np.zeros((0, 3), np.float32)
        reps_arg = np.zeros((0,), np.int64) if tensor_repeats else 3
        yield Sample({"self": empty, "repeats": reps_arg, **({"dim": 0} if with_dim else {}), "outputSize": 0}, "empty")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = S.array(rng, (2, 3), D.ACL_FLOAT)
        dim_arg = {"dim": 1} if with_dim else {}
        size = 3 if with_dim else 6
        if tensor_repeats:
            reps = np.array([1, 2, 0] if with_dim else [1, 0, 2, 1, 1, 1])
            yield ErrorSample(
                {"self": x, "repeats": reps, **dim_arg, "outputSize": 4}, INVALID, "sum is not outputSize"
            )
            bad = reps.copy()
            bad[0] = -1
            yield ErrorSample({"self": x, "repeats": bad, **dim_arg, "outputSize": 2}, INVALID, "negative count")
            yield ErrorSample({"self": x, "repeats": np.array([1, 2]), **dim_arg, "outputSize": 3}, INVALID, "2 counts")
            yield ErrorSample(
                {"self": x, "repeats": np.array([[2]]), **dim_arg, "outputSize": 2 * size}, INVALID, "2-d"
            )
            yield ErrorSample(
                {"self": x, "repeats": np.array([1.0], np.float32), **dim_arg, "outputSize": size}, INVALID, "floats"
            )
        else:
            yield ErrorSample({"self": x, "repeats": 2, **dim_arg, "outputSize": 2 * size + 1}, INVALID, "outputSize")
            yield ErrorSample({"self": x, "repeats": -1, **dim_arg, "outputSize": -size}, INVALID, "negative repeats")
        if with_dim:
            reps_arg: Any = np.array([2]) if tensor_repeats else 2
            yield ErrorSample({"self": x, "repeats": reps_arg, "dim": 2, "outputSize": 6}, INVALID, "dim out of range")

    return OpSpec(name, FAMILY, params, infer, samples=gen, error_samples=errors)


def _repeat_interleave_tensor() -> OpSpec:
    params = (tensor("repeats", INDEX, min_rank=1, max_rank=1), int_attr("outputSize"), out("out", INDEX))

    def infer(call: Call) -> Infos:
        r = tensor_arg(call, "repeats")
        total = int(call.args["outputSize"])
        if total < 0:
            raise invalid(f"outputSize={total} is negative")
        if r.numel == 0 and total != 0:
            raise invalid(f"outputSize={total}; an empty repeats gives 0")
        call.plan["size"] = r.numel
        return {"out": same((total,), r.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        yield Sample({"repeats": np.array([1, 3]), "outputSize": 4}, "the doc's example")
        for np_dt in (np.int32, np.int64):
            reps = _ints(rng, 0, 5, (9,), np_dt)
            yield Sample({"repeats": reps, "outputSize": int(reps.sum())}, f"{np.dtype(np_dt)}")
        yield Sample({"repeats": np.zeros((0,), np.int64), "outputSize": 0}, "empty")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        yield ErrorSample({"repeats": np.array([1, 3]), "outputSize": 5}, INVALID, "sum is not outputSize")
        yield ErrorSample({"repeats": np.array([2, -1]), "outputSize": 1}, INVALID, "negative count")
        yield ErrorSample({"repeats": np.array([1.0], np.float32), "outputSize": 1}, INVALID, "float repeats")

    return OpSpec("RepeatInterleaveTensor", FAMILY, params, infer, samples=gen, error_samples=errors)


def _repeat_interleave_grad() -> OpSpec:
    params = (
        tensor("yGrad", FLOATS, min_rank=1),
        tensor("repeats", INDEX, max_rank=1),
        int_attr("axis"),
        out("out", FLOATS, c_type="const aclTensor*"),
    )

    def infer(call: Call) -> Infos:
        y, r = tensor_arg(call, "yGrad"), tensor_arg(call, "repeats")
        axis = normalize_dim(call.args["axis"], y.rank, "axis")
        if r.numel == 0:
            raise AclnnError(AclnnStatus.ACLNN_ERR_INNER_TILING_ERROR, "repeats is empty (561002, as the doc says)")
        size = y.shape[axis]
        rest = math.prod(y.shape) // size if size else math.prod(d for i, d in enumerate(y.shape) if i != axis)
        given = call.args.get("out")
        if r.numel > 1:
            groups = r.numel
        elif not isinstance(given, AclTensor):
            raise invalid("with one repeats value the group count comes from out: pass out")
        elif rest == 0:
            groups = 0
        elif given.numel % rest:
            raise invalid(f"out holds {given.numel} elements, not a multiple of the {rest} beside axis {axis}")
        else:
            groups = given.numel // rest
        natural = (*y.shape[:axis], groups, *y.shape[axis + 1 :])
        shape = natural
        if isinstance(given, AclTensor) and given.numel == math.prod(natural):
            shape = tuple(given.shape)  # any shape holding the reduced elements (the doc's example)
        call.plan["dim"], call.plan["repeat_groups"] = axis, groups
        return {"out": same(shape, y.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for i, dt in enumerate((D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16)):
            reps = np.array([1, 2, 2, 1], np.int32 if i % 2 else np.int64)
            y = S.array(rng, (2, 6, 3), dt)
            yield Sample({"yGrad": y, "repeats": reps, "axis": 1}, f"{dt.short} the doc's example")
        y = S.array(rng, (4, 6), D.ACL_FLOAT)
        yield Sample({"yGrad": y, "repeats": np.array([2]), "axis": -1, "out": np.zeros((4, 3), np.float32)}, "[2]")
        y64 = S.array(rng, (64,), D.ACL_FLOAT)
        yield Sample({"yGrad": y64, "repeats": np.array(2), "axis": 0, "out": np.zeros((2, 4, 4), np.float32)}, "0-d")
        reps = np.zeros((5,), np.int64)
        reps[[1, 3]] = [300, 212]
        y = S.array(rng, (2, 512, 3), D.ACL_BF16)
        yield Sample({"yGrad": y, "repeats": reps, "axis": 1}, "long groups beside empty ones")
        yield Sample({"yGrad": np.zeros((0, 4), np.float16), "repeats": np.array([1, 3]), "axis": 1}, "empty")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        y = S.array(rng, (2, 6), D.ACL_FLOAT)
        yield ErrorSample({"yGrad": y, "repeats": np.array([1, 2, 2]), "axis": 1}, INVALID, "sum is not the axis size")
        yield ErrorSample({"yGrad": y, "repeats": np.array([4, -1, 3]), "axis": 1}, INVALID, "negative count")
        yield ErrorSample({"yGrad": y, "repeats": np.zeros((0,), np.int64), "axis": 1}, TILING, "empty repeats")
        yield ErrorSample(
            {"yGrad": y, "repeats": np.array([4]), "axis": 1, "out": np.zeros((2, 2), np.float32)},
            INVALID,
            "groups do not cover the axis",
        )
        yield ErrorSample(
            {"yGrad": y, "repeats": np.array([2]), "axis": 1, "out": np.zeros((5,), np.float32)},
            INVALID,
            "out not a multiple",
        )
        yield ErrorSample({"yGrad": y, "repeats": np.array([3, 3]), "axis": 2}, INVALID, "axis out of range")

    return OpSpec("RepeatInterleaveGrad", FAMILY, params, infer, samples=gen, error_samples=errors)


# ----------------------------------------------------------------------------- EmbeddingDenseBackward
def padding_row(value: int) -> int:
    """paddingIdx as the int64 torch passed (uint64_t values of 2^63 and above are negative)."""
    return value - 2**64 if value >= 2**63 else value


def _embedding_dense_backward() -> OpSpec:
    params = (
        tensor("grad", FLOATS, min_rank=2),
        tensor("indices", EMBEDDING_INDEX, min_rank=1),
        int_attr("numWeights", c_type="uint64_t", bounds=(0, 2**63 - 1)),
        int_attr("paddingIdx", c_type="uint64_t", bounds=(-(2**63), U64[1])),
        bool_attr("scaleGradByFreq"),
        out("out", FLOATS, c_type="const aclTensor*", max_rank=2),
    )

    def infer(call: Call) -> Infos:
        g, idx = tensor_arg(call, "grad"), tensor_arg(call, "indices")
        rows = math.prod(g.shape[:-1])
        if rows != idx.numel:
            raise invalid(f"grad's leading dims hold {rows} rows; indices holds {idx.numel} values")
        call.plan["padding"] = padding_row(int(call.args["paddingIdx"]))
        return {"out": same((int(call.args["numWeights"]), g.shape[-1]), g.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        idx_dtypes = (np.int64, np.int32, np.float32, np.int16, np.uint8, np.float64, np.int8, np.float16)
        for i, dt in enumerate((D.ACL_FLOAT, D.ACL_BF16, D.ACL_FLOAT16)):
            for j, scale in enumerate((False, True)):
                idx = _ints(rng, 0, 7, (2, 5), idx_dtypes[2 * i + j])
                args = {"grad": S.array(rng, (2, 5, 6), dt), "indices": idx, "numWeights": 7}
                pad = 3 if j else 2**64 - 1  # -1 as uint64_t: no padding row
                yield Sample({**args, "paddingIdx": pad, "scaleGradByFreq": scale}, f"{dt.short} scale={scale}")
        idx = np.array([0, 1, 0, 1, 1], np.bool_)
        g = S.array(rng, (5, 3), D.ACL_FLOAT)
        yield Sample({"grad": g, "indices": idx, "numWeights": 3, "paddingIdx": 5, "scaleGradByFreq": True}, "bool")
        idx = _ints(rng, 0, 2, (300,), np.int64)  # long runs of one row: the sum order matters
        g = S.array(rng, (300, 33), D.ACL_BF16)
        yield Sample({"grad": g, "indices": idx, "numWeights": 4, "paddingIdx": 1, "scaleGradByFreq": False}, "runs")
        idx = _ints(rng, 0, 9, (4, 6), np.int32)  # rows of 16 half-precision columns: 16-byte vectors on rocm
        g = S.array(rng, (4, 6, 16), D.ACL_FLOAT16)
        yield Sample(
            {"grad": g, "indices": idx, "numWeights": 9, "paddingIdx": 1, "scaleGradByFreq": True}, "wide rows"
        )
        idx = np.zeros((0,), np.int64)
        g = np.zeros((0, 4), np.float32)
        yield Sample({"grad": g, "indices": idx, "numWeights": 3, "paddingIdx": 0, "scaleGradByFreq": True}, "empty")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        g = S.array(rng, (4, 3), D.ACL_FLOAT)
        base = {"grad": g, "numWeights": 5, "paddingIdx": 0, "scaleGradByFreq": False}
        yield ErrorSample({**base, "indices": np.array([0, 1, 5, 2])}, INVALID, "index past numWeights")
        yield ErrorSample({**base, "indices": np.array([0, -1, 1, 2])}, INVALID, "negative index")
        yield ErrorSample({**base, "indices": np.array([0, 1, 2])}, INVALID, "rows differ")
        yield ErrorSample({**base, "grad": S.array(rng, (4,), D.ACL_FLOAT), "indices": np.array([0])}, INVALID, "1-d")
        yield ErrorSample(
            {**base, "indices": np.array([0, 1, 2, 3]), "out": np.zeros((5, 3), np.float16)}, INVALID, "out dtype"
        )

    return OpSpec("EmbeddingDenseBackward", FAMILY, params, infer, samples=gen, error_samples=errors)


# ----------------------------------------------------------------------------- accuracy and declarations
def longest_group(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> int:
    """RepeatInterleaveGrad's reduction length: the largest repeat count."""
    reps = np.asarray(args.get("repeats", 1)).astype(np.int64)
    return max(int(reps.max(initial=1)), 1)


def most_frequent(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> int:
    """EmbeddingDenseBackward's reduction length: the most times one index occurs."""
    idx = np.asarray(args.get("indices", np.zeros(0))).astype(np.int64).reshape(-1)
    if idx.size == 0:
        return 1
    _, counts = np.unique(idx, return_counts=True)
    return max(int(counts.max()), 1)


ACCURACY = {
    "RepeatInterleaveGrad": reduction(length_of=longest_group, reason="each group of repeated rows is summed"),
    "EmbeddingDenseBackward": reduction(length_of=most_frequent, reason="rows of one index are summed"),
}

SPECS: list[OpSpec] = with_accuracy(
    [
        _strided_slice(),
        _strided_slice_assign(),
        *(_repeat_interleave(name) for name in REPEAT_FORMS),
        _repeat_interleave_tensor(),
        _repeat_interleave_grad(),
        _embedding_dense_backward(),
    ],
    ACCURACY,
)

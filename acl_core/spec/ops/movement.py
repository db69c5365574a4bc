"""Data-movement operators: indexing, gathers and scatters, concatenation and splitting, slicing,
permutation, broadcasting, padding, triangles, arange and flip.

Index tensors live in device memory, so whether their *values* are in range can only be known when the
kernel runs: phase 1 checks everything about shapes, dtypes and attributes, and every backend must
refuse an out-of-range index value at launch with 161002 without touching memory outside the outputs.

IndexPutImpl also takes bool masks in ``indices`` (CANN lists BOOL beside INT32 / INT64): as in torch's
``index_put_``, a mask of rank r covers the next r dims of selfRef, must match their sizes, and stands for
the coordinates of its true elements in C order. How many there are is known only to the kernel, so
phase 1 checks ``values`` against every size but that count, and the kernel refuses (161002) a values
size along the count's dim that is neither 1 nor the count.

ScatterNdUpdate (CANN says only that indices may not be out of bounds): a negative coordinate is out
of bounds like one past the end (161002 from the kernel; no wrapping), and repeated index tuples keep
the last update in C order, as IndexPutImpl's assignment does (rocm runs it on IndexPutImpl's kernels).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.spec import samples as S
from acl_core.spec.accuracy import input_elements, reduction, with_accuracy
from acl_core.spec.opspec import (
    INVALID,
    Call,
    ErrorSample,
    IndexOf,
    Infos,
    OpSpec,
    OutInfo,
    Role,
    Sample,
    SampleGen,
    bool_attr,
    inplace_twin,
    int_array,
    int_attr,
    invalid,
    out,
    ref,
    scalar,
    tensor,
    tensor_list,
)
from acl_core.spec.plan import declare as declare_plan
from acl_core.spec.promotion import promote_types
from acl_core.spec.rules import (
    ALL,
    ANY_STORAGE,
    INDEX,
    REAL_BOOL,
    broadcast_shapes,
    castable,
    expect_count,
    listed,
    normalize_dim,
    normalize_dims,
    same,
    tensor_arg,
)
from acl_core.tensor import AclIntArray, AclScalar, AclTensor, AclTensorList

# the plan keys this family's rules write (acl_core.spec.plan; docs/KERNELS.md)
declare_plan("int64", "bool", "whether Arange counts in int64 (else in float64)", bool)
declare_plan("pairs", "list[tuple[int, int]]", "ConstantPadNd's (before, after) padding per dim, first dim first", list)
declare_plan(
    "slices", "dict[int, tuple[int, int, int]]", "each sliced axis's (start, end, step), clamped to its size", dict
)

FAMILY = "movement"
MAX_RANK = 8
Shape = tuple[int, ...]

COPY_DTYPES = (D.ACL_FLOAT, D.ACL_BF16, D.ACL_INT64, D.ACL_BOOL)
"""The dtype families every copy-only op's samples are tried with: float, low-precision float, int, bool."""


# ----------------------------------------------------------------------------- argument helpers
def list_arg(call: Call, name: str) -> AclTensorList:
    """Argument ``name`` as a tensor list (it was validated to be one)."""
    value = call.args[name]
    assert isinstance(value, AclTensorList), name
    return value


def int_values(call: Call, name: str) -> tuple[int, ...]:
    """The values of aclIntArray argument ``name``."""
    value = call.args[name]
    assert isinstance(value, AclIntArray), name
    return tuple(value.values)


def scalar_arg(call: Call, name: str) -> AclScalar:
    """Argument ``name`` as an aclScalar (it was validated to be one)."""
    value = call.args[name]
    assert isinstance(value, AclScalar), name
    return value


def _check_rank(shape: Sequence[int], what: str) -> None:
    if len(shape) > MAX_RANK:
        raise invalid(f"{what} would have rank {len(shape)}; at most {MAX_RANK} is supported")


def _check_index_dtype(t: AclTensor, label: str) -> None:
    if t.dtype not in INDEX:
        raise invalid(f"{label} has dtype {t.dtype.short}; index tensors must be int32 or int64")


def _ints(rng: np.random.Generator, low: int, high: int, shape: Sequence[int], dtype: type = np.int64) -> np.ndarray:
    """Random index values in [low, high)."""
    return rng.integers(low, high, size=tuple(shape)).astype(dtype)


# ----------------------------------------------------------------------------- advanced indexing rule
def advanced_index_shape(self_shape: Sequence[int], entries: Sequence[Shape | None]) -> tuple[Shape, Shape]:
    """(result shape, indexed-block shape) of ``self[entries]`` with NumPy/PyTorch advanced indexing.

    ``None`` entries take a whole dimension. The index shapes broadcast together; when the indexed
    dimensions are adjacent the broadcast block replaces them in place, otherwise it goes first.
    """
    positions = [i for i, e in enumerate(entries) if e is not None]
    if not positions:
        return tuple(self_shape), ()
    block = broadcast_shapes(*(e for e in entries if e is not None), names=("indices",))
    kept = [d for i, d in enumerate(self_shape) if i not in positions]
    if positions == list(range(positions[0], positions[-1] + 1)):
        first = positions[0]
        return (*self_shape[:first], *block, *self_shape[positions[-1] + 1 :]), block
    return (*block, *kept), block


def _index_entries(call: Call, self_t: AclTensor, name: str = "indices") -> list[Shape | None]:
    """Each entry's shape, or None for an empty entry (CANN's marker for 'this dimension is not indexed')."""
    tl = list_arg(call, name)
    if len(tl) > self_t.rank:
        raise invalid(f"{name} holds {len(tl)} tensors but self has only {self_t.rank} dimensions")
    entries: list[Shape | None] = []
    for i, t in enumerate(tl.tensors):
        if t.numel == 0:
            entries.append(None)
            continue
        _check_index_dtype(t, f"{name}[{i}]")
        if t.rank > MAX_RANK:
            raise invalid(f"{name}[{i}] has rank {t.rank}; at most {MAX_RANK} is supported")
        entries.append(tuple(t.shape))
    return entries


# ----------------------------------------------------------------------------- gathers
def _embedding() -> OpSpec:
    params = (
        tensor("weight", ANY_STORAGE, min_rank=2, max_rank=2),
        tensor("indices", INDEX, index_of=IndexOf("weight")),
        out("out", ANY_STORAGE),
    )

    def infer(call: Call) -> Infos:
        w, idx = tensor_arg(call, "weight"), tensor_arg(call, "indices")
        shape = (*idx.shape, w.shape[1])
        _check_rank(shape, "out")
        return {"out": same(shape, w.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in COPY_DTYPES:
            w = S.array(rng, (6, 3), dt)
            yield Sample({"weight": w, "indices": _ints(rng, 0, 6, (2, 4), np.int32)}, f"{dt.short} 2-d indices")
        yield Sample({"weight": S.array(rng, (5, 2), D.ACL_FLOAT16), "indices": _ints(rng, 0, 5, (7,))}, "1-d int64")
        yield Sample({"weight": S.array(rng, (5, 2), D.ACL_FLOAT), "indices": np.zeros((0,), np.int64)}, "no indices")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        w = S.array(rng, (4, 3), D.ACL_FLOAT)
        yield ErrorSample({"weight": w, "indices": np.array([0, 4], np.int64)}, INVALID, "index past the last row")
        yield ErrorSample({"weight": w, "indices": np.array([-1], np.int64)}, INVALID, "negative index")
        yield ErrorSample({"weight": w, "indices": np.array([0.0], np.float32)}, INVALID, "float indices")
        yield ErrorSample({"weight": S.array(rng, (4,), D.ACL_FLOAT), "indices": np.array([0])}, INVALID, "1-d weight")

    return OpSpec("Embedding", FAMILY, params, infer, samples=gen, error_samples=errors)


def _select_like(name: str) -> OpSpec:
    """IndexSelect (index 0-d or 1-d) and GatherV2 (any index rank; its shape replaces ``dim``)."""
    v2 = name == "GatherV2"
    params = (
        tensor("self", ANY_STORAGE, min_rank=1 if v2 else 0),
        int_attr("dim"),
        tensor(
            "index",
            INDEX,
            min_rank=1 if v2 else 0,
            max_rank=MAX_RANK if v2 else 1,
            index_of=IndexOf("self", "dim", "wrap" if v2 else "refuse"),
        ),
        out("out", ANY_STORAGE),
    )

    def infer(call: Call) -> Infos:
        t, idx = tensor_arg(call, "self"), tensor_arg(call, "index")
        dim = normalize_dim(call.args["dim"], t.rank)
        call.plan["dim"] = dim
        if t.rank == 0:  # a 0-d self has one element to select, and the result stays 0-d
            if idx.numel != 1:
                raise invalid(f"a 0-d self takes an index of one element, not {idx.numel}")
            return {"out": same((), t.dtype)}
        middle = tuple(idx.shape) if v2 else (idx.numel,)
        shape = (*t.shape[:dim], *middle, *t.shape[dim + 1 :])
        _check_rank(shape, "out")
        return {"out": same(shape, t.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in COPY_DTYPES:
            x = S.array(rng, (4, 5, 3), dt)
            low = -5 if v2 else 0  # GatherV2 wraps negative positions (the official example uses them)
            yield Sample({"self": x, "dim": 1, "index": _ints(rng, low, 5, (6,), np.int32)}, f"{dt.short} dim 1")
            yield Sample({"self": x, "dim": -1, "index": _ints(rng, 0, 3, (2,))}, f"{dt.short} dim -1")
        if v2:
            x = S.array(rng, (3, 4), D.ACL_INT8)
            yield Sample({"self": x, "dim": 0, "index": _ints(rng, 0, 3, (2, 2))}, "int8 2-d index")
        else:
            yield Sample({"self": np.array(2.5, np.float32), "dim": 0, "index": np.array([0])}, "0-d self")
        yield Sample(
            {"self": S.array(rng, (3, 4), D.ACL_FLOAT), "dim": 0, "index": np.zeros((0,), np.int64)}, "empty index"
        )
        yield Sample({"self": S.array(rng, (0, 4), D.ACL_FLOAT16), "dim": 1, "index": np.array([3, 0])}, "empty self")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = S.array(rng, (3, 4), D.ACL_FLOAT)
        yield ErrorSample({"self": x, "dim": 2, "index": np.array([0])}, INVALID, "dim out of range")
        yield ErrorSample({"self": x, "dim": 1, "index": np.array([4])}, INVALID, "index value past the end")
        yield ErrorSample({"self": x, "dim": 1, "index": np.array([-5])}, INVALID, "index value before the start")
        if not v2:
            yield ErrorSample({"self": x, "dim": 1, "index": np.array([[0]])}, INVALID, "2-d index")
            yield ErrorSample({"self": x, "dim": 1, "index": np.array([-1])}, INVALID, "negative index value")

    return OpSpec(name, FAMILY, params, infer, samples=gen, error_samples=errors)


def _gather() -> OpSpec:
    params = (
        tensor("self", ANY_STORAGE),
        int_attr("dim"),
        tensor("index", INDEX, index_of=IndexOf("self", "dim")),
        out("out", ANY_STORAGE),
    )

    def infer(call: Call) -> Infos:
        t, idx = tensor_arg(call, "self"), tensor_arg(call, "index")
        dim = normalize_dim(call.args["dim"], t.rank)
        if idx.rank != t.rank:
            raise invalid(f"index has rank {idx.rank}; it must have self's rank {t.rank}")
        for d, (n, m) in enumerate(zip(idx.shape, t.shape)):
            if d != dim and n > m:
                raise invalid(f"index size {n} exceeds self size {m} in dimension {d}")
        call.plan["dim"] = dim
        return {"out": same(idx.shape, t.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in COPY_DTYPES:
            x = S.array(rng, (4, 5), dt)
            yield Sample({"self": x, "dim": 1, "index": _ints(rng, 0, 5, (3, 7), np.int32)}, f"{dt.short} dim 1")
            yield Sample({"self": x, "dim": -2, "index": _ints(rng, 0, 4, (2, 5))}, f"{dt.short} dim -2")
        yield Sample({"self": np.array(3, np.int32), "dim": 0, "index": np.array(0, np.int64)}, "0-d")
        yield Sample(
            {"self": S.array(rng, (3, 4), D.ACL_FLOAT), "dim": 0, "index": np.zeros((0, 4), np.int64)}, "empty"
        )

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = S.array(rng, (3, 4), D.ACL_FLOAT)
        yield ErrorSample({"self": x, "dim": 0, "index": np.array([[3]])}, INVALID, "index value past the end")
        yield ErrorSample({"self": x, "dim": 0, "index": np.array([0])}, INVALID, "index rank differs")
        yield ErrorSample({"self": x, "dim": 0, "index": np.zeros((1, 5), np.int64)}, INVALID, "index wider than self")
        yield ErrorSample({"self": x, "dim": -3, "index": np.zeros((1, 1), np.int64)}, INVALID, "dim out of range")

    return OpSpec("Gather", FAMILY, params, infer, samples=gen, error_samples=errors)


def _index() -> OpSpec:
    params = (
        tensor("self", ANY_STORAGE, min_rank=1),
        tensor_list("indices", index_of=IndexOf("self", negative="wrap", each=True)),
        out("out", ANY_STORAGE),
    )

    def infer(call: Call) -> Infos:
        t = tensor_arg(call, "self")
        entries = _index_entries(call, t)
        shape, _ = advanced_index_shape(t.shape, entries)
        _check_rank(shape, "out")
        return {"out": same(shape, t.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        none = np.zeros((0,), np.int64)  # an empty entry takes the whole dimension
        for dt in COPY_DTYPES:
            x = S.array(rng, (4, 5, 3), dt)
            yield Sample({"self": x, "indices": [_ints(rng, -4, 4, (2, 3))]}, f"{dt.short} first dim, negatives")
            yield Sample(
                {"self": x, "indices": [_ints(rng, 0, 4, (2, 1)), _ints(rng, 0, 5, (3,), np.int32)]},
                f"{dt.short} broadcast pair",
            )
        x = S.array(rng, (4, 5, 3), D.ACL_FLOAT16)
        yield Sample({"self": x, "indices": [none, _ints(rng, 0, 5, (2,))]}, "whole first dim")
        yield Sample({"self": x, "indices": [_ints(rng, 0, 4, (2,)), none, _ints(rng, 0, 3, (2,))]}, "split by a slice")
        yield Sample({"self": S.array(rng, (0, 3), D.ACL_FLOAT), "indices": [none, np.array([2, 0])]}, "empty self")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = S.array(rng, (3, 4), D.ACL_FLOAT)
        yield ErrorSample({"self": x, "indices": [np.array([3])]}, INVALID, "index value past the end")
        yield ErrorSample({"self": x, "indices": [np.array([-4])]}, INVALID, "index value before the start")
        yield ErrorSample({"self": x, "indices": [np.array([0, 1]), np.array([0, 1, 2])]}, INVALID, "no broadcast")
        yield ErrorSample({"self": x, "indices": [np.array([0])] * 3}, INVALID, "more indices than dims")
        yield ErrorSample({"self": x, "indices": [np.array([0.0], np.float32)]}, INVALID, "float index")

    return OpSpec("Index", FAMILY, params, infer, samples=gen, error_samples=errors)


# ----------------------------------------------------------------------------- bool masks
COUNT = -1
"""A size only the kernel knows: the number of true elements of a bool mask index."""


def _broadcast_counted(*shapes: Sequence[int]) -> Shape:
    """NumPy broadcasting where :data:`COUNT` matches any size (the kernel checks the real count)."""
    rank = max((len(s) for s in shapes), default=0)
    result: list[int] = []
    for d in range(rank):
        sizes = {s[len(s) - rank + d] for s in shapes if len(s) - rank + d >= 0} - {1}
        fixed = sizes - {COUNT}
        if len(fixed) > 1:
            raise invalid(f"indices of shapes {[list(s) for s in shapes]} do not broadcast together")
        result.append(fixed.pop() if fixed else (COUNT if COUNT in sizes else 1))
    return tuple(result)


def masked_index_entries(call: Call, self_t: AclTensor, name: str = "indices") -> list[Shape | None]:
    """The entries of ``indices`` with each bool mask expanded, as torch does, into one entry per dim it covers.

    A bool mask of rank r covers the next r dimensions of self and must match their sizes; it stands for
    the r coordinate tensors of its true elements, each of shape ``(COUNT,)``.
    """
    tl = list_arg(call, name)
    entries: list[Shape | None] = []
    for i, t in enumerate(tl.tensors):
        d = len(entries)
        if t.numel == 0:
            entries.append(None)
        elif t.dtype is D.ACL_BOOL:
            if t.rank == 0:
                raise invalid(f"{name}[{i}] is a 0-d bool mask; a mask needs at least one dimension")
            covered = tuple(self_t.shape[d : d + t.rank])
            if tuple(t.shape) != covered:
                raise invalid(f"{name}[{i}] is a mask of shape {list(t.shape)}; self's dims {d}.. are {list(covered)}")
            entries += [(COUNT,)] * t.rank
        else:
            _check_index_dtype(t, f"{name}[{i}]")
            if t.rank > MAX_RANK:
                raise invalid(f"{name}[{i}] has rank {t.rank}; at most {MAX_RANK} is supported")
            entries.append(tuple(t.shape))
        if len(entries) > self_t.rank:
            raise invalid(f"{name} indexes {len(entries)} dimensions but self has only {self_t.rank}")
    return entries


def masked_index_shape(self_shape: Sequence[int], entries: Sequence[Shape | None]) -> Shape:
    """:func:`advanced_index_shape` where entries may hold :data:`COUNT` sizes."""
    positions = [i for i, e in enumerate(entries) if e is not None]
    if not positions:
        return tuple(self_shape)
    block = _broadcast_counted(*(e for e in entries if e is not None))
    if positions == list(range(positions[0], positions[-1] + 1)):
        return (*self_shape[: positions[0]], *block, *self_shape[positions[-1] + 1 :])
    return (*block, *(d for i, d in enumerate(self_shape) if i not in positions))


# ----------------------------------------------------------------------------- scatters
def _index_put_impl() -> OpSpec:
    params = (
        ref("selfRef", REAL_BOOL),
        tensor_list("indices", index_of=IndexOf("selfRef", negative="wrap", each=True)),
        tensor("values", REAL_BOOL),
        bool_attr("accumulate", c_type="const bool"),
        bool_attr("unsafe", c_type="const bool"),
    )

    def infer(call: Call) -> Infos:
        t, v = tensor_arg(call, "selfRef"), tensor_arg(call, "values")
        if t.rank < 1:
            raise invalid("selfRef must have at least one dimension")
        if v.dtype != t.dtype:
            raise invalid(f"values has dtype {v.dtype.short}; it must match selfRef's {t.dtype.short}")
        shape = masked_index_shape(t.shape, masked_index_entries(call, t))
        if len(v.shape) > len(shape) or any(
            n not in (1, m) and m != COUNT for n, m in zip(v.shape[::-1], shape[::-1])
        ):  # a size against a mask's COUNT is checked by the kernel
            shown = ["count" if m == COUNT else m for m in shape]
            raise invalid(f"values {list(v.shape)} does not broadcast to the indexed shape {shown}")
        return {"selfRef": same(t.shape, t.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        none = np.zeros((0,), np.int64)
        for dt in (D.ACL_FLOAT, D.ACL_BF16, D.ACL_INT32, D.ACL_BOOL):
            x = S.array(rng, (5, 4), dt)
            rows = rng.permutation(5)[:3].astype(np.int64)  # distinct: plain assignment has no duplicate order
            yield Sample(
                {"selfRef": x, "indices": [rows], "values": S.array(rng, (3, 4), dt), "accumulate": False},
                f"{dt.short} rows",
            )
            dup = np.array([1, -4, 1, 0], np.int32)  # rows 1 three times (-4 is row 1)
            yield Sample(
                {"selfRef": x, "indices": [dup], "values": S.array(rng, (4,), dt), "accumulate": True},
                f"{dt.short} duplicates accumulate",
            )
        x = S.array(rng, (3, 4, 2), D.ACL_FLOAT16)
        yield Sample(
            {
                "selfRef": x,
                "indices": [none, np.array([0, 3]), np.array([[1], [0]])],
                "values": np.array(7.0, np.float16),
                "accumulate": False,
            },
            "broadcast index pair, scalar value",
        )
        yield Sample(
            {"selfRef": x, "indices": [np.zeros((0,), np.int64)], "values": S.array(rng, (3, 4, 2), D.ACL_FLOAT16)},
            "whole tensor",
        )
        yield from _mask_put_samples(rng)

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = S.array(rng, (3, 4), D.ACL_FLOAT)
        v = S.array(rng, (1,), D.ACL_FLOAT)
        yield ErrorSample({"selfRef": x, "indices": [np.array([3])], "values": v}, INVALID, "index value past the end")
        yield ErrorSample(
            {"selfRef": x, "indices": [np.array([0])], "values": S.array(rng, (1,), D.ACL_INT32)},
            INVALID,
            "values of another dtype",
        )
        yield ErrorSample(
            {"selfRef": x, "indices": [np.array([0, 1])], "values": S.array(rng, (3, 4), D.ACL_FLOAT)},
            INVALID,
            "values that do not broadcast",
        )
        mask = np.array([True, False, True])
        yield ErrorSample(
            {"selfRef": x, "indices": [mask], "values": S.array(rng, (3, 4), D.ACL_FLOAT)},
            INVALID,
            "values longer than the mask's true count (known only to the kernel)",
        )
        yield ErrorSample({"selfRef": x, "indices": [mask[:2]], "values": v}, INVALID, "mask shorter than its dim")
        yield ErrorSample({"selfRef": x, "indices": [np.array(True)], "values": v}, INVALID, "0-d mask")

    def with_flags(gen_fn: SampleGen) -> SampleGen:
        def wrapped(rng: np.random.Generator) -> Iterable[Sample]:
            for s in gen_fn(rng):
                yield replace(s, args={"accumulate": False, "unsafe": True, **s.args})

        return wrapped

    def errors_with_flags(rng: np.random.Generator) -> Iterable[ErrorSample]:
        for e in errors(rng):
            yield replace(e, args={"accumulate": False, "unsafe": True, **e.args})

    return OpSpec("IndexPutImpl", FAMILY, params, infer, samples=with_flags(gen), error_samples=errors_with_flags)


def _mask_put_samples(rng: np.random.Generator) -> Iterable[Sample]:
    """IndexPutImpl with bool mask indices: every dtype family, masks over one and two dims, after a whole dim."""
    none = np.zeros((0,), np.int64)
    for dt in (D.ACL_FLOAT, D.ACL_BF16, D.ACL_INT32, D.ACL_BOOL):
        x = S.array(rng, (5, 4), dt)
        mask = rng.random(5) < 0.5
        mask[1] = True  # at least one row is chosen
        count = int(mask.sum())
        yield Sample(
            {"selfRef": x, "indices": [mask], "values": S.array(rng, (count, 4), dt)}, f"{dt.short} mask of rows"
        )
        yield Sample(
            {"selfRef": x, "indices": [rng.random((5, 4)) < 0.4], "values": S.array(rng, (1,), dt), "accumulate": True},
            f"{dt.short} 2-d mask, broadcast value, accumulate",
        )
    x = S.array(rng, (2, 3, 4), D.ACL_FLOAT16, special=True)
    mask = np.array([[True, False, True, True]] * 2 + [[False] * 4])
    yield Sample(
        {"selfRef": x, "indices": [none, mask], "values": S.array(rng, (2, 6), D.ACL_FLOAT16), "accumulate": True},
        "mask after a whole dim, accumulate",
    )
    yield Sample(
        {"selfRef": x, "indices": [np.zeros((2, 3), np.bool_)], "values": S.array(rng, (4,), D.ACL_FLOAT16)},
        "all-false mask",
    )


def _scatter_update() -> OpSpec:
    params = (
        ref("data", ANY_STORAGE),
        tensor("indices", INDEX, max_rank=2, index_of=IndexOf("data", "axis")),
        tensor("updates", ANY_STORAGE),
        int_attr("axis"),
    )

    def infer(call: Call) -> Infos:
        data, idx, upd = (tensor_arg(call, n) for n in ("data", "indices", "updates"))
        rank = data.rank
        if rank < 2:
            raise invalid(f"data has rank {rank}; at least 2 is required")
        if upd.dtype != data.dtype:
            raise invalid(f"updates has dtype {upd.dtype.short}; it must match data's {data.dtype.short}")
        if upd.rank != rank:
            raise invalid(f"updates has rank {upd.rank}; it must match data's rank {rank}")
        if data.numel == 0 or upd.numel == 0 or idx.numel == 0:
            raise invalid("data, indices and updates must not be empty")
        axis = call.args["axis"]
        if not -rank < axis < rank or axis % rank == 0:
            raise invalid(f"axis={axis} must lie in ({-rank}, {rank}) and must not be the batch axis 0")
        axis %= rank
        batches = 1 if idx.rank == 0 else idx.shape[0]
        if idx.rank == 2 and idx.shape[1] != 2:
            raise invalid(f"2-d indices must have 2 columns (batch, offset), not {idx.shape[1]}")
        if upd.shape[0] != batches:
            raise invalid(f"updates has {upd.shape[0]} batches but indices gives {batches}")
        if upd.shape[0] > data.shape[0]:
            raise invalid(f"updates has {upd.shape[0]} batches, more than data's {data.shape[0]}")
        for d in range(1, rank):
            if d != axis and upd.shape[d] != data.shape[d]:
                raise invalid(f"updates size {upd.shape[d]} differs from data's {data.shape[d]} in dimension {d}")
        if upd.shape[axis] > data.shape[axis]:
            raise invalid(f"updates is longer than data along axis {axis}")
        call.plan["axis"] = axis
        return {"data": same(data.shape, data.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in (D.ACL_FLOAT, D.ACL_BF16, D.ACL_INT32, D.ACL_UINT8):
            data = S.array(rng, (3, 2, 6, 4), dt)
            yield Sample(
                {
                    "data": data,
                    "indices": np.array([1, 0, 5], np.int64),
                    "updates": S.array(rng, (3, 2, 1, 4), dt),
                    "axis": -2,
                },
                f"{dt.short} one row per batch",
            )
        data = S.array(rng, (3, 2, 6, 4), D.ACL_FLOAT16)
        yield Sample(
            {
                "data": data,
                "indices": np.array([[2, 1], [0, 3]], np.int32),
                "updates": S.array(rng, (2, 2, 3, 4), D.ACL_FLOAT16),
                "axis": 2,
            },
            "2-d indices, 3 rows",
        )
        yield Sample(
            {
                "data": data,
                "indices": np.array(1, np.int64),
                "updates": S.array(rng, (1, 2, 6, 2), D.ACL_FLOAT16),
                "axis": -1,
            },
            "0-d index",
        )

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        data = S.array(rng, (2, 5), D.ACL_FLOAT)
        upd = S.array(rng, (2, 2), D.ACL_FLOAT)
        yield ErrorSample(
            {"data": data, "indices": np.array([0, 4]), "updates": upd, "axis": 1},
            INVALID,
            "offset + length past the end",
        )
        yield ErrorSample(
            {"data": data, "indices": np.array([0, -1]), "updates": upd, "axis": 1}, INVALID, "negative offset"
        )
        yield ErrorSample({"data": data, "indices": np.array([0, 1]), "updates": upd, "axis": 0}, INVALID, "axis 0")
        yield ErrorSample(
            {"data": data, "indices": np.array([0]), "updates": upd, "axis": 1}, INVALID, "batch count mismatch"
        )

    return OpSpec("InplaceScatterUpdate", FAMILY, params, infer, samples=gen, error_samples=errors)


SCATTER_ND_DTYPES = frozenset({D.ACL_FLOAT16, D.ACL_BF16, D.ACL_FLOAT, D.ACL_INT64, D.ACL_BOOL, D.ACL_INT8})


def _scatter_nd_update() -> OpSpec:
    """ScatterNdUpdate: varRef[indices[i]] = updates[i] for each index tuple (last dim of indices) in C order.

    Choices (CANN's doc says only that indices may not be out of bounds): a negative coordinate is out of
    bounds (161002, as one past the end), no wrapping; repeated tuples keep the last update in C order.
    """
    params = (
        ref("varRef", SCATTER_ND_DTYPES),
        tensor("indices", INDEX),
        tensor("updates", SCATTER_ND_DTYPES),
    )

    def infer(call: Call) -> Infos:
        var, idx, upd = tensor_arg(call, "varRef"), tensor_arg(call, "indices"), tensor_arg(call, "updates")
        if var.rank < 1:
            raise invalid("varRef must have at least one dimension")
        if upd.dtype != var.dtype:
            raise invalid(f"updates has dtype {upd.dtype.short}; it must match varRef's {var.dtype.short}")
        if idx.rank < 2:
            raise invalid(f"indices must have at least two dimensions, got shape {list(idx.shape)}")
        depth = idx.shape[-1]
        if not 1 <= depth <= var.rank:
            raise invalid(f"indices' last dim {depth} must be in [1, {var.rank}] (varRef's rank)")
        want = (*idx.shape[:-1], *var.shape[depth:])
        if tuple(upd.shape) != want:
            raise invalid(f"updates has shape {list(upd.shape)}; expected {list(want)} (indices' lead + varRef's tail)")
        return {"varRef": same(var.shape, var.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for i, dt in enumerate(sorted(SCATTER_ND_DTYPES, key=int)):
            var = S.array(rng, (4, 5, 6), dt)
            picks = rng.permutation(20)[:3]
            idx = np.stack([picks // 5, picks % 5], axis=-1).astype(np.int64 if i % 2 else np.int32)
            yield Sample({"varRef": var, "indices": idx, "updates": S.array(rng, (3, 6), dt)}, f"{dt.short} rows")
        var = S.array(rng, (6, 7), D.ACL_FLOAT)
        idx = np.array([[[1, 2], [5, 6]], [[0, 0], [1, 2]]], np.int64)  # (1, 2) twice: the later update wins
        yield Sample(
            {"varRef": var, "indices": idx, "updates": S.array(rng, (2, 2), D.ACL_FLOAT)}, "elements, repeated"
        )
        var = S.array(rng, (40, 130), D.ACL_BF16)
        idx = rng.permutation(40)[:17].reshape(17, 1).astype(np.int64)
        yield Sample({"varRef": var, "indices": idx, "updates": S.array(rng, (17, 130), D.ACL_BF16)}, "bf16 17 rows")
        var = S.array(rng, (3, 4), D.ACL_FLOAT16)
        empty = np.zeros((0, 1), np.int64)
        yield Sample({"varRef": var, "indices": empty, "updates": S.array(rng, (0, 4), D.ACL_FLOAT16)}, "no updates")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        var = S.array(rng, (4, 5), D.ACL_FLOAT)
        upd = S.array(rng, (2, 5), D.ACL_FLOAT)
        yield ErrorSample({"varRef": var, "indices": np.array([0, 1]), "updates": upd}, INVALID, "1-d indices")
        idx = np.array([[0], [1]], np.int64)
        yield ErrorSample({"varRef": var, "indices": idx, "updates": upd[:, :4].copy()}, INVALID, "updates' tail")
        deep = np.zeros((2, 3), np.int64)
        yield ErrorSample({"varRef": var, "indices": deep, "updates": upd[:, 0].copy()}, INVALID, "depth past rank")
        yield ErrorSample(
            {"varRef": var, "indices": idx, "updates": upd.astype(np.float16)}, INVALID, "updates dtype differs"
        )
        yield ErrorSample({"varRef": var, "indices": np.array([[0], [4]]), "updates": upd}, INVALID, "row past the end")
        yield ErrorSample({"varRef": var, "indices": np.array([[0], [-1]]), "updates": upd}, INVALID, "negative row")
        pairs = np.array([[0, 1], [3, 5]], np.int32)
        yield ErrorSample(
            {"varRef": var, "indices": pairs, "updates": upd[:, 0].copy()}, INVALID, "column past the end"
        )

    return OpSpec(
        "ScatterNdUpdate",
        FAMILY,
        params,
        infer,
        samples=gen,
        error_samples=errors,
        summary="varRef[indices[..., :]] = updates in place (index tuples over varRef's leading dims)",
    )


def _scatter(name: str) -> OpSpec:
    """Scatter (src tensor) and ScatterValue (one aclScalar); reduce 0 replaces, 1 adds, 2 multiplies."""
    with_value = name == "ScatterValue"
    source = scalar("value") if with_value else tensor("src", ALL)
    params = (
        tensor("self", ALL),
        int_attr("dim"),
        tensor("index", INDEX, index_of=IndexOf("self", "dim")),
        source,
        int_attr("reduce", choices=(0, 1, 2)),
        out("out", ALL),
    )

    def infer(call: Call) -> Infos:
        t, idx = tensor_arg(call, "self"), tensor_arg(call, "index")
        dim = normalize_dim(call.args["dim"], t.rank)
        if idx.rank != t.rank:
            raise invalid(f"index has rank {idx.rank}; it must have self's rank {t.rank}")
        for d, (n, m) in enumerate(zip(idx.shape, t.shape)):
            if d != dim and n > m:
                raise invalid(f"index size {n} exceeds self size {m} in dimension {d}")
        if with_value:
            if scalar_arg(call, "value").dtype.is_complex and not t.dtype.is_complex:
                raise invalid(f"a complex value cannot be scattered into {t.dtype.short}")
        else:
            src = tensor_arg(call, "src")
            if src.dtype != t.dtype:
                raise invalid(f"src has dtype {src.dtype.short}; it must match self's {t.dtype.short}")
            if src.rank != t.rank:
                raise invalid(f"src has rank {src.rank}; it must have self's rank {t.rank}")
            for d, (n, m) in enumerate(zip(idx.shape, src.shape)):
                if n > m:
                    raise invalid(f"index size {n} exceeds src size {m} in dimension {d}")
        call.plan["dim"] = dim
        return {"out": same(t.shape, t.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_INT32, D.ACL_BOOL):
            x = S.array(rng, (4, 5), dt, low=-3, high=3)
            src: Any = 2 if with_value else S.array(rng, (4, 6), dt, low=-3, high=3)
            key = "value" if with_value else "src"
            for reduce in (0, 1, 2):
                index = _ints(rng, 0, 5, (3, 4), np.int32) if reduce else _distinct_rows(rng, 3, 4, 5)
                yield Sample(
                    {"self": x, "dim": 1, "index": index, key: src, "reduce": reduce}, f"{dt.short} reduce {reduce}"
                )
        x = S.array(rng, (4, 5), D.ACL_BF16)
        yield Sample(
            {
                "self": x,
                "dim": -2,
                "index": _ints(rng, 0, 4, (6, 2)),
                "value" if with_value else "src": 1.5 if with_value else S.array(rng, (6, 5), D.ACL_BF16),
                "reduce": 1,
            },
            "bf16 dim -2 add",
        )
        yield Sample(
            {
                "self": x,
                "dim": 0,
                "index": np.zeros((0, 5), np.int64),
                "value" if with_value else "src": 1.5 if with_value else S.array(rng, (1, 5), D.ACL_BF16),
                "reduce": 0,
            },
            "empty index",
        )

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = S.array(rng, (3, 4), D.ACL_FLOAT)
        key = "value" if with_value else "src"
        src: Any = 1.0 if with_value else S.array(rng, (3, 4), D.ACL_FLOAT)
        base = {"self": x, key: src, "reduce": 0}
        yield ErrorSample({**base, "dim": 1, "index": np.array([[4]])}, INVALID, "index value past the end")
        yield ErrorSample({**base, "dim": 1, "index": np.array([[-1]])}, INVALID, "negative index value")
        yield ErrorSample({**base, "dim": 2, "index": np.array([[0]])}, INVALID, "dim out of range")
        yield ErrorSample({**base, "dim": 1, "index": np.array([0])}, INVALID, "index rank differs")
        yield ErrorSample({**base, "dim": 1, "index": np.array([[0]]), "reduce": 3}, INVALID, "reduce 3")
        if not with_value:
            small = {**base, key: S.array(rng, (1, 1), D.ACL_FLOAT)}
            yield ErrorSample({**small, "dim": 1, "index": np.zeros((2, 2), np.int64)}, INVALID, "index wider than src")

    return OpSpec(name, FAMILY, params, infer, samples=gen, error_samples=errors)


def _distinct_rows(rng: np.random.Generator, rows: int, cols: int, bound: int) -> np.ndarray:
    """Indices with no repeat inside a row (plain scatter leaves the order of duplicates undefined)."""
    return np.stack([rng.permutation(bound)[:cols] for _ in range(rows)]).astype(np.int64)


Case = TypeVar("Case", Sample, ErrorSample)


def _rename_self(
    gen_fn: Callable[[np.random.Generator], Iterable[Case]],
) -> Callable[[np.random.Generator], Iterable[Case]]:
    """The base op's cases with ``self`` passed as ``selfRef`` and no ``out`` (for in-place twins)."""

    def wrapped(rng: np.random.Generator) -> Iterable[Case]:
        for case in gen_fn(rng):
            args = {k: v for k, v in case.args.items() if k not in ("self", "out")}
            args["selfRef"] = case.args["self"]
            yield replace(case, args=args)

    return wrapped


def twin(base: OpSpec) -> OpSpec:
    """``aclnnInplaceXxx`` of ``base``, with the base's conformance cases (and error cases) renamed."""
    made = inplace_twin(base, samples=_rename_self(base.samples) if base.samples else None)
    return replace(made, error_samples=_rename_self(base.error_samples) if base.error_samples else None)


# ----------------------------------------------------------------------------- joining and splitting
def _joined_dtype(tl: AclTensorList) -> D:
    dtype = tl.tensors[0].dtype
    for t in tl.tensors[1:]:
        dtype = promote_types(dtype, t.dtype)
    return dtype


def _cat() -> OpSpec:
    params = (tensor_list("tensors", ANY_STORAGE), int_attr("dim"), out("out", ANY_STORAGE))

    def infer(call: Call) -> Infos:
        tl = list_arg(call, "tensors")
        if len(tl) == 0:
            raise invalid("tensors is an empty list")
        dtype = _joined_dtype(tl)
        # torch's legacy rule, which CANN keeps: 1-d tensors of shape [0] take no part in the shape check
        used = [(i, t) for i, t in enumerate(tl.tensors) if tuple(t.shape) != (0,)]
        if not used:
            return {"out": castable((0,), dtype)}
        first_i, first = used[0]
        if first.rank == 0:
            raise invalid(f"tensors[{first_i}] is 0-d; a 0-d tensor cannot be concatenated")
        dim = normalize_dim(call.args["dim"], first.rank)
        total = 0
        for i, t in used:
            if t.rank != first.rank:
                raise invalid(f"tensors[{i}] has rank {t.rank}; tensors[{first_i}] has rank {first.rank}")
            for d in range(first.rank):
                if d != dim and t.shape[d] != first.shape[d]:
                    raise invalid(f"tensors[{i}] has size {t.shape[d]} in dimension {d}; expected {first.shape[d]}")
            total += t.shape[dim]
        call.plan["dim"] = dim
        call.plan["compute"] = dtype
        shape = list(first.shape)
        shape[dim] = total
        return {"out": castable(shape, dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in COPY_DTYPES:
            parts = [S.array(rng, (2, n, 3), dt) for n in (1, 4, 2)]
            yield Sample({"tensors": parts, "dim": 1}, f"{dt.short} dim 1")
            yield Sample({"tensors": parts[:1] * 2, "dim": -1}, f"{dt.short} dim -1")
        yield Sample(
            {"tensors": [S.array(rng, (2, 3), D.ACL_INT32), S.array(rng, (1, 3), D.ACL_FLOAT16)], "dim": 0},
            "int32 with float16 promotes",
        )
        yield Sample(
            {
                "tensors": [
                    S.array(rng, (2, 3), D.ACL_FLOAT),
                    np.zeros((0,), np.float32),
                    np.zeros((0, 3), np.float32),
                ],
                "dim": 0,
            },
            "empty members",
        )

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        a, b = S.array(rng, (2, 3), D.ACL_FLOAT), S.array(rng, (2, 4), D.ACL_FLOAT)
        yield ErrorSample({"tensors": [a, b], "dim": 0}, INVALID, "sizes differ off the cat dim")
        yield ErrorSample({"tensors": [a, a], "dim": 2}, INVALID, "dim out of range")
        yield ErrorSample({"tensors": [a, S.array(rng, (2, 3, 1), D.ACL_FLOAT)], "dim": 0}, INVALID, "ranks differ")

    return OpSpec("Cat", FAMILY, params, infer, samples=gen, error_samples=errors)


def _stack() -> OpSpec:
    params = (tensor_list("tensors", ANY_STORAGE), int_attr("dim"), out("out", ANY_STORAGE))

    def infer(call: Call) -> Infos:
        tl = list_arg(call, "tensors")
        if len(tl) == 0:
            raise invalid("tensors is an empty list")
        first = tl.tensors[0]
        for i, t in enumerate(tl.tensors):
            if tuple(t.shape) != tuple(first.shape):
                raise invalid(f"tensors[{i}] has shape {list(t.shape)}; tensors[0] has {list(first.shape)}")
        dim = normalize_dim(call.args["dim"], first.rank + 1)
        shape = (*first.shape[:dim], len(tl), *first.shape[dim:])
        _check_rank(shape, "out")
        call.plan["dim"] = dim
        dtype = _joined_dtype(tl)
        call.plan["compute"] = dtype
        return {"out": castable(shape, dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in COPY_DTYPES:
            parts = [S.array(rng, (2, 3), dt) for _ in range(3)]
            yield Sample({"tensors": parts, "dim": 1}, f"{dt.short} dim 1")
            yield Sample({"tensors": parts[:2], "dim": -1}, f"{dt.short} dim -1 (new last)")
        yield Sample({"tensors": [np.array(1.5, np.float32), np.array(2.5, np.float32)], "dim": 0}, "0-d members")
        yield Sample({"tensors": [np.zeros((0, 2), np.int8)] * 2, "dim": 0}, "empty members")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        a = S.array(rng, (2, 3), D.ACL_FLOAT)
        yield ErrorSample({"tensors": [a, S.array(rng, (3, 2), D.ACL_FLOAT)], "dim": 0}, INVALID, "shapes differ")
        yield ErrorSample({"tensors": [a, a], "dim": 3}, INVALID, "dim out of range")

    return OpSpec("Stack", FAMILY, params, infer, samples=gen, error_samples=errors)


def _split_infos(t: AclTensor, dim: int, sizes: Sequence[int]) -> list[OutInfo]:
    infos = []
    for n in sizes:
        shape = list(t.shape)
        shape[dim] = n
        infos.append(same(shape, t.dtype))
    return infos


def _split_tensor() -> OpSpec:
    params = (
        tensor("self", ANY_STORAGE, min_rank=1),
        int_attr("splitSections", c_type="uint64_t", bounds=(0, 2**64 - 1)),
        int_attr("dim"),
        tensor_list("out", ANY_STORAGE, role=Role.OUT),
    )

    def infer(call: Call) -> Infos:
        t = tensor_arg(call, "self")
        dim = normalize_dim(call.args["dim"], t.rank)
        step, size = call.args["splitSections"], t.shape[dim]
        if size == 0:
            sizes = [0]  # an empty dimension splits into one empty piece, whatever the section size
        elif step == 0:
            raise invalid(f"splitSections=0 cannot split a dimension of size {size}")
        else:
            expect_count(call, "out", -(-size // step))  # before one size per section is built
            sizes = [min(step, size - start) for start in range(0, size, step)]
        call.plan["dim"], call.plan["sizes"] = dim, sizes
        return {"out": _split_infos(t, dim, sizes)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in COPY_DTYPES:
            x = S.array(rng, (3, 7), dt)
            yield Sample({"self": x, "splitSections": 3, "dim": 1}, f"{dt.short} 7 by 3")
            yield Sample({"self": x, "splitSections": 1, "dim": -2}, f"{dt.short} rows")
        yield Sample({"self": S.array(rng, (4, 2), D.ACL_INT8), "splitSections": 9, "dim": 0}, "one section")
        yield Sample({"self": np.zeros((0, 2), np.float32), "splitSections": 2, "dim": 0}, "empty dim")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = S.array(rng, (3, 4), D.ACL_FLOAT)
        yield ErrorSample({"self": x, "splitSections": 0, "dim": 0}, INVALID, "zero sections")
        yield ErrorSample({"self": x, "splitSections": 2, "dim": 2}, INVALID, "dim out of range")
        yield ErrorSample({"self": x, "splitSections": -1, "dim": 0}, INVALID, "negative sections")

    return OpSpec("SplitTensor", FAMILY, params, infer, samples=gen, error_samples=errors)


def _split_with_size() -> OpSpec:
    params = (
        tensor("self", ANY_STORAGE, min_rank=1),
        int_array("splitSize"),
        int_attr("dim"),
        tensor_list("out", ANY_STORAGE, role=Role.OUT),
    )

    def infer(call: Call) -> Infos:
        t = tensor_arg(call, "self")
        dim = normalize_dim(call.args["dim"], t.rank)
        sizes = list(int_values(call, "splitSize"))
        if not sizes:
            raise invalid("splitSize is empty")
        if any(n < 0 for n in sizes):
            raise invalid(f"splitSize {sizes} holds a negative size")
        if sum(sizes) != t.shape[dim]:
            raise invalid(f"splitSize {sizes} sums to {sum(sizes)}, not to the size {t.shape[dim]} of dim {dim}")
        call.plan["dim"], call.plan["sizes"] = dim, sizes
        return {"out": _split_infos(t, dim, sizes)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in COPY_DTYPES:
            x = S.array(rng, (3, 7), dt)
            yield Sample({"self": x, "splitSize": [2, 0, 5], "dim": 1}, f"{dt.short} with an empty piece")
            yield Sample({"self": x, "splitSize": [1, 2], "dim": -2}, f"{dt.short} dim -2")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = S.array(rng, (3, 4), D.ACL_FLOAT)
        yield ErrorSample({"self": x, "splitSize": [1, 2], "dim": 1}, INVALID, "sizes do not sum to the dim")
        yield ErrorSample({"self": x, "splitSize": [5, -1], "dim": 1}, INVALID, "negative size")
        yield ErrorSample({"self": x, "splitSize": [3], "dim": -3}, INVALID, "dim out of range")

    return OpSpec("SplitWithSize", FAMILY, params, infer, samples=gen, error_samples=errors)


# ----------------------------------------------------------------------------- views made concrete
def _permute() -> OpSpec:
    params = (tensor("self", ANY_STORAGE), int_array("dims"), out("out", ANY_STORAGE))

    def infer(call: Call) -> Infos:
        t = tensor_arg(call, "self")
        dims = int_values(call, "dims")
        if len(dims) != t.rank:
            raise invalid(f"dims has {len(dims)} entries; self has {t.rank} dimensions")
        perm = normalize_dims(dims, t.rank, "dims") if t.rank else ()
        call.plan["dims"] = perm
        return {"out": same(tuple(t.shape[d] for d in perm), t.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in COPY_DTYPES:
            yield Sample({"self": S.array(rng, (2, 3, 4), dt), "dims": [2, 0, 1]}, f"{dt.short} rotate")
            yield Sample({"self": S.array(rng, (2, 3, 4), dt), "dims": [-1, 1, -3]}, f"{dt.short} negative dims")
        yield Sample({"self": np.zeros((0, 3), np.int16), "dims": [1, 0]}, "empty")
        yield Sample({"self": np.array(4.0, np.float32), "dims": []}, "0-d")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = S.array(rng, (2, 3), D.ACL_FLOAT)
        yield ErrorSample({"self": x, "dims": [0, 0]}, INVALID, "repeated dim")
        yield ErrorSample({"self": x, "dims": [0]}, INVALID, "too few dims")
        yield ErrorSample({"self": x, "dims": [0, 2]}, INVALID, "dim out of range")

    return OpSpec("Permute", FAMILY, params, infer, samples=gen, error_samples=errors)


def _slice_bounds(start: int, end: int, size: int) -> tuple[int, int]:
    """torch's slice rule: negative positions count from the end, then both clamp to [0, size]."""
    start = start + size if start < 0 else start
    end = end + size if end < 0 else end
    start = min(max(start, 0), size)
    end = min(max(end, start), size)
    return start, end


def _slice() -> OpSpec:
    params = (
        tensor("self", ANY_STORAGE, min_rank=1),
        int_attr("dim"),
        int_attr("start"),
        int_attr("end"),
        int_attr("step"),
        out("out", ANY_STORAGE),
    )

    def infer(call: Call) -> Infos:
        t = tensor_arg(call, "self")
        dim = normalize_dim(call.args["dim"], t.rank)
        step = call.args["step"]
        if step < 1:
            raise invalid(f"step={step} must be positive")
        start, end = _slice_bounds(call.args["start"], call.args["end"], t.shape[dim])
        call.plan["slices"] = {dim: (start, end, step)}
        shape = list(t.shape)
        shape[dim] = -(-(end - start) // step)
        return {"out": same(shape, t.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in COPY_DTYPES:
            x = S.array(rng, (5, 9), dt)
            yield Sample({"self": x, "dim": 1, "start": 1, "end": 8, "step": 3}, f"{dt.short} step 3")
            yield Sample({"self": x, "dim": -2, "start": -4, "end": 100, "step": 1}, f"{dt.short} clamped")
        x = S.array(rng, (5, 9), D.ACL_FLOAT16)
        yield Sample({"self": x, "dim": 0, "start": 4, "end": 2, "step": 1}, "end before start: empty")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = S.array(rng, (3, 4), D.ACL_FLOAT)
        yield ErrorSample({"self": x, "dim": 0, "start": 0, "end": 2, "step": 0}, INVALID, "step 0")
        yield ErrorSample({"self": x, "dim": 2, "start": 0, "end": 2, "step": 1}, INVALID, "dim out of range")

    return OpSpec("Slice", FAMILY, params, infer, samples=gen, error_samples=errors)


def slice_v2_bounds(start: int, end: int, size: int) -> tuple[int, int]:
    """SliceV2's documented clamping of (starts[i], ends[i]) for an axis of ``size`` elements."""
    if size == 0:
        return 0, 0
    if start < -size:
        start = 0
    elif start >= size:
        start = size
    else:
        start = (start + size) % size
    if end >= size:
        end = size
    elif end < -size:  # the documented formula's C remainder is negative here, so it falls back to start
        end = start
    else:
        end = max((end + size) % size, start)
    return start, end


def _slice_v2() -> OpSpec:
    params = (
        tensor("self", ANY_STORAGE, min_rank=1),
        int_array("starts"),
        int_array("ends"),
        int_array("axes"),
        int_array("steps"),
        out("out", ANY_STORAGE),
    )

    def infer(call: Call) -> Infos:
        t = tensor_arg(call, "self")
        starts, ends, axes, steps = (int_values(call, n) for n in ("starts", "ends", "axes", "steps"))
        if not len(starts) == len(ends) == len(axes) == len(steps):
            raise invalid("starts, ends, axes and steps must have the same number of elements")
        norm = normalize_dims(axes, t.rank, "axes")
        shape = list(t.shape)
        slices: dict[int, tuple[int, int, int]] = {}
        for axis, s, e, step in zip(norm, starts, ends, steps):
            if step <= 0:
                raise invalid(f"steps holds {step}; every step must be positive")
            lo, hi = slice_v2_bounds(s, e, t.shape[axis])
            slices[axis] = (lo, hi, step)
            shape[axis] = (hi - lo + step - 1) // step
        call.plan["slices"] = slices
        return {"out": same(shape, t.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in COPY_DTYPES:
            x = S.array(rng, (4, 6, 5), dt)
            yield Sample(
                {"self": x, "starts": [1, -4], "ends": [3, 100], "axes": [0, -2], "steps": [1, 2]}, f"{dt.short} 2 axes"
            )
        x = S.array(rng, (4, 6), D.ACL_INT32)
        yield Sample({"self": x, "starts": [-100], "ends": [-7], "axes": [1], "steps": [1]}, "end before -size: empty")
        yield Sample({"self": x, "starts": [3], "ends": [-2], "axes": [1], "steps": [3]}, "negative end")
        yield Sample({"self": x, "starts": [], "ends": [], "axes": [], "steps": []}, "no axes: copy")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = S.array(rng, (3, 4), D.ACL_FLOAT)
        yield ErrorSample({"self": x, "starts": [0], "ends": [2], "axes": [0], "steps": [0]}, INVALID, "step 0")
        yield ErrorSample({"self": x, "starts": [0], "ends": [2], "axes": [0], "steps": []}, INVALID, "lengths differ")
        yield ErrorSample(
            {"self": x, "starts": [0, 0], "ends": [1, 1], "axes": [1, -1], "steps": [1, 1]}, INVALID, "repeated axis"
        )

    return OpSpec("SliceV2", FAMILY, params, infer, samples=gen, error_samples=errors)


def _expand() -> OpSpec:
    params = (tensor("self", ANY_STORAGE), int_array("size"), out("out", ANY_STORAGE))

    def infer(call: Call) -> Infos:
        t = tensor_arg(call, "self")
        size = int_values(call, "size")
        lead = len(size) - t.rank
        if lead < 0:
            raise invalid(f"size has {len(size)} entries, fewer than self's {t.rank} dimensions")
        shape = []
        for i, n in enumerate(size):
            if i < lead:
                if n < 0:
                    raise invalid(f"size[{i}]={n}: a new leading dimension needs an explicit size")
                shape.append(n)
                continue
            have = t.shape[i - lead]
            if n == -1:
                n = have
            if n < 0 or (have != 1 and n != have):
                raise invalid(f"size[{i}]={n} cannot expand a dimension of size {have}")
            shape.append(n)
        _check_rank(shape, "out")
        return {"out": same(shape, t.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in COPY_DTYPES:
            yield Sample({"self": S.array(rng, (3, 1), dt), "size": [2, 3, 4]}, f"{dt.short} new leading dim")
            yield Sample({"self": S.array(rng, (1, 4), dt), "size": [5, -1]}, f"{dt.short} keep with -1")
        yield Sample({"self": np.array(2, np.int8), "size": [3]}, "0-d")
        yield Sample({"self": S.array(rng, (1, 2), D.ACL_FLOAT), "size": [0, 2]}, "to empty")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = S.array(rng, (3, 2), D.ACL_FLOAT)
        yield ErrorSample({"self": x, "size": [3, 4]}, INVALID, "size 2 cannot become 4")
        yield ErrorSample({"self": x, "size": [2]}, INVALID, "fewer sizes than dims")
        yield ErrorSample({"self": x, "size": [-1, 3, 2]}, INVALID, "-1 for a new dim")

    return OpSpec("Expand", FAMILY, params, infer, samples=gen, error_samples=errors)


def _repeat() -> OpSpec:
    params = (tensor("self", ANY_STORAGE), int_array("repeats"), out("out", ANY_STORAGE))

    def infer(call: Call) -> Infos:
        t = tensor_arg(call, "self")
        reps = int_values(call, "repeats")
        if len(reps) < t.rank:
            raise invalid(f"repeats has {len(reps)} entries, fewer than self's {t.rank} dimensions")
        if any(r < 0 for r in reps):
            raise invalid(f"repeats {list(reps)} holds a negative count")
        padded = (1,) * (len(reps) - t.rank) + tuple(t.shape)
        shape = tuple(n * r for n, r in zip(padded, reps))
        _check_rank(shape, "out")
        return {"out": same(shape, t.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in COPY_DTYPES:
            yield Sample({"self": S.array(rng, (2, 3), dt), "repeats": [2, 1, 3]}, f"{dt.short} with a new dim")
        yield Sample({"self": S.array(rng, (2, 3), D.ACL_INT16), "repeats": [0, 2]}, "zero repeats")
        yield Sample({"self": np.array(1.5, np.float16), "repeats": [4]}, "0-d")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = S.array(rng, (2, 3), D.ACL_FLOAT)
        yield ErrorSample({"self": x, "repeats": [2]}, INVALID, "fewer repeats than dims")
        yield ErrorSample({"self": x, "repeats": [1, -1]}, INVALID, "negative repeat")

    return OpSpec("Repeat", FAMILY, params, infer, samples=gen, error_samples=errors)


def _constant_pad_nd() -> OpSpec:
    params = (tensor("self", ANY_STORAGE), int_array("pad"), scalar("value"), out("out", ANY_STORAGE))

    def infer(call: Call) -> Infos:
        t = tensor_arg(call, "self")
        pad = int_values(call, "pad")
        if len(pad) % 2 or len(pad) > 2 * t.rank:
            raise invalid(f"pad has {len(pad)} entries; it needs an even count of at most {2 * t.rank}")
        value = scalar_arg(call, "value")
        if value.dtype.is_complex and not t.dtype.is_complex:
            raise invalid(f"a complex value cannot pad a {t.dtype.short} tensor")
        pairs = [(0, 0)] * t.rank
        for k in range(len(pad) // 2):  # pad lists (before, after) pairs from the last dimension backwards
            pairs[t.rank - 1 - k] = (pad[2 * k], pad[2 * k + 1])
        shape = [n + b + e for n, (b, e) in zip(t.shape, pairs)]
        if any(n < 0 for n in shape):
            raise invalid(f"pad {list(pad)} would give the negative shape {shape}")
        if any(p > 0 for p in pad) and 0 in shape:
            raise invalid(f"positive padding cannot produce the empty shape {shape}")
        call.plan["pairs"] = pairs
        return {"out": same(shape, t.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in COPY_DTYPES:
            x = S.array(rng, (2, 3, 4), dt)
            yield Sample({"self": x, "pad": [1, 2, 0, 1], "value": 1}, f"{dt.short} last two dims")
        x = S.array(rng, (3, 5), D.ACL_FLOAT16)
        yield Sample({"self": x, "pad": [-1, 2, 1, -2], "value": -0.5}, "negative pads crop")
        yield Sample({"self": x, "pad": [], "value": 0}, "no pad")
        yield Sample({"self": S.array(rng, (3, 5), D.ACL_INT32), "pad": [2, 2], "value": 7}, "int32")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = S.array(rng, (2, 3), D.ACL_FLOAT)
        yield ErrorSample({"self": x, "pad": [1], "value": 0}, INVALID, "odd pad length")
        yield ErrorSample({"self": x, "pad": [1, 1, 1, 1, 1, 1], "value": 0}, INVALID, "pad longer than 2*rank")
        yield ErrorSample({"self": x, "pad": [-2, -2], "value": 0}, INVALID, "crops below zero")

    return OpSpec("ConstantPadNd", FAMILY, params, infer, samples=gen, error_samples=errors)


def _triangle(name: str) -> OpSpec:
    params = (tensor("self", ANY_STORAGE, min_rank=2), int_attr("diagonal"), out("out", ANY_STORAGE))

    def infer(call: Call) -> Infos:
        t = tensor_arg(call, "self")
        return {"out": same(t.shape, t.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in (*COPY_DTYPES, D.ACL_FLOAT16):
            x = S.array(rng, (2, 4, 5), dt)
            for diagonal in (0, 2, -1):
                yield Sample({"self": x, "diagonal": diagonal}, f"{dt.short} diagonal {diagonal}")
        yield Sample({"self": np.zeros((3, 0), np.float32), "diagonal": 0}, "empty")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        yield ErrorSample({"self": S.array(rng, (4,), D.ACL_FLOAT), "diagonal": 0}, INVALID, "1-d self")

    return OpSpec(name, FAMILY, params, infer, samples=gen, error_samples=errors)


def _flip() -> OpSpec:
    params = (tensor("self", ANY_STORAGE), int_array("dims"), out("out", ANY_STORAGE))

    def infer(call: Call) -> Infos:
        t = tensor_arg(call, "self")
        call.plan["dims"] = normalize_dims(int_values(call, "dims"), t.rank, "dims")
        return {"out": same(t.shape, t.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in COPY_DTYPES:
            yield Sample({"self": S.array(rng, (3, 4, 2), dt), "dims": [0, -1]}, f"{dt.short} two dims")
        yield Sample({"self": S.array(rng, (3, 4), D.ACL_UINT8), "dims": []}, "no dims: copy")
        yield Sample({"self": np.zeros((0, 4), np.float32), "dims": [1]}, "empty")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = S.array(rng, (3, 4), D.ACL_FLOAT)
        yield ErrorSample({"self": x, "dims": [0, -2]}, INVALID, "repeated dim")
        yield ErrorSample({"self": x, "dims": [2]}, INVALID, "dim out of range")

    return OpSpec("Flip", FAMILY, params, infer, samples=gen, error_samples=errors)


# ----------------------------------------------------------------------------- arange
ARANGE_OUT = frozenset({D.ACL_FLOAT16, D.ACL_FLOAT, D.ACL_DOUBLE, D.ACL_INT32, D.ACL_INT64, D.ACL_BF16})


def arange_length(start: float, end: float, step: float) -> int:
    """ceil((end - start) / step) in double, as callers size ``out``; 161002 for a step that cannot reach end."""
    if not all(math.isfinite(v) for v in (start, end, step)):
        raise invalid(f"arange bounds must be finite: start={start}, end={end}, step={step}")
    _check_step(start, end, step, "double")
    return max(math.ceil((end - start) / step), 0)


def _check_step(start: float, end: float, step: float, kind: str) -> None:
    if step == 0:
        raise invalid(f"step is 0 once converted to {kind}")
    if (step > 0 and start > end) or (step < 0 and start < end):
        raise invalid(f"step={step} cannot go from start={start} to end={end} ({kind})")


def _arange() -> OpSpec:
    params = (scalar("start", REAL_BOOL), scalar("end", REAL_BOOL), scalar("step", REAL_BOOL), out("out", ARANGE_OUT))

    def infer(call: Call) -> Infos:
        scalars = [scalar_arg(call, n) for n in ("start", "end", "step")]
        start, end, step = (float(s.value.real if isinstance(s.value, complex) else s.value) for s in scalars)
        n = arange_length(start, end, step)
        integral = all(not s.dtype.is_float for s in scalars)
        given = call.args.get("out")
        dtype = given.dtype if isinstance(given, AclTensor) else D.ACL_INT64 if integral else D.ACL_FLOAT
        # CANN checks the bounds again in out's type: integer outs truncate them to int64 (a step of 0.5
        # becomes 0 and is refused), half and single precision outs round them to float32
        if dtype in (D.ACL_INT32, D.ACL_INT64):
            _check_step(int(start), int(end), int(step), "int64")
        elif dtype != D.ACL_DOUBLE:
            single = [float(np.float32(v)) for v in (start, end, step)]
            _check_step(single[0], single[1], single[2], "float32")
        # and an int64 out is computed from the truncated bounds, every other out in double
        call.plan["int64"] = dtype == D.ACL_INT64
        return {"out": listed((n,), D.ACL_INT64 if integral else D.ACL_FLOAT)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        yield Sample({"start": 0, "end": 10, "step": 3}, "int default")
        yield Sample({"start": 5, "end": -3, "step": -2}, "int descending")
        yield Sample({"start": 0.5, "end": 2.0, "step": 0.25}, "float default")
        yield Sample({"start": -1.0, "end": 1.0, "step": 0.3, "out": np.zeros((7,), np.float16)}, "into float16")
        yield Sample({"start": 0.5, "end": 6.0, "step": 1.5, "out": np.zeros((4,), np.int32)}, "floats into int32")
        yield Sample({"start": 0.5, "end": 6.0, "step": 1.5, "out": np.zeros((4,), np.int64)}, "floats into int64")
        yield Sample({"start": 2, "end": 2, "step": 1}, "empty")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        yield ErrorSample({"start": 0, "end": 5, "step": 0}, INVALID, "step 0")
        yield ErrorSample({"start": 5, "end": 0, "step": 1}, INVALID, "step points away from end")
        yield ErrorSample({"start": 0, "end": 5, "step": 1, "out": np.zeros((4,), np.int64)}, INVALID, "out too short")
        yield ErrorSample({"start": 0, "end": 5, "step": 1, "out": np.zeros((5,), np.int8)}, INVALID, "int8 out")
        yield ErrorSample(
            {"start": 0.0, "end": 1.0, "step": 0.25, "out": np.zeros((4,), np.int32)}, INVALID, "step truncates to 0"
        )

    return OpSpec("Arange", FAMILY, params, infer, samples=gen, error_samples=errors)


# ----------------------------------------------------------------------------- declarations
_Scatter = _scatter("Scatter")
_ScatterValue = _scatter("ScatterValue")
_Tril = _triangle("Tril")
_Triu = _triangle("Triu")

_ACCUMULATES = reduction(length_of=input_elements, reason="duplicate indices accumulate, in any order")
ACCURACY = {op: _ACCUMULATES for op in ("IndexPutImpl", "Scatter", "ScatterValue")}
"""Ops that add or multiply (the family's default is exact: every other element is a copy)."""

SPECS: list[OpSpec] = [
    _embedding(),
    _select_like("IndexSelect"),
    _gather(),
    _select_like("GatherV2"),
    _index(),
    _index_put_impl(),
    _scatter_update(),
    _scatter_nd_update(),
    _Scatter,
    twin(_Scatter),
    _ScatterValue,
    twin(_ScatterValue),
    _cat(),
    _stack(),
    _split_tensor(),
    _split_with_size(),
    _permute(),
    _slice(),
    _slice_v2(),
    _expand(),
    _repeat(),
    _constant_pad_nd(),
    _Tril,
    twin(_Tril),
    _Triu,
    twin(_Triu),
    _arange(),
    _flip(),
]
SPECS = with_accuracy(SPECS, ACCURACY)

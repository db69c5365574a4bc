"""MC2 fused compute-and-communication: MatmulAllReduce(V2), AllGatherMatmul, MatmulReduceScatter.

``group`` is a communicator *name*, as HcclGetCommName returns it (not an HcclComm handle); phase 1
refuses a name no live communicator of this process has with 161002. The name
:data:`~acl_core.spec.collective.SELF_GROUP_NAME` (an acl-core extension) is a communicator of one
rank, so the conformance cases run in a single process.

Semantics, each step rounded to the output dtype as the single operators round it, so that an MC2
operator equals the composition of single operators bit for bit:

* MatmulAllReduce: ``output = allreduce_sum(x1 @ x2 + bias)`` (the product and bias in float64,
  rounded once: Addmm), x1 (m, k) or (b, s, k), x2 (k, n), bias (n) or null.
* MatmulAllReduceV2: ``output = allreduce_sum(x1 @ x2 + bias + x3)``; x3 (the product's shape) is
  added after the rounded product, as Add would, before the reduction (CANN's formula).
* AllGatherMatmul: ``gatherOut = allgather(x1)`` (rank order along dim 0), ``output = gatherOut @ x2``.
* MatmulReduceScatter: ``output = reducescatter_sum(x1 @ x2)``: rank r keeps rows
  [r·m/N, (r+1)·m/N) of the sum.

The reductions are HCCL's (rank order, float64 accumulation). CANN's documented limits are checked:
FLOAT16/BFLOAT16 only, one dtype for all tensors, reduceOp "sum", commTurn 0, streamMode 1,
gatherIndex 0; for AllGatherMatmul and MatmulReduceScatter k in [256, 65535), bias null (CANN does
not support a bias there yet), m divisible by the rank count for MatmulReduceScatter. Not checked
(the reference computes any of them): the hardware's rank counts (2/4/8...), contiguity of x1 and
the topology ("hccs all mesh").
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.spec import samples as S
from acl_core.spec.accuracy import last_dim, reduction, with_accuracy
from acl_core.spec.collective import COMM_NAME_MAX_LENGTH, SELF_GROUP_NAME
from acl_core.spec.opspec import (
    INVALID,
    Call,
    ErrorSample,
    Infos,
    OpSpec,
    Sample,
    int_attr,
    invalid,
    out,
    string_attr,
    tensor,
)
from acl_core.spec.plan import declare as declare_plan
from acl_core.spec.rules import same, tensor_arg

# the plan keys this family's rules write (acl_core.spec.plan; docs/KERNELS.md)
declare_plan("group_size", "int", "the ranks of the communication group", int)

FAMILY = "mc2"
DTYPES = frozenset({D.ACL_FLOAT16, D.ACL_BF16})
K_RANGE = (256, 65535)
"""AllGatherMatmul and MatmulReduceScatter need k in [256, 65535)."""


def group_ranks(call: Call) -> int:
    """The rank count of the communicator ``group`` names; 161002 when there is none."""
    from acl_core.hccl import group_size

    name = call.args["group"]
    if len(name) >= COMM_NAME_MAX_LENGTH:
        raise invalid(f"group name of {len(name)} characters exceeds HCCL's {COMM_NAME_MAX_LENGTH - 1}")
    size = group_size(name)
    if size is None:
        raise invalid(f"group {name!r} is not the name of a live communicator of this process (HcclGetCommName)")
    call.plan["group_size"] = size
    return size


def _same_dtype(call: Call, names: Iterable[str]) -> D:
    tensors = [(n, tensor_arg(call, n)) for n in names if call.args.get(n) is not None]
    first_name, first = tensors[0]
    for name, t in tensors[1:]:
        if t.dtype != first.dtype:
            raise invalid(f"{name} has dtype {t.dtype.short}; {first_name} has {first.dtype.short} (they must match)")
    return first.dtype


def _matmul_dims(call: Call, x1_ranks: tuple[int, ...]) -> tuple[tuple[int, ...], int, int]:
    x1, x2 = tensor_arg(call, "x1"), tensor_arg(call, "x2")
    if x1.rank not in x1_ranks:
        raise invalid(f"x1 must be {' or '.join(f'{r}-D' for r in x1_ranks)}, not {x1.rank}-D")
    if x2.rank != 2:
        raise invalid(f"x2 must be 2-D, not {x2.rank}-D")
    k, n = x2.shape
    if x1.shape[-1] != k:
        raise invalid(f"x1 {list(x1.shape)} and x2 {list(x2.shape)} disagree on k")
    return tuple(x1.shape[:-1]), k, n


def _bias(call: Call, n: int, allowed: bool) -> None:
    bias = call.args.get("bias")
    if bias is None:
        return
    if not allowed:
        raise invalid("bias must be null: CANN does not support a bias for this operator yet")
    if bias.rank != 1 or bias.shape[0] != n:
        raise invalid(f"bias must be 1-D of length n={n}, not {list(bias.shape)}")


def _k_range(k: int) -> None:
    lo, hi = K_RANGE
    if not lo <= k < hi:
        raise invalid(f"k={k} is outside [{lo}, {hi})")


# ----------------------------------------------------------------------------- MatmulAllReduce(V2)
def _all_reduce_params(v2: bool) -> tuple[Any, ...]:
    head = (
        tensor("x1", DTYPES, min_rank=2, max_rank=3),
        tensor("x2", DTYPES, min_rank=2, max_rank=2),
        tensor("bias", DTYPES, optional=True, max_rank=1),
    )
    x3 = (tensor("x3", DTYPES, optional=True, max_rank=3),) if v2 else ()
    tail = (
        string_attr("group"),
        string_attr("reduceOp", choices=("sum",)),
        int_attr("commTurn", choices=(0,)),
        int_attr("streamMode", choices=(1,)),
        out("output", DTYPES, max_rank=3, c_type="const aclTensor*"),
    )
    return head + x3 + tail


def _all_reduce_infer(v2: bool) -> Any:
    def infer(call: Call) -> Infos:
        dtype = _same_dtype(call, ("x1", "x2", "bias", "x3") if v2 else ("x1", "x2", "bias"))
        rows, _, n = _matmul_dims(call, (2, 3))
        _bias(call, n, allowed=True)
        shape = (*rows, n)
        x3 = call.args.get("x3")
        if x3 is not None and tuple(x3.shape) != shape:
            raise invalid(f"x3 must have the product's shape {list(shape)}, not {list(x3.shape)}")
        group_ranks(call)
        return {"output": same(shape, dtype)}

    return infer


def _all_reduce_samples(v2: bool) -> Any:
    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in sorted(DTYPES):
            for x1_shape in ((8, 16), (2, 3, 16)):
                args: dict[str, Any] = {
                    "x1": S.array(rng, x1_shape, dt, low=-1, high=1),
                    "x2": S.array(rng, (16, 12), dt, low=-1, high=1),
                    "bias": S.array(rng, (12,), dt, low=-1, high=1),
                    "group": SELF_GROUP_NAME,
                    "reduceOp": "sum",
                    "commTurn": 0,
                    "streamMode": 1,
                }
                if v2:
                    args["x3"] = S.array(rng, (*x1_shape[:-1], 12), dt, low=-1, high=1)
                yield Sample(args, f"{dt.short} x1 {list(x1_shape)}")
            no_bias = {**args, "bias": None, **({"x3": None} if v2 else {})}
            yield Sample(no_bias, f"{dt.short} without bias{' or x3' if v2 else ''}")
        empty = {**args, "x1": S.array(rng, (0, 16), D.ACL_BF16), **({"x3": None} if v2 else {})}
        yield Sample(empty, "bf16 empty m")

    return gen


def _all_reduce_errors(v2: bool) -> Any:
    def gen(rng: np.random.Generator) -> Iterable[ErrorSample]:
        base: dict[str, Any] = {
            "x1": S.array(rng, (4, 16), D.ACL_FLOAT16),
            "x2": S.array(rng, (16, 8), D.ACL_FLOAT16),
            "bias": None,
            "group": SELF_GROUP_NAME,
            "reduceOp": "sum",
            "commTurn": 0,
            "streamMode": 1,
        }
        if v2:
            base["x3"] = None
        yield ErrorSample({**base, "group": "no_such_group"}, INVALID, "unknown group")
        yield ErrorSample({**base, "group": "g" * COMM_NAME_MAX_LENGTH}, INVALID, "group name too long")
        yield ErrorSample({**base, "reduceOp": "max"}, INVALID, "reduceOp other than sum")
        yield ErrorSample({**base, "commTurn": 1}, INVALID, "commTurn 1")
        yield ErrorSample({**base, "streamMode": 0}, INVALID, "streamMode 0")
        yield ErrorSample({**base, "x2": S.array(rng, (12, 8), D.ACL_FLOAT16)}, INVALID, "k disagrees")
        yield ErrorSample({**base, "x2": S.array(rng, (16, 8), D.ACL_BF16)}, INVALID, "bf16 x2 with fp16 x1")
        yield ErrorSample({**base, "bias": S.array(rng, (7,), D.ACL_FLOAT16)}, INVALID, "bias of the wrong length")
        yield ErrorSample(
            {**base, "x1": S.array(rng, (4, 16), D.ACL_FLOAT), "x2": S.array(rng, (16, 8), D.ACL_FLOAT)},
            INVALID,
            "float32 inputs",
        )
        if v2:
            yield ErrorSample({**base, "x3": S.array(rng, (4, 7), D.ACL_FLOAT16)}, INVALID, "x3 of the wrong shape")

    return gen


def _all_reduce(v2: bool) -> OpSpec:
    name = "MatmulAllReduceV2" if v2 else "MatmulAllReduce"
    formula = "x1 @ x2 + bias + x3" if v2 else "x1 @ x2 + bias"
    return OpSpec(
        name,
        FAMILY,
        _all_reduce_params(v2),
        _all_reduce_infer(v2),
        samples=_all_reduce_samples(v2),
        error_samples=_all_reduce_errors(v2),
        summary=f"output = allreduce_sum({formula}) over the ranks of group",
    )


# ----------------------------------------------------------------------------- AllGatherMatmul
def _all_gather_infer(call: Call) -> Infos:
    dtype = _same_dtype(call, ("x1", "x2", "bias"))
    (m,), k, n = _matmul_dims(call, (2,))
    _k_range(k)
    _bias(call, n, allowed=False)
    ranks = group_ranks(call)
    return {"output": same((m * ranks, n), dtype), "gatherOut": same((m * ranks, k), dtype)}


def _all_gather_samples(rng: np.random.Generator) -> Iterable[Sample]:
    for dt in sorted(DTYPES):
        for m, n in ((4, 8), (0, 8), (3, 0)):
            args = {
                "x1": S.array(rng, (m, 256), dt, low=-1, high=1),
                "x2": S.array(rng, (256, n), dt, low=-1, high=1),
                "bias": None,
                "group": SELF_GROUP_NAME,
                "gatherIndex": 0,
                "commTurn": 0,
                "streamMode": 1,
            }
            yield Sample(args, f"{dt.short} m={m} n={n}")
    yield Sample({**args, "gatherOut": None}, "gatherOut null")


def _k256_base(rng: np.random.Generator, extra: dict[str, Any]) -> dict[str, Any]:
    return {
        "x1": S.array(rng, (4, 256), D.ACL_FLOAT16),
        "x2": S.array(rng, (256, 8), D.ACL_FLOAT16),
        "bias": None,
        "group": SELF_GROUP_NAME,
        **extra,
        "commTurn": 0,
        "streamMode": 1,
    }


def _all_gather_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    base = _k256_base(rng, {"gatherIndex": 0})
    yield ErrorSample({**base, "group": "no_such_group"}, INVALID, "unknown group")
    yield ErrorSample({**base, "gatherIndex": 1}, INVALID, "gatherIndex 1")
    yield ErrorSample({**base, "streamMode": 2}, INVALID, "streamMode 2")
    yield ErrorSample(
        {**base, "x1": S.array(rng, (4, 16), D.ACL_FLOAT16), "x2": S.array(rng, (16, 8), D.ACL_FLOAT16)},
        INVALID,
        "k below 256",
    )
    yield ErrorSample({**base, "bias": S.array(rng, (8,), D.ACL_FLOAT16)}, INVALID, "non-null bias")
    yield ErrorSample({**base, "x1": S.array(rng, (2, 2, 256), D.ACL_FLOAT16)}, INVALID, "3-D x1")


_AllGatherMatmul = OpSpec(
    "AllGatherMatmul",
    FAMILY,
    (
        tensor("x1", DTYPES, min_rank=2, max_rank=2),
        tensor("x2", DTYPES, min_rank=2, max_rank=2),
        tensor("bias", DTYPES, optional=True, max_rank=1),
        string_attr("group"),
        int_attr("gatherIndex", choices=(0,)),
        int_attr("commTurn", choices=(0,)),
        int_attr("streamMode", choices=(1,)),
        out("output", DTYPES, max_rank=2, c_type="const aclTensor*"),
        out("gatherOut", DTYPES, optional=True, max_rank=2, c_type="const aclTensor*"),
    ),
    _all_gather_infer,
    samples=_all_gather_samples,
    error_samples=_all_gather_errors,
    summary="gatherOut = allgather(x1) in rank order; output = gatherOut @ x2",
)


# ----------------------------------------------------------------------------- MatmulReduceScatter
def _reduce_scatter_infer(call: Call) -> Infos:
    dtype = _same_dtype(call, ("x1", "x2", "bias"))
    (m,), k, n = _matmul_dims(call, (2,))
    _k_range(k)
    _bias(call, n, allowed=False)
    ranks = group_ranks(call)
    if m % ranks:
        raise invalid(f"m={m} is not a multiple of the group's {ranks} ranks")
    return {"output": same((m // ranks, n), dtype)}


def _reduce_scatter_samples(rng: np.random.Generator) -> Iterable[Sample]:
    for dt in sorted(DTYPES):
        for m, n in ((8, 6), (0, 6), (4, 0)):
            yield Sample(
                {
                    "x1": S.array(rng, (m, 256), dt, low=-1, high=1),
                    "x2": S.array(rng, (256, n), dt, low=-1, high=1),
                    "bias": None,
                    "group": SELF_GROUP_NAME,
                    "reduceOp": "sum",
                    "commTurn": 0,
                    "streamMode": 1,
                },
                f"{dt.short} m={m} n={n}",
            )


def _reduce_scatter_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    base = _k256_base(rng, {"reduceOp": "sum"})
    yield ErrorSample({**base, "group": "no_such_group"}, INVALID, "unknown group")
    yield ErrorSample({**base, "reduceOp": "prod"}, INVALID, "reduceOp other than sum")
    yield ErrorSample({**base, "commTurn": 2}, INVALID, "commTurn 2")
    yield ErrorSample({**base, "x2": S.array(rng, (128, 8), D.ACL_FLOAT16)}, INVALID, "k disagrees")
    yield ErrorSample(
        {**base, "x1": S.array(rng, (4, 65535), D.ACL_FLOAT16), "x2": S.array(rng, (65535, 1), D.ACL_FLOAT16)},
        INVALID,
        "k of 65535",
    )
    yield ErrorSample({**base, "bias": S.array(rng, (8,), D.ACL_FLOAT16)}, INVALID, "non-null bias")


_MatmulReduceScatter = OpSpec(
    "MatmulReduceScatter",
    FAMILY,
    (
        tensor("x1", DTYPES, min_rank=2, max_rank=2),
        tensor("x2", DTYPES, min_rank=2, max_rank=2),
        tensor("bias", DTYPES, optional=True, max_rank=1),
        string_attr("group"),
        string_attr("reduceOp", choices=("sum",)),
        int_attr("commTurn", choices=(0,)),
        int_attr("streamMode", choices=(1,)),
        out("output", DTYPES, max_rank=2, c_type="const aclTensor*"),
    ),
    _reduce_scatter_infer,
    samples=_reduce_scatter_samples,
    error_samples=_reduce_scatter_errors,
    summary="output = reducescatter_sum(x1 @ x2) over the ranks of group (rank r keeps row block r)",
)


_MC2_GEMM = reduction(
    length_of=last_dim("x1", 3),
    reason="the GEMM's K products, the bias (and x3) adds, then the collective's sum: γ_(K+3)·(|x1|·|x2| + |b|)"
    " (conformance runs a communicator of one; a wider one adds its rank count to n)",
)
SPECS: list[OpSpec] = with_accuracy(
    [_all_reduce(False), _all_reduce(True), _AllGatherMatmul, _MatmulReduceScatter],
    {op: _MC2_GEMM for op in ("MatmulAllReduce", "MatmulAllReduceV2", "AllGatherMatmul", "MatmulReduceScatter")},
)

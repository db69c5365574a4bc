"""MC2 fused compute-and-communication: MatmulAllReduce(V2), AllGatherMatmul, MatmulReduceScatter, and the
expert-parallel MoeDistributeDispatch / MoeDistributeCombine (V1, V2).

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

Expert parallelism (MoeDistributeDispatch/Combine, V2; V3 and V4 are versions of V2 in
:mod:`acl_core.spec.ops.versions`): ``groupEp`` names the EP communicator; ``epWorldSize`` must be its
size and ``epRankId`` this process's rank in it (161002 otherwise; 1 rank is accepted, as
``acl_core_self``, where CANN's range starts at 2). Rank r holds experts [r·E/W, (r+1)·E/W) of
``moeExpertNum`` = E.

* Dispatch: every active copy (token i, slot j) of every rank goes to the rank of expert
  ``expertIds[i, j]``. ``expandXOut`` [A, H], A = globalBs·min(E/W, K) (globalBs = Bs·W when 0), holds
  the received copies grouped by local expert, then source rank, then token (CANN's design note:
  "tokens of one expert contiguous"), zeros after the last; with quantMode 2 they are dynamic int8
  as MoeInitRoutingV3's quantMode 1 computes it (float32, the smooth scales ``scales`` [E, H] of the
  copy's expert), ``dynamicScalesOut`` the row scales. ``epRecvCountsOut`` [W·E/W] is the running
  total of the received rows over (local expert, source rank) in that order (the layout CANN
  documents for Atlas A3; A2's extra reduce information is not produced); ``expertTokenNumsOut`` the
  per-local-expert cumsum (type 0) or count (type 1); ``expandScalesOut`` (when ``expertScales`` is
  given) the weight of each received copy. ``assistInfoForCombineOut`` (opaque in CANN, "values may
  differ by product") holds 128 int32 per row: source rank, source token, top-k slot, zeros; V1's
  ``expandIdx`` [Bs·K] is, per copy, how many earlier active tokens of this rank went to the same
  expert (-1 for an inactive copy). ``xActiveMask`` [Bs] drops whole tokens, [Bs, K] single copies
  (any pattern: CANN's "true before false" rule for 1-D masks is not enforced). Expert ids within
  a token are not required to be distinct, but a rank to which more than A copies would arrive that
  way refuses the call when it runs (161002).
* Combine: ``xOut[i] = Σ_j expertScales[i, j] · (the expert output row of copy (i, j))`` over the
  active copies, in float64 and rounded once (zeros for a token without active copies). The rows are
  found through assistInfoForCombine (V2+) or through expandIdx and the expert rank's epSendCounts
  (V1; an active copy's expert id outside [0, E) is refused there); tables that do not come from a
  dispatch are refused when the operator runs (161002).
  ``expandScales`` [A] is checked, not read (it carries the same weights the source rank holds).
* Both run over the engine's all-gather (the reference exchanges every rank's tokens, routing and,
  for combine, expert outputs), so Bs must be equal on every rank: globalBs other than 0 or Bs·W is
  refused (161002, not implemented), as are a TP domain (tpWorldSize 2), shared experts
  (sharedExpertNum / sharedExpertRankNum), ``sharedExpertXOptional``, int8 communication
  (commQuantMode 2) and V3/V4's elastic scale-in, timing records and zero/copy/constant experts.
  Documented attribute ranges are 561002 (moeExpertNum in (0, 1024] and divisible by W, K in (0,
  min(16, E)], quantMode 0/2, expertTokenNumsType 0/1, tpRankId and expertShardType 0, outDtype and
  groupListType 0, commAlg null/""/"fullmesh"/"hierarchy"; shapes); expert ids outside [0, E) are
  refused when the operator runs, on every rank alike (each sees every rank's ids). Not checked: H's
  hardware range and HCCL_BUFFSIZE.

The reductions are HCCL's (rank order, float64 accumulation). CANN's documented limits are checked:
FLOAT16/BFLOAT16 only, one dtype for all tensors, reduceOp "sum", commTurn 0, streamMode 1,
gatherIndex 0; for AllGatherMatmul and MatmulReduceScatter k in [256, 65535), bias null (CANN does
not support a bias there yet), m divisible by the rank count for MatmulReduceScatter. Not checked
(the reference computes any of them): the hardware's rank counts (2/4/8...), contiguity of x1 and
the topology ("hccs all mesh").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.spec import samples as S
from acl_core.spec.accuracy import exact, last_dim, reduction, with_accuracy
from acl_core.spec.collective import COMM_NAME_MAX_LENGTH, SELF_GROUP_NAME
from acl_core.spec.opspec import (
    INVALID,
    TILING,
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


def group_ranks(call: Call, param: str = "group") -> int:
    """The rank count of the communicator ``param`` (``group``) names; 161002 when there is none."""
    from acl_core.hccl import group_size

    name = call.args[param]
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


# ----------------------------------------------------------------------------- MoeDistributeDispatch / Combine
MOE_MAX_K = 16
MOE_MAX_EXPERTS = 1024
ASSIST_PER_ROW = 128
"""assistInfoForCombine holds 128 int32 per expandX row: [source rank, source token, top-k slot, 0...]."""
COMM_ALGS = ("", "fullmesh", "hierarchy")
_I32 = frozenset({D.ACL_INT32})
_I64 = frozenset({D.ACL_INT64})
_F32 = frozenset({D.ACL_FLOAT})
_BOOL = frozenset({D.ACL_BOOL})
_NOT_IMPLEMENTED = "is not implemented by acl-core"


def _tiling(message: str) -> Exception:
    from acl_core.errors import AclnnError, AclnnStatus

    return AclnnError(AclnnStatus.ACLNN_ERR_INNER_TILING_ERROR, message)


def ep_rows(global_bs: int, experts_per_rank: int, k: int) -> int:
    """A, the rows of a dispatch's expandXOut: every token of the EP domain times min(local experts, k)."""
    return global_bs * min(experts_per_rank, k)


def _ep_common(call: Call, bs: int, k: int) -> tuple[int, int, int]:
    """The EP-domain rules shared by dispatch and combine; (epWorldSize, experts per rank, A)."""
    from acl_core.hccl import group_rank

    a = call.args
    world, rank, experts = int(a["epWorldSize"]), int(a["epRankId"]), int(a["moeExpertNum"])
    tp, tp_rank = int(a["tpWorldSize"]), int(a["tpRankId"])
    if int(a["sharedExpertNum"]) or int(a["sharedExpertRankNum"]):
        raise invalid(f"shared experts (sharedExpertNum, sharedExpertRankNum) {_NOT_IMPLEMENTED}")
    if tp not in (0, 1):
        raise invalid(f"a TP domain (tpWorldSize={tp}) {_NOT_IMPLEMENTED}")
    if tp_rank != 0:
        raise _tiling(f"tpRankId={tp_rank} must be 0 without a TP domain")
    if int(a["expertShardType"]) != 0:
        raise _tiling(f"expertShardType={a['expertShardType']} must be 0")
    if not 1 <= world <= 768 or not 0 <= rank < world:
        raise _tiling(f"epWorldSize={world} must lie in [1, 768] and epRankId={rank} in [0, {world})")
    if not 0 < experts <= MOE_MAX_EXPERTS or experts % world:
        raise _tiling(f"moeExpertNum={experts} must lie in (0, {MOE_MAX_EXPERTS}] and divide among {world} ranks")
    if not 0 < k <= min(MOE_MAX_K, experts):
        raise _tiling(f"K={k} must lie in (0, min({MOE_MAX_K}, moeExpertNum)]")
    alg = a.get("commAlg")
    if alg is not None and alg not in COMM_ALGS:
        raise _tiling(f"commAlg={alg!r} must be null, '', 'fullmesh' or 'hierarchy'")
    ranks = group_ranks(call, "groupEp")
    if ranks != world:
        raise invalid(f"epWorldSize={world} but groupEp has {ranks} ranks")
    if group_rank(a["groupEp"]) != rank:
        raise invalid(f"epRankId={rank} is not this process's rank {group_rank(a['groupEp'])} in groupEp")
    global_bs = int(a["globalBs"])
    if global_bs not in (0, bs * world):
        raise invalid(
            f"globalBs={global_bs} other than 0 or Bs·epWorldSize={bs * world} (ranks with different Bs)"
            f" {_NOT_IMPLEMENTED}"
        )
    return world, experts // world, ep_rows(bs * world, experts // world, k)


def _mask_rule(call: Call, name: str, bs: int, k: int) -> None:
    mask = call.args.get(name)
    if mask is not None and tuple(mask.shape) not in ((bs,), (bs, k)):
        raise _tiling(f"{name} must be [{bs}] or [{bs}, {k}], not {list(mask.shape)}")


def _names(v1: bool) -> dict[str, str]:
    """Parameter names of dispatch (V1 has no Optional / Out suffixes and expandIdx instead of assistInfo)."""
    opt, out_ = ("", "") if v1 else ("Optional", "Out")
    names = {n: n + opt for n in ("scales", "xActiveMask", "expertScales", "tpSendCounts", "activationScale")}
    names |= {n: n + opt for n in ("weightScale", "groupList", "expandScales")}
    names |= {n: n + out_ for n in ("expandX", "dynamicScales", "expertTokenNums", "epRecvCounts", "tpRecvCounts")}
    names["expandScalesOut"] = "expandScales" + out_
    names["assist"] = ("expandIdx" if v1 else "assistInfoForCombine") + ("" if v1 else out_)
    names["assistIn"] = "expandIdx" if v1 else "assistInfoForCombine"
    names["xOut"] = "x" if v1 else "xOut"
    return names


def _ep_attrs(*, combine: bool) -> tuple[Any, ...]:
    head = (
        string_attr("groupEp"),
        int_attr("epWorldSize"),
        int_attr("epRankId"),
        int_attr("moeExpertNum"),
        string_attr("groupTp"),
        int_attr("tpWorldSize"),
        int_attr("tpRankId"),
        int_attr("expertShardType"),
        int_attr("sharedExpertNum"),
        int_attr("sharedExpertRankNum"),
    )
    tail = (int_attr("globalBs"), int_attr("outDtype"), int_attr("commQuantMode"), int_attr("groupListType"))
    return head + (tail if combine else (int_attr("quantMode"), int_attr("globalBs"), int_attr("expertTokenNumsType")))


def _dispatch_params(v1: bool) -> tuple[Any, ...]:
    n = _names(v1)
    inputs = (
        tensor("x", DTYPES, min_rank=2, max_rank=2),
        tensor("expertIds", _I32, min_rank=2, max_rank=2),
        tensor(n["scales"], _F32, optional=True, max_rank=2),
        tensor(n["xActiveMask"], _BOOL, optional=True, max_rank=2),
        tensor(n["expertScales"], _F32, optional=True, max_rank=2),
    )
    alg = () if v1 else (string_attr("commAlg", optional=True),)
    outs = (
        out(n["expandX"], DTYPES | {D.ACL_INT8}),
        out(n["dynamicScales"], _F32, optional=True),
        out(n["assist"], _I32),
        out(n["expertTokenNums"], _I64),
        out(n["epRecvCounts"], _I32),
        out(n["tpRecvCounts"], _I32, optional=True),
        out(n["expandScalesOut"], _F32, optional=True),
    )
    return inputs + _ep_attrs(combine=False) + alg + outs


def _dispatch_infer(v1: bool) -> Any:
    n = _names(v1)

    def infer(call: Call) -> Infos:
        a = call.args
        x, ids = tensor_arg(call, "x"), tensor_arg(call, "expertIds")
        if ids.shape[0] != x.shape[0]:
            raise _tiling(f"x {list(x.shape)} and expertIds {list(ids.shape)} disagree on Bs")
        bs, h = x.shape
        k = ids.shape[1]
        world, local, rows = _ep_common(call, bs, k)
        quant, kind = int(a["quantMode"]), int(a["expertTokenNumsType"])
        if quant not in (0, 2):
            raise _tiling(f"quantMode={quant} must be 0 (none) or 2 (dynamic int8)")
        if kind not in (0, 1):
            raise _tiling(f"expertTokenNumsType={kind} must be 0 (cumsum) or 1 (count)")
        scales = a.get(n["scales"])
        if scales is not None:
            if quant != 2:
                raise _tiling(f"{n['scales']} (smooth scales) is only used by dynamic quantisation (quantMode 2)")
            if tuple(scales.shape) != (int(a["moeExpertNum"]), h):
                raise _tiling(f"{n['scales']} must be [moeExpertNum, H], not {list(scales.shape)}")
        _mask_rule(call, n["xActiveMask"], bs, k)
        weights = a.get(n["expertScales"])
        if weights is not None and tuple(weights.shape) != (bs, k):
            raise _tiling(f"{n['expertScales']} must be [{bs}, {k}], not {list(weights.shape)}")
        assist = (bs * k,) if v1 else (rows * ASSIST_PER_ROW,)
        return {
            n["expandX"]: same((rows, h), x.dtype if quant == 0 else D.ACL_INT8),
            n["dynamicScales"]: same((rows,), D.ACL_FLOAT) if quant == 2 else None,
            n["assist"]: same(assist, D.ACL_INT32),
            n["expertTokenNums"]: same((local,), D.ACL_INT64),
            n["epRecvCounts"]: same((world * local,), D.ACL_INT32),
            n["tpRecvCounts"]: None,
            n["expandScalesOut"]: same((rows,), D.ACL_FLOAT) if weights is not None else None,
        }

    return infer


def dispatch_args(
    rng: np.random.Generator, bs: int, h: int, k: int, experts: int, dt: D, v1: bool = False, **attrs: Any
) -> dict[str, Any]:
    """Arguments of a one-rank (acl_core_self) dispatch: k distinct experts per token among ``experts``."""
    n = _names(v1)
    ids = np.array([rng.choice(experts, size=k, replace=False) for _ in range(bs)], np.int32).reshape(bs, k)
    args: dict[str, Any] = {"x": S.array(rng, (bs, h), dt, low=-2, high=2), "expertIds": ids}
    args |= {n["scales"]: None, n["xActiveMask"]: None, n["expertScales"]: None, "groupEp": SELF_GROUP_NAME}
    args |= {"epWorldSize": 1, "epRankId": 0, "moeExpertNum": experts, "groupTp": "", "tpWorldSize": 0}
    args |= {"tpRankId": 0, "expertShardType": 0, "sharedExpertNum": 0, "sharedExpertRankNum": 0, "quantMode": 0}
    args |= {"globalBs": 0, "expertTokenNumsType": 0}
    if not v1:
        args["commAlg"] = None
    return {**args, **{n.get(key, key): value for key, value in attrs.items()}}


def _dispatch_samples(v1: bool) -> Any:
    n = _names(v1)

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in sorted(DTYPES):
            yield Sample(dispatch_args(rng, 6, 16, 3, 8, dt, v1), f"{dt.short} top-3 of 8")
        args = dispatch_args(rng, 5, 40, 2, 4, D.ACL_BF16, v1, quantMode=2, expertTokenNumsType=1)
        yield Sample(args, "dynamic int8, counts")
        smooth = S.array(rng, (4, 40), D.ACL_FLOAT, low=0.5, high=2)
        yield Sample({**args, n["scales"]: smooth}, "dynamic int8 with smooth scales")
        args = dispatch_args(rng, 7, 8, 2, 4, D.ACL_FLOAT16, v1, **({} if v1 else {"commAlg": "fullmesh"}))
        mask = np.array([True] * 5 + [False] * 2)
        yield Sample(
            {**args, n["xActiveMask"]: mask, n["expertScales"]: S.array(rng, (7, 2), D.ACL_FLOAT)},
            "1-D active mask, expert weights carried",
        )
        mask2 = rng.random((7, 2)) < 0.6
        yield Sample({**args, n["xActiveMask"]: mask2}, "2-D active mask")
        yield Sample(dispatch_args(rng, 40, 72, 8, 16, D.ACL_BF16, v1, globalBs=40), "40 tokens top-8 of 16")

    return gen


def _dispatch_errors(v1: bool) -> Any:
    n = _names(v1)

    def gen(rng: np.random.Generator) -> Iterable[ErrorSample]:
        base = dispatch_args(rng, 4, 8, 2, 4, D.ACL_FLOAT16, v1)
        yield ErrorSample({**base, "groupEp": "no_such_group"}, INVALID, "unknown groupEp")
        yield ErrorSample({**base, "epWorldSize": 2, "moeExpertNum": 4}, INVALID, "epWorldSize unlike the group's")
        yield ErrorSample({**base, "tpWorldSize": 2}, INVALID, "TP domain (not implemented)")
        yield ErrorSample({**base, "sharedExpertNum": 1}, INVALID, "shared experts (not implemented)")
        yield ErrorSample({**base, "globalBs": 8}, INVALID, "ranks with different Bs (not implemented)")
        yield ErrorSample({**base, "moeExpertNum": 0}, TILING, "no experts")
        yield ErrorSample({**base, "moeExpertNum": 1}, TILING, "K above moeExpertNum")
        yield ErrorSample({**base, "quantMode": 1}, TILING, "quantMode 1")
        yield ErrorSample({**base, "expertTokenNumsType": 2}, TILING, "expertTokenNumsType 2")
        yield ErrorSample({**base, "epRankId": 1}, TILING, "epRankId past the domain")
        yield ErrorSample({**base, n["xActiveMask"]: np.ones(3, bool)}, TILING, "mask of 3 tokens")
        yield ErrorSample({**base, n["scales"]: np.ones((4, 8), np.float32)}, TILING, "smooth scales without quant")
        yield ErrorSample({**base, "x": S.array(rng, (4, 8), D.ACL_FLOAT)}, INVALID, "float32 x")
        if not v1:
            yield ErrorSample({**base, "commAlg": "ring"}, TILING, "commAlg ring")
        bad = np.asarray(base["expertIds"]).copy()
        bad[1, 0] = 4
        yield ErrorSample({**base, "expertIds": bad}, INVALID, "an expert id of moeExpertNum (when it runs)")

    return gen


def _dispatch(v1: bool) -> OpSpec:
    name = "MoeDistributeDispatch" if v1 else "MoeDistributeDispatchV2"
    return OpSpec(
        name,
        FAMILY,
        _dispatch_params(v1),
        _dispatch_infer(v1),
        samples=_dispatch_samples(v1),
        error_samples=_dispatch_errors(v1),
        summary="send each token to the ranks holding its top-k experts (optionally as dynamic int8);"
        " rows arrive grouped by local expert, then source rank, then token",
    )


def _combine_params(v1: bool) -> tuple[Any, ...]:
    n = _names(v1)
    inputs: tuple[Any, ...] = (
        tensor("expandX", DTYPES, min_rank=2, max_rank=2),
        tensor("expertIds", _I32, min_rank=2, max_rank=2),
        tensor(n["assistIn"], _I32, min_rank=1, max_rank=1),
        tensor("epSendCounts", _I32, min_rank=1, max_rank=1),
        tensor("expertScales", _F32, min_rank=2, max_rank=2),
        tensor(n["tpSendCounts"], _I32, optional=True),
        tensor(n["xActiveMask"], _BOOL, optional=True, max_rank=2),
        tensor(n["activationScale"], None, optional=True),
        tensor(n["weightScale"], None, optional=True),
        tensor(n["groupList"], None, optional=True),
        tensor(n["expandScales"], _F32, optional=True, max_rank=1),
    )
    if not v1:
        inputs += (tensor("sharedExpertXOptional", DTYPES, optional=True, max_rank=2),)
    alg = () if v1 else (string_attr("commAlg", optional=True),)
    return inputs + _ep_attrs(combine=True) + alg + (out(n["xOut"], DTYPES),)


def _combine_infer(v1: bool) -> Any:
    n = _names(v1)

    def infer(call: Call) -> Infos:
        a = call.args
        y, ids = tensor_arg(call, "expandX"), tensor_arg(call, "expertIds")
        bs, k = ids.shape
        world, local, rows = _ep_common(call, bs, k)
        for reserved in (n["activationScale"], n["weightScale"], n["groupList"]):
            if a.get(reserved) is not None:
                raise invalid(f"{reserved} is reserved by CANN and must be null")
        if not v1 and a.get("sharedExpertXOptional") is not None:
            raise invalid(f"sharedExpertXOptional (shared expert outputs) {_NOT_IMPLEMENTED}")
        if a.get(n["tpSendCounts"]) is not None:
            raise invalid(f"{n['tpSendCounts']} belongs to a TP domain, which {_NOT_IMPLEMENTED}")
        if int(a["commQuantMode"]) == 2:
            raise invalid(f"int8 communication (commQuantMode 2) {_NOT_IMPLEMENTED}")
        for attr in ("outDtype", "commQuantMode", "groupListType"):
            if int(a[attr]) != 0:
                raise _tiling(f"{attr}={a[attr]} must be 0")
        if y.shape[0] != rows:
            raise _tiling(f"expandX has {y.shape[0]} rows; the domain's A is {rows}")
        if tuple(tensor_arg(call, "expertScales").shape) != (bs, k):
            raise _tiling(f"expertScales must be [{bs}, {k}]")
        if tuple(tensor_arg(call, "epSendCounts").shape) != (world * local,):
            raise _tiling(f"epSendCounts must be [{world * local}] (epWorldSize × local experts)")
        assist = (bs * k,) if v1 else (rows * ASSIST_PER_ROW,)
        if tuple(tensor_arg(call, n["assistIn"]).shape) != assist:
            raise _tiling(f"{n['assistIn']} must be {list(assist)}")
        weights = a.get(n["expandScales"])
        if weights is not None and tuple(weights.shape) != (rows,):
            raise _tiling(f"{n['expandScales']} must be [{rows}]")
        _mask_rule(call, n["xActiveMask"], bs, k)
        return {n["xOut"]: same((bs, y.shape[1]), y.dtype)}

    return infer


def one_rank_dispatch_tables(ids: np.ndarray, mask: np.ndarray | None, experts: int) -> dict[str, np.ndarray]:
    """What a one-rank dispatch hands its combine (for conformance cases): expandIdx, assist rows, epRecvCounts."""
    bs, k = ids.shape
    active = np.ones((bs, k), bool) if mask is None else np.broadcast_to(mask.reshape(bs, -1), (bs, k))
    seen = np.zeros(experts, np.int64)
    expand_idx = np.full(bs * k, -1, np.int32)
    for i in range(bs):
        for j in range(k):
            if active[i, j]:
                expand_idx[i * k + j] = seen[ids[i, j]]
                seen[ids[i, j]] += 1
    rows = ep_rows(bs, experts, k)
    assist = np.zeros((rows, ASSIST_PER_ROW), np.int32)
    p = 0
    for e in range(experts):
        for i in range(bs):
            for j in range(k):
                if active[i, j] and ids[i, j] == e:
                    assist[p, :3] = (0, i, j)
                    p += 1
    return {"expandIdx": expand_idx, "assist": assist.reshape(-1), "counts": np.cumsum(seen).astype(np.int32)}


def combine_args(
    rng: np.random.Generator, bs: int, h: int, k: int, experts: int, dt: D, v1: bool = False, **attrs: Any
) -> dict[str, Any]:
    """Arguments of a one-rank (acl_core_self) combine, consistent with the dispatch that would precede it."""
    n = _names(v1)
    mask = attrs.pop("mask", None)
    ids = np.array([rng.choice(experts, size=k, replace=False) for _ in range(bs)], np.int32).reshape(bs, k)
    tables = one_rank_dispatch_tables(ids, mask, experts)
    rows = ep_rows(bs, experts, k)
    args: dict[str, Any] = {"expandX": S.array(rng, (rows, h), dt, low=-2, high=2), "expertIds": ids}
    args |= {n["assistIn"]: tables["expandIdx"] if v1 else tables["assist"], "epSendCounts": tables["counts"]}
    args |= {"expertScales": S.array(rng, (bs, k), D.ACL_FLOAT, low=0, high=1), n["tpSendCounts"]: None}
    args |= {n["xActiveMask"]: mask, n["activationScale"]: None, n["weightScale"]: None, n["groupList"]: None}
    args |= {n["expandScales"]: None}
    if not v1:
        args["sharedExpertXOptional"] = None
    args |= {"groupEp": SELF_GROUP_NAME, "epWorldSize": 1, "epRankId": 0, "moeExpertNum": experts, "groupTp": ""}
    args |= {"tpWorldSize": 0, "tpRankId": 0, "expertShardType": 0, "sharedExpertNum": 0, "sharedExpertRankNum": 0}
    args |= {"globalBs": 0, "outDtype": 0, "commQuantMode": 0, "groupListType": 0}
    if not v1:
        args["commAlg"] = None
    return {**args, **attrs}


def _combine_samples(v1: bool) -> Any:
    n = _names(v1)

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in sorted(DTYPES):
            yield Sample(combine_args(rng, 6, 16, 3, 8, dt, v1), f"{dt.short} top-3 of 8")
        mask = np.array([True] * 5 + [False] * 2)
        args = combine_args(rng, 7, 8, 2, 4, D.ACL_FLOAT16, v1, mask=mask)
        yield Sample({**args, n["expandScales"]: S.array(rng, (14,), D.ACL_FLOAT)}, "1-D mask, expandScales given")
        yield Sample(combine_args(rng, 7, 8, 2, 4, D.ACL_BF16, v1, mask=rng.random((7, 2)) < 0.6), "2-D mask")
        yield Sample(combine_args(rng, 40, 72, 8, 16, D.ACL_BF16, v1), "40 tokens top-8 of 16")

    return gen


def _combine_errors(v1: bool) -> Any:
    n = _names(v1)

    def gen(rng: np.random.Generator) -> Iterable[ErrorSample]:
        base = combine_args(rng, 4, 8, 2, 4, D.ACL_FLOAT16, v1)
        yield ErrorSample({**base, "groupEp": "no_such_group"}, INVALID, "unknown groupEp")
        yield ErrorSample({**base, "commQuantMode": 2}, INVALID, "int8 communication (not implemented)")
        yield ErrorSample({**base, "commQuantMode": 1}, TILING, "commQuantMode 1")
        yield ErrorSample({**base, "outDtype": 1}, TILING, "outDtype 1")
        yield ErrorSample({**base, n["groupList"]: np.zeros(2, np.int64)}, INVALID, "reserved groupList")
        yield ErrorSample({**base, "tpWorldSize": 2}, INVALID, "TP domain (not implemented)")
        yield ErrorSample({**base, "expandX": S.array(rng, (7, 8), D.ACL_FLOAT16)}, TILING, "expandX not A rows")
        yield ErrorSample({**base, "epSendCounts": np.zeros(3, np.int32)}, TILING, "epSendCounts of 3")
        yield ErrorSample({**base, "expertScales": np.zeros((4, 3), np.float32)}, TILING, "expertScales [4, 3]")
        if not v1:
            shared = S.array(rng, (4, 8), D.ACL_FLOAT16)
            yield ErrorSample({**base, "sharedExpertXOptional": shared}, INVALID, "shared expert x (not implemented)")
        bad = np.asarray(base["epSendCounts"]).copy()
        bad[-1] = 99
        yield ErrorSample({**base, "epSendCounts": bad}, INVALID, "counts past A (when it runs)")

    return gen


def _combine(v1: bool) -> OpSpec:
    name = "MoeDistributeCombine" if v1 else "MoeDistributeCombineV2"
    return OpSpec(
        name,
        FAMILY,
        _combine_params(v1),
        _combine_infer(v1),
        samples=_combine_samples(v1),
        error_samples=_combine_errors(v1),
        summary="send each expert output row back to its token's rank and sum the top-k rows weighted by expertScales",
    )


def _combine_length(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> int:
    """MoeDistributeCombine's roundings per output: a product and a sum per top-k expert."""
    shape: tuple[int, ...] = tuple(getattr(args.get("expertIds"), "shape", ()))
    return 2 * (int(shape[-1]) if len(shape) == 2 else 1)


_MOE_COMBINE = reduction(
    length_of=_combine_length, reason="Σ_k expertScales·expandX rows: γ_(2K)·Σ|w||y| (the sum in float64, one rounding)"
)
MOE_SPECS: list[OpSpec] = [_dispatch(True), _dispatch(False), _combine(True), _combine(False)]


_MC2_GEMM = reduction(
    length_of=last_dim("x1", 3),
    reason="the GEMM's K products, the bias (and x3) adds, then the collective's sum: γ_(K+3)·(|x1|·|x2| + |b|)"
    " (conformance runs a communicator of one; a wider one adds its rank count to n)",
)
SPECS: list[OpSpec] = with_accuracy(
    [_all_reduce(False), _all_reduce(True), _AllGatherMatmul, _MatmulReduceScatter, *MOE_SPECS],
    {
        **{op: _MC2_GEMM for op in ("MatmulAllReduce", "MatmulAllReduceV2", "AllGatherMatmul", "MatmulReduceScatter")},
        **{
            op: exact("routing: copies of x rows, or int8 codes and float32 scales every backend rounds alike")
            for op in ("MoeDistributeDispatch", "MoeDistributeDispatchV2")
        },
        **{op: _MOE_COMBINE for op in ("MoeDistributeCombine", "MoeDistributeCombineV2")},
    },
)

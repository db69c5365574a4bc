"""Reference kernels of the MC2 family: the matmul as the single operators compute it, then HCCL's collective.

Each product is formed in float64 on a 2-D view ((b·s, k) @ (k, n), as Mm/Addmm would be called) and
rounded once to the output dtype; V2's x3 is then added and rounded again (as Add). The collective is
the reference engine's own (:mod:`acl_reference.collectives`): rank-order float64 reduction, one cast.
See :mod:`acl_core.spec.ops.mc2` for the semantics and the checks.
"""

from __future__ import annotations

import numpy as np

from acl_core.errors import AclnnError, AclnnStatus, HcclError
from acl_core.spec.collective import ACL_TO_HCCL, EngineCommunicator, HcclDataType, HcclReduceOp
from acl_reference.call import RefCall
from acl_reference.collectives import MpiEngine, engine_for
from acl_reference.kernels import kernel

Array = np.ndarray
SUM = HcclReduceOp.HCCL_REDUCE_SUM


def _group(k: RefCall) -> tuple[MpiEngine, EngineCommunicator]:
    from acl_core.hccl import resolve_group

    engine = engine_for(k.driver)
    try:
        return engine, resolve_group(k["group"], engine, k.driver.current)
    except HcclError as exc:
        raise AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, f"group {k['group']!r}: {exc.message}") from None


def _collective_failed(exc: HcclError) -> AclnnError:
    return AclnnError(AclnnStatus.ACLNN_ERR_RUNTIME_ERROR, f"HCCL failed ({exc}): {exc.message}")


def _product(k: RefCall, bias: str | None) -> Array:
    """x1 @ x2 (+ bias) in float64 on the 2-D view of x1, rounded once to the output dtype, in x1's row shape."""
    x1, x2 = k.read("x1", np.float64), k.read("x2", np.float64)
    with np.errstate(all="ignore"):
        y = np.matmul(x1.reshape(-1, x1.shape[-1]), x2)
        if bias is not None and k[bias] is not None:
            y = y + k.read(bias, np.float64)
    out_dtype = k.dtype("output").numpy
    assert out_dtype is not None
    return y.astype(out_dtype).reshape(*x1.shape[:-1], x2.shape[1])


def _all_reduce(k: RefCall, local: Array) -> None:
    engine, comm = _group(k)
    try:
        total = engine.all_reduce_values(comm, local, ACL_TO_HCCL[k.dtype("output")], SUM)
    except HcclError as exc:
        raise _collective_failed(exc) from None
    k.write("output", total.reshape(local.shape))


@kernel("MatmulAllReduce")
def matmul_all_reduce(k: RefCall) -> None:
    """output = allreduce_sum(round(x1 @ x2 + bias))."""
    _all_reduce(k, _product(k, "bias"))


@kernel("MatmulAllReduceV2")
def matmul_all_reduce_v2(k: RefCall) -> None:
    """output = allreduce_sum(round(round(x1 @ x2 + bias) + x3))."""
    local = _product(k, "bias")
    if k["x3"] is not None:
        with np.errstate(all="ignore"):
            local = (local.astype(np.float64) + k.read("x3", np.float64)).astype(local.dtype)
    _all_reduce(k, local)


@kernel("AllGatherMatmul")
def all_gather_matmul(k: RefCall) -> None:
    """gatherOut = allgather(x1); output = round(gatherOut @ x2)."""
    engine, comm = _group(k)
    x1 = np.ascontiguousarray(k.read("x1"))
    try:
        parts = engine.all_gather_values(comm, x1.tobytes(), x1.size, ACL_TO_HCCL[k.dtype("x1")])
    except HcclError as exc:
        raise _collective_failed(exc) from None
    gathered = np.frombuffer(b"".join(parts), dtype=x1.dtype).reshape(-1, x1.shape[1])
    k.write("gatherOut", gathered)
    out_dtype = k.dtype("output").numpy
    assert out_dtype is not None
    with np.errstate(all="ignore"):
        k.write("output", np.matmul(gathered.astype(np.float64), k.read("x2", np.float64)).astype(out_dtype))


@kernel("MatmulReduceScatter")
def matmul_reduce_scatter(k: RefCall) -> None:
    """output = rows [r·m/N, (r+1)·m/N) of allreduce_sum(round(x1 @ x2)) on rank r."""
    local = _product(k, None)
    engine, comm = _group(k)
    try:
        mine = engine.reduce_scatter_values(comm, local, ACL_TO_HCCL[k.dtype("output")], SUM)
    except HcclError as exc:
        raise _collective_failed(exc) from None
    k.write("output", mine.reshape(local.shape[0] // comm.size, local.shape[1]))


# ----------------------------------------------------------------------------- MoeDistributeDispatch / Combine
def _ep_group(k: RefCall) -> tuple[MpiEngine, EngineCommunicator]:
    from acl_core.hccl import resolve_group

    engine = engine_for(k.driver)
    try:
        return engine, resolve_group(k["groupEp"], engine, k.driver.current)
    except HcclError as exc:
        raise AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, f"groupEp {k['groupEp']!r}: {exc.message}") from None


def _gather(engine: MpiEngine, comm: EngineCommunicator, values: Array) -> list[Array]:
    """Every rank's ``values`` (same shape and dtype on every rank), in rank order, through HCCL's all-gather."""
    data = np.ascontiguousarray(values)
    raw_dtype = np.dtype(np.uint8)
    raw = data.view(raw_dtype).reshape(-1) if data.size else np.zeros(0, raw_dtype)
    try:
        parts = engine.all_gather_values(comm, raw.tobytes(), raw.size, HcclDataType.HCCL_DATA_TYPE_UINT8)
    except HcclError as exc:
        raise _collective_failed(exc) from None
    return [np.frombuffer(p, dtype=data.dtype).reshape(data.shape) for p in parts]


def _active(k: RefCall, name: str, bs: int, top_k: int) -> Array:
    """The (Bs, K) copies that take part: all without a mask, a token's K copies for a 1-D mask."""
    if k[name] is None:
        return np.ones((bs, top_k), bool)
    mask = k.read(name).astype(bool)
    return np.repeat(mask[:, None], top_k, axis=1) if mask.ndim == 1 else mask


def _raise_bad_ids(parts: list[Array], experts: int) -> None:
    for rank, ids in enumerate(parts):
        if ids.size and (ids.min() < 0 or ids.max() >= experts):
            raise AclnnError(
                AclnnStatus.ACLNN_ERR_PARAM_INVALID,
                f"expertIds of rank {rank} must lie in [0, {experts - 1}] (moeExpertNum {experts})",
            )


def _dispatch(k: RefCall, v1: bool) -> None:
    """Every rank's tokens are gathered; this rank keeps the copies for its experts, in (local expert, rank, token)."""
    from acl_core.spec.ops.mc2 import ASSIST_PER_ROW, _names
    from acl_reference.kernels.moe import dynamic_quant_v3

    n = _names(v1)
    engine, comm = _ep_group(k)
    x, ids = k.read("x"), k.read("expertIds").astype(np.int32)
    bs, top_k = ids.shape
    world, me = comm.size, comm.rank
    experts = int(k.value("moeExpertNum"))
    local = experts // world
    active = _active(k, n["xActiveMask"], bs, top_k)
    weights = k.read(n["expertScales"], np.float32) if k[n["expertScales"]] is not None else np.zeros((bs, top_k))
    xs, id_parts = _gather(engine, comm, x), _gather(engine, comm, ids)
    masks, weight_parts = _gather(engine, comm, active), _gather(engine, comm, weights.astype(np.float32))
    _raise_bad_ids(id_parts, experts)
    received: list[tuple[int, int, int, int]] = []  # (local expert, source rank, token, slot), in arrival order
    counts = np.zeros((local, world), np.int64)
    for le in range(local):
        expert = me * local + le
        for s in range(world):
            for i in range(bs):
                for j in range(top_k):
                    if masks[s][i, j] and id_parts[s][i, j] == expert:
                        received.append((le, s, i, j))
                        counts[le, s] += 1
    rows_out = k[n["expandX"]].shape[0]
    if len(received) > rows_out:  # only repeated ids within a token send more than min(E/W, K) copies of it
        raise AclnnError(
            AclnnStatus.ACLNN_ERR_PARAM_INVALID,
            f"{len(received)} copies arrive for this rank's experts; expandXOut has {rows_out} rows"
            " (a token names one expert more than once)",
        )
    hidden = x.shape[1]
    src = np.stack([xs[s][i] for _, s, i, _ in received]) if received else np.zeros((0, hidden), x.dtype)
    quant = int(k.value("quantMode"))
    out = np.zeros((rows_out, hidden), np.int8 if quant == 2 else x.dtype)
    if quant == 2:
        smooth = None
        if k[n["scales"]] is not None:
            table = k.read(n["scales"], np.float32)
            smooth = np.stack([table[me * local + le] for le, _, _, _ in received]) if received else None
        codes, scales = dynamic_quant_v3(src, smooth)
        out[: len(received)] = codes
        dyn = np.zeros(rows_out, np.float32)
        dyn[: len(received)] = scales
        k.write(n["dynamicScales"], dyn)
    else:
        out[: len(received)] = src
    k.write(n["expandX"], out)
    if k[n["expandScalesOut"]] is not None:
        carried = np.zeros(rows_out, np.float32)
        carried[: len(received)] = [weight_parts[s][i, j] for _, s, i, j in received]
        k.write(n["expandScalesOut"], carried)
    k.write(n["epRecvCounts"], np.cumsum(counts.reshape(-1)))
    per_expert = counts.sum(axis=1)
    k.write(n["expertTokenNums"], np.cumsum(per_expert) if int(k.value("expertTokenNumsType")) == 0 else per_expert)
    if v1:  # expandIdx: the n-th of this rank's active tokens for the same expert
        seen: dict[int, int] = {}
        expand_idx = np.full(bs * top_k, -1, np.int64)
        for i in range(bs):
            for j in range(top_k):
                if active[i, j]:
                    e = int(ids[i, j])
                    expand_idx[i * top_k + j] = seen.get(e, 0)
                    seen[e] = seen.get(e, 0) + 1
        k.write(n["assist"], expand_idx)
    else:
        assist = np.zeros((rows_out, ASSIST_PER_ROW), np.int64)
        for p, (_, s, i, j) in enumerate(received):
            assist[p, :3] = (s, i, j)
        k.write(n["assist"], assist.reshape(-1))


@kernel("MoeDistributeDispatch")
def moe_distribute_dispatch(k: RefCall) -> None:
    """Expert-parallel dispatch with expandIdx (V1)."""
    _dispatch(k, True)


@kernel("MoeDistributeDispatchV2")
def moe_distribute_dispatch_v2(k: RefCall) -> None:
    """Expert-parallel dispatch with assistInfoForCombineOut (V2, and V3/V4 through it)."""
    _dispatch(k, False)


def _combine(k: RefCall, v1: bool) -> None:
    """Every rank's expert outputs are gathered; each token sums its K rows weighted by expertScales, in float64."""
    from acl_core.spec.ops.mc2 import ASSIST_PER_ROW, _names

    n = _names(v1)
    engine, comm = _ep_group(k)
    world, me = comm.size, comm.rank
    y = k.read("expandX")
    ids = k.read("expertIds").astype(np.int64)
    bs, top_k = ids.shape
    local = int(k.value("moeExpertNum")) // world
    active = _active(k, n["xActiveMask"], bs, top_k)
    weights = k.read("expertScales", np.float64)
    counts = k.read("epSendCounts").astype(np.int32)
    ys, count_parts = _gather(engine, comm, y), _gather(engine, comm, counts)
    for t, c in enumerate(count_parts):  # every rank sees every rank's counts: all refuse alike
        if c.size and (np.any(np.diff(c.astype(np.int64)) < 0) or c[0] < 0 or c[-1] > y.shape[0]):
            raise AclnnError(
                AclnnStatus.ACLNN_ERR_PARAM_INVALID,
                f"epSendCounts of rank {t} must be a running total of at most {y.shape[0]} rows",
            )
    rows = np.full((bs, top_k, 2), -1, np.int64)  # (rank, row) of each copy's expert output
    if v1:
        expand_idx = k.read(n["assistIn"]).astype(np.int64).reshape(bs, top_k)
        for i in range(bs):
            for j in range(top_k):
                if not active[i, j]:
                    continue
                if not 0 <= ids[i, j] < local * world:
                    raise AclnnError(
                        AclnnStatus.ACLNN_ERR_PARAM_INVALID,
                        f"expertIds[{i}, {j}] = {ids[i, j]} is not an expert of the domain"
                        f" (moeExpertNum {local * world})",
                    )
                t, le = divmod(int(ids[i, j]), local)
                cum = count_parts[t].astype(np.int64)
                at = le * world + me
                start = int(cum[at - 1]) if at else 0
                row = start + int(expand_idx[i, j])
                if not start <= row < int(cum[at]):
                    raise AclnnError(
                        AclnnStatus.ACLNN_ERR_PARAM_INVALID,
                        f"expandIdx[{i * top_k + j}] is not a row"
                        f" rank {t} received from this rank for expert {ids[i, j]}",
                    )
                rows[i, j] = (t, row)
    else:
        assist = k.read(n["assistIn"]).astype(np.int32)
        for t, info in enumerate(_gather(engine, comm, assist)):
            table = info.reshape(-1, ASSIST_PER_ROW).astype(np.int64)
            for p in range(int(count_parts[t][-1]) if count_parts[t].size else 0):
                s, i, j = table[p, :3]
                if s == me and 0 <= i < bs and 0 <= j < top_k:
                    rows[i, j] = (t, p)
    out = np.zeros((bs, y.shape[1]), np.float64)
    for i in range(bs):
        for j in range(top_k):
            if not active[i, j]:
                continue
            t, p = rows[i, j]
            if t < 0:
                raise AclnnError(
                    AclnnStatus.ACLNN_ERR_PARAM_INVALID,
                    f"no expert output row for token {i}, slot {j}"
                    " (assistInfoForCombine and epSendCounts must come from the dispatch)",
                )
            out[i] += weights[i, j] * ys[t][p].astype(np.float64)
    k.write(n["xOut"], out)


@kernel("MoeDistributeCombine")
def moe_distribute_combine(k: RefCall) -> None:
    """Expert-parallel combine through expandIdx (V1)."""
    _combine(k, True)


@kernel("MoeDistributeCombineV2")
def moe_distribute_combine_v2(k: RefCall) -> None:
    """Expert-parallel combine through assistInfoForCombine (V2, and V3/V4 through it)."""
    _combine(k, False)

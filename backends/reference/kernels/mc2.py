"""Reference kernels of the MC2 family: the matmul as the single operators compute it, then HCCL's collective.

Each product is formed in float64 on a 2-D view ((b·s, k) @ (k, n), as Mm/Addmm would be called) and
rounded once to the output dtype; V2's x3 is then added and rounded again (as Add). The collective is
the reference engine's own (:mod:`acl_reference.collectives`): rank-order float64 reduction, one cast.
See :mod:`acl_core.spec.ops.mc2` for the semantics and the checks.
"""

from __future__ import annotations

import numpy as np

from acl_core.errors import AclnnError, AclnnStatus, HcclError
from acl_core.spec.collective import ACL_TO_HCCL, EngineCommunicator, HcclReduceOp
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

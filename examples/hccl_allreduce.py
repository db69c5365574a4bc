"""HCCL across processes: an all-reduce and an MC2 MatmulAllReduce, written as CANN code is.

Run it with N ranks (each an MPI process with its own reference device)::

    mpiexec -n 4 python examples/hccl_allreduce.py

The root info (4108 bytes) is made on rank 0 and handed to every rank out of band, here through
mpi4py, as HCCL programs hand it through MPI, a file or a TCP store. The MPICH setting below makes
MPI_Finalize local, so a rank that outlives a dead peer can still exit (see docs/COLLECTIVES.md).
"""

import os
import sys

os.environ.setdefault("MPIR_CVAR_NO_COLLECTIVE_FINALIZE", "1")  # before MPI starts

import numpy as np

from acl_core import acl, aclnn, eager, hccl
from acl_core.dtypes import DataType
from acl_core.extras import MissingExtra

try:
    from mpi4py import MPI
except ModuleNotFoundError:
    print(MissingExtra("mpi4py", "examples/hccl_allreduce.py"), file=sys.stderr)
    sys.exit(2)

ACL_MEM_MALLOC_HUGE_FIRST = 0
ACL_MEMCPY_HOST_TO_DEVICE = 1
ACL_MEMCPY_DEVICE_TO_HOST = 2


def check(ret: int, what: str) -> None:
    """Stop with the HCCL/acl reason when a call fails."""
    if ret != 0:
        raise RuntimeError(f"{what} failed with {ret}: {hccl.HcclGetErrorString(ret)} ({hccl.last_error_message()})")


def main() -> None:
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    check(acl.init(), "acl.init")
    check(acl.rt.set_device(rank % 8), "acl.rt.set_device")
    stream, ret = acl.rt.create_stream()
    check(ret, "acl.rt.create_stream")

    root_info = None
    if rank == 0:
        root_info, ret = hccl.HcclGetRootInfo()
        check(ret, "HcclGetRootInfo")
    root_info = world.bcast(root_info, root=0)
    comm, ret = hccl.HcclCommInitRootInfo(size, root_info, rank)
    check(ret, "HcclCommInitRootInfo")

    # HcclAllReduce: every rank contributes rank + 1; everyone gets 1 + 2 + ... + size
    host = np.full(1024, rank + 1, dtype=np.float32)
    send, ret = acl.rt.malloc(host.nbytes, ACL_MEM_MALLOC_HUGE_FIRST)
    recv, ret = acl.rt.malloc(host.nbytes, ACL_MEM_MALLOC_HUGE_FIRST)
    check(
        acl.rt.memcpy(send, host.nbytes, acl.util.numpy_to_ptr(host), host.nbytes, ACL_MEMCPY_HOST_TO_DEVICE), "memcpy"
    )
    ret = hccl.HcclAllReduce(send, recv, host.size, hccl.HCCL_DATA_TYPE_FP32, hccl.HCCL_REDUCE_SUM, comm, stream)
    check(ret, "HcclAllReduce")
    check(acl.rt.synchronize_stream(stream), "synchronize_stream")
    result = np.empty_like(host)
    check(
        acl.rt.memcpy(acl.util.numpy_to_ptr(result), result.nbytes, recv, result.nbytes, ACL_MEMCPY_DEVICE_TO_HOST),
        "memcpy",
    )
    assert np.all(result == size * (size + 1) / 2), result[:4]

    # MC2: aclnnMatmulAllReduce takes the communicator's *name* as its group
    group, ret = hccl.HcclGetCommName(comm)
    check(ret, "HcclGetCommName")
    rng = np.random.default_rng(rank)
    x1 = eager.to_device(rng.uniform(-1, 1, (8, 64)).astype(np.float16))
    x2 = eager.to_device(rng.uniform(-1, 1, (64, 16)).astype(np.float16))
    out = eager.empty((8, 16), DataType.ACL_FLOAT16)
    ws_size, executor, ret = aclnn.aclnnMatmulAllReduceGetWorkspaceSize(
        x1.tensor(), x2.tensor(), None, group, "sum", 0, 1, out.tensor()
    )
    check(ret, f"aclnnMatmulAllReduceGetWorkspaceSize ({aclnn.aclGetRecentErrMsg()})")
    check(aclnn.aclnnMatmulAllReduce(None, ws_size, executor, stream), "aclnnMatmulAllReduce")
    check(acl.rt.synchronize_stream(stream), "synchronize_stream")
    checksum = world.allgather(float(out.numpy().astype(np.float64).sum()))
    assert len(set(checksum)) == 1, "every rank holds the same reduced product"

    if rank == 0:
        print(f"{size} ranks on {group}: all-reduce {result[0]:g}, MatmulAllReduce checksum {checksum[0]:.4f}")
    check(hccl.HcclCommDestroy(comm), "HcclCommDestroy")
    for address in (send, recv):
        check(acl.rt.free(address), "acl.rt.free")
    check(acl.rt.destroy_stream(stream), "acl.rt.destroy_stream")
    check(acl.rt.reset_device(rank % 8), "acl.rt.reset_device")
    check(acl.finalize(), "acl.finalize")


if __name__ == "__main__":
    main()

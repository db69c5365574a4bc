"""One rank of the fault test: the last rank is SIGKILLed in the middle of an all-reduce.

Launched as ``mpiexec -disable-auto-cleanup -n 4 python faults.py REPORT_DIR`` with a short
HCCL_EXEC_TIMEOUT. After a first all-reduce that every rank completes, the other three enter a
second one and the last rank dies while they wait inside it for its data (it dies before sending:
had it delivered its data to some rank first, that rank's all-reduce would rightly succeed). The
three must come back with HCCL_E_TIMEOUT within the limit, get HCCL_E_TIMEOUT at once from a later
call on the broken communicator, write their report and exit.

Hydra (MPICH's mpiexec) kills every rank when one dies *by a signal*, whatever -disable-auto-cleanup
says, so the victim runs the MPI program in a child process and its parent, the process mpiexec
started, turns the child's SIGKILL into an ordinary exit status. MPI sees a rank vanish either way.
"""

from __future__ import annotations

import os
import signal
import sys
import time

if os.environ.get("PMI_RANK") == str(int(os.environ.get("PMI_SIZE", "0")) - 1):
    child = os.fork()
    if child:
        _, status = os.waitpid(child, 0)
        os._exit(128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))

import numpy as np
from common import RANK, SIZE, check, device, empty, expect, finish, make_comm, start

from acl_core import hccl
from acl_core.spec.collective import HcclDataType

COUNT = 1 << 18  # 1 MB of float32 per rank


def main() -> None:
    report = sys.argv[1]
    start()
    comm = make_comm()
    fp32 = int(HcclDataType.HCCL_DATA_TYPE_FP32)
    send, recv = device(np.full(COUNT, RANK, np.float32)), empty(COUNT * 4)
    expect(hccl.HcclAllReduce(send, recv, COUNT, fp32, 0, comm, None), 0, "all-reduce before the fault")
    if RANK == SIZE - 1:
        time.sleep(0.3)  # the others are inside HcclAllReduce by now, waiting for this rank
        os.kill(os.getpid(), signal.SIGKILL)
    began = time.monotonic()
    ret = hccl.HcclAllReduce(send, recv, COUNT, fp32, 0, comm, None)
    elapsed = time.monotonic() - began
    reason = hccl.last_error_message()
    check(ret == 9, f"all-reduce with a dead rank returned {ret}, expected HCCL_E_TIMEOUT (9): {reason}")
    began = time.monotonic()
    again = hccl.HcclAllReduce(send, recv, 4, fp32, 0, comm, None)
    check(again == 9 and time.monotonic() - began < 0.5, f"a later call on the broken communicator returned {again}")
    finish(report, {"code": ret, "elapsed": elapsed, "reason": reason})


if __name__ == "__main__":
    main()

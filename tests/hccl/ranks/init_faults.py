"""One rank of the communicator-forming faults, two ranks, a short HCCL_CONNECT_TIMEOUT.

1. Rank 1 never joins: rank 0 (the root info's maker) returns HCCL_E_TIMEOUT within the limit.
2. The maker never joins: rank 1 returns HCCL_E_TIMEOUT within the limit.
3. Both join claiming rank 0: both return HCCL_E_PARA at once.
4. A fresh root info afterwards still forms a working communicator.
"""

from __future__ import annotations

import sys
import time

import numpy as np
from common import RANK, SIZE, WORLD, check, device, empty, expect, finish, host, start

from acl_core import hccl
from acl_core.spec.collective import Timeouts

LIMIT = Timeouts.from_env().connect_s


def timed_init(info: bytes, rank: int) -> tuple[int, float]:
    """HcclCommInitRootInfo(2, info, rank): its code and how long it took."""
    began = time.monotonic()
    _, ret = hccl.HcclCommInitRootInfo(2, info, rank)
    return ret, time.monotonic() - began


def fresh_info() -> bytes:
    """A new root info made on rank 0, broadcast."""
    return WORLD.bcast(hccl.HcclGetRootInfo()[0] if RANK == 0 else None, root=0)


def main() -> None:
    assert SIZE == 2
    report = sys.argv[1]
    start()
    timings: dict[str, float] = {}

    info = fresh_info()
    if RANK == 0:
        ret, timings["absent_joiner"] = timed_init(info, 0)
        expect(ret, 9, "the maker waiting for a rank that never joins")
        check(timings["absent_joiner"] <= LIMIT + 1.0, f"took {timings['absent_joiner']:.2f}s (limit {LIMIT}s)")
    WORLD.barrier()

    info = fresh_info()
    if RANK == 1:
        ret, timings["absent_maker"] = timed_init(info, 1)
        expect(ret, 9, "a rank joining a maker that never forms the communicator")
        check(timings["absent_maker"] <= LIMIT + 1.0, f"took {timings['absent_maker']:.2f}s (limit {LIMIT}s)")
    WORLD.barrier()

    info = fresh_info()
    ret, timings["duplicate_rank"] = timed_init(info, 0)
    expect(ret, 1, "two processes joining as rank 0")
    check(timings["duplicate_rank"] < LIMIT, "a duplicate rank is reported without waiting for the timeout")
    WORLD.barrier()

    info = fresh_info()
    comm, ret = hccl.HcclCommInitRootInfo(2, info, RANK)
    if expect(ret, 0, "forming a communicator after the faults"):
        send, recv = device(np.array([RANK + 1], np.int32)), empty(4)
        expect(hccl.HcclAllReduce(send, recv, 1, 2, 0, comm, None), 0, "all-reduce after the faults")
        check(np.frombuffer(host(recv, 4), np.int32).tolist() == [3], "sum after the faults")
        expect(hccl.HcclCommDestroy(comm), 0, "HcclCommDestroy")
    finish(report, {"timings": timings})


if __name__ == "__main__":
    main()

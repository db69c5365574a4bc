"""HCCL collective bandwidth in nccl-tests' form: time, algorithm and bus bandwidth per message size.

Run under MPI, one process per rank::

    mpiexec -n 4 python -m acl_tools.bench.collectives --out reports/bench-hccl.json

For each collective and size: the time of one call (the slowest rank's mean over a fixed number of
calls, the same on every rank), ``algbw`` = bytes / time and ``busbw`` = algbw × the nccl-tests
factor that makes collectives comparable with the link bandwidth (all-reduce 2(n-1)/n; all-gather,
reduce-scatter and all-to-all (n-1)/n; broadcast 1), and ``wrong``: elements that differ from the
expected result. ``size`` is nccl-tests' too: the bytes of the larger of send and receive buffer.
Rank 0 prints the table and writes the JSON.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from acl_core import acl, get_backend, hccl

FP32 = int(hccl.HcclDataType.HCCL_DATA_TYPE_FP32)
SUM = int(hccl.HcclReduceOp.HCCL_REDUCE_SUM)
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")


def bus_factor(name: str, n: int) -> float:
    """nccl-tests' bus-bandwidth factor of a collective on ``n`` ranks."""
    if name == "all_reduce":
        return 2 * (n - 1) / n
    if name == "broadcast":
        return 1.0
    return (n - 1) / n


def _check(ret: int, what: str) -> None:
    if ret != 0:
        raise RuntimeError(f"{what} returned {ret}: {hccl.last_error_message()}")


def _device(values: np.ndarray) -> int:
    address, ret = acl.rt.malloc(max(values.nbytes, 1), 0)
    _check(ret, "acl.rt.malloc")
    _check(acl.rt.memcpy(address, values.nbytes, acl.util.numpy_to_ptr(values), values.nbytes, 1), "memcpy")
    return address


def _host(address: int, count: int) -> np.ndarray:
    out = np.empty(count, np.float32)
    _check(acl.rt.memcpy(acl.util.numpy_to_ptr(out), out.nbytes, address, out.nbytes, 2), "memcpy")
    return out


def _case(
    name: str, comm: Any, stream: int, rank: int, n: int, size: int
) -> tuple[Callable[[], int], Callable[[], int]]:
    """(one call, number of wrong elements after it) for ``name`` moving ``size`` bytes in its larger buffer."""
    per_rank = max(size // 4 // (1 if name in ("all_reduce", "broadcast") else n), 1)
    total = per_rank * (1 if name in ("all_reduce", "broadcast") else n)
    mine = np.full(total, rank + 1, np.float32)
    send, recv = _device(mine), _device(np.zeros(total, np.float32))
    if name == "all_reduce":
        expected = np.full(total, n * (n + 1) / 2, np.float32)
        call = lambda: hccl.HcclAllReduce(send, recv, total, FP32, SUM, comm, stream)
    elif name == "all_gather":
        send = _device(np.full(per_rank, rank + 1, np.float32))
        expected = np.repeat(np.arange(1, n + 1, dtype=np.float32), per_rank)
        call = lambda: hccl.HcclAllGather(send, recv, per_rank, FP32, comm, stream)
    elif name == "reduce_scatter":
        recv = _device(np.zeros(per_rank, np.float32))
        expected = np.full(per_rank, n * (n + 1) / 2, np.float32)
        call = lambda: hccl.HcclReduceScatter(send, recv, per_rank, FP32, SUM, comm, stream)
    elif name == "all_to_all":
        send = _device(np.repeat(np.arange(n, dtype=np.float32) + 100 * rank, per_rank))
        expected = np.repeat(np.arange(n, dtype=np.float32) * 100 + rank, per_rank)
        call = lambda: hccl.HcclAlltoAll(send, per_rank, FP32, recv, per_rank, FP32, comm, stream)
    else:
        recv = send
        expected = np.full(total, n, np.float32)  # the root is the last rank, whose data are n
        call = lambda: hccl.HcclBroadcast(send, total, FP32, n - 1, comm, stream)

    def wrong() -> int:
        return int(np.count_nonzero(_host(recv, expected.size) != expected))

    return call, wrong


def run(sizes: Sequence[int], collectives: Sequence[str] = COLLECTIVES, warmup: int = 2) -> dict[str, Any]:
    """Measure every collective at every size on a communicator of every MPI rank; rank 0 gets the rows."""
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    rank, n = world.Get_rank(), world.Get_size()
    acl.init()
    _check(acl.rt.set_device(rank % 8), "acl.rt.set_device")
    stream, ret = acl.rt.create_stream()
    _check(ret, "acl.rt.create_stream")
    info = world.bcast(hccl.HcclGetRootInfo()[0] if rank == 0 else None, root=0)
    comm, ret = hccl.HcclCommInitRootInfo(n, info, rank)
    _check(ret, "HcclCommInitRootInfo")
    table: dict[str, list[dict[str, float | int | str]]] = {}
    for name in collectives:
        rows = table[name] = []
        for size in sizes:
            call, wrong = _case(name, comm, stream, rank, n, size)
            iters = max(3, min(50, (1 << 22) // max(size, 1)))
            for _ in range(warmup):
                _check(call(), name)
            _check(hccl.HcclBarrier(comm, stream), "HcclBarrier")
            began = time.perf_counter()
            for _ in range(iters):
                _check(call(), name)
            _check(acl.rt.synchronize_stream(stream), "synchronize_stream")
            seconds = world.allreduce((time.perf_counter() - began) / iters, op=MPI.MAX)
            errors = world.allreduce(wrong(), op=MPI.SUM)
            algbw = size / seconds / 1e9
            rows.append(
                {
                    "size": size,
                    "count": size // 4,
                    "type": "float",
                    "redop": "sum" if name in ("all_reduce", "reduce_scatter") else "none",
                    "root": n - 1 if name == "broadcast" else -1,
                    "time_us": seconds * 1e6,
                    "algbw_GBps": algbw,
                    "busbw_GBps": algbw * bus_factor(name, n),
                    "wrong": errors,
                    "iters": iters,
                }
            )
    _check(hccl.HcclCommDestroy(comm), "HcclCommDestroy")
    return {"ranks": n, "collectives": table}


def _print(results: dict[str, Any]) -> None:
    print(f"# nranks {results['ranks']}")
    head = ("size", 12), ("count", 10), ("type", 6), ("redop", 6), ("root", 5), ("time(us)", 10), ("algbw", 8)
    print("# " + " ".join(f"{t:>{w}}" for t, w in head) + f" {'busbw':>8} {'#wrong':>6}")
    for name, rows in results["collectives"].items():
        print(f"# {name}")
        for r in rows:
            print(
                f"  {r['size']:>12} {r['count']:>10} {r['type']:>6} {r['redop']:>6} {r['root']:>5} "
                f"{r['time_us']:>10.1f} {r['algbw_GBps']:>8.3f} {r['busbw_GBps']:>8.3f} {r['wrong']:>6}"
            )


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line, measure, and (on rank 0) print and write the JSON."""
    p = argparse.ArgumentParser(prog="python -m acl_tools.bench.collectives", description=__doc__.splitlines()[0])
    p.add_argument("--min-bytes", type=int, default=8)
    p.add_argument("--max-bytes", type=int, default=1 << 22)
    p.add_argument("--factor", type=int, default=4, help="size multiplier between steps (nccl-tests' -f)")
    p.add_argument("--ops", default=",".join(COLLECTIVES), help=f"comma-separated subset of {', '.join(COLLECTIVES)}")
    p.add_argument("--out", type=Path, default=Path("reports") / "bench-hccl.json")
    args = p.parse_args(argv)
    sizes, size = [], args.min_bytes
    while size <= args.max_bytes:
        sizes.append(size)
        size *= max(args.factor, 2)
    ops = [o for o in args.ops.split(",") if o]
    unknown = set(ops) - set(COLLECTIVES)
    if unknown:
        p.error(f"unknown collectives: {', '.join(sorted(unknown))}")
    results = run(sizes, ops)
    from mpi4py import MPI

    if MPI.COMM_WORLD.Get_rank() == 0:
        backend = get_backend()
        _print(results)
        report = {
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "command": "python -m acl_tools.bench.collectives " + " ".join(argv if argv is not None else sys.argv[1:]),
            "backend": backend.name,
            "engine": backend.collectives.name if backend.collectives else None,
            "machine": {"python": platform.python_version(), "numpy": np.__version__},
            **results,
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2))
        print(f"# written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""HCCL collective bandwidth in nccl-tests' form: time, algorithm and bus bandwidth per message size.

Run one process per rank, under MPI or :mod:`acl_tools.launch` (no MPI needed there)::

    mpiexec -n 4 python -m acl_tools.bench.collectives --out reports/bench-hccl.json
    python -m acl_tools.launch -n 2 -- python -m acl_tools.bench.collectives --engine torch --out t.json

``--engine acl`` (the default) measures acl-core's HCCL on the default backend; ``--engine torch``
measures torch.distributed (NCCL on GPUs, gloo on the CPU) with the same sizes, data, timing and
process layout, for a side-by-side figure (:mod:`acl_tools.bench.compare_collectives` joins the two).

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
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from acl_core import acl, get_backend, hccl
from acl_core.names import UnknownName, resolve, split
from acl_tools.world import DIR_ENV, World, current

FP32 = int(hccl.HcclDataType.HCCL_DATA_TYPE_FP32)
SUM = int(hccl.HcclReduceOp.HCCL_REDUCE_SUM)
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")
Case = tuple[Callable[[], None], Callable[[], int], Callable[[], None]]
"""(one call, number of wrong elements after it, free the buffers)."""


def bus_factor(name: str, n: int) -> float:
    """nccl-tests' bus-bandwidth factor of a collective on ``n`` ranks."""
    if name == "all_reduce":
        return 2 * (n - 1) / n
    if name == "broadcast":
        return 1.0
    return (n - 1) / n


def case_data(name: str, rank: int, n: int, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(send, initial receive, expected receive) float32 host arrays of ``name`` moving ``size`` bytes."""
    per_rank = max(size // 4 // (1 if name in ("all_reduce", "broadcast") else n), 1)
    total = per_rank * (1 if name in ("all_reduce", "broadcast") else n)
    if name == "all_reduce":
        return (
            np.full(total, rank + 1, np.float32),
            np.zeros(total, np.float32),
            np.full(total, n * (n + 1) / 2, np.float32),
        )
    if name == "all_gather":
        expected = np.repeat(np.arange(1, n + 1, dtype=np.float32), per_rank)
        return np.full(per_rank, rank + 1, np.float32), np.zeros(total, np.float32), expected
    if name == "reduce_scatter":
        expected = np.full(per_rank, n * (n + 1) / 2, np.float32)
        return np.full(total, rank + 1, np.float32), np.zeros(per_rank, np.float32), expected
    if name == "all_to_all":
        send = np.repeat(np.arange(n, dtype=np.float32) + 100 * rank, per_rank)
        return send, np.zeros(total, np.float32), np.repeat(np.arange(n, dtype=np.float32) * 100 + rank, per_rank)
    # broadcast, in place, from the last rank, whose data are n
    return np.full(total, rank + 1, np.float32), np.empty(0, np.float32), np.full(total, n, np.float32)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        raise RuntimeError(f"{what} returned {ret}: {hccl.last_error_message()}")


class AclSide:
    """acl-core's HCCL on the default backend: rank r on device r, one stream, one communicator."""

    def __init__(self, world: World) -> None:
        self.world = world
        _check(acl.init(), "acl.init")
        _check(acl.rt.set_device(world.rank % 8), "acl.rt.set_device")
        self.stream, ret = acl.rt.create_stream()
        _check(ret, "acl.rt.create_stream")
        info = world.bcast(hccl.HcclGetRootInfo()[0] if world.rank == 0 else None, root=0)
        self.comm, ret = hccl.HcclCommInitRootInfo(world.size, info, world.rank)
        _check(ret, "HcclCommInitRootInfo")
        backend, engine = get_backend(), get_backend().collectives
        version = getattr(engine, "nccl_version", None)
        self.name = f"acl-core {backend.name}/{engine.name if engine else None}" + (f" {version}" if version else "")

    def _device(self, values: np.ndarray) -> int:
        address, ret = acl.rt.malloc(max(values.nbytes, 1), 0)
        _check(ret, "acl.rt.malloc")
        if values.nbytes:
            copied = acl.rt.memcpy(address, values.nbytes, acl.util.numpy_to_ptr(values), values.nbytes, 1)
            _check(copied, "memcpy")
        return address

    def case(self, name: str, size: int) -> Case:
        """The HCCL call of ``name`` at ``size`` bytes on device buffers."""
        n, comm, stream = self.world.size, self.comm, self.stream
        mine, initial, expected = case_data(name, self.world.rank, n, size)
        send = self._device(mine)
        recv = send if name == "broadcast" else self._device(initial)
        count = expected.size
        if name == "all_reduce":
            call = lambda: hccl.HcclAllReduce(send, recv, count, FP32, SUM, comm, stream)
        elif name == "all_gather":
            call = lambda: hccl.HcclAllGather(send, recv, mine.size, FP32, comm, stream)
        elif name == "reduce_scatter":
            call = lambda: hccl.HcclReduceScatter(send, recv, count, FP32, SUM, comm, stream)
        elif name == "all_to_all":
            call = lambda: hccl.HcclAlltoAll(send, count // n, FP32, recv, count // n, FP32, comm, stream)
        else:
            call = lambda: hccl.HcclBroadcast(send, count, FP32, n - 1, comm, stream)

        def wrong() -> int:
            out = np.empty(count, np.float32)
            _check(acl.rt.memcpy(acl.util.numpy_to_ptr(out), out.nbytes, recv, out.nbytes, 2), "memcpy")
            return int(np.count_nonzero(out != expected))

        def free() -> None:
            for address in {send, recv}:
                _check(acl.rt.free(address), "acl.rt.free")

        return lambda: _check(call(), name), wrong, free

    def barrier(self) -> None:
        """HcclBarrier (waits for the stream)."""
        _check(hccl.HcclBarrier(self.comm, self.stream), "HcclBarrier")

    def sync(self) -> None:
        """Wait for this rank's stream."""
        _check(acl.rt.synchronize_stream(self.stream), "synchronize_stream")

    def close(self) -> None:
        """HcclCommDestroy."""
        _check(hccl.HcclCommDestroy(self.comm), "HcclCommDestroy")


class TorchSide:
    """torch.distributed with the same data: NCCL on GPU ``rank`` when torch has CUDA, else gloo on the CPU."""

    def __init__(self, world: World, backend: str | None = None) -> None:
        import torch
        import torch.distributed as dist

        self.torch, self.dist, self.world = torch, dist, world
        self.backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
        self.device = torch.device("cuda", world.rank) if self.backend == "nccl" else torch.device("cpu")
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        if os.environ.get(DIR_ENV):  # one FileStore per job, in the launcher's shared directory
            init = "file://" + str(Path(os.environ[DIR_ENV]) / "torch-store")
        else:
            init = "env://"
        dist.init_process_group(self.backend, init_method=init, rank=world.rank, world_size=world.size)
        version = torch.cuda.nccl.version() if self.backend == "nccl" else None
        self.name = f"torch.distributed {torch.__version__}/{self.backend}" + (f" {version}" if version else "")

    def case(self, name: str, size: int) -> Case:
        """The torch.distributed call of ``name`` at ``size`` bytes (all-reduce in place: torch has no other)."""
        torch, dist, n = self.torch, self.dist, self.world.size
        mine, initial, expected = case_data(name, self.world.rank, n, size)
        send = torch.tensor(mine, device=self.device)  # a copy: on the CPU from_numpy would share ``mine``
        recv = send if name in ("all_reduce", "broadcast") else torch.tensor(initial, device=self.device)
        # torch 2.13 renamed the tensor forms (*_single); older releases have only the *_tensor names
        reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        if name == "all_reduce":
            call = lambda: dist.all_reduce(send)
        elif name == "all_gather":
            call = lambda: all_gather(recv, send)
        elif name == "reduce_scatter":
            call = lambda: reduce_scatter(recv, send)
        elif name == "all_to_all":
            call = lambda: dist.all_to_all_single(recv, send)
        else:
            call = lambda: dist.broadcast(send, src=n - 1)

        def run() -> None:
            call()

        def wrong() -> int:
            if name == "all_reduce":  # in place: one call's result, from fresh data
                send.copy_(torch.tensor(mine, device=self.device))
                call()
            return int(np.count_nonzero(recv.cpu().numpy() != expected))

        return run, wrong, lambda: None

    def barrier(self) -> None:
        """dist.barrier, then the device."""
        self.dist.barrier()
        self.sync()

    def sync(self) -> None:
        """Wait for this rank's device."""
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def close(self) -> None:
        """destroy_process_group."""
        self.dist.destroy_process_group()


def run(
    side: AclSide | TorchSide,
    world: World,
    sizes: Sequence[int],
    collectives: Sequence[str] = COLLECTIVES,
    warmup: int = 2,
    iters: int | None = None,
) -> dict[str, Any]:
    """Measure every collective at every size on ``side`` (all ranks of ``world``); every rank gets the rows."""
    n = world.size
    table: dict[str, list[dict[str, float | int | str]]] = {}
    for name in collectives:
        rows = table[name] = []
        for size in sizes:
            call, wrong, free = side.case(name, size)
            repeat = iters or max(3, min(50, (1 << 22) // max(size, 1)))
            for _ in range(warmup):
                call()
            side.barrier()
            began = time.perf_counter()
            for _ in range(repeat):
                call()
            side.sync()
            seconds = world.max((time.perf_counter() - began) / repeat)
            errors = world.sum(wrong())
            free()
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
                    "iters": repeat,
                }
            )
    side.close()
    return {"ranks": n, "collectives": table}


def average_busbw(rows: Sequence[dict[str, Any]]) -> float:
    """nccl-tests' "Avg bus bandwidth": the mean busbw over the sizes measured."""
    return sum(float(r["busbw_GBps"]) for r in rows) / len(rows) if rows else 0.0


_WIDTHS = (12, 10, 6, 6, 5, 10, 8, 8, 6)


def _row(cells: Sequence[object]) -> str:
    return " ".join(f"{c!s:>{w}}" for c, w in zip(cells, _WIDTHS))


def _print(results: dict[str, Any]) -> None:
    """The table in nccl-tests' layout: the header and units rows, one block per collective, its average busbw."""
    print(f"# nranks {results['ranks']}")
    print("# " + _row(("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong")))
    print("# " + _row(("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "")))
    wrong = 0
    for name, rows in results["collectives"].items():
        print(f"# {name}")
        for r in rows:
            time_us, algbw, busbw = f"{r['time_us']:.1f}", f"{r['algbw_GBps']:.3f}", f"{r['busbw_GBps']:.3f}"
            print(
                "  "
                + _row((r["size"], r["count"], r["type"], r["redop"], r["root"], time_us, algbw, busbw, r["wrong"]))
            )
            wrong += int(r["wrong"])
        print(f"# Avg bus bandwidth    : {average_busbw(rows):.3f} GB/s ({name})")
    print(f"# Out of bounds values : {wrong} {'OK' if wrong == 0 else 'WRONG'}")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m acl_tools.bench.collectives``."""
    p = argparse.ArgumentParser(
        prog="python -m acl_tools.bench.collectives",
        description="HCCL collective bandwidth in nccl-tests' form; run one process per rank "
        "(mpiexec -n N, or python -m acl_tools.launch -n N --).",
    )
    p.add_argument("--engine", choices=("acl", "torch"), default="acl", help="acl-core's HCCL or torch.distributed")
    p.add_argument("--torch-backend", default=None, help="torch side: nccl or gloo (default: nccl when CUDA is there)")
    p.add_argument("--min-bytes", type=int, default=8, help="smallest message size in bytes (default 8)")
    p.add_argument("--max-bytes", type=int, default=1 << 22, help="largest message size in bytes (default 4 MiB)")
    p.add_argument("--factor", type=int, default=4, help="size multiplier between steps (nccl-tests' -f)")
    p.add_argument("--iters", type=int, default=None, help="timed calls per size (default: 3-50, fewer when larger)")
    p.add_argument(
        "--ops", default=",".join(COLLECTIVES), help=f"comma-separated subset of {', '.join(COLLECTIVES)}, any case"
    )
    p.add_argument(
        "--out", type=Path, default=Path("reports") / "bench-hccl.json", help="JSON report, written by rank 0"
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line, measure, and (on rank 0) print and write the JSON."""
    p = build_parser()
    args = p.parse_args(argv)
    sizes, size = [], args.min_bytes
    while size <= args.max_bytes:
        sizes.append(size)
        size *= max(args.factor, 2)
    try:
        ops = resolve(split(args.ops), COLLECTIVES, what="collective")
    except UnknownName as exc:
        p.error(str(exc))
    world = current()
    side: AclSide | TorchSide = AclSide(world) if args.engine == "acl" else TorchSide(world, args.torch_backend)
    results = run(side, world, sizes, ops, iters=args.iters)
    if world.rank == 0:
        if isinstance(side, AclSide):
            backend = get_backend()
            names = {"backend": backend.name, "engine": backend.collectives.name if backend.collectives else None}
        else:
            names = {"backend": "torch", "engine": f"torch.distributed/{side.backend}"}
        _print(results)
        results["avg_busbw_GBps"] = {name: average_busbw(rows) for name, rows in results["collectives"].items()}
        report = {
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "command": "python -m acl_tools.bench.collectives " + " ".join(argv if argv is not None else sys.argv[1:]),
            "side": side.name,
            **names,
            "machine": {"python": platform.python_version(), "numpy": np.__version__},
            **results,
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2))
        print(f"# written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

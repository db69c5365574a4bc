"""Does aclrtCmoAsync's prefetch make a Qwen3-0.6B decode GEMV faster? Each weight shape, side by side, one run.

Per shape (x [1, K] @ W^T, W [N, K] bf16: the layer's qkv, o, gate_up and down), interleaved round by round, the
GEMV's own time (an event pair around the aclnnMm only) after a ``spacer`` of small kernels (the norms, rope and
attention a layer runs between its GEMVs; ``--spacer`` InplaceZero launches on a 4 KiB tensor):

* ``cold``: the weight evicted from L2 first (a memset of a ``--flush-mb`` buffer, default 192 MB > any L2);
* ``warm``: the weight read by a GEMV just before (the best L2 can give);
* ``ahead:<method>``: flushed, then ``acl.rt.cmo_async`` of the weight on the stream before the spacer;
* ``side:<method>``: flushed, then the prefetch on a second stream (forked and joined by events) while the
  spacer runs on the first;

and for ``cold`` and each ``ahead`` the span of spacer + GEMV (prefetch included: what the stream pays).
``<method>`` is each ``ACL_CMO_CONFIG`` method the rocm backend offers (bulk, lines, load on NVIDIA), switched
in-process; another backend prefetches as it does (one method, ``default``). Medians of ``--rounds`` rounds.
Beside them (on a CUDA device, unless ``--no-torch``): torch's ``linear`` of each shape, cold and warm.

Usage: python scripts/prefetch_bench.py [--backend rocm] [--rounds 50] [--out prefetch.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from acl_core import acl
from acl_core.dtypes import DataType
from acl_tools.qwen3.device import Buffer, Session, check_acl

BF16 = DataType.ACL_BF16
PREFETCH = 0
SHAPES: dict[str, tuple[int, int]] = {  # Qwen3-0.6B: hidden 1024, 16 q / 8 kv heads of 128, intermediate 3072
    "qkv": (4096, 1024),
    "o": (1024, 2048),
    "gate_up": (6144, 1024),
    "down": (1024, 3072),
}


class Events:
    """A pool of timing events on one session (made on demand, destroyed at the end)."""

    def __init__(self) -> None:
        self.made: list[int] = []
        self.free: list[int] = []

    def get(self) -> int:
        """An event to record."""
        if not self.free:
            event, ret = acl.rt.create_event()
            check_acl(ret, "aclrtCreateEvent")
            self.made.append(event)
            self.free.append(event)
        return self.free.pop()

    def recycle(self, *events: int) -> None:
        """Events whose times were read."""
        self.free.extend(events)

    def destroy(self) -> None:
        """Destroy every event made."""
        for e in self.made:
            acl.rt.destroy_event(e)


def _record(event: int, stream: int) -> None:
    check_acl(acl.rt.record_event(event, stream), "aclrtRecordEvent")


def _elapsed_us(start: int, end: int) -> float:
    ms, ret = acl.rt.event_elapsed_time(start, end)
    check_acl(ret, "aclrtEventElapsedTime")
    return float(ms) * 1e3


def methods(session: Session) -> list[str]:
    """The prefetch methods to compare: rocm's ACL_CMO_CONFIG methods on this platform, else the backend's own."""
    prefetch = getattr(session.backend, "prefetch", None)
    if prefetch is None:
        return ["default"]
    return ["bulk", "lines", "load"] if prefetch.native else ["load"]


def use_method(session: Session, method: str) -> None:
    """Switch rocm's prefetch method in-process (nothing to switch elsewhere)."""
    prefetch = getattr(session.backend, "prefetch", None)
    if prefetch is not None and method != "default":
        prefetch.use_config(method)


def bench(
    backend: str | None, rounds: int, spacer: int, flush_mb: int, shapes: dict[str, tuple[int, int]]
) -> dict[str, Any]:
    """Time every variant of every shape (see the module doc); medians in microseconds."""
    s = Session(backend)
    events = Events()
    side, ret = acl.rt.create_stream()
    check_acl(ret, "aclrtCreateStream")
    try:
        flush = s.alloc([flush_mb << 20], DataType.ACL_UINT8)
        small = s.alloc([1024], DataType.ACL_FLOAT)
        spacer_steps = [s.prepare("InplaceZero", small.tensor()) for _ in range(spacer)]
        rng = np.random.default_rng(0)
        cases: dict[str, tuple[Buffer, Callable[[], None]]] = {}
        for name, (n, k) in shapes.items():
            w, x, out = s.alloc([n, k], BF16), s.alloc([1, k], BF16), s.alloc([1, n], BF16)
            s.upload(w, (rng.standard_normal((n, k)) * 0.02).astype(BF16.numpy))
            s.upload(x, rng.standard_normal((1, k)).astype(BF16.numpy))
            cases[name] = (w, s.prepare("Mm", x.tensor(), w.view([k, n], [1, k]), out.tensor(), 0))
        all_methods = methods(s)
        described = s.backend.capabilities().notes.get("cmo_prefetch", "default")  # before any switch
        stream = s.stream

        def do_flush() -> None:
            check_acl(acl.rt.memset_async(flush.ptr, flush.nbytes, 1, flush.nbytes, stream), "aclrtMemsetAsync")

        def do_spacer() -> None:
            for step in spacer_steps:
                step()

        def prefetch(w: Buffer, on: int) -> None:
            check_acl(acl.rt.cmo_async(w.ptr, w.nbytes, PREFETCH, on), "aclrtCmoAsync")

        def variant(kind: str, w: Buffer, gemv: Callable[[], None]) -> list[int]:
            """Enqueue one variant; the events to read: (span start, gemv start, gemv end)."""
            if kind == "warm":
                gemv()
            else:
                do_flush()
            span, e0, e1 = events.get(), events.get(), events.get()
            _record(span, stream)
            if kind.startswith("ahead"):
                prefetch(w, stream)
            if kind.startswith("side"):
                fork, join = events.get(), events.get()
                _record(fork, stream)
                check_acl(acl.rt.stream_wait_event(side, fork), "aclrtStreamWaitEvent")
                prefetch(w, side)
                _record(join, side)
                do_spacer()
                check_acl(acl.rt.stream_wait_event(stream, join), "aclrtStreamWaitEvent")
                events.recycle(fork, join)
            else:
                do_spacer()
            _record(e0, stream)
            gemv()
            _record(e1, stream)
            return [span, e0, e1]

        kinds = ["cold", "warm"] + [f"{mode}:{m}" for m in all_methods for mode in ("ahead", "side")]
        gemv_us: dict[tuple[str, str], list[float]] = {}
        span_us: dict[tuple[str, str], list[float]] = {}
        for _ in range(rounds + 1):  # round 0 warms up (compiles, plans)
            for kind in kinds:
                use_method(s, kind.split(":")[1] if ":" in kind else "default")
                marks = {name: variant(kind, w, gemv) for name, (w, gemv) in cases.items()}
                s.synchronize()
                for name, (span, e0, e1) in marks.items():
                    gemv_us.setdefault((name, kind), []).append(_elapsed_us(e0, e1))
                    span_us.setdefault((name, kind), []).append(_elapsed_us(span, e1))
                    events.recycle(span, e0, e1)
        rows = []
        for name, (n, k) in shapes.items():
            nbytes = n * k * 2
            row: dict[str, Any] = {"shape": name, "n": n, "k": k, "weight_bytes": nbytes}
            for kind in kinds:
                gemv = statistics.median(gemv_us[(name, kind)][1:])
                row[f"{kind}_us"] = gemv
                row[f"{kind}_gbps"] = nbytes / gemv / 1e3 if gemv > 0 else float("inf")
                if kind == "cold" or kind.startswith("ahead"):
                    row[f"{kind}_span_us"] = statistics.median(span_us[(name, kind)][1:])
            rows.append(row)
        return {
            "backend": s.backend.name,
            "device": s.backend.capabilities().device_name,
            "prefetch": described,
            "methods": all_methods,
            "rounds": rounds,
            "spacer_launches": spacer,
            "flush_bytes": flush.nbytes,
            "kinds": kinds,
            "rows": rows,
        }
    finally:
        use_method(s, "default")
        prefetcher = getattr(s.backend, "prefetch", None)
        if prefetcher is not None:
            prefetcher.use_config(None)
        events.destroy()
        acl.rt.destroy_stream(side)
        s.close()


def torch_rows(rounds: int, spacer: int, flush_mb: int, shapes: dict[str, tuple[int, int]]) -> list[dict[str, Any]]:
    """torch.nn.functional.linear of each shape on CUDA, cold and warm in L2 (torch has no prefetch); [] without."""
    try:
        import torch
    except ImportError:
        return []
    if not torch.cuda.is_available():
        return []
    flush = torch.empty(flush_mb << 20, dtype=torch.uint8, device="cuda")
    small = torch.empty(1024, device="cuda")
    rows = []
    for name, (n, k) in shapes.items():
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
        x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
        times: dict[str, list[float]] = {"cold": [], "warm": []}
        for _ in range(rounds + 1):
            for kind in times:
                if kind == "cold":
                    flush.fill_(1)
                else:
                    torch.nn.functional.linear(x, w)
                for _ in range(spacer):
                    small.zero_()
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                torch.nn.functional.linear(x, w)
                e1.record()
                e1.synchronize()
                times[kind].append(e0.elapsed_time(e1) * 1e3)
        row: dict[str, Any] = {"shape": name, "n": n, "k": k, "weight_bytes": n * k * 2}
        for kind, values in times.items():
            row[f"torch_{kind}_us"] = statistics.median(values[1:])
        rows.append(row)
    return rows


def table(report: dict[str, Any]) -> list[str]:
    """The report as text: one line per shape and variant."""
    head = f"{report['backend']} on {report['device']} (prefetch {report['prefetch']})"
    lines = [f"{head}: GEMV µs (GB/s) after {report['spacer_launches']} small launches"]
    for row in report["rows"]:
        lines.append(f"  {row['shape']} [{row['n']}x{row['k']}] {row['weight_bytes'] / 1e6:.1f} MB")
        for kind in report["kinds"]:
            span = row.get(f"{kind}_span_us")
            extra = f"   spacer+gemv {span:7.2f} µs" if span is not None else ""
            lines.append(f"    {kind:14s} {row[f'{kind}_us']:7.2f} µs ({row[f'{kind}_gbps']:7.1f} GB/s){extra}")
    for row in report.get("torch", []):
        cold, warm = row["torch_cold_us"], row["torch_warm_us"]
        lines.append(f"  torch linear {row['shape']}: cold {cold:7.2f} µs, warm {warm:7.2f} µs")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, run, print, write the JSON."""
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--backend", default=None, help="backend (default: ACL_BACKEND or the best available)")
    p.add_argument("--rounds", type=int, default=50, help="timed rounds (the median counts)")
    p.add_argument("--spacer", type=int, default=12, help="small launches between the flush/prefetch and the GEMV")
    p.add_argument("--flush-mb", type=int, default=192, help="MiB written to evict the weights from L2")
    p.add_argument("--scale", type=int, default=1, help="divide every shape by this (small CPU runs)")
    p.add_argument("--no-torch", dest="torch", action="store_false", help="skip torch's linear (cold / warm)")
    p.add_argument("--out", type=Path, default=None, help="JSON report")
    args = p.parse_args(argv)
    shapes = {k: (max(n // args.scale, 1), max(kk // args.scale, 1)) for k, (n, kk) in SHAPES.items()}
    report = bench(args.backend, args.rounds, args.spacer, args.flush_mb, shapes)
    if args.torch and report["backend"] != "reference":
        report["torch"] = torch_rows(args.rounds, args.spacer, args.flush_mb, shapes)
    print("\n".join(table(report)))
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

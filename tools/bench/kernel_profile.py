"""Where a benchmark's GPU time goes: torch.profiler's CUPTI trace of a callable, summed per kernel.

:func:`trace_events` records every device activity of the process (whoever launched it: acl-core's own
kernels, cuBLASLt's, torch's); :func:`device_timeline` sums them (span, busy time, the costliest kernels,
the widest gaps); :func:`kernel_shares` turns that into the per-call figures a bench row keeps.
"""

from __future__ import annotations

import importlib.util
import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

GPU_ACTIVITY = ("kernel", "gpu_memcpy", "gpu_memset")
"""The chrome-trace categories of device work (CUPTI records each)."""


def trace_events(work: Callable[[], Any]) -> list[dict[str, Any]] | None:
    """torch.profiler's chrome-trace events of ``work()``; None without a CUDA device."""
    if importlib.util.find_spec("torch") is None:
        return None
    import torch

    if not torch.cuda.is_available():
        return None
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        work()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(trace))
        events: list[dict[str, Any]] = json.loads(trace.read_text()).get("traceEvents", [])
    return events


def device_timeline(events: list[dict[str, Any]], top: int = 8, kernels: int = 40) -> dict[str, Any]:
    """Where device time went: span, busy time (union of activity), the kernels taking most, the widest gaps.

    A gap is idle device time between the end of one activity and the start of the next; it is charged
    to the activity that follows it (the work the device waited for: a launch, a host synchronisation).
    """
    acts = sorted(
        (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0)), str(e.get("name", "?")), str(e["cat"]))
        for e in events
        if e.get("cat") in GPU_ACTIVITY and "ts" in e
    )
    if not acts:
        return {"span_s": 0.0, "busy_s": 0.0, "top_kernels": [], "gaps": [], "activities": {}}
    busy, end = 0.0, acts[0][0]
    gaps: list[tuple[float, str, str]] = []
    previous = ""
    for start, stop, name, _ in acts:
        if start > end:
            gaps.append((start - end, previous, name))
        busy += max(0.0, stop - max(start, end))
        end = max(end, stop)
        previous = name
    by_name: dict[str, list[float]] = {}
    for start, stop, name, cat in acts:
        if cat == "kernel":
            entry = by_name.setdefault(name, [0.0, 0.0])
            entry[0] += stop - start
            entry[1] += 1
    ranked = sorted(by_name.items(), key=lambda item: -item[1][0])[:kernels]
    counts: dict[str, int] = {}
    for *_, cat in acts:
        counts[cat] = counts.get(cat, 0) + 1
    gap_total = sum(g[0] for g in gaps)
    return {
        "span_s": (end - acts[0][0]) * 1e-6,
        "busy_s": busy * 1e-6,
        "gap_s": gap_total * 1e-6,
        "activities": counts,
        "top_kernels": [{"name": n[:120], "total_us": t, "count": int(c)} for n, (t, c) in ranked],
        "gaps": [{"us": g, "after": a[:120], "before": b[:120]} for g, a, b in sorted(gaps, key=lambda x: -x[0])[:top]],
    }


def kernel_shares(events: list[dict[str, Any]], calls: int, top: int = 6) -> dict[str, Any]:
    """Per call of a row profiled over ``calls`` calls: busy time and the ``top`` kernels with their share of it.

    A share is a kernel's summed time over the summed time of every kernel (memcpy and memset are
    counted in ``busy_us`` but are not kernels); ``us`` and ``count`` are per call.
    """
    if calls < 1:
        raise ValueError(f"calls must be at least 1, not {calls}")
    line = device_timeline(events, kernels=10**6)
    ranked = line["top_kernels"]
    total = sum(k["total_us"] for k in ranked)
    return {
        "calls": calls,
        "busy_us": line["busy_s"] * 1e6 / calls,
        "kernel_us": total / calls,
        "gap_us": line.get("gap_s", 0.0) * 1e6 / calls,
        "kernels": [
            {
                "name": k["name"],
                "share": k["total_us"] / total if total > 0 else 0.0,
                "us": k["total_us"] / calls,
                "count": k["count"] / calls,
            }
            for k in ranked[:top]
        ],
    }


def profile_calls(
    launch: Callable[[], object],
    sync: Callable[[], object],
    calls: int = 3,
    tracer: Callable[[Callable[[], Any]], list[dict[str, Any]] | None] = trace_events,
    top: int = 6,
) -> dict[str, Any] | None:
    """:func:`kernel_shares` of ``calls`` calls of ``launch`` (then ``sync``) under ``tracer``; None without CUDA."""

    def work() -> None:
        for _ in range(calls):
            launch()
        sync()

    events = tracer(work)
    return None if events is None else kernel_shares(events, calls, top)


def describe(shares: dict[str, Any], width: int = 70) -> list[str]:
    """Log lines of :func:`kernel_shares`: busy time per call, then one line per kernel (share, us, count)."""
    lines = [f"    GPU per call: {shares['busy_us']:.1f} us busy, {shares['kernel_us']:.1f} us in kernels"]
    for k in shares["kernels"]:
        name = k["name"] if len(k["name"]) <= width else k["name"][: width - 3] + "..."
        lines.append(f"    {100 * k['share']:5.1f}%  {k['us']:9.1f} us  x{k['count']:g}  {name}")
    return lines

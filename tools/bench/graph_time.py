"""Device time per call of a prepared operator: captured K times on the bench stream, replayed, timed with events.

Eager phase 2 of a decode-sized kernel is host-bound (the launch path costs more than the kernel), so the
decode suite also reports what one call costs the device: :data:`GRAPH_CALLS` calls captured once through
the driver's capture seam (as the ops suite's replay rows and the Qwen3 decode step do) and the graph
replayed :data:`GRAPH_REPLAYS` times between two events, beside PyTorch's call captured the same number of
times in a ``torch.cuda.CUDAGraph``. A backend that cannot capture leaves ``acl_gpu_us`` out with the reason;
off a CUDA device ``torch_gpu_us`` is None (on the reference the figure is the host's replay time).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from acl_core.spec.runtime import CaptureMode

if TYPE_CHECKING:
    from acl_tools.bench.ops import Suite

GRAPH_CALLS = 20
"""Calls of the operator captured in one graph."""
GRAPH_REPLAYS = 25
"""Replays of the graph between the two events (after one untimed replay)."""


def graph_us(
    suite: Suite, acl: Callable[[], tuple[Callable[[], None], Any]], torch_fn: Callable[[], Callable[[], object]]
) -> dict[str, Any]:
    """``acl_gpu_us`` and ``torch_gpu_us``: event-timed microseconds per call inside a replayed graph (None, with
    ``gpu_note``, for a side that cannot be timed so)."""
    out: dict[str, Any] = {"graph_calls": GRAPH_CALLS}
    notes = []
    try:
        out["acl_gpu_us"] = _acl_graph_us(suite, acl)
    except Exception as exc:  # a failing side is reported, the suite goes on
        out["acl_gpu_us"] = None
        notes.append(f"acl: {type(exc).__name__}: {exc}"[:200])
    if suite.device.type == "cuda":
        try:
            out["torch_gpu_us"] = _torch_graph_us(suite, torch_fn)
        except Exception as exc:
            out["torch_gpu_us"] = None
            notes.append(f"torch: {type(exc).__name__}: {exc}"[:200])
    else:
        out["torch_gpu_us"] = None
        notes.append("torch: no CUDA graph off a CUDA device")
    if suite.backend.name == "reference":
        notes.append("reference: events time the host's replay")
    if notes:
        out["gpu_note"] = "; ".join(notes)
    return out


def _acl_graph_us(suite: Suite, acl: Callable[[], tuple[Callable[[], None], Any]]) -> float:
    """Capture GRAPH_CALLS phase-2 calls of one prepared operator on the bench stream; µs per call replayed."""
    if not suite.caps.stream_capture:
        raise RuntimeError(f"{suite.backend.name} does not capture streams")
    driver, rt = suite.backend.driver, suite.rt
    launch, cleanup = acl()
    graph: Any = None
    try:
        launch()  # the first call plans and compiles outside the capture
        rt.synchronize_stream(suite.stream)
        stream = rt.stream(suite.stream)
        driver.capture_begin(stream, CaptureMode.ACL_MODEL_RI_CAPTURE_MODE_RELAXED)
        try:
            for _ in range(GRAPH_CALLS):
                launch()
        finally:
            graph = driver.capture_end(stream)
        return _timed(suite, lambda: driver.graph_launch(graph, stream))
    finally:
        rt.synchronize_stream(suite.stream)
        if graph is not None:
            driver.graph_destroy(graph)
        cleanup()


def _timed(suite: Suite, replay: Callable[[], None]) -> float:
    """µs per captured call: GRAPH_REPLAYS replays of ``replay`` between two events on the bench stream."""
    rt = suite.rt
    start, end = rt.create_event(), rt.create_event()
    try:
        replay()
        rt.synchronize_stream(suite.stream)
        rt.record_event(start, suite.stream)
        for _ in range(GRAPH_REPLAYS):
            replay()
        rt.record_event(end, suite.stream)
        rt.synchronize_event(end)
        return float(rt.event_elapsed_time(start, end)) * 1e3 / (GRAPH_REPLAYS * GRAPH_CALLS)
    finally:
        rt.destroy_event(start)
        rt.destroy_event(end)


def _torch_graph_us(suite: Suite, torch_fn: Callable[[], Callable[[], object]]) -> float:
    """The torch call captured GRAPH_CALLS times in a CUDA graph; µs per call replayed (CUDA events)."""
    torch = suite.torch
    call = torch_fn()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()  # warm-up outside the capture, as torch.cuda.graphs asks
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(GRAPH_CALLS):
            call()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    graph.replay()
    torch.cuda.synchronize()
    start.record()
    for _ in range(GRAPH_REPLAYS):
        graph.replay()
    end.record()
    end.synchronize()
    us = float(start.elapsed_time(end)) * 1e3 / (GRAPH_REPLAYS * GRAPH_CALLS)
    del graph
    return us

"""The ops suite's replay rows: host cost of one replay of a captured chain beside the eager launches it replaces.

A chain of :data:`CHAIN` small Adds (prepared once, repeatable executors) runs two ways: launched
eagerly, one phase 2 after another, and captured once on the benchmark stream through the driver's
capture seam, then replayed with one ``graph_launch`` per iteration. Each row's time is per iteration
of the whole chain beside PyTorch doing the same (eager adds, and a ``torch.cuda.CUDAGraph`` of them
on a GPU); ``extra`` holds the host microseconds spent enqueuing one iteration (no synchronisation)
and the GPU microseconds per iteration between two events around many iterations.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from acl_core.dtypes import DataType as D
from acl_core.eager import empty, to_scalar
from acl_core.spec.runtime import CaptureMode

if TYPE_CHECKING:
    from acl_tools.bench.ops import Case, Suite

CHAIN = 16
"""Operators in the chain."""
ELEMENTS = 1024
"""float32 elements per operand (4 KiB: the launch cost, not the bandwidth, is measured)."""
ITERATIONS = 200
"""Iterations enqueued back to back for the host and GPU microseconds."""


def host_and_gpu_us(suite: Suite, launch: Callable[[], None]) -> dict[str, float]:
    """Host µs to enqueue one iteration (no synchronisation inside) and GPU µs per iteration (events)."""
    rt = suite.rt
    start, end = rt.create_event(), rt.create_event()
    try:
        launch()
        rt.synchronize_stream(suite.stream)
        rt.record_event(start, suite.stream)
        t0 = time.perf_counter()
        for _ in range(ITERATIONS):
            launch()
        host = (time.perf_counter() - t0) / ITERATIONS
        rt.record_event(end, suite.stream)
        rt.synchronize_event(end)
        gpu_ms = rt.event_elapsed_time(start, end) / ITERATIONS
    finally:
        rt.destroy_event(start)
        rt.destroy_event(end)
    return {"host_us": host * 1e6, "gpu_us": gpu_ms * 1e3}


def run_cases(suite: Suite) -> None:
    """The row pair: the chain launched eagerly, and the same chain captured and replayed."""
    from acl_tools.bench.ops import Case

    if not suite.wanted("Replay"):
        return
    shape = f"{CHAIN} x Add [{ELEMENTS}]"
    for replayed in (False, True):
        label = f"Chain of {CHAIN} {'replayed' if replayed else 'eager'}"
        case = Case(label, shape, "float32", "us/call", 1)
        if replayed and not suite.caps.stream_capture:
            case.status = "not supported"
            case.note = f"{suite.backend.name} does not capture streams"
            suite.cases.append(case)
            continue
        suite.case(case, lambda r=replayed, c=case: _acl(suite, c, r), lambda r=replayed: _torch(suite, r), "Add")


def _acl(suite: Suite, case: Case, replayed: bool) -> tuple[Callable[[], None], Callable[[], None]]:
    """(one iteration, cleanup): the prepared chain launched eagerly, or its captured graph replayed."""
    x = suite.array((ELEMENTS,), D.ACL_FLOAT)
    out = empty((ELEMENTS,), D.ACL_FLOAT, suite.backend)
    chain = [
        suite.prepared("Add", {"self": x, "other": out, "out": out, "alpha": to_scalar(1.0)}) for _ in range(CHAIN)
    ]
    graph: Any = None
    driver = suite.backend.driver

    def cleanup() -> None:
        if graph is not None:
            suite.rt.synchronize_stream(suite.stream)
            driver.graph_destroy(graph)
        for _launch, free in chain:
            free()
        x.free()
        out.free()

    def eager() -> None:
        for launch, _free in chain:
            launch()

    if not replayed:
        case.extra = host_and_gpu_us(suite, eager)
        return eager, cleanup
    stream = suite.rt.stream(suite.stream)
    driver.capture_begin(stream, CaptureMode.ACL_MODEL_RI_CAPTURE_MODE_RELAXED)
    try:
        eager()
    finally:
        graph = driver.capture_end(stream)

    def replay() -> None:
        driver.graph_launch(graph, stream)

    case.extra = host_and_gpu_us(suite, replay)
    case.note = "captured through the rocm driver's capture seam" if suite.backend.name == "rocm" else ""
    return replay, cleanup


def _torch(suite: Suite, replayed: bool) -> Callable[[], object]:
    """The same chain in PyTorch: eager adds, or (on a GPU, for the replayed row) a CUDA graph of them."""
    torch = suite.torch
    x, out = suite.tensor((ELEMENTS,), D.ACL_FLOAT), suite.tensor((ELEMENTS,), D.ACL_FLOAT)

    def eager() -> None:
        for _ in range(CHAIN):
            torch.add(x, out, out=out)

    if not replayed or suite.device.type != "cuda":
        return eager
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        eager()  # warm-up outside the capture, as torch.cuda.graphs asks
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        eager()
    return graph.replay

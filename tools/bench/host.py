"""Host-side benchmarks of one backend beside raw NumPy: two-phase call overhead and Add throughput."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import acl_core
from acl_core import aclnn
from acl_core.backend import Backend
from acl_core.eager import to_device
from acl_core.spec.ops import get_spec
from acl_tools.bench.timing import measure

SIZES = tuple(1 << k for k in range(10, 29, 2))  # 1 KiB .. 256 MiB, by 4x


def _two_phase_add(backend: Backend, nbytes: int) -> tuple[Callable[[], None], Callable[[], None], Callable[[], None]]:
    """Callables for: phase 1 + phase 2 of Add on ``nbytes`` of float32, phase 2 alone (repeatable), and sync."""
    n = nbytes // 4
    host = np.ones(n, np.float32)
    a, b, out = (to_device(host, backend) for _ in range(3))
    ta, tb, to = a.tensor(), b.tensor(), out.tensor()
    alpha = aclnn.aclCreateScalar(1.0, 0)
    rt = backend.runtime
    stream = rt.create_stream()
    spec = get_spec("Add")
    phase1 = aclnn.aclnnAddGetWorkspaceSize
    phase2 = aclnn.aclnnAdd
    keep = (a, b, out)

    def full() -> None:
        ws, ex, ret = phase1(ta, tb, alpha, to)
        if ret or phase2(None, ws, ex, stream):
            raise RuntimeError(aclnn.aclGetRecentErrMsg())

    ws, ex, ret = phase1(ta, tb, alpha, to)
    assert ret == 0 and aclnn.aclSetAclOpExecutorRepeatable(ex) == 0 and spec.name == "Add"

    def launch_only() -> None:
        if phase2(None, ws, ex, stream):
            raise RuntimeError(aclnn.aclGetRecentErrMsg())

    def sync() -> None:
        _ = keep
        rt.synchronize_stream(stream)

    return full, launch_only, sync


def run(backend: Backend, sizes: tuple[int, ...] = SIZES, progress: Callable[[str], None] = print) -> dict[str, Any]:
    """Overhead at 1 KiB and Add throughput per size, each beside NumPy's ``np.add(a, b, out=c)``."""
    acl_core.use_backend(backend.name)  # the C-shaped phase 1 runs on the process's selected backend
    try:
        return _run(backend, sizes, progress)
    finally:
        acl_core.use_backend(None)


COLUMNS = ("size", "acl", "numpy", "acl", "numpy", "acl/numpy")
UNITS = ("(B)", "(us)", "(us)", "(GB/s)", "(GB/s)", "(time)")
"""The table's header rows: Add's bytes per operand, the two-phase call and np.add, time and bandwidth."""


def _line(cells: tuple[str, ...]) -> str:
    return "  " + " ".join(f"{c:>{w}}" for c, w in zip(cells, (12, 10, 10, 9, 9, 10)))


def _run(backend: Backend, sizes: tuple[int, ...], progress: Callable[[str], None]) -> dict[str, Any]:
    results: dict[str, Any] = {"overhead": {}, "throughput": []}
    progress(_line(COLUMNS))
    progress(_line(UNITS))
    for nbytes in sizes:
        n = nbytes // 4
        a, b, c = np.ones(n, np.float32), np.ones(n, np.float32), np.empty(n, np.float32)
        budget = 0.3 if nbytes <= 1 << 22 else 1.0
        numpy_t = measure(lambda a=a, b=b, c=c: np.add(a, b, out=c), lambda: None, min_time=budget)
        full, launch_only, sync = _two_phase_add(backend, nbytes)
        ours = measure(full, sync, min_time=budget)
        row = {
            "bytes": nbytes,
            "numpy_us": numpy_t.median_us,
            "acl_two_phase_us": ours.median_us,
            "numpy_GBps": 3 * nbytes / numpy_t.median_s / 1e9,
            "acl_GBps": 3 * nbytes / ours.median_s / 1e9,
            "ratio": ours.median_s / numpy_t.median_s,
        }
        results["throughput"].append(row)
        if nbytes == sizes[0]:
            launch = measure(launch_only, sync, min_time=budget)
            results["overhead"] = {
                "bytes": nbytes,
                "numpy_us": numpy_t.median_us,
                "two_phase_us": ours.median_us,
                "phase2_repeatable_us": launch.median_us,
                "two_phase_minus_numpy_us": ours.median_us - numpy_t.median_us,
            }
        times = (f"{ours.median_us:.1f}", f"{numpy_t.median_us:.1f}")
        rates = (f"{row['acl_GBps']:.3g}", f"{row['numpy_GBps']:.3g}")
        progress(_line((str(nbytes), *times, *rates, f"x{row['ratio']:.2f}")))
    return results

"""The bench's device timeline: busy time is the union of device activity, gaps are charged to what follows."""

from __future__ import annotations

import pytest

from acl_tools.qwen3.bench import device_timeline


def _event(cat: str, ts: float, dur: float, name: str) -> dict:
    return {"cat": cat, "ts": ts, "dur": dur, "name": name}


def test_overlap_counts_once_and_the_gap_goes_to_the_next_activity() -> None:
    events = [
        _event("kernel", 0, 10, "gemm"),
        _event("kernel", 5, 10, "norm"),  # overlaps gemm by 5 us (another stream)
        _event("gpu_memcpy", 40, 5, "copy"),  # 25 us idle before it
        _event("cpu_op", 0, 100, "host"),  # host work is not device time
        _event("kernel", 47, 3, "norm"),
    ]
    line = device_timeline(events)
    assert line["span_s"] == pytest.approx(50e-6)
    assert line["busy_s"] == pytest.approx(23e-6)
    assert line["gap_s"] == pytest.approx(27e-6)
    assert line["activities"] == {"kernel": 3, "gpu_memcpy": 1}
    assert line["gaps"][0] == {"us": 25.0, "after": "norm", "before": "copy"}
    assert line["top_kernels"][0] == {"name": "norm", "total_us": 13.0, "count": 2}


def test_no_device_activity() -> None:
    line = device_timeline([_event("cpu_op", 0, 5, "host")])
    assert line["span_s"] == 0.0 and line["gaps"] == [] and line["top_kernels"] == []

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


def test_decode_busy_time_counts_a_pdl_overlap_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """busy_ms_per_token subtracts the prefill's busy time as kernel_ms_per_token subtracts its kernel sum;
    a kernel overlapping its predecessor (programmatic dependent launch) adds to the sum, not to busy time."""
    from acl_tools.qwen3 import bench

    prefill = [_event("kernel", 0, 100, "prefill")]
    # two decode steps: a norm, then a GEMV launched 1 us into it (it waits, so its duration includes 1 us)
    decode = [_event("kernel", 200 + 10 * s, 2, "norm") for s in range(2)]
    decode += [_event("kernel", 201 + 10 * s, 5, "gemv") for s in range(2)]
    traces = iter([prefill + decode, prefill])
    monkeypatch.setattr(bench, "trace_events", lambda work: next(traces))
    found = bench.decode_kernel_time(object(), [1, 2], 3)  # type: ignore[arg-type]
    assert found is not None and found["decode_steps"] == 2
    assert found["kernel_ms_per_token"] == pytest.approx(7e-3)
    assert found["busy_ms_per_token"] == pytest.approx(6e-3)
    assert found["kernels_per_token"] == 2

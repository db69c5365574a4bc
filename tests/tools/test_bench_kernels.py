"""``acl-core bench --kernels``: each acl row's calls profiled, the top kernels and their share kept in the row."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import acl_core
from acl_tools.bench import kernel_profile
from acl_tools.bench.cli import main
from acl_tools.bench.ops import KERNEL_CALLS, SIZES, Case, Suite

pytest.importorskip("torch")


def _event(cat: str, ts: float, dur: float, name: str) -> dict[str, Any]:
    return {"cat": cat, "ts": ts, "dur": dur, "name": name}


def _fake_trace(calls_seen: list[int]) -> Callable[[Callable[[], Any]], list[dict[str, Any]]]:
    """A tracer that runs the work and reports, per launch it saw, a 30 us GEMM and a 10 us decode."""

    def tracer(work: Callable[[], Any]) -> list[dict[str, Any]]:
        before = calls_seen[0]
        work()
        events, t = [], 0.0
        for _ in range(calls_seen[0] - before):
            events += [_event("kernel", t, 10, "mx_decode"), _event("kernel", t + 12, 30, "sm90_gemm")]
            events.append(_event("gpu_memset", t + 45, 2, "memset"))
            t += 50
        return events

    return tracer


def test_shares_are_per_call_and_sum_over_kernels_only() -> None:
    events = [_event("kernel", 0, 30, "gemm"), _event("kernel", 30, 10, "decode"), _event("gpu_memcpy", 50, 8, "cp")]
    events += [_event("kernel", 100, 30, "gemm"), _event("kernel", 130, 10, "decode"), _event("cpu_op", 0, 500, "h")]
    shares = kernel_profile.kernel_shares(events, calls=2)
    assert shares["busy_us"] == pytest.approx(44.0)  # (30 + 10 + 8 + 30 + 10) / 2
    assert shares["kernel_us"] == pytest.approx(40.0)
    assert [k["name"] for k in shares["kernels"]] == ["gemm", "decode"]
    assert shares["kernels"][0] == {"name": "gemm", "share": pytest.approx(0.75), "us": 30.0, "count": 1.0}
    with pytest.raises(ValueError, match="at least 1"):
        kernel_profile.kernel_shares(events, calls=0)


def test_top_keeps_the_costliest_kernels() -> None:
    events = [_event("kernel", 10 * i, i + 1, f"k{i}") for i in range(9)]
    names = [k["name"] for k in kernel_profile.kernel_shares(events, calls=1, top=3)["kernels"]]
    assert names == ["k8", "k7", "k6"]


def test_a_suite_with_kernels_profiles_the_acl_side_into_the_row() -> None:
    seen = [0]
    lines: list[str] = []
    backend = acl_core.get_backend("reference")
    backend.runtime.ensure_device()
    suite = Suite(backend, SIZES["small"], lines.append, kernels=True, tracer=_fake_trace(seen))

    def acl() -> tuple[Callable[[], None], Callable[[], None]]:
        def launch() -> None:
            seen[0] += 1

        return launch, lambda: None

    case = Case("Fake", "1", "bf16", "TFLOP/s", 1.0)
    suite.case(case, acl, lambda: lambda: None)
    profile = case.to_json()["extra"]["profile"]
    assert profile["calls"] == KERNEL_CALLS
    assert [k["name"] for k in profile["kernels"]] == ["sm90_gemm", "mx_decode"]
    assert profile["kernels"][0]["us"] == pytest.approx(30.0)
    assert profile["kernels"][0]["share"] == pytest.approx(0.75)
    assert profile["busy_us"] == pytest.approx(42.0)
    assert any("75.0%" in line and "sm90_gemm" in line for line in lines)


def test_without_kernels_no_profile_is_taken() -> None:
    seen = [0]
    backend = acl_core.get_backend("reference")
    backend.runtime.ensure_device()
    traced: list[int] = []

    def tracer(work: Callable[[], Any]) -> list[dict[str, Any]]:
        traced.append(1)
        return []

    suite = Suite(backend, SIZES["small"], lambda _: None, tracer=tracer)
    case = Case("Fake", "1", "bf16", "TFLOP/s", 1.0)
    suite.case(case, lambda: (lambda: seen.__setitem__(0, seen[0] + 1), lambda: None), lambda: lambda: None)
    assert traced == [] and "extra" not in case.to_json()


def test_the_cli_option_reaches_each_row(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "ops.json"
    argv = ["--backend", "reference", "--suite", "ops", "--sizes", "small", "--only", "Softmax", "--kernels"]
    assert main([*argv, "--out", str(out)]) == 0
    cases = [c for c in json.loads(out.read_text())["cases"] if c["status"] == "ok"]
    assert cases
    for c in cases:  # no CUDA here: torch.profiler is not asked, and the row says so
        assert c["extra"]["profile"] == {"unavailable": "no CUDA device for torch.profiler"}


def test_the_int8_rows_x2_layout_and_the_sizes_are_chosen_by_the_environment() -> None:
    from acl_tools.bench.quant_gemm import chosen_sizes, int8_x2_layout

    assert chosen_sizes((4096, 8192), {}) == (4096, 8192)
    assert chosen_sizes((4096,), {"ACL_BENCH_QGEMM_SIZES": "4096, 16384"}) == (4096, 16384)
    for bad in ("4000", "x", ",", "-64"):
        with pytest.raises(ValueError, match="multiples of 64"):
            chosen_sizes((4096,), {"ACL_BENCH_QGEMM_SIZES": bad})

    assert int8_x2_layout({}) == "kmajor"  # acl gets torch's K-major x2 unless asked otherwise
    assert int8_x2_layout({"ACL_BENCH_INT8_X2": "Rows"}) == "rows"
    assert int8_x2_layout({"ACL_BENCH_INT8_X2": "KMajor"}) == "kmajor"
    with pytest.raises(ValueError, match="expected rows or kmajor"):
        int8_x2_layout({"ACL_BENCH_INT8_X2": "nmajor"})


@pytest.mark.parametrize("layout", ["rows", "kmajor"])
def test_the_int8_row_runs_in_either_layout(monkeypatch: pytest.MonkeyPatch, layout: str) -> None:
    from acl_tools.bench import quant_gemm

    monkeypatch.setenv("ACL_BENCH_INT8_X2", layout)
    backend = acl_core.get_backend("reference")
    backend.runtime.ensure_device()
    suite = Suite(backend, SIZES["small"], lambda _: None, only={"QuantMatmulV3"})
    quant_gemm.run_cases(suite, sizes=(64,))
    (row,) = [c.to_json() for c in suite.cases]
    assert row["op"] == "QuantMatmulV3 int8" and row["acl_ms"], row["status"]
    assert ("x2 K-major on both sides" if layout == "kmajor" else "acl x2 N-major (gathered)") in row["note"]

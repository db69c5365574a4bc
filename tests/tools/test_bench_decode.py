"""``acl-core bench --suite decode``: its HBM yardstick, its refusals, and the small suite on the reference."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from acl_tools.bench import decode
from acl_tools.bench.cli import main


def test_hbm_figure_by_device_name_and_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACL_BENCH_HBM_GBPS", raising=False)
    assert decode.hbm_gbps("NVIDIA H200") == 4800.0
    assert decode.hbm_gbps("reference (NumPy on the CPU)") is None
    monkeypatch.setenv("ACL_BENCH_HBM_GBPS", "1234.5")
    assert decode.hbm_gbps("NVIDIA H200") == 1234.5


def test_full_sizes_are_refused_on_a_cpu_backend(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "decode.json"
    assert main(["--backend", "reference", "--suite", "decode", "--sizes", "full", "--out", str(out)]) == 2
    assert "for a GPU" in capsys.readouterr().err
    assert not out.exists()


def test_unknown_op_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "decode.json"
    assert main(["--backend", "reference", "--suite", "decode", "--only", "Nope", "--out", str(out)]) == 2


def test_small_suite_on_the_reference(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "decode.json"
    quick = ["--rounds", "1", "--min-time", "0.001"]  # every row runs; the figures are not the point here
    assert main(["--backend", "reference", "--suite", "decode", "--sizes", "small", *quick, "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert "--suite decode" in report["command"] and "--rounds 1" in report["command"]
    ops = {c["op"] for c in report["cases"]}
    assert ops == {
        "ArgMax",
        "IncreFlashAttention decode",
        "FusedInferAttentionScore decode",
        "FusedInferAttentionScore short decode",
        "IncreFlashAttention decode (dense)",
        "IncreFlashAttentionV4 paged BnNBsD",
        "FusedInferAttentionScoreV4 paged NZ",
        "Matmul small-M",
        "AddRmsNorm",
        "RmsNorm q/k-norm",
        "ApplyRotaryPosEmb q+k",
        "SwiGlu",
        "ScatterPaKvCache",
    }
    for case in report["cases"]:
        assert case["status"] == "ok", case
        assert case["acl_us"] > 0 and case["torch_us"] > 0
        assert case["metric"]["unit"] == "GB/s" and case["metric"]["acl"] > 0
        # the replayed-graph figure: the reference captures (its events time the host's replay); torch off CUDA none
        extra = case["extra"]
        assert extra["graph_calls"] == decode.GRAPH_CALLS
        assert extra["acl_gpu_us"] > 0, extra
        assert extra["torch_gpu_us"] is None and "no CUDA graph" in extra["gpu_note"]


def test_graph_time_reports_a_backend_that_cannot_capture(monkeypatch: pytest.MonkeyPatch) -> None:
    """A backend without stream capture gets no acl figure, with the reason, and the suite goes on."""
    from acl_tools.bench import graph_time

    class Caps:
        stream_capture = False

    class FakeSuite:
        caps = Caps()
        backend = type("B", (), {"name": "nocapture"})()
        device = type("Dev", (), {"type": "cpu"})()

    got = graph_time.graph_us(FakeSuite(), lambda: (lambda: None, lambda: None), lambda: lambda: None)  # type: ignore[arg-type]
    assert got["acl_gpu_us"] is None and "does not capture" in got["gpu_note"]


def test_kernel_variants_become_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """A backend whose runners take a forced variant (rocm) gets one row per variant, each timed with it set and
    left unset afterwards; here the reference stands in, with a runner that records what was forced."""
    pytest.importorskip("torch")
    from acl_core import get_backend

    class Runner:
        def __init__(self) -> None:
            self.forced_arg: str | None = None
            self.seen: set[str | None] = set()

    backend = get_backend("reference")
    runner = Runner()
    monkeypatch.setattr(backend, "runners", {"reduction": runner}, raising=False)
    real = backend.launch

    def launch(*args: object, **kwargs: object) -> object:
        runner.seen.add(runner.forced_arg)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(backend, "launch", launch)
    backend.runtime.ensure_device()  # what the bench's command line does before a suite (not left to earlier tests)
    body = decode.run(backend, "small", progress=lambda _line: None, only={"ArgMax"})
    assert [c["op"] for c in body["cases"]] == ["ArgMax split", "ArgMax persist", "ArgMax block"]
    assert all(c["status"] == "ok" for c in body["cases"])
    assert runner.seen >= {"split", "persist", "block"} and runner.forced_arg is None


class _Decode:
    """A stand-in for rocm's decode planner: the setting in force and every setting a launch ran under."""

    def __init__(self) -> None:
        self.setting: str | None = None
        self.seen: set[str | None] = set()

    def use_config(self, setting: str | None) -> None:
        self.setting = setting


class _Runner:
    """A stand-in for rocm's attention runner (its decode planner and paged mode)."""

    def __init__(self) -> None:
        self.decode = _Decode()
        self.mode: str | None = None
        self.modes: set[str | None] = set()

    def use_paged_mode(self, mode: str | None) -> None:
        self.mode = mode


def _stand_in(monkeypatch: pytest.MonkeyPatch) -> tuple[Any, _Runner]:
    """The reference backend (a device set) with a stand-in attention runner recording each launch's choices."""
    from acl_core import get_backend

    backend = get_backend("reference")
    runner = _Runner()
    monkeypatch.setattr(backend, "runners", {"attention": runner}, raising=False)
    real = backend.launch

    def launch(*args: object, **kwargs: object) -> object:
        runner.decode.seen.add(runner.decode.setting)
        runner.modes.add(runner.mode)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(backend, "launch", launch)
    backend.runtime.ensure_device()  # what the bench's command line does before a suite
    return backend, runner


def test_decode_configs_and_paged_modes_become_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """rocm's attention runner (a stand-in here) gets a dense IncreFlashAttention row per ``ACL_DECODE_CONFIG``
    setting of :data:`decode.DECODE_CONFIGS` and a paged row per :data:`decode.PAGED_MODES` choice, each forced
    for its row and reset afterwards."""
    pytest.importorskip("torch")
    backend, runner = _stand_in(monkeypatch)
    only = {"IncreFlashAttention", "PagedAttention"}
    body = decode.run(backend, "small", progress=lambda _line: None, only=only, min_time=0.001, rounds=1)
    ops = [c["op"] for c in body["cases"]]
    assert ops[: 1 + len(decode.DECODE_CONFIGS)] == ["IncreFlashAttention decode"] + [
        f"IncreFlashAttention decode {s}" for s in decode.DECODE_CONFIGS
    ]
    for form, op in (("BnNBsD", "IncreFlashAttentionV4"), ("NZ", "FusedInferAttentionScoreV4")):
        assert [o for o in ops if o.startswith(f"{op} paged")] == [f"{op} paged {form} {m}" for m in decode.PAGED_MODES]
    assert all(c["status"] == "ok" for c in body["cases"])
    assert runner.decode.seen >= set(decode.DECODE_CONFIGS) | {None} and runner.decode.setting is None
    assert runner.modes >= set(decode.PAGED_MODES) and runner.mode is None


def test_decode_split_settings_become_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--only DecodeSplit``: a row per length and setting (the default first), then the masked cache's default and
    pskip rows; the whole suite leaves it out (test_small_suite_on_the_reference)."""
    pytest.importorskip("torch")
    backend, runner = _stand_in(monkeypatch)
    body = decode.run(backend, "small", progress=lambda _line: None, only={"DecodeSplit"}, min_time=0.001, rounds=1)
    rows = [(c["op"], c["shape"]) for c in body["cases"]]
    skv = decode.SMALL_SHAPES["config_lengths"][0]
    plain = f"Skv{skv} N16/8 D128"
    expected = [("IncreFlashAttention split", plain)] + [
        (f"IncreFlashAttention split {s}", plain) for s in decode.SPLIT_OPT_CONFIGS
    ]
    masked = f"Skv{skv // 4}/{skv} N16/8 D128 masked"
    expected += [("IncreFlashAttention split", masked)]
    expected += [(f"IncreFlashAttention split {s}", masked) for s in decode.MASKED_SPLIT_CONFIGS]
    assert rows == expected
    assert all(c["status"] == "ok" for c in body["cases"])
    assert runner.decode.seen >= set(decode.SPLIT_OPT_CONFIGS) | set(decode.MASKED_SPLIT_CONFIGS) | {None}
    assert runner.decode.setting is None


def test_decode_split_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    monkeypatch.setenv("ACL_BENCH_DECODE_SPLIT", " two,pipe,pcomb ; fused,pipe ;")
    backend, _ = _stand_in(monkeypatch)
    body = decode.run(backend, "small", progress=lambda _line: None, only={"DecodeSplit"}, min_time=0.001, rounds=1)
    ops = [c["op"] for c in body["cases"] if "masked" not in c["shape"]]
    assert ops == ["IncreFlashAttention split", "IncreFlashAttention split two,pipe,pcomb",
                   "IncreFlashAttention split fused,pipe"]  # fmt: skip

"""``acl-core bench --suite decode``: its HBM yardstick, its refusals, and the small suite on the reference."""

from __future__ import annotations

import json
from pathlib import Path

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
    assert main(["--backend", "reference", "--suite", "decode", "--sizes", "small", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert "--suite decode" in report["command"]
    ops = {c["op"] for c in report["cases"]}
    assert ops == {
        "ArgMax",
        "IncreFlashAttention decode",
        "FusedInferAttentionScore decode",
        "Matmul small-M",
        "AddRmsNorm",
        "ApplyRotaryPosEmb q+k",
    }
    for case in report["cases"]:
        assert case["status"] == "ok", case
        assert case["acl_us"] > 0 and case["torch_us"] > 0
        assert case["metric"]["unit"] == "GB/s" and case["metric"]["acl"] > 0

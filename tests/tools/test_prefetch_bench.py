"""scripts/prefetch_bench.py runs every variant of every shape and reports them (here on the reference backend)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import acl_core

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "prefetch_bench.py"


def test_the_bench_reports_each_shape_and_variant(tmp_path: Path, capsys) -> None:
    spec = importlib.util.spec_from_file_location("prefetch_bench", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "prefetch.json"
    try:
        argv = ["--backend", "reference", "--rounds", "2", "--spacer", "2", "--flush-mb", "1", "--scale", "64"]
        assert module.main([*argv, "--out", str(out)]) == 0
    finally:
        acl_core.use_backend(None)
    report = json.loads(out.read_text())
    assert report["backend"] == "reference" and report["methods"] == ["default"]
    assert report["kinds"] == ["cold", "warm", "ahead:default", "side:default"]
    assert [r["shape"] for r in report["rows"]] == ["qkv", "o", "gate_up", "down"]
    for row in report["rows"]:
        assert row["weight_bytes"] == row["n"] * row["k"] * 2
        for kind in report["kinds"]:
            assert row[f"{kind}_us"] > 0
        assert row["ahead:default_span_us"] >= row["ahead:default_us"]
    text = capsys.readouterr().out
    assert "gate_up [96x16]" in text and "side:default" in text

"""The benchmarks' printed tables carry header and units rows; the host suite (``make bench``) writes its plot too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from acl_tools.bench import collectives
from acl_tools.bench.cli import main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_host_suite_prints_header_and_units_rows_and_writes_json_and_png(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "bench-reference.json"
    assert main(["--backend", "reference", "--max-bytes", "4096", "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:1] == ["size"])
    assert lines[header].split() == ["size", "acl", "numpy", "acl", "numpy", "acl/numpy"]
    assert lines[header + 1].split() == ["(B)", "(us)", "(us)", "(GB/s)", "(GB/s)", "(time)"]
    rows = [line.split() for line in lines[header + 2 : header + 4]]
    assert [r[0] for r in rows] == ["1024", "4096"] and all(r[-1].startswith("x") for r in rows)
    report = json.loads(out.read_text())
    assert [r["bytes"] for r in report["host"]["throughput"]] == [1024, 4096]
    assert out.with_suffix(".png").read_bytes()[:8] == PNG_MAGIC
    assert f"written to {out} and {out.with_suffix('.png')}" in lines


def test_collectives_table_is_nccl_tests_shaped(capsys: pytest.CaptureFixture[str]) -> None:
    def row(size: int, busbw: float, wrong: int = 0) -> dict[str, object]:
        fields = {"size": size, "count": size // 4, "type": "float", "redop": "sum", "root": -1, "time_us": 10.0}
        return fields | {"algbw_GBps": busbw / 1.5, "busbw_GBps": busbw, "wrong": wrong}

    results = {"ranks": 4, "collectives": {"all_reduce": [row(8, 1.0), row(32, 2.0)], "broadcast": [row(8, 4.0, 3)]}}
    collectives._print(results)
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split() == ["#", "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong"]
    assert lines[2].split() == ["#", "(B)", "(elements)", "(us)", "(GB/s)", "(GB/s)"]
    assert "# Avg bus bandwidth    : 1.500 GB/s (all_reduce)" in lines
    assert "# Avg bus bandwidth    : 4.000 GB/s (broadcast)" in lines
    assert lines[-1] == "# Out of bounds values : 3 WRONG"
    assert collectives.average_busbw([]) == 0.0


def test_collectives_comparison_has_a_units_row(capsys: pytest.CaptureFixture[str]) -> None:
    from acl_tools.bench import compare_collectives

    row = {"size": 8, "acl_busbw_GBps": 1.0, "torch_busbw_GBps": 2.0, "busbw_ratio": 0.5}
    report = {"ranks": 2, "acl": {"side": "acl"}, "torch": {"side": "torch"}, "collectives": {"all_reduce": [row]}}
    compare_collectives._print(report | {"all_reduce_target": None})
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split() == ["#", "size", "acl", "torch", "ratio"]
    assert lines[2].split() == ["#", "(B)", "(GB/s)", "(GB/s)", "acl/torch"]
    assert lines[-1].split() == ["8", "1.000", "2.000", "0.50"]

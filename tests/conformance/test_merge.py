"""``python -m acl_conformance.merge``: the shards of one run join into the report of the whole run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from acl_conformance.cli import main
from acl_conformance.merge import MergeError, merge
from acl_conformance.merge import main as merge_main
from acl_conformance.report import validate_report
from tests.conformance import faults

OPS = "Mul,Add,Softmax,Abs"


@pytest.fixture(scope="module", autouse=True)
def _fault_backends() -> None:
    faults.register()


def _run(tmp_path: Path, backend: str, shard: str | None) -> dict:
    out = tmp_path / (shard or "whole").replace("/", "-")
    argv = [backend, "--ops", OPS, "--report", str(out), *(["--shard", shard] if shard else [])]
    main(argv)
    return json.loads((out / "report.json").read_text())


def test_merged_shards_count_what_the_whole_run_counts(tmp_path, capsys):
    whole = _run(tmp_path, "reference", None)
    shards = [_run(tmp_path, "reference", f"{k}/3") for k in (3, 1, 2)]
    merged = merge(shards)
    assert validate_report(merged) == []
    assert merged["result"] == "passed" and whole["result"] == "passed"
    assert merged["totals"] == whole["totals"] and merged["totals"]["passed"] > 0
    assert merged["families"] == whole["families"]
    assert merged["ops"] == whole["ops"]
    assert "shards 1..3 of 3 merged" in merged["selection"]
    paths = [str(tmp_path / f"{k}-3" / "report.json") for k in (1, 2, 3)]
    assert merge_main([str(tmp_path / "merged"), *paths]) == 0
    assert json.loads((tmp_path / "merged" / "report.json").read_text())["totals"] == whole["totals"]
    page = (tmp_path / "merged" / "report.html").read_text()
    assert page.startswith("<!doctype html>") and "shards 1..3 of 3 merged" in page
    assert "3 shards:" in capsys.readouterr().out


def test_a_failure_in_one_shard_fails_the_merged_run(tmp_path):
    whole = _run(tmp_path, "fault-perturb", None)
    merged = merge([_run(tmp_path, "fault-perturb", f"{k}/2") for k in (1, 2)])
    assert whole["totals"]["failed"] > 0
    assert merged["result"] == "failed"
    assert merged["totals"] == whole["totals"]
    assert merged["failures_by_op"] == whole["failures_by_op"]
    cases = [sorted(f["case"] + f["op"] for f in r["failures"]) for r in (merged, whole)]
    assert cases[0] == cases[1]


def test_shards_that_are_not_one_run_are_refused(tmp_path, capsys):
    one, two = (_run(tmp_path, "reference", f"{k}/2") for k in (1, 2))
    with pytest.raises(MergeError, match=r"not 1\.\.2 of 2"):
        merge([one])
    with pytest.raises(MergeError, match=r"not 1\.\.2 of 2"):
        merge([one, one])
    with pytest.raises(MergeError, match="not one shard"):
        merge([one, {**two, "selection": ["Mul"]}])
    with pytest.raises(MergeError, match="disagree on seed"):
        merge([one, {**two, "seed": 7}])
    assert merge_main([str(tmp_path / "m"), str(tmp_path / "1-2" / "report.json")]) == 2
    assert "not 1..2 of 2" in capsys.readouterr().err

"""``--ops`` on the command line: names and patterns in any case, and a did-you-mean for a name that matches none."""

from __future__ import annotations

import pytest

from acl_conformance.cli import main as conformance_main
from acl_core.names import UnknownName, resolve, split
from acl_tools.bench import collectives
from acl_tools.bench.cli import main as bench_main

NAMES = ("Add", "Adds", "Softmax", "LogSoftmax", "Matmul")


def test_names_and_patterns_match_in_any_case_in_declared_order() -> None:
    assert resolve(["SOFTMAX"], NAMES) == ["Softmax"]
    assert resolve(["matmul", "add"], NAMES) == ["Add", "Matmul"]
    assert resolve(["add*"], NAMES) == ["Add", "Adds"]
    assert resolve(["*SOFTMAX"], NAMES) == ["Softmax", "LogSoftmax"]
    assert split(" a, b,,c ") == ["a", "b", "c"]


def test_a_name_matching_nothing_suggests_the_closest() -> None:
    with pytest.raises(UnknownName, match=r"no op is called 'softmx'; did you mean Softmax"):
        resolve(["Add", "softmx"], NAMES)
    with pytest.raises(UnknownName, match=r"known: Add, Adds, LogSoftmax, Matmul, Softmax"):
        resolve(["zzz"], NAMES)


def test_conformance_ops_ignore_case(capsys: pytest.CaptureFixture[str]) -> None:
    assert conformance_main(["reference", "--ops", "SOFTMAX", "--no-report", "--plain"]) == 0
    out = capsys.readouterr().out
    assert "1 ops" in out and "PASSED" in out


def test_conformance_ops_typo_is_refused_with_a_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    assert conformance_main(["reference", "--ops", "softmx", "--no-report", "--plain"]) == 2
    err = capsys.readouterr().err
    assert "did you mean Softmax" in err and err.count("\n") == 1


def test_bench_ops_typo_is_refused_with_a_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_main(["--backend", "reference", "--suite", "ops", "--ops", "matmull"]) == 2
    err = capsys.readouterr().err
    assert err == "acl-core bench: no op is called 'matmull'; did you mean Matmul, QuantMatmulV5 or QuantMatmulV3?\n"


def test_bench_collectives_names_ignore_case_and_suggest(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_main(["--collectives", "2", "--backend", "reference", "--ops", "allreduce"]) == 2
    assert "did you mean all_reduce" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        collectives.main(["--ops", "broadcst"])
    assert stop.value.code == 2
    assert "did you mean broadcast" in capsys.readouterr().err

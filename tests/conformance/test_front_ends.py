"""``acl-core conformance`` and ``pytest --acl-backend``: exit statuses, output, report files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from acl_conformance.cli import main
from acl_core.cli import main as acl_core_main
from tests.conformance import faults

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def _fault_backends() -> None:
    faults.register()


def test_cli_passes_reference_and_writes_the_report(tmp_path, capsys):
    status = main(["reference", "--ops", "Mul,Softmax", "--report", str(tmp_path)])
    out = capsys.readouterr().out
    assert status == 0
    assert "PASSED" in out and "elementwise" in out and "reduction" in out
    assert "quick mode" in out
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["totals"]["failed"] == 0 and set(data["families"]) == {"elementwise", "reduction"}
    assert (tmp_path / "report.html").is_file()


def test_cli_exit_status_is_one_and_names_the_failing_op(tmp_path, capsys):
    status = main(["fault-perturb", "--ops", "Mul,Add", "--report", str(tmp_path)])
    out = capsys.readouterr().out
    assert status == 1
    assert "FAILED" in out
    assert "FAIL Mul[" in out and "FAIL Add[" not in out


def test_acl_core_cli_delegates_to_the_suite(tmp_path, capsys):
    status = acl_core_main(["conformance", "reference", "--ops", "Abs", "--no-report"])
    assert status == 0
    assert "PASSED" in capsys.readouterr().out


def test_cli_reports_unmatched_expectations(tmp_path, capsys):
    path = tmp_path / "e.toml"
    path.write_text('[[expect]]\nop = "Abs"\ncase = "nothing like this"\nstatus = "skip"\nreason = "old"\n')
    status = main(["reference", "--ops", "Abs", "--no-report", "--expectations", str(path)])
    out = capsys.readouterr().out
    assert status == 0
    assert "warning: expectation matches no case: Abs / nothing like this" in out


def test_cli_refuses_bad_expectations_and_unknown_backends(tmp_path, capsys):
    path = tmp_path / "e.toml"
    path.write_text('[[expect]]\nop = "Abs"\nstatus = "skip"\n')
    assert main(["reference", "--no-report", "--expectations", str(path)]) == 2
    assert "no reason" in capsys.readouterr().err
    assert main(["no-such-backend", "--no-report"]) == 2
    assert "no-such-backend" in capsys.readouterr().err
    assert main(["reference", "--no-report", "--ops", "NoSuchOp*"]) == 2


def _pytest(args, cwd, extra_env=None):
    env = {**os.environ, "PYTHONPATH": str(REPO), **(extra_env or {})}
    env.pop("PYTEST_XDIST_WORKER", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_pytest_plugin_collects_the_packaged_suite(tmp_path):
    result = _pytest(
        ["--acl-backend", "reference", "--acl-ops", "Mul", "-q", "--acl-report", str(tmp_path / "r")], tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert " passed" in result.stdout
    data = json.loads((tmp_path / "r" / "report.json").read_text())
    assert data["totals"]["passed"] + data["totals"]["contract"] == data["totals"]["cases"] > 0
    assert set(data["ops"]) == {"Mul"}


def test_pytest_plugin_failure_names_op_and_case(tmp_path):
    (tmp_path / "conftest.py").write_text(
        textwrap.dedent(
            """
            from tests.conformance import faults

            faults.register()
            """
        )
    )
    result = _pytest(["--acl-backend", "fault-perturb", "--acl-ops", "Mul,Add", "-q", "-rf"], tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    failed = [line for line in result.stdout.splitlines() if line.startswith("FAILED")]
    assert failed and all("::Mul::" in line for line in failed)
    assert "Mul[float32 [2, 3, 4]⊕[2, 3, 4]@contiguous] value: out:" in result.stdout


def test_pytest_plugin_is_inert_without_the_option(tmp_path):
    (tmp_path / "test_one.py").write_text("def test_one():\n    assert True\n")
    result = _pytest(["-q"], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout
    assert "acl-core conformance" not in result.stdout


def test_pytest_plugin_rejects_an_unknown_backend(tmp_path):
    result = _pytest(["--acl-backend", "no-such-backend", "-q"], tmp_path)
    assert result.returncode == 4
    assert "no-such-backend" in result.stderr


def test_shards_split_whole_operators_and_together_are_the_run(tmp_path, capsys):
    from acl_conformance.suite import Session

    whole = Session("reference", ops="Mul,Add,Softmax,Abs").cases()
    parts = [Session("reference", ops="Mul,Add,Softmax,Abs", shard=(k, 3)).cases() for k in (1, 2, 3)]
    assert sorted(c.case_id + c.op for p in parts for c in p) == sorted(c.case_id + c.op for c in whole)
    owners = [{c.op for c in p} for p in parts]
    assert all(p for p in owners) and sum(len(o) for o in owners) == len(set().union(*owners)) == 4
    status = main(["reference", "--ops", "Mul,Add", "--shard", "2/2", "--report", str(tmp_path)])
    assert status == 0
    data = json.loads((tmp_path / "report.json").read_text())
    second = Session("reference", ops="Mul,Add", shard=(2, 2)).cases()
    assert "shard 2/2" in data["selection"] and data["totals"]["cases"] == len(second) > 0
    with pytest.raises(SystemExit):
        main(["reference", "--shard", "3/2", "--no-report"])
    assert "K must be between 1 and N" in capsys.readouterr().err

"""Where error cases are decided, and what a failure report gives a backend author (issue 14 class 4)."""

from __future__ import annotations

import json
import shlex
import textwrap
from pathlib import Path

import jsonschema
import pytest

from acl_conformance import cli, run
from acl_conformance.cli import main
from acl_conformance.report import validate_report
from acl_conformance.suite import Session
from acl_core.backend import Launch
from acl_reference.backend import ReferenceBackend
from tests.conformance import faults
from tests.conformance.test_front_ends import _pytest

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "conformance" / "report.schema.json").read_text())


@pytest.fixture(scope="module", autouse=True)
def _fault_backends() -> None:
    faults.register()


class CrashingMulBackend(ReferenceBackend):
    """Mul's kernel raises a Python exception (a backend bug, not an aclnn error)."""

    name = "crashing-mul"

    def __init__(self) -> None:
        super().__init__()

        def crash(launch: Launch) -> None:
            raise ZeroDivisionError("planted")

        self._kernels["Mul"] = crash


class NoKernelChecksBackend(ReferenceBackend):
    """Every kernel a no-op: it refuses nothing a kernel would refuse, and computes nothing."""

    name = "no-kernel-checks"

    def __init__(self) -> None:
        super().__init__()
        for name in self._kernels:
            self._kernels[name] = lambda launch: None


def test_error_cases_are_classified_by_where_the_refusal_is_decided() -> None:
    report = run("reference", ops="Gather")
    kinds = {o.case: o.kind for o in report.outcomes if o.kind in ("error", "contract")}
    # index values live in device memory: only the kernel refuses them
    assert kinds["error:index value past the end"] == "error"
    assert kinds["error:index value -1 below the start"] == "error"
    # dtype, shape and null cases are decided by the shared validator before any kernel runs
    assert kinds["error:index rank differs"] == "contract"
    assert kinds["error:self=null"] == "contract"
    assert kinds["error:index as complex128"] == "contract"
    assert report.totals()["contract"] == sum(k == "contract" for k in kinds.values())


def test_contract_cases_prove_nothing_about_a_backend() -> None:
    report = run(NoKernelChecksBackend(), ops="Gather")
    contract = [o for o in report.outcomes if o.kind == "contract"]
    assert contract and all(o.status == "passed" for o in contract)  # a backend with no kernels "passes" them
    failed = {o.case for o in report.failed}
    assert "error:index value -1 below the start" in failed and "error:index value past the end" in failed
    # with nothing but contract cases selected, the run has proved nothing and does not pass
    session = Session(NoKernelChecksBackend(), ops="Gather")
    only = session.run(cases=[c for c in session.cases() if c.case_id == "error:self=null"])
    assert only.totals()["contract"] == 1 and only.totals()["passed"] == 0 and not only.ok


def test_a_crash_carries_its_traceback_and_failures_come_grouped_with_a_rerun_command(tmp_path: Path) -> None:
    report = run(CrashingMulBackend(), ops="Mul,Add", seed=3)
    assert report.failed and {o.op for o in report.failed} == {"Mul"}
    # the kernel's exception surfaces at synchronisation as 561000, its traceback kept
    crash = next(o for o in report.failed if "traceback" in o.detail)
    assert "ZeroDivisionError: planted" in crash.detail["traceback"]
    assert report.failures_by_op() == {"Mul": len(report.failed)}
    command = report.rerun_command(crash)
    assert shlex.split(command) == [
        "acl-core", "conformance", "crashing-mul", "--ops", "Mul", "--case", crash.case, "--seed", "3",
    ]  # fmt: skip
    lines = cli._failure_groups(report)
    assert lines[0] == f"Mul: {len(report.failed)} failed"
    assert any("ZeroDivisionError: planted" in line for line in lines)
    json_path, html_path = report.write(tmp_path)
    data = json.loads(json_path.read_text())
    jsonschema.validate(data, SCHEMA)
    assert validate_report(data) == []
    assert data["seed"] == 3 and data["failures_by_op"] == {"Mul": len(report.failed)}
    assert all(f["rerun"].startswith("acl-core conformance crashing-mul ") for f in data["failures"])
    assert any("ZeroDivisionError" in f["detail"].get("traceback", "") for f in data["failures"])
    html = html_path.read_text()
    assert "seed 3" in html and "--case" in html and "ZeroDivisionError: planted" in html


def test_the_printed_rerun_command_runs_exactly_that_case(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fault-perturb", "--ops", "Mul", "--seed", "2", "--report", str(tmp_path), "--plain"]) == 1
    out = capsys.readouterr().out
    rerun = next(line.split("rerun: ", 1)[1] for line in out.splitlines() if "rerun: " in line)
    argv = shlex.split(rerun)
    assert argv[:2] == ["acl-core", "conformance"]
    case = argv[argv.index("--case") + 1]
    assert main([*argv[2:], "--no-report", "--plain"]) == 1
    again = capsys.readouterr().out
    assert "1 cases" in again and f"Mul[{case}]" in again
    # a non-quick case (a full-mode layout) reruns by its id as well; a pattern matching none stops the run
    assert main(["reference", "--ops", "Mul", "--case", "no such case", "--no-report"]) == 2


def test_ctrl_c_writes_a_partial_report_and_exits_130(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = Session.run_case
    calls = {"n": 0}

    def interrupted(self: Session, case: object) -> object:
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt
        return real(self, case)  # type: ignore[arg-type]

    monkeypatch.setattr(Session, "run_case", interrupted)
    assert main(["reference", "--ops", "Mul", "--report", str(tmp_path), "--plain"]) == cli.EXIT_INTERRUPTED == 130
    data = json.loads((tmp_path / "report.json").read_text())
    jsonschema.validate(data, SCHEMA)
    assert data["interrupted"] is True and data["totals"]["cases"] == 4 and data["result"] == "failed"
    assert "Interrupted" in (tmp_path / "report.html").read_text()


def test_a_failing_pytest_node_id_pasted_back_reruns_that_case(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(
        textwrap.dedent(
            """
            from tests.conformance import faults

            faults.register()
            """
        )
    )
    first = _pytest(["--acl-backend", "fault-perturb", "--acl-ops", "Mul", "-q", "-rf"], tmp_path)
    assert first.returncode == 1, first.stdout + first.stderr
    node = next(line.split(" ", 1)[1] for line in first.stdout.splitlines() if line.startswith("rerun: pytest"))
    argv = shlex.split(node)[1:]
    assert argv[-1].startswith("acl-conformance::Mul::")
    again = _pytest([*argv, "-q", "-rf"], tmp_path)
    assert again.returncode == 1, again.stdout + again.stderr
    assert "1 failed" in again.stdout and "passed" not in again.stdout

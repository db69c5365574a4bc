"""pytest plugin of the conformance suite: ``pytest --acl-backend NAME [--acl-mode quick|full]``.

Registered through the ``pytest11`` entry point, so every pytest run loads it; it stays inert
unless ``--acl-backend`` is given. With it and no test paths, pytest collects the packaged suite
(``acl_conformance/suite.py``), one item per case, named ``<Op>::<case id>``: a failure names the
operator and the case. ``--acl-report DIR`` writes the same JSON and HTML report as the CLI.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from acl_conformance.cases import Case
    from acl_conformance.runner import Outcome
    from acl_conformance.suite import Session

PROPERTY = "acl_conformance"


class _State:
    """What one pytest process knows about the conformance run."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.outcomes: list[Outcome] = []
        self.started = time.perf_counter()
        self.paths: tuple[Path, Path] | None = None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Collect each case's outcome (also from xdist workers, through the report's user properties)."""
        if report.when != "call":
            return
        for key, value in report.user_properties:
            if key == PROPERTY and isinstance(value, str):
                from acl_conformance.runner import Outcome

                self.outcomes.append(Outcome.from_json(json.loads(value)))


_STATE = pytest.StashKey[_State]()


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--acl-backend`` and the options that go with it."""
    group = parser.getgroup("acl-core conformance")
    group.addoption(
        "--acl-backend", action="store", default=None, help="acl-core backend to prove against the reference"
    )
    group.addoption(
        "--acl-mode", action="store", default="quick", choices=("quick", "full"), help="conformance mode (quick)"
    )
    group.addoption("--acl-ops", action="store", default=None, help="only ops matching these fnmatch patterns (a,b)")
    group.addoption("--acl-report", action="store", default=None, metavar="DIR", help="write report.json/html here")
    group.addoption("--acl-expectations", action="store", default=None, metavar="FILE", help="expectation file")
    group.addoption("--acl-seed", action="store", type=int, default=0, help="seed of the sample generators")


def _state(config: pytest.Config) -> _State | None:
    return config.stash.get(_STATE, None)


def pytest_configure(config: pytest.Config) -> None:
    """With ``--acl-backend``: start the session, and collect the packaged suite when no paths were given."""
    name = config.getoption("acl_backend", None)
    if name is None:
        return
    from acl_conformance.expectations import ExpectationError
    from acl_conformance.suite import SUITE_FILE, Session
    from acl_core.errors import AclCoreError

    try:
        session = Session(
            name,
            mode=config.getoption("acl_mode"),
            ops=config.getoption("acl_ops"),
            expectations=config.getoption("acl_expectations"),
            seed=config.getoption("acl_seed"),
        )
    except (AclCoreError, ExpectationError, RuntimeError, ValueError) as exc:
        raise pytest.UsageError(f"--acl-backend {name}: {exc}") from None
    state = _State(session)
    config.stash[_STATE] = state
    config.pluginmanager.register(state, "acl-conformance-state")
    if config.args_source is not pytest.Config.ArgsSource.ARGS:
        config.args = [str(SUITE_FILE)]
    else:  # a node id pasted back from a failure ("acl-conformance::Op::case") reruns that case
        config.args = [_node_arg(a, SUITE_FILE) for a in config.args]


NODE_PREFIX = "acl-conformance"
"""The node id of the suite file: items are ``acl-conformance::<Op>::<case id>``."""


def _node_arg(arg: str, suite_file: Path) -> str:
    """A command-line argument with the suite's node-id prefix turned into the suite file's path."""
    if arg == NODE_PREFIX or arg.startswith(NODE_PREFIX + "::"):
        return str(suite_file) + arg[len(NODE_PREFIX) :]
    return arg


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    """The suite file becomes the conformance collector instead of a Python test module."""
    if _state(parent.config) is None:
        return None
    from acl_conformance.suite import SUITE_FILE

    if module_path.resolve() != SUITE_FILE:
        return None
    return SuiteFile.from_parent(parent, path=module_path, nodeid=NODE_PREFIX)


class SuiteFile(pytest.File):
    """The packaged suite: one collector per operator."""

    def collect(self) -> Iterator[pytest.Item | pytest.Collector]:
        """One :class:`OpNode` per selected operator, families in order."""
        state = _state(self.config)
        assert state is not None
        by_op: dict[str, list[Case]] = {}
        for case in state.session.cases():
            by_op.setdefault(case.op, []).append(case)
        for op, cases in by_op.items():
            yield OpNode.from_parent(self, name=op, cases=cases)


class OpNode(pytest.Collector):
    """One operator: one item per case."""

    def __init__(self, *, cases: list[Case], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.cases = cases

    def collect(self) -> Iterator[pytest.Item | pytest.Collector]:
        """The operator's cases."""
        for case in self.cases:
            yield CaseItem.from_parent(self, name=case.case_id, case=case)


class CaseFailed(Exception):
    """A conformance case failed; carries the outcome."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.message)
        self.outcome = outcome


class CaseItem(pytest.Item):
    """One conformance case as a pytest item."""

    def __init__(self, *, case: Case, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case = case

    def runtest(self) -> None:
        """Run the case; skip, xfail or fail as its outcome says."""
        state = _state(self.config)
        assert state is not None
        outcome = state.session.run_case(self.case)
        self.user_properties.append((PROPERTY, json.dumps(outcome.to_json())))
        if outcome.status == "skipped":
            pytest.skip(outcome.message)
        if outcome.status == "xfailed":
            pytest.xfail(f"{outcome.expectation} — {outcome.failure}: {outcome.message}")
        if outcome.status == "failed":
            raise CaseFailed(outcome)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        """The op, the case and what differed (and the traceback when the suite itself crashed)."""
        if isinstance(excinfo.value, CaseFailed):
            o = excinfo.value.outcome
            text = f"{o.op}[{o.case}] {o.failure}: {o.message}"
            trace = o.detail.get("traceback")
            text = f"{text}\n{trace}" if trace else text
            state = _state(self.config)
            rerun = ""
            if state is not None:
                rerun = "\n".join(
                    [
                        f"rerun: pytest --acl-backend {shlex.quote(state.session.backend.name)} "
                        f"--acl-mode {state.session.mode} --acl-seed {state.session.seed} {shlex.quote(self.nodeid)}",
                        f"   or: {state.session.report([o]).rerun_command(o)}",
                    ]
                )
            return f"{text}\n{rerun}" if rerun else text
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        """Where the case comes from, for pytest's headers."""
        return self.path, None, f"{self.case.op}[{self.case.case_id}]"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Write the report when ``--acl-report`` was given (in the controlling process only)."""
    state = _state(session.config)
    if state is None or hasattr(session.config, "workerinput"):
        return
    directory = session.config.getoption("acl_report")
    if directory:
        interrupted = exitstatus == pytest.ExitCode.INTERRUPTED
        report = state.session.report(state.outcomes, time.perf_counter() - state.started, interrupted=interrupted)
        state.paths = report.write(directory)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Expectation warnings, expected failures that passed, and where the report went."""
    state = _state(config)
    if state is None or hasattr(config, "workerinput"):
        return
    lines = [f"warning: {w}" for w in state.session.warnings()]
    lines += [f"warning: {o.op}[{o.case}] {o.message}" for o in state.outcomes if o.status == "xpassed"]
    if state.paths:
        lines.append(f"report: {state.paths[0]} and {state.paths[1]}")
    if lines:
        terminalreporter.section("acl-core conformance")
        for line in lines:
            terminalreporter.write_line(line)

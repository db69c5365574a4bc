"""``acl-core conformance [NAME] [--quick|--full] [--report DIR] [--ops PATTERN] [--shard K/N]``.

``--ops`` takes fnmatch patterns on operator or family names, matched ignoring case; a pattern that
matches nothing stops the run with the closest names (did you mean). ``--shard K/N`` runs the K-th of
N parts of the selection (whole operators, balanced by case count), so a run too long for one
machine slot is N shorter ones whose reports together are the whole run.

Runs the suite on backend NAME (default: ``$ACL_BACKEND`` or the best available backend), shows
progress (a live bar on a terminal, plain lines otherwise), prints a per-family summary and the
failures (grouped by operator, each with the command that reruns it: ``--case ID``), and writes
``report.json`` and ``report.html``. The exit status is 0 only when no case failed and some case
proved something (a passed contract case does not); 1 otherwise; 2 when the run could not start
(unknown backend, bad expectation file); 130 after Ctrl-C, with the partial report written.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from acl_conformance.cases import Case
from acl_conformance.expectations import ExpectationError
from acl_conformance.report import Report
from acl_conformance.runner import Outcome
from acl_conformance.runtime_cases import runtime_names
from acl_conformance.suite import Session, default_report_dir
from acl_core.errors import AclCoreError
from acl_core.names import resolve, split
from acl_core.spec.ops import all_specs

MAX_FAILURES_SHOWN = 25
EXIT_INTERRUPTED = 130
"""The exit status after Ctrl-C (128 + SIGINT), once the partial report is written."""
_COLUMNS = ("family", "ops", "claimed", "cases", "passed", "contract", "failed", "skipped", "xfailed", "xpassed")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``acl-core conformance``."""
    p = argparse.ArgumentParser(
        prog="acl-core conformance",
        description="Prove a backend against the NumPy reference: every declared operator's samples, "
        "layouts and error codes (and, with --full, Hypothesis-drawn values).",
    )
    p.add_argument(
        "name", nargs="?", default=None, help="backend to prove (default: $ACL_BACKEND or the best available)"
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--quick", dest="mode", action="store_const", const="quick", help="the quick subset (default)")
    mode.add_argument("--full", dest="mode", action="store_const", const="full", help="every layout and Hypothesis")
    p.set_defaults(mode="quick")
    p.add_argument(
        "--report",
        metavar="DIR",
        type=Path,
        help="where to write report.json/html (default ./reports/conformance-NAME/)",
    )
    p.add_argument("--no-report", action="store_true", help="write no report files")
    p.add_argument(
        "--ops",
        metavar="PATTERN",
        help="only these ops: comma-separated op or family names or fnmatch patterns, any case (softmax,add*)",
    )
    p.add_argument(
        "--expectations", metavar="FILE", type=Path, help="expectation file (default: the packaged one for NAME)"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the sample generators (default 0)")
    p.add_argument(
        "--case",
        metavar="ID",
        help="only the case with this id (as a report prints it), or the ids this fnmatch pattern matches",
    )
    p.add_argument(
        "--shard",
        metavar="K/N",
        type=_shard,
        help="only shard K of N (whole operators, balanced by case count): split a long run over N calls",
    )
    p.add_argument("--plain", action="store_true", help="plain progress lines even on a terminal")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point (``acl-core conformance`` delegates here)."""
    args = build_parser().parse_args(argv)
    try:
        ops = None if args.ops is None else selected_names(args.ops)
        session = Session(
            args.name,
            mode=args.mode,
            ops=ops,
            expectations=args.expectations,
            seed=args.seed,
            case=args.case,
            shard=args.shard,
        )
    except (AclCoreError, ExpectationError, RuntimeError, ValueError) as exc:
        print(f"acl-core conformance: {exc}", file=sys.stderr)
        return 2
    cases = session.cases()
    if not cases:
        what = f"--case {args.case!r}" if args.case is not None else f"--ops {args.ops!r}"
        print(f"acl-core conformance: no case matches {what}", file=sys.stderr)
        return 2
    fancy = sys.stdout.isatty() and not args.plain and _has_rich()
    view: _View = _RichView(session, cases) if fancy else _PlainView(session, cases, sys.stdout)
    report = view.run()
    paths: tuple[Path, Path] | None = None
    if not args.no_report:
        paths = report.write(args.report or default_report_dir(session.backend.name))
    view.summary(report, paths)
    if report.interrupted:
        return EXIT_INTERRUPTED
    return 0 if report.ok else 1


def _shard(text: str) -> tuple[int, int]:
    """``K/N`` as (K, N), 1 <= K <= N."""
    try:
        k, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected K/N (e.g. 2/3), not {text!r}") from None
    if not 1 <= k <= n:
        raise argparse.ArgumentTypeError(f"shard {text!r}: K must be between 1 and N")
    return k, n


def selected_names(text: str) -> list[str]:
    """The declared op and family names ``--ops`` picks, in their declared case; UnknownName when one picks none."""
    specs = all_specs()
    names = [*specs, *dict.fromkeys(s.family for s in specs.values()), *runtime_names()]
    return resolve(split(text), names, what="declared operator or family")


def _has_rich() -> bool:
    try:
        import rich  # noqa: F401
    except ImportError:
        return False
    return True


def _header(session: Session, cases: list[Case]) -> str:
    caps = session.capabilities
    ops = len({c.op for c in cases})
    return (
        f"acl-core conformance · backend {session.backend.name} ({caps.device_name}) · {session.mode} mode · "
        f"{ops} ops, {len(cases)} cases"
    )


def _failure_line(outcome: Outcome, width: int = 220) -> str:
    text = f"FAIL {outcome.op}[{outcome.case}] {outcome.failure}: {outcome.message}"
    return text if len(text) <= width else text[: width - 1] + "…"


def _rows(report: Report) -> list[list[str]]:
    rows = []
    for fam, r in report.families().items():
        rows.append([fam, *(str(r[c]) for c in _COLUMNS[1:])])
    t = report.totals()
    claimed = sum(r["claimed"] for r in report.families().values())
    ops = sum(r["ops"] for r in report.families().values())
    rows.append(["total", str(ops), str(claimed), str(t["cases"]), *(str(t[s]) for s in _COLUMNS[4:])])
    return rows


def _skip_lines(report: Report, limit: int = 6) -> list[str]:
    groups = report.skip_reasons()
    lines = [f"skipped {g['count']:>5}: {g['reason']}" for g in groups[:limit]]
    if len(groups) > limit:
        lines.append(f"skipped {sum(g['count'] for g in groups[limit:]):>5}: {len(groups) - limit} other reasons")
    return lines


def _failure_groups(report: Report, limit: int = MAX_FAILURES_SHOWN) -> list[str]:
    """Failures grouped by operator (with counts), each followed by the command that reruns it."""
    lines: list[str] = []
    shown = 0
    for op, count in report.failures_by_op().items():
        lines.append(f"{op}: {count} failed")
        for o in (f for f in report.failed if f.op == op):
            if shown == limit:
                break
            shown += 1
            lines.append(f"  {o.case} ({o.failure}): {o.message.splitlines()[0] if o.message else ''}")
            lines.append(f"    rerun: {report.rerun_command(o)}")
            tb = o.detail.get("traceback")
            if tb:
                lines.extend("    " + line for line in str(tb).rstrip().splitlines())
    if len(report.failed) > shown:
        lines.append(f"… and {len(report.failed) - shown} more in the report")
    return lines


def _verdict(report: Report) -> str:
    t = report.totals()
    if report.interrupted:
        word = "INTERRUPTED"
    elif report.ok:
        word = "PASSED"
    else:
        word = "FAILED" if report.failed else "NOTHING PROVEN (every case skipped or decided by the shared validator)"
    return (
        f"{word}: {t['passed']} passed, {t['contract']} contract, {t['failed']} failed, {t['skipped']} skipped, "
        f"{t['xfailed']} xfailed, {t['xpassed']} xpassed in {report.seconds:.1f} s"
    )


class _View:
    """How a run is shown: progress while it runs, then the summary."""

    def run(self) -> Report:
        raise NotImplementedError

    def summary(self, report: Report, paths: tuple[Path, Path] | None) -> None:
        raise NotImplementedError


class _PlainView(_View):
    """Plain lines: the header, each failure as it happens, one line per family when it completes."""

    def __init__(self, session: Session, cases: list[Case], out: TextIO) -> None:
        self.session, self.cases, self.out = session, cases, out
        self.remaining: dict[str, int] = {}
        for c in cases:
            self.remaining[c.family] = self.remaining.get(c.family, 0) + 1
        self.counts: dict[str, dict[str, int]] = {}

    def _print(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def _progress(self, case: Case, outcome: Outcome) -> None:
        counts = self.counts.setdefault(case.family, {})
        counts[outcome.status] = counts.get(outcome.status, 0) + 1
        if outcome.status == "failed":
            self._print("  " + _failure_line(outcome))
        self.remaining[case.family] -= 1
        if self.remaining[case.family] == 0:
            parts = ", ".join(f"{n} {s}" for s, n in counts.items())
            self._print(f"{case.family:<12} {sum(counts.values()):>6} cases: {parts}")

    def run(self) -> Report:
        self._print(_header(self.session, self.cases))
        return self.session.run(self._progress, self.cases)

    def summary(self, report: Report, paths: tuple[Path, Path] | None) -> None:
        rows = [list(_COLUMNS), *_rows(report)]
        widths = [max(len(r[i]) for r in rows) for i in range(len(_COLUMNS))]
        self._print("")
        for row in rows:
            self._print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
        for line in _failure_groups(report):
            self._print(line)
        for line in _skip_lines(report):
            self._print(line)
        for w in report.warnings:
            self._print(f"warning: {w}")
        for o in report.outcomes:
            if o.status == "xpassed":
                self._print(f"warning: {o.op}[{o.case}] {o.message}")
        if paths:
            self._print(f"report: {paths[0]} and {paths[1]}")
        if report.interrupted:
            self._print(f"interrupted after {len(report.outcomes)} of {len(self.cases)} cases")
        self._print(_verdict(report))


class _RichView(_View):
    """A live progress bar (failures printed above it), then rich tables."""

    def __init__(self, session: Session, cases: list[Case]) -> None:
        from rich.console import Console

        self.session, self.cases = session, cases
        self.console = Console()

    def run(self) -> Report:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.console.print(f"[bold]{_header(self.session, self.cases)}[/bold]")
        columns: list[Any] = [
            SpinnerColumn(),
            TextColumn("{task.description:<28}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("[red]{task.fields[failed]} failed[/red]"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
        ]
        failed = 0
        with Progress(*columns, console=self.console, transient=True) as progress:
            task = progress.add_task("starting", total=len(self.cases), failed=0)

            def step(case: Case, outcome: Outcome) -> None:
                nonlocal failed
                if outcome.status == "failed":
                    failed += 1
                    self.console.print(_failure_line(outcome, self.console.width * 3), style="red", markup=False)
                progress.update(task, advance=1, description=f"{case.family} · {case.op}", failed=failed)

            return self.session.run(step, self.cases)

    def summary(self, report: Report, paths: tuple[Path, Path] | None) -> None:
        from rich.table import Table

        table = Table(title=f"{report.backend} · {report.mode} mode", title_justify="left")
        for i, col in enumerate(_COLUMNS):
            table.add_column(col, justify="left" if i == 0 else "right")
        rows = _rows(report)
        for i, row in enumerate(rows):
            cells = list(row)
            if row[5] != "0":
                cells[5] = f"[bold red]{row[5]}[/bold red]"
            table.add_row(*cells, end_section=(i == len(rows) - 2))
        self.console.print(table)
        for line in _failure_groups(report):
            self.console.print(
                line, style="red" if not line.startswith("    ") else None, highlight=False, markup=False
            )
        for line in _skip_lines(report):
            self.console.print(line, style="dim", highlight=False, markup=False)
        for w in report.warnings:
            self.console.print(f"[yellow]warning:[/yellow] {w}", highlight=False)
        for o in report.outcomes:
            if o.status == "xpassed":
                self.console.print(f"[yellow]warning:[/yellow] {o.op}[{o.case}] {o.message}", highlight=False)
        if paths:
            self.console.print(f"report: {paths[0]} and {paths[1]}", highlight=False)
        style = "bold green" if report.ok else "bold red"
        self.console.print(f"[{style}]{_verdict(report)}[/{style}]")

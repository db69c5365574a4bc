"""The conformance report: a JSON record and a self-contained HTML page of one run."""

from __future__ import annotations

import datetime as _dt
import html
import json
import platform
import shlex
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from acl_conformance.runner import STATUSES, Outcome

COUNTS = ("passed", "contract", *STATUSES[1:])
"""The columns cases are counted in: a passed ``contract`` case (decided by the shared validator) is not a pass."""


def bucket(outcome: Outcome) -> str:
    """The column ``outcome`` is counted in: its status, except that a passed contract case counts as ``contract``."""
    return "contract" if outcome.kind == "contract" and outcome.status == "passed" else outcome.status


SCHEMA_VERSION = 1
SCHEMA_PATH = Path(__file__).resolve().parent / "report.schema.json"


def versions(backend_version: str, mode: str) -> dict[str, str]:
    """Versions worth recording: acl-core, NumPy, Python, the backend (and Hypothesis in full mode)."""
    import numpy

    import acl_core

    found = {
        "acl-core": acl_core.__version__,
        "numpy": numpy.__version__,
        "python": platform.python_version(),
        "backend": backend_version,
        "platform": f"{platform.system()} {platform.machine()}",
    }
    if mode == "full":
        try:
            found["hypothesis"] = metadata.version("hypothesis")
        except metadata.PackageNotFoundError:
            found["hypothesis"] = "not installed"
    return found


@dataclass
class Report:
    """Everything one run found, with the counts derived from its outcomes."""

    backend: str
    mode: str
    capabilities: dict[str, Any]
    versions: dict[str, str]
    outcomes: list[Outcome]
    declared: Mapping[str, str]
    """Selected operators → family (the run's scope), in the order tables list them."""
    claimed_ops: frozenset[str]
    warnings: list[str] = field(default_factory=list)
    expectations_file: str | None = None
    selection: tuple[str, ...] = ()
    started: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    seconds: float = 0.0
    seed: int = 0
    interrupted: bool = False
    """True when the run was stopped (Ctrl-C) before every case ran: the outcomes are the ones that did."""

    # ------------------------------------------------------------------------------------ counts
    def totals(self) -> dict[str, int]:
        """Case counts by status, and ``cases``."""
        counts = Counter(bucket(o) for o in self.outcomes)
        return {**{s: counts.get(s, 0) for s in COUNTS}, "cases": len(self.outcomes)}

    @property
    def failed(self) -> list[Outcome]:
        """Failed cases, in run order."""
        return [o for o in self.outcomes if o.status == "failed"]

    @property
    def ok(self) -> bool:
        """True when nothing failed and something passed (the exit status is 0 exactly then).

        A run in which every case was skipped, or only contract cases passed, proves nothing, so it does
        not pass; neither does an interrupted run.
        """
        proven = any(bucket(o) in ("passed", "xfailed") for o in self.outcomes)
        return not self.failed and proven and not self.interrupted

    def families(self) -> dict[str, dict[str, int]]:
        """Per family: ops declared (in scope) and claimed, and case counts by status."""
        rows: dict[str, dict[str, int]] = {}
        for op, family in self.declared.items():
            row = rows.setdefault(family, {"ops": 0, "claimed": 0, **{s: 0 for s in COUNTS}, "cases": 0})
            row["ops"] += 1
            row["claimed"] += op in self.claimed_ops
        for o in self.outcomes:
            row = rows.setdefault(o.family, {"ops": 0, "claimed": 0, **{s: 0 for s in COUNTS}, "cases": 0})
            row[bucket(o)] += 1
            row["cases"] += 1
        return rows

    def ops(self) -> dict[str, dict[str, Any]]:
        """Per operator: family, whether claimed, case counts by status."""
        rows: dict[str, dict[str, Any]] = {
            op: {"family": fam, "claimed": op in self.claimed_ops, **{s: 0 for s in COUNTS}}
            for op, fam in sorted(self.declared.items())
        }
        for o in self.outcomes:
            row = rows.setdefault(o.op, {"family": o.family, "claimed": o.op in self.claimed_ops})
            row[bucket(o)] = row.get(bucket(o), 0) + 1
        return rows

    def skip_reasons(self) -> list[dict[str, Any]]:
        """Skipped cases grouped by reason, most frequent first (with a few example cases)."""
        groups: dict[str, list[Outcome]] = defaultdict(list)
        for o in self.outcomes:
            if o.status == "skipped":
                groups[o.message].append(o)
        return [
            {"reason": reason, "count": len(items), "examples": [f"{o.op}[{o.case}]" for o in items[:3]]}
            for reason, items in sorted(groups.items(), key=lambda kv: -len(kv[1]))
        ]

    def failures_by_op(self) -> dict[str, int]:
        """Failed cases per operator, most first."""
        counts = Counter(o.op for o in self.failed)
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    def rerun_command(self, outcome: Outcome) -> str:
        """The command line that runs exactly ``outcome``'s case again, same backend, mode and seed."""
        mode = " --full" if self.mode == "full" else ""
        return (
            f"acl-core conformance {shlex.quote(self.backend)}{mode} --ops {shlex.quote(outcome.op)} "
            f"--case {shlex.quote(outcome.case)} --seed {self.seed}"
        )

    # ------------------------------------------------------------------------------------ output
    def to_json(self) -> dict[str, Any]:
        """The JSON document (see ``report.schema.json``)."""
        return {
            "schema_version": SCHEMA_VERSION,
            "backend": self.backend,
            "mode": self.mode,
            "started": self.started,
            "seconds": round(self.seconds, 3),
            "result": "passed" if self.ok else "failed",
            "seed": self.seed,
            "interrupted": self.interrupted,
            "selection": list(self.selection),
            "versions": self.versions,
            "capabilities": self.capabilities,
            "expectations_file": self.expectations_file,
            "totals": self.totals(),
            "families": self.families(),
            "ops": self.ops(),
            "failures": [{**o.to_json(), "rerun": self.rerun_command(o)} for o in self.failed],
            "failures_by_op": self.failures_by_op(),
            "xfailed": [o.to_json() for o in self.outcomes if o.status == "xfailed"],
            "xpassed": [o.to_json() for o in self.outcomes if o.status == "xpassed"],
            "skips": self.skip_reasons(),
            "warnings": list(self.warnings),
        }

    def write(self, directory: Path | str) -> tuple[Path, Path]:
        """Write ``report.json`` and ``report.html`` into ``directory`` (created); return both paths."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        data = self.to_json()
        json_path, html_path = d / "report.json", d / "report.html"
        json_path.write_text(json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n", encoding="utf-8")
        html_path.write_text(render_html(data), encoding="utf-8")
        return json_path, html_path


def validate_report(data: Mapping[str, Any]) -> list[str]:
    """Problems with a report document's counts (families and ops add up to the totals); empty when sound."""
    problems: list[str] = []
    totals = data["totals"]
    statuses = [s for s in COUNTS if s in totals]
    for name, row in data["families"].items():
        parts = sum(row[s] for s in statuses)
        if parts != row["cases"]:
            problems.append(f"family {name}: statuses add up to {parts}, not its {row['cases']} cases")
        if row["claimed"] > row["ops"]:
            problems.append(f"family {name}: {row['claimed']} ops claimed out of {row['ops']}")
    for s in [*statuses, "cases"]:
        total = sum(row[s] for row in data["families"].values())
        if total != totals[s]:
            problems.append(f"families add up to {total} {s}, the totals say {totals[s]}")
    for s in statuses:
        total = sum(row.get(s, 0) for row in data["ops"].values())
        if total != totals[s]:
            problems.append(f"ops add up to {total} {s}, the totals say {totals[s]}")
    if len(data["failures"]) != totals["failed"]:
        problems.append(f"{len(data['failures'])} failures listed, the totals say {totals['failed']}")
    if sum(g["count"] for g in data["skips"]) != totals["skipped"]:
        problems.append("skip reasons do not add up to the skipped total")
    if sum(data.get("failures_by_op", {}).values()) != totals["failed"] and "failures_by_op" in data:
        problems.append("failures by operator do not add up to the failed total")
    if data["result"] == "passed" and totals["failed"]:
        problems.append(f"result {data['result']!r} disagrees with {totals['failed']} failures")
    return problems


# ---------------------------------------------------------------------------------------- HTML
_CSS = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:2rem auto;max-width:75rem;color:#1d2330;
padding:0 1rem}
h1{font-size:1.5rem;margin:.2rem 0}h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #dde2ea}
table{border-collapse:collapse;margin:.5rem 0;width:100%}th,td{padding:.3rem .6rem;border-bottom:1px solid #e8ecf2;
text-align:left;vertical-align:top}th{background:#f4f6fa;font-weight:600}td.n{text-align:right;
font-variant-numeric:tabular-nums}.badge{display:inline-block;padding:.15rem .6rem;border-radius:1rem;font-weight:600;
color:#fff}.pass{background:#1f8a4c}.fail{background:#c23b31}.muted{color:#6b7385}.bad{color:#c23b31;font-weight:600}
.good{color:#1f8a4c}code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12.5px}
details{margin:.4rem 0}summary{cursor:pointer;font-weight:600}.warn{background:#fff6df;border-left:4px solid #e0a800;
padding:.4rem .8rem;margin:.3rem 0}
"""


def _e(value: Any) -> str:
    return html.escape(str(value))


def _table(header: Iterable[str], rows: Iterable[Iterable[Any]], numeric: Iterable[int] = ()) -> str:
    num = set(numeric)
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join(
        "<tr>"
        + "".join(f'<td class="n">{_e(c)}</td>' if i in num else f"<td>{c}</td>" for i, c in enumerate(row))
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _failure_detail(f: Mapping[str, Any]) -> str:
    d = f.get("detail", {})
    if "max_abs_error" in d:
        ulps = f"worst {d['max_ulp_error']} ulp, " if "max_ulp_error" in d else ""
        return (
            f"{ulps}max abs {d['max_abs_error']:.3g}, max rel {d['max_rel_error']:.3g} ({_e(d.get('tolerance', ''))})"
        )
    if "backend_code" in d and "reference_code" in d:
        return f"code {d['backend_code']} vs reference {d['reference_code']}"
    if "backend_code" in d:
        return f"rejected with {d['backend_code']}"
    return ""


def render_html(data: Mapping[str, Any]) -> str:
    """The report as one HTML page with inline CSS and no external assets."""
    t = data["totals"]
    ok = data["result"] == "passed"
    badge = f'<span class="badge {"pass" if ok else "fail"}">{"PASSED" if ok else "FAILED"}</span>'
    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        f"<title>acl-core conformance: {_e(data['backend'])}</title><style>{_CSS}</style></head><body>",
        f"<h1>acl-core conformance — {_e(data['backend'])} {badge}</h1>",
        f'<p class="muted">{_e(data["mode"])} mode · seed {data.get("seed", 0)} · started {_e(data["started"])} · '
        f"{data['seconds']:.1f} s · "
        f"{t['cases']} cases: <span class=good>{t['passed']} passed</span>, "
        f"<span class={'bad' if t['failed'] else 'muted'}>{t['failed']} failed</span>, "
        f"{t.get('contract', 0)} contract (decided by the shared validator, not counted as passes), "
        f"{t['skipped']} skipped, "
        f"{t['xfailed']} xfailed, {t['xpassed']} xpassed"
        + (f" · ops selected: <code>{_e(', '.join(data['selection']))}</code>" if data["selection"] else "")
        + "</p>",
    ]
    if data.get("interrupted"):
        parts.append('<div class="warn">Interrupted: only the cases that ran before the stop are counted.</div>')
    for w in data["warnings"]:
        parts.append(f'<div class="warn">{_e(w)}</div>')
    rows = []
    for fam, r in data["families"].items():
        rows.append(
            [
                f"<b>{_e(fam)}</b>",
                r["ops"],
                r["claimed"],
                r["cases"],
                r["passed"],
                r.get("contract", 0),
                f'<span class="{"bad" if r["failed"] else ""}">{r["failed"]}</span>',
                r["skipped"],
                r["xfailed"],
                r["xpassed"],
            ]
        )
    parts.append("<h2>By family</h2>")
    parts.append(
        _table(
            ["family", "ops", "claimed", "cases", "passed", "contract", "failed", "skipped", "xfailed", "xpassed"],
            rows,
            numeric=(1, 2, 3, 4, 5, 7, 8, 9),
        )
    )
    parts.append(f"<h2>Failures ({len(data['failures'])})</h2>")
    if data["failures"]:
        by_op = data.get("failures_by_op", {})
        if by_op:
            parts.append(_table(["op", "failed cases"], [[_e(op), n] for op, n in by_op.items()], numeric=(1,)))
        frows = [
            [
                f"<b>{_e(f['op'])}</b>",
                f'<span class="mono">{_e(f["case"])}</span>',
                _e(f["failure"]),
                _failure_detail(f),
                f'<span class="mono">{_e(f["message"])}</span>'
                + (f"<pre>{_e(f['detail']['traceback'])}</pre>" if "traceback" in f.get("detail", {}) else ""),
                f"<code>{_e(f.get('rerun', ''))}</code>",
            ]
            for f in data["failures"]
        ]
        parts.append(_table(["op", "case", "kind", "what differed", "message", "rerun"], frows))
    else:
        parts.append('<p class="good">None.</p>')
    for key, title in (("xpassed", "Expected failures that passed"), ("xfailed", "Expected failures")):
        if data[key]:
            xrows = [
                [_e(x["op"]), f'<span class="mono">{_e(x["case"])}</span>', _e(x.get("expectation", ""))]
                for x in data[key]
            ]
            parts.append(f"<h2>{title} ({len(data[key])})</h2>" + _table(["op", "case", "reason"], xrows))
    if data["skips"]:
        srows = [[_e(s["reason"]), s["count"], _e(", ".join(s["examples"]))] for s in data["skips"]]
        parts.append("<h2>Skipped, by reason</h2>" + _table(["reason", "cases", "for example"], srows, numeric=(1,)))
    parts.append(
        "<h2>Versions</h2>" + _table(["component", "version"], [[_e(k), _e(v)] for k, v in data["versions"].items()])
    )
    caps_rows = []
    for k, v in data["capabilities"].items():
        if isinstance(v, list):
            v = f"{len(v)}: " + ", ".join(str(x) for x in v)
        elif isinstance(v, dict) and k == "op_dtypes":
            v = "; ".join(f"{a}: {', '.join(b)}" for a, b in v.items()) or "-"
        elif isinstance(v, dict):
            v = "; ".join(f"{a}={b}" for a, b in v.items()) or "-"
        caps_rows.append([f"<code>{_e(k)}</code>", f'<span class="mono">{_e(v)}</span>'])
    parts.append(
        "<h2>Capabilities</h2><details><summary>what the backend claims</summary>"
        + _table(["field", "value"], caps_rows)
        + "</details>"
    )
    ops_rows = [
        [
            _e(op),
            _e(r["family"]),
            "yes" if r["claimed"] else '<span class="muted">no</span>',
            r.get("passed", 0),
            f'<span class="{"bad" if r.get("failed") else ""}">{r.get("failed", 0)}</span>',
            r.get("skipped", 0),
            r.get("xfailed", 0) + r.get("xpassed", 0),
        ]
        for op, r in data["ops"].items()
    ]
    parts.append(
        "<h2>Operators</h2><details><summary>per-operator counts</summary>"
        + _table(["op", "family", "claimed", "passed", "failed", "skipped", "x"], ops_rows, numeric=(3, 5, 6))
        + "</details>"
    )
    parts.append(
        f'<p class="muted">expectations: {_e(data["expectations_file"] or "none")} · report schema '
        f"{data['schema_version']} · Python {_e(sys.version.split()[0])}</p></body></html>"
    )
    return "\n".join(parts)

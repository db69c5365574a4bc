"""Join the reports of one run split into shards (``--shard K/N``) into the report of the whole run.

``python -m acl_conformance.merge OUT_DIR SHARD_REPORT.json...`` writes ``report.json`` and
``report.html`` into ``OUT_DIR``. The shards must come from one backend, mode and seed, and together be
shards 1..N of one N; a missing or repeated shard is refused, since the join would not be the run.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from acl_conformance.report import render_html, validate_report

_SHARD = re.compile(r"^shard (\d+)/(\d+)$")


class MergeError(ValueError):
    """The reports given are not the shards of one run."""


def _shard_of(report: Mapping[str, Any]) -> tuple[int, int]:
    found = [m for s in report["selection"] if (m := _SHARD.match(s))]
    if len(found) != 1:
        raise MergeError(f"a report with selection {report['selection']!r} is not one shard of a run")
    return int(found[0][1]), int(found[0][2])


def _add_counts(into: dict[str, Any], row: Mapping[str, Any], keys: Sequence[str]) -> None:
    for k in keys:
        if isinstance(row.get(k), int) and not isinstance(row.get(k), bool):
            into[k] = into.get(k, 0) + row[k]


def merge(reports: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The report of the whole run, from the reports of all its shards (in any order)."""
    if not reports:
        raise MergeError("no reports to merge")
    shards = sorted(_shard_of(r) for r in reports)
    n = shards[0][1]
    if shards != [(k, n) for k in range(1, n + 1)]:
        raise MergeError(f"the shards given are {[f'{k}/{m}' for k, m in shards]}, not 1..{n} of {n}")
    first = reports[0]
    for r in reports[1:]:
        for key in ("backend", "mode", "seed", "expectations_file"):
            if r.get(key) != first.get(key):
                raise MergeError(f"shards disagree on {key}: {first.get(key)!r} and {r.get(key)!r}")
    statuses = [k for k in first["totals"] if k != "cases"]

    totals: dict[str, int] = {}
    families: dict[str, dict[str, int]] = {}
    ops: dict[str, dict[str, Any]] = {}
    skips: dict[str, dict[str, Any]] = {}
    for r in reports:
        _add_counts(totals, r["totals"], [*statuses, "cases"])
        for name, row in r["families"].items():
            # every shard declares every operator: its op and claim counts are the run's, its case counts a part
            target = families.setdefault(name, {"ops": row["ops"], "claimed": row["claimed"]})
            _add_counts(target, row, [*statuses, "cases"])
        for op, row in r["ops"].items():
            target = ops.setdefault(op, {"family": row["family"], "claimed": row["claimed"]})
            _add_counts(target, row, statuses)
        for group in r["skips"]:
            target = skips.setdefault(group["reason"], {"reason": group["reason"], "count": 0, "examples": []})
            target["count"] += group["count"]
            target["examples"] = (target["examples"] + group["examples"])[:3]

    failures = [f for r in reports for f in r["failures"]]
    by_op: dict[str, int] = {}
    for f in failures:
        by_op[f["op"]] = by_op.get(f["op"], 0) + 1
    interrupted = any(r.get("interrupted", False) for r in reports)
    proven = totals.get("passed", 0) + totals.get("xfailed", 0) > 0
    selection = [s for s in first["selection"] if not _SHARD.match(s)]
    merged = {
        **first,
        "started": min(r["started"] for r in reports),
        "seconds": max(r["seconds"] for r in reports),
        "result": "passed" if not failures and proven and not interrupted else "failed",
        "interrupted": interrupted,
        "selection": [*selection, f"shards 1..{n} of {n} merged"],
        "totals": totals,
        "families": families,
        "ops": dict(sorted(ops.items())),
        "failures": failures,
        "failures_by_op": dict(sorted(by_op.items(), key=lambda kv: (-kv[1], kv[0]))),
        "xfailed": [o for r in reports for o in r["xfailed"]],
        "xpassed": [o for r in reports for o in r["xpassed"]],
        "skips": sorted(skips.values(), key=lambda g: -g["count"]),
        "warnings": list(dict.fromkeys(w for r in reports for w in r["warnings"])),
    }
    problems = validate_report(merged)
    if problems:
        raise MergeError("the merged counts do not add up: " + "; ".join(problems))
    return merged


def main(argv: Sequence[str] | None = None) -> int:
    """Merge shard reports given on the command line; 0 when the whole run passed, 1 when not, 2 on bad input."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2:
        print("usage: python -m acl_conformance.merge OUT_DIR SHARD_REPORT.json...", file=sys.stderr)
        return 2
    out, paths = Path(args[0]), [Path(p) for p in args[1:]]
    try:
        merged = merge([json.loads(p.read_text(encoding="utf-8")) for p in paths])
    except (OSError, json.JSONDecodeError, KeyError, MergeError) as exc:
        print(f"acl_conformance.merge: {exc}", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(merged, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (out / "report.html").write_text(render_html(merged), encoding="utf-8")
    t = merged["totals"]
    print(f"{len(paths)} shards: {t['cases']} cases, {t['passed']} passed, {t['failed']} failed -> {out}/report.json")
    return 0 if merged["result"] == "passed" else 1


if __name__ == "__main__":
    sys.exit(main())

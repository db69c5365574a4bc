"""Join an acl-core and a torch.distributed collective benchmark (same ranks and sizes) into one JSON.

``python -m acl_tools.bench.compare_collectives ACL.json TORCH.json --out both.json`` writes, per
collective and size, both sides' algbw and busbw and acl/torch's busbw ratio, plus the figure issue 8
is judged by: the all-reduce bus bandwidth at ``--target-bytes`` (256 MiB) as a ratio of torch's, and
whether it is within 10%. Exit status 1 when either side computed a wrong element.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

TARGET_BYTES = 256 << 20
TOLERANCE = 0.10
"""Issue 8: acl-core's all-reduce bus bandwidth within 10% of torch.distributed's."""


def compare(acl: dict[str, Any], torch: dict[str, Any], target_bytes: int = TARGET_BYTES) -> dict[str, Any]:
    """The joined report (raises ValueError when the two runs differ in ranks, collectives or sizes)."""
    if acl["ranks"] != torch["ranks"]:
        raise ValueError(f"acl ran {acl['ranks']} ranks, torch {torch['ranks']}")
    table: dict[str, list[dict[str, Any]]] = {}
    for name, rows in acl["collectives"].items():
        theirs = {r["size"]: r for r in torch["collectives"].get(name, [])}
        if sorted(theirs) != sorted(r["size"] for r in rows):
            raise ValueError(f"{name}: the two runs measured different sizes")
        table[name] = [
            {
                "size": r["size"],
                "acl_time_us": r["time_us"],
                "acl_algbw_GBps": r["algbw_GBps"],
                "acl_busbw_GBps": r["busbw_GBps"],
                "torch_time_us": theirs[r["size"]]["time_us"],
                "torch_algbw_GBps": theirs[r["size"]]["algbw_GBps"],
                "torch_busbw_GBps": theirs[r["size"]]["busbw_GBps"],
                "busbw_ratio": r["busbw_GBps"] / theirs[r["size"]]["busbw_GBps"],
                "acl_wrong": r["wrong"],
                "torch_wrong": theirs[r["size"]]["wrong"],
            }
            for r in rows
        ]
    target = next((r for r in table.get("all_reduce", []) if r["size"] == target_bytes), None)
    verdict = None
    if target is not None:
        verdict = {
            "size": target_bytes,
            "acl_busbw_GBps": target["acl_busbw_GBps"],
            "torch_busbw_GBps": target["torch_busbw_GBps"],
            "ratio": target["busbw_ratio"],
            "within_10_percent": target["busbw_ratio"] >= 1 - TOLERANCE,
        }
    wrong = sum(r["acl_wrong"] + r["torch_wrong"] for rows in table.values() for r in rows)
    return {
        "ranks": acl["ranks"],
        "acl": {k: acl.get(k) for k in ("side", "backend", "engine", "date", "command")},
        "torch": {k: torch.get(k) for k in ("side", "backend", "engine", "date", "command")},
        "collectives": table,
        "all_reduce_target": verdict,
        "wrong": wrong,
    }


def _print(report: dict[str, Any]) -> None:
    print(f"# {report['ranks']} ranks: {report['acl']['side']} against {report['torch']['side']} (bus bandwidth, GB/s)")
    print(f"# {'size':>12} {'acl':>9} {'torch':>9} {'ratio':>6}")
    print(f"# {'(B)':>12} {'(GB/s)':>9} {'(GB/s)':>9} {'acl/torch':>6}")
    for name, rows in report["collectives"].items():
        print(f"# {name}")
        for r in rows:
            print(
                f"  {r['size']:>12} {r['acl_busbw_GBps']:>9.3f} {r['torch_busbw_GBps']:>9.3f} {r['busbw_ratio']:>6.2f}"
            )
    verdict = report["all_reduce_target"]
    if verdict:
        print(f"# all-reduce at {verdict['size']} bytes: {verdict['ratio']:.3f} of torch's bus bandwidth")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m acl_tools.bench.compare_collectives``."""
    p = argparse.ArgumentParser(
        prog="python -m acl_tools.bench.compare_collectives", description=__doc__.splitlines()[0]
    )
    p.add_argument("acl", type=Path, help="JSON of python -m acl_tools.bench.collectives --engine acl")
    p.add_argument("torch", type=Path, help="JSON of the same run with --engine torch")
    p.add_argument(
        "--target-bytes", type=int, default=TARGET_BYTES, help="all-reduce size the verdict is read at (256 MiB)"
    )
    p.add_argument("--out", type=Path, required=True, help="JSON file to write the joined report to")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Read the two reports, print the comparison, write the joined JSON."""
    args = build_parser().parse_args(argv)
    report = compare(json.loads(args.acl.read_text()), json.loads(args.torch.read_text()), args.target_bytes)
    _print(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    return 1 if report["wrong"] else 0


if __name__ == "__main__":
    sys.exit(main())

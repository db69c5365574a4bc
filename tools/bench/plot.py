"""The ops suite's plot: time ratio acl/torch per case, as a horizontal bar chart in a PNG."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot(report: dict[str, Any], path: Path) -> Path:
    """Draw the ratio acl/torch of every measured case of ``report`` into the PNG ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in report["cases"] if r.get("ratio")]
    skipped = [r for r in report["cases"] if not r.get("ratio")]
    labels = [f"{r['op']}  {r['dtype']}  {r['shape']}" for r in rows]
    ratios = [float(r["ratio"]) for r in rows]
    height = max(3.0, 0.32 * len(rows) + 1.6)
    fig, ax = plt.subplots(figsize=(10, height), dpi=110)
    colors = ["#2e7d32" if q <= 1.0 else ("#f9a825" if q <= 1.25 else "#c62828") for q in ratios]
    y = list(range(len(rows)))[::-1]
    lo, hi = min([*ratios, 1.0]), max([*ratios, 1.0])
    log = hi / lo > 20
    ax.barh(y, [q - 1.0 for q in ratios], left=1.0, color=colors, height=0.7)
    ax.axvline(1.0, color="black", linewidth=1)
    if log:
        ax.set_xscale("log")
    ax.set_yticks(y, labels, fontsize=8)
    for yi, q, r in zip(y, ratios, rows, strict=True):
        m = r["metric"]
        text = f"x{q:.2f}  ({_fmt(m['acl'])} vs {_fmt(m['torch'])} {m['unit']})"
        ax.text(max(q, 1.0), yi, f" {text}", va="center", ha="left", fontsize=7)
    if log:
        ax.set_xlim(lo / 2, hi * 60)
    else:
        span = hi - lo
        ax.set_xlim(max(0.0, lo - 0.1 * span - 0.1), hi + 0.9 * span + 0.1)
    torch = report.get("torch", {})
    ax.set_title(
        f"acl-core {report.get('backend')} ({report.get('device')}) vs torch {torch.get('version')} on "
        f"{torch.get('device')}\n{report.get('date', '')}",
        fontsize=9,
    )
    ax.set_xlabel("time acl / time torch  (below 1: acl faster; green <= 1, amber <= 1.25, red above)")
    if skipped:
        names = ", ".join(sorted({f"{r['op']} ({r['status'].split(':')[0]})" for r in skipped}))
        fig.text(0.01, 0.005, f"not run: {names}"[:180], fontsize=7, color="#555555")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout(rect=(0, 0.02 if skipped else 0, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    plt.close(fig)
    return path


def _fmt(value: float | None) -> str:
    """A metric value with three significant digits."""
    return "-" if value is None else f"{value:.3g}"


if __name__ == "__main__":  # python -m acl_tools.bench.plot REPORT.json [OUT.png]: re-plot a report written elsewhere
    import json
    import sys

    source = Path(sys.argv[1])
    print(plot(json.loads(source.read_text()), Path(sys.argv[2]) if len(sys.argv) > 2 else source.with_suffix(".png")))

"""The benchmarks' plots: the ops suite's acl/torch time ratio per case, the host suite's Add beside NumPy."""

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


def plot_host(report: dict[str, Any], path: Path) -> Path:
    """Draw the host suite of ``report`` into the PNG ``path``: time per Add call and bandwidth, acl beside NumPy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["host"]["throughput"]
    sizes = [r["bytes"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
    left.loglog(sizes, [r["acl_two_phase_us"] for r in rows], "o-", label="acl-core two-phase Add")
    left.loglog(sizes, [r["numpy_us"] for r in rows], "s--", label="np.add(a, b, out=c)")
    left.set_ylabel("time per call (us)")
    right.semilogx(sizes, [r["acl_GBps"] for r in rows], "o-", label="acl-core two-phase Add")
    right.semilogx(sizes, [r["numpy_GBps"] for r in rows], "s--", label="np.add(a, b, out=c)")
    right.set_ylabel("bandwidth, 3 operands (GB/s)")
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("bytes per operand (float32)")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    o = report["host"]["overhead"]
    fig.suptitle(
        f"acl-core {report.get('backend')} ({report.get('device')}) beside NumPy, {report.get('date', '')}\n"
        f"host overhead at {o['bytes']} B: two-phase {o['two_phase_us']:.1f} us, phase 2 alone "
        f"{o['phase2_repeatable_us']:.1f} us, NumPy {o['numpy_us']:.1f} us",
        fontsize=9,
    )
    fig.tight_layout()
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
    data = json.loads(source.read_text())
    draw = plot_host if "host" in data else plot
    print(draw(data, Path(sys.argv[2]) if len(sys.argv) > 2 else source.with_suffix(".png")))

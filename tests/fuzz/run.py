"""The fuzz loop: a deterministic schedule of cases, each checked for leaks, and the report.

Case ``i`` of seed ``s`` is decided by ``(s, i)`` alone: its area (six in ten through ``aclnn``, two
through ``eager``, two runtime misuse), its subject (operators and runtime kinds taken in turn, so a
run of a few hundred cases reaches every declared operator) and every random choice inside it
(``np.random.default_rng([s, i])``). ``python -m tests.fuzz --seed s --case i`` replays one.
"""

from __future__ import annotations

import json
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from acl_core import acl
from acl_core.backend import Backend
from acl_core.plugin import use_backend
from acl_core.spec.ops import all_specs

from . import op_cases, runtime_cases
from .harness import Hang, leaked, tables
from .verdict import Outcome, Verdict

PERIOD = 10
ACLNN_SLOTS = 6
EAGER_SLOTS = 2
DEFAULT_DEADLINE = 10.0
"""Seconds one call may take before it counts as a hang (the slowest valid sample takes ~0.2 s)."""


@dataclass
class Report:
    """Every outcome of one run, and what the summary says about them."""

    seed: int
    ops: list[str] | None = None
    outcomes: list[Outcome] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failures(self) -> list[Outcome]:
        """The outcomes that are defects."""
        return [o for o in self.outcomes if o.verdict.failed]

    def summary(self) -> str:
        """Counts per area and verdict, the refusal codes seen, and one line per failure class."""
        lines = [f"fuzz seed={self.seed}: {len(self.outcomes)} cases in {self.seconds:.1f} s"]
        for area in ("aclnn", "eager", "runtime"):
            counts = Counter(o.verdict.value for o in self.outcomes if o.area == area)
            if counts:
                shown = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
                lines.append(f"  {area}: {shown}")
        codes = Counter(o.code for o in self.outcomes if o.verdict is Verdict.REFUSED and o.code)
        lines.append("  refusal codes: " + ", ".join(f"{c} x{n}" for c, n in codes.most_common()))
        subjects = {o.subject for o in self.outcomes if o.area == "aclnn"}
        lines.append(f"  operators reached through aclnn: {len(subjects)} of {len(self.ops or all_specs())}")
        groups: dict[tuple[str, str, str, str], list[Outcome]] = {}
        for o in self.failures:
            kind = o.subject if o.area == "runtime" else o.mutation.split(":")[-1]
            groups.setdefault((o.verdict.value, o.area, kind, o.step.split("(")[0]), []).append(o)
        if groups:
            lines.append(f"  {len(self.failures)} failures in {len(groups)} classes (first of each):")
            for members in groups.values():
                names = sorted({m.subject for m in members})
                shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
                lines.append(f"  x{len(members)} ({shown}) " + members[0].line(self.seed))
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """The run as plain data."""
        return {
            "seed": self.seed,
            "seconds": round(self.seconds, 3),
            "cases": len(self.outcomes),
            "failures": [
                {
                    "case": o.index,
                    "verdict": o.verdict.value,
                    "area": o.area,
                    "subject": o.subject,
                    "mutation": o.mutation,
                    "step": o.step,
                    "code": o.code,
                    "message": o.message,
                    "repro": o.repro,
                }
                for o in self.failures
            ],
            "counts": dict(Counter(f"{o.area}:{o.verdict.value}" for o in self.outcomes)),
        }


def schedule(seed: int, index: int) -> tuple[str, int]:
    """(area, turn): which front end case ``index`` goes through, and how many cases of that area came before."""
    cycle, slot = divmod(index, PERIOD)
    if slot < ACLNN_SLOTS:
        return "aclnn", cycle * ACLNN_SLOTS + slot
    if slot < ACLNN_SLOTS + EAGER_SLOTS:
        return "eager", cycle * EAGER_SLOTS + slot - ACLNN_SLOTS
    return "runtime", cycle * (PERIOD - ACLNN_SLOTS - EAGER_SLOTS) + slot - ACLNN_SLOTS - EAGER_SLOTS


def prepare(name: str = "reference") -> Backend:
    """Backend ``name`` made the process default, initialised, with device 0 current (what every case starts from)."""
    backend = use_backend(name)
    assert backend is not None
    if not backend.runtime.initialized:
        acl.init()
    acl.rt.set_device(0)
    return backend


def run_case(
    seed: int, index: int, backend: Backend, limit: float = DEFAULT_DEADLINE, ops: list[str] | None = None
) -> Outcome:
    """Run case ``index`` of ``seed`` (operators from ``ops``, default all) and classify it (leaks included)."""
    area, turn = schedule(seed, index)
    rng = np.random.default_rng([seed, index])
    ops = sorted(ops or all_specs())
    start = time.perf_counter()
    use_backend(backend.name)  # the front ends' default: a runtime case may have switched it
    rt = backend.runtime
    before = tables(rt)
    release: Callable[[], None] = lambda: None
    if area == "runtime":
        kind = runtime_cases.KINDS[(turn + seed) % len(runtime_cases.KINDS)]
        out = Outcome(index, area, kind.__name__, kind.__doc__.splitlines()[0] if kind.__doc__ else "")
        script = runtime_cases.Script(out, limit, rng)
        release = script.finish
        body: Callable[[], Any] = lambda: kind(script)
    else:
        spec = all_specs()[ops[(turn + seed) % len(ops)]]
        out = Outcome(index, area, spec.name, "")
        if area == "aclnn":
            built: list[Any] = []
            body = lambda: built.append(op_cases.run_aclnn(spec, backend, rng, seed, out, limit))

            def release() -> None:
                for b in built:
                    if b is not None:
                        b.free()
        else:
            body = lambda: op_cases.run_eager(spec, backend, rng, seed, out, limit)
    try:
        body()
    except (Exception, Hang) as exc:  # the harness itself broke: a failure to look at, never hidden
        out.worse(Verdict.ESCAPED, "harness", 0, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
    try:
        release()
    except Exception as exc:
        out.worse(Verdict.LEAK, "cleanup", 0, f"releasing the case's resources raised {type(exc).__name__}: {exc}")
    acl.rt.set_device(0)
    acl.rt.reset_device(0)  # set_device above restores the thread's current device; keep the refcount
    extra = leaked(before, tables(rt))
    if extra:
        out.worse(Verdict.LEAK, "leak check", 0, f"left behind: {extra}")
    out.seconds = time.perf_counter() - start
    return out


def fuzz(
    seed: int,
    calls: int,
    *,
    limit: float = DEFAULT_DEADLINE,
    progress: Path | None = None,
    budget: float | None = None,
    backend: str = "reference",
    ops: list[str] | None = None,
) -> Report:
    """Run cases 0..calls-1 of ``seed`` on ``backend`` (stopping early once ``budget`` seconds are spent)."""
    chosen = prepare(backend)
    report = Report(seed, ops)
    start = time.perf_counter()
    for index in range(calls):
        if progress is not None:
            progress.write_text(f"{index}\n")
        report.outcomes.append(run_case(seed, index, chosen, limit, ops))
        if budget is not None and time.perf_counter() - start > budget:
            break
    report.seconds = time.perf_counter() - start
    return report


def write(report: Report, path: Path) -> None:
    """Save the report as JSON."""
    path.write_text(json.dumps(report.to_json(), indent=1))

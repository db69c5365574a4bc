"""cuBLASLt algorithm choice by timing: ``ACL_BLASLT_TUNE``.

The heuristic's first answer is a model's guess; for a large GEMM the library usually has several
algorithms (tile shapes, cluster shapes, split-K, stages) whose real speed differs by tens of percent.
With ``ACL_BLASLT_TUNE=1`` the nvidia provider asks the heuristic for up to :data:`CANDIDATES`
algorithms for every GEMM of at least :data:`MIN_WORK` multiply-adds, runs each a few times on the
call's own operands (:data:`WARMUP` launches, then :data:`REPEATS` between two events) and keeps the
fastest; this is the default (an H100 int8 16384^3 GEMM: 6.00 ms tuned against the heuristic's 10.65 ms).
The choice is stored in the plan cache under a key of its own (``choice: "timed"``), so a warm
start loads and checks it and times nothing; ``ACL_BLASLT_TUNE=0`` keeps the heuristic's first answer.
A GEMM planned during stream capture is never timed (events cannot be waited on there): it takes the
heuristic's answer and stores it under the untimed key, never the timed one, so a warm start that plans
it during capture again loads it and makes nothing.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence

LOG = logging.getLogger("acl_rocm.plan_cache")

ENV = "ACL_BLASLT_TUNE"
CANDIDATES = 8
"""Algorithms asked of cublasLtMatmulAlgoGetHeuristic when tuning."""
MIN_WORK = 1 << 30
"""Multiply-adds (batch * m * n * k) from which a GEMM is timed: 1024^3; below, timing costs more than it wins."""
WARMUP = 2
"""Untimed launches of a candidate before its timed ones (clocks up, caches and TMA descriptors warm)."""
REPEATS = 5
"""Launches of a candidate between its two events."""


def tune_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """``ACL_BLASLT_TUNE``: "1" or unset times the candidates, "0" keeps the heuristic's first; ValueError otherwise."""
    value = (os.environ if environ is None else environ).get(ENV, "").strip()
    if value == "0":
        return False
    if value in ("", "1"):
        return True
    raise ValueError(f"{ENV}={value!r}: expected 0 (the heuristic's first algorithm) or 1 (time the candidates)")


def worth_tuning(batch: int, m: int, n: int, k: int) -> bool:
    """True when the GEMM has at least :data:`MIN_WORK` multiply-adds."""
    return batch * m * n * k >= MIN_WORK


def pick_fastest(count: int, time_ms: Callable[[int], float | None]) -> tuple[int, list[float | None]]:
    """(index of the fastest candidate, every candidate's ms or None where it failed to run).

    ``time_ms(i)`` times candidate ``i`` (None: it could not run); ties keep the earlier (the
    heuristic's order). ValueError when no candidate ran.
    """
    times = [time_ms(i) for i in range(count)]
    ran = [(t, i) for i, t in enumerate(times) if t is not None]
    if not ran:
        raise ValueError(f"none of the {count} cuBLASLt candidates ran")
    best = min(ran)[1]
    return best, times


def describe(times: Sequence[float | None], best: int) -> str:
    """One log line of a timing: every candidate's ms (x: failed), the chosen one marked."""
    parts = []
    for i, t in enumerate(times):
        text = "x" if t is None else f"{t:.3f}"
        parts.append(f"[{text}]" if i == best else text)
    return " ".join(parts)

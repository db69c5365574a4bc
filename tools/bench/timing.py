"""Timing helpers: repeat a callable, synchronise the backend, report robust statistics."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Timing:
    """Seconds per call: the median of several rounds, each averaged over ``calls`` calls."""

    median_s: float
    best_s: float
    rounds: int
    calls: int

    @property
    def median_us(self) -> float:
        """Median in microseconds."""
        return self.median_s * 1e6


def measure(fn: Callable[[], object], sync: Callable[[], object], *, min_time: float = 0.2, rounds: int = 7) -> Timing:
    """Time ``fn`` (``sync`` runs after each round, inside the timing) so each round lasts about ``min_time``."""
    fn()
    sync()
    calls = 1
    while True:
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        elapsed = time.perf_counter() - start
        if elapsed >= min_time / 4 or calls >= 1 << 20:
            break
        calls *= 4
    calls = max(1, int(calls * (min_time / max(elapsed, 1e-9)) / 4) or 1)
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        samples.append((time.perf_counter() - start) / calls)
    return Timing(statistics.median(samples), min(samples), rounds, calls)

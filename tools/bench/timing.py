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


def _calls_per_round(fn: Callable[[], object], sync: Callable[[], object], min_time: float) -> int:
    """How many calls of ``fn`` (after a warm-up call) make a round of about ``min_time``."""
    fn()
    sync()
    calls = 1
    while True:
        elapsed = _round(fn, sync, calls) * calls
        if elapsed >= min_time / 4 or calls >= 1 << 20:
            break
        calls *= 4
    return max(1, int(calls * (min_time / max(elapsed, 1e-9)) / 4) or 1)


def _round(fn: Callable[[], object], sync: Callable[[], object], calls: int) -> float:
    """Seconds per call over one round of ``calls`` calls, ``sync`` included."""
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - start) / calls


def measure(fn: Callable[[], object], sync: Callable[[], object], *, min_time: float = 0.2, rounds: int = 7) -> Timing:
    """Time ``fn`` (``sync`` runs after each round, inside the timing) so each round lasts about ``min_time``."""
    calls = _calls_per_round(fn, sync, min_time)
    samples = [_round(fn, sync, calls) for _ in range(rounds)]
    return Timing(statistics.median(samples), min(samples), rounds, calls)


def measure_interleaved(
    a: tuple[Callable[[], object], Callable[[], object]],
    b: tuple[Callable[[], object], Callable[[], object]],
    *,
    min_time: float = 0.2,
    rounds: int = 7,
) -> tuple[Timing, Timing]:
    """Time two (fn, sync) pairs in alternating rounds, so drift of the machine (clocks, neighbours) hits both alike.

    For figures of a few microseconds, where two back-to-back measurements of one thing can differ by
    a third; each side's median is over its own rounds.
    """
    calls = (_calls_per_round(*a, min_time), _calls_per_round(*b, min_time))
    samples: tuple[list[float], list[float]] = ([], [])
    for i in range(2 * rounds):
        side = i % 2 if (i // 2) % 2 == 0 else 1 - i % 2  # a b b a a b ...: neither side always goes first
        samples[side].append(_round(*(a, b)[side], calls[side]))
    return (
        Timing(statistics.median(samples[0]), min(samples[0]), rounds, calls[0]),
        Timing(statistics.median(samples[1]), min(samples[1]), rounds, calls[1]),
    )

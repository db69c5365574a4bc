"""Capture defects: a recorder whose replays do not read their inputs when they run.

The capture cases (``acl_conformance.capture_cases``) capture a call over inputs that hold zeros,
then write new inputs in place before each of two replays: a replay that computes from what the
inputs held at capture time must fail.
"""

from __future__ import annotations

from collections.abc import Callable

from acl_reference.backend import ReferenceBackend
from acl_reference.driver import ReferenceDriver, ReferenceStream, Task
from tests.conformance.mutants import Mutant


class StaleCaptureDriver(ReferenceDriver):
    """A captured task runs at capture time, and its replay re-uses what it computed then (stale inputs)."""

    def enqueue(self, stream: object | None, run: Callable[[], None], what: str) -> Task:
        """Inside a capture: compute now, record a task that does nothing (the defect)."""
        if isinstance(stream, ReferenceStream) and stream.recording is not None:
            run()
            return super().enqueue(stream, _nothing, what)
        return super().enqueue(stream, run, what)


def _nothing() -> None:
    """What the stale replay does."""


class StaleCaptureBackend(ReferenceBackend):
    """The reference with :class:`StaleCaptureDriver`."""

    name = "mutant-stale-capture"

    def __init__(self) -> None:
        ReferenceBackend.__init__(self, StaleCaptureDriver())


MUTANTS = [
    Mutant(
        "stale-capture",
        "capture",
        "a replay computes from the inputs as they were at capture time, not at replay",
        StaleCaptureBackend,
        ops="Cos,Softmax",
    )
]

"""Runtime defects: streams, events, async copies and big copies that a backend gets wrong.

Each mutant is the reference with one driver primitive broken the way a new backend's driver often
is. Only the runtime cases (``--ops runtime``) are selected: they must catch each one.
"""

from __future__ import annotations

from collections.abc import Callable

from acl_core.spec.runtime import CopyDirection
from acl_reference.backend import ReferenceBackend
from acl_reference.driver import ReferenceDriver, ReferenceStream, Task
from tests.conformance.mutants import Mutant

SIXTEEN_MIB = 16 << 20


def _with_driver(name: str, driver: type[ReferenceDriver], doc: str) -> type[ReferenceBackend]:
    """A ReferenceBackend subclass registered as ``mutant-<name>`` whose driver is ``driver``."""

    def __init__(self: ReferenceBackend) -> None:
        ReferenceBackend.__init__(self, driver())

    return type(
        f"{driver.__name__}Backend",
        (ReferenceBackend,),
        {"name": f"mutant-{name}", "__init__": __init__, "__doc__": doc},
    )


class EarlySyncDriver(ReferenceDriver):
    """synchronize_stream returns at once: the host reads before the stream's work has run."""

    def synchronize_stream(self, stream: object) -> None:
        """Return without waiting (the defect)."""


class DroppedAsyncCopyDriver(ReferenceDriver):
    """memcpy_async is accepted and never performed."""

    def copy(self, dst: int, src: int, nbytes: int, direction: CopyDirection, stream: object | None) -> None:
        """Synchronous copies work; enqueued ones are dropped (the defect)."""
        if stream is None:
            super().copy(dst, src, nbytes, direction, stream)


class ReorderedQueueDriver(ReferenceDriver):
    """A stream runs its newest task first (a LIFO where a FIFO belongs)."""

    def enqueue(self, stream: object | None, run: Callable[[], None], what: str) -> Task:
        """Push to the front of the queue (the defect)."""
        task = super().enqueue(stream, run, what)
        if isinstance(stream, ReferenceStream) and stream.queue and stream.queue[-1] is task:
            stream.queue.rotate(1)
        return task


class ZeroElapsedDriver(ReferenceDriver):
    """Event elapsed time is always 0 (timestamps taken at enqueue granularity, or never)."""

    def elapsed_ms(self, start: object, end: object) -> float:
        """0 ms (the defect)."""
        return 0.0


class IgnoredWaitDriver(ReferenceDriver):
    """stream_wait_event does nothing: the waiting stream races ahead."""

    def stream_wait_event(self, stream: object, event: object) -> None:
        """Ignore the dependency (the defect)."""


class DefaultOnlyDeviceSyncDriver(ReferenceDriver):
    """synchronize_device waits for the default stream only (the Driver base class's default)."""

    def synchronize_device(self) -> None:
        """Only the default stream (the defect)."""
        self.synchronize_stream(self.default_stream())


class TruncatingCopyDriver(ReferenceDriver):
    """Copies stop at 16 MiB (one DMA chunk), silently."""

    def copy(self, dst: int, src: int, nbytes: int, direction: CopyDirection, stream: object | None) -> None:
        """At most 16 MiB (the defect)."""
        super().copy(dst, src, min(nbytes, SIXTEEN_MIB), direction, stream)


_DEFECTS: list[tuple[str, type[ReferenceDriver], str]] = [
    ("early-sync", EarlySyncDriver, "synchronize_stream returns before the stream's queue has run"),
    ("dropped-async-copy", DroppedAsyncCopyDriver, "memcpy_async is accepted and dropped"),
    ("reordered-stream", ReorderedQueueDriver, "a stream runs its work out of order (newest first)"),
    ("zero-elapsed", ZeroElapsedDriver, "event elapsed time is always 0"),
    ("ignored-wait", IgnoredWaitDriver, "stream_wait_event is ignored"),
    ("default-only-device-sync", DefaultOnlyDeviceSyncDriver, "synchronize_device skips created streams"),
    ("truncating-copy", TruncatingCopyDriver, "copies above 16 MiB are truncated to 16 MiB"),
]

MUTANTS = [
    Mutant(name, "runtime", description, _with_driver(name, driver, description), ops="runtime")
    for name, driver, description in _DEFECTS
]

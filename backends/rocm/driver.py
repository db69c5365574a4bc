"""The acl Driver of the HIP backend: every primitive is one provider call on real device memory.

Async copies need page-locked host memory (``alloc_host`` → cudaMallocHost / hipHostMalloc); the
shared runtime refuses pageable memory for them before the driver sees the call. Streams and events
are the provider's integer handles; a null acl stream is the device's default stream.

Stream capture records into the platform's graphs (CUDA / HIP graphs, relaxed mode). The shared
runtime keeps every aclmdlRI rule; the driver keeps only what the platform needs: which streams a
capture spans (the origin and the streams that joined it through events), the deferred device checks
a graph arms at each replay, and a side stream for its own synchronous copies while a capture runs
(a legacy-stream copy would break the capture of a blocking stream).
"""

from __future__ import annotations

import bisect
import ctypes
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from acl_core.errors import AclError, AclnnError, AclnnStatus, RtErrorCode
from acl_core.spec.runtime import CaptureMode, CopyDirection, Driver
from acl_rocm.providers.base import RuntimeProvider


def handle(obj: object) -> int:
    """The integer value of a provider handle (stream or event) the shared runtime passed back."""
    return int(obj)  # type: ignore[call-overload]


@dataclass
class _Capture:
    """One capture in progress: its origin stream, the streams it spans, the checks its graph will arm."""

    origin: int
    streams: set[int] = field(default_factory=set)
    checks: list[tuple[int, str]] = field(default_factory=list)


@dataclass
class RocmGraph:
    """A captured, instantiated platform graph and the deferred checks each replay arms.

    ``checks`` are (slot, message): ``slot`` is 4 bytes of persistent device memory the graph copies
    its check flag into at every replay, read at the replay stream's next synchronisation.
    """

    vendor: object
    checks: tuple[tuple[int, str], ...]
    origin: int
    destroyed: bool = False


_FREE_ASYNC, _KEEP, _FREE = 0, 1, 2
"""A read check flag: an op's stream-ordered flag (free_async), a graph's slot (kept), an orphaned slot (free)."""


def _live(graph: object) -> RocmGraph:
    """``graph`` as a graph of this driver not yet destroyed (107000 otherwise: a vendor call would crash)."""
    if not isinstance(graph, RocmGraph):
        raise AclError(RtErrorCode.ACL_ERROR_RT_PARAM_INVALID, f"not a graph of the rocm driver: {graph!r}")
    if graph.destroyed:
        raise AclError(RtErrorCode.ACL_ERROR_RT_PARAM_INVALID, "the rocm graph was destroyed")
    return graph


class RocmDriver(Driver):
    """Device primitives over a :class:`~acl_rocm.providers.base.RuntimeProvider`."""

    def __init__(self, provider: RuntimeProvider) -> None:
        self.provider = provider
        self._lock = threading.Lock()
        self._pinned_starts: list[int] = []
        self._pinned: dict[int, int] = {}
        self._count: int | None = None
        self._checks: dict[int, list[tuple[int, str, int]]] = {}
        """Per stream: (flag address, message, what to do with the flag once read: _FREE_ASYNC, _KEEP, _FREE)."""
        self._capture_of: dict[int, _Capture] = {}
        self._event_capture: dict[int, _Capture] = {}
        self._side: int | None = None
        self.before_capture: list[Callable[[], None]] = []
        """Run at each capture_begin: host-side set-up (uploads) that must not happen inside a capture."""

    # ------------------------------------------------------------------ devices
    def device_count(self) -> int:
        """Devices the provider sees."""
        if self._count is None:
            self._count = self.provider.device_count()
        return self._count

    def open_device(self, device_id: int) -> None:
        """Make the device current on this thread (its context is created on first use)."""
        self.provider.set_device(device_id)

    def reset_device(self, device_id: int) -> None:
        """Wait for the device; the shared runtime has already freed what it allocated."""
        self.provider.set_device(device_id)
        self.provider.synchronize_device()

    def synchronize_device(self) -> None:
        """Wait for all work on the current device (then report what deferred checks found)."""
        self.provider.synchronize_device()
        for stream in list(self._checks):
            self._drain(stream, report=True)

    # ------------------------------------------------------------------ memory
    def alloc(self, nbytes: int) -> int:
        """Device memory (the vendor allocator aligns to at least 256 bytes)."""
        return self.provider.malloc(nbytes)

    def free(self, address: int) -> None:
        """Release device memory."""
        self.provider.free(address)

    def alloc_host(self, nbytes: int) -> int:
        """Page-locked host memory, usable by async copies."""
        address = self.provider.malloc_host(nbytes)
        with self._lock:
            bisect.insort(self._pinned_starts, address)
            self._pinned[address] = nbytes
        return address

    def free_host(self, address: int) -> None:
        """Release page-locked host memory."""
        with self._lock:
            self._pinned.pop(address, None)
            i = bisect.bisect_left(self._pinned_starts, address)
            if i < len(self._pinned_starts) and self._pinned_starts[i] == address:
                self._pinned_starts.pop(i)
        self.provider.free_host(address)

    def is_pinned(self, address: int) -> bool:
        """True when ``address`` lies in page-locked memory from :meth:`alloc_host`."""
        with self._lock:
            i = bisect.bisect_right(self._pinned_starts, address) - 1
            if i < 0:
                return False
            start = self._pinned_starts[i]
            return address < start + self._pinned[start]

    def copy(self, dst: int, src: int, nbytes: int, direction: CopyDirection, stream: object | None) -> None:
        """Synchronous copy, or one enqueued on ``stream``."""
        if stream is None:
            self._sync_copy(dst, src, nbytes, direction)
        else:
            self.provider.memcpy(dst, src, nbytes, direction, handle(stream))

    def memset(self, dst: int, value: int, nbytes: int, stream: object | None) -> None:
        """Fill device bytes (or page-locked host bytes) with ``value & 0xFF``."""
        if self.is_pinned(dst):
            if stream is not None:
                if handle(stream) in self._capture_of:
                    raise AclError(
                        RtErrorCode.ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                        "an asynchronous memset of page-locked host memory cannot be captured on rocm "
                        "(it is a host write); fill device memory, or set the host memory outside the capture",
                    )
                self.provider.stream_synchronize(handle(stream))
            ctypes.memset(dst, value & 0xFF, nbytes)
            return
        if stream is None and self._capture_of:
            side = self._side_stream()
            self.provider.memset(dst, value, nbytes, side)
            self.provider.stream_synchronize(side)
            return
        self.provider.memset(dst, value, nbytes, None if stream is None else handle(stream))

    def _sync_copy(self, dst: int, src: int, nbytes: int, direction: CopyDirection) -> None:
        """A synchronous copy; while a capture runs, on the side stream (never the legacy stream)."""
        if self._capture_of:
            side = self._side_stream()
            self.provider.memcpy(dst, src, nbytes, direction, side)
            self.provider.stream_synchronize(side)
        else:
            self.provider.memcpy(dst, src, nbytes, direction, None)

    def _side_stream(self) -> int:
        """The driver's non-blocking stream (made at first use, kept)."""
        with self._lock:
            if self._side is None:
                self._side = self.provider.stream_create_nonblocking()
            return self._side

    def mem_info(self) -> tuple[int, int]:
        """(free, total) bytes of the current device."""
        return self.provider.mem_info()

    # ------------------------------------------------------------------ streams and events
    def create_stream(self) -> object:
        """A new stream on the current device."""
        return self.provider.stream_create()

    def default_stream(self) -> object:
        """The current device's default stream."""
        return self.provider.default_stream()

    def destroy_stream(self, stream: object) -> None:
        """Release a stream (and the flags of checks nobody synchronised for)."""
        if handle(stream) in self._checks:
            self.provider.stream_synchronize(handle(stream))
            self._drain(handle(stream), report=False)
        self.provider.stream_destroy(handle(stream))

    def synchronize_stream(self, stream: object) -> None:
        """Wait for the stream's work (then report what deferred checks on it found)."""
        self.provider.stream_synchronize(handle(stream))
        self._drain(handle(stream), report=True)

    # ------------------------------------------------------------------ deferred device checks
    def defer_check(self, stream: int, flag: int, message: str) -> None:
        """At ``stream``'s next synchronisation, raise 161002 with ``message`` if the device int at ``flag`` is set.

        ``flag`` is 4 bytes from ``provider.malloc_async(4, stream)``; it is freed then. Ops whose
        argument checks need device data (index values) use this instead of a host round trip.
        On a capturing stream the flag is graph memory: the graph copies it into a persistent slot and
        frees it, and the check belongs to the graph, armed again by every :meth:`graph_launch`.
        """
        capture = self._capture_of.get(stream)
        if capture is None:
            with self._lock:
                self._checks.setdefault(stream, []).append((flag, message, _FREE_ASYNC))
            return
        slot = self.provider.malloc(4)  # persistent: relaxed capture mode allows an allocation here
        try:
            self.provider.memcpy(slot, flag, 4, CopyDirection.DEVICE_TO_DEVICE, stream)
            self.provider.free_async(flag, stream)
        except BaseException:
            self.provider.free(slot)
            raise
        capture.checks.append((slot, message))

    def _drain(self, stream: int, report: bool) -> None:
        with self._lock:
            checks = self._checks.pop(stream, [])
        failed: str | None = None
        for flag, message, release in checks:
            value = ctypes.c_int32(0)
            self._sync_copy(ctypes.addressof(value), flag, 4, CopyDirection.DEVICE_TO_HOST)
            if release == _FREE_ASYNC:
                self.provider.free_async(flag, stream)
            elif release == _FREE:
                self.provider.free(flag)
            if value.value and failed is None:
                failed = message
        if failed is not None and report:
            raise AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, failed)

    # ------------------------------------------------------------------ stream capture
    def capture_unavailable(self) -> str | None:
        """None when the provider captures streams into graphs, else why not."""
        return self.provider.capture_unavailable()

    def capturing(self, stream: int) -> bool:
        """True while ``stream`` records into a capture (its origin or a stream that joined it)."""
        return stream in self._capture_of

    def capture_begin(self, stream: object, mode: CaptureMode) -> None:
        """Run the set-up hooks, then record ``stream`` into a platform graph (relaxed mode: see README)."""
        s = handle(stream)
        for hook in self.before_capture:
            hook()
        self.provider.capture_begin(s)
        with self._lock:
            self._capture_of[s] = _Capture(origin=s, streams={s})

    def capture_end(self, stream: object) -> RocmGraph:
        """End the capture begun on ``stream``; its instantiated graph with the checks it arms."""
        s = handle(stream)
        with self._lock:
            capture = self._capture_of.get(s)
            if capture is None or capture.origin != s:
                raise AclError(
                    RtErrorCode.ACL_ERROR_RT_STREAM_NOT_CAPTURED, f"stream {s:#x} is not the origin of a capture"
                )
            for joined in capture.streams:
                self._capture_of.pop(joined, None)
            for event in [e for e, c in self._event_capture.items() if c is capture]:
                del self._event_capture[event]
        try:
            vendor = self.provider.capture_end(s)
        except BaseException:
            self._free_slots(capture.checks)
            raise
        return RocmGraph(vendor, tuple(capture.checks), s)

    def graph_launch(self, graph: object, stream: object) -> None:
        """Enqueue one replay; its deferred checks are armed on ``stream`` for its next synchronisation."""
        graph = _live(graph)
        s = handle(stream)
        if graph.checks:
            self._settle_pending(graph)
        self.provider.graph_launch(graph.vendor, s)
        if graph.checks:
            with self._lock:
                self._checks.setdefault(s, []).extend((slot, message, _KEEP) for slot, message in graph.checks)

    def _settle_pending(self, graph: RocmGraph) -> None:
        """Report an earlier, unsynchronised replay's checks before a new replay overwrites their slots."""
        slots = {slot for slot, _ in graph.checks}
        with self._lock:
            pending = [s for s, checks in self._checks.items() if any(c[0] in slots for c in checks)]
        for s in pending:
            self.provider.stream_synchronize(s)
            self._drain(s, report=True)

    def graph_destroy(self, graph: object) -> None:
        """Release the platform graph and its check slots.

        Replays already enqueued still complete (the Driver contract): a slot one of them will write is
        handed to that stream's pending checks, read and freed at its synchronisation, so its error
        is still reported.
        """
        graph = _live(graph)
        graph.destroyed = True  # first: a vendor failure below must not let a second destroy free twice
        slots = {slot for slot, _ in graph.checks}
        handed: set[int] = set()  # at most one pending read per slot: graph_launch settles earlier ones
        if slots:
            with self._lock:
                for checks in self._checks.values():
                    for i, (flag, message, release) in enumerate(checks):
                        if flag in slots and release == _KEEP:
                            checks[i] = (flag, message, _FREE)
                            handed.add(flag)
        self.provider.graph_destroy(graph.vendor)
        self._free_slots([c for c in graph.checks if c[0] not in handed])

    def _free_slots(self, checks: list[tuple[int, str]] | tuple[tuple[int, str], ...]) -> None:
        for slot, _message in checks:
            self.provider.free(slot)

    def stream_done(self, stream: object) -> bool:
        """True when the stream has no pending work."""
        return self.provider.stream_query(handle(stream))

    def stream_wait_event(self, stream: object, event: object) -> None:
        """Later work on ``stream`` waits for ``event`` (a capture's event makes ``stream`` join that capture)."""
        self.provider.stream_wait_event(handle(stream), handle(event))
        capture = self._event_capture.get(handle(event))
        if capture is not None:
            with self._lock:
                capture.streams.add(handle(stream))
                self._capture_of[handle(stream)] = capture

    def create_event(self) -> object:
        """A new timing event."""
        return self.provider.event_create()

    def destroy_event(self, event: object) -> None:
        """Release an event."""
        self.provider.event_destroy(handle(event))
        with self._lock:
            self._event_capture.pop(handle(event), None)

    def record_event(self, event: object, stream: object) -> None:
        """Record ``event`` on ``stream`` (on a capturing stream, the event carries the capture)."""
        self.provider.event_record(handle(event), handle(stream))
        with self._lock:
            capture = self._capture_of.get(handle(stream))
            if capture is not None:
                self._event_capture[handle(event)] = capture
            else:
                self._event_capture.pop(handle(event), None)

    def synchronize_event(self, event: object) -> None:
        """Wait for the event's recording."""
        self.provider.event_synchronize(handle(event))

    def event_done(self, event: object) -> bool:
        """True when the recording has completed."""
        return self.provider.event_query(handle(event))

    def elapsed_ms(self, start: object, end: object) -> float:
        """Milliseconds between two completed recordings."""
        return self.provider.event_elapsed_ms(handle(start), handle(end))

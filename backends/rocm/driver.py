"""The acl Driver of the HIP backend: every primitive is one provider call on real device memory.

Async copies need page-locked host memory (``alloc_host`` → cudaMallocHost / hipHostMalloc); the
shared runtime refuses pageable memory for them before the driver sees the call. Streams and events
are the provider's integer handles; a null acl stream is the device's default stream.

Stream capture records into the platform's graphs (CUDA / HIP graphs, relaxed mode). The shared
runtime keeps every aclmdlRI rule; the driver keeps only what the platform needs: which streams a
capture spans (the origin and the streams that joined it through events), the deferred device checks
a graph arms at each replay, and a side stream for its own synchronous copies while a capture runs
(a legacy-stream copy would break the capture of a blocking stream).

A deferred device check is a 4-byte device flag that an op's kernels set when its device data is bad
(:meth:`RocmDriver.check_flag`, :meth:`RocmDriver.defer_check`). Outside a capture each call gets the
next slot of its stream's eager slab (zeroed when the slab is made); the next synchronisation reads the
slots used since the last one with one copy a slab, reports the first set slot whose check was deferred,
zeroes them again only if one was set, and hands the slab out again. Inside a capture the flag is a slot of the
capture's slab: persistent, zero when handed out, only ever set by kernels; the graph owns the slab,
each replay arms it on its stream, and the next synchronisation reads the whole slab with one copy,
reports the first set slot and zeroes the slab again. A replay therefore needs no flag allocation,
zeroing or copy of its own, and never waits for an earlier replay: a failure stays set until it is read.
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


SCRATCH_MIN = 4096
"""Bytes of the smallest stream scratch (requests round up to a power of two)."""

SLAB_SLOTS = 1024
"""Check flags per slab (4 bytes each): a capture (or an eager stream) takes another slab when one is used up."""


@dataclass
class CheckSlab:
    """Persistent, zeroed device flags a capture hands out: slot i at ``base + 4 i`` reports ``messages[i]``."""

    base: int
    messages: list[str] = field(default_factory=list)
    deferred: list[int] = field(default_factory=list)
    """Eager slabs only: per handed-out slot, when its check was deferred (the stream's count; 0: not deferred)."""

    def holds(self, flag: int) -> bool:
        """True when ``flag`` is a slot of this slab that was handed out."""
        return self.base <= flag < self.base + 4 * len(self.messages)


@dataclass
class _EagerSlabs:
    """One eager stream's check slabs: those handing out slots since its last synchronisation, and zeroed spares."""

    active: list[CheckSlab] = field(default_factory=list)
    spare: list[CheckSlab] = field(default_factory=list)
    deferred: int = 0
    """Checks deferred on the stream so far (orders failures as they were deferred: the first one wins)."""


@dataclass
class _Capture:
    """One capture in progress: its origin stream, the streams it spans, the check slabs its graph will own."""

    origin: int
    streams: set[int] = field(default_factory=set)
    slabs: list[CheckSlab] = field(default_factory=list)
    scratch: dict[tuple[int, str], tuple[int, int]] = field(default_factory=dict)
    """Per (captured stream, region): the (address, bytes) of its stream scratch (:meth:`RocmDriver.stream_scratch`)."""
    scratch_all: list[int] = field(default_factory=list)
    """Every scratch allocation the capture made (its graph frees them)."""


@dataclass
class RocmGraph:
    """A captured, instantiated platform graph and the check slabs each replay arms on its stream."""

    vendor: object
    slabs: tuple[CheckSlab, ...]
    origin: int
    destroyed: bool = False
    scratch: tuple[int, ...] = ()
    """The stream scratch its capture allocated (freed with the graph)."""

    @property
    def checks(self) -> tuple[tuple[int, str], ...]:
        """(slot address, message) of every deferred check the graph's replays arm."""
        return tuple((slab.base + 4 * i, m) for slab in self.slabs for i, m in enumerate(slab.messages) if m)


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
        self._eager: dict[int, _EagerSlabs] = {}
        """Per eager stream: its check slabs (:meth:`check_flag`), read at its next synchronisation."""
        self._armed: dict[int, list[RocmGraph]] = {}
        """Per stream: the graphs replayed on it since its last synchronisation (their slabs are read then)."""
        self._scratch: dict[tuple[int, str], tuple[int, int]] = {}
        """Per (eager stream, region): (address, bytes) of its stream scratch (:meth:`stream_scratch`)."""
        self._scratch_old: dict[int, list[int]] = {}
        """Per eager stream: scratch a larger request replaced (freed with the stream)."""
        self._capture_of: dict[int, _Capture] = {}
        self._event_capture: dict[int, _Capture] = {}
        self._side: int | None = None
        self.before_capture: list[Callable[[], None]] = []
        """Run at each capture_begin: host-side set-up (uploads) that must not happen inside a capture."""
        self.prefetcher: Callable[[int, int, int], None] | None = None
        """Enqueues aclrtCmoAsync's prefetch kernel: (address, bytes, stream); the backend sets it."""

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
        with self._lock:
            streams = {*(s for s, e in self._eager.items() if e.active), *self._armed}
        for stream in streams:
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

    def cmo_prefetch(self, address: int, nbytes: int, stream: object) -> None:
        """Enqueue the prefetch kernel on ``stream`` (``ACL_CMO_CONFIG``: :mod:`acl_rocm.prefetch`); capturable."""
        if self.prefetcher is None:
            super().cmo_prefetch(address, nbytes, stream)
            return
        self.prefetcher(address, nbytes, handle(stream))

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
        """Release a stream (and its check slabs, read without reporting: nobody synchronised for them)."""
        if handle(stream) in self._eager or handle(stream) in self._armed:
            self.provider.stream_synchronize(handle(stream))
            self._drain(handle(stream), report=False)
            self._free_eager(handle(stream))
        if any(key[0] == handle(stream) for key in self._scratch):
            self.provider.stream_synchronize(handle(stream))
            self._free_scratch(handle(stream))
        self.provider.stream_destroy(handle(stream))

    def synchronize_stream(self, stream: object) -> None:
        """Wait for the stream's work (then report what deferred checks on it found)."""
        self.provider.stream_synchronize(handle(stream))
        self._drain(handle(stream), report=True)

    # ------------------------------------------------------------------ deferred device checks
    def check_flag(self, stream: int) -> int:
        """A zeroed 4-byte device flag for one call's device checks, to pass to :meth:`defer_check` (or drop_check).

        Outside a capture: the next slot of the stream's eager slab (zero; read, and zeroed again if set, at
        the stream's next synchronisation, then handed out again). On a capturing stream: the next slot of the
        capture's slab (already zero, persistent; nothing is recorded into the graph for it).
        """
        capture = self._capture_of.get(stream)
        if capture is None:
            return self._eager_flag(stream)
        if not capture.slabs or len(capture.slabs[-1].messages) == SLAB_SLOTS:
            base = self.provider.malloc(4 * SLAB_SLOTS)  # persistent: relaxed capture mode allows it
            try:
                self._sync_memset(base, 4 * SLAB_SLOTS)
            except BaseException:
                self.provider.free(base)
                raise
            capture.slabs.append(CheckSlab(base))
        slab = capture.slabs[-1]
        slab.messages.append("")  # handed out; a slot whose call never defers its check reports nothing
        return slab.base + 4 * (len(slab.messages) - 1)

    def defer_check(self, stream: int, flag: int, message: str) -> None:
        """At ``stream``'s next synchronisation, raise 161002 with ``message`` if the device int at ``flag`` is set.

        ``flag`` comes from :meth:`check_flag` on the same stream. Ops whose argument checks need device
        data (index values) use this instead of a host round trip. On a capturing stream the check
        belongs to the graph, armed again by every :meth:`graph_launch`.
        """
        capture = self._capture_of.get(stream)
        if capture is None:
            with self._lock:
                eager = self._eager.get(stream)
                slab = None if eager is None else next((s for s in reversed(eager.active) if s.holds(flag)), None)
                if eager is not None and slab is not None:
                    eager.deferred += 1
                    slab.messages[(flag - slab.base) // 4] = message
                    slab.deferred[(flag - slab.base) // 4] = eager.deferred
                    return
            raise AclError(RtErrorCode.ACL_ERROR_RT_PARAM_INVALID, "a check's flag must come from check_flag")
        for slab in capture.slabs:
            if slab.holds(flag):
                slab.messages[(flag - slab.base) // 4] = message
                return
        raise AclError(RtErrorCode.ACL_ERROR_RT_PARAM_INVALID, "a captured check's flag must come from check_flag")

    def drop_check(self, stream: int, flag: int) -> None:
        """Give back a flag from :meth:`check_flag` whose call failed before deferring its check.

        Nothing to do: the slot reports nothing (no message), and the stream's next synchronisation zeroes it
        if a kernel set it before handing it out again (a capture's slot stays unused in its graph's slab).
        """

    def _eager_flag(self, stream: int) -> int:
        """The next zero slot of ``stream``'s eager slabs (a spare slab, or a new one, when the last is full)."""
        while True:
            with self._lock:
                eager = self._eager.setdefault(stream, _EagerSlabs())
                if not eager.active or len(eager.active[-1].messages) == SLAB_SLOTS:
                    if eager.spare:
                        eager.active.append(eager.spare.pop())
                if eager.active and len(eager.active[-1].messages) < SLAB_SLOTS:
                    slab = eager.active[-1]
                    slab.messages.append("")  # handed out; a slot whose call never defers its check reports nothing
                    slab.deferred.append(0)
                    return slab.base + 4 * (len(slab.messages) - 1)
            base = self.provider.malloc(4 * SLAB_SLOTS)
            try:
                self._zero(base, 4 * SLAB_SLOTS, stream)
            except BaseException:
                self.provider.free(base)
                raise
            with self._lock:
                self._eager.setdefault(stream, _EagerSlabs()).spare.append(CheckSlab(base))

    def _zero(self, address: int, nbytes: int, stream: int) -> None:
        """Zero device bytes ordered before ``stream``'s later work (synchronously, on the side stream, while a
        capture runs: a legacy-stream memset would break it)."""
        if self._capture_of:
            self._sync_memset(address, nbytes)
        else:
            self.provider.memset(address, 0, nbytes, stream)

    def _free_eager(self, stream: int) -> None:
        """Free an eager stream's check slabs (the caller has synchronised and drained the stream)."""
        with self._lock:
            eager = self._eager.pop(stream, None)
        for slab in [] if eager is None else eager.active + eager.spare:
            self.provider.free(slab.base)

    def stream_scratch(self, stream: int, nbytes: int, region: str = "") -> int:
        """Persistent device bytes (zeroed once) that the kernels enqueued on ``stream`` share, one after another.

        For ops whose kernels keep counters there and leave them zero when done (a kernel's last block resets
        what it counted), and scratch they overwrite before reading: the launches of one stream never overlap,
        so one buffer per stream serves every such launch on it. On a capturing stream the buffer belongs to
        the capture (per stream it spans; replays of one graph never overlap either) and is freed with its
        graph; an eager stream's buffer is freed when the stream is destroyed. The first ``nbytes`` only are
        the caller's; a larger request than the stream's buffer takes a new, larger one (the old one is kept
        until then: launches still queued may use it).

        Each ``region`` is a buffer of its own: kernels that keep counters where another family's kernels
        leave data (the arg-extremum split path's candidates over decode attention's counters) name
        different regions, so no launch finds another's data where it expects a zero counter.
        """
        key = (stream, region)
        with self._lock:
            capture = self._capture_of.get(stream)
            table = self._scratch if capture is None else capture.scratch
            have = table.get(key)
            if have is not None and have[1] >= nbytes:
                return have[0]
        size = max(SCRATCH_MIN, 1 << max(0, nbytes - 1).bit_length())
        base = self.provider.malloc(size)  # a capture is relaxed: allocation is allowed while it records
        try:
            if capture is None:
                self.provider.memset(base, 0, size, stream)  # ordered before every launch that uses it
            else:
                self._sync_memset(base, size)  # on the side stream: nothing recorded into the graph
        except BaseException:
            self.provider.free(base)
            raise
        with self._lock:
            if capture is None:
                if have is not None:
                    self._scratch_old.setdefault(stream, []).append(have[0])
            else:
                capture.scratch_all.append(base)
            table[key] = (base, size)
        return base

    def _free_scratch(self, stream: int) -> None:
        """Free an eager stream's scratch (the caller has synchronised the stream)."""
        with self._lock:
            have = [self._scratch.pop(key)[0] for key in [k for k in self._scratch if k[0] == stream]]
            old = self._scratch_old.pop(stream, [])
        for base in old + have:
            self.provider.free(base)

    def _sync_memset(self, address: int, nbytes: int) -> None:
        """Zero device bytes now (on the side stream while a capture runs, never the legacy stream)."""
        self.memset(address, 0, nbytes, None)

    def _drain(self, stream: int, report: bool) -> None:
        """Read (and release) the checks armed on ``stream``, which the caller has synchronised."""
        with self._lock:
            eager = self._eager.get(stream)
            used: list[CheckSlab] = []
            if eager is not None:  # detached: slots another thread takes meanwhile come from another slab
                used, eager.active = eager.active, []
            graphs = self._armed.pop(stream, [])
        failed: str | None = None
        first = 0
        try:
            for slab in used:
                n = len(slab.messages)
                values = (ctypes.c_int32 * n)()
                self._sync_copy(ctypes.addressof(values), slab.base, 4 * n, CopyDirection.DEVICE_TO_HOST)
                set_at = [i for i in range(n) if values[i]]
                if set_at:  # set slots (dropped ones too) are zeroed before the slab is handed out again
                    self._zero(slab.base, 4 * n, stream)
                    for i in set_at:
                        if slab.deferred[i] and (not first or slab.deferred[i] < first):
                            first, failed = slab.deferred[i], slab.messages[i]
                slab.messages.clear()
                slab.deferred.clear()
        finally:
            if used:
                with self._lock:
                    home = self._eager.setdefault(stream, _EagerSlabs())
                    home.spare.extend(slab for slab in reversed(used) if not slab.messages)
                    home.active[:0] = [slab for slab in used if slab.messages]  # a failed read: read again next time
        for graph in graphs:
            for slab in graph.slabs:
                n = len(slab.messages)
                values = (ctypes.c_int32 * n)()
                self._sync_copy(ctypes.addressof(values), slab.base, 4 * n, CopyDirection.DEVICE_TO_HOST)
                hit = next((i for i in range(n) if values[i]), None)
                if hit is not None:
                    self._sync_memset(slab.base, 4 * n)
                    if failed is None:
                        failed = slab.messages[hit]
            if graph.destroyed:
                self._free_unarmed(graph)
        if failed is not None and report:
            raise AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, failed)

    def _free_unarmed(self, graph: RocmGraph) -> None:
        """Free a destroyed graph's slabs once no stream's next synchronisation still reads them."""
        with self._lock:
            if any(graph in armed for armed in self._armed.values()):
                return
        for slab in graph.slabs:
            self.provider.free(slab.base)
        for base in graph.scratch:
            self.provider.free(base)
        graph.scratch = ()

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
            for slab in capture.slabs:
                self.provider.free(slab.base)
            for base in capture.scratch_all:
                self.provider.free(base)
            raise
        return RocmGraph(vendor, tuple(capture.slabs), s, scratch=tuple(capture.scratch_all))

    def graph_launch(self, graph: object, stream: object) -> None:
        """Enqueue one replay; its check slabs are armed on ``stream`` for its next synchronisation."""
        graph = _live(graph)
        s = handle(stream)
        self.provider.graph_launch(graph.vendor, s)
        if graph.slabs:
            with self._lock:
                armed = self._armed.setdefault(s, [])
                if not any(g is graph for g in armed):
                    armed.append(graph)

    def graph_destroy(self, graph: object) -> None:
        """Release the platform graph, and its check slabs once no pending synchronisation reads them.

        Replays already enqueued still complete (the Driver contract): a stream they run on still reads
        the slabs at its next synchronisation, so their failures are still reported, and frees them then.
        """
        graph = _live(graph)
        graph.destroyed = True  # first: a vendor failure below must not let a second destroy free twice
        self.provider.graph_destroy(graph.vendor)
        self._free_unarmed(graph)

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

"""The reference device: a private address space of NumPy buffers, and streams with deferred queues.

Device addresses live at and above ``DEVICE_BASE`` (2**62), a range no x86-64 or AArch64 process can
map, so a device pointer can never be mistaken for host memory. Addresses are never reused, and
allocations are separated by guard gaps, so stale and stray pointers stay detectable.

Work enqueued on a stream (async copies and memsets, operator launches, event recordings, waits) is
kept in that stream's queue and runs, in order, only when the host synchronises: at
``synchronize_stream``, ``synchronize_event`` or ``synchronize_device``, when a query finds it
pending, when memory is freed, or when a stream waits on an event of a stream whose recording has
not run. A program that reads results without synchronising therefore sees the stale bytes a GPU or
an NPU would show it. Synchronous copies and memsets run at once and wait for no stream (CANN:
aclrtMemcpy has no implicit stream synchronisation). Events stamp the host clock when their
recording runs, so elapsed times measure the work between them. ``ACL_REFERENCE_EAGER=1`` runs every
task when it is enqueued instead (the old behaviour). docs/RUNTIME.md has the whole model.
"""

from __future__ import annotations

import bisect
import ctypes
import itertools
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from acl_core.errors import AclCoreError, AclError, AclnnError, AclnnStatus, RtErrorCode
from acl_core.spec.runtime import CopyDirection, Driver

DEVICE_BASE = 1 << 62
ALIGN = 64
GUARD = 4096
DEFAULT_DEVICES = 8
DEFAULT_MEMORY = 64 << 30
EAGER_ENV = "ACL_REFERENCE_EAGER"
"""Set to 1 to run stream work when it is enqueued (no deferred queues)."""


@dataclass(eq=False)
class Task:
    """One unit of stream work; ``timestamp_ns`` is when it ran (what an event recording reports)."""

    stream: ReferenceStream
    run: Callable[[], None]
    what: str
    seq: int = 0
    """Global enqueue order: synchronize_device runs the tasks of several streams in this order."""
    done: bool = False
    timestamp_ns: int | None = None
    event: ReferenceEvent | None = None
    """For an event recording: its event (a replay of a captured recording re-records it)."""


@dataclass(eq=False)
class Recording:
    """A capture in progress: the tasks enqueued on its streams, in enqueue order, none of them run."""

    tasks: list[Task] = field(default_factory=list)


@dataclass(frozen=True, eq=False)
class ReferenceGraph:
    """What capture_end returns: the captured tasks, replayed in order by graph_launch."""

    tasks: tuple[Task, ...]


@dataclass(eq=False)
class ReferenceStream:
    """A reference stream: a FIFO of tasks that run at synchronisation, and the first error one raised."""

    device: int
    default: bool = False
    queue: deque[Task] = field(default_factory=deque)
    error: BaseException | None = None
    recording: Recording | None = None
    """While capturing (or joined to a capture through an event): where enqueued tasks go instead."""


@dataclass(eq=False)
class ReferenceEvent:
    """A reference event: the task of its latest recording (None: never recorded)."""

    device: int
    latest: Task | None = None

    @property
    def timestamp_ns(self) -> int | None:
        """Host time (ns) at which the latest recording ran, None while it has not."""
        return None if self.latest is None else self.latest.timestamp_ns


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value else default


class ReferenceDriver(Driver):
    """Device primitives over host memory; see the module docstring."""

    def __init__(self) -> None:
        self.devices = _env_int("ACL_REFERENCE_DEVICES", DEFAULT_DEVICES)
        self.capacity = _env_int("ACL_REFERENCE_MEMORY", DEFAULT_MEMORY)
        self._lock = threading.Lock()
        self._next = DEVICE_BASE
        self._starts: list[int] = []
        self._buffers: dict[int, np.ndarray] = {}
        self._owner: dict[int, int] = {}
        self._used: dict[int, int] = {}
        self._host: dict[int, np.ndarray] = {}
        self._local = threading.local()
        self._default_streams = {d: ReferenceStream(d, default=True) for d in range(self.devices)}
        self._streams: list[ReferenceStream] = list(self._default_streams.values())
        self._queue_lock = threading.RLock()
        self._seq = itertools.count()
        self.eager = os.environ.get(EAGER_ENV, "") not in ("", "0")
        """True when tasks run as they are enqueued (``ACL_REFERENCE_EAGER=1``)."""
        self.views: dict[tuple[object, ...], np.ndarray] = {}
        """NumPy views of tensors by (address, layout); cleared whenever memory is freed."""

    # ------------------------------------------------------------------ devices
    def device_count(self) -> int:
        """Virtual devices (``ACL_REFERENCE_DEVICES``, default 8, like one Ascend server)."""
        return self.devices

    def open_device(self, device_id: int) -> None:
        """Remember the thread's current device."""
        self._local.device = device_id

    def reset_device(self, device_id: int) -> None:
        """Nothing to release beyond what the shared runtime frees."""

    @property
    def current(self) -> int:
        """The calling thread's current device."""
        return getattr(self._local, "device", 0)

    # ------------------------------------------------------------------ memory
    def alloc(self, nbytes: int) -> int:
        """Reserve ``nbytes`` at a fresh 64-byte aligned address on the current device."""
        device = self.current
        with self._lock:
            used = self._used.get(device, 0)
            if used + nbytes > self.capacity:
                raise AclError(
                    RtErrorCode.ACL_ERROR_RT_MEMORY_ALLOCATION,
                    f"out of device memory: {nbytes} bytes asked, {self.capacity - used} of {self.capacity} free",
                )
            try:
                buffer = np.empty(nbytes, dtype=np.uint8)
            except MemoryError:
                raise AclError(
                    RtErrorCode.ACL_ERROR_RT_MEMORY_ALLOCATION, f"host memory exhausted for {nbytes} bytes"
                ) from None
            address = self._next
            self._next = (address + nbytes + GUARD + ALIGN - 1) // ALIGN * ALIGN
            bisect.insort(self._starts, address)
            self._buffers[address] = buffer
            self._owner[address] = device
            self._used[device] = used + nbytes
            return address

    def free(self, address: int) -> None:
        """Drop the buffer at ``address``, after running the pending work of its device (like cudaFree)."""
        owner = self._owner.get(address)
        if owner is not None:
            self._drain_device(owner)
        with self._lock:
            self.views.clear()
            buffer = self._buffers.pop(address)
            self._starts.pop(bisect.bisect_left(self._starts, address))
            device = self._owner.pop(address)
            self._used[device] -= buffer.nbytes

    def alloc_host(self, nbytes: int) -> int:
        """Host memory at a 64-byte aligned real address (kept alive until free_host); MemoryError when none fits."""
        try:
            raw = np.empty(nbytes + ALIGN, dtype=np.uint8)
        except ValueError:  # NumPy's "Maximum allowed dimension exceeded": a size no host buffer can have
            raise MemoryError(f"no host buffer holds {nbytes} bytes") from None
        shift = (-raw.ctypes.data) % ALIGN
        address = raw.ctypes.data + shift
        self._host[address] = raw
        return address

    def free_host(self, address: int) -> None:
        """Release host memory from :meth:`alloc_host`."""
        self._host.pop(address)

    def device_bytes(self, address: int, nbytes: int) -> np.ndarray:
        """A writable uint8 view of device bytes [address, address + nbytes)."""
        i = bisect.bisect_right(self._starts, address) - 1
        if i < 0:
            raise AclError(RtErrorCode.ACL_ERROR_RT_PARAM_INVALID, f"{address:#x} is not reference device memory")
        start = self._starts[i]
        buffer = self._buffers[start]
        offset = address - start
        if offset + nbytes > buffer.nbytes:
            raise AclError(RtErrorCode.ACL_ERROR_RT_PARAM_INVALID, f"{address:#x}+{nbytes} runs past its allocation")
        return buffer[offset : offset + nbytes]

    def device_buffer(self, address: int) -> tuple[np.ndarray, int]:
        """The whole allocation holding ``address`` and the byte offset of ``address`` in it."""
        i = bisect.bisect_right(self._starts, address) - 1
        if i < 0:
            raise AclError(RtErrorCode.ACL_ERROR_RT_PARAM_INVALID, f"{address:#x} is not reference device memory")
        start = self._starts[i]
        return self._buffers[start], address - start

    @staticmethod
    def host_bytes(address: int, nbytes: int) -> np.ndarray:
        """A writable uint8 view of host bytes (the shared runtime has vetted the range)."""
        return np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(address))

    def _bytes(self, address: int, nbytes: int, on_device: bool) -> np.ndarray:
        return self.device_bytes(address, nbytes) if on_device else self.host_bytes(address, nbytes)

    def copy(self, dst: int, src: int, nbytes: int, direction: CopyDirection, stream: object | None) -> None:
        """Copy now (``stream`` None: waits for no stream) or enqueue the copy on ``stream``."""
        src_dev = direction in (CopyDirection.DEVICE_TO_HOST, CopyDirection.DEVICE_TO_DEVICE)
        dst_dev = direction in (CopyDirection.HOST_TO_DEVICE, CopyDirection.DEVICE_TO_DEVICE)

        def run() -> None:
            np.copyto(self._bytes(dst, nbytes, dst_dev), self._bytes(src, nbytes, src_dev))

        self.enqueue(stream, run, f"copy of {nbytes} bytes {direction.name}")

    def memset(self, dst: int, value: int, nbytes: int, stream: object | None) -> None:
        """Fill bytes now (``stream`` None) or enqueue the fill on ``stream``."""

        def run() -> None:
            target = self.device_bytes(dst, nbytes) if dst >= DEVICE_BASE else self.host_bytes(dst, nbytes)
            target.fill(value & 0xFF)

        self.enqueue(stream, run, f"memset of {nbytes} bytes")

    def cmo_prefetch(self, address: int, nbytes: int, stream: object) -> None:
        """Enqueue a prefetch on ``stream``: a task that changes nothing (there is no cache) but is ordered,
        captured and replayed like any task; a replay after the memory was freed reports 107000 at synchronisation."""

        def run() -> None:
            self.device_bytes(address, nbytes)  # the range still exists when the task runs; nothing is read

        self.enqueue(stream, run, f"prefetch of {nbytes} bytes")

    def mem_info(self) -> tuple[int, int]:
        """(free, total) of the current device's budget (``ACL_REFERENCE_MEMORY``, default 64 GiB)."""
        return self.capacity - self._used.get(self.current, 0), self.capacity

    # ------------------------------------------------------------------ the deferred queues
    def enqueue(self, stream: object | None, run: Callable[[], None], what: str) -> Task:
        """Append ``run`` to ``stream``'s queue; run it now when ``stream`` is None, in eager mode, or inside a task.

        Run now, its error propagates to the caller; queued, the first error of a stream is raised
        by the stream's (or the device's) next synchronisation, after the rest of its work has run.
        """
        s = None if stream is None else _stream(stream)
        task = Task(s or self._default_streams[self.current], run, what, next(self._seq))
        if s is not None and s.recording is not None:  # captured: kept for replay, never run now
            s.recording.tasks.append(task)
            return task
        if s is None or self.eager or getattr(self._local, "in_task", False):
            task.timestamp_ns = time.perf_counter_ns()
            run()
            task.done = True
            return task
        with self._queue_lock:
            s.queue.append(task)
        return task

    def _run_task(self, task: Task) -> None:
        self._local.in_task = True
        try:
            task.timestamp_ns = time.perf_counter_ns()
            task.run()
        except Exception as exc:  # a kernel's failure surfaces at synchronisation, as on a device
            if task.stream.error is None:
                if not isinstance(exc, AclCoreError):  # a broken kernel: an internal error, never a raw exception
                    wrapped = AclnnError(AclnnStatus.ACLNN_ERR_INNER, f"a task raised {type(exc).__name__}: {exc}")
                    wrapped.__cause__ = exc
                    exc = wrapped
                task.stream.error = exc
        finally:
            task.done = True

    def _run(self, stream: ReferenceStream, until: Task | None = None) -> None:
        """Run ``stream``'s tasks in order, all of them or up to and including ``until``."""
        with self._queue_lock:
            nested = getattr(self._local, "in_task", False)
            try:
                while stream.queue and not (until is not None and until.done):
                    self._run_task(stream.queue.popleft())
            finally:
                self._local.in_task = nested

    def run_pending(self, stream: object) -> None:
        """Run every task queued on ``stream`` (for engines that must read what earlier work wrote).

        Inside a task (a replayed or deferred collective) the work before it has already run, and
        what is queued comes after it: nothing runs.
        """
        if getattr(self._local, "in_task", False):
            return
        self._run(_stream(stream))

    def capturing(self, stream: object | None) -> bool:
        """True when ``stream`` records into a capture (what is enqueued there runs only when replayed)."""
        return stream is not None and _stream(stream).recording is not None

    @staticmethod
    def _raise_error(stream: ReferenceStream) -> None:
        error, stream.error = stream.error, None
        if error is not None:
            raise error

    def _drain_device(self, device: int) -> list[ReferenceStream]:
        """Run every queued task of ``device``'s streams in global enqueue order (as a device would roughly)."""
        with self._queue_lock:
            streams = [s for s in self._streams if s.device == device]
            while pending := [s for s in streams if s.queue]:
                first = min(pending, key=lambda s: s.queue[0].seq)
                self._run(first, until=first.queue[0])
        return streams

    # ------------------------------------------------------------------ streams and events
    def create_stream(self) -> object:
        """A new stream with an empty queue."""
        stream = ReferenceStream(self.current)
        with self._queue_lock:
            self._streams.append(stream)
        return stream

    def default_stream(self) -> object:
        """The current device's default stream."""
        return self._default_streams[self.current]

    def destroy_stream(self, stream: object) -> None:
        """Forget the stream (the shared runtime synchronised it first)."""
        s = _stream(stream)
        with self._queue_lock:
            self._run(s)
            self._streams.remove(s)

    def synchronize_stream(self, stream: object) -> None:
        """Run the stream's queue; raise the first error one of its tasks raised."""
        s = _stream(stream)
        self._run(s)
        self._raise_error(s)

    def synchronize_device(self) -> None:
        """Run the queue of every stream of the current device; raise the first error found."""
        for s in self._drain_device(self.current):
            self._raise_error(s)

    def stream_done(self, stream: object) -> bool:
        """False while work is queued (that work then runs, so it completes "later", as on a device)."""
        s = _stream(stream)
        if not s.queue:
            return True
        self._run(s)
        return False

    def stream_wait_event(self, stream: object, event: object) -> None:
        """Later work on ``stream`` runs only after ``event``'s latest recording has run."""
        recording = _event(event).latest
        if recording is None or recording.done:
            return
        waiter = _stream(stream)
        if recording.stream.recording is not None and any(t is recording for t in recording.stream.recording.tasks):
            # an event recorded inside a capture: the waiting stream joins it (its tasks are replayed
            # in one enqueue order with the capture's, which keeps every dependency)
            waiter.recording = recording.stream.recording
            return

        def wait() -> None:
            self._run(recording.stream, until=recording)

        self.enqueue(stream, wait, "stream wait on an event")

    def create_event(self) -> object:
        """A new event."""
        return ReferenceEvent(self.current)

    def destroy_event(self, event: object) -> None:
        """Nothing to release (a pending recording still runs with its stream)."""

    def record_event(self, event: object, stream: object) -> None:
        """Enqueue a recording; it stamps the host clock when it runs."""
        e = _event(event)
        e.latest = self.enqueue(_stream(stream), _nothing, "event record")
        e.latest.event = e

    def synchronize_event(self, event: object) -> None:
        """Run the recording's stream up to the recording; raise an error of that stream's earlier work."""
        recording = _event(event).latest
        if recording is None:
            return
        self._run(recording.stream, until=recording)
        self._raise_error(recording.stream)

    def event_done(self, event: object) -> bool:
        """True once the latest recording has run; a pending one runs now and reports False this once."""
        recording = _event(event).latest
        if recording is None or recording.done:
            return True
        self._run(recording.stream, until=recording)
        return False

    # ------------------------------------------------------------------ stream capture
    def capture_begin(self, stream: object, mode: object) -> None:
        """From now on ``stream``'s tasks (and those of streams that join through its events) are recorded."""
        s = _stream(stream)
        if s.recording is not None:
            raise AclError(RtErrorCode.ACL_ERROR_RT_STREAM_CAPTURED, "the reference stream is already capturing")
        s.recording = Recording()

    def capture_end(self, stream: object) -> object:
        """Stop recording on ``stream`` and every stream that joined it; the recorded tasks, in order."""
        s = _stream(stream)
        recording = s.recording
        if recording is None:
            raise AclError(RtErrorCode.ACL_ERROR_RT_STREAM_NOT_CAPTURED, "the reference stream is not capturing")
        with self._queue_lock:
            for other in self._streams:
                if other.recording is recording:
                    other.recording = None
        s.recording = None
        return ReferenceGraph(tuple(recording.tasks))

    def graph_launch(self, graph: object, stream: object) -> None:
        """Enqueue the graph's tasks on ``stream``, in capture order; each reads device memory when it runs."""
        if not isinstance(graph, ReferenceGraph):
            raise AclError(RtErrorCode.ACL_ERROR_RT_PARAM_INVALID, f"{graph!r} is not a reference graph")
        for captured in graph.tasks:
            task = self.enqueue(stream, captured.run, captured.what)
            if captured.event is not None:
                captured.event.latest = task
                task.event = captured.event

    def graph_destroy(self, graph: object) -> None:
        """Nothing to release: replays already enqueued hold their own tasks."""

    def elapsed_ms(self, start: object, end: object) -> float:
        """Milliseconds between the host times at which two recordings ran."""
        t0, t1 = _event(start).timestamp_ns, _event(end).timestamp_ns
        if t0 is None or t1 is None:
            raise AclError(RtErrorCode.ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID, "event was never recorded or has not run")
        return (t1 - t0) / 1e6


def _nothing() -> None:
    """An event recording's work: none beyond its timestamp."""


def _stream(stream: object) -> ReferenceStream:
    if not isinstance(stream, ReferenceStream):
        raise AclError(RtErrorCode.ACL_ERROR_RT_PARAM_INVALID, f"{stream!r} is not a reference stream")
    return stream


def _event(event: object) -> ReferenceEvent:
    if not isinstance(event, ReferenceEvent):
        raise AclError(RtErrorCode.ACL_ERROR_RT_PARAM_INVALID, f"{event!r} is not a reference event")
    return event

"""Stream capture (aclmdlRI*): every capture rule once, for every backend, over the Driver's recorder.

A capture turns what a stream enqueues between ``aclmdlRICaptureBegin`` and ``aclmdlRICaptureEnd``
into a model running instance. The driver only records and replays (``Driver.capture_begin`` /
``capture_end`` / ``graph_launch`` / ``graph_destroy``); this module keeps the state and the rules:
which stream captures into which model, streams that joined through events and whether they
rejoined, what each mode refuses on which thread, task groups and their updates, and the task log
(`aclmdlRIDebugPrint`, the update check). A model is an ordered list of driver graphs
("segments"): a task group closes the current segment and becomes a segment of its own, so an
update (TaskUpdateBegin/End) captures a replacement for that one segment and swaps it in.
docs/RUNTIME.md lists each rule and each code chosen where CANN leaves it open.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from acl_core.errors import AclError, AclErrorCode, RtErrorCode
from acl_core.runtime.c_args import HANDLE, CEnum, Handle, Int32, acl_entry
from acl_core.spec.runtime import CaptureMode, CaptureStatus

if TYPE_CHECKING:
    from acl_core.runtime.runtime import Runtime

_RELAXED = CaptureMode.ACL_MODEL_RI_CAPTURE_MODE_RELAXED
_GLOBAL = CaptureMode.ACL_MODEL_RI_CAPTURE_MODE_GLOBAL
_POLL_S = 0.0005


@dataclass(frozen=True)
class CapturedTask:
    """One entry of a capture's task log: the stream handle it was enqueued on and what it is."""

    stream: int
    kind: str


@dataclass
class _Segment:
    graph: object
    tasks: list[CapturedTask]
    group: int | None = None


@dataclass
class _Model:
    handle: int
    device: int
    segments: list[_Segment] = field(default_factory=list)
    capturing: bool = True
    sync_stream: object | None = None


@dataclass
class _Recording:
    """What a stream records into: a capture (origin and joined streams) or a task-group update."""

    model: _Model
    origin: int
    mode: CaptureMode
    thread: int
    log: list[CapturedTask] = field(default_factory=list)
    counts: dict[int, int] = field(default_factory=dict)
    joined: set[int] = field(default_factory=set)
    rejoined: set[int] = field(default_factory=set)
    group: int | None = None
    segment: int = 0
    """How many segments this capture has closed: an event recorded in an earlier one is not joinable."""
    invalidated: str | None = None
    update_of: int | None = None
    """For an update: the task group whose segment it replaces."""


@dataclass
class _EventMark:
    recording: _Recording
    stream: int
    count: int
    segment: int


def _code(code: RtErrorCode, message: str) -> AclError:
    return AclError(code, message)


def _mode(value: int) -> CaptureMode:
    try:
        return CaptureMode(value)
    except ValueError:
        raise _code(
            RtErrorCode.ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT,
            f"capture mode {value} is not an aclmdlRICaptureMode (GLOBAL=0, THREAD_LOCAL=1, RELAXED=2)",
        ) from None


class CaptureRules:
    """The capture state of one runtime and the checks its other entry points consult."""

    def __init__(self, runtime: Runtime) -> None:
        self._rt = runtime
        self.recording: dict[int, _Recording] = {}
        """Stream handle -> what it records into; empty when nothing captures (the hot-path test)."""
        self.models: dict[int, _Model] = {}
        self.groups: dict[int, tuple[_Model, int]] = {}
        """Task-group handle -> (model, segment index)."""
        self.events: dict[int, _EventMark] = {}
        """Event handle -> the capture its latest recording was captured into."""
        self._thread = threading.local()
        self.refused_ops: Callable[[], tuple[str, ...]] = tuple

    # ----------------------------------------------------------------- hooks for the runtime
    def thread_mode(self) -> CaptureMode:
        """This thread's capture interaction mode (aclmdlRICaptureThreadExchangeMode; GLOBAL by default)."""
        return getattr(self._thread, "mode", _GLOBAL)

    def check_unsafe(self, what: str) -> None:
        """Refuse a capture-unsafe call (sync memcpy/memset, async copy from pageable memory) as the modes say.

        As CUDA's interaction modes: a thread in RELAXED mode may; in THREAD_LOCAL mode it may not
        while a capture it began (not RELAXED) is active; in GLOBAL mode, not while that holds or
        any other thread's GLOBAL capture is active.
        """
        if not self.recording:
            return
        mine = threading.get_ident()
        mode = self.thread_mode()
        if mode is _RELAXED:
            return
        for rec in self._captures():
            if (rec.thread == mine and rec.mode is not _RELAXED) or (
                mode is _GLOBAL and rec.thread != mine and rec.mode is _GLOBAL
            ):
                raise _code(
                    RtErrorCode.ACL_ERROR_RT_CAPTURE_MODE_BLOCK_ASYNC,
                    f"{what} is not allowed while stream {rec.origin:#x} captures in mode {rec.mode.name} "
                    f"(this thread's mode is {mode.name})",
                )

    def _captures(self) -> list[_Recording]:
        seen: dict[int, _Recording] = {}
        for rec in self.recording.values():
            if rec.update_of is None:
                seen[id(rec)] = rec
        return list(seen.values())

    def check_blocking(self, stream: object, what: str) -> None:
        """A call that waits for a capturing stream: 107041, and the capture is invalidated."""
        rec = self.recording.get(HANDLE.convert("stream", stream))
        if rec is not None:
            rec.invalidated = rec.invalidated or what
            raise _code(
                RtErrorCode.ACL_ERROR_RT_CAPTURE_MODE_BLOCK_ASYNC,
                f"{what} waits for a stream that is capturing; the capture is invalidated",
            )

    def check_device_blocking(self, device: int, what: str) -> None:
        """synchronize_device while a stream of ``device`` captures: 107041 (the captures stay valid)."""
        for handle in self.recording:
            s = self._rt._streams.get(handle)
            if s is not None and s.device == device:
                raise _code(
                    RtErrorCode.ACL_ERROR_RT_CAPTURE_MODE_BLOCK_ASYNC,
                    f"{what} would wait for stream {handle:#x}, which is capturing",
                )

    def check_destroy_stream(self, stream: int) -> None:
        """A capturing stream cannot be destroyed (107027)."""
        if stream in self.recording:
            raise _code(RtErrorCode.ACL_ERROR_RT_STREAM_CAPTURED, f"stream {stream:#x} is capturing; end it first")

    def check_event_usable(self, event: int, what: str) -> None:
        """An event whose latest recording was captured has no host-visible completion (107028)."""
        if event in self.events:
            raise _code(
                RtErrorCode.ACL_ERROR_RT_EVENT_CAPTURED,
                f"{what}: event {event:#x} was last recorded inside a capture; record it outside one first",
            )

    def log(self, stream: object, kind: str, op: str | None = None) -> None:
        """Note a task enqueued on ``stream`` when it records; refuse what cannot be captured."""
        handle = HANDLE.convert("stream", stream)
        rec = self.recording.get(handle)
        if rec is None:
            return
        if rec.invalidated is not None:
            raise _code(
                RtErrorCode.ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED,
                f"{kind}: the capture on stream {rec.origin:#x} was invalidated by {rec.invalidated}",
            )
        if op is not None and op in self.refused_ops():
            rec.invalidated = f"aclnn{op}, which refuses capture"
            raise _code(
                RtErrorCode.ACL_ERROR_RT_CAPTURE_MODE_BLOCK_ASYNC,
                f"aclnn{op} needs the host in phase 2 on backend {self._rt.backend_name} and cannot be captured; "
                "the capture is invalidated",
            )
        rec.log.append(CapturedTask(handle, kind))
        rec.counts[handle] = rec.counts.get(handle, 0) + 1
        rec.rejoined.discard(handle)

    def on_record(self, event: int, stream: object) -> None:
        """aclrtRecordEvent on ``stream``: inside a capture the event becomes that capture's."""
        handle = HANDLE.convert("stream", stream)
        rec = self.recording.get(handle)
        if rec is None:
            self.events.pop(event, None)
            return
        self.log(handle, "aclrtRecordEvent")
        self.events[event] = _EventMark(rec, handle, rec.counts[handle], rec.segment)

    def on_wait(self, stream: object, event: int, recorded: bool) -> None:
        """aclrtStreamWaitEvent: join a capture through its event, note a rejoin, refuse crossed captures."""
        handle = HANDLE.convert("stream", stream)
        rec = self.recording.get(handle)
        mark = self.events.get(event)
        live = (
            mark is not None
            and self.recording.get(mark.recording.origin) is mark.recording
            and mark.segment == mark.recording.segment
        )
        if mark is None or not live:
            if rec is not None and (recorded or mark is not None):
                rec.invalidated = rec.invalidated or "a wait on work outside the capture"
                raise _code(
                    RtErrorCode.ACL_ERROR_RT_CAPTURE_DEPENDENCY,
                    f"stream {handle:#x} captures and cannot wait for event {event:#x}, recorded outside its capture "
                    "(or in a segment a task group closed); the capture is invalidated",
                )
            if mark is not None:
                self.check_event_usable(event, "aclrtStreamWaitEvent")
            return
        assert mark is not None
        owner = mark.recording
        if rec is None:
            if not handle:
                raise _code(
                    RtErrorCode.ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT,
                    "the default stream cannot join a capture (wait on a created stream)",
                )
            self.recording[handle] = owner
            owner.joined.add(handle)
            owner.counts.setdefault(handle, 0)
        elif rec is not owner:
            raise _code(
                RtErrorCode.ACL_ERROR_STREAM_CAPTURE_CONFLICT,
                f"stream {handle:#x} records into another capture than event {event:#x}'s",
            )
        elif handle == owner.origin and mark.stream != owner.origin and mark.count == owner.counts[mark.stream]:
            owner.rejoined.add(mark.stream)
        self.log(handle, "aclrtStreamWaitEvent")

    # ----------------------------------------------------------------- internals
    def _stream(self, stream: int | None) -> tuple[int, object]:
        handle = HANDLE.convert("stream", stream)
        return handle, self._rt.stream(handle)

    def _model(self, model: int | None) -> _Model:
        found = self.models.get(int(model or 0))
        if found is None:
            raise _code(
                RtErrorCode.ACL_ERROR_RT_INVALID_HANDLE,
                f"model running instance {model!r} does not exist or was destroyed",
            )
        return found

    def _capture_at(self, handle: int, api: str) -> _Recording:
        rec = self.recording.get(handle)
        if rec is None:
            raise _code(RtErrorCode.ACL_ERROR_RT_STREAM_NOT_CAPTURED, f"{api}: stream {handle:#x} is not capturing")
        if rec.update_of is not None:
            raise _code(
                RtErrorCode.ACL_ERROR_RT_STREAM_TASK_GROUP_STATUS,
                f"{api}: stream {handle:#x} is updating a task group, not capturing",
            )
        return rec

    def _unjoined(self, rec: _Recording) -> list[int]:
        return sorted(rec.joined - rec.rejoined)

    def _close_segment(self, rec: _Recording, group: int | None, api: str) -> None:
        """End the driver capture of the current segment, keep it, and start the next one."""
        unjoined = self._unjoined(rec)
        if unjoined:
            raise _code(
                RtErrorCode.ACL_ERROR_RT_STREAM_UNJOINED,
                f"{api}: streams {', '.join(f'{s:#x}' for s in unjoined)} joined the capture and did not rejoin "
                "(record an event on each and wait for it on the capturing stream)",
            )
        driver, origin = self._rt.driver, self._rt.stream(rec.origin)
        graph = driver.capture_end(origin)
        rec.model.segments.append(_Segment(graph, rec.log, group))
        rec.log = []
        rec.segment += 1
        for joined in rec.joined:
            self.recording.pop(joined, None)
        rec.joined.clear()
        rec.rejoined.clear()
        rec.counts = {rec.origin: rec.counts.get(rec.origin, 0)}
        driver.capture_begin(origin, rec.mode)

    def _stop(self, rec: _Recording) -> None:
        for handle in [h for h, r in self.recording.items() if r is rec]:
            del self.recording[handle]

    def _discard(self, model: _Model) -> None:
        for segment in model.segments:
            self._rt.driver.graph_destroy(segment.graph)
        model.segments.clear()
        for group in [g for g, (m, _) in self.groups.items() if m is model]:
            del self.groups[group]
        self.models.pop(model.handle, None)


class ModelRI:
    """The aclmdlRI* entry points of :class:`~acl_core.runtime.Runtime` (a mixin over its state)."""

    capture: CaptureRules
    _lock: threading.RLock

    def _ri_runtime(self) -> Runtime:
        return self  # type: ignore[return-value]

    @acl_entry("aclmdlRICaptureBegin")
    def ri_capture_begin(self, stream: Handle, mode: CEnum) -> None:
        """aclmdlRICaptureBegin: what ``stream`` enqueues from now on is recorded into a new model."""
        rt = self._ri_runtime()
        with self._lock:
            rules = self.capture
            handle = HANDLE.convert("stream", stream)
            if not handle:
                rt._require_device()
                raise _code(
                    RtErrorCode.ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT, "the default stream cannot capture (create one)"
                )
            driver_stream = rt.stream(handle)
            if handle in rules.recording:
                raise _code(RtErrorCode.ACL_ERROR_RT_STREAM_CAPTURED, f"stream {handle:#x} is already capturing")
            chosen = _mode(mode)
            rt.driver.capture_begin(driver_stream, chosen)
            model = _Model(next(rt._handles), rt._streams[handle].device)
            rules.models[model.handle] = model
            rules.recording[handle] = _Recording(model, handle, chosen, threading.get_ident(), counts={handle: 0})

    @acl_entry("aclmdlRICaptureGetInfo")
    def ri_capture_get_info(self, stream: Handle) -> tuple[CaptureStatus, int]:
        """aclmdlRICaptureGetInfo: (status, model) of the capture ``stream`` records into, (NONE, 0) if none."""
        handle, _ = self.capture._stream(stream)
        rec = self.capture.recording.get(handle)
        if rec is None:
            return CaptureStatus.ACL_MODEL_RI_CAPTURE_STATUS_NONE, 0
        if rec.invalidated is not None:
            return CaptureStatus.ACL_MODEL_RI_CAPTURE_STATUS_INVALIDATED, rec.model.handle
        return CaptureStatus.ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE, rec.model.handle

    @acl_entry("aclmdlRICaptureEnd")
    def ri_capture_end(self, stream: Handle) -> int:
        """aclmdlRICaptureEnd: the model running instance of what was captured."""
        rt = self._ri_runtime()
        with self._lock:
            rules = self.capture
            handle, driver_stream = rules._stream(stream)
            rec = rules._capture_at(handle, "aclmdlRICaptureEnd")
            if rec.origin != handle:
                raise _code(
                    RtErrorCode.ACL_ERROR_RT_STREAM_CAPTURE_UNMATCHED,
                    f"stream {handle:#x} joined the capture begun on stream {rec.origin:#x}; end it there",
                )
            if rec.mode is not _RELAXED and rec.thread != threading.get_ident():
                raise _code(
                    RtErrorCode.ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD,
                    f"a {rec.mode.name} capture must end on the thread that began it",
                )
            if rec.group is not None:
                raise _code(
                    RtErrorCode.ACL_ERROR_RT_STREAM_TASK_GROUP_INTR,
                    "a task group is open (aclmdlRICaptureTaskGrpEnd first)",
                )
            unjoined = rules._unjoined(rec)
            rules._stop(rec)
            try:
                graph = rt.driver.capture_end(driver_stream)
            except AclError:
                if rec.invalidated is None and not unjoined:
                    rules._discard(rec.model)
                    raise
                graph = None
            model = rec.model
            if graph is not None:
                model.segments.append(_Segment(graph, rec.log, None))
            if rec.invalidated is not None or unjoined:
                rules._discard(model)
                if rec.invalidated is not None:
                    raise _code(
                        RtErrorCode.ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED,
                        f"the capture was invalidated by {rec.invalidated}; nothing was kept",
                    )
                raise _code(
                    RtErrorCode.ACL_ERROR_RT_STREAM_UNJOINED,
                    f"streams {', '.join(f'{s:#x}' for s in unjoined)} joined the capture and did not rejoin "
                    "before End (record an event on each and wait for it on the capturing stream); nothing was kept",
                )
            model.capturing = False
            return model.handle

    @acl_entry("aclmdlRICaptureThreadExchangeMode")
    def ri_capture_thread_exchange_mode(self, mode: CEnum) -> CaptureMode:
        """aclmdlRICaptureThreadExchangeMode: set this thread's mode; returns the previous one."""
        chosen = _mode(mode)
        previous = self.capture.thread_mode()
        self.capture._thread.mode = chosen
        return previous

    @acl_entry("aclmdlRICaptureTaskGrpBegin")
    def ri_capture_task_grp_begin(self, stream: Handle) -> None:
        """aclmdlRICaptureTaskGrpBegin: the tasks captured until TaskGrpEnd form one updatable group."""
        with self._lock:
            rules = self.capture
            handle, _ = rules._stream(stream)
            rec = rules._capture_at(handle, "aclmdlRICaptureTaskGrpBegin")
            if rec.group is not None or rec.origin != handle:
                why = "a task group is already open" if rec.group is not None else "groups are begun on the origin"
                raise _code(RtErrorCode.ACL_ERROR_RT_STREAM_TASK_GROUP_STATUS, f"aclmdlRICaptureTaskGrpBegin: {why}")
            if rec.invalidated is not None:
                raise _code(RtErrorCode.ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED, "the capture was invalidated")
            if rec.log or rules._unjoined(rec):
                rules._close_segment(rec, None, "aclmdlRICaptureTaskGrpBegin")
            rec.group = next(self._ri_runtime()._handles)

    @acl_entry("aclmdlRICaptureTaskGrpEnd")
    def ri_capture_task_grp_end(self, stream: Handle) -> int:
        """aclmdlRICaptureTaskGrpEnd: closes the open group; returns its handle (aclrtTaskGrp)."""
        with self._lock:
            rules = self.capture
            handle, _ = rules._stream(stream)
            rec = rules._capture_at(handle, "aclmdlRICaptureTaskGrpEnd")
            if rec.group is None or rec.origin != handle:
                raise _code(
                    RtErrorCode.ACL_ERROR_RT_STREAM_TASK_GROUP_STATUS,
                    "aclmdlRICaptureTaskGrpEnd: no task group is open",
                )
            if rec.invalidated is not None:
                raise _code(RtErrorCode.ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED, "the capture was invalidated")
            group = rec.group
            rules._close_segment(rec, group, "aclmdlRICaptureTaskGrpEnd")
            rec.group = None
            rules.groups[group] = (rec.model, len(rec.model.segments) - 1)
            return group

    @acl_entry("aclmdlRICaptureTaskUpdateBegin")
    def ri_capture_task_update_begin(self, stream: Handle, handle: Handle) -> None:
        """aclmdlRICaptureTaskUpdateBegin: what ``stream`` enqueues until UpdateEnd replaces the group's tasks."""
        rt = self._ri_runtime()
        with self._lock:
            rules = self.capture
            s, driver_stream = rules._stream(stream)
            if not s:
                raise _code(
                    RtErrorCode.ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT, "the default stream cannot record an update"
                )
            if s in rules.recording:
                raise _code(RtErrorCode.ACL_ERROR_RT_STREAM_CAPTURED, f"stream {s:#x} is capturing")
            found = rules.groups.get(int(handle or 0))
            if found is None:
                raise _code(RtErrorCode.ACL_ERROR_RT_INVALID_HANDLE, f"task group {handle!r} does not exist")
            model, _ = found
            if model.capturing:
                raise _code(RtErrorCode.ACL_ERROR_RT_MODEL_CAPTURED, "the group's model is still being captured")
            if any(r.update_of == handle for r in rules.recording.values()):
                raise _code(RtErrorCode.ACL_ERROR_RT_STREAM_TASK_GROUP_STATUS, "this task group is already updating")
            rt.driver.capture_begin(driver_stream, _RELAXED)
            rules.recording[s] = _Recording(
                model, s, _RELAXED, threading.get_ident(), counts={s: 0}, update_of=int(handle or 0)
            )

    @acl_entry("aclmdlRICaptureTaskUpdateEnd")
    def ri_capture_task_update_end(self, stream: Handle) -> None:
        """aclmdlRICaptureTaskUpdateEnd: swap the re-issued tasks in (same number and kinds, else 107040)."""
        rt = self._ri_runtime()
        with self._lock:
            rules = self.capture
            s, driver_stream = rules._stream(stream)
            rec = rules.recording.get(s)
            if rec is None:
                raise _code(RtErrorCode.ACL_ERROR_RT_STREAM_NOT_CAPTURED, f"stream {s:#x} is not updating a task group")
            if rec.update_of is None:
                raise _code(
                    RtErrorCode.ACL_ERROR_RT_STREAM_TASK_GROUP_STATUS, f"stream {s:#x} captures; it is not updating"
                )
            unjoined = rules._unjoined(rec)
            rules._stop(rec)
            graph = rt.driver.capture_end(driver_stream)
            model, index = rules.groups.get(rec.update_of, (rec.model, -1))
            segment = model.segments[index] if index >= 0 and model.handle in rules.models else None
            old = [t.kind for t in segment.tasks] if segment is not None else []
            new = [t.kind for t in rec.log]
            problem = None
            if segment is None:
                problem = "its model was destroyed"
            elif rec.invalidated is not None:
                problem = f"the update was invalidated by {rec.invalidated}"
            elif unjoined:
                problem = "streams joined the update and did not rejoin"
            elif old != new:
                problem = f"the group holds {len(old)} tasks {old}, the update issued {len(new)}: {new}"
            if problem is not None or segment is None:
                rt.driver.graph_destroy(graph)
                raise _code(RtErrorCode.ACL_ERROR_RT_MODEL_UPDATE_FAILED, f"task group update refused: {problem}")
            previous, segment.graph, segment.tasks = segment.graph, graph, rec.log
            rt.driver.graph_destroy(previous)

    @acl_entry("aclmdlRIExecuteAsync")
    def ri_execute_async(self, model: Handle, stream: Handle) -> None:
        """aclmdlRIExecuteAsync: enqueue one replay of every segment, in order, on ``stream``."""
        rt = self._ri_runtime()
        with self._lock:
            rules = self.capture
            m = rules._model(model)
            handle, driver_stream = rules._stream(stream)
            self._ri_check_launchable(m, handle)
            for segment in m.segments:
                rt.driver.graph_launch(segment.graph, driver_stream)

    def _ri_check_launchable(self, m: _Model, stream: int) -> None:
        if m.capturing:
            raise _code(RtErrorCode.ACL_ERROR_RT_MODEL_CAPTURED, f"model {m.handle:#x} is still being captured")
        if stream in self.capture.recording:
            raise _code(
                RtErrorCode.ACL_ERROR_RT_SUB_ACLGRAPH_IS_CAPTURING,
                f"stream {stream:#x} is capturing: a model cannot be replayed into a capture",
            )

    @acl_entry("aclmdlRIExecute")
    def ri_execute(self, model: Handle, timeout: Int32) -> None:
        """aclmdlRIExecute: replay and wait; ``timeout`` in ms (-1: forever), else 507046 when exceeded."""
        rt = self._ri_runtime()
        if timeout != -1 and timeout <= 0:
            raise AclError(AclErrorCode.ACL_ERROR_INVALID_PARAM, f"timeout {timeout}: -1 (forever) or > 0 ms")
        with self._lock:
            m = self.capture._model(model)
            self._ri_check_launchable(m, -1)
            if m.sync_stream is None:
                rt.driver.open_device(m.device)
                m.sync_stream = rt.driver.create_stream()
            driver_stream = m.sync_stream
            for segment in m.segments:
                rt.driver.graph_launch(segment.graph, driver_stream)
        if timeout == -1:
            rt.driver.synchronize_stream(driver_stream)
            return
        deadline = time.monotonic() + timeout / 1000
        while not rt.driver.stream_done(driver_stream) and time.monotonic() <= deadline:
            time.sleep(_POLL_S)
        if time.monotonic() > deadline:
            raise _code(
                RtErrorCode.ACL_ERROR_RT_STREAM_SYNC_TIMEOUT,
                f"model {m.handle:#x} did not finish within {timeout} ms (its replay goes on)",
            )
        rt.driver.synchronize_stream(driver_stream)

    @acl_entry("aclmdlRIDestroy")
    def ri_destroy(self, model: Handle) -> None:
        """aclmdlRIDestroy: release the model's graphs (replays already enqueued still complete)."""
        rt = self._ri_runtime()
        with self._lock:
            m = self.capture._model(model)
            if m.capturing:
                raise _code(
                    RtErrorCode.ACL_ERROR_RT_MODEL_CAPTURED, f"model {m.handle:#x} is being captured; end the capture"
                )
            self.capture._discard(m)
            if m.sync_stream is not None:
                rt.driver.synchronize_stream(m.sync_stream)
                rt.driver.destroy_stream(m.sync_stream)

    @acl_entry("aclmdlRIDebugPrint")
    def ri_debug_print(self, model: Handle) -> None:
        """aclmdlRIDebugPrint: print the model's task log, segment by segment, to stdout."""
        print(self.ri_describe(model))

    def ri_describe(self, model: int | None) -> str:
        """The text aclmdlRIDebugPrint prints: each segment (task groups marked) and its tasks."""
        m = self.capture._model(model)
        lines = [f"aclmdlRI {m.handle:#x}: {len(m.segments)} segment(s), device {m.device}"]
        for i, segment in enumerate(m.segments):
            tag = f" task group {segment.group:#x}" if segment.group is not None else ""
            lines.append(f"  segment {i}{tag}: {len(segment.tasks)} task(s)")
            lines.extend(f"    [{j}] stream {t.stream:#x} {t.kind}" for j, t in enumerate(segment.tasks))
        return "\n".join(lines)

"""Runtime conformance: copies, memset, streams, events, device synchronisation and memory limits.

These cases drive the backend's acl runtime (:class:`acl_core.runtime.Runtime` over its driver)
directly, as a ported program would. Data are judged by the obvious expectation (bytes copied are
the bytes, a memset leaves its byte), codes by the reference. Asynchronous cases enqueue enough work
that a backend which does not wait for it is observed: the host reads results only after the
synchronisation the contract requires, and must then see them; a query that reports completion must
mean the results are there; event timings around real work must be positive and ordered.

Cases are grouped as pseudo-operators ``runtime.<group>`` of family ``runtime``: ``--ops runtime``
selects them all, ``--ops runtime.event`` one group, and expectation patterns match their ids.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

import numpy as np

from acl_core.errors import AclCoreError, RtErrorCode, code_name
from acl_core.runtime import Runtime
from acl_core.spec.runtime import EventStatus, MemAttr, MemcpyKind, StreamStatus

if TYPE_CHECKING:
    from acl_conformance.cases import Case
    from acl_conformance.runner import Outcome, Runner

FAMILY = "runtime"
KIND = "runtime"
MiB = 1 << 20
BIG = 16 * MiB + 4099
"""Over 16 MiB with an odd tail: crosses every power-of-two chunking a copy engine might use."""
BIG_FULL = 64 * MiB + 77


class Mismatch(Exception):
    """A runtime case's observation differs from the contract: ``failure`` classifies it."""

    def __init__(self, failure: str, message: str) -> None:
        super().__init__(message)
        self.failure = failure
        self.message = message


@dataclass(frozen=True)
class RuntimeCase:
    """One runtime case: ``check(ctx)`` raises :class:`Mismatch` when the backend breaks the contract."""

    group: str
    case_id: str
    note: str
    check: Callable[[Context], None]
    quick: bool = True
    multi_device: bool = False

    @property
    def op(self) -> str:
        """The pseudo-operator name the case is reported under."""
        return f"runtime.{self.group}"


class Context:
    """What a case works with: the backend's runtime, the reference's, and host/device buffers it frees."""

    def __init__(self, runtime: Runtime, reference: Runtime, seed: int, devices: int) -> None:
        self.rt = runtime
        self.ref = reference
        self.devices = devices
        self.rng = np.random.default_rng([seed, 0x5EED])
        self._device: list[int] = []
        self._host: list[int] = []
        self._streams: list[int] = []
        self._events: list[int] = []

    # ----------------------------------------------------------------- resources
    def malloc(self, nbytes: int) -> int:
        """Device memory on the current device, freed when the case ends."""
        address = self.rt.malloc(nbytes)
        self._device.append(address)
        return address

    def host(self, data: np.ndarray | int) -> tuple[int, np.ndarray]:
        """Page-locked host memory holding ``data`` (or ``data`` zero bytes), and a uint8 view of it."""
        nbytes = data if isinstance(data, int) else int(data.nbytes)
        address = self.rt.malloc_host(nbytes)
        self._host.append(address)
        view = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(address))
        view[:] = 0 if isinstance(data, int) else data.view(np.uint8).reshape(-1)
        return address, view

    def stream(self) -> int:
        """A new stream, destroyed when the case ends."""
        handle = self.rt.create_stream()
        self._streams.append(handle)
        return handle

    def event(self) -> int:
        """A new event, destroyed when the case ends."""
        handle = self.rt.create_event()
        self._events.append(handle)
        return handle

    def random(self, nbytes: int) -> np.ndarray:
        """``nbytes`` random bytes."""
        return self.rng.integers(0, 256, nbytes, dtype=np.uint8)

    def close(self) -> None:
        """Synchronise, then release everything the case made."""
        try:
            self.rt.synchronize_device()
        finally:
            for s in self._streams:
                self.rt.destroy_stream(s)
            for e in self._events:
                self.rt.destroy_event(e)
            for a in self._device:
                self.rt.free(a)
            for h in self._host:
                self.rt.free_host(h)

    # ----------------------------------------------------------------- host-side observations
    def upload(self, data: np.ndarray) -> int:
        """Device memory holding ``data`` (a synchronous copy)."""
        address = self.malloc(int(data.nbytes))
        src, _ = self.host(data)
        self.rt.memcpy(address, int(data.nbytes), src, int(data.nbytes), MemcpyKind.ACL_MEMCPY_HOST_TO_DEVICE)
        return address

    def download(self, address: int, nbytes: int) -> np.ndarray:
        """``nbytes`` of device memory, read by a synchronous copy (which waits for no stream)."""
        dst, view = self.host(nbytes)
        self.rt.memcpy(dst, nbytes, address, nbytes, MemcpyKind.ACL_MEMCPY_DEVICE_TO_HOST)
        return view.copy()


def expect_bytes(what: str, got: np.ndarray, want: np.ndarray) -> None:
    """Raise a ``value`` mismatch naming the first differing byte and how many differ."""
    if got.shape == want.shape and np.array_equal(got, want):
        return
    if got.shape != want.shape:
        raise Mismatch("value", f"{what}: {got.size} bytes, expected {want.size}")
    bad = np.flatnonzero(got != want)
    i = int(bad[0])
    raise Mismatch(
        "value",
        f"{what}: {bad.size} of {want.size} bytes differ, first at byte {i} "
        f"(got {int(got[i]):#04x}, expected {int(want[i]):#04x}; last differing byte {int(bad[-1])})",
    )


def code_of(fn: Callable[[], object]) -> int:
    """The CANN code ``fn`` raises (0 when it succeeds)."""
    try:
        fn()
    except AclCoreError as exc:
        return int(exc.code)
    return 0


# ------------------------------------------------------------------------------------ copies and memset
KINDS = (
    MemcpyKind.ACL_MEMCPY_HOST_TO_DEVICE,
    MemcpyKind.ACL_MEMCPY_DEFAULT,
    MemcpyKind.ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE,
)
D2D_KINDS = (
    MemcpyKind.ACL_MEMCPY_DEVICE_TO_DEVICE,
    MemcpyKind.ACL_MEMCPY_DEFAULT,
    MemcpyKind.ACL_MEMCPY_INNER_DEVICE_TO_DEVICE,
)
D2H_KINDS = (MemcpyKind.ACL_MEMCPY_DEVICE_TO_HOST, MemcpyKind.ACL_MEMCPY_DEFAULT)


def _memcpy_roundtrip(nbytes: int, offset: int, h2d: MemcpyKind, d2d: MemcpyKind, d2h: MemcpyKind) -> Callable:
    def check(ctx: Context) -> None:
        data = ctx.random(nbytes)
        src, _ = ctx.host(data)
        a = ctx.malloc(nbytes + offset)
        b = ctx.malloc(nbytes + 2 * offset)
        ctx.rt.memcpy(a + offset, nbytes, src, nbytes, h2d)
        ctx.rt.memcpy(b + 2 * offset, nbytes, a + offset, nbytes, d2d)
        dst, view = ctx.host(nbytes)
        ctx.rt.memcpy(dst, nbytes, b + 2 * offset, nbytes, d2h)
        expect_bytes(f"{nbytes} bytes {h2d.name} -> {d2d.name} -> {d2h.name} at offset {offset}", view, data)

    return check


def _memcpy_h2h(nbytes: int) -> Callable:
    def check(ctx: Context) -> None:
        data = ctx.random(nbytes)
        src, _ = ctx.host(data)
        dst, view = ctx.host(nbytes)
        ctx.rt.memcpy(dst, nbytes, src, nbytes, MemcpyKind.ACL_MEMCPY_HOST_TO_HOST)
        expect_bytes(f"{nbytes} bytes host to host", view, data)

    return check


def _memcpy_partial(nbytes: int, count: int, offset: int) -> Callable:
    """Copy ``count`` bytes into the middle of a buffer: the bytes around it must stay as they were."""

    def check(ctx: Context) -> None:
        before = ctx.random(nbytes)
        patch = ctx.random(count)
        dev = ctx.upload(before)
        src, _ = ctx.host(patch)
        ctx.rt.memcpy(dev + offset, nbytes - offset, src, count, MemcpyKind.ACL_MEMCPY_HOST_TO_DEVICE)
        want = before.copy()
        want[offset : offset + count] = patch
        expect_bytes(f"{count} bytes copied at offset {offset} of {nbytes}", ctx.download(dev, nbytes), want)

    return check


def _memcpy2d(width: int, height: int, spitch: int, dpitch: int) -> Callable:
    def check(ctx: Context) -> None:
        data = ctx.random(spitch * height)
        src, _ = ctx.host(data)
        dev = ctx.upload(np.zeros(dpitch * height, np.uint8))
        ctx.rt.memcpy2d(dev, dpitch, src, spitch, width, height, MemcpyKind.ACL_MEMCPY_HOST_TO_DEVICE)
        want = np.zeros(dpitch * height, np.uint8)
        for r in range(height):
            want[r * dpitch : r * dpitch + width] = data[r * spitch : r * spitch + width]
        expect_bytes(f"memcpy2d {height} rows of {width}", ctx.download(dev, dpitch * height), want)

    return check


def _memset(nbytes: int, offset: int, count: int, value: int, on_stream: bool) -> Callable:
    def check(ctx: Context) -> None:
        before = ctx.random(nbytes)
        dev = ctx.upload(before)
        if on_stream:
            s = ctx.stream()
            ctx.rt.memset_async(dev + offset, nbytes - offset, value, count, s)
            ctx.rt.synchronize_stream(s)
        else:
            ctx.rt.memset(dev + offset, nbytes - offset, value, count)
        want = before.copy()
        want[offset : offset + count] = value & 0xFF
        how = "memset_async" if on_stream else "memset"
        expect_bytes(f"{how} of {count} bytes to {value:#x} at offset {offset}", ctx.download(dev, nbytes), want)

    return check


# ------------------------------------------------------------------------------------ asynchronous work
def _slow_fill(ctx: Context, dev: int, nbytes: int, stream: int, value: int, rounds: int) -> None:
    """Enqueue ``rounds`` memsets of ``nbytes`` on ``stream``, the last to ``value``: real work to wait for."""
    for r in range(rounds - 1):
        ctx.rt.memset_async(dev, nbytes, (value + 1 + r) & 0xFF, nbytes, stream)
    ctx.rt.memset_async(dev, nbytes, value, nbytes, stream)


def _async_roundtrip(nbytes: int) -> Callable:
    """H2D, D2D and D2H async copies on one stream; the host reads after synchronize_stream."""

    def check(ctx: Context) -> None:
        data = ctx.random(nbytes)
        src, _ = ctx.host(data)
        a, b = ctx.malloc(nbytes), ctx.malloc(nbytes)
        dst, view = ctx.host(nbytes)
        s = ctx.stream()
        ctx.rt.memcpy_async(a, nbytes, src, nbytes, MemcpyKind.ACL_MEMCPY_HOST_TO_DEVICE, s)
        ctx.rt.memcpy_async(b, nbytes, a, nbytes, MemcpyKind.ACL_MEMCPY_DEVICE_TO_DEVICE, s)
        ctx.rt.memcpy_async(dst, nbytes, b, nbytes, MemcpyKind.ACL_MEMCPY_DEVICE_TO_HOST, s)
        ctx.rt.synchronize_stream(s)
        expect_bytes(f"async H2D -> D2D -> D2H of {nbytes} bytes after synchronize_stream", view, data)

    return check


def _stream_order(nbytes: int) -> Callable:
    """Async work on one stream happens in the order it was enqueued."""

    def check(ctx: Context) -> None:
        data = ctx.random(nbytes)
        src, _ = ctx.host(data)
        dev = ctx.malloc(nbytes)
        s = ctx.stream()
        half = nbytes // 2 + 1
        ctx.rt.memset_async(dev, nbytes, 0x11, nbytes, s)
        ctx.rt.memcpy_async(dev, nbytes, src, nbytes, MemcpyKind.ACL_MEMCPY_HOST_TO_DEVICE, s)
        ctx.rt.memset_async(dev, nbytes, 0x5A, half, s)
        tail = ctx.malloc(nbytes)
        ctx.rt.memcpy_async(tail, nbytes, dev, nbytes, MemcpyKind.ACL_MEMCPY_DEVICE_TO_DEVICE, s)
        ctx.rt.memset_async(dev, nbytes, 0x33, nbytes, s)
        ctx.rt.synchronize_stream(s)
        want = data.copy()
        want[:half] = 0x5A
        expect_bytes("memset, copy, memset, copy (in stream order)", ctx.download(tail, nbytes), want)
        expect_bytes("the last memset of the stream", ctx.download(dev, nbytes), np.full(nbytes, 0x33, np.uint8))

    return check


def _cmo_prefetch(nbytes: int) -> Callable:
    """aclrtCmoAsync(PREFETCH) is an ordered stream task that changes no byte; its misuse codes are the reference's.

    A driver without a prefetch answers 207000 to every prefetch (Driver.cmo_prefetch's default), and passes.
    """

    def check(ctx: Context) -> None:
        data = ctx.random(nbytes)
        dev = ctx.upload(data)
        s = ctx.stream()
        ctx.rt.memset_async(dev, nbytes, 0x5A, 1000, s)
        got = code_of(lambda: [ctx.rt.cmo_async(dev + lo, n, 0, s) for lo, n in ((0, nbytes), (7, nbytes - 9))])
        if got not in (0, RtErrorCode.ACL_ERROR_RT_FEATURE_NOT_SUPPORT):
            raise Mismatch("code", f"a valid prefetch answered {_describe(got)}")
        ctx.rt.memset_async(dev + nbytes - 8, 8, 0xA5, 8, s)
        ctx.rt.synchronize_stream(s)
        want = data.copy()
        want[:1000] = 0x5A
        want[-8:] = 0xA5
        expect_bytes("memset, prefetches, memset (in stream order)", ctx.download(dev, nbytes), want)
        ref = ctx.ref.malloc(nbytes)
        try:
            for what, null, size, kind in (
                ("type WRITEBACK", False, nbytes, 1),
                ("an unknown type", False, nbytes, 7),
                ("a range past the allocation", False, nbytes + 1, 0),
                ("a null pointer", True, nbytes, 0),
            ):
                ref_ptr, dev_ptr = (None, None) if null else (ref, dev)
                want_code = code_of(functools.partial(ctx.ref.cmo_async, ref_ptr, size, kind, 0))
                got_code = code_of(functools.partial(ctx.rt.cmo_async, dev_ptr, size, kind, s))
                if got_code != want_code:
                    raise Mismatch(
                        "code", f"cmo_async with {what}: {_describe(got_code)}, expected {_describe(want_code)}"
                    )
        finally:
            ctx.ref.free(ref)

    return check


def _query_means_done(nbytes: int, rounds: int) -> Callable:
    """Whenever a stream or an event says complete, the work before it is visible to the host."""

    def check(ctx: Context) -> None:
        dev = ctx.malloc(nbytes)
        s = ctx.stream()
        e = ctx.event()
        _slow_fill(ctx, dev, nbytes, s, 0x6B, rounds)
        ctx.rt.record_event(e, s)
        want = np.full(nbytes, 0x6B, np.uint8)
        for _ in range(1000):
            event_done = ctx.rt.query_event(e) == EventStatus.ACL_EVENT_STATUS_COMPLETE
            stream_done = ctx.rt.stream_query(s) == StreamStatus.ACL_STREAM_STATUS_COMPLETE
            if event_done or stream_done:
                which = "the event" if event_done else "the stream"
                expect_bytes(f"device memory once {which} reported complete", ctx.download(dev, nbytes), want)
                break
        ctx.rt.synchronize_event(e)
        if ctx.rt.query_event(e) != EventStatus.ACL_EVENT_STATUS_COMPLETE:
            raise Mismatch("runtime", "query_event is not COMPLETE after synchronize_event")
        expect_bytes("device memory after synchronize_event", ctx.download(dev, nbytes), want)
        if ctx.rt.stream_query(s) != StreamStatus.ACL_STREAM_STATUS_COMPLETE:
            raise Mismatch("runtime", "stream_query is not COMPLETE after the stream's last event was synchronised")

    return check


def _elapsed(nbytes: int, rounds: int) -> Callable:
    """Elapsed times between three events around real work are positive, ordered and additive."""

    def check(ctx: Context) -> None:
        dev = ctx.malloc(nbytes)
        s = ctx.stream()
        e0, e1, e2 = ctx.event(), ctx.event(), ctx.event()
        ctx.rt.record_event(e0, s)
        _slow_fill(ctx, dev, nbytes, s, 1, rounds)
        ctx.rt.record_event(e1, s)
        _slow_fill(ctx, dev, nbytes, s, 2, 4 * rounds)
        ctx.rt.record_event(e2, s)
        ctx.rt.synchronize_event(e2)
        t01 = ctx.rt.event_elapsed_time(e0, e1)
        t12 = ctx.rt.event_elapsed_time(e1, e2)
        t02 = ctx.rt.event_elapsed_time(e0, e2)
        times = f"e0->e1 {t01:.6g} ms, e1->e2 {t12:.6g} ms, e0->e2 {t02:.6g} ms"
        if not (t01 > 0 and t12 > 0 and t02 > 0):
            raise Mismatch("timing", f"elapsed time around real work must be positive: {times}")
        if abs(t02 - (t01 + t12)) > 0.05 * t02 + 0.01:
            raise Mismatch("timing", f"elapsed times are not additive: {times}")

    return check


def _wait_event(nbytes: int, rounds: int) -> Callable:
    """Stream B waits on an event of stream A, then reads what A wrote; only B is synchronised."""

    def check(ctx: Context) -> None:
        x, y = ctx.malloc(nbytes), ctx.malloc(nbytes)
        dst, view = ctx.host(nbytes)
        a, b = ctx.stream(), ctx.stream()
        e = ctx.event()
        _slow_fill(ctx, x, nbytes, a, 0x3C, rounds)
        ctx.rt.record_event(e, a)
        ctx.rt.stream_wait_event(b, e)
        ctx.rt.memcpy_async(y, nbytes, x, nbytes, MemcpyKind.ACL_MEMCPY_DEVICE_TO_DEVICE, b)
        ctx.rt.memcpy_async(dst, nbytes, y, nbytes, MemcpyKind.ACL_MEMCPY_DEVICE_TO_HOST, b)
        ctx.rt.synchronize_stream(b)
        expect_bytes("stream B's copy of what stream A wrote before the event B waited on", view, _full(nbytes, 0x3C))

    return check


def _full(nbytes: int, value: int) -> np.ndarray:
    return np.full(nbytes, value, np.uint8)


def _synchronize_device(nbytes: int, streams: int) -> Callable:
    """synchronize_device waits for the default stream and every created stream of the device."""

    def check(ctx: Context) -> None:
        handles: list[int | None] = [None, *(ctx.stream() for _ in range(streams))]
        targets = []
        for i, s in enumerate(handles):
            dev = ctx.malloc(nbytes)
            dst, view = ctx.host(nbytes)
            _slow_fill(ctx, dev, nbytes, s, 0x40 + i, 2)  # type: ignore[arg-type]
            ctx.rt.memcpy_async(dst, nbytes, dev, nbytes, MemcpyKind.ACL_MEMCPY_DEVICE_TO_HOST, s)
            targets.append(view)
        ctx.rt.synchronize_device()
        for i, view in enumerate(targets):
            which = "the default stream" if i == 0 else f"created stream {i}"
            expect_bytes(f"work on {which} after synchronize_device", view, _full(nbytes, 0x40 + i))

    return check


def _destroy_stream_waits(nbytes: int) -> Callable:
    def check(ctx: Context) -> None:
        dev = ctx.malloc(nbytes)
        dst, view = ctx.host(nbytes)
        s = ctx.rt.create_stream()
        _slow_fill(ctx, dev, nbytes, s, 0x77, 2)
        ctx.rt.memcpy_async(dst, nbytes, dev, nbytes, MemcpyKind.ACL_MEMCPY_DEVICE_TO_HOST, s)
        ctx.rt.destroy_stream(s)
        expect_bytes("work of a stream after destroy_stream (which waits for it)", view, _full(nbytes, 0x77))

    return check


# ------------------------------------------------------------------------------------ memory and devices
def _out_of_memory(ctx: Context) -> None:
    """malloc beyond the device's reported memory fails with the reference's code (207001)."""
    _, total = ctx.rt.get_mem_info(MemAttr.ACL_HBM_MEM)
    _, ref_total = ctx.ref.get_mem_info(MemAttr.ACL_HBM_MEM)
    want = code_of(lambda: ctx.ref.free(ctx.ref.malloc(ref_total + 64 * MiB)))
    got = code_of(lambda: ctx._device.append(ctx.rt.malloc(total + 64 * MiB)))
    if got != want:
        raise Mismatch(
            "code",
            f"malloc of {total + 64 * MiB} bytes (64 MiB over the reported total): "
            f"{_describe(got)}, expected {_describe(want)}",
        )
    if want != RtErrorCode.ACL_ERROR_RT_MEMORY_ALLOCATION:
        raise Mismatch("code", f"the reference answered {_describe(want)} to an impossible malloc")
    small = ctx.malloc(4096)  # the device must still work after a refused allocation
    data = ctx.random(4096)
    src, _ = ctx.host(data)
    ctx.rt.memcpy(small, 4096, src, 4096, MemcpyKind.ACL_MEMCPY_HOST_TO_DEVICE)
    expect_bytes("a copy after a refused allocation", ctx.download(small, 4096), data)


def _describe(code: int) -> str:
    return "success" if code == 0 else f"{code} {code_name(code)}"


def _alignment(ctx: Context) -> None:
    """Every malloc is 64-byte aligned, whatever its size."""
    for size in (1, 3, 31, 32, 33, 63, 65, 4097, 1 << 20):
        address = ctx.malloc(size)
        if address % 64:
            raise Mismatch("runtime", f"malloc({size}) returned {address:#x}, not 64-byte aligned")


def _mem_info(ctx: Context) -> None:
    """get_mem_info: 0 < free <= total, and an allocation of 64 MiB is not free memory any more."""
    free0, total = ctx.rt.get_mem_info(MemAttr.ACL_HBM_MEM)
    if not 0 < free0 <= total:
        raise Mismatch("runtime", f"get_mem_info reports free {free0} of total {total}")
    ctx.malloc(64 * MiB)
    free1, _ = ctx.rt.get_mem_info(MemAttr.ACL_HBM_MEM)
    if free1 > free0 - 64 * MiB + 8 * MiB:  # other users may free memory meanwhile; 8 MiB of slack
        raise Mismatch("runtime", f"free memory went from {free0} to {free1} across a 64 MiB malloc")


def _each_device(nbytes: int) -> Callable:
    """Every device the backend claims runs streams, copies and synchronisation of its own."""

    def check(ctx: Context) -> None:
        home = ctx.rt.get_context()
        for device in range(1, ctx.devices):
            ctx.rt.set_device(device)
            try:
                if ctx.rt.get_device() != device:
                    raise Mismatch("runtime", f"set_device({device}) left device {ctx.rt.get_device()} current")
                data = ctx.random(nbytes)
                src = ctx.rt.malloc_host(nbytes)
                dev = ctx.rt.malloc(nbytes)
                s = ctx.rt.create_stream()
                try:
                    np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(src))[:] = data
                    ctx.rt.memcpy_async(dev, nbytes, src, nbytes, MemcpyKind.ACL_MEMCPY_HOST_TO_DEVICE, s)
                    ctx.rt.memset_async(dev, nbytes, device, 17, s)
                    ctx.rt.synchronize_device()
                    want = data.copy()
                    want[:17] = device
                    out = np.zeros(nbytes, np.uint8)
                    ctx.rt.memcpy(src, nbytes, dev, nbytes, MemcpyKind.ACL_MEMCPY_DEVICE_TO_HOST)
                    out[:] = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(src))
                    expect_bytes(f"copy and memset on device {device}", out, want)
                finally:
                    ctx.rt.destroy_stream(s)
                    ctx.rt.free(dev)
                    ctx.rt.free_host(src)
            finally:
                ctx.rt.set_context(home)
                ctx.rt.reset_device(device)
                ctx.rt.set_context(home)

    return check


# ------------------------------------------------------------------------------------ the catalogue
def all_runtime_cases() -> list[RuntimeCase]:
    """Every runtime case, quick ones flagged (sizes are fixed: the seed only varies the bytes)."""
    cases: list[RuntimeCase] = []

    def add(group: str, case_id: str, note: str, check: Callable[[Context], None], **kw: bool) -> None:
        cases.append(RuntimeCase(group, case_id, note, check, **kw))

    sizes = [(1, 0, True), (63, 5, True), (4096 + 13, 64, True), (BIG, 3, True), (BIG_FULL, 1000, False)]
    for nbytes, offset, quick in sizes:
        for i, (h2d, d2d, d2h) in enumerate(zip(KINDS, D2D_KINDS, (*D2H_KINDS, D2H_KINDS[0]))):
            add(
                "memcpy",
                f"roundtrip-{nbytes}B-off{offset}-{h2d.name[11:].lower()}",
                f"{nbytes} bytes via {h2d.name}, {d2d.name}, {d2h.name} at offset {offset}",
                _memcpy_roundtrip(nbytes, offset, h2d, d2d, d2h),
                quick=quick and (i == 0 or nbytes < MiB),
            )
    add("memcpy", "host-to-host-4109B", "4109 bytes host to host", _memcpy_h2h(4109))
    add(
        "memcpy",
        "partial-middle",
        "a copy into the middle of a buffer leaves its edges",
        _memcpy_partial(8192, 1001, 77),
    )
    add("memcpy", "memcpy2d-pitched", "memcpy2d between different pitches", _memcpy2d(67, 9, 80, 128))
    for nbytes, offset, count, value, on_stream, quick in (
        (4096, 0, 4096, 0xAB, False, True),
        (4099, 3, 1001, 0x1FF, False, True),
        (BIG, 5, BIG - 5, 0x7E, True, True),
        (BIG_FULL, 1, BIG_FULL - 2, 0x100 + 0xC3, True, False),
        (1 << 16, 4093, 1, 0x80, True, True),
    ):
        how = "async" if on_stream else "sync"
        add(
            "memset",
            f"{how}-{count}B-of-{nbytes}-off{offset}",
            f"memset{'_async' if on_stream else ''} of {count} bytes to the low byte of {value:#x}",
            _memset(nbytes, offset, count, value, on_stream),
            quick=quick,
        )
    add("async", "roundtrip-4099B", "async H2D, D2D, D2H after synchronize_stream", _async_roundtrip(4099))
    add("async", f"roundtrip-{BIG}B", "async H2D, D2D, D2H of over 16 MiB", _async_roundtrip(BIG))
    add("async", "roundtrip-full", "async copies of 64 MiB", _async_roundtrip(BIG_FULL), quick=False)
    add("async", "stream-order", "memset, copy, memset, copy in stream order", _stream_order(BIG))
    add("async", "cmo-prefetch", "aclrtCmoAsync prefetches change no byte; misuse codes", _cmo_prefetch(BIG))
    add("async", "destroy-stream-waits", "destroy_stream waits for the stream's work", _destroy_stream_waits(BIG))
    add("event", "query-means-done", "a complete query means visible results", _query_means_done(BIG, 4))
    add("event", "elapsed-ordered", "elapsed times positive, ordered, additive", _elapsed(BIG, 2))
    add("event", "elapsed-ordered-full", "elapsed time around 64 MiB memsets", _elapsed(BIG_FULL, 2), quick=False)
    add("stream", "wait-event", "stream B waits on stream A's event", _wait_event(BIG, 4))
    add("stream", "wait-event-full", "stream wait behind 64 MiB of work", _wait_event(BIG_FULL, 8), quick=False)
    add("stream", "synchronize-device", "synchronize_device covers every stream", _synchronize_device(BIG, 3))
    add("memory", "out-of-memory", "malloc beyond the device's memory: 207001", _out_of_memory)
    add("memory", "malloc-alignment", "malloc addresses are 64-byte aligned", _alignment)
    add("memory", "mem-info", "get_mem_info accounts for an allocation", _mem_info)
    add("device", "each-device", "every claimed device copies and synchronises", _each_device(4099), multi_device=True)
    return cases


def selected_cases(patterns: tuple[str, ...]) -> Iterator[RuntimeCase]:
    """The runtime cases ``patterns`` select (fnmatch on ``runtime.<group>``, the family, or ``op[id]``; none: all)."""
    for rc in all_runtime_cases():
        if not patterns or any(
            fnmatchcase(rc.op, p) or fnmatchcase(FAMILY, p) or fnmatchcase(f"{rc.op}[{rc.case_id}]", p)
            for p in patterns
        ):
            yield rc


def runtime_names() -> list[str]:
    """The family name and every ``runtime.<group>`` pseudo-operator, for ``--ops`` name checks."""
    return [FAMILY, *dict.fromkeys(rc.op for rc in all_runtime_cases())]


_BY_KEY = {(rc.op, rc.case_id): rc for rc in all_runtime_cases()}


def catalog_cases(patterns: tuple[str, ...], case_type: type[Case]) -> list[Case]:
    """The selected runtime cases as suite :class:`~acl_conformance.cases.Case` objects."""
    return [case_type(rc.op, FAMILY, KIND, rc.case_id, rc.note, quick=rc.quick) for rc in selected_cases(patterns)]


def run_case(runner: Runner, case: Case) -> Outcome:
    """Run one runtime case on the runner's backend (the reference decides codes)."""
    rc = _BY_KEY[(case.op, case.case_id)]
    devices = runner.caps.device_count
    if rc.multi_device and devices < 2:
        return runner._skip(case, f"capabilities claim {devices} device; the case needs 2 or more")
    rt = runner.backend.runtime
    ref = runner.reference.runtime
    rt.ensure_device(0)
    ref.ensure_device(0)
    ctx = Context(rt, ref, runner.catalog.seed, devices)
    failure: tuple[str, str] | None = None
    try:
        rc.check(ctx)
    except Mismatch as m:
        failure = (m.failure, m.message)
    except AclCoreError as exc:
        failure = ("code", f"the runtime refused a valid call: {exc.code} {code_name(exc.code)}: {exc.message}")
    try:
        ctx.close()
    except AclCoreError as exc:
        failure = failure or ("code", f"cleaning up failed: {exc.code} {code_name(exc.code)}: {exc.message}")
    return runner._pass(case) if failure is None else runner._fail(case, *failure)

"""The acl runtime's semantics, shared by every backend, over one backend :class:`Driver`.

Methods raise :class:`AclError` carrying the CANN code; the pyACL-shaped front end
(:mod:`acl_core.acl`) turns those into returned codes. Error codes chosen where CANN's headers leave
the case open are listed in docs/RUNTIME.md.
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from acl_core.errors import AclError, AclErrorCode, RtErrorCode
from acl_core.runtime.c_args import HANDLE, CEnum, CStr, Handle, Int32, Ptr, SizeT, UInt32, acl_entry
from acl_core.runtime.capture import CaptureRules, ModelRI
from acl_core.runtime.memory_map import MemoryMap, Range, RangeKind
from acl_core.runtime.view_writeback import ViewWriteback
from acl_core.spec.runtime import (
    MALLOC_POLICY_FLAGS,
    CmoType,
    CopyDirection,
    Driver,
    EventRecordedStatus,
    EventStatus,
    MemAttr,
    MemcpyKind,
    MemMallocPolicy,
    RunMode,
    StreamStatus,
)

_T = TypeVar("_T")

ALLOC_ALIGN = 32
"""aclrtMalloc rounds sizes up to a multiple of this and then adds one more such block."""

_REGISTERED_HOST_LIMIT = 4096
_DIRECTIONS = {
    (False, False): CopyDirection.HOST_TO_HOST,
    (False, True): CopyDirection.HOST_TO_DEVICE,
    (True, False): CopyDirection.DEVICE_TO_HOST,
    (True, True): CopyDirection.DEVICE_TO_DEVICE,
}
_KIND_DIRECTION = {
    MemcpyKind.ACL_MEMCPY_HOST_TO_HOST: CopyDirection.HOST_TO_HOST,
    MemcpyKind.ACL_MEMCPY_HOST_TO_DEVICE: CopyDirection.HOST_TO_DEVICE,
    MemcpyKind.ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE: CopyDirection.HOST_TO_DEVICE,
    MemcpyKind.ACL_MEMCPY_DEVICE_TO_HOST: CopyDirection.DEVICE_TO_HOST,
    MemcpyKind.ACL_MEMCPY_DEVICE_TO_DEVICE: CopyDirection.DEVICE_TO_DEVICE,
    MemcpyKind.ACL_MEMCPY_INNER_DEVICE_TO_DEVICE: CopyDirection.DEVICE_TO_DEVICE,
    MemcpyKind.ACL_MEMCPY_INTER_DEVICE_TO_DEVICE: CopyDirection.DEVICE_TO_DEVICE,
}


MAX_ALLOCATION = sys.maxsize
"""No allocation larger than a process's address space can hold is passed to a driver (ssize_t max)."""


def malloc_capacity(size: int) -> int:
    """Bytes aclrtMalloc reserves for ``size``: rounded up to 32, plus 32."""
    return (size + ALLOC_ALIGN - 1) // ALLOC_ALIGN * ALLOC_ALIGN + ALLOC_ALIGN


def _invalid(message: str) -> AclError:
    return AclError(AclErrorCode.ACL_ERROR_INVALID_PARAM, message)


@dataclass
class _Stream:
    handle: int
    device: int
    driver_stream: object


@dataclass
class _Event:
    handle: int
    device: int
    driver_event: object
    recorded: bool = False


@dataclass
class _Context:
    handle: int
    device: int
    default: bool


@dataclass
class _ThreadState:
    device: int | None = None
    context: int | None = None


@dataclass
class _DeviceState:
    refcount: int = 0
    default_context: int = 0
    contexts: set[int] = field(default_factory=set)


class Runtime(ModelRI):
    """One process's acl runtime on one backend (the aclmdlRI* capture entry points: :class:`ModelRI`)."""

    def __init__(self, backend_name: str, driver: Driver) -> None:
        self.backend_name = backend_name
        self.driver = driver
        self.memory = MemoryMap()
        self._lock = threading.RLock()
        self._initialized = False
        self._implicit = False
        self._finalized = False
        self._handles = itertools.count(0x1000)
        self._streams: dict[int, _Stream] = {}
        self._events: dict[int, _Event] = {}
        self._contexts: dict[int, _Context] = {}
        self._devices: dict[int, _DeviceState] = {}
        self._registered_host: OrderedDict[int, None] = OrderedDict()
        self._local = threading.local()
        self.capture = CaptureRules(self)
        self.view_writeback = ViewWriteback()
        """View shapes operators write back at completion (:mod:`acl_core.runtime.view_writeback`)."""

    # ----------------------------------------------------------------- lifecycle
    @acl_entry("aclInit", needs_init=False)
    def init(self, config_path: CStr = None) -> None:
        """aclInit: once per process; a second call raises ACL_ERROR_REPEAT_INITIALIZE.

        A config file must be readable JSON (ACL_ERROR_INVALID_FILE / ACL_ERROR_PARSE_FILE otherwise);
        its options (dump, profiling, op-queue size) configure Ascend tooling and are not applied here.
        The first explicit call succeeds even after the Pythonic layer initialised implicitly.
        """
        with self._lock:
            if self._initialized and not self._implicit:
                raise AclError(AclErrorCode.ACL_ERROR_REPEAT_INITIALIZE, "aclInit was already called")
            if config_path:
                try:
                    with open(config_path, encoding="utf-8") as fh:
                        text = fh.read()
                except OSError as exc:
                    raise AclError(AclErrorCode.ACL_ERROR_INVALID_FILE, f"cannot read {config_path}: {exc}") from None
                try:
                    json.loads(text or "{}")
                except ValueError as exc:
                    raise AclError(AclErrorCode.ACL_ERROR_PARSE_FILE, f"{config_path} is not JSON: {exc}") from None
            self._initialized = True
            self._implicit = False
            self._finalized = False

    @acl_entry("aclFinalize", needs_init=False)
    def finalize(self) -> None:
        """aclFinalize: releases every device; a call without aclInit raises REPEAT_FINALIZE."""
        with self._lock:
            if not self._initialized:
                code = (
                    AclErrorCode.ACL_ERROR_REPEAT_FINALIZE if self._finalized else AclErrorCode.ACL_ERROR_UNINITIALIZE
                )
                raise AclError(code, "aclFinalize without a matching aclInit")
            for device in list(self._devices):
                self._release_device(device)
            self._initialized = False
            self._implicit = False
            self._finalized = True

    @property
    def initialized(self) -> bool:
        """True between aclInit and aclFinalize."""
        return self._initialized

    # ----------------------------------------------------------------- devices and contexts
    def _state(self) -> _ThreadState:
        state = getattr(self._local, "state", None)
        if state is None:
            state = self._local.state = _ThreadState()
        return state

    @acl_entry("aclrtGetRunMode")
    def run_mode(self) -> RunMode:
        """aclrtGetRunMode: ACL_HOST, a program on a host driving devices."""
        return RunMode.ACL_HOST

    @acl_entry("aclrtGetDeviceCount")
    def device_count(self) -> int:
        """aclrtGetDeviceCount."""
        return self.driver.device_count()

    def _check_device_id(self, device_id: int) -> int:
        count = self.driver.device_count()
        if not isinstance(device_id, int) or not 0 <= device_id < count:
            raise AclError(
                RtErrorCode.ACL_ERROR_RT_INVALID_DEVICEID, f"device {device_id} does not exist ({count} present)"
            )
        return device_id

    @acl_entry("aclrtSetDevice")
    def set_device(self, device_id: Int32) -> None:
        """aclrtSetDevice: opens the device and makes its default context current for this thread."""
        with self._lock:
            self._check_device_id(device_id)
            state = self._devices.get(device_id)
            if state is None:
                self.driver.open_device(device_id)
                ctx = self._new_context(device_id, default=True)
                state = self._devices[device_id] = _DeviceState(default_context=ctx)
            else:
                self.driver.open_device(device_id)
            state.refcount += 1
            ts = self._state()
            ts.device, ts.context = device_id, state.default_context

    @acl_entry("aclrtGetDevice")
    def get_device(self) -> int:
        """aclrtGetDevice: the calling thread's current device."""
        ts = self._state()
        if ts.device is None:
            raise AclError(RtErrorCode.ACL_ERROR_RT_CONTEXT_NULL, "no device is set on this thread (call set_device)")
        return ts.device

    @acl_entry("aclrtResetDevice")
    def reset_device(self, device_id: Int32) -> None:
        """aclrtResetDevice: drops one reference; the last one releases every resource of the device."""
        with self._lock:
            self._check_device_id(device_id)
            state = self._devices.get(device_id)
            if state is None:
                raise AclError(RtErrorCode.ACL_ERROR_RT_INVALID_DEVICEID, f"device {device_id} was never set")
            state.refcount -= 1
            if state.refcount <= 0:
                self._release_device(device_id)

    def _release_device(self, device_id: int) -> None:
        self.driver.open_device(device_id)
        self.driver.synchronize_device()
        self._complete_device(device_id)
        for h in [h for h, s in self._streams.items() if s.device == device_id]:
            self.driver.destroy_stream(self._streams.pop(h).driver_stream)
        for h in [h for h, e in self._events.items() if e.device == device_id]:
            self.driver.destroy_event(self._events.pop(h).driver_event)
        for rng in self.memory.live(RangeKind.DEVICE, device_id):
            self.memory.remove(rng.start)
            self.driver.free(rng.start)
        state = self._devices.pop(device_id)
        for ctx in (state.default_context, *state.contexts):
            self._contexts.pop(ctx, None)
        self.driver.reset_device(device_id)
        ts = self._state()
        if ts.device == device_id:
            ts.device = ts.context = None

    @acl_entry("aclrtSynchronizeDevice")
    def synchronize_device(self) -> None:
        """aclrtSynchronizeDevice (refused while a stream of the device captures)."""
        device = self._require_device()
        if self.capture.recording:
            self.capture.check_device_blocking(device, "aclrtSynchronizeDevice")
        self.driver.synchronize_device()
        self._complete_device(device)

    def _complete_device(self, device: int) -> None:
        """Apply the view write-backs of the streams of ``device`` (its default stream too), all synchronised."""
        with self._lock:
            mine = [s.driver_stream for s in self._streams.values() if s.device == device]
        mine.append(self.driver.default_stream())
        self.view_writeback.complete_all(lambda stream: any(stream == m for m in mine))

    def _new_context(self, device_id: int, default: bool) -> int:
        handle = next(self._handles)
        self._contexts[handle] = _Context(handle, device_id, default)
        return handle

    @acl_entry("aclrtCreateContext")
    def create_context(self, device_id: Int32) -> int:
        """aclrtCreateContext: a new context on ``device_id``, made current for this thread."""
        with self._lock:
            self._check_device_id(device_id)
            if device_id not in self._devices:
                self.set_device(device_id)
            handle = self._new_context(device_id, default=False)
            self._devices[device_id].contexts.add(handle)
            ts = self._state()
            ts.device, ts.context = device_id, handle
            self.driver.open_device(device_id)
            return handle

    def _context(self, handle: int | None) -> _Context:
        ctx = self._contexts.get(int(handle or 0))
        if ctx is None:
            raise AclError(RtErrorCode.ACL_ERROR_RT_CONTEXT_NULL, f"context {handle!r} does not exist or was destroyed")
        return ctx

    @acl_entry("aclrtDestroyContext")
    def destroy_context(self, handle: Handle) -> None:
        """aclrtDestroyContext (the default context of a device cannot be destroyed)."""
        with self._lock:
            ctx = self._context(handle)
            if ctx.default:
                raise _invalid("the default context is released by reset_device, not destroy_context")
            del self._contexts[ctx.handle]
            self._devices[ctx.device].contexts.discard(ctx.handle)
            ts = self._state()
            if ts.context == ctx.handle:
                ts.context = self._devices[ctx.device].default_context

    @acl_entry("aclrtSetCurrentContext")
    def set_context(self, handle: Handle) -> None:
        """aclrtSetCurrentContext: switches the thread's current context (and device)."""
        with self._lock:
            ctx = self._context(handle)
            self.driver.open_device(ctx.device)
            ts = self._state()
            ts.device, ts.context = ctx.device, ctx.handle

    @acl_entry("aclrtGetCurrentContext")
    def get_context(self) -> int:
        """aclrtGetCurrentContext."""
        ts = self._state()
        if ts.context is None:
            raise AclError(RtErrorCode.ACL_ERROR_RT_CONTEXT_NULL, "no current context on this thread")
        return ts.context

    def ensure_device(self, device_id: int = 0) -> int:
        """The thread's current device, setting ``device_id`` first if none is set (for the Pythonic layer).

        The Pythonic layer needs no acl.init: this initialises the runtime implicitly when nobody has.
        """
        with self._lock:
            if not self._initialized:
                self.init()
                self._implicit = True
        if self._state().device is None:
            self.set_device(device_id)
        return self.get_device()

    def _require_device(self) -> int:
        device = self._state().device
        if device is None:
            raise AclError(RtErrorCode.ACL_ERROR_RT_CONTEXT_NULL, "no device is set on this thread (call set_device)")
        return device

    # ----------------------------------------------------------------- memory
    @acl_entry("aclrtMalloc")
    def malloc(self, size: SizeT, policy: CEnum = MemMallocPolicy.ACL_MEM_MALLOC_HUGE_FIRST) -> int:
        """aclrtMalloc: 64-byte aligned device memory, uninitialised; size 0 is refused."""
        device = self._require_device()
        if size <= 0:
            raise _invalid(f"malloc size must be positive, not {size}")
        base = policy & ~MALLOC_POLICY_FLAGS
        if base not in MemMallocPolicy.__members__.values() and base > 0xFF:
            raise _invalid(f"unknown malloc policy {policy:#x}")
        with self._lock:
            address = self._allocate(self.driver.alloc, malloc_capacity(size), "device")
            self.memory.add(Range(address, size, RangeKind.DEVICE, device))
            return address

    @acl_entry("aclrtMallocHost")
    def malloc_host(self, size: SizeT) -> int:
        """aclrtMallocHost: page-locked host memory, required for async copies."""
        if size <= 0:
            raise _invalid(f"malloc_host size must be positive, not {size}")
        with self._lock:
            address = self._allocate(self.driver.alloc_host, size, "page-locked host")
            self.memory.add(Range(address, size, RangeKind.HOST_PINNED, -1))
            return address

    @staticmethod
    def _allocate(alloc: Callable[[int], int], nbytes: int, what: str) -> int:
        """Ask the driver for memory; a size no address space holds, or host exhaustion, is 207001."""
        if nbytes > MAX_ALLOCATION:
            raise AclError(
                RtErrorCode.ACL_ERROR_RT_MEMORY_ALLOCATION,
                f"cannot allocate {nbytes} bytes of {what} memory: more than an address space holds",
            )
        try:
            return alloc(nbytes)
        except MemoryError:
            raise AclError(
                RtErrorCode.ACL_ERROR_RT_MEMORY_ALLOCATION, f"out of memory allocating {nbytes} bytes of {what} memory"
            ) from None

    def _free(self, pointer: int | None, kind: RangeKind, call: str) -> Range:
        address = pointer or 0
        rng = self.memory.exact(address)
        if rng is None or rng.kind is not kind:
            freed = bool(address) and self.memory.was_freed(address)
            why = "was already freed" if freed else f"is not the start of memory from {call.replace('free', 'malloc')}"
            raise AclError(RtErrorCode.ACL_ERROR_RT_MEMORY_FREE, f"{call}({address:#x}): the pointer {why}")
        return self.memory.remove(rng.start)

    @acl_entry("aclrtFree")
    def free(self, address: Ptr) -> None:
        """aclrtFree: double free and foreign pointers raise ACL_ERROR_RT_MEMORY_FREE."""
        with self._lock:
            self._free(address, RangeKind.DEVICE, "free")
            self.driver.free(address or 0)

    @acl_entry("aclrtFreeHost")
    def free_host(self, address: Ptr) -> None:
        """aclrtFreeHost."""
        with self._lock:
            self._free(address, RangeKind.HOST_PINNED, "free_host")
            self.driver.free_host(address or 0)

    def register_host(self, address: int, nbytes: int, keepalive: object) -> None:
        """Record pageable host memory handed out by acl.util (the most recent 4096 are kept).

        Memory the runtime already knows keeps its entry: a view of malloc_host memory stays
        page-locked (and freeable by free_host), a view inside a registered buffer stays that buffer's.
        """
        with self._lock:
            known = self.memory.find(address)
            if known is not None and address + nbytes <= known.end:
                if known.kind is RangeKind.HOST and known.start in self._registered_host:
                    self._registered_host.move_to_end(known.start)
                return
            if known is not None and known.start == address:
                if known.kind is not RangeKind.HOST:
                    raise _invalid(
                        f"host buffer {address:#x} + {nbytes} bytes runs past the end of the "
                        f"{known.size}-byte {known.kind.value} allocation it starts"
                    )
                self.memory.remove(address)  # a larger buffer at the same start supersedes the smaller one
            self._registered_host[address] = None
            self._registered_host.move_to_end(address)
            self.memory.add(Range(address, nbytes, RangeKind.HOST, -1, keepalive))
            while len(self._registered_host) > _REGISTERED_HOST_LIMIT:
                old, _ = self._registered_host.popitem(last=False)
                if (rng := self.memory.exact(old)) is not None and rng.kind is RangeKind.HOST:
                    self.memory.remove(old)

    def register_device(self, address: int, nbytes: int, keepalive: object) -> None:
        """Record device memory owned by another framework (DLPack import)."""
        with self._lock:
            self.memory.add(Range(address, nbytes, RangeKind.EXTERNAL_DEVICE, self._require_device(), keepalive))

    def unregister(self, address: int) -> None:
        """Forget a registered range (never an allocation: those are released by free / free_host)."""
        with self._lock:
            rng = self.memory.exact(address)
            if rng is not None and rng.kind in (RangeKind.HOST, RangeKind.EXTERNAL_DEVICE):
                self.memory.remove(address)
            self._registered_host.pop(address, None)

    def device_range(self, address: int, nbytes: int, what: str) -> Range:
        """Check that [address, address + nbytes) is live device memory; used to vet tensor data."""
        rng = self.memory.resolve(address, max(nbytes, 1), what)
        if not rng.kind.on_device:
            raise _invalid(f"{what} {address:#x} is host memory, not device memory")
        return rng

    def _direction(
        self,
        dst: int | None,
        dest_max: int,
        src: int | None,
        count: int,
        kind: int,
        *,
        pinned_only: bool,
        src_count: int | None = None,
    ) -> CopyDirection:
        if count > dest_max:
            raise _invalid(f"count {count} exceeds destMax {dest_max}")
        try:
            kind = MemcpyKind(kind)
        except ValueError:
            raise _invalid(f"unknown memcpy kind {kind!r}") from None
        d = self.memory.resolve(dst or 0, count, "dst")
        s = self.memory.resolve(src or 0, count if src_count is None else src_count, "src")
        actual = _DIRECTIONS[(s.kind.on_device, d.kind.on_device)]
        if kind is not MemcpyKind.ACL_MEMCPY_DEFAULT and _KIND_DIRECTION[kind] is not actual:
            raise AclError(
                RtErrorCode.ACL_ERROR_RT_INVALID_MEMORY_TYPE,
                f"memcpy kind {kind.name} contradicts the addresses: "
                f"src is {s.kind.value} memory, dst is {d.kind.value} memory",
            )
        if pinned_only:
            if actual is CopyDirection.HOST_TO_HOST:
                raise AclError(
                    RtErrorCode.ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "host-to-host copies cannot be asynchronous"
                )
            for rng, name in ((s, "src"), (d, "dst")):
                if rng.kind is RangeKind.HOST:
                    self.capture.check_unsafe(f"an async copy with pageable {name} memory")
                    raise _invalid(f"{name} of an async copy must be page-locked memory from malloc_host")
        return actual

    @acl_entry("aclrtMemcpy")
    def memcpy(self, dst: Ptr, dest_max: SizeT, src: Ptr, count: SizeT, kind: CEnum) -> None:
        """aclrtMemcpy: synchronous; kind must agree with the addresses unless it is DEFAULT."""
        self.capture.check_unsafe("aclrtMemcpy")
        with self._lock:
            direction = self._direction(dst, dest_max, src, count, kind, pinned_only=False)
            if count:
                self.driver.copy(dst or 0, src or 0, count, direction, None)

    @acl_entry("aclrtMemcpyAsync")
    def memcpy_async(self, dst: Ptr, dest_max: SizeT, src: Ptr, count: SizeT, kind: CEnum, stream: Handle) -> None:
        """aclrtMemcpyAsync: enqueued on ``stream``; host memory must come from malloc_host."""
        with self._lock:
            direction = self._direction(dst, dest_max, src, count, kind, pinned_only=True)
            s = self.stream(stream)
            if self.capture.recording:
                self.capture.log(stream, "aclrtMemcpyAsync")
            if count:
                self.driver.copy(dst or 0, src or 0, count, direction, s)

    @acl_entry("aclrtMemcpy2d")
    def memcpy2d(
        self, dst: Ptr, dpitch: SizeT, src: Ptr, spitch: SizeT, width: SizeT, height: SizeT, kind: CEnum
    ) -> None:
        """aclrtMemcpy2d: ``height`` rows of ``width`` bytes between pitched buffers."""
        self.capture.check_unsafe("aclrtMemcpy2d")
        if width > dpitch or width > spitch:
            raise _invalid(f"width {width} exceeds a pitch (dpitch {dpitch}, spitch {spitch})")
        if height == 0 or width == 0:
            return
        with self._lock:
            d_extent = dpitch * (height - 1) + width
            s_extent = spitch * (height - 1) + width
            direction = self._direction(dst, d_extent, src, d_extent, kind, pinned_only=False, src_count=s_extent)
            for row in range(height):
                self.driver.copy((dst or 0) + row * dpitch, (src or 0) + row * spitch, width, direction, None)

    def _memset_target(self, address: int | None, max_count: int, count: int) -> None:
        if count > max_count:
            raise _invalid(f"count {count} exceeds maxCount {max_count}")
        rng = self.memory.resolve(address or 0, count, "devPtr")
        if not rng.kind.on_device and rng.kind is not RangeKind.HOST_PINNED:
            raise _invalid("memset needs device memory or page-locked host memory")

    @acl_entry("aclrtMemset")
    def memset(self, address: Ptr, max_count: SizeT, value: Int32, count: SizeT) -> None:
        """aclrtMemset: fills ``count`` bytes with the low byte of ``value``."""
        self.capture.check_unsafe("aclrtMemset")
        with self._lock:
            self._memset_target(address, max_count, count)
            if count:
                self.driver.memset(address or 0, value & 0xFF, count, None)

    @acl_entry("aclrtMemsetAsync")
    def memset_async(self, address: Ptr, max_count: SizeT, value: Int32, count: SizeT, stream: Handle) -> None:
        """aclrtMemsetAsync."""
        with self._lock:
            self._memset_target(address, max_count, count)
            s = self.stream(stream)
            if self.capture.recording:
                self.capture.log(stream, "aclrtMemsetAsync")
            if count:
                self.driver.memset(address or 0, value & 0xFF, count, s)

    @acl_entry("aclrtCmoAsync")
    def cmo_async(self, src: Ptr, size: SizeT, cmo_type: CEnum, stream: Handle) -> None:
        """aclrtCmoAsync: a cache operation on device bytes of the current device, enqueued on ``stream``.

        Only ACL_RT_CMO_TYPE_PREFETCH is supported (as CANN documents): an unknown type is 100000, a
        known other one 207000. ``src``..``src + size`` must lie in one live allocation of the current
        device (100000 otherwise); size 0 enqueues nothing. Allowed under stream capture (a stream task).
        """
        device = self._require_device()
        try:
            kind = CmoType(cmo_type)
        except ValueError:
            raise _invalid(f"unknown aclrtCmoType {cmo_type!r}") from None
        if kind is not CmoType.ACL_RT_CMO_TYPE_PREFETCH:
            raise AclError(
                RtErrorCode.ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                f"aclrtCmoAsync supports only ACL_RT_CMO_TYPE_PREFETCH, not {kind.name}",
            )
        with self._lock:
            rng = self.memory.resolve(src or 0, max(size, 1), "src")
            if not rng.kind.on_device:
                raise _invalid(f"src {src:#x} of aclrtCmoAsync is {rng.kind.value} memory, not device memory")
            if rng.device != device:
                raise _invalid(f"src {src:#x} is memory of device {rng.device}, not of the current device {device}")
            s = self.stream(stream)
            if self.capture.recording:
                self.capture.log(stream, "aclrtCmoAsync")
            if size:
                self.driver.cmo_prefetch(src or 0, size, s)

    @acl_entry("aclrtGetMemInfo")
    def get_mem_info(self, attr: CEnum) -> tuple[int, int]:
        """aclrtGetMemInfo: (free, total) of the current device for any aclrtMemAttr."""
        self._require_device()
        try:
            MemAttr(attr)
        except ValueError:
            raise _invalid(f"unknown memory attribute {attr!r}") from None
        return self.driver.mem_info()

    # ----------------------------------------------------------------- streams
    def _lookup(self, table: dict[int, _T], handle: int | None, what: str) -> _T:
        item = table.get(int(handle or 0))
        if item is None:
            raise AclError(
                RtErrorCode.ACL_ERROR_RT_INVALID_HANDLE, f"{what} {handle!r} does not exist or was destroyed"
            )
        return item

    @acl_entry("aclrtCreateStream")
    def create_stream(self, priority: UInt32 = 0, flag: UInt32 = 0) -> int:
        """aclrtCreateStream(WithConfig) on the current device; priority and flags have no effect here."""
        device = self._require_device()
        with self._lock:
            handle = next(self._handles)
            self._streams[handle] = _Stream(handle, device, self.driver.create_stream())
            return handle

    def stream(self, handle: int | None) -> object:
        """The driver stream behind a handle; None or 0 is the current device's default stream.

        Other front ends (aclnn, HCCL) pass their callers' stream through here, so it is converted too.
        """
        handle = HANDLE.convert("stream", handle)
        if not handle:
            self._require_device()
            return self.driver.default_stream()
        return self._lookup(self._streams, handle, "stream").driver_stream

    @acl_entry("aclrtDestroyStream")
    def destroy_stream(self, handle: Handle) -> None:
        """aclrtDestroyStream: waits for the stream's work, then releases it."""
        with self._lock:
            s = self._lookup(self._streams, handle, "stream")
            self.capture.check_destroy_stream(s.handle)
            self.driver.synchronize_stream(s.driver_stream)
            self.view_writeback.complete(s.driver_stream)
            self.driver.destroy_stream(s.driver_stream)
            del self._streams[s.handle]

    @acl_entry("aclrtSynchronizeStream")
    def synchronize_stream(self, handle: Handle) -> None:
        """aclrtSynchronizeStream (107041 on a capturing stream, whose capture is then invalidated)."""
        s = self.stream(handle)
        if self.capture.recording:
            self.capture.check_blocking(handle, "aclrtSynchronizeStream")
        self.driver.synchronize_stream(s)
        self.view_writeback.complete(s)

    @acl_entry("aclrtStreamQuery")
    def stream_query(self, handle: Handle) -> StreamStatus:
        """aclrtStreamQuery (107041 on a capturing stream, whose capture is then invalidated)."""
        s = self.stream(handle)
        if self.capture.recording:
            self.capture.check_blocking(handle, "aclrtStreamQuery")
        done = self.driver.stream_done(s)
        return StreamStatus.ACL_STREAM_STATUS_COMPLETE if done else StreamStatus.ACL_STREAM_STATUS_NOT_READY

    @acl_entry("aclrtStreamWaitEvent")
    def stream_wait_event(self, stream: Handle, event: Handle) -> None:
        """aclrtStreamWaitEvent: later work on ``stream`` waits for ``event``."""
        e = self._lookup(self._events, event, "event")
        s = self.stream(stream)
        with self._lock:
            self.capture.on_wait(stream, e.handle, e.recorded)
            self.driver.stream_wait_event(s, e.driver_event)

    # ----------------------------------------------------------------- events
    @acl_entry("aclrtCreateEvent")
    def create_event(self, flag: UInt32 = 0) -> int:
        """aclrtCreateEvent(WithFlag) on the current device; every event times here, whatever the flag."""
        device = self._require_device()
        with self._lock:
            handle = next(self._handles)
            self._events[handle] = _Event(handle, device, self.driver.create_event())
            return handle

    @acl_entry("aclrtDestroyEvent")
    def destroy_event(self, handle: Handle) -> None:
        """aclrtDestroyEvent."""
        with self._lock:
            e = self._lookup(self._events, handle, "event")
            self.driver.destroy_event(e.driver_event)
            del self._events[e.handle]

    @acl_entry("aclrtRecordEvent")
    def record_event(self, event: Handle, stream: Handle) -> None:
        """aclrtRecordEvent."""
        e = self._lookup(self._events, event, "event")
        s = self.stream(stream)
        with self._lock:
            self.capture.on_record(e.handle, stream)
            self.driver.record_event(e.driver_event, s)
            e.recorded = True

    @acl_entry("aclrtResetEvent")
    def reset_event(self, event: Handle, stream: Handle) -> None:
        """aclrtResetEvent: the event counts as not recorded again."""
        e = self._lookup(self._events, event, "event")
        self.stream(stream)
        e.recorded = False

    @acl_entry("aclrtSynchronizeEvent")
    def synchronize_event(self, event: Handle) -> None:
        """aclrtSynchronizeEvent (an event never recorded completes at once)."""
        e = self._lookup(self._events, event, "event")
        self.capture.check_event_usable(e.handle, "aclrtSynchronizeEvent")
        if e.recorded:
            self.driver.synchronize_event(e.driver_event)

    @acl_entry("aclrtQueryEvent")
    def query_event(self, event: Handle) -> EventStatus:
        """aclrtQueryEvent."""
        e = self._lookup(self._events, event, "event")
        self.capture.check_event_usable(e.handle, "aclrtQueryEvent")
        done = not e.recorded or self.driver.event_done(e.driver_event)
        return EventStatus.ACL_EVENT_STATUS_COMPLETE if done else EventStatus.ACL_EVENT_STATUS_NOT_READY

    @acl_entry("aclrtQueryEventStatus")
    def query_event_status(self, event: Handle) -> EventRecordedStatus:
        """aclrtQueryEventStatus (recorded-status order: NOT_READY=0, COMPLETE=1)."""
        e = self._lookup(self._events, event, "event")
        self.capture.check_event_usable(e.handle, "aclrtQueryEventStatus")
        done = e.recorded and self.driver.event_done(e.driver_event)
        return (
            EventRecordedStatus.ACL_EVENT_RECORDED_STATUS_COMPLETE
            if done
            else EventRecordedStatus.ACL_EVENT_RECORDED_STATUS_NOT_READY
        )

    @acl_entry("aclrtEventElapsedTime")
    def event_elapsed_time(self, start: Handle, end: Handle) -> float:
        """aclrtEventElapsedTime in milliseconds; both events must have been recorded."""
        s = self._lookup(self._events, start, "start event")
        e = self._lookup(self._events, end, "end event")
        self.capture.check_event_usable(s.handle, "aclrtEventElapsedTime")
        self.capture.check_event_usable(e.handle, "aclrtEventElapsedTime")
        if not (s.recorded and e.recorded):
            raise AclError(
                RtErrorCode.ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID, "both events must be recorded before timing"
            )
        if not (self.driver.event_done(s.driver_event) and self.driver.event_done(e.driver_event)):
            raise AclError(
                RtErrorCode.ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID, "synchronize the events before timing them"
            )
        return self.driver.elapsed_ms(s.driver_event, e.driver_event)

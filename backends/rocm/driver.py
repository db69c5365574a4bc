"""The acl Driver of the HIP backend: every primitive is one provider call on real device memory.

Async copies need page-locked host memory (``alloc_host`` → cudaMallocHost / hipHostMalloc); the
shared runtime refuses pageable memory for them before the driver sees the call. Streams and events
are the provider's integer handles; a null acl stream is the device's default stream.
"""

from __future__ import annotations

import bisect
import ctypes
import threading

from acl_core.errors import AclnnError, AclnnStatus
from acl_core.spec.runtime import CopyDirection, Driver
from acl_rocm.providers.base import RuntimeProvider


def handle(obj: object) -> int:
    """The integer value of a provider handle (stream or event) the shared runtime passed back."""
    return int(obj)  # type: ignore[call-overload]


class RocmDriver(Driver):
    """Device primitives over a :class:`~acl_rocm.providers.base.RuntimeProvider`."""

    def __init__(self, provider: RuntimeProvider) -> None:
        self.provider = provider
        self._lock = threading.Lock()
        self._pinned_starts: list[int] = []
        self._pinned: dict[int, int] = {}
        self._count: int | None = None
        self._checks: dict[int, list[tuple[int, str]]] = {}

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
        self.provider.memcpy(dst, src, nbytes, direction, None if stream is None else handle(stream))

    def memset(self, dst: int, value: int, nbytes: int, stream: object | None) -> None:
        """Fill device bytes (or page-locked host bytes) with ``value & 0xFF``."""
        if self.is_pinned(dst):
            if stream is not None:
                self.provider.stream_synchronize(handle(stream))
            ctypes.memset(dst, value & 0xFF, nbytes)
            return
        self.provider.memset(dst, value, nbytes, None if stream is None else handle(stream))

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
        """
        with self._lock:
            self._checks.setdefault(stream, []).append((flag, message))

    def _drain(self, stream: int, report: bool) -> None:
        with self._lock:
            checks = self._checks.pop(stream, [])
        failed: str | None = None
        for flag, message in checks:
            value = ctypes.c_int32(0)
            self.provider.memcpy(ctypes.addressof(value), flag, 4, CopyDirection.DEVICE_TO_HOST, None)
            self.provider.free_async(flag, stream)
            if value.value and failed is None:
                failed = message
        if failed is not None and report:
            raise AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, failed)

    def stream_done(self, stream: object) -> bool:
        """True when the stream has no pending work."""
        return self.provider.stream_query(handle(stream))

    def stream_wait_event(self, stream: object, event: object) -> None:
        """Later work on ``stream`` waits for ``event``."""
        self.provider.stream_wait_event(handle(stream), handle(event))

    def create_event(self) -> object:
        """A new timing event."""
        return self.provider.event_create()

    def destroy_event(self, event: object) -> None:
        """Release an event."""
        self.provider.event_destroy(handle(event))

    def record_event(self, event: object, stream: object) -> None:
        """Record ``event`` on ``stream``."""
        self.provider.event_record(handle(event), handle(stream))

    def synchronize_event(self, event: object) -> None:
        """Wait for the event's recording."""
        self.provider.event_synchronize(handle(event))

    def event_done(self, event: object) -> bool:
        """True when the recording has completed."""
        return self.provider.event_query(handle(event))

    def elapsed_ms(self, start: object, end: object) -> float:
        """Milliseconds between two completed recordings."""
        return self.provider.event_elapsed_ms(handle(start), handle(end))

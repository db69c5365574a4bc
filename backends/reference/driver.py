"""The reference device: a private address space of NumPy buffers, and streams that run eagerly.

Device addresses live at and above ``DEVICE_BASE`` (2**62), a range no x86-64 or AArch64 process can
map, so a device pointer can never be mistaken for host memory. Addresses are never reused, and
allocations are separated by guard gaps, so stale and stray pointers stay detectable. Work enqueued
on a stream runs at once; events record the host clock, which keeps every ordering guarantee of the
acl contract.
"""

from __future__ import annotations

import bisect
import ctypes
import os
import threading
import time
from dataclasses import dataclass

import numpy as np

from acl_core.errors import AclError, RtErrorCode
from acl_core.spec.runtime import CopyDirection, Driver

DEVICE_BASE = 1 << 62
ALIGN = 64
GUARD = 4096
DEFAULT_DEVICES = 8
DEFAULT_MEMORY = 64 << 30


@dataclass
class ReferenceStream:
    """A reference stream: work runs eagerly; only its identity matters."""

    device: int
    default: bool = False


@dataclass
class ReferenceEvent:
    """A reference event: the host time (ns) of its last recording."""

    device: int
    timestamp_ns: int | None = None


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
        """Drop the buffer at ``address``."""
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
        """Copy at once (streams are eager)."""
        src_dev = direction in (CopyDirection.DEVICE_TO_HOST, CopyDirection.DEVICE_TO_DEVICE)
        dst_dev = direction in (CopyDirection.HOST_TO_DEVICE, CopyDirection.DEVICE_TO_DEVICE)
        np.copyto(self._bytes(dst, nbytes, dst_dev), self._bytes(src, nbytes, src_dev))

    def memset(self, dst: int, value: int, nbytes: int, stream: object | None) -> None:
        """Fill bytes at once."""
        target = self.device_bytes(dst, nbytes) if dst >= DEVICE_BASE else self.host_bytes(dst, nbytes)
        target.fill(value & 0xFF)

    def mem_info(self) -> tuple[int, int]:
        """(free, total) of the current device's budget (``ACL_REFERENCE_MEMORY``, default 64 GiB)."""
        return self.capacity - self._used.get(self.current, 0), self.capacity

    # ------------------------------------------------------------------ streams and events
    def create_stream(self) -> object:
        """A new eager stream."""
        return ReferenceStream(self.current)

    def default_stream(self) -> object:
        """The current device's default stream."""
        return self._default_streams[self.current]

    def destroy_stream(self, stream: object) -> None:
        """Nothing to release."""

    def synchronize_stream(self, stream: object) -> None:
        """Work already ran."""

    def stream_done(self, stream: object) -> bool:
        """Always complete: work runs when enqueued."""
        return True

    def stream_wait_event(self, stream: object, event: object) -> None:
        """Already satisfied: the recorded work has run."""

    def create_event(self) -> object:
        """A new event."""
        return ReferenceEvent(self.current)

    def destroy_event(self, event: object) -> None:
        """Nothing to release."""

    def record_event(self, event: object, stream: object) -> None:
        """Stamp the host clock."""
        assert isinstance(event, ReferenceEvent)
        event.timestamp_ns = time.perf_counter_ns()

    def synchronize_event(self, event: object) -> None:
        """Recorded work already ran."""

    def event_done(self, event: object) -> bool:
        """Complete once recorded."""
        return True

    def elapsed_ms(self, start: object, end: object) -> float:
        """Milliseconds between two host timestamps."""
        assert isinstance(start, ReferenceEvent) and isinstance(end, ReferenceEvent)
        if start.timestamp_ns is None or end.timestamp_ns is None:
            raise AclError(RtErrorCode.ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID, "event was never recorded")
        return (end.timestamp_ns - start.timestamp_ns) / 1e6

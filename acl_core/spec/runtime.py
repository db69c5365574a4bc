"""The acl runtime contract: its enums, and the driver primitives a backend implements.

acl-core keeps the runtime's *semantics* (initialisation, current device, handle tables, size and
alignment rules, pointer and bounds checks, misuse codes) in one shared place,
:mod:`acl_core.runtime`. A backend only supplies a :class:`Driver`: an allocator, copies, memset,
streams and events, in the manner of a tinygrad device.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from enum import IntEnum


class MemcpyKind(IntEnum):
    """aclrtMemcpyKind."""

    ACL_MEMCPY_HOST_TO_HOST = 0
    ACL_MEMCPY_HOST_TO_DEVICE = 1
    ACL_MEMCPY_DEVICE_TO_HOST = 2
    ACL_MEMCPY_DEVICE_TO_DEVICE = 3
    ACL_MEMCPY_DEFAULT = 4
    ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE = 5
    ACL_MEMCPY_INNER_DEVICE_TO_DEVICE = 6
    ACL_MEMCPY_INTER_DEVICE_TO_DEVICE = 7


class MemMallocPolicy(IntEnum):
    """aclrtMemMallocPolicy (low bits; the flags below may be OR-ed in)."""

    ACL_MEM_MALLOC_HUGE_FIRST = 0
    ACL_MEM_MALLOC_HUGE_ONLY = 1
    ACL_MEM_MALLOC_NORMAL_ONLY = 2
    ACL_MEM_MALLOC_HUGE_FIRST_P2P = 3
    ACL_MEM_MALLOC_HUGE_ONLY_P2P = 4
    ACL_MEM_MALLOC_NORMAL_ONLY_P2P = 5
    ACL_MEM_MALLOC_HUGE1G_ONLY = 6
    ACL_MEM_MALLOC_HUGE1G_ONLY_P2P = 7


ACL_MEM_TYPE_LOW_BAND_WIDTH = 0x0100
ACL_MEM_TYPE_HIGH_BAND_WIDTH = 0x1000
ACL_MEM_ACCESS_USER_SPACE_READONLY = 0x100000
MALLOC_POLICY_FLAGS = ACL_MEM_TYPE_LOW_BAND_WIDTH | ACL_MEM_TYPE_HIGH_BAND_WIDTH | ACL_MEM_ACCESS_USER_SPACE_READONLY


class MemAttr(IntEnum):
    """aclrtMemAttr, the memory kinds aclrtGetMemInfo reports on."""

    ACL_DDR_MEM = 0
    ACL_HBM_MEM = 1
    ACL_DDR_MEM_HUGE = 2
    ACL_DDR_MEM_NORMAL = 3
    ACL_HBM_MEM_HUGE = 4
    ACL_HBM_MEM_NORMAL = 5
    ACL_DDR_MEM_P2P_HUGE = 6
    ACL_DDR_MEM_P2P_NORMAL = 7
    ACL_HBM_MEM_P2P_HUGE = 8
    ACL_HBM_MEM_P2P_NORMAL = 9
    ACL_HBM_MEM_HUGE1G = 10
    ACL_HBM_MEM_P2P_HUGE1G = 11
    ACL_MEM_NORMAL = 12
    ACL_MEM_HUGE = 13
    ACL_MEM_HUGE1G = 14
    ACL_MEM_P2P_NORMAL = 15
    ACL_MEM_P2P_HUGE = 16
    ACL_MEM_P2P_HUGE1G = 17


class StreamStatus(IntEnum):
    """aclrtStreamStatus."""

    ACL_STREAM_STATUS_COMPLETE = 0
    ACL_STREAM_STATUS_NOT_READY = 1


class EventStatus(IntEnum):
    """aclrtEventStatus (aclrtQueryEvent)."""

    ACL_EVENT_STATUS_COMPLETE = 0
    ACL_EVENT_STATUS_NOT_READY = 1


class EventRecordedStatus(IntEnum):
    """aclrtEventRecordedStatus (aclrtQueryEventStatus): note the order is reversed."""

    ACL_EVENT_RECORDED_STATUS_NOT_READY = 0
    ACL_EVENT_RECORDED_STATUS_COMPLETE = 1


class RunMode(IntEnum):
    """aclrtRunMode."""

    ACL_DEVICE = 0
    ACL_HOST = 1


class CaptureMode(IntEnum):
    """aclmdlRICaptureMode: which threads may make capture-unsafe calls while a stream captures."""

    ACL_MODEL_RI_CAPTURE_MODE_GLOBAL = 0
    ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL = 1
    ACL_MODEL_RI_CAPTURE_MODE_RELAXED = 2


class CaptureStatus(IntEnum):
    """aclmdlRICaptureStatus (aclmdlRICaptureGetInfo)."""

    ACL_MODEL_RI_CAPTURE_STATUS_NONE = 0
    ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE = 1
    ACL_MODEL_RI_CAPTURE_STATUS_INVALIDATED = 2


class CmoType(IntEnum):
    """aclrtCmoType: the cache maintenance operation of aclrtCmoAsync (only PREFETCH is supported by CANN)."""

    ACL_RT_CMO_TYPE_PREFETCH = 0
    ACL_RT_CMO_TYPE_WRITEBACK = 1
    ACL_RT_CMO_TYPE_INVALID = 2
    ACL_RT_CMO_TYPE_FLUSH = 3


class CopyDirection(IntEnum):
    """A resolved copy direction, as a driver receives it (never DEFAULT)."""

    HOST_TO_HOST = 0
    HOST_TO_DEVICE = 1
    DEVICE_TO_HOST = 2
    DEVICE_TO_DEVICE = 3


class Driver(ABC):
    """Device primitives a backend provides; acl_core.runtime adds every acl rule on top.

    Addresses are plain ints. Stream and event objects are whatever the driver likes; the shared
    runtime hands users integer handles for them. Failures raise :class:`acl_core.errors.AclError`
    with the CANN code (vendor errors translated by the driver).
    """

    @abstractmethod
    def device_count(self) -> int:
        """Number of devices this driver can open."""

    @abstractmethod
    def open_device(self, device_id: int) -> None:
        """Make ``device_id`` current for the calling thread (cudaSetDevice-like)."""

    @abstractmethod
    def reset_device(self, device_id: int) -> None:
        """Release what the driver holds for ``device_id``."""

    @abstractmethod
    def alloc(self, nbytes: int) -> int:
        """Allocate device memory on the current device; the address is 64-byte aligned."""

    @abstractmethod
    def free(self, address: int) -> None:
        """Release an address that :meth:`alloc` returned."""

    @abstractmethod
    def alloc_host(self, nbytes: int) -> int:
        """Allocate page-locked host memory (64-byte aligned)."""

    @abstractmethod
    def free_host(self, address: int) -> None:
        """Release an address that :meth:`alloc_host` returned."""

    @abstractmethod
    def copy(self, dst: int, src: int, nbytes: int, direction: CopyDirection, stream: object | None) -> None:
        """Copy bytes; ``stream`` None means synchronous, otherwise enqueue on that stream."""

    @abstractmethod
    def memset(self, dst: int, value: int, nbytes: int, stream: object | None) -> None:
        """Fill device bytes with ``value & 0xFF``; ``stream`` None means synchronous."""

    @abstractmethod
    def mem_info(self) -> tuple[int, int]:
        """(free, total) bytes of the current device."""

    @abstractmethod
    def create_stream(self) -> object:
        """A new stream on the current device."""

    @abstractmethod
    def default_stream(self) -> object:
        """The current device's default stream (what a null aclrtStream means)."""

    @abstractmethod
    def destroy_stream(self, stream: object) -> None:
        """Release a stream made by :meth:`create_stream`."""

    @abstractmethod
    def synchronize_stream(self, stream: object) -> None:
        """Block until every task on ``stream`` has finished."""

    @abstractmethod
    def stream_done(self, stream: object) -> bool:
        """True when ``stream`` has no pending work."""

    @abstractmethod
    def stream_wait_event(self, stream: object, event: object) -> None:
        """Make later work on ``stream`` wait for ``event``'s last recording."""

    @abstractmethod
    def create_event(self) -> object:
        """A new event with timing enabled."""

    @abstractmethod
    def destroy_event(self, event: object) -> None:
        """Release an event."""

    @abstractmethod
    def record_event(self, event: object, stream: object) -> None:
        """Record ``event`` at the current tail of ``stream``."""

    @abstractmethod
    def synchronize_event(self, event: object) -> None:
        """Block until ``event``'s recording has completed."""

    @abstractmethod
    def event_done(self, event: object) -> bool:
        """True when ``event``'s recording has completed."""

    @abstractmethod
    def elapsed_ms(self, start: object, end: object) -> float:
        """Milliseconds between two completed recordings."""

    def synchronize_device(self) -> None:
        """Block until all work on the current device has finished."""
        self.synchronize_stream(self.default_stream())

    def cmo_prefetch(self, address: int, nbytes: int, stream: object) -> None:
        """Enqueue on ``stream`` a hint to bring device bytes [address, address + nbytes) into cache (aclrtCmoAsync).

        A cache hint: it changes no data, but it is a stream task like any other (ordered, captured and
        replayed). The runtime has checked the range against the current device's memory. A driver
        without it keeps this default and aclrtCmoAsync answers ACL_ERROR_RT_FEATURE_NOT_SUPPORT (207000).
        """
        raise _not_supported("cache prefetch (aclrtCmoAsync)")

    # ------------------------------------------------------------------ stream capture (optional)
    # The shared runtime keeps every aclmdlRI rule (capture state per stream, modes, task groups,
    # rejoin checks, refused calls); a driver only records and replays. A driver that cannot capture
    # keeps these defaults and the runtime answers ACL_ERROR_RT_FEATURE_NOT_SUPPORT (207000).

    def capture_begin(self, stream: object, mode: CaptureMode) -> None:
        """Start recording, not running, what is enqueued on ``stream`` (and on streams that join it through events)."""
        raise _not_supported("stream capture")

    def capture_end(self, stream: object) -> object:
        """Stop recording on ``stream``; returns an executable graph of the recorded work, in stream order."""
        raise _not_supported("stream capture")

    def graph_launch(self, graph: object, stream: object) -> None:
        """Enqueue one replay of a graph from :meth:`capture_end` on ``stream`` (asynchronously)."""
        raise _not_supported("stream capture")

    def graph_destroy(self, graph: object) -> None:
        """Release a graph from :meth:`capture_end`; replays already enqueued still complete (cudaGraphExecDestroy)."""
        raise _not_supported("stream capture")


def _not_supported(what: str) -> Exception:
    """The error a driver without ``what`` raises (ACL_ERROR_RT_FEATURE_NOT_SUPPORT)."""
    from acl_core.errors import AclError, RtErrorCode

    return AclError(RtErrorCode.ACL_ERROR_RT_FEATURE_NOT_SUPPORT, f"this backend's driver has no {what}")

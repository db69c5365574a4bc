"""Bookkeeping of every address range the runtime knows, so misuse is caught before a driver sees it."""

from __future__ import annotations

import bisect
from collections import OrderedDict
from dataclasses import dataclass, field
from enum import Enum

from acl_core.errors import AclError, AclErrorCode


class RangeKind(str, Enum):
    """Who owns an address range."""

    DEVICE = "device"  # acl.rt.malloc
    HOST_PINNED = "host-pinned"  # acl.rt.malloc_host
    HOST = "host"  # pageable host memory handed out by acl.util (bytes_to_ptr, numpy_to_ptr)
    EXTERNAL_DEVICE = "external-device"  # device memory imported through DLPack

    @property
    def on_device(self) -> bool:
        """True for device memory, imported or allocated."""
        return self in (RangeKind.DEVICE, RangeKind.EXTERNAL_DEVICE)


@dataclass
class Range:
    """One live range: [start, start + size)."""

    start: int
    size: int
    kind: RangeKind
    device: int
    keepalive: object = None
    live: bool = field(default=True, compare=False)
    """False once the range is removed from its map; a Range object stands for one allocation, never reused."""

    @property
    def end(self) -> int:
        """One past the last byte."""
        return self.start + self.size


_TOMBSTONES = 65536


class MemoryMap:
    """Live ranges sorted by start address, plus recently freed ones to name use-after-free."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._ranges: dict[int, Range] = {}
        self._freed: OrderedDict[int, int] = OrderedDict()
        self.generation = 0
        """Bumped on every change; validation cached under one generation stays true while it holds."""

    def add(self, rng: Range) -> None:
        """Record a live range; one that starts where a live range starts is refused, never replaced.

        Replacing would silently change what the older range is (page-locked memory would turn
        pageable, an allocation would stop being freeable) while its owner still holds it.
        """
        held = self._ranges.get(rng.start)
        if held is not None:
            raise AclError(
                AclErrorCode.ACL_ERROR_INTERNAL_ERROR,
                f"{rng.kind.value} range at {rng.start:#x} would replace the live {held.size}-byte "
                f"{held.kind.value} range there (remove it first)",
            )
        self.generation += 1
        self._freed.pop(rng.start, None)
        bisect.insort(self._starts, rng.start)
        self._ranges[rng.start] = rng

    def remove(self, start: int) -> Range:
        """Forget the live range that starts at ``start`` and remember it as freed."""
        self.generation += 1
        rng = self._ranges.pop(start)
        rng.live = False
        self._starts.pop(bisect.bisect_left(self._starts, start))
        self._freed[start] = rng.size
        if len(self._freed) > _TOMBSTONES:
            self._freed.popitem(last=False)
        return rng

    def exact(self, start: int) -> Range | None:
        """The live range that starts exactly at ``start``."""
        return self._ranges.get(start)

    def find(self, address: int) -> Range | None:
        """The live range that contains ``address`` (a zero-size range contains its start)."""
        i = bisect.bisect_right(self._starts, address) - 1
        while i >= 0:
            rng = self._ranges[self._starts[i]]
            if rng.start <= address < max(rng.end, rng.start + 1):
                return rng
            if rng.kind is not RangeKind.HOST:
                return None
            i -= 1  # pageable host buffers may nest (a slice of a registered array); look further
        return None

    def was_freed(self, address: int) -> bool:
        """True when ``address`` lies in a range freed recently."""
        for start, size in reversed(self._freed.items()):
            if start <= address < start + max(size, 1):
                return True
        return False

    def resolve(self, address: int, nbytes: int, what: str) -> Range:
        """The live range holding all of [address, address + nbytes), or an AclError naming the fault."""
        if not address:
            raise AclError(AclErrorCode.ACL_ERROR_INVALID_PARAM, f"{what} is a null pointer")
        rng = self.find(address)
        if rng is None:
            if self.was_freed(address):
                raise AclError(AclErrorCode.ACL_ERROR_INVALID_PARAM, f"{what} {address:#x} points into freed memory")
            raise AclError(
                AclErrorCode.ACL_ERROR_INVALID_PARAM,
                f"{what} {address:#x} is not memory from acl.rt.malloc, acl.rt.malloc_host or acl.util",
            )
        if address + nbytes > rng.end:
            raise AclError(
                AclErrorCode.ACL_ERROR_INVALID_PARAM,
                f"{what} {address:#x} + {nbytes} bytes runs {address + nbytes - rng.end} bytes past the end "
                f"of its {rng.size}-byte {rng.kind.value} allocation at {rng.start:#x}",
            )
        return rng

    def live(self, kind: RangeKind | None = None, device: int | None = None) -> list[Range]:
        """Live ranges, optionally of one kind and device."""
        return [
            r
            for r in self._ranges.values()
            if (kind is None or r.kind is kind) and (device is None or r.device == device)
        ]

"""The acl runtime semantics shared by every backend (see :class:`Runtime`)."""

from acl_core.runtime.memory_map import MemoryMap, Range, RangeKind
from acl_core.runtime.runtime import ALLOC_ALIGN, Runtime, malloc_capacity

__all__ = ["ALLOC_ALIGN", "MemoryMap", "Range", "RangeKind", "Runtime", "malloc_capacity"]

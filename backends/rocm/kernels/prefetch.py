"""Kernel generator of aclrtCmoAsync's prefetch: bring device bytes into L2 without changing them.

One kernel per method (``ACL_CMO_CONFIG``, :mod:`acl_rocm.prefetch` picks and launches it), each over
``units`` units of ``unit_bytes`` from ``base`` (``lo`` aligned down to the unit), asking only for what meets
the range [lo, hi) (a grid-stride loop: thread t takes units t, t + grid threads, ...):

* ``bulk`` (NVIDIA sm_90+): each thread issues ``cp.async.bulk.prefetch.L2.global`` for one unit (a TMA
  request of up to :data:`BULK_UNIT` bytes, 16-byte aligned, a multiple of 16 bytes); before sm_90 it
  asks for each 128-byte line of the unit with ``prefetch.global.L2``. ``base`` is aligned down to 16 bytes and
  the last request's end up to 16 bytes: never outside the allocation (GPU allocations are 256-byte aligned).
* ``lines`` (NVIDIA): one ``prefetch.global.L2`` per 128-byte line (a unit is a line).
* ``load`` (NVIDIA sm_80+: a 4-byte load per 32-byte sector with an L2 ``evict_last`` cache policy; a unit
  is a sector): the value lands in a PTX register the kernel never uses (``asm volatile`` keeps the load).
  The only method on AMD: HIP has no L2 prefetch instruction, so plain volatile loads warm the cache.

Every inline-PTX path is guarded by ``__CUDA_ARCH__``; elsewhere (HIP, the CPU emulator) each method reads
one byte of each 32-byte sector of the unit's part of [lo, hi) with volatile loads, so the emulator runs the
same grid and indexing, and reads no byte outside the range.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from acl_rocm.kernels.prelude import PRELUDE

METHODS: Final = ("bulk", "lines", "load")
BULK_UNIT: Final = 64 * 1024
"""Bytes one thread's bulk prefetch asks for: a 12.6 MB weight is ~190 requests, a few warps' worth."""
LINE: Final = 128
"""Bytes of an L2 line (``lines``: one prefetch each)."""
SECTOR: Final = 32
"""Bytes of an L2 sector (``load``: one load each)."""
THREADS: Final = {"bulk": 32, "lines": 256, "load": 256}
"""Threads per block of each method."""


def unit_bytes(method: str) -> int:
    """Bytes one thread handles per unit under ``method``."""
    return {"bulk": BULK_UNIT, "lines": LINE, "load": SECTOR}[method]


@dataclass(frozen=True)
class PrefetchKernel:
    """The prefetch kernel of one method."""

    method: str

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"unknown prefetch method {self.method!r} (one of {', '.join(METHODS)})")

    @property
    def kernel_name(self) -> str:
        """The kernel's symbol."""
        return f"acl_cmo_prefetch_{self.method}"

    def source(self) -> str:
        """The kernel source (PRELUDE + the method's body)."""
        return "\n".join([PRELUDE, _FALLBACK, _BODY[self.method].replace("NAME", self.kernel_name), ""])


_FALLBACK: Final = r"""
// HIP and the CPU emulator: read one byte of each 32-byte sector of [p, q) with volatile loads, whose values
// are folded into a sink nobody reads (volatile loads are never removed); never a byte outside [p, q)
ACL_DEV void acl_cmo_touch(const unsigned char* p, const unsigned char* q) {
  unsigned int sink = 0u;
  for (; p < q; p += 32) sink ^= *reinterpret_cast<const volatile unsigned char*>(p);
  (void)sink;
}
"""

_HEAD: Final = """extern "C" __global__ void __launch_bounds__({threads}) NAME(
    const unsigned char* base, const long long units, const long long unit_bytes, const unsigned char* lo,
    const unsigned char* hi) {{
  // unit i is [base + i * unit_bytes, + unit_bytes), base aligned down from lo; only what meets [lo, hi) is asked for
  const long long step = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < units; i += step) {{
    const unsigned char* p = base + i * unit_bytes;
    const unsigned char* q = p + unit_bytes < hi ? p + unit_bytes : hi;
"""

_TAIL: Final = """  }
}
"""

_BODY: Final = {
    "bulk": _HEAD.format(threads=THREADS["bulk"])
    + r"""#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // the 16-byte aligned hull of the unit's part of [lo, hi): p is 16-byte aligned, the size a multiple of 16
    const unsigned long long end = ((unsigned long long)q + 15ull) & ~15ull;
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"((unsigned int)(end - (unsigned long long)p))
                 : "memory");
#elif defined(__CUDA_ARCH__)
    for (; p < q; p += 128) asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#else
    acl_cmo_touch(p > lo ? p : lo, q);
#endif
"""
    + _TAIL,
    "lines": _HEAD.format(threads=THREADS["lines"])
    + r"""#if defined(__CUDA_ARCH__)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
    (void)q;
#else
    acl_cmo_touch(p > lo ? p : lo, q);
#endif
"""
    + _TAIL,
    "load": _HEAD.format(threads=THREADS["load"])
    + r"""#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    // the aligned word holding the sector's first byte of [lo, hi) (inside the same sector, so the allocation)
    const unsigned char* w = (const unsigned char*)((unsigned long long)(p > lo ? p : lo) & ~3ull);
    unsigned long long policy;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
    asm volatile("{ .reg .b32 v; ld.global.nc.L1::no_allocate.L2::cache_hint.u32 v, [%0], %1; }" ::"l"(w), "l"(policy));
    (void)q;
#else
    acl_cmo_touch(p > lo ? p : lo, q);
#endif
"""
    + _TAIL,
}

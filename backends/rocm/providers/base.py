"""The one seam between the shared HIP backend and a vendor runtime: :class:`RuntimeProvider`.

Like a tinygrad device, a provider is an allocator with a handful of primitives (allocate, copy,
fill), streams and events, a compiler (hipRTC or NVRTC), a module loader and a kernel launcher, the
device's properties, and a GEMM entry. Addresses, streams and events are plain ints (the vendor
handle's value), so nothing above the seam touches a vendor type. Every failure raises
:class:`~acl_core.errors.AclError` with the CANN code (see :mod:`acl_rocm.errors`).
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from acl_core.errors import AclError, RtErrorCode
from acl_core.spec.runtime import CopyDirection
from acl_rocm.plan_cache import PlanCache
from acl_rocm.providers.nccl import CollectiveLibrary

POOL_RELEASE_THRESHOLD_ENV = "ACL_POOL_RELEASE_THRESHOLD"
KEEP_EVERYTHING = 2**64 - 1


def pool_release_threshold() -> int:
    """Bytes of freed stream-ordered memory the device pool keeps across synchronisations (default: all of it).

    CUDA's and HIP's default of 0 gives every free block back at each synchronisation, so the next
    operator's workspace or temporary maps fresh pages; frameworks keep them (PyTorch's caching
    allocator does the same). ``ACL_POOL_RELEASE_THRESHOLD=0`` restores the platform default.
    """
    raw = os.environ.get(POOL_RELEASE_THRESHOLD_ENV, "").strip()
    if not raw:
        return KEEP_EVERYTHING
    try:
        value = int(raw)
    except ValueError as exc:
        raise ValueError(f"{POOL_RELEASE_THRESHOLD_ENV}={raw!r} is not a byte count") from exc
    if not 0 <= value <= KEEP_EVERYTHING:
        raise ValueError(f"{POOL_RELEASE_THRESHOLD_ENV}={raw!r} is outside 0..2^64-1")
    return value


@dataclass(frozen=True)
class DeviceProperties:
    """What the runtime reports about one device."""

    index: int
    name: str
    arch: str
    warp_size: int
    compute_units: int
    total_memory: int
    integrated: bool
    max_threads_per_block: int
    max_grid_x: int
    shared_memory_per_block: int
    l2_cache_bytes: int
    shared_memory_opt_in: int = 0
    """The most shared memory a block may use once its kernel opts in (0: no more than ``shared_memory_per_block``)."""

    @property
    def max_shared_memory(self) -> int:
        """The most shared memory (static plus dynamic) one block can be given here."""
        return max(self.shared_memory_per_block, self.shared_memory_opt_in)


@dataclass(frozen=True)
class Matrix:
    """One GEMM operand as a column-major BLAS library sees it (before its optional transpose).

    ``dtype`` is an aclDataType number; ``ld`` and ``batch_stride`` count elements; ``alignment`` is the
    largest power of two (at most 256) dividing the address, in bytes.
    """

    address: int
    dtype: int
    rows: int
    cols: int
    ld: int
    batch_stride: int = 0
    transpose: bool = False

    @property
    def alignment(self) -> int:
        """Bytes the address is aligned to (a power of two, at most 256)."""
        return min(self.address & -self.address, 256) if self.address else 256


@dataclass(frozen=True)
class GemmCall:
    """``D[i] = a_scale * b_scale * op(A[i]) @ op(B[i])`` for ``i < batch``, column-major (BLAS) terms.

    Floating operands accumulate in fp32; int8 operands accumulate exactly in int32 (D int32).
    ``fast_tf32`` lets fp32 operands use TF32-class matrix hardware (only with CANN_FAST_TF32=1).
    ``a_scale`` / ``b_scale`` are device addresses of one float32 each (0: none), the per-tensor
    scales of fp8 operands (cuBLASLt / hipBLASLt A and B scale pointers). fp8 and int8 operands need
    the "TN" form: ``a.transpose`` true and ``b.transpose`` false, leading dimensions of 16 bytes.
    """

    a: Matrix
    b: Matrix
    d: Matrix
    batch: int = 1
    fast_tf32: bool = False
    a_scale: int = 0
    b_scale: int = 0


@dataclass(frozen=True)
class GroupedGemmCall:
    """``D_g = op(A_g) @ B_g`` for ``g < groups`` in column-major (BLAS) terms, every size and address on the device.

    The M-axis grouped GEMM of GroupedMatmulV5: A_g the weight (N x K; stored K x N and ``transpose_a`` when the
    weight is [g, N, K]), B_g the group's x rows (K x M_g), D_g its out rows (N x M_g). ``pointers`` is a device
    array of ``3 * groups`` int64 addresses (A's, then B's, then D's); ``sizes`` one of ``6 * groups`` int32 (rows
    M_g, N, K, lda, ldb, ldd: one block of ``groups`` each); ``scalars`` two device float32 (alpha 1, beta 0).
    ``dtype`` (A, B) and ``out_dtype`` (D) are aclDataType numbers; products accumulate in fp32. ``rows_hint``
    (the rows all groups can cover) guides the library's choice of algorithm: the sizes stay on the device.
    ``alignments``: the bytes (a power of two, 16 to 256) every group's A, B and D address is a multiple of.
    """

    dtype: int
    out_dtype: int
    groups: int
    n: int
    k: int
    rows_hint: int
    transpose_a: bool
    pointers: int
    sizes: int
    scalars: int
    alignments: tuple[int, int, int] = (16, 16, 16)


class RuntimeProvider(ABC):
    """Vendor runtime primitives for one platform (one instance per process)."""

    platform: ClassVar[str]
    compiler_name: ClassVar[str]
    plan_cache: PlanCache | None = None
    """Where library plans persist across processes (the backend attaches its own; None: not at all)."""

    # ------------------------------------------------------------------ devices
    @abstractmethod
    def device_count(self) -> int:
        """Devices visible to this process."""

    @abstractmethod
    def set_device(self, index: int) -> None:
        """Make ``index`` the calling thread's current device (initialising its context)."""

    @abstractmethod
    def get_device(self) -> int:
        """The calling thread's current device."""

    @abstractmethod
    def device_properties(self, index: int) -> DeviceProperties:
        """Properties of device ``index``."""

    def device_tag(self, index: int) -> dict[str, str]:
        """Name and architecture of device ``index`` (asked once per process): part of every plan cache key."""
        tags: dict[int, dict[str, str]] = self.__dict__.setdefault("_device_tags", {})
        if index not in tags:
            props = self.device_properties(index)
            tags[index] = {"name": props.name, "arch": props.arch, "platform": self.platform}
        return tags[index]

    @abstractmethod
    def synchronize_device(self) -> None:
        """Wait for all work on the current device."""

    @abstractmethod
    def versions(self) -> dict[str, str]:
        """Runtime, driver and compiler versions, for capability notes and cache keys."""

    # ------------------------------------------------------------------ memory
    @abstractmethod
    def malloc(self, nbytes: int) -> int:
        """Device memory on the current device (at least 256-byte aligned)."""

    @abstractmethod
    def free(self, address: int) -> None:
        """Release device memory."""

    @abstractmethod
    def malloc_host(self, nbytes: int) -> int:
        """Page-locked host memory that async copies can use."""

    @abstractmethod
    def free_host(self, address: int) -> None:
        """Release page-locked host memory."""

    @abstractmethod
    def memcpy(self, dst: int, src: int, nbytes: int, direction: CopyDirection, stream: int | None) -> None:
        """Copy bytes; ``stream`` None copies synchronously, otherwise the copy is enqueued."""

    @abstractmethod
    def memset(self, dst: int, value: int, nbytes: int, stream: int | None) -> None:
        """Fill bytes with ``value & 0xFF``; ``stream`` None is synchronous."""

    @abstractmethod
    def mem_info(self) -> tuple[int, int]:
        """(free, total) bytes of the current device."""

    def malloc_async(self, nbytes: int, stream: int) -> int:
        """Stream-ordered device memory (for an op's temporaries); the default waits for the stream."""
        self.stream_synchronize(stream)
        return self.malloc(nbytes)

    def free_async(self, address: int, stream: int) -> None:
        """Stream-ordered release of :meth:`malloc_async` memory; the default waits for the stream."""
        self.stream_synchronize(stream)
        self.free(address)

    # ------------------------------------------------------------------ streams and events
    def default_stream(self) -> int:
        """The current device's default (null) stream."""
        return 0

    @abstractmethod
    def stream_create(self) -> int:
        """A new stream on the current device."""

    @abstractmethod
    def stream_destroy(self, stream: int) -> None:
        """Release a stream."""

    @abstractmethod
    def stream_synchronize(self, stream: int) -> None:
        """Wait for the stream's work."""

    @abstractmethod
    def stream_query(self, stream: int) -> bool:
        """True when the stream has no pending work."""

    @abstractmethod
    def stream_wait_event(self, stream: int, event: int) -> None:
        """Later work on ``stream`` waits for ``event``."""

    def stream_create_nonblocking(self) -> int:
        """A stream that never orders with the legacy default stream (the driver's side copies during a capture)."""
        return self.stream_create()

    @abstractmethod
    def event_create(self) -> int:
        """A new event with timing enabled."""

    @abstractmethod
    def event_destroy(self, event: int) -> None:
        """Release an event."""

    @abstractmethod
    def event_record(self, event: int, stream: int) -> None:
        """Record ``event`` at the tail of ``stream``."""

    @abstractmethod
    def event_synchronize(self, event: int) -> None:
        """Wait for the event's recording."""

    @abstractmethod
    def event_query(self, event: int) -> bool:
        """True when the recording has completed."""

    @abstractmethod
    def event_elapsed_ms(self, start: int, end: int) -> float:
        """Milliseconds between two completed recordings."""

    # ------------------------------------------------------------------ stream capture (graphs)
    # Capture runs in the vendor's *relaxed* mode: the shared runtime enforces CANN's capture modes, and
    # the driver allocates persistent memory (deferred-check slots) while a stream captures, which the
    # vendor's global and thread-local modes refuse (backends/rocm/README.md, "Stream capture").

    def capture_unavailable(self) -> str | None:
        """None when this provider records streams into graphs, else why not."""
        return f"{self.platform} provider has no stream capture binding"

    def capture_begin(self, stream: int) -> None:
        """Begin recording ``stream`` (relaxed mode): what is enqueued on it is kept in a graph, not run."""
        raise AclError(RtErrorCode.ACL_ERROR_RT_FEATURE_NOT_SUPPORT, self.capture_unavailable() or "no capture")

    def capture_end(self, stream: int) -> object:
        """End recording ``stream``; the instantiated (launchable) graph of what it recorded."""
        raise AclError(RtErrorCode.ACL_ERROR_RT_FEATURE_NOT_SUPPORT, self.capture_unavailable() or "no capture")

    def graph_launch(self, graph: object, stream: int) -> None:
        """Enqueue one replay of ``graph`` on ``stream``."""
        raise AclError(RtErrorCode.ACL_ERROR_RT_FEATURE_NOT_SUPPORT, self.capture_unavailable() or "no capture")

    def graph_destroy(self, graph: object) -> None:
        """Release an instantiated graph and the graph it came from."""
        raise AclError(RtErrorCode.ACL_ERROR_RT_FEATURE_NOT_SUPPORT, self.capture_unavailable() or "no capture")

    # ------------------------------------------------------------------ compilation and launch
    @abstractmethod
    def compiler_version(self) -> str:
        """The runtime compiler's version (part of every kernel cache key)."""

    def arch_specific(self, arch: str) -> str | None:
        """The arch-specific compile target of device architecture ``arch`` (NVIDIA sm_90 -> ``sm_90a``: the
        target with ``wgmma``, ``setmaxnreg``; its code runs on that architecture only), or None where there is none."""
        if self.platform == "nvidia" and arch == "sm_90":
            return "sm_90a"
        return None

    @abstractmethod
    def compile(self, source: str, name: str, options: tuple[str, ...], arch: str) -> bytes:
        """Compile ``source`` for ``arch`` with hipRTC / NVRTC; the loadable code object."""

    @abstractmethod
    def module_load(self, image: bytes) -> object:
        """Load a code object into the current device's context."""

    @abstractmethod
    def module_function(self, module: object, name: str) -> object:
        """The kernel ``name`` (an ``extern "C"`` symbol) of a loaded module."""

    def set_max_dynamic_shared(self, function: object, nbytes: int) -> None:
        """Let ``function`` launch with up to ``nbytes`` of dynamic shared memory (above the 48 KiB default).

        cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) on NVIDIA,
        hipFuncSetAttribute(hipFuncAttributeMaxDynamicSharedMemorySize) on AMD.
        """
        raise AclError(
            RtErrorCode.ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
            f"the {self.platform} provider cannot raise a kernel's dynamic shared memory limit",
        )

    @abstractmethod
    def launch(
        self,
        function: object,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_bytes: int,
        stream: int,
        params: int,
    ) -> None:
        """Enqueue ``function``; ``params`` is the address of a ``void*[]`` of argument addresses."""

    def programmatic_unavailable(self) -> str | None:
        """None where :meth:`launch_programmatic` really overlaps a kernel with its predecessor, else why not."""
        return f"the {self.platform} provider has no programmatic dependent launch"

    def launch_programmatic(
        self,
        function: object,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_bytes: int,
        stream: int,
        params: int,
    ) -> None:
        """:meth:`launch` with programmatic stream serialization (NVIDIA sm_90+: ``function`` may start before
        the previous kernel in ``stream`` ends; it must ``ACL_PDL_WAIT()`` before reading what that kernel wrote).
        Providers without it (HIP, :meth:`programmatic_unavailable`) launch plainly: the wait then returns at once."""
        self.launch(function, grid, block, shared_bytes, stream, params)

    def launcher(
        self,
        function: object,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_bytes: int,
        params: int,
        keepalive: object = None,
    ) -> Callable[[int], None]:
        """A callable enqueueing :meth:`launch` with everything but the stream fixed (a plan's repeated launch).

        Providers override it to resolve the vendor entry point and unpack the configuration once: the
        host time of a small op is mostly this path. The callable holds ``keepalive`` (the memory behind
        ``params``) for as long as it lives.
        """

        def enqueue(stream: int, _keep: object = keepalive) -> None:
            self.launch(function, grid, block, shared_bytes, stream, params)

        return enqueue

    # ------------------------------------------------------------------ BLAS
    def gemm_unavailable(self) -> str | None:
        """None when :meth:`gemm` works here, else why not."""
        return f"{self.platform} provider has no GEMM library binding"

    def gemm(self, call: GemmCall, workspace: int, workspace_size: int, stream: int) -> None:
        """Enqueue one (batched) GEMM through the vendor BLAS (hipBLASLt / cuBLASLt) on ``stream``."""
        raise AclError(RtErrorCode.ACL_ERROR_RT_FEATURE_NOT_SUPPORT, self.gemm_unavailable() or "no GEMM")

    def gemm_launcher(self, call: GemmCall, workspace: int, workspace_size: int) -> Callable[[int], None]:
        """A callable enqueueing :meth:`gemm` of ``call`` with everything but the stream fixed (a plan's repeated
        GEMM, as :meth:`launcher` is a plan's repeated launch). Providers override it to find the library's plan
        without rebuilding its key every call."""

        def enqueue(stream: int) -> None:
            self.gemm(call, workspace, workspace_size, stream)

        return enqueue

    def grouped_gemm_unavailable(self) -> str | None:
        """None when :meth:`grouped_gemm` works here, else why not."""
        return f"{self.platform} provider has no grouped GEMM library binding"

    def grouped_gemm(self, call: GroupedGemmCall, workspace: int, workspace_size: int, stream: int) -> str | None:
        """Enqueue one device-sized grouped GEMM on ``stream`` (None), or say why the library has no algorithm for
        it (nothing enqueued)."""
        raise AclError(
            RtErrorCode.ACL_ERROR_RT_FEATURE_NOT_SUPPORT, self.grouped_gemm_unavailable() or "no grouped GEMM"
        )

    # ------------------------------------------------------------------ collectives
    def collective_library(self) -> tuple[CollectiveLibrary | None, str]:
        """(NCCL / RCCL entry points, "") for the HCCL engine, or (None, why there are none)."""
        return None, f"{self.platform} provider has no collective library binding"

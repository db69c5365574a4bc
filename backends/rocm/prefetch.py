"""aclrtCmoAsync's prefetch on the rocm backend: one small kernel enqueued on the stream (so it is capturable).

``ACL_CMO_CONFIG`` picks the method (:mod:`acl_rocm.kernels.prefetch`), ``METHOD[:BLOCKS]``:

* ``auto`` (the default): ``bulk`` on NVIDIA sm_90+, ``lines`` on older NVIDIA GPUs, ``load`` on AMD.
* ``bulk``: ``cp.async.bulk.prefetch.L2`` of 64 KiB per thread, 32 threads a block, one unit per thread
  (a 12.6 MB weight: 193 requests in 7 blocks); before sm_90 the kernel asks for each line instead.
* ``lines``: ``prefetch.global.L2`` per 128-byte line, 256 threads a block.
* ``load``: a 4-byte ``evict_last`` load per 32-byte sector (NVIDIA), plain loads on AMD, 256 threads a block.

The grid is ``ceil(units / threads)`` blocks capped at the device's compute units (``BLOCKS`` sets another
cap: fewer blocks leave more of the GPU to the stream's other kernels, at more units per thread). AMD has
no L2 prefetch instruction that hipRTC exposes: there only ``load`` runs (``bulk`` and ``lines`` answer
207000), and capabilities report the prefetch as not native. The method chosen is logged on
``acl_rocm.prefetch`` and reported in ``capabilities().notes["cmo_prefetch"]``.
"""

from __future__ import annotations

import ctypes
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from acl_core.errors import AclError, AclErrorCode, RtErrorCode
from acl_rocm.kernels.prefetch import LINE, METHODS, SECTOR, THREADS, PrefetchKernel, unit_bytes
from acl_rocm.launch import KernelArgs

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

LOG = logging.getLogger("acl_rocm.prefetch")
ENV = "ACL_CMO_CONFIG"
_ALIGN = {"bulk": 16, "lines": LINE, "load": SECTOR}


@dataclass(frozen=True)
class CmoConfig:
    """A parsed ``ACL_CMO_CONFIG``: the method (``auto`` resolved per platform) and the grid's block cap (0: units)."""

    method: str = "auto"
    blocks: int = 0


def parse_cmo_config(setting: str) -> CmoConfig:
    """``METHOD[:BLOCKS]`` (empty: auto); ValueError naming what is wrong."""
    text = setting.strip().lower()
    if not text:
        return CmoConfig()
    method, _, blocks = text.partition(":")
    if method not in ("auto", *METHODS):
        raise ValueError(f"method {method!r} is none of auto, {', '.join(METHODS)}")
    if not blocks:
        return CmoConfig(method)
    if not blocks.isdigit() or int(blocks) < 1:
        raise ValueError(f"blocks {blocks!r} is not a positive integer")
    return CmoConfig(method, int(blocks))


@dataclass(frozen=True)
class PrefetchLaunch:
    """One prefetch launch: the kernel, its grid, and its arguments (base, units, unit bytes, lo, hi)."""

    kernel: PrefetchKernel
    grid: int
    threads: int
    base: int
    units: int
    unit: int
    lo: int
    hi: int


def plan_prefetch(method: str, address: int, nbytes: int, max_blocks: int) -> PrefetchLaunch:
    """The launch covering [address, address + nbytes) under ``method``, at most ``max_blocks`` blocks."""
    unit = unit_bytes(method)
    base = address & ~(_ALIGN[method] - 1)
    hi = address + nbytes
    units = -(-(hi - base) // unit)
    threads = THREADS[method]
    grid = max(1, min(-(-units // threads), max_blocks))
    return PrefetchLaunch(PrefetchKernel(method), grid, threads, base, units, unit, address, hi)


class Prefetcher:
    """The rocm driver's ``cmo_prefetch``: plans and enqueues the prefetch kernel of the configured method."""

    def __init__(self, backend: RocmBackend) -> None:
        self.backend = backend
        self._config: CmoConfig | str = CmoConfig()
        self.use_config(None)

    @property
    def native(self) -> bool:
        """True where the platform has an L2 prefetch instruction (NVIDIA); AMD warms L2 with loads."""
        return self.backend.provider.platform == "nvidia"

    def use_config(self, setting: str | None) -> None:
        """Prefetch with ``setting`` (``ACL_CMO_CONFIG``'s syntax) from now on; None: the environment's again."""
        if setting is None:
            setting = self.backend.environ.get(ENV, "")
        try:
            self._config = parse_cmo_config(setting)
        except ValueError as exc:
            self._config = f"{ENV}={setting!r}: {exc}"
            return
        LOG.debug("aclrtCmoAsync prefetch: %s", self.describe())

    def method(self) -> str:
        """The method in force (100000 for an invalid setting, 207000 for a method the platform lacks)."""
        if isinstance(self._config, str):
            raise AclError(AclErrorCode.ACL_ERROR_INVALID_PARAM, self._config)
        method = self._config.method
        if method == "auto":
            if not self.native:
                return "load"
            digits = self.backend.properties.arch.removeprefix("sm_").rstrip("af")
            return "bulk" if digits.isdigit() and int(digits) >= 90 else "lines"
        if not self.native and method != "load":
            raise AclError(
                RtErrorCode.ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                f"{ENV}={method}: {self.backend.provider.platform} has no L2 prefetch instruction; use load (or auto)",
            )
        return method

    def describe(self) -> str:
        """The method in force and whether it is native, for capabilities and logs."""
        try:
            method = self.method()
        except AclError as exc:
            return f"refused: {exc}"
        blocks = self._config.blocks if isinstance(self._config, CmoConfig) else 0
        cap = f"at most {blocks} blocks" if blocks else "at most one block per compute unit"
        kind = "native L2 prefetch" if self.native and method != "load" else "loads (not a native prefetch)"
        return f"{method} ({kind}; {cap}; {ENV})"

    def plan(self, address: int, nbytes: int) -> PrefetchLaunch:
        """The launch the configuration in force makes for one range."""
        method = self.method()
        blocks = self._config.blocks if isinstance(self._config, CmoConfig) else 0
        return plan_prefetch(method, address, nbytes, blocks or self.backend.properties.compute_units)

    def prepare_capture(self) -> None:
        """Compile and load the kernel of the method in force before a capture begins (not inside it)."""
        try:
            method = self.method()
        except AclError:
            return  # an invalid setting is reported by the prefetch that uses it
        kernel = PrefetchKernel(method)
        self.backend.function(kernel.source(), kernel.kernel_name)

    def __call__(self, address: int, nbytes: int, stream: int) -> None:
        """Enqueue the prefetch of [address, address + nbytes) on ``stream``."""
        p = self.plan(address, nbytes)
        function = self.backend.function(p.kernel.source(), p.kernel.kernel_name)
        args = KernelArgs(
            [
                KernelArgs.pointer(p.base),
                ctypes.c_longlong(p.units),
                ctypes.c_longlong(p.unit),
                KernelArgs.pointer(p.lo),
                KernelArgs.pointer(p.hi),
            ]
        )
        self.backend.provider.launch(function, (p.grid, 1, 1), (p.threads, 1, 1), 0, stream, args.address)

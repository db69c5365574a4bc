"""The flash path of the attention family: the fused kernel of :mod:`acl_rocm.kernels.attention_flash`.

It takes the row kernel's launch description (an :class:`~acl_rocm.kernels.attention.AttentionMeta`,
the q/k/v/pse/mask/out/smax/ssum/lse pointers, the sink) and launches the flash kernel over a 1-D grid
of (query tile, head, batch) blocks instead of one block per query row. :func:`flash_refusal` says
which calls it cannot run (pse, fp32, head dims other than 64/128/256: the other paths take them);
:func:`flash_slow` says where it is correct but not the default (no matrix instructions: the kernel's
software path). Q/K/V move as 16-byte ``cp.async`` chunks where their rows allow it, else element by element.
On sm_90 the sm_90a warpgroup-MMA kernel of :mod:`acl_rocm.kernels.attention_wgmma` is the default at head dims
64 and 128 (:data:`WGMMA_TABLE`); ``ACL_FLASH_CONFIG`` (:func:`parse_setting`) names another wgmma shape
(``wg...``) or an mma.sync one, which then runs instead. Calls the wgmma kernel cannot run (an explicit mask, rows
not in 16-byte runs, other archs) take the mma.sync table's kernel, the reason logged and kept in
:attr:`FlashAttention.last_refusal`.
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import math
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, TypeAlias

from acl_core.dtypes import DataType as D
from acl_core.errors import AclError, AclErrorCode
from acl_rocm.kernels.attention import AttentionInstance, AttentionMeta
from acl_rocm.kernels.attention_flash import (
    ALTERNATIVES,
    DTYPES,
    HEAD_DIMS,
    FlashConfig,
    FlashGrid,
    FlashInstance,
    config_for,
    flash_instance,
    flash_source,
    parse_overrides,
)
from acl_rocm.kernels.attention_wgmma import (
    DEFAULTS as WGMMA_DEFAULTS,
)
from acl_rocm.kernels.attention_wgmma import (
    WgmmaConfig,
    WgmmaInstance,
    wgmma_flash_source,
    wgmma_refusal,
)
from acl_rocm.kernels.mma import hardware_layout
from acl_rocm.launch import KernelArgs, LaunchConfig
from acl_rocm.ops.elementwise import Prepared

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

MAX_GRID_X: Final = 2**31 - 1
WGMMA_TABLE: Final[dict[int, WgmmaConfig]] = {
    128: WgmmaConfig.parse("wg2k128ps"),
    64: WgmmaConfig.parse("wg2k64b2slx3"),
}
"""The sm_90 default per head dim, from H100 runs beside SDPA (B4 N32 causal bf16; results/RESULTS.md):
``wg2k128ps`` at S4096 D128 (0.509, 0.509, 0.510 and 0.508 of SDPA's TFLOP/s in four runs of 2026-12-07 14:46-14:49,
where the former default ``wg2k128s`` read 0.498, 0.497, 0.502 and 0.503; the mma.sync table's kernel 0.40) and
``wg2k64b2slx3`` at S1024 D64 (0.504, 0.512 and 0.510 in three runs, where the former default ``wg2k64b2psl`` read
0.488 / 0.505, 0.493 and 0.495: three K/V buffers, the grid longest first, no software pipelining). Both passed every
wgmma GPU-tier case of their shapes (fp16 / bf16, GQA, BSND, odd lengths, windows)."""
log = logging.getLogger("acl_rocm.attention")


def flash_refusal(dtype: D, head_dim: int, has_pse: bool) -> str | None:
    """Why the flash kernel cannot run a call (None when it can)."""
    if dtype not in DTYPES:
        return f"{dtype.short} inputs (the flash kernel runs fp16/bf16)"
    if head_dim not in HEAD_DIMS:
        return f"head dim {head_dim} (the flash kernel has {', '.join(map(str, HEAD_DIMS))})"
    if has_pse:
        return "a pse (realShift) input"
    return None


Choice: TypeAlias = FlashConfig | WgmmaConfig
"""A block shape ``ACL_FLASH_CONFIG`` names: the mma.sync kernel's (``w4m2k32s2q-efiu``) or the wgmma kernel's
(``wg2k128``: :mod:`acl_rocm.kernels.attention_wgmma`, sm_90 only)."""


def parse_setting(text: str) -> dict[int | None, Choice]:
    """``ACL_FLASH_CONFIG``: :func:`parse_overrides`' syntax, where a config may also be a wgmma one (``wg2k128``,
    ``128=wg2k128,64=w4m1k64s2-efiu``); ValueError for anything else."""
    out: dict[int | None, Choice] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        dim, _, config = part.rpartition("=")
        if config.strip().startswith("wg"):
            if dim and (not dim.strip().isdigit() or int(dim) not in HEAD_DIMS):
                raise ValueError(f"flash config {part!r}: the head dim must be one of {HEAD_DIMS}")
            out[int(dim) if dim else None] = WgmmaConfig.parse(config)
        else:
            out.update(parse_overrides(part))
    return out


def rows_vectorizable(meta: AttentionMeta, addresses: Sequence[int], item: int) -> bool:
    """True when q, k and v rows are contiguous runs starting on 16-byte boundaries (16-byte chunk copies)."""
    per_chunk = 16 // item
    for strides, address in zip((meta.q, meta.k, meta.v), addresses):
        if strides[3] != 1 or any(s % per_chunk for s in strides[:3]) or address % 16:
            return False
    return True


class FlashAttention:
    """Builds flash-kernel launches for one backend (sources cached per instance)."""

    def __init__(self, backend: RocmBackend) -> None:
        self.backend = backend
        self._lock = threading.Lock()
        self._sources: dict[FlashInstance | WgmmaInstance, str] = {}
        self.config_override: dict[int | None, Choice] | str = {}
        """Head dim (None: every one) -> the block shape to run instead of the table's (env ACL_FLASH_CONFIG,
        :func:`~acl_rocm.kernels.attention_flash.parse_overrides`); a string: why the setting is invalid."""
        self.use_config(None)
        self.last_instance: FlashInstance | WgmmaInstance | None = None
        """The instance the last prepared launch runs (the bench and tests read its shape)."""
        self.last_refusal: str | None = None
        """Why the last call that chose the wgmma kernel (``ACL_FLASH_CONFIG=wg...``) ran the mma.sync one."""

    def use_config(self, setting: str | None) -> None:
        """Run ``setting`` (``ACL_FLASH_CONFIG``'s syntax) from now on; None: the environment's setting again.

        An invalid setting is kept as its reason: the next flash call raises it (ACL_ERROR_INVALID_PARAM).
        """
        if setting is None:
            setting = self.backend.environ.get("ACL_FLASH_CONFIG", "")
        try:
            self.config_override = parse_setting(setting)
        except ValueError as exc:
            self.config_override = f"ACL_FLASH_CONFIG={setting!r}: {exc}"

    def alternatives(self, head_dim: int) -> tuple[str, ...]:
        """Block shapes worth timing beside the table's at ``head_dim`` (the ops bench's extra forced-flash rows)."""
        shapes = [str(config) for config in ALTERNATIVES.get(head_dim, ())]
        if self.wgmma_unavailable() is None:  # sm_90: the wgmma kernel's shapes beside the mma.sync ones
            default = WGMMA_TABLE.get(head_dim)
            if default is not None:  # the mma.sync table's entry is then an alternative too
                layout = hardware_layout(self.backend.policy.arch)
                shapes.insert(0, str(config_for(head_dim, D.ACL_BF16, layout)))
            shapes += [str(c) for c in WGMMA_DEFAULTS.get(head_dim, ()) if c != default]
        return tuple(dict.fromkeys(shapes))

    def wgmma_unavailable(self) -> str | None:
        """Why this device cannot run the wgmma kernel at all (None where it can: sm_90 with an sm_90a target)."""
        arch = self.backend.properties.arch
        if self.backend.provider.arch_specific(arch) is None:
            return f"no arch-specific compile target (sm_90a) for {arch} on this provider"
        return wgmma_refusal(D.ACL_BF16, 128, arch, True, False)

    def slow(self, cudnn_present: bool = False) -> str | None:
        """Why the flash path is not the default here (None where matrix instructions run it and cuDNN is absent).

        Where cuDNN loads, cuDNN and then BLAS stay the default until the flash kernel has been measured
        there (``ACL_ATTENTION_PATH=flash`` forces it).
        """
        arch = self.backend.policy.arch
        if hardware_layout(arch) is None:
            return f"no warp matrix instructions on {arch.name} (the flash kernel would run its software path)"
        if cudnn_present:
            return "cuDNN is present (the flash kernel runs where it is forced)"
        return None

    def function(self, inst: FlashInstance | WgmmaInstance) -> object:
        """The loaded kernel of ``inst`` (a wgmma instance compiled for the arch-specific target)."""
        wgmma = isinstance(inst, WgmmaInstance)
        src = self._sources.get(inst)
        if src is None:
            src = wgmma_flash_source(inst) if isinstance(inst, WgmmaInstance) else flash_source(inst)
            with self._lock:
                self._sources[inst] = src
        return self.backend.function(src, inst.kernel_name, inst.shared_bytes, arch_specific=wgmma)

    def prepare(
        self,
        inst: AttentionInstance,
        meta: AttentionMeta,
        grid: tuple[int, int, int],
        scale: float,
        pointers: Sequence[int],
        sink: int = 0,
    ) -> list[Prepared]:
        """The launch computing what the row kernel's launch over ``grid`` (rows, heads, batches) computes.

        ``pointers`` are the row kernel's: q, k, v, pse (must be 0), mask, out, smax, ssum, lse.
        """
        rows = grid[0]
        if 0 in grid:
            return []
        if pointers[3]:
            raise ValueError("the flash kernel takes no pse")
        item = inst.dtype.info.storage_bits // 8
        vec = rows_vectorizable(meta, pointers[:3], item)
        props = self.backend.properties
        overrides = self.config_override
        if isinstance(overrides, str):
            raise AclError(AclErrorCode.ACL_ERROR_INVALID_PARAM, overrides)
        override = overrides.get(inst.head_dim, overrides.get(None))
        wanted_wg = override if override is not None else WGMMA_TABLE.get(inst.head_dim)
        if isinstance(wanted_wg, WgmmaConfig):
            source = f"ACL_FLASH_CONFIG={wanted_wg}" if override is not None else f"the sm_90 table's {wanted_wg}"
            why = self.wgmma_unavailable() or wgmma_refusal(
                inst.dtype, inst.head_dim, props.arch, vec, bool(meta.has_mask)
            )
            if why is None:
                self.last_refusal = None
                wg = wanted_wg.instance(inst.dtype, inst.head_dim, inst.sink)
                if wg.shared_bytes * wg.blocks > props.max_shared_memory:
                    need = f"{wg.shared_bytes} B of shared memory a block, {wg.blocks} blocks a multiprocessor"
                    raise AclError(AclErrorCode.ACL_ERROR_INVALID_PARAM, f"{source} needs {need}")
                return self._launch(wg, meta, grid, scale, pointers, sink, source)
            if why != self.last_refusal:
                log.debug("flash kernel: %s refused: %s; the table's mma.sync kernel runs", source, why)
            self.last_refusal = why
            override = None
        layout = hardware_layout(self.backend.policy.arch)
        try:
            flash = flash_instance(
                inst.dtype, inst.head_dim, inst.sink, vec, rows, props.max_shared_memory, layout, override
            )
        except ValueError as exc:
            raise AclError(AclErrorCode.ACL_ERROR_INVALID_PARAM, f"ACL_FLASH_CONFIG: {exc}") from None
        how = "ACL_FLASH_CONFIG" if override is not None else f"table, layout {layout}"
        if flash != self.last_instance:
            wanted = config_for(inst.head_dim, inst.dtype, layout)
            if override is None and dataclasses.replace(flash.config, mtiles=wanted.mtiles) != wanted:
                how += f"; {wanted} needs more shared memory than the device's {props.max_shared_memory} B"
        return self._launch(flash, meta, grid, scale, pointers, sink, how)

    def _launch(
        self,
        flash: FlashInstance | WgmmaInstance,
        meta: AttentionMeta,
        grid: tuple[int, int, int],
        scale: float,
        pointers: Sequence[int],
        sink: int,
        how: str,
    ) -> list[Prepared]:
        """The launch of ``flash`` (chosen by ``how``, logged when it changes) over the call's grid."""
        rows, heads, batches = grid
        props = self.backend.properties
        if flash != self.last_instance:
            what = f"D{flash.head_dim} {flash.dtype.short}: {flash.config} ({how}), {flash.shared_bytes} B shared"
            log.debug("flash kernel %s", what)
        self.last_instance = flash
        tiles = math.ceil(rows / flash.rows)
        blocks = tiles * heads * batches
        if blocks > MAX_GRID_X:
            raise ValueError(f"{blocks} flash blocks exceed the grid's x limit")
        fgrid = FlashGrid(sq=rows, heads=heads, tiles=tiles)
        values: list[Any] = [
            KernelArgs.index_array(meta.values(), "long long"),
            KernelArgs.index_array(fgrid.values(), "long long"),
            ctypes.c_double(scale),
        ]
        q, k, v, _pse, mask, out, smax, ssum, lse = pointers
        values.extend(KernelArgs.pointer(p) for p in (q, k, v, mask, out, smax, ssum, lse, sink))
        threads = flash.threads if isinstance(flash, WgmmaInstance) else flash.warps * props.warp_size
        config = LaunchConfig((blocks, 1, 1), (threads, 1, 1), flash.shared_bytes)
        return [Prepared(self.function(flash), config, KernelArgs(values))]

"""FlashAttentionScoreGrad's flash path: the fused backward kernels of :mod:`acl_rocm.kernels.attention_flash_grad`.

Opt-in as ``ACL_ATTENTION_GRAD_PATH=flash`` (:mod:`acl_rocm.ops.attention_grad_cudnn`'s switch). Per call, on the
launch's stream: two fp32 [B, Nq, Sq] temporaries (Di and the log2-unit log-sum-exp) from the pre-pass, then the
key-major dK / dV kernel and the query-major dQ kernel, then the temporaries freed stream-ordered. Nothing is atomic and
every output element is written once, so results are deterministic. :meth:`FlashAttentionGrad.refusal` names what it
does not take (fp32, head dims not a multiple of 16 up to 128, a pse, an empty dimension, a device with too
little shared memory): the runner then takes the composed path and logs why.

Registers (``nvcc -Xptxas -v``, sm_90, 2026-12-07, fp16 and bf16 alike, two stages): D 64 (dQ 64-key tiles, dK/dV
64-row steps) dQ 219, dK/dV 241; D 128 (32-row steps) dQ 240, dK/dV 241; D 16 133 / 146; D 96 234 / 236; the pre-pass
32; no spills at any multiple of 16 up to 128. D 256 would hold 2 x 16 fp32 accumulator fragments a warp in the dK/dV
kernel (256 registers before S and dP): refused. Shared memory at two stages: D 128 dQ 104,448 B, dK/dV 69,632 B;
D 64 55,296 B each (two blocks a multiprocessor either way on sm_90).
"""

from __future__ import annotations

import ctypes
import logging
import math
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeAlias

from acl_core.errors import AclError, AclErrorCode
from acl_core.tensor import AclTensor
from acl_rocm.kernels.attention_flash import DTYPES
from acl_rocm.kernels.attention_flash_grad import (
    HEAD_DIMS,
    WARPS,
    FlashGradInstance,
    FlashGradMeta,
    flash_grad_source,
    grad_instance,
    parse_config,
)
from acl_rocm.launch import KernelArgs, LaunchConfig
from acl_rocm.ops.attention import bnsd_strides, broadcast4, mask_strides
from acl_rocm.ops.cudnn_graphs import address
from acl_rocm.ops.elementwise import Prepared

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend
    from acl_rocm.ops.attention_grad import GradProblem

SinkSum: TypeAlias = Callable[["GradProblem", int, AclTensor, int], None]
"""The composed path's dsink sum: (problem, terms address, dsinkOut, stream)."""
MAX_GRID_X: Final = 2**31 - 1
CONFIG_ENV: Final = "ACL_FLASH_GRAD_CONFIG"
"""Block shapes instead of the table's (:func:`~acl_rocm.kernels.attention_flash_grad.parse_config`: ``q64k32s1`` is
D 128's shape with one buffer of the walked tiles instead of two), for a timing; unset: the table, two stages."""
log = logging.getLogger("acl_rocm.attention_grad")


def rows_aligned(strides: Sequence[Sequence[int]], addresses: Sequence[int], item: int) -> bool:
    """True when every operand's rows are contiguous runs starting on 16-byte boundaries (``cp.async`` chunks)."""
    per_chunk = 16 // item
    return all(
        st[3] == 1 and not any(s % per_chunk for s in st[:3]) and not a % 16 for st, a in zip(strides, addresses)
    )


class FlashAttentionGrad:
    """Builds and enqueues the flash backward's launches for one backend (sources cached per instance)."""

    def __init__(self, backend: RocmBackend) -> None:
        self.backend = backend
        self._lock = threading.Lock()
        self._sources: dict[tuple[FlashGradInstance, str], str] = {}
        self.last_instance: FlashGradInstance | None = None
        """The instance the latest call ran (tests and the bench read it)."""

    def refusal(self, p: GradProblem) -> str | None:
        """Why the flash kernels cannot run ``p`` (None when they can)."""
        if p.dtype not in DTYPES:
            return f"{p.dtype.short} inputs (the flash backward runs fp16/bf16)"
        if p.d not in HEAD_DIMS:
            return f"head dim {p.d} (the flash backward takes multiples of 16 up to 128; D 256 would spill)"
        if p.pse is not None:
            return "a pse input (the composed path adds it)"
        if min(p.b, p.nq, p.sq, p.skv) == 0:
            return "an empty dimension"
        inst = self.instance(p, True)
        shared = max(inst.shared_bytes("dq"), inst.shared_bytes("dkv"))
        if shared > self.backend.properties.max_shared_memory:
            return f"{shared} B of shared memory a block (the device has {self.backend.properties.max_shared_memory})"
        blocks = max(math.ceil(p.sq / inst.rows) * p.nq, math.ceil(p.skv / inst.rows) * p.nkv) * p.b
        if blocks > MAX_GRID_X:
            return f"{blocks} blocks exceed the grid's x limit"
        return None

    def instance(self, p: GradProblem, vec: bool) -> FlashGradInstance:
        """The instance for ``p``: :data:`CONFIG_ENV`'s shape if set, else the table's (one stage where two exceed the
        device's shared memory); a bad setting is ACL_ERROR_INVALID_PARAM."""
        text = self.backend.environ.get(CONFIG_ENV, "")
        try:
            shapes = parse_config(text)
        except ValueError as exc:
            raise AclError(AclErrorCode.ACL_ERROR_INVALID_PARAM, f"{CONFIG_ENV}={text!r}: {exc}") from None
        inst = grad_instance(p.dtype, p.d, vec, shapes.get(p.d, shapes.get(None)))
        limit = self.backend.properties.max_shared_memory
        if inst.stages == 2 and max(inst.shared_bytes("dq"), inst.shared_bytes("dkv")) > limit:
            inst = grad_instance(p.dtype, p.d, vec, (inst.bcq, inst.brk, 1))
        return inst

    def function(self, inst: FlashGradInstance, kernel: str) -> object:
        """The loaded kernel ``kernel`` ("prep", "dkv" or "dq") of ``inst`` (a source each)."""
        src = self._sources.get((inst, kernel))
        if src is None:
            src = flash_grad_source(inst, kernel)
            with self._lock:
                self._sources[inst, kernel] = src
        shared = inst.shared_bytes(kernel) if kernel != "prep" else 0
        return self.backend.function(src, f"{inst.kernel_name}_{kernel}", shared)

    def meta(self, p: GradProblem, inst: FlashGradInstance) -> FlashGradMeta:
        """The call's strides, window and mask in the kernels' terms."""
        t = p.tensors

        def st(role: str) -> tuple[int, int, int, int]:
            return bnsd_strides(t[role].strides, p.layout, p.d)

        bounds = p.bounds or (0, 0, 0)
        return FlashGradMeta(
            q=st("q"), k=st("k"), v=st("v"), o=st("o"), dout=st("do"), dq=st("dq"), dk=st("dk"), dv=st("dv"),
            mask=(0, 0, 0, 0) if p.mask is None else mask_strides(p.mask.view_dims, p.mask.strides),
            smax=broadcast4(t["smax"].view_dims, t["smax"].strides),
            ssum=broadcast4(t["ssum"].view_dims, t["ssum"].strides),
            batches=p.b, heads=p.nq, kv_heads=p.nkv, group=p.group, rows=p.sq, kv_len=p.skv,
            has_mask=int(p.mask is not None), has_window=int(p.bounds is not None),
            win_lo=bounds[0], win_hi=bounds[1], shift=bounds[2],
            has_sink=int(p.sink is not None), sink_step=0 if p.sink is None else p.sink.strides[0],
            q_tiles=math.ceil(p.sq / inst.rows), k_tiles=math.ceil(p.skv / inst.rows),
        )  # fmt: skip

    def enqueue(self, p: GradProblem, sink_sum: SinkSum, stream: int) -> None:
        """Enqueue the pre-pass, dK / dV and dQ on ``stream`` (the temporaries freed stream-ordered); with a sink,
        ``sink_sum`` (the composed path's per-head sum) turns the pre-pass's terms into dsinkOut."""
        t = p.tensors
        roles = ("q", "k", "v", "do")
        item = p.dtype.info.storage_bits // 8
        vec = rows_aligned(
            [bnsd_strides(t[r].strides, p.layout, p.d) for r in roles], [address(t[r]) for r in roles], item
        )
        inst = self.instance(p, vec)
        if inst != self.last_instance:
            log.debug("flash backward kernels %s (%s loads)", inst.kernel_name, "16-byte" if vec else "element")
        self.last_instance = inst
        meta = self.meta(p, inst)
        provider = self.backend.provider
        rows = p.b * p.nq * p.sq
        delta = provider.malloc_async(rows * 4, stream)
        lse2 = provider.malloc_async(rows * 4, stream)
        terms = provider.malloc_async(rows * 4, stream) if p.sink is not None else 0
        try:
            warp = self.backend.properties.warp_size
            threads = (WARPS * warp, 1, 1)
            packed = KernelArgs.index_array(meta.values(), "long long")
            prep = [packed, *(KernelArgs.pointer(a) for a in (address(t["o"]), address(t["do"])))]
            prep += [KernelArgs.pointer(a) for a in (address(t["smax"]), address(t["ssum"]), delta, lse2)]
            prep += [KernelArgs.pointer(0 if p.sink is None else address(p.sink)), KernelArgs.pointer(terms)]
            self._launch(inst, "prep", (math.ceil(rows / WARPS), 1, 1), threads, prep, stream)
            mask = 0 if p.mask is None else address(p.mask)
            common: list[Any] = [packed, ctypes.c_double(p.scale)]
            common += [KernelArgs.pointer(address(t[r])) for r in roles]
            common += [KernelArgs.pointer(a) for a in (mask, delta, lse2)]
            outs = [KernelArgs.pointer(address(t[r])) for r in ("dk", "dv")]
            self._launch(inst, "dkv", (meta.k_tiles * p.nkv * p.b, 1, 1), threads, [*common, *outs], stream)
            dq = [KernelArgs.pointer(address(t["dq"]))]
            self._launch(inst, "dq", (meta.q_tiles * p.nq * p.b, 1, 1), threads, [*common, *dq], stream)
            if p.sink is not None:
                sink_sum(p, terms, t["dsink"], stream)
        finally:
            if terms:
                provider.free_async(terms, stream)
            provider.free_async(lse2, stream)
            provider.free_async(delta, stream)

    def _launch(
        self,
        inst: FlashGradInstance,
        kernel: str,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        values: list[Any],
        stream: int,
    ) -> None:
        shared = inst.shared_bytes(kernel) if kernel != "prep" else 0
        config = LaunchConfig(grid, block, shared)
        prepared = Prepared(self.function(inst, kernel), config, KernelArgs(values))
        self.backend.elementwise.launch_prepared(prepared, stream)

"""The attention family on the GPU: flash / prefill / decode / fused-inference attention, rotary, SwiGlu.

Attention runs one fused kernel (:func:`acl_rocm.kernels.attention.attention_source`, a tiled
online softmax, one block per query row) for small calls and every case the faster paths do not take.
Large FlashAttentionScore calls (:func:`acl_rocm.ops.attention_plan.choose_path`) run cuDNN's fused
SDPA on NVIDIA where it computes the case exactly (:mod:`acl_rocm.ops.attention_cudnn`), else the
flash kernel on warp matrix instructions (:mod:`acl_rocm.ops.attention_flash`: fp16/bf16, head dims
64/128/256, no pse; the row kernel's launch description, so masks, windows, GQA and sinks carry over)
where the device has them, else the BLAS
path (:mod:`acl_rocm.ops.attention_blas`: two batched GEMMs around a row-softmax kernel, every mask,
window and pse case); the path taken is logged at debug level once per signature. Layouts, masks
and pse are described to it by strides (:func:`bnsd_strides`, :func:`mask_strides`), sparse modes
by a key window relative to a shifted diagonal (:func:`window_bounds`), so no operand is copied.
Inference calls whose batches differ (tensor-list caches, per-batch actual lengths) launch once per
batch with that batch's pointers and lengths as kernel arguments: nothing is read back from the device.
FlashAttentionVarLenScore launches the same kernel once per packed sequence, its token offsets taken
from the host-side cumulative lengths the spec validated (aclIntArrays, never device memory).

RotaryPositionEmbedding and ApplyRotaryPosEmb use the rotary-pair kernel; SwiGlu is an elementwise
instance over the two halves of ``x`` (strided views, no copy).
"""

from __future__ import annotations

import ctypes
import functools
import logging
import math
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from acl_core.backend import Kernel, Launch
from acl_core.dtypes import DataType as D
from acl_core.errors import AclError, AclErrorCode, AclnnError, AclnnStatus, RtErrorCode
from acl_core.formats import Format
from acl_core.tensor import AclTensor
from acl_rocm.driver import handle
from acl_rocm.kernels.attention import (
    ATTN_THREADS,
    ROPE_THREADS,
    AttentionInstance,
    AttentionMeta,
    RopeInstance,
    RopeMeta,
    Strides,
    attention_source,
    rope_source,
)
from acl_rocm.kernels.attention_paged import PAGED_MODES
from acl_rocm.kernels.elementwise import ufunc
from acl_rocm.launch import KernelArgs, LaunchConfig
from acl_rocm.ops.attention_blas import BlasAttention, BlasProblem, blas_refusal
from acl_rocm.ops.attention_cudnn import CudnnSdpa, SdpaKey, refuse
from acl_rocm.ops.attention_decode import DecodeAttention, DecodeCall, decode_refusal
from acl_rocm.ops.attention_flash import FlashAttention, flash_refusal
from acl_rocm.ops.attention_paged import direct_call, gather_plan, paged_refusal, paged_setup, with_dense
from acl_rocm.ops.attention_plan import LARGE_WORK, choose_path, cudnn_mask, cudnn_refusal, is_large
from acl_rocm.ops.binding import family_key, memo_plan, named_kernel
from acl_rocm.ops.elementwise import Prepared
from acl_rocm.ops.program import Program, run_program
from acl_rocm.views import broadcast_strides

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

OPS: tuple[str, ...] = (
    "ApplyRotaryPosEmb",
    "FlashAttentionScore",
    "FlashAttentionVarLenScore",
    "FusedInferAttentionScore",
    "IncreFlashAttention",
    "PromptFlashAttention",
    "RotaryPositionEmbedding",
    "SwiGlu",
)
ATTENTION_DTYPES = frozenset({D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16})
MAX_GRID_YZ = 65535
LOG = logging.getLogger("acl_rocm.attention")
ROPE_ENV = "ACL_ROPE_CONFIG"
"""The rotary kernel: ``vec`` (the default: half mode rotates 2-8 adjacent pairs a thread with vector loads and
stores where every view allows; elsewhere a pair a thread) or ``scalar`` (a pair a thread, every mode and view).
Measured on an H100 (replayed graph, GPU us a call, q and k of Qwen3 decode): batch 1 vec 1.95 / scalar 3.04,
batch 8 vec 3.53 / scalar 3.76."""
SWIGLU = ufunc("SwiGlu", "a:T, b:T -> out:T", "a * acl_sigmoid(a) * b")
"""SwiGlu as one elementwise body over the two halves ``a`` and ``b`` of x."""


def _refuse(op: str, what: str) -> AclnnError:
    return AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, f"the rocm backend cannot run {op} with {what}")


def _itemsize(dtype: D) -> int:
    return dtype.info.storage_bits // 8


def _address(t: AclTensor) -> int:
    return t.data + t.offset * _itemsize(t.dtype)


# ----------------------------------------------------------------------------- layout arithmetic
def layout_dims(shape: Sequence[int], layout: str, heads: int) -> tuple[int, int, int, int]:
    """(B, N, S, D) of a tensor in ``layout`` (BSH/SBH split H into ``heads``; BNSD_BSND reads as BNSD)."""
    if layout in ("BSH", "SBH"):
        b, s, h = (shape[0], shape[1], shape[2]) if layout == "BSH" else (shape[1], shape[0], shape[2])
        return b, heads, s, h // heads
    if layout == "BSND":
        return shape[0], shape[2], shape[1], shape[3]
    return shape[0], shape[1], shape[2], shape[3]


def bnsd_strides(strides: Sequence[int], layout: str, head_dim: int) -> Strides:
    """Element strides (batch, head, row, dim) of a tensor with ``strides`` in ``layout``."""
    st = list(strides)
    if layout in ("BNSD", "BNSD_BSND"):
        return st[0], st[1], st[2], st[3]
    if layout == "BSND":
        return st[0], st[2], st[1], st[3]
    if layout == "BSH":
        return st[0], st[2] * head_dim, st[1], st[2]
    if layout == "SBH":
        return st[1], st[2] * head_dim, st[0], st[2]
    raise ValueError(f"unknown layout {layout}")


def broadcast4(shape: Sequence[int], strides: Sequence[int]) -> Strides:
    """Strides of a rank-4 view with size-1 dimensions made stride 0 (they broadcast)."""
    s = tuple(0 if n == 1 else st for n, st in zip(shape, strides))
    return s[0], s[1], s[2], s[3]


def mask_strides(shape: Sequence[int], strides: Sequence[int], *, decode: bool = False) -> Strides:
    """(batch, head, row, column) strides of a mask as the reference's ``as_4d`` reads it (broadcast = 0).

    [X,Y] is [1,1,X,Y] ([B,1,1,S] for decode masks); [A,X,Y] is [A,1,X,Y]; rank 4 is itself.
    """
    if len(shape) == 2:
        if decode:
            return broadcast4((shape[0], 1, 1, shape[1]), (strides[0], 0, 0, strides[1]))
        return broadcast4((1, 1, shape[0], shape[1]), (0, 0, strides[0], strides[1]))
    if len(shape) == 3:
        return broadcast4((shape[0], 1, shape[1], shape[2]), (strides[0], 0, strides[1], strides[2]))
    return broadcast4(shape, strides)


def window_bounds(mode: int, sq: int, skv: int, pre: int, nxt: int, shift: int) -> tuple[int, int, int] | None:
    """(lo, hi, shift): keep key j of row i when ``lo <= j - i - shift <= hi``; None when the mode has no window.

    Mode 0's window and mode 2's causal mask start from the upper-left corner, modes 3 and 4 from the
    diagonal shifted by ``shift`` (the reference's :func:`sparse_keep`).
    """
    if mode == 0:
        return -pre, nxt, 0
    if mode == 2:
        return -(sq + skv), 0, 0
    if mode == 3:
        return -(sq + skv), 0, shift
    if mode == 4:
        return -pre, nxt, shift
    return None


def sink_of(args: dict[str, Any]) -> AclTensor | None:
    """The call's sink (sinkOptional / learnableSinkOptional, passed as ``sink``); None when absent or empty."""
    sink = args.get("sink")
    if sink is None or math.prod(sink.view_dims) == 0:
        return None
    assert isinstance(sink, AclTensor)
    return sink


def with_sink(meta: AttentionMeta, sink: AclTensor | None) -> AttentionMeta:
    """``meta`` reading one sink per query head from ``sink`` (unchanged without one)."""
    return meta if sink is None else replace(meta, has_sink=1, sink_step=sink.strides[0])


def _groups(count: int, limit: int = MAX_GRID_YZ) -> list[tuple[int, int]]:
    """(start, size) chunks of ``count`` batches, each at most ``limit`` (the grid's z limit)."""
    return [(s, min(limit, count - s)) for s in range(0, count, limit)]


class AttentionRunner:
    """Turns attention-family Launches into kernel launches on one backend."""

    def __init__(self, backend: RocmBackend) -> None:
        self.backend = backend
        self._lock = threading.Lock()
        self._sources: dict[object, str] = {}
        self.forced_rope: str | None = None
        """A :data:`ROPE_ENV` setting over the environment's for calls made while set (tests, bench A/B)."""
        self.blas = BlasAttention(backend)
        self.cudnn = CudnnSdpa(backend)
        self.decode = DecodeAttention(backend)
        self.flash = FlashAttention(backend)
        self.path_override: str | None = os.environ.get("ACL_ATTENTION_PATH") or None
        """Forces a path (env ACL_ATTENTION_PATH); None: by size and shape.

        FlashAttentionScore: "kernel", "flash", "blas" or "cudnn" ("decode" leaves it by size). IncreFlashAttention and
        FusedInferAttentionScore: "decode" forces the split-KV decode kernel, "kernel" the row kernel (any other
        value leaves them by shape: the decode kernel wherever it runs)."""
        self.large_work = LARGE_WORK
        """B*N*Sq*Skv from which a call counts as large (see :func:`is_large`)."""
        self.last_path: str | None = None
        """The path the latest newly planned FlashAttentionScore, IncreFlashAttention or FusedInferAttentionScore
        signature took."""
        self.paged_mode = PAGED_MODES[0]
        """How paged-KV decode runs (``ACL_PAGED_DECODE``: :data:`~acl_rocm.kernels.attention_paged.PAGED_MODES`)."""
        self.use_paged_mode(None)

    def use_paged_mode(self, mode: str | None) -> None:
        """Run paged-KV decode as ``mode`` from now on (None: ``ACL_PAGED_DECODE``'s, else the default).

        An unknown mode is kept as the reason the next paged plan raises ACL_ERROR_INVALID_PARAM with.
        """
        if mode is None:
            mode = self.backend.environ.get("ACL_PAGED_DECODE", "") or PAGED_MODES[0]
        self.paged_mode = mode

    def kernels(self) -> dict[str, Kernel]:
        """A kernel per op this family runs."""
        builders: dict[str, Callable[[Launch], list[Prepared]]] = {
            "FlashAttentionVarLenScore": self.flash_attention_varlen_score,
            "RotaryPositionEmbedding": self.rotary_position_embedding,
            "ApplyRotaryPosEmb": self.apply_rotary_pos_emb,
            "SwiGlu": self.swiglu,
        }
        kernels = {name: self._bind(build) for name, build in builders.items()}
        kernels["FlashAttentionScore"] = self._flash_kernel
        for name in ("PromptFlashAttention", "IncreFlashAttention", "FusedInferAttentionScore"):
            kernels[name] = self._inference_kernel
        return kernels

    def describe_paths(self) -> str:
        """The attention_path capability: which FlashAttentionScore paths this device offers, in preference order."""
        paths = []
        cudnn_why = self.cudnn.refusal()
        if cudnn_why is None:
            paths.append(f"cuDNN SDPA {self.cudnn.version()} (large fp16/bf16, no mask or causal)")
        if self.flash.slow(cudnn_why is None) is None:
            paths.append("flash kernel on matrix instructions (large fp16/bf16, D 64/128/256, no pse)")
        blas_why = self.backend.matmul.unavailable()
        if blas_why is None:
            paths.append("BLAS (large: GEMM, row softmax, GEMM; every mask/pse case)")
        paths.append("fused online-softmax kernel (small calls and the rest)")
        decode = (
            "short-cache / split-KV decode kernels (IncreFlashAttention / FusedInferAttentionScore, one query token)"
        )
        extra = ""
        if self.flash.slow(False) is None:
            if cudnn_why is None:
                extra = "; flash kernel where forced (ACL_ATTENTION_PATH=flash)"
            extra += "; flash kernel for large Prompt / FusedInfer prefill"
        return " > ".join(paths) + "; " + decode + extra

    def _bind(self, build: Callable[[Launch], list[Prepared]]) -> Kernel:
        def run(launch: Launch) -> None:
            key = family_key(self.backend, "attention", self.forced_rope)  # a forced rotary path plans apart
            for step in memo_plan(launch, key, lambda: build(launch)):  # nothing allocated per call
                self.backend.elementwise.launch_prepared(step, handle(launch.stream))

        return named_kernel(build.__name__, run)

    # ------------------------------------------------------------------ kernels and launches
    def _function(self, inst: AttentionInstance | RopeInstance) -> object:
        src = self._sources.get(inst)
        if src is None:
            src = attention_source(inst) if isinstance(inst, AttentionInstance) else rope_source(inst)
            with self._lock:
                self._sources[inst] = src
        return self.backend.function(src, inst.kernel_name)

    def _prepare_attention(
        self,
        inst: AttentionInstance,
        meta: AttentionMeta,
        grid: tuple[int, int, int],
        scale: float,
        pointers: Sequence[int],
        sink: int = 0,
        flash: bool = False,
    ) -> list[Prepared]:
        if flash:
            return self.flash.prepare(inst, meta, grid, scale, pointers, sink)
        if 0 in grid:
            return []
        if grid[1] > MAX_GRID_YZ or grid[2] > MAX_GRID_YZ:
            raise _refuse("attention", f"{grid[1]} heads (the grid's y limit is {MAX_GRID_YZ})")
        values: list[Any] = [KernelArgs.index_array(meta.values(), "long long"), ctypes.c_double(scale)]
        values.extend(KernelArgs.pointer(p) for p in (*pointers, sink))
        return [Prepared(self._function(inst), LaunchConfig(grid, (ATTN_THREADS, 1, 1)), KernelArgs(values))]

    # ------------------------------------------------------------------ FlashAttentionScore
    def flash_attention_score(self, launch: Launch, flash: bool = False) -> list[Prepared]:
        """Training attention forward: attentionOutOut and the [B,N,Sq,8] softmax max / sum (``flash``: that kernel)."""
        args, plan = launch.args, launch.plan
        q, k, v = args["query"], args["key"], args["value"]
        out, smax, ssum = args["attentionOutOut"], args["softmaxMaxOut"], args["softmaxSumOut"]
        for t in (q, k, v, out, smax, ssum):
            assert isinstance(t, AclTensor)
        if q.dtype not in ATTENTION_DTYPES:
            raise _refuse("FlashAttentionScore", f"{q.dtype.short} inputs")
        layout, nq, nkv, mode = plan["layout"], plan["nq"], plan["nkv"], plan["mode"]
        b, _, sq, d = layout_dims(q.view_dims, layout, nq)
        skv = layout_dims(k.view_dims, layout, nkv)[2]
        mask, pse = args["attenMaskOptional"], args["realShiftOptional"]
        meta = AttentionMeta(
            q=bnsd_strides(q.strides, layout, d),
            k=bnsd_strides(k.strides, layout, d),
            v=bnsd_strides(v.strides, layout, d),
            o=bnsd_strides(out.strides, layout, d),
            smax=broadcast4(smax.view_dims, smax.strides),
            ssum=broadcast4(ssum.view_dims, ssum.strides),
            group=nq // nkv,
            rows=sq,
            kv_len=skv,
        )
        if mask is not None:
            assert isinstance(mask, AclTensor)
            if mode in (0, 1):
                meta = replace(meta, mask=mask_strides(mask.view_dims, mask.strides), has_mask=1)
            bounds = window_bounds(mode, sq, skv, plan["pre"], plan["next"], skv - sq)
            if bounds is not None:
                meta = replace(meta, has_window=1, win_lo=bounds[0], win_hi=bounds[1], shift=bounds[2])
        if pse is not None:
            assert isinstance(pse, AclTensor)
            meta = replace(meta, pse=broadcast4(pse.view_dims, pse.strides), has_pse=1)
        sink = sink_of(args)
        meta = with_sink(meta, sink)
        inst = AttentionInstance(q.dtype, d, None if sink is None else sink.dtype)
        scale = float(args["scaleValue"])
        steps: list[Prepared] = []
        for start, count in _groups(b):
            pointers = [
                _address(q) + start * meta.q[0] * _itemsize(q.dtype),
                _address(k) + start * meta.k[0] * _itemsize(k.dtype),
                _address(v) + start * meta.v[0] * _itemsize(v.dtype),
                0 if pse is None else _address(pse) + start * meta.pse[0] * _itemsize(pse.dtype),
                0 if not meta.has_mask else _address(mask) + start * meta.mask[0],
                _address(out) + start * meta.o[0] * _itemsize(out.dtype),
                _address(smax) + start * meta.smax[0] * 4,
                _address(ssum) + start * meta.ssum[0] * 4,
                0,
            ]
            sink_address = 0 if sink is None else _address(sink)
            steps += self._prepare_attention(inst, meta, (sq, nq, count), scale, pointers, sink_address, flash)
        return steps

    # ------------------------------------------------------------------ FlashAttentionScore paths
    def _flash_kernel(self, launch: Launch) -> None:
        """FlashAttentionScore: the signature's path is chosen once (memo), then run on the launch's stream."""
        key = f"rocm.attention.fa@{self.backend.provider.get_device()}/{self.path_override}"
        memo_plan(launch, key, lambda: self._route(launch))(handle(launch.stream))

    def _problem(self, launch: Launch) -> BlasProblem:
        """The call's tensors, dims and strides in (batch, head, row, dim) terms."""
        args, plan = launch.args, launch.plan
        q, k, v = args["query"], args["key"], args["value"]
        out, smax, ssum = args["attentionOutOut"], args["softmaxMaxOut"], args["softmaxSumOut"]
        for t in (q, k, v, out, smax, ssum):
            assert isinstance(t, AclTensor)
        layout, nq, nkv, mode = plan["layout"], plan["nq"], plan["nkv"], plan["mode"]
        b, _, sq, d = layout_dims(q.view_dims, layout, nq)
        skv = layout_dims(k.view_dims, layout, nkv)[2]
        mask, pse = args["attenMaskOptional"], args["realShiftOptional"]
        full_mask = mask if mask is not None and mode in (0, 1) else None
        bounds = None
        if mask is not None:
            bounds = window_bounds(mode, sq, skv, plan["pre"], plan["next"], skv - sq)
        zero: Strides = (0, 0, 0, 0)
        return BlasProblem(
            q=q,
            k=k,
            v=v,
            out=out,
            smax=smax,
            ssum=ssum,
            mask=full_mask,
            pse=pse,
            qs=bnsd_strides(q.strides, layout, d),
            ks=bnsd_strides(k.strides, layout, d),
            vs=bnsd_strides(v.strides, layout, d),
            os=bnsd_strides(out.strides, layout, d),
            mask_strides=zero if full_mask is None else mask_strides(full_mask.view_dims, full_mask.strides),
            pse_strides=zero if pse is None else broadcast4(pse.view_dims, pse.strides),
            b=b,
            nq=nq,
            nkv=nkv,
            sq=sq,
            skv=skv,
            d=d,
            scale=float(args["scaleValue"]),
            bounds=bounds,
            sink=sink_of(args),
        )

    def _route(self, launch: Launch) -> Callable[[int], None]:
        """Pick the signature's path (cuDNN, BLAS, kernel) and return what enqueues it on a stream."""
        p = self._problem(launch)
        if p.q.dtype not in ATTENTION_DTYPES:
            raise _refuse("FlashAttentionScore", f"{p.q.dtype.short} inputs")
        mode = launch.plan["mode"]
        has_mask = launch.args["attenMaskOptional"] is not None
        cudnn_why = self.cudnn.refusal() or cudnn_refusal(
            p.q.dtype,
            p.d,
            mode,
            has_mask,
            p.pse is not None,
            p.sq,
            p.skv,
            {"query": p.qs, "key": p.ks, "value": p.vs, "attentionOutOut": p.os},
            {n: _address(t) for n, t in (("query", p.q), ("key", p.k), ("value", p.v), ("out", p.out))},
            p.sink is not None,
        )
        blas_why = blas_refusal(p, self.backend.matmul.unavailable())
        flash_why = flash_refusal(p.q.dtype, p.d, p.pse is not None)
        flash_slow = self.flash.slow(self.cudnn.refusal() is None)
        large = is_large(p.b, p.nq, p.sq, p.skv, self.large_work)
        try:
            override = None if self.path_override == "decode" else self.path_override
            path, why = choose_path(
                large=large,
                blas_refusal=blas_why,
                cudnn_refusal_reason=cudnn_why,
                flash_refusal_reason=flash_why,
                flash_slow=flash_slow,
                override=override,
            )
        except ValueError as exc:  # a forced path that cannot run the call: a typed refusal
            if override == "cudnn":
                raise refuse(str(exc)) from None
            raise AclError(RtErrorCode.ACL_ERROR_RT_FEATURE_NOT_SUPPORT, f"FlashAttentionScore: {exc}") from None
        run: Callable[[int], None]
        if path == "cudnn":
            key = SdpaKey(
                self.backend.provider.get_device(), p.q.dtype, p.b, p.nq, p.nkv, p.sq, p.skv, p.d,
                p.qs, p.ks, p.vs, p.os, cudnn_mask(mode, has_mask), p.scale,
            )  # fmt: skip
            built = self.cudnn.graph(key)
            if isinstance(built, str):
                if self.path_override is not None:
                    raise refuse(built)
                path, why = choose_path(
                    large=large,
                    blas_refusal=blas_why,
                    cudnn_refusal_reason=built,
                    flash_refusal_reason=flash_why,
                    flash_slow=flash_slow,
                )
            else:
                tensors = {"q": p.q, "k": p.k, "v": p.v, "o": p.out, "smax": p.smax, "ssum": p.ssum}
                run = functools.partial(self.cudnn.run, built, key, tensors)
        if path == "blas":
            run = functools.partial(self.blas.run, p)
        elif path in ("kernel", "flash"):
            steps = self.flash_attention_score(launch, flash=path == "flash")
            run = functools.partial(self._launch_steps, steps)
        self.last_path = path
        LOG.debug(
            "FlashAttentionScore %s B=%d N=%d/%d Sq=%d Skv=%d D=%d sparse=%d: %s path (%s)",
            p.q.dtype.short, p.b, p.nq, p.nkv, p.sq, p.skv, p.d, mode, path, why,
        )  # fmt: skip
        return run

    def _launch_steps(self, steps: list[Prepared], stream: int) -> None:
        for step in steps:
            self.backend.elementwise.launch_prepared(step, stream)

    # ------------------------------------------------------------------ FlashAttentionVarLenScore
    def flash_attention_varlen_score(self, launch: Launch) -> list[Prepared]:
        """TND attention: one kernel launch per packed sequence (offsets from the validated host lengths)."""
        args, plan = launch.args, launch.plan
        q, k, v = args["query"], args["key"], args["value"]
        out, smax, ssum = args["attentionOutOut"], args["softmaxMaxOut"], args["softmaxSumOut"]
        for t in (q, k, v, out, smax, ssum):
            assert isinstance(t, AclTensor)
        if q.dtype not in ATTENTION_DTYPES:
            raise _refuse("FlashAttentionVarLenScore", f"{q.dtype.short} inputs")
        nq, nkv, mode = plan["nq"], plan["nkv"], plan["mode"]
        d = q.view_dims[2]

        def tnd(t: AclTensor) -> Strides:  # [T, N, D] read as one batch of [N, T, D]
            return 0, t.strides[1], t.strides[0], t.strides[2]

        tnd_stats = plan.get("stats") == "TND"  # softmaxOutLayout 'same_as_input': [T, N, 8]

        def stats(t: AclTensor) -> Strides:  # [N, T, 8] (or [T, N, 8])
            if tnd_stats:
                return 0, t.strides[1], t.strides[0], t.strides[2]
            return 0, t.strides[0], t.strides[1], t.strides[2]

        sink = sink_of(args)
        base = AttentionMeta(
            q=tnd(q), k=tnd(k), v=tnd(v), o=tnd(out), smax=stats(smax), ssum=stats(ssum), group=nq // nkv
        )
        base = with_sink(base, sink)
        has_mask = args["attenMaskOptional"] is not None
        inst = AttentionInstance(q.dtype, d, None if sink is None else sink.dtype)
        scale = float(args["scaleValue"])
        item = _itemsize(q.dtype)
        steps: list[Prepared] = []
        q0 = kv0 = 0
        for lq, lkv in zip(plan["lq"], plan["lkv"]):
            meta = replace(base, rows=lq, kv_len=lkv)
            bounds = window_bounds(mode, lq, lkv, plan["pre"], plan["next"], lkv - lq) if has_mask else None
            if bounds is not None:
                meta = replace(meta, has_window=1, win_lo=bounds[0], win_hi=bounds[1], shift=bounds[2])
            pointers = [
                _address(q) + q0 * meta.q[2] * item,
                _address(k) + kv0 * meta.k[2] * item,
                _address(v) + kv0 * meta.v[2] * item,
                0,
                0,
                _address(out) + q0 * meta.o[2] * item,
                _address(smax) + q0 * meta.smax[2] * 4,
                _address(ssum) + q0 * meta.ssum[2] * 4,
                0,
            ]
            sink_address = 0 if sink is None else _address(sink)
            steps += self._prepare_attention(inst, meta, (lq, nq, 1), scale, pointers, sink_address)
            q0, kv0 = q0 + lq, kv0 + lkv
        return steps

    # ------------------------------------------------------------------ Incre / FusedInfer: the decode path
    def _inference_kernel(self, launch: Launch) -> None:
        """Prompt / Incre / FusedInfer attention: the path chosen once per signature (memo), then run."""
        key = f"rocm.attention.infer@{self.backend.provider.get_device()}/{self.path_override}/{self.decode.config_key}"
        if launch.plan.get("page"):
            key += f"/paged-{self.paged_mode}"
        memo_plan(launch, key, lambda: self._route_inference(launch))(handle(launch.stream))

    def _decode_call(self, launch: Launch) -> tuple[DecodeCall | None, str | None]:
        """The call as the decode path reads it, or (None, why it cannot take it)."""
        args, plan = launch.args, launch.plan
        q, out = args["query"], args["attentionOut"]
        assert isinstance(q, AclTensor) and isinstance(out, AclTensor)
        layout, nq, nkv, kind = plan["layout"], plan["nq"], plan["nkv"], plan["mask"]
        b, _, sq, d = layout_dims(q.view_dims, layout, nq)
        keys, values = _tensors(args["key"]), _tensors(args["value"])
        why = decode_refusal(
            launch.spec.name, q.dtype, sq, kind, len(keys), b, nq, nkv, d, self.backend.properties.warp_size
        )
        if why is not None:
            return None, why
        k, v = keys[0], values[0]
        mask = args["attenMask"] if kind == "decode" else None
        lse = args.get("softmaxLse") if plan["lse"] else None
        zero: Strides = (0, 0, 0, 0)
        if mask is not None:
            assert isinstance(mask, AclTensor)
        if lse is not None:
            assert isinstance(lse, AclTensor)
        call = DecodeCall(
            q=q,
            k=k,
            v=v,
            out=out,
            mask=mask,
            lse=lse,
            qs=bnsd_strides(q.strides, layout, d),
            ks=bnsd_strides(k.strides, layout, d),
            vs=bnsd_strides(v.strides, layout, d),
            os=bnsd_strides(out.strides, layout, d),
            mask_strides=zero if mask is None else mask_strides(mask.view_dims, mask.strides, decode=True),
            lse_strides=zero if lse is None else broadcast4(lse.view_dims, lse.strides),
            b=b,
            nq=nq,
            nkv=nkv,
            skv=layout_dims(k.view_dims, layout, nkv)[2],
            d=d,
            lengths=tuple(int(n) for n in plan["act_kv"]),
            scale=float(args["scaleValue"]),
            sink=sink_of(args),
        )
        return call, None

    def _route_paged(self, launch: Launch) -> Callable[[int], None]:
        """A paged-KV call: decode on the pool (direct) or a gathered cache; prefill on a gathered cache."""
        name = launch.spec.name
        if self.paged_mode not in PAGED_MODES:
            raise AclError(
                AclErrorCode.ACL_ERROR_INVALID_PARAM,
                f"ACL_PAGED_DECODE={self.paged_mode!r}: expected one of {', '.join(PAGED_MODES)}",
            )
        setup = paged_setup(launch)
        why = paged_refusal(setup)
        if why is not None:
            raise _refuse(name, f"paged KV with {why}")
        dense = with_dense(launch, setup)
        call: DecodeCall | None = None
        why = "forced"
        if self.path_override not in ("kernel", "flash"):
            call, why = self._decode_call(dense)
            if call is None and self.path_override == "decode":
                raise _refuse(name, f"the decode attention path forced: {why}")
        on_pool = self.paged_mode in ("tile", "direct")
        direct = None if call is None else direct_call(call, setup, self.paged_mode == "tile")
        if direct is not None and on_pool:
            prog = self.decode.plan(direct)
            path, detail = "decode", f"paged KV through the table; {self.decode.describe(direct)}"
            run: Callable[[int], None] = functools.partial(run_program, self.backend, prog)
            self.last_path = path
            LOG.debug("%s paged B=%d Skv<=%d: %s path (%s)", name, len(setup.lengths), setup.rows, path, detail)
            return run
        if call is not None and on_pool:
            LOG.debug("%s paged: an NZ pool whose 16-wide tiles are not contiguous; gathered instead", name)
        prog = Program()
        k_temp, v_temp = gather_plan(self.backend, setup, prog)
        if call is not None:
            prog = self.decode.plan(call, prog, (k_temp, v_temp))
            path, detail = "decode", f"gathered paged KV; {self.decode.describe(call)}"
            run = functools.partial(run_program, self.backend, prog)
        else:
            path, detail = self._prefill_path(dense, str(why))
            flash = path == "flash"

            def attend(stream: int, bases: list[int]) -> None:
                steps = self.inference_attention(
                    with_dense(launch, setup, bases[k_temp.slot], bases[v_temp.slot]), flash
                )
                self._launch_steps(steps, stream)

            def run(stream: int) -> None:
                run_program(self.backend, prog, stream, functools.partial(attend, stream))

            detail = f"gathered paged KV; {detail}"
        self.last_path = path
        LOG.debug("%s paged %s B=%d Skv<=%d: %s path (%s)", name, setup.key.dtype.short, len(setup.lengths),
                  setup.rows, path, detail)  # fmt: skip
        return run

    def _route_inference(self, launch: Launch) -> Callable[[int], None]:
        """Pick the decode kernel or the row kernel for this signature and return what enqueues it."""
        q = launch.args["query"]
        assert isinstance(q, AclTensor)
        if q.dtype not in ATTENTION_DTYPES:
            raise _refuse(launch.spec.name, f"{q.dtype.short} inputs")
        if launch.plan.get("page"):
            return self._route_paged(launch)
        name = launch.spec.name
        call: DecodeCall | None = None
        why: str | None = "forced"
        if self.path_override in ("kernel", "flash"):
            pass
        else:
            call, why = self._decode_call(launch)
            if call is None and self.path_override == "decode":
                raise _refuse(name, f"the decode attention path forced: {why}")
        run: Callable[[int], None]
        if call is not None:
            prog = self.decode.plan(call)
            run = functools.partial(run_program, self.backend, prog)
            path, detail = "decode", self.decode.describe(call)
            shape = f"B={call.b} N={call.nq}/{call.nkv} Skv={call.skv} D={call.d}"
        else:
            path, detail = self._prefill_path(launch, str(why))
            steps = self.inference_attention(launch, flash=path == "flash")
            run = functools.partial(self._launch_steps, steps)
            shape = f"query {list(q.view_dims)} {launch.plan['layout']}"
        self.last_path = path
        LOG.debug("%s %s %s: %s path (%s)", name, q.dtype.short, shape, path, detail)
        return run

    def _prefill_path(self, launch: Launch, why: str) -> tuple[str, str]:
        """("flash" or "kernel", why) for a Prompt / FusedInfer call the decode kernel does not take.

        Flash where forced (a typed refusal when the call does not fit it), or by default for large calls
        on devices with warp matrix instructions (cuDNN does not run these operators here, so its presence
        does not matter; the flash kernel passed their GPU tests on the H100, 2026-12-06); else the row kernel.
        """
        q = launch.args["query"]
        assert isinstance(q, AclTensor)
        plan = launch.plan
        b, _, sq, d = layout_dims(q.view_dims, "BNSD" if plan["layout"] == "BNSD_BSND" else plan["layout"], plan["nq"])
        refusal = flash_refusal(q.dtype, d, has_pse=False)
        if self.path_override == "flash":
            if refusal is not None:
                raise AclError(
                    RtErrorCode.ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                    f"{launch.spec.name}: the flash path forced: {refusal}",
                )
            return "flash", "forced"
        if self.path_override is None and refusal is None:
            slow = self.flash.slow(cudnn_present=False)
            skv = max((int(n) for n in plan["act_kv"]), default=0)
            if slow is None and is_large(b, plan["nq"], sq, skv, self.large_work):
                return "flash", "large, warp matrix instructions"
            why = slow or why
        return "kernel", why

    # ------------------------------------------------------------------ Prompt / Incre / FusedInfer
    def inference_attention(self, launch: Launch, flash: bool = False) -> list[Prepared]:
        """Prefill / decode attention with actual lengths, masks and sparse modes as the spec planned."""
        args, plan = launch.args, launch.plan
        q, out = args["query"], args["attentionOut"]
        assert isinstance(q, AclTensor) and isinstance(out, AclTensor)
        if q.dtype not in ATTENTION_DTYPES:
            raise _refuse(launch.spec.name, f"{q.dtype.short} inputs")
        layout, nq, nkv, kind = plan["layout"], plan["nq"], plan["nkv"], plan["mask"]
        in_layout = "BNSD" if layout == "BNSD_BSND" else layout
        out_layout = "BSND" if layout == "BNSD_BSND" else layout
        b, _, sq, d = layout_dims(q.view_dims, in_layout, nq)
        keys, values = _tensors(args["key"]), _tensors(args["value"])
        lse = args.get("softmaxLse") if plan["lse"] else None
        mask = args["attenMask"] if kind in ("full", "decode") else None
        act_q, act_kv = list(plan["act_q"]), list(plan["act_kv"])
        base = AttentionMeta(
            q=bnsd_strides(q.strides, in_layout, d),
            o=bnsd_strides(out.strides, out_layout, d),
            group=nq // nkv,
        )
        if mask is not None:
            assert isinstance(mask, AclTensor)
            base = replace(base, mask=mask_strides(mask.view_dims, mask.strides, decode=kind == "decode"), has_mask=1)
        if lse is not None:
            assert isinstance(lse, AclTensor)
            base = replace(base, lse=broadcast4(lse.view_dims, lse.strides))
        uniform = len(keys) == 1 and len(set(act_q)) <= 1 and len(set(act_kv)) <= 1
        chunks = _groups(b) if uniform else [(i, 1) for i in range(b)]
        sink = sink_of(args)
        base = with_sink(base, sink)
        inst = AttentionInstance(q.dtype, d, None if sink is None else sink.dtype)
        scale = float(args["scaleValue"])
        steps: list[Prepared] = []
        item = _itemsize(q.dtype)
        for start, count in chunks:
            kt, vt = keys[min(start, len(keys) - 1)], values[min(start, len(values) - 1)]
            within = start if len(keys) == 1 else 0  # batch index inside the cache tensor
            skv = layout_dims(kt.view_dims, in_layout, nkv)[2]
            rows, valid = act_q[start], act_kv[start]
            meta = replace(
                base,
                k=bnsd_strides(kt.strides, in_layout, d),
                v=bnsd_strides(vt.strides, in_layout, d),
                rows=rows,
                kv_len=valid,
            )
            if kind in ("full", "compressed"):
                bounds = window_bounds(plan["mode"], sq, skv, plan["pre"], plan["next"], valid - rows)
                if bounds is not None:
                    meta = replace(meta, has_window=1, win_lo=bounds[0], win_hi=bounds[1], shift=bounds[2])
            pointers = [
                _address(q) + start * meta.q[0] * item,
                _address(kt) + within * meta.k[0] * item,
                _address(vt) + within * meta.v[0] * item,
                0,
                0 if mask is None else _address(mask) + start * meta.mask[0],
                _address(out) + start * meta.o[0] * item,
                0,
                0,
                0 if lse is None else _address(lse) + start * meta.lse[0] * 4,
            ]
            sink_address = 0 if sink is None else _address(sink)
            steps += self._prepare_attention(inst, meta, (sq, nq, count), scale, pointers, sink_address, flash)
        return steps

    # ------------------------------------------------------------------ rotary embedding
    def _rope(
        self,
        x: AclTensor,
        cos: AclTensor,
        sin: AclTensor,
        out: AclTensor,
        mode: int,
        second: tuple[AclTensor, AclTensor] | None = None,
    ) -> list[Prepared]:
        """One launch rotating x into out, and ``second`` = (x2, out2) with the same cos/sin when given."""
        tensors = [x, out, *(second or ())]
        if x.dtype not in ATTENTION_DTYPES or len({cos.dtype, sin.dtype, *(t.dtype for t in tensors)}) != 1:
            raise _refuse("rotary embedding", f"dtypes {x.dtype.short}/{cos.dtype.short}/{sin.dtype.short}")
        first = rope_meta(x, cos, sin, out, mode) or EMPTY_ROPE
        other = (rope_meta(second[0], cos, sin, second[1], mode) if second is not None else None) or EMPTY_ROPE
        if first.pairs + other.pairs == 0:
            return []
        config = self.backend.elementwise_config(first.pairs + other.pairs)
        values: list[Any] = [KernelArgs.index_array(first.values(), "long long")]
        values.extend(KernelArgs.pointer(_address(t)) for t in (x, cos, sin, out))
        values.append(KernelArgs.index_array(other.values(), "long long"))
        values.extend(KernelArgs.pointer(_address(t) if other.pairs else 0) for t in (second or (x, out)))
        vec = self._rope_vec(mode, [(first, (x, cos, sin, out)), (other, (*(second or ()), cos, sin))])
        if vec > 1:
            config = self.backend.elementwise_config((first.pairs + other.pairs) // vec)
        function = self._function(RopeInstance(x.dtype, vec))
        return [Prepared(function, LaunchConfig(config.grid, (ROPE_THREADS, 1, 1)), KernelArgs(values))]

    def rope_mode(self) -> str:
        """``vec`` (the default: adjacent pairs with vector accesses where the views allow) or ``scalar``."""
        value = (self.forced_rope or self.backend.environ.get(ROPE_ENV, "") or "vec").strip().lower()
        if value not in ("scalar", "vec"):
            raise AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, f"{ROPE_ENV}={value!r}: expected scalar or vec")
        return value

    def _rope_vec(self, mode: int, parts: list[tuple[RopeMeta, tuple[AclTensor, ...]]]) -> int:
        """Pairs a thread under :data:`ROPE_ENV` = vec: the widest of 8/4/2 (16 bytes at most) that every
        operand's rows allow (half mode, unit last strides, aligned starts and strides); 1 otherwise."""
        if self.rope_mode() != "vec" or mode != 0:
            return 1
        size = parts[0][1][0].dtype.info.storage_bits // 8
        vec = 16 // size
        while vec > 1:
            ok = True
            for meta, tensors in parts:
                if meta.pairs == 0:
                    continue
                ok = ok and meta.half % vec == 0
                for t, strides in zip(tensors, (meta.x, meta.c, meta.s, meta.o)):
                    ok = ok and strides[3] == 1 and all(st % vec == 0 for st in strides[:3])
                    ok = ok and _address(t) % (vec * size) == 0
            if ok:
                return vec
            vec //= 2
        LOG.debug("rotary embedding: views too narrow or misaligned for vector pairs; a pair a thread")
        return 1

    def rotary_position_embedding(self, launch: Launch) -> list[Prepared]:
        """out = x*cos + rotate(x)*sin for modes 0 (half), 1 (interleave), 2 (quarter), 3 (interleave-half)."""
        a = launch.args
        x, cos, sin, out = a["x"], a["cos"], a["sin"], a["out"]
        assert isinstance(x, AclTensor) and isinstance(cos, AclTensor)
        assert isinstance(sin, AclTensor) and isinstance(out, AclTensor)
        return self._rope(x, cos, sin, out, int(a["mode"]))

    def apply_rotary_pos_emb(self, launch: Launch) -> list[Prepared]:
        """queryRef and keyRef rotated by half in place, cos/sin broadcast over heads."""
        a = launch.args
        cos, sin = a["cos"], a["sin"]
        assert isinstance(cos, AclTensor) and isinstance(sin, AclTensor)
        q, k = a["queryRef"], a["keyRef"]
        assert isinstance(q, AclTensor) and isinstance(k, AclTensor)
        return self._rope(q, cos, sin, q, 0, (k, k))  # both in one launch

    # ------------------------------------------------------------------ SwiGlu
    def swiglu(self, launch: Launch) -> list[Prepared]:
        """out = silu(a) * b with a, b the halves of x along dim (strided views of x)."""
        x, out = launch.args["x"], launch.args["out"]
        assert isinstance(x, AclTensor) and isinstance(out, AclTensor)
        if x.dtype not in ATTENTION_DTYPES:
            raise _refuse("SwiGlu", f"{x.dtype.short} x")
        first, second = halves(x, launch.plan["dim"])
        ew = self.backend.elementwise
        tokens: dict[str, D | None] = {"T": x.dtype, "F": x.dtype, "B": D.ACL_BOOL, "O": out.dtype}
        planned = ew.instantiate("SwiGlu", SWIGLU, tokens, [("a", first), ("b", second), ("out", out)])
        prepared = ew.prepare(planned)
        return [] if prepared is None else [prepared]


def _tensors(value: object) -> list[AclTensor]:
    """The tensors of a key/value argument (one tensor, or a tensor list)."""
    if isinstance(value, tuple):
        return list(value)
    assert isinstance(value, AclTensor)
    return [value]


def halves(x: AclTensor, dim: int) -> tuple[AclTensor, AclTensor]:
    """The two halves of ``x`` along ``dim`` as views over the same memory."""
    shape = list(x.view_dims)
    shape[dim] //= 2
    second_offset = x.offset + shape[dim] * x.strides[dim]

    def view(offset: int) -> AclTensor:
        return AclTensor(tuple(shape), x.dtype, x.strides, offset, Format.ACL_FORMAT_ND, tuple(shape), x.data)

    return view(x.offset), view(second_offset)


EMPTY_ROPE = RopeMeta(
    pairs=0, shape=(1, 1, 1), x=(0, 0, 0, 0), c=(0, 0, 0, 0), s=(0, 0, 0, 0), o=(0, 0, 0, 0), half=1, mode=0
)
"""The meta of a rotary launch's absent second tensor (no pairs)."""


def rope_meta(x: AclTensor, cos: AclTensor, sin: AclTensor, out: AclTensor, mode: int) -> RopeMeta | None:
    """The rotary launch's meta: x padded to rank 4, cos/sin broadcast to x (None when x is empty)."""
    shape = tuple(x.view_dims)
    if math.prod(shape) == 0:
        return None
    pad = 4 - len(shape)

    def strides4(t: AclTensor) -> Strides:
        s = (0,) * pad + broadcast_strides(t.view_dims, t.strides, shape)
        return s[0], s[1], s[2], s[3]

    shape4 = (1,) * pad + shape
    d = shape4[3]
    return RopeMeta(
        pairs=math.prod(shape) // 2,
        shape=(shape4[0], shape4[1], shape4[2]),
        x=strides4(x),
        c=strides4(cos),
        s=strides4(sin),
        o=strides4(out),
        half=d // 2,
        mode=mode,
    )


RUNNER = AttentionRunner

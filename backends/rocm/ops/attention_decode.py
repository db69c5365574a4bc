"""The split-KV decode path of IncreFlashAttention and FusedInferAttentionScore (one query token).

:func:`decode_refusal` says why a call cannot take it (None when it can): fp16/bf16, query S of 1,
one cache tensor for every batch (a tensor list of one), no mask or a decode mask ([B,S], [B,1,S],
[B|1,N|1,1,S]: read on the device per key, so a captured step replays with a mask changed in place),
head dim up to 256, a GQA group small enough for each lane's registers,
at most :data:`MAX_DECODE_BATCH` batches. :class:`DecodeAttention` plans such a call once per
signature as a :class:`~acl_rocm.ops.program.Program`: the split kernel, then, when there is more
than one split, the combine kernel over a stream-ordered temporary of partials; or, under
``ACL_DECODE_CONFIG=fused``, the split kernel alone, whose last block per (batch, kv head) combines the
partials it and the others left in the stream's persistent scratch (:meth:`RocmDriver.stream_scratch`).
Caches of at most ``DecodeConfig.block`` keys (``ACL_DECODE_CONFIG=auto[=N]``, the default; ``block``: every
cache) take one launch of the short-cache kernel instead (:mod:`acl_rocm.kernels.attention_decode_block`: one
block per (batch, kv head), no partials), where it covers the call (:func:`block_refusal`; else the split path,
with a debug log line saying why); ``bpdl`` launches it programmatically.
``ACL_DECODE_CONFIG`` also sets the split policy and tile (:func:`parse_decode_config`). Each batch's actual
length is a kernel argument, so batches of different lengths share one launch, and the launches do
not depend on the lengths (a task-group update re-planned with new lengths swaps in like for like).
"""

from __future__ import annotations

import ctypes
import logging
import threading
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from acl_core.dtypes import DataType as D
from acl_core.errors import AclError, AclErrorCode
from acl_core.tensor import AclTensor
from acl_rocm.kernels.attention import Strides
from acl_rocm.kernels.attention_decode import (
    DECODE_THREADS,
    DEFAULT_DECODE_SETTING,
    MAX_DECODE_BATCH,
    MAX_LANE_VALUES,
    PIPE_SMEM,
    DecodeConfig,
    DecodeInstance,
    DecodeMeta,
    decode_source,
    decode_splits,
    lanes_per_dim,
    page_tiles,
    parse_decode_config,
)
from acl_rocm.kernels.attention_decode_block import (
    ELEMS,
    BlockInstance,
    block_rows,
    block_source,
    block_threads,
    lanes_per_row,
)
from acl_rocm.kernels.attention_decode_pipe import (
    pipe_covers,
    pipe_dynamic_bytes,
    pipe_mask_covers,
    pipe_pitch,
    pipe_stages,
    pipe_static_bytes,
)
from acl_rocm.launch import KernelArgs, LaunchConfig
from acl_rocm.ops.program import FLAG, Program, Scratch, Step, Temp

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

DECODE_DTYPES = frozenset({D.ACL_FLOAT16, D.ACL_BF16})
PAGED_REPORT = "blockTable holds a block index outside the key/value pool ([0, blocks))"
DECODE_OPS = frozenset({"IncreFlashAttention", "FusedInferAttentionScore"})
MAX_HEAD_DIM = 256
LOG = logging.getLogger("acl_rocm.attention")
PARTIALS_REGION = "decode-partials"
"""The stream scratch region of the two-kernel path's partials under ``pcomb`` (the fused path's counters, in the
default region, never meet them)."""


@dataclass(frozen=True)
class DecodeCall:
    """One decode call in (batch, head, row, dim) terms, as the runner read it from the launch."""

    q: AclTensor
    k: AclTensor
    v: AclTensor
    out: AclTensor
    mask: AclTensor | None
    lse: AclTensor | None
    qs: Strides
    ks: Strides
    vs: Strides
    os: Strides
    mask_strides: Strides
    lse_strides: Strides
    b: int
    nq: int
    nkv: int
    skv: int
    d: int
    lengths: tuple[int, ...]
    scale: float
    sink: AclTensor | None = None
    """One logit per query head (FusedInferAttentionScoreV5's learnableSinkOptional), or None."""
    page: PagedDecode | None = None
    """Paged KV read through the block table (k / v are the pools, ks / vs their (block, head, row, dim) strides)."""


@dataclass(frozen=True)
class PagedDecode:
    """A paged decode call's table: tokens per block, the int32 table tensor, the pool's blocks, NZ pools."""

    size: int
    table: AclTensor
    blocks: int
    nz: bool
    tile: int = 1
    """NZ: the step between a 16-wide tile's elements (the direct kernels need 1)."""
    per_tile: bool = False
    """One table entry a warp's tile of keys where no tile crosses a page (``ACL_PAGED_DECODE=tile``)."""


def decode_refusal(
    op: str, dtype: D, sq: int, mask_kind: str, cache_tensors: int, b: int, nq: int, nkv: int, d: int, warp: int
) -> str | None:
    """Why the split-KV decode path cannot run this call (None when it can)."""
    if op not in DECODE_OPS:
        return f"{op} is not a decode operator"
    if dtype not in DECODE_DTYPES:
        return f"{dtype.short} inputs (the decode kernel runs fp16/bf16)"
    if sq != 1:
        return f"query S {sq} (decode is one token)"
    if mask_kind not in ("none", "decode"):
        return f"a {mask_kind} mask"
    if cache_tensors != 1:
        return f"{cache_tensors} cache tensors (one per batch)"
    if b > MAX_DECODE_BATCH:
        return f"batch {b} (actual lengths travel as kernel arguments for up to {MAX_DECODE_BATCH})"
    if not 0 < d <= MAX_HEAD_DIM:
        return f"head dim {d} (the decode kernel runs up to {MAX_HEAD_DIM})"
    per_lane = lanes_per_dim(d, warp)
    group = nq // nkv
    if group * per_lane > MAX_LANE_VALUES:
        return f"GQA group {group} at head dim {d} ({group * per_lane} values per lane, at most {MAX_LANE_VALUES})"
    return None


def block_refusal(call: DecodeCall, warp: int) -> str | None:
    """Why the short-cache block kernel cannot run this call (None when it can)."""
    group = call.nq // call.nkv
    if group * ELEMS > MAX_LANE_VALUES:
        return f"GQA group {group} ({group * ELEMS} query values per lane, at most {MAX_LANE_VALUES})"
    if lanes_per_row(call.d) > warp:
        return f"head dim {call.d} needs {lanes_per_row(call.d)} lanes a row (warp {warp})"
    return None


def block_vector_loads(call: DecodeCall) -> bool:
    """Whether K and V rows take 16-byte loads in the block kernel (unit dim stride, whole 8-element vectors)."""
    if call.d % ELEMS:
        return False
    item = call.k.dtype.info.storage_bits // 8
    for t, st in ((call.k, call.ks), (call.v, call.vs)):
        if st[3] != 1 or any(s % ELEMS for s in st[:3]):
            return False
        if (t.data + t.offset * item) % (ELEMS * item):
            return False
    return True


def nz_vector_loads(call: DecodeCall, lanes: int, fixed: bool = False) -> bool:
    """Whether an NZ pool's rows take aligned vector loads (a lane's dims inside one contiguous 16-wide tile).

    ``lanes``: the warp size (the split kernel: ``D / warp`` dims a lane), or with ``fixed`` the elements a lane
    loads (the block kernel's ELEMS).
    """
    assert call.page is not None
    vec = lanes if fixed else call.d // lanes if call.d % lanes == 0 else 0
    if not vec or call.d % vec or 16 % vec or call.page.tile != 1:
        return False
    item = call.k.dtype.info.storage_bits // 8
    for t, st in ((call.k, call.ks), (call.v, call.vs)):
        if any(s % vec for s in st) or (t.data + t.offset * item) % (vec * item):
            return False
    return True


def vector_loads(call: DecodeCall, warp: int) -> bool:
    """Whether K and V rows take aligned vector loads (unit dim stride, strides and addresses whole vectors)."""
    if call.d % warp:
        return False
    vec = call.d // warp
    item = call.k.dtype.info.storage_bits // 8
    for t, st in ((call.k, call.ks), (call.v, call.vs)):
        if st[3] != 1 or any(s % vec for s in st[:3]):
            return False
        if (t.data + t.offset * item) % (vec * item):
            return False
    return True


class DecodeAttention:
    """Plans split-KV decode calls on one backend (kernels compiled once per instance)."""

    def __init__(self, backend: RocmBackend) -> None:
        self.backend = backend
        self._lock = threading.Lock()
        self._sources: dict[tuple[DecodeInstance, str], str] = {}
        self._block_sources: dict[BlockInstance, str] = {}
        self._config: DecodeConfig | str = DecodeConfig()
        """How calls run (env ACL_DECODE_CONFIG); a string: why the setting is invalid (raised at the next plan)."""
        self._key = str(self._config)
        self.use_config(None)

    def use_config(self, setting: str | None) -> None:
        """Run ``setting`` (``ACL_DECODE_CONFIG``'s syntax) from now on; None: the environment's setting again.

        Signatures already planned keep their launches (a plan is made once per signature).
        """
        if setting is None:
            setting = self.backend.environ.get("ACL_DECODE_CONFIG", "") or DEFAULT_DECODE_SETTING
        try:
            self._config = parse_decode_config(setting)
        except ValueError as exc:
            self._config = f"ACL_DECODE_CONFIG={setting!r}: {exc}"
        self._key = str(self._config)

    @property
    def config_key(self) -> str:
        """The setting in force as text (a plan memo key part: a new setting plans a signature afresh)."""
        return self._key

    @property
    def config(self) -> DecodeConfig:
        """The configuration in force (ACL_ERROR_INVALID_PARAM where the setting is invalid)."""
        if isinstance(self._config, str):
            raise AclError(AclErrorCode.ACL_ERROR_INVALID_PARAM, self._config)
        return self._config

    def _function(self, inst: DecodeInstance, which: str) -> object:
        src = self._sources.get((inst, which))
        if src is None:
            src = decode_source(inst, which)
            with self._lock:
                self._sources[(inst, which)] = src
        if which == "split":
            warps = DECODE_THREADS // self.backend.properties.warp_size
            static = pipe_static_bytes(inst.head_dim, inst.group, inst.pkeys, inst.pipe, warps, inst.skip, inst.mma)
            return self.backend.function(src, inst.split_name, pipe_dynamic_bytes(inst), static_shared=static)
        return self.backend.function(src, inst.combine_name)

    def _page_tiles(self, call: DecodeCall, keys: int, splits: int, chunk: int) -> bool:
        """Whether a paged ``call`` reads one table entry a tile of ``keys`` keys (a debug line where it cannot)."""
        page = call.page
        if page is None or not page.per_tile:
            return False
        if page_tiles(page.size, keys, splits, chunk):
            return True
        LOG.debug(
            "paged decode: blockSize %d / chunk %d not multiples of the %d-key tile; a table entry per key row",
            page.size, chunk, keys,
        )  # fmt: skip
        return False

    def _page_span(self, call: DecodeCall, rpl: int, rows: int, splits: int, chunk: int) -> int:
        """The short-cache kernel's rows a table entry (``ptile``): the most (a power of two dividing ``rows``) whose
        ``rpl x span`` keys never cross a page; 0: a table entry a key row."""
        page = call.page
        if page is None or not page.per_tile:
            return 0
        span = rows
        while span and not page_tiles(page.size, rpl * span, splits, chunk):
            span = span // 2 if span % 2 == 0 else 0
        if span == 0:
            self._page_tiles(call, rpl, splits, chunk)  # the debug line
        return span

    def block_instance(self, call: DecodeCall, wide: bool = False) -> BlockInstance | None:
        """The short-cache kernel ``call`` takes under the configuration in force (None: the split path).

        ``wide``: the kernel the two-kernel path's split blocks run under ``wide`` (None: the split kernel).
        """
        cfg = self.config
        if not (cfg.wide if wide else cfg.takes_block(call.skv)):
            return None
        warp = self.backend.properties.warp_size
        why = block_refusal(call, warp)
        if why is not None:
            LOG.debug("decode Skv=%d: not the short-cache block kernel (%s); the split path", call.skv, why)
            return None
        group = call.nq // call.nkv
        heads = group if cfg.bheads == 0 or group % cfg.bheads else cfg.bheads
        if cfg.bheads and group % cfg.bheads:  # (it logged the dividing case, not this one)
            LOG.debug("decode: bheads=%d does not divide GQA group %d; the whole group a block", cfg.bheads, group)
        threads = block_threads(cfg.bthreads, warp, heads, call.d)
        page = call.page
        rows = block_rows(cfg.brows, heads, threads)
        splits, chunk = self.splits(call) if wide else (1, call.skv)
        return BlockInstance(
            call.q.dtype,
            call.d,
            heads,
            nz_vector_loads(call, ELEMS, True) if page is not None and page.nz else block_vector_loads(call),
            None if call.sink is None else call.sink.dtype,
            threads=threads,
            rows=rows,
            eager=cfg.beager,
            share=group // heads,
            paged="" if page is None else "nz" if page.nz else "rows",
            ptile=self._page_span(call, warp // lanes_per_row(call.d), rows, splits, chunk),
            pdl=self._pdl(cfg.bpdl and not wide),  # the short-cache launch only (not two,wide's split blocks)
        )

    def _pdl(self, wanted: bool) -> bool:
        """``bpdl``: the kernel waits on its predecessor and is launched programmatically (a debug line where the
        provider launches plainly: the wait then returns at once)."""
        why = self.backend.provider.programmatic_unavailable() if wanted else None
        if why is not None:
            LOG.debug("decode bpdl: %s; the short-cache kernel is launched plainly", why)
        return wanted

    def pipe_stages(self, call: DecodeCall) -> int:
        """The ``cp.async`` stages of the pipelined split kernel ``call`` takes under ``pipe`` (0: the register-tile
        split kernel, with a debug line saying why where ``pipe`` asked for it)."""
        cfg = self.config
        if not cfg.pipe:
            return 0
        item = call.k.dtype.info.storage_bits // 8
        group = call.nq // call.nkv
        why = "a paged cache" if call.page is not None else pipe_covers(call.d, group, item, cfg.pmma)
        if why is None and not block_vector_loads(call):
            why = "K / V rows are not whole 16-byte vectors (unit dim stride, 8-element strides and addresses)"
        stages = 0
        budget = self.pipe_budget(call, group)
        if why is None:
            stages = pipe_stages(cfg.pipe, cfg.pkeys, pipe_pitch(call.d, cfg.pmma), item, budget)
            if stages < 2:
                why = f"two stages of {cfg.pkeys} keys at head dim {call.d} exceed {budget} shared bytes"
            elif stages < cfg.pipe:
                LOG.debug("decode: %d pipeline stages of %d keys fit in %d shared bytes (of %d asked)",
                          stages, cfg.pkeys, budget, cfg.pipe)  # fmt: skip
        if why is not None:
            LOG.debug("decode Skv=%d: not the pipelined split kernel (%s); the register-tile split kernel",
                      call.skv, why)  # fmt: skip
            return 0
        return stages

    def pipe_budget(self, call: DecodeCall, group: int) -> int:
        """Shared bytes the pipelined kernel's stages may take: :data:`PIPE_SMEM`, or under ``pdyn`` (and ``pmma``,
        whose stages are always dynamic) the device's opt-in maximum a block less the kernel's static shared memory
        (:func:`pipe_static_bytes`, at most stages asked)."""
        cfg = self.config
        if not (cfg.pdyn or cfg.pmma):
            return PIPE_SMEM
        warps = DECODE_THREADS // self.backend.properties.warp_size
        static = pipe_static_bytes(call.d, group, cfg.pkeys, cfg.pipe, warps, cfg.pskip, cfg.pmma)
        return max(PIPE_SMEM, self.backend.properties.max_shared_memory - static)

    def pipe_skip(self, call: DecodeCall, stages: int) -> bool:
        """Whether the pipelined kernel stages ``call``'s mask and skips rows no head keeps (``pskip``; a debug line
        where it was asked for and cannot)."""
        if not (self.config.pskip and stages and call.mask is not None):
            return False
        why = pipe_mask_covers(call.mask_strides, call.skv, call.mask.data + call.mask.offset)
        if why is not None:
            LOG.debug("decode Skv=%d: pskip off (%s); every row in range is copied", call.skv, why)
            return False
        return True

    def describe(self, call: DecodeCall) -> str:
        """How ``call`` runs, for the path log line: the block kernel's shape or the splits."""
        warp = self.backend.properties.warp_size
        inst = self.block_instance(call)
        if inst is not None:
            shape = f"{inst.threads} threads x {inst.rows} rows, {inst.group} heads a block"
            shape += ", programmatic launch" if inst.pdl else ""
            keys = inst.ptile * (warp // lanes_per_row(call.d))
            return f"short-cache block kernel, {shape}{_table(call, keys)}, {self.config}"
        splits, chunk = self.splits(call)
        wide = self.block_instance(call, wide=True)
        shape = "" if wide is None else f" in the short-cache layout ({wide.threads} threads x {wide.rows} rows)"
        stages = 0 if wide is not None else self.pipe_stages(call)
        shape += f" pipelined ({stages} cp.async stages of {self.config.pkeys} keys)" if stages else ""
        shape += ", matrix units" if stages and self.config.pmma else ""
        shape += ", masked rows not copied" if self.pipe_skip(call, stages) else ""
        kpw = self.config.kpw
        keys = (
            wide.ptile * (warp // lanes_per_row(call.d))
            if wide is not None
            else kpw * self._page_tiles(call, kpw, splits, chunk)
        )
        return f"{splits} splits of {chunk} keys{shape}{_table(call, keys)}, {self.config}"

    def _block_plan(
        self,
        call: DecodeCall,
        inst: BlockInstance,
        splits: int = 1,
        chunk: int = 0,
        prog: Program | None = None,
        kv: tuple[Any, Any] | None = None,
    ) -> Program:
        """One launch of the block kernel; with several splits (``wide``) its partials, then the combine kernel."""
        src = self._block_sources.get(inst)
        if src is None:
            src = block_source(inst)
            with self._lock:
                self._block_sources[inst] = src
        fn = self.backend.function(src, inst.name)
        meta = self._meta(call, splits, chunk if splits > 1 else call.skv)
        item = call.q.dtype.info.storage_bits // 8
        prog = Program() if prog is None else prog
        part: Any = ctypes.c_void_p(0)
        if splits > 1:
            part = prog.temp(call.b * call.nq * splits * (call.d + 2) * 4)
        k_at, v_at = kv if kv is not None else (_address(call.k, item), _address(call.v, item))
        packed = KernelArgs.index_array(meta.values(), "long long")
        out, lse = _address(call.out, item), _address(call.lse, 4)
        sink = _address(call.sink, 0 if call.sink is None else call.sink.dtype.info.storage_bits // 8)
        values = (
            packed,
            KernelArgs.index_array(list(call.lengths) + [0] * (MAX_DECODE_BATCH - len(call.lengths)), "int"),
            ctypes.c_double(call.scale),
            _address(call.q, item),
            k_at,
            v_at,
            _address(call.mask, 1),
            part,
            out,
            lse,
            sink,
        )
        if call.page is not None:
            values = (*values, *self._page_args(call.page))
            prog.report = PAGED_REPORT
        grid = (call.b * call.nkv * inst.share * splits, 1, 1)
        programmatic = inst.pdl and self.backend.provider.programmatic_unavailable() is None
        prog.steps.append(Step(fn, LaunchConfig(grid, (inst.threads, 1, 1)), values, programmatic=programmatic))
        if splits > 1:
            two = DecodeInstance(call.q.dtype, call.d, inst.group * inst.share, inst.vector, inst.sink)
            config = LaunchConfig((call.b * call.nq, 1, 1), (DECODE_THREADS, 1, 1))
            prog.steps.append(Step(self._function(two, "combine"), config, (packed, part, out, lse, sink)))
        return prog

    @staticmethod
    def _page_args(page: PagedDecode) -> tuple[Any, ...]:
        """The paged kernels' extra arguments: the table geometry, the table, the check flag."""
        pm = [page.size, page.table.strides[0], page.table.strides[1], page.blocks]
        table = ctypes.c_void_p(page.table.data + page.table.offset * 4)
        return KernelArgs.index_array(pm, "long long"), table, FLAG

    @staticmethod
    def _meta(call: DecodeCall, splits: int, chunk: int) -> DecodeMeta:
        return DecodeMeta(
            q=call.qs,
            k=call.ks,
            v=call.vs,
            o=call.os,
            mask=call.mask_strides,
            lse=call.lse_strides,
            nq=call.nq,
            nkv=call.nkv,
            splits=splits,
            chunk=chunk,
            has_mask=int(call.mask is not None),
            has_sink=int(call.sink is not None),
            sink_step=0 if call.sink is None else call.sink.strides[0],
        )

    def splits(self, call: DecodeCall) -> tuple[int, int]:
        """(splits, chunk) of ``call`` on this device."""
        cfg = self.config
        units = self.backend.properties.compute_units
        per_unit = cfg.pipe_bpu if self.pipe_stages(call) else cfg.blocks_per_unit
        return decode_splits(call.b, call.nkv, call.skv, units, per_unit, cfg.min_chunk)

    def plan(self, call: DecodeCall, prog: Program | None = None, kv: tuple[Any, Any] | None = None) -> Program:
        """The call's launches: split kernel, then (several splits, two-kernel path) the combine kernel.

        Fused (``ACL_DECODE_CONFIG=fused``): one launch; the partials and the per-(batch, kv head) counters
        live in the stream's persistent scratch (counters zeroed once, left zero by each launch's last blocks).
        ``prog``: the program to append to (paged KV's gathers); ``kv``: the K and V addresses to read instead
        of ``call.k`` / ``call.v``'s (temporaries of ``prog``).
        """
        prog = Program() if prog is None else prog
        if call.b == 0 or call.nq == 0:
            return prog
        block = self.block_instance(call)
        if block is not None:
            return self._block_plan(call, block, prog=prog, kv=kv)
        cfg = self.config
        wide = None if cfg.fused else self.block_instance(call, wide=True)
        if wide is not None:
            return self._block_plan(call, wide, *self.splits(call), prog=prog, kv=kv)
        warp = self.backend.properties.warp_size
        sink_dtype = None if call.sink is None else call.sink.dtype
        page = call.page
        splits, chunk = self.splits(call)
        stages = self.pipe_stages(call)
        inst = DecodeInstance(
            call.q.dtype,
            call.d,
            call.nq // call.nkv,
            nz_vector_loads(call, warp) if page is not None and page.nz else vector_loads(call, warp),
            sink_dtype,
            kpw=cfg.kpw,
            fused=cfg.fused,
            eager=cfg.eager,
            dbuf=cfg.dbuf,
            paged="" if page is None else "nz" if page.nz else "rows",
            ptile=self._page_tiles(call, cfg.kpw, splits, chunk),
            pipe=stages,
            pkeys=cfg.pkeys if stages else 0,
            dyn=bool(stages) and (cfg.pdyn or cfg.pmma),  # pmma: its padded stages and staged query need room
            skip=self.pipe_skip(call, stages),
            comb=cfg.pcomb,
            pdl=cfg.ppdl,
            mma=bool(stages) and cfg.pmma,
        )
        split_fn = self._function(inst, "split")
        meta = self._meta(call, splits, chunk)
        packed = KernelArgs.index_array(meta.values(), "long long")
        lengths = list(call.lengths) + [0] * (MAX_DECODE_BATCH - len(call.lengths))
        part: Any = ctypes.c_void_p(0)
        counters: Any = ctypes.c_void_p(0)
        part_bytes = call.b * call.nq * splits * (call.d + 2) * 4
        if splits > 1 and inst.fused:
            counter_bytes = -(-call.b * call.nkv * 4 // 256) * 256
            prog.scratch = counter_bytes + part_bytes
            counters, part = Scratch(0), Scratch(counter_bytes)
        elif splits > 1 and inst.comb:  # pcomb: no allocation a call (a region of its own: no one's counters)
            prog.scratch, prog.scratch_region, part = part_bytes, PARTIALS_REGION, Scratch(0)
        elif splits > 1:
            part = prog.temp(part_bytes)
        item = call.q.dtype.info.storage_bits // 8

        def address(t: AclTensor | None, size: int = item) -> ctypes.c_void_p:
            return ctypes.c_void_p(0 if t is None else t.data + t.offset * size)

        out, lse = address(call.out), address(call.lse, 4)
        sink = address(call.sink, 0 if call.sink is None else call.sink.dtype.info.storage_bits // 8)
        split_values = (
            packed,
            KernelArgs.index_array(lengths, "int"),
            ctypes.c_double(call.scale),
            address(call.q),
            *(kv if kv is not None else (address(call.k), address(call.v))),
            address(call.mask, 1),
            part,
            out,
            lse,
            sink,
            counters,
        )
        if page is not None:
            split_values = (*split_values, *self._page_args(page))
            prog.report = PAGED_REPORT
        blocks = call.b * call.nkv * splits
        programmatic = self._split_pdl(inst.pdl)
        split_cfg = LaunchConfig((blocks, 1, 1), (DECODE_THREADS, 1, 1), pipe_dynamic_bytes(inst))
        prog.steps.append(Step(split_fn, split_cfg, split_values, programmatic=programmatic))
        if splits > 1 and not inst.fused:
            assert isinstance(part, Temp | Scratch)
            config = LaunchConfig((call.b * call.nq, 1, 1), (DECODE_THREADS, 1, 1))
            # the combine source does not depend on how the splits ran
            two = replace(inst, pipe=0, pkeys=0, dyn=False, skip=False, mma=False)
            step = Step(self._function(two, "combine"), config, (packed, part, out, lse, sink), programmatic)
            prog.steps.append(step)
        return prog

    def _split_pdl(self, wanted: bool) -> bool:
        """``ppdl``: whether the split path's launches are programmatic (a debug line where the provider cannot: its
        kernels then wait for nothing, launched plainly)."""
        why = self.backend.provider.programmatic_unavailable() if wanted else None
        if why is not None:
            LOG.debug("decode ppdl: %s; the split path is launched plainly", why)
        return wanted and why is None


def _table(call: DecodeCall, keys: int) -> str:
    """The path line's note on how a paged call reads its table, ``keys`` a table entry (empty for a dense call)."""
    if call.page is None:
        return ""
    return f", a table entry a tile of {keys} keys" if keys else ", a table entry a key row"


def _address(t: AclTensor | None, size: int) -> ctypes.c_void_p:
    """The device address of ``t``'s first element (null for an absent tensor)."""
    return ctypes.c_void_p(0 if t is None else t.data + t.offset * size)

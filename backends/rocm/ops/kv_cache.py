"""The KV-cache family on the GPU: paged scatter / gather, KvRmsNormRopeCache and RopeWithSinCosCache(V2).

Each call is a :class:`~acl_rocm.ops.program.Program` recorded once per signature: a range check of
its index values (slots, positions, KvRmsNormRopeCache's index: movement's ``Check``; GatherPaKvCache's
lengths and block tables: one thread for the sequence starts, then a thread per sequence over the block
table entries its kept rows read) sets the device flag, and the kernel that writes reads it first, so a
refused call writes nothing and reports 161002 at synchronisation. No host round trip: the launches
capture. ScatterPaKvCache moves key and value in one launch (a thread per element of a token's row, or per
16-byte vector of it under ``ACL_KV_SCATTER_CONFIG=vec``);
GatherPaKvCache keeps its sequence starts in a stream-ordered temporary. ScatterPaCache and
RopeWithSinCosCache are versions of these and run the same kernels.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from acl_core.backend import Kernel, Launch
from acl_core.dtypes import DataType as D
from acl_core.errors import AclnnError, AclnnStatus
from acl_core.tensor import AclTensor
from acl_rocm.kernels.kv_cache import (
    BLOCK_THREADS,
    KV_MODES,
    BlockCheck,
    GatherMeta,
    NormRopeCache,
    NormRopeMeta,
    PagedGather,
    PagedScatter,
    RopeCache,
    RopeCacheMeta,
    ScatterMeta,
    SequenceMeta,
    SequenceStarts,
    values_of,
)
from acl_rocm.kernels.movement import Check
from acl_rocm.launch import KernelArgs, LaunchConfig, launch_tensor
from acl_rocm.ops.movement import INLINE_CHECK_MAX
from acl_rocm.ops.program import FLAG, Program, Step, Temp, program_kernel
from acl_rocm.ops.sort import address, refuse

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

SCATTER_ENV = "ACL_KV_SCATTER_CONFIG"
"""ScatterPaKvCache's copy: ``scalar`` (a thread per element) or ``vec`` (a thread per 2-8 adjacent elements, one access
of up to 16 bytes, where the rows are unit-stride and every stride and address allows; elsewhere a thread per
element) or ``row`` (``vec``'s accesses, a block per token: the slot read once a block, a thread's first vector
loaded while the slot checks run, no 64-bit index division per element; the default: 2.21 / 2.37 µs a decode step at
batch 1 / 8 against scalar's 2.32 / 2.46 on an H100, 2026-12-06). All copy the same bytes."""
SCATTER_CONFIGS = ("scalar", "vec", "row")

OPS: tuple[str, ...] = ("GatherPaKvCache", "KvRmsNormRopeCache", "RopeWithSinCosCacheV2", "ScatterPaKvCache")
"""The aclnn operators this module runs (ScatterPaCache and RopeWithSinCosCache are versions of two of them)."""

FAMILY = "kv_cache"


def _ptr(t: AclTensor | None) -> ctypes.c_void_p:
    return KernelArgs.pointer(0 if t is None else address(t))


def _meta(meta: object) -> ctypes.Array[Any]:
    return KernelArgs.index_array(values_of(meta), "long long")


def _optional(launch: Launch, name: str) -> AclTensor | None:
    t = launch.args.get(name)
    return t if isinstance(t, AclTensor) else None


def _s2(t: AclTensor | None) -> tuple[int, int]:
    """A rank-2 tensor's strides (zeros for an absent one)."""
    return (0, 0) if t is None else (int(t.strides[0]), int(t.strides[1]))


def _s3(t: AclTensor | None) -> tuple[int, int, int]:
    """A rank-3 tensor's strides (zeros for an absent one)."""
    return (0, 0, 0) if t is None else (int(t.strides[0]), int(t.strides[1]), int(t.strides[2]))


def _s4(t: AclTensor | None) -> tuple[int, int, int, int]:
    """A rank-4 tensor's strides (zeros for an absent one)."""
    if t is None:
        return (0, 0, 0, 0)
    return (int(t.strides[0]), int(t.strides[1]), int(t.strides[2]), int(t.strides[3]))


class KvCacheRunner:
    """The KV-cache family on one backend."""

    def __init__(self, backend: RocmBackend) -> None:
        self.backend = backend
        self.forced_scatter: str | None = None
        """A :data:`SCATTER_ENV` setting over the environment's for calls made while set (tests, bench A/B)."""

    def scatter_mode(self) -> str:
        """The :data:`SCATTER_ENV` copy of ScatterPaKvCache (``scalar`` unless set; bad values are refused)."""
        value = (self.forced_scatter or self.backend.environ.get(SCATTER_ENV, "") or "row").strip().lower()
        if value not in SCATTER_CONFIGS:
            choices = ", ".join(SCATTER_CONFIGS)
            raise AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, f"{SCATTER_ENV}={value!r}: expected one of {choices}")
        return value

    def scatter_vec(self, pairs: Sequence[tuple[AclTensor, AclTensor]], widths: Sequence[int]) -> int:
        """Elements a thread of the scatter moves under ``vec``: the widest of 8/4/2 (16 bytes at most) that every
        (row, cache) pair allows (unit last strides, other strides, row widths and addresses multiples of it)."""
        if self.scatter_mode() not in ("vec", "row"):
            return 1
        size = pairs[0][0].dtype.info.storage_bits // 8
        vec = 16 // size
        while vec > 1:
            ok = all(w % vec == 0 for w in widths)
            for t in (x for pair in pairs for x in pair):
                strides = [int(st) for st in t.strides]
                ok = ok and strides[-1] == 1 and all(st % vec == 0 for st in strides[:-1])
                ok = ok and address(t) % (vec * size) == 0
            if ok:
                return vec
            vec //= 2
        return 1

    def kernels(self) -> dict[str, Kernel]:
        """A kernel per op name."""
        plans = {
            "ScatterPaKvCache": self.scatter,
            "GatherPaKvCache": self.gather,
            "KvRmsNormRopeCache": self.norm_rope,
            "RopeWithSinCosCacheV2": self.rope_cache,
        }
        forced = {"ScatterPaKvCache": lambda: self.forced_scatter}
        return {op: program_kernel(self.backend, FAMILY, op, plan, forced.get(op)) for op, plan in plans.items()}

    # ------------------------------------------------------------------ helpers
    def _step(self, prog: Program, kernel: Any, config: LaunchConfig, values: Sequence[Any]) -> None:
        function = self.backend.function(kernel.source(), kernel.kernel_name)
        prog.steps.append(Step(function, config, tuple(values)))

    def _flat(self, n: int) -> LaunchConfig:
        cfg = self.backend.elementwise_config(max(n, 1), 1)
        return LaunchConfig(cfg.grid, (min(cfg.block[0], BLOCK_THREADS), 1, 1))

    def _check(self, prog: Program, index: AclTensor, low: int, high: int) -> None:
        """Set the flag when a value of ``index`` lies outside [low, high)."""
        if index.numel == 0:
            return
        shape = tuple(index.view_dims) or (1,)
        strides = tuple(index.strides) or (0,)
        meta = KernelArgs.index_array([index.numel, *shape, *strides], "long long")
        values = [meta, _ptr(index), ctypes.c_longlong(low), ctypes.c_longlong(high), FLAG]
        self._step(prog, Check(index.dtype, len(shape), "long long"), self._flat(index.numel), values)

    # ------------------------------------------------------------------ ScatterPaKvCache
    def scatter(self, launch: Launch) -> Program:
        """Slot check, then key and value rows into their cache slots in one launch."""
        key, kc, slots = (launch_tensor(launch, n) for n in ("key", "keyCacheRef", "slotMapping"))
        with_value = bool(launch.plan["with_value"])
        value = _optional(launch, "value") if with_value else None
        vc = _optional(launch, "valueCacheRef") if with_value else None
        prog = Program(report="ScatterPaKvCache: slotMapping holds a slot outside the cache (and not -1)")
        tokens, heads, wk = (int(d) for d in key.view_dims)
        wv = int(value.view_dims[2]) if value is not None else 0
        high = int(kc.view_dims[0]) * int(kc.view_dims[1])
        n = tokens * heads * (wk + wv)
        inline = 0 < slots.numel <= INLINE_CHECK_MAX and n > 0 and kc.numel > 0
        if not inline:  # many slots (or nothing to write): a Check launch of their own
            self._check(prog, slots, -1, high)
        if n == 0 or kc.numel == 0:
            return prog
        pairs = [(key, kc)] + ([(value, vc)] if value is not None and vc is not None else [])
        vec = self.scatter_vec(pairs, (wk, wv))
        meta = ScatterMeta(
            n=n // vec,
            heads=heads,
            wk=wk // vec,
            wv=wv // vec,
            block_size=int(kc.view_dims[1]),
            slot_stride=int(slots.strides[0]),
            key=_s3(key),
            key_cache=_s4(kc),
            value=_s3(value),
            value_cache=_s4(vc),
        )
        row = self.scatter_mode() == "row"
        kernel = PagedScatter(key.dtype.info.storage_bits // 8, slots.dtype, inline, vec, row)
        values = [_meta(meta), _ptr(slots), _ptr(key), _ptr(kc), _ptr(value), _ptr(vc), FLAG]
        if inline:  # the slots, their count and stride, and the bounds [-1, high)
            values += [_ptr(slots), ctypes.c_longlong(slots.numel), ctypes.c_longlong(int(slots.strides[0]))]
            values += [ctypes.c_longlong(-1), ctypes.c_longlong(high)]
        if row:  # a block per token, whole warps up to BLOCK_THREADS over its heads x (wk + wv) / vec vectors
            warp = self.backend.properties.warp_size
            per = heads * (wk + wv) // vec
            threads = min(BLOCK_THREADS, -(-per // warp) * warp)
            grid = min(tokens, self.backend.properties.max_grid_x)
            self._step(prog, kernel, LaunchConfig((grid, 1, 1), (threads, 1, 1)), values)
            return prog
        self._step(prog, kernel, self._flat(n // vec), values)
        return prog

    # ------------------------------------------------------------------ GatherPaKvCache
    def gather(self, launch: Launch) -> Program:
        """Sequence starts and block-table checks, then each kept row copied from its cache block."""
        kc, vc, tables, lens, key, value = (
            launch_tensor(launch, n) for n in ("keyCache", "valueCache", "blockTables", "seqLens", "keyRef", "valueRef")
        )
        offsets = _optional(launch, "seqOffsetOptional")
        prog = Program(report="GatherPaKvCache: seqLens, seqOffsetOptional or blockTables holds a value out of range")
        batch = int(tables.view_dims[0])
        seq = SequenceMeta(
            batch=batch,
            lens_stride=int(lens.strides[0]),
            offset_stride=0 if offsets is None else int(offsets.strides[0]),
            cumulative=int(bool(launch.args["isSeqLensCumsum"])),
            has_offset=int(offsets is not None),
            rows=int(key.view_dims[0]),
            block_size=int(kc.view_dims[1]),
            num_blocks=int(kc.view_dims[0]),
            width=int(tables.view_dims[1]),
            table=_s2(tables),
        )
        starts: Temp = prog.temp((batch + 1) * 8)
        one = LaunchConfig((1, 1, 1), (1, 1, 1))
        self._step(prog, SequenceStarts(lens.dtype), one, [_meta(seq), _ptr(lens), _ptr(offsets), starts, FLAG])
        if batch:
            self._step(
                prog,
                BlockCheck(tables.dtype),
                self._flat(batch),
                [_meta(seq), _ptr(tables), _ptr(offsets), starts, FLAG],
            )
        heads, wk, wv = int(key.view_dims[1]), int(key.view_dims[2]), int(value.view_dims[2])
        n = int(key.view_dims[0]) * heads * (wk + wv)
        if n == 0 or batch == 0:
            return prog
        meta = GatherMeta(
            n=n,
            heads=heads,
            wk=wk,
            wv=wv,
            batch=batch,
            block_size=seq.block_size,
            has_offset=seq.has_offset,
            offset_stride=seq.offset_stride,
            table=seq.table,
            key=_s3(key),
            key_cache=_s4(kc),
            value=_s3(value),
            value_cache=_s4(vc),
        )
        kernel = PagedGather(key.dtype.info.storage_bits // 8, tables.dtype)
        values = [_meta(meta), _ptr(tables), _ptr(offsets), starts, _ptr(kc), _ptr(key), _ptr(vc), _ptr(value), FLAG]
        self._step(prog, kernel, self._flat(n), values)
        return prog

    # ------------------------------------------------------------------ KvRmsNormRopeCache
    def norm_rope(self, launch: Launch) -> Program:
        """Index check, then one block per token row: RmsNorm and RoPE written to the caches (and the outputs)."""
        names = ("kv", "gamma", "cos", "sin", "index", "kCacheRef", "ckvCacheRef")
        kv, gamma, cos, sin, index, kc, vc = (launch_tensor(launch, n) for n in names)
        k_out, v_out = _optional(launch, "kRopeOut"), _optional(launch, "cKvOut")
        output = bool(launch.args["isOutputKv"]) and k_out is not None and v_out is not None
        if kv.dtype not in (D.ACL_FLOAT16, D.ACL_BF16):
            raise refuse("KvRmsNormRopeCache", f"a {kv.dtype.short} kv")
        mode: str = launch.plan["kv_cache_mode"]
        prog = Program(report="KvRmsNormRopeCache: index holds a value outside the cache (and not -1)")
        b, _n, s, _d = (int(v) for v in kv.view_dims)
        dv, dk = int(gamma.view_dims[0]), int(cos.view_dims[3])
        block_size = int(kc.view_dims[1])
        limit = int(kc.view_dims[2]) if mode == "norm" else int(kc.view_dims[0]) * block_size
        self._check(prog, index, -1, limit)
        if b * s == 0:
            return prog
        (eps_bits,) = struct.unpack("<q", struct.pack("<d", float(launch.args["epsilon"])))

        def rows3(t: AclTensor | None, first: int, second: int, last: int) -> tuple[int, int, int]:
            if t is None:
                return (0, 0, 0)
            st = t.strides
            return (int(st[first]), int(st[second]) if int(t.view_dims[second]) != 1 else 0, int(st[last]))

        if mode == "paged":  # index [B*S]: token (b, s) reads entry b*S + s
            index_strides = (s * int(index.strides[0]), int(index.strides[0]))
        else:
            index_strides = (int(index.strides[0]), int(index.strides[1]) if index.rank == 2 else 0)
        meta = NormRopeMeta(
            seq=s,
            dv=dv,
            dk=dk,
            mode=KV_MODES[mode],
            block_size=block_size,
            per_batch=-(-s // block_size),
            output=int(output),
            epsilon_bits=eps_bits,
            kv=(int(kv.strides[0]), int(kv.strides[2]), int(kv.strides[3])),
            index=index_strides,
            gamma=int(gamma.strides[0]),
            cos=rows3(cos, 0, 2, 3),
            sin=rows3(sin, 0, 2, 3),
            k_cache=_s4(kc),
            v_cache=_s4(vc),
            k_out=rows3(k_out, 0, 2, 3) if output else (0, 0, 0),
            v_out=rows3(v_out, 0, 2, 3) if output else (0, 0, 0),
        )
        values = [_meta(meta), *(_ptr(t) for t in (kv, gamma, cos, sin, index, kc, vc)), _ptr(k_out), _ptr(v_out), FLAG]
        config = LaunchConfig((b * s, 1, 1), (BLOCK_THREADS, 1, 1))
        if b * s > self.backend.properties.max_grid_x:
            raise refuse(
                "KvRmsNormRopeCache", f"{b * s} token rows (the grid's limit is {self.backend.properties.max_grid_x})"
            )
        self._step(prog, NormRopeCache(kv.dtype), config, values)
        return prog

    # ------------------------------------------------------------------ RopeWithSinCosCacheV2
    def rope_cache(self, launch: Launch) -> Program:
        """Position check, then a thread per rotated pair / passed element of every query and key head."""
        pos, q, k, cache = (launch_tensor(launch, n) for n in ("positions", "queryIn", "keyIn", "cosSinCache"))
        q_out, k_out = launch_tensor(launch, "queryOut"), launch_tensor(launch, "keyOut")
        if q.dtype not in (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16):
            raise refuse("RopeWithSinCosCacheV2", f"a {q.dtype.short} query")
        prog = Program(report="RopeWithSinCosCacheV2: positions holds a value outside the cache")
        max_len, rotary = (int(v) for v in cache.view_dims)
        self._check(prog, pos, 0, max_len)
        head = int(launch.args["headSize"])
        tokens = int(q.view_dims[0])
        nq, nk = int(q.view_dims[1]) // head, int(k.view_dims[1]) // head
        tasks = rotary // 2 + head - rotary
        n = tokens * (nq + nk) * tasks
        if n == 0:
            return prog
        ends = [int(e) for e in launch.plan["rope_sections"]]
        padded = [*ends, 0, 0, 0, 0]
        pos_strides = (int(pos.strides[0]), int(pos.strides[1])) if pos.rank == 2 else (0, int(pos.strides[0]))
        meta = RopeCacheMeta(
            n=n,
            heads_q=nq,
            heads=nq + nk,
            head_size=head,
            rotary=rotary,
            sections=len(ends),
            interleaved=int(bool(launch.plan["rope_interleaved"])),
            ends=(padded[0], padded[1], padded[2], padded[3]),
            positions=pos_strides,
            cache=_s2(cache),
            query=_s2(q),
            key=_s2(k),
            query_out=_s2(q_out),
            key_out=_s2(k_out),
        )
        kernel = RopeCache(q.dtype, bool(launch.args["isNeoxStyle"]))
        values = [_meta(meta), _ptr(pos), _ptr(cache), _ptr(q), _ptr(k), _ptr(q_out), _ptr(k_out), FLAG]
        self._step(prog, kernel, self._flat(n), values)
        return prog


RUNNER = KvCacheRunner

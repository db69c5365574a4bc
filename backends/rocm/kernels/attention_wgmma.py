"""The flash-attention forward on Hopper's warpgroup MMA (``wgmma.mma_async``, sm_90a): an opt-in variant.

Same contract as :mod:`acl_rocm.kernels.attention_flash` (its :class:`AttentionMeta`, :class:`FlashGrid`,
pointers and outputs, rows past the query length zeros, max/sum/lse), for fp16/bf16, head dims 64 and 128,
16-byte-aligned contiguous rows, no explicit mask (windows, causal included, and a sink are kept). A block
is ``groups`` warpgroups (128 threads each), each owning 64 query rows; the block walks its rows' key range
in tiles of ``block_keys`` keys, K and V double-buffered in shared memory by ``cp.async`` (tile t + 1 lands
while tile t is computed; one barrier a tile, so the warpgroups drift within it and one's softmax can run beside
the other's products). Per tile and warpgroup: S = Q K^T as ``D / 16`` SS wgmma steps (Q and K by
descriptor, both K-major), the online softmax on the fp32 accumulator in registers (a row's 2 x N / 8
elements per thread, reduced over the 4 lanes sharing it), P rounded to fp16/bf16 in registers as the A
fragments of ``block_keys / 16`` RS wgmma steps O += P V (V by descriptor, N-major: ``imm-trans-b`` 1).
Shared memory uses the no-swizzle core-matrix layout (:func:`acl_rocm.kernels.wgmma.interleaved_offset`):
Q ``64 groups x D``, then 2 K and 2 V tiles of ``block_keys x D``, 16-bit elements (160 KiB at D 128,
two groups, 128-key tiles). The scale is folded as the ``-f`` flag of the mma.sync kernel does (its sign
into Q, ``|scale| log2 e`` into the exp2's FMA), exp2 is ``ex2.approx.ftz``.

The ``p`` shapes (``wg2k128p``) run FlashAttention-3's intra-warpgroup pipeline instead: S(t + 1) and P(t) V(t)
issued as consecutive batches, the softmax of tile t + 1 while P(t) V(t) runs (K copied two tiles ahead, V one).

The ``s`` shapes (``wg2k128s``, ``wg2k128ps``, ``wg2k64b2ps``) keep Q, K and V in the 128-byte-swizzled layout
(FlashAttention-3's, :func:`acl_rocm.kernels.wgmma.swizzled_offset`) instead: a tile is ``HEAD_DIM / 64`` blocks of 64
columns, each ``rows`` rows of 128 bytes whose 16-byte chunks are XORed with ``row % 8`` (8-row atoms of 1024 bytes; the
dynamic shared base aligned up to 1024 bytes at run time, 1 KiB more requested); descriptors in swizzle mode 1: Q and
K K-major (SBO 1024, a k16 step 32 bytes inside a block), V N-major (LBO ``block_keys * 128``: the next 64 dims, SBO
1024: the next 8 keys). The loaders' consecutive threads take consecutive 16-byte chunks of a row.

The ``l`` shapes (``wg2k64b2psl``) order the grid longest key range first across all heads (``wg_block``; the others
head after head, each head's longest first); blocks may also be 3-4 warpgroups (192 / 256 query rows sharing a K/V
tile) or 3-4 one-warpgroup blocks a multiprocessor (:data:`CANDIDATES`, issue 18's D 64 shapes).

The ``w`` shapes (``wg2k128wop``: a producer warpgroup on mbarriers, ``setmaxnreg``, ping-pong ``o``) are the
warp-specialised kernel of :mod:`acl_rocm.kernels.attention_wgmma_ws`, built on this module's device functions
(``_HELPERS``).

Compiled for the arch-specific target (``sm_90a``: ``RocmBackend.function``'s ``arch_specific``); it runs
only where chosen (``ACL_FLASH_CONFIG=wg2k128``, :class:`WgmmaConfig`) on an sm_90 device.
Measured on an H100 (2026-12-07): correct, 0.43x SDPA at best (``wg2k128``, D 128).
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from typing import Final

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.attention import ATTN_STRUCT
from acl_rocm.kernels.attention_flash import GRID_STRUCT, SHARED_LIMIT, fill_body
from acl_rocm.kernels.mma import MMA_SOURCE
from acl_rocm.kernels.prelude import PRELUDE
from acl_rocm.kernels.wgmma import wgmma_source
from acl_rocm.ops.attention_plan import KEY_RANGE_SOURCE

HEAD_DIMS: Final = (64, 128)
DTYPES: Final = frozenset({D.ACL_FLOAT16, D.ACL_BF16})
MAX_GROUPS: Final = 4
"""Warpgroups a multiprocessor at most (blocks x warpgroups): 4 x 128 threads leave 128 registers a thread."""
ARCHS: Final = frozenset({"sm_90"})
"""Device architectures whose arch-specific target (``sm_90a``) has ``wgmma.mma_async``."""


@dataclass(frozen=True)
class WgmmaConfig:
    """A block shape of the wgmma kernel: warpgroups (64 query rows each), keys a K/V tile, and the blocks a
    multiprocessor should hold (``__launch_bounds__``' minimum: 2 caps a thread at 128 registers): ``wg2k128``,
    ``wg2k64b2``."""

    groups: int
    block_keys: int
    blocks: int = 1
    pipelined: bool = False
    """Suffix ``p``: S(t + 1) and P(t) V(t) issued together, the softmax of t + 1 beside P(t) V(t) (FlashAttention-3's
    intra-warpgroup overlap; K copied two tiles ahead)."""
    swizzle: bool = False
    """Suffix ``s``: Q, K and V in the 128-byte-swizzled shared layout (:func:`acl_rocm.kernels.wgmma.swizzled_offset`,
    FlashAttention-3's) instead of the no-swizzle core matrices."""
    stages: int = 2
    """Suffix ``x3``: three K/V buffers (the plain loop, or any warp-specialised one): tile t + 2 is copied while t
    is computed, the copies two tiles to land instead of one."""
    specialised: bool = False
    """Suffix ``w``: a producer warpgroup copies K and V (mbarrier full / empty signalling) and gives its registers to
    the ``groups`` consumer warpgroups (``setmaxnreg``): :mod:`acl_rocm.kernels.attention_wgmma_ws`."""
    pingpong: bool = False
    """Suffix ``o`` (with ``w`` and ``p``): the consumer warpgroups issue their products in turn (named barriers), one's
    softmax under the other's wgmma."""
    longest: bool = False
    """Suffix ``l``: blocks ordered longest key range first across the whole grid (every head's last query tile, then
    the next), not head after head: a causal grid's last wave holds its shortest blocks (longest-first scheduling)."""

    def __str__(self) -> str:
        blocks = f"b{self.blocks}" if self.blocks != 1 else ""
        flags = "".join(f for f, on in (("w", self.specialised), ("o", self.pingpong), ("p", self.pipelined),
                                        ("s", self.swizzle), ("l", self.longest)) if on)  # fmt: skip
        return f"wg{self.groups}k{self.block_keys}{blocks}{flags}{f'x{self.stages}' if self.stages != 2 else ''}"

    @classmethod
    def parse(cls, text: str) -> WgmmaConfig:
        """``wg<groups>k<keys>[b<blocks>][w][o][p][s][l][x3]`` (groups 1-4, 1-3 with ``w``; keys 64/128;
        blocks 1-4, 1 with ``w``; groups x blocks at most 4; ``w`` warp-specialised, ``o`` ping-pong (with ``wp``),
        ``p`` pipelined, ``s`` 128-byte swizzle, ``l`` longest first across the grid, ``x3`` three K/V buffers, with
        ``p`` only when ``w``); ValueError for anything else."""
        found = re.fullmatch(r"wg(\d+)k(\d+)(?:b(\d+))?(w?)(o?)(p?)(s?)(l?)(?:x(\d+))?", text.strip())
        if found is None:
            raise ValueError(
                f"wgmma config {text!r} is not wg<warpgroups>k<keys>[b<blocks>][w][o][p][s][l][x3] (e.g. wg2k128)"
            )
        groups, keys, blocks = int(found.group(1)), int(found.group(2)), int(found.group(3) or 1)
        stages = int(found.group(9) or 2)
        ws, pp, pipe, swz, longest = (found.group(i) != "" for i in (4, 5, 6, 7, 8))
        config = cls(groups, keys, blocks, pipe, swz, stages, ws, pp, longest)
        if groups not in ((1, 2, 3) if ws else (1, 2, 3, 4)) or keys not in (64, 128) or blocks not in range(1, 5):
            raise ValueError(f"wgmma config {text!r}: warpgroups 1-4 (1-3 with w), keys a tile 64/128, blocks 1-4")
        if groups * blocks > MAX_GROUPS:  # the register file: 64K / (128 threads x 4 warpgroups) = 128 a thread
            raise ValueError(f"wgmma config {text!r}: at most {MAX_GROUPS} warpgroups a multiprocessor")
        if stages not in (2, 3) or (stages == 3 and pipe and not ws):
            raise ValueError(f"wgmma config {text!r}: K/V buffers 2 or 3 (x3 with p only when w)")
        if (ws and blocks != 1) or (pp and not (ws and pipe and groups > 1)):
            raise ValueError(f"wgmma config {text!r}: w takes one block a multiprocessor; o needs w, p, 2+ warpgroups")
        return config

    def instance(self, dtype: D, head_dim: int, sink: D | None = None) -> WgmmaInstance:
        """The kernel instance of this shape for ``dtype`` / ``head_dim`` / ``sink``."""
        return WgmmaInstance(dtype, head_dim, sink, self.groups, self.block_keys, self.blocks, self.pipelined,
                             self.swizzle, self.stages, self.specialised, self.pingpong, self.longest)  # fmt: skip


_FA3: Final = (WgmmaConfig(2, 128), WgmmaConfig(2, 128, pipelined=True))
_SW: Final = (
    WgmmaConfig(2, 128, swizzle=True),
    WgmmaConfig(2, 128, pipelined=True, swizzle=True),
    WgmmaConfig(2, 128, swizzle=True, stages=3),
)
_WS: Final = (  # warp-specialised (attention_wgmma_ws): ping-pong + intra-warpgroup overlap, swizzled, 3 buffers
    WgmmaConfig(2, 128, pipelined=True, specialised=True, pingpong=True),
    WgmmaConfig(2, 128, pipelined=True, swizzle=True, specialised=True, pingpong=True),
    WgmmaConfig(2, 128, pipelined=True, stages=3, specialised=True, pingpong=True),
    WgmmaConfig(2, 128, pipelined=True, swizzle=True, stages=3, specialised=True, pingpong=True),
)
DEFAULTS: Final = {
    64: (
        *_FA3,
        WgmmaConfig(2, 64, 2, pipelined=True),
        *_SW,
        WgmmaConfig(2, 64, 2, pipelined=True, swizzle=True),
        WgmmaConfig(2, 64, 2, swizzle=True, stages=3),
        *_WS,
    ),
    128: (
        *_FA3,
        *_SW,
        WgmmaConfig(2, 128, specialised=True),  # each FlashAttention-3 piece's share: the producer alone,
        WgmmaConfig(2, 128, pipelined=True, specialised=True),  # with the intra-warpgroup overlap, then ping-pong
        *_WS,
    ),
}
"""The shapes the ops bench times at each head dim on sm_90: FlashAttention-3's forward block (two warpgroups of 64
rows, 128-key tiles: one block a multiprocessor, 160 KiB of shared memory at D 128), plain and pipelined (``p``); at
D 64 two warpgroups on 64-key tiles, two blocks a multiprocessor, pipelined; each again in the 128-byte-swizzled
layout (``s``), and the plain swizzled loop with three K/V buffers (``x3``: 225 KiB at D 128). Registers (``nvcc
-Xptxas -v``, sm_90a, bf16; no spills, no serialised wgmma): D 128 ``wg2k128`` 206, ``wg2k128p`` 213, ``wg1k64p``
166, ``wg2k128s`` 208, ``wg2k128ps`` 213, ``wg2k128sx3`` 204; D 64 181, 181, 133, ``wg2k64b2p`` 126, ``wg2k128s``
168, ``wg2k128ps`` 174, ``wg2k64b2ps`` 127, ``wg2k128sx3`` 168, ``wg2k64b2sx3`` 120. Measured (H100, 2026-12-07,
S 4096 causal, D 128): ``wg2k128`` 0.43x SDPA, ``wg2k128p`` 0.42x, ``wg1k64p`` 0.25x (so no longer timed), the
mma.sync default 0.39x; D 64 S 1024: ``wg2k64b2p`` 0.40x, the mma.sync default 0.40x; the ``s`` and ``x3`` shapes
not yet. Not listed: ``wg2k64b2`` at D 128 (128 registers: 48 bytes spilled; pipelined, 164 bytes and serialised
wgmma). The warp-specialised shapes (``w``: ``wg2k128w``, ``wg2k128wp``, ``wg2k128wop``, ``wg2k128wops``,
``wg2k128wopx3``, ``wg2k128wopsx3``; :mod:`acl_rocm.kernels.attention_wgmma_ws`) are 384 threads, 168 registers at
launch, the producer ``setmaxnreg``'d to 40 and the consumers to 232; no spills (bf16 and fp16 + sink, D 64 and 128).
Not listed: ``wg3k128wop`` (three consumers get 152 registers: spills at D 64 and D 128)."""


CANDIDATES: Final = {
    64: tuple(
        WgmmaConfig.parse(t)
        for t in (
            "wg2k64b2psl wg2k64b2sl wg1k64b4psl wg1k64b4sl wg1k128b3sl wg4k64psl wg4k64sl wg3k64psl wg3k64sl wg3k128sl "
            "wg2k128sl wg2k64b2slx3"
        ).split()
    ),
    128: (WgmmaConfig.parse("wg2k128sl"), WgmmaConfig.parse("wg2k128psl")),
}
"""Issue 18's shapes for the D 64 bar (opt-in, not yet timed; the bench times them when ``ACL_BENCH_FLASH_CONFIGS``
names them): the causal grid ordered longest first across heads (``l``), and the warpgroups a multiprocessor holds split
other ways than two blocks of two (and the default's order with three K/V buffers, ``wg2k64b2slx3``): four blocks of one
(``wg1k64b4``), three of one on 128-key tiles (``wg1k128b3``), one block of four or three (256 / 192 query rows sharing
each K/V tile). Why ``l``: at the bench's D 64 row (B 4, N 32, S 1024, causal) ``wg2k64b2`` is 1,024 blocks of 1-16 key
tiles over 264 slots; in a list-scheduling model (a block's time its key tiles, two slots a multiprocessor) the
head-after-head order keeps the slots busy 76% of the makespan, longest first across the grid 97% (``wg2k128`` at D 128,
S 4096: 97% and 100%). Registers (``nvcc -Xptxas -v``, sm_90a, bf16 and fp16 + sink): ``wg2k64b2psl`` 118,
``wg2k64b2sl`` 120, ``wg1k64b4psl`` 118, ``wg1k64b4sl`` 120, ``wg1k128b3sl`` 165, ``wg4k64psl`` 118, ``wg4k64sl`` 120,
``wg3k64psl`` 132, ``wg3k64sl`` 123, ``wg3k128sl`` 167, ``wg2k128sl`` 171 (D 128: 204), ``wg2k64b2slx3`` 120 (three K/V
buffers); no spills, no serialised wgmma. Not listed (spills): ``wg3k128psl`` (168 registers, 44 bytes), ``wg2k128b2sl``
and ``wg4k128sl`` (128, 28 bytes)."""


def block_of(x: int, tiles: int, blocks: int, longest: bool) -> tuple[int, int]:
    """(batch x head, query tile) of block ``x`` of ``blocks`` (``tiles`` a head): the Python twin of ``wg_block``."""
    if longest:
        heads = blocks // tiles
        return x % heads, tiles - 1 - x // heads
    return x // tiles, tiles - 1 - x % tiles


@dataclass(frozen=True)
class WgmmaInstance:
    """One compiled wgmma flash kernel: dtype, head dim, sink dtype, warpgroups, keys a tile."""

    dtype: D
    head_dim: int
    sink: D | None = None
    groups: int = 2
    block_keys: int = 128
    blocks: int = 1
    """``__launch_bounds__``' minimum blocks a multiprocessor."""
    pipelined: bool = False
    """The software-pipelined loop (:attr:`WgmmaConfig.pipelined`)."""
    swizzle: bool = False
    """The 128-byte-swizzled shared layout (:attr:`WgmmaConfig.swizzle`)."""
    stages: int = 2
    """K/V buffers (:attr:`WgmmaConfig.stages`)."""
    specialised: bool = False
    """A producer warpgroup beside the ``groups`` consumers (:attr:`WgmmaConfig.specialised`)."""
    pingpong: bool = False
    """The consumers' products issued in turn (:attr:`WgmmaConfig.pingpong`)."""
    longest: bool = False
    """Blocks ordered longest first across the grid (:attr:`WgmmaConfig.longest`)."""

    @property
    def rows(self) -> int:
        """Query rows per block."""
        return 64 * self.groups

    @property
    def threads(self) -> int:
        """Threads per block (the producer warpgroup included)."""
        return 128 * (self.groups + int(self.specialised))

    @property
    def shared_bytes(self) -> int:
        """Dynamic shared memory: Q, then ``stages`` K and as many V tiles (16-bit elements); swizzled, 1 KiB more
        (the base aligned up to 1024 bytes at run time); warp-specialised, the mbarriers (Q; K and V full and empty a
        stage)."""
        tiles = self.rows + 2 * self.stages * self.block_keys
        bars = 8 * (1 + 4 * self.stages) if self.specialised else 0
        return tiles * self.head_dim * 2 + (1024 if self.swizzle else 0) + bars

    @property
    def config(self) -> WgmmaConfig:
        """Its block shape."""
        return WgmmaConfig(self.groups, self.block_keys, self.blocks, self.pipelined, self.swizzle, self.stages,
                           self.specialised, self.pingpong, self.longest)  # fmt: skip

    @functools.cached_property
    def kernel_name(self) -> str:
        """A stable ``extern "C"`` name for this instance."""
        digest = hashlib.sha1(repr((self, ATTN_STRUCT, GRID_STRUCT)).encode()).hexdigest()[:12]
        sink = self.sink.short if self.sink is not None else "nosink"
        return f"acl_flash_wgmma_{self.dtype.short}_d{self.head_dim}_{sink}_{self.config}_{digest}"


def wgmma_refusal(dtype: D, head_dim: int, arch: str, vec: bool, has_mask: bool) -> str | None:
    """Why the wgmma kernel cannot run a call on ``arch`` (None when it can)."""
    if arch not in ARCHS:
        return f"wgmma.mma_async needs sm_90 (sm_90a code); the device is {arch}"
    if dtype not in DTYPES:
        return f"{dtype.short} inputs (it runs fp16/bf16)"
    if head_dim not in HEAD_DIMS:
        return f"head dim {head_dim} (it has {', '.join(map(str, HEAD_DIMS))})"
    if has_mask:
        return "an explicit mask (it takes windows and causal masks only)"
    if not vec:
        return "rows that are not contiguous 16-byte aligned runs (it copies 16-byte chunks)"
    return None


_HELPERS: Final = r"""
#define HEAD_DIM @D@
#define GROUPS @GROUPS@
#define BR (64 * GROUPS)
#define BC @BC@
#define THREADS (128 * GROUPS)
#define IS_BF16 @BF16@
#define PIPE @PIPE@
#define STAGES @STAGES@
#define SWZ @SWZ@
#define LONGEST @LONGEST@
#define SREGS (BC / 2)
#define OREGS (HEAD_DIM / 2)
#define ROW_BYTES (HEAD_DIM * 16)  // an 8-row group of a tile: HEAD_DIM / 8 core matrices of 128 bytes
typedef @S@ elem_t;
#if SWZ
// 128-byte swizzle (tiles 1024-byte aligned): a tile of R rows is HEAD_DIM / 64 blocks of 64 columns, R rows of 128
// bytes each; chunk c of a row r at chunk c ^ (r % 8). K-major Q, K: SBO 1024 (LBO unused), a k16 step +32 bytes
// inside a block, R * 128 bytes a block; V (N-major): LBO BC * 128 (the next 64 dims), SBO 1024 (the next 8 keys),
// a k16 step +16 keys (2048 bytes). Descriptor steps in 16-byte units.
#define Q_STEP(kk) (((kk) / 4) * (BR * 8) + ((kk) % 4) * 2)
#define K_STEP(kk) (((kk) / 4) * (BC * 8) + ((kk) % 4) * 2)
#define V_STEP(kt) ((kt) * 128)
#define DESC_QK(p) acl_wg_desc_sw128(p, 16, 1024)
#define DESC_V(p) acl_wg_desc_sw128(p, BC * 128, 1024)
#define Q_WG_OFFSET (64 * 64)  // a warpgroup's 64 rows of each column block
#else
#define Q_STEP(kk) (16 * (kk))
#define K_STEP(kk) (16 * (kk))
#define V_STEP(kt) ((kt) * (2 * ROW_BYTES / 16))
#define DESC_QK(p) acl_wg_desc(p, 128, ROW_BYTES)
#define DESC_V(p) acl_wg_desc(p, ROW_BYTES, 128)
#define Q_WG_OFFSET (64 * HEAD_DIM)
#endif
@ATTN_STRUCT@
@GRID_STRUCT@

// rows row0 .. row0 + rows of a [row][dim] operand (unit dim stride) into dst's core-matrix layout by `threads`
// threads (this one `tid` of them); rows at or past limit are zeros. Consecutive threads take the 8 rows of one core
// matrix (conflict-free 16-byte stores), a warp 8 rows x 64 bytes of global memory.
ACL_DEV void wg_load_by(unsigned short* dst, const elem_t* src, long long s_row, long long row0, int rows,
                        long long limit, const int tid, const int threads) {
  const int chunks = HEAD_DIM / 8;
#if SWZ  // consecutive threads take consecutive chunks of a row: 8 of them one swizzled 128-byte row (conflict-free)
  for (int i = tid; i < rows * chunks; i += threads) {
    const int c = i % chunks, r = i / chunks;
    const bool ok = row0 + r < limit;
    const int at = (c / 8) * rows * 64 + r * 64 + ((c % 8) ^ (r % 8)) * 8;
    acl_cp_async16(dst + at, src + (ok ? row0 + r : 0) * s_row + 8 * c, ok);
  }
#else
  for (int i = tid; i < rows * chunks; i += threads) {
    const int rr = i % 8, c = (i / 8) % chunks, rg = i / (8 * chunks);
    const int r = 8 * rg + rr;
    const bool ok = row0 + r < limit;
    acl_cp_async16(dst + ((rg * chunks + c) * 8 + rr) * 8, src + (ok ? row0 + r : 0) * s_row + 8 * c, ok);
  }
#endif
}
// the same by the whole block
ACL_DEV void wg_load(unsigned short* dst, const elem_t* src, long long s_row, long long row0, int rows,
                     long long limit) {
  wg_load_by(dst, src, s_row, row0, rows, limit, threadIdx.x, THREADS);
}

// this block's (batch x head, query tile), the longest key ranges first: within each head (heads in turn), or with
// LONGEST across the grid (every head's longest tile, then the next: a causal grid's last wave its shortest blocks)
ACL_DEV void wg_block(const FlashGrid& g, long long& bh, long long& qt) {
  const long long x = blockIdx.x;
#if LONGEST
  const long long heads = gridDim.x / g.tiles;
  bh = x % heads;
  qt = g.tiles - 1 - x / heads;
#else
  bh = x / g.tiles;
  qt = g.tiles - 1 - x % g.tiles;
#endif
}

ACL_DEV float wg_exp2(float x) {
#if defined(ACL_EMULATOR)
  return exp2f(x);
#else
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
#endif
}

template <int N> ACL_DEV void wg_keep(float (&x)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) acl_wg_keep(x[i]);
}
ACL_DEV void wg_keep_p(unsigned (&pa)[BC / 16][4]) {
#pragma unroll
  for (int kt = 0; kt < BC / 16; ++kt)
#pragma unroll
    for (int r = 0; r < 4; ++r) acl_wg_keep(pa[kt][r]);
}

// S = Q K^T issued as one batch (raw scores: the scale is in the exp2's FMA); the caller fences before, waits after
ACL_DEV void wg_scores(float (&sc)[SREGS], const unsigned long long q_desc, const unsigned long long k_desc) {
#pragma unroll
  for (int kk = 0; kk < HEAD_DIM / 16; ++kk)
    acl_wg_ss_n@BC@_@T@<0, 0>(sc, q_desc + Q_STEP(kk), k_desc + K_STEP(kk), kk);
  acl_wg_commit();
}

// O += P V issued as one batch (V N-major: imm-trans-b 1; a k16 step is two 8-key row groups)
ACL_DEV void wg_pv(float (&o)[OREGS], const unsigned (&pa)[BC / 16][4], const unsigned long long v_desc) {
#pragma unroll
  for (int kt = 0; kt < BC / 16; ++kt) acl_wg_rs_n@D@_@T@<1>(o, pa[kt], v_desc + V_STEP(kt), 1);
  acl_wg_commit();
}

// The online softmax of one tile's raw scores sc (keys j0 .. j0 + BC - 1): the window and key-end mask (only on
// tiles crossing them), row maxima over the 4 lanes of a row, m_run and l_run updated; P = exp2(s |scale| log2 e -
// base) into sc (fp32, in place), alpha the factor of the old terms (the caller rescales O by it).
ACL_DEV void wg_softmax(float (&sc)[SREGS], float (&alpha)[2], float (&m_run)[2], float (&l_run)[2], const float sl2,
                        const AttnMeta& m, const long long row0, const long long j0, const long long kv1,
                        const int r_lo, const int cq) {
  const float inf = __uint_as_float(0x7f800000u);
  const bool inside = j0 - (row0 + BR - 1) - m.shift >= m.win_lo && j0 + BC - 1 - row0 - m.shift <= m.win_hi;
  const bool full = j0 + BC <= kv1 && (!m.has_window || inside);
  float t_max[2] = {-inf, -inf};
  if (full) {
#pragma unroll
    for (int i = 0; i < SREGS; ++i) t_max[(i / 2) % 2] = fmaxf(t_max[(i / 2) % 2], sc[i]);
  } else {
#pragma unroll
    for (int i = 0; i < SREGS; ++i) {
      const long long row = row0 + r_lo + 8 * ((i / 2) % 2), j = j0 + 8 * (i / 4) + cq + i % 2;
      bool keep = j < kv1;
      if (keep && m.has_window) {
        const long long off = j - row - m.shift;
        keep = off >= m.win_lo && off <= m.win_hi;
      }
      if (!keep) sc[i] = -inf;
      t_max[(i / 2) % 2] = fmaxf(t_max[(i / 2) % 2], sc[i]);
    }
  }
  float base[2], t_sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    t_max[s] = fmaxf(t_max[s], ACL_SHFL_XOR(t_max[s], 1));
    t_max[s] = fmaxf(t_max[s], ACL_SHFL_XOR(t_max[s], 2));
    const float m_new = fmaxf(m_run[s], t_max[s] * sl2);  // sl2 > 0: -inf stays -inf
    base[s] = m_new == -inf ? 0.0f : m_new;  // nothing kept yet: every p and alpha is exp2(-inf) = 0
    alpha[s] = wg_exp2(m_run[s] - base[s]);
    m_run[s] = m_new;
  }
#pragma unroll
  for (int i = 0; i < SREGS; ++i) {
    sc[i] = wg_exp2(fmaf(sc[i], sl2, -base[(i / 2) % 2]));
    t_sum[(i / 2) % 2] += sc[i];
  }
#pragma unroll
  for (int s = 0; s < 2; ++s) l_run[s] = l_run[s] * alpha[s] + t_sum[s];
}

// P (fp32, in sc) rounded to fp16/bf16 pairs as the A fragments of P V: accumulator elements 8 kt .. 8 kt + 7 are
// the fragment of k-block kt, in order
ACL_DEV void wg_pack(const float (&sc)[SREGS], unsigned (&pa)[BC / 16][4]) {
#pragma unroll
  for (int i = 0; i < SREGS; i += 2) pa[i / 8][(i / 2) % 4] = acl_mma_pack<IS_BF16>(sc[i], sc[i + 1]);
}

// the row sums over the 4 lanes sharing a row; O / l out, then max / sum / lse (one lane a row)
ACL_DEV void wg_finish(const float (&o)[OREGS], const float (&m_run)[2], float (&l_run)[2], const AttnMeta& m,
                       const FlashGrid& g, elem_t* __restrict__ out, float* __restrict__ smax,
                       float* __restrict__ ssum, float* __restrict__ lse, const long long b, const long long h,
                       const long long row0, const int r_lo, const int cq, const int lane) {
  const float inf = __uint_as_float(0x7f800000u);
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    l_run[s] += ACL_SHFL_XOR(l_run[s], 1);
    l_run[s] += ACL_SHFL_XOR(l_run[s], 2);
  }
  elem_t* o_head = out + b * m.o[0] + h * m.o[1];
#pragma unroll
  for (int i = 0; i < OREGS; ++i) {
    const int s = (i / 2) % 2;
    const long long row = row0 + r_lo + 8 * s;
    if (row >= g.sq) continue;
    const float l = l_run[s];
    const float r = row < m.rows && l > 0.0f ? o[i] / l : 0.0f;
    o_head[row * m.o[2] + (8 * (i / 4) + cq + i % 2) * m.o[3]] = @STORE@;
  }
  if (lane % 4 == 0) {
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const long long row = row0 + r_lo + 8 * s;
      if (row >= g.sq) continue;
      const float row_max = m_run[s] == -inf ? -inf : m_run[s] * 0.6931471805599453f;  // natural units
      if (row < m.rows && smax != nullptr) {
        for (int c = 0; c < 8; ++c) {
          smax[b * m.smax[0] + h * m.smax[1] + row * m.smax[2] + c * m.smax[3]] = row_max;
          ssum[b * m.ssum[0] + h * m.ssum[1] + row * m.ssum[2] + c * m.ssum[3]] = l_run[s];
        }
      }
      if (lse != nullptr)
        lse[b * m.lse[0] + h * m.lse[1] + row * m.lse[2]] =
            row < m.rows && l_run[s] > 0.0f ? row_max + logf(l_run[s]) : inf;
    }
  }
}

"""
"""The defines and device functions of the wgmma flash kernels (the warp-specialised one too)."""

_SOFTMAX_STATE: Final = r"""  const float sl2_signed = (float)(scale_arg * 1.4426950408889634);
  const float sl2 = fmaxf(sl2_signed < 0.0f ? -sl2_signed : sl2_signed, 1.17549435e-38f);  // never 0 * inf
  const float sink_l2 = m.has_sink ? (float)(@SINK_LOAD@) * 1.4426950408889634f : -inf;
  float m_run[2], l_run[2];
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    m_run[s] = sink_l2;  // with a sink: one more logit with no value row: max = sink, sum = 1 (one lane)
    l_run[s] = m.has_sink && lane % 4 == 0 ? 1.0f : 0.0f;
  }
  float o[OREGS];
#pragma unroll
  for (int i = 0; i < OREGS; ++i) o[i] = 0.0f;"""
"""The online softmax's starting state (exp2 scale, running max and sum with a sink's logit, the output
registers): the same in the wgmma kernel and its warp-specialised form."""

_KERNEL: Final = r"""
extern "C" __global__ void __launch_bounds__(THREADS, @MINB@) @NAME@(
    const AttnMeta m, const FlashGrid g, const double scale_arg, const elem_t* __restrict__ q,
    const elem_t* __restrict__ k, const elem_t* __restrict__ v, const unsigned char* __restrict__ mask,
    elem_t* __restrict__ out, float* __restrict__ smax, float* __restrict__ ssum, float* __restrict__ lse,
    const @SINK_S@* __restrict__ sink) {
  extern __shared__ AclVec<unsigned, 4> smem_raw[];  // (BR + 4 BC) * HEAD_DIM 16-bit elements
#if SWZ  // 1024-byte aligned (the swizzle pattern follows address bits 4-9; the launch gives 1 KiB more)
  unsigned short* const qs = (unsigned short*)smem_raw + ((1024u - (acl_wg_smem(smem_raw) & 1023u)) & 1023u) / 2;
#else
  unsigned short* const qs = (unsigned short*)smem_raw;
#endif
  unsigned short* const ks = qs + BR * HEAD_DIM;            // STAGES K tiles
  unsigned short* const vs = ks + STAGES * BC * HEAD_DIM;   // STAGES V tiles
  const int tid = threadIdx.x, wg = tid / 128, warp = (tid / 32) % 4, lane = tid % 32;
  const float inf = __uint_as_float(0x7f800000u);
  long long bh, qt;
  wg_block(g, bh, qt);
  const long long h = bh % g.heads, b = bh / g.heads, hk = h / m.group;
  const long long row0 = qt * BR;
  // this thread's two rows (slot s: row r_lo + 8 s of the block) in the accumulator layout
  const int r_lo = 64 * wg + 16 * warp + lane / 4, cq = 2 * (lane % 4);
  const elem_t* qh = q + b * m.q[0] + h * m.q[1];
  const elem_t* kh = k + b * m.k[0] + hk * m.k[1];
  const elem_t* vh = v + b * m.v[0] + hk * m.v[1];
  const long long valid_rows = m.rows - row0 < BR ? m.rows - row0 : BR;
  long long kv0, kv1;
  acl_key_range(row0, valid_rows, m.kv_len, m.has_window, m.win_lo, m.win_hi, m.shift, &kv0, &kv1);
  const long long tiles = kv1 > kv0 ? (kv1 - kv0 + BC - 1) / BC : 0;

  // in flight (commit order): Q, then K(0) and V(0)
  wg_load(qs, qh, m.q[2], row0, BR, m.rows);
  acl_cp_async_commit();
  if (tiles > 0) {
    wg_load(ks, kh, m.k[2], kv0, BC, m.kv_len);
    wg_load(vs, vh, m.v[2], kv0, BC, m.kv_len);
  }
#if PIPE
  if (tiles > 1) wg_load(ks + BC * HEAD_DIM, kh, m.k[2], kv0 + BC, BC, m.kv_len);  // K runs two tiles ahead
#endif
  acl_cp_async_commit();
#if STAGES == 3  // and K(1), V(1): one group a tile from here on, so that a wait leaves the newest in flight
  if (tiles > 1) {
    wg_load(ks + BC * HEAD_DIM, kh, m.k[2], kv0 + BC, BC, m.kv_len);
    wg_load(vs + BC * HEAD_DIM, vh, m.v[2], kv0 + BC, BC, m.kv_len);
  }
  acl_cp_async_commit();
#endif
  if (scale_arg < 0.0) {  // Q negated (exactly), so that raw scores are scaled by |scale|
    acl_cp_async_wait<STAGES - 1>();
    __syncthreads();
    for (int i = tid; i < BR * HEAD_DIM; i += THREADS) qs[i] ^= 0x8000u;
  }
@SOFTMAX_STATE@

  // descriptors (no swizzle): Q and K K-major (LBO 128: the next 8 dims; SBO: the next 8 rows), V N-major
  // (LBO: the next 8 keys; SBO 128: the next 8 dims). A k16 step: +256 bytes (Q, K), +2 ROW_BYTES (V).
  const unsigned long long q_desc = DESC_QK(qs + wg * Q_WG_OFFSET);

#if !PIPE
  for (long long t = 0; t < tiles; ++t) {
    const long long j0 = kv0 + t * BC;
    const int cur = (int)(t % STAGES);
    unsigned short* const kts = ks + cur * BC * HEAD_DIM;
    unsigned short* const vts = vs + cur * BC * HEAD_DIM;
#if STAGES == 3
    acl_cp_async_wait<1>();  // K(t) and V(t) landed (copied while tiles t - 2, t - 1 were computed); t + 1 may fly
#else
    acl_cp_async_wait<0>();  // K(t) and V(t) landed (copied while tile t - 1 was computed)
#endif
    acl_fence_proxy_async();
    __syncthreads();  // K(t), V(t) visible to wgmma; every warpgroup is done with tile t - 1 (its buffers: the next)
#if STAGES == 3
    if (t + 2 < tiles) {
      const int nxt = cur == 0 ? 2 : cur - 1;  // (t + 2) % 3: tile t - 1's buffers
      wg_load(ks + nxt * BC * HEAD_DIM, kh, m.k[2], j0 + 2 * BC, BC, m.kv_len);
      wg_load(vs + nxt * BC * HEAD_DIM, vh, m.v[2], j0 + 2 * BC, BC, m.kv_len);
    }
    acl_cp_async_commit();  // every tile, empty or not: the wait above counts one group a tile
#else
    if (t + 1 < tiles) {
      wg_load(ks + ((t + 1) & 1) * BC * HEAD_DIM, kh, m.k[2], j0 + BC, BC, m.kv_len);
      wg_load(vs + ((t + 1) & 1) * BC * HEAD_DIM, vh, m.v[2], j0 + BC, BC, m.kv_len);
      acl_cp_async_commit();
    }
#endif
    float sc[SREGS];
    acl_wg_fence();
    wg_scores(sc, q_desc, DESC_QK(kts));
    acl_wg_wait<0>();
    wg_keep(sc);
    unsigned pa[BC / 16][4];
    float alpha[2];
    wg_softmax(sc, alpha, m_run, l_run, sl2, m, row0, j0, kv1, r_lo, cq);
    wg_pack(sc, pa);
#pragma unroll
    for (int i = 0; i < OREGS; ++i) o[i] *= alpha[(i / 2) % 2];
    // O += P V (no barrier since the tile's first: the warpgroups drift, one's softmax beside the other's products)
    wg_keep(o);
    wg_keep_p(pa);
    acl_wg_fence();
    wg_pv(o, pa, DESC_V(vts));
    acl_wg_wait<0>();
    wg_keep(o);
    wg_keep_p(pa);  // live until the products that read it are done
  }
#else
  // software-pipelined (FlashAttention-3's intra-warpgroup overlap): S(t + 1) = Q K(t + 1) and O += P(t) V(t) are
  // issued together, and the softmax of tile t + 1 runs while P(t) V(t) is still on the tensor cores. Copies: K runs
  // two tiles ahead, V one (group G(t), issued at the top of tile t: K(t + 2) into K buffer t & 1, whose K(t) S(t)
  // read in the previous step, and V(t + 1) into V buffer (t + 1) & 1, whose V(t - 1) the previous step's products
  // read). The softmax of t + 1 leaves P in sc (fp32); it becomes pa, the A fragments, only after P(t) V(t) is done
  // (registers a wgmma in flight reads are not written: ptxas would serialise the batches).
  unsigned pa[BC / 16][4];
  if (tiles > 0) {
    acl_cp_async_wait<0>();  // Q, K(0), V(0), K(1)
    acl_fence_proxy_async();
    __syncthreads();
    float sc[SREGS];
    acl_wg_fence();
    wg_scores(sc, q_desc, DESC_QK(ks));
    acl_wg_wait<0>();
    wg_keep(sc);
    float alpha[2];
    wg_softmax(sc, alpha, m_run, l_run, sl2, m, row0, kv0, kv1, r_lo, cq);  // O is still zero: no rescale
    wg_pack(sc, pa);
  }
  for (long long t = 0; t < tiles; ++t) {
    const long long j0 = kv0 + t * BC;
    const bool next = t + 1 < tiles;
    acl_cp_async_wait<0>();  // G(t - 1): K(t + 1) and V(t) landed
    acl_fence_proxy_async();
    __syncthreads();  // every warpgroup is done with S(t) and P(t - 1) V(t - 1): their buffers take G(t)
    if (t + 2 < tiles) wg_load(ks + (t & 1) * BC * HEAD_DIM, kh, m.k[2], j0 + 2 * BC, BC, m.kv_len);
    if (next) wg_load(vs + ((t + 1) & 1) * BC * HEAD_DIM, vh, m.v[2], j0 + BC, BC, m.kv_len);
    acl_cp_async_commit();
    float sc[SREGS];
    wg_keep(o);
    wg_keep_p(pa);
    acl_wg_fence();
    // S(t + 1) is issued on the last tile too (on a stale K buffer, its scores unused): no branch inside the batch
    wg_scores(sc, q_desc, DESC_QK(ks + ((t + 1) & 1) * BC * HEAD_DIM));
    wg_pv(o, pa, DESC_V(vs + (t & 1) * BC * HEAD_DIM));
    acl_wg_wait<1>();  // S(t + 1) done (batches complete in order); P(t) V(t) may still run
    wg_keep(sc);
    if (next) {
      float alpha[2];
      wg_softmax(sc, alpha, m_run, l_run, sl2, m, row0, j0 + BC, kv1, r_lo, cq);
      acl_wg_wait<0>();
      wg_keep(o);
      wg_keep_p(pa);  // P(t)'s registers stay untouched until its products are done
#pragma unroll
      for (int i = 0; i < OREGS; ++i) o[i] *= alpha[(i / 2) % 2];
      wg_pack(sc, pa);
    } else {
      acl_wg_wait<0>();
      wg_keep(o);
      wg_keep_p(pa);
    }
  }
#endif

  wg_finish(o, m_run, l_run, m, g, out, smax, ssum, lse, b, h, row0, r_lo, cq, lane);
}
"""


def shape_tokens(inst: WgmmaInstance) -> dict[str, str]:
    """The source tokens both wgmma flash kernels take from an instance (and their shared softmax start)."""
    return {
        "@D@": str(inst.head_dim),
        "@GROUPS@": str(inst.groups),
        "@PIPE@": "1" if inst.pipelined else "0",
        "@STAGES@": str(inst.stages),
        "@SWZ@": "1" if inst.swizzle else "0",
        "@LONGEST@": "1" if inst.longest else "0",
        "@BC@": str(inst.block_keys),
        "@T@": "bf16" if inst.dtype == D.ACL_BF16 else "f16",
        "@SOFTMAX_STATE@": _SOFTMAX_STATE,
    }


def wgmma_flash_source(inst: WgmmaInstance) -> str:
    """The complete source (prelude, matrix layers, key range included) of one wgmma flash kernel."""
    if inst.specialised:
        from acl_rocm.kernels.attention_wgmma_ws import ws_flash_source

        return ws_flash_source(inst)
    if (
        inst.dtype not in DTYPES
        or inst.head_dim not in HEAD_DIMS
        or inst.groups not in (1, 2, 3, 4)
        or inst.groups * inst.blocks > MAX_GROUPS
        or inst.block_keys not in (64, 128)
        or inst.blocks not in (1, 2, 3, 4)
        or inst.stages not in (2, 3)
        or (inst.stages == 3 and inst.pipelined)
    ):
        raise ValueError(f"no wgmma flash kernel for {inst}")
    if inst.shared_bytes * inst.blocks > SHARED_LIMIT:
        need = f"{inst.shared_bytes} bytes of shared memory a block, {inst.blocks} blocks a multiprocessor"
        raise ValueError(f"{inst} needs {need} (limit {SHARED_LIMIT})")
    tokens = {**shape_tokens(inst), "@MINB@": str(inst.blocks)}
    body = fill_body(_HELPERS + _KERNEL, inst.dtype, inst.sink, inst.kernel_name, tokens)
    ns = tuple(sorted({inst.block_keys, inst.head_dim}))
    header = f"// flash attention forward on wgmma (sm_90a): {inst.dtype.short}, D={inst.head_dim}, {inst.config}"
    return "\n".join([PRELUDE, MMA_SOURCE, wgmma_source(ns), KEY_RANGE_SOURCE, header, body])

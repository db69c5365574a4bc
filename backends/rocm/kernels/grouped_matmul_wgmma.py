"""The fp16 / bf16 grouped GEMM of GroupedMatmulV5 on Hopper's warpgroup MMA (``wgmma.mma_async``, sm_90a): opt-in.

Same descriptor table, group-list pass and block-to-tile mapping as the other grouped GEMMs
(:data:`~acl_rocm.kernels.grouped_matmul.FIND_GROUP`: block ``b`` finds its group by binary search over the groups'
first tiles, blocks past the device's tile count return at once, so the grid is the host's worst case and nothing
goes back to the host; or, persistent (``-p``), ``blocks`` x SMs blocks walk tiles ``b``, ``b + gridDim.x``, ...
up to the device's count, each issuing its next tile's first copies before the current tile's stores), with a
128 x ``bn`` output tile a block (``bn`` 128 or 256):

* Two warpgroups (256 threads), warpgroup ``w`` owning rows ``64 w .. 64 w + 63``; each issues ``m64n<bn>k16`` SS
  wgmma steps (:mod:`acl_rocm.kernels.wgmma`), 4 a 64-deep K slice, into ``bn / 2`` fp32 accumulators a thread. A tile
  whose last ``bn / 2`` columns lie past N (N 1,408 with ``bn`` 256) runs the ``m64n<bn / 2>k16`` form instead, and a
  warpgroup whose rows all lie past its group's end issues nothing.
* K advances 64 at a time through ``stages`` shared-memory slices filled by ``cp.async`` (x as a K-major
  ``[128][64]`` tile; the weight K-major ``[bn][64]`` when its K is contiguous, the [g, N, K] storage, ``imm-trans-b``
  0, or N-major ``[64][bn]`` when N is, the [g, K, N] one, ``imm-trans-b`` 1), ``stages - 2`` slices in flight while
  one is multiplied and the previous one's products may still run (``wgmma.wait_group 1``): the slice refilled at
  step s is the one of step s - 2, which every warpgroup has finished by step s's barrier.
* Shared layouts (``swizzle``): the 128-byte-swizzled one (:func:`~acl_rocm.kernels.wgmma.swizzled_offset`, tiles
  1024-byte aligned, the base aligned at run time) or the no-swizzle core matrices
  (:func:`~acl_rocm.kernels.wgmma.interleaved_offset`); descriptor strides and k16 steps come from
  :func:`operand_desc` (the source's constants are its values). Copies skip rows / columns past the group's (they
  only feed outputs never stored) and zero-fill K past the group's inner range (a K sum would mix them).
* Operands that cannot take 16-byte copies (odd strides, K ranges off the 8-element grid, a transposed x) are staged
  one element at a time in the same layouts, as the mma.sync kernel does.
* Epilogue: fp32 accumulators plus the bias (its own dtype, per column), rounded once to the output dtype, stored
  through the output's strides (pairs of columns as one access where the rows allow); rows past the last group are
  never touched.

Two opt-in choices aim at the weight-bound time of the MoE shape (64 groups, K 2,048, N 1,408: 5.77 MB of weight a
group, 369 MB in all, 7x the L2; on an H100 16k rows took ~530 us and 32k ~554 us, so the time follows the weight
bytes, not the FLOPs), neither measured yet:

* ``-m``, the tile order: by default tile ``t_in`` of a group is row tile ``t_in / tiles_n``, column tile
  ``t_in % tiles_n`` (N fastest), so the ``tiles_m`` blocks reading one 1 MB weight tile are ``tiles_n`` (6) blocks
  apart and start ~6 / 132 of a tile's time apart; ``-m`` numbers row tiles fastest (row ``t_in % tiles_m``, column
  ``t_in / tiles_m``, ``tiles_m`` from the group's M0 / M1 as GmmPrep counts them), so they are adjacent and ask for
  each weight slice together: one HBM read a weight byte while the wave's other reads cannot evict it in between.
* ``-d``, the copies in flight: a step waits (``wgmma.wait_group 0``) for its own products instead of keeping them
  running into the next step, so the slice refilled at step s is the one of step s - 1 and ``stages - 1`` slices are
  in flight instead of ``stages - 2`` (144 KiB instead of 96 at 128 x 256, s4). The reasoning: at the dense rate a
  128 x 256 x 64 step is ~0.56 us (989 TFLOP/s over 132 SMs), so two slices give each copy ~1.1 us from issue to use,
  less than HBM's latency under the load the weight stream puts on it; the cost is one issue gap a step (the
  warpgroups meet at the barrier with their tensor cores idle), small beside a memory-bound step. The 16k rows' steps
  took ~2 us (530 us over ~1,000 tiles of 32 steps in ~7.5 waves), i.e. the copies, not the products, set the pace.

Compiled for the arch-specific target (``RocmBackend.function``'s ``arch_specific``); the runner takes it only under
``ACL_GMM_KERNEL=wgmma`` on an sm_90 device (``ACL_GMM_WGMMA_CONFIG`` picks a :class:`WgGmmConfig`) and logs why it
does not elsewhere.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import ClassVar, Final

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.ctypes_map import ctype, load, store
from acl_rocm.kernels.grouped_matmul import FIELD, FIND_GROUP, GEMM_META, GEMM_PARAMS, hashed_name, kernel_source
from acl_rocm.kernels.grouped_matmul_mma import _SETUP_16, BIAS_DTYPES, SHARED_LIMIT
from acl_rocm.kernels.mma import MMA_SOURCE
from acl_rocm.kernels.wgmma import WARPGROUP, wgmma_source

BM: Final = 128
"""Rows of a block's tile: two warpgroups of 64."""
BK: Final = 64
"""K of a shared-memory slice (128 bytes of 16-bit elements: one swizzle atom's row)."""
THREADS: Final = 2 * WARPGROUP
DTYPES: Final = frozenset({D.ACL_FLOAT16, D.ACL_BF16})
OUT_DTYPES: Final = frozenset({D.ACL_FLOAT16, D.ACL_BF16, D.ACL_FLOAT})
ARCHS: Final = frozenset({"sm_90"})
"""Device architectures whose arch-specific target (``sm_90a``) has ``wgmma.mma_async``."""


@dataclass(frozen=True)
class WgGmmConfig:
    """A block shape: 128 x ``bn`` tiles, ``stages`` shared slices of K 64, ``blocks`` an SM (``__launch_bounds__``'
    minimum), the 128-byte-swizzled layout or the no-swizzle one, persistent blocks or one a tile."""

    bn: int = 256
    stages: int = 4
    blocks: int = 1
    swizzle: bool = True
    persistent: bool = False
    """Suffix ``-p``: a grid of ``blocks`` x SMs blocks walking the tiles, each issuing its next tile's first copies
    before the current tile's stores (the grid otherwise: one block a tile of the host's bound, extra ones return)."""
    m_fastest: bool = False
    """Suffix ``-m``: a group's tiles numbered row tile fastest (the blocks reading one weight tile adjacent) instead of
    column tile fastest."""
    deep: bool = False
    """Suffix ``-d``: each step waits for its own products, so ``stages - 1`` slices are in flight instead of
    ``stages - 2``."""

    @property
    def ahead(self) -> int:
        """K slices in flight while one is multiplied."""
        return self.stages - 1 if self.deep else self.stages - 2

    @property
    def stage_elements(self) -> int:
        """16-bit elements of one slice: x ``[128][64]`` and the weight ``[bn][64]`` or ``[64][bn]``."""
        return (BM + self.bn) * BK

    @property
    def shared_bytes(self) -> int:
        """Dynamic shared memory a launch passes (swizzled: 1 KiB more, the base aligned up to 1024 at run time)."""
        return self.stages * self.stage_elements * 2 + (1024 if self.swizzle else 0)

    def __str__(self) -> str:
        blocks = f"-b{self.blocks}" if self.blocks != 1 else ""
        flags = "".join(f for f, on in (("-p", self.persistent), ("-m", self.m_fastest), ("-d", self.deep)) if on)
        return f"{BM}x{self.bn}-s{self.stages}{blocks}{flags}{'-sw' if self.swizzle else ''}"

    def check(self) -> None:
        """Raise ValueError where the shape cannot run."""
        problems = [
            (self.bn not in (128, 256), "N tile 128 or 256"),
            (not 3 <= self.stages <= 8, "3 to 8 stages"),
            (self.blocks not in (1, 2), "1 or 2 blocks an SM"),
            (
                self.shared_bytes * self.blocks > SHARED_LIMIT,
                f"{self.shared_bytes * self.blocks} bytes of shared memory",
            ),
        ]
        bad = [why for failed, why in problems if failed]
        if bad:
            raise ValueError(f"wgmma grouped GEMM configuration {self}: " + "; ".join(bad) + f" (limit {SHARED_LIMIT})")


def parse_config(text: str) -> WgGmmConfig:
    """``128x<bn>-s<stages>[-b<blocks>][-p][-m][-d][-sw]`` (e.g. ``128x256-s4-m-sw``) as a checked configuration."""
    found = re.fullmatch(r"128x(\d+)-s(\d+)(?:-b(\d+))?(-p)?(-m)?(-d)?(-sw)?", text.strip().lower())
    if found is None:
        raise ValueError(f"{text!r} is not 128x<bn>-s<stages>[-b<blocks>][-p][-m][-d][-sw] (e.g. {DEFAULT})")
    bn, stages, blocks = int(found.group(1)), int(found.group(2)), int(found.group(3) or 1)
    persistent, m_fastest, deep, swizzle = (bool(found.group(i)) for i in (4, 5, 6, 7))
    config = WgGmmConfig(bn, stages, blocks, swizzle, persistent, m_fastest, deep)
    config.check()
    return config


DEFAULT: Final = WgGmmConfig(256, 4, 1, True)
"""``ACL_GMM_KERNEL=wgmma`` without ``ACL_GMM_WGMMA_CONFIG``: CUTLASS's Hopper shape (two consumer warpgroups of
64 x 256), four 48 KiB slices (193 KiB), swizzled. Not measured yet."""
ALTERNATIVES: Final = (
    "128x256-s4-p-sw",
    "128x256-s4",
    "128x128-s4-sw",
    "128x128-s3-b2-sw",
    "128x256-s4-m-sw",
    "128x256-s4-d-sw",
    "128x256-s4-m-d-sw",
    "128x256-s4-p-m-sw",
)
"""The shapes the ops bench times beside the default: persistent blocks (the next tile's first copies under this one's
stores), the no-swizzle layout (its primitive proven on an H100), 128-column tiles (no half-empty tail at N 1,408),
two such blocks an SM (one's epilogue beside the other's loop), and the weight-bound choices (module docstring): row
tiles fastest (``-m``), a slice more in flight (``-d``), both, and row tiles fastest on persistent blocks. Registers
(``nvcc -Xptxas -v``, sm_90a, bf16): the default 242, ``-p`` 255 with 24 bytes spilled, ``128x128-s4-sw`` 198,
``-b2`` 128 with 16 bytes spilled; no serialised wgmma in any. ``128x128-s3-b2-p-sw`` parses but spills ~200 bytes
(not timed). ``-m`` and ``-d`` change neither count, except ``-d`` on persistent blocks (``128x256-s4-p-m-d-sw``: 66
bytes spilled; proven on the emulator, not timed)."""


# ----------------------------------------------------------------------------- layout bookkeeping (Python twins)
def chunk_offset(row: int, chunk: int, rows: int, cols: int, swizzle: bool) -> int:
    """The element offset of 16-byte chunk ``chunk`` (elements ``8 chunk .. 8 chunk + 7``) of ``row`` in a tile of
    ``rows`` x ``cols`` 16-bit elements (``cols`` along the operand's contiguous axis): ``WGG_OFF``'s twin."""
    if swizzle:
        return (chunk // 8) * rows * 64 + row * 64 + ((chunk % 8) ^ (row % 8)) * 8
    return ((row // 8) * (cols // 8) + chunk) * 64 + (row % 8) * 8


def chunk_of(index: int, cols: int, swizzle: bool) -> tuple[int, int]:
    """(row, chunk) copy ``index`` of a tile stages (``WGG_CHUNK``'s twin): swizzled, consecutive copies take
    consecutive chunks of a row (8 of them one 128-byte swizzled row); otherwise the 8 rows of one core matrix."""
    per_row = cols // 8
    if swizzle:
        return index // per_row, index % per_row
    return 8 * (index // cols) + index % 8, (index // 8) % per_row


def element_offset(row: int, col: int, rows: int, cols: int, swizzle: bool) -> int:
    """Element (row, col)'s offset in the tile (:func:`chunk_offset` of its chunk plus its place in it)."""
    return chunk_offset(row, col // 8, rows, cols, swizzle) + col % 8


def operand_desc(operand: str, bn: int, swizzle: bool) -> tuple[int, int, int]:
    """(LBO, SBO, k16 step) of an operand's descriptor, bytes / bytes / 16-byte units: ``a`` (x, K-major ``[64 of a
    warpgroup][64]``), ``b_nk`` (the weight K-major, ``[bn][64]``), ``b_kn`` (N-major, ``[64][bn]``)."""
    if operand in ("a", "b_nk"):  # rows along M / N, columns along K: one 64-column block
        return (16, 1024, 2) if swizzle else (128, BK * 16, 16)
    if operand == "b_kn":  # rows along K, columns along N
        return (BK * 128, 1024, 16 * 128 // 16) if swizzle else (bn * 16, 128, 2 * bn * 16 // 16)
    raise ValueError(f"no operand {operand!r}")


def split_offset(nk: bool, wn: int, swizzle: bool) -> int:
    """The element offset of weight column ``wn`` in a stage's weight tile (where warpgroup 1's columns of a split
    tile start): ``wn`` rows of 64 (K-major), ``wn / 64`` swizzled column blocks or ``wn / 8`` core matrices."""
    return wn * (64 if nk or swizzle else 8)


# ----------------------------------------------------------------------------- device code
_DEVICE: Final = r"""
// ---- grouped GEMM on warpgroup MMA (kernels/grouped_matmul_wgmma.py) ----
#define WG_BM 128
#define WG_BK 64
#define WG_A_ELEMS (WG_BM * WG_BK)
#define WG_STAGE (WG_A_ELEMS + WG_BN * WG_BK)
typedef unsigned short wg_u16;

// chunk (r, c) of a tile of R rows x C columns (16-byte chunks along C): its element offset (chunk_offset's twin)
#if WG_SWZ
#define WGG_OFF(r, c, R, C) (((c) / 8) * (R) * 64 + (r) * 64 + ((((c) % 8) ^ ((r) % 8)) * 8))
#else
#define WGG_OFF(r, c, R, C) (((((r) / 8) * ((C) / 8) + (c)) * 64) + ((r) % 8) * 8)
#endif
// the (row, chunk) of copy i (chunk_of's twin); copy i + WG_THREADS is WG_THREADS / (C / 8) rows further, same chunk
ACL_DEV void wgg_chunk(int i, int C, int& r, int& c) {
#if WG_SWZ
  r = i / (C / 8);
  c = i % (C / 8);
#else
  r = 8 * (i / C) + i % 8;
  c = (i / 8) % (C / 8);
#endif
}

struct WgTile {
  const wg_u16* x;
  const wg_u16* w;
  long long xsr, xsc, wsk, wsn;
  long long row0, m1, col0, n, k0, k1;
  const long long* e;     // the group's descriptor row (the epilogue's output, strides and bias)
  bool nk, vec;           // the weight staged K-major; 16-byte copies
  bool narrow, short_rows;  // columns end in the tile's first half; at most 64 rows
};
// a persistent block's next tile: b (-1: none) of the descriptor table's groups
struct WgNext {
  const long long* table;
  long long groups, b;
};

// one operand's copies a slice: copy q of this thread reads src + q * step (+ the slice's K offset) into element
// dst + q * dstep of the stage's operand tile; bit q of ok: its row / column lies inside the group's
struct WgCopies {
  const wg_u16* src;
  long long step;
  int dst, kin;
  unsigned ok;
};

// x: [WG_BM][WG_BK], K-major
#define WG_A_COPIES (WG_BM * WG_BK / 8 / WG_THREADS)
#define WG_A_ROWS (WG_THREADS / (WG_BK / 8))
// the weight: [WG_BN][WG_BK] (NK) or [WG_BK][WG_BN]; as many copies either way
#define WG_B_COPIES (WG_BN * WG_BK / 8 / WG_THREADS)
#define WG_NK_ROWS (WG_THREADS / (WG_BK / 8))
#define WG_KN_ROWS (WG_THREADS / (WG_BN / 8))
#if WG_SWZ
#define WG_DSTEP(rows, C) ((rows) * 64)
#else
#define WG_DSTEP(rows, C) ((rows) * (C))
#endif

ACL_DEV WgCopies wgg_copies_a(const WgTile& t) {
  int r, c;
  wgg_chunk(threadIdx.x, WG_BK, r, c);
  WgCopies k;
  k.src = t.x + (t.row0 + r) * t.xsr + 8 * c;
  k.step = WG_A_ROWS * t.xsr;
  k.dst = WGG_OFF(r, c, WG_BM, WG_BK);
  k.kin = 8 * c;
  k.ok = 0;
#pragma unroll
  for (int q = 0; q < WG_A_COPIES; ++q) k.ok |= (t.row0 + r + WG_A_ROWS * q < t.m1 ? 1u : 0u) << q;
  return k;
}
template <bool NK> ACL_DEV WgCopies wgg_copies_b(const WgTile& t) {
  int r, c;
  WgCopies k;
  k.ok = 0;
  if (NK) {  // rows along N, chunks along K
    wgg_chunk(threadIdx.x, WG_BK, r, c);
    k.src = t.w + (t.col0 + r) * t.wsn + 8 * c;
    k.step = WG_NK_ROWS * t.wsn;
    k.dst = WGG_OFF(r, c, WG_BN, WG_BK);
    k.kin = 8 * c;
#pragma unroll
    for (int q = 0; q < WG_B_COPIES; ++q) k.ok |= (t.col0 + r + WG_NK_ROWS * q < t.n ? 1u : 0u) << q;
  } else {  // rows along K, chunks along N (N a multiple of 8: a chunk lies wholly inside or outside)
    wgg_chunk(threadIdx.x, WG_BN, r, c);
    k.src = t.w + r * t.wsk + t.col0 + 8 * c;
    k.step = WG_KN_ROWS * t.wsk;
    k.dst = WGG_OFF(r, c, WG_BK, WG_BN);
    k.kin = r;
    k.ok = t.col0 + 8 * c < t.n ? ~0u : 0u;
  }
  return k;
}

// one slice [kc, kc + WG_BK) by 16-byte copies: rows / columns outside the group's skipped, K outside zero-filled
template <bool NK> ACL_DEV void wgg_load_vec(wg_u16* stage, const WgCopies& a, const WgCopies& b, const WgTile& t,
                                            long long kc) {
  {
    const bool kok = kc + a.kin < t.k1;
#pragma unroll
    for (int q = 0; q < WG_A_COPIES; ++q) {
      if ((a.ok >> q) & 1u)
        acl_cp_async16(stage + a.dst + q * WG_DSTEP(WG_A_ROWS, WG_BK), kok ? a.src + q * a.step + kc : t.x, kok);
    }
  }
  wg_u16* sb = stage + WG_A_ELEMS;
  if (NK) {
    const bool kok = kc + b.kin < t.k1;
#pragma unroll
    for (int q = 0; q < WG_B_COPIES; ++q) {
      if ((b.ok >> q) & 1u)
        acl_cp_async16(sb + b.dst + q * WG_DSTEP(WG_NK_ROWS, WG_BK), kok ? b.src + q * b.step + kc : t.w, kok);
    }
  } else if (b.ok) {
    const wg_u16* src = b.src + kc * t.wsk;
#pragma unroll
    for (int q = 0; q < WG_B_COPIES; ++q) {
      const bool kok = kc + b.kin + WG_KN_ROWS * q < t.k1;
      acl_cp_async16(sb + b.dst + q * WG_DSTEP(WG_KN_ROWS, WG_BN), kok ? src + q * b.step : t.w, kok);
    }
  }
}

// one slice element by element (any strides, alignment and K range); zeros outside
template <bool NK> ACL_DEV void wgg_load_elements(wg_u16* stage, const WgTile& t, long long kc) {
  const int tid = threadIdx.x;
#pragma unroll 4
  for (int i = tid; i < WG_BM * WG_BK; i += WG_THREADS) {
    const int r = i / WG_BK, kk = i % WG_BK;
    const long long row = t.row0 + r, k = kc + kk;
    const wg_u16 v = (row < t.m1 && k >= t.k0 && k < t.k1) ? t.x[row * t.xsr + k * t.xsc] : (wg_u16)0;
    stage[WGG_OFF(r, kk / 8, WG_BM, WG_BK) + kk % 8] = v;
  }
  wg_u16* sb = stage + WG_A_ELEMS;
#pragma unroll 4
  for (int i = tid; i < WG_BN * WG_BK; i += WG_THREADS) {
    const int r = NK ? i / WG_BK : i / WG_BN, s = NK ? i % WG_BK : i % WG_BN;  // [n][k] or [k][n]
    const long long col = t.col0 + (NK ? r : s), k = kc + (NK ? s : r);
    const wg_u16 v = (col < t.n && k >= t.k0 && k < t.k1) ? t.w[k * t.wsk + col * t.wsn] : (wg_u16)0;
    sb[NK ? WGG_OFF(r, s / 8, WG_BN, WG_BK) + s % 8 : WGG_OFF(r, s / 8, WG_BK, WG_BN) + s % 8] = v;
  }
}

template <int N> ACL_DEV void wgg_keep(float (&x)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) acl_wg_keep(x[i]);
}

// the first WG_AHEAD slices of a tile in flight (one cp.async group each, empty ones included)
template <bool NK, bool VEC> ACL_DEV void wgg_prologue(wg_u16* smem, const WgTile& t) {
  const long long steps = t.k1 > t.k0 ? (t.k1 - t.k0 + WG_BK - 1) / WG_BK : 0;
  WgCopies ca, cb;
  if (VEC) {
    ca = wgg_copies_a(t);
    cb = wgg_copies_b<NK>(t);
  }
#pragma unroll
  for (int s = 0; s < WG_AHEAD; ++s) {
    if (s < steps) {
      if (VEC) wgg_load_vec<NK>(smem + s * WG_STAGE, ca, cb, t, t.k0 + s * WG_BK);
      else wgg_load_elements<NK>(smem + s * WG_STAGE, t, t.k0 + s * WG_BK);
    }
    acl_cp_async_commit();
  }
}
ACL_DEV void wgg_prologue_any(wg_u16* smem, const WgTile& t) {
  if (t.nk && t.vec) wgg_prologue<true, true>(smem, t);
  else if (t.vec) wgg_prologue<false, true>(smem, t);
  else if (t.nk) wgg_prologue<true, false>(smem, t);
  else wgg_prologue<false, false>(smem, t);
}

// the K loop of one tile, its prologue issued (wgg_prologue): WG_AHEAD slices in flight, one multiplied and (WG_PENDING
// 1) the previous one's products may still run, or (0, -d) every step waits for its own products. Warpgroup w
// multiplies rows 64 w .. 64 w + 63 by columns 0 .. WN - 1 (WN = WG_BN, or WG_BN / 2 for a tile whose columns end in
// its first half) or, SPLIT (a tile of at most 64 rows), rows 0 .. 63 by columns w WN .. w WN + WN - 1. Nothing here
// depends on the thread's warpgroup but descriptor addresses: ptxas serialises wgmma in divergent code.
template <bool NK, bool VEC, int WN, bool SPLIT>
ACL_DEV void wgg_loop(float (&d)[WN / 2], wg_u16* smem, const WgTile& t) {
  const long long steps = t.k1 > t.k0 ? (t.k1 - t.k0 + WG_BK - 1) / WG_BK : 0;
  if (steps == 0) return;
  WgCopies ca, cb;
  if (VEC) {
    ca = wgg_copies_a(t);
    cb = wgg_copies_b<NK>(t);
  }
  const int wg = threadIdx.x / 128;
  // this warpgroup's operands in a stage: x's 64 rows, the weight's WN columns (the [bn][64] tile's rows, or WN / 64
  // swizzled column blocks, or WN / 8 core matrices along N)
  const int a_at = SPLIT ? 0 : wg * WG_A_WG;
  const int b_at = WG_A_ELEMS + (SPLIT ? wg * WN * (NK ? WG_NK_SPLIT : WG_KN_SPLIT) : 0);
  int read = 0, write = WG_AHEAD;
  for (long long s = 0; s < steps; ++s) {
    acl_cp_async_wait<WG_AHEAD - 1>();  // this thread's copies of slice s landed
    acl_fence_proxy_async();              // ... and are visible to the async proxy (wgmma's operand reads)
    // everyone's; every warpgroup has finished the products of slice s - 1 - WG_PENDING (waited at step s - 1)
    __syncthreads();
    const long long next = s + WG_AHEAD;
    if (next < steps) {  // into slice s - 1 - WG_PENDING's buffer (WG_AHEAD + 1 + WG_PENDING == WG_STAGES)
      if (VEC) wgg_load_vec<NK>(smem + write * WG_STAGE, ca, cb, t, t.k0 + next * WG_BK);
      else wgg_load_elements<NK>(smem + write * WG_STAGE, t, t.k0 + next * WG_BK);
    }
    acl_cp_async_commit();
    const wg_u16* st = smem + read * WG_STAGE;
    const unsigned long long da = WG_DESC(st + a_at, WG_A_LBO, WG_A_SBO);
    const unsigned long long db = WG_DESC(st + b_at, NK ? WG_NK_LBO : WG_KN_LBO, NK ? WG_NK_SBO : WG_KN_SBO);
    acl_wg_fence();
#pragma unroll
    for (int ks = 0; ks < WG_BK / 16; ++ks)
      wgg_mma<NK ? 0 : 1>(d, da + WG_A_STEP * ks, db + (NK ? WG_NK_STEP : WG_KN_STEP) * ks);
    acl_wg_commit();
    acl_wg_wait<WG_PENDING>();  // the products of slice s - WG_PENDING are done (refilled from step s + 1 on)
    read = read + 1 == WG_STAGES ? 0 : read + 1;
    write = write + 1 == WG_STAGES ? 0 : write + 1;
  }
  acl_wg_wait<0>();
  wgg_keep(d);             // no read of the accumulators above the last wait
  acl_cp_async_wait<0>();  // no copy outlives the tile
}
// ---- end of the wgmma grouped GEMM's device code ----
"""


@dataclass(frozen=True)
class GmmWgmmaKernel:
    """The grouped GEMM on warpgroup MMA: x and weight of ``dtype`` (fp16 / bf16), bias of ``bias`` (None: none), the
    output of ``out`` (None: ``dtype``), block shape ``config``."""

    dtype: D
    bias: D | None
    out: D | None = None
    index_type: str = "long long"
    config: WgGmmConfig = DEFAULT

    path: ClassVar[str] = "wgmma"
    """The name the runner reports for this kernel (its debug line, ``last_path``)."""
    arch_specific: ClassVar[bool] = True
    """Compiled for the device's arch-specific target (``sm_90a``)."""
    tile_m: ClassVar[int] = BM
    threads: ClassVar[int] = THREADS

    @property
    def tile_n(self) -> int:
        """Columns of an output tile."""
        return self.config.bn

    @property
    def shared_bytes(self) -> int:
        """Dynamic shared memory a launch passes."""
        return self.config.shared_bytes

    def grid(self, tiles: int, compute_units: int) -> int:
        """Blocks to launch for at most ``tiles`` tiles: one a tile, or (persistent) at most ``blocks`` an SM."""
        return min(tiles, self.config.blocks * compute_units) if self.config.persistent else tiles

    def __post_init__(self) -> None:
        self.config.check()
        if self.dtype not in DTYPES:
            raise ValueError(f"the wgmma grouped GEMM takes float16 / bfloat16, not {self.dtype.short}")
        if self.out is not None and self.out not in OUT_DTYPES:
            raise ValueError(f"the wgmma grouped GEMM cannot write {self.out.short}")
        if self.bias is not None and self.bias not in BIAS_DTYPES:
            raise ValueError(f"the wgmma grouped GEMM cannot add a {self.bias.short} bias")

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return hashed_name("wgmma", self)

    def source(self) -> str:
        """The complete kernel source."""
        return _source(self)


def refusal(operands: D, out: D, bias: D | None, arch: str, arch_target: str | None) -> str | None:
    """Why the wgmma grouped GEMM cannot run these dtypes on ``arch`` (None when it can)."""
    if arch not in ARCHS:
        return f"wgmma.mma_async needs sm_90 (sm_90a code); the device is {arch}"
    if arch_target is None:
        return f"no arch-specific compile target (sm_90a) for {arch} on this provider"
    if operands not in DTYPES:
        return f"{operands.short} operands (it multiplies fp16 / bf16)"
    if out not in OUT_DTYPES or (bias is not None and bias not in BIAS_DTYPES):
        return f"a {out.short} output or a {bias.short if bias else 'no'} bias it does not write"
    return None


def wgmma_ns(c: WgGmmConfig) -> tuple[int, ...]:
    """The wgmma N forms a configuration issues: the tile's, half of it (a narrow last tile, or a short tile split
    between the warpgroups) and, at ``bn`` 256, a quarter (a short narrow one)."""
    return (c.bn // 4, c.bn // 2, c.bn) if c.bn == 256 else (c.bn // 2, c.bn)


def _defines(k: GmmWgmmaKernel) -> str:
    """The configuration's macros: tile, stages, layout, descriptor strides and steps (from :func:`operand_desc`)."""
    c = k.config
    t = "bf16" if k.dtype == D.ACL_BF16 else "f16"
    a, nk, kn = (operand_desc(op, c.bn, c.swizzle) for op in ("a", "b_nk", "b_kn"))
    lines = {
        "WG_BN": c.bn,
        "WG_STAGES": c.stages,
        "WG_AHEAD": c.ahead,
        "WG_PENDING": 0 if c.deep else 1,
        "WG_SWZ": int(c.swizzle),
        "WG_THREADS": THREADS,
        # a warpgroup's 64 rows of x: 64 rows of the one column block (swizzled) or 8 core-matrix rows
        "WG_A_WG": 64 * BK,
        "WG_A_LBO": a[0],
        "WG_A_SBO": a[1],
        "WG_A_STEP": a[2],
        "WG_NK_LBO": nk[0],
        "WG_NK_SBO": nk[1],
        "WG_NK_STEP": nk[2],
        "WG_KN_LBO": kn[0],
        "WG_KN_SBO": kn[1],
        "WG_KN_STEP": kn[2],
        "WG_NK_SPLIT": split_offset(True, 1, c.swizzle),
        "WG_KN_SPLIT": split_offset(False, 1, c.swizzle),
        "WG_DESC": "acl_wg_desc_sw128" if c.swizzle else "acl_wg_desc",
    }
    defines = [f"#define {name} {value}" for name, value in lines.items()]
    # one k16 step of the m64n<N> form, chosen by the accumulator's size (the loop's N is a template argument)
    mma = [
        f"template <int TB> ACL_DEV void wgg_mma(float (&d)[{n // 2}], unsigned long long da, unsigned long long db) "
        f"{{ acl_wg_ss_n{n}_{t}<0, TB>(d, da, db, 1); }}"
        for n in wgmma_ns(c)
    ]
    return "\n".join(defines + mma)


_SEARCH: Final = FIND_GROUP[FIND_GROUP.index("long long lo = 0, hi = groups - 1;") :]
"""FIND_GROUP's binary search (from its groups' first tiles to ``e``), for the persistent blocks' tiles."""


def _tile_fields(line: str) -> str:
    """A line of the mma kernel's setup (:data:`~acl_rocm.kernels.grouped_matmul_mma._SETUP_16`) with its ``nk`` and
    ``vec`` locals as the tile's fields."""
    line = line.replace("const bool nk =", "t.nk =").replace("const bool vec =", "t.vec =")
    return re.sub(r"\(nk \?", "(t.nk ?", line)


def _spell(line: str) -> str:
    """A helper's line with the descriptor field macros spelled out (helpers come before their defines)."""
    line = re.sub(r"\bF_([A-Z0-9]+)\b", lambda f: str(FIELD[f.group(1)]), line)
    return re.sub(r"\bNFIELDS\b", str(len(FIELD)), line)


def _tile_order(c: WgGmmConfig) -> list[str]:
    """``wgg_setup``'s lines placing tile ``t_in`` of a group: column tile fastest, or (``-m``) row tile fastest."""
    if c.m_fastest:  # the group's row tiles as GmmPrep counts them (a group with a tile has at least one row)
        return [
            f"  const long long tiles_m = (e[F_M1] - e[F_M0] + {BM - 1}) / {BM};",
            f"  t.row0 = e[F_M0] + (t_in % tiles_m) * {BM};",
            f"  t.col0 = (t_in / tiles_m) * {c.bn};",
        ]
    return [
        f"  const long long tiles_n = (n + {c.bn - 1}) / {c.bn};",
        f"  t.row0 = e[F_M0] + (t_in / tiles_n) * {BM};",
        f"  t.col0 = (t_in % tiles_n) * {c.bn};",
    ]


@functools.lru_cache(maxsize=64)
def _source(k: GmmWgmmaKernel) -> str:
    c = k.config
    o = ctype(k.dtype if k.out is None else k.out)
    f32 = ctype(D.ACL_FLOAT)
    bias_lines: list[str] = []
    add = ["", ""]
    if k.bias is not None:
        b = ctype(k.bias)
        bias_lines = [f"const {b.storage}* bias = (const {b.storage}*)e[F_BIAS];", "const long long bsn = e[F_BSN];"]
        add = [
            f"    if (bias) v0 += {load('bias[col * bsn]', b, f32)};",
            f"    if (bias && col + 1 < n) v1 += {load('bias[(col + 1) * bsn]', b, f32)};",
        ]
    pair = f"AclVec<{o.storage}, 2>"
    half = c.bn // 2
    epilogue = [
        "// tile b of group row e: its operands, ranges and path",
        "ACL_DEV void wgg_setup(const long long* e, long long b, WgTile& t) {",
        "  const long long n = e[F_N];",
        "  const long long t_in = b - e[F_TILE];",
        "  t.e = e;",
        "  t.x = (const wg_u16*)e[F_X];",
        "  t.w = (const wg_u16*)e[F_W];",
        *_tile_order(c),
        "  t.m1 = e[F_M1];",
        "  t.n = n;",
        *("  " + _tile_fields(line) for line in _SETUP_16),
        "  // a tile of at most 64 rows: the warpgroups split its columns (no warpgroup multiplies only rows past m1)",
        "  t.short_rows = t.m1 - t.row0 <= 64;",
        f"  t.narrow = n - t.col0 <= {half};",
        "}",
        "// block b's group row (FIND_GROUP's search)",
        "ACL_DEV const long long* wgg_group(const long long* table, long long groups, long long b) {",
        *("  " + line for line in _SEARCH),
        "  return e;",
        "}",
        "// the tile's outputs: accumulator element i of a thread is row 16 warp + lane / 4 + 8 ((i / 2) % 2),",
        "// column 8 (i / 4) + 2 (lane % 4) + i % 2 of its warpgroup's part; plus the bias, rounded once; rows past",
        "// m1 untouched",
        "template <int WN, bool SPLIT> ACL_DEV void wgg_store(const float (&d)[WN / 2], const WgTile& t) {",
        "  const long long* e = t.e;",
        "  const int tid = threadIdx.x, wg = tid / 128, warp = (tid / 32) % 4, lane = tid % 32;",
        "  const long long row0 = t.row0 + (SPLIT ? 0 : 64 * wg), col0 = t.col0 + (SPLIT ? wg * WN : 0);",
        "  const long long n = t.n;",
        f"  {o.storage}* out = ({o.storage}*)e[F_OUT];",
        "  const long long osr = e[F_OSR], osc = e[F_OSC];",
        *("  " + line for line in bias_lines),
        f"  const bool pairs = osc == 1 && osr % 2 == 0 && (unsigned long long)e[F_OUT] % sizeof({pair}) == 0;",
        "#pragma unroll",
        "  for (int h = 0; h < 2; ++h) {",
        "    const long long row = row0 + 16 * warp + lane / 4 + 8 * h;",
        "    if (row >= t.m1) continue;",
        f"    {o.storage}* line = out + row * osr;",
        "#pragma unroll",
        "    for (int j = 0; j < WN / 8; ++j) {",
        "      const long long col = col0 + 8 * j + 2 * (lane % 4);",
        "      if (col >= n) continue;",
        "      float v0 = d[4 * j + 2 * h], v1 = d[4 * j + 2 * h + 1];",
        *("  " + line for line in add),
        "      if (pairs && col + 1 < n) {",
        f"        {pair} p;",
        f"        p.v[0] = {store('v0', f32, o)};",
        f"        p.v[1] = {store('v1', f32, o)};",
        f"        *({pair}*)(line + col) = p;",
        "      } else {",
        f"        line[col * osc] = {store('v0', f32, o)};",
        f"        if (col + 1 < n) line[(col + 1) * osc] = {store('v1', f32, o)};",
        "      }",
        "    }",
        "  }",
        "}",
        "// one tile from its issued prologue to its stores; each path its own accumulators (ptxas serialises wgmma",
        "// whose accumulators several paths share). nb >= 0 (persistent blocks): the block's next tile, set up into",
        "// tn with its prologue issued once every warpgroup's products are done, so that its first copies fly during",
        "// this tile's stores (set up only then: nothing of it lives through the K loop)",
        "template <bool NK, bool VEC, int WN, bool SPLIT>",
        "ACL_DEV void wgg_tile(wg_u16* smem, const WgTile& t, const WgNext& nx, WgTile& tn) {",
        "  float d[WN / 2];",
        "#pragma unroll",
        "  for (int i = 0; i < WN / 2; ++i) d[i] = 0.0f;",
        "  wgg_loop<NK, VEC, WN, SPLIT>(d, smem, t);",
        "  if (nx.b >= 0) {",
        "    __syncthreads();  // every warpgroup's products read their last stage: the ring restarts at slice 0",
        "    wgg_setup(wgg_group(nx.table, nx.groups, nx.b), nx.b, tn);",
        "    wgg_prologue_any(smem, tn);",
        "  }",
        "  wgg_store<WN, SPLIT>(d, t);",
        "}",
    ]
    dispatch = ["ACL_DEV void wgg_dispatch(wg_u16* smem, const WgTile& t, const WgNext& nx, WgTile& tn) {"]
    for nk, vec in ((True, True), (False, True), (True, False), (False, False)):
        cond = f"{'' if nk else '!'}t.nk && {'' if vec else '!'}t.vec"

        def call(wn: int, split: bool, nk: bool = nk, vec: bool = vec) -> str:
            return f"wgg_tile<{str(nk).lower()}, {str(vec).lower()}, {wn}, {str(split).lower()}>(smem, t, nx, tn)"

        if not vec:  # staged element by element: one shape, performance aside
            dispatch.append(f"  if ({cond}) {call(c.bn, False)};")
            continue
        # the whole tile; the n/2 form where its columns end in its first half (bn 256); tiles of at most 64 rows
        # split along N between the warpgroups
        wide, split = (call(half, False), call(c.bn // 4, True)) if c.bn == 256 else (None, None)
        full = f"if (t.short_rows) {call(half, True)}; else {call(c.bn, False)};"
        if wide is not None:
            full = f"if (t.narrow) {{ if (t.short_rows) {split}; else {wide}; }} else {{ {full} }}"
        dispatch.append(f"  if ({cond}) {{ {full} }}")
    dispatch.append("}")
    epilogue = [_spell(line) for line in [*epilogue, *dispatch]]
    smem = [
        "extern __shared__ AclVec<unsigned, 4> smem_raw[];  // WG_STAGES * WG_STAGE elements (the launch's)",
        "#if WG_SWZ  // 1024-byte aligned: the swizzle pattern follows address bits 4-9 (the launch gives 1 KiB more)",
        "wg_u16* const smem = (wg_u16*)smem_raw + ((1024u - (acl_wg_smem(smem_raw) & 1023u)) & 1023u) / 2;",
        "#else",
        "wg_u16* const smem = (wg_u16*)smem_raw;",
        "#endif",
        "WgTile t;",
    ]
    if c.persistent:  # a grid of at most blocks-an-SM x SMs walks the tiles, gridDim.x apart
        body = [
            "if (*flag) return;",
            "const long long groups = m.n, total = table[groups * NFIELDS + F_TILE];",
            "long long b = blockIdx.x;",
            "if (b >= total) return;",
            *smem,
            "WgTile tn;",
            "WgNext nx = {table, groups, -1};",
            "wgg_setup(wgg_group(table, groups, b), b, t);",
            "wgg_prologue_any(smem, t);",
            "for (;;) {",
            "  nx.b = b + gridDim.x < total ? b + gridDim.x : -1;",
            "  wgg_dispatch(smem, t, nx, tn);",
            "  if (nx.b < 0) break;",
            "  t = tn;",
            "  b = nx.b;",
            "}",
        ]
    else:
        body = [*FIND_GROUP, *smem, "const WgNext nx = {table, groups, -1};", "wgg_setup(e, b, t);"]
        body += ["wgg_prologue_any(smem, t);", "wgg_dispatch(smem, t, nx, t);"]
    helpers = "\n".join([MMA_SOURCE, wgmma_source(wgmma_ns(c)), _defines(k), _DEVICE, *epilogue])
    bias = k.bias.short if k.bias is not None else "none"
    out = (k.dtype if k.out is None else k.out).short
    comment = f"wgmma GEMM (sm_90a) {k.dtype.short}, bias {bias}, out {out}, configuration {c}"
    return kernel_source(comment, GEMM_META, k.kernel_name, GEMM_PARAMS, body, THREADS, helpers, c.blocks)

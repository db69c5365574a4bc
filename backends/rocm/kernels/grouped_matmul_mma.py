"""The grouped GEMM of GroupedMatmulV5 on warp matrix instructions: fp16 / bf16 operands, fp32 accumulation; and the
grouped quantised ops' INT8 GEMM (exact INT32 accumulation and output, no bias).

Same descriptor table, group-list pass and block-to-tile mapping as :class:`~acl_rocm.kernels.grouped_matmul.GmmKernel`
(block ``b`` finds its group by binary search over the groups' first tiles, so empty groups cost
nothing and uneven ones only their own tiles), with ``bm`` × ``bn`` output tiles computed by the warps of
one block on the warp matrix layer (:mod:`acl_rocm.kernels.mma`). The block shape is a :class:`GmmConfig`
(``ACL_GMM_CONFIG``, :data:`CONFIGS`; :data:`DEFAULT` unless set); :data:`BASE` is the first kernel, kept as it was:

* K advances ``bk`` at a time through shared-memory stages (``acl_cp_async16``: ``cp.async`` on sm_80+).
  x lands as [m][k] rows, the weight as [k][n] rows when its N is contiguous (a [K, N] weight) or as
  [n][k] rows otherwise (the transposed [N, K] storage), so both layouts are copied 16 bytes at a time;
  rows are padded by 8 elements, which keeps ``ldmatrix`` and the copies free of bank conflicts (rows
  ``bk + 8`` or ``bn + 8`` elements apart: the 8 rows one ``ldmatrix`` phase reads start on 8 distinct
  16-byte bank groups).
* Each warp owns a ``bm / warps_m`` × ``bn / warps_n`` slice of the tile and loads its fragments with
  ``acl_mma_load_a`` and ``acl_mma_load_b_kn`` / ``acl_mma_load_b_nk``.
* The legacy loop (:data:`BASE`: 128 × 128 × 32, 4 warps of 64 × 64, two stages in 40 KiB of static
  shared memory): the next slice in flight while one is multiplied, every copy awaited each step.
  The pipelined loop (the other configurations): ``stages`` slices in dynamic shared memory, ``stages - 1``
  in flight (``cp.async.wait_group``), one barrier a step, the fragments of the next k16 step loaded
  while one multiplies, warps whose rows all lie past the group's end idle (a partial last row tile
  costs only its live warps' products), and an optional ``__launch_bounds__`` block count (registers capped so that
  two 8-warp blocks share an SM).
* Edges: a 16-byte chunk is copied only where it lies wholly inside the group's rows, columns and
  inner range and the operand allows it (unit stride on the copied axis, 16-byte aligned base and
  row pitch); chunks wholly outside are zero-filled, and the rest (an edge chunk, or every chunk of
  an operand that cannot take 16-byte copies: odd strides, K-group offsets, transposed x) are read one
  element at a time with zeros outside. The K loop starts at the group's first inner index rounded down
  to a multiple of 8, so aligned operands stay aligned whatever ``K0`` a K-group starts at.
* INT8 (``GMM_I8``): the same tiles, slices and warps with the K counts in pairs of int8 (a ``bk`` slice holds
  ``2 bk`` int8 of K; one ``acl_mma_i8`` per 16 pairs), both operands staged K-contiguous ([m][k] and
  [n][k] bytes, the 16-bit layouts byte for byte). Three staging paths: an [N, K] weight (K contiguous) copied
  16 bytes at a time like x; a [K, N] weight (N contiguous, the ND [E, K, N] of GroupedMatmulSwigluQuant) read
  as 4-byte words, 4 x 4 byte blocks transposed in registers (``__byte_perm`` on NVIDIA) and stored as [n][k]
  vectors of 16 K-consecutive bytes (8 or 4 where the block has more threads than 16-row units: 8-warp blocks),
  conflict-free, its loads issued before a slice's products and stored after them (x still by ``cp.async``); and byte
  loads for anything else (K ranges off the 16-byte grid, strided views). The accumulators are int32 and
  stored as they are: exact while K · 128 · 128 < 2^31 (K < 131072), the SIMT kernel's bound.
* Epilogue: each accumulator element plus the bias (its own dtype, read per column) is rounded once to
  the output's dtype and written through the output's strides; the pipelined configurations store a
  lane's two adjacent columns as one access where the layout pairs them (NVIDIA) and the output's rows allow.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import ClassVar, Final

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.ctypes_map import ctype, load, store
from acl_rocm.kernels.grouped_matmul import FIND_GROUP, GEMM_META, GEMM_PARAMS, hashed_name, kernel_source
from acl_rocm.kernels.mma import MMA_SOURCE

TILE_M: Final = 128
TILE_N: Final = 128
TILE_K: Final = 32
THREADS: Final = 128
"""The base configuration's tile and block (:data:`BASE`)."""
SHARED_LIMIT: Final = 227 * 1024
"""The most shared memory a configuration may take (an H100's opt-in maximum; the launch checks the device's)."""


@dataclass(frozen=True)
class GmmConfig:
    """A block shape of the kernel: ``bm`` x ``bn`` output tiles, K ``bk`` a slice, ``warps_m`` x ``warps_n`` warps of
    32 lanes (64-lane warps: half as many along N), ``stages`` shared-memory slices.

    ``min_blocks`` > 0: blocks an SM must hold at once (the compiler caps registers to fit them; 0: no bound).
    ``legacy``: the first kernel's loop (two stages in static shared memory, one wait for every copy a step,
    fragments loaded then multiplied, element stores); otherwise the pipelined loop (``stages`` - 1 slices in
    flight, dynamic shared memory, fragments of the next k16 step loaded while one multiplies, pairs of output
    elements stored together where the output's rows allow).
    """

    bm: int
    bn: int
    bk: int
    warps_m: int
    warps_n: int
    stages: int
    min_blocks: int = 0
    legacy: bool = False

    @property
    def threads(self) -> int:
        """Threads a block (32 a warp)."""
        return 32 * self.warps_m * self.warps_n

    @property
    def shared_bytes(self) -> int:
        """Dynamic shared memory a launch passes (0: the legacy loop's static arrays)."""
        return 0 if self.legacy else self.stages * self.stage_elements * 2

    @property
    def stage_elements(self) -> int:
        """16-bit elements of one slice: x [bm][bk + 8] and the weight [bn][bk + 8] or [bk][bn + 8]."""
        return self.bm * (self.bk + 8) + max(self.bn * (self.bk + 8), self.bk * (self.bn + 8))

    def __str__(self) -> str:
        if self == BASE:
            return "base"
        blocks = f"-b{self.min_blocks}" if self.min_blocks else ""
        return f"{self.bm}x{self.bn}x{self.bk}-w{self.warps_m}x{self.warps_n}-s{self.stages}{blocks}"

    def check(self) -> None:
        """Raise ValueError where the shape cannot run (the copy mapping, warp tiles and shared memory)."""
        t, ck, cn = self.threads, self.bk // 8, self.bn // 8
        problems = [
            (self.bk not in (16, 32, 64), "K slice must be 16, 32 or 64"),
            (self.warps_n < 2 or self.warps_n % 2, "warps along N must be even (64-lane warps halve them)"),
            (self.bm % (16 * self.warps_m) or self.bn % (16 * self.warps_n), "warp tiles must be multiples of 16"),
            (t > 1024 or t % ck or (self.bm * ck) % t or (self.bn * ck) % t, "x / [N, K] copies must tile the block"),
            (t % cn or (self.bk * cn) % t, "[K, N] weight copies must tile the block"),
            (max(self.bm, self.bn) * ck // t > 32 or self.bk * cn // t > 32, "at most 32 copies a thread"),
            (self.stages < 2 or (self.legacy and self.stages != 2), "2 or more stages (the legacy loop: 2)"),
            (self.min_blocks < 0 or self.min_blocks > 8, "0 to 8 blocks an SM"),
            (self.shared_bytes > SHARED_LIMIT, f"{self.shared_bytes} bytes of shared memory (limit {SHARED_LIMIT})"),
        ]
        bad = [why for failed, why in problems if failed]
        if bad:
            raise ValueError(f"grouped GEMM configuration {self}: " + "; ".join(bad))


BASE: Final = GmmConfig(TILE_M, TILE_N, TILE_K, 2, 2, 2, 0, legacy=True)
"""The first kernel: 128 x 128 tiles, K 32, 4 warps of 64 x 64, two static stages (the fallback of :data:`DEFAULT`)."""
CONFIGS: Final = {
    str(c): c
    for c in (
        BASE,
        GmmConfig(128, 128, 32, 2, 2, 4),  # the base shape, four pipelined stages (the default)
        GmmConfig(128, 128, 32, 2, 4, 4, 2),  # 8 warps of 64 x 32, two blocks an SM (128 registers)
        GmmConfig(128, 128, 64, 2, 4, 3, 2),  # the same, K 64: half the barriers
        GmmConfig(128, 256, 32, 2, 4, 4),  # 8 warps of 64 x 64, one block an SM
        GmmConfig(64, 128, 32, 2, 2, 4, 3),  # small M tiles: less padding in small groups, 3 blocks an SM
        GmmConfig(128, 128, 32, 2, 2, 3),  # the default with three stages (60 KiB)
        GmmConfig(128, 128, 32, 2, 2, 5),  # the default with five stages (100 KiB: still two blocks an SM)
        GmmConfig(128, 128, 64, 2, 2, 3),  # the default's warps, K 64: half the barriers (108 KiB, two an SM)
        GmmConfig(128, 64, 32, 2, 2, 4),  # 4 warps of 64 x 32: 166 registers, three blocks an SM
    )
}
"""The named configurations (``ACL_GMM_CONFIG`` takes these names or any other ``BMxBNxBK-wMxN-sS``)."""
DEFAULT: Final = CONFIGS["128x128x32-w2x2-s4"]
"""The configuration calls run without ``ACL_GMM_CONFIG``: the measured best (H100, 2026-12-06 09:21-09:30, the
ops bench's GroupedMatmulV5Configs rows, 64 experts, K 2048, N 1408, bf16, TFLOP/s at 16k / 32k rows): base 146 /
165, ``128x128x32-w2x2-s4`` 164 / 195, ``128x128x32-w2x4-s4-b2`` 144 / 168, ``128x128x64-w2x4-s3-b2`` 152 / 182,
``128x256x32-w2x4-s4`` 138 / 155, ``64x128x32-w2x2-s4-b3`` 149 / 160. It takes 80 KiB of dynamic shared memory:
where the device's opt-in limit is lower the runner takes :data:`BASE` (40 KiB static) and logs it."""
ALTERNATIVES: Final = (
    "base",
    "128x128x32-w2x2-s3",
    "128x128x32-w2x2-s5",
    "128x128x64-w2x2-s3",
    "128x64x32-w2x2-s4",
)
"""The configurations the ops bench times beside the default: the first kernel (the default's gain, timed in the
same run), then the default's 2 x 2 warps with three and five stages, with K 64 a slice, and with 64-column tiles.
Registers (``nvcc -Xptxas -v``, sm_90, bf16): the default 248 (two blocks an SM), ``-s3`` and ``-s5`` 248,
``128x128x64-w2x2-s3`` 255 (8 bytes spilled), ``128x64x32-w2x2-s4`` 166 (three blocks an SM). The configurations
measured slower than the default stay named in :data:`CONFIGS` but are not timed again."""


def parse_config(text: str) -> GmmConfig:
    """``base`` or ``BMxBNxBK-wWMxWN-sS[-bB]`` (e.g. ``128x128x32-w2x4-s4-b2``) as a checked configuration."""
    text = text.strip().lower()
    if text in CONFIGS:
        return CONFIGS[text]
    try:
        tile, warps, stages, *blocks = text.split("-")
        bm, bn, bk = (int(v) for v in tile.split("x"))
        wm, wn = (int(v) for v in warps.removeprefix("w").split("x"))
        if not stages.startswith("s") or not warps.startswith("w") or any(not b.startswith("b") for b in blocks):
            raise ValueError(text)
        if len(blocks) > 1:
            raise ValueError(text)
        config = GmmConfig(bm, bn, bk, wm, wn, int(stages[1:]), int(blocks[0][1:]) if blocks else 0)
    except ValueError:
        raise ValueError(f"{text!r} is neither a name ({', '.join(CONFIGS)}) nor BMxBNxBK-wMxN-sS[-bB]") from None
    config.check()
    return config


DTYPES: Final = frozenset({D.ACL_FLOAT16, D.ACL_BF16, D.ACL_INT8})
"""Operand dtypes this kernel multiplies (INT8: into an exact INT32 output, no bias)."""
OUT_DTYPES: Final = frozenset({D.ACL_FLOAT16, D.ACL_BF16, D.ACL_FLOAT, D.ACL_INT32})
BIAS_DTYPES: Final = frozenset({D.ACL_FLOAT16, D.ACL_BF16, D.ACL_FLOAT})
_F32 = ctype(D.ACL_FLOAT)


def int8_fits(c: GmmConfig) -> bool:
    """Whether configuration ``c`` can stage an int8 [k][n] weight (its 4 x 4 byte blocks tile the block's threads)."""
    return (c.bk // 2) * (c.bn // 4) % c.threads == 0


def _device(c: GmmConfig, int8: bool = False) -> str:
    """The device code of configuration ``c``: the matrix layer, the tile macros and the grouped GEMM's helpers."""
    return MMA_SOURCE + _DEVICE_HEAD.format(c=c, threads=c.threads, i8=int(int8)) + _DEVICE


_DEVICE_HEAD: Final = (
    "\n// ---- grouped GEMM on matrix instructions (kernels/grouped_matmul_mma.py) ----\n"
    "#define GMM_BM {c.bm}\n#define GMM_BN {c.bn}\n#define GMM_BK {c.bk}\n#define GMM_THREADS {threads}\n"
    "#define GMM_WARPS_M {c.warps_m}\n#define GMM_STAGES {c.stages}\n#define GMM_I8 {i8}\n"
)
_DEVICE: Final = r"""#define GMM_LDA (GMM_BK + 8)
#define GMM_LDB_KN (GMM_BN + 8)
#define GMM_LDB_NK (GMM_BK + 8)
#define GMM_A_STAGE (GMM_BM * GMM_LDA)
#define GMM_B_STAGE (GMM_BN * GMM_LDB_NK > GMM_BK * GMM_LDB_KN ? GMM_BN * GMM_LDB_NK : GMM_BK * GMM_LDB_KN)
#define GMM_STAGE (GMM_A_STAGE + GMM_B_STAGE)
#define GMM_WARPS (GMM_THREADS / ACL_WARP_SIZE)
#define GMM_WARPS_N (GMM_WARPS / GMM_WARPS_M)
#define GMM_WM (GMM_BM / GMM_WARPS_M)
#define GMM_WN (GMM_BN / GMM_WARPS_N)
#define GMM_MT (GMM_WM / 16)
#define GMM_NT (GMM_WN / 16)
#define GMM_CHUNKS_K (GMM_BK / 8)
#define GMM_CHUNKS_N (GMM_BN / 8)

typedef unsigned short gmm_u16;
#if GMM_I8
#define GMM_ACC AclMmaCi
#define GMM_MMA(c, a, b) acl_mma_i8(c, a, b)
#else
#define GMM_ACC AclMmaC
#define GMM_MMA(c, a, b) acl_mma<BF16>(c, a, b)
#endif
// int8 slices are staged K-contiguous ([m][k] and [n][k]): whatever the weight's layout, B loads as [n][k]
#define GMM_B_NK(NK) ((NK) || GMM_I8)

// one output tile's operands: x [m][k] (row / column strides), weight [k][n], the ranges it covers
struct GmmTile {
  const gmm_u16* x;
  const gmm_u16* w;
  long long xsr, xsc, wsk, wsn;
  long long row0, m1, col0, n, k0, k1;
  // int8 (GMM_I8): the fields above count 16-bit pairs of int8 along K (k0 rounded down, k1 up); these hold the
  // operands' bytes, element strides and the exact inner range
  const signed char* x8;
  const signed char* w8;
  long long xsr8, xsc8, wsk8, wsn8, k08, k18;
};

// where this thread's 16-byte chunks of a slice come from (chunk q of x at a + q * a_step + kc, of the weight at
// b + q * b_step + kc * b_k) and which of them lie inside the rows (a_ok) / columns (b_ok)
struct GmmCopies {
  const gmm_u16* a;
  const gmm_u16* b;
  long long a_step, b_step, b_k;
  unsigned a_ok, b_ok;
};

// chunk layout of a slice: x [GMM_BM][GMM_BK] in 4 chunks a row; the weight [GMM_BK][GMM_BN] in 16 chunks a row
// (NK false) or [GMM_BN][GMM_BK] in 4 (NK true); chunk q of thread tid sits GMM_THREADS * q chunks after tid's first
#define GMM_COPIES_A (GMM_BM * GMM_CHUNKS_K / GMM_THREADS)
#define GMM_COPIES_B (GMM_BN * GMM_BK / 8 / GMM_THREADS)
#define GMM_ROWS_STEP_A (GMM_THREADS / GMM_CHUNKS_K)
#define GMM_ROWS_STEP_KN (GMM_THREADS / GMM_CHUNKS_N)

template <bool NK> ACL_DEV GmmCopies gmm_copies(const GmmTile& t) {
  const int tid = threadIdx.x;
  GmmCopies c;
  const long long r = t.row0 + tid / GMM_CHUNKS_K;
  c.a = t.x + r * t.xsr + 8 * (tid % GMM_CHUNKS_K);
  c.a_step = GMM_ROWS_STEP_A * t.xsr;
  c.a_ok = 0;
#pragma unroll
  for (int q = 0; q < GMM_COPIES_A; ++q) c.a_ok |= (r + GMM_ROWS_STEP_A * q < t.m1 ? 1u : 0u) << q;
  c.b_ok = 0;
  if (NK) {
    const long long col = t.col0 + tid / GMM_CHUNKS_K;
    c.b = t.w + col * t.wsn + 8 * (tid % GMM_CHUNKS_K);
    c.b_step = GMM_ROWS_STEP_A * t.wsn;
    c.b_k = 1;
#pragma unroll
    for (int q = 0; q < GMM_COPIES_B; ++q) c.b_ok |= (col + GMM_ROWS_STEP_A * q < t.n ? 1u : 0u) << q;
  } else {
    const long long col = t.col0 + 8 * (tid % GMM_CHUNKS_N);
    c.b = t.w + (long long)(tid / GMM_CHUNKS_N) * t.wsk + col;
    c.b_step = GMM_ROWS_STEP_KN * t.wsk;
    c.b_k = t.wsk;
    c.b_ok = col < t.n ? ~0u : 0u;
  }
  return c;
}

// stage the [kc, kc + GMM_BK) slice with 16-byte copies (the group's K range and N are multiples of 8 and its
// operands aligned: every chunk lies wholly inside or wholly outside); zeros outside
ACL_DEV void gmm_load_vec_a(gmm_u16* stage, const GmmCopies& c, const GmmTile& t, long long kc) {
  const int tid = threadIdx.x;
  const bool ka = kc + 8 * (tid % GMM_CHUNKS_K) < t.k1;
  gmm_u16* sa = stage + (tid / GMM_CHUNKS_K) * GMM_LDA + 8 * (tid % GMM_CHUNKS_K);
#pragma unroll
  for (int q = 0; q < GMM_COPIES_A; ++q) {
    const bool ok = ka && ((c.a_ok >> q) & 1u);
    acl_cp_async16(sa + GMM_ROWS_STEP_A * q * GMM_LDA, ok ? c.a + q * c.a_step + kc : t.x, ok);
  }
}
template <bool NK> ACL_DEV void gmm_load_vec_b(gmm_u16* stage, const GmmCopies& c, const GmmTile& t, long long kc) {
  const int tid = threadIdx.x;
  const bool ka = kc + 8 * (tid % GMM_CHUNKS_K) < t.k1;
  gmm_u16* sb = stage + GMM_A_STAGE;
  if (NK) {
    sb += (tid / GMM_CHUNKS_K) * GMM_LDB_NK + 8 * (tid % GMM_CHUNKS_K);
#pragma unroll
    for (int q = 0; q < GMM_COPIES_B; ++q) {
      const bool ok = ka && ((c.b_ok >> q) & 1u);
      acl_cp_async16(sb + GMM_ROWS_STEP_A * q * GMM_LDB_NK, ok ? c.b + q * c.b_step + kc : t.w, ok);
    }
  } else {
    sb += (tid / GMM_CHUNKS_N) * GMM_LDB_KN + 8 * (tid % GMM_CHUNKS_N);
    const long long k = kc + tid / GMM_CHUNKS_N;
#pragma unroll
    for (int q = 0; q < GMM_COPIES_B; ++q) {
      const bool ok = c.b_ok && k + GMM_ROWS_STEP_KN * q < t.k1;
      acl_cp_async16(sb + GMM_ROWS_STEP_KN * q * GMM_LDB_KN, ok ? c.b + q * c.b_step + kc * c.b_k : t.w, ok);
    }
  }
}
template <bool NK> ACL_DEV void gmm_load_vec(gmm_u16* stage, const GmmCopies& c, const GmmTile& t, long long kc) {
  gmm_load_vec_a(stage, c, t, kc);
  gmm_load_vec_b<NK>(stage, c, t, kc);
}

#if GMM_I8
// int8 slices: x [GMM_BM][2 GMM_BK] and the weight [GMM_BN][2 GMM_BK] bytes (rows 2 GMM_LDA / 2 GMM_LDB_NK bytes)
#define GMM_KB (2 * GMM_BK)
// one byte at a time (any strides and alignment); zeros outside (kc counts pairs)
ACL_DEV void gmm_load_bytes(gmm_u16* stage, const GmmTile& t, long long kc) {
  const int tid = threadIdx.x;
  const long long kb = 2 * kc;
  signed char* sa = (signed char*)stage;
#pragma unroll 4
  for (int i = tid; i < GMM_BM * GMM_KB; i += GMM_THREADS) {
    const int r = i / GMM_KB, kk = i % GMM_KB;
    const long long row = t.row0 + r, k = kb + kk;
    sa[r * 2 * GMM_LDA + kk] = (row < t.m1 && k >= t.k08 && k < t.k18) ? t.x8[row * t.xsr8 + k * t.xsc8] : 0;
  }
  signed char* sb = (signed char*)(stage + GMM_A_STAGE);
#pragma unroll 4
  for (int i = tid; i < GMM_BN * GMM_KB; i += GMM_THREADS) {
    const int r = i / GMM_KB, kk = i % GMM_KB;
    const long long col = t.col0 + r, k = kb + kk;
    sb[r * 2 * GMM_LDB_NK + kk] = (col < t.n && k >= t.k08 && k < t.k18) ? t.w8[k * t.wsk8 + col * t.wsn8] : 0;
  }
}
// a [k][n] int8 weight (N contiguous, 4-byte words) staged as [n][k]: a thread's unit is GMM_W8_KR rows of one
// 4-column word (K-consecutive units on consecutive lanes: a warp's loads cover whole 32-byte sectors of 4 rows when
// GMM_W8_KR is 16); 4 x 4 byte blocks are transposed in registers and each of the 4 columns stored as one
// GMM_W8_KR-byte vector (lanes of one store phase land on distinct banks with the padded rows)
#define GMM_W8_KR                                                  \
  ((GMM_KB / 16) * (GMM_BN / 4) % GMM_THREADS == 0   ? 16         \
   : (GMM_KB / 8) * (GMM_BN / 4) % GMM_THREADS == 0 ? 8          \
                                                     : 4)
#define GMM_W8_KQ (GMM_KB / GMM_W8_KR)
#define GMM_W8_UNITS (GMM_W8_KQ * (GMM_BN / 4) / GMM_THREADS)
struct GmmW8 {
  unsigned w[GMM_W8_UNITS][GMM_W8_KR];  // row i of unit q: columns n .. n + 3
};
ACL_DEV unsigned gmm_perm(unsigned x, unsigned y, unsigned s) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(x, y, s);
#else
  const unsigned long long v = ((unsigned long long)y << 32) | x;
  unsigned r = 0;
  for (int i = 0; i < 4; ++i) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7u))) & 0xffull) << (8 * i);
  return r;
#endif
}
ACL_DEV void gmm_w8_fetch(GmmW8& f, const GmmTile& t, long long kc) {
  const int tid = threadIdx.x;
  const long long kb = 2 * kc;
#pragma unroll
  for (int q = 0; q < GMM_W8_UNITS; ++q) {
    const int u = tid + q * GMM_THREADS;
    const int kq = u % GMM_W8_KQ, nq = u / GMM_W8_KQ;
    const long long col = t.col0 + 4 * nq;
#pragma unroll
    for (int i = 0; i < GMM_W8_KR; ++i) {
      const long long k = kb + GMM_W8_KR * kq + i;
      f.w[q][i] = (col < t.n && k >= t.k08 && k < t.k18) ? *(const unsigned*)(t.w8 + k * t.wsk8 + col) : 0u;
    }
  }
}
ACL_DEV void gmm_w8_store(gmm_u16* stage, const GmmW8& f) {
  const int tid = threadIdx.x;
  unsigned char* sb = (unsigned char*)(stage + GMM_A_STAGE);
#pragma unroll
  for (int q = 0; q < GMM_W8_UNITS; ++q) {
    const int u = tid + q * GMM_THREADS;
    const int kq = u % GMM_W8_KQ, nq = u / GMM_W8_KQ;
    AclVec<unsigned, GMM_W8_KR / 4> out[4];  // column n + j's rows k .. k + GMM_W8_KR - 1
#pragma unroll
    for (int m = 0; m < GMM_W8_KR / 4; ++m) {
      const unsigned* w = f.w[q] + 4 * m;  // rows 4m .. 4m + 3
      const unsigned lo01 = gmm_perm(w[0], w[1], 0x5140u), hi01 = gmm_perm(w[0], w[1], 0x7362u);
      const unsigned lo23 = gmm_perm(w[2], w[3], 0x5140u), hi23 = gmm_perm(w[2], w[3], 0x7362u);
      out[0].v[m] = gmm_perm(lo01, lo23, 0x5410u);
      out[1].v[m] = gmm_perm(lo01, lo23, 0x7632u);
      out[2].v[m] = gmm_perm(hi01, hi23, 0x5410u);
      out[3].v[m] = gmm_perm(hi01, hi23, 0x7632u);
    }
    unsigned char* p = sb + (4 * nq) * 2 * GMM_LDB_NK + GMM_W8_KR * kq;
#pragma unroll
    for (int j = 0; j < 4; ++j) *(AclVec<unsigned, GMM_W8_KR / 4>*)(p + j * 2 * GMM_LDB_NK) = out[j];
  }
}
#endif


// stage the [kc, kc + GMM_BK) slice one element at a time (any strides and alignment); zeros outside
template <bool NK> ACL_DEV void gmm_load_elements(gmm_u16* stage, const GmmTile& t, long long kc) {
  const int tid = threadIdx.x;
#pragma unroll 4
  for (int i = tid; i < GMM_BM * GMM_BK; i += GMM_THREADS) {
    const int r = i / GMM_BK, kk = i % GMM_BK;
    const long long row = t.row0 + r, k = kc + kk;
    stage[r * GMM_LDA + kk] = (row < t.m1 && k >= t.k0 && k < t.k1) ? t.x[row * t.xsr + k * t.xsc] : (gmm_u16)0;
  }
  gmm_u16* sb = stage + GMM_A_STAGE;
#pragma unroll 4
  for (int i = tid; i < GMM_BN * GMM_BK; i += GMM_THREADS) {
    const int r = NK ? i / GMM_BK : i / GMM_BN, s = NK ? i % GMM_BK : i % GMM_BN;  // [n][k] or [k][n]
    const long long col = t.col0 + (NK ? r : s), k = kc + (NK ? s : r);
    const gmm_u16 v = (col < t.n && k >= t.k0 && k < t.k1) ? t.w[k * t.wsk + col * t.wsn] : (gmm_u16)0;
    sb[NK ? r * GMM_LDB_NK + s : r * GMM_LDB_KN + s] = v;
  }
}

// stage one slice: 16-byte copies (VEC) or element loads; int8: bytes (!VEC), both operands copied (VEC, NK) or
// x copied and the [k][n] weight transposed through registers (VEC, !NK)
template <bool NK, bool VEC> ACL_DEV void gmm_load(gmm_u16* stage, const GmmCopies& c, const GmmTile& t, long long kc) {
#if GMM_I8
  if (!VEC) {
    gmm_load_bytes(stage, t, kc);
  } else if (NK) {
    gmm_load_vec<true>(stage, c, t, kc);
  } else {
    gmm_load_vec_a(stage, c, t, kc);
    GmmW8 f;
    gmm_w8_fetch(f, t, kc);
    gmm_w8_store(stage, f);
  }
#else
  if (VEC) gmm_load_vec<NK>(stage, c, t, kc);
  else gmm_load_elements<NK>(stage, t, kc);
#endif
}

// the warp's products over one staged slice
template <bool NK, bool BF16>
ACL_DEV void gmm_multiply(GMM_ACC (&acc)[GMM_MT][GMM_NT], const gmm_u16* stage, int wm, int wn) {
  const gmm_u16* sa = stage + wm * GMM_WM * GMM_LDA;
  const gmm_u16* sb = stage + GMM_A_STAGE;
#pragma unroll
  for (int ks = 0; ks < GMM_BK; ks += 16) {
    AclMmaA a[GMM_MT];
    AclMmaB b[GMM_NT];
#pragma unroll
    for (int i = 0; i < GMM_MT; ++i) acl_mma_load_a(a[i], sa + 16 * i * GMM_LDA + ks, GMM_LDA);
#pragma unroll
    for (int j = 0; j < GMM_NT; ++j) {
      const int col = wn * GMM_WN + 16 * j;
      if (GMM_B_NK(NK)) acl_mma_load_b_nk(b[j], sb + col * GMM_LDB_NK + ks, GMM_LDB_NK);
      else acl_mma_load_b_kn(b[j], sb + ks * GMM_LDB_KN + col, GMM_LDB_KN);
    }
#pragma unroll
    for (int i = 0; i < GMM_MT; ++i) {
#pragma unroll
      for (int j = 0; j < GMM_NT; ++j) GMM_MMA(acc[i][j], a[i], b[j]);
    }
  }
}

// the K loop over [k0, k1): two stages, the next in flight while the warps multiply one
template <bool NK, bool VEC, bool BF16>
ACL_DEV void gmm_tile(GMM_ACC (&acc)[GMM_MT][GMM_NT], gmm_u16* smem, const GmmTile& t, int wm, int wn) {
  const long long steps = t.k1 > t.k0 ? (t.k1 - t.k0 + GMM_BK - 1) / GMM_BK : 0;
  if (steps == 0) return;
  GmmCopies c;
  if (VEC) c = gmm_copies<NK>(t);
  for (long long s = 0; s <= steps; ++s) {
    if (s < steps) {  // stage s: copies in flight (VEC) or stored (elements) while stage s - 1 is multiplied
      gmm_load<NK, VEC>(smem + (s & 1) * GMM_STAGE, c, t, t.k0 + s * GMM_BK);
      if (VEC) acl_cp_async_commit();
    }
    if (s > 0) gmm_multiply<NK, BF16>(acc, smem + ((s - 1) & 1) * GMM_STAGE, wm, wn);
    if (VEC) acl_cp_async_wait_all();
    __syncthreads();  // stage s is visible; every warp is done with stage s - 1, whose buffer stage s + 1 refills
  }
}
// the warp's products over one staged slice, the fragments of k step ks + 16 loaded while step ks multiplies
template <bool NK, bool BF16>
ACL_DEV void gmm_multiply_db(GMM_ACC (&acc)[GMM_MT][GMM_NT], const gmm_u16* stage, int wm, int wn) {
  const gmm_u16* sa = stage + wm * GMM_WM * GMM_LDA;
  const gmm_u16* sb = stage + GMM_A_STAGE;
  AclMmaA a[2][GMM_MT];
  AclMmaB b[2][GMM_NT];
#pragma unroll
  for (int ks = 0; ks <= GMM_BK; ks += 16) {
    const int cur = (ks / 16) & 1;
    if (ks < GMM_BK) {
#pragma unroll
      for (int i = 0; i < GMM_MT; ++i) acl_mma_load_a(a[cur][i], sa + 16 * i * GMM_LDA + ks, GMM_LDA);
#pragma unroll
      for (int j = 0; j < GMM_NT; ++j) {
        const int col = wn * GMM_WN + 16 * j;
        if (GMM_B_NK(NK)) acl_mma_load_b_nk(b[cur][j], sb + col * GMM_LDB_NK + ks, GMM_LDB_NK);
        else acl_mma_load_b_kn(b[cur][j], sb + ks * GMM_LDB_KN + col, GMM_LDB_KN);
      }
    }
    if (ks > 0) {
#pragma unroll
      for (int i = 0; i < GMM_MT; ++i) {
#pragma unroll
        for (int j = 0; j < GMM_NT; ++j) GMM_MMA(acc[i][j], a[cur ^ 1][i], b[cur ^ 1][j]);
      }
    }
  }
}

// the K loop over [k0, k1) through GMM_STAGES stages: GMM_STAGES - 1 slices in flight while the warps multiply
// one; one barrier a step (it publishes slice s and frees the buffer of slice s - 1, which slice
// s + GMM_STAGES - 1 refills)
template <bool NK, bool VEC, bool BF16>
ACL_DEV void gmm_tile_pipe(GMM_ACC (&acc)[GMM_MT][GMM_NT], gmm_u16* smem, const GmmTile& t, int wm, int wn) {
  const long long steps = t.k1 > t.k0 ? (t.k1 - t.k0 + GMM_BK - 1) / GMM_BK : 0;
  if (steps == 0) return;
  GmmCopies c;
  if (VEC) c = gmm_copies<NK>(t);
#pragma unroll
  for (int s = 0; s < GMM_STAGES - 1; ++s) {
    if (s < steps) gmm_load<NK, VEC>(smem + s * GMM_STAGE, c, t, t.k0 + s * GMM_BK);
    if (VEC) acl_cp_async_commit();  // one group a slice, empty ones included, so the count below holds
  }
  int read = 0, write = GMM_STAGES - 1;
  // a warp whose rows all lie past the group's end (a group's last, partial row tile) copies but multiplies
  // nothing, leaving the matrix units to the warps with work (the condition is the same in every lane)
  const bool live = t.row0 + wm * GMM_WM < t.m1;
  for (long long s = 0; s < steps; ++s) {
    if (VEC) acl_cp_async_wait<GMM_STAGES - 2>();  // this thread's copies of slice s landed
    __syncthreads();  // everyone's have; every warp is done with slice s - 1 (the buffer refilled next)
    const long long next = s + GMM_STAGES - 1;
#if GMM_I8
    // the [k][n] int8 weight: its words fetched before the products and stored after them (the loads' latency
    // hidden behind this slice's products); the buffer they fill is the one the barrier above freed
    const bool w8 = VEC && !NK;
    GmmW8 f;
    if (w8 && next < steps) {
      gmm_load_vec_a(smem + write * GMM_STAGE, c, t, t.k0 + next * GMM_BK);
      gmm_w8_fetch(f, t, t.k0 + next * GMM_BK);
    } else if (next < steps) {
      gmm_load<NK, VEC>(smem + write * GMM_STAGE, c, t, t.k0 + next * GMM_BK);
    }
#else
    if (next < steps) gmm_load<NK, VEC>(smem + write * GMM_STAGE, c, t, t.k0 + next * GMM_BK);
#endif
    if (VEC) acl_cp_async_commit();
    if (live) gmm_multiply_db<NK, BF16>(acc, smem + read * GMM_STAGE, wm, wn);
#if GMM_I8
    if (w8 && next < steps) gmm_w8_store(smem + write * GMM_STAGE, f);
#endif
    read = read + 1 == GMM_STAGES ? 0 : read + 1;
    write = write + 1 == GMM_STAGES ? 0 : write + 1;
  }
  if (VEC) acl_cp_async_wait<0>();  // no copy outlives the tile (the block may exit or reuse nothing after)
}
// ---- end of the grouped GEMM's device code ----
"""


@dataclass(frozen=True)
class GmmMmaKernel:
    """The grouped GEMM on matrix instructions: x and weight of ``dtype`` (fp16 / bf16), bias of ``bias`` (None:
    none), the output of ``out`` (None: ``dtype``)."""

    dtype: D
    bias: D | None
    out: D | None = None
    index_type: str = "long long"
    config: GmmConfig = BASE

    path: ClassVar[str] = "mma"
    """The name the runner reports for this kernel (its debug line, ``last_path``)."""

    @property
    def tile_m(self) -> int:
        """Rows of an output tile."""
        return self.config.bm

    @property
    def tile_n(self) -> int:
        """Columns of an output tile."""
        return self.config.bn

    @property
    def threads(self) -> int:
        """Threads a block."""
        return self.config.threads

    @property
    def shared_bytes(self) -> int:
        """Dynamic shared memory a launch passes."""
        return self.config.shared_bytes

    def __post_init__(self) -> None:
        self.config.check()
        if self.dtype not in DTYPES:
            raise ValueError(
                f"the matrix-instruction grouped GEMM takes float16 / bfloat16 / int8, not {self.dtype.short}"
            )
        if self.dtype == D.ACL_INT8:
            c = self.config
            if self.out != D.ACL_INT32 or self.bias is not None:
                raise ValueError("the matrix-instruction grouped GEMM multiplies int8 into int32 only, without a bias")
            if not int8_fits(c):
                raise ValueError(f"configuration {c}: the int8 weight's 4 x 4 byte blocks must tile the block")
            return
        if self.out is not None and self.out not in OUT_DTYPES:
            raise ValueError(f"the matrix-instruction grouped GEMM cannot write {self.out.short}")
        if self.bias is not None and self.bias not in BIAS_DTYPES:
            raise ValueError(f"the matrix-instruction grouped GEMM cannot add a {self.bias.short} bias")

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return hashed_name("mma", self)

    def source(self) -> str:
        """The complete kernel source."""
        return _source(self)


@functools.lru_cache(maxsize=64)
def _source(k: GmmMmaKernel) -> str:
    c = k.config
    int8 = k.dtype == D.ACL_INT8
    o = ctype(k.dtype if k.out is None else k.out)
    acc_t = "int" if int8 else "float"

    def put(v: str) -> str:  # an accumulator value as the output's storage (int8: the exact int32 itself)
        return v if int8 else store(v, _F32, o)

    bf16 = "true" if k.dtype == D.ACL_BF16 else "false"
    bias_lines: list[str] = []
    add_bias: list[str] = []
    add_bias_pair: list[str] = []
    if k.bias is not None:
        b = ctype(k.bias)
        bias_lines = [f"const {b.storage}* bias = (const {b.storage}*)e[F_BIAS];", "const long long bsn = e[F_BSN];"]
        add_bias = [f"        if (bias) v += {load('bias[col * bsn]', b, _F32)};"]
        add_bias_pair = [
            f"        if (bias) v0 += {load('bias[col * bsn]', b, _F32)};",
            f"        if (bias && col + 1 < n) v1 += {load('bias[(col + 1) * bsn]', b, _F32)};",
        ]
    tile = "gmm_tile" if c.legacy else "gmm_tile_pipe"
    shared = (
        ["__shared__ AclVec<unsigned, 4> smem_raw[2 * GMM_STAGE / 8];"]
        if c.legacy
        else ["extern __shared__ AclVec<unsigned, 4> smem_raw[];  // GMM_STAGES * GMM_STAGE elements (the launch's)"]
    )
    body = [
        *FIND_GROUP,
        "const long long n = e[F_N];",
        f"const long long tiles_n = (n + {c.bn - 1}) / {c.bn};",
        "const long long t_in = b - e[F_TILE];",
        "GmmTile t;",
        "t.x = (const gmm_u16*)e[F_X];",
        "t.w = (const gmm_u16*)e[F_W];",
        f"t.row0 = e[F_M0] + (t_in / tiles_n) * {c.bm};",
        "t.m1 = e[F_M1];",
        f"t.col0 = (t_in % tiles_n) * {c.bn};",
        "t.n = n;",
        "t.x8 = (const signed char*)e[F_X]; t.w8 = (const signed char*)e[F_W];",
        "t.xsr8 = e[F_XSR]; t.xsc8 = e[F_XSC]; t.wsk8 = e[F_WSK]; t.wsn8 = e[F_WSN]; t.k08 = e[F_K0]; t.k18 = e[F_K1];",
        *(_SETUP_I8 if int8 else _SETUP_16),
        *shared,
        "gmm_u16* smem = (gmm_u16*)smem_raw;",
        "const int warp = threadIdx.x / ACL_WARP_SIZE, lane = acl_lane();",
        "const int wm = warp % GMM_WARPS_M, wn = warp / GMM_WARPS_M;",
        "GMM_ACC acc[GMM_MT][GMM_NT];",
        "#pragma unroll",
        "for (int i = 0; i < GMM_MT; ++i) {",
        "  #pragma unroll",
        "  for (int j = 0; j < GMM_NT; ++j) {",
        "    #pragma unroll",
        "    for (int q = 0; q < ACL_MMA_C_ELEMS; ++q) acc[i][j].x[q] = 0;",
        "  }",
        "}",
        *(
            [
                f"if (nk_vec) {tile}<true, true, false>(acc, smem, t, wm, wn);",
                f"else if (kn_vec) {tile}<false, true, false>(acc, smem, t, wm, wn);",
                f"else {tile}<true, false, false>(acc, smem, t, wm, wn);",
            ]
            if int8
            else [
                f"if (nk && vec) {tile}<true, true, {bf16}>(acc, smem, t, wm, wn);",
                f"else if (vec) {tile}<false, true, {bf16}>(acc, smem, t, wm, wn);",
                f"else if (nk) {tile}<true, false, {bf16}>(acc, smem, t, wm, wn);",
                f"else {tile}<false, false, {bf16}>(acc, smem, t, wm, wn);",
            ]
        ),
        f"{o.storage}* out = ({o.storage}*)e[F_OUT];",
        "const long long osr = e[F_OSR], osc = e[F_OSC];",
        *bias_lines,
    ]
    scalar = [
        "#pragma unroll",
        "for (int i = 0; i < GMM_MT; ++i) {",
        "  #pragma unroll",
        "  for (int q = 0; q < ACL_MMA_C_ELEMS; ++q) {",
        "    const long long row = t.row0 + wm * GMM_WM + 16 * i + acl_mma_c_row(lane, q);",
        "    if (row >= t.m1) continue;",
        f"    {o.storage}* line = out + row * osr;",
        "    #pragma unroll",
        "    for (int j = 0; j < GMM_NT; ++j) {",
        "      const long long col = t.col0 + wn * GMM_WN + 16 * j + acl_mma_c_col(lane, q);",
        "      if (col < n) {",
        f"        {acc_t} v = acc[i][j].x[q];",
        *add_bias,
        f"        line[col * osc] = {put('v')};",
        "      }",
        "    }",
        "  }",
        "}",
    ]
    if c.legacy:
        body += scalar
    else:  # layout 1: elements 2p and 2p + 1 of a lane are one row's columns c, c + 1 (c even): one store
        pair = f"AclVec<{o.storage}, 2>"
        body += [
            "#if ACL_MMA_LAYOUT == 1",
            f"const bool pairs = osc == 1 && osr % 2 == 0 && (unsigned long long)e[F_OUT] % sizeof({pair}) == 0;",
            "#else",
            "const bool pairs = false;",
            "#endif",
            "if (pairs) {",
            "#pragma unroll",
            "for (int i = 0; i < GMM_MT; ++i) {",
            "  #pragma unroll",
            "  for (int q = 0; q < ACL_MMA_C_ELEMS; q += 2) {",
            "    const long long row = t.row0 + wm * GMM_WM + 16 * i + acl_mma_c_row(lane, q);",
            "    if (row >= t.m1) continue;",
            f"    {o.storage}* line = out + row * osr;",
            "    #pragma unroll",
            "    for (int j = 0; j < GMM_NT; ++j) {",
            "      const long long col = t.col0 + wn * GMM_WN + 16 * j + acl_mma_c_col(lane, q);",
            "      if (col >= n) continue;",
            f"      {acc_t} v0 = acc[i][j].x[q], v1 = acc[i][j].x[q + 1];",
            *add_bias_pair,
            "      if (col + 1 < n) {",
            f"        {pair} p;",
            f"        p.v[0] = {put('v0')};",
            f"        p.v[1] = {put('v1')};",
            f"        *({pair}*)(line + col) = p;",
            "      } else {",
            f"        line[col] = {put('v0')};",
            "      }",
            "    }",
            "  }",
            "}",
            "} else {",
            *scalar,
            "}",
        ]
    bias = k.bias.short if k.bias is not None else "none"
    out = (k.dtype if k.out is None else k.out).short
    comment = f"matrix-instruction GEMM {k.dtype.short}, bias {bias}, out {out}, configuration {c}"
    return kernel_source(
        comment, GEMM_META, k.kernel_name, GEMM_PARAMS, body, c.threads, _device(c, int8), c.min_blocks
    )


_SETUP_16: Final = (
    "t.xsr = e[F_XSR]; t.xsc = e[F_XSC]; t.wsk = e[F_WSK]; t.wsn = e[F_WSN]; t.k0 = e[F_K0]; t.k1 = e[F_K1];",
    "// the weight's shared layout: [n][k] when K is its contiguous axis (or the nearer one), else [k][n]",
    "const bool nk = t.wsk == 1 ? t.wsn != 1 : (t.wsn != 1 && t.wsk < t.wsn);",
    "// 16-byte copies: aligned operands, unit stride along the copied axis, K range and N in whole chunks",
    "const bool vec = ((unsigned long long)(e[F_X] | e[F_W]) & 15ull) == 0 && t.xsc == 1 && t.xsr % 8 == 0 &&",
    "                 t.k0 % 8 == 0 && t.k1 % 8 == 0 &&",
    "                 (nk ? (t.wsk == 1 && t.wsn % 8 == 0) : (t.wsn == 1 && t.wsk % 8 == 0 && n % 8 == 0));",
)
"""The 16-bit kernels' strides and inner range, the weight's shared layout and whether 16-byte copies apply."""
_SETUP_I8: Final = (
    "// int8: the loop and the 16-byte copies count pairs of bytes along K; the byte loads use the exact fields",
    "t.xsr = t.xsr8 / 2; t.xsc = 1; t.wsk = t.wsk8 / 2; t.wsn = t.wsn8 / 2; t.k0 = t.k08 / 2; t.k1 = (t.k18 + 1) / 2;",
    "// 16-byte copies of x: aligned, unit stride along K, K range and row pitch in whole 16-byte chunks",
    "const bool x_vec = ((unsigned long long)e[F_X] & 15ull) == 0 && t.xsc8 == 1 && t.xsr8 % 16 == 0 &&",
    "                   t.k08 % 16 == 0 && t.k18 % 16 == 0;",
    "// a [n][k] weight (K contiguous) copied 16 bytes at a time; a [k][n] one (N contiguous) read as 4-byte words",
    "const bool nk_vec = x_vec && ((unsigned long long)e[F_W] & 15ull) == 0 && t.wsk8 == 1 && t.wsn8 % 16 == 0;",
    "const bool kn_vec = x_vec && ((unsigned long long)e[F_W] & 3ull) == 0 && t.wsn8 == 1 && t.wsk8 % 4 == 0 &&",
    "                    n % 4 == 0;",
)
"""The int8 kernel's pair-unit strides and inner range and its three staging paths (16-byte copies of both
operands, copies of x with the [k][n] weight transposed through registers, byte loads)."""

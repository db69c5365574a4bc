"""The grouped GEMM of GroupedMatmulV5 on warp matrix instructions: fp16 / bf16 operands, fp32 accumulation.

Same descriptor table, group-list pass and block-to-tile mapping as :class:`~acl_rocm.kernels.grouped_matmul.GmmKernel`
(block ``b`` finds its group by binary search over the groups' first tiles, so empty groups cost
nothing and uneven ones only their own tiles), with :data:`TILE_M` × :data:`TILE_N` output tiles computed by
:data:`THREADS` threads on the warp matrix layer (:mod:`acl_rocm.kernels.mma`):

* K advances :data:`TILE_K` at a time through two shared-memory stages: while the warps multiply one
  stage, the next is in flight (``acl_cp_async16``: ``cp.async`` on sm_80+). x lands as [m][k] rows,
  the weight as [k][n] rows when its N is contiguous (a [K, N] weight) or as [n][k] rows otherwise (the
  transposed [N, K] storage), so both layouts are copied 16 bytes at a time; rows are padded by 8
  elements, which keeps ``ldmatrix`` and the copies free of bank conflicts.
* Each warp owns a 64-row slice of the tile (4 × ``TILE_N / (warps / 2) / 16`` tiles of 16 × 16) and
  loads its fragments with ``acl_mma_load_a`` and ``acl_mma_load_b_kn`` / ``acl_mma_load_b_nk``.
* Edges: a 16-byte chunk is copied only where it lies wholly inside the group's rows, columns and
  inner range and the operand allows it (unit stride on the copied axis, 16-byte aligned base and
  row pitch); chunks wholly outside are zero-filled, and the rest (an edge chunk, or every chunk of
  an operand that cannot take 16-byte copies: odd strides, K-group offsets, transposed x) are read one
  element at a time with zeros outside. The K loop starts at the group's first inner index rounded down
  to a multiple of 8, so aligned operands stay aligned whatever ``K0`` a K-group starts at.
* Epilogue: each accumulator element plus the bias (its own dtype, read per column) is rounded once to
  the output's dtype and written through the output's strides.

Two blocks fit an SM of an H100 / H200 (40 KiB of static shared memory and at most 255 registers a
thread), so one block's copies overlap the other's products as well.
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
DTYPES: Final = frozenset({D.ACL_FLOAT16, D.ACL_BF16})
"""Operand dtypes this kernel multiplies."""
OUT_DTYPES: Final = frozenset({D.ACL_FLOAT16, D.ACL_BF16, D.ACL_FLOAT})
BIAS_DTYPES: Final = frozenset({D.ACL_FLOAT16, D.ACL_BF16, D.ACL_FLOAT})
_F32 = ctype(D.ACL_FLOAT)

DEVICE: Final = (
    MMA_SOURCE
    + rf"""
// ---- grouped GEMM on matrix instructions (kernels/grouped_matmul_mma.py) ----
#define GMM_BM {TILE_M}
#define GMM_BN {TILE_N}
#define GMM_BK {TILE_K}
#define GMM_THREADS {THREADS}
"""
    + r"""#define GMM_LDA (GMM_BK + 8)
#define GMM_LDB_KN (GMM_BN + 8)
#define GMM_LDB_NK (GMM_BK + 8)
#define GMM_A_STAGE (GMM_BM * GMM_LDA)
#define GMM_B_STAGE (GMM_BN * GMM_LDB_NK > GMM_BK * GMM_LDB_KN ? GMM_BN * GMM_LDB_NK : GMM_BK * GMM_LDB_KN)
#define GMM_STAGE (GMM_A_STAGE + GMM_B_STAGE)
#define GMM_WARPS (GMM_THREADS / ACL_WARP_SIZE)
#define GMM_WARPS_N (GMM_WARPS / 2)
#define GMM_WN (GMM_BN / GMM_WARPS_N)
#define GMM_MT (GMM_BM / 2 / 16)
#define GMM_NT (GMM_WN / 16)
#define GMM_CHUNKS_K (GMM_BK / 8)
#define GMM_CHUNKS_N (GMM_BN / 8)

typedef unsigned short gmm_u16;

// one output tile's operands: x [m][k] (row / column strides), weight [k][n], the ranges it covers
struct GmmTile {
  const gmm_u16* x;
  const gmm_u16* w;
  long long xsr, xsc, wsk, wsn;
  long long row0, m1, col0, n, k0, k1;
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
template <bool NK> ACL_DEV void gmm_load_vec(gmm_u16* stage, const GmmCopies& c, const GmmTile& t, long long kc) {
  const int tid = threadIdx.x;
  const bool ka = kc + 8 * (tid % GMM_CHUNKS_K) < t.k1;
  gmm_u16* sa = stage + (tid / GMM_CHUNKS_K) * GMM_LDA + 8 * (tid % GMM_CHUNKS_K);
#pragma unroll
  for (int q = 0; q < GMM_COPIES_A; ++q) {
    const bool ok = ka && ((c.a_ok >> q) & 1u);
    acl_cp_async16(sa + GMM_ROWS_STEP_A * q * GMM_LDA, ok ? c.a + q * c.a_step + kc : t.x, ok);
  }
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

// the warp's products over one staged slice
template <bool NK, bool BF16>
ACL_DEV void gmm_multiply(AclMmaC (&acc)[GMM_MT][GMM_NT], const gmm_u16* stage, int wm, int wn) {
  const gmm_u16* sa = stage + wm * (GMM_BM / 2) * GMM_LDA;
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
      if (NK) acl_mma_load_b_nk(b[j], sb + col * GMM_LDB_NK + ks, GMM_LDB_NK);
      else acl_mma_load_b_kn(b[j], sb + ks * GMM_LDB_KN + col, GMM_LDB_KN);
    }
#pragma unroll
    for (int i = 0; i < GMM_MT; ++i) {
#pragma unroll
      for (int j = 0; j < GMM_NT; ++j) acl_mma<BF16>(acc[i][j], a[i], b[j]);
    }
  }
}

// the K loop over [k0, k1): two stages, the next in flight while the warps multiply one
template <bool NK, bool VEC, bool BF16>
ACL_DEV void gmm_tile(AclMmaC (&acc)[GMM_MT][GMM_NT], gmm_u16* smem, const GmmTile& t, int wm, int wn) {
  const long long steps = t.k1 > t.k0 ? (t.k1 - t.k0 + GMM_BK - 1) / GMM_BK : 0;
  if (steps == 0) return;
  GmmCopies c;
  if (VEC) c = gmm_copies<NK>(t);
  for (long long s = 0; s <= steps; ++s) {
    if (s < steps) {  // stage s: copies in flight (VEC) or stored (elements) while stage s - 1 is multiplied
      if (VEC) {
        gmm_load_vec<NK>(smem + (s & 1) * GMM_STAGE, c, t, t.k0 + s * GMM_BK);
        acl_cp_async_commit();
      } else {
        gmm_load_elements<NK>(smem + (s & 1) * GMM_STAGE, t, t.k0 + s * GMM_BK);
      }
    }
    if (s > 0) gmm_multiply<NK, BF16>(acc, smem + ((s - 1) & 1) * GMM_STAGE, wm, wn);
    if (VEC) acl_cp_async_wait_all();
    __syncthreads();  // stage s is visible; every warp is done with stage s - 1, whose buffer stage s + 1 refills
  }
}
// ---- end of the grouped GEMM's device code ----
"""
)


@dataclass(frozen=True)
class GmmMmaKernel:
    """The grouped GEMM on matrix instructions: x and weight of ``dtype`` (fp16 / bf16), bias of ``bias`` (None:
    none), the output of ``out`` (None: ``dtype``)."""

    dtype: D
    bias: D | None
    out: D | None = None
    index_type: str = "long long"

    path: ClassVar[str] = "mma"
    """The name the runner reports for this kernel (its debug line, ``last_path``)."""
    tile_m: ClassVar[int] = TILE_M
    tile_n: ClassVar[int] = TILE_N
    threads: ClassVar[int] = THREADS

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"the matrix-instruction grouped GEMM takes float16 / bfloat16, not {self.dtype.short}")
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


@functools.lru_cache(maxsize=32)
def _source(k: GmmMmaKernel) -> str:
    o = ctype(k.dtype if k.out is None else k.out)
    bf16 = "true" if k.dtype == D.ACL_BF16 else "false"
    bias_lines: list[str] = []
    add_bias: list[str] = []
    if k.bias is not None:
        b = ctype(k.bias)
        bias_lines = [f"const {b.storage}* bias = (const {b.storage}*)e[F_BIAS];", "const long long bsn = e[F_BSN];"]
        add_bias = [f"        if (bias) v += {load('bias[col * bsn]', b, _F32)};"]
    body = [
        *FIND_GROUP,
        "const long long n = e[F_N];",
        f"const long long tiles_n = (n + {TILE_N - 1}) / {TILE_N};",
        "const long long t_in = b - e[F_TILE];",
        "GmmTile t;",
        "t.x = (const gmm_u16*)e[F_X];",
        "t.w = (const gmm_u16*)e[F_W];",
        "t.xsr = e[F_XSR]; t.xsc = e[F_XSC]; t.wsk = e[F_WSK]; t.wsn = e[F_WSN];",
        f"t.row0 = e[F_M0] + (t_in / tiles_n) * {TILE_M};",
        "t.m1 = e[F_M1];",
        f"t.col0 = (t_in % tiles_n) * {TILE_N};",
        "t.n = n; t.k0 = e[F_K0]; t.k1 = e[F_K1];",
        "// the weight's shared layout: [n][k] when K is its contiguous axis (or the nearer one), else [k][n]",
        "const bool nk = t.wsk == 1 ? t.wsn != 1 : (t.wsn != 1 && t.wsk < t.wsn);",
        "// 16-byte copies: aligned operands, unit stride along the copied axis, K range and N in whole chunks",
        "const bool vec = ((unsigned long long)(e[F_X] | e[F_W]) & 15ull) == 0 && t.xsc == 1 && t.xsr % 8 == 0 &&",
        "                 t.k0 % 8 == 0 && t.k1 % 8 == 0 &&",
        "                 (nk ? (t.wsk == 1 && t.wsn % 8 == 0) : (t.wsn == 1 && t.wsk % 8 == 0 && n % 8 == 0));",
        "__shared__ AclVec<unsigned, 4> smem_raw[2 * GMM_STAGE / 8];",
        "gmm_u16* smem = (gmm_u16*)smem_raw;",
        "const int warp = threadIdx.x / ACL_WARP_SIZE, lane = acl_lane();",
        "const int wm = warp % 2, wn = warp / 2;",
        "AclMmaC acc[GMM_MT][GMM_NT];",
        "#pragma unroll",
        "for (int i = 0; i < GMM_MT; ++i) {",
        "  #pragma unroll",
        "  for (int j = 0; j < GMM_NT; ++j) {",
        "    #pragma unroll",
        "    for (int q = 0; q < ACL_MMA_C_ELEMS; ++q) acc[i][j].x[q] = 0.0f;",
        "  }",
        "}",
        f"if (nk && vec) gmm_tile<true, true, {bf16}>(acc, smem, t, wm, wn);",
        f"else if (vec) gmm_tile<false, true, {bf16}>(acc, smem, t, wm, wn);",
        f"else if (nk) gmm_tile<true, false, {bf16}>(acc, smem, t, wm, wn);",
        f"else gmm_tile<false, false, {bf16}>(acc, smem, t, wm, wn);",
        f"{o.storage}* out = ({o.storage}*)e[F_OUT];",
        "const long long osr = e[F_OSR], osc = e[F_OSC];",
        *bias_lines,
        "#pragma unroll",
        "for (int i = 0; i < GMM_MT; ++i) {",
        "  #pragma unroll",
        "  for (int q = 0; q < ACL_MMA_C_ELEMS; ++q) {",
        f"    const long long row = t.row0 + wm * {TILE_M // 2} + 16 * i + acl_mma_c_row(lane, q);",
        "    if (row >= t.m1) continue;",
        f"    {o.storage}* line = out + row * osr;",
        "    #pragma unroll",
        "    for (int j = 0; j < GMM_NT; ++j) {",
        "      const long long col = t.col0 + wn * GMM_WN + 16 * j + acl_mma_c_col(lane, q);",
        "      if (col < n) {",
        "        float v = acc[i][j].x[q];",
        *add_bias,
        f"        line[col * osc] = {store('v', _F32, o)};",
        "      }",
        "    }",
        "  }",
        "}",
    ]
    bias = k.bias.short if k.bias is not None else "none"
    out = (k.dtype if k.out is None else k.out).short
    comment = f"matrix-instruction GEMM {k.dtype.short}, bias {bias}, out {out}, {TILE_M}x{TILE_N}x{TILE_K} tiles"
    return kernel_source(comment, GEMM_META, k.kernel_name, GEMM_PARAMS, body, THREADS, DEVICE)

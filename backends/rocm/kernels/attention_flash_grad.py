"""The fused flash-attention backward kernels on warp matrix instructions (:mod:`acl_rocm.kernels.mma`).

FlashAttention-2's backward split into two deterministic kernels (no atomics, no partial buffers), after a
pre-pass; one source a kernel (:func:`flash_grad_source`), sharing :data:`_COMMON` and the forward's row staging:

* ``_prep``: a warp per (batch, query head, row) forms ``Di = rowsum(dO ∘ O)`` and the row's log-sum-exp in log2
  units, ``lse2 = (max + log sum)·log2 e`` from the forward's softmaxMax / softmaxSum (+inf where the sum is not
  positive: the row kept nothing and its P is 0; a non-finite max counts as 0, as the composed row kernel reads
  them), both into fp32 [B, N, Sq] temporaries; with a sink also the row's dsink term ``−p_sink·Di`` (the statistics
  include the sink, so P needs nothing more), summed per head by the composed path's sink kernel.
* ``_dkv`` (key-major): a block owns ``16 * WARPS`` keys of one (batch, KV head), each warp 16 of them, K and V staged
  in shared memory once; it walks every query head of the GQA group and, per head, the query tiles of ``BRK`` rows that
  may keep its keys (the window's inverse of ``acl_key_range``), staging Q and dO by ``cp.async`` (two stages: step n +
  1's tile lands while step n is computed). Per tile and warp: Sᵀ = K Qᵀ and dPᵀ = V dOᵀ on matrix instructions, P =
  exp2(Sᵀ·scale·log2 e − lse2) (masked; rows past the query length have lse2 = +inf), dS = P ∘ (dP − Di), both rounded
  to the input dtype as A operands (the accuracy class's P₁₆ / dS₁₆), dV += P₁₆ᵀ dO and dK += dS₁₆ᵀ Q in fp32 registers
  for the whole group; stored once, dK times the scale.
* ``_dq`` (query-major): a block owns ``16 * WARPS`` query rows of one (batch, query head), walks the key tiles of
  ``BCQ`` keys its rows may keep (``acl_key_range``, the forward's; K / V double-buffered alike), recomputes S and dP,
  and accumulates dQ += dS₁₆ K; stored once times the scale.

Row and column ownership are the matrix layer's (``acl_mma_c_row`` / ``_col`` / ``_slot_row``), so every layout of
:mod:`~acl_rocm.kernels.mma` runs it (the software path on the CPU kernel emulator). Shared memory is dynamic (the
launch passes :meth:`FlashGradInstance.shared_bytes` per kernel); above 48 KiB the backend opts the kernel in.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from typing import Final

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.attention import PackedMeta, meta_struct
from acl_rocm.kernels.attention_flash import DTYPES, MIN_BLOCKS, ROWS_SOURCE, fill_body
from acl_rocm.kernels.attention_softmax import _ZERO4, Strides
from acl_rocm.kernels.ctypes_map import ctype, load, store
from acl_rocm.kernels.mma import MMA_SOURCE
from acl_rocm.kernels.prelude import PRELUDE
from acl_rocm.ops.attention_plan import KEY_RANGE_SOURCE

HEAD_DIMS: Final = (16, 32, 48, 64, 80, 96, 112, 128)
"""Head dims the kernels take: multiples of the matrix tile's 16 up to 128 (D 256 would hold 2 x 16 fp32 accumulator
fragments a warp in the dK/dV kernel: refused, the composed path runs it)."""
WARPS: Final = 4


def tiles(head_dim: int) -> tuple[int, int]:
    """(BCQ: keys a dQ tile, BRK: query rows a dK/dV step) at ``head_dim``: 64 / 64 up to D 64, 64 / 32 above (the
    dK/dV kernel's two D-wide accumulators leave room for 2 x 32-row S / dP tiles there; registers in
    :mod:`acl_rocm.ops.attention_flash_grad`'s docstring)."""
    return (64, 64) if head_dim <= 64 else (64, 32)


@dataclass(frozen=True)
class FlashGradMeta(PackedMeta):
    """One backward call (int64s in declaration order; strides in elements, (batch, head, row, dim|key))."""

    q: Strides = _ZERO4
    k: Strides = _ZERO4
    v: Strides = _ZERO4
    o: Strides = _ZERO4
    dout: Strides = _ZERO4
    dq: Strides = _ZERO4
    dk: Strides = _ZERO4
    dv: Strides = _ZERO4
    mask: Strides = _ZERO4
    smax: Strides = _ZERO4
    ssum: Strides = _ZERO4
    batches: int = 1
    heads: int = 1
    kv_heads: int = 1
    group: int = 1
    rows: int = 0
    kv_len: int = 0
    has_mask: int = 0
    has_window: int = 0
    win_lo: int = 0
    win_hi: int = 0
    shift: int = 0
    has_sink: int = 0
    sink_step: int = 0
    """Element stride between query heads' sinks (fp32)."""
    q_tiles: int = 1
    """Query tiles of ``16 * WARPS`` rows per (batch, head): the dQ kernel's blocks per head."""
    k_tiles: int = 1
    """Key tiles of ``16 * WARPS`` keys per (batch, KV head): the dK/dV kernel's blocks per KV head."""


GRAD_STRUCT: Final = meta_struct("FgMeta", FlashGradMeta)


@dataclass(frozen=True)
class FlashGradInstance:
    """One compiled backward source: dtype, head dim, whether Q/K/V/dO rows load as 16-byte chunks, tile sizes."""

    dtype: D
    head_dim: int
    vec: bool = True
    bcq: int = 64
    """Keys a dQ tile."""
    brk: int = 64
    """Query rows a dK/dV step."""
    stages: int = 2
    """Buffers of the walked operand (Q / dO in dK/dV, K / V in dQ): 2 copies tile t + 1 while tile t is computed."""

    @property
    def rows(self) -> int:
        """Query rows a dQ block and keys a dK/dV block (16 a warp)."""
        return 16 * WARPS

    @property
    def threads(self) -> int:
        """Threads a block at 32 lanes (the launch multiplies warps by the device's warp size)."""
        return 32 * WARPS

    def shared_bytes(self, kernel: str) -> int:
        """Dynamic shared memory of ``kernel`` ("dq" or "dkv"): the block's two resident operands and ``stages``
        buffers of the two walked ones, 16-byte padded rows."""
        tile = self.bcq if kernel == "dq" else self.brk
        return 2 * (self.rows + self.stages * tile) * (self.head_dim + 8) * 2

    @functools.cached_property
    def kernel_name(self) -> str:
        """The stable stem of the three kernels' names (``_prep``, ``_dkv``, ``_dq`` appended)."""
        digest = hashlib.sha1(repr((self, GRAD_STRUCT)).encode()).hexdigest()[:12]
        shape = f"q{self.bcq}k{self.brk}s{self.stages}"
        return f"acl_flash_grad_{self.dtype.short}_d{self.head_dim}_{shape}_{digest}"


Shape = tuple[int, int, int]
"""(BCQ, BRK, stages): keys a dQ tile, query rows a dK/dV step, buffers of the walked tiles."""


def grad_instance(dtype: D, head_dim: int, vec: bool, shape: Shape | None = None) -> FlashGradInstance:
    """The instance for a call: ``shape``, else :func:`tiles`' for ``head_dim`` (one of :data:`HEAD_DIMS`), 2 stages."""
    bcq, brk, stages = shape if shape is not None else (*tiles(head_dim), 2)
    return FlashGradInstance(dtype, head_dim, vec, bcq, brk, stages)


def parse_config(text: str) -> dict[int | None, Shape]:
    """``ACL_FLASH_GRAD_CONFIG``: ``q<BCQ>k<BRK>s<stages>`` for every head dim (``q64k32s2``) or ``D=shape`` pairs
    (``128=q64k32s1,64=q64k64s2``); BCQ 16/32/64/128, BRK 16/32/64, stages 1/2; ValueError for anything else."""
    out: dict[int | None, Shape] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        dim, _, shape = part.rpartition("=")
        found = re.fullmatch(r"q(\d+)k(\d+)s(\d+)", shape.strip())
        if found is None or (dim and (not dim.strip().isdigit() or int(dim) not in HEAD_DIMS)):
            raise ValueError(f"{part!r} is not [D=]q<keys>k<rows>s<stages> (D one of {HEAD_DIMS})")
        bcq, brk, stages = (int(g) for g in found.groups())
        if bcq not in (16, 32, 64, 128) or brk not in (16, 32, 64) or stages not in (1, 2):
            raise ValueError(f"{part!r}: keys 16/32/64/128, rows 16/32/64, stages 1/2")
        out[int(dim) if dim else None] = (bcq, brk, stages)
    return out


_COMMON: Final = r"""
#define HEAD_DIM @D@
#define WARPS @WARPS@
#define DP (HEAD_DIM + 8)
#define THREADS (WARPS * ACL_WARP_SIZE)
#define MIN_BLOCKS @MINB@
#define IS_BF16 @BF16@
#define VEC @VEC@
#define FAST_EXP 1  // exp2 on ex2.approx.ftz (NVIDIA; exp2f elsewhere): P is rounded to 16 bits next
#define KT (HEAD_DIM / 16)
#define BQ (16 * WARPS)
#define BKV (16 * WARPS)
#define BCQ @BCQ@
#define BRK @BRK@
#define STAGES @STAGES@
#define LOG2E 1.4426950408889634f
typedef @S@ elem_t;
@GRAD_STRUCT@
@ROWS_SOURCE@
// whether row i keeps key j: inside the call, the window and the explicit mask (the composed row kernel's rule)
ACL_DEV bool fg_keep(const FgMeta& m, const unsigned char* __restrict__ mask, long long b, long long h, long long i,
                     long long j) {
  if (i >= m.rows || j >= m.kv_len) return false;
  if (m.has_window) {
    const long long off = j - i - m.shift;
    if (off < m.win_lo || off > m.win_hi) return false;
  }
  return !m.has_mask || mask[b * m.mask[0] + h * m.mask[1] + i * m.mask[2] + j * m.mask[3]] == 0;
}

// whether every (row, key) of rows r0 .. r0 + nr - 1 and keys j0 .. j0 + nk - 1 is kept (block-uniform)
ACL_DEV bool fg_full(const FgMeta& m, long long r0, int nr, long long j0, int nk) {
  if (m.has_mask || j0 + nk > m.kv_len) return false;
  return !m.has_window || (j0 - (r0 + nr - 1) - m.shift >= m.win_lo && j0 + nk - 1 - r0 - m.shift <= m.win_hi);
}

// the dK/dV walk's step n (query head n / steps of the group, rows r_first + (n % steps) BRK ..): Q and dO into
// qs (dO BRK rows after it) by cp.async (one commit group), the rows' lse2 / Di into rl / rd by plain stores
ACL_DEV void fg_dkv_issue(const FgMeta& m, const elem_t* __restrict__ q, const elem_t* __restrict__ dout,
                          const float* __restrict__ delta, const float* __restrict__ lse2, long long b, long long hk,
                          long long r_first, long long steps, long long n, unsigned short* qs, float* rl, float* rd) {
  const long long h = hk * m.group + n / steps, r0 = r_first + (n % steps) * BRK;
  flash_load(qs, q + b * m.q[0] + h * m.q[1], m.q[2], m.q[3], r0, BRK, m.rows);
  flash_load(qs + BRK * DP, dout + b * m.dout[0] + h * m.dout[1], m.dout[2], m.dout[3], r0, BRK, m.rows);
  acl_cp_async_commit();
  const long long stats = (b * m.heads + h) * m.rows;
  for (int c = threadIdx.x; c < BRK; c += THREADS) {
    const bool ok = r0 + c < m.rows;
    rl[c] = ok ? lse2[stats + r0 + c] : __uint_as_float(0x7f800000u);
    rd[c] = ok ? delta[stats + r0 + c] : 0.0f;
  }
}

// the dQ walk's key tile from j0: K and V into ks (V BCQ rows after it) by cp.async (one commit group)
ACL_DEV void fg_dq_issue(const FgMeta& m, const elem_t* __restrict__ kh, const elem_t* __restrict__ vh, long long j0,
                         unsigned short* ks) {
  flash_load(ks, kh, m.k[2], m.k[3], j0, BCQ, m.kv_len);
  flash_load(ks + BCQ * DP, vh, m.v[2], m.v[3], j0, BCQ, m.kv_len);
  acl_cp_async_commit();
}

// both kernels' score products: sc[t] = A0 B0[t]^T and dp[t] = A1 B1[t]^T, A0 / A1 the warp's 16 rows (K and V in
// dK/dV, Q and dO in dQ), B0[t] / B1[t] the walked tile's rows 16 t .. 16 t + 15 (Q and dO, K and V); each A fragment
// read from shared memory once for all N tiles
template <int N>
ACL_DEV void fg_scores(AclMmaC (&sc)[N], AclMmaC (&dp)[N], const unsigned short* a0, const unsigned short* a1,
                       const unsigned short* b0, const unsigned short* b1) {
#pragma unroll
  for (int t = 0; t < N; ++t)
#pragma unroll
    for (int e = 0; e < ACL_MMA_C_ELEMS; ++e) sc[t].x[e] = dp[t].x[e] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < KT; ++kk) {
    AclMmaA f0, f1;
    acl_mma_load_a(f0, a0 + 16 * kk, DP);
    acl_mma_load_a(f1, a1 + 16 * kk, DP);
#pragma unroll
    for (int t = 0; t < N; ++t) {
      AclMmaB bt;
      acl_mma_load_b_nk(bt, b0 + 16 * t * DP + 16 * kk, DP);
      acl_mma<IS_BF16>(sc[t], f0, bt);
      acl_mma_load_b_nk(bt, b1 + 16 * t * DP + 16 * kk, DP);
      acl_mma<IS_BF16>(dp[t], f1, bt);
    }
  }
}

#if ACL_MMA_SCRATCH
#define FG_SCRATCH                                                                             \
  __shared__ AclVec<unsigned, 4> scratch_raw[WARPS * ACL_MMA_SCRATCH / 8];                     \
  unsigned short* const scratch = (unsigned short*)scratch_raw + (threadIdx.x / ACL_WARP_SIZE) * ACL_MMA_SCRATCH;
#else
#define FG_SCRATCH unsigned short* const scratch = nullptr;
#endif

"""

_KERNELS: Final = {
    "prep": r"""
// Di = rowsum(dO o O) and lse2 = (max + log sum) log2 e of each (batch, query head, row): a warp a row
extern "C" __global__ void __launch_bounds__(THREADS) @NAME@_prep(const FgMeta m, const elem_t* __restrict__ o,
                                                               const elem_t* __restrict__ dout,
                                                               const float* __restrict__ smax,
                                                               const float* __restrict__ ssum,
                                                               float* __restrict__ delta, float* __restrict__ lse2,
                                                               const float* __restrict__ sink,
                                                               float* __restrict__ terms) {
  const long long r = (long long)blockIdx.x * WARPS + threadIdx.x / ACL_WARP_SIZE;
  const int lane = acl_lane();
  if (r >= m.batches * m.heads * m.rows) return;  // the whole warp leaves
  const long long i = r % m.rows, bh = r / m.rows, h = bh % m.heads, b = bh / m.heads;
  const elem_t* orow = o + b * m.o[0] + h * m.o[1] + i * m.o[2];
  const elem_t* drow = dout + b * m.dout[0] + h * m.dout[1] + i * m.dout[2];
  float part = 0.0f;
  for (int d = lane; d < HEAD_DIM; d += ACL_WARP_SIZE) part += @LOAD_DO@ * @LOAD_O@;
#pragma unroll
  for (int off = ACL_WARP_SIZE / 2; off > 0; off >>= 1) part += ACL_SHFL_XOR(part, off);
  if (lane == 0) {
    const float mx = smax[b * m.smax[0] + h * m.smax[1] + i * m.smax[2]];
    const float sm = ssum[b * m.ssum[0] + h * m.ssum[1] + i * m.ssum[2]];
    const float base = isfinite(mx) ? mx : 0.0f;
    delta[r] = part;
    lse2[r] = sm > 0.0f ? base * LOG2E + log2f(sm) : __uint_as_float(0x7f800000u);
    if (m.has_sink) {  // the row's dsink term (the composed row kernel's): -p_sink Di, p_sink = exp(sink - max) / sum
      const float p_sink = sm > 0.0f ? expf(sink[h * m.sink_step] - base) * (1.0f / sm) : 0.0f;
      terms[r] = -p_sink * part;
    }
  }
}
""",
    "dkv": r"""
// dK, dV: a block per 16 * WARPS keys of one (batch, KV head), every query head of its group
extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS) @NAME@_dkv(
    const FgMeta m, const double scale_arg, const elem_t* __restrict__ q, const elem_t* __restrict__ k,
    const elem_t* __restrict__ v, const elem_t* __restrict__ dout, const unsigned char* __restrict__ mask,
    const float* __restrict__ delta, const float* __restrict__ lse2, elem_t* __restrict__ dk,
    elem_t* __restrict__ dv) {
  extern __shared__ AclVec<unsigned, 4> smem_raw[];  // K, V (BKV rows each), STAGES x (Q, dO) (BRK rows each)
  __shared__ float rls_all[STAGES][BRK], rds_all[STAGES][BRK];
  FG_SCRATCH
  unsigned short* const ks = (unsigned short*)smem_raw;
  unsigned short* const vs = ks + BKV * DP;
  unsigned short* const qs_all = vs + BKV * DP;  // stage s: Q at qs_all + 2 s BRK DP, dO after it
  const int warp = threadIdx.x / ACL_WARP_SIZE, lane = acl_lane();
  const long long x = blockIdx.x;
  const long long bh = x / m.k_tiles, kt = x % m.k_tiles;  // causal: the first key tiles have the most rows
  const long long hk = bh % m.kv_heads, b = bh / m.kv_heads;
  const long long j0 = kt * BKV, wj0 = j0 + 16 * warp;
  const long long valid_keys = m.kv_len - j0 < BKV ? m.kv_len - j0 : BKV;
  // the query rows that may keep these keys: the window's inverse (lo <= j - i - shift <= hi)
  long long r_first = 0, r_last = m.rows;
  if (m.has_window) {
    const long long f = j0 - m.shift - m.win_hi, l = j0 + valid_keys - m.shift - m.win_lo;
    r_first = f > 0 ? f : 0;
    r_last = l < m.rows ? l : m.rows;
  }
  const long long steps = r_last > r_first ? (r_last - r_first + BRK - 1) / BRK : 0;
  flash_load(ks, k + b * m.k[0] + hk * m.k[1], m.k[2], m.k[3], j0, BKV, m.kv_len);
  flash_load(vs, v + b * m.v[0] + hk * m.v[1], m.v[2], m.v[3], j0, BKV, m.kv_len);
  acl_cp_async_commit();
  const float sl2 = (float)(scale_arg * 1.4426950408889634);
  AclMmaC dka[KT], dva[KT];
#pragma unroll
  for (int dt = 0; dt < KT; ++dt)
#pragma unroll
    for (int e = 0; e < ACL_MMA_C_ELEMS; ++e) dka[dt].x[e] = dva[dt].x[e] = 0.0f;

  // one walk over (query head of the group, query tile): step n is head n / steps, tile n % steps
  const long long total = m.group * steps;
  if (STAGES == 2 && total > 0) fg_dkv_issue(m, q, dout, delta, lse2, b, hk, r_first, steps, 0, qs_all, rls_all[0],
                                             rds_all[0]);
  for (long long n = 0; n < total; ++n) {
    const long long h = hk * m.group + n / steps, r0 = r_first + (n % steps) * BRK;
    const int buf = STAGES == 2 ? (int)(n & 1) : 0;
    unsigned short* const qs = qs_all + 2 * buf * BRK * DP;
    unsigned short* const dos = qs + BRK * DP;
    const float* const rls = rls_all[buf];
    const float* const rds = rds_all[buf];
    {
      __syncthreads();  // every warp is done with the buffers the next copy fills
      const long long next = STAGES == 2 ? n + 1 : n;
      const int nb = STAGES == 2 ? (int)(next & 1) : 0;
      if (next < total) fg_dkv_issue(m, q, dout, delta, lse2, b, hk, r_first, steps, next,
                                     qs_all + 2 * nb * BRK * DP, rls_all[nb], rds_all[nb]);
      if (STAGES == 2 && next < total) acl_cp_async_wait<1>();  // all but step n + 1's copy have landed
      else acl_cp_async_wait<0>();
      __syncthreads();
      // S^T = K Q^T and dP^T = V dO^T: this warp's 16 keys by BRK rows
      AclMmaC sc[BRK / 16], dp[BRK / 16];
      fg_scores<BRK / 16>(sc, dp, ks + 16 * warp * DP, vs + 16 * warp * DP, qs, dos);
      const bool full = fg_full(m, r0, BRK, j0, BKV);
#pragma unroll
      for (int nr = 0; nr < BRK / 16; ++nr) {
#pragma unroll
        for (int e = 0; e < ACL_MMA_C_ELEMS; ++e) {
          const int c = 16 * nr + acl_mma_c_col(lane, e);  // the query row; the C row is the key
          float p = flash_exp2(sc[nr].x[e] * sl2 - rls[c]);
          if (!full && !fg_keep(m, mask, b, h, r0 + c, wj0 + acl_mma_c_row(lane, e))) p = 0.0f;
          sc[nr].x[e] = p;
          dp[nr].x[e] = p * (dp[nr].x[e] - rds[c]);
        }
        AclMmaA pa, dsa;
        acl_mma_c_to_a<IS_BF16>(pa, sc[nr], scratch);
        acl_mma_c_to_a<IS_BF16>(dsa, dp[nr], scratch);
#pragma unroll
        for (int dt = 0; dt < KT; ++dt) {
          AclMmaB bt;
          acl_mma_load_b_kn(bt, dos + 16 * nr * DP + 16 * dt, DP);
          acl_mma<IS_BF16>(dva[dt], pa, bt);
          acl_mma_load_b_kn(bt, qs + 16 * nr * DP + 16 * dt, DP);
          acl_mma<IS_BF16>(dka[dt], dsa, bt);
        }
      }
    }
  }
  acl_cp_async_wait_all();  // K / V copies of a block whose keys no row keeps

  const float scale = (float)scale_arg;
  elem_t* dkh = dk + b * m.dk[0] + hk * m.dk[1];
  elem_t* dvh = dv + b * m.dv[0] + hk * m.dv[1];
#pragma unroll
  for (int dt = 0; dt < KT; ++dt)
#pragma unroll
    for (int e = 0; e < ACL_MMA_C_ELEMS; ++e) {
      const long long j = wj0 + acl_mma_c_row(lane, e), d = 16 * dt + acl_mma_c_col(lane, e);
      if (j >= m.kv_len) continue;
      const float rk = dka[dt].x[e] * scale, rv = dva[dt].x[e];
      dkh[j * m.dk[2] + d * m.dk[3]] = @STORE_K@;
      dvh[j * m.dv[2] + d * m.dv[3]] = @STORE_V@;
    }
}
""",
    "dq": r"""
// dQ: a block per 16 * WARPS query rows of one (batch, query head), the key tiles its rows may keep
extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS) @NAME@_dq(
    const FgMeta m, const double scale_arg, const elem_t* __restrict__ q, const elem_t* __restrict__ k,
    const elem_t* __restrict__ v, const elem_t* __restrict__ dout, const unsigned char* __restrict__ mask,
    const float* __restrict__ delta, const float* __restrict__ lse2, elem_t* __restrict__ dq) {
  extern __shared__ AclVec<unsigned, 4> smem_raw[];  // Q, dO (BQ rows each), STAGES x (K, V) (BCQ rows each)
  FG_SCRATCH
  unsigned short* const qs = (unsigned short*)smem_raw;
  unsigned short* const dos = qs + BQ * DP;
  unsigned short* const ks_all = dos + BQ * DP;  // stage s: K at ks_all + 2 s BCQ DP, V after it
  const int warp = threadIdx.x / ACL_WARP_SIZE, lane = acl_lane();
  const long long x = blockIdx.x;
  const long long bh = x / m.q_tiles, qt = m.q_tiles - 1 - x % m.q_tiles;  // the longest key ranges first
  const long long h = bh % m.heads, b = bh / m.heads, hk = h / m.group;
  const long long row0 = qt * BQ, wrow0 = row0 + 16 * warp;
  const elem_t* kh = k + b * m.k[0] + hk * m.k[1];
  const elem_t* vh = v + b * m.v[0] + hk * m.v[1];
  const long long valid_rows = m.rows - row0 < BQ ? m.rows - row0 : BQ;
  long long kv0, kv1;
  acl_key_range(row0, valid_rows, m.kv_len, m.has_window, m.win_lo, m.win_hi, m.shift, &kv0, &kv1);
  flash_load(qs, q + b * m.q[0] + h * m.q[1], m.q[2], m.q[3], row0, BQ, m.rows);
  flash_load(dos, dout + b * m.dout[0] + h * m.dout[1], m.dout[2], m.dout[3], row0, BQ, m.rows);
  acl_cp_async_commit();
  const long long stats = (b * m.heads + h) * m.rows;
  float rl[ACL_MMA_C_SLOTS], rd[ACL_MMA_C_SLOTS];
#pragma unroll
  for (int s = 0; s < ACL_MMA_C_SLOTS; ++s) {
    const long long i = wrow0 + acl_mma_slot_row(lane, s);
    rl[s] = i < m.rows ? lse2[stats + i] : __uint_as_float(0x7f800000u);
    rd[s] = i < m.rows ? delta[stats + i] : 0.0f;
  }
  const float sl2 = (float)(scale_arg * 1.4426950408889634);
  AclMmaC acc[KT];
#pragma unroll
  for (int dt = 0; dt < KT; ++dt)
#pragma unroll
    for (int e = 0; e < ACL_MMA_C_ELEMS; ++e) acc[dt].x[e] = 0.0f;

  const long long tiles = kv1 > kv0 ? (kv1 - kv0 + BCQ - 1) / BCQ : 0;
  if (STAGES == 2 && tiles > 0) fg_dq_issue(m, kh, vh, kv0, ks_all);
  for (long long t = 0; t < tiles; ++t) {
    const long long j0 = kv0 + t * BCQ;
    unsigned short* const ks = ks_all + 2 * (STAGES == 2 ? (int)(t & 1) : 0) * BCQ * DP;  // tile t's buffers
    unsigned short* const vs = ks + BCQ * DP;
    __syncthreads();  // every warp is done with the buffers the next copy fills
    const long long next = STAGES == 2 ? t + 1 : t;
    const int nb = STAGES == 2 ? (int)(next & 1) : 0;
    if (next < tiles) fg_dq_issue(m, kh, vh, kv0 + next * BCQ, ks_all + 2 * nb * BCQ * DP);
    if (STAGES == 2 && next < tiles) acl_cp_async_wait<1>();  // all but tile t + 1's copy have landed
    else acl_cp_async_wait<0>();
    __syncthreads();
    // S = Q K^T and dP = dO V^T: this warp's 16 rows by BCQ keys
    AclMmaC sc[BCQ / 16], dp[BCQ / 16];
    fg_scores<BCQ / 16>(sc, dp, qs + 16 * warp * DP, dos + 16 * warp * DP, ks, vs);
    const bool full = j0 + BCQ <= kv1 && fg_full(m, row0, BQ, j0, BCQ);
#pragma unroll
    for (int nt = 0; nt < BCQ / 16; ++nt) {
#pragma unroll
      for (int e = 0; e < ACL_MMA_C_ELEMS; ++e) {
        const int s = acl_mma_c_slot(e);
        float p = flash_exp2(sc[nt].x[e] * sl2 - rl[s]);
        const long long j = j0 + 16 * nt + acl_mma_c_col(lane, e);
        if (!full && (j >= kv1 || !fg_keep(m, mask, b, h, wrow0 + acl_mma_c_row(lane, e), j))) p = 0.0f;
        dp[nt].x[e] = p * (dp[nt].x[e] - rd[s]);
      }
      AclMmaA dsa;
      acl_mma_c_to_a<IS_BF16>(dsa, dp[nt], scratch);
#pragma unroll
      for (int dt = 0; dt < KT; ++dt) {
        AclMmaB bk;
        acl_mma_load_b_kn(bk, ks + 16 * nt * DP + 16 * dt, DP);
        acl_mma<IS_BF16>(acc[dt], dsa, bk);
      }
    }
  }
  acl_cp_async_wait_all();  // Q / dO copies of a block whose rows keep no key

  const float scale = (float)scale_arg;
  elem_t* dqh = dq + b * m.dq[0] + h * m.dq[1];
#pragma unroll
  for (int dt = 0; dt < KT; ++dt)
#pragma unroll
    for (int e = 0; e < ACL_MMA_C_ELEMS; ++e) {
      const long long i = wrow0 + acl_mma_c_row(lane, e);
      if (i >= m.rows) continue;
      const float rq = acc[dt].x[e] * scale;
      dqh[i * m.dq[2] + (16 * dt + acl_mma_c_col(lane, e)) * m.dq[3]] = @STORE_Q@;
    }
}
""",
}
"""Each kernel's source after :data:`_COMMON` (one source a kernel: the backend loads one entry per source)."""


def flash_grad_source(inst: FlashGradInstance, kernel: str) -> str:
    """The complete source (prelude, matrix layer, key range included) of ``kernel`` ("prep", "dkv" or "dq")."""
    if (
        inst.dtype not in DTYPES
        or inst.head_dim not in HEAD_DIMS
        or inst.bcq % 16
        or inst.brk % 16
        or inst.stages not in (1, 2)
    ):
        raise ValueError(f"no flash backward kernel for {inst}")
    c, f32 = ctype(inst.dtype), ctype(D.ACL_FLOAT)
    tokens = {
        "@D@": str(inst.head_dim),
        "@WARPS@": str(WARPS),
        "@MINB@": str(MIN_BLOCKS),
        "@VEC@": "1" if inst.vec else "0",
        "@BCQ@": str(inst.bcq),
        "@BRK@": str(inst.brk),
        "@STAGES@": str(inst.stages),
        "@GRAD_STRUCT@": GRAD_STRUCT,
        "@ROWS_SOURCE@": ROWS_SOURCE,
        "@LOAD_DO@": load("drow[d * m.dout[3]]", c, f32),
        "@LOAD_O@": load("orow[d * m.o[3]]", c, f32),
        "@STORE_K@": store("rk", f32, c),
        "@STORE_V@": store("rv", f32, c),
        "@STORE_Q@": store("rq", f32, c),
    }
    body = fill_body(_COMMON + _KERNELS[kernel], inst.dtype, None, inst.kernel_name, tokens)
    header = f"// flash attention backward {kernel}: {inst.dtype.short}, D={inst.head_dim}, dQ {inst.bcq}-key tiles, "
    header += f"dK/dV {inst.brk}-row steps"
    return "\n".join([PRELUDE, MMA_SOURCE, KEY_RANGE_SOURCE, header, body])

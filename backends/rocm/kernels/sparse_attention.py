"""Kernel sources of the sparse-attention family: LightningIndexer's scores and emission, SparseFlashAttention.

Both operators share :class:`SaMeta` and the device helpers of :data:`SA_COMMON`: a query row ``r`` (the
flattened ``B*S1`` of BSND or the token of TND) belongs to batch ``b`` at position ``s`` (TND: found
in the cumulative lengths), and key token ``j`` of batch ``b`` sits at a dense row (BSND), a packed
row after the batch's start (TND) or row ``j % blockSize`` of block ``blockTable[b, j / blockSize]``
(PA_BSND). Every tensor is read through four strides (outer, row, head, last), so no operand is copied.
Lengths are device data: the check kernel (one block) sets the run's flag where they break the spec's
rules, and every other kernel reads the flag first and writes nothing then.

LightningIndexer: the score kernel gives each thread one key of one (query row, key head): the
group's query rows and weights sit in shared memory as float32, the dot products accumulate
``d = 0 .. D-1`` with ``fmaf`` (exact: a product of two 16-bit floats fits float32, so it equals a
multiply then add), ReLU, then the heads are summed in order with single roundings (``__fmul_rn`` /
``__fadd_rn``, never contracted): the reference's float32 order, so both compute the same score.
Keys a row cannot see, rows not computed and NaN scores write -inf. The row sorter then orders each
row descending, ties to the lower key (:mod:`acl_rocm.ops.sort`), and the emit kernel writes the
first ``sparseCount`` keys whose score is above -inf, then -1 (values: the score in the query's
dtype, then -inf).

SparseFlashAttention: one block of :data:`SFA_THREADS` threads per (query row, query head). It reads
the row's index entries a tile at a time (``SFA_THREADS / sparseBlockSize`` entries, one token per
thread), each thread forms its token's score ``scale * (q·k + qRope·kRope)`` in float32, and the block
keeps an online softmax over the tiles (max, sum, and each thread's output dims), as the attention
row kernel does. The first negative entry (a block reduction over the entries read) ends the row.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Final

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.attention import PackedMeta, Strides, meta_struct
from acl_rocm.kernels.ctypes_map import ctype, load, store
from acl_rocm.kernels.prelude import PRELUDE
from acl_rocm.kernels.reduction import block_reduce_source

SCORE_THREADS: Final = 128
EMIT_THREADS: Final = 256
CHECK_THREADS: Final = 256
SFA_THREADS: Final = 128
MAX_SHARED_FLOATS: Final = 8192
"""LightningIndexer keeps a row's group of queries (heads x D floats) in shared memory: 32 KiB at most."""
_ZERO4: Strides = (0, 0, 0, 0)


@dataclass(frozen=True)
class SaMeta(PackedMeta):
    """One call's geometry (int64s in order). Strides are (outer, row, head, last) in elements."""

    batch: int = 0
    q_tnd: int = 0
    kv_mode: int = 0
    """0 BSND, 1 TND, 2 PA_BSND."""
    s1: int = 0
    """BSND: query rows per batch; TND: T1."""
    cap: int = 0
    """BSND: S2; TND: T2; PA_BSND: the block table's reach (a row of the score temporary)."""
    block: int = 1
    blocks: int = 0
    n2: int = 1
    group: int = 1
    d: int = 0
    dr: int = 0
    count: int = 0
    """LightningIndexer: sparseCount; SparseFlashAttention: the index rows' length."""
    sparse_block: int = 1
    mode: int = 0
    has_lq: int = 0
    has_lk: int = 0
    lq_step: int = 0
    lk_step: int = 0
    table_cols: int = 0
    rows: int = 0
    """Query rows R (B*S1 or T1)."""
    has_values: int = 0
    q: Strides = _ZERO4
    k: Strides = _ZERO4
    v: Strides = _ZERO4
    qr: Strides = _ZERO4
    kr: Strides = _ZERO4
    w: Strides = _ZERO4
    o: Strides = _ZERO4
    o2: Strides = _ZERO4
    stats: Strides = _ZERO4
    """SparseFlashAttention's softmaxMax/Sum: (batch, kv head, query row, head in group); TND: batch 0, row = token."""
    idx: Strides = _ZERO4
    table: Strides = _ZERO4


SA_STRUCT: Final = meta_struct("SaMeta", SaMeta)

SA_COMMON: Final = (
    SA_STRUCT
    + r"""
// single roundings (no contraction), as NumPy's float32 arithmetic
#if defined(__HIPCC_RTC__) || defined(__HIP_DEVICE_COMPILE__) || defined(__CUDA_ARCH__)
#define SA_MUL(a, b) __fmul_rn((a), (b))
#define SA_ADD(a, b) __fadd_rn((a), (b))
#else
#define SA_MUL(a, b) ((float)((a) * (b)))
#define SA_ADD(a, b) ((float)((a) + (b)))
#endif
ACL_DEV float sa_inf() { return __uint_as_float(0x7f800000u); }
ACL_DEV long long sa_q_start(const SaMeta& m, const int* lq, long long b) {
  return (m.q_tnd && b > 0) ? (long long)lq[(b - 1) * m.lq_step] : 0;
}
ACL_DEV long long sa_q_len(const SaMeta& m, const int* lq, long long b) {
  if (m.q_tnd) return (long long)lq[b * m.lq_step] - sa_q_start(m, lq, b);
  return m.has_lq ? (long long)lq[b * m.lq_step] : m.s1;
}
ACL_DEV long long sa_k_start(const SaMeta& m, const int* lk, long long b) {
  return (m.kv_mode == 1 && b > 0) ? (long long)lk[(b - 1) * m.lk_step] : 0;
}
ACL_DEV long long sa_k_len(const SaMeta& m, const int* lk, long long b) {
  if (m.kv_mode == 1) return (long long)lk[b * m.lk_step] - sa_k_start(m, lk, b);
  return (m.kv_mode == 2 || m.has_lk) ? (long long)lk[b * m.lk_step] : m.cap;
}
// query row r -> (batch b, position s)
ACL_DEV void sa_row(const SaMeta& m, const int* lq, long long r, long long& b, long long& s) {
  if (!m.q_tnd) {
    b = r / m.s1;
    s = r % m.s1;
    return;
  }
  b = 0;
  while (b + 1 < m.batch && (long long)lq[b * m.lq_step] <= r) ++b;
  s = r - sa_q_start(m, lq, b);
}
// element offset of query row (b, s) / global row r, for a tensor with strides st
ACL_DEV long long sa_qoff(const SaMeta& m, const long long* st, long long b, long long s, long long r) {
  return m.q_tnd ? r * st[1] : b * st[0] + s * st[1];
}
// element offset of key token j of batch b (k0: the batch's first packed row, TND)
ACL_DEV long long sa_koff(
    const SaMeta& m, const long long* st, const int* table, long long b, long long k0, long long j) {
  if (m.kv_mode == 0) return b * st[0] + j * st[1];
  if (m.kv_mode == 1) return (k0 + j) * st[1];
  const long long blk = table[b * m.table[0] + (j / m.block) * m.table[1]];
  return blk * st[0] + (j % m.block) * st[1];
}
// how many keys query position s of a batch sees
ACL_DEV long long sa_visible(const SaMeta& m, long long s, long long lq, long long lk) {
  if (m.mode == 0) return lk;
  long long v = lk - lq + s + 1;
  v = v < lk ? v : lk;
  return v > 0 ? v : 0;
}
"""
)


@dataclass(frozen=True)
class SaInstance:
    """One compiled set of kernels: the tensors' dtype, the weights' dtype (LightningIndexer), D and Dr."""

    dtype: D
    weights: D
    d: int
    dr: int

    @functools.cached_property
    def digest(self) -> str:
        """A short hash of the instance and the struct layout."""
        return hashlib.sha1(repr((self, SA_STRUCT, SFA_THREADS, SCORE_THREADS)).encode()).hexdigest()[:12]

    def name(self, which: str) -> str:
        """The ``extern "C"`` name of kernel ``which`` (check, score, emit, attend)."""
        return f"acl_sa_{which}_{self.dtype.short}_{self.weights.short}_d{self.d}_r{self.dr}_{self.digest}"


def _check(inst: SaInstance) -> str:
    return f"""
extern "C" __global__ void __launch_bounds__({CHECK_THREADS}) {inst.name("check")}(
    const SaMeta m, const int* __restrict__ lq, const int* __restrict__ lk, const int* __restrict__ table,
    int* __restrict__ flag) {{
  bool bad = false;
  if (threadIdx.x == 0) {{
    long long prev_q = 0, prev_k = 0;
    for (long long b = 0; b < m.batch; ++b) {{
      if (m.q_tnd) {{
        const long long e = lq[b * m.lq_step];
        if (e < prev_q) bad = true;
        prev_q = e;
      }} else if (m.has_lq) {{
        const long long n = lq[b * m.lq_step];
        if (n < 0 || n > m.s1) bad = true;
      }}
      if (m.kv_mode == 1) {{
        const long long e = lk[b * m.lk_step];
        if (e < prev_k) bad = true;
        prev_k = e;
      }} else if (m.kv_mode == 2 || m.has_lk) {{
        const long long n = lk[b * m.lk_step];
        if (n < 0 || n > m.cap) bad = true;
      }}
    }}
    if (m.q_tnd && prev_q != m.s1) bad = true;
    if (m.kv_mode == 1 && prev_k != m.cap) bad = true;
  }}
  if (m.kv_mode == 2) {{  // the table entries each batch's length uses name blocks of the pool
    for (long long e = threadIdx.x; e < m.batch * m.table_cols; e += blockDim.x) {{
      const long long b = e / m.table_cols, c = e % m.table_cols;
      long long n = lk[b * m.lk_step];
      n = n < 0 ? 0 : (n > m.cap ? m.cap : n);
      if (c * m.block < n) {{
        const long long blk = table[b * m.table[0] + c * m.table[1]];
        if (blk < 0 || blk >= m.blocks) bad = true;
      }}
    }}
  }}
  if (bad) *flag = 1;
}}
"""


def _score(inst: SaInstance) -> str:
    c, wc, f32 = ctype(inst.dtype), ctype(inst.weights), ctype(D.ACL_FLOAT)
    return f"""
extern "C" __global__ void __launch_bounds__({SCORE_THREADS}) {inst.name("score")}(
    const SaMeta m, const {c.storage}* __restrict__ q, const {c.storage}* __restrict__ k,
    const {wc.storage}* __restrict__ w, const int* __restrict__ lq, const int* __restrict__ lk,
    const int* __restrict__ table, float* __restrict__ scores, const int* __restrict__ flag) {{
  __shared__ float qs[{MAX_SHARED_FLOATS}];
  __shared__ float ws[{MAX_SHARED_FLOATS // 16}];
  if (*flag) return;
  const long long tiles = (m.cap + {SCORE_THREADS} - 1) / {SCORE_THREADS};
  long long blk = blockIdx.x;
  const long long tile = blk % tiles;
  blk /= tiles;
  const long long n = blk % m.n2, r = blk / m.n2;
  long long b, s;
  sa_row(m, lq, r, b, s);
  const long long lqb = sa_q_len(m, lq, b), lkb = sa_k_len(m, lk, b);
  const long long seen = s < lqb ? sa_visible(m, s, lqb, lkb) : 0;
  const long long qo = sa_qoff(m, m.q, b, s, r), wo = sa_qoff(m, m.w, b, s, r);
  for (long long e = threadIdx.x; e < m.group * m.d; e += blockDim.x) {{
    const long long h = n * m.group + e / m.d, d = e % m.d;
    qs[e] = {load("q[qo + h * m.q[2] + d * m.q[3]]", c, f32)};
  }}
  for (long long h = threadIdx.x; h < m.group; h += blockDim.x) {{
    ws[h] = {load("w[wo + (n * m.group + h) * m.w[2]]", wc, f32)};
  }}
  __syncthreads();
  const long long j = tile * {SCORE_THREADS} + threadIdx.x;
  if (j >= m.cap) return;
  float score = -sa_inf();
  if (j < seen) {{
    const long long ko = sa_koff(m, m.k, table, b, sa_k_start(m, lk, b), j) + n * m.k[2];
    float total = 0.0f;
    for (long long h = 0; h < m.group; ++h) {{
      float dot = 0.0f;
      for (long long d = 0; d < m.d; ++d) dot = fmaf(qs[h * m.d + d], {load("k[ko + d * m.k[3]]", c, f32)}, dot);
      const float relu = (dot != dot || dot > 0.0f) ? dot : 0.0f;
      total = SA_ADD(total, SA_MUL(ws[h], relu));
    }}
    score = total != total ? -sa_inf() : total;
  }}
  scores[(r * m.n2 + n) * m.cap + j] = score;
}}
"""


def _emit(inst: SaInstance) -> str:
    c, f32 = ctype(inst.dtype), ctype(D.ACL_FLOAT)
    return f"""
extern "C" __global__ void __launch_bounds__({EMIT_THREADS}) {inst.name("emit")}(
    const SaMeta m, const float* __restrict__ scores, const int* __restrict__ order, const int* __restrict__ lq,
    int* __restrict__ out, {c.storage}* __restrict__ values, const int* __restrict__ flag) {{
  if (*flag) return;
  const long long total = m.rows * m.n2 * m.count;
  const long long step = (long long)gridDim.x * blockDim.x;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += step) {{
    const long long p = e % m.count, rn = e / m.count;
    const long long n = rn % m.n2, r = rn / m.n2;
    long long b, s;
    sa_row(m, lq, r, b, s);
    long long j = -1;
    float value = -sa_inf();
    if (p < m.cap) {{
      const long long cand = order[rn * m.cap + p];
      const float sc = scores[rn * m.cap + cand];
      if (sc > -sa_inf()) {{
        j = cand;
        value = sc;
      }}
    }}
    out[sa_qoff(m, m.o, b, s, r) + n * m.o[2] + p * m.o[3]] = (int)j;
    if (m.has_values) values[sa_qoff(m, m.o2, b, s, r) + n * m.o2[2] + p * m.o2[3]] = {store("value", f32, c)};
  }}
}}
"""


def _attend(inst: SaInstance) -> str:
    c, f32 = ctype(inst.dtype), ctype(D.ACL_FLOAT)
    t = SFA_THREADS
    rope = inst.dr > 0
    rope_load = (
        f"const long long qro = sa_qoff(m, m.qr, b, s, r) + h * m.qr[2];\n"
        f"  for (int d = tid; d < {inst.dr}; d += {t}) qrs[d] = {load('qr[qro + d * m.qr[3]]', c, f32)};"
        if rope
        else ""
    )
    rope_dot = (
        f"for (int d = 0; d < {inst.dr}; ++d) dot += qrs[d] * {load('kr[kro + d * m.kr[3]]', c, f32)};" if rope else ""
    )
    return f"""
{block_reduce_source("sfa_reduce", t)}
extern "C" __global__ void __launch_bounds__({t}) {inst.name("attend")}(
    const SaMeta m, const double scale_arg, const {c.storage}* __restrict__ q, const {c.storage}* __restrict__ k,
    const {c.storage}* __restrict__ v, const {c.storage}* __restrict__ qr, const {c.storage}* __restrict__ kr,
    const int* __restrict__ idx, const int* __restrict__ lq, const int* __restrict__ lk,
    const int* __restrict__ table, {c.storage}* __restrict__ out, float* __restrict__ smax,
    float* __restrict__ ssum, const int* __restrict__ flag) {{
  __shared__ float qs[{inst.d}];
  __shared__ float qrs[{max(inst.dr, 1)}];
  __shared__ float acc[{inst.d}];
  __shared__ float p_tile[{t}];
  __shared__ long long tok_tile[{t}];
  __shared__ float red[{t}];
  if (*flag) return;
  const int tid = threadIdx.x;
  const long long h = blockIdx.x % (m.n2 * m.group), r = blockIdx.x / (m.n2 * m.group);
  const long long n = h / m.group, gi = h % m.group;
  const float scale = (float)scale_arg;
  const float inf = sa_inf();
  long long b, s;
  sa_row(m, lq, r, b, s);
  const long long lqb = sa_q_len(m, lq, b), lkb = sa_k_len(m, lk, b);
  const long long limit = s < lqb ? sa_visible(m, s, lqb, lkb) : 0;
  const long long k0 = sa_k_start(m, lk, b);
  const long long qo = sa_qoff(m, m.q, b, s, r) + h * m.q[2];
  for (int d = tid; d < {inst.d}; d += {t}) {{
    qs[d] = {load("q[qo + d * m.q[3]]", c, f32)};
    acc[d] = 0.0f;
  }}
  {rope_load}
  // the entries read: the first ceil(limit / sparse_block), up to the first negative one
  const long long io = sa_qoff(m, m.idx, b, s, r) + n * m.idx[2];
  long long entries = limit > 0 ? (limit + m.sparse_block - 1) / m.sparse_block : 0;
  entries = entries < m.count ? entries : m.count;
  float first_neg = (float)entries;
  for (long long e = tid; e < entries; e += {t}) {{
    if (idx[io + e * m.idx[3]] < 0) first_neg = first_neg < (float)e ? first_neg : (float)e;
  }}
  __syncthreads();
  const float end_f = -sfa_reduce(-first_neg, red, true);  // the minimum (exact: entries < 2^24)
  entries = (long long)end_f;
  const long long per = m.sparse_block >= {t} ? 1 : {t} / m.sparse_block;  // entries per tile
  float run_max = -inf, run_sum = 0.0f;
  for (long long e0 = 0; e0 < entries; e0 += per) {{
    const long long e = e0 + tid / m.sparse_block, off = tid % m.sparse_block;
    long long tok = -1;
    if (tid < per * m.sparse_block && e < entries) {{
      const long long begin = (long long)idx[io + e * m.idx[3]] * m.sparse_block;
      const long long stop = begin + m.sparse_block < limit ? begin + m.sparse_block : limit;
      if (begin < limit && begin + off < stop) tok = begin + off;
    }}
    float score = -inf;
    if (tok >= 0) {{
      const long long ko = sa_koff(m, m.k, table, b, k0, tok) + n * m.k[2];
      float dot = 0.0f;
      for (int d = 0; d < {inst.d}; ++d) dot += qs[d] * {load("k[ko + d * m.k[3]]", c, f32)};
      {"const long long kro = sa_koff(m, m.kr, table, b, k0, tok) + n * m.kr[2];" if rope else ""}
      {rope_dot}
      score = scale * dot;
    }}
    const float tile_max = sfa_reduce(score, red, true);
    const float new_max = run_max > tile_max ? run_max : tile_max;
    if (new_max == -inf) continue;
    const float p = score == -inf ? 0.0f : acl_exp(score - new_max);
    const float alpha = run_max == -inf ? 0.0f : acl_exp(run_max - new_max);
    p_tile[tid] = p;
    tok_tile[tid] = tok;
    const float tile_sum = sfa_reduce(p, red, false);
    run_sum = run_sum * alpha + tile_sum;
    run_max = new_max;
    for (int d = tid; d < {inst.d}; d += {t}) {{
      float a = acc[d] * alpha;
      for (int u = 0; u < {t}; ++u) {{
        if (tok_tile[u] < 0) continue;
        const long long vo = sa_koff(m, m.v, table, b, k0, tok_tile[u]) + n * m.v[2];
        a += p_tile[u] * {load("v[vo + d * m.v[3]]", c, f32)};
      }}
      acc[d] = a;
    }}
    __syncthreads();
  }}
  const long long oo = sa_qoff(m, m.o, b, s, r) + h * m.o[2];
  for (int d = tid; d < {inst.d}; d += {t}) {{
    const float o = run_sum > 0.0f ? acc[d] / run_sum : 0.0f;
    out[oo + d * m.o[3]] = {store("o", f32, c)};
  }}
  if (smax != nullptr && tid == 0) {{
    const long long row = m.q_tnd ? r * m.stats[2] : b * m.stats[0] + s * m.stats[2];
    const long long so = row + n * m.stats[1] + gi * m.stats[3];
    smax[so] = run_sum > 0.0f ? run_max : 0.0f;
    ssum[so] = run_sum;
  }}
}}
"""


def sa_source(inst: SaInstance, which: str) -> str:
    """The source (prelude included) of ``inst``'s kernel ``which`` (check, score, emit, attend)."""
    body = {"check": _check, "score": _score, "emit": _emit, "attend": _attend}[which](inst)
    header = (
        f"// sparse attention ({which}): {inst.dtype.short}, weights {inst.weights.short}, D={inst.d}, Dr={inst.dr}"
    )
    return "\n".join([PRELUDE, header, SA_COMMON, body])

"""LightningIndexer's fast path: a key-tile score kernel and a one-block-per-row radix top-k select.

Tiled scores (``tiled``): one block of :data:`TILE_THREADS` threads takes :data:`TILE_KEYS` keys of one
(query row, key head) and every query head of its group, in rounds of :data:`ROUND_HEADS` heads. Thread
``t`` holds :data:`LANE_KEYS` keys (``t % 32 + 32 i``) and :data:`THREAD_HEADS` heads (``t / 32``'s slice of
the round) as a register tile of float32 accumulators; the round's queries sit in shared memory transposed
(``[d][head]``, a chunk of :data:`D_CHUNK` dims at a time) so a thread reads its heads' four-wide at once,
and each key row is read once per thread group from global memory (16-byte loads where the key rows are
contiguous and aligned: the ``vec`` variant). Every accumulator takes ``d = 0 .. D-1`` in order with
``fmaf``, as the plain score kernel does; ReLU, then the heads are summed in order ``h = 0 .. g-1`` with
single roundings, the running sum handed from one head slice to the next through shared memory. So every
score equals the reference's float32 value bit for bit (tensor-core products would reorder the sums:
they are not used). Keys past a row's visible limit are not read and score -inf, as are rows not
computed and NaN scores.

Select (``select``): one block of :data:`SELECT_THREADS` threads per (query row, key head) finds the
``k = min(sparseCount, cap)``-th largest score by a radix select over an order-preserving 32-bit key
(four 8-bit passes; each histogram keeps 16 copies, a lane's column, so a warp's increments of one bin
do not serialise), takes every key above it and the lowest-indexed ties at it (a block scan over
contiguous chunks gives each its slot, the ties their rank in index order), drops -inf, and sorts those ``<= k`` as
64-bit words (inverted key, index) with a bitonic sort: descending score, ties to the lower key, the
reference's order. It writes the indices (values: the scores in the query's dtype), then -1 (-inf).
The sort runs in shared memory up to :data:`SHARED_SORT` entries, else in a stream-ordered scratch.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Final

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.ctypes_map import ctype, load, store
from acl_rocm.kernels.prelude import PRELUDE
from acl_rocm.kernels.sparse_attention import SA_COMMON, SA_STRUCT

TILE_THREADS: Final = 128
LANE_KEYS: Final = 4
TILE_KEYS: Final = 32 * LANE_KEYS
THREAD_HEADS: Final = 16
ROUND_HEADS: Final = THREAD_HEADS * (TILE_THREADS // 32)
D_CHUNK: Final = 128
SELECT_THREADS: Final = 1024
"""The most threads of a select block (its shared scan array); :func:`select_threads` picks per row length."""
SHARED_SORT: Final = 4096
"""Sorted entries a select block keeps in shared memory (32 KiB); a larger sparseCount sorts in scratch."""
HIST_COPIES: Final = 16


@dataclass(frozen=True)
class LiInstance:
    """One compiled fast-path kernel set: the query/key dtype, the weights' dtype, 16-byte key loads or not."""

    dtype: D
    weights: D
    vec: bool

    @functools.cached_property
    def digest(self) -> str:
        """A short hash of the instance, the struct layout and the tile constants."""
        consts = (TILE_THREADS, LANE_KEYS, THREAD_HEADS, D_CHUNK, SELECT_THREADS, SHARED_SORT, HIST_COPIES)
        return hashlib.sha1(repr((self, SA_STRUCT, consts)).encode()).hexdigest()[:12]

    def name(self, which: str) -> str:
        """The ``extern "C"`` name of kernel ``which`` (tiled, select)."""
        v = "v" if self.vec else "s"
        return f"acl_li_{which}_{self.dtype.short}_{self.weights.short}_{v}_{self.digest}"


def _tiled(inst: LiInstance) -> str:
    c, wc, f32 = ctype(inst.dtype), ctype(inst.weights), ctype(D.ACL_FLOAT)
    lk, th = LANE_KEYS, THREAD_HEADS
    if inst.vec:  # the chunk's 8 dims of key i in one 16-byte load (D % 8 == 0, rows contiguous and aligned)
        k_decl = f"unsigned kw[{lk}][4];"
        k_load = """
        LiU4 u = {0u, 0u, 0u, 0u};
        if (ok[i]) u = *(const LiU4*)(k + ko[i] + d0 + dd);
        kw[i][0] = u.x;
        kw[i][1] = u.y;
        kw[i][2] = u.z;
        kw[i][3] = u.w;"""
        k_value = load(f"(({c.storage})((kw[i][e >> 1] >> ((e & 1) * 16)) & 0xffffu))", c, f32)
    else:
        k_decl = f"float kv[{lk}][8];"
        k_load = f"""
#pragma unroll
        for (int e = 0; e < 8; ++e)
          kv[i][e] = (ok[i] && dd + e < dn) ? {load("k[ko[i] + (d0 + dd + e) * m.k[3]]", c, f32)} : 0.0f;"""
        k_value = "kv[i][e]"
    return f"""
struct alignas(16) LiF4 {{ float x, y, z, w; }};
struct alignas(16) LiU4 {{ unsigned x, y, z, w; }};
extern "C" __global__ void __launch_bounds__({TILE_THREADS}) {inst.name("tiled")}(
    const SaMeta m, const {c.storage}* __restrict__ q, const {c.storage}* __restrict__ k,
    const {wc.storage}* __restrict__ w, const int* __restrict__ lq, const int* __restrict__ lk,
    const int* __restrict__ table, float* __restrict__ scores, const int* __restrict__ flag) {{
  __shared__ LiF4 qs4[{D_CHUNK * ROUND_HEADS // 4}];  // the round's queries, [d][head]
  __shared__ float ws[{ROUND_HEADS}];
  __shared__ float part[{TILE_KEYS}];  // the running head sum of each key
  float* qs = (float*)qs4;
  if (*flag) return;
  const long long tiles = (m.cap + {TILE_KEYS - 1}) / {TILE_KEYS};
  long long blk = blockIdx.x;
  const long long tile = blk % tiles;
  blk /= tiles;
  const long long n = blk % m.n2, r = blk / m.n2;
  long long b, s;
  sa_row(m, lq, r, b, s);
  const long long lqb = sa_q_len(m, lq, b), lkb = sa_k_len(m, lk, b);
  const long long seen = s < lqb ? sa_visible(m, s, lqb, lkb) : 0;
  const int tid = threadIdx.x, hg = tid / 32, kl = tid % 32;
  const long long j0 = tile * {TILE_KEYS};
  float* row = scores + (r * m.n2 + n) * m.cap;
  if (j0 >= seen) {{  // the whole tile is past the visible keys
    for (long long j = j0 + tid; j < j0 + {TILE_KEYS} && j < m.cap; j += {TILE_THREADS}) row[j] = -sa_inf();
    return;
  }}
  const long long k0 = sa_k_start(m, lk, b);
  long long ko[{lk}];
  bool ok[{lk}];
#pragma unroll
  for (int i = 0; i < {lk}; ++i) {{
    const long long j = j0 + kl + 32 * i;
    ok[i] = j < seen;
    ko[i] = ok[i] ? sa_koff(m, m.k, table, b, k0, j) + n * m.k[2] : 0;
  }}
  const long long qo = sa_qoff(m, m.q, b, s, r), wo = sa_qoff(m, m.w, b, s, r);
  for (long long h0 = 0; h0 < m.group; h0 += {ROUND_HEADS}) {{
    float acc[{th}][{lk}];
#pragma unroll
    for (int x = 0; x < {th}; ++x)
#pragma unroll
      for (int i = 0; i < {lk}; ++i) acc[x][i] = 0.0f;
    const bool busy = h0 + hg * {th} < m.group;
    for (long long d0 = 0; d0 < m.d; d0 += {D_CHUNK}) {{
      const long long dn = m.d - d0 < {D_CHUNK} ? m.d - d0 : {D_CHUNK};
      __syncthreads();  // the previous chunk's (or round's) readers are done
      for (int e = tid; e < {D_CHUNK * ROUND_HEADS}; e += {TILE_THREADS}) {{
        const long long dd = e / {ROUND_HEADS}, h = h0 + e % {ROUND_HEADS};
        qs[e] = (dd < dn && h < m.group) ? {load("q[qo + (n * m.group + h) * m.q[2] + (d0 + dd) * m.q[3]]", c, f32)}
                                         : 0.0f;
      }}
      if (d0 == 0) {{
        for (int x = tid; x < {ROUND_HEADS}; x += {TILE_THREADS}) {{
          const long long h = h0 + x;
          ws[x] = h < m.group ? {load("w[wo + (n * m.group + h) * m.w[2]]", wc, f32)} : 0.0f;
        }}
      }}
      __syncthreads();
      if (!busy) continue;
      for (long long dd = 0; dd < dn; dd += 8) {{
        {k_decl}
#pragma unroll
        for (int i = 0; i < {lk}; ++i) {{{k_load}
        }}
#pragma unroll
        for (int e = 0; e < 8; ++e) {{
          if (dd + e >= dn) break;
          float qv[{th}];
#pragma unroll
          for (int x = 0; x < {th // 4}; ++x) {{
            const LiF4 f = qs4[((dd + e) * {ROUND_HEADS} + hg * {th}) / 4 + x];
            qv[4 * x] = f.x;
            qv[4 * x + 1] = f.y;
            qv[4 * x + 2] = f.z;
            qv[4 * x + 3] = f.w;
          }}
          float kf[{lk}];
#pragma unroll
          for (int i = 0; i < {lk}; ++i) kf[i] = {k_value};
#pragma unroll
          for (int x = 0; x < {th}; ++x)
#pragma unroll
            for (int i = 0; i < {lk}; ++i) acc[x][i] = fmaf(qv[x], kf[i], acc[x][i]);
        }}
      }}
    }}
    // the heads in order: slice 0 of the round continues the previous round's sum, each slice the one before
    for (int g = 0; g < {TILE_THREADS // 32}; ++g) {{
      if (hg == g && busy) {{
#pragma unroll
        for (int i = 0; i < {lk}; ++i) {{
          const int kk = kl + 32 * i;
          float total = (h0 == 0 && g == 0) ? 0.0f : part[kk];
#pragma unroll
          for (int x = 0; x < {th}; ++x) {{
            if (h0 + g * {th} + x >= m.group) break;
            const float dot = acc[x][i];
            const float relu = (dot != dot || dot > 0.0f) ? dot : 0.0f;
            total = SA_ADD(total, SA_MUL(ws[g * {th} + x], relu));
          }}
          part[kk] = total;
        }}
      }}
      __syncthreads();
    }}
  }}
  for (int kk = tid; kk < {TILE_KEYS}; kk += {TILE_THREADS}) {{
    const long long j = j0 + kk;
    if (j >= m.cap) break;
    const float total = part[kk];
    row[j] = (j < seen && total == total) ? total : -sa_inf();
  }}
}}
"""


def _select(inst: LiInstance) -> str:
    c, f32 = ctype(inst.dtype), ctype(D.ACL_FLOAT)
    t = SELECT_THREADS
    return f"""
#if defined(__HIPCC_RTC__) || defined(__HIP_DEVICE_COMPILE__) || defined(__CUDA_ARCH__)
#define LI_ATOMIC_ADD(p, v) atomicAdd((p), (v))
#else
#define LI_ATOMIC_ADD(p, v) __atomic_fetch_add((p), (v), __ATOMIC_RELAXED)
#endif
// order-preserving key: a larger float gives a larger unsigned (-0 taken as +0)
ACL_DEV unsigned li_key(float f) {{
  const unsigned u = __float_as_uint(f == 0.0f ? 0.0f : f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}}
ACL_DEV float li_unkey(unsigned key) {{
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}}
extern "C" __global__ void __launch_bounds__({t}) {inst.name("select")}(
    const SaMeta m, const float* __restrict__ scores, const int* __restrict__ lq, int* __restrict__ out,
    {c.storage}* __restrict__ values, unsigned long long* __restrict__ scratch, const int* __restrict__ flag) {{
  __shared__ unsigned long long sbuf[{SHARED_SORT}];  // the histograms first, then the sorted words
  __shared__ unsigned counts[{t}];
  __shared__ unsigned above_counts[{t}];
  __shared__ unsigned sel[2];  // prefix, ties wanted
  if (*flag) return;
  const int tid = threadIdx.x, nt = blockDim.x;
  const long long rn = blockIdx.x, n = rn % m.n2, r = rn / m.n2;
  long long b, s;
  sa_row(m, lq, r, b, s);
  const float* row = scores + rn * m.cap;
  const long long want = m.count < m.cap ? m.count : m.cap;
  long long size = 1;
  while (size < want) size <<= 1;
  unsigned long long* buf = size <= {SHARED_SORT} ? sbuf : scratch + rn * size;
  unsigned* hist = (unsigned*)sbuf;  // [256 bins][{HIST_COPIES} copies]
  unsigned prefix = 0u, mask = 0u, need = (unsigned)want;
  if (want > 0) {{
    for (int shift = 24; shift >= 0; shift -= 8) {{
      for (int e = tid; e < {256 * HIST_COPIES}; e += nt) hist[e] = 0u;
      __syncthreads();
      const unsigned copy = (unsigned)(tid % {HIST_COPIES});
      for (long long j = tid; j < m.cap; j += nt) {{
        const unsigned u = li_key(row[j]);
        if ((u & mask) == prefix) LI_ATOMIC_ADD(&hist[((u >> shift) & 255u) * {HIST_COPIES} + copy], 1u);
      }}
      __syncthreads();
      if (tid < 256) {{
        unsigned total = 0u;
        for (int x = 0; x < {HIST_COPIES}; ++x) total += hist[tid * {HIST_COPIES} + (x + tid) % {HIST_COPIES}];
        counts[tid] = total;
      }}
      __syncthreads();
      for (int off = 1; off < 256; off <<= 1) {{  // counts[bin] = keys at bin or above (a suffix scan)
        const unsigned v = (tid < 256 && tid + off < 256) ? counts[tid + off] : 0u;
        __syncthreads();
        if (tid < 256) counts[tid] += v;
        __syncthreads();
      }}
      if (tid < 256) {{
        const unsigned above = tid < 255 ? counts[tid + 1] : 0u;
        if (counts[tid] >= need && above < need) {{
          sel[0] = prefix | ((unsigned)tid << shift);
          sel[1] = need - above;
        }}
      }}
      __syncthreads();
      prefix = sel[0];
      need = sel[1];
      mask |= 255u << shift;
      __syncthreads();
    }}
  }}
  // prefix: the want-th largest key; need: how many keys equal to it are taken (the lowest-indexed)
  const unsigned ninf = li_key(-sa_inf());
  const unsigned long long none = ~0ull;
  for (long long e = tid; e < size; e += nt) buf[e] = none;
  const long long chunk = (m.cap + nt - 1) / nt;
  const long long lo = tid * chunk, hi = lo + chunk < m.cap ? lo + chunk : m.cap;
  unsigned ties = 0u, highs = 0u;
  if (want > 0) {{
    for (long long j = lo; j < hi; ++j) {{
      const unsigned u = li_key(row[j]);
      ties += u == prefix ? 1u : 0u;
      highs += u > prefix ? 1u : 0u;
    }}
  }}
  __syncthreads();
  counts[tid] = ties;
  above_counts[tid] = highs;
  __syncthreads();
  for (int off = 1; off < nt; off <<= 1) {{  // inclusive prefix sums of both in index order
    const unsigned v = tid >= off ? counts[tid - off] : 0u;
    const unsigned v2 = tid >= off ? above_counts[tid - off] : 0u;
    __syncthreads();
    counts[tid] += v;
    above_counts[tid] += v2;
    __syncthreads();
  }}
  if (want > 0) {{
    const unsigned above = (unsigned)want - need;
    unsigned rank = counts[tid] - ties, slot = above_counts[tid] - highs;
    for (long long j = lo; j < hi; ++j) {{
      const unsigned u = li_key(row[j]);
      const unsigned long long word = ((unsigned long long)(~u) << 32) | (unsigned long long)(unsigned)j;
      if (u > prefix) {{
        buf[slot++] = word;
      }} else if (u == prefix) {{
        if (rank < need && u > ninf) buf[above + rank] = word;
        ++rank;
      }}
    }}
  }}
  __syncthreads();
  for (long long width = 2; width <= size; width <<= 1) {{  // bitonic sort, ascending words
    for (long long stride = width >> 1; stride > 0; stride >>= 1) {{
      for (long long i = tid; i < size / 2; i += nt) {{
        const long long x = 2 * i - (i & (stride - 1)), y = x + stride;
        const unsigned long long a = buf[x], c2 = buf[y];
        if ((a > c2) == ((x & width) == 0)) {{
          buf[x] = c2;
          buf[y] = a;
        }}
      }}
      __syncthreads();
    }}
  }}
  const long long oo = sa_qoff(m, m.o, b, s, r) + n * m.o[2];
  const long long vo = m.has_values ? sa_qoff(m, m.o2, b, s, r) + n * m.o2[2] : 0;
  for (long long p = tid; p < m.count; p += nt) {{
    const unsigned long long word = p < size ? buf[p] : none;
    const bool hit = p < want && word != none;
    out[oo + p * m.o[3]] = hit ? (int)(unsigned)(word & 0xffffffffull) : -1;
    if (m.has_values) {{
      const float value = hit ? li_unkey(~(unsigned)(word >> 32)) : -sa_inf();
      values[vo + p * m.o2[3]] = {store("value", f32, c)};
    }}
  }}
}}
"""


def select_threads(cap: int) -> int:
    """Threads of a select block for rows of ``cap`` scores: about 32 per thread, 256 to :data:`SELECT_THREADS`."""
    threads = 256
    while threads < SELECT_THREADS and threads * 32 < cap:
        threads *= 2
    return threads


def li_source(inst: LiInstance, which: str) -> str:
    """The source (prelude included) of ``inst``'s kernel ``which`` (tiled, select)."""
    body = {"tiled": _tiled, "select": _select}[which](inst)
    header = f"// LightningIndexer fast path ({which}): {inst.dtype.short}, weights {inst.weights.short}, {inst.vec=}"
    return "\n".join([PRELUDE, header, SA_COMMON, body])

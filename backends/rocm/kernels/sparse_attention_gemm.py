"""Kernel sources of SparseFlashAttention's GEMM path: gather the selected rows once, softmax rows, store.

The path (:mod:`acl_rocm.ops.sparse_attention_gemm`) turns each chunk of query rows ``[r0, r0 + rows)`` of a
call (temporaries reused chunk after chunk) into four launches around two batched vendor GEMMs, all on the
stream (R below: the chunk's rows; the temporaries are indexed from the chunk's first row):

1. ``gather``: one block per (query row ``r``, kv head ``n``) and tile of :data:`GATHER_SLOTS` slots of the
   row's ``cp`` slots. Slot ``c`` is token ``idx[e]·sparseBlockSize + c % sparseBlockSize`` of entry
   ``e = c / sparseBlockSize``, taken as SparseFlashAttention's rules take it (only the first
   ``ceil(limit / sparseBlockSize)`` entries, a negative entry ends the row, a token past the limit is
   skipped); the block writes the slot's token (or -1) to ``toks`` and the key row followed by the rope
   row to ``kc`` ([R·N2, cp, ep] in the query's dtype, zero where the slot is empty and in the pad
   columns up to ``ep``), and, when ``value`` is not ``key``, the value row to ``vc`` ([R·N2, cp, D]).
   Blocks past the key blocks pack ``query`` and ``queryRope`` into ``qc`` ([R·N1, ep]). A thread copies
   ``vec`` elements at a time (16-byte words where every operand's layout allows, else 4 bytes, else one
   element through the strides), the tile's (slot, word) pairs flattened so its loads issue together.
2. GEMM ``S = qc·kcᵀ`` per (r, n) (fp32 scores [R·N1, cp]).
3. ``softmax``: a block per (query row, query head): ``p = exp(scale·S - max) / sum`` over the row's
   filled slots (0 elsewhere), written as two parts in the query's dtype, ``P = bits(p)`` and
   ``Plo = bits(p - P)`` (a 16-bit P alone loses the class's accuracy where the output cancels), and
   softmaxMax / softmaxSum.
4. GEMM ``[O; Olo] = [P; Plo]·V`` per (r, n) (P and Plo stacked as 2·G rows: one GEMM; fp32 [R·N2, 2, G, D];
   V is ``kc``'s first D columns when ``value`` is ``key``).
5. ``store``: a block per (query row, query head) writes ``O + Olo`` in the output's dtype and layout.

Every kernel reads the run's flag first (the check kernel of :mod:`acl_rocm.kernels.sparse_attention`) and
writes nothing when it is set, so a refused call leaves the output as it was.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Final

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.ctypes_map import ctype, load, store
from acl_rocm.kernels.prelude import PRELUDE
from acl_rocm.kernels.reduction import block_reduce_source
from acl_rocm.kernels.sparse_attention import SA_COMMON, SA_STRUCT

GATHER_THREADS: Final = 256
GATHER_SLOTS: Final = 16
"""Slots (gathered key rows) per gather block."""
QUERY_ROWS: Final = 8
"""(query row, head) pairs a packing block of the gather launch copies."""
SOFTMAX_THREADS: Final = 256
STORE_THREADS: Final = 128
PAD: Final = 8
"""Slots per row and gathered row widths are multiples of this (16-byte leading dimensions for the GEMMs)."""


def padded(n: int) -> int:
    """``n`` rounded up to a multiple of :data:`PAD`."""
    return -(-n // PAD) * PAD


@dataclass(frozen=True)
class SfaGemmInstance:
    """One compiled set: the dtype, D, Dr, whether ``value`` is gathered apart from ``key``, elements per copy."""

    dtype: D
    d: int
    dr: int
    separate_v: bool
    vec: int = 1
    """Elements a thread copies at once (1, 2 or 8: 16-byte words), checked by the caller: unit last strides, the
    other strides, the offsets, D and Dr multiples of it, the tensors aligned to it."""

    @functools.cached_property
    def digest(self) -> str:
        """A short hash of the instance, the tiles and the struct layout."""
        shape = (self, SA_STRUCT, GATHER_THREADS, GATHER_SLOTS, QUERY_ROWS, SOFTMAX_THREADS, STORE_THREADS, PAD)
        return hashlib.sha1(repr(shape).encode()).hexdigest()[:12]

    def name(self, which: str) -> str:
        """The ``extern "C"`` name of kernel ``which`` (gather, softmax, store)."""
        tail = f"{'v' if self.separate_v else 'k'}{self.vec}"
        return f"acl_sfa_{which}_{self.dtype.short}_d{self.d}_r{self.dr}_{tail}_{self.digest}"


def _word(inst: SfaGemmInstance, src: str, off: str, stride: str, w: str) -> str:
    """An expression: word ``w`` (``vec`` elements) of a row of ``src`` starting at element ``off``."""
    if inst.vec == 1:
        return f"Word{{{src}[{off} + (long long)({w}) * {stride}]}}"
    return f"*(const Word*)({src} + {off} + (long long)({w}) * {inst.vec})"


def _gather(inst: SfaGemmInstance) -> str:
    c = ctype(inst.dtype)
    t, d, dr, vec = GATHER_THREADS, inst.d, inst.dr, inst.vec
    ep = padded(d + dr)
    kw, rw, width = d // vec, (d + dr) // vec, ep // vec  # words: key, key + rope, the padded row
    slots, qrows = GATHER_SLOTS, QUERY_ROWS
    q_rope = f"else if (w < {rw}) x = {_word(inst, 'qr', 'qr_s[j]', 'm.qr[3]', f'w - {kw}')};" if dr else ""
    k_rope = f"else if (w < {rw}) x = {_word(inst, 'kr', 'kro_s[j]', 'm.kr[3]', f'w - {kw}')};" if dr else ""
    v_copy = (
        f"""
  #pragma unroll 4
  for (int i = tid; i < {slots * kw}; i += {t}) {{
    const int j = i / {kw}, w = i % {kw};
    const long long cs = c0 + j;
    if (cs >= cp) continue;
    Word x = zero;
    if (ko_s[j] >= 0) x = {_word(inst, "v", "vo_s[j]", "m.v[3]", "w")};
    *(Word*)(vc + (rn * cp + cs) * {d} + (long long)w * {vec}) = x;
  }}"""
        if inst.separate_v
        else ""
    )
    return f"""
typedef AclVec<{c.storage}, {vec}> Word;

extern "C" __global__ void __launch_bounds__({t}) {inst.name("gather")}(
    const SaMeta m, const long long cp, const long long kv_blocks, const long long r0, const long long rows,
    const {c.storage}* __restrict__ q, const {c.storage}* __restrict__ k, const {c.storage}* __restrict__ v,
    const {c.storage}* __restrict__ qr, const {c.storage}* __restrict__ kr, const int* __restrict__ idx,
    const int* __restrict__ lq, const int* __restrict__ lk, const int* __restrict__ table,
    {c.storage}* __restrict__ qc, {c.storage}* __restrict__ kc, {c.storage}* __restrict__ vc,
    int* __restrict__ toks, const int* __restrict__ flag) {{
  __shared__ long long ko_s[{slots}];
  __shared__ long long kro_s[{slots}];
  __shared__ long long vo_s[{slots}];
  __shared__ long long q_s[{qrows}];
  __shared__ long long qr_s[{qrows}];
  __shared__ long long red[{t}];
  if (*flag) return;
  const int tid = threadIdx.x;
  const long long n1 = m.n2 * m.group;
  Word zero;
  for (int u = 0; u < {vec}; ++u) zero.v[u] = ({c.storage})0;
  long long b, s;
  if ((long long)blockIdx.x >= kv_blocks) {{  // pack (query row, head) pairs: [q | qRope | 0]
    const long long first = ((long long)blockIdx.x - kv_blocks) * {qrows};
    if (tid < {qrows} && first + tid < rows * n1) {{
      const long long rh = first + tid, r = r0 + rh / n1, h = rh % n1;
      sa_row(m, lq, r, b, s);
      q_s[tid] = sa_qoff(m, m.q, b, s, r) + h * m.q[2];
      qr_s[tid] = {"sa_qoff(m, m.qr, b, s, r) + h * m.qr[2]" if dr else "0"};
    }}
    __syncthreads();
    #pragma unroll 4
    for (int i = tid; i < {qrows * width}; i += {t}) {{
      const int j = i / {width}, w = i % {width};
      if (first + j >= rows * n1) continue;
      Word x = zero;
      if (w < {kw}) x = {_word(inst, "q", "q_s[j]", "m.q[3]", "w")};
      {q_rope}
      *(Word*)(qc + (first + j) * {ep} + (long long)w * {vec}) = x;
    }}
    return;
  }}
  const long long tiles = (cp + {slots} - 1) / {slots};
  const long long rn = (long long)blockIdx.x / tiles, c0 = ((long long)blockIdx.x % tiles) * {slots};
  const long long r = r0 + rn / m.n2, n = rn % m.n2;  // rn: the chunk's (row, kv head)
  sa_row(m, lq, r, b, s);
  const long long lqb = sa_q_len(m, lq, b), lkb = sa_k_len(m, lk, b);
  const long long limit = s < lqb ? sa_visible(m, s, lqb, lkb) : 0;
  const long long k0 = sa_k_start(m, lk, b);
  const long long io = sa_qoff(m, m.idx, b, s, r) + n * m.idx[2];
  long long entries = limit > 0 ? (limit + m.sparse_block - 1) / m.sparse_block : 0;
  entries = entries < m.count ? entries : m.count;
  long long scan = (c0 + {slots} - 1) / m.sparse_block + 1;  // the entries this tile's slots depend on
  scan = scan < entries ? scan : entries;
  long long first_neg = scan;
  #pragma unroll 8
  for (long long i = tid; i < scan; i += {t}) {{
    if (idx[io + i * m.idx[3]] < 0 && i < first_neg) first_neg = i;
  }}
  red[tid] = first_neg;
  __syncthreads();
  for (int w = {t} / 2; w > 0; w >>= 1) {{
    if (tid < w && red[tid + w] < red[tid]) red[tid] = red[tid + w];
    __syncthreads();
  }}
  const long long end = red[0];
  if (tid < {slots}) {{
    const long long cs = c0 + tid;
    long long tok = -1;
    if (cs < cp) {{
      const long long en = cs / m.sparse_block, off = cs % m.sparse_block;
      if (en < end) {{
        const long long begin = (long long)idx[io + en * m.idx[3]] * m.sparse_block;
        const long long stop = begin + m.sparse_block < limit ? begin + m.sparse_block : limit;
        if (begin < limit && begin + off < stop) tok = begin + off;
      }}
      toks[rn * cp + cs] = (int)tok;
    }}
    ko_s[tid] = tok >= 0 ? sa_koff(m, m.k, table, b, k0, tok) + n * m.k[2] : -1;
    kro_s[tid] = {"tok >= 0 ? sa_koff(m, m.kr, table, b, k0, tok) + n * m.kr[2] : 0" if dr else "0"};
    vo_s[tid] = {"tok >= 0 ? sa_koff(m, m.v, table, b, k0, tok) + n * m.v[2] : 0" if inst.separate_v else "0"};
  }}
  __syncthreads();
  // (slot, word) flattened: every thread's loads of a tile issue together
  #pragma unroll 4
  for (int i = tid; i < {slots * width}; i += {t}) {{
    const int j = i / {width}, w = i % {width};
    const long long cs = c0 + j;
    if (cs >= cp) continue;
    const long long ko = ko_s[j];
    Word x = zero;
    if (ko >= 0) {{
      if (w < {kw}) x = {_word(inst, "k", "ko", "m.k[3]", "w")};
      {k_rope}
    }}
    *(Word*)(kc + (rn * cp + cs) * {ep} + (long long)w * {vec}) = x;
  }}{v_copy}
}}
"""


def _softmax(inst: SfaGemmInstance) -> str:
    c, f32 = ctype(inst.dtype), ctype(D.ACL_FLOAT)
    t = SOFTMAX_THREADS
    return f"""
{block_reduce_source("sfa_gemm_reduce", t)}
extern "C" __global__ void __launch_bounds__({t}) {inst.name("softmax")}(
    const SaMeta m, const long long cp, const long long r0, const double scale_arg, const float* __restrict__ scores,
    const int* __restrict__ toks, const int* __restrict__ lq, {c.storage}* __restrict__ probs,
    float* __restrict__ smax, float* __restrict__ ssum, const int* __restrict__ flag) {{
  __shared__ float red[{t}];
  if (*flag) return;
  const int tid = threadIdx.x;
  const long long n1 = m.n2 * m.group;
  const long long rh = blockIdx.x, rl = rh / n1, r = r0 + rl, h = rh % n1;  // rl: the row within the chunk
  const long long n = h / m.group, gi = h % m.group;
  const float scale = (float)scale_arg;
  const float inf = sa_inf();
  const float* row = scores + rh * cp;
  const int* tok = toks + (rl * m.n2 + n) * cp;
  float mx = -inf;
  #pragma unroll 4
  for (long long i = tid; i < cp; i += {t}) {{
    if (tok[i] >= 0) {{
      const float x = scale * row[i];
      mx = x > mx ? x : mx;
    }}
  }}
  mx = sfa_gemm_reduce(mx, red, true);
  float sum = 0.0f;
  if (mx != -inf) {{
    #pragma unroll 4
    for (long long i = tid; i < cp; i += {t}) {{
      if (tok[i] >= 0) sum += acl_exp(scale * row[i] - mx);
    }}
  }}
  sum = sfa_gemm_reduce(sum, red, false);
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  {c.storage}* hi = probs + ((rl * m.n2 + n) * 2 * m.group + gi) * cp;  // [R*N2, 2, G, cp]: P then Plo
  {c.storage}* lo = hi + m.group * cp;
  #pragma unroll 4
  for (long long i = tid; i < cp; i += {t}) {{
    const float p = (tok[i] >= 0 && sum > 0.0f) ? acl_exp(scale * row[i] - mx) * inv : 0.0f;
    const {c.storage} bits = {store("p", f32, c)};
    const float rest = p - {load("bits", c, f32)};
    hi[i] = bits;
    lo[i] = {store("rest", f32, c)};
  }}
  if (smax != nullptr && tid == 0) {{
    long long b, s;
    sa_row(m, lq, r, b, s);
    const long long at = m.q_tnd ? r * m.stats[2] : b * m.stats[0] + s * m.stats[2];
    const long long so = at + n * m.stats[1] + gi * m.stats[3];
    smax[so] = sum > 0.0f ? mx : 0.0f;
    ssum[so] = sum;
  }}
}}
"""


def _store(inst: SfaGemmInstance) -> str:
    c, f32 = ctype(inst.dtype), ctype(D.ACL_FLOAT)
    return f"""
extern "C" __global__ void __launch_bounds__({STORE_THREADS}) {inst.name("store")}(
    const SaMeta m, const long long r0, const float* __restrict__ acc, const int* __restrict__ lq,
    {c.storage}* __restrict__ out,
    const int* __restrict__ flag) {{
  if (*flag) return;
  const long long n1 = m.n2 * m.group;
  const long long rh = blockIdx.x, rl = rh / n1, r = r0 + rl, h = rh % n1;
  long long b, s;
  sa_row(m, lq, r, b, s);
  const long long oo = sa_qoff(m, m.o, b, s, r) + h * m.o[2];
  const float* hi = acc + ((rl * m.n2 + h / m.group) * 2 * m.group + h % m.group) * {inst.d};  // [R*N2, 2, G, D]
  const float* lo = hi + m.group * {inst.d};
  for (int d = threadIdx.x; d < {inst.d}; d += {STORE_THREADS}) {{
    const float o = hi[d] + lo[d];
    out[oo + d * m.o[3]] = {store("o", f32, c)};
  }}
}}
"""


def sfa_gemm_source(inst: SfaGemmInstance, which: str) -> str:
    """The source (prelude included) of ``inst``'s kernel ``which`` (gather, softmax, store)."""
    body = {"gather": _gather, "softmax": _softmax, "store": _store}[which](inst)
    header = f"// SparseFlashAttention GEMM path ({which}): {inst.dtype.short}, D={inst.d}, Dr={inst.dr}"
    return "\n".join([PRELUDE, header, SA_COMMON, body])

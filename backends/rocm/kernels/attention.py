"""Attention-family kernel sources: a tiled online-softmax attention row kernel and a rotary-pair kernel.

Attention: one block of :data:`ATTN_THREADS` threads computes one query row of one head of one batch
(grid x = query row, y = query head, z = batch). It walks the keys in tiles of one key per thread: each
thread forms its key's score ``scale * (q . k + pse)`` (or -inf where the key is masked out), the block
reduces the tile's maximum, rescales its running sum and output accumulator (the online softmax), and
each thread then owns output dimensions ``d`` and adds ``p_j * v[j, d]`` over the tile. Fully masked rows
end with max -inf and sum 0 and write zeros. A sink (one value-less logit per query head:
FlashAttentionScoreV3, FlashAttentionVarLenScoreV5, FusedInferAttentionScoreV5) starts the online softmax
at max = sink, sum = 1 instead of -inf, 0, so it enters the max, the sum and every probability's
denominator; a fully masked row then writes zeros with max = sink, sum = 1. Every tensor is addressed
through four strides (batch, head, row, column) passed in :class:`AttentionMeta`, so any layout (BSH,
SBH, BSND, BNSD, padded or transposed views) and any broadcast mask or pse needs no copy. fp16/bf16
inputs compute in fp32; fp32 inputs compute in fp64 (the reference is fp64, and the H200's fp64 is fast).

Rotary embedding: one thread per output *pair*. Every mode pairs two outputs (o1, o2) that read the
same two inputs (i1, i2): ``out[o1] = x[i1]*cos[o1] - x[i2]*sin[o1]``, ``out[o2] = x[i2]*cos[o2] +
x[i1]*sin[o2]``; both inputs are loaded before either store, so mode 0 can run in place
(ApplyRotaryPosEmb).
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, fields
from typing import Final

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.ctypes_map import ctype, load, store
from acl_rocm.kernels.prelude import PRELUDE
from acl_rocm.kernels.reduction import block_reduce_source

ATTN_THREADS: Final = 128
"""Threads per attention block, and keys per tile (one key per thread)."""
ROPE_THREADS: Final = 256
Strides = tuple[int, int, int, int]
_ZERO4: Strides = (0, 0, 0, 0)


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(cls: type) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(cls))
    return names


class PackedMeta:
    """A dataclass of ints and int tuples that a kernel receives as int64s in declaration order."""

    def values(self) -> list[int]:
        """The fields flattened in declaration order (the C struct's layout)."""
        flat: list[int] = []
        for name in _field_names(type(self)):
            item = getattr(self, name)
            if type(item) is tuple:
                flat.extend(item)
            else:
                flat.append(item)
        return [int(x) for x in flat]


@dataclass(frozen=True)
class AttentionMeta(PackedMeta):
    """Everything one attention launch needs besides pointers and the scale (packed as int64s, in order).

    Stride quadruples are in elements: (batch, head, query row, key column or head dim).
    """

    q: Strides = _ZERO4
    k: Strides = _ZERO4
    v: Strides = _ZERO4
    o: Strides = _ZERO4
    mask: Strides = _ZERO4
    pse: Strides = _ZERO4
    smax: Strides = _ZERO4
    ssum: Strides = _ZERO4
    lse: Strides = _ZERO4
    group: int = 1
    rows: int = 0
    kv_len: int = 0
    has_mask: int = 0
    has_pse: int = 0
    has_window: int = 0
    win_lo: int = 0
    win_hi: int = 0
    shift: int = 0
    has_sink: int = 0
    sink_step: int = 0
    """Element stride between query heads' sinks."""


@dataclass(frozen=True)
class RopeMeta(PackedMeta):
    """One rotary launch: pairs, the three outer dims, strides of x/cos/sin/out (4 dims), D/2 and mode."""

    pairs: int
    shape: tuple[int, int, int]
    x: Strides
    c: Strides
    s: Strides
    o: Strides
    half: int
    mode: int


def meta_struct(name: str, cls: type) -> str:
    """The C declaration of a meta dataclass: one ``long long`` (or array) per field, in order."""
    members = []
    for f in fields(cls):
        kind = str(f.type)
        width = 4 if kind == "Strides" else 3 if kind.startswith("tuple") else 0
        members.append(f"long long {f.name}[{width}];" if width else f"long long {f.name};")
    return f"struct {name} {{ " + " ".join(members) + " };"


ATTN_STRUCT: Final = meta_struct("AttnMeta", AttentionMeta)
ROPE_STRUCT: Final = meta_struct("RopeMeta", RopeMeta)
ATTN_META_LEN: Final = len(AttentionMeta().values())
ROPE_META_LEN: Final = 1 + 3 + 4 * 4 + 2


@dataclass(frozen=True)
class AttentionInstance:
    """What makes one compiled attention kernel distinct: the tensors' dtype, the head dim, the sink's dtype."""

    dtype: D
    head_dim: int
    sink: D | None = None
    """The sink tensor's dtype (fp32: FlashAttentionScoreV3 / VarLenV5, bf16: FusedInferV5); None: no sink."""

    @property
    def acc(self) -> str:
        """The C type scores, softmax and accumulators use (fp64 for fp32 inputs, else fp32)."""
        return "double" if self.dtype == D.ACL_FLOAT else "float"

    @functools.cached_property
    def kernel_name(self) -> str:
        """A stable ``extern "C"`` name for this instance."""
        digest = hashlib.sha1(repr((self, ATTN_STRUCT)).encode()).hexdigest()[:12]
        sink = self.sink.short if self.sink is not None else "nosink"
        return f"acl_attn_{self.dtype.short}_d{self.head_dim}_{sink}_{digest}"


@dataclass(frozen=True)
class RopeInstance:
    """One compiled rotary kernel: the dtype of x, cos, sin and out."""

    dtype: D
    vec: int = 1
    """Pairs a thread rotates at once (> 1: half mode, unit-stride aligned rows, ``vec``-element vector accesses)."""

    @functools.cached_property
    def kernel_name(self) -> str:
        """A stable ``extern "C"`` name for this instance."""
        digest = hashlib.sha1(repr((self, ROPE_STRUCT)).encode()).hexdigest()[:12]
        return f"acl_rope_{self.dtype.short}_{digest}"


def attention_source(inst: AttentionInstance) -> str:
    """The complete source (prelude included) of one attention row kernel."""
    c = ctype(inst.dtype)
    s = c.storage
    acc = inst.acc
    acc_c = ctype(D.ACL_DOUBLE if acc == "double" else D.ACL_FLOAT)

    def ld(expr: str) -> str:
        return f"(({acc})({load(expr, c, c)}))"

    sink_c = ctype(inst.sink if inst.sink is not None else D.ACL_FLOAT)
    sink_load = load("sink[h * m.sink_step]", sink_c, sink_c)

    body = f"""
typedef {acc} acc_t;
#define HEAD_DIM {inst.head_dim}
#define THREADS {ATTN_THREADS}
{ATTN_STRUCT}

ACL_DEV acc_t attn_inf() {{ return (acc_t)__int_as_float(0x7f800000); }}

// block-wide reduction through shared memory (every thread gets the result)
{block_reduce_source("block_reduce", "THREADS", "acc_t")}
extern "C" __global__ void __launch_bounds__(THREADS) {inst.kernel_name}(
    const AttnMeta m, const double scale_arg,
    const {s}* __restrict__ q, const {s}* __restrict__ k, const {s}* __restrict__ v,
    const {s}* __restrict__ pse, const unsigned char* __restrict__ mask,
    {s}* __restrict__ out, float* __restrict__ smax, float* __restrict__ ssum, float* __restrict__ lse,
    const {sink_c.storage}* __restrict__ sink) {{
  __shared__ acc_t q_row[HEAD_DIM];
  __shared__ acc_t acc[HEAD_DIM];
  __shared__ acc_t p_tile[THREADS];
  __shared__ acc_t red[THREADS];
  const int tid = threadIdx.x;
  const long long i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const long long hk = h / m.group;
  const acc_t scale = (acc_t)scale_arg;
  const acc_t inf = attn_inf();
  {s}* o_row = out + b * m.o[0] + h * m.o[1] + i * m.o[2];
  if (i >= m.rows) {{  // past the actual query length: zeros, and an invalid (+inf) lse
    for (int d = tid; d < HEAD_DIM; d += THREADS) o_row[d * m.o[3]] = {store("(acc_t)0", acc_c, c)};
    if (lse != nullptr && tid == 0) lse[b * m.lse[0] + h * m.lse[1] + i * m.lse[2]] = __int_as_float(0x7f800000);
    return;
  }}
  const {s}* q_ptr = q + b * m.q[0] + h * m.q[1] + i * m.q[2];
  for (int d = tid; d < HEAD_DIM; d += THREADS) {{
    q_row[d] = {ld("q_ptr[d * m.q[3]]")};
    acc[d] = (acc_t)0;
  }}
  __syncthreads();
  const {s}* k_head = k + b * m.k[0] + hk * m.k[1];
  const {s}* v_head = v + b * m.v[0] + hk * m.v[1];
  const unsigned char* mask_row = m.has_mask ? mask + b * m.mask[0] + h * m.mask[1] + i * m.mask[2] : nullptr;
  const {s}* pse_row = m.has_pse ? pse + b * m.pse[0] + h * m.pse[1] + i * m.pse[2] : nullptr;
  acc_t run_max = -inf, run_sum = (acc_t)0;
  if (m.has_sink) {{  // the sink: one more logit, with no value row
    run_max = (acc_t)({sink_load});
    run_sum = (acc_t)1;
  }}
  for (long long j0 = 0; j0 < m.kv_len; j0 += THREADS) {{
    const long long j = j0 + tid;
    bool keep = j < m.kv_len;
    if (keep && m.has_mask) keep = mask_row[j * m.mask[3]] == 0;
    if (keep && m.has_window) {{
      const long long off = j - i - m.shift;
      keep = off >= m.win_lo && off <= m.win_hi;
    }}
    acc_t score = -inf;
    if (keep) {{
      const {s}* k_row = k_head + j * m.k[2];
      acc_t dot = (acc_t)0;
      #pragma unroll 8
      for (int d = 0; d < HEAD_DIM; ++d) dot += q_row[d] * {ld("k_row[d * m.k[3]]")};
      if (m.has_pse) dot += {ld("pse_row[j * m.pse[3]]")};
      score = scale * dot;
    }}
    const acc_t tile_max = block_reduce(score, red, true);
    const acc_t new_max = run_max > tile_max ? run_max : tile_max;
    if (new_max == -inf) continue;  // nothing kept yet (uniform across the block)
    const acc_t p = score == -inf ? (acc_t)0 : acl_exp(score - new_max);
    const acc_t alpha = run_max == -inf ? (acc_t)0 : acl_exp(run_max - new_max);
    p_tile[tid] = p;
    const acc_t tile_sum = block_reduce(p, red, false);  // its barriers also publish p_tile
    run_sum = run_sum * alpha + tile_sum;
    run_max = new_max;
    const long long rest = m.kv_len - j0;
    const int count = rest < THREADS ? (int)rest : THREADS;
    for (int d = tid; d < HEAD_DIM; d += THREADS) {{
      const {s}* v_col = v_head + j0 * m.v[2] + d * m.v[3];
      acc_t a = acc[d] * alpha;
      for (int t = 0; t < count; ++t) a += p_tile[t] * {ld("v_col[t * m.v[2]]")};
      acc[d] = a;
    }}
    __syncthreads();  // p_tile is rewritten by the next tile
  }}
  for (int d = tid; d < HEAD_DIM; d += THREADS) {{
    const acc_t r = run_sum > (acc_t)0 ? acc[d] / run_sum : (acc_t)0;
    o_row[d * m.o[3]] = {store("r", acc_c, c)};
  }}
  if (smax != nullptr && tid < 8) {{
    smax[b * m.smax[0] + h * m.smax[1] + i * m.smax[2] + tid * m.smax[3]] = (float)run_max;
    ssum[b * m.ssum[0] + h * m.ssum[1] + i * m.ssum[2] + tid * m.ssum[3]] = (float)run_sum;
  }}
  if (lse != nullptr && tid == 0) {{
    lse[b * m.lse[0] + h * m.lse[1] + i * m.lse[2]] =
        run_sum > (acc_t)0 ? (float)(run_max + acl_log(run_sum)) : __int_as_float(0x7f800000);
  }}
}}
"""
    return "\n".join([PRELUDE, f"// attention row kernel: {inst.dtype.short}, D={inst.head_dim}, acc {acc}", body])


def rope_source(inst: RopeInstance) -> str:
    """The complete source (prelude included) of one rotary-pair kernel.

    One launch rotates two tensors with the same cos/sin (ApplyRotaryPosEmb's query and key): pairs
    ``[0, m.pairs)`` are x's, the next ``m2.pairs`` are x2's (none when m2.pairs is 0).
    """
    c = ctype(inst.dtype)
    s = c.storage
    val = c.value

    def ld(expr: str) -> str:
        return load(expr, c, c)

    body = f"""
{ROPE_STRUCT}

// I: the index type of the decomposition (unsigned int when every pair index fits: 64-bit division is a
// long software sequence, and a decode step's rotary launch is a few thousand pairs)
template <class I>
ACL_DEV void rope_pair(const RopeMeta& m, const I idx, const {s}* x, const {s}* __restrict__ cs,
                       const {s}* __restrict__ sn, {s}* out) {{
  typedef {val} T;
  const I half = (I)m.half, n2 = (I)m.shape[2], n1 = (I)m.shape[1];
  const long long p = (long long)(idx % half);
  I rest = idx / half;
  const long long a2 = (long long)(rest % n2);
  rest /= n2;
  const long long a1 = (long long)(rest % n1);
  const long long a0 = (long long)(rest / n1);
  long long o1, o2, i1, i2;
  if (m.mode == 1) {{  // interleave: (2p, 2p+1)
    o1 = 2 * p; o2 = o1 + 1; i1 = o1; i2 = o2;
  }} else if (m.mode == 2) {{  // quarter: (r, r+D/4) in each half
    const long long quarter = m.half / 2;
    o1 = (p / quarter) * m.half + p % quarter; o2 = o1 + quarter; i1 = o1; i2 = o2;
  }} else if (m.mode == 3) {{  // interleave-half: x (2p, 2p+1) to out (p, p+D/2)
    o1 = p; o2 = p + m.half; i1 = 2 * p; i2 = i1 + 1;
  }} else {{  // half: (p, p+D/2)
    o1 = p; o2 = p + m.half; i1 = o1; i2 = o2;
  }}
  const long long bx = a0 * m.x[0] + a1 * m.x[1] + a2 * m.x[2];
  const long long bc = a0 * m.c[0] + a1 * m.c[1] + a2 * m.c[2];
  const long long bs = a0 * m.s[0] + a1 * m.s[1] + a2 * m.s[2];
  const long long bo = a0 * m.o[0] + a1 * m.o[1] + a2 * m.o[2];
  const T x1 = {ld("x[bx + i1 * m.x[3]]")};
  const T x2 = {ld("x[bx + i2 * m.x[3]]")};
  const T r1 = x1 * {ld("cs[bc + o1 * m.c[3]]")} - x2 * {ld("sn[bs + o1 * m.s[3]]")};
  const T r2 = x2 * {ld("cs[bc + o2 * m.c[3]]")} + x1 * {ld("sn[bs + o2 * m.s[3]]")};
  out[bo + o1 * m.o[3]] = {store("r1", c, c)};
  out[bo + o2 * m.o[3]] = {store("r2", c, c)};
}}

extern "C" __global__ void __launch_bounds__({ROPE_THREADS}) {inst.kernel_name}(
    const RopeMeta m, const {s}* x, const {s}* __restrict__ cs, const {s}* __restrict__ sn, {s}* out,
    const RopeMeta m2, const {s}* x2, {s}* out2) {{
  const long long step = (long long)gridDim.x * (long long)blockDim.x;
  const long long total = m.pairs + m2.pairs;
  if (total + step <= 0xffffffffLL) {{  // every index (and the one past the last step) fits 32 bits
    const unsigned first = (unsigned)m.pairs;
    for (unsigned idx = blockIdx.x * blockDim.x + threadIdx.x; idx < (unsigned)total; idx += (unsigned)step) {{
      if (idx < first) rope_pair<unsigned>(m, idx, x, cs, sn, out);
      else rope_pair<unsigned>(m2, idx - first, x2, cs, sn, out2);
    }}
    return;
  }}
  for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += step) {{
    if (idx < m.pairs) rope_pair<long long>(m, idx, x, cs, sn, out);
    else rope_pair<long long>(m2, idx - m.pairs, x2, cs, sn, out2);
  }}
}}
"""
    if inst.vec > 1:
        body = _rope_vec_body(inst)
    return "\n".join([PRELUDE, f"// rotary pair kernel: {inst.dtype.short} vec={inst.vec}", body])


def _rope_vec_body(inst: RopeInstance) -> str:
    """The half-mode kernel rotating ``vec`` adjacent pairs a thread with vector loads and stores (the caller
    checked unit last strides, ``vec``-element alignment of every row start, ``half % vec == 0``)."""
    c = ctype(inst.dtype)
    s, val, vec = c.storage, c.value, inst.vec
    vt = f"AclVec<{s}, {vec}>"

    def ld(expr: str) -> str:
        return load(expr, c, c)

    return f"""
{ROPE_STRUCT}

template <class I>
ACL_DEV void rope_vec(const RopeMeta& m, const I idx, const {s}* x, const {s}* __restrict__ cs,
                      const {s}* __restrict__ sn, {s}* out) {{
  typedef {val} T;
  const I hv = (I)(m.half / {vec}), n2 = (I)m.shape[2], n1 = (I)m.shape[1];
  const I p = (idx % hv) * (I){vec};
  I rest = idx / hv;
  const I a2 = rest % n2;
  rest /= n2;
  const I a1 = rest % n1;
  const I a0 = rest / n1;
  const long long h = m.half;
  const long long bx = (long long)a0 * m.x[0] + (long long)a1 * m.x[1] + (long long)a2 * m.x[2] + (long long)p;
  const long long bc = (long long)a0 * m.c[0] + (long long)a1 * m.c[1] + (long long)a2 * m.c[2] + (long long)p;
  const long long bs = (long long)a0 * m.s[0] + (long long)a1 * m.s[1] + (long long)a2 * m.s[2] + (long long)p;
  const long long bo = (long long)a0 * m.o[0] + (long long)a1 * m.o[1] + (long long)a2 * m.o[2] + (long long)p;
  const {vt} x1 = *reinterpret_cast<const {vt}*>(x + bx);
  const {vt} x2 = *reinterpret_cast<const {vt}*>(x + bx + h);
  const {vt} c1 = *reinterpret_cast<const {vt}*>(cs + bc);
  const {vt} c2 = *reinterpret_cast<const {vt}*>(cs + bc + h);
  const {vt} s1 = *reinterpret_cast<const {vt}*>(sn + bs);
  const {vt} s2 = *reinterpret_cast<const {vt}*>(sn + bs + h);
  {vt} r1, r2;
#pragma unroll
  for (int e = 0; e < {vec}; ++e) {{
    const T u = {ld("x1.v[e]")}, w = {ld("x2.v[e]")};
    const T a = u * {ld("c1.v[e]")} - w * {ld("s1.v[e]")};
    const T b = w * {ld("c2.v[e]")} + u * {ld("s2.v[e]")};
    r1.v[e] = {store("a", c, c)};
    r2.v[e] = {store("b", c, c)};
  }}
  *reinterpret_cast<{vt}*>(out + bo) = r1;
  *reinterpret_cast<{vt}*>(out + bo + h) = r2;
}}

extern "C" __global__ void __launch_bounds__({ROPE_THREADS}) {inst.kernel_name}(
    const RopeMeta m, const {s}* x, const {s}* __restrict__ cs, const {s}* __restrict__ sn, {s}* out,
    const RopeMeta m2, const {s}* x2, {s}* out2) {{
  const long long step = (long long)gridDim.x * (long long)blockDim.x;
  const long long first = m.pairs / {vec}, total = first + m2.pairs / {vec};
  if (total + step <= 0xffffffffLL) {{  // 32-bit index decomposition (offsets stay 64-bit)
    for (unsigned idx = blockIdx.x * blockDim.x + threadIdx.x; idx < (unsigned)total; idx += (unsigned)step) {{
      if (idx < (unsigned)first) rope_vec<unsigned>(m, idx, x, cs, sn, out);
      else rope_vec<unsigned>(m2, idx - (unsigned)first, x2, cs, sn, out2);
    }}
    return;
  }}
  for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += step) {{
    if (idx < first) rope_vec<long long>(m, idx, x, cs, sn, out);
    else rope_vec<long long>(m2, idx - first, x2, cs, sn, out2);
  }}
}}
"""

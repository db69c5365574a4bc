"""The short-cache decode kernel: one launch, one block per (batch, kv head), the warps' partials merged in the block.

Decode attention over a short cache (the Qwen3 decode attends over a ~100-key capacity under a mask) is
latency bound: the split-KV path's second launch (the combine) and its global partials cost more than the
keys themselves. Here one block per (batch, kv head) reads the whole cache: every warp is cut into lane groups
of :func:`lanes_per_row` lanes, each lane owning :data:`ELEMS` consecutive dims of a row (one 16-byte load of
fp16/bf16 where the layout allows), so a warp reads ``WARP / LPR`` keys per load instruction. A lane group walks
its keys ``rows`` at a time (every K and V row of the tile in flight together, the mask bytes with them under
``eager``, else first, the next tile's mask bytes under the current tile's rows), forms the group's scores with
the query heads in registers (a reduction over the lane group's lanes only) and keeps its own fp32 online softmax
(max, sum, output accumulator per query head). At the end the lane groups of a warp merge by xor shuffles, the
warps through shared memory, and the block writes the output, FusedInferAttentionScore's ``softmaxLse`` and the
sink (one value-less logit per query head) the way the split kernel's single-split branch does. No global
partials, no atomics, no second kernel.

Under ``bpdl`` the launch is programmatic: the kernel ``ACL_PDL_WAIT()``s before its first global read and lets
its successor be scheduled at once.

Under ``ACL_DECODE_CONFIG=two,wide`` the same kernel is the split path's split kernel (16-byte loads in place of
the split kernel's ``D / WARP`` elements a lane): one block per (batch, kv head, split) over the split's keys,
writing the split kernel's partial record for the combine kernel when there are several splits.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Final

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.attention_decode import (
    BLOCK_ROWS,
    BLOCK_THREADS,
    DECODE_STRUCT,
    MAX_DECODE_BATCH,
    merge_warps,
    nz_row_load,
    online_softmax_tile,
    page_lookup,
    page_tile_lookup,
)
from acl_rocm.kernels.ctypes_map import ctype, load, store
from acl_rocm.kernels.prelude import PRELUDE
from acl_rocm.kernels.reduction import SHUFFLE_XOR

ELEMS: Final = 8
"""Dims a lane owns (16 bytes of fp16/bf16: one vector load)."""
BLOCK_SMEM: Final = 32 * 1024
"""Shared bytes at most for the warps' partial outputs (NWARPS x GROUP x D floats): the threads shrink to fit."""


def lanes_per_row(head_dim: int) -> int:
    """Lanes that hold one K / V row: ``ceil(D / ELEMS)`` rounded up to a power of two."""
    need = max(1, -(-head_dim // ELEMS))
    return 1 << (need - 1).bit_length()


def block_threads(requested: int, warp: int, group: int, head_dim: int) -> int:
    """``requested`` threads, halved while the warps' partials would pass :data:`BLOCK_SMEM` (one warp at least)."""
    threads = max(warp, requested)
    while threads > warp and (threads // warp) * group * head_dim * 4 > BLOCK_SMEM:
        threads //= 2
    return threads


def block_rows(requested: int, group: int, threads: int = 256) -> int:
    """Keys per lane group's tile: ``requested``, fewer above group 2 or 256 threads (K / V registers: 8 x rows).

    nvcc 13 for sm_90, bf16 D128 group 2: 256 threads x 8 rows take 214 registers, 512 x 4 127, 512 x 8 spill.
    """
    return max(1, min(requested, 16 // max(group, 1), 2048 // max(threads, 1)))


@dataclass(frozen=True)
class BlockInstance:
    """One compiled short-cache decode kernel."""

    dtype: D
    head_dim: int
    group: int
    vector: bool
    """K / V rows take 16-byte loads (unit dim stride, row strides and addresses whole 8-element vectors)."""
    sink: D | None = None
    """The sink's dtype (None: no sink)."""
    threads: int = BLOCK_THREADS
    rows: int = BLOCK_ROWS
    eager: bool = True
    """K and V rows load with the tile's mask bytes (rows the mask hides are zeroed once they land)."""
    share: int = 1
    """Blocks per (batch, kv head, split), each with ``group`` of the kv head's ``group x share`` query heads
    (more blocks stream the cache; each reads the kv head's rows, the others from L2)."""
    paged: str = ""
    """Paged KV through the block table (:class:`~acl_rocm.kernels.attention_decode.DecodeInstance`'s field)."""
    ptile: int = 0
    """Paged: one table entry per ``ptile`` of a lane group's ``rows`` (a power of two dividing ``rows``; a span of
    ``RPL x ptile`` consecutive keys of the warp's tile, read a tile ahead), not one per key row; needs every span
    inside one page (:func:`~acl_rocm.kernels.attention_decode.page_tiles`). 0: a table entry per key row."""
    pdl: bool = False
    """Launched programmatically (``bpdl``): ``ACL_PDL_WAIT()`` before the first global read, then
    ``ACL_PDL_LAUNCH_DEPENDENTS()`` (both nothing off sm_90+, where the launch is a plain one)."""

    @functools.cached_property
    def digest(self) -> str:
        """A short hash of the instance and the struct layout (kernel names stay stable across runs)."""
        text = repr((self, DECODE_STRUCT, MAX_DECODE_BATCH, ELEMS))
        if not self.pdl:
            text = text.replace(", pdl=False)", ")", 1)
        if not self.ptile:  # hashes as before page tiles existed: the source is byte-identical
            text = text.replace(", ptile=0)", ")", 1)
        if not self.paged:  # a dense instance hashes as before paging existed: its source is byte-identical
            text = text.replace(", paged='')", ")", 1)
        return hashlib.sha1(text.encode()).hexdigest()[:12]

    @property
    def name(self) -> str:
        """The kernel's ``extern "C"`` name."""
        return f"acl_decode_block_{self.dtype.short}_d{self.head_dim}_g{self.group}_{self.digest}"


def _paged_rows(paged: str, ptile: int = 0) -> str:
    """C source of a paged instance (empty for a dense one): the table lookup and, for NZ, the tiled row load."""
    if not paged:
        return ""
    nz = ""
    if paged == "nz":  # an NZ row: dim d at (d / 16) * stride + d % 16 (tiles contiguous; EL divides 16)
        nz = nz_row_load("blk_row", "sub", "EL", "sub * EL", "sub * EL + e", "live && sub * EL < HEAD_DIM")
    return page_lookup() + (page_tile_lookup() if ptile else "") + nz


def block_source(inst: BlockInstance) -> str:
    """The source (prelude included) of ``inst``'s kernel."""
    c = ctype(inst.dtype)
    f32 = ctype(D.ACL_FLOAT)
    sink_c = ctype(inst.sink if inst.sink is not None else D.ACL_FLOAT)
    sink_logit = load("sink[h * m.sink_step]", sink_c, f32)
    lpr = lanes_per_row(inst.head_dim)
    heads = (
        "  const st* k_head = k + b * m.k[0] + hk * m.k[1];\n  const st* v_head = v + b * m.v[0] + hk * m.v[1];\n"
        if not inst.paged
        else "  const st* k_head = k + hk * m.k[1];\n  const st* v_head = v + hk * m.v[1];\n"
        "  const int* tab = table + b * pm.tb;\n"
    )
    paged_params = ", const PageMeta pm, const int* __restrict__ table, int* flag" if inst.paged else ""
    row_k, row_v = (
        (f"{kv}_head + key * m.{kv}[2], m.{kv}[3]" for kv in "kv")
        if not inst.paged
        else (
            f"{kv}_head + {kv}b[t / PSPAN] + (long long)(grp + (t % PSPAN) * RPL) * m.{kv}[2], m.{kv}[3]" for kv in "kv"
        )
        if inst.ptile
        else (f"dec_page({kv}_head, m.{kv}, key, hi, tab, pm, flag), m.{kv}[3]" for kv in "kv")
    )
    # ptile: the first tile's table entries before the loop (one a span of PSPAN rows), each next tile's under the
    # current tile's rows
    first_page = this_page = next_page = ""
    if inst.ptile:
        spans = "for (int s = 0; s < NSPAN; ++s) "
        spans += "page_tile({j} + (long long)s * PSPAN * RPL, hi, tab, pm, m.k, m.v, flag, pkb[s], pvb[s]);"
        first_page = (
            f"\n#define PSPAN {inst.ptile}\n#define NSPAN (ROWS / PSPAN)\n  long long pkb[NSPAN], pvb[NSPAN];\n"
            f"  #pragma unroll\n  {spans.format(j='lo + (long long)warp * RPL * ROWS')}"
        )
        this_page = "    long long kb[NSPAN], vb[NSPAN];\n    #pragma unroll\n    for (int s = 0; s < NSPAN; ++s) {\n"
        this_page += "      kb[s] = pkb[s];\n      vb[s] = pvb[s];\n    }\n"
        next_page = f"    #pragma unroll\n    {spans.format(j='base + step')}\n"
    # bpdl: nothing the predecessor wrote is read before its grid completes; the successor may be scheduled then
    pdl_wait = "  ACL_PDL_WAIT();\n  ACL_PDL_LAUNCH_DEPENDENTS();\n" if inst.pdl else ""
    body = f"""
// short-cache decode attention, a block per (batch, kv head): {inst.dtype.short}, D={inst.head_dim}, group {inst.group}
// (of {inst.group * inst.share} query heads a kv head)
#define HEAD_DIM {inst.head_dim}
#define GROUP {inst.group}
#define SHARE {inst.share}
#define THREADS {inst.threads}
#define WARP ACL_WARP_SIZE
#define NWARPS (THREADS / WARP)
#define LPR {lpr}
#define RPL (WARP / LPR)
#define EL {ELEMS}
#define ROWS {inst.rows}
#define VECTOR_LOADS {int(inst.vector)}
#define EAGER_KV {int(inst.eager)}
{DECODE_STRUCT}
struct DecodeLens {{ int n[{MAX_DECODE_BATCH}]; }};
typedef {c.storage} st;
typedef {sink_c.storage} sink_t;

ACL_DEV float blk_inf() {{ return __uint_as_float(0x7f800000u); }}

// the sink joins a finished (max, sum, output) as one more logit with no value: o and l rescaled
ACL_DEV void blk_sink(float logit, float& best, float& l, float& o) {{
  const float top = logit > best ? logit : best;
  const float r = best == -blk_inf() ? 0.0f : acl_exp(best - top);
  o *= r;
  l = l * r + acl_exp(logit - top);
  best = top;
}}

// the sum over the LPR lanes that hold one row (xor offsets below LPR stay inside the lane group)
ACL_DEV float row_sum(float x) {{
  #pragma unroll
  for (int o = LPR / 2; o > 0; o >>= 1) x += ACL_SHFL_XOR(x, o);
  return x;
}}

// the EL dims this lane owns of one row (zeros past the head dim and where ``live`` is false)
ACL_DEV void blk_row(const st* row, long long stride, int sub, bool live, AclVec<st, EL>& out) {{
#if VECTOR_LOADS
  if (live && sub * EL < HEAD_DIM) out = *(const AclVec<st, EL>*)(row + sub * EL);
  else {{
    #pragma unroll
    for (int e = 0; e < EL; ++e) out.v[e] = (st)0;
  }}
#else
  #pragma unroll
  for (int e = 0; e < EL; ++e) {{
    const int d = sub * EL + e;
    out.v[e] = live && d < HEAD_DIM ? row[(long long)d * stride] : (st)0;
  }}
#endif
}}
{_paged_rows(inst.paged, inst.ptile)}
// bit t of kept[g]: head g keeps key j + t * RPL (below hi, not masked); returns their union. Every mask byte
// of the tile loads at once; a mask broadcast over the heads (head stride 0) loads once for the group.
ACL_DEV unsigned blk_keep(const DecodeMeta& m, const unsigned char* mask_kv, long long j, long long hi,
                          unsigned* kept) {{
  unsigned rows = 0;
  #pragma unroll
  for (int g = 0; g < GROUP; ++g) {{
    if (g > 0 && m.mask[1] == 0) {{
      kept[g] = kept[0];
      continue;
    }}
    unsigned bits = 0;
    #pragma unroll
    for (int t = 0; t < ROWS; ++t) {{
      const long long key = j + (long long)t * RPL;
      const bool in = key < hi;
      bool keep = in;
      if (m.has_mask) {{
        const unsigned char hidden = in ? mask_kv[g * m.mask[1] + key * m.mask[3]] : (unsigned char)1;
        keep = hidden == 0;
      }}
      bits |= (unsigned)keep << t;
    }}
    kept[g] = bits;
    rows |= bits;
  }}
  return rows;
}}

extern "C" __global__ void __launch_bounds__(THREADS) {inst.name}(
    const DecodeMeta m, const DecodeLens lens, const double scale_arg,
    const st* __restrict__ q, const st* __restrict__ k, const st* __restrict__ v,
    const unsigned char* __restrict__ mask, float* __restrict__ part, st* __restrict__ out,
    float* __restrict__ lse, const sink_t* __restrict__ sink{paged_params}) {{
  __shared__ float sm_m[NWARPS][GROUP];
  __shared__ float sm_l[NWARPS][GROUP];
  __shared__ float sm_o[NWARPS][GROUP][HEAD_DIM];
  const int tid = threadIdx.x, lane = tid % WARP, warp = tid / WARP;
  const int sub = lane % LPR, grp = lane / LPR;
  unsigned blk = blockIdx.x;  // (batch, kv head, split) flattened to x; one split unless ``wide`` (two path)
  const long long split = blk % (unsigned)m.splits;
  blk /= (unsigned)m.splits;
  // hb: the block's GROUP query heads hb * GROUP ..; SHARE blocks share a kv head (hb / SHARE)
  const long long hb = blk % (unsigned)(m.nkv * SHARE), b = blk / (unsigned)(m.nkv * SHARE);
  const long long hk = hb / SHARE;
  const long long len = lens.n[b];
  const long long lo = split * m.chunk;
  const long long hi = lo + m.chunk < len ? lo + m.chunk : len;
  const float scale = (float)scale_arg;
  const float inf = blk_inf();
{pdl_wait}  float qr[GROUP][EL], acc[GROUP][EL], mx[GROUP], sum[GROUP];
  #pragma unroll
  for (int g = 0; g < GROUP; ++g) {{
    const st* q_row = q + b * m.q[0] + (hb * GROUP + g) * m.q[1];
    #pragma unroll
    for (int e = 0; e < EL; ++e) {{
      const int d = sub * EL + e;
      qr[g][e] = d < HEAD_DIM ? {load("q_row[(long long)d * m.q[3]]", c, f32)} : 0.0f;
      acc[g][e] = 0.0f;
    }}
    mx[g] = -inf;
    sum[g] = 0.0f;
  }}
{heads}  const unsigned char* mask_kv = m.has_mask ? mask + b * m.mask[0] + hb * GROUP * m.mask[1] : nullptr;
  // a warp's tile: RPL lane groups x ROWS keys (lane group grp takes keys base + grp + t * RPL); tiles NWARPS apart
  const long long step = (long long)NWARPS * RPL * ROWS;
  unsigned kept[GROUP];
  unsigned rows = blk_keep(m, mask_kv, lo + (long long)warp * RPL * ROWS + grp, hi, kept);{first_page}
  for (long long base = lo + (long long)warp * RPL * ROWS; base < hi; base += step) {{  // the same in every lane
    const long long j = base + grp;
    unsigned cur[GROUP];
    #pragma unroll
    for (int g = 0; g < GROUP; ++g) cur[g] = kept[g];
    const unsigned live = rows;
    AclVec<st, EL> kr[ROWS], vr[ROWS];
{this_page}    #pragma unroll
    for (int t = 0; t < ROWS; ++t) {{
      const long long key = j + (long long)t * RPL;
      const bool load_row = EAGER_KV ? key < hi : ((live >> t) & 1u) != 0u;
      blk_row({row_k}, sub, load_row, kr[t]);
    }}
    #pragma unroll
    for (int t = 0; t < ROWS; ++t) {{
      const long long key = j + (long long)t * RPL;
      const bool load_row = EAGER_KV ? key < hi : ((live >> t) & 1u) != 0u;
      blk_row({row_v}, sub, load_row, vr[t]);
    }}
    rows = blk_keep(m, mask_kv, j + step, hi, kept);
{next_page}#if EAGER_KV
    // a row no head keeps may hold anything (an unwritten cache slot): its value must not reach the sums
    #pragma unroll
    for (int t = 0; t < ROWS; ++t) {{
      if (!((live >> t) & 1u)) {{
        #pragma unroll
        for (int e = 0; e < EL; ++e) vr[t].v[e] = (st)0;
      }}
    }}
#endif
    float sc[GROUP][ROWS];
    #pragma unroll
    for (int g = 0; g < GROUP; ++g) {{
      #pragma unroll
      for (int t = 0; t < ROWS; ++t) {{
        float dot = 0.0f;
        #pragma unroll
        for (int e = 0; e < EL; ++e) dot += qr[g][e] * {load("kr[t].v[e]", c, f32)};
        sc[g][t] = row_sum(dot);
      }}
    }}
{online_softmax_tile("ROWS", "EL", "the same in the lane group; no shuffle below", load("vr[t].v[e]", c, f32))}
  }}
  // the warp's lane groups merge (xor offsets from LPR up: lanes of the same sub, other groups), then the warps
  #pragma unroll
  for (int g = 0; g < GROUP; ++g) {{
    float best = mx[g];
    #pragma unroll
    for (int o = LPR; o < WARP; o <<= 1) {{
      const float y = ACL_SHFL_XOR(best, o);
      best = y > best ? y : best;
    }}
    const float r = mx[g] == -inf ? 0.0f : acl_exp(mx[g] - best);
    float l = sum[g] * r;
    #pragma unroll
    for (int o = LPR; o < WARP; o <<= 1) l += ACL_SHFL_XOR(l, o);
    #pragma unroll
    for (int e = 0; e < EL; ++e) {{
      float a = acc[g][e] * r;
      #pragma unroll
      for (int o = LPR; o < WARP; o <<= 1) a += ACL_SHFL_XOR(a, o);
      acc[g][e] = a;
    }}
    if (lane == 0) {{
      sm_m[warp][g] = best;
      sm_l[warp][g] = l;
    }}
    if (grp == 0) {{
      #pragma unroll
      for (int e = 0; e < EL; ++e) {{
        if (sub * EL + e < HEAD_DIM) sm_o[warp][g][sub * EL + e] = acc[g][e];
      }}
    }}
  }}
  __syncthreads();
{merge_warps("hb")}
    if (m.splits == 1) {{  // the whole cache in this block: the output itself
      if (m.has_sink) blk_sink({sink_logit}, best, l, o);
      const float res = l > 0.0f ? o / l : 0.0f;
      out[b * m.o[0] + h * m.o[1] + d * m.o[3]] = {store("res", f32, c)};
      if (lse != nullptr && d == 0) lse[b * m.lse[0] + h * m.lse[1]] = l > 0.0f ? best + acl_log(l) : inf;
    }} else {{  // the split kernel's partial record (o, max, sum) for the combine kernel
      float* rec = part + ((b * m.nq + h) * m.splits + split) * (HEAD_DIM + 2);
      rec[d] = o;
      if (d == 0) {{
        rec[HEAD_DIM] = best;
        rec[HEAD_DIM + 1] = l;
      }}
    }}
  }}
}}
"""
    return "\n".join([PRELUDE, SHUFFLE_XOR, body])

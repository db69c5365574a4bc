"""The split-KV decode path's faster combine (``ACL_DECODE_CONFIG=...,pcomb``): the same bits, fewer round trips.

The plain combine (:func:`~acl_rocm.kernels.attention_decode.decode_source`'s ``dec_combine``) takes one query head
at a time: a thread per split's (max, sum), two block reductions, then a thread per dim walking the splits eight
loads at a time. The fused kernel's last block runs it once per head of its GQA group, one after another, so each
head pays its own chain of L2 round trips after the last split finished: the tail that made ``fused`` lose.

``dec_combine_heads`` combines ``nh`` heads at once: a warp per head reads every split's (max, sum) with one load
each per lane and reduces them with shuffles (no block barrier), then every thread takes a pair of dims of a head
and sums the splits with sixteen of them in flight. The arithmetic is the plain combine's, in its order: the max
is exact; the sum is each warp-sized run of splits butterflied, the runs added in order (what ``block_reduce``
does with a thread a split); the weights and the split-ordered sums of the outputs are the same expressions. So
the output and the lse are bit-identical to the plain combine's (the tests check it).
"""

from __future__ import annotations

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.ctypes_map import CType, ctype, store


def fast_combine_source(c: CType, sink_logit: str, max_splits: int) -> str:
    """C source of ``dec_combine_heads`` (after ``dec_combine``'s helpers: ``dec_sink``, ``DecodeMeta``, ``st``).

    ``c``: the output's C type; ``sink_logit``: the C expression of head ``h``'s sink logit as float;
    ``max_splits``: the most splits a call has (at most the block's threads).
    """
    f32 = ctype(D.ACL_FLOAT)
    return f"""
#define MAX_SPLITS {max_splits}
#define COMB_RUNS (THREADS / WARP)  // warp-sized runs of splits (MAX_SPLITS <= THREADS)
#define COMB_PAIR (HEAD_DIM % 2 == 0 ? 2 : 1)  // dims a thread sums together
// heads h0 .. h0 + nh - 1 of batch b from their splits' partials, bit for bit what dec_combine writes for each;
// ``sm_w``: nh x MAX_SPLITS weights, ``sm_t``: nh sums (shared); ``P`` as for dec_combine
template <typename P>
ACL_DEV void dec_combine_heads(const DecodeMeta& m, P part, st* __restrict__ out, float* __restrict__ lse,
                               const sink_t* __restrict__ sink, long long b, long long h0, int nh, float* sm_w,
                               float* sm_t) {{
  const int tid = threadIdx.x, lane = tid % WARP, warp = tid / WARP;
  const float inf = dec_inf();
  for (int hh = warp; hh < nh; hh += NWARPS) {{
    const long long h = h0 + hh;
    P rec = part + (b * m.nq + h) * m.splits * (HEAD_DIM + 2);
    float ms[COMB_RUNS], ls[COMB_RUNS];
    float best = -inf;
    #pragma unroll
    for (int r = 0; r < COMB_RUNS; ++r) {{  // every load first: one round trip
      const int s = r * WARP + lane;
      ms[r] = s < m.splits ? rec[s * (HEAD_DIM + 2) + HEAD_DIM] : -inf;
      ls[r] = s < m.splits ? rec[s * (HEAD_DIM + 2) + HEAD_DIM + 1] : 0.0f;
    }}
    #pragma unroll
    for (int r = 0; r < COMB_RUNS; ++r) best = ms[r] > best ? ms[r] : best;
    #pragma unroll
    for (int o = WARP / 2; o > 0; o >>= 1) {{
      const float y = ACL_SHFL_XOR(best, o);
      best = y > best ? y : best;
    }}
    float l = 0.0f;
    #pragma unroll
    for (int r = 0; r < COMB_RUNS; ++r) {{  // block_reduce's order: each run butterflied, the runs added in turn
      float x = ms[r] != -inf ? ls[r] * acl_exp(ms[r] - best) : 0.0f;
      #pragma unroll
      for (int o = WARP / 2; o > 0; o >>= 1) x = x + ACL_SHFL_XOR(x, o);
      l = r == 0 ? x : l + x;
    }}
    float top = best, total = l;  // with the sink, if any
    if (m.has_sink) {{
      float none = 0.0f;
      dec_sink({sink_logit}, top, total, none);
    }}
    #pragma unroll
    for (int r = 0; r < COMB_RUNS; ++r) {{
      const int s = r * WARP + lane;
      if (s < m.splits) sm_w[hh * MAX_SPLITS + s] = ms[r] != -inf ? acl_exp(ms[r] - top) / total : 0.0f;
    }}
    if (lane == 0) {{
      sm_t[hh] = l;
      if (lse != nullptr) lse[b * m.lse[0] + h * m.lse[1]] = total > 0.0f ? top + acl_log(total) : inf;
    }}
  }}
  __syncthreads();
  for (int idx = tid; idx < nh * (HEAD_DIM / COMB_PAIR); idx += THREADS) {{
    const int hh = idx / (HEAD_DIM / COMB_PAIR), d = (idx % (HEAD_DIM / COMB_PAIR)) * COMB_PAIR;
    const long long h = h0 + hh;
    P rec = part + (b * m.nq + h) * m.splits * (HEAD_DIM + 2) + d;
    const float* w = sm_w + hh * MAX_SPLITS;
    float o[COMB_PAIR];
    #pragma unroll
    for (int e = 0; e < COMB_PAIR; ++e) o[e] = 0.0f;
    if (sm_t[hh] > 0.0f) {{
      #pragma unroll 16
      for (int s = 0; s < m.splits; ++s) {{
        #pragma unroll
        for (int e = 0; e < COMB_PAIR; ++e) o[e] += rec[s * (HEAD_DIM + 2) + e] * w[s];
      }}
    }}
    #pragma unroll
    for (int e = 0; e < COMB_PAIR; ++e) out[b * m.o[0] + h * m.o[1] + (d + e) * m.o[3]] = {store("o[e]", f32, c)};
  }}
  __syncthreads();  // sm_w and sm_t are free again
}}
"""

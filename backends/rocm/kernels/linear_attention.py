"""Kernel sources of the linear-attention family: RecurrentGatedDeltaRule's check and recurrence kernels.

The recurrence ``S <- α S diag(e^{gk}); S <- S + β (v - S k) kᵀ; o = S (scale·q)`` treats every row
``i`` of a state (one value dim) on its own: row i needs only its own entries, ``v[i]`` and the
token's ``k`` and ``q``. So one warp carries one state row through all of a sequence's tokens in
registers (each lane holds ``ceil(Dk / warp)`` columns, interleaved so a warp's loads coalesce),
with two warp all-reduces (xor shuffles) per token: ``S k`` and ``S q``. A block of
:data:`RGDR_THREADS` threads takes :data:`ROWS_PER_BLOCK` rows of one (sequence, value head); the
grid is flattened to x over (sequence, value head, row block). Each block finds its sequence's first
token by summing the lengths before it (device data, so no host round trip), reads the initial row
from the slot of the sequence's last accepted token, and writes ``out`` and the state row of every
token's slot (bf16), keeping the carried state in float32.

The check kernel (one block) sets the run's device flag when a length is outside [1, 8], the
lengths do not sum to T, an accepted count is outside [1, L] or a slot is outside the pool; the
recurrence kernel reads the flag first and writes nothing when it is set.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Final

from acl_core.dtypes import DataType as D
from acl_core.spec.ops.linear_attention import MAX_SEQ
from acl_rocm.kernels.attention import PackedMeta, meta_struct
from acl_rocm.kernels.ctypes_map import ctype, load, store
from acl_rocm.kernels.prelude import PRELUDE
from acl_rocm.kernels.reduction import SHUFFLE_XOR

RGDR_THREADS: Final = 128
ROWS_PER_BLOCK: Final = 16
"""State rows (value dims) one block carries; each warp takes every (threads / warp)-th of them."""
CHECK_THREADS: Final = 256


@dataclass(frozen=True)
class RgdrMeta(PackedMeta):
    """One call's geometry (int64s in order; strides in elements)."""

    tokens: int = 0
    batch: int = 0
    nv: int = 0
    dv: int = 0
    blocks: int = 0
    group: int = 1
    row_blocks: int = 1
    q_t: int = 0
    q_n: int = 0
    q_d: int = 0
    k_t: int = 0
    k_n: int = 0
    k_d: int = 0
    v_t: int = 0
    v_n: int = 0
    v_d: int = 0
    beta_t: int = 0
    beta_n: int = 0
    g_t: int = 0
    g_n: int = 0
    gk_t: int = 0
    gk_n: int = 0
    gk_d: int = 0
    s_b: int = 0
    s_n: int = 0
    s_i: int = 0
    s_j: int = 0
    o_t: int = 0
    o_n: int = 0
    o_d: int = 0
    len_step: int = 0
    slot_step: int = 0
    acc_step: int = 0
    has_g: int = 0
    has_gk: int = 0


RGDR_STRUCT: Final = meta_struct("RgdrMeta", RgdrMeta)


@dataclass(frozen=True)
class RgdrInstance:
    """One compiled pair of kernels: the key dim (registers per lane depend on it)."""

    dk: int

    @functools.cached_property
    def digest(self) -> str:
        """A short hash of the instance and the struct layout."""
        return hashlib.sha1(repr((self, RGDR_STRUCT, RGDR_THREADS, ROWS_PER_BLOCK)).encode()).hexdigest()[:12]

    @property
    def step_name(self) -> str:
        """The recurrence kernel's ``extern "C"`` name."""
        return f"acl_rgdr_step_dk{self.dk}_{self.digest}"

    @property
    def check_name(self) -> str:
        """The check kernel's ``extern "C"`` name."""
        return f"acl_rgdr_check_{self.digest}"


def rgdr_source(inst: RgdrInstance, which: str) -> str:
    """The source (prelude included) of ``inst``'s "check" or "step" kernel."""
    bf = ctype(D.ACL_BF16)
    f32 = ctype(D.ACL_FLOAT)

    def ld(expr: str) -> str:
        return load(expr, bf, f32)

    common = f"""
#define DK {inst.dk}
#define THREADS {RGDR_THREADS}
#define ROWS {ROWS_PER_BLOCK}
#define WARP ACL_WARP_SIZE
#define NWARPS (THREADS / WARP)
#define VEC ((DK + WARP - 1) / WARP)
#define MAX_SEQ {MAX_SEQ}
{RGDR_STRUCT}
typedef unsigned short bf16_t;
"""
    check = f"""
extern "C" __global__ void __launch_bounds__({CHECK_THREADS}) {inst.check_name}(
    const RgdrMeta m, const int* __restrict__ lens, const int* __restrict__ slots, const int* __restrict__ acc,
    int* __restrict__ flag) {{
  bool bad = false;
  if (threadIdx.x == 0) {{
    long long total = 0;
    for (long long b = 0; b < m.batch; ++b) {{
      const long long l = lens[b * m.len_step], a = acc[b * m.acc_step];
      if (l < 1 || l > MAX_SEQ || a < 1 || a > l) bad = true;
      total += l;
    }}
    if (total != m.tokens) bad = true;
  }}
  for (long long t = threadIdx.x; t < m.tokens; t += blockDim.x) {{
    const long long s = slots[t * m.slot_step];
    if (s < 0 || s >= m.blocks) bad = true;
  }}
  if (bad) *flag = 1;
}}
"""
    step = f"""
ACL_DEV float rgdr_warp_sum(float x) {{
  #pragma unroll
  for (int o = WARP / 2; o > 0; o >>= 1) x += ACL_SHFL_XOR(x, o);
  return x;
}}

extern "C" __global__ void __launch_bounds__(THREADS) {inst.step_name}(
    const RgdrMeta m, const double scale_arg, const bf16_t* __restrict__ q, const bf16_t* __restrict__ k,
    const bf16_t* __restrict__ v, const bf16_t* __restrict__ beta, const float* __restrict__ g,
    const float* __restrict__ gk, bf16_t* state, const int* __restrict__ lens, const int* __restrict__ slots,
    const int* __restrict__ acc, bf16_t* __restrict__ out, const int* __restrict__ flag) {{
  if (*flag) return;  // a check failed: write nothing
  const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
  long long blk = blockIdx.x;
  const long long rb = blk % m.row_blocks;
  blk /= m.row_blocks;
  const long long h = blk % m.nv, b = blk / m.nv;
  const long long hk = h / m.group;
  const float scale = (float)scale_arg;
  long long t0 = 0;
  for (long long c = 0; c < b; ++c) t0 += lens[c * m.len_step];
  const long long len = lens[b * m.len_step];
  const long long first = slots[(t0 + acc[b * m.acc_step] - 1) * m.slot_step];
  for (long long r = warp; r < ROWS; r += NWARPS) {{
    const long long i = rb * ROWS + r;
    if (i >= m.dv) break;
    float s[VEC];
    const bf16_t* init = state + first * m.s_b + h * m.s_n + i * m.s_i;
    #pragma unroll
    for (int e = 0; e < VEC; ++e) {{
      const int j = e * WARP + lane;
      s[e] = j < DK ? {ld("init[j * m.s_j]")} : 0.0f;
    }}
    for (long long t = t0; t < t0 + len; ++t) {{
      const float alpha = m.has_g ? acl_exp(g[t * m.g_t + h * m.g_n]) : 1.0f;
      const bf16_t* k_row = k + t * m.k_t + hk * m.k_n;
      const bf16_t* q_row = q + t * m.q_t + hk * m.q_n;
      float kk[VEC], dot = 0.0f;
      #pragma unroll
      for (int e = 0; e < VEC; ++e) {{
        const int j = e * WARP + lane;
        float decay = alpha;
        if (m.has_gk && j < DK) decay *= acl_exp(gk[t * m.gk_t + h * m.gk_n + j * m.gk_d]);
        s[e] *= decay;
        kk[e] = j < DK ? {ld("k_row[j * m.k_d]")} : 0.0f;
        dot += s[e] * kk[e];
      }}
      dot = rgdr_warp_sum(dot);
      const float bt = {ld("beta[t * m.beta_t + h * m.beta_n]")};
      const float y = bt * ({ld("v[t * m.v_t + h * m.v_n + i * m.v_d]")} - dot);
      float o = 0.0f;
      #pragma unroll
      for (int e = 0; e < VEC; ++e) {{
        const int j = e * WARP + lane;
        s[e] += y * kk[e];
        if (j < DK) o += s[e] * {ld("q_row[j * m.q_d]")};
      }}
      o = rgdr_warp_sum(o) * scale;
      if (lane == 0) out[t * m.o_t + h * m.o_n + i * m.o_d] = {store("o", f32, bf)};
      bf16_t* row = state + slots[t * m.slot_step] * m.s_b + h * m.s_n + i * m.s_i;
      #pragma unroll
      for (int e = 0; e < VEC; ++e) {{
        const int j = e * WARP + lane;
        if (j < DK) row[j * m.s_j] = {store("s[e]", f32, bf)};
      }}
    }}
  }}
}}
"""
    header = f"// RecurrentGatedDeltaRule ({which}): Dk={inst.dk}"
    parts = [PRELUDE, SHUFFLE_XOR, header, common, check if which == "check" else step]
    return "\n".join(parts)

"""The pipelined split-KV decode kernel (``ACL_DECODE_CONFIG=pipe``): K / V tiles staged by ``cp.async``.

The register-tile split kernel (:mod:`acl_rocm.kernels.attention_decode`) keeps a warp's next K / V rows in flight
only as far as its registers reach, so a long cache streams at about two thirds of HBM speed on an H100. This
kernel's split blocks instead copy tiles of :data:`~acl_rocm.kernels.attention_decode.PIPE_KEYS` consecutive K and
V rows into shared memory, ``stages`` tiles deep: coalesced 16-byte ``cp.async`` copies (a plain copy where there
is none: older GPUs, HIP, the CPU kernel emulator) of ``stages - 1`` tiles stay in flight while the block works
on the tile that landed, so every block keeps tens of KiB of reads outstanding whatever its warps are doing.

Work on a tile: the block's threads form 16 groups of 8 lanes; a group takes one key of the tile at a time (keys
``group``, ``group + 16``, ...), each lane holding ``D / 8`` dims of the key (16-byte reads from shared memory: 8
lanes read one 128-byte run, conflict free without padding), of the GQA group's query rows and of its accumulators.
A 3-step xor butterfly inside the group gives the key's score; each group keeps its own online softmax (max, sum,
accumulator per query head), the groups of a warp merge through shuffles once at the end, the warps through
shared memory, and the block leaves its partial (or, with one split, the output) exactly as the register-tile
split kernel does (the same ending, the same combine kernel, ``fused`` included).

Covered: dense caches whose K / V rows take 16-byte loads (unit dim stride, strides and addresses whole 8-element
vectors), head dim a multiple of 64 up to 256; the mask, actual lengths and a sink as in the split kernel (masked
keys are still copied: no tile is skipped). The op routes other calls (paged pools, odd strides) to the
register-tile split kernel with a debug line.
"""

from __future__ import annotations

from typing import Final

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.attention_decode import DECODE_THREADS, DecodeInstance, online_softmax_tile
from acl_rocm.kernels.ctypes_map import ctype, load
from acl_rocm.kernels.mma import CP_ASYNC_SOURCE

PIPE_LANES: Final = 8
"""Lanes a key: each reads 16 bytes per 64 dims of a row."""
PIPE_GROUPS: Final = DECODE_THREADS // PIPE_LANES
"""Lane groups a block (a key each at a time)."""
PIPE_DIM_STEP: Final = PIPE_LANES * 8
"""Dims one 16-byte read of each of a group's lanes covers (a lane holds ``D / 64`` such vectors)."""


def pipe_covers(head_dim: int, group: int, item: int) -> str | None:
    """Why the pipelined kernel cannot take a head dim / GQA group / element size (None when it can)."""
    if item != 2:
        return f"{item}-byte elements (the pipelined kernel stages fp16 / bf16)"
    if head_dim % PIPE_DIM_STEP or not 0 < head_dim <= 256:
        return f"head dim {head_dim} (the pipelined kernel takes multiples of {PIPE_DIM_STEP} up to 256)"
    if group * head_dim // PIPE_LANES > 64:
        values = group * head_dim // PIPE_LANES
        return f"GQA group {group} at head dim {head_dim} ({values} values per lane, at most 64)"
    return None


def pipe_stages(wanted: int, keys: int, head_dim: int, item: int, budget: int) -> int:
    """Stages that fit ``budget`` shared bytes (K and V rows of ``keys`` keys each), at most ``wanted``; < 2: none."""
    stage = 2 * keys * head_dim * item
    return min(wanted, budget // stage)


def pipe_common(inst: DecodeInstance) -> str:
    """C source the pipelined kernel needs before its body: the copies, the stage geometry, the stage loader."""
    assert inst.pipe >= 2 and inst.pkeys % PIPE_GROUPS == 0 and inst.head_dim % PIPE_DIM_STEP == 0
    return (
        CP_ASYNC_SOURCE
        + f"""
#define PIPE_STAGES {inst.pipe}
#define PIPE_KEYS {inst.pkeys}
#define PIPE_LANES {PIPE_LANES}
#define PIPE_GROUPS (THREADS / PIPE_LANES)
#define PIPE_KPG (PIPE_KEYS / PIPE_GROUPS)
#define PIPE_NV (HEAD_DIM / (PIPE_LANES * 8))
#define PIPE_EL (PIPE_NV * 8)
#define PIPE_CPR (HEAD_DIM / 8)
#define PIPE_STAGE (2 * PIPE_KEYS * HEAD_DIM)
static_assert((2 * PIPE_KEYS * PIPE_CPR) % THREADS == 0, "a stage's 16-byte copies split evenly over the block");

// the dim slot e of lane ``sub`` of a key's group holds: vector e / 8 covers dims (e / 8) * 64 + sub * 8 + 0..7
ACL_DEV int pipe_dim(int sub, int e) {{ return (e / 8) * (PIPE_LANES * 8) + sub * 8 + e % 8; }}

// the stage at ``dst`` gets K rows j0 .. j0 + PIPE_KEYS, then V's (rows at or past hi: zeros, nothing read)
ACL_DEV void pipe_stage(st* dst, const st* k_head, const st* v_head, const DecodeMeta& m, long long j0,
                        long long hi) {{
  #pragma unroll
  for (int n = 0; n < 2 * PIPE_KEYS * PIPE_CPR / THREADS; ++n) {{
    const int i = n * THREADS + (int)threadIdx.x;
    const int kv = i / (PIPE_KEYS * PIPE_CPR), r = (i / PIPE_CPR) % PIPE_KEYS, c = i % PIPE_CPR;
    const long long j = j0 + r;
    const bool ok = j < hi;
    const st* src = kv ? v_head + (ok ? j * m.v[2] : 0) : k_head + (ok ? j * m.k[2] : 0);
    acl_cp_async16(dst + (kv * PIPE_KEYS + r) * HEAD_DIM + c * 8, src + c * 8, ok);
  }}
}}
"""
    )


def pipe_split_body(inst: DecodeInstance) -> str:
    """C source of the pipelined split kernel's work, between the split kernel's opening and its ending."""
    c = ctype(inst.dtype)
    f32 = ctype(D.ACL_FLOAT)
    value = load("vr[t][e / 8].v[e % 8]", c, f32)
    softmax = online_softmax_tile("PIPE_KPG", "PIPE_EL", "the same in the key's lane group", value)
    return f"""  // ---- pipelined split: K / V tiles through shared memory (kernels/attention_decode_pipe.py) ----
  __shared__ AclVec<unsigned, 4> pipe_raw[PIPE_STAGES * PIPE_STAGE / 8];
  st* const sm_kv = (st*)pipe_raw;
  const int grp = tid / PIPE_LANES, sub = tid % PIPE_LANES;
  float qr[GROUP][PIPE_EL], acc[GROUP][PIPE_EL], mx[GROUP], sum[GROUP];
  #pragma unroll
  for (int g = 0; g < GROUP; ++g) {{
    const st* q_row = q + b * m.q[0] + (hk * GROUP + g) * m.q[1];
    #pragma unroll
    for (int e = 0; e < PIPE_EL; ++e) {{
      qr[g][e] = {load("q_row[(long long)pipe_dim(sub, e) * m.q[3]]", c, f32)};
      acc[g][e] = 0.0f;
    }}
    mx[g] = -inf;
    sum[g] = 0.0f;
  }}
  const st* k_head = k + b * m.k[0] + hk * m.k[1];
  const st* v_head = v + b * m.v[0] + hk * m.v[1];
  const unsigned char* mask_kv = m.has_mask ? mask + b * m.mask[0] + hk * GROUP * m.mask[1] : nullptr;
  const int tiles = hi > lo ? (int)((hi - lo + PIPE_KEYS - 1) / PIPE_KEYS) : 0;
  // the first PIPE_STAGES - 1 tiles in flight; one commit group a tile (empty past the last), so the wait below
  // always means "tile i landed"
  #pragma unroll
  for (int s = 0; s < PIPE_STAGES - 1; ++s) {{
    if (s < tiles) pipe_stage(sm_kv + s * PIPE_STAGE, k_head, v_head, m, lo + (long long)s * PIPE_KEYS, hi);
    acl_cp_async_commit();
  }}
  for (int i = 0; i < tiles; ++i) {{
    acl_cp_async_wait<PIPE_STAGES - 2>();  // this thread's copies of tile i landed
    __syncthreads();  // everyone's did, and every thread is done with tile i - 1: its stage takes tile i + S - 1
    const int next = i + PIPE_STAGES - 1;
    if (next < tiles) {{
      pipe_stage(sm_kv + (next % PIPE_STAGES) * PIPE_STAGE, k_head, v_head, m, lo + (long long)next * PIPE_KEYS, hi);
    }}
    acl_cp_async_commit();
    const st* sk = sm_kv + (i % PIPE_STAGES) * PIPE_STAGE;
    const st* sv = sk + PIPE_KEYS * HEAD_DIM;
    const long long j0 = lo + (long long)i * PIPE_KEYS;
    unsigned cur[GROUP];
    float sc[GROUP][PIPE_KPG];
    AclVec<st, 8> vr[PIPE_KPG][PIPE_NV];
    #pragma unroll
    for (int g = 0; g < GROUP; ++g) cur[g] = 0u;
    #pragma unroll
    for (int u = 0; u < PIPE_KPG; ++u) {{
      const int t = grp + u * PIPE_GROUPS;  // the group's u-th key of the tile
      const long long j = j0 + t;
      AclVec<st, 8> kr[PIPE_NV];
      #pragma unroll
      for (int n = 0; n < PIPE_NV; ++n) {{
        kr[n] = *(const AclVec<st, 8>*)(sk + t * HEAD_DIM + n * (PIPE_LANES * 8) + sub * 8);
        vr[u][n] = *(const AclVec<st, 8>*)(sv + t * HEAD_DIM + n * (PIPE_LANES * 8) + sub * 8);
      }}
      #pragma unroll
      for (int g = 0; g < GROUP; ++g) {{
        float dot = 0.0f;
        #pragma unroll
        for (int e = 0; e < PIPE_EL; ++e) dot += qr[g][e] * {load("kr[e / 8].v[e % 8]", c, f32)};
        #pragma unroll
        for (int o = PIPE_LANES / 2; o > 0; o >>= 1) dot += ACL_SHFL_XOR(dot, o);
        sc[g][u] = dot;
        bool keep = j < hi;
        if (keep && m.has_mask) keep = mask_kv[g * m.mask[1] + j * m.mask[3]] == 0;
        cur[g] |= (unsigned)keep << u;
      }}
    }}
{softmax}
  }}
  acl_cp_async_wait_all();
  // the warp's lane groups hold the same dims: merge their (max, sum, acc) through shuffles, then the warps
  #pragma unroll
  for (int g = 0; g < GROUP; ++g) {{
    float top = mx[g];
    #pragma unroll
    for (int o = PIPE_LANES; o < WARP; o <<= 1) {{
      const float y = ACL_SHFL_XOR(top, o);
      top = y > top ? y : top;
    }}
    const float r = mx[g] == -inf ? 0.0f : acl_exp(mx[g] - top);
    float l = sum[g] * r;
    #pragma unroll
    for (int o = PIPE_LANES; o < WARP; o <<= 1) l += ACL_SHFL_XOR(l, o);
    #pragma unroll
    for (int e = 0; e < PIPE_EL; ++e) {{
      float a = acc[g][e] * r;
      #pragma unroll
      for (int o = PIPE_LANES; o < WARP; o <<= 1) a += ACL_SHFL_XOR(a, o);
      acc[g][e] = a;
    }}
    if (lane == 0) {{
      sm_m[warp][g] = top;
      sm_l[warp][g] = l;
    }}
    if (lane < PIPE_LANES) {{
      #pragma unroll
      for (int e = 0; e < PIPE_EL; ++e) sm_o[warp][g][pipe_dim(sub, e)] = acc[g][e];
    }}
  }}
  __syncthreads();
"""

"""The pipelined split-KV decode kernel (``ACL_DECODE_CONFIG=pipe``): K / V tiles staged by ``cp.async``.

The register-tile split kernel (:mod:`acl_rocm.kernels.attention_decode`) keeps a warp's next K / V rows in flight
only as far as its registers reach, so a long cache streams at about two thirds of HBM speed on an H100. This
kernel's split blocks instead copy tiles of :data:`~acl_rocm.kernels.attention_decode.PIPE_KEYS` consecutive K and
V rows into shared memory, ``stages`` tiles deep: coalesced 16-byte ``cp.async`` copies (a plain copy where there
is none: older GPUs, HIP, the CPU kernel emulator) of ``stages - 1`` tiles stay in flight while the block works
on the tile that landed, so every block keeps tens of KiB of reads outstanding whatever its warps are doing. Each
thread's copy addresses advance a tile per issue (no per-row multiply), and its share of a stage is fixed.

Work on a tile: the block's threads form 16 groups of 8 lanes; a group takes one key of the tile at a time (keys
``group``, ``group + 16``, ...), each lane holding ``D / 8`` dims of the key (16-byte reads from shared memory: 8
lanes read one 128-byte run, conflict free without padding), of the GQA group's query rows and of its accumulators.
A 3-step xor butterfly inside the group gives the key's score; each group keeps its own online softmax (max, sum,
accumulator per query head; the accumulator is rescaled only when a key raises the maximum, rare past the first
keys), the groups of a warp merge through shuffles once at the end, the warps through
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
from acl_rocm.kernels.attention_decode import DECODE_THREADS, DecodeInstance
from acl_rocm.kernels.ctypes_map import ctype, load
from acl_rocm.kernels.mma import CP_ASYNC_SOURCE, MMA_SOURCE

PIPE_LANES: Final = 8
"""Lanes a key: each reads 16 bytes per 64 dims of a row."""
PIPE_GROUPS: Final = DECODE_THREADS // PIPE_LANES
"""Lane groups a block (a key each at a time)."""
PIPE_DIM_STEP: Final = PIPE_LANES * 8
"""Dims one 16-byte read of each of a group's lanes covers (a lane holds ``D / 64`` such vectors)."""


def pipe_covers(head_dim: int, group: int, item: int, mma: bool = False) -> str | None:
    """Why the pipelined kernel cannot take a head dim / GQA group / element size (None when it can); ``mma``: its
    ``pmma`` form (the group's heads are a tile's 16 rows, not registers of each lane)."""
    if item != 2:
        return f"{item}-byte elements (the pipelined kernel stages fp16 / bf16)"
    if head_dim % PIPE_DIM_STEP or not 0 < head_dim <= 256:
        return f"head dim {head_dim} (the pipelined kernel takes multiples of {PIPE_DIM_STEP} up to 256)"
    if mma:
        return f"GQA group {group} (pmma: a tile's 16 rows at most)" if group > 16 else None
    if group * head_dim // PIPE_LANES > 64:
        values = group * head_dim // PIPE_LANES
        return f"GQA group {group} at head dim {head_dim} ({values} values per lane, at most 64)"
    return None


def pipe_stages(wanted: int, keys: int, head_dim: int, item: int, budget: int) -> int:
    """Stages that fit ``budget`` shared bytes (K and V rows of ``keys`` keys each), at most ``wanted``; < 2: none."""
    stage = 2 * keys * head_dim * item
    return min(wanted, budget // stage)


PITCH_SOURCE: Final = """
#define PIPE_PITCH (HEAD_DIM + 8)  // pmma: a staged row's elements (16 bytes of padding: ldmatrix conflict free)
"""


def pipe_pitch(head_dim: int, mma: bool) -> int:
    """Elements between a stage's consecutive K (or V) rows: the head dim, padded by 8 under ``pmma``."""
    return head_dim + 8 if mma else head_dim


def pipe_static_bytes(head_dim: int, group: int, pkeys: int, stages: int, warps: int, skip: bool, mma: bool) -> int:
    """An upper bound of the split kernel's static shared bytes beside dynamic stages: the warps' merge, the fused
    ending's weights (``pcomb``'s, the larger), ``pskip``'s mask ring, ``pmma``'s query rows and scratch."""
    merge = warps * group * (head_dim + 2) * 4
    fused = max(group, 1) * 128 * 4 + 1024
    ring = 2 * stages * group * pkeys if skip else 0
    query = 16 * pipe_pitch(head_dim, True) * 2 + warps * 512 if mma else 0
    return merge + fused + ring + query


def pipe_dynamic_bytes(inst: DecodeInstance) -> int:
    """Dynamic shared bytes a launch of ``inst``'s split kernel passes (its stages under ``pdyn``; else 0)."""
    stage = 2 * inst.pkeys * pipe_pitch(inst.head_dim, inst.mma) * inst.dtype.info.storage_bits // 8
    return inst.pipe * stage if inst.dyn else 0


def pipe_mask_covers(mask_strides: tuple[int, ...], skv: int, address: int) -> str | None:
    """Why ``pskip`` cannot stage a call's mask rows by 4-byte ``cp.async`` (None when it can): unit key stride, a
    key extent and batch / head steps of whole 4-byte words, a word-aligned address."""
    if mask_strides[3] != 1:
        return f"mask key stride {mask_strides[3]} (pskip copies 4 mask bytes at once)"
    if skv % 4 or any(s % 4 for s in mask_strides[:2]) or address % 4:
        return "mask rows not whole 4-byte words (pskip copies 4 mask bytes at once)"
    return None


SKIP_SOURCE: Final = r"""
// pskip: 4-byte global -> shared copies (the mask bytes of a tile); zeros where !valid
ACL_DEV void acl_cp_async4(void* dst, const void* src, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  unsigned d;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(d) : "l"(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(d), "l"(src), "r"(valid ? 4 : 0));
#else
  *(unsigned*)dst = valid ? *(const unsigned*)src : 0u;
#endif
}
// tile j0's mask bytes (GROUP rows of PIPE_KEYS, 4 a thread) into ``slot`` ([GROUP][PIPE_KEYS]); words from hi on
// read nothing (the key extent is whole words: a word that starts before hi lies inside the row)
ACL_DEV void pipe_mask_copy(unsigned char* slot, const unsigned char* mask_kv, long long mstep, long long j0,
                            long long hi, int tid) {
  if (tid < GROUP * PIPE_KEYS / 4) {
    const int g = tid / (PIPE_KEYS / 4), w = (tid % (PIPE_KEYS / 4)) * 4;
    const bool ok = j0 + w < hi;
    acl_cp_async4(slot + g * PIPE_KEYS + w, ok ? mask_kv + g * mstep + j0 + w : mask_kv, ok);
  }
}
// whether some head keeps the key whose GROUP mask bytes start at ``at`` (a stride of PIPE_KEYS)
ACL_DEV bool pipe_kept(const unsigned char* at) {
  bool any = false;
  #pragma unroll
  for (int g = 0; g < GROUP; ++g) any |= at[g * PIPE_KEYS] == 0;
  return any;
}
"""
"""``pskip``'s C helpers: the 4-byte copy, a tile's mask copy, a key's liveness from its staged mask bytes."""


def pipe_common(inst: DecodeInstance) -> str:
    """C source the pipelined kernel needs before its body: the copies, the stage geometry, the stage loader."""
    assert inst.pipe >= 2 and inst.pkeys % PIPE_GROUPS == 0 and inst.head_dim % PIPE_DIM_STEP == 0
    # pskip: a copy row whose key no head keeps is not read (its staged mask bytes, ``live``, say so)
    ok = "const bool ok = n * PIPE_ROWSTEP < left;"
    skip_doc = "; ``live``: null, or (pskip) the tile's\n// staged mask bytes at row crow" if inst.skip else ""
    if inst.skip:
        ok = "const bool ok = n * PIPE_ROWSTEP < left && (live == nullptr || pipe_kept(live + n * PIPE_ROWSTEP));"
    pitch = "PIPE_PITCH" if inst.mma else "HEAD_DIM"
    return (
        (MMA_SOURCE + PITCH_SOURCE if inst.mma else CP_ASYNC_SOURCE)
        + f"""
#define PIPE_STAGES {inst.pipe}
#define PIPE_KEYS {inst.pkeys}
#define PIPE_LANES {PIPE_LANES}
#define PIPE_GROUPS (THREADS / PIPE_LANES)
#define PIPE_KPG (PIPE_KEYS / PIPE_GROUPS)
#define PIPE_NV (HEAD_DIM / (PIPE_LANES * 8))
#define PIPE_EL (PIPE_NV * 8)
#define PIPE_CPR (HEAD_DIM / 8)
#define PIPE_STAGE (2 * PIPE_KEYS * {pitch})
#define PIPE_ROWSTEP (THREADS / PIPE_CPR)
static_assert(THREADS % PIPE_CPR == 0 && PIPE_KEYS % PIPE_ROWSTEP == 0, "a stage's copies split evenly over the block");
{SKIP_SOURCE if inst.skip else ""}
// the dim slot e of lane ``sub`` of a key's group holds: vector e / 8 covers dims (e / 8) * 64 + sub * 8 + 0..7
ACL_DEV int pipe_dim(int sub, int e) {{ return (e / 8) * (PIPE_LANES * 8) + sub * 8 + e % 8; }}

// this thread's share of a stage: 16 bytes (its column) of rows crow, crow + PIPE_ROWSTEP, ... of K, then of V.
// ``kp`` / ``vp``: its K / V row crow of the tile; ``left``: rows of the tile from crow on that are < hi (rows past
// it: zeros, nothing read); ``dst``: the stage plus this thread's offset{skip_doc}
ACL_DEV void pipe_stage(st* dst, const st* kp, const st* vp, long long kstep, long long vstep, long long left,
                        const st* safe{", const unsigned char* live" if inst.skip else ""}) {{
  #pragma unroll
  for (int n = 0; n < PIPE_KEYS / PIPE_ROWSTEP; ++n) {{
    {ok}
    acl_cp_async16(dst + n * PIPE_ROWSTEP * {pitch}, ok ? kp + n * kstep : safe, ok);
  }}
  #pragma unroll
  for (int n = 0; n < PIPE_KEYS / PIPE_ROWSTEP; ++n) {{
    {ok}
    acl_cp_async16(dst + (PIPE_KEYS + n * PIPE_ROWSTEP) * {pitch}, ok ? vp + n * vstep : safe, ok);
  }}
}}
"""
    )


def pipe_split_body(inst: DecodeInstance) -> str:
    """C source of the pipelined split kernel's work, between the split kernel's opening and its ending."""
    raw = (
        "extern __shared__ AclVec<unsigned, 4> pipe_raw[];  // pdyn"
        if inst.dyn
        else ("__shared__ AclVec<unsigned, 4> pipe_raw[PIPE_STAGES * PIPE_STAGE / 8];")
    )
    # pskip: tile t's mask bytes ride the commit group of tile t - (PIPE_STAGES - 1) (tiles 0 .. PIPE_STAGES - 1 the
    # first group's), so they have landed when tile t's K / V copies are issued; a ring of 2 x PIPE_STAGES slots
    # holds every tile from the one being worked on to the newest in flight
    ring = prologue_masks = next_mask = live = ""
    keep = "bool keep = j < hi;\n        if (keep && m.has_mask) keep = mask_kv[g * m.mask[1] + j * m.mask[3]] == 0;"
    if inst.skip:
        ring = """
#define PIPE_MR (2 * PIPE_STAGES)
#define PIPE_SLOT(t) (pipe_mask + ((t) % PIPE_MR) * (GROUP * PIPE_KEYS))
  __shared__ unsigned pipe_mask_raw[PIPE_MR * GROUP * PIPE_KEYS / 4];
  unsigned char* const pipe_mask = (unsigned char*)pipe_mask_raw;"""
        copy = "pipe_mask_copy(PIPE_SLOT({t}), mask_kv, m.mask[1], lo + (long long)({t}) * PIPE_KEYS, hi, tid);"
        prologue_masks = f"""
    if (s == 0) {{
      for (int t = 0; t < PIPE_STAGES - 1 && t < tiles; ++t) {copy.format(t="t")}
    }}
    if (s + PIPE_STAGES - 1 < tiles) {copy.format(t="s + PIPE_STAGES - 1")}"""
        next_mask = f"""
    if (next + PIPE_STAGES - 1 < tiles) {copy.format(t="next + PIPE_STAGES - 1")}"""
        live = ", PIPE_SLOT(next) + crow"
        keep = "const bool keep = j < hi && msk[g * PIPE_KEYS + t] == 0;  // pskip: the staged mask bytes"
    first_live = ", nullptr" if inst.skip else ""
    tile_mask = "\n    const unsigned char* msk = PIPE_SLOT(i);" if inst.skip else ""
    state, work, merge = _lane_state(inst), _lane_work(inst, keep), _lane_merge()
    query, pitch = "", "HEAD_DIM"
    if inst.mma:  # pmma: a warp's 16-key sub-tiles through the matrix units (kernels/attention_decode_mma.py)
        from acl_rocm.kernels.attention_decode_mma import mma_merge, mma_query, mma_state, mma_work

        state, work, merge, pitch = mma_state(), mma_work(inst, keep), mma_merge(), "PIPE_PITCH"
        query = mma_query()  # once the first tiles' copies are in flight
    return f"""  // ---- pipelined split: K / V tiles through shared memory (kernels/attention_decode_pipe.py) ----
  {raw}{ring}
  st* const sm_kv = (st*)pipe_raw;
{state}  const st* k_head = k + b * m.k[0] + hk * m.k[1];
  const st* v_head = v + b * m.v[0] + hk * m.v[1];
  const unsigned char* mask_kv = m.has_mask ? mask + b * m.mask[0] + hk * GROUP * m.mask[1] : nullptr;
  const int tiles = hi > lo ? (int)((hi - lo + PIPE_KEYS - 1) / PIPE_KEYS) : 0;
  // the copies: this thread's column and first row of a tile, pointers that advance a tile per issue
  const int crow = tid / PIPE_CPR, ccol = (tid % PIPE_CPR) * 8;
  const long long kstep = PIPE_ROWSTEP * m.k[2], vstep = PIPE_ROWSTEP * m.v[2];
  const long long ktile = PIPE_KEYS * m.k[2], vtile = PIPE_KEYS * m.v[2];
  const st* kp = k_head + (tiles ? (lo + crow) * m.k[2] + ccol : 0);
  const st* vp = v_head + (tiles ? (lo + crow) * m.v[2] + ccol : 0);
  long long left = hi - lo - crow;
  st* const sm_mine = sm_kv + crow * {pitch} + ccol;
  // the first PIPE_STAGES - 1 tiles in flight; one commit group a tile (empty past the last), so the wait below
  // always means "tile i landed"
  #pragma unroll
  for (int s = 0; s < PIPE_STAGES - 1; ++s) {{
    if (s < tiles) {{
      pipe_stage(sm_mine + s * PIPE_STAGE, kp, vp, kstep, vstep, left, k_head{first_live});
      kp += ktile;
      vp += vtile;
      left -= PIPE_KEYS;
    }}{prologue_masks}
    acl_cp_async_commit();
  }}
{query}  for (int i = 0; i < tiles; ++i) {{
    acl_cp_async_wait<PIPE_STAGES - 2>();  // this thread's copies of tile i landed
    __syncthreads();  // everyone's did, and every thread is done with tile i - 1: its stage takes tile i + S - 1
    const int next = i + PIPE_STAGES - 1;
    if (next < tiles) {{
      pipe_stage(sm_mine + (next % PIPE_STAGES) * PIPE_STAGE, kp, vp, kstep, vstep, left, k_head{live});
      kp += ktile;
      vp += vtile;
      left -= PIPE_KEYS;
    }}{next_mask}
    acl_cp_async_commit();{tile_mask}
    const st* sk = sm_kv + (i % PIPE_STAGES) * PIPE_STAGE;
    const st* sv = sk + PIPE_KEYS * {pitch};
    const long long j0 = lo + (long long)i * PIPE_KEYS;
{work}  }}
  acl_cp_async_wait_all();
{merge}  __syncthreads();
"""


def _lane_state(inst: DecodeInstance) -> str:
    """The 8-lanes-a-key layout's registers: each lane's query dims, accumulators and running (max, sum) a head."""
    c = ctype(inst.dtype)
    f32 = ctype(D.ACL_FLOAT)
    return f"""  const int grp = tid / PIPE_LANES, sub = tid % PIPE_LANES;
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
"""


def _lane_work(inst: DecodeInstance, keep: str) -> str:
    """The 8-lanes-a-key layout's work on a landed tile (``keep``: the C statement deciding key ``j`` for head g)."""
    c = ctype(inst.dtype)
    f32 = ctype(D.ACL_FLOAT)
    return f"""    #pragma unroll
    for (int u = 0; u < PIPE_KPG; ++u) {{
      const int t = grp + u * PIPE_GROUPS;  // the group's u-th key of the tile
      const long long j = j0 + t;
      AclVec<st, 8> kr[PIPE_NV], vr[PIPE_NV];
      #pragma unroll
      for (int n = 0; n < PIPE_NV; ++n) {{
        kr[n] = *(const AclVec<st, 8>*)(sk + t * HEAD_DIM + n * (PIPE_LANES * 8) + sub * 8);
        vr[n] = *(const AclVec<st, 8>*)(sv + t * HEAD_DIM + n * (PIPE_LANES * 8) + sub * 8);
      }}
      float vf[PIPE_EL];
      #pragma unroll
      for (int e = 0; e < PIPE_EL; ++e) vf[e] = {load("vr[e / 8].v[e % 8]", c, f32)};
      #pragma unroll
      for (int g = 0; g < GROUP; ++g) {{
        float dot = 0.0f;
        #pragma unroll
        for (int e = 0; e < PIPE_EL; ++e) dot += qr[g][e] * {load("kr[e / 8].v[e % 8]", c, f32)};
        #pragma unroll
        for (int o = PIPE_LANES / 2; o > 0; o >>= 1) dot += ACL_SHFL_XOR(dot, o);
        {keep}
        if (keep) {{  // the same in the key's 8 lanes
          const float sc = scale * dot;
          if (sc > mx[g]) {{  // a new maximum (rare past the first keys): rescale what the group holds
            const float a = mx[g] == -inf ? 0.0f : acl_exp(mx[g] - sc);
            sum[g] *= a;
            #pragma unroll
            for (int e = 0; e < PIPE_EL; ++e) acc[g][e] *= a;
            mx[g] = sc;
          }}
          const float p = acl_exp(sc - mx[g]);
          sum[g] += p;
          #pragma unroll
          for (int e = 0; e < PIPE_EL; ++e) acc[g][e] += p * vf[e];
        }}
      }}
    }}
"""


def _lane_merge() -> str:
    """The 8-lanes-a-key layout's ending: a warp's groups merged through shuffles, then written for the warps'
    merge in shared memory."""
    return (
        "  // the warp's lane groups hold the same dims: merge their (max, sum, acc) through shuffles, then the"
        " warps\n"
        """  #pragma unroll
  for (int g = 0; g < GROUP; ++g) {
    float top = mx[g];
    #pragma unroll
    for (int o = PIPE_LANES; o < WARP; o <<= 1) {
      const float y = ACL_SHFL_XOR(top, o);
      top = y > top ? y : top;
    }
    const float r = mx[g] == -inf ? 0.0f : acl_exp(mx[g] - top);
    float l = sum[g] * r;
    #pragma unroll
    for (int o = PIPE_LANES; o < WARP; o <<= 1) l += ACL_SHFL_XOR(l, o);
    #pragma unroll
    for (int e = 0; e < PIPE_EL; ++e) {
      float a = acc[g][e] * r;
      #pragma unroll
      for (int o = PIPE_LANES; o < WARP; o <<= 1) a += ACL_SHFL_XOR(a, o);
      acc[g][e] = a;
    }
    if (lane == 0) {
      sm_m[warp][g] = top;
      sm_l[warp][g] = l;
    }
    if (lane < PIPE_LANES) {
      #pragma unroll
      for (int e = 0; e < PIPE_EL; ++e) sm_o[warp][g][pipe_dim(sub, e)] = acc[g][e];
    }
  }
"""
    )

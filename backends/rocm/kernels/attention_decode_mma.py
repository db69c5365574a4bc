"""The pipelined split decode kernel's tiles through the matrix units (``ACL_DECODE_CONFIG=...,pipe,pmma``).

The 8-lanes-a-key layout (:mod:`acl_rocm.kernels.attention_decode_pipe`) spends about 130 instructions a lane on
every key (16 bf16 conversions and FMAs a head for the score, a 3-step butterfly, the online softmax, 16 FMAs a
head for the value sum): on an H100 its 128-thread blocks issue near one key per SM cycle, which with two blocks a
unit is about what HBM delivers, so the kernel is bound by issue rather than by memory. Here each warp takes
16-key sub-tiles of the landed tile (``u = warp, warp + NWARPS, ...``) and computes, with the
:mod:`acl_rocm.kernels.mma` 16 x 16 x 16 tile product (query heads as rows: the GQA group's rows, the rest zero),
the scores ``S = Q K^T`` (``HEAD_DIM / 16`` products, K through ``ldmatrix``) and the value sum ``O += P V``
(``HEAD_DIM / 16`` products, V through ``ldmatrix.trans``, P rounded to the input dtype as flash attention does).
The online softmax runs on the score fragments (a row's running max over its lanes by butterfly, each lane's
partial sum reduced once at the end); each warp leaves its (max, sum, output) for the split kernel's merge of the
warps, as the lane layout does. Stage rows are padded by 16 bytes (``PIPE_PITCH``) so ``ldmatrix`` reads rows
without bank conflicts. Wants ``pkeys=64`` (a sub-tile a warp) and ``pdyn`` (stages of 34 KiB at D 128).
"""

from __future__ import annotations

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.attention_decode import DecodeInstance


def mma_state() -> str:
    """C source: the staged query rows' shared memory, the warp's scratch, its output tiles and running (max, sum) a
    row slot (the query itself is staged by :func:`mma_query`, once the first tiles' copies are in flight)."""
    return """  // ---- pmma (attention_decode_mma.py): query rows, output tiles, running state a row slot ----
// whether C element e can hold a query head (layout 1 keeps rows 8..15 in elements with bit 1 set: padding at a
// group of 8 or fewer, never rescaled, exponentiated or written)
#define PMMA_LIVE(e) (ACL_MMA_LAYOUT != 1 || GROUP > 8 || ((e) & 2) == 0)
  __shared__ AclVec<unsigned, 4> pipe_q_raw[16 * PIPE_PITCH / 8];
#if ACL_MMA_SCRATCH
  __shared__ AclVec<unsigned, 4> pipe_scratch_raw[NWARPS * ACL_MMA_SCRATCH / 8];
  unsigned short* const scratch = (unsigned short*)pipe_scratch_raw + warp * ACL_MMA_SCRATCH;
#else
  unsigned short* const scratch = nullptr;
#endif
  AclMmaA qa[HEAD_DIM / 16];
  AclMmaC acc[HEAD_DIM / 16];
  #pragma unroll
  for (int n = 0; n < HEAD_DIM / 16; ++n) {
    #pragma unroll
    for (int e = 0; e < ACL_MMA_C_ELEMS; ++e) acc[n].x[e] = 0.0f;
  }
  float mx[ACL_MMA_C_SLOTS], sum[ACL_MMA_C_SLOTS];
  #pragma unroll
  for (int s = 0; s < ACL_MMA_C_SLOTS; ++s) {
    mx[s] = -inf;
    sum[s] = 0.0f;
  }
"""


def mma_query() -> str:
    """C source: the GQA group's query rows staged (rows past the group zero) and read as each warp's A fragments;
    placed after the prologue's copies, so its global read waits under them rather than before them."""
    return """  {
    st* const sm_q = (st*)pipe_q_raw;
    for (int idx = tid; idx < 16 * HEAD_DIM; idx += THREADS) {
      const int g = idx / HEAD_DIM, d = idx % HEAD_DIM;
      const long long at = b * m.q[0] + (hk * GROUP + g) * m.q[1] + (long long)d * m.q[3];
      sm_q[g * PIPE_PITCH + d] = g < GROUP ? q[at] : (st)0;
    }
    __syncthreads();
    const unsigned short* const qt = (const unsigned short*)sm_q;
    #pragma unroll
    for (int kk = 0; kk < HEAD_DIM / 16; ++kk) acl_mma_load_a(qa[kk], qt + kk * 16, PIPE_PITCH);
  }
"""


def mma_work(inst: DecodeInstance, keep: str) -> str:
    """C source: this warp's 16-key sub-tiles of the landed tile (``sk`` / ``sv``, keys from ``j0``) through two
    rounds of tile products and the online softmax between them; ``keep`` decides key ``j`` (tile key ``t``) for
    head ``g``."""
    bf16 = "true" if inst.dtype == D.ACL_BF16 else "false"
    keep = keep.replace("\n", "\n    ")
    return f"""    #pragma unroll 1
    for (int u = warp; u < PIPE_KEYS / 16; u += NWARPS) {{  // this warp's 16-key sub-tiles of the tile
      const unsigned short* kt = (const unsigned short*)sk + u * 16 * PIPE_PITCH;
      const unsigned short* vt = (const unsigned short*)sv + u * 16 * PIPE_PITCH;
      AclMmaC sc;
      #pragma unroll
      for (int e = 0; e < ACL_MMA_C_ELEMS; ++e) sc.x[e] = 0.0f;
      #pragma unroll
      for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {{
        AclMmaB kb;
        acl_mma_load_b_nk(kb, kt + kk * 16, PIPE_PITCH);
        acl_mma<{bf16}>(sc, qa[kk], kb);
      }}
      float tmax[ACL_MMA_C_SLOTS], alpha[ACL_MMA_C_SLOTS];
      #pragma unroll
      for (int s = 0; s < ACL_MMA_C_SLOTS; ++s) tmax[s] = -inf;
      #pragma unroll
      for (int e = 0; e < ACL_MMA_C_ELEMS; ++e) {{  // row g: query head g of the group; column: key t of the tile
        const int g = acl_mma_c_row(lane, e), t = u * 16 + acl_mma_c_col(lane, e);
        const long long j = j0 + t;
        bool kept = false;
        if (PMMA_LIVE(e) && g < GROUP) {{
          {keep}
          kept = keep;
        }}
        const float x = kept ? scale * sc.x[e] : -inf;
        sc.x[e] = x;
        const int s = acl_mma_c_slot(e);
        tmax[s] = x > tmax[s] ? x : tmax[s];
      }}
      #pragma unroll
      for (int s = 0; s < ACL_MMA_C_SLOTS; ++s) {{
        #pragma unroll
        for (int off = 1; off < ACL_MMA_ROW_LANES; off <<= 1) {{
          const float y = ACL_SHFL_XOR(tmax[s], off);
          tmax[s] = y > tmax[s] ? y : tmax[s];
        }}
        const float top = mx[s] > tmax[s] ? mx[s] : tmax[s];
        alpha[s] = top == -inf || top == mx[s] ? 1.0f : mx[s] == -inf ? 0.0f : acl_exp(mx[s] - top);
        mx[s] = top;
        sum[s] *= alpha[s];
      }}
      #pragma unroll
      for (int e = 0; e < ACL_MMA_C_ELEMS; ++e) {{
        const int s = acl_mma_c_slot(e);
        const float p = !PMMA_LIVE(e) || sc.x[e] == -inf ? 0.0f : acl_exp(sc.x[e] - mx[s]);
        sc.x[e] = p;
        sum[s] += p;
      }}
      #pragma unroll
      for (int n = 0; n < HEAD_DIM / 16; ++n) {{
        #pragma unroll
        for (int e = 0; e < ACL_MMA_C_ELEMS; ++e) {{
          if (PMMA_LIVE(e)) acc[n].x[e] *= alpha[acl_mma_c_slot(e)];
        }}
      }}
      AclMmaA pa;
      acl_mma_c_to_a<{bf16}>(pa, sc, scratch);
      #pragma unroll
      for (int n = 0; n < HEAD_DIM / 16; ++n) {{
        AclMmaB vb;
        acl_mma_load_b_kn(vb, vt + n * 16, PIPE_PITCH);
        acl_mma<{bf16}>(acc[n], pa, vb);
      }}
    }}
"""


def mma_merge() -> str:
    """C source: each row's lanes sum their partial sums; the warp's (max, sum, output) of the group's rows go to
    shared memory for the split kernel's merge of the warps."""
    return """  #pragma unroll
  for (int s = 0; s < ACL_MMA_C_SLOTS; ++s) {
    #pragma unroll
    for (int off = 1; off < ACL_MMA_ROW_LANES; off <<= 1) sum[s] += ACL_SHFL_XOR(sum[s], off);
    const int g = acl_mma_slot_row(lane, s);
    if (g < GROUP && lane % ACL_MMA_ROW_LANES == 0) {
      sm_m[warp][g] = mx[s];
      sm_l[warp][g] = sum[s];
    }
  }
  #pragma unroll
  for (int n = 0; n < HEAD_DIM / 16; ++n) {
    #pragma unroll
    for (int e = 0; e < ACL_MMA_C_ELEMS; ++e) {
      const int g = acl_mma_c_row(lane, e);
      if (PMMA_LIVE(e) && g < GROUP) sm_o[warp][g][n * 16 + acl_mma_c_col(lane, e)] = acc[n].x[e];
    }
  }
"""

"""The warp-specialised wgmma flash forward (FlashAttention-3's structure, sm_90a): an opt-in variant (suffix ``w``).

Same contract, helpers and shared layouts as :mod:`acl_rocm.kernels.attention_wgmma` (its ``_HELPERS``: loads,
scores, softmax, P V, the store). A block is one producer warpgroup and ``groups`` consumer warpgroups of 64 query
rows each:

* the producer (warpgroup 0, ``setmaxnreg.dec`` to :data:`PRODUCER_REGS`) copies Q once, then K(t) and V(t) as
  separate ``cp.async`` groups into ``stages`` buffers; after a group has landed (its own ``cp.async.wait_group``)
  every producer thread fences it to the async proxy and arrives on its slot's *full* mbarrier (128 arrivals a phase),
  and before refilling a slot it waits on the slot's *empty* mbarrier (one arrival per consumer warp: K's once S = Q
  K^T is done, V's once P V is, so K is refilled a softmax earlier than V, as in FlashAttention-3). A group is
  signalled after the next one is committed, or before the producer blocks on an empty slot (so that a landed tile
  never waits for a slot to free). No block-wide barrier after the start. ``tests/rocm/ws_protocol.py`` is this
  signalling's Python twin, run under random schedules on the CPU (no deadlock, no slot read before it landed or
  refilled while held).
* the consumers (``setmaxnreg.inc``: the producer's registers go to them, :func:`consumer_regs`) run the plain loop
  (S; wait; softmax; P V; wait) or, with ``p``, FlashAttention-3's intra-warpgroup overlap: S(t + 1) = Q K(t + 1) and
  O += P(t) V(t) issued as consecutive batches, ``wgmma.wait_group 1`` (S(t + 1) done), the softmax of t + 1 while
  P(t) V(t) still runs, then ``wait_group 0``. With ``o`` (ping-pong) the consumers take turns at issuing their
  batches: warpgroup c waits on named barrier ``2 + c`` (256 threads: itself and the previous warpgroup's
  ``bar.arrive``) and arrives on the next one's after issuing, so one warpgroup's softmax runs under the other's
  products (a token ring; every consumer of a block has the same tile count, the last turn's arrival left out).

Why the one-barrier kernels stop at 0.43x SDPA (reasoning, H100 numbers; to be confirmed by this kernel's run):
a 128 x 128 tile costs 2 x 2 x 128^3 = 8.4 MFLOP on the tensor cores, ~2,050 cycles of an SM at the dense bf16 rate
(~4,100 FLOP/cycle), and 16,384 exponentials on the MUFU (16 a cycle: ~1,020 cycles) plus ~6 FP32 operations an
element of max / FMA / sum / pack (~770 cycles on 128 lanes). In the one-barrier kernel each warpgroup waits for its
S before the softmax and for its P V before the next tile, and both meet at ``__syncthreads`` every tile, so the
softmax overlaps the other warpgroup's products only by drift: ~2,050 + ~1,800 cycles a tile is ~0.5 of the tensor
rate before the copies. The same 256 threads also issue the K/V copies (16 ``cp.async`` a thread a tile at D 128,
with their 64-bit address arithmetic) and wait for them at the barrier. Registers are not the limit there (206 of
255, no spills: ``DEFAULTS``), nor bank conflicts (the no-swizzle core matrices are 128 contiguous bytes, conflict-free
for wgmma and for the loaders' 16-byte stores), nor occupancy as such (one 160 KiB block a multiprocessor, as
FlashAttention-3). The causal diagonal costs one masked tile in 32 a row block at S 4096. What is missing is
overlap: the producer removes the copies and the barrier from the consumers' path, ``p`` hides a warpgroup's softmax
under its own next S and previous P V, ``o`` under the other warpgroup's.
"""

from __future__ import annotations

from typing import Final

from acl_rocm.kernels.attention_flash import SHARED_LIMIT, fill_body
from acl_rocm.kernels.attention_wgmma import _HELPERS, DTYPES, HEAD_DIMS, WgmmaInstance, shape_tokens
from acl_rocm.kernels.mma import MMA_SOURCE
from acl_rocm.kernels.prelude import PRELUDE
from acl_rocm.kernels.wgmma import SYNC_SOURCE, wgmma_source
from acl_rocm.ops.attention_plan import KEY_RANGE_SOURCE

PRODUCER_REGS: Final = 40
"""Registers a producer thread keeps (``setmaxnreg.dec``; FlashAttention-3's figure: it only issues copies)."""
REGISTER_FILE: Final = 65536
"""32-bit registers of an sm_90 multiprocessor (one block of this kernel a multiprocessor)."""


def consumer_regs(groups: int) -> int:
    """Registers a consumer thread gets (``setmaxnreg.inc``): the file less the producer's, a multiple of 8, <= 240."""
    return min(240, (REGISTER_FILE - 128 * PRODUCER_REGS) // (128 * groups) // 8 * 8)


_KERNEL: Final = r"""
#define CONSUMERS GROUPS
#define KTHREADS (128 * (GROUPS + 1))
#define PINGPONG @PINGPONG@
#define TILE (BC * HEAD_DIM)

extern "C" __global__ void __launch_bounds__(KTHREADS, 1) @NAME@(
    const AttnMeta m, const FlashGrid g, const double scale_arg, const elem_t* __restrict__ q,
    const elem_t* __restrict__ k, const elem_t* __restrict__ v, const unsigned char* __restrict__ mask,
    elem_t* __restrict__ out, float* __restrict__ smax, float* __restrict__ ssum, float* __restrict__ lse,
    const @SINK_S@* __restrict__ sink) {
  extern __shared__ AclVec<unsigned, 4> smem_raw[];  // Q, STAGES K and V tiles, then the mbarriers
#if SWZ  // 1024-byte aligned (the swizzle pattern follows address bits 4-9; the launch gives 1 KiB more)
  unsigned short* const qs = (unsigned short*)smem_raw + ((1024u - (acl_wg_smem(smem_raw) & 1023u)) & 1023u) / 2;
#else
  unsigned short* const qs = (unsigned short*)smem_raw;
#endif
  unsigned short* const ks = qs + BR * HEAD_DIM;
  unsigned short* const vs = ks + STAGES * TILE;
  unsigned long long* const qbar = (unsigned long long*)(vs + STAGES * TILE);  // Q landed (and negated)
  // slot 2 s (K) and 2 s + 1 (V) of stage s: full, K(t) / V(t) landed in stage t % STAGES; empty, the consumers are
  // done with it (K after S = Q K^T, V after P V: the producer refills K a softmax earlier than V)
  unsigned long long* const full = qbar + 1;
  unsigned long long* const empty = full + 2 * STAGES;
  const int tid = threadIdx.x, wg = tid / 128, warp = (tid / 32) % 4, lane = tid % 32;
  long long bh, qt;
  wg_block(g, bh, qt);
  const long long h = bh % g.heads, b = bh / g.heads, hk = h / m.group;
  const long long row0 = qt * BR;
  const long long valid_rows = m.rows - row0 < BR ? m.rows - row0 : BR;
  long long kv0, kv1;
  acl_key_range(row0, valid_rows, m.kv_len, m.has_window, m.win_lo, m.win_hi, m.shift, &kv0, &kv1);
  const long long tiles = kv1 > kv0 ? (kv1 - kv0 + BC - 1) / BC : 0;
  if (tid == 0) {
    acl_mbar_init(qbar, 128);
    for (int s = 0; s < 2 * STAGES; ++s) {
      acl_mbar_init(full + s, 128);
      acl_mbar_init(empty + s, 4 * CONSUMERS);
    }
  }
  __syncthreads();  // the only block-wide barrier

  if (wg == 0) {  // the producer: copies only
    acl_setmaxnreg_dec<@PREGS@>();
    const elem_t* kh = k + b * m.k[0] + hk * m.k[1];
    const elem_t* vh = v + b * m.v[0] + hk * m.v[1];
    wg_load_by(qs, q + b * m.q[0] + h * m.q[1], m.q[2], row0, BR, m.rows, tid, 128);
    acl_cp_async_commit();
    if (scale_arg < 0.0) {  // Q negated (exactly), so that raw scores are scaled by |scale|
      acl_cp_async_wait<0>();
      acl_bar_sync(1, 128);  // every producer thread's Q copies landed
      for (int i = tid; i < BR * HEAD_DIM; i += 128) qs[i] ^= 0x8000u;
      acl_fence_proxy_async();
      acl_mbar_arrive(qbar);
    }
    // copy group j is K(j / 2) for even j, V(j / 2) for odd j, into slot 2 (t % STAGES) + j % 2. Group j is signalled
    // (full) once this thread's copies of it landed: after group j + 1 is committed (wait_group 1), or, where the
    // slot of group j + 1 is not free yet, before blocking on its empty barrier (the consumers may be waiting for j)
    long long pending = -1;  // the landed-but-unsignalled group
    for (long long j = 0; j < 2 * tiles; ++j) {
      const long long t = j / 2;
      const int kv = (int)(j % 2), slot = 2 * (int)(t % STAGES) + kv;
      const unsigned par = (unsigned)((t / STAGES) & 1) ^ 1u;  // tile t - STAGES released: phase t / STAGES - 1
      if (t >= STAGES && pending >= 0 && !acl_mbar_test(empty + slot, par)) {
        acl_cp_async_wait<0>();
        acl_fence_proxy_async();
        acl_mbar_arrive(full + 2 * (int)(pending / 2 % STAGES) + (int)(pending % 2));
        pending = -1;
      }
      if (t >= STAGES) acl_mbar_wait(empty + slot, par);
      unsigned short* const dst = (kv ? vs : ks) + (int)(t % STAGES) * TILE;
      wg_load_by(dst, kv ? vh : kh, kv ? m.v[2] : m.k[2], kv0 + t * BC, BC, m.kv_len, tid, 128);
      acl_cp_async_commit();
      if (j == 0 || pending >= 0) {
        acl_cp_async_wait<1>();  // Q (j == 0) or group `pending` landed
        acl_fence_proxy_async();
        if (pending >= 0)
          acl_mbar_arrive(full + 2 * (int)(pending / 2 % STAGES) + (int)(pending % 2));
        else if (scale_arg >= 0.0)  // a negative scale signalled Q above
          acl_mbar_arrive(qbar);
      }
      pending = j;
    }
    if (pending >= 0) {
      acl_cp_async_wait<0>();
      acl_fence_proxy_async();
      acl_mbar_arrive(full + 2 * (int)(pending / 2 % STAGES) + (int)(pending % 2));
    }
    return;
  }
  // (tiles == 0 with a positive scale leaves Q's phase open: no consumer waits on it)

  acl_setmaxnreg_inc<@CREGS@>();
  const int wgc = wg - 1;  // consumer warpgroup: rows 64 wgc .. of the block
  const float inf = __uint_as_float(0x7f800000u);
  const int r_lo = 64 * wgc + 16 * warp + lane / 4, cq = 2 * (lane % 4);
@SOFTMAX_STATE@
  const unsigned long long q_desc = DESC_QK(qs + wgc * Q_WG_OFFSET);
#if PINGPONG
  // a token ring over the consumers: c waits on barrier 2 + c, then passes the turn to c + 1 (the last to 0)
  const int my_turn = 2 + wgc, next_turn = 2 + (wgc + 1) % CONSUMERS;
  if (tiles > 0 && wgc == CONSUMERS - 1) acl_bar_arrive(2, 256);  // consumer 0 goes first
#endif
  if (tiles > 0) acl_mbar_wait(qbar, 0);

#if !PIPE
  for (long long t = 0; t < tiles; ++t) {
    const int s = (int)(t % STAGES);
    const unsigned par = (unsigned)((t / STAGES) & 1);
    acl_mbar_wait(full + 2 * s, par);
    float sc[SREGS];
    acl_wg_fence();
    wg_scores(sc, q_desc, DESC_QK(ks + s * TILE));
    acl_wg_wait<0>();
    wg_keep(sc);
    if (lane == 0) acl_mbar_arrive(empty + 2 * s);  // this warp's S is done: K(t)'s slot may be refilled
    unsigned pa[BC / 16][4];
    float alpha[2];
    wg_softmax(sc, alpha, m_run, l_run, sl2, m, row0, kv0 + t * BC, kv1, r_lo, cq);
    wg_pack(sc, pa);
#pragma unroll
    for (int i = 0; i < OREGS; ++i) o[i] *= alpha[(i / 2) % 2];
    acl_mbar_wait(full + 2 * s + 1, par);
    wg_keep(o);
    wg_keep_p(pa);
    acl_wg_fence();
    wg_pv(o, pa, DESC_V(vs + s * TILE));
    acl_wg_wait<0>();
    wg_keep(o);
    wg_keep_p(pa);
    if (lane == 0) acl_mbar_arrive(empty + 2 * s + 1);  // and its P V: V(t)'s slot
  }
#else
  // FlashAttention-3's intra-warpgroup overlap: S(t + 1) and P(t) V(t) issued together, the softmax of t + 1 while
  // P(t) V(t) runs; P(t) stays in pa (the A fragments) until its products are done, P(t + 1) in sc (fp32) until then
  unsigned pa[BC / 16][4];
  if (tiles > 0) {
    acl_mbar_wait(full + 0, 0);  // K(0)
#if PINGPONG
    acl_bar_sync(my_turn, 256);
#endif
    float sc[SREGS];
    acl_wg_fence();
    wg_scores(sc, q_desc, DESC_QK(ks));
#if PINGPONG
    acl_bar_arrive(next_turn, 256);
#endif
    acl_wg_wait<0>();
    wg_keep(sc);
    if (lane == 0) acl_mbar_arrive(empty + 0);  // K(0) read
    float alpha[2];
    wg_softmax(sc, alpha, m_run, l_run, sl2, m, row0, kv0, kv1, r_lo, cq);  // O is still zero: no rescale
    wg_pack(sc, pa);
  }
  for (long long t = 0; t < tiles; ++t) {
    const int s = (int)(t % STAGES), s1 = (int)((t + 1) % STAGES);
    const bool next = t + 1 < tiles;
    if (next) acl_mbar_wait(full + 2 * s1, (unsigned)(((t + 1) / STAGES) & 1));  // K(t + 1)
    acl_mbar_wait(full + 2 * s + 1, (unsigned)((t / STAGES) & 1));               // V(t)
#if PINGPONG
    acl_bar_sync(my_turn, 256);
#endif
    float sc[SREGS];
    wg_keep(o);
    wg_keep_p(pa);
    acl_wg_fence();
    // S(t + 1) is issued on the last tile too (on stage s1's stale K: nothing writes it any more, its scores are
    // unused): no branch inside the batch
    wg_scores(sc, q_desc, DESC_QK(ks + s1 * TILE));
    wg_pv(o, pa, DESC_V(vs + s * TILE));
#if PINGPONG
    if (next || wgc != CONSUMERS - 1) acl_bar_arrive(next_turn, 256);  // the ring's last arrival has no waiter
#endif
    acl_wg_wait<1>();  // S(t + 1) done (batches complete in order); P(t) V(t) may still run
    wg_keep(sc);
    if (next) {
      if (lane == 0) acl_mbar_arrive(empty + 2 * s1);  // K(t + 1) read (the last tile's S read no acquired slot)
      float alpha[2];
      wg_softmax(sc, alpha, m_run, l_run, sl2, m, row0, kv0 + (t + 1) * BC, kv1, r_lo, cq);
      acl_wg_wait<0>();
      wg_keep(o);
      wg_keep_p(pa);
      if (lane == 0) acl_mbar_arrive(empty + 2 * s + 1);  // V(t) read
#pragma unroll
      for (int i = 0; i < OREGS; ++i) o[i] *= alpha[(i / 2) % 2];
      wg_pack(sc, pa);
    } else {
      acl_wg_wait<0>();
      wg_keep(o);
      wg_keep_p(pa);
      if (lane == 0) acl_mbar_arrive(empty + 2 * s + 1);  // V(t) read
    }
  }
#endif
  wg_finish(o, m_run, l_run, m, g, out, smax, ssum, lse, b, h, row0, r_lo, cq, lane);
}
"""


def ws_flash_source(inst: WgmmaInstance) -> str:
    """The complete source of one warp-specialised wgmma flash kernel (``inst.specialised``)."""
    if (
        not inst.specialised
        or inst.dtype not in DTYPES
        or inst.head_dim not in HEAD_DIMS
        or inst.groups not in (1, 2, 3)
        or inst.block_keys not in (64, 128)
        or inst.blocks != 1
        or inst.stages not in (2, 3)
        or (inst.pingpong and (not inst.pipelined or inst.groups < 2))
    ):
        raise ValueError(f"no warp-specialised wgmma flash kernel for {inst}")
    if inst.shared_bytes > SHARED_LIMIT:
        raise ValueError(f"{inst} needs {inst.shared_bytes} bytes of shared memory a block (limit {SHARED_LIMIT})")
    tokens = {
        **shape_tokens(inst),
        "@PINGPONG@": "1" if inst.pingpong else "0",
        "@PREGS@": str(PRODUCER_REGS),
        "@CREGS@": str(consumer_regs(inst.groups)),
    }
    body = fill_body(_HELPERS + _KERNEL, inst.dtype, inst.sink, inst.kernel_name, tokens)
    ns = tuple(sorted({inst.block_keys, inst.head_dim}))
    header = f"// warp-specialised flash attention forward on wgmma (sm_90a): {inst.dtype.short}, D={inst.head_dim}"
    parts = [PRELUDE, MMA_SOURCE, wgmma_source(ns), SYNC_SOURCE, KEY_RANGE_SOURCE, f"{header}, {inst.config}", body]
    return "\n".join(parts)

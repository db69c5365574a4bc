"""Warpgroup matrix multiply-accumulate (Hopper ``wgmma.mma_async``, sm_90a only) for kernel source.

A warpgroup is four consecutive warps (128 threads, the first warp's index a multiple of 4); one
``wgmma.mma_async.sync.aligned.m64nNk16.f32.{bf16,f16}.{bf16,f16}`` computes ``D[64 x N] (+)= A[64 x 16]
B[16 x N]`` with B (and A in the SS form) read from shared memory through 64-bit matrix descriptors, or
A from registers (the RS form). :func:`wgmma_source` (after the prelude and ``MMA_SOURCE``) gives kernels:

* ``acl_wg_desc(smem, lbo, sbo)``: the descriptor of an operand in the no-swizzle ("interleave") layout
  (PTX ISA, "Matrix Descriptor Format"): bits 0-13 the start address ``(addr & 0x3FFFF) >> 4``, 16-29 the
  leading dimension byte offset ``>> 4``, 32-45 the stride dimension byte offset ``>> 4``, 49-51 the base
  offset (0), 62-63 the swizzle mode (0: none). In the no-swizzle layout an operand is a grid of *core
  matrices* of 8 rows x 16 bytes (8 x 8 16-bit elements), each 128 contiguous bytes; LBO is the byte
  distance between core matrices adjacent along K, SBO between core matrices adjacent along M (A) or N
  (B), for K-major and MN-major operands alike. :func:`interleaved_offset` is the element offset this
  module's loaders use (rows of ``cols`` elements: core matrix (row / 8, col / 8) at
  ``((row / 8) * (cols / 8) + col / 8) * 64``, element ``(row % 8) * 8 + col % 8`` in it): with rows along
  M/N and columns along K (Q, K of attention: K-major, ``imm-trans = 0``) LBO = 128 and SBO = ``cols * 16``;
  with rows along K and columns along N (V of attention: N-major, ``imm-trans-b = 1``) LBO = ``cols * 16``
  and SBO = 128. A k16 step advances K-major descriptors by 256 bytes, N-major ones by ``2 * cols * 16``.
* ``acl_wg_ss_n<N>_<bf16|f16><TA, TB>(d, desc_a, desc_b, accumulate)`` and
  ``acl_wg_rs_n<N>_<..><TB>(d, a, desc_b, accumulate)``: one k16 step; ``d`` is ``float[N / 2]``,
  ``a`` ``unsigned[4]`` (pairs of 16-bit elements, the lower column in bits 0-15); ``accumulate`` 0 makes
  the step write ``A B`` (the scale-d predicate false), else ``D + A B``. imm-scale-a/b are 1.
* ``acl_wg_fence()`` (``wgmma.fence``: before the first wgmma of a batch and after registers it reads, the
  accumulator or A fragments, were written by other instructions), ``acl_wg_commit()``,
  ``acl_wg_wait<N>()`` (all but the N newest committed batches complete), ``acl_wg_keep(x)`` (an empty asm
  that makes the compiler treat ``x`` as rewritten there: after a wait, so that no read of the accumulator
  is hoisted above it; before a fence, so that writes to it are not sunk below), and
  ``acl_fence_proxy_async()`` (``fence.proxy.async.shared::cta``: shared memory written by ``cp.async`` or
  plain stores, the generic proxy, made visible to wgmma's operand reads, the async proxy; each writer
  fences after its copies land, then the block's barrier).

On the CPU kernel emulator (``ACL_EMULATOR``, ``tests/rocm/kernel_emulator.py``) the SS step is software: each thread
computes its own accumulator elements from the operands' shared-memory addresses as the descriptors give them (the
layouts above, the swizzle XOR on address bits 4-9), fences / commit / wait are no-ops and shared addresses are offsets
into the block's dynamic array; the RS step gathers a warp's A fragments by the emulator's warp exchange
(``ACL_WARP_ALLGATHER``) and computes the same way.

Fragment ownership (PTX ISA, "Register Fragments", m64nNk16): thread ``t`` of the warpgroup is lane
``t % 32`` of warp ``w = t / 32``; with ``g = lane / 4``, ``q = lane % 4``, accumulator element ``i`` holds
``D[16 w + g + 8 ((i / 2) % 2)][8 (i / 4) + 2 q + i % 2]`` (:func:`acc_owner`); register ``r`` of the A
fragment holds ``A[16 w + g + 8 (r % 2)][8 (r / 2) + 2 q + {0, 1}]`` (:func:`a_owner`): so accumulator
elements ``8 kk .. 8 kk + 7`` (columns ``16 kk .. 16 kk + 15``), packed in pairs in order, are the A fragment
of k-block ``kk`` (attention's P).
"""

from __future__ import annotations

from typing import Final

WGMMA_N: Final = (64, 128)
"""The N of the MMA functions :func:`wgmma_source` emits by default (attention's key tiles and head dims)."""
WARPGROUP: Final = 128
"""Threads of a warpgroup."""


def interleaved_offset(row: int, col: int, cols: int) -> int:
    """The element offset of (row, col) in a no-swizzle tile of rows of ``cols`` 16-bit elements (core matrices)."""
    return ((row // 8) * (cols // 8) + col // 8) * 64 + (row % 8) * 8 + col % 8


def swizzled_offset(row: int, col: int, rows: int) -> int:
    """The element offset of (row, col) in a 128-byte-swizzled tile of ``rows`` rows of 16-bit elements.

    Columns go in blocks of 64 (128 bytes: one swizzle atom's row), a block's ``rows`` rows 128 bytes apart and
    blocks ``rows * 128`` bytes apart; within an 8-row x 128-byte atom (1024 bytes, 1024-byte aligned) the
    16-byte chunk ``col % 64 / 8`` of row ``row`` sits at chunk ``(col % 64 / 8) ^ (row % 8)``.
    """
    return (col // 64) * rows * 64 + row * 64 + ((((col % 64) // 8) ^ (row % 8)) * 8) + col % 8


def kmajor_step(kstep: int, rows: int, swizzle: bool) -> int:
    """The descriptor advance (16-byte units) of k16 step ``kstep`` of a K-major operand of ``rows`` rows (the
    no-swizzle layout: 256 bytes a step; 128-byte swizzle: 32 bytes within a 64-column block, ``rows * 128``
    bytes a block)."""
    return (kstep // 4) * (rows * 8) + (kstep % 4) * 2 if swizzle else 16 * kstep


def acc_owner(thread: int, i: int) -> tuple[int, int]:
    """(row, column) of accumulator element ``i`` of warpgroup thread ``thread`` (m64nNk16, fp32)."""
    warp, lane = divmod(thread, 32)
    return 16 * warp + lane // 4 + 8 * ((i // 2) % 2), 8 * (i // 4) + 2 * (lane % 4) + i % 2


def a_owner(thread: int, reg: int, half: int) -> tuple[int, int]:
    """(row, k) of the 16-bit element in bits ``16 * half`` of A-fragment register ``reg`` (0..3) of ``thread``."""
    warp, lane = divmod(thread, 32)
    return 16 * warp + lane // 4 + 8 * (reg % 2), 8 * (reg // 2) + 2 * (lane % 4) + half


def desc_fields(desc: int) -> dict[str, int]:
    """The fields of a descriptor value (start address, LBO and SBO in bytes; base offset; swizzle mode)."""
    return {
        "start": (desc & 0x3FFF) << 4,
        "lbo": ((desc >> 16) & 0x3FFF) << 4,
        "sbo": ((desc >> 32) & 0x3FFF) << 4,
        "base_offset": (desc >> 49) & 0x7,
        "swizzle": (desc >> 62) & 0x3,
    }


def make_desc(address: int, lbo: int, sbo: int, swizzle: int = 0) -> int:
    """The descriptor ``acl_wg_desc`` (``swizzle`` 0) or ``acl_wg_desc_sw128`` (1) builds (the Python twin, for
    tests): base offset 0."""
    desc = ((address & 0x3FFFF) >> 4) | (((lbo & 0x3FFFF) >> 4) << 16) | (((sbo & 0x3FFFF) >> 4) << 32)
    return desc | (swizzle << 62)


_COMMON: Final = r"""
// wgmma (sm_90a): descriptors, fences, commit / wait
#if defined(ACL_EMULATOR)  // the CPU kernel emulator: a shared address is an offset into the block's dynamic array
ACL_DEV unsigned acl_wg_smem(const void* p) { return (unsigned)((const unsigned char*)p - emu_shared_base); }
#else
ACL_DEV unsigned acl_wg_smem(const void* p) {
  unsigned r;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
  return r;
}
#endif
// a no-swizzle operand descriptor: start address, LBO (core-matrix stride along K), SBO (along M / N), in bytes
ACL_DEV unsigned long long acl_wg_desc(const void* smem, unsigned lbo, unsigned sbo) {
  const unsigned addr = acl_wg_smem(smem);
  return (unsigned long long)((addr & 0x3FFFFu) >> 4) | ((unsigned long long)((lbo & 0x3FFFFu) >> 4) << 16) |
         ((unsigned long long)((sbo & 0x3FFFFu) >> 4) << 32);
}
// a 128-byte-swizzle operand descriptor (mode 1 in bits 62-63); the tile 1024-byte aligned. K-major: LBO unused,
// SBO 1024 (the next 8 rows); MN-major: LBO the next 64 MN elements' block, SBO 1024 (the next 8 K rows)
ACL_DEV unsigned long long acl_wg_desc_sw128(const void* smem, unsigned lbo, unsigned sbo) {
  return acl_wg_desc(smem, lbo, sbo) | (1ull << 62);
}
// the element offset of (row, col) in a 128-byte-swizzled tile of `rows` rows (swizzled_offset's twin)
ACL_DEV int acl_wg_sw128(int row, int col, int rows) {
  return (col / 64) * rows * 64 + row * 64 + ((((col % 64) / 8) ^ (row % 8)) * 8) + col % 8;
}
#if defined(ACL_EMULATOR)
// the emulator's software SS step (:func:`soft_address` is its twin): each thread computes its own accumulator
// elements from the operands in shared memory at issue time, so fences, commits and waits have nothing to order
ACL_DEV void acl_wg_fence() {}
ACL_DEV void acl_wg_commit() {}
template <int N> ACL_DEV void acl_wg_wait() {}
ACL_DEV void acl_fence_proxy_async() {}
ACL_DEV void acl_wg_keep(float& x) { (void)x; }
ACL_DEV void acl_wg_keep(unsigned& x) { (void)x; }
// the shared element a descriptor reads for (mn, k): mn along M / N, k along K; mn_major: the operand's rows run
// along K (imm-trans 1); the 128-byte swizzle XORs address bits 4-6 with bits 7-9
ACL_DEV const unsigned short* acl_wg_soft_at(unsigned long long desc, int mn, int k, int mn_major) {
  const unsigned start = (unsigned)(desc & 0x3FFFull) << 4, lbo = (unsigned)((desc >> 16) & 0x3FFFull) << 4;
  const unsigned sbo = (unsigned)((desc >> 32) & 0x3FFFull) << 4;
  const bool swz = ((desc >> 62) & 3ull) != 0;
  unsigned a;
  if (!mn_major)
    a = swz ? start + (mn / 8) * sbo + (mn % 8) * 128 + 2 * k
            : start + (mn / 8) * sbo + (k / 8) * lbo + (mn % 8) * 16 + (k % 8) * 2;
  else
    a = swz ? start + (mn / 64) * lbo + (k / 8) * sbo + (k % 8) * 128 + 2 * (mn % 64)
            : start + (k / 8) * lbo + (mn / 8) * sbo + (k % 8) * 16 + (mn % 8) * 2;
  if (swz) a ^= ((a >> 7) & 7u) << 4;
  return (const unsigned short*)(emu_shared_base + a);
}
template <int N, bool BF16, int TA, int TB>
ACL_DEV void acl_wg_soft_ss(float (&d)[N / 2], unsigned long long da, unsigned long long db, int accumulate) {
  const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
  for (int i = 0; i < N / 2; ++i) {
    const int row = 16 * warp + lane / 4 + 8 * ((i / 2) % 2), col = 8 * (i / 4) + 2 * (lane % 4) + i % 2;
    float s = accumulate ? d[i] : 0.0f;
    for (int k = 0; k < 16; ++k) {
      const unsigned short a = *acl_wg_soft_at(da, row, k, TA), b = *acl_wg_soft_at(db, col, k, TB);
      s = fmaf(BF16 ? acl_b2f(a) : acl_h2f(a), BF16 ? acl_b2f(b) : acl_h2f(b), s);
    }
    d[i] = s;
  }
}
#if defined(ACL_WARP_ALLGATHER)
// the software RS step: A (64 x 16) in the warpgroup's registers, a warp's 16 rows in its own lanes (a_owner's
// layout), so one warp exchange gives each thread its rows: (row r of the warp, k) in lane (r % 8) * 4 + (k % 8) / 2,
// register r / 8 + 2 (k / 8), half k % 2
template <int N, bool BF16, int TB>
ACL_DEV void acl_wg_soft_rs(float (&d)[N / 2], const unsigned (&a)[4], unsigned long long db, int accumulate) {
  unsigned all[32 * 4];
  ACL_WARP_ALLGATHER(a, all, 4);
  const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
  for (int i = 0; i < N / 2; ++i) {
    const int r = lane / 4 + 8 * ((i / 2) % 2), col = 8 * (i / 4) + 2 * (lane % 4) + i % 2;
    float s = accumulate ? d[i] : 0.0f;
    for (int k = 0; k < 16; ++k) {
      const unsigned word = all[((r % 8) * 4 + (k % 8) / 2) * 4 + r / 8 + 2 * (k / 8)];
      const unsigned short av = (unsigned short)(k % 2 ? word >> 16 : word & 0xffffu);
      const unsigned short b = *acl_wg_soft_at(db, col, k, TB);
      s = fmaf(BF16 ? acl_b2f(av) : acl_h2f(av), BF16 ? acl_b2f(b) : acl_h2f(b), s);
    }
    d[i] = s;
  }
  (void)warp;
}
#else
template <int N, bool BF16, int TB>
ACL_DEV void acl_wg_soft_rs(float (&d)[N / 2], const unsigned (&a)[4], unsigned long long db, int accumulate) {
  static_assert(TB < 0, "the emulator's RS step needs its warp exchange (ACL_WARP_ALLGATHER)");
}
#endif
#else
ACL_DEV void acl_wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
ACL_DEV void acl_wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> ACL_DEV void acl_wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory"); }
ACL_DEV void acl_fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
ACL_DEV void acl_wg_keep(float& x) { asm volatile("" : "+f"(x)::"memory"); }
ACL_DEV void acl_wg_keep(unsigned& x) { asm volatile("" : "+r"(x)::"memory"); }
#endif
"""


SYNC_SOURCE: Final = r"""
// sm_90 block-internal signalling for warp-specialised kernels: mbarriers in shared memory, named barriers, and
// setmaxnreg (a warpgroup's registers a thread, the pool shared by the block's warpgroups)
ACL_DEV void acl_mbar_init(unsigned long long* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(acl_wg_smem(bar)), "r"(count) : "memory");
}
// one arrival (release: this thread's earlier writes, fenced to the async proxy where wgmma reads them, are visible
// to a thread whose wait sees the phase complete)
ACL_DEV void acl_mbar_arrive(unsigned long long* bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}" ::"r"(acl_wg_smem(bar)) : "memory");
}
// until the phase of parity `parity` has completed (acquire)
ACL_DEV void acl_mbar_wait(unsigned long long* bar, unsigned parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}" ::"r"(acl_wg_smem(bar)),
      "r"(parity)
      : "memory");
}
// whether the phase of parity `parity` has completed (acquire when it has; never blocks)
ACL_DEV bool acl_mbar_test(unsigned long long* bar, unsigned parity) {
  unsigned done;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}"
      : "=r"(done)
      : "r"(acl_wg_smem(bar)), "r"(parity)
      : "memory");
  return done != 0;
}
// named barrier `id` (1..15; 0 is __syncthreads) of `count` threads: wait / only arrive
ACL_DEV void acl_bar_sync(int id, int count) { asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory"); }
ACL_DEV void acl_bar_arrive(int id, int count) { asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(count) : "memory"); }
template <int N> ACL_DEV void acl_setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N)); }
template <int N> ACL_DEV void acl_setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N)); }
"""
"""mbarrier, named-barrier and ``setmaxnreg`` helpers (sm_90a; after :func:`wgmma_source`, whose ``acl_wg_smem`` they
use)."""


def _mma_function(form: str, n: int, bf16: bool) -> str:
    """One k16 step of ``wgmma.mma_async`` m64n``n``k16 (``form`` "ss": A by descriptor, "rs": A in registers)."""
    t = "bf16" if bf16 else "f16"
    regs = n // 2
    outs = ", ".join(f"%{i}" for i in range(regs))
    out_ops = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
    if form == "ss":
        pred, tail = regs + 2, f"%{regs}, %{regs + 1}, p, 1, 1, %{regs + 3}, %{regs + 4}"
        ins = '"l"(da), "l"(db), "r"(accumulate), "n"(TA), "n"(TB)'
        head = f"template <int TA, int TB> ACL_DEV void acl_wg_ss_n{n}_{t}(float (&d)[{regs}], "
        head += "unsigned long long da, unsigned long long db, int accumulate)"
    else:
        a = ", ".join(f"%{regs + i}" for i in range(4))
        pred, tail = regs + 5, f"{{{a}}}, %{regs + 4}, p, 1, 1, %{regs + 6}"
        ins = '"r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate), "n"(TB)'
        head = f"template <int TB> ACL_DEV void acl_wg_rs_n{n}_{t}(float (&d)[{regs}], const unsigned (&a)[4], "
        head += "unsigned long long db, int accumulate)"
    asm = (
        f'"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{pred}, 0;\\n"\n'
        f'      "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{t}.{t} {{{outs}}}, {tail};\\n}}\\n"'
    )
    if form == "ss":  # the emulator's software step
        soft = f"acl_wg_soft_ss<{n}, {'true' if bf16 else 'false'}, TA, TB>(d, da, db, accumulate);"
    else:  # the A fragments live in the warp's lanes: one warp exchange (the emulator's ACL_WARP_ALLGATHER)
        soft = f"acl_wg_soft_rs<{n}, {'true' if bf16 else 'false'}, TB>(d, a, db, accumulate);"
    asm_call = f"asm volatile(\n      {asm}\n      : {out_ops}\n      : {ins});"
    return f"{head} {{\n#if defined(ACL_EMULATOR)\n  {soft}\n#else\n  {asm_call}\n#endif\n}}\n"


def wgmma_source(ns: tuple[int, ...] = WGMMA_N) -> str:
    """The helpers and the SS / RS MMA functions for every N in ``ns`` (bf16 and fp16); after the prelude."""
    if any(n % 8 or not 8 <= n <= 256 for n in ns):
        raise ValueError(f"wgmma N must be a multiple of 8 in 8..256, not {ns}")
    parts = [_COMMON]
    for n in ns:
        for bf16 in (True, False):
            parts += [_mma_function("ss", n, bf16), _mma_function("rs", n, bf16)]
    return "\n".join(parts)


def tile_kernel_name(n: int, bf16: bool, form: str, trans_b: int, ksteps: int, swizzle: bool = False) -> str:
    """The name of :func:`tile_source`'s kernel."""
    sw = "_sw128" if swizzle else ""
    return f"acl_wg_tile_{form}_n{n}_{'bf16' if bf16 else 'f16'}_tb{trans_b}_k{16 * ksteps}{sw}"


def tile_regions(n: int, trans_b: int, ksteps: int, swizzle: bool) -> tuple[int, int]:
    """(A's, B's) shared elements in :func:`tile_source`: a swizzled K-major operand's rows are whole 128-byte
    atoms, so one with K under 64 still spans 64 columns (K 16 in 64 x 16 elements would overrun into B)."""
    kd = 16 * ksteps
    k_major = max(kd, 64) if swizzle else kd
    return 64 * k_major, n * (kd if trans_b else k_major)


def tile_source(n: int, bf16: bool, form: str, trans_b: int, ksteps: int, swizzle: bool = False) -> str:
    """A one-warpgroup kernel computing ``D[64 x n] = A[64 x 16 ksteps] B`` with one wgmma per k16 step (tests).

    Arguments: ``a`` (row-major 64 x K), ``b`` (``trans_b`` 0: row-major n x K, B's transpose, K-major; 1:
    row-major K x n, N-major), ``d`` (row-major 64 x n fp32), and B's descriptor strides ``lbo_b`` / ``sbo_b``
    in bytes (runtime: a test can try the other reading of them). A and B are staged in shared memory in the
    no-swizzle layout (:func:`interleaved_offset`) or, with ``swizzle``, the 128-byte-swizzled one
    (:func:`swizzled_offset`, 1024-byte aligned; K 128 too: two column blocks); A goes by descriptor (``form``
    "ss": no swizzle LBO 128, SBO K * 16; swizzled SBO 1024) or from registers in the fragment layout (``form``
    "rs"); every thread stores its accumulator elements where :func:`acc_owner` says they belong. Only the
    first 128 threads of the launch take part.
    """
    from acl_rocm.kernels.mma import MMA_SOURCE
    from acl_rocm.kernels.prelude import PRELUDE

    allowed = (1, 2, 4, 8) if swizzle else (1, 2, 4)
    if form not in ("ss", "rs") or trans_b not in (0, 1) or ksteps not in allowed:
        raise ValueError(f"no wgmma tile kernel for {form} trans_b={trans_b} ksteps={ksteps} swizzle={swizzle}")
    a_elems, b_elems = tile_regions(n, trans_b, ksteps, swizzle)
    if (a_elems + b_elems) * 2 + 1024 > 48 * 1024:
        raise ValueError(f"the wgmma tile kernel n={n} ksteps={ksteps} needs more than 48 KiB of static shared memory")
    t = "bf16" if bf16 else "f16"
    call = (
        f"acl_wg_ss_n{n}_{t}<0, {trans_b}>(d, desc_a + A_STEP(ks), desc_b + B_STEP(ks), ks)"
        if form == "ss"
        else f"acl_wg_rs_n{n}_{t}<{trans_b}>(d, af[ks], desc_b + B_STEP(ks), ks)"
    )
    body = rf"""
#define N {n}
#define KS {ksteps}
#define KD (16 * KS)
#define A_ELEMS {a_elems}
#define SW {int(swizzle)}
#define TB {trans_b}
#if SW  // 128-byte swizzle: K-major steps 32 bytes inside a 64-column block, rows * 128 bytes a block
#define KSTEP(ks, rows) (((ks) / 4) * ((rows) * 8) + ((ks) % 4) * 2)
#define A_STEP(ks) KSTEP(ks, 64)
#define B_STEP(ks) (TB ? (ks) * 128 : KSTEP(ks, N))
#define OFF(r, c, cols, rows) acl_wg_sw128(r, c, rows)
#define DESC acl_wg_desc_sw128
#define A_LBO 16
#define A_SBO 1024
#else
#define A_STEP(ks) (16 * (ks))
#define B_STEP(ks) (TB ? (ks) * 2 * N : 16 * (ks))
#define OFF(r, c, cols, rows) ((((r) / 8) * ((cols) / 8) + (c) / 8) * 64 + ((r) % 8) * 8 + (c) % 8)
#define DESC acl_wg_desc
#define A_LBO 128
#define A_SBO (KD * 16)
#endif
extern "C" __global__ void __launch_bounds__(128, 1) {tile_kernel_name(n, bf16, form, trans_b, ksteps, swizzle)}(
    const unsigned short* __restrict__ a, const unsigned short* __restrict__ b, float* __restrict__ out,
    const int lbo_b, const int sbo_b) {{
  __shared__ alignas(128) unsigned short raw[A_ELEMS + {b_elems} + 512];
  // 1024-byte aligned (the swizzle pattern follows address bits 4-9)
  unsigned short* const as = raw + ((1024u - (acl_wg_smem(raw) & 1023u)) & 1023u) / 2;
  unsigned short* const bs = as + A_ELEMS;
  const int tid = threadIdx.x;
  if (tid >= 128) return;
  for (int i = tid; i < 64 * KD; i += 128) {{  // A: rows along M, columns along K
    const int r = i / KD, c = i % KD;
    as[OFF(r, c, KD, 64)] = a[i];
  }}
  for (int i = tid; i < N * KD; i += 128) {{
#if TB  // B row-major K x N: rows along K, columns along N (N-major)
    const int r = i / N, c = i % N, cols = N, rows = KD;
#else  // B^T row-major N x K: rows along N, columns along K (K-major)
    const int r = i / KD, c = i % KD, cols = KD, rows = N;
#endif
    (void)cols;
    (void)rows;
    bs[OFF(r, c, cols, rows)] = b[i];
  }}
  acl_fence_proxy_async();
  __syncthreads();
  const unsigned long long desc_a = DESC(as, A_LBO, A_SBO);
  const unsigned long long desc_b = DESC(bs, lbo_b, sbo_b);
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, q = lane % 4;
  unsigned af[KS][4];
#pragma unroll
  for (int ks = 0; ks < KS; ++ks)
#pragma unroll
    for (int r = 0; r < 4; ++r)
      af[ks][r] = *(const unsigned*)(a + (16 * warp + g + 8 * (r % 2)) * KD + 16 * ks + 8 * (r / 2) + 2 * q);
  float d[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d[i] = 0.0f;
#pragma unroll
  for (int i = 0; i < N / 2; ++i) acl_wg_keep(d[i]);
  acl_wg_fence();
#pragma unroll
  for (int ks = 0; ks < KS; ++ks) {call};
  acl_wg_commit();
  acl_wg_wait<0>();
#pragma unroll
  for (int i = 0; i < N / 2; ++i) acl_wg_keep(d[i]);
  (void)desc_a;
  (void)af;
#pragma unroll
  for (int i = 0; i < N / 2; ++i)
    out[(16 * warp + g + 8 * ((i / 2) % 2)) * N + 8 * (i / 4) + 2 * q + i % 2] = d[i];
}}
"""
    return "\n".join([PRELUDE, MMA_SOURCE, wgmma_source((n,)), body])

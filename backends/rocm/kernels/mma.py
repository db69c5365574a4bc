"""Warp-level matrix multiply-accumulate for kernel source: one 16x16x16 fp16/bf16 -> fp32 (or 16x32x16 int8 -> int32)
tile per warp.

:data:`MMA_SOURCE` (after the prelude) gives kernels a tile product ``C += A B`` with A 16x16 (M x K),
B 16x16 (K x N) and C 16x16 fp32, spread over the warp in fragments whose per-lane ownership is
known: ``acl_mma_{a,b,c}_{row,col}(lane, e)`` say which matrix element element ``e`` of ``lane``'s
fragment holds, so a kernel can reduce accumulator rows in registers. One layout per platform:

====== ============================ ===== ================================================================
layout platform                     warp  fragments (A / B / C elements per lane)
====== ============================ ===== ================================================================
1      NVIDIA sm_80+ (two           32    8 / 8 / 8: ``mma.sync.m16n8k16`` (PTX), ``ldmatrix`` loads;
       m16n8k16 per tile)                 C rows ``lane/4`` and ``lane/4 + 8``, a row shared by 4 lanes
2      AMD CDNA2/3/4 (gfx90a,       64    4 / 4 / 4: ``v_mfma_f32_16x16x16{bf16_1k,f16}``; C rows
       gfx94x, gfx950)                    ``4*(lane/16) + e``, column ``lane % 16``
3      AMD RDNA3 (gfx11)            32    16 / 16 / 8: ``v_wmma_f32_16x16x16_*_w32``; A and B replicated in
                                          both half-waves; C rows ``2e + lane/16``
4      AMD RDNA4 (gfx12)            32    8 / 8 / 8: ``v_wmma_*_w32_gfx12``; C rows ``8*(lane/16) + e``
====== ============================ ===== ================================================================

The AMD layouts are the ones AMD's matrix instruction calculator prints for those instructions
(checked entry by entry; :func:`owner` mirrors them in Python). Where no matrix instruction exists
(no ``__CUDA_ARCH__ >= 800``, no listed gfx target, and the CPU kernel emulator) ``ACL_MMA_HW`` is 0
and a software path computes the same warp-collective product in the same layout: every lane
publishes its fragments (``ACL_WARP_ALLGATHER``: indexed shuffles, or the emulator's own exchange),
then computes its accumulator elements in fp32. The layout is chosen by the warp size there (1 for 32
lanes, 2 for 64), or by ``-DACL_MMA_LAYOUT=n``, so the emulator runs every layout's bookkeeping.

API (all warp-collective: every lane of the warp calls it):

* ``AclMmaA`` / ``AclMmaB``: 16-bit elements packed in pairs (element ``2i`` in the low half of ``r[i]``);
  ``AclMmaC``: ``float x[ACL_MMA_C_ELEMS]``.
* ``acl_mma_load_a(a, tile, ld)``: A[m][k] = ``tile[m*ld + k]``; ``acl_mma_load_b_kn(b, tile, ld)``:
  B[k][n] = ``tile[k*ld + n]`` (k-major rows: V of attention, a [K, N] weight);
  ``acl_mma_load_b_nk(b, tile, ld)``: B[k][n] = ``tile[n*ld + k]`` (K of Q K^T, a [N, K] weight). The
  tile is in shared memory with 16-byte aligned rows (pointer and ``ld * 2`` bytes multiples of 16): on
  NVIDIA these are ``ldmatrix`` (``.trans`` for ``_kn``). ``acl_mma_gather_{a,b_kn,b_nk}`` take any
  pointer and alignment (element loads).
* ``acl_mma<BF16>(c, a, b)``: ``c += a b`` (``BF16`` true: bf16 inputs, false: fp16).
* ``acl_mma_i8(ci, a, b)``: ``ci += a b`` over int8, a 16 x 32 x 16 (M x K x N) tile into exact int32
  (``AclMmaCi``: ``int x[ACL_MMA_C_ELEMS]``, the C layout above). Each 16-bit fragment element holds a pair
  of int8 neighbours along K (A (m, k): bytes (m, 2k), (m, 2k + 1); B (k, n): (2k, n), (2k + 1, n)), so
  K-contiguous int8 rows load with ``acl_mma_load_a`` / ``acl_mma_load_b_nk`` / the gathers as they are
  (``ld`` in 16-bit units; there is no int8 ``_kn`` load). NVIDIA sm_80+: two ``mma.sync.m16n8k32.s8``
  (``ACL_MMA_I8_HW`` 1), whose fragments are exactly these pairs; elsewhere, AMD included, the software
  product in the layout's bookkeeping (``ACL_MMA_I8_HW`` 0: AMD's int8 matrix instructions differ in K and
  fragments per generation and are not issued). Exact while a sum of products fits int32 (K < 2^17).
* ``acl_mma_c_row / _col(lane, e)``; row slots: a lane's C elements cover ``ACL_MMA_C_SLOTS`` distinct
  rows, element ``e`` in slot ``acl_mma_c_slot(e)`` (row ``acl_mma_slot_row(lane, s)``); the
  ``ACL_MMA_ROW_LANES`` lanes that share a row differ in the low bits of the lane id, so a row
  reduction is a butterfly over ``ACL_SHFL_XOR`` offsets ``1 .. ACL_MMA_ROW_LANES / 2``.
* ``acl_mma_c_to_a<BF16>(a, c, scratch)``: an accumulator tile rounded to fp16/bf16 as the next
  product's A operand (attention's P); in registers where ``ACL_MMA_C_TO_A_REGS`` (layout 1), else
  through ``scratch``: ``ACL_MMA_SCRATCH`` 16-bit elements of shared memory per warp.
* ``acl_cp_async16(dst_shared, src_global, valid)`` / ``acl_cp_async_commit()`` /
  ``acl_cp_async_wait_all()`` / ``acl_cp_async_wait<N>()`` (all but the ``N`` newest committed groups
  landed): a 16-byte global-to-shared copy (zeros where ``!valid``), asynchronous on sm_80+
  (``cp.async``), a plain copy elsewhere.
"""

from __future__ import annotations

from typing import Final, Literal

from acl_rocm.arch import ArchInfo
from acl_rocm.kernels.reduction import SHUFFLE_XOR

Operand = Literal["a", "b", "c"]
LAYOUTS: Final = (1, 2, 3, 4)
LAYOUT_WARP: Final = {1: 32, 2: 64, 3: 32, 4: 32}
"""The warp size each layout is defined for."""
ELEMS: Final = {1: (8, 8, 8), 2: (4, 4, 4), 3: (16, 16, 8), 4: (8, 8, 8)}
"""(A, B, C) elements per lane of each layout."""
CDNA_MMA: Final = frozenset({"gfx90a", "gfx940", "gfx941", "gfx942", "gfx950"})
RDNA3_MMA: Final = frozenset({"gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153"})
RDNA4_MMA: Final = frozenset({"gfx1200", "gfx1201"})


def hardware_layout(arch: ArchInfo) -> int | None:
    """The layout the platform's matrix instruction computes on ``arch``, or None (the software path runs)."""
    name = arch.name.split(":")[0]
    if arch.vendor == "nvidia":
        digits = name.removeprefix("sm_").rstrip("a")
        return 1 if digits.isdigit() and int(digits) >= 80 else None
    if name in CDNA_MMA:
        return 2
    if name in RDNA3_MMA:
        return 3
    if name in RDNA4_MMA:
        return 4
    return None


def owner(layout: int, operand: Operand, lane: int, e: int) -> tuple[int, int]:
    """(row, column) of the tile element that element ``e`` of ``lane``'s ``operand`` fragment holds.

    The Python twin of ``acl_mma_{a,b,c}_{row,col}``: A is [M][K], B is [K][N], C is [M][N].
    """
    g, t, half = lane >> 2, lane & 3, lane >> 4
    col16 = lane & 15
    if layout == 1:
        if operand == "a":
            return g + 8 * ((e >> 1) & 1), 2 * t + (e & 1) + 8 * (e >> 2)
        if operand == "b":
            return 2 * t + (e & 1) + 8 * ((e >> 1) & 1), g + 8 * (e >> 2)
        return g + 8 * ((e >> 1) & 1), 2 * t + (e & 1) + 8 * (e >> 2)
    if layout == 2:
        k = 4 * half + e
        return (col16, k) if operand == "a" else (k, col16)
    if layout == 3:
        if operand == "c":
            return 2 * e + half, col16
        return (col16, e) if operand == "a" else (e, col16)
    if layout == 4:
        if operand == "c":
            return 8 * half + e, col16
        k = 8 * (e >> 2) + 4 * half + (e & 3)
        return (col16, k) if operand == "a" else (k, col16)
    raise ValueError(f"unknown matrix layout {layout}")


CP_ASYNC_SOURCE: Final = r"""
// 16-byte global -> shared copies: cp.async on sm_80+, a plain copy elsewhere; zeros where !valid
ACL_DEV void acl_cp_async16(void* dst, const void* src, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  unsigned d;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(d) : "l"(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(valid ? 16 : 0));
#else
  AclVec<unsigned, 4> v;
  if (valid) {
    v = *(const AclVec<unsigned, 4>*)src;
  } else {
    v.v[0] = v.v[1] = v.v[2] = v.v[3] = 0u;
  }
  *(AclVec<unsigned, 4>*)dst = v;
#endif
}
ACL_DEV void acl_cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;");
#endif
}
ACL_DEV void acl_cp_async_wait_all() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}
// at most N of the committed groups still in flight (cp.async.wait_group N); a no-op where copies are plain
template <int N> ACL_DEV void acl_cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}
"""
"""16-byte global-to-shared copies (``acl_cp_async16`` and its commit / wait), part of :data:`MMA_SOURCE` and usable
alone by kernels that stage rows without matrix instructions."""

MMA_SOURCE: Final = (
    SHUFFLE_XOR
    + r"""
// ---- acl-core warp matrix multiply-accumulate (kernels/mma.py) ----
#ifndef ACL_SHFL_IDX
#if defined(__CUDA_ARCH__)
#define ACL_SHFL_IDX(v, l) __shfl_sync((acl_lane_mask_t)~(acl_lane_mask_t)0, (v), (l))
#else
#define ACL_SHFL_IDX(v, l) __shfl((v), (l))
#endif
#endif
#ifndef ACL_WARP_SYNC
#if defined(__CUDA_ARCH__)
#define ACL_WARP_SYNC() __syncwarp()
#else
#define ACL_WARP_SYNC()                                  \
  do {                                                   \
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront"); \
    __builtin_amdgcn_wave_barrier();                     \
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront"); \
  } while (0)
#endif
#endif

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define ACL_MMA_HW 1
#define ACL_MMA_LAYOUT 1
#elif defined(__gfx90a__) || defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__) || defined(__gfx950__)
#define ACL_MMA_HW 1
#define ACL_MMA_LAYOUT 2
#elif defined(__gfx1100__) || defined(__gfx1101__) || defined(__gfx1102__) || defined(__gfx1103__) || \
    defined(__gfx1150__) || defined(__gfx1151__) || defined(__gfx1152__) || defined(__gfx1153__)
#define ACL_MMA_HW 1
#define ACL_MMA_LAYOUT 3
#elif defined(__gfx1200__) || defined(__gfx1201__)
#define ACL_MMA_HW 1
#define ACL_MMA_LAYOUT 4
#else
#define ACL_MMA_HW 0
#ifndef ACL_MMA_LAYOUT
#if ACL_WARP_SIZE == 64
#define ACL_MMA_LAYOUT 2
#else
#define ACL_MMA_LAYOUT 1
#endif
#endif
#endif
#if (ACL_MMA_LAYOUT == 2) != (ACL_WARP_SIZE == 64)
#error "matrix layout 2 is the 64-lane one; layouts 1, 3 and 4 need 32 lanes"
#endif

#if ACL_MMA_LAYOUT == 1
#define ACL_MMA_A_ELEMS 8
#define ACL_MMA_B_ELEMS 8
#define ACL_MMA_C_ELEMS 8
#define ACL_MMA_C_SLOTS 2
#define ACL_MMA_ROW_LANES 4
#define ACL_MMA_C_TO_A_REGS 1
#elif ACL_MMA_LAYOUT == 2
#define ACL_MMA_A_ELEMS 4
#define ACL_MMA_B_ELEMS 4
#define ACL_MMA_C_ELEMS 4
#define ACL_MMA_C_SLOTS 4
#define ACL_MMA_ROW_LANES 16
#define ACL_MMA_C_TO_A_REGS 0
#elif ACL_MMA_LAYOUT == 3
#define ACL_MMA_A_ELEMS 16
#define ACL_MMA_B_ELEMS 16
#define ACL_MMA_C_ELEMS 8
#define ACL_MMA_C_SLOTS 8
#define ACL_MMA_ROW_LANES 16
#define ACL_MMA_C_TO_A_REGS 0
#elif ACL_MMA_LAYOUT == 4
#define ACL_MMA_A_ELEMS 8
#define ACL_MMA_B_ELEMS 8
#define ACL_MMA_C_ELEMS 8
#define ACL_MMA_C_SLOTS 8
#define ACL_MMA_ROW_LANES 16
#define ACL_MMA_C_TO_A_REGS 0
#else
#error "unknown ACL_MMA_LAYOUT"
#endif
#define ACL_MMA_SCRATCH (ACL_MMA_C_TO_A_REGS ? 0 : 256)

struct AclMmaA {
  unsigned r[ACL_MMA_A_ELEMS / 2];
};
struct AclMmaB {
  unsigned r[ACL_MMA_B_ELEMS / 2];
};
struct AclMmaC {
  float x[ACL_MMA_C_ELEMS];
};
struct AclMmaCi {
  int x[ACL_MMA_C_ELEMS];
};

ACL_DEV int acl_lane() { return (int)(threadIdx.x % ACL_WARP_SIZE); }

// which element of the 16x16 tile element e of a lane's fragment holds: A[m][k], B[k][n], C[m][n]
ACL_DEV int acl_mma_a_row(int lane, int e) {
#if ACL_MMA_LAYOUT == 1
  return (lane >> 2) + 8 * ((e >> 1) & 1);
#else
  return lane & 15;
#endif
}
ACL_DEV int acl_mma_a_col(int lane, int e) {
#if ACL_MMA_LAYOUT == 1
  return 2 * (lane & 3) + (e & 1) + 8 * (e >> 2);
#elif ACL_MMA_LAYOUT == 2
  return 4 * (lane >> 4) + e;
#elif ACL_MMA_LAYOUT == 3
  return e;
#else
  return 8 * (e >> 2) + 4 * (lane >> 4) + (e & 3);
#endif
}
ACL_DEV int acl_mma_b_row(int lane, int e) {
#if ACL_MMA_LAYOUT == 1
  return 2 * (lane & 3) + (e & 1) + 8 * ((e >> 1) & 1);
#else
  return acl_mma_a_col(lane, e);
#endif
}
ACL_DEV int acl_mma_b_col(int lane, int e) {
#if ACL_MMA_LAYOUT == 1
  return (lane >> 2) + 8 * (e >> 2);
#else
  return lane & 15;
#endif
}
ACL_DEV int acl_mma_c_row(int lane, int e) {
#if ACL_MMA_LAYOUT == 1
  return (lane >> 2) + 8 * ((e >> 1) & 1);
#elif ACL_MMA_LAYOUT == 2
  return 4 * (lane >> 4) + e;
#elif ACL_MMA_LAYOUT == 3
  return 2 * e + (lane >> 4);
#else
  return 8 * (lane >> 4) + e;
#endif
}
ACL_DEV int acl_mma_c_col(int lane, int e) {
#if ACL_MMA_LAYOUT == 1
  return 2 * (lane & 3) + (e & 1) + 8 * (e >> 2);
#else
  return lane & 15;
#endif
}
// row slots: the distinct rows of a lane's C elements
ACL_DEV int acl_mma_c_slot(int e) {
#if ACL_MMA_LAYOUT == 1
  return (e >> 1) & 1;
#else
  return e;
#endif
}
ACL_DEV int acl_mma_slot_row(int lane, int s) {
#if ACL_MMA_LAYOUT == 1
  return (lane >> 2) + 8 * s;
#else
  return acl_mma_c_row(lane, s);
#endif
}

// two fp32 values as a pair of fp16/bf16 (lo in bits 0-15), round to nearest even
template <bool BF16> ACL_DEV unsigned acl_mma_pack(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  unsigned r;
  if (BF16) asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  else asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
#else
  const unsigned a = BF16 ? acl_f2b(lo) : acl_f2h(lo);
  const unsigned b = BF16 ? acl_f2b(hi) : acl_f2h(hi);
  return a | (b << 16);
#endif
}

// element loads from any memory (any alignment)
ACL_DEV void acl_mma_gather_a(AclMmaA& a, const unsigned short* tile, int ld) {
  const int lane = acl_lane();
#pragma unroll
  for (int j = 0; j < ACL_MMA_A_ELEMS / 2; ++j) {
    const unsigned lo = tile[acl_mma_a_row(lane, 2 * j) * ld + acl_mma_a_col(lane, 2 * j)];
    const unsigned hi = tile[acl_mma_a_row(lane, 2 * j + 1) * ld + acl_mma_a_col(lane, 2 * j + 1)];
    a.r[j] = lo | (hi << 16);
  }
}
ACL_DEV void acl_mma_gather_b(AclMmaB& b, const unsigned short* tile, int k_step, int n_step) {
  const int lane = acl_lane();
#pragma unroll
  for (int j = 0; j < ACL_MMA_B_ELEMS / 2; ++j) {
    const unsigned lo = tile[acl_mma_b_row(lane, 2 * j) * k_step + acl_mma_b_col(lane, 2 * j) * n_step];
    const unsigned hi = tile[acl_mma_b_row(lane, 2 * j + 1) * k_step + acl_mma_b_col(lane, 2 * j + 1) * n_step];
    b.r[j] = lo | (hi << 16);
  }
}
ACL_DEV void acl_mma_gather_b_kn(AclMmaB& b, const unsigned short* tile, int ld) { acl_mma_gather_b(b, tile, ld, 1); }
ACL_DEV void acl_mma_gather_b_nk(AclMmaB& b, const unsigned short* tile, int ld) { acl_mma_gather_b(b, tile, 1, ld); }

#if ACL_MMA_HW && ACL_MMA_LAYOUT == 1
ACL_DEV unsigned acl_smem_u32(const void* p) {
  unsigned r;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
  return r;
}
ACL_DEV void acl_ldsm_x4(unsigned* r, const unsigned short* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(acl_smem_u32(p)));
}
ACL_DEV void acl_ldsm_x4_trans(unsigned* r, const unsigned short* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(acl_smem_u32(p)));
}
// lanes 8q .. 8q+7 address the rows of 8x8 matrix q (q = fragment register)
ACL_DEV void acl_mma_load_a(AclMmaA& a, const unsigned short* tile, int ld) {
  const int lane = acl_lane();
  acl_ldsm_x4(a.r, tile + ((lane & 7) + 8 * ((lane >> 3) & 1)) * ld + 8 * (lane >> 4));
}
ACL_DEV void acl_mma_load_b_nk(AclMmaB& b, const unsigned short* tile, int ld) {
  const int lane = acl_lane();
  acl_ldsm_x4(b.r, tile + ((lane & 7) + 8 * (lane >> 4)) * ld + 8 * ((lane >> 3) & 1));
}
ACL_DEV void acl_mma_load_b_kn(AclMmaB& b, const unsigned short* tile, int ld) {
  const int lane = acl_lane();
  acl_ldsm_x4_trans(b.r, tile + ((lane & 7) + 8 * ((lane >> 3) & 1)) * ld + 8 * (lane >> 4));
}
// one m16n8k16 into accumulator elements o .. o+3 (T: "bf16" or "f16")
#define ACL_MMA_M16N8K16(T, c, o, a, b0, b1)                                                                 \
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." T "." T ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, " \
               "{%0,%1,%2,%3};"                                                                             \
               : "+f"(c.x[o]), "+f"(c.x[o + 1]), "+f"(c.x[o + 2]), "+f"(c.x[o + 3])                         \
               : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b0), "r"(b1))
template <bool BF16> ACL_DEV void acl_mma(AclMmaC& c, const AclMmaA& a, const AclMmaB& b) {
  if (BF16) {
    ACL_MMA_M16N8K16("bf16", c, 0, a, b.r[0], b.r[1]);
    ACL_MMA_M16N8K16("bf16", c, 4, a, b.r[2], b.r[3]);
  } else {
    ACL_MMA_M16N8K16("f16", c, 0, a, b.r[0], b.r[1]);
    ACL_MMA_M16N8K16("f16", c, 4, a, b.r[2], b.r[3]);
  }
}
#else
ACL_DEV void acl_mma_load_a(AclMmaA& a, const unsigned short* tile, int ld) { acl_mma_gather_a(a, tile, ld); }
ACL_DEV void acl_mma_load_b_nk(AclMmaB& b, const unsigned short* tile, int ld) { acl_mma_gather_b_nk(b, tile, ld); }
ACL_DEV void acl_mma_load_b_kn(AclMmaB& b, const unsigned short* tile, int ld) { acl_mma_gather_b_kn(b, tile, ld); }
#endif

#if ACL_MMA_HW && ACL_MMA_LAYOUT == 2
typedef short acl_v4s __attribute__((ext_vector_type(4)));
typedef _Float16 acl_v4h __attribute__((ext_vector_type(4)));
typedef float acl_v4f __attribute__((ext_vector_type(4)));
template <bool BF16> ACL_DEV void acl_mma(AclMmaC& c, const AclMmaA& a, const AclMmaB& b) {
  acl_v4f acc = __builtin_bit_cast(acl_v4f, c);
  if (BF16)
    acc = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(__builtin_bit_cast(acl_v4s, a), __builtin_bit_cast(acl_v4s, b), acc,
                                                    0, 0, 0);
  else
    acc = __builtin_amdgcn_mfma_f32_16x16x16f16(__builtin_bit_cast(acl_v4h, a), __builtin_bit_cast(acl_v4h, b), acc, 0,
                                                0, 0);
  c = __builtin_bit_cast(AclMmaC, acc);
}
#elif ACL_MMA_HW && ACL_MMA_LAYOUT == 3
typedef short acl_v16s __attribute__((ext_vector_type(16)));
typedef _Float16 acl_v16h __attribute__((ext_vector_type(16)));
typedef float acl_v8f __attribute__((ext_vector_type(8)));
template <bool BF16> ACL_DEV void acl_mma(AclMmaC& c, const AclMmaA& a, const AclMmaB& b) {
  acl_v8f acc = __builtin_bit_cast(acl_v8f, c);
  if (BF16)
    acc = __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32(__builtin_bit_cast(acl_v16s, a), __builtin_bit_cast(acl_v16s, b),
                                                      acc);
  else
    acc = __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(__builtin_bit_cast(acl_v16h, a), __builtin_bit_cast(acl_v16h, b),
                                                     acc);
  c = __builtin_bit_cast(AclMmaC, acc);
}
#elif ACL_MMA_HW && ACL_MMA_LAYOUT == 4
typedef short acl_v8s __attribute__((ext_vector_type(8)));
typedef _Float16 acl_v8h __attribute__((ext_vector_type(8)));
typedef float acl_v8f __attribute__((ext_vector_type(8)));
template <bool BF16> ACL_DEV void acl_mma(AclMmaC& c, const AclMmaA& a, const AclMmaB& b) {
  acl_v8f acc = __builtin_bit_cast(acl_v8f, c);
  if (BF16)
    acc = __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32_gfx12(__builtin_bit_cast(acl_v8s, a),
                                                            __builtin_bit_cast(acl_v8s, b), acc);
  else
    acc = __builtin_amdgcn_wmma_f32_16x16x16_f16_w32_gfx12(__builtin_bit_cast(acl_v8h, a),
                                                           __builtin_bit_cast(acl_v8h, b), acc);
  c = __builtin_bit_cast(AclMmaC, acc);
}
#endif
#if !(ACL_MMA_HW && ACL_MMA_LAYOUT == 1)
// the software paths: every lane publishes its fragments, then computes its own accumulator elements
#ifndef ACL_WARP_ALLGATHER
template <int N> ACL_DEV void acl_warp_allgather(const unsigned* in, unsigned* out) {
  for (int l = 0; l < ACL_WARP_SIZE; ++l)
    for (int i = 0; i < N; ++i) out[l * N + i] = ACL_SHFL_IDX(in[i], l);
}
#define ACL_WARP_ALLGATHER(in, out, n) acl_warp_allgather<n>((in), (out))
#endif
// the software products' first step: every lane's A and B fragment words, lane l's at all[l * N ..]
#define ACL_MMA_GATHER_AB(a, b, all, AW, BW)                                                                   \
  unsigned all[ACL_WARP_SIZE * (AW + BW)];                                                                    \
  {                                                                                                            \
    unsigned mine[AW + BW];                                                                                    \
    for (int i = 0; i < AW; ++i) mine[i] = a.r[i];                                                             \
    for (int i = 0; i < BW; ++i) mine[AW + i] = b.r[i];                                                        \
    ACL_WARP_ALLGATHER(mine, all, AW + BW);                                                                    \
  }
#endif
#if !ACL_MMA_HW
template <bool BF16> ACL_DEV float acl_mma_elem(unsigned word, int e) {
  const unsigned short bits = (unsigned short)((e & 1) ? (word >> 16) : (word & 0xffffu));
  return BF16 ? acl_b2f(bits) : acl_h2f(bits);
}
template <bool BF16> ACL_DEV void acl_mma(AclMmaC& c, const AclMmaA& a, const AclMmaB& b) {
  const int AW = ACL_MMA_A_ELEMS / 2, BW = ACL_MMA_B_ELEMS / 2, N = AW + BW;
  ACL_MMA_GATHER_AB(a, b, all, AW, BW)
  float am[16][16], bm[16][16];
  for (int l = 0; l < ACL_WARP_SIZE; ++l) {
    for (int e = 0; e < ACL_MMA_A_ELEMS; ++e)
      am[acl_mma_a_row(l, e)][acl_mma_a_col(l, e)] = acl_mma_elem<BF16>(all[l * N + e / 2], e);
    for (int e = 0; e < ACL_MMA_B_ELEMS; ++e)
      bm[acl_mma_b_row(l, e)][acl_mma_b_col(l, e)] = acl_mma_elem<BF16>(all[l * N + AW + e / 2], e);
  }
  const int lane = acl_lane();
  for (int e = 0; e < ACL_MMA_C_ELEMS; ++e) {
    const int row = acl_mma_c_row(lane, e), col = acl_mma_c_col(lane, e);
    float s = c.x[e];
    for (int k = 0; k < 16; ++k) s += am[row][k] * bm[k][col];
    c.x[e] = s;
  }
}
#endif

// int8: c += a b over a 16 x 32 (M x K) x 32 x 16 (K x N) int8 tile into exact int32. A fragment's 16-bit
// element (m, k) of the 16x16 layout holds the int8 pair (m, 2k) (low byte) and (m, 2k + 1); a B element (k, n)
// the pair (2k, n), (2k + 1, n): the pairs run along K, so int8 rows staged K-contiguous load with the 16-bit
// loads (acl_mma_load_a / acl_mma_load_b_nk / the gathers; there is no int8 form of acl_mma_load_b_kn).
// NVIDIA sm_80+: two mma.sync.m16n8k32.s8 (its fragments are exactly these pairs); elsewhere the software
// product in the layout's bookkeeping (AMD's int8 matrix instructions are not used: their K and fragments
// differ per generation)
#if ACL_MMA_HW && ACL_MMA_LAYOUT == 1
#define ACL_MMA_M16N8K32_S8(c, o, a, b0, b1)                                                                   \
  asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "     \
               "{%0,%1,%2,%3};"                                                                              \
               : "+r"(c.x[o]), "+r"(c.x[o + 1]), "+r"(c.x[o + 2]), "+r"(c.x[o + 3])                          \
               : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b0), "r"(b1))
#define ACL_MMA_I8_HW 1
ACL_DEV void acl_mma_i8(AclMmaCi& c, const AclMmaA& a, const AclMmaB& b) {
  ACL_MMA_M16N8K32_S8(c, 0, a, b.r[0], b.r[1]);
  ACL_MMA_M16N8K32_S8(c, 4, a, b.r[2], b.r[3]);
}
#else
#define ACL_MMA_I8_HW 0
ACL_DEV int acl_mma_s8(unsigned word, int e, int h) {
  return (int)(signed char)((word >> (16 * (e & 1) + 8 * h)) & 0xffu);
}
ACL_DEV void acl_mma_i8(AclMmaCi& c, const AclMmaA& a, const AclMmaB& b) {
  const int AW = ACL_MMA_A_ELEMS / 2, BW = ACL_MMA_B_ELEMS / 2, N = AW + BW;
  ACL_MMA_GATHER_AB(a, b, all, AW, BW)
  int am[16][32], bm[32][16];
  for (int l = 0; l < ACL_WARP_SIZE; ++l) {
    for (int e = 0; e < ACL_MMA_A_ELEMS; ++e)
      for (int h = 0; h < 2; ++h)
        am[acl_mma_a_row(l, e)][2 * acl_mma_a_col(l, e) + h] = acl_mma_s8(all[l * N + e / 2], e, h);
    for (int e = 0; e < ACL_MMA_B_ELEMS; ++e)
      for (int h = 0; h < 2; ++h)
        bm[2 * acl_mma_b_row(l, e) + h][acl_mma_b_col(l, e)] = acl_mma_s8(all[l * N + AW + e / 2], e, h);
  }
  const int lane = acl_lane();
  for (int e = 0; e < ACL_MMA_C_ELEMS; ++e) {
    const int row = acl_mma_c_row(lane, e), col = acl_mma_c_col(lane, e);
    int s = c.x[e];
    for (int k = 0; k < 32; ++k) s += am[row][k] * bm[k][col];
    c.x[e] = s;
  }
}
#endif

// an accumulator tile as the next product's A operand, rounded to fp16/bf16
template <bool BF16> ACL_DEV void acl_mma_c_to_a(AclMmaA& a, const AclMmaC& c, unsigned short* scratch) {
#if ACL_MMA_C_TO_A_REGS
  // layout 1: A register j holds C elements 2j and 2j+1 (rows g / g+8, columns 2t, 2t+1 / +8)
#pragma unroll
  for (int j = 0; j < 4; ++j) a.r[j] = acl_mma_pack<BF16>(c.x[2 * j], c.x[2 * j + 1]);
#else
  const int lane = acl_lane();
#pragma unroll
  for (int e = 0; e < ACL_MMA_C_ELEMS; ++e) {
    const float v = c.x[e];
    scratch[acl_mma_c_row(lane, e) * 16 + acl_mma_c_col(lane, e)] =
        (unsigned short)(BF16 ? acl_f2b(v) : acl_f2h(v));
  }
  ACL_WARP_SYNC();
  acl_mma_gather_a(a, scratch, 16);
  ACL_WARP_SYNC();
#endif
}
"""
    + CP_ASYNC_SOURCE
    + r"""// ---- end of warp matrix multiply-accumulate ----
"""
)

"""The warp matrix layer (``kernels/mma.py``) on the CPU kernel emulator, against NumPy.

A small GEMM kernel built on the layer (shared-memory tiles, ``acl_mma_load_*``, ``acl_mma``, the
accumulator written through ``acl_mma_c_row/col``) runs for every fragment layout (1: NVIDIA's, 2:
CDNA's 64-lane, 3: RDNA3's, 4: RDNA4's; the emulator takes the software path in each layout's
bookkeeping), bf16 and fp16, both B orientations and several tile counts, and must match NumPy's
fp32 product of the same 16-bit inputs. The layouts themselves are checked against facts printed by
AMD's matrix instruction calculator and PTX's fragment figures, the C++ accessors against their
Python twin :func:`~acl_rocm.kernels.mma.owner`, and the sources compile under nvcc (hardware path
for sm_80/sm_90, software path for sm_75).
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from acl_rocm.arch import lookup
from acl_rocm.kernels.mma import ELEMS, LAYOUT_WARP, LAYOUTS, MMA_SOURCE, hardware_layout, owner
from acl_rocm.kernels.prelude import PRELUDE, compile_options
from tests.rocm import kernel_emulator

LD = 72
"""Shared-memory row length (elements) of the test kernels: 64 + 8, rows 16-byte aligned."""

GEMM = r"""
extern "C" __global__ void mma_gemm(const unsigned short* A, const unsigned short* B, float* C, int M, int N, int K,
                                    int b_nk, int bf16) {
  __shared__ AclVec<unsigned, 4> sa_raw[64 * LD / 8];
  __shared__ AclVec<unsigned, 4> sb_raw[64 * LD / 8];
  unsigned short* sa = (unsigned short*)sa_raw;
  unsigned short* sb = (unsigned short*)sb_raw;
  for (int i = threadIdx.x; i < M * K; i += blockDim.x) sa[(i / K) * LD + i % K] = A[i];
  const int b_rows = b_nk ? N : K, b_cols = b_nk ? K : N;
  for (int i = threadIdx.x; i < b_rows * b_cols; i += blockDim.x) sb[(i / b_cols) * LD + i % b_cols] = B[i];
  __syncthreads();
  const int warp = threadIdx.x / ACL_WARP_SIZE, warps = blockDim.x / ACL_WARP_SIZE, lane = acl_lane();
  const int tiles_n = N / 16;
  for (int t = warp; t < (M / 16) * tiles_n; t += warps) {
    const int mt = t / tiles_n, nt = t % tiles_n;
    AclMmaC c;
    for (int e = 0; e < ACL_MMA_C_ELEMS; ++e) c.x[e] = 0.0f;
    for (int kk = 0; kk < K; kk += 16) {
      AclMmaA a;
      AclMmaB b;
      acl_mma_load_a(a, sa + mt * 16 * LD + kk, LD);
      if (b_nk) acl_mma_load_b_nk(b, sb + nt * 16 * LD + kk, LD);
      else acl_mma_load_b_kn(b, sb + kk * LD + nt * 16, LD);
      if (bf16) acl_mma<true>(c, a, b);
      else acl_mma<false>(c, a, b);
    }
    for (int e = 0; e < ACL_MMA_C_ELEMS; ++e)
      C[(mt * 16 + acl_mma_c_row(lane, e)) * N + nt * 16 + acl_mma_c_col(lane, e)] = c.x[e];
  }
}
"""

GEMM_I8 = r"""
// int8: C [M, N] int32 = A [M, K] B^T with B stored [N, K] (K-contiguous int8 rows: pairs of bytes per 16-bit element)
extern "C" __global__ void mma_gemm_i8(const signed char* A, const signed char* B, int* C, int M, int N, int K,
                                       int gather) {
  __shared__ AclVec<unsigned, 4> sa_raw[64 * LD / 8];
  __shared__ AclVec<unsigned, 4> sb_raw[64 * LD / 8];
  signed char* sa = (signed char*)sa_raw;
  signed char* sb = (signed char*)sb_raw;
  for (int i = threadIdx.x; i < M * K; i += blockDim.x) sa[(i / K) * 2 * LD + i % K] = A[i];
  for (int i = threadIdx.x; i < N * K; i += blockDim.x) sb[(i / K) * 2 * LD + i % K] = B[i];
  __syncthreads();
  const int warp = threadIdx.x / ACL_WARP_SIZE, warps = blockDim.x / ACL_WARP_SIZE, lane = acl_lane();
  const int tiles_n = N / 16;
  for (int t = warp; t < (M / 16) * tiles_n; t += warps) {
    const int mt = t / tiles_n, nt = t % tiles_n;
    AclMmaCi c;
    for (int e = 0; e < ACL_MMA_C_ELEMS; ++e) c.x[e] = 7;
    for (int kk = 0; kk < K / 2; kk += 16) {
      AclMmaA a;
      AclMmaB b;
      const unsigned short* ta = (const unsigned short*)sa + mt * 16 * LD + kk;
      const unsigned short* tb = (const unsigned short*)sb + nt * 16 * LD + kk;
      if (gather) {
        acl_mma_gather_a(a, ta, LD);
        acl_mma_gather_b_nk(b, tb, LD);
      } else {
        acl_mma_load_a(a, ta, LD);
        acl_mma_load_b_nk(b, tb, LD);
      }
      acl_mma_i8(c, a, b);
    }
    for (int e = 0; e < ACL_MMA_C_ELEMS; ++e)
      C[(mt * 16 + acl_mma_c_row(lane, e)) * N + nt * 16 + acl_mma_c_col(lane, e)] = c.x[e];
  }
}
"""

CHAIN = r"""
// D = round16(A B) B2 for one 16x16x16 tile per warp: the accumulator reused as an A operand
extern "C" __global__ void mma_chain(const unsigned short* A, const unsigned short* B, const unsigned short* B2,
                                     float* D, int bf16) {
  __shared__ AclVec<unsigned, 4> raw[3 * 16 * 24 / 8];
  __shared__ AclVec<unsigned, 4> scratch_raw[(ACL_MMA_SCRATCH > 0 ? ACL_MMA_SCRATCH : 8) / 8];
  unsigned short* s = (unsigned short*)raw;
  for (int i = threadIdx.x; i < 256; i += blockDim.x) {
    s[(i / 16) * 24 + i % 16] = A[i];
    s[384 + (i / 16) * 24 + i % 16] = B[i];
    s[768 + (i / 16) * 24 + i % 16] = B2[i];
  }
  __syncthreads();
  const int lane = acl_lane();
  AclMmaA a, p;
  AclMmaB b, b2;
  AclMmaC c, d;
  for (int e = 0; e < ACL_MMA_C_ELEMS; ++e) c.x[e] = d.x[e] = 0.0f;
  acl_mma_gather_a(a, s, 24);
  acl_mma_gather_b_kn(b, s + 384, 24);
  acl_mma_load_b_kn(b2, s + 768, 24);
  if (bf16) {
    acl_mma<true>(c, a, b);
    acl_mma_c_to_a<true>(p, c, (unsigned short*)scratch_raw);
    acl_mma<true>(d, p, b2);
  } else {
    acl_mma<false>(c, a, b);
    acl_mma_c_to_a<false>(p, c, (unsigned short*)scratch_raw);
    acl_mma<false>(d, p, b2);
  }
  for (int e = 0; e < ACL_MMA_C_ELEMS; ++e) D[acl_mma_c_row(lane, e) * 16 + acl_mma_c_col(lane, e)] = d.x[e];
}
"""

OWNERS = r"""
// (row, col) of every fragment element of every lane: A, then B, then C
extern "C" __global__ void mma_owners(int* out) {
  const int lane = acl_lane();
  int* o = out + lane * 2 * (ACL_MMA_A_ELEMS + ACL_MMA_B_ELEMS + ACL_MMA_C_ELEMS);
  for (int e = 0; e < ACL_MMA_A_ELEMS; ++e, o += 2) { o[0] = acl_mma_a_row(lane, e); o[1] = acl_mma_a_col(lane, e); }
  for (int e = 0; e < ACL_MMA_B_ELEMS; ++e, o += 2) { o[0] = acl_mma_b_row(lane, e); o[1] = acl_mma_b_col(lane, e); }
  for (int e = 0; e < ACL_MMA_C_ELEMS; ++e, o += 2) {
    o[0] = acl_mma_c_row(lane, e); o[1] = acl_mma_c_col(lane, e);
    if (acl_mma_slot_row(lane, acl_mma_c_slot(e)) != o[0]) o[0] = -1;  // the slot bookkeeping agrees
  }
}
"""


def _source(body: str) -> str:
    return PRELUDE + MMA_SOURCE + f"#define LD {LD}\n" + body


def _options(layout: int, plain: bool = False) -> list[str]:
    warp = LAYOUT_WARP[layout]
    return [f"-DACL_WARP_SIZE={warp}", f"-DACL_LANE_MASK_BITS={warp}", f"-DACL_MMA_LAYOUT={layout}"] + (
        ["-DACL_EMU_PLAIN_SHUFFLES"] if plain else []
    )


@pytest.fixture(scope="module", autouse=True)
def _build_dir(tmp_path_factory: pytest.TempPathFactory) -> None:
    if kernel_emulator.available():
        pytest.skip(f"the kernel emulator is unavailable: {kernel_emulator.available()}")
    if kernel_emulator.EmulatedProvider.build_dir is None:
        kernel_emulator.EmulatedProvider.build_dir = tmp_path_factory.mktemp("mma-build")


def _run(body: str, name: str, options: list[str], block: int, *args: object) -> None:
    lib = kernel_emulator._library(_source(body), name, options)
    holders: list[ctypes._SimpleCData] = []
    for arg in args:
        if isinstance(arg, np.ndarray):
            holders.append(ctypes.c_void_p(arg.ctypes.data))
        else:
            assert isinstance(arg, int)
            holders.append(ctypes.c_int(arg))
    params = (ctypes.c_void_p * len(holders))(*(ctypes.addressof(h) for h in holders))
    lib.emu_launch(*(ctypes.c_uint(1),) * 3, ctypes.c_uint(block), ctypes.cast(params, ctypes.c_void_p))


def _inputs(rng: np.random.Generator, shape: tuple[int, ...], bf16: bool) -> tuple[np.ndarray, np.ndarray]:
    """(16-bit patterns, their exact float64 values)."""
    dtype = ml_dtypes.bfloat16 if bf16 else np.float16
    values = rng.uniform(-2, 2, shape).astype(dtype)
    return values.view(np.uint16).copy(), values.astype(np.float64)


# ----------------------------------------------------------------------------- layouts (pure Python)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_layouts_cover_each_tile_element(layout: int) -> None:
    warp = LAYOUT_WARP[layout]
    for operand, count in zip("abc", ELEMS[layout]):
        seen: dict[tuple[int, int], int] = {}
        for lane in range(warp):
            for e in range(count):
                cell = owner(layout, operand, lane, e)  # type: ignore[arg-type]
                assert 0 <= cell[0] < 16 and 0 <= cell[1] < 16
                seen[cell] = seen.get(cell, 0) + 1
        copies = warp * count // 256
        assert len(seen) == 256 and set(seen.values()) == {copies}, (layout, operand)


def test_layouts_match_the_instruction_documentation() -> None:
    # PTX ISA, mma.m16n8k16 (.bf16/.f16) fragments: a0 = A[g][2t], a2 = A[g][2t+8]; b0 = B[2t][g]; c2 = C[g+8][2t]
    assert owner(1, "a", 4 * 3 + 2, 0) == (3, 4) and owner(1, "a", 4 * 3 + 2, 4) == (3, 12)
    assert owner(1, "b", 4 * 5 + 1, 1) == (3, 5) and owner(1, "b", 4 * 5 + 1, 6) == (10, 13)
    assert owner(1, "c", 4 * 2 + 3, 2) == (10, 6) and owner(1, "c", 4 * 2 + 3, 5) == (2, 15)
    # AMD matrix instruction calculator, v_mfma_f32_16x16x16bf16_1k (CDNA2/3): A[M][K] v1{16}.[31:16] is A[0][7],
    # B[K][N] v0{1}.[31:16] is B[1][1], D[M][N] v1{16} is D[5][0]
    assert owner(2, "a", 16, 3) == (0, 7) and owner(2, "b", 1, 1) == (1, 1) and owner(2, "c", 16, 1) == (5, 0)
    # v_wmma_f32_16x16x16_bf16 on RDNA3 (wave32): D v0{16} is D[1][0], v1{0} is D[2][0]; A[3][k] is in lanes 3 and 19
    assert owner(3, "c", 16, 0) == (1, 0) and owner(3, "c", 0, 1) == (2, 0)
    assert owner(3, "a", 3, 9) == owner(3, "a", 19, 9) == (3, 9)
    # RDNA4: A[0][4] is v0{16}.[15:0], A[0][8] is v2{0}.[15:0], A[0][12] is v2{16}.[15:0]
    assert owner(4, "a", 16, 0) == (0, 4) and owner(4, "a", 0, 4) == (0, 8) and owner(4, "a", 16, 4) == (0, 12)


def test_hardware_layouts_by_arch() -> None:
    assert hardware_layout(lookup("sm_90")) == 1 and hardware_layout(lookup("sm_80")) == 1
    assert hardware_layout(lookup("sm_75")) is None
    assert hardware_layout(lookup("gfx942")) == 2 and hardware_layout(lookup("gfx90a")) == 2
    assert hardware_layout(lookup("gfx908")) is None and hardware_layout(lookup("gfx1030")) is None
    assert hardware_layout(lookup("gfx1100")) == 3 and hardware_layout(lookup("gfx1201")) == 4


# ----------------------------------------------------------------------------- the layer on the emulator
@pytest.mark.parametrize("layout", LAYOUTS)
def test_accessors_match_their_python_twin(layout: int) -> None:
    warp = LAYOUT_WARP[layout]
    na, nb, nc = ELEMS[layout]
    out = np.full(warp * 2 * (na + nb + nc), -2, dtype=np.int32)
    _run(OWNERS, "mma_owners", _options(layout), warp, out)
    got = out.reshape(warp, na + nb + nc, 2)
    for lane in range(warp):
        for e in range(na + nb + nc):
            operand, k = ("a", e) if e < na else ("b", e - na) if e < na + nb else ("c", e - na - nb)
            assert tuple(got[lane, e]) == owner(layout, operand, lane, k), (layout, lane, operand, k)  # type: ignore[arg-type]


GEMM_CASES = [(16, 16, 16), (32, 48, 64), (64, 16, 32)]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("bf16", [True, False], ids=["bf16", "fp16"])
def test_gemm_matches_numpy(layout: int, bf16: bool) -> None:
    rng = np.random.default_rng(layout * 2 + bf16)
    warp = LAYOUT_WARP[layout]
    for n_case, (m, n, k) in enumerate(GEMM_CASES):
        b_nk = n_case % 2
        a_bits, a = _inputs(rng, (m, k), bf16)
        b_bits, b = _inputs(rng, (n, k) if b_nk else (k, n), bf16)
        c = np.full((m, n), np.nan, dtype=np.float32)
        _run(GEMM, "mma_gemm", _options(layout), 2 * warp, a_bits, b_bits, c, m, n, k, b_nk, int(bf16))
        expected = a @ (b.T if b_nk else b)
        np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-4 * k, err_msg=f"layout {layout} {m}x{n}x{k}")


GEMM_I8_CASES = [(16, 16, 32), (32, 48, 64), (64, 16, 128)]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_int8_gemm_is_exact(layout: int) -> None:
    rng = np.random.default_rng(60 + layout)
    warp = LAYOUT_WARP[layout]
    for n_case, (m, n, k) in enumerate(GEMM_I8_CASES):
        a = rng.integers(-128, 128, (m, k), dtype=np.int8)
        b = rng.integers(-128, 128, (n, k), dtype=np.int8)
        a[0, :] = -128  # the extreme products (-128 * -128) exactly
        b[0, :] = -128
        c = np.full((m, n), -1, dtype=np.int32)
        _run(GEMM_I8, "mma_gemm_i8", _options(layout), 2 * warp, a, b, c, m, n, k, n_case % 2)
        expected = a.astype(np.int64) @ b.astype(np.int64).T + 7
        np.testing.assert_array_equal(c, expected, err_msg=f"layout {layout} {m}x{n}x{k}")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_accumulator_reused_as_a_operand(layout: int) -> None:
    rng = np.random.default_rng(40 + layout)
    for bf16 in (True, False):
        dtype = ml_dtypes.bfloat16 if bf16 else np.float16
        (a_bits, a), (b_bits, b), (b2_bits, b2) = (_inputs(rng, (16, 16), bf16) for _ in range(3))
        d = np.full((16, 16), np.nan, dtype=np.float32)
        _run(CHAIN, "mma_chain", _options(layout), LAYOUT_WARP[layout], a_bits, b_bits, b2_bits, d, int(bf16))
        p = (a @ b).astype(np.float32).astype(dtype).astype(np.float64)  # the product rounded once to 16 bits
        np.testing.assert_allclose(d, p @ b2, rtol=1e-5, atol=1e-3, err_msg=f"layout {layout} bf16={bf16}")


def test_software_path_through_indexed_shuffles() -> None:
    # the fallback a GPU without matrix instructions compiles: ACL_SHFL_IDX rather than the emulator's exchange
    rng = np.random.default_rng(7)
    a_bits, a = _inputs(rng, (16, 32), True)
    b_bits, b = _inputs(rng, (32, 16), True)
    c = np.full((16, 16), np.nan, dtype=np.float32)
    _run(GEMM, "mma_gemm", _options(1, plain=True), 32, a_bits, b_bits, c, 16, 16, 32, 0, 1)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-3)
    a8 = rng.integers(-128, 128, (16, 64), dtype=np.int8)
    b8 = rng.integers(-128, 128, (16, 64), dtype=np.int8)
    c8 = np.full((16, 16), -1, dtype=np.int32)
    _run(GEMM_I8, "mma_gemm_i8", _options(1, plain=True), 32, a8, b8, c8, 16, 16, 64, 0)
    np.testing.assert_array_equal(c8, a8.astype(np.int64) @ b8.astype(np.int64).T + 7)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed here")
@pytest.mark.parametrize("arch", ["sm_90", "sm_80", "sm_75"])
def test_layer_compiles_with_nvcc(tmp_path: Path, arch: str) -> None:
    path = tmp_path / "mma.cu"
    path.write_text(_source(GEMM + GEMM_I8 + CHAIN + OWNERS))
    done = subprocess.run(
        ["nvcc", "-ptx", f"-arch={arch}", *compile_options(32), str(path), "-o", str(tmp_path / "mma.ptx")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    ptx = (tmp_path / "mma.ptx").read_text()
    hardware = arch != "sm_75"
    assert ("mma.sync.aligned.m16n8k16" in ptx) == hardware
    assert ("ldmatrix.sync.aligned.m8n8.x4.trans" in ptx) == hardware
    assert ("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32" in ptx) == hardware

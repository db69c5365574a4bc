"""FlatQuant's token-tile kernels on the CPU: the f64 warp product's fragment bookkeeping (PTX's m8n8k4 layout).

The token tile's ``dmma`` engine loads fragments as PTX documents them for ``mma.sync.m8n8k4`` f64 (lane L:
A(L / 4, L % 4), B(L % 4, L / 4), C(L / 4, 2 (L % 4) + {0, 1})); off sm_80 the same sums come from those
fragments gathered across the warp. A probe kernel runs one 8x8x4 product through each software path (the
emulator's one-exchange gather, and plain shuffles as on GPUs without the instruction) against NumPy.
The operator's results against the reference are in ``test_quant_vllm_cpu.py``.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.flat_quant import _DMMA, FlatTile, padded, warp_grid
from acl_rocm.kernels.prelude import PRELUDE
from tests.rocm import kernel_emulator

PROBE = r"""
extern "C" __global__ void dmma_probe(const double* a, const double* b, double* c, int step) {
  const int lane = threadIdx.x;
  const double fa = a[(lane / 4) * 4 + lane % 4];  // A [8, 4] row-major
  const double fb = b[(lane % 4) * 8 + lane / 4];  // B [4, 8] row-major
  double acc[1][2] = {{0.5, -0.25}};
  if (step) acl_dmma_step<1, 1, false>(acc, &fa, &fb, lane);
  else acl_dmma_8x8x4(acc[0], fa, fb, lane);
  c[(lane / 4) * 8 + (lane % 4) * 2] = acc[0][0];
  c[(lane / 4) * 8 + (lane % 4) * 2 + 1] = acc[0][1];
}
"""


@pytest.fixture(scope="module", autouse=True)
def _build_dir(tmp_path_factory: pytest.TempPathFactory) -> None:
    if kernel_emulator.available():
        pytest.skip(f"the kernel emulator is unavailable: {kernel_emulator.available()}")
    if kernel_emulator.EmulatedProvider.build_dir is None:
        kernel_emulator.EmulatedProvider.build_dir = tmp_path_factory.mktemp("flat-build")


@pytest.mark.parametrize(("plain", "step"), [(False, True), (True, True), (False, False)])
def test_f64_warp_product_follows_the_ptx_fragment_layout(plain: bool, step: bool) -> None:
    rng = np.random.default_rng(5)
    a = rng.integers(-9, 9, (8, 4)).astype(np.float64)
    b = rng.integers(-9, 9, (4, 8)).astype(np.float64)
    c = np.full((8, 8), np.nan)
    options = ["-DACL_WARP_SIZE=32", "-DACL_LANE_MASK_BITS=32"] + (["-DACL_EMU_PLAIN_SHUFFLES"] if plain else [])
    lib = kernel_emulator._library(PRELUDE + _DMMA + PROBE, "dmma_probe", options)
    holders = [ctypes.c_void_p(x.ctypes.data) for x in (a, b, c)] + [ctypes.c_int(int(step))]
    params = (ctypes.c_void_p * len(holders))(*(ctypes.addressof(h) for h in holders))
    lib.emu_launch(*(ctypes.c_uint(1),) * 3, ctypes.c_uint(32), ctypes.cast(params, ctypes.c_void_p))
    want = a @ b + np.array([0.5, -0.25] * 4)[None, :]
    np.testing.assert_array_equal(c, want)


def test_token_tile_geometry() -> None:
    """Padding, threads, shared memory and the dmma warp grid of the bench's 64 x 64 slices."""
    assert [padded(n) for n in (1, 8, 9, 24, 64, 65)] == [8, 8, 16, 32, 64, 128]
    simt = FlatTile(D.ACL_FLOAT16, D.ACL_INT32, 64, 64, "simt")
    assert simt.threads == 256 and simt.shared_bytes == 8 * 3 * 64 * 64 + 4 * 256 + 64 * 64
    assert simt.fits(232448) is None and simt.fits(100 * 1024) is not None  # 101 KiB: two an H100 SM
    assert FlatTile(D.ACL_FLOAT16, D.ACL_INT32, 64, 96, "simt").fits(1 << 20) is not None  # 512 threads
    assert warp_grid(8, 8) in ((2, 4), (4, 2)) and warp_grid(1, 2) is None
    dmma = FlatTile(D.ACL_BF16, D.ACL_INT4, 64, 64, "dmma")
    assert dmma.threads == 256 and dmma.fits(232448) is None and dmma.fits(232448, 64) is not None  # wave64
    assert "mma.sync.aligned.m8n8k4.row.col.f64" in dmma.source() and "mma.sync" not in simt.source()
    paired = FlatTile(D.ACL_FLOAT16, D.ACL_INT32, 64, 64, "dmma16").source()
    assert "acl_dmma_step<4, 2, true>" in paired and "acl_dmma_step<4, 2, false>" in dmma.source()

"""The wgmma flash kernel run whole on the CPU kernel emulator (wgmma.py's software SS and RS steps) against the
reference: the block shapes of issue 18 (the grid longest first across heads, 3-4 warpgroups a block, 3-4 one-warpgroup
blocks) beside the sm_90 defaults. It checks the kernel's bookkeeping (rows, key ranges, tiles, the order of blocks,
the swizzled layouts and descriptors as the software steps read them), not the hardware's asynchronous ordering."""

from __future__ import annotations

from pathlib import Path

import pytest

from acl_core.backend import Backend
from tests.rocm.kernel_emulator import emulated_backend
from tests.rocm.test_gpu_flash_attention import _args, _rng
from tests.rocm.test_gpu_wgmma import check_wgmma
from tests.rocm.test_grouped_matmul_wgmma_cpu import WgmmaEmulated


@pytest.fixture(scope="module")
def emulated(tmp_path_factory: pytest.TempPathFactory) -> Backend:
    backend: Backend = emulated_backend(tmp_path_factory.mktemp("kc"), WgmmaEmulated(blas=True))
    return backend


CASES = [
    # dtype, d, mode, config, layout, b, n, nkv, sq, skv
    ("bfloat16", 64, 3, "wg2k64b2ps", "BSND", 1, 2, 1, 200, 260),  # the former D 64 default: causal bottom-right, GQA
    ("bfloat16", 64, 3, "wg2k64b2psl", "BSND", 2, 2, 1, 200, 260),  # the former D 64 default: 2 batches x 2 heads
    ("float16", 64, 2, "wg4k64sl", "BNSD", 1, 2, 2, 300, 300),  # 256-row blocks, the second ragged
    ("bfloat16", 64, 3, "wg3k64psl", "BNSD", 1, 2, 1, 210, 150),  # 192-row blocks; Sq > Skv: empty rows
    ("float16", 64, 0, "wg3k128sl", "BSND", 1, 1, 1, 100, 300),  # no mask, three 128-key tiles, rows < one block
    ("bfloat16", 64, 3, "wg1k64b4psl", "BNSD", 1, 2, 2, 150, 150),
    ("float16", 64, 2, "wg2k64b2slx3", "BSND", 1, 2, 1, 300, 300),  # the D 64 default: three K/V buffers, five tiles
    ("bfloat16", 128, 3, "wg2k128ps", "BNSD", 1, 2, 1, 140, 140),  # the D 128 default
    ("bfloat16", 128, 3, "wg2k128psl", "BSND", 2, 1, 1, 140, 200),
]


@pytest.mark.parametrize(("dtype", "d", "mode", "config", "layout", "b", "n", "nkv", "sq", "skv"), CASES)
def test_wgmma_flash_on_the_emulator(
    emulated: Backend,
    reference: Backend,
    tmp_path: Path,
    dtype: str,
    d: int,
    mode: int,
    config: str,
    layout: str,
    b: int,
    n: int,
    nkv: int,
    sq: int,
    skv: int,
) -> None:
    args = _args(_rng("wg-emu", dtype, d, mode, config, sq), dtype, layout, b, n, nkv, sq, skv, d, mode)
    check_wgmma(emulated, reference, config, d, args, f"emulated {dtype} D{d} sparse {mode} {n}/{nkv} {sq}x{skv}")

"""The GEMV kernels on an emulated wave64 device (the butterfly's 64-lane branch), against float64 NumPy."""

from __future__ import annotations

import logging

import ml_dtypes
import numpy as np
import pytest

from acl_core import eager
from acl_rocm.backend import RocmBackend
from tests.conftest import assert_close
from tests.rocm.gemm_tolerance import gemm_tolerance
from tests.rocm.kernel_emulator import EmulatedProvider, emulated_backend


@pytest.fixture(scope="module")
def wave64(tmp_path_factory: pytest.TempPathFactory) -> RocmBackend:
    """An emulated gfx942 (64 lanes a warp) with the GEMV kernel forced on."""
    emulated_backend(tmp_path_factory.mktemp("kc"))  # skips without g++, sets the build directory
    provider = EmulatedProvider(blas=True, arch="gfx942", warp_size=64)
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp_path_factory.mktemp("kc64")), "ACL_GEMV": "1"})
    backend.runtime.ensure_device(0)
    assert "-DACL_WARP_SIZE=64" in backend.options
    return backend


@pytest.mark.parametrize(("layout", "m", "k", "n"), [("nk", 2, 1040, 24), ("nk", 16, 1031, 17), ("kn", 5, 1040, 24)])
def test_gemv_on_wave64(
    wave64: RocmBackend, caplog: pytest.LogCaptureFixture, layout: str, m: int, k: int, n: int
) -> None:
    rng = np.random.default_rng(m + k)
    a = rng.uniform(-1, 1, (m, k)).astype(ml_dtypes.bfloat16)
    w = rng.uniform(-1, 1, (k, n)).astype(ml_dtypes.bfloat16)
    weight = eager.to_device(w, wave64, layout="transposed" if layout == "nk" else "contiguous")
    with caplog.at_level(logging.DEBUG, logger="acl_rocm.matmul"):
        got = eager.run("Mm", wave64, self=a, mat2=weight, cubeMathType=0)["out"]
    assert f"GEMV kernel {layout}" in caplog.text, caplog.text
    exact = (a.astype(np.float64) @ w.astype(np.float64)).astype(ml_dtypes.bfloat16)
    atol, rtol = gemm_tolerance(exact, k)
    assert_close(got, exact, atol=atol, rtol=rtol)

"""The GEMV plan choice on the fake provider (CPU): which small-M products take the GEMV kernel, and the switch."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from acl_core import eager
from acl_rocm.backend import RocmBackend
from tests.rocm.fake_provider import FakeProvider


def _backend(tmp_path: Path, mode: str) -> tuple[RocmBackend, FakeProvider]:
    provider = FakeProvider(blas=True)
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp_path), "ACL_GEMV": mode})
    backend.runtime.ensure_device(0)
    return backend, provider


def _paths(backend: RocmBackend, provider: FakeProvider, m: int, k: int, n: int, dtype, nk: bool) -> list[str]:
    """The launches and BLAS calls one Mm makes: 'gemv_nk' / 'gemv_kn' kernels, 'blas' calls, other kernels."""
    a = np.ones((m, k), dtype)
    w = eager.to_device(np.ones((k, n), dtype), backend, layout="transposed" if nk else "contiguous")
    provider.launches.clear()
    provider.gemms.clear()
    eager.run("Mm", backend, self=a, mat2=w, cubeMathType=0)
    names = ["_".join(x.name.split("_")[1:3]) for x in provider.launches]
    return names + ["blas"] * len(provider.gemms)


@pytest.mark.parametrize("nk", [True, False], ids=["nk", "kn"])
def test_forced_on_takes_gemv_for_up_to_sixteen_half_rows(tmp_path: Path, nk: bool) -> None:
    backend, provider = _backend(tmp_path, "1")
    layout = "gemv_nk" if nk else "gemv_kn"
    for m in (1, 2, 7, 8, 16):
        assert _paths(backend, provider, m, 64, 24, ml_dtypes.bfloat16, nk) == [layout]
        assert _paths(backend, provider, m, 33, 17, np.float16, nk) == [layout]
    assert _paths(backend, provider, 17, 64, 24, ml_dtypes.bfloat16, nk) == ["blas"]
    assert _paths(backend, provider, 4, 64, 24, np.float32, nk) == ["blas"]  # fp32 stays on the BLAS


def test_off_and_auto(tmp_path: Path) -> None:
    off, p_off = _backend(tmp_path / "off", "0")
    assert _paths(off, p_off, 1, 1024, 2048, ml_dtypes.bfloat16, True) == ["blas"]
    auto, p_auto = _backend(tmp_path / "auto", "auto")
    assert _paths(auto, p_auto, 1, 64, 24, ml_dtypes.bfloat16, True) == ["blas"]  # too small to matter
    assert _paths(auto, p_auto, 1, 1024, 512, ml_dtypes.bfloat16, True) == ["gemv_nk"]


def test_auto_weighs_the_gemv_kernels_arithmetic_against_the_blas(tmp_path: Path) -> None:
    # the H200 decode bench's outcomes the cost model was fitted to (GEMV µs vs BLAS µs, weight [N, K])
    from acl_rocm.ops.matmul import gemv_pays

    assert gemv_pays(16, 1024, 3072, 2)  # 12.3 vs 26.1: a small model's layer weight
    assert gemv_pays(16, 3072, 1024, 2)  # 25.6 vs 28.4
    assert gemv_pays(1, 1024, 151936, 2)  # 73 vs 80: the vocabulary head at batch 1
    assert not gemv_pays(8, 1024, 151936, 2)  # 168 vs 83
    assert not gemv_pays(16, 1024, 151936, 2)  # 376 vs 84
    auto, p_auto = _backend(tmp_path, "auto")
    assert _paths(auto, p_auto, 1, 256, 151936, ml_dtypes.bfloat16, True) == ["gemv_nk"]
    assert _paths(auto, p_auto, 8, 256, 151936, ml_dtypes.bfloat16, True) == ["blas"]

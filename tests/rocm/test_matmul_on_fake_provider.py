"""How Matmul / Mm / BatchMatMul views map onto one column-major BLAS call (host BLAS stand-in, CPU)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from acl_core import eager
from acl_rocm.backend import RocmBackend
from acl_rocm.ops.matmul import blas_view, uniform_batch_stride
from tests.rocm.fake_provider import FakeProvider


@pytest.fixture
def fake(tmp_path: Path) -> tuple[RocmBackend, FakeProvider]:
    provider = FakeProvider(blas=True)
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp_path)})
    backend.runtime.ensure_device(0)
    return backend, provider


def test_blas_view() -> None:
    assert blas_view(4, 5, 5, 1) == (5, 4, 5, False)  # row-major X is column-major X^T
    assert blas_view(4, 5, 1, 4) == (4, 5, 4, True)  # column-major X needs a transpose
    assert blas_view(4, 5, 11, 1) == (5, 4, 11, False)  # padded rows keep their pitch
    assert blas_view(1, 5, 0, 1) == (5, 1, 5, False) and blas_view(1, 5, 0, 3) == (1, 5, 3, True)
    assert blas_view(4, 5, 10, 2) is None and blas_view(4, 5, 3, 1) is None  # gathered first


def test_uniform_batch_stride() -> None:
    assert uniform_batch_stride((3,), (20,)) == 20
    assert uniform_batch_stride((2, 3), (60, 20)) == 20
    assert uniform_batch_stride((2, 3), (0, 0)) == 0
    assert uniform_batch_stride((2, 3), (0, 20)) is None
    assert uniform_batch_stride((), ()) == 0 and uniform_batch_stride((1, 1), (7, 9)) == 0


@pytest.mark.parametrize("layout", ["contiguous", "padded", "transposed"])
@pytest.mark.parametrize(
    ("op", "sa", "sb"),
    [
        ("Mm", (5, 7), (7, 3)),
        ("Matmul", (7,), (7,)),
        ("Matmul", (4, 6), (6,)),
        ("Matmul", (6,), (6, 3)),
        ("BatchMatMul", (3, 4, 5), (3, 5, 2)),
        ("Matmul", (2, 4, 5), (5, 3)),
    ],
)
def test_direct_views_make_one_blas_call(fake, op: str, sa, sb, layout: str) -> None:
    backend, provider = fake
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, sa).astype(np.float32)
    b = rng.uniform(-1, 1, sb).astype(np.float32)
    got = eager.run(op, backend, layout=layout, self=a, mat2=b, cubeMathType=0)["out"]
    assert len(provider.gemms) == 1
    kernels = [launch.name.split("_")[2] for launch in provider.launches]
    if layout == "transposed" and max(len(sa), len(sb)) > 2:  # batch innermost: gathered by a kernel first
        assert kernels and set(kernels) == {"Cast"}
        return
    np.testing.assert_allclose(got, np.matmul(a.astype(np.float64), b.astype(np.float64)), rtol=1e-6, atol=1e-6)
    if op == "Matmul" and len(sa) == 3:
        call = provider.gemms[0]
        assert call.batch == 1 and call.b.cols == sa[0] * sa[1]  # the broadcast weight folded into one GEMM
    assert kernels == []  # no gather, no copy kernel


def test_unsupported_direct_paths_gather_with_kernels(fake) -> None:
    backend, provider = fake
    a = np.ones((1, 4, 5), np.float32)
    b = np.ones((3, 5, 2), np.float32)
    eager.run("BatchMatMul", backend, self=a, mat2=b, cubeMathType=0)
    assert len(provider.gemms) == 1 and provider.gemms[0].batch == 3
    assert [launch.name.split("_")[2] for launch in provider.launches] == ["Cast"]  # the broadcast self, repeated
    x = np.ones((4, 5), np.float16)
    y = np.ones((5, 2), np.float32)
    provider.launches.clear()
    eager.run("Mm", backend, self=x, mat2=y, cubeMathType=0)
    assert [launch.name.split("_")[2] for launch in provider.launches] == ["Cast"]  # fp16 self widened to fp32
    provider.launches.clear()
    eager.run("Mm", backend, self=np.ones((4, 5), np.float32), mat2=y, cubeMathType=3)
    assert sorted(launch.name.split("_")[2] for launch in provider.launches) == ["RoundHf32", "RoundHf32"]

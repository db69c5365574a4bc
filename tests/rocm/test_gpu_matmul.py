"""Matmul, Mm and BatchMatMul through the vendor BLAS, compared with the reference (GPU tier)."""

from __future__ import annotations

import logging
import os

import ml_dtypes
import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.spec.ops import get_spec
from acl_rocm.backend import RocmBackend
from acl_rocm.ops.matmul import OPS
from tests.conftest import assert_close

pytestmark = pytest.mark.gpu


def _needs_blas(rocm: Backend) -> None:
    reason = rocm.matmul.unavailable()  # type: ignore[attr-defined]
    if reason is not None:
        pytest.skip(reason)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("layout", ["contiguous", "padded", "transposed"])
def test_matches_reference(rocm: Backend, reference: Backend, op: str, layout: str) -> None:
    _needs_blas(rocm)
    samples = list(get_spec(op).samples(np.random.default_rng(7)))  # type: ignore[misc]
    assert samples
    for sample in samples:
        expected = eager.run(op, reference, **sample.args)["out"]
        got = eager.run(op, rocm, layout=layout, **sample.args)["out"]
        assert got.dtype == expected.dtype and got.shape == expected.shape, sample.note
        atol, rtol = sample.tolerance or (None, None)
        try:
            assert_close(got, expected, atol=atol, rtol=rtol)
        except AssertionError as exc:
            raise AssertionError(f"{op} [{sample.note}] layout={layout}\n{exc}") from None


@pytest.mark.parametrize(
    ("shape_a", "shape_b", "dtype"),
    [
        ((257, 130), (130, 99), np.float32),
        ((4, 33, 64), (64, 48), np.float32),  # a broadcast weight folds into one taller GEMM
        ((3, 1, 40, 24), (5, 24, 16), ml_dtypes.bfloat16),
        ((6, 128, 256), (6, 256, 64), np.float16),
    ],
)
def test_larger_products_against_float64(rocm: Backend, shape_a, shape_b, dtype) -> None:
    _needs_blas(rocm)
    rng = np.random.default_rng(3)
    a = rng.uniform(-1, 1, shape_a).astype(dtype)
    b = rng.uniform(-1, 1, shape_b).astype(dtype)
    got = eager.run("Matmul", rocm, self=a, mat2=b, cubeMathType=0)["out"]
    exact = np.matmul(a.astype(np.float64), b.astype(np.float64))
    tol = {np.dtype(np.float32): 1e-4, np.dtype(np.float16): 4e-3}.get(np.dtype(dtype), 3e-2)
    np.testing.assert_allclose(got.astype(np.float64), exact, atol=tol * np.sqrt(shape_a[-1]), rtol=tol)


def test_hf32_cube_math_type_rounds_operands_exactly_like_the_reference(rocm: Backend, reference: Backend) -> None:
    _needs_blas(rocm)
    rng = np.random.default_rng(5)
    a = (1 + rng.uniform(0, 2**-11, (16, 32))).astype(np.float32)  # differences below HF32's precision
    b = rng.uniform(-1, 1, (32, 8)).astype(np.float32)
    got = eager.run("Mm", rocm, self=a, mat2=b, cubeMathType=3)["out"]
    expected = eager.run("Mm", reference, self=a, mat2=b, cubeMathType=3)["out"]
    plain = eager.run("Mm", rocm, self=a, mat2=b, cubeMathType=0)["out"]
    np.testing.assert_allclose(got, expected, rtol=2e-6, atol=2e-6)
    assert not np.allclose(plain, expected, rtol=2e-7, atol=0)  # the rounding is visible, and it is applied


def test_cann_fast_tf32_runs_float32_gemms_on_tf32(rocm: Backend, caplog: pytest.LogCaptureFixture) -> None:
    """CANN_FAST_TF32=1: fp32 Mm takes TF32 (error of 10-bit mantissas, well above fp32's), and says so in the log."""
    _needs_blas(rocm)
    if not rocm.capabilities().tf32_hw:
        pytest.skip(f"{rocm.capabilities().architecture} has no TF32 matrix hardware")
    fast = RocmBackend(rocm.provider, {**os.environ, "CANN_FAST_TF32": "1"})  # type: ignore[attr-defined]
    assert fast.capabilities().tf32_enabled and not rocm.capabilities().tf32_enabled
    rng = np.random.default_rng(11)
    a, b = rng.standard_normal((192, 1024)).astype(np.float32), rng.standard_normal((1024, 160)).astype(np.float32)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    magnitude = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    plain = eager.run("Mm", rocm, self=a, mat2=b, cubeMathType=0)["out"]
    with caplog.at_level(logging.DEBUG, logger="acl_rocm.matmul"):
        tf32 = eager.run("Mm", fast, self=a, mat2=b, cubeMathType=0)["out"]
    plain_error = np.abs(plain - exact).max()
    tf32_error = np.abs(tf32 - exact)
    assert np.all(tf32_error <= 2.0**-9 * magnitude), "beyond TF32's error bound"
    assert tf32_error.max() > 8 * plain_error, "no TF32 rounding visible: the fp32 path ran"
    assert "TF32 (CANN_FAST_TF32=1)" in caplog.text

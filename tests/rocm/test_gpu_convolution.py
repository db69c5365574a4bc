"""Convolution on the GPU (im2col/col2im kernels around the provider's GEMM), compared with the reference."""

from __future__ import annotations

from collections.abc import Iterator

import ml_dtypes
import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.spec.ops import get_spec
from tests.conftest import assert_close
from tests.rocm.gemm_tolerance import gemm_tolerance
from tests.rocm.prefill import sentinel_outputs

pytestmark = pytest.mark.gpu


@pytest.fixture
def conv(rocm: Backend) -> Iterator[Backend]:
    """The rocm backend, skipped without a BLAS; its chunk budget is restored afterwards."""
    if "Convolution" not in rocm.capabilities().ops:
        pytest.skip(f"Convolution not claimed: {rocm.matmul.unavailable()}")  # type: ignore[attr-defined]
    budget = rocm.convolution.chunk_bytes  # type: ignore[attr-defined]
    yield rocm
    rocm.convolution.chunk_bytes = budget  # type: ignore[attr-defined]


def _check(
    backend: Backend, reference: Backend, args: dict, layout: str = "contiguous", k: int = 0, scale: float = 0.0
) -> None:
    """Against the reference: the conformance tolerance, that of a ``k``-term product sum, or ``scale``."""
    want = eager.run("Convolution", reference, **args)
    expected = want["output"]
    outs = sentinel_outputs("Convolution", args, want)
    got = eager.run("Convolution", backend, layout=layout, **args, **outs)["output"]
    assert got.dtype == expected.dtype and got.shape == expected.shape
    if k:
        atol, rtol = gemm_tolerance(expected, k)
        np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64), atol=atol, rtol=rtol)
    elif scale:
        np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64), atol=scale, rtol=scale)
    else:
        assert_close(got, expected)


@pytest.mark.parametrize("layout", ["contiguous", "padded", "transposed"])
def test_samples_match_reference(conv: Backend, reference: Backend, layout: str) -> None:
    for sample in get_spec("Convolution").samples(np.random.default_rng(7)):  # type: ignore[misc]
        try:
            _check(conv, reference, dict(sample.args), layout)
        except AssertionError as exc:
            raise AssertionError(f"[{sample.note}] layout={layout}\n{exc}") from None


def _args(rng, x_shape, w_shape, dtype, *, transposed=False, groups=1, stride, padding, dilation, out_pad=None, cube=0):
    c_out = w_shape[1] * groups if transposed else w_shape[0]
    return {
        "input": rng.uniform(-1, 1, x_shape).astype(dtype),
        "weight": rng.uniform(-1, 1, w_shape).astype(dtype),
        "bias": rng.uniform(-1, 1, (c_out,)).astype(dtype),
        "stride": stride,
        "padding": padding,
        "dilation": dilation,
        "transposed": transposed,
        "outputPadding": out_pad or [0] * len(stride),
        "groups": groups,
        "cubeMathType": cube,
    }


LARGER = [
    ("2-D 3x3 fp32", (4, 32, 28, 28), (64, 32, 3, 3), np.float32, {"stride": [1, 1], "padding": [1, 1]}),
    ("2-D 3x3 fp16", (4, 32, 28, 28), (64, 32, 3, 3), np.float16, {"stride": [1, 1], "padding": [1, 1]}),
    ("2-D stride 2 bf16", (2, 16, 33, 31), (32, 16, 5, 5), ml_dtypes.bfloat16, {"stride": [2, 2], "padding": [2, 2]}),
    ("1-D grouped", (3, 48, 200), (96, 12, 7), np.float32, {"stride": [1], "padding": [3], "groups": 4}),
    ("3-D", (2, 8, 10, 12, 12), (16, 8, 3, 3, 3), np.float32, {"stride": [1, 2, 2], "padding": [1, 1, 1]}),
    ("depthwise", (2, 64, 20, 20), (64, 1, 3, 3), np.float16, {"stride": [1, 1], "padding": [1, 1], "groups": 64}),
    (
        "transposed 2-D",
        (2, 16, 14, 14),
        (16, 8, 4, 4),
        np.float32,
        {"stride": [2, 2], "padding": [1, 1], "groups": 2, "transposed": True},
    ),
    (
        "transposed 1-D fp16",
        (3, 32, 50),
        (32, 24, 5),
        np.float16,
        {"stride": [3], "padding": [2], "transposed": True, "out_pad": [1]},
    ),
]


@pytest.mark.parametrize(("note", "x_shape", "w_shape", "dtype", "kw"), LARGER, ids=[c[0] for c in LARGER])
@pytest.mark.parametrize("budget", [None, 1 << 16])
def test_larger_convolutions(conv: Backend, reference: Backend, note, x_shape, w_shape, dtype, kw, budget) -> None:
    if budget is not None:
        conv.convolution.chunk_bytes = budget  # type: ignore[attr-defined]
    kw = dict(kw)
    kw.setdefault("dilation", [1] * len(kw["stride"]))
    args = _args(np.random.default_rng(4), x_shape, w_shape, dtype, **kw)
    reduction = int(np.prod(w_shape[1:])) if not kw.get("transposed") else x_shape[1] * int(np.prod(w_shape[2:]))
    _check(conv, reference, args, k=reduction)


@pytest.mark.parametrize("cube", [1, 2, 3])
def test_down_precision_modes_stay_close(conv: Backend, reference: Backend, cube: int) -> None:
    args = _args(
        np.random.default_rng(5),
        (2, 16, 12, 12),
        (24, 16, 3, 3),
        np.float32,
        stride=[1, 1],
        padding=[1, 1],
        dilation=[1, 1],
        cube=cube,
    )
    _check(conv, reference, args, scale=2e-3 * np.sqrt(16 * 9))  # HF32/fp16 operands: about 1e-3 relative each

"""ConvolutionBackward on the GPU (the forward's im2col/col2im kernels and GEMMs, row sums), against the reference
under the op's accuracy class, at realistic and chunk-crossing shapes in every claimed dtype."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import torch

from acl_core.backend import Backend
from tests.rocm.against_reference import assert_errors_match_reference, assert_every_sample_matches
from tests.rocm.against_reference import assert_matches_reference as compare_on

pytestmark = pytest.mark.gpu
OP = "ConvolutionBackward"
OUTPUTS = ("gradInput", "gradWeight", "gradBias")
DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16]


def grad_args(
    rng: np.random.Generator,
    x_shape: tuple[int, ...],
    w_shape: tuple[int, ...],
    dtype: Any,
    *,
    stride: list[int],
    padding: list[int],
    dilation: list[int] | None = None,
    groups: int = 1,
    transposed: bool = False,
    out_pad: list[int] | None = None,
    cube: int = 0,
) -> dict[str, Any]:
    """A ConvolutionBackward call with random operands; gradOutput's shape from torch's forward on zeros."""
    spatial = len(x_shape) - 2
    dilation = dilation or [1] * spatial
    out_pad = out_pad or [0] * spatial
    zx, zw = torch.zeros(x_shape), torch.zeros(w_shape)
    fn = getattr(torch.nn.functional, f"conv{'_transpose' if transposed else ''}{spatial}d")
    if transposed:
        y = fn(zx, zw, None, stride, padding, out_pad, groups, dilation)
    else:
        y = fn(zx, zw, None, stride, padding, dilation, groups)
    return {
        "gradOutput": rng.uniform(-1, 1, tuple(y.shape)).astype(dtype),
        "input": rng.uniform(-2, 2, x_shape).astype(dtype),
        "weight": rng.uniform(-1, 1, w_shape).astype(dtype),
        "biasSizes": [y.shape[1]],
        "stride": stride,
        "padding": padding,
        "dilation": dilation,
        "transposed": transposed,
        "outputPadding": out_pad,
        "groups": groups,
        "outputMask": [True, True, True],
        "cubeMathType": cube,
    }


def compare(
    backend: Backend, reference: Backend, args: dict[str, Any], layout: str = "contiguous", note: str = ""
) -> None:
    """rocm against the reference under the op's accuracy class (outputs prefilled with sentinels)."""
    compare_on(backend, reference, OP, args, layout, note)


@pytest.fixture
def conv(rocm: Backend) -> Iterator[Backend]:
    """The rocm backend on its GEMM path (what runs where cuDNN is absent: test_gpu_conv_grad_cudnn.py proves the
    NVIDIA default), skipped without a BLAS; the chunk budget and the path are restored afterwards."""
    if OP not in rocm.capabilities().ops:
        pytest.skip(f"{OP} not claimed: {rocm.matmul.unavailable()}")  # type: ignore[attr-defined]
    budget = rocm.convolution.chunk_bytes  # type: ignore[attr-defined]
    rocm.conv_grad.path_override = "gemm"  # type: ignore[attr-defined]
    yield rocm
    rocm.conv_grad.path_override = None  # type: ignore[attr-defined]
    rocm.convolution.chunk_bytes = budget  # type: ignore[attr-defined]


def test_samples_match_reference(conv: Backend, reference: Backend) -> None:
    assert_every_sample_matches(conv, reference, OP)


def test_errors_match_reference(conv: Backend, reference: Backend) -> None:
    assert_errors_match_reference(conv, reference, OP)


# (input, weight, stride, padding, dilation, groups, transposed, outputPadding): realistic layers
LAYERS = [
    ((8, 64, 28, 28), (64, 64, 3, 3), [1, 1], [1, 1], [1, 1], 1, False, None),  # ResNet 3x3
    ((8, 64, 28, 28), (128, 64, 3, 3), [2, 2], [1, 1], [1, 1], 1, False, None),  # strided down-sampling
    ((8, 256, 14, 14), (64, 256, 1, 1), [1, 1], [0, 0], [1, 1], 1, False, None),  # 1x1 bottleneck
    ((4, 96, 20, 20), (96, 1, 3, 3), [1, 1], [1, 1], [1, 1], 96, False, None),  # depthwise
    ((4, 64, 18, 18), (128, 16, 3, 3), [1, 1], [2, 2], [2, 2], 4, False, None),  # grouped, dilated
    ((4, 32, 300), (64, 32, 5), [2], [2], [1], 1, False, None),  # 1-D
    ((2, 16, 8, 20, 20), (32, 16, 3, 3, 3), [1, 2, 2], [1, 1, 1], [1, 1, 1], 1, False, None),  # 3-D
    ((4, 64, 14, 14), (64, 32, 4, 4), [2, 2], [1, 1], [1, 1], 1, True, [0, 0]),  # transposed up-sampling
    ((2, 32, 5, 9, 9), (32, 8, 3, 3, 3), [2, 2, 2], [1, 1, 1], [1, 1, 1], 2, True, [1, 1, 1]),  # transposed 3-D
]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("layer", LAYERS, ids=lambda c: f"{len(c[0]) - 2}d-{'T' if c[6] else 'P'}-g{c[5]}-{c[1]}")
def test_realistic_layers(conv: Backend, reference: Backend, dtype: Any, layer: tuple) -> None:
    x, w, stride, padding, dilation, groups, transposed, out_pad = layer
    args = grad_args(
        np.random.default_rng(5), x, w, dtype, stride=stride, padding=padding, dilation=dilation, groups=groups,
        transposed=transposed, out_pad=out_pad,
    )  # fmt: skip
    compare(conv, reference, args, note=str(layer))


@pytest.mark.parametrize("transposed", [False, True])
def test_chunked_weight_gradient(conv: Backend, reference: Backend, transposed: bool) -> None:
    """A budget of a few hundred columns: many partial slices summed into gradWeight, in a padded view."""
    args = grad_args(
        np.random.default_rng(6), (6, 32, 17, 19), (32, 16, 3, 3), np.float32, stride=[1, 2], padding=[1, 1],
        groups=2, transposed=transposed, out_pad=[0, 1] if transposed else None,
    )  # fmt: skip
    conv.convolution.chunk_bytes = 1 << 18  # type: ignore[attr-defined]
    compare(conv, reference, args, "padded", "small chunks")


@pytest.mark.parametrize("cube", [1, 2])
def test_cube_math_type(conv: Backend, reference: Backend, cube: int) -> None:
    args = grad_args(
        np.random.default_rng(7), (4, 32, 16, 16), (48, 32, 3, 3), np.float32, stride=[1, 1], padding=[1, 1], cube=cube
    )
    compare(conv, reference, args, note=f"cubeMathType {cube}")

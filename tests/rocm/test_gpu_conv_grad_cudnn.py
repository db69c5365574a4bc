"""ConvolutionBackward's cuDNN path on an NVIDIA GPU (``ACL_CONV_GRAD_PATH=cudnn`` forced on the runner), against
the reference under the op's accuracy class: strides, asymmetric padding, dilation, groups, 1-D / 2-D / 3-D,
transposed, strided views, in every claimed dtype; each test also checks that cuDNN, not the GEMM path, ran."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.spec.ops import conv_grad
from tests.rocm.test_gpu_conv_grad import compare

pytestmark = pytest.mark.gpu
OP = "ConvolutionBackward"
DTYPES = [D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16]

# (input, weight, stride, padding, dilation, groups, transposed, outputPadding)
CASES = [
    ((2, 4, 7, 6), (6, 4, 3, 3), [2, 2], [1, 1], [1, 1], 1, False, None),  # stride 2, odd size
    ((2, 4, 7, 9), (6, 2, 3, 2), [1, 2], [2, 0, 1, 1], [2, 1], 2, False, None),  # asymmetric, dilated, grouped
    ((2, 6, 9, 9), (6, 1, 3, 3), [1, 1], [1, 1], [1, 1], 6, False, None),  # depthwise
    ((2, 3, 11), (5, 3, 4), [2], [1, 2], [1], 1, False, None),  # 1-D, asymmetric
    ((1, 4, 4, 5, 6), (4, 2, 3, 3, 2), [1, 2, 1], [1, 1, 0], [1, 1, 2], 2, False, None),  # 3-D grouped
    ((2, 4, 4, 5), (4, 3, 3, 3), [2, 2], [1, 1], [1, 1], 1, True, [1, 0]),  # transposed up-sampling
    ((1, 4, 3, 3, 3), (4, 2, 2, 3, 3), [2, 1, 2], [0, 1, 1], [1, 1, 1], 2, True, [1, 0, 0]),  # transposed 3-D
]
LAYERS = [  # realistic sizes: cuDNN's tensor-core engines, not only its fallbacks
    ((8, 64, 28, 28), (64, 64, 3, 3), [1, 1], [1, 1], [1, 1], 1, False, None),  # ResNet 3x3
    ((8, 64, 28, 28), (128, 64, 3, 3), [2, 2], [1, 1], [1, 1], 1, False, None),  # strided down-sampling
    ((8, 256, 14, 14), (64, 256, 1, 1), [1, 1], [0, 0], [1, 1], 1, False, None),  # 1x1 bottleneck
    ((4, 96, 20, 20), (96, 1, 3, 3), [1, 1], [1, 1], [1, 1], 96, False, None),  # depthwise
    ((4, 64, 18, 18), (128, 16, 3, 3), [1, 1], [2, 2], [2, 2], 4, False, None),  # grouped, dilated
    ((2, 16, 8, 20, 20), (32, 16, 3, 3, 3), [1, 2, 2], [1, 1, 1], [1, 1, 1], 1, False, None),  # 3-D
    ((4, 64, 14, 14), (64, 32, 4, 4), [2, 2], [1, 1], [1, 1], 1, True, [0, 0]),  # transposed up-sampling
]


def spec_args(rng: np.random.Generator, case: tuple, dtype: D, cube: int = 0) -> dict[str, Any]:
    """The ConvolutionBackward call of one (input, weight, stride, padding, dilation, groups, transposed,
    outputPadding) case, drawn as the spec's samples are (asymmetric padding included)."""
    x, w, stride, padding, dilation, groups, transposed, out_pad = case
    geometry = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
    geometry |= {"transposed": transposed, "output_padding": out_pad}
    return conv_grad.case(rng, x, w, dtype, cube=cube, **geometry)


def case_id(case: tuple) -> str:
    """A short test id: rank, plain/transposed, groups, stride."""
    return f"{len(case[0]) - 2}d-{'T' if case[6] else 'P'}-g{case[5]}-s{'x'.join(map(str, case[2]))}-{case[1][0]}"


@pytest.fixture
def forced(rocm: Backend) -> Iterator[Any]:
    """The conv_grad runner with the cuDNN path forced (skipped where cuDNN does not load); restored afterwards."""
    if OP not in rocm.capabilities().ops:
        pytest.skip(f"{OP} not claimed")
    runner = rocm.conv_grad  # type: ignore[attr-defined]
    why = runner.cudnn.refusal()
    if why is not None:
        pytest.skip(why)
    runner.path_override = "cudnn"
    yield runner
    runner.path_override = None


def _check(rocm: Backend, reference: Backend, runner: Any, args: dict[str, Any], layout: str, note: str) -> None:
    """rocm against the reference, then: both gradients went to cuDNN. A graph cuDNN refused for asymmetric padding
    (which some engines lack) skips with the reason, after the GEMM path's results passed."""
    compare(rocm, reference, args, layout, note)
    op = "fprop" if args["transposed"] else "dgrad"
    if len(args["padding"]) == 2 * len(args["stride"]):
        refused = [p for p in runner.last_path.values() if p.startswith("gemm (cuDNN refused")]
        if refused:
            pytest.skip(f"asymmetric padding: {refused[0]}")
    assert runner.last_path == {"gradInput": f"cudnn {op}", "gradWeight": "cudnn wgrad"}, (note, runner.last_path)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.short)
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_cudnn_geometries(rocm: Backend, reference: Backend, forced: Any, dtype: D, case: tuple) -> None:
    args = spec_args(np.random.default_rng(11), case, dtype)
    _check(rocm, reference, forced, args, "contiguous", str(case))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.short)
@pytest.mark.parametrize("case", LAYERS, ids=case_id)
def test_cudnn_realistic_layers(rocm: Backend, reference: Backend, forced: Any, dtype: D, case: tuple) -> None:
    args = spec_args(np.random.default_rng(12), case, dtype)
    _check(rocm, reference, forced, args, "contiguous", str(case))


@pytest.mark.parametrize("case", LAYERS[:3], ids=case_id)
def test_cudnn_nondeterministic_engines(rocm: Backend, reference: Backend, forced: Any, case: tuple) -> None:
    """``cudnn-nondet``: engines that sum with atomics are allowed; the accuracy class still holds."""
    forced.path_override = "cudnn-nondet"
    _check(rocm, reference, forced, spec_args(np.random.default_rng(16), case, D.ACL_BF16), "contiguous", str(case))


@pytest.mark.parametrize("layout", ["transposed", "padded"])
def test_cudnn_strided_views(rocm: Backend, reference: Backend, forced: Any, layout: str) -> None:
    args = spec_args(np.random.default_rng(13), LAYERS[1], D.ACL_BF16)
    compare(rocm, reference, args, layout, f"{layout}: {forced.last_path}")
    assert set(forced.last_path) == {"gradInput", "gradWeight"}
    if layout == "transposed":  # every stride reversed: cuDNN misread such views on the H100 (2026-12-07)
        assert forced.last_path == {"gradInput": "gemm", "gradWeight": "gemm"}


def test_cudnn_masks_and_cube_math_types(rocm: Backend, reference: Backend, forced: Any) -> None:
    rng = np.random.default_rng(14)
    args = spec_args(rng, LAYERS[0], D.ACL_FLOAT16)
    args["outputMask"] = [False, True, True]
    compare(rocm, reference, args, "contiguous", "no gradInput")
    assert forced.last_path == {"gradWeight": "cudnn wgrad"}
    for cube in (1, 3):
        args = spec_args(rng, LAYERS[0], D.ACL_FLOAT, cube=cube)
        compare(rocm, reference, args, "contiguous", f"cubeMathType {cube}: HF32-rounded copies, no TF32")
        assert forced.last_path == {"gradInput": "cudnn dgrad hf32", "gradWeight": "cudnn wgrad hf32"}
    args = spec_args(rng, LAYERS[0], D.ACL_FLOAT, cube=2)
    compare(rocm, reference, args, "contiguous", "cubeMathType 2 (fp16 operands) keeps the GEMM path")
    assert forced.last_path == {"gradInput": "gemm", "gradWeight": "gemm"}


def test_cudnn_gradients_replay_bit_for_bit_under_capture(rocm: Backend, forced: Any) -> None:
    """The cuDNN graphs (workspace from stream-ordered allocation) captured once and replayed give the eager bits."""
    from tests.rocm.capture_harness import replays_like_eager

    if not rocm.capabilities().stream_capture:
        pytest.skip("rocm does not capture here")
    replays_like_eager(rocm, OP, spec_args(np.random.default_rng(15), LAYERS[1], D.ACL_BF16))
    assert forced.last_path == {"gradInput": "cudnn dgrad", "gradWeight": "cudnn wgrad"}

"""The reference's Convolution against PyTorch's conv1d/2d/3d and conv_transpose1d/2d/3d on the CPU."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from acl_core.errors import AclnnError
from acl_core.spec.ops import get_spec
from tests.conftest import assert_close
from tests.ops.test_matmul import hf32_by_frexp
from tests.ops.torch_ref import ref, to_numpy, to_torch

BF16 = ml_dtypes.bfloat16
DTYPES = [np.float32, np.float16, BF16]
CONV: dict[int, Callable[..., torch.Tensor]] = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
CONV_T: dict[int, Callable[..., torch.Tensor]] = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


def _f64(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.asarray(a).astype(np.float64))


def _conv(
    x: np.ndarray,
    w: np.ndarray,
    bias: np.ndarray | None = None,
    *,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int = 1,
    transposed: bool = False,
    output_padding: list[int] | None = None,
    cube: int = 0,
) -> np.ndarray:
    out: np.ndarray = ref(
        "Convolution",
        input=x,
        weight=w,
        bias=bias,
        stride=stride,
        padding=padding,
        dilation=dilation,
        transposed=transposed,
        outputPadding=output_padding if output_padding is not None else [0] * len(stride),
        groups=groups,
        cubeMathType=cube,
    )["output"]
    return out


# (input shape, weight shape, stride, padding, dilation, groups): plain convolutions
PLAIN = [
    ((2, 4, 11), (6, 4, 3), [2], [1], [1], 1),
    ((1, 4, 9), (4, 1, 2), [1], [0], [3], 4),
    ((2, 4, 7, 6), (6, 2, 3, 2), [1, 2], [1, 0], [2, 1], 2),
    ((1, 3, 5, 5), (3, 1, 3, 3), [1, 1], [1, 1], [1, 1], 3),
    ((1, 2, 5, 6, 4), (4, 2, 2, 3, 2), [2, 1, 1], [1, 1, 0], [1, 1, 2], 1),
    ((2, 4, 3, 4, 3), (2, 2, 1, 2, 2), [1, 1, 2], [0, 1, 1], [1, 1, 1], 2),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("case", PLAIN, ids=lambda c: f"{len(c[0]) - 2}d-g{c[5]}-{c[0]}")
def test_convolution_matches_torch(dtype: type, case: tuple, rng: np.random.Generator) -> None:
    x_shape, w_shape, stride, padding, dilation, groups = case
    x = rng.uniform(-2, 2, x_shape).astype(dtype)
    w = rng.uniform(-1, 1, w_shape).astype(dtype)
    b = rng.uniform(-1, 1, w_shape[0]).astype(dtype)
    got = _conv(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups)
    fn = CONV[len(x_shape) - 2]
    assert got.dtype == np.dtype(dtype)
    # float64 torch is the exact answer the reference's rounding is measured against
    assert_close(got, fn(_f64(x), _f64(w), _f64(b), stride, padding, dilation, groups).numpy())
    if dtype == np.float32:  # and torch's own float32 kernel agrees to float32 accuracy
        assert_close(
            got, fn(to_torch(x), to_torch(w), to_torch(b), stride, padding, dilation, groups).numpy(), atol=1e-4
        )


# (input shape, weight shape, stride, padding, dilation, groups, outputPadding): transposed convolutions
TRANSPOSED = [
    ((2, 4, 5), (4, 3, 3), [2], [1], [1], 1, [1]),
    ((1, 4, 6), (4, 2, 2), [3], [0], [2], 2, [1]),
    ((1, 4, 3, 4), (4, 2, 3, 3), [2, 2], [1, 0], [1, 2], 2, [1, 1]),
    ((2, 3, 4, 3), (3, 2, 2, 3), [1, 2], [0, 1], [1, 1], 1, [0, 1]),
    ((1, 2, 2, 3, 2), (2, 1, 2, 2, 2), [2, 1, 2], [0, 0, 1], [1, 1, 1], 1, [1, 0, 0]),
    ((1, 4, 2, 2, 3), (4, 1, 2, 1, 2), [1, 2, 1], [1, 0, 0], [2, 1, 1], 2, [0, 1, 0]),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("case", TRANSPOSED, ids=lambda c: f"{len(c[0]) - 2}d-g{c[5]}-{c[0]}")
def test_transposed_convolution_matches_torch(dtype: type, case: tuple, rng: np.random.Generator) -> None:
    x_shape, w_shape, stride, padding, dilation, groups, output_padding = case
    x = rng.uniform(-2, 2, x_shape).astype(dtype)
    w = rng.uniform(-1, 1, w_shape).astype(dtype)
    b = rng.uniform(-1, 1, w_shape[1] * groups).astype(dtype)
    got = _conv(
        x,
        w,
        b,
        stride=stride,
        padding=padding,
        dilation=dilation,
        groups=groups,
        transposed=True,
        output_padding=output_padding,
    )
    fn = CONV_T[len(x_shape) - 2]
    want = fn(_f64(x), _f64(w), _f64(b), stride, padding, output_padding, groups, dilation)
    assert got.dtype == np.dtype(dtype)
    assert_close(got, want.numpy())


def test_asymmetric_padding_matches_explicit_padding(rng: np.random.Generator) -> None:
    x = rng.uniform(-2, 2, (1, 3, 8)).astype(np.float32)
    w = rng.uniform(-1, 1, (2, 3, 2)).astype(np.float32)
    got = _conv(x, w, stride=[1], padding=[2, 1], dilation=[3])
    assert_close(got, F.conv1d(F.pad(_f64(x), (2, 1)), _f64(w), dilation=3).numpy())
    x2 = rng.uniform(-2, 2, (2, 2, 5, 6)).astype(np.float32)
    w2 = rng.uniform(-1, 1, (3, 2, 2, 3)).astype(np.float32)
    # CANN's four values are [top, bottom, left, right]; F.pad takes (left, right, top, bottom)
    got = _conv(x2, w2, stride=[2, 1], padding=[1, 0, 2, 1], dilation=[1, 1])
    assert_close(got, F.conv2d(F.pad(_f64(x2), (2, 1, 1, 0)), _f64(w2), stride=[2, 1]).numpy())


def test_transposed_asymmetric_padding_crops_each_side(rng: np.random.Generator) -> None:
    x = rng.uniform(-2, 2, (1, 2, 3, 4)).astype(np.float32)
    w = rng.uniform(-1, 1, (2, 3, 3, 3)).astype(np.float32)
    got = _conv(x, w, stride=[2, 2], padding=[1, 0, 0, 2], dilation=[1, 1], transposed=True, output_padding=[1, 1])
    # transposed padding removes rows and columns from the unpadded result: top 1, bottom 0, left 0, right 2
    full = F.conv_transpose2d(_f64(x), _f64(w), stride=2, output_padding=1).numpy()
    assert got.shape == (1, 3, full.shape[2] - 1, full.shape[3] - 2)
    assert_close(got, full[:, :, 1:, : full.shape[3] - 2])


def test_hand_computed_1d() -> None:
    x = np.array([[[1.0, 2.0, 3.0, 4.0]]], np.float32)
    w = np.array([[[1.0, -1.0]]], np.float32)
    # y[i] = x[i] - x[i + 1] with zero padding of one on each side and bias 10
    got = _conv(x, w, np.array([10.0], np.float32), stride=[1], padding=[1], dilation=[1])
    assert_close(got, np.array([[[9.0, 9.0, 9.0, 9.0, 14.0]]]))
    # transposed: each x[i] scatters x[i] * w to positions 2i and 2i + 1
    got = _conv(x, w, stride=[2], padding=[0], dilation=[1], transposed=True, output_padding=[0])
    assert_close(got, np.array([[[1.0, -1.0, 2.0, -2.0, 3.0, -3.0, 4.0, -4.0]]]))


def test_mixed_dtypes_promote_and_plain_output_may_be_wider(rng: np.random.Generator) -> None:
    x = rng.uniform(-2, 2, (1, 2, 4, 4)).astype(np.float16)
    w = rng.uniform(-1, 1, (2, 2, 3, 3)).astype(np.float32)
    got = _conv(x, w, stride=[1, 1], padding=[0, 0], dilation=[1, 1])
    assert got.dtype == np.float32
    assert_close(got, F.conv2d(_f64(x), _f64(w)).numpy())


OPERAND_ROUNDING: dict[int, Callable[[np.ndarray], np.ndarray]] = {
    0: lambda a: a.astype(np.float64),
    1: hf32_by_frexp,  # ALLOW_FP32_DOWN_PRECISION: HF32, as for Matmul
    2: lambda a: a.astype(np.float16).astype(np.float64),  # USE_FP16
    3: hf32_by_frexp,  # USE_HF32
}


@pytest.mark.parametrize("cube", [0, 1, 2, 3])
def test_cube_math_type_rounds_fp32_operands_as_for_matmul(cube: int, rng: np.random.Generator) -> None:
    x = rng.uniform(-2, 2, (1, 3, 6, 6)).astype(np.float32)
    w = rng.uniform(-1, 1, (4, 3, 3, 3)).astype(np.float32)
    got = _conv(x, w, stride=[1, 1], padding=[1, 1], dilation=[1, 1], cube=cube)
    rounded = OPERAND_ROUNDING[cube]
    expected = F.conv2d(torch.from_numpy(rounded(x)), torch.from_numpy(rounded(w)), padding=1).numpy()
    assert_close(got, expected, atol=1e-6, rtol=1e-6)
    if cube:  # the rounding is visible: the exact product of the unrounded operands differs
        exact = F.conv2d(_f64(x), _f64(w), padding=1).numpy()
        assert np.abs(got - exact).max() > 1e-5


def test_empty_batch_and_views(rng: np.random.Generator) -> None:
    got = _conv(np.zeros((0, 2, 4, 4), np.float32), np.ones((3, 2, 3, 3), np.float32), stride=[1, 1],
                padding=[1, 1], dilation=[1, 1])  # fmt: skip
    assert got.shape == (0, 3, 4, 4)
    x = rng.uniform(-2, 2, (2, 3, 5, 5)).astype(np.float32)
    w = rng.uniform(-1, 1, (2, 3, 2, 2)).astype(np.float32)
    args: dict[str, Any] = dict(input=x, weight=w, stride=[1, 1], padding=[0, 0], dilation=[1, 1], transposed=False,
                                outputPadding=[0, 0], groups=1, cubeMathType=0)  # fmt: skip
    want = ref("Convolution", **args)["output"]
    for layout in ("padded", "transposed"):
        assert_close(ref("Convolution", **args, layout=layout)["output"], want, atol=0, rtol=0)
    assert_close(want, to_numpy(F.conv2d(_f64(x), _f64(w))))


def test_error_samples_fail_with_their_code() -> None:
    spec = get_spec("Convolution")
    assert spec.error_samples is not None
    cases = list(spec.error_samples(np.random.default_rng(0)))
    assert len(cases) >= 10
    for case in cases:
        with pytest.raises(AclnnError) as exc:
            ref("Convolution", **case.args)
        assert exc.value.code == case.code, f"{case.note}: {exc.value.message}"


def test_conformance_samples_match_torch() -> None:
    spec = get_spec("Convolution")
    assert spec.samples is not None
    cases = list(spec.samples(np.random.default_rng(0)))
    seen = {(len(c.args["input"].shape) - 2, bool(c.args["transposed"])) for c in cases}
    assert seen == {(1, False), (2, False), (3, False), (1, True), (2, True), (3, True)}
    for case in cases:
        a = case.args
        got = ref("Convolution", **a)["output"]
        x, w = _f64(a["input"]), _f64(a["weight"])
        b = None if a["bias"] is None else _f64(a["bias"])
        pad = a["padding"]
        rank = x.dim() - 2
        if a["transposed"]:
            want = CONV_T[rank](x, w, b, a["stride"], pad, a["outputPadding"], a["groups"], a["dilation"])
        else:
            if len(pad) != rank:  # asymmetric: [left, right] or [top, bottom, left, right]
                x = F.pad(x, [v for pair in reversed(list(zip(pad[::2], pad[1::2]))) for v in pair])
                pad = [0] * rank
            want = CONV[rank](x, w, b, a["stride"], pad, a["dilation"], a["groups"])
        assert_close(got, want.numpy(), atol=None if got.dtype != np.float16 else 2e-3)


def test_null_output_padding_is_refused_only_when_transposed(rng: np.random.Generator) -> None:
    x = rng.uniform(-2, 2, (1, 2, 5)).astype(np.float32)
    w = rng.uniform(-1, 1, (2, 3, 2)).astype(np.float32)
    common: dict[str, Any] = dict(input=x, weight=w, stride=[1], padding=[0], dilation=[1], groups=1, cubeMathType=0)
    with pytest.raises(AclnnError) as exc:
        ref("Convolution", **common, transposed=True, outputPadding=None)
    assert exc.value.code == 161001
    got = ref("Convolution", **{**common, "weight": w.transpose(1, 0, 2).copy()}, transposed=False, outputPadding=None)
    assert got["output"].shape == (1, 3, 4)

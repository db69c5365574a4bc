"""The reference's StridedSlice, StridedSliceAssignV2, RepeatInterleave family and EmbeddingDenseBackward against
PyTorch's CPU results (TensorFlow's documented StridedSlice examples and NumPy where torch has no form)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from acl_core.errors import AclnnError
from acl_core.spec.ops import get_spec
from tests.conftest import assert_close
from tests.ops.torch_ref import check_samples_and_errors, ref, to_numpy, to_torch

OPS = [
    "StridedSlice",
    "StridedSliceAssignV2",
    "RepeatInterleave",
    "RepeatInterleaveWithDim",
    "RepeatInterleaveInt",
    "RepeatInterleaveIntWithDim",
    "RepeatInterleaveTensor",
    "RepeatInterleaveGrad",
    "EmbeddingDenseBackward",
]
NO_MASKS = {"beginMask": 0, "endMask": 0, "ellipsisMask": 0, "newAxisMask": 0, "shrinkAxisMask": 0}


def fails(code: int, op: str, **kwargs: object) -> None:
    """``op`` must raise an AclnnError with ``code``."""
    with pytest.raises(AclnnError) as exc:
        ref(op, **kwargs)
    assert exc.value.code == code, exc.value.message


@pytest.mark.parametrize("op", OPS)
def test_samples_run_and_errors_fail_with_their_codes(op: str) -> None:
    check_samples_and_errors(get_spec(op))


def strided(x: np.ndarray, begin: list[int], end: list[int], strides: list[int], **masks: int) -> np.ndarray:
    """StridedSlice on the reference."""
    out: np.ndarray = ref("StridedSlice", self=x, begin=begin, end=end, strides=strides, **{**NO_MASKS, **masks})["out"]
    return out


def test_strided_slice_follows_tensorflows_documented_examples() -> None:
    t = np.array([[[1, 1, 1], [2, 2, 2]], [[3, 3, 3], [4, 4, 4]], [[5, 5, 5], [6, 6, 6]]], np.int32)
    np.testing.assert_array_equal(strided(t, [1, 0, 0], [2, 1, 3], [1, 1, 1]), [[[3, 3, 3]]])
    np.testing.assert_array_equal(strided(t, [1, 0, 0], [2, 2, 3], [1, 1, 1]), [[[3, 3, 3], [4, 4, 4]]])
    np.testing.assert_array_equal(strided(t, [1, -1, 0], [2, -3, 3], [1, -1, 1]), [[[4, 4, 4], [3, 3, 3]]])


@pytest.mark.parametrize(
    "begin,end,strides",
    [([1, -5], [5, 100], [2, 1]), ([-100], [-2], [3]), ([0, 0, 1], [5, 6, 4], [1, 4, 2]), ([2], [2], [1])],
)
def test_positive_strides_match_torch_slicing(begin: list[int], end: list[int], strides: list[int]) -> None:
    x = np.arange(120, dtype=np.float32).reshape(5, 6, 4)
    want = to_torch(x)[tuple(slice(b, e, s) for b, e, s in zip(begin, end, strides))]
    np.testing.assert_array_equal(strided(x, begin, end, strides), to_numpy(want))


@pytest.mark.parametrize(
    "begin,end,strides", [([4, 5], [0, -100], [-1, -2]), ([-1], [-100], [-2]), ([100, 2], [-7, 0], [-3, -1])]
)
def test_negative_strides_match_numpy_slicing(begin: list[int], end: list[int], strides: list[int]) -> None:
    x = np.arange(120, dtype=np.int64).reshape(5, 6, 4)
    # NumPy's slice reads a negative end as counting from the end too; TF clamps it to -1 (before element 0):
    # positions below -size mean "down to element 0 included", NumPy's None
    index = tuple(slice(b, None if e < -x.shape[d] else e, s) for d, (b, e, s) in enumerate(zip(begin, end, strides)))
    np.testing.assert_array_equal(strided(x, begin, end, strides), x[index])


def test_masks_match_numpy_indexing() -> None:
    x = np.arange(120, dtype=np.int16).reshape(5, 6, 4)
    # x[..., 2, None]: ellipsis, a shrunk index, a new axis
    got = strided(x, [0, 2, 0], [0, 3, 1], [1, 1, 1], ellipsisMask=1, shrinkAxisMask=2, newAxisMask=4)
    np.testing.assert_array_equal(got, x[..., 2, None])
    # x[-1, None, ..., 1:4:2]
    got = strided(x, [-1, 0, 0, 1], [0, 0, 0, 4], [1, 1, 1, 2], shrinkAxisMask=1, newAxisMask=2, ellipsisMask=4)
    np.testing.assert_array_equal(got, x[-1, None, ..., 1:4:2])
    # x[::-1, :, 1:] with masked begin and end on the first dim
    got = strided(x, [9, 0, 1], [9, 0, 4], [-1, 1, 1], beginMask=3, endMask=3)
    np.testing.assert_array_equal(got, x[::-1, :, 1:])


def test_strided_slice_refusals() -> None:
    x = np.zeros((3, 4), np.float32)
    fails(161002, "StridedSlice", self=x, begin=[3], end=[4], strides=[1], **{**NO_MASKS, "shrinkAxisMask": 1})
    fails(161002, "StridedSlice", self=x, begin=[0], end=[4], strides=[0], **NO_MASKS)
    fails(161002, "StridedSlice", self=x, begin=[0], end=[4], strides=[-1], **{**NO_MASKS, "shrinkAxisMask": 1})


def test_strided_slice_assign_matches_torch_setitem() -> None:
    rng = np.random.default_rng(3)
    var = rng.standard_normal((6, 5, 4)).astype(np.float32)
    value = rng.standard_normal((3, 4, 4)).astype(np.float32)
    got = ref(
        "StridedSliceAssignV2",
        varRef=var,
        inputValue=value,
        begin=[-5, 0],
        end=[100, 4],
        strides=[2, 1],
        axesOptional=[0, 1],
    )["varRef"]
    want = to_torch(var).clone()
    want[1:6:2, 0:4] = to_torch(value)
    np.testing.assert_array_equal(got, to_numpy(want))


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, np.int8, np.bool_])
def test_repeat_interleave_forms_match_torch(dtype: type) -> None:
    rng = np.random.default_rng(5)
    x = (rng.integers(-5, 5, (3, 4)) > 0) if dtype is np.bool_ else rng.integers(-5, 5, (3, 4)).astype(dtype)
    xt = to_torch(np.asarray(x))
    flat = rng.integers(0, 4, (12,))
    per_row = rng.integers(0, 4, (4,))
    cases = [
        ("RepeatInterleave", {"repeats": flat}, torch.repeat_interleave(xt, torch.from_numpy(flat))),
        ("RepeatInterleave", {"repeats": np.array([3])}, torch.repeat_interleave(xt, 3)),
        ("RepeatInterleaveInt", {"repeats": 2}, torch.repeat_interleave(xt, 2)),
        (
            "RepeatInterleaveWithDim",
            {"repeats": per_row, "dim": 1},
            torch.repeat_interleave(xt, torch.from_numpy(per_row), dim=1),
        ),
        ("RepeatInterleaveIntWithDim", {"repeats": 3, "dim": -2}, torch.repeat_interleave(xt, 3, dim=-2)),
    ]
    for op, args, want in cases:
        got = ref(op, self=np.asarray(x), outputSize=int(want.shape[args.get("dim", 0)]), **args)["out"]
        np.testing.assert_array_equal(got, to_numpy(want), err_msg=op)
        fails(161002, op, self=np.asarray(x), outputSize=int(want.shape[args.get("dim", 0)]) + 1, **args)


def test_repeat_interleave_tensor_matches_torch() -> None:
    for reps in (np.array([1, 3]), np.array([0, 2, 0, 4], np.int32), np.zeros((0,), np.int64)):
        want = torch.repeat_interleave(torch.from_numpy(reps))
        got = ref("RepeatInterleaveTensor", repeats=reps, outputSize=int(want.numel()))["out"]
        np.testing.assert_array_equal(got, to_numpy(want).astype(reps.dtype))
        assert got.dtype == reps.dtype


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_repeat_interleave_grad_is_autograd_of_repeat_interleave(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(2, 4, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    reps = torch.tensor([1, 3, 0, 2])
    y = torch.repeat_interleave(x, reps, dim=1)
    dy = torch.randn(y.shape, generator=gen, dtype=torch.float64).to(dtype)
    y.backward(dy.double())
    got = ref("RepeatInterleaveGrad", yGrad=to_numpy(dy), repeats=reps.numpy(), axis=1)["out"]
    assert_close(got.astype(np.float64), x.grad.to(dtype).double().numpy(), atol=0, rtol=0)  # one rounding
    # one repeats value: out's size gives the groups (the doc's [64] -> [2, 16] example)
    dy64 = torch.randn(64, generator=gen).to(dtype)
    out = np.zeros((2, 16), to_numpy(dy64).dtype)
    got = ref("RepeatInterleaveGrad", yGrad=to_numpy(dy64), repeats=np.array([2]), axis=0, out=out)["out"]
    want = dy64.double().reshape(32, 2).sum(1).to(dtype).reshape(2, 16)
    assert_close(got, to_numpy(want), atol=0, rtol=0)


@pytest.mark.parametrize("scale", [False, True])
@pytest.mark.parametrize("padding", [None, 2, -3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_embedding_dense_backward_is_autograd_of_embedding(
    scale: bool, padding: int | None, dtype: torch.dtype
) -> None:
    gen = torch.Generator().manual_seed(4)
    weights = 9
    idx = torch.randint(0, weights, (4, 7), generator=gen)
    idx[0, :3] = 2  # a repeated row, the padding row
    w = torch.randn(weights, 5, dtype=torch.float64, requires_grad=True)
    y = F.embedding(idx, w, padding_idx=padding, scale_grad_by_freq=scale)
    dy = torch.randn(y.shape, generator=gen, dtype=torch.float64).to(dtype)
    y.backward(dy.double())
    pad = -1 if padding is None else padding % weights  # F.embedding normalises a negative padding_idx
    args = {"grad": to_numpy(dy), "indices": idx.numpy(), "numWeights": weights, "scaleGradByFreq": scale}
    got = ref("EmbeddingDenseBackward", **args, paddingIdx=pad % 2**64)["out"]
    assert got.dtype == to_numpy(dy).dtype and got.shape == (weights, 5)
    # one rounding of the float64 sum; the scaled terms g / count are rounded in float64 (by torch too), so
    # a sum landing on a rounding midpoint of the output may go either way: one ulp then
    eps = 0.0 if not scale else float(torch.finfo(dtype).eps)
    assert_close(got.astype(np.float64), w.grad.to(dtype).double().numpy(), atol=0, rtol=eps)
    direct = torch.ops.aten.embedding_dense_backward(dy.float(), idx, weights, pad, scale)
    assert_close(got.astype(np.float32), direct.to(dtype).float().numpy(), atol=1e-2, rtol=1e-2)


def test_embedding_dense_backward_refuses_an_index_past_num_weights() -> None:
    g = np.ones((3, 2), np.float32)
    fails(
        161002,
        "EmbeddingDenseBackward",
        grad=g,
        indices=np.array([0, 3, 1]),
        numWeights=3,
        paddingIdx=0,
        scaleGradByFreq=False,
    )

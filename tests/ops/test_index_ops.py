"""The reference's construction and index movement ops against PyTorch's CPU results and error codes."""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tests.conftest import assert_close
from tests.ops.exact import data, fails, same
from tests.ops.torch_ref import ref, to_numpy, to_torch

BF16 = ml_dtypes.bfloat16
DTYPES = [np.float32, np.float16, BF16, np.int32, np.int8, np.bool_, np.complex64]


@pytest.mark.parametrize(
    "start,end,step,dtype",
    [
        (0, 9, 3, torch.int64),
        (5, -3, -2, torch.int64),
        (0.5, 2.0, 0.25, torch.float32),
        (-1.0, 1.0, 0.3, torch.float64),
    ],
)
def test_range_matches_torch_range(start: float, end: float, step: float, dtype: torch.dtype) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch.range is deprecated, and the op CANN mirrors
        want = torch.range(start, end, step, dtype=dtype)
    n = want.numel()
    got = ref("Range", start=start, end=end, step=step, out=np.zeros((n,), to_numpy(want).dtype))["out"]
    same(got, want)
    fails(161002, "Range", start=start, end=end, step=step, out=np.zeros((n + 1,), to_numpy(want).dtype))


@pytest.mark.parametrize("steps", [0, 1, 2, 7, 100])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32])
def test_linspace_matches_torch(steps: int, dtype: torch.dtype) -> None:
    for start, end in ((-3.0, 10.0), (1.0, -2.5)):
        want = torch.linspace(start, end, steps, dtype=dtype)
        got = ref("Linspace", start=start, end=end, steps=steps, out=np.zeros((steps,), to_numpy(want).dtype))["out"]
        exact = np.linspace(start, end, steps)  # NumPy's double linspace: an independent formula
        assert got.dtype == to_numpy(want).dtype
        if dtype.is_floating_point:  # torch steps in float32: within an ulp of the double result
            if dtype != torch.float64:  # one rounding of a double result: within an ulp of NumPy's
                gap = np.abs(got.astype(np.float64) - exact)
                assert (gap <= np.spacing(np.abs(exact).astype(got.dtype)).astype(np.float64)).all()
            # torch's float32 steps cancel near 0: its error is relative to the bounds, not the value
            bound = 2 * float(torch.finfo(dtype).eps) * max(abs(start), abs(end))
            assert_close(got, to_numpy(want), atol=bound, rtol=0)
        else:
            same(got, np.trunc(exact).astype(got.dtype))


@pytest.mark.parametrize("n,m", [(3, 5), (6, 2), (0, 4), (4, 4)])
def test_eye_matches_torch(n: int, m: int) -> None:
    for dtype in (torch.float32, torch.int64, torch.bool):
        want = torch.eye(n, m, dtype=dtype)
        same(ref("Eye", n=n, m=m, out=np.zeros((n, m), to_numpy(want).dtype))["out"], want)
    fails(161002, "Eye", n=-1, m=2)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_diag_and_diagflat_match_torch(dtype: type, rng: np.random.Generator) -> None:
    for shape in ((4,), (4, 6), (5, 2)):
        x = data(rng, shape, dtype)
        for k in (-7, -2, 0, 1, 3):
            same(ref("Diag", self=x, diagonal=k)["out"], torch.diag(to_torch(x), k))
            same(ref("DiagFlat", self=x, diagonal=k)["out"], torch.diagflat(to_torch(x), k))
    fails(161002, "Diag", self=data(rng, (2, 2, 2), dtype), diagonal=0)


@pytest.mark.parametrize("axis", [-1, 0, 1, 2])
def test_one_hot_matches_torch(axis: int, rng: np.random.Generator) -> None:
    x = rng.integers(0, 5, size=(2, 3)).astype(np.int64)
    one = F.one_hot(torch.from_numpy(x), 5)  # classes last
    for dtype in (np.float32, np.int32, np.uint8):
        on, off = np.array([3], dtype), np.array([1, 9], dtype)
        got = ref("OneHot", self=x, numClasses=5, onValue=on, offValue=off, axis=axis)["out"]
        want = torch.where(one.bool(), 3, 1).to(to_torch(on).dtype)
        same(got, torch.movedim(want, -1, x.ndim if axis == -1 else axis))
    # a value outside [0, numClasses) is a row of offValue, not an error
    x = np.array([-1, 0, 4], np.int32)
    got = ref("OneHot", self=x, numClasses=4, onValue=np.ones(1, np.float32), offValue=np.zeros(1, np.float32), axis=-1)
    same(got["out"], np.array([[0, 0, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0]], np.float32))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_roll_matches_torch(dtype: type, rng: np.random.Generator) -> None:
    x = data(rng, (4, 5, 3), dtype)
    for shifts, dims in (([2, -1], [0, 2]), ([7], []), ([1, 2], [-1, 2]), ([-13], [1])):
        want = torch.roll(to_torch(x), shifts, dims) if dims else torch.roll(to_torch(x), shifts)
        same(ref("Roll", x=x, shifts=shifts, dims=dims)["out"], want)
    fails(161002, "Roll", x=x, shifts=[1, 2], dims=[0])


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_take_matches_torch(dtype: type, rng: np.random.Generator) -> None:
    x = data(rng, (3, 4), dtype)
    index = rng.integers(-12, 12, size=(2, 5))
    same(ref("Take", self=x, index=index)["out"], torch.take(to_torch(x), torch.from_numpy(index)))
    for bad in (12, -13):
        fails(161002, "Take", self=x, index=np.array([0, bad]))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_gather_nd_matches_torch_indexing(dtype: type, rng: np.random.Generator) -> None:
    x = data(rng, (4, 5, 3), dtype)
    for k in (1, 2, 3):
        idx = np.stack([rng.integers(-n, n, size=(2, 3)) for n in x.shape[:k]], axis=-1)
        want = to_torch(x)[tuple(torch.from_numpy(idx[..., j]) for j in range(k))]
        same(ref("GatherNd", self=x, indices=idx, negativeIndexSupport=True)["out"], want)
        if (idx < 0).any():
            fails(161002, "GatherNd", self=x, indices=idx, negativeIndexSupport=False)
    fails(161002, "GatherNd", self=x, indices=np.array([[4, 0]]), negativeIndexSupport=True)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_gather_v3_matches_torch(dtype: type, rng: np.random.Generator) -> None:
    x = data(rng, (4, 5, 3), dtype)
    index = rng.integers(0, 5, size=(2, 3))
    got = ref("GatherV3", self=x, dim=1, index=index, batchDims=0, mode=1)["out"]
    same(got, torch.index_select(to_torch(x), 1, torch.from_numpy(index).reshape(-1)).reshape(4, 2, 3, 3))
    # batchDims 1: batch i gathers along dim 2 of x[i] with index[i] (torch.gather over a broadcast index)
    index = rng.integers(0, 3, size=(4, 6))
    got = ref("GatherV3", self=x, dim=2, index=index, batchDims=1, mode=0)["out"]
    want = torch.gather(to_torch(x), 2, torch.from_numpy(index)[:, None, :].expand(4, 5, 6))
    same(got, want)
    fails(161002, "GatherV3", self=x, dim=1, index=np.array([5]), batchDims=0, mode=0)
    fails(161002, "GatherV3", self=x, dim=1, index=np.array([0]), batchDims=0, mode=2)

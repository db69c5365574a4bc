"""Issue 16's added rows on the GPU at realistic, tile-crossing shapes, under each op's accuracy class (GPU tier).

Reductions: Min, MinDim, MaxV2, MeanV2, ReduceLogSum, Cumprod / InplaceCumprod (the row and scan kernels).
Elementwise: FloorDivide(s), LogicalXor and the XLogY operators (the ufunc rows, vector and strided paths).
Every claimed floating dtype and an integer one where the op takes integers; the spec samples run in
test_gpu_reduction_norm.py / test_gpu_elementwise.py.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from tests.rocm.against_reference import assert_matches_reference

pytestmark = pytest.mark.gpu

FLOATS = [np.float32, np.float16, ml_dtypes.bfloat16]


def _x(shape: tuple[int, ...], dtype: type, low: float = -4.0, high: float = 4.0, seed: int = 16) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(int(low), int(high), shape).astype(dtype)
    return rng.uniform(low, high, shape).astype(dtype)


REDUCTIONS = [
    ("Min", lambda dt: {"self": _x((4096, 4097), dt)}),
    ("MinDim", lambda dt: {"self": _x((300, 5001), dt, -50, 50), "dim": 1, "keepdim": False}),
    ("MinDim", lambda dt: {"self": _x((3000, 257), dt, -50, 50), "dim": 0, "keepdim": True}),
    ("MaxV2", lambda dt: {"self": _x((64, 100_003), dt), "dims": [1], "keepDims": False, "noopWithEmptyDims": False}),
    ("MaxV2", lambda dt: {"self": _x((50, 60, 70), dt), "dims": [0, 2], "keepDims": True, "noopWithEmptyDims": True}),
    ("MeanV2", lambda dt: {"self": _x((64, 100_003), dt), "dim": [1], "keepDim": False, "noopWithEmptyAxes": False}),
    ("MeanV2", lambda dt: {"self": _x((512, 1024), dt), "dim": [], "keepDim": False, "noopWithEmptyAxes": True}),
    (
        "ReduceLogSum",
        lambda dt: {"data": _x((64, 65_537), dt, 0.0, 2.0), "axes": [1], "keepDims": False, "noopWithEmptyAxes": False},
    ),
    ("Cumprod", lambda dt: {"input": _x((40, 3000), dt, 0.99, 1.01), "dim": 1, "dtype": int(D.ACL_DT_UNDEFINED)}),
    ("Cumprod", lambda dt: {"input": _x((3000, 40), dt, 0.99, 1.01), "dim": 0, "dtype": int(D.ACL_FLOAT)}),
    ("InplaceCumprod", lambda dt: {"input": _x((256, 2049), dt, 0.99, 1.01), "dim": -1}),
]
ELEMENTWISE = [
    ("FloorDivide", lambda dt: {"self": _x((2048, 4099), dt, -100, 100), "other": _x((4099,), dt, 1, 9, seed=3)}),
    ("FloorDivides", lambda dt: {"self": _x((2048, 4099), dt, -100, 100), "other": -3}),
    ("InplaceFloorDivide", lambda dt: {"selfRef": _x((1 << 22,), dt, -100, 100), "other": _x((1 << 22,), dt, 1, 9)}),
    ("LogicalXor", lambda dt: {"self": _x((2048, 4099), dt, -1, 2), "other": _x((2048, 1), dt, -1, 2, seed=5)}),
    ("XLogYTensor", lambda dt: {"self": _x((2048, 4099), dt, -2, 2), "other": _x((2048, 4099), dt, 0, 8, seed=7)}),
    ("XLogYScalarSelf", lambda dt: {"self": 2.5, "other": _x((1 << 22,), dt, 0, 8)}),
    ("XLogYScalarOther", lambda dt: {"self": _x((2048, 4099), dt, -2, 2), "other": 0.5}),
    (
        "InplaceXLogYTensor",
        lambda dt: {"selfRef": _x((1 << 22,), dt, -2, 2), "other": _x((1 << 22,), dt, 0, 8, seed=9)},
    ),
    ("InplaceXLogYScalarOther", lambda dt: {"selfRef": _x((1 << 22,), dt, -2, 2), "other": 3}),
]
INTEGER_OPS = {"Min", "MinDim", "MaxV2", "MeanV2", "Cumprod", "FloorDivide", "FloorDivides", "LogicalXor"}
CASES = [
    (op, make, dt)
    for op, make in REDUCTIONS + ELEMENTWISE
    for dt in (*FLOATS, *((np.int32,) if op in INTEGER_OPS else ()))
]


@pytest.mark.parametrize(
    ("op", "make", "dtype"), CASES, ids=[f"{op}-{i}-{np.dtype(dt).name}" for i, (op, _, dt) in enumerate(CASES)]
)
def test_realistic_shapes_match_the_reference(
    rocm: Backend, reference: Backend, op: str, make: object, dtype: type
) -> None:
    args = make(dtype)  # type: ignore[operator]
    assert_matches_reference(rocm, reference, op, args, "contiguous", f"{op} {np.dtype(dtype).name}")
    if op in ("MinDim", "FloorDivide", "XLogYTensor", "Cumprod"):
        assert_matches_reference(rocm, reference, op, args, "transposed", f"{op} {np.dtype(dtype).name} transposed")

"""FloorDivide(s), LogicalXor and the XLogY operators (and their in-place twins) on the kernel emulator.

Each op runs a few small calls covering every claimed dtype class (float32, a 16-bit float, an integer,
bool where claimed), broadcasting, a scalar operand and the special values its semantics name.
"""

from __future__ import annotations

import numpy as np
import pytest

from acl_core.backend import Backend
from tests.rocm.against_reference import assert_matches_reference


def _cases() -> list[tuple[str, dict[str, object]]]:
    rng = np.random.default_rng(16)
    f32 = (rng.standard_normal((3, 5)) * 4).astype(np.float32)
    f16 = f32.astype(np.float16)
    row = np.array([2.5, -1.5, 3.0, -0.5, 7.0], np.float32)
    i32 = rng.integers(-20, 20, (3, 5)).astype(np.int32)
    i8 = rng.integers(1, 9, (5,)).astype(np.int8) * np.array([1, -1, 1, -1, 1], np.int8)
    b = rng.random((3, 5)) < 0.5
    pos = np.abs(f32) + 0.25
    x = f32.copy()
    x[0, :3] = 0.0
    y = pos.copy()
    y[0, 1] = np.nan
    y[1, 0] = 0.0
    return [
        ("FloorDivide", {"self": f32, "other": row}),
        ("FloorDivide", {"self": f16, "other": row.astype(np.float16)}),
        ("FloorDivide", {"self": i32, "other": i8}),
        ("FloorDivides", {"self": i32, "other": -3}),
        ("InplaceFloorDivide", {"selfRef": i32.copy(), "other": i8}),
        ("InplaceFloorDivides", {"selfRef": f32.copy(), "other": -1.5}),
        ("LogicalXor", {"self": b, "other": i32}),
        ("LogicalXor", {"self": f16, "other": b[0]}),
        ("XLogYTensor", {"self": x, "other": y}),
        ("XLogYTensor", {"self": i32, "other": np.abs(i32) + 1}),
        ("XLogYTensor", {"self": x.astype(np.float16), "other": y.astype(np.float16)}),
        ("XLogYScalarSelf", {"self": 0.0, "other": y}),
        ("XLogYScalarOther", {"self": x, "other": 0.0}),
        ("XLogYScalarOther", {"self": b, "other": 3}),
        ("InplaceXLogYTensor", {"selfRef": x.copy(), "other": y}),
        ("InplaceXLogYScalarOther", {"selfRef": f16.copy(), "other": 2.5}),
    ]


STRIDED = (0, 6, 8)
"""Cases also run on transposed views (the general strided kernel; the rest take the contiguous paths)."""


@pytest.mark.parametrize("index", range(len(_cases())))
def test_emulated_matches_the_reference(emulated: Backend, reference: Backend, index: int) -> None:
    op, args = _cases()[index]
    for layout in ("contiguous", "transposed") if index in STRIDED else ("contiguous",):
        assert_matches_reference(emulated, reference, op, args, layout, f"{op} case {index}")

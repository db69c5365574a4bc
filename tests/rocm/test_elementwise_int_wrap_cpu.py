"""Integer arithmetic wraps at the computation dtype's width, also when ``out`` is wider (on the kernel emulator).

rocm's kernels carry integers as 64-bit values; an int8 + int8 sum stored into an int16 ``out`` must still be the
int8 sum (CANN computes in the promoted dtype, then casts), as the reference gives it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend

_A8 = np.array([100, 127, -128, 50, -100, 3, 0, -1], np.int8)
_B8 = np.array([100, 1, -1, 50, -100, 90, 0, -128], np.int8)

CASES: list[tuple[str, dict[str, Any]]] = [
    ("Add", {"self": _A8, "other": _B8, "alpha": 1, "out": np.zeros(8, np.int16)}),
    ("Sub", {"self": _A8, "other": -_B8.astype(np.int16), "alpha": 1, "out": np.zeros(8, np.int32)}),
    ("Mul", {"self": _A8, "other": _B8, "out": np.zeros(8, np.int32)}),
    ("Mul", {"self": _A8.astype(np.uint8), "other": _B8.astype(np.uint8), "out": np.zeros(8, np.int64)}),
    (
        "Add",
        {
            "self": _A8.astype(np.int32) * 2**24,
            "other": _B8.astype(np.int32) * 2**24,
            "alpha": 1,
            "out": np.zeros(8, np.int64),
        },
    ),
]


@pytest.mark.parametrize(("op", "args"), CASES, ids=[f"{k}-{op}" for k, (op, _) in enumerate(CASES)])
def test_integer_results_wrap_before_a_wider_out(emulated: Backend, op: str, args: dict[str, Any]) -> None:
    expected = eager.run(op, "reference", **args)["out"]
    actual = eager.run(op, emulated, **args)["out"]
    assert actual.dtype == expected.dtype
    np.testing.assert_array_equal(actual, expected)

"""The bitwise and shift ops above the provider seam, on a CPU: their generated kernels run in the kernel emulator.

One call per rule that a body has to get right (promotion, logical BOOL, a scalar past the dtype's range,
shift counts out of range, a result widened into a larger ``out``, the in-place twin), each checked bit for
bit against the reference. ``tests/rocm/test_gpu_bitwise.py`` runs every sample on a GPU.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from tests.rocm.against_reference import class_problems

_I8 = np.array([-128, -7, -1, 0, 1, 5, 64, 127], np.int8)
_U8 = np.array([0, 1, 7, 128, 200, 255, 16, 3], np.uint8)
_COUNTS8 = np.array([-2, -1, 0, 1, 7, 8, 9, 3], np.int8)

CASES: list[tuple[str, dict[str, Any]]] = [
    ("BitwiseXorTensor", {"self": _I8.reshape(2, 4), "other": _U8[:4]}),  # int8 ^ uint8 computes in int16
    ("BitwiseAndScalar", {"self": _I8, "other": 300, "out": np.zeros(8, np.int64)}),  # 300 wraps to int8 44
    ("BitwiseOrScalar", {"self": _U8, "other": -2, "out": np.zeros(8, np.int32)}),  # -2 wraps to uint8 254
    ("BitwiseOrTensor", {"self": _U8 > 100, "other": np.array([True, False, False, False] * 2)}),  # logical
    ("BitwiseNot", {"self": _U8}),
    ("BitwiseNot", {"self": _U8 > 100}),
    ("LeftShift", {"self": _I8, "shiftBits": _COUNTS8, "out": np.zeros(8, np.int64)}),  # wraps to int8 first
    (
        "LeftShift",
        {
            "self": np.array([1, 3, 2**63 + 1, 5], np.uint64),
            "shiftBits": np.array([63, 64, 1, 2**64 - 1], np.uint64),
        },
    ),
    ("LeftShifts", {"self": _I8.astype(np.int16), "shiftBits": 65537}),  # the count wraps to int16 1
    ("RightShift", {"input": _I8.astype(np.int32) * 1000, "shiftBits": np.array([-3, 0, 1, 30, 31, 32, 40, 5])}),
    ("RightShift", {"input": _U8, "shiftBits": np.array([0, 1, 7, 8, 9, 200, 3, 2], np.uint8)}),  # clamped to 7
    ("InplaceBitwiseAndTensorOut", {"self": _I8.astype(np.int32).reshape(2, 4), "other": np.int32([-1, 6, 0, 3])}),
]


@pytest.mark.parametrize(("op", "args"), CASES, ids=[f"{k}-{op}" for k, (op, _) in enumerate(CASES)])
def test_matches_the_reference_bit_for_bit(emulated: Backend, op: str, args: dict[str, Any]) -> None:
    expected = eager.run(op, "reference", **args)
    actual = eager.run(op, emulated, **args)
    problems = class_problems(op, args, actual, expected)
    assert not problems, f"{op}: " + "; ".join(p.message for p in problems)
    for name, value in expected.items():
        assert np.asarray(actual[name]).dtype == np.asarray(value).dtype


def test_the_shift_rules_on_known_values() -> None:
    """The reference itself on hand-computed values: CANN's right-shift clamp, torch's left-shift zero."""
    right = eager.run(
        "RightShift", "reference", input=np.array([-8, 8, 200], np.int16), shiftBits=np.int16([-1, 99, 7])
    )
    assert right["out"].tolist() == [-8, 0, 1]
    u8 = eager.run("RightShift", "reference", input=np.uint8([200, 200]), shiftBits=np.uint8([8, 100]))
    assert u8["out"].tolist() == [1, 1]  # a count past the width acts as 7: the top bit stays
    left = eager.run("LeftShift", "reference", self=np.int8([1, 1, 3, 1]), shiftBits=np.int8([7, 8, 6, -1]))
    assert left["out"].tolist() == [-128, 0, -64, 0]

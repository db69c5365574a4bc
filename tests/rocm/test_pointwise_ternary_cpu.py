"""The clamp variants and Addcmul / Addcdiv above the provider seam, on a CPU: their kernels run in the emulator.

One call per rule a body has to get right (NaN bounds, lower above upper, a null ClampTensor bound, bool and
float bounds promoting, integer Addcmul wrapping into a wider ``out``, fp16 in float, division by zero), each
under the op's accuracy class. ``tests/rocm/test_gpu_pointwise_ternary.py`` runs every sample on a GPU.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from tests.rocm.against_reference import class_problems

_X = np.array([[np.nan, -np.inf, -2.5, -0.0], [0.0, 0.75, 3.0, np.inf]], np.float32)
_LO = np.array([-1.0, np.nan, 0.5, 2.0], np.float32)
_HI = np.array([1.0, 2.0, np.nan, 1.0], np.float32)  # the last column has lower > upper
_I = np.array([[-5, 0, 3, 9], [100, -100, 2, 1]], np.int32)

CASES: list[tuple[str, dict[str, Any]]] = [
    ("ClampMin", {"self": _X, "clipValueMin": -1.0}),
    ("ClampMax", {"self": _I, "clipValueMax": 2.5}),  # a float bound: computes in float32
    ("ClampTensor", {"self": _X, "clipValueMin": _LO, "clipValueMax": _HI}),
    ("ClampTensor", {"self": _X, "clipValueMin": None, "clipValueMax": _HI}),
    ("ClampTensor", {"self": _I, "clipValueMin": _I[0] > 0, "clipValueMax": None}),  # bool bounds
    ("ClampMaxTensor", {"self": _X.astype(np.float16), "max": _HI.astype(np.float16)}),
    ("InplaceClampMinTensor", {"selfRef": _I, "clipValueMin": np.int32([0, 1, 2, 3])}),
    (
        "Addcmul",
        {
            "self": _I.astype(np.int8),
            "tensor1": _I.astype(np.int8),
            "tensor2": _I[0].astype(np.int8) * 9,
            "value": 3,
            "out": np.zeros((2, 4), np.int32),
        },
    ),  # int8 wraps before the widening
    (
        "Addcmul",
        {
            "self": _X.astype(np.float16),
            "tensor1": np.float16([1.5, -2, 3e-4, 7]),
            "tensor2": np.float16(60000),
            "value": 0.1,
        },
    ),
    (
        "InplaceAddcdiv",
        {
            "selfRef": np.ones((2, 4), np.float32),
            "tensor1": np.float32([1, 0, -1, 3]),
            "tensor2": np.float32([[0, 0, -0.0, 7], [2, 1e-30, 3, -4]]),
            "value": -0.5,
        },
    ),
]


@pytest.mark.parametrize(("op", "args"), CASES, ids=[f"{k}-{op}" for k, (op, _) in enumerate(CASES)])
def test_matches_the_reference_within_the_class(emulated: Backend, op: str, args: dict[str, Any]) -> None:
    expected = eager.run(op, "reference", **args)
    actual = eager.run(op, emulated, **args)
    problems = class_problems(op, args, actual, expected)
    assert not problems, f"{op}: " + "; ".join(p.message for p in problems)


def test_the_clamp_rules_on_known_values() -> None:
    """The reference on hand-computed values: NaN propagates from x and from a bound; upper wins over lower."""
    out = eager.run("ClampTensor", "reference", self=_X, clipValueMin=_LO, clipValueMax=_HI)["out"]
    want = np.array([[np.nan, np.nan, np.nan, 1.0], [0.0, np.nan, np.nan, 1.0]], np.float32)
    np.testing.assert_array_equal(out, want)
    wrapped = eager.run(
        "Addcmul",
        "reference",
        self=np.int8([0]),
        tensor1=np.int8([100]),
        tensor2=np.int8([2]),
        value=1,
        out=np.zeros(1, np.int32),
    )["out"]
    assert wrapped.tolist() == [-56]  # 200 wraps in int8 before widening


def test_addc_intermediates_are_rounded_on_their_own() -> None:
    """Every float product is ``acl_mul_rn`` (never contracted into an FMA with the add that follows): the H100
    run of 2026-12-07 gave a finite bf16 Addcmul where the float32 product overflows, which the spec makes inf."""
    from acl_rocm.kernels.pointwise_ternary import ROWS

    bodies = {name: body for name, _, body in ROWS if name in ("Addcmul", "Addcdiv")}
    assert "acl_mul_rn(acl_mul_rn(value, tensor1), tensor2)" in bodies["Addcmul"]
    assert bodies["Addcdiv"] == "self + acl_mul_rn(value, tensor1 / tensor2)"

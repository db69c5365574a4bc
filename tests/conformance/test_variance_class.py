"""The variance family's composite class: a float32 GPU-style variance meets it, 16-bit accumulation and
overflowing squares are told apart."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from acl_conformance.compare import compare_outputs
from acl_conformance.tolerances import from_class
from acl_core import eager
from acl_core.dtypes import DataType as D
from acl_core.dtypes import from_numpy
from acl_core.spec.accuracy import accuracy_of, elements_per_output
from acl_core.spec.ops import get_spec

BF16 = ml_dtypes.bfloat16
OPS = ("Var", "VarCorrection", "VarMean", "Std", "StdMeanCorrection")


def _args(op: str, x: np.ndarray, dims: list[int] | None, c: int = 1) -> dict[str, Any]:
    return {
        "self": x,
        "dim": dims,
        ("unbiased" if op == "Var" else "correction"): bool(c) if op == "Var" else c,
        "keepdim": False,
    }


def _row_sums(x: np.ndarray, axes: tuple[int, ...], dtype: type) -> np.ndarray:
    """Σ over ``axes`` in ``dtype``, one element at a time (the worst order), rounding each partial sum."""
    moved = np.moveaxis(x, axes, tuple(range(len(axes))))
    rows = moved.reshape(-1, *moved.shape[len(axes) :])
    total = np.zeros(rows.shape[1:], dtype)
    for term in rows:
        total = (total.astype(np.float32) + term.astype(np.float32)).astype(dtype)
    return total


def _gpu_style(op: str, args: dict[str, Any], acc: type) -> dict[str, np.ndarray]:
    """The op computed one-pass (``E[x²] - E[x]²``), every partial sum rounded to ``acc``."""
    x = np.asarray(args["self"])
    axes = tuple(range(x.ndim)) if not args["dim"] else tuple(sorted(d % x.ndim for d in args["dim"]))
    n = int(np.prod([x.shape[a] for a in axes]))
    c = int(args.get("correction", args.get("unbiased", 0)))
    xs = x.astype(acc)
    total = _row_sums(xs, axes, acc).astype(np.float32)
    with np.errstate(over="ignore"):
        squares = _row_sums((xs.astype(np.float32) * xs.astype(np.float32)).astype(acc), axes, acc).astype(np.float32)
    mean = total / np.float32(n)
    with np.errstate(all="ignore"):
        var = np.maximum((squares - mean * total) / np.float32(n - c), np.float32(0))
    out = x.dtype.type
    value = np.sqrt(var) if op.startswith("Std") else var
    names = {"VarMean": ("varOut", "meanOut"), "StdMeanCorrection": ("stdOut", "meanOut")}.get(op, ("out",))
    found = {names[0]: value.astype(out)}
    if len(names) == 2:
        found["meanOut"] = mean.astype(out)
    return found


def _problems(op: str, args: dict[str, Any], actual: dict[str, np.ndarray]) -> list[Any]:
    expected = eager.run(op, "reference", **args)
    accuracy = accuracy_of(get_spec(op))
    assert accuracy is not None and accuracy.kind == "composite"
    assert accuracy.scale_of is not None
    length = elements_per_output(args, expected)
    scale = accuracy.scale_of(args, expected)

    def tolerance(dtype: D) -> Any:
        return from_class(op, dtype, accuracy, length)

    return compare_outputs(actual, expected, tolerance, scale)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(3, 4096), (64, 33)])
def test_a_float32_one_pass_variance_meets_the_class(op: str, dtype: type, shape: tuple[int, int]) -> None:
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(shape) * 3 + 2).astype(dtype)
    args = _args(op, x, [1])
    assert _problems(op, args, _gpu_style(op, args, np.float32)) == []


@pytest.mark.parametrize("op", OPS)
def test_a_bf16_accumulator_fails_the_class(op: str) -> None:
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((4, 1024)) + 1).astype(BF16)
    args = _args(op, x, [1])
    problems = _problems(op, args, _gpu_style(op, args, BF16))
    assert problems and problems[0].kind == "value"


def test_squares_overflowing_the_float32_accumulator_are_uncompared_and_counted() -> None:
    # row 0 near 1.8e19 and beyond: its squares pass float32's maximum (rocm's float32 sum gives inf);
    # the reference's float64 sum stays finite. Row 1 is ordinary.
    x = np.array([[3e19, -3e19, 2e19, -2e19], [1.0, 2.0, 3.0, 5.0]]).astype(BF16)
    for op in ("Std", "StdMeanCorrection"):
        args = _args(op, x, [1])
        actual = _gpu_style(op, args, np.float32)
        out = "out" if op == "Std" else "stdOut"
        assert not np.isfinite(actual[out][0].astype(np.float64))
        assert _problems(op, args, actual) == []
        actual[out][1] = actual[out][1] * BF16(2)  # the ordinary row wrong: a failure, with the other counted
        problems = _problems(op, args, actual)
        assert len(problems) == 1 and problems[0].detail["mismatched"] == 1
        assert problems[0].detail["overflowing"] == 1


def test_overflow_rule_leaves_non_finite_inputs_compared() -> None:
    x = np.array([[np.nan, 1.0, 2.0], [np.inf, 1.0, 2.0]], np.float32)
    args = _args("Std", x, [1])
    expected = eager.run("Std", "reference", **args)
    assert np.isnan(expected["out"]).all()
    wrong = {"out": np.array([1.0, 1.0], np.float32)}  # NaN dropped: still a failure
    assert _problems("Std", args, wrong)
    assert from_numpy(expected["out"].dtype) == D.ACL_FLOAT

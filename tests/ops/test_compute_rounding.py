"""The reference rounds to the computation dtype before widening to a wider output, as CANN's kernels do."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tests.ops.torch_ref import ref

BF16 = ml_dtypes.bfloat16


def _pair(rng: np.random.Generator, dtype: type, shape: tuple[int, ...] = (64, 33)) -> tuple[np.ndarray, np.ndarray]:
    a = rng.uniform(-3, 3, size=shape).astype(dtype)
    b = rng.uniform(0.5, 3, size=shape).astype(dtype)
    return a, b


@pytest.mark.parametrize(
    ("op", "fn"),
    [
        ("Add", np.add),
        ("Sub", np.subtract),
        ("Mul", np.multiply),
        ("Div", np.divide),
    ],
)
def test_float32_op_into_float64_out_is_the_float32_result_widened(
    op: str, fn: np.ufunc, rng: np.random.Generator
) -> None:
    a, b = _pair(rng, np.float32)
    extra = {"alpha": 1} if op in ("Add", "Sub") else {}
    got = ref(op, self=a, other=b, out=np.zeros(a.shape, np.float64), **extra)["out"]
    want = fn(a, b).astype(np.float64)  # NumPy's float32 arithmetic is IEEE's: one float32 rounding
    assert got.dtype == np.float64
    assert np.array_equal(got.view(np.int64), want.view(np.int64))
    assert not np.array_equal(got, fn(a.astype(np.float64), b.astype(np.float64)))  # the float64 result differs


def test_float32_overflow_stays_infinite_in_a_float64_out() -> None:
    big = np.full((4,), 3e38, np.float32)
    got = ref("Add", self=big, other=big, alpha=1, out=np.zeros(4, np.float64))["out"]
    assert np.isposinf(got).all()


def test_scalar_ops_and_unary_ops_round_to_float32() -> None:
    x = np.linspace(-2, 2, 97, dtype=np.float32)
    adds = ref("Muls", self=x, other=2.5, out=np.zeros(x.shape, np.float64))["out"]
    assert np.array_equal(adds, (x * np.float32(2.5)).astype(np.float64))
    exp = ref("Exp", self=x, out=np.zeros(x.shape, np.float64))["out"]
    assert np.array_equal(exp, np.exp(x.astype(np.float64)).astype(np.float32).astype(np.float64))


def test_16_bit_computation_into_float32_out_carries_the_16_bit_rounding(rng: np.random.Generator) -> None:
    a, b = _pair(rng, BF16)
    got = ref("Mul", self=a, other=b, out=np.zeros(a.shape, np.float32))["out"]
    want = (a.astype(np.float64) * b.astype(np.float64)).astype(BF16).astype(np.float32)
    assert np.array_equal(got, want)


def test_integer_computation_wraps_before_widening() -> None:
    a = np.array([127, -128, 100], np.int8)
    got = ref("Add", self=a, other=a, alpha=1, out=np.zeros(3, np.int32))["out"]
    assert got.tolist() == [-2, 0, -56]


def test_integer_division_gives_the_float32_quotient_in_a_float64_out() -> None:
    a, b = np.array([1, 2, 10], np.int32), np.array([3, 3, 7], np.int32)
    got = ref("Div", self=a, other=b, out=np.zeros(3, np.float64))["out"]
    assert np.array_equal(got, (a.astype(np.float32) / b.astype(np.float32)).astype(np.float64))


def test_cat_of_int32_and_float16_rounds_through_float16() -> None:
    got = ref(
        "Cat", tensors=[np.array([2049], np.int32), np.array([1.0], np.float16)], dim=0, out=np.zeros(2, np.float32)
    )["out"]
    assert got.tolist() == [2048.0, 1.0]  # 2049 is not a float16: CANN casts to the promoted float16 first

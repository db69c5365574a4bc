"""The reference's bitwise, shift, clamp-variant and Addcmul / Addcdiv ops (acl_core.spec.ops.bitwise and
acl_core.spec.ops.pointwise_ternary) against torch (CPU), and the rules where CANN departs from torch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from acl_core.spec.ops import bitwise, get_spec, pointwise_ternary
from tests.ops.torch_ref import check_samples_and_errors, ref

TORCH_BINARY: dict[str, Callable[..., torch.Tensor]] = {
    "and": torch.bitwise_and,
    "or": torch.bitwise_or,
    "xor": torch.bitwise_xor,
    "lshift": torch.bitwise_left_shift,
    "rshift": torch.bitwise_right_shift,
}
INTS = (np.int8, np.uint8, np.int16, np.int32, np.int64)


def _full(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


@pytest.mark.parametrize("row", [r for r in bitwise.ROWS if r.operator in ("and", "or", "xor")], ids=lambda r: r.name)
@pytest.mark.parametrize("dtype", [np.bool_, *INTS])
def test_logic_matches_torch(row: bitwise.Binary, dtype: Any) -> None:
    rng = np.random.default_rng(3)
    a = _full(rng, (3, 5), dtype)
    b: Any = (True if dtype == np.bool_ else 5) if row.scalar else _full(rng, (5,), dtype)
    got = ref(row.name, **{row.a: a, row.b: b})["out"]
    want = TORCH_BINARY[row.operator](torch.from_numpy(a), b if row.scalar else torch.from_numpy(b)).numpy()
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_mixed_dtypes_promote_as_torch() -> None:
    a, b = np.int8([-1, 5, -128]), np.uint8([255, 3, 128])
    got = ref("BitwiseXorTensor", self=a, other=b)["out"]
    want = torch.bitwise_xor(torch.from_numpy(a), torch.from_numpy(b)).numpy()
    assert got.dtype == want.dtype == np.int16
    np.testing.assert_array_equal(got, want)
    got = ref("BitwiseAndScalar", self=np.array([True, False]), other=3)["out"]
    np.testing.assert_array_equal(got, (torch.tensor([True, False]) & 3).numpy())


@pytest.mark.parametrize("dtype", [np.bool_, *INTS])
def test_not_matches_torch(dtype: Any) -> None:
    x = _full(np.random.default_rng(4), (4, 6), dtype)
    np.testing.assert_array_equal(ref("BitwiseNot", self=x)["out"], torch.bitwise_not(torch.from_numpy(x)).numpy())


@pytest.mark.parametrize("dtype", INTS)
def test_shifts_match_torch_for_counts_inside_the_width(dtype: Any) -> None:
    rng = np.random.default_rng(5)
    width = np.iinfo(dtype).bits
    x = _full(rng, (4, 8), dtype)
    s = rng.integers(0, width, size=(8,)).astype(dtype)
    for op, fn, a in (
        ("LeftShift", torch.bitwise_left_shift, "self"),
        ("RightShift", torch.bitwise_right_shift, "input"),
    ):
        got = ref(op, **{a: x, "shiftBits": s})["out"]
        np.testing.assert_array_equal(got, fn(torch.from_numpy(x), torch.from_numpy(s)).numpy(), err_msg=op)
    got = ref("LeftShifts", self=x, shiftBits=3)["out"]
    np.testing.assert_array_equal(got, torch.bitwise_left_shift(torch.from_numpy(x), 3).numpy())


def test_left_shift_past_the_width_is_zero_as_torch() -> None:
    x, s = np.int32([1, -1, 7, 3]), np.int32([32, 40, -1, -33])
    want = torch.bitwise_left_shift(torch.from_numpy(x), torch.from_numpy(s)).numpy()
    np.testing.assert_array_equal(ref("LeftShift", self=x, shiftBits=s)["out"], want)
    assert not want.any()


def test_right_shift_clamps_the_count_as_cann() -> None:
    """CANN: a negative count acts as 0 (torch: sign fill); a count past the width as width - 1 (torch: 0 unsigned)."""
    got = ref("RightShift", input=np.int16([-8, -8, 8, 200]), shiftBits=np.int16([-1, 99, 99, 7]))["out"]
    assert got.tolist() == [-8, -1, 0, 1]
    assert ref("RightShift", input=np.uint8([200]), shiftBits=np.uint8([8]))["out"].tolist() == [1]


def _clamp_torch(x: torch.Tensor, lo: Any, hi: Any) -> torch.Tensor:
    return torch.clamp(x, lo, hi)


@pytest.mark.parametrize("row", pointwise_ternary.CLAMPS, ids=lambda r: r.name)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int8])
def test_clamps_match_torch(row: pointwise_ternary.Clamp, dtype: Any) -> None:
    rng = np.random.default_rng(6)
    x = rng.uniform(-5, 5, (4, 5)).astype(dtype)
    if dtype in (np.float32, np.float64):
        x[0, :3] = [np.nan, np.inf, -np.inf]
    lo_t, hi_t = rng.uniform(-3, 0, (5,)).astype(dtype), rng.uniform(-1, 3, (5,)).astype(dtype)  # some lo > hi
    lo: Any = lo_t if row.tensors else -2
    hi: Any = hi_t if row.tensors else 1
    args: dict[str, Any] = {"self": x}
    if row.lower:
        args[row.lower] = lo
    if row.upper:
        args[row.upper] = hi
    got = ref(row.name, **args)["out"]
    tl = (torch.from_numpy(lo) if row.tensors else lo) if row.lower else None
    th = (torch.from_numpy(hi) if row.tensors else hi) if row.upper else None
    want = _clamp_torch(torch.from_numpy(x), tl, th).numpy()
    np.testing.assert_array_equal(got, want)


def test_clamp_nan_bound_propagates_as_torch() -> None:
    x = np.float32([1.0, -2.0, np.nan])
    b = np.float32([np.nan, 0.0, 1.0])
    want = torch.clamp_min(torch.from_numpy(x), torch.from_numpy(b)).numpy()
    np.testing.assert_array_equal(ref("ClampMinTensor", self=x, clipValueMin=b)["out"], want)


@pytest.mark.parametrize("op", ["Addcmul", "Addcdiv"])
@pytest.mark.parametrize("value", [0.5, -3])
def test_addc_matches_torch_in_float64(op: str, value: float) -> None:
    rng = np.random.default_rng(8)
    a, b = rng.uniform(-4, 4, (3, 4)), rng.uniform(-4, 4, (4,))
    c = rng.uniform(0.5, 4, (3, 1))
    got = ref(op, self=a, tensor1=b, tensor2=c, value=value)["out"]
    fn = torch.addcmul if op == "Addcmul" else torch.addcdiv
    want = fn(torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(c), value=value).numpy()
    scale = np.abs(a) + abs(value) * (np.abs(b * c) if op == "Addcmul" else np.abs(b / c))
    assert np.all(np.abs(got - want) <= 4 * np.finfo(np.float64).eps * scale)


@pytest.mark.parametrize(
    ("op", "value", "c"),
    [("Addcdiv", 0.25, 0.5), ("Addcmul", 4.0, 0.1), ("Addcmul", 0.5, np.inf)],
    ids=["quotient-overflows", "product-overflows", "product-underflows"],
)
def test_float32_intermediates_overflow_and_underflow_as_torch(op: str, value: float, c: float) -> None:
    """The intermediate is out of float32's range, the float64 result would be back inside it (or not NaN)."""
    big, tiny = np.finfo(np.float32).max, np.finfo(np.float32).smallest_subnormal
    a = np.float32([0, 1])
    b = np.float32([big, tiny]) if c != np.inf else np.float32([tiny, tiny])
    t2 = np.float32([c, c])
    got = ref(op, self=a, tensor1=b, tensor2=t2, value=value)["out"]
    if op == "Addcdiv":  # torch's CUDA kernel's order, value·(t1/t2) (its CPU kernel forms (value·t1)/t2)
        np.testing.assert_array_equal(got, np.float32([np.inf, 1]))
        return
    want = torch.addcmul(torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(t2), value=value).numpy()
    assert not np.isfinite(want[0])
    np.testing.assert_array_equal(got, want)


def test_integer_addcmul_wraps_as_torch() -> None:
    a, b, c = np.int8([100, -3]), np.int8([100, 7]), np.int8([3, -9])
    got = ref("Addcmul", self=a, tensor1=b, tensor2=c, value=2)["out"]
    want = torch.addcmul(torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(c), value=2).numpy()
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", sorted(s.name for s in (*bitwise.SPECS, *pointwise_ternary.SPECS)))
def test_samples_run_and_errors_refuse(op: str) -> None:
    spec = get_spec(op)
    if spec.base is None:
        check_samples_and_errors(spec)
        return
    samples = list(spec.samples(np.random.default_rng(7))) if spec.samples else []
    assert samples, f"{op}: the in-place twin keeps none of its base's samples"
    for sample in samples:
        assert ref(op, **sample.args), f"{op} {sample.note}: no outputs"

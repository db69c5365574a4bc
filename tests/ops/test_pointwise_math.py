"""The reference's pointwise math ops (acl_core.spec.ops.pointwise_math) against torch (CPU) and NumPy oracles."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ml_dtypes
import mpmath
import numpy as np
import pytest
import torch

from acl_core.spec.ops import get_spec
from acl_core.spec.ops.pointwise_math import MISC, TRANSCENDENTAL, TWINS
from tests.ops.torch_ref import ref, to_torch

BF16 = ml_dtypes.bfloat16
Fn = Callable[[torch.Tensor], torch.Tensor]

TORCH_UNARY: dict[str, Fn] = {
    "Tan": torch.tan,
    "Asin": torch.asin,
    "Acos": torch.acos,
    "Atan": torch.atan,
    "Sinh": torch.sinh,
    "Cosh": torch.cosh,
    "Asinh": torch.asinh,
    "Acosh": torch.acosh,
    "Atanh": torch.atanh,
    "Erfc": torch.special.erfc,
    "Erfinv": torch.special.erfinv,
    "Exp2": torch.exp2,
    "Expm1": torch.expm1,
    "Log10": torch.log10,
    "Log1p": torch.log1p,
    "Log2": torch.log2,
    "Sinc": torch.sinc,
}
"""Group 1 op → the torch function it matches."""
ROWS = {r.name: r for r in TRANSCENDENTAL}


def _ulps(got: np.ndarray, want: np.ndarray, dtype: Any) -> np.ndarray:
    """|got - want| in ulps of ``want`` rounded to ``dtype`` (NaN where both are NaN or equal infinities)."""
    w = want.astype(dtype).astype(np.float64)
    g = got.astype(np.float64)
    with np.errstate(invalid="ignore"):
        spacing = np.spacing(np.abs(w).astype(dtype)).astype(np.float64)
        same = (g == w) | (np.isnan(g) & np.isnan(w))
        return np.where(same, 0.0, np.abs(g - w) / spacing)


def _oracle(op: str, x: np.ndarray) -> np.ndarray:
    """The float64 truth of ``op`` at ``x``: torch's, but mpmath's for Sinc (torch rounds πx before sin(),
    thousands of ulps off near whole numbers)."""
    x64 = x.astype(np.float64)
    want = TORCH_UNARY[op](torch.from_numpy(x64)).numpy()
    if op == "Sinc":
        with mpmath.workdps(40):
            exact = [float(mpmath.sincpi(mpmath.mpf(float(v)))) if np.isfinite(v) else np.nan for v in x64.ravel()]
        want = np.where(np.isfinite(x64), np.reshape(exact, x.shape), want)
    return want


def _inputs(name: str, dtype: Any, n: int = 513, seed: int = 0) -> np.ndarray:
    row = ROWS[name]
    x = np.random.default_rng(seed).uniform(row.low, row.high, n)
    return x.astype(dtype)


def test_every_row_has_a_torch_oracle() -> None:
    assert set(TORCH_UNARY) == set(ROWS)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["fp32", "fp64"])
@pytest.mark.parametrize("op", sorted(TORCH_UNARY))
def test_unary_within_its_ulp_class_of_torch(op: str, dtype: Any) -> None:
    x = _inputs(op, dtype)
    p = ROWS[op]
    got = ref(op, **{p.x: x})[p.y]
    assert got.dtype == x.dtype
    want = _oracle(op, x)
    acc = get_spec(op).accuracy
    assert acc is not None
    bound = acc.float32_ulps if dtype is np.float32 else acc.float64_ulps
    # torch's float64 result is itself a libm evaluation: one more ulp in float64
    err = _ulps(got, want, dtype)
    assert err.max() <= bound + (1 if dtype is np.float64 else 0), f"{op}: {err.max()} ulps at {x[err.argmax()]!r}"


@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("op", sorted(TORCH_UNARY))
def test_unary_half_precision_rounds_the_float32_result(op: str, dtype: Any) -> None:
    x = _inputs(op, dtype)
    p = ROWS[op]
    got = ref(op, **{p.x: x})[p.y]
    assert got.dtype == x.dtype
    want = _oracle(op, x)
    assert _ulps(got, want, dtype).max() <= 1


@pytest.mark.parametrize("op", sorted(TORCH_UNARY))
def test_unary_special_values_match_torch(op: str) -> None:
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 1e-30, -1e-30], np.float32)
    p = ROWS[op]
    got = ref(op, **{p.x: x})[p.y]
    want = _oracle(op, x).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[~np.isnan(want)], want[~np.isnan(want)])
    zero = want == 0
    np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(want[zero]))


@pytest.mark.parametrize("op", sorted(TORCH_UNARY))
def test_integer_inputs_compute_in_float32(op: str) -> None:
    x = np.array([0, 1, -1, 2, 3, 2**31 - 1, -(2**31)], np.int32)
    p = ROWS[op]
    got = ref(op, **{p.x: x})[p.y]
    assert got.dtype == np.float32
    want = _oracle(op, x.astype(np.float32))
    acc = get_spec(op).accuracy
    assert acc is not None
    assert _ulps(got, want, np.float32).max() <= acc.float32_ulps


def test_sinc_is_exactly_zero_at_whole_numbers_and_keeps_the_period() -> None:
    x = np.array([1.0, -2.0, 3.0, 1e6, 2.0**52, 1e300, 0.5, -1.5], np.float64)
    got = ref("Sinc", self=x)["out"]
    assert (got[:6] == 0.0).all()
    np.testing.assert_allclose(got[6:], [2 / np.pi, -2 / (3 * np.pi)], rtol=1e-15)


def test_erfinv_inverts_erf_near_one_and_at_the_edges() -> None:
    y = np.array([0.1, 1.0, 2.5, 4.0, 5.5], np.float64)
    x = torch.erf(torch.from_numpy(y)).numpy()
    got = ref("Erfinv", self=x)["out"]
    want = torch.special.erfinv(torch.from_numpy(x)).numpy()
    assert _ulps(got, want, np.float64).max() <= 8
    edges = ref("Erfinv", self=np.array([1.0, -1.0, 1.5, -0.0], np.float32))["out"]
    assert edges[0] == np.inf and edges[1] == -np.inf and np.isnan(edges[2])
    assert edges[3] == 0 and np.signbit(edges[3])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32], ids=["fp32", "fp64", "int32"])
def test_atan2_matches_torch_with_broadcasting_and_signed_zeros(dtype: Any) -> None:
    rng = np.random.default_rng(3)
    a = (rng.uniform(-4, 4, (3, 1, 5)) * (1 if dtype != np.int32 else 2)).astype(dtype)
    b = (rng.uniform(-4, 4, (4, 1)) * (1 if dtype != np.int32 else 2)).astype(dtype)
    got = ref("Atan2", self=a, other=b)["out"]
    out_dtype = np.float64 if dtype is np.float64 else np.float32
    assert got.dtype == out_dtype and got.shape == (3, 4, 5)
    want = torch.atan2(torch.from_numpy(a.astype(np.float64)), torch.from_numpy(b.astype(np.float64))).numpy()
    assert _ulps(got, want, out_dtype).max() <= 3
    zeros = np.array([0.0, -0.0, 0.0, -0.0], np.float32)
    others = np.array([0.0, 0.0, -0.0, -0.0], np.float32)
    got = ref("Atan2", self=zeros, other=others)["out"]
    np.testing.assert_array_equal(got, np.arctan2(zeros, others))
    np.testing.assert_array_equal(np.signbit(got), np.signbit(np.arctan2(zeros, others)))


@pytest.mark.parametrize("op", sorted(TWINS))
def test_inplace_twin_writes_its_input(op: str) -> None:
    spec = get_spec(f"Inplace{op}")
    name = TWINS[op]
    x = _inputs(op, np.float32) if op in ROWS else np.linspace(-3, 3, 513, dtype=np.float32)
    settings = {r.name: dict(r.settings[-1]) for r in MISC}.get(op, {})
    args: dict[str, Any] = {name: x.copy(), **settings}
    base = get_spec(op)
    base_args: dict[str, Any] = {base.params[0].name: x, **settings}
    if op == "Atan2":
        other = np.linspace(2, -1, 513, dtype=np.float32)
        args["other"] = base_args["other"] = other
    got = ref(spec.name, **args)[name]
    np.testing.assert_array_equal(got, ref(op, **base_args)[base.outputs[0].name])


# ----------------------------------------------------------------------------- group 2
FLOAT_SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 2.5, -2.5, 3.5, -0.5, 1e30, -7.25], np.float32)


def _int_extremes(dtype: Any) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.array([info.min, info.max, info.min + 1, info.max - 1, 0, -1, 1, 7], dtype)


TORCH_MISC: dict[str, Fn] = {
    "Frac": torch.frac,
    "Trunc": torch.trunc,
    "Signbit": torch.signbit,
    "Square": torch.square,
    "IsFinite": torch.isfinite,
    "IsPosInf": torch.isposinf,
    "IsNegInf": torch.isneginf,
}
"""Group 2's one-input ops without attributes → the torch function."""


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, BF16], ids=["fp32", "fp64", "fp16", "bf16"])
@pytest.mark.parametrize("op", sorted(TORCH_MISC))
def test_misc_unary_matches_torch_bit_for_bit(op: str, dtype: Any) -> None:
    with np.errstate(over="ignore"):
        x = np.concatenate([FLOAT_SPECIALS, np.random.default_rng(1).uniform(-50, 50, 200)]).astype(dtype)
    if op == "Signbit":
        x = x[~np.isnan(x.astype(np.float32))]  # a NaN's sign bit is not a value the conversions keep
    got = ref(op, self=x) if op != "Frac" else ref(op, input=x)
    (value,) = got.values()
    result = TORCH_MISC[op](to_torch(x))
    want = (result.float() if result.dtype == torch.bfloat16 else result).numpy()
    if want.dtype != np.bool_:
        want = want.astype(np.float64)
    np.testing.assert_array_equal(value.astype(want.dtype), want)
    if want.dtype != np.bool_:
        zero = want == 0
        np.testing.assert_array_equal(np.signbit(value.astype(np.float64)[zero]), np.signbit(want[zero]))


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64], ids=["int8", "int32", "int64"])
@pytest.mark.parametrize("op", ["Trunc", "Signbit", "Square", "IsFinite", "IsPosInf", "IsNegInf"])
def test_misc_unary_on_integer_extremes_matches_torch(op: str, dtype: Any) -> None:
    x = _int_extremes(dtype)
    (value,) = ref(op, self=x).values()
    want = TORCH_MISC[op](torch.from_numpy(x)).numpy()  # Square wraps around, as torch's does
    assert value.dtype == want.dtype
    np.testing.assert_array_equal(value, want)


@pytest.mark.parametrize("setting", [(1e-5, 1e-8, False), (1e-2, 1e-1, True), (0.0, 0.0, True)])
def test_isclose_matches_torch(setting: tuple[float, float, bool]) -> None:
    rtol, atol, equal_nan = setting
    rng = np.random.default_rng(4)
    a = rng.uniform(-4, 4, 300)
    b = np.where(rng.random(300) < 0.5, a * (1 + rng.uniform(-1e-2, 1e-2, 300)), rng.uniform(-4, 4, 300))
    a[:6], b[:6] = [np.nan, np.nan, np.inf, np.inf, -np.inf, 1.0], [np.nan, 1.0, np.inf, -np.inf, -np.inf, np.inf]
    got = ref("IsClose", self=a, other=b, rtol=rtol, atol=atol, equalNan=equal_nan)["out"]
    want = torch.isclose(torch.from_numpy(a), torch.from_numpy(b), rtol, atol, equal_nan).numpy()
    np.testing.assert_array_equal(got, want)
    ints = ref("IsClose", self=np.array([1, 5, -3], np.int32), other=np.array([1, 6, -3], np.int64), rtol=0.1,
               atol=0.0, equalNan=False)["out"]  # fmt: skip
    np.testing.assert_array_equal(ints, [True, False, True])


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["fp32", "fp16"])
def test_nan_to_num_matches_torch(dtype: Any) -> None:
    with np.errstate(over="ignore"):
        x = FLOAT_SPECIALS.astype(dtype)
    for nan, pos, neg in ((0.0, 100.0, -7.5), (-1.5, 3e38, -3e38)):
        got = ref("NanToNum", self=x, nan=nan, posinf=pos, neginf=neg)["out"]
        want = torch.nan_to_num(to_torch(x), nan, pos, neg).numpy()
        np.testing.assert_array_equal(got, want)
    inplace = ref("InplaceNanToNum", selfRef=x.copy(), nan=1.0, posinf=2.0, neginf=3.0)["selfRef"]
    np.testing.assert_array_equal(inplace, torch.nan_to_num(to_torch(x), 1.0, 2.0, 3.0).numpy())


@pytest.mark.parametrize("eps", [-1.0, 1e-3, 0.25])
def test_logit_matches_torch(eps: float) -> None:
    x = np.concatenate([[0.0, 1.0, np.nan, 0.5, 1e-6, 1 - 1e-6], np.random.default_rng(5).uniform(0, 1, 200)])
    x = x.astype(np.float32)
    got = ref("Logit", input=x, eps=eps)["out"]
    want = torch.logit(torch.from_numpy(x.astype(np.float64)), None if eps < 0 else float(np.float32(eps))).numpy()
    assert _ulps(got, want, np.float32).max() <= 2
    assert ref("Logit", input=np.array([1, 0], np.int32), eps=-1.0)["out"].tolist() == [np.inf, -np.inf]


@pytest.mark.parametrize("op", ["LogAddExp", "LogAddExp2"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["fp32", "fp64"])
def test_logaddexp_matches_torch(op: str, dtype: Any) -> None:
    rng = np.random.default_rng(6)
    a = rng.uniform(-30, 30, (40, 1)).astype(dtype)
    b = rng.uniform(-30, 30, (1, 30)).astype(dtype)
    a[:4, 0] = [np.inf, -np.inf, np.nan, 1000.0]
    b[0, :4] = [np.inf, -np.inf, 2.0, -1000.0]
    got = ref(op, self=a, other=b)["out"]
    fn = torch.logaddexp if op == "LogAddExp" else torch.logaddexp2
    want = fn(torch.from_numpy(a.astype(np.float64)), torch.from_numpy(b.astype(np.float64))).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert _ulps(got, want, dtype).max() <= (2 if dtype is np.float32 else 5)


@pytest.mark.parametrize("decimals", [0, 1, 2, -1, -2])
def test_round_decimals_matches_torch(decimals: int) -> None:
    x = np.concatenate(
        [FLOAT_SPECIALS, [0.125, 2.675, -0.05, 150.0, 250.0], np.random.default_rng(7).uniform(-500, 500, 300)]
    )
    got = ref("RoundDecimals", self=x.astype(np.float64), decimals=decimals)["out"]
    want = torch.round(torch.from_numpy(x.astype(np.float64)), decimals=decimals).numpy()
    np.testing.assert_array_equal(got, want)
    x32 = x.astype(np.float32)  # float32 scales in double (the module docstring's choice), rounded once
    single = ref("RoundDecimals", self=x32, decimals=decimals)["out"]
    want32 = torch.round(torch.from_numpy(x32.astype(np.float64)), decimals=decimals).numpy().astype(np.float32)
    np.testing.assert_array_equal(single, want32)

"""The reference's Foreach* operators against torch's ``_foreach_*`` (CPU), one table row per formula."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import torch

from acl_core.errors import AclnnError
from acl_core.spec.ops.foreach import ROWS, Carrier, Row
from tests.ops.torch_ref import ref, to_numpy, to_torch

BF16 = ml_dtypes.bfloat16
SHAPES = [(7,), (2, 3, 4), (), (0,), (5, 9)]
T = list[torch.Tensor]

# formula -> torch over float64 lists a, b, c and the per-entry scalars s (a list of floats)
TORCH: dict[str, Callable[[T, T, T, list[float]], T]] = {
    "abs": lambda a, b, c, s: torch._foreach_abs(a),
    "neg": lambda a, b, c, s: torch._foreach_neg(a),
    "exp": lambda a, b, c, s: torch._foreach_exp(a),
    "log": lambda a, b, c, s: torch._foreach_log(a),
    "sqrt": lambda a, b, c, s: torch._foreach_sqrt(a),
    "reciprocal": lambda a, b, c, s: torch._foreach_reciprocal(a),
    "sin": lambda a, b, c, s: torch._foreach_sin(a),
    "cos": lambda a, b, c, s: torch._foreach_cos(a),
    "tanh": lambda a, b, c, s: torch._foreach_tanh(a),
    "sigmoid": lambda a, b, c, s: torch._foreach_sigmoid(a),
    "erf": lambda a, b, c, s: torch._foreach_erf(a),
    "sign": lambda a, b, c, s: torch._foreach_sign(a),
    "acos": lambda a, b, c, s: torch._foreach_acos(a),
    "asin": lambda a, b, c, s: torch._foreach_asin(a),
    "atan": lambda a, b, c, s: torch._foreach_atan(a),
    "cosh": lambda a, b, c, s: torch._foreach_cosh(a),
    "sinh": lambda a, b, c, s: torch._foreach_sinh(a),
    "tan": lambda a, b, c, s: torch._foreach_tan(a),
    "erfc": lambda a, b, c, s: torch._foreach_erfc(a),
    "expm1": lambda a, b, c, s: torch._foreach_expm1(a),
    "log10": lambda a, b, c, s: torch._foreach_log10(a),
    "log1p": lambda a, b, c, s: torch._foreach_log1p(a),
    "log2": lambda a, b, c, s: torch._foreach_log2(a),
    "copy": lambda a, b, c, s: [t.clone() for t in a],
    "zero": lambda a, b, c, s: torch._foreach_zero_([t.clone() for t in a]) or [torch.zeros_like(t) for t in a],
    "add_list": lambda a, b, c, s: torch._foreach_add(a, b, alpha=s[0]),
    "sub_list": lambda a, b, c, s: torch._foreach_sub(a, b, alpha=s[0]),
    "mul_list": lambda a, b, c, s: torch._foreach_mul(a, b),
    "div_list": lambda a, b, c, s: torch._foreach_div(a, b),
    "max_list": lambda a, b, c, s: torch._foreach_maximum(a, b),
    "min_list": lambda a, b, c, s: torch._foreach_minimum(a, b),
    "pow_list": lambda a, b, c, s: torch._foreach_pow(a, b),
    "add_s": lambda a, b, c, s: torch._foreach_add(a, s),
    "sub_s": lambda a, b, c, s: torch._foreach_sub(a, s),
    "mul_s": lambda a, b, c, s: torch._foreach_mul(a, s),
    "div_s": lambda a, b, c, s: torch._foreach_div(a, s),
    "max_s": lambda a, b, c, s: torch._foreach_maximum(a, s),
    "min_s": lambda a, b, c, s: torch._foreach_minimum(a, s),
    "pow_s": lambda a, b, c, s: torch._foreach_pow(a, s),
    "pow_s_a": lambda a, b, c, s: torch._foreach_pow(s[0], a),
    "addcdiv": lambda a, b, c, s: torch._foreach_addcdiv(a, b, c, s),
    "addcmul": lambda a, b, c, s: torch._foreach_addcmul(a, b, c, s),
    "lerp_list": lambda a, b, c, s: torch._foreach_lerp(a, b, c),
    "lerp_s": lambda a, b, c, s: torch._foreach_lerp(a, b, s[0]),
    "norm": lambda a, b, c, s: torch._foreach_norm(a, s[0]),
}
"""Each formula through torch's own foreach op, computed in float64."""

ROUND: dict[int, Callable[[torch.Tensor], torch.Tensor]] = {
    1: torch.round,  # half to even
    2: torch.floor,
    3: torch.ceil,
    4: lambda t: torch.sign(t) * torch.floor(t.abs() + 0.5),
    5: torch.trunc,
    6: torch.frac,
}


def _dtypes(row: Row) -> list[Any]:
    return [dt.numpy for dt in sorted(row.dtypes, key=lambda d: d.value)]


def _inputs(rng: np.random.Generator, row: Row, dtype: Any, n: int) -> dict[str, list[np.ndarray]]:
    lo, hi = (0.2, 3.0) if row.positive else ((-0.9, 0.9) if row.unit else (-3.0, 3.0))
    found = {}
    for name in row.lists:
        if np.dtype(dtype).kind in "iub":
            found[name] = [rng.integers(-100, 100, size=SHAPES[i % len(SHAPES)]).astype(dtype) for i in range(n)]
        else:
            found[name] = [rng.uniform(lo, hi, size=SHAPES[i % len(SHAPES)]).astype(dtype) for i in range(n)]
    return found


def _scalar_args(row: Row, n: int, value: float, integer: bool) -> tuple[dict[str, Any], list[float]]:
    name = row.scalar_param
    if name is None or row.carrier is Carrier.NONE:
        return {}, [1.0] * n
    per = [value + 0.5 * (i % 3) if not integer else float(int(value) + i % 3) for i in range(n)]
    per = [float(np.float32(v)) for v in per]
    if row.carrier is Carrier.SCALAR:
        return {name: value}, [float(np.float32(value))] * n
    if row.carrier is Carrier.SCALAR_LIST:
        return {name: per}, per
    np_dt = np.int32 if integer else np.float32
    if row.carrier is Carrier.PER_ENTRY:
        return {name: np.array(per, np_dt)}, per
    return {name: np.array([value], np_dt)}, [float(np.float32(value))] * n


def _wide(arrays: list[np.ndarray]) -> T:
    return [torch.from_numpy(np.asarray(a, dtype=np.float64)) for a in arrays]


def _expected(row: Row, args: dict[str, Any], s: list[float], integer: bool) -> list[np.ndarray]:
    lists = [_wide(args[name]) for name in row.lists] + [[]] * (3 - len(row.lists))
    if integer:
        lists = [[t.to(torch.int64) for t in ts] for ts in lists]
        s = [int(v) for v in s]  # type: ignore[misc]
    if row.formula == "round":
        mode = int(args["roundMode"][0]) if isinstance(args["roundMode"], np.ndarray) else int(args["roundMode"])
        return [ROUND[mode](t).numpy() for t in lists[0]]
    return [t.numpy() for t in TORCH[row.formula](lists[0], lists[1], lists[2], s)]


def _check(got: list[np.ndarray], want: list[np.ndarray], dtype: Any, formula: str) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == np.dtype(dtype)
        assert g.shape == w.shape or (formula == "norm" and g.size == 1)
        rounded = np.asarray(w).astype(dtype).reshape(g.shape)
        if np.dtype(dtype).kind in "iub":
            np.testing.assert_array_equal(g, rounded)
            continue
        gw, rw = g.astype(np.float64), rounded.astype(np.float64)
        eps = float(np.finfo(dtype).eps)
        # the reference rounds once from float64: within one ulp of torch's float64 result rounded
        np.testing.assert_allclose(gw, rw, rtol=2 * eps, atol=0, equal_nan=True)


CASES = [(row, dt) for row in ROWS if row.formula != "unscale" for dt in _dtypes(row)]


@pytest.mark.parametrize(("row", "dtype"), CASES, ids=[f"{r.name}-{np.dtype(d).name}" for r, d in CASES])
@pytest.mark.parametrize("n", [1, 4])
def test_against_torch(row: Row, dtype: Any, n: int) -> None:
    rng = np.random.default_rng(len(row.name) * 31 + n)
    integer = np.dtype(dtype).kind in "iu"
    args: dict[str, Any] = dict(_inputs(rng, row, dtype, n))
    if row.formula == "round":
        for mode in (1, 2, 3, 4, 5, 6):
            call = {**args, "roundMode": mode if row.carrier is Carrier.SCALAR else np.array([mode], np.int8)}
            halves = [np.asarray(np.round(a * 2) / 2, dtype) for a in args["x"]]  # ties exercise rint vs round
            call["x"] = halves
            got = ref(row.name, **call)["out"]
            _check(got, _expected(row, call, [], False), dtype, row.formula)
        return
    values = (2.0, 3.0, 1.0, math.inf, 0.0) if row.formula == "norm" else (1.5, -2.0)
    for value in values:
        if math.isinf(value):  # torch refuses the infinity norm of an empty tensor, and so does the spec
            args = {"x": [a for a in args["x"] if a.size]} if any(a.size for a in args["x"]) else args
            if not all(a.size for a in args["x"]):
                continue
        extra, s = _scalar_args(row, n, value, integer)
        call = {**args, **extra}
        target = row.out or row.lists[0]
        got = ref(row.name, **call)[target]
        _check(got, _expected(row, call, s, integer), dtype, row.formula)


def test_unscale_sets_found_inf_and_scales() -> None:
    grads = [np.array([1.0, 2.0], np.float32), np.array([[np.inf, -3.0]], np.float32)]
    got = ref(
        "ForeachNonFiniteCheckAndUnscale",
        scaledGrads=grads,
        foundInf=np.zeros(1, np.float32),
        invScale=np.array([0.25], np.float32),
    )
    assert got["foundInf"].tolist() == [1.0]
    want = torch._amp_foreach_non_finite_check_and_unscale_  # torch's own, on copies
    tg = [to_torch(g.copy()) for g in grads]
    found = torch.zeros(1)
    want(tg, found, torch.tensor([0.25]))
    assert found.item() == 1.0
    for g, w in zip(got["scaledGrads"], tg):
        np.testing.assert_array_equal(g, to_numpy(w))
    finite = ref(
        "ForeachNonFiniteCheckAndUnscale",
        scaledGrads=[np.array([4.0], np.float32)],
        foundInf=np.zeros(1, np.float32),
        invScale=np.array([0.5], np.float32),
    )
    assert finite["foundInf"].tolist() == [0.0] and finite["scaledGrads"][0].tolist() == [2.0]


def test_in_place_through_out() -> None:
    """``out`` may be the very views of ``x1`` (torch's ``_foreach_add_``)."""
    from acl_core import eager

    x = [np.arange(5, dtype=np.float32), np.ones((2, 2), np.float32)]
    y = [np.full(5, 2, np.float32), np.full((2, 2), 3, np.float32)]
    got = eager.run("ForeachAddListV2", "reference", x1=x, x2=y, alpha=0.5, out=x)["out"]
    np.testing.assert_array_equal(got[0], np.arange(5, dtype=np.float32) + 1)
    np.testing.assert_array_equal(got[1], np.full((2, 2), 2.5, np.float32))


@pytest.mark.parametrize(
    ("op", "args", "what"),
    [
        ("ForeachMulList", {"x1": [np.ones(3, np.float32)] * 2, "x2": [np.ones(3, np.float32)]}, "holds 1 tensors"),
        ("ForeachMulList", {"x1": [np.ones(3, np.float32)], "x2": [np.ones(4, np.float32)]}, "shape"),
        ("ForeachExp", {"x": [np.ones(3, np.float32), np.ones(3, np.float16)]}, "dtype"),
        ("ForeachExp", {"x": [np.ones(3, np.int32)]}, "supported"),
        ("ForeachAbs", {"x": []}, "empty"),
        ("ForeachAddScalarList", {"x": [np.ones(3, np.float32)] * 2, "scalars": [1.0]}, "scalars"),
        ("ForeachAddScalar", {"x": [np.ones(3, np.float32)], "scalar": np.ones(2, np.float32)}, "elements"),
        ("ForeachRoundOffNumberV2", {"x": [np.ones(3, np.float32)], "roundMode": 0}, "roundMode"),
        ("ForeachAddScalar", {"x": [np.ones(3, np.int32)], "scalar": np.ones(1, np.float32)}, "INT32"),
    ],
)
def test_errors(op: str, args: dict[str, Any], what: str) -> None:
    with pytest.raises(AclnnError) as e:
        ref(op, **args)
    assert e.value.code == 161002 and what in str(e.value)


def test_inf_norm_of_empty_is_refused() -> None:
    with pytest.raises(AclnnError) as e:
        ref("ForeachNorm", x=[np.ones(3, np.float32), np.zeros(0, np.float32)], scalar=math.inf)
    assert e.value.code == 161002


def test_round_mode_tensor_out_of_range_is_a_kernel_error() -> None:
    with pytest.raises(AclnnError) as e:
        ref("ForeachRoundOffNumber", x=[np.ones(3, np.float32)], roundMode=np.array([9], np.int8))
    assert e.value.code == 161002


def test_round_half_away_keeps_the_sign_of_zero() -> None:
    x = np.array([-0.0, -0.3, 0.3, -2.5, 2.5, 0.0], np.float32)
    got = ref("ForeachRoundOffNumberV2", x=[x], roundMode=4)["out"][0]
    np.testing.assert_array_equal(got, [-0.0, -0.0, 0.0, -3.0, 3.0, 0.0])
    assert list(np.signbit(got)) == [True, True, False, True, False, False]


def test_bf16_rounds_once() -> None:
    """bf16 lists compute wide and round once: 1 + 2^-8 + 2^-16 rounds up to 1 + 2^-7 (half-ulp ties broken above)."""
    x = [np.array([1.0], BF16)]
    got = ref("ForeachAddScalarV2", x=x, scalar=2.0**-8 + 2.0**-16)["out"][0]
    assert float(got[0]) == 1.0 + 2.0**-7


def test_int32_lists_take_integer_scalars_wrapped_to_32_bits() -> None:
    # an int64 scalar past int32 (the fuzz test's INT64_MAX) wraps as the GPU kernel takes it
    from acl_core.spec.ops.foreach import int32_scalar

    assert [int32_scalar(v) for v in (2**63 - 1, 2**31, -(2**31) - 1, 3.9, -3.9, float("nan"))] == [
        -1,
        -(2**31),
        2**31 - 1,
        3,
        -3,
        0,
    ]
    x = np.arange(7, dtype=np.int32)
    out = ref("ForeachMulScalarV2", x=[x], scalar=np.int64(2**63 - 1))["out"]
    np.testing.assert_array_equal(out[0], -x)

"""The reference's elementwise ops against PyTorch's CPU results, hand-computed cases and invariants."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from acl_core.dtypes import DataType as D
from acl_core.errors import AclnnError
from tests.conftest import assert_close
from tests.ops.torch_ref import ref, to_numpy, to_torch

BF16 = ml_dtypes.bfloat16
FLOAT_DTYPES = [np.float32, np.float16, BF16, np.float64]

UNARY_TORCH = {
    "Abs": torch.abs,
    "Neg": torch.neg,
    "Exp": torch.exp,
    "Log": torch.log,
    "Sqrt": torch.sqrt,
    "Rsqrt": torch.rsqrt,
    "Reciprocal": torch.reciprocal,
    "Sin": torch.sin,
    "Cos": torch.cos,
    "Tanh": torch.tanh,
    "Sigmoid": torch.sigmoid,
    "Relu": torch.relu,
    "Gelu": F.gelu,
    "Silu": F.silu,
    "Erf": torch.erf,
    "Floor": torch.floor,
    "Ceil": torch.ceil,
    "Round": torch.round,
    "Sign": torch.sign,
}
POSITIVE = {"Log", "Sqrt", "Rsqrt", "Reciprocal"}


@pytest.mark.parametrize("op", sorted(UNARY_TORCH))
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: np.dtype(d).name)
def test_unary_matches_torch(op: str, dtype: type, rng: np.random.Generator) -> None:
    x = rng.uniform(0.1 if op in POSITIVE else -4, 4, size=(5, 7)).astype(dtype)
    x_name = "input" if op == "Cos" else "self"
    out_name = "result" if op == "Sign" else "out"
    got = ref(op, **{x_name: x})[out_name]
    want = to_numpy(UNARY_TORCH[op](to_torch(x)))
    assert got.dtype == want.dtype
    assert_close(got, want)


def test_int_input_to_float_ops_gives_float32(rng: np.random.Generator) -> None:
    x = rng.integers(1, 9, size=(4,)).astype(np.int32)
    got = ref("Sqrt", self=x)["out"]
    assert got.dtype == np.float32
    assert_close(got, torch.sqrt(torch.from_numpy(x)).numpy())


@pytest.mark.parametrize("op", ["Sin", "Cos", "Exp", "Sqrt"])
def test_int_extremes_compute_on_their_float32_value(op: str) -> None:
    """An integer input is cast to the float output type first (as torch and CANN do), not computed exactly."""
    x = np.array([2**31 - 1, -(2**31), 2**24 + 1, 16777217 * 3], dtype=np.int32)
    name = "input" if op == "Cos" else "self"
    got = ref(op, **{name: x})["out"]
    expected = to_numpy(getattr(torch, op.lower())(to_torch(x)))
    np.testing.assert_array_equal(got, expected)


def test_fast_gelu_matches_its_formula(rng: np.random.Generator) -> None:
    x = rng.uniform(-6, 6, size=(64,))
    got = ref("FastGelu", self=x)["out"]
    # CANN documents fast_gelu(x) = x / (1 + exp(-1.702|x|)) * exp(0.851 (x - |x|))
    want = x / (1 + np.exp(-1.702 * np.abs(x))) * np.exp(0.851 * (x - np.abs(x)))
    assert_close(got, want)


@pytest.mark.parametrize("approximate", [0, 1])
def test_gelu_v2_matches_torch(approximate: int, rng: np.random.Generator) -> None:
    x = rng.uniform(-5, 5, size=(3, 9)).astype(np.float32)
    got = ref("GeluV2", x=x, approximate=approximate)["y"]
    assert_close(got, F.gelu(torch.from_numpy(x), approximate="tanh" if approximate else "none").numpy())


BINARY = {
    "Add": torch.add,
    "Sub": torch.sub,
    "Mul": torch.mul,
    "Div": torch.div,
    "Maximum": torch.maximum,
    "Minimum": torch.minimum,
}


@pytest.mark.parametrize("op", sorted(BINARY))
@pytest.mark.parametrize(
    ("da", "db"),
    [
        (np.float32, np.float32),
        (np.float16, np.float16),
        (np.float16, BF16),
        (np.int32, np.float32),
        (np.int8, np.uint8),
        (np.int32, np.int64),
    ],
    ids=str,
)
def test_binary_promotes_and_matches_torch(op: str, da: type, db: type, rng: np.random.Generator) -> None:
    a = rng.uniform(-8, 8, size=(4, 1, 3)).astype(da)
    b = rng.uniform(1, 8, size=(1, 5, 3)).astype(db)
    kwargs = {"alpha": 2} if op in ("Add", "Sub") else {}
    got = ref(op, self=a, other=b, **kwargs)["out"]
    want = to_numpy(BINARY[op](to_torch(a), to_torch(b), **kwargs))
    assert got.dtype == want.dtype, f"{op}: {got.dtype} vs torch {want.dtype}"
    assert_close(got, want)


def test_int_add_wraps_like_torch() -> None:
    a = np.array([2**31 - 1, -(2**31)], dtype=np.int32)
    got = ref("Add", self=a, other=np.array([1, -1], np.int32), alpha=1)["out"]
    np.testing.assert_array_equal(got, (torch.from_numpy(a) + torch.tensor([1, -1], dtype=torch.int32)).numpy())


@pytest.mark.parametrize("scalar", [2, 2.5, True])
@pytest.mark.parametrize("dtype", [np.float16, np.int32, np.bool_])
def test_tensor_scalar_promotion_matches_torch(scalar: object, dtype: type, rng: np.random.Generator) -> None:
    x = rng.integers(0, 3, size=(6,)).astype(dtype)
    got = ref("Muls", self=x, other=scalar)["out"]
    want = (to_torch(x) * scalar).numpy()
    assert got.dtype == want.dtype
    assert_close(got, want)


@pytest.mark.parametrize("stem", ["Eq", "Ne", "Gt", "Ge", "Lt", "Le"])
def test_comparisons_match_torch(stem: str, rng: np.random.Generator) -> None:
    a = rng.integers(0, 3, size=(3, 4)).astype(np.float32)
    b = rng.integers(0, 3, size=(4,)).astype(np.float32)
    fn = getattr(torch, stem.lower())
    assert_close(ref(f"{stem}Tensor", self=a, other=b)["out"], fn(torch.from_numpy(a), torch.from_numpy(b)).numpy())
    assert_close(ref(f"{stem}Scalar", self=a, other=1)["out"], fn(torch.from_numpy(a), 1).numpy())


def test_nan_propagates_through_maximum_and_clamp() -> None:
    a = np.array([np.nan, 1.0, -np.inf], np.float32)
    assert_close(
        ref("Maximum", self=a, other=np.zeros(3, np.float32))["out"],
        torch.maximum(torch.from_numpy(a), torch.zeros(3)).numpy(),
    )
    got = ref("Clamp", self=a, clipValueMin=-1, clipValueMax=0.5)["out"]
    assert_close(got, torch.clamp(torch.from_numpy(a), -1, 0.5).numpy())


@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_div_mod_modes(mode: int, dtype: type) -> None:
    a = np.array([7, -7, 7, -7], dtype=dtype)
    b = np.array([2, 2, -2, -2], dtype=dtype)
    rounding = {0: None, 1: "trunc", 2: "floor"}[mode]
    want = torch.div(torch.from_numpy(a), torch.from_numpy(b), rounding_mode=rounding).numpy()
    got = ref("DivMod", self=a, other=b, mode=mode)["out"]
    assert got.dtype == want.dtype
    assert_close(got, want)


def test_pow_variants(rng: np.random.Generator) -> None:
    x = rng.uniform(0.5, 3, size=(5,)).astype(np.float32)
    e = rng.uniform(-2, 2, size=(5,)).astype(np.float32)
    assert_close(
        ref("PowTensorTensor", self=x, exponent=e)["out"], torch.pow(torch.from_numpy(x), torch.from_numpy(e)).numpy()
    )
    assert_close(ref("PowTensorScalar", self=x, exponent=3)["out"], torch.pow(torch.from_numpy(x), 3).numpy())
    assert_close(ref("PowScalarTensor", self=2.0, exponent=e)["out"], torch.pow(2.0, torch.from_numpy(e)).numpy())


def test_pow_follows_ieee_pow_at_exponent_one_half() -> None:
    # NumPy would take sqrt for a scalar 0.5 (NaN and -0.0 here); the contract is C99 pow, as a GPU's powf gives
    x = np.array([-np.inf, -0.0, 0.0, 4.0, -4.0, np.inf], np.float32)
    want = np.array([np.inf, 0.0, 0.0, 2.0, np.nan, np.inf], np.float32)
    for got in (
        ref("PowTensorScalar", self=x, exponent=0.5)["out"],
        ref("PowTensorTensor", self=x, exponent=np.full_like(x, 0.5))["out"],
        ref("ForeachPowScalarV2", x=[x], scalar=0.5)["out"][0],
    ):
        np.testing.assert_array_equal(got, want)
        assert not np.signbit(got[1]), "pow(-0.0, 0.5) is +0.0"


def test_logical_ops_and_where(rng: np.random.Generator) -> None:
    a = rng.integers(0, 2, size=(8,)).astype(np.int32)
    b = rng.random(8) < 0.5
    assert_close(ref("LogicalAnd", self=a, other=b)["out"], np.logical_and(a, b))
    assert_close(ref("LogicalOr", self=a, other=b)["out"], np.logical_or(a, b))
    assert_close(ref("LogicalNot", self=a)["out"], np.logical_not(a))
    x, y = rng.standard_normal(8).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    assert_close(ref("SWhere", condition=b, self=x, other=y)["out"], np.where(b, x, y))


def test_cast_truncates_and_rounds_like_torch() -> None:
    x = np.array([1.7, -2.5, 300.25, 0.1], dtype=np.float32)
    for dst, tdt in (
        (D.ACL_INT32, torch.int32),
        (D.ACL_FLOAT16, torch.float16),
        (D.ACL_BF16, torch.bfloat16),
        (D.ACL_BOOL, torch.bool),
    ):
        got = ref("Cast", self=x, dtype=int(dst))["out"]
        assert_close(got, to_numpy(torch.from_numpy(x).to(tdt)))


def test_inplace_twins_write_self() -> None:
    x = np.array([1.0, 2.0, 3.0], np.float32)
    assert_close(ref("InplaceAdd", selfRef=x, other=np.ones(3, np.float32), alpha=2)["selfRef"], x + 2)
    assert_close(ref("InplaceCos", inputRef=x)["inputRef"], np.cos(x))
    assert_close(ref("InplaceSqrt", self=x)["self"], np.sqrt(x))
    assert_close(ref("InplaceGtScalar", selfRef=x, other=1.5)["selfRef"], np.array([0, 1, 1], np.float32))


def test_masked_fill_copy_fill_zero(rng: np.random.Generator) -> None:
    x = rng.standard_normal((3, 4)).astype(np.float32)
    mask = np.array([True, False, True, False])
    want = torch.from_numpy(x).masked_fill(torch.from_numpy(mask), 7.0).numpy()
    assert_close(ref("InplaceMaskedFillScalar", selfRef=x, mask=mask, value=7.0)["selfRef"], want)
    assert_close(ref("InplaceMaskedFillTensor", selfRef=x, mask=mask, value=np.array(7.0, np.float32))["selfRef"], want)
    assert_close(
        ref("InplaceCopy", selfRef=x, src=np.arange(4, dtype=np.float16))["selfRef"],
        np.broadcast_to(np.arange(4.0), (3, 4)),
    )
    assert_close(ref("InplaceFillScalar", selfRef=x, value=2)["selfRef"], np.full((3, 4), 2.0))
    assert_close(ref("InplaceZero", selfRef=x)["selfRef"], np.zeros((3, 4)))


def test_views_do_not_change_results(rng: np.random.Generator) -> None:
    a = rng.standard_normal((6, 5)).astype(np.float32)
    b = rng.standard_normal((6, 5)).astype(np.float32)
    want = ref("Mul", self=a, other=b)["out"]
    for layout in ("padded", "transposed"):
        assert_close(ref("Mul", self=a, other=b, layout=layout)["out"], want, atol=0, rtol=0)


def test_bad_calls_return_cann_codes() -> None:
    a = np.ones((2, 3), np.float32)
    with pytest.raises(AclnnError) as exc:
        ref("Add", self=a, other=np.ones((4, 3), np.float32), alpha=1)
    assert exc.value.code == 161002 and "broadcast" in exc.value.message
    with pytest.raises(AclnnError) as exc:
        ref("Add", self=a, other=a, alpha=1.5, out_dtypes={"out": D.ACL_INT32})
    assert exc.value.code == 161002
    with pytest.raises(AclnnError) as exc:
        ref("Adds", self=np.ones(3, np.int32), other=1, alpha=0.5)
    assert exc.value.code == 161002
    with pytest.raises(AclnnError) as exc:
        ref("Abs", self=np.ones(3, np.uint16))
    assert exc.value.code == 161002


def test_erf_is_exact_at_known_points() -> None:
    x = np.array([0.0, 0.5, 1.0, -2.0])
    assert_close(ref("Erf", self=x)["out"], np.array([math.erf(v) for v in x]))


def test_inplace_add_v3_updates_its_tensor() -> None:
    other = np.arange(4, dtype=np.float32)
    got = ref("InplaceAddV3", selfRef=1.5, other=other, alpha=2)["other"]
    assert_close(got, (torch.add(torch.tensor(1.5), torch.from_numpy(other), alpha=2)).numpy())


# ----------------------------------------------------------------------------- FloorDivide, LogicalXor, XLogY
@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16, np.float64, np.int8, np.int32, np.int64], ids=str)
def test_floor_divide_matches_torch(dtype: type, rng: np.random.Generator):
    a = (rng.uniform(-20, 20, (4, 6))).astype(dtype)
    b = rng.choice([-7, -3, -1.5, 2, 2.5, 5], size=(6,)).astype(dtype)
    b[b == 0] = 1
    want = to_numpy(torch.floor_divide(to_torch(a), to_torch(b)))
    assert_close(ref("FloorDivide", self=a, other=b)["out"], want)
    assert_close(ref("InplaceFloorDivide", selfRef=a.copy(), other=b)["selfRef"], want)
    scalar = -3 if np.dtype(dtype).kind == "i" else -2.5
    want = to_numpy(torch.floor_divide(to_torch(a), scalar))
    assert_close(ref("FloorDivides", self=a, other=scalar)["out"], want)


def test_floor_divide_promotes_and_refuses_bool():
    got = ref("FloorDivides", self=np.array([7, -7], np.int32), other=2.0)["out"]
    assert got.dtype == np.float32 and list(got) == [3.0, -4.0]
    with pytest.raises(AclnnError):
        ref("FloorDivide", self=np.array([True]), other=np.array([True]))


def test_logical_xor_matches_torch(rng: np.random.Generator):
    a = rng.integers(-1, 2, (3, 4)).astype(np.int32)
    b = rng.random((4,)) < 0.5
    got = ref("LogicalXor", self=a, other=b)["out"]
    np.testing.assert_array_equal(got, torch.logical_xor(torch.from_numpy(a), torch.from_numpy(b)).numpy())


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16, np.float64, np.int32, np.bool_], ids=str)
def test_xlogy_matches_torch(dtype: type, rng: np.random.Generator):
    x = rng.uniform(-3, 3, (3, 5)).astype(np.float64)
    x[0, :2] = 0
    y = rng.uniform(0, 4, (3, 5))
    y[0, 1], y[1, 0], y[2, 0] = np.nan, 0.0, -1.0
    if np.dtype(dtype).kind in "ib":
        x, y = x.astype(dtype), np.abs(y[:, :]).round().astype(np.float32)
    else:
        x, y = x.astype(dtype), y.astype(dtype)
    want = to_numpy(torch.xlogy(to_torch(x), to_torch(y)))
    got = ref("XLogYTensor", self=x, other=y)["out"]
    assert got.dtype == want.dtype
    assert_close(got, want)
    assert_close(ref("XLogYScalarOther", self=x, other=0.0)["out"], to_numpy(torch.xlogy(to_torch(x), 0.0)))
    yf = y.astype(np.float32)
    assert_close(ref("XLogYScalarSelf", self=0.0, other=yf)["out"], torch.xlogy(0.0, torch.from_numpy(yf)).numpy())
    assert_close(ref("XLogYScalarSelf", self=2.5, other=yf)["out"], torch.xlogy(2.5, torch.from_numpy(yf)).numpy())

"""The reference's reduction family against PyTorch's CPU results, hand-computed cases and invariants."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

from acl_core import eager
from acl_core.dtypes import DataType as D
from acl_core.dtypes import from_numpy
from acl_core.errors import AclnnError
from acl_core.spec.ops import reduction
from tests.conftest import assert_close
from tests.ops.torch_ref import check_samples_and_errors, ref, to_numpy, to_torch

BF16 = ml_dtypes.bfloat16
FLOATS = [np.float32, np.float16, BF16]
FLOATS64 = [*FLOATS, np.float64]
INTS = [np.int8, np.uint8, np.int32, np.int64]
name_of = lambda d: np.dtype(d).name


def _acl(dtype: type) -> int:
    return int(from_numpy(np.dtype(dtype)))


def _data(rng: np.random.Generator, shape: tuple[int, ...], dtype: type, low: int = -4, high: int = 4) -> np.ndarray:
    if np.dtype(dtype) == np.bool_:
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind in "iu":
        return rng.integers(max(low, 0) if np.dtype(dtype).kind == "u" else low, high, size=shape).astype(dtype)
    return rng.uniform(low, high, size=shape).astype(dtype)


def _code(op: str, **kwargs: object) -> int:
    with pytest.raises(AclnnError) as info:
        ref(op, **kwargs)
    return int(info.value.code)


# ----------------------------------------------------------------------------- softmax
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("dtype", FLOATS64, ids=name_of)
@pytest.mark.parametrize(("shape", "dim"), [((3, 7), -1), ((2, 3, 4), 1), ((5,), 0)])
def test_softmax_matches_torch(op: str, dtype: type, shape: tuple[int, ...], dim: int, rng: np.random.Generator):
    x = _data(rng, shape, dtype, -6, 6)
    got = ref(op, self=x, dim=dim)["out"]
    fn = torch.softmax if op == "Softmax" else torch.log_softmax
    want = to_numpy(fn(to_torch(x), dim=dim))
    assert got.dtype == want.dtype
    assert_close(got, want)


def test_softmax_rows_sum_to_one_and_log_softmax_is_its_log(rng: np.random.Generator):
    x = rng.normal(0, 10, size=(6, 9))
    sm = ref("Softmax", self=x, dim=1)["out"]
    assert np.all(sm >= 0)
    assert_close(sm.sum(axis=1), np.ones(6))
    assert_close(ref("LogSoftmax", self=x, dim=1)["out"], np.log(sm))
    # softmax is shift-invariant along its dim
    assert_close(ref("Softmax", self=x + 1000.0, dim=1)["out"], sm)


def test_softmax_special_rows_match_torch():
    x = np.array([[-np.inf, 1, 2], [np.nan, 0, 1], [np.inf, 0, 1], [-np.inf, -np.inf, -np.inf]], np.float32)
    for op, fn in (("Softmax", torch.softmax), ("LogSoftmax", torch.log_softmax)):
        assert_close(ref(op, self=x, dim=1)["out"], fn(torch.from_numpy(x), dim=1).numpy())


def test_softmax_of_0d_and_empty():
    assert_close(ref("Softmax", self=np.array(3.0, np.float32), dim=-1)["out"], np.array(1.0, np.float32))
    assert ref("Softmax", self=np.zeros((0, 4), np.float32), dim=1)["out"].shape == (0, 4)


# ----------------------------------------------------------------------------- sum and mean
SUM_PAIRS = [
    (np.float32, np.float32),
    (np.float16, np.float16),
    (BF16, BF16),
    (np.float64, np.float64),
    (np.float32, np.float16),
    (np.int32, np.int64),
    (np.int8, np.int8),
    (np.uint8, np.int32),
    (np.bool_, np.int64),
    (np.int64, np.float32),
]
DIM_CASES = [([1], False), ([-1, 0], True), ([], False), ([2, 0, 1], True)]


@pytest.mark.parametrize(("src", "dst"), SUM_PAIRS, ids=lambda d: name_of(d))
@pytest.mark.parametrize(("dims", "keep"), DIM_CASES, ids=str)
def test_reduce_sum_matches_torch(src: type, dst: type, dims: list[int], keep: bool, rng: np.random.Generator):
    x = _data(rng, (2, 3, 4), src)
    got = ref("ReduceSum", self=x, dims=dims, keepDims=keep, dtype=_acl(dst))["out"]
    tdt = to_torch(np.zeros(1, dst)).dtype
    want = to_numpy(torch.sum(to_torch(x), dim=dims, keepdim=keep, dtype=tdt))
    assert got.dtype == np.dtype(dst)
    assert_close(got, want)


def test_reduce_sum_hand_cases():
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    assert_close(ref("ReduceSum", self=x, dims=[0], keepDims=False, dtype=int(D.ACL_INT32))["out"], [3, 5, 7])
    # the input is cast to dtype before summing: 1.7 and 2.9 truncate to 1 and 2
    f = np.array([1.7, 2.9], np.float32)
    assert ref("ReduceSum", self=f, dims=[], keepDims=False, dtype=int(D.ACL_INT32))["out"] == 3
    # int32 results wrap like the C type
    big = np.array([2**31 - 1, 1], np.int32)
    assert ref("ReduceSum", self=big, dims=[0], keepDims=False, dtype=int(D.ACL_INT32))["out"] == -(2**31)
    # the sum over an empty dim is 0; 0-d input is its own sum
    assert_close(ref("ReduceSum", self=np.zeros((0, 3)), dims=[0], keepDims=True, dtype=11)["out"], np.zeros((1, 3)))
    assert ref("ReduceSum", self=np.array(2.5), dims=[0], keepDims=False, dtype=11)["out"] == 2.5


def test_reduce_sum_complex_matches_torch(rng: np.random.Generator):
    x = (rng.normal(size=(3, 4)) + 1j * rng.normal(size=(3, 4))).astype(np.complex64)
    got = ref("ReduceSum", self=x, dims=[1], keepDims=False, dtype=int(D.ACL_COMPLEX64))["out"]
    assert_close(got, torch.sum(torch.from_numpy(x), dim=1).numpy(), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", FLOATS64, ids=name_of)
@pytest.mark.parametrize(("dims", "keep"), DIM_CASES, ids=str)
def test_mean_matches_torch(dtype: type, dims: list[int], keep: bool, rng: np.random.Generator):
    x = _data(rng, (2, 3, 4), dtype)
    got = ref("Mean", self=x, dim=dims, keepDim=keep, dtype=_acl(dtype))["out"]
    assert_close(got, to_numpy(torch.mean(to_torch(x), dim=dims, keepdim=keep)))


def test_mean_dtype_and_integer_and_empty_cases(rng: np.random.Generator):
    x16 = _data(rng, (4, 5), np.float16)
    got = ref("Mean", self=x16, dim=[1], keepDim=False, dtype=int(D.ACL_FLOAT))["out"]
    assert got.dtype == np.float32
    assert_close(got, torch.mean(torch.from_numpy(x16), dim=1, dtype=torch.float32).numpy())
    # an integer dtype truncates the mean toward zero: (-7 + 0) / 2 = -3.5 → -3, (5 + 2) / 2 = 3.5 → 3
    ints = np.array([[-7, 0], [5, 2]], np.int32)
    assert_close(ref("Mean", self=ints, dim=[1], keepDim=False, dtype=int(D.ACL_INT32))["out"], np.array([-3, 3]))
    # a float dtype for integer input gives the exact mean, castable to a wider out
    got = ref("Mean", self=ints, dim=[0], keepDim=False, dtype=int(D.ACL_FLOAT), out_dtypes={"out": D.ACL_DOUBLE})
    assert_close(got["out"], np.array([-1.0, 1.0]))
    assert np.isnan(ref("Mean", self=np.zeros((0, 2), np.float32), dim=[0], keepDim=False, dtype=0)["out"]).all()


# ----------------------------------------------------------------------------- extrema
@pytest.mark.parametrize("op", ["Amax", "Amin"])
@pytest.mark.parametrize("dtype", [*FLOATS64, *INTS, np.bool_], ids=name_of)
@pytest.mark.parametrize(("dims", "keep"), DIM_CASES, ids=str)
def test_amax_amin_match_torch(op: str, dtype: type, dims: list[int], keep: bool, rng: np.random.Generator):
    x = _data(rng, (2, 3, 4), dtype)
    if np.dtype(dtype).kind == "f" or dtype is BF16:
        x.reshape(-1)[[0, 5, 9]] = np.array([np.nan, np.inf, -np.inf]).astype(dtype)
    got = ref(op, self=x, dim=dims, keepDim=keep)["out"]
    fn = torch.amax if op == "Amax" else torch.amin
    want = to_numpy(fn(to_torch(x), dim=dims, keepdim=keep))
    assert got.dtype == want.dtype
    assert_close(got, want)


@pytest.mark.parametrize("dtype", [*FLOATS64, *INTS, np.bool_], ids=name_of)
def test_max_matches_torch(dtype: type, rng: np.random.Generator):
    x = _data(rng, (3, 5), dtype)
    got = ref("Max", self=x)["out"]
    assert got.shape == ()
    assert_close(got, to_numpy(torch.max(to_torch(x))))


def test_max_nan_out_shape_and_empty():
    assert np.isnan(ref("Max", self=np.array([1.0, np.nan, np.inf], np.float32))["out"])
    # CANN documents the out shape as (1); a 0-d out (torch's) is accepted too
    got = ref("Max", self=np.array([[1, 9], [4, 2]], np.int32), out=np.zeros((1,), np.int32))["out"]
    assert got.shape == (1,) and got[0] == 9
    # the result may be cast into another listed dtype
    assert ref("Max", self=np.array([1.5, 2.5], np.float32), out=np.zeros((), np.float16))["out"] == 2.5
    # like CANN's aclnnMax, an empty self succeeds and leaves out untouched
    out = eager.to_device(np.full((), 7.0, np.float32), "reference")
    eager.run("Max", "reference", self=np.zeros((0, 3), np.float32), out=out)
    assert out.numpy() == 7.0


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16, np.int32, np.int64], ids=name_of)
@pytest.mark.parametrize(("dim", "keep"), [(1, False), (-3, True), (2, False)])
def test_max_dim_matches_torch(dtype: type, dim: int, keep: bool, rng: np.random.Generator):
    x = _data(rng, (2, 3, 4), dtype, -2, 2)  # small range: ties, where torch reports the first index
    got = ref("MaxDim", self=x, dim=dim, keepdim=keep)
    values, indices = torch.max(to_torch(x), dim=dim, keepdim=keep)
    assert_close(got["out"], to_numpy(values))
    assert got["indices"].dtype == np.int64
    np.testing.assert_array_equal(got["indices"], indices.numpy())


def test_max_dim_nan_bool_and_int32_indices():
    x = np.array([[1.0, np.nan, 3.0, np.nan], [2.0, 5.0, 5.0, -np.inf]], np.float32)
    got = ref("MaxDim", self=x, dim=1, keepdim=False, out_dtypes={"indices": D.ACL_INT32})
    values, indices = torch.max(torch.from_numpy(x), dim=1)
    assert_close(got["out"], values.numpy())
    assert got["indices"].dtype == np.int32
    np.testing.assert_array_equal(got["indices"], indices.numpy())
    b = np.array([[False, True, True], [False, False, False]])
    got = ref("MaxDim", self=b, dim=1, keepdim=True)
    np.testing.assert_array_equal(got["out"], [[True], [False]])
    np.testing.assert_array_equal(got["indices"], [[1], [0]])


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("dtype", [*FLOATS64, *INTS], ids=name_of)
@pytest.mark.parametrize(("dim", "keep"), [(1, False), (-1, True), (0, False)])
def test_arg_extrema_match_torch(op: str, dtype: type, dim: int, keep: bool, rng: np.random.Generator):
    x = _data(rng, (3, 4, 5), dtype, -2, 3)
    got = ref(op, self=x, dim=dim, keepdim=keep)["out"]
    fn = torch.argmax if op == "ArgMax" else torch.argmin
    want = fn(to_torch(x), dim=dim, keepdim=keep).numpy()
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_arg_extrema_nan_0d_and_int32_out(op: str):
    x = np.array([[1.0, np.nan, -3.0, np.nan], [np.inf, 2.0, -np.inf, 2.0]], np.float32)
    fn = torch.argmax if op == "ArgMax" else torch.argmin
    got = ref(op, self=x, dim=1, keepdim=False, out_dtypes={"out": D.ACL_INT32})["out"]
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, fn(torch.from_numpy(x), dim=1).numpy())
    assert ref(op, self=np.array(4.0, np.float32), dim=0, keepdim=False)["out"] == 0


# ----------------------------------------------------------------------------- products and scans
PROD_PAIRS = [
    (np.float32, np.float32),
    (np.float16, np.float16),
    (BF16, np.float32),
    (np.float64, np.float64),
    (np.int32, np.int64),
    (np.int8, np.int8),
    (np.uint8, np.int64),
    (np.bool_, np.bool_),
    (np.bool_, np.int64),
]


@pytest.mark.parametrize(("src", "dst"), PROD_PAIRS, ids=lambda d: name_of(d))
def test_prod_and_prod_dim_match_torch(src: type, dst: type, rng: np.random.Generator):
    x = _data(rng, (2, 3, 4), src, -2, 3)
    tdt = to_torch(np.zeros(1, dst)).dtype
    got = ref("Prod", self=x, dtype=_acl(dst))["out"]
    assert got.dtype == np.dtype(dst)
    assert_close(got, to_numpy(torch.prod(to_torch(x), dtype=tdt)))
    for dim, keep in ((1, False), (-1, True)):
        got = ref("ProdDim", self=x, dim=dim, keepDim=keep, dtype=_acl(dst))["out"]
        assert_close(got, to_numpy(torch.prod(to_torch(x), dim=dim, keepdim=keep, dtype=tdt)))


def test_prod_hand_cases():
    assert ref("Prod", self=np.zeros((0, 3), np.float32), dtype=0)["out"] == 1.0
    assert ref("Prod", self=np.array([2.0, 3.0, -0.5], np.float32), dtype=0, out=np.zeros((1,), np.float32))[
        "out"
    ].tolist() == [-3.0]
    # int8 products wrap: 16 * 16 = 256 → 0
    assert ref("Prod", self=np.array([16, 16], np.int8), dtype=int(D.ACL_INT8))["out"] == 0
    assert_close(
        ref("ProdDim", self=np.zeros((3, 0)), dim=1, keepDim=False, dtype=int(D.ACL_DOUBLE))["out"], np.ones(3)
    )


CUMSUM_PAIRS = [
    (np.float32, np.float32),
    (np.float16, np.float16),
    (BF16, BF16),
    (np.float16, np.float32),
    (np.float64, np.float64),
    (np.int32, np.int64),
    (np.int8, np.int8),
    (np.uint8, np.uint8),
    (np.int64, np.float32),
]


@pytest.mark.parametrize(("src", "dst"), CUMSUM_PAIRS, ids=lambda d: name_of(d))
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cumsum_matches_torch(src: type, dst: type, dim: int, rng: np.random.Generator):
    x = _data(rng, (3, 4, 5), src, -30 if np.dtype(src).kind == "i" else -4, 30 if np.dtype(src).kind in "iu" else 4)
    tdt = to_torch(np.zeros(1, dst)).dtype
    got = ref("Cumsum", self=x, dim=dim, dtype=_acl(dst))["out"]
    assert got.dtype == np.dtype(dst)
    assert_close(got, to_numpy(torch.cumsum(to_torch(x), dim=dim, dtype=tdt)))


def test_cumsum_nan_inf_and_0d():
    x = np.array([1.0, np.inf, 2.0, np.nan, 3.0], np.float32)
    assert_close(ref("Cumsum", self=x, dim=0, dtype=0)["out"], torch.cumsum(torch.from_numpy(x), 0).numpy())
    assert ref("Cumsum", self=np.array(4, np.int32), dim=-1, dtype=int(D.ACL_INT32))["out"] == 4


# ----------------------------------------------------------------------------- top-k and sorting
SORTABLE = [np.float32, np.float16, BF16, np.int8, np.uint8, np.int32, np.int64]


def _with_specials(x: np.ndarray) -> np.ndarray:
    if x.dtype.kind == "f" or x.dtype == BF16:
        x = x.copy()
        x.reshape(-1)[[0, 3, 7, 8]] = np.array([np.nan, np.inf, -np.inf, -0.0]).astype(x.dtype)
    return x


@pytest.mark.parametrize("dtype", SORTABLE, ids=name_of)
@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dim", [0, -1])
def test_sort_matches_stable_torch(dtype: type, descending: bool, dim: int, rng: np.random.Generator):
    x = _with_specials(_data(rng, (6, 8), dtype, 0, 4))  # many ties: stability decides the indices
    got = ref("Sort", self=x, stable=True, dim=dim, descending=descending)
    values, indices = torch.sort(to_torch(x), dim=dim, descending=descending, stable=True)
    assert got["valuesOut"].dtype == x.dtype
    assert_close(got["valuesOut"], to_numpy(values))
    np.testing.assert_array_equal(got["indicesOut"], indices.numpy())
    args = ref("Argsort", self=x, dim=dim, descending=descending)["out"]
    np.testing.assert_array_equal(args, torch.argsort(to_torch(x), dim=dim, descending=descending, stable=True))


def test_sort_invariants_sorted_permutation(rng: np.random.Generator):
    x = rng.integers(0, 5, size=(4, 30)).astype(np.float32)
    for descending in (False, True):
        got = ref("Sort", self=x, stable=False, dim=1, descending=descending)
        v, i = got["valuesOut"], got["indicesOut"]
        steps = np.diff(v, axis=1)
        assert np.all(steps <= 0) if descending else np.all(steps >= 0)
        assert np.all(np.sort(i, axis=1) == np.arange(30))  # a permutation of each row
        np.testing.assert_array_equal(np.take_along_axis(x, i, axis=1), v)
        # among equal values the original order is kept
        for row in range(4):
            for value in np.unique(v[row]):
                pos = i[row][v[row] == value]
                assert np.all(np.diff(pos) > 0)


def test_sort_and_argsort_unsigned_and_bool_against_numpy(rng: np.random.Generator):
    for dtype in (np.uint16, np.uint32, np.uint64):
        x = rng.integers(0, 6, size=(3, 10)).astype(dtype)
        x[0, 0] = np.iinfo(dtype).max
        np.testing.assert_array_equal(
            ref("Argsort", self=x, dim=1, descending=False)["out"], np.argsort(x, axis=1, kind="stable")
        )
        got = ref("Sort", self=x, stable=True, dim=1, descending=False)
        np.testing.assert_array_equal(got["valuesOut"], np.sort(x, axis=1))
    b = np.array([True, False, True, False])
    got = ref("Sort", self=b, stable=True, dim=0, descending=True)
    np.testing.assert_array_equal(got["indicesOut"], [0, 2, 1, 3])
    assert ref("Argsort", self=np.array(1.0, np.float32), dim=0, descending=False)["out"] == 0


@pytest.mark.parametrize("dtype", [*SORTABLE, np.float64], ids=name_of)
@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize(("k", "dim"), [(3, -1), (1, 0), (6, 0), (0, 1)])
def test_topk_matches_torch(dtype: type, largest: bool, k: int, dim: int, rng: np.random.Generator):
    x = _with_specials(_data(rng, (6, 9), dtype, 0, 5))
    got = ref("Topk", self=x, k=k, dim=dim, largest=largest, sorted=True)
    values, _ = torch.topk(to_torch(x), k, dim=dim, largest=largest, sorted=True)
    assert_close(got["valuesOut"], to_numpy(values))
    idx = got["indicesOut"]
    assert idx.dtype == np.int64
    # indices point at the values, and ties are resolved as torch's stable sort resolves them
    assert_close(np.take_along_axis(x, idx, axis=dim), got["valuesOut"])
    _, stable = torch.sort(to_torch(x), dim=dim, descending=largest, stable=True)
    np.testing.assert_array_equal(idx, np.take(stable.numpy(), np.arange(k), axis=dim))


def test_topk_unsorted_flag_and_empty_rows(rng: np.random.Generator):
    x = rng.permutation(10).astype(np.float32)
    got = ref("Topk", self=x, k=3, dim=0, largest=True, sorted=False)
    assert sorted(got["valuesOut"].tolist()) == [7.0, 8.0, 9.0]
    got = ref("Topk", self=np.zeros((0, 5), np.float32), k=2, dim=1, largest=True, sorted=True)
    assert got["valuesOut"].shape == (0, 2) and got["indicesOut"].shape == (0, 2)


# ----------------------------------------------------------------------------- variance and standard deviation
VAR_DIMS = [([1], True), ([-1, 0], False), (None, False), ([], True)]


def _torch_dims(dims: list[int] | None) -> list[int] | None:
    return None if not dims else dims


@pytest.mark.parametrize("dtype", FLOATS, ids=name_of)
@pytest.mark.parametrize(("dims", "keep"), VAR_DIMS, ids=str)
@pytest.mark.parametrize("correction", [0, 1, 2])
def test_var_std_family_matches_torch(
    dtype: type, dims: list[int] | None, keep: bool, correction: int, rng: np.random.Generator
):
    x = _data(rng, (3, 4, 5), dtype)
    t, td = to_torch(x), _torch_dims(dims)
    var = to_numpy(torch.var(t, dim=td, correction=correction, keepdim=keep))
    std = to_numpy(torch.std(t, dim=td, correction=correction, keepdim=keep))
    mean = to_numpy(torch.mean(t, dim=td, keepdim=keep))
    common = {"self": x, "dim": dims, "keepdim": keep}
    assert_close(ref("VarCorrection", **common, correction=correction)["out"], var)
    assert_close(ref("Std", **common, correction=correction)["out"], std)
    got = ref("VarMean", **common, correction=correction)
    assert_close(got["varOut"], var)
    assert_close(got["meanOut"], mean)
    got = ref("StdMeanCorrection", **common, correction=correction)
    assert_close(got["stdOut"], std)
    assert_close(got["meanOut"], mean)
    if correction < 2:
        assert_close(ref("Var", **common, unbiased=bool(correction))["out"], var)


def test_var_degenerate_cases_follow_cann(rng: np.random.Generator):
    x = rng.normal(size=(2, 3)).astype(np.float32)
    # N ≤ correction: NaN when N is 1, +Inf otherwise (CANN fills; torch would divide by zero)
    assert np.isnan(ref("VarCorrection", self=x[:1], dim=[0], correction=1, keepdim=False)["out"]).all()
    assert np.isposinf(ref("VarCorrection", self=x, dim=[1], correction=3, keepdim=False)["out"]).all()
    got = ref("StdMeanCorrection", self=x, dim=[1], correction=5, keepdim=True)
    assert np.isposinf(got["stdOut"]).all()
    assert_close(got["meanOut"], x.mean(axis=1, keepdims=True))
    assert np.isnan(ref("Var", self=x[:1], dim=[0], unbiased=True, keepdim=False)["out"]).all()
    assert_close(ref("Var", self=x[:1], dim=[0], unbiased=False, keepdim=False)["out"], np.zeros(3))
    # an empty reduction is NaN, for the mean too
    got = ref("VarMean", self=np.zeros((0, 3), np.float32), dim=[0], correction=1, keepdim=False)
    assert np.isnan(got["varOut"]).all() and np.isnan(got["meanOut"]).all()
    # a large correction below N just changes the divisor: sum of squares / (N - correction)
    y = np.array([1.0, 2.0, 3.0, 6.0], np.float32)
    assert_close(ref("VarCorrection", self=y, dim=[0], correction=2, keepdim=False)["out"], np.float32(14.0 / 2))


# ----------------------------------------------------------------------------- strided views
@pytest.mark.parametrize("layout", ["padded", "transposed"])
def test_non_contiguous_views_read_correctly(layout: str, rng: np.random.Generator):
    x = _data(rng, (4, 6), np.float32)
    run = lambda op, **kw: eager.run(op, "reference", layout=layout, **kw)
    assert_close(run("ReduceSum", self=x, dims=[1], keepDims=False, dtype=0)["out"], x.sum(axis=1))
    assert_close(run("Softmax", self=x, dim=0)["out"], torch.softmax(torch.from_numpy(x), 0).numpy())
    np.testing.assert_array_equal(
        run("Argsort", self=x, dim=1, descending=False)["out"], np.argsort(x, axis=1, kind="stable")
    )
    assert_close(run("Cumsum", self=x, dim=0, dtype=0)["out"], np.cumsum(x, axis=0))


# ----------------------------------------------------------------------------- error codes
def test_error_codes_of_the_rules(rng: np.random.Generator):
    x = _data(rng, (2, 3), np.float32)
    assert _code("ReduceSum", self=x, dims=[2], keepDims=False, dtype=0) == 161002  # dim out of range
    assert _code("ReduceSum", self=x, dims=[1, -1], keepDims=False, dtype=0) == 161002  # repeated dim
    assert _code("ReduceSum", self=x, dims=None, keepDims=False, dtype=0) == 161001  # null dims
    assert _code("ReduceSum", self=x, dims=[0], keepDims=False, dtype=0, out=np.zeros(3, np.int32)) == 161002
    assert _code("ReduceSum", self=x, dims=[0], keepDims=True, dtype=0, out=np.zeros(3, np.float32)) == 161002
    assert _code("Mean", self=x, dim=[0], keepDim=False, dtype=int(D.ACL_INT32)) == 161002  # float → int
    assert _code("Amax", self=np.zeros((0, 2), np.float32), dim=[0], keepDim=False) == 161002  # size-0 dim
    assert _code("Amin", self=x, dim=[0], keepDim=False, out=np.zeros(3, np.float64)) == 161002  # out dtype
    assert _code("ArgMax", self=x, dim=-3, keepdim=False) == 161002
    assert _code("ArgMin", self=x, dim=0, keepdim=False, out=np.zeros(3, np.float32)) == 161002
    assert _code("MaxDim", self=np.array(1.0, np.float32), dim=0, keepdim=False) == 161002  # rank 0
    assert _code("Cumsum", self=x, dim=0, dtype=int(D.ACL_INT32)) == 161002  # float self → int dtype
    assert _code("Prod", self=x, dtype=0, out=np.zeros((), np.float16)) == 161002  # dtype ≠ out dtype
    assert _code("Topk", self=x, k=4, dim=1, largest=True, sorted=True) == 161002  # k > size
    assert _code("Topk", self=x, k=-1, dim=1, largest=True, sorted=True) == 161002
    assert _code("Topk", self=x, k=1, dim=1, largest=True, sorted=True, indicesOut=np.zeros((2, 1), np.int32)) == (
        161002
    )
    assert _code("Sort", self=x, stable=True, dim=2, descending=False) == 161002
    assert _code("Softmax", self=x.astype(np.int32), dim=0) == 161002
    assert _code("LogSoftmax", self=np.array(1.0, np.float32), dim=0) == 161002  # rank 0
    assert _code("VarCorrection", self=x, dim=[0, 0], correction=1, keepdim=False) == 161002
    assert _code("Std", self=x, dim=[0], correction=1, keepdim=False, out=np.zeros(2, np.float32)) == 161002
    assert _code("Softmax", self=None, dim=0) == 161001


def test_topk_and_sort_signatures_keep_the_official_order():
    by_name = {s.name: s for s in reduction.SPECS}
    assert [p.name for p in by_name["Topk"].params][:5] == ["self", "k", "dim", "largest", "sorted"]
    sort = by_name["Sort"]
    assert [p.name for p in sort.params] == ["self", "stable", "dim", "descending", "valuesOut", "indicesOut"]


# ----------------------------------------------------------------------------- the conformance cases themselves
@pytest.mark.parametrize("spec", reduction.SPECS, ids=lambda s: s.name)
def test_conformance_samples_run_and_error_samples_fail_as_declared(spec):
    check_samples_and_errors(spec, 7)


# ----------------------------------------------------------------------------- Min, MinDim and the V2 reductions
@pytest.mark.parametrize("dtype", [*FLOATS64, *INTS, np.bool_], ids=name_of)
def test_min_matches_torch(dtype: type, rng: np.random.Generator):
    x = _data(rng, (3, 5), dtype)
    assert_close(ref("Min", self=x)["out"], to_numpy(torch.min(to_torch(x))))
    assert np.isnan(ref("Min", self=np.array([1.0, np.nan, -np.inf], np.float32))["out"])


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16, np.int32, np.int64], ids=name_of)
@pytest.mark.parametrize(("dim", "keep"), [(1, False), (-3, True), (2, False)])
def test_min_dim_matches_torch(dtype: type, dim: int, keep: bool, rng: np.random.Generator):
    x = _data(rng, (2, 3, 4), dtype, -2, 2)  # ties: torch reports the first index
    if np.dtype(dtype).kind == "f" or dtype is BF16:
        x.reshape(-1)[[3, 7]] = np.array([np.nan, -np.inf]).astype(dtype)
    got = ref("MinDim", self=x, dim=dim, keepdim=keep)
    values, indices = torch.min(to_torch(x), dim=dim, keepdim=keep)
    assert_close(got["out"], to_numpy(values))
    np.testing.assert_array_equal(got["indices"], indices.numpy())


@pytest.mark.parametrize("dtype", [*FLOATS64, np.int16, np.int64, np.bool_], ids=name_of)
@pytest.mark.parametrize(("dims", "keep"), DIM_CASES, ids=str)
def test_max_v2_matches_torch_amax(dtype: type, dims: list[int], keep: bool, rng: np.random.Generator):
    x = _data(rng, (2, 3, 4), dtype)
    got = ref("MaxV2", self=x, dims=dims, keepDims=keep, noopWithEmptyDims=False)["out"]
    assert_close(got, to_numpy(torch.amax(to_torch(x), dim=dims, keepdim=keep)))


@pytest.mark.parametrize("dtype", FLOATS64, ids=name_of)
@pytest.mark.parametrize(("dims", "keep"), DIM_CASES, ids=str)
def test_mean_v2_matches_torch(dtype: type, dims: list[int], keep: bool, rng: np.random.Generator):
    x = _data(rng, (2, 3, 4), dtype)
    got = ref("MeanV2", self=x, dim=dims, keepDim=keep, noopWithEmptyAxes=False)["out"]
    assert got.dtype == x.dtype
    assert_close(got, to_numpy(torch.mean(to_torch(x), dim=dims, keepdim=keep)))


def test_v2_noop_with_empty_dims_copies_self_and_integer_means_truncate(rng: np.random.Generator):
    x = _data(rng, (2, 3), np.float32)
    np.testing.assert_array_equal(ref("MeanV2", self=x, dim=[], keepDim=False, noopWithEmptyAxes=True)["out"], x)
    np.testing.assert_array_equal(ref("MaxV2", self=x, dims=[], keepDims=True, noopWithEmptyDims=True)["out"], x)
    assert ref("MeanV2", self=x, dim=[], keepDim=False, noopWithEmptyAxes=False)["out"].shape == ()
    # a set flag changes nothing where dims are given
    got = ref("MaxV2", self=x, dims=[1], keepDims=False, noopWithEmptyDims=True)["out"]
    assert_close(got, x.max(axis=1))
    ints = np.array([[-7, 0], [5, 2]], np.int32)
    got = ref("MeanV2", self=ints, dim=[1], keepDim=False, noopWithEmptyAxes=False)["out"]
    np.testing.assert_array_equal(got, np.array([-3, 3], np.int32))


@pytest.mark.parametrize("dtype", FLOATS, ids=name_of)
@pytest.mark.parametrize(("dims", "keep"), DIM_CASES, ids=str)
def test_reduce_log_sum_matches_torch(dtype: type, dims: list[int], keep: bool, rng: np.random.Generator):
    x = _data(rng, (2, 3, 4), dtype, 0, 4)
    got = ref("ReduceLogSum", data=x, axes=dims, keepDims=keep, noopWithEmptyAxes=False)["reduce"]
    want = to_numpy(torch.log(torch.sum(to_torch(x).float(), dim=dims, keepdim=keep)).to(to_torch(x).dtype))
    assert got.dtype == x.dtype
    assert_close(got, want)
    # the noop flag with no axes copies data (no log)
    same = ref("ReduceLogSum", data=x, axes=[], keepDims=keep, noopWithEmptyAxes=True)["reduce"]
    np.testing.assert_array_equal(same, x)


@pytest.mark.parametrize("dtype", [*FLOATS64, np.int8, np.int32, np.int64, np.uint8], ids=name_of)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cumprod_matches_torch(dtype: type, dim: int, rng: np.random.Generator):
    x = _data(rng, (3, 4, 5), dtype, -2, 3)
    want = to_numpy(torch.cumprod(to_torch(x), dim=dim))
    got = ref("Cumprod", input=x, dim=dim, dtype=int(D.ACL_DT_UNDEFINED))["out"]
    assert got.dtype == x.dtype
    assert_close(got, want)
    assert_close(ref("InplaceCumprod", input=x.copy(), dim=dim)["input"], want)


def test_cumprod_dtype_casts_first_and_in_place_refuses_empty():
    x = np.array([[1.5, 2.5, -2.0]], np.float16)
    got = ref("Cumprod", input=x, dim=1, dtype=int(D.ACL_FLOAT))["out"]
    assert got.dtype == np.float32
    assert_close(got, torch.cumprod(torch.from_numpy(x), dim=1, dtype=torch.float32).numpy())
    assert _code("InplaceCumprod", input=np.zeros((0, 2), np.float32), dim=0) == 161002


@pytest.mark.parametrize("op", ["Cummax", "Cummin"])
@pytest.mark.parametrize("dtype", [*FLOATS64, np.int8, np.uint8, np.int32, np.int64, np.bool_], ids=name_of)
@pytest.mark.parametrize("dim", [0, -1])
def test_cummax_cummin_match_torch(op: str, dtype: type, dim: int, rng: np.random.Generator):
    x = _data(rng, (6, 7), dtype, -2, 3)  # ties: torch moves the index to the later element
    if np.dtype(dtype).kind == "f" or dtype is BF16:
        x[[1, 3], [2, 2]] = np.nan
    got = ref(op, self=x, dim=dim)
    fn = torch.cummax if op == "Cummax" else torch.cummin
    values, indices = fn(to_torch(x), dim=dim)
    assert_close(got["valuesOut"], to_numpy(values))
    np.testing.assert_array_equal(got["indicesOut"], indices.numpy())

"""The reference's matmul family against PyTorch's CPU results, cubeMathType emulation and error codes."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest
import torch

from acl_core import eager, lowp
from acl_core.dtypes import DataType as D
from acl_core.errors import AclnnError
from acl_core.formats import Format
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.matmul import round_to_hf32
from acl_core.tensor import AclTensor, AclTensorList
from tests.conftest import assert_close
from tests.ops.torch_ref import check_samples_and_errors, ref, to_numpy, to_torch

BF16 = ml_dtypes.bfloat16
DTYPES = [np.float32, np.float16, BF16]
MATMUL_OPS = ["Matmul", "Mm", "BatchMatMul", "Addmm", "InplaceAddmm", "Baddbmm", "InplaceBaddbmm", "GroupedMatmulV5"]


def rand(rng: np.random.Generator, shape: tuple[int, ...], dtype: type = np.float32) -> np.ndarray:
    """Uniform values in [-1, 1) of ``dtype``."""
    return rng.uniform(-1, 1, size=shape).astype(dtype)


def code_of(op: str, **kwargs: object) -> int:
    """The CANN status a reference call fails with (the test fails if it succeeds)."""
    with pytest.raises(AclnnError) as exc:
        ref(op, **kwargs)
    return exc.value.code


def hf32_by_frexp(x: np.ndarray) -> np.ndarray:
    """HF32 rounding of normal float32 values, written independently: 11 significant bits, ties to even."""
    mantissa, exponent = np.frexp(x.astype(np.float64))  # x = m * 2**e with 0.5 <= |m| < 1
    return np.ldexp(np.round(mantissa * 2.0**11) / 2.0**11, exponent)


# ----------------------------------------------------------------------------- plain products
MATMUL_SHAPES = [
    ((5, 7), (7, 3)),
    ((7,), (7,)),
    ((4, 6), (6,)),
    ((6,), (6, 3)),
    ((2, 4, 5), (5, 3)),
    ((5,), (2, 5, 3)),
    ((2, 1, 3, 4), (3, 4, 2)),
    ((1, 2, 1, 2, 3, 4), (2, 1, 2, 1, 4, 2)),
    ((3, 0), (0, 4)),
    ((0, 5), (5, 2)),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize(("sa", "sb"), MATMUL_SHAPES, ids=str)
def test_matmul_matches_torch(sa: tuple[int, ...], sb: tuple[int, ...], dtype: type, rng: np.random.Generator) -> None:
    a, b = rand(rng, sa, dtype), rand(rng, sb, dtype)
    got = ref("Matmul", self=a, mat2=b, cubeMathType=0)["out"]
    want = to_numpy(torch.matmul(to_torch(a), to_torch(b)))
    assert got.dtype == want.dtype
    assert_close(got, want)


def twelve_bit(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """float32 values with 12 significant bits and |x| in [0.5, 1): their dot products are exact in float64."""
    return (rng.integers(2048, 4096, size=shape) / 4096 * rng.choice([-1, 1], size=shape)).astype(np.float32)


def test_float32_matmul_is_the_exact_product_rounded_once(rng: np.random.Generator) -> None:
    a, b = twelve_bit(rng, (6, 40)), twelve_bit(rng, (40, 5))
    got = ref("Matmul", self=a, mat2=b, cubeMathType=0)["out"]
    exact = (torch.from_numpy(a).double() @ torch.from_numpy(b).double()).float().numpy()
    np.testing.assert_array_equal(got, exact)


def test_float16_with_float32_computes_in_float32(rng: np.random.Generator) -> None:
    a, b = rand(rng, (3, 4), np.float16), rand(rng, (4, 2))
    got = ref("Matmul", self=a, mat2=b, cubeMathType=0)["out"]
    assert got.dtype == np.float32
    assert_close(got, (torch.from_numpy(a).float() @ torch.from_numpy(b)).numpy())


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_mm_and_bmm_match_torch(dtype: type, rng: np.random.Generator) -> None:
    a, b = rand(rng, (5, 7), dtype), rand(rng, (7, 3), dtype)
    assert_close(ref("Mm", self=a, mat2=b, cubeMathType=0)["out"], to_numpy(torch.mm(to_torch(a), to_torch(b))))
    a, b = rand(rng, (3, 5, 7), dtype), rand(rng, (3, 7, 2), dtype)
    got = ref("BatchMatMul", self=a, mat2=b, cubeMathType=0)["out"]
    assert_close(got, to_numpy(torch.bmm(to_torch(a), to_torch(b))))


def test_batch_matmul_broadcasts_a_batch_of_one(rng: np.random.Generator) -> None:
    a, b = rand(rng, (1, 4, 5)), rand(rng, (3, 5, 2))
    got = ref("BatchMatMul", self=a, mat2=b, cubeMathType=0)["out"]
    assert_close(got, torch.bmm(torch.from_numpy(a).expand(3, 4, 5), torch.from_numpy(b)).numpy())


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("self_shape", [(4, 3), (3,), (4, 1), (1, 1)], ids=str)
def test_addmm_matches_torch(self_shape: tuple[int, ...], dtype: type, rng: np.random.Generator) -> None:
    s, m1, m2 = rand(rng, self_shape, dtype), rand(rng, (4, 6), dtype), rand(rng, (6, 3), dtype)
    got = ref("Addmm", self=s, mat1=m1, mat2=m2, beta=0.5, alpha=2, cubeMathType=0)["out"]
    want = torch.addmm(to_torch(s), to_torch(m1), to_torch(m2), beta=0.5, alpha=2)
    assert_close(got, to_numpy(want))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("self_shape", [(2, 4, 3), (4, 3), (3,), (1, 4, 1)], ids=str)
def test_baddbmm_matches_torch(self_shape: tuple[int, ...], dtype: type, rng: np.random.Generator) -> None:
    s, b1, b2 = rand(rng, self_shape, dtype), rand(rng, (2, 4, 6), dtype), rand(rng, (2, 6, 3), dtype)
    got = ref("Baddbmm", self=s, batch1=b1, batch2=b2, beta=-1.5, alpha=0.25, cubeMathType=0)["out"]
    want = torch.baddbmm(to_torch(s), to_torch(b1), to_torch(b2), beta=-1.5, alpha=0.25)
    assert got.dtype == np.dtype(dtype)
    assert_close(got, to_numpy(want))


def test_beta_zero_ignores_nan_and_inf_in_self(rng: np.random.Generator) -> None:
    s = np.array([[np.nan, np.inf], [-np.inf, 1.0]], np.float32)
    m1, m2 = rand(rng, (2, 3)), rand(rng, (3, 2))
    got = ref("Addmm", self=s, mat1=m1, mat2=m2, beta=0, alpha=1, cubeMathType=0)["out"]
    want = torch.addmm(torch.from_numpy(s), torch.from_numpy(m1), torch.from_numpy(m2), beta=0).numpy()
    assert np.isfinite(got).all()
    assert_close(got, want)
    got = ref("Baddbmm", self=s, batch1=m1[None], batch2=m2[None], beta=0, alpha=1, cubeMathType=0)["out"]
    assert_close(got, want[None])


def test_inplace_twins_write_self_ref(rng: np.random.Generator) -> None:
    s, m1, m2 = rand(rng, (4, 3)), rand(rng, (4, 5)), rand(rng, (5, 3))
    got = ref("InplaceAddmm", selfRef=s, mat1=m1, mat2=m2, beta=2, alpha=-1, cubeMathType=0)["selfRef"]
    assert_close(got, torch.addmm(torch.from_numpy(s), torch.from_numpy(m1), torch.from_numpy(m2), beta=2, alpha=-1))
    s, b1, b2 = rand(rng, (2, 4, 3), np.float16), rand(rng, (2, 4, 5), np.float16), rand(rng, (2, 5, 3), np.float16)
    got = ref("InplaceBaddbmm", selfRef=s, batch1=b1, batch2=b2, beta=1, alpha=1, cubeMathType=0)["selfRef"]
    assert_close(got, torch.baddbmm(torch.from_numpy(s), torch.from_numpy(b1), torch.from_numpy(b2)).numpy())


@pytest.mark.parametrize("layout", ["padded", "transposed"])
def test_strided_views_give_the_same_result(layout: str, rng: np.random.Generator) -> None:
    a, b = rand(rng, (2, 5, 4)), rand(rng, (2, 4, 3))
    want = ref("BatchMatMul", self=a, mat2=b, cubeMathType=0)["out"]
    got = eager.run("BatchMatMul", "reference", layout=layout, self=a, mat2=b, cubeMathType=0)["out"]
    np.testing.assert_array_equal(got, want)


# ----------------------------------------------------------------------------- cubeMathType
def test_round_to_hf32_hand_computed_values() -> None:
    one = 1.0
    cases = {
        one + 2.0**-11: one,  # a tie, to the even neighbour 1.0
        one + 3 * 2.0**-11: one + 2.0**-9,  # a tie, to the even neighbour 1 + 2 ulp
        one + 2.0**-11 + 2.0**-20: one + 2.0**-10,  # just above the tie: up
        one + 2.0**-12: one,  # below the tie: down
        -(one + 2.0**-11 + 2.0**-20): -(one + 2.0**-10),
        float(np.finfo(np.float32).max): np.inf,  # rounds past the largest HF32 number
        2.0**-149: 0.0,  # the smallest subnormal rounds away
        3.0: 3.0,
    }
    x = np.array(list(cases), np.float32)
    np.testing.assert_array_equal(round_to_hf32(x), np.array(list(cases.values()), np.float32))
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], np.float32)
    got = round_to_hf32(special)
    assert np.isnan(got[0]) and list(got[1:]) == [np.inf, -np.inf, 0.0, 0.0]
    assert np.signbit(got[-1])


def test_round_to_hf32_agrees_with_an_independent_formulation(rng: np.random.Generator) -> None:
    x = (rng.standard_normal(10_000) * np.exp(rng.uniform(-20, 20, 10_000))).astype(np.float32)
    got = round_to_hf32(x)
    np.testing.assert_array_equal(got.astype(np.float64), hf32_by_frexp(x))
    assert not (got.view(np.uint32) & 0x1FFF).any()  # at most 10 explicit mantissa bits remain


def signed_halves(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """float32 values with |x| in [0.5, 1): fp16-rounded products then sum exactly in float64."""
    return (rng.uniform(0.5, 1, size=shape) * rng.choice([-1, 1], size=shape)).astype(np.float32)


@pytest.mark.parametrize("op", ["Matmul", "Mm", "BatchMatMul"])
def test_use_fp16_multiplies_fp16_rounded_inputs(op: str, rng: np.random.Generator) -> None:
    lead = (2,) if op == "BatchMatMul" else ()
    a, b = signed_halves(rng, (*lead, 6, 16)), signed_halves(rng, (*lead, 16, 5))
    got = ref(op, self=a, mat2=b, cubeMathType=2)["out"]
    ta, tb = torch.from_numpy(a).half().double(), torch.from_numpy(b).half().double()
    np.testing.assert_array_equal(got, torch.matmul(ta, tb).float().numpy())
    keep = ref(op, self=a, mat2=b, cubeMathType=0)["out"]
    assert not np.array_equal(got, keep), "USE_FP16 must change a float32 product"


@pytest.mark.parametrize("cube", [1, 3])
def test_hf32_modes_multiply_hf32_rounded_inputs(cube: int, rng: np.random.Generator) -> None:
    a, b = signed_halves(rng, (5, 12)), signed_halves(rng, (12, 4))
    got = ref("Matmul", self=a, mat2=b, cubeMathType=cube)["out"]
    want = (torch.from_numpy(hf32_by_frexp(a)) @ torch.from_numpy(hf32_by_frexp(b))).float().numpy()
    np.testing.assert_array_equal(got, want)
    assert not np.array_equal(got, ref("Matmul", self=a, mat2=b, cubeMathType=0)["out"])


def test_keep_dtype_and_fp32_add_keep_float32_inputs(rng: np.random.Generator) -> None:
    a, b = rand(rng, (4, 9)), rand(rng, (9, 3))
    keep = ref("Matmul", self=a, mat2=b, cubeMathType=0)["out"]
    np.testing.assert_array_equal(ref("Matmul", self=a, mat2=b, cubeMathType=4)["out"], keep)


@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=lambda d: np.dtype(d).name)
def test_reduced_precision_modes_leave_half_inputs_alone(dtype: type, rng: np.random.Generator) -> None:
    a, b = rand(rng, (4, 9), dtype), rand(rng, (9, 3), dtype)
    keep = ref("Mm", self=a, mat2=b, cubeMathType=0)["out"]
    for cube in (1, 4) if dtype is BF16 else (1, 2, 4):
        np.testing.assert_array_equal(ref("Mm", self=a, mat2=b, cubeMathType=cube)["out"], keep)


def test_batch_ops_accept_what_matmul_refuses(rng: np.random.Generator) -> None:
    a, b = rand(rng, (2, 3, 4), BF16), rand(rng, (2, 4, 5), BF16)
    keep = ref("BatchMatMul", self=a, mat2=b, cubeMathType=0)["out"]
    for cube in (2, 3):
        np.testing.assert_array_equal(ref("BatchMatMul", self=a, mat2=b, cubeMathType=cube)["out"], keep)
        assert code_of("Matmul", self=a, mat2=b, cubeMathType=cube) == 161002


def test_cube_math_type_has_no_effect_on_a_dot_product(rng: np.random.Generator) -> None:
    a, b = rand(rng, (33,)), rand(rng, (33,))
    keep = ref("Matmul", self=a, mat2=b, cubeMathType=0)["out"]
    for cube in (1, 2, 3):
        np.testing.assert_array_equal(ref("Matmul", self=a, mat2=b, cubeMathType=cube)["out"], keep)
    assert code_of("Matmul", self=a, mat2=b, cubeMathType=7) == 161002


def test_reduced_precision_does_not_touch_the_added_self(rng: np.random.Generator) -> None:
    s = np.full((2, 2), 1 + 2.0**-20, np.float32)  # not representable in fp16 or HF32
    zeros = np.zeros((2, 3), np.float32)
    for cube in (1, 2, 3):
        got = ref("Addmm", self=s, mat1=zeros, mat2=zeros.T.copy(), beta=1, alpha=1, cubeMathType=cube)["out"]
        np.testing.assert_array_equal(got, s)


def test_fp32_add_with_half_inputs_refuses_a_broadcast_self(rng: np.random.Generator) -> None:
    m1, m2 = rand(rng, (4, 6), np.float16), rand(rng, (6, 3), np.float16)
    assert code_of("Addmm", self=rand(rng, (3,), np.float16), mat1=m1, mat2=m2, beta=1, alpha=1, cubeMathType=4) == (
        161002
    )
    full = rand(rng, (4, 3), np.float16)
    got = ref("Addmm", self=full, mat1=m1, mat2=m2, beta=1, alpha=1, cubeMathType=4)["out"]
    assert_close(got, torch.addmm(torch.from_numpy(full), torch.from_numpy(m1), torch.from_numpy(m2)).numpy())


# ----------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    ("op", "kwargs", "needle"),
    [
        ("Matmul", {"self": (3, 4), "mat2": (5, 6)}, "inner dimensions"),
        ("Matmul", {"self": (2, 3, 4), "mat2": (3, 4, 5)}, "broadcast"),
        ("Matmul", {"self": (1,) * 6 + (2,), "mat2": (2, 2)}, "rank"),
        ("Mm", {"self": (2, 3, 4), "mat2": (4, 5)}, "rank"),
        ("Mm", {"self": (4,), "mat2": (4, 5)}, "rank"),
        ("BatchMatMul", {"self": (3, 4), "mat2": (4, 5)}, "rank"),
        ("BatchMatMul", {"self": (2, 3, 4), "mat2": (3, 4, 5)}, "broadcast"),
        ("BatchMatMul", {"self": (2, 3, 4), "mat2": (2, 5, 5)}, "inner dimensions"),
    ],
)
def test_shape_errors(op: str, kwargs: dict[str, tuple[int, ...]], needle: str, rng: np.random.Generator) -> None:
    with pytest.raises(AclnnError) as exc:
        ref(op, self=rand(rng, kwargs["self"]), mat2=rand(rng, kwargs["mat2"]), cubeMathType=0)
    assert exc.value.code == 161002
    assert needle in exc.value.message


def test_dtype_and_scalar_errors(rng: np.random.Generator) -> None:
    a, b = rand(rng, (3, 4), BF16), rand(rng, (4, 2), np.float16)
    assert code_of("Matmul", self=a, mat2=b, cubeMathType=0) == 161002
    assert code_of("Matmul", self=a, mat2=rand(rng, (4, 2)), cubeMathType=0) == 161002
    assert code_of("Mm", self=np.ones((2, 2), np.int32), mat2=np.ones((2, 2), np.int32), cubeMathType=0) == 161002
    s, m = rand(rng, (3, 3)), rand(rng, (3, 3))
    assert code_of("Addmm", self=s, mat1=m, mat2=m, beta=True, alpha=1, cubeMathType=0) == 161002
    ok = ref("Baddbmm", self=s, batch1=m[None], batch2=m[None], beta=True, alpha=1, cubeMathType=0)["out"]
    assert_close(ok, (s + m @ m)[None])
    wide_self = rand(rng, (2, 3, 3))
    assert code_of("Baddbmm", self=wide_self, batch1=m[None], batch2=m[None], beta=1, alpha=1, cubeMathType=0) == 161002
    empty = np.zeros((0, 3, 3), np.float32)
    assert code_of("Baddbmm", self=s, batch1=empty, batch2=empty, beta=1, alpha=1, cubeMathType=0) == 161002


def test_out_dtype_must_be_castable_and_matches_self_for_baddbmm(rng: np.random.Generator) -> None:
    a, b = rand(rng, (3, 4)), rand(rng, (4, 2))
    got = eager.run("Mm", "reference", self=a, mat2=b, cubeMathType=0, out_dtypes={"out": D.ACL_FLOAT16})["out"]
    assert got.dtype == np.float16
    s = rand(rng, (2, 3, 2))
    with pytest.raises(AclnnError) as exc:
        eager.run(
            "Baddbmm",
            "reference",
            self=s,
            batch1=rand(rng, (2, 3, 4)),
            batch2=rand(rng, (2, 4, 2)),
            beta=1,
            alpha=1,
            cubeMathType=0,
            out_dtypes={"out": D.ACL_FLOAT16},
        )
    assert exc.value.code == 161002


def test_inplace_baddbmm_refuses_batch_broadcast(rng: np.random.Generator) -> None:
    s = rand(rng, (2, 3, 5))
    b1, b2 = rand(rng, (1, 3, 4)), rand(rng, (2, 4, 5))
    assert code_of("InplaceBaddbmm", selfRef=s, batch1=b1, batch2=b2, beta=1, alpha=1, cubeMathType=0) == 161002
    assert_close(
        ref("Baddbmm", self=s, batch1=b1, batch2=b2, beta=1, alpha=1, cubeMathType=0)["out"],
        (torch.from_numpy(s) + torch.matmul(torch.from_numpy(b1), torch.from_numpy(b2))).numpy(),
    )


def test_out_overlapping_an_input_is_refused(rng: np.random.Generator) -> None:
    a = eager.to_device(rand(rng, (4, 4)), "reference")
    alias = AclTensor.create(a.shape, a.dtype, data=a.address)  # another handle on self's memory
    try:
        with pytest.raises(AclnnError) as exc:
            eager.run("Mm", "reference", self=a, mat2=rand(rng, (4, 4)), out=alias, cubeMathType=0)
        assert exc.value.code == 161002 and "overlaps" in exc.value.message
    finally:
        a.free()


@pytest.mark.parametrize("op", MATMUL_OPS)
def test_conformance_samples_run_and_error_samples_fail_as_declared(op: str) -> None:
    check_samples_and_errors(get_spec(op), 7)


# ----------------------------------------------------------------------------- GroupedMatmulV5
def gmm(**kwargs: object) -> list[np.ndarray]:
    """Run GroupedMatmulV5 with the defaults of a plain non-quantised call; return ``out``."""
    args: dict[str, object] = {"splitItem": 0, "groupType": -1, "groupListType": 0, "actType": 0, **kwargs}
    return ref("GroupedMatmulV5", **args)["out"]  # type: ignore[no-any-return]


def torch_groups(xs: list[np.ndarray], ws: list[np.ndarray], bs: list[np.ndarray] | None = None) -> list[np.ndarray]:
    """Per-group torch.matmul (+ bias), computed in float64."""
    out = []
    for i, (x, w) in enumerate(zip(xs, ws)):
        y = torch.matmul(torch.from_numpy(x.astype(np.float64)), torch.from_numpy(w.astype(np.float64)))
        if bs is not None:
            y = y + torch.from_numpy(bs[i].astype(np.float64))
        out.append(y.numpy())
    return out


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_gmm_independent_groups(dtype: type, rng: np.random.Generator) -> None:
    bias_dtype = np.float16 if dtype is np.float16 else np.float32
    xs = [rand(rng, (2, 3, 4), dtype), rand(rng, (2, 2, 6), dtype), rand(rng, (1, 0, 5), dtype)]
    ws = [rand(rng, (4, 2), dtype), rand(rng, (6, 7), dtype), rand(rng, (5, 3), dtype)]
    bs = [rand(rng, (2,), bias_dtype), rand(rng, (7,), bias_dtype), rand(rng, (3,), bias_dtype)]
    for got, want in zip(gmm(x=xs, weight=ws, biasOptional=bs, splitItem=1), torch_groups(xs, ws, bs)):
        assert got.dtype == np.dtype(dtype)
        assert_close(got, want)


@pytest.mark.parametrize("list_type", [0, 1])
def test_gmm_m_groups_with_a_3d_weight(list_type: int, rng: np.random.Generator) -> None:
    x, w, b = rand(rng, (11, 4)), rand(rng, (4, 4, 3)), rand(rng, (4, 3))
    sizes = [3, 0, 6, 2]
    group_list = np.cumsum(sizes) if list_type == 0 else np.array(sizes)
    got = gmm(
        x=[x],
        weight=[w],
        biasOptional=[b],
        groupListOptional=group_list.astype(np.int64),
        splitItem=3,
        groupType=0,
        groupListType=list_type,
    )[0]
    starts = np.cumsum([0, *sizes])
    parts = [x[s:e] for s, e in itertools.pairwise(starts)]
    want = np.concatenate(torch_groups(parts, list(w), list(b)))
    assert_close(got, want)


def test_gmm_m_groups_with_a_weight_list_and_an_x_list(rng: np.random.Generator) -> None:
    x = rand(rng, (7, 5), np.float16)
    ws = [rand(rng, (5, 2), np.float16) for _ in range(3)]
    got = gmm(x=[x], weight=ws, groupListOptional=np.array([2, 4, 7]), splitItem=2, groupType=0)[0]
    assert_close(got, np.concatenate(torch_groups([x[:2], x[2:4], x[4:]], ws)))
    xs = [rand(rng, (2, 5), BF16), rand(rng, (0, 5), BF16), rand(rng, (4, 5), BF16)]
    ws = [rand(rng, (5, 3), BF16) for _ in range(3)]
    bs = [rand(rng, (3,)) for _ in range(3)]
    want = np.concatenate(torch_groups(xs, ws, bs))
    assert_close(gmm(x=xs, weight=ws, biasOptional=bs, splitItem=2, groupType=0)[0], want)
    counts = np.array([2, 0, 4], np.int64)
    got = gmm(x=xs, weight=ws, biasOptional=bs, groupListOptional=counts, splitItem=2, groupType=0, groupListType=1)
    assert_close(got[0], want)


def test_gmm_rows_no_group_covers_are_left_untouched(rng: np.random.Generator) -> None:
    x, w = rand(rng, (6, 3)), rand(rng, (2, 3, 4))
    sentinel = np.full((6, 4), 42.0, np.float32)
    got = gmm(x=[x], weight=[w], groupListOptional=np.array([1, 4]), splitItem=2, groupType=0, out=[sentinel])[0]
    assert_close(got[:4], np.concatenate(torch_groups([x[:1], x[1:4]], list(w))))
    np.testing.assert_array_equal(got[4:], sentinel[4:])


def test_gmm_k_groups(rng: np.random.Generator) -> None:
    x, w = rand(rng, (3, 9)), rand(rng, (9, 2))
    got = gmm(x=[x], weight=[w], groupListOptional=np.array([4, 4, 9]), splitItem=2, groupType=2)[0]
    want = np.stack(torch_groups([x[:, :4], x[:, 4:4], x[:, 4:]], [w[:4], w[4:4], w[4:]]))
    assert got.shape == (3, 3, 2)
    assert_close(got, want)
    ws = [rand(rng, (5, 2)), rand(rng, (3, 4))]  # K sizes 5 + 3 = 8 of x's 9
    got_list = gmm(x=[x], weight=ws, groupType=2)
    for got_i, want_i in zip(got_list, torch_groups([x[:, :5], x[:, 5:8]], ws)):
        assert_close(got_i, want_i)


@pytest.mark.parametrize(
    ("group_list", "list_type", "needle"),
    [
        ([4, 2], 0, "decreases"),
        ([3, 7], 0, "covers 7"),
        ([3, -1], 1, "negative"),
        ([4, 3], 1, "covers 7"),
    ],
)
def test_gmm_group_list_values_are_checked_when_it_runs(
    group_list: list[int], list_type: int, needle: str, rng: np.random.Generator
) -> None:
    with pytest.raises(AclnnError) as exc:
        gmm(
            x=[rand(rng, (6, 3))],
            weight=[rand(rng, (2, 3, 4))],
            groupListOptional=np.array(group_list, np.int64),
            splitItem=2,
            groupType=0,
            groupListType=list_type,
        )
    assert exc.value.code == 161002 and needle in exc.value.message


def test_gmm_x_list_and_group_list_must_agree(rng: np.random.Generator) -> None:
    xs, ws = [rand(rng, (2, 3)), rand(rng, (3, 3))], [rand(rng, (3, 2)), rand(rng, (3, 2))]
    with pytest.raises(AclnnError) as exc:
        gmm(x=xs, weight=ws, groupListOptional=np.array([3, 5]), splitItem=2, groupType=0)
    assert exc.value.code == 161002 and "does not match" in exc.value.message


def test_gmm_refuses_unimplemented_paths_clearly(rng: np.random.Generator) -> None:
    base = {"x": [rand(rng, (4, 3))], "weight": [rand(rng, (3, 2))]}
    with pytest.raises(AclnnError) as exc:
        gmm(x=[np.ones((4, 3), np.int8)], weight=[np.ones((3, 2), np.int8)])
    assert exc.value.code == 161002 and "quantised" in exc.value.message
    with pytest.raises(AclnnError) as exc:
        gmm(**base, actType=5)
    assert exc.value.code == 161002 and "silu" in exc.value.message
    with pytest.raises(AclnnError) as exc:
        gmm(**base, perTokenScaleOptional=[np.ones(4, np.float32)])
    assert exc.value.code == 161002 and "quantised" in exc.value.message
    assert code_of("GroupedMatmulV5", **base, splitItem=0, groupType=1, groupListType=0, actType=0) == 161002


# ----------------------------------------------------------------------------- GroupedMatmulV5, MX mode
E4M3, E5M2, FP4 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.float4_e2m1fn


def mx_by_blocks(call: dict, sizes: list[int]) -> np.ndarray:
    """CANN's MX formula written out: per 32-wide K block, the block's partial product times both 2^(code-127)."""
    x, w = call["x"][0], call["weight"][0]
    token, scale = codes(call["perTokenScaleOptional"]), codes(call["scaleOptional"])
    m, k = x.shape
    y = np.zeros((m, w.shape[2]))
    start = 0
    for g, size in enumerate(sizes):
        rows = slice(start, start + size)
        for j in range(-(-k // 32)):
            ks = slice(32 * j, min(32 * j + 32, k))
            part = x[rows, ks].astype(np.float64) @ w[g, ks].astype(np.float64)
            tok = 2.0 ** (token[rows, j // 2, j % 2].astype(np.float64) - 127)
            wsc = 2.0 ** (scale[g, j // 2, :, j % 2].astype(np.float64) - 127)
            y[rows] += part * tok[:, None] * wsc[None, :]
        start += size
    return y


def mx_call(rng: np.random.Generator, x_dt: type, w_dt: type, m: int, k: int, n: int, sizes: list[int]) -> dict:
    kb = -(-k // 64)
    return {
        "x": [rng.uniform(-6, 6, (m, k)).astype(x_dt)],
        "weight": [rng.uniform(-6, 6, (len(sizes), k, n)).astype(w_dt)],
        "scaleOptional": [lowp.e8m0_array(rng.integers(120, 134, (len(sizes), kb, n, 2)))],
        "perTokenScaleOptional": [lowp.e8m0_array(rng.integers(120, 134, (m, kb, 2)))],
        "groupListOptional": np.array(sizes, np.int64),
        "splitItem": 2,
        "groupType": 0,
        "groupListType": 1,
    }


def codes(values: list[np.ndarray]) -> np.ndarray:
    """The E8M0 codes of a one-tensor scale list."""
    return values[0].view(np.uint8)


@pytest.mark.parametrize(
    ("x_dt", "w_dt", "k"), [(E4M3, E4M3, 96), (E5M2, E4M3, 64), (E4M3, E5M2, 200), (FP4, FP4, 128)]
)
def test_gmm_mx_is_the_block_scaled_product(x_dt: type, w_dt: type, k: int, rng: np.random.Generator) -> None:
    sizes = [3, 0, 5, 2]
    call = mx_call(rng, x_dt, w_dt, 10, k, 6, sizes)
    want = mx_by_blocks(call, sizes)
    got = gmm(**call, out=[np.zeros((10, 6), np.float32)])[0]
    np.testing.assert_allclose(got, want.astype(np.float32), rtol=1e-6)
    assert gmm(**call)[0].dtype == BF16  # bfloat16 is the default output


def test_gmm_mx_fp4_bias_is_added_per_group(rng: np.random.Generator) -> None:
    sizes = [2, 4]
    call = mx_call(rng, FP4, FP4, 6, 64, 4, sizes)
    bias = rng.standard_normal((2, 4)).astype(np.float32)
    got = gmm(**call, biasOptional=[bias], out=[np.zeros((6, 4), np.float32)])[0]
    want = mx_by_blocks(call, sizes)
    want[:2] += bias[0]
    want[2:] += bias[1]
    np.testing.assert_allclose(got, want.astype(np.float32), rtol=1e-6)


def test_gmm_mx_transposed_weight_takes_its_scales_n_major(rng: np.random.Generator) -> None:
    """A weight view [g, K, N] stored as [g, N, K] (CANN's transposed weight) has scales [g, N, ceil(K/64), 2]."""
    sizes = [3, 4]
    call = mx_call(rng, E4M3, E4M3, 7, 96, 5, sizes)
    w = call["weight"][0]
    stored = eager.to_device(np.ascontiguousarray(np.swapaxes(w, 1, 2)), "reference")  # [g, N, K]
    g, k, n = w.shape
    view = AclTensor((g, k, n), stored.dtype, (n * k, 1, k), 0, Format.ACL_FORMAT_ND, (g, n, k), stored.address)
    scale_nk = np.ascontiguousarray(np.swapaxes(call["scaleOptional"][0], 1, 2))  # [g, N, kb, 2]
    got = gmm(
        **{**call, "weight": AclTensorList.create([view]), "scaleOptional": [scale_nk]},
        out=[np.zeros((7, 5), np.float32)],
    )[0]
    want = mx_by_blocks(call, sizes)
    np.testing.assert_allclose(got, want.astype(np.float32), rtol=1e-6)
    with pytest.raises(AclnnError) as exc:  # the untransposed scale layout does not fit a transposed weight
        gmm(**{**call, "weight": AclTensorList.create([view])})
    assert exc.value.code == 161002 and "scaleOptional [2, 5, 2, 2]" in exc.value.message


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"scaleOptional": None}, "MX mode only"),
        ({"groupType": 2}, "groupType=0"),
        ({"groupListType": 2}, "groupListType=2"),
        ({"biasOptional": [np.zeros((2, 4), np.float32)]}, "bias must be null for FLOAT8"),
        ({"out": [np.zeros((6, 4), np.int8)]}, "not int8"),
        ({"perTokenScaleOptional": [lowp.e8m0_array(np.full((6, 2, 2), 127))]}, "perTokenScaleOptional [6, 1, 2]"),
    ],
)
def test_gmm_mx_refuses_what_it_does_not_implement(change: dict, needle: str, rng: np.random.Generator) -> None:
    call = {**mx_call(rng, E4M3, E4M3, 6, 64, 4, [2, 4]), **change}
    with pytest.raises(AclnnError) as exc:
        gmm(**call)
    assert exc.value.code == 161002 and needle in exc.value.message

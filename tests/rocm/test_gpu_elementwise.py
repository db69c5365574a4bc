"""Every elementwise op the rocm backend claims, run on the GPU and compared with the NumPy reference (GPU tier).

Cases come from the op specs' own samples (every dtype family, broadcasting, 0-d and empty tensors,
NaN/Inf), run contiguous and, for a subset, as padded (offset + gaps) and transposed views.
"""

from __future__ import annotations

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.dtypes import from_numpy
from acl_core.errors import AclnnError
from acl_core.spec.ops import all_specs, get_spec
from acl_rocm.ops.elementwise import OPS
from tests.conftest import assert_close
from tests.rocm.against_reference import compare_run, sample_dtypes

pytestmark = pytest.mark.gpu

ELEMENTWISE = sorted(n for n, s in all_specs().items() if s.family == "elementwise" and s.kernel_name in OPS)


@pytest.mark.parametrize("op", ELEMENTWISE)
def test_matches_reference(rocm: Backend, reference: Backend, op: str) -> None:
    spec = get_spec(op)
    assert spec.samples is not None, f"{op} has no samples"
    samples = list(spec.samples(np.random.default_rng(2024)))
    assert samples, f"{op} produced no samples"
    claimed = set(rocm.capabilities().dtypes)
    for i, sample in enumerate(samples):
        if not sample_dtypes(sample.args) <= claimed:  # a dtype the kernels lack is refused, never computed wrongly
            with pytest.raises(AclnnError) as err:
                eager.run(op, rocm, **sample.args)
            assert err.value.code == 161002, sample.note
            continue
        compare_run(rocm, reference, op, dict(sample.args), "contiguous", sample.note)
        if i % 3 == 0:
            for layout in ("padded", "transposed"):
                compare_run(rocm, reference, op, dict(sample.args), layout, sample.note)


def test_every_declared_elementwise_op_has_a_kernel(rocm: Backend) -> None:
    declared = {n for n, s in all_specs().items() if s.family == "elementwise"}
    missing = sorted(n for n in declared if get_spec(n).kernel_name not in rocm.kernels)
    assert missing == []
    assert set(ELEMENTWISE) <= set(rocm.capabilities().ops)


@pytest.mark.parametrize(
    ("dtype", "values"),
    [
        (np.float16, [65504.0, 65519.0, 65520.0, 6e-8, 2.98e-8, -0.0, np.nan, np.inf]),
        ("bfloat16", [3.3895314e38, 1.0039062, 1.0117188, -0.0, np.nan, -np.inf]),
    ],
)
def test_half_precision_casts_round_to_nearest_even(rocm: Backend, dtype: object, values: list[float]) -> None:
    x = np.array(values, np.float32)
    target = np.dtype(dtype)
    got = eager.run("Cast", rocm, self=x, dtype=int(_acl(target)))["out"]
    with np.errstate(all="ignore"):
        expected = x.astype(target)
    np.testing.assert_array_equal(got.view(np.uint16)[~np.isnan(x)], expected.view(np.uint16)[~np.isnan(x)])
    assert np.isnan(got.astype(np.float32)[np.isnan(x)]).all()


@pytest.mark.parametrize("mode", [1, 2])
def test_rounded_division_rounds_the_exact_quotient(rocm: Backend, mode: int) -> None:
    # a float32 quotient underflows to -0.0 (floor -1) or rounds onto an integer (16777217 / 1.0000001)
    tiny = np.float32(1e-45)
    self = np.array([-tiny, tiny, -1.0, 16777216.0, 7.0, -7.0, np.inf, -0.0], np.float32)
    other = np.array([3e38, -3e38, 3e38, 1.0000001, 0.1, 0.1, 2.0, 5.0], np.float32)
    got = eager.run("DivMod", rocm, self=self, other=other, mode=mode)["out"]
    q = self.astype(np.float64) / other.astype(np.float64)
    expected = (np.trunc(q) if mode == 1 else np.floor(q)).astype(np.float32)
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(expected))


def _acl(dtype: np.dtype) -> int:
    return int(from_numpy(dtype))


def test_large_broadcast_uses_64_bit_indices(rocm: Backend, reference: Backend) -> None:
    a = np.arange(3, dtype=np.int8).reshape(3, 1)
    b = np.ones((1, (1 << 31) // 3 + 7), dtype=np.int8)
    out = eager.run("Add", rocm, self=a, other=b, alpha=1)["out"]
    assert out.shape == (3, b.shape[1])
    np.testing.assert_array_equal(out[:, 0], [1, 2, 3])
    np.testing.assert_array_equal(out[:, -1], [1, 2, 3])
    assert int(out.astype(np.int64).sum()) == 6 * b.shape[1]


VECTOR_DTYPES = [np.float32, np.float16, np.dtype("bfloat16")]


def _vector_values(n: int, dtype: object, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * 4).astype(np.float32)
    x[:8] = [np.inf, -np.inf, np.nan, 0.0, -90.0, 90.0, -1e-3, 1e-3]
    return x.astype(dtype)


@pytest.mark.parametrize("dtype", VECTOR_DTYPES, ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("offset", [0, 1, 2, 4])
def test_vector_path_tail_and_misaligned_views(rocm: Backend, reference: Backend, dtype: object, offset: int) -> None:
    """Offsets 0/4 take whole 16- or 8-byte vectors, 1/2 narrower ones or the scalar path; n leaves a tail."""
    from tests.rocm.offset_views import empty_placed, placed

    n = (1 << 21) + 13  # more vectors than one grid trip covers, then a tail
    a, b = _vector_values(n, dtype, 1), _vector_values(n, dtype, 2)
    for op, extra in (("Add", {"alpha": 1.5}), ("Mul", {}), ("Silu", {})):
        inputs = {"self": a} if op == "Silu" else {"self": a, "other": b}
        expected = eager.run(op, reference, **inputs, **extra)["out"]
        on_device = {k: placed(rocm, v, offset) for k, v in inputs.items()}
        out = empty_placed(rocm, (n,), expected.dtype, offset)
        try:
            eager.run(op, rocm, **on_device, **extra, out=out)
            assert_close(out.numpy(), expected)
        finally:
            for arr in (*on_device.values(), out):
                arr.free()


def test_vector_path_with_a_broadcast_operand_and_mixed_widths(rocm: Backend, reference: Backend) -> None:
    n = 100_003
    a = _vector_values(n, np.float16, 3)
    for args in ({"self": a, "other": np.array([2.5], np.float16)}, {"self": np.float16(0.5), "other": a}):
        args = {k: np.asarray(v) for k, v in args.items()}
        assert_close(eager.run("Mul", rocm, **args)["out"], eager.run("Mul", reference, **args)["out"])
    x = _vector_values(n, np.float32, 4)
    for target in (D.ACL_FLOAT16, D.ACL_BF16):
        cast = {"self": x, "dtype": int(target)}
        assert_close(eager.run("Cast", rocm, **cast)["out"], eager.run("Cast", reference, **cast)["out"])
    for op in ("Sigmoid", "FastGelu"):
        assert_close(eager.run(op, rocm, self=a)["out"], eager.run(op, reference, self=a)["out"])

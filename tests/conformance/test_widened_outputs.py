"""A widened output's error is measured in the dtype its op computes in (the H200's Pow float64-out failure).

A float32 Pow written to a float64 ``out`` holds a float32 value (CANN computes in ``plan["compute"]``
and only widens), so rocm's powf, 1 float32 ulp from the reference, read 2^29 float64 ulps and
failed the 4-ulp class. The error is now measured in float32 ulps there, while an op whose
computation is float64 is still measured in float64 ulps: computing it in float32 fails.
"""

from __future__ import annotations

import numpy as np
import pytest

from acl_conformance import run
from acl_conformance.compare import compare_array, measured_dtype, worst_ulps
from acl_conformance.tolerances import lookup
from acl_core.backend import BackendRegistration
from acl_core.dtypes import DataType as D
from acl_core.spec import accuracy as A
from acl_reference.backend import ReferenceBackend
from acl_reference.call import RefCall
from tests.conformance.planted import compute_when, register_planted

POW = ("PowTensorTensor", "PowTensorScalar", "PowScalarTensor")


def _up(x: np.ndarray, n: int) -> np.ndarray:
    for _ in range(n):
        x = np.nextafter(x, np.asarray(np.inf, x.dtype))
    return x


def _pow_in_float32(k: RefCall, ulps: int, when: D) -> bool:
    """Pow computed in float32 and moved ``ulps`` float32 ulps up, where ``plan["compute"]`` is ``when``."""
    if k.plan["compute"] != when:
        return False
    name = k.launch.spec.name
    base = np.float32(k.value("self")) if name == "PowScalarTensor" else k.read("self").astype(np.float32)
    exponent = np.float32(k.value("exponent")) if name == "PowTensorScalar" else k.read("exponent").astype(np.float32)
    with np.errstate(all="ignore"):
        exact = np.asarray(np.power(base, exponent))
        # the special values (0, Inf, NaN, the largest finite value) stay exact, as powf keeps them
        ordinary = np.isfinite(exact) & (exact != 0) & (np.abs(exact) < np.finfo(np.float32).max / 2)
        k.write("out", np.where(ordinary, _up(exact, ulps), exact))
    return True


class Powf2Ulp(ReferenceBackend):
    """float32 Pow 2 float32 ulps off (a GPU powf within its bound), widened into a float64 out as CANN does."""

    name = "powf-2ulp"

    def __init__(self) -> None:
        super().__init__()
        for op in POW:
            compute_when(self, op, lambda k: _pow_in_float32(k, 2, D.ACL_FLOAT))


class Powf6Ulp(ReferenceBackend):
    """float32 Pow 6 float32 ulps off: past the 4-ulp class, in float32 and float64 outputs alike."""

    name = "powf-6ulp"

    def __init__(self) -> None:
        super().__init__()
        for op in POW:
            compute_when(self, op, lambda k: _pow_in_float32(k, 6, D.ACL_FLOAT))


class Float64PowInFloat32(ReferenceBackend):
    """A float64 Pow (compute float64) computed in float32: exact to float32, wrong for float64."""

    name = "pow64-in-float32"

    def __init__(self) -> None:
        super().__init__()
        for op in POW:
            compute_when(self, op, lambda k: _pow_in_float32(k, 0, D.ACL_DOUBLE))


BACKENDS = (Powf2Ulp, Powf6Ulp, Float64PowInFloat32)


@pytest.fixture(scope="module", autouse=True)
def _registered() -> None:
    registrations = [BackendRegistration(name=b.name, factory=b, summary=b.__doc__ or b.name) for b in BACKENDS]
    register_planted("widened-pow", registrations)


def _failed(backend: str, seed: int) -> list[str]:
    report = run(backend, ops=",".join(POW), seed=seed)
    return [f"{o.op}[{o.case}]" for o in report.failed]


@pytest.mark.parametrize("seed", [0, 1])
def test_a_float32_pow_within_its_bound_passes_into_a_float64_out(seed: int) -> None:
    assert _failed(Powf2Ulp.name, seed) == []


@pytest.mark.parametrize("seed", [0, 1])
def test_a_float32_pow_past_its_bound_fails_into_a_float64_out_too(seed: int) -> None:
    failed = _failed(Powf6Ulp.name, seed)
    assert any("float64 out" in f for f in failed), failed
    assert any("float64 out" not in f for f in failed), failed


@pytest.mark.parametrize("seed", [0, 1])
def test_a_float64_pow_computed_in_float32_fails(seed: int) -> None:
    failed = _failed(Float64PowInFloat32.name, seed)
    assert failed and all("float64" in f for f in failed), failed


def test_measured_dtype_is_the_narrower_computation_dtype_only() -> None:
    assert measured_dtype(D.ACL_DOUBLE, D.ACL_FLOAT) == D.ACL_FLOAT
    assert measured_dtype(D.ACL_FLOAT, D.ACL_FLOAT16) == D.ACL_FLOAT16
    assert measured_dtype(D.ACL_DOUBLE, D.ACL_DOUBLE) == D.ACL_DOUBLE
    assert measured_dtype(D.ACL_FLOAT16, D.ACL_FLOAT) == D.ACL_FLOAT16  # a narrower output: its own ulps
    assert measured_dtype(D.ACL_COMPLEX128, D.ACL_FLOAT) == D.ACL_COMPLEX128  # real compute, complex out
    assert measured_dtype(D.ACL_COMPLEX128, D.ACL_COMPLEX64) == D.ACL_COMPLEX64
    assert measured_dtype(D.ACL_DOUBLE, None) == D.ACL_DOUBLE


def test_compare_measures_a_widened_float32_result_in_float32_ulps() -> None:
    e32 = np.array([1.2894895, -0.2079065, 3e-3, 7.5], np.float32)
    expected = e32.astype(np.float64)
    actual = _up(e32, 1).astype(np.float64)  # 1 float32 ulp: 2^29 float64 ulps
    bound = lambda dtype: lookup("Pow", dtype, "b", accuracy=A.ulp(4))
    m = compare_array("out", actual, expected, bound)
    assert m is not None and m.detail["max_ulp_error"] == 2**29
    assert compare_array("out", actual, expected, bound, compute=D.ACL_FLOAT) is None
    assert worst_ulps({"out": actual}, {"out": expected}, D.ACL_FLOAT) == {"out": 1}
    far = _up(e32, 5).astype(np.float64)
    m = compare_array("out", far, expected, bound, compute=D.ACL_FLOAT)
    assert m is not None and m.detail["max_ulp_error"] == 5 and m.detail["measured_in"] == "float32"
    assert "measured in float32 ulps" in m.message
    # a float64 computation keeps float64 ulps: the float32-rounded result fails
    x = np.random.default_rng(0).uniform(0.5, 2.0, 32)
    m = compare_array(
        "out", (x.astype(np.float32) ** np.float32(1.5)).astype(np.float64), x**1.5, bound, None, D.ACL_DOUBLE
    )
    assert m is not None and m.detail["measured_in"] == "float64"


def test_an_exact_op_must_still_widen_its_float32_result_bit_for_bit() -> None:
    # float32 Mul into a float64 out, computed in float64: half a float32 ulp off at most, still not 0
    rng = np.random.default_rng(1)
    x, y = rng.uniform(-4, 4, 64).astype(np.float32), rng.uniform(-4, 4, 64).astype(np.float32)
    expected = (x * y).astype(np.float64)
    exact = lambda dtype: lookup("Mul", dtype, "b", accuracy=A.EXACT)
    assert compare_array("out", expected.copy(), expected, exact, compute=D.ACL_FLOAT) is None
    wide = x.astype(np.float64) * y.astype(np.float64)
    m = compare_array("out", wide, expected, exact, compute=D.ACL_FLOAT)
    assert m is not None and m.detail["max_ulp_error"] == 1 and m.detail["measured_in"] == "float32"

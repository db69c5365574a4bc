"""GELU's erf form is accurate for negative x: the reference's float64 and rocm's float formula (a NumPy model).

``0.5·x·(1 + erf(x/√2))`` cancels for x < 0: in float32 it is hundreds of ulps off by x = -4 and
0 (not a tiny negative number) past x ≈ -5.8. ``0.5·x·erfc(-x/√2)`` does not cancel; the checks
measure both against mpmath at 60 digits.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

from acl_conformance.compare import ulp_distance
from acl_core.dtypes import DataType as D
from acl_core.spec.accuracy import accuracy_of
from acl_core.spec.ops import get_spec
from acl_reference.kernels.elementwise import gelu_erf

mpmath.mp.dps = 60


def _true(x: np.ndarray, dtype: type) -> np.ndarray:
    """GELU of each (exactly represented) x, correctly rounded to ``dtype``."""
    exact = [mpmath.mpf(float(v)) / 2 * mpmath.erfc(-mpmath.mpf(float(v)) / mpmath.sqrt(2)) for v in x]
    return np.array([float(e) for e in exact], np.float64).astype(dtype)


def _rocm_float_model(x: np.ndarray) -> np.ndarray:
    """acl_gelu_erf(float) of the rocm prelude: x widened to double, 0.5·d·erfc(-d/√2), rounded once."""
    d = x.astype(np.float64)
    r = np.array([math.erfc(v * -0.70710678118654752440) for v in d])
    return (0.5 * d * r).astype(np.float32)


def _old_float_formula(x: np.ndarray) -> np.ndarray:
    """rocm's former body in float32, 0.5f·x·(1 + erff(x·(1/√2)f)), with erff correctly rounded."""
    z = (x * np.float32(0.70710678118654752440)).astype(np.float32)
    erf = np.array([math.erf(float(v)) for v in z]).astype(np.float32)
    return (np.float32(0.5) * x * (np.float32(1) + erf)).astype(np.float32)


_X32 = np.linspace(-14.0, 8.0, 3001).astype(np.float32)


def test_the_old_float_formula_cancels_for_negative_x() -> None:
    worst = int(ulp_distance(_old_float_formula(_X32), _true(_X32, np.float32)).max())
    assert worst > 1000  # the defect the erfc form removes


def test_rocm_float_formula_is_within_its_class() -> None:
    accuracy = accuracy_of(get_spec("Gelu"))
    assert accuracy is not None and accuracy.kind == "ulp"
    bound = accuracy.bound_ulps(D.ACL_FLOAT)
    worst = int(ulp_distance(_rocm_float_model(_X32), _true(_X32, np.float32)).max())
    assert worst <= bound, worst


@pytest.mark.parametrize("low, high", [(-37.0, -20.0), (-20.0, -1.0), (-1.0, 8.0)])
def test_the_reference_is_within_a_few_float64_ulps(low: float, high: float) -> None:
    x = np.linspace(low, high, 997)
    worst = int(ulp_distance(gelu_erf(x), _true(x, np.float64)).max())
    assert worst <= 4, worst  # math.erfc's own error; without the t_lo correction it is hundreds


def test_the_reference_keeps_the_limits() -> None:
    y = gelu_erf(np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e308, -1e308]))
    assert y[0] == np.inf and np.isnan(y[1]) and np.isnan(y[2])  # -inf·erfc(inf) = -inf·0, as before
    assert y[3] == 0 and y[5] == 1e308 and y[6] == 0


def test_importing_one_kernel_module_first_leaves_every_kernel_registered() -> None:
    from acl_reference.kernels import all_kernels

    assert {"Gelu", "Softmax", "RmsNorm", "Matmul"} <= set(all_kernels())

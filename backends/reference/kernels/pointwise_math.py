"""Reference kernels of the pointwise math ops (acl_core.spec.ops.pointwise_math), computed in float64.

Every formula is NumPy's float64 function (or math.erf/erfc elementwise), the result rounded once to
the computation type by the family's wide-compute rule; integer and bool inputs are first cast to the
float32 output, as CANN casts them.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from acl_core.dtypes import DataType
from acl_core.spec.ops.pointwise_math import MISC as MISC_ROWS
from acl_core.spec.ops.pointwise_math import TRANSCENDENTAL
from acl_core.spec.opspec import Kind
from acl_reference.call import RefCall
from acl_reference.kernels.elementwise import _float_in, erf, kernel
from acl_reference.tensor_io import wide

Array = np.ndarray

_erfc_u = np.frompyfunc(math.erfc, 1, 1)


def erfc(x: Array) -> Array:
    """Elementwise erfc in float64 (math.erfc keeps its relative accuracy in the tail)."""
    return np.asarray(_erfc_u(np.asarray(x, dtype=np.float64)), dtype=np.float64)


WINITZKI_A = 0.147
"""The constant of Winitzki's closed-form erfinv approximation (relative error below 2e-3)."""
TWO_OVER_SQRT_PI = 1.1283791670955126


def erfinv(x: Array) -> Array:
    """Inverse error function in float64: Winitzki's approximation, then three Halley steps.

    Halley's step for f(y) = erf(y) - a is y -= f / (f' + y·f) with f' = 2/√π·e^(-y²); for a ≥ 1/2,
    f is evaluated as (1 - a) - erfc(y) (1 - a is exact there), which keeps it accurate near |x| = 1.
    """
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    with np.errstate(all="ignore"):
        lg = np.log((1.0 - a) * (1.0 + a))
        t = 2.0 / (math.pi * WINITZKI_A) + 0.5 * lg
        y = np.sqrt(np.sqrt(t * t - lg / WINITZKI_A) - t)
        inside = a < 1.0
        for _ in range(3):
            f = np.where(a < 0.5, erf(y) - a, (1.0 - a) - erfc(y))
            step = f / (TWO_OVER_SQRT_PI * np.exp(-y * y) + y * f)
            y = np.where(inside, y - step, y)
    return np.copysign(y, x)


def sinc(x: Array) -> Array:
    """sin(πx)/(πx), sinc(0) = 1, with sin(π|x|) reduced exactly: |x| mod 2, then folded into [0, 1/2]."""
    a = np.abs(np.asarray(x, dtype=np.float64))
    with np.errstate(all="ignore"):
        r = np.fmod(a, 2.0)
        flip = r >= 1.0
        r = np.where(flip, r - 1.0, r)
        r = np.where(r > 0.5, 1.0 - r, r)
        s = np.where(flip, -1.0, 1.0) * np.sin(math.pi * r) + 0.0  # sinc of a whole number is +0
        return np.where(a == 0.0, 1.0, s / (math.pi * a))


UNARY: dict[str, Callable[[Array], Array]] = {
    "Tan": np.tan,
    "Asin": np.arcsin,
    "Acos": np.arccos,
    "Atan": np.arctan,
    "Sinh": np.sinh,
    "Cosh": np.cosh,
    "Asinh": np.arcsinh,
    "Acosh": np.arccosh,
    "Atanh": np.arctanh,
    "Erfc": erfc,
    "Erfinv": erfinv,
    "Exp2": np.exp2,
    "Expm1": np.expm1,
    "Log10": np.log10,
    "Log1p": np.log1p,
    "Log2": np.log2,
    "Sinc": sinc,
}
"""Group 1's float64 function of each unary op."""


def _transcendental(k: RefCall) -> None:
    (p,) = k.launch.spec.inputs
    (o,) = k.launch.spec.outputs
    x = _float_in(k, p.name)
    with np.errstate(all="ignore"):
        k.write(o.name, UNARY[k.launch.spec.name](x))


for _row in TRANSCENDENTAL:
    kernel(_row.name)(_transcendental)


@kernel("Atan2")
def atan2(k: RefCall) -> None:
    """atan2(self, other) in float64 (integers and bool cast to float32 first)."""
    a, b = _float_in(k, "self"), _float_in(k, "other")
    k.write("out", np.arctan2(a, b))


# ----------------------------------------------------------------------------- group 2
def _attr(k: RefCall, name: str) -> float:
    """A float attribute as the kernel reads it: a C ``float`` always, a ``double`` rounded to float32 unless
    the call computes in float64 (the compute type of every narrower dtype)."""
    value = float(k.value(name))
    single = k.launch.spec.param(name).c_type == "float" or k.plan["compute"] != DataType.ACL_DOUBLE
    return float(np.float32(value)) if single else value


def _round_decimals(x: Array, decimals: int) -> Array:
    """Half-to-even rounding to ``decimals`` places: the power of ten built by exact multiplications."""
    p = 1.0
    for _ in range(min(abs(decimals), 400)):
        p *= 10.0
    return np.rint(x * p) / p if decimals >= 0 else np.rint(x / p) * p


def _isclose(a: Array, b: Array, rtol: float, atol: float, equal_nan: bool) -> Array:
    with np.errstate(all="ignore"):
        close = np.abs(a - b) <= atol + rtol * np.abs(b)
    finite = np.isfinite(a) & np.isfinite(b)
    both_nan = np.isnan(a) & np.isnan(b)
    return (a == b) | (finite & close) | (both_nan & equal_nan)


def _logaddexp(base: float) -> Callable[[Array, Array], Array]:
    def fn(a: Array, b: Array) -> Array:
        m = np.maximum(a, b)
        with np.errstate(all="ignore"):
            r = m + np.log1p(base ** -np.abs(a - b)) / math.log(base)
        return np.where((a == b) & np.isinf(a), a, r)

    return fn


def _logit(x: Array, eps: float) -> Array:
    c = x if eps < 0 else np.where(x < eps, eps, np.where(x > 1.0 - eps, 1.0 - eps, x))
    with np.errstate(all="ignore"):
        return np.log(c / (1.0 - c))


def _logit_grad(x: Array, dy: Array, eps: float) -> Array:
    """torch's logit_backward: NaN outside [0, 1] (eps < 0), else 0 outside [eps, 1 - eps]."""
    with np.errstate(all="ignore"):
        grad = dy / (x * (1.0 - x))
        if eps < 0:
            return np.where((x < 0.0) | (x > 1.0), np.nan, grad)
        return np.where((x < eps) | (x > 1.0 - eps), 0.0, grad)


def _nan_to_num(k: RefCall, x: Array) -> Array:
    nan, pos, neg = (_attr(k, n) for n in ("nan", "posinf", "neginf"))
    return np.where(np.isnan(x), nan, np.where(x == np.inf, pos, np.where(x == -np.inf, neg, x)))


MISC: dict[str, Callable[[RefCall, list[Array]], Array]] = {
    "Frac": lambda k, v: v[0] - np.trunc(v[0]),
    "Trunc": lambda k, v: np.trunc(v[0]) if v[0].dtype.kind == "f" else v[0],
    "Signbit": lambda k, v: np.signbit(v[0]),
    "Square": lambda k, v: v[0] * v[0],
    "IsFinite": lambda k, v: np.isfinite(v[0]),
    "IsPosInf": lambda k, v: v[0] == np.inf,
    "IsNegInf": lambda k, v: v[0] == -np.inf,
    "IsClose": lambda k, v: _isclose(
        v[0].astype(np.float64), v[1].astype(np.float64), _attr(k, "rtol"), _attr(k, "atol"), k.value("equalNan")
    ),
    "NanToNum": lambda k, v: _nan_to_num(k, v[0]),
    "Logit": lambda k, v: _logit(v[0], _attr(k, "eps")),
    "LogitGrad": lambda k, v: _logit_grad(v[0], v[1], _attr(k, "eps")),
    "LogAddExp": lambda k, v: _logaddexp(math.e)(v[0], v[1]),
    "LogAddExp2": lambda k, v: _logaddexp(2.0)(v[0], v[1]),
    "RoundDecimals": lambda k, v: _round_decimals(v[0], int(k.value("decimals"))),
}
"""Group 2's function of each op over its wide inputs (float64 for floats, int64 for integers)."""
_FLOAT_VALUED = frozenset({"Logit"})
"""Ops whose integer inputs are first cast to the float32 result."""


def _misc(k: RefCall) -> None:
    spec = k.launch.spec
    names = [p.name for p in spec.inputs if p.kind is Kind.TENSOR]
    if spec.name in _FLOAT_VALUED:
        values = [_float_in(k, n) for n in names]
    else:
        values = [k.read(n, wide(k.plan["compute"])) for n in names]
    with np.errstate(all="ignore"):
        k.write(spec.outputs[0].name, MISC[spec.name](k, values))


for _misc_row in MISC_ROWS:
    kernel(_misc_row.name)(_misc)

"""Elementwise bodies of the pointwise math ops (acl_core.spec.ops.pointwise_math).

Rows of (name, signature, body) in the ufunc language of :mod:`acl_rocm.kernels.elementwise` (kept
free of imports so that module can include them). float32 and narrower evaluate in double and round
once (x is exact in double, the double libm is within a few double ulps); float64 calls the double
function directly. Erfinv is the exception: its class is CUDA's erfinvf bound, so float compute calls that.
"""

from __future__ import annotations

from typing import Final

# sin(pi*|x|) / (pi*|x|): |x| mod 2 is exact, folding into [0, 1/2] keeps sin's argument small
_SINC = (
    "const double a = fabs((double)self); double q = fmod(a, 2.0); double s = 1.0; "
    "if (q >= 1.0) { q -= 1.0; s = -1.0; } if (q > 0.5) q = 1.0 - q; "
    "r = a == 0.0 ? 1.0 : (s * sin(3.14159265358979323846 * q) + 0.0) / (3.14159265358979323846 * a);"
)


def _unary(name: str, x: str, fn: str) -> tuple[str, str, str]:
    return (name, f"{x}:F -> out:F", f"r = {fn}((double){x});")


_MAX = "1.7976931348623157e308"
_NAN_TO_NUM = (
    f"const double x = self; r = x != x ? (double)(float)nan : (x > {_MAX} ? (double)(float)posinf "
    f": (x < -{_MAX} ? (double)(float)neginf : x));"
)
_ISCLOSE = (
    "const double a = self, b = other; "
    "if (a == b) r = true; else if (a != a || b != b) r = equalNan && a != a && b != b; "
    f"else if (fabs(a) > {_MAX} || fabs(b) > {_MAX}) r = false; "
    "else r = fabs(a - b) <= (double)atol + (double)rtol * fabs(b);"
)
_LOGIT = (
    "const double x = input, e = eps; const double c = e < 0.0 ? x : (x < e ? e : (x > 1.0 - e ? 1.0 - e : x)); "
    "r = log(c / (1.0 - c));"
)
_LOGIT_GRAD = (
    "const double a = x, g = dy, e = eps; const double q = g / (a * (1.0 - a)); "
    # 0 / (a - a): a NaN built at run time (a is finite or infinite on that branch), no NaN helper needed
    "r = e < 0.0 ? ((a < 0.0 || a > 1.0) ? 0.0 / (a - a) : q) : ((a < e || a > 1.0 - e) ? 0.0 : q);"
)
# the power of ten by exact multiplications (10^k is exact in double up to k = 22), as the reference builds it
_ROUND_DECIMALS = (
    "const double x = self; double p = 1.0; const long long n = decimals < 0 ? -decimals : decimals; "
    "for (long long k = 0; k < n && k < 400; ++k) p *= 10.0; "
    "r = decimals >= 0 ? rint(x * p) / p : rint(x / p) * p;"
)


def _logaddexp(exp: str, scale: str) -> str:
    return (
        "const double a = self, b = other; const double m = a > b ? a : b; "
        f"r = (a == b && fabs(a) > {_MAX}) ? a : m + log1p({exp}(-fabs(a - b))){scale};"
    )


ROWS: Final[tuple[tuple[str, str, str], ...]] = (
    _unary("Tan", "self", "tan"),
    _unary("Asin", "self", "asin"),
    _unary("Acos", "input", "acos"),
    _unary("Atan", "input", "atan"),
    _unary("Sinh", "self", "sinh"),
    _unary("Cosh", "self", "cosh"),
    _unary("Asinh", "input", "asinh"),
    _unary("Acosh", "self", "acosh"),
    _unary("Atanh", "input", "atanh"),
    _unary("Erfc", "self", "erfc"),
    # float (and fp16/bf16) compute calls erfinvf, within CUDA's 2 float ulps (the op's class): the double
    # erfinv ran at a quarter of the bandwidth bound (issue 16)
    ("Erfinv", "self:F -> out:F", "r = acl_erfinv(self);"),
    _unary("Exp2", "self", "exp2"),
    _unary("Expm1", "self", "expm1"),
    _unary("Log10", "self", "log10"),
    _unary("Log1p", "self", "log1p"),
    _unary("Log2", "self", "log2"),
    ("Sinc", "self:F -> out:F", _SINC),
    ("Atan2", "self:F, other:F -> out:F", "r = atan2((double)self, (double)other);"),
    ("Frac", "input:T -> out:T", "r = (double)input - trunc((double)input);"),
    ("Trunc", "self:T -> out:T", "self >= T(0) ? acl_floor(self) : acl_ceil(self)"),
    ("Signbit", "self:F -> out:B", "copysign(1.0, (double)self) < 0.0"),
    ("Square", "self:T -> out:T", "self * self"),
    ("IsFinite", "self:F -> out:B", f"(double)self == (double)self && fabs((double)self) <= {_MAX}"),
    ("IsPosInf", "self:F -> out:B", f"(double)self > {_MAX}"),
    ("IsNegInf", "self:F -> out:B", f"(double)self < -{_MAX}"),
    ("IsClose", "self:T, other:T, rtol:F, atol:F -> out:B", _ISCLOSE),
    ("NanToNum", "self:T, nan:T, posinf:T, neginf:T -> out:T", _NAN_TO_NUM),
    ("Logit", "input:F, eps:F -> out:F", _LOGIT),
    ("LogitGrad", "x:F, dy:F, eps:F -> out:F", _LOGIT_GRAD),
    ("LogAddExp", "self:T, other:T -> out:T", _logaddexp("exp", "")),
    ("LogAddExp2", "self:T, other:T -> out:T", _logaddexp("exp2", " / 0.69314718055994530942")),
    ("RoundDecimals", "self:T -> out:T", _ROUND_DECIMALS),
)
"""(aclnn name, signature, body) of every pointwise math op with a HIP kernel."""

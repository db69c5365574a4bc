"""Elementwise bodies of the activations and their backward ops (acl_core.spec.ops.activation).

Rows of (name, signature, body) in the ufunc language of :mod:`acl_rocm.kernels.elementwise` (which
turns them into kernels; kept free of imports so that module can include them). Every body evaluates
in double — x and the scalars are exact there — and rounds once to the compute type, as the
reference does in float64: the +, −, ×, ÷ and comparison bodies then agree with it bit for bit, the
libm ones within a float32 ulp.
"""

from __future__ import annotations

from typing import Final

_X = "const double x = self; "
_GX = "const double g = gradOutput, x = self; "
_HARD = "const double c = x + 3.0 < 0.0 ? 0.0 : (x + 3.0 > 6.0 ? 6.0 : x + 3.0); "
_SELU_ALPHA = "1.6732632423543772848170429916717"
_SELU_SCALE = "1.0507009873554804934193349852946"
_SIG = "self:T -> out:T"
_GRAD = "gradOutput:T, self:T -> gradInput:T"

ROWS: Final[tuple[tuple[str, str, str], ...]] = (
    (
        "Elu",
        "self:T, alpha:T, scale:T, inputScale:T -> out:T",
        _X + "r = x > 0.0 ? x * (double)scale : expm1(x * (double)inputScale) * (double)alpha * (double)scale;",
    ),
    ("Celu", "self:T, alpha:T -> out:T", _X + "r = x > 0.0 ? x : (double)alpha * expm1(x / (double)alpha);"),
    ("Selu", _SIG, _X + f"r = x > 0.0 ? {_SELU_SCALE} * x : {_SELU_SCALE} * ({_SELU_ALPHA} * expm1(x));"),
    ("Hardswish", _SIG, _X + _HARD + "r = x * c / 6.0;"),
    ("Hardsigmoid", _SIG, _X + _HARD + "r = c / 6.0;"),
    (
        "Hardtanh",
        "self:T, clipValueMin:T, clipValueMax:T -> out:T",
        _X
        + "const double lo = clipValueMin, hi = clipValueMax; const double m = x < lo ? lo : x; r = m > hi ? hi : m;",
    ),
    ("Hardshrink", "self:T, lambd:T -> out:T", _X + "const double l = lambd; r = (x >= -l && x <= l) ? 0.0 : x;"),
    (
        "Softshrink",
        "self:T, lambd:T -> out:T",
        _X + "const double l = lambd; r = x > l ? x - l : (x < -l ? x + l : (x != x ? x : 0.0));",
    ),
    (
        "Softplus",
        "self:T, beta:T, threshold:T -> out:T",
        _X + "const double b = beta; r = x * b > (double)threshold ? x : log1p(exp(x * b)) / b;",
    ),
    ("Softsign", _SIG, _X + "r = x / (1.0 + fabs(x));"),
    ("LeakyRelu", "self:T, negativeSlope:T -> out:T", _X + "r = x > 0.0 ? x : x * (double)negativeSlope;"),
    # tanh(log1p(e^x)) = n / (n + 2) with n = e^x (e^x + 2): one exp instead of three libm calls; past
    # x = 20 the ratio is 1 in double (and e^2x would overflow)
    ("Mish", _SIG, _X + "const double e = exp(x), n = e * (e + 2.0); r = x > 20.0 ? x : x * (n / (n + 2.0));"),
    ("LogSigmoid", _SIG, _X + "r = (x < 0.0 ? x : 0.0) - log1p(exp(-fabs(x)));"),
    (
        "Threshold",
        "self:T, threshold:T, value:T -> out:T",
        _X + "r = x <= (double)threshold ? (double)value : x;",
    ),
    (
        "Swish",
        "self:T, betaOptional:T -> out:T",
        _X + "const double b = has_betaOptional ? (double)betaOptional : 1.0; r = x / (1.0 + exp(-b * x));",
    ),
    (
        "SigmoidBackward",
        "gradOutput:T, output:T -> gradInput:T",
        "const double g = gradOutput, y = output; r = g * y * (1.0 - y);",
    ),
    (
        "TanhBackward",
        "gradOutput:T, output:T -> gradInput:T",
        "const double g = gradOutput, y = output; r = g * (1.0 - y * y);",
    ),
    ("SiluBackward", _GRAD, _GX + "const double s = 1.0 / (1.0 + exp(-x)); r = g * s * (1.0 + x * (1.0 - s));"),
    (
        "GeluBackward",
        _GRAD,
        _GX + "r = g * (0.5 * erfc(-x * 0.70710678118654752440) + x * (exp(-0.5 * x * x) * 0.39894228040143267794));",
    ),
    (
        "GeluBackwardV2",
        _GRAD,
        _GX + "r = g * (0.5 * erfc(-x * 0.70710678118654752440) + x * (exp(-0.5 * x * x) * 0.39894228040143267794));",
    ),
    (
        "GeluBackwardV2Tanh",  # approximate "tanh": picked by the op's runner
        _GRAD,
        _GX + "const double b = 0.79788456080286535588, k = 0.044715; const double t = tanh(b * (x + k * x * x * x)); "
        "r = g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * b * (1.0 + 3.0 * k * x * x));",
    ),
    (
        "LogSigmoidBackward",  # buffer is not read (CANN's page: not used yet)
        _GRAD,
        _GX + "const double z = exp(-fabs(x)); r = g * (x < 0.0 ? 1.0 / (1.0 + z) : z / (1.0 + z));",
    ),
    (
        "FastGeluBackward",
        _GRAD,
        _GX + "const double s = 1.0 / (1.0 + exp(-1.702 * x)); r = g * (s + 1.702 * x * s * (1.0 - s));",
    ),
    (
        "SwishBackward",
        "gradOutput:T, self:T, betaOptional:T -> gradInput:T",
        _GX + "const double b = has_betaOptional ? (double)betaOptional : 1.0; "
        "const double s = 1.0 / (1.0 + exp(-b * x)); r = g * (s + b * x * s * (1.0 - s));",
    ),
    (
        "EluBackward",
        "gradOutput:T, alpha:T, scale:T, inputScale:T, selfOrResult:T -> gradInput:T",
        "const double g = gradOutput, x = selfOrResult, a = alpha, sc = scale, is = inputScale; "
        "if (isResult) r = x <= 0.0 ? g * is * (x + a * sc) : g * sc; "
        "else r = x <= 0.0 ? g * is * a * sc * exp(x * is) : g * sc;",
    ),
    (
        "SeluBackward",
        "gradOutput:T, result:T -> gradInput:T",
        f"const double g = gradOutput, y = result; r = y <= 0.0 ? g * (y + {_SELU_ALPHA} * {_SELU_SCALE}) "
        f": g * {_SELU_SCALE};",
    ),
    # V2's page gives the branches V1 already follows here (acl_core.spec.ops.activation.SAME_FORMULA)
    *(
        (name, "gradOutput:T, self:T -> out:T", _GX + "r = x <= -3.0 ? 0.0 : (x < 3.0 ? g * (x / 3.0 + 0.5) : g);")
        for name in ("HardswishBackward", "HardswishBackwardV2")
    ),
    ("HardsigmoidBackward", "gradOutput:T, self:T -> out:T", _GX + "r = (x > -3.0 && x < 3.0) ? g / 6.0 : 0.0;"),
    (
        "HardtanhBackward",
        "gradOutput:T, self:T, min:T, max:T -> out:T",
        _GX + "r = (x <= (double)min || x >= (double)max) ? 0.0 : g;",
    ),
    (
        "HardshrinkBackward",
        "gradOutput:T, self:T, lambd:T -> gradInput:T",
        _GX + "const double l = lambd; r = (x >= -l && x <= l) ? 0.0 : g;",
    ),
    (
        "SoftshrinkBackward",
        "gradOutput:T, self:T, lambda:T -> gradInput:T",
        _GX + "const double l = lambda; r = (x >= -l && x <= l) ? 0.0 : g;",
    ),
    (
        "SoftplusBackward",
        "gradOutput:T, self:T, beta:T, threshold:T -> gradInput:T",
        _GX
        + "const double b = beta; const double z = exp(x * b); r = x * b > (double)threshold ? g : g * z / (z + 1.0);",
    ),
    (
        "SoftsignBackward",
        "gradients:T, features:T -> output:T",
        "const double g = gradients, d = 1.0 + fabs((double)features); r = g / (d * d);",
    ),
    (
        "LeakyReluBackward",
        "gradOutput:T, self:T, negativeSlope:T -> out:T",
        _GX + "r = x > 0.0 ? g : g * (double)negativeSlope;",
    ),
    (
        "MishBackward",
        _GRAD,
        _GX + "const double t = tanh(log1p(exp(x))); const double s = 1.0 / (1.0 + exp(-x)); "
        "r = g * (t + x * s * (1.0 - t * t));",
    ),
    ("ThresholdBackward", "gradOutput:T, self:T, threshold:T -> out:T", _GX + "r = x <= (double)threshold ? 0.0 : g;"),
)
"""(aclnn name, signature, body) of every activation op with a HIP kernel."""

# float bodies for results stored as fp16/bf16 only: the class allows a 16-bit result 1 ulp (of its own) from
# the reference, and a float evaluation within a few float ulps (2^-21 relative) is far inside that; the double
# bodies cost dozens of double instructions per element and ran these ops at 16-bit (half the bytes) no faster
# in elements than at fp32 (issue 16). A body goes here only with its error argument.
_SILU_GRAD_DOUBLE = (
    "const double gd = g, xd = x, sd = 1.0 / (1.0 + exp(-xd)); r = (float)(gd * sd * (1.0 + xd * (1.0 - sd)));"
)
LOWP: Final[dict[str, str]] = {
    # Mish: every step (expf's 2 ulp, e + 2, n, n + 2, the quotient, the product) is relative, no cancellation;
    # below x = -87 e is subnormal, but the result then is below a bf16 ulp's 2^-9 of the error (|x| e)
    "Mish": (
        "const float x = self; if (x > 20.0f) { r = x; } else { "
        "const float e = expf(x), n = e * (e + 2.0f); r = x * (n / (n + 2.0f)); }"
    ),
    # SiluBackward: f = 1 + x(1 - s) cancels near its zero x = -1.2785 (abs error under 4e-7 there), and s is
    # subnormal-bound below x = -87: there (|f| < 1/128, x <= -80, NaN) the element takes the double body;
    # elsewhere f is within 5e-5 relative (0.1 fp16 ulp), so the rounded result is within 0.6 ulp of the
    # true value and 1 ulp of the reference's. The band is x0 +- 0.008: about 0.3% of N(0, 1) inputs
    "SiluBackward": (
        "const float g = gradOutput, x = self; const float s = 1.0f / (1.0f + expf(-x)); "
        "const float f = 1.0f + x * (1.0f - s); "
        f"if (x > -80.0f && fabsf(f) >= 0.0078125f) {{ r = g * s * f; }} else {{ {_SILU_GRAD_DOUBLE} }}"
    ),
}
"""Per activation (by aclnn name): its body in float, used where every result is stored as fp16/bf16."""

MISH_ENV: Final = "ACL_MISH_CONFIG"
"""Mish's body where the result is float32: ``poly`` (the default, :data:`MISH_POLY`; H100 2026-12-06, 256 MiB:
1.05x torch's time against ``libm``'s 1.21) or ``libm`` (the row's double body, the platform's double ``exp`` and
division)."""
MISH_POLY: Final = (
    # e^x as 2^k·p(t), t = x - k·ln2 in [-ln2/2, ln2/2] from one double fma (k <= 174, so k·|ln2 - ln2_d| < 2^-48),
    # p the degree-7 Taylor polynomial (remainder under 2^-26.9 relative); q = n/(n + 2) from a float
    # reciprocal (2^-23) and one double Newton step (2^-45). q's condition in e is at most 1, so x·q is within
    # 2^-26.8 relative of mish(x) before its one rounding to float32: 0.64 ulp of the true value, inside the
    # class's 1.5. Past 20 the quotient is 1 in float (as the double body); below -120 the product is under half
    # the smallest subnormal: x·0 gives the reference's -0 (and NaN for -inf and NaN inputs, as x·(0/2) does).
    "const float xf = self; "
    "if (xf > 20.0f) { r = xf; } else if (!(xf >= -120.0f)) { r = xf * 0.0f; } else { "
    "const double x = xf; const double k = rint(x * 1.4426950408889634); "
    "const double t = fma(k, -0.69314718055994531, x); "
    "double p = 1.0 / 5040.0; p = fma(p, t, 1.0 / 720.0); p = fma(p, t, 1.0 / 120.0); p = fma(p, t, 1.0 / 24.0); "
    "p = fma(p, t, 1.0 / 6.0); p = fma(p, t, 0.5); p = fma(p, t, 1.0); p = fma(p, t, 1.0); "
    "const double e = p * __longlong_as_double((long long)((int)k + 1023) << 52); "
    "const double n = e * (e + 2.0), d = n + 2.0; "
    "const double y = (double)(1.0f / (float)d); const double q0 = n * y; "
    "const double q = fma(fma(-d, q0, n), y, q0); r = (float)(x * q); }"
)
"""Mish in float32 without the double ``exp`` and division (``ACL_MISH_CONFIG=poly``; the error bound inline)."""
MISH_CONFIGS: Final = ("poly", "libm")
"""The :data:`MISH_ENV` choices, the default first."""

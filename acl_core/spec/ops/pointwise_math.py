"""Pointwise math (issue 16): trig, hyperbolic, log/exp variants, rounding and predicates, from tables.

Each row names one aclnn operator, its official tensor names (outputs last), the sample range and its
accuracy class; the reference formulas live in ``acl_reference.kernels.pointwise_math`` and the device
bodies in ``acl_rocm.kernels.pointwise_math``, keyed by the same names. Family ``elementwise``: size
tiers, special values and the rocm elementwise kernels apply.

Choices where the CANN docs are silent or not transcribed here (tests/data/cann has no dtype tables):

* dtypes: the float functions take every real type and bool, like Exp and Sin: integer and bool inputs
  are cast to float32 first, floats compute in their own type (fp16/bf16 in float32, float64 in float64).
* accuracy: the class allows CUDA's published maximum ulp error of the float32 function (CUDA C++
  Programming Guide, "Mathematical Functions"); float64 allows CUDA's double bound plus one ulp for the
  float64 reference's own libm. The rocm kernels evaluate float32 and narrower in double and round once,
  well inside the class.
* Sinc is sin(πx)/(πx) with sinc(0) = 1, its argument reduced exactly (|x| mod 2, then folded into
  [0, 1/2]) so that sinc of a whole number is exactly 0 and large inputs do not lose the period.
* Erfinv(±1) = ±inf and |x| > 1 gives NaN (torch's convention).
* Logit: ``eps < 0`` means no clamping (torch's ``eps=None``); otherwise x is clamped to [eps, 1 - eps].
* IsClose: |a - b| <= atol + rtol·|b| in double over the promoted values; equal infinities are close,
  NaNs only with ``equalNan``. NanToNum: integers are not declared; its ``float`` replacements are
  rounded to float32, then to the tensor's dtype (overflowing to ±inf in fp16).
* RoundDecimals rounds half to even after scaling by 10^|decimals| in double (float32 too, where torch
  scales in float32: a few ties such as -0.05·10 may round differently).
* Float attributes (rtol, atol, eps) are rounded to float32 unless the call computes in float64.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.spec import samples as S
from acl_core.spec.accuracy import Accuracy, composite, exact, ulp
from acl_core.spec.ops.elementwise import tensor_tensor, unary
from acl_core.spec.opspec import OpSpec, Param, Sample, SampleGen, bool_attr, float_attr, inplace_twin, int_attr
from acl_core.spec.rules import FLOATS, FLOATS64, INTEGERS, REAL, REAL_BOOL, float_result

FAMILY = "elementwise"


def _cuda(float32: float, float64: float, function: str) -> Accuracy:
    return ulp(
        float32,
        float64=float64 + 1,
        reason=f"CUDA's published bounds for {function}: {float32:g} ulp (float32), {float64:g} ulp (float64),"
        " plus 1 ulp in float64 for the reference's libm",
    )


@dataclass(frozen=True)
class Unary:
    """One float-valued unary op: ``x`` → ``y``, its in-place twin's tensor name (None: no twin)."""

    name: str
    x: str
    twin: str | None
    accuracy: Accuracy
    low: float = -4.0
    high: float = 4.0
    y: str = "out"


TRANSCENDENTAL: tuple[Unary, ...] = (
    Unary("Tan", "self", "selfRef", _cuda(4, 2, "tan"), -1.5, 1.5),
    Unary("Asin", "self", "selfRef", _cuda(2, 2, "asin"), -1.0, 1.0),
    Unary("Acos", "input", "inputRef", _cuda(2, 2, "acos"), -1.0, 1.0),
    Unary("Atan", "input", "inputRef", _cuda(2, 2, "atan"), -8.0, 8.0),
    Unary("Sinh", "self", "selfRef", _cuda(3, 2, "sinh")),
    Unary("Cosh", "self", "selfRef", _cuda(2, 1, "cosh")),
    Unary("Asinh", "input", "inputRef", _cuda(3, 3, "asinh"), -8.0, 8.0),
    Unary("Acosh", "self", "selfRef", _cuda(4, 3, "acosh"), 1.0, 8.0),
    Unary("Atanh", "input", "inputRef", _cuda(3, 2, "atanh"), -1.0, 1.0),
    Unary("Erfc", "self", "selfRef", _cuda(4, 5, "erfc")),
    Unary(
        "Erfinv",
        "self",
        "selfRef",
        ulp(
            2,
            float64=8,
            reason="CUDA's erfinvf bound (2 ulp); float64: three Halley steps on erf/erfc from Winitzki's"
            " approximation, each carrying erf's own few ulps",
        ),
        -1.0,
        1.0,
    ),
    Unary("Exp2", "self", "selfRef", _cuda(2, 1, "exp2")),
    Unary("Expm1", "self", "selfRef", _cuda(1, 1, "expm1")),
    Unary("Log10", "self", "selfRef", _cuda(2, 1, "log10"), 0.01, 8.0),
    Unary("Log1p", "self", "selfRef", _cuda(1, 1, "log1p"), -0.99, 8.0),
    Unary("Log2", "self", "selfRef", _cuda(1, 1, "log2"), 0.01, 8.0),
    Unary(
        "Sinc",
        "self",
        "selfRef",
        ulp(
            3,
            float64=4,
            reason="sinpi (CUDA: 2 ulp float32, 1 ulp float64) then one division by the rounded πx",
        ),
        -4.0,
        4.0,
    ),
)
"""Group 1: float functions of one input (integers and bool compute in float32)."""

_ATAN2 = _cuda(3, 2, "atan2")


def _unary(row: Unary) -> OpSpec:
    spec = unary(row.name, REAL_BOOL, x=row.x, y=row.y, result=float_result, low=row.low, high=row.high)
    return replace(spec, accuracy=row.accuracy)


def _atan2() -> OpSpec:
    spec = tensor_tensor("Atan2", REAL_BOOL, result=float_result)
    return replace(spec, accuracy=_ATAN2)


# ----------------------------------------------------------------------------- group 2
SAMPLE_DTYPES = (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16, D.ACL_DOUBLE, D.ACL_INT32, D.ACL_INT64, D.ACL_INT8, D.ACL_BOOL)
"""The dtypes samples are drawn in (each op keeps those it declares)."""
Settings = tuple[Mapping[str, object], ...]


def _bool(dtype: D) -> D:
    return D.ACL_BOOL


@dataclass(frozen=True)
class Pointwise:
    """One op of one or two tensors (``inputs``), its attributes (``extra``) and sample settings."""

    name: str
    inputs: tuple[str, ...]
    dtypes: frozenset[D]
    accuracy: Accuracy
    result: Callable[[D], D] = lambda d: d
    extra: tuple[Param, ...] = ()
    settings: Settings = ({},)
    low: float = -4.0
    high: float = 4.0
    twin: str | None = None
    y: str = "out"
    near: bool = False  # two-input samples: half of ``other`` a relative 1e-3 from ``self`` (IsClose)


def _samples(row: Pointwise) -> SampleGen:
    """Every declared sample dtype × setting × shape (pairs that broadcast for two inputs), specials included."""
    dtypes = [d for d in SAMPLE_DTYPES if d in row.dtypes]

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in dtypes:
            for k, setting in enumerate(row.settings):
                shapes = [(s,) for s in S.ELEMENTWISE_SHAPES] if len(row.inputs) == 1 else S.BROADCAST_PAIRS
                for combo in shapes:
                    args: dict[str, object] = dict(setting)
                    for name, shape in zip(row.inputs, combo):
                        args[name] = S.array(rng, shape, dt, low=row.low, high=row.high, special=True)
                    a, b = (args[n] for n in row.inputs[:2]) if row.near else (None, None)
                    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.shape == b.shape and dt.is_float:
                        pick = rng.random(b.shape) < 0.5
                        with np.errstate(all="ignore"):
                            near = a.astype(np.float64) * (1 + rng.uniform(-1e-3, 1e-3, b.shape))
                            args[row.inputs[1]] = np.where(pick, near, b.astype(np.float64)).astype(b.dtype)
                    yield Sample(args, f"{dt.short} {[list(s) for s in combo]} setting {k}")

    return gen


def _pointwise(row: Pointwise) -> OpSpec:
    if len(row.inputs) == 1:
        spec = unary(row.name, row.dtypes, x=row.inputs[0], y=row.y, result=row.result, extra=row.extra)
    else:
        a, b = row.inputs
        spec = tensor_tensor(row.name, row.dtypes, a=a, b=b, result=row.result, extra=row.extra)
    return replace(spec, accuracy=row.accuracy, samples=_samples(row))


_EXACT = exact("one rounding of the exact result (whole-number rounding, a product or a comparison)")
_CLAMP_EPS = ({"eps": -1.0}, {"eps": 1e-3})
_ISCLOSE = (
    {"rtol": 1e-5, "atol": 1e-8, "equalNan": False},
    {"rtol": 1e-2, "atol": 1e-1, "equalNan": True},
)


def _logaddexp_scale(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> dict[str, Any]:
    """``S = |max(a, b)| + 2``: the sum max + log-term cancels where the result is near 0."""
    a, b = (np.asarray(args[n]).astype(np.float64) for n in ("self", "other"))
    with np.errstate(all="ignore"):
        return {"out": np.abs(np.maximum(a, b)) + 2.0}


_LOGADDEXP = composite(
    steps=4,
    length_of=lambda args, outputs: 1,
    scale_of=_logaddexp_scale,
    reason="max + log1p(exp(-|a-b|)) in double: a few roundings of terms up to |max| + 2, which cancel"
    " where the result is near 0 (an error relative to |max| + 2, not to the result)",
)
MISC: tuple[Pointwise, ...] = (
    Pointwise("Frac", ("input",), FLOATS64, _EXACT, twin="inputRef", low=-40.0, high=40.0),
    Pointwise("Trunc", ("self",), FLOATS64 | INTEGERS, _EXACT, twin="selfRef", low=-40.0, high=40.0),
    Pointwise("Signbit", ("self",), REAL, _EXACT, result=_bool),
    Pointwise("Square", ("self",), REAL, _EXACT),
    Pointwise("IsFinite", ("self",), REAL_BOOL, _EXACT, result=_bool),
    Pointwise("IsPosInf", ("self",), REAL_BOOL, _EXACT, result=_bool),
    Pointwise("IsNegInf", ("self",), REAL_BOOL, _EXACT, result=_bool),
    Pointwise(
        "IsClose",
        ("self", "other"),
        REAL_BOOL,
        _EXACT,
        result=_bool,
        extra=(float_attr("rtol"), float_attr("atol"), bool_attr("equalNan")),
        settings=_ISCLOSE,
        near=True,
    ),
    Pointwise(
        "NanToNum",
        ("self",),
        FLOATS64,
        _EXACT,
        extra=(
            float_attr("nan", c_type="float"),
            float_attr("posinf", c_type="float"),
            float_attr("neginf", c_type="float"),
        ),
        settings=({"nan": 0.0, "posinf": 3.0e38, "neginf": -3.0e38}, {"nan": -1.5, "posinf": 100.0, "neginf": -7.0}),
        twin="selfRef",
    ),
    Pointwise(
        "Logit",
        ("input",),
        REAL_BOOL,
        ulp(2, float64=4, reason="log(x/(1-x)) evaluated in double, rounded once; float64: log's and the quotient's"),
        result=float_result,
        extra=(float_attr("eps"),),
        settings=_CLAMP_EPS,
        low=0.0,
        high=1.0,
    ),
    Pointwise(
        "LogitGrad",
        ("x", "dy"),
        FLOATS,
        ulp(
            1, reason="dy / (x·(1-x)) in double (two roundings of 2^-53), rounded once; 0 or NaN outside the eps range"
        ),
        extra=(float_attr("eps"),),
        settings=_CLAMP_EPS,
        low=0.0,
        high=1.0,
    ),
    Pointwise("LogAddExp", ("self", "other"), FLOATS64, _LOGADDEXP),
    Pointwise("LogAddExp2", ("self", "other"), FLOATS64, _LOGADDEXP),
    Pointwise(
        "RoundDecimals",
        ("self",),
        FLOATS64,
        exact("round-half-even of x·10^d (or x/10^-d), the scaling in double by an exact power of ten"),
        extra=(int_attr("decimals"),),
        settings=({"decimals": 0}, {"decimals": 2}, {"decimals": -1}),
        twin="selfRef",
        low=-400.0,
        high=400.0,
    ),
)
"""Group 2: rounding, predicates and misc pointwise ops."""


_base: list[OpSpec] = [*(_unary(r) for r in TRANSCENDENTAL), _atan2(), *(_pointwise(r) for r in MISC)]
_by_name = {s.name: s for s in _base}
TWINS: dict[str, str] = {
    **{r.name: r.twin for r in TRANSCENDENTAL if r.twin},
    "Atan2": "selfRef",
    **{r.name: r.twin for r in MISC if r.twin},
}
"""Ops with an aclnnInplace twin, and the official name of its in-out tensor."""
_twins = [
    inplace_twin(
        _by_name[op],
        ref_name=ref_name,
        self_name=_by_name[op].params[0].name,
        out_name=_by_name[op].outputs[0].name,
    )
    for op, ref_name in TWINS.items()
]

SPECS: list[OpSpec] = [*_base, *_twins]

"""Fused residual add + RmsNorm + quantisation (issue 16, reached by vllm-ascend).

AddRmsNormQuantV2, AddRmsNormDynamicQuantV2 and AddRmsNormCast are declared here; AddRmsNormQuant and
AddRmsNormDynamicQuant are their V1 forms (no beta, no rmsNormOut / outputMask), declared with
:func:`~acl_core.spec.version.version_of` over the V2 ops so they share the rules and kernels. Every op
computes ``x = x1 + x2`` and ``y = x * rstd * gamma (+ beta)`` with ``rstd = 1 / sqrt(mean(x²) + epsilon)``
over gamma's trailing dims, as AddRmsNorm does. Choices where the CANN documents are silent:

* ``y`` is formed without rounding to x1's dtype and rounded once to FLOAT32 before it is quantised;
  quantisation is FLOAT32 arithmetic as in the quant family (``y / scales`` for divMode, else
  ``y * scales``, then ``+ zeroPoints``), rounded half to even and saturated to INT8 (NaN to 0).
* Static quant (AddRmsNormQuant(V2)): scales1/2 FLOAT32, FLOAT16 or BFLOAT16 shaped like gamma;
  zeroPoints INT32, FLOAT32, FLOAT16 or BFLOAT16 shaped like gamma (read as FLOAT32). ``axis`` is
  documented as "only -1; other values take no effect", so every value is accepted and ignored.
  Without scales2Optional, ``y2Out`` (undefined in CANN) is written with zeros; zeroPoints2Optional
  without scales2Optional is refused (the A2/A3 rule).
* Dynamic quant (AddRmsNormDynamicQuant(V2)): ``input = y * smoothScale`` (FLOAT32), ``scale =
  row_max(|input|) / 127``, ``y = round(input / scale)`` (a zero scale quantises to 0), as
  DynamicQuant. gamma is 1-D (x1's last dim), x1 has rank 2 or more. An output the documents call
  "invalid" (outputMask false, or V1's second quantisation without both smooth scales) has shape [1]
  and, undefined in CANN, is written with 0.
* Output dtypes: INT8 only. The documents also list INT4 / INT32 (packed INT4) for the dynamic op
  and HIFLOAT8 / FLOAT8 for both (Ascend 950 only): not implemented, refused by the declared dtypes.
* AddRmsNormCast: ``y1Out`` is y in FLOAT32, ``y2Out`` is y1Out cast to x1's dtype (so a 16-bit y2
  is rounded twice, as CANN's Cast of y1 does), ``rstdOut`` FLOAT32 with the normalised dims kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.spec import samples as S
from acl_core.spec.accuracy import Accuracy, composite, trailing_elements, with_accuracy
from acl_core.spec.opspec import (
    INVALID,
    Call,
    ErrorSample,
    Infos,
    OpSpec,
    OutInfo,
    Sample,
    bool_array,
    bool_attr,
    float_attr,
    int_attr,
    invalid,
    out,
    tensor,
)
from acl_core.spec.rules import FLOATS, same, tensor_arg
from acl_core.spec.version import version_of
from acl_core.tensor import AclBoolArray, AclTensor

FAMILY = "norm"
_F32, _F16, _BF16, _I8 = D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16, D.ACL_INT8
HALF = frozenset({_F16, _BF16})
ZERO_POINTS = frozenset({D.ACL_INT32, _F32, _F16, _BF16})
QUANT_OUT = frozenset({_I8})
"""The quantised outputs implemented (CANN also lists INT4/INT32, HIFLOAT8, FLOAT8: module docstring)."""


def _opt(call: Call, name: str) -> AclTensor | None:
    t = call.args.get(name)
    return t if isinstance(t, AclTensor) else None


def _like(t: AclTensor | None, name: str, ref: AclTensor, ref_name: str, *, dtype: bool = True) -> None:
    """``t`` (when given) must have ``ref``'s shape (and dtype)."""
    if t is None:
        return
    if tuple(t.shape) != tuple(ref.shape):
        raise invalid(f"{name} has shape {list(t.shape)}; it must equal {ref_name}'s {list(ref.shape)}")
    if dtype and t.dtype != ref.dtype:
        raise invalid(f"{name} has dtype {t.dtype.short}; it must equal {ref_name}'s {ref.dtype.short}")


def _residual(call: Call, *, vector_gamma: bool) -> tuple[AclTensor, AclTensor, tuple[int, ...]]:
    """Checks x1, x2, gamma (and betaOptional); stores the normalised axes; returns x1, gamma, rstd's shape."""
    x1, x2, gamma = tensor_arg(call, "x1"), tensor_arg(call, "x2"), tensor_arg(call, "gamma")
    _like(x2, "x2", x1, "x1")
    if gamma.dtype != x1.dtype:
        raise invalid(f"gamma has dtype {gamma.dtype.short}; it must equal x1's {x1.dtype.short}")
    if vector_gamma and (gamma.rank != 1 or gamma.shape[0] != x1.shape[-1]):
        raise invalid(f"gamma must be 1-D of x1's last dim {x1.shape[-1]}, not {list(gamma.shape)}")
    if gamma.rank > x1.rank or tuple(x1.shape[x1.rank - gamma.rank :]) != tuple(gamma.shape):
        raise invalid(f"gamma {list(gamma.shape)} is not the trailing part of x1's shape {list(x1.shape)}")
    _like(_opt(call, "betaOptional"), "betaOptional", gamma, "gamma")
    lead = x1.rank - gamma.rank
    call.plan["axes"] = tuple(range(lead, x1.rank))
    return x1, gamma, tuple(x1.shape[:lead]) + (1,) * gamma.rank


# ----------------------------------------------------------------------------- AddRmsNormQuantV2
def _static_infer(call: Call) -> Infos:
    x1, gamma, _ = _residual(call, vector_gamma=False)
    s1, s2 = tensor_arg(call, "scales1"), _opt(call, "scales2Optional")
    z1, z2 = _opt(call, "zeroPoints1Optional"), _opt(call, "zeroPoints2Optional")
    _like(s1, "scales1", gamma, "gamma", dtype=False)
    _like(s2, "scales2Optional", s1, "scales1")
    _like(z1, "zeroPoints1Optional", gamma, "gamma", dtype=False)
    _like(z2, "zeroPoints2Optional", gamma, "gamma", dtype=False)
    if z1 is not None and z2 is not None and z1.dtype != z2.dtype:
        raise invalid(f"zeroPoints2Optional ({z2.dtype.short}) must have zeroPoints1Optional's ({z1.dtype.short})")
    if z2 is not None and s2 is None:
        raise invalid("zeroPoints2Optional needs scales2Optional (the second quantisation is off without it)")
    quant = same(x1.shape, _I8)
    return {"y1Out": quant, "y2Out": quant, "xOut": same(x1.shape, x1.dtype), "rmsNormOut": same(x1.shape, x1.dtype)}


def _static_case(
    rng: np.random.Generator, dt: D, shape: Sequence[int], norm: int, scale_dt: D, zp_dt: D | None, **extra: Any
) -> dict[str, Any]:
    g = tuple(shape[len(shape) - norm :])
    low, high = (0.5, 4.0) if extra.get("divMode") else (8.0, 40.0)
    args: dict[str, Any] = {
        "x1": S.array(rng, shape, dt, low=-2, high=2),
        "x2": S.array(rng, shape, dt, low=-2, high=2),
        "gamma": S.array(rng, g, dt, low=0.5, high=1.5),
        "scales1": S.array(rng, g, scale_dt, low=low, high=high),
        "scales2Optional": S.array(rng, g, scale_dt, low=low, high=high),
        "zeroPoints1Optional": None if zp_dt is None else S.array(rng, g, zp_dt, low=-5, high=5),
        "zeroPoints2Optional": None if zp_dt is None else S.array(rng, g, zp_dt, low=-5, high=5),
        "betaOptional": None,
        "axis": -1,
        "epsilon": 1e-6,
        "divMode": False,
    }
    return {**args, **extra}


def _static_samples(rng: np.random.Generator) -> Iterable[Sample]:
    for dt, scale_dt, zp_dt in ((_F16, _F32, D.ACL_INT32), (_BF16, _BF16, _BF16), (_F32, _F32, _F32)):
        yield Sample(_static_case(rng, dt, (3, 32), 1, scale_dt, zp_dt), f"{dt.short} x, {scale_dt.short} scales")
        yield Sample(
            _static_case(rng, dt, (2, 3, 16), 1, scale_dt, zp_dt, divMode=True, betaOptional=S.array(rng, (16,), dt)),
            f"{dt.short} divMode with beta",
        )
    f16 = _F16
    case = _static_case(rng, f16, (4, 24), 1, _F16, None, scales2Optional=None)
    yield Sample(case, "one quantisation (no scales2), no zero points")
    yield Sample(_static_case(rng, f16, (2, 4, 8), 2, _F32, D.ACL_INT32), "normalised over [4, 8]")
    big = _static_case(rng, f16, (2, 64), 1, _F32, None)
    yield Sample({**big, "scales1": np.full(64, 300.0, np.float32)}, "saturating to -128 / 127")
    yield Sample(_static_case(rng, _BF16, (0, 16), 1, _BF16, _BF16), "empty batch")
    sp = _static_case(rng, _F32, (3, 8), 1, _F32, None)
    yield Sample({**sp, "x1": S.array(rng, (3, 8), _F32, special=True)}, "NaN and Inf rows")


def _static_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    good = _static_case(rng, _F16, (2, 16), 1, _F32, D.ACL_INT32)
    yield ErrorSample({**good, "x2": S.array(rng, (2, 16), _BF16)}, INVALID, "x2 dtype")
    yield ErrorSample({**good, "gamma": np.ones(8, np.float16)}, INVALID, "gamma not trailing")
    yield ErrorSample({**good, "scales1": np.ones(8, np.float32)}, INVALID, "scales1 shape")
    yield ErrorSample({**good, "scales2Optional": np.ones(16, np.float16)}, INVALID, "scales2 dtype")
    yield ErrorSample({**good, "zeroPoints2Optional": np.ones(16, np.float32)}, INVALID, "zero points dtypes")
    yield ErrorSample({**good, "scales2Optional": None}, INVALID, "zeroPoints2 without scales2")
    yield ErrorSample({**good, "y1Out": np.zeros((2, 16), np.float16)}, INVALID, "y1Out not int8")
    yield ErrorSample({**good, "epsilon": -1.0}, INVALID, "negative epsilon")


def _add_rms_norm_quant_v2() -> OpSpec:
    params = (
        tensor("x1", FLOATS, min_rank=1),
        tensor("x2", FLOATS, min_rank=1),
        tensor("gamma", FLOATS, min_rank=1),
        tensor("scales1", FLOATS, min_rank=1),
        tensor("scales2Optional", FLOATS, optional=True),
        tensor("zeroPoints1Optional", ZERO_POINTS, optional=True),
        tensor("zeroPoints2Optional", ZERO_POINTS, optional=True),
        tensor("betaOptional", FLOATS, optional=True),
        int_attr("axis", default=-1),
        float_attr("epsilon", bounds=(0.0, None)),
        bool_attr("divMode"),
        out("y1Out", QUANT_OUT),
        out("y2Out", QUANT_OUT),
        out("xOut", FLOATS),
        out("rmsNormOut", FLOATS, optional=True),
    )
    return OpSpec(
        "AddRmsNormQuantV2",
        FAMILY,
        params,
        _static_infer,
        samples=_static_samples,
        error_samples=_static_errors,
        summary="x = x1 + x2; y = RmsNorm(x)·gamma + beta; y1/y2 = int8(round(y·scales (or /) + zeroPoints))",
    )


# ----------------------------------------------------------------------------- AddRmsNormDynamicQuantV2
def dynamic_outputs(mask: Sequence[bool] | None, smooth1: bool, smooth2: bool) -> tuple[bool, bool]:
    """Which of (y1Out/scale1Out, y2Out/scale2Out) are valid outputs (the documents' outputMask rules)."""
    if mask is None:
        return True, smooth1 and smooth2
    return bool(mask[0]), bool(mask[1])


def _mask(call: Call) -> tuple[bool, ...] | None:
    value = call.args.get("outputMaskOptional")
    return tuple(bool(v) for v in value.values) if isinstance(value, AclBoolArray) else None


def _dynamic_infer(call: Call) -> Infos:
    x1, gamma, _ = _residual(call, vector_gamma=True)
    sm1, sm2 = _opt(call, "smoothScale1Optional"), _opt(call, "smoothScale2Optional")
    _like(sm1, "smoothScale1Optional", gamma, "gamma")
    _like(sm2, "smoothScale2Optional", gamma, "gamma")
    mask = _mask(call)
    if mask is None:
        if sm2 is not None and sm1 is None:
            raise invalid("smoothScale2Optional without smoothScale1Optional (and no outputMask)")
    else:
        if len(mask) != 2:
            raise invalid(f"outputMaskOptional must have 2 entries, not {len(mask)}")
        if not any(mask):
            raise invalid("outputMaskOptional cannot switch off both quantisations")
        for i, sm in enumerate((sm1, sm2)):
            if sm is not None and not mask[i]:
                raise invalid(f"smoothScale{i + 1}Optional is given but outputMaskOptional[{i}] is false")
    valid = dynamic_outputs(mask, sm1 is not None, sm2 is not None)
    y1, y2 = (call.args.get(n) for n in ("y1Out", "y2Out"))
    if valid[0] and valid[1] and isinstance(y1, AclTensor) and isinstance(y2, AclTensor) and y1.dtype != y2.dtype:
        raise invalid(f"y1Out ({y1.dtype.short}) and y2Out ({y2.dtype.short}) must have the same dtype")
    rows = tuple(x1.shape[:-1])
    infos: dict[str, OutInfo] = {"xOut": same(x1.shape, x1.dtype)}
    for i, ok in enumerate(valid, start=1):
        infos[f"y{i}Out"] = same(x1.shape if ok else (1,), _I8)
        infos[f"scale{i}Out"] = same(rows if ok else (1,), _F32)
    return infos


def _dynamic_case(rng: np.random.Generator, dt: D, shape: Sequence[int], **extra: Any) -> dict[str, Any]:
    n = shape[-1]
    args: dict[str, Any] = {
        "x1": S.array(rng, shape, dt, low=-2, high=2),
        "x2": S.array(rng, shape, dt, low=-2, high=2),
        "gamma": S.array(rng, (n,), dt, low=0.5, high=1.5),
        "smoothScale1Optional": S.array(rng, (n,), dt, low=0.5, high=2),
        "smoothScale2Optional": S.array(rng, (n,), dt, low=0.5, high=2),
        "betaOptional": None,
        "epsilon": 1e-6,
        "outputMaskOptional": None,
    }
    return {**args, **extra}


def _dynamic_samples(rng: np.random.Generator) -> Iterable[Sample]:
    for dt in (_F16, _BF16):
        yield Sample(_dynamic_case(rng, dt, (3, 32)), f"{dt.short} two smoothed quantisations")
        yield Sample(
            _dynamic_case(rng, dt, (2, 3, 16), betaOptional=S.array(rng, (16,), dt), smoothScale2Optional=None),
            f"{dt.short} with beta, one quantisation",
        )
    f16 = _F16
    yield Sample(
        _dynamic_case(rng, f16, (4, 16), smoothScale1Optional=None, smoothScale2Optional=None),
        "no smooth scales: y1 only",
    )
    yield Sample(
        _dynamic_case(rng, f16, (4, 16), smoothScale1Optional=None, smoothScale2Optional=None)
        | {"outputMaskOptional": [True, True]},
        "outputMask [true, true] without smooth scales",
    )
    yield Sample(
        _dynamic_case(rng, f16, (3, 16), smoothScale1Optional=None) | {"outputMaskOptional": [False, True]},
        "outputMask [false, true]",
    )
    zero = _dynamic_case(rng, f16, (2, 16))
    yield Sample({**zero, "x1": np.zeros((2, 16), np.float16), "x2": np.zeros((2, 16), np.float16)}, "zero rows")
    yield Sample(_dynamic_case(rng, _BF16, (0, 16)), "empty batch")


def _dynamic_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    good = _dynamic_case(rng, _F16, (2, 16))
    yield ErrorSample({**good, "gamma": np.ones((2, 16), np.float16)}, INVALID, "2-D gamma")
    yield ErrorSample({**good, "smoothScale1Optional": np.ones(16, np.float32)}, INVALID, "smoothScale1 dtype")
    yield ErrorSample({**good, "smoothScale1Optional": None}, INVALID, "smoothScale2 without smoothScale1")
    yield ErrorSample({**good, "outputMaskOptional": [True]}, INVALID, "outputMask of one entry")
    yield ErrorSample({**good, "outputMaskOptional": [True, False]}, INVALID, "smoothScale2 with outputMask[1] false")
    no_smooth = {**good, "smoothScale1Optional": None, "smoothScale2Optional": None}
    yield ErrorSample({**no_smooth, "outputMaskOptional": [False, False]}, INVALID, "outputMask all false")
    yield ErrorSample({**good, "x1": S.array(rng, (16,), _F16), "x2": S.array(rng, (16,), _F16)}, INVALID, "1-D x1")


def _add_rms_norm_dynamic_quant_v2() -> OpSpec:
    params = (
        tensor("x1", HALF, min_rank=2),
        tensor("x2", HALF, min_rank=2),
        tensor("gamma", HALF, min_rank=1),
        tensor("smoothScale1Optional", HALF, optional=True),
        tensor("smoothScale2Optional", HALF, optional=True),
        tensor("betaOptional", HALF, optional=True),
        float_attr("epsilon", bounds=(0.0, None)),
        bool_array("outputMaskOptional", optional=True),
        out("y1Out", QUANT_OUT),
        out("y2Out", QUANT_OUT),
        out("xOut", HALF),
        out("scale1Out", {_F32}),
        out("scale2Out", {_F32}),
    )
    return OpSpec(
        "AddRmsNormDynamicQuantV2",
        FAMILY,
        params,
        _dynamic_infer,
        samples=_dynamic_samples,
        error_samples=_dynamic_errors,
        summary="x = x1 + x2; y = RmsNorm(x)·gamma + beta; per-row dynamic int8 quantisation of y·smoothScale1/2",
    )


# ----------------------------------------------------------------------------- AddRmsNormCast
def _cast_infer(call: Call) -> Infos:
    x1, _, stats = _residual(call, vector_gamma=False)
    return {
        "y1Out": same(x1.shape, _F32),
        "y2Out": same(x1.shape, x1.dtype),
        "rstdOut": same(stats, _F32),
        "xOut": same(x1.shape, x1.dtype),
    }


def _cast_samples(rng: np.random.Generator) -> Iterable[Sample]:
    for dt in (_F16, _BF16):
        shape = (2, 3, 32)
        x1, x2 = S.array(rng, shape, dt), S.array(rng, shape, dt)
        yield Sample({"x1": x1, "x2": x2, "gamma": S.array(rng, (32,), dt), "epsilon": 1e-6}, dt.short)
        long = S.array(rng, (2, 512), dt)
        yield Sample({"x1": long, "x2": long, "gamma": np.ones(512, dt.numpy), "epsilon": 1e-5}, f"{dt.short} long row")
    yield Sample(
        {"x1": S.array(rng, (2, 4, 8), _F16), "x2": S.array(rng, (2, 4, 8), _F16)}
        | {"gamma": S.array(rng, (4, 8), _F16), "epsilon": 1e-6},
        "normalised over [4, 8]",
    )
    yield Sample(
        {"x1": S.array(rng, (3, 8), _F16, special=True), "x2": S.array(rng, (3, 8), _F16)}
        | {"gamma": np.ones(8, np.float16), "epsilon": 1e-6},
        "NaN and Inf rows",
    )
    e = S.array(rng, (0, 8), _BF16)
    yield Sample({"x1": e, "x2": e, "gamma": np.ones(8, _BF16.numpy), "epsilon": 1e-6}, "empty batch")


def _cast_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    x = S.array(rng, (2, 8), _F16)
    good = {"x1": x, "x2": x, "gamma": np.ones(8, np.float16), "epsilon": 1e-6}
    yield ErrorSample({**good, "x2": S.array(rng, (2, 8), _BF16)}, INVALID, "x2 dtype")
    yield ErrorSample({**good, "gamma": np.ones(8, np.float32)}, INVALID, "gamma dtype")
    yield ErrorSample({**good, "gamma": np.ones(4, np.float16)}, INVALID, "gamma not trailing")
    yield ErrorSample({**good, "y1Out": np.zeros((2, 8), np.float16)}, INVALID, "y1Out not float32")
    yield ErrorSample({**good, "rstdOut": np.zeros((2,), np.float32)}, INVALID, "rstdOut without the kept dim")


def _add_rms_norm_cast() -> OpSpec:
    params = (
        tensor("x1", HALF, min_rank=1),
        tensor("x2", HALF, min_rank=1),
        tensor("gamma", HALF, min_rank=1),
        float_attr("epsilon", bounds=(0.0, None)),
        out("y1Out", {_F32}, c_type="const aclTensor*"),
        out("y2Out", HALF, c_type="const aclTensor*"),
        out("rstdOut", {_F32}, c_type="const aclTensor*"),
        out("xOut", HALF, c_type="const aclTensor*"),
    )
    return OpSpec(
        "AddRmsNormCast",
        FAMILY,
        params,
        _cast_infer,
        samples=_cast_samples,
        error_samples=_cast_errors,
        summary="x = x1 + x2; y1Out = RmsNorm(x)·gamma in float32, y2Out = y1Out cast to x1's dtype; rstdOut, xOut",
    )


# ----------------------------------------------------------------------------- V1 forms and registry
_QUANT_V2 = _add_rms_norm_quant_v2()
_DYN_V2 = _add_rms_norm_dynamic_quant_v2()


_QUANT_V1 = version_of(
    _QUANT_V2,
    "AddRmsNormQuant",
    tuple(n for n in _QUANT_V2.param_names if n not in ("betaOptional", "rmsNormOut")),
    fixed={"betaOptional": None, "rmsNormOut": None},
    summary="AddRmsNormQuantV2 without beta and rmsNormOut",
)
_DYN_V1 = version_of(
    _DYN_V2,
    "AddRmsNormDynamicQuant",
    tuple(n for n in _DYN_V2.param_names if n not in ("betaOptional", "outputMaskOptional")),
    fixed={"betaOptional": None, "outputMaskOptional": None},
    summary="AddRmsNormDynamicQuantV2 without beta and outputMask",
)

# RmsNorm's steps, and the rounding of y to float32 before the quantisation / cast
_STEPS = composite(steps=9, length_of=trailing_elements("gamma"))
_BASES = ("AddRmsNormQuantV2", "AddRmsNormDynamicQuantV2", "AddRmsNormCast")
ACCURACY: dict[str, Accuracy] = dict.fromkeys(_BASES, _STEPS)
"""Accuracy classes: integer outputs compare exactly under any class; the V1 forms take their V2's."""

SPECS: list[OpSpec] = with_accuracy([_QUANT_V2, _QUANT_V1, _DYN_V2, _DYN_V1, _add_rms_norm_cast()], ACCURACY)

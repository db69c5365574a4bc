"""Elementwise operators: arithmetic, comparisons, logic, unary math and activations, casts and fills.

Where CANN's documents are silent: the Pow operators follow C99 / IEEE 754 ``pow`` at every exponent
(an exponent of 0.5 is not ``sqrt``: pow(-inf, 0.5) is +inf and pow(-0.0, 0.5) is +0.0).
FloorDivide / FloorDivides compute floor(self / other) in the promoted dtype (DivMod's mode 2; floats
through a float64 quotient); bool inputs are refused (161002): torch has no bool floor division and a
bool ⊕ bool pair would promote to a bool result, which CANN's out list lacks; complex outs (listed on the
page) are not claimed, as no real floor quotient needs one. XLogY* follow torch.xlogy: 0 where self is
0 and other is not NaN, else self·log(other); integer and bool inputs give float32.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.spec import samples as S
from acl_core.spec.accuracy import Accuracy, exact, table, ulp, with_accuracy
from acl_core.spec.opspec import (
    INVALID,
    Call,
    ErrorGen,
    ErrorSample,
    Infos,
    OpSpec,
    OutInfo,
    Param,
    Sample,
    SampleGen,
    dtype_attr,
    inplace_twin,
    int_attr,
    invalid,
    out,
    ref,
    scalar,
    tensor,
)
from acl_core.spec.promotion import promote_types, promote_with_scalar
from acl_core.spec.rules import (
    ALL,
    ANY_STORAGE,
    FLOATS,
    FLOATS64,
    INTEGERS,
    REAL,
    REAL_BOOL,
    broadcast_shapes,
    castable,
    float_result,
    listed,
    same,
    tensor_arg,
)
from acl_core.tensor import AclScalar

FAMILY = "elementwise"
SAMPLE_DTYPES = (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16, D.ACL_INT32, D.ACL_INT64, D.ACL_BOOL)


def _scalar_dtype(call: Call, name: str) -> D | None:
    s = call.args.get(name)
    return s.dtype if isinstance(s, AclScalar) else None


def _check_alpha(call: Call, compute: D, alpha: str | None) -> None:
    dt = _scalar_dtype(call, alpha) if alpha else None
    if dt is None:
        return
    if dt == D.ACL_BOOL and compute != D.ACL_BOOL:
        raise invalid(f"a bool {alpha} is only supported for bool results")
    if (compute.is_integer or compute == D.ACL_BOOL) and (dt.is_float or dt.is_complex):
        raise invalid(f"{alpha} must be integral for integer inputs, not {dt.short}")
    if dt.is_complex and not compute.is_complex:
        raise invalid(f"{alpha} must be real for real inputs (they compute in {compute.short}), not {dt.short}")


Result = Callable[[D], D]


def _same(dt: D) -> D:
    return dt


def _bool(dt: D) -> D:
    return D.ACL_BOOL


# ----------------------------------------------------------------------------- sample builders
def _tt_samples(
    a: str, b: str, dtypes: Iterable[D], *, positive_b: bool = False, extra: Mapping[str, object] | None = None
) -> SampleGen:
    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in dtypes:
            for sa, sb in S.BROADCAST_PAIRS:
                va = S.array(rng, sa, dt, special=dt.is_float)
                vb = S.positive(rng, sb, dt) if positive_b and not dt == D.ACL_BOOL else S.array(rng, sb, dt)
                yield Sample({a: va, b: vb, **(extra or {})}, f"{dt.short} {list(sa)}⊕{list(sb)}")
        yield Sample(
            {a: S.array(rng, (3, 4), D.ACL_FLOAT), b: S.array(rng, (3, 4), D.ACL_INT32), **(extra or {})},
            "mixed float32⊕int32",
        )

    return gen


def _ts_samples(
    t: str,
    s: str,
    dtypes: Iterable[D],
    *,
    scalar_values: Iterable[object] = (2.5, 3),
    extra: Mapping[str, object] | None = None,
    positive: bool = False,
) -> SampleGen:
    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in dtypes:
            for shape in S.ELEMENTWISE_SHAPES:
                for v in scalar_values:
                    if isinstance(v, float) and dt.is_integer and "alpha" in (extra or {}):
                        continue
                    arr = (
                        S.positive(rng, shape, dt)
                        if positive and dt != D.ACL_BOOL
                        else S.array(rng, shape, dt, special=dt.is_float)
                    )
                    yield Sample({t: arr, s: v, **(extra or {})}, f"{dt.short} {list(shape)} with {v!r}")

    return gen


def _broadcast_error(a: str, b: str, extra: Mapping[str, object] | None = None) -> ErrorGen:
    def gen(rng: np.random.Generator) -> Iterable[ErrorSample]:
        yield ErrorSample(
            {a: S.array(rng, (2, 3), D.ACL_FLOAT), b: S.array(rng, (4, 3), D.ACL_FLOAT), **(extra or {})},
            INVALID,
            "shapes that do not broadcast",
        )
        yield ErrorSample(
            {
                a: S.array(rng, (2, 3), D.ACL_FLOAT),
                b: S.array(rng, (2, 3), D.ACL_FLOAT),
                "out": np.zeros((3, 3), np.float32),
                **(extra or {}),
            },
            INVALID,
            "out of the wrong shape",
        )

    return gen


# ----------------------------------------------------------------------------- tensor ⊕ tensor
def tensor_tensor(
    name: str,
    dtypes: frozenset[D],
    *,
    a: str = "self",
    b: str = "other",
    alpha: str | None = None,
    result: Result = _same,
    out_dtypes: frozenset[D] | None = None,
    extra: tuple[Param, ...] = (),
    sample_dtypes: Iterable[D] = SAMPLE_DTYPES,
    sample_extra: Mapping[str, object] | None = None,
    positive_b: bool = False,
) -> OpSpec:
    """A broadcasting binary op on two tensors with CANN's promotion; ``result`` maps compute → out dtype."""
    params: list[Param] = [tensor(a, dtypes), tensor(b, dtypes)]
    if alpha:
        params.append(scalar(alpha))
    params.extend(extra)
    params.append(out("out", out_dtypes or dtypes))

    def infer(call: Call) -> Infos:
        ta, tb = tensor_arg(call, a), tensor_arg(call, b)
        shape = broadcast_shapes(ta.shape, tb.shape, names=(a, b))
        compute = promote_types(ta.dtype, tb.dtype)
        _check_alpha(call, compute, alpha)
        call.plan["compute"] = compute
        res = result(compute)
        return {"out": listed(shape, res) if res == D.ACL_BOOL else castable(shape, res)}

    sd = [d for d in sample_dtypes if d in dtypes]
    extra_args = dict(sample_extra or {})
    if alpha:
        extra_args.setdefault(alpha, 1)
    return OpSpec(
        name,
        FAMILY,
        tuple(params),
        infer,
        alias_ok=True,
        samples=_tt_samples(a, b, sd, positive_b=positive_b, extra=extra_args),
        error_samples=_broadcast_error(a, b, extra_args),
    )


def tensor_scalar(
    name: str,
    dtypes: frozenset[D],
    *,
    t: str = "self",
    s: str = "other",
    alpha: str | None = None,
    result: Result = _same,
    out_dtypes: frozenset[D] | None = None,
    sample_dtypes: Iterable[D] = SAMPLE_DTYPES,
    scalar_values: Iterable[object] = (2.5, 3),
    positive: bool = False,
) -> OpSpec:
    """A tensor ⊕ aclScalar op: the scalar raises the dtype only across categories (int → float)."""
    params: list[Param] = [tensor(t, dtypes), scalar(s)]
    if alpha:
        params.append(scalar(alpha))
    params.append(out("out", out_dtypes or dtypes))

    def infer(call: Call) -> Infos:
        tt = tensor_arg(call, t)
        sdt = _scalar_dtype(call, s)
        assert sdt is not None
        compute = promote_with_scalar(tt.dtype, sdt)
        _check_alpha(call, compute, alpha)
        call.plan["compute"] = compute
        res = result(compute)
        return {"out": listed(tt.shape, res) if res == D.ACL_BOOL else castable(tt.shape, res)}

    extra = {alpha: 1} if alpha else None
    sd = [d for d in sample_dtypes if d in dtypes]
    return OpSpec(
        name,
        FAMILY,
        tuple(params),
        infer,
        alias_ok=True,
        samples=_ts_samples(t, s, sd, scalar_values=scalar_values, extra=extra, positive=positive),
    )


def scalar_tensor(
    name: str,
    dtypes: frozenset[D],
    *,
    s: str = "self",
    t: str = "other",
    alpha: str | None = None,
    result: Result = _same,
    positive: bool = False,
) -> OpSpec:
    """An aclScalar ⊕ tensor op (AddV3, PowScalarTensor)."""
    params: list[Param] = [scalar(s), tensor(t, dtypes)]
    if alpha:
        params.append(scalar(alpha))
    params.append(out("out", dtypes | {result(d) for d in dtypes}))

    def infer(call: Call) -> Infos:
        tt = tensor_arg(call, t)
        sdt = _scalar_dtype(call, s)
        assert sdt is not None
        compute = promote_with_scalar(tt.dtype, sdt)
        _check_alpha(call, compute, alpha)
        call.plan["compute"] = compute
        return {"out": castable(tt.shape, result(compute))}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_INT32):
            for shape in S.ELEMENTWISE_SHAPES:
                x = S.positive(rng, shape, dt) if positive else S.array(rng, shape, dt, low=-2, high=2)
                args: dict[str, object] = {s: 1.5 if dt.is_float else 2, t: x}
                if alpha:
                    args[alpha] = 2
                yield Sample(args, f"{dt.short} {list(shape)}")

    return OpSpec(name, FAMILY, tuple(params), infer, alias_ok=True, samples=gen)


# ----------------------------------------------------------------------------- unary
def unary(
    name: str,
    dtypes: frozenset[D],
    *,
    x: str = "self",
    y: str = "out",
    result: Result = _same,
    low: float = -4.0,
    high: float = 4.0,
    extra: tuple[Param, ...] = (),
    sample_extra: Mapping[str, object] | None = None,
    sample_dtypes: Iterable[D] = (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16, D.ACL_DOUBLE, D.ACL_INT32),
) -> OpSpec:
    """A one-input op; ``result`` maps the input dtype to the output dtype (e.g. int → float32)."""
    params = (tensor(x, dtypes), *extra, out(y, dtypes | {result(d) for d in dtypes}))

    def infer(call: Call) -> Infos:
        tx = tensor_arg(call, x)
        call.plan["compute"] = tx.dtype
        return {y: castable(tx.shape, result(tx.dtype))}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in sample_dtypes:
            if dt not in dtypes:
                continue
            for shape in S.ELEMENTWISE_SHAPES:
                yield Sample(
                    {x: S.array(rng, shape, dt, low=low, high=high, special=dt.is_float), **(sample_extra or {})},
                    f"{dt.short} {list(shape)}",
                )

    return OpSpec(name, FAMILY, params, infer, alias_ok=True, samples=gen)


# ----------------------------------------------------------------------------- declarations
_Add = tensor_tensor("Add", ALL, alpha="alpha")
_Sub = tensor_tensor("Sub", ALL - {D.ACL_BOOL}, alpha="alpha")
_Mul = tensor_tensor("Mul", ALL)
_Div = tensor_tensor("Div", ALL, result=float_result, positive_b=True)


def _div_mod() -> OpSpec:
    base = tensor_tensor(
        "DivMod",
        REAL,
        extra=(int_attr("mode", c_type="int", choices=(0, 1, 2)),),
        positive_b=True,
        sample_extra={"mode": 2},
        sample_dtypes=(D.ACL_FLOAT, D.ACL_INT32),
    )

    def infer(call: Call) -> Infos:
        infos = base.infer(call)
        info = infos["out"]
        assert isinstance(info, OutInfo)
        if call.args["mode"] == 0:  # true division: integers give float32
            return {"out": castable(info.shape, float_result(call.plan["compute"]))}
        return infos

    return replace(base, infer=infer)


_DivMod = _div_mod()
_PowTT = tensor_tensor(
    "PowTensorTensor", REAL, b="exponent", sample_dtypes=(D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_INT32), positive_b=True
)
_Maximum = tensor_tensor("Maximum", REAL_BOOL)
_Minimum = tensor_tensor("Minimum", REAL_BOOL)
_Adds = tensor_scalar("Adds", ALL, alpha="alpha")
_Subs = tensor_scalar("Subs", ALL - {D.ACL_BOOL}, alpha="alpha")
_Muls = tensor_scalar("Muls", ALL)
_Divs = tensor_scalar("Divs", ALL, result=float_result)
_PowTS = tensor_scalar("PowTensorScalar", REAL, s="exponent", scalar_values=(2, 0.5, 3.0), positive=True)
_AddV3 = scalar_tensor("AddV3", REAL, alpha="alpha")
_FloorDivide = tensor_tensor("FloorDivide", REAL, positive_b=True, sample_dtypes=(*SAMPLE_DTYPES, D.ACL_INT8))
_FloorDivides = tensor_scalar("FloorDivides", REAL, scalar_values=(2.5, 3, -2))
_XLogYTensor = tensor_tensor("XLogYTensor", REAL_BOOL, result=float_result, positive_b=True)
_XLogYScalarSelf = scalar_tensor("XLogYScalarSelf", REAL_BOOL, result=float_result, positive=True)
_XLogYScalarOther = tensor_scalar("XLogYScalarOther", REAL_BOOL, result=float_result, scalar_values=(2.5, 3, 0.0))
_PowST = scalar_tensor("PowScalarTensor", REAL, t="exponent")

_COMPARE = ("Eq", "Ne", "Gt", "Ge", "Lt", "Le")
_compare_tensor = [tensor_tensor(f"{op}Tensor", REAL_BOOL, result=_bool, out_dtypes=REAL_BOOL) for op in _COMPARE]
_compare_scalar = [
    tensor_scalar(f"{op}Scalar", REAL_BOOL, result=_bool, out_dtypes=REAL_BOOL, scalar_values=(0.5, 1))
    for op in _COMPARE
]
_LogicalAnd = tensor_tensor("LogicalAnd", REAL_BOOL, result=_bool, out_dtypes=REAL_BOOL)
_LogicalOr = tensor_tensor("LogicalOr", REAL_BOOL, result=_bool, out_dtypes=REAL_BOOL)
_LogicalXor = tensor_tensor("LogicalXor", REAL_BOOL, result=_bool, out_dtypes=REAL_BOOL)
_LogicalNot = unary("LogicalNot", REAL_BOOL, result=_bool)

_SIGNED_REAL = FLOATS64 | frozenset({D.ACL_INT8, D.ACL_INT16, D.ACL_INT32, D.ACL_INT64})
_FLOAT_IN = REAL_BOOL
_unaries = [
    unary("Abs", _SIGNED_REAL | {D.ACL_UINT8}),
    unary("Neg", _SIGNED_REAL | frozenset({D.ACL_COMPLEX64, D.ACL_COMPLEX128})),
    unary("Exp", _FLOAT_IN, result=float_result),
    unary("Log", _FLOAT_IN, result=float_result, low=0.01, high=8.0),
    unary("Sqrt", _FLOAT_IN, result=float_result, low=0.0, high=8.0),
    unary("Rsqrt", _FLOAT_IN, result=float_result, low=0.05, high=8.0),
    unary("Reciprocal", _FLOAT_IN, result=float_result, low=0.25, high=4.0),
    unary("Sin", _FLOAT_IN, result=float_result),
    unary("Cos", _FLOAT_IN, x="input", result=float_result),
    unary("Tanh", _FLOAT_IN, result=float_result),
    unary("Sigmoid", FLOATS64, result=float_result),
    unary("Relu", REAL),
    unary("Gelu", FLOATS64),
    unary(
        "GeluV2",
        FLOATS,
        x="x",
        y="y",
        extra=(int_attr("approximate", choices=(0, 1)),),
        sample_extra={"approximate": 1},
    ),
    unary("FastGelu", FLOATS64),
    unary("Silu", FLOATS64),
    unary("Erf", _FLOAT_IN, result=float_result),
    unary("Floor", FLOATS64 | INTEGERS),
    unary("Ceil", FLOATS64 | INTEGERS),
    unary("Round", FLOATS64 | INTEGERS),
    unary("Sign", _SIGNED_REAL | {D.ACL_BOOL}, y="result"),
]


def _clamp() -> OpSpec:
    params = (
        tensor("self", REAL),
        scalar("clipValueMin", optional=True),
        scalar("clipValueMax", optional=True),
        out("out", REAL),
    )

    def infer(call: Call) -> Infos:
        t = tensor_arg(call, "self")
        lo, hi = _scalar_dtype(call, "clipValueMin"), _scalar_dtype(call, "clipValueMax")
        if lo is None and hi is None:
            raise invalid("clipValueMin and clipValueMax cannot both be null")
        compute = t.dtype
        for s in (lo, hi):
            if s is not None:
                compute = promote_with_scalar(compute, s)
        call.plan["compute"] = compute
        return {"out": castable(t.shape, compute)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_INT32):
            for shape in S.ELEMENTWISE_SHAPES:
                x = S.array(rng, shape, dt)
                yield Sample({"self": x, "clipValueMin": -1, "clipValueMax": 2}, f"{dt.short} {list(shape)} [-1, 2]")
                yield Sample({"self": x, "clipValueMin": None, "clipValueMax": 1}, f"{dt.short} {list(shape)} max only")

    return OpSpec("Clamp", FAMILY, params, infer, alias_ok=True, samples=gen)


def _swhere() -> OpSpec:
    params = (
        tensor("condition", {D.ACL_BOOL, D.ACL_UINT8}),
        tensor("self", ALL),
        tensor("other", ALL),
        out("out", ALL),
    )

    def infer(call: Call) -> Infos:
        c, a, b = (tensor_arg(call, n) for n in ("condition", "self", "other"))
        shape = broadcast_shapes(c.shape, a.shape, b.shape, names=("condition", "self", "other"))
        compute = promote_types(a.dtype, b.dtype)
        call.plan["compute"] = compute
        return {"out": castable(shape, compute)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_INT64):
            for sa, sb in S.BROADCAST_PAIRS:
                yield Sample(
                    {
                        "condition": S.array(rng, sb, D.ACL_BOOL),
                        "self": S.array(rng, sa, dt),
                        "other": S.array(rng, sb, dt),
                    },
                    f"{dt.short} {list(sa)}",
                )

    return OpSpec(
        "SWhere",
        FAMILY,
        params,
        infer,
        alias_ok=True,
        samples=gen,
        error_samples=lambda rng: [
            ErrorSample(
                {
                    "condition": S.array(rng, (3,), D.ACL_FLOAT),
                    "self": S.array(rng, (3,), D.ACL_FLOAT),
                    "other": S.array(rng, (3,), D.ACL_FLOAT),
                },
                INVALID,
                "float condition",
            ),
        ],
    )


def _masked_fill(name: str, value_param: Param) -> OpSpec:
    params = (ref("selfRef", ALL), tensor("mask", {D.ACL_BOOL}), value_param)

    def infer(call: Call) -> Infos:
        s, m = tensor_arg(call, "selfRef"), tensor_arg(call, "mask")
        if broadcast_shapes(s.shape, m.shape, names=("selfRef", "mask")) != tuple(s.shape):
            raise invalid(f"mask {list(m.shape)} must broadcast to selfRef {list(s.shape)}")
        if value_param.kind.value == "aclTensor*" and tensor_arg(call, "value").numel != 1:
            raise invalid("value must hold exactly one element")
        return {"selfRef": same(s.shape, s.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_INT32):
            value: object = 7 if value_param.kind.value == "aclScalar*" else np.array(7, dt.numpy)
            yield Sample(
                {"selfRef": S.array(rng, (4, 5), dt), "mask": S.array(rng, (5,), D.ACL_BOOL), "value": value}, dt.short
            )
            yield Sample(
                {"selfRef": S.array(rng, (0, 5), dt), "mask": S.array(rng, (0, 5), D.ACL_BOOL), "value": value},
                f"{dt.short} empty",
            )

    return OpSpec(name, FAMILY, params, infer, samples=gen)


LOW_PRECISION = frozenset(
    {D.ACL_FLOAT8_E4M3FN, D.ACL_FLOAT8_E5M2, D.ACL_FLOAT8_E8M0, D.ACL_HIFLOAT8, D.ACL_FLOAT4_E2M1, D.ACL_INT4}
)
"""The 8- and 4-bit types Cast converts to and from (issue 6; rounding rules in acl_core.lowp)."""
CAST_TYPES = ANY_STORAGE | LOW_PRECISION


def _cast() -> OpSpec:
    params = (tensor("self", CAST_TYPES), dtype_attr("dtype"), out("out", CAST_TYPES))

    def infer(call: Call) -> Infos:
        t = tensor_arg(call, "self")
        target = D(call.args["dtype"])
        if target.numpy is None and target not in CAST_TYPES:
            raise invalid(f"cannot cast to {target.name}")
        return {"out": same(t.shape, target)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        kinds = (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16, D.ACL_INT32, D.ACL_INT8, D.ACL_BOOL, D.ACL_DOUBLE)
        for src in kinds:
            for dst in kinds:
                x = S.array(rng, (3, 5), src, low=-100, high=100)
                yield Sample({"self": x, "dtype": int(dst)}, f"{src.short}→{dst.short}")
        yield Sample({"self": S.array(rng, (0,), D.ACL_FLOAT), "dtype": int(D.ACL_INT32)}, "empty")
        for low in sorted(LOW_PRECISION - {D.ACL_HIFLOAT8}):  # HiFloat8 has no NumPy type for samples
            ranges = {D.ACL_FLOAT8_E8M0: (0.01, 300.0), D.ACL_INT4: (-8.0, 7.5)}  # E8M0: powers of two; INT4: [-8, 7]
            lo, hi = ranges.get(low, (-10.0, 10.0))
            x = S.array(rng, (3, 6), D.ACL_FLOAT, low=lo, high=hi)
            yield Sample({"self": x, "dtype": int(low)}, f"float32→{low.short}")
            yield Sample({"self": x.astype(low.numpy), "dtype": int(D.ACL_BF16)}, f"{low.short}→bf16")

    return OpSpec("Cast", FAMILY, params, infer, samples=gen)


def _inplace_copy() -> OpSpec:
    params = (ref("selfRef", ANY_STORAGE), tensor("src", ANY_STORAGE))

    def infer(call: Call) -> Infos:
        s, src = tensor_arg(call, "selfRef"), tensor_arg(call, "src")
        if broadcast_shapes(s.shape, src.shape, names=("selfRef", "src")) != tuple(s.shape):
            raise invalid(f"src {list(src.shape)} must broadcast to selfRef {list(s.shape)}")
        return {"selfRef": same(s.shape, s.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        yield Sample(
            {"selfRef": S.array(rng, (3, 4), D.ACL_FLOAT), "src": S.array(rng, (4,), D.ACL_FLOAT16)},
            "broadcast with cast",
        )
        yield Sample(
            {"selfRef": S.array(rng, (2, 3), D.ACL_INT32), "src": S.array(rng, (2, 3), D.ACL_INT32)}, "same dtype"
        )

    return OpSpec("InplaceCopy", FAMILY, params, infer, samples=gen)


def _inplace_fill_scalar() -> OpSpec:
    params = (ref("selfRef", ALL), scalar("value"))

    def infer(call: Call) -> Infos:
        s = tensor_arg(call, "selfRef")
        return {"selfRef": same(s.shape, s.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in (D.ACL_FLOAT, D.ACL_BF16, D.ACL_INT64, D.ACL_BOOL):
            yield Sample({"selfRef": S.array(rng, (3, 4), dt), "value": 1}, dt.short)

    return OpSpec("InplaceFillScalar", FAMILY, params, infer, samples=gen)


def _inplace_zero() -> OpSpec:
    params = (ref("selfRef", ANY_STORAGE),)

    def infer(call: Call) -> Infos:
        s = tensor_arg(call, "selfRef")
        return {"selfRef": same(s.shape, s.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in (D.ACL_FLOAT, D.ACL_INT8, D.ACL_BOOL):
            yield Sample({"selfRef": S.array(rng, (5, 3), dt)}, dt.short)

    return OpSpec("InplaceZero", FAMILY, params, infer, samples=gen)


_base: list[OpSpec] = [
    _Add,
    _Sub,
    _Mul,
    _Div,
    _DivMod,
    _PowTT,
    _Maximum,
    _Minimum,
    _Adds,
    _Subs,
    _Muls,
    _Divs,
    _PowTS,
    _AddV3,
    _PowST,
    _FloorDivide,
    _FloorDivides,
    _XLogYTensor,
    _XLogYScalarSelf,
    _XLogYScalarOther,
    *_compare_tensor,
    *_compare_scalar,
    _LogicalAnd,
    _LogicalOr,
    _LogicalXor,
    _LogicalNot,
    *_unaries,
    _clamp(),
    _swhere(),
    _masked_fill("InplaceMaskedFillScalar", scalar("value")),
    _masked_fill("InplaceMaskedFillTensor", tensor("value", ALL)),
    _cast(),
    _inplace_copy(),
    _inplace_fill_scalar(),
    _inplace_zero(),
]
_XLOGY = ("XLogYTensor", "XLogYScalarSelf", "XLogYScalarOther")
_UNSIGNED_ZERO = exact(
    "exactly rounded; the sign of a zero result is not specified (max/min/relu of ±0)", signed_zero=False
)
_CANCELS = (
    "the tanh form 0.5·x·(1 + tanh(u)) cancels for x < 0, and its float64 reference with it; the erf form"
    " (approximate=0) is Gelu's, but one class covers both"
)
ACCURACY: dict[str, Accuracy] = {
    # CUDA C Programming Guide, float32 maximum ulp errors (float64 bounds are tighter; +1 for NumPy's libm)
    "Exp": ulp(2),
    "Log": ulp(1),
    "Sin": ulp(2),
    "Cos": ulp(2),
    "Tanh": ulp(2),
    "Erf": ulp(2),
    "Rsqrt": ulp(2, reason="1/sqrt: two correctly rounded steps (CUDA's rsqrtf bound is 2 ulp)"),
    **{op: ulp(4) for op in ("PowTensorTensor", "PowTensorScalar", "PowScalarTensor")},
    **{op: ulp(2, reason="self·log(other): logf's 1 ulp and one multiplication") for op in _XLOGY},
    "Sigmoid": ulp(4, reason="1/(1+exp(-x)): expf's 2 ulp, then an add and a division"),
    "Silu": ulp(5, reason="x·sigmoid(x): sigmoid's 4 ulp and one multiplication"),
    "Gelu": ulp(
        1,
        float64=8,
        reason="0.5·x·erfc(-x/√2), no cancellation for x < 0: float32 evaluated in double then rounded once"
        " (1 ulp); float64 within erfc's 5 ulp plus the reference's own 3 (both carry the rounding of x/√2)",
    ),
    "GeluV2": table(_CANCELS),
    "FastGelu": table("x·sigmoid(1.702x): the float32 constant and product shift sigmoid's argument by ~|x| ulp"),
    **{op: _UNSIGNED_ZERO for op in ("Maximum", "Minimum", "Clamp", "Relu", "Sign")},
}
"""Ops whose class is not the family's default (exactly rounded)."""
_base = with_accuracy(_base, ACCURACY)
_by_name = {s.name: s for s in _base}

# In-place twins, with the official name of their in-out parameter.
_TWINS: dict[str, str] = {
    "Add": "selfRef",
    "Sub": "selfRef",
    "Mul": "selfRef",
    "Div": "selfRef",
    "DivMod": "selfRef",
    "PowTensorTensor": "self",
    "Adds": "selfRef",
    "Subs": "selfRef",
    "Muls": "selfRef",
    "Divs": "selfRef",
    "FloorDivide": "selfRef",
    "FloorDivides": "selfRef",
    "XLogYTensor": "selfRef",
    "XLogYScalarOther": "selfRef",
    "PowTensorScalar": "self",
    "LogicalAnd": "selfRef",
    "LogicalOr": "selfRef",
    "LogicalNot": "selfRef",
    "Neg": "selfRef",
    "Exp": "selfRef",
    "Log": "selfRef",
    "Sqrt": "self",
    "Rsqrt": "selfRef",
    "Reciprocal": "selfRef",
    "Sin": "selfRef",
    "Cos": "inputRef",
    "Tanh": "selfRef",
    "Sigmoid": "selfRef",
    "Relu": "selfRef",
    "Erf": "selfRef",
    "Floor": "selfRef",
    "Ceil": "selfRef",
    "Round": "selfRef",
    **{f"{op}Tensor": "selfRef" for op in _COMPARE},
    **{f"{op}Scalar": "selfRef" for op in _COMPARE},
}
_twins = [
    inplace_twin(
        _by_name[op],
        ref_name=ref_name,
        self_name=_by_name[op].params[0].name,
        out_name=_by_name[op].outputs[0].name,
    )
    for op, ref_name in _TWINS.items()
]


def _inplace_add_v3(base: OpSpec) -> OpSpec:
    """aclnnInplaceAddV3: the official prototype names the scalar ``selfRef``; the tensor ``other`` is updated.

    other = selfRef + alpha * other, written back into ``other`` (its only tensor).
    """
    params = (scalar("selfRef"), ref("other", REAL, c_type="const aclTensor*"), scalar("alpha"))

    def to_base(args: Mapping[str, object]) -> dict[str, object]:
        return {"self": args["selfRef"], "other": args["other"], "alpha": args["alpha"], "out": args["other"]}

    def infer(call: Call) -> Infos:
        base_call = Call(base, to_base(call.args))
        info = base.infer(base_call)["out"]
        call.plan.update(base_call.plan)
        assert isinstance(info, OutInfo)
        return {"other": castable(info.shape, info.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16):
            for shape in S.ELEMENTWISE_SHAPES:
                yield Sample(
                    {"selfRef": 1.5, "other": S.array(rng, shape, dt), "alpha": 2}, f"{dt.short} {list(shape)}"
                )

    return OpSpec(
        "InplaceAddV3",
        FAMILY,
        params,
        infer,
        alias_ok=True,
        samples=gen,
        base="AddV3",
        base_args=to_base,
        summary="other = selfRef + alpha * other, in place on the tensor",
    )


SPECS: list[OpSpec] = [*_base, *_twins, _inplace_add_v3(_AddV3)]

"""The Foreach* operators (issue 16): one elementwise op applied to every tensor of a list, from one table.

Each row of :data:`ROWS` names an operator, its per-element formula (a key of :data:`FORMULAS`, shared
by the reference and the rocm kernels), its official parameters in order (tensor lists, then the
scalar-like operand in its official place, then ``out``), its dtypes and its accuracy class. Every
operator is out-of-place into ``out`` unless its name ends in ``Inplace`` (its first list is then
written); ``out`` may be the very same views as the first list (torch's ``_foreach_xxx_``).

Roles: the input lists are ``a``, ``b``, ``c`` in official order; the scalar-like operand is ``s``,
carried as one of four kinds (:class:`Carrier`): a one-element aclTensor, an aclTensor with one
value per list entry, an aclScalar, or an aclScalarList with one value per list entry.

Choices where the CANN docs are silent or not transcribed in tests/data/cann:

* dtypes: FLOAT, FLOAT16 and BFLOAT16 everywhere; INT32 too for the ops exact on integers (Abs, Neg,
  Add/Sub/Mul/Maximum/Minimum of two lists or with a scalar) and Copy / ZeroInplace (which also take
  INT8, INT16, INT64, UINT8, BOOL and DOUBLE: they move data);
* every tensor of every list has one dtype; lists have equal lengths (at least one tensor) and the
  tensors at one index have one shape (no broadcasting); ``out[i]`` has ``x[i]``'s shape and dtype;
* a scalar tensor (``scalar``, ``alpha``, ``roundMode``) has one element; a per-entry ``scalars``
  tensor is one-dimensional with one element per list entry; scalar tensors are float (any of
  FLOAT/FLOAT16/BFLOAT16) for float lists and INT32 for int32 lists; scalars of float lists are
  rounded to float32 before computing, those of int32 lists truncated toward zero and wrapped to int32
  (the low 32 bits of the exact integer: :func:`int32_scalar`; NaN and ±Inf give 0);
* the formula is evaluated in double (int64 for int32) and rounded once to the list's dtype, so the
  +, −, ×, ÷ formulas are exactly rounded; the ops whose elementwise twin has a HIP body reuse it, in
  float32, and take that twin's accuracy class;
* the ForeachPow ops follow C99 / IEEE 754 ``pow`` like the elementwise Pow operators;
* ForeachNorm: ``scalar`` is p (±inf: max/min of |x|, 0: the count of non-zeros, else the p-norm);
  ``out[i]`` is 0-d (torch's ``_foreach_norm``) or one-element 1-d, as the caller allocates it;
* ForeachRoundOffNumber(V2): ``roundMode`` 1 rint (half to even), 2 floor, 3 ceil, 4 round (half away
  from zero), 5 trunc, 6 frac (op-plugin's mapping of torch's _foreach_round/floor/ceil/trunc/frac);
  V1 reads the mode from device memory, so a mode outside 1..6 is a kernel-side 161002;
* ForeachNonFiniteCheckAndUnscale: ``foundInf`` and ``invScale`` are one-element FLOAT tensors;
  ``foundInf`` becomes 1.0 when any element of any gradient is NaN or ±Inf (and is otherwise left
  unchanged), and every gradient is multiplied by ``invScale`` (torch's
  ``_amp_foreach_non_finite_check_and_unscale_``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.spec import samples as S
from acl_core.spec.accuracy import Accuracy, exact, reduction, ulp
from acl_core.spec.opspec import (
    INVALID,
    Call,
    ErrorSample,
    Infos,
    Kind,
    OpSpec,
    OutInfo,
    Param,
    Role,
    Sample,
    invalid,
    scalar,
    scalar_list,
    tensor,
    tensor_list,
)
from acl_core.spec.rules import FLOATS, same
from acl_core.tensor import AclScalar, AclScalarList, AclTensor, AclTensorList


def int32_scalar(value: Any) -> int:
    """A host scalar as an int32 list's kernel takes it: truncated toward zero, wrapped to 32 bits (NaN/Inf: 0)."""
    if isinstance(value, (bool, int, np.integer)):
        whole = int(value)
    else:
        real = complex(value).real
        if not math.isfinite(real):
            return 0
        whole = math.trunc(real)
    wrapped = whole & 0xFFFFFFFF
    return wrapped - (1 << 32) if wrapped >= 1 << 31 else wrapped


FAMILY = "foreach"
INT_LISTS = frozenset({D.ACL_INT32})
EXACT_DTYPES = FLOATS | INT_LISTS
COPY_DTYPES = FLOATS | frozenset(
    {D.ACL_DOUBLE, D.ACL_INT8, D.ACL_INT16, D.ACL_INT32, D.ACL_INT64, D.ACL_UINT8, D.ACL_BOOL}
)
ROUND_MODES = (1, 2, 3, 4, 5, 6)
"""rint, floor, ceil, round (half away from zero), trunc, frac."""

_EXACT = exact("evaluated in double (int64 for int32 lists) and rounded once to the list's dtype")
_UNSIGNED_ZERO = exact("exactly rounded; the sign of a zero result is not specified (max/min of ±0)", signed_zero=False)
_LIBM = ulp(1, reason="evaluated in double with the C library (within a few double ulps), rounded once")
_POW = ulp(1, reason="pow evaluated in double (within a double ulp), rounded once")


class Carrier(str, Enum):
    """How the scalar-like operand ``s`` reaches the operator."""

    NONE = "none"
    TENSOR = "tensor"  # a one-element aclTensor (device memory)
    PER_ENTRY = "per_entry"  # an aclTensor with one value per list entry
    SCALAR = "scalar"  # an aclScalar (host)
    SCALAR_LIST = "scalar_list"  # an aclScalarList, one per list entry


@dataclass(frozen=True)
class Formula:
    """One per-element computation over the roles a, b, c (list elements) and s (the scalar-like operand).

    ``ufunc`` names the elementwise op whose HIP body the rocm kernel reuses (bound to ``a`` through
    ``binds``), None when the body here is the kernel's; ``accuracy`` is its class.
    """

    key: str
    accuracy: Accuracy
    ufunc: str | None = None
    binds: tuple[tuple[str, str], ...] = ()


def _f(key: str, accuracy: Accuracy = _EXACT) -> Formula:
    return Formula(key, accuracy)


def _u(key: str, ufunc: str, accuracy: Accuracy, param: str = "self") -> Formula:
    return Formula(key, accuracy, ufunc, ((param, "a"),))


_CUDA = "CUDA's float32 bound for the function, evaluated in float32 by the elementwise op's own body"
FORMULAS: dict[str, Formula] = {
    f.key: f
    for f in (
        _u("abs", "Abs", _EXACT),
        _u("neg", "Neg", _EXACT),
        _u("exp", "Exp", ulp(2, reason=_CUDA)),
        _u("log", "Log", ulp(1, reason=_CUDA)),
        _u("sqrt", "Sqrt", exact("correctly rounded sqrt in float32")),
        _u("reciprocal", "Reciprocal", exact("one correctly rounded division")),
        _u("sin", "Sin", ulp(2, reason=_CUDA)),
        _u("cos", "Cos", ulp(2, reason=_CUDA), "input"),
        _u("tanh", "Tanh", ulp(2, reason=_CUDA)),
        _u("sigmoid", "Sigmoid", ulp(4, reason="1/(1+exp(-x)): expf's 2 ulp, then an add and a division")),
        _u("erf", "Erf", ulp(2, reason=_CUDA)),
        _u("sign", "Sign", _UNSIGNED_ZERO),
        *(_f(k, _LIBM) for k in ("acos", "asin", "atan", "cosh", "sinh", "tan", "erfc", "expm1")),
        *(_f(k, _LIBM) for k in ("log10", "log1p", "log2")),
        _f("copy"),
        _f("zero"),
        _f("add_list"),
        _f("sub_list"),
        _f("mul_list"),
        _f("div_list"),
        _f("max_list", _UNSIGNED_ZERO),
        _f("min_list", _UNSIGNED_ZERO),
        _f("pow_list", _POW),
        _f("add_s"),
        _f("sub_s"),
        _f("mul_s"),
        _f("div_s"),
        _f("max_s", _UNSIGNED_ZERO),
        _f("min_s", _UNSIGNED_ZERO),
        _f("pow_s", _POW),
        _f("pow_s_a", _POW),
        _f("addcdiv"),
        _f("addcmul"),
        _f("lerp_list"),
        _f("lerp_s"),
        _f("round", exact("rounding to an integer is exact")),
        _f("norm", reduction(length_of=lambda args, outputs: _longest(args))),
        _f("unscale"),
    )
}
"""Every per-element computation, by key."""


def _longest(args: Mapping[str, Any]) -> int:
    sizes = [int(np.asarray(a).size) for v in args.values() if isinstance(v, list) for a in v]
    return max(sizes, default=1)


@dataclass(frozen=True)
class Row:
    """One Foreach operator: official parameters in order and its per-element formula."""

    name: str
    formula: str
    params: tuple[Param, ...]
    dtypes: frozenset[D]
    carrier: Carrier = Carrier.NONE
    scalar_values: tuple[float, ...] = (1.5,)
    positive: bool = False  # inputs drawn from (0.1, 4) (log, sqrt, pow bases)
    unit: bool = False  # inputs drawn from (-1, 1) (acos, asin)

    @property
    def lists(self) -> tuple[str, ...]:
        """The input (or in-out) tensor lists, in official order."""
        return tuple(p.name for p in self.params if p.kind is Kind.TENSOR_LIST and p.role is not Role.OUT)

    @property
    def scalar_param(self) -> str | None:
        """The official name of the scalar-like operand, if any."""
        for p in self.params:
            if p.kind in (Kind.SCALAR, Kind.SCALAR_LIST) or (p.kind is Kind.TENSOR and p.role is Role.IN):
                return p.name
        return None

    @property
    def out(self) -> str | None:
        """The output list's name (None for an in-place op)."""
        return next((p.name for p in self.params if p.kind is Kind.TENSOR_LIST and p.role is Role.OUT), None)


# ----------------------------------------------------------------------------- parameter builders
def _x(name: str, dtypes: Iterable[D]) -> Param:
    return tensor_list(name, dtypes)


def _out(dtypes: Iterable[D], v2: bool) -> Param:
    return tensor_list("out", dtypes, role=Role.OUT, c_type="aclTensorList*" if v2 else "const aclTensorList*")


def _carrier_param(name: str, carrier: Carrier) -> Param:
    if carrier is Carrier.SCALAR:
        return scalar(name)
    if carrier is Carrier.SCALAR_LIST:
        return scalar_list(name)
    return tensor(name, EXACT_DTYPES | {D.ACL_INT8}, max_rank=1)


_UNARY: tuple[tuple[str, str, frozenset[D]], ...] = (
    ("Abs", "abs", EXACT_DTYPES),
    ("Acos", "acos", FLOATS),
    ("Asin", "asin", FLOATS),
    ("Atan", "atan", FLOATS),
    ("Cos", "cos", FLOATS),
    ("Cosh", "cosh", FLOATS),
    ("Erf", "erf", FLOATS),
    ("Erfc", "erfc", FLOATS),
    ("Exp", "exp", FLOATS),
    ("Expm1", "expm1", FLOATS),
    ("Log", "log", FLOATS),
    ("Log10", "log10", FLOATS),
    ("Log1p", "log1p", FLOATS),
    ("Log2", "log2", FLOATS),
    ("Neg", "neg", EXACT_DTYPES),
    ("Reciprocal", "reciprocal", FLOATS),
    ("Sigmoid", "sigmoid", FLOATS),
    ("Sign", "sign", FLOATS),
    ("Sin", "sin", FLOATS),
    ("Sinh", "sinh", FLOATS),
    ("Sqrt", "sqrt", FLOATS),
    ("Tan", "tan", FLOATS),
    ("Tanh", "tanh", FLOATS),
    ("Copy", "copy", COPY_DTYPES),
)
_POSITIVE = frozenset({"log", "log10", "log2", "sqrt", "log1p"})
_UNIT = frozenset({"acos", "asin"})

_BINARY: tuple[tuple[str, str, frozenset[D]], ...] = (
    ("Add", "add", EXACT_DTYPES),
    ("Sub", "sub", EXACT_DTYPES),
    ("Mul", "mul", EXACT_DTYPES),
    ("Div", "div", FLOATS),
    ("Maximum", "max", EXACT_DTYPES),
    ("Minimum", "min", EXACT_DTYPES),
    ("Pow", "pow", FLOATS),
)
"""The ops that come as ...List, ...Scalar (tensor), ...ScalarV2 (aclScalar) and ...ScalarList."""


def _rows() -> list[Row]:
    rows: list[Row] = []
    params: tuple[Param, ...]
    lists: tuple[Param, ...]
    for op, key, dts in _UNARY:
        params = (_x("x", dts), _out(dts, False))
        rows.append(Row(f"Foreach{op}", key, params, dts, positive=key in _POSITIVE, unit=key in _UNIT))
    rows.append(Row("ForeachZeroInplace", "zero", (tensor_list("x", COPY_DTYPES, role=Role.INOUT),), COPY_DTYPES))
    for op, key, dts in _BINARY:
        pos = key == "pow"
        # two lists: Add and Sub scale the second by alpha (a tensor; an aclScalar in V2)
        if key in ("add", "sub"):
            for suffix, carrier in (("List", Carrier.TENSOR), ("ListV2", Carrier.SCALAR)):
                v2 = suffix.endswith("V2")
                params = (_x("x1", dts), _x("x2", dts), _carrier_param("alpha", carrier), _out(dts, v2))
                rows.append(Row(f"Foreach{op}{suffix}", f"{key}_list", params, dts, carrier, (1.0, -2.5)))
        else:
            params = (_x("x1", dts), _x("x2", dts), _out(dts, False))
            rows.append(Row(f"Foreach{op}List", f"{key}_list", params, dts, positive=pos))
        for suffix, carrier, sname in (
            ("Scalar", Carrier.TENSOR, "scalar"),
            ("ScalarV2", Carrier.SCALAR, "scalar"),
            ("ScalarList", Carrier.SCALAR_LIST, "scalars"),
        ):
            params = (_x("x", dts), _carrier_param(sname, carrier), _out(dts, suffix == "ScalarV2"))
            values = (2.0, 0.5) if pos else (1.5, -3.0)
            rows.append(Row(f"Foreach{op}{suffix}", f"{key}_s", params, dts, carrier, values, positive=pos))
    params = (_carrier_param("scalar", Carrier.SCALAR), _x("x", FLOATS), _out(FLOATS, False))
    rows.append(Row("ForeachPowScalarAndTensor", "pow_s_a", params, FLOATS, Carrier.SCALAR, (2.0, 0.5)))
    for op in ("Addcdiv", "Addcmul"):
        key = op.lower()
        for suffix, carrier, sname in (
            ("List", Carrier.PER_ENTRY, "scalars"),
            ("Scalar", Carrier.TENSOR, "scalar"),
            ("ScalarList", Carrier.PER_ENTRY, "scalars"),
            ("ScalarV2", Carrier.SCALAR, "scalar"),
        ):
            lists = (_x("x1", FLOATS), _x("x2", FLOATS), _x("x3", FLOATS))
            params = (*lists, _carrier_param(sname, carrier), _out(FLOATS, suffix == "ScalarV2"))
            rows.append(Row(f"Foreach{op}{suffix}", key, params, FLOATS, carrier, (0.5, -2.0)))
    lists = (_x("x1", FLOATS), _x("x2", FLOATS))
    rows.append(Row("ForeachLerpList", "lerp_list", (*lists, _x("weight", FLOATS), _out(FLOATS, False)), FLOATS))
    params = (*lists, _carrier_param("weight", Carrier.SCALAR), _out(FLOATS, False))
    rows.append(Row("ForeachLerpScalar", "lerp_s", params, FLOATS, Carrier.SCALAR, (0.25, 1.5)))
    params = (_x("x", FLOATS), _carrier_param("scalar", Carrier.SCALAR), _out(FLOATS, False))
    norms = (2.0, 1.0, 3.0, 0.0, math.inf)  # inf last: its sample lists hold no empty tensor
    rows.append(Row("ForeachNorm", "norm", params, FLOATS, Carrier.SCALAR, norms))
    for suffix, carrier in (("", Carrier.TENSOR), ("V2", Carrier.SCALAR)):
        params = (_x("x", FLOATS), _carrier_param("roundMode", carrier), _out(FLOATS, bool(suffix)))
        rows.append(Row(f"ForeachRoundOffNumber{suffix}", "round", params, FLOATS, carrier, ROUND_MODES))
    params = (
        tensor_list("scaledGrads", FLOATS, role=Role.INOUT, c_type="const aclTensorList*"),
        Param("foundInf", Kind.TENSOR, "const aclTensor*", Role.INOUT, dtypes=frozenset({D.ACL_FLOAT}), max_rank=1),
        tensor("invScale", {D.ACL_FLOAT}, max_rank=1),
    )
    rows.append(Row("ForeachNonFiniteCheckAndUnscale", "unscale", params, FLOATS, Carrier.TENSOR, (0.5,)))
    return rows


ROWS: tuple[Row, ...] = tuple(_rows())
"""Every Foreach operator."""
ROW_BY_NAME: dict[str, Row] = {r.name: r for r in ROWS}


# ----------------------------------------------------------------------------- validation
def _list_arg(call: Call, name: str) -> tuple[AclTensor, ...]:
    tl = call.args[name]
    assert isinstance(tl, AclTensorList), name
    return tl.tensors


def _check_lists(row: Row, call: Call) -> tuple[tuple[AclTensor, ...], D]:
    first = _list_arg(call, row.lists[0])
    if not first:
        raise invalid(f"{row.lists[0]} is empty; a Foreach operator needs at least one tensor")
    dtype = first[0].dtype
    for name in row.lists:
        tensors = _list_arg(call, name)
        if len(tensors) != len(first):
            raise invalid(f"{name} holds {len(tensors)} tensors; {row.lists[0]} holds {len(first)}")
        for i, (t, t0) in enumerate(zip(tensors, first)):
            if t.dtype != dtype:
                raise invalid(f"{name}[{i}] has dtype {t.dtype.short}; {row.lists[0]}[0] has {dtype.short}")
            if tuple(t.view_dims) != tuple(t0.view_dims):
                raise invalid(
                    f"{name}[{i}] has shape {list(t.view_dims)}; {row.lists[0]}[{i}] has {list(t0.view_dims)}"
                )
    return first, dtype


def _check_carrier(row: Row, call: Call, n: int, dtype: D) -> None:
    name = row.scalar_param
    if name is None or row.carrier is Carrier.NONE:
        return
    value = call.args.get(name)
    if row.carrier is Carrier.SCALAR_LIST:
        assert isinstance(value, AclScalarList)
        if len(value.scalars) != n:
            raise invalid(f"{name} holds {len(value.scalars)} scalars; the lists hold {n} tensors")
        return
    if row.carrier is Carrier.SCALAR:
        assert isinstance(value, AclScalar)
        if row.formula == "round" and value.value not in ROUND_MODES:
            raise invalid(f"roundMode={value.value!r} is not one of {list(ROUND_MODES)}")
        if row.formula == "norm" and isinstance(value.value, float) and math.isnan(value.value):
            raise invalid("the norm's order p (scalar) is NaN")
        return
    assert isinstance(value, AclTensor)
    want = n if row.carrier is Carrier.PER_ENTRY else 1
    if value.numel != want:
        raise invalid(f"{name} holds {value.numel} elements; expected {want}")
    if row.carrier is Carrier.PER_ENTRY and value.rank != 1:
        raise invalid(f"{name} must be one-dimensional, not of rank {value.rank}")
    if row.formula == "round":
        if value.dtype != D.ACL_INT8:
            raise invalid(f"roundMode has dtype {value.dtype.short}; expected INT8")
    elif row.formula == "unscale":
        pass  # a declared FLOAT tensor
    elif dtype in INT_LISTS and value.dtype not in INT_LISTS:
        raise invalid(f"{name} has dtype {value.dtype.short}; an int32 list takes an INT32 {name}")
    elif dtype.is_float and not value.dtype.is_float:
        raise invalid(f"{name} has dtype {value.dtype.short}; a float list takes a float {name}")


def _spec_infer(row: Row) -> Any:
    def infer(call: Call) -> Infos:
        first, dtype = _check_lists(row, call)
        if dtype not in row.dtypes:
            raise invalid(f"{row.lists[0]} has dtype {dtype.short}, which {row.name} does not accept")
        _check_carrier(row, call, len(first), dtype)
        if row.formula == "norm":
            p = call.args["scalar"]
            if isinstance(p.value, float) and math.isinf(p.value) and any(t.numel == 0 for t in first):
                raise invalid("the infinity norm of an empty tensor has no value (max of nothing)")
        if row.formula == "unscale":
            found = call.args["foundInf"]
            assert isinstance(found, AclTensor)
            if found.numel != 1:
                raise invalid(f"foundInf holds {found.numel} elements; expected 1")
        call.plan["compute"] = dtype
        out_name = row.out
        if out_name is None:
            return {}
        outs = call.args.get(out_name)
        if isinstance(outs, AclTensorList) and len(outs) != len(first):
            raise invalid(f"out holds {len(outs)} tensors; the lists hold {len(first)}")
        if row.formula == "norm":  # 0-d, or one-element 1-d where the caller allocated that
            given = outs.tensors if isinstance(outs, AclTensorList) else ()
            shapes = [tuple(o.view_dims) if tuple(o.view_dims) == (1,) else () for o in given] or [()] * len(first)
            return {out_name: [OutInfo(s, dtype) for s in shapes]}
        return {out_name: [same(t.view_dims, dtype) for t in first]}

    return infer


# ----------------------------------------------------------------------------- samples
MIXED_SHAPES: tuple[tuple[int, ...], ...] = ((7,), (2, 3, 4), (), (0,), (65, 33), (1, 5), (3, 1, 2), (129,))
"""Shapes a list's tensors cycle through: 1-d, 3-d, 0-d, empty, odd sizes."""
LIST_LENGTHS = (1, 3, 41)


def _list(
    rng: np.random.Generator, row: Row, n: int, dt: D, special: bool, offset: int = 0
) -> dict[str, list[np.ndarray]]:
    shapes = [MIXED_SHAPES[(i + offset) % len(MIXED_SHAPES)] for i in range(n)]
    low, high = (0.1, 4.0) if row.positive else ((-0.95, 0.95) if row.unit else (-4.0, 4.0))
    if dt in INT_LISTS:
        low, high = (-1000, 1000)
    found: dict[str, list[np.ndarray]] = {}
    for k, name in enumerate(row.lists):
        # specials in the first list only, so that a NaN in a divisor does not hide a NaN in a dividend
        found[name] = [S.array(rng, s, dt, low=low, high=high, special=special and k == 0) for s in shapes]
    return found


def _carrier_value(rng: np.random.Generator, row: Row, n: int, dt: D, value: float) -> Any:
    if row.carrier is Carrier.SCALAR:
        return value
    if row.carrier is Carrier.SCALAR_LIST:
        return [value * (1 + 0.25 * (i % 3)) if dt not in INT_LISTS else int(value) + i % 3 for i in range(n)]
    if row.formula == "round":
        return np.array([int(value)], np.int8)
    np_dt = np.int32 if dt in INT_LISTS else np.float32
    if row.carrier is Carrier.PER_ENTRY:
        return (np.full(n, value, np.float64) * (1 + 0.25 * (np.arange(n) % 3))).astype(np_dt)
    return np.array([int(value) if dt in INT_LISTS else value], np_dt)


def _samples(row: Row) -> Any:
    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        sname = row.scalar_param
        for dt in sorted(row.dtypes, key=lambda d: d.value):
            lengths = LIST_LENGTHS if dt == D.ACL_FLOAT else (1, 3)
            for n in lengths:
                for k, value in enumerate(row.scalar_values if n == 3 else row.scalar_values[:1]):
                    special = (dt.is_float and n > 1 and row.formula != "round") or (row.formula == "round" and n == 3)
                    args: dict[str, Any] = dict(_list(rng, row, n, dt, special, offset=k))
                    if row.formula == "unscale":
                        args["foundInf"] = np.zeros(1, np.float32)
                        args["invScale"] = np.array([value], np.float32)
                    elif sname is not None:
                        args[sname] = _carrier_value(rng, row, n, dt, value)
                    yield Sample(args, f"{dt.short} {n} tensors" + (f" {sname}={value}" if sname else ""))

    return gen


def _errors(row: Row) -> Any:
    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        dt = D.ACL_FLOAT
        sname = row.scalar_param

        def base(n: int) -> dict[str, Any]:
            args: dict[str, Any] = dict(_list(rng, row, n, dt, False))
            if row.formula == "unscale":
                args["foundInf"] = np.zeros(1, np.float32)
                args["invScale"] = np.ones(1, np.float32)
            elif sname is not None:
                args[sname] = _carrier_value(rng, row, n, dt, row.scalar_values[0])
            return args

        if len(row.lists) > 1:
            args = base(3)
            args[row.lists[1]] = args[row.lists[1]][:2]
            yield ErrorSample(args, INVALID, "lists of different lengths")
            args = base(3)
            args[row.lists[1]] = [*args[row.lists[1]][:2], S.array(rng, (4, 4), dt)]
            yield ErrorSample(args, INVALID, "shapes differ at one index")
        args = base(3)
        args[row.lists[0]] = [*args[row.lists[0]][:2], args[row.lists[0]][2].astype(np.float16)]
        if len(row.lists) == 1:
            yield ErrorSample(args, INVALID, "mixed dtypes in one list")
        yield ErrorSample({**base(1), row.lists[0]: []}, INVALID, "an empty list")
        if row.carrier is Carrier.SCALAR_LIST and sname is not None:
            args = base(3)
            args[sname] = args[sname][:2]
            yield ErrorSample(args, INVALID, "a scalar list of the wrong length")
        if row.carrier in (Carrier.TENSOR, Carrier.PER_ENTRY) and sname is not None and row.formula != "round":
            args = base(3)
            args[sname] = np.ones(5, np.float32)
            yield ErrorSample(args, INVALID, f"{sname} of the wrong size")
        if row.formula == "norm":
            empty = {**base(1), "x": [np.zeros(0, np.float32)], "scalar": math.inf}
            yield ErrorSample(empty, INVALID, "inf norm of empty")
        if row.formula == "round" and row.carrier is Carrier.SCALAR:
            yield ErrorSample({**base(2), "roundMode": 7}, INVALID, "roundMode out of range")
        if row.formula == "round" and row.carrier is Carrier.TENSOR:
            yield ErrorSample({**base(2), "roundMode": np.array([9], np.int8)}, INVALID, "roundMode 9 (kernel side)")

    return errors


def _spec(row: Row) -> OpSpec:
    return OpSpec(
        row.name,
        FAMILY,
        row.params,
        _spec_infer(row),
        alias_ok=True,
        samples=_samples(row),
        error_samples=_errors(row),
        summary=f"{row.formula} of every tensor of a list",
        accuracy=FORMULAS[row.formula].accuracy,
    )


SPECS: list[OpSpec] = [_spec(r) for r in ROWS]

"""Reference kernels of the elementwise family: compute wide (float64/int64), then cast to the output."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from acl_core.dtypes import DataType
from acl_core.spec.ops.elementwise import LOW_PRECISION
from acl_reference.call import RefCall
from acl_reference.kernels import RefKernel
from acl_reference.kernels import kernel as _register
from acl_reference.lowp_io import cast_low_precision
from acl_reference.tensor_io import wide

Array = np.ndarray

_erf = np.frompyfunc(math.erf, 1, 1)


def erf(x: Array) -> Array:
    """Elementwise erf in float64 (NumPy has none; math.erf is correctly rounded enough)."""
    return np.asarray(_erf(np.asarray(x, dtype=np.float64)), dtype=np.float64)


_erfc = np.frompyfunc(math.erfc, 1, 1)


def _product_error(a: Array, b: float, p: Array) -> Array:
    """``a·b - p`` exactly, for ``p = fl(a·b)`` (Dekker's split; |a| far below the overflow bound)."""
    split = 134217729.0  # 2^27 + 1
    ta, tb = split * a, split * b
    a_hi, b_hi = ta - (ta - a), tb - (tb - b)
    a_lo, b_lo = a - a_hi, b - b_hi
    return ((a_hi * b_hi - p) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo


def gelu_erf(x: Array) -> Array:
    """GELU's erf form, 0.5·x·erfc(-x/√2), to within a few float64 ulps for every x.

    ``0.5·x·(1 + erf(x/√2))`` cancels for x < 0 (erfc does not), and erfc's tail turns the rounding
    of ``t = -x/√2`` into a relative error of 2t² ulps: that rounding is carried as ``t_lo`` and
    applied through erfc'(t) = -2/√π·e^(-t²).
    """
    x = np.asarray(x, dtype=np.float64)
    c, c_lo = 0.7071067811865476, -4.833646656726457e-17  # c + c_lo = 1/√2
    with np.errstate(all="ignore"):
        t = -x * c
        usable = np.isfinite(x) & (np.abs(x) < 1e300)
        t_lo = np.where(usable, _product_error(np.where(usable, -x, 0.0), c, np.where(usable, t, 0.0)) - x * c_lo, 0.0)
        r = np.asarray(_erfc(t), dtype=np.float64) - 1.1283791670955126 * np.exp(-t * t) * t_lo
        return 0.5 * x * r


def sigmoid(x: Array) -> Array:
    """Logistic function, stable for large |x|."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore"):
        return np.where(x >= 0, 1.0 / (1.0 + np.exp(-x)), np.exp(x) / (1.0 + np.exp(x)))


def kernel(*names: str) -> Callable[[RefKernel], RefKernel]:
    """Register an elementwise kernel: it computes wide, so its writes round to ``plan["compute"]`` first."""
    return _register(*names, computed=True)


def _inputs(k: RefCall, *names: str) -> list[Array]:
    dt = wide(k.plan["compute"])
    return [k.read(n, dt) for n in names]


def _scalar(k: RefCall, name: str) -> Any:
    value = k.value(name)
    return np.asarray(value, dtype=wide(k.plan["compute"])) if value is not None else None


# ----------------------------------------------------------------------------- arithmetic
_NATIVE = frozenset(
    {
        DataType.ACL_FLOAT,
        DataType.ACL_DOUBLE,
        DataType.ACL_INT8,
        DataType.ACL_INT16,
        DataType.ACL_INT32,
        DataType.ACL_INT64,
    }
)
"""Types whose native NumPy add/sub is already exact-rounded (one rounding, like the wide path)."""


@kernel("Add", "Sub")
def add_sub(k: RefCall) -> None:
    """out = self ± alpha·other."""
    dtypes = {k.dtype("self"), k.dtype("other"), k.dtype("out")}
    if len(dtypes) == 1 and dtypes <= _NATIVE and k.value("alpha") in (None, 1):
        ufunc = np.add if k.launch.spec.name == "Add" else np.subtract
        with np.errstate(all="ignore"):
            ufunc(k.read("self"), k.read("other"), out=k.read("out"))
        return
    a, b = _inputs(k, "self", "other")
    alpha = _scalar(k, "alpha")
    with np.errstate(all="ignore"):
        scaled = b * alpha if alpha is not None else b
        if k.launch.spec.name == "Add":
            k.write("out", a + scaled if a.dtype != np.bool_ else a | scaled)
        else:
            k.write("out", a - scaled)


@kernel("Adds", "Subs")
def adds_subs(k: RefCall) -> None:
    """out = self ± alpha·other (other an aclScalar)."""
    (a,) = _inputs(k, "self")
    b, alpha = _scalar(k, "other"), _scalar(k, "alpha")
    with np.errstate(all="ignore"):
        scaled = b * alpha if alpha is not None else b
        k.write(
            "out", (a + scaled if a.dtype != np.bool_ else a | scaled) if k.launch.spec.name == "Adds" else a - scaled
        )


@kernel("AddV3")
def add_v3(k: RefCall) -> None:
    """out = self (scalar) + alpha·other."""
    (b,) = _inputs(k, "other")
    a, alpha = _scalar(k, "self"), _scalar(k, "alpha")
    with np.errstate(all="ignore"):
        k.write("out", a + (b * alpha if alpha is not None else b))


@kernel("Mul", "Muls")
def mul(k: RefCall) -> None:
    """out = self · other."""
    (a,) = _inputs(k, "self")
    b = _inputs(k, "other")[0] if k.launch.spec.name == "Mul" else _scalar(k, "other")
    with np.errstate(all="ignore"):
        k.write("out", a & b if a.dtype == np.bool_ else a * b)


@kernel("Div", "Divs")
def div(k: RefCall) -> None:
    """True division in float64."""
    a = k.read("self", np.float64) if not k.dtype("self").is_complex else k.read("self", np.complex128)
    b = k.read("other", a.dtype) if k.launch.spec.name == "Div" else np.asarray(k.value("other"), dtype=a.dtype)
    with np.errstate(all="ignore"):
        k.write("out", a / b)


def _rounded_div(a: Array, b: Array, mode: int, integer: bool) -> Array:
    """a / b rounded by mode 0 (none), 1 (trunc) or 2 (floor); integers exactly, floats through float64."""
    with np.errstate(all="ignore"):
        if mode == 0:
            return a.astype(np.float64) / b.astype(np.float64)
        if integer:
            q = np.floor_divide(a, b)
            return np.where((q < 0) & (q * b != a), q + 1, q) if mode == 1 else q
        q = a / b
        return np.trunc(q) if mode == 1 else np.floor(q)


@kernel("DivMod")
def div_mod(k: RefCall) -> None:
    """Division with rounding mode 0 (none), 1 (trunc) or 2 (floor)."""
    a, b = _inputs(k, "self", "other")
    k.write("out", _rounded_div(a, b, k.value("mode"), k.plan["compute"].is_integer))


@kernel("FloorDivide", "FloorDivides")
def floor_divide(k: RefCall) -> None:
    """floor(self / other) in the promoted dtype (DivMod's mode 2)."""
    (a,) = _inputs(k, "self")
    b = _inputs(k, "other")[0] if k.launch.spec.name == "FloorDivide" else _scalar(k, "other")
    k.write("out", _rounded_div(a, np.asarray(b), 2, k.plan["compute"].is_integer))


@kernel("XLogYTensor", "XLogYScalarSelf", "XLogYScalarOther")
def xlogy(k: RefCall) -> None:
    """self·log(other), 0 where self is 0 and other is not NaN (torch.xlogy), in float64."""
    name = k.launch.spec.name
    x = np.asarray(k.value("self"), np.float64) if name == "XLogYScalarSelf" else k.read("self", np.float64)
    y = np.asarray(k.value("other"), np.float64) if name == "XLogYScalarOther" else k.read("other", np.float64)
    with np.errstate(all="ignore"):
        k.write("out", np.where((x == 0) & ~np.isnan(y), 0.0, x * np.log(y)))


def ieee_power(base: Any, exponent: Any) -> Array:
    """C99 / IEEE 754 ``pow`` elementwise: pow(-inf, 0.5) is +inf and pow(-0.0, 0.5) is +0.0, as a GPU's pow gives.

    NumPy evaluates a scalar exponent of 0.5 as ``sqrt`` (NaN and -0.0 there), so both operands are
    broadcast to full arrays first, which keeps NumPy on its elementwise ``pow``.
    """
    b, e = np.broadcast_arrays(np.asarray(base), np.asarray(exponent))
    return np.power(np.array(b), np.array(e))


@kernel("PowTensorTensor", "PowTensorScalar", "PowScalarTensor")
def power(k: RefCall) -> None:
    """out = base ** exponent, computed wide."""
    name = k.launch.spec.name
    base = _scalar(k, "self") if name == "PowScalarTensor" else _inputs(k, "self")[0]
    exponent = _scalar(k, "exponent") if name == "PowTensorScalar" else _inputs(k, "exponent")[0]
    with np.errstate(all="ignore"):
        if np.asarray(base).dtype.kind in "iu":
            k.write("out", np.power(base, np.maximum(exponent, 0)) * (np.asarray(exponent) >= 0))
        else:
            k.write("out", ieee_power(base, exponent))


@kernel("Maximum", "Minimum")
def extremum(k: RefCall) -> None:
    """Elementwise max / min, NaN-propagating."""
    a, b = _inputs(k, "self", "other")
    k.write("out", np.maximum(a, b) if k.launch.spec.name == "Maximum" else np.minimum(a, b))


_COMPARE: dict[str, Callable[[Array, Array], Array]] = {
    "Eq": np.equal,
    "Ne": np.not_equal,
    "Gt": np.greater,
    "Ge": np.greater_equal,
    "Lt": np.less,
    "Le": np.less_equal,
}


def _compare(k: RefCall) -> None:
    name = k.launch.spec.name
    fn = _COMPARE[name[:2]]
    (a,) = _inputs(k, "self")
    b = _inputs(k, "other")[0] if name.endswith("Tensor") else _scalar(k, "other")
    k.write("out", fn(a, b))


for _stem in _COMPARE:
    kernel(f"{_stem}Tensor", f"{_stem}Scalar")(_compare)


@kernel("LogicalAnd", "LogicalOr", "LogicalXor")
def logical(k: RefCall) -> None:
    """Truth of both / either / exactly one input."""
    a, b = (k.read(n) != 0 for n in ("self", "other"))
    k.write("out", {"LogicalAnd": a & b, "LogicalOr": a | b, "LogicalXor": a ^ b}[k.launch.spec.name])


@kernel("LogicalNot")
def logical_not(k: RefCall) -> None:
    """Truth negated."""
    k.write("out", k.read("self") == 0)


# ----------------------------------------------------------------------------- unary math
def _float_in(k: RefCall, name: str = "self") -> Array:
    """A float op's input, widened; integer and bool inputs first become the output's float type, as
    CANN casts them before computing (sin of int32 2**31-1 is the sine of float32 2**31)."""
    dt = k.dtype(name)
    if dt.is_complex:
        return k.read(name, np.complex128)
    x = k.read(name)
    if not dt.is_float:
        x = x.astype(k.dtype("out").numpy)
    return x.astype(np.float64)


_UNARY: dict[str, Callable[[Array], Array]] = {
    "Exp": np.exp,
    "Log": np.log,
    "Sqrt": np.sqrt,
    "Rsqrt": lambda x: 1.0 / np.sqrt(x),
    "Reciprocal": lambda x: 1.0 / x,
    "Sin": np.sin,
    "Cos": np.cos,
    "Tanh": np.tanh,
    "Sigmoid": sigmoid,
    "Erf": erf,
    "Gelu": gelu_erf,
    "FastGelu": lambda x: x * sigmoid(1.702 * x),
    "Silu": lambda x: x * sigmoid(x),
}


def _unary(k: RefCall) -> None:
    name = k.launch.spec.name
    x = _float_in(k, "input" if name == "Cos" else "self")
    with np.errstate(all="ignore"):
        k.write("out", _UNARY[name](x))


for _name in _UNARY:
    kernel(_name)(_unary)


@kernel("GeluV2")
def gelu_v2(k: RefCall) -> None:
    """GELU, exact (approximate=0) or the tanh approximation (approximate=1)."""
    x = k.read("x", np.float64)
    if k.value("approximate") == 1:
        with np.errstate(all="ignore"):
            y = 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
        y = np.where(np.isinf(x), np.where(x > 0, x, 0.0), y)  # the cube overflows before tanh saturates
    else:
        y = gelu_erf(x)
    k.write("y", y)


@kernel("Abs", "Neg", "Relu", "Floor", "Ceil", "Round")
def same_dtype_unary(k: RefCall) -> None:
    """Unary ops whose result keeps the input dtype."""
    x = k.read("self", wide(k.dtype("self")))
    fn: dict[str, Callable[[Array], Array]] = {
        "Abs": np.abs,
        "Neg": np.negative,
        "Relu": lambda v: (
            np.where(v > 0, v, np.zeros_like(v)) if v.dtype.kind != "f" else np.where(np.isnan(v) | (v > 0), v, 0.0)
        ),
        "Floor": lambda v: np.floor(v) if v.dtype.kind == "f" else v,
        "Ceil": lambda v: np.ceil(v) if v.dtype.kind == "f" else v,
        "Round": lambda v: np.round(v) if v.dtype.kind == "f" else v,
    }
    k.write("out", fn[k.launch.spec.name](x))


@kernel("Sign")
def sign(k: RefCall) -> None:
    """-1, 0 or 1 (NaN stays NaN; bool stays bool)."""
    x = k.read("self", wide(k.dtype("self")))
    k.write("result", x if x.dtype == np.bool_ else np.sign(x))


@kernel("Clamp")
def clamp(k: RefCall) -> None:
    """min(max(self, clipValueMin), clipValueMax); NaN propagates."""
    (x,) = _inputs(k, "self")
    lo, hi = _scalar(k, "clipValueMin"), _scalar(k, "clipValueMax")
    if lo is not None:
        x = np.maximum(x, lo)
    if hi is not None:
        x = np.minimum(x, hi)
    k.write("out", x)


@kernel("SWhere")
def swhere(k: RefCall) -> None:
    """condition ? self : other."""
    a, b = _inputs(k, "self", "other")
    k.write("out", np.where(k.read("condition") != 0, a, b))


@kernel("InplaceMaskedFillScalar", "InplaceMaskedFillTensor")
def masked_fill(k: RefCall) -> None:
    """selfRef[mask] = value."""
    x = k.read("selfRef").copy()
    value = k.value("value") if k.launch.spec.name.endswith("Scalar") else k.read("value").reshape(-1)[0]
    mask = np.broadcast_to(k.read("mask") != 0, x.shape)
    x[mask] = value
    k.write("selfRef", x)


@kernel("Cast")
def cast(k: RefCall) -> None:
    """out = self converted to out's dtype."""
    if k.dtype("self") in LOW_PRECISION or k.dtype("out") in LOW_PRECISION:
        cast_low_precision(k)  # 8- and 4-bit types (issue 6): acl_reference.lowp_io
        return
    k.write("out", k.read("self"))


@kernel("InplaceCopy")
def inplace_copy(k: RefCall) -> None:
    """selfRef = src, broadcast and converted."""
    dst = k["selfRef"]
    k.write("selfRef", np.broadcast_to(k.read("src"), dst.shape))


@kernel("InplaceFillScalar")
def fill(k: RefCall) -> None:
    """Every element of selfRef = value."""
    k.write("selfRef", k.value("value"))


@kernel("InplaceZero")
def zero(k: RefCall) -> None:
    """Every element of selfRef = 0."""
    k.write("selfRef", 0)

"""Reference kernels of the Foreach* operators (acl_core.spec.ops.foreach): one formula per list entry.

Each entry is computed wide (float64, int64 for int32 lists) by the formula of its row, then rounded
once to the list's dtype; the elementwise family's NumPy helpers (erf, sigmoid) serve where they apply.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from acl_core.errors import AclnnError, AclnnStatus
from acl_core.spec.ops.foreach import INT_LISTS, ROUND_MODES, ROWS, Carrier, Row, int32_scalar
from acl_reference.call import RefCall
from acl_reference.kernels import kernel
from acl_reference.kernels.elementwise import erf, ieee_power, sigmoid

Array = np.ndarray
Fn = Callable[[Array, Array, Array, Any], Array]
"""A formula over the roles: the entries a, b, c of the input lists and the scalar-like operand s."""

_erfc = np.frompyfunc(math.erfc, 1, 1)


def _round(x: Array, mode: int) -> Array:
    if mode == 1:
        return np.rint(x)
    if mode == 2:
        return np.floor(x)
    if mode == 3:
        return np.ceil(x)
    if mode == 4:
        return np.where(np.isfinite(x), np.copysign(np.floor(np.abs(x) + 0.5), x), x)  # exact: x is at most float32
    if mode == 5:
        return np.trunc(x)
    return np.where(np.isinf(x), np.copysign(0.0, x), x - np.trunc(x))


def _norm(x: Array, p: float) -> Array:
    a = np.abs(x.reshape(-1))
    if math.isinf(p):
        if a.size == 0:
            return np.float64(0.0 if p > 0 else math.inf)
        return np.max(a) if p > 0 else np.min(a)
    if p == 0:
        return np.float64(np.count_nonzero(a))
    if np.isnan(a).any():
        return np.float64(math.nan)
    return np.sum(a**p) ** (1.0 / p)


FUNCTIONS: dict[str, Fn] = {
    "abs": lambda a, b, c, s: np.abs(a),
    "neg": lambda a, b, c, s: -a,
    "exp": lambda a, b, c, s: np.exp(a),
    "log": lambda a, b, c, s: np.log(a),
    "sqrt": lambda a, b, c, s: np.sqrt(a),
    "reciprocal": lambda a, b, c, s: 1.0 / a,
    "sin": lambda a, b, c, s: np.sin(a),
    "cos": lambda a, b, c, s: np.cos(a),
    "tanh": lambda a, b, c, s: np.tanh(a),
    "sigmoid": lambda a, b, c, s: sigmoid(a),
    "erf": lambda a, b, c, s: erf(a),
    "sign": lambda a, b, c, s: np.sign(a),
    "acos": lambda a, b, c, s: np.arccos(a),
    "asin": lambda a, b, c, s: np.arcsin(a),
    "atan": lambda a, b, c, s: np.arctan(a),
    "cosh": lambda a, b, c, s: np.cosh(a),
    "sinh": lambda a, b, c, s: np.sinh(a),
    "tan": lambda a, b, c, s: np.tan(a),
    "erfc": lambda a, b, c, s: np.asarray(_erfc(a), dtype=np.float64),
    "expm1": lambda a, b, c, s: np.expm1(a),
    "log10": lambda a, b, c, s: np.log10(a),
    "log1p": lambda a, b, c, s: np.log1p(a),
    "log2": lambda a, b, c, s: np.log2(a),
    "copy": lambda a, b, c, s: a,
    "zero": lambda a, b, c, s: np.zeros_like(a),
    "add_list": lambda a, b, c, s: a + s * b,
    "sub_list": lambda a, b, c, s: a - s * b,
    "mul_list": lambda a, b, c, s: a * b,
    "div_list": lambda a, b, c, s: a / b,
    "max_list": lambda a, b, c, s: np.maximum(a, b),
    "min_list": lambda a, b, c, s: np.minimum(a, b),
    "pow_list": lambda a, b, c, s: ieee_power(a, b),
    "add_s": lambda a, b, c, s: a + s,
    "sub_s": lambda a, b, c, s: a - s,
    "mul_s": lambda a, b, c, s: a * s,
    "div_s": lambda a, b, c, s: a / s,
    "max_s": lambda a, b, c, s: np.maximum(a, s),
    "min_s": lambda a, b, c, s: np.minimum(a, s),
    "pow_s": lambda a, b, c, s: ieee_power(a, s),
    "pow_s_a": lambda a, b, c, s: ieee_power(s, a),
    "addcdiv": lambda a, b, c, s: a + s * (b / c),
    "addcmul": lambda a, b, c, s: a + s * (b * c),
    "lerp_list": lambda a, b, c, s: a + c * (b - a),
    "lerp_s": lambda a, b, c, s: a + s * (b - a),
    "round": lambda a, b, c, s: _round(a, int(s)),
    "norm": lambda a, b, c, s: _norm(a, float(s)),
}
"""Each formula in float64 (int64 for int32 lists), by the key of acl_core.spec.ops.foreach.FORMULAS."""


def _scalar(value: Any, integer: bool) -> Any:
    """A host scalar as the kernel computes with it: truncated to int32 for int32 lists, else float32."""
    if integer:
        return np.int64(int32_scalar(value))
    return np.float64(np.float32(complex(value).real))


def _scalars(k: RefCall, row: Row, n: int, integer: bool) -> list[Any]:
    """The scalar-like operand's value for each of the ``n`` list entries."""
    name = row.scalar_param
    if name is None or row.carrier is Carrier.NONE:
        return [1] * n
    if row.carrier is Carrier.SCALAR:
        return [_scalar(k.value(name), integer)] * n
    if row.carrier is Carrier.SCALAR_LIST:
        return [_scalar(v, integer) for v in k.value(name)]
    flat = k.read(name).reshape(-1)
    if row.formula == "round":
        mode = int(flat[0])
        if mode not in ROUND_MODES:
            raise AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, f"roundMode={mode} is not one of {list(ROUND_MODES)}")
        return [mode] * n
    values = [np.int64(v) if integer else np.float64(np.float32(v)) for v in flat]
    return values * n if row.carrier is Carrier.TENSOR else values


def _foreach(k: RefCall) -> None:
    row = _ROWS[k.launch.spec.name]
    lists = [k.args[name] for name in row.lists]
    n = len(lists[0])
    integer = lists[0][0].dtype in INT_LISTS
    wide = np.int64 if integer else np.float64
    if row.formula == "zero":
        k.write_list(row.lists[0], [np.zeros(t.view_dims, t.dtype.numpy) for t in lists[0]])
        return
    if row.formula == "copy":
        k.write_list("out", k.read_list("x"))
        return
    if row.formula == "unscale":
        grads = k.read_list("scaledGrads", np.float64)
        inv = np.float64(k.read("invScale").reshape(-1)[0])
        if any(not np.isfinite(g).all() for g in grads):
            k.write("foundInf", np.ones(1, np.float32))
        with np.errstate(all="ignore"):
            scaled = [g * inv for g in grads]
        k.write_list("scaledGrads", [_cast(v, t) for v, t in zip(scaled, lists[0])])
        return
    arrays = [k.read_list(name, wide) for name in row.lists] + [[None] * n] * (3 - len(row.lists))
    fn = FUNCTIONS[row.formula]
    results = []
    with np.errstate(all="ignore"):
        for i, s in enumerate(_scalars(k, row, n, integer)):
            results.append(fn(arrays[0][i], arrays[1][i], arrays[2][i], s))
    target = row.out or row.lists[0]
    k.write_list(target, [_cast(v, t) for v, t in zip(results, k.args[target])])


def _cast(value: Any, t: Any) -> Array:
    """``value`` as the entry's dtype (int64 wraps into int32; floats round once)."""
    arr = np.asarray(value)
    np_dtype = t.dtype.numpy
    if arr.dtype.kind in "iu":
        return arr.astype(np_dtype)
    with np.errstate(all="ignore"):
        return arr.astype(np_dtype)


_ROWS: dict[str, Row] = {r.name: r for r in ROWS}
for _row in ROWS:
    kernel(_row.name)(_foreach)

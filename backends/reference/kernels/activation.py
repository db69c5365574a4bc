"""Reference kernels of the activations and their backward ops (acl_core.spec.ops.activation), in float64.

Each formula is written once, in float64, as torch defines the function; scalars are first rounded to
float32, the compute type of every declared dtype.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from acl_core.dtypes import DataType
from acl_core.spec.ops.activation import BACKWARD, FORWARD, SAME_FORMULA
from acl_core.spec.opspec import Kind
from acl_reference.call import RefCall
from acl_reference.kernels import kernel

Array = np.ndarray
V = Mapping[str, Any]
"""The call's values by official name: input tensors as float64 arrays, scalars and bools as floats."""

SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946
_INV_SQRT2 = 0.70710678118654752440  # the device bodies' literals
_INV_SQRT_2PI = 0.39894228040143267794


def _erfc(x: Array) -> Array:
    return np.asarray(np.frompyfunc(math.erfc, 1, 1)(x), dtype=np.float64)


def _hard(x: Array) -> Array:
    """min(max(x + 3, 0), 6), NaN propagating."""
    c = x + 3.0
    return np.where(c < 0.0, 0.0, np.where(c > 6.0, 6.0, c))


def _sigmoid(x: Array) -> Array:
    return 1.0 / (1.0 + np.exp(-x))


def _gelu_backward_v2(v: V) -> Array:
    g, x = v["gradOutput"], v["self"]
    if v["approximate"] == "none":
        return g * (0.5 * _erfc(-x * _INV_SQRT2) + x * (np.exp(-0.5 * x * x) * _INV_SQRT_2PI))
    beta, kappa = 0.79788456080286535588, 0.044715  # sqrt(2/pi), torch's tanh-approximation constants
    t = np.tanh(beta * (x + kappa * x * x * x))
    return g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * beta * (1.0 + 3.0 * kappa * x * x))


def _log_sigmoid_backward(v: V) -> Array:
    x = v["self"]
    z = np.exp(-np.abs(x))
    return v["gradOutput"] * np.where(x < 0.0, 1.0 / (1.0 + z), z / (1.0 + z))


def _elu_backward(v: V) -> Array:
    g, x, a, sc, inp = v["gradOutput"], v["selfOrResult"], v["alpha"], v["scale"], v["inputScale"]
    if v["isResult"]:
        return np.where(x <= 0.0, g * inp * (x + a * sc), g * sc)
    return np.where(x <= 0.0, g * inp * a * sc * np.exp(x * inp), g * sc)


def _softplus_backward(v: V) -> Array:
    g, x, b = v["gradOutput"], v["self"], v["beta"]
    z = np.exp(x * b)
    return np.where(x * b > v["threshold"], g, g * z / (z + 1.0))


def _mish_backward(v: V) -> Array:
    g, x = v["gradOutput"], v["self"]
    t = np.tanh(np.log1p(np.exp(x)))
    s = _sigmoid(x)
    return g * (t + x * s * (1.0 - t * t))


def _swish_backward(v: V) -> Array:
    g, x = v["gradOutput"], v["self"]
    b = 1.0 if v["betaOptional"] is None else v["betaOptional"]
    s = 1.0 / (1.0 + np.exp(-b * x))
    return g * (s + b * x * s * (1.0 - s))


def _shrink_grad(lambd: str) -> Callable[[V], Array]:
    return lambda v: np.where((v["self"] >= -v[lambd]) & (v["self"] <= v[lambd]), 0.0, v["gradOutput"])


FUNCTIONS: dict[str, Callable[[V], Array]] = {
    "Elu": lambda v: np.where(
        v["self"] > 0.0, v["self"] * v["scale"], np.expm1(v["self"] * v["inputScale"]) * v["alpha"] * v["scale"]
    ),
    "Celu": lambda v: np.where(v["self"] > 0.0, v["self"], v["alpha"] * np.expm1(v["self"] / v["alpha"])),
    "Selu": lambda v: np.where(
        v["self"] > 0.0, SELU_SCALE * v["self"], SELU_SCALE * (SELU_ALPHA * np.expm1(v["self"]))
    ),
    "Hardswish": lambda v: v["self"] * _hard(v["self"]) / 6.0,
    "Hardsigmoid": lambda v: _hard(v["self"]) / 6.0,
    "Hardtanh": lambda v: (lambda m: np.where(m > v["clipValueMax"], v["clipValueMax"], m))(
        np.where(v["self"] < v["clipValueMin"], v["clipValueMin"], v["self"])
    ),
    "Hardshrink": lambda v: np.where((v["self"] >= -v["lambd"]) & (v["self"] <= v["lambd"]), 0.0, v["self"]),
    "Softshrink": lambda v: np.where(
        v["self"] > v["lambd"],
        v["self"] - v["lambd"],
        np.where(v["self"] < -v["lambd"], v["self"] + v["lambd"], np.where(np.isnan(v["self"]), v["self"], 0.0)),
    ),
    "Softplus": lambda v: np.where(
        v["self"] * v["beta"] > v["threshold"], v["self"], np.log1p(np.exp(v["self"] * v["beta"])) / v["beta"]
    ),
    "Softsign": lambda v: v["self"] / (1.0 + np.abs(v["self"])),
    "LeakyRelu": lambda v: np.where(v["self"] > 0.0, v["self"], v["self"] * v["negativeSlope"]),
    "Mish": lambda v: v["self"] * np.tanh(np.log1p(np.exp(v["self"]))),
    "LogSigmoid": lambda v: np.where(v["self"] < 0.0, v["self"], 0.0) - np.log1p(np.exp(-np.abs(v["self"]))),
    "Threshold": lambda v: np.where(v["self"] <= v["threshold"], np.float64(v["value"]), v["self"]),
    "Swish": lambda v: (
        v["self"] / (1.0 + np.exp(-(1.0 if v["betaOptional"] is None else v["betaOptional"]) * v["self"]))
    ),
    "SigmoidBackward": lambda v: v["gradOutput"] * v["output"] * (1.0 - v["output"]),
    "TanhBackward": lambda v: v["gradOutput"] * (1.0 - v["output"] * v["output"]),
    "SiluBackward": lambda v: (lambda s: v["gradOutput"] * s * (1.0 + v["self"] * (1.0 - s)))(_sigmoid(v["self"])),
    "GeluBackward": lambda v: (
        v["gradOutput"]
        * (0.5 * _erfc(-v["self"] * _INV_SQRT2) + v["self"] * (np.exp(-0.5 * v["self"] * v["self"]) * _INV_SQRT_2PI))
    ),
    "GeluBackwardV2": _gelu_backward_v2,
    "LogSigmoidBackward": _log_sigmoid_backward,
    "FastGeluBackward": lambda v: (lambda s: v["gradOutput"] * (s + 1.702 * v["self"] * s * (1.0 - s)))(
        1.0 / (1.0 + np.exp(-1.702 * v["self"]))
    ),
    "SwishBackward": _swish_backward,
    "EluBackward": _elu_backward,
    "SeluBackward": lambda v: np.where(
        v["result"] <= 0.0, v["gradOutput"] * (v["result"] + SELU_ALPHA * SELU_SCALE), v["gradOutput"] * SELU_SCALE
    ),
    "HardswishBackward": lambda v: np.where(
        v["self"] <= -3.0, 0.0, np.where(v["self"] < 3.0, v["gradOutput"] * (v["self"] / 3.0 + 0.5), v["gradOutput"])
    ),
    "HardsigmoidBackward": lambda v: np.where((v["self"] > -3.0) & (v["self"] < 3.0), v["gradOutput"] / 6.0, 0.0),
    "HardtanhBackward": lambda v: np.where((v["self"] <= v["min"]) | (v["self"] >= v["max"]), 0.0, v["gradOutput"]),
    "HardshrinkBackward": _shrink_grad("lambd"),
    "SoftshrinkBackward": _shrink_grad("lambda"),
    "SoftplusBackward": _softplus_backward,
    "SoftsignBackward": lambda v: v["gradients"] / ((1.0 + np.abs(v["features"])) * (1.0 + np.abs(v["features"]))),
    "LeakyReluBackward": lambda v: np.where(v["self"] > 0.0, v["gradOutput"], v["gradOutput"] * v["negativeSlope"]),
    "MishBackward": _mish_backward,
    "ThresholdBackward": lambda v: np.where(v["self"] <= v["threshold"], 0.0, v["gradOutput"]),
}
"""Each op's float64 formula over its values by official name."""
FUNCTIONS.update({v2: FUNCTIONS[v1] for v2, v1 in SAME_FORMULA.items()})


def _scalar(value: Any, compute: DataType) -> float | None:
    if value is None:
        return None
    real = float(complex(value).real)
    return real if compute == DataType.ACL_DOUBLE else float(np.float32(real))


def _activation(k: RefCall) -> None:
    spec = k.launch.spec
    compute: DataType = k.plan["compute"]
    values: dict[str, Any] = {}
    result = ""
    for p in spec.params:
        if p.writes:
            result = p.name
        elif p.kind is Kind.TENSOR:
            values[p.name] = k.read(p.name, np.float64)
        elif p.kind is Kind.SCALAR:
            values[p.name] = _scalar(k.value(p.name), compute)
        elif p.kind is Kind.STRING:
            values[p.name] = k.value(p.name)
        else:
            values[p.name] = bool(k.value(p.name))
    with np.errstate(all="ignore"):
        k.write(result, FUNCTIONS[spec.name](values))


for _row in (*FORWARD, *BACKWARD):
    kernel(_row.name, computed=True)(_activation)

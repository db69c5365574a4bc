"""Reference kernels of the losses (acl_core.spec.ops.loss), in float64.

Each pointwise loss is two formulas written once as torch defines them: the per-element term and its
derivative in the input. The tensors are read by role (``ROLES``), broadcast, then the terms are
reduced (none / mean / sum) or the derivative is scaled by the incoming gradient (and 1/N for mean).
``beta`` is a C float, so it is rounded to float32 first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from acl_core.spec.ops.loss import MEAN, NONE, ROLES, ROW_OF, WRT_TARGET
from acl_core.spec.opspec import Kind
from acl_reference.call import RefCall
from acl_reference.kernels import kernel

Array = np.ndarray
V = Mapping[str, Array | float | bool]
"""Values by role: x, t, w, pw (float64 arrays, w and pw 1.0 when absent), beta, logt."""


def _f(v: V, name: str) -> Array:
    return np.asarray(v[name], dtype=np.float64)


def _smooth_l1(v: V) -> Array:
    d, beta = _f(v, "x") - _f(v, "t"), float(v["beta"])
    if beta == 0.0:
        return np.abs(d)
    return np.where(np.abs(d) < beta, 0.5 * d * d / beta, np.abs(d) - 0.5 * beta)


def _smooth_l1_grad(v: V) -> Array:
    d, beta = _f(v, "x") - _f(v, "t"), float(v["beta"])
    if beta == 0.0:
        return np.sign(d)
    return np.where(d <= -beta, -1.0, np.where(d >= beta, 1.0, d / beta))


def _bce(v: V) -> Array:
    x, t = _f(v, "x"), _f(v, "t")
    return -_f(v, "w") * (t * np.maximum(np.log(x), -100.0) + (1.0 - t) * np.maximum(np.log1p(-x), -100.0))


def _bce_grad(v: V) -> Array:
    x, t = _f(v, "x"), _f(v, "t")
    return _f(v, "w") * (x - t) / np.maximum((1.0 - x) * x, 1e-12)


def _logits(v: V) -> Array:
    x, t = _f(v, "x"), _f(v, "t")
    log_weight = (_f(v, "pw") - 1.0) * t + 1.0
    return _f(v, "w") * ((1.0 - t) * x + log_weight * (np.log1p(np.exp(-np.abs(x))) + np.maximum(-x, 0.0)))


def _sigmoid(x: Array) -> Array:
    return np.where(x >= 0, 1.0 / (1.0 + np.exp(-x)), np.exp(x) / (1.0 + np.exp(x)))


def _logits_grad(v: V) -> Array:
    x, t, pt = _f(v, "x"), _f(v, "t"), _f(v, "pw") * _f(v, "t")
    return _f(v, "w") * ((pt + 1.0 - t) * _sigmoid(x) - pt)


def _kl(v: V) -> Array:
    x, t = _f(v, "x"), _f(v, "t")
    if v["logt"]:
        return np.exp(t) * (t - x)
    xlogx = np.where(t == 0.0, 0.0, t * np.log(np.where(t == 0.0, 1.0, t)))  # torch's xlogy(t, t)
    return xlogx - t * x


def _kl_grad(v: V) -> Array:
    t = _f(v, "t")
    return -np.exp(t) if v["logt"] else -t


def _softplus(x: Array) -> Array:
    return np.maximum(x, 0.0) + np.log1p(np.exp(-np.abs(x)))


def _logits_target_grad(v: V) -> Array:
    x = _f(v, "x")
    if not v["has_pw"]:
        return -x * _f(v, "w")
    return _f(v, "w") * (_f(v, "pw") * _softplus(-x) - _softplus(x))  # torch: log_sigmoid(-x) - pw·log_sigmoid(x)


def _kl_target_grad(v: V) -> Array:
    x, t = _f(v, "x"), _f(v, "t")
    if v["logt"]:
        return np.exp(t) * (t + 1.0 - x)
    return np.where(t == 0.0, 0.0, np.log(np.where(t == 0.0, 1.0, t)) + 1.0 - x)


TARGET_GRADS: dict[str, Callable[[V], Array]] = {
    "BinaryCrossEntropyWithLogits": _logits_target_grad,
    "KlDiv": _kl_target_grad,
}
"""Per loss with a ``…TargetBackward`` op: ∂term/∂target (torch's ``*_target_backward``)."""


TERMS: dict[str, tuple[Callable[[V], Array], Callable[[V], Array]]] = {
    "MseLoss": (lambda v: (_f(v, "x") - _f(v, "t")) ** 2, lambda v: 2.0 * (_f(v, "x") - _f(v, "t"))),
    "L1Loss": (lambda v: np.abs(_f(v, "x") - _f(v, "t")), lambda v: np.sign(_f(v, "x") - _f(v, "t"))),
    "SmoothL1Loss": (_smooth_l1, _smooth_l1_grad),
    "SoftMarginLoss": (
        lambda v: np.log1p(np.exp(-_f(v, "t") * _f(v, "x"))),
        lambda v: -_f(v, "t") * _sigmoid(-_f(v, "t") * _f(v, "x")),
    ),
    "BinaryCrossEntropy": (_bce, _bce_grad),
    "BinaryCrossEntropyWithLogits": (_logits, _logits_grad),
    "KlDiv": (_kl, _kl_grad),
}
"""Per pointwise loss: (term(x, t, ...), ∂term/∂x)."""


def _pointwise(k: RefCall) -> None:
    row, backward = ROW_OF[k.launch.spec.name]
    term, grad = TERMS[row.name]
    if k.launch.spec.name in WRT_TARGET:
        grad = TARGET_GRADS[row.name]
    values: dict[str, Array | float | bool] = {"w": np.float64(1.0), "pw": np.float64(1.0)}
    result = ""
    for p in k.launch.spec.params:
        if p.writes:
            result = p.name
        elif p.kind is Kind.TENSOR and k[p.name] is not None:
            values[ROLES[p.name]] = k.read(p.name, np.float64)
    values["beta"] = float(np.float32(k.value("beta"))) if "beta" in k.args else 0.0
    values["logt"] = bool(k.args.get("logTarget", False))
    values["has_pw"] = k.args.get("posWeightOptional") is not None
    reduction = int(k.value("reduction"))
    terms = np.broadcast_shapes(*(np.shape(values[r]) for r in ("x", "t", "w", "pw")))
    count = int(np.prod(terms))
    with np.errstate(all="ignore"):
        if backward:
            g = grad(values) * values["g"]
            if reduction == MEAN and count:
                g = g / count
            k.write(result, np.broadcast_to(g, k[result].view_dims))
            return
        loss = np.broadcast_to(term(values), terms)
        if reduction != NONE:
            total = np.sum(loss)
            loss = np.asarray(total / count if count else np.nan) if reduction == MEAN else np.asarray(total)
        k.write(result, np.broadcast_to(loss, k[result].view_dims))


for _name in ROW_OF:
    kernel(_name)(_pointwise)

"""Elementwise bodies of the pointwise losses and their backward ops (acl_core.spec.ops.loss).

Each loss is two C++ statements in double over the roles ``x`` (input), ``t`` (target), ``w``
(weight), ``pw`` (pos weight), ``beta`` and ``logt``: the per-element term ``q`` and its derivative
``q`` in the input, written in the order the reference evaluates them (float64, so the +, −, ×, ÷
losses round to the same value, the libm ones within a double ulp or two before the one rounding).
:func:`loss_ufunc` turns one variant (forward or backward, which optional tensors are present, the
reduction's scaling) into a :class:`~acl_rocm.kernels.elementwise.Ufunc` the elementwise generator
compiles: the tensors keep their official names and load in the compute type, ``beta`` and the term
count travel as float64 scalars (token ``W``), absent weights are the constant 1.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Final

from acl_rocm.kernels.elementwise import Ufunc


def _sigmoid(z: str) -> str:
    """C: the reference's two-sided logistic of the double ``z`` (no overflow on either side)."""
    return f"({z} >= 0.0 ? 1.0 / (1.0 + exp(-{z})) : exp({z}) / (1.0 + exp({z})))"


def _at_least(z: str, low: str) -> str:
    """C: NumPy's maximum(z, low) for a constant ``low`` (NaN propagates, unlike fmax)."""
    return f"({z} < {low} ? {low} : {z})"


_SMOOTH = (
    "const double d = x - t; const double a = fabs(d); "
    "q = beta == 0.0 ? a : (a < beta ? 0.5 * d * d / beta : a - 0.5 * beta);"
)
_SMOOTH_GRAD = (
    "const double d = x - t; q = beta == 0.0 ? acl_sign(d) : (d <= -beta ? -1.0 : (d >= beta ? 1.0 : d / beta));"
)
_BCE = (
    "const double lx = log(x), l1x = log1p(-x); "
    f"q = -w * (t * {_at_least('lx', '-100.0')} + (1.0 - t) * {_at_least('l1x', '-100.0')});"
)
_BCE_GRAD = f"const double den = (1.0 - x) * x; q = w * (x - t) / {_at_least('den', '1e-12')};"
_LOGITS = (
    "const double lw = (pw - 1.0) * t + 1.0, nx = -x; "
    f"q = w * ((1.0 - t) * x + lw * (log1p(exp(-fabs(x))) + {_at_least('nx', '0.0')}));"
)
_LOGITS_GRAD = f"const double pt = pw * t; q = w * ((pt + 1.0 - t) * {_sigmoid('x')} - pt);"
_KL = "q = logt ? exp(t) * (t - x) : (t == 0.0 ? 0.0 : t * log(t)) - t * x;"
_KL_GRAD = "q = logt ? -exp(t) : -t;"
_NZ = "const double z = -t * x; "
_SOFTPLUS = "(({z}) > 0.0 ? ({z}) : 0.0) + log1p(exp(-fabs({z})))"
_LOGITS_TARGET = "const double sn = {sn}, sp = {sp}; q = w * (pw * sn - sp);".format(
    sn=_SOFTPLUS.format(z="-x"), sp=_SOFTPLUS.format(z="x")
)
_KL_TARGET = "q = logt ? exp(t) * (t + 1.0 - x) : (t == 0.0 ? 0.0 : log(t) + 1.0 - x);"

BODIES: Final[dict[str, tuple[str, str]]] = {
    "MseLoss": ("const double d = x - t; q = d * d;", "q = 2.0 * (x - t);"),
    "L1Loss": ("q = fabs(x - t);", "const double d = x - t; q = acl_sign(d);"),
    "SmoothL1Loss": (_SMOOTH, _SMOOTH_GRAD),
    "SoftMarginLoss": (_NZ + "q = log1p(exp(z));", _NZ + f"q = -t * {_sigmoid('z')};"),
    "BinaryCrossEntropy": (_BCE, _BCE_GRAD),
    "BinaryCrossEntropyWithLogits": (_LOGITS, _LOGITS_GRAD),
    "KlDiv": (_KL, _KL_GRAD),
}
"""Per pointwise loss (by forward name): (term statements, derivative statements), each assigning ``q``."""

TARGET_BODIES: Final[dict[str, str]] = {
    "BinaryCrossEntropyWithLogits": _LOGITS_TARGET,
    "KlDiv": _KL_TARGET,
}
"""∂term/∂target of the losses with a ``…TargetBackward`` op (without a pos weight the logits loss's is ``-w·x``)."""


@dataclass(frozen=True)
class Variant:
    """One compiled form of a loss: the tensors it reads (official name, role), and how its result is scaled."""

    loss: str
    backward: bool
    tensors: tuple[tuple[str, str], ...]
    output: str
    divide: bool = False
    """True: the result is divided by ``count`` (the mean's terms, or a mean's gradient)."""
    log_target: bool = False
    wrt_target: bool = False
    """The gradient in the target (``gradTarget``) rather than in the input."""


@functools.cache
def loss_ufunc(v: Variant) -> Ufunc:
    """The elementwise op computing variant ``v`` (one rounding of a double result into the output)."""
    present = {role for _, role in v.tensors}
    keep = "[[maybe_unused]] const"
    decls = [f"{keep} double {role} = {name};" for name, role in v.tensors]
    decls += [f"{keep} double {role} = 1.0;" for role in ("w", "pw") if role not in present]
    decls.append(f"{keep} bool logt = {'true' if v.log_target else 'false'};")
    forward, backward = BODIES[v.loss]
    body = backward if v.backward else forward
    if v.wrt_target:
        body = TARGET_BODIES[v.loss] if "pw" in present or v.loss != "BinaryCrossEntropyWithLogits" else "q = -w * x;"
    lines = [*decls, "double q;", "{ " + body + " }"]
    if v.backward:
        lines.append("q = q * g;")
    if v.divide:
        lines.append("q = q / count;")
    lines.append("r = q;")
    items = [f"{name}:T" for name, _ in v.tensors]
    if v.loss == "SmoothL1Loss":
        items.append("beta:W")
    if v.divide:
        items.append("count:W")
    signature = ", ".join(items) + f" -> {v.output}:O"
    name = f"{v.loss}{'Target' if v.wrt_target else ''}{'Backward' if v.backward else ''}"
    return Ufunc(name, signature, " ".join(lines))

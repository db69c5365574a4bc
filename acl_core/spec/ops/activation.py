"""Activations and their backward ops (issue 16): elementwise, declared from two tables.

``FORWARD`` rows are one-input activations (``self`` → ``out``) with their aclScalar parameters;
``BACKWARD`` rows are the two-input gradient ops (``gradOutput`` and the forward's input or result →
``gradInput``), whose derivative is a closed form of that input. Both kinds are elementwise (family
``elementwise``: size tiers, special values and the rocm elementwise kernels apply).

Choices where the CANN docs are silent or not transcribed here:

* dtypes: FLOAT, FLOAT16 and BFLOAT16. The doc pages' dtype tables are not transcribed in
  tests/data/cann, so DOUBLE and integer inputs that some pages may list are not declared yet.
* the two inputs of a backward op broadcast (torch's rule), compute in their promoted type, and the
  result may be written to any dtype the compute type casts to;
* scalars are converted to float32 before computing (the compute type of 16- and 32-bit floats);
* NaN: Hardshrink, Hardtanh, Threshold, Softshrink and every backward op keep torch's NaN behaviour (the
  comparisons written as torch writes them, so a NaN input goes down the same branch);
* HardswishBackward's branch points follow current torch: 0 for x <= -3, gradOutput for x >= 3;
* HardswishBackwardV2: its page (hicann/ops-nn activation/hard_swish_grad_v2) moves V1's page's branch
  points (V1's page: x/3 + 1/2 on the closed interval [-3, 3], so -1/2 at -3 and 3/2 at 3) to 0 at x <= -3
  and 1 at x >= 3: the branches HardswishBackward here already computes. It is declared as V1's twin
  (:data:`SAME_FORMULA`): same parameters, rules, samples and formula, its own name and kernel;
* EluBackward with ``isResult`` true refuses a negative ``alpha`` (161002), as torch does: the result
  does not determine the input when alpha < 0. LeakyReluBackward's ``selfIsResult`` does not change the
  result (the sign of the result is the sign of the input for a non-negative slope).

* GeluBackwardV2: ``approximate`` "none" (erf) or "tanh" (torch's two gelu_backward formulas); any other
  string is 161002;
* LogSigmoidBackward: ``buffer`` is read by nobody (the page: "intermediate result, not used yet"); it
  takes part in the shape and dtype rules like the other inputs, and the gradient is
  ``gradOutput / (1 + e^x)``, evaluated as torch's log_sigmoid_backward does (no overflow on either side).

Not declared yet: LogSigmoidForward (its ``buffer`` output is an implementation detail CANN does not
specify), Prelu(Backward) (weight along dim 1), Glu(Backward), GeluMul, and the row
ops (SoftmaxBackward, ...).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.spec import samples as S
from acl_core.spec.accuracy import Accuracy, exact, ulp
from acl_core.spec.opspec import (
    INVALID,
    Call,
    ErrorSample,
    Infos,
    Kind,
    OpSpec,
    Param,
    Sample,
    bool_attr,
    inplace_twin,
    invalid,
    out,
    scalar,
    string_attr,
    tensor,
)
from acl_core.spec.promotion import promote_types
from acl_core.spec.rules import FLOATS, broadcast_shapes, castable, tensor_arg
from acl_core.tensor import AclScalar

FAMILY = "elementwise"

_EXACT = exact("+, -, ×, ÷ and comparisons evaluated in double, rounded once to the output")
_LIBM = ulp(
    1,
    reason="evaluated in double (exp, expm1, log1p, tanh, erfc within a few double ulps), rounded once:"
    " within 1 float32 ulp of the true value",
)


@dataclass(frozen=True)
class Row:
    """One activation op: official parameters (outputs last), sample settings and accuracy class."""

    name: str
    params: tuple[Param, ...]
    accuracy: Accuracy
    values: tuple[Mapping[str, object], ...] = ({},)
    ranges: Mapping[str, tuple[float, float]] | None = None
    check: Callable[[Call], None] | None = None


def _t(name: str) -> Param:
    return tensor(name, FLOATS)


def _s(name: str, optional: bool = False) -> Param:
    return scalar(name, optional=optional)


def _o(name: str, c_type: str = "aclTensor*") -> Param:
    return out(name, FLOATS, c_type=c_type)


FORWARD: tuple[Row, ...] = (
    Row(
        "Elu",
        (_t("self"), _s("alpha"), _s("scale"), _s("inputScale"), _o("out")),
        _LIBM,
        ({"alpha": 1.0, "scale": 1.0, "inputScale": 1.0}, {"alpha": 0.1, "scale": 1.5, "inputScale": 0.5}),
    ),
    Row("Celu", (_t("self"), _s("alpha"), _o("out")), _LIBM, ({"alpha": 1.0}, {"alpha": 0.3})),
    Row("Selu", (_t("self"), _o("out")), _LIBM),
    Row("Hardswish", (_t("self"), _o("out", "const aclTensor*")), _EXACT, ranges={"self": (-5.0, 5.0)}),
    Row("Hardsigmoid", (_t("self"), _o("out")), _EXACT, ranges={"self": (-5.0, 5.0)}),
    Row(
        "Hardtanh",
        (_t("self"), _s("clipValueMin"), _s("clipValueMax"), _o("out")),
        _EXACT,
        ({"clipValueMin": -1.0, "clipValueMax": 1.0}, {"clipValueMin": -0.3, "clipValueMax": 2.5}),
    ),
    Row("Hardshrink", (_t("self"), _s("lambd"), _o("out")), _EXACT, ({"lambd": 0.5}, {"lambd": 1.3})),
    Row("Softshrink", (_t("self"), _s("lambd"), _o("out")), _EXACT, ({"lambd": 0.5}, {"lambd": 1.3})),
    Row(
        "Softplus",
        (_t("self"), _s("beta"), _s("threshold"), _o("out")),
        _LIBM,
        ({"beta": 1.0, "threshold": 20.0}, {"beta": 2.0, "threshold": 3.0}),
    ),
    Row("Softsign", (_t("self"), _o("out")), _EXACT),
    Row(
        "LeakyRelu",
        (_t("self"), _s("negativeSlope"), _o("out")),
        _EXACT,
        ({"negativeSlope": 0.01}, {"negativeSlope": -0.25}),
    ),
    Row("Mish", (_t("self"), _o("out")), _LIBM),
    Row("LogSigmoid", (_t("self"), _o("out")), _LIBM),
    Row(
        "Threshold",
        (_t("self"), _s("threshold"), _s("value"), _o("out")),
        _EXACT,
        ({"threshold": 0.5, "value": -2.0}, {"threshold": -1.0, "value": 0.0}),
    ),
    Row(
        "Swish",
        (_t("self"), _s("betaOptional", True), _o("out")),
        _LIBM,
        ({"betaOptional": None}, {"betaOptional": 1.7}),
    ),
)
"""One-input activations: out = f(self, scalars)."""


def _elu_backward_check(call: Call) -> None:
    alpha = call.args.get("alpha")
    if call.args.get("isResult") and isinstance(alpha, AclScalar) and float(alpha.value.real) < 0:
        raise invalid("alpha must be non-negative when isResult is true (the result does not determine the input)")


_GRAD_SELF = (_t("gradOutput"), _t("self"))
_BACKWARD_V1: tuple[Row, ...] = (
    Row("SigmoidBackward", (_t("gradOutput"), _t("output"), _o("gradInput")), _EXACT, ranges={"output": (0.0, 1.0)}),
    Row("TanhBackward", (_t("gradOutput"), _t("output"), _o("gradInput")), _EXACT, ranges={"output": (-1.0, 1.0)}),
    Row("SiluBackward", (*_GRAD_SELF, _o("gradInput")), _LIBM),
    Row("GeluBackward", (*_GRAD_SELF, _o("gradInput", "const aclTensor*")), _LIBM),
    Row(
        "GeluBackwardV2",
        (*_GRAD_SELF, string_attr("approximate", choices=("none", "tanh")), _o("gradInput")),
        _LIBM,
        ({"approximate": "none"}, {"approximate": "tanh"}),
    ),
    Row("LogSigmoidBackward", (*_GRAD_SELF, _t("buffer"), _o("gradInput")), _LIBM),
    Row("FastGeluBackward", (*_GRAD_SELF, _o("gradInput")), _LIBM),
    Row(
        "SwishBackward",
        (*_GRAD_SELF, _s("betaOptional", True), _o("gradInput")),
        _LIBM,
        ({"betaOptional": None}, {"betaOptional": 1.7}),
    ),
    Row(
        "EluBackward",
        (
            _t("gradOutput"),
            _s("alpha"),
            _s("scale"),
            _s("inputScale"),
            bool_attr("isResult"),
            _t("selfOrResult"),
            _o("gradInput"),
        ),
        _LIBM,
        (
            {"alpha": 1.0, "scale": 1.0, "inputScale": 1.0, "isResult": False},
            {"alpha": 0.3, "scale": 1.5, "inputScale": 0.5, "isResult": True},
        ),
        check=_elu_backward_check,
    ),
    Row("SeluBackward", (_t("gradOutput"), _t("result"), _o("gradInput")), _EXACT, ranges={"result": (-1.75, 4.0)}),
    Row("HardswishBackward", (*_GRAD_SELF, _o("out")), _EXACT, ranges={"self": (-5.0, 5.0)}),
    Row("HardsigmoidBackward", (*_GRAD_SELF, _o("out")), _EXACT, ranges={"self": (-5.0, 5.0)}),
    Row(
        "HardtanhBackward",
        (*_GRAD_SELF, _s("min"), _s("max"), _o("out")),
        _EXACT,
        ({"min": -1.0, "max": 1.0}, {"min": -0.3, "max": 2.5}),
    ),
    Row("HardshrinkBackward", (*_GRAD_SELF, _s("lambd"), _o("gradInput")), _EXACT, ({"lambd": 0.5}, {"lambd": 1.3})),
    Row("SoftshrinkBackward", (*_GRAD_SELF, _s("lambda"), _o("gradInput")), _EXACT, ({"lambda": 0.5},)),
    Row(
        "SoftplusBackward",
        (*_GRAD_SELF, _s("beta"), _s("threshold"), _o("gradInput")),
        _LIBM,
        ({"beta": 1.0, "threshold": 20.0}, {"beta": 2.0, "threshold": 3.0}),
    ),
    Row("SoftsignBackward", (_t("gradients"), _t("features"), _o("output")), _EXACT),
    Row(
        "LeakyReluBackward",
        (*_GRAD_SELF, _s("negativeSlope"), bool_attr("selfIsResult"), _o("out")),
        _EXACT,
        ({"negativeSlope": 0.01, "selfIsResult": False}, {"negativeSlope": 0.2, "selfIsResult": True}),
    ),
    Row("MishBackward", (*_GRAD_SELF, _o("gradInput")), _LIBM),
    Row(
        "ThresholdBackward",
        (*_GRAD_SELF, _s("threshold"), _o("out")),
        _EXACT,
        ({"threshold": 0.5}, {"threshold": -1.0}),
    ),
)

SAME_FORMULA: dict[str, str] = {"HardswishBackwardV2": "HardswishBackward"}
"""Versioned ops whose page gives the formula an op declared here already computes: the twin → that op."""

_V1_BY_NAME = {r.name: r for r in _BACKWARD_V1}
BACKWARD: tuple[Row, ...] = (*_BACKWARD_V1, *(replace(_V1_BY_NAME[v1], name=v2) for v2, v1 in SAME_FORMULA.items()))
"""Two-input gradients: gradInput = gradOutput · f'(input or result)."""

_TWINS: dict[str, str] = {
    "Elu": "selfRef",
    "Celu": "selfRef",
    "Selu": "selfRef",
    "Hardswish": "self",
    "Hardsigmoid": "self",
    "Hardtanh": "selfRef",
    "LeakyRelu": "selfRef",
    "Mish": "selfRef",
    "Threshold": "selfRef",
}
"""Forward ops with an aclnnInplace twin, and the official name of its in-out tensor."""


def _tensors(row: Row) -> list[str]:
    return [p.name for p in row.params if p.kind is Kind.TENSOR and not p.writes]


def _spec(row: Row) -> OpSpec:
    inputs = _tensors(row)
    (result,) = [p.name for p in row.params if p.writes]

    def infer(call: Call) -> Infos:
        ts = [tensor_arg(call, n) for n in inputs]
        shape = broadcast_shapes(*(t.shape for t in ts), names=inputs)
        compute = ts[0].dtype
        for t in ts[1:]:
            compute = promote_types(compute, t.dtype)
        if row.check is not None:
            row.check(call)
        call.plan["compute"] = compute
        return {result: castable(shape, compute)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        shapes: Sequence[tuple[tuple[int, ...], ...]] = (
            [(s,) for s in S.ELEMENTWISE_SHAPES] if len(inputs) == 1 else [(b, a) for a, b in S.BROADCAST_PAIRS]
        )
        for dt in (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16):
            for k, values in enumerate(row.values):
                for combo in shapes:
                    args: dict[str, object] = dict(values)
                    padded = (*combo, *(combo[-1],) * (len(inputs) - len(combo)))  # a buffer takes self's shape
                    for name, shape in zip(inputs, padded):
                        low, high = (row.ranges or {}).get(name, (-4.0, 4.0))
                        # specials in the activation's own input; the gradient keeps finite values
                        special = name == inputs[min(1, len(inputs) - 1)]
                        args[name] = S.array(rng, shape, dt, low=low, high=high, special=special)
                    yield Sample(args, f"{dt.short} {[list(s) for s in combo]} setting {k}")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        base = dict(row.values[0])
        if len(inputs) == 2:
            a, b = inputs
            yield ErrorSample(
                {**base, a: S.array(rng, (2, 3), D.ACL_FLOAT), b: S.array(rng, (4, 3), D.ACL_FLOAT)},
                INVALID,
                "inputs that do not broadcast",
            )
        if row.check is not None and row.name == "EluBackward":
            yield ErrorSample(
                {
                    **base,
                    "alpha": -0.5,
                    "isResult": True,
                    "gradOutput": S.array(rng, (3,), D.ACL_FLOAT),
                    "selfOrResult": S.array(rng, (3,), D.ACL_FLOAT),
                },
                INVALID,
                "negative alpha with isResult",
            )

    return OpSpec(
        row.name,
        FAMILY,
        row.params,
        infer,
        alias_ok=True,
        samples=gen,
        error_samples=errors,
        accuracy=row.accuracy,
    )


_base = [_spec(r) for r in (*FORWARD, *BACKWARD)]
_by_name = {s.name: s for s in _base}
_twins = [
    inplace_twin(_by_name[op], ref_name=ref_name, self_name="self", out_name="out") for op, ref_name in _TWINS.items()
]

SPECS: list[OpSpec] = [*_base, *_twins]

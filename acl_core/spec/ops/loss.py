"""Losses and their backward ops (issue 16), declared from one table of pointwise losses.

Each ``POINTWISE`` row is a loss whose value is a sum of per-element terms (MseLoss, L1Loss, SmoothL1Loss,
SoftMarginLoss, BinaryCrossEntropy, BinaryCrossEntropyWithLogits, KlDiv) together with its backward
op (and, for BinaryCrossEntropyWithLogits and KlDiv, the gradient in the target: ``…TargetBackward``,
``gradTarget = gradOutput · ∂term/∂target``, torch's ``*_target_backward``); the official parameters of
each come from tests/data/cann/aclnn-signatures.tsv. ``reduction`` is
CANN's enum: 0 none (one term per element), 1 mean, 2 sum (a 0-d result; CANN's ``[1]`` is accepted
too). The terms follow torch's definitions (torch.nn.functional), which the CANN pages mirror.

Choices where the CANN docs are silent or not transcribed here:

* dtypes: FLOAT, FLOAT16 and BFLOAT16 for every tensor (the pages' dtype tables are not transcribed in
  tests/data/cann); the tensors broadcast (torch's rule), the op computes in their promoted type and
  the result has exactly that dtype;
* a backward op's gradient has the broadcast shape of all its tensors; with reduction mean it is
  divided by the number of terms (the element count of the broadcast loss inputs, gradOutput aside);
* the mean over zero terms is NaN, the sum 0 (torch's results);
* BinaryCrossEntropy clamps each log at -100 and its backward divides by max(x·(1-x), 1e-12), as torch
  does; inputs outside [0, 1] are not refused (the kernel cannot see them before it runs) and give
  NaN terms;
* SmoothL1Loss: ``beta`` >= 0 (161002 below), beta 0 is L1Loss; KlDiv: reduction 0/1/2 only (CANN's
  batchmean, where a version documents it, is not declared: its enum value is not transcribed).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.spec import samples as S
from acl_core.spec.accuracy import Accuracy, composite, relative_scale, ulp
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
    float_attr,
    int_attr,
    out,
    tensor,
)
from acl_core.spec.promotion import promote_types
from acl_core.spec.rules import FLOATS, broadcast_shapes, same, tensor_arg
from acl_core.tensor import AclTensor

FAMILY = "loss"

NONE, MEAN, SUM = 0, 1, 2
REDUCTIONS = (NONE, MEAN, SUM)
"""CANN's reduction enum (0 'none', 1 'mean', 2 'sum')."""

ROLES: dict[str, str] = {
    "self": "x",
    "target": "t",
    "weight": "w",
    "weightOptional": "w",
    "posWeightOptional": "pw",
    "gradOutput": "g",
    "gradOut": "g",
}
"""Official tensor names → the role a loss formula gives them (x input, t target, w weight, pw pos weight,
g incoming gradient); kernels on every backend read tensors by role."""


def _scale_terms(magnitude: Callable[[Mapping[str, Any]], np.ndarray]) -> Callable[..., dict[str, Any]]:
    """A composite class's ``S`` for a loss whose terms can cancel: the reduction of ``magnitude``'s bound per term."""

    def scale(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> dict[str, Any]:
        with np.errstate(all="ignore"):
            m = magnitude(args)
            r = int(args.get("reduction", NONE))
            if r != NONE:
                m = np.sum(m) / (m.size if r == MEAN and m.size else 1)
        return {name: np.broadcast_to(m, np.shape(v)) for name, v in outputs.items()}

    return scale


def _wide(args: Mapping[str, Any], name: str) -> np.ndarray:
    value = args.get(name)
    return np.asarray(1.0 if value is None else value, dtype=np.float64)


def _kl_magnitude(args: Mapping[str, Any]) -> np.ndarray:
    x, t = _wide(args, "self"), _wide(args, "target")
    if args.get("logTarget"):
        return np.exp(t) * (np.abs(t) + np.abs(x))
    return np.abs(t) * (np.abs(np.log(np.where(t > 0, t, 1.0))) + np.abs(x))


def _logits_magnitude(args: Mapping[str, Any]) -> np.ndarray:
    x, t = _wide(args, "self"), _wide(args, "target")
    w, pw = _wide(args, "weightOptional"), _wide(args, "posWeightOptional")
    lw = np.abs((pw - 1.0) * t + 1.0)
    return np.abs(w) * (np.abs((1.0 - t) * x) + lw * (np.log1p(np.exp(-np.abs(x))) + np.maximum(-x, 0.0)))


@dataclass(frozen=True)
class LossRow:
    """One pointwise loss: its forward and backward ops' official parameters, domains and accuracy."""

    name: str
    forward: tuple[Param, ...]
    backward_name: str
    backward: tuple[Param, ...]
    steps: int
    grad_ulps: float
    reason: str
    ranges: Mapping[str, tuple[float, float]]
    values: tuple[Mapping[str, object], ...] = ({},)
    magnitude: Callable[[Mapping[str, Any]], np.ndarray] | None = None
    special: bool = True
    target_name: str = ""
    """The op of the gradient in the target ("" where none is declared); its parameters are ``target_params``."""
    target_params: tuple[Param, ...] = ()


def _t(name: str, optional: bool = False) -> Param:
    return tensor(name, FLOATS, optional=optional)


def _o(name: str) -> Param:
    return out(name, FLOATS)


_R = int_attr("reduction", choices=REDUCTIONS)
_BETA = float_attr("beta", c_type="float", bounds=(0.0, None))
_LOGT = bool_attr("logTarget")
_XT = (_t("self"), _t("target"))
_GXT = (_t("gradOutput"), *_XT)
_LIBM = "evaluated in double (exp, log, log1p within a few double ulps), rounded once"
_ARITH = "differences, products and quotients evaluated in double, rounded once"

POINTWISE: tuple[LossRow, ...] = (
    LossRow("MseLoss", (*_XT, _R, _o("out")), "MseLossBackward", (*_GXT, _R, _o("out")), 3, 1, _ARITH, {}),
    LossRow("L1Loss", (*_XT, _R, _o("out")), "L1LossBackward", (*_GXT, _R, _o("gradInput")), 2, 1, _ARITH, {}),
    LossRow(
        "SmoothL1Loss",
        (*_XT, _R, _BETA, _o("result")),
        "SmoothL1LossBackward",
        (_t("gradOut"), *_XT, _R, _BETA, _o("gradInput")),
        4,
        1,
        _ARITH,
        {},
        ({"beta": 1.0}, {"beta": 0.5}, {"beta": 0.0}),
    ),
    LossRow(
        "SoftMarginLoss",
        (*_XT, _R, _o("out")),
        "SoftMarginLossBackward",
        (*_GXT, _R, _o("out")),
        4,
        2,
        _LIBM,
        {"target": (-1.5, 1.5)},
    ),
    LossRow(
        "BinaryCrossEntropy",
        (*_XT, _t("weight", True), _R, _o("out")),
        "BinaryCrossEntropyBackward",
        (*_GXT, _t("weightOptional", True), _R, _o("out")),
        6,
        2,
        _LIBM,
        {"self": (0.02, 0.98), "target": (0.0, 1.0), "weight": (0.1, 2.0), "weightOptional": (0.1, 2.0)},
        special=False,
    ),
    LossRow(
        "BinaryCrossEntropyWithLogits",
        (*_XT, _t("weightOptional", True), _t("posWeightOptional", True), _R, _o("out")),
        "BinaryCrossEntropyWithLogitsBackward",
        (*_GXT, _t("weightOptional", True), _t("posWeightOptional", True), _R, _o("out")),
        8,
        2,
        _LIBM,
        {"target": (0.0, 1.0), "weightOptional": (0.1, 2.0), "posWeightOptional": (0.1, 3.0)},
        magnitude=_logits_magnitude,
        target_name="BinaryCrossEntropyWithLogitsTargetBackward",
        target_params=(*_GXT, _t("weightOptional", True), _t("posWeightOptional", True), _R, _o("gradTarget")),
    ),
    LossRow(
        "KlDiv",
        (*_XT, _R, _LOGT, _o("out")),
        "KlDivBackward",
        (*_GXT, _R, _LOGT, _o("out")),
        6,
        2,
        _LIBM,
        {"target": (0.05, 2.0)},
        ({"logTarget": False}, {"logTarget": True}),
        magnitude=_kl_magnitude,
        target_name="KlDivTargetBackward",
        target_params=(*_GXT, _R, _LOGT, _o("gradTarget")),
    ),
)
"""Pointwise losses: the forward sums terms f(x, t, w, ...); the backward is gradOutput · ∂f/∂x."""


def _inputs(params: Iterable[Param]) -> list[Param]:
    return [p for p in params if p.kind is Kind.TENSOR and not p.writes]


def _result(params: Iterable[Param]) -> str:
    (name,) = [p.name for p in params if p.writes]
    return name


def reduced_shape_of(call: Call, name: str) -> tuple[int, ...]:
    """A reduced loss: 0-d (torch), or ``[1]`` when the caller's output is that (CANN's docs)."""
    o = call.args.get(name)
    return (1,) if isinstance(o, AclTensor) and tuple(o.view_dims) == (1,) else ()


def _infer(params: tuple[Param, ...], backward: bool) -> Callable[[Call], Infos]:
    inputs = [p.name for p in _inputs(params)]
    result = _result(params)

    def infer(call: Call) -> Infos:
        present = [n for n in inputs if isinstance(call.args.get(n), AclTensor)]
        ts = [tensor_arg(call, n) for n in present]
        shape = broadcast_shapes(*(t.shape for t in ts), names=present)
        compute = ts[0].dtype
        for t in ts[1:]:
            compute = promote_types(compute, t.dtype)
        call.plan["compute"] = compute
        if backward or call.args["reduction"] == NONE:
            return {result: same(shape, compute)}
        return {result: same(reduced_shape_of(call, result), compute)}

    return infer


_SHAPES: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...] = (
    ((2, 3, 4), (2, 3, 4)),
    ((4, 1, 3), (1, 5, 3)),
    ((), ()),
    ((0, 3), (0, 3)),
)
"""(self, target) shapes: same, broadcast, 0-d, empty."""


def _arrays(
    rng: np.random.Generator,
    row: LossRow,
    params: tuple[Param, ...],
    shapes: tuple[tuple[int, ...], tuple[int, ...]],
    dt: D,
    grad_shape: tuple[int, ...] | None,
    optionals: bool,
) -> dict[str, object]:
    x_shape, t_shape = shapes
    args: dict[str, object] = {}
    for p in _inputs(params):
        role = ROLES[p.name]
        if role in ("w", "pw") and not optionals:
            args[p.name] = None
            continue
        shape = {"x": x_shape, "t": t_shape, "w": t_shape[-1:], "pw": t_shape[-1:], "g": grad_shape or ()}[role]
        low, high = row.ranges.get(p.name, (-1.0, 2.0) if role == "g" else (-4.0, 4.0))
        args[p.name] = S.array(rng, shape, dt, low=low, high=high, special=row.special and role == "x")
    return args


def params_of(op: str) -> tuple[Param, ...]:
    """The official parameters of loss op ``op`` (a forward, backward or target-gradient op)."""
    row, backward = ROW_OF[op]
    if op in WRT_TARGET:
        return row.target_params
    return row.backward if backward else row.forward


def _samples(
    row: LossRow, params: tuple[Param, ...], backward: bool
) -> Callable[[np.random.Generator], Iterable[Sample]]:

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16):
            for k, values in enumerate(row.values):
                for reduction in REDUCTIONS:
                    for shapes in _SHAPES:
                        full = broadcast_shapes(*shapes)
                        grad = full if reduction == NONE else ()
                        optionals = (k + reduction) % 2 == 0 or len(shapes[1]) == 0
                        args = {"reduction": reduction, **values}
                        args.update(_arrays(rng, row, params, shapes, dt, grad if backward else None, optionals))
                        note = f"{dt.short} {[list(s) for s in shapes]} reduction {reduction} setting {k}"
                        yield Sample(args, note)
        for dt in (D.ACL_FLOAT16, D.ACL_BF16):  # long enough that a 16-bit accumulator is caught
            args = {"reduction": SUM, **row.values[0]}
            args.update(_arrays(rng, row, params, ((3, 700), (3, 700)), dt, () if backward else None, True))
            yield Sample(args, f"{dt.short} [3, 700] sum")
        mixed = {"reduction": MEAN, **row.values[0]}
        mixed.update(_arrays(rng, row, params, ((2, 5), (2, 5)), D.ACL_FLOAT, () if backward else None, True))
        target = next(p.name for p in params if ROLES.get(p.name) == "t")
        mixed[target] = np.asarray(mixed[target]).astype(np.float16)
        yield Sample(mixed, "float32 self, float16 target (promoted to float32) mean")

    return gen


def _errors(
    row: LossRow, params: tuple[Param, ...], backward: bool
) -> Callable[[np.random.Generator], Iterable[ErrorSample]]:
    result = _result(params)

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        grad = (2, 3) if backward else None
        base: dict[str, object] = {"reduction": NONE, **row.values[0]}
        base.update(_arrays(rng, row, params, ((2, 3), (2, 3)), D.ACL_FLOAT, grad, True))
        x_name, t_name = (next(p.name for p in params if ROLES.get(p.name) == r) for r in ("x", "t"))
        yield ErrorSample({**base, t_name: S.array(rng, (4, 3), D.ACL_FLOAT)}, INVALID, "shapes that do not broadcast")
        yield ErrorSample({**base, "reduction": 3}, INVALID, "reduction 3")
        yield ErrorSample({**base, x_name: S.array(rng, (2, 3), D.ACL_INT32)}, INVALID, "int32 self")
        yield ErrorSample(
            {**base, result: np.zeros((2, 3), np.float16)}, INVALID, "result dtype differs from the computation's"
        )
        if not backward:
            yield ErrorSample(
                {**base, "reduction": MEAN, result: np.zeros((2, 3), np.float32)}, INVALID, "mean into a [2, 3] out"
            )
        if "beta" in base:
            yield ErrorSample({**base, "beta": -0.5}, INVALID, "negative beta")
        weight = next((p.name for p in params if ROLES.get(p.name) == "w"), None)
        if weight is not None:
            yield ErrorSample(
                {**base, weight: S.array(rng, (5,), D.ACL_FLOAT)}, INVALID, "weight that does not broadcast"
            )

    return errors


def _accuracy(row: LossRow, backward: bool) -> Accuracy:
    if backward:
        return ulp(row.grad_ulps, reason=f"{row.reason}: within {row.grad_ulps:g} float32 ulp")
    scale = relative_scale if row.magnitude is None else _scale_terms(row.magnitude)
    return composite(
        steps=row.steps,
        scale_of=scale,
        reason=f"terms {row.reason}, summed in at least float32 (none: one term per element)",
    )


def _spec(row: LossRow, name: str) -> OpSpec:
    params = params_of(name)
    backward = ROW_OF[name][1]
    what = "target gradient" if name in WRT_TARGET else "gradient" if backward else "loss"
    return OpSpec(
        name,
        FAMILY,
        params,
        _infer(params, backward),
        samples=_samples(row, params, backward),
        error_samples=_errors(row, params, backward),
        accuracy=_accuracy(row, backward),
        summary=f"{row.name} {what}",
    )


WRT_TARGET: frozenset[str] = frozenset(r.target_name for r in POINTWISE if r.target_name)
"""The gradients in the target (``gradTarget``) rather than in the input."""

ROW_OF: dict[str, tuple[LossRow, bool]] = {
    **{r.name: (r, False) for r in POINTWISE},
    **{r.backward_name: (r, True) for r in POINTWISE},
    **{r.target_name: (r, True) for r in POINTWISE if r.target_name},
}
"""Every pointwise loss op: its row and whether it is a backward op (in the input, or in the target)."""

SPECS: list[OpSpec] = [_spec(row, name) for name, (row, _) in ROW_OF.items()]

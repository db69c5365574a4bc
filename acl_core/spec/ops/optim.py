"""Optimizer steps (issue 16): ApplyAdamW and ApplyAdamWV2, one AdamW step in place on var, m and v.

Both apply decoupled weight decay (Loshchilov & Hutter, torch.optim.AdamW), with g = -grad when
``maximize``::

    var ← var · (1 − lr·weightDecay)
    m ← beta1·m + (1 − beta1)·g
    v ← beta2·v + (1 − beta2)·g²
    v̂ ← max(maxGradNorm, v) when amsgrad, else v
    var ← var − (lr / (1 − beta1^t)) · m / (sqrt(v̂) / sqrt(1 − beta2^t) + eps)

Bias correction: ApplyAdamW takes the powers ``beta1Power = beta1^t`` and ``beta2Power = beta2^t``
as one-element tensors; ApplyAdamWV2 takes the step count ``step`` (t, already counting this step, as
torch's fused AdamW receives it) and raises the betas itself.

Choices where the CANN docs are silent or not transcribed here:

* dtypes: var, m, v, grad (and maxGradNorm) FLOAT, FLOAT16 or BFLOAT16, all one dtype and one shape;
  the hyper-parameter tensors of ApplyAdamW are one-element float tensors; V2's ``step`` is a
  one-element FLOAT or INT64 tensor;
* ApplyAdamW's ``maxGradNormOptional`` is an input (its prototype is ``const``): the step uses
  max(maxGradNorm, v) and does not write it back; V2's ``maxGradNormOptionalRef`` is updated to that
  maximum. With amsgrad the max tensor is required (161001 when null);
* every hyper-parameter is rounded to float32 and the update is evaluated in double, each of var, m
  and v rounded once to its dtype.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.spec import samples as S
from acl_core.spec.accuracy import ulp
from acl_core.spec.opspec import (
    INVALID,
    NULLPTR,
    Call,
    ErrorSample,
    Infos,
    Kind,
    OpSpec,
    Param,
    Role,
    Sample,
    bool_attr,
    float_attr,
    invalid,
    nullptr,
    ref,
    tensor,
)
from acl_core.spec.rules import FLOATS, tensor_arg

FAMILY = "optim"
_ACCURACY = ulp(
    2,
    reason="evaluated in double and rounded once per output; the samples' lr keeps lr·update well below |var|"
    " (no cancellation), so a float32 evaluation stays within 2 ulp",
)
_STATE = ("varRef", "mRef", "vRef")


def _scalar_tensor(name: str) -> Param:
    return tensor(name, FLOATS, max_rank=1)


def _max_param(name: str, inout: bool) -> Param:
    role, c_type = (Role.INOUT, "aclTensor*") if inout else (Role.IN, "const aclTensor*")
    return Param(name, Kind.TENSOR, c_type, role, optional=True, dtypes=FLOATS, max_rank=8)


V1_PARAMS = (
    *(ref(n, FLOATS) for n in _STATE),
    *(_scalar_tensor(n) for n in ("beta1Power", "beta2Power", "lr", "weightDecay", "beta1", "beta2", "eps")),
    tensor("grad", FLOATS),
    _max_param("maxGradNormOptional", inout=False),
    bool_attr("amsgrad"),
    bool_attr("maximize"),
)
V2_PARAMS = (
    *(ref(n, FLOATS) for n in _STATE),
    _max_param("maxGradNormOptionalRef", inout=True),
    tensor("grad", FLOATS),
    tensor("step", {D.ACL_FLOAT, D.ACL_INT64}, max_rank=1),
    *(float_attr(n, c_type="float") for n in ("lr", "beta1", "beta2", "weightDecay", "eps")),
    bool_attr("amsgrad"),
    bool_attr("maximize"),
)


def _infer(max_name: str, scalars: tuple[str, ...]) -> object:
    def infer(call: Call) -> Infos:
        var = tensor_arg(call, "varRef")
        names = [*_STATE, "grad"] + ([max_name] if call.args.get(max_name) is not None else [])
        for name in names:
            t = tensor_arg(call, name)
            if tuple(t.view_dims) != tuple(var.view_dims):
                raise invalid(f"{name} has shape {list(t.view_dims)}; varRef has {list(var.view_dims)}")
            if t.dtype != var.dtype:
                raise invalid(f"{name} has dtype {t.dtype.short}; varRef has {var.dtype.short}")
        for name in scalars:
            if tensor_arg(call, name).numel != 1:
                raise invalid(f"{name} holds {tensor_arg(call, name).numel} elements; expected 1")
        if call.args["amsgrad"] and call.args.get(max_name) is None:
            raise nullptr(f"{max_name} is null, but amsgrad needs it")
        call.plan["compute"] = var.dtype
        return {}

    return infer


_V1_SCALARS = ("beta1Power", "beta2Power", "lr", "weightDecay", "beta1", "beta2", "eps")
SHAPES = ((7,), (2, 3, 4), (0,), (65, 33))
SETTINGS = (
    {"lr": 1e-3, "weightDecay": 1e-2, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "t": 1},
    {"lr": 2e-3, "weightDecay": 0.1, "beta1": 0.8, "beta2": 0.99, "eps": 1e-6, "t": 7},
)
"""Hyper-parameters of the samples (``t``: the step count the bias corrections use)."""


def _state(rng: np.random.Generator, shape: tuple[int, ...], dt: D, amsgrad: bool, max_name: str) -> dict:
    args = {
        "varRef": S.array(rng, shape, dt, low=-2.0, high=2.0),
        "mRef": S.array(rng, shape, dt, low=-0.1, high=0.1),
        "vRef": S.positive(rng, shape, dt, low=1e-4, high=0.05),
        "grad": S.array(rng, shape, dt, low=-1.0, high=1.0),
    }
    if amsgrad:
        args[max_name] = S.positive(rng, shape, dt, low=1e-4, high=0.08)
    return args


def _v1_scalars(setting: dict) -> dict:
    t = setting["t"]
    values = {
        "beta1Power": setting["beta1"] ** t,
        "beta2Power": setting["beta2"] ** t,
        **{k: setting[k] for k in ("lr", "weightDecay", "beta1", "beta2", "eps")},
    }
    return {k: np.array([v], np.float32) for k, v in values.items()}


def _v2_scalars(setting: dict) -> dict:
    return {
        "step": np.array([setting["t"]], np.int64),
        **{k: setting[k] for k in ("lr", "beta1", "beta2", "weightDecay", "eps")},
    }


def _samples(v2: bool) -> object:
    max_name = "maxGradNormOptionalRef" if v2 else "maxGradNormOptional"

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16):
            for k, setting in enumerate(SETTINGS):
                for amsgrad, maximize in ((False, False), (True, False), (False, True)):
                    for shape in SHAPES if dt == D.ACL_FLOAT or k == 0 else SHAPES[:2]:
                        args = _state(rng, shape, dt, amsgrad, max_name)
                        args.update(_v2_scalars(setting) if v2 else _v1_scalars(setting))
                        args.update({"amsgrad": amsgrad, "maximize": maximize})
                        note = f"{dt.short} {list(shape)} setting {k} amsgrad={amsgrad} maximize={maximize}"
                        yield Sample(args, note)
        if v2:
            args = _state(rng, (5,), D.ACL_FLOAT, False, max_name)
            args.update(_v2_scalars(SETTINGS[1]))
            args["step"] = np.array([3.0], np.float32)
            yield Sample({**args, "amsgrad": False, "maximize": False}, "float step")

    return gen


def _errors(v2: bool) -> object:
    max_name = "maxGradNormOptionalRef" if v2 else "maxGradNormOptional"

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        base = _state(rng, (4,), D.ACL_FLOAT, False, max_name)
        base.update(_v2_scalars(SETTINGS[0]) if v2 else _v1_scalars(SETTINGS[0]))
        base.update({"amsgrad": False, "maximize": False})
        yield ErrorSample({**base, "grad": S.array(rng, (5,), D.ACL_FLOAT)}, INVALID, "grad of another shape")
        yield ErrorSample({**base, "mRef": S.array(rng, (4,), D.ACL_FLOAT16)}, INVALID, "mRef of another dtype")
        yield ErrorSample({**base, "amsgrad": True}, NULLPTR, "amsgrad without the max tensor")
        if not v2:
            yield ErrorSample({**base, "lr": np.ones(2, np.float32)}, INVALID, "lr of two elements")
        else:
            yield ErrorSample({**base, "step": np.ones(2, np.int64)}, INVALID, "step of two elements")

    return errors


SPECS: list[OpSpec] = [
    OpSpec(
        "ApplyAdamW",
        FAMILY,
        V1_PARAMS,
        _infer("maxGradNormOptional", _V1_SCALARS),  # type: ignore[arg-type]
        samples=_samples(False),  # type: ignore[arg-type]
        error_samples=_errors(False),  # type: ignore[arg-type]
        summary="one AdamW step in place (bias corrections from beta powers)",
        accuracy=_ACCURACY,
    ),
    OpSpec(
        "ApplyAdamWV2",
        FAMILY,
        V2_PARAMS,
        _infer("maxGradNormOptionalRef", ("step",)),  # type: ignore[arg-type]
        samples=_samples(True),  # type: ignore[arg-type]
        error_samples=_errors(True),  # type: ignore[arg-type]
        summary="one AdamW step in place (bias corrections from the step count)",
        accuracy=_ACCURACY,
    ),
]

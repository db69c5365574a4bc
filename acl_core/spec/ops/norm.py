"""Normalisation operators: LayerNorm, AddLayerNorm, RmsNorm, GemmaRmsNorm, AddRmsNorm, GroupNorm, BatchNorm.

GemmaRmsNorm is RmsNorm with Gemma's zero-centred weight: yOut = x * rstd * (1 + gamma), the same
parameters, rules and rstdOut (1 + gamma is formed in the compute precision, float32 or wider).

Shapes follow the CANN documents: statistics of the row-wise norms keep the input's rank with the
normalised dimensions set to 1; GroupNorm's statistics are ``[N, group]``; BatchNorm's are ``[C]``.
Shape relationships that CANN reports from tiling (561002) are refused here in phase 1 with 161002,
so every backend fails the same way before it computes anything.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.formats import Format
from acl_core.spec import samples as S
from acl_core.spec.accuracy import (
    Accuracy,
    composite,
    group_norm_scale,
    layer_norm_scale,
    summed_input,
    table,
    trailing_elements,
    with_accuracy,
)
from acl_core.spec.opspec import (
    INVALID,
    Call,
    ErrorSample,
    Infos,
    OpSpec,
    OutInfo,
    Param,
    Sample,
    bool_attr,
    float_attr,
    int_array,
    int_attr,
    invalid,
    nullptr,
    out,
    ref,
    tensor,
)
from acl_core.spec.rules import FLOATS, listed, same, tensor_arg
from acl_core.tensor import AclIntArray, AclTensor

FAMILY = "norm"
SAMPLE_DTYPES = (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16)
_F32 = D.ACL_FLOAT
# Channel-first layouts only: the channel axis is dim 1 (channel-last NHWC/NDHWC is not modelled).
_BN_FORMATS = frozenset(
    {Format.ACL_FORMAT_ND, Format.ACL_FORMAT_NC, Format.ACL_FORMAT_NCL, Format.ACL_FORMAT_NCHW, Format.ACL_FORMAT_NCDHW}
)


# ----------------------------------------------------------------------------- shared rules
def _optional_tensor(call: Call, name: str) -> AclTensor | None:
    t = call.args.get(name)
    return t if isinstance(t, AclTensor) else None


def _stat_shape(shape: Sequence[int], normalised: int) -> tuple[int, ...]:
    """``shape`` with its last ``normalised`` dimensions set to 1 (row statistics keep the rank)."""
    lead = len(shape) - normalised
    return tuple(shape[:lead]) + (1,) * normalised


def _check_trailing(x: AclTensor, x_name: str, norm: Sequence[int], what: str) -> None:
    """``norm`` must be the trailing dimensions of ``x`` (161002 otherwise)."""
    if not 1 <= len(norm) <= x.rank:
        raise invalid(f"{what} has {len(norm)} dimensions; expected 1 to {x_name}'s rank {x.rank}")
    if tuple(x.shape[x.rank - len(norm) :]) != tuple(norm):
        raise invalid(f"{what} {list(norm)} is not the trailing part of {x_name}'s shape {list(x.shape)}")


def _check_same_shape(a: AclTensor, a_name: str, b: AclTensor, b_name: str) -> None:
    if tuple(a.shape) != tuple(b.shape):
        raise invalid(f"{b_name} has shape {list(b.shape)}; it must equal {a_name}'s {list(a.shape)}")


def _check_dtype_in(t: AclTensor, name: str, allowed: Iterable[D], why: str) -> None:
    allowed = tuple(allowed)
    if t.dtype not in allowed:
        names = " or ".join(d.short for d in allowed)
        raise invalid(f"{name} has dtype {t.dtype.short}; {why} it must be {names}")


def _require_output(call: Call, name: str, anchor: str, why: str) -> None:
    """161001 when output ``name`` is null although ``why``.

    The check waits until the mandatory output ``anchor`` is bound: the validator refuses a null
    mandatory output before any rule runs, so a null anchor means the outputs are still being
    allocated from this very rule (the Pythonic layer's first pass) and nothing is missing yet.
    """
    if call.args.get(anchor) is not None and call.args.get(name) is None:
        raise nullptr(f"{name} is null, but it is required when {why}")


def _channel_vector(t: AclTensor, name: str, channels: int) -> None:
    if t.rank != 1 or t.shape[0] != channels:
        raise invalid(f"{name} must be 1-D with {channels} elements (the channel count), not {list(t.shape)}")


# ----------------------------------------------------------------------------- LayerNorm
def _layer_norm() -> OpSpec:
    params = (
        tensor("input", FLOATS, min_rank=1),
        int_array("normalizedShape"),
        tensor("weightOptional", FLOATS, optional=True),
        tensor("biasOptional", FLOATS, optional=True),
        float_attr("eps"),
        out("out", FLOATS),
        out("meanOutOptional", FLOATS, optional=True),
        out("rstdOutOptional", FLOATS, optional=True),
    )

    def infer(call: Call) -> Infos:
        x = tensor_arg(call, "input")
        arr = call.args["normalizedShape"]
        assert isinstance(arr, AclIntArray)
        norm = tuple(arr.values)
        _check_trailing(x, "input", norm, "normalizedShape")
        w, b = _optional_tensor(call, "weightOptional"), _optional_tensor(call, "biasOptional")
        for t, name in ((w, "weightOptional"), (b, "biasOptional")):
            if t is None:
                continue
            if tuple(t.shape) != norm:
                raise invalid(f"{name} has shape {list(t.shape)}; it must equal normalizedShape {list(norm)}")
            _check_dtype_in(t, name, (x.dtype, _F32), f"as an affine parameter of a {x.dtype.short} input")
        if w is not None and b is not None and w.dtype != b.dtype:
            raise invalid(f"weightOptional ({w.dtype.short}) and biasOptional ({b.dtype.short}) must share a dtype")
        call.plan["axes"] = tuple(range(x.rank - len(norm), x.rank))
        stats = _stat_shape(x.shape, len(norm))
        # CANN casts each result to its output's dtype: any supported float is accepted.
        return {
            "out": listed(x.shape, x.dtype),
            "meanOutOptional": listed(stats, x.dtype),
            "rstdOutOptional": listed(stats, x.dtype),
        }

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in SAMPLE_DTYPES:
            x = S.array(rng, (2, 3, 8), dt)
            w, b = S.array(rng, (8,), dt, low=0.5, high=1.5), S.array(rng, (8,), dt)
            yield Sample(
                {"input": x, "normalizedShape": [8], "weightOptional": w, "biasOptional": b, "eps": 1e-5}, dt.short
            )
            yield Sample(
                {"input": S.array(rng, (0, 8), dt), "normalizedShape": [8], "eps": 1e-5}, f"{dt.short} empty batch"
            )
        x = S.array(rng, (2, 3, 4, 5), D.ACL_FLOAT)
        w = S.array(rng, (4, 5), D.ACL_FLOAT, low=0.5, high=1.5)
        b = S.array(rng, (4, 5), D.ACL_FLOAT)
        yield Sample(
            {"input": x, "normalizedShape": [4, 5], "weightOptional": w, "biasOptional": b, "eps": 1e-6},
            "float32 normalised over [4, 5]",
        )
        yield Sample({"input": S.array(rng, (3, 6), D.ACL_FLOAT16), "normalizedShape": [6], "eps": 1e-5}, "no affine")
        for dt in (D.ACL_FLOAT16, D.ACL_BF16):  # a row long enough that a 16-bit row sum is off by ulps
            x = S.array(rng, (2, 512), dt, low=1.0, high=3.0)  # mean ≠ 0: the sum has magnitude
            yield Sample({"input": x, "normalizedShape": [512], "eps": 1e-5}, f"{dt.short} long row")
        yield Sample(
            {
                "input": S.array(rng, (2, 16), D.ACL_BF16),
                "normalizedShape": [16],
                "weightOptional": S.array(rng, (16,), D.ACL_FLOAT),
                "biasOptional": S.array(rng, (16,), D.ACL_FLOAT),
                "eps": 1e-5,
            },
            "bf16 input, float32 affine",
        )
        yield Sample({"input": S.array(rng, (3, 0), D.ACL_FLOAT), "normalizedShape": [0], "eps": 1e-5}, "empty rows")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = S.array(rng, (2, 3, 4), D.ACL_FLOAT)
        yield ErrorSample({"input": x, "normalizedShape": [3], "eps": 1e-5}, INVALID, "normalizedShape not trailing")
        yield ErrorSample({"input": x, "normalizedShape": [], "eps": 1e-5}, INVALID, "empty normalizedShape")
        yield ErrorSample(
            {"input": x, "normalizedShape": [1, 2, 3, 4], "eps": 1e-5}, INVALID, "normalizedShape longer than input"
        )
        yield ErrorSample(
            {"input": x, "normalizedShape": [4], "weightOptional": S.array(rng, (5,), D.ACL_FLOAT), "eps": 1e-5},
            INVALID,
            "weight of the wrong shape",
        )
        yield ErrorSample(
            {"input": x, "normalizedShape": [3, 4], "biasOptional": S.array(rng, (12,), D.ACL_FLOAT), "eps": 1e-5},
            INVALID,
            "bias of the wrong rank",
        )
        yield ErrorSample(
            {"input": x, "normalizedShape": [4], "weightOptional": S.array(rng, (4,), D.ACL_BF16), "eps": 1e-5},
            INVALID,
            "bf16 weight for a float32 input",
        )
        yield ErrorSample(
            {"input": x, "normalizedShape": [4], "out": np.zeros((2, 3, 5), np.float32), "eps": 1e-5},
            INVALID,
            "out of the wrong shape",
        )
        yield ErrorSample(
            {"input": x, "normalizedShape": [4], "meanOutOptional": np.zeros((2, 3), np.float32), "eps": 1e-5},
            INVALID,
            "mean without the kept dimension",
        )

    return OpSpec(
        "LayerNorm",
        FAMILY,
        params,
        infer,
        samples=gen,
        error_samples=errors,
        summary="out = (x - E[x]) * rstd * weight + bias over the trailing normalizedShape dims",
    )


# ----------------------------------------------------------------------------- AddLayerNorm
def _add_layer_norm() -> OpSpec:
    params = (
        tensor("x1", FLOATS, min_rank=1),
        tensor("x2", FLOATS, min_rank=1),
        tensor("gamma", FLOATS, min_rank=1),
        tensor("beta", FLOATS, min_rank=1),
        tensor("biasOptional", FLOATS, optional=True),
        float_attr("epsilon"),
        bool_attr("additionalOutput"),
        out("yOut", FLOATS, c_type="const aclTensor*"),
        out("meanOut", {_F32}, c_type="const aclTensor*"),
        out("rstdOut", {_F32}, c_type="const aclTensor*"),
        out("xOut", FLOATS, optional=True, c_type="const aclTensor*"),
    )

    def infer(call: Call) -> Infos:
        x1, x2 = tensor_arg(call, "x1"), tensor_arg(call, "x2")
        gamma, beta = tensor_arg(call, "gamma"), tensor_arg(call, "beta")
        _check_same_shape(x1, "x1", x2, "x2")
        if x1.dtype == x2.dtype:
            result = x1.dtype
        elif _F32 in (x1.dtype, x2.dtype):
            result = _F32  # the documented mixed rows pair a 16-bit input with float32
        else:
            raise invalid(f"x1 ({x1.dtype.short}) and x2 ({x2.dtype.short}) cannot be mixed; only with float32")
        _check_same_shape(gamma, "gamma", beta, "beta")
        _check_trailing(x1, "x1", gamma.shape, "gamma")
        if gamma.dtype != beta.dtype:
            raise invalid(f"gamma ({gamma.dtype.short}) and beta ({beta.dtype.short}) must share a dtype")
        _check_dtype_in(gamma, "gamma", (result, _F32), f"with {result.short} inputs")
        bias = _optional_tensor(call, "biasOptional")
        if bias is not None:
            if tuple(bias.shape) not in (tuple(gamma.shape), tuple(x1.shape)):
                raise invalid(f"biasOptional has shape {list(bias.shape)}; it must equal gamma's or x1's")
            _check_dtype_in(bias, "biasOptional", (result,), f"with {result.short} inputs")
        additional = bool(call.args["additionalOutput"])
        if additional:
            _require_output(call, "xOut", "yOut", "additionalOutput is true")
        call.plan["axes"] = tuple(range(x1.rank - gamma.rank, x1.rank))
        stats = _stat_shape(x1.shape, gamma.rank)
        return {
            "yOut": same(x1.shape, result),
            "meanOut": same(stats, _F32),
            "rstdOut": same(stats, _F32),
            "xOut": same(x1.shape, result) if additional else None,
        }

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in SAMPLE_DTYPES:
            x1, x2 = S.array(rng, (2, 3, 8), dt), S.array(rng, (2, 3, 8), dt)
            g, b = S.array(rng, (8,), dt, low=0.5, high=1.5), S.array(rng, (8,), dt)
            args = {"x1": x1, "x2": x2, "gamma": g, "beta": b, "epsilon": 1e-5, "additionalOutput": True}
            yield Sample(args, dt.short)
            yield Sample({**args, "biasOptional": S.array(rng, (8,), dt)}, f"{dt.short} with bias")
        g32, b32 = S.array(rng, (4, 5), _F32, low=0.5, high=1.5), S.array(rng, (4, 5), _F32)
        yield Sample(
            {
                "x1": S.array(rng, (2, 4, 5), D.ACL_FLOAT16),
                "x2": S.array(rng, (2, 4, 5), D.ACL_FLOAT16),
                "gamma": g32,
                "beta": b32,
                "biasOptional": S.array(rng, (2, 4, 5), D.ACL_FLOAT16),
                "epsilon": 1e-5,
                "additionalOutput": True,
            },
            "float16 inputs, float32 gamma/beta over [4, 5], full-shape bias",
        )
        yield Sample(
            {
                "x1": S.array(rng, (3, 5), _F32),
                "x2": S.array(rng, (3, 5), D.ACL_BF16),
                "gamma": S.array(rng, (5,), _F32),
                "beta": S.array(rng, (5,), _F32),
                "epsilon": 1e-5,
                "additionalOutput": False,
            },
            "float32 + bf16 without xOut",
        )
        e = S.array(rng, (0, 8), _F32)
        yield Sample(
            {
                "x1": e,
                "x2": e,
                "gamma": np.ones(8, np.float32),
                "beta": np.zeros(8, np.float32),
                "epsilon": 1e-5,
                "additionalOutput": True,
            },
            "empty batch",
        )

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = S.array(rng, (2, 8), _F32)
        g, b = np.ones(8, np.float32), np.zeros(8, np.float32)
        base = {"x1": x, "x2": x, "gamma": g, "beta": b, "epsilon": 1e-5, "additionalOutput": True}
        yield ErrorSample({**base, "x2": S.array(rng, (1, 8), _F32)}, INVALID, "x2 of another shape")
        yield ErrorSample(
            {**base, "gamma": np.ones(4, np.float32), "beta": np.zeros(4, np.float32)}, INVALID, "gamma not trailing"
        )
        yield ErrorSample({**base, "beta": np.zeros(8, np.float16)}, INVALID, "gamma and beta dtypes differ")
        yield ErrorSample(
            {**base, "x1": S.array(rng, (2, 8), D.ACL_FLOAT16), "x2": S.array(rng, (2, 8), D.ACL_BF16)},
            INVALID,
            "float16 + bf16",
        )
        yield ErrorSample({**base, "biasOptional": np.zeros(3, np.float32)}, INVALID, "bias of the wrong shape")
        yield ErrorSample({**base, "meanOut": np.zeros((2,), np.float32)}, INVALID, "meanOut without the kept dim")

    return OpSpec(
        "AddLayerNorm",
        FAMILY,
        params,
        infer,
        samples=gen,
        error_samples=errors,
        summary="x = x1 + x2 (+ bias); y = LayerNorm(x) over gamma's trailing dims",
    )


# ----------------------------------------------------------------------------- RmsNorm
def _rms_rule(call: Call, x: AclTensor, x_name: str, gamma_dtypes: Iterable[D]) -> tuple[int, ...]:
    gamma = tensor_arg(call, "gamma")
    _check_trailing(x, x_name, gamma.shape, "gamma")
    _check_dtype_in(gamma, "gamma", gamma_dtypes, f"with a {x.dtype.short} {x_name}")
    call.plan["axes"] = tuple(range(x.rank - gamma.rank, x.rank))
    return _stat_shape(x.shape, gamma.rank)


def _rms_norm() -> OpSpec:
    params = (
        tensor("x", FLOATS, min_rank=1),
        tensor("gamma", FLOATS, min_rank=1),
        float_attr("epsilon"),
        out("yOut", FLOATS, c_type="const aclTensor*"),
        out("rstdOut", {_F32}, c_type="const aclTensor*"),
    )

    def infer(call: Call) -> Infos:
        x = tensor_arg(call, "x")
        stats = _rms_rule(call, x, "x", {x.dtype, _F32})
        return {"yOut": same(x.shape, x.dtype), "rstdOut": same(stats, _F32)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in SAMPLE_DTYPES:
            yield Sample(
                {"x": S.array(rng, (2, 3, 16), dt), "gamma": S.array(rng, (16,), dt), "epsilon": 1e-6}, dt.short
            )
            yield Sample(
                {"x": S.array(rng, (4, 16), dt), "gamma": S.array(rng, (16,), _F32), "epsilon": 1e-6},
                f"{dt.short} x, float32 gamma",
            )
        yield Sample(
            {"x": S.array(rng, (2, 3, 4, 8), _F32), "gamma": S.array(rng, (4, 8), _F32), "epsilon": 1e-5},
            "normalised over [4, 8]",
        )
        for dt in (D.ACL_FLOAT16, D.ACL_BF16):  # a row long enough that a 16-bit row sum is off by ulps
            x, gamma = S.array(rng, (2, 512), dt), np.ones(512, dt.numpy)
            yield Sample({"x": x, "gamma": gamma, "epsilon": 1e-6}, f"{dt.short} long row")
        yield Sample(
            {"x": S.array(rng, (0, 16), _F32), "gamma": np.ones(16, np.float32), "epsilon": 1e-6}, "empty batch"
        )
        yield Sample(
            {"x": S.array(rng, (3, 8), _F32, special=True), "gamma": np.ones(8, np.float32), "epsilon": 1e-6},
            "NaN and Inf rows",
        )

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = S.array(rng, (2, 8), D.ACL_FLOAT16)
        yield ErrorSample({"x": x, "gamma": np.ones(4, np.float16), "epsilon": 1e-6}, INVALID, "gamma not trailing")
        yield ErrorSample({"x": x, "gamma": np.ones((3, 2, 8), np.float16), "epsilon": 1e-6}, INVALID, "gamma longer")
        yield ErrorSample(
            {"x": x, "gamma": np.ones(8, np.float16), "rstdOut": np.zeros((2, 1), np.float16), "epsilon": 1e-6},
            INVALID,
            "rstdOut not float32",
        )
        yield ErrorSample(
            {"x": x, "gamma": np.ones(8, np.float16), "rstdOut": np.zeros((2,), np.float32), "epsilon": 1e-6},
            INVALID,
            "rstdOut without the kept dimension",
        )
        yield ErrorSample(
            {"x": S.array(rng, (2, 8), _F32), "gamma": np.ones(8, np.float16), "epsilon": 1e-6},
            INVALID,
            "float16 gamma for float32 x",
        )

    return OpSpec(
        "RmsNorm",
        FAMILY,
        params,
        infer,
        samples=gen,
        error_samples=errors,
        summary="y = x / sqrt(mean(x², gamma's dims) + epsilon) * gamma; rstdOut float32",
    )


def _add_rms_norm() -> OpSpec:
    params = (
        tensor("x1", FLOATS, min_rank=1),
        tensor("x2", FLOATS, min_rank=1),
        tensor("gamma", FLOATS, min_rank=1),
        float_attr("epsilon", bounds=(0.0, None)),
        out("yOut", FLOATS),
        out("rstdOut", {_F32}, optional=True),
        out("xOut", FLOATS, optional=True),
    )

    def infer(call: Call) -> Infos:
        x1, x2 = tensor_arg(call, "x1"), tensor_arg(call, "x2")
        _check_same_shape(x1, "x1", x2, "x2")
        if x2.dtype != x1.dtype:
            raise invalid(f"x2 has dtype {x2.dtype.short}; it must equal x1's {x1.dtype.short}")
        stats = _rms_rule(call, x1, "x1", {x1.dtype})
        if call.args.get("rstdOut") is not None:
            _require_output(call, "xOut", "yOut", "rstdOut is given")
        return {"yOut": same(x1.shape, x1.dtype), "rstdOut": same(stats, _F32), "xOut": same(x1.shape, x1.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in SAMPLE_DTYPES:
            yield Sample(
                {
                    "x1": S.array(rng, (2, 3, 16), dt),
                    "x2": S.array(rng, (2, 3, 16), dt),
                    "gamma": S.array(rng, (16,), dt),
                    "epsilon": 1e-6,
                },
                dt.short,
            )
        yield Sample(
            {
                "x1": S.array(rng, (2, 3, 4, 8), _F32),
                "x2": S.array(rng, (2, 3, 4, 8), _F32),
                "gamma": S.array(rng, (4, 8), _F32),
                "epsilon": 1e-5,
            },
            "normalised over [4, 8]",
        )
        e = S.array(rng, (0, 3, 8), D.ACL_FLOAT16)
        yield Sample({"x1": e, "x2": e, "gamma": np.ones(8, np.float16), "epsilon": 1e-6}, "empty batch")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = S.array(rng, (2, 8), _F32)
        g = np.ones(8, np.float32)
        yield ErrorSample({"x1": x, "x2": S.array(rng, (1, 8), _F32), "gamma": g, "epsilon": 1e-6}, INVALID, "x2 shape")
        yield ErrorSample(
            {"x1": x, "x2": S.array(rng, (2, 8), D.ACL_FLOAT16), "gamma": g, "epsilon": 1e-6}, INVALID, "x2 dtype"
        )
        yield ErrorSample({"x1": x, "x2": x, "gamma": np.ones(8, np.float16), "epsilon": 1e-6}, INVALID, "gamma dtype")
        yield ErrorSample({"x1": x, "x2": x, "gamma": np.ones(3, np.float32), "epsilon": 1e-6}, INVALID, "gamma shape")
        yield ErrorSample({"x1": x, "x2": x, "gamma": g, "epsilon": -1e-6}, INVALID, "negative epsilon")

    return OpSpec(
        "AddRmsNorm",
        FAMILY,
        params,
        infer,
        samples=gen,
        error_samples=errors,
        summary="x = x1 + x2; y = RmsNorm(x); outputs yOut, rstdOut (float32), xOut",
    )


# ----------------------------------------------------------------------------- GroupNorm
def _group_norm() -> OpSpec:
    params = (
        tensor("self", FLOATS, min_rank=2),
        tensor("gamma", FLOATS, optional=True),
        tensor("beta", FLOATS, optional=True),
        int_attr("N", bounds=(0, None)),
        int_attr("C", bounds=(0, None)),
        int_attr("HxW", bounds=(0, None)),
        int_attr("group", bounds=(1, None)),
        float_attr("eps"),
        out("out", FLOATS),
        out("meanOut", FLOATS),
        out("rstdOut", FLOATS),
    )

    def infer(call: Call) -> Infos:
        x = tensor_arg(call, "self")
        n, c, hxw, group = (int(call.args[k]) for k in ("N", "C", "HxW", "group"))
        if c % group:
            raise invalid(f"C={c} is not divisible by group={group}")
        if not call.args["eps"] > 0:
            raise invalid(f"eps={call.args['eps']} must be greater than 0")
        if x.shape[0] != n:
            raise invalid(f"self.shape[0]={x.shape[0]} differs from N={n}")
        if x.shape[1] != c:
            raise invalid(f"self.shape[1]={x.shape[1]} differs from C={c}")
        if math.prod(x.shape[2:]) != hxw:
            raise invalid(f"the product of self's dims after N and C is {math.prod(x.shape[2:])}, not HxW={hxw}")
        for name in ("gamma", "beta"):
            t = _optional_tensor(call, name)
            if t is not None:
                _channel_vector(t, name, c)
                _check_dtype_in(t, name, (x.dtype,), "like self")
        stats = (n, group)
        return {"out": same(x.shape, x.dtype), "meanOut": same(stats, x.dtype), "rstdOut": same(stats, x.dtype)}

    def case(rng: np.random.Generator, shape: tuple[int, ...], group: int, dt: D, affine: bool = True) -> dict:
        args: dict[str, object] = {
            "self": S.array(rng, shape, dt),
            "N": shape[0],
            "C": shape[1],
            "HxW": math.prod(shape[2:]),
            "group": group,
            "eps": 1e-5,
        }
        if affine:
            args["gamma"] = S.array(rng, (shape[1],), dt, low=0.5, high=1.5)
            args["beta"] = S.array(rng, (shape[1],), dt)
        return args

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in SAMPLE_DTYPES:
            yield Sample(case(rng, (2, 6, 4, 3), 3, dt), f"{dt.short} NCHW, 3 groups")
        yield Sample(case(rng, (2, 4, 5), 2, _F32, affine=False), "NCL without gamma/beta")
        yield Sample(case(rng, (3, 4), 4, _F32), "2-D, one channel per group")
        yield Sample(case(rng, (1, 4, 2, 2, 2), 1, D.ACL_FLOAT16), "NCDHW, one group")
        yield Sample(case(rng, (0, 4, 3), 2, _F32), "empty batch")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        good = case(rng, (2, 6, 4), 3, _F32)
        yield ErrorSample({**good, "group": 4}, INVALID, "C not divisible by group")
        yield ErrorSample({**good, "group": 0}, INVALID, "group 0")
        yield ErrorSample({**good, "eps": 0.0}, INVALID, "eps 0")
        yield ErrorSample({**good, "N": 3}, INVALID, "N disagrees with self")
        yield ErrorSample({**good, "C": 3, "group": 3}, INVALID, "C disagrees with self")
        yield ErrorSample({**good, "HxW": 5}, INVALID, "HxW disagrees with self")
        yield ErrorSample({**good, "gamma": np.ones(5, np.float32)}, INVALID, "gamma of the wrong length")
        yield ErrorSample({**good, "beta": np.zeros(6, np.float16)}, INVALID, "beta of another dtype")
        yield ErrorSample({**good, "meanOut": np.zeros((2, 6), np.float32)}, INVALID, "meanOut not [N, group]")

    return OpSpec(
        "GroupNorm",
        FAMILY,
        params,
        infer,
        samples=gen,
        error_samples=errors,
        summary="normalise each of `group` channel groups per sample; meanOut/rstdOut [N, group]",
    )


# ----------------------------------------------------------------------------- BatchNorm
def _batch_norm() -> OpSpec:
    def running(name: str) -> Param:
        return replace(ref(name, FLOATS), optional=True)

    params = (
        tensor("input", FLOATS, min_rank=2, formats=_BN_FORMATS),
        tensor("weight", FLOATS, optional=True),
        tensor("bias", FLOATS, optional=True),
        running("runningMean"),
        running("runningVar"),
        bool_attr("training"),
        float_attr("momentum"),
        float_attr("eps"),
        out("output", FLOATS, formats=_BN_FORMATS),
        out("saveMean", FLOATS, optional=True),
        out("saveInvstd", FLOATS, optional=True),
    )

    def infer(call: Call) -> Infos:
        x = tensor_arg(call, "input")
        channels = x.shape[1]
        for name in ("weight", "bias", "runningMean", "runningVar"):
            t = _optional_tensor(call, name)
            if t is not None:
                _channel_vector(t, name, channels)
        training = bool(call.args["training"])
        out_t = _optional_tensor(call, "output")
        if out_t is not None and out_t.format != x.format:
            raise invalid(f"output has format {out_t.format.name}; it must match input's {x.format.name}")
        info: dict[str, OutInfo | None] = {"output": same(x.shape, x.dtype), "saveMean": None, "saveInvstd": None}
        if training:
            for name in ("saveMean", "saveInvstd"):
                _require_output(call, name, "output", "training is true")
            info["saveMean"] = listed((channels,), x.dtype)
            info["saveInvstd"] = listed((channels,), x.dtype)
        return info

    def case(rng: np.random.Generator, shape: tuple[int, ...], dt: D, training: bool, stats: bool = True) -> dict:
        c = shape[1]
        args: dict[str, object] = {
            "input": S.array(rng, shape, dt),
            "weight": S.array(rng, (c,), dt, low=0.5, high=1.5),
            "bias": S.array(rng, (c,), dt),
            "training": training,
            "momentum": 0.1,
            "eps": 1e-5,
        }
        if stats:
            args["runningMean"] = S.array(rng, (c,), _F32, low=-1, high=1)
            args["runningVar"] = S.positive(rng, (c,), _F32, low=0.5, high=2)
        return args

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in SAMPLE_DTYPES:
            yield Sample(case(rng, (2, 3, 4, 5), dt, False), f"{dt.short} inference NCHW")
            yield Sample(case(rng, (4, 3, 5), dt, True), f"{dt.short} training NCL")
        yield Sample(case(rng, (5, 4), _F32, True), "training 2-D")
        yield Sample(case(rng, (2, 2, 2, 3, 2), _F32, False), "inference NCDHW")
        yield Sample(case(rng, (3, 2, 4), _F32, True, stats=False), "training without running stats")
        yield Sample(case(rng, (3, 2, 4), _F32, False, stats=False), "inference without running stats")
        yield Sample(case(rng, (0, 3, 4), _F32, False), "empty batch")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        good = case(rng, (2, 3, 4), _F32, True)
        yield ErrorSample({**good, "weight": np.ones(4, np.float32)}, INVALID, "weight of the wrong length")
        yield ErrorSample({**good, "runningVar": np.ones((3, 1), np.float32)}, INVALID, "runningVar not 1-D")
        yield ErrorSample({**good, "input": S.array(rng, (6,), _F32)}, INVALID, "1-D input")
        yield ErrorSample({**good, "saveMean": np.zeros(4, np.float32)}, INVALID, "saveMean of the wrong length")

    return OpSpec(
        "BatchNorm",
        FAMILY,
        params,
        infer,
        samples=gen,
        error_samples=errors,
        summary="per-channel normalisation; training uses batch statistics and updates the running ones",
    )


def _inplace_add_rms_norm(base: OpSpec) -> OpSpec:
    """aclnnInplaceAddRmsNorm: y overwrites x1Ref and the residual sum x1 + x2 overwrites x2Ref."""
    params = (
        ref("x1Ref", FLOATS),
        ref("x2Ref", FLOATS),
        tensor("gamma", FLOATS, min_rank=1),
        float_attr("epsilon", bounds=(0.0, None)),
        out("rstdOut", {_F32}),
    )

    def to_base(args: Mapping[str, object]) -> dict[str, object]:
        return {
            "x1": args["x1Ref"],
            "x2": args["x2Ref"],
            "gamma": args["gamma"],
            "epsilon": args["epsilon"],
            "yOut": args["x1Ref"],
            "rstdOut": args["rstdOut"],
            "xOut": args["x2Ref"],
        }

    def infer(call: Call) -> Infos:
        base_call = Call(base, to_base(call.args))
        infos = base.infer(base_call)
        call.plan.update(base_call.plan)
        return {"x1Ref": infos["yOut"], "x2Ref": infos["xOut"], "rstdOut": infos["rstdOut"]}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for sample in base.samples(rng) if base.samples else ():
            args = {k: v for k, v in sample.args.items() if k not in ("x1", "x2")}
            yield replace(sample, args={"x1Ref": sample.args["x1"], "x2Ref": sample.args["x2"], **args})

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        for case in base.error_samples(rng) if base.error_samples else ():
            args = {k: v for k, v in case.args.items() if k not in ("x1", "x2")}
            yield replace(case, args={"x1Ref": case.args["x1"], "x2Ref": case.args["x2"], **args})

    return OpSpec(
        "InplaceAddRmsNorm",
        FAMILY,
        params,
        infer,
        alias_ok=True,
        samples=gen,
        error_samples=errors,
        base="AddRmsNorm",
        base_args=to_base,
        summary="in-place AddRmsNorm: yOut into x1Ref, xOut into x2Ref",
    )


def _normalised_rank(args: Mapping[str, Any]) -> int:
    """LayerNorm's count of trailing normalised dims (the length of normalizedShape)."""
    return len(args["normalizedShape"])


def _normalised_size(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> int:
    """LayerNorm's row length: the product of normalizedShape."""
    return max(math.prod(int(v) for v in args["normalizedShape"]), 1)


# square (or x - mean), the row sum, /n, + eps, rsqrt (2 ulp), × x, × gamma (+ beta)
_RMS = composite(steps=8, length_of=trailing_elements("gamma"))
ACCURACY: dict[str, Accuracy] = {
    "RmsNorm": _RMS,
    "AddRmsNorm": _RMS,
    "GemmaRmsNorm": composite(steps=9, length_of=trailing_elements("gamma")),  # RmsNorm's and 1 + gamma
    "LayerNorm": composite(
        steps=8,
        length_of=_normalised_size,
        scale_of=layer_norm_scale("input", _normalised_rank, "weightOptional", "biasOptional", "out"),
    ),
    # LayerNorm's steps after x1 + x2 (+ bias), over gamma's trailing dims
    "AddLayerNorm": composite(
        steps=10,
        length_of=trailing_elements("gamma"),
        scale_of=summed_input(
            layer_norm_scale("x", lambda args: np.ndim(args["gamma"]), "gamma", "beta", "yOut"),
            ("x1", "x2", "biasOptional"),
        ),
    ),
    # LayerNorm's steps over each (sample, group) row of C/group channels
    "GroupNorm": composite(
        steps=8,
        length_of=lambda args, outputs: max(
            int(np.size(args["self"])) // max(int(args["N"]) * int(args["group"]), 1), 1
        ),
        scale_of=group_norm_scale(),
    ),
    "BatchNorm": table(
        "training normalises each channel over N and the spatial dims (a GroupNorm-like row across the batch),"
        " inference is an elementwise chain on the running statistics: two scales, not built yet"
    ),
}
"""Accuracy classes (InplaceAddRmsNorm takes AddRmsNorm's; BatchNorm keeps the table)."""

_ADD_RMS_NORM = _add_rms_norm()
_RMS_NORM = _rms_norm()
SPECS: list[OpSpec] = [
    _layer_norm(),
    _add_layer_norm(),
    _RMS_NORM,
    replace(_RMS_NORM, name="GemmaRmsNorm", summary="RmsNorm scaled by (1 + gamma): Gemma's zero-centred weight"),
    _ADD_RMS_NORM,
    _inplace_add_rms_norm(_ADD_RMS_NORM),
    _group_norm(),
    _batch_norm(),
]
SPECS = with_accuracy(SPECS, ACCURACY)

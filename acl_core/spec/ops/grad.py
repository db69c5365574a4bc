"""Training backward ops of declared row operators (issue 16): softmax, the norms and SwiGlu.

Every op here is the gradient of a forward op declared elsewhere, taking what that forward op wrote
(its result, or its mean / rstd statistics) as inputs:

* SoftmaxBackward: ``out = y·(g - Σ g·y)``; LogSoftmaxBackward: ``out = g - exp(y)·Σ g`` (along dim);
* the norms, with ``g = dy·gamma`` and ``x̂ = (x - mean)·rstd`` (RmsNorm: ``x̂ = x·rstd``), over each
  row: ``dx = rstd·(g - E[g] - x̂·E[g·x̂])`` (RmsNorm drops ``E[g]``); ``dgamma = Σ_rows dy·x̂``,
  ``dbeta = Σ_rows dy``. GroupNormBackward's row is one (sample, group) and its gamma per channel;
  AddLayerNormGrad normalised ``x1 + x2`` and adds ``dsumOptional`` (the gradient reaching the sum
  directly) to dx, which is the gradient of both x1 and x2;
* SwiGluGrad: with ``x = [a, b]`` split along dim, ``da = yGrad·b·σ(a)·(1 + a·σ(-a))``, ``db = yGrad·a·σ(a)``.

Choices where the CANN docs are silent or not transcribed in tests/data/cann:

* dtypes: FLOAT, FLOAT16, BFLOAT16 (and DOUBLE for the softmax ops, as their forward ops). Inputs of
  one op that play the same role share a dtype (gradOutput / output, dy / x / x1 / x2); statistics
  (mean, rstd) may be any float dtype, as LayerNorm's optional statistics outputs are; RmsNormGrad's
  and AddLayerNormGrad's gamma is the input's dtype or float32 (the forward ops' rule);
* RmsNormGrad's dgammaOut and AddLayerNormGrad's dgammaOut / dbetaOut are float32 (the forward ops'
  statistics are); LayerNormBackward's and GroupNormBackward's weight gradients take the weight's
  dtype (the input's when weightOptional is absent) and may be written to any float dtype;
* statistics have the forward op's shape: the input's leading dims with the normalised dims kept as
  1 (the leading dims alone are accepted too); GroupNormBackward's mean / rstd are ``[N, group]``;
* ``outputMask`` (LayerNormBackward, GroupNormBackward): a false entry leaves its output unwritten
  and may pass it as null; a true entry needs it (161001). Without weightOptional, LayerNormBackward
  takes gamma = 1 and still computes gradWeightOut when asked.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.spec import samples as S
from acl_core.spec.accuracy import Accuracy, composite, dim_length, ulp, with_accuracy
from acl_core.spec.opspec import (
    INVALID,
    Call,
    ErrorSample,
    Infos,
    OpSpec,
    Sample,
    bool_array,
    int_array,
    int_attr,
    invalid,
    nullptr,
    out,
    tensor,
)
from acl_core.spec.plan import declare
from acl_core.spec.rules import FLOATS, FLOATS64, listed, normalize_dim, same, tensor_arg
from acl_core.tensor import AclBoolArray, AclIntArray, AclTensor

declare("lead", "int", "the number of leading (row) dims before a norm's normalised trailing dims", int)
declare("output_mask", "tuple[bool, ...]", "outputMask: which of the op's gradients to compute", tuple)

_F32 = D.ACL_FLOAT
SAMPLE_DTYPES = (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16)
Args = Mapping[str, Any]


# ----------------------------------------------------------------------------- shared rules
def _opt(call: Call, name: str) -> AclTensor | None:
    t = call.args.get(name)
    return t if isinstance(t, AclTensor) else None


def _like(a: AclTensor, a_name: str, b: AclTensor, b_name: str, *, dtype: bool = True) -> None:
    """161002 unless ``b`` has ``a``'s shape (and dtype)."""
    if tuple(a.shape) != tuple(b.shape):
        raise invalid(f"{b_name} has shape {list(b.shape)}; it must equal {a_name}'s {list(a.shape)}")
    if dtype and a.dtype != b.dtype:
        raise invalid(f"{b_name} has dtype {b.dtype.short}; it must equal {a_name}'s {a.dtype.short}")


def _trailing(x: AclTensor, x_name: str, norm: Sequence[int], what: str) -> int:
    """The number of leading (row) dims of ``x`` when ``norm`` is its trailing shape (161002 otherwise)."""
    if not 1 <= len(norm) <= x.rank:
        raise invalid(f"{what} has {len(norm)} dimensions; expected 1 to {x_name}'s rank {x.rank}")
    if tuple(x.shape[x.rank - len(norm) :]) != tuple(norm):
        raise invalid(f"{what} {list(norm)} is not the trailing part of {x_name}'s shape {list(x.shape)}")
    return x.rank - len(norm)


def _stat(t: AclTensor, name: str, x: AclTensor, lead: int) -> None:
    """A row statistic: ``x``'s leading dims, with the normalised dims kept as 1 or dropped."""
    kept = tuple(x.shape[:lead]) + (1,) * (x.rank - lead)
    if tuple(t.shape) not in (kept, tuple(x.shape[:lead])):
        raise invalid(f"{name} has shape {list(t.shape)}; expected {list(kept)} (the forward op's statistics)")


def _mask(call: Call, outputs: Sequence[str]) -> tuple[bool, ...]:
    """outputMask as bools (one per output); 161001 for a requested output that is null."""
    arr = call.args["outputMask"]
    assert isinstance(arr, AclBoolArray)
    mask = tuple(bool(v) for v in arr.values)
    if len(mask) != len(outputs):
        raise invalid(f"outputMask has {len(mask)} entries; expected {len(outputs)}")
    for name, wanted in zip(outputs, mask):
        if wanted and call.outputs_required and call.args.get(name) is None:
            raise nullptr(f"{name} is null, but outputMask asks for it")
    call.plan["output_mask"] = mask
    return mask


def _dtype_in(t: AclTensor, name: str, allowed: Iterable[D], why: str) -> None:
    allowed = tuple(dict.fromkeys(allowed))
    if t.dtype not in allowed:
        raise invalid(f"{name} has dtype {t.dtype.short}; {why} it must be " + " or ".join(d.short for d in allowed))


# ----------------------------------------------------------------------------- accuracy scales
def _w(value: Any) -> np.ndarray:
    return np.asarray(value).astype(np.float64)


def _finite(a: np.ndarray) -> np.ndarray:
    return np.where(np.isfinite(a), a, 0.0)


def softmax_grad_scale(log: bool) -> Callable[[Args, Args], dict[str, Any]]:
    """``S = |y|·(|g| + Σ|g·y|)`` (SoftmaxBackward), ``S = |g| + exp(y)·Σ|g|`` (LogSoftmaxBackward), along dim.

    Every term is the formula with each product of magnitudes and each difference turned into a sum:
    the first-order rounding error of the row sum and of the elementwise steps is at most γ times it.
    """

    def scale(args: Args, outputs: Args) -> dict[str, Any]:
        g, y = _w(args["gradOutput"]), _w(args["output"])
        if g.ndim == 0 or g.size == 0:
            return {"out": np.abs(g)}
        dim = int(args["dim"]) % g.ndim
        with np.errstate(all="ignore"):
            if log:
                total = np.sum(np.abs(_finite(g)), axis=dim, keepdims=True)
                return {"out": np.abs(g) + np.exp(y) * total}
            total = np.sum(np.abs(_finite(g * y)), axis=dim, keepdims=True)
            return {"out": np.abs(y) * (np.abs(g) + total)}

    return scale


def _row_norm_scale(
    dy: np.ndarray,
    x: np.ndarray,
    mean: np.ndarray | None,
    rstd: np.ndarray,
    w: np.ndarray,
    axes: tuple[int, ...],
    limit: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A norm backward's term magnitudes: (dx, dgamma and dbeta Σ-terms, where a dgamma term overflows).

    ``dx``: ``rstd·(|g| + E|g| + |x̂|·E|g·x̂|)`` (E over the row); the others are ``|dy·x̂|`` and
    ``|dy|``, summed over rows by the caller. The overflow rule: a row where a term (``g``,
    ``x - mean``, ``g·x̂``) or a row sum passes ``limit`` (the accumulation type's largest finite
    value) gets ``inf`` — an accumulator of that type overflows there, so no single answer is right and
    the element is uncompared (counted as overflowing); the dgamma terms that overflow are marked for
    :func:`_summed`.
    """
    with np.errstate(all="ignore"):
        centred = x - mean if mean is not None else x
        xhat = np.abs(centred * rstd)
        g = np.abs(dy * w)
        gx = g * xhat
        mean_g = np.mean(_finite(g), axis=axes, keepdims=True) if mean is not None else 0.0
        mean_gx = np.mean(_finite(gx), axis=axes, keepdims=True)
        count = math.prod(x.shape[a] for a in axes)
        past = (g > limit) | (np.abs(centred) > limit) | (gx > limit)
        row_past = np.any(past & np.isfinite(g) & np.isfinite(centred), axis=axes, keepdims=True)
        row_past |= (mean_g * count > limit) | (mean_gx * count > limit)
        dx = np.where(row_past, np.inf, np.abs(rstd) * (g + mean_g + xhat * mean_gx))
        dgamma = np.abs(dy) * xhat
        dgamma_past = ((np.abs(centred) > limit) | (dgamma > limit)) & np.isfinite(centred) & np.isfinite(dy)
        return dx, dgamma, np.abs(dy), dgamma_past


def _summed(terms: np.ndarray, axis: tuple[int, ...], limit: float, past: np.ndarray | None = None) -> np.ndarray:
    """Σ of the finite terms over ``axis``; ``inf`` where a ``past`` term overflowed or the sum passes ``limit``."""
    with np.errstate(all="ignore"):
        total = np.sum(_finite(terms), axis=axis)
        over = total > limit
        if past is not None:
            over |= np.any(past, axis=axis)
        return np.where(over, np.inf, total)


def _limit(x: Any) -> float:
    """The largest finite value of the type a norm backward of ``x`` accumulates in (float32 below float64)."""
    return float(np.finfo(np.float64 if np.asarray(x).dtype == np.float64 else np.float32).max)


def norm_grad_scale(
    names: Mapping[str, str], *, stats: Callable[[Args], int], centred: bool
) -> Callable[[Args, Args], dict[str, Any]]:
    """The error scale of a LayerNorm-like backward op (``names`` maps dy, x, mean, rstd, gamma, dsum, dx,
    dgamma, dbeta onto the op's parameters; ``stats`` gives the count of normalised trailing dims)."""

    def scale(args: Args, outputs: Args) -> dict[str, Any]:
        x = _w(args[names["x"]])
        if "x2" in names:
            x = x + _w(args[names["x2"]])
        k = stats(args)
        lead = x.ndim - k
        axes = tuple(range(lead, x.ndim))
        kept = x.shape[:lead] + (1,) * k

        def stat(key: str) -> np.ndarray | None:
            v = args.get(names.get(key, ""))
            return None if v is None else _w(v).reshape(kept)

        gamma = args.get(names["gamma"])
        w = _w(gamma) if gamma is not None else np.ones(x.shape[lead:])
        rstd = stat("rstd")
        assert rstd is not None
        limit = _limit(args[names["x"]])
        mean = stat("mean") if centred else None
        dx, dgamma, dbeta, past = _row_norm_scale(_w(args[names["dy"]]), x, mean, rstd, w, axes, limit)
        rows = tuple(range(lead))
        found = {names["dx"]: dx}
        if names.get("dsum") and args.get(names["dsum"]) is not None:
            found[names["dx"]] = dx + np.abs(_w(args[names["dsum"]]))
        found[names["dgamma"]] = _summed(dgamma, rows, limit, past)
        if "dbeta" in names:
            found[names["dbeta"]] = _summed(dbeta, rows, limit)
        return {n: np.broadcast_to(s, np.shape(outputs[n])) for n, s in found.items() if outputs.get(n) is not None}

    return scale


def group_norm_grad_scale(args: Args, outputs: Args) -> dict[str, Any]:
    """GroupNormBackward's scale: the row-norm scale over (sample, group) rows, gamma per channel."""
    x = _w(args["input"])
    n, c, groups = int(args["N"]), int(args["C"]), int(args["group"])
    if x.size == 0 or n * c == 0:
        return {k: np.zeros(np.shape(v)) for k, v in outputs.items() if v is not None}
    spatial = x.size // (n * c)
    per = c // groups
    shaped = (n, groups, per * spatial)
    w = np.broadcast_to(_w(args["gamma"]).reshape(groups, per, 1), (groups, per, spatial)).reshape(groups, -1)
    stats = (n, groups, 1)
    dx, dgamma, dbeta, past = _row_norm_scale(
        _w(args["gradOut"]).reshape(shaped),
        x.reshape(shaped),
        _w(args["mean"]).reshape(stats),
        _w(args["rstd"]).reshape(stats),
        w,
        (2,),
        limit := _limit(args["input"]),
    )

    def per_channel(a: np.ndarray, over: np.ndarray | None = None) -> np.ndarray:
        return _summed(a.reshape(n, c, spatial), (0, 2), limit, None if over is None else over.reshape(n, c, spatial))

    found = {
        "gradInput": dx.reshape(x.shape),
        "gradGammaOut": per_channel(dgamma, past),
        "gradBetaOut": per_channel(dbeta),
    }
    return {k: np.reshape(s, np.shape(outputs[k])) for k, s in found.items() if outputs.get(k) is not None}


def _longest(row: Callable[[Args], int], rows: Callable[[Args], int]) -> Callable[[Args, Args], int]:
    """The reduction length of an op with a row reduction (dx) and a reduction over rows (dgamma): the longer."""
    return lambda args, outputs: max(row(args), rows(args), 1)


def _trailing_count(x: str, count: Callable[[Args], int]) -> tuple[Callable[[Args], int], Callable[[Args], int]]:
    """(row length, row count) of ``x`` with its last ``count(args)`` dims a row."""

    def split(args: Args) -> tuple[int, int]:
        shape = np.shape(args[x])
        k = count(args)
        return math.prod(shape[len(shape) - k :]), math.prod(shape[: len(shape) - k])

    return (lambda a: split(a)[0]), (lambda a: split(a)[1])


# ----------------------------------------------------------------------------- softmax backward
def _softmax_backward(name: str, log: bool) -> OpSpec:
    params = (
        tensor("gradOutput", FLOATS64),
        tensor("output", FLOATS64),
        int_attr("dim"),
        out("out", FLOATS64),
    )

    def infer(call: Call) -> Infos:
        g, y = tensor_arg(call, "gradOutput"), tensor_arg(call, "output")
        _like(g, "gradOutput", y, "output")
        call.plan["dim"] = normalize_dim(call.args["dim"], g.rank)
        return {"out": same(g.shape, g.dtype)}

    def forward(rng: np.random.Generator, shape: tuple[int, ...], dim: int, dt: D) -> np.ndarray:
        x = rng.uniform(-4, 4, shape)
        with np.errstate(all="ignore"):
            z = np.exp(x - x.max(axis=dim, keepdims=True)) if x.size else x
            y = z / z.sum(axis=dim, keepdims=True) if x.size else x
        assert dt.numpy is not None
        return (np.log(y) if log else y).astype(dt.numpy)

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in (*SAMPLE_DTYPES, D.ACL_DOUBLE):
            for shape, dim in (((3, 7), -1), ((2, 3, 4), 1), ((5,), 0)):
                args = {"gradOutput": S.array(rng, shape, dt), "output": forward(rng, shape, dim, dt), "dim": dim}
                yield Sample(args, f"{dt.short} {list(shape)} dim {dim}")
        for dt in (D.ACL_FLOAT16, D.ACL_BF16):  # rows long enough that a 16-bit row sum is off by ulps
            g = S.array(rng, (2, 512), dt, low=0.0, high=2.0)
            yield Sample({"gradOutput": g, "output": forward(rng, (2, 512), -1, dt), "dim": -1}, f"{dt.short} long row")
        g = S.array(rng, (3, 8), _F32, special=True)
        yield Sample({"gradOutput": g, "output": forward(rng, (3, 8), 1, _F32), "dim": 1}, "NaN/Inf/-0 gradients")
        y = forward(rng, (2, 4), -1, _F32)
        y[0, 0] = np.nan
        y[1, :] = -np.inf if log else 0.0
        yield Sample({"gradOutput": S.array(rng, (2, 4), _F32), "output": y, "dim": -1}, "NaN and zero probabilities")
        e = np.zeros((0, 4), np.float32)
        yield Sample({"gradOutput": e, "output": e, "dim": 1}, "empty")
        yield Sample(
            {
                "gradOutput": np.float32(0.5).reshape(()),
                "output": np.float32(-0.25 if log else 1.0).reshape(()),
                "dim": 0,
            },
            "0-d",
        )

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        g = S.array(rng, (2, 3), _F32)
        yield ErrorSample({"gradOutput": g, "output": S.array(rng, (3, 2), _F32), "dim": 1}, INVALID, "shapes differ")
        yield ErrorSample({"gradOutput": g, "output": S.array(rng, (2, 3), D.ACL_FLOAT16), "dim": 1}, INVALID, "dtypes")
        yield ErrorSample({"gradOutput": g, "output": g, "dim": 2}, INVALID, "dim out of range")
        yield ErrorSample({"gradOutput": g, "output": g, "dim": 1, "out": np.zeros((2, 3), np.float16)}, INVALID, "out")
        yield ErrorSample(
            {"gradOutput": S.array(rng, (2, 3), D.ACL_INT32), "output": S.array(rng, (2, 3), D.ACL_INT32), "dim": 1},
            INVALID,
            "int32 inputs",
        )

    what = "g - exp(y)·Σg" if log else "y·(g - Σ g·y)"
    return OpSpec(name, "reduction", params, infer, samples=gen, error_samples=errors, summary=f"{what} along dim")


# ----------------------------------------------------------------------------- norm backward samples
def _moments(x: np.ndarray, lead: int, rms: bool, eps: float = 1e-5) -> tuple[np.ndarray, np.ndarray]:
    """(mean, rstd) over the trailing dims of ``x`` (float64), as the forward op writes them."""
    axes = tuple(range(lead, x.ndim))
    if x.size == 0:
        kept = x.shape[:lead] + (1,) * (x.ndim - lead)
        return np.zeros(kept), np.ones(kept)
    mean = np.zeros(x.shape[:lead] + (1,) * (x.ndim - lead)) if rms else x.mean(axis=axes, keepdims=True)
    var = np.mean(x * x if rms else (x - mean) ** 2, axis=axes, keepdims=True)
    return mean, 1.0 / np.sqrt(var + eps)


def _cast(a: np.ndarray, dt: D) -> np.ndarray:
    assert dt.numpy is not None
    return np.asarray(a).astype(dt.numpy)


# ----------------------------------------------------------------------------- RmsNormGrad
def _rms_norm_grad() -> OpSpec:
    params = (
        tensor("dy", FLOATS, min_rank=1),
        tensor("x", FLOATS, min_rank=1),
        tensor("rstd", FLOATS),
        tensor("gamma", FLOATS, min_rank=1),
        out("dxOut", FLOATS, c_type="const aclTensor*"),
        out("dgammaOut", {_F32}, c_type="const aclTensor*"),
    )

    def infer(call: Call) -> Infos:
        dy, x, gamma = tensor_arg(call, "dy"), tensor_arg(call, "x"), tensor_arg(call, "gamma")
        _like(x, "x", dy, "dy")
        lead = _trailing(x, "x", gamma.shape, "gamma")
        _dtype_in(gamma, "gamma", (x.dtype, _F32), f"with a {x.dtype.short} x")
        _stat(tensor_arg(call, "rstd"), "rstd", x, lead)
        call.plan["lead"] = lead
        return {"dxOut": same(x.shape, x.dtype), "dgammaOut": same(gamma.shape, _F32)}

    def case(rng: np.random.Generator, shape: tuple[int, ...], k: int, dt: D, gdt: D, special: bool = False) -> dict:
        x = S.array(rng, shape, dt)
        _, rstd = _moments(x.astype(np.float64), len(shape) - k, rms=True)
        return {
            "dy": S.array(rng, shape, dt, special=special),
            "x": x,
            "rstd": _cast(rstd, _F32),
            "gamma": S.array(rng, shape[len(shape) - k :], gdt, low=0.5, high=1.5),
        }

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in SAMPLE_DTYPES:
            yield Sample(case(rng, (2, 3, 16), 1, dt, dt), dt.short)
            yield Sample(case(rng, (4, 16), 1, dt, _F32), f"{dt.short} x, float32 gamma")
        yield Sample(case(rng, (2, 3, 4, 8), 2, _F32, _F32), "normalised over [4, 8]")
        for dt in (D.ACL_FLOAT16, D.ACL_BF16):  # long rows and a column sum over many rows
            yield Sample(case(rng, (64, 512), 1, dt, dt), f"{dt.short} [64, 512]")
        yield Sample(case(rng, (3, 8), 1, _F32, _F32, special=True), "NaN/Inf/-0 in dy")
        yield Sample(case(rng, (0, 8), 1, _F32, _F32), "empty batch: dgamma 0")
        args = case(rng, (3, 5), 1, _F32, _F32)
        yield Sample({**args, "rstd": args["rstd"].reshape(3)}, "rstd without the kept dim")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        good = case(rng, (2, 8), 1, _F32, _F32)
        yield ErrorSample({**good, "dy": S.array(rng, (2, 4), _F32)}, INVALID, "dy of another shape")
        yield ErrorSample({**good, "dy": S.array(rng, (2, 8), D.ACL_FLOAT16)}, INVALID, "dy of another dtype")
        yield ErrorSample({**good, "gamma": np.ones(4, np.float32)}, INVALID, "gamma not trailing")
        yield ErrorSample({**good, "rstd": np.ones((3, 1), np.float32)}, INVALID, "rstd of the wrong shape")
        yield ErrorSample({**good, "dgammaOut": np.zeros(8, np.float16)}, INVALID, "dgammaOut not float32")
        f16 = case(rng, (2, 8), 1, D.ACL_FLOAT16, D.ACL_FLOAT16)
        yield ErrorSample({**f16, "gamma": S.array(rng, (8,), D.ACL_BF16)}, INVALID, "bf16 gamma for float16 x")

    return OpSpec(
        "RmsNormGrad",
        "norm",
        params,
        infer,
        samples=gen,
        error_samples=errors,
        summary="dx = rstd·(g - x̂·E[g·x̂]) with g = dy·gamma, x̂ = x·rstd; dgamma = Σ_rows dy·x̂ (float32)",
    )


# ----------------------------------------------------------------------------- LayerNormBackward
_LN_OUTS = ("gradInputOut", "gradWeightOut", "gradBiasOut")


def _layer_norm_backward() -> OpSpec:
    params = (
        tensor("gradOut", FLOATS, min_rank=1),
        tensor("input", FLOATS, min_rank=1),
        int_array("normalizedShape"),
        tensor("mean", FLOATS),
        tensor("rstd", FLOATS),
        tensor("weightOptional", FLOATS, optional=True),
        tensor("biasOptional", FLOATS, optional=True),
        bool_array("outputMask"),
        *(out(n, FLOATS, optional=True) for n in _LN_OUTS),
    )

    def infer(call: Call) -> Infos:
        dy, x = tensor_arg(call, "gradOut"), tensor_arg(call, "input")
        _like(x, "input", dy, "gradOut")
        arr = call.args["normalizedShape"]
        assert isinstance(arr, AclIntArray)
        norm = tuple(arr.values)
        lead = _trailing(x, "input", norm, "normalizedShape")
        for name in ("mean", "rstd"):
            _stat(tensor_arg(call, name), name, x, lead)
        w, b = _opt(call, "weightOptional"), _opt(call, "biasOptional")
        for t, name in ((w, "weightOptional"), (b, "biasOptional")):
            if t is not None:
                if tuple(t.shape) != norm:
                    raise invalid(f"{name} has shape {list(t.shape)}; it must equal normalizedShape {list(norm)}")
                _dtype_in(t, name, (x.dtype, _F32), f"as an affine parameter of a {x.dtype.short} input")
        mask = _mask(call, _LN_OUTS)
        call.plan["lead"] = lead
        wdt = w.dtype if w is not None else x.dtype
        bdt = b.dtype if b is not None else wdt
        infos = (same(x.shape, x.dtype), listed(norm, wdt), listed(norm, bdt))
        return {n: info if m else None for n, info, m in zip(_LN_OUTS, infos, mask)}

    def case(
        rng: np.random.Generator,
        shape: tuple[int, ...],
        k: int,
        dt: D,
        wdt: D | None,
        mask: Sequence[bool] = (True, True, True),
        special: bool = False,
    ) -> dict:
        x = S.array(rng, shape, dt)
        lead = len(shape) - k
        mean, rstd = _moments(x.astype(np.float64), lead, rms=False)
        args: dict[str, Any] = {
            "gradOut": S.array(rng, shape, dt, special=special),
            "input": x,
            "normalizedShape": list(shape[lead:]),
            "mean": _cast(mean, _F32),
            "rstd": _cast(rstd, _F32),
            "outputMask": list(mask),
        }
        if wdt is not None:
            args["weightOptional"] = S.array(rng, shape[lead:], wdt, low=0.5, high=1.5)
            args["biasOptional"] = S.array(rng, shape[lead:], wdt)
        return args

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in SAMPLE_DTYPES:
            yield Sample(case(rng, (2, 3, 8), 1, dt, dt), dt.short)
        yield Sample(case(rng, (2, 16), 1, D.ACL_BF16, _F32), "bf16 input, float32 affine")
        yield Sample(case(rng, (2, 3, 4, 5), 2, _F32, _F32), "float32 normalised over [4, 5]")
        yield Sample(case(rng, (3, 6), 1, D.ACL_FLOAT16, None), "no affine")
        for dt in (D.ACL_FLOAT16, D.ACL_BF16):
            yield Sample(case(rng, (64, 512), 1, dt, dt), f"{dt.short} [64, 512]")
        yield Sample(case(rng, (4, 8), 1, _F32, _F32, (True, False, True)), "mask: no gradWeight")
        yield Sample(case(rng, (4, 8), 1, _F32, _F32, (False, True, False)), "mask: gradWeight only")
        yield Sample(case(rng, (3, 8), 1, _F32, _F32, special=True), "NaN/Inf/-0 in gradOut")
        yield Sample(case(rng, (0, 8), 1, _F32, _F32), "empty batch: weight gradients 0")
        args = case(rng, (3, 5), 1, _F32, _F32)
        yield Sample({**args, "mean": args["mean"].reshape(3), "rstd": args["rstd"].reshape(3)}, "stats [3]")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        good = case(rng, (2, 3, 4), 1, _F32, _F32)
        yield ErrorSample({**good, "normalizedShape": [3]}, INVALID, "normalizedShape not trailing")
        yield ErrorSample({**good, "gradOut": S.array(rng, (2, 3, 5), _F32)}, INVALID, "gradOut of another shape")
        yield ErrorSample({**good, "mean": np.zeros((2, 4, 1), np.float32)}, INVALID, "mean of the wrong shape")
        yield ErrorSample({**good, "weightOptional": np.ones(5, np.float32)}, INVALID, "weight of the wrong shape")
        yield ErrorSample({**good, "outputMask": [True, True]}, INVALID, "outputMask of two entries")
        yield ErrorSample({**good, "gradInputOut": np.zeros((2, 3, 5), np.float32)}, INVALID, "gradInputOut shape")

    return OpSpec(
        "LayerNormBackward",
        "norm",
        params,
        infer,
        samples=gen,
        error_samples=errors,
        summary="dx = rstd·(g - E[g] - x̂·E[g·x̂]); dweight = Σ dy·x̂; dbias = Σ dy (outputMask selects)",
    )


# ----------------------------------------------------------------------------- GroupNormBackward
_GN_OUTS = ("gradInput", "gradGammaOut", "gradBetaOut")


def _group_norm_backward() -> OpSpec:
    params = (
        tensor("gradOut", FLOATS, min_rank=2),
        tensor("input", FLOATS, min_rank=2),
        tensor("mean", FLOATS),
        tensor("rstd", FLOATS),
        tensor("gamma", FLOATS),
        int_attr("N", bounds=(0, None)),
        int_attr("C", bounds=(0, None)),
        int_attr("HxW", bounds=(0, None)),
        int_attr("group", bounds=(1, None)),
        bool_array("outputMask"),
        *(out(n, FLOATS, optional=True) for n in _GN_OUTS),
    )

    def infer(call: Call) -> Infos:
        dy, x = tensor_arg(call, "gradOut"), tensor_arg(call, "input")
        _like(x, "input", dy, "gradOut")
        n, c, hxw, group = (int(call.args[k]) for k in ("N", "C", "HxW", "group"))
        if c % group:
            raise invalid(f"C={c} is not divisible by group={group}")
        if tuple(x.shape[:2]) != (n, c):
            raise invalid(f"input's shape {list(x.shape)} does not start with N={n}, C={c}")
        if math.prod(x.shape[2:]) != hxw:
            raise invalid(f"the product of input's dims after N and C is {math.prod(x.shape[2:])}, not HxW={hxw}")
        for name in ("mean", "rstd"):
            t = tensor_arg(call, name)
            if tuple(t.shape) != (n, group):
                raise invalid(f"{name} has shape {list(t.shape)}; it must be [N, group] = [{n}, {group}]")
        gamma = tensor_arg(call, "gamma")
        if gamma.rank != 1 or gamma.shape[0] != c:
            raise invalid(f"gamma must be 1-D with C={c} elements, not {list(gamma.shape)}")
        _dtype_in(gamma, "gamma", (x.dtype,), "like input")
        mask = _mask(call, _GN_OUTS)
        infos = (same(x.shape, x.dtype), listed((c,), x.dtype), listed((c,), x.dtype))
        return {name: info if m else None for name, info, m in zip(_GN_OUTS, infos, mask)}

    def case(
        rng: np.random.Generator,
        shape: tuple[int, ...],
        group: int,
        dt: D,
        mask: Sequence[bool] = (True, True, True),
        special: bool = False,
    ) -> dict:
        n, c = shape[0], shape[1]
        x = S.array(rng, shape, dt)
        rows = x.astype(np.float64).reshape(n, group, (c // group) * math.prod(shape[2:]))
        mean, rstd = _moments(rows, 2, rms=False)
        return {
            "gradOut": S.array(rng, shape, dt, special=special),
            "input": x,
            "mean": _cast(mean.reshape(n, group), dt),
            "rstd": _cast(rstd.reshape(n, group), dt),
            "gamma": S.array(rng, (c,), dt, low=0.5, high=1.5),
            "N": n,
            "C": c,
            "HxW": math.prod(shape[2:]),
            "group": group,
            "outputMask": list(mask),
        }

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in SAMPLE_DTYPES:
            yield Sample(case(rng, (2, 6, 4, 3), 3, dt), f"{dt.short} NCHW, 3 groups")
        yield Sample(case(rng, (2, 4, 5), 2, _F32, (True, False, True)), "NCL, mask without gradGamma")
        yield Sample(case(rng, (3, 4), 4, _F32), "2-D, one channel per group")
        yield Sample(case(rng, (1, 4, 2, 2, 2), 1, D.ACL_FLOAT16, (False, True, True)), "NCDHW, weight grads only")
        yield Sample(case(rng, (8, 32, 16, 16), 8, D.ACL_BF16), "bf16 [8, 32, 16, 16]")
        yield Sample(case(rng, (2, 4, 6), 2, _F32, special=True), "NaN/Inf/-0 in gradOut")
        yield Sample(case(rng, (0, 4, 3), 2, _F32), "empty batch")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        good = case(rng, (2, 6, 4), 3, _F32)
        yield ErrorSample({**good, "group": 4}, INVALID, "C not divisible by group")
        yield ErrorSample({**good, "N": 3}, INVALID, "N disagrees with input")
        yield ErrorSample({**good, "HxW": 5}, INVALID, "HxW disagrees with input")
        yield ErrorSample({**good, "mean": np.zeros((2, 6), np.float32)}, INVALID, "mean not [N, group]")
        yield ErrorSample({**good, "gamma": np.ones(5, np.float32)}, INVALID, "gamma of the wrong length")
        yield ErrorSample({**good, "gamma": np.ones(6, np.float16)}, INVALID, "gamma of another dtype")
        yield ErrorSample({**good, "outputMask": [True]}, INVALID, "outputMask of one entry")

    return OpSpec(
        "GroupNormBackward",
        "norm",
        params,
        infer,
        samples=gen,
        error_samples=errors,
        summary="GroupNorm's gradients: dx per (sample, group) row; dgamma, dbeta per channel (outputMask selects)",
    )


# ----------------------------------------------------------------------------- AddLayerNormGrad
def _add_layer_norm_grad() -> OpSpec:
    params = (
        tensor("dy", FLOATS, min_rank=1),
        tensor("x1", FLOATS, min_rank=1),
        tensor("x2", FLOATS, min_rank=1),
        tensor("rstd", FLOATS),
        tensor("mean", FLOATS),
        tensor("gamma", FLOATS, min_rank=1),
        tensor("dsumOptional", FLOATS, optional=True),
        out("dxOut", FLOATS, c_type="const aclTensor*"),
        out("dgammaOut", {_F32}, c_type="const aclTensor*"),
        out("dbetaOut", {_F32}, c_type="const aclTensor*"),
    )

    def infer(call: Call) -> Infos:
        dy, x1, x2 = tensor_arg(call, "dy"), tensor_arg(call, "x1"), tensor_arg(call, "x2")
        gamma = tensor_arg(call, "gamma")
        _like(x1, "x1", dy, "dy")
        _like(x1, "x1", x2, "x2")
        lead = _trailing(x1, "x1", gamma.shape, "gamma")
        _dtype_in(gamma, "gamma", (x1.dtype, _F32), f"with {x1.dtype.short} inputs")
        for name in ("rstd", "mean"):
            _stat(tensor_arg(call, name), name, x1, lead)
        dsum = _opt(call, "dsumOptional")
        if dsum is not None:
            _like(x1, "x1", dsum, "dsumOptional")
        call.plan["lead"] = lead
        return {
            "dxOut": same(x1.shape, x1.dtype),
            "dgammaOut": same(gamma.shape, _F32),
            "dbetaOut": same(gamma.shape, _F32),
        }

    def case(
        rng: np.random.Generator, shape: tuple[int, ...], k: int, dt: D, gdt: D, dsum: bool, special: bool = False
    ) -> dict:
        x1, x2 = S.array(rng, shape, dt), S.array(rng, shape, dt)
        mean, rstd = _moments(x1.astype(np.float64) + x2.astype(np.float64), len(shape) - k, rms=False)
        args: dict[str, Any] = {
            "dy": S.array(rng, shape, dt, special=special),
            "x1": x1,
            "x2": x2,
            "rstd": _cast(rstd, _F32),
            "mean": _cast(mean, _F32),
            "gamma": S.array(rng, shape[len(shape) - k :], gdt, low=0.5, high=1.5),
        }
        if dsum:
            args["dsumOptional"] = S.array(rng, shape, dt)
        return args

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in SAMPLE_DTYPES:
            yield Sample(case(rng, (2, 3, 8), 1, dt, dt, dsum=True), f"{dt.short} with dsum")
            yield Sample(case(rng, (4, 8), 1, dt, _F32, dsum=False), f"{dt.short}, float32 gamma, no dsum")
        yield Sample(case(rng, (2, 4, 5), 2, _F32, _F32, dsum=True), "normalised over [4, 5]")
        yield Sample(case(rng, (64, 512), 1, D.ACL_BF16, D.ACL_BF16, dsum=True), "bf16 [64, 512]")
        yield Sample(case(rng, (3, 8), 1, _F32, _F32, dsum=True, special=True), "NaN/Inf/-0 in dy")
        yield Sample(case(rng, (0, 8), 1, _F32, _F32, dsum=False), "empty batch")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        good = case(rng, (2, 8), 1, _F32, _F32, dsum=True)
        yield ErrorSample({**good, "x2": S.array(rng, (1, 8), _F32)}, INVALID, "x2 of another shape")
        yield ErrorSample({**good, "x2": S.array(rng, (2, 8), D.ACL_FLOAT16)}, INVALID, "x2 of another dtype")
        yield ErrorSample({**good, "gamma": np.ones(4, np.float32)}, INVALID, "gamma not trailing")
        yield ErrorSample({**good, "dsumOptional": np.zeros((2, 4), np.float32)}, INVALID, "dsum of another shape")
        yield ErrorSample({**good, "rstd": np.ones((8, 1), np.float32)}, INVALID, "rstd of the wrong shape")
        yield ErrorSample({**good, "dbetaOut": np.zeros(8, np.float16)}, INVALID, "dbetaOut not float32")

    return OpSpec(
        "AddLayerNormGrad",
        "norm",
        params,
        infer,
        samples=gen,
        error_samples=errors,
        summary="LayerNorm's gradients of x = x1 + x2, plus dsum; dgamma, dbeta float32",
    )


# ----------------------------------------------------------------------------- SwiGluGrad
def _swiglu_grad() -> OpSpec:
    params = (
        tensor("yGrad", FLOATS, min_rank=1),
        tensor("x", FLOATS, min_rank=1),
        int_attr("dim", default=-1),
        out("out", FLOATS, c_type="const aclTensor*"),
    )

    def infer(call: Call) -> Infos:
        g, x = tensor_arg(call, "yGrad"), tensor_arg(call, "x")
        dim = normalize_dim(call.args["dim"], x.rank)
        if x.shape[dim] % 2:
            raise invalid(f"x has odd size {x.shape[dim]} along dim {call.args['dim']}; it is split into two halves")
        half = list(x.shape)
        half[dim] //= 2
        if list(g.shape) != half:
            raise invalid(f"yGrad has shape {list(g.shape)}; it must be SwiGlu's output shape {half}")
        if g.dtype != x.dtype:
            raise invalid(f"yGrad has dtype {g.dtype.short}; it must equal x's {x.dtype.short}")
        call.plan["dim"] = dim
        return {"out": same(x.shape, x.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in SAMPLE_DTYPES:
            for shape, dim in (((6,), -1), ((3, 8), -1), ((4, 5), 0), ((2, 6, 3), 1), ((0, 4), -1)):
                half = list(shape)
                half[dim] //= 2
                args = {"yGrad": S.array(rng, half, dt), "x": S.array(rng, shape, dt, low=-8, high=8), "dim": dim}
                yield Sample(args, f"{dt.short} {list(shape)} dim {dim}")
        x = S.array(rng, (4, 16), _F32, special=True)
        yield Sample({"yGrad": S.array(rng, (4, 8), _F32, special=True), "x": x, "dim": 1}, "NaN/Inf/-0/extremes")
        x = np.linspace(-30, 30, 64, dtype=np.float32).reshape(2, 32)
        yield Sample({"yGrad": np.ones((2, 16), np.float32), "x": x, "dim": -1}, "saturating sigmoid")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = S.array(rng, (3, 4), _F32)
        yield ErrorSample(
            {"yGrad": S.array(rng, (3, 2), _F32), "x": S.array(rng, (3, 5), _F32), "dim": -1}, INVALID, "odd"
        )
        yield ErrorSample({"yGrad": S.array(rng, (3, 4), _F32), "x": x, "dim": -1}, INVALID, "yGrad not half of x")
        yield ErrorSample({"yGrad": S.array(rng, (3, 2), D.ACL_FLOAT16), "x": x, "dim": -1}, INVALID, "yGrad dtype")
        yield ErrorSample({"yGrad": S.array(rng, (3, 2), _F32), "x": x, "dim": 2}, INVALID, "dim out of range")

    return OpSpec(
        "SwiGluGrad",
        "attention",
        params,
        infer,
        samples=gen,
        error_samples=errors,
        summary="x = [a, b] along dim: out = [yGrad·b·silu'(a), yGrad·silu(a)]",
    )


# ----------------------------------------------------------------------------- accuracy and declarations
def _ln_rank(args: Args) -> int:
    return len(args["normalizedShape"])


def _gamma_rank(args: Args) -> int:
    return int(np.ndim(args["gamma"]))


def _norm_class(x: str, count: Callable[[Args], int], names: dict[str, str], centred: bool, steps: int) -> Accuracy:
    row, rows = _trailing_count(x, count)
    return composite(
        steps=steps,
        length_of=_longest(row, rows),
        scale_of=norm_grad_scale(names, stats=count, centred=centred),
        reason="dx: two row sums then elementwise steps; weight gradients: sums over the rows; n is the longer",
    )


def _group_rows(args: Args) -> int:
    n, c, g = int(args["N"]), int(args["C"]), max(int(args["group"]), 1)
    hxw = int(args["HxW"])
    return max((c // g) * hxw, n * hxw, 1)


ACCURACY: dict[str, Accuracy] = {
    # Σ g·y, the subtraction, the product
    "SoftmaxBackward": composite(steps=3, length_of=dim_length("gradOutput"), scale_of=softmax_grad_scale(False)),
    # Σ g, exp (2 ulp), the product, the subtraction
    "LogSoftmaxBackward": composite(steps=4, length_of=dim_length("gradOutput"), scale_of=softmax_grad_scale(True)),
    # g = dy·gamma, x̂, g·x̂ and its row sum, /n, rstd·(g - x̂·m)
    "RmsNormGrad": _norm_class(
        "x",
        _gamma_rank,
        {"dy": "dy", "x": "x", "rstd": "rstd", "gamma": "gamma", "dx": "dxOut", "dgamma": "dgammaOut"},
        False,
        7,
    ),
    "LayerNormBackward": _norm_class(
        "input",
        _ln_rank,
        {
            "dy": "gradOut",
            "x": "input",
            "mean": "mean",
            "rstd": "rstd",
            "gamma": "weightOptional",
            "dx": "gradInputOut",
            "dgamma": "gradWeightOut",
            "dbeta": "gradBiasOut",
        },
        True,
        9,
    ),
    # LayerNormBackward's steps, x1 + x2 and + dsum
    "AddLayerNormGrad": _norm_class(
        "x1",
        _gamma_rank,
        {
            "dy": "dy",
            "x": "x1",
            "x2": "x2",
            "mean": "mean",
            "rstd": "rstd",
            "gamma": "gamma",
            "dsum": "dsumOptional",
            "dx": "dxOut",
            "dgamma": "dgammaOut",
            "dbeta": "dbetaOut",
        },
        True,
        11,
    ),
    "GroupNormBackward": composite(
        steps=9,
        length_of=lambda args, outputs: _group_rows(args),
        scale_of=group_norm_grad_scale,
        reason="dx: two sums over the (sample, group) row; dgamma, dbeta: sums over N·HxW; n is the longer",
    ),
    "SwiGluGrad": ulp(
        8,
        reason="σ(a) and σ(-a) (exp 2 ulp, an add, a division each), a·σ(-a), 1 + ·, three products: about 7 float32"
        " ulp; 1 - σ(a) is formed as σ(-a), so no cancellation",
    ),
}
"""Accuracy classes: each op's row reduction (dx) or reduction over rows (weight gradients), then its steps."""

SPECS: list[OpSpec] = with_accuracy(
    [
        _softmax_backward("SoftmaxBackward", log=False),
        _softmax_backward("LogSoftmaxBackward", log=True),
        _rms_norm_grad(),
        _layer_norm_backward(),
        _group_norm_backward(),
        _add_layer_norm_grad(),
        _swiglu_grad(),
    ],
    ACCURACY,
)

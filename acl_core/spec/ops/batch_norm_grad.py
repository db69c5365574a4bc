"""BatchNorm's training backward (issue 16): BatchNormBackward and the SyncBatchNorm pair
BatchNormReduceBackward / BatchNormElemtBackward.

The channel is dim 1; every per-channel sum runs over the batch and the spatial dims (``m`` elements):

* BatchNormBackward: training, with BatchNorm's saveMean / saveInvstd (``x̂ = (x - saveMean)·saveInvstd``):
  ``gradInput = weight·invstd·(dy - Σdy/m - x̂·Σ(dy·x̂)/m)``; inference, with runningMean / runningVar
  (``invstd = 1/sqrt(runningVar + eps)``): ``gradInput = dy·weight·invstd``; both ``gradWeight = Σdy·(x -
  mean)·invstd`` and ``gradBias = Σdy``;
* BatchNormReduceBackward: ``sumDy = Σdy``, ``sumDyXmu = Σdy·(x - mean)`` (inputG), ``gradWeight =
  sumDyXmu·invstd`` (weightG), ``gradBias = sumDy`` (biasG);
* BatchNormElemtBackward: ``gradInput = (dy - sumDy/n - (x - mean)·invstd²·sumDyXmu/n)·invstd·weight``.

Choices where the CANN pages are silent or leave it to the chip:

* dtypes FLOAT, FLOAT16, BFLOAT16; gradOut, input and gradInput share one; the per-channel vectors
  (weight, running and saved statistics, mean, invstd, sumDy, sumDyXmu) take that dtype or FLOAT32 (the
  Ascend 950's rule; A2/A3 want gradOut's); a null weight is 1, a null runningMean 0 and runningVar 1 (as
  BatchNorm's inference does); training needs saveMean and saveInvstd (161001 when null), inference
  ignores them and takes them empty too;
* BatchNormBackward's gradWeight and gradBias default to weight's dtype (gradOut's without weight) and
  may be FLOAT32; BatchNormReduceBackward's sumDy / sumDyXmu default to mean's dtype, its gradWeight /
  gradBias to weight's (mean's without weight), any float accepted; a false outputMask / inputG / weightG /
  biasG entry leaves its outputs unwritten, and a null one is refused (161001) only when asked for;
* BatchNormElemtBackward's ``n`` is the sum of ``counter``'s entries (torch's batch_norm_backward_elemt: the
  per-process counts of SyncBatchNorm); counter is INT32, FLOAT16 or FLOAT of rank 1-8;
* NHWC / NDHWC layouts are not declared (A2/A3 refuse them; the channel is always dim 1 here).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.formats import Format
from acl_core.spec import samples as S
from acl_core.spec.accuracy import Accuracy, composite, with_accuracy
from acl_core.spec.ops.grad import _finite, _limit, _row_norm_scale, _summed
from acl_core.spec.opspec import (
    INVALID,
    NULLPTR,
    Call,
    ErrorSample,
    Infos,
    OpSpec,
    Sample,
    bool_array,
    bool_attr,
    float_attr,
    invalid,
    nullptr,
    out,
    tensor,
)
from acl_core.spec.plan import declare
from acl_core.spec.rules import FLOATS, listed, same, tensor_arg
from acl_core.tensor import AclBoolArray, AclTensor

declare("output_mask", "tuple[bool, ...]", "outputMask: which of the op's gradients to compute", tuple)

FAMILY = "batch_norm_grad"
_F32, _F16, _BF16 = D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16
SAMPLE_DTYPES = (_F32, _F16, _BF16)
FORMATS = frozenset(
    {Format.ACL_FORMAT_ND, Format.ACL_FORMAT_NC, Format.ACL_FORMAT_NCL, Format.ACL_FORMAT_NCHW, Format.ACL_FORMAT_NCDHW}
)
BN_OUTPUTS = ("gradInput", "gradWeight", "gradBias")
REDUCE_OUTPUTS = ("sumDy", "sumDyXmu", "gradWeight", "gradBias")
Args = Mapping[str, Any]


# ----------------------------------------------------------------------------- shared rules
def _opt(call: Call, name: str) -> AclTensor | None:
    t = call.args.get(name)
    return t if isinstance(t, AclTensor) else None


def _pair(call: Call, dy_name: str = "gradOut") -> tuple[AclTensor, AclTensor, int]:
    """gradOut and input (same shape, dtype, format) and the channel count (> 0)."""
    dy, x = tensor_arg(call, dy_name), tensor_arg(call, "input")
    if tuple(dy.shape) != tuple(x.shape) or dy.dtype != x.dtype:
        raise invalid(f"{dy_name} {dy.dtype.short}{list(dy.shape)} must match input's {x.dtype.short}{list(x.shape)}")
    if x.rank < 2:
        raise invalid(f"input has rank {x.rank}; BatchNorm's channel is dim 1 of a rank 2-8 tensor")
    if dy.format != x.format:
        raise invalid(f"{dy_name} has format {dy.format.name}; it must match input's {x.format.name}")
    return dy, x, x.shape[1]


def _vector(call: Call, name: str, x: AclTensor, channels: int) -> AclTensor | None:
    """A per-channel vector: 1-D of ``channels``, in x's dtype or float32 (None when null)."""
    t = _opt(call, name)
    if t is None:
        return None
    if t.rank != 1 or t.shape[0] != channels:
        raise invalid(f"{name} must be 1-D with {channels} elements (the channel count), not {list(t.shape)}")
    if t.dtype not in (x.dtype, _F32):
        raise invalid(f"{name} has dtype {t.dtype.short}; a {x.dtype.short} input takes {x.dtype.short} or float32")
    return t


def _wanted(call: Call, names: Sequence[str], mask: Sequence[bool]) -> None:
    """161001 for an output the mask asks for that is null."""
    for name, wanted in zip(names, mask):
        if wanted and call.outputs_required and call.args.get(name) is None:
            raise nullptr(f"{name} is null, but the op is asked for it")


def _weight_grads_dtype(call: Call, names: Sequence[str], default: D) -> None:
    for name in names:
        t = _opt(call, name)
        if t is not None and t.dtype not in (default, _F32):
            raise invalid(f"{name} has dtype {t.dtype.short}; it takes {default.short} or float32")


# ----------------------------------------------------------------------------- BatchNormBackward
def _bn_infer(call: Call) -> Infos:
    _, x, c = _pair(call)
    out_t = _opt(call, "gradInput")
    if out_t is not None and out_t.format != x.format:
        raise invalid(f"gradInput has format {out_t.format.name}; it must match input's {x.format.name}")
    training = bool(call.args["training"])
    names = ["weight", "runningMean", "runningVar", "saveMean", "saveInvstd"]
    if not training:  # inference may pass the saved statistics empty (CANN: "or length 0")
        names = [n for n in names if not (n.startswith("save") and getattr(_opt(call, n), "shape", None) == (0,))]
    vectors = {n: _vector(call, n, x, c) for n in names}
    if training:
        for name in ("saveMean", "saveInvstd"):
            if vectors.get(name) is None:
                raise nullptr(f"{name} is null, but training needs the forward op's saved statistics")
    arr = call.args["outputMask"]
    assert isinstance(arr, AclBoolArray)
    mask = tuple(bool(v) for v in arr.values)
    if len(mask) != 3:
        raise invalid(f"outputMask has {len(mask)} entries; expected 3 (gradInput, gradWeight, gradBias)")
    _wanted(call, BN_OUTPUTS, mask)
    weight = vectors["weight"]
    wdt = weight.dtype if weight is not None else x.dtype
    _weight_grads_dtype(call, ("gradWeight", "gradBias"), wdt)
    call.plan["output_mask"] = mask
    infos = (same(x.shape, x.dtype), listed((c,), wdt), listed((c,), wdt))
    return {name: info if wanted else None for name, info, wanted in zip(BN_OUTPUTS, infos, mask)}


def bn_case(
    rng: np.random.Generator,
    shape: tuple[int, ...],
    dt: D,
    training: bool,
    *,
    stat_dt: D | None = None,
    mask: tuple[bool, bool, bool] = (True, True, True),
    weight: bool = True,
) -> dict[str, Any]:
    """A BatchNormBackward call whose saved statistics are the batch's own (as BatchNorm writes them)."""
    c = shape[1]
    sdt = stat_dt or dt
    x = S.array(rng, shape, dt)
    axes = (0, *range(2, len(shape)))
    wide = x.astype(np.float64)
    mean = wide.mean(axis=axes) if wide.size else np.zeros(c)
    invstd = 1.0 / np.sqrt(wide.var(axis=axes) + 1e-5) if wide.size else np.ones(c)
    return {
        "gradOut": S.array(rng, shape, dt, low=-1, high=1),
        "input": x,
        "weight": S.array(rng, (c,), sdt, low=0.5, high=1.5) if weight else None,
        "runningMean": S.array(rng, (c,), sdt, low=-1, high=1),
        "runningVar": S.positive(rng, (c,), sdt, low=0.5, high=2),
        "saveMean": mean.astype(sdt.numpy),
        "saveInvstd": invstd.astype(sdt.numpy),
        "training": training,
        "eps": 1e-5,
        "outputMask": list(mask),
    }


def _bn_samples(rng: np.random.Generator) -> Iterable[Sample]:
    for dt in SAMPLE_DTYPES:
        yield Sample(bn_case(rng, (4, 3, 5, 6), dt, True), f"{dt.short} training NCHW")
        yield Sample(bn_case(rng, (2, 3, 7), dt, False), f"{dt.short} inference NCL")
    yield Sample(bn_case(rng, (6, 5), _F32, True), "training NC")
    yield Sample(bn_case(rng, (2, 2, 3, 2, 4), _F16, True, stat_dt=_F32), "float16 NCDHW, float32 statistics")
    yield Sample(bn_case(rng, (3, 4, 5), _F32, True, weight=False), "no weight")
    yield Sample(bn_case(rng, (3, 4, 5), _BF16, True, mask=(True, False, False)), "gradInput only")
    yield Sample(bn_case(rng, (3, 4, 5), _F32, False, mask=(False, True, True)), "weight and bias gradients only")
    yield Sample(bn_case(rng, (0, 3, 4), _F32, True), "empty batch")
    empty = np.zeros(0, np.float32)
    yield Sample(
        {**bn_case(rng, (2, 3, 4), _F32, False), "saveMean": empty, "saveInvstd": empty}, "inference, no saved"
    )


def _bn_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    good = bn_case(rng, (2, 3, 4), _F32, True)
    yield ErrorSample({**good, "weight": np.ones(4, np.float32)}, INVALID, "weight of the wrong length")
    yield ErrorSample({**good, "gradOut": np.zeros((2, 3, 5), np.float32)}, INVALID, "gradOut of another shape")
    yield ErrorSample({**good, "gradOut": np.zeros((2, 3, 4), np.float16)}, INVALID, "gradOut of another dtype")
    yield ErrorSample({**good, "outputMask": [True, True]}, INVALID, "outputMask of two entries")
    yield ErrorSample({**good, "saveMean": None}, NULLPTR, "training without saveMean")
    yield ErrorSample({**good, "input": S.array(rng, (6,), _F32)}, INVALID, "1-D input")
    yield ErrorSample({**good, "gradWeight": np.zeros(3, np.float16)}, INVALID, "gradWeight in float16 for float32")


# ----------------------------------------------------------------------------- BatchNormReduceBackward
def _reduce_infer(call: Call) -> Infos:
    _, x, c = _pair(call)
    if c == 0:
        raise invalid("input's channel dim is 0")
    mean, _ = _vector(call, "mean", x, c), _vector(call, "invstd", x, c)
    weight = _vector(call, "weight", x, c)
    assert mean is not None
    flags = tuple(bool(call.args[n]) for n in ("inputG", "weightG", "biasG"))
    mask = (flags[0], flags[0], flags[1], flags[2])
    _wanted(call, REDUCE_OUTPUTS, mask)
    wdt = weight.dtype if weight is not None else mean.dtype
    call.plan["output_mask"] = mask
    infos = [listed((c,), mean.dtype), listed((c,), mean.dtype), listed((c,), wdt), listed((c,), wdt)]
    return {name: info if wanted else None for name, info, wanted in zip(REDUCE_OUTPUTS, infos, mask)}


def _stats(x: np.ndarray, dt: D) -> tuple[np.ndarray, np.ndarray]:
    axes = (0, *range(2, x.ndim))
    wide = x.astype(np.float64)
    if wide.size == 0:
        return np.zeros(x.shape[1], dt.numpy), np.ones(x.shape[1], dt.numpy)
    mean = wide.mean(axis=axes)
    invstd = 1.0 / np.sqrt(wide.var(axis=axes) + 1e-5)
    return mean.astype(dt.numpy), invstd.astype(dt.numpy)


def reduce_case(
    rng: np.random.Generator, shape: tuple[int, ...], dt: D, flags: tuple[bool, bool, bool] = (True, True, True)
) -> dict[str, Any]:
    """A BatchNormReduceBackward call with the batch's own statistics."""
    x = S.array(rng, shape, dt)
    sdt = _F32 if dt != _F32 else dt
    mean, invstd = _stats(x, sdt)
    return {
        "gradOut": S.array(rng, shape, dt, low=-1, high=1),
        "input": x,
        "mean": mean,
        "invstd": invstd,
        "weight": S.array(rng, (shape[1],), dt, low=0.5, high=1.5),
        "inputG": flags[0],
        "weightG": flags[1],
        "biasG": flags[2],
    }


def _reduce_samples(rng: np.random.Generator) -> Iterable[Sample]:
    for dt in SAMPLE_DTYPES:
        yield Sample(reduce_case(rng, (4, 3, 5, 6), dt), f"{dt.short} NCHW")
    yield Sample(reduce_case(rng, (7, 4), _F32), "NC")
    yield Sample(reduce_case(rng, (2, 3, 2, 3, 2), _F16, (True, False, False)), "NCDHW, inputG only")
    yield Sample(reduce_case(rng, (3, 2, 5), _F32, (False, True, True)), "weightG and biasG only")
    yield Sample(reduce_case(rng, (0, 3, 4), _F32), "empty batch")


def _reduce_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    good = reduce_case(rng, (2, 3, 4), _F32)
    yield ErrorSample({**good, "mean": np.zeros(4, np.float32)}, INVALID, "mean of the wrong length")
    yield ErrorSample({**good, "input": S.array(rng, (2, 0, 4), _F32), "gradOut": np.zeros((2, 0, 4), np.float32)},
                      INVALID, "zero channels")  # fmt: skip
    yield ErrorSample({**good, "gradOut": np.zeros((2, 3, 4), np.float16)}, INVALID, "gradOut of another dtype")


# ----------------------------------------------------------------------------- BatchNormElemtBackward
def _elemt_infer(call: Call) -> Infos:
    _, x, c = _pair(call)
    if c == 0:
        raise invalid("input's channel dim is 0")
    for name in ("mean", "invstd", "weight", "sumDy", "sumDyXmu"):
        _vector(call, name, x, c)
    out_t = _opt(call, "gradInput")
    if out_t is not None and out_t.format != x.format:
        raise invalid(f"gradInput has format {out_t.format.name}; it must match input's {x.format.name}")
    return {"gradInput": same(x.shape, x.dtype)}


def elemt_case(rng: np.random.Generator, shape: tuple[int, ...], dt: D, *, counts: int = 2) -> dict[str, Any]:
    """A BatchNormElemtBackward call: statistics and sums from BatchNormReduceBackward's formulas on this batch."""
    base = reduce_case(rng, shape, dt)
    axes = (0, *range(2, len(shape)))
    dy, x = base["gradOut"].astype(np.float64), base["input"].astype(np.float64)
    sdt = base["mean"].dtype
    per = max(math.prod(shape) // max(shape[1], 1), 1)
    split = [per // counts + (1 if i < per % counts else 0) for i in range(counts)]
    return {
        **{k: base[k] for k in ("gradOut", "input", "mean", "invstd", "weight")},
        "sumDy": dy.sum(axis=axes).astype(sdt),
        "sumDyXmu": (dy * (x - base["mean"].astype(np.float64).reshape((1, -1) + (1,) * (len(shape) - 2))))
        .sum(axis=axes)
        .astype(sdt),
        "counter": np.array(split, np.int32),
    }


def _elemt_samples(rng: np.random.Generator) -> Iterable[Sample]:
    for dt in SAMPLE_DTYPES:
        yield Sample(elemt_case(rng, (4, 3, 5, 6), dt), f"{dt.short} NCHW")
    yield Sample(elemt_case(rng, (7, 4), _F32, counts=1), "NC, one counter")
    yield Sample(elemt_case(rng, (2, 3, 2, 3, 2), _F16, counts=4), "NCDHW, four counters")
    case = elemt_case(rng, (3, 2, 5), _F32)
    yield Sample({**case, "weight": None, "counter": case["counter"].astype(np.float32)}, "no weight, float counter")
    yield Sample(elemt_case(rng, (0, 3, 4), _F32), "empty batch")


def _elemt_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    good = elemt_case(rng, (2, 3, 4), _F32)
    yield ErrorSample({**good, "sumDy": np.zeros(4, np.float32)}, INVALID, "sumDy of the wrong length")
    yield ErrorSample({**good, "gradOut": np.zeros((2, 3, 5), np.float32)}, INVALID, "gradOut of another shape")
    yield ErrorSample({**good, "counter": np.zeros(2, np.int64)}, INVALID, "int64 counter")


# ----------------------------------------------------------------------------- accuracy
def _channels_first(a: Any) -> np.ndarray:
    """``a`` [N, C, ...] as [C, N·...] in float64."""
    w = np.asarray(a).astype(np.float64)
    return np.moveaxis(w, 1, 0).reshape(w.shape[1], -1)


def _per_channel(args: Args, name: str, default: float, c: int) -> np.ndarray:
    v = args.get(name)
    return np.full((c, 1), default) if v is None else np.asarray(v).astype(np.float64).reshape(c, 1)


def _back(a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """[C, N·...] back to ``shape`` [N, C, ...]."""
    moved = (shape[1], shape[0], *shape[2:])
    return np.moveaxis(a.reshape(moved), 0, 1)


def bn_grad_scale(args: Args, outputs: Args) -> dict[str, Any]:
    """BatchNormBackward's ``S``: the row-norm backward's term magnitudes with each channel a row (training), or
    ``|dy·weight·invstd|`` (inference); the weight and bias gradients' sums of ``|dy·x̂|`` and ``|dy|``."""
    shape = tuple(np.shape(args["input"]))
    c = shape[1]
    dy, x = _channels_first(args["gradOut"]), _channels_first(args["input"])
    w = _per_channel(args, "weight", 1.0, c)
    limit = _limit(args["input"])
    if args["training"]:
        mean, invstd = _per_channel(args, "saveMean", 0.0, c), _per_channel(args, "saveInvstd", 1.0, c)
        if x.size == 0:
            found: dict[str, np.ndarray] = {"gradInput": np.zeros(shape), "gradWeight": np.zeros(c)}
            found["gradBias"] = np.zeros(c)
        else:
            dx, dgamma, dbeta, past = _row_norm_scale(dy, x, mean, invstd, w, (1,), limit)
            found = {"gradInput": _back(dx, shape), "gradWeight": _summed(dgamma, (1,), limit, past)}
            found["gradBias"] = _summed(dbeta, (1,), limit)
    else:
        mean = _per_channel(args, "runningMean", 0.0, c)
        with np.errstate(all="ignore"):
            invstd = 1.0 / np.sqrt(_per_channel(args, "runningVar", 1.0, c) + float(args["eps"]))
            found = {"gradInput": _back(np.abs(dy * w * invstd), shape)}
            found["gradWeight"] = _summed(np.abs(dy) * np.abs((x - mean) * invstd), (1,), limit)
            found["gradBias"] = _summed(np.abs(dy), (1,), limit)
    return {k: np.reshape(v, np.shape(outputs[k])) for k, v in found.items() if outputs.get(k) is not None}


def reduce_grad_scale(args: Args, outputs: Args) -> dict[str, Any]:
    """BatchNormReduceBackward's ``S``: ``Σ|dy|`` and ``Σ|dy|·|x - mean|`` (times ``|invstd|`` for gradWeight)."""
    c = np.shape(args["input"])[1]
    dy, x = _channels_first(args["gradOut"]), _channels_first(args["input"])
    mean, invstd = _per_channel(args, "mean", 0.0, c), _per_channel(args, "invstd", 1.0, c)
    limit = _limit(args["input"])
    with np.errstate(all="ignore"):
        s1 = _summed(np.abs(dy), (1,), limit)
        s2 = _summed(np.abs(dy) * np.abs(x - mean), (1,), limit)
        found = {"sumDy": s1, "sumDyXmu": s2, "gradWeight": s2 * np.abs(invstd[:, 0]), "gradBias": s1}
    return {k: np.reshape(v, np.shape(outputs[k])) for k, v in found.items() if outputs.get(k) is not None}


def elemt_grad_scale(args: Args, outputs: Args) -> dict[str, Any]:
    """BatchNormElemtBackward's ``S = |invstd·w|·(|dy| + |sumDy|/n + |x - mean|·invstd²·|sumDyXmu|/n)``."""
    shape = tuple(np.shape(args["input"]))
    c = shape[1]
    dy, x = _channels_first(args["gradOut"]), _channels_first(args["input"])
    n = float(np.sum(np.asarray(args["counter"]).astype(np.float64)))
    pc = {k: _per_channel(args, k, d, c) for k, d in (("mean", 0.0), ("invstd", 1.0), ("weight", 1.0))}
    with np.errstate(all="ignore"):
        terms = np.abs(dy) + np.abs(_per_channel(args, "sumDy", 0.0, c)) / n
        terms = terms + np.abs(x - pc["mean"]) * pc["invstd"] ** 2 * np.abs(_per_channel(args, "sumDyXmu", 0.0, c)) / n
        found = _finite(np.abs(pc["invstd"] * pc["weight"]) * terms)
    return {"gradInput": _back(found, shape)} if outputs.get("gradInput") is not None else {}


def _channel_length(args: Args, outputs: Args) -> int:
    """Elements per channel (N · spatial), the length of every per-channel sum."""
    shape = tuple(np.shape(args["input"]))
    return max(math.prod(shape) // max(shape[1], 1), 1)


ACCURACY: dict[str, Accuracy] = {
    # two channel sums, then x̂, g·x̂, /m twice, the subtraction and the products
    "BatchNormBackward": composite(
        steps=9,
        length_of=_channel_length,
        scale_of=bn_grad_scale,
        reason="dx: two sums over the channel's N·spatial elements, then elementwise steps; weight gradients: the "
        "same sums",
    ),
    # x - mean, the product, the sum, × invstd
    "BatchNormReduceBackward": composite(
        steps=3, length_of=_channel_length, scale_of=reduce_grad_scale, reason="sums over each channel's elements"
    ),
    # two divisions by n, invstd², three products, two subtractions, × invstd·w
    "BatchNormElemtBackward": composite(
        steps=10,
        length_of=lambda args, outputs: max(int(np.size(args["counter"])), 1),
        scale_of=elemt_grad_scale,
        reason="elementwise: n is counter's sum; the formula's products and subtractions",
    ),
}
"""Accuracy classes: per-channel sums (reduction of N·spatial) then elementwise steps."""


def _vec(name: str) -> Any:
    return tensor(name, FLOATS, max_rank=1, min_rank=1)


def _spec(
    name: str, params: tuple[Any, ...], infer: Callable[[Call], Infos], samples: Any, errors: Any, what: str
) -> OpSpec:
    return OpSpec(name, FAMILY, params, infer, samples=samples, error_samples=errors, summary=what)


_IO = (
    tensor("gradOut", FLOATS, min_rank=2, max_rank=8, formats=FORMATS),
    tensor("input", FLOATS, min_rank=2, max_rank=8, formats=FORMATS),
)
SPECS: list[OpSpec] = with_accuracy(
    [
        _spec(
            "BatchNormBackward",
            (
                *_IO,
                *(tensor(n, FLOATS, optional=True, max_rank=1, min_rank=1) for n in ("weight", "runningMean")),
                *(tensor(n, FLOATS, optional=True, max_rank=1, min_rank=1) for n in ("runningVar", "saveMean")),
                tensor("saveInvstd", FLOATS, optional=True, max_rank=1, min_rank=1),
                bool_attr("training"),
                float_attr("eps"),
                bool_array("outputMask"),
                out("gradInput", FLOATS, optional=True, formats=FORMATS),
                out("gradWeight", FLOATS, optional=True),
                out("gradBias", FLOATS, optional=True),
            ),
            _bn_infer,
            _bn_samples,
            _bn_errors,
            "BatchNorm's gradients (training: through the batch statistics; inference: the running ones)",
        ),
        _spec(
            "BatchNormReduceBackward",
            (
                *_IO,
                _vec("mean"),
                _vec("invstd"),
                tensor("weight", FLOATS, optional=True, max_rank=1, min_rank=1),
                *(bool_attr(n, c_type="const bool") for n in ("inputG", "weightG", "biasG")),
                *(out(n, FLOATS, optional=True, c_type="aclTensor*") for n in REDUCE_OUTPUTS),
            ),
            _reduce_infer,
            _reduce_samples,
            _reduce_errors,
            "SyncBatchNorm backward's per-channel sums: sumDy, sumDyXmu, gradWeight, gradBias",
        ),
        _spec(
            "BatchNormElemtBackward",
            (
                *(tensor(n, FLOATS, min_rank=2, max_rank=8, formats=FORMATS, c_type="const aclTensor*") for n in
                  ("gradOut", "input")),
                *(_vec(n) for n in ("mean", "invstd")),
                tensor("weight", FLOATS, optional=True, max_rank=1, min_rank=1),
                *(_vec(n) for n in ("sumDy", "sumDyXmu")),
                tensor("counter", {D.ACL_INT32, _F16, _F32}, min_rank=1, max_rank=8, c_type="aclTensor*"),
                out("gradInput", FLOATS, formats=FORMATS, c_type="aclTensor*"),
            ),
            _elemt_infer,
            _elemt_samples,
            _elemt_errors,
            "SyncBatchNorm backward's elementwise gradInput from the reduced sums and the counts",
        ),
    ],
    ACCURACY,
)  # fmt: skip

"""Class-index losses (issue 16): NLLLoss(2d), CrossEntropyLoss and their backward ops.

Each sample ``n`` has a class index ``t_n`` into the class axis (dim 1 of ``[N, C]`` or ``[N, C, H, W]``,
dim 0 of a single ``[C]`` sample) and a weight ``w_n = weight[t_n]`` (0 where ``t_n == ignoreIndex``).
NLL: ``l_n = -w_n·x[n, t_n]``. Cross entropy: ``lp = x - logsumexp(x)`` along the class axis, then
``l_n = -(1-ε)·w_n·lp[n, t_n] - ε/C·Σ_c weight[c]·lp[n, c]`` (0 for an ignored sample); reduction
mean divides ``Σ l_n`` by ``totalWeight = Σ w_n``, sum keeps ``Σ l_n``, none keeps ``l``. The backward
ops are the derivatives of those (the CE gradient reads ``exp(logProb)`` as the softmax, as CANN's page
writes it). A class index outside ``[0, C)`` other than ``ignoreIndex`` is an error only a kernel can
see: 161002 at launch on the reference, at synchronisation on a device (``IndexOf``).

Choices where the CANN docs are silent, following torch (``torch.ops.aten.nll_loss_forward``,
``F.cross_entropy``):

* a reduced loss is 0-d, or ``[1]`` when the caller passes that (CANN's docs say ``[1]``); so is
  totalWeightOut / the reduced gradOutput and totalWeight inputs;
* totalWeightOut is ``Σ w_n`` for a reduced loss and for a single ``[C]`` sample, 0 for a batched
  'none' loss (torch's values); the mean over zero weight is NaN (0/0), the sum over no sample 0;
* NLL: ``weight`` is required (the signature has no Optional) and has self's dtype; target INT64,
  INT32 or UINT8 (the page's list);
* CrossEntropyLoss: ``reductionOptional`` null means "mean" (torch's default); an unknown string or a
  labelSmoothing outside [0, 1] is 561002 (the page's code for those values); zlossOut and
  lseForZlossOut are written with zeros. The zloss mode (``returnZloss`` true or a non-zero
  ``lseSquareScaleForZloss``; in the gradient also ``gradZlossOptional`` / ``lseForZlossOptional``) is
  refused with 161002: the page marks it unsupported ("不会生效"), so CANN defines no result to match;
* SoftmaxCrossEntropyWithLogits (probability labels, TF's op): ``loss_n = -Σ_c y·log_softmax(x)``,
  ``backprop = softmax(x) - y`` exactly as the page writes it (the true gradient when each row of labels
  sums to 1); labels must have features' shape and dtype (161002), loss is ``[N]``;
* CrossEntropyLossGrad accepts labelSmoothing in [0, 1] with the page's formula (CANN's kernel takes
  only 0.0 today; the formula defines the rest, and torch agrees with it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.errors import AclnnError, AclnnStatus
from acl_core.spec import samples as S
from acl_core.spec.accuracy import Accuracy, composite
from acl_core.spec.opspec import (
    INVALID,
    TILING,
    Call,
    ErrorSample,
    IndexOf,
    Infos,
    OpSpec,
    Param,
    Sample,
    bool_attr,
    float_attr,
    int_attr,
    invalid,
    out,
    string_attr,
    tensor,
)
from acl_core.spec.plan import declare
from acl_core.spec.rules import FLOATS, INDEX, same, tensor_arg
from acl_core.tensor import AclTensor

FAMILY = "class_loss"

NONE, MEAN, SUM = 0, 1, 2
REDUCTION_NAMES: dict[str, int] = {"none": NONE, "mean": MEAN, "sum": SUM}
"""CrossEntropyLoss's ``char*`` reduction → the enum the NLL ops take."""
NLL_TARGETS = frozenset({D.ACL_INT64, D.ACL_INT32, D.ACL_UINT8})

declare("reduction", "int", "the loss reduction as CANN's enum: 0 none, 1 mean, 2 sum", int)
declare("classes", "int", "C, the length of the class axis", int)

Args = Mapping[str, Any]


def _tiling(message: str) -> AclnnError:
    return AclnnError(AclnnStatus.ACLNN_ERR_INNER_TILING_ERROR, message)


def _opt(call: Call, name: str) -> AclTensor | None:
    t = call.args.get(name)
    return t if isinstance(t, AclTensor) else None


def _reduced(call: Call, name: str) -> tuple[int, ...]:
    """A one-value tensor: 0-d (torch), or ``[1]`` when the caller's tensor is that (CANN's docs)."""
    o = _opt(call, name)
    return (1,) if o is not None and tuple(o.view_dims) == (1,) else ()


def _check_one(call: Call, name: str) -> None:
    t = _opt(call, name)
    if t is not None and t.numel != 1:
        raise invalid(f"{name} has shape {list(t.view_dims)}; it must hold one value")


# ----------------------------------------------------------------------------- shapes
@dataclass(frozen=True)
class NllRow:
    """One NLL op: its official parameters, the input's rank(s) and whether it is the backward op."""

    name: str
    params: tuple[Param, ...]
    ranks: tuple[int, ...]
    backward: bool


def _samples_shape(x: AclTensor, target: AclTensor, ranks: tuple[int, ...], tname: str) -> tuple[int, ...]:
    """The per-sample shape (target's), checked against the input's (161002 otherwise)."""
    if x.rank not in ranks:
        raise invalid(f"self has rank {x.rank}; it must be {' or '.join(map(str, ranks))}")
    dims = tuple(x.view_dims)
    want = dims[:1] + dims[2:] if x.rank != 1 else ()
    if tuple(target.view_dims) != want:
        raise invalid(f"{tname} has shape {list(target.view_dims)}; self {list(dims)} needs {list(want)}")
    return want


def _nll_infer(row: NllRow) -> Callable[[Call], Infos]:
    def infer(call: Call) -> Infos:
        x, target, weight = tensor_arg(call, "self"), tensor_arg(call, "target"), tensor_arg(call, "weight")
        per_sample = _samples_shape(x, target, row.ranks, "target")
        classes = x.view_dims[0] if x.rank == 1 else x.view_dims[1]
        if tuple(weight.view_dims) != (classes,):
            raise invalid(f"weight has shape {list(weight.view_dims)}; it must be [{classes}]")
        if weight.dtype != x.dtype:
            raise invalid(f"weight has dtype {weight.dtype.short}; it must equal self's {x.dtype.short}")
        reduction = int(call.args["reduction"])
        call.plan["reduction"] = reduction
        call.plan["classes"] = classes
        if row.backward:
            g, tw = tensor_arg(call, "gradOutput"), tensor_arg(call, "totalWeight")
            for t, n in ((g, "gradOutput"), (tw, "totalWeight")):
                if t.dtype != x.dtype:
                    raise invalid(f"{n} has dtype {t.dtype.short}; it must equal self's {x.dtype.short}")
            _check_one(call, "totalWeight")
            if reduction == NONE and x.rank != 1:
                if tuple(g.view_dims) != per_sample:
                    raise invalid(f"gradOutput has shape {list(g.view_dims)}; reduction none needs {list(per_sample)}")
            else:
                _check_one(call, "gradOutput")
            return {"out": same(x.view_dims, x.dtype)}
        loss = per_sample if reduction == NONE else _reduced(call, "out")
        return {"out": same(loss, x.dtype), "totalWeightOut": same(_reduced(call, "totalWeightOut"), x.dtype)}

    return infer


_X = tensor("self", FLOATS)
_TARGET = tensor("target", NLL_TARGETS, index_of=IndexOf("self", axis=1))
_W = tensor("weight", FLOATS)
_R = int_attr("reduction", choices=(NONE, MEAN, SUM))
_IGNORE = int_attr("ignoreIndex")
_NLL_FWD = (_X, _TARGET, _W, _R, _IGNORE, out("out", FLOATS), out("totalWeightOut", FLOATS))


def _nll_bwd(total_c_type: str) -> tuple[Param, ...]:
    total = tensor("totalWeight", FLOATS, c_type=total_c_type)
    return (tensor("gradOutput", FLOATS), _X, _TARGET, _W, _R, _IGNORE, total, out("out", FLOATS))


NLL_ROWS: tuple[NllRow, ...] = (
    NllRow("NLLLoss", _NLL_FWD, (1, 2), False),
    NllRow("NLLLossBackward", _nll_bwd("const aclTensor*"), (1, 2), True),
    NllRow("NLLLoss2d", _NLL_FWD, (4,), False),
    NllRow("NLLLoss2dBackward", _nll_bwd("aclTensor*"), (4,), True),
)
"""The NLL ops: [N, C] (or one [C] sample) and [N, C, H, W] inputs, forward and backward."""


# ----------------------------------------------------------------------------- samples
def _targets(
    rng: np.random.Generator, shape: tuple[int, ...], classes: int, dtype: D, ignore: int, ignored: bool
) -> np.ndarray:
    """Class indices in [0, C); with ``ignored``, about a quarter set to ``ignore``."""
    t = rng.integers(0, classes, size=shape)
    if ignored and t.size and (dtype != D.ACL_UINT8 or 0 <= ignore < 256):
        t = np.where(rng.random(shape) < 0.25, ignore, t)
    return np.asarray(t).astype(dtype.numpy)


def _nll_shapes(row: NllRow) -> tuple[tuple[int, ...], ...]:
    if 4 in row.ranks:
        return ((2, 5, 3, 4), (1, 3, 1, 1), (0, 4, 2, 2), (3, 7, 33, 2))
    return ((4, 6), (5,), (0, 3), (33, 300), (1, 1))


def _nll_samples(row: NllRow) -> Callable[[np.random.Generator], Iterable[Sample]]:
    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        k = 0
        for dt in (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16):
            for shape in _nll_shapes(row):
                for reduction in (NONE, MEAN, SUM):
                    k += 1
                    tdt = (D.ACL_INT64, D.ACL_INT32, D.ACL_UINT8)[k % 3] if k > 3 else D.ACL_INT64
                    ignore = (-100, 1, 0)[k % 3]
                    classes = shape[0] if len(shape) == 1 else shape[1]
                    per_sample = shape[:1] + shape[2:] if len(shape) > 1 else ()
                    args: dict[str, object] = {
                        "self": S.array(rng, shape, dt, low=-5.0, high=1.0),
                        "target": _targets(rng, per_sample, classes, tdt, ignore, k % 2 == 0),
                        "weight": S.array(rng, (classes,), dt, low=0.1, high=2.0),
                        "reduction": reduction,
                        "ignoreIndex": ignore,
                    }
                    if row.backward:
                        gshape = per_sample if reduction == NONE and len(shape) > 1 else ()
                        args["gradOutput"] = S.array(rng, gshape, dt, low=-2.0, high=2.0)
                        args["totalWeight"] = np.asarray(rng.uniform(0.5, 4.0), dtype=dt.numpy)
                    yield Sample(args, f"{dt.short} {list(shape)} reduction {reduction} ignore {ignore}")
        if not row.backward:  # every sample ignored: the mean is 0/0
            shape = _nll_shapes(row)[0]
            per_sample = shape[:1] + shape[2:]
            args = {
                "self": S.array(rng, shape, D.ACL_FLOAT),
                "target": np.full(per_sample, -100, np.int64),
                "weight": S.array(rng, (shape[1],), D.ACL_FLOAT, low=0.1, high=2.0),
                "reduction": MEAN,
                "ignoreIndex": -100,
            }
            yield Sample(args, "every sample ignored, mean (NaN)")

    return gen


def _nll_errors(row: NllRow) -> Callable[[np.random.Generator], Iterable[ErrorSample]]:
    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        shape = _nll_shapes(row)[0]
        per_sample = shape[:1] + shape[2:]
        base: dict[str, object] = {
            "self": S.array(rng, shape, D.ACL_FLOAT),
            "target": _targets(rng, per_sample, shape[1], D.ACL_INT64, -100, False),
            "weight": S.array(rng, (shape[1],), D.ACL_FLOAT),
            "reduction": MEAN,
            "ignoreIndex": -100,
        }
        if row.backward:
            base["gradOutput"] = np.asarray(1.0, np.float32)
            base["totalWeight"] = np.asarray(2.0, np.float32)
        yield ErrorSample({**base, "weight": S.array(rng, (shape[1] + 1,), D.ACL_FLOAT)}, INVALID, "weight not [C]")
        yield ErrorSample({**base, "weight": S.array(rng, (shape[1],), D.ACL_FLOAT16)}, INVALID, "weight dtype")
        yield ErrorSample({**base, "target": np.zeros(shape, np.int64)}, INVALID, "target of self's shape")
        yield ErrorSample({**base, "reduction": 3}, INVALID, "reduction 3")
        yield ErrorSample({**base, "self": S.array(rng, (2, 3, 4), D.ACL_FLOAT)}, INVALID, "rank-3 self")
        if row.backward:
            yield ErrorSample({**base, "totalWeight": np.ones(2, np.float32)}, INVALID, "totalWeight of two values")
            yield ErrorSample(
                {**base, "reduction": NONE, "gradOutput": np.ones((1,) * len(per_sample), np.float32)},
                INVALID,
                "reduction none with a one-value gradOutput",
            )
        else:
            yield ErrorSample({**base, "out": np.zeros(per_sample, np.float32)}, INVALID, "mean into a per-sample out")

    return errors


# ----------------------------------------------------------------------------- accuracy
def _w(args: Args, name: str) -> np.ndarray:
    return np.asarray(args[name]).astype(np.float64)


def _moved(x: np.ndarray) -> np.ndarray:
    """``x`` with the class axis last ([C] stays, [N, C, ...] → [N, ..., C])."""
    return x if x.ndim == 1 else np.moveaxis(x, 1, -1)


def _picked(args: Args, values: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(|w_n·values[n, t_n]|, w_n) per sample, 0 for ignored ones (targets out of range read class 0)."""
    t = np.asarray(args["target"]).astype(np.int64)
    keep = t != int(args.get("ignoreIndex", -100))
    c = values.shape[-1]
    safe = np.where(keep & (t >= 0) & (t < c), t, 0)
    w = np.where(keep, weight[safe], 0.0)
    v = np.take_along_axis(values, safe[..., None], axis=-1)[..., 0]
    return np.abs(w * v), w


def _reduce_scale(terms: np.ndarray, w: np.ndarray, reduction: int) -> np.ndarray:
    if reduction == NONE:
        return terms
    total = np.sum(terms)
    return np.asarray(total / abs(np.sum(w)) if reduction == MEAN else total)


def _nll_scale(args: Args, outputs: Args) -> dict[str, Any]:
    with np.errstate(all="ignore"):
        x = _moved(_w(args, "self"))
        terms, w = _picked(args, x, _w(args, "weight"))
        loss = _reduce_scale(terms, w, int(args["reduction"]))
        scales = {"out": loss, "totalWeightOut": np.abs(np.sum(w))}
        if "gradOutput" in args:
            scales = {"out": np.abs(np.asarray(outputs["out"]).astype(np.float64))}
    return {k: np.broadcast_to(v, np.shape(outputs[k])) for k, v in scales.items() if k in outputs}


def _samples_count(args: Args, outputs: Args) -> int:
    return max(int(np.asarray(args["target"]).size), 1)


_NLL_ACCURACY = composite(
    steps=3,
    length_of=_samples_count,
    scale_of=_nll_scale,
    reason="products w·x in double, the terms and the total weight summed in at least float32, one division",
)


# ----------------------------------------------------------------------------- cross entropy
def _reduction_of(call: Call, name: str = "reductionOptional") -> int:
    value = call.args.get(name)
    text = "mean" if value is None else str(value)
    if text not in REDUCTION_NAMES:
        raise _tiling(f"{name} is {text!r}; it must be one of mean, sum, none")
    return REDUCTION_NAMES[text]


def _smoothing(call: Call) -> None:
    eps = float(call.args["labelSmoothing"])
    if not 0.0 <= eps <= 1.0:
        raise _tiling(f"labelSmoothing is {eps}; it must lie in [0, 1]")


def _no_zloss(call: Call, names: Iterable[str]) -> None:
    if float(call.args["lseSquareScaleForZloss"]) != 0.0 or call.args.get("returnZloss"):
        raise invalid("the zloss mode is not supported (CANN's page marks it unsupported: no result to match)")
    for name in names:
        if _opt(call, name) is not None:
            raise invalid(f"{name} belongs to the zloss mode, which is not supported")


def _rows(x: AclTensor, target: AclTensor, weight: AclTensor | None, xname: str) -> tuple[int, int]:
    if x.rank != 2 or x.view_dims[1] < 1:
        raise _tiling(f"{xname} has shape {list(x.view_dims)}; it must be [N, C] with C > 0")
    n, c = x.view_dims
    if tuple(target.view_dims) != (n,):
        raise _tiling(f"target has shape {list(target.view_dims)}; it must be [{n}]")
    if weight is not None and tuple(weight.view_dims) != (c,):
        raise _tiling(f"weightOptional has shape {list(weight.view_dims)}; it must be [{c}]")
    return n, c


def _ce_infer(call: Call) -> Infos:
    x, target = tensor_arg(call, "input"), tensor_arg(call, "target")
    n, c = _rows(x, target, _opt(call, "weightOptional"), "input")
    reduction = _reduction_of(call)
    _smoothing(call)
    _no_zloss(call, ())
    call.plan["reduction"] = reduction
    call.plan["classes"] = c
    loss = (n,) if reduction == NONE else _reduced(call, "lossOut")
    return {
        "lossOut": same(loss, x.dtype),
        "logProbOut": same((n, c), x.dtype),
        "zlossOut": same(loss, x.dtype),
        "lseForZlossOut": same((n,), x.dtype),
    }


def _ce_grad_infer(call: Call) -> Infos:
    g, lp, target = tensor_arg(call, "gradLoss"), tensor_arg(call, "logProb"), tensor_arg(call, "target")
    n, c = _rows(lp, target, _opt(call, "weightOptional"), "logProb")
    reduction = _reduction_of(call)
    _smoothing(call)
    _no_zloss(call, ("gradZlossOptional", "lseForZlossOptional"))
    if g.dtype != lp.dtype:
        raise invalid(f"gradLoss has dtype {g.dtype.short}; it must equal logProb's {lp.dtype.short}")
    if reduction == NONE and tuple(g.view_dims) != (n,):
        raise invalid(f"gradLoss has shape {list(g.view_dims)}; reduction none needs [{n}]")
    if reduction != NONE:
        _check_one(call, "gradLoss")
    call.plan["reduction"] = reduction
    call.plan["classes"] = c
    return {"out": same((n, c), lp.dtype)}


def _ce_terms(args: Args, lp: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(|terms| bound per sample, w_n) of the smoothed loss over log-probabilities ``lp``."""
    eps = float(args.get("labelSmoothing", 0.0))
    picked, w = _picked(args, lp, weight)
    keep = np.asarray(args["target"]).astype(np.int64) != int(args.get("ignoreIndex", -100))
    smooth = np.where(keep, np.sum(np.abs(weight * lp), axis=-1), 0.0)
    return (1.0 - eps) * picked + eps / lp.shape[-1] * smooth, w


def _weight_or_ones(args: Args, c: int) -> np.ndarray:
    w = args.get("weightOptional")
    return np.ones(c) if w is None else np.asarray(w).astype(np.float64)


def _ce_reduction(args: Args) -> int:
    value = args.get("reductionOptional")
    return REDUCTION_NAMES["mean" if value is None else str(value)]


def _ce_scale(args: Args, outputs: Args) -> dict[str, Any]:
    with np.errstate(all="ignore"):
        x = _w(args, "input")
        top = np.max(x, axis=-1, keepdims=True) if x.size else x
        lse = (top + np.log(np.sum(np.exp(x - top), axis=-1, keepdims=True))) if x.size else x
        lp = x - lse
        terms, w = _ce_terms(args, lp, _weight_or_ones(args, x.shape[-1]))
        scales = {
            "lossOut": _reduce_scale(terms, w, _ce_reduction(args)),
            "logProbOut": np.abs(x) + np.abs(lse),
            "zlossOut": np.zeros(()),
            "lseForZlossOut": np.zeros(()),
        }
    return {k: np.broadcast_to(v, np.shape(outputs[k])) for k, v in scales.items() if k in outputs}


def _ce_grad_scale(args: Args, outputs: Args) -> dict[str, Any]:
    with np.errstate(all="ignore"):
        lp = _w(args, "logProb")
        c = lp.shape[-1]
        weight = _weight_or_ones(args, c)
        eps = float(args.get("labelSmoothing", 0.0))
        t = np.asarray(args["target"]).astype(np.int64)
        keep = t != int(args.get("ignoreIndex", -100))
        _, w = _picked(args, lp, weight)
        g = np.abs(_w(args, "gradLoss")) * np.ones(t.shape)
        if _ce_reduction(args) == MEAN:
            g = g / abs(np.sum(w))
        g = np.where(keep, g, 0.0)
        a = (1.0 - eps) * np.abs(w)
        b = eps / c * np.sum(np.abs(weight))
        p = np.exp(lp)
        scale = g[:, None] * (p * (a + b)[..., None] + a[:, None] + eps / c * np.abs(weight)[None, :])
    return {"out": np.broadcast_to(scale, np.shape(outputs["out"]))}


def _classes_of_features(args: Args, outputs: Args) -> int:
    return int(np.shape(args["features"])[-1]) if np.ndim(args["features"]) == 2 else 1


def _classes(args: Args, outputs: Args) -> int:
    x = args.get("input", args.get("logProb"))
    return int(np.shape(x)[-1]) + int(np.shape(x)[0]) if np.ndim(x) == 2 else 1


_CE_ACCURACY = composite(
    steps=6,
    length_of=_classes,
    scale_of=_ce_scale,
    reason="logsumexp along the class axis in at least float32 (exp, log within a few ulps), the smoothed terms "
    "summed over the samples, one division by the total weight",
)
_CE_GRAD_ACCURACY = composite(
    steps=5,
    length_of=_classes,
    scale_of=_ce_grad_scale,
    reason="exp(logProb) times the sample's scale, less the target's and the smoothing's share: the terms cancel "
    "at the target class, bounded by their magnitudes",
)

_REDUCTION_STR = string_attr("reductionOptional", optional=True)
_CE_PARAMS = (
    tensor("input", FLOATS),
    tensor("target", INDEX, index_of=IndexOf("input", axis=1)),
    tensor("weightOptional", {D.ACL_FLOAT}, optional=True),
    _REDUCTION_STR,
    _IGNORE,
    float_attr("labelSmoothing"),
    float_attr("lseSquareScaleForZloss"),
    bool_attr("returnZloss"),
    out("lossOut", FLOATS, c_type="const aclTensor*"),
    out("logProbOut", FLOATS, c_type="const aclTensor*"),
    out("zlossOut", FLOATS, c_type="const aclTensor*"),
    out("lseForZlossOut", FLOATS, c_type="const aclTensor*"),
)
_CE_GRAD_PARAMS = (
    tensor("gradLoss", FLOATS),
    tensor("logProb", FLOATS),
    tensor("target", {D.ACL_INT64}, index_of=IndexOf("logProb", axis=1)),
    tensor("weightOptional", {D.ACL_FLOAT}, optional=True),
    tensor("gradZlossOptional", FLOATS, optional=True),
    tensor("lseForZlossOptional", FLOATS, optional=True),
    _REDUCTION_STR,
    _IGNORE,
    float_attr("labelSmoothing"),
    float_attr("lseSquareScaleForZloss"),
    out("out", FLOATS, c_type="const aclTensor*"),
)

_CE_SHAPES = ((4, 7), (3, 1), (0, 5), (5, 300), (2, 1025))
_SETTINGS = (("mean", -100, 0.0), ("sum", 2, 0.1), ("none", 0, 0.0), (None, -100, 0.3), ("none", 1, 1.0))
"""(reductionOptional, ignoreIndex, labelSmoothing) the samples rotate through."""


def _logits_of(rng: np.random.Generator, shape: tuple[int, ...], dt: D, k: int) -> np.ndarray:
    x = S.array(rng, shape, dt, low=-6.0, high=6.0)
    if k % 4 == 3 and x.size:  # large logits: the max subtraction must keep exp finite
        x = (x.astype(np.float64) * 1000.0).astype(dt.numpy)
    return x


def _ce_samples(backward: bool) -> Callable[[np.random.Generator], Iterable[Sample]]:
    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        k = 0
        for dt in (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16):
            for shape in _CE_SHAPES:
                for reduction, ignore, eps in _SETTINGS:
                    k += 1
                    n, c = shape
                    tdt = D.ACL_INT64 if backward or k % 2 else D.ACL_INT32
                    args: dict[str, object] = {
                        "target": _targets(rng, (n,), c, tdt, ignore, k % 3 == 0),
                        "weightOptional": S.array(rng, (c,), D.ACL_FLOAT, low=0.1, high=2.0) if k % 2 else None,
                        "reductionOptional": reduction,
                        "ignoreIndex": ignore,
                        "labelSmoothing": eps,
                        "lseSquareScaleForZloss": 0.0,
                    }
                    x = _logits_of(rng, shape, dt, k)
                    if backward:
                        lp = _log_softmax(x.astype(np.float64))
                        args["logProb"] = lp.astype(dt.numpy)
                        args["gradLoss"] = S.array(rng, (n,) if reduction == "none" else (), dt, low=-2.0, high=2.0)
                    else:
                        args.update(input=x, returnZloss=False)
                    yield Sample(args, f"{dt.short} {list(shape)} {reduction} ignore {ignore} smoothing {eps}")
        if backward:  # every sample ignored under a mean: the total weight is 0, the gradient 0 (not 0/0)
            x = _logits_of(rng, (3, 1025), D.ACL_FLOAT, 0)
            args = {
                "target": np.full(3, -100, np.int64),
                "weightOptional": S.array(rng, (1025,), D.ACL_FLOAT, low=0.1, high=2.0),
                "reductionOptional": "mean",
                "ignoreIndex": -100,
                "labelSmoothing": 0.1,
                "lseSquareScaleForZloss": 0.0,
                "logProb": _log_softmax(x.astype(np.float64)).astype(np.float32),
                "gradLoss": S.array(rng, (), D.ACL_FLOAT, low=-2.0, high=2.0),
            }
            yield Sample(args, "every sample ignored, mean (a zero gradient)")

    return gen


def _log_softmax(x: np.ndarray) -> np.ndarray:
    if x.size == 0:
        return x
    top = np.max(x, axis=-1, keepdims=True)
    return x - top - np.log(np.sum(np.exp(x - top), axis=-1, keepdims=True))


def _ce_errors(backward: bool) -> Callable[[np.random.Generator], Iterable[ErrorSample]]:
    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        base: dict[str, object] = {
            "target": np.array([0, 2, 1], np.int64),
            "weightOptional": None,
            "reductionOptional": "mean",
            "ignoreIndex": -100,
            "labelSmoothing": 0.0,
            "lseSquareScaleForZloss": 0.0,
        }
        x = S.array(rng, (3, 4), D.ACL_FLOAT)
        name = "logProb" if backward else "input"
        if backward:
            base.update(logProb=x, gradLoss=np.asarray(1.0, np.float32))
        else:
            base.update(input=x, returnZloss=False)
        yield ErrorSample({**base, "reductionOptional": "batchmean"}, TILING, "reduction 'batchmean'")
        yield ErrorSample({**base, "labelSmoothing": 1.5}, TILING, "labelSmoothing 1.5")
        yield ErrorSample({**base, "lseSquareScaleForZloss": 0.1}, INVALID, "zloss scale 0.1 (zloss refused)")
        yield ErrorSample({**base, "target": np.zeros(4, np.int64)}, TILING, "target of 4 samples for 3")
        yield ErrorSample({**base, name: S.array(rng, (3, 4, 2), D.ACL_FLOAT)}, TILING, f"rank-3 {name}")
        yield ErrorSample({**base, "weightOptional": np.ones(5, np.float32)}, TILING, "weight of 5 classes for 4")
        if backward:
            yield ErrorSample(
                {**base, "gradZlossOptional": np.asarray(1.0, np.float32)}, INVALID, "gradZlossOptional (zloss)"
            )
            yield ErrorSample(
                {**base, "gradLoss": np.asarray(1.0, np.float16)}, INVALID, "gradLoss dtype differs from logProb's"
            )
            yield ErrorSample({**base, "reductionOptional": "none"}, INVALID, "reduction none with a 0-d gradLoss")
        else:
            yield ErrorSample({**base, "returnZloss": True}, INVALID, "returnZloss (zloss refused)")

    return errors


def _spec(name: str, params: tuple[Param, ...], infer: Callable[[Call], Infos], *rest: Any) -> OpSpec:
    samples, errors, accuracy, summary = rest
    return OpSpec(
        name,
        FAMILY,
        params,
        infer,
        samples=samples,
        error_samples=errors,
        accuracy=accuracy,
        summary=summary,
    )


def _nll_accuracy(row: NllRow) -> Accuracy:
    return _NLL_ACCURACY


def _xent_infer(call: Call) -> Infos:
    x, y = tensor_arg(call, "features"), tensor_arg(call, "labels")
    if x.rank != 2:
        raise invalid(f"features has shape {list(x.view_dims)}; it must be [N, C]")
    if tuple(y.view_dims) != tuple(x.view_dims) or y.dtype != x.dtype:
        raise invalid(
            f"labels ({y.dtype.short} {list(y.view_dims)}) must match features ({x.dtype.short} {list(x.view_dims)})"
        )
    return {"loss": same(x.view_dims[:1], x.dtype), "backprop": same(x.view_dims, x.dtype)}


def _xent_samples(rng: np.random.Generator) -> Iterable[Sample]:
    for dt in (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16):
        for k, shape in enumerate(_CE_SHAPES):
            x = _logits_of(rng, shape, dt, k)
            y = rng.random(shape)
            if k % 2 == 0 and y.size:  # rows that are distributions, and rows that are not
                y = y / np.sum(y, axis=-1, keepdims=True)
            yield Sample({"features": x, "labels": y.astype(dt.numpy)}, f"{dt.short} {list(shape)}")


def _xent_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    x = S.array(rng, (3, 4), D.ACL_FLOAT)
    yield ErrorSample({"features": x, "labels": S.array(rng, (3, 5), D.ACL_FLOAT)}, INVALID, "labels of another shape")
    yield ErrorSample({"features": x, "labels": S.array(rng, (3, 4), D.ACL_FLOAT16)}, INVALID, "labels dtype")
    yield ErrorSample(
        {"features": S.array(rng, (4,), D.ACL_FLOAT), "labels": S.array(rng, (4,), D.ACL_FLOAT)},
        INVALID,
        "1-d features",
    )


def _xent_scale(args: Args, outputs: Args) -> dict[str, Any]:
    with np.errstate(all="ignore"):
        x, y = _w(args, "features"), _w(args, "labels")
        lp = _log_softmax(x)
        scales = {
            "loss": np.sum(np.abs(y) * (np.abs(x) + np.abs(x - lp)), axis=-1) if x.size else np.zeros(x.shape[:1]),
            "backprop": np.exp(lp) + np.abs(y),
        }
    return {k: np.broadcast_to(v, np.shape(outputs[k])) for k, v in scales.items() if k in outputs}


_XENT_ACCURACY = composite(
    steps=6,
    length_of=_classes_of_features,
    scale_of=_xent_scale,
    reason="logsumexp along the row in at least float32; the loss sums y·log p over the row (terms of either sign)",
)
_XENT_PARAMS = (
    tensor("features", FLOATS),
    tensor("labels", FLOATS, c_type="aclTensor*"),
    out("loss", FLOATS),
    out("backprop", FLOATS),
)

SPECS: list[OpSpec] = [
    *(
        _spec(
            r.name,
            r.params,
            _nll_infer(r),
            _nll_samples(r),
            _nll_errors(r),
            _nll_accuracy(r),
            f"negative log likelihood {'gradient' if r.backward else 'loss'}",
        )
        for r in NLL_ROWS
    ),
    _spec(
        "CrossEntropyLoss",
        _CE_PARAMS,
        _ce_infer,
        _ce_samples(False),
        _ce_errors(False),
        _CE_ACCURACY,
        "cross entropy over class indices",
    ),
    _spec(
        "CrossEntropyLossGrad",
        _CE_GRAD_PARAMS,
        _ce_grad_infer,
        _ce_samples(True),
        _ce_errors(True),
        _CE_GRAD_ACCURACY,
        "cross entropy gradient",
    ),
    _spec(
        "SoftmaxCrossEntropyWithLogits",
        _XENT_PARAMS,
        _xent_infer,
        _xent_samples,
        _xent_errors,
        _XENT_ACCURACY,
        "softmax cross entropy over probability labels, with its gradient",
    ),
]

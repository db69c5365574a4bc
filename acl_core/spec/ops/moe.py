"""Mixture-of-experts routing: MoeGatingTopKSoftmax, MoeInitRouting, MoeFinalizeRouting.

The three operators form one pipeline. With ``numRows`` tokens, ``E`` experts and ``k`` experts per token:

* MoeGatingTopKSoftmax: softmax of ``x`` over its last axis (the experts), then the ``k`` largest
  probabilities per row in descending order (``yOut``), their expert numbers (``expertIdxOut``) and
  ``rowIdxOut[i][j] = j * numRows + i`` (rows of a 3-D ``x`` are flattened first). A row whose
  ``finishedOptional`` entry is true still gets its probabilities, but every expert number becomes
  ``E``. Experts are ranked by the exact probabilities, that is by ``x`` itself (softmax is strictly
  increasing), so the order never hangs on how a backend rounds ``exp``; equal logits go to the lower
  expert, and a row whose probabilities are NaN (a NaN or +Inf logit, or all -Inf) keeps expert order
  (the reference's choices: CANN does not document ties, so the fixed samples avoid them).
* MoeInitRouting: the flattened ``expertIdx`` is sorted stably, carrying ``rowIdx`` along (equal
  experts keep their row-major order, as AscendC's Sort32 orders equal keys by input position).
  ``expandedExpertIdxOut`` is the sorted experts, ``expandedRowIdxOut[sortedRowIdx[p]] = p``, and
  ``expandedXOut[p] = x[sortedRowIdx[p] % numRows]`` for the first ``min(numRows, activeNum) * k``
  positions. ``rowIdx`` must be a permutation of ``0 .. numRows*k - 1`` (as MoeGatingTopKSoftmax makes
  it); it lives in device memory, so this is checked when the operator runs (161002).
* MoeFinalizeRouting: ``out[i] = x1[i] + x2Optional[i] + Σ_k scales[i, k] * (expandedX[expandedRowIdx[i +
  k * numRows]] + bias[expandedExpertIdx[i, k]])``. Index values out of range are refused when the
  operator runs (161002).

Error codes follow the CANN documents: dtype and format problems are 161002; MoeGatingTopKSoftmax's
and MoeInitRouting's shape and attribute problems (k out of range, shapes that disagree, activeNum < 0,
outputs of the wrong shape) are ACLNN_ERR_INNER_TILING_ERROR 561002; MoeFinalizeRouting reports its
shape problems as 161002.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.errors import AclnnError, AclnnStatus
from acl_core.spec import samples as S
from acl_core.spec.accuracy import Accuracy, composite, exact, last_dim, reduction, top_k_softmax_scale, with_accuracy
from acl_core.spec.opspec import (
    INVALID,
    TILING,
    Call,
    ErrorSample,
    IndexOf,
    Infos,
    OpSpec,
    Sample,
    int_attr,
    invalid,
    out,
    tensor,
)
from acl_core.spec.rules import FLOATS, same, tensor_arg
from acl_core.tensor import AclTensor

FAMILY = "moe"
MAX_K = 1024
Shape = tuple[int, ...]
I32 = frozenset({D.ACL_INT32})
_DTYPES = (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16)


def tiling_error(message: str) -> AclnnError:
    """A 561002 error (ACLNN_ERR_INNER_TILING_ERROR), which these ops document for shape problems."""
    return AclnnError(AclnnStatus.ACLNN_ERR_INNER_TILING_ERROR, message)


def _check_given_out(call: Call, name: str, shape: Shape) -> None:
    """A caller's output of another shape is a tiling error here (checked before the generic 161002)."""
    t = call.args.get(name)
    if isinstance(t, AclTensor) and tuple(t.shape) != shape:
        raise tiling_error(f"{name} has shape {list(t.shape)}; expected {list(shape)}")


def distinct_logits(rng: np.random.Generator, rows: int, experts: int) -> np.ndarray:
    """Rows of distinct gate values exactly representable in bf16/fp16 (no ties, so top-k is unique)."""
    steps = np.arange(experts, dtype=np.float64) * 0.25 - experts / 8
    return np.stack([rng.permutation(steps) for _ in range(rows)]) if rows else np.zeros((0, experts))


def routing_indices(rng: np.random.Generator, rows: int, experts: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(expertIdx, rowIdx) as MoeGatingTopKSoftmax makes them: k distinct experts per row, j*rows + i."""
    expert = np.array([rng.choice(experts, size=k, replace=False) for _ in range(rows)], np.int32).reshape(rows, k)
    row = (np.arange(k, dtype=np.int32)[None, :] * rows + np.arange(rows, dtype=np.int32)[:, None]).astype(np.int32)
    return expert, row


# ----------------------------------------------------------------------------- MoeGatingTopKSoftmax
def _gating_infer(call: Call) -> Infos:
    x = tensor_arg(call, "x")
    k = int(call.args["k"])
    experts = x.shape[-1]
    finished = call.args.get("finishedOptional")
    if isinstance(finished, AclTensor) and tuple(finished.shape) != tuple(x.shape[:-1]):
        raise tiling_error(f"finishedOptional has shape {list(finished.shape)}; expected x's {list(x.shape[:-1])}")
    if not 0 <= k <= experts:
        raise tiling_error(f"k={k} must lie in [0, {experts}] (the size of x's last axis)")
    if k > MAX_K:
        raise tiling_error(f"k={k} exceeds the maximum of {MAX_K}")
    shape = (*x.shape[:-1], k)
    return {
        "yOut": same(shape, x.dtype),
        "expertIdxOut": same(shape, D.ACL_INT32),
        "rowIdxOut": same(shape, D.ACL_INT32),
    }


def _gating_samples(rng: np.random.Generator) -> Iterable[Sample]:
    for dt in _DTYPES:
        x = distinct_logits(rng, 5, 8).astype(dt.numpy)
        yield Sample({"x": x, "k": 2}, f"{dt.short} [5, 8] k=2")
        yield Sample({"x": x, "k": 2, "finishedOptional": rng.random(5) < 0.5}, f"{dt.short} with finished rows")
    x3 = distinct_logits(rng, 6, 16).reshape(2, 3, 16).astype(np.float32)
    yield Sample({"x": x3, "k": 4}, "3-D x")
    yield Sample({"x": x3, "k": 3, "finishedOptional": rng.random((2, 3)) < 0.5}, "3-D x with finished rows")
    yield Sample({"x": distinct_logits(rng, 3, 4).astype(np.float32), "k": 4}, "k = E")
    yield Sample({"x": distinct_logits(rng, 3, 4).astype(np.float32), "k": 0}, "k = 0")
    yield Sample({"x": np.zeros((0, 8), np.float32), "k": 2}, "no rows")


def _gating_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    x = distinct_logits(rng, 4, 8).astype(np.float32)
    yield ErrorSample({"x": x, "k": 9}, TILING, "k larger than the number of experts")
    yield ErrorSample({"x": x, "k": -1}, TILING, "negative k")
    yield ErrorSample({"x": np.zeros((1, MAX_K + 1), np.float32), "k": MAX_K + 1}, TILING, "k above 1024")
    yield ErrorSample({"x": x, "k": 2, "finishedOptional": np.zeros(3, bool)}, TILING, "finished of the wrong shape")
    yield ErrorSample({"x": x.astype(np.int32), "k": 2}, INVALID, "int32 x")
    yield ErrorSample({"x": x, "k": 2, "finishedOptional": np.zeros(4, np.int32)}, INVALID, "int32 finished")
    yield ErrorSample({"x": x.reshape(1, 1, 4, 8), "k": 2}, INVALID, "4-D x")
    yield ErrorSample({"x": x, "k": 2, "expertIdxOut": np.zeros((4, 2), np.int64)}, INVALID, "int64 expertIdxOut")


_MoeGatingTopKSoftmax = OpSpec(
    "MoeGatingTopKSoftmax",
    FAMILY,
    (
        tensor("x", FLOATS, min_rank=2, max_rank=3),
        tensor("finishedOptional", {D.ACL_BOOL}, optional=True, min_rank=1, max_rank=2),
        int_attr("k"),
        out("yOut", FLOATS, max_rank=3),
        out("expertIdxOut", I32, max_rank=3),
        out("rowIdxOut", I32, max_rank=3),
    ),
    _gating_infer,
    samples=_gating_samples,
    error_samples=_gating_errors,
    summary="softmax over experts, then top-k values, expert numbers and row indices",
)


# ----------------------------------------------------------------------------- MoeInitRouting
def _init_infer(call: Call) -> Infos:
    x, row, expert = (tensor_arg(call, n) for n in ("x", "rowIdx", "expertIdx"))
    if x.rank != 2:
        raise tiling_error(f"x must be 2-D (NUM_ROWS, H), not {list(x.shape)}")
    if expert.rank != 2 or expert.shape[0] != x.shape[0]:
        raise tiling_error(f"expertIdx must be (NUM_ROWS={x.shape[0]}, K), not {list(expert.shape)}")
    if tuple(row.shape) != tuple(expert.shape):
        raise tiling_error(f"rowIdx has shape {list(row.shape)}; expertIdx has {list(expert.shape)}")
    active = int(call.args["activeNum"])
    if active < 0:
        raise tiling_error(f"activeNum={active} must not be negative")
    rows, k = expert.shape
    expanded = (min(rows, active) * k, x.shape[1])
    flat = (rows * k,)
    for name, shape in (("expandedXOut", expanded), ("expandedRowIdxOut", flat), ("expandedExpertIdxOut", flat)):
        _check_given_out(call, name, shape)
    return {
        "expandedXOut": same(expanded, x.dtype),
        "expandedRowIdxOut": same(flat, D.ACL_INT32),
        "expandedExpertIdxOut": same(flat, D.ACL_INT32),
    }


def _init_samples(rng: np.random.Generator) -> Iterable[Sample]:
    for dt in _DTYPES:
        expert, row = routing_indices(rng, 6, 4, 2)
        x = S.array(rng, (6, 5), dt)
        yield Sample({"x": x, "rowIdx": row, "expertIdx": expert, "activeNum": 6}, f"{dt.short} all rows active")
    expert, row = routing_indices(rng, 7, 8, 3)
    x = S.array(rng, (7, 4), D.ACL_FLOAT)
    for active in (3, 0, 100):
        yield Sample({"x": x, "rowIdx": row, "expertIdx": expert, "activeNum": active}, f"activeNum={active}")
    expert, row = routing_indices(rng, 5, 2, 1)
    yield Sample({"x": S.array(rng, (5, 3), D.ACL_FLOAT16), "rowIdx": row, "expertIdx": expert, "activeNum": 5}, "k=1")
    empty = np.zeros((0, 2), np.int32)
    yield Sample({"x": np.zeros((0, 4), np.float32), "rowIdx": empty, "expertIdx": empty, "activeNum": 4}, "no rows")


def _init_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    expert, row = routing_indices(rng, 4, 6, 2)
    base = {"x": S.array(rng, (4, 3), D.ACL_FLOAT), "rowIdx": row, "expertIdx": expert, "activeNum": 4}
    yield ErrorSample({**base, "activeNum": -1}, TILING, "negative activeNum")
    yield ErrorSample({**base, "rowIdx": row[:, :1].copy()}, TILING, "rowIdx and expertIdx shapes differ")
    yield ErrorSample({**base, "x": S.array(rng, (4, 3, 1), D.ACL_FLOAT)}, TILING, "3-D x")
    yield ErrorSample({**base, "x": S.array(rng, (5, 3), D.ACL_FLOAT)}, TILING, "x and expertIdx rows differ")
    yield ErrorSample({**base, "expandedXOut": np.zeros((4, 3), np.float32)}, TILING, "expandedXOut of the wrong shape")
    yield ErrorSample({**base, "expertIdx": expert.astype(np.int64)}, INVALID, "int64 expertIdx")
    yield ErrorSample({**base, "x": S.array(rng, (4, 3), D.ACL_INT32)}, INVALID, "int32 x")


_MoeInitRouting = OpSpec(
    "MoeInitRouting",
    FAMILY,
    (
        tensor("x", FLOATS),
        tensor("rowIdx", I32),
        tensor("expertIdx", I32),
        int_attr("activeNum"),
        out("expandedXOut", FLOATS),
        out("expandedRowIdxOut", I32),
        out("expandedExpertIdxOut", I32),
    ),
    _init_infer,
    samples=_init_samples,
    error_samples=_init_errors,
    summary="sort token copies by expert and gather their features",
)


# ----------------------------------------------------------------------------- MoeFinalizeRouting
def _expect(t: AclTensor, name: str, shape: Sequence[int], dtype: D | None = None) -> None:
    if tuple(t.shape) != tuple(shape):
        raise invalid(f"{name} has shape {list(t.shape)}; expected {list(shape)}")
    if dtype is not None and t.dtype != dtype:
        raise invalid(f"{name} has dtype {t.dtype.short}; expandedX has {dtype.short}")


def _finalize_infer(call: Call) -> Infos:
    ex, x1, bias, scales = (tensor_arg(call, n) for n in ("expandedX", "x1", "bias", "scales"))
    row, expert = tensor_arg(call, "expandedRowIdx"), tensor_arg(call, "expandedExpertIdx")
    for name, t in (("expandedX", ex), ("x1", x1), ("bias", bias), ("scales", scales), ("expandedExpertIdx", expert)):
        if t.rank != 2:
            raise invalid(f"{name} must be 2-D, not {list(t.shape)}")
    if row.rank != 1:
        raise invalid(f"expandedRowIdx must be 1-D, not {list(row.shape)}")
    rows, hidden = x1.shape
    k = scales.shape[1]
    _expect(x1, "x1", (rows, hidden), ex.dtype)
    x2 = call.args.get("x2Optional")
    if isinstance(x2, AclTensor):
        _expect(x2, "x2Optional", (rows, hidden), ex.dtype)
    _expect(scales, "scales", (rows, k), ex.dtype)
    _expect(ex, "expandedX", (rows * k, hidden))
    _expect(bias, "bias", (bias.shape[0], hidden), ex.dtype)
    _expect(row, "expandedRowIdx", (rows * k,))
    _expect(expert, "expandedExpertIdx", (rows, k))
    return {"out": same((rows, hidden), ex.dtype)}


def _finalize_args(rng: np.random.Generator, rows: int, k: int, hidden: int, experts: int, dt: D) -> dict[str, object]:
    expert, row = routing_indices(rng, rows, experts, k)
    flat = expert.reshape(-1)
    order = np.argsort(flat, kind="stable")
    expanded_row = np.empty(rows * k, np.int32)
    expanded_row[row.reshape(-1)[order]] = np.arange(rows * k, dtype=np.int32)
    return {
        "expandedX": S.array(rng, (rows * k, hidden), dt),
        "x1": S.array(rng, (rows, hidden), dt),
        "x2Optional": S.array(rng, (rows, hidden), dt),
        "bias": S.array(rng, (experts, hidden), dt),
        "scales": S.array(rng, (rows, k), dt, low=0, high=1),
        "expandedRowIdx": expanded_row,
        "expandedExpertIdx": expert,
    }


def _finalize_samples(rng: np.random.Generator) -> Iterable[Sample]:
    for dt in _DTYPES:
        yield Sample(_finalize_args(rng, 5, 2, 6, 4, dt), f"{dt.short} [5 rows, k=2, H=6, E=4]")
    args = _finalize_args(rng, 4, 3, 5, 6, D.ACL_FLOAT)
    yield Sample({**args, "x2Optional": None}, "without x2")
    yield Sample(_finalize_args(rng, 3, 1, 8, 2, D.ACL_FLOAT16), "k=1")
    yield Sample(_finalize_args(rng, 0, 2, 4, 3, D.ACL_FLOAT), "no rows")


def _finalize_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    args = _finalize_args(rng, 4, 2, 3, 5, D.ACL_FLOAT)
    yield ErrorSample({**args, "bias": S.array(rng, (5, 4), D.ACL_FLOAT)}, INVALID, "bias of another width")
    yield ErrorSample({**args, "scales": S.array(rng, (4, 3), D.ACL_FLOAT)}, INVALID, "scales with another k")
    yield ErrorSample({**args, "expandedX": S.array(rng, (7, 3), D.ACL_FLOAT)}, INVALID, "expandedX rows")
    yield ErrorSample({**args, "x1": S.array(rng, (4, 3), D.ACL_FLOAT16)}, INVALID, "x1 of another dtype")
    yield ErrorSample(
        {**args, "expandedRowIdx": np.asarray(args["expandedRowIdx"]).reshape(4, 2)}, INVALID, "2-D expandedRowIdx"
    )
    yield ErrorSample({**args, "expandedExpertIdx": np.zeros((4, 2), np.int64)}, INVALID, "int64 expandedExpertIdx")
    yield ErrorSample({**args, "bias": None}, 161001, "null bias")


_MoeFinalizeRouting = OpSpec(
    "MoeFinalizeRouting",
    FAMILY,
    (
        tensor("expandedX", FLOATS),
        tensor("x1", FLOATS),
        tensor("x2Optional", FLOATS, optional=True),
        tensor("bias", FLOATS),
        tensor("scales", FLOATS),
        tensor("expandedRowIdx", I32, index_of=IndexOf("expandedX")),
        tensor("expandedExpertIdx", I32, index_of=IndexOf("bias")),
        out("out", FLOATS),
    ),
    _finalize_infer,
    samples=_finalize_samples,
    error_samples=_finalize_errors,
    summary="combine the experts' outputs back into token order, weighted by scales",
)


def _finalize_length(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> int:
    """MoeFinalizeRouting's roundings per output: x1 + x2, then per expert a bias add, a product and a sum."""
    shape = getattr(args.get("scales"), "shape", ())
    return 3 * (int(shape[-1]) if shape else 1) + 2


ACCURACY: dict[str, Accuracy] = {
    # x - max, exp (2 ulp), the row sum over the experts, the division; top-k selects without rounding
    "MoeGatingTopKSoftmax": composite(
        steps=4, length_of=last_dim("x"), scale_of=top_k_softmax_scale("x", "yOut"), reason="a row softmax, then top-k"
    ),
    "MoeInitRouting": exact("routing: every expandedXOut element is a copy of an x element"),
    "MoeFinalizeRouting": reduction(
        length_of=_finalize_length,
        reason="x1 + x2 + Σ_k scales·(expandedX + bias): γ_n·(|x1| + |x2| + Σ|s|(|x| + |b|))",
    ),
}
"""Accuracy classes of the MoE pipeline."""

SPECS: list[OpSpec] = with_accuracy([_MoeGatingTopKSoftmax, _MoeInitRouting, _MoeFinalizeRouting], ACCURACY)

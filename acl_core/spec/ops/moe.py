"""Mixture-of-experts routing: MoeGatingTopKSoftmax, MoeGatingTopK(Backward), MoeInitRouting(V2, V3),
MoeFinalizeRouting, MoeTokenPermute and MoeTokenUnpermute, and the last two's backwards (MoeTokenPermuteGrad,
MoeTokenUnpermuteGrad).

The first operators form one pipeline. With ``numRows`` tokens, ``E`` experts and ``k`` experts per token:

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

* MoeGatingTopK (DeepSeek-style): ``normOut`` = softmax (normType 0) or sigmoid (1) of each row of
  ``x`` [rows, E]; ``value = normOut + bias`` (or ``normOut``); the E experts split into ``groupCount``
  groups scored by their best value (groupSelectMode 0) or the sum of their two best (1); the
  ``kGroup`` best groups stay, the others are masked to -Inf, and the ``k`` best experts are taken
  (``expertIdxOut``). ``yOut`` is ``normOut`` of those experts, divided by their sum + ``eps`` when
  normType is 1 or renorm is 1, times ``routedScalingFactor`` (both used as float32, as CANN's tiling
  keeps them); ``outOut`` is ``normOut`` (float32), written whatever ``outFlag`` says (CANN leaves it
  unspecified when false). Ranking keys, so no ulp of ``exp`` decides an order (the rule of
  MoeGatingTopKSoftmax): without a bias experts rank by the logits themselves (both normalisations are
  increasing) and groups in mode 0 by their largest logit; otherwise on quantities every backend
  computes bit for bit: ``normOut`` in float64 from ``ranking_exp`` (acl_reference.kernels.moe: +, -, ×
  and rint, never fused) with the softmax sum in a fixed pairwise order (``tree_sum``), plus the bias,
  and a mode-1 group score as the sum of the group's two best values. Larger first, NaN last, equal
  keys (-0 = 0) to the lower expert or group. Documented checks are 561002 (tiling): x 2-D, bias
  [E], 1 <= k <= E, E <= 2048, 1 <= kGroup <= groupCount, groupCount divides E, more experts per group
  than groupSelectMode, k <= kGroup × group size, the 32-aligned group bound, normType / groupSelectMode
  / renorm in {0, 1} (normType 2, softplus, is in CANN's code but not its interface document: refused);
  a bias or yOut of another dtype than x is 161002.
* MoeGatingTopKBackward (aclnnMoeGatingTopKBackward.md, hicann/ops-transformer moe/moe_gating_top_k_backward):
  the sigmoid mode (normType 1, the only one the page supports; 0 is refused, 161002 — the page names no
  code) of MoeGatingTopK's backward. Per row, with ``s = routedScalingFactor`` and ``eps`` as float32 (the
  forward's rule): ``D = Σ_p xNorm[expertIdx_p] + eps``, ``beta = Σ_p (xNorm[expertIdx_p]/D)·s·gradY_p``,
  ``gradNorm[j] = Σ_{p: expertIdx_p = j} (s·gradY_p - beta)/D`` (repeated experts add up, as the page's sum
  says) and ``out = xNorm·(1 - xNorm)·gradNorm`` over every expert (0 where no p reaches j, NaN where xNorm
  is). Evaluated in float64 and rounded once to ``out``, which takes gradY's dtype and xNorm's shape (the
  parameter table; the error table says "out's dtype differs from xNorm" — the table and the page's test
  golden agree on gradY's, followed here). ``renorm`` is reserved: 0 or 1, either gives the same result
  (the forward always renormalises in sigmoid mode); others are 161002 (a choice). Shapes: xNorm [M, N]
  float32 with 2 <= N <= 2048, gradY [M, K] with 1 <= K <= N, expertIdx int32 of gradY's shape, no empty
  tensor: else 161002. expertIdx values outside [0, N) are refused when the operator runs (161002).
* MoeTokenPermute (paddedMode false, the only mode CANN supports; true is 561002): the flattened
  ``indices`` [tokens, topK] (or [tokens]) are sorted stably; ``permuteTokensOut[p] = tokens[sorted[p] //
  topK]`` for the first ``numOutTokens`` positions (0: all; negative: a Python slice end) and
  ``sortedIndicesOut[i]`` is the sorted position of flat entry i. Values outside [0, 16777215) are
  refused when the operator runs (161002); fewer than 16777215 entries and topK <= 512, else 561002.
* MoeTokenUnpermute (paddedMode false, restoreShapeOptional null; otherwise 161002): ``out[i] = Σ_j
  permutedTokens[sortedIndices[i·topK + j]] · probs[i, j]`` (topK 1 and weight 1 without probs), in
  float64. ``permutedTokens`` has as many rows as ``sortedIndices`` (the document's shapes; 561002
  otherwise); ``probs`` may have another float dtype than the tokens (the document lists each alone);
  sortedIndices values outside [0, rows) are refused when the operator runs.
* MoeTokenPermuteGrad (MoeTokenPermute's backward; ops-transformer's aclnnMoeTokenPermuteGrad.md): ``out[t] =
  Σ_j permutedOutputGrad[sortedIndices[t·numTopk + j]]`` over the numTopk copies of token t, summed in float64
  in j order and rounded once. ``permutedOutputGrad`` is 2-D with at most ``tokens·numTopk`` rows (the rows of
  ``sortedIndices``): as the forward's numOutTokens keeps the first rows, a copy whose sorted position lies at or
  past them was dropped and adds nothing (CANN's tiling reads numOutTokens from this tensor's rows too).
  ``sortedIndices`` values outside ``[0, tokens·numTopk)`` are refused when the operator runs (161002); the
  document asks for distinct values, but a gather is defined for repeats and reads them as named. Choices where
  the page is silent: numTopk in [1, 512] and dividing sortedIndices' length, 2-D/1-D ranks and more grad rows
  than copies are 561002 (the forward's tiling code); paddedMode true is 161002 (the op_api's check).
* MoeTokenUnpermuteGrad (MoeTokenUnpermute's backward; aclnnMoeTokenUnpermuteGrad.md, CANN 8.1's
  aclnn_moe_token_unpermute_grad.h): with ``i = t·topK + j``, ``permutedTokensGradOut[sortedIndices[i]] =
  unpermutedTokensGrad[t] · probs[t, j]`` (a copy of row t without probs, topK 1) and ``probsGradOut[t, j] =
  Σ_h unpermutedTokensGrad[t, h] · permutedTokens[sortedIndices[i], h]``, a dot product over the hidden axis in
  float64 (any order: the bound is the reduction class's), rounded once to probs' dtype; the products are exact
  in float64, so permutedTokensGradOut is rounded once. topK is probs' second axis (1 without it, <= 512).
  ``sortedIndices`` must be a permutation of ``0 .. tokens·topK - 1`` (the document's "no repeated index"): a
  value out of range or repeated is refused when the operator runs (161002), since a repeat would leave rows of
  the output unwritten. ``permutedTokens`` has as many rows as ``sortedIndices`` (as the forward here requires),
  ``unpermutedTokensGrad`` is [tokens, hidden] of permutedTokens' dtype (161002 otherwise); probs may have
  another float dtype and probsGradOut takes probs' (CANN's infer-dtype rule). probsGradOut is ignored without
  probs and may then be null (the document calls it optional); with probs a null one is 161001. paddedMode true
  and a restore shape are refused with 161002, as the forward refuses them; empty tensors run (CANN's tiling
  refuses a zero dimension: acl-core accepts the empty call as every MoE op here does).
* MoeInitRoutingV2: the flattened ``expertIdx`` (its flat positions, not MoeInitRouting's rowIdx) is
  sorted stably. Dropless (dropPadMode 0): ``expandedRowIdxOut[sorted[i]] = i``, ``expandedXOut[i] =
  x[sorted[i] // k]`` for the first ``min(activeNum, rows·k)`` positions (all when activeNum is 0), and
  ``expertTokensCountOrCumsumOut`` the per-expert running totals (flag 1) or counts (flag 2). Drop/pad
  (dropPadMode 1): the r-th copy (in sorted order) of expert e goes to slot ``e·expertCapacity + r`` of
  ``expandedXOut`` [expertNum, expertCapacity, h] while r < expertCapacity, its ``expandedRowIdxOut``
  entry is that slot or -1 when dropped, empty slots hold zeros, and ``expertTokensBeforeCapacityOut``
  holds the counts before dropping (when its flag is true). Where counts or capacity need it, expert
  numbers must lie in [0, expertNum), else only be non-negative: refused when the operator runs. The
  optional outputs are ignored when their flags do not ask for them, and 161001 when asked for but null.
* MoeInitRoutingV3 (CANN's aclnnMoeInitRoutingV3.md and its test golden ``moe_init_routing_v3/tests/assets/
  golden.py``): the flattened int32 ``expertIdx`` is sorted stably; the copies whose expert lies in the active
  range ``[expertStart, expertEnd)`` (``activeExpertRangeOptional``; null means all ``expertNum`` experts) are
  the routed ones, ``availableIdxNum`` of them, in sorted order; other values (even negative or past
  ``expertNum``) are simply not routed. Dropless (dropPadMode 0): ``expandedXOut`` has ``rows·k`` rows, or
  ``min(activeNum, rows·k)`` when activeNum > 0; row p < availableIdxNum is the (quantised) token of routed
  copy p, rows after it are zeros (CANN leaves them unset: the choice here). ``expandedRowIdxOut`` with
  rowIdxType 0 (gather) holds each routed copy's row and -1 elsewhere; with rowIdxType 1 (scatter) its first
  availableIdxNum entries are the routed copies' flat positions and the rest (unset in CANN, whose golden
  continues the sort) continues as the sort rotated: copies of experts at or past expertEnd, then those below
  expertStart, each in sorted order, so the whole is a permutation of ``0 .. rows·k - 1``. Drop/pad
  (dropPadMode 1, range = all experts, expertCapacity in (0, rows], counts only as type 1): MoeInitRoutingV2's
  capacity slots, whatever rowIdxType says (as CANN's golden computes it). ``expertTokensCountOrCumsumOut``
  (int64; when expertTokensNumFlag) is the per-expert cumsum (type 0) or count (type 1) over the range, or
  (type 2, key_value, [expertNum, 2]) the rows (expert, count) of each expert of the range with tokens in
  increasing order, then a (0, 0) row, zeros after (CANN leaves the rows after the terminator unset).
  Quantisation (quantMode): -1 none (``scaleOptional`` [rows], if given, is carried along into
  ``expandedScaleOut``); 0 static int8, as CANN's golden rounds it: x, scale [1] and offset [1] in float16,
  ``rint(f16(f16(x·scale) + offset))``; 1 dynamic int8 in float32: ``v = x·smooth[expert - expertStart]``
  (smooth scales ``scaleOptional`` [expertEnd - expertStart, h], optional), ``s = max|v| / 127``
  (``expandedScaleOut``), codes ``rint(v / s)``. Codes round half to even, NaN (a zero row's 0/0) becomes 0, and
  saturate to [-128, 127]. quantMode 2 and 3 (MXFP8, Ascend 950 only) and quantised drop/pad (CANN documents
  no layout for it) are refused with 161002: not implemented. Attribute and shape problems are 561002; a
  required but null scale/offset or output is 161001; int8 x with quantisation is 161002. CANN's op_api
  requires every output non-null; here an output the call does not write may be null. expandedXOut's
  shape is the document's (min(activeNum, rows·k) rows when activeNum > 0), not the op_api's rows·k.

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
    NULLPTR,
    TILING,
    Call,
    ErrorSample,
    IndexOf,
    Infos,
    OpSpec,
    Sample,
    bool_attr,
    float_attr,
    int_array,
    int_attr,
    invalid,
    nullptr,
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


# ----------------------------------------------------------------------------- MoeGatingTopK
MAX_EXPERTS = 2048
"""MoeGatingTopK's largest expert count (x's last axis), and the bound on groupCount × aligned group size."""


def _align32(n: int) -> int:
    return -(-n // 32) * 32


def as_float32(value: float) -> float:
    """``value`` rounded to float32 (CANN's tiling keeps routedScalingFactor and eps as float)."""
    with np.errstate(over="ignore"):
        return float(np.float32(value))


def _gating_k_infer(call: Call) -> Infos:
    x = tensor_arg(call, "x")
    bias = call.args.get("biasOptional")
    for name in ("biasOptional", "yOut"):
        t = call.args.get(name)
        if isinstance(t, AclTensor) and t.dtype != x.dtype:
            raise invalid(f"{name} has dtype {t.dtype.short}; x has {x.dtype.short}")
    if x.rank != 2:
        raise tiling_error(f"x must be 2-D (rows, experts), not {list(x.shape)}")
    rows, experts = x.shape
    if isinstance(bias, AclTensor) and tuple(bias.shape) != (experts,):
        raise tiling_error(f"biasOptional has shape {list(bias.shape)}; expected [{experts}] (x's last axis)")
    k, k_group, groups = (int(call.args[n]) for n in ("k", "kGroup", "groupCount"))
    mode, renorm, norm = (int(call.args[n]) for n in ("groupSelectMode", "renorm", "normType"))
    if not 1 <= k <= experts:
        raise tiling_error(f"k={k} must lie in [1, {experts}] (x's last axis)")
    for name, shape in (("yOut", (rows, k)), ("expertIdxOut", (rows, k)), ("outOut", (rows, experts))):
        _check_given_out(call, name, shape)
    if experts > MAX_EXPERTS:
        raise tiling_error(f"x has {experts} experts; at most {MAX_EXPERTS}")
    if groups <= 0 or not 1 <= k_group <= groups:
        raise tiling_error(f"kGroup={k_group} must lie in [1, groupCount] and groupCount={groups} be positive")
    if norm not in (0, 1):
        raise tiling_error(f"normType={norm} must be 0 (softmax) or 1 (sigmoid)")
    if mode not in (0, 1):
        raise tiling_error(f"groupSelectMode={mode} must be 0 (group maximum) or 1 (sum of the group's top two)")
    if renorm not in (0, 1):
        raise tiling_error(f"renorm={renorm} must be 0 or 1")
    if experts % groups:
        raise tiling_error(f"the {experts} experts do not split into groupCount={groups} groups")
    size = experts // groups
    if size <= mode:
        raise tiling_error(f"groupSelectMode={mode} needs more than {mode} expert(s) per group, not {size}")
    if k > k_group * size:
        raise tiling_error(f"k={k} exceeds kGroup × experts per group = {k_group * size}")
    if groups not in (1, experts) and k_group != groups and groups * _align32(size) > MAX_EXPERTS:
        raise tiling_error(
            f"groupCount × (experts per group aligned to 32) = {groups * _align32(size)} exceeds {MAX_EXPERTS}"
        )
    return {
        "yOut": same((rows, k), x.dtype),
        "expertIdxOut": same((rows, k), D.ACL_INT32),
        "outOut": same((rows, experts), D.ACL_FLOAT),
    }


def _gating_k_args(rng: np.random.Generator, rows: int, experts: int, dt: D, bias: bool, **attrs: Any) -> dict:
    args: dict[str, Any] = {"x": S.array(rng, (rows, experts), dt, low=-3, high=3)}
    args["biasOptional"] = S.array(rng, (experts,), dt, low=-0.5, high=0.5) if bias else None
    defaults: dict[str, Any] = {"k": 2, "kGroup": 1, "groupCount": 1, "groupSelectMode": 0, "renorm": 0, "normType": 0}
    defaults |= {"outFlag": False, "routedScalingFactor": 1.0, "eps": 1e-20}
    return {**args, **defaults, **attrs}


def _gating_k_samples(rng: np.random.Generator) -> Iterable[Sample]:
    deepseek: dict[str, Any] = {"k": 8, "kGroup": 4, "groupCount": 8, "groupSelectMode": 1, "normType": 1}
    deepseek |= {"routedScalingFactor": 2.5, "outFlag": True}
    for dt in _DTYPES:
        yield Sample(_gating_k_args(rng, 5, 256, dt, True, **deepseek), f"{dt.short} DeepSeek-V3 routing [5, 256]")
        yield Sample(_gating_k_args(rng, 4, 8, dt, False, k=2), f"{dt.short} softmax top-2 of 8")
    yield Sample(_gating_k_args(rng, 6, 64, D.ACL_FLOAT, True, k=6, groupCount=8, kGroup=3), "group maxima, bias")
    sig: dict[str, Any] = {"k": 4, "normType": 1, "renorm": 1, "outFlag": True, "eps": 1e-6}
    yield Sample(_gating_k_args(rng, 3, 40, D.ACL_FLOAT, False, **sig), "sigmoid, renorm, no groups")
    soft: dict[str, Any] = {
        "k": 3,
        "renorm": 1,
        "groupCount": 4,
        "kGroup": 2,
        "groupSelectMode": 1,
        "routedScalingFactor": 0.5,
    }
    yield Sample(_gating_k_args(rng, 7, 300, D.ACL_FLOAT16, True, **soft), "softmax renorm, 300 experts in 4 groups")
    yield Sample(_gating_k_args(rng, 2, 16, D.ACL_BF16, False, k=16, groupCount=16, kGroup=16), "k = E, one per group")
    ties = np.zeros((3, 12), np.float32)
    ties[1, ::3] = 1.0
    ties[2] = np.repeat(np.array([0.5, -0.5, 0.5], np.float32), 4)
    args = _gating_k_args(rng, 3, 12, D.ACL_FLOAT, False, k=5, groupCount=3, kGroup=2, groupSelectMode=1)
    yield Sample({**args, "x": ties}, "tied logits and groups: lower numbers first")
    yield Sample(_gating_k_args(rng, 0, 32, D.ACL_FLOAT, True, k=4, normType=1), "no rows")


def _gating_k_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    base = _gating_k_args(rng, 4, 32, D.ACL_FLOAT, True, k=4, groupCount=4, kGroup=2)
    yield ErrorSample({**base, "k": 0}, TILING, "k = 0")
    yield ErrorSample({**base, "k": 33}, TILING, "k above the expert count")
    yield ErrorSample({**base, "k": 17}, TILING, "k above kGroup × group size")
    yield ErrorSample({**base, "kGroup": 5}, TILING, "kGroup above groupCount")
    yield ErrorSample({**base, "groupCount": 0}, TILING, "groupCount = 0")
    yield ErrorSample({**base, "groupCount": 5}, TILING, "experts not divisible by groupCount")
    yield ErrorSample({**base, "normType": 2}, TILING, "normType 2")
    yield ErrorSample({**base, "groupSelectMode": 2}, TILING, "groupSelectMode 2")
    yield ErrorSample({**base, "renorm": 2}, TILING, "renorm 2")
    yield ErrorSample({**base, "groupCount": 32, "kGroup": 4, "groupSelectMode": 1}, TILING, "top-2 of one expert")
    wide = _gating_k_args(rng, 1, 2064, D.ACL_FLOAT, False, k=4)
    yield ErrorSample(wide, TILING, "more than 2048 experts")
    aligned = _gating_k_args(rng, 1, 720, D.ACL_FLOAT, False, k=4, groupCount=80, kGroup=2)
    yield ErrorSample(aligned, TILING, "80 groups of 9, aligned to 32, exceed 2048")
    yield ErrorSample({**base, "biasOptional": S.array(rng, (31,), D.ACL_FLOAT)}, TILING, "bias of another length")
    yield ErrorSample({**base, "x": S.array(rng, (2, 2, 32), D.ACL_FLOAT)}, TILING, "3-D x")
    yield ErrorSample({**base, "biasOptional": S.array(rng, (32,), D.ACL_FLOAT16)}, INVALID, "bias of another dtype")
    yield ErrorSample({**base, "yOut": np.zeros((4, 4), np.float16)}, INVALID, "yOut of another dtype")
    yield ErrorSample({**base, "outOut": np.zeros((4, 32), np.float16)}, INVALID, "float16 outOut")


_MoeGatingTopK = OpSpec(
    "MoeGatingTopK",
    FAMILY,
    (
        tensor("x", FLOATS),
        tensor("biasOptional", FLOATS, optional=True),
        int_attr("k"),
        int_attr("kGroup"),
        int_attr("groupCount"),
        int_attr("groupSelectMode"),
        int_attr("renorm"),
        int_attr("normType"),
        bool_attr("outFlag"),
        float_attr("routedScalingFactor"),
        float_attr("eps"),
        out("yOut", FLOATS, c_type="const aclTensor*"),
        out("expertIdxOut", I32, c_type="const aclTensor*"),
        out("outOut", {D.ACL_FLOAT}, c_type="const aclTensor*"),
    ),
    _gating_k_infer,
    samples=_gating_k_samples,
    error_samples=_gating_k_errors,
    summary="softmax or sigmoid gating, bias, group-limited top-k experts, renormalised and scaled weights",
)


# ----------------------------------------------------------------------------- MoeGatingTopKBackward
def _gating_k_backward_infer(call: Call) -> Infos:
    x_norm, grad_y, idx = (tensor_arg(call, n) for n in ("xNorm", "gradY", "expertIdx"))
    if x_norm.rank != 2 or grad_y.rank != 2 or idx.rank != 2:
        raise invalid("xNorm, gradY and expertIdx must be 2-D")
    rows, experts = x_norm.shape
    if not 2 <= experts <= MAX_EXPERTS:
        raise invalid(f"xNorm has {experts} experts; the last axis must lie in [2, {MAX_EXPERTS}]")
    if rows == 0:
        raise invalid("empty tensors are not supported (xNorm has no rows)")
    if tuple(idx.shape) != tuple(grad_y.shape):
        raise invalid(f"expertIdx has shape {list(idx.shape)}; gradY has {list(grad_y.shape)}")
    if grad_y.shape[0] != rows:
        raise invalid(f"gradY has {grad_y.shape[0]} rows; xNorm has {rows}")
    if not 1 <= grad_y.shape[1] <= experts:
        raise invalid(f"gradY's k = {grad_y.shape[1]} must lie in [1, {experts}] (xNorm's experts)")
    if int(call.args["normType"]) != 1:
        raise invalid(f"normType={int(call.args['normType'])}: only 1 (sigmoid) is supported")
    if int(call.args["renorm"]) not in (0, 1):
        raise invalid(f"renorm={int(call.args['renorm'])} must be 0 or 1")
    return {"out": same((rows, experts), grad_y.dtype)}


def _unique_experts(rng: np.random.Generator, rows: int, experts: int, k: int) -> np.ndarray:
    """Each row: k distinct expert numbers in random order (what the forward's top-k gives)."""
    if rows == 0:
        return np.zeros((0, k), np.int32)
    return np.stack([rng.permutation(experts)[:k] for _ in range(rows)]).astype(np.int32)


def gating_k_backward_args(
    rng: np.random.Generator, rows: int, experts: int, k: int, dt: D, **attrs: Any
) -> dict[str, Any]:
    """MoeGatingTopKBackward arguments: sigmoid outputs, a gradient of ``dt`` and distinct experts per row."""
    x_norm = (1.0 / (1.0 + np.exp(-rng.uniform(-4.0, 4.0, (rows, experts))))).astype(np.float32)
    args: dict[str, Any] = {"xNorm": x_norm, "gradY": S.array(rng, (rows, k), dt, low=-2.0, high=2.0)}
    args["expertIdx"] = _unique_experts(rng, rows, experts, k)
    defaults: dict[str, Any] = {"renorm": 0, "normType": 1, "routedScalingFactor": 1.0, "eps": 1e-20}
    return {**args, **defaults, **attrs}


def _gating_k_backward_samples(rng: np.random.Generator) -> Iterable[Sample]:
    for dt in _DTYPES:
        args = gating_k_backward_args(rng, 5, 256, 8, dt, routedScalingFactor=2.5)
        yield Sample(args, f"{dt.short} DeepSeek-V3 router [5, 256], k 8")
        yield Sample(gating_k_backward_args(rng, 4, 8, 2, dt), f"{dt.short} top-2 of 8")
    yield Sample(gating_k_backward_args(rng, 3, 40, 4, D.ACL_FLOAT, renorm=1, eps=1e-6), "renorm 1, eps 1e-6")
    yield Sample(gating_k_backward_args(rng, 2, 16, 16, D.ACL_BF16), "k = E")
    yield Sample(gating_k_backward_args(rng, 2, 2048, 8, D.ACL_FLOAT16, routedScalingFactor=0.5), "2048 experts")
    yield Sample(gating_k_backward_args(rng, 3, 2, 1, D.ACL_FLOAT), "two experts, k 1")
    yield Sample(gating_k_backward_args(rng, 3, 600, 300, D.ACL_BF16), "k 300 of 600: more than a block's threads")
    dup = gating_k_backward_args(rng, 3, 12, 4, D.ACL_FLOAT)
    dup["expertIdx"] = np.array([[3, 3, 0, 7], [5, 1, 5, 5], [11, 2, 9, 4]], np.int32)
    yield Sample(dup, "repeated experts in a row: their gradients add up")
    wide = gating_k_backward_args(rng, 2, 64, 6, D.ACL_FLOAT)
    wide["xNorm"] = np.where(rng.random((2, 64)) < 0.1, np.float32(np.nan), wide["xNorm"])
    yield Sample(wide, "NaN scores: the rows they reach are NaN")


def _gating_k_backward_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    base = gating_k_backward_args(rng, 4, 16, 4, D.ACL_FLOAT)
    yield ErrorSample({**base, "xNorm": base["xNorm"].astype(np.float16)}, INVALID, "float16 xNorm")
    yield ErrorSample({**base, "gradY": base["gradY"].astype(np.int32)}, INVALID, "int32 gradY")
    yield ErrorSample({**base, "expertIdx": base["expertIdx"].astype(np.int64)}, INVALID, "int64 expertIdx")
    yield ErrorSample({**base, "out": np.zeros((4, 16), np.float16)}, INVALID, "out of another dtype than gradY")
    yield ErrorSample({**base, "out": np.zeros((4, 15), np.float32)}, INVALID, "out of another shape than xNorm")
    yield ErrorSample({**base, "xNorm": base["xNorm"][None]}, INVALID, "3-D xNorm")
    yield ErrorSample({**base, "expertIdx": base["expertIdx"][:, :3]}, INVALID, "expertIdx of another shape")
    yield ErrorSample({**base, "gradY": base["gradY"][:3], "expertIdx": base["expertIdx"][:3]}, INVALID, "3 of 4 rows")
    one = gating_k_backward_args(rng, 4, 1, 1, D.ACL_FLOAT)
    yield ErrorSample(one, INVALID, "one expert")
    yield ErrorSample(gating_k_backward_args(rng, 1, 2049, 4, D.ACL_FLOAT), INVALID, "2049 experts")
    empty = gating_k_backward_args(rng, 4, 16, 0, D.ACL_FLOAT)
    yield ErrorSample(empty, INVALID, "k = 0")
    yield ErrorSample(gating_k_backward_args(rng, 0, 16, 4, D.ACL_FLOAT), INVALID, "no rows")
    wide = {**base, "gradY": S.array(rng, (4, 17), D.ACL_FLOAT), "expertIdx": np.zeros((4, 17), np.int32)}
    yield ErrorSample(wide, INVALID, "k above the expert count")
    yield ErrorSample({**base, "normType": 0}, INVALID, "normType 0 (softmax)")
    yield ErrorSample({**base, "renorm": 2}, INVALID, "renorm 2")


_MoeGatingTopKBackward = OpSpec(
    "MoeGatingTopKBackward",
    FAMILY,
    (
        tensor("xNorm", {D.ACL_FLOAT}),
        tensor("gradY", FLOATS),
        tensor("expertIdx", I32, index_of=IndexOf("xNorm", axis=1)),
        int_attr("renorm"),
        int_attr("normType"),
        float_attr("routedScalingFactor"),
        float_attr("eps"),
        out("out", FLOATS, c_type="const aclTensor*"),
    ),
    _gating_k_backward_infer,
    samples=_gating_k_backward_samples,
    error_samples=_gating_k_backward_errors,
    summary="MoeGatingTopK's sigmoid-mode backward: the renormalisation's and the sigmoid's gradients, scattered",
)


# ----------------------------------------------------------------------------- MoeTokenPermute / Unpermute
MAX_PERMUTE_ELEMENTS = 16777215
"""MoeTokenPermute's indices hold fewer elements than this, each in [0, this)."""
MAX_TOP_K = 512


def permuted_rows(total: int, num_out: int) -> int:
    """Rows MoeTokenPermute keeps of ``total``: all for 0, the first ``num_out``, or a negative slice end."""
    if num_out == 0:
        return total
    return min(total, num_out) if num_out > 0 else max(total + num_out, 0)


def _permute_infer(call: Call) -> Infos:
    tokens, indices = tensor_arg(call, "tokens"), tensor_arg(call, "indices")
    if tokens.rank < 2:
        raise tiling_error(f"tokens must have at least 2 dims, not {list(tokens.shape)}")
    if indices.rank not in (1, 2) or indices.shape[0] != tokens.shape[0]:
        raise tiling_error(
            f"indices must be [{tokens.shape[0]}] or [{tokens.shape[0]}, topK], not {list(indices.shape)}"
        )
    if call.args["paddedMode"]:
        raise tiling_error("paddedMode=true is not supported (CANN supports only false)")
    top_k = indices.shape[1] if indices.rank == 2 else 1
    if top_k > MAX_TOP_K:
        raise tiling_error(f"topK={top_k} exceeds {MAX_TOP_K}")
    total = indices.shape[0] * top_k
    if total >= MAX_PERMUTE_ELEMENTS:
        raise tiling_error(f"indices holds {total} elements; fewer than {MAX_PERMUTE_ELEMENTS} are supported")
    kept = permuted_rows(total, int(call.args["numOutTokens"]))
    return {
        "permuteTokensOut": same((kept, *tokens.shape[1:]), tokens.dtype),
        "sortedIndicesOut": same((total,), D.ACL_INT32),
    }


def _permute_samples(rng: np.random.Generator) -> Iterable[Sample]:
    for dt in _DTYPES:
        expert, _ = routing_indices(rng, 6, 8, 2)
        tokens = S.array(rng, (6, 5), dt)
        yield Sample({"tokens": tokens, "indices": expert, "numOutTokens": 0, "paddedMode": False}, f"{dt.short} top-2")
    expert, _ = routing_indices(rng, 9, 16, 4)
    tokens = S.array(rng, (9, 3, 4), D.ACL_FLOAT)
    for num_out in (5, -7, 100, -100):
        args = {"tokens": tokens, "indices": expert.astype(np.int64), "numOutTokens": num_out, "paddedMode": False}
        yield Sample(args, f"3-D tokens, int64 indices, numOutTokens={num_out}")
    repeated = rng.integers(0, 3, (70, 3)).astype(np.int32)  # 210 copies, many equal experts: stable order
    args = {"tokens": S.array(rng, (70, 33), D.ACL_BF16), "indices": repeated, "numOutTokens": 0, "paddedMode": False}
    yield Sample(args, "210 copies over 3 experts")
    one = rng.integers(0, 5, 7).astype(np.int32)
    tokens = S.array(rng, (7, 2), D.ACL_FLOAT16)
    yield Sample({"tokens": tokens, "indices": one, "numOutTokens": 0, "paddedMode": False}, "1-D indices (topK 1)")
    empty = np.zeros((0, 2), np.int32)
    args = {"tokens": np.zeros((0, 4), np.float32), "indices": empty, "numOutTokens": 0, "paddedMode": False}
    yield Sample(args, "no tokens")


def _permute_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    expert, _ = routing_indices(rng, 4, 6, 2)
    base = {"tokens": S.array(rng, (4, 3), D.ACL_FLOAT), "indices": expert, "numOutTokens": 0, "paddedMode": False}
    yield ErrorSample({**base, "paddedMode": True}, TILING, "paddedMode true")
    yield ErrorSample({**base, "tokens": S.array(rng, (4,), D.ACL_FLOAT)}, TILING, "1-D tokens")
    yield ErrorSample({**base, "tokens": S.array(rng, (5, 3), D.ACL_FLOAT)}, TILING, "tokens and indices rows differ")
    yield ErrorSample({**base, "indices": expert.reshape(4, 2, 1)}, TILING, "3-D indices")
    yield ErrorSample(
        {**base, "indices": np.zeros((1, 513), np.int32), "tokens": np.zeros((1, 2), np.float32)}, TILING, "topK 513"
    )
    yield ErrorSample({**base, "indices": expert.astype(np.int16)}, INVALID, "int16 indices")
    bad = expert.copy()
    bad[1, 1] = -1
    yield ErrorSample({**base, "indices": bad}, INVALID, "a negative expert number (when the operator runs)")
    bad = expert.copy()
    bad[3, 0] = MAX_PERMUTE_ELEMENTS
    yield ErrorSample({**base, "indices": bad}, INVALID, "an expert number of 16777215 (when the operator runs)")


_MoeTokenPermute = OpSpec(
    "MoeTokenPermute",
    FAMILY,
    (
        tensor("tokens", FLOATS),
        tensor("indices", {D.ACL_INT32, D.ACL_INT64}),
        int_attr("numOutTokens"),
        bool_attr("paddedMode"),
        out("permuteTokensOut", FLOATS, c_type="const aclTensor*"),
        out("sortedIndicesOut", I32, c_type="const aclTensor*"),
    ),
    _permute_infer,
    samples=_permute_samples,
    error_samples=_permute_errors,
    summary="copy each token once per chosen expert, grouped by expert (stable), and the inverse positions",
)


def _unpermute_infer(call: Call) -> Infos:
    tokens, order = tensor_arg(call, "permutedTokens"), tensor_arg(call, "sortedIndices")
    probs = call.args.get("probsOptional")
    if call.args["paddedMode"]:
        raise invalid("paddedMode=true is not supported (CANN supports only false)")
    if call.args.get("restoreShapeOptional") is not None:
        raise invalid("restoreShapeOptional must be null (it only applies to paddedMode=true)")
    if tokens.rank != 2:
        raise tiling_error(f"permutedTokens must be 2-D (tokens × topK, hidden), not {list(tokens.shape)}")
    if order.rank != 1 or order.shape[0] != tokens.shape[0]:
        raise tiling_error(f"sortedIndices has shape {list(order.shape)}; expected [{tokens.shape[0]}]")
    if isinstance(probs, AclTensor):
        if probs.rank != 2 or probs.shape[0] * probs.shape[1] != tokens.shape[0]:
            raise tiling_error(
                f"probsOptional has shape {list(probs.shape)}; expected [tokens, topK] of {tokens.shape[0]} elements"
            )
        rows, top_k = probs.shape
    else:
        rows, top_k = tokens.shape[0], 1
    if top_k > MAX_TOP_K:
        raise tiling_error(f"topK={top_k} exceeds {MAX_TOP_K}")
    return {"out": same((rows, tokens.shape[1]), tokens.dtype)}


def unpermute_args(rng: np.random.Generator, rows: int, k: int, hidden: int, dt: D, probs: D | None) -> dict:
    """Arguments of a MoeTokenUnpermute call undoing a permutation of ``rows`` tokens times ``k`` experts."""
    order = rng.permutation(rows * k).astype(np.int32)
    args: dict[str, Any] = {"permutedTokens": S.array(rng, (rows * k, hidden), dt), "sortedIndices": order}
    args["probsOptional"] = None if probs is None else S.array(rng, (rows, k), probs, low=0, high=1)
    return {**args, "paddedMode": False, "restoreShapeOptional": None}


def _unpermute_samples(rng: np.random.Generator) -> Iterable[Sample]:
    for dt in _DTYPES:
        yield Sample(unpermute_args(rng, 5, 2, 6, dt, dt), f"{dt.short} 5 tokens, top-2")
    yield Sample(unpermute_args(rng, 9, 4, 3, D.ACL_BF16, D.ACL_FLOAT), "bf16 tokens, float32 probs")
    yield Sample(unpermute_args(rng, 6, 1, 33, D.ACL_FLOAT16, None), "without probs (topK 1)")
    args = unpermute_args(rng, 40, 3, 7, D.ACL_FLOAT, D.ACL_FLOAT)
    args["sortedIndices"] = rng.integers(0, 120, 120).astype(np.int32)  # repeats: each read as often as named
    yield Sample(args, "repeated positions")
    yield Sample(unpermute_args(rng, 0, 2, 4, D.ACL_FLOAT, D.ACL_FLOAT), "no tokens")


def _unpermute_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    base = unpermute_args(rng, 4, 2, 3, D.ACL_FLOAT, D.ACL_FLOAT)
    yield ErrorSample({**base, "paddedMode": True}, INVALID, "paddedMode true")
    yield ErrorSample({**base, "restoreShapeOptional": [4, 3]}, INVALID, "a restore shape")
    yield ErrorSample({**base, "probsOptional": S.array(rng, (4, 3), D.ACL_FLOAT)}, TILING, "probs of another topK")
    yield ErrorSample({**base, "sortedIndices": np.arange(7, dtype=np.int32)}, TILING, "sortedIndices too short")
    yield ErrorSample({**base, "permutedTokens": S.array(rng, (8, 3, 1), D.ACL_FLOAT)}, TILING, "3-D permutedTokens")
    yield ErrorSample({**base, "sortedIndices": np.arange(8, dtype=np.int64)}, INVALID, "int64 sortedIndices")
    yield ErrorSample({**base, "out": np.zeros((4, 3), np.float16)}, INVALID, "out of another dtype")


_MoeTokenUnpermute = OpSpec(
    "MoeTokenUnpermute",
    FAMILY,
    (
        tensor("permutedTokens", FLOATS),
        tensor("sortedIndices", I32, index_of=IndexOf("permutedTokens")),
        tensor("probsOptional", FLOATS, optional=True),
        bool_attr("paddedMode"),
        int_array("restoreShapeOptional", optional=True),
        out("out", FLOATS),
    ),
    _unpermute_infer,
    samples=_unpermute_samples,
    error_samples=_unpermute_errors,
    summary="gather each token's expert outputs back and sum them weighted by probs",
)


# ----------------------------------------------------------------------------- MoeTokenPermuteGrad / UnpermuteGrad
def sorted_positions(indices: np.ndarray) -> np.ndarray:
    """MoeTokenPermute's sortedIndicesOut of ``indices``: the stable sorted position of each flat entry (int32)."""
    flat = np.asarray(indices).reshape(-1)
    order = np.argsort(flat, kind="stable")
    positions = np.empty(flat.size, np.int32)
    positions[order] = np.arange(flat.size, dtype=np.int32)
    return positions


def _permute_grad_infer(call: Call) -> Infos:
    grad, order = tensor_arg(call, "permutedOutputGrad"), tensor_arg(call, "sortedIndices")
    top_k = int(call.args["numTopk"])
    if call.args["paddedMode"]:
        raise invalid("paddedMode=true is not supported (CANN supports only false)")
    if grad.rank != 2:
        raise tiling_error(f"permutedOutputGrad must be 2-D (tokens × numTopk, hidden), not {list(grad.shape)}")
    if order.rank != 1:
        raise tiling_error(f"sortedIndices must be 1-D (tokens × numTopk), not {list(order.shape)}")
    if not 1 <= top_k <= MAX_TOP_K:
        raise tiling_error(f"numTopk={top_k} must lie in [1, {MAX_TOP_K}]")
    total = order.shape[0]
    if total % top_k:
        raise tiling_error(f"sortedIndices holds {total} entries, not a multiple of numTopk={top_k}")
    if grad.shape[0] > total:
        raise tiling_error(f"permutedOutputGrad has {grad.shape[0]} rows; the forward keeps at most {total}")
    return {"out": same((total // top_k, grad.shape[1]), grad.dtype)}


def permute_grad_args(rng: np.random.Generator, rows: int, k: int, hidden: int, dt: D, kept: int | None = None) -> dict:
    """Arguments of a MoeTokenPermuteGrad call after a permute of ``rows`` tokens to ``k`` of 8 experts."""
    expert, _ = routing_indices(rng, rows, max(8, k), k)
    kept = rows * k if kept is None else kept
    grad = S.array(rng, (kept, hidden), dt)
    return {"permutedOutputGrad": grad, "sortedIndices": sorted_positions(expert), "numTopk": k, "paddedMode": False}


def _permute_grad_samples(rng: np.random.Generator) -> Iterable[Sample]:
    for dt in _DTYPES:
        yield Sample(permute_grad_args(rng, 6, 2, 5, dt), f"{dt.short} 6 tokens, top-2")
    yield Sample(permute_grad_args(rng, 9, 4, 7, D.ACL_FLOAT, kept=20), "20 of 36 copies kept (numOutTokens)")
    yield Sample(permute_grad_args(rng, 7, 1, 33, D.ACL_FLOAT16), "topK 1")
    repeated = rng.integers(0, 3, (70, 3)).astype(np.int32)  # many equal experts, as the forward's sample
    args = {"permutedOutputGrad": S.array(rng, (210, 33), D.ACL_BF16), "sortedIndices": sorted_positions(repeated)}
    yield Sample({**args, "numTopk": 3, "paddedMode": False}, "210 copies over 3 experts")
    args = {"permutedOutputGrad": np.zeros((0, 4), np.float32), "sortedIndices": np.zeros(0, np.int32)}
    yield Sample({**args, "numTopk": 2, "paddedMode": False}, "no tokens")


def _permute_grad_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    base = permute_grad_args(rng, 4, 2, 3, D.ACL_FLOAT)
    order = np.asarray(base["sortedIndices"])
    yield ErrorSample({**base, "paddedMode": True}, INVALID, "paddedMode true")
    yield ErrorSample({**base, "numTopk": 0}, TILING, "numTopk 0")
    yield ErrorSample({**base, "numTopk": 3}, TILING, "numTopk not dividing the copies")
    big = {"permutedOutputGrad": np.zeros((513, 2), np.float32), "sortedIndices": np.arange(513, dtype=np.int32)}
    yield ErrorSample({**base, **big, "numTopk": 513}, TILING, "numTopk 513")
    yield ErrorSample({**base, "permutedOutputGrad": S.array(rng, (8, 3, 1), D.ACL_FLOAT)}, TILING, "3-D grad")
    grad = S.array(rng, (9, 3), D.ACL_FLOAT)
    yield ErrorSample({**base, "permutedOutputGrad": grad}, TILING, "more rows than copies")
    yield ErrorSample({**base, "sortedIndices": order.reshape(4, 2)}, TILING, "2-D sortedIndices")
    yield ErrorSample({**base, "sortedIndices": order.astype(np.int64)}, INVALID, "int64 sortedIndices")
    yield ErrorSample({**base, "permutedOutputGrad": S.array(rng, (8, 3), D.ACL_INT32)}, INVALID, "int32 grad")
    yield ErrorSample({**base, "out": np.zeros((4, 3), np.float16)}, INVALID, "out of another dtype")
    bad = order.copy()
    bad[5] = 8
    yield ErrorSample({**base, "sortedIndices": bad}, INVALID, "a position of tokens × topK (when the operator runs)")


_MoeTokenPermuteGrad = OpSpec(
    "MoeTokenPermuteGrad",
    FAMILY,
    (
        tensor("permutedOutputGrad", FLOATS),
        tensor("sortedIndices", I32, index_of=IndexOf("permutedOutputGrad")),
        int_attr("numTopk"),
        bool_attr("paddedMode"),
        out("out", FLOATS),
    ),
    _permute_grad_infer,
    samples=_permute_grad_samples,
    error_samples=_permute_grad_errors,
    summary="MoeTokenPermute's backward: sum each token's numTopk permuted gradient rows (dropped copies add 0)",
)


def _unpermute_grad_infer(call: Call) -> Infos:
    tokens, grad = tensor_arg(call, "permutedTokens"), tensor_arg(call, "unpermutedTokensGrad")
    order = tensor_arg(call, "sortedIndices")
    probs = call.args.get("probsOptional")
    if call.args["paddedMode"]:
        raise invalid("paddedMode=true is not supported (CANN supports only false)")
    if call.args.get("restoreShapeOptional") is not None:
        raise invalid("restoreShapeOptional must be null (it only applies to paddedMode=true)")
    if grad.dtype != tokens.dtype:
        raise invalid(f"unpermutedTokensGrad has dtype {grad.dtype.short}; permutedTokens has {tokens.dtype.short}")
    if tokens.rank != 2 or grad.rank != 2:
        raise tiling_error(
            f"permutedTokens and unpermutedTokensGrad must be 2-D, not {list(tokens.shape)} and {list(grad.shape)}"
        )
    total, hidden = tokens.shape
    if order.rank != 1 or order.shape[0] != total:
        raise tiling_error(f"sortedIndices has shape {list(order.shape)}; expected [{total}] (permutedTokens' rows)")
    if isinstance(probs, AclTensor):
        if probs.rank != 2 or probs.shape[0] * probs.shape[1] != total:
            raise tiling_error(f"probsOptional has shape {list(probs.shape)}; expected [tokens, topK] of {total}")
        rows, top_k = probs.shape
    else:
        rows, top_k = total, 1
    if top_k > MAX_TOP_K:
        raise tiling_error(f"topK={top_k} exceeds {MAX_TOP_K}")
    if tuple(grad.shape) != (rows, hidden):
        raise tiling_error(f"unpermutedTokensGrad has shape {list(grad.shape)}; expected [{rows}, {hidden}]")
    probs_grad = None
    if isinstance(probs, AclTensor):
        probs_grad = same((rows, top_k), probs.dtype)
        if call.args.get("probsGradOut") is None and call.outputs_required:
            raise nullptr("probsGradOut is null, but probsOptional is given")
    return {"permutedTokensGradOut": same((total, hidden), tokens.dtype), "probsGradOut": probs_grad}


def unpermute_grad_args(rng: np.random.Generator, rows: int, k: int, hidden: int, dt: D, probs: D | None) -> dict:
    """Arguments of a MoeTokenUnpermuteGrad call: a forward's inputs plus the gradient of its ``out``."""
    forward = unpermute_args(rng, rows, k, hidden, dt, probs)
    grad = S.array(rng, (rows * k if probs is None else rows, hidden), dt)
    return {**forward, "unpermutedTokensGrad": grad}


def _unpermute_grad_samples(rng: np.random.Generator) -> Iterable[Sample]:
    for dt in _DTYPES:
        yield Sample(unpermute_grad_args(rng, 5, 2, 6, dt, dt), f"{dt.short} 5 tokens, top-2")
    yield Sample(unpermute_grad_args(rng, 9, 4, 3, D.ACL_BF16, D.ACL_FLOAT), "bf16 tokens, float32 probs")
    yield Sample(unpermute_grad_args(rng, 6, 3, 40, D.ACL_FLOAT, D.ACL_FLOAT16), "float32 tokens, fp16 probs")
    yield Sample(unpermute_grad_args(rng, 6, 1, 33, D.ACL_FLOAT16, None), "without probs (topK 1)")
    yield Sample(unpermute_grad_args(rng, 40, 8, 7, D.ACL_FLOAT, D.ACL_FLOAT), "40 tokens, top-8")
    yield Sample(unpermute_grad_args(rng, 0, 2, 4, D.ACL_FLOAT, D.ACL_FLOAT), "no tokens")


def _unpermute_grad_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    base = unpermute_grad_args(rng, 4, 2, 3, D.ACL_FLOAT, D.ACL_FLOAT)
    order = np.asarray(base["sortedIndices"])
    yield ErrorSample({**base, "paddedMode": True}, INVALID, "paddedMode true")
    yield ErrorSample({**base, "restoreShapeOptional": [4, 3]}, INVALID, "a restore shape")
    yield ErrorSample({**base, "probsOptional": S.array(rng, (4, 3), D.ACL_FLOAT)}, TILING, "probs of another topK")
    yield ErrorSample({**base, "sortedIndices": np.arange(7, dtype=np.int32)}, TILING, "sortedIndices too short")
    yield ErrorSample({**base, "permutedTokens": S.array(rng, (8, 3, 1), D.ACL_FLOAT)}, TILING, "3-D permutedTokens")
    grad = S.array(rng, (4, 5), D.ACL_FLOAT)
    yield ErrorSample({**base, "unpermutedTokensGrad": grad}, TILING, "a grad of another width")
    yield ErrorSample({**base, "unpermutedTokensGrad": S.array(rng, (3, 3), D.ACL_FLOAT)}, TILING, "grad rows")
    grad = S.array(rng, (4, 3), D.ACL_BF16)
    yield ErrorSample({**base, "unpermutedTokensGrad": grad}, INVALID, "a grad of another dtype than the tokens")
    yield ErrorSample({**base, "sortedIndices": order.astype(np.int64)}, INVALID, "int64 sortedIndices")
    yield ErrorSample({**base, "probsGradOut": np.zeros((4, 2), np.float16)}, INVALID, "probsGradOut not probs' dtype")
    bad = order.copy()
    bad[bad == 0] = 1  # position 1 named twice, 0 never
    yield ErrorSample({**base, "sortedIndices": bad}, INVALID, "a repeated position (when the operator runs)")


_MoeTokenUnpermuteGrad = OpSpec(
    "MoeTokenUnpermuteGrad",
    FAMILY,
    (
        tensor("permutedTokens", FLOATS),
        tensor("unpermutedTokensGrad", FLOATS),
        tensor("sortedIndices", I32, index_of=IndexOf("permutedTokens")),
        tensor("probsOptional", FLOATS, optional=True),
        bool_attr("paddedMode"),
        int_array("restoreShapeOptional", optional=True),
        out("permutedTokensGradOut", FLOATS),
        out("probsGradOut", FLOATS, optional=True),
    ),
    _unpermute_grad_infer,
    samples=_unpermute_grad_samples,
    error_samples=_unpermute_grad_errors,
    summary="MoeTokenUnpermute's backward: scatter the weighted gradient rows back, and the probs' dot products",
)


# ----------------------------------------------------------------------------- MoeInitRoutingV2
I32_64 = frozenset({D.ACL_INT32, D.ACL_INT64})


def init_v2_shapes(
    rows: int, k: int, hidden: int, active: int, capacity: int, experts: int, drop: int
) -> tuple[tuple[int, ...], int]:
    """(expandedXOut's shape, the rows it holds) of MoeInitRoutingV2."""
    total = rows * k
    if drop == 1:
        return (experts, capacity, hidden), experts * capacity
    kept = min(active, total) if active > 0 else total
    return (kept, hidden), kept


def _init_v2_infer(call: Call) -> Infos:
    x, expert = tensor_arg(call, "x"), tensor_arg(call, "expertIdx")
    a = call.args
    active, capacity, experts = int(a["activeNum"]), int(a["expertCapacity"]), int(a["expertNum"])
    drop, count_flag = int(a["dropPadMode"]), int(a["expertTokensCountOrCumsumFlag"])
    before_flag = bool(a["expertTokensBeforeCapacityFlag"])
    if x.rank != 2:
        raise tiling_error(f"x must be 2-D (numRows, h), not {list(x.shape)}")
    if expert.rank not in (1, 2) or expert.shape[0] != x.shape[0]:
        raise tiling_error(f"expertIdx must be [{x.shape[0]}, k] or [{x.shape[0]}], not {list(expert.shape)}")
    if min(active, capacity, experts) < 0:
        raise tiling_error(
            f"activeNum={active}, expertCapacity={capacity} and expertNum={experts} must not be negative"
        )
    if drop not in (0, 1):
        raise tiling_error(f"dropPadMode={drop} must be 0 (dropless) or 1 (drop and pad)")
    if count_flag not in (0, 1, 2):
        raise tiling_error(f"expertTokensCountOrCumsumFlag={count_flag} must be 0, 1 or 2")
    rows, hidden = x.shape
    k = expert.shape[1] if expert.rank == 2 else 1
    if drop == 1 and (experts == 0 or not 0 < capacity <= rows):
        raise tiling_error(f"drop/pad mode needs expertNum > 0 and expertCapacity in (0, {rows}]")
    if drop == 0 and count_flag > 0 and experts == 0:
        raise tiling_error("expertTokensCountOrCumsumOut needs expertNum > 0")
    shape, _ = init_v2_shapes(rows, k, hidden, active, capacity, experts, drop)
    counts = same((experts,), D.ACL_INT32) if drop == 0 and count_flag > 0 else None
    before = same((experts,), D.ACL_INT32) if drop == 1 and before_flag else None
    for name, info in (("expertTokensCountOrCumsumOut", counts), ("expertTokensBeforeCapacityOut", before)):
        if info is not None and call.args.get(name) is None and call.outputs_required:
            raise nullptr(f"{name} is null but the flags ask for it")
    _check_given_out(call, "expandedXOut", shape)
    return {
        "expandedXOut": same(shape, x.dtype),
        "expandedRowIdxOut": same((rows * k,), D.ACL_INT32),
        "expertTokensCountOrCumsumOut": counts,
        "expertTokensBeforeCapacityOut": before,
    }


def init_v2_args(rng: np.random.Generator, rows: int, k: int, hidden: int, experts: int, dt: D, **attrs: Any) -> dict:
    """Arguments of a MoeInitRoutingV2 call: ``k`` distinct experts per token among ``experts``."""
    expert, _ = routing_indices(rng, rows, experts, k)
    args: dict[str, Any] = {"x": S.array(rng, (rows, hidden), dt), "expertIdx": expert, "activeNum": 0}
    args |= {"expertCapacity": 0, "expertNum": experts, "dropPadMode": 0, "expertTokensCountOrCumsumFlag": 0}
    return {**args, "expertTokensBeforeCapacityFlag": False, **attrs}


def _init_v2_samples(rng: np.random.Generator) -> Iterable[Sample]:
    for dt in _DTYPES:
        args = init_v2_args(rng, 6, 2, 5, 4, dt, expertTokensCountOrCumsumFlag=1)
        yield Sample(args, f"{dt.short} dropless, token cumsum")
    yield Sample(init_v2_args(rng, 7, 3, 4, 8, D.ACL_FLOAT, expertTokensCountOrCumsumFlag=2), "token counts")
    yield Sample(init_v2_args(rng, 7, 3, 4, 8, D.ACL_FLOAT, activeNum=10), "activeNum 10 of 21")
    drop = {"dropPadMode": 1, "expertCapacity": 3, "expertTokensBeforeCapacityFlag": True}
    yield Sample(init_v2_args(rng, 9, 2, 6, 3, D.ACL_BF16, **drop), "drop and pad, capacity 3")
    args = init_v2_args(rng, 8, 1, 3, 5, D.ACL_FLOAT16, dropPadMode=1, expertCapacity=8)
    yield Sample(
        {**args, "expertIdx": np.asarray(args["expertIdx"]).reshape(-1).astype(np.int64)}, "1-D int64, pad only"
    )
    many = init_v2_args(rng, 60, 4, 33, 16, D.ACL_FLOAT, expertTokensCountOrCumsumFlag=1)
    yield Sample(many, "240 copies over 16 experts")
    empty = {"x": np.zeros((0, 4), np.float32), "expertIdx": np.zeros((0, 2), np.int32)}
    yield Sample({**init_v2_args(rng, 1, 1, 4, 3, D.ACL_FLOAT), **empty}, "no rows")


def _init_v2_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    base = init_v2_args(rng, 4, 2, 3, 6, D.ACL_FLOAT, expertTokensCountOrCumsumFlag=1)
    yield ErrorSample({**base, "dropPadMode": 2}, TILING, "dropPadMode 2")
    yield ErrorSample({**base, "expertTokensCountOrCumsumFlag": 3}, TILING, "count flag 3")
    yield ErrorSample({**base, "activeNum": -1}, TILING, "negative activeNum")
    yield ErrorSample({**base, "expertNum": 0}, TILING, "counts of no experts")
    yield ErrorSample({**base, "dropPadMode": 1, "expertCapacity": 0}, TILING, "drop mode without capacity")
    yield ErrorSample({**base, "dropPadMode": 1, "expertCapacity": 5}, TILING, "capacity above numRows")
    yield ErrorSample({**base, "x": S.array(rng, (5, 3), D.ACL_FLOAT)}, TILING, "x and expertIdx rows differ")
    yield ErrorSample({**base, "expertIdx": np.zeros((4, 2), np.int16)}, INVALID, "int16 expertIdx")
    bad = np.asarray(base["expertIdx"]).copy()
    bad[2, 1] = 6
    yield ErrorSample({**base, "expertIdx": bad}, INVALID, "an expert number of expertNum (when the operator runs)")
    bad = bad.copy()
    bad[2, 1] = -1
    plain = {**base, "expertTokensCountOrCumsumFlag": 0}
    yield ErrorSample({**plain, "expertIdx": bad}, INVALID, "a negative expert number (when the operator runs)")


_MoeInitRoutingV2 = OpSpec(
    "MoeInitRoutingV2",
    FAMILY,
    (
        tensor("x", FLOATS),
        tensor("expertIdx", I32_64),
        int_attr("activeNum"),
        int_attr("expertCapacity"),
        int_attr("expertNum"),
        int_attr("dropPadMode"),
        int_attr("expertTokensCountOrCumsumFlag"),
        bool_attr("expertTokensBeforeCapacityFlag"),
        out("expandedXOut", FLOATS, c_type="const aclTensor*"),
        out("expandedRowIdxOut", I32, c_type="const aclTensor*"),
        out("expertTokensCountOrCumsumOut", I32, optional=True, c_type="const aclTensor*"),
        out("expertTokensBeforeCapacityOut", I32, optional=True, c_type="const aclTensor*"),
    ),
    _init_v2_infer,
    samples=_init_v2_samples,
    error_samples=_init_v2_errors,
    summary="sort token copies by expert (flat positions), gather or drop/pad them per expert capacity, count tokens",
)


# ----------------------------------------------------------------------------- MoeInitRoutingV3
V3_X = frozenset({*FLOATS, D.ACL_INT8})
V3_EXPANDED = frozenset({*FLOATS, D.ACL_INT8})
F32 = frozenset({D.ACL_FLOAT})
I64 = frozenset({D.ACL_INT64})
V3_QUANT_MODES = (-1, 0, 1)
"""quantMode values implemented: none, static int8, dynamic int8 (2 and 3, MXFP8, are refused with 161002)."""
V3_MAX_EXPERTS = 10240
V3_MAX_KEY_VALUE_EXPERTS = 5120


def init_v3_range(args: Mapping[str, Any]) -> tuple[int, int]:
    """(expertStart, expertEnd) of a MoeInitRoutingV3 call: activeExpertRangeOptional, or all experts when null."""
    given = args.get("activeExpertRangeOptional")
    if given is None:
        return 0, int(args["expertNum"])
    values = tuple(getattr(given, "values", given))
    return int(values[0]), int(values[1])


def init_v3_rows(rows: int, k: int, active: int) -> int:
    """Rows of a dropless MoeInitRoutingV3 expandedXOut: all rows·k copies, or min(activeNum, rows·k)."""
    return min(active, rows * k) if active > 0 else rows * k


def _init_v3_checks(call: Call) -> tuple[int, int, int, int]:
    """The attribute rules (561002, or 161002 for the modes not implemented); (rows, k, start, end)."""
    x, expert = tensor_arg(call, "x"), tensor_arg(call, "expertIdx")
    a = call.args
    active, capacity, experts = int(a["activeNum"]), int(a["expertCapacity"]), int(a["expertNum"])
    drop, kind, quant, row_type = (int(a[n]) for n in ("dropPadMode", "expertTokensNumType", "quantMode", "rowIdxType"))
    if x.rank != 2 or expert.rank != 2 or expert.shape[0] != x.shape[0]:
        raise tiling_error(
            f"x [rows, h] and expertIdx [rows, k] must be 2-D with equal rows, not {list(x.shape)}"
            f" and {list(expert.shape)}"
        )
    rows, k = x.shape[0], expert.shape[1]
    if quant in (2, 3):
        raise invalid(
            f"quantMode={quant} (MXFP8, Ascend 950 only) is not implemented by acl-core: its block scales"
            " are not transcribed and proven yet"
        )
    if quant not in V3_QUANT_MODES:
        raise tiling_error(f"quantMode={quant} must be -1 (none), 0 (static int8) or 1 (dynamic int8)")
    if drop not in (0, 1):
        raise tiling_error(f"dropPadMode={drop} must be 0 (dropless) or 1 (drop and pad)")
    if kind not in (0, 1, 2):
        raise tiling_error(f"expertTokensNumType={kind} must be 0 (cumsum), 1 (count) or 2 (key_value)")
    if row_type not in (0, 1):
        raise tiling_error(f"rowIdxType={row_type} must be 0 (gather index) or 1 (scatter index)")
    if active < 0:
        raise tiling_error(f"activeNum={active} must not be negative")
    bound = V3_MAX_KEY_VALUE_EXPERTS if kind == 2 else V3_MAX_EXPERTS
    if not 0 < experts <= bound:
        raise tiling_error(f"expertNum={experts} must lie in [1, {bound}]")
    given = a.get("activeExpertRangeOptional")
    if given is not None and len(getattr(given, "values", given)) != 2:
        raise tiling_error("activeExpertRangeOptional must hold two values [expertStart, expertEnd)")
    start, end = init_v3_range(a)
    if not 0 <= start < end <= experts:
        raise tiling_error(f"activeExpertRangeOptional [{start}, {end}) must satisfy 0 <= start < end <= {experts}")
    if drop == 1:
        if (start, end) != (0, experts):
            raise tiling_error(f"drop/pad mode needs activeExpertRangeOptional [0, {experts}), not [{start}, {end})")
        if not 0 < capacity <= rows:
            raise tiling_error(f"drop/pad mode needs expertCapacity in (0, {rows}], not {capacity}")
        if bool(a["expertTokensNumFlag"]) and kind != 1:
            raise tiling_error(f"drop/pad mode counts tokens only as counts (expertTokensNumType 1), not {kind}")
        if quant != -1:
            raise invalid(
                f"quantMode={quant} with dropPadMode 1 is not implemented by acl-core: CANN documents no"
                " quantised drop/pad layout"
            )
    if quant != -1 and x.dtype == D.ACL_INT8:
        raise invalid(f"x of dtype int8 cannot be quantised again (quantMode={quant})")
    return rows, k, start, end


def _init_v3_scales(call: Call, rows: int, hidden: int, quant: int, start: int, end: int) -> bool:
    """Check scaleOptional / offsetOptional for the quant mode; True when expandedScaleOut is written."""
    scale, offset = call.args.get("scaleOptional"), call.args.get("offsetOptional")
    if quant == 0:
        for name, t in (("scaleOptional", scale), ("offsetOptional", offset)):
            if t is None:
                raise nullptr(f"{name} is required by static quantisation (quantMode 0)")
            if tuple(t.shape) != (1,):
                raise tiling_error(f"{name} must have shape [1] for static quantisation, not {list(t.shape)}")
        return False
    if scale is None:
        return quant == 1
    want = (rows,) if quant == -1 else (end - start, hidden)
    if tuple(scale.shape) != want:
        raise tiling_error(f"scaleOptional must have shape {list(want)} for quantMode {quant}, not {list(scale.shape)}")
    return True


def _init_v3_infer(call: Call) -> Infos:
    rows, k, start, end = _init_v3_checks(call)
    x = tensor_arg(call, "x")
    a = call.args
    hidden = x.shape[1]
    experts, capacity, drop = int(a["expertNum"]), int(a["expertCapacity"]), int(a["dropPadMode"])
    quant, kind, flag = int(a["quantMode"]), int(a["expertTokensNumType"]), bool(a["expertTokensNumFlag"])
    with_scale = _init_v3_scales(call, rows, hidden, quant, start, end)
    if drop == 1:
        shape: Shape = (experts, capacity, hidden)
        slots = experts * capacity
    else:
        slots = init_v3_rows(rows, k, int(a["activeNum"]))
        shape = (slots, hidden)
    counts = None
    if flag:
        counts = same((experts, 2) if kind == 2 else (end - start,), D.ACL_INT64)
    scales = same((slots,), D.ACL_FLOAT) if with_scale else None
    for name, info in (("expertTokensCountOrCumsumOut", counts), ("expandedScaleOut", scales)):
        if info is not None and call.args.get(name) is None and call.outputs_required:
            raise nullptr(f"{name} is null but this call writes it")
    _check_given_out(call, "expandedXOut", shape)
    return {
        "expandedXOut": same(shape, x.dtype if quant == -1 else D.ACL_INT8),
        "expandedRowIdxOut": same((rows * k,), D.ACL_INT32),
        "expertTokensCountOrCumsumOut": counts,
        "expandedScaleOut": scales,
    }


def init_v3_args(rng: np.random.Generator, rows: int, k: int, hidden: int, experts: int, dt: D, **attrs: Any) -> dict:
    """Arguments of a MoeInitRoutingV3 call: ``k`` distinct experts per token among ``experts``, no quantisation."""
    expert, _ = routing_indices(rng, rows, experts, k)
    args: dict[str, Any] = {"x": S.array(rng, (rows, hidden), dt), "expertIdx": expert}
    args |= {"scaleOptional": None, "offsetOptional": None, "activeNum": 0, "expertCapacity": 0}
    args |= {"expertNum": experts, "dropPadMode": 0, "expertTokensNumType": 1, "expertTokensNumFlag": True}
    args |= {"quantMode": -1, "activeExpertRangeOptional": None, "rowIdxType": 0}
    return {**args, **attrs}


def _init_v3_samples(rng: np.random.Generator) -> Iterable[Sample]:
    for dt in _DTYPES:
        yield Sample(init_v3_args(rng, 6, 2, 5, 4, dt, expertTokensNumType=0), f"{dt.short} dropless, cumsum")
    x8 = init_v3_args(rng, 5, 2, 7, 4, D.ACL_FLOAT, rowIdxType=1)
    yield Sample({**x8, "x": rng.integers(-128, 128, (5, 7), dtype=np.int8)}, "int8 x, scatter index")
    ranged = init_v3_args(rng, 9, 3, 4, 8, D.ACL_BF16, activeExpertRangeOptional=[2, 6])
    yield Sample(ranged, "expert range [2, 6), gather index")
    yield Sample({**ranged, "rowIdxType": 1, "activeNum": 7}, "expert range [2, 6), scatter, activeNum 7")
    yield Sample(
        init_v3_args(rng, 9, 3, 4, 8, D.ACL_FLOAT, expertTokensNumType=2, activeExpertRangeOptional=[1, 7]),
        "key_value counts in [1, 7)",
    )
    with_scale = init_v3_args(rng, 7, 2, 3, 6, D.ACL_FLOAT16, activeExpertRangeOptional=[0, 4])
    yield Sample({**with_scale, "scaleOptional": S.array(rng, (7,), D.ACL_FLOAT)}, "per-row scales carried along")
    static = init_v3_args(rng, 6, 2, 9, 5, D.ACL_FLOAT16, quantMode=0, rowIdxType=1)
    static |= {"x": (rng.standard_normal((6, 9)) * 3).astype(np.float16)}
    static |= {"scaleOptional": np.array([7.5], np.float32), "offsetOptional": np.array([-1.25], np.float32)}
    yield Sample(static, "static int8")
    yield Sample(
        {**static, "x": static["x"].astype(np.float32) * 40, "expertTokensNumFlag": False},
        "static int8 saturating, no counts",
    )
    for dt in _DTYPES:
        dyn = init_v3_args(rng, 8, 2, 33, 6, dt, quantMode=1, activeExpertRangeOptional=[1, 5])
        yield Sample(dyn, f"{dt.short} dynamic int8")
    dyn = init_v3_args(rng, 8, 2, 33, 6, D.ACL_BF16, quantMode=1, activeExpertRangeOptional=[1, 5], rowIdxType=1)
    dyn["x"][3] = 0  # a row of zeros: scale 0, codes 0
    yield Sample({**dyn, "scaleOptional": S.array(rng, (4, 33), D.ACL_FLOAT, low=0.5, high=2)}, "dynamic, smooth")
    drop = {"dropPadMode": 1, "expertCapacity": 3}
    yield Sample(init_v3_args(rng, 9, 2, 6, 3, D.ACL_BF16, **drop), "drop and pad, capacity 3")
    padded = init_v3_args(rng, 8, 1, 3, 5, D.ACL_FLOAT, dropPadMode=1, expertCapacity=8, expertTokensNumFlag=False)
    yield Sample({**padded, "scaleOptional": S.array(rng, (8,), D.ACL_FLOAT)}, "pad only, scales carried")
    many = init_v3_args(rng, 60, 4, 33, 16, D.ACL_FLOAT, expertTokensNumType=0, activeExpertRangeOptional=[3, 13])
    yield Sample(many, "240 copies over 16 experts, range [3, 13)")
    empty = {"x": np.zeros((0, 4), np.float32), "expertIdx": np.zeros((0, 2), np.int32)}
    yield Sample({**init_v3_args(rng, 1, 1, 4, 3, D.ACL_FLOAT), **empty}, "no rows")


def _init_v3_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    base = init_v3_args(rng, 4, 2, 3, 6, D.ACL_FLOAT)
    yield ErrorSample({**base, "quantMode": 2}, INVALID, "MXFP8 (not implemented)")
    yield ErrorSample({**base, "quantMode": 4}, TILING, "quantMode 4")
    yield ErrorSample({**base, "dropPadMode": 2}, TILING, "dropPadMode 2")
    yield ErrorSample({**base, "expertTokensNumType": 3}, TILING, "expertTokensNumType 3")
    yield ErrorSample({**base, "rowIdxType": 2}, TILING, "rowIdxType 2")
    yield ErrorSample({**base, "activeNum": -1}, TILING, "negative activeNum")
    yield ErrorSample({**base, "expertNum": 0}, TILING, "no experts")
    yield ErrorSample({**base, "expertNum": 5121, "expertTokensNumType": 2}, TILING, "key_value past 5120 experts")
    yield ErrorSample({**base, "activeExpertRangeOptional": [3, 3]}, TILING, "empty expert range")
    yield ErrorSample({**base, "activeExpertRangeOptional": [0, 7]}, TILING, "range past expertNum")
    yield ErrorSample({**base, "activeExpertRangeOptional": [0, 2, 4]}, TILING, "range of three values")
    yield ErrorSample({**base, "dropPadMode": 1, "expertCapacity": 0}, TILING, "drop mode without capacity")
    yield ErrorSample(
        {**base, "dropPadMode": 1, "expertCapacity": 2, "activeExpertRangeOptional": [1, 6]},
        TILING,
        "drop mode on part of the experts",
    )
    yield ErrorSample(
        {**base, "dropPadMode": 1, "expertCapacity": 2, "expertTokensNumType": 0}, TILING, "drop mode with cumsum"
    )
    yield ErrorSample(
        {**base, "dropPadMode": 1, "expertCapacity": 2, "quantMode": 1}, INVALID, "quantised drop/pad (not implemented)"
    )
    yield ErrorSample({**base, "x": S.array(rng, (5, 3), D.ACL_FLOAT)}, TILING, "x and expertIdx rows differ")
    yield ErrorSample({**base, "expertIdx": np.zeros((4, 2), np.int64)}, INVALID, "int64 expertIdx")
    yield ErrorSample({**base, "quantMode": 0}, NULLPTR, "static quantisation without scale")
    static = {"quantMode": 0, "scaleOptional": np.array([1, 2], np.float32)}
    static["offsetOptional"] = np.array([0], np.float32)
    yield ErrorSample({**base, **static}, TILING, "static scale of two values")
    yield ErrorSample(
        {**base, "quantMode": 1, "scaleOptional": np.ones((5, 3), np.float32)},
        TILING,
        "dynamic smooth scales for the wrong expert count",
    )
    yield ErrorSample({**base, "scaleOptional": np.ones((3,), np.float32)}, TILING, "per-row scales of 3 rows, not 4")
    int8 = {**base, "x": np.zeros((4, 3), np.int8), "quantMode": 1}
    yield ErrorSample(int8, INVALID, "int8 x quantised again")


_MoeInitRoutingV3 = OpSpec(
    "MoeInitRoutingV3",
    FAMILY,
    (
        tensor("x", V3_X),
        tensor("expertIdx", I32),
        tensor("scaleOptional", F32, optional=True, max_rank=2),
        tensor("offsetOptional", F32, optional=True),
        int_attr("activeNum"),
        int_attr("expertCapacity"),
        int_attr("expertNum"),
        int_attr("dropPadMode"),
        int_attr("expertTokensNumType"),
        bool_attr("expertTokensNumFlag"),
        int_attr("quantMode"),
        int_array("activeExpertRangeOptional", optional=True),
        int_attr("rowIdxType"),
        out("expandedXOut", V3_EXPANDED, c_type="const aclTensor*"),
        out("expandedRowIdxOut", I32, c_type="const aclTensor*"),
        out("expertTokensCountOrCumsumOut", I64, optional=True, c_type="const aclTensor*"),
        out("expandedScaleOut", F32, optional=True, c_type="const aclTensor*"),
    ),
    _init_v3_infer,
    samples=_init_v3_samples,
    error_samples=_init_v3_errors,
    summary="sort token copies by expert within an active range, gather (optionally int8-quantised) or drop/pad them,"
    " count tokens per expert (cumsum, count or key-value)",
)


def _unpermute_length(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> int:
    """MoeTokenUnpermute's roundings per output: a product and a sum per expert copy."""
    shape: tuple[int, ...] = tuple(getattr(args.get("probsOptional"), "shape", ()))
    return 2 * (int(shape[-1]) if len(shape) == 2 else 1)


def _permute_grad_length(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> int:
    """MoeTokenPermuteGrad's roundings per output: one sum per copy of the token."""
    return max(int(args.get("numTopk", 1) or 1), 1)


def _unpermute_grad_length(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> int:
    """MoeTokenUnpermuteGrad's roundings per output: probsGrad's product and sum per hidden element (the longest)."""
    shape = tuple(getattr(args.get("permutedTokens"), "shape", ()))
    return 2 * (int(shape[-1]) if len(shape) == 2 else 1)


def _gating_k_length(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> int:
    """MoeGatingTopK's summed terms: the experts of a row (softmax) plus the k chosen weights (renorm)."""
    shape = getattr(args.get("x"), "shape", ())
    return (int(shape[-1]) if shape else 1) + int(args.get("k", 1) or 1)


def _gating_k_scale(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> dict[str, Any]:
    """MoeGatingTopK's error scale: ``|y|·(1 + range(x))`` for yOut and outOut (the softmax bound, ≥ sigmoid's)."""
    scale = top_k_softmax_scale("x", "yOut")(args, outputs)
    norm = top_k_softmax_scale("x", "outOut")(args, outputs)
    return {**scale, **norm}


def _gating_k_backward_length(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> int:
    """MoeGatingTopKBackward's summed terms: k chosen scores (D), k products (beta), up to k repeats scattered."""
    shape: tuple[int, ...] = tuple(getattr(args.get("gradY"), "shape", ()))
    return 3 * (int(shape[-1]) if len(shape) == 2 else 1)


def _gating_k_backward_scale(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> dict[str, Any]:
    """``|x(1 - x)|/D · Σ_p s(|gradY_p| + Σ_q w_q|gradY_q|)`` over the p reaching each expert (cancellation)."""
    x = np.asarray(args["xNorm"], np.float64)
    g = np.abs(np.asarray(args["gradY"]).astype(np.float64)) * abs(as_float32(float(args["routedScalingFactor"])))
    idx = np.asarray(args["expertIdx"]).astype(np.int64)
    if x.size == 0 or g.size == 0 or idx.min() < 0 or idx.max() >= x.shape[1]:
        return {}
    with np.errstate(all="ignore"):
        chosen = np.take_along_axis(x, idx, axis=1)
        d = np.abs(chosen.sum(axis=1, keepdims=True) + as_float32(float(args["eps"])))
        beta = (np.abs(chosen) / d * g).sum(axis=1, keepdims=True)
        terms = (g + beta) / d
        acc = np.zeros_like(x)
        np.add.at(acc, (np.arange(x.shape[0])[:, None], idx), terms)
        return {"out": np.abs(x * (1.0 - x)) * acc}


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
    # softmax (x - max, exp, the row sum, a division) or sigmoid, then the top-k weights' sum, + eps, a
    # division and the scaling; the experts are chosen without rounding (docstring: ranking keys)
    "MoeGatingTopK": composite(
        steps=8, length_of=_gating_k_length, scale_of=_gating_k_scale, reason="a row softmax or sigmoid, then renorm"
    ),
    # D = Σ x + eps and beta = Σ w·s·g over a row's k experts; (s·g - beta)/D, the scatter's sums (repeats) and
    # x(1 - x)·: a handful of roundings after the two sums, whose cancellation the scale carries
    "MoeGatingTopKBackward": composite(
        steps=8,
        length_of=_gating_k_backward_length,
        scale_of=_gating_k_backward_scale,
        reason="two row sums over the k chosen experts, then (s·g - beta)/D scattered and times x(1 - x)",
    ),
    "MoeTokenPermute": exact("routing: every permuteTokensOut element is a copy of a tokens element"),
    "MoeInitRoutingV2": exact("routing: every expandedXOut element is a copy of an x element or a padding zero"),
    "MoeInitRoutingV3": exact(
        "routing: copies of x or padding zeros; the int8 codes and float32 scales are IEEE float32 (dynamic)"
        " or float16 (static) steps every backend rounds alike"
    ),
    "MoeTokenUnpermute": reduction(length_of=_unpermute_length, reason="Σ_k probs·permutedTokens: γ_n·Σ|p||t|"),
    "MoeTokenPermuteGrad": reduction(length_of=_permute_grad_length, reason="Σ_j of numTopk gradient rows: γ_n·Σ|g|"),
    # permutedTokensGradOut is one exact product rounded once (within the class's 1 ulp); probsGradOut a dot product
    "MoeTokenUnpermuteGrad": reduction(
        length_of=_unpermute_grad_length, reason="Σ_h grad·permutedTokens over the hidden axis: γ_n·Σ|g||t|"
    ),
}
"""Accuracy classes of the MoE pipeline."""

SPECS: list[OpSpec] = with_accuracy(
    [
        _MoeGatingTopKSoftmax,
        _MoeInitRouting,
        _MoeFinalizeRouting,
        _MoeGatingTopK,
        _MoeGatingTopKBackward,
        _MoeTokenPermute,
        _MoeTokenUnpermute,
        _MoeTokenPermuteGrad,
        _MoeTokenUnpermuteGrad,
        _MoeInitRoutingV2,
        _MoeInitRoutingV3,
    ],
    ACCURACY,
)

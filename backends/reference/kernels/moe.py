"""Reference kernels of the MoE family: gating top-k, token routing by expert, and the weighted combine.

Formulas and tie rules are those of :mod:`acl_core.spec.ops.moe`; values are computed in float64.
"""

from __future__ import annotations

import math

import numpy as np

from acl_core.errors import AclnnError, AclnnStatus
from acl_core.spec.ops.moe import MAX_PERMUTE_ELEMENTS
from acl_reference.call import RefCall
from acl_reference.kernels import kernel

Array = np.ndarray


def _launch_error(message: str) -> AclnnError:
    return AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, message)


def softmax_top_k(logits: Array, k: int) -> tuple[Array, Array]:
    """(probabilities, experts) of the k largest softmax values per row, in the order of the logits.

    Softmax is strictly increasing in its input, so the exact probabilities rank as the logits do:
    ranking by the logits is exact, where ranking by computed probabilities would let one ulp of
    ``exp`` decide between two close logits. Equal logits go to the lower expert; a row whose
    probabilities are all NaN (a NaN or +Inf logit, or every logit -Inf) keeps expert order.
    """
    if logits.shape[-1] == 0:  # no experts, so k is 0
        return logits, np.zeros(logits.shape, np.int64)
    with np.errstate(all="ignore"):
        top = logits.max(axis=-1, keepdims=True)
        e = np.exp(logits - top)
        probs = e / e.sum(axis=-1, keepdims=True)
    keys = np.where(np.isfinite(top), logits, 0.0)
    order = np.argsort(-keys, axis=-1, kind="stable")[:, :k]
    return np.take_along_axis(probs, order, axis=-1), order


@kernel("MoeGatingTopKSoftmax")
def gating_top_k_softmax(k: RefCall) -> None:
    """yOut, expertIdxOut = topk(softmax(x)); rowIdxOut[i][j] = j*numRows + i; finished rows get expert E."""
    x = k.read("x", np.float64)
    top = int(k.value("k"))
    experts = x.shape[-1]
    flat = x.reshape(-1, experts)
    rows = flat.shape[0]
    values, idx = softmax_top_k(flat, top)
    if k["finishedOptional"] is not None:
        finished = k.read("finishedOptional").reshape(-1).astype(bool)
        idx[finished] = experts
    row_idx = np.arange(top)[None, :] * rows + np.arange(rows)[:, None]
    shape = (*x.shape[:-1], top)
    k.write("yOut", values.reshape(shape))
    k.write("expertIdxOut", idx.reshape(shape))
    k.write("rowIdxOut", row_idx.reshape(shape))


@kernel("MoeInitRouting")
def init_routing(k: RefCall) -> None:
    """Sort (expert, rowIdx) pairs by expert, stably; scatter positions back; gather the active rows of x."""
    x = k.read("x")
    experts = k.read("expertIdx").astype(np.int64).reshape(-1)
    row_idx = k.read("rowIdx").astype(np.int64).reshape(-1)
    rows = x.shape[0]
    total = experts.size
    if not np.array_equal(np.sort(row_idx), np.arange(total)):
        raise _launch_error(f"rowIdx must hold each of 0..{total - 1} exactly once (as MoeGatingTopKSoftmax makes it)")
    order = np.argsort(experts, kind="stable")
    sorted_rows = row_idx[order]
    expanded_row = np.empty(total, np.int64)
    expanded_row[sorted_rows] = np.arange(total)
    active = min(rows, int(k.value("activeNum"))) * (total // rows if rows else 0)
    k.write("expandedXOut", x[sorted_rows[:active] % rows] if rows else x[:0])
    k.write("expandedRowIdxOut", expanded_row)
    k.write("expandedExpertIdxOut", experts[order])


@kernel("MoeFinalizeRouting")
def finalize_routing(k: RefCall) -> None:
    """out[i] = x1[i] + x2[i] + Σ_k scales[i,k] * (expandedX[expandedRowIdx[i + k*numRows]] + bias[expert[i,k]])."""
    expanded = k.read("expandedX", np.float64)
    x1 = k.read("x1", np.float64)
    bias = k.read("bias", np.float64)
    scales = k.read("scales", np.float64)
    dest = k.read("expandedRowIdx").astype(np.int64)
    experts = k.read("expandedExpertIdx").astype(np.int64)
    rows, top = scales.shape
    if dest.size and (dest.min() < 0 or dest.max() >= expanded.shape[0]):
        raise _launch_error(f"expandedRowIdx values must lie in [0, {expanded.shape[0] - 1}]")
    if experts.size and (experts.min() < 0 or experts.max() >= bias.shape[0]):
        raise _launch_error(f"expandedExpertIdx values must lie in [0, {bias.shape[0] - 1}] (rows of bias)")
    gathered = expanded[dest.reshape(top, rows).T]  # (rows, k, H): the copy of row i sent to its j-th expert
    result = x1 + np.einsum("rk,rkh->rh", scales, gathered + bias[experts])
    if k["x2Optional"] is not None:
        result = result + k.read("x2Optional", np.float64)
    k.write("out", result)


# ----------------------------------------------------------------------------- exact ranking arithmetic
LN2_HI = float.fromhex("0x1.62e42fee00000p-1")
"""ln 2's leading 32 bits: ``n·LN2_HI`` is exact for the ``|n| ≤ 1024`` of the range reduction."""
LN2_LO = float.fromhex("0x1.a39ef35793c76p-33")
LOG2E = float.fromhex("0x1.71547652b82fep+0")
EXP_TERMS = 14
"""Taylor terms of ``e^r`` for ``|r| ≤ ln2/2``: the 14th is below 2^-60 of the sum."""
EXP_HIGH, EXP_LOW = 709.0, -708.0


def ranking_exp(t: Array) -> Array:
    """``e^t`` in float64 from +, -, × and ``rint`` alone, each rounded once in a fixed order.

    Every backend can compute this bit for bit (a GPU with ``__dadd_rn`` / ``__dmul_rn``, never a fused
    multiply-add), so a ranking or a threshold decided on it is decided alike everywhere; it is within
    a few ulps of ``e^t`` (tests/ops/test_moe.py). Above 709 it is +Inf, below -708 it is 0 (both far
    outside what a softmax or sigmoid of float32 logits can tell apart); NaN stays NaN.
    """
    t = np.asarray(t, np.float64)
    with np.errstate(all="ignore"):
        inside = (t >= EXP_LOW) & (t <= EXP_HIGH)
        u = np.where(inside, t, 0.0)
        n = np.rint(u * LOG2E)
        r = (u - n * LN2_HI) - n * LN2_LO
        p = np.full(t.shape, 1.0 / math.factorial(EXP_TERMS - 1))
        for j in range(EXP_TERMS - 2, -1, -1):
            p = p * r + 1.0 / math.factorial(j)
        scale = ((n.astype(np.int64) + 1023) << 52).view(np.float64)
        e = p * scale
    e = np.where(t > EXP_HIGH, np.inf, np.where(t < EXP_LOW, 0.0, e))
    return np.where(np.isnan(t), np.nan, e)


def tree_sum(values: Array) -> Array:
    """Sums along the last axis in a fixed order: padded with zeros to a power of two, then halves added.

    ``a[:h] + a[h:]`` until one is left: the order a block's shared-memory tree follows.
    """
    n = values.shape[-1]
    width = 1 << max(n - 1, 0).bit_length()
    a = np.concatenate([values, np.zeros((*values.shape[:-1], width - n))], axis=-1)
    while a.shape[-1] > 1:
        h = a.shape[-1] // 2
        a = a[..., :h] + a[..., h:]
    return a[..., 0]


def gating_norm(x: Array, norm_type: int) -> Array:
    """normOut of MoeGatingTopK, row by row: the softmax (``ranking_exp`` and :func:`tree_sum`) or the sigmoid."""
    with np.errstate(all="ignore"):
        if norm_type == 1:
            return 1.0 / (1.0 + ranking_exp(-x))
        if x.shape[-1] == 0:
            return x
        e = ranking_exp(x - x.max(axis=-1, keepdims=True))
        return e / tree_sum(e)[..., None]


def rank_descending(keys: Array) -> Array:
    """Positions of each row's keys from largest to smallest: ties to the lower position, NaN last, -0 = 0."""
    return np.argsort(-np.where(keys == 0, 0.0, keys), axis=-1, kind="stable")


def gating_top_k(x: Array, bias: Array | None, k: int, k_group: int, groups: int, mode: int, norm_type: int) -> tuple:
    """(normOut, experts) of MoeGatingTopK (see the spec's docstring for the ranking keys)."""
    rows, experts = x.shape
    norm = gating_norm(x, norm_type)
    value = norm if bias is None else norm + bias[None, :]
    key = x if bias is None else value
    size = experts // groups
    order = rank_descending(key.reshape(rows, groups, size))
    if mode == 0:
        score = np.take_along_axis(key.reshape(rows, groups, size), order[..., :1], axis=-1)[..., 0]
    else:
        top2 = np.take_along_axis(value.reshape(rows, groups, size), order[..., :2], axis=-1)
        score = top2[..., 0] + top2[..., 1]
    chosen = rank_descending(score)[:, :k_group]
    keep = np.zeros((rows, groups), bool)
    np.put_along_axis(keep, chosen, True, axis=-1)
    masked = np.where(np.repeat(keep, size, axis=-1), key, -np.inf)
    return norm, rank_descending(masked)[:, :k]


@kernel("MoeGatingTopK")
def gating_top_k_kernel(k: RefCall) -> None:
    """yOut, expertIdxOut: group-limited top-k of normOut (+ bias); yOut renormalised and scaled; outOut = normOut."""
    x = k.read("x", np.float64)
    bias = k.read("biasOptional", np.float64) if k["biasOptional"] is not None else None
    top, k_group, groups = int(k.value("k")), int(k.value("kGroup")), int(k.value("groupCount"))
    mode, renorm, norm_type = int(k.value("groupSelectMode")), int(k.value("renorm")), int(k.value("normType"))
    scaling = float(np.float32(k.value("routedScalingFactor")))
    eps = float(np.float32(k.value("eps")))
    norm, experts = gating_top_k(x, bias, top, k_group, groups, mode, norm_type)
    y = np.take_along_axis(norm, experts, axis=-1)
    with np.errstate(all="ignore"):
        if norm_type == 1 or renorm == 1:
            y = y / (y.sum(axis=-1, keepdims=True) + eps)
        y = y * scaling
    k.write("yOut", y)
    k.write("expertIdxOut", experts)
    k.write("outOut", norm)


@kernel("MoeGatingTopKBackward")
def gating_top_k_backward(k: RefCall) -> None:
    """out = xNorm(1 - xNorm)·gradNorm, gradNorm the renormalisation's gradient scattered to the chosen experts."""
    x = k.read("xNorm", np.float64)
    g = k.read("gradY", np.float64)
    idx = k.read("expertIdx").astype(np.int64)
    rows, experts = x.shape
    if idx.size and (idx.min() < 0 or idx.max() >= experts):
        raise _launch_error(f"expertIdx values must lie in [0, {experts - 1}]")
    scaling = float(np.float32(k.value("routedScalingFactor")))
    eps = float(np.float32(k.value("eps")))
    with np.errstate(all="ignore"):
        chosen = np.take_along_axis(x, idx, axis=1)
        d = chosen.sum(axis=1, keepdims=True) + eps
        scaled = g * scaling
        beta = (chosen / d * scaled).sum(axis=1, keepdims=True)
        grad_norm = np.zeros_like(x)
        np.add.at(grad_norm, (np.arange(rows)[:, None], idx), (scaled - beta) / d)
        k.write("out", x * (1.0 - x) * grad_norm)


# ----------------------------------------------------------------------------- permute / unpermute
@kernel("MoeTokenPermute")
def token_permute(k: RefCall) -> None:
    """Stable sort of the flattened expert numbers; row p of the output is token sorted[p] // topK."""
    tokens = k.read("tokens")
    indices = k.read("indices").astype(np.int64)
    top_k = indices.shape[1] if indices.ndim == 2 else 1
    flat = indices.reshape(-1)
    if flat.size and (flat.min() < 0 or flat.max() >= MAX_PERMUTE_ELEMENTS):
        raise _launch_error(f"indices values must lie in [0, {MAX_PERMUTE_ELEMENTS - 1}]")
    order = np.argsort(flat, kind="stable")
    inverse = np.empty(flat.size, np.int64)
    inverse[order] = np.arange(flat.size)
    kept = k["permuteTokensOut"].shape[0]
    k.write("permuteTokensOut", tokens[order[:kept] // top_k])
    k.write("sortedIndicesOut", inverse)


@kernel("MoeTokenUnpermute")
def token_unpermute(k: RefCall) -> None:
    """out[i] = Σ_j permutedTokens[sortedIndices[i*topK + j]] · probs[i, j] (probs 1 and topK 1 without it)."""
    tokens = k.read("permutedTokens", np.float64)
    order = k.read("sortedIndices").astype(np.int64)
    if order.size and (order.min() < 0 or order.max() >= tokens.shape[0]):
        raise _launch_error(f"sortedIndices values must lie in [0, {tokens.shape[0] - 1}]")
    if k["probsOptional"] is not None:
        probs = k.read("probsOptional", np.float64)
    else:
        probs = np.ones((order.size, 1))
    rows, top_k = probs.shape
    gathered = tokens[order].reshape(rows, top_k, tokens.shape[1])
    k.write("out", np.einsum("rk,rkh->rh", probs, gathered))


@kernel("MoeTokenPermuteGrad")
def token_permute_grad(k: RefCall) -> None:
    """out[t] = Σ_j permutedOutputGrad[sortedIndices[t*numTopk + j]]; positions past the grad's rows add 0."""
    grad = k.read("permutedOutputGrad", np.float64)
    order = k.read("sortedIndices").astype(np.int64)
    top_k = int(k.value("numTopk"))
    if order.size and (order.min() < 0 or order.max() >= order.size):
        raise _launch_error(f"sortedIndices values must lie in [0, {order.size - 1}]")
    kept = grad.shape[0]
    padded = np.concatenate([grad, np.zeros((order.size - kept, grad.shape[1]))])  # dropped copies: zero rows
    k.write("out", padded[order].reshape(order.size // top_k, top_k, grad.shape[1]).sum(axis=1))


@kernel("MoeTokenUnpermuteGrad")
def token_unpermute_grad(k: RefCall) -> None:
    """permutedTokensGradOut[sortedIndices[t*K + j]] = grad[t]·probs[t, j]; probsGradOut[t, j] = grad[t]·tokens[...]."""
    tokens = k.read("permutedTokens", np.float64)
    grad = k.read("unpermutedTokensGrad", np.float64)
    order = k.read("sortedIndices").astype(np.int64)
    total, hidden = tokens.shape
    if not np.array_equal(np.sort(order), np.arange(total)):
        raise _launch_error(f"sortedIndices must hold each of 0..{total - 1} exactly once")
    with_probs = k["probsOptional"] is not None
    probs = k.read("probsOptional", np.float64) if with_probs else np.ones((total, 1))
    rows, top_k = probs.shape
    weighted = (grad[:, None, :] * probs[:, :, None]).reshape(total, hidden)  # row i = t*K + j
    result = np.empty((total, hidden))
    result[order] = weighted
    k.write("permutedTokensGradOut", result)
    if with_probs:
        gathered = tokens[order].reshape(rows, top_k, hidden)
        k.write("probsGradOut", np.einsum("th,tkh->tk", grad, gathered))


# ----------------------------------------------------------------------------- MoeInitRoutingV2
@kernel("MoeInitRoutingV2")
def init_routing_v2(k: RefCall) -> None:
    """Stable sort of the flat expert numbers; dropless: gather the first rows; drop/pad: capacity slots per expert."""
    x = k.read("x")
    flat = k.read("expertIdx").astype(np.int64).reshape(-1)
    rows = x.shape[0]
    top_k = flat.size // rows if rows else 1
    experts, capacity = int(k.value("expertNum")), int(k.value("expertCapacity"))
    drop, count_flag = int(k.value("dropPadMode")), int(k.value("expertTokensCountOrCumsumFlag"))
    bounded = drop == 1 or count_flag > 0
    if flat.size and (flat.min() < 0 or (bounded and flat.max() >= experts)):
        high = f"{experts - 1}]" if bounded else "..."
        raise _launch_error(f"expertIdx values must lie in [0, {high}")
    order = np.argsort(flat, kind="stable")
    ranked = flat[order]
    counts = np.bincount(ranked, minlength=experts)[:experts] if bounded else None
    if drop == 0:
        expanded_row = np.empty(flat.size, np.int64)
        expanded_row[order] = np.arange(flat.size)
        kept = k["expandedXOut"].shape[0]
        k.write("expandedXOut", x[order[:kept] // top_k])
        k.write("expandedRowIdxOut", expanded_row)
        if count_flag > 0 and counts is not None:
            k.write("expertTokensCountOrCumsumOut", np.cumsum(counts) if count_flag == 1 else counts)
        return
    first = np.searchsorted(ranked, ranked, side="left")
    within = np.arange(flat.size) - first
    fits = within < capacity
    slot = ranked * capacity + within
    expanded_row = np.full(flat.size, -1, np.int64)
    expanded_row[order[fits]] = slot[fits]
    out = np.zeros((experts * capacity, x.shape[1]), x.dtype)
    out[slot[fits]] = x[order[fits] // top_k]
    k.write("expandedXOut", out.reshape(experts, capacity, x.shape[1]))
    k.write("expandedRowIdxOut", expanded_row)
    if k["expertTokensBeforeCapacityOut"] is not None and bool(k.value("expertTokensBeforeCapacityFlag")):
        k.write("expertTokensBeforeCapacityOut", counts)


# ----------------------------------------------------------------------------- MoeInitRoutingV3
def int8_codes(v: Array) -> Array:
    """float values to int8 codes: round half to even, NaN to 0, saturated to [-128, 127]."""
    with np.errstate(invalid="ignore"):
        return np.clip(np.nan_to_num(np.rint(v), nan=0.0, posinf=127.0, neginf=-128.0), -128, 127).astype(np.int8)


def static_quant_v3(rows: Array, scale: float, offset: float) -> Array:
    """Static int8 as CANN's golden computes it: ``round(x·scale + offset)``, inputs and each step in float16."""
    f16 = np.float16
    x16 = rows.astype(np.float32).astype(f16)
    with np.errstate(all="ignore"):
        product = (x16.astype(np.float32) * np.float32(f16(np.float32(scale)))).astype(f16)
        total = (product.astype(np.float32) + np.float32(f16(np.float32(offset)))).astype(f16)
    return int8_codes(total.astype(np.float32))


def dynamic_quant_v3(rows: Array, smooth: Array | None) -> tuple[Array, Array]:
    """Dynamic int8 per row in float32: ``v = x·smooth``, ``scale = max|v| / 127``, codes ``round(v / scale)``."""
    v = rows.astype(np.float32)
    with np.errstate(all="ignore"):
        if smooth is not None:
            v = v * smooth.astype(np.float32)
        amax = np.max(np.abs(v), axis=-1) if v.shape[-1] else np.zeros(v.shape[0], np.float32)
        scale = (amax / np.float32(127)).astype(np.float32)
        codes = int8_codes(v / scale[:, None])  # a zero scale gives 0/0 = NaN: code 0
    return codes, scale


@kernel("MoeInitRoutingV3")
def init_routing_v3(k: RefCall) -> None:
    """Stable sort of the flat expert numbers; the copies inside the active range are routed, counted, quantised."""
    from acl_core.spec.ops.moe import init_v3_range

    x = k.read("x")
    flat = k.read("expertIdx").astype(np.int64).reshape(-1)
    rows, total = x.shape[0], flat.size
    top_k = total // rows if rows else 1
    start, end = init_v3_range({n: k.value(n) for n in ("activeExpertRangeOptional", "expertNum")})
    experts, quant = int(k.value("expertNum")), int(k.value("quantMode"))
    order = np.argsort(flat, kind="stable")
    ranked = flat[order]
    lo, hi = int(np.searchsorted(ranked, start)), int(np.searchsorted(ranked, end))
    in_range = order[lo:hi]  # flat positions of the routed copies, in sorted order
    counts = np.bincount(ranked[lo:hi] - start, minlength=end - start)
    scale_in = k.read("scaleOptional", np.float32) if k["scaleOptional"] is not None else None
    if int(k.value("dropPadMode")) == 1:  # all experts are in range (the spec's rule)
        capacity = int(k.value("expertCapacity"))
        within = np.arange(hi - lo) - (np.searchsorted(ranked[lo:hi], ranked[lo:hi], side="left"))
        fits = within < capacity
        slot = ranked[lo:hi] * capacity + within
        expanded_row = np.full(total, -1, np.int64)
        expanded_row[in_range[fits]] = slot[fits]
        out = np.zeros((experts * capacity, x.shape[1]), x.dtype)
        out[slot[fits]] = x[in_range[fits] // top_k]
        k.write("expandedXOut", out.reshape(experts, capacity, x.shape[1]))
        k.write("expandedRowIdxOut", expanded_row)
        if scale_in is not None and k["expandedScaleOut"] is not None:
            scales = np.zeros(experts * capacity, np.float32)
            scales[slot[fits]] = scale_in[in_range[fits] // top_k]
            k.write("expandedScaleOut", scales)
    else:
        if int(k.value("rowIdxType")) == 1:  # scatter: routed copies first, then the rest as a rotation of the sort
            expanded_row = np.roll(order, -lo)
        else:  # gather: each routed copy's position, -1 for the others
            expanded_row = np.full(total, -1, np.int64)
            expanded_row[in_range] = np.arange(hi - lo)
        k.write("expandedRowIdxOut", expanded_row)
        slots = k["expandedXOut"].shape[0]
        used = in_range[:slots]
        src = x[used // top_k]
        scale_out = np.zeros(slots, np.float32)
        if quant == 0:
            body = static_quant_v3(
                src, float(k.read("scaleOptional", np.float32)[0]), float(k.read("offsetOptional", np.float32)[0])
            )
        elif quant == 1:
            smooth = None if scale_in is None else scale_in[ranked[lo:hi][: used.size] - start]
            body, scale_out[: used.size] = dynamic_quant_v3(src, smooth)
        else:
            body = src
            if scale_in is not None:
                scale_out[: used.size] = scale_in[used // top_k]
        out = np.zeros((slots, x.shape[1]), body.dtype)
        out[: used.size] = body
        k.write("expandedXOut", out)
        if k["expandedScaleOut"] is not None and (quant == 1 or scale_in is not None):
            k.write("expandedScaleOut", scale_out)
    if bool(k.value("expertTokensNumFlag")) and k["expertTokensCountOrCumsumOut"] is not None:
        kind = int(k.value("expertTokensNumType"))
        if kind == 2:  # key_value: (expert, count) of each expert with tokens, then a (0, 0) row, zeros after
            table = np.zeros((experts, 2), np.int64)
            busy = np.flatnonzero(counts)
            table[: busy.size, 0], table[: busy.size, 1] = busy + start, counts[busy]
            k.write("expertTokensCountOrCumsumOut", table)
        else:
            k.write("expertTokensCountOrCumsumOut", np.cumsum(counts) if kind == 0 else counts)

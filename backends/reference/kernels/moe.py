"""Reference kernels of the MoE family: gating top-k, token routing by expert, and the weighted combine.

Formulas and tie rules are those of :mod:`acl_core.spec.ops.moe`; values are computed in float64.
"""

from __future__ import annotations

import numpy as np

from acl_core.errors import AclnnError, AclnnStatus
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

"""Reference kernels of the serving family: ApplyTopKTopP and AttentionUpdate.

The top-p decision follows :mod:`acl_core.spec.ops.serving` to the bit (quantised weights from
:func:`acl_reference.kernels.moe.ranking_exp`, integer running sums); AttentionUpdate is its formula
in float64.
"""

from __future__ import annotations

import numpy as np

from acl_core.errors import AclnnError, AclnnStatus
from acl_core.spec.ops.serving import TOP_P_BITS
from acl_reference.call import RefCall
from acl_reference.kernels import kernel
from acl_reference.kernels.moe import ranking_exp

Array = np.ndarray


def top_p_weights(sorted_values: Array, kept: Array) -> Array:
    """Quantised weights ``floor(e·2^40)`` of the kept values of ascending rows (0 where not kept or NaN)."""
    top = sorted_values[:, -1:]
    with np.errstate(all="ignore"):
        e = np.where(sorted_values == top, 1.0, ranking_exp(sorted_values - top))
        q = np.floor(e * float(1 << TOP_P_BITS))
    q = np.where(kept & ~np.isnan(q), q, 0.0)
    return q.astype(np.int64)


def top_k_top_p_mask(logits: Array, p: Array | None, k: Array | None) -> Array:
    """True where ApplyTopKTopP writes -Inf (rows of float64 logits; ``k`` already checked)."""
    vocab = logits.shape[1]
    order = np.argsort(logits, axis=-1, kind="stable")  # ascending, NaN last
    values = np.take_along_axis(logits, order, axis=-1)
    masked = np.zeros(values.shape, bool)
    if k is not None:
        threshold = np.take_along_axis(values, (vocab - k)[:, None], axis=-1)
        masked |= values < threshold
    if p is not None:
        running = np.cumsum(top_p_weights(values, ~masked), axis=-1)
        total = running[:, -1:].astype(np.float64)
        with np.errstate(all="ignore"):
            cut = running.astype(np.float64) <= (1.0 - p[:, None]) * total
        cut[:, -1] = False
        masked |= cut
    result = np.empty_like(masked)
    np.put_along_axis(result, order, masked, axis=-1)
    return result


@kernel("ApplyTopKTopP")
def apply_top_k_top_p(k: RefCall) -> None:
    """out = logits, with -Inf where the top-k or the top-p filter drops the entry."""
    logits = k.read("logits")
    batch, vocab = logits.shape
    p = k.read("p", np.float64) if k["p"] is not None else None
    top = k.read("k").astype(np.int64) if k["k"] is not None else None
    if top is not None and top.size and (top.min() < 1 or top.max() > vocab):
        raise AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, f"k values must lie in [1, {vocab}]")
    if batch * vocab == 0:
        return
    mask = top_k_top_p_mask(logits.astype(np.float64), p, top)
    k.write("out", np.where(mask, np.array(-np.inf, logits.dtype), logits))


@kernel("AttentionUpdate")
def attention_update(k: RefCall) -> None:
    """out = Σ_i O_i·exp(lse_i - lse_m) with lse_m the log-sum-exp of the lse_i; lseOut = lse_m."""
    lse = np.stack(k.read_list("lse", np.float64))
    local = np.stack(k.read_list("localOut", np.float64))
    with np.errstate(all="ignore"):
        top = lse.max(axis=0)
        lse_m = top + np.log(np.exp(lse - top).sum(axis=0))
        out = (local * np.exp(lse - lse_m)[..., None]).sum(axis=0)
    k.write("out", out)
    if k["lseOut"] is not None:
        k.write("lseOut", lse_m)

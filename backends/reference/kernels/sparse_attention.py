"""Reference kernels of the sparse-attention family: LightningIndexer and SparseFlashAttention.

The rules are documented in :mod:`acl_core.spec.ops.sparse_attention`. Both walk the batches with
:func:`batches`, which turns the layouts and device lengths (checked here, 161002) into each batch's
query row positions and key rows. LightningIndexer computes its scores in float32 in the documented
order (NumPy float32 arithmetic rounds every operation once, as the device does); SparseFlashAttention
computes in float64.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from acl_core.errors import AclnnError, AclnnStatus
from acl_reference.call import RefCall
from acl_reference.kernels import kernel

F32 = np.float32
F64 = np.float64


def _launch_error(op: str, message: str) -> AclnnError:
    return AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, f"{op}: {message}")


def counts(op: str, name: str, lengths: np.ndarray | None, cumulative: bool, b: int, limit: int) -> list[int]:
    """Each batch's length from a device lengths tensor (None: ``limit`` each), checked (161002)."""
    if lengths is None:
        return [limit] * b
    values = [int(v) for v in lengths.reshape(-1)]
    if not cumulative:
        if any(v < 0 or v > limit for v in values):
            raise _launch_error(op, f"{name} values must lie in [0, {limit}]; got {values}")
        return values
    out, prev = [], 0
    for v in values:
        if v < prev:
            raise _launch_error(op, f"{name} must be non-decreasing cumulative lengths from 0; got {values}")
        out.append(v - prev)
        prev = v
    if prev != limit:
        raise _launch_error(op, f"{name} ends at {prev} but the tensor holds T={limit} tokens")
    return out


@dataclass
class Batch:
    """One batch: where its query rows sit, how many are computed, and its keys' rows."""

    index: int
    q_rows: np.ndarray
    """Positions of the batch's S1 (BSND) or Lq (TND) query rows along the query's leading (flattened) axis."""
    lq: int
    lk: int
    kv_rows: np.ndarray
    """Row positions (flattened leading axes of the key) of its Lk keys, in order."""


def batches(k: RefCall, op: str, lengths_q: str, lengths_k: str, table: str, *, key: str = "key") -> Iterator[Batch]:
    """The batches of a call, with its lengths checked as the spec says."""
    plan = k.plan
    q_shape, kv_shape = k["query"].shape, k[key].shape
    b = plan["batch"]
    lens_q = None if k[lengths_q] is None else k.read(lengths_q)
    lens_k = None if k[lengths_k] is None else k.read(lengths_k)
    if plan["q_layout"] == "BSND":
        s1 = q_shape[1]
        lq = counts(op, lengths_q, lens_q, False, b, s1)
        q_starts = [i * s1 for i in range(b)]
        q_spans = [s1] * b
    else:
        lq = counts(op, lengths_q, lens_q, True, b, q_shape[0])
        q_starts = list(np.cumsum([0, *lq[:-1]]))
        q_spans = lq
    layout = plan["kv_layout"]
    if layout == "BSND":
        s2 = kv_shape[1]
        lk = counts(op, lengths_k, lens_k, False, b, s2)
        rows = [i * s2 + np.arange(n) for i, n in enumerate(lk)]
    elif layout == "TND":
        lk = counts(op, lengths_k, lens_k, True, b, kv_shape[0])
        starts = np.cumsum([0, *lk[:-1]])
        rows = [int(s) + np.arange(n) for s, n in zip(starts, lk)]
    else:
        blocks, block = kv_shape[0], kv_shape[1]
        tab = k.read(table).astype(np.int64)
        lk = counts(op, lengths_k, lens_k, False, b, tab.shape[1] * block)
        rows = []
        for i, n in enumerate(lk):
            used = tab[i, : -(-n // block)]
            if np.any(used < 0) or np.any(used >= blocks):
                raise _launch_error(op, f"{table}[{i}] names blocks outside [0, {blocks - 1}]")
            j = np.arange(n)
            rows.append(tab[i, j // block] * block + j % block)
    for i in range(b):
        yield Batch(i, q_starts[i] + np.arange(q_spans[i]), lq[i], lk[i], np.asarray(rows[i], np.int64))


def _flat(x: np.ndarray, layout_rank: int) -> np.ndarray:
    """Leading axes merged: BSND [B, S, N, D] -> [B*S, N, D]; TND stays."""
    return x.reshape(-1, *x.shape[layout_rank - 2 :]) if x.ndim == layout_rank else x


def visible(mode: int, s: int, lq: int, lk: int) -> int:
    """How many keys query row ``s`` sees (sparseMode 0: all Lk; 3: the lower-right causal limit)."""
    return lk if mode == 0 else max(0, min(lk, lk - lq + s + 1))


# ----------------------------------------------------------------------------- LightningIndexer
def index_scores(q: np.ndarray, k: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Σ_h w_h·ReLU(q_h·k) in float32, in the documented order: [rows, g, D] x [keys, D] x [rows, g] -> [rows, keys]."""
    rows, g, d = q.shape
    dots = np.zeros((rows, g, k.shape[0]), F32)
    for i in range(d):  # one float32 rounding per step; each product of 16-bit floats is exact
        dots = dots + q[:, :, i, None] * k[None, None, :, i]
    relu = np.where(np.isnan(dots) | (dots > 0), dots, F32(0.0))
    score = np.zeros((rows, k.shape[0]), F32)
    for h in range(g):  # heads in order: the product rounded, then the sum rounded
        score = score + w[:, h, None] * relu[:, h]
    return score


@kernel("LightningIndexer")
def lightning_indexer(k: RefCall) -> None:
    """Per query row and key head: the top-k keys by score (ties to the lower index), then -1."""
    op = "LightningIndexer"
    q = _flat(k.read("query", F32), 4)
    key = _flat(k.read("key", F32), 4)
    w = k.read("weights", F32)
    w = w.reshape(-1, w.shape[-1])
    n1, n2 = q.shape[1], key.shape[1]
    g = n1 // n2
    count = int(k.value("sparseCount"))
    mode = int(k.value("sparseMode"))
    out_shape = k["sparseIndicesOut"].shape
    indices = np.full((q.shape[0], n2, count), -1, np.int64)
    values = np.full((q.shape[0], n2, count), -np.inf, F32)
    for batch in batches(k, op, "actualSeqLengthsQueryOptional", "actualSeqLengthsKeyOptional", "blockTableOptional"):
        rows = batch.q_rows[: batch.lq]
        if rows.size == 0:
            continue
        keys = key[batch.kv_rows]
        for n in range(n2):
            heads = slice(n * g, (n + 1) * g)
            score = index_scores(q[rows, heads], keys[:, n], w[rows, heads])
            for s, row in enumerate(rows.tolist()):
                seen = visible(mode, s, batch.lq, batch.lk)
                cand = score[s, :seen]
                key_of = np.where(np.isnan(cand), -np.inf, cand)
                chosen = np.argsort(-key_of, kind="stable")[: min(count, seen)]
                chosen = chosen[key_of[chosen] > -np.inf]
                indices[row, n, : chosen.size] = chosen
                values[row, n, : chosen.size] = cand[chosen]
    k.write("sparseIndicesOut", indices.reshape(out_shape))
    if k.value("returnValues"):
        k.write("sparseValuesOut", values.reshape(out_shape))


# ----------------------------------------------------------------------------- SparseFlashAttention
def selected_tokens(row: np.ndarray, limit: int, block: int) -> list[int]:
    """The key tokens one sparseIndices row names, as CANN's golden reads them (see the spec)."""
    tokens: list[int] = []
    for entry in row[: min(row.size, math.ceil(limit / block))].tolist():
        if entry < 0:
            break
        begin = int(entry) * block
        if begin >= limit:
            continue
        tokens.extend(range(begin, min(begin + block, limit)))
    return tokens


@kernel("SparseFlashAttention")
def sparse_flash_attention(k: RefCall) -> None:
    """softmax(scale·(q·kᵀ + qRope·kRopeᵀ))·v over each row's selected key tokens, in float64."""
    op = "SparseFlashAttention"
    q = _flat(k.read("query", F64), 4)
    key = _flat(k.read("key", F64), 4)
    value = _flat(k.read("value", F64), 4)
    idx = k.read("sparseIndices").astype(np.int64)
    idx = idx.reshape(-1, *idx.shape[-2:])
    rope = k["queryRope"] is not None
    qr = _flat(k.read("queryRope", F64), 4) if rope else None
    kr = _flat(k.read("keyRope", F64), 4) if rope else None
    n1, n2 = q.shape[1], key.shape[1]
    g = n1 // n2
    scale = float(k.value("scaleValue"))
    block = int(k.value("sparseBlockSize"))
    mode = int(k.value("sparseMode"))
    out = np.zeros(q.shape)
    top = np.zeros((q.shape[0], n1))
    total = np.zeros((q.shape[0], n1))
    for batch in batches(k, op, "actualSeqLengthsQuery", "actualSeqLengthsKv", "blockTable"):
        for s, row in enumerate(batch.q_rows[: batch.lq].tolist()):
            limit = visible(mode, s, batch.lq, batch.lk)
            for n in range(n2):
                tokens = selected_tokens(idx[row, n], limit, block) if limit > 0 else []
                if not tokens:
                    continue
                kv = batch.kv_rows[tokens]
                heads = slice(n * g, (n + 1) * g)
                scores = q[row, heads] @ key[kv, n].T
                if qr is not None and kr is not None:
                    scores = scores + qr[row, heads] @ kr[kv, n].T
                scores = scale * scores
                m = scores.max(axis=-1, keepdims=True)
                e = np.exp(scores - m)
                out[row, heads] = (e / e.sum(axis=-1, keepdims=True)) @ value[kv, n]
                top[row, heads], total[row, heads] = m[:, 0], e.sum(axis=-1)
    k.write("attentionOutOut", out.reshape(k["attentionOutOut"].shape))
    if k.value("returnSoftmaxLse"):
        stats_shape = k["softmaxMaxOut"].shape
        per_head = (q.shape[0], n2, g)  # [rows, N2, G] -> the stats' [B, N2, S1, G] or [N2, T1, G]

        def lay(x: np.ndarray) -> np.ndarray:
            x = x.reshape(per_head)
            if len(stats_shape) == 4:
                return x.reshape(stats_shape[0], stats_shape[2], n2, g).transpose(0, 2, 1, 3)
            return x.transpose(1, 0, 2)

        k.write("softmaxMaxOut", lay(top))
        k.write("softmaxSumOut", lay(total))

"""Reference kernels of the attention family: softmax attention in float64, rotary embedding, SwiGlu.

Every attention operator funnels into :func:`attend`, one batch at a time, after the layout is turned
into [N, S, D] and the mask into a "keep" array (True = the query may look at that key). The rules
that build the keep array are documented in :mod:`acl_core.spec.ops.attention`.
"""

from __future__ import annotations

import numpy as np

from acl_core.errors import AclnnError, AclnnStatus
from acl_core.spec.ops.attention import as_4d, sparse_keep
from acl_reference.call import RefCall
from acl_reference.kernels import kernel

Array = np.ndarray
F64 = np.float64


# ----------------------------------------------------------------------------- layouts and masks
def to_bnsd(x: Array, layout: str, heads: int) -> Array:
    """A query/key/value tensor in ``layout`` as [B, N, S, D] (BSH/SBH split H into ``heads``)."""
    if layout in ("BNSD", "BNSD_BSND"):
        return x
    if layout == "BSND":
        return x.transpose(0, 2, 1, 3)
    bsh = x if layout == "BSH" else x.transpose(1, 0, 2)
    b, s, h = bsh.shape
    return bsh.reshape(b, s, heads, h // heads).transpose(0, 2, 1, 3)


def from_bnsd(x: Array, layout: str) -> Array:
    """A [B, N, S, D] result laid out as ``layout`` (BNSD_BSND writes BSND)."""
    if layout == "BNSD":
        return x
    bsnd = x.transpose(0, 2, 1, 3)
    if layout in ("BSND", "BNSD_BSND"):
        return bsnd
    bsh = bsnd.reshape(bsnd.shape[0], bsnd.shape[1], -1)
    return bsh if layout == "BSH" else bsh.transpose(1, 0, 2)


def attend(
    q: Array,
    k: Array,
    v: Array,
    keep: Array,
    scale: float,
    bias: Array | None = None,
    sink: Array | None = None,
) -> tuple[Array, ...]:
    """Masked softmax attention of one batch in float64.

    ``q`` [Nq,Sq,D], ``k``/``v`` [Nkv,Skv,D], ``keep`` broadcastable to [Nq,Sq,Skv], ``bias`` (pse,
    added before scaling) likewise, ``sink`` [Nq] one more logit per query head (compared with the
    scaled scores; it has no value row). Returns (out [Nq,Sq,D], row max [Nq,Sq], row sum [Nq,Sq])
    where max and sum are those of the scaled masked scores and the sink; a row with nothing kept
    gives out 0 and, without a sink, max -inf and sum 0 (with one: the sink's max and sum 1).
    """
    group = q.shape[0] // k.shape[0]
    k = np.repeat(k, group, axis=0)  # query head h reads kv head h // group
    v = np.repeat(v, group, axis=0)
    scores = np.einsum("nqd,nkd->nqk", q, k)
    if bias is not None:
        scores = scores + bias
    scores = scale * scores
    keep = np.broadcast_to(keep, scores.shape)
    with np.errstate(invalid="ignore", over="ignore"):
        row_max = np.max(scores, axis=-1, initial=-np.inf, where=keep)
        if sink is not None:
            row_max = np.maximum(row_max, sink[:, None])
        safe_max = np.where(np.isfinite(row_max), row_max, 0.0)
        e = np.where(keep, np.exp(scores - safe_max[..., None]), 0.0)
        row_sum = e.sum(axis=-1)
        if sink is not None:
            row_sum = row_sum + np.exp(sink[:, None] - safe_max)
        probs = e / np.where(row_sum > 0, row_sum, 1.0)[..., None]
    return np.einsum("nqk,nkd->nqd", probs, v), row_max, row_sum


def _stats(values: Array) -> Array:
    """Softmax statistics [..., Sq] as CANN stores them: [..., Sq, 8], the value repeated 8 times."""
    return np.repeat(values[..., None], 8, axis=-1)


def _sink(k: RefCall) -> Array | None:
    """The per-query-head sink logits in float64 (FlashAttentionScoreV3 / VarLenV5, FusedInferV5), or None."""
    sink = k.args.get("sink")
    return None if sink is None or sink.numel == 0 else k.read("sink", F64)


# ----------------------------------------------------------------------------- FlashAttentionScore
def fa_keep(k: RefCall, sq: int, skv: int) -> Array:
    """FlashAttentionScore's keep array [B|1, N|1, Sq, Skv] from attenMaskOptional and the sparse mode."""
    plan = k.plan
    keep = np.ones((1, 1, sq, skv), dtype=bool)
    if k["attenMaskOptional"] is not None:
        if plan["mode"] in (0, 1):
            keep = ~as_4d(k.read("attenMaskOptional") != 0)
        geo = sparse_keep(plan["mode"], sq, skv, plan["pre"], plan["next"], skv - sq)
        if geo is not None:
            keep = keep & geo
    return keep


@kernel("FlashAttentionScore")
def flash_attention_score(k: RefCall) -> None:
    """Training attention forward: outputs, softmax row max and row sum (softmaxOutOut is left untouched)."""
    plan = k.plan
    layout, nq, nkv = plan["layout"], plan["nq"], plan["nkv"]
    q = to_bnsd(k.read("query", F64), layout, nq)
    key = to_bnsd(k.read("key", F64), layout, nkv)
    value = to_bnsd(k.read("value", F64), layout, nkv)
    b, _, sq, _ = q.shape
    keep = fa_keep(k, sq, key.shape[2])
    pse = None if k["realShiftOptional"] is None else k.read("realShiftOptional", F64)
    sink = _sink(k)
    results = [
        attend(
            q[i],
            key[i],
            value[i],
            keep[min(i, keep.shape[0] - 1)],
            k.value("scaleValue"),
            None if pse is None else pse[min(i, pse.shape[0] - 1)],
            sink,
        )
        for i in range(b)
    ]
    out, row_max, row_sum = (np.stack(parts) for parts in zip(*results))
    k.write("softmaxMaxOut", _stats(row_max))
    k.write("softmaxSumOut", _stats(row_sum))
    k.write("attentionOutOut", from_bnsd(out, layout))


@kernel("FlashAttentionVarLenScore")
def flash_attention_varlen_score(k: RefCall) -> None:
    """TND attention: each packed sequence attends to its own keys only."""
    plan = k.plan
    q, key, value = (k.read(n, F64) for n in ("query", "key", "value"))
    tq, nq, _ = q.shape
    out = np.zeros(q.shape)
    row_max = np.full((nq, tq), -np.inf)
    row_sum = np.zeros((nq, tq))
    has_mask = k["attenMaskOptional"] is not None
    sink = _sink(k)
    q0 = kv0 = 0
    for sq, skv in zip(plan["lq"], plan["lkv"]):
        if sq:
            keep = np.ones((sq, skv), dtype=bool)
            if has_mask:
                geo = sparse_keep(plan["mode"], sq, skv, plan["pre"], plan["next"], skv - sq)
                if geo is not None:
                    keep = geo
            o, m, s = attend(
                q[q0 : q0 + sq].transpose(1, 0, 2),
                key[kv0 : kv0 + skv].transpose(1, 0, 2),
                value[kv0 : kv0 + skv].transpose(1, 0, 2),
                keep,
                k.value("scaleValue"),
                sink=sink,
            )
            out[q0 : q0 + sq] = o.transpose(1, 0, 2)
            row_max[:, q0 : q0 + sq] = m
            row_sum[:, q0 : q0 + sq] = s
        q0, kv0 = q0 + sq, kv0 + skv
    tnd = plan.get("stats") == "TND"  # softmaxOutLayout 'same_as_input': [T,N,8] instead of [N,T,8]
    k.write("softmaxMaxOut", _stats(row_max.T if tnd else row_max))
    k.write("softmaxSumOut", _stats(row_sum.T if tnd else row_sum))
    k.write("attentionOutOut", out)


# ----------------------------------------------------------------------------- inference attention
def _kv_batches(k: RefCall, name: str, layout: str, heads: int) -> list[Array]:
    """Per-batch [Nkv, Skv_b, D] arrays from a key/value tensor or tensor list."""
    arrays = k.read_list(name, F64) if isinstance(k[name], tuple) else [k.read(name, F64)]
    in_layout = "BNSD" if layout == "BNSD_BSND" else layout
    if len(arrays) == 1:
        return list(to_bnsd(arrays[0], in_layout, heads))
    return [to_bnsd(a, in_layout, heads)[0] for a in arrays]


def pool_rows(pool: Array, form: str, nkv: int) -> Array:
    """A paged key/value pool as [blocks, KV_N, blockSize, D] (from BnBsH, BnNBsD or NZ)."""
    if form == "BnBsH":
        blocks, size, h = pool.shape
        return pool.reshape(blocks, size, nkv, h // nkv).transpose(0, 2, 1, 3)
    if form == "NZ":  # [blocks, N, D/16, blockSize, 16]
        blocks, n, d16, size, _ = pool.shape
        return pool.transpose(0, 1, 3, 2, 4).reshape(blocks, n, size, d16 * 16)
    return pool


def _paged_batches(k: RefCall, name: str, nkv: int) -> list[Array]:
    """Per-batch [Nkv, len_b, D] rows of a paged pool: token j is row j % size of block table[b, j // size]."""
    plan = k.plan
    size, lengths = plan["page"], plan["act_kv"]
    arrays = k.read_list(name, F64) if isinstance(k[name], tuple) else [k.read(name, F64)]
    pool = pool_rows(arrays[0], plan["kv_form"], nkv)
    table = k.read("blockTable").astype(np.int64)
    out = []
    for b, n in enumerate(lengths):
        used = table[b, : -(-n // size)]
        bad = (used < 0) | (used >= pool.shape[0])
        if bad.any():
            raise AclnnError(
                AclnnStatus.ACLNN_ERR_PARAM_INVALID,
                f"blockTable[{b}] holds {int(used[bad][0])}, outside the pool's [0, {pool.shape[0]}) blocks",
            )
        rows = pool[used].transpose(1, 0, 2, 3).reshape(nkv, used.size * size, pool.shape[3])[:, :n]
        out.append(rows)
    return out


@kernel("PromptFlashAttention", "IncreFlashAttention", "FusedInferAttentionScore")
def inference_attention(k: RefCall) -> None:
    """Prefill / decode attention with actual lengths, masks and sparse modes as the spec planned."""
    plan = k.plan
    layout, nq, nkv, kind = plan["layout"], plan["nq"], plan["nkv"], plan["mask"]
    q = to_bnsd(k.read("query", F64), "BNSD" if layout == "BNSD_BSND" else layout, nq)
    if plan.get("page"):
        keys, values = _paged_batches(k, "key", nkv), _paged_batches(k, "value", nkv)
    else:
        keys = _kv_batches(k, "key", layout, nkv)
        values = _kv_batches(k, "value", layout, nkv)
    b, _, sq, d = q.shape
    user = as_4d(k.read("attenMask") != 0, decode=kind == "decode") if kind in ("full", "decode") else None
    out = np.zeros((b, nq, sq, d))
    lse = np.full((b, nq, sq), np.inf)  # +inf marks rows that were not computed or had nothing to attend to
    sink = _sink(k)
    for i in range(b):
        rows, valid_kv, skv = plan["act_q"][i], plan["act_kv"][i], keys[i].shape[1]
        keep = np.ones((1, sq, skv), dtype=bool)
        keep[..., valid_kv:] = False
        if user is not None:
            keep = keep & ~user[min(i, user.shape[0] - 1)][:, :sq, :skv]
        if kind in ("full", "compressed"):
            geo = sparse_keep(plan["mode"], sq, skv, plan["pre"], plan["next"], valid_kv - rows)
            if geo is not None:
                keep = keep & geo
        o, m, s = attend(q[i], keys[i], values[i], keep, k.value("scaleValue"), sink=sink)
        o[:, rows:] = 0.0
        out[i] = o
        with np.errstate(divide="ignore"):
            lse[i, :, :rows] = np.where(s[:, :rows] > 0, m[:, :rows] + np.log(s[:, :rows]), np.inf)
    k.write("attentionOut", from_bnsd(out, layout))
    if plan["lse"]:
        k.write("softmaxLse", lse[..., None])


# ----------------------------------------------------------------------------- rotary embedding
def rotate(x: Array, mode: int) -> tuple[Array, Array]:
    """(the part multiplied by cos, the part multiplied by sin) of x for a RotaryPositionEmbedding mode."""
    d = x.shape[-1]
    if mode == 0:
        x1, x2 = x[..., : d // 2], x[..., d // 2 :]
        return x, np.concatenate([-x2, x1], axis=-1)
    if mode == 1:
        turned = np.empty_like(x)
        turned[..., 0::2] = -x[..., 1::2]
        turned[..., 1::2] = x[..., 0::2]
        return x, turned
    if mode == 2:
        x1, x2, x3, x4 = (x[..., i * d // 4 : (i + 1) * d // 4] for i in range(4))
        return x, np.concatenate([-x2, x1, -x4, x3], axis=-1)
    evens, odds = x[..., 0::2], x[..., 1::2]  # mode 3: de-interleave, then rotate by half
    return np.concatenate([evens, odds], axis=-1), np.concatenate([-odds, evens], axis=-1)


@kernel("RotaryPositionEmbedding")
def rotary_position_embedding(k: RefCall) -> None:
    """out = x1 * cos + x2 * sin with (x1, x2) from :func:`rotate`."""
    x, cos, sin = (k.read(n, F64) for n in ("x", "cos", "sin"))
    straight, turned = rotate(x, k.value("mode"))
    k.write("out", straight * cos + turned * sin)


@kernel("ApplyRotaryPosEmb")
def apply_rotary_pos_emb(k: RefCall) -> None:
    """queryRef and keyRef rotated by half (rotate_half), in place."""
    cos, sin = k.read("cos", F64), k.read("sin", F64)
    rotated = {}
    for name in ("queryRef", "keyRef"):
        straight, turned = rotate(k.read(name, F64), 0)
        rotated[name] = straight * cos + turned * sin
    for name, value in rotated.items():
        k.write(name, value)


# ----------------------------------------------------------------------------- SwiGlu
@kernel("SwiGlu")
def swiglu(k: RefCall) -> None:
    """out = silu(A) * B, with A and B the halves of x along dim."""
    x = k.read("x", F64)
    a, b = np.split(x, 2, axis=k.plan["dim"])
    with np.errstate(over="ignore"):
        silu = a / (1.0 + np.exp(-a))  # exp overflow gives a / inf = -0, silu's limit
    k.write("out", silu * b)

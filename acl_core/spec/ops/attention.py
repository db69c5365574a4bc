"""Attention family: flash attention (training, prefill, decode, fused inference), rotary embedding, SwiGlu.

Conventions shared by every attention operator here (the reference kernels implement exactly these):

* Layout letters: B batch, N heads, S sequence, D head dim, H = N*D, T = tokens of a packed batch.
  Query head ``h`` reads key/value head ``h // (Nq // Nkv)`` (GQA/MQA, torch's ``repeat_interleave``).
* ``attenMask``: 1 / True = masked out. A mask is "full" (one bit per query/key pair, broadcast over
  B and N) or, for sparseMode 2/3/4, the compressed 2048x2048 lower-triangular mask CANN asks for;
  that one's content is not read: the mode's own rule is applied (2 causal from the upper-left
  corner, 3 causal from the lower-right corner, 4 band [-preTokens, nextTokens] around the
  lower-right diagonal). sparseMode 0 with a mask also keeps only keys j with
  ``i - preTokens <= j <= i + nextTokens``. Without a mask, sparseMode, preTokens and nextTokens
  have no effect (CANN: "all tokens are calculated").
* Fully masked query rows (every key masked out, or no valid key) produce an output row of zeros;
  their softmax max is -inf and their sum is 0 (innerPrecise=2 behaviour, applied whatever
  innerPrecise says); FusedInferAttentionScore's softmaxLse marks them +inf ("invalid").
* Query rows past ``actualSeqLengths`` (prefill / fused inference) are not computed: zeros.
* Sinks (FlashAttentionScoreV3 and FlashAttentionVarLenScoreV5's ``sinkOptional``, float32;
  FusedInferAttentionScoreV5's ``learnableSinkOptional``, bf16; both [query heads]): CANN documents
  ``m = max(sink, max(S))`` and ``out = Σ e^{S-m}·V / (Σ e^{S-m} + e^{sink-m})``. Choices where it is
  silent: S is the scaled, pse-shifted and masked score (gpt-oss compares its sinks with the scaled
  logits); softmaxMaxOut / softmaxSumOut and softmaxLse include the sink (they are that softmax's
  max and denominator, so ``out = Σ e^{S-lse}·V`` still holds); a row with nothing kept writes zeros
  with max = sink, sum = 1 (lse = sink); a sink of 0 elements is no sink (CANN treats it as null).
* softmaxOutLayout (FlashAttentionVarLenScoreV4/V5): '' or null keeps [N,T,8] statistics;
  'same_as_input' writes them [T,N,8]; any other value is refused.
* Reserved outputs are accepted and left untouched: FlashAttentionScore's ``softmaxOutOut`` (may be
  null) and FusedInferAttentionScore's ``softmaxLse`` when ``softmaxLseFlag`` is false.
* Paged KV (page attention: IncreFlashAttentionV3/V4's ``blocktable``, FusedInferAttentionScore's
  ``blockTable``, int32 [B, maxBlockNumPerSeq]): token ``j`` of batch ``b`` is row ``j % blockSize`` of
  block ``blockTable[b, j // blockSize]`` (the sparse-attention family's addressing). key/value are one
  tensor each (a list of one), shaped BnBsH (blocks, blockSize, H=KV_N*D), BnNBsD (blocks, KV_N, blockSize,
  D) or, FusedInferAttentionScore only (CANN documents it there, not for IncreFlashAttention), NZ
  (blocks, KV_N, D/16, blockSize, 16). IncreFlashAttention takes BnNBsD only with inputLayout BNSD (CANN).
  The key lengths (IFA's actualSeqLengths, FIA's actualSeqLengthsKv) are required (161001 when null).
  blockSize: IncreFlashAttention a multiple of 16 up to 512; FusedInferAttentionScore a multiple of 16 up
  to 1024 at D 64/128, else a multiple of 16 up to 512 (query S 1) or of 128 up to 1024 (query S > 1).
  Everything else 161002: table not int32 / not [B, n>=1] / too narrow for a length (ceil(len/blockSize)
  columns needed), a pool with fewer blocks than the batches' blocks together, shapes that disagree with
  blockSize / KV_N / D. Choices where CANN is silent: the table columns past a batch's
  ``ceil(len/blockSize)`` are not read (any value); an entry that is read must lie in [0, blocks): checked
  when the operator runs (161002 at launch on the reference; on the GPU the device sets the run's check
  flag, reported as 161002 at synchronisation, and the rows of a bad entry read as zeros); a mask's last
  dim must cover the longest actual key length; without a table blockSize is ignored.
* Not implemented, refused with 161002 and a message saying so: dropout (keepProb < 1, dropMask),
  prefix / varlen-split sparse modes 5-8, quantisation, left padding, pseShift of the inference operators.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.errors import AclnnError, AclnnStatus
from acl_core.spec import samples as S
from acl_core.spec.accuracy import table, ulp, with_accuracy
from acl_core.spec.ops.sparse_attention import paged_blocks, paged_like
from acl_core.spec.opspec import (
    INVALID,
    NULLPTR,
    TILING,
    Call,
    ErrorSample,
    Infos,
    OpSpec,
    OutInfo,
    Sample,
    bool_attr,
    float_attr,
    int_array,
    int_attr,
    invalid,
    nullptr,
    out,
    ref,
    string_attr,
    tensor,
    tensor_list,
)
from acl_core.spec.plan import declare as declare_plan
from acl_core.spec.rules import FLOATS, expect_output, normalize_dim, same, tensor_arg
from acl_core.tensor import AclIntArray, AclTensor, AclTensorList

# the plan keys this family's rules write (acl_core.spec.plan; docs/KERNELS.md)
declare_plan("layout", "str", "the query/key/value layout ('BSH', 'BSND', 'BNSD', 'SBH', 'TND')", str)
declare_plan("nq", "int", "query heads", int)
declare_plan("nkv", "int", "key/value heads (a divisor of nq: grouped-query attention)", int)
declare_plan("pre", "int", "preTokens: how many keys before the diagonal a query sees (sparse band)", int)
declare_plan("next", "int", "nextTokens: how many keys after the diagonal a query sees (sparse band)", int)
declare_plan("lq", "list[int]", "each sequence's query length (varlen: from the cumulative actualSeqQLen)", list)
declare_plan("lkv", "list[int]", "each sequence's key/value length (varlen: from the cumulative actualSeqKvLen)", list)
declare_plan("act_q", "list[int]", "each batch's valid query rows", list)
declare_plan("act_kv", "list[int]", "each batch's valid key/value rows", list)
declare_plan(
    "mask",
    "'none' | 'full' | 'compressed' | 'decode'",
    "the attenMask given: none; full (batch, heads, query by key, padded); compressed (the 2048x2048 lower-triangular "
    "mask of sparseMode 2-4); decode (one query row per batch, incremental attention)",
    str,
    ("none", "full", "compressed", "decode"),
)
declare_plan("lse", "bool", "whether the op also returns the softmax log-sum-exp", bool)
declare_plan(
    "stats",
    "'NTD' | 'TND'",
    "where FlashAttentionVarLenScore's versions write softmaxMaxOut / softmaxSumOut: [N,T,8] (NTD, the base's) "
    "or [T,N,8] (TND: softmaxOutLayout 'same_as_input')",
    str,
    ("NTD", "TND"),
)

declare_plan("page", "int", "paged KV: tokens per block of the block table (0: key/value are dense caches)", int)
declare_plan(
    "kv_form",
    "'dense' | 'BnBsH' | 'BnNBsD' | 'NZ'",
    "how key/value hold the cache: dense in inputLayout, or paged blocks (blocks, blockSize, H), "
    "(blocks, KV_N, blockSize, D) or NZ (blocks, KV_N, D/16, blockSize, 16)",
    str,
    ("dense", "BnBsH", "BnNBsD", "NZ"),
)

FAMILY = "attention"
UNBOUNDED = 2147483647
"""preTokens / nextTokens value meaning "no window bound" (INT32_MAX, CANN's recommendation)."""
COMPRESSED_MASK = 2048
"""Side of the compressed lower-triangular mask sparseMode 2/3/4 take."""
HALF = frozenset({D.ACL_FLOAT16, D.ACL_BF16})
FA_MASK_DTYPES = frozenset({D.ACL_BOOL, D.ACL_UINT8})
INFER_MASK_DTYPES = frozenset({D.ACL_BOOL, D.ACL_INT8, D.ACL_UINT8})
SPARSE_NAMES = {
    0: "defaultMask",
    1: "allMask",
    2: "leftUpCausal",
    3: "rightDownCausal",
    4: "band",
    5: "prefix (uncompressed)",
    6: "prefix (compressed)",
    7: "varlen outer-split rightDownCausal",
    8: "varlen outer-split leftUpCausal",
}
INFER_SPARSE_NAMES = {**SPARSE_NAMES, 5: "prefix", 6: "global", 7: "dilated", 8: "block_local"}
"""The names FusedInferAttentionScore's documentation gives sparseMode 5-8."""
IMPLEMENTED_SPARSE = (0, 1, 2, 3, 4)
Dims = tuple[int, int, int, int]
"""(B, N, S, D) of a query/key/value tensor."""


def tiling(message: str) -> AclnnError:
    """A 561002 error (ACLNN_ERR_INNER_TILING_ERROR), where CANN's doc reports a shape mismatch so."""
    return AclnnError(AclnnStatus.ACLNN_ERR_INNER_TILING_ERROR, message)


# ----------------------------------------------------------------------------- shared rules
def _layout_dims(
    name: str, shape: Sequence[int], layout: str, *, heads: int | None = None, head_dim: int | None = None
) -> Dims:
    """(B, N, S, D) of a tensor in ``layout``; BSH/SBH split H by ``heads`` or by ``head_dim``."""
    rank = 3 if layout in ("BSH", "SBH") else 4
    if len(shape) != rank:
        raise invalid(f"{name} must have rank {rank} for inputLayout {layout}, got shape {list(shape)}")
    if layout in ("BSH", "SBH"):
        b, s, h = (shape[0], shape[1], shape[2]) if layout == "BSH" else (shape[1], shape[0], shape[2])
        if heads is not None:
            if heads <= 0 or h % heads:
                raise invalid(f"{name}: H={h} is not a multiple of the head count {heads}")
            return b, heads, s, h // heads
        assert head_dim is not None
        if head_dim <= 0 or h % head_dim:
            raise invalid(f"{name}: H={h} is not a multiple of the query head dim D={head_dim}")
        return b, h // head_dim, s, head_dim
    if layout == "BSND":
        return shape[0], shape[2], shape[1], shape[3]
    return shape[0], shape[1], shape[2], shape[3]  # BNSD, BNSD_BSND


def _same_dtype(call: Call, names: Iterable[str]) -> D:
    dtypes = {}
    for n in names:
        value = call.args.get(n)
        if isinstance(value, AclTensor):
            dtypes[n] = value.dtype
        elif isinstance(value, AclTensorList):
            for i, t in enumerate(value.tensors):
                dtypes[f"{n}[{i}]"] = t.dtype
    first = next(iter(dtypes.values()))
    if any(d != first for d in dtypes.values()):
        listing = ", ".join(f"{n}={d.short}" for n, d in dtypes.items())
        raise invalid(f"query, key and value must share one dtype; got {listing}")
    return first


def _heads_ratio(nq: int, nkv: int) -> None:
    if nkv <= 0 or nq % nkv:
        raise invalid(f"query heads ({nq}) must be a non-zero multiple of key/value heads ({nkv})")


def _sparse_mode(call: Call, allowed: Sequence[int], names: Mapping[int, str] = SPARSE_NAMES) -> int:
    mode = call.args["sparseMode"]
    if mode not in allowed:
        raise invalid(f"sparseMode={mode} is out of range; expected one of {list(allowed)}")
    if mode not in IMPLEMENTED_SPARSE:
        raise invalid(f"sparseMode={mode} ({names[mode]}) is not implemented; supported: 0-4")
    return int(mode)


def _check_band(mode: int, pre: int, nxt: int) -> None:
    if mode in (0, 4) and pre + nxt < 0:
        raise invalid(f"preTokens={pre} and nextTokens={nxt} leave an empty window (preTokens + nextTokens < 0)")


def _compressed_mask(mask: AclTensor, name: str, mode: int) -> None:
    side = COMPRESSED_MASK
    if tuple(mask.shape) not in ((side, side), (1, side, side), (1, 1, side, side)):
        raise invalid(
            f"sparseMode={mode} takes the compressed {side}x{side} mask as {name}; got shape {list(mask.shape)}"
        )


def _full_mask(mask: AclTensor, name: str, b: int, n: int, sq: int, skv: int, *, padded: bool) -> None:
    """A mask with one bit per (query, key) pair: [Sq,Skv], [B|1,Sq,Skv] or [B|1,N|1,Sq,Skv].

    ``padded`` accepts trailing dims larger than Sq/Skv (CANN lets callers pad them to 32 bytes).
    """
    shape = tuple(mask.shape)
    ok = len(shape) in (2, 3, 4) and (shape[-2] >= sq and shape[-1] >= skv if padded else shape[-2:] == (sq, skv))
    if ok and len(shape) >= 3:
        ok = shape[0] in (1, b)
    if ok and len(shape) == 4:
        ok = shape[1] in (1, n)
    if not ok:
        want = f"[{sq},{skv}], [B|1,{sq},{skv}] or [B|1,N|1,{sq},{skv}] with B={b}, N={n}"
        raise invalid(
            f"{name} has shape {list(shape)}; expected {want}{' (last dims may be padded)' if padded else ''}"
        )


def _seq_lengths(call: Call, name: str, b: int, limits: Sequence[int]) -> list[int]:
    """Per-batch lengths from an aclIntArray: one value for all, or at least B (the first B are used)."""
    arr = call.args.get(name)
    if arr is None:
        return list(limits)
    assert isinstance(arr, AclIntArray)
    values = list(arr.values)
    if len(values) == 1:
        values = values * b
    elif len(values) < b:
        raise invalid(f"{name} holds {len(values)} lengths; expected 1 or at least B={b}")
    values = values[:b]
    for i, (v, lim) in enumerate(zip(values, limits)):
        if not 0 <= v <= lim:
            raise invalid(f"{name}[{i}]={v} is outside [0, {lim}]")
    return values


def _cumulative(call: Call, name: str, total: int) -> list[int]:
    """Sequence lengths from cumulative ends (TND's actualSeq*Len), checked to end at ``total``."""
    arr = call.args.get(name)
    if arr is None:
        raise nullptr(f"{name} is null; the TND layout needs the cumulative sequence lengths")
    assert isinstance(arr, AclIntArray)
    ends = list(arr.values)
    if not ends:
        raise invalid(f"{name} is empty")
    lengths, prev = [], 0
    for i, e in enumerate(ends):
        if e < prev:
            raise invalid(f"{name} must be non-decreasing cumulative lengths; {name}[{i}]={e} < {prev}")
        lengths.append(e - prev)
        prev = e
    if prev != total:
        raise invalid(f"{name} ends at {prev} but the tensor holds T={total} tokens")
    return lengths


def _refuse(call: Call, names: Iterable[str], why: str) -> None:
    for n in names:
        if call.args.get(n) is not None:
            raise invalid(f"{n} is not supported: {why}; pass null")


def check_sink(call: Call, name: str, heads: int) -> None:
    """A sink (one logit per query head) must be [heads]; an empty one counts as absent (CANN's rule)."""
    sink = call.args.get(name)
    if sink is None or sink.numel == 0:
        return
    if tuple(sink.shape) != (heads,):
        raise invalid(f"{name} has shape {list(sink.shape)}; expected [{heads}] (one logit per query head)")


def _positive_dims(name: str, t: AclTensor) -> None:
    if t.numel == 0:
        raise invalid(f"{name} is empty (shape {list(t.shape)}); every dimension must be at least 1")


def _training_attrs(call: Call) -> None:
    keep = call.args["keepProb"]
    if not 0 < keep <= 1:
        raise invalid(f"keepProb={keep} is outside (0, 1]")
    if keep != 1:
        raise invalid(f"keepProb={keep}: dropout is not supported (acl-core has no dropout mask generator); pass 1")
    _refuse(call, ["dropMaskOptional"], "dropout is not implemented")
    _refuse(call, ["paddingMaskOptional"], "it is reserved by CANN")
    _refuse(call, ["prefixOptional"], "prefix sparse modes (5/6) are not implemented")
    if call.args["innerPrecise"] not in (0, 1, 2):
        raise invalid(f"innerPrecise={call.args['innerPrecise']} is not supported; expected 0, 1 or 2")


# ----------------------------------------------------------------------------- mask geometry
def window(sq: int, skv: int, pre: int, nxt: int, shift: int) -> np.ndarray:
    """Keep query i / key j when ``-pre <= j - i - shift <= nxt`` ([Sq, Skv] bool)."""
    offset = np.arange(skv)[None, :] - np.arange(sq)[:, None] - shift
    return (offset <= nxt) & (offset >= -pre)


def sparse_keep(mode: int, sq: int, skv: int, pre: int, nxt: int, shift: int) -> np.ndarray | None:
    """The geometric part of sparseMode (None for allMask, whose mask is all there is).

    ``shift`` = Skv - Sq places the lower-right diagonal that modes 3 and 4 start from; mode 0's
    window and mode 2's causal mask start from the upper-left corner.
    """
    if mode == 0:
        return window(sq, skv, pre, nxt, 0)
    if mode == 2:
        return window(sq, skv, sq + skv, 0, 0)
    if mode == 3:
        return window(sq, skv, sq + skv, 0, shift)
    if mode == 4:
        return window(sq, skv, pre, nxt, shift)
    return None


def as_4d(mask: np.ndarray, *, decode: bool = False) -> np.ndarray:
    """A mask as [B|1, N|1, Sq', Skv']: [X,Y] is [1,1,X,Y] ([B,1,1,S] for decode masks), [A,X,Y] is [A,1,X,Y]."""
    if mask.ndim == 2:
        return mask[:, None, None, :] if decode else mask[None, None]
    if mask.ndim == 3:
        return mask[:, None]
    return mask


# ----------------------------------------------------------------------------- FlashAttentionScore
FA_LAYOUTS = ("BSH", "SBH", "BSND", "BNSD")


def _fa_params(varlen: bool) -> tuple[Any, ...]:
    layouts = ("TND",) if varlen else FA_LAYOUTS
    seq = (int_array("actualSeqQLenOptional", optional=True), int_array("actualSeqKvLenOptional", optional=True))
    return (
        tensor("query", FLOATS, min_rank=3, max_rank=4),
        tensor("key", FLOATS, min_rank=3, max_rank=4),
        tensor("value", FLOATS, min_rank=3, max_rank=4),
        tensor("realShiftOptional", FLOATS, optional=True),
        tensor("dropMaskOptional", {D.ACL_UINT8}, optional=True),
        tensor("paddingMaskOptional", optional=True),
        tensor("attenMaskOptional", FA_MASK_DTYPES, optional=True, min_rank=2, max_rank=4),
        int_array("prefixOptional", optional=True),
        *(seq if varlen else ()),
        float_attr("scaleValue"),
        float_attr("keepProb", default=1.0),
        int_attr("preTokens", default=UNBOUNDED),
        int_attr("nextTokens", default=UNBOUNDED),
        int_attr("headNum"),
        string_attr("inputLayout", choices=layouts, default=layouts[0]),
        int_attr("innerPrecise", default=0),
        int_attr("sparseMode", default=0),
        out("softmaxMaxOut", {D.ACL_FLOAT}),
        out("softmaxSumOut", {D.ACL_FLOAT}),
        out("softmaxOutOut", FLOATS, optional=True),
        out("attentionOutOut", FLOATS),
    )


def _fa_infer(call: Call) -> Infos:
    q, k, v = (tensor_arg(call, n) for n in ("query", "key", "value"))
    dtype = _same_dtype(call, ("query", "key", "value"))
    _training_attrs(call)
    mode = _sparse_mode(call, range(7))
    layout, heads = call.args["inputLayout"], call.args["headNum"]
    if heads <= 0:
        raise invalid(f"headNum={heads} must be positive")
    for name, t in (("query", q), ("key", k), ("value", v)):
        _positive_dims(name, t)
    b, nq, sq, d = _layout_dims("query", q.shape, layout, heads=heads if layout in ("BSH", "SBH") else None)
    if nq != heads:
        raise invalid(f"headNum={heads} differs from the N of query ({nq})")
    bk, nkv, skv, dk = _layout_dims("key", k.shape, layout, head_dim=d)
    if dk != d:
        raise invalid(f"key head dim {dk} differs from query head dim {d}")
    if tuple(v.shape) != tuple(k.shape):
        raise invalid(
            f"value shape {list(v.shape)} must equal key shape {list(k.shape)} "
            "(a value head dim smaller than query's is not implemented)"
        )
    if bk != b:
        raise invalid(f"query batch {b} differs from key/value batch {bk}")
    _heads_ratio(nq, nkv)
    pre, nxt = call.args["preTokens"], call.args["nextTokens"]
    mask = call.args["attenMaskOptional"]
    if mask is not None:
        if mode in (2, 3, 4):
            _compressed_mask(mask, "attenMaskOptional", mode)
        else:
            shape = tuple(mask.shape)
            if shape not in ((b, nq, sq, skv), (b, 1, sq, skv), (1, 1, sq, skv), (sq, skv)):
                raise invalid(
                    f"attenMaskOptional has shape {list(shape)}; expected [B,N,Sq,Skv], [B,1,Sq,Skv], "
                    f"[1,1,Sq,Skv] or [Sq,Skv] = [{b},{nq},{sq},{skv}]..."
                )
        _check_band(mode, pre, nxt)
    pse = call.args["realShiftOptional"]
    if pse is not None:
        if pse.dtype != dtype:
            raise invalid(f"realShiftOptional has dtype {pse.dtype.short}; it must match query ({dtype.short})")
        ps = tuple(pse.shape)
        if not (len(ps) == 4 and ps[0] in (1, b) and ps[1] == nq and ps[2] in (1, sq) and ps[3] == skv):
            raise invalid(
                f"realShiftOptional has shape {list(ps)}; expected [B|1,N,Sq|1,Skv] = [{b},{nq},{sq},{skv}] "
                "(the 1024-row compressed ALiBi form is not implemented)"
            )
    call.plan.update(layout=layout, nq=nq, nkv=nkv, mode=mode, pre=pre, next=nxt)
    stats = same((b, nq, sq, 8), D.ACL_FLOAT)
    return {
        "softmaxMaxOut": stats,
        "softmaxSumOut": stats,
        "softmaxOutOut": None,
        "attentionOutOut": same(q.shape, dtype),
    }


def _varlen_infer(call: Call) -> Infos:
    q, k, v = (tensor_arg(call, n) for n in ("query", "key", "value"))
    dtype = _same_dtype(call, ("query", "key", "value"))
    _training_attrs(call)
    mode = _sparse_mode(call, (0, 1, 2, 3, 4, 6, 7, 8))
    heads = call.args["headNum"]
    for name, t in (("query", q), ("key", k), ("value", v)):
        if t.rank != 3:
            raise invalid(f"{name} must be [T,N,D] for inputLayout TND, got shape {list(t.shape)}")
        _positive_dims(name, t)
    tq, nq, d = q.shape
    tkv, nkv, dk = k.shape
    if nq != heads:
        raise invalid(f"headNum={heads} differs from the N of query ({nq})")
    if dk != d:
        raise invalid(f"key head dim {dk} differs from query head dim {d}")
    if tuple(v.shape) != tuple(k.shape):
        raise invalid(f"value shape {list(v.shape)} must equal key shape {list(k.shape)}")
    _heads_ratio(nq, nkv)
    lq = _cumulative(call, "actualSeqQLenOptional", tq)
    lkv = _cumulative(call, "actualSeqKvLenOptional", tkv)
    if len(lq) != len(lkv):
        raise invalid(f"actualSeqQLenOptional has {len(lq)} sequences but actualSeqKvLenOptional has {len(lkv)}")
    _refuse(call, ["realShiftOptional"], "the TND pse forms (compressed ALiBi, pseTotalLen) are not implemented")
    pre, nxt = call.args["preTokens"], call.args["nextTokens"]
    mask = call.args["attenMaskOptional"]
    if mask is not None:
        if mode in (0, 1):
            raise invalid(
                f"a full attenMaskOptional with sparseMode={mode} is not implemented for TND; "
                "pass null, or the compressed mask with sparseMode 2, 3 or 4"
            )
        _compressed_mask(mask, "attenMaskOptional", mode)
        _check_band(mode, pre, nxt)
        if mode == 3:
            for i, (a, c) in enumerate(zip(lq, lkv)):
                if a > c:
                    raise invalid(f"sparseMode=3 needs Sq <= Skv in every sequence; sequence {i} has {a} > {c}")
    call.plan.update(nq=nq, nkv=nkv, mode=mode, pre=pre, next=nxt, lq=lq, lkv=lkv)
    stats = same((nq, tq, 8), D.ACL_FLOAT)
    return {
        "softmaxMaxOut": stats,
        "softmaxSumOut": stats,
        "softmaxOutOut": None,
        "attentionOutOut": same(q.shape, dtype),
    }


# ----------------------------------------------------------------------------- FA samples
def _to_layout(x: np.ndarray, layout: str) -> np.ndarray:
    """A [B,N,S,D] array laid out as ``layout``."""
    if layout == "BNSD":
        return x
    bsnd = x.transpose(0, 2, 1, 3)
    if layout == "BSND":
        return np.ascontiguousarray(bsnd)
    bsh = bsnd.reshape(bsnd.shape[0], bsnd.shape[1], -1)
    return np.ascontiguousarray(bsh if layout == "BSH" else bsh.transpose(1, 0, 2))


def _bnsd(rng: np.random.Generator, dt: D, b: int, n: int, s: int, d: int) -> np.ndarray:
    return S.array(rng, (b, n, s, d), dt, low=-2.0, high=2.0)


def compressed_mask() -> np.ndarray:
    """The 2048x2048 mask CANN's sparseMode 2/3/4 expect: True above the diagonal."""
    return np.triu(np.ones((COMPRESSED_MASK, COMPRESSED_MASK), dtype=bool), k=1)


def _fa_case(
    rng: np.random.Generator,
    dt: D,
    layout: str,
    b: int,
    nq: int,
    nkv: int,
    sq: int,
    skv: int,
    d: int,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "query": _to_layout(_bnsd(rng, dt, b, nq, sq, d), layout),
        "key": _to_layout(_bnsd(rng, dt, b, nkv, skv, d), layout),
        "value": _to_layout(_bnsd(rng, dt, b, nkv, skv, d), layout),
        "scaleValue": 1.0 / np.sqrt(d),
        "keepProb": 1.0,
        "preTokens": UNBOUNDED,
        "nextTokens": UNBOUNDED,
        "headNum": nq,
        "inputLayout": layout,
        "innerPrecise": 0,
        "sparseMode": 0,
        **extra,
    }


def _fa_samples(rng: np.random.Generator) -> Iterable[Sample]:
    for dt in (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16):
        for layout in FA_LAYOUTS:
            yield Sample(_fa_case(rng, dt, layout, 2, 2, 2, 5, 7, 8), f"{dt.short} {layout} no mask")
        yield Sample(_fa_case(rng, dt, "BSND", 1, 4, 2, 6, 6, 8), f"{dt.short} GQA 4/2")
        yield Sample(_fa_case(rng, dt, "BSH", 2, 4, 1, 4, 9, 4), f"{dt.short} MQA BSH")
    f32 = D.ACL_FLOAT
    mask = S.array(rng, (6, 9), D.ACL_BOOL)
    mask[2, :] = True  # one fully masked row
    yield Sample(
        _fa_case(rng, f32, "BNSD", 2, 2, 2, 6, 9, 8, attenMaskOptional=mask, innerPrecise=2),
        "sparse 0, [Sq,Skv] mask with a fully masked row",
    )
    yield Sample(
        _fa_case(
            rng,
            f32,
            "BSND",
            2,
            2,
            1,
            7,
            7,
            8,
            attenMaskOptional=S.array(rng, (2, 1, 7, 7), D.ACL_BOOL).astype(np.uint8),
            preTokens=3,
            nextTokens=1,
        ),
        "sparse 0, uint8 [B,1,Sq,Skv] mask and a window",
    )
    yield Sample(
        _fa_case(
            rng, f32, "BNSD", 1, 2, 2, 5, 8, 4, attenMaskOptional=S.array(rng, (1, 2, 5, 8), D.ACL_BOOL), sparseMode=1
        ),
        "sparse 1, [B,N,Sq,Skv] mask",
    )
    for mode, sq, skv, extra in (
        (2, 5, 8, {}),
        (3, 5, 8, {}),
        (3, 8, 5, {"innerPrecise": 2}),
        (4, 9, 7, {"preTokens": 2, "nextTokens": 1}),
    ):
        args = _fa_case(rng, f32, "BSH", 1, 2, 2, sq, skv, 8, attenMaskOptional=compressed_mask(), sparseMode=mode)
        yield Sample({**args, **extra}, f"sparse {mode}, Sq={sq} Skv={skv}")
    yield Sample(
        _fa_case(rng, D.ACL_FLOAT16, "BSND", 2, 2, 2, 6, 6, 8, attenMaskOptional=compressed_mask(), sparseMode=3),
        "float16 causal",
    )
    yield Sample(
        _fa_case(rng, f32, "BNSD", 2, 2, 1, 4, 6, 8, realShiftOptional=S.array(rng, (2, 2, 4, 6), f32, low=-1, high=1)),
        "pse [B,N,Sq,Skv]",
    )
    yield Sample(
        _fa_case(rng, f32, "SBH", 1, 2, 2, 3, 5, 4, realShiftOptional=S.array(rng, (1, 2, 1, 5), f32, low=-1, high=1)),
        "pse [1,N,1,Skv]",
    )


def _fa_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    f32 = D.ACL_FLOAT

    def case(**extra: Any) -> dict[str, Any]:
        return _fa_case(rng, f32, "BNSD", 1, 4, 2, 4, 6, 8, **extra)

    base = case()
    yield ErrorSample({**base, "inputLayout": "NSD"}, INVALID, "unknown layout")
    yield ErrorSample({**base, "headNum": 3}, INVALID, "headNum differs from query's N")
    three = np.ones((1, 3, 6, 8), np.float32)
    yield ErrorSample({**base, "key": three, "value": three}, INVALID, "query heads not a multiple of kv heads")
    yield ErrorSample({**base, "value": base["value"][..., :4].copy()}, INVALID, "value head dim differs")
    yield ErrorSample({**base, "key": base["key"][..., :4].copy()}, INVALID, "key head dim differs")
    yield ErrorSample({**base, "query": base["query"].astype(np.float16)}, INVALID, "mixed dtypes")
    yield ErrorSample({**base, "keepProb": 0.9}, INVALID, "dropout is not supported")
    yield ErrorSample({**base, "sparseMode": 9}, INVALID, "sparseMode out of range")
    yield ErrorSample({**base, "sparseMode": 5}, INVALID, "prefix sparse mode not implemented")
    yield ErrorSample({**base, "attenMaskOptional": np.zeros((4, 5), bool)}, INVALID, "mask shape")
    yield ErrorSample(
        {**base, "attenMaskOptional": np.zeros((4, 6), bool), "sparseMode": 2}, INVALID, "mode 2 needs the 2048 mask"
    )
    yield ErrorSample({**base, "dropMaskOptional": np.ones(8, np.uint8)}, INVALID, "dropMask is refused")
    yield ErrorSample(
        {**_fa_case(rng, f32, "BSH", 1, 4, 2, 4, 6, 8), "query": np.ones((1, 4, 30), np.float32)},
        INVALID,
        "H not divisible by headNum",
    )
    yield ErrorSample(
        {**base, "softmaxMaxOut": np.zeros((1, 4, 4, 1), np.float32)}, INVALID, "softmaxMaxOut not [B,N,Sq,8]"
    )


def _varlen_case(
    rng: np.random.Generator, dt: D, lq: Sequence[int], lkv: Sequence[int], nq: int, nkv: int, d: int, **extra: Any
) -> dict[str, Any]:
    tq, tkv = sum(lq), sum(lkv)
    return {
        "query": S.array(rng, (tq, nq, d), dt, low=-2, high=2),
        "key": S.array(rng, (tkv, nkv, d), dt, low=-2, high=2),
        "value": S.array(rng, (tkv, nkv, d), dt, low=-2, high=2),
        "actualSeqQLenOptional": list(np.cumsum(lq).tolist()),
        "actualSeqKvLenOptional": list(np.cumsum(lkv).tolist()),
        "scaleValue": 1.0 / np.sqrt(d),
        "keepProb": 1.0,
        "preTokens": UNBOUNDED,
        "nextTokens": UNBOUNDED,
        "headNum": nq,
        "inputLayout": "TND",
        "innerPrecise": 0,
        "sparseMode": 0,
        **extra,
    }


def _varlen_samples(rng: np.random.Generator) -> Iterable[Sample]:
    for dt in (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16):
        yield Sample(_varlen_case(rng, dt, (3, 5), (4, 6), 2, 2, 8), f"{dt.short} two sequences, no mask")
    f32 = D.ACL_FLOAT
    yield Sample(_varlen_case(rng, f32, (2, 0, 4), (3, 2, 4), 4, 2, 8), "GQA with an empty query sequence")
    yield Sample(_varlen_case(rng, f32, (3, 2), (0, 4), 2, 1, 4), "a sequence with no keys")
    for mode, lq, lkv, extra in (
        (2, (4, 6), (6, 3), {}),
        (3, (3, 5), (5, 5), {}),
        (4, (6, 4), (5, 7), {"preTokens": 1, "nextTokens": 2}),
    ):
        yield Sample(
            _varlen_case(rng, f32, lq, lkv, 2, 2, 8, attenMaskOptional=compressed_mask(), sparseMode=mode, **extra),
            f"sparse {mode}",
        )


def _varlen_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    base = _varlen_case(rng, D.ACL_FLOAT, (3, 5), (4, 6), 2, 2, 8)
    yield ErrorSample({**base, "actualSeqQLenOptional": [3, 7]}, INVALID, "lengths do not end at T")
    yield ErrorSample({**base, "actualSeqQLenOptional": [5, 3, 8]}, INVALID, "lengths not cumulative")
    yield ErrorSample({**base, "actualSeqKvLenOptional": None}, NULLPTR, "TND without kv lengths")
    yield ErrorSample({**base, "actualSeqKvLenOptional": [10]}, INVALID, "sequence counts differ")
    yield ErrorSample({**base, "sparseMode": 7}, INVALID, "sparseMode 7 not implemented")
    yield ErrorSample({**base, "attenMaskOptional": np.zeros((8, 10), bool)}, INVALID, "full TND mask")
    yield ErrorSample(
        {
            **_varlen_case(rng, D.ACL_FLOAT, (5,), (3,), 2, 2, 8),
            "attenMaskOptional": compressed_mask(),
            "sparseMode": 3,
        },
        INVALID,
        "sparse 3 with Sq > Skv",
    )


# ----------------------------------------------------------------------------- inference attention
PFA_LAYOUTS = ("BSH", "BSND", "BNSD", "BNSD_BSND")
IFA_LAYOUTS = ("BSH", "BSND", "BNSD")


def _kv_heads(call: Call) -> int:
    heads, kv = call.args["numHeads"], call.args["numKeyValueHeads"]
    if heads <= 0:
        raise invalid(f"numHeads={heads} must be positive")
    if kv < 0:
        raise invalid(f"numKeyValueHeads={kv} must be 0 (same as numHeads) or positive")
    kv = kv or heads
    _heads_ratio(heads, kv)
    return int(kv)


def _query_dims(call: Call, layout: str) -> Dims:
    q = tensor_arg(call, "query")
    heads = call.args["numHeads"]
    b, n, s, d = _layout_dims("query", q.shape, layout, heads=heads if layout == "BSH" else None)
    if n != heads:
        raise invalid(f"numHeads={heads} differs from the N of query ({n})")
    return b, n, s, d


def _kv_tensors(call: Call, layout: str, b: int, nkv: int, d: int) -> list[int]:
    """Check key/value (tensors or tensor lists) and return each batch's key length Skv."""
    keys, values = call.args["key"], call.args["value"]
    if isinstance(keys, AclTensor):
        pairs = [(keys, values)]
    else:
        assert isinstance(keys, AclTensorList) and isinstance(values, AclTensorList)
        if len(keys) != len(values):
            raise invalid(f"key holds {len(keys)} tensors but value holds {len(values)}")
        if len(keys) not in (1, b):
            raise invalid(f"key/value lists must hold 1 tensor or one per batch (B={b}); got {len(keys)}")
        pairs = list(zip(keys.tensors, values.tensors))
    per_batch = len(pairs) > 1 or (b == 1 and len(pairs) == 1)
    lengths: list[int] = []
    for i, (kt, vt) in enumerate(pairs):
        label = f"key[{i}]" if len(pairs) > 1 else "key"
        if tuple(kt.shape) != tuple(vt.shape):
            raise invalid(f"{label} shape {list(kt.shape)} differs from value's {list(vt.shape)}")
        kb, kn, ks, kd = _layout_dims(label, kt.shape, layout, heads=nkv if layout == "BSH" else None)
        if kd != d:
            raise invalid(f"{label} head dim {kd} differs from query head dim {d}")
        if kn != nkv:
            raise invalid(f"{label} has {kn} heads; numKeyValueHeads says {nkv}")
        want_b = 1 if per_batch else b
        if kb != want_b:
            raise invalid(f"{label} has batch {kb}; expected {want_b}")
        lengths.extend([ks] if per_batch else [ks] * b)
    return lengths


def _one_tensor(value: Any, name: str) -> AclTensor:
    if isinstance(value, AclTensor):
        return value
    assert isinstance(value, AclTensorList)
    if len(value) != 1:
        raise invalid(f"paged KV takes one {name} tensor (the block pool), got a list of {len(value)}")
    return value.tensors[0]


def _block_limit(op: str, d: int, sq: int) -> tuple[int, int]:
    """(granule, largest) blockSize CANN allows: IFA 16/512; FIA 16/1024 at D 64/128, else 16/512 (S 1), 128/1024."""
    if op != "FusedInferAttentionScore":
        return 16, 512
    if d in (64, 128):
        return 16, 1024
    return (16, 512) if sq == 1 else (128, 1024)


def paged_kv(call: Call, layout: str, b: int, nkv: int, d: int, sq: int, lengths: str, table: str) -> list[int]:
    """Check a paged key/value (block pool + table, the family docstring's rules); each batch's key length."""
    op = call.spec.name
    tab = tensor_arg(call, table)
    size = int(call.args["blockSize"])
    if tab.dtype != D.ACL_INT32:
        raise invalid(f"{table} must be int32, got {tab.dtype.short}")
    if tab.rank != 2 or tab.shape[0] != b or tab.shape[1] < 1:
        raise invalid(f"{table} has shape {list(tab.shape)}; expected [B, maxBlockNumPerSeq] with B={b}")
    granule, largest = _block_limit(op, d, sq)
    if size <= 0 or size % granule or size > largest:
        raise invalid(f"blockSize={size}: paged KV needs a multiple of {granule} in [{granule}, {largest}] here")
    k, v = _one_tensor(call.args["key"], "key"), _one_tensor(call.args["value"], "value")
    if tuple(k.shape) != tuple(v.shape):
        raise invalid(f"key shape {list(k.shape)} differs from value's {list(v.shape)}")
    shape = tuple(k.shape)
    want: tuple[int, ...]
    if len(shape) == 3:
        form, want = "BnBsH", (shape[0], size, nkv * d)
    elif len(shape) == 4:
        if op != "FusedInferAttentionScore" and layout != "BNSD":
            raise invalid(f"paged KV (blocks, KV_N, blockSize, D) needs inputLayout BNSD here, got {layout}")
        form, want = "BnNBsD", (shape[0], nkv, size, d)
    elif len(shape) == 5 and op == "FusedInferAttentionScore":
        if d % 16:
            raise invalid(f"the NZ paged KV needs a head dim that is a multiple of 16, got {d}")
        form, want = "NZ", (shape[0], nkv, d // 16, size, 16)
    else:
        raise invalid(
            f"paged key has shape {list(shape)}; expected (blocks, blockSize, H) or (blocks, KV_N, blockSize, D)"
        )
    if shape != want:
        raise invalid(f"paged key has shape {list(shape)}; expected {list(want)} ({form}, KV_N={nkv}, D={d})")
    if call.args.get(lengths) is None:
        raise nullptr(f"{lengths} is null; paged KV needs each batch's key length")
    act = _seq_lengths(call, lengths, b, [tab.shape[1] * size] * b)
    blocks = [-(-n // size) for n in act]
    if sum(blocks) > shape[0]:
        raise invalid(f"the pool holds {shape[0]} blocks; the batches' lengths need {sum(blocks)}")
    call.plan.update(page=size, kv_form=form)
    return act


def _decode_mask(mask: AclTensor, b: int, n: int, skv: int) -> None:
    """Decode (Sq=1) masks: [B,S], [B,1,S] or [B|1,N|1,1,S], S >= the longest key."""
    shape = tuple(mask.shape)
    ok = shape[-1] >= skv and (
        (len(shape) == 2 and shape[0] == b)
        or (len(shape) == 3 and shape[0] == b and shape[1] == 1)
        or (len(shape) == 4 and shape[0] in (1, b) and shape[1] in (1, n) and shape[2] == 1)
    )
    if not ok:
        raise invalid(
            f"attenMask has shape {list(shape)}; expected [B,S], [B,1,S] or [B|1,N|1,1,S] with B={b}, S>={skv}"
        )


def _out_shape(q: AclTensor, layout: str) -> tuple[int, ...]:
    if layout == "BNSD_BSND":
        b, n, s, d = q.shape
        return (b, s, n, d)
    return tuple(q.shape)


def _attention_out(call: Call, layout: str, dtype: D) -> OutInfo:
    """attentionOut's info, checked against the caller's output before anything is built per batch."""
    info = same(_out_shape(tensor_arg(call, "query"), layout), dtype)
    expect_output(call, "attentionOut", info)
    return info


def _pfa_infer(call: Call) -> Infos:
    dtype = _same_dtype(call, ("query", "key", "value"))
    layout = call.args["inputLayout"]
    nkv = _kv_heads(call)
    b, nq, sq, d = _query_dims(call, layout)
    out_info = _attention_out(call, layout, dtype)
    skv = _kv_tensors(call, layout, b, nkv, d)
    _refuse(call, ["pseShift"], "CANN reserves it for PromptFlashAttention")
    pre, nxt = call.args["preTokens"], call.args["nextTokens"]
    mask = call.args["attenMask"]
    if mask is not None:
        _full_mask(mask, "attenMask", b, nq, sq, max(skv, default=0), padded=True)
        _check_band(0, pre, nxt)
    act_q = _seq_lengths(call, "actualSeqLengths", b, [sq] * b)
    call.plan.update(
        layout=layout,
        nq=nq,
        nkv=nkv,
        mode=0,
        pre=pre,
        next=nxt,
        act_q=act_q,
        act_kv=skv,
        mask="none" if mask is None else "full",
        lse=False,
    )
    return {"attentionOut": out_info}


def _ifa_infer(call: Call) -> Infos:
    dtype = _same_dtype(call, ("query", "key", "value"))
    layout = call.args["inputLayout"]
    nkv = _kv_heads(call)
    b, nq, sq, d = _query_dims(call, layout)
    if sq != 1:
        raise invalid(f"IncreFlashAttention decodes one token: the S of query must be 1, got {sq}")
    out_info = same(tensor_arg(call, "query").shape, dtype)
    expect_output(call, "attentionOut", out_info)  # before anything is built per batch
    call.plan.update(page=0, kv_form="dense")
    if call.args.get("blockTable") is not None:  # IncreFlashAttentionV3/V4's blocktable
        skv = paged_kv(call, layout, b, nkv, d, sq, "actualSeqLengths", "blockTable")
    else:
        skv = _kv_tensors(call, layout, b, nkv, d)
    _refuse(call, ["pseShift"], "pseShift is not implemented")
    mask = call.args["attenMask"]
    kind = "none"
    if mask is not None and mask.numel:
        _decode_mask(mask, b, nq, max(skv, default=0))
        kind = "decode"
    act_kv = _seq_lengths(call, "actualSeqLengths", b, skv)
    call.plan.update(
        layout=layout,
        nq=nq,
        nkv=nkv,
        mode=0,
        pre=UNBOUNDED,
        next=UNBOUNDED,
        act_q=[1] * b,
        act_kv=act_kv,
        mask=kind,
        lse=False,
    )
    return {"attentionOut": out_info}


FIA_UNSUPPORTED = (
    ("deqScale1", "quantisation is not implemented"),
    ("quantScale1", "quantisation is not implemented"),
    ("deqScale2", "quantisation is not implemented"),
    ("quantScale2", "quantisation is not implemented"),
    ("quantOffset2", "quantisation is not implemented"),
    ("antiquantScale", "KV antiquantisation is not implemented"),
    ("antiquantOffset", "KV antiquantisation is not implemented"),
    ("queryPaddingSize", "left padding is not implemented"),
    ("kvPaddingSize", "left padding is not implemented"),
    ("pseShift", "pseShift is not implemented"),
)


def _fia_infer(call: Call) -> Infos:
    dtype = _same_dtype(call, ("query", "key", "value"))
    for name, why in FIA_UNSUPPORTED:
        _refuse(call, [name], why)
    layout = call.args["inputLayout"]
    nkv = _kv_heads(call)
    b, nq, sq, d = _query_dims(call, layout)
    out_info = _attention_out(call, layout, dtype)
    call.plan.update(page=0, kv_form="dense")
    if call.args.get("blockTable") is not None:
        skv = paged_kv(call, layout, b, nkv, d, sq, "actualSeqLengthsKv", "blockTable")
    else:
        skv = _kv_tensors(call, layout, b, nkv, d)
    if call.args["innerPrecise"] not in (0, 1, 2, 3):
        raise invalid(f"innerPrecise={call.args['innerPrecise']} is not supported; expected 0-3")
    act_kv = _seq_lengths(call, "actualSeqLengthsKv", b, skv)
    mask = call.args["attenMask"]
    pre, nxt = call.args["preTokens"], call.args["nextTokens"]
    if sq == 1:  # decode branch: sparseMode, windows and query lengths do not apply
        if layout == "BNSD_BSND":
            raise invalid("inputLayout BNSD_BSND needs a query S greater than 1")
        if call.args["antiquantMode"] not in (0, 1):
            raise invalid(f"antiquantMode={call.args['antiquantMode']} is not supported; expected 0 or 1")
        kind = "none"
        if mask is not None:
            _decode_mask(mask, b, nq, max(skv, default=0))
            kind = "decode"
        mode, act_q, pre, nxt = 0, [1] * b, UNBOUNDED, UNBOUNDED
    else:
        mode = _sparse_mode(call, range(9), INFER_SPARSE_NAMES)
        act_q = _seq_lengths(call, "actualSeqLengths", b, [sq] * b)
        kind = "none"
        if mask is None and mode != 0:
            raise nullptr(f"sparseMode={mode} needs attenMask")
        if mask is not None:
            if mode in (2, 3, 4):
                _compressed_mask(mask, "attenMask", mode)
                kind = "compressed"
            else:
                _full_mask(mask, "attenMask", b, nq, sq, max(skv, default=0), padded=True)
                kind = "full"
            _check_band(mode, pre, nxt)
    infos: dict[str, OutInfo | None] = {"attentionOut": out_info, "softmaxLse": None}
    if call.args["softmaxLseFlag"]:
        # attentionOut is only null here while eager.run is still allocating outputs from this answer
        if call.args["softmaxLse"] is None and call.args.get("attentionOut") is not None:
            raise nullptr("softmaxLseFlag is true but softmaxLse is null")
        infos["softmaxLse"] = same((b, nq, sq, 1), D.ACL_FLOAT)
    call.plan.update(
        layout=layout,
        nq=nq,
        nkv=nkv,
        mode=mode,
        pre=pre,
        next=nxt,
        act_q=act_q,
        act_kv=act_kv,
        mask=kind,
        lse=bool(call.args["softmaxLseFlag"]),
    )
    return infos


def _infer_case(
    rng: np.random.Generator,
    dt: D,
    layout: str,
    b: int,
    nq: int,
    nkv: int,
    sq: int,
    skv: int | Sequence[int],
    d: int,
    *,
    listed: bool = False,
    per_batch: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    """Arguments of an inference attention call; ``listed`` wraps key/value as tensor lists.

    ``per_batch`` (or several key lengths) gives one cache tensor per batch instead of one for all.
    """
    in_layout = "BNSD" if layout == "BNSD_BSND" else layout
    query = _to_layout(_bnsd(rng, dt, b, nq, sq, d), in_layout)
    if isinstance(skv, int) and not per_batch:
        key: Any = _to_layout(_bnsd(rng, dt, b, nkv, skv, d), in_layout)
        value: Any = _to_layout(_bnsd(rng, dt, b, nkv, skv, d), in_layout)
        if listed:
            key, value = [key], [value]
    else:
        lens = [skv] * b if isinstance(skv, int) else list(skv)
        key = [_to_layout(_bnsd(rng, dt, 1, nkv, s, d), in_layout) for s in lens]
        value = [_to_layout(_bnsd(rng, dt, 1, nkv, s, d), in_layout) for s in lens]
    return {
        "query": query,
        "key": key,
        "value": value,
        "numHeads": nq,
        "scaleValue": 1.0 / np.sqrt(d),
        "inputLayout": layout,
        "numKeyValueHeads": 0 if nq == nkv else nkv,
        **extra,
    }


def paged_case(
    rng: np.random.Generator,
    dt: D,
    layout: str,
    form: str,
    nq: int,
    nkv: int,
    sq: int,
    lengths: Sequence[int],
    d: int,
    block: int,
    names: tuple[str, str],
    **extra: Any,
) -> dict[str, Any]:
    """An inference call over a paged cache: ``form`` pools (BnBsH, BnNBsD, NZ), shuffled blocks, noise in spare ones.

    ``names`` = (the table's, the key lengths' parameter name); key/value are one-tensor lists.
    """
    b = len(lengths)
    s = max(max(lengths, default=0), 1)
    dense_k = S.array(rng, (b, s, nkv, d), dt, low=-1.0, high=1.0)
    dense_v = S.array(rng, (b, s, nkv, d), dt, low=-1.0, high=1.0)
    pool_k, table_ = paged_blocks(rng, dense_k, block)
    pool_v = paged_like(table_, dense_v, block, S.array(rng, pool_k.shape, dt, low=-1.0, high=1.0))

    def as_form(pool: np.ndarray) -> np.ndarray:
        blocks = pool.shape[0]
        if form == "BnBsH":
            return pool.reshape(blocks, block, nkv * d)
        nbsd = pool.transpose(0, 2, 1, 3)
        if form == "BnNBsD":
            return np.ascontiguousarray(nbsd)
        return np.ascontiguousarray(nbsd.reshape(blocks, nkv, block, d // 16, 16).transpose(0, 1, 3, 2, 4))

    query = _to_layout(_bnsd(rng, dt, b, nq, sq, d), "BNSD" if layout == "BNSD_BSND" else layout)
    table_name, lengths_name = names
    return {
        "query": query,
        "key": [as_form(pool_k)],
        "value": [as_form(pool_v)],
        table_name: table_,
        "blockSize": block,
        lengths_name: list(lengths),
        "numHeads": nq,
        "scaleValue": 1.0 / np.sqrt(d),
        "inputLayout": layout,
        "numKeyValueHeads": 0 if nq == nkv else nkv,
        **extra,
    }


IFA_PAGED_NAMES = ("blocktable", "actualSeqLengths")
FIA_PAGED_NAMES = ("blockTable", "actualSeqLengthsKv")


def ifa_paged_samples(rng: np.random.Generator) -> Iterable[Sample]:
    """IncreFlashAttentionV3/V4 over paged caches (parameter names of the versions)."""
    n = IFA_PAGED_NAMES
    for dt in (D.ACL_FLOAT16, D.ACL_BF16):
        yield Sample(
            paged_case(rng, dt, "BSH", "BnBsH", 4, 2, 1, (5, 33, 17), 8, 16, n),
            f"{dt.short} BSH paged (blocks, 16, H), uneven lengths across blocks",
        )
        yield Sample(
            paged_case(rng, dt, "BNSD", "BnNBsD", 2, 2, 1, (40, 0, 64), 16, 32, n),
            f"{dt.short} BNSD paged (blocks, N, 32, D), an empty batch",
        )
    f16 = D.ACL_FLOAT16
    args = paged_case(rng, f16, "BSND", "BnBsH", 4, 1, 1, (37, 21), 8, 16, n)
    yield Sample({**args, "attenMask": S.array(rng, (2, 48), D.ACL_BOOL)}, "BSND paged MQA, [B,S] mask")
    args = paged_case(rng, f16, "BNSD", "BnNBsD", 4, 2, 1, (150, 150), 16, 128, n)
    yield Sample({**args, n[1]: [150]}, "paged, blockSize 128, one length for all")


def ifa_paged_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    """IncreFlashAttentionV3/V4's paged-KV refusals (parameter names of the versions)."""
    n = IFA_PAGED_NAMES
    f16 = D.ACL_FLOAT16
    base = paged_case(rng, f16, "BNSD", "BnNBsD", 2, 2, 1, (20, 9), 16, 16, n)
    yield from _paged_errors(base, n)
    bsh = paged_case(rng, f16, "BSH", "BnNBsD", 2, 2, 1, (20, 9), 16, 16, n)
    yield ErrorSample(bsh, INVALID, "IFA: (blocks, N, blockSize, D) with inputLayout BSH")
    big = paged_case(rng, f16, "BNSD", "BnBsH", 2, 2, 1, (20, 9), 16, 16, n)
    yield ErrorSample({**big, "blockSize": 1024}, INVALID, "IFA: blockSize over 512")
    nz = paged_case(rng, f16, "BNSD", "NZ", 2, 2, 1, (20, 9), 16, 16, n)
    yield ErrorSample(nz, INVALID, "IFA: the NZ cache (documented for FusedInferAttentionScore only)")


def _paged_errors(base: dict[str, Any], names: tuple[str, str]) -> Iterable[ErrorSample]:
    table_name, lengths_name = names
    table_ = base[table_name]
    yield ErrorSample({**base, table_name: table_.astype(np.int64)}, INVALID, "int64 block table")
    yield ErrorSample({**base, "blockSize": 0}, INVALID, "block table with blockSize 0")
    yield ErrorSample({**base, "blockSize": 24}, INVALID, "blockSize not a multiple of 16")
    yield ErrorSample({**base, table_name: table_[:1]}, INVALID, "block table rows differ from B")
    yield ErrorSample({**base, lengths_name: None}, NULLPTR, "paged KV without the key lengths")
    yield ErrorSample({**base, lengths_name: [table_.shape[1] * 16 + 1, 1]}, INVALID, "length past the table")
    yield ErrorSample({**base, "value": [base["value"][0][:-1]]}, INVALID, "key and value pools differ")
    yield ErrorSample({**base, "key": base["key"] * 2, "value": base["value"] * 2}, INVALID, "two pools")
    small = [base["key"][0][:1], base["value"][0][:1]]
    yield ErrorSample({**base, "key": small[:1], "value": small[1:]}, INVALID, "pool smaller than the blocks needed")
    bad = table_.copy()
    bad[0, 0] = base["key"][0].shape[0]
    yield ErrorSample({**base, table_name: bad}, INVALID, "block table entry past the pool (at launch)")


def _pfa_samples(rng: np.random.Generator) -> Iterable[Sample]:
    window: dict[str, Any] = {"preTokens": UNBOUNDED, "nextTokens": 0}
    for dt in (D.ACL_FLOAT16, D.ACL_BF16):
        for layout in PFA_LAYOUTS:
            args = _infer_case(rng, dt, layout, 2, 2, 2, 5, 7, 8, preTokens=UNBOUNDED, nextTokens=UNBOUNDED)
            yield Sample(args, f"{dt.short} {layout} no mask")
        causal = np.triu(np.ones((6, 6), bool), k=1)
        yield Sample(
            _infer_case(rng, dt, "BSH", 1, 4, 2, 6, 6, 8, attenMask=causal, **window), f"{dt.short} GQA causal"
        )
    f16 = D.ACL_FLOAT16
    padded = np.ones((2, 1, 5, 16), bool)
    padded[..., :9] = S.array(rng, (2, 1, 5, 9), D.ACL_BOOL)
    yield Sample(
        _infer_case(rng, f16, "BNSD", 2, 2, 1, 5, 9, 8, attenMask=padded, preTokens=2, nextTokens=3),
        "padded [B,1,Sq,Skv'] mask and a window",
    )
    yield Sample(
        _infer_case(
            rng,
            f16,
            "BSND",
            2,
            2,
            2,
            6,
            6,
            8,
            attenMask=np.triu(np.ones((6, 6), np.int8), k=1),
            actualSeqLengths=[4, 6],
            **window,
        ),
        "actualSeqLengths, int8 mask",
    )
    yield Sample(
        _infer_case(rng, f16, "BSH", 2, 2, 2, 4, 5, 8, actualSeqLengths=[3], preTokens=UNBOUNDED, nextTokens=0),
        "one length for every batch, no mask",
    )


def _pfa_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    f16 = D.ACL_FLOAT16
    extra: dict[str, Any] = {"preTokens": UNBOUNDED, "nextTokens": 0}
    base = _infer_case(rng, f16, "BNSD", 2, 4, 2, 4, 6, 8, **extra)
    yield ErrorSample({**base, "inputLayout": "SBH"}, INVALID, "layout PFA does not take")
    yield ErrorSample({**base, "numKeyValueHeads": 3}, INVALID, "numHeads not a multiple of numKeyValueHeads")
    yield ErrorSample({**base, "numKeyValueHeads": 4}, INVALID, "numKeyValueHeads differs from key's N")
    yield ErrorSample({**base, "numHeads": 2}, INVALID, "numHeads differs from query's N")
    yield ErrorSample({**base, "actualSeqLengths": [2, 5]}, INVALID, "actual length beyond S")
    yield ErrorSample({**base, "actualSeqLengths": []}, INVALID, "no lengths for two batches")
    yield ErrorSample({**base, "attenMask": np.zeros((3, 6), bool)}, INVALID, "mask shape")
    yield ErrorSample({**base, "pseShift": np.zeros((2, 4, 4, 6), np.float16)}, INVALID, "pseShift is reserved")
    yield ErrorSample({**base, "query": base["query"].astype(np.float32)}, INVALID, "float32 query")


def _ifa_samples(rng: np.random.Generator) -> Iterable[Sample]:
    for dt in (D.ACL_FLOAT16, D.ACL_BF16):
        for layout in IFA_LAYOUTS:
            yield Sample(
                _infer_case(rng, dt, layout, 2, 2, 2, 1, 7, 8, listed=True), f"{dt.short} {layout} one cache tensor"
            )
        yield Sample(
            _infer_case(rng, dt, "BNSD", 2, 4, 1, 1, (5, 9), 8, listed=True), f"{dt.short} MQA, one tensor per batch"
        )
    f16 = D.ACL_FLOAT16
    yield Sample(
        _infer_case(rng, f16, "BSH", 2, 4, 2, 1, 8, 8, listed=True, actualSeqLengths=[3, 8]), "actualSeqLengths"
    )
    yield Sample(
        _infer_case(rng, f16, "BSND", 2, 2, 2, 1, 6, 8, listed=True, actualSeqLengths=[0, 6]), "a batch with no keys"
    )
    yield Sample(
        _infer_case(rng, f16, "BNSD", 2, 2, 2, 1, 6, 8, listed=True, attenMask=S.array(rng, (2, 2, 1, 8), D.ACL_BOOL)),
        "[B,N,1,S'] mask",
    )
    yield Sample(
        _infer_case(
            rng,
            f16,
            "BSH",
            2,
            2,
            1,
            1,
            (4, 6),
            8,
            listed=True,
            attenMask=S.array(rng, (2, 6), D.ACL_BOOL).astype(np.uint8),
        ),
        "[B,S] uint8 mask over per-batch caches",
    )


def _ifa_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    f16 = D.ACL_FLOAT16
    base = _infer_case(rng, f16, "BNSD", 2, 4, 2, 1, 6, 8, listed=True)
    yield ErrorSample({**_infer_case(rng, f16, "BNSD", 2, 4, 2, 2, 6, 8, listed=True)}, INVALID, "query S of 2")
    yield ErrorSample({**base, "key": base["key"] * 3, "value": base["value"] * 3}, INVALID, "3 tensors for B=2")
    yield ErrorSample({**base, "value": [base["value"][0][:, :, :5].copy()]}, INVALID, "key and value shapes differ")
    yield ErrorSample({**base, "actualSeqLengths": [7, 2]}, INVALID, "actual length beyond the cache")
    yield ErrorSample({**base, "attenMask": np.zeros((2, 4, 1, 3), bool)}, INVALID, "mask shorter than the cache")
    yield ErrorSample({**base, "inputLayout": "BNSD_BSND"}, INVALID, "layout IFA does not take")


FIA_DEFAULTS: dict[str, Any] = {
    "preTokens": UNBOUNDED,
    "nextTokens": UNBOUNDED,
    "sparseMode": 0,
    "innerPrecise": 0,
    "blockSize": 0,
    "antiquantMode": 0,
    "softmaxLseFlag": False,
}


def _fia_samples(rng: np.random.Generator) -> Iterable[Sample]:
    for dt in (D.ACL_FLOAT16, D.ACL_BF16):
        args = _infer_case(rng, dt, "BSND", 2, 4, 2, 5, 7, 8, listed=True, **FIA_DEFAULTS)
        yield Sample(args, f"{dt.short} prefill GQA")
        args = _infer_case(rng, dt, "BNSD", 2, 2, 2, 1, 7, 8, per_batch=True, **FIA_DEFAULTS)
        yield Sample({**args, "softmaxLseFlag": True}, f"{dt.short} decode with softmaxLse")
    f16 = D.ACL_FLOAT16
    for mode, sq, skv, extra in (
        (2, 5, 8, {}),
        (3, 7, 5, {"innerPrecise": 2}),
        (4, 6, 6, {"preTokens": 1, "nextTokens": 2}),
    ):
        args = _infer_case(rng, f16, "BSH", 1, 2, 2, sq, skv, 8, listed=True, **FIA_DEFAULTS)
        yield Sample(
            {**args, "attenMask": compressed_mask(), "sparseMode": mode, "softmaxLseFlag": True, **extra},
            f"sparse {mode} Sq={sq} Skv={skv}",
        )
    args = _infer_case(rng, f16, "BNSD_BSND", 2, 2, 2, 4, (6, 3), 8, **FIA_DEFAULTS)
    yield Sample(
        {
            **args,
            "attenMask": S.array(rng, (2, 1, 4, 6), D.ACL_BOOL),
            "sparseMode": 1,
            "actualSeqLengths": [4, 2],
            "actualSeqLengthsKv": [5, 3],
        },
        "allMask, per-batch caches, actual lengths, BNSD_BSND",
    )
    args = _infer_case(rng, f16, "BSH", 2, 2, 2, 4, 6, 8, listed=True, **FIA_DEFAULTS)
    yield Sample(
        {**args, "attenMask": np.zeros((4, 6), bool), "preTokens": 1, "nextTokens": 0, "actualSeqLengthsKv": [6, 4]},
        "defaultMask with a window",
    )
    yield from _fia_paged_samples(rng)


def _fia_paged_samples(rng: np.random.Generator) -> Iterable[Sample]:
    n, plain = FIA_PAGED_NAMES, FIA_DEFAULTS
    for dt in (D.ACL_FLOAT16, D.ACL_BF16):
        args = paged_case(rng, dt, "BNSD", "BnNBsD", 4, 2, 1, (35, 16, 50), 8, 16, n, **{**plain, "blockSize": 16})
        yield Sample({**args, "softmaxLseFlag": True}, f"{dt.short} paged decode (blocks, N, 16, D) with softmaxLse")
        args = paged_case(rng, dt, "BSH", "NZ", 2, 2, 1, (40, 7), 16, 16, n, **{**plain, "blockSize": 16})
        yield Sample(args, f"{dt.short} paged decode, NZ cache (blocks, N, D/16, 16, 16)")
    f16 = D.ACL_FLOAT16
    args = paged_case(rng, f16, "BSND", "BnBsH", 4, 1, 1, (70, 33), 16, 32, n, **{**plain, "blockSize": 32})
    yield Sample({**args, "attenMask": S.array(rng, (2, 1, 1, 70), D.ACL_BOOL)}, "paged decode MQA, BSND, mask")
    args = paged_case(rng, f16, "BSH", "BnBsH", 2, 2, 3, (20, 37), 64, 16, n, **{**plain, "blockSize": 16})
    yield Sample(
        {**args, "attenMask": compressed_mask(), "sparseMode": 3, "actualSeqLengths": [3, 2], "softmaxLseFlag": True},
        "paged prefill, rightDownCausal, actual query lengths",
    )
    args = paged_case(rng, f16, "BNSD_BSND", "NZ", 4, 2, 4, (9, 40), 64, 32, n, **{**plain, "blockSize": 32})
    yield Sample(args, "paged prefill, NZ cache, BNSD_BSND")


def _fia_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    f16 = D.ACL_FLOAT16
    base = _infer_case(rng, f16, "BNSD", 2, 2, 2, 4, 6, 8, listed=True, **FIA_DEFAULTS)
    paged = paged_case(rng, f16, "BNSD", "BnNBsD", 2, 2, 1, (20, 9), 16, 16, FIA_PAGED_NAMES, **FIA_DEFAULTS)
    yield from _paged_errors({**paged, "blockSize": 16}, FIA_PAGED_NAMES)
    prefill = paged_case(rng, f16, "BSH", "BnBsH", 2, 2, 2, (20, 9), 8, 16, FIA_PAGED_NAMES, **FIA_DEFAULTS)
    yield ErrorSample({**prefill, "blockSize": 16}, INVALID, "paged prefill at D 8 needs a blockSize multiple of 128")
    yield ErrorSample({**base, "antiquantScale": np.ones(2, np.float16)}, INVALID, "antiquant not implemented")
    yield ErrorSample({**base, "sparseMode": 6}, INVALID, "global sparse mode")
    decode = _infer_case(rng, f16, "BNSD", 2, 2, 2, 1, 6, 8, listed=True, **FIA_DEFAULTS)
    yield ErrorSample({**decode, "sparseMode": 9}, INVALID, "sparseMode out of range on the decode branch")
    yield ErrorSample({**base, "sparseMode": 2}, NULLPTR, "causal without the mask")
    yield ErrorSample(
        {**base, "sparseMode": 3, "attenMask": np.zeros((4, 6), bool)}, INVALID, "causal with a full mask"
    )
    yield ErrorSample({**base, "numKeyValueHeads": 4}, INVALID, "kv heads do not divide")
    yield ErrorSample({**base, "innerPrecise": 4}, INVALID, "innerPrecise out of range")


def _inference_params(kind: str) -> tuple[Any, ...]:
    kv_kind = tensor if kind == "PFA" else tensor_list
    kv_dtypes = HALF
    head = (
        tensor("query", HALF, min_rank=3, max_rank=4),
        kv_kind("key", kv_dtypes),
        kv_kind("value", kv_dtypes),
        tensor("pseShift", HALF, optional=True),
        tensor("attenMask", INFER_MASK_DTYPES, optional=True, min_rank=2, max_rank=4),
        int_array("actualSeqLengths", optional=True),
    )
    if kind == "PFA":
        return (
            *head,
            int_attr("numHeads"),
            float_attr("scaleValue", default=1.0),
            int_attr("preTokens", default=UNBOUNDED),
            int_attr("nextTokens", default=0),
            string_attr("inputLayout", choices=PFA_LAYOUTS, default="BSH"),
            int_attr("numKeyValueHeads", default=0),
            out("attentionOut", HALF),
        )
    if kind == "IFA":
        return (
            *head,
            int_attr("numHeads"),
            float_attr("scaleValue", default=1.0),
            string_attr("inputLayout", choices=IFA_LAYOUTS, default="BSH"),
            int_attr("numKeyValueHeads", default=0),
            out("attentionOut", HALF),
        )
    anything = None
    return (
        *head,
        int_array("actualSeqLengthsKv", optional=True),
        tensor("deqScale1", anything, optional=True),
        tensor("quantScale1", anything, optional=True),
        tensor("deqScale2", anything, optional=True),
        tensor("quantScale2", anything, optional=True),
        tensor("quantOffset2", anything, optional=True),
        tensor("antiquantScale", anything, optional=True),
        tensor("antiquantOffset", anything, optional=True),
        tensor("blockTable", frozenset({D.ACL_INT32}), optional=True),
        tensor("queryPaddingSize", anything, optional=True),
        tensor("kvPaddingSize", anything, optional=True),
        int_attr("numHeads"),
        float_attr("scaleValue", default=1.0),
        int_attr("preTokens", default=UNBOUNDED),
        int_attr("nextTokens", default=UNBOUNDED),
        string_attr("inputLayout", choices=PFA_LAYOUTS, default="BSH"),
        int_attr("numKeyValueHeads", default=0),
        int_attr("sparseMode", default=0, choices=tuple(INFER_SPARSE_NAMES)),  # on both branches
        int_attr("innerPrecise", default=0),
        int_attr("blockSize", default=0),
        int_attr("antiquantMode", default=0),
        bool_attr("softmaxLseFlag", default=False),
        out("attentionOut", HALF),
        out("softmaxLse", {D.ACL_FLOAT}, optional=True),
    )


# ----------------------------------------------------------------------------- rotary embedding
def _rope_infer(call: Call) -> Infos:
    x, cos, sin = (tensor_arg(call, n) for n in ("x", "cos", "sin"))
    mode = call.args["mode"]
    if mode not in (0, 1, 2, 3):
        raise tiling(
            f"mode={mode} is not supported; expected 0 (half), 1 (interleave), 2 (quarter) or 3 (interleave-half)"
        )
    for name, t in (("cos", cos), ("sin", sin)):
        if t.dtype != x.dtype:
            raise invalid(f"{name} has dtype {t.dtype.short}; it must match x ({x.dtype.short})")
    if x.rank not in (3, 4):
        raise invalid(f"x must have rank 3 (TND) or 4 (BNSD/BSND/SBND), got {x.rank}")
    if tuple(cos.shape) != tuple(sin.shape):
        raise tiling(f"cos {list(cos.shape)} and sin {list(sin.shape)} must have the same shape")
    d = x.shape[-1]
    if cos.rank != x.rank or cos.shape[-1] != d or any(c not in (1, s) for c, s in zip(cos.shape, x.shape)):
        raise tiling(f"cos/sin {list(cos.shape)} must broadcast to x {list(x.shape)} with the same last dim D")
    multiple = 4 if mode == 2 else 2
    if d % multiple:
        raise tiling(f"D={d} must be a multiple of {multiple} for mode {mode}")
    return {"out": same(x.shape, x.dtype)}


def _rope_samples(rng: np.random.Generator) -> Iterable[Sample]:
    layouts = {  # x shape, cos/sin shape
        "BNSD 11SD": ((2, 3, 5, 8), (1, 1, 5, 8)),
        "BSND 1S1D": ((2, 5, 3, 8), (1, 5, 1, 8)),
        "SBND S11D": ((5, 2, 3, 8), (5, 1, 1, 8)),
        "TND T1D": ((6, 2, 8), (6, 1, 8)),
        "BNSD B1SD": ((2, 2, 4, 8), (2, 1, 4, 8)),
    }
    for dt in (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16):
        for mode in (0, 1, 2, 3):
            for note, (xs, cs) in layouts.items():
                angles = rng.uniform(0, 2 * np.pi, size=cs)
                yield Sample(
                    {
                        "x": S.array(rng, xs, dt),
                        "cos": np.cos(angles).astype(dt.numpy),
                        "sin": np.sin(angles).astype(dt.numpy),
                        "mode": mode,
                    },
                    f"{dt.short} mode {mode} {note}",
                )


def _rope_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    x = S.array(rng, (1, 2, 4, 8), D.ACL_FLOAT)
    c = S.array(rng, (1, 1, 4, 8), D.ACL_FLOAT)
    yield ErrorSample({"x": x, "cos": c, "sin": c, "mode": 4}, TILING, "mode out of range")
    yield ErrorSample({"x": x, "cos": c, "sin": c[..., :4].copy(), "mode": 0}, TILING, "cos and sin differ")
    yield ErrorSample({"x": x, "cos": c[:, :, :3].copy(), "sin": c[:, :, :3].copy(), "mode": 0}, TILING, "S differs")
    yield ErrorSample({"x": x, "cos": c.astype(np.float16), "sin": c.astype(np.float16), "mode": 0}, INVALID, "dtypes")
    x6 = S.array(rng, (1, 1, 2, 6), D.ACL_FLOAT)
    c6 = S.array(rng, (1, 1, 2, 6), D.ACL_FLOAT)
    yield ErrorSample({"x": x6, "cos": c6, "sin": c6, "mode": 2}, TILING, "quarter mode needs D % 4 == 0")


def _apply_rope_infer(call: Call) -> Infos:
    q, k, cos, sin = (tensor_arg(call, n) for n in ("queryRef", "keyRef", "cos", "sin"))
    layout = call.args["layout"]
    if layout in (2, 3):
        raise invalid(
            f"layout={layout} ({'SBND' if layout == 2 else 'BNSD'}) is not supported; CANN takes 1 (BSND) or 4 (TND)"
        )
    if layout not in (1, 4):
        raise invalid(f"layout={layout} is not supported; expected 1 (BSND) or 4 (TND)")
    dtypes = {t.dtype for t in (q, k, cos, sin)}
    if len(dtypes) != 1:
        raise invalid("queryRef, keyRef, cos and sin must share one dtype")
    rank = 4 if layout == 1 else 3
    for name, t in (("queryRef", q), ("keyRef", k), ("cos", cos), ("sin", sin)):
        if t.rank != rank:
            raise invalid(f"{name} must have rank {rank} for layout {layout}, got shape {list(t.shape)}")
        if t.numel == 0:
            raise invalid(f"{name} is empty; empty tensors are not supported")
    lead = rank - 2  # B,S for BSND; T for TND
    d = q.shape[-1]
    if d not in (64, 128):
        raise invalid(f"the head dim D={d} must be 64 or 128")
    if tuple(k.shape[:lead]) != tuple(q.shape[:lead]) or k.shape[-1] != d:
        raise invalid(f"keyRef {list(k.shape)} must match queryRef {list(q.shape)} except in N")
    want = (*q.shape[:lead], 1, d)
    for name, t in (("cos", cos), ("sin", sin)):
        if tuple(t.shape) != want:
            raise invalid(f"{name} has shape {list(t.shape)}; expected {list(want)}")
    return {"queryRef": same(q.shape, q.dtype), "keyRef": same(k.shape, k.dtype)}


def _apply_rope_samples(rng: np.random.Generator) -> Iterable[Sample]:
    for dt in (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16):
        for layout, qs, ks, cs in (
            (1, (2, 3, 2, 64), (2, 3, 1, 64), (2, 3, 1, 64)),
            (4, (4, 2, 128), (4, 2, 128), (4, 1, 128)),
        ):
            angles = rng.uniform(0, 2 * np.pi, size=cs)
            yield Sample(
                {
                    "queryRef": S.array(rng, qs, dt),
                    "keyRef": S.array(rng, ks, dt),
                    "cos": np.cos(angles).astype(dt.numpy),
                    "sin": np.sin(angles).astype(dt.numpy),
                    "layout": layout,
                },
                f"{dt.short} layout {layout}",
            )


def _apply_rope_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    q = S.array(rng, (1, 2, 2, 64), D.ACL_FLOAT)
    c = S.array(rng, (1, 2, 1, 64), D.ACL_FLOAT)
    yield ErrorSample({"queryRef": q, "keyRef": q.copy(), "cos": c, "sin": c, "layout": 3}, INVALID, "BNSD layout")
    yield ErrorSample({"queryRef": q, "keyRef": q.copy(), "cos": c, "sin": c, "layout": 5}, INVALID, "unknown layout")
    q32 = S.array(rng, (1, 2, 2, 32), D.ACL_FLOAT)
    c32 = S.array(rng, (1, 2, 1, 32), D.ACL_FLOAT)
    yield ErrorSample({"queryRef": q32, "keyRef": q32.copy(), "cos": c32, "sin": c32, "layout": 1}, INVALID, "D=32")
    yield ErrorSample(
        {"queryRef": q, "keyRef": q.copy(), "cos": S.array(rng, (1, 2, 2, 64), D.ACL_FLOAT), "sin": c, "layout": 1},
        INVALID,
        "cos with N",
    )
    yield ErrorSample(
        {"queryRef": q, "keyRef": S.array(rng, (1, 3, 2, 64), D.ACL_FLOAT), "cos": c, "sin": c, "layout": 1},
        INVALID,
        "key S differs",
    )


# ----------------------------------------------------------------------------- SwiGlu
def _swiglu_infer(call: Call) -> Infos:
    x = tensor_arg(call, "x")
    if x.rank == 0:
        raise invalid("x must have at least one dimension")
    dim = normalize_dim(call.args["dim"], x.rank)
    if x.shape[dim] % 2:
        raise invalid(f"x has odd size {x.shape[dim]} along dim {call.args['dim']}; it is split into two halves")
    call.plan["dim"] = dim
    shape = list(x.shape)
    shape[dim] //= 2
    return {"out": same(shape, x.dtype)}


def _swiglu_samples(rng: np.random.Generator) -> Iterable[Sample]:
    for dt in (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16):
        for shape, dim in (((6,), -1), ((3, 8), -1), ((4, 5), 0), ((2, 6, 3), 1), ((0, 4), -1)):
            yield Sample(
                {"x": S.array(rng, shape, dt, low=-6, high=6), "dim": dim}, f"{dt.short} {list(shape)} dim {dim}"
            )


def _swiglu_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    yield ErrorSample({"x": S.array(rng, (3, 5), D.ACL_FLOAT), "dim": -1}, INVALID, "odd split dim")
    yield ErrorSample({"x": S.array(rng, (3, 4), D.ACL_FLOAT), "dim": 2}, INVALID, "dim out of range")
    yield ErrorSample({"x": S.array(rng, (3, 4), D.ACL_INT32), "dim": -1}, INVALID, "integer x")


# ----------------------------------------------------------------------------- declarations

SPECS: list[OpSpec] = [
    OpSpec(
        "FlashAttentionScore",
        FAMILY,
        _fa_params(varlen=False),
        _fa_infer,
        samples=_fa_samples,
        error_samples=_fa_errors,
        summary="training flash attention forward, layouts BSH/SBH/BSND/BNSD, sparse modes 0-4",
    ),
    OpSpec(
        "FlashAttentionVarLenScore",
        FAMILY,
        _fa_params(varlen=True),
        _varlen_infer,
        samples=_varlen_samples,
        error_samples=_varlen_errors,
        summary="flash attention forward over packed variable-length sequences (TND)",
    ),
    OpSpec(
        "PromptFlashAttention",
        FAMILY,
        _inference_params("PFA"),
        _pfa_infer,
        samples=_pfa_samples,
        error_samples=_pfa_errors,
        summary="inference prefill attention",
    ),
    OpSpec(
        "IncreFlashAttention",
        FAMILY,
        _inference_params("IFA"),
        _ifa_infer,
        samples=_ifa_samples,
        error_samples=_ifa_errors,
        summary="inference decode attention against a KV cache",
    ),
    OpSpec(
        "FusedInferAttentionScore",
        FAMILY,
        _inference_params("FIA"),
        _fia_infer,
        samples=_fia_samples,
        error_samples=_fia_errors,
        summary="fused prefill/decode inference attention (non-quantised; dense or paged KV)",
    ),
    OpSpec(
        "RotaryPositionEmbedding",
        FAMILY,
        (
            tensor("x", FLOATS, min_rank=3, max_rank=4),
            tensor("cos", FLOATS, min_rank=3, max_rank=4),
            tensor("sin", FLOATS, min_rank=3, max_rank=4),
            int_attr("mode", default=0),
            out("out", FLOATS),
        ),
        _rope_infer,
        samples=_rope_samples,
        error_samples=_rope_errors,
        summary="y = x*cos + rotate(x)*sin, rotate by half / interleave / quarter / interleave-half",
    ),
    OpSpec(
        "ApplyRotaryPosEmb",
        FAMILY,
        (
            ref("queryRef", FLOATS),
            ref("keyRef", FLOATS),
            tensor("cos", FLOATS),
            tensor("sin", FLOATS),
            int_attr("layout", default=1),
        ),
        _apply_rope_infer,
        samples=_apply_rope_samples,
        error_samples=_apply_rope_errors,
        summary="rotate-half rotary embedding applied in place to query and key",
    ),
    OpSpec(
        "SwiGlu",
        FAMILY,
        (tensor("x", FLOATS, min_rank=1), int_attr("dim", default=-1), out("out", FLOATS)),
        _swiglu_infer,
        samples=_swiglu_samples,
        error_samples=_swiglu_errors,
        summary="silu(first half) * second half along dim",
        accuracy=ulp(6, reason="silu(a)·b: Silu's 5 ulp and one multiplication"),
    ),
]

_ATTENTION_TABLE = table(
    "softmax(QKᵀ)·V's bound needs Σ_j p_j·|v_j| with p from the unchanged Q and K: the magnitudes run takes"
    " the absolute value of every float input (Q and K too), so it cannot form M; needs a per-input selection"
)
_ROPE_TABLE = table(
    "x·cos + rotate(x)·sin: rotate negates half of x, so the magnitudes run (|inputs|) gives |x||cos| - |x'||sin|,"
    " not Σ|terms|; needs its own scale"
)
SPECS = with_accuracy(
    SPECS,
    {
        **{
            op: _ATTENTION_TABLE
            for op in (
                "FlashAttentionScore",
                "FlashAttentionVarLenScore",
                "PromptFlashAttention",
                "IncreFlashAttention",
                "FusedInferAttentionScore",
            )
        },
        "RotaryPositionEmbedding": _ROPE_TABLE,
        "ApplyRotaryPosEmb": _ROPE_TABLE,
    },
)

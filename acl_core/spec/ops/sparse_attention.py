"""DeepSeek-V3.2 sparse attention: LightningIndexer picks keys, SparseFlashAttention attends over them.

Shared conventions (the reference kernels implement exactly these):

* Layouts. ``query`` is BSND ``[B, S1, N1, D]`` or TND ``[T1, N1, D]``; ``key`` (and SparseFlashAttention's
  ``value``) BSND ``[B, S2, N2, D]``, TND ``[T2, N2, D]`` or PA_BSND ``[blocks, blockSize, N2, D]`` (paged:
  token ``j`` of batch ``b`` is row ``j % blockSize`` of block ``blockTable[b, j // blockSize]``). Query head
  ``h`` reads key head ``h // (N1 / N2)``. A null layout string means BSND.
* Lengths are device tensors (int32 ``[B]``): BSND lengths count each batch's valid tokens (null: all
  of S), TND lengths are cumulative ends (required; the query's also give B), PA_BSND lengths count
  tokens (required). Batch ``b``'s query rows ``s < Lq[b]`` are computed; other rows are not (indices
  -1 / values -inf; SparseFlashAttention: zeros). Checked when the operator runs (161002 at launch on the
  reference, at synchronisation on the GPU, nothing written): BSND lengths in [0, S], TND ends
  non-decreasing from 0 and ending at T, PA lengths within the block table, the table entries those
  lengths use within the pool.
* ``sparseMode`` 0 lets every query row see its batch's ``Lk`` keys; 3 (rightDownCausal) lets row ``s``
  see keys ``j < Lk - Lq + s + 1`` (none when that is <= 0). ``preTokens`` / ``nextTokens`` take only
  their default 2^63-1 (CANN: "only the default value is supported").

LightningIndexer (``Top-k{ Σ_h w_h · ReLU(q_h · k) }`` per query row and key head over the group's
query heads): every score is computed in float32 in one fixed order, so every backend computes the
same value and the ranking is exact (the rule this project adopted for top-k over computed scores;
CANN's document gives only the formula, its test golden computes in float32 too): each head's dot
product accumulates ``d = 0 .. D-1`` in float32 (a product of two fp16/bf16 values is exact in float32,
so a fused multiply-add and a multiply then add agree), ReLU keeps it or gives 0, then the heads are
summed in order ``h = 0 .. g-1`` as float32 ``w_h·r_h`` (rounded) added to the running float32 sum
(rounded). Keys are ranked by score, descending, equal scores to the lower key index (the golden's
stable sort); a key whose score is NaN or -inf is never selected. ``sparseIndicesOut`` holds the first
``min(visible, sparseCount)`` key indices (positions within the batch's key sequence), then -1;
``sparseValuesOut`` (``returnValues``) their scores in the query's dtype, -inf where the index is -1.
Accuracy: exact (integer indices; values are the same float32 rounded once). D, N1 and N2 are not
limited beyond N1 % N2 == 0 (CANN's kernels take D = 128, N1 <= 64, N2 = 1).

SparseFlashAttention (MLA absorb mode, ``attentionMode`` 2 only): query row ``s`` of batch ``b`` and
query head ``h`` attends to the key tokens its kv head's ``sparseIndices`` row names:
``softmax(scale · (q·kᵀ + qRope·kRopeᵀ)) · v`` over them (no rope term when queryRope / keyRope are null).
Index ``i`` names tokens ``[i·sparseBlockSize, (i+1)·sparseBlockSize)``, cut at the row's visible limit
(``Lk``, or the causal limit of sparseMode 3). As CANN's golden reads them: only the first
``ceil(limit / sparseBlockSize)`` entries of a row are read, a negative entry ends the row (CANN pads
with -1), an entry past the limit is skipped, a repeated entry counts twice. ``value`` is read as
given (CANN's golden passes ``key``: in absorb mode K = V). A row with nothing to attend, and a row
not computed, writes zeros, and softmaxMaxOut / softmaxSumOut 0 there (the golden's); elsewhere they
are the scaled scores' max and sum of exponentials, [B, N2, S1, N1/N2] (TND: [N2, T1, N1/N2]), written
only when ``returnSoftmaxLse`` is true (then not with PA_BSND, as CANN). Accuracy: the per-dtype table
(softmax over gathered rows: the attention family's reason).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.spec import samples as S
from acl_core.spec.accuracy import exact, table, with_accuracy
from acl_core.spec.opspec import (
    INVALID,
    NULLPTR,
    Call,
    ErrorSample,
    Infos,
    OpSpec,
    Sample,
    bool_attr,
    float_attr,
    int_attr,
    invalid,
    nullptr,
    out,
    string_attr,
    tensor,
)
from acl_core.spec.plan import declare as declare_plan
from acl_core.spec.rules import expect_output, same, tensor_arg
from acl_core.tensor import AclTensor

declare_plan(
    "q_layout", "'BSND' | 'TND'", "the query's layout (LightningIndexer, SparseFlashAttention)", str, ("BSND", "TND")
)
declare_plan(
    "kv_layout",
    "'BSND' | 'TND' | 'PA_BSND'",
    "the key's (and value's) layout: dense per batch, packed tokens, or paged blocks through blockTable",
    str,
    ("BSND", "TND", "PA_BSND"),
)
declare_plan("batch", "int", "B: query batches (TND: the length of the cumulative query lengths)", int)

FAMILY = "sparse_attention"
HALF = frozenset({D.ACL_FLOAT16, D.ACL_BF16})
I32 = frozenset({D.ACL_INT32})
INT64_MAX = 2**63 - 1
"""preTokens / nextTokens: the only value CANN supports (no window)."""
SPARSE_COUNTS = (*range(1, 2049), 3072, 4096, 5120, 6144, 7168, 8192)
MAX_SPARSE_BLOCK = 128


@dataclass(frozen=True)
class Dims:
    """What both operators read of their query / key geometry."""

    b: int
    rows: int
    """S1 (BSND) or T1 (TND): the query rows of one batch or of all."""
    n1: int
    d: int
    n2: int
    capacity: int
    """Most keys one batch can have: S2 (BSND), T2 (TND), the block table's reach (PA_BSND)."""


def _layout(call: Call, name: str, default: str = "BSND") -> str:
    value = call.args.get(name)
    return default if value is None else str(value)


def _rank(name: str, t: AclTensor, rank: int, layout: str) -> None:
    if t.rank != rank:
        raise invalid(f"{name} must have rank {rank} for layout {layout}, got shape {list(t.shape)}")
    if t.numel == 0:
        raise invalid(f"{name} is empty (shape {list(t.shape)}); empty tensors are not supported")


def _lengths(call: Call, name: str, b: int, required: bool, why: str) -> None:
    t = call.args.get(name)
    if t is None:
        if required:
            raise nullptr(f"{name} is null; {why}")
        return
    if tuple(t.shape) != (b,):
        raise invalid(f"{name} has shape {list(t.shape)}; expected [B] = [{b}]")


def geometry(call: Call, lengths_q: str, lengths_k: str, table_name: str, *, key: str = "key") -> Dims:
    """Check the layouts, shapes and lengths shared by both operators; store them in the plan."""
    q, k = tensor_arg(call, "query"), tensor_arg(call, key)
    q_layout = _layout(call, QUERY_LAYOUT[call.spec.name])
    kv_layout = _layout(call, KEY_LAYOUT[call.spec.name])
    if q_layout not in ("BSND", "TND"):
        raise invalid(f"query layout {q_layout!r} is not supported; expected BSND or TND")
    if kv_layout not in ("BSND", "TND", "PA_BSND"):
        raise invalid(f"key layout {kv_layout!r} is not supported; expected BSND, TND or PA_BSND")
    if q.dtype != k.dtype:
        raise invalid(f"query ({q.dtype.short}) and {key} ({k.dtype.short}) must share one dtype")
    if q_layout == "BSND":
        _rank("query", q, 4, q_layout)
        b, rows, n1, d = q.shape
        _lengths(call, lengths_q, b, False, "")
    else:
        _rank("query", q, 3, q_layout)
        rows, n1, d = q.shape
        lens = call.args.get(lengths_q)
        if lens is None:
            raise nullptr(f"{lengths_q} is null; query layout TND needs the cumulative query lengths")
        if lens.rank != 1 or lens.numel == 0:
            raise invalid(f"{lengths_q} must be a non-empty [B] tensor, got shape {list(lens.shape)}")
        b = lens.shape[0]
    table_t = call.args.get(table_name)
    if kv_layout == "BSND":
        _rank(key, k, 4, kv_layout)
        kb, capacity, n2, kd = k.shape
        if kb != b:
            raise invalid(f"{key} has batch {kb}; the query has B={b}")
        _lengths(call, lengths_k, b, False, "")
    elif kv_layout == "TND":
        _rank(key, k, 3, kv_layout)
        capacity, n2, kd = k.shape
        _lengths(call, lengths_k, b, True, "key layout TND needs the cumulative key lengths")
    else:
        _rank(key, k, 4, kv_layout)
        _, block, n2, kd = k.shape
        _lengths(call, lengths_k, b, True, "key layout PA_BSND needs each batch's key length")
        if table_t is None:
            raise nullptr(f"{table_name} is null; key layout PA_BSND needs the block table")
        if table_t.rank != 2 or table_t.shape[0] != b or table_t.shape[1] == 0:
            raise invalid(f"{table_name} has shape {list(table_t.shape)}; expected [B, blocks per batch] with B={b}")
        capacity = table_t.shape[1] * block
    if kv_layout != "PA_BSND" and table_t is not None:
        raise invalid(f"{table_name} is only for key layout PA_BSND; pass null")
    if kd != d:
        raise invalid(f"{key} head dim {kd} differs from query head dim {d}")
    if n2 <= 0 or n1 % n2:
        raise invalid(f"query heads ({n1}) must be a multiple of key heads ({n2})")
    for name in ("preTokens", "nextTokens"):
        if call.args[name] != INT64_MAX:
            raise invalid(f"{name}={call.args[name]} is not supported; only the default 2^63-1 (no window)")
    call.plan.update(q_layout=q_layout, kv_layout=kv_layout, batch=b)
    return Dims(b, rows, n1, d, n2, capacity)


QUERY_LAYOUT = {"LightningIndexer": "layoutQueryOptional", "SparseFlashAttention": "layoutQuery"}
KEY_LAYOUT = {"LightningIndexer": "layoutKeyOptional", "SparseFlashAttention": "layoutKv"}


def _head_shape(dims: Dims, q_layout: str, last: int) -> tuple[int, ...]:
    """[B, S1, N2, last] (BSND) or [T1, N2, last] (TND)."""
    return (dims.b, dims.rows, dims.n2, last) if q_layout == "BSND" else (dims.rows, dims.n2, last)


# ----------------------------------------------------------------------------- LightningIndexer
def _li_infer(call: Call) -> Infos:
    dims = geometry(call, "actualSeqLengthsQueryOptional", "actualSeqLengthsKeyOptional", "blockTableOptional")
    q_layout, kv_layout = call.plan["q_layout"], call.plan["kv_layout"]
    q, w = tensor_arg(call, "query"), tensor_arg(call, "weights")
    want_w = (dims.b, dims.rows, dims.n1) if q_layout == "BSND" else (dims.rows, dims.n1)
    if tuple(w.shape) != want_w:
        raise invalid(f"weights has shape {list(w.shape)}; expected {list(want_w)}")
    if w.dtype != D.ACL_FLOAT and w.dtype != q.dtype:
        raise invalid(f"weights of {w.dtype.short} must be float32 or the query's dtype ({q.dtype.short})")
    count = call.args["sparseCount"]
    if count not in SPARSE_COUNTS:
        raise invalid(f"sparseCount={count} is not supported; expected 1..2048, 3072, 4096, 5120, 6144, 7168 or 8192")
    indices = same(_head_shape(dims, q_layout, count), D.ACL_INT32)
    expect_output(call, "sparseIndicesOut", indices)
    values = None
    if call.args["returnValues"]:
        if kv_layout == "PA_BSND":
            raise invalid("returnValues is not supported with key layout PA_BSND (CANN: training layouts only)")
        values = same(indices.shape, q.dtype)
        # sparseValuesOut is null only while eager.run is still allocating outputs from this answer
        if call.args.get("sparseValuesOut") is None and call.args.get("sparseIndicesOut") is not None:
            raise nullptr("returnValues is true but sparseValuesOut is null")
    return {"sparseIndicesOut": indices, "sparseValuesOut": values}


def _bsnd(rng: np.random.Generator, dt: D, shape: tuple[int, ...]) -> np.ndarray:
    return S.array(rng, shape, dt, low=-1.0, high=1.0)


def paged_blocks(
    rng: np.random.Generator, dense: np.ndarray, block: int, extra_blocks: int = 2
) -> tuple[np.ndarray, np.ndarray]:
    """A BSND [B, S, N, D] cache as PA_BSND blocks in shuffled order (spare blocks hold noise), and its table."""
    b, s, _, _ = dense.shape
    per = -(-s // block)
    total = b * per + extra_blocks
    table_ = rng.permutation(total)[: b * per].reshape(b, per).astype(np.int32)
    noise = S.array(rng, (total, block, *dense.shape[2:]), _dtype(dense), low=-1.0, high=1.0)
    return paged_like(table_, dense, block, noise), table_


def paged_like(table_: np.ndarray, dense: np.ndarray, block: int, pool: np.ndarray) -> np.ndarray:
    """``pool`` with batch b's rows of ``dense`` [B, S, ...] placed in the blocks ``table_[b]`` names."""
    pool = pool.copy()
    b, s = dense.shape[:2]
    padded = np.zeros((b, table_.shape[1] * block, *dense.shape[2:]), dense.dtype)
    padded[:, :s] = dense
    for i in range(b):
        for j in range(table_.shape[1]):
            pool[table_[i, j]] = padded[i, j * block : (j + 1) * block]
    return pool


def _dtype(arr: np.ndarray) -> D:
    from acl_core.dtypes import from_numpy

    return from_numpy(arr.dtype)


def _packed(dense: np.ndarray, lengths: list[int]) -> np.ndarray:
    """The first lengths[b] rows of each batch of a [B, S, N, D] array, packed as [T, N, D]."""
    return np.ascontiguousarray(np.concatenate([dense[i, :n] for i, n in enumerate(lengths)], axis=0))


def li_case(
    rng: np.random.Generator,
    dt: D,
    b: int,
    s1: int,
    s2: int,
    n1: int,
    n2: int,
    d: int,
    count: int,
    *,
    q_layout: str = "BSND",
    kv_layout: str = "BSND",
    lq: list[int] | None = None,
    lk: list[int] | None = None,
    block: int = 16,
    w_dtype: D | None = None,
    mode: int = 3,
    values: bool = False,
) -> dict[str, Any]:
    """One LightningIndexer call built from dense [B,S,N,D] arrays, laid out as asked."""
    q = _bsnd(rng, dt, (b, s1, n1, d))
    k = _bsnd(rng, dt, (b, s2, n2, d))
    w = S.array(rng, (b, s1, n1), w_dtype or dt, low=-1.0, high=1.0)
    args: dict[str, Any] = {"sparseCount": count, "sparseMode": mode, "returnValues": values}
    args["layoutQueryOptional"], args["layoutKeyOptional"] = q_layout, kv_layout
    lq_full = lq if lq is not None else [s1] * b
    lk_full = lk if lk is not None else [s2] * b
    if q_layout == "TND":
        args["query"], args["weights"] = _packed(q, lq_full), _packed(w[..., None], lq_full)[..., 0].copy()
        args["actualSeqLengthsQueryOptional"] = np.cumsum(lq_full).astype(np.int32)
    else:
        args["query"], args["weights"] = q, w
        if lq is not None:
            args["actualSeqLengthsQueryOptional"] = np.array(lq, np.int32)
    if kv_layout == "TND":
        args["key"] = _packed(k, lk_full)
        args["actualSeqLengthsKeyOptional"] = np.cumsum(lk_full).astype(np.int32)
    elif kv_layout == "PA_BSND":
        args["key"], args["blockTableOptional"] = paged_blocks(rng, k, block)
        args["actualSeqLengthsKeyOptional"] = np.array(lk_full, np.int32)
    else:
        args["key"] = k
        if lk is not None:
            args["actualSeqLengthsKeyOptional"] = np.array(lk, np.int32)
    return args


def _li_samples(rng: np.random.Generator) -> Iterable[Sample]:
    f16, bf16, f32 = D.ACL_FLOAT16, D.ACL_BF16, D.ACL_FLOAT
    for dt in (f16, bf16):
        yield Sample(li_case(rng, dt, 2, 3, 9, 4, 1, 16, 4, mode=0, values=True), f"{dt.short} BSND dense, values")
        yield Sample(
            li_case(rng, dt, 1, 5, 7, 2, 1, 8, 8, w_dtype=f32), f"{dt.short} causal, float32 weights, k > keys"
        )
    yield Sample(
        li_case(rng, bf16, 2, 4, 10, 4, 2, 16, 3, lq=[4, 2], lk=[10, 3], values=True), "GQA 4/2, lengths, causal"
    )
    yield Sample(
        li_case(rng, f16, 2, 3, 6, 2, 1, 16, 5, q_layout="TND", kv_layout="TND", lq=[3, 1], lk=[6, 2], mode=0),
        "TND query and key",
    )
    yield Sample(
        li_case(rng, bf16, 2, 2, 40, 2, 1, 32, 16, kv_layout="PA_BSND", lk=[40, 17], block=16),
        "PA_BSND, paged cache, causal decode",
    )
    yield Sample(
        li_case(rng, bf16, 1, 3, 300, 2, 1, 8, 130, lk=[290], mode=0, values=True), "300 keys across sorter tiles"
    )
    yield Sample(li_case(rng, f16, 2, 4, 3, 2, 1, 8, 2, lq=[4, 0], mode=3), "causal with Lq > Lk, an empty batch")


def _li_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    bf16 = D.ACL_BF16
    base = li_case(rng, bf16, 2, 3, 6, 4, 1, 16, 4)
    yield ErrorSample({**base, "sparseCount": 2049}, INVALID, "sparseCount between 2048 and 3072")
    yield ErrorSample({**base, "sparseMode": 1}, INVALID, "sparseMode 1")
    yield ErrorSample({**base, "preTokens": 10}, INVALID, "preTokens other than the default")
    yield ErrorSample({**base, "layoutQueryOptional": "BNSD"}, INVALID, "unknown query layout")
    yield ErrorSample({**base, "weights": base["weights"][:, :2].copy()}, INVALID, "weights of the wrong shape")
    yield ErrorSample({**base, "key": base["key"].astype(np.float16)}, INVALID, "key dtype differs")
    yield ErrorSample({**base, "key": base["key"][..., :8].copy()}, INVALID, "key head dim differs")
    yield ErrorSample({**base, "actualSeqLengthsKeyOptional": np.array([7, 2], np.int32)}, INVALID, "Lk past S2")
    yield ErrorSample({**base, "actualSeqLengthsQueryOptional": np.array([1, 4], np.int32)}, INVALID, "Lq past S1")
    tnd = li_case(rng, bf16, 2, 3, 6, 2, 1, 8, 4, q_layout="TND", kv_layout="TND", lq=[2, 1], lk=[4, 2])
    yield ErrorSample({**tnd, "actualSeqLengthsKeyOptional": None}, NULLPTR, "TND key without lengths")
    yield ErrorSample(
        {**tnd, "actualSeqLengthsKeyOptional": np.array([4, 5], np.int32)}, INVALID, "TND key lengths not ending at T2"
    )
    paged = li_case(rng, bf16, 2, 2, 20, 2, 1, 8, 4, kv_layout="PA_BSND", lk=[20, 9], block=16)
    bad_table = paged["blockTableOptional"].copy()
    bad_table[1, 0] = 99
    yield ErrorSample({**paged, "blockTableOptional": bad_table}, INVALID, "block table entry past the pool")
    yield ErrorSample({**paged, "returnValues": True}, INVALID, "returnValues with PA_BSND")


# ----------------------------------------------------------------------------- SparseFlashAttention
def _sfa_infer(call: Call) -> Infos:
    dims = geometry(call, "actualSeqLengthsQuery", "actualSeqLengthsKv", "blockTable")
    q_layout, kv_layout = call.plan["q_layout"], call.plan["kv_layout"]
    q, k, v = (tensor_arg(call, n) for n in ("query", "key", "value"))
    if tuple(v.shape) != tuple(k.shape) or v.dtype != k.dtype:
        raise invalid(f"value {list(v.shape)} {v.dtype.short} must match key {list(k.shape)} {k.dtype.short}")
    if call.args["attentionMode"] != 2:
        raise invalid(f"attentionMode={call.args['attentionMode']} is not supported; only 2 (MLA absorb)")
    block = call.args["sparseBlockSize"]
    if not 1 <= block <= MAX_SPARSE_BLOCK:
        raise invalid(f"sparseBlockSize={block} is outside [1, {MAX_SPARSE_BLOCK}]")
    qr, kr = call.args.get("queryRope"), call.args.get("keyRope")
    if (qr is None) != (kr is None):
        raise invalid("queryRope and keyRope are given together or not at all")
    if qr is not None and kr is not None:
        if qr.dtype != q.dtype or kr.dtype != q.dtype:
            raise invalid("queryRope and keyRope must have the query's dtype")
        if tuple(qr.shape[:-1]) != tuple(q.shape[:-1]) or tuple(kr.shape[:-1]) != tuple(k.shape[:-1]):
            raise invalid(
                f"queryRope {list(qr.shape)} / keyRope {list(kr.shape)} must match query {list(q.shape)} / key "
                f"{list(k.shape)} except in the last dim"
            )
        if qr.shape[-1] != kr.shape[-1] or qr.shape[-1] == 0:
            raise invalid(f"queryRope's Dr ({qr.shape[-1]}) and keyRope's ({kr.shape[-1]}) must be equal and positive")
    idx = tensor_arg(call, "sparseIndices")
    lead = _head_shape(dims, q_layout, 0)[:-1]
    if tuple(idx.shape[:-1]) != lead or idx.shape[-1] == 0:
        raise invalid(
            f"sparseIndices has shape {list(idx.shape)}; expected [{', '.join(map(str, lead))}, sparse_size>0]"
        )
    infos: dict[str, Any] = {"attentionOutOut": same(q.shape, q.dtype), "softmaxMaxOut": None, "softmaxSumOut": None}
    if call.args["returnSoftmaxLse"]:
        if kv_layout == "PA_BSND":
            raise invalid("returnSoftmaxLse is not supported with layoutKv PA_BSND (CANN: training layouts only)")
        group = dims.n1 // dims.n2
        shape = (dims.b, dims.n2, dims.rows, group) if q_layout == "BSND" else (dims.n2, dims.rows, group)
        infos["softmaxMaxOut"] = infos["softmaxSumOut"] = same(shape, D.ACL_FLOAT)
        if call.args.get("attentionOutOut") is not None:
            for name in ("softmaxMaxOut", "softmaxSumOut"):
                if call.args.get(name) is None:
                    raise nullptr(f"returnSoftmaxLse is true but {name} is null")
    return infos


def sfa_case(
    rng: np.random.Generator,
    dt: D,
    b: int,
    s1: int,
    s2: int,
    n1: int,
    n2: int,
    d: int,
    dr: int,
    size: int,
    block: int,
    *,
    q_layout: str = "BSND",
    kv_layout: str = "BSND",
    lq: list[int] | None = None,
    lk: list[int] | None = None,
    page: int = 16,
    mode: int = 3,
    lse: bool = False,
    distinct_value: bool = False,
) -> dict[str, Any]:
    """One SparseFlashAttention call: random selections of visible blocks (valid first, then -1), laid out as asked."""
    lq_full = lq if lq is not None else [s1] * b
    lk_full = lk if lk is not None else [s2] * b
    q, qr = _bsnd(rng, dt, (b, s1, n1, d)), _bsnd(rng, dt, (b, s1, n1, dr))
    k, kr = _bsnd(rng, dt, (b, s2, n2, d)), _bsnd(rng, dt, (b, s2, n2, dr))
    v = _bsnd(rng, dt, (b, s2, n2, d)) if distinct_value else k
    indices = np.full((b, s1, n2, size), -1, np.int32)
    for i in range(b):
        for s in range(lq_full[i]):
            limit = lk_full[i] if mode == 0 else lk_full[i] - lq_full[i] + s + 1
            blocks = -(-max(limit, 0) // block)
            for n in range(n2):
                chosen = rng.permutation(blocks)[: min(blocks, size)]
                indices[i, s, n, : chosen.size] = chosen
    args: dict[str, Any] = {
        "scaleValue": 1.0 / np.sqrt(d + dr),
        "sparseBlockSize": block,
        "layoutQuery": q_layout,
        "layoutKv": kv_layout,
        "sparseMode": mode,
        "attentionMode": 2,
        "returnSoftmaxLse": lse,
    }
    if dr:
        args["queryRope"] = qr
    if q_layout == "TND":
        args["query"], args["sparseIndices"] = _packed(q, lq_full), _packed(indices, lq_full)
        if dr:
            args["queryRope"] = _packed(qr, lq_full)
        args["actualSeqLengthsQuery"] = np.cumsum(lq_full).astype(np.int32)
    else:
        args["query"], args["sparseIndices"] = q, indices
        if lq is not None:
            args["actualSeqLengthsQuery"] = np.array(lq, np.int32)
    if kv_layout == "TND":
        args["key"], args["value"] = _packed(k, lk_full), _packed(v, lk_full)
        if dr:
            args["keyRope"] = _packed(kr, lk_full)
        args["actualSeqLengthsKv"] = np.cumsum(lk_full).astype(np.int32)
    elif kv_layout == "PA_BSND":
        args["key"], args["blockTable"] = paged_blocks(rng, k, page)
        args["value"] = paged_like(args["blockTable"], v, page, args["key"]) if distinct_value else args["key"]
        if dr:
            empty = np.zeros((*args["key"].shape[:-1], dr), kr.dtype)
            args["keyRope"] = paged_like(args["blockTable"], kr, page, empty)
        args["actualSeqLengthsKv"] = np.array(lk_full, np.int32)
    else:
        args["key"], args["value"] = k, v
        if dr:
            args["keyRope"] = kr
        if lk is not None:
            args["actualSeqLengthsKv"] = np.array(lk, np.int32)
    return args


def _sfa_samples(rng: np.random.Generator) -> Iterable[Sample]:
    f16, bf16 = D.ACL_FLOAT16, D.ACL_BF16
    for dt in (f16, bf16):
        yield Sample(sfa_case(rng, dt, 2, 3, 12, 4, 1, 16, 8, 3, 2, mode=0, lse=True), f"{dt.short} BSND, blocks of 2")
        yield Sample(
            sfa_case(rng, dt, 1, 4, 9, 2, 1, 32, 0, 16, 1, lse=True), f"{dt.short} causal, token-wise, no rope"
        )
    yield Sample(
        sfa_case(rng, bf16, 2, 3, 20, 4, 2, 16, 8, 4, 3, lq=[3, 1], lk=[20, 5], distinct_value=True, lse=True),
        "GQA 4/2, lengths, value apart from key",
    )
    yield Sample(
        sfa_case(
            rng, f16, 2, 3, 10, 2, 1, 16, 4, 4, 2, q_layout="TND", kv_layout="TND", lq=[3, 2], lk=[10, 4], lse=True
        ),
        "TND query and key",
    )
    yield Sample(
        sfa_case(rng, bf16, 2, 1, 40, 4, 1, 32, 8, 8, 4, kv_layout="PA_BSND", lk=[40, 13], page=16),
        "PA_BSND decode",
    )
    yield Sample(
        sfa_case(rng, bf16, 1, 2, 300, 2, 1, 16, 4, 200, 1, mode=0, lse=True), "200 selected tokens, several tiles"
    )
    yield Sample(sfa_case(rng, f16, 1, 4, 2, 2, 1, 8, 4, 2, 1, mode=3), "causal with Lq > Lk: empty rows")


def _sfa_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    bf16 = D.ACL_BF16
    base = sfa_case(rng, bf16, 2, 2, 8, 2, 1, 16, 4, 2, 2)
    yield ErrorSample({**base, "attentionMode": 1}, INVALID, "attentionMode 1")
    yield ErrorSample({**base, "sparseMode": 2}, INVALID, "sparseMode 2")
    yield ErrorSample({**base, "sparseBlockSize": 129}, INVALID, "sparseBlockSize above 128")
    yield ErrorSample({**base, "nextTokens": 0}, INVALID, "nextTokens other than the default")
    yield ErrorSample({**base, "keyRope": None}, INVALID, "queryRope without keyRope")
    yield ErrorSample({**base, "value": base["value"][..., :8].copy()}, INVALID, "value shape differs")
    yield ErrorSample({**base, "sparseIndices": base["sparseIndices"][:, :1].copy()}, INVALID, "indices shape")
    yield ErrorSample({**base, "actualSeqLengthsKv": np.array([9, 1], np.int32)}, INVALID, "Lkv past S2")
    paged = sfa_case(rng, bf16, 1, 1, 20, 2, 1, 8, 0, 2, 4, kv_layout="PA_BSND", lk=[20])
    yield ErrorSample({**paged, "returnSoftmaxLse": True}, INVALID, "returnSoftmaxLse with PA_BSND")
    yield ErrorSample({**paged, "actualSeqLengthsKv": None}, NULLPTR, "PA_BSND without key lengths")


SPECS: list[OpSpec] = with_accuracy(
    [
        OpSpec(
            "LightningIndexer",
            FAMILY,
            (
                tensor("query", HALF, min_rank=3, max_rank=4),
                tensor("key", HALF, min_rank=3, max_rank=4),
                tensor("weights", {D.ACL_FLOAT16, D.ACL_BF16, D.ACL_FLOAT}, min_rank=2, max_rank=3),
                tensor("actualSeqLengthsQueryOptional", I32, optional=True, max_rank=1),
                tensor("actualSeqLengthsKeyOptional", I32, optional=True, max_rank=1),
                tensor("blockTableOptional", I32, optional=True, max_rank=2),
                string_attr("layoutQueryOptional", optional=True, default="BSND"),
                string_attr("layoutKeyOptional", optional=True, default="BSND"),
                int_attr("sparseCount", default=2048),
                int_attr("sparseMode", default=3, choices=(0, 3)),
                int_attr("preTokens", default=INT64_MAX),
                int_attr("nextTokens", default=INT64_MAX),
                bool_attr("returnValues", default=False),
                out("sparseIndicesOut", I32, max_rank=4),
                out("sparseValuesOut", HALF, optional=True, max_rank=4),
            ),
            _li_infer,
            samples=_li_samples,
            error_samples=_li_errors,
            summary="per query row, the top-k keys by Σ_h w_h·ReLU(q_h·k) (float32 in a fixed order: exact ranking)",
        ),
        OpSpec(
            "SparseFlashAttention",
            FAMILY,
            (
                tensor("query", HALF, min_rank=3, max_rank=4),
                tensor("key", HALF, min_rank=3, max_rank=4),
                tensor("value", HALF, min_rank=3, max_rank=4),
                tensor("sparseIndices", I32, min_rank=3, max_rank=4),
                tensor("blockTable", I32, optional=True, max_rank=2),
                tensor("actualSeqLengthsQuery", I32, optional=True, max_rank=1),
                tensor("actualSeqLengthsKv", I32, optional=True, max_rank=1),
                tensor("queryRope", HALF, optional=True, min_rank=3, max_rank=4),
                tensor("keyRope", HALF, optional=True, min_rank=3, max_rank=4),
                float_attr("scaleValue"),
                int_attr("sparseBlockSize", default=1),
                string_attr("layoutQuery", optional=True, default="BSND"),
                string_attr("layoutKv", optional=True, default="BSND"),
                int_attr("sparseMode", default=3, choices=(0, 3)),
                int_attr("preTokens", default=INT64_MAX),
                int_attr("nextTokens", default=INT64_MAX),
                int_attr("attentionMode", default=2),
                bool_attr("returnSoftmaxLse", default=False),
                out("attentionOutOut", HALF, max_rank=4),
                out("softmaxMaxOut", {D.ACL_FLOAT}, optional=True, max_rank=4),
                out("softmaxSumOut", {D.ACL_FLOAT}, optional=True, max_rank=4),
            ),
            _sfa_infer,
            samples=_sfa_samples,
            error_samples=_sfa_errors,
            summary="MLA-absorb attention of each query row over the key blocks its sparseIndices name",
        ),
    ],
    {
        "LightningIndexer": exact("indices; values are float32 scores computed in a fixed order, rounded once"),
        "SparseFlashAttention": table(
            "softmax(QKᵀ)·V over gathered rows: the bound needs Σ_j p_j·|v_j| with p from the unchanged Q and K, and"
            " the magnitudes run takes every float input's absolute value (the attention family's reason)"
        ),
    },
)

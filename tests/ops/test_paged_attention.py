"""Paged KV (page attention) of IncreFlashAttentionV3/V4 and FusedInferAttentionScore(V2-V5) on the reference:
a pool built here token by token through a shuffled block table must give what the dense cache gives, and
torch's scaled_dot_product_attention over the dense rows; plus the CANN error codes of the paged rules."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from acl_core import eager
from acl_core.errors import AclnnError
from acl_core.spec.ops import all_specs

BF16 = ml_dtypes.bfloat16


def ref(op: str, **kwargs: Any) -> dict[str, Any]:
    return eager.run(op, "reference", op_args=kwargs)


def pool_of(rng: np.random.Generator, dense: np.ndarray, lengths: list[int], size: int, form: str):
    """(pool in ``form``, table): dense [B, Nkv, S, D] rows placed token by token in shuffled blocks."""
    b, n, _, d = dense.shape
    per = max(-(-max(lengths) // size), 1)
    blocks = b * per + 3
    order = rng.permutation(blocks)
    table = order[: b * per].reshape(b, per).astype(np.int32)
    pool = rng.uniform(-1, 1, size=(blocks, n, size, d)).astype(dense.dtype)  # noise where nothing is placed
    for i in range(b):
        for j in range(lengths[i]):
            pool[table[i, j // size], :, j % size] = dense[i, :, j]
    if form == "BnBsH":
        pool = np.ascontiguousarray(pool.transpose(0, 2, 1, 3).reshape(blocks, size, n * d))
    elif form == "NZ":
        pool = np.ascontiguousarray(pool.reshape(blocks, n, size, d // 16, 16).transpose(0, 1, 3, 2, 4))
    return pool, table


def to_layout(x: np.ndarray, layout: str) -> np.ndarray:
    b, n, s, d = x.shape
    if layout == "BNSD":
        return x
    bsnd = np.ascontiguousarray(x.transpose(0, 2, 1, 3))
    return bsnd if layout == "BSND" else bsnd.reshape(b, s, n * d)


def sdpa_decode(q: np.ndarray, k: np.ndarray, v: np.ndarray, lengths: list[int], scale: float) -> np.ndarray:
    """[B, Nq, 1, D] from torch over each batch's first lengths[b] keys (GQA by repeat_interleave); zeros where none."""
    out = np.zeros(q.shape)
    group = q.shape[1] // k.shape[1]
    for i, n in enumerate(lengths):
        if n == 0:
            continue
        kk = torch.from_numpy(k[i, :, :n].astype(np.float64)).repeat_interleave(group, 0)
        vv = torch.from_numpy(v[i, :, :n].astype(np.float64)).repeat_interleave(group, 0)
        qq = torch.from_numpy(q[i].astype(np.float64))
        out[i] = F.scaled_dot_product_attention(qq, kk, vv, scale=scale).numpy()
    return out


CASES = [  # (layout, form, nq, nkv, d, size, lengths)
    ("BSH", "BnBsH", 4, 2, 16, 16, [5, 33, 17]),
    ("BNSD", "BnNBsD", 2, 2, 16, 32, [40, 0, 64]),
    ("BSND", "BnBsH", 4, 1, 8, 16, [37, 16]),
]


@pytest.mark.parametrize("version", ["IncreFlashAttentionV3", "IncreFlashAttentionV4"])
@pytest.mark.parametrize(("layout", "form", "nq", "nkv", "d", "size", "lengths"), CASES)
@pytest.mark.parametrize("dtype", [np.float16, BF16])
def test_incre_paged_equals_sdpa_over_the_dense_rows(version, layout, form, nq, nkv, d, size, lengths, dtype, rng):
    b, s = len(lengths), max(lengths)
    q = rng.uniform(-1, 1, size=(b, nq, 1, d)).astype(dtype)
    k = rng.uniform(-1, 1, size=(b, nkv, s, d)).astype(dtype)
    v = rng.uniform(-1, 1, size=(b, nkv, s, d)).astype(dtype)
    pool_k, table = pool_of(rng, k, lengths, size, form)
    pool_v, _ = pool_of(np.random.default_rng(0), v, lengths, size, form)
    # the value pool must use the same table: rebuild it with the key's table
    pool_v = _place(pool_v, v, table, lengths, size, form)
    scale = 1.0 / np.sqrt(d)
    args = dict(numHeads=nq, scaleValue=scale, inputLayout=layout, numKeyValueHeads=nkv, actualSeqLengths=lengths)
    got = ref(
        version, query=to_layout(q, layout), key=[pool_k], value=[pool_v], blocktable=table, blockSize=size, **args
    )
    want = to_layout(sdpa_decode(q, k, v, lengths, scale), layout)
    dense = ref(version, query=to_layout(q, layout), key=[to_layout(k, layout)], value=[to_layout(v, layout)], **args)
    np.testing.assert_array_equal(np.asarray(got["attentionOut"]), np.asarray(dense["attentionOut"]))
    tol = 1e-2 if dtype is BF16 else 1e-3
    np.testing.assert_allclose(np.asarray(got["attentionOut"]).astype(np.float64), want, atol=tol, rtol=tol)


def _place(pool: np.ndarray, dense: np.ndarray, table: np.ndarray, lengths: list[int], size: int, form: str):
    """``pool`` (in ``form``) with dense [B, N, S, D]'s rows written where ``table`` says."""
    b, n, _, d = dense.shape
    if form == "BnBsH":
        work = pool.reshape(pool.shape[0], size, n, d).transpose(0, 2, 1, 3).copy()
    elif form == "NZ":
        work = pool.transpose(0, 1, 3, 2, 4).reshape(pool.shape[0], n, size, d).copy()
    else:
        work = pool.copy()
    for i in range(b):
        for j in range(lengths[i]):
            work[table[i, j // size], :, j % size] = dense[i, :, j]
    if form == "BnBsH":
        return np.ascontiguousarray(work.transpose(0, 2, 1, 3).reshape(pool.shape))
    if form == "NZ":
        return np.ascontiguousarray(work.reshape(pool.shape[0], n, size, d // 16, 16).transpose(0, 1, 3, 2, 4))
    return work


FIA_PLAIN: dict[str, Any] = {"sparseMode": 0, "innerPrecise": 0, "antiquantMode": 0}


@pytest.mark.parametrize("form", ["BnBsH", "BnNBsD", "NZ"])
@pytest.mark.parametrize("sq", [1, 3])
def test_fused_infer_paged_equals_its_dense_cache(form: str, sq: int, rng: np.random.Generator) -> None:
    b, nq, nkv, d, size, lengths = 2, 4, 2, 64, 16, [20, 37]
    s = max(lengths)
    q = rng.uniform(-1, 1, size=(b, nq, sq, d)).astype(np.float16)
    k = rng.uniform(-1, 1, size=(b, nkv, s, d)).astype(np.float16)
    v = rng.uniform(-1, 1, size=(b, nkv, s, d)).astype(np.float16)
    pool_k, table = pool_of(rng, k, lengths, size, form)
    pool_v = _place(pool_of(rng, v, lengths, size, form)[0], v, table, lengths, size, form)
    args = dict(numHeads=nq, scaleValue=0.125, inputLayout="BSH", numKeyValueHeads=nkv, softmaxLseFlag=True)
    extra: dict[str, Any] = {**FIA_PLAIN, "actualSeqLengthsKv": lengths}
    if sq > 1:
        extra.update(sparseMode=3, attenMask=np.triu(np.ones((2048, 2048), bool), k=1), actualSeqLengths=[3, 2])
    paged = ref(
        "FusedInferAttentionScore",
        query=to_layout(q, "BSH"),
        key=[pool_k],
        value=[pool_v],
        blockTable=table,
        blockSize=size,
        **args,
        **extra,
    )
    dense = ref(
        "FusedInferAttentionScore", query=to_layout(q, "BSH"), key=[to_layout(k, "BSH")], value=[to_layout(v, "BSH")],
        **args, **extra,
    )  # fmt: skip
    for name in ("attentionOut", "softmaxLse"):
        np.testing.assert_array_equal(np.asarray(paged[name]), np.asarray(dense[name]))


def code_of(op: str, **kwargs: Any) -> int:
    with pytest.raises(AclnnError) as info:
        ref(op, **kwargs)
    return int(info.value.code)


@pytest.mark.parametrize(
    "op", [n for n in all_specs() if n.startswith(("IncreFlashAttentionV3", "IncreFlashAttentionV4"))]
)
def test_paged_rules_give_cannss_codes(op: str, rng: np.random.Generator) -> None:
    b, nq, nkv, d, size, lengths = 2, 2, 2, 16, 16, [20, 9]
    k = rng.uniform(-1, 1, size=(b, nkv, 20, d)).astype(np.float16)
    pool, table = pool_of(rng, k, lengths, size, "BnNBsD")
    q = rng.uniform(-1, 1, size=(b, nq, 1, d)).astype(np.float16)
    args = dict(query=q, key=[pool], value=[pool], blocktable=table, blockSize=size, numHeads=nq,
                scaleValue=0.25, inputLayout="BNSD", numKeyValueHeads=nkv, actualSeqLengths=lengths)  # fmt: skip
    ref(op, **args)  # the valid call runs
    assert code_of(op, **{**args, "actualSeqLengths": None}) == 161001
    assert code_of(op, **{**args, "blockSize": 24}) == 161002
    assert code_of(op, **{**args, "blockSize": 0}) == 161002
    assert code_of(op, **{**args, "blocktable": table.astype(np.int64)}) == 161002
    assert code_of(op, **{**args, "inputLayout": "BSND", "query": q.transpose(0, 2, 1, 3).copy()}) == 161002
    bad = table.copy()
    bad[1, 0] = -1
    assert code_of(op, **{**args, "blocktable": bad}) == 161002  # at launch: the entry is read
    unused = table.copy()
    unused[1, 1] = 999  # batch 1 (9 keys) reads one block: a wild entry past that is not read
    np.testing.assert_array_equal(
        np.asarray(ref(op, **{**args, "blocktable": unused})["attentionOut"]),
        np.asarray(ref(op, **args)["attentionOut"]),
    )

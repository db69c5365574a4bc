"""LightningIndexer and SparseFlashAttention's references against independent formulations.

LightningIndexer: its scores against a scalar float32 loop in the documented order (bit for bit) and
against torch's float64 formula (values within float32 rounding, the selection equal to torch.topk
where the scores are well apart); ties, the causal limit, padding, and every layout giving the same
selection. SparseFlashAttention: against torch's scaled_dot_product_attention over the keys each row
selects (a boolean mask), and the index-reading rules CANN's golden fixes, by hand.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from acl_core import eager
from acl_core.dtypes import DataType as D
from acl_core.errors import AclnnError
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.sparse_attention import li_case, sfa_case
from acl_reference.kernels import all_kernels

all_kernels()
from acl_reference.kernels.sparse_attention import index_scores, selected_tokens  # noqa: E402

BF16 = D.ACL_BF16


def run(op: str, args: dict[str, Any]) -> dict[str, np.ndarray]:
    return eager.run(op, "reference", op_args=args)


# ----------------------------------------------------------------------------- LightningIndexer
def test_scores_follow_the_documented_float32_order_bit_for_bit() -> None:
    rng = np.random.default_rng(1)
    q = rng.uniform(-1, 1, (3, 4, 16)).astype(ml_dtypes.bfloat16).astype(np.float32)
    k = rng.uniform(-1, 1, (5, 16)).astype(ml_dtypes.bfloat16).astype(np.float32)
    w = rng.uniform(-1, 1, (3, 4)).astype(np.float32)
    got = index_scores(q, k, w)
    for r in range(3):
        for j in range(5):
            total = np.float32(0.0)
            for h in range(4):
                dot = np.float32(0.0)
                for d in range(16):
                    dot = np.float32(dot + np.float32(q[r, h, d] * k[j, d]))
                total = np.float32(total + np.float32(w[r, h] * max(dot, np.float32(0.0))))
            assert got[r, j].tobytes() == total.tobytes(), (r, j)


def _torch_scores(args: dict[str, Any]) -> np.ndarray:
    """[B, S1, N2, S2] float64 scores of a BSND / BSND call."""
    q, k, w = (torch.from_numpy(np.asarray(args[n]).astype(np.float64)) for n in ("query", "key", "weights"))
    g = q.shape[2] // k.shape[2]
    kk = k.repeat_interleave(g, dim=2)  # [B, S2, N1, D]
    relu = torch.einsum("bsnd,btnd->bsnt", q, kk).clamp_min(0)
    weighted = relu * w[..., None]
    return weighted.reshape(q.shape[0], q.shape[1], k.shape[2], g, -1).sum(dim=3).numpy()


@pytest.mark.parametrize("dtype", [D.ACL_FLOAT16, BF16])
def test_indexer_matches_torch_topk_where_scores_are_apart(dtype: D) -> None:
    rng = np.random.default_rng(2)
    args = li_case(rng, dtype, 2, 4, 24, 4, 2, 32, 6, mode=0, values=True)
    got = run("LightningIndexer", args)
    scores = _torch_scores(args)
    checked = 0
    for b in range(2):
        for s in range(4):
            for n in range(2):
                row = scores[b, s, n]
                top = torch.topk(torch.from_numpy(row), 7).values.numpy()
                if np.min(np.abs(np.diff(top))) < 1e-4 * max(1.0, np.abs(top).max()):
                    continue  # too close to call in float32: ordering is the documented float32 one
                want = torch.topk(torch.from_numpy(row), 6).indices.numpy()
                np.testing.assert_array_equal(got["sparseIndicesOut"][b, s, n], want)
                values = got["sparseValuesOut"][b, s, n].astype(np.float64)
                np.testing.assert_allclose(values, row[want], rtol=2**-7, atol=1e-3)
                checked += 1
    assert checked >= 10


def test_equal_scores_go_to_the_lower_key_and_padding_is_minus_one() -> None:
    rng = np.random.default_rng(3)
    args = li_case(rng, BF16, 1, 2, 6, 2, 1, 8, 8, mode=0, values=True)
    args["key"][0, 4] = args["key"][0, 1]  # keys 1 and 4 score the same for every query
    got = run("LightningIndexer", args)
    for s in range(2):
        order = list(got["sparseIndicesOut"][0, s, 0])
        assert order[6:] == [-1, -1] and sorted(order[:6]) == list(range(6))
        assert order.index(1) < order.index(4)
        assert np.all(np.isneginf(got["sparseValuesOut"][0, s, 0, 6:].astype(np.float32)))


def test_causal_limit_and_rows_past_the_query_length() -> None:
    rng = np.random.default_rng(4)
    args = li_case(rng, BF16, 2, 4, 5, 2, 1, 8, 5, lq=[3, 0], lk=[5, 2], mode=3)
    got = run("LightningIndexer", args)["sparseIndicesOut"]
    for s in range(3):  # batch 0: row s sees keys j < 5 - 3 + s + 1
        seen = 3 + s
        row = got[0, s, 0]
        assert sorted(row[:seen]) == list(range(seen)) and np.all(row[seen:] == -1)
    assert np.all(got[0, 3] == -1) and np.all(got[1] == -1)


def test_every_key_layout_selects_alike() -> None:
    def case(**layouts: Any) -> dict[str, Any]:
        return li_case(np.random.default_rng(5), BF16, 2, 3, 20, 2, 1, 16, 6, lq=[3, 2], lk=[20, 7], **layouts)

    dense = run("LightningIndexer", case())["sparseIndicesOut"]
    paged = run("LightningIndexer", case(kv_layout="PA_BSND", block=16))["sparseIndicesOut"]
    np.testing.assert_array_equal(paged, dense)
    packed = run("LightningIndexer", case(q_layout="TND", kv_layout="TND"))["sparseIndicesOut"]
    np.testing.assert_array_equal(packed, np.concatenate([dense[0, :3], dense[1, :2]]))


# ----------------------------------------------------------------------------- SparseFlashAttention
def test_selected_tokens_read_the_row_as_cannss_golden() -> None:
    row = np.array([3, 0, 9, 0, -1, 2], np.int64)
    # limit 8, blocks of 2: the first ceil(8/2)=4 entries are read; 9 starts past the limit; 0 twice
    assert selected_tokens(row, 8, 2) == [6, 7, 0, 1, 0, 1]
    assert selected_tokens(row, 7, 2) == [6, 0, 1, 0, 1]  # block 3 cut at the limit
    assert selected_tokens(np.array([1, -1, 0]), 10, 4) == [4, 5, 6, 7]  # -1 ends the row
    assert selected_tokens(np.array([0, 1]), 3, 4) == [0, 1, 2]  # only ceil(3/4)=1 entry is read


def _torch_sfa(args: dict[str, Any]) -> np.ndarray:
    """BSND/BSND call by SDPA over every key with a mask of the selected tokens (no repeats in these samples)."""
    t = {n: torch.from_numpy(np.asarray(args[n]).astype(np.float64)) for n in ("query", "key", "value")}
    q = torch.cat([t["query"], torch.from_numpy(np.asarray(args["queryRope"]).astype(np.float64))], -1)
    k = torch.cat([t["key"], torch.from_numpy(np.asarray(args["keyRope"]).astype(np.float64))], -1)
    b, s1, n1, _ = q.shape
    s2, n2 = k.shape[1], k.shape[2]
    g = n1 // n2
    lk = args.get("actualSeqLengthsKv", np.full(b, s2))
    keep = torch.zeros(b, n1, s1, s2, dtype=torch.bool)
    block, mode = args["sparseBlockSize"], args["sparseMode"]
    for i in range(b):
        for s in range(s1):
            limit = int(lk[i]) if mode == 0 else int(lk[i]) - s1 + s + 1
            for n in range(n2):
                for tok in selected_tokens(args["sparseIndices"][i, s, n].astype(np.int64), limit, block):
                    keep[i, n * g : (n + 1) * g, s, tok] = True
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2),
        k.transpose(1, 2).repeat_interleave(g, 1),
        t["value"].transpose(1, 2).repeat_interleave(g, 1),
        attn_mask=keep, scale=args["scaleValue"],
    )  # fmt: skip
    return out.nan_to_num(0.0).transpose(1, 2).numpy()


@pytest.mark.parametrize("mode", [0, 3])
def test_sparse_attention_matches_masked_sdpa(mode: int) -> None:
    rng = np.random.default_rng(6 + mode)
    args = sfa_case(rng, BF16, 2, 3, 16, 4, 2, 16, 8, 3, 2, mode=mode, lk=[16, 6], distinct_value=True, lse=True)
    got = run("SparseFlashAttention", args)
    want = _torch_sfa(args)
    np.testing.assert_allclose(got["attentionOutOut"].astype(np.float64), want, rtol=2**-7, atol=2e-3)


def test_sparse_attention_layouts_agree() -> None:
    def case(**layouts: Any) -> dict[str, Any]:
        return sfa_case(np.random.default_rng(8), BF16, 2, 2, 24, 2, 1, 16, 4, 4, 3, lq=[2, 1], lk=[24, 10], **layouts)

    dense = run("SparseFlashAttention", case())["attentionOutOut"]
    paged = run("SparseFlashAttention", case(kv_layout="PA_BSND", page=16))["attentionOutOut"]
    np.testing.assert_array_equal(paged, dense)
    packed = run("SparseFlashAttention", case(q_layout="TND", kv_layout="TND"))["attentionOutOut"]
    np.testing.assert_array_equal(packed, np.concatenate([dense[0, :2], dense[1, :1]]))


@pytest.mark.parametrize("op", ["LightningIndexer", "SparseFlashAttention"])
def test_samples_run_and_error_samples_fail_as_declared(op: str) -> None:
    spec = get_spec(op)
    assert spec.samples is not None and spec.error_samples is not None
    rng = np.random.default_rng(9)
    notes = [s.note for s in spec.samples(rng)]
    assert len(notes) == len(set(notes))
    for err in spec.error_samples(rng):
        with pytest.raises(AclnnError) as info:
            run(op, err.args)
        assert int(info.value.code) == err.code, err.note

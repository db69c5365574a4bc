"""The reference's attention family against PyTorch's scaled_dot_product_attention, float64 softmax
statistics computed here, hand-written rotary formulas, and torch's silu; plus the CANN error codes."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right, causal_upper_left

from acl_core import aclnn, eager
from acl_core.errors import AclnnError
from acl_core.spec.ops import all_specs
from acl_core.spec.ops.attention import UNBOUNDED, compressed_mask
from tests.conftest import assert_close

BF16 = ml_dtypes.bfloat16
FLOAT_DTYPES = [np.float32, np.float16, BF16]
HALF_DTYPES = [np.float16, BF16]
ATTENTION_SPECS = sorted((s for s in all_specs().values() if s.family == "attention"), key=lambda s: s.name)


def ref(op: str, **kwargs: Any) -> dict[str, Any]:
    """Run ``op`` on the reference (arguments by official name, even ``layout``)."""
    return eager.run(op, "reference", op_args=kwargs)


def code_of(op: str, **kwargs: Any) -> int:
    with pytest.raises(AclnnError) as info:
        ref(op, **kwargs)
    return int(info.value.code)


def f64(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.asarray(a).astype(np.float64))


def randn(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
    return rng.uniform(-2, 2, size=shape).astype(dtype)


# ----------------------------------------------------------------------------- layouts (written here, independently)
def to_layout(x: np.ndarray, layout: str) -> np.ndarray:
    """[B,N,S,D] -> layout."""
    b, n, s, d = x.shape
    if layout == "BNSD":
        return x
    if layout == "BSND":
        return np.ascontiguousarray(np.transpose(x, (0, 2, 1, 3)))
    if layout == "BSH":
        return np.ascontiguousarray(np.transpose(x, (0, 2, 1, 3)).reshape(b, s, n * d))
    assert layout == "SBH"
    return np.ascontiguousarray(np.transpose(x, (2, 0, 1, 3)).reshape(s, b, n * d))


def from_layout(x: np.ndarray, layout: str, n: int) -> np.ndarray:
    """layout -> [B,N,S,D]."""
    if layout == "BNSD":
        return x
    if layout == "BSND":
        return np.transpose(x, (0, 2, 1, 3))
    if layout == "BSH":
        b, s, h = x.shape
        return np.transpose(x.reshape(b, s, n, h // n), (0, 2, 1, 3))
    s, b, h = x.shape
    return np.transpose(x.reshape(s, b, n, h // n), (1, 2, 0, 3))


# ----------------------------------------------------------------------------- expectations
def sdpa(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, mask: Any = None) -> np.ndarray:
    """torch's attention in float64 on [B,N,S,D] inputs; ``mask`` True = attend (or an additive float bias)."""
    m = mask if mask is None or isinstance(mask, torch.Tensor) else torch.from_numpy(np.asarray(mask))
    out = F.scaled_dot_product_attention(f64(q), f64(k), f64(v), attn_mask=m, scale=scale, enable_gqa=True)
    return out.numpy()


def softmax_stats(q: np.ndarray, k: np.ndarray, keep: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Row max and sum of exp(score - max) over kept keys, head by head in float64 (-inf / 0 for empty rows)."""
    q, k = np.asarray(q, np.float64), np.asarray(k, np.float64)
    b, nq, sq, _ = q.shape
    group = nq // k.shape[1]
    keep = np.broadcast_to(keep, (b, nq, sq, k.shape[2]))
    row_max = np.full((b, nq, sq), -np.inf)
    row_sum = np.zeros((b, nq, sq))
    for i in range(b):
        for h in range(nq):
            scores = scale * q[i, h] @ k[i, h // group].T
            for r in range(sq):
                kept = scores[r][keep[i, h, r]]
                if kept.size:
                    row_max[i, h, r] = kept.max()
                    row_sum[i, h, r] = np.exp(kept - kept.max()).sum()
    return row_max, row_sum


def band(sq: int, skv: int, pre: int, nxt: int, shift: int) -> np.ndarray:
    """True where query i may see key j: i + shift - pre <= j <= i + shift + nxt (loops, on purpose)."""
    keep = np.zeros((sq, skv), dtype=bool)
    for i in range(sq):
        for j in range(skv):
            keep[i, j] = i + shift - pre <= j <= i + shift + nxt
    return keep


def fa_call(q, k, v, layout: str, **extra: Any) -> dict[str, Any]:
    """FlashAttentionScore arguments for [B,N,S,D] inputs laid out as ``layout``."""
    args = {
        "query": to_layout(q, layout),
        "key": to_layout(k, layout),
        "value": to_layout(v, layout),
        "scaleValue": 1.0 / np.sqrt(q.shape[-1]),
        "keepProb": 1.0,
        "preTokens": UNBOUNDED,
        "nextTokens": UNBOUNDED,
        "headNum": q.shape[1],
        "inputLayout": layout,
        "innerPrecise": 0,
        "sparseMode": 0,
    }
    args.update(extra)
    return args


# ----------------------------------------------------------------------------- FlashAttentionScore
@pytest.mark.parametrize("layout", ["BSH", "SBH", "BSND", "BNSD"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: np.dtype(d).name)
def test_flash_attention_matches_sdpa_in_every_layout(layout: str, dtype: Any, rng: np.random.Generator) -> None:
    q, k, v = randn(rng, (2, 2, 5, 8), dtype), randn(rng, (2, 2, 7, 8), dtype), randn(rng, (2, 2, 7, 8), dtype)
    got = ref("FlashAttentionScore", **fa_call(q, k, v, layout))
    out = got["attentionOutOut"]
    assert out.dtype == np.dtype(dtype) and out.shape == to_layout(q, layout).shape
    assert_close(from_layout(out, layout, 2), sdpa(q, k, v, 1 / np.sqrt(8)).astype(dtype))


@pytest.mark.parametrize(("nq", "nkv", "layout"), [(4, 2, "BSND"), (4, 1, "BSH"), (6, 3, "SBH")])
def test_gqa_and_mqa_share_kv_heads_like_torch(nq: int, nkv: int, layout: str, rng: np.random.Generator) -> None:
    q, k, v = randn(rng, (2, nq, 4, 8)), randn(rng, (2, nkv, 6, 8)), randn(rng, (2, nkv, 6, 8))
    out = ref("FlashAttentionScore", **fa_call(q, k, v, layout))["attentionOutOut"]
    want = sdpa(q, k, v, 1 / np.sqrt(8))
    assert_close(from_layout(out, layout, nq), want)
    # the same answer with the kv heads repeated by hand (repeat_interleave: head h reads kv head h // group)
    g = nq // nkv
    assert_close(want, sdpa(q, np.repeat(k, g, axis=1), np.repeat(v, g, axis=1), 1 / np.sqrt(8)), atol=1e-12, rtol=0)


@pytest.mark.filterwarnings("ignore:Lower right causal bias")  # we materialise it; empty rows are checked below
@pytest.mark.parametrize(("sq", "skv"), [(5, 8), (8, 5), (6, 6)])
def test_sparse_modes_2_and_3_are_torchs_causal_variants(sq: int, skv: int, rng: np.random.Generator) -> None:
    q, k, v = randn(rng, (1, 2, sq, 8)), randn(rng, (1, 2, skv, 8)), randn(rng, (1, 2, skv, 8))
    scale = 1 / np.sqrt(8)
    for mode, bias in ((2, causal_upper_left(sq, skv)), (3, causal_lower_right(sq, skv))):
        args = fa_call(q, k, v, "BNSD", attenMaskOptional=compressed_mask(), sparseMode=mode, innerPrecise=2)
        out = ref("FlashAttentionScore", **args)["attentionOutOut"]
        keep = bias._materialize(torch.device("cpu"))
        assert_close(out, sdpa(q, k, v, scale, keep))
        if mode == 3 and sq > skv:  # the first sq - skv rows see no key at all
            assert np.all(out[:, :, : sq - skv] == 0)


@pytest.mark.parametrize(("pre", "nxt"), [(2, 1), (0, 3), (4, -2), (-1, 2)])
def test_sparse_mode_4_is_a_band_around_the_lower_right_diagonal(pre: int, nxt: int, rng: np.random.Generator) -> None:
    sq, skv = 6, 9
    q, k, v = randn(rng, (2, 2, sq, 8)), randn(rng, (2, 2, skv, 8)), randn(rng, (2, 2, skv, 8))
    args = fa_call(q, k, v, "BSND", attenMaskOptional=compressed_mask(), sparseMode=4, preTokens=pre, nextTokens=nxt)
    got = ref("FlashAttentionScore", **args)
    keep = band(sq, skv, pre, nxt, skv - sq)
    assert_close(from_layout(got["attentionOutOut"], "BSND", 2), sdpa(q, k, v, 1 / np.sqrt(8), keep))
    row_max, _ = softmax_stats(q, k, keep, 1 / np.sqrt(8))
    assert_close(got["softmaxMaxOut"][..., 0], row_max)


def test_sparse_mode_0_applies_the_mask_and_the_window_from_the_upper_left(rng: np.random.Generator) -> None:
    sq, skv, pre, nxt = 7, 7, 3, 1
    q, k, v = randn(rng, (2, 2, sq, 8)), randn(rng, (2, 1, skv, 8)), randn(rng, (2, 1, skv, 8))
    mask = rng.random((2, 1, sq, skv)) < 0.3
    args = fa_call(q, k, v, "BSND", attenMaskOptional=mask.astype(np.uint8), preTokens=pre, nextTokens=nxt)
    out = ref("FlashAttentionScore", **args)["attentionOutOut"]
    keep = ~mask & band(sq, skv, pre, nxt, 0)
    assert_close(from_layout(out, "BSND", 2), sdpa(q, k, v, 1 / np.sqrt(8), keep))


def test_sparse_mode_1_takes_the_full_mask_and_ignores_the_window(rng: np.random.Generator) -> None:
    q, k, v = randn(rng, (1, 2, 5, 8)), randn(rng, (1, 2, 8, 8)), randn(rng, (1, 2, 8, 8))
    mask = rng.random((1, 2, 5, 8)) < 0.4
    mask[..., 0] = False  # no empty row
    args = fa_call(q, k, v, "BNSD", attenMaskOptional=mask, sparseMode=1, preTokens=0, nextTokens=0)
    assert_close(ref("FlashAttentionScore", **args)["attentionOutOut"], sdpa(q, k, v, 1 / np.sqrt(8), ~mask))


def test_without_a_mask_sparse_mode_and_window_have_no_effect(rng: np.random.Generator) -> None:
    q, k, v = randn(rng, (1, 2, 6, 8)), randn(rng, (1, 2, 4, 8)), randn(rng, (1, 2, 4, 8))
    plain = ref("FlashAttentionScore", **fa_call(q, k, v, "BNSD"))["attentionOutOut"]
    for mode in (0, 2, 3, 4):
        args = fa_call(q, k, v, "BNSD", sparseMode=mode, preTokens=0, nextTokens=0)
        assert_close(ref("FlashAttentionScore", **args)["attentionOutOut"], plain, atol=0, rtol=0)


def test_softmax_statistics_match_a_float64_softmax(rng: np.random.Generator) -> None:
    q, k, v = randn(rng, (2, 4, 5, 8)), randn(rng, (2, 2, 6, 8)), randn(rng, (2, 2, 6, 8))
    mask = rng.random((5, 6)) < 0.3
    mask[3] = True  # a fully masked row
    scale = 0.3
    got = ref("FlashAttentionScore", **fa_call(q, k, v, "BNSD", attenMaskOptional=mask, scaleValue=scale))
    for name in ("softmaxMaxOut", "softmaxSumOut"):
        assert got[name].dtype == np.float32 and got[name].shape == (2, 4, 5, 8)
        assert np.array_equal(got[name], np.repeat(got[name][..., :1], 8, axis=-1))  # 8 identical copies
    row_max, row_sum = softmax_stats(q, k, ~mask, scale)
    assert_close(got["softmaxMaxOut"][..., 0], row_max)
    assert_close(got["softmaxSumOut"][..., 0], row_sum)
    # rebuilding the output from the statistics gives the output (the backward pass relies on it)
    scores = scale * np.einsum("bnqd,bnkd->bnqk", q.astype(np.float64), np.repeat(k, 2, axis=1).astype(np.float64))
    probs = np.where(~mask, np.exp(scores - row_max[..., None]), 0.0) / np.where(row_sum > 0, row_sum, 1)[..., None]
    assert_close(got["attentionOutOut"], probs @ np.repeat(v, 2, axis=1).astype(np.float64))


def test_fully_masked_rows_give_zero_output_minus_inf_max_and_zero_sum(rng: np.random.Generator) -> None:
    q, k, v = randn(rng, (1, 2, 4, 8)), randn(rng, (1, 2, 5, 8)), randn(rng, (1, 2, 5, 8))
    mask = np.zeros((4, 5), bool)
    mask[1] = True
    for precise in (0, 2):
        got = ref("FlashAttentionScore", **fa_call(q, k, v, "BNSD", attenMaskOptional=mask, innerPrecise=precise))
        assert np.all(got["attentionOutOut"][:, :, 1] == 0)
        assert np.all(got["softmaxMaxOut"][:, :, 1] == -np.inf) and np.all(got["softmaxSumOut"][:, :, 1] == 0)
        keep_rows = [0, 2, 3]
        want = sdpa(q, k, v, 1 / np.sqrt(8), ~mask)
        assert_close(got["attentionOutOut"][:, :, keep_rows], want[:, :, keep_rows])


@pytest.mark.parametrize("pse_shape", [(2, 2, 4, 6), (1, 2, 1, 6), (2, 2, 1, 6)])
def test_real_shift_is_added_before_scaling(pse_shape: tuple[int, ...], rng: np.random.Generator) -> None:
    q, k, v = randn(rng, (2, 2, 4, 8)), randn(rng, (2, 1, 6, 8)), randn(rng, (2, 1, 6, 8))
    pse = randn(rng, pse_shape)
    scale = 0.5
    got = ref("FlashAttentionScore", **fa_call(q, k, v, "BNSD", realShiftOptional=pse, scaleValue=scale))
    # softmax(scale * (QK^T + pse)) = softmax(scale QK^T + scale pse): torch's additive float mask
    assert_close(got["attentionOutOut"], sdpa(q, k, v, scale, torch.from_numpy(scale * pse.astype(np.float64))))


def test_non_contiguous_inputs_give_identical_results(rng: np.random.Generator) -> None:
    q, k, v = randn(rng, (2, 2, 5, 8)), randn(rng, (2, 2, 6, 8)), randn(rng, (2, 2, 6, 8))
    args = fa_call(q, k, v, "BSND", attenMaskOptional=rng.random((5, 6)) < 0.2)
    want = ref("FlashAttentionScore", **args)
    for placement in ("padded", "transposed"):
        got = eager.run("FlashAttentionScore", "reference", layout=placement, op_args=args)
        for name, value in want.items():
            assert_close(got[name], value, atol=0, rtol=0)


# ----------------------------------------------------------------------------- FlashAttentionVarLenScore
def varlen_call(q_tnd, k_tnd, v_tnd, lq, lkv, **extra: Any) -> dict[str, Any]:
    args = {
        "query": q_tnd,
        "key": k_tnd,
        "value": v_tnd,
        "actualSeqQLenOptional": np.cumsum(lq).tolist(),
        "actualSeqKvLenOptional": np.cumsum(lkv).tolist(),
        "scaleValue": 1 / np.sqrt(q_tnd.shape[-1]),
        "keepProb": 1.0,
        "preTokens": UNBOUNDED,
        "nextTokens": UNBOUNDED,
        "headNum": q_tnd.shape[1],
        "inputLayout": "TND",
        "innerPrecise": 0,
        "sparseMode": 0,
    }
    args.update(extra)
    return args


@pytest.mark.parametrize("mode", [0, 2, 3, 4])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: np.dtype(d).name)
def test_varlen_attends_within_each_sequence(mode: int, dtype: Any, rng: np.random.Generator) -> None:
    lq, lkv, nq, nkv, d = [3, 0, 5], [4, 2, 7], 4, 2, 8
    q, k, v = randn(rng, (8, nq, d), dtype), randn(rng, (13, nkv, d), dtype), randn(rng, (13, nkv, d), dtype)
    extra = {} if mode == 0 else {"attenMaskOptional": compressed_mask(), "sparseMode": mode}
    if mode == 4:
        extra.update(preTokens=1, nextTokens=2)
    got = ref("FlashAttentionVarLenScore", **varlen_call(q, k, v, lq, lkv, **extra))
    assert got["softmaxMaxOut"].shape == (nq, 8, 8)
    q0 = kv0 = 0
    for sq, skv in zip(lq, lkv):
        qs = q[q0 : q0 + sq].transpose(1, 0, 2)[None]
        ks, vs = (t[kv0 : kv0 + skv].transpose(1, 0, 2)[None] for t in (k, v))
        keep = {
            0: np.ones((sq, skv), bool),
            2: band(sq, skv, sq + skv, 0, 0),
            3: band(sq, skv, sq + skv, 0, skv - sq),
            4: band(sq, skv, 1, 2, skv - sq),
        }[mode]
        if sq:
            out = got["attentionOutOut"][q0 : q0 + sq].transpose(1, 0, 2)[None]
            assert_close(out, sdpa(qs, ks, vs, 1 / np.sqrt(d), keep).astype(dtype))
            row_max, row_sum = softmax_stats(qs, ks, keep, 1 / np.sqrt(d))
            assert_close(got["softmaxMaxOut"][:, q0 : q0 + sq, 0], row_max[0])
            assert_close(got["softmaxSumOut"][:, q0 : q0 + sq, 0], row_sum[0])
        q0, kv0 = q0 + sq, kv0 + skv


def test_varlen_with_one_sequence_equals_flash_attention(rng: np.random.Generator) -> None:
    q, k, v = randn(rng, (1, 2, 5, 8)), randn(rng, (1, 2, 7, 8)), randn(rng, (1, 2, 7, 8))
    mask = {"attenMaskOptional": compressed_mask(), "sparseMode": 3}
    dense = ref("FlashAttentionScore", **fa_call(q, k, v, "BSND", **mask))
    packed = ref(
        "FlashAttentionVarLenScore",
        **varlen_call(q[0].transpose(1, 0, 2), k[0].transpose(1, 0, 2), v[0].transpose(1, 0, 2), [5], [7], **mask),
    )
    assert_close(packed["attentionOutOut"], dense["attentionOutOut"][0], atol=0, rtol=0)
    assert_close(packed["softmaxMaxOut"], dense["softmaxMaxOut"][0], atol=0, rtol=0)


# ----------------------------------------------------------------------------- PromptFlashAttention
def infer_inputs(rng: np.random.Generator, dtype: Any, b: int, nq: int, nkv: int, sq: int, skv: int, d: int):
    return randn(rng, (b, nq, sq, d), dtype), randn(rng, (b, nkv, skv, d), dtype), randn(rng, (b, nkv, skv, d), dtype)


@pytest.mark.parametrize("layout", ["BSH", "BSND", "BNSD", "BNSD_BSND"])
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=lambda d: np.dtype(d).name)
def test_prompt_flash_attention_matches_sdpa(layout: str, dtype: Any, rng: np.random.Generator) -> None:
    b, nq, nkv, sq, skv, d = 2, 4, 2, 6, 8, 8
    q, k, v = infer_inputs(rng, dtype, b, nq, nkv, sq, skv, d)
    mask = rng.random((b, 1, sq, skv)) < 0.25
    pre, nxt, lengths = 4, 2, [6, 3]
    in_layout = "BNSD" if layout == "BNSD_BSND" else layout
    got = ref(
        "PromptFlashAttention",
        query=to_layout(q, in_layout),
        key=to_layout(k, in_layout),
        value=to_layout(v, in_layout),
        attenMask=mask,
        actualSeqLengths=lengths,
        numHeads=nq,
        scaleValue=0.4,
        preTokens=pre,
        nextTokens=nxt,
        inputLayout=layout,
        numKeyValueHeads=nkv,
    )["attentionOut"]
    out = np.transpose(got, (0, 2, 1, 3)) if layout == "BNSD_BSND" else from_layout(got, layout, nq)
    want = sdpa(q, k, v, 0.4, ~mask & band(sq, skv, pre, nxt, 0))
    for i, rows in enumerate(lengths):
        want[i, :, rows:] = 0  # rows past actualSeqLengths are not computed
    assert_close(out, want.astype(dtype))


def test_prompt_flash_attention_padded_mask_and_no_mask(rng: np.random.Generator) -> None:
    q, k, v = infer_inputs(rng, np.float16, 1, 2, 2, 4, 5, 8)
    mask = np.ones((4, 32), bool)  # KV_S padded to 32 with ones, as CANN recommends
    mask[:, :5] = np.triu(np.ones((4, 5), bool), k=1)
    common = {"query": q, "key": k, "value": v, "numHeads": 2, "scaleValue": 0.3, "inputLayout": "BNSD"}
    got = ref("PromptFlashAttention", **common, attenMask=mask, preTokens=UNBOUNDED, nextTokens=0)["attentionOut"]
    assert_close(got, sdpa(q, k, v, 0.3, causal_upper_left(4, 5)._materialize(torch.device("cpu"))).astype(np.float16))
    plain = ref("PromptFlashAttention", **common, preTokens=0, nextTokens=0)["attentionOut"]  # no mask: no window
    assert_close(plain, sdpa(q, k, v, 0.3).astype(np.float16))


# ----------------------------------------------------------------------------- IncreFlashAttention
@pytest.mark.parametrize("layout", ["BSH", "BSND", "BNSD"])
def test_incre_flash_attention_decodes_against_the_cache(layout: str, rng: np.random.Generator) -> None:
    b, nq, nkv, skv, d = 2, 4, 2, 9, 8
    q, k, v = infer_inputs(rng, np.float16, b, nq, nkv, 1, skv, d)
    mask = rng.random((b, nq, 1, skv)) < 0.3
    lengths = [5, 9]
    got = ref(
        "IncreFlashAttention",
        query=to_layout(q, layout),
        key=[to_layout(k, layout)],
        value=[to_layout(v, layout)],
        attenMask=mask,
        actualSeqLengths=lengths,
        numHeads=nq,
        scaleValue=0.35,
        inputLayout=layout,
        numKeyValueHeads=nkv,
    )["attentionOut"]
    for i, n in enumerate(lengths):
        want = sdpa(q[i : i + 1], k[i : i + 1, :, :n], v[i : i + 1, :, :n], 0.35, ~mask[i : i + 1, :, :, :n])
        assert_close(from_layout(got, layout, nq)[i : i + 1], want.astype(np.float16))


def test_incre_flash_attention_with_one_cache_tensor_per_batch(rng: np.random.Generator) -> None:
    q = randn(rng, (2, 2, 1, 8), np.float16)
    caches = [(randn(rng, (1, 1, s, 8), np.float16), randn(rng, (1, 1, s, 8), np.float16)) for s in (3, 7)]
    args = {"query": q, "numHeads": 2, "scaleValue": 0.5, "inputLayout": "BNSD", "numKeyValueHeads": 1}
    got = ref("IncreFlashAttention", key=[c[0] for c in caches], value=[c[1] for c in caches], **args)["attentionOut"]
    for i, (k, v) in enumerate(caches):
        assert_close(got[i : i + 1], sdpa(q[i : i + 1], k, v, 0.5).astype(np.float16))
    empty = ref(
        "IncreFlashAttention", key=[c[0] for c in caches], value=[c[1] for c in caches], actualSeqLengths=[0, 7], **args
    )
    assert np.all(empty["attentionOut"][0] == 0)  # no valid key: zeros


# ----------------------------------------------------------------------------- FusedInferAttentionScore
FIA = {
    "preTokens": UNBOUNDED,
    "nextTokens": UNBOUNDED,
    "sparseMode": 0,
    "innerPrecise": 0,
    "blockSize": 0,
    "antiquantMode": 0,
}


def test_fused_infer_prefill_equals_prompt_attention_and_decode_equals_incre(rng: np.random.Generator) -> None:
    q, k, v = infer_inputs(rng, np.float16, 2, 4, 2, 5, 7, 8)
    mask = rng.random((2, 1, 5, 7)) < 0.3
    common = {"numHeads": 4, "scaleValue": 0.3, "inputLayout": "BSND", "numKeyValueHeads": 2, "attenMask": mask}
    lay = {n: to_layout(t, "BSND") for n, t in (("query", q), ("key", k), ("value", v))}
    pfa = ref("PromptFlashAttention", **lay, **common, preTokens=3, nextTokens=1, actualSeqLengths=[5, 2])
    fia = ref(
        "FusedInferAttentionScore",
        query=lay["query"],
        key=[lay["key"]],
        value=[lay["value"]],
        **common,
        **{**FIA, "preTokens": 3, "nextTokens": 1},
        actualSeqLengths=[5, 2],
        softmaxLseFlag=False,
    )
    assert_close(fia["attentionOut"], pfa["attentionOut"], atol=0, rtol=0)
    q1 = to_layout(q[:, :, :1], "BSND")
    dmask = rng.random((2, 7)) < 0.3
    decode = {"numHeads": 4, "scaleValue": 0.3, "inputLayout": "BSND", "numKeyValueHeads": 2, "attenMask": dmask}
    ifa = ref(
        "IncreFlashAttention", query=q1, key=[lay["key"]], value=[lay["value"]], **decode, actualSeqLengths=[4, 7]
    )
    fia = ref(
        "FusedInferAttentionScore",
        query=q1,
        key=[lay["key"]],
        value=[lay["value"]],
        **decode,
        **FIA,
        actualSeqLengthsKv=[4, 7],
        softmaxLseFlag=False,
    )
    assert_close(fia["attentionOut"], ifa["attentionOut"], atol=0, rtol=0)


@pytest.mark.parametrize(("mode", "sq", "skv"), [(2, 5, 8), (3, 7, 5), (4, 6, 6)])
def test_fused_infer_sparse_modes_and_softmax_lse(mode: int, sq: int, skv: int, rng: np.random.Generator) -> None:
    q, k, v = infer_inputs(rng, np.float16, 1, 2, 1, sq, skv, 8)
    pre, nxt = (1, 2) if mode == 4 else (UNBOUNDED, UNBOUNDED)
    got = ref(
        "FusedInferAttentionScore",
        query=q,
        key=[k],
        value=[v],
        attenMask=compressed_mask(),
        numHeads=2,
        scaleValue=0.5,
        inputLayout="BNSD",
        numKeyValueHeads=1,
        **{**FIA, "sparseMode": mode, "preTokens": pre, "nextTokens": nxt, "innerPrecise": 2},
        softmaxLseFlag=True,
    )
    keep = {
        2: band(sq, skv, sq + skv, 0, 0),
        3: band(sq, skv, sq + skv, 0, skv - sq),
        4: band(sq, skv, 1, 2, skv - sq),
    }[mode]
    assert_close(got["attentionOut"], sdpa(q, k, v, 0.5, keep).astype(np.float16))
    row_max, row_sum = softmax_stats(q, k, keep, 0.5)
    with np.errstate(divide="ignore"):
        lse = np.where(row_sum > 0, row_max + np.log(row_sum), np.inf)  # +inf marks rows with no valid key
    scores = 0.5 * torch.einsum("bnqd,bnkd->bnqk", f64(q), f64(np.repeat(k, 2, axis=1)))
    torch_lse = torch.logsumexp(scores.masked_fill(~torch.from_numpy(keep), -torch.inf), dim=-1).numpy()
    assert_close(lse[np.isfinite(lse)], torch_lse[np.isfinite(lse)])
    assert got["softmaxLse"].shape == (1, 2, sq, 1) and got["softmaxLse"].dtype == np.float32
    assert_close(got["softmaxLse"][..., 0], lse)


# ----------------------------------------------------------------------------- rotary embedding
def rope_formula(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mode: int) -> torch.Tensor:
    """CANN's documented formulas, in torch."""
    d = x.shape[-1]
    if mode == 0:
        rotated = torch.cat((-x[..., d // 2 :], x[..., : d // 2]), dim=-1)
        return x * cos + rotated * sin
    if mode == 1:
        pairs = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1)
        return x * cos + pairs.flatten(-2) * sin
    if mode == 2:
        x1, x2, x3, x4 = x.split(d // 4, dim=-1)
        return x * cos + torch.cat((-x2, x1, -x4, x3), dim=-1) * sin
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.cat((x1, x2), dim=-1) * cos + torch.cat((-x2, x1), dim=-1) * sin


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: np.dtype(d).name)
def test_rotary_position_embedding_follows_cannss_formulas(mode: int, dtype: Any, rng: np.random.Generator) -> None:
    x = randn(rng, (2, 5, 3, 8), dtype)  # BSND with 1S1D cos/sin
    angles = rng.uniform(0, 2 * np.pi, (1, 5, 1, 8))
    cos, sin = np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)
    got = ref("RotaryPositionEmbedding", x=x, cos=cos, sin=sin, mode=mode)["out"]
    assert got.dtype == np.dtype(dtype)
    assert_close(got, rope_formula(f64(x), f64(cos), f64(sin), mode).numpy().astype(dtype))


def test_rotary_modes_are_complex_rotations(rng: np.random.Generator) -> None:
    x = randn(rng, (1, 2, 6, 8))  # BNSD, 11SD cos/sin
    theta = rng.uniform(0, 2 * np.pi, (1, 1, 6, 4)).astype(np.float32)
    turn = np.exp(1j * theta)
    # interleave (GPT-J): pairs (x0, x1), (x2, x3)... turned as complex numbers; cos/sin repeated pairwise
    cos, sin = np.repeat(np.cos(theta), 2, axis=-1), np.repeat(np.sin(theta), 2, axis=-1)
    got = ref("RotaryPositionEmbedding", x=x, cos=cos, sin=sin, mode=1)["out"]
    z = torch.view_as_complex(torch.from_numpy(x).reshape(1, 2, 6, 4, 2).contiguous()).numpy() * turn
    assert_close(got, np.stack((z.real, z.imag), axis=-1).reshape(x.shape))
    # half (NeoX): pairs (x_i, x_{i+D/2}); cos/sin tiled
    cos, sin = np.concatenate([np.cos(theta)] * 2, axis=-1), np.concatenate([np.sin(theta)] * 2, axis=-1)
    got = ref("RotaryPositionEmbedding", x=x, cos=cos, sin=sin, mode=0)["out"]
    z = (x[..., :4] + 1j * x[..., 4:]) * turn
    assert_close(got, np.concatenate([z.real, z.imag], axis=-1))
    assert_close(np.linalg.norm(got, axis=-1), np.linalg.norm(x, axis=-1))  # a rotation keeps the norm


@pytest.mark.parametrize(
    ("x_shape", "cs_shape"),
    [((2, 3, 5, 8), (1, 1, 5, 8)), ((2, 3, 5, 8), (2, 1, 5, 8)), ((5, 2, 3, 8), (5, 1, 1, 8)), ((6, 2, 8), (6, 1, 8))],
)
def test_rotary_position_embedding_broadcasts_cos_and_sin(x_shape, cs_shape, rng: np.random.Generator) -> None:
    x, cos, sin = randn(rng, x_shape), randn(rng, cs_shape), randn(rng, cs_shape)
    got = ref("RotaryPositionEmbedding", x=x, cos=cos, sin=sin, mode=0)["out"]
    assert_close(got, rope_formula(f64(x), f64(cos), f64(sin), 0).numpy())


@pytest.mark.parametrize(
    ("layout", "q_shape", "k_shape"), [(1, (2, 3, 4, 64), (2, 3, 2, 64)), (4, (5, 2, 128), (5, 1, 128))]
)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: np.dtype(d).name)
def test_apply_rotary_pos_emb_rotates_query_and_key_in_place(layout, q_shape, k_shape, dtype, rng) -> None:
    q, k = randn(rng, q_shape, dtype), randn(rng, k_shape, dtype)
    angles = rng.uniform(0, 2 * np.pi, (*q_shape[:-2], 1, q_shape[-1]))
    cos, sin = np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)
    got = ref("ApplyRotaryPosEmb", queryRef=q, keyRef=k, cos=cos, sin=sin, layout=layout)
    for name, x in (("queryRef", q), ("keyRef", k)):
        assert got[name].dtype == np.dtype(dtype)
        assert_close(got[name], rope_formula(f64(x), f64(cos), f64(sin), 0).numpy().astype(dtype))


def test_apply_rotary_pos_emb_through_the_c_front_end_writes_the_same_memory(rng: np.random.Generator) -> None:
    q, k = randn(rng, (1, 2, 2, 64)), randn(rng, (1, 2, 1, 64))
    angles = rng.uniform(0, 2 * np.pi, (1, 2, 1, 64))
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    arrays = [eager.to_device(a, "reference") for a in (q, k, cos, sin)]
    size, executor, ret = aclnn.aclnnApplyRotaryPosEmbGetWorkspaceSize(*(a.tensor() for a in arrays), 1)
    assert ret == 0 and size == 0
    assert aclnn.aclnnApplyRotaryPosEmb(0, 0, executor, None) == 0
    assert_close(arrays[0].numpy(), rope_formula(f64(q), f64(cos), f64(sin), 0).numpy())
    assert_close(arrays[1].numpy(), rope_formula(f64(k), f64(cos), f64(sin), 0).numpy())
    _, _, ret = aclnn.aclnnApplyRotaryPosEmbGetWorkspaceSize(*(a.tensor() for a in arrays), 3)
    assert ret == 161002


# ----------------------------------------------------------------------------- SwiGlu
@pytest.mark.parametrize(("shape", "dim"), [((6,), -1), ((3, 8), -1), ((4, 5), 0), ((2, 6, 3), 1), ((0, 4), -1)])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: np.dtype(d).name)
def test_swiglu_matches_torch(shape: tuple[int, ...], dim: int, dtype: Any, rng: np.random.Generator) -> None:
    x = rng.uniform(-8, 8, size=shape).astype(dtype)
    got = ref("SwiGlu", x=x, dim=dim)["out"]
    a, b = f64(x).chunk(2, dim=dim)
    assert got.dtype == np.dtype(dtype)
    assert_close(got, (F.silu(a) * b).numpy().astype(dtype))


def test_swiglu_extremes() -> None:
    x = np.array([-1000.0, 1000.0, 0.0, 2.0, 3.0, -4.0], np.float32)  # halves [-1000, 1000, 0] and [2, 3, -4]
    got = ref("SwiGlu", x=x, dim=0)["out"]
    assert_close(got, np.array([0.0, 3000.0, 0.0], np.float32))


# ----------------------------------------------------------------------------- error codes
def test_cann_error_codes_of_the_attention_rules(rng: np.random.Generator) -> None:
    q, k, v = randn(rng, (1, 2, 4, 8)), randn(rng, (1, 2, 6, 8)), randn(rng, (1, 2, 6, 8))
    with pytest.raises(AclnnError) as info:
        ref("FlashAttentionScore", **fa_call(q, k, v, "BNSD", keepProb=0.5))
    assert info.value.code == 161002 and "dropout is not supported" in info.value.message
    assert (
        code_of("FlashAttentionScore", **fa_call(q, k, v, "BNSD", realShiftOptional=randn(rng, (1, 2, 1024, 6))))
        == 161002
    )
    assert code_of("FlashAttentionScore", **fa_call(q, k, v, "BNSD", sparseMode=-1)) == 161002
    assert code_of("FlashAttentionScore", **fa_call(q, k, v, "BNSD", headNum=0)) == 161002
    assert code_of("FlashAttentionScore", **fa_call(q, k, v, "BNSD", innerPrecise=3)) == 161002
    args = fa_call(q, k, v, "BNSD", attenMaskOptional=compressed_mask(), sparseMode=4, preTokens=-3, nextTokens=1)
    assert code_of("FlashAttentionScore", **args) == 161002  # an empty band
    assert (
        code_of("FlashAttentionScore", **fa_call(q, k, v, "BNSD", attenMaskOptional=np.zeros((4, 6), np.float32)))
        == 161002
    )
    x, c = randn(rng, (1, 2, 4, 8)), randn(rng, (1, 1, 4, 8))
    assert code_of("RotaryPositionEmbedding", x=x, cos=c, sin=c, mode=7) == 561002
    assert code_of("RotaryPositionEmbedding", x=x, cos=c[..., :6].copy(), sin=c[..., :6].copy(), mode=0) == 561002
    assert code_of("SwiGlu", x=randn(rng, (3, 5)), dim=1) == 161002


def test_null_required_outputs_are_161001(rng: np.random.Generator) -> None:
    q, k, v = (eager.to_device(randn(rng, s), "reference") for s in ((1, 2, 4, 8), (1, 2, 6, 8), (1, 2, 6, 8)))
    out = eager.to_device(np.zeros((1, 2, 4, 8), np.float32), "reference")
    _, _, ret = aclnn.aclnnFlashAttentionScoreGetWorkspaceSize(
        q.tensor(), k.tensor(), v.tensor(), None, None, None, None, None,
        0.35, 1.0, UNBOUNDED, UNBOUNDED, 2, "BNSD", 0, 0, None, None, None, out.tensor(),
    )  # fmt: skip
    assert ret == 161001


@pytest.mark.parametrize("spec", ATTENTION_SPECS, ids=lambda s: s.name)
def test_conformance_samples_run_and_error_samples_fail_as_declared(spec) -> None:
    rng = np.random.default_rng(7)
    assert spec.samples is not None and spec.error_samples is not None
    notes = []
    for sample in spec.samples(rng):
        outputs = ref(spec.name, **sample.args)
        assert outputs, f"{spec.name} {sample.note}: no outputs"
        finite_inputs = all(
            np.isfinite(np.asarray(v, np.float64)).all() for v in sample.args.values() if isinstance(v, np.ndarray)
        )
        for name, value in outputs.items():
            if finite_inputs:
                assert not np.isnan(np.asarray(value, np.float64)).any(), f"{spec.name} {sample.note}: NaN in {name}"
        notes.append(sample.note)
    assert len(notes) == len(set(notes)), f"{spec.name}: duplicate sample notes"
    for err in spec.error_samples(rng):
        with pytest.raises(AclnnError) as info:
            ref(spec.name, **err.args)
        assert int(info.value.code) == err.code, f"{spec.name} {err.note}: {info.value}"

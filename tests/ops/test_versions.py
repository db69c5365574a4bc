"""Operator versions (acl_core/spec/ops/versions.py) against their base ops and independent oracles.

A version must give bit for bit its base's result on equivalent arguments, refuse what it adds beyond
the base's behaviour with 161002 naming the parameter, and its own semantics (where it has any beyond
the renaming) must match PyTorch.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
import torch

from acl_core import eager
from acl_core.errors import AclnnError
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.versions import SPECS
from acl_core.spec.opspec import Kind
from acl_core.spec.version import ADDED, PASSTHROUGH
from tests.ops.torch_ref import to_numpy, to_torch

VERSIONS = [s.name for s in SPECS]


def _base_call(op: str, args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    spec = get_spec(op)
    assert spec.base is not None and spec.base_args is not None
    mapped = spec.base_args(dict(args))
    base = get_spec(spec.base)
    outputs = {p.name for p in base.outputs}
    lists = {p.name for p in base.params if p.kind is Kind.TENSOR_LIST}
    mapped = {k: [v] if k in lists and isinstance(v, np.ndarray) else v for k, v in mapped.items()}
    through = set(PASSTHROUGH[op].values())
    return spec.base, {k: v for k, v in mapped.items() if not ((k in outputs or k in through) and v is None)}


def _beyond_base(op: str, args: dict[str, Any]) -> bool:
    """Whether a sample uses what the version implements beyond its base (a sink: checked against torch instead)."""
    return any(args.get(p) is not None and np.size(args[p]) for p in PASSTHROUGH[op])


def _as_base_lays_out(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """A version's output in its base's layout ([T,N,8] statistics of softmaxOutLayout 'same_as_input' as [N,T,8])."""
    if got.shape != want.shape and got.ndim == 3 and got.shape == (want.shape[1], want.shape[0], want.shape[2]):
        return np.ascontiguousarray(got.transpose(1, 0, 2))
    return got


@pytest.mark.parametrize("op", VERSIONS)
def test_version_equals_its_base(op: str) -> None:
    spec = get_spec(op)
    assert spec.samples is not None
    samples = list(spec.samples(np.random.default_rng(7)))
    assert samples, op
    for sample in samples:
        if _beyond_base(op, sample.args):
            continue
        got = eager.run(op, "reference", op_args=sample.args)
        base, args = _base_call(op, sample.args)
        want = eager.run(base, "reference", op_args=args)
        base_name = {v: k for k, v in spec.base_args({k: k for k in got}).items() if v in got}
        for name, value in got.items():
            expected = want[base_name[name]]
            pairs = zip(value, expected, strict=True) if isinstance(value, list) else [(value, expected)]
            for g, w in pairs:
                g = _as_base_lays_out(g, w)
                assert g.dtype == w.dtype and g.shape == w.shape, f"{op} [{sample.note}] {name}"
                np.testing.assert_array_equal(g, w, err_msg=f"{op} [{sample.note}] {name}")


@pytest.mark.parametrize("op", VERSIONS)
def test_added_parameters_are_refused_beyond_the_base(op: str) -> None:
    spec = get_spec(op)
    assert spec.samples is not None and spec.error_samples is not None
    sample = next(iter(spec.samples(np.random.default_rng(3))))
    refusals = {e.note.split(":")[0]: e for e in spec.error_samples(np.random.default_rng(3))}
    for name in (n for n, a in ADDED[op].items() if a.neutral is not None):
        case = refusals[name]
        with pytest.raises(AclnnError) as err:
            eager.run(op, "reference", op_args={**sample.args, name: case.args[name]})
        assert err.value.code == 161002 and name in str(err.value), (op, name)


def _sdpa(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """torch's attention on BNSD float32 copies (``mask``: True = attend)."""
    qt, kt, vt = (to_torch(x).float() for x in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(
        qt, kt, vt, attn_mask=None if mask is None else to_torch(mask)
    )
    return to_numpy(out)


def test_prompt_flash_attention_v3_causal_modes_match_torch() -> None:
    rng = np.random.default_rng(11)
    b, n, sq, skv, d = 2, 2, 5, 8, 16
    q, k, v = (rng.standard_normal((b, n, s, d)).astype(np.float16) for s in (sq, skv, skv))
    from acl_core.spec.ops.attention import compressed_mask

    i, j = np.arange(sq)[:, None], np.arange(skv)[None, :]
    for mode, keep in ((2, j <= i), (3, j <= i + skv - sq)):
        got = eager.run(
            "PromptFlashAttentionV3",
            "reference",
            query=q,
            key=k,
            value=v,
            attenMask=compressed_mask(),
            numHeads=n,
            scaleValue=1 / np.sqrt(d),
            preTokens=2147483647,
            nextTokens=2147483647,
            inputLayout="BNSD",
            sparseMode=mode,
            innerPrecise=0,
        )["attentionOut"]
        want = _sdpa(q, k, v, np.array(np.broadcast_to(keep, (sq, skv))))
        np.testing.assert_allclose(got.astype(np.float32), want, atol=2e-3, rtol=2e-3, err_msg=f"sparseMode {mode}")


def test_prompt_flash_attention_v3_key_lengths_match_torch() -> None:
    rng = np.random.default_rng(12)
    q, k, v = (rng.standard_normal((1, 2, s, 8)).astype(np.float16) for s in (3, 6, 6))
    got = eager.run(
        "PromptFlashAttentionV3",
        "reference",
        query=q,
        key=k,
        value=v,
        actualSeqLengthsKv=[4],
        numHeads=2,
        scaleValue=1 / np.sqrt(8),
        preTokens=2147483647,
        nextTokens=2147483647,
        inputLayout="BNSD",
    )["attentionOut"]
    want = _sdpa(q, k[:, :, :4], v[:, :, :4], None)
    np.testing.assert_allclose(got.astype(np.float32), want, atol=2e-3, rtol=2e-3)


def test_incre_flash_attention_v4_inner_precise_choices() -> None:
    rng = np.random.default_rng(13)
    q = rng.standard_normal((2, 2, 1, 8)).astype(np.float16)
    kv = [rng.standard_normal((2, 2, 5, 8)).astype(np.float16)]
    args = {"query": q, "key": kv, "value": kv, "numHeads": 2, "inputLayout": "BNSD", "scaleValue": 1 / np.sqrt(8)}
    results = [eager.run("IncreFlashAttentionV4", "reference", innerPrecise=p, **args)["attentionOut"] for p in (0, 1)]
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_array_equal(results[0], eager.run("IncreFlashAttention", "reference", **args)["attentionOut"])
    want = _sdpa(q, kv[0], kv[0], None)
    np.testing.assert_allclose(results[0].astype(np.float32), want, atol=2e-3, rtol=2e-3)
    with pytest.raises(AclnnError) as err:
        eager.run("IncreFlashAttentionV4", "reference", innerPrecise=2, **args)
    assert err.value.code == 161002 and "innerPrecise" in str(err.value)


def test_dynamic_quant_v3_symmetry_must_agree_with_offset_out() -> None:
    x = np.random.default_rng(14).uniform(-3, 3, (4, 16)).astype(np.float16)
    offset = np.zeros(4, np.float32)
    with pytest.raises(AclnnError) as err:
        eager.run("DynamicQuantV3", "reference", x=x, dstType=2, isSymmetrical=True, offsetOut=offset)
    assert err.value.code == 161002 and "isSymmetrical" in str(err.value)
    with pytest.raises(AclnnError) as err:
        eager.run("DynamicQuantV3", "reference", x=x, dstType=2, isSymmetrical=False)
    assert err.value.code == 161001 and "offsetOut" in str(err.value)
    asym = eager.run("DynamicQuantV4", "reference", x=x, dstType=2, isSymmetrical=False, offsetOut=offset)
    base = eager.run("DynamicQuantV2", "reference", x=x, dstType=2, offsetOut=offset)
    for name in ("yOut", "scaleOut", "offsetOut"):
        np.testing.assert_array_equal(asym[name], base[name])
    # asymmetric int8 spans [-128, 127]: y * scale + offset gives x back within half a step
    recon = (asym["yOut"].astype(np.float32) - asym["offsetOut"][:, None]) * asym["scaleOut"][:, None]
    assert np.all(np.abs(recon - x.astype(np.float32)) <= asym["scaleOut"][:, None] * 0.51 + 1e-3)


def test_grouped_matmul_v4_refuses_the_mx_mode_v5_added() -> None:
    v5 = get_spec("GroupedMatmulV5")
    assert v5.samples is not None
    mx = [s for s in v5.samples(np.random.default_rng(5)) if s.args["x"][0].dtype.itemsize == 1]
    assert mx
    args = {k: v for k, v in mx[0].args.items() if k != "tuningConfigOptional"}
    eager.run("GroupedMatmulV5", "reference", op_args=mx[0].args)  # V5 takes it
    with pytest.raises(AclnnError) as err:
        eager.run("GroupedMatmulV4", "reference", op_args=args)
    assert err.value.code == 161002 and "MX" in str(err.value)


def test_flash_attention_score_v2_pse_types() -> None:
    spec = get_spec("FlashAttentionScoreV2")
    assert spec.samples is not None
    samples = list(spec.samples(np.random.default_rng(9)))
    with_pse = next(s for s in samples if s.args.get("realShiftOptional") is not None)
    plain = next(s for s in samples if s.args.get("realShiftOptional") is None)
    # pseType 1 (the default) adds the pse before the scale, exactly as FlashAttentionScore
    v1 = eager.run("FlashAttentionScore", "reference", op_args=with_pse.args)
    v2 = eager.run("FlashAttentionScoreV2", "reference", op_args={**with_pse.args, "pseType": 1})
    np.testing.assert_array_equal(v2["attentionOutOut"], v1["attentionOutOut"])
    # without a pse, pseType 0 has nothing to add after the scale: the same result
    a = eager.run("FlashAttentionScoreV2", "reference", op_args={**plain.args, "pseType": 0})
    b = eager.run("FlashAttentionScoreV2", "reference", op_args={**plain.args, "pseType": 1})
    np.testing.assert_array_equal(a["attentionOutOut"], b["attentionOutOut"])
    for args in ({**with_pse.args, "pseType": 0}, {**plain.args, "pseType": 3}):
        with pytest.raises(AclnnError) as err:
            eager.run("FlashAttentionScoreV2", "reference", op_args=args)
        assert err.value.code == 161002 and "pseType" in str(err.value)


def _sink_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, sink: np.ndarray, keep: Any = None):
    """gpt-oss's sink attention in torch float64 on [B,N,S,D]: the sink is one more (value-less) logit per head.

    Returns (out, max, sum) with max and sum over the scaled kept scores and the sink.
    """
    qt, kt, vt = (to_torch(x).double() for x in (q, k, v))
    kt = kt.repeat_interleave(qt.shape[1] // kt.shape[1], dim=1)
    vt = vt.repeat_interleave(qt.shape[1] // vt.shape[1], dim=1)
    logits = scale * qt @ kt.transpose(-1, -2)
    if keep is not None:
        logits = logits.masked_fill(~torch.as_tensor(np.asarray(keep)), float("-inf"))
    sinks = torch.as_tensor(np.asarray(sink, np.float64)).view(1, -1, 1, 1).expand(*logits.shape[:-1], 1)
    full = torch.cat([logits, sinks], dim=-1)
    probs = torch.softmax(full, dim=-1)[..., :-1]
    top = full.amax(dim=-1)
    total = torch.exp(full - top[..., None]).sum(dim=-1)
    return (probs @ vt).numpy(), top.numpy(), total.numpy()


@pytest.mark.parametrize("layout", ["BNSD", "BSH"])
def test_flash_attention_score_v3_sink_is_a_value_less_logit_per_head(layout: str) -> None:
    rng = np.random.default_rng(21)
    b, n, nkv, sq, skv, d = 2, 4, 2, 5, 7, 8
    q, k, v = (rng.uniform(-2, 2, (b, h, s, d)).astype(np.float32) for h, s in ((n, sq), (nkv, skv), (nkv, skv)))
    sink = rng.uniform(-3, 3, n).astype(np.float32)
    mask = rng.random((sq, skv)) < 0.3
    mask[1] = True  # a fully masked row: only the sink is left, so the output row is zero
    scale = 1 / np.sqrt(d)

    def lay(x: np.ndarray) -> np.ndarray:
        if layout == "BNSD":
            return x
        return np.ascontiguousarray(x.transpose(0, 2, 1, 3).reshape(x.shape[0], x.shape[2], -1))

    got = eager.run(
        "FlashAttentionScoreV3",
        "reference",
        query=lay(q),
        key=lay(k),
        value=lay(v),
        attenMaskOptional=mask,
        sinkOptional=sink,
        scaleValue=scale,
        headNum=n,
        inputLayout=layout,
    )
    out, top, total = _sink_attention(q, k, v, scale, sink, ~mask)
    want_out = out if layout == "BNSD" else out.transpose(0, 2, 1, 3).reshape(b, sq, -1)
    np.testing.assert_allclose(got["attentionOutOut"], want_out, rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(got["softmaxMaxOut"], np.repeat(top[..., None], 8, -1), rtol=1e-6)
    np.testing.assert_allclose(got["softmaxSumOut"], np.repeat(total[..., None], 8, -1), rtol=1e-6)
    row = got["attentionOutOut"][:, :, 1] if layout == "BNSD" else got["attentionOutOut"][:, 1]
    assert np.all(row == 0)
    np.testing.assert_allclose(got["softmaxSumOut"][:, :, 1], 1.0)  # the sink alone: exp(sink - sink)
    # an empty sink is no sink (CANN treats a 0-element sink as null)
    plain = eager.run(
        "FlashAttentionScore", "reference", query=lay(q), key=lay(k), value=lay(v), attenMaskOptional=mask,
        scaleValue=scale, headNum=n, inputLayout=layout,
    )  # fmt: skip
    empty = eager.run(
        "FlashAttentionScoreV3", "reference", query=lay(q), key=lay(k), value=lay(v), attenMaskOptional=mask,
        sinkOptional=np.zeros(0, np.float32), scaleValue=scale, headNum=n, inputLayout=layout,
    )  # fmt: skip
    np.testing.assert_array_equal(empty["attentionOutOut"], plain["attentionOutOut"])


def test_varlen_v5_sink_and_tnd_statistics() -> None:
    rng = np.random.default_rng(22)
    lq, lkv, n, d = (3, 4), (5, 2), 2, 8
    q = rng.uniform(-2, 2, (sum(lq), n, d)).astype(np.float32)
    k, v = (rng.uniform(-2, 2, (sum(lkv), n, d)).astype(np.float32) for _ in range(2))
    sink = np.array([0.5, -1.0], np.float32)
    args = {
        "query": q, "key": k, "value": v, "actualSeqQLenOptional": list(np.cumsum(lq)),
        "actualSeqKvLenOptional": list(np.cumsum(lkv)), "scaleValue": 0.3, "headNum": n, "inputLayout": "TND",
        "sinkOptional": sink,
    }  # fmt: skip
    ntd = eager.run("FlashAttentionVarLenScoreV5", "reference", **args)
    tnd = eager.run("FlashAttentionVarLenScoreV5", "reference", **args, softmaxOutLayout="same_as_input")
    assert ntd["softmaxMaxOut"].shape == (n, sum(lq), 8) and tnd["softmaxMaxOut"].shape == (sum(lq), n, 8)
    np.testing.assert_array_equal(tnd["softmaxSumOut"], ntd["softmaxSumOut"].transpose(1, 0, 2))
    q0 = kv0 = 0
    for a, c in zip(lq, lkv):
        seq = lambda x, s0, m: x[s0 : s0 + m].transpose(1, 0, 2)[None]
        out, top, _ = _sink_attention(seq(q, q0, a), seq(k, kv0, c), seq(v, kv0, c), 0.3, sink)
        np.testing.assert_allclose(ntd["attentionOutOut"][q0 : q0 + a], out[0].transpose(1, 0, 2), rtol=2e-6, atol=2e-6)
        np.testing.assert_allclose(ntd["softmaxMaxOut"][:, q0 : q0 + a, 0], top[0], rtol=1e-6)
        q0, kv0 = q0 + a, kv0 + c


def test_fused_infer_v5_learnable_sink_decode_and_lse() -> None:
    rng = np.random.default_rng(23)
    b, n, nkv, skv, d = 2, 4, 2, 9, 16
    q = rng.uniform(-1, 1, (b, n, 1, d)).astype(ml_dtypes.bfloat16)
    k, v = (rng.uniform(-1, 1, (b, nkv, skv, d)).astype(ml_dtypes.bfloat16) for _ in range(2))
    sink = rng.uniform(-2, 2, n).astype(ml_dtypes.bfloat16)
    got = eager.run(
        "FusedInferAttentionScoreV5", "reference", query=q, key=[k], value=[v], numHeads=n, numKeyValueHeads=nkv,
        scaleValue=0.25, inputLayout="BNSD", learnableSinkOptional=sink, softmaxLseFlag=True,
        actualSeqLengthsKvOptional=[9, 0],
    )  # fmt: skip
    out, top, total = _sink_attention(q[:1], k[:1], v[:1], 0.25, sink)
    np.testing.assert_allclose(got["attentionOut"][:1].astype(np.float32), out, rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(got["softmaxLse"][:1, ..., 0], top + np.log(total), rtol=1e-6)
    # batch 1 has no keys: a zero row, and the sink alone gives lse = sink
    assert np.all(got["attentionOut"][1].astype(np.float32) == 0)
    np.testing.assert_allclose(got["softmaxLse"][1, :, 0, 0], sink.astype(np.float64), rtol=1e-6)

"""Operator versions (acl_core/spec/ops/versions.py) against their base ops and independent oracles.

A version must give bit for bit its base's result on equivalent arguments, refuse what it adds beyond
the base's behaviour with 161002 naming the parameter, and its own semantics (where it has any beyond
the renaming) must match PyTorch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from acl_core import eager
from acl_core.errors import AclnnError
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.versions import SPECS
from acl_core.spec.opspec import Kind
from acl_core.spec.version import ADDED
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
    return spec.base, {k: v for k, v in mapped.items() if not (k in outputs and v is None)}


@pytest.mark.parametrize("op", VERSIONS)
def test_version_equals_its_base(op: str) -> None:
    spec = get_spec(op)
    assert spec.samples is not None
    samples = list(spec.samples(np.random.default_rng(7)))
    assert samples, op
    for sample in samples:
        got = eager.run(op, "reference", op_args=sample.args)
        base, args = _base_call(op, sample.args)
        want = eager.run(base, "reference", op_args=args)
        base_name = {v: k for k, v in spec.base_args({k: k for k in got}).items() if v in got}
        for name, value in got.items():
            expected = want[base_name[name]]
            pairs = zip(value, expected, strict=True) if isinstance(value, list) else [(value, expected)]
            for g, w in pairs:
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

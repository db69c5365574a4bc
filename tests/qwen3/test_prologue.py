"""The decode prologue (ACL_QWEN3_PROLOGUE): split launches or one QkvRmsNormRopeCache, the same model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from acl_tools.qwen3 import hf
from acl_tools.qwen3.config import Qwen3Config, parse_dtype
from acl_tools.qwen3.model import PROLOGUE_ENV, Qwen3Runner, prologue_mode


@pytest.fixture(scope="module")
def d128_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny checkpoint with head dim 128, QkvRmsNormRopeCache's only one."""
    return hf.make_checkpoint(tmp_path_factory.mktemp("d128") / "m", preset="tiny", seed=1, overrides={"head_dim": 128})


def test_the_mode_comes_from_the_argument_or_the_environment(d128_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg, bf16 = Qwen3Config.from_dir(d128_dir), parse_dtype("bf16")
    monkeypatch.delenv(PROLOGUE_ENV, raising=False)
    assert prologue_mode(None, cfg, bf16) == "fused" and prologue_mode(" Split ", cfg, bf16) == "split"
    assert prologue_mode(None, cfg, parse_dtype("fp32")) == "split"  # auto: fused only where it runs
    monkeypatch.setenv(PROLOGUE_ENV, "split")
    assert prologue_mode(None, cfg, bf16) == "split" and prologue_mode("fused", cfg, bf16) == "fused"
    monkeypatch.setenv(PROLOGUE_ENV, "auto")
    assert prologue_mode(None, cfg, bf16) == "fused" and prologue_mode(None, cfg, parse_dtype("fp16")) == "fused"
    monkeypatch.setenv(PROLOGUE_ENV, "one")
    with pytest.raises(ValueError, match=PROLOGUE_ENV):
        prologue_mode(None, cfg, bf16)


@pytest.mark.parametrize("mode", ["fused", "nz"])
def test_fused_is_refused_where_the_operator_cannot_run(tiny_dir: Path, d128_dir: Path, mode: str) -> None:
    with pytest.raises(ValueError, match=f"{PROLOGUE_ENV}={mode} needs head dim 128"):
        prologue_mode(mode, Qwen3Config.from_dir(tiny_dir), parse_dtype("bf16"))  # head dim 16
    with pytest.raises(ValueError, match="float16/bf16"):
        prologue_mode(mode, Qwen3Config.from_dir(d128_dir), parse_dtype("fp32"))
    assert prologue_mode(" NZ ", Qwen3Config.from_dir(d128_dir), parse_dtype("fp16")) == "nz"
    assert prologue_mode("auto", Qwen3Config.from_dir(tiny_dir), parse_dtype("bf16")) == "split"


def _plan(r: Qwen3Runner) -> list[str]:
    (state,) = r._decode.values()
    assert state.plan is not None
    return [p.name for p in state.plan]


def test_fused_prologue_is_one_launch_a_layer_and_the_same_model(d128_dir: Path, reference_backend: str) -> None:
    prompts = [[3, 1, 4, 1, 5, 9], [2, 7, 1, 8, 2, 8]]
    with Qwen3Runner(d128_dir, backend=reference_backend, dtype="bf16", prologue="split") as r:
        want = r.generate(prompts, 6, replay=False, keep_logits=True)
        split = _plan(r)
    with Qwen3Runner(d128_dir, backend=reference_backend, dtype="bf16", prologue="fused") as r:
        eager = r.generate(prompts, 6, replay=False, keep_logits=True)
        replayed = r.generate(prompts, 6, replay=True, keep_logits=True)
        fused = _plan(r)
    layers = Qwen3Config.from_dir(d128_dir).num_hidden_layers
    assert fused.count("QkvRmsNormRopeCache") == layers
    for gone in ("ApplyRotaryPosEmb", "ScatterPaKvCache"):
        assert split.count(gone) == layers and gone not in fused
    assert split.count("RmsNorm") - fused.count("RmsNorm") == 2 * layers
    assert len(split) - len(fused) == 3 * layers
    assert replayed.replayed
    for got in (eager, replayed):
        assert got.tokens.tolist() == want.tokens.tolist()
        # q and k are rounded once (fused) instead of after the norm and again after rope (split)
        scale = float(np.abs(np.stack(want.logits)).max())
        np.testing.assert_allclose(np.stack(got.logits), np.stack(want.logits), atol=2e-2 * scale, rtol=0)


def _nd_rows(nz: np.ndarray, batch: int, nkv: int, d: int) -> np.ndarray:
    """A PA_NZ cache [B * P, Nkv * D / 16, bs, 16] (sequence b owning blocks b*P ..) as [B, P * bs, Nkv, D]."""
    blocks, _, bs, _ = nz.shape
    per = blocks // batch
    x = nz.reshape(batch, per, nkv, d // 16, bs, 16).transpose(0, 1, 4, 2, 3, 5)
    return x.reshape(batch, per * bs, nkv, d)


def test_nz_runner_is_cann_contract_and_the_same_model(d128_dir: Path, reference_backend: str) -> None:
    """ACL_QWEN3_PROLOGUE=nz: PA_NZ caches written by one QkvRmsNormRopeCache a layer (prefill and decode),
    decode attention by one FusedInferAttentionScore a layer over them; greedy tokens equal split's."""
    prompts = [[3, 1, 4, 1, 5, 9], [2, 7, 1, 8, 2, 8]]
    new = 6
    cfg = Qwen3Config.from_dir(d128_dir)
    layers, nkv, d = cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim
    with Qwen3Runner(d128_dir, backend=reference_backend, dtype="bf16", prologue="split") as r:
        want = r.generate(prompts, new, replay=False, keep_logits=True)
        want_logits = r.forward_logits(prompts)
        (state,) = r._decode.values()
        split_k = [r.session.download(k).reshape(k.shape) for k in state.kv.k]
        split_v = [r.session.download(v).reshape(v.shape) for v in state.kv.v]
    with Qwen3Runner(d128_dir, backend=reference_backend, dtype="bf16", prologue="nz") as r:
        eager = r.generate(prompts, new, replay=False, keep_logits=True)
        replayed = r.generate(prompts, new, replay=True, keep_logits=True)
        got_logits = r.forward_logits(prompts)
        (state,) = r._decode.values()
        decode = [p.name for p in state.plan or ()]
        prefill = [p.name for p in state.prefills[len(prompts[0])].plan or ()]
        assert r.attention_ops()["decode"].startswith("FusedInferAttentionScore")  # what reports name
        kv = state.kv
        assert kv.block == 128 and kv.capacity == 128  # 6 + 6 positions, rounded up to one block
        assert kv.k[0].shape == (2, nkv * d // 16, 128, 16)
        assert kv.table is not None and r.session.download(kv.table).ravel().tolist() == [0, 1]
        nz_k = [_nd_rows(r.session.download(k).reshape(k.shape), 2, nkv, d) for k in kv.k]
        nz_v = [_nd_rows(r.session.download(v).reshape(v.shape), 2, nkv, d) for v in kv.v]
    for plan in (decode, prefill):
        assert plan.count("QkvRmsNormRopeCache") == layers
        for gone in ("ScatterPaKvCache", "ApplyRotaryPosEmb", "RotaryPositionEmbedding", "InplaceCopy"):
            assert gone not in plan
    assert decode.count("FusedInferAttentionScore") == layers and "IncreFlashAttention" not in decode
    assert prefill.count("FlashAttentionScore") == layers  # fed kOutBeforeQuant / vOutBeforeQuant directly
    assert "RmsNorm" not in decode[decode.index("QkvRmsNormRopeCache") :]  # q/k norms are the operator's
    assert replayed.replayed and replayed.decode_captures == 1
    scale = float(np.abs(np.stack(want.logits)).max())
    for got in (eager, replayed):
        assert got.tokens.tolist() == want.tokens.tolist()
        # q and k rounded once (one operator) instead of after the norm and again after rope (split)
        np.testing.assert_allclose(np.stack(got.logits), np.stack(want.logits), atol=2e-2 * scale, rtol=0)
    np.testing.assert_allclose(got_logits, want_logits, atol=2e-2 * float(np.abs(want_logits).max()), rtol=0)
    written = len(prompts[0]) + new - 1  # the last token chosen is never fed back
    for i in range(layers):  # the same cache rows, in CANN's NZ layout; nothing past the written positions
        sk, sv = (x.astype(np.float32) for x in (split_k[i], split_v[i]))
        nk, nv = (x.astype(np.float32) for x in (nz_k[i], nz_v[i]))
        if i == 0:  # layer 0's v is the same GEMM row; later layers see attention rounded differently
            np.testing.assert_array_equal(nv[:, :written], sv[:, :written])
        np.testing.assert_allclose(nv[:, :written], sv[:, :written], atol=2e-2 * float(np.abs(sv).max()), rtol=0)
        np.testing.assert_allclose(nk[:, :written], sk[:, :written], atol=2e-2 * float(np.abs(sk).max()), rtol=0)
        assert not nk[:, written:].any() and not nv[:, written:].any()

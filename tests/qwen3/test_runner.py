"""The Qwen3 runner on the reference backend against transformers, and its KV cache against plain prefill."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from acl_tools.qwen3 import hf
from acl_tools.qwen3.model import Qwen3Runner
from acl_tools.qwen3.sampling import Sampling

TOKENS = 32


def test_fp32_prefill_logits_match_transformers(runner, hf_model, prompt):
    ours = runner("fp32").forward_logits([prompt])
    theirs = hf.prefill_logits(hf_model("fp32"), [prompt])
    assert ours.shape == theirs.shape == (1, len(prompt), 256)
    assert np.abs(ours - theirs).max() <= 1e-4
    assert np.abs(theirs).max() > 0.1  # the comparison is not between two near-zero arrays


def test_fp32_greedy_tokens_equal_transformers_generate(runner, hf_model, prompt):
    ours = runner("fp32").generate([prompt], TOKENS)
    theirs = hf.greedy_generate(hf_model("fp32"), [prompt], TOKENS)
    assert ours.tokens.shape == (1, TOKENS)
    assert ours.tokens.tolist() == theirs.tolist()
    assert len(set(theirs[0].tolist())) > 3  # the model does not merely repeat one token


def test_untied_lm_head_matches_transformers(tmp_path: Path, reference_backend, prompt):
    model_dir = hf.make_checkpoint(tmp_path / "untied", seed=3, tied=False)
    model = hf.load_model(model_dir, "fp32")
    with Qwen3Runner(model_dir, backend=reference_backend) as r:
        assert not r.config.tie_word_embeddings
        assert r.weights.lm_head.buffer is not r.weights.embed
        np.testing.assert_array_less(np.abs(r.forward_logits([prompt]) - hf.prefill_logits(model, [prompt])), 1e-4)
        assert r.generate([prompt], 16).tokens.tolist() == hf.greedy_generate(model, [prompt], 16).tolist()


def test_bf16_generation_completes_and_agrees_with_transformers_bf16(runner, hf_model, prompt):
    r = runner("bf16")
    assert r.weights.embed.dtype.short == "bf16"
    out = r.generate([prompt], TOKENS)
    assert out.tokens.shape == (1, TOKENS) and ((0 <= out.tokens) & (out.tokens < 256)).all()
    model = hf_model("bf16")
    theirs = hf.greedy_generate(model, [prompt], TOKENS)[0]
    # Each next-token choice along transformers' own continuation (teacher forcing): a random model has
    # near-ties that bf16 rounding flips, and free-running greedy decoding never re-joins after one flip.
    followed = [*prompt, *theirs.tolist()[:-1]]
    ours_next = r.forward_logits([followed])[0][len(prompt) - 1 :].argmax(-1)
    theirs_next = hf.prefill_logits(model, [followed])[0][len(prompt) - 1 :].argmax(-1)
    assert (ours_next == theirs_next).sum() >= 30
    assert out.tokens[0, :2].tolist() == theirs[:2].tolist()


@pytest.mark.parametrize(("prefill", "decode"), [("pfa", "ifa"), ("fa", "fa"), ("fia", "fia")])
def test_fp16_attention_operators(runner, hf_model, prompt, prefill, decode):
    r = runner("fp16", prefill_attention=prefill, decode_attention=decode)
    ours = r.forward_logits([prompt])
    theirs = hf.prefill_logits(hf_model("fp16"), [prompt])
    assert np.abs(ours - theirs).max() <= 2e-2
    baseline = runner("fp16").generate([prompt], 12).tokens
    assert r.generate([prompt], 12).tokens.tolist() == baseline.tolist()


def test_fp32_refuses_inference_attention_operators(tiny_dir, reference_backend):
    with pytest.raises(ValueError, match="float16/bf16 only"):
        Qwen3Runner(tiny_dir, backend=reference_backend, dtype="fp32", decode_attention="ifa")


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_kv_cache_decode_equals_prefill_of_the_longer_sequence(runner, dtype):
    r = runner(dtype)
    prompts = [[3, 14, 15, 92, 65, 35], [27, 18, 28, 18, 28, 45]]
    out = r.generate(prompts, 10, keep_logits=True)
    full = np.concatenate([np.array(prompts), out.tokens[:, :-1]], axis=1)
    again = r.forward_logits(full.tolist())[:, len(prompts[0]) - 1 :]
    stepped = np.stack(out.logits, axis=1)
    assert stepped.shape == again.shape == (2, 10, 256)
    tol = 1e-5 if dtype == "fp32" else 0.0  # bf16: both paths round the same float64 results once per op
    np.testing.assert_allclose(stepped, again, atol=tol, rtol=0)
    assert (stepped.argmax(-1) == out.tokens).all()


def test_batched_rows_equal_single_runs(runner):
    r = runner("fp32")
    prompts = [[5, 6, 7, 8, 9], [200, 1, 77, 3, 42]]
    both = r.generate(prompts, 8).tokens
    for i, p in enumerate(prompts):
        assert both[i].tolist() == r.generate([p], 8).tokens[0].tolist()


DECODE_LAYER_OPS = {
    "Mm": 4,  # the fused q/k/v projection, o, the fused gate-up projection, down
    "RmsNorm": 2,  # q_norm and k_norm over each head
    "RotaryPositionEmbedding": 2,  # rope of q, rope of k into a buffer
    "ScatterPaKvCache": 1,  # k and v put at the device-held position (batch 1: the position is the slot)
    "FlashAttentionScore": 1,  # fp32 decode attention over the whole cache under a mask
    "InplaceAddRmsNorm": 2,  # residual add + post_attention_layernorm; + the next layer's input norm (final norm)
    "SwiGlu": 1,  # on the gate-up output, split in halves
}
DECODE_STEP_OPS = {
    "Embedding": 3,  # the token ids, and the cos and sin rows gathered at the position
    "GtTensor": 1,  # the mask of the cache positions not yet written
    "RmsNorm": 1,  # layer 0's input norm (every later norm is fused into an InplaceAddRmsNorm)
    "Mm": 1,  # lm_head
    "ArgMax": 1,  # the greedy token, fed back on the device
    "InplaceAdds": 1,  # position += 1
}


def decode_program(layers: int) -> dict[str, int]:
    """The aclnn launches of one greedy fp32 decode step, per operator (see the tables above)."""
    ops = {op: n * layers for op, n in DECODE_LAYER_OPS.items()}
    for op, n in DECODE_STEP_OPS.items():
        ops[op] = ops.get(op, 0) + n
    return ops


def test_decode_launches_per_token_by_operator(runner, prompt):
    r = runner("fp32")
    layers = r.config.num_hidden_layers
    out = r.generate([prompt], 5, replay=False)
    per_step = {op: n // out.decode_steps for op, n in out.decode_ops.items()}
    assert all(n % out.decode_steps == 0 for n in out.decode_ops.values())
    assert per_step == decode_program(layers)
    # 13 per layer + 8: Qwen3-0.6B's 28 layers take 372 launches a token (16 per layer, 456, before the
    # residual adds were fused into InplaceAddRmsNorm with the norms that follow them; 14, 400, before k and v
    # went into the cache by one ScatterPaKvCache)
    assert sum(per_step.values()) == 13 * layers + 8


def test_head_dim_128_decode_rotates_q_and_k_in_one_launch(tmp_path: Path, reference_backend, prompt):
    # ApplyRotaryPosEmb takes head dims 64 and 128 only (the tiny preset's 16 keeps two RoPE launches)
    model_dir = hf.make_checkpoint(tmp_path / "d128", seed=4, overrides={"head_dim": 128})
    model = hf.load_model(model_dir, "fp32")
    with Qwen3Runner(model_dir, backend=reference_backend) as r:
        out = r.generate([prompt], 8, replay=False)
        assert out.tokens.tolist() == hf.greedy_generate(model, [prompt], 8).tolist()
        per_step = {op: n // out.decode_steps for op, n in out.decode_ops.items()}
        assert per_step["ApplyRotaryPosEmb"] == r.config.num_hidden_layers
        assert "RotaryPositionEmbedding" not in per_step
        assert sum(per_step.values()) == 12 * r.config.num_hidden_layers + 8  # one launch a layer fewer


def test_prefill_launches_by_operator(runner, prompt):
    r = runner("fp32")
    before = r.session.launched.copy()
    r.forward_logits([prompt])
    layers = r.config.num_hidden_layers
    # per layer 13: qkv, o, gate-up and down GEMMs; q/k norm; rope of q and of k (k's straight into the
    # cache view); v copied into the cache; attention; two InplaceAddRmsNorm; SwiGlu. Once: the embedding,
    # layer 0's input norm, lm_head
    per_layer = {"Mm": 4, "RmsNorm": 2, "RotaryPositionEmbedding": 2, "InplaceCopy": 1, "FlashAttentionScore": 1}
    per_layer |= {"InplaceAddRmsNorm": 2, "SwiGlu": 1}
    want = {op: n * layers for op, n in per_layer.items()}
    want["Embedding"], want["RmsNorm"], want["Mm"] = 1, want["RmsNorm"] + 1, want["Mm"] + 1
    assert dict(r.session.launched - before) == want
    assert sum(want.values()) == 13 * layers + 3


def test_decode_has_no_per_token_phase_one(runner, prompt):
    r = runner("fp32")
    out = r.generate([prompt], 9, replay=False)  # eager: every step launches the executors itself
    steps = out.decode_steps
    assert steps == 8
    program = sum(decode_program(r.config.num_hidden_layers).values())
    assert out.decode_validations == program  # every executor is made once, before the first step
    assert out.decode_launches == program * steps
    longer = r.generate([prompt], 17, replay=False)
    assert longer.decode_validations == program and longer.decode_launches == program * 16
    assert longer.tokens[0, :9].tolist() == out.tokens[0].tolist()


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_second_prefill_of_a_shape_launches_kept_executors(runner, prompt, dtype):
    """The prefill's executors are kept per (batch, capacity, prompt length): the next prefill of that shape
    validates nothing (no phase 1), and its tokens and logits equal the first's."""
    r = runner(dtype)
    r.clear_decode_cache()
    prompts = [prompt, prompt[::-1]]
    layers = r.config.num_hidden_layers
    program = 13 * layers + 3 + 1  # forward pass (test_prefill_launches_the_documented_program) and ArgMax
    first = r.generate(prompts, 6, keep_logits=True)
    cast = 1 if dtype == "bf16" else 0  # keep_logits casts the first token's bf16 logits to float32 (aclnnCast)
    assert first.prefill_builds == 1 and first.prefill_validations == program + cast  # validated once, in the prefill
    before = r.session.validations
    again = r.generate(prompts, 6, keep_logits=True)
    assert again.prefill_builds == 0 and again.prefill_validations == cast
    np.testing.assert_array_equal(again.tokens, first.tokens)
    np.testing.assert_array_equal(np.stack(again.logits), np.stack(first.logits))
    casts = 6 * cast  # one per token
    zeroing = 2 * layers  # the KV cache is zeroed before each generation
    assert r.session.validations - before == zeroing + casts  # nothing of the prefill or the decode step
    other = r.generate([p[:-1] for p in prompts], 7)  # same capacity, another prompt length: its own plan
    assert other.prefill_builds == 1
    assert len(r._decode[(2, len(prompt) + 6, r.dtype, True)].prefills) == 2
    fresh = r.generate([p[:-1] for p in prompts], 7)
    assert fresh.prefill_builds == 0 and fresh.tokens.tolist() == other.tokens.tolist()
    logits = r.forward_logits([p[:-1] for p in prompts])[:, -1]
    assert fresh.tokens[:, 0].tolist() == logits.argmax(-1).tolist()  # the kept plan computes the prefill


def test_a_kept_prefill_plan_follows_a_reallocated_mask(runner, prompt):
    """PromptFlashAttention reads a causal table the runner grows for longer prompts: a prefill plan made
    before the growth is validated again (not launched on the freed table) and computes the same tokens."""
    r = runner("bf16", prefill_attention="pfa")
    r.clear_decode_cache()
    r.generate([prompt], 100)  # cos/sin tables long enough for what follows: only the mask moves below
    first = r.generate([prompt], 4)
    side, tables = r.causal_side, (r.cos, r.sin)
    r.generate([[(5 * i) % 250 + 3 for i in range(side + 1)]], 2)  # a longer prompt: the table is reallocated
    assert r.causal_side > side and (r.cos, r.sin) == tables
    again = r.generate([prompt], 4)
    assert again.prefill_builds == 1 and again.tokens.tolist() == first.tokens.tolist()
    assert r.generate([prompt], 4).prefill_builds == 0


def test_sampling_is_reproducible_by_seed(runner, prompt):
    r = runner("fp32")
    params = Sampling(temperature=1.0, top_k=50, top_p=0.9, seed=7)
    first = r.generate([prompt], 16, params).tokens
    again = r.generate([prompt], 16, params).tokens
    other = r.generate([prompt], 16, Sampling(temperature=1.0, top_k=50, top_p=0.9, seed=8)).tokens
    assert first.tolist() == again.tolist()
    assert first.tolist() != other.tolist()
    greedy = r.generate([prompt], 16).tokens
    assert r.generate([prompt], 16, Sampling(top_k=1, seed=1)).tokens.tolist() == greedy.tolist()


def test_sampled_tokens_follow_the_filtered_distribution(runner, prompt):
    r = runner("fp32")
    out = r.generate([prompt] * 4, 6, Sampling(temperature=0.8, top_k=5, seed=3), keep_logits=True)
    for step, logits in enumerate(out.logits):
        top5 = np.argsort(-logits, axis=-1)[:, :5]
        for row in range(4):
            assert out.tokens[row, step] in top5[row]


def test_stop_on_eos(runner, prompt):
    r = runner("fp32")
    greedy = r.generate([prompt], 12).tokens[0].tolist()
    eos = greedy[5]
    out = r.generate([prompt], 12, stop_on_eos=True, eos_token_ids=[eos])
    assert out.tokens[0].tolist() == greedy[: greedy.index(eos) + 1]
    assert r.generate([prompt], 12, eos_token_ids=[eos]).tokens[0].tolist() == greedy  # off unless asked

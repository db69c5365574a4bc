"""The Qwen3 runner's bf16 decode step on rocm against the reference backend (GPU tier; the emulator too).

Head dim 64 takes the rocm kernels of a Qwen3 decode step: ApplyRotaryPosEmb on q and k in one launch,
ScatterPaKvCache writing k and v at the device-held position (batch 2: slots from an Add), and the split-KV
IncreFlashAttention kernel over the whole capacity under the mask of the unwritten positions.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

EMULATED = os.environ.get("ACL_ROCM_EMULATE") == "1"


def test_bf16_decode_step_matches_the_reference(rocm_under_test: str, tmp_path: Path) -> None:
    from acl_tools.qwen3 import hf
    from acl_tools.qwen3.model import Qwen3Runner

    model_dir = hf.make_checkpoint(tmp_path / "d64", preset="tiny", seed=0, overrides={"head_dim": 64})
    prompts = [[5, 6, 7, 8, 9, 10], [10, 9, 8, 7, 6, 5]]
    with Qwen3Runner(model_dir, backend="reference", dtype="bf16") as r:
        want = r.generate(prompts, 5, replay=False, keep_logits=True)
    with Qwen3Runner(model_dir, backend=rocm_under_test, dtype="bf16", decode_attention="ifa") as r:
        got = r.generate(prompts, 5, replay=False, keep_logits=True)
    layers = r.config.num_hidden_layers
    steps = got.decode_steps
    assert got.decode_ops["ScatterPaKvCache"] == layers * steps and got.decode_ops["Add"] == steps
    assert got.decode_ops["ApplyRotaryPosEmb"] == layers * steps
    assert got.decode_ops["IncreFlashAttention"] == layers * steps
    stepped, truth = np.stack(got.logits), np.stack(want.logits)  # [step, batch, vocab]; step 0 is the prefill's
    assert np.isfinite(stepped).all()
    if EMULATED:  # the emulator's GEMMs round as the reference's do: the same tokens throughout
        assert got.tokens.tolist() == want.tokens.tolist()
    # the steps whose inputs agree: up to the first token that differs (a GPU's GEMMs round differently, and a
    # near tie of random weights may then pick another token); at least the first decode step
    same = (got.tokens == want.tokens).all(axis=0)
    agree = int(same.argmin()) if not same.all() else len(same)
    assert agree >= 1, f"the prefill's tokens differ: {got.tokens[:, 0]} vs {want.tokens[:, 0]}"
    tol = 1e-2 if EMULATED else 0.1
    scale = float(np.abs(truth).max())
    np.testing.assert_allclose(stepped[: agree + 1], truth[: agree + 1], atol=tol * scale, rtol=0)


def test_replayed_greedy_decode_with_a_long_vocabulary(rocm_under_test: str, tmp_path: Path) -> None:
    """A 9,000-token vocabulary puts the decode step's ArgMax on the long-row path (its default, persist), first
    planned while the runner captures the step (persist once zeroed a plan-held scratch there: 107031). The
    replayed generation equals the eager one token for token, and the reference's on the emulator."""
    import acl_core
    from acl_rocm.ops import reduction as reduction_ops
    from acl_tools.qwen3 import hf
    from acl_tools.qwen3.model import Qwen3Runner

    vocab = 9000
    rocm = acl_core.get_backend(rocm_under_test)
    units = rocm.properties.compute_units  # type: ignore[attr-defined]
    assert reduction_ops.arg_slices(2, vocab, units) > 1, "the long-row arg path must run"
    model_dir = hf.make_checkpoint(tmp_path / "v9k", preset="tiny", seed=0, overrides={"vocab_size": vocab})
    prompts = [[5, 6, 7, 8, 9, 10], [10, 9, 8, 7, 6, 5]]
    with Qwen3Runner(model_dir, backend=rocm_under_test, dtype="bf16") as r:
        replayed = r.generate(prompts, 3, replay=True)
        again = r.generate(prompts, 3, replay=True)  # the same capture replayed again
        eager = r.generate(prompts, 3, replay=False)
    assert replayed.replayed and replayed.decode_captures == 1 and again.decode_captures == 0
    assert replayed.tokens.tolist() == eager.tokens.tolist() == again.tokens.tolist()
    if EMULATED:  # the emulator's GEMMs round as the reference's do
        with Qwen3Runner(model_dir, backend="reference", dtype="bf16") as r:
            want = r.generate(prompts, 3, replay=False)
        assert replayed.tokens.tolist() == want.tokens.tolist()


@pytest.mark.parametrize("mode", ["fused", "nz"])
def test_prologue_keeps_the_tokens(rocm_under_test: str, tmp_path: Path, mode: str) -> None:
    """ACL_QWEN3_PROLOGUE=fused / nz on rocm (nz: PA_NZ caches by QkvRmsNormRopeCache in prefill and decode,
    FusedInferAttentionScore page attention in decode), eager and captured: split's tokens, its logits
    within bf16 rounding (q and k are rounded once instead of twice)."""
    from acl_tools.qwen3 import hf
    from acl_tools.qwen3.model import Qwen3Runner

    model_dir = hf.make_checkpoint(tmp_path / "pro", preset="tiny", seed=1, overrides={"head_dim": 128})
    prompts = [[3, 1, 4, 1, 5, 9], [2, 7, 1, 8, 2, 8]]
    with Qwen3Runner(model_dir, backend=rocm_under_test, dtype="bf16", prologue="split") as r:
        want = r.generate(prompts, 4, replay=False, keep_logits=True)
    with Qwen3Runner(model_dir, backend=rocm_under_test, dtype="bf16", prologue=mode) as r:
        eager = r.generate(prompts, 4, replay=False, keep_logits=True)
        replayed = r.generate(prompts, 4, replay=True, keep_logits=True)
        (state,) = r._decode.values()
        names = [p.name for p in state.plan or ()]
    layers = r.config.num_hidden_layers
    assert names.count("QkvRmsNormRopeCache") == layers
    if mode == "nz":
        assert names.count("FusedInferAttentionScore") == layers
    assert replayed.replayed and replayed.decode_captures == 1
    scale = float(np.abs(np.stack(want.logits)).max())
    for got in (eager, replayed):
        assert got.tokens.tolist() == want.tokens.tolist()
        np.testing.assert_allclose(np.stack(got.logits), np.stack(want.logits), atol=2e-2 * scale, rtol=0)

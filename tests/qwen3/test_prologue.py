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
    assert prologue_mode(None, cfg, bf16) == "split" and prologue_mode(" Fused ", cfg, bf16) == "fused"
    monkeypatch.setenv(PROLOGUE_ENV, "fused")
    assert prologue_mode(None, cfg, bf16) == "fused" and prologue_mode("split", cfg, bf16) == "split"
    monkeypatch.setenv(PROLOGUE_ENV, "one")
    with pytest.raises(ValueError, match=PROLOGUE_ENV):
        prologue_mode(None, cfg, bf16)


def test_fused_is_refused_where_the_operator_cannot_run(tiny_dir: Path, d128_dir: Path) -> None:
    with pytest.raises(ValueError, match="head dim 128"):
        prologue_mode("fused", Qwen3Config.from_dir(tiny_dir), parse_dtype("bf16"))  # head dim 16
    with pytest.raises(ValueError, match="float16/bf16"):
        prologue_mode("fused", Qwen3Config.from_dir(d128_dir), parse_dtype("fp32"))


def _plan(r: Qwen3Runner) -> list[str]:
    (state,) = r._decode.values()
    assert state.plan is not None
    return [p.name for p in state.plan]


def test_fused_prologue_is_one_launch_a_layer_and_the_same_model(d128_dir: Path, reference_backend: str) -> None:
    prompts = [[3, 1, 4, 1, 5, 9], [2, 7, 1, 8, 2, 8]]
    with Qwen3Runner(d128_dir, backend=reference_backend, dtype="bf16") as r:
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

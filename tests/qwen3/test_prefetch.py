"""Weight prefetch in the decode step (ACL_QWEN3_PREFETCH): where the prefetches go, and tokens unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from acl_tools.qwen3.prefetch import ENV, prefetch_mode


def test_the_mode_comes_from_the_argument_or_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    assert prefetch_mode() == "off" and prefetch_mode(" Side ") == "side"
    monkeypatch.setenv(ENV, "ahead")
    assert prefetch_mode() == "ahead" and prefetch_mode("off") == "off"
    monkeypatch.setenv(ENV, "always")
    with pytest.raises(ValueError, match=ENV):
        prefetch_mode()


def _names(r) -> list[str]:
    (state,) = r._decode.values()
    assert state.plan is not None
    return [p.name for p in state.plan]


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("mode", ["ahead", "side", "mlp"])
def test_prefetch_keeps_the_greedy_tokens_replayed_and_eager(runner, prompt, dtype: str, mode: str) -> None:
    off, on = runner(dtype), runner(dtype, prefetch=mode)
    prompts = [prompt, prompt[::-1]]
    for replay in (True, False):
        off.clear_decode_cache()
        on.clear_decode_cache()
        want = off.generate(prompts, 8, replay=replay, keep_logits=True)
        got = on.generate(prompts, 8, replay=replay, keep_logits=True)
        assert got.replayed is replay and got.decode_steps == want.decode_steps == 7
        np.testing.assert_array_equal(got.tokens, want.tokens)
        for a, b in zip(got.logits, want.logits, strict=True):
            np.testing.assert_array_equal(a, b)
        layers = on.config.num_hidden_layers
        names = _names(on)
        per_layer = {"ahead": 2 * layers - 1, "side": 2 * layers - 1, "mlp": layers}[mode]
        assert names.count("CmoAsync") == per_layer
        assert names.count("PrefetchJoin") == (1 if mode == "side" else 0)
        assert [n for n in names if n not in ("CmoAsync", "PrefetchJoin")] == _names(off)
        # the first prefetch follows layer 0's qkv GEMV
        assert names[names.index("CmoAsync") - 1] == "Mm"


def test_the_prefetches_are_stream_tasks_in_the_captured_step(runner, prompt, monkeypatch) -> None:
    from acl_core import acl

    calls: list[tuple[int, int, int]] = []
    real = acl.rt.cmo_async

    def counting(src: int, size: int, kind: int, stream: int | None) -> int:
        calls.append((src, size, kind))
        return real(src, size, kind, stream)

    monkeypatch.setattr(acl.rt, "cmo_async", counting)
    r = runner("bf16", prefetch="side")
    r.clear_decode_cache()
    g = r.generate([prompt], 6)
    assert g.replayed and g.decode_captures == 1 and g.decode_replays == 5
    layers = r.weights.layers
    # captured once: 3 weights after each qkv GEMV, the next qkv after each down GEMV but the last
    assert len(calls) == 3 * len(layers) + len(layers) - 1
    assert calls[0] == (layers[0].o.buffer.ptr, layers[0].o.buffer.nbytes, 0)
    assert calls[3] == (layers[1].qkv.buffer.ptr, layers[1].qkv.buffer.nbytes, 0)
    r.clear_decode_cache()  # the side stream and its events are released with the plan

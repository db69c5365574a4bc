"""The captured decode step (issue 15 item 6): replayed tokens and logits equal eager's exactly."""

from __future__ import annotations

import json

import numpy as np
import pytest

import acl_core
from acl_tools.qwen3.cli import main
from acl_tools.qwen3.device import DeviceError
from acl_tools.qwen3.sampling import Sampling


@pytest.fixture(scope="module", autouse=True)
def _captures(reference_backend):
    # The reference records and replays streams; a tree where it cannot must fail here, not skip.
    assert acl_core.get_backend("reference").capabilities().stream_capture


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_replay_equals_eager_exactly(runner, prompt, dtype):
    r = runner(dtype)
    r.clear_decode_cache()
    prompts = [prompt, prompt[::-1]]
    eager = r.generate(prompts, 10, replay=False, keep_logits=True)
    replayed = r.generate(prompts, 10, keep_logits=True)  # the default where the backend captures
    assert eager.replayed is False and replayed.replayed is True
    np.testing.assert_array_equal(replayed.tokens, eager.tokens)
    for a, b in zip(replayed.logits, eager.logits, strict=True):
        np.testing.assert_array_equal(a, b)
    # tests/qwen3/test_runner.py decode_program says which; + 1: batch 2's cache slots (Add: i * C + pos)
    program = 13 * r.config.num_hidden_layers + 8 + 1
    casts = 0 if dtype == "fp32" else 9  # keep_logits: a one-shot Cast of the bf16 logits per step, outside the step
    # eager validated the step's executors once; the replayed generation of the same shape reuses them and
    # launches each once, into the capture, then replays it 9 times
    assert eager.decode_validations == program + casts and eager.decode_captures == 0
    assert replayed.decode_validations == casts and replayed.decode_launches == program + casts
    assert replayed.decode_captures == 1 and replayed.decode_replays == 9 and eager.decode_replays == 0


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_the_capture_is_kept_across_generations_of_one_shape(runner, prompt, dtype):
    r = runner(dtype)
    r.clear_decode_cache()
    first = r.generate([prompt], 8)
    assert first.decode_captures == 1 and first.decode_validations == 13 * r.config.num_hidden_layers + 8
    other = [7, 1, 200, 3, *prompt[4:]]  # another prompt of the same length: the same (batch, capacity)
    again = r.generate([other], 8)
    assert again.replayed and again.decode_captures == 0  # nothing validated, launched or captured anew
    assert again.decode_validations == 0 and again.decode_launches == 0 and again.decode_replays == 7
    assert again.tokens.tolist() == r.generate([other], 8, replay=False).tokens.tolist()
    assert r.generate([prompt], 8).tokens.tolist() == first.tokens.tolist()  # the KV cache was zeroed between
    longer = r.generate([prompt], 12)  # another capacity: a state of its own, the first one kept
    assert longer.decode_captures == 1 and longer.tokens[0, :8].tolist() == first.tokens[0].tolist()
    assert r.generate([prompt], 8).decode_captures == 0


def test_the_decode_cache_evicts_the_oldest_shape(tiny_dir, reference_backend, prompt):
    from acl_tools.qwen3.model import Qwen3Runner

    with Qwen3Runner(tiny_dir, backend=reference_backend, decode_cache_size=2) as r:
        base = r.generate([prompt], 4)
        assert r.generate([prompt], 5).decode_captures == 1  # two shapes: both kept
        assert r.generate([prompt], 4).decode_captures == 0
        assert r.generate([prompt], 6).decode_captures == 1  # a third evicts the least recently used (5)
        assert r.generate([prompt], 4).decode_captures == 0
        assert r.generate([prompt], 5).decode_captures == 1
        assert len(r._decode) == 2
        r.clear_decode_cache()
        assert not r._decode and r.generate([prompt], 4).tokens.tolist() == base.tokens.tolist()
        tables = r.cos
        assert r.generate([prompt], r.positions).decode_captures == 1  # a capacity past the cos/sin tables
        assert r.cos is not tables  # reallocated: the kept states read the old tables and are made afresh
        again = r.generate([prompt], 4)
        assert again.decode_captures == 1 and again.tokens.tolist() == base.tokens.tolist()


def test_replay_with_sampling_and_eos(runner, prompt):
    r = runner("fp32")
    sampling = Sampling(0.9, 20, 0.95, 3)
    eager = r.generate([prompt], 8, sampling, replay=False)
    assert r.generate([prompt], 8, sampling).tokens.tolist() == eager.tokens.tolist()
    stop = int(eager.tokens[0, 3])
    short = r.generate([prompt], 8, sampling, stop_on_eos=True, eos_token_ids=[stop])
    assert short.replayed and short.tokens[0, -1] == stop and short.tokens.shape[1] <= 4


def test_generate_and_bench_replay_by_default_and_eager_on_request(tiny_dir, prompt, tmp_path, capsys):
    ids = ",".join(map(str, prompt))
    base = ["generate", "--model", str(tiny_dir), "--backend", "reference", "--prompt-ids", ids, "--quiet"]
    base += ["--max-new-tokens", "6", "--ignore-eos"]
    assert main([*base, "--json", str(tmp_path / "r.json")]) == 0
    assert main([*base, "--eager", "--json", str(tmp_path / "e.json")]) == 0
    replayed, eager = (json.loads((tmp_path / f).read_text()) for f in ("r.json", "e.json"))
    assert replayed["decode_replayed"] is True and eager["decode_replayed"] is False
    assert replayed["tokens"] == eager["tokens"]
    out = capsys.readouterr().out
    assert "tok/s, replayed)" in out and "tok/s, eager)" in out
    bench = ["bench", "--model", str(tiny_dir), "--backend", "reference", "--batch", "1", "--prompt-len", "4"]
    bench += ["--new-tokens", "3", "--repeat", "1", "--prefill-len", "0", "--no-transformers", "--no-torch-graph"]
    for extra, want in (([], True), (["--eager"], False)):
        assert main([*bench, *extra, "--quiet", "--out", str(tmp_path / "b.json")]) == 0
        assert json.loads((tmp_path / "b.json").read_text())["acl_decode_replayed"] is want


def test_an_operator_the_backend_refuses_to_capture(runner, prompt, monkeypatch):
    r = runner("fp32")
    backend = r.session.backend
    caps = backend.capabilities()
    monkeypatch.setattr(backend, "capabilities", lambda: caps.model_copy(update={"capture_refused_ops": ("GtTensor",)}))
    default = r.generate([prompt], 4)
    assert default.replayed is False and default.decode_replays == 0  # the default decodes eagerly, and says so
    assert default.tokens.tolist() == r.generate([prompt], 4, replay=False).tokens.tolist()
    with pytest.raises(DeviceError, match="refuses to capture GtTensor"):
        r.generate([prompt], 4, replay=True)

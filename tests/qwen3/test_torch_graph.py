"""The PyTorch static-cache runner (the bench's fair competitor) computes what transformers computes."""

from __future__ import annotations

import numpy as np

from acl_tools.qwen3 import hf
from acl_tools.qwen3.torch_graph import TorchGraphRunner


def test_static_cache_greedy_tokens_equal_transformers(tiny_dir, hf_model, prompt):
    ours = TorchGraphRunner(tiny_dir, "fp32", "cpu")
    gen = ours.generate([prompt, prompt[::-1]], 12)
    theirs = hf.greedy_generate(hf_model("fp32"), [prompt, prompt[::-1]], 12)
    np.testing.assert_array_equal(gen.tokens, theirs)
    assert gen.graph is False and gen.prefill_seconds > 0 and gen.decode_seconds > 0  # no CUDA graph on the CPU


def test_a_second_generation_reuses_the_static_buffers(tiny_dir, prompt):
    ours = TorchGraphRunner(tiny_dir, "bf16", "cpu")
    first = ours.generate([prompt], 6).tokens
    assert list(ours.graphs) == [(1, len(prompt) + 6)]
    np.testing.assert_array_equal(ours.generate([prompt], 6).tokens, first)  # reproducible on reused buffers
    assert len(ours.graphs) == 1

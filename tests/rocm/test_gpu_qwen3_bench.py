"""The Qwen3 bench's GPU side (GPU tier): the PyTorch CUDA-graph competitor, and the kernel profile of acl-core."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from acl_core.backend import Backend

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cuda_tiny(rocm: Backend, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random checkpoint, where torch sees the same CUDA device as the rocm backend."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    if rocm.capabilities().platform.value == "cpu" or not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device here (the emulator or a CPU-only torch): nothing to profile")
    from acl_tools.qwen3 import hf

    return hf.make_checkpoint(tmp_path_factory.mktemp("qwen3") / "tiny", preset="tiny", seed=0)


def test_torch_graph_replay_equals_transformers_greedy(cuda_tiny: Path) -> None:
    from acl_tools.qwen3 import hf
    from acl_tools.qwen3.parity import default_prompt
    from acl_tools.qwen3.torch_graph import TorchGraphRunner

    prompts = [default_prompt(256), default_prompt(256, seed=1)]
    runner = TorchGraphRunner(cuda_tiny, "fp32", "cuda")
    gen = runner.generate(prompts, 16)
    assert gen.graph is True  # the decode steps were CUDA-graph replays
    theirs = hf.greedy_generate(hf.load_model(cuda_tiny, "fp32", "cuda"), prompts, 16)
    np.testing.assert_array_equal(gen.tokens, theirs)
    np.testing.assert_array_equal(runner.generate(prompts, 16).tokens, gen.tokens)  # the same graph replayed again


def test_profiler_sees_acl_cores_decode_kernels(cuda_tiny: Path) -> None:
    from acl_tools.qwen3.bench import decode_kernel_time
    from acl_tools.qwen3.model import Qwen3Runner
    from acl_tools.qwen3.parity import default_prompt

    with Qwen3Runner(cuda_tiny, backend="rocm", dtype="fp32") as runner:
        launches = runner.generate([default_prompt(256)], 9, replay=False)  # aclnn launches per eager step
        found = decode_kernel_time(runner, default_prompt(256), 9)
    assert found is not None and found["decode_steps"] == 8
    per_token_launches = launches.decode_launches / launches.decode_steps
    # every aclnn launch of the decode step runs at least one kernel on the device (copies aside)
    assert found["kernels_per_token"] >= 0.5 * per_token_launches, (found, per_token_launches)
    assert 0 < found["kernel_ms_per_token"] < 50
    # the union of activity never exceeds the kernels' summed time by more than copies could add
    assert 0 < found["busy_ms_per_token"] < 50


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_device_position_decode_equals_prefill_on_rocm(cuda_tiny: Path, dtype: str) -> None:
    """The decode step that reads its cache position on the device (scatter into the cache, masked attention
    over the whole capacity) computes what a prefill of the longer sequence computes, on the GPU too."""
    from acl_tools.qwen3.model import Qwen3Runner

    prompts = [[3, 14, 15, 92, 65, 35], [27, 18, 28, 18, 28, 45]]
    with Qwen3Runner(cuda_tiny, backend="rocm", dtype=dtype) as runner:
        out = runner.generate(prompts, 10, keep_logits=True)
        full = np.concatenate([np.array(prompts), out.tokens[:, :-1]], axis=1)
        again = runner.forward_logits(full.tolist())[:, len(prompts[0]) - 1 :]
    stepped = np.stack(out.logits, axis=1)
    assert np.isfinite(stepped).all()  # masked cache rows are zeroed, never NaN garbage
    tol = 1e-4 if dtype == "fp32" else 0.1  # different kernels (decode vs prefill attention) round differently
    np.testing.assert_allclose(stepped, again, atol=tol, rtol=0)
    casts = 0 if dtype == "fp32" else 9  # keep_logits casts each step's bf16 logits once, outside the step
    # no phase 1 per token: 13 launches a layer + 8, + 1 for batch 2's cache slots (Add: i * capacity + pos)
    assert out.decode_validations == 13 * runner.config.num_hidden_layers + 8 + 1 + casts

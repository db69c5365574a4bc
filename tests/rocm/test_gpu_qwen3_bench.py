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
        launches = runner.generate([default_prompt(256)], 9)
        found = decode_kernel_time(runner, default_prompt(256), 9)
    assert found is not None and found["decode_steps"] == 8
    per_token_launches = launches.decode_launches / launches.decode_steps
    # every aclnn launch of the decode step runs at least one kernel on the device (copies aside)
    assert found["kernels_per_token"] >= 0.5 * per_token_launches, (found, per_token_launches)
    assert 0 < found["kernel_ms_per_token"] < 50

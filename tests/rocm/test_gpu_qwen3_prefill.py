"""The Qwen3 runner's kept prefill executors on rocm (GPU tier; ``ACL_ROCM_EMULATE=1`` runs it on the CPU).

The second prefill of a shape launches the executors the first one validated (no phase 1): the rocm
backend's phase-2 memos (bound relaunches, cached GEMM calls, attention routes) must compute the same
tokens as the first, validating prefill, and the same as the NumPy reference.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random checkpoint of tests/qwen3 (2 layers, hidden 64, head dim 16)."""
    pytest.importorskip("transformers")
    from acl_tools.qwen3 import hf

    return hf.make_checkpoint(tmp_path_factory.mktemp("qwen3") / "tiny", preset="tiny", seed=0)


def test_kept_prefill_executors_repeat_the_first_prefill(tiny: Path, rocm_under_test: str) -> None:
    from acl_tools.qwen3.model import Qwen3Runner

    prompts = [[3, 14, 15, 92, 65, 35, 89, 79], [27, 18, 28, 18, 28, 45, 90, 45]]
    with Qwen3Runner(tiny, backend=rocm_under_test, dtype="fp32") as runner:
        first = runner.generate(prompts, 3, replay=False, keep_logits=True)
        again = runner.generate(prompts, 3, replay=False, keep_logits=True)
    assert first.prefill_builds == 1 and first.prefill_validations > 0
    assert again.prefill_builds == 0 and again.prefill_validations == 0  # launched, not validated
    np.testing.assert_array_equal(again.tokens, first.tokens)
    np.testing.assert_array_equal(np.stack(again.logits), np.stack(first.logits))  # the same kernels, bit for bit
    with Qwen3Runner(tiny, backend="reference", dtype="fp32") as oracle:
        truth = oracle.generate(prompts, 1, keep_logits=True)
    np.testing.assert_allclose(first.logits[0], truth.logits[0], atol=1e-4, rtol=0)  # the prefill's logits

"""ApplyAdamW and ApplyAdamWV2 on the GPU against the reference (GPU tier).

Every sample in every layout, the error cases, then a training-sized step: 4M-element bf16 and float32
state with amsgrad and maximize, through a strided (padded) view. ``ACL_ROCM_EMULATE=1`` runs it on the
CPU kernel emulator (the large step shrinks).
"""

from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import pytest

from acl_core.backend import Backend
from tests.rocm.against_reference import (
    assert_errors_match_reference,
    assert_every_sample_matches,
    assert_matches_reference,
)

pytestmark = pytest.mark.gpu

OPS = ("ApplyAdamW", "ApplyAdamWV2")
EMULATED = os.environ.get("ACL_ROCM_EMULATE") == "1"


@pytest.mark.parametrize("op", OPS)
def test_every_sample_matches_the_reference(rocm: Backend, reference: Backend, op: str) -> None:
    assert_every_sample_matches(rocm, reference, op)


@pytest.mark.parametrize("op", OPS)
def test_errors_match_the_reference(rocm: Backend, reference: Backend, op: str) -> None:
    assert_errors_match_reference(rocm, reference, op)


@pytest.mark.parametrize("config", ["scalar", "vec"])
@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16], ids=["float32", "bf16"])
def test_a_training_sized_step(rocm: Backend, reference: Backend, dtype: type, config: str) -> None:
    """Under each ACL_ADAMW_CONFIG (forced on the runner; ``vec`` runs on the contiguous layout's 1-D state)."""
    runner = rocm.runners["optim"]  # type: ignore[attr-defined]
    runner.forced_config = config
    try:
        _training_sized_step(rocm, reference, dtype)
    finally:
        runner.forced_config = None


def _training_sized_step(rocm: Backend, reference: Backend, dtype: type) -> None:
    rng = np.random.default_rng(5)
    shape = (64, 96) if EMULATED else (2048, 2048)
    state = {
        "varRef": rng.uniform(-2, 2, shape).astype(dtype),
        "mRef": rng.uniform(-0.1, 0.1, shape).astype(dtype),
        "vRef": rng.uniform(1e-4, 0.05, shape).astype(dtype),
        "grad": rng.uniform(-1, 1, shape).astype(dtype),
        "maxGradNormOptionalRef": rng.uniform(1e-4, 0.08, shape).astype(dtype),
    }
    hyper = {"lr": 1e-3, "weightDecay": 1e-2, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}
    args = state | hyper | {"step": np.array([12], np.int64), "amsgrad": True, "maximize": True}
    for layout in ("contiguous", "padded"):
        assert_matches_reference(rocm, reference, "ApplyAdamWV2", dict(args), layout, f"{shape} {layout}")

"""Paged KV (page attention) of IncreFlashAttentionV3/V4 and FusedInferAttentionScore above the provider seam,
on a CPU: the gather kernel and the decode kernels in the emulator (``kernel_emulator.py``).

Every paged sample (both dtypes, the three pool forms, uneven lengths across blocks, shuffled tables, masks,
GQA/MQA, prefill) runs contiguous, padded and transposed against the reference, under each
``ACL_PAGED_DECODE`` choice; the paged error samples are refused like the reference (a table entry past the
pool at synchronisation). ``tests/rocm/test_gpu_paged_attention.py`` is the GPU tier.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from acl_core.backend import Backend
from acl_core.spec.ops import get_spec
from acl_rocm.kernels.attention_paged import PAGED_MODES
from tests.rocm.against_reference import assert_errors_match_reference, assert_matches_reference

OPS = ("IncreFlashAttentionV4", "FusedInferAttentionScoreV4")
CASES = [
    (op, s)
    for op in OPS
    for s in get_spec(op).samples(np.random.default_rng(5))  # type: ignore[misc]
    if "paged" in s.note
]


@pytest.fixture
def paged_mode(emulated: Backend, request: pytest.FixtureRequest) -> Iterator[str]:
    """The emulated backend's paged decode choice for one test; the environment's again afterwards."""
    runner = emulated.attention  # type: ignore[attr-defined]
    runner.use_paged_mode(request.param)
    yield request.param
    runner.use_paged_mode(None)


@pytest.mark.parametrize("paged_mode", PAGED_MODES, indirect=True)
@pytest.mark.parametrize(("op", "sample"), CASES, ids=[f"{op}-{s.note}" for op, s in CASES])
def test_every_paged_sample_matches_the_reference(  # type: ignore[no-untyped-def]
    emulated: Backend, reference: Backend, op: str, sample, paged_mode: str
) -> None:
    assert op in emulated.capabilities().ops
    for layout in ("contiguous", "padded", "transposed"):
        assert_matches_reference(emulated, reference, op, sample.args, layout, f"{sample.note} ({paged_mode})")


@pytest.mark.parametrize("op", ["IncreFlashAttentionV3", "FusedInferAttentionScoreV2"])
def test_error_samples_are_refused_like_the_reference(emulated: Backend, reference: Backend, op: str) -> None:
    assert_errors_match_reference(emulated, reference, op)

"""RecurrentGatedDeltaRule on the GPU against the NumPy reference (GPU tier; ACL_ROCM_EMULATE=1 runs it on the CPU).

Every sample of the spec (contiguous, padded, transposed), then Qwen3-Next's decode shapes: 32 value
heads over 16 key heads of 128 x 128 states, a batch of single decode tokens and a batch of MTP
sequences (lengths up to 8, accepted counts drawn), states in a pool larger than the batch.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from acl_core.backend import Backend
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.linear_attention import rgdr_case
from tests.rocm.against_reference import assert_errors_match_reference, assert_matches_reference

pytestmark = pytest.mark.gpu

OP = "RecurrentGatedDeltaRule"
EMULATED = os.environ.get("ACL_ROCM_EMULATE") == "1"


def test_every_sample(rocm: Backend, reference: Backend) -> None:
    spec = get_spec(OP)
    assert spec.samples is not None
    for i, sample in enumerate(spec.samples(np.random.default_rng(2024))):
        for layout in ("contiguous", "padded", "transposed") if i % 2 == 0 else ("contiguous",):
            assert_matches_reference(rocm, reference, OP, sample.args, layout, sample.note)


def test_errors_match_the_reference(rocm: Backend, reference: Backend) -> None:
    assert_errors_match_reference(rocm, reference, OP)


@pytest.mark.parametrize("mtp", [False, True])
def test_qwen3_next_decode_shapes(rocm: Backend, reference: Backend, mtp: bool) -> None:
    rng = np.random.default_rng(7 + mtp)
    batch = 2 if EMULATED else 24
    dk = dv = 32 if EMULATED else 128
    nk, nv = (2, 4) if EMULATED else (16, 32)
    if mtp:
        lengths = tuple(int(n) for n in rng.integers(1, 9, batch))
        accepted = tuple(int(rng.integers(1, n + 1)) for n in lengths)
    else:
        lengths, accepted = (1,) * batch, (1,) * batch
    args = rgdr_case(rng, lengths, nk, nv, dk, dv, accepted=accepted, gk=mtp, blocks=sum(lengths) + 7)
    assert_matches_reference(rocm, reference, OP, args, "contiguous", f"B{batch} lengths {lengths}")

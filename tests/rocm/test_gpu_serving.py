"""ApplyTopKTopP and AttentionUpdate on the GPU against the reference (GPU tier).

Every sample in every layout (ApplyTopKTopP bit for bit, as its class says), then decode shapes:
ApplyTopKTopP over a 151,936-token vocabulary for 8 sequences (float32 and bf16, top-k only, top-p only,
both), AttentionUpdate of 8 partial results for 4,096 rows of headDim 128; the error cases.
``ACL_ROCM_EMULATE=1`` runs it on the CPU kernel emulator (the decode shapes shrink).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.spec.ops.serving import attention_update_args
from tests.rocm.against_reference import (
    assert_errors_match_reference,
    assert_every_sample_matches,
    assert_matches_reference,
)

pytestmark = pytest.mark.gpu

OPS = ("ApplyTopKTopP", "AttentionUpdate")
EMULATED = os.environ.get("ACL_ROCM_EMULATE") == "1"


@pytest.mark.parametrize("op", OPS)
def test_every_sample_matches_the_reference(rocm: Backend, reference: Backend, op: str) -> None:
    assert_every_sample_matches(rocm, reference, op)


@pytest.mark.parametrize("op", OPS)
def test_errors_match_the_reference(rocm: Backend, reference: Backend, op: str) -> None:
    assert_errors_match_reference(rocm, reference, op)


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["float32", "float16"])
def test_top_k_top_p_over_a_vocabulary(rocm: Backend, reference: Backend, dtype: type) -> None:
    rng = np.random.default_rng(4)
    batch, vocab = (3, 3000) if EMULATED else (8, 151936)
    logits = (rng.standard_normal((batch, vocab)) * 4).astype(dtype)
    p = rng.uniform(0.5, 0.99, batch).astype(dtype)
    k = rng.integers(1, vocab + 1, batch).astype(np.int32)
    k[0] = 50
    for args, note in (
        ({"logits": logits, "p": p, "k": k}, "both"),
        ({"logits": logits, "p": p, "k": None}, "top-p"),
        ({"logits": logits, "p": None, "k": k}, "top-k"),
    ):
        assert_matches_reference(rocm, reference, "ApplyTopKTopP", args, "contiguous", note)


def test_attention_update_at_decode_shapes(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(5)
    rows = 64 if EMULATED else 4096
    for dt, sp in ((D.ACL_BF16, 8), (D.ACL_FLOAT, 3)):
        args = attention_update_args(rng, sp, rows, 128, dt, 1)
        assert_matches_reference(rocm, reference, "AttentionUpdate", args, "contiguous", f"sp={sp}")

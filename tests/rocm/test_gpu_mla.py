"""MlaPrologV2WeightNz / V3 on the GPU against the NumPy reference (GPU tier).

Every sample of both specs (contiguous and under non-contiguous layouts), the error samples, then
DeepSeek-V3 decode shapes (ACL_ROCM_EMULATE=1 shrinks them): 32 tokens of He 7168 through Hcq 1536,
32 heads of D 128 + Dr 64, Hckv 512, into 128-row blocks, PA_BSND and PA_NZ, and V3's scale factors;
compared under the op's accuracy class (composite, bf16 intermediates).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from acl_core.backend import Backend
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.mla import mla_case
from tests.rocm.against_reference import assert_errors_match_reference, assert_matches_reference

pytestmark = pytest.mark.gpu

EMULATED = os.environ.get("ACL_ROCM_EMULATE") == "1"
OPS = ("MlaPrologV2WeightNz", "MlaPrologV3WeightNz")


@pytest.mark.parametrize("op", OPS)
def test_every_sample(rocm: Backend, reference: Backend, op: str) -> None:
    spec = get_spec(op)
    assert spec.samples is not None
    samples = list(spec.samples(np.random.default_rng(2024)))
    if EMULATED and op == "MlaPrologV3WeightNz":  # on the emulator: the scaled cases (V2's run V2's kernel)
        samples = samples[-2:]
    for i, sample in enumerate(samples):
        for layout in ("contiguous", "padded", "transposed") if i % 2 == 0 else ("contiguous",):
            assert_matches_reference(rocm, reference, op, dict(sample.args), layout, sample.note)


@pytest.mark.parametrize("op", OPS)
def test_errors_match_the_reference(rocm: Backend, reference: Backend, op: str) -> None:
    assert_errors_match_reference(rocm, reference, op)


def _decode_case(mode: str, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    if EMULATED:
        return mla_case(rng, (4,), he=64, hcq=64, heads=2, d=32, dr=32, hckv=64, blocks=2, block_size=16, mode=mode)
    return mla_case(
        rng, (32,), he=7168, hcq=1536, heads=32, d=128, dr=64, hckv=512, blocks=64, block_size=128, mode=mode
    )


@pytest.mark.parametrize("mode", ["PA_BSND", "PA_NZ"])
def test_deepseek_decode_shapes(rocm: Backend, reference: Backend, mode: str) -> None:
    args = _decode_case(mode, 7)
    assert_matches_reference(rocm, reference, "MlaPrologV2WeightNz", args, "contiguous", f"DeepSeek decode {mode}")


def test_v3_scales_at_decode_shapes(rocm: Backend, reference: Backend) -> None:
    args = {**_decode_case("PA_NZ", 8), "qcQrScale": 0.7, "kcScale": 1.3}
    assert_matches_reference(rocm, reference, "MlaPrologV3WeightNz", args, "contiguous", "V3 scaled decode")


def test_prefill_tokens_in_batches(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(9)
    lead, dims = ((2, 3), {"he": 64, "hcq": 48}) if EMULATED else ((4, 64), {"he": 1024, "hcq": 1536})
    heads, blocks = (2, 2) if EMULATED else (16, 4)
    args = mla_case(rng, lead, heads=heads, d=128, dr=64, hckv=512, blocks=blocks, block_size=128, **dims)
    assert_matches_reference(rocm, reference, "MlaPrologV2WeightNz", args, "contiguous", "prefill (B, S)")

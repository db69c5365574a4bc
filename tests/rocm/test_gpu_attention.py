"""The attention family and Addmm/Baddbmm on the GPU, compared with the NumPy reference (GPU tier).

Every sample of every claimed op runs contiguous (every third also as padded and transposed views)
and must agree with the reference within the conformance tolerances; larger shapes check the
key tiling (several tiles, long decode caches) against the reference too.
"""

from __future__ import annotations

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import from_numpy
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.attention import compressed_mask
from acl_rocm.ops.attention import OPS
from acl_rocm.ops.matmul import SCALED_OPS
from conformance.tolerances import lookup
from tests.conftest import assert_close

pytestmark = pytest.mark.gpu

CLAIMED = (*OPS, *SCALED_OPS, "InplaceAddmm", "InplaceBaddbmm")


def _compare(op: str, got: dict, expected: dict, note: str, tolerance: tuple[float, float] | None) -> None:
    assert got.keys() == expected.keys(), note
    for name, value in expected.items():
        if name == "softmaxOutOut":  # reserved: neither backend writes it
            continue
        actual = got[name]
        assert actual.dtype == value.dtype and actual.shape == value.shape, f"{op} [{note}] {name}"
        tol = lookup(op, from_numpy(value.dtype), "rocm", tolerance)
        try:
            assert_close(actual, value, atol=tol.atol, rtol=tol.rtol)
        except AssertionError as exc:
            raise AssertionError(f"{op} [{note}] {name}\n{exc}") from None


@pytest.mark.parametrize("op", CLAIMED)
def test_matches_reference(rocm: Backend, reference: Backend, op: str) -> None:
    if op not in rocm.kernels:
        pytest.skip(f"{op} is not claimed here (BLAS: {rocm.matmul.unavailable()})")  # type: ignore[attr-defined]
    spec = get_spec(op)
    assert spec.samples is not None
    samples = list(spec.samples(np.random.default_rng(2024)))
    assert samples
    for i, sample in enumerate(samples):
        expected = eager.run(op, reference, op_args=sample.args)
        for layout in ("contiguous", "padded", "transposed") if i % 3 == 0 else ("contiguous",):
            got = eager.run(op, rocm, layout=layout, guard=True, op_args=sample.args)
            _compare(op, got, expected, f"{sample.note} layout={layout}", sample.tolerance)


def _case(rng: np.random.Generator, shape: tuple[int, ...], dtype: object) -> np.ndarray:
    return rng.uniform(-1, 1, shape).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float16, "bfloat16", np.float32])
def test_flash_attention_across_many_key_tiles(rocm: Backend, reference: Backend, dtype: object) -> None:
    rng = np.random.default_rng(5)
    b, nq, nkv, sq, skv, d = 2, 8, 2, 300, 700, 128
    args = {
        "query": _case(rng, (b, sq, nq * d), np.dtype(dtype)),
        "key": _case(rng, (b, skv, nkv * d), np.dtype(dtype)),
        "value": _case(rng, (b, skv, nkv * d), np.dtype(dtype)),
        "attenMaskOptional": compressed_mask(),
        "scaleValue": 1 / np.sqrt(d),
        "keepProb": 1.0,
        "preTokens": 2147483647,
        "nextTokens": 2147483647,
        "headNum": nq,
        "inputLayout": "BSH",
        "innerPrecise": 0,
        "sparseMode": 3,
    }
    expected = eager.run("FlashAttentionScore", reference, **args)
    got = eager.run("FlashAttentionScore", rocm, **args)
    _compare("FlashAttentionScore", got, expected, "causal 300x700 D=128 GQA", None)


def test_decode_against_a_long_cache(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(6)
    b, nq, nkv, skv, d = 2, 16, 4, 4096, 128
    args = {
        "query": _case(rng, (b, nq, 1, d), np.float16),
        "key": [_case(rng, (b, nkv, skv, d), np.float16)],
        "value": [_case(rng, (b, nkv, skv, d), np.float16)],
        "actualSeqLengths": [4096, 1000],
        "numHeads": nq,
        "scaleValue": 1 / np.sqrt(d),
        "inputLayout": "BNSD",
        "numKeyValueHeads": nkv,
    }
    expected = eager.run("IncreFlashAttention", reference, **args)
    got = eager.run("IncreFlashAttention", rocm, **args)
    _compare("IncreFlashAttention", got, expected, "decode 4096-key cache", None)

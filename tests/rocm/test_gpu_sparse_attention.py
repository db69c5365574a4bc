"""LightningIndexer and SparseFlashAttention on the GPU against the NumPy reference (GPU tier).

Every sample of both specs, then DeepSeek-V3.2-like decode shapes (ACL_ROCM_EMULATE=1 shrinks them):
the indexer over a paged cache of several thousand keys choosing 2048 (bit for bit: the scores follow
one float32 order), and sparse attention of 128-dim heads plus a 64-dim rope over 2048 selected keys, the
ops bench's call (T4, 128 heads, D 512 + 64, 2,048 of 32,768) and a GQA / TND / causal call, each on both
paths (``ACL_SFA_PATH``: the GEMM path and the block kernel, the debug log proving which ran).
Each LightningIndexer path (``ACL_LI_PATH`` select, tiled, sort) runs the calls of
:mod:`tests.rocm.indexer_paths` bit for bit: at the GPU the bench's decode shape (32,768 keys, 64 heads of
128, top 2,048) with ties at the cut, short and causal lengths, a paged cache and sparseCount 8192.
"""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.sparse_attention import li_case, sfa_case
from tests.rocm.against_reference import assert_errors_match_reference, assert_matches_reference, class_problems
from tests.rocm.indexer_paths import PATHS, indexer_calls, li_path

pytestmark = pytest.mark.gpu

EMULATED = os.environ.get("ACL_ROCM_EMULATE") == "1"
OPS = ("LightningIndexer", "SparseFlashAttention")


@pytest.mark.parametrize("op", OPS)
def test_every_sample(rocm: Backend, reference: Backend, op: str) -> None:
    spec = get_spec(op)
    assert spec.samples is not None
    for i, sample in enumerate(spec.samples(np.random.default_rng(2024))):
        for layout in ("contiguous", "padded", "transposed") if i % 2 == 0 else ("contiguous",):
            assert_matches_reference(rocm, reference, op, sample.args, layout, sample.note)


def test_every_sfa_sample_on_the_block_kernel(
    rocm: Backend, reference: Backend, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """test_every_sample runs SparseFlashAttention's default (the GEMM path given a GEMM): the block kernel too."""
    monkeypatch.setattr(rocm, "environ", {**rocm.environ, "ACL_SFA_PATH": "block"})  # type: ignore[attr-defined]
    spec = get_spec("SparseFlashAttention")
    assert spec.samples is not None
    with caplog.at_level(logging.DEBUG, logger="acl_rocm.sparse_attention"):
        for i, sample in enumerate(spec.samples(np.random.default_rng(2024))):
            for layout in ("contiguous", "padded", "transposed") if i % 2 == 0 else ("contiguous",):
                assert_matches_reference(rocm, reference, "SparseFlashAttention", sample.args, layout, sample.note)
    _took(caplog, "block")
    assert "gemm path (" not in caplog.text


@pytest.mark.parametrize("op", OPS)
def test_errors_match_the_reference(rocm: Backend, reference: Backend, op: str) -> None:
    assert_errors_match_reference(rocm, reference, op)


def test_indexer_decode_over_a_paged_cache(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(5)
    keys, count, heads, d = (300, 64, 4, 32) if EMULATED else (6000, 2048, 64, 128)
    args = li_case(rng, D.ACL_BF16, 2, 1, keys, heads, 1, d, count, kv_layout="PA_BSND", lk=[keys, keys // 3], block=64)
    want = eager.run("LightningIndexer", reference, op_args=args)["sparseIndicesOut"]
    got = eager.run("LightningIndexer", rocm, op_args=args)["sparseIndicesOut"]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("path", PATHS)
def test_indexer_paths_at_decode_shapes(rocm: Backend, reference: Backend, path: str) -> None:
    for note, args in indexer_calls(big=not EMULATED):
        want = eager.run("LightningIndexer", reference, op_args=args)
        with li_path(rocm, path):
            got = eager.run("LightningIndexer", rocm, op_args=args)
        for name in want:
            assert got[name].tobytes() == want[name].tobytes(), f"{path} [{note}]: {name}"


@pytest.fixture(params=["gemm", "block"])
def sfa_path(rocm: Backend, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """ACL_SFA_PATH forced on the backend for one test (the GEMM path by default, the block kernel)."""
    monkeypatch.setattr(rocm, "environ", {**rocm.environ, "ACL_SFA_PATH": request.param})  # type: ignore[attr-defined]
    return str(request.param)


def _took(caplog: pytest.LogCaptureFixture, path: str) -> None:
    want = "gemm path (" if path == "gemm" else "block kernel (ACL_SFA_PATH=block)"
    assert want in caplog.text, caplog.text


def test_sparse_attention_decode_over_selected_keys(
    rocm: Backend, reference: Backend, sfa_path: str, caplog: pytest.LogCaptureFixture
) -> None:
    rng = np.random.default_rng(6)
    keys, size, heads, d = (200, 64, 4, 32) if EMULATED else (8192, 2048, 16, 128)
    args = sfa_case(rng, D.ACL_BF16, 2, 1, keys, heads, 1, d, 64 if not EMULATED else 16, size, 1, lk=[keys, keys // 2])
    with caplog.at_level(logging.DEBUG, logger="acl_rocm.sparse_attention"):
        assert_matches_reference(rocm, reference, "SparseFlashAttention", args, "contiguous", f"{keys} keys, {size}")
    _took(caplog, sfa_path)


def test_sparse_attention_at_the_bench_shape(
    rocm: Backend, reference: Backend, sfa_path: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The ops bench's DeepSeek-V3.2 decode call: T4 tokens, 128 heads on one MLA kv head, D 512 + rope 64, 2,048 of
    32,768 keys, one device tensor as key and value (absorb mode), statistics on."""
    tokens, heads, d, dr, context, selected = (2, 8, 32, 8, 256, 64) if EMULATED else (4, 128, 512, 64, 32768, 2048)
    args = sfa_case(np.random.default_rng(16), D.ACL_BF16, tokens, 1, context, heads, 1, d, dr, selected, 1, mode=0)
    args["returnSoftmaxLse"] = True
    expected = eager.run("SparseFlashAttention", reference, op_args=args)
    kv = eager.to_device(args["key"], rocm)
    with caplog.at_level(logging.DEBUG, logger="acl_rocm.sparse_attention"):
        actual = eager.run("SparseFlashAttention", rocm, op_args={**args, "key": kv, "value": kv})
    _took(caplog, sfa_path)
    if sfa_path == "gemm":
        assert "value from the gathered keys" in caplog.text
    problems = class_problems("SparseFlashAttention", args, actual, expected)
    assert not problems, "; ".join(p.message for p in problems)


def test_sparse_attention_gqa_paged_causal_statistics(
    rocm: Backend, reference: Backend, sfa_path: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Two kv heads of 16 query heads, TND queries over a TND cache, causal rows, blocks of 4, statistics."""
    rng = np.random.default_rng(26)
    keys, size, heads, d, dr = (96, 12, 4, 16, 8) if EMULATED else (4096, 256, 32, 128, 64)
    lk = [keys, keys // 3]
    args = sfa_case(
        rng, D.ACL_FLOAT16, 2, 3, keys, heads, 2, d, dr, size, 4, lq=[3, 2], lk=lk, mode=3, lse=True,
        q_layout="TND", kv_layout="TND", distinct_value=True,
    )  # fmt: skip
    with caplog.at_level(logging.DEBUG, logger="acl_rocm.sparse_attention"):
        assert_matches_reference(rocm, reference, "SparseFlashAttention", args, "contiguous", "TND causal blocks of 4")
    _took(caplog, sfa_path)


def test_sparse_attention_replays_like_eager(rocm: Backend, sfa_path: str, caplog: pytest.LogCaptureFixture) -> None:
    """Captured on a stream (the GEMM path's temporaries and vendor GEMMs too), each replay equals its eager run."""
    from tests.rocm.capture_harness import replays_like_eager

    if not rocm.capabilities().stream_capture:
        pytest.fail(f"rocm does not capture here: {rocm.capabilities().notes.get('stream_capture')}")
    keys, size, heads, d, dr = (64, 16, 4, 32, 8) if EMULATED else (4096, 512, 32, 128, 64)
    args = sfa_case(
        np.random.default_rng(36), D.ACL_BF16, 2, 2, keys, heads, 1, d, dr, size, 1, lk=[keys, 40], lse=True
    )
    with caplog.at_level(logging.DEBUG, logger="acl_rocm.sparse_attention"):
        replays_like_eager(rocm, "SparseFlashAttention", args)
    _took(caplog, sfa_path)

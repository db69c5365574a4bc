"""LightningIndexer and SparseFlashAttention on the GPU against the NumPy reference (GPU tier).

Every sample of both specs, then DeepSeek-V3.2-like decode shapes (ACL_ROCM_EMULATE=1 shrinks them):
the indexer over a paged cache of several thousand keys choosing 2048 (bit for bit: the scores follow
one float32 order), and sparse attention of 128-dim heads plus a 64-dim rope over 2048 selected keys.
Each LightningIndexer path (``ACL_LI_PATH`` select, tiled, sort) runs the calls of
:mod:`tests.rocm.indexer_paths` bit for bit: at the GPU the bench's decode shape (32,768 keys, 64 heads of
128, top 2,048) with ties at the cut, short and causal lengths, a paged cache and sparseCount 8192.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.sparse_attention import li_case, sfa_case
from tests.rocm.against_reference import assert_errors_match_reference, assert_matches_reference
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


def test_sparse_attention_decode_over_selected_keys(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(6)
    keys, size, heads, d = (200, 64, 4, 32) if EMULATED else (8192, 2048, 16, 128)
    args = sfa_case(rng, D.ACL_BF16, 2, 1, keys, heads, 1, d, 64 if not EMULATED else 16, size, 1, lk=[keys, keys // 2])
    assert_matches_reference(rocm, reference, "SparseFlashAttention", args, "contiguous", f"{keys} keys, {size} chosen")

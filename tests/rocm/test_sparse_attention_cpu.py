"""LightningIndexer and SparseFlashAttention above the provider seam, on a CPU: their kernels in the emulator.

LightningIndexer must equal the reference bit for bit (its scores follow one float32 order on both
sides, so the ranking is exact), also with a row sorter of small tiles (several merge passes); every
sample of both ops runs contiguous, padded and transposed; errors match the reference (device-data
rules at synchronisation) and a refused call writes nothing. Each LightningIndexer path (``ACL_LI_PATH``:
select, tiled, sort) equals the reference bit for bit on the calls of :mod:`tests.rocm.indexer_paths`
(ties at the cut, short and causal lengths, paged and packed keys, scalar key loads, the scratch sort).
``tests/rocm/test_gpu_sparse_attention.py`` is the GPU tier.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.errors import AclnnError
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.sparse_attention import li_case
from acl_rocm.kernels.lightning_indexer import LiInstance, li_source, select_threads
from acl_rocm.kernels.sparse_attention import SaInstance, sa_source
from acl_rocm.ops.sort import Sorter
from tests.rocm.against_reference import assert_errors_match_reference, assert_matches_reference
from tests.rocm.indexer_paths import PATHS, indexer_calls, li_path, with_ties

OPS = ("LightningIndexer", "SparseFlashAttention")
CASES = [(op, s) for op in OPS for s in get_spec(op).samples(np.random.default_rng(12))]  # type: ignore[misc]


@pytest.mark.parametrize(("op", "sample"), CASES, ids=[f"{op}-{s.note}" for op, s in CASES])
def test_every_sample_matches_the_reference(emulated: Backend, reference: Backend, op: str, sample) -> None:  # type: ignore[no-untyped-def]
    assert op in emulated.capabilities().ops
    for layout in ("contiguous", "padded", "transposed"):
        assert_matches_reference(emulated, reference, op, sample.args, layout, sample.note)


def test_indexer_is_bit_exact_through_merge_passes(emulated: Backend, reference: Backend) -> None:
    runner = emulated.sparse_attention  # type: ignore[attr-defined]
    saved = runner.sorter
    runner.sorter = Sorter(emulated, tile=64)  # 300 keys: five tiles, three merge passes
    try:
        args = li_case(np.random.default_rng(3), D.ACL_BF16, 2, 2, 300, 4, 1, 16, 100, lk=[300, 150], values=True)
        args["key"][0, 7] = args["key"][0, 250]  # equal scores: the lower key first on both sides
        want = eager.run("LightningIndexer", reference, op_args=args)
        got = eager.run("LightningIndexer", emulated, op_args=args)
        for name in want:
            assert got[name].tobytes() == want[name].tobytes(), name
    finally:
        runner.sorter = saved


@pytest.mark.parametrize("op", OPS)
def test_error_samples_are_refused_like_the_reference(emulated: Backend, reference: Backend, op: str) -> None:
    assert_errors_match_reference(emulated, reference, op)


def test_a_refused_indexer_call_writes_nothing(emulated: Backend) -> None:
    args = li_case(np.random.default_rng(4), D.ACL_BF16, 2, 2, 20, 2, 1, 8, 4, kv_layout="PA_BSND", lk=[20, 9])
    table = args["blockTableOptional"].copy()
    table[1, 0] = 99  # past the pool
    out = eager.to_device(np.full((2, 2, 1, 4), 5, np.int32), emulated)
    with pytest.raises(AclnnError) as err:
        eager.run("LightningIndexer", emulated, op_args={**args, "blockTableOptional": table, "sparseIndicesOut": out})
    assert err.value.code == 161002
    np.testing.assert_array_equal(out.numpy(), np.full((2, 2, 1, 4), 5, np.int32))


def test_sources_name_their_kernels() -> None:
    inst = SaInstance(D.ACL_BF16, D.ACL_FLOAT, 128, 64)
    for which in ("check", "score", "emit", "attend"):
        assert f"{inst.name(which)}(" in sa_source(inst, which)
    assert "__fadd_rn" in sa_source(inst, "score") and "fmaf(" in sa_source(inst, "score")


LI_CALLS = indexer_calls(big=False)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(("note", "args"), LI_CALLS, ids=[note for note, _ in LI_CALLS])
def test_indexer_paths_are_bit_exact(emulated: Backend, reference: Backend, path: str, note: str, args) -> None:  # type: ignore[no-untyped-def]
    want = eager.run("LightningIndexer", reference, op_args=args)
    with li_path(emulated, path):
        got = eager.run("LightningIndexer", emulated, op_args=args)
    for name in want:
        assert got[name].tobytes() == want[name].tobytes(), f"{path} [{note}]: {name}"


@pytest.mark.parametrize("path", ("select", "tiled"))
def test_indexer_fast_paths_read_every_layout(emulated: Backend, reference: Backend, path: str) -> None:
    args = li_case(np.random.default_rng(8), D.ACL_BF16, 2, 2, 140, 4, 1, 16, 30, lk=[140, 90], values=True)
    with li_path(emulated, path):
        for layout in ("contiguous", "padded", "transposed"):  # padded / transposed keys: the scalar loads
            assert_matches_reference(emulated, reference, "LightningIndexer", args, layout, f"{path} {layout}")


def test_indexer_logs_its_path_and_refuses_an_unknown_one(emulated: Backend, caplog: pytest.LogCaptureFixture) -> None:
    args = li_case(np.random.default_rng(9), D.ACL_BF16, 1, 1, 40, 2, 1, 8, 8)
    for path in PATHS:
        caplog.clear()
        with li_path(emulated, path), caplog.at_level(logging.DEBUG, logger="acl_rocm.sparse_attention"):
            eager.run("LightningIndexer", emulated, op_args=args)
        assert f": {path} path" in caplog.text
    with li_path(emulated, "heap"), pytest.raises(AclnnError) as err:
        eager.run("LightningIndexer", emulated, op_args=args)
    assert err.value.code == 161002


def test_fast_path_sources_name_their_kernels() -> None:
    for vec in (True, False):
        inst = LiInstance(D.ACL_BF16, D.ACL_FLOAT, vec)
        for which in ("tiled", "select"):
            assert f"{inst.name(which)}(" in li_source(inst, which)
        assert "fmaf(" in li_source(inst, "tiled") and "__fadd_rn" in li_source(inst, "tiled")
    assert [select_threads(n) for n in (10, 8192, 8193, 32768, 10**6)] == [256, 256, 512, 1024, 1024]


def test_indexer_select_with_a_full_block(emulated: Backend, reference: Backend) -> None:
    keys = 17000  # past 16384 scores a row: the select block's 1024 threads, 17 keys a chunk
    assert select_threads(keys) == 1024
    args = li_case(np.random.default_rng(10), D.ACL_BF16, 1, 1, keys, 2, 1, 8, 2048, mode=0, values=True)
    args = with_ties(args, slice(0, 15500), slice(16000, 16400), 15600)  # the cut inside ~16,000 zero scores
    want = eager.run("LightningIndexer", reference, op_args=args)
    with li_path(emulated, "select"):
        got = eager.run("LightningIndexer", emulated, op_args=args)
    for name in want:
        assert got[name].tobytes() == want[name].tobytes(), name

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


@pytest.mark.parametrize("mode", ["tile", "direct"])
@pytest.mark.parametrize("lengths", [(300, 129), (100, 37)], ids=["split", "short-cache"])
@pytest.mark.parametrize("form", ["BnNBsD", "NZ"])
def test_direct_decode_reads_the_pool_and_checks_the_table(
    emulated: Backend,
    reference: Backend,
    form: str,
    lengths: tuple[int, int],
    mode: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``tile`` / ``direct``: the decode program reads the pool (no gather): a long cache in several splits of the
    split kernel, a short one in the short-cache kernel, a table entry a tile (32-key blocks hold whole tiles) or a
    key row; a table entry past the pool fails (161002)."""
    from acl_core import eager
    from acl_core.dtypes import DataType as D
    from acl_core.errors import AclnnError
    from acl_core.spec.ops.attention import FIA_DEFAULTS, FIA_PAGED_NAMES, paged_case

    runner = emulated.attention  # type: ignore[attr-defined]
    runner.use_paged_mode(mode)
    try:
        args = paged_case(np.random.default_rng(9), D.ACL_BF16, "BNSD", form, 4, 2, 1, lengths, 64, 32,
                          FIA_PAGED_NAMES, **{**FIA_DEFAULTS, "blockSize": 32})  # fmt: skip
        with caplog.at_level("DEBUG", logger="acl_rocm.attention"):
            assert_matches_reference(emulated, reference, "FusedInferAttentionScore", args, "contiguous", form)
        assert "paged KV through the table" in caplog.text
        assert ("short-cache block kernel" in caplog.text) == (max(lengths) <= 256)
        assert f"a table entry a {'tile' if mode == 'tile' else 'key row'}" in caplog.text
        bad = args["blockTable"].copy()
        bad[1, 1] = 10_000  # a column batch 1 reads
        with pytest.raises(AclnnError) as info:
            eager.run("FusedInferAttentionScore", emulated, op_args={**args, "blockTable": bad})
        assert info.value.code == 161002
    finally:
        runner.use_paged_mode(None)


@pytest.mark.parametrize("form", ["BnNBsD", "NZ"])
def test_tile_short_cache_reads_a_table_entry_a_span_of_its_tile(
    emulated: Backend, reference: Backend, form: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``tile`` with 16-row blocks at D 64: the short-cache kernel's 32-key warp tile spans two pages, so it reads
    one table entry per 16-key span of it (4 lane groups x 4 rows), not per key row."""
    from acl_core.dtypes import DataType as D
    from acl_core.spec.ops.attention import FIA_DEFAULTS, FIA_PAGED_NAMES, paged_case

    runner = emulated.attention  # type: ignore[attr-defined]
    runner.use_paged_mode("tile")
    try:
        args = paged_case(np.random.default_rng(23), D.ACL_FLOAT16, "BNSD", form, 4, 2, 1, (100, 37), 64, 16,
                          FIA_PAGED_NAMES, **{**FIA_DEFAULTS, "blockSize": 16})  # fmt: skip
        with caplog.at_level("DEBUG", logger="acl_rocm.attention"):
            assert_matches_reference(emulated, reference, "FusedInferAttentionScore", args, "contiguous", form)
        assert "short-cache block kernel" in caplog.text
        assert "a table entry a tile of 16 keys" in caplog.text
    finally:
        runner.use_paged_mode(None)

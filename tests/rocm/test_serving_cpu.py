"""ApplyTopKTopP and AttentionUpdate above the provider seam, on the CPU kernel emulator.

Every sample runs contiguous and transposed against the reference (ApplyTopKTopP bit for bit: its
top-p decision uses the reference's exact arithmetic); rows longer than a sort tile take the merge
path; a ``k`` outside the vocabulary is 161002 at synchronisation with ``out`` untouched.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.errors import AclnnError
from acl_core.spec.ops import get_spec
from acl_rocm.backend import RocmBackend
from acl_rocm.kernels.serving import AttentionUpdate, TopKTopP
from acl_rocm.ops import serving
from tests.rocm.against_reference import compare_run
from tests.rocm.fake_provider import FakeProvider

EXACT = {"ApplyTopKTopP": ("out",)}
"""Outputs compared bit for bit (the filter keeps or masks whole logits: no arithmetic)."""


@pytest.fixture()
def small_tile(emulated: RocmBackend) -> Iterator[RocmBackend]:
    """The emulated backend with 8-element sort tiles (longer rows take the merge path)."""
    sorter = emulated.runners["serving"].sorter
    sorter.tile = 8
    yield emulated
    sorter.tile = 2048


@pytest.mark.parametrize("op", serving.OPS)
def test_every_sample_matches_the_reference_when_emulated(emulated: RocmBackend, reference: Backend, op: str) -> None:
    samples = list(get_spec(op).samples(np.random.default_rng(2024)))  # type: ignore[misc]
    assert samples
    for sample in samples:
        for layout in ("contiguous", "transposed"):
            compare_run(emulated, reference, op, dict(sample.args), layout, sample.note, EXACT.get(op, ()))


def test_top_k_top_p_through_the_merge_path(small_tile: RocmBackend, reference: Backend) -> None:
    rng = np.random.default_rng(3)
    logits = (rng.standard_normal((5, 300)) * 2).astype(np.float32)
    logits[1, ::7] = logits[1, 3]  # ties across tiles
    logits[2, 10] = np.nan
    args = {"logits": logits, "p": np.float32([0.9, 0.5, 0.7, 0.0, 1.0]), "k": np.int32([300, 17, 1, 50, 299])}
    for layout in ("contiguous", "padded"):
        compare_run(
            small_tile, reference, "ApplyTopKTopP", args, layout, "300 entries, tiles of 8", EXACT["ApplyTopKTopP"]
        )
    bf = logits.astype(np.float32)
    args = {"logits": bf, "p": np.float32([0.3, 0.6, 0.99, 0.5, 0.1]), "k": None}
    compare_run(small_tile, reference, "ApplyTopKTopP", args, "transposed", "top-p only", EXACT["ApplyTopKTopP"])


def test_bad_k_is_refused_at_synchronisation_and_writes_nothing(emulated: RocmBackend, reference: Backend) -> None:
    for e in get_spec("ApplyTopKTopP").error_samples(np.random.default_rng(0)):  # type: ignore[misc]
        if "when the operator runs" in e.note:
            for backend in (reference, emulated):
                with pytest.raises(AclnnError) as err:
                    eager.run("ApplyTopKTopP", backend, **e.args)
                assert err.value.code == 161002, backend.name


def test_sources(tmp_path: Path) -> None:
    backend = RocmBackend(FakeProvider(), {"ACL_KERNEL_CACHE": str(tmp_path)})
    assert set(serving.OPS) <= set(backend.capabilities().ops)
    src = TopKTopP(D.ACL_BF16, True, True).source()
    assert "if (*flag) return;" in src and "acl_rank_exp(" in src and "(unsigned short)0xff80u" in src
    assert "acl_rank_exp(" not in TopKTopP(D.ACL_FLOAT, True, False).source().split("acl_rank_exp(double t)")[1]
    assert "long long v[16][5]" in AttentionUpdate(D.ACL_FLOAT16, 16, True).source()

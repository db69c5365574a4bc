"""The MoE family and IndexPutImpl above the provider seam, on the CPU.

Their generated kernels (softmax, sorts, routing tables, gathers, the combine, target positions and
the segmented apply) run in the g++ kernel emulator on host memory: every sample is compared with
the reference, contiguous and transposed; duplicate indices (assignment: last wins; accumulate: all
count) are checked bit-exactly, also through the multi-tile sort path; index values the device
refuses surface as 161002 at synchronisation, as the reference's launch-time checks do.
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
from acl_core.spec.ops.moe import routing_indices
from acl_rocm.backend import RocmBackend
from acl_rocm.kernels.index_put import Apply, Positions
from acl_rocm.kernels.moe import Finalize, GatingSoftmax
from acl_rocm.ops import index_put as index_put_ops
from acl_rocm.ops import moe as moe_ops
from tests.rocm.against_reference import compare_run
from tests.rocm.fake_provider import FakeProvider

OPS = [*moe_ops.OPS, *index_put_ops.OPS]


@pytest.fixture()
def small_tile(emulated: RocmBackend) -> Iterator[RocmBackend]:
    """The emulated backend with 8-element sort tiles (longer sorts take the merge path)."""
    sorters = [emulated.runners[f].sorter for f in ("moe", "index_put")]
    for s in sorters:
        s.tile = 8
    yield emulated
    for s in sorters:
        s.tile = 2048


@pytest.mark.parametrize("op", OPS)
def test_every_sample_matches_the_reference_when_emulated(emulated: RocmBackend, reference: Backend, op: str) -> None:
    samples = list(get_spec(op).samples(np.random.default_rng(2024)))  # type: ignore[misc]
    assert samples
    for sample in samples:
        for layout in ("contiguous", "transposed"):
            compare_run(emulated, reference, op, dict(sample.args), layout, sample.note)


@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.bool_], ids=["f32", "f16", "i32", "bool"])
def test_duplicate_indices_through_the_merge_path(
    small_tile: RocmBackend, reference: Backend, accumulate: bool, dtype: type
) -> None:
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((6, 5)) * 4).astype(dtype)
    idx = rng.integers(-6, 6, 40).astype(np.int64)  # 40 targets over 6 rows: many repeats, 5 sort tiles
    args = {"selfRef": x, "indices": [idx], "values": (rng.standard_normal((40, 5)) * 4).astype(dtype)}
    args |= {"accumulate": accumulate, "unsafe": True}
    want = eager.run("IndexPutImpl", reference, **args)["selfRef"]
    got = eager.run("IndexPutImpl", small_tile, **args)["selfRef"]
    np.testing.assert_array_equal(got, want)  # same order, one rounding: bit-exact


def test_two_index_tensors_with_broadcast_values(small_tile: RocmBackend, reference: Backend) -> None:
    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 3, 5)).astype(np.float32)
    rows = np.array([[0, 3, 3], [1, 0, 3]], np.int32)
    cols = np.array([[4], [-5]], np.int64)
    empty = np.zeros(0, np.int64)
    for accumulate in (False, True):
        for indices, note in (([rows, empty, cols], "block first"), ([empty, rows % 3, cols], "block in place")):
            args = {"selfRef": x, "indices": indices, "values": np.float32([1.5, 2.5, -1.0])}
            args |= {"accumulate": accumulate, "unsafe": True}
            for layout in ("contiguous", "transposed"):
                compare_run(small_tile, reference, "IndexPutImpl", args, layout, f"{note}, accumulate={accumulate}")


def test_long_gating_rows_and_routing(small_tile: RocmBackend, reference: Backend) -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 37)).astype(np.float32)
    x[1, 4:9] = x[1, 3]  # ties go to the lower expert
    for k in (1, 5, 37):
        compare_run(small_tile, reference, "MoeGatingTopKSoftmax", {"x": x, "k": k}, "contiguous", f"37 experts k={k}")
    expert, row = routing_indices(rng, 9, 8, 3)  # 27 copies: 4 sort tiles
    args = {"x": rng.standard_normal((9, 4)).astype(np.float32), "rowIdx": row, "expertIdx": expert, "activeNum": 5}
    compare_run(small_tile, reference, "MoeInitRouting", args, "transposed", "27 copies")


def test_gating_ranks_by_the_logits_as_the_reference(emulated: RocmBackend, reference: Backend) -> None:
    # rows where exp's rounding ties two close logits, ties, NaN / +Inf / -Inf rows (NaN probabilities)
    x = np.zeros((6, 8), np.float32)
    x[0, 3], x[0, 5] = 2.0**-52, 0.6722354
    x[1, :] = [0.5, 0.5, -0.0, 0.0, 0.25, 0.5, -1.0, 0.0]
    x[2, 1], x[3, 6], x[4, :], x[5, 2:4] = np.nan, np.inf, -np.inf, -np.inf
    for k in (3, 8):
        compare_run(emulated, reference, "MoeGatingTopKSoftmax", {"x": x, "k": k}, "contiguous", f"near ties k={k}")


def _refused(backend: Backend, op: str, args: dict) -> None:
    with pytest.raises(AclnnError) as err:
        eager.run(op, backend, **args)
    assert err.value.code == 161002, str(err.value)


def test_device_index_errors_are_reported_at_synchronisation(emulated: RocmBackend, reference: Backend) -> None:
    rng = np.random.default_rng(6)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    bad = {"selfRef": x, "indices": [np.array([0, 3])], "values": np.ones(4, np.float32)}
    _refused(emulated, "IndexPutImpl", {**bad, "accumulate": True, "unsafe": True})
    expert, row = routing_indices(rng, 4, 6, 2)
    row[1, 1] = row[0, 0]  # a repeated row index: not a permutation
    args = {"x": rng.standard_normal((4, 3)).astype(np.float32), "rowIdx": row, "expertIdx": expert, "activeNum": 4}
    for backend in (reference, emulated):
        _refused(backend, "MoeInitRouting", args)
    sample = next(iter(get_spec("MoeFinalizeRouting").samples(np.random.default_rng(0))))  # type: ignore[misc]
    broken = dict(sample.args)
    broken["expandedExpertIdx"] = np.asarray(broken["expandedExpertIdx"]).copy()
    broken["expandedExpertIdx"][0, 0] = 99
    for backend in (reference, emulated):
        _refused(backend, "MoeFinalizeRouting", broken)


def test_claimed_and_sources(tmp_path: Path) -> None:
    backend = RocmBackend(FakeProvider(), {"ACL_KERNEL_CACHE": str(tmp_path)})
    assert set(OPS) <= set(backend.capabilities().ops)
    assert "acc = acc || v;" in Apply(D.ACL_BOOL, 1, True).source()
    apply = Apply(D.ACL_FLOAT16, 2, True).source()
    assert "acl_f2h(acl_mv_odd(acc))" in apply and "if (*flag) return;" in apply
    assert "keys[s + 1] == key) continue;" in apply  # one thread per run of equal targets
    pos = Positions((D.ACL_INT32, D.ACL_INT64), 2).source()
    assert "if (v < 0) v += size1;" in pos and "stride[3][2]" in pos
    assert "exp(" in GatingSoftmax(D.ACL_BF16, 1).source()
    assert (
        "r = r + " in Finalize(D.ACL_FLOAT, True).source() and "r = r + " not in Finalize(D.ACL_FLOAT, False).source()
    )


@pytest.mark.parametrize("accumulate", [False, True])
def test_bool_mask_ranks_through_the_merge_path(small_tile: RocmBackend, reference: Backend, accumulate: bool) -> None:
    rng = np.random.default_rng(8)
    x = rng.standard_normal((7, 6, 3)).astype(np.float32)
    mask = rng.random((7, 6)) < 0.5  # 42 mask elements: 6 sort tiles of 8
    count = int(mask.sum())
    for values, note in ((rng.standard_normal((count, 3)), "a value per element"), (np.ones(3), "one row")):
        args = {"selfRef": x, "indices": [mask], "values": values.astype(np.float32), "accumulate": accumulate}
        for layout in ("contiguous", "transposed"):
            compare_run(small_tile, reference, "IndexPutImpl", {**args, "unsafe": True}, layout, note)


def test_bool_mask_count_mismatch_is_refused_at_synchronisation(emulated: RocmBackend, reference: Backend) -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    mask = np.array([True, False, True])
    for values in (np.ones((n, 4), np.float32) for n in (0, 3, 4)):  # the mask holds 2
        args = {"selfRef": x, "indices": [mask], "values": values, "accumulate": False, "unsafe": True}
        for backend in (reference, emulated):
            with pytest.raises(AclnnError) as err:
                eager.run("IndexPutImpl", backend, **args)
            assert err.value.code == 161002, backend.name
    none = np.zeros(0, np.int64)
    args = {"selfRef": x, "indices": [none, np.zeros(4, np.bool_)], "values": np.ones((3, 2), np.float32)}
    with pytest.raises(AclnnError) as err:  # an all-false mask has count 0, not 2
        eager.run("IndexPutImpl", emulated, **args, accumulate=True, unsafe=True)
    assert err.value.code == 161002


def test_bool_mask_beside_an_int_index_is_refused_by_name(emulated: RocmBackend) -> None:
    x = np.zeros((3, 4), np.float32)
    args = {"selfRef": x, "indices": [np.array([0]), np.array([True, False, True, True])], "values": np.float32(1)}
    with pytest.raises(AclnnError) as err:
        eager.run("IndexPutImpl", emulated, **args, accumulate=False, unsafe=True)
    assert err.value.code == 161002 and "bool mask" in err.value.message

"""GroupedMatmulV5 on the rocm backend above the provider seam, on a CPU.

The descriptor fill, group-list pass and tiled grouped GEMM kernels are built with g++
(``kernel_emulator.py``) and run on host memory, so every spec sample, multi-tile shapes whose tiles
straddle group boundaries, and bad device group lists (reported as 161002 at synchronisation) are
checked against the reference without a GPU. Launch counts and grid bounds are checked on the fake.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.errors import AclnnError
from acl_core.spec.ops import get_spec
from acl_rocm.backend import RocmBackend
from acl_rocm.kernels.grouped_matmul import FIELDS, FILL_GROUPS, GmmKernel, GmmPrep
from acl_rocm.ops.grouped_matmul import tiles
from tests.conftest import assert_close
from tests.rocm.fake_provider import FakeProvider

OP = "GroupedMatmulV5"


def _base(**extra: object) -> dict[str, object]:
    return {"splitItem": 0, "groupType": -1, "groupListType": 0, "actType": 0, **extra}


def _compare(backend: Backend, reference: Backend, args: dict, layout: str = "contiguous", note: str = "") -> None:
    expected = eager.run(OP, reference, **args)["out"]
    actual = eager.run(OP, backend, layout=layout, **args)["out"]
    assert len(actual) == len(expected)
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert a.dtype == e.dtype, note
        try:
            assert_close(a, e)
        except AssertionError as exc:
            raise AssertionError(f"{note} layout={layout} out[{i}]\n{exc}") from None


def test_every_sample_matches_the_reference_when_emulated(emulated: RocmBackend, reference: Backend) -> None:
    samples = list(get_spec(OP).samples(np.random.default_rng(5)))  # type: ignore[misc]
    for i, sample in enumerate(samples):
        _compare(emulated, reference, dict(sample.args), note=sample.note)
        if i % 3 == 0:
            _compare(emulated, reference, dict(sample.args), "transposed", sample.note)


def _arr(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.uniform(-1, 1, shape).astype(np.float32)


@pytest.mark.parametrize("list_type", [0, 1])
def test_tiles_straddling_groups_and_uncovered_rows(emulated: RocmBackend, reference: Backend, list_type: int) -> None:
    rng = np.random.default_rng(11)
    sizes = [0, 70, 1, 65]  # 136 of 150 rows: the last 14 stay as they were
    group_list = np.cumsum(sizes) if list_type == 0 else np.array(sizes)
    args = _base(
        x=[_arr(rng, 150, 40)],
        weight=[_arr(rng, 4, 40, 70)],
        biasOptional=[_arr(rng, 4, 70)],
        groupListOptional=group_list.astype(np.int64),
        splitItem=3,
        groupType=0,
        groupListType=list_type,
        out=[np.full((150, 70), 7.0, np.float32)],
    )
    _compare(emulated, reference, args, note="M groups")
    got = eager.run(OP, emulated, **args)["out"][0]
    assert np.all(got[136:] == 7.0)


def test_k_groups_over_several_tiles(emulated: RocmBackend, reference: Backend) -> None:
    rng = np.random.default_rng(12)
    args = _base(
        x=[_arr(rng, 70, 50)],
        weight=[_arr(rng, 50, 66)],
        groupListOptional=np.array([20, 0, 30], np.int64),
        splitItem=2,
        groupType=2,
        groupListType=1,
    )
    _compare(emulated, reference, args, note="K groups, counts")


BAD_LISTS = [
    (np.array([3, 2, 6], np.int64), 0, "decreasing cumulative list"),
    (np.array([3, 6, 7], np.int64), 0, "cumulative total beyond M"),
    (np.array([3, -1, 4], np.int64), 1, "negative count"),
    (np.array([3, 3, 1], np.int64), 1, "counts beyond M"),
]


@pytest.mark.parametrize(("group_list", "list_type", "note"), BAD_LISTS, ids=[n for *_, n in BAD_LISTS])
def test_bad_group_lists_fail_at_synchronisation(
    emulated: RocmBackend, reference: Backend, group_list: np.ndarray, list_type: int, note: str
) -> None:
    rng = np.random.default_rng(0)
    args = _base(
        x=[_arr(rng, 6, 4)],
        weight=[_arr(rng, 3, 4, 2)],
        groupListOptional=group_list,
        splitItem=2,
        groupType=0,
        groupListType=list_type,
    )
    for backend in (reference, emulated):
        with pytest.raises(AclnnError) as err:
            eager.run(OP, backend, **args)
        assert err.value.code == 161002, note


def test_a_group_list_must_match_the_x_list(emulated: RocmBackend, reference: Backend) -> None:
    rng = np.random.default_rng(0)
    args = _base(
        x=[_arr(rng, 2, 4), _arr(rng, 3, 4)],
        weight=[_arr(rng, 4, 5), _arr(rng, 4, 5)],
        groupListOptional=np.array([3, 2], np.int64),
        splitItem=2,
        groupType=0,
        groupListType=1,
    )
    for backend in (reference, emulated):
        with pytest.raises(AclnnError) as err:
            eager.run(OP, backend, **args)
        assert err.value.code == 161002
    _compare(emulated, reference, {**args, "groupListOptional": np.array([2, 3], np.int64)}, note="matching list")


def test_launches_and_grid_bound(tmp_path: Path) -> None:
    provider = FakeProvider()
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp_path)})
    backend.runtime.ensure_device(0)
    assert OP in backend.capabilities().ops  # its own kernels: claimed without a BLAS
    rng = np.random.default_rng(0)
    groups = 40
    args = _base(
        x=[_arr(rng, 200, 8)],
        weight=[_arr(rng, 8, 130) for _ in range(groups)],
        groupListOptional=np.full(groups, 5, np.int64),
        splitItem=2,
        groupType=0,
        groupListType=1,
    )
    provider.launches.clear()
    eager.run(OP, backend, **args)
    kinds = [launch.name.split("_")[2] for launch in provider.launches]
    assert kinds == ["fill"] * -(-groups // FILL_GROUPS) + ["prep", "gemm"]
    gemm = provider.launches[-1]
    assert gemm.grid == ((-(-200 // 64) + groups) * 3, 1, 1) and gemm.block == (256, 1, 1)
    fill = provider.launches[0]
    meta = np.frombuffer(fill.args[0], np.int64)
    assert meta[0] == FILL_GROUPS * len(FIELDS) and list(meta[1:3]) == [0, FILL_GROUPS]


def test_tile_count_and_sources() -> None:
    assert tiles(0, 5) == 0 and tiles(64, 64) == 1 and tiles(65, 64) == 2 and tiles(1, 129) == 3
    text = GmmKernel(D.ACL_BF16, None).source()
    assert "acl_b2f" in text and "acl_f2b" in text and "bias" not in text.split("extern")[1]
    assert "*flag = 1" in GmmPrep().source()

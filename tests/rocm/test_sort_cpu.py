"""Topk, Sort and Argsort above the provider seam, on the CPU.

The generated sort kernels run in the g++ kernel emulator (``kernel_emulator.py``) on host memory:
every sample of the three ops is compared exactly with the reference, contiguous and transposed; the
long-row path (tile sort, merge passes, emit) is exercised by shrinking the shared-memory tile to 8
elements. Key order, launch plans and the sources' structure are checked directly.
"""

from __future__ import annotations

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.spec.ops import get_spec
from acl_rocm.backend import RocmBackend
from acl_rocm.kernels.sort import TILE, MergePass, TileSort, key_function, key_type
from acl_rocm.ops import sort as sort_ops
from tests.rocm.fake_provider import FakeProvider


@pytest.fixture()
def small_tile(emulated: RocmBackend) -> RocmBackend:
    """The emulated backend with 8-element tiles, so rows longer than 8 take the merge path."""
    sorter = emulated.runners["sort"].sorter
    saved, sorter.tile = sorter.tile, 8
    yield emulated
    sorter.tile = saved


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> tuple[RocmBackend, FakeProvider]:
    provider = FakeProvider()
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp_path_factory.mktemp("kc"))})
    backend.runtime.ensure_device(0)
    return backend, provider


def _same(backend: Backend, reference: Backend, op: str, args: dict, layout: str, note: str) -> None:
    want = eager.run(op, reference, **args)
    got = eager.run(op, backend, layout=layout, **args)
    assert got.keys() == want.keys()
    for name, value in want.items():
        assert got[name].dtype == value.dtype and got[name].shape == value.shape, f"{op} [{note}] {name}"
        np.testing.assert_array_equal(got[name], value, err_msg=f"{op} [{note}] {layout} {name}")


@pytest.mark.parametrize("op", sort_ops.OPS)
def test_every_sample_matches_the_reference_when_emulated(emulated: RocmBackend, reference: Backend, op: str) -> None:
    samples = list(get_spec(op).samples(np.random.default_rng(2024)))  # type: ignore[misc]
    assert samples
    for sample in samples:
        for layout in ("contiguous", "transposed"):
            _same(emulated, reference, op, dict(sample.args), layout, sample.note)


def _special(rng: np.random.Generator, shape: tuple[int, int], dtype: type) -> np.ndarray:
    x = rng.integers(-3, 4, shape).astype(dtype)
    if np.dtype(dtype).kind == "f":
        x[0, 3], x[0, 20], x[1, 5], x[-1, 7], x[1, 9] = np.nan, np.nan, -0.0, np.inf, -np.inf
    return x


LONG: list[tuple[str, dict]] = [
    ("Sort", {"stable": True, "dim": 1, "descending": False}),
    ("Sort", {"stable": False, "dim": 1, "descending": True}),
    ("Argsort", {"dim": -1, "descending": True}),
    ("Argsort", {"dim": 1, "descending": False}),
    ("Topk", {"k": 1, "dim": 1, "largest": True, "sorted": True}),
    ("Topk", {"k": 1, "dim": 1, "largest": False, "sorted": True}),
    ("Topk", {"k": 37, "dim": 1, "largest": False, "sorted": True}),
    ("Topk", {"k": 9, "dim": 1, "largest": True, "sorted": False}),
]


@pytest.mark.parametrize(("op", "attrs"), LONG, ids=[f"{op}-{i}" for i, (op, _) in enumerate(LONG)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64], ids=["f32", "f16", "i64"])
def test_long_rows_take_the_merge_path(
    small_tile: RocmBackend, reference: Backend, op: str, attrs: dict, dtype: type
) -> None:
    rng = np.random.default_rng(5)
    x = _special(rng, (3, 37), dtype)  # 37 = 4 full tiles and a partial one: three merge passes
    for layout in ("contiguous", "transposed"):
        _same(small_tile, reference, op, {"self": x, **attrs}, layout, f"37-long rows {np.dtype(dtype)}")


def test_long_rows_along_dim_zero(small_tile: RocmBackend, reference: Backend) -> None:
    x = np.ascontiguousarray(_special(np.random.default_rng(6), (3, 64), np.float32).T)  # rows along dim 0
    _same(small_tile, reference, "Sort", {"self": x, "stable": True, "dim": 0, "descending": True}, "padded", "dim 0")
    _same(
        small_tile, reference, "Topk", {"self": x, "k": 64, "dim": 0, "largest": True, "sorted": True}, "transposed", ""
    )


def test_claimed_and_planned(fake: tuple[RocmBackend, FakeProvider]) -> None:
    backend, provider = fake
    assert {"Topk", "Sort", "Argsort"} <= set(backend.capabilities().ops)
    x = np.zeros((4, 100), np.float32)
    provider.launches.clear()
    eager.run("Sort", backend, self=x, stable=True, dim=1, descending=False)
    assert len(provider.launches) == 1 and "tiles of 2048 from tensor to outputs" in provider.launches[0].source
    assert provider.launches[0].grid[0] == 4 and provider.launches[0].block[0] == 64  # width 128: 64 threads
    provider.launches.clear()
    eager.run("Argsort", backend, self=np.zeros((2, 3 * TILE + 1), np.float32), dim=1, descending=False)
    names = [launch.source.split("// sort: ", 1)[1].split("\n", 1)[0] for launch in provider.launches]
    merge = "merge pass over unsigned int keys"
    assert names == [  # 4 tiles a row: runs of 2048 then 4096 merged
        "tiles of 2048 from tensor to temp, float32 ascending",
        merge,
        merge,
        "emit the first count of sorted float32 rows",
    ]


def test_too_long_rows_are_refused(fake: tuple[RocmBackend, FakeProvider]) -> None:
    backend, _ = fake
    with pytest.raises(Exception) as err:
        backend.runners["sort"].sorter.check_length("Sort", sort_ops.MAX_LENGTH + 1)
    assert getattr(err.value, "code", None) == 161002


def test_key_functions() -> None:
    assert key_type(D.ACL_DOUBLE) == key_type(D.ACL_INT64) == key_type(D.ACL_UINT64) == "unsigned long long"
    assert key_type(D.ACL_FLOAT16) == key_type(D.ACL_BOOL) == "unsigned int"
    ascending = key_function(D.ACL_FLOAT, False)
    assert "if (s != s) return 0xffffffffu;" in ascending and "return k;" in ascending
    descending = key_function(D.ACL_FLOAT, True)
    assert "if (s != s) return 0;" in descending and "return ~k;" in descending
    assert "if (s != s) return 0xffffffffu;" in key_function(D.ACL_FLOAT, True, nan_last=True)
    assert "0x7f80u" in key_function(D.ACL_BF16, False) and "0x7c00u" in key_function(D.ACL_FLOAT16, False)
    with pytest.raises(ValueError):
        key_function(D.ACL_COMPLEX64, False)


def test_source_structure() -> None:
    tile = TileSort(D.ACL_FLOAT16, True, 2, "tensor", "outputs", True).source()
    assert "__shared__ unsigned int skey[2048];" in tile and "__shared__ int sidx[2048];" in tile
    assert "struct Meta { long long n; long long shape[2]; long long stride[3][2]; };" in tile
    assert "__launch_bounds__(256)" in tile and "((const unsigned short*)src)" in tile
    merge = MergePass("unsigned long long").source()
    assert "in_idx[base + mid] < x" in merge and "if (partner >= length)" in merge

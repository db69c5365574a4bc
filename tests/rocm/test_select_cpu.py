"""Nonzero, NonzeroV2 and MaskedSelect above the provider seam, on a CPU: the compaction kernels run in the kernel
emulator with one position a thread per tile (a block's chunk is then 256 positions), so a few hundred elements
cross block boundaries. Each call is checked against the reference, the count included; the write-back is
checked through the C-shaped front end. ``tests/rocm/test_gpu_select.py`` runs realistic sizes on a GPU.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import acl_core
from acl_core import eager
from acl_core.backend import Backend, BackendRegistration
from acl_core.dtypes import DataType as D
from acl_core.errors import AclError
from acl_core.plugin import hookimpl
from acl_core.spec.ops.select import sparse
from acl_rocm.ops.select import DEFAULT_LOADS, LOADS_ENV
from tests.ops.select_writeback import nonzero_writeback

_RNG = np.random.default_rng(5)
_X = sparse(_RNG, (9, 70), D.ACL_FLOAT, 0.3)  # 630 positions: three blocks of 256

CASES: list[tuple[str, dict[str, Any]]] = [
    ("Nonzero", {"self": _X}),
    ("NonzeroV2", {"self": _X}),
    ("Nonzero", {"self": sparse(_RNG, (700,), D.ACL_BF16, 0.5)}),
    ("Nonzero", {"self": sparse(_RNG, (3, 4, 50), D.ACL_INT8, 0.2)[:, ::2]}),  # strided self
    ("Nonzero", {"self": np.zeros((600,), np.float32)}),  # nothing selected
    ("Nonzero", {"self": np.float32(3.0)}),  # 0-d: one row of no columns
    ("MaskedSelect", {"self": _X.astype(np.float64), "mask": _RNG.random((9, 70)) < 0.5}),
    ("MaskedSelect", {"self": np.arange(70, dtype=np.int16), "mask": (_RNG.random((9, 1)) < 0.6).astype(np.uint8)}),
    ("MaskedSelect", {"self": _X[:, :1] > 0, "mask": np.ones((1, 600), bool)}),  # both broadcast, bool values
]


@pytest.fixture(scope="module")
def small_tiles(emulated: Backend) -> Iterator[Backend]:
    """The emulated backend with a tile of 256 positions, so that each block takes one tile."""
    runner: Any = emulated.select  # type: ignore[attr-defined]
    runner.items = 1
    yield emulated
    runner.items = 8


@pytest.mark.parametrize(("op", "args"), CASES, ids=[f"{k}-{op}" for k, (op, _) in enumerate(CASES)])
def test_matches_the_reference(small_tiles: Backend, op: str, args: dict[str, Any]) -> None:
    expected = eager.run(op, "reference", **args)["out"]
    actual = eager.run(op, small_tiles, **args)["out"]
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    np.testing.assert_array_equal(actual, expected)


WHOLE_TILES: list[tuple[str, dict[str, Any]]] = [
    ("Nonzero", {"self": sparse(_RNG, (5000,), D.ACL_FLOAT, 0.3)}),  # 16-byte loads, a ragged last tile
    ("Nonzero", {"self": sparse(_RNG, (3, 41, 37), D.ACL_FLOAT16, 0.4)}),  # coordinates stepped across rows
    ("NonzeroV2", {"self": sparse(_RNG, (4100,), D.ACL_INT8, 0.5)}),  # 8-byte loads
    ("MaskedSelect", {"self": _RNG.random((2, 2100)), "mask": _RNG.random((2, 2100)) < 0.3}),
]


@pytest.mark.parametrize(("op", "args"), WHOLE_TILES, ids=[f"{k}-{op}" for k, (op, _) in enumerate(WHOLE_TILES)])
def test_whole_tiles_read_by_vector_loads_match_the_reference(
    emulated: Backend, op: str, args: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default 8 positions a thread under ``ACL_SELECT_LOADS=vec``: tiles inside the chunk take the vector loads,
    the last one the element path."""
    monkeypatch.setattr(emulated.select, "items", 8)  # type: ignore[attr-defined]  # small_tiles may have set 1
    monkeypatch.setattr(emulated, "environ", {**emulated.environ, LOADS_ENV: "vec"})  # type: ignore[attr-defined]
    sources: list[str] = []
    compile_ = emulated.function  # type: ignore[attr-defined]

    def recorded(source: str, *rest: Any, **kw: Any) -> Any:
        sources.append(source)
        return compile_(source, *rest, **kw)

    monkeypatch.setattr(emulated, "function", recorded)
    expected = eager.run(op, "reference", **args)["out"]
    actual = eager.run(op, emulated, **args)["out"]
    np.testing.assert_array_equal(actual, expected)
    passes = [s for s in sources if "compaction count" in s or "compaction scatter" in s]
    assert len(passes) == 2 and all("vec=True" in s and "AclVec<" in s for s in passes)


def test_element_loads_by_default_and_a_bad_setting_is_refused(
    emulated: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = WHOLE_TILES[0][1]
    monkeypatch.setattr(emulated, "environ", {k: v for k, v in emulated.environ.items() if k != LOADS_ENV})  # type: ignore[attr-defined]
    np.testing.assert_array_equal(
        eager.run("Nonzero", emulated, **args)["out"], eager.run("Nonzero", "reference", **args)["out"]
    )
    assert DEFAULT_LOADS == "element"
    monkeypatch.setattr(emulated, "environ", {**emulated.environ, LOADS_ENV: "wide"})  # type: ignore[attr-defined]
    with pytest.raises(AclError, match="ACL_SELECT_LOADS='wide'"):
        eager.run("Nonzero", emulated, **args)


class _Plugin:
    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    @hookimpl
    def acl_core_backends(self) -> list[BackendRegistration]:
        return [BackendRegistration("emulated-select", lambda: self.backend, priority=-100)]


def test_count_is_written_back_at_synchronisation(small_tiles: Backend) -> None:
    acl_core.reset_plugins()
    acl_core.register_plugin(_Plugin(small_tiles))
    try:
        before, after, rows = nonzero_writeback(small_tiles, _X, "emulated-select")
    finally:
        acl_core.reset_plugins()
    want = np.argwhere(_X)
    assert before == [_X.size, 2] and after == [len(want), 2]
    np.testing.assert_array_equal(rows, want)


def test_capture_is_refused(small_tiles: Backend) -> None:
    caps = small_tiles.capabilities()
    assert {"Nonzero", "NonzeroV2", "MaskedSelect"} <= set(caps.capture_refused_ops)


def test_phase_two_copies_nothing_and_synchronisation_reads_eight_bytes(
    small_tiles: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    from acl_core import aclnn

    provider: Any = small_tiles.provider  # type: ignore[attr-defined]
    rt = small_tiles.runtime
    x, out = eager.to_device(_X, small_tiles), eager.empty((_X.size, 2), D.ACL_INT64, small_tiles)
    copies: list[int] = []
    original = provider.memcpy

    def counted(dst: int, src: int, nbytes: int, *rest: Any) -> None:
        copies.append(nbytes)
        original(dst, src, nbytes, *rest)

    stream = rt.create_stream()
    acl_core.reset_plugins()
    acl_core.register_plugin(_Plugin(small_tiles))
    acl_core.use_backend("emulated-select")
    try:
        size, executor, ret = aclnn.aclnnNonzeroGetWorkspaceSize(x.tensor(), out.tensor())
        assert ret == 0 and size == 0
        monkeypatch.setattr(provider, "memcpy", counted)
        assert rt.view_writeback.pending(rt.stream(stream)) == 0
        assert aclnn.aclnnNonzero(0, 0, executor, stream) == 0
        assert copies == [] and rt.view_writeback.pending(rt.stream(stream)) == 1
        rt.synchronize_stream(stream)
        assert copies == [8] and out.tensor().view_dims == (int(np.count_nonzero(_X)), 2)
    finally:
        monkeypatch.undo()
        acl_core.reset_plugins()
        rt.destroy_stream(stream)
        x.free()
        out.free()

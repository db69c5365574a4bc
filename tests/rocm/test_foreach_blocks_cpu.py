"""ACL_FOREACH_BLOCKS on the fake provider: the grid each setting launches and the typed refusal of a bad one.

The values under each setting are the GPU tier's (tests/rocm/test_gpu_foreach.py, also on the CPU emulator).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from acl_core import eager
from acl_core.errors import AclError, AclErrorCode
from acl_rocm.backend import RocmBackend
from acl_rocm.kernels.foreach import BLOCK
from acl_rocm.ops.foreach import MAX_BLOCKS_PER_SLOT
from tests.rocm.fake_provider import FakeProvider

MEMBERS = 3
N = 300_000
"""Elements a member: 293 blocks of 256 threads x 4 float32 elements by default, more than the capped runs."""


def _add(tmp_path: Path, **env: str) -> tuple[RocmBackend, FakeProvider]:
    provider = FakeProvider()
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp_path), **env})
    backend.runtime.ensure_device(0)
    return backend, provider


def _run(backend: RocmBackend) -> None:
    lists = {k: [np.ones(N, np.float32) for _ in range(MEMBERS)] for k in ("x1", "x2")}
    eager.run("ForeachAddList", backend, **lists, alpha=np.ones(1, np.float32))


def test_blocks_a_slot_follow_the_setting(tmp_path: Path) -> None:
    backend, provider = _add(tmp_path, ACL_FOREACH_CONFIG="scan")  # one grid row: slots x blocks
    runner = backend.foreach  # type: ignore[attr-defined]
    assert runner.blocks_per_slot() == MAX_BLOCKS_PER_SLOT and runner.block_alternatives() == (128,)
    _run(backend)
    assert provider.launches[-1].grid[0] == MEMBERS * -(-N // (BLOCK * 4))
    runner.forced_blocks = 128
    _run(backend)
    assert provider.launches[-1].grid[0] == MEMBERS * 128
    runner.forced_blocks = None
    env_backend, env_provider = _add(tmp_path / "env", ACL_FOREACH_BLOCKS="7", ACL_FOREACH_CONFIG="scan")
    _run(env_backend)
    assert env_provider.launches[-1].grid[0] == MEMBERS * 7


@pytest.mark.parametrize("bad", ["0", "-3", "lots", "70000"])
def test_a_bad_setting_is_a_typed_error(tmp_path: Path, bad: str) -> None:
    backend, _ = _add(tmp_path, ACL_FOREACH_BLOCKS=bad)
    with pytest.raises(AclError, match="ACL_FOREACH_BLOCKS") as info:
        _run(backend)
    assert info.value.code == AclErrorCode.ACL_ERROR_INVALID_PARAM


def test_grid2d_launches_a_row_of_blocks_a_slot(tmp_path: Path) -> None:
    """ACL_FOREACH_CONFIG=grid2d: grid (blocks of the widest slot, slots); scan: one row of every slot's blocks."""
    backend, provider = _add(tmp_path, ACL_FOREACH_CONFIG="grid2d")
    _run(backend)
    assert provider.launches[-1].grid[:2] == (-(-N // (BLOCK * 4)), MEMBERS)
    runner = backend.foreach  # type: ignore[attr-defined]
    runner.forced_config = "scan"
    _run(backend)
    assert provider.launches[-1].grid[:2] == (MEMBERS * -(-N // (BLOCK * 4)), 1)
    runner.forced_config = "fastest"
    with pytest.raises(AclError, match="ACL_FOREACH_CONFIG") as info:
        _run(backend)
    assert info.value.code == AclErrorCode.ACL_ERROR_INVALID_PARAM

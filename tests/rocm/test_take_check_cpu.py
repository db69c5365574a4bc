"""ACL_TAKE_CHECK on the fake provider: ``fused`` (the default) gathers without a Check launch, ``vec`` checks
contiguous indices with 16-byte loads (strided ones through the Check launch); a bad setting is a typed error.

The values under each setting are the GPU tier's (tests/rocm/test_gpu_index_ops.py, also on the CPU emulator).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from acl_core import eager
from acl_core.dtypes import DataType as D
from acl_core.errors import AclnnError
from acl_rocm.backend import RocmBackend
from acl_rocm.kernels.ctypes_map import ctype
from acl_rocm.kernels.index_ops import CheckVec, TakeFlat
from tests.rocm.fake_provider import FakeProvider


def _take(tmp_path: Path, setting: str) -> list[str]:
    """The kernel names one Take launches under ``ACL_TAKE_CHECK=setting``."""
    provider = FakeProvider()
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp_path / setting), "ACL_TAKE_CHECK": setting})
    backend.runtime.ensure_device(0)
    x = np.arange(4096, dtype=np.float16)
    eager.run("Take", backend, self=x, index=np.arange(-2048, 2048, dtype=np.int64))
    return [launch.name for launch in provider.launches]


def test_fused_gathers_in_one_launch(tmp_path: Path) -> None:
    launched = _take(tmp_path, "launch")
    fused = _take(tmp_path, "fused")
    assert len(fused) == len(launched) - 1
    assert any(name.startswith("acl_mv_take_flat") for name in fused)
    assert TakeFlat(2, D.ACL_INT64, 1, "int", True).source().count("*flag = 1;") == 1
    assert "*flag = 1;" not in TakeFlat(2, D.ACL_INT64, 1, "int", False).source()
    # fused: no early return on the flag, so every good element is written whatever the thread order
    assert "if (*flag) return;" not in TakeFlat(2, D.ACL_INT64, 1, "int", True).source()
    assert "if (*flag) return;" in TakeFlat(2, D.ACL_INT64, 1, "int", False).source()


def test_the_default_checks_inside_the_gather(tmp_path: Path) -> None:
    """Unset, ACL_TAKE_CHECK is ``fused``: the one gather launch, no Check launch before it."""
    assert _take(tmp_path, "") == _take(tmp_path, "fused")
    assert len(_take(tmp_path, "")) == len(_take(tmp_path, "launch")) - 1


def test_a_bad_setting_is_refused(tmp_path: Path) -> None:
    with pytest.raises(AclnnError) as err:
        _take(tmp_path, "later")
    assert err.value.code == 161002


def test_vec_checks_contiguous_indices_with_16_byte_loads(tmp_path: Path) -> None:
    launched = _take(tmp_path, "launch")
    vec = _take(tmp_path, "vec")
    assert len(vec) == len(launched) == 2
    assert vec[0].startswith("acl_mv_check_vec") and not launched[0].startswith("acl_mv_check_vec")
    assert vec[1:] == launched[1:]
    for dtype, per in ((D.ACL_INT64, 2), (D.ACL_INT32, 4)):
        src = CheckVec(dtype).source()
        assert f"AclVec<{ctype(dtype).storage}, {per}>" in src and src.count("*flag = 1;") == 1


def test_vec_takes_the_check_launch_for_strided_indices(tmp_path: Path) -> None:
    provider = FakeProvider()
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp_path / "s"), "ACL_TAKE_CHECK": "vec"})
    backend.runtime.ensure_device(0)
    index = np.arange(64, dtype=np.int64).reshape(8, 8).T  # transposed: not contiguous
    eager.run("Take", backend, self=np.arange(64, dtype=np.float32), index=index, layout="transposed")
    names = [launch.name for launch in provider.launches]
    assert not any(name.startswith("acl_mv_check_vec") for name in names)

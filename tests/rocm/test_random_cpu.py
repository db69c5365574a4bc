"""The random family's kernel choices on the fake provider: the fill layout's default and ACL_RANDOM_NORMAL.

The values are the GPU tier's (tests/rocm/test_gpu_random.py, also on the CPU kernel emulator); here: which
kernel each setting compiles, and the typed refusal of an unknown setting.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from acl_core import eager
from acl_core.dtypes import DataType as D
from acl_core.errors import AclError, AclErrorCode
from acl_core.spec.ops.random import LAYOUT_ENV
from acl_rocm.backend import RocmBackend
from acl_rocm.kernels.random import NORMAL_TRIG, Fill
from tests.rocm.fake_provider import FakeProvider


def _backend(tmp_path: Path, **env: str) -> tuple[RocmBackend, FakeProvider]:
    provider = FakeProvider()
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp_path), **env})
    backend.runtime.ensure_device(0)
    return backend, provider


def _normal(backend: RocmBackend) -> None:
    eager.run("InplaceNormal", backend, selfRef=np.zeros(1000, np.float32), mean=0.0, std=1.0, seed=1, offset=0)


def test_fills_default_to_the_packed_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(LAYOUT_ENV, raising=False)
    backend, provider = _backend(tmp_path)
    _normal(backend)
    eager.run("InplaceUniform", backend, selfRef=np.zeros(1000, np.float32), seed=1, offset=0, **{"from": 0.0, "to": 1})
    assert Fill("normal", D.ACL_FLOAT, 1, "packed", "float32p").kernel_name in provider.compiled
    assert Fill("uniform", D.ACL_FLOAT, 1, "packed").kernel_name in provider.compiled
    monkeypatch.setenv(LAYOUT_ENV, "block")
    _normal(backend)
    assert Fill("normal", D.ACL_FLOAT, 1, "block").kernel_name in provider.compiled


def test_normal_trig_choices_compile_their_kernels_and_a_bad_one_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(LAYOUT_ENV, raising=False)
    assert list(NORMAL_TRIG) == ["float32p", "split", "sincos", "float32"]  # float32p: the default, measured fastest
    backend, provider = _backend(tmp_path)
    runner = backend.runners["random"]
    assert runner.normal_trig() == "float32p" and runner.trig_alternatives() == ("split", "sincos", "float32")
    _normal(backend)
    assert provider.compiled[-1] == Fill("normal", D.ACL_FLOAT, 1, "packed", "float32p").kernel_name
    runner.forced_trig = "split"
    _normal(backend)
    split = Fill("normal", D.ACL_FLOAT, 1, "packed", "split")
    assert provider.compiled[-1] == split.kernel_name
    assert "cos(th), sn = sin(th)" in split.source() and "sincos(" not in split.source()
    runner.forced_trig = "sincos"
    _normal(backend)
    both = Fill("normal", D.ACL_FLOAT, 1, "packed", "sincos")
    assert provider.compiled[-1] == both.kernel_name and "sincos(th, &sn, &cs);" in both.source()
    runner.forced_trig = None
    env_backend, env_provider = _backend(tmp_path / "env", ACL_RANDOM_NORMAL="sincos")
    _normal(env_backend)
    assert env_provider.compiled[-1] == both.kernel_name
    bad, _ = _backend(tmp_path / "bad", ACL_RANDOM_NORMAL="tan")
    with pytest.raises(AclError, match="ACL_RANDOM_NORMAL='tan'") as info:
        _normal(bad)
    assert info.value.code == AclErrorCode.ACL_ERROR_INVALID_PARAM
    with pytest.raises(ValueError, match="sine and cosine"):
        Fill("normal", D.ACL_FLOAT, 1, "packed", "tan").source()

"""The ops bench's forced-flash rows on the fake provider: one row per alternative block shape after the table's."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import pytest

import acl_core
from acl_core.backend import BackendRegistration
from acl_core.dtypes import DataType as D
from acl_core.plugin import hookimpl
from acl_rocm.backend import RocmBackend
from acl_rocm.kernels.attention_flash import config_for
from tests.rocm.fake_provider import FakeProvider

torch = pytest.importorskip("torch")


def test_forced_flash_rows_time_each_alternative_block_shape(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = RocmBackend(FakeProvider(blas=True), {"ACL_KERNEL_CACHE": str(tmp_path)})
    backend.runtime.ensure_device(0)

    class Plugin:
        @hookimpl
        def acl_core_backends(self) -> Sequence[BackendRegistration]:
            return (BackendRegistration("fakerocm", lambda: backend, priority=-100),)

    acl_core.reset_plugins()
    acl_core.register_plugin(Plugin())
    acl_core.use_backend("fakerocm")  # the bench's aclnn calls run on the process's backend
    try:
        _run_rows(backend, monkeypatch)
    finally:
        acl_core.reset_plugins()


def _run_rows(backend: RocmBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    from acl_tools.bench.ops import SIZES, Suite

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the fake GPU's torch side runs on the CPU
    shape = (1, 2, 128, 64)
    sizes = dataclasses.replace(SIZES["small"], attention=shape, forced_attention=(("flash", shape),), rounds=1)
    suite = Suite(backend, sizes, progress=lambda line: None, only={"FlashAttentionScore"})
    suite.device = torch.device("cpu")
    suite.attention()
    flash = backend.attention.flash  # type: ignore[attr-defined]
    rows = [case for case in suite.cases if "flash path forced" in case.note]
    assert [case.status for case in rows] == ["ok"] * (1 + len(flash.alternatives(64)))
    default = "wg2k64b2slx3"  # the fake GPU is an sm_90: the wgmma kernel is its default at D 64
    assert f"(block shape {default})" in rows[0].note
    table = str(config_for(64, D.ACL_BF16, 1))  # NVIDIA's mma.sync entry, timed as the first alternative
    assert table == "w4m1k64s2-efiu" and flash.alternatives(64)[0] == table and default not in flash.alternatives(64)
    assert [case.note.rsplit("=", 1)[1] for case in rows[1:]] == list(flash.alternatives(64))
    launched = [launch.name for launch in backend.provider.launches if launch.name.startswith("acl_flash")]  # type: ignore[attr-defined]
    for config in (default, *flash.alternatives(64)):
        kernel = config.replace("-", "_")  # the kernel's name spells the inner-loop flags' dash as "_"
        assert any(f"_{kernel}_" in name for name in launched), config
    assert flash.config_override == {} and backend.attention.path_override is None  # type: ignore[attr-defined]
    monkeypatch.setenv("ACL_BENCH_FLASH_CONFIGS", "64=wg2k128wop, wg2k128, 128=wg2k128w")  # these after the table's
    suite.cases.clear()
    suite.attention()
    rows = [case for case in suite.cases if "flash path forced" in case.note]
    assert [case.note.rsplit("=", 1)[1] for case in rows[1:]] == ["wg2k128wop", "wg2k128"]
    assert [case.status for case in rows] == ["ok"] * 3
    monkeypatch.setenv("ACL_BENCH_FLASH_CONFIGS", "64=wg2k64b2psl,64=wg4k64psl,64=wg1k64b4psl")  # issue 18's shapes
    suite.cases.clear()
    suite.attention()
    rows = [case for case in suite.cases if "flash path forced" in case.note]
    assert [case.note.rsplit("=", 1)[1] for case in rows[1:]] == ["wg2k64b2psl", "wg4k64psl", "wg1k64b4psl"]
    assert [case.status for case in rows] == ["ok"] * 4

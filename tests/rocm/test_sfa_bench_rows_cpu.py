"""The ops bench's SparseFlashAttention rows on the fake provider: the default row takes the block kernel, the
ACL_SFA_PATH=gemm row the GEMM path, and the backend's environ is restored after each."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

import acl_core
from acl_core.backend import BackendRegistration
from acl_core.plugin import hookimpl
from acl_rocm.backend import RocmBackend
from tests.rocm.fake_provider import FakeProvider

torch = pytest.importorskip("torch")


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RocmBackend]:
    backend = RocmBackend(FakeProvider(blas=True), {"ACL_KERNEL_CACHE": str(tmp_path)})
    backend.runtime.ensure_device(0)

    class Plugin:
        @hookimpl
        def acl_core_backends(self) -> list[BackendRegistration]:
            return [BackendRegistration("fakerocm", lambda: backend, priority=-100)]

    acl_core.reset_plugins()
    acl_core.register_plugin(Plugin())
    acl_core.use_backend("fakerocm")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the fake GPU's torch side runs on the CPU
    yield backend
    acl_core.reset_plugins()


def test_sparse_attention_rows_time_each_path(fake: RocmBackend) -> None:
    from acl_tools.bench.ops import SIZES, Suite

    sizes = dataclasses.replace(SIZES["small"], sparse=(2, 8, 32, 8, 256, 64), rounds=1)
    suite = Suite(fake, sizes, progress=lambda line: None, only={"SparseFlashAttention"})
    suite.device = torch.device("cpu")
    before = dict(fake.environ)
    launched = len(fake.provider.launches)  # type: ignore[attr-defined]
    suite.sparse_attention()  # type: ignore[attr-defined]
    rows = [(c.op, c.note, c.status) for c in suite.cases]  # type: ignore[attr-defined]
    assert rows == [
        ("SparseFlashAttention decode", "", "ok"),
        ("SparseFlashAttention decode", "ACL_SFA_PATH=gemm", "ok"),
    ]
    names = {launch.name.split("_")[2] for launch in fake.provider.launches[launched:]}  # type: ignore[attr-defined]
    assert {"gather", "softmax", "store", "attend"} <= names, names
    assert fake.provider.gemms  # type: ignore[attr-defined]
    assert dict(fake.environ) == before

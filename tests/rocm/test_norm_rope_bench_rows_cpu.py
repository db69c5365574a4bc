"""The ops bench's QkvRmsNormRopeCache rows on the fake provider: one row per ACL_QKV_ROPE_CONFIG choice at each
shape (two decode steps and a prefill), each forcing its choice on the runner while it runs and clearing it after."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

import acl_core
from acl_core.backend import BackendRegistration
from acl_core.plugin import hookimpl
from acl_rocm.backend import RocmBackend
from acl_rocm.ops.norm_rope_cache import CONFIGS
from tests.rocm.fake_provider import FakeProvider

torch = pytest.importorskip("torch")


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RocmBackend]:
    backend = RocmBackend(FakeProvider(blas=True), {"ACL_KERNEL_CACHE": str(tmp_path)})
    backend.runtime.ensure_device(0)

    class Plugin:
        @hookimpl
        def acl_core_backends(self) -> tuple[BackendRegistration, ...]:
            return (BackendRegistration("fakerocm", lambda: backend, priority=-100),)

    acl_core.reset_plugins()
    acl_core.register_plugin(Plugin())
    acl_core.use_backend("fakerocm")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the fake GPU's torch side runs on the CPU
    yield backend
    acl_core.reset_plugins()


def test_one_row_per_choice_and_shape(fake: RocmBackend) -> None:
    from acl_tools.bench import norm_rope_rows
    from acl_tools.bench.ops import SIZES, Suite

    sizes = dataclasses.replace(SIZES["small"], rounds=1, min_time=0.001)
    suite = Suite(fake, sizes, progress=lambda line: None, only={"QkvRmsNormRopeCache"})
    suite.device = torch.device("cpu")
    norm_rope_rows.run_cases(suite)
    rows = [(c.op, c.shape, c.status) for c in suite.cases]
    shapes = [f"{t} tok x 16/8/8 x 128" for t in (1, 8, 256)]
    nd = [("QkvRmsNormRopeCache PA_BNSD", s, "ok") for s in shapes[:2]]
    assert rows == [(f"QkvRmsNormRopeCache {c}", s, "ok") for s in shapes for c in CONFIGS] + nd
    assert fake.norm_rope_cache.forced is None  # type: ignore[attr-defined]
    names = " ".join(fake.provider.compiled)  # type: ignore[attr-defined]
    assert names.count("acl_qkv_norm_rope_") >= len(CONFIGS)

"""Fixtures of the HIP backend's tests: the live backend (GPU tests skip, with the reason, without one).

``ACL_ROCM_EMULATE=1`` hands the GPU tier a backend whose kernels run on the CPU (``kernel_emulator.py``:
g++, one fiber per GPU thread, host BLAS): slow, but it checks what a GPU-tier test asserts, and the
test itself, on a machine without a GPU.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import acl_core
from acl_core.backend import Backend, BackendRegistration
from acl_core.errors import BackendUnavailableError
from acl_core.plugin import hookimpl

UNDER_TEST = "rocm-under-test"
"""The plugin name :func:`rocm_under_test` registers the session's rocm backend (live or emulated) under."""


@pytest.fixture(scope="session")
def rocm() -> Backend:
    """The rocm backend on this machine; GPU tests are skipped, with the probe's reason, where it cannot run."""
    if os.environ.get("ACL_ROCM_EMULATE") == "1":
        return _emulated()
    try:
        backend = acl_core.get_backend("rocm")
    except BackendUnavailableError as exc:
        pytest.skip(f"rocm backend unavailable here: {exc.reason}")
    backend.runtime.ensure_device(0)
    return backend


@pytest.fixture(scope="session")
def reference() -> Backend:
    """The NumPy oracle."""
    return acl_core.get_backend("reference")


@pytest.fixture(scope="module")
def hopper(rocm: Backend) -> Backend:
    """The session's rocm backend where it can run wgmma (a live sm_90 device); skips elsewhere, saying why."""
    if os.environ.get("ACL_ROCM_EMULATE") == "1":
        pytest.skip("the CPU kernel emulator cannot run wgmma PTX (sm_90a only)")
    arch = rocm.properties.arch  # type: ignore[attr-defined]
    if arch != "sm_90":
        pytest.skip(f"wgmma needs an sm_90 device (sm_90a code); this one is {arch}")
    return rocm


@pytest.fixture
def movement_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Backend:
    """A rocm backend on the fake provider whose movement kernels run on the host model (``movement_model.py``)."""
    from tests.rocm.movement_model import model_backend

    return model_backend(tmp_path, monkeypatch)


@pytest.fixture(scope="module")
def emulated(tmp_path_factory: pytest.TempPathFactory) -> Backend:
    """A rocm backend whose kernels run on the CPU (``kernel_emulator.py``); one per test module."""
    from tests.rocm.kernel_emulator import emulated_backend

    return emulated_backend(tmp_path_factory.mktemp("kc"))


def _emulated() -> Backend:
    from tests.rocm.kernel_emulator import EmulatedProvider, emulated_backend

    cache = Path(tempfile.gettempdir()) / f"acl-rocm-emulated-cache-{os.getuid()}"
    return emulated_backend(cache, EmulatedProvider(blas=True))


class _UnderTest:
    """A plugin whose one backend is the session's rocm, so front ends reach the emulated one too."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    @hookimpl
    def acl_core_backends(self) -> list[BackendRegistration]:
        return [BackendRegistration(UNDER_TEST, lambda: self.backend, priority=-100)]


@pytest.fixture
def rocm_under_test(rocm: Backend) -> Iterator[str]:
    """``rocm`` registered as :data:`UNDER_TEST` for one test (front ends, the Qwen3 runner); plugins reset after."""
    acl_core.reset_plugins()
    acl_core.register_plugin(_UnderTest(rocm))
    yield UNDER_TEST
    acl_core.use_backend(None)
    acl_core.reset_plugins()


@pytest.fixture
def decode(rocm: Backend) -> Iterator[object]:
    """The backend's decode planner; its configuration restored to the environment's after the test."""
    planner = rocm.attention.decode  # type: ignore[attr-defined]
    yield planner
    planner.use_config(None)


@pytest.fixture
def bench_rocm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Backend]:
    """A rocm backend on the fake provider (with a BLAS) made the process's backend, and torch told a GPU is there
    (its side of a bench row then runs on the CPU): what the bench-row tests drive the ops suite with."""
    from acl_rocm.backend import RocmBackend
    from tests.rocm.fake_provider import FakeProvider

    torch = pytest.importorskip("torch")
    backend = RocmBackend(FakeProvider(blas=True), {"ACL_KERNEL_CACHE": str(tmp_path)})
    backend.runtime.ensure_device(0)

    class Plugin:
        @hookimpl
        def acl_core_backends(self) -> tuple[BackendRegistration, ...]:
            return (BackendRegistration("fakerocm", lambda: backend, priority=-100),)

    acl_core.reset_plugins()
    acl_core.register_plugin(Plugin())
    acl_core.use_backend("fakerocm")  # the bench's aclnn calls run on the process's backend
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    yield backend
    acl_core.reset_plugins()

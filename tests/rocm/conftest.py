"""Fixtures of the HIP backend's tests: the live backend (GPU tests skip, with the reason, without one)."""

from __future__ import annotations

import pytest

import acl_core
from acl_core.backend import Backend
from acl_core.errors import BackendUnavailableError


@pytest.fixture(scope="session")
def rocm() -> Backend:
    """The rocm backend on this machine; GPU tests are skipped, with the probe's reason, where it cannot run."""
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

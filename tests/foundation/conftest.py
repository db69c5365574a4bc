"""Fixtures of the adversarial phase-1 sweeps (test_adversarial_args.py, test_phase1_bounds.py)."""

from __future__ import annotations

import pytest

from acl_core.backend import Backend
from acl_core.plugin import get_backend
from acl_core.spec.ops import all_specs
from tests.foundation.adversarial import Baseline, baseline


@pytest.fixture(scope="module")
def backend() -> Backend:
    """The reference backend with its device opened (the sweeps' handles live on it)."""
    b = get_backend("reference")
    b.runtime.ensure_device()
    return b


@pytest.fixture(scope="module")
def baselines(backend: Backend) -> dict[str, Baseline]:
    """A valid phase-1 call of every operator that has one, by name."""
    found = {name: baseline(spec, backend) for name, spec in sorted(all_specs().items())}
    return {n: b for n, b in found.items() if b is not None}

"""ApplyAdamW and ApplyAdamWV2 above the provider seam, on the CPU kernel emulator.

Every sample runs contiguous, transposed and padded against the reference under the ops' accuracy
class; the kernel specialises on version, amsgrad, maximize and the geometry's rank.
"""

from __future__ import annotations

import numpy as np
import pytest

from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.spec.ops import get_spec
from acl_rocm.backend import RocmBackend
from acl_rocm.kernels.optim import AdamW
from acl_rocm.ops import optim
from tests.rocm.against_reference import compare_run


@pytest.mark.parametrize("op", optim.OPS)
def test_every_sample_matches_the_reference_when_emulated(emulated: RocmBackend, reference: Backend, op: str) -> None:
    samples = list(get_spec(op).samples(np.random.default_rng(2026)))  # type: ignore[misc]
    assert samples
    for sample in samples:
        for layout in ("contiguous", "transposed", "padded"):
            compare_run(emulated, reference, op, dict(sample.args), layout, sample.note)


def test_both_ops_are_claimed(emulated: RocmBackend) -> None:
    assert set(optim.OPS) <= set(emulated.capabilities().ops)


def test_sources_specialise_on_version_and_flags() -> None:
    v1 = AdamW(D.ACL_BF16, 1, amsgrad=True, maximize=False, ndim=1, scalar_dtypes=(D.ACL_FLOAT,) * 7).source()
    v2 = AdamW(D.ACL_FLOAT, 2, amsgrad=True, maximize=True, ndim=3, scalar_dtypes=(D.ACL_INT64,)).source()
    assert "beta1Power" in v1 and "pow(b1, t)" in v2
    assert "vmax[o_vmax] =" in v2 and "vmax[o_vmax] =" not in v1  # V1's maximum is an input only
    assert "const double g = -" in v2 and "const double g = -" not in v1
    assert "rest % m_.shape[d]" in v2 and "rest %" not in v1  # a 1-D geometry skips the unravel

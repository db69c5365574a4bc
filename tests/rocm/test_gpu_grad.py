"""The row backward ops (acl_core.spec.ops.grad) on the GPU, compared with the NumPy reference (GPU tier).

Every sample of every op the rocm backend claims here, contiguous and, every third one, as padded and
transposed views; then each op under its own conformance accuracy class through the suite's judge
(the composite / ulp bounds, not a loose tolerance), at shapes with several warps per row and more
rows than a block's threads. ``ACL_ROCM_EMULATE=1`` runs it on the CPU kernel emulator.
"""

from __future__ import annotations

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.spec.ops import all_specs, get_spec
from acl_rocm.ops import grad as grad_ops
from tests.conftest import assert_close
from tests.rocm.prefill import sentinel_outputs

pytestmark = pytest.mark.gpu

OPS = sorted(n for n, s in all_specs().items() if s.kernel_name in grad_ops.OPS)
REL = {np.dtype(np.float32): 2e-6, np.dtype(np.float16): 2e-3}


def _close(got: np.ndarray, value: np.ndarray, note: str) -> None:
    """Within the dtype's rounding of the result's largest magnitude (the gradients cancel: a relative
    check per element would demand more than a once-rounded result has where a term cancels)."""
    e = value.astype(np.float64)
    scale = float(np.max(np.abs(e[np.isfinite(e)]), initial=1.0))
    rel = REL.get(got.dtype, 1.6e-2)
    try:
        assert_close(got, value, atol=rel * scale, rtol=rel)
    except AssertionError as exc:
        raise AssertionError(f"{note}\n{exc}") from None


def _compare(rocm: Backend, reference: Backend, op: str, args: dict, layout: str, note: str) -> None:
    expected = eager.run(op, reference, layout="contiguous", **args)
    outs = sentinel_outputs(op, args, expected)
    actual = eager.run(op, rocm, layout=layout, **args, **outs)
    assert actual.keys() == expected.keys()
    for name, value in expected.items():
        assert actual[name].dtype == value.dtype, f"{op} {note}: {name}"
        _close(actual[name], value, f"{op} [{note}] layout={layout}: {name}")


@pytest.mark.parametrize("op", OPS)
def test_matches_reference(rocm: Backend, reference: Backend, op: str) -> None:
    samples = list(get_spec(op).samples(np.random.default_rng(2026)))  # type: ignore[misc]
    assert samples
    for i, sample in enumerate(samples):
        _compare(rocm, reference, op, dict(sample.args), "contiguous", sample.note)
        if i % 3 == 0:
            for layout in ("padded", "transposed"):
                _compare(rocm, reference, op, dict(sample.args), layout, sample.note)


def test_claimed_ops_are_in_the_capabilities(rocm: Backend) -> None:
    assert set(OPS) == set(grad_ops.OPS) and set(OPS) <= set(rocm.capabilities().ops)


@pytest.mark.parametrize("op", OPS)
def test_within_the_accuracy_class(rocm: Backend, op: str) -> None:
    """The quick conformance cases of each op (row tiers up to 4097 elements, special values) pass the suite's judge."""
    from acl_conformance.suite import Session

    report = Session(rocm, ops=op).run()
    failed = [o for o in report.outcomes if o.status == "failed"]
    assert not failed, "\n".join(f"{o.case}: {o.message}" for o in failed[:5])
    assert any(o.status == "passed" for o in report.outcomes)

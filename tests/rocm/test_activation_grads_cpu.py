"""GeluBackwardV2 (both approximations), LogSigmoidBackward, LogitGrad and HardswishBackwardV2 on the kernel emulator.

Their bodies are rows of the elementwise tables; a few samples of each (specials included) run under the op's
accuracy class. ``tests/rocm/test_gpu_elementwise.py`` runs every sample of every elementwise op on a GPU.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.spec.ops import get_spec
from tests.rocm.against_reference import class_problems


@pytest.mark.parametrize("op", ["GeluBackwardV2", "LogSigmoidBackward", "LogitGrad", "HardswishBackwardV2"])
def test_samples_match_the_reference(emulated: Backend, op: str) -> None:
    samples = list(get_spec(op).samples(np.random.default_rng(3)))  # type: ignore[misc]
    picked = [s for s in samples if all(np.size(v) <= 64 for v in s.args.values() if isinstance(v, np.ndarray))]
    for sample in picked[::5]:
        args: dict[str, Any] = dict(sample.args)
        expected = eager.run(op, "reference", **args)
        problems = class_problems(op, args, eager.run(op, emulated, **args), expected)
        assert not problems, f"{op} {sample.note}: " + "; ".join(p.message for p in problems)


def test_the_tanh_approximation_is_its_own_body(emulated: Backend) -> None:
    x = np.linspace(-4, 4, 17).astype(np.float32)
    g = np.ones_like(x)
    none, tanh = (
        eager.run("GeluBackwardV2", emulated, gradOutput=g, self=x, approximate=a)["gradInput"]
        for a in ("none", "tanh")
    )
    assert not np.array_equal(none, tanh)
    for a, got in (("none", none), ("tanh", tanh)):
        want = eager.run("GeluBackwardV2", "reference", gradOutput=g, self=x, approximate=a)["gradInput"]
        np.testing.assert_allclose(got, want, rtol=2e-7, atol=1e-7)

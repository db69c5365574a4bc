"""Operators write only inside their outputs' views: the guard catches any other write."""

from __future__ import annotations

import numpy as np
import pytest

import acl_core
from acl_core import eager
from acl_core.backend import Launch
from acl_core.spec.ops import all_specs


@pytest.mark.parametrize("name", sorted(all_specs()))
def test_reference_kernels_stay_inside_their_outputs(name: str) -> None:
    spec = all_specs()[name]
    samples = list(spec.samples(np.random.default_rng(7))) if spec.samples else []
    assert samples, f"{name} declares no conformance samples"
    for sample in samples[:2]:
        eager.run(name, "reference", guard=True, layout="padded", op_args=sample.args)


def test_a_stray_write_is_caught() -> None:
    backend = acl_core.get_backend("reference")
    original = backend.kernels["Abs"]

    def stray(launch: Launch) -> None:
        original(launch)
        _, end = launch.args["out"].byte_span()
        backend.driver.device_bytes(end, 1)[0] ^= 0xFF  # one byte past the view

    backend._kernels["Abs"] = stray  # type: ignore[attr-defined]
    try:
        with pytest.raises(eager.OutOfBoundsWrite, match="outside its view"):
            eager.run("Abs", "reference", self=np.ones((2, 3), np.float32), guard=True)
    finally:
        backend._kernels["Abs"] = original  # type: ignore[attr-defined]


def test_a_write_into_an_input_is_caught() -> None:
    backend = acl_core.get_backend("reference")
    original = backend.kernels["Neg"]

    def clobber(launch: Launch) -> None:
        original(launch)
        start, _ = launch.args["self"].byte_span()
        backend.driver.device_bytes(start, 1)[0] ^= 0xFF

    backend._kernels["Neg"] = clobber  # type: ignore[attr-defined]
    try:
        with pytest.raises(eager.OutOfBoundsWrite, match="input self"):
            eager.run("Neg", "reference", self=np.ones(4, np.float32), guard=True)
    finally:
        backend._kernels["Neg"] = original  # type: ignore[attr-defined]

"""Padding on the rocm backend above the provider seam, on a CPU: the kernels built with g++ and run on host memory.

Spec samples are compared with the reference under the op's accuracy class (forward exact, backward a
reduction), contiguous and, for every other sample, under a non-contiguous layout. To keep the g++ builds
few, each op runs its float32 samples only (one build per mode, direction and rank); the other dtypes are
the same template with another element type, compiled by the nvcc preflight and run by the GPU tier.
"""

from __future__ import annotations

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.padding import BY_NAME
from acl_rocm.backend import RocmBackend
from acl_rocm.kernels.padding import MODES, PadKernel
from tests.rocm.against_reference import assert_matches_reference


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_samples_match_the_reference_when_emulated(emulated: RocmBackend, reference: Backend, name: str) -> None:
    spec = get_spec(name)
    assert spec.samples is not None
    samples = [s for s in spec.samples(np.random.default_rng(3)) if np.asarray(s.args["self"]).dtype == np.float32]
    assert samples
    for i, sample in enumerate(samples):
        assert_matches_reference(emulated, reference, name, dict(sample.args), "contiguous", sample.note)
        if i % 2 == 0:
            layout = ("transposed", "padded")[(i // 2) % 2]
            assert_matches_reference(emulated, reference, name, dict(sample.args), layout, sample.note)


def test_one_template_generates_every_mode_direction_and_rank() -> None:
    names = set()
    for mode in MODES:
        for backward in (False, True):
            for spatial in (1, 2, 3):
                k = PadKernel(mode, backward, spatial, D.ACL_BF16, "int")
                src = k.source()
                assert k.kernel_name in src and "atomic" not in src  # backward ops gather: no atomics
                names.add(k.kernel_name)
    assert len(names) == 18
    with pytest.raises(ValueError):
        PadKernel("constant", False, 2, D.ACL_FLOAT, "int")


@pytest.mark.parametrize(
    ("op", "x", "padding"),
    [
        ("ReplicationPad1d", np.array([[np.iinfo(np.int64).min, 5, np.iinfo(np.int64).max]], np.int64), [2, 2]),
        ("ReflectionPad2d", np.array([[[True, False, False], [False, True, True]]]), [2, 1, 1, 0]),
    ],
    ids=["int64 extremes", "bool"],
)
def test_forward_copies_other_element_sizes_bit_exactly(
    emulated: RocmBackend, reference: Backend, op: str, x: np.ndarray, padding: list[int]
) -> None:
    got = eager.run(op, emulated, self=x, padding=padding)["out"]
    np.testing.assert_array_equal(got, eager.run(op, reference, self=x, padding=padding)["out"])

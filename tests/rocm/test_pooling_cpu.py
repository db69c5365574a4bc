"""Pooling on the rocm backend above the provider seam, on a CPU: the kernels built with g++ and run on host memory.

Spec samples are compared with the reference under the op's accuracy class (the suite's own comparison:
contiguous, and every third sample under a non-contiguous layout; max pools' values and indices exactly).
The 2-D kernel-window ops and MaxPool (integer dtypes too) run every sample, so every dtype; the others
(the same template, or the reduction family's row kernel for the global pools) run their float32 samples
only: each further dtype is another g++ build of the same code, and the nvcc preflight compiles them all.
"""

from __future__ import annotations

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.pooling import BY_NAME, GLOBAL
from acl_rocm.backend import RocmBackend
from acl_rocm.kernels.pooling import PoolKernel
from tests.rocm.against_reference import assert_matches_reference

EVERY_DTYPE = frozenset(
    {"AvgPool2d", "AvgPool2dBackward", "MaxPool2dWithIndices", "MaxPool2dWithIndicesBackward", "MaxPool"}
)


@pytest.mark.parametrize("name", [*sorted(BY_NAME), *sorted(GLOBAL), "MaxPool"])
def test_samples_match_the_reference_when_emulated(emulated: RocmBackend, reference: Backend, name: str) -> None:
    spec = get_spec(name)
    assert spec.samples is not None
    samples = list(spec.samples(np.random.default_rng(3)))
    if name not in EVERY_DTYPE:
        samples = [s for s in samples if np.asarray(s.args["self"]).dtype == np.float32]
    assert samples
    for i, sample in enumerate(samples):
        assert_matches_reference(emulated, reference, name, dict(sample.args), "contiguous", sample.note)
        if i % 3 == 0:
            layout = ("transposed", "padded")[i % 2]
            assert_matches_reference(emulated, reference, name, dict(sample.args), layout, sample.note)


def test_max_pool_values_and_indices_are_bit_exact_with_ties_and_nan(emulated: RocmBackend) -> None:
    x = np.array([[[[1, 3, 3, 0], [3, 0, 2, 2], [np.nan, 1, np.nan, -np.inf], [-np.inf, -np.inf, 5, 5]]]], np.float32)
    args = {"self": x, "kernelSize": [2], "stride": [1], "padding": [1], "dilation": [1], "ceilMode": True}
    want = eager.run("MaxPool2dWithIndices", "reference", **args)
    got = eager.run("MaxPool2dWithIndices", emulated, **args)
    np.testing.assert_array_equal(got["indices"], want["indices"])
    np.testing.assert_array_equal(got["out"], want["out"])


def test_one_template_generates_every_mode_and_rank() -> None:
    from acl_core.dtypes import DataType as D

    names = set()
    for mode in ("avg", "max", "avg_backward", "max_backward"):
        for spatial in (2, 3):
            for adaptive in (False, True):
                indices = D.ACL_INT64 if mode.startswith("max") else None
                k = PoolKernel(mode, spatial, D.ACL_BF16, "int", indices, adaptive=adaptive)
                src = k.source()
                assert k.kernel_name in src and "atomic" not in src  # backward ops gather: no atomics
                names.add(k.kernel_name)
    assert len(names) == 16
    with pytest.raises(ValueError):
        PoolKernel("min", 2, D.ACL_FLOAT, "int")

"""BatchNorm's backward ops on the rocm backend above the provider seam, on a CPU.

The per-channel sums, finish and apply kernels are built with g++ (``kernel_emulator.py``) and run on
host memory; every spec sample is compared with the reference under the op's accuracy class, some in a
strided layout.
"""

from __future__ import annotations

import numpy as np
import pytest

from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.spec.ops import get_spec
from acl_rocm.kernels.batch_norm_grad import Apply, Finish
from tests.rocm.against_reference import assert_matches_reference
from tests.rocm.test_convolution_cpu import emulated  # noqa: F401 - the fixture

OPS = ("BatchNormBackward", "BatchNormReduceBackward", "BatchNormElemtBackward")


@pytest.mark.parametrize("op", OPS)
def test_every_sample_matches_the_reference_when_emulated(emulated, reference: Backend, op: str) -> None:  # noqa: F811
    backend, _ = emulated
    assert op in backend.capabilities().ops
    for i, sample in enumerate(get_spec(op).samples(np.random.default_rng(7))):  # type: ignore[misc]
        layout = ("contiguous", "transposed", "padded")[i % 3]
        assert_matches_reference(backend, reference, op, dict(sample.args), layout, sample.note)


def test_inference_apply_reads_no_input() -> None:
    assert " x," not in Apply(D.ACL_BF16, D.ACL_BF16, 4, "int", centred=False).source().split("extern")[-1]
    assert "x[at_x]" in Apply(D.ACL_BF16, D.ACL_BF16, 4, "int").source()


def test_finish_sums_the_counter_only_when_given() -> None:
    common = dict(sums=None, mean=None, invstd_kind="invstd", invstd=D.ACL_FLOAT, weight=None, counter_dims=1)
    outputs = (None, None, D.ACL_FLOAT, None)
    with_counter = Finish(**common, counter=D.ACL_INT32, outputs=outputs, coefficients=True, training=True,
                          index_type="int")  # fmt: skip
    without = Finish(**common, counter=None, outputs=outputs, coefficients=True, training=True, index_type="int")
    assert "count += " in with_counter.source() and "count = count_value" in without.source()


@pytest.mark.parametrize("op", ["BatchNormBackward", "BatchNormReduceBackward"])
def test_split_channel_sums_match_the_reference(emulated, reference: Backend, op: str) -> None:  # noqa: F811
    backend, _ = emulated
    backend.batch_norm_grad.split_elements = 8  # several blocks a channel: partial sums added by the finish
    assert backend.batch_norm_grad.splits(3, 120) > 1
    sample = next(iter(get_spec(op).samples(np.random.default_rng(3))))  # type: ignore[misc]
    assert_matches_reference(backend, reference, op, dict(sample.args), "padded", sample.note)

"""BatchNorm's backward ops on the GPU against the reference under their accuracy classes: every sample, and
realistic, split-crossing shapes in every claimed dtype."""

from __future__ import annotations

import numpy as np
import pytest

from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.spec.ops.batch_norm_grad import bn_case, elemt_case, reduce_case
from tests.rocm.against_reference import (
    assert_errors_match_reference,
    assert_every_sample_matches,
    assert_matches_reference,
)

pytestmark = pytest.mark.gpu
OPS = ("BatchNormBackward", "BatchNormReduceBackward", "BatchNormElemtBackward")
DTYPES = (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16)
SHAPES = [(32, 64, 28, 28), (8, 256, 14, 14), (256, 1024), (4, 32, 8, 16, 16), (3, 5, 1001)]


@pytest.mark.parametrize("op", OPS)
def test_samples_match_reference(rocm: Backend, reference: Backend, op: str) -> None:
    assert_every_sample_matches(rocm, reference, op)


@pytest.mark.parametrize("op", OPS)
def test_errors_match_reference(rocm: Backend, reference: Backend, op: str) -> None:
    assert_errors_match_reference(rocm, reference, op)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.short)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_backward_realistic(rocm: Backend, reference: Backend, shape, dtype: D, training: bool) -> None:
    args = bn_case(np.random.default_rng(1), shape, dtype, training, stat_dt=D.ACL_FLOAT)
    assert_matches_reference(rocm, reference, "BatchNormBackward", args, "contiguous", f"{shape} {training}")


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.short)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_sync_pair_realistic(rocm: Backend, reference: Backend, shape, dtype: D) -> None:
    rng = np.random.default_rng(2)
    assert_matches_reference(rocm, reference, "BatchNormReduceBackward", reduce_case(rng, shape, dtype), "padded", "")
    args = elemt_case(rng, shape, dtype, counts=8)
    assert_matches_reference(rocm, reference, "BatchNormElemtBackward", args, "transposed", str(shape))

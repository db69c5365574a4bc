"""The reference's Nonzero, NonzeroV2 and MaskedSelect (acl_core.spec.ops.select) against torch (CPU), and the view
shape each writes back at synchronisation."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from acl_core import acl, aclnn, eager
from acl_core.dtypes import DataType as D
from acl_core.errors import RtErrorCode
from acl_core.plugin import get_backend
from acl_core.spec.ops import get_spec, select
from tests.ops.select_writeback import nonzero_writeback
from tests.ops.torch_ref import check_samples_and_errors, ref, to_numpy, to_torch

TORCHLESS = {D.ACL_UINT16, D.ACL_UINT32, D.ACL_UINT64}
"""Dtypes whose torch CPU nonzero / masked_select is missing: compared through an int64 copy (same zeros)."""


def _torch(x: np.ndarray, dt: D) -> torch.Tensor:
    if dt in TORCHLESS:
        return torch.from_numpy(x.astype(np.int64))
    return to_torch(x).reshape(x.shape)  # to_torch makes a 0-d array 1-d


@pytest.mark.parametrize("dt", sorted(select.NONZERO_DTYPES, key=int), ids=lambda d: d.short)
@pytest.mark.parametrize("shape", [(3, 5), (2, 3, 4), (), (7,), (0, 3)], ids=str)
def test_nonzero_matches_torch(dt: D, shape: tuple[int, ...]) -> None:
    x = select.sparse(np.random.default_rng(1), shape, dt, 0.4)
    got = ref("Nonzero", self=x)["out"]
    want = torch.nonzero(_torch(x, dt)).numpy()
    assert got.dtype == np.int64 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(ref("NonzeroV2", self=x)["out"], want.T)


@pytest.mark.parametrize("dt", sorted(select.MASKED_DTYPES, key=int), ids=lambda d: d.short)
def test_masked_select_matches_torch(dt: D) -> None:
    rng = np.random.default_rng(2)
    x = select.sparse(rng, (2, 3, 4), dt, 0.7)
    for mask in (rng.random((3, 1)) < 0.5, (rng.random((2, 3, 4)) < 0.5).astype(np.uint8)):
        got = ref("MaskedSelect", self=x, mask=mask)["out"]
        want = to_numpy(torch.masked_select(_torch(x, dt), torch.from_numpy(mask.astype(bool))))
        assert got.dtype == x.dtype
        np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))


def test_masked_select_broadcasts_self_too() -> None:
    x = np.arange(3, dtype=np.float32).reshape(3, 1)
    mask = np.array([[True, False, True, True]])
    got = ref("MaskedSelect", self=x, mask=mask)["out"]
    np.testing.assert_array_equal(got, torch.masked_select(torch.from_numpy(x), torch.from_numpy(mask)).numpy())


def test_nan_counts_and_negative_zero_does_not() -> None:
    x = np.array([0.0, -0.0, np.nan, 1.0, -np.inf], np.float32)
    np.testing.assert_array_equal(ref("Nonzero", self=x)["out"], [[2], [3], [4]])


@pytest.mark.parametrize("op", [s.name for s in select.SPECS])
def test_samples_and_errors(op: str) -> None:
    check_samples_and_errors(get_spec(op))


def test_view_shape_is_maximal_until_synchronisation_then_written_back() -> None:
    x = np.array([[0, 3, 0], [5, 0, 0]], np.int32)
    before, after, rows = nonzero_writeback(get_backend("reference"), x)
    assert before == [6, 2] and after == [2, 2]
    np.testing.assert_array_equal(rows, [[0, 1], [1, 0]])


def test_an_out_shrunk_by_a_write_back_is_refused_next_time() -> None:
    x = np.array([1, 0, 2], np.float32)
    src, out = eager.to_device(x, "reference"), eager.empty((3, 1), D.ACL_INT64, "reference")
    try:
        t = out.tensor()
        size, executor, ret = aclnn.aclnnNonzeroGetWorkspaceSize(src.tensor(), t)
        assert ret == 0 and aclnn.aclnnNonzero(0, size, executor, None) == 0
        get_backend("reference").runtime.synchronize_device()
        assert aclnn.aclGetViewShape(t)[0] == [2, 1]
        assert aclnn.aclnnNonzeroGetWorkspaceSize(src.tensor(), t)[2] == 161002
    finally:
        src.free()
        out.free()


def test_capture_is_refused_with_the_capture_code() -> None:
    assert acl.init() in (0, 100002)
    assert acl.rt.set_device(0) == 0
    caps = get_backend("reference").capabilities()
    assert {"Nonzero", "NonzeroV2", "MaskedSelect"} <= set(caps.capture_refused_ops)
    x, out = eager.to_device(np.ones(4, np.float32), "reference"), eager.empty((4, 1), D.ACL_INT64, "reference")
    stream, _ = acl.rt.create_stream()
    try:
        size, executor, ret = aclnn.aclnnNonzeroGetWorkspaceSize(x.tensor(), out.tensor())
        assert ret == 0
        assert acl.mdl.ri_capture_begin(stream, 2) == 0
        code: Any = aclnn.aclnnNonzero(0, size, executor, stream)
        assert code == RtErrorCode.ACL_ERROR_RT_CAPTURE_MODE_BLOCK_ASYNC
        _, ret = acl.mdl.ri_capture_end(stream)
        assert ret == RtErrorCode.ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED
    finally:
        acl.rt.destroy_stream(stream)
        x.free()
        out.free()

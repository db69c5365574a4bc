"""aclCreateTensor's checks and the host-side argument objects."""

from __future__ import annotations

import numpy as np
import pytest

from acl_core import aclnn
from acl_core.dtypes import DataType as D
from acl_core.errors import AclnnError
from acl_core.formats import Format as F
from acl_core.tensor import AclScalar, AclTensor, AclTensorList, contiguous_strides

ADDR = 0x4000_0000_0000_0000


def test_contiguous_strides() -> None:
    assert contiguous_strides((2, 3, 4)) == (12, 4, 1)
    assert contiguous_strides(()) == ()
    assert contiguous_strides((3, 0, 2)) == (2, 2, 1)


def test_view_inside_storage_is_accepted() -> None:
    t = AclTensor.create((2, 4), D.ACL_FLOAT, (1, 2), 0, F.ACL_FORMAT_ND, (4, 2), ADDR)  # a transpose
    assert t.numel == 8 and not t.is_contiguous
    assert t.byte_span() == (ADDR, ADDR + 32)
    offset_view = AclTensor.create((2,), D.ACL_FLOAT16, (3,), 2, F.ACL_FORMAT_ND, (6,), ADDR)
    assert offset_view.byte_span() == (ADDR + 4, ADDR + 12)


@pytest.mark.parametrize(
    ("dims", "strides", "offset", "storage", "fragment"),
    [
        ((2, 4), (4, 1), 1, (8,), "outside storage"),
        ((3,), (-1,), 0, (3,), "negative stride"),
        ((-1,), (1,), 0, (3,), "negative dimension"),
        ((2,), (1,), -1, (3,), "negative offset"),
        ((1,) * 9, None, 0, (1,), "rank 9"),
        ((2, 2), (1,), 0, (4,), "strides given"),
    ],
)
def test_bad_views_are_refused(dims: tuple, strides: tuple | None, offset: int, storage: tuple, fragment: str) -> None:
    with pytest.raises(AclnnError) as exc:
        AclTensor.create(dims, D.ACL_FLOAT, strides, offset, F.ACL_FORMAT_ND, storage, ADDR)
    assert exc.value.code == 161002 and fragment in exc.value.message


def test_empty_views_need_no_storage() -> None:
    t = AclTensor.create((0, 5), D.ACL_FLOAT, None, 0, F.ACL_FORMAT_ND, (0,), 0)
    assert t.numel == 0 and t.byte_span() == (0, 0)


def test_packed_types_count_bytes_by_nibbles() -> None:
    t = AclTensor.create((5,), D.ACL_INT4, None, 0, F.ACL_FORMAT_ND, (5,), ADDR)
    assert t.byte_span() == (ADDR, ADDR + 3)


def test_c_front_end_returns_handle_or_none_and_records_the_message() -> None:
    t = aclnn.aclCreateTensor([2, 3], 0, None, 0, 2, [2, 3], ADDR)
    assert isinstance(t, AclTensor)
    assert aclnn.aclGetViewShape(t) == ([2, 3], 0)
    assert aclnn.aclGetViewStrides(t) == ([3, 1], 0)
    assert aclnn.aclGetDataType(t) == (0, 0) and aclnn.aclGetFormat(t) == (2, 0)
    assert aclnn.aclSetRawTensorAddr(t, ADDR + 64) == 0 and aclnn.aclGetRawTensorAddr(t) == (ADDR + 64, 0)
    assert aclnn.aclCreateTensor([2, 3], 0, [3, 1], 5, 2, [6], ADDR) is None
    assert "outside storage" in aclnn.aclGetRecentErrMsg()
    assert aclnn.aclCreateTensor([2], 99, None, 0, 2, [2], ADDR) is None
    assert aclnn.aclDestroyTensor(t) == 0
    assert aclnn.aclDestroyTensor(t) == 161002
    assert aclnn.aclDestroyTensor(None) == 161001


def test_scalars_are_converted_to_their_type() -> None:
    assert AclScalar.create(2.7, D.ACL_INT32).value == 2
    assert AclScalar.create(0.1, D.ACL_FLOAT).value == float(np.float32(0.1))
    assert AclScalar.create(1, D.ACL_BOOL).value is True
    assert aclnn.aclCreateScalar("x", 0) is None
    assert aclnn.aclCreateScalar(1.0, int(D.ACL_STRING)) is None


def test_arrays_and_lists() -> None:
    ia = aclnn.aclCreateIntArray([1, -2, 3])
    assert aclnn.aclGetIntArraySize(ia) == (3, 0)
    assert aclnn.aclCreateIntArray([2**63]) is None
    fa = aclnn.aclCreateFloatArray([0.1])
    assert fa is not None and fa.values == (float(np.float32(0.1)),)
    ba = aclnn.aclCreateBoolArray([1, 0])
    assert ba is not None and ba.values == (True, False)
    t1 = aclnn.aclCreateTensor([2], 0, None, 0, 2, [2], ADDR)
    t2 = aclnn.aclCreateTensor([2], 0, None, 0, 2, [2], ADDR + 64)
    tl = aclnn.aclCreateTensorList([t1, t2])
    assert isinstance(tl, AclTensorList) and aclnn.aclGetTensorListSize(tl) == (2, 0)
    assert aclnn.aclCreateTensorList([t1, None]) is None
    assert aclnn.aclDestroyTensorList(tl) == 0
    assert t1.destroyed and t2.destroyed  # the list owns its tensors
    s = aclnn.aclCreateScalarList([aclnn.aclCreateScalar(1, 9)])
    assert aclnn.aclGetScalarListSize(s) == (1, 0) and aclnn.aclDestroyScalarList(s) == 0


def test_to_device_honours_an_explicit_float32_dtype() -> None:
    """ACL_FLOAT is enum value 0: a falsy dtype must still win over the array's own (float64 here)."""
    from acl_core import eager

    da = eager.to_device(np.array([1.5, -2.0, 3.25]), "reference", dtype=D.ACL_FLOAT)
    assert da.dtype == D.ACL_FLOAT
    np.testing.assert_array_equal(da.numpy(), np.array([1.5, -2.0, 3.25], np.float32))

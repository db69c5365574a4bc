"""DataType, Format and the result codes carry CANN's exact numbers."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from acl_core import errors
from acl_core.dtypes import DataType, from_numpy, storage_nbytes
from acl_core.errors import AclError, AclErrorCode, AclnnStatus, HcclResult, RtErrorCode, code_name
from acl_core.formats import Format


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ACL_DT_UNDEFINED", -1),
        ("ACL_FLOAT", 0),
        ("ACL_FLOAT16", 1),
        ("ACL_INT8", 2),
        ("ACL_INT32", 3),
        ("ACL_UINT8", 4),
        ("ACL_INT16", 6),
        ("ACL_UINT16", 7),
        ("ACL_UINT32", 8),
        ("ACL_INT64", 9),
        ("ACL_UINT64", 10),
        ("ACL_DOUBLE", 11),
        ("ACL_BOOL", 12),
        ("ACL_STRING", 13),
        ("ACL_COMPLEX64", 16),
        ("ACL_COMPLEX128", 17),
        ("ACL_BF16", 27),
        ("ACL_INT4", 29),
        ("ACL_UINT1", 30),
        ("ACL_COMPLEX32", 33),
        ("ACL_HIFLOAT8", 34),
        ("ACL_FLOAT8_E5M2", 35),
        ("ACL_FLOAT8_E4M3FN", 36),
        ("ACL_FLOAT8_E8M0", 37),
        ("ACL_FLOAT6_E3M2", 38),
        ("ACL_FLOAT6_E2M3", 39),
        ("ACL_FLOAT4_E2M1", 40),
        ("ACL_FLOAT4_E1M2", 41),
    ],
)
def test_data_type_numbers(name: str, value: int) -> None:
    assert DataType[name] == value


def test_data_type_table_is_complete() -> None:
    assert len(DataType) == 28


@pytest.mark.parametrize(
    ("acl", "np_dtype"),
    [
        (DataType.ACL_FLOAT, np.float32),
        (DataType.ACL_BF16, ml_dtypes.bfloat16),
        (DataType.ACL_FLOAT8_E4M3FN, ml_dtypes.float8_e4m3fn),
        (DataType.ACL_FLOAT8_E5M2, ml_dtypes.float8_e5m2),
        (DataType.ACL_FLOAT8_E8M0, ml_dtypes.float8_e8m0fnu),
        (DataType.ACL_FLOAT4_E2M1, ml_dtypes.float4_e2m1fn),
        (DataType.ACL_INT4, ml_dtypes.int4),
        (DataType.ACL_BOOL, np.bool_),
        (DataType.ACL_DOUBLE, np.float64),
    ],
)
def test_numpy_counterparts_round_trip(acl: DataType, np_dtype: type) -> None:
    assert acl.numpy == np.dtype(np_dtype)
    assert from_numpy(np.dtype(np_dtype)) is acl


def test_sub_byte_types_pack() -> None:
    assert DataType.ACL_INT4.is_packed and DataType.ACL_FLOAT4_E2M1.is_packed
    assert storage_nbytes(DataType.ACL_INT4, 5) == 3
    assert storage_nbytes(DataType.ACL_UINT1, 9) == 2
    assert storage_nbytes(DataType.ACL_FLOAT6_E2M3, 4) == 4  # one byte each, documented
    assert storage_nbytes(DataType.ACL_BF16, 3) == 6
    with pytest.raises(ValueError):
        storage_nbytes(DataType.ACL_STRING, 1)


def test_no_numpy_type_is_refused() -> None:
    with pytest.raises(ValueError):
        from_numpy(np.dtype("U3"))


def test_formats() -> None:
    assert Format.ACL_FORMAT_ND == 2 and Format.ACL_FORMAT_FRACTAL_NZ == 29 and Format.ACL_FRACTAL_Z_3D == 33
    assert Format.ACL_FORMAT_NCL == 47 and Format.ACL_FORMAT_FRACTAL_NZ_C0_8 == 54
    assert Format.ACL_FORMAT_FRACTAL_NZ.is_private and not Format.ACL_FORMAT_NCHW.is_private


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ACL_ERROR_INVALID_PARAM", 100000),
        ("ACL_ERROR_REPEAT_INITIALIZE", 100002),
        ("ACL_ERROR_REPEAT_FINALIZE", 100037),
        ("ACL_ERROR_BAD_ALLOC", 200000),
        ("ACL_ERROR_STORAGE_OVER_LIMIT", 300000),
        ("ACL_ERROR_INTERNAL_ERROR", 500000),
        ("ACL_ERROR_RT_PARAM_INVALID", 107000),
        ("ACL_ERROR_RT_INVALID_HANDLE", 107017),
        ("ACL_ERROR_RT_MEMORY_ALLOCATION", 207001),
        ("ACL_ERROR_RT_MEMORY_FREE", 207002),
        ("ACL_ERROR_RT_INTERNAL_ERROR", 507000),
        ("ACL_ERROR_RT_CCU_EXCEPTION", 507916),
        ("ACLNN_ERR_PARAM_NULLPTR", 161001),
        ("ACLNN_ERR_PARAM_INVALID", 161002),
        ("ACLNN_ERR_RUNTIME_ERROR", 361001),
        ("ACLNN_ERR_INNER_TILING_ERROR", 561002),
        ("ACLNN_ERR_INNER_NULLPTR", 561103),
        ("HCCL_E_PARA", 1),
        ("HCCL_E_TIMEOUT", 9),
        ("HCCL_E_OOM", 24),
        ("HCCL_E_IN_STATUS", 1041),
    ],
)
def test_result_codes_are_exported_by_official_name(name: str, value: int) -> None:
    assert getattr(errors, name) == value


def test_code_families_are_complete() -> None:
    assert len(AclErrorCode) == 70  # ACL_SUCCESS + 69 error codes of acl_base_rt.h
    assert len(AclnnStatus) == 27
    assert len(HcclResult) == 27
    assert all(100000 <= c < 600000 for c in RtErrorCode if c)


def test_exception_carries_code_and_name() -> None:
    exc = AclError(AclErrorCode.ACL_ERROR_INVALID_PARAM, "bad size")
    assert exc.code == 100000 and exc.message == "bad size"
    assert "ACL_ERROR_INVALID_PARAM (100000): bad size" in str(exc)
    assert code_name(161002) == "ACLNN_ERR_PARAM_INVALID"
    assert code_name(12345) == "UNKNOWN(12345)"

"""Vendor errors become CANN codes with messages naming the vendor call (no vendor library needed)."""

from __future__ import annotations

from enum import IntEnum

import pytest

from acl_core.errors import AclError, RtErrorCode
from acl_rocm.errors import VENDOR_ERRORS, cann_code, error_name, is_success, unpack, vendor_error


class cudaError_t(IntEnum):
    cudaSuccess = 0
    cudaErrorInvalidValue = 1
    cudaErrorMemoryAllocation = 2
    cudaErrorNotReady = 600
    cudaErrorSomethingNew = 9999


class hipError_t(IntEnum):
    hipSuccess = 0
    hipErrorOutOfMemory = 2
    hipErrorInvalidDevice = 101


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (cudaError_t.cudaErrorMemoryAllocation, RtErrorCode.ACL_ERROR_RT_MEMORY_ALLOCATION),
        (hipError_t.hipErrorOutOfMemory, RtErrorCode.ACL_ERROR_RT_MEMORY_ALLOCATION),
        ("CUDA_ERROR_OUT_OF_MEMORY", RtErrorCode.ACL_ERROR_RT_MEMORY_ALLOCATION),
        (cudaError_t.cudaErrorInvalidValue, RtErrorCode.ACL_ERROR_RT_PARAM_INVALID),
        (hipError_t.hipErrorInvalidDevice, RtErrorCode.ACL_ERROR_RT_INVALID_DEVICEID),
        ("cudaErrorNoDevice", RtErrorCode.ACL_ERROR_RT_NO_DEVICE),
        ("cudaErrorIllegalAddress", RtErrorCode.ACL_ERROR_RT_AICORE_EXCEPTION),
        ("hipErrorLaunchTimeOut", RtErrorCode.ACL_ERROR_RT_AICORE_TIMEOUT),
        ("CUDA_ERROR_INVALID_HANDLE", RtErrorCode.ACL_ERROR_RT_INVALID_HANDLE),
        ("NVRTC_ERROR_COMPILATION", RtErrorCode.ACL_ERROR_RT_KERNEL_LOOKUP),
        ("CUBLAS_STATUS_NOT_SUPPORTED", RtErrorCode.ACL_ERROR_RT_FEATURE_NOT_SUPPORT),
        ("cudaErrorInvalidMemcpyDirection", RtErrorCode.ACL_ERROR_RT_INVALID_MEMORY_TYPE),
    ],
)
def test_table_maps_vendor_errors_to_cann_codes(error: object, code: RtErrorCode) -> None:
    assert cann_code(error) == code


def test_unknown_errors_are_internal_errors() -> None:
    assert cann_code(cudaError_t.cudaErrorSomethingNew) == RtErrorCode.ACL_ERROR_RT_INTERNAL_ERROR
    assert cann_code("hipErrorNobodyKnows") == RtErrorCode.ACL_ERROR_RT_INTERNAL_ERROR


def test_names_are_normalised_from_enums_and_reprs() -> None:
    assert error_name(cudaError_t.cudaErrorMemoryAllocation) == "cudaErrorMemoryAllocation"
    assert error_name("cudaError_t.cudaErrorMemoryAllocation") == "cudaErrorMemoryAllocation"
    assert error_name("<cudaError_t.cudaErrorMemoryAllocation: 2>") == "cudaErrorMemoryAllocation"


def test_message_names_the_vendor_call_the_error_and_the_code() -> None:
    err = vendor_error("cudaMalloc(1099511627776 bytes)", cudaError_t.cudaErrorMemoryAllocation, "out of memory")
    assert isinstance(err, AclError)
    assert err.code == 207001
    assert err.message == "cudaMalloc(1099511627776 bytes) failed: cudaErrorMemoryAllocation (2): out of memory"
    assert str(err).startswith("ACL_ERROR_RT_MEMORY_ALLOCATION (207001)")


def test_success_values_are_recognised() -> None:
    assert is_success(cudaError_t.cudaSuccess) and is_success(hipError_t.hipSuccess) and is_success(0)
    assert not is_success(cudaError_t.cudaErrorNotReady) and not is_success(3)


def test_unpack_returns_values_or_raises_the_cann_error() -> None:
    assert unpack("cudaGetDeviceCount", (cudaError_t.cudaSuccess, 4)) == 4
    assert unpack("cudaMemGetInfo", (cudaError_t.cudaSuccess, 1, 2)) == (1, 2)
    assert unpack("cudaFree", (cudaError_t.cudaSuccess,)) is None
    with pytest.raises(AclError) as err:
        unpack("hipMalloc(64 bytes)", (hipError_t.hipErrorOutOfMemory, None), lambda e: "out of memory")
    assert err.value.code == 207001 and err.value.message.startswith("hipMalloc(64 bytes) failed: hipErrorOutOfMemory")


def test_every_table_entry_is_a_vendor_name_and_a_runtime_code() -> None:
    prefixes = ("cuda", "CUDA_", "hip", "NVRTC_", "HIPRTC_", "CUBLAS_", "HIPBLAS_", "rocblas_")
    for name, code in VENDOR_ERRORS.items():
        assert name.startswith(prefixes), name
        assert isinstance(code, RtErrorCode) and code != RtErrorCode.ACL_RT_SUCCESS
    cuda_names = {n.removeprefix("cuda") for n in VENDOR_ERRORS if n.startswith("cudaError")}
    hip_names = {n.removeprefix("hip") for n in VENDOR_ERRORS if n.startswith("hipError")}
    shared = cuda_names & hip_names
    assert len(shared) > 15
    for stem in shared:  # HIP mirrors the CUDA runtime: the same error must mean the same code
        assert VENDOR_ERRORS["cuda" + stem] == VENDOR_ERRORS["hip" + stem], stem

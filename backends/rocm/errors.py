"""Vendor errors (HIP, CUDA runtime and driver, NVRTC/hipRTC, cuBLASLt/hipBLASLt) as CANN codes.

Every failing vendor call becomes an :class:`~acl_core.errors.AclError` whose code is the CANN code a
CANN program would see for the same failure, and whose message names the vendor call and the vendor
error, e.g. ``cudaMalloc(1099511627776 bytes) failed: cudaErrorMemoryAllocation (2): out of memory``.
The table is keyed by the vendor's error *name*, so it is checked without any vendor library.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from acl_core.errors import AclError, RtErrorCode

_R = RtErrorCode

VENDOR_ERRORS: Final[Mapping[str, RtErrorCode]] = {
    # memory
    "cudaErrorMemoryAllocation": _R.ACL_ERROR_RT_MEMORY_ALLOCATION,
    "CUDA_ERROR_OUT_OF_MEMORY": _R.ACL_ERROR_RT_MEMORY_ALLOCATION,
    "hipErrorOutOfMemory": _R.ACL_ERROR_RT_MEMORY_ALLOCATION,
    "hipErrorMemoryAllocation": _R.ACL_ERROR_RT_MEMORY_ALLOCATION,
    "NVRTC_ERROR_OUT_OF_MEMORY": _R.ACL_ERROR_RT_MEMORY_ALLOCATION,
    "HIPRTC_ERROR_OUT_OF_MEMORY": _R.ACL_ERROR_RT_MEMORY_ALLOCATION,
    "CUBLAS_STATUS_ALLOC_FAILED": _R.ACL_ERROR_RT_MEMORY_ALLOCATION,
    "HIPBLAS_STATUS_ALLOC_FAILED": _R.ACL_ERROR_RT_MEMORY_ALLOCATION,
    "rocblas_status_memory_error": _R.ACL_ERROR_RT_MEMORY_ALLOCATION,
    # bad arguments
    "cudaErrorInvalidValue": _R.ACL_ERROR_RT_PARAM_INVALID,
    "CUDA_ERROR_INVALID_VALUE": _R.ACL_ERROR_RT_PARAM_INVALID,
    "hipErrorInvalidValue": _R.ACL_ERROR_RT_PARAM_INVALID,
    "cudaErrorInvalidDevicePointer": _R.ACL_ERROR_RT_PARAM_INVALID,
    "hipErrorInvalidDevicePointer": _R.ACL_ERROR_RT_PARAM_INVALID,
    "cudaErrorInvalidPitchValue": _R.ACL_ERROR_RT_PARAM_INVALID,
    "hipErrorInvalidPitchValue": _R.ACL_ERROR_RT_PARAM_INVALID,
    "cudaErrorInvalidConfiguration": _R.ACL_ERROR_RT_PARAM_INVALID,
    "hipErrorInvalidConfiguration": _R.ACL_ERROR_RT_PARAM_INVALID,
    "NVRTC_ERROR_INVALID_INPUT": _R.ACL_ERROR_RT_PARAM_INVALID,
    "NVRTC_ERROR_INVALID_OPTION": _R.ACL_ERROR_RT_PARAM_INVALID,
    "HIPRTC_ERROR_INVALID_INPUT": _R.ACL_ERROR_RT_PARAM_INVALID,
    "HIPRTC_ERROR_INVALID_OPTION": _R.ACL_ERROR_RT_PARAM_INVALID,
    "CUBLAS_STATUS_INVALID_VALUE": _R.ACL_ERROR_RT_PARAM_INVALID,
    "HIPBLAS_STATUS_INVALID_VALUE": _R.ACL_ERROR_RT_PARAM_INVALID,
    "rocblas_status_invalid_value": _R.ACL_ERROR_RT_PARAM_INVALID,
    "rocblas_status_invalid_size": _R.ACL_ERROR_RT_PARAM_INVALID,
    "cudaErrorInvalidMemcpyDirection": _R.ACL_ERROR_RT_INVALID_MEMORY_TYPE,
    "hipErrorInvalidMemcpyDirection": _R.ACL_ERROR_RT_INVALID_MEMORY_TYPE,
    # devices and contexts
    "cudaErrorInvalidDevice": _R.ACL_ERROR_RT_INVALID_DEVICEID,
    "CUDA_ERROR_INVALID_DEVICE": _R.ACL_ERROR_RT_INVALID_DEVICEID,
    "hipErrorInvalidDevice": _R.ACL_ERROR_RT_INVALID_DEVICEID,
    "cudaErrorNoDevice": _R.ACL_ERROR_RT_NO_DEVICE,
    "CUDA_ERROR_NO_DEVICE": _R.ACL_ERROR_RT_NO_DEVICE,
    "hipErrorNoDevice": _R.ACL_ERROR_RT_NO_DEVICE,
    "cudaErrorInsufficientDriver": _R.ACL_ERROR_RT_NO_DEVICE,
    "hipErrorInsufficientDriver": _R.ACL_ERROR_RT_NO_DEVICE,
    "cudaErrorDevicesUnavailable": _R.ACL_ERROR_RT_NO_DEVICE,
    "cudaErrorInitializationError": _R.ACL_ERROR_RT_DEV_SETUP_ERROR,
    "CUDA_ERROR_NOT_INITIALIZED": _R.ACL_ERROR_RT_DEV_SETUP_ERROR,
    "CUDA_ERROR_DEINITIALIZED": _R.ACL_ERROR_RT_DEV_SETUP_ERROR,
    "hipErrorNotInitialized": _R.ACL_ERROR_RT_DEV_SETUP_ERROR,
    "hipErrorInitializationError": _R.ACL_ERROR_RT_DEV_SETUP_ERROR,
    "CUBLAS_STATUS_NOT_INITIALIZED": _R.ACL_ERROR_RT_DEV_SETUP_ERROR,
    "HIPBLAS_STATUS_NOT_INITIALIZED": _R.ACL_ERROR_RT_DEV_SETUP_ERROR,
    "CUDA_ERROR_INVALID_CONTEXT": _R.ACL_ERROR_RT_CONTEXT_NULL,
    "CUDA_ERROR_CONTEXT_IS_DESTROYED": _R.ACL_ERROR_RT_CONTEXT_NULL,
    "cudaErrorContextIsDestroyed": _R.ACL_ERROR_RT_CONTEXT_NULL,
    "hipErrorInvalidContext": _R.ACL_ERROR_RT_CONTEXT_NULL,
    "hipErrorContextIsDestroyed": _R.ACL_ERROR_RT_CONTEXT_NULL,
    # handles
    "cudaErrorInvalidResourceHandle": _R.ACL_ERROR_RT_INVALID_HANDLE,
    "CUDA_ERROR_INVALID_HANDLE": _R.ACL_ERROR_RT_INVALID_HANDLE,
    "hipErrorInvalidHandle": _R.ACL_ERROR_RT_INVALID_HANDLE,
    "hipErrorInvalidResourceHandle": _R.ACL_ERROR_RT_INVALID_HANDLE,
    "NVRTC_ERROR_INVALID_PROGRAM": _R.ACL_ERROR_RT_INVALID_HANDLE,
    "HIPRTC_ERROR_INVALID_PROGRAM": _R.ACL_ERROR_RT_INVALID_HANDLE,
    "CUBLAS_STATUS_INVALID_HANDLE": _R.ACL_ERROR_RT_INVALID_HANDLE,
    "HIPBLAS_STATUS_HANDLE_IS_NULLPTR": _R.ACL_ERROR_RT_INVALID_HANDLE,
    "rocblas_status_invalid_handle": _R.ACL_ERROR_RT_INVALID_HANDLE,
    # events and timing
    "cudaErrorNotReady": _R.ACL_ERROR_RT_EVENT_NOT_COMPLETE,
    "CUDA_ERROR_NOT_READY": _R.ACL_ERROR_RT_EVENT_NOT_COMPLETE,
    "hipErrorNotReady": _R.ACL_ERROR_RT_EVENT_NOT_COMPLETE,
    "cudaErrorInvalidHostPointer": _R.ACL_ERROR_RT_PARAM_INVALID,
    "hipErrorInvalidHostPointer": _R.ACL_ERROR_RT_PARAM_INVALID,
    # kernels, modules and compilation
    "cudaErrorInvalidDeviceFunction": _R.ACL_ERROR_RT_INVALID_DEVICE_FUNCTION,
    "hipErrorInvalidDeviceFunction": _R.ACL_ERROR_RT_INVALID_DEVICE_FUNCTION,
    "cudaErrorNoKernelImageForDevice": _R.ACL_ERROR_RT_INVALID_DEVICE_FUNCTION,
    "CUDA_ERROR_NO_BINARY_FOR_GPU": _R.ACL_ERROR_RT_INVALID_DEVICE_FUNCTION,
    "hipErrorNoBinaryForGpu": _R.ACL_ERROR_RT_INVALID_DEVICE_FUNCTION,
    "CUDA_ERROR_INVALID_IMAGE": _R.ACL_ERROR_RT_INVALID_DEVICE_FUNCTION,
    "CUDA_ERROR_INVALID_PTX": _R.ACL_ERROR_RT_INVALID_DEVICE_FUNCTION,
    "CUDA_ERROR_UNSUPPORTED_PTX_VERSION": _R.ACL_ERROR_RT_INVALID_DEVICE_FUNCTION,
    "hipErrorInvalidImage": _R.ACL_ERROR_RT_INVALID_DEVICE_FUNCTION,
    "hipErrorInvalidKernelFile": _R.ACL_ERROR_RT_INVALID_DEVICE_FUNCTION,
    "CUDA_ERROR_NOT_FOUND": _R.ACL_ERROR_RT_SYMBOL_NOT_FOUND,
    "hipErrorNotFound": _R.ACL_ERROR_RT_SYMBOL_NOT_FOUND,
    "cudaErrorSymbolNotFound": _R.ACL_ERROR_RT_SYMBOL_NOT_FOUND,
    "NVRTC_ERROR_COMPILATION": _R.ACL_ERROR_RT_KERNEL_LOOKUP,
    "NVRTC_ERROR_BUILTIN_OPERATION_FAILURE": _R.ACL_ERROR_RT_KERNEL_LOOKUP,
    "HIPRTC_ERROR_COMPILATION": _R.ACL_ERROR_RT_KERNEL_LOOKUP,
    "HIPRTC_ERROR_BUILTIN_OPERATION_FAILURE": _R.ACL_ERROR_RT_KERNEL_LOOKUP,
    "HIPRTC_ERROR_LINKING": _R.ACL_ERROR_RT_KERNEL_LOOKUP,
    # execution faults
    "cudaErrorLaunchFailure": _R.ACL_ERROR_RT_AICORE_EXCEPTION,
    "CUDA_ERROR_LAUNCH_FAILED": _R.ACL_ERROR_RT_AICORE_EXCEPTION,
    "hipErrorLaunchFailure": _R.ACL_ERROR_RT_AICORE_EXCEPTION,
    "cudaErrorIllegalAddress": _R.ACL_ERROR_RT_AICORE_EXCEPTION,
    "CUDA_ERROR_ILLEGAL_ADDRESS": _R.ACL_ERROR_RT_AICORE_EXCEPTION,
    "hipErrorIllegalAddress": _R.ACL_ERROR_RT_AICORE_EXCEPTION,
    "cudaErrorMisalignedAddress": _R.ACL_ERROR_RT_AICORE_EXCEPTION,
    "CUDA_ERROR_MISALIGNED_ADDRESS": _R.ACL_ERROR_RT_AICORE_EXCEPTION,
    "cudaErrorIllegalInstruction": _R.ACL_ERROR_RT_AICORE_EXCEPTION,
    "CUDA_ERROR_ILLEGAL_INSTRUCTION": _R.ACL_ERROR_RT_AICORE_EXCEPTION,
    "cudaErrorAssert": _R.ACL_ERROR_RT_AICORE_TRAP_EXCEPTION,
    "CUDA_ERROR_ASSERT": _R.ACL_ERROR_RT_AICORE_TRAP_EXCEPTION,
    "hipErrorAssert": _R.ACL_ERROR_RT_AICORE_TRAP_EXCEPTION,
    "cudaErrorLaunchTimeout": _R.ACL_ERROR_RT_AICORE_TIMEOUT,
    "CUDA_ERROR_LAUNCH_TIMEOUT": _R.ACL_ERROR_RT_AICORE_TIMEOUT,
    "hipErrorLaunchTimeOut": _R.ACL_ERROR_RT_AICORE_TIMEOUT,
    "cudaErrorLaunchOutOfResources": _R.ACL_ERROR_RT_RESOURCE_ALLOC_FAIL,
    "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES": _R.ACL_ERROR_RT_RESOURCE_ALLOC_FAIL,
    "hipErrorLaunchOutOfResources": _R.ACL_ERROR_RT_RESOURCE_ALLOC_FAIL,
    "CUBLAS_STATUS_EXECUTION_FAILED": _R.ACL_ERROR_RT_AICORE_EXCEPTION,
    "HIPBLAS_STATUS_EXECUTION_FAILED": _R.ACL_ERROR_RT_AICORE_EXCEPTION,
    # unsupported
    "cudaErrorNotSupported": _R.ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
    "CUDA_ERROR_NOT_SUPPORTED": _R.ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
    "hipErrorNotSupported": _R.ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
    "CUBLAS_STATUS_NOT_SUPPORTED": _R.ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
    "CUBLAS_STATUS_ARCH_MISMATCH": _R.ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
    "HIPBLAS_STATUS_NOT_SUPPORTED": _R.ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
    "HIPBLAS_STATUS_ARCH_MISMATCH": _R.ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
    "rocblas_status_not_implemented": _R.ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
    # stream capture
    "cudaErrorStreamCaptureImplicit": _R.ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT,
    "hipErrorStreamCaptureImplicit": _R.ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT,
    "cudaErrorStreamCaptureUnsupported": _R.ACL_ERROR_RT_STREAM_CAPTURED,
    "hipErrorStreamCaptureUnsupported": _R.ACL_ERROR_RT_STREAM_CAPTURED,
    "cudaErrorCapturedEvent": _R.ACL_ERROR_RT_EVENT_CAPTURED,
    "hipErrorCapturedEvent": _R.ACL_ERROR_RT_EVENT_CAPTURED,
    "cudaErrorStreamCaptureWrongThread": _R.ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD,
    "hipErrorStreamCaptureWrongThread": _R.ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD,
    "cudaErrorStreamCaptureInvalidated": _R.ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED,
    "hipErrorStreamCaptureInvalidated": _R.ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED,
    "cudaErrorStreamCaptureUnmatched": _R.ACL_ERROR_RT_STREAM_CAPTURE_UNMATCHED,
    "hipErrorStreamCaptureUnmatched": _R.ACL_ERROR_RT_STREAM_CAPTURE_UNMATCHED,
    "cudaErrorStreamCaptureUnjoined": _R.ACL_ERROR_RT_STREAM_UNJOINED,
    "hipErrorStreamCaptureUnjoined": _R.ACL_ERROR_RT_STREAM_UNJOINED,
    "cudaErrorStreamCaptureIsolation": _R.ACL_ERROR_RT_CAPTURE_DEPENDENCY,
    "hipErrorStreamCaptureIsolation": _R.ACL_ERROR_RT_CAPTURE_DEPENDENCY,
    "cudaErrorStreamCaptureMerge": _R.ACL_ERROR_RT_CAPTURE_DEPENDENCY,
    "hipErrorStreamCaptureMerge": _R.ACL_ERROR_RT_CAPTURE_DEPENDENCY,
}
"""Vendor error name → CANN runtime code. Names missing here map to ACL_ERROR_RT_INTERNAL_ERROR."""

SUCCESS_NAMES: Final = frozenset(
    {"cudaSuccess", "CUDA_SUCCESS", "hipSuccess", "NVRTC_SUCCESS", "HIPRTC_SUCCESS", "CUBLAS_STATUS_SUCCESS"}
    | {"HIPBLAS_STATUS_SUCCESS", "rocblas_status_success"}
)


def error_name(error: object) -> str:
    """The bare vendor name of an error enum member or string (``cudaError_t.cudaErrorX`` → ``cudaErrorX``)."""
    name = getattr(error, "name", None)
    text = name if isinstance(name, str) else str(error)
    return text.rsplit(".", 1)[-1].split(":", 1)[0].strip("<> ")


def cann_code(error: object) -> RtErrorCode:
    """The CANN runtime code for a vendor error (ACL_ERROR_RT_INTERNAL_ERROR when the table has none)."""
    return VENDOR_ERRORS.get(error_name(error), RtErrorCode.ACL_ERROR_RT_INTERNAL_ERROR)


def is_success(error: object) -> bool:
    """True when ``error`` is a vendor success value (by name, or the integer 0)."""
    if isinstance(error, int) and not hasattr(error, "name"):
        return error == 0
    return error_name(error) in SUCCESS_NAMES


def vendor_error(call: str, error: object, detail: str = "") -> AclError:
    """An AclError with the CANN code for ``error``, naming the vendor ``call`` that failed."""
    name = error_name(error)
    try:
        number = f" ({int(error)})"  # type: ignore[call-overload]
    except (TypeError, ValueError):
        number = ""
    suffix = f": {detail}" if detail else ""
    return AclError(cann_code(error), f"{call} failed: {name}{number}{suffix}")


def unpack(call: str, result: object, describe: object = None) -> object:
    """Check a binding's ``(error, *values)`` result: raise the CANN error, or return the value(s).

    ``describe`` (optional) maps the vendor error to its human description for the message.
    """
    values = result if isinstance(result, tuple) else (result,)
    error, rest = values[0], values[1:]
    if not is_success(error):
        detail = ""
        if callable(describe):
            try:
                detail = str(describe(error) or "")
            except Exception:
                detail = ""
        raise vendor_error(call, error, detail)
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest

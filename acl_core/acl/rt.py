"""``acl.rt``: devices, contexts, streams, events and memory, in pyACL's shape.

Arguments pass through unchanged: the runtime's entry points convert them to their C types
(:mod:`acl_core.runtime.c_args`) and require aclInit, so every backend answers misuse alike.
"""

from __future__ import annotations

from acl_core.acl._call import call_status, call_value, runtime


# ----------------------------------------------------------------- devices and contexts
def set_device(device_id: int) -> int:
    """aclrtSetDevice."""
    return call_status(lambda: runtime().set_device(device_id))


def reset_device(device_id: int) -> int:
    """aclrtResetDevice."""
    return call_status(lambda: runtime().reset_device(device_id))


def get_device() -> tuple[int, int]:
    """aclrtGetDevice: (device_id, ret)."""
    return call_value(lambda: runtime().get_device(), -1)


def get_device_count() -> tuple[int, int]:
    """aclrtGetDeviceCount: (count, ret)."""
    return call_value(lambda: runtime().device_count())


def get_run_mode() -> tuple[int, int]:
    """aclrtGetRunMode: (ACL_HOST, ret): the program runs on a host driving devices."""
    return call_value(lambda: int(runtime().run_mode()), -1)


def synchronize_device() -> int:
    """aclrtSynchronizeDevice."""
    return call_status(lambda: runtime().synchronize_device())


def create_context(device_id: int) -> tuple[int, int]:
    """aclrtCreateContext: (context, ret)."""
    return call_value(lambda: runtime().create_context(device_id))


def destroy_context(context: int) -> int:
    """aclrtDestroyContext."""
    return call_status(lambda: runtime().destroy_context(context))


def set_context(context: int) -> int:
    """aclrtSetCurrentContext."""
    return call_status(lambda: runtime().set_context(context))


def get_context() -> tuple[int, int]:
    """aclrtGetCurrentContext: (context, ret)."""
    return call_value(lambda: runtime().get_context())


# ----------------------------------------------------------------- streams
def create_stream() -> tuple[int, int]:
    """aclrtCreateStream: (stream, ret)."""
    return call_value(lambda: runtime().create_stream())


def create_stream_with_config(priority: int, flag: int) -> tuple[int, int]:
    """aclrtCreateStreamWithConfig: priority and flags are accepted and have no effect here."""
    return call_value(lambda: runtime().create_stream(priority, flag))


def destroy_stream(stream: int) -> int:
    """aclrtDestroyStream."""
    return call_status(lambda: runtime().destroy_stream(stream))


def synchronize_stream(stream: int | None) -> int:
    """aclrtSynchronizeStream."""
    return call_status(lambda: runtime().synchronize_stream(stream))


def stream_query(stream: int | None) -> tuple[int, int]:
    """aclrtStreamQuery: (ACL_STREAM_STATUS_COMPLETE=0 | NOT_READY=1, ret)."""
    return call_value(lambda: int(runtime().stream_query(stream)), -1)


def stream_wait_event(stream: int | None, event: int) -> int:
    """aclrtStreamWaitEvent."""
    return call_status(lambda: runtime().stream_wait_event(stream, event))


# ----------------------------------------------------------------- events
def create_event() -> tuple[int, int]:
    """aclrtCreateEvent: (event, ret)."""
    return call_value(lambda: runtime().create_event())


def create_event_with_flag(flag: int) -> tuple[int, int]:
    """aclrtCreateEventWithFlag: every event times here, whatever the flag."""
    return call_value(lambda: runtime().create_event(flag))


def destroy_event(event: int) -> int:
    """aclrtDestroyEvent."""
    return call_status(lambda: runtime().destroy_event(event))


def record_event(event: int, stream: int | None) -> int:
    """aclrtRecordEvent."""
    return call_status(lambda: runtime().record_event(event, stream))


def reset_event(event: int, stream: int | None) -> int:
    """aclrtResetEvent."""
    return call_status(lambda: runtime().reset_event(event, stream))


def synchronize_event(event: int) -> int:
    """aclrtSynchronizeEvent."""
    return call_status(lambda: runtime().synchronize_event(event))


def query_event(event: int) -> tuple[int, int]:
    """aclrtQueryEvent: (ACL_EVENT_STATUS_COMPLETE=0 | NOT_READY=1, ret)."""
    return call_value(lambda: int(runtime().query_event(event)), -1)


def query_event_status(event: int) -> tuple[int, int]:
    """aclrtQueryEventStatus: (ACL_EVENT_RECORDED_STATUS_NOT_READY=0 | COMPLETE=1, ret)."""
    return call_value(lambda: int(runtime().query_event_status(event)), -1)


def event_elapsed_time(start: int, end: int) -> tuple[float, int]:
    """aclrtEventElapsedTime: (milliseconds, ret)."""
    return call_value(lambda: runtime().event_elapsed_time(start, end), 0.0)


# ----------------------------------------------------------------- memory
def malloc(size: int, policy: int) -> tuple[int, int]:
    """aclrtMalloc: (device pointer, ret)."""
    return call_value(lambda: runtime().malloc(size, policy))


def malloc_cached(size: int, policy: int) -> tuple[int, int]:
    """aclrtMallocCached: the same as malloc here."""
    return call_value(lambda: runtime().malloc(size, policy))


def free(dev_ptr: int) -> int:
    """aclrtFree."""
    return call_status(lambda: runtime().free(dev_ptr))


def malloc_host(size: int) -> tuple[int, int]:
    """aclrtMallocHost: (page-locked host pointer, ret)."""
    return call_value(lambda: runtime().malloc_host(size))


def free_host(host_ptr: int) -> int:
    """aclrtFreeHost."""
    return call_status(lambda: runtime().free_host(host_ptr))


def memset(dev_ptr: int, max_count: int, value: int, count: int) -> int:
    """aclrtMemset."""
    return call_status(lambda: runtime().memset(dev_ptr, max_count, value, count))


def memset_async(dev_ptr: int, max_count: int, value: int, count: int, stream: int | None) -> int:
    """aclrtMemsetAsync."""
    return call_status(lambda: runtime().memset_async(dev_ptr, max_count, value, count, stream))


def memcpy(dst: int, dest_max: int, src: int, count: int, kind: int) -> int:
    """aclrtMemcpy (kind 4, ACL_MEMCPY_DEFAULT, infers the direction)."""
    return call_status(lambda: runtime().memcpy(dst, dest_max, src, count, kind))


def memcpy_async(dst: int, dest_max: int, src: int, count: int, kind: int, stream: int | None) -> int:
    """aclrtMemcpyAsync (host memory must come from malloc_host)."""
    return call_status(lambda: runtime().memcpy_async(dst, dest_max, src, count, kind, stream))


def memcpy2d(dst: int, dpitch: int, src: int, spitch: int, width: int, height: int, kind: int) -> int:
    """aclrtMemcpy2d."""
    return call_status(lambda: runtime().memcpy2d(dst, dpitch, src, spitch, width, height, kind))


def cmo_async(src: int, size: int, cmo_type: int, stream: int | None) -> int:
    """aclrtCmoAsync (only ACL_RT_CMO_TYPE_PREFETCH, 0: a cache hint enqueued on ``stream``)."""
    return call_status(lambda: runtime().cmo_async(src, size, cmo_type, stream))


def get_mem_info(attr: int) -> tuple[int, int, int]:
    """aclrtGetMemInfo: (free, total, ret)."""
    (free_total, ret) = call_value(lambda: runtime().get_mem_info(attr), (0, 0))
    return free_total[0], free_total[1], ret

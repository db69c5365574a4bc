"""A pyACL runtime program, unchanged except for its import line.

With CANN you would write ``import acl``; with acl-core, ``from acl_core import acl``. Everything
else — the constants defined in the script, the (value, ret) returns, the pointer helpers — is the
same. Run it: ``python examples/pyacl_runtime.py`` (backend: ACL_BACKEND or the best available).
"""

import numpy as np

from acl_core import acl  # was: import acl

ACL_MEM_MALLOC_HUGE_FIRST = 0
ACL_MEMCPY_HOST_TO_DEVICE = 1
ACL_MEMCPY_DEVICE_TO_HOST = 2
ACL_MEMCPY_DEVICE_TO_DEVICE = 3
ACL_MEMCPY_DEFAULT = 4
ACL_HBM_MEM = 1
DEVICE_ID = 0


def check(ret: int, what: str) -> None:
    if ret != 0:
        raise RuntimeError(f"{what} failed with {ret}: {acl.get_recent_err_msg()}")


def main() -> None:
    check(acl.init(), "acl.init")
    check(acl.rt.set_device(DEVICE_ID), "set_device")
    context, ret = acl.rt.create_context(DEVICE_ID)
    check(ret, "create_context")
    stream, ret = acl.rt.create_stream()
    check(ret, "create_stream")

    data = np.arange(1024, dtype=np.float32)
    size = data.nbytes
    dev_a, ret = acl.rt.malloc(size, ACL_MEM_MALLOC_HUGE_FIRST)
    check(ret, "malloc a")
    dev_b, ret = acl.rt.malloc(size, ACL_MEM_MALLOC_HUGE_FIRST)
    check(ret, "malloc b")

    host_ptr = acl.util.bytes_to_ptr(data.tobytes())
    check(acl.rt.memcpy(dev_a, size, host_ptr, size, ACL_MEMCPY_HOST_TO_DEVICE), "memcpy H2D")
    check(acl.rt.memcpy(dev_b, size, dev_a, size, ACL_MEMCPY_DEVICE_TO_DEVICE), "memcpy D2D")

    pinned, ret = acl.rt.malloc_host(size)
    check(ret, "malloc_host")
    start, ret = acl.rt.create_event()
    check(ret, "create_event start")
    end, ret = acl.rt.create_event()
    check(ret, "create_event end")
    check(acl.rt.record_event(start, stream), "record start")
    check(acl.rt.memcpy_async(pinned, size, dev_b, size, ACL_MEMCPY_DEVICE_TO_HOST, stream), "memcpy_async D2H")
    check(acl.rt.record_event(end, stream), "record end")
    check(acl.rt.synchronize_stream(stream), "synchronize_stream")
    elapsed_ms, ret = acl.rt.event_elapsed_time(start, end)
    check(ret, "event_elapsed_time")
    copied = np.frombuffer(acl.util.ptr_to_bytes(pinned, size), dtype=np.float32)
    assert np.array_equal(copied, data), "the round trip changed the data"

    other_stream, ret = acl.rt.create_stream()
    check(ret, "create_stream 2")
    check(acl.rt.stream_wait_event(other_stream, end), "stream_wait_event")
    check(acl.rt.memset(dev_a, size, 0, size), "memset")
    back = np.empty_like(data)
    check(acl.rt.memcpy(acl.util.numpy_to_ptr(back), size, dev_a, size, ACL_MEMCPY_DEFAULT), "memcpy DEFAULT")
    assert not back.any(), "memset did not clear the buffer"

    free, total, ret = acl.rt.get_mem_info(ACL_HBM_MEM)
    check(ret, "get_mem_info")
    print(f"round trip ok; async copy {elapsed_ms:.3f} ms; device memory {free}/{total} bytes free")

    for ev in (start, end):
        check(acl.rt.destroy_event(ev), "destroy_event")
    check(acl.rt.free_host(pinned), "free_host")
    check(acl.rt.free(dev_a), "free a")
    check(acl.rt.free(dev_b), "free b")
    check(acl.rt.destroy_stream(other_stream), "destroy_stream 2")
    check(acl.rt.destroy_stream(stream), "destroy_stream")
    check(acl.rt.destroy_context(context), "destroy_context")
    check(acl.rt.reset_device(DEVICE_ID), "reset_device")
    check(acl.finalize(), "finalize")


if __name__ == "__main__":
    main()

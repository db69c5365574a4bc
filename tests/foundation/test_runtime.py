"""The shared acl runtime over the reference driver: rules, and every misuse returning its CANN code."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from acl_core.errors import AclError
from acl_core.runtime import Runtime, malloc_capacity
from acl_core.spec.runtime import EventRecordedStatus, EventStatus, StreamStatus
from acl_core.spec.runtime import MemcpyKind as K
from acl_reference.driver import DEVICE_BASE, ReferenceDriver


@pytest.fixture
def rt() -> Runtime:
    runtime = Runtime("reference", ReferenceDriver())
    runtime.init()
    runtime.set_device(0)
    return runtime


def _host(rt: Runtime, array: np.ndarray) -> int:
    rt.register_host(array.ctypes.data, array.nbytes, array)
    return int(array.ctypes.data)


def _code(fn, *args) -> int:
    with pytest.raises(AclError) as exc:
        fn(*args)
    return exc.value.code


def test_init_twice_and_finalize_twice() -> None:
    rt = Runtime("reference", ReferenceDriver())
    rt.init()
    assert _code(rt.init) == 100002
    rt.finalize()
    assert _code(rt.finalize) == 100037


def test_init_config_must_be_readable_json(tmp_path) -> None:
    rt = Runtime("reference", ReferenceDriver())
    assert _code(rt.init, str(tmp_path / "missing.json")) == 100003
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert _code(rt.init, str(bad)) == 100006
    good = tmp_path / "acl.json"
    good.write_text('{"dump": {"dump_list": []}}')
    rt.init(str(good))
    rt.finalize()


def test_malloc_rules(rt: Runtime) -> None:
    assert malloc_capacity(1) == 64 and malloc_capacity(32) == 64 and malloc_capacity(33) == 96
    a = rt.malloc(100)
    assert a % 64 == 0 and a >= DEVICE_BASE
    assert _code(rt.malloc, 0) == 100000
    free0, total = rt.get_mem_info(1)
    assert total - free0 == malloc_capacity(100)
    rt.free(a)
    assert rt.get_mem_info(1)[0] == total


def test_out_of_memory_is_207001() -> None:
    driver = ReferenceDriver()
    driver.capacity = 1 << 20
    rt = Runtime("reference", driver)
    rt.init()
    rt.set_device(0)
    assert _code(rt.malloc, 2 << 20) == 207001


def test_copies_every_kind_and_pointer_arithmetic(rt: Runtime) -> None:
    src = np.arange(64, dtype=np.uint8)
    dst = np.zeros(64, dtype=np.uint8)
    dev = rt.malloc(64)
    rt.memcpy(dev, 64, _host(rt, src), 64, K.ACL_MEMCPY_HOST_TO_DEVICE)
    dev2 = rt.malloc(64)
    rt.memcpy(dev2, 64, dev + 16, 32, K.ACL_MEMCPY_DEVICE_TO_DEVICE)  # pointer arithmetic into an allocation
    rt.memcpy(_host(rt, dst), 64, dev2, 32, K.ACL_MEMCPY_DEFAULT)
    assert np.array_equal(dst[:32], src[16:48])
    rt.memset(dev2, 64, 0x1FF, 8)  # low byte of the value
    rt.memcpy(_host(rt, dst), 64, dev2, 8, K.ACL_MEMCPY_DEVICE_TO_HOST)
    assert np.all(dst[:8] == 0xFF)
    h2 = np.zeros(64, np.uint8)
    rt.memcpy(_host(rt, h2), 64, _host(rt, src), 64, K.ACL_MEMCPY_HOST_TO_HOST)
    assert np.array_equal(h2, src)


def test_memcpy2d(rt: Runtime) -> None:
    src = np.arange(24, dtype=np.uint8).reshape(4, 6)
    dev = rt.malloc(4 * 8)
    rt.memcpy2d(dev, 8, _host(rt, src), 6, 4, 4, K.ACL_MEMCPY_HOST_TO_DEVICE)
    out = np.zeros((4, 8), np.uint8)
    rt.memcpy(_host(rt, out), 32, dev, 32, K.ACL_MEMCPY_DEVICE_TO_HOST)
    assert np.array_equal(out[:, :4], src[:, :4])
    assert _code(rt.memcpy2d, dev, 3, _host(rt, src), 6, 4, 4, K.ACL_MEMCPY_HOST_TO_DEVICE) == 100000


def test_misuse_codes_leave_other_allocations_untouched(rt: Runtime) -> None:
    keep = rt.malloc(64)
    payload = np.arange(64, dtype=np.uint8)
    rt.memcpy(keep, 64, _host(rt, payload), 64, K.ACL_MEMCPY_HOST_TO_DEVICE)
    victim = rt.malloc(32)
    host = np.zeros(256, np.uint8)
    h = _host(rt, host)

    assert _code(rt.memcpy, victim, 256, h, 256, K.ACL_MEMCPY_HOST_TO_DEVICE) == 100000  # out of bounds
    assert _code(rt.memcpy, victim, 16, h, 32, K.ACL_MEMCPY_HOST_TO_DEVICE) == 100000  # count > destMax
    assert _code(rt.memcpy, victim, 32, h, 32, K.ACL_MEMCPY_DEVICE_TO_HOST) == 107016  # kind contradicts addresses
    assert _code(rt.memcpy, DEVICE_BASE + (1 << 40), 32, h, 32, K.ACL_MEMCPY_HOST_TO_DEVICE) == 100000  # unknown
    unregistered = ctypes.create_string_buffer(32)
    assert _code(rt.memcpy, victim, 32, ctypes.addressof(unregistered), 32, K.ACL_MEMCPY_HOST_TO_DEVICE) == 100000
    assert _code(rt.memcpy, victim, 32, h, 32, 99) == 100000  # unknown kind
    rt.free(victim)
    assert _code(rt.free, victim) == 207002  # double free
    assert _code(rt.free, keep + 8) == 207002  # not the start of an allocation
    assert _code(rt.memcpy, h, 32, victim, 32, K.ACL_MEMCPY_DEVICE_TO_HOST) == 100000  # use after free
    assert _code(rt.memset, victim, 32, 0, 32) == 100000
    assert _code(rt.memset, keep, 16, 0, 32) == 100000  # count > maxCount
    out = np.zeros(64, np.uint8)
    rt.memcpy(_host(rt, out), 64, keep, 64, K.ACL_MEMCPY_DEVICE_TO_HOST)
    assert np.array_equal(out, payload)


def test_async_copies_need_page_locked_memory(rt: Runtime) -> None:
    stream = rt.create_stream()
    dev = rt.malloc(64)
    pageable = np.zeros(64, np.uint8)
    assert _code(rt.memcpy_async, dev, 64, _host(rt, pageable), 64, K.ACL_MEMCPY_HOST_TO_DEVICE, stream) == 100000
    pinned = rt.malloc_host(64)
    ctypes.memset(pinned, 7, 64)
    rt.memcpy_async(dev, 64, pinned, 64, K.ACL_MEMCPY_HOST_TO_DEVICE, stream)
    back = rt.malloc_host(64)
    rt.memcpy_async(back, 64, dev, 64, K.ACL_MEMCPY_DEVICE_TO_HOST, stream)
    rt.synchronize_stream(stream)
    assert ctypes.string_at(back, 64) == b"\x07" * 64
    assert _code(rt.memcpy_async, back, 64, pinned, 64, K.ACL_MEMCPY_HOST_TO_HOST, stream) == 207000
    rt.free_host(pinned)
    assert _code(rt.free_host, pinned) == 207002


def test_streams_and_events(rt: Runtime) -> None:
    s = rt.create_stream()
    assert rt.stream_query(s) is StreamStatus.ACL_STREAM_STATUS_COMPLETE
    e1, e2 = rt.create_event(), rt.create_event()
    assert rt.query_event_status(e1) is EventRecordedStatus.ACL_EVENT_RECORDED_STATUS_NOT_READY
    assert _code(rt.event_elapsed_time, e1, e2) == 107006  # never recorded
    rt.record_event(e1, s)
    rt.record_event(e2, None)  # the default stream
    rt.stream_wait_event(s, e2)
    rt.synchronize_stream(s)  # e1's recording, then the wait for e2's
    rt.synchronize_event(e2)
    assert rt.query_event(e2) is EventStatus.ACL_EVENT_STATUS_COMPLETE
    assert rt.event_elapsed_time(e1, e2) >= 0.0
    rt.destroy_event(e1)
    assert _code(rt.record_event, e1, s) == 107017  # destroyed handle
    rt.destroy_stream(s)
    assert _code(rt.synchronize_stream, s) == 107017
    assert _code(rt.stream_wait_event, 12345, e2) == 107017


def test_devices_and_contexts() -> None:
    rt = Runtime("reference", ReferenceDriver())
    rt.init()
    assert _code(rt.get_device) == 107002
    assert _code(rt.malloc, 8) == 107002  # no device set
    assert _code(rt.set_device, 99) == 107001
    rt.set_device(1)
    assert rt.get_device() == 1
    ctx = rt.create_context(0)
    assert rt.get_device() == 0 and rt.get_context() == ctx
    rt.set_context(ctx)
    rt.destroy_context(ctx)
    assert _code(rt.set_context, ctx) == 107002
    ptr = rt.malloc(16)
    rt.reset_device(0)  # the last reference releases the device's memory
    assert _code(rt.free, ptr) == 207002

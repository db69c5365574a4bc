"""The acl runtime contract on real device memory (GPU tier)."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from acl_core.backend import Backend
from acl_core.errors import AclError, RtErrorCode
from acl_core.spec.runtime import EventStatus, MemcpyKind, StreamStatus

pytestmark = pytest.mark.gpu

H2D = MemcpyKind.ACL_MEMCPY_HOST_TO_DEVICE
D2H = MemcpyKind.ACL_MEMCPY_DEVICE_TO_HOST
D2D = MemcpyKind.ACL_MEMCPY_DEVICE_TO_DEVICE


def _upload(b: Backend, data: np.ndarray) -> int:
    rt = b.runtime
    ptr = rt.malloc(data.nbytes)
    rt.register_host(data.ctypes.data, data.nbytes, data)
    try:
        rt.memcpy(ptr, data.nbytes, data.ctypes.data, data.nbytes, H2D)
    finally:
        rt.unregister(data.ctypes.data)
    return ptr


def _download(b: Backend, ptr: int, nbytes: int) -> np.ndarray:
    rt = b.runtime
    host = np.empty(nbytes, np.uint8)
    rt.register_host(host.ctypes.data, nbytes, host)
    try:
        rt.memcpy(host.ctypes.data, nbytes, ptr, nbytes, D2H)
    finally:
        rt.unregister(host.ctypes.data)
    return host


@pytest.mark.parametrize("nbytes", [1, 4099, 1 << 24])
def test_round_trip_through_device_memory(rocm: Backend, nbytes: int) -> None:
    data = np.random.default_rng(nbytes).integers(0, 256, nbytes, dtype=np.uint8)
    ptr = _upload(rocm, data)
    try:
        np.testing.assert_array_equal(_download(rocm, ptr, nbytes), data)
    finally:
        rocm.runtime.free(ptr)


def test_device_to_device_copy_and_memset(rocm: Backend) -> None:
    rt = rocm.runtime
    data = np.arange(10000, dtype=np.uint8)
    src = _upload(rocm, data)
    dst = rt.malloc(data.nbytes)
    try:
        rt.memset(dst, data.nbytes, 0xAB, data.nbytes)
        np.testing.assert_array_equal(_download(rocm, dst, data.nbytes), np.full(data.nbytes, 0xAB, np.uint8))
        rt.memcpy(dst + 100, 5000, src, 5000, D2D)
        expected = np.full(data.nbytes, 0xAB, np.uint8)
        expected[100:5100] = data[:5000]
        np.testing.assert_array_equal(_download(rocm, dst, data.nbytes), expected)
    finally:
        rt.free(src)
        rt.free(dst)


def test_async_copies_through_pinned_memory_in_stream_order(rocm: Backend) -> None:
    rt = rocm.runtime
    n = 1 << 22
    pinned_in = rt.malloc_host(n)
    pinned_out = rt.malloc_host(n)
    dev = rt.malloc(n)
    stream = rt.create_stream()
    try:
        src = np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(pinned_in))
        out = np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(pinned_out))
        src[:] = np.random.default_rng(7).integers(0, 256, n, dtype=np.uint8)
        out[:] = 0
        rt.memcpy_async(dev, n, pinned_in, n, H2D, stream)
        rt.memset_async(dev, n, 0x11, 1024, stream)
        rt.memcpy_async(pinned_out, n, dev, n, D2H, stream)
        rt.synchronize_stream(stream)
        assert rt.stream_query(stream) is StreamStatus.ACL_STREAM_STATUS_COMPLETE
        expected = src.copy()
        expected[:1024] = 0x11
        np.testing.assert_array_equal(out, expected)
    finally:
        rt.destroy_stream(stream)
        rt.free(dev)
        rt.free_host(pinned_in)
        rt.free_host(pinned_out)


def test_async_copy_from_pageable_memory_is_refused(rocm: Backend) -> None:
    rt = rocm.runtime
    host = np.zeros(64, np.uint8)
    dev = rt.malloc(64)
    try:
        rt.register_host(host.ctypes.data, 64, host)
        with pytest.raises(AclError) as err:
            rt.memcpy_async(dev, 64, host.ctypes.data, 64, H2D, None)
        assert err.value.code == 100000
    finally:
        rt.unregister(host.ctypes.data)
        rt.free(dev)


def test_events_time_and_order_work_across_streams(rocm: Backend) -> None:
    rt = rocm.runtime
    n = 1 << 28
    a, b = rt.malloc(n), rt.malloc(n)
    s1, s2 = rt.create_stream(), rt.create_stream()
    start, done = rt.create_event(), rt.create_event()
    try:
        rt.memset(a, n, 0, n)
        rt.record_event(start, s1)
        for value in range(1, 9):
            rt.memset_async(a, n, value, n, s1)
        rt.record_event(done, s1)
        rt.stream_wait_event(s2, done)
        rt.memcpy_async(b, n, a, n, D2D, s2)
        rt.synchronize_stream(s2)
        assert rt.query_event(done) is EventStatus.ACL_EVENT_STATUS_COMPLETE
        elapsed = rt.event_elapsed_time(start, done)
        assert elapsed > 0.0
        tail = _download(rocm, b + n - 4096, 4096)
        np.testing.assert_array_equal(tail, np.full(4096, 8, np.uint8))
    finally:
        for e in (start, done):
            rt.destroy_event(e)
        for s in (s1, s2):
            rt.destroy_stream(s)
        rt.free(a)
        rt.free(b)


def test_mem_info_matches_capabilities(rocm: Backend) -> None:
    free, total = rocm.runtime.get_mem_info(1)
    assert 0 < free <= total
    assert total == rocm.capabilities().memory_bytes


def test_out_of_memory_is_the_cann_code_naming_the_vendor_call(rocm: Backend) -> None:
    with pytest.raises(AclError) as err:
        rocm.runtime.malloc(1 << 50)
    assert err.value.code == RtErrorCode.ACL_ERROR_RT_MEMORY_ALLOCATION
    assert "Malloc" in err.value.message and ("cudaMalloc" in err.value.message or "hipMalloc" in err.value.message)


def test_memset_of_pinned_host_memory(rocm: Backend) -> None:
    rt = rocm.runtime
    ptr = rt.malloc_host(256)
    try:
        rt.memset(ptr, 256, 0x5A, 200)
        view = np.ctypeslib.as_array((ctypes.c_uint8 * 256).from_address(ptr))
        assert (view[:200] == 0x5A).all()
    finally:
        rt.free_host(ptr)


def test_the_pool_keeps_freed_temporaries_across_a_synchronisation(rocm: Backend) -> None:
    """The default pool's release threshold is raised (ACL_POOL_RELEASE_THRESHOLD): a freed 64 MiB stays reserved."""
    provider = rocm.provider  # type: ignore[attr-defined]
    if provider.platform != "nvidia" or not hasattr(provider, "rt"):
        pytest.skip("reads the CUDA runtime's pool attributes (the nvidia provider)")
    rt = provider.rt
    provider.set_device(0)
    pool = provider._check("cudaDeviceGetDefaultMemPool", rt.cudaDeviceGetDefaultMemPool(0))
    attrs = rt.cudaMemPoolAttr
    threshold = provider._check("get", rt.cudaMemPoolGetAttribute(pool, attrs.cudaMemPoolAttrReleaseThreshold))
    assert int(threshold) == 2**64 - 1
    stream = provider.stream_create()
    try:
        nbytes = 64 << 20
        provider.free_async(provider.malloc_async(nbytes, stream), stream)
        provider.stream_synchronize(stream)
        reserved = provider._check("get", rt.cudaMemPoolGetAttribute(pool, attrs.cudaMemPoolAttrReservedMemCurrent))
        assert int(reserved) >= nbytes  # CUDA's default threshold (0) would have released it at the synchronisation
    finally:
        provider.stream_destroy(stream)

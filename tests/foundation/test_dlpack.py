"""DLPack out of and into acl-core device arrays on the reference backend (host memory)."""

from __future__ import annotations

import gc
import sys
import threading

import numpy as np
import pytest

from acl_core import dlpack
from acl_core.dtypes import DataType
from acl_core.eager import DeviceArray, to_device


def test_numpy_reads_a_reference_array_without_a_copy() -> None:
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    arr = to_device(values, "reference")
    assert arr.__dlpack_device__() == (dlpack.KDL_CPU, 0)
    view = np.from_dlpack(arr)
    np.testing.assert_array_equal(view, values)
    pointer = arr.backend.dlpack_pointer(arr.address, arr.nbytes)
    assert view.ctypes.data == pointer  # the array's own memory
    view_before = view.copy()
    arr.backend.runtime.memset(arr.address, arr.nbytes, 0, arr.nbytes)
    assert not view.any() and view_before.any()  # a write through acl-core is seen by the consumer


def test_the_consumer_outlives_the_producer_object() -> None:
    arr = to_device(np.arange(6, dtype=np.int32), "reference")
    runtime = arr.backend.runtime
    address = arr.address
    before = dlpack.outstanding()
    view = np.from_dlpack(arr)
    assert dlpack.outstanding() == before + 1
    arr.free()  # deferred: NumPy still holds the capsule
    del arr
    gc.collect()
    assert runtime.memory.exact(address) is not None
    np.testing.assert_array_equal(view, np.arange(6, dtype=np.int32))
    del view
    gc.collect()
    assert dlpack.outstanding() == before
    assert runtime.memory.exact(address) is None  # freed once the consumer let go


def test_strided_and_offset_views_keep_their_layout() -> None:
    values = np.arange(20, dtype=np.float64).reshape(4, 5)
    for layout in ("padded", "transposed"):
        arr = to_device(values, "reference", layout=layout)
        np.testing.assert_array_equal(np.from_dlpack(arr), values)


def test_an_unconsumed_capsule_releases_the_array() -> None:
    arr = to_device(np.ones(4, np.float32), "reference")
    before = dlpack.outstanding()
    capsule = arr.__dlpack__()
    assert dlpack.outstanding() == before + 1
    del capsule
    gc.collect()
    assert dlpack.outstanding() == before


def test_a_thread_that_never_set_a_device_can_export() -> None:
    """A consumer on a fresh thread (no set_device) reads the array; it is not refused with CONTEXT_NULL."""
    arr = to_device(np.arange(4, dtype=np.float32), "reference")
    got: list[object] = []
    worker = threading.Thread(target=lambda: got.append(_read_or_error(arr)))
    worker.start()
    worker.join()
    assert got == [[0.0, 1.0, 2.0, 3.0]], got


def _read_or_error(arr: DeviceArray) -> object:
    try:
        return np.from_dlpack(arr).tolist()
    except Exception as exc:  # reported by the test, on the main thread
        return exc


def test_exports_and_frees_from_many_threads_free_the_memory_once() -> None:
    """Threads exporting, releasing and freeing one array at once: every export either sees the memory or is
    refused as freed, the memory is released exactly once, and only after the last capsule is gone."""
    arr = to_device(np.arange(64, dtype=np.float32), "reference")
    runtime = arr.backend.runtime
    address = arr.address
    frees: list[int] = []
    real_free = runtime.free

    def counted_free(ptr: int) -> None:
        frees.append(ptr)
        real_free(ptr)

    runtime.free = counted_free  # type: ignore[method-assign]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can: interleave the calls
    refused: list[str] = []
    views: list[np.ndarray] = []
    start = threading.Barrier(9)
    exported = threading.Event()  # the freer starts once exports have succeeded, so the race is a real one
    served: list[int] = []
    errors: list[BaseException] = []

    def exporter() -> None:
        start.wait()
        for _ in range(300):
            try:
                view = np.from_dlpack(arr)
                if float(view[63]) != 63.0:  # the memory is alive while a view holds it
                    raise AssertionError(f"a live view reads {view[63]}")
            except BufferError as exc:
                refused.append(str(exc))
                continue
            except BaseException as exc:  # the thread's failure, reported by the test
                errors.append(exc)
                return
            views.append(view)
            served.append(1)
            exported.set()
            views.pop()

    def freer() -> None:
        start.wait()
        exported.wait(timeout=30)
        for _ in range(50):
            arr.free()

    try:
        threads = [threading.Thread(target=exporter) for _ in range(8)] + [threading.Thread(target=freer)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        gc.collect()
        assert not errors, errors[:3]
        assert served, "no export succeeded: the threads never raced the free"
        assert frees == [address], frees
        assert runtime.memory.exact(address) is None and arr.address == 0
        assert all(msg == "the device array was freed" for msg in refused), set(refused)
    finally:
        sys.setswitchinterval(interval)
        runtime.free = real_free  # type: ignore[method-assign]


def test_torch_reads_and_writes_a_reference_array() -> None:
    torch = pytest.importorskip("torch")
    arr = to_device(np.arange(8, dtype=np.float32), "reference")
    t = torch.from_dlpack(arr)
    t.mul_(2)
    np.testing.assert_array_equal(arr.numpy(), 2 * np.arange(8, dtype=np.float32))
    bf = to_device(np.ones(3, np.float32), "reference", dtype=DataType.ACL_BF16)
    assert torch.from_dlpack(bf).dtype == torch.bfloat16


def test_import_into_the_reference_copies_host_data() -> None:
    host = np.arange(5, dtype=np.int64)
    arr = dlpack.from_dlpack(host, "reference")
    assert isinstance(arr, DeviceArray) and arr.dtype == DataType.ACL_INT64
    np.testing.assert_array_equal(arr.numpy(), host)


def test_unsupported_requests_are_buffer_errors() -> None:
    arr = to_device(np.ones(4, np.float32), "reference")
    with pytest.raises(BufferError):
        arr.__dlpack__(stream=1)  # a CPU array takes stream=None
    with pytest.raises(BufferError):
        arr.__dlpack__(copy=True)
    with pytest.raises(BufferError):
        arr.__dlpack__(dl_device=(dlpack.KDL_CUDA, 0))
    packed = to_device(np.zeros(4, np.int8), "reference", dtype=DataType.ACL_INT4)
    with pytest.raises(BufferError):
        packed.__dlpack__()

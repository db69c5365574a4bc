"""DLPack on the HIP backend over the fake provider: device capsules out, foreign device tensors in."""

from __future__ import annotations

import ctypes
import gc
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from acl_core import aclnn, dlpack
from acl_core.aclnn import execute, get_workspace_size
from acl_core.dtypes import DataType
from acl_core.eager import to_device
from acl_core.runtime import RangeKind
from acl_core.spec.ops import get_spec
from acl_rocm.backend import RocmBackend
from tests.rocm.fake_provider import FakeProvider


@pytest.fixture
def backend(tmp_path: Path) -> RocmBackend:
    b = RocmBackend(FakeProvider(), {"ACL_KERNEL_CACHE": str(tmp_path)})
    b.runtime.ensure_device(0)
    return b


class _Producer:
    """A foreign framework's CUDA tensor: a DLManagedTensor over memory it owns, with a counting deleter."""

    def __init__(self, values: np.ndarray) -> None:
        self.buffer = np.ascontiguousarray(values)
        self.deleted = 0
        self.streams: list[Any] = []
        self._shape = (ctypes.c_int64 * self.buffer.ndim)(*self.buffer.shape)
        self._managed = dlpack.DLManagedTensor()
        t = self._managed.dl_tensor
        t.data = self.buffer.ctypes.data
        t.device = dlpack.DLDevice(dlpack.KDL_CUDA, 0)
        t.ndim = self.buffer.ndim
        t.dtype = dlpack.DLDataType(2, 32, 1)
        t.shape = ctypes.cast(self._shape, ctypes.POINTER(ctypes.c_int64))
        t.strides = None
        t.byte_offset = 0

        @dlpack._Deleter
        def deleter(managed: Any) -> None:
            self.deleted += 1

        self._deleter = deleter
        self._managed.deleter = deleter

    def __dlpack_device__(self) -> tuple[int, int]:
        return (dlpack.KDL_CUDA, 0)

    def __dlpack__(self, stream: Any = None) -> Any:
        self.streams.append(stream)
        return dlpack._api.PyCapsule_New(
            ctypes.addressof(self._managed), ctypes.cast(dlpack._NAME, ctypes.c_char_p), None
        )


def test_a_foreign_device_tensor_is_an_operand_without_a_copy(backend: RocmBackend) -> None:
    producer = _Producer(np.arange(8, dtype=np.float32))
    arr = dlpack.from_dlpack(producer, backend)
    assert producer.streams == [1]  # the legacy default stream, which acl-core's blocking streams follow
    assert arr.address == producer.buffer.ctypes.data and arr.dtype == DataType.ACL_FLOAT
    rng = backend.runtime.memory.find(arr.address)
    assert rng is not None and rng.kind is RangeKind.EXTERNAL_DEVICE
    out = to_device(np.zeros(8, np.float32), backend)
    spec = get_spec("Add")
    size, ex = get_workspace_size(
        spec, [arr.tensor(), arr.tensor(), aclnn.aclCreateScalar(1.0, 0), out.tensor()], backend=backend
    )
    execute(spec, None, size, ex, None)
    launched = backend.provider.launches[-1]  # type: ignore[attr-defined]
    assert arr.address.to_bytes(8, "little") in launched.args
    arr.free()
    assert producer.deleted == 1
    assert not rng.live  # unregistered
    arr.free()
    assert producer.deleted == 1  # once


def test_a_library_retyping_the_shared_c_api_does_not_reach_imports(
    backend: RocmBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ctypes.pythonapi's functions are shared by the process: one typed for a py_object capsule broke the H200 tier."""
    shared = ctypes.pythonapi.PyCapsule_GetPointer
    monkeypatch.setattr(shared, "argtypes", [ctypes.py_object, ctypes.c_char_p])
    monkeypatch.setattr(shared, "restype", ctypes.c_void_p)
    producer = _Producer(np.arange(4, dtype=np.float32))
    arr = dlpack.from_dlpack(producer, backend)
    assert arr.address == producer.buffer.ctypes.data
    arr.free()
    assert producer.deleted == 1


def test_two_imports_of_one_tensor_share_the_registration(backend: RocmBackend) -> None:
    producer = _Producer(np.ones(4, np.float32))
    first = dlpack.from_dlpack(producer, backend)
    second = dlpack.from_dlpack(producer, backend)
    first.free()
    rng = backend.runtime.memory.find(second.address)
    assert rng is not None and rng.live  # still registered for the second array
    second.free()
    assert not rng.live and producer.deleted == 2


def test_a_device_capsule_round_trips_over_the_same_memory(backend: RocmBackend) -> None:
    arr = to_device(np.arange(6, dtype=np.float32).reshape(2, 3), backend)
    assert arr.__dlpack_device__() == (dlpack.KDL_CUDA, 0)
    back = dlpack.from_dlpack(arr, backend)
    assert back.address == arr.address and back.shape == (2, 3)
    assert dlpack.outstanding() >= 1
    address = arr.address
    arr.free()  # deferred while `back` holds the export
    assert backend.runtime.memory.exact(address) is not None
    np.testing.assert_array_equal(back.numpy(), np.arange(6, dtype=np.float32).reshape(2, 3))
    del arr
    back.free()
    gc.collect()
    assert backend.runtime.memory.exact(address) is None


def test_a_tensor_on_another_device_is_refused(backend: RocmBackend) -> None:
    producer = _Producer(np.ones(2, np.float32))
    producer.__dlpack_device__ = lambda: (dlpack.KDL_CUDA, 1)  # type: ignore[method-assign]
    with pytest.raises(BufferError, match="current device"):
        dlpack.from_dlpack(producer, backend)

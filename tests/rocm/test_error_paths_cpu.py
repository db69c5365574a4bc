"""Error paths of the rocm operators on a CPU: nothing stream-ordered leaks when a step fails midway.

:class:`FailingProvider` fails the n-th ``malloc_async`` of a call (as a full device would) and
tracks every stream-ordered allocation still live. Each operator's samples run once to count their
allocations, then once per allocation with that one failing: every run must raise the typed
allocation error and leave no temporary behind. The cuDNN path's handle use under threads and the
DLPack import's cleanup after a failed registration are checked with stand-ins.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from acl_core import dlpack, eager
from acl_core.dtypes import DataType as D
from acl_core.errors import AclError, RtErrorCode
from acl_core.formats import Format
from acl_core.spec.ops import get_spec
from acl_core.spec.runtime import CopyDirection
from acl_core.tensor import AclTensor, contiguous_strides
from acl_rocm.backend import RocmBackend
from acl_rocm.ops.attention_cudnn import CudnnSdpa, SdpaKey, _Built
from tests.rocm.fake_provider import FakeProvider
from tests.rocm.test_attention_cpu import _elementwise_model
from tests.rocm.test_attention_paths_cpu import PathsFake
from tests.rocm.test_dlpack_cpu import _Producer


class FailureInjection:
    """Mixed into a fake provider: the ``fail_on``-th stream-ordered allocation fails; live ones are tracked."""

    def __post_init__(self) -> None:
        super().__post_init__()  # type: ignore[misc]
        self.live_async: set[int] = set()
        self.calls = 0
        self.fail_on = 0
        self.stream_of: dict[int, int] = {}

    def malloc_async(self, nbytes: int, stream: int) -> int:
        self.calls += 1
        if self.calls == self.fail_on:
            raise AclError(RtErrorCode.ACL_ERROR_RT_MEMORY_ALLOCATION, f"injected failure of allocation {self.calls}")
        address = self.malloc(nbytes)  # type: ignore[attr-defined]
        self.live_async.add(address)
        self.stream_of[address] = stream
        return address

    def free_async(self, address: int, stream: int) -> None:
        self.live_async.remove(address)  # a KeyError here is a double free
        self.free(address)  # type: ignore[attr-defined]


class FailingProvider(FailureInjection, FakeProvider):
    """The fake provider (launches recorded) with failure injection."""


class FailingPaths(FailureInjection, PathsFake):
    """The attention-path fake (GEMMs and the softmax kernel executed on the host) with failure injection."""


@pytest.fixture
def failing(tmp_path: Path) -> Iterator[tuple[RocmBackend, FailingProvider]]:
    provider = FailingProvider(blas=True)
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp_path)})
    backend.runtime.ensure_device(0)
    yield backend, provider


def _samples(op: str, limit: int) -> list[dict[str, Any]]:
    samples = list(get_spec(op).samples(np.random.default_rng(3)))  # type: ignore[misc]
    return [dict(s.args) for s in samples[:limit]]


def _sweep(backend: RocmBackend, provider: FailureInjection, op: str, args: dict[str, Any]) -> int:
    """Run ``op`` once, then once per stream-ordered allocation with it failing; the allocations swept."""
    provider.calls, provider.fail_on = 0, 0
    eager.run(op, backend, **args)
    backend.runtime.synchronize_device()  # deferred device checks release their flags here
    assert not provider.live_async, f"{op}: a successful run left temporaries behind"
    count = provider.calls
    for n in range(1, count + 1):
        provider.calls, provider.fail_on = 0, n
        with pytest.raises(AclError) as info:
            eager.run(op, backend, **args)
        assert info.value.code == RtErrorCode.ACL_ERROR_RT_MEMORY_ALLOCATION, (op, n, info.value)
        provider.fail_on = 0
        backend.runtime.synchronize_device()
        assert not provider.live_async, f"{op}: allocation {n} of {count} failing leaked {len(provider.live_async)}"
    return count


@pytest.mark.parametrize(
    ("op", "limit"),
    [
        ("Convolution", 40),
        ("GroupedMatmulV5", 12),
        ("QuantMatmulV3", 8),
        ("QuantMatmulV5", 12),
        ("WeightQuantBatchMatmulV2", 6),
        ("TransMatmulWeight", 4),
        ("MatmulWeightNz", 4),
        ("IndexPutImpl", 6),
        ("MoeInitRouting", 4),
    ],
)
def test_a_failed_allocation_midway_frees_every_temporary(
    failing: tuple[RocmBackend, FailingProvider], op: str, limit: int
) -> None:
    backend, provider = failing
    swept = sum(_sweep(backend, provider, op, args) for args in _samples(op, limit))
    assert swept > 0, f"{op}: the samples allocated no temporaries, so nothing was swept"


def test_the_attention_blas_path_frees_its_temporaries_on_failure(tmp_path: Path) -> None:
    provider = FailingPaths(blas=True)
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp_path)})
    backend.runtime.ensure_device(0)
    model = _elementwise_model
    backend.elementwise.enqueue = lambda planned, stream: None if planned is None else model(planned)
    runner = backend.attention
    runner.path_override = "blas"
    rng = np.random.default_rng(5)
    q = rng.standard_normal((1, 2, 8, 16)).astype(np.float16)
    args = {
        "query": q,
        "key": q.copy(),
        "value": q.copy(),
        "realShiftOptional": None,
        "dropMaskOptional": None,
        "paddingMaskOptional": None,
        "attenMaskOptional": None,
        "prefixOptional": None,
        "scaleValue": 0.25,
        "keepProb": 1.0,
        "preTokens": 65536,
        "nextTokens": 65536,
        "headNum": 2,
        "inputLayout": "BNSD",
        "innerPrecise": 0,
        "sparseMode": 0,
    }
    assert _sweep(backend, provider, "FlashAttentionScore", args) == 3


# ----------------------------------------------------------------------------- cuDNN handle use
class _FakeCudnn:
    """The frontend calls the run path makes; set_stream dwells so that another thread can interleave."""

    def __init__(self, provider: FailingProvider) -> None:
        self.provider = provider
        self.current: dict[int, int] = {}
        self.runs = 0
        self.mismatches = 0

    def create_handle(self) -> int:
        return 7

    def set_stream(self, handle: int, stream: int) -> None:
        self.current[handle] = stream
        time.sleep(0.002)


class _Graph:
    """Executes by checking that the handle's stream is the one this call's temporaries were made on."""

    def __init__(self, module: _FakeCudnn) -> None:
        self.module = module

    def execute(self, pack: dict[str, int], workspace: int, handle: int) -> None:
        mine = self.module.provider.stream_of[pack["max"]]
        self.module.runs += 1
        if self.module.current[handle] != mine:
            self.module.mismatches += 1


def test_concurrent_cudnn_runs_execute_on_their_own_stream(failing: tuple[RocmBackend, FailingProvider]) -> None:
    backend, provider = failing
    module = _FakeCudnn(provider)
    sdpa = CudnnSdpa(backend, loader=lambda: module)
    assert sdpa.refusal() is None
    backend.elementwise.enqueue = lambda planned, stream: None
    strides = (16, 16, 8, 1)
    key = SdpaKey(0, D.ACL_FLOAT16, 1, 1, 1, 2, 2, 8, strides, strides, strides, strides, "none", 1.0)
    shape = (1, 1, 2, 8)
    host = np.zeros(shape, np.float32)
    view = AclTensor(shape, D.ACL_FLOAT, contiguous_strides(shape), 0, Format.ACL_FORMAT_ND, shape, host.ctypes.data)
    tensors = {name: view for name in ("q", "k", "v", "o", "smax", "ssum")}
    built = _Built(_Graph(module), {n: n for n in ("q", "k", "v", "o", "max", "sum")}, 0)
    errors: list[BaseException] = []

    def worker(stream: int) -> None:
        try:
            for _ in range(10):
                sdpa.run(built, key, tensors, stream)
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(s,)) for s in (11, 22, 33)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert module.runs == 30 and module.mismatches == 0
    assert not provider.live_async


# ----------------------------------------------------------------------------- DLPack import
def test_a_failed_dlpack_registration_hands_the_tensor_back(
    failing: tuple[RocmBackend, FailingProvider], monkeypatch: pytest.MonkeyPatch
) -> None:
    backend, _ = failing
    producer = _Producer(np.arange(4, dtype=np.float32))

    def refuse(address: int, nbytes: int, keepalive: object) -> None:
        raise AclError(RtErrorCode.ACL_ERROR_RT_PARAM_INVALID, "injected registration failure")

    monkeypatch.setattr(backend.runtime, "register_device", refuse)
    with pytest.raises(AclError, match="injected"):
        dlpack.from_dlpack(producer, backend)
    assert producer.deleted == 1  # the consumed capsule's deleter ran: the producer's tensor is not leaked
    assert backend.runtime.memory.find(producer.buffer.ctypes.data) is None


# ----------------------------------------------------------------------------- quantised matmul decode tables
def test_a_failed_decode_table_upload_frees_the_table(failing: tuple[RocmBackend, FailingProvider]) -> None:
    backend, provider = failing
    runner = backend.quant_matmul
    copy = provider.memcpy

    def refuse(dst: int, src: int, nbytes: int, direction: CopyDirection, stream: int | None) -> None:
        raise AclError(RtErrorCode.ACL_ERROR_RT_MEMORY_ALLOCATION, "injected upload failure")

    before = set(provider._buffers)
    provider.memcpy = refuse  # type: ignore[method-assign]
    with pytest.raises(AclError, match="injected upload failure"):
        runner._table(D.ACL_INT4)
    assert set(provider._buffers) == before  # the table's device memory went back
    provider.memcpy = copy  # type: ignore[method-assign]
    address = runner._table(D.ACL_INT4)
    assert runner._table(D.ACL_INT4) == address and set(provider._buffers) == before | {address}


_C_API = dlpack._api


class _NoCapsules:
    """The C API handle with PyCapsule_New failing, as it does when Python is out of memory."""

    def __getattr__(self, name: str) -> Any:
        return getattr(_C_API, name)

    def PyCapsule_New(self, *args: Any) -> Any:
        raise MemoryError("injected")


def test_a_failed_dlpack_export_leaves_the_array_freeable(
    failing: tuple[RocmBackend, FailingProvider], monkeypatch: pytest.MonkeyPatch
) -> None:
    backend, _ = failing
    arr = eager.to_device(np.arange(4, dtype=np.float32), backend)
    before = dlpack.outstanding()
    monkeypatch.setattr(dlpack, "_api", _NoCapsules())
    with pytest.raises(MemoryError):
        arr.__dlpack__()
    assert dlpack.outstanding() == before  # no export record left waiting for a deleter that never comes
    address = arr.address
    arr.free()  # not deferred: nothing holds an export
    assert backend.runtime.memory.exact(address) is None

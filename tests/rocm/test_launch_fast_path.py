"""The bound launch path of the HIP backend (issue 4): same launches as before, vendor calls bound once."""

from __future__ import annotations

import ctypes
import struct
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from acl_core import aclnn
from acl_core.aclnn import execute, get_workspace_size
from acl_core.eager import to_device
from acl_core.errors import AclError
from acl_core.spec.ops import get_spec
from acl_rocm.backend import RocmBackend
from acl_rocm.providers.nvidia import NvidiaProvider
from tests.rocm.fake_provider import FakeProvider


class _Status(int):
    """A CUresult / cudaError_t stand-in: an int enum member with a name, as cuda-bindings returns."""

    def __new__(cls, value: int, name: str) -> _Status:
        obj = super().__new__(cls, value)
        obj.name = name  # type: ignore[attr-defined]
        return obj


class _Bindings:
    """Just enough of cuda.bindings.driver / runtime for launch and get_device."""

    def __init__(self, launch_status: int = 0) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.status = _Status(launch_status, "CUDA_SUCCESS" if launch_status == 0 else "CUDA_ERROR_INVALID_VALUE")

    def cuLaunchKernel(self, *args: Any) -> tuple[Any]:
        self.calls.append(args)
        return (self.status,)

    def cudaGetDevice(self) -> tuple[Any, int]:
        return (_Status(0, "cudaSuccess"), 3)

    def cuGetErrorString(self, error: Any) -> tuple[Any, bytes]:
        return (_Status(0, "CUDA_SUCCESS"), b"invalid argument")


def _provider(bindings: _Bindings) -> NvidiaProvider:
    provider = object.__new__(NvidiaProvider)  # no cuda-bindings here: the bindings are stand-ins
    provider.drv = bindings
    provider.rt = bindings
    return provider


def test_nvidia_launcher_passes_the_unpacked_configuration_and_the_stream() -> None:
    bindings = _Bindings()
    keep = object()
    enqueue = _provider(bindings).launcher("fn", (4, 2, 1), (256, 1, 1), 64, 0x1000, keep)
    enqueue(7)
    enqueue(9)
    assert bindings.calls == [
        ("fn", 4, 2, 1, 256, 1, 1, 64, 7, 0x1000, 0),
        ("fn", 4, 2, 1, 256, 1, 1, 64, 9, 0x1000, 0),
    ]
    assert keep in (enqueue.__defaults__ or ())  # the argument memory lives as long as the callable


def test_nvidia_launch_failures_still_raise_the_cann_code() -> None:
    provider = _provider(_Bindings(launch_status=1))
    with pytest.raises(AclError, match="cuLaunchKernel failed: CUDA_ERROR_INVALID_VALUE"):
        provider.launcher("fn", (1, 1, 1), (32, 1, 1), 0, 0x10)(0)
    with pytest.raises(AclError, match="cuLaunchKernel failed"):
        provider.launch("fn", (1, 1, 1), (32, 1, 1), 0, 0, 0x10)


def test_nvidia_get_device_fast_path() -> None:
    assert _provider(_Bindings()).get_device() == 3


def test_the_default_launcher_goes_through_launch() -> None:
    calls: list[tuple[Any, ...]] = []
    provider = SimpleNamespace(launch=lambda *a: calls.append(a))
    enqueue = FakeProvider.launcher(provider, "fn", (1, 1, 1), (64, 1, 1), 0, 0x20)  # type: ignore[arg-type]
    enqueue(5)
    assert calls == [("fn", (1, 1, 1), (64, 1, 1), 0, 5, 0x20)]


def _pointers(args: list[bytes]) -> set[int]:
    return {struct.unpack("<Q", a)[0] for a in args if len(a) == 8}


def test_elementwise_binds_its_launch_once_per_signature_and_device(tmp_path: Path) -> None:
    provider = FakeProvider()
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp_path)})
    backend.runtime.ensure_device(0)
    a, b, out = (to_device(np.ones(32, np.float32), backend) for _ in range(3))
    spec = get_spec("Add")
    alpha = aclnn.aclCreateScalar(1.0, 0)
    size, executor = get_workspace_size(spec, [a.tensor(), b.tensor(), alpha, out.tensor()], backend=backend)
    assert aclnn.aclSetAclOpExecutorRepeatable(executor) == 0
    stream = backend.runtime.create_stream()
    bound = []
    original = provider.launcher

    def counting(*args: Any) -> Any:
        bound.append(args)
        return original(*args)

    provider.launcher = counting  # type: ignore[method-assign]
    before = len(provider.launches)
    for _ in range(3):
        execute(spec, None, size, executor, stream)
    assert len(bound) == 1, "the launch is bound once and reused"
    launches = provider.launches[before:]
    assert len(launches) == 3, "every execute launches"
    assert all(x.args == launches[0].args for x in launches)
    assert {a.address, b.address, out.address} <= _pointers(launches[0].args)
    assert launches[-1].stream == int(backend.runtime.stream(stream))  # type: ignore[call-overload]


def test_phase_2_relaunches_the_bound_launch_on_its_device_only(tmp_path: Path) -> None:
    provider = FakeProvider(devices=2)
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp_path)})
    backend.runtime.ensure_device(0)
    a, b, out = (to_device(np.ones(32, np.float32), backend) for _ in range(3))
    spec, alpha = get_spec("Add"), aclnn.aclCreateScalar(1.0, 0)
    args = [a.tensor(), b.tensor(), alpha, out.tensor()]
    dispatched: list[str] = []
    full_path = backend.launch

    def counting(call: Any) -> None:
        dispatched.append(call.spec.name)
        full_path(call)

    backend.launch = counting  # type: ignore[method-assign]
    stream = backend.runtime.create_stream()
    before = len(provider.launches)
    for _ in range(3):  # single-use executors of one signature, as a per-call caller makes them
        size, executor = get_workspace_size(spec, args, backend=backend)
        execute(spec, None, size, executor, stream)
    assert dispatched == ["Add"], "only the first call takes the full path; the others relaunch"
    launches = provider.launches[before:]
    assert len(launches) == 3 and all(x.args == launches[0].args for x in launches)
    assert launches[-1].stream == int(backend.runtime.stream(stream))  # type: ignore[call-overload]

    relaunch = executor.call.memo["acl_core.relaunch"]
    provider.set_device(1)  # another device is current: its module is not loaded there, so no relaunch
    assert relaunch(backend.runtime.stream(stream)) is False
    assert len(provider.launches) == before + 3


def test_rebinding_an_executor_drops_what_rocm_memoised_for_the_old_addresses(tmp_path: Path) -> None:
    """The rebinding contract (docs/PLUGINS.md): after aclSet*TensorAddr the next launch uses the new address."""
    provider = FakeProvider()
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp_path)})
    backend.runtime.ensure_device(0)
    a, b, out, out2 = (to_device(np.ones(32, np.float32), backend) for _ in range(4))
    spec = get_spec("Add")
    t_out = out.tensor()
    args = [a.tensor(), b.tensor(), aclnn.aclCreateScalar(1.0, 0), t_out]
    size, executor = get_workspace_size(spec, args, backend=backend)
    assert aclnn.aclSetAclOpExecutorRepeatable(executor) == 0
    stream = backend.runtime.create_stream()
    execute(spec, None, size, executor, stream)
    first = provider.launches[-1]
    old_memo = executor.call.memo
    assert "acl_core.relaunch" in old_memo and out.address in _pointers(first.args)
    assert aclnn.aclSetOutputTensorAddr(executor, 0, t_out, out2.address) == 0
    execute(spec, None, size, executor, stream)
    execute(spec, None, size, executor, stream)  # and the relaunch bound after the rebinding uses it too
    for launch in provider.launches[-2:]:
        assert out2.address in _pointers(launch.args) and out.address not in _pointers(launch.args)
    assert executor.call.memo is not old_memo


@pytest.mark.parametrize("platform", ["nvidia", "amd"])
def test_vendor_providers_raise_a_kernels_dynamic_shared_memory_limit(platform: str) -> None:
    """cuFuncSetAttribute / hipFuncSetAttribute with the max-dynamic-shared-memory attribute and the byte count."""
    from acl_rocm.providers.amd import AmdProvider

    calls: list[tuple[Any, ...]] = []
    prefix = "cu" if platform == "nvidia" else "hip"
    ok = _Status(0, "CUDA_SUCCESS" if platform == "nvidia" else "hipSuccess")
    attribute = "MAX_DYNAMIC_SHARED"
    module = SimpleNamespace(
        CUfunction_attribute=SimpleNamespace(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES=attribute),
        hipFuncAttribute=SimpleNamespace(hipFuncAttributeMaxDynamicSharedMemorySize=attribute),
        **{f"{prefix}FuncSetAttribute": lambda *args: calls.append(args) or (ok,)},
    )
    provider: NvidiaProvider | AmdProvider
    if platform == "nvidia":
        provider = object.__new__(NvidiaProvider)
        provider.drv = module
    else:
        provider = object.__new__(AmdProvider)
        provider.hip = module
    provider.set_max_dynamic_shared("fn", 69632)
    assert calls == [("fn", attribute, 69632)]


def test_the_fake_provider_refuses_launches_above_the_limit_a_kernel_was_given() -> None:
    provider = FakeProvider(shared_opt_in=100_000)
    source = 'extern "C" __global__ void __launch_bounds__(32) k(int x) {}'
    function = provider.module_function(source, "k")
    value = ctypes.c_int(1)
    args = (ctypes.c_void_p * 1)(ctypes.addressof(value))
    provider.launch(function, (1, 1, 1), (32, 1, 1), 49152, 0, ctypes.addressof(args))
    with pytest.raises(AclError, match="60000 bytes of shared memory"):
        provider.launch(function, (1, 1, 1), (32, 1, 1), 60000, 0, ctypes.addressof(args))
    with pytest.raises(AclError, match="fakeFuncSetAttribute"):
        provider.set_max_dynamic_shared(function, 100_001)
    provider.set_max_dynamic_shared(function, 60000)
    provider.launch(function, (1, 1, 1), (32, 1, 1), 60000, 0, ctypes.addressof(args))
    assert len(provider.launches) == 2

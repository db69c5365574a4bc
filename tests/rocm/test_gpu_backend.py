"""The rocm backend's measured capabilities and kernel cache on a real device (GPU tier)."""

from __future__ import annotations

import numpy as np
import pytest

from acl_core import aclnn
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.spec.ops import all_specs
from acl_core.tensor import AclTensor
from acl_rocm.compiler import KernelCache
from acl_rocm.kernels.ctypes_map import SUPPORTED
from acl_rocm.ops.elementwise import OPS
from acl_rocm.ops.matmul import OPS as MATMUL_OPS

pytestmark = pytest.mark.gpu


def test_capabilities_are_measured_from_the_device(rocm: Backend) -> None:
    caps = rocm.capabilities()
    provider = rocm.provider  # type: ignore[attr-defined]
    props = provider.device_properties(0)
    assert caps.architecture == props.arch.split(":")[0]
    assert caps.warp_size == props.warp_size
    assert caps.compute_units == props.compute_units > 0
    assert caps.device_count == provider.device_count() >= 1
    assert set(caps.dtypes) == set(SUPPORTED)
    blas = rocm.matmul.unavailable() is None  # type: ignore[attr-defined]
    assert set(OPS) <= set(rocm.kernels) and (set(MATMUL_OPS) <= set(rocm.kernels)) == blas
    expected_ops = {n for n, s in all_specs().items() if s.kernel_name in rocm.kernels}
    assert set(caps.ops) == expected_ops  # every family's registered kernels, nothing more
    arch = rocm.policy.arch  # type: ignore[attr-defined]
    fp8 = blas and arch.fp8_matmul_hw and arch.fp8_format == "ocp"  # the quant_matmul fp8 path (issue 6)
    assert not caps.mx_use_hw and caps.fp8_matmul_hw == fp8 and not caps.tf32_enabled


def test_capabilities_agree_with_an_independent_reader(rocm: Backend) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or rocm.capabilities().platform.value != "nvidia":
        pytest.skip("torch with CUDA is the independent reader on nvidia only")
    caps = rocm.capabilities()
    props = torch.cuda.get_device_properties(0)
    major, minor = torch.cuda.get_device_capability(0)
    assert caps.architecture == f"sm_{major}{minor}"
    assert caps.compute_units == props.multi_processor_count
    assert caps.memory_bytes == props.total_memory
    assert caps.device_name == props.name
    assert caps.tf32_hw == (major >= 8)


def test_kernel_cache_never_recompiles_in_a_warm_process(rocm: Backend, tmp_path) -> None:
    provider = rocm.provider  # type: ignore[attr-defined]
    calls: list[str] = []

    def compile_counting(source: str, name: str, options: tuple[str, ...], arch: str) -> bytes:
        calls.append(name)
        return provider.compile(source, name, options, arch)

    arch = rocm.properties.arch  # type: ignore[attr-defined]
    options = rocm.options  # type: ignore[attr-defined]
    source = 'extern "C" __global__ void acl_probe(int* p) { p[threadIdx.x] = threadIdx.x; }'
    first = KernelCache(compile_counting, arch, provider.compiler_version(), provider.platform, tmp_path)
    key, image = first.image(source, "acl_probe", options)
    first.image(source, "acl_probe", options)
    assert calls == ["acl_probe"] and first.stats.memory_hits == 1 and len(image) > 0
    second = KernelCache(compile_counting, arch, provider.compiler_version(), provider.platform, tmp_path)
    assert second.image(source, "acl_probe", options) == (key, image)
    assert calls == ["acl_probe"] and second.stats.disk_hits == 1
    provider.module_function(provider.module_load(image), "acl_probe")


def test_ops_never_copy_through_the_host(rocm: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    rt = rocm.runtime
    n = 4096
    a = rt.malloc(n * 4)
    out = rt.malloc(n * 4)
    ta = AclTensor.create((n,), D.ACL_FLOAT, (1,), 0, 2, (n,), a)
    tout = AclTensor.create((n,), D.ACL_FLOAT, (1,), 0, 2, (n,), out)
    rt.memset(a, n * 4, 0x3F, n * 4)  # every float is 0x3F3F3F3F
    alpha = aclnn.aclCreateScalar(2.0, int(D.ACL_FLOAT))
    provider = rocm.provider  # type: ignore[attr-defined]

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("an op copied memory through the runtime")

    try:
        size, executor, ret = aclnn.aclnnAddGetWorkspaceSize(ta, ta, alpha, tout)
        assert ret == 0 and size == 0
        monkeypatch.setattr(provider, "memcpy", forbidden)
        assert aclnn.aclnnAdd(None, 0, executor, None) == 0
        rt.synchronize_device()
    finally:
        monkeypatch.undo()
        host = np.empty(n, np.float32)
        rt.register_host(host.ctypes.data, host.nbytes, host)
        rt.memcpy(host.ctypes.data, host.nbytes, out, n * 4, 2)
        rt.unregister(host.ctypes.data)
        rt.free(a)
        rt.free(out)
    value = np.frombuffer(b"\x3f" * 4, np.float32)[0]
    np.testing.assert_allclose(host, np.full(n, 3 * value, np.float32), rtol=1e-6)

"""The shared code above the provider seam (driver, backend, op planning, capabilities) on a host-memory provider."""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

import numpy as np
import pytest

from acl_core import aclnn
from acl_core.aclnn import execute, get_workspace_size
from acl_core.dtypes import DataType as D
from acl_core.errors import AclError, AclnnError, BackendUnavailableError
from acl_core.formats import Format
from acl_core.spec.ops import get_spec
from acl_core.spec.runtime import MemcpyKind
from acl_core.tensor import AclTensor
from acl_rocm.backend import RocmBackend
from acl_rocm.kernels.ctypes_map import SUPPORTED
from acl_rocm.ops.elementwise import OPS, host_scalar
from tests.rocm.fake_provider import FakeProvider


@pytest.fixture
def fake(tmp_path: Path) -> tuple[RocmBackend, FakeProvider]:
    provider = FakeProvider()
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp_path)})
    backend.runtime.ensure_device(0)
    return backend, provider


def test_capabilities_come_from_the_provider_and_the_kernel_tables(fake: tuple[RocmBackend, FakeProvider]) -> None:
    backend, _ = fake
    caps = backend.capabilities()
    assert (caps.architecture, caps.warp_size, caps.compute_units, caps.device_name) == ("sm_90", 32, 132, "Fake GPU")
    assert caps.memory_bytes == 1 << 30 and caps.device_count == 1 and not caps.unified_memory
    assert set(caps.dtypes) == set(SUPPORTED)
    assert "Add" in caps.ops and "InplaceAdd" in caps.ops and "Matmul" not in caps.ops
    assert all(caps.supports_op(op) for op in OPS)
    assert caps.tf32_hw and not caps.tf32_enabled and not caps.mx_use_hw and not caps.fp8_matmul_hw
    assert caps.notes["arch_family"] == "Hopper"


def test_phase_one_claims_equal_the_capabilities_and_open_no_engine(fake: tuple[RocmBackend, FakeProvider]) -> None:
    backend, _ = fake
    for op in ("Add", "Abs", "Gather", "Cast"):
        dtypes, formats = backend.claim(op)
        assert backend._collectives is None, "phase 1 must not open the collective engine"
        assert dtypes and dtypes <= SUPPORTED and Format.ACL_FORMAT_ND in formats
    caps = backend.capabilities()
    assert all(backend.claim(op) == (caps.op_claim(op), frozenset(caps.formats)) for op in caps.ops)


def test_a_gfx1151_device_reports_wave32_and_no_tf32(tmp_path: Path) -> None:
    backend = RocmBackend(FakeProvider(arch="gfx1151"), {"ACL_KERNEL_CACHE": str(tmp_path)})
    caps = backend.capabilities()
    assert caps.architecture == "gfx1151" and caps.warp_size == 32 and not caps.tf32_hw
    assert "-DACL_WARP_SIZE=32" in backend.options


def test_mxfp8_force_hw_on_hopper_refuses_to_start(tmp_path: Path) -> None:
    with pytest.raises(BackendUnavailableError) as err:
        RocmBackend(FakeProvider(), {"MXFP8_FORCE_HW": "1", "ACL_KERNEL_CACHE": str(tmp_path)})
    assert "MXFP8_FORCE_HW=1" in err.value.reason and "sm_90" in err.value.reason


def test_no_device_is_a_reason_not_a_crash(tmp_path: Path) -> None:
    with pytest.raises(BackendUnavailableError) as err:
        RocmBackend(FakeProvider(devices=0), {"ACL_KERNEL_CACHE": str(tmp_path)})
    assert "device count 0" in err.value.reason


def test_runtime_contract_through_the_driver(fake: tuple[RocmBackend, FakeProvider]) -> None:
    backend, _ = fake
    rt = backend.runtime
    data = np.arange(100, dtype=np.uint8)
    dev = rt.malloc(100)
    pinned = rt.malloc_host(100)
    stream = rt.create_stream()
    try:
        rt.register_host(data.ctypes.data, 100, data)
        rt.memcpy(dev, 100, data.ctypes.data, 100, MemcpyKind.ACL_MEMCPY_HOST_TO_DEVICE)
        rt.memcpy_async(pinned, 100, dev, 100, MemcpyKind.ACL_MEMCPY_DEVICE_TO_HOST, stream)
        rt.synchronize_stream(stream)
        assert bytes((ctypes.c_uint8 * 100).from_address(pinned)) == data.tobytes()
        rt.memset_async(pinned, 100, 7, 10, stream)
        assert bytes((ctypes.c_uint8 * 10).from_address(pinned)) == b"\x07" * 10
        assert backend.driver.is_pinned(pinned + 50) and not backend.driver.is_pinned(dev)
        with pytest.raises(AclError) as err:
            rt.malloc(1 << 40)
        assert err.value.code == 207001
    finally:
        rt.unregister(data.ctypes.data)
        rt.destroy_stream(stream)
        rt.free(dev)
        rt.free_host(pinned)
    assert not backend.driver.is_pinned(pinned)


def _device_tensor(backend: RocmBackend, shape: tuple[int, ...], dtype: D, strides=None, offset: int = 0) -> AclTensor:
    storage = (offset + sum((s - 1) * st for s, st in zip(shape, strides))) + 1 if strides else int(np.prod(shape))
    address = backend.runtime.malloc(max(storage * dtype.info.storage_bits // 8, 1))
    return AclTensor.create(shape, dtype, strides, offset, 2, (storage,) if strides else shape, address)


def test_add_with_a_broadcast_strided_view_plans_one_launch(fake: tuple[RocmBackend, FakeProvider]) -> None:
    backend, provider = fake
    a = _device_tensor(backend, (4, 3), D.ACL_FLOAT16, strides=(1, 4), offset=2)  # transposed, offset 2
    b = _device_tensor(backend, (3,), D.ACL_FLOAT)
    out = _device_tensor(backend, (4, 3), D.ACL_FLOAT)
    alpha = aclnn.aclCreateScalar(0.5, int(D.ACL_DOUBLE))
    spec = get_spec("Add")
    size, executor = get_workspace_size(spec, [a, b, alpha, out], backend=backend)
    assert size == 0
    execute(spec, None, 0, executor, None)
    (launched,) = provider.launches
    assert launched.name.startswith("acl_ew_Add_") and launched.stream == 0
    assert launched.block == (256, 1, 1) and launched.grid == (1, 1, 1)
    meta, ptr_a, ptr_b, ptr_out, alpha_value = launched.args
    assert np.frombuffer(meta, np.int32).tolist() == [12, 4, 3, 1, 4, 0, 1, 3, 1]  # n, shape, strides a/b/out
    pointers = [int(np.frombuffer(p, np.uint64)[0]) for p in (ptr_a, ptr_b, ptr_out)]
    assert pointers == [a.data + 2 * 2, b.data, out.data]
    assert np.frombuffer(alpha_value, np.float32)[0] == 0.5
    src = launched.source
    assert "acl_h2f(p_self[o0])" in src and "typedef float T;" in src
    assert "const float r = (float)(self + alpha * other);" in src
    assert re.search(r"struct Meta \{ int n; int shape\[2\]; int stride\[3\]\[2\]; \};", src)
    assert "__restrict__" in src
    assert provider.compiled == [launched.name]
    execute(spec, None, 0, get_workspace_size(spec, [a, b, alpha, out], backend=backend)[1], None)
    assert provider.compiled == [launched.name] and len(provider.launches) == 2


def test_in_place_ops_do_not_promise_restrict_and_empty_ops_launch_nothing(fake) -> None:
    backend, provider = fake
    x = _device_tensor(backend, (8,), D.ACL_FLOAT)
    spec = get_spec("InplaceMuls")
    execute(
        spec,
        None,
        0,
        get_workspace_size(spec, [x, aclnn.aclCreateScalar(3, int(D.ACL_INT64))], backend=backend)[1],
        None,
    )
    assert "__restrict__" not in provider.launches[-1].source
    empty = _device_tensor(backend, (0, 3), D.ACL_FLOAT)
    spec = get_spec("InplaceZero")
    execute(spec, None, 0, get_workspace_size(spec, [empty], backend=backend)[1], None)
    assert len(provider.launches) == 1


def test_unsupported_dtypes_are_refused_with_161002(fake) -> None:
    backend, provider = fake
    x = _device_tensor(backend, (4,), D.ACL_COMPLEX64)
    spec = get_spec("Neg")
    out = _device_tensor(backend, (4,), D.ACL_COMPLEX64)
    with pytest.raises(AclnnError) as err:
        execute(spec, None, 0, get_workspace_size(spec, [x, out], backend=backend)[1], None)
    assert err.value.code == 161002 and "complex64" in err.value.message
    assert provider.launches == []


def test_host_scalars_follow_the_cast_rules() -> None:
    assert host_scalar(2.7, D.ACL_INT8) == 2 and host_scalar(-300.5, D.ACL_INT8) == -128
    assert host_scalar(float("nan"), D.ACL_INT32) == 0 and host_scalar(float("inf"), D.ACL_UINT8) == 255
    assert host_scalar(300, D.ACL_INT8) == 300  # integers wrap when the kernel stores them, like numpy's astype
    assert host_scalar(-1, D.ACL_UINT64) == 2**64 - 1 and host_scalar(2**63, D.ACL_INT64) == -(2**63)
    assert host_scalar(0.0, D.ACL_BOOL) is False and host_scalar(float("nan"), D.ACL_BOOL) is True
    assert host_scalar(3, D.ACL_FLOAT16) == 3.0 and host_scalar(True, D.ACL_FLOAT) == 1.0
    with pytest.raises(AclnnError):
        host_scalar(1 + 2j, D.ACL_FLOAT)

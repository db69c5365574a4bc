"""NpuFormatCast, TransMatmulWeight and MatmulWeightNz on the rocm backend, on the CPU.

The generated NZ copy kernels run in the g++ kernel emulator (``kernel_emulator.py``): every spec
sample is compared byte for byte with the reference (contiguous, padded and transposed placements of
the ND side), ND -> FRACTAL_NZ writes every storage byte (padding zeroed over garbage) for 1-, 2-, 4-byte
and 4-bit types, pinned-C0 formats and batches, a transposed NZ view converts back to ND, and
TransMatmulWeight rewrites a padded allocation or refuses a short one with 161002. MatmulWeightNz
(the gathered weight fed to the matmul family) is exact here because the fake provider's BLAS sums in
float64; its GPU tier compares it with the backend's own Mm.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from acl_core import aclnn, eager, nz
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.dtypes import from_numpy
from acl_core.errors import AclnnError
from acl_core.formats import Format
from acl_core.spec.ops import get_spec
from acl_core.spec.runtime import MemcpyKind
from acl_core.tensor import AclTensor
from acl_rocm.backend import RocmBackend
from acl_rocm.kernels.layout import NzCopy
from tests.rocm.kernel_emulator import EmulatedProvider, emulated_backend
from tests.rocm.test_quant_cpu import compare, same_bytes


@pytest.fixture(scope="module")
def emulated(tmp_path_factory: pytest.TempPathFactory) -> RocmBackend:
    """A backend whose kernels run on the CPU, with the fake provider's float64 host BLAS (for MatmulWeightNz)."""
    return emulated_backend(tmp_path_factory.mktemp("kc"), EmulatedProvider(blas=True))  # type: ignore[no-any-return]


@pytest.mark.parametrize("op", ["NpuFormatCast", "TransMatmulWeight", "MatmulWeightNz"])
def test_every_sample_matches_the_reference(emulated: RocmBackend, reference: Backend, op: str) -> None:
    spec = get_spec(op)
    assert spec.samples is not None
    for sample in spec.samples(np.random.default_rng(3)):
        compare(emulated, reference, op, sample.args, sample.note)


def _nz_destination(
    backend: Backend, shape: tuple[int, ...], dtype: D, fmt: Format
) -> tuple[AclTensor, eager.DeviceArray]:
    """An NZ destination over garbage-filled storage (0x55), sized by the NZ shape of ``fmt``."""
    storage_shape = nz.nz_shape(shape, nz.c0_for(dtype, fmt))
    count = int(np.prod(storage_shape))
    storage = eager.to_device(np.full(max(-(-count * dtype.info.storage_bits // 8), 1), 0x55, np.uint8), backend)
    return AclTensor.create(shape, dtype, None, 0, fmt, storage_shape, storage.address), storage


def _case_id(v: object) -> str:
    if isinstance(v, Format):
        return v.name
    if isinstance(v, tuple):
        return "x".join(map(str, v))
    return np.dtype(v).name  # type: ignore[call-overload]


CASES = [
    (np.float16, (2, 20, 37), Format.ACL_FORMAT_FRACTAL_NZ),
    (np.float32, (17, 9), Format.ACL_FORMAT_FRACTAL_NZ),
    (np.int8, (33, 70), Format.ACL_FORMAT_FRACTAL_NZ),
    (ml_dtypes.float8_e4m3fn, (2, 3, 18, 40), Format.ACL_FORMAT_FRACTAL_NZ_C0_16),
    (ml_dtypes.float4_e2m1fn, (17, 71), Format.ACL_FORMAT_FRACTAL_NZ),
]


@pytest.mark.parametrize("np_dtype,shape,fmt", CASES, ids=lambda v: _case_id(v))
def test_nd_to_nz_writes_every_storage_byte(
    emulated: RocmBackend, reference: Backend, np_dtype: type, shape: tuple[int, ...], fmt: Format
) -> None:
    rng = np.random.default_rng(1)
    nd = rng.uniform(-6, 6, shape).astype(np_dtype)
    raws = []
    for backend in (reference, emulated):
        dst, storage = _nz_destination(backend, shape, from_numpy(nd.dtype), fmt)
        eager.run("NpuFormatCast", backend, srcTensor=nd, dstTensor=dst)
        raws.append(storage.storage_bytes())
    same_bytes({"storage": raws[1]}, {"storage": raws[0]}, f"{np.dtype(np_dtype).name} {shape} {fmt.name}")


@pytest.mark.parametrize("transposed", [False, True])
def test_nz_to_nd_of_plain_and_transposed_views(emulated: RocmBackend, reference: Backend, transposed: bool) -> None:
    rng = np.random.default_rng(2)
    b = rng.standard_normal((2, 40, 23)).astype(np.float16)
    outs = []
    for backend in (reference, emulated):
        src = nz.to_device_nz(b, backend, transposed=transposed)
        outs.append(eager.run("NpuFormatCast", backend, srcTensor=src, layout="padded", guard=True))
    same_bytes(outs[1], outs[0], f"transposed={transposed}")
    np.testing.assert_array_equal(outs[1]["dstTensor"], b)


@pytest.mark.parametrize("transposed", [False, True])
def test_matmul_weight_nz_gathers_the_weight(emulated: RocmBackend, reference: Backend, transposed: bool) -> None:
    """The NZ weight (plain or a transposed view) is gathered to ND; the host BLAS makes the product exact."""
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((5, 40)).astype(np.float16), rng.standard_normal((40, 23)).astype(np.float16)
    outs = []
    for backend in (reference, emulated):
        mat2 = nz.to_device_nz(b, backend, transposed=transposed)
        outs.append(eager.run("MatmulWeightNz", backend, self=a, mat2=mat2, cubeMathType=0, guard=True))
    same_bytes(outs[1], outs[0], f"transposed={transposed}")


def test_trans_matmul_weight_into_a_padded_allocation(emulated: RocmBackend, reference: Backend) -> None:
    w = np.random.default_rng(4).integers(-100, 100, (20, 40)).astype(np.int8)
    size, ret = aclnn.aclnnCalculateMatmulWeightSizeV2(list(w.shape), int(D.ACL_INT8))
    assert ret == 0
    results = []
    for backend in (reference, emulated):
        with pytest.raises(AclnnError) as info:  # an ND-sized allocation cannot hold the padded tiles
            eager.run("TransMatmulWeight", backend, mmWeightRef=w)
        assert info.value.code == 161002
        storage = eager.to_device(np.full(size, 0x55, np.uint8), backend)
        host = eager.to_device(w, backend)
        backend.runtime.memcpy(
            storage.address, w.nbytes, host.address, w.nbytes, MemcpyKind.ACL_MEMCPY_DEVICE_TO_DEVICE
        )
        t = AclTensor.create(w.shape, D.ACL_INT8, None, 0, Format.ACL_FORMAT_ND, (size,), storage.address)
        eager.run("TransMatmulWeight", backend, mmWeightRef=t)
        assert t.format == Format.ACL_FORMAT_FRACTAL_NZ and t.storage_dims == (2, 2, 16, 32)
        results.append(storage.storage_bytes())
    same_bytes({"storage": results[1]}, {"storage": results[0]}, "padded TransMatmulWeight")
    np.testing.assert_array_equal(results[1].view(np.int8).reshape(2, 2, 16, 32), nz.nd_to_nz(w, 32))


def test_sources_move_raw_bits() -> None:
    four = NzCopy(4, 0, True).source()
    assert "acl_nib_set(dst, nz_base + q, v);" in four and "acl_nib_get(src," in four
    eight = NzCopy(8, 2, False, True).source()
    assert "unsigned char* dst" in eight and "float" not in eight.split("FRACTAL_NZ copy", 1)[1]

"""NpuFormatCast (ND <-> FRACTAL_NZ), TransMatmulWeight and MatmulWeightNz on the GPU (GPU tier).

Every spec sample runs contiguous, padded and transposed with guards against the reference; ND -> NZ
over garbage-filled storage must write every byte (zero padding) for every element width, 4-bit
included, pinned-C0 formats and large batched tensors (many blocks); NaN payloads survive the copy;
a transposed NZ view converts back to ND; TransMatmulWeight rewrites a padded allocation and refuses
a short one; MatmulWeightNz equals, bit for bit, the backend's own Mm on the ND weight (the same GEMM
on a gathered operand) and the reference within float16 rounding.
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
from tests.conftest import assert_close
from tests.rocm.prefill import filled
from tests.rocm.test_gpu_quant import check, same
from tests.rocm.test_layout_cpu import _case_id

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("op", ["NpuFormatCast", "TransMatmulWeight", "MatmulWeightNz"])
def test_every_sample(rocm: Backend, reference: Backend, op: str) -> None:
    spec = get_spec(op)
    assert spec.samples is not None
    for sample in spec.samples(np.random.default_rng(23)):
        if op == "MatmulWeightNz":  # a GEMM: within float rounding of the float64 reference
            got = eager.run(op, rocm, guard=True, **sample.args)["out"]
            want = eager.run(op, reference, **sample.args)["out"]
            assert_close(got.astype(np.float64), want.astype(np.float64), atol=2e-2, rtol=2e-2)
            continue
        check(rocm, reference, op, sample.args, sample.note)


def _nz_storage(backend: Backend, nd: np.ndarray, fmt: Format) -> bytes:
    dtype = from_numpy(nd.dtype)
    shape = nz.nz_shape(nd.shape, nz.c0_for(dtype, fmt))
    count = int(np.prod(shape))
    storage = eager.to_device(np.full(max(-(-count * dtype.info.storage_bits // 8), 1), 0x55, np.uint8), backend)
    dst = AclTensor.create(nd.shape, dtype, None, 0, fmt, shape, storage.address)
    eager.run("NpuFormatCast", backend, srcTensor=nd, dstTensor=dst)
    return storage.storage_bytes()


@pytest.mark.parametrize(
    "np_dtype,shape,fmt",
    [
        (np.float16, (3, 1000, 777), Format.ACL_FORMAT_FRACTAL_NZ),
        (np.float32, (513, 1031), Format.ACL_FORMAT_FRACTAL_NZ),
        (ml_dtypes.bfloat16, (4, 2, 100, 65), Format.ACL_FORMAT_FRACTAL_NZ_C0_32),
        (np.int8, (1025, 333), Format.ACL_FORMAT_FRACTAL_NZ),
        (np.uint8, (7, 5), Format.ACL_FORMAT_FRACTAL_NZ),
        (ml_dtypes.float8_e4m3fn, (600, 97), Format.ACL_FORMAT_FRACTAL_NZ),
        (ml_dtypes.float4_e2m1fn, (301, 257), Format.ACL_FORMAT_FRACTAL_NZ),
        (np.int32, (2, 50, 9), Format.ACL_FORMAT_FRACTAL_NZ_C0_16),
    ],
    ids=_case_id,
)
def test_nd_to_nz_and_back(
    rocm: Backend, reference: Backend, np_dtype: type, shape: tuple[int, ...], fmt: Format
) -> None:
    rng = np.random.default_rng(8)
    nd = rng.uniform(-6, 6, shape).astype(np_dtype)
    if np_dtype == np.float32:
        nd.view(np.uint32)[0, :3] = [0x7FC00001, 0xFFC12345, 0x80000000]  # NaN payloads and -0.0 kept
    got, want = _nz_storage(rocm, nd, fmt), _nz_storage(reference, nd, fmt)
    same({"storage": got}, {"storage": want}, f"{np.dtype(np_dtype).name} {shape} {fmt.name}")
    for transposed in (False, True):
        src = nz.to_device_nz(nd, rocm, format=fmt, transposed=transposed)
        back = eager.run("NpuFormatCast", rocm, srcTensor=src, layout="padded", guard=True)["dstTensor"]
        assert back.view(np.uint8).tolist() == nd.view(np.uint8).tolist()


def test_trans_matmul_weight_into_a_padded_allocation(rocm: Backend, reference: Backend) -> None:
    w = np.random.default_rng(4).integers(-100, 100, (200, 400)).astype(np.int8)
    size, ret = aclnn.aclnnCalculateMatmulWeightSizeV2(list(w.shape), int(D.ACL_INT8))
    assert ret == 0
    results = []
    for backend in (reference, rocm):
        with pytest.raises(AclnnError) as info:
            eager.run("TransMatmulWeight", backend, mmWeightRef=w[:20, :40].copy())
        assert info.value.code == 161002
        storage = eager.to_device(np.full(size, 0x55, np.uint8), backend)
        host = eager.to_device(w, backend)
        backend.runtime.memcpy(
            storage.address, w.nbytes, host.address, w.nbytes, MemcpyKind.ACL_MEMCPY_DEVICE_TO_DEVICE
        )
        t = AclTensor.create(w.shape, D.ACL_INT8, None, 0, Format.ACL_FORMAT_ND, (size,), storage.address)
        eager.run("TransMatmulWeight", backend, mmWeightRef=t)
        assert t.format == Format.ACL_FORMAT_FRACTAL_NZ
        results.append(storage.storage_bytes())
    same({"storage": results[1]}, {"storage": results[0]}, "TransMatmulWeight")


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("np_dtype", [np.float16, ml_dtypes.bfloat16, np.float32], ids=lambda d: np.dtype(d).name)
def test_matmul_weight_nz_is_mm_on_the_gathered_weight(
    rocm: Backend, reference: Backend, np_dtype: type, transposed: bool
) -> None:
    rng = np.random.default_rng(9)
    a = rng.uniform(-1, 1, (300, 512)).astype(np_dtype)
    b = rng.uniform(-1, 1, (512, 333)).astype(np_dtype)
    want = eager.run("MatmulWeightNz", reference, self=a, mat2=nz.to_device_nz(b, reference), cubeMathType=0)["out"]
    mat2 = nz.to_device_nz(b, rocm, transposed=transposed)
    # NaN-filled outputs: the previous parametrisation's result may sit in the block cudaMalloc hands back
    got = eager.run("MatmulWeightNz", rocm, self=a, mat2=mat2, cubeMathType=0, out=filled(want))["out"]
    dense = eager.run("Mm", rocm, self=a, mat2=b, cubeMathType=0, out=filled(want))["out"]
    np.testing.assert_array_equal(got.view(np.uint8), dense.view(np.uint8))
    assert_close(got.astype(np.float64), want.astype(np.float64), atol=5e-2, rtol=2e-2)

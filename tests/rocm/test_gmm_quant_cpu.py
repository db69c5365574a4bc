"""The grouped quantised GEMMs on the rocm backend, on the CPU (kernel emulator).

Every spec sample of the five ops (the NZ forms through their base's kernels) runs in the g++ kernel
emulator and is compared byte for byte with the reference, contiguous and through padded (offset,
strided) and transposed input views with guarded outputs: the integer GEMM is exact and the epilogues
follow the reference's FLOAT32 operations one for one, so INT8, FLOAT32 and FLOAT16 outputs agree
exactly. Error samples are refused with the reference's codes; a bad device group list raises 161002
at synchronisation and leaves the outputs unwritten; calls replay bit for bit under stream capture.
"""

from __future__ import annotations

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.errors import AclnnError
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.gmm_quant import SPECS
from acl_rocm.backend import RocmBackend
from acl_rocm.ops.gmm_quant import OPS
from tests.rocm.against_reference import assert_errors_match_reference
from tests.rocm.capture_harness import OpCall, compare_replay
from tests.rocm.fake_provider import FakeProvider
from tests.rocm.test_quant_cpu import compare

ALL = [s.name for s in SPECS]


def test_rocm_claims_every_op_of_the_family(tmp_path_factory: pytest.TempPathFactory) -> None:
    backend = RocmBackend(FakeProvider(), {"ACL_KERNEL_CACHE": str(tmp_path_factory.mktemp("kc"))})
    backend.runtime.ensure_device(0)
    assert set(ALL) <= set(backend.capabilities().ops)  # no BLAS needed
    assert set(OPS) < set(ALL)  # the NZ forms run their base's kernels


@pytest.mark.parametrize("op", ALL)
def test_every_sample_matches_the_reference(emulated: Backend, reference: Backend, op: str) -> None:
    spec = get_spec(op)
    assert spec.samples is not None
    samples = list(spec.samples(np.random.default_rng(11)))
    assert samples
    for sample in samples:
        compare(emulated, reference, op, sample.args, sample.note)


@pytest.mark.parametrize("kernel", ["mma", "simt"])
@pytest.mark.parametrize("op", ["GroupedMatmulSwigluQuantV2", "QuantGroupedMatmulDequant"])
def test_each_integer_gemm_kernel_matches_the_reference(
    emulated: RocmBackend, reference: Backend, op: str, kernel: str
) -> None:
    """``ACL_GMM_KERNEL`` forced to each kernel (the matrix-instruction one on the layer's software path here): every
    sample bit for bit, and the INT8 GEMM reports the kernel it ran."""
    spec = get_spec(op)
    assert spec.samples is not None
    runner = emulated.grouped_matmul
    runner.forced_kernel = kernel
    try:
        for sample in spec.samples(np.random.default_rng(12)):
            runner.last_path = None
            compare(emulated, reference, op, sample.args, sample.note)
            assert runner.last_path in (kernel, None), sample.note  # None: M = 0, nothing launched
    finally:
        runner.forced_kernel = None


@pytest.mark.parametrize("op", ALL)
def test_error_samples_match_the_reference(emulated: Backend, reference: Backend, op: str) -> None:
    assert_errors_match_reference(emulated, reference, op)


def _gmmsq(rng: np.random.Generator, group_list: list[int], list_type: int) -> dict:
    m, k, n = 8, 32, 16
    return {
        "x": rng.integers(-127, 128, (m, k)).astype(np.int8),
        "weight": [rng.integers(-127, 128, (2, k, n)).astype(np.int8)],
        "weightScale": [rng.uniform(0.01, 0.05, (2, n)).astype(np.float32)],
        "weightAssistMatrix": None,
        "bias": None,
        "xScale": rng.uniform(0.01, 0.03, m).astype(np.float32),
        "smoothScale": None,
        "groupList": np.array(group_list, np.int64),
        "dequantMode": 0,
        "dequantDtype": 28,
        "quantMode": 0,
        "groupListType": list_type,
        "tuningConfig": None,
    }


BAD_LISTS = [([3, 2], 0, "decreasing"), ([3, 9], 0, "past M"), ([-1, 3], 1, "negative count"), ([5, 4], 1, "sum > M")]


@pytest.mark.parametrize(("group_list", "list_type", "note"), BAD_LISTS, ids=[n for *_, n in BAD_LISTS])
def test_a_bad_group_list_fails_at_synchronisation_and_writes_nothing(
    emulated: Backend, reference: Backend, group_list: list[int], list_type: int, note: str
) -> None:
    args = _gmmsq(np.random.default_rng(0), group_list, list_type)
    with pytest.raises(AclnnError) as err:
        eager.run("GroupedMatmulSwigluQuantV2", reference, **args)
    assert err.value.code == 161002
    y = eager.empty((8, 8), D.ACL_INT8, emulated)
    s = eager.empty((8,), D.ACL_FLOAT, emulated)
    for t in (y, s):
        emulated.runtime.memset(t.address, t.nbytes, eager.SENTINEL, t.nbytes)
    before = (y.storage_bytes().copy(), s.storage_bytes().copy())
    with pytest.raises(AclnnError) as err:
        eager.run("GroupedMatmulSwigluQuantV2", emulated, **args, output=y, outputScale=s)
    assert err.value.code == 161002, note
    np.testing.assert_array_equal(y.storage_bytes(), before[0], err_msg=f"{note}: output written")
    np.testing.assert_array_equal(s.storage_bytes(), before[1], err_msg=f"{note}: outputScale written")


def test_dequant_bad_group_list_writes_nothing(emulated: Backend) -> None:
    rng = np.random.default_rng(1)
    args = {
        "x": rng.uniform(-2, 2, (6, 16)).astype(np.float16),
        "weight": rng.integers(-127, 128, (2, 16, 16)).astype(np.int8),
        "weightScale": rng.uniform(0.01, 0.05, (2, 16)).astype(np.float32),
        "groupList": np.array([4, 2], np.int64),
        "biasOptional": None,
        "xScaleOptional": None,
        "xOffsetOptional": None,
        "smoothScaleOptional": None,
        "xQuantMode": "pertoken",
        "transposeWeight": True,
    }
    out = eager.empty((6, 16), D.ACL_FLOAT16, emulated)
    emulated.runtime.memset(out.address, out.nbytes, eager.SENTINEL, out.nbytes)
    before = out.storage_bytes().copy()
    with pytest.raises(AclnnError) as err:
        eager.run("QuantGroupedMatmulDequant", emulated, **args, out=out)
    assert err.value.code == 161002
    np.testing.assert_array_equal(out.storage_bytes(), before)


def test_calls_replay_under_capture(emulated: RocmBackend) -> None:
    calls = []
    for op in ("GroupedMatmulSwigluQuantWeightNzV2", "QuantGroupedMatmulDequantWeightNZ"):
        sample = next(iter(get_spec(op).samples(np.random.default_rng(3))))
        calls.append(OpCall(emulated, op, dict(sample.args)))
    stream = emulated.runtime.create_stream()
    try:
        graph = compare_replay(calls, stream)
        emulated.driver.graph_destroy(graph)
    finally:
        for c in calls:
            c.free()
        emulated.runtime.destroy_stream(stream)

"""The MLA family (MlaPrologV2WeightNz / V3) on the rocm backend above the provider seam, on the CPU.

Its launches (the NZ weight gathers, KvRmsNormRopeCache's row kernel for c^Q and the caches, the slot
check, the mode-3 rotary kernel, the copies) run in the g++ kernel emulator and its matmuls on the fake
provider's float64 host BLAS: every sample against the reference under the op's accuracy class,
contiguous and under non-contiguous layouts, every error sample with the reference's code, and a slot
only the device sees refused at synchronisation with both caches as they were.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from acl_conformance.compare import worst_ulp
from acl_core import eager
from acl_core.backend import Backend
from acl_core.errors import AclCoreError, AclnnError
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.mla import mla_case
from acl_rocm.backend import RocmBackend
from tests.rocm.against_reference import assert_matches_reference
from tests.rocm.capture_harness import OpCall, compare_replay
from tests.rocm.kernel_emulator import EmulatedProvider, emulated_backend

OPS = ["MlaPrologV2WeightNz", "MlaPrologV3WeightNz"]


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Backend:
    """A backend whose kernels run on the CPU, with the fake provider's float64 host BLAS."""
    path: Path = tmp_path_factory.mktemp("kc")
    return emulated_backend(path, EmulatedProvider(blas=True))  # type: ignore[no-any-return]


def test_the_family_and_its_version_are_claimed(backend: Backend) -> None:
    assert set(OPS) <= set(backend.capabilities().ops)


@pytest.mark.parametrize("op", OPS)
def test_every_sample_matches_the_reference_when_emulated(backend: Backend, reference: Backend, op: str) -> None:
    spec = get_spec(op)
    assert spec.samples is not None
    samples = list(spec.samples(np.random.default_rng(2024)))
    if op == "MlaPrologV3WeightNz":  # V2's samples again, then the scaled ones: V2's kernel runs both
        samples = [samples[0], *samples[-2:]]
    assert samples
    for i, sample in enumerate(samples):
        layouts = ("contiguous", "transposed", "padded") if i % 2 == 0 else ("contiguous",)
        for layout in layouts:
            assert_matches_reference(backend, reference, op, dict(sample.args), layout, sample.note)


@pytest.mark.parametrize("op", OPS)
def test_error_samples_give_the_reference_codes(backend: Backend, reference: Backend, op: str) -> None:
    spec = get_spec(op)
    assert spec.error_samples is not None
    for case in spec.error_samples(np.random.default_rng(1)):
        codes = []
        for b in (reference, backend):
            with pytest.raises(AclCoreError) as err:
                eager.run(op, b, **case.args)
            codes.append(getattr(err.value, "code", None))
        assert codes == [case.code, case.code], f"{op} [{case.note}]: {codes}"


@pytest.mark.parametrize("mode", ["PA_BSND", "PA_NZ"])
def test_a_refused_slot_leaves_both_caches_as_they_were(backend: Backend, mode: str) -> None:
    args = mla_case(np.random.default_rng(4), (3,), mode=mode)
    kv, kr = (eager.to_device(args.pop(n), backend) for n in ("kvCacheRef", "krCacheRef"))
    before = (kv.numpy().copy(), kr.numpy().copy())
    args["cacheIndex"] = np.array([0, 48, 5], np.int64)
    with pytest.raises(AclnnError) as err:
        eager.run("MlaPrologV2WeightNz", backend, op_args={**args, "kvCacheRef": kv, "krCacheRef": kr})
    assert err.value.code == 161002 and "cacheIndex" in str(err.value)
    np.testing.assert_array_equal(kv.numpy(), before[0])
    np.testing.assert_array_equal(kr.numpy(), before[1])


def test_pa_nz_rows_land_where_the_reference_puts_them(backend: Backend, reference: Backend) -> None:
    """Exact cache bits (the kv rows are one double-computed rounding on both sides)."""
    args = mla_case(np.random.default_rng(5), (6,), hckv=48, dr=32, blocks=2, block_size=32, mode="PA_NZ")
    got = eager.run("MlaPrologV2WeightNz", backend, op_args=args)
    want = eager.run("MlaPrologV2WeightNz", reference, op_args=args)
    changed = got["kvCacheRef"] != args["kvCacheRef"]
    assert changed.sum() >= 5 * 48 - 5  # five tokens written (one pads)
    np.testing.assert_array_equal(changed, want["kvCacheRef"] != args["kvCacheRef"])


def test_with_a_float64_blas_every_output_is_within_one_ulp(backend: Backend, reference: Backend) -> None:
    """The class allows for float32 GEMM accumulation; with the host BLAS in float64 the composition must land
    within one bf16 ulp everywhere (the rotary kernel computes in float32, the row kernel in double)."""
    spec = get_spec("MlaPrologV2WeightNz")
    assert spec.samples is not None
    for sample in spec.samples(np.random.default_rng(6)):
        got = eager.run("MlaPrologV2WeightNz", backend, op_args=dict(sample.args))
        want = eager.run("MlaPrologV2WeightNz", reference, op_args=dict(sample.args))
        for name, value in want.items():
            assert got[name].dtype == value.dtype and got[name].shape == value.shape, name
            worst = worst_ulp(got[name], value)
            assert worst <= 1, f"[{sample.note}] {name}: {worst} ulp"


@pytest.mark.parametrize("mode", ["PA_BSND", "PA_NZ"])
def test_a_captured_call_replays_as_it_runs_eagerly(backend: Backend, mode: str) -> None:
    """Stream-ordered temporaries, no host round trip: the capture records, each replay equals an eager run."""
    assert isinstance(backend, RocmBackend)
    args = mla_case(np.random.default_rng(9), (2, 3), mode=mode)
    call = OpCall(backend, "MlaPrologV3WeightNz", {**args, "qcQrScale": 0.5, "kcScale": 2.0})
    stream = backend.runtime.create_stream()
    try:
        graph = compare_replay([call], stream)
        backend.driver.graph_destroy(graph)
    finally:
        call.free()
        backend.runtime.destroy_stream(stream)

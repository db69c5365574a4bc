"""The GEMM variants on the rocm backend above the provider seam, on a CPU.

Their kernels (NZ gathers, the grouped GEMM, the quantised matmuls' operand and epilogue kernels,
elementwise gathers) are built with g++ (``kernel_emulator.py``) and the BLAS calls run on the fake
provider's float64 host BLAS, so every spec sample of every variant is compared with the reference
without a GPU, contiguous and under a non-contiguous layout, and every error sample is refused with
the reference's code.
"""

from __future__ import annotations

import numpy as np
import pytest

from acl_core import eager, nz
from acl_core.backend import Backend
from acl_core.spec.ops import get_spec
from tests.conftest import assert_close
from tests.rocm.against_reference import assert_errors_match_reference
from tests.rocm.kernel_emulator import EmulatedProvider, emulated_backend

OPS = [
    "TransposeBatchMatMul",
    "TransposeQuantBatchMatMul",
    "QuantMatmulWeightNz",
    "WeightQuantBatchMatmulNz",
    "GroupedMatmulWeightNz",
    "GroupedMatmul",
]


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Backend:
    """A backend whose kernels run on the CPU, with the fake provider's float64 host BLAS."""
    return emulated_backend(tmp_path_factory.mktemp("kc"), EmulatedProvider(blas=True))  # type: ignore[no-any-return]


def _outputs(result: dict) -> list[tuple[str, np.ndarray]]:
    found = []
    for name, value in result.items():
        for i, v in enumerate(value if isinstance(value, list) else [value]):
            found.append((f"{name}[{i}]", v))
    return found


def _compare(backend: Backend, reference: Backend, op: str, args: dict, layout: str, note: str) -> None:
    expected = eager.run(op, reference, **args)
    actual = eager.run(op, backend, layout=layout, guard=True, **args)
    for (name, a), (_, e) in zip(_outputs(actual), _outputs(expected), strict=True):
        assert a.dtype == e.dtype and a.shape == e.shape, f"{op} [{note}] {name}"
        try:
            if a.dtype.kind in "iub":
                np.testing.assert_array_equal(a, e)
            else:  # float32-accumulated GEMMs against the float64 reference: within the dtype's rounding
                assert_close(a, e)
        except AssertionError as exc:
            raise AssertionError(f"{op} [{note}] layout={layout} {name}\n{exc}") from None


def test_the_variants_are_claimed(backend: Backend) -> None:
    caps = backend.capabilities()
    assert set(OPS) <= set(caps.ops)


@pytest.mark.parametrize("op", OPS)
def test_every_sample_matches_the_reference_when_emulated(backend: Backend, reference: Backend, op: str) -> None:
    for i, sample in enumerate(get_spec(op).samples(np.random.default_rng(3))):  # type: ignore[misc]
        _compare(backend, reference, op, dict(sample.args), "contiguous", sample.note)
        if i % 3 == 0:
            _compare(backend, reference, op, dict(sample.args), "transposed", sample.note)


@pytest.mark.parametrize("op", OPS)
def test_error_samples_are_refused_with_the_reference_code(backend: Backend, reference: Backend, op: str) -> None:
    assert_errors_match_reference(backend, reference, op)


@pytest.mark.parametrize("transposed", [False, True])
def test_a_transposed_nz_weight_is_read_back_transposed(backend: Backend, reference: Backend, transposed: bool) -> None:
    rng = np.random.default_rng(8)
    x1 = rng.integers(-128, 128, (7, 48)).astype(np.int8)
    x2 = rng.integers(-128, 128, (48, 40)).astype(np.int8)
    args = {"x1": x1, "x1Scale": None, "x2Scale": rng.uniform(1e-3, 1e-2, 40).astype(np.float32), "yScale": None}
    args |= {"x1Offset": None, "x2Offset": None, "yOffset": None, "bias": None, "transposeX1": False}
    args |= {"transposeX2": False, "groupSize": 0}
    want = eager.run("QuantMatmulV5", reference, x2=x2, **args)["out"]
    got = eager.run("QuantMatmulWeightNz", backend, x2=nz.to_device_nz(x2, backend, transposed=transposed), **args)
    assert_close(got["out"], want)


def test_grouped_matmul_v1_writes_only_its_groups_rows(backend: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(9)
    x = rng.uniform(-1, 1, (150, 40)).astype(np.float32)
    ws = [rng.uniform(-1, 1, (40, 70)).astype(np.float32) for _ in range(3)]
    none = dict.fromkeys(("biasOptional", "scaleOptional", "offsetOptional", "antiquantScaleOptional"))
    args = {**none, "antiquantOffsetOptional": None, "x": [x], "weight": ws, "groupListOptional": [70, 71, 150]}
    expected = eager.run("GroupedMatmul", reference, splitItem=2, **args)["y"][0]
    got = eager.run("GroupedMatmul", backend, splitItem=2, guard=True, **args)["y"][0]
    assert_close(got, expected)
    smm = eager.run("GroupedMatmul", backend, splitItem=0, **args)["y"]
    assert [y.shape for y in smm] == [(70, 70), (1, 70), (79, 70)]
    assert_close(np.concatenate(smm), expected)

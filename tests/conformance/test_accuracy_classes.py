"""The accuracy classes are met by a correct float32 implementation, the way a GPU computes (issue 14 class 1).

The mutants prove the classes are tight enough; this proves they are not too tight: a backend that
rounds 16-bit results through float32 (double rounding), sums in float32 and runs GEMMs in float32
(NumPy's sgemm), as rocm does, passes the same cases the reference does.
"""

from __future__ import annotations

import numpy as np
import pytest

from acl_conformance import run
from acl_core.backend import BackendRegistration
from acl_core.dtypes import DataType as D
from acl_core.spec.accuracy import accuracy_of
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.matmul import GEMM_REASON
from acl_reference.backend import ReferenceBackend
from acl_reference.call import RefCall
from acl_reference.kernels.layout import read_nz
from tests.conformance.planted import compute_when, register_planted

_F32 = (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16)


class Float32Backend(ReferenceBackend):
    """The reference, with Cast, ReduceSum and the GEMMs computed in float32 like a GPU kernel."""

    name = "float32-like-gpu"

    def __init__(self) -> None:
        super().__init__()
        compute_when(self, "Cast", self._cast)
        compute_when(self, "ReduceSum", self._reduce_sum)
        for op in ("Matmul", "Mm", "BatchMatMul"):
            compute_when(self, op, self._gemm)
        compute_when(self, "MatmulWeightNz", self._gemm_nz)

    @staticmethod
    def _cast(k: RefCall) -> bool:
        if k.dtype("self") != D.ACL_DOUBLE or k.dtype("out") not in (D.ACL_FLOAT16, D.ACL_BF16):
            return False
        with np.errstate(all="ignore"):
            k.write("out", k.read("self").astype(np.float32).astype(k["out"].dtype.numpy))  # rounds twice
        return True

    @staticmethod
    def _reduce_sum(k: RefCall) -> bool:
        if k.dtype("self") not in _F32 or k.dtype("out") not in _F32 or not k.plan["dims"] or not k["self"].numel:
            return False
        x = k.read("self").astype(k["out"].dtype.numpy).astype(np.float32)  # CANN casts self to dtype first
        axes = tuple(d for d in k.plan["dims"] if d < x.ndim)
        rows = np.moveaxis(x, axes, tuple(range(len(axes)))).reshape(-1, *np.delete(x.shape, axes))
        total = np.zeros(rows.shape[1:], np.float32)
        for term in rows:  # one float32 rounding per element, in order: the worst order a kernel has
            total = total + term
        k.write("out", total.reshape(k["out"].shape))
        return True

    @staticmethod
    def _gemm(k: RefCall) -> bool:
        names = [n for n in ("self", "mat2") if n in k.launch.args]
        if k.value("cubeMathType") != 0 or any(k.dtype(n) not in _F32 for n in names):
            return False
        a, b = (k.read(n).astype(np.float32) for n in names)
        k.write("out", np.matmul(a, b))
        return True

    @staticmethod
    def _gemm_nz(k: RefCall) -> bool:
        """MatmulWeightNz float32 as a GPU tile loop: one float32 rounding per K step, in order."""
        if k.dtype("self") != D.ACL_FLOAT or k.value("cubeMathType") != 0:
            return False
        a, b = k.read("self").astype(np.float32), read_nz(k, "mat2").astype(np.float32)
        total = np.zeros((a.shape[0], b.shape[1]), np.float32)
        with np.errstate(all="ignore"):
            for i in range(a.shape[1]):
                total = total + np.outer(a[:, i], b[i, :])
        k.write("out", total)
        return True


@pytest.fixture(scope="module", autouse=True)
def _registered() -> None:
    register_planted(
        "float32-like-gpu",
        [BackendRegistration(name=Float32Backend.name, factory=Float32Backend, summary="float32 like a GPU")],
    )


@pytest.mark.parametrize("seed", [0, 1])
def test_a_float32_implementation_meets_the_classes(seed: int) -> None:
    report = run(Float32Backend.name, ops="Cast,ReduceSum,Matmul,Mm,BatchMatMul,MatmulWeightNz", seed=seed)
    assert report.ok, [f"{o.op}[{o.case}]: {o.message}" for o in report.failed][:5]


def test_matmul_weight_nz_is_a_gemm_not_a_copy() -> None:
    # the H200 failed 5 float32 cases at 30-280 ulp (a K = 40 float32 sum) under the layout family's exact class
    accuracy = accuracy_of(get_spec("MatmulWeightNz"))
    assert accuracy is not None and accuracy.kind == "reduction" and accuracy.reason == GEMM_REASON
    assert accuracy.length_of is not None
    a, b = np.ones((5, 40), np.float32), np.ones((40, 23), np.float32)
    assert accuracy.length_of({"self": a, "mat2": b}, {"out": a @ b}) == 40


@pytest.mark.parametrize("seed", [0, 1])
def test_the_float32_weight_nz_gemm_is_ulps_off_yet_passes(seed: int) -> None:
    report = run(Float32Backend.name, mode="full", ops="MatmulWeightNz", seed=seed)
    assert report.ok, [f"{o.op}[{o.case}]: {o.message}" for o in report.failed][:5]
    worst = [
        u
        for o in report.outcomes
        if o.op == "MatmulWeightNz" and "float32" in o.case
        for u in o.detail.get("worst_ulp", {}).values()
    ]
    assert worst and max(worst) > 0, "the planted float32 loop must differ from the reference's float64 GEMM"

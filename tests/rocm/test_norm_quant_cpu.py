"""The fused add + RmsNorm + quantisation ops above the provider seam, on a CPU (fake provider and emulator).

rocm claims the five ops (the V1 forms through their V2's kernels); each call is one row-kernel
launch over the views' strides, with float64 statistics; invalid dynamic outputs are zeroed by a
device memset, and the emulated kernels agree with the reference on hand-checked cases.
"""

from __future__ import annotations

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_rocm.backend import RocmBackend
from acl_rocm.kernels.reduction import RowKernel, RowOperand, generate
from acl_rocm.ops import norm_quant
from tests.rocm.fake_provider import FakeProvider

ALL = ("AddRmsNormQuant", "AddRmsNormQuantV2", "AddRmsNormDynamicQuant", "AddRmsNormDynamicQuantV2", "AddRmsNormCast")


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> tuple[RocmBackend, FakeProvider]:
    provider = FakeProvider()
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp_path_factory.mktemp("kc"))})
    backend.runtime.ensure_device(0)
    return backend, provider


def test_rocm_claims_the_five_ops(fake: tuple[RocmBackend, FakeProvider]) -> None:
    backend, _ = fake
    assert set(ALL) <= set(backend.capabilities().ops)
    assert set(norm_quant.OPS) < set(ALL)


def _quant_args(rng: np.random.Generator) -> dict:
    x1, x2 = (rng.standard_normal((4, 16)).astype(np.float16) for _ in range(2))
    return {
        "x1": x1,
        "x2": x2,
        "gamma": np.ones(16, np.float16),
        "scales1": np.full(16, 20.0, np.float32),
        "axis": -1,
        "epsilon": 1e-6,
        "divMode": False,
    }


def test_one_launch_per_call_over_transposed_views(fake: tuple[RocmBackend, FakeProvider]) -> None:
    backend, provider = fake
    provider.launches.clear()
    eager.run("AddRmsNormQuant", backend, layout="transposed", **_quant_args(np.random.default_rng(0)))
    assert [launch.name.startswith("acl_row_rmsnormquant") for launch in provider.launches] == [True]


def test_invalid_outputs_are_zeroed_on_the_device(emulated: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(1)
    x1, x2 = (rng.standard_normal((3, 8)).astype(np.float16) for _ in range(2))
    args = {"x1": x1, "x2": x2, "gamma": np.ones(8, np.float16), "epsilon": 1e-6}
    y2, s2 = np.full(1, 55, np.int8), np.full(1, 9.0, np.float32)
    got = eager.run("AddRmsNormDynamicQuant", emulated, **args, y2Out=y2, scale2Out=s2)
    want = eager.run("AddRmsNormDynamicQuant", reference, **args)
    assert got["y2Out"].tolist() == [0] and got["scale2Out"].tolist() == [0.0]
    np.testing.assert_array_equal(got["y1Out"], want["y1Out"])
    np.testing.assert_array_equal(got["scale1Out"], want["scale1Out"])


def test_emulated_static_quant_rounds_half_to_even(emulated: Backend) -> None:
    # x = [4, 4]: rstd = 1/4, y = gamma; 0.25 * 10 = 2.5 -> 2; -1.25 * 10 + 1 = -11.5 -> -12
    got = eager.run(
        "AddRmsNormQuantV2",
        emulated,
        x1=np.array([[3.0, 4.0]], np.float32),
        x2=np.array([[1.0, 0.0]], np.float32),
        gamma=np.array([0.25, -1.25], np.float32),
        scales1=np.full(2, 10.0, np.float32),
        zeroPoints1Optional=np.array([0.0, 1.0], np.float32),
        axis=-1,
        epsilon=0.0,
        divMode=False,
    )
    assert got["y1Out"].tolist() == [[2, -12]] and got["y2Out"].tolist() == [[0, 0]]


def test_statistics_are_float64_for_16_bit_data() -> None:
    kernel = RowKernel(
        "rmsnormquant",
        (RowOperand("x", D.ACL_FLOAT16), RowOperand("x2", D.ACL_FLOAT16), RowOperand("y1", D.ACL_INT8, True)),
        1,
        1,
        "int",
        D.ACL_DOUBLE,
        (("mode", "static"),),
        (("eps", "double"),),
    )
    source = generate(kernel)
    assert "typedef double acc_t;" in source and "acl_q_int" in source
    assert "p_y1[o[2]] = (signed char)0;" in source  # y2 absent, y1 bound without s1: zero-filled

"""The fused add + RmsNorm + quantisation ops on the GPU, compared with the NumPy reference (GPU tier).

Cases are the specs' own samples (every dtype, divMode, beta, one or two quantisations, outputMask,
zero rows, NaN/Inf, empty batches), contiguous and, every other sample, padded and transposed; then
a long row (several warps, float64 statistics) per op. Integer outputs must agree exactly (y is
rounded to float32 from float64 on both sides), float outputs within the conformance tolerances.
"""

from __future__ import annotations

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import from_numpy
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.norm_quant import SPECS
from conformance.tolerances import lookup
from tests.conftest import assert_close
from tests.rocm.prefill import sentinel_outputs

pytestmark = pytest.mark.gpu

OPS = [s.name for s in SPECS]


def _compare(rocm: Backend, reference: Backend, op: str, args: dict, layout: str, note: str) -> None:
    expected = eager.run(op, reference, layout="contiguous", **args)
    outs = sentinel_outputs(op, args, expected)
    got = eager.run(op, rocm, layout=layout, **args, **outs)
    assert got.keys() == expected.keys()
    for name, want in expected.items():
        assert got[name].dtype == want.dtype, f"{op} [{note}] {name}"
        if want.dtype.kind in "iu":
            np.testing.assert_array_equal(got[name], want, err_msg=f"{op} [{note}] layout={layout}: {name}")
        else:
            tol = lookup(op, from_numpy(want.dtype), "rocm", None)
            assert_close(got[name], want, atol=tol.atol, rtol=tol.rtol)


@pytest.mark.parametrize("op", OPS)
def test_matches_reference(rocm: Backend, reference: Backend, op: str) -> None:
    assert op in rocm.capabilities().ops
    spec = get_spec(op)
    assert spec.samples is not None
    for i, sample in enumerate(spec.samples(np.random.default_rng(2024))):
        _compare(rocm, reference, op, dict(sample.args), "contiguous", sample.note)
        if i % 2 == 0:
            for layout in ("padded", "transposed"):
                _compare(rocm, reference, op, dict(sample.args), layout, sample.note)


LONG_ROW = 1536


@pytest.mark.parametrize("op", ["AddRmsNormQuantV2", "AddRmsNormDynamicQuantV2", "AddRmsNormCast"])
def test_long_rows(rocm: Backend, reference: Backend, op: str) -> None:
    rng = np.random.default_rng(7)
    x1, x2 = (rng.standard_normal((5, LONG_ROW)).astype(np.float16) for _ in range(2))
    gamma = rng.uniform(0.5, 1.5, LONG_ROW).astype(np.float16)
    args: dict = {"x1": x1, "x2": x2, "gamma": gamma, "epsilon": 1e-6}
    if op == "AddRmsNormQuantV2":
        args |= {"scales1": rng.uniform(10, 30, LONG_ROW).astype(np.float32), "axis": -1, "divMode": False}
        args |= {"scales2Optional": rng.uniform(10, 30, LONG_ROW).astype(np.float32)}
        args |= {"zeroPoints1Optional": rng.integers(-3, 4, LONG_ROW).astype(np.int32)}
    elif op == "AddRmsNormDynamicQuantV2":
        args |= {"smoothScale1Optional": rng.uniform(0.5, 2, LONG_ROW).astype(np.float16)}
    _compare(rocm, reference, op, args, "contiguous", "long rows")

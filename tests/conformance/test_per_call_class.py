"""QuantMatmulV5's per-call accuracy class: reduction for fp8 x fp8 calls, the table for the rest, and its M.

QuantMatmulV5's class is ``by_call``: fp8 x fp8 calls (per-token / per-channel float32 scales, a
positive packed per-tensor scale, MX with E8M0 scales) are compared under the reduction class
(``γ_(K+3)·M + 1 ulp``), integer / fp4 / HiFloat8 calls, a negative packed scale or an offset under
the per-dtype table. The magnitudes run must give ``M = |x1|·|x2|·|x1Scale|·|x2Scale| + |bias|``.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from acl_conformance import Session
from acl_core import lowp
from acl_core.dtypes import DataType as D
from acl_core.spec.accuracy import accuracy_of
from acl_core.spec.ops import get_spec
from acl_core.spec.ops import quant as Q
from acl_reference.kernels.quant import mx_expand

FP8 = (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2)
NONE = {"yScale": None, "x1Offset": None, "x2Offset": None, "yOffset": None}
T = {"transposeX1": False, "transposeX2": False}


def _samples() -> dict[str, dict[str, Any]]:
    return {s.note: s.args for s in get_spec("QuantMatmulV5").samples(np.random.default_rng(0))}  # type: ignore[misc]


# ----------------------------------------------------------------------------- the per-call class
def test_fp8_calls_take_the_reduction_class_and_integer_ones_the_table() -> None:
    spec = get_spec("QuantMatmulV5")
    assert accuracy_of(spec).kind == "by_call"  # type: ignore[union-attr]
    samples = _samples()
    for note in ("MX float8_e4m3fn", "MX float8_e5m2", "fp8 per-token and per-channel float32 scales"):
        assert accuracy_of(spec, samples[note]) is Q.V5_FP8_REDUCTION, note
    assert accuracy_of(spec, samples["fp8 per-tensor packed scale"]) is Q.V5_FP8_REDUCTION  # a positive packed scale
    assert accuracy_of(spec, samples["int8 K-C"]) is Q.V5_INTEGER_TABLE
    assert "signed" in Q.V5_INTEGER_TABLE.reason
    fp4 = samples["MX fp4, x2 transposed, k not a multiple of 64, float32 bias"]
    assert accuracy_of(spec, fp4) is Q.V5_FP4_TABLE


def test_a_negative_packed_scale_or_an_offset_keeps_the_table() -> None:
    spec = get_spec("QuantMatmulV5")
    packed = dict(_samples()["fp8 per-tensor packed scale"])
    negative = {**packed, "x2Scale": lowp.encode_packed_scale([-0.125]).view(np.int64)}
    assert accuracy_of(spec, negative) is Q.V5_SIGNED_SCALE_TABLE
    offset = {**_samples()["fp8 per-token and per-channel float32 scales"], "x2Offset": np.zeros(6, np.float32)}
    assert accuracy_of(spec, offset) is Q.V5_OFFSET_TABLE


def test_the_reduction_length_is_k_plus_the_epilogue_whatever_the_transposition() -> None:
    length = Q.V5_FP8_REDUCTION.length_of
    assert length is not None
    x1 = np.zeros((3, 16), ml_dtypes.float8_e4m3fn)
    assert length({"x1": x1, "transposeX1": False}, {}) == 16 + 3
    assert length({"x1": x1.T.copy(), "transposeX1": True}, {}) == 16 + 3


def test_the_runner_resolves_the_class_per_call() -> None:
    session = Session("reference", ops="QuantMatmulV5")
    runner = session.runner
    samples = list(get_spec("QuantMatmulV5").samples(np.random.default_rng(0)))  # type: ignore[misc]
    by_note = {s.note: s for s in samples}
    fp8 = by_note["fp8 per-token and per-channel float32 scales"]
    tol = runner.tolerance_for("QuantMatmulV5", fp8, 19)(D.ACL_BF16)
    assert tol.kind == "reduction" and "QuantMatmulV5 reduction class" in tol.source
    int8 = by_note["int8 K-C"]
    assert runner.tolerance_for("QuantMatmulV5", int8)(D.ACL_BF16).kind == "table"
    # the call's own arguments decide, not the sample's: an int8 call judged against the fp8 sample
    assert runner.tolerance_for("QuantMatmulV5", fp8, 1, int8.args)(D.ACL_BF16).kind == "table"
    length, magnitudes = runner._bound_inputs("QuantMatmulV5", fp8.args, {})
    assert length == 19 and magnitudes is not None
    assert runner._bound_inputs("QuantMatmulV5", int8.args, {}) == (1, None)


# ----------------------------------------------------------------------------- M from the magnitudes run
def _fp8_call(rng: np.random.Generator, dtype: Any, *, t1: bool = False) -> dict[str, Any]:
    m, k, n = 5, 48, 7
    x1 = rng.uniform(-8, 8, (m, k)).astype(dtype)
    return {
        "x1": x1.T.copy() if t1 else x1,
        "x2": rng.uniform(-8, 8, (k, n)).astype(dtype),
        "x1Scale": rng.uniform(-2, 2, m).astype(np.float32),  # signed scales: M takes their absolute values
        "x2Scale": rng.uniform(-2, 2, n).astype(np.float32),
        "bias": rng.uniform(-50, 50, n).astype(np.float32),
        "groupSize": 0,
        "out": np.zeros((m, n), np.float32),
        "transposeX1": t1,
        "transposeX2": False,
    } | NONE


@pytest.mark.parametrize("dtype", FP8)
@pytest.mark.parametrize("t1", [False, True])
def test_the_magnitudes_run_is_abs_x1_abs_x2_abs_scales_plus_abs_bias(dtype: Any, t1: bool) -> None:
    args = _fp8_call(np.random.default_rng(1), dtype, t1=t1)
    runner = Session("reference", ops="QuantMatmulV5").runner
    got = runner.magnitudes("QuantMatmulV5", args)
    assert got is not None
    a = np.abs(args["x1"].astype(np.float64))
    a = a.T if t1 else a
    b = np.abs(args["x2"].astype(np.float64))
    s = np.abs(args["x1Scale"].astype(np.float64))[:, None] * np.abs(args["x2Scale"].astype(np.float64))[None, :]
    want = (a @ b) * s + np.abs(args["bias"].astype(np.float64))
    np.testing.assert_allclose(got["out"].astype(np.float64), want, rtol=2.0**-23)
    assert (want > 0).all()


def test_the_magnitudes_run_in_mx_mode_keeps_the_e8m0_scales() -> None:
    rng = np.random.default_rng(2)
    m, k, n = 4, 64, 8
    args: dict[str, Any] = (
        {
            "x1": rng.uniform(-8, 8, (m, k)).astype(ml_dtypes.float8_e4m3fn),
            "x2": rng.uniform(-8, 8, (k, n)).astype(ml_dtypes.float8_e5m2),
            "x1Scale": lowp.e8m0_array(rng.integers(120, 134, (m, 1, 2))),
            "x2Scale": lowp.e8m0_array(rng.integers(120, 134, (1, n, 2))),
            "bias": rng.uniform(-5, 5, n).astype(np.float32),
            "groupSize": Q.MX_GROUP,
            "out": np.zeros((m, n), np.float32),
        }
        | NONE
        | T
    )
    assert accuracy_of(get_spec("QuantMatmulV5"), args) is Q.V5_FP8_REDUCTION
    runner = Session("reference", ops="QuantMatmulV5").runner
    got = runner.magnitudes("QuantMatmulV5", args)
    assert got is not None
    s1 = mx_expand(args["x1Scale"].view(np.uint8), k)  # (m, k): E8M0 scales are positive powers of two
    s2 = mx_expand(np.swapaxes(args["x2Scale"].view(np.uint8), -3, -2), k)  # (n, k)
    left = np.abs(args["x1"].astype(np.float64)) * s1
    right = np.abs(args["x2"].astype(np.float64)) * s2.T
    want = left @ right + np.abs(args["bias"].astype(np.float64))
    np.testing.assert_allclose(got["out"].astype(np.float64), want, rtol=2.0**-23)

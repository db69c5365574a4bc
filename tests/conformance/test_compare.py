"""Output comparison and the tolerance table."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from acl_conformance import tolerances
from acl_conformance.compare import compare_array, compare_outputs
from acl_conformance.tolerances import Override, lookup
from acl_core.dtypes import DataType as D


def _tol(dtype):
    return lookup("Op", dtype, "some-backend")


def test_nan_must_match_nan_and_inf_the_same_inf():
    e = np.array([np.nan, np.inf, -np.inf, 1.0], np.float32)
    assert compare_array("out", e.copy(), e, _tol) is None
    m = compare_array("out", np.array([0.0, np.inf, -np.inf, 1.0], np.float32), e, _tol)
    assert m is not None and m.detail["nan_mismatches"] == 1
    m = compare_array("out", np.array([np.nan, -np.inf, -np.inf, 1.0], np.float32), e, _tol)
    assert m is not None and m.detail["first_index"] == [1]
    m = compare_array("out", np.array([np.nan, 3.4e38, -np.inf, 1.0], np.float32), e, _tol)
    assert m is not None, "a finite value does not match an infinity"


def test_float_tolerance_is_atol_plus_rtol_times_expected():
    e = np.array([1000.0, 0.0], np.float32)
    inside = np.array([1000.0 * (1 + 1e-6), 9e-6], np.float32)
    assert compare_array("out", inside, e, _tol) is None
    outside = np.array([1000.0 * (1 + 5e-6), 0.0], np.float32)
    m = compare_array("out", outside, e, _tol)
    assert m is not None
    assert m.detail["max_abs_error"] == pytest.approx(5e-3, rel=0.05)
    assert m.detail["max_rel_error"] == pytest.approx(5e-6, rel=0.05)
    assert "float32 default" in m.message


def test_integer_and_bool_are_exact():
    assert compare_array("out", np.array([1, 2], np.int32), np.array([1, 2], np.int32), _tol) is None
    m = compare_array("out", np.array([1, 3], np.int32), np.array([1, 2], np.int32), _tol)
    assert m is not None and m.kind == "value" and m.detail["tolerance"] == "exact"
    assert compare_array("out", np.array([True]), np.array([False]), _tol) is not None


def test_dtype_and_shape_must_match():
    m = compare_array("out", np.zeros(3, np.float16), np.zeros(3, np.float32), _tol)
    assert m is not None and m.kind == "dtype"
    m = compare_array("out", np.zeros((3, 1), np.float32), np.zeros(3, np.float32), _tol)
    assert m is not None and m.kind == "shape"


def test_outputs_compare_by_name_and_lists_elementwise():
    a = {"out": [np.ones(2, np.float32), np.ones(2, np.float32)]}
    e = {"out": [np.ones(2, np.float32), np.zeros(2, np.float32)]}
    problems = compare_outputs(a, e, _tol)
    assert [p.output for p in problems] == ["out[1]"]
    assert compare_outputs({}, {"out": np.ones(1)}, _tol)[0].kind == "missing"
    assert compare_outputs({"out": np.ones(1), "extra": np.ones(1)}, {"out": np.ones(1)}, _tol)[0].kind == "missing"


def test_bf16_default_is_looser_than_float32():
    e = np.array([1.0], ml_dtypes.bfloat16)
    a = np.array([1.0078125], ml_dtypes.bfloat16)  # one bf16 ulp above 1
    assert compare_array("out", a, e, _tol) is None


def test_lookup_order_dtype_then_sample_then_op_then_backend():
    ops = (Override("Exp", 1e-3, 1e-3, "looser exp"),)
    backends = (Override("Exp", 1e-2, 1e-2, "fast exp unit", frozenset({D.ACL_FLOAT16}), backend="gpu*"),)
    base = lookup("Exp", D.ACL_FLOAT, "cpu", op_overrides=ops, backend_overrides=backends)
    assert (base.atol, base.rtol, base.reason) == (1e-3, 1e-3, "looser exp")
    sample = lookup("Sin", D.ACL_FLOAT, "cpu", (5e-5, 5e-5), op_overrides=ops, backend_overrides=backends)
    assert (sample.atol, sample.rtol) == (5e-5, 5e-5)
    assert lookup("Sin", D.ACL_FLOAT, "cpu").source == "float32 default"
    gpu16 = lookup("Exp", D.ACL_FLOAT16, "gpu0", op_overrides=ops, backend_overrides=backends)
    assert (gpu16.atol, gpu16.reason) == (1e-2, "fast exp unit")
    gpu32 = lookup("Exp", D.ACL_FLOAT, "gpu0", op_overrides=ops, backend_overrides=backends)
    assert gpu32.atol == 1e-3, "the backend entry is for float16 only"
    assert lookup("Exp", D.ACL_INT32, "gpu0", (1.0, 1.0), op_overrides=ops).source == "exact"


def test_every_table_entry_has_a_reason():
    assert tolerances.check_table([*tolerances.OP_OVERRIDES, *tolerances.BACKEND_OVERRIDES]) == []
    assert all(t.reason for t in tolerances.DTYPE_DEFAULTS.values())
    assert tolerances.check_table([Override("Exp", 1.0, 1.0, " ")]) == ["override for */Exp has no reason"]

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


# ----------------------------------------------------------------------------- accuracy classes (issue 14)
from acl_conformance.compare import ulp_distance, worst_ulp, worst_ulps  # noqa: E402
from acl_core.spec import accuracy as A  # noqa: E402
from acl_core.spec.ops import all_specs, get_spec  # noqa: E402


def _class(accuracy, length=1):
    return lambda dtype: lookup("Op", dtype, "some-backend", accuracy=accuracy, length=length)


def _up(x, n=1):
    for _ in range(n):
        x = np.nextafter(x, np.asarray(np.inf, x.dtype))
    return x


def test_ulp_distance_counts_representable_values_across_binades_and_zero():
    one = np.array([1.0], np.float32)
    assert ulp_distance(_up(one, 3), one).tolist() == [3]
    below = np.nextafter(one, np.float32(0))  # the step below 1 is half the step above
    assert ulp_distance(_up(one), below).tolist() == [2]
    tiny = np.array([np.finfo(np.float32).smallest_subnormal], np.float32)
    assert ulp_distance(-tiny, tiny).tolist() == [2], "-s, ±0, +s: two steps"
    assert ulp_distance(np.array([-0.0]), np.array([0.0])).tolist() == [0]
    bf = np.array([1.0, 1.0078125], ml_dtypes.bfloat16)
    assert ulp_distance(bf[1:], bf[:1]).tolist() == [1]
    f8 = np.array([1.0, 1.125], ml_dtypes.float8_e4m3fn)
    assert ulp_distance(f8[1:], f8[:1]).tolist() == [1]


def test_exact_class_rejects_one_ulp_in_float32_and_float64():
    for dt in (np.float32, np.float64):
        e = np.array([1.5, -3.25, 1e-3], dt)
        assert compare_array("out", e.copy(), e, _class(A.EXACT)) is None
        m = compare_array("out", _up(e), e, _class(A.EXACT))
        assert m is not None and m.detail["max_ulp_error"] == 1 and "0 ulp" in m.message


def test_exact_class_catches_float64_computed_in_float32():
    x = np.random.default_rng(0).uniform(0.1, 4, 64)
    assert compare_array("out", np.sqrt(x.astype(np.float32)).astype(np.float64), np.sqrt(x), _class(A.EXACT))
    # the table it replaces (rtol 1e-7) let this through
    assert compare_array("out", np.sqrt(x.astype(np.float32)).astype(np.float64), np.sqrt(x), _tol) is None


def test_exact_class_allows_only_the_float32_double_rounding_of_16_bit_results():
    # just above the fp16 midpoint 1 + 2^-11: exactly rounded it is 1 + 2^-10; through float32 it is the midpoint,
    # which ties to the even neighbour 1.0
    exact = np.array([1.0 + 2.0**-11 + 2.0**-40])
    correct = exact.astype(np.float16)
    twice = exact.astype(np.float32).astype(np.float16)
    assert correct[0] != twice[0]
    assert compare_array("out", twice, correct, _class(A.EXACT)) is None
    # the odd neighbour is never a double rounding: rejected
    assert compare_array("out", correct, twice, _class(A.EXACT)) is not None
    assert compare_array("out", _up(correct, 2), correct, _class(A.EXACT)) is not None


def test_exact_class_rejects_bf16_truncation():
    x = np.random.default_rng(1).uniform(-4, 4, 256).astype(np.float32)
    rne = x.astype(ml_dtypes.bfloat16)
    truncated = (x.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32).astype(ml_dtypes.bfloat16)
    m = compare_array("out", truncated, rne, _class(A.EXACT))
    assert m is not None and m.detail["max_ulp_error"] == 1
    assert compare_array("out", truncated, rne, _tol) is None, "the bf16 table (rtol 1.6e-2) accepted it"


def test_signed_zero_is_compared_where_the_class_defines_it():
    e = np.array([-0.0, 0.0, 1.0], np.float32)
    a = np.array([0.0, 0.0, 1.0], np.float32)
    m = compare_array("out", a, e, _class(A.EXACT))
    assert m is not None and m.detail["signed_zero_mismatches"] == 1 and "-0.0" in m.message
    assert compare_array("out", a, e, _class(A.exact(signed_zero=False))) is None
    assert compare_array("out", a, e, _tol) is None, "the table does not define the sign of zero"


def test_nan_positions_exact_payload_free():
    e = np.array([np.nan, 1.0], np.float32)
    other_nan = np.array([0x7FC00123, 0x3F800000], np.uint32).view(np.float32)
    assert compare_array("out", other_nan, e, _class(A.EXACT)) is None
    m = compare_array("out", np.array([1.0, np.nan], np.float32), e, _class(A.ulp(2)))
    assert m is not None and m.detail["nan_mismatches"] == 2


def test_ulp_class_bounds_in_output_ulps():
    e = np.array([1.25, -7.5, 3e-3], np.float32)
    exp = _class(A.ulp(2))
    assert compare_array("out", _up(e, 2), e, exp) is None
    m = compare_array("out", _up(e, 3), e, exp)
    assert m is not None and m.detail["max_ulp_error"] == 3 and "≤ 2.5 ulp" in m.message
    # a 16-bit result computed in float32: the float32 error plus its own rounding, 1 ulp of the output
    h = np.array([1.25, -7.5], np.float16)
    assert compare_array("out", _up(h), h, exp) is None
    assert compare_array("out", _up(h, 2), h, exp) is not None


def test_reduction_class_bound_grows_with_length_and_magnitude():
    acc = A.reduction()
    assert acc.gamma(1000, D.ACL_FLOAT16) == pytest.approx(1000 * 2.0**-24, rel=1e-4)
    assert acc.gamma(10, D.ACL_DOUBLE) == pytest.approx(10 * 2.0**-53, rel=1e-9), "float64 results accumulate wide"
    rng = np.random.default_rng(2)
    x = rng.uniform(-4, 4, (3, 1000)).astype(ml_dtypes.bfloat16)
    exact = x.astype(np.float64).sum(axis=1)
    expected = exact.astype(ml_dtypes.bfloat16)
    magnitude = np.abs(x.astype(np.float64)).sum(axis=1).astype(ml_dtypes.bfloat16)
    f32 = x.astype(np.float32).sum(axis=1, dtype=np.float32).astype(ml_dtypes.bfloat16)
    assert compare_array("out", f32, expected, _class(acc, 1000), magnitude) is None
    total = np.zeros(3, ml_dtypes.bfloat16)
    for column in x.T:
        total = (total.astype(np.float32) + column.astype(np.float32)).astype(ml_dtypes.bfloat16)
    m = compare_array("out", total, expected, _class(acc, 1000), magnitude)
    assert m is not None and "γ_n·M" in m.message


def test_reduction_whose_finite_terms_overflow_is_left_uncompared_and_counted():
    acc = A.reduction(accumulate=D.ACL_DOUBLE)
    big = np.finfo(np.float64).max
    # rows [max, max, -max] and [-inf, max, max]: summed in another order, inf / max and -inf / NaN
    expected = np.array([big, -np.inf, 3.0])
    magnitude = np.array([np.inf, np.inf, 3.0])  # Σ|finite terms|: the first two overflow, the third does not
    actual = np.array([np.inf, np.nan, 3.0])
    assert compare_array("out", actual, expected, _class(acc, 3), magnitude) is None
    wrong = np.array([np.inf, np.nan, np.nan])  # a NaN where the finite terms stay in range is still a failure
    m = compare_array("out", wrong, expected, _class(acc, 3), magnitude)
    assert m is not None and m.detail["mismatched"] == 1 and m.detail["overflowing"] == 2
    assert compare_array("out", actual, expected, _class(acc, 3), np.full(3, 3.0)) is not None


def test_lookup_order_class_then_sample_then_op_then_backend():
    exp = A.ulp(2)
    assert lookup("Exp", D.ACL_FLOAT, "cpu", accuracy=exp).kind == "ulp"
    sample = lookup("Exp", D.ACL_FLOAT, "cpu", (1e-3, 1e-3), accuracy=exp)
    assert (sample.kind, sample.atol) == ("table", 1e-3)
    ops = (Override("Exp", 1e-2, 1e-2, "looser exp"),)
    assert lookup("Exp", D.ACL_FLOAT, "cpu", accuracy=exp, op_overrides=ops).atol == 1e-2
    table = lookup("Gelu", D.ACL_FLOAT, "cpu", accuracy=A.table("no bound yet"))
    assert table.source == "float32 default"
    assert lookup("Add", D.ACL_INT32, "cpu", accuracy=A.EXACT).source == "exact"


def test_worst_ulp_is_reported_in_the_detail_and_per_case():
    e = np.array([1.0, 2.0], np.float32)
    m = compare_array("out", _up(e, 5), e, _class(A.EXACT))
    assert m is not None and m.detail["max_ulp_error"] == 5 and "worst error 5 ulp" in m.message
    assert worst_ulp(_up(e, 5), e) == 5
    assert worst_ulps({"out": [_up(e), e]}, {"out": [e, e]}) == {"out[0]": 1, "out[1]": 0}

    from acl_conformance import run
    from tests.conformance.mutants import register

    register()
    report = run("mutant-add-3ulp", ops="Add", seed=0)
    failure = next(o for o in report.failed if o.case.startswith("float32"))
    assert failure.detail["worst_ulp"] == {"out": 3} and failure.detail["max_ulp_error"] == 3
    assert report.to_json()["failures"][0]["detail"]["worst_ulp"]


def test_every_operator_class_resolves_with_a_reason():
    specs = all_specs()
    for spec in specs.values():
        acc = A.accuracy_of(spec)
        assert acc is None or acc.reason.strip(), spec.name
    assert A.accuracy_of(get_spec("InplaceExp")) is get_spec("Exp").accuracy, "an in-place twin takes its base's"
    assert A.accuracy_of(get_spec("Add")).kind == "exact", "the elementwise default"
    assert A.accuracy_of(get_spec("ReduceSum")).kind == "reduction"
    assert A.accuracy_of(get_spec("Softmax")).kind == "composite"
    assert A.accuracy_of(get_spec("GroupNorm")).kind == "composite"
    assert A.accuracy_of(get_spec("BatchNorm")).kind == "table", "no class yet: the table, with its reason"
    with pytest.raises(ValueError):
        A.Accuracy("exact", " ")
    with pytest.raises(KeyError):
        A.with_accuracy([get_spec("Add")], {"NoSuchOp": A.EXACT})

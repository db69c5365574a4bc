"""Arguments C could not have passed are parameter errors, found in phase 1 (issue 17, items 10-13).

Item 10: a complex aclScalar where nothing of the call is complex (MaskedFill's value, the alpha of
Add, Sub, Subs, AddV3, InplaceAdd) used to fail in phase 2 with a TypeError. Item 11: values outside
a C integer type (aclCreateScalar(2**64, ACL_INT64), int64 attributes, view dims) used to crash or
pass. Item 12: strings, floats, None and wrong arity where C has a handle, an int64 or a fixed
argument list used to come back as 561000 internal errors. Item 13: FusedInferAttentionScore's
decode branch (S = 1) accepted sparseMode=9. Each has a sweep over every declared operator.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from acl_core import aclnn, eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.errors import AclnnError
from acl_core.plugin import use_backend
from acl_core.spec.ops import all_specs, get_spec
from acl_core.spec.opspec import Kind
from acl_core.spec.validate import c_int_range
from acl_core.tensor import AclIntArray, AclScalar, AclTensor
from tests.foundation.adversarial import (
    DEADLINE,
    INTERNAL,
    Baseline,
    Overrun,
    bounded,
    memory_cap,
    run_phase1,
)

NULLPTR, INVALID = 161001, 161002


@pytest.fixture(autouse=True)
def _reference_is_the_default() -> None:
    """The C front end calls the default backend; a test elsewhere in this worker may have changed it."""
    use_backend("reference")


def test_every_operator_has_a_valid_baseline(baselines: dict[str, Baseline]) -> None:
    assert sorted(set(all_specs()) - set(baselines)) == []


def _device(backend: Backend, arr: np.ndarray) -> tuple[eager.DeviceArray, AclTensor]:
    da = eager.to_device(arr, backend)
    return da, da.tensor()


def _code(fn: Callable[[], Any]) -> int:
    with pytest.raises(AclnnError) as exc:
        fn()
    return exc.value.code


# ----------------------------------------------------------------------------- item 10
@pytest.mark.parametrize(
    ("op", "kwargs"),
    [
        ("Add", {"self": np.ones(3, np.float32), "other": np.ones(3, np.float32), "alpha": 1j}),
        ("Sub", {"self": np.ones(3, np.float32), "other": np.ones(3, np.float32), "alpha": 1j}),
        ("Subs", {"self": np.ones(3, np.float32), "other": 2.0, "alpha": 1j}),
        ("AddV3", {"self": 2.0, "other": np.ones(3, np.float32), "alpha": 1j}),
        ("InplaceAdd", {"selfRef": np.ones(3, np.float32), "other": np.ones(3, np.float32), "alpha": 1j}),
        ("InplaceMaskedFillScalar", {"selfRef": np.ones(3, np.float32), "mask": np.ones(3, bool), "value": 1j}),
    ],
)
def test_a_complex_scalar_for_real_tensors_is_refused_in_phase_1(op: str, kwargs: dict[str, Any]) -> None:
    with pytest.raises(AclnnError) as exc:
        eager.run(op, "reference", op_args=kwargs)
    assert exc.value.code == INVALID and "complex" in exc.value.message


def test_a_complex_alpha_is_refused_even_with_a_complex_output(backend: Backend) -> None:
    """Real inputs compute in a real dtype: a complex alpha has no place there, whatever out is."""
    keep = [_device(backend, np.ones(3, np.float32)) for _ in range(2)]
    _out_keep, out = _device(backend, np.zeros(3, np.complex64))
    alpha = aclnn.aclCreateScalar(1j, int(D.ACL_COMPLEX64))
    ret = aclnn.aclnnAddGetWorkspaceSize(keep[0][1], keep[1][1], alpha, out)[2]
    assert ret == INVALID and "alpha must be real" in aclnn.aclGetRecentErrMsg()


def test_complex_scalars_stay_accepted_for_complex_tensors() -> None:
    a = np.array([1 + 1j, 2 - 1j], np.complex64)
    got = eager.run("Add", "reference", self=a, other=a, alpha=2j)["out"]
    np.testing.assert_allclose(got, a + 2j * a, rtol=1e-6)
    filled = eager.run("InplaceMaskedFillScalar", "reference", selfRef=a, mask=np.array([True, False]), value=3j)
    np.testing.assert_array_equal(filled["selfRef"], np.array([3j, 2 - 1j], np.complex64))


def test_a_complex_scalar_is_refused_by_every_real_operator(baselines: dict[str, Baseline]) -> None:
    problems, calls = [], 0
    complex_scalar = AclScalar.create(1 + 2j, D.ACL_COMPLEX128)
    for name, base in baselines.items():
        if any(t.dtype.is_complex for _, _, _, t in base.tensors()):
            continue
        for p in base.spec.params:
            if p.kind is not Kind.SCALAR or base.args[p.name] is None:
                continue
            calls += 1
            ret, message = run_phase1(base, {**base.args, p.name: complex_scalar})
            if ret != INVALID:
                problems.append(f"{name} ({p.name} = 1+2j): {ret} {message}")
    assert calls > 40 and not problems, "\n".join(problems)


# ----------------------------------------------------------------------------- item 11
def test_create_scalar_refuses_values_its_type_cannot_hold() -> None:
    assert aclnn.aclCreateScalar(2**64, int(D.ACL_INT64)) is None
    message = aclnn.aclGetRecentErrMsg()
    assert "does not fit ACL_INT64" in message and "internal" not in message
    refused = [(2**64, D.ACL_INT64), (300, D.ACL_INT8), (-1, D.ACL_UINT8), (1j, D.ACL_FLOAT), (1e5, D.ACL_FLOAT16)]
    refused += [(float("nan"), D.ACL_INT32), (float("inf"), D.ACL_INT64), (10**400, D.ACL_DOUBLE)]
    for value, dtype in refused:
        assert _code(lambda v=value, d=dtype: AclScalar.create(v, d)) == INVALID, (value, dtype)
    assert AclScalar.create(2**63 - 1, D.ACL_INT64).value == 2**63 - 1
    assert AclScalar.create(-(2**63), D.ACL_INT64).value == -(2**63)
    assert AclScalar.create(255, D.ACL_UINT8).value == 255
    assert AclScalar.create(float("inf"), D.ACL_FLOAT16).value == float("inf")  # an infinity is a value


@pytest.mark.parametrize(
    ("op", "attr"),
    [
        ("Tril", "diagonal"),
        ("Std", "correction"),
        ("PromptFlashAttention", "preTokens"),
        ("PromptFlashAttention", "nextTokens"),
        ("MoeInitRouting", "activeNum"),
    ],
)
@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, 2**64])
def test_int64_attributes_outside_int64_are_refused(
    baselines: dict[str, Baseline], op: str, attr: str, value: int
) -> None:
    ret, message = run_phase1(baselines[op], {**baselines[op].args, attr: value})
    assert ret == INVALID and f"{attr}={value} does not fit int64_t" in message


def test_view_dims_strides_and_offsets_must_fit_int64() -> None:
    for dims, strides, offset in [([2**63], None, 0), ([2], [2**63], 0), ([2], [1], 2**63)]:
        assert aclnn.aclCreateTensor(dims, 0, strides, offset, 2, None, 0x1000) is None
        assert "does not fit int64_t" in aclnn.aclGetRecentErrMsg()
    assert _code(lambda: AclTensor.create([2], 0, None, 0, 2, [2**64], 0x1000)) == INVALID
    assert _code(lambda: AclIntArray.create([-(2**63) - 1])) == INVALID


def test_every_int_attribute_has_a_known_c_range() -> None:
    for spec in all_specs().values():
        for p in spec.params:
            if p.kind is Kind.INT:
                lo, hi = c_int_range(p.c_type)
                assert lo < hi, (spec.name, p.name)


def test_every_int_attribute_is_range_checked_and_bounded(baselines: dict[str, Baseline]) -> None:
    """Past the C type: 161002 naming the parameter. At its edges: any answer, in time, not a defect."""
    problems, calls = [], 0
    with memory_cap():
        for name, base in baselines.items():
            for p in base.spec.params:
                if p.kind is not Kind.INT:
                    continue
                lo, hi = c_int_range(p.c_type)
                for value in (lo, hi, lo - 1, hi + 1, 2**64, -(2**70)):
                    calls += 1
                    ret, message = run_phase1(base, {**base.args, p.name: value})
                    outside = not lo <= value <= hi
                    if outside and (ret != INVALID or f"{p.name}={value} does not fit" not in message):
                        problems.append(f"{name} ({p.name}={value}): {ret} {message}")
                    elif ret == "overrun" or ret in INTERNAL:
                        problems.append(f"{name} ({p.name}={value}): {ret} {message}")
            for p in base.spec.params:  # every value of an int array at the int64 edges
                if p.kind is Kind.INT_ARRAY and base.args[p.name] is not None:
                    n = len(base.args[p.name].values)
                    for value in (2**62, -(2**63), 2**63 - 1):
                        calls += 1
                        ret, message = run_phase1(base, {**base.args, p.name: AclIntArray.create([value] * n)})
                        if ret == "overrun" or ret in INTERNAL:
                            problems.append(f"{name} ({p.name}=[{value}]*{n}): {ret} {message}")
    assert calls > 500 and not problems, "\n".join(problems)


# ----------------------------------------------------------------------------- item 12
def test_create_functions_refuse_what_c_cannot_express() -> None:
    cases: list[tuple[Callable[[], Any], int]] = [
        (lambda: AclTensor.create(None, 0, None, 0, 2, None, 0), NULLPTR),  # type: ignore[arg-type]
        (lambda: AclTensor.create(["x"], 0, None, 0, 2, None, 0), INVALID),
        (lambda: AclTensor.create([2.5], 0, None, 0, 2, None, 0), INVALID),
        (lambda: AclTensor.create(3, 0, None, 0, 2, None, 0), INVALID),  # type: ignore[arg-type]
        (lambda: AclTensor.create([2], None, None, 0, 2, None, 0), INVALID),  # type: ignore[arg-type]
        (lambda: AclTensor.create([2], 0, None, 0, "ND", None, 0), INVALID),  # type: ignore[arg-type]
        (lambda: AclTensor.create([2], 0, None, "0", 2, None, 0), INVALID),  # type: ignore[arg-type]
        (lambda: AclTensor.create([2], 0, None, 0, 2, None, "x"), INVALID),  # type: ignore[arg-type]
        (lambda: AclTensor.create([2], 0, None, 0, 2, None, -8), INVALID),
        (lambda: AclScalar.create(None, 0), NULLPTR),
        (lambda: AclScalar.create(1, None), INVALID),  # type: ignore[arg-type]
        (lambda: AclScalar.create(np.str_("1"), 0), INVALID),
        (lambda: AclIntArray.create(None), NULLPTR),  # type: ignore[arg-type]
        (lambda: AclIntArray.create(["1"]), INVALID),
        (lambda: AclIntArray.create([1.5]), INVALID),
        (lambda: AclIntArray.create(7), INVALID),  # type: ignore[arg-type]
    ]
    for fn, code in cases:
        assert _code(fn) == code
    for fn in (
        lambda: aclnn.aclCreateFloatArray(None),  # type: ignore[arg-type]
        lambda: aclnn.aclCreateFloatArray(["x"]),
        lambda: aclnn.aclCreateFloatArray([1j]),
        lambda: aclnn.aclCreateFloatArray([10**400]),
        lambda: aclnn.aclCreateBoolArray(None),  # type: ignore[arg-type]
        lambda: aclnn.aclCreateBoolArray(["x"]),
        lambda: aclnn.aclCreateTensorList(None),  # type: ignore[arg-type]
        lambda: aclnn.aclCreateTensorList(5),  # type: ignore[arg-type]
        lambda: aclnn.aclCreateScalarList(None),  # type: ignore[arg-type]
        lambda: aclnn.aclCreateTensor(None, 0, None, 0, 2, None, 0),  # type: ignore[arg-type]
    ):
        assert fn() is None
        assert aclnn.aclGetRecentErrMsg() and "internal error" not in aclnn.aclGetRecentErrMsg()


def test_phase_1_with_arguments_c_cannot_pass_is_a_parameter_error(backend: Backend) -> None:
    _keep, x = _device(backend, np.ones(3, np.float32))
    alpha = aclnn.aclCreateScalar(1.0, 0)
    assert aclnn.aclnnAddGetWorkspaceSize(x, x) == (0, None, INVALID)
    assert "missing alpha, out" in aclnn.aclGetRecentErrMsg()
    assert aclnn.aclnnAddGetWorkspaceSize(x, x, alpha, x, x)[2] == INVALID
    assert aclnn.aclnnAddGetWorkspaceSize(x, x, alpha, out=x, bogus=1)[2] == INVALID
    assert "no parameter 'bogus'" in aclnn.aclGetRecentErrMsg()
    assert aclnn.aclnnAddGetWorkspaceSize(x, x, alpha, x, self=x)[2] == INVALID
    assert aclnn.aclnnAddGetWorkspaceSize("x", x, alpha, x)[2] == INVALID
    assert aclnn.aclnnSoftmaxGetWorkspaceSize(x, 0.5, x)[2] == INVALID
    assert aclnn.aclnnSoftmaxGetWorkspaceSize(x, "0", x)[2] == INVALID
    assert aclnn.aclnnAddGetWorkspaceSize(None, x, alpha, x)[2] == NULLPTR


def test_eager_refuses_a_misspelt_argument_instead_of_defaulting_it() -> None:
    x = np.ones(3, np.float32)
    with pytest.raises(AclnnError) as exc:
        eager.run("Add", "reference", self=x, other=x, alpah=2.0)
    assert exc.value.code == INVALID and "no parameter 'alpah'" in exc.value.message


def test_phase_2_with_arguments_c_cannot_pass_is_a_parameter_error(backend: Backend) -> None:
    _keep, x = _device(backend, np.ones(3, np.float32))
    _out_keep, out = _device(backend, np.zeros(3, np.float32))
    for workspace, size, stream in [(None, 0, "x"), ("x", 0, None), (None, "x", None), (None, 0, 1.5), (True, 0, None)]:
        _ws, executor, ret = aclnn.aclnnAddGetWorkspaceSize(x, x, aclnn.aclCreateScalar(1.0, 0), out)
        assert ret == 0
        assert aclnn.aclnnAdd(workspace, size, executor, stream) == INVALID, (workspace, size, stream)
        assert "must be an integer" in aclnn.aclGetRecentErrMsg()
    assert aclnn.aclSetRawTensorAddr(x, "x") == INVALID


_ODD_VALUES: tuple[object, ...] = ("x", b"\xff", 1.5, 2**70, -1, object(), [None], 1j)


def test_every_parameter_of_every_operator_refuses_odd_values(baselines: dict[str, Baseline]) -> None:
    """Each parameter in turn gets a value of the wrong kind: a parameter error or a normal answer, never a defect."""
    problems, calls = [], 0
    with memory_cap():
        for name, base in baselines.items():
            for p in base.spec.params:
                for value in (None, *_ODD_VALUES):
                    calls += 1
                    ret, message = run_phase1(base, {**base.args, p.name: value})
                    if ret == "overrun" or ret in INTERNAL:
                        problems.append(f"{name} ({p.name}={value!r}): {ret} {message}")
                    elif value is None and p.kind.is_handle and not p.optional and ret != NULLPTR:
                        problems.append(f"{name} ({p.name}=None): {ret}, expected {NULLPTR}")
                    elif value is None and not p.kind.is_handle and ret != INVALID:
                        problems.append(f"{name} ({p.name}=None): {ret}, expected {INVALID}")
    assert calls > 7000 and not problems, "\n".join(problems[:50])


def test_every_front_end_function_refuses_odd_values() -> None:
    """Every acl* function of the aclnn module, each argument odd in turn: never an internal error."""
    problems = []
    names = [n for n in dir(aclnn) if n.startswith("acl") and not n.startswith("aclnn") and n != "aclGetRecentErrMsg"]
    for n in names:
        fn = getattr(aclnn, n)
        arity = fn.__code__.co_argcount
        for position in range(arity):
            for value in _ODD_VALUES:
                args: list[Any] = [1] * arity
                args[position] = value
                try:
                    result = bounded(fn, *args, seconds=DEADLINE)
                except Overrun as exc:
                    problems.append(f"{n} arg {position}={value!r}: {exc}")
                    continue
                message = aclnn.aclGetRecentErrMsg()
                codes = result if isinstance(result, tuple) else (result,)
                if any(c in INTERNAL for c in codes if isinstance(c, int)) or message.startswith("internal error"):
                    problems.append(f"{n} arg {position}={value!r}: {result!r} {message}")
    assert len(names) > 25 and not problems, "\n".join(problems)


# ----------------------------------------------------------------------------- item 13
@pytest.mark.parametrize("sq", [1, 4])
@pytest.mark.parametrize("mode", [9, -1, 2**31])
def test_fused_infer_attention_checks_sparse_mode_on_both_branches(sq: int, mode: int) -> None:
    from acl_core.spec.ops.attention import FIA_DEFAULTS, _infer_case

    args = _infer_case(np.random.default_rng(0), D.ACL_FLOAT16, "BNSD", 2, 2, 2, sq, 6, 8, listed=True, **FIA_DEFAULTS)
    with pytest.raises(AclnnError) as exc:
        eager.run("FusedInferAttentionScore", "reference", op_args={**args, "sparseMode": mode})
    assert exc.value.code == INVALID and f"sparseMode={mode}" in exc.value.message


def test_fused_infer_attention_decode_still_runs_with_an_in_range_sparse_mode() -> None:
    from acl_core.spec.ops.attention import FIA_DEFAULTS, _infer_case

    args = _infer_case(np.random.default_rng(0), D.ACL_FLOAT16, "BNSD", 2, 2, 2, 1, 6, 8, listed=True, **FIA_DEFAULTS)
    out = eager.run("FusedInferAttentionScore", "reference", op_args={**args, "sparseMode": 0})["attentionOut"]
    assert out.shape == (2, 2, 1, 8) and np.isfinite(out.astype(np.float32)).all()
    assert get_spec("FusedInferAttentionScore").param("sparseMode").choices == tuple(range(9))

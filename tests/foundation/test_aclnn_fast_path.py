"""The phase-1 cache and repeatable executors stay sound on their fast paths (issue 4: host overhead)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from acl_core import acl, aclnn
from acl_core.aclnn import _cache
from acl_core.backend import RELAUNCH
from acl_core.plugin import get_backend
from acl_core.spec.ops import all_specs, get_spec
from acl_core.spec.opspec import Kind
from acl_core.spec.validate import signature, signature_of, signer

N = 16


def _malloc(nbytes: int) -> int:
    ptr, ret = acl.rt.malloc(nbytes, 0)
    assert ret == 0
    return ptr


def _upload(ptr: int, values: np.ndarray) -> None:
    assert acl.rt.memcpy(ptr, values.nbytes, acl.util.numpy_to_ptr(values), values.nbytes, 1) == 0


def _read(ptr: int, n: int = N, dtype: type = np.float32) -> np.ndarray:
    out = np.empty(n, dtype)
    assert acl.rt.memcpy(acl.util.numpy_to_ptr(out), out.nbytes, ptr, out.nbytes, 2) == 0
    return out


@pytest.fixture
def env() -> Iterator[dict]:
    assert acl.init() in (0, 100002)  # ACL_ERROR_REPEAT_INITIALIZE when an earlier test initialised
    assert acl.rt.set_device(0) == 0
    ptrs = {name: _malloc(N * 4) for name in ("a", "b", "out")}
    _upload(ptrs["a"], np.arange(N, dtype=np.float32))
    _upload(ptrs["b"], np.full(N, 10, np.float32))
    t = {name: aclnn.aclCreateTensor([N], 0, [1], 0, 2, [N], ptr) for name, ptr in ptrs.items()}
    yield {"ptrs": ptrs, "t": t, "alpha": aclnn.aclCreateScalar(1.0, 0)}
    for ptr in ptrs.values():
        if ptr:
            acl.rt.free(ptr)


def _entry(t: dict, alpha: object, op: str = "Add") -> object:
    key = signature_of(get_spec(op), (t["a"], t["b"], alpha, t["out"]), id(get_backend()))
    assert key is not None
    return _cache.get(key)


def test_unrelated_allocations_keep_the_cached_validation(env: dict) -> None:
    t, alpha = env["t"], env["alpha"]
    assert aclnn.aclnnAddGetWorkspaceSize(t["a"], t["b"], alpha, t["out"])[2] == 0
    first = _entry(t, alpha)
    assert first is not None
    scratch = _malloc(256)  # another allocation and free: the tensors' memory is untouched
    assert acl.rt.free(scratch) == 0
    ws, ex, ret = aclnn.aclnnAddGetWorkspaceSize(t["a"], t["b"], alpha, t["out"])
    assert ret == 0 and _entry(t, alpha) is first  # served from the cache, not validated again
    assert ex.still_valid()
    assert aclnn.aclnnAdd(None, ws, ex, None) == 0
    assert acl.rt.synchronize_device() == 0
    np.testing.assert_array_equal(_read(env["ptrs"]["out"]), np.arange(N, dtype=np.float32) + 10)


def test_memory_freed_and_reallocated_at_the_same_address_is_validated_again(env: dict) -> None:
    t, alpha, ptrs = env["t"], env["alpha"], env["ptrs"]
    ws, ex, ret = aclnn.aclnnAddGetWorkspaceSize(t["a"], t["b"], alpha, t["out"])
    assert ret == 0 and aclnn.aclSetAclOpExecutorRepeatable(ex) == 0
    assert aclnn.aclnnAdd(None, ws, ex, None) == 0
    first = _entry(t, alpha)
    # free b and take a smaller block: wherever it lands, b's old validation no longer holds
    assert acl.rt.free(ptrs["b"]) == 0
    ptrs["b"] = 0
    assert not ex.still_valid()
    assert aclnn.aclnnAdd(None, ws, ex, None) == 161002  # phase 2 validated again and refused
    assert "freed" in aclnn.aclGetRecentErrMsg()
    assert aclnn.aclnnAddGetWorkspaceSize(t["a"], t["b"], alpha, t["out"])[2] == 161002
    # a new allocation (at the old address or not): the signature's entry is validated afresh, then it runs
    ptrs["b"] = _malloc(N * 4)
    assert aclnn.aclSetRawTensorAddr(t["b"], ptrs["b"]) == 0
    _upload(ptrs["b"], np.full(N, 5, np.float32))
    ws2, ex2, ret = aclnn.aclnnAddGetWorkspaceSize(t["a"], t["b"], alpha, t["out"])
    assert ret == 0
    assert first is not None and _entry(t, alpha) is not first
    assert aclnn.aclnnAdd(None, ws2, ex2, None) == 0
    assert acl.rt.synchronize_device() == 0
    np.testing.assert_array_equal(_read(ptrs["out"]), np.arange(N, dtype=np.float32) + 5)


def test_a_repeatable_executor_survives_unrelated_frees_and_follows_a_repointed_tensor(env: dict) -> None:
    t, alpha, ptrs = env["t"], env["alpha"], env["ptrs"]
    ws, ex, _ = aclnn.aclnnAddGetWorkspaceSize(t["a"], t["b"], alpha, t["out"])
    assert aclnn.aclSetAclOpExecutorRepeatable(ex) == 0
    other = _malloc(N * 4)
    try:
        assert ex.still_valid()  # an allocation elsewhere changes nothing for this executor
        assert aclnn.aclSetRawTensorAddr(t["out"], other) == 0
        assert not ex.still_valid()
        assert aclnn.aclnnAdd(None, ws, ex, None) == 0  # re-validated against the new address
        assert ex.still_valid()
        assert acl.rt.synchronize_device() == 0
        np.testing.assert_array_equal(_read(other), np.arange(N, dtype=np.float32) + 10)
    finally:
        assert aclnn.aclSetRawTensorAddr(t["out"], ptrs["out"]) == 0
        acl.rt.free(other)


def test_shapes_and_dtypes_that_differ_between_calls_are_separate_validations(env: dict) -> None:
    t, alpha, ptrs = env["t"], env["alpha"], env["ptrs"]
    assert aclnn.aclnnAddGetWorkspaceSize(t["a"], t["b"], alpha, t["out"])[2] == 0
    half = {name: aclnn.aclCreateTensor([N // 2], 0, [1], 0, 2, [N // 2], ptr) for name, ptr in ptrs.items()}
    ws, ex, ret = aclnn.aclnnAddGetWorkspaceSize(half["a"], half["b"], alpha, half["out"])
    assert ret == 0 and aclnn.aclnnAdd(None, ws, ex, None) == 0
    as_int = {name: aclnn.aclCreateTensor([N], 3, [1], 0, 2, [N], ptr) for name, ptr in ptrs.items()}  # int32
    _upload(ptrs["a"], np.arange(N, dtype=np.int32))
    _upload(ptrs["b"], np.full(N, 7, np.int32))
    one = aclnn.aclCreateScalar(1, 3)
    ws, ex, ret = aclnn.aclnnAddGetWorkspaceSize(as_int["a"], as_int["b"], one, as_int["out"])
    assert ret == 0 and aclnn.aclnnAdd(None, ws, ex, None) == 0
    assert acl.rt.synchronize_device() == 0
    np.testing.assert_array_equal(_read(ptrs["out"], dtype=np.int32), np.arange(N, dtype=np.int32) + 7)
    # a mismatched output shape is still refused, cache or not
    short = aclnn.aclCreateTensor([N - 1], 0, [1], 0, 2, [N], ptrs["out"])
    assert aclnn.aclnnAddGetWorkspaceSize(t["a"], t["b"], alpha, short)[2] == 161002


def test_a_destroyed_handle_is_refused_even_when_its_signature_is_cached(env: dict) -> None:
    t, alpha = env["t"], env["alpha"]
    assert aclnn.aclnnAddGetWorkspaceSize(t["a"], t["b"], alpha, t["out"])[2] == 0
    again = aclnn.aclCreateScalar(1.0, 0)
    assert aclnn.aclDestroyScalar(again) == 0
    assert aclnn.aclnnAddGetWorkspaceSize(t["a"], t["b"], again, t["out"])[2] == 161002


def _expect(env: dict, values: np.ndarray, ptr_name: str = "out") -> None:
    assert acl.rt.synchronize_device() == 0
    np.testing.assert_array_equal(_read(env["ptrs"][ptr_name]), values)


def _run(ws: int, ex: object) -> None:
    assert aclnn.aclnnAdd(None, ws, ex, None) == 0, aclnn.aclGetRecentErrMsg()


def test_keyword_and_positional_forms_share_one_validation_and_bind_the_same(env: dict) -> None:
    t, alpha = env["t"], env["alpha"]
    forms = [
        ((t["a"], t["b"], alpha, t["out"]), {}),
        ((t["a"], t["b"]), {"alpha": alpha, "out": t["out"]}),
        ((t["a"],), {"out": t["out"], "alpha": alpha, "other": t["b"]}),
        ((), {"self": t["a"], "other": t["b"], "alpha": alpha, "out": t["out"]}),
    ]
    entries = []
    for args, kwargs in forms:
        ws, ex, ret = aclnn.aclnnAddGetWorkspaceSize(*args, **kwargs)
        assert ret == 0, aclnn.aclGetRecentErrMsg()
        assert ex.call.args["self"] is t["a"] and ex.call.args["other"] is t["b"] and ex.call.args["out"] is t["out"]
        entries.append(_entry(t, alpha))
        _run(ws, ex)
        _expect(env, np.arange(N, dtype=np.float32) + 10)
    assert entries[0] is not None and all(e is entries[0] for e in entries)
    # swapping self and other by keyword is a different call, not the cached one
    ws, ex, ret = aclnn.aclnnAddGetWorkspaceSize(other=t["a"], self=t["b"], alpha=alpha, out=t["out"])
    assert ret == 0 and ex.call.args["self"] is t["b"] and ex.call.args["other"] is t["a"]


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (4, {"out": None}, "twice"),
        (3, {"nosuch": None}, "nosuch"),
        (3, {}, "missing out"),
        (2, {"alpha": None, "bogus": None}, "bogus"),
        (5, {}, "takes 4 arguments"),
    ],
)
def test_keyword_misuse_is_refused_on_every_form(env: dict, args: int, kwargs: dict, message: str) -> None:
    t, alpha = env["t"], env["alpha"]
    positional = (t["a"], t["b"], alpha, t["out"], t["out"])[:args]
    kw = {k: (t["out"] if k != "alpha" else alpha) for k in kwargs}
    _ws, ex, ret = aclnn.aclnnAddGetWorkspaceSize(*positional, **kw)
    assert ret != 0 and ex is None and message in aclnn.aclGetRecentErrMsg()


def test_a_changed_scalar_is_a_new_validation_and_an_equal_new_scalar_is_bound_in(env: dict) -> None:
    t, alpha = env["t"], env["alpha"]
    ws, ex, _ = aclnn.aclnnAddGetWorkspaceSize(t["a"], t["b"], alpha, t["out"])
    _run(ws, ex)
    two = aclnn.aclCreateScalar(2.0, 0)
    ws, ex, ret = aclnn.aclnnAddGetWorkspaceSize(t["a"], t["b"], two, t["out"])
    assert ret == 0 and ex.call.args["alpha"] is two
    _run(ws, ex)
    _expect(env, np.arange(N, dtype=np.float32) + 20)
    as_double = aclnn.aclCreateScalar(1.0, 1)  # same value, other dtype: its own entry
    assert _entry(t, as_double) is None
    # an equal scalar in a new handle reuses the validation, but the executor holds the new handle,
    # so destroying the handle the entry was validated with changes nothing for it
    again = aclnn.aclCreateScalar(1.0, 0)
    first = _entry(t, alpha)
    assert aclnn.aclDestroyScalar(alpha) == 0
    ws, ex, ret = aclnn.aclnnAddGetWorkspaceSize(t["a"], t["b"], again, t["out"])
    assert ret == 0 and _entry(t, again) is first and ex.call.args["alpha"] is again
    _run(ws, ex)
    _expect(env, np.arange(N, dtype=np.float32) + 10)
    # and the destroyed one is refused though its signature is cached
    ws, ex, ret = aclnn.aclnnAddGetWorkspaceSize(t["a"], t["b"], alpha, t["out"])
    assert ret == 161002 and "alpha" in aclnn.aclGetRecentErrMsg()


def test_a_scalar_value_changed_in_place_is_not_served_from_the_cache(env: dict) -> None:
    t, alpha = env["t"], env["alpha"]
    assert aclnn.aclnnAddGetWorkspaceSize(t["a"], t["b"], alpha, t["out"])[2] == 0
    alpha.value = 3.0  # not a C API, but the key follows the value, not the handle
    ws, ex, ret = aclnn.aclnnAddGetWorkspaceSize(t["a"], t["b"], alpha, t["out"])
    assert ret == 0 and ex.call.args["alpha"].value == 3.0
    _run(ws, ex)
    _expect(env, np.arange(N, dtype=np.float32) + 30)


def test_attributes_of_other_values_or_types_are_separate_validations(env: dict) -> None:
    ptrs = env["ptrs"]
    x = aclnn.aclCreateTensor([4, 4], 0, [4, 1], 0, 2, [4, 4], ptrs["a"])
    y = aclnn.aclCreateTensor([4, 4], 0, [4, 1], 0, 2, [4, 4], ptrs["out"])
    base = np.arange(N, dtype=np.float32).reshape(4, 4)
    for dim, axis in ((0, 0), (1, 1), (True, 1), (-1, 1), (0, 0)):
        ws, ex, ret = aclnn.aclnnCumsumGetWorkspaceSize(x, dim, 0, y)
        assert ret == 0, aclnn.aclGetRecentErrMsg()
        assert aclnn.aclnnCumsum(None, ws, ex, None) == 0
        _expect(env, np.cumsum(base, axis=axis).ravel())
    # an out-of-range attribute is refused even right after the valid one was cached
    assert aclnn.aclnnCumsumGetWorkspaceSize(x, 2, 0, y)[2] == 161002
    assert aclnn.aclnnCumsumGetWorkspaceSize(x, 0, 3, y)[2] != 0  # int32 out dtype against a float32 out


def test_a_destroyed_tensor_or_list_member_is_refused_on_a_cached_signature(env: dict) -> None:
    t, alpha, ptrs = env["t"], env["alpha"], env["ptrs"]
    assert aclnn.aclnnAddGetWorkspaceSize(t["a"], t["b"], alpha, t["out"])[2] == 0
    assert aclnn.aclDestroyTensor(t["b"]) == 0
    assert aclnn.aclnnAddGetWorkspaceSize(t["a"], t["b"], alpha, t["out"])[2] == 161002
    assert "other" in aclnn.aclGetRecentErrMsg()
    halves = [aclnn.aclCreateTensor([N // 2], 0, [1], 0, 2, [N // 2], ptrs[n]) for n in ("a", "b")]
    tl = aclnn.aclCreateTensorList(halves)
    ws, ex, ret = aclnn.aclnnCatGetWorkspaceSize(tl, 0, t["out"])
    assert ret == 0 and aclnn.aclnnCat(None, ws, ex, None) == 0
    _expect(env, np.concatenate([np.arange(N // 2), np.full(N // 2, 10)]).astype(np.float32))
    ws, ex, ret = aclnn.aclnnCatGetWorkspaceSize(tl, 0, t["out"])  # cached, same list
    assert ret == 0 and [x.data for x in ex.tensors] == [ptrs["a"], ptrs["b"], ptrs["out"]]
    # members swapped behind the list's back (no C API does this): the executor follows the list
    swapped = [aclnn.aclCreateTensor([N // 2], 0, [1], 0, 2, [N // 2], ptrs[n]) for n in ("a", "b")]
    tl.tensors = tuple(swapped)
    ws, ex, ret = aclnn.aclnnCatGetWorkspaceSize(tl, 0, t["out"])
    assert ret == 0 and list(ex.tensors) == [*swapped, t["out"]]
    tl.tensors = tuple(halves)
    halves[1].destroyed = True  # a member destroyed behind the list's back: refused, not served
    assert aclnn.aclnnCatGetWorkspaceSize(tl, 0, t["out"])[2] == 161002
    halves[1].destroyed = False
    assert aclnn.aclDestroyTensorList(tl) == 0
    assert aclnn.aclnnCatGetWorkspaceSize(tl, 0, t["out"])[2] == 161002


def test_identical_handles_share_the_validated_call_and_executors_stay_independent(env: dict) -> None:
    t, alpha = env["t"], env["alpha"]
    ws, ex1, _ = aclnn.aclnnAddGetWorkspaceSize(t["a"], t["b"], alpha, t["out"])
    ws, ex2, _ = aclnn.aclnnAddGetWorkspaceSize(t["a"], t["b"], alpha, t["out"])
    assert ex1 is not ex2 and ex1.call is ex2.call  # same handles: nothing rebound, nothing copied
    assert aclnn.aclSetAclOpExecutorRepeatable(ex2) == 0
    _run(ws, ex1)
    assert aclnn.aclnnAdd(None, ws, ex1, None) == 161002  # single use, whatever ex2 is
    _run(ws, ex2)
    _run(ws, ex2)
    # other tensor objects over the same memory: the same entry, their own handles in a copied call
    same = {n: aclnn.aclCreateTensor([N], 0, [1], 0, 2, [N], p) for n, p in env["ptrs"].items()}
    ws, ex3, ret = aclnn.aclnnAddGetWorkspaceSize(same["a"], same["b"], alpha, same["out"])
    assert ret == 0 and ex3.call is not ex1.call and ex3.call.memo is ex1.call.memo
    assert ex3.call.args["out"] is same["out"] and ex1.call.args["out"] is t["out"]
    assert list(ex3.tensors) == [same["a"], same["b"], same["out"]]


def test_a_repointed_tensor_misses_the_cache_and_repointing_back_hits_it(env: dict) -> None:
    t, alpha, ptrs = env["t"], env["alpha"], env["ptrs"]
    _ws, ex, _ = aclnn.aclnnAddGetWorkspaceSize(t["a"], t["b"], alpha, t["out"])
    first = _entry(t, alpha)
    other = _malloc(N * 4)
    try:
        assert aclnn.aclSetRawTensorAddr(t["out"], other) == 0
        assert not ex.still_valid()
        ws2, ex2, ret = aclnn.aclnnAddGetWorkspaceSize(t["a"], t["b"], alpha, t["out"])
        assert ret == 0 and ex2.call is not ex.call and _entry(t, alpha) is not first
        _run(ws2, ex2)
        assert acl.rt.synchronize_device() == 0
        np.testing.assert_array_equal(_read(other), np.arange(N, dtype=np.float32) + 10)
        assert aclnn.aclSetRawTensorAddr(t["out"], ptrs["out"]) == 0
        _ws3, ex3, ret = aclnn.aclnnAddGetWorkspaceSize(t["a"], t["b"], alpha, t["out"])
        assert ret == 0 and ex3.call is first.call and ex3.still_valid()  # type: ignore[attr-defined]
    finally:
        assert aclnn.aclSetRawTensorAddr(t["out"], ptrs["out"]) == 0
        acl.rt.free(other)


def test_an_inplace_twin_reuses_its_base_arguments_soundly(env: dict) -> None:
    t, alpha = env["t"], env["alpha"]
    for step in (1, 2, 3):
        ws, ex, ret = aclnn.aclnnInplaceAddGetWorkspaceSize(t["a"], t["b"], alpha)
        assert ret == 0 and ex.kernel_args["self"] is t["a"] and ex.kernel_args["out"] is t["a"]
        assert aclnn.aclnnInplaceAdd(None, ws, ex, None) == 0
        _expect(env, np.arange(N, dtype=np.float32) + 10 * step, "a")


def test_the_signature_of_a_dict_equals_that_of_the_positional_values(env: dict) -> None:
    t, alpha = env["t"], env["alpha"]
    spec = get_spec("Add")
    by_name = signature(spec, {"out": t["out"], "alpha": alpha, "other": t["b"], "self": t["a"]})
    assert by_name == signature_of(spec, (t["a"], t["b"], alpha, t["out"]))
    assert by_name != signature_of(spec, (t["b"], t["a"], alpha, t["out"]))
    assert signature_of(spec, (t["a"], t["b"], alpha, t["out"]), 1) != signature_of(
        spec, (t["a"], t["b"], alpha, t["out"]), 2
    )
    assert signature_of(spec, (t["a"], t["b"], np.float32(1), t["out"])) is None  # no key: always validated
    # a tensor's layout id follows its layout, not the object
    twin = aclnn.aclCreateTensor([N], 0, [1], 0, 2, [N], 0)
    other = aclnn.aclCreateTensor([N], 0, [1], 1, 2, [N + 1], 0)
    assert twin.layout_id == t["a"].layout_id and other.layout_id != t["a"].layout_id


def test_each_backend_validates_for_itself(env: dict) -> None:
    import acl_core
    from acl_core.backend import BackendRegistration
    from acl_core.plugin import hookimpl

    class _Plugin:
        @hookimpl
        def acl_core_backends(self) -> list[BackendRegistration]:
            def factory() -> object:
                from acl_reference.backend import ReferenceBackend

                backend = ReferenceBackend()
                backend.name = "second"
                return backend

            return [BackendRegistration("second", factory, priority=-10)]  # type: ignore[arg-type]

    t, alpha = env["t"], env["alpha"]
    reference = get_backend()
    assert aclnn.aclnnAddGetWorkspaceSize(t["a"], t["b"], alpha, t["out"])[2] == 0
    acl_core.register_plugin(_Plugin(), "second-plugin")
    try:
        second = acl_core.use_backend("second")
        assert second is not None and second is not reference and second.runtime is not reference.runtime
        # the reference's allocations are not this runtime's memory: validated afresh and refused
        _ws, ex, ret = aclnn.aclnnAddGetWorkspaceSize(t["a"], t["b"], alpha, t["out"])
        assert ret == 161002 and ex is None
    finally:
        acl_core.use_backend(None)
        acl_core.unregister_backend("second")
    _ws, ex, ret = aclnn.aclnnAddGetWorkspaceSize(t["a"], t["b"], alpha, t["out"])
    assert ret == 0 and ex.backend is reference


def _value_of(kind: Kind, i: int) -> object:
    if kind is Kind.TENSOR:
        return aclnn.aclCreateTensor([i + 1, 2], 0, None, 0, 2, None, 0x1000 * (i + 1))
    if kind is Kind.SCALAR:
        return aclnn.aclCreateScalar(float(i), 0)
    return {Kind.INT: i, Kind.FLOAT: i + 0.5, Kind.BOOL: bool(i % 2), Kind.STRING: f"s{i}", Kind.DTYPE: 0}[kind]


@pytest.mark.parametrize("op", sorted(all_specs()))
def test_the_specialised_signer_equals_the_generic_signature(op: str) -> None:
    spec = get_spec(op)
    sign = signer(spec)
    if not all(p.kind in (Kind.TENSOR, Kind.SCALAR) or not p.kind.is_handle for p in spec.params):
        values: list[object] = [None] * len(spec.params)
        assert sign(tuple(values), 7) == signature_of(spec, tuple(values), 7)
        return
    assert sign.__name__ == "signed" and signer(spec) is sign  # the generated one, built once
    values = [_value_of(p.kind, i) for i, p in enumerate(spec.params)]
    key = sign(tuple(values), 7)
    assert key is not None and key == signature_of(spec, tuple(values), 7)
    assert sign(tuple(values), 8) != key
    for i, p in enumerate(spec.params):
        variants: list[object] = [None, np.int64(1), "x", 1.5, True]
        if p.kind.is_handle:
            dead = _value_of(p.kind, i)
            dead.destroyed = True  # type: ignore[attr-defined]
            variants.append(dead)
        for v in variants:
            changed = tuple([*values[:i], v, *values[i + 1 :]])
            assert sign(changed, 7) == signature_of(spec, changed, 7)
            if sign(changed, 7) is not None:
                assert sign(changed, 7) != key or v == values[i]


def test_phase_2_takes_a_backend_relaunch_and_the_full_path_when_it_declines(env: dict) -> None:
    t, alpha, ptrs = env["t"], env["alpha"], env["ptrs"]
    ws, ex, _ = aclnn.aclnnAddGetWorkspaceSize(t["a"], t["b"], alpha, t["out"])
    asked: list[object] = []
    answer = {"launched": False}

    def relaunch(stream: object) -> bool:
        asked.append(stream)
        return answer["launched"]

    memo = ex.call.memo  # shared by every executor of this signature: leave it as found
    memo[RELAUNCH] = relaunch  # the reference sets none; a backend would after its first launch
    try:
        _run(ws, ex)  # declined: the reference's kernel runs
        assert acl.rt.synchronize_device() == 0
        np.testing.assert_array_equal(_read(ptrs["out"]), np.arange(N, dtype=np.float32) + 10)
        _upload(ptrs["out"], np.zeros(N, np.float32))
        answer["launched"] = True
        ws, ex, _ = aclnn.aclnnAddGetWorkspaceSize(t["a"], t["b"], alpha, t["out"])
        _run(ws, ex)  # taken: the front end trusts it and dispatches nothing
        assert acl.rt.synchronize_device() == 0
        np.testing.assert_array_equal(_read(ptrs["out"]), np.zeros(N, np.float32))
        assert len(asked) == 2 and asked[0] is asked[1] is get_backend().runtime.stream(None)
    finally:
        del memo[RELAUNCH]

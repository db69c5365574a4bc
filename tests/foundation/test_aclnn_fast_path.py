"""The phase-1 cache and repeatable executors stay sound on their fast paths (issue 4: host overhead)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from acl_core import acl, aclnn
from acl_core.aclnn import _cache
from acl_core.plugin import get_backend

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
    acl.rt.set_device(0)
    ptrs = {name: _malloc(N * 4) for name in ("a", "b", "out")}
    _upload(ptrs["a"], np.arange(N, dtype=np.float32))
    _upload(ptrs["b"], np.full(N, 10, np.float32))
    t = {name: aclnn.aclCreateTensor([N], 0, [1], 0, 2, [N], ptr) for name, ptr in ptrs.items()}
    yield {"ptrs": ptrs, "t": t, "alpha": aclnn.aclCreateScalar(1.0, 0)}
    for ptr in ptrs.values():
        if ptr:
            acl.rt.free(ptr)


def _entry(t: dict, alpha: object) -> object:
    from acl_core.spec.ops import get_spec
    from acl_core.spec.validate import signature

    spec = get_spec("Add")
    key = signature(spec, {"self": t["a"], "other": t["b"], "alpha": alpha, "out": t["out"]})
    assert key is not None
    return _cache.get((id(get_backend()), *key))


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

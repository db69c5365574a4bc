"""The two-phase aclnn call: executor lifecycle, workspace checks, and the validation cache staying honest."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from acl_core import acl, aclnn

N = 16


@pytest.fixture
def env() -> Iterator[dict]:
    assert acl.init() in (0, 100002)  # ACL_ERROR_REPEAT_INITIALIZE when an earlier test initialised
    assert acl.rt.set_device(0) == 0
    stream, _ = acl.rt.create_stream()
    ptrs = {}
    tensors = {}
    for name in ("a", "b", "out"):
        ptr, ret = acl.rt.malloc(N * 4, 0)
        assert ret == 0
        ptrs[name] = ptr
        tensors[name] = aclnn.aclCreateTensor([N], 0, [1], 0, 2, [N], ptr)
    host = np.arange(N, dtype=np.float32)
    for name in ("a", "b"):
        assert acl.rt.memcpy(ptrs[name], N * 4, acl.util.numpy_to_ptr(host), N * 4, 1) == 0
    yield {"stream": stream, "ptrs": ptrs, "t": tensors, "alpha": aclnn.aclCreateScalar(1.0, 0)}
    for ptr in ptrs.values():
        acl.rt.free(ptr)
    acl.rt.destroy_stream(stream)


def _read(ptr: int) -> np.ndarray:
    out = np.empty(N, np.float32)
    assert acl.rt.memcpy(acl.util.numpy_to_ptr(out), N * 4, ptr, N * 4, 2) == 0
    return out


def test_single_use_and_repeatable_executors(env: dict) -> None:
    t = env["t"]
    ws, ex, ret = aclnn.aclnnAddGetWorkspaceSize(t["a"], t["b"], env["alpha"], t["out"])
    assert (ws, ret) == (0, 0)
    assert aclnn.aclnnAdd(None, ws, ex, env["stream"]) == 0
    assert acl.rt.synchronize_stream(env["stream"]) == 0
    assert np.array_equal(_read(env["ptrs"]["out"]), 2 * np.arange(N, dtype=np.float32))
    assert aclnn.aclnnAdd(None, ws, ex, env["stream"]) == 161002  # single use
    assert "single-use" in aclnn.aclGetRecentErrMsg()
    ws, ex, _ = aclnn.aclnnAddGetWorkspaceSize(t["a"], t["b"], env["alpha"], t["out"])
    assert aclnn.aclSetAclOpExecutorRepeatable(ex) == 0
    for _ in range(3):
        assert aclnn.aclnnAdd(None, ws, ex, None) == 0
    assert aclnn.aclDestroyAclOpExecutor(ex) == 0
    assert aclnn.aclnnAdd(None, ws, ex, None) == 161002
    assert aclnn.aclDestroyAclOpExecutor(ex) == 161002
    assert aclnn.aclSetAclOpExecutorRepeatable(None) == 561103
    assert aclnn.aclnnAdd(None, 0, None, None) == 161001


def test_executor_belongs_to_its_operator_and_stream_must_exist(env: dict) -> None:
    t = env["t"]
    ws, ex, _ = aclnn.aclnnAddGetWorkspaceSize(t["a"], t["b"], env["alpha"], t["out"])
    assert aclnn.aclnnMul(None, ws, ex, None) == 161002
    assert aclnn.aclnnAdd(None, ws, ex, 987654) == 161002
    assert "stream" in aclnn.aclGetRecentErrMsg()
    for not_a_stream in ("x", 1.5, True, -1):  # the runtime's handle conversion, not an internal error
        assert aclnn.aclnnAdd(None, ws, ex, not_a_stream) == 161002
        assert "stream" in aclnn.aclGetRecentErrMsg()
    assert aclnn.aclnnAdd(None, ws, ex, env["stream"]) == 0  # the refused launches did not use it up


def test_memory_freed_between_the_phases_is_caught(env: dict) -> None:
    t = env["t"]
    ws, ex, ret = aclnn.aclnnAddGetWorkspaceSize(t["a"], t["b"], env["alpha"], t["out"])
    assert ret == 0
    scratch, _ = acl.rt.malloc(64, 0)
    ptr_b = env["ptrs"].pop("b")
    assert acl.rt.free(ptr_b) == 0
    assert aclnn.aclnnAdd(None, ws, ex, None) == 161002
    assert "freed" in aclnn.aclGetRecentErrMsg()
    # the cached validation of the same signature does not survive the free either
    assert aclnn.aclnnAddGetWorkspaceSize(t["a"], t["b"], env["alpha"], t["out"])[2] == 161002
    acl.rt.free(scratch)


def test_repointed_and_destroyed_tensors_are_not_served_from_the_cache(env: dict) -> None:
    t = env["t"]
    assert aclnn.aclnnAddGetWorkspaceSize(t["a"], t["b"], env["alpha"], t["out"])[2] == 0
    ws, ex, _ = aclnn.aclnnAddGetWorkspaceSize(t["a"], t["b"], env["alpha"], t["out"])
    assert aclnn.aclSetRawTensorAddr(t["out"], t["a"].data + 4) == 0  # now overlaps an input, partially
    assert aclnn.aclnnAdd(None, ws, ex, None) == 161002
    assert "past the end" in aclnn.aclGetRecentErrMsg()  # re-pointed 4 bytes into a 64-byte allocation
    assert aclnn.aclSetRawTensorAddr(t["out"], env["ptrs"]["out"]) == 0
    assert aclnn.aclDestroyTensor(t["b"]) == 0
    assert aclnn.aclnnAddGetWorkspaceSize(t["a"], t["b"], env["alpha"], t["out"])[2] == 161002


def test_in_place_alias_is_allowed_but_partial_overlap_is_not(env: dict) -> None:
    t = env["t"]
    assert aclnn.aclnnAddGetWorkspaceSize(t["a"], t["b"], env["alpha"], t["a"])[2] == 0
    shifted = aclnn.aclCreateTensor([N - 1], 0, [1], 1, 2, [N], env["ptrs"]["a"])
    head = aclnn.aclCreateTensor([N - 1], 0, [1], 0, 2, [N], env["ptrs"]["a"])
    b = aclnn.aclCreateTensor([N - 1], 0, [1], 0, 2, [N], env["ptrs"]["b"])
    assert aclnn.aclnnAddGetWorkspaceSize(head, b, env["alpha"], shifted)[2] == 161002


def test_unknown_operator_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError):
        aclnn.aclnnNoSuchOpGetWorkspaceSize  # noqa: B018
    assert "aclnnAddGetWorkspaceSize" in dir(aclnn)

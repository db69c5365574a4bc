"""Executor address rebinding (aclSet*TensorAddr) on repeatable executors: codes, rules and results.

Codes and the alignment rule are checked against tests/data/cann/capture-facts.tsv.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from acl_core import acl, aclnn
from tests.foundation.test_capture import code

N = 16
NBYTES = N * 4


@pytest.fixture
def env() -> Iterator[dict]:
    assert acl.init() in (0, 100002)
    assert acl.rt.set_device(0) == 0
    ptrs = {n: acl.rt.malloc(NBYTES, 0)[0] for n in ("a", "b", "out", "a2", "out2")}
    small, _ = acl.rt.malloc(8, 0)
    for n, k in (("a", 1), ("b", 2), ("a2", 10)):
        host = np.full(N, k, np.float32)
        assert acl.rt.memcpy(ptrs[n], NBYTES, acl.util.numpy_to_ptr(host), NBYTES, 1) == 0
    t = {n: aclnn.aclCreateTensor([N], 0, [1], 0, 2, [N], ptrs[n]) for n in ("a", "b", "out")}
    ws, ex, ret = aclnn.aclnnAddGetWorkspaceSize(t["a"], t["b"], aclnn.aclCreateScalar(1.0, 0), t["out"])
    assert ret == 0
    yield {"p": ptrs, "t": t, "ws": ws, "ex": ex, "small": small}
    for p in (*ptrs.values(), small):
        acl.rt.free(p)


def _read(ptr: int) -> np.ndarray:
    out = np.empty(N, np.float32)
    assert acl.rt.memcpy(acl.util.numpy_to_ptr(out), NBYTES, ptr, NBYTES, 2) == 0
    return out


def _run(env: dict) -> None:
    assert aclnn.aclnnAdd(None, env["ws"], env["ex"], None) == 0
    assert acl.rt.synchronize_stream(None) == 0


def test_rebinding_inputs_and_outputs_without_a_new_phase_1(env: dict) -> None:
    ex, t, p = env["ex"], env["t"], env["p"]
    assert aclnn.aclSetInputTensorAddr(ex, 0, t["a"], p["a2"]) == code("ACLNN_ERR_PARAM_INVALID")  # not repeatable
    assert aclnn.aclSetAclOpExecutorRepeatable(ex) == 0
    _run(env)
    assert (_read(p["out"]) == 3).all()
    assert aclnn.aclSetInputTensorAddr(ex, 0, t["a"], p["a2"]) == 0
    assert aclnn.aclGetRawTensorAddr(t["a"]) == (p["a2"], 0)
    assert aclnn.aclSetOutputTensorAddr(ex, 0, t["out"], p["out2"]) == 0
    _run(env)
    assert (_read(p["out2"]) == 12).all() and (_read(p["out"]) == 3).all()
    # aclSetTensorAddr counts every tensor parameter: self, other, out
    assert aclnn.aclSetTensorAddr(ex, 2, t["out"], p["out"]) == 0
    assert aclnn.aclSetTensorAddr(ex, 1, t["b"], p["a2"]) == 0
    _run(env)
    assert (_read(p["out"]) == 20).all()
    assert aclnn.aclDestroyAclOpExecutor(ex) == 0
    assert aclnn.aclSetInputTensorAddr(ex, 0, t["a"], p["a"]) == code("ACLNN_ERR_PARAM_INVALID")


def test_rebinding_refusals_carry_the_official_codes(env: dict) -> None:
    ex, t, p = env["ex"], env["t"], env["p"]
    assert aclnn.aclSetAclOpExecutorRepeatable(ex) == 0
    invalid, nullptr, inner = (
        code("ACLNN_ERR_PARAM_INVALID"),
        code("ACLNN_ERR_PARAM_NULLPTR"),
        code("ACLNN_ERR_INNER_NULLPTR"),
    )
    assert aclnn.aclSetInputTensorAddr(None, 0, t["a"], p["a2"]) == inner
    assert aclnn.aclSetInputTensorAddr(ex, 0, None, p["a2"]) == inner
    assert aclnn.aclSetInputTensorAddr(ex, 0, t["a"], 0) == nullptr
    assert aclnn.aclSetInputTensorAddr(ex, 2, t["a"], p["a2"]) == invalid  # Add has two input tensors
    assert aclnn.aclSetOutputTensorAddr(ex, 1, t["out"], p["out2"]) == invalid
    assert aclnn.aclSetTensorAddr(ex, 3, t["out"], p["out2"]) == invalid
    assert aclnn.aclSetInputTensorAddr(ex, 0, t["b"], p["a2"]) == invalid  # not the tensor at index 0
    assert aclnn.aclSetInputTensorAddr(ex, 0, t["a"], p["a2"] + 16) == invalid  # not 32-byte aligned
    assert code("set_tensor_addr_alignment") == 32
    assert aclnn.aclSetInputTensorAddr(ex, 0, t["a"], p["a2"] + 32) == invalid  # 64 bytes do not fit after it
    assert aclnn.aclSetInputTensorAddr(ex, 0, t["a"], env["small"]) == invalid  # too small an allocation
    assert aclnn.aclSetInputTensorAddr(ex, 0, t["a"], 1 << 40) == invalid  # no memory there
    assert aclnn.aclSetInputTensorAddr(ex, -1, t["a"], p["a2"]) == invalid
    assert aclnn.aclSetDynamicInputTensorAddr(ex, 0, 0, None, p["a2"]) == invalid  # irIndex 0 is no list
    assert aclnn.aclGetRawTensorAddr(t["a"]) == (p["a"], 0)  # nothing refused changed the tensor
    _run(env)
    assert (_read(p["out"]) == 3).all()


def test_dynamic_rebinding_of_a_tensor_list_member() -> None:
    assert acl.init() in (0, 100002)
    assert acl.rt.set_device(0) == 0
    ptrs = [acl.rt.malloc(NBYTES, 0)[0] for _ in range(4)]
    for i, ptr in enumerate(ptrs[:3]):
        host = np.full(N, i + 1, np.float32)
        acl.rt.memcpy(ptr, NBYTES, acl.util.numpy_to_ptr(host), NBYTES, 1)
    members = [aclnn.aclCreateTensor([N], 0, [1], 0, 2, [N], p) for p in ptrs[:2]]
    lst = aclnn.aclCreateTensorList(members)
    out = aclnn.aclCreateTensor([2 * N], 0, [1], 0, 2, [2 * N], acl.rt.malloc(2 * NBYTES, 0)[0])
    ws, ex, ret = aclnn.aclnnCatGetWorkspaceSize(lst, 0, out)
    assert ret == 0 and aclnn.aclSetAclOpExecutorRepeatable(ex) == 0
    invalid = code("ACLNN_ERR_PARAM_INVALID")
    assert aclnn.aclSetDynamicInputTensorAddr(ex, 0, 2, lst, ptrs[2]) == invalid  # the list holds 2
    assert aclnn.aclSetDynamicInputTensorAddr(ex, 1, 0, lst, ptrs[2]) == invalid  # irIndex 1 is out
    assert aclnn.aclSetDynamicOutputTensorAddr(ex, 0, 0, lst, ptrs[2]) == invalid  # out is no list
    assert aclnn.aclSetDynamicInputTensorAddr(ex, 0, 0, None, ptrs[2]) == code("ACLNN_ERR_INNER_NULLPTR")
    assert aclnn.aclSetDynamicInputTensorAddr(ex, 0, 1, lst, ptrs[2]) == 0
    assert aclnn.aclSetDynamicTensorAddr(ex, 0, 0, lst, ptrs[2]) == 0
    assert aclnn.aclnnCat(None, ws, ex, None) == 0
    assert acl.rt.synchronize_stream(None) == 0
    got = np.empty(2 * N, np.float32)
    acl.rt.memcpy(acl.util.numpy_to_ptr(got), 2 * NBYTES, aclnn.aclGetRawTensorAddr(out)[0], 2 * NBYTES, 2)
    assert (got == 3).all()

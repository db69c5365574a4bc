"""HCCL collectives inside a stream capture on the reference (one rank): logged as tasks, replayed afresh.

A captured HcclAllReduce is a task of the capture's log (aclmdlRIDebugPrint lists it beside the
aclnn launches) and each replay reads its inputs when it runs, after the captured work before it:
replaying twice with new inputs equals running eagerly.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from acl_core import acl, aclnn, hccl
from acl_core.spec.collective import HcclDataType, HcclReduceOp

N = 64
NBYTES = N * 4
FP32, SUM = int(HcclDataType.HCCL_DATA_TYPE_FP32), int(HcclReduceOp.HCCL_REDUCE_SUM)
RELAXED = 2


@pytest.fixture
def env() -> Iterator[dict]:
    assert acl.init() in (0, 100002)
    assert acl.rt.set_device(0) == 0
    info, ret = hccl.HcclGetRootInfo()
    assert ret == 0
    comm, ret = hccl.HcclCommInitRootInfo(1, info, 0)
    assert ret == 0, hccl.last_error_message()
    stream, _ = acl.rt.create_stream()
    dev = {n: acl.rt.malloc(NBYTES, 0)[0] for n in ("a", "b", "sum", "reduced")}
    yield {"comm": comm, "s": stream, "dev": dev}
    acl.rt.destroy_stream(stream)
    for p in dev.values():
        acl.rt.free(p)
    assert hccl.HcclCommDestroy(comm) == 0


def _write(ptr: int, values: np.ndarray) -> None:
    host = np.ascontiguousarray(values, np.float32)
    assert acl.rt.memcpy(ptr, NBYTES, acl.util.numpy_to_ptr(host), NBYTES, 1) == 0


def _read(ptr: int) -> np.ndarray:
    out = np.empty(N, np.float32)
    assert acl.rt.memcpy(acl.util.numpy_to_ptr(out), NBYTES, ptr, NBYTES, 2) == 0
    return out


def _enqueue(env: dict) -> None:
    """sum = a + b (aclnnAdd), then reduced = AllReduce(sum) on the one-rank communicator, on ``env["s"]``."""
    d = env["dev"]
    t = {n: aclnn.aclCreateTensor([N], 0, [1], 0, 2, [N], d[n]) for n in ("a", "b", "sum")}
    ws, ex, ret = aclnn.aclnnAddGetWorkspaceSize(t["a"], t["b"], aclnn.aclCreateScalar(1.0, 0), t["sum"])
    assert ret == 0
    assert aclnn.aclnnAdd(None, ws, ex, env["s"]) == 0
    ret = hccl.HcclAllReduce(d["sum"], d["reduced"], N, FP32, SUM, env["comm"], env["s"])
    assert ret == 0, hccl.last_error_message()


def _inputs(env: dict, k: int) -> None:
    rng = np.random.default_rng(k)
    _write(env["dev"]["a"], rng.standard_normal(N))
    _write(env["dev"]["b"], rng.standard_normal(N))
    _write(env["dev"]["reduced"], np.zeros(N))


def test_an_all_reduce_in_a_capture_replays_twice_as_eager(env: dict, capsys: pytest.CaptureFixture[str]) -> None:
    eager = []
    for k in (1, 2):
        _inputs(env, k)
        _enqueue(env)
        assert acl.rt.synchronize_stream(env["s"]) == 0
        eager.append(_read(env["dev"]["reduced"]))
    assert not np.array_equal(eager[0], eager[1])
    _write(env["dev"]["reduced"], np.zeros(N))
    assert acl.mdl.ri_capture_begin(env["s"], RELAXED) == 0
    _enqueue(env)
    model, ret = acl.mdl.ri_capture_end(env["s"])
    assert ret == 0
    assert acl.rt.synchronize_stream(env["s"]) == 0
    assert (_read(env["dev"]["reduced"]) == 0).all(), "captured work must not run at capture"
    assert acl.mdl.ri_debug_print(model) == 0
    log = capsys.readouterr().out
    assert "aclnnAdd" in log and "HcclAllReduce" in log and "2 task(s)" in log
    for k, want in zip((1, 2), eager):
        _inputs(env, k)
        assert acl.mdl.ri_execute_async(model, env["s"]) == 0
        assert acl.rt.synchronize_stream(env["s"]) == 0
        np.testing.assert_array_equal(_read(env["dev"]["reduced"]), want)
    assert acl.mdl.ri_destroy(model) == 0


def test_a_barrier_is_captured_as_a_task_and_replayed(
    env: dict, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """HcclBarrier is stream-ordered (CANN): captured between the add and the all-reduce it is a task of the log
    that meets the other ranks at each replay, not at capture; the replays still equal the eager results."""
    from acl_reference.collectives import MpiEngine, Op

    barriers: list[int] = []
    exchange = MpiEngine._exchange

    def counted(self: MpiEngine, comm: object, op: int, *rest: object) -> object:
        if op == Op.BARRIER:
            barriers.append(op)
        return exchange(self, comm, op, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(MpiEngine, "_exchange", counted)
    _inputs(env, 3)
    _enqueue(env)
    assert acl.rt.synchronize_stream(env["s"]) == 0
    want = _read(env["dev"]["reduced"])
    assert acl.mdl.ri_capture_begin(env["s"], RELAXED) == 0
    assert hccl.HcclBarrier(env["comm"], env["s"]) == 0, hccl.last_error_message()
    _enqueue(env)
    model, ret = acl.mdl.ri_capture_end(env["s"])
    assert ret == 0
    assert not barriers, "the captured barrier met the ranks at capture"
    assert acl.mdl.ri_debug_print(model) == 0
    log = capsys.readouterr().out
    assert "HcclBarrier" in log and "3 task(s)" in log, log
    for k in range(2):
        _inputs(env, 3)
        assert acl.mdl.ri_execute_async(model, env["s"]) == 0
        assert acl.rt.synchronize_stream(env["s"]) == 0
        np.testing.assert_array_equal(_read(env["dev"]["reduced"]), want)
        assert len(barriers) == k + 1
    assert acl.mdl.ri_destroy(model) == 0


def test_a_collective_on_an_invalidated_capture_is_refused(env: dict) -> None:
    from acl_core.plugin import get_backend

    rt = get_backend().runtime
    assert acl.mdl.ri_capture_begin(env["s"], RELAXED) == 0
    rec = rt.capture.recording[env["s"]]
    rec.invalidated = "a test"
    d = env["dev"]
    ret = hccl.HcclAllReduce(d["a"], d["reduced"], N, FP32, SUM, env["comm"], env["s"])
    assert ret != 0 and "invalidated" in hccl.last_error_message()
    acl.mdl.ri_capture_end(env["s"])

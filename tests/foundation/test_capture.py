"""Stream capture (acl.mdl, aclmdlRI*): every rule and code, on the reference recorder.

Codes and enum values are checked against tests/data/cann/capture-facts.tsv (copied CANN facts).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from acl_core import acl, aclnn
from acl_core.errors import AclnnStatus, RtErrorCode
from acl_core.plugin import get_backend
from acl_core.spec.runtime import CaptureMode, CaptureStatus

FACTS = {
    name: int(value)
    for kind, name, value in (
        line.split("\t")
        for line in (Path(__file__).parents[1] / "data/cann/capture-facts.tsv").read_text().splitlines()
        if line and not line.startswith("#")
    )
    if kind in ("code", "enum", "rule")
}
N = 16
NBYTES = N * 4
GLOBAL, THREAD_LOCAL, RELAXED = 0, 1, 2


def code(name: str) -> int:
    """The official value of a code or enum named in the facts."""
    return FACTS[name]


def test_enums_and_codes_match_the_facts() -> None:
    for member in (*CaptureMode, *CaptureStatus):
        assert member.value == code(member.name)
    for name, value in FACTS.items():
        if name.startswith("ACL_ERROR_"):
            short = name.replace("ACL_ERROR_RT_", "ACL_ERROR_")
            members = {m.name: m.value for m in RtErrorCode}
            assert members.get(name, members.get(short)) == value, name
        elif name.startswith("ACLNN_"):
            assert AclnnStatus[name].value == value


@pytest.fixture
def env() -> Iterator[dict]:
    assert acl.init() in (0, 100002)
    assert acl.rt.set_device(0) == 0
    assert get_backend().capabilities().stream_capture
    streams = [acl.rt.create_stream()[0] for _ in range(3)]
    dev = {n: acl.rt.malloc(NBYTES, 0)[0] for n in ("a", "b", "out")}
    host, _ = acl.rt.malloc_host(NBYTES)
    view = np.ctypeslib.as_array((np.ctypeslib.ctypes.c_float * N).from_address(host))
    view[:] = 0
    yield {"s": streams, "dev": dev, "host": host, "view": view}
    rt = get_backend().runtime
    for s in streams:  # a test that left a capture open must not leak it into the next
        rec = rt.capture.recording.get(s)
        if rec is not None:
            rt.capture._stop(rec)
            rt.driver.capture_end(rt.stream(rec.origin))
    acl.mdl.ri_capture_thread_exchange_mode(GLOBAL)
    for s in streams:
        acl.rt.destroy_stream(s)
    for p in dev.values():
        acl.rt.free(p)
    acl.rt.free_host(host)


def _write(ptr: int, values: np.ndarray) -> None:
    assert acl.rt.memcpy(ptr, NBYTES, acl.util.numpy_to_ptr(np.ascontiguousarray(values, np.float32)), NBYTES, 1) == 0


def _read(ptr: int) -> np.ndarray:
    out = np.empty(N, np.float32)
    assert acl.rt.memcpy(acl.util.numpy_to_ptr(out), NBYTES, ptr, NBYTES, 2) == 0
    return out


def _add(env: dict, stream: int) -> tuple[int, object]:
    d = env["dev"]
    t = {n: aclnn.aclCreateTensor([N], 0, [1], 0, 2, [N], p) for n, p in d.items()}
    ws, ex, ret = aclnn.aclnnAddGetWorkspaceSize(t["a"], t["b"], aclnn.aclCreateScalar(1.0, 0), t["out"])
    assert ret == 0
    return aclnn.aclnnAdd(None, ws, ex, stream), ex


def test_capture_records_without_running_and_replays_reading_memory_at_replay(env: dict) -> None:
    s = env["s"][0]
    d = env["dev"]
    _write(d["a"], np.ones(N))
    _write(d["b"], np.full(N, 2))
    _write(d["out"], np.zeros(N))
    assert acl.mdl.ri_capture_begin(s, GLOBAL) == 0
    status, model, ret = acl.mdl.ri_capture_get_info(s)
    assert (status, ret) == (code("ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE"), 0) and model
    assert _add(env, s)[0] == 0
    assert acl.rt.memcpy_async(env["host"], NBYTES, d["out"], NBYTES, 2, s) == 0
    assert acl.mdl.ri_capture_end(s) == (model, 0)
    assert acl.rt.synchronize_stream(s) == 0
    assert (_read(d["out"]) == 0).all() and (env["view"] == 0).all()  # captured work did not run
    assert acl.mdl.ri_capture_get_info(s) == (code("ACL_MODEL_RI_CAPTURE_STATUS_NONE"), 0, 0)
    previous = 0
    for k in (1, 5):  # inputs changed in place between replays: the replay reads them then
        _write(d["a"], np.full(N, k))
        assert acl.mdl.ri_execute_async(model, env["s"][1]) == 0  # replay on another stream than the capture's
        assert (env["view"] == previous).all()  # enqueued, not yet run
        previous = k + 2
        assert acl.rt.synchronize_stream(env["s"][1]) == 0
        assert (env["view"] == k + 2).all() and (_read(d["out"]) == k + 2).all()
    _write(d["a"], np.full(N, 10))
    assert acl.mdl.ri_execute(model, -1) == 0
    assert (env["view"] == 12).all()
    assert acl.mdl.ri_destroy(model) == 0
    assert acl.mdl.ri_destroy(model) == 107017  # ACL_ERROR_RT_INVALID_HANDLE, as for streams and events
    assert acl.mdl.ri_execute_async(model, s) == 107017


def test_debug_print_lists_the_task_log(env: dict, capsys: pytest.CaptureFixture[str]) -> None:
    s = env["s"][0]
    assert acl.mdl.ri_capture_begin(s, RELAXED) == 0
    assert _add(env, s)[0] == 0
    assert acl.rt.memset_async(env["dev"]["out"], NBYTES, 0, NBYTES, s) == 0
    model, _ = acl.mdl.ri_capture_end(s)
    assert acl.mdl.ri_debug_print(model) == 0
    out = capsys.readouterr().out
    assert "aclnnAdd" in out and "aclrtMemsetAsync" in out and "2 task(s)" in out
    assert acl.mdl.ri_destroy(model) == 0
    assert acl.mdl.ri_debug_print(model) == 107017


def test_begin_end_pairing_codes(env: dict) -> None:
    s, other, _ = env["s"]
    assert acl.mdl.ri_capture_end(s) == (0, code("ACL_ERROR_RT_STREAM_NOT_CAPTURED"))
    assert acl.mdl.ri_capture_begin(None, GLOBAL) == code("ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT")
    assert acl.mdl.ri_capture_begin(0, GLOBAL) == code("ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT")
    assert acl.mdl.ri_capture_begin(s, 7) == code("ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT")
    assert acl.mdl.ri_capture_begin(s, "0") == 100000  # C argument layer: an enum takes an int
    assert acl.mdl.ri_capture_begin(0xDEAD, GLOBAL) == 107017
    assert acl.mdl.ri_capture_begin(s, GLOBAL) == 0
    assert acl.mdl.ri_capture_begin(s, GLOBAL) == code("ACL_ERROR_RT_STREAM_CAPTURED")
    assert acl.rt.destroy_stream(s) == code("ACL_ERROR_RT_STREAM_CAPTURED")
    _, model, _ = acl.mdl.ri_capture_get_info(s)
    assert acl.mdl.ri_execute_async(model, other) == code("ACL_ERROR_RT_MODEL_CAPTURED")
    assert acl.mdl.ri_destroy(model) == code("ACL_ERROR_RT_MODEL_CAPTURED")
    assert acl.mdl.ri_capture_end(other) == (0, code("ACL_ERROR_RT_STREAM_NOT_CAPTURED"))
    model2, ret = acl.mdl.ri_capture_end(s)
    assert (model2, ret) == (model, 0)
    assert acl.mdl.ri_execute(model, 0) == 100000 and acl.mdl.ri_execute(model, -2) == 100000
    assert acl.mdl.ri_destroy(model) == 0


def test_a_model_is_not_replayed_into_a_capture(env: dict) -> None:
    s, other, _ = env["s"]
    assert acl.mdl.ri_capture_begin(s, GLOBAL) == 0
    model, _ = acl.mdl.ri_capture_end(s)
    assert acl.mdl.ri_capture_begin(other, GLOBAL) == 0
    assert acl.mdl.ri_execute_async(model, other) == code("ACL_ERROR_RT_SUB_ACLGRAPH_IS_CAPTURING")
    assert acl.mdl.ri_capture_end(other)[1] == 0


def test_blocking_calls_on_a_capturing_stream_invalidate_it(env: dict) -> None:
    s = env["s"][0]
    for block in (lambda: acl.rt.synchronize_stream(s), lambda: acl.rt.stream_query(s)[1]):
        assert acl.mdl.ri_capture_begin(s, RELAXED) == 0
        assert block() == code("ACL_ERROR_RT_CAPTURE_MODE_BLOCK_ASYNC")
        status, model, _ = acl.mdl.ri_capture_get_info(s)
        assert status == code("ACL_MODEL_RI_CAPTURE_STATUS_INVALIDATED")
        assert acl.rt.memset_async(env["dev"]["out"], NBYTES, 0, NBYTES, s) == code(
            "ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED"
        )
        assert acl.mdl.ri_capture_end(s) == (0, code("ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED"))
        assert acl.mdl.ri_destroy(model) == 107017  # nothing was kept
        assert acl.mdl.ri_capture_get_info(s)[0] == 0
    assert acl.mdl.ri_capture_begin(s, RELAXED) == 0
    assert acl.rt.synchronize_device() == code("ACL_ERROR_RT_CAPTURE_MODE_BLOCK_ASYNC")
    assert acl.mdl.ri_capture_end(s)[1] == 0  # a device synchronisation does not invalidate


def _unsafe_calls(env: dict) -> dict[str, int]:
    d, host = env["dev"], env["host"]
    pageable = np.zeros(N, np.float32)
    return {
        "memcpy": acl.rt.memcpy(d["a"], NBYTES, host, NBYTES, 1),
        "memset": acl.rt.memset(d["a"], NBYTES, 0, NBYTES),
        "memcpy2d": acl.rt.memcpy2d(d["a"], 8, host, 8, 8, 2, 1),
        "async_pageable": acl.rt.memcpy_async(d["a"], NBYTES, acl.util.numpy_to_ptr(pageable), NBYTES, 1, env["s"][2]),
    }


def test_modes_refuse_unsafe_calls_on_the_threads_they_name(env: dict) -> None:
    s = env["s"][0]
    block = code("ACL_ERROR_RT_CAPTURE_MODE_BLOCK_ASYNC")
    for mode in (GLOBAL, THREAD_LOCAL):
        assert acl.mdl.ri_capture_begin(s, mode) == 0
        assert set(_unsafe_calls(env).values()) == {block}  # the capturing thread: refused in both modes
        other: dict[str, int] = {}

        def elsewhere(into: dict[str, int] = other) -> None:
            acl.rt.set_device(0)
            into.update(_unsafe_calls(env))

        t = threading.Thread(target=elsewhere)
        t.start()
        t.join()
        if mode == GLOBAL:  # another thread: refused by a GLOBAL capture only
            assert set(other.values()) == {block}
        else:
            assert other["memcpy"] == 0 and other["async_pageable"] == 100000  # pageable async: never allowed
        assert acl.mdl.ri_capture_end(s)[1] == 0
    assert acl.mdl.ri_capture_begin(s, RELAXED) == 0
    assert _unsafe_calls(env)["memcpy"] == 0
    assert acl.mdl.ri_capture_end(s)[1] == 0


def test_thread_exchange_mode_is_per_thread(env: dict) -> None:
    s = env["s"][0]
    assert acl.mdl.ri_capture_thread_exchange_mode(RELAXED) == (GLOBAL, 0)
    assert acl.mdl.ri_capture_thread_exchange_mode(9) == (-1, code("ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT"))
    assert acl.mdl.ri_capture_begin(s, GLOBAL) == 0
    assert _unsafe_calls(env)["memcpy"] == 0  # this thread is RELAXED: nothing is refused to it
    seen: list[tuple[int, int]] = []
    t = threading.Thread(target=lambda: seen.append(acl.mdl.ri_capture_thread_exchange_mode(THREAD_LOCAL)))
    t.start()
    t.join()
    assert seen == [(GLOBAL, 0)]  # another thread starts in GLOBAL
    assert acl.mdl.ri_capture_thread_exchange_mode(GLOBAL) == (RELAXED, 0)
    assert _unsafe_calls(env)["memcpy"] == code("ACL_ERROR_RT_CAPTURE_MODE_BLOCK_ASYNC")
    assert acl.mdl.ri_capture_end(s)[1] == 0


def test_end_on_the_wrong_thread(env: dict) -> None:
    s = env["s"][0]
    for mode, expected in ((GLOBAL, code("ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD")), (RELAXED, 0)):
        assert acl.mdl.ri_capture_begin(s, mode) == 0
        got: list[tuple[int, int]] = []

        def end_elsewhere(into: list[tuple[int, int]] = got) -> None:
            acl.rt.set_device(0)
            into.append(acl.mdl.ri_capture_end(s))

        t = threading.Thread(target=end_elsewhere)
        t.start()
        t.join()
        assert got[0][1] == expected
        if expected:
            assert acl.mdl.ri_capture_end(s)[1] == 0


def test_capture_spreads_through_events_and_must_rejoin(env: dict) -> None:
    s, side, _ = env["s"]
    d = env["dev"]
    fork, _ = acl.rt.create_event()
    join, _ = acl.rt.create_event()
    _write(d["a"], np.ones(N))
    _write(d["b"], np.full(N, 3))
    # fork: side joins the capture through an event recorded on s, then rejoins
    assert acl.mdl.ri_capture_begin(s, GLOBAL) == 0
    assert acl.rt.record_event(fork, s) == 0
    assert acl.rt.synchronize_event(fork) == code("ACL_ERROR_RT_EVENT_CAPTURED")
    assert acl.rt.query_event(fork)[1] == code("ACL_ERROR_RT_EVENT_CAPTURED")
    assert acl.rt.stream_wait_event(side, fork) == 0
    status, model, _ = acl.mdl.ri_capture_get_info(side)
    assert status == code("ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE")
    assert _add(env, side)[0] == 0  # recorded into s's capture
    assert acl.rt.stream_wait_event(None, fork) == code("ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT")
    assert acl.mdl.ri_capture_end(side) == (0, code("ACL_ERROR_RT_STREAM_CAPTURE_UNMATCHED"))
    assert acl.rt.synchronize_stream(side) == code("ACL_ERROR_RT_CAPTURE_MODE_BLOCK_ASYNC")  # side captures now
    assert acl.mdl.ri_capture_end(s) == (0, code("ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED"))
    assert acl.mdl.ri_capture_get_info(side)[0] == 0  # the joined stream left the capture too
    # an unjoined fork: 107025 at End
    assert acl.mdl.ri_capture_begin(s, GLOBAL) == 0
    assert acl.rt.record_event(fork, s) == 0
    assert acl.rt.stream_wait_event(side, fork) == 0
    assert _add(env, side)[0] == 0
    assert acl.mdl.ri_capture_end(s) == (0, code("ACL_ERROR_RT_STREAM_UNJOINED"))
    # joined and rejoined: the replay runs side's work too
    assert acl.mdl.ri_capture_begin(s, GLOBAL) == 0
    assert acl.rt.record_event(fork, s) == 0
    assert acl.rt.stream_wait_event(side, fork) == 0
    assert _add(env, side)[0] == 0
    assert acl.rt.record_event(join, side) == 0
    assert acl.rt.stream_wait_event(s, join) == 0
    assert acl.rt.memcpy_async(env["host"], NBYTES, d["out"], NBYTES, 2, s) == 0
    model, ret = acl.mdl.ri_capture_end(s)
    assert ret == 0
    assert (env["view"] == 0).all()
    assert acl.mdl.ri_execute(model, -1) == 0
    assert (env["view"] == 4).all()
    assert acl.rt.record_event(fork, s) == 0 and acl.rt.synchronize_event(fork) == 0  # recorded outside: usable
    assert acl.mdl.ri_destroy(model) == 0


def test_capturing_stream_cannot_wait_for_outside_work_or_another_capture(env: dict) -> None:
    s, other, third = env["s"]
    outside, _ = acl.rt.create_event()
    assert acl.rt.record_event(outside, third) == 0
    assert acl.mdl.ri_capture_begin(s, GLOBAL) == 0
    assert acl.rt.stream_wait_event(s, outside) == code("ACL_ERROR_RT_CAPTURE_DEPENDENCY")
    assert acl.mdl.ri_capture_end(s)[1] == code("ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED")
    mine, _ = acl.rt.create_event()
    assert acl.mdl.ri_capture_begin(s, GLOBAL) == 0
    assert acl.mdl.ri_capture_begin(other, GLOBAL) == 0
    assert acl.rt.record_event(mine, s) == 0
    assert acl.rt.stream_wait_event(other, mine) == code("ACL_ERROR_RT_STREAM_CAPTURE_CONFLICT")
    assert acl.mdl.ri_capture_end(other)[1] == 0
    assert acl.mdl.ri_capture_end(s)[1] == 0


def test_task_groups_are_segments_that_an_update_replaces(env: dict) -> None:
    s, upd, _ = env["s"]
    d = env["dev"]
    _write(d["a"], np.ones(N))
    _write(d["b"], np.full(N, 2))
    assert acl.mdl.ri_capture_task_grp_begin(s) == code("ACL_ERROR_RT_STREAM_NOT_CAPTURED")
    assert acl.mdl.ri_capture_begin(s, GLOBAL) == 0
    assert acl.mdl.ri_capture_task_grp_end(s) == (0, code("ACL_ERROR_RT_STREAM_TASK_GROUP_STATUS"))
    assert acl.rt.memset_async(d["out"], NBYTES, 0, NBYTES, s) == 0
    assert acl.mdl.ri_capture_task_grp_begin(s) == 0
    assert acl.mdl.ri_capture_task_grp_begin(s) == code("ACL_ERROR_RT_STREAM_TASK_GROUP_STATUS")
    assert _add(env, s)[0] == 0
    assert acl.mdl.ri_capture_end(s) == (0, code("ACL_ERROR_RT_STREAM_TASK_GROUP_INTR"))
    group, ret = acl.mdl.ri_capture_task_grp_end(s)
    assert ret == 0 and group
    assert acl.mdl.ri_capture_task_update_begin(upd, group) == code("ACL_ERROR_RT_MODEL_CAPTURED")
    assert acl.rt.memcpy_async(env["host"], NBYTES, d["out"], NBYTES, 2, s) == 0
    model, ret = acl.mdl.ri_capture_end(s)
    assert ret == 0
    assert acl.mdl.ri_execute(model, -1) == 0
    assert (env["view"] == 3).all()
    # the update re-issues the group's one task with other arguments (here: out = a + b with a re-pointed)
    assert acl.mdl.ri_capture_task_update_begin(upd, 0xBAD) == 107017
    assert acl.mdl.ri_capture_task_update_begin(None, group) == code("ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT")
    assert acl.mdl.ri_capture_task_update_end(upd) == code("ACL_ERROR_RT_STREAM_NOT_CAPTURED")
    assert acl.mdl.ri_capture_task_update_begin(upd, group) == 0
    assert acl.mdl.ri_capture_task_update_begin(env["s"][2], group) == code("ACL_ERROR_RT_STREAM_TASK_GROUP_STATUS")
    t = {n: aclnn.aclCreateTensor([N], 0, [1], 0, 2, [N], p) for n, p in d.items()}
    ws, ex, _ = aclnn.aclnnAddGetWorkspaceSize(t["b"], t["b"], aclnn.aclCreateScalar(1.0, 0), t["out"])
    assert aclnn.aclnnAdd(None, ws, ex, upd) == 0
    assert acl.mdl.ri_capture_task_update_end(upd) == 0
    assert acl.mdl.ri_execute(model, -1) == 0
    assert (env["view"] == 4).all()  # b + b: the group's task was replaced, the rest of the model kept
    # a mismatched update (two tasks, or another kind) is refused and the model keeps its tasks
    for issue in (
        lambda: (_add(env, upd), _add(env, upd)),
        lambda: acl.rt.memset_async(d["out"], NBYTES, 0, NBYTES, upd),
    ):
        assert acl.mdl.ri_capture_task_update_begin(upd, group) == 0
        issue()
        assert acl.mdl.ri_capture_task_update_end(upd) == code("ACL_ERROR_RT_MODEL_UPDATE_FAILED")
        assert acl.mdl.ri_execute(model, -1) == 0
        assert (env["view"] == 4).all()
    assert acl.mdl.ri_destroy(model) == 0
    assert acl.mdl.ri_capture_task_update_begin(upd, group) == 107017  # the model's groups went with it


def test_execute_timeout(env: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    s = env["s"][0]
    assert acl.mdl.ri_capture_begin(s, GLOBAL) == 0
    assert acl.rt.memset_async(env["dev"]["out"], NBYTES, 0, NBYTES, s) == 0
    model, _ = acl.mdl.ri_capture_end(s)
    assert acl.mdl.ri_execute(model, 1000) == 0
    driver = get_backend().runtime.driver
    monkeypatch.setattr(driver, "stream_done", lambda stream: False)  # a replay that never finishes
    assert acl.mdl.ri_execute(model, 5) == RtErrorCode.ACL_ERROR_RT_STREAM_SYNC_TIMEOUT == 507046
    monkeypatch.undo()
    assert acl.mdl.ri_destroy(model) == 0


def test_refused_ops_invalidate_the_capture(env: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    s = env["s"][0]
    rt = get_backend().runtime
    monkeypatch.setattr(rt.capture, "refused_ops", lambda: ("Add",))
    assert acl.mdl.ri_capture_begin(s, GLOBAL) == 0
    assert _add(env, s)[0] == code("ACL_ERROR_RT_CAPTURE_MODE_BLOCK_ASYNC")
    assert "cannot be captured" in aclnn.aclGetRecentErrMsg()
    assert acl.mdl.ri_capture_end(s)[1] == code("ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED")
    assert _add(env, s)[0] == 0  # outside a capture the op runs


def test_a_backend_without_capture_answers_feature_not_support() -> None:
    from acl_core.runtime import Runtime
    from acl_core.spec.runtime import Driver
    from acl_reference.driver import ReferenceDriver

    class NoCapture(ReferenceDriver):
        capture_begin = Driver.capture_begin  # the seam's default
        capture_end = Driver.capture_end

    rt = Runtime("plain", NoCapture())
    rt.init()
    rt.set_device(0)
    s = rt.create_stream()
    with pytest.raises(Exception) as info:
        rt.ri_capture_begin(s, GLOBAL)
    assert getattr(info.value, "code", None) == code("ACL_ERROR_RT_FEATURE_NOT_SUPPORT")
    assert rt.ri_capture_get_info(s)[0] == 0  # nothing was left half-begun

"""The reference's deferred stream queues: stream work runs at synchronisation, as on a device.

A program that reads results without synchronising sees stale bytes here, exactly where a GPU or an
NPU would show them; every synchronisation the contract offers makes the work visible.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from acl_core import eager
from acl_core.errors import AclError, AclnnError
from acl_core.runtime import Runtime
from acl_core.spec.runtime import EventStatus, StreamStatus
from acl_core.spec.runtime import MemcpyKind as K
from acl_reference.backend import ReferenceBackend
from acl_reference.driver import EAGER_ENV, ReferenceDriver

N = 4096


@pytest.fixture
def rt(monkeypatch: pytest.MonkeyPatch) -> Runtime:
    monkeypatch.delenv(EAGER_ENV, raising=False)
    runtime = Runtime("reference", ReferenceDriver())
    runtime.ensure_device(0)
    return runtime


def _pinned(rt: Runtime, nbytes: int = N) -> tuple[int, np.ndarray]:
    address = rt.malloc_host(nbytes)
    view = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(address))
    view[:] = 0
    return address, view


def _read(rt: Runtime, dev: int, nbytes: int = N) -> np.ndarray:
    """A synchronous D2H copy (it waits for no stream, as aclrtMemcpy)."""
    host, view = _pinned(rt, nbytes)
    rt.memcpy(host, nbytes, dev, nbytes, K.ACL_MEMCPY_DEVICE_TO_HOST)
    return view.copy()


def _filled(rt: Runtime, value: int) -> int:
    dev = rt.malloc(N)
    rt.memset(dev, N, value, N)
    return dev


def test_unsynchronised_read_sees_stale_bytes_until_synchronize_stream(rt: Runtime) -> None:
    dev = _filled(rt, 0x11)
    src, view = _pinned(rt)
    view[:] = 0x22
    s = rt.create_stream()
    rt.memcpy_async(dev, N, src, N, K.ACL_MEMCPY_HOST_TO_DEVICE, s)
    assert (_read(rt, dev) == 0x11).all()  # the copy has not happened: a GPU could show this too
    view[:] = 0x33  # the host rewrites its buffer before the copy ran: the copy takes what is there then
    rt.synchronize_stream(s)
    assert (_read(rt, dev) == 0x33).all()


def test_async_work_runs_in_stream_order_at_synchronisation(rt: Runtime) -> None:
    dev = _filled(rt, 0)
    s = rt.create_stream()
    rt.memset_async(dev, N, 1, N, s)
    rt.memset_async(dev, N, 2, N // 2, s)
    back, view = _pinned(rt)
    rt.memcpy_async(back, N, dev, N, K.ACL_MEMCPY_DEVICE_TO_HOST, s)
    assert (view == 0).all()
    rt.synchronize_stream(s)
    assert (view[: N // 2] == 2).all() and (view[N // 2 :] == 1).all()


def test_query_reports_pending_work_once_then_complete(rt: Runtime) -> None:
    dev = _filled(rt, 0)
    s = rt.create_stream()
    e = rt.create_event()
    rt.memset_async(dev, N, 9, N, s)
    rt.record_event(e, s)
    assert rt.query_event(e) is EventStatus.ACL_EVENT_STATUS_NOT_READY
    assert rt.query_event(e) is EventStatus.ACL_EVENT_STATUS_COMPLETE  # the pending work has run since
    assert (_read(rt, dev) == 9).all()
    rt.record_event(e, s)
    assert _code(rt.event_elapsed_time, e, e) == 107006  # not complete yet: time events after synchronising
    assert rt.event_elapsed_time(e, e) == 0.0  # (and like a query, asking let the work finish)
    rt.memset_async(dev, N, 8, N, s)
    assert rt.stream_query(s) is StreamStatus.ACL_STREAM_STATUS_NOT_READY
    assert rt.stream_query(s) is StreamStatus.ACL_STREAM_STATUS_COMPLETE
    assert (_read(rt, dev) == 8).all()


def test_synchronize_event_runs_work_up_to_the_recording_only(rt: Runtime) -> None:
    a, b = _filled(rt, 0), _filled(rt, 0)
    s = rt.create_stream()
    e = rt.create_event()
    rt.memset_async(a, N, 5, N, s)
    rt.record_event(e, s)
    rt.memset_async(b, N, 6, N, s)
    rt.synchronize_event(e)
    assert (_read(rt, a) == 5).all() and (_read(rt, b) == 0).all()
    rt.synchronize_stream(s)
    assert (_read(rt, b) == 6).all()


def test_elapsed_time_measures_the_work_between_recordings(rt: Runtime) -> None:
    big = 32 << 20
    dev = rt.malloc(big)
    s = rt.create_stream()
    e0, e1 = rt.create_event(), rt.create_event()
    rt.record_event(e0, s)
    for v in range(4):
        rt.memset_async(dev, big, v, big, s)
    rt.record_event(e1, s)
    rt.synchronize_stream(s)
    assert rt.event_elapsed_time(e0, e1) > 0.0


def test_stream_wait_event_makes_the_waiting_stream_see_the_other_streams_writes(rt: Runtime) -> None:
    x, y = _filled(rt, 0), _filled(rt, 0)
    a, b = rt.create_stream(), rt.create_stream()
    e = rt.create_event()
    rt.memset_async(x, N, 0x3C, N, a)
    rt.record_event(e, a)
    rt.memset_async(x, N, 0x77, N, a)  # after the recording: B must not wait for this
    rt.stream_wait_event(b, e)
    rt.memcpy_async(y, N, x, N, K.ACL_MEMCPY_DEVICE_TO_DEVICE, b)
    rt.synchronize_stream(b)
    assert (_read(rt, y) == 0x3C).all()
    assert (_read(rt, x) == 0x3C).all()  # A itself was not synchronised past its event
    rt.synchronize_device()
    assert (_read(rt, x) == 0x77).all()


def test_synchronize_device_runs_every_stream_and_default_stream(rt: Runtime) -> None:
    bufs = [_filled(rt, 0) for _ in range(3)]
    streams = [None, rt.create_stream(), rt.create_stream()]
    for i, (dev, s) in enumerate(zip(bufs, streams)):
        rt.memset_async(dev, N, i + 1, N, s)
    rt.synchronize_device()
    assert [int(_read(rt, d)[0]) for d in bufs] == [1, 2, 3]


def test_free_and_destroy_stream_run_pending_work_first(rt: Runtime) -> None:
    dev, back = _filled(rt, 0), _filled(rt, 0)
    s = rt.create_stream()
    rt.memset_async(dev, N, 4, N, s)
    rt.memcpy_async(back, N, dev, N, K.ACL_MEMCPY_DEVICE_TO_DEVICE, s)
    rt.free(dev)  # like cudaFree: the device's queued work runs before the memory goes
    assert (_read(rt, back) == 4).all()
    rt.memset_async(back, N, 7, N, s)
    rt.destroy_stream(s)
    assert (_read(rt, back) == 7).all()


def test_eager_switch_runs_work_when_enqueued(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(EAGER_ENV, "1")
    rt = Runtime("reference", ReferenceDriver())
    rt.ensure_device(0)
    dev = _filled(rt, 0)
    s = rt.create_stream()
    rt.memset_async(dev, N, 3, N, s)
    assert (_read(rt, dev) == 3).all()
    assert ReferenceBackend().capabilities().notes["execution"].startswith("eager")


def _code(fn, *args) -> int:  # type: ignore[no-untyped-def]
    with pytest.raises(AclError) as exc:
        fn(*args)
    return int(exc.value.code)


@pytest.fixture
def backend(monkeypatch: pytest.MonkeyPatch) -> ReferenceBackend:
    monkeypatch.delenv(EAGER_ENV, raising=False)
    b = ReferenceBackend()
    b.runtime.ensure_device(0)
    return b


def _launch_add(backend: ReferenceBackend, stream: int) -> tuple[eager.DeviceArray, list[eager.DeviceArray]]:
    from acl_core.aclnn import execute, get_workspace_size
    from acl_core.spec.ops import get_spec

    x = eager.to_device(np.arange(6, dtype=np.float32), backend)
    y = eager.to_device(np.full(6, 10, dtype=np.float32), backend)
    out = eager.to_device(np.zeros(6, dtype=np.float32), backend)
    spec = get_spec("Add")
    args = {"self": x.tensor(), "other": y.tensor(), "alpha": eager.to_scalar(1.0), "out": out.tensor()}
    size, executor = get_workspace_size(spec, [], args, backend=backend)
    assert size == 0
    execute(spec, 0, 0, executor, stream)
    return out, [x, y]


def test_an_operator_launch_runs_at_synchronisation(backend: ReferenceBackend) -> None:
    s = backend.runtime.create_stream()
    out, keep = _launch_add(backend, s)
    raw = _read(backend.runtime, out.address, out.nbytes)  # aclrtMemcpy without synchronising: not run yet
    assert (raw == 0).all()
    np.testing.assert_array_equal(out.numpy(), np.arange(6, dtype=np.float32) + 10)  # numpy() waits, as .cpu() does
    backend.runtime.synchronize_stream(s)
    assert keep


def test_a_kernel_error_surfaces_at_synchronisation(backend: ReferenceBackend) -> None:
    from acl_core.aclnn import execute, get_workspace_size
    from acl_core.spec.ops import get_spec

    x = eager.to_device(np.arange(6, dtype=np.float32), backend)
    index = eager.to_device(np.array([0, 9], dtype=np.int64), backend)  # 9 is out of range: only a kernel sees it
    out = eager.to_device(np.zeros(2, dtype=np.float32), backend)
    spec = get_spec("IndexSelect")
    args = {"self": x.tensor(), "dim": 0, "index": index.tensor(), "out": out.tensor()}
    size, executor = get_workspace_size(spec, [], args, backend=backend)
    s = backend.runtime.create_stream()
    execute(spec, 0, size, executor, s)  # phase 2 only enqueues: it cannot know yet
    with pytest.raises(AclnnError) as exc:
        backend.runtime.synchronize_stream(s)
    assert exc.value.code == 161002
    backend.runtime.synchronize_stream(s)  # the error is reported once


def test_eager_run_still_synchronises(backend: ReferenceBackend) -> None:
    got = eager.run("Add", backend, self=np.ones(3, np.float32), other=np.ones(3, np.float32), alpha=2.0)
    np.testing.assert_array_equal(got["out"], np.full(3, 3, np.float32))


def _pending_add(backend: ReferenceBackend, stream: int) -> tuple[dict, object, list[eager.DeviceArray]]:
    """An Add enqueued on ``stream`` (not run yet): its tensors, its repeatable executor, the arrays behind them."""
    from acl_core.aclnn import aclSetAclOpExecutorRepeatable, execute, get_workspace_size
    from acl_core.spec.ops import get_spec

    x = eager.to_device(np.arange(6, dtype=np.float32), backend)
    y = eager.to_device(np.full(6, 10, dtype=np.float32), backend)
    out = eager.to_device(np.zeros(6, dtype=np.float32), backend)
    spec = get_spec("Add")
    args = {"self": x.tensor(), "other": y.tensor(), "alpha": eager.to_scalar(1.0), "out": out.tensor()}
    _, executor = get_workspace_size(spec, [], args, backend=backend)
    assert aclSetAclOpExecutorRepeatable(executor) == 0
    execute(spec, 0, 0, executor, stream)
    return args, executor, [x, y, out]


def test_a_tensor_re_pointed_after_enqueue_leaves_the_pending_launch_on_the_old_memory(
    backend: ReferenceBackend,
) -> None:
    from acl_core.aclnn import aclGetRawTensorAddr, aclSetRawTensorAddr

    s = backend.runtime.create_stream()
    args, _, (x, y, out) = _pending_add(backend, s)
    other_in = eager.to_device(np.full(6, 100, dtype=np.float32), backend)
    other_out = eager.to_device(np.zeros(6, dtype=np.float32), backend)
    assert aclSetRawTensorAddr(args["self"], other_in.address) == 0  # before the work ran: a GPU keeps the old
    assert aclSetRawTensorAddr(args["out"], other_out.address) == 0
    backend.runtime.synchronize_stream(s)
    np.testing.assert_array_equal(out.numpy(), np.arange(6, dtype=np.float32) + 10)
    np.testing.assert_array_equal(other_out.numpy(), np.zeros(6, np.float32))
    assert aclGetRawTensorAddr(args["out"]) == (other_out.address, 0)  # the caller's tensor did move
    assert x is not None and y is not None


def test_executor_rebinding_after_enqueue_applies_to_the_next_launch_only(backend: ReferenceBackend) -> None:
    from acl_core.aclnn import aclSetOutputTensorAddr, execute
    from acl_core.spec.ops import get_spec

    s = backend.runtime.create_stream()
    args, executor, arrays = _pending_add(backend, s)
    out = arrays[2]
    second = eager.to_device(np.zeros(6, dtype=np.float32), backend)
    assert aclSetOutputTensorAddr(executor, 0, args["out"], second.address) == 0
    execute(get_spec("Add"), 0, 0, executor, s)  # the rebound launch, queued behind the first
    backend.runtime.synchronize_stream(s)
    expected = np.arange(6, dtype=np.float32) + 10
    np.testing.assert_array_equal(out.numpy(), expected)  # the first launch wrote where it was pointed
    np.testing.assert_array_equal(second.numpy(), expected)

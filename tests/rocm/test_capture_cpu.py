"""The rocm driver's stream capture on the CPU: the fake provider records like a CUDA graph, the emulator runs it.

Driven through the Driver seam (``capture_begin`` / ``capture_end`` / ``graph_launch`` /
``graph_destroy``) as the shared runtime drives it. Proves: capture runs nothing, replays equal eager
runs bit for bit with inputs changed in place between them, kernel arguments are the graph's own
copy, streams that join a capture through events are captured, a replaced task-group segment runs
instead of the old one, deferred device checks are armed again by every replay, the driver's own
synchronous copies stay legal during a capture, the set-up hooks run before a capture, and refused
operators are refused on a capturing stream with 107041 (the shared runtime's code for them).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np
import pytest

from acl_core.errors import AclError, AclnnError, RtErrorCode
from acl_core.spec.runtime import CaptureMode, CopyDirection, MemcpyKind
from acl_rocm.backend import RocmBackend
from acl_rocm.driver import RocmGraph
from acl_rocm.errors import cann_code
from acl_rocm.ops.elementwise import ElementwiseRunner
from tests.rocm.capture_harness import OpCall, assert_bitwise, capture, compare_replay, replay, run_eager, write
from tests.rocm.fake_provider import FakeProvider

RELAXED = CaptureMode.ACL_MODEL_RI_CAPTURE_MODE_RELAXED


@pytest.fixture
def fake(tmp_path: Path) -> tuple[RocmBackend, FakeProvider]:
    provider = FakeProvider()
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp_path)})
    backend.runtime.ensure_device(0)
    return backend, provider


def _chain(backend: RocmBackend) -> list[OpCall]:
    rng = np.random.default_rng(5)
    x = rng.standard_normal(16).astype(np.float32)
    y = rng.standard_normal(16).astype(np.float32)
    table = rng.standard_normal((6, 4)).astype(np.float32)
    return [
        OpCall(backend, "Add", {"self": x, "other": y, "alpha": 1.0}),
        OpCall(backend, "Mul", {"self": x, "other": y}),
        OpCall(backend, "IndexSelect", {"self": table, "dim": 0, "index": np.array([4, 0, 5], dtype=np.int64)}),
    ]


# ----------------------------------------------------------------------------- emulated: kernels run
def test_capture_runs_nothing_and_each_replay_equals_eager_bit_for_bit(emulated: RocmBackend) -> None:
    provider = emulated.provider
    assert isinstance(provider, FakeProvider)
    calls = _chain(emulated)
    stream = emulated.runtime.create_stream()
    try:
        eager0 = run_eager(calls, stream, 0)
        eager1 = run_eager(calls, stream, 1)
        assert eager0[0]["out[0]"].tobytes() != eager1[0]["out[0]"].tobytes(), "the second input set must differ"
        before = len(provider.launches)
        for c in calls:
            write(c.conv.arrays["out"], np.zeros(c.conv.arrays["out"].nbytes, np.uint8))  # type: ignore[arg-type]
        graph = capture(calls, stream)
        assert len(provider.launches) == before, "a capture must record, not run"
        assert all(not c.outputs()["out[0]"].any() for c in calls), "outputs unchanged by the capture"
        replays = provider.graph_launches

        assert_bitwise(replay(calls, graph, stream, 0), eager0, "replay 1")
        assert_bitwise(replay(calls, graph, stream, 1), eager1, "replay 2")
        assert provider.graph_launches == replays + 2
        assert len(provider.launches) > before
        emulated.driver.graph_destroy(graph)
    finally:
        for c in calls:
            c.free()
        emulated.runtime.destroy_stream(stream)


def test_deferred_index_checks_are_armed_again_by_every_replay(emulated: RocmBackend) -> None:
    table = np.arange(24, dtype=np.float32).reshape(6, 4)
    call = OpCall(emulated, "IndexSelect", {"self": table, "dim": 0, "index": np.array([1, 2], dtype=np.int64)})
    index = call.conv.arrays["index"]
    good, bad = np.array([1, 2], np.int64).view(np.uint8), np.array([1, 9], np.int64).view(np.uint8)
    stream = emulated.runtime.create_stream()
    try:
        call.fill(0)
        graph = capture([call], stream)
        assert isinstance(graph, RocmGraph) and len(graph.checks) == 1, "the check belongs to the graph"
        driver_stream = emulated.runtime.stream(stream)
        for raw, fails in ((good, False), (bad, True), (good, False), (bad, True)):
            write(index, raw)  # type: ignore[arg-type]
            emulated.driver.graph_launch(graph, driver_stream)
            if fails:
                with pytest.raises(AclnnError) as info:
                    emulated.runtime.synchronize_stream(stream)
                assert int(info.value.code) == 161002 and "IndexSelect" in str(info.value)
            else:
                emulated.runtime.synchronize_stream(stream)
        # a bad replay followed by good ones before any synchronisation: replays never wait for each
        # other, and the bad one is still reported at the synchronisation (its slot stays set until read)
        write(index, bad)  # type: ignore[arg-type]
        emulated.driver.graph_launch(graph, driver_stream)
        emulated.provider.stream_synchronize(driver_stream)  # the bad replay has run (the runtime has not looked)
        write(index, good)  # type: ignore[arg-type]
        emulated.driver.graph_launch(graph, driver_stream)
        emulated.driver.graph_launch(graph, driver_stream)
        with pytest.raises(AclnnError):
            emulated.runtime.synchronize_stream(stream)
        emulated.driver.graph_launch(graph, driver_stream)
        emulated.runtime.synchronize_stream(stream)  # read and zeroed: the good replay reports nothing
        emulated.driver.graph_destroy(graph)
    finally:
        call.free()
        emulated.runtime.destroy_stream(stream)


def test_captured_checks_cost_a_replay_nothing_but_their_kernels(
    emulated: RocmBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checks in a graph take slots of one slab: no flag allocation, zeroing or copy is recorded, replays never
    wait for each other, and a synchronisation reads the slab with one device-to-host copy."""
    provider = emulated.provider
    assert isinstance(provider, FakeProvider)
    table = np.arange(24, dtype=np.float32).reshape(6, 4)
    calls = [
        OpCall(emulated, "IndexSelect", {"self": table, "dim": 0, "index": np.array([k, 5 - k], dtype=np.int64)})
        for k in range(3)
    ]
    stream = emulated.runtime.create_stream()
    try:
        launches = len(provider.launches)
        for c in calls:
            c.enqueue(c.prepare(), stream)
        emulated.runtime.synchronize_stream(stream)
        kernels_per_call = (len(provider.launches) - launches) // len(calls)
        graph = capture(calls, stream)
        assert isinstance(graph, RocmGraph) and len(graph.slabs) == 1 and len(graph.checks) == 3
        recorded = provider.graphs[graph.vendor].work  # type: ignore[index]
        assert len(recorded) == kernels_per_call * len(calls), "only the kernels are recorded"
        reads: list[int] = []
        copy, wait = provider.memcpy, provider.stream_synchronize
        waits: list[int] = []

        def counting_copy(dst: int, src: int, nbytes: int, direction: CopyDirection, s: int | None) -> None:
            if direction == CopyDirection.DEVICE_TO_HOST:
                reads.append(nbytes)
            copy(dst, src, nbytes, direction, s)

        monkeypatch.setattr(provider, "memcpy", counting_copy)
        monkeypatch.setattr(provider, "stream_synchronize", lambda s: (waits.append(s), wait(s)))
        driver_stream = emulated.runtime.stream(stream)
        for _ in range(4):
            emulated.driver.graph_launch(graph, driver_stream)
        assert waits == [], "a replay does not wait for the one before it"
        emulated.runtime.synchronize_stream(stream)
        assert reads == [12], "one read of the slab's three slots, whatever the number of replays"
        emulated.driver.graph_destroy(graph)
    finally:
        for c in calls:
            c.free()
        emulated.runtime.destroy_stream(stream)


def test_a_graph_destroyed_before_its_replay_is_synchronised_still_reports_its_check(emulated: RocmBackend) -> None:
    """The runtime destroys swapped task-group graphs without waiting; the replay's check must survive."""
    table = np.arange(24, dtype=np.float32).reshape(6, 4)
    call = OpCall(emulated, "IndexSelect", {"self": table, "dim": 0, "index": np.array([1, 2], dtype=np.int64)})
    provider = emulated.provider
    assert isinstance(provider, FakeProvider)
    stream = emulated.runtime.create_stream()
    try:
        call.fill(0)
        graph = capture([call], stream)
        write(call.conv.arrays["index"], np.array([1, 9], np.int64).view(np.uint8))  # type: ignore[arg-type]
        emulated.driver.graph_launch(graph, emulated.runtime.stream(stream))
        emulated.driver.graph_destroy(graph)
        ((slot, _message),) = graph.checks
        assert slot in provider._buffers, "the slot outlives the graph until the replay's check is read"
        with pytest.raises(AclnnError) as info:
            emulated.runtime.synchronize_stream(stream)
        assert int(info.value.code) == 161002
        assert slot not in provider._buffers, "the handed-over slot is freed once read"
    finally:
        call.free()
        emulated.runtime.destroy_stream(stream)


def test_a_replaced_task_group_segment_runs_instead_of_the_old_one(emulated: RocmBackend) -> None:
    """The runtime's task groups are driver graphs in sequence; an update captures a replacement segment."""
    x = np.arange(8, dtype=np.float32)
    head = OpCall(emulated, "Add", {"self": x, "other": x, "alpha": 1.0})
    group = OpCall(emulated, "Muls", {"self": x, "other": 2.0})
    update = OpCall(emulated, "Muls", {"self": x, "other": 3.0})
    stream = emulated.runtime.create_stream()
    try:
        segments = [capture([head], stream), capture([group], stream)]
        replaced = capture([update], stream)  # TaskUpdateBegin/End on a stream that is not capturing
        emulated.driver.graph_destroy(segments[1])
        segments[1] = replaced
        for c in (head, group, update):
            c.fill(0)
            write(c.conv.arrays["out"], np.zeros(32, np.uint8))  # type: ignore[arg-type]
        for g in segments:
            emulated.driver.graph_launch(g, emulated.runtime.stream(stream))
        emulated.runtime.synchronize_stream(stream)
        assert np.array_equal(head.outputs()["out[0]"], 2 * x)
        assert np.array_equal(update.outputs()["out[0]"], 3 * x)
        assert not group.outputs()["out[0]"].any(), "the replaced segment must not run"
        for g in segments:
            emulated.driver.graph_destroy(g)
    finally:
        for c in (head, group, update):
            c.free()
        emulated.runtime.destroy_stream(stream)


def test_a_stream_that_joins_through_an_event_is_captured_with_the_origin(emulated: RocmBackend) -> None:
    x = np.arange(8, dtype=np.float32)
    first = OpCall(emulated, "Add", {"self": x, "other": x, "alpha": 1.0})
    side_call = OpCall(emulated, "Muls", {"self": x, "other": 4.0})
    rt, driver = emulated.runtime, emulated.driver
    origin, side = rt.create_stream(), rt.create_stream()
    fork, join = rt.create_event(), rt.create_event()
    try:
        p1, p2 = first.prepare(), side_call.prepare()
        s_origin, s_side = rt.stream(origin), rt.stream(side)
        driver.capture_begin(s_origin, RELAXED)
        first.enqueue(p1, origin)
        rt.record_event(fork, origin)
        rt.stream_wait_event(side, fork)
        assert driver.capturing(int(s_side)), "waiting on a capture's event joins the capture"  # type: ignore[call-overload]
        side_call.enqueue(p2, side)
        rt.record_event(join, side)
        rt.stream_wait_event(origin, join)
        graph = driver.capture_end(s_origin)
        assert not driver.capturing(int(s_side))  # type: ignore[call-overload]
        for c in (first, side_call):
            c.fill(0)
            write(c.conv.arrays["out"], np.zeros(32, np.uint8))  # type: ignore[arg-type]
        driver.graph_launch(graph, s_origin)
        rt.synchronize_stream(origin)
        assert np.array_equal(first.outputs()["out[0]"], 2 * x)
        assert np.array_equal(side_call.outputs()["out[0]"], 4 * x), "the joined stream's work is in the graph"
        driver.graph_destroy(graph)
    finally:
        for c in (first, side_call):
            c.free()
        rt.destroy_event(fork)
        rt.destroy_event(join)
        rt.destroy_stream(origin)
        rt.destroy_stream(side)


# ----------------------------------------------------------------------------- fake provider: structure
def test_kernel_arguments_are_copied_at_capture(fake: tuple[RocmBackend, FakeProvider]) -> None:
    backend, provider = fake
    x = np.arange(8, dtype=np.float32)
    call = OpCall(backend, "Add", {"self": x, "other": x, "alpha": 1.0})
    stream = backend.runtime.create_stream()
    try:
        graph = capture([call], stream)
        backend.driver.graph_launch(graph, backend.runtime.stream(stream))
        backend.driver.graph_launch(graph, backend.runtime.stream(stream))
        backend.runtime.synchronize_stream(stream)
        replayed = provider.launches[-2:]
        assert replayed[0].args == replayed[1].args and replayed[0].name == replayed[1].name
        out_address = call.conv.arrays["out"].address  # type: ignore[union-attr]
        assert any(int.from_bytes(a, "little") == out_address for a in replayed[0].args if len(a) == 8)
        backend.driver.graph_destroy(graph)
    finally:
        call.free()
        backend.runtime.destroy_stream(stream)


def _writeback_ops() -> set[str]:
    """The ops that write back a view shape (they refuse capture on every backend)."""
    from acl_core.spec.ops import all_specs

    return {name for name, spec in all_specs().items() if spec.writeback}


def test_capabilities_say_the_driver_captures_and_only_write_back_ops_refuse(
    fake: tuple[RocmBackend, FakeProvider],
) -> None:
    backend, _ = fake
    caps = backend.capabilities()
    assert caps.stream_capture and set(caps.capture_refused_ops) == _writeback_ops()
    assert "relaxed" in caps.notes["stream_capture"]


def test_a_provider_without_capture_says_so_and_refuses_with_207000(tmp_path: Path) -> None:
    backend = RocmBackend(FakeProvider(capture=False), {"ACL_KERNEL_CACHE": str(tmp_path)})
    backend.runtime.ensure_device(0)
    assert not backend.capabilities().stream_capture
    stream = backend.runtime.create_stream()
    with pytest.raises(AclError) as info:
        backend.driver.capture_begin(backend.runtime.stream(stream), RELAXED)
    assert info.value.code == RtErrorCode.ACL_ERROR_RT_FEATURE_NOT_SUPPORT
    backend.runtime.destroy_stream(stream)


def test_an_op_marked_as_needing_the_host_refuses_a_capturing_stream_with_107041(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        ElementwiseRunner, "capture_refused", {"Abs": "reads a device value on the host"}, raising=False
    )
    provider = FakeProvider()
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp_path)})
    backend.runtime.ensure_device(0)
    assert set(backend.capabilities().capture_refused_ops) == {"Abs", *_writeback_ops()}
    x = np.arange(8, dtype=np.float32)
    call = OpCall(backend, "Abs", {"self": x})
    stream = backend.runtime.create_stream()
    try:
        run_eager([call], stream, 0)  # eager runs
        with pytest.raises(AclError) as info:
            capture([call], stream)
        assert info.value.code == RtErrorCode.ACL_ERROR_RT_CAPTURE_MODE_BLOCK_ASYNC and "Abs" in info.value.message
        assert not backend.driver.capturing(int(backend.runtime.stream(stream)))  # type: ignore[call-overload]
    finally:
        call.free()
        backend.runtime.destroy_stream(stream)


def test_the_drivers_synchronous_copies_stay_legal_during_a_capture(fake: tuple[RocmBackend, FakeProvider]) -> None:
    """aclrtMemcpy in relaxed mode: through the side stream, never the legacy stream (which breaks a capture)."""
    backend, provider = fake
    rt, driver = backend.runtime, backend.driver
    stream = rt.create_stream()
    src = np.arange(4, dtype=np.int32)
    dst = rt.malloc(16)
    driver.capture_begin(rt.stream(stream), RELAXED)
    try:
        with pytest.raises(AclError) as info:  # the fake breaks as CUDA would on a legacy-stream copy
            provider.memcpy(dst, src.ctypes.data, 16, CopyDirection.HOST_TO_DEVICE, None)
        assert info.value.code == RtErrorCode.ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT
        rt.register_host(src.ctypes.data, 16, src)
        rt.memcpy(dst, 16, src.ctypes.data, 16, MemcpyKind.ACL_MEMCPY_HOST_TO_DEVICE)
        rt.unregister(src.ctypes.data)
        driver.memset(dst + 12, 0, 4, None)
        back = (ctypes.c_int32 * 4).from_address(dst)
        assert list(back) == [0, 1, 2, 0]
        with pytest.raises(AclError) as info:
            provider.stream_synchronize(int(rt.stream(stream)))  # type: ignore[call-overload]
        assert info.value.code == RtErrorCode.ACL_ERROR_RT_STREAM_CAPTURED
    finally:
        driver.graph_destroy(driver.capture_end(rt.stream(stream)))
        rt.free(dst)
        rt.destroy_stream(stream)


def test_an_async_memset_of_pinned_host_memory_refuses_a_capture(fake: tuple[RocmBackend, FakeProvider]) -> None:
    backend, _ = fake
    driver = backend.driver
    stream = backend.runtime.create_stream()
    s = backend.runtime.stream(stream)
    host = driver.alloc_host(64)
    driver.capture_begin(s, RELAXED)
    try:
        with pytest.raises(AclError) as info:
            driver.memset(host, 1, 64, s)
        assert info.value.code == RtErrorCode.ACL_ERROR_RT_FEATURE_NOT_SUPPORT and "captured" in info.value.message
    finally:
        driver.graph_destroy(driver.capture_end(s))
        driver.free_host(host)
        backend.runtime.destroy_stream(stream)


def test_capture_begin_runs_the_set_up_hooks_first(fake: tuple[RocmBackend, FakeProvider]) -> None:
    """QuantMatmul's decode tables are a synchronous host upload: made before the capture, not in it."""
    backend, _ = fake
    quant = backend.runners["quant_matmul"]
    assert not quant._tables
    stream = backend.runtime.create_stream()
    s = backend.runtime.stream(stream)
    backend.driver.capture_begin(s, RELAXED)
    backend.driver.graph_destroy(backend.driver.capture_end(s))
    assert len(quant._tables) >= 7, "every decode table is on the device before the capture"
    backend.runtime.destroy_stream(stream)


def test_a_destroyed_or_foreign_graph_is_refused_with_107000_not_a_crash(
    fake: tuple[RocmBackend, FakeProvider],
) -> None:
    backend, _ = fake
    driver, rt = backend.driver, backend.runtime
    stream = rt.create_stream()
    s = rt.stream(stream)
    driver.capture_begin(s, RELAXED)
    graph = driver.capture_end(s)
    driver.graph_destroy(graph)
    for bad in (graph, object()):
        for call in (lambda g: driver.graph_launch(g, s), driver.graph_destroy):
            with pytest.raises(AclError) as info:
                call(bad)
            assert info.value.code == RtErrorCode.ACL_ERROR_RT_PARAM_INVALID
    rt.destroy_stream(stream)


def test_capture_end_on_a_stream_that_began_none_is_107029(fake: tuple[RocmBackend, FakeProvider]) -> None:
    backend, _ = fake
    stream = backend.runtime.create_stream()
    with pytest.raises(AclError) as info:
        backend.driver.capture_end(backend.runtime.stream(stream))
    assert info.value.code == RtErrorCode.ACL_ERROR_RT_STREAM_NOT_CAPTURED
    backend.runtime.destroy_stream(stream)


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("cudaErrorStreamCaptureInvalidated", 507903),
        ("hipErrorStreamCaptureInvalidated", 507903),
        ("cudaErrorStreamCaptureUnjoined", 107025),
        ("cudaErrorStreamCaptureUnmatched", 107036),
        ("cudaErrorStreamCaptureIsolation", 107024),
        ("cudaErrorStreamCaptureUnsupported", 107027),
    ],
)
def test_vendor_capture_errors_carry_the_cann_codes(name: str, code: int) -> None:
    assert int(cann_code(name)) == code


def test_compare_replay_helper_on_the_fake(fake: tuple[RocmBackend, FakeProvider]) -> None:
    """The harness the GPU tier uses runs end to end here (the fake computes nothing, so both sides match)."""
    backend, _ = fake
    calls = [OpCall(backend, "Add", {"self": np.ones(4, np.float32), "other": np.ones(4, np.float32), "alpha": 1.0})]
    stream = backend.runtime.create_stream()
    graph = compare_replay(calls, stream)
    backend.driver.graph_destroy(graph)
    calls[0].free()
    backend.runtime.destroy_stream(stream)


# ----------------------------------------------------------------------------- vendor providers, bindings stubbed
def _stub_runtime(prefix: str, calls: list[tuple[str, tuple[object, ...]]]) -> object:
    """A binding module whose every function records its call and succeeds (returning a handle)."""
    import enum
    import types

    ok = enum.IntEnum(f"{prefix}Error_t", {f"{prefix}Success": 0})(0)
    mode = enum.IntEnum(f"{prefix}StreamCaptureMode", {f"{prefix}StreamCaptureModeRelaxed": 2})
    flags = enum.IntEnum(f"{prefix}GraphInstantiateFlags", {f"{prefix}GraphInstantiateFlagAutoFreeOnLaunch": 1})

    def fn(name: str) -> object:
        def call(*args: object) -> tuple[object, ...]:
            calls.append((name, args))
            if "Create" in name:
                return (ok, 77)
            return (ok, f"{name}-handle") if "End" in name or "Instantiate" in name else (ok,)

        return call

    module = types.SimpleNamespace(
        **{f"{prefix}StreamCaptureMode": mode, f"{prefix}GraphInstantiateFlags": flags, f"{prefix}StreamNonBlocking": 1}
    )
    names = ("StreamBeginCapture", "StreamEndCapture", "GraphInstantiateWithFlags", "GraphLaunch")
    for name in (*names, "GraphExecDestroy", "GraphDestroy", "StreamCreateWithFlags"):
        setattr(module, prefix + name, fn(prefix + name))
    setattr(module, f"{prefix}GetErrorString", lambda e: (ok, b""))
    return module


@pytest.mark.parametrize("platform", ["nvidia", "amd"])
def test_vendor_providers_capture_relaxed_and_instantiate_auto_free(platform: str) -> None:
    from acl_rocm.providers.amd import AmdProvider
    from acl_rocm.providers.nvidia import NvidiaProvider

    calls: list[tuple[str, tuple[object, ...]]] = []
    prefix = "cuda" if platform == "nvidia" else "hip"
    provider: NvidiaProvider | AmdProvider
    if platform == "nvidia":
        provider = NvidiaProvider.__new__(NvidiaProvider)
        provider.rt = _stub_runtime(prefix, calls)
    else:
        provider = AmdProvider.__new__(AmdProvider)
        provider.hip = _stub_runtime(prefix, calls)
    assert provider.capture_unavailable() is None
    provider.capture_begin(7)
    graph = provider.capture_end(7)
    provider.graph_launch(graph, 9)
    provider.graph_destroy(graph)
    assert provider.stream_create_nonblocking() == 77
    names = [n.removeprefix(prefix) for n, _ in calls]
    assert names[:6] == [
        "StreamBeginCapture",
        "StreamEndCapture",
        "GraphInstantiateWithFlags",
        "GraphLaunch",
        "GraphExecDestroy",
        "GraphDestroy",
    ]
    assert calls[0][1] == (7, 2), "begin on the stream in relaxed mode (2)"
    assert calls[2][1] == (f"{prefix}StreamEndCapture-handle", 1), "instantiated with AutoFreeOnLaunch"
    assert calls[3][1] == (f"{prefix}GraphInstantiateWithFlags-handle", 9)
    assert calls[6] == (f"{prefix}StreamCreateWithFlags", (1,)), "the side stream is non-blocking"

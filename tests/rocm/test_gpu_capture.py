"""Stream capture on the GPU: every family, cuBLASLt, cuDNN, NCCL and async copies, replayed bit for bit.

Each test runs its work eagerly twice (the sample's inputs, then its float inputs rotated in place),
captures the same work once through the rocm driver (``capture_begin`` / ``capture_end``, a CUDA or
HIP graph), and replays the graph twice with the same two input sets: each replay must equal its
eager run byte for byte, since a replay launches the same kernels with the same arguments.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import acl_core
from acl_core import hccl
from acl_core.backend import Backend
from acl_core.errors import AclnnError
from acl_core.spec.collective import HcclDataType, HcclReduceOp
from acl_core.spec.ops import all_specs
from acl_core.spec.runtime import CaptureMode, MemcpyKind
from tests.rocm.capture_harness import (
    OpCall,
    capture,
    compare_replay,
    front_end_replays,
    write,
)

pytestmark = pytest.mark.gpu

FAMILIES = sorted({s.family for s in all_specs().values()})
TRIES = 8
"""Ops of a family tried in order until one runs eagerly with its first sample (the others name why not)."""


@pytest.fixture(scope="module")
def b(rocm: Backend) -> Backend:
    """The rocm backend, which must capture wherever it runs."""
    if not rocm.capabilities().stream_capture:
        pytest.fail(f"rocm does not capture here: {rocm.capabilities().notes.get('stream_capture')}")
    return rocm


@pytest.fixture(scope="module")
def comm(b: Backend) -> Iterator[Any]:
    """A communicator of one rank, with rocm as the process default (the hccl front end uses it)."""
    if b.collectives is None:
        pytest.skip(f"no collective engine: {b.capabilities().notes.get('collectives')}")
    acl_core.use_backend("rocm")
    info, ret = hccl.HcclGetRootInfo()
    assert ret == 0, hccl.last_error_message()
    handle, ret = hccl.HcclCommInitRootInfo(1, info, 0)
    assert ret == 0, hccl.last_error_message()
    yield handle
    assert hccl.HcclCommDestroy(handle) == 0, hccl.last_error_message()
    acl_core.use_backend(None)


def _replay_ok(b: Backend, calls: list[OpCall]) -> None:
    stream = b.runtime.create_stream()
    try:
        graph = compare_replay(calls, stream)
        b.driver.graph_destroy(graph)
    finally:
        for c in calls:
            c.free()
        b.runtime.destroy_stream(stream)


@pytest.mark.parametrize("family", FAMILIES)
def test_one_op_of_every_family_replays_bit_for_bit(b: Backend, request: pytest.FixtureRequest, family: str) -> None:
    if family == "mc2":
        request.getfixturevalue("comm")
    caps = b.capabilities()
    claimed = set(caps.ops) - set(caps.capture_refused_ops)  # those refuse capture by design (107041)
    ops = sorted(n for n, s in all_specs().items() if s.family == family and n in claimed and s.samples)
    if not ops:
        pytest.skip(f"rocm claims no capturable {family} op with samples")
    why: list[str] = []
    for op in ops[:TRIES]:
        call = _first_placeable(b, op, why)
        if call is None:
            continue
        stream = b.runtime.create_stream()
        try:
            graph = compare_replay([call], stream)
            b.driver.graph_destroy(graph)
            print(f"\n{family}: {op} replayed bit for bit")
            return
        finally:
            call.free()
            b.runtime.destroy_stream(stream)
    pytest.fail(f"no {family} op could be placed: {why}")


def _first_placeable(b: Backend, op: str, why: list[str]) -> OpCall | None:
    """The first sample of ``op`` this harness can place whose outputs all have elements (else None, why noted)."""
    spec = all_specs()[op]
    assert spec.samples is not None
    for sample in spec.samples(np.random.default_rng(7)):
        try:
            call = OpCall(b, op, dict(sample.args))
        except Exception as exc:  # a sample this harness cannot place
            why.append(f"{op}: {type(exc).__name__}: {exc}")
            return None
        outs = [call.conv.arrays[p.name] for p in spec.outputs if p.name in call.conv.arrays]
        members = [m for o in outs for m in (o if isinstance(o, list) else [o])]
        if members and all(math.prod(m.shape) > 0 for m in members):
            return call
        call.free()  # an empty case replays nothing: it would prove nothing
    why.append(f"{op}: every sample has an empty output")
    return None


def test_a_chain_of_small_ops_replays_bit_for_bit(b: Backend) -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 64)).astype(np.float16)
    y = rng.standard_normal((4, 64)).astype(np.float16)
    calls = [
        OpCall(b, "Add", {"self": x, "other": y, "alpha": 1.0}),
        OpCall(b, "Mul", {"self": x, "other": y}),
        OpCall(b, "Softmax", {"self": x, "dim": -1}),
        OpCall(b, "ArgMax", {"self": x, "dim": -1, "keepdim": False}),
        OpCall(b, "IndexSelect", {"self": x, "dim": 0, "index": np.array([3, 1], np.int64)}),
    ]
    _replay_ok(b, calls)


def test_a_cublaslt_gemm_with_its_workspace_replays_bit_for_bit(b: Backend) -> None:
    if b.matmul.unavailable():
        pytest.skip(b.matmul.unavailable())
    rng = np.random.default_rng(4)
    a = rng.standard_normal((8, 256)).astype(np.float16)
    w = rng.standard_normal((256, 512)).astype(np.float16)
    calls = [
        OpCall(b, "Mm", {"self": a, "mat2": w, "cubeMathType": 0}),
        OpCall(b, "Matmul", {"self": a.astype(np.float32), "mat2": w.astype(np.float32), "cubeMathType": 1}),
    ]
    _replay_ok(b, calls)


def test_cudnn_attention_replays_bit_for_bit(b: Backend) -> None:
    runner = b.attention
    if runner.cudnn.refusal() is not None:
        pytest.skip(runner.cudnn.refusal())
    rng = np.random.default_rng(5)
    q = rng.uniform(-1, 1, (1, 4, 128, 64)).astype(np.float16)
    kv = rng.uniform(-1, 1, (1, 2, 256, 64)).astype(np.float16)
    args = {
        "query": q,
        "key": kv,
        "value": kv.copy(),
        "scaleValue": 0.125,
        "keepProb": 1.0,
        "preTokens": 2147483647,
        "nextTokens": 2147483647,
        "headNum": 4,
        "inputLayout": "BNSD",
        "innerPrecise": 0,
        "sparseMode": 0,
    }
    runner.path_override = "cudnn"
    try:
        _replay_ok(b, [OpCall(b, "FlashAttentionScore", args)])
        assert runner.last_path == "cudnn"
    finally:
        runner.path_override = None


def test_an_nccl_barrier_and_all_reduce_on_one_rank_replay_bit_for_bit(b: Backend, comm: Any) -> None:
    n = 1000
    rt = b.runtime
    values = [np.arange(n, dtype=np.float32), np.arange(n, dtype=np.float32)[::-1].copy()]
    send, recv = rt.malloc(4 * n), rt.malloc(4 * n)
    stream = rt.create_stream()
    fp32, total = int(HcclDataType.HCCL_DATA_TYPE_FP32), int(HcclReduceOp.HCCL_REDUCE_SUM)

    def put(address: int, a: np.ndarray) -> None:
        rt.register_host(a.ctypes.data, a.nbytes, a)
        rt.memcpy(address, a.nbytes, a.ctypes.data, a.nbytes, MemcpyKind.ACL_MEMCPY_HOST_TO_DEVICE)
        rt.unregister(a.ctypes.data)

    def get() -> bytes:
        rt.synchronize_stream(stream)
        out = np.zeros(n, np.float32)
        rt.register_host(out.ctypes.data, out.nbytes, out)
        rt.memcpy(out.ctypes.data, out.nbytes, recv, out.nbytes, MemcpyKind.ACL_MEMCPY_DEVICE_TO_HOST)
        rt.unregister(out.ctypes.data)
        return out.tobytes()

    try:
        eager = []
        for v in values:
            put(send, v)
            assert hccl.HcclAllReduce(send, recv, n, fp32, total, comm, stream) == 0, hccl.last_error_message()
            eager.append(get())
        s = rt.stream(stream)
        b.driver.capture_begin(s, CaptureMode.ACL_MODEL_RI_CAPTURE_MODE_RELAXED)
        barrier = hccl.HcclBarrier(comm, stream)  # stream-ordered: its all-reduce is captured, no host wait
        ret = hccl.HcclAllReduce(send, recv, n, fp32, total, comm, stream)
        graph = b.driver.capture_end(s)
        assert barrier == 0 and ret == 0, hccl.last_error_message()
        for v, want in zip(values, eager):
            put(send, v)
            put(recv, np.zeros(n, np.float32))
            b.driver.graph_launch(graph, s)
            assert get() == want
        b.driver.graph_destroy(graph)
    finally:
        rt.free(send)
        rt.free(recv)
        rt.destroy_stream(stream)


def test_async_copies_and_memsets_replay(b: Backend) -> None:
    """Pinned host → device → device → pinned host, and a memset, captured; each replay reads the host anew."""
    rt = b.runtime
    n = 4096
    host_in, host_out = rt.malloc_host(n), rt.malloc_host(n)
    dev_a, dev_b = rt.malloc(n), rt.malloc(n)
    stream = rt.create_stream()
    h2d, d2d, d2h = (
        MemcpyKind.ACL_MEMCPY_HOST_TO_DEVICE,
        MemcpyKind.ACL_MEMCPY_DEVICE_TO_DEVICE,
        MemcpyKind.ACL_MEMCPY_DEVICE_TO_HOST,
    )
    view_in = np.ctypeslib.as_array((np.ctypeslib.ctypes.c_uint8 * n).from_address(host_in))
    view_out = np.ctypeslib.as_array((np.ctypeslib.ctypes.c_uint8 * n).from_address(host_out))
    try:
        s = rt.stream(stream)
        b.driver.capture_begin(s, CaptureMode.ACL_MODEL_RI_CAPTURE_MODE_RELAXED)
        rt.memcpy_async(dev_a, n, host_in, n, h2d, stream)
        rt.memset_async(dev_b, n, 0x5A, n, stream)
        rt.memcpy_async(dev_b, n // 2, dev_a, n // 2, d2d, stream)
        rt.memcpy_async(host_out, n, dev_b, n, d2h, stream)
        graph = b.driver.capture_end(s)
        assert not view_out.any(), "a capture runs nothing"
        for seed in (1, 2):
            view_in[:] = np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)
            view_out[:] = 0
            b.driver.graph_launch(graph, s)
            rt.synchronize_stream(stream)
            assert np.array_equal(view_out[: n // 2], view_in[: n // 2])
            assert (view_out[n // 2 :] == 0x5A).all()
        b.driver.graph_destroy(graph)
    finally:
        rt.destroy_stream(stream)
        for address in (dev_a, dev_b):
            rt.free(address)
        for address in (host_in, host_out):
            rt.free_host(address)


def test_deferred_index_checks_fire_at_each_replay(b: Backend) -> None:
    table = np.arange(24, dtype=np.float32).reshape(6, 4)
    call = OpCall(b, "IndexSelect", {"self": table, "dim": 0, "index": np.array([1, 2], dtype=np.int64)})
    index = call.conv.arrays["index"]
    stream = b.runtime.create_stream()
    try:
        graph = capture([call], stream)
        s = b.runtime.stream(stream)
        for values, fails in (([1, 2], False), ([1, 9], True), ([0, 5], False)):
            write(index, np.array(values, np.int64).view(np.uint8))  # type: ignore[arg-type]
            b.driver.graph_launch(graph, s)
            if fails:
                with pytest.raises(AclnnError, match="IndexSelect"):
                    b.runtime.synchronize_stream(stream)
            else:
                b.runtime.synchronize_stream(stream)
                assert np.array_equal(call.outputs()["out[0]"], table[values])
        b.driver.graph_destroy(graph)
    finally:
        call.free()
        b.runtime.destroy_stream(stream)


def test_the_aclmdlri_front_end_replays_a_chain_bit_for_bit(b: Backend) -> None:
    """aclmdlRICaptureBegin/End and aclmdlRIExecuteAsync: the shared runtime's rules over the rocm driver."""
    rt = b.runtime
    rng = np.random.default_rng(11)
    x, y = rng.standard_normal((8, 128)).astype(np.float16), rng.standard_normal((8, 128)).astype(np.float16)
    calls = [
        OpCall(b, "Add", {"self": x, "other": y, "alpha": 1.0}),
        OpCall(b, "RmsNorm", {"x": x, "gamma": np.ones(128, np.float16), "epsilon": 1e-6}),
        OpCall(b, "ArgMax", {"self": x, "dim": -1, "keepdim": False}),
    ]
    stream = rt.create_stream()
    try:
        model = front_end_replays(calls, stream, int(CaptureMode.ACL_MODEL_RI_CAPTURE_MODE_GLOBAL))
        rt.ri_destroy(model)
    finally:
        for c in calls:
            c.free()
        rt.destroy_stream(stream)

"""The rocm backend's NCCL engine without a GPU: root info layout, dtype/op/error maps, refusals, timeouts.

A scripted :class:`CollectiveLibrary` stands in for NCCL, so the engine's own logic (non-blocking
polling, abort past the deadline, byte-moving emulation) is exercised on the CPU.
"""

from __future__ import annotations

import ctypes
import struct

import pytest

from acl_core.errors import HcclError, HcclResult
from acl_core.spec.collective import (
    ELEMENT_BYTES,
    HCCL_ROOT_INFO_BYTES,
    ROOT_INFO_HEADER_BYTES,
    HcclDataType,
    HcclReduceOp,
    HcclSendRecvType,
    SendRecvItem,
    Timeouts,
    unpack_root_info,
)
from acl_rocm.collectives import (
    LAUNCHER_SIZE_ENVS,
    NcclEngine,
    NcclType,
    hccl_result,
    nccl_type,
    pack_nccl_root_info,
    unpack_nccl_payload,
    wire_type,
)
from acl_rocm.providers.nccl import NCCL_IN_PROGRESS, CollectiveLibrary, NcclCallError, config_struct

D = HcclDataType
V228, V223 = 22805, 22304


class ScriptedNccl(CollectiveLibrary):
    """Records calls; ``pending`` polls of ncclCommGetAsyncError answer ncclInProgress before ``final``."""

    name = "nccl"
    binding = "scripted"

    def __init__(self, version: int = V228, pending: int = 0, final: int = 0) -> None:
        self.v, self.pending, self.final = version, pending, final
        self.calls: list[tuple[object, ...]] = []

    def version(self) -> int:
        return self.v

    def unique_id(self) -> bytes:
        return bytes(range(128))

    def comm_init(self, nranks: int, uid: bytes, rank: int, *, blocking: bool) -> tuple[int, int]:
        self.calls.append(("init", nranks, uid, rank, blocking))
        return 0x1234, NCCL_IN_PROGRESS

    def async_error(self, comm: int) -> int:
        if self.pending > 0:
            self.pending -= 1
            return NCCL_IN_PROGRESS
        return self.final

    def abort(self, comm: int) -> None:
        self.calls.append(("abort", comm))

    def destroy(self, comm: int) -> None:
        self.calls.append(("destroy", comm))

    def all_reduce(self, send: int, recv: int, count: int, dtype: int, op: int, comm: int, stream: int) -> int:
        self.calls.append(("all_reduce", send, recv, count, dtype, op, stream))
        return NCCL_IN_PROGRESS

    def all_gather(self, send: int, recv: int, count: int, dtype: int, comm: int, stream: int) -> int:
        self.calls.append(("all_gather", send, recv, count, dtype, stream))
        return 0

    def broadcast(self, send: int, recv: int, count: int, dtype: int, root: int, comm: int, stream: int) -> int:
        self.calls.append(("broadcast", send, recv, count, dtype, root, stream))
        return 0

    def reduce_scatter(self, send: int, recv: int, count: int, dtype: int, op: int, comm: int, stream: int) -> int:
        self.calls.append(("reduce_scatter", send, recv, count, dtype, op, stream))
        return 0

    def send(self, buf: int, count: int, dtype: int, peer: int, comm: int, stream: int) -> int:
        self.calls.append(("send", buf, count, dtype, peer, stream))
        return 0

    def recv(self, buf: int, count: int, dtype: int, peer: int, comm: int, stream: int) -> int:
        self.calls.append(("recv", buf, count, dtype, peer, stream))
        return 0

    def group_start(self) -> int:
        self.calls.append(("group_start",))
        return 0

    def group_end(self) -> int:
        self.calls.append(("group_end",))
        return NCCL_IN_PROGRESS


class StubProvider:
    """The few provider calls the engine makes."""

    def __init__(self, devices: int = 1) -> None:
        self.devices = devices
        self.freed: list[int] = []

    def device_count(self) -> int:
        return self.devices

    def set_device(self, index: int) -> None:
        pass

    def malloc(self, nbytes: int) -> int:
        return 0x9000

    def memset(self, dst: int, value: int, nbytes: int, stream: int | None) -> None:
        pass

    def free(self, address: int) -> None:
        self.freed.append(address)

    def stream_query(self, stream: int) -> bool:
        return True


def _engine(lib: ScriptedNccl, devices: int = 1) -> NcclEngine:
    return NcclEngine(StubProvider(devices), lib)  # type: ignore[arg-type]


def _comm(engine: NcclEngine, exec_s: float = 5.0, connect_s: float = 5.0) -> object:
    info = unpack_root_info(engine.create_root_info())
    return engine.init_root_info(1, info, 0, 0, Timeouts(connect_s, exec_s))


# ----------------------------------------------------------------------------- root info
def test_root_info_carries_the_128_byte_unique_id_after_the_shared_header() -> None:
    uid = bytes(range(128))
    blob = pack_nccl_root_info("nccl", b"U" * 16, uid, V228, 4321)
    assert len(blob) == HCCL_ROOT_INFO_BYTES
    assert ROOT_INFO_HEADER_BYTES == 44
    assert blob[44:172] == uid
    assert struct.unpack_from("<II", blob, 172) == (V228, 4321)
    assert blob[180:] == bytes(HCCL_ROOT_INFO_BYTES - 180)
    info = unpack_root_info(blob)
    assert info.engine == "nccl" and info.uid == b"U" * 16
    assert unpack_nccl_payload(info.payload) == (uid, V228, 4321)
    with pytest.raises(ValueError):
        pack_nccl_root_info("nccl", b"U" * 16, uid[:64], V228, 1)


def test_engine_root_info_is_fresh_and_joins_with_its_unique_id() -> None:
    lib = ScriptedNccl()
    engine = _engine(lib)
    a, b = engine.create_root_info(), engine.create_root_info()
    assert unpack_root_info(a).uid != unpack_root_info(b).uid
    info = unpack_root_info(a)
    comm = engine.init_root_info(1, info, 0, 0, Timeouts(5, 5))
    assert lib.calls[0] == ("init", 1, bytes(range(128)), 0, False)  # always non-blocking
    assert (comm.rank, comm.size, comm.name) == (0, 1, info.comm_name)


def test_root_info_of_another_engine_or_nccl_minor_is_refused() -> None:
    engine = _engine(ScriptedNccl())
    mpi = unpack_root_info(pack_nccl_root_info("mpi", b"u" * 16, bytes(128), V228, 1))
    with pytest.raises(HcclError) as err:
        engine.init_root_info(1, mpi, 0, 0, Timeouts(1, 1))
    assert err.value.code == HcclResult.HCCL_E_PARA
    old = unpack_root_info(pack_nccl_root_info("nccl", b"u" * 16, bytes(128), V223, 1))
    with pytest.raises(HcclError) as err:
        engine.init_root_info(1, old, 0, 0, Timeouts(1, 1))
    assert err.value.code == HcclResult.HCCL_E_PARA


# ----------------------------------------------------------------------------- maps
def test_dtype_map_native_types_and_fp8_by_version() -> None:
    assert nccl_type(D.HCCL_DATA_TYPE_FP16, V228) == NcclType.FLOAT16
    assert nccl_type(D.HCCL_DATA_TYPE_BFP16, V228) == NcclType.BFLOAT16
    assert nccl_type(D.HCCL_DATA_TYPE_UINT32, V228) == NcclType.UINT32
    assert nccl_type(D.HCCL_DATA_TYPE_FP8E4M3, V228) == NcclType.FLOAT8E4M3
    assert nccl_type(D.HCCL_DATA_TYPE_FP8E4M3, V223) is None
    for missing in (D.HCCL_DATA_TYPE_INT16, D.HCCL_DATA_TYPE_UINT16, D.HCCL_DATA_TYPE_INT128, D.HCCL_DATA_TYPE_HIF8):
        assert nccl_type(missing, V228) is None
    assert nccl_type(D.HCCL_DATA_TYPE_FP8E8M0, V228) is None


@pytest.mark.parametrize("dtype", list(ELEMENT_BYTES))
def test_every_dtype_moves_and_only_native_ones_reduce(dtype: HcclDataType) -> None:
    engine = _engine(ScriptedNccl())
    assert engine.supports(dtype, reduction=False)
    assert engine.supports(dtype, reduction=True) == (nccl_type(dtype, V228) is not None)
    t, n = wire_type(dtype, 10, V228)
    if nccl_type(dtype, V228) is None:
        assert (t, n) == (NcclType.UINT8, 10 * ELEMENT_BYTES[dtype])
    else:
        assert (t, n) == (nccl_type(dtype, V228), 10)


def test_error_map() -> None:
    assert hccl_result(1) == HcclResult.HCCL_E_RUNTIME
    assert hccl_result(2) == HcclResult.HCCL_E_SYSCALL
    assert hccl_result(3) == HcclResult.HCCL_E_INTERNAL
    assert hccl_result(4) == HcclResult.HCCL_E_PARA
    assert hccl_result(5) == HcclResult.HCCL_E_PARA
    assert hccl_result(6) == HcclResult.HCCL_E_REMOTE
    assert hccl_result(99) == HcclResult.HCCL_E_INTERNAL


def test_config_struct_is_nccl_config_initializer_with_blocking() -> None:
    cfg = config_struct(False)
    assert cfg.size == ctypes.sizeof(cfg) and cfg.magic == 0xCAFEBEEF and cfg.version == 21403
    assert cfg.blocking == 0 and config_struct(True).blocking == 1
    assert cfg.cgaClusterSize == cfg.minCTAs == cfg.maxCTAs == -(2**31)


# ----------------------------------------------------------------------------- the engine over scripted NCCL
def test_reduction_of_a_type_nccl_lacks_is_not_supported() -> None:
    lib = ScriptedNccl()
    engine = _engine(lib)
    comm = _comm(engine)
    for dtype in (D.HCCL_DATA_TYPE_INT16, D.HCCL_DATA_TYPE_HIF8, D.HCCL_DATA_TYPE_INT128):
        with pytest.raises(HcclError) as err:
            engine.all_reduce(comm, 0x100, 0x200, 4, dtype, HcclReduceOp.HCCL_REDUCE_SUM, 7)
        assert err.value.code == HcclResult.HCCL_E_NOT_SUPPORT
        with pytest.raises(HcclError) as err:
            engine.reduce_scatter(comm, 0x100, 0x200, 4, dtype, HcclReduceOp.HCCL_REDUCE_MAX, 7)
        assert err.value.code == HcclResult.HCCL_E_NOT_SUPPORT
    assert not [c for c in lib.calls if c[0] in ("all_reduce", "reduce_scatter")]


def test_movement_of_int16_goes_as_bytes_and_all_to_all_is_grouped() -> None:
    lib = ScriptedNccl()
    engine = _engine(lib)
    comm = _comm(engine)
    engine.all_gather(comm, 0x100, 0x200, 5, D.HCCL_DATA_TYPE_INT16, 7)
    engine.broadcast(comm, 0x100, 3, D.HCCL_DATA_TYPE_INT128, 0, 7)
    engine.all_to_all_v(comm, 0x100, [4], [0], 0x300, [4], [0], D.HCCL_DATA_TYPE_INT16, 7)
    ops = [c for c in lib.calls if c[0] not in ("init",)]
    assert ops == [
        ("all_gather", 0x100, 0x200, 10, NcclType.UINT8, 7),
        ("broadcast", 0x100, 0x100, 48, NcclType.UINT8, 0, 7),
        ("group_start",),
        ("send", 0x100, 8, NcclType.UINT8, 0, 7),
        ("recv", 0x300, 8, NcclType.UINT8, 0, 7),
        ("group_end",),
    ]
    lib.calls.clear()
    engine.batch_send_recv(comm, [SendRecvItem(HcclSendRecvType.HCCL_SEND, 0x40, 2, D.HCCL_DATA_TYPE_FP32, 0)], 3)
    assert lib.calls == [("group_start",), ("send", 0x40, 2, NcclType.FLOAT32, 0, 3), ("group_end",)]


def test_reduce_ops_map_to_nccl_ops() -> None:
    lib = ScriptedNccl()
    engine = _engine(lib)
    comm = _comm(engine)
    for op, want in zip(HcclReduceOp.__members__.values(), (0, 1, 2, 3)):
        if op is HcclReduceOp.HCCL_REDUCE_RESERVED:
            continue
        engine.all_reduce(comm, 0x100, 0x200, 4, D.HCCL_DATA_TYPE_BFP16, op, 9)
        assert lib.calls[-1] == ("all_reduce", 0x100, 0x200, 4, NcclType.BFLOAT16, want, 9)


def test_connect_timeout_aborts_and_returns_timeout() -> None:
    lib = ScriptedNccl(pending=10**9)
    engine = _engine(lib)
    with pytest.raises(HcclError) as err:
        _comm(engine, connect_s=0.05)
    assert err.value.code == HcclResult.HCCL_E_TIMEOUT
    assert ("abort", 0x1234) in lib.calls


def test_exec_timeout_aborts_and_poisons_the_communicator() -> None:
    lib = ScriptedNccl()
    engine = _engine(lib)
    comm = _comm(engine, exec_s=0.05)
    lib.pending = 10**9
    with pytest.raises(HcclError) as err:
        engine.all_reduce(comm, 0x100, 0x200, 4, D.HCCL_DATA_TYPE_FP32, HcclReduceOp.HCCL_REDUCE_SUM, 0)
    assert err.value.code == HcclResult.HCCL_E_TIMEOUT
    assert ("abort", 0x1234) in lib.calls
    lib.pending = 0
    with pytest.raises(HcclError) as err:
        engine.barrier(comm, 0)
    assert err.value.code == HcclResult.HCCL_E_IN_STATUS


def test_a_barrier_on_a_capturing_stream_captures_its_all_reduce_without_a_host_wait() -> None:
    """Captured, the barrier is its one-word all-reduce alone: no stream polling (which would wait out the
    timeout here, the stream never finishing) and no timeout; eagerly the same stream times out."""
    lib = ScriptedNccl()
    engine = _engine(lib)
    comm = _comm(engine, exec_s=0.05)
    engine.capturing = lambda stream: stream == 0x77
    queried: list[int] = []

    def never_done(stream: int) -> bool:  # the stream never finishes: only a host wait would notice
        queried.append(stream)
        return False

    engine.provider.stream_query = never_done  # type: ignore[method-assign]
    before = len(lib.calls)
    engine.barrier(comm, 0x77)
    new = lib.calls[before:]
    assert [c[0] for c in new] == ["all_reduce"] and new[0][-1] == 0x77, new
    assert not queried, "a captured barrier does not wait on the host"
    with pytest.raises(HcclError) as err:  # eagerly the same barrier waits, and times out
        engine.barrier(comm, 0x55)
    assert err.value.code == HcclResult.HCCL_E_TIMEOUT and queried and set(queried) == {0x55}


def test_async_error_maps_to_hccl_code_and_destroy_frees_scratch() -> None:
    lib = ScriptedNccl()
    provider = StubProvider()
    engine = NcclEngine(provider, lib)  # type: ignore[arg-type]
    comm = _comm(engine)
    lib.final = 6  # ncclRemoteError
    with pytest.raises(HcclError) as err:
        engine.all_reduce(comm, 0x100, 0x200, 4, D.HCCL_DATA_TYPE_FP32, HcclReduceOp.HCCL_REDUCE_SUM, 0)
    assert err.value.code == HcclResult.HCCL_E_REMOTE
    engine.destroy(comm)
    assert ("abort", 0x1234) in lib.calls and provider.freed == [0x9000]


@pytest.fixture
def no_launcher(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for variable in LAUNCHER_SIZE_ENVS:
        monkeypatch.delenv(variable, raising=False)
    return monkeypatch


def test_max_ranks_is_the_visible_device_count(no_launcher: pytest.MonkeyPatch) -> None:
    assert _engine(ScriptedNccl(), devices=4).max_ranks() == 4


@pytest.mark.parametrize("variable", LAUNCHER_SIZE_ENVS)
def test_max_ranks_is_the_launchers_world_when_it_spans_more_than_the_visible_devices(
    no_launcher: pytest.MonkeyPatch, variable: str
) -> None:
    no_launcher.setenv(variable, "16")
    assert _engine(ScriptedNccl(), devices=8).max_ranks() == 16
    no_launcher.setenv(variable, "2")
    assert _engine(ScriptedNccl(), devices=8).max_ranks() == 8


class DeviceLog(StubProvider):
    """Records which device each engine call made current."""

    def __init__(self, devices: int) -> None:
        super().__init__(devices)
        self.current: list[int] = []

    def set_device(self, index: int) -> None:
        self.current.append(index)


def test_n_ranks_on_n_devices_join_one_unique_id_each_on_its_own_device() -> None:
    """Two processes (two engines), rank r on device r: one ncclUniqueId, nRanks 2, rank r, device r current."""
    maker = NcclEngine(DeviceLog(2), ScriptedNccl())  # type: ignore[arg-type]
    info = unpack_root_info(maker.create_root_info())
    comms = []
    for rank in (0, 1):
        provider, lib = DeviceLog(2), ScriptedNccl()
        engine = NcclEngine(provider, lib)  # type: ignore[arg-type]
        comm = engine.init_root_info(2, info, rank, rank, Timeouts(5.0, 5.0))
        assert (comm.rank, comm.size, comm.device, comm.name) == (rank, 2, rank, info.comm_name)
        assert lib.calls[0] == ("init", 2, bytes(range(128)), rank, False)
        assert provider.current == [rank]
        engine.all_reduce(comm, 0x100, 0x200, 4, D.HCCL_DATA_TYPE_FP32, HcclReduceOp.HCCL_REDUCE_SUM, 0)
        assert provider.current == [rank, rank]  # every call runs on the communicator's device
        comms.append(comm.name)
    assert comms[0] == comms[1]


def test_all_to_all_v_on_two_ranks_sends_and_receives_each_peers_block() -> None:
    lib = ScriptedNccl()
    engine = NcclEngine(DeviceLog(2), lib)  # type: ignore[arg-type]
    comm = engine.init_root_info(2, unpack_root_info(engine.create_root_info()), 1, 1, Timeouts(5.0, 5.0))
    lib.calls.clear()
    engine.all_to_all_v(comm, 0x1000, [3, 2], [0, 4], 0x2000, [1, 2], [0, 2], D.HCCL_DATA_TYPE_FP32, 7)
    f32 = NcclType.FLOAT32
    assert lib.calls == [
        ("group_start",),
        ("send", 0x1000, 3, f32, 0, 7),
        ("recv", 0x2000, 1, f32, 0, 7),
        ("send", 0x1000 + 16, 2, f32, 1, 7),
        ("recv", 0x2000 + 8, 2, f32, 1, 7),
        ("group_end",),
    ]


def test_call_error_names_the_result() -> None:
    assert "ncclInvalidUsage" in str(NcclCallError("ncclSend", 5))

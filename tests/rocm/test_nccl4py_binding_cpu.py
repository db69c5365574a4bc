"""The nccl4py binding without a GPU: a stand-in for ``nccl.bindings.nccl`` with nccl4py 0.6.0's calling rules.

nccl4py 0.6.0 (read from its wheel): ``comm_init_rank_scalable`` returns a ``Comm`` wrapper
(``int(comm)`` is the address); every function taking a communicator refuses anything but a
``Comm`` (a TypeError "Cannot convert int to nccl.bindings.nccl.Comm"); ``check_status`` lets
ncclSuccess and ncclInProgress through and raises ``NCCLError(status)`` otherwise; calls return
None except ``comm_get_async_error`` (an int). The stand-in enforces exactly these rules.
"""

from __future__ import annotations

from typing import Any

import pytest

from acl_core.errors import HcclError, HcclResult
from acl_core.spec.collective import (
    HcclDataType,
    HcclReduceOp,
    HcclSendRecvType,
    SendRecvItem,
    Timeouts,
    unpack_root_info,
)
from acl_rocm.collectives import NcclEngine
from acl_rocm.providers.nccl import NCCL_IN_PROGRESS, NCCL_SUCCESS, Nccl4pyLibrary, NcclCallError
from tests.rocm.test_collectives_cpu import StubProvider


class NCCLError(Exception):
    """nccl4py's exception: the ncclResult_t in ``status``."""

    def __init__(self, status: int) -> None:
        super().__init__(f"NCCL error {status}")
        self.status = status


class Comm:
    """nccl4py's communicator wrapper."""

    def __init__(self, handle: int = 0) -> None:
        self.handle = handle

    def __int__(self) -> int:
        return self.handle


class Config:
    """ncclConfig_t with NCCL_CONFIG_INITIALIZER's defaults."""

    def __init__(self) -> None:
        self.blocking = 1
        self.ptr = 0xC0F1


class FakeNccl4py:
    """The module surface the binding uses, with 0.6.0's type checks and status rules."""

    Comm = Comm
    Config = Config

    def __init__(self, connect_polls: int = 2, enqueue_polls: int = 1, fail_with: int = 0) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.connect_polls = connect_polls
        self.enqueue_polls = enqueue_polls
        self.fail_with = fail_with
        self.pending = 0
        self.next_handle = 0x7000

    @staticmethod
    def _comm(comm: object) -> Comm:
        if not isinstance(comm, Comm):
            raise TypeError(f"Cannot convert {type(comm).__name__} to nccl.bindings.nccl.Comm")
        return comm

    def _check(self, status: int) -> None:
        if status not in (NCCL_SUCCESS, NCCL_IN_PROGRESS):
            raise NCCLError(status)

    def get_version(self) -> int:
        return 22809

    def get_unique_id(self) -> bytes:
        return bytes(range(128))

    def comm_init_rank_scalable(self, nranks: int, rank: int, n_id: int, ids: bytearray, config: int) -> Comm:
        assert isinstance(ids, bytearray) and len(ids) == 128 * n_id and config == 0xC0F1
        self.next_handle += 0x100
        self.calls.append(("init", nranks, rank, n_id))
        self.pending = self.connect_polls
        return Comm(self.next_handle)

    def comm_get_async_error(self, comm: object) -> int:
        c = self._comm(comm)
        self.calls.append(("async_error", c.handle))
        if self.pending:
            self.pending -= 1
            return NCCL_IN_PROGRESS
        return self.fail_with

    def comm_destroy(self, comm: object) -> None:
        self.calls.append(("destroy", self._comm(comm).handle))

    def comm_abort(self, comm: object) -> None:
        self.calls.append(("abort", self._comm(comm).handle))

    def _collective(self, name: str, args: tuple[Any, ...], comm: object, stream: int) -> None:
        c = self._comm(comm)
        assert isinstance(stream, int)
        self.calls.append((name, *args, c.handle, stream))
        self.pending = self.enqueue_polls
        self._check(NCCL_IN_PROGRESS)

    def all_reduce(self, s: int, r: int, n: int, t: int, op: int, comm: object, stream: int) -> None:
        self._collective("all_reduce", (s, r, n, t, op), comm, stream)

    def all_gather(self, s: int, r: int, n: int, t: int, comm: object, stream: int) -> None:
        self._collective("all_gather", (s, r, n, t), comm, stream)

    def broadcast(self, s: int, r: int, n: int, t: int, root: int, comm: object, stream: int) -> None:
        self._collective("broadcast", (s, r, n, t, root), comm, stream)

    def reduce_scatter(self, s: int, r: int, n: int, t: int, op: int, comm: object, stream: int) -> None:
        self._collective("reduce_scatter", (s, r, n, t, op), comm, stream)

    def send(self, buf: int, n: int, t: int, peer: int, comm: object, stream: int) -> None:
        self.calls.append(("send", buf, n, t, peer, self._comm(comm).handle, stream))

    def recv(self, buf: int, n: int, t: int, peer: int, comm: object, stream: int) -> None:
        self.calls.append(("recv", buf, n, t, peer, self._comm(comm).handle, stream))

    def group_start(self) -> None:
        self.calls.append(("group_start",))

    def group_end(self) -> None:
        self.calls.append(("group_end",))
        self.pending = self.enqueue_polls


def _lib(**kw: Any) -> tuple[Nccl4pyLibrary, FakeNccl4py]:
    fake = FakeNccl4py(**kw)
    return Nccl4pyLibrary(fake), fake


def test_comm_init_keeps_the_comm_object_and_reports_the_connecting_state() -> None:
    lib, fake = _lib(connect_polls=1)
    handle, code = lib.comm_init(1, bytes(128), 0, blocking=False)
    assert handle == 0x7100 and code == NCCL_IN_PROGRESS  # read from comm_get_async_error on the Comm
    assert lib.async_error(handle) == NCCL_SUCCESS
    assert fake.calls[0] == ("init", 1, 0, 1)


def test_every_call_passes_the_comm_object_never_the_integer() -> None:
    lib, fake = _lib(connect_polls=0, enqueue_polls=0)
    h, _ = lib.comm_init(1, bytes(128), 0, blocking=False)
    assert lib.all_reduce(0x10, 0x20, 5, 7, 0, h, 0x55) == NCCL_SUCCESS
    assert lib.all_gather(0x10, 0x20, 5, 1, h, 0) == NCCL_SUCCESS
    assert lib.broadcast(0x10, 0x10, 5, 1, 0, h, 0) == NCCL_SUCCESS
    assert lib.reduce_scatter(0x10, 0x20, 5, 7, 2, h, 0) == NCCL_SUCCESS
    assert ("all_reduce", 0x10, 0x20, 5, 7, 0, h, 0x55) in fake.calls
    assert ("reduce_scatter", 0x10, 0x20, 5, 7, 2, h, 0) in fake.calls
    lib.destroy(h)
    assert fake.calls[-1] == ("destroy", h)


def test_a_collective_reports_in_progress_until_nccl_has_taken_it() -> None:
    lib, _fake = _lib(connect_polls=0, enqueue_polls=2)
    h, _ = lib.comm_init(1, bytes(128), 0, blocking=False)
    assert lib.all_reduce(1, 2, 3, 7, 0, h, 0) == NCCL_IN_PROGRESS
    assert lib.async_error(h) == NCCL_IN_PROGRESS
    assert lib.async_error(h) == NCCL_SUCCESS


def test_group_end_reports_the_state_of_the_group_communicators() -> None:
    lib, fake = _lib(connect_polls=0, enqueue_polls=1)
    h, _ = lib.comm_init(1, bytes(128), 0, blocking=False)
    assert lib.group_start() == NCCL_SUCCESS
    assert lib.send(0x10, 4, 1, 0, h, 0) == NCCL_SUCCESS  # inside a group: no state query
    assert lib.recv(0x20, 4, 1, 0, h, 0) == NCCL_SUCCESS
    assert not any(c[0] == "async_error" for c in fake.calls[-2:])
    assert lib.group_end() == NCCL_IN_PROGRESS
    assert lib.async_error(h) == NCCL_SUCCESS


def test_an_unknown_handle_is_refused_and_a_released_one_is_forgotten() -> None:
    lib, _fake = _lib(connect_polls=0)
    with pytest.raises(NcclCallError) as info:
        lib.async_error(0xDEAD)
    assert info.value.code == 4
    h, _ = lib.comm_init(1, bytes(128), 0, blocking=False)
    lib.abort(h)
    with pytest.raises(NcclCallError):
        lib.all_reduce(1, 2, 3, 7, 0, h, 0)


def test_an_nccl_error_keeps_its_result_code() -> None:
    lib, _fake = _lib(connect_polls=0, fail_with=6)
    h, code = lib.comm_init(1, bytes(128), 0, blocking=False)
    assert code == 6  # ncclRemoteError from the communicator's state
    lib.n.comm_destroy = lambda comm: (_ for _ in ()).throw(NCCLError(5))
    with pytest.raises(NcclCallError) as info:
        lib.destroy(h)
    assert info.value.code == 5 and "comm_destroy" in str(info.value)


def test_the_engine_runs_over_the_binding() -> None:
    lib, fake = _lib(connect_polls=2, enqueue_polls=1)
    engine = NcclEngine(StubProvider(), lib)  # type: ignore[arg-type]
    info = unpack_root_info(engine.create_root_info())
    comm = engine.init_root_info(1, info, 0, 0, Timeouts(5.0, 5.0))
    engine.all_reduce(comm, 0x10, 0x20, 8, HcclDataType.HCCL_DATA_TYPE_FP32, HcclReduceOp.HCCL_REDUCE_SUM, 0)
    item = SendRecvItem(HcclSendRecvType.HCCL_SEND, 0x10, 4, HcclDataType.HCCL_DATA_TYPE_INT8, 0)
    engine.batch_send_recv(comm, [item, SendRecvItem(HcclSendRecvType.HCCL_RECV, 0x20, 4, item.dtype, 0)], 0)
    engine.barrier(comm, 0)
    engine.destroy(comm)
    names = [c[0] for c in fake.calls if c[0] != "async_error"]
    assert names == ["init", "all_reduce", "group_start", "send", "recv", "group_end", "all_reduce", "destroy"]


def test_the_engine_maps_an_async_error_of_the_binding() -> None:
    lib, _fake = _lib(connect_polls=0, enqueue_polls=0)
    engine = NcclEngine(StubProvider(), lib)  # type: ignore[arg-type]
    comm = engine.init_root_info(1, unpack_root_info(engine.create_root_info()), 0, 0, Timeouts(5.0, 5.0))
    lib.n.fail_with = 6
    with pytest.raises(HcclError) as info:
        engine.all_gather(comm, 0x10, 0x20, 4, HcclDataType.HCCL_DATA_TYPE_FP16, 0)
    assert info.value.code == HcclResult.HCCL_E_REMOTE


def test_nccl4py_is_the_default_binding_and_ctypes_the_second(monkeypatch: pytest.MonkeyPatch) -> None:
    from acl_rocm.providers import nccl

    monkeypatch.setattr(nccl, "Nccl4pyLibrary", lambda: "nccl4py")
    monkeypatch.setattr(nccl, "CtypesLibrary", lambda path, name: f"ctypes {name}")
    assert nccl.open_nccl({}) == ("nccl4py", "")
    assert nccl.open_nccl({"ACL_NCCL_BINDING": "ctypes"}) == ("ctypes nccl", "")

    def missing() -> None:
        raise ModuleNotFoundError("No module named 'nccl'")

    monkeypatch.setattr(nccl, "Nccl4pyLibrary", missing)
    assert nccl.open_nccl({}) == ("ctypes nccl", "")
    lib, why = nccl.open_nccl({"ACL_NCCL_BINDING": "nccl4py"})  # forced: no second choice
    assert lib is None and "No module named 'nccl'" in why

"""The C-shaped HCCL front end: ``from acl_core import hccl``, then ``hccl.HcclAllReduce(...)``.

pyACL's convention: C out-parameters come back first and the HcclResult last
(``root_info, ret = HcclGetRootInfo()``, ``comm, ret = HcclCommInitRootInfo(n, root_info, rank)``);
errors are returned, never raised; a null pointer or handle may be passed as None or 0 (HCCL_E_PTR);
``stream=None`` is the current device's default stream. Root info is a 4108-byte ``bytes``.
Enum arguments are HCCL's own integers, also exported under their C names (``hccl.HCCL_DATA_TYPE_FP32``,
``hccl.HCCL_REDUCE_SUM``, ``hccl.HCCL_E_TIMEOUT``); HcclDataType differs from aclDataType (see
:data:`~acl_core.spec.collective.ACL_TO_HCCL`).

Every argument is checked here, once, for every backend: buffers must be live device memory of the
communicator's device, aligned to the element size and large enough for the counts (HCCL_E_PARA;
null is HCCL_E_PTR), counts non-negative integers, ranks in range. The backend's
:class:`~acl_core.spec.collective.CollectiveEngine` then moves the data. Live communicators are
also kept by name, which is how aclnn MC2 operators find theirs (their ``group`` argument).
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from acl_core.backend import Backend
from acl_core.errors import AclCoreError, AclError, HcclError, HcclResult, hccl_code_name
from acl_core.plugin import get_backend
from acl_core.runtime.memory_map import RangeKind
from acl_core.spec.collective import (
    COMM_NAME_MAX_LENGTH,
    ELEMENT_BYTES,
    HCCL_ROOT_INFO_BYTES,
    SELF_GROUP_NAME,
    CollectiveEngine,
    EngineCommunicator,
    HcclDataType,
    HcclReduceOp,
    HcclSendRecvType,
    SendRecvItem,
    Timeouts,
    hccl_dtype,
    parse_rank_table,
    reduce_op,
    unpack_root_info,
)

HCCL_SUCCESS = 0
_T = TypeVar("_T")
_local = threading.local()
_UINT64_MAX = 2**64 - 1

_DESCRIPTIONS = {
    HcclResult.HCCL_SUCCESS: "success",
    HcclResult.HCCL_E_PARA: "parameter error",
    HcclResult.HCCL_E_PTR: "empty pointer",
    HcclResult.HCCL_E_MEMORY: "memory error",
    HcclResult.HCCL_E_INTERNAL: "internal error",
    HcclResult.HCCL_E_NOT_SUPPORT: "not support feature",
    HcclResult.HCCL_E_NOT_FOUND: "not found specific resource",
    HcclResult.HCCL_E_UNAVAIL: "resource unavailable",
    HcclResult.HCCL_E_SYSCALL: "call system interface error",
    HcclResult.HCCL_E_TIMEOUT: "timeout",
    HcclResult.HCCL_E_OPEN_FILE_FAILURE: "open file fail",
    HcclResult.HCCL_E_TCP_CONNECT: "tcp connect fail",
    HcclResult.HCCL_E_ROCE_CONNECT: "roce connect fail",
    HcclResult.HCCL_E_TCP_TRANSFER: "tcp transfer fail",
    HcclResult.HCCL_E_ROCE_TRANSFER: "roce transfer fail",
    HcclResult.HCCL_E_RUNTIME: "call runtime api fail",
    HcclResult.HCCL_E_DRV: "call driver api fail",
    HcclResult.HCCL_E_PROFILING: "call profiling api fail",
    HcclResult.HCCL_E_CCE: "call cce api fail",
    HcclResult.HCCL_E_NETWORK: "call network api fail",
    HcclResult.HCCL_E_AGAIN: "try again",
    HcclResult.HCCL_E_REMOTE: "error cqe",
    HcclResult.HCCL_E_SUSPENDING: "error communicator suspending",
    HcclResult.HCCL_E_OPRETRY_FAIL: "retry constraint",
    HcclResult.HCCL_E_OOM: "out of memory",
    HcclResult.HCCL_E_IN_STATUS: "in error status",
}


# ----------------------------------------------------------------------------- handles
class HcclComm:
    """HcclComm: this process's rank of a communicator (opaque; pass it back to the HCCL calls)."""

    __slots__ = ("backend", "comm", "destroyed", "engine")

    def __init__(self, backend: Backend, engine: CollectiveEngine, comm: EngineCommunicator) -> None:
        self.backend = backend
        self.engine = engine
        self.comm = comm
        self.destroyed = False

    def __repr__(self) -> str:
        state = " destroyed" if self.destroyed else ""
        return f"<HcclComm {self.comm.name} rank {self.comm.rank}/{self.comm.size} on {self.backend.name}{state}>"


@dataclass
class HcclSendRecvItem:
    """HcclSendRecvItem: one send or receive of HcclBatchSendRecv (C field names)."""

    sendRecvType: int
    buf: int | None
    count: int
    dataType: int
    remoteRank: int


HCCL_SEND = int(HcclSendRecvType.HCCL_SEND)
HCCL_RECV = int(HcclSendRecvType.HCCL_RECV)
for _enum in (HcclDataType, HcclReduceOp, HcclResult):
    for _name, _member in _enum.__members__.items():
        globals()[_name] = int(
            _member
        )  # the C names: hccl.HCCL_DATA_TYPE_FP32, hccl.HCCL_REDUCE_SUM, hccl.HCCL_E_PARA...


# ----------------------------------------------------------------------------- the registry of live communicators
_registry_lock = threading.RLock()
_by_name: dict[str, HcclComm] = {}
_self_comms: dict[int, HcclComm] = {}


def _register(handle: HcclComm) -> None:
    with _registry_lock:
        name = handle.comm.name
        if name in _by_name:
            handle.engine.destroy(handle.comm)
            raise _para(f"this process already holds a rank of communicator {name!r} (destroy it first)")
        _by_name[name] = handle


def group_size(name: str) -> int | None:
    """The rank count of the live communicator called ``name`` (1 for the self group), or None if there is none."""
    if name == SELF_GROUP_NAME:
        return 1
    with _registry_lock:
        handle = _by_name.get(name)
        return None if handle is None else handle.comm.size


def group_rank(name: str) -> int | None:
    """This process's rank in the live communicator called ``name`` (0 for the self group), or None if there is none."""
    if name == SELF_GROUP_NAME:
        return 0
    with _registry_lock:
        handle = _by_name.get(name)
        return None if handle is None else handle.comm.rank


def resolve_group(name: str, engine: CollectiveEngine, device: int) -> EngineCommunicator:
    """The engine communicator an aclnn MC2 operator's ``group`` names; HcclError(HCCL_E_NOT_FOUND) if none.

    :data:`~acl_core.spec.collective.SELF_GROUP_NAME` gives a one-rank communicator of ``engine``,
    made on first use.
    """
    with _registry_lock:
        if name == SELF_GROUP_NAME:
            handle = _self_comms.get(id(engine))
            if handle is None or handle.engine is not engine:
                info = unpack_root_info(engine.create_root_info())
                comm = engine.init_root_info(1, info, 0, device, Timeouts.from_env())
                handle = _self_comms[id(engine)] = HcclComm(get_backend(), engine, comm)
            return handle.comm
        handle = _by_name.get(name)
        if handle is None:
            raise HcclError(HcclResult.HCCL_E_NOT_FOUND, f"no live communicator is called {name!r}")
        if handle.engine is not engine:
            raise _para(f"communicator {name!r} belongs to backend {handle.backend.name!r}, not this one")
        return handle.comm


# ----------------------------------------------------------------------------- the return convention
def _para(message: str) -> HcclError:
    return HcclError(HcclResult.HCCL_E_PARA, message)


def _record(exc: BaseException) -> int:
    if isinstance(exc, HcclError):
        _local.message = exc.message
        return exc.code
    if isinstance(exc, AclCoreError):
        _local.message = f"{type(exc).__name__}: {exc}"
        return int(HcclResult.HCCL_E_RUNTIME)
    _local.message = f"internal error: {type(exc).__name__}: {exc}"
    return int(HcclResult.HCCL_E_INTERNAL)


def _status(fn: Callable[[], object]) -> int:
    try:
        fn()
    except Exception as exc:  # never let a defect escape as a crash of the caller's program
        return _record(exc)
    return HCCL_SUCCESS


def _value(fn: Callable[[], _T], failed: Any = None) -> tuple[Any, int]:
    try:
        return fn(), HCCL_SUCCESS
    except Exception as exc:
        return failed, _record(exc)


def last_error_message() -> str:
    """Why this thread's last failed HCCL call failed (an acl-core extension; '' if none failed)."""
    return getattr(_local, "message", "")


def HcclGetErrorString(code: int) -> str:
    """HcclGetErrorString: the name and meaning of an HcclResult."""
    try:
        result = HcclResult(int(code))
    except (TypeError, ValueError):
        return f"unknown HcclResult {code!r}"
    return f"{hccl_code_name(result)}: {_DESCRIPTIONS.get(result, 'reserved')}"


# ----------------------------------------------------------------------------- argument checks
def _backend_engine() -> tuple[Backend, CollectiveEngine]:
    backend = get_backend()
    engine = backend.collectives
    if engine is None:
        raise HcclError(HcclResult.HCCL_E_NOT_SUPPORT, f"backend {backend.name!r} has no collective engine")
    return backend, engine


def _current_device(backend: Backend) -> int:
    try:
        return backend.runtime.get_device()
    except AclError as exc:
        raise HcclError(HcclResult.HCCL_E_RUNTIME, f"set a device first (acl.rt.set_device): {exc.message}") from None


def _integer(value: object, what: str, low: int = 0, high: int = _UINT64_MAX) -> int:
    if isinstance(value, bool):
        raise _para(f"{what} must be an integer, not bool")
    try:
        number = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise _para(f"{what} must be an integer, not {type(value).__name__}") from None
    if not low <= number <= high:
        raise _para(f"{what}={number} is outside [{low}, {high}]")
    return number


def _comm(handle: object) -> HcclComm:
    if handle is None or (type(handle) is int and handle == 0):
        raise HcclError(HcclResult.HCCL_E_PTR, "comm is null")
    if not isinstance(handle, HcclComm):
        raise _para(f"comm must be an HcclComm from HcclCommInitRootInfo, not {type(handle).__name__}")
    if handle.destroyed:
        raise _para(f"communicator {handle.comm.name!r} was destroyed")
    return handle


def _buffer(handle: HcclComm, address: object, count: int, dtype: HcclDataType, what: str) -> int:
    """A device address holding ``count`` elements of ``dtype`` on the communicator's device."""
    if address is None or (type(address) is int and address == 0):
        raise HcclError(HcclResult.HCCL_E_PTR, f"{what} is null")
    addr = _integer(address, what, 1)
    size = ELEMENT_BYTES[dtype]
    if addr % min(size, 8):
        raise _para(f"{what} {addr:#x} is not aligned to the {size}-byte elements of {dtype.name}")
    try:
        rng = handle.backend.runtime.memory.resolve(addr, count * size, what)
    except AclError as exc:
        raise _para(exc.message) from None
    if not rng.kind.on_device:
        raise _para(f"{what} {addr:#x} is host memory; HCCL moves device memory")
    if rng.kind is RangeKind.DEVICE and rng.device != handle.comm.device:
        raise _para(f"{what} lives on device {rng.device}; the communicator is on device {handle.comm.device}")
    return addr


def _stream(handle: HcclComm, stream: object, kind: str) -> object:
    """The driver stream of ``stream``; on a capturing stream the collective ``kind`` joins the capture's task log."""
    runtime = handle.backend.runtime
    try:
        driver_stream = runtime.stream(stream)  # type: ignore[arg-type]
    except AclError as exc:
        raise _para(f"stream: {exc.message}") from None
    if runtime.capture.recording:  # as aclnn launches and async copies are (an invalidated capture refuses it)
        runtime.capture.log(stream, kind)
    return driver_stream


def _peer(handle: HcclComm, value: object, what: str) -> int:
    peer = _integer(value, what, 0, handle.comm.size - 1)
    if peer == handle.comm.rank:
        raise _para(f"{what}={peer} is this rank itself")
    return peer


def _moves(handle: HcclComm, dtype: HcclDataType, *, reduction: bool) -> None:
    if not handle.engine.supports(dtype, reduction=reduction):
        verb = "reduce" if reduction else "move"
        raise HcclError(HcclResult.HCCL_E_NOT_SUPPORT, f"the {handle.engine.name} engine cannot {verb} {dtype.name}")


def _typed(
    comm: object, count: object, what: str, data_type: int, *, reduction: bool
) -> tuple[HcclComm, int, HcclDataType]:
    """The checks every typed collective starts with, in HCCL's order: comm, count, dtype, engine support."""
    h = _comm(comm)
    n = _integer(count, what)
    dtype = hccl_dtype(data_type)
    _moves(h, dtype, reduction=reduction)
    return h, n, dtype


def _overlap(a: int, a_bytes: int, b: int, b_bytes: int) -> bool:
    return a_bytes > 0 and b_bytes > 0 and a < b + b_bytes and b < a + a_bytes


# ----------------------------------------------------------------------------- communicators
def HcclGetRootInfo() -> tuple[bytes | None, int]:
    """HcclGetRootInfo: (rootInfo, ret); call it on one process and hand the 4108 bytes to every rank."""

    def run() -> bytes:
        _, engine = _backend_engine()
        blob = engine.create_root_info()
        assert len(blob) == HCCL_ROOT_INFO_BYTES
        return blob

    return _value(run)


def HcclCommInitRootInfo(nRanks: int, rootInfo: bytes | None, rank: int) -> tuple[HcclComm | None, int]:
    """HcclCommInitRootInfo: (comm, ret); every rank calls it with the same rootInfo and nRanks.

    A rank that does not join within HCCL_CONNECT_TIMEOUT makes the others return HCCL_E_TIMEOUT.
    """

    def run() -> HcclComm:
        n = _integer(nRanks, "nRanks", 1, 2**32 - 1)
        r = _integer(rank, "rank", 0, n - 1)
        if rootInfo is None or (type(rootInfo) is int and rootInfo == 0):
            raise HcclError(HcclResult.HCCL_E_PTR, "rootInfo is null")
        info = unpack_root_info(rootInfo)
        backend, engine = _backend_engine()
        device = _current_device(backend)
        if n > engine.max_ranks():
            raise _para(f"nRanks={n} exceeds the {engine.max_ranks()} ranks the {engine.name} engine has here")
        with _registry_lock:
            if info.comm_name in _by_name:
                raise _para(f"this process already holds a rank of communicator {info.comm_name!r}")
        handle = HcclComm(backend, engine, engine.init_root_info(n, info, r, device, Timeouts.from_env()))
        _register(handle)
        return handle

    return _value(run)


def HcclCommInitClusterInfo(clusterInfo: str | None, rank: int) -> tuple[HcclComm | None, int]:
    """HcclCommInitClusterInfo: (comm, ret) from a rank table file (CANN's JSON, version 1.0)."""

    def run() -> HcclComm:
        if clusterInfo is None or (type(clusterInfo) is int and clusterInfo == 0):
            raise HcclError(HcclResult.HCCL_E_PTR, "clusterInfo is null")
        table = parse_rank_table(clusterInfo)
        r = _integer(rank, "rank", 0, table.size - 1)
        backend, engine = _backend_engine()
        device = _current_device(backend)
        if table.ranks[r].device_id != device:
            raise _para(f"rank {r} is device {table.ranks[r].device_id} in the rank table, but device {device} is set")
        handle = HcclComm(backend, engine, engine.init_rank_table(table, r, device, Timeouts.from_env()))
        _register(handle)
        return handle

    return _value(run)


def HcclCommDestroy(comm: HcclComm | None) -> int:
    """HcclCommDestroy: releases this rank's part of the communicator (local; never waits for peers)."""

    def run() -> None:
        handle = _comm(comm)
        handle.destroyed = True
        with _registry_lock:
            if _by_name.get(handle.comm.name) is handle:
                del _by_name[handle.comm.name]
        handle.engine.destroy(handle.comm)

    return _status(run)


def HcclGetRankSize(comm: HcclComm | None) -> tuple[int, int]:
    """HcclGetRankSize: (rankSize, ret)."""
    return _value(lambda: _comm(comm).comm.size, 0)


def HcclGetRankId(comm: HcclComm | None) -> tuple[int, int]:
    """HcclGetRankId: (rank, ret)."""
    return _value(lambda: _comm(comm).comm.rank, 0)


def HcclGetCommName(comm: HcclComm | None) -> tuple[str | None, int]:
    """HcclGetCommName: (commName, ret); the name aclnn MC2 operators take as ``group``."""

    def run() -> str:
        name = _comm(comm).comm.name
        assert len(name) < COMM_NAME_MAX_LENGTH
        return name

    return _value(run)


def HcclCommGetHandleWithName(commName: str | None) -> tuple[HcclComm | None, int]:
    """HcclCommGetHandleWithName: (comm, ret); HCCL_E_NOT_FOUND when no live communicator has that name."""

    def run() -> HcclComm:
        if commName is None or (type(commName) is int and commName == 0):
            raise HcclError(HcclResult.HCCL_E_PTR, "commName is null")
        if not isinstance(commName, str):
            raise _para(f"commName must be a string, not {type(commName).__name__}")
        with _registry_lock:
            handle = _by_name.get(commName)
        if handle is None:
            raise HcclError(HcclResult.HCCL_E_NOT_FOUND, f"no live communicator is called {commName!r}")
        return handle

    return _value(run)


# ----------------------------------------------------------------------------- collectives
def HcclAllReduce(
    sendBuf: int | None,
    recvBuf: int | None,
    count: int,
    dataType: int,
    op: int,
    comm: HcclComm | None,
    stream: int | None = None,
) -> int:
    """HcclAllReduce: recvBuf = op over ranks of sendBuf (``count`` elements; sum, prod, max, min)."""

    def run() -> None:
        h, n, dtype = _typed(comm, count, "count", dataType, reduction=True)
        rop = reduce_op(op)
        send, recv = _buffer(h, sendBuf, n, dtype, "sendBuf"), _buffer(h, recvBuf, n, dtype, "recvBuf")
        h.engine.all_reduce(h.comm, send, recv, n, dtype, rop, _stream(h, stream, "HcclAllReduce"))

    return _status(run)


def HcclAllGather(
    sendBuf: int | None,
    recvBuf: int | None,
    sendCount: int,
    dataType: int,
    comm: HcclComm | None,
    stream: int | None = None,
) -> int:
    """HcclAllGather: recvBuf (sendCount × rankSize elements) = every rank's sendBuf in rank order."""

    def run() -> None:
        h, n, dtype = _typed(comm, sendCount, "sendCount", dataType, reduction=False)
        send = _buffer(h, sendBuf, n, dtype, "sendBuf")
        recv = _buffer(h, recvBuf, n * h.comm.size, dtype, "recvBuf")
        h.engine.all_gather(h.comm, send, recv, n, dtype, _stream(h, stream, "HcclAllGather"))

    return _status(run)


def HcclBroadcast(
    buf: int | None,
    count: int,
    dataType: int,
    root: int,
    comm: HcclComm | None,
    stream: int | None = None,
) -> int:
    """HcclBroadcast: buf = root's buf on every rank (in place)."""

    def run() -> None:
        h, n, dtype = _typed(comm, count, "count", dataType, reduction=False)
        r = _integer(root, "root", 0, h.comm.size - 1)
        address = _buffer(h, buf, n, dtype, "buf")
        h.engine.broadcast(h.comm, address, n, dtype, r, _stream(h, stream, "HcclBroadcast"))

    return _status(run)


def HcclReduceScatter(
    sendBuf: int | None,
    recvBuf: int | None,
    recvCount: int,
    dataType: int,
    op: int,
    comm: HcclComm | None,
    stream: int | None = None,
) -> int:
    """HcclReduceScatter: recvBuf on rank r = op over ranks of block r of sendBuf (recvCount × rankSize elements)."""

    def run() -> None:
        h, n, dtype = _typed(comm, recvCount, "recvCount", dataType, reduction=True)
        rop = reduce_op(op)
        send = _buffer(h, sendBuf, n * h.comm.size, dtype, "sendBuf")
        recv = _buffer(h, recvBuf, n, dtype, "recvBuf")
        h.engine.reduce_scatter(h.comm, send, recv, n, dtype, rop, _stream(h, stream, "HcclReduceScatter"))

    return _status(run)


def HcclAlltoAll(
    sendBuf: int | None,
    sendCount: int,
    sendType: int,
    recvBuf: int | None,
    recvCount: int,
    recvType: int,
    comm: HcclComm | None,
    stream: int | None = None,
) -> int:
    """HcclAlltoAll: block p (sendCount elements) of sendBuf goes to rank p; counts and types must match."""

    def run() -> None:
        h = _comm(comm)
        n, m = _integer(sendCount, "sendCount"), _integer(recvCount, "recvCount")
        st, rt = hccl_dtype(sendType), hccl_dtype(recvType)
        if n != m or st != rt:
            raise _para(f"sendCount/sendType ({n}, {st.name}) must equal recvCount/recvType ({m}, {rt.name})")
        _moves(h, st, reduction=False)
        total = n * h.comm.size
        send = _buffer(h, sendBuf, total, st, "sendBuf")
        recv = _buffer(h, recvBuf, total, st, "recvBuf")
        nbytes = total * ELEMENT_BYTES[st]
        if _overlap(send, nbytes, recv, nbytes):
            raise _para("sendBuf and recvBuf of an all-to-all must not overlap")
        h.engine.all_to_all(h.comm, send, recv, n, st, _stream(h, stream, "HcclAlltoAll"))

    return _status(run)


def _counts(handle: HcclComm, values: object, what: str) -> list[int]:
    if values is None or (type(values) is int and values == 0):
        raise HcclError(HcclResult.HCCL_E_PTR, f"{what} is null")
    try:
        items = list(values)  # type: ignore[call-overload]
    except TypeError:
        raise _para(f"{what} must be a sequence of rankSize integers") from None
    if len(items) != handle.comm.size:
        raise _para(f"{what} has {len(items)} entries; the communicator has {handle.comm.size} ranks")
    return [_integer(v, f"{what}[{i}]") for i, v in enumerate(items)]


def HcclAlltoAllV(
    sendBuf: int | None,
    sendCounts: Sequence[int] | None,
    sdispls: Sequence[int] | None,
    sendType: int,
    recvBuf: int | None,
    recvCounts: Sequence[int] | None,
    rdispls: Sequence[int] | None,
    recvType: int,
    comm: HcclComm | None,
    stream: int | None = None,
) -> int:
    """HcclAlltoAllV: per-peer counts and displacements in elements (host sequences of rankSize integers)."""

    def run() -> None:
        h = _comm(comm)
        scounts, sdisp = _counts(h, sendCounts, "sendCounts"), _counts(h, sdispls, "sdispls")
        rcounts, rdisp = _counts(h, recvCounts, "recvCounts"), _counts(h, rdispls, "rdispls")
        st, rt = hccl_dtype(sendType), hccl_dtype(recvType)
        if st != rt:
            raise _para(f"sendType {st.name} and recvType {rt.name} must be the same")
        _moves(h, st, reduction=False)
        send_extent = max((d + c for d, c in zip(sdisp, scounts)), default=0)
        recv_extent = max((d + c for d, c in zip(rdisp, rcounts)), default=0)
        send = _buffer(h, sendBuf, send_extent, st, "sendBuf")
        recv = _buffer(h, recvBuf, recv_extent, st, "recvBuf")
        size = ELEMENT_BYTES[st]
        if _overlap(send, send_extent * size, recv, recv_extent * size):
            raise _para("sendBuf and recvBuf of an all-to-all must not overlap")
        h.engine.all_to_all_v(
            h.comm, send, scounts, sdisp, recv, rcounts, rdisp, st, _stream(h, stream, "HcclAlltoAllV")
        )

    return _status(run)


def HcclBarrier(comm: HcclComm | None, stream: int | None = None) -> int:
    """HcclBarrier: returns once every rank has entered it."""

    def run() -> None:
        h = _comm(comm)
        h.engine.barrier(h.comm, _stream(h, stream, "HcclBarrier"))

    return _status(run)


# ----------------------------------------------------------------------------- point to point
def HcclSend(
    sendBuf: int | None,
    count: int,
    dataType: int,
    destRank: int,
    comm: HcclComm | None,
    stream: int | None = None,
) -> int:
    """HcclSend: pairs with an HcclRecv on destRank (HCCL_E_PARA on both when their counts or types differ)."""

    def run() -> None:
        h, n, dtype = _typed(comm, count, "count", dataType, reduction=False)
        dest = _peer(h, destRank, "destRank")
        address = _buffer(h, sendBuf, n, dtype, "sendBuf")
        h.engine.send(h.comm, address, n, dtype, dest, _stream(h, stream, "HcclSend"))

    return _status(run)


def HcclRecv(
    recvBuf: int | None,
    count: int,
    dataType: int,
    srcRank: int,
    comm: HcclComm | None,
    stream: int | None = None,
) -> int:
    """HcclRecv: receive ``count`` elements from srcRank."""

    def run() -> None:
        h, n, dtype = _typed(comm, count, "count", dataType, reduction=False)
        src = _peer(h, srcRank, "srcRank")
        address = _buffer(h, recvBuf, n, dtype, "recvBuf")
        h.engine.recv(h.comm, address, n, dtype, src, _stream(h, stream, "HcclRecv"))

    return _status(run)


def HcclBatchSendRecv(
    sendRecvInfo: Sequence[HcclSendRecvItem] | None,
    itemNum: int,
    comm: HcclComm | None,
    stream: int | None = None,
) -> int:
    """HcclBatchSendRecv: the first itemNum items, posted together (sends and receives cannot deadlock each other)."""

    def run() -> None:
        h = _comm(comm)
        if sendRecvInfo is None or (type(sendRecvInfo) is int and sendRecvInfo == 0):
            raise HcclError(HcclResult.HCCL_E_PTR, "sendRecvInfo is null")
        entries = list(sendRecvInfo)
        n = _integer(itemNum, "itemNum", 0, len(entries))
        items: list[SendRecvItem] = []
        for i, entry in enumerate(entries[:n]):
            if not isinstance(entry, HcclSendRecvItem):
                raise _para(f"sendRecvInfo[{i}] must be an HcclSendRecvItem, not {type(entry).__name__}")
            kind = _integer(entry.sendRecvType, f"sendRecvInfo[{i}].sendRecvType", HCCL_SEND, HCCL_RECV)
            dtype = hccl_dtype(entry.dataType)
            _moves(h, dtype, reduction=False)
            count = _integer(entry.count, f"sendRecvInfo[{i}].count")
            peer = _peer(h, entry.remoteRank, f"sendRecvInfo[{i}].remoteRank")
            address = _buffer(h, entry.buf, count, dtype, f"sendRecvInfo[{i}].buf")
            items.append(SendRecvItem(HcclSendRecvType(kind), address, count, dtype, peer))
        h.engine.batch_send_recv(h.comm, items, _stream(h, stream, "HcclBatchSendRecv"))

    return _status(run)


__all__ = [
    "HCCL_RECV",
    "HCCL_ROOT_INFO_BYTES",
    "HCCL_SEND",
    "HCCL_SUCCESS",
    "HcclAllGather",
    "HcclAllReduce",
    "HcclAlltoAll",
    "HcclAlltoAllV",
    "HcclBarrier",
    "HcclBatchSendRecv",
    "HcclBroadcast",
    "HcclComm",
    "HcclCommDestroy",
    "HcclCommGetHandleWithName",
    "HcclCommInitClusterInfo",
    "HcclCommInitRootInfo",
    "HcclDataType",
    "HcclGetCommName",
    "HcclGetErrorString",
    "HcclGetRankId",
    "HcclGetRankSize",
    "HcclGetRootInfo",
    "HcclRecv",
    "HcclReduceOp",
    "HcclReduceScatter",
    "HcclResult",
    "HcclSend",
    "HcclSendRecvItem",
    "last_error_message",
]

"""HCCL on the rocm backend: a :class:`CollectiveEngine` over NCCL (nvidia) or RCCL (amd).

Every call is enqueued on the caller's stream (a CUDA/HIP stream as an int), as HCCL does on an
Ascend stream; only :meth:`NcclEngine.barrier` waits for the stream. Send/recv/batch run inside
ncclGroupStart/End; a barrier is a one-element all-reduce; all-to-all(v) is grouped send/recv (self
included, which NCCL allows inside a group).

Data types: NCCL reduces int8, uint8, int32, uint32, int64, uint64, fp16, fp32, fp64, bf16, and
fp8 e4m3/e5m2 from NCCL 2.24. Movement-only collectives (all-gather, broadcast, all-to-all(v),
send, recv, batch) carry any other HCCL type (int16, uint16, int128, hif8, fp8e8m0, and fp8 on an
older NCCL) as its bytes (ncclUint8, counts times the element size). Reducing a type NCCL lacks is
refused with HCCL_E_NOT_SUPPORT (the front end asks :meth:`NcclEngine.supports` first).

Timeouts: every communicator is non-blocking (ncclConfig_t.blocking = 0). Forming it polls
ncclCommGetAsyncError until HCCL_CONNECT_TIMEOUT; each later call polls until the enqueue has
finished, within HCCL_EXEC_TIMEOUT; a barrier also polls its stream within HCCL_EXEC_TIMEOUT.
Past a deadline the communicator is aborted (ncclCommAbort) and the call returns HCCL_E_TIMEOUT;
the communicator is then unusable. Work already enqueued on a stream that never finishes is not
watched once its call returned (HCCL's device-side timeout has no NCCL counterpart).

Root info payload (after the shared header of :func:`acl_core.spec.collective.pack_root_info`,
whose 16-byte uid is random), little-endian: bytes 44-171 the 128-byte ncclUniqueId; 172-175 u32
ncclGetVersion of the maker; 176-179 u32 the maker's process id; 180-4107 zero.
"""

from __future__ import annotations

import os
import struct
import threading
import time
from collections.abc import Callable, Sequence

from acl_core.errors import HcclError, HcclResult
from acl_core.spec.collective import (
    ELEMENT_BYTES,
    WORLD_GROUP_NAME,
    CollectiveEngine,
    EngineCommunicator,
    HcclDataType,
    HcclReduceOp,
    HcclSendRecvType,
    RankTable,
    RootInfo,
    SendRecvItem,
    Timeouts,
    pack_root_info,
)
from acl_rocm.driver import handle
from acl_rocm.providers.base import RuntimeProvider
from acl_rocm.providers.nccl import (
    NCCL_IN_PROGRESS,
    NCCL_SUCCESS,
    UNIQUE_ID_BYTES,
    CollectiveLibrary,
    NcclCallError,
)

_PAYLOAD = struct.Struct(f"<{UNIQUE_ID_BYTES}sII")
LAUNCHER_SIZE_ENVS = ("ACL_LAUNCH_SIZE", "WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE")
"""Where launchers put the number of ranks of the job (acl_tools.launch, torchrun, MPICH, Open MPI)."""
POLL_S = 0.0005
"""How often a pending non-blocking call is polled."""


class NcclType:
    """ncclDataType_t values."""

    INT8 = 0
    UINT8 = 1
    INT32 = 2
    UINT32 = 3
    INT64 = 4
    UINT64 = 5
    FLOAT16 = 6
    FLOAT32 = 7
    FLOAT64 = 8
    BFLOAT16 = 9
    FLOAT8E4M3 = 10
    FLOAT8E5M2 = 11


FP8_MIN_VERSION = 22400
"""ncclFloat8e4m3 / ncclFloat8e5m2 appeared in NCCL 2.24."""

D = HcclDataType
NATIVE: dict[HcclDataType, int] = {
    D.HCCL_DATA_TYPE_INT8: NcclType.INT8,
    D.HCCL_DATA_TYPE_UINT8: NcclType.UINT8,
    D.HCCL_DATA_TYPE_INT32: NcclType.INT32,
    D.HCCL_DATA_TYPE_UINT32: NcclType.UINT32,
    D.HCCL_DATA_TYPE_INT64: NcclType.INT64,
    D.HCCL_DATA_TYPE_UINT64: NcclType.UINT64,
    D.HCCL_DATA_TYPE_FP16: NcclType.FLOAT16,
    D.HCCL_DATA_TYPE_FP32: NcclType.FLOAT32,
    D.HCCL_DATA_TYPE_FP64: NcclType.FLOAT64,
    D.HCCL_DATA_TYPE_BFP16: NcclType.BFLOAT16,
}
"""HcclDataType → ncclDataType_t for every NCCL version this engine accepts."""
FP8: dict[HcclDataType, int] = {
    D.HCCL_DATA_TYPE_FP8E4M3: NcclType.FLOAT8E4M3,
    D.HCCL_DATA_TYPE_FP8E5M2: NcclType.FLOAT8E5M2,
}
del D

REDUCE_OPS: dict[HcclReduceOp, int] = {
    HcclReduceOp.HCCL_REDUCE_SUM: 0,
    HcclReduceOp.HCCL_REDUCE_PROD: 1,
    HcclReduceOp.HCCL_REDUCE_MAX: 2,
    HcclReduceOp.HCCL_REDUCE_MIN: 3,
}
"""HcclReduceOp → ncclRedOp_t (ncclSum, ncclProd, ncclMax, ncclMin)."""

RESULT_TO_HCCL: dict[int, HcclResult] = {
    1: HcclResult.HCCL_E_RUNTIME,  # ncclUnhandledCudaError
    2: HcclResult.HCCL_E_SYSCALL,  # ncclSystemError
    3: HcclResult.HCCL_E_INTERNAL,  # ncclInternalError
    4: HcclResult.HCCL_E_PARA,  # ncclInvalidArgument
    5: HcclResult.HCCL_E_PARA,  # ncclInvalidUsage
    6: HcclResult.HCCL_E_REMOTE,  # ncclRemoteError
    7: HcclResult.HCCL_E_AGAIN,  # ncclInProgress (only if it escapes polling)
}
"""ncclResult_t → HcclResult (anything unlisted is HCCL_E_INTERNAL)."""


def hccl_result(code: int) -> HcclResult:
    """The HcclResult of an ncclResult_t."""
    return RESULT_TO_HCCL.get(int(code), HcclResult.HCCL_E_INTERNAL)


def nccl_type(dtype: HcclDataType, version: int) -> int | None:
    """The ncclDataType_t NCCL ``version`` has for ``dtype``, or None."""
    if dtype in NATIVE:
        return NATIVE[dtype]
    if dtype in FP8 and version >= FP8_MIN_VERSION:
        return FP8[dtype]
    return None


def wire_type(dtype: HcclDataType, count: int, version: int) -> tuple[int, int]:
    """(ncclDataType_t, count) that moves ``count`` elements of ``dtype``: native, or its bytes as ncclUint8."""
    native = nccl_type(dtype, version)
    if native is not None:
        return native, count
    return NcclType.UINT8, count * ELEMENT_BYTES[dtype]


def pack_nccl_root_info(engine: str, uid: bytes, unique_id: bytes, version: int, pid: int) -> bytes:
    """The 4108-byte root info carrying a 128-byte ncclUniqueId (layout in the module docstring)."""
    if len(unique_id) != UNIQUE_ID_BYTES:
        raise ValueError(f"an ncclUniqueId is {UNIQUE_ID_BYTES} bytes, not {len(unique_id)}")
    return pack_root_info(engine, uid, _PAYLOAD.pack(unique_id, version, pid))


def unpack_nccl_payload(payload: bytes) -> tuple[bytes, int, int]:
    """(ncclUniqueId, maker's NCCL version, maker's pid) from a root info payload."""
    unique_id, version, pid = _PAYLOAD.unpack_from(payload)
    return unique_id, version, pid


def _para(message: str) -> HcclError:
    return HcclError(HcclResult.HCCL_E_PARA, message)


class NcclCommunicator(EngineCommunicator):
    """One rank's NCCL communicator (a non-blocking ncclComm_t)."""

    def __init__(
        self, comm: int, name: str, rank: int, size: int, device: int, timeouts: Timeouts, scratch: int
    ) -> None:
        self.comm = comm
        self._name = name
        self._rank = rank
        self._size = size
        self._device = device
        self.timeouts = timeouts
        self.scratch = scratch
        self.failure: str | None = None
        self.destroyed = False

    @property
    def rank(self) -> int:
        """This process's rank."""
        return self._rank

    @property
    def size(self) -> int:
        """Number of ranks."""
        return self._size

    @property
    def name(self) -> str:
        """The communicator's name."""
        return self._name

    @property
    def device(self) -> int:
        """The device it was made on."""
        return self._device

    def __repr__(self) -> str:
        return f"<NcclCommunicator {self._name} rank {self._rank}/{self._size}>"


class NcclEngine(CollectiveEngine):
    """HCCL over NCCL/RCCL on the rocm backend's devices."""

    def __init__(self, provider: RuntimeProvider, library: CollectiveLibrary) -> None:
        self.provider = provider
        self.lib = library
        self.name = library.name
        self.nccl_version = library.version()
        self._lock = threading.RLock()
        self._table_uses: dict[bytes, int] = {}
        self.capturing: Callable[[int], bool] = lambda stream: False
        """Whether a driver stream captures (the backend sets the driver's): a captured barrier skips its host wait."""

    # ------------------------------------------------------------------ facts
    def max_ranks(self) -> int:
        """The larger of the launcher's world size (NCCL spans processes and hosts) and the visible devices.

        One rank per device: NCCL refuses two ranks of one communicator on one GPU, so a job on one
        host has at most its device count; a launcher's world (acl_tools.launch, torchrun, MPICH,
        Open MPI) may span several hosts, and each of its processes sets its own device.
        """
        world = 0
        for variable in LAUNCHER_SIZE_ENVS:
            value = os.environ.get(variable, "")
            if value.isdigit():
                world = int(value)
                break
        return max(self.provider.device_count(), world, 1)

    def supports(self, dtype: HcclDataType, *, reduction: bool) -> bool:
        """Every HcclDataType moves; reductions need a native ncclDataType_t."""
        if dtype not in ELEMENT_BYTES:
            return False
        return not reduction or nccl_type(dtype, self.nccl_version) is not None

    # ------------------------------------------------------------------ errors and polling
    def _fail(self, c: NcclCommunicator | None, exc: NcclCallError) -> HcclError:
        if c is not None:
            c.failure = str(exc)
        return HcclError(hccl_result(exc.code), f"{self.name}: {exc}")

    def _settle(self, comm: int, code: int, deadline: float, what: str, budget: str) -> None:
        """Poll a non-blocking communicator until ``code``'s call has finished; abort past ``deadline``."""
        while code == NCCL_IN_PROGRESS:
            if time.monotonic() > deadline:
                self._abort(comm)
                raise HcclError(HcclResult.HCCL_E_TIMEOUT, f"{self.name}: {what} did not finish within {budget}")
            time.sleep(POLL_S)
            code = self.lib.async_error(comm)
        if code != NCCL_SUCCESS:
            raise NcclCallError(what, code)

    def _abort(self, comm: int) -> None:
        try:
            self.lib.abort(comm)
        except NcclCallError:
            pass

    def _live(self, comm: EngineCommunicator) -> NcclCommunicator:
        if not isinstance(comm, NcclCommunicator) or comm.destroyed:
            raise _para(f"{comm!r} is not a live communicator of the {self.name} engine")
        if comm.failure:
            raise HcclError(
                HcclResult.HCCL_E_IN_STATUS, f"the communicator failed earlier and was aborted: {comm.failure}"
            )
        return comm

    def _enqueue(self, comm: EngineCommunicator, what: str, calls: Callable[[NcclCommunicator], int]) -> None:
        """Run ``calls`` (which enqueue NCCL work) and wait until NCCL has taken it, within HCCL_EXEC_TIMEOUT."""
        c = self._live(comm)
        self.provider.set_device(c.device)
        deadline = time.monotonic() + c.timeouts.exec_s
        try:
            code = calls(c)
            self._settle(c.comm, code, deadline, what, f"HCCL_EXEC_TIMEOUT={c.timeouts.exec_s:g}s")
        except NcclCallError as exc:
            raise self._fail(c, exc) from None
        except HcclError as exc:
            c.failure = exc.message
            raise

    def _group(self, c: NcclCommunicator, body: Callable[[], None]) -> int:
        self.lib.group_start()
        try:
            body()
        finally:
            code = self.lib.group_end()
        return code

    # ------------------------------------------------------------------ communicators
    def create_root_info(self) -> bytes:
        """ncclGetUniqueId inside the HCCL root info."""
        try:
            unique_id = self.lib.unique_id()
        except NcclCallError as exc:
            raise self._fail(None, exc) from None
        return pack_nccl_root_info(self.name, os.urandom(16), unique_id, self.nccl_version, os.getpid())

    def _init(
        self, n_ranks: int, unique_id: bytes, name: str, rank: int, device: int, timeouts: Timeouts
    ) -> NcclCommunicator:
        self.provider.set_device(device)
        deadline = time.monotonic() + timeouts.connect_s
        try:
            comm, code = self.lib.comm_init(n_ranks, unique_id, rank, blocking=False)
            if comm == 0 and code == NCCL_SUCCESS:
                raise NcclCallError("ncclCommInitRankConfig", 3, "returned a null communicator")
            self._settle(
                comm, code, deadline, "ncclCommInitRankConfig", f"HCCL_CONNECT_TIMEOUT={timeouts.connect_s:g}s"
            )
        except NcclCallError as exc:
            raise self._fail(None, exc) from None
        scratch = self.provider.malloc(4)
        self.provider.memset(scratch, 0, 4, None)
        return NcclCommunicator(comm, name, rank, n_ranks, device, timeouts, scratch)

    def init_root_info(
        self, n_ranks: int, root_info: RootInfo, rank: int, device: int, timeouts: Timeouts
    ) -> EngineCommunicator:
        """ncclCommInitRankConfig (non-blocking) with the root info's ncclUniqueId."""
        if root_info.engine != self.name:
            raise _para(f"root info was made by the {root_info.engine!r} engine, not {self.name!r}")
        unique_id, version, _pid = unpack_nccl_payload(root_info.payload)
        if version // 100 != self.nccl_version // 100:
            raise _para(f"root info comes from {self.name} {version}, this process has {self.nccl_version}")
        return self._init(n_ranks, unique_id, root_info.comm_name, rank, device, timeouts)

    def init_rank_table(self, table: RankTable, rank: int, device: int, timeouts: Timeouts) -> EngineCommunicator:
        """A rank table names no place where an ncclUniqueId could be exchanged: one rank works, more are refused."""
        if table.size != 1:
            raise HcclError(
                HcclResult.HCCL_E_NOT_SUPPORT,
                f"the {self.name} engine forms multi-rank communicators from HcclGetRootInfo only "
                "(a rank table carries no ncclUniqueId)",
            )
        with self._lock:
            self._table_uses[table.digest] = self._table_uses.get(table.digest, 0) + 1
        try:
            unique_id = self.lib.unique_id()
        except NcclCallError as exc:
            raise self._fail(None, exc) from None
        return self._init(1, unique_id, WORLD_GROUP_NAME, rank, device, timeouts)

    def destroy(self, comm: EngineCommunicator) -> None:
        """ncclCommDestroy (ncclCommAbort for one that failed); frees the barrier's scratch word."""
        assert isinstance(comm, NcclCommunicator)
        if comm.destroyed:
            return
        comm.destroyed = True
        self.provider.set_device(comm.device)
        try:
            if comm.failure:
                self._abort(comm.comm)
            else:
                self.lib.destroy(comm.comm)
        except NcclCallError as exc:
            raise self._fail(None, exc) from None
        finally:
            self.provider.free(comm.scratch)

    # ------------------------------------------------------------------ collectives
    def _reduce_type(self, dtype: HcclDataType) -> int:
        native = nccl_type(dtype, self.nccl_version)
        if native is None:
            raise HcclError(HcclResult.HCCL_E_NOT_SUPPORT, f"the {self.name} engine cannot reduce {dtype.name}")
        return native

    def all_reduce(
        self,
        comm: EngineCommunicator,
        send: int,
        recv: int,
        count: int,
        dtype: HcclDataType,
        op: HcclReduceOp,
        stream: object,
    ) -> None:
        """ncclAllReduce."""
        t, o, s = self._reduce_type(dtype), REDUCE_OPS[op], handle(stream)
        self._enqueue(comm, "ncclAllReduce", lambda c: self.lib.all_reduce(send, recv, count, t, o, c.comm, s))

    def all_gather(
        self, comm: EngineCommunicator, send: int, recv: int, send_count: int, dtype: HcclDataType, stream: object
    ) -> None:
        """ncclAllGather."""
        t, n = wire_type(dtype, send_count, self.nccl_version)
        s = handle(stream)
        self._enqueue(comm, "ncclAllGather", lambda c: self.lib.all_gather(send, recv, n, t, c.comm, s))

    def broadcast(
        self, comm: EngineCommunicator, buf: int, count: int, dtype: HcclDataType, root: int, stream: object
    ) -> None:
        """ncclBroadcast in place."""
        t, n = wire_type(dtype, count, self.nccl_version)
        s = handle(stream)
        self._enqueue(comm, "ncclBroadcast", lambda c: self.lib.broadcast(buf, buf, n, t, root, c.comm, s))

    def reduce_scatter(
        self,
        comm: EngineCommunicator,
        send: int,
        recv: int,
        recv_count: int,
        dtype: HcclDataType,
        op: HcclReduceOp,
        stream: object,
    ) -> None:
        """ncclReduceScatter."""
        t, o, s = self._reduce_type(dtype), REDUCE_OPS[op], handle(stream)
        self._enqueue(
            comm, "ncclReduceScatter", lambda c: self.lib.reduce_scatter(send, recv, recv_count, t, o, c.comm, s)
        )

    def all_to_all_v(
        self,
        comm: EngineCommunicator,
        send: int,
        send_counts: Sequence[int],
        send_displs: Sequence[int],
        recv: int,
        recv_counts: Sequence[int],
        recv_displs: Sequence[int],
        dtype: HcclDataType,
        stream: object,
    ) -> None:
        """One group of ncclSend/ncclRecv per peer (this rank included)."""
        size = ELEMENT_BYTES[dtype]
        s = handle(stream)
        me = comm.rank
        if send_counts[me] != recv_counts[me]:
            raise _para(f"this rank sends itself {send_counts[me]} elements but expects {recv_counts[me]}")

        def calls(c: NcclCommunicator) -> int:
            def body() -> None:
                for p in range(c.size):
                    t, n = wire_type(dtype, send_counts[p], self.nccl_version)
                    if n:
                        self.lib.send(send + send_displs[p] * size, n, t, p, c.comm, s)
                    t, n = wire_type(dtype, recv_counts[p], self.nccl_version)
                    if n:
                        self.lib.recv(recv + recv_displs[p] * size, n, t, p, c.comm, s)

            return self._group(c, body)

        self._enqueue(comm, "all-to-all (grouped ncclSend/ncclRecv)", calls)

    def barrier(self, comm: EngineCommunicator, stream: object) -> None:
        """A one-element ncclAllReduce on a scratch word, then the stream is waited for (HCCL_EXEC_TIMEOUT).

        On a capturing stream the all-reduce alone is captured (CANN's HcclBarrier is stream-ordered: the work after
        it on the stream runs once every rank reached it); each replay's barrier is then watched like any other
        enqueued collective, i.e. not by a host wait."""
        s = handle(stream)
        self._enqueue(
            comm, "barrier (ncclAllReduce)", lambda c: self.lib.all_reduce(c.scratch, c.scratch, 1, 2, 0, c.comm, s)
        )
        if self.capturing(s):
            return
        c = self._live(comm)
        deadline = time.monotonic() + c.timeouts.exec_s
        while not self.provider.stream_query(s):
            try:
                state = self.lib.async_error(c.comm)
            except NcclCallError as exc:
                raise self._fail(c, exc) from None
            if state not in (NCCL_SUCCESS, NCCL_IN_PROGRESS):
                raise self._fail(c, NcclCallError("barrier", state))
            if time.monotonic() > deadline:
                self._abort(c.comm)
                c.failure = "barrier timed out"
                raise HcclError(
                    HcclResult.HCCL_E_TIMEOUT,
                    f"{self.name}: barrier did not complete within HCCL_EXEC_TIMEOUT={c.timeouts.exec_s:g}s",
                )
            time.sleep(POLL_S)

    # ------------------------------------------------------------------ point to point
    def batch_send_recv(self, comm: EngineCommunicator, items: Sequence[SendRecvItem], stream: object) -> None:
        """Every item inside one ncclGroupStart/ncclGroupEnd."""
        if not items:
            self._live(comm)
            return
        s = handle(stream)

        def calls(c: NcclCommunicator) -> int:
            def body() -> None:
                for item in items:
                    t, n = wire_type(item.dtype, item.count, self.nccl_version)
                    if item.kind is HcclSendRecvType.HCCL_SEND:
                        self.lib.send(item.buf, n, t, item.peer, c.comm, s)
                    else:
                        self.lib.recv(item.buf, n, t, item.peer, c.comm, s)

            return self._group(c, body)

        self._enqueue(comm, "batch send/recv (grouped ncclSend/ncclRecv)", calls)


def open_engine(provider: RuntimeProvider) -> tuple[NcclEngine | None, str]:
    """(engine, "") over the provider's collective library, or (None, why there is none)."""
    library, why = provider.collective_library()
    if library is None:
        return None, why
    try:
        return NcclEngine(provider, library), ""
    except NcclCallError as exc:
        return None, str(exc)


__all__ = [
    "FP8_MIN_VERSION",
    "LAUNCHER_SIZE_ENVS",
    "NATIVE",
    "REDUCE_OPS",
    "RESULT_TO_HCCL",
    "NcclCommunicator",
    "NcclEngine",
    "NcclType",
    "hccl_result",
    "nccl_type",
    "open_engine",
    "pack_nccl_root_info",
    "unpack_nccl_payload",
    "wire_type",
]

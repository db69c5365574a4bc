"""The HCCL contract: its enums and constants, and the collective engine a backend provides.

HCCL numbers its data types differently from aclDataType (FP16 is 3 here, 1 there), so the maps
:data:`ACL_TO_HCCL` / :data:`HCCL_TO_ACL` translate. :class:`CollectiveEngine` is the seam under
``from acl_core import hccl``: the front end checks every argument once (null pointers, device
memory, counts, enum values, communicator liveness) and hands an engine only valid calls on device
addresses and a driver stream. The reference backend's engine runs over MPI; a GPU backend plugs in
NCCL/RCCL the same way, through :attr:`acl_core.backend.Backend.collectives`.

The root info blob (:data:`HCCL_ROOT_INFO_BYTES` = 4108 bytes) starts with a header every engine
shares (see :func:`pack_root_info`); the rest belongs to the engine that made it.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

import ml_dtypes
import numpy as np

from acl_core.dtypes import DataType
from acl_core.errors import HcclError, HcclResult

HCCL_ROOT_INFO_BYTES = 4108
"""sizeof(HcclRootInfo): the blob HcclGetRootInfo fills and every rank passes to HcclCommInitRootInfo."""
COMM_NAME_MAX_LENGTH = 128
"""Longest communicator name HcclGetCommName writes, terminating NUL included."""
HCCL_COMM_DEFAULT_BUFFSIZE = 200
"""Default HCCL_BUFFSIZE in MB (recorded for completeness; the reference does not stage through a buffer)."""
RANK_TABLE_PATH_MAX = 4096
"""Longest rank table path HcclCommInitClusterInfo accepts."""
WORLD_GROUP_NAME = "hccl_world_group"
"""The name HCCL gives the communicator made from a rank table."""
SELF_GROUP_NAME = "acl_core_self"
"""An acl-core extension: the group name of a one-rank communicator on the calling process.

CANN has no such name. aclnn MC2 operators given it run as in a world of one, which lets their
conformance cases run in a single process; any real communicator's name works as on CANN.
"""

CONNECT_TIMEOUT_ENV = "HCCL_CONNECT_TIMEOUT"
EXEC_TIMEOUT_ENV = "HCCL_EXEC_TIMEOUT"
DEFAULT_CONNECT_TIMEOUT_S = 120.0
"""CANN's default HCCL_CONNECT_TIMEOUT (seconds)."""
DEFAULT_EXEC_TIMEOUT_S = 1836.0
"""CANN's default HCCL_EXEC_TIMEOUT (seconds)."""


class HcclDataType(IntEnum):
    """HcclDataType (hccl_types.h): not the aclDataType numbers."""

    HCCL_DATA_TYPE_INT8 = 0
    HCCL_DATA_TYPE_INT16 = 1
    HCCL_DATA_TYPE_INT32 = 2
    HCCL_DATA_TYPE_FP16 = 3
    HCCL_DATA_TYPE_FP32 = 4
    HCCL_DATA_TYPE_INT64 = 5
    HCCL_DATA_TYPE_UINT64 = 6
    HCCL_DATA_TYPE_UINT8 = 7
    HCCL_DATA_TYPE_UINT16 = 8
    HCCL_DATA_TYPE_UINT32 = 9
    HCCL_DATA_TYPE_FP64 = 10
    HCCL_DATA_TYPE_BFP16 = 11
    HCCL_DATA_TYPE_INT128 = 12
    HCCL_DATA_TYPE_HIF8 = 14
    HCCL_DATA_TYPE_FP8E4M3 = 15
    HCCL_DATA_TYPE_FP8E5M2 = 16
    HCCL_DATA_TYPE_FP8E8M0 = 17
    HCCL_DATA_TYPE_RESERVED = 255


class HcclReduceOp(IntEnum):
    """HcclReduceOp (hccl_types.h); there is no average."""

    HCCL_REDUCE_SUM = 0
    HCCL_REDUCE_PROD = 1
    HCCL_REDUCE_MAX = 2
    HCCL_REDUCE_MIN = 3
    HCCL_REDUCE_RESERVED = 255


class HcclSendRecvType(IntEnum):
    """HcclSendRecvType: the direction of one HcclSendRecvItem."""

    HCCL_SEND = 0
    HCCL_RECV = 1
    HCCL_SEND_RECV_RESERVED = 2


D = HcclDataType
ELEMENT_BYTES: dict[HcclDataType, int] = {
    D.HCCL_DATA_TYPE_INT8: 1,
    D.HCCL_DATA_TYPE_INT16: 2,
    D.HCCL_DATA_TYPE_INT32: 4,
    D.HCCL_DATA_TYPE_FP16: 2,
    D.HCCL_DATA_TYPE_FP32: 4,
    D.HCCL_DATA_TYPE_INT64: 8,
    D.HCCL_DATA_TYPE_UINT64: 8,
    D.HCCL_DATA_TYPE_UINT8: 1,
    D.HCCL_DATA_TYPE_UINT16: 2,
    D.HCCL_DATA_TYPE_UINT32: 4,
    D.HCCL_DATA_TYPE_FP64: 8,
    D.HCCL_DATA_TYPE_BFP16: 2,
    D.HCCL_DATA_TYPE_INT128: 16,
    D.HCCL_DATA_TYPE_HIF8: 1,
    D.HCCL_DATA_TYPE_FP8E4M3: 1,
    D.HCCL_DATA_TYPE_FP8E5M2: 1,
    D.HCCL_DATA_TYPE_FP8E8M0: 1,
}
"""Bytes per element of every usable HcclDataType (also the address alignment HCCL requires)."""

NUMPY_DTYPES: dict[HcclDataType, np.dtype | None] = {
    D.HCCL_DATA_TYPE_INT8: np.dtype(np.int8),
    D.HCCL_DATA_TYPE_INT16: np.dtype(np.int16),
    D.HCCL_DATA_TYPE_INT32: np.dtype(np.int32),
    D.HCCL_DATA_TYPE_FP16: np.dtype(np.float16),
    D.HCCL_DATA_TYPE_FP32: np.dtype(np.float32),
    D.HCCL_DATA_TYPE_INT64: np.dtype(np.int64),
    D.HCCL_DATA_TYPE_UINT64: np.dtype(np.uint64),
    D.HCCL_DATA_TYPE_UINT8: np.dtype(np.uint8),
    D.HCCL_DATA_TYPE_UINT16: np.dtype(np.uint16),
    D.HCCL_DATA_TYPE_UINT32: np.dtype(np.uint32),
    D.HCCL_DATA_TYPE_FP64: np.dtype(np.float64),
    D.HCCL_DATA_TYPE_BFP16: np.dtype(ml_dtypes.bfloat16),
    D.HCCL_DATA_TYPE_INT128: None,
    D.HCCL_DATA_TYPE_HIF8: None,
    D.HCCL_DATA_TYPE_FP8E4M3: np.dtype(ml_dtypes.float8_e4m3fn),
    D.HCCL_DATA_TYPE_FP8E5M2: np.dtype(ml_dtypes.float8_e5m2),
    D.HCCL_DATA_TYPE_FP8E8M0: np.dtype(ml_dtypes.float8_e8m0fnu),
}
"""The NumPy / ml_dtypes type of each HcclDataType, or None where NumPy has no arithmetic for it."""

HCCL_TO_ACL: dict[HcclDataType, DataType] = {
    D.HCCL_DATA_TYPE_INT8: DataType.ACL_INT8,
    D.HCCL_DATA_TYPE_INT16: DataType.ACL_INT16,
    D.HCCL_DATA_TYPE_INT32: DataType.ACL_INT32,
    D.HCCL_DATA_TYPE_FP16: DataType.ACL_FLOAT16,
    D.HCCL_DATA_TYPE_FP32: DataType.ACL_FLOAT,
    D.HCCL_DATA_TYPE_INT64: DataType.ACL_INT64,
    D.HCCL_DATA_TYPE_UINT64: DataType.ACL_UINT64,
    D.HCCL_DATA_TYPE_UINT8: DataType.ACL_UINT8,
    D.HCCL_DATA_TYPE_UINT16: DataType.ACL_UINT16,
    D.HCCL_DATA_TYPE_UINT32: DataType.ACL_UINT32,
    D.HCCL_DATA_TYPE_FP64: DataType.ACL_DOUBLE,
    D.HCCL_DATA_TYPE_BFP16: DataType.ACL_BF16,
    D.HCCL_DATA_TYPE_HIF8: DataType.ACL_HIFLOAT8,
    D.HCCL_DATA_TYPE_FP8E4M3: DataType.ACL_FLOAT8_E4M3FN,
    D.HCCL_DATA_TYPE_FP8E5M2: DataType.ACL_FLOAT8_E5M2,
    D.HCCL_DATA_TYPE_FP8E8M0: DataType.ACL_FLOAT8_E8M0,
}
"""HcclDataType to aclDataType (INT128 has no aclDataType)."""

ACL_TO_HCCL: dict[DataType, HcclDataType] = {acl: hccl for hccl, acl in HCCL_TO_ACL.items()}
"""aclDataType to HcclDataType, for the aclDataTypes HCCL can carry."""

CANN_REDUCE_DTYPES: frozenset[HcclDataType] = frozenset(
    {
        D.HCCL_DATA_TYPE_INT8,
        D.HCCL_DATA_TYPE_INT16,
        D.HCCL_DATA_TYPE_INT32,
        D.HCCL_DATA_TYPE_INT64,
        D.HCCL_DATA_TYPE_FP16,
        D.HCCL_DATA_TYPE_FP32,
        D.HCCL_DATA_TYPE_BFP16,
    }
)
"""The dtypes CANN documents for AllReduce/ReduceScatter on Atlas A2/A3 (engines may reduce more)."""

del D


def hccl_dtype(value: object) -> HcclDataType:
    """``value`` as a usable HcclDataType; HcclError(HCCL_E_PARA) for RESERVED, 13 or anything else."""
    try:
        dtype = HcclDataType(int(value))  # type: ignore[call-overload]
    except (TypeError, ValueError):
        raise HcclError(HcclResult.HCCL_E_PARA, f"{value!r} is not an HcclDataType") from None
    if dtype not in ELEMENT_BYTES:
        raise HcclError(HcclResult.HCCL_E_PARA, f"{dtype.name} is not a usable data type")
    return dtype


def reduce_op(value: object) -> HcclReduceOp:
    """``value`` as SUM, PROD, MAX or MIN; HcclError(HCCL_E_PARA) otherwise."""
    try:
        op = HcclReduceOp(int(value))  # type: ignore[call-overload]
    except (TypeError, ValueError):
        raise HcclError(HcclResult.HCCL_E_PARA, f"{value!r} is not an HcclReduceOp") from None
    if op is HcclReduceOp.HCCL_REDUCE_RESERVED:
        raise HcclError(HcclResult.HCCL_E_PARA, "HCCL_REDUCE_RESERVED is not a reduction")
    return op


# ----------------------------------------------------------------------------- timeouts
def _seconds(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        return default
    return value if value > 0 else default


@dataclass(frozen=True)
class Timeouts:
    """How long an engine waits for peers: ``connect_s`` while forming a communicator, ``exec_s`` per operation."""

    connect_s: float
    exec_s: float

    @classmethod
    def from_env(cls) -> Timeouts:
        """HCCL_CONNECT_TIMEOUT and HCCL_EXEC_TIMEOUT in seconds (fractions allowed; unset or invalid: CANN's defaults).

        CANN clamps HCCL_CONNECT_TIMEOUT to [120, 7200]; acl-core takes any positive value so tests can be short.
        """
        return cls(
            _seconds(CONNECT_TIMEOUT_ENV, DEFAULT_CONNECT_TIMEOUT_S), _seconds(EXEC_TIMEOUT_ENV, DEFAULT_EXEC_TIMEOUT_S)
        )


# ----------------------------------------------------------------------------- root info
ROOT_INFO_MAGIC = b"ACLHCCL\0"
ROOT_INFO_VERSION = 1
_ROOT_HEADER = struct.Struct("<8sI16s16s")
ROOT_INFO_HEADER_BYTES = _ROOT_HEADER.size
"""Bytes of the shared header; the engine's payload follows, zero-padded to 4108 bytes."""


@dataclass(frozen=True)
class RootInfo:
    """The decoded root info: which engine made it, the communicator's unique id, and the engine's payload."""

    engine: str
    uid: bytes
    payload: bytes

    @property
    def comm_name(self) -> str:
        """The name every rank's communicator gets (the same on all of them)."""
        return f"hccl_comm_{self.uid.hex()}"


def pack_root_info(engine: str, uid: bytes, payload: bytes) -> bytes:
    """The 4108-byte blob: magic, layout version, engine name, 16-byte unique id, then the engine's payload.

    Layout (little-endian): bytes 0-7 ``b"ACLHCCL\\0"``; 8-11 version (1); 12-27 engine name, ASCII,
    NUL-padded; 28-43 unique id; 44-4107 engine payload, NUL-padded.
    """
    name = engine.encode("ascii")
    if len(name) > 16 or len(uid) != 16:
        raise ValueError("engine names are at most 16 ASCII bytes and uids exactly 16 bytes")
    head = _ROOT_HEADER.pack(ROOT_INFO_MAGIC, ROOT_INFO_VERSION, name, uid)
    if len(head) + len(payload) > HCCL_ROOT_INFO_BYTES:
        raise ValueError(f"engine payload of {len(payload)} bytes does not fit the root info")
    return (head + payload).ljust(HCCL_ROOT_INFO_BYTES, b"\0")


def unpack_root_info(blob: object) -> RootInfo:
    """Decode a root info blob; HcclError(HCCL_E_PARA) when it is not 4108 bytes made by acl-core."""
    if isinstance(blob, (bytearray, memoryview)):
        blob = bytes(blob)
    if not isinstance(blob, bytes):
        raise HcclError(
            HcclResult.HCCL_E_PARA, f"root info must be {HCCL_ROOT_INFO_BYTES} bytes, not {type(blob).__name__}"
        )
    if len(blob) != HCCL_ROOT_INFO_BYTES:
        raise HcclError(HcclResult.HCCL_E_PARA, f"root info must be {HCCL_ROOT_INFO_BYTES} bytes, not {len(blob)}")
    magic, version, name, uid = _ROOT_HEADER.unpack_from(blob)
    if magic != ROOT_INFO_MAGIC or version != ROOT_INFO_VERSION:
        raise HcclError(HcclResult.HCCL_E_PARA, "root info was not made by HcclGetRootInfo of this acl-core")
    return RootInfo(name.rstrip(b"\0").decode("ascii", "replace"), uid, blob[ROOT_INFO_HEADER_BYTES:])


# ----------------------------------------------------------------------------- rank table
@dataclass(frozen=True)
class RankEntry:
    """One device of a rank table: its global rank and where it lives."""

    rank_id: int
    server_id: str
    device_id: int
    device_ip: str


@dataclass(frozen=True)
class RankTable:
    """A parsed rank table (CANN's JSON, version 1.0): ranks ordered by rank_id, and a digest of the file."""

    ranks: tuple[RankEntry, ...]
    digest: bytes

    @property
    def size(self) -> int:
        """Number of ranks."""
        return len(self.ranks)


def _para(message: str) -> HcclError:
    return HcclError(HcclResult.HCCL_E_PARA, message)


def _string(obj: dict[str, object], key: str, where: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise _para(f"rank table: {where} needs a string {key!r} (every value of a rank table is a string)")
    return value


def _int_string(obj: dict[str, object], key: str, where: str) -> int:
    text = _string(obj, key, where)
    if not text.isdigit():
        raise _para(f"rank table: {where} {key}={text!r} is not a non-negative integer")
    return int(text)


def parse_rank_table(path: str) -> RankTable:
    """Read a version 1.0 rank table; HCCL_E_OPEN_FILE_FAILURE when unreadable, HCCL_E_PARA when malformed.

    Checks: ``status`` is "completed", ``version`` is "1.0", ``server_count`` equals the number of
    servers, every value is a string, rank_ids are unique and run 0..N-1.
    """
    if not isinstance(path, str) or not path or len(path) > RANK_TABLE_PATH_MAX:
        raise _para(f"clusterInfo must be a path of 1 to {RANK_TABLE_PATH_MAX} characters")
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise HcclError(HcclResult.HCCL_E_OPEN_FILE_FAILURE, f"cannot read rank table {path}: {exc}") from None
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _para(f"rank table {path} is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise _para("rank table: the top level must be an object")
    if doc.get("status") != "completed":
        raise _para(f"rank table: status is {doc.get('status')!r}, not 'completed'")
    if doc.get("version") != "1.0":
        raise _para(f"rank table: version {doc.get('version')!r} is not supported (only '1.0')")
    servers = doc.get("server_list")
    if not isinstance(servers, list) or not servers:
        raise _para("rank table: server_list must be a non-empty list")
    if _int_string(doc, "server_count", "the table") != len(servers):
        raise _para(f"rank table: server_count is {doc.get('server_count')!r} but server_list has {len(servers)}")
    entries: list[RankEntry] = []
    for s, server in enumerate(servers):
        if not isinstance(server, dict):
            raise _para(f"rank table: server_list[{s}] must be an object")
        server_id = _string(server, "server_id", f"server_list[{s}]")
        devices = server.get("device")
        if not isinstance(devices, list) or not devices:
            raise _para(f"rank table: server {server_id} has no device list")
        for d, device in enumerate(devices):
            where = f"server {server_id} device[{d}]"
            if not isinstance(device, dict):
                raise _para(f"rank table: {where} must be an object")
            entries.append(
                RankEntry(
                    rank_id=_int_string(device, "rank_id", where),
                    server_id=server_id,
                    device_id=_int_string(device, "device_id", where),
                    device_ip=_string(device, "device_ip", where) if "device_ip" in device else "",
                )
            )
    entries.sort(key=lambda e: e.rank_id)
    if [e.rank_id for e in entries] != list(range(len(entries))):
        raise _para(f"rank table: rank_ids must be unique and run 0..{len(entries) - 1}")
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    return RankTable(tuple(entries), hashlib.sha256(canonical).digest()[:16])


# ----------------------------------------------------------------------------- the engine seam
@dataclass(frozen=True)
class SendRecvItem:
    """One validated entry of HcclBatchSendRecv: send or receive ``count`` elements at ``buf`` with ``peer``."""

    kind: HcclSendRecvType
    buf: int
    count: int
    dtype: HcclDataType
    peer: int


class EngineCommunicator(ABC):
    """One rank's membership of a communicator, as an engine keeps it."""

    @property
    @abstractmethod
    def rank(self) -> int:
        """This process's rank in the communicator."""

    @property
    @abstractmethod
    def size(self) -> int:
        """Number of ranks."""

    @property
    @abstractmethod
    def name(self) -> str:
        """The communicator's name (identical on every rank; what aclnn MC2 operators take as ``group``)."""

    @property
    @abstractmethod
    def device(self) -> int:
        """The device the communicator was made on."""


class CollectiveEngine(ABC):
    """What a backend provides under ``from acl_core import hccl``.

    Every method may assume the front end already checked its arguments: buffers are live device
    memory of this backend large enough for the counts, counts are non-negative, enums are valid,
    ranks are in range, the communicator is this engine's and alive. Methods raise
    :class:`~acl_core.errors.HcclError` with an HcclResult code: HCCL_E_TIMEOUT when peers do not
    answer within :class:`Timeouts` (never blocking longer), HCCL_E_PARA when ranks disagree about
    counts, dtypes or the operation, HCCL_E_NOT_SUPPORT for a dtype the engine cannot move or reduce.
    ``stream`` is the backend driver's stream object: work is enqueued on it (an eager backend runs it
    at once).
    """

    name: str
    """Short engine name ("mpi", "nccl", "rccl"), as Capabilities.collective_engine reports it."""

    @abstractmethod
    def max_ranks(self) -> int:
        """The largest communicator this process can join (measured, e.g. the MPI world size)."""

    @abstractmethod
    def supports(self, dtype: HcclDataType, *, reduction: bool) -> bool:
        """True when the engine can move ``dtype`` (and, if ``reduction``, reduce it)."""

    @abstractmethod
    def create_root_info(self) -> bytes:
        """A fresh 4108-byte root info naming this process as the place ranks meet (see :func:`pack_root_info`)."""

    @abstractmethod
    def init_root_info(
        self, n_ranks: int, root_info: RootInfo, rank: int, device: int, timeouts: Timeouts
    ) -> EngineCommunicator:
        """Join the communicator described by ``root_info`` as ``rank`` of ``n_ranks``."""

    @abstractmethod
    def init_rank_table(self, table: RankTable, rank: int, device: int, timeouts: Timeouts) -> EngineCommunicator:
        """Join the communicator a rank table describes as ``rank``."""

    @abstractmethod
    def destroy(self, comm: EngineCommunicator) -> None:
        """Release this rank's part of ``comm`` (local; never waits for peers)."""

    @abstractmethod
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
        """recv = op over ranks of send (``count`` elements each)."""

    @abstractmethod
    def all_gather(
        self, comm: EngineCommunicator, send: int, recv: int, send_count: int, dtype: HcclDataType, stream: object
    ) -> None:
        """recv = every rank's send, concatenated in rank order."""

    @abstractmethod
    def broadcast(
        self, comm: EngineCommunicator, buf: int, count: int, dtype: HcclDataType, root: int, stream: object
    ) -> None:
        """buf = root's buf on every rank."""

    @abstractmethod
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
        """recv on rank r = op over ranks of block r of send (blocks of ``recv_count`` elements)."""

    @abstractmethod
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
        """Rank r sends send[send_displs[p]:+send_counts[p]] to each p and receives p's block at recv_displs[p]."""

    def all_to_all(
        self, comm: EngineCommunicator, send: int, recv: int, count: int, dtype: HcclDataType, stream: object
    ) -> None:
        """All-to-all with ``count`` elements per peer (the default rides :meth:`all_to_all_v`)."""
        n = comm.size
        displs = [p * count for p in range(n)]
        self.all_to_all_v(comm, send, [count] * n, displs, recv, [count] * n, displs, dtype, stream)

    def send(
        self, comm: EngineCommunicator, buf: int, count: int, dtype: HcclDataType, dest: int, stream: object
    ) -> None:
        """Send ``count`` elements to rank ``dest``: a batch of one send."""
        self.batch_send_recv(comm, [SendRecvItem(HcclSendRecvType.HCCL_SEND, buf, count, dtype, dest)], stream)

    def recv(
        self, comm: EngineCommunicator, buf: int, count: int, dtype: HcclDataType, src: int, stream: object
    ) -> None:
        """Receive ``count`` elements from rank ``src``: a batch of one receive."""
        self.batch_send_recv(comm, [SendRecvItem(HcclSendRecvType.HCCL_RECV, buf, count, dtype, src)], stream)

    @abstractmethod
    def batch_send_recv(self, comm: EngineCommunicator, items: Sequence[SendRecvItem], stream: object) -> None:
        """Post every send and receive of ``items`` together (no ordering deadlock between them)."""

    @abstractmethod
    def barrier(self, comm: EngineCommunicator, stream: object) -> None:
        """Return once every rank has entered the barrier."""


__all__ = [
    "ACL_TO_HCCL",
    "CANN_REDUCE_DTYPES",
    "COMM_NAME_MAX_LENGTH",
    "ELEMENT_BYTES",
    "HCCL_ROOT_INFO_BYTES",
    "HCCL_TO_ACL",
    "NUMPY_DTYPES",
    "SELF_GROUP_NAME",
    "WORLD_GROUP_NAME",
    "CollectiveEngine",
    "EngineCommunicator",
    "HcclDataType",
    "HcclReduceOp",
    "HcclResult",
    "HcclSendRecvType",
    "RankEntry",
    "RankTable",
    "RootInfo",
    "SendRecvItem",
    "Timeouts",
    "hccl_dtype",
    "pack_root_info",
    "parse_rank_table",
    "reduce_op",
    "unpack_root_info",
]

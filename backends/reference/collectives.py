"""The reference collective engine: HCCL over MPI (mpi4py), on reference device memory, eagerly.

Algorithms are chosen to be obviously right, not fast. Every collective is one all-pairs exchange:
each rank sends every other rank one message (header + the data that peer needs) and waits for one
from each (:mod:`acl_reference.mpi_transport`, never blocking longer than HCCL_EXEC_TIMEOUT). The
header carries what the sender believes about the call (operation, dtype, count, reduce op, root),
so a rank that disagrees is reported as HCCL_E_PARA on every rank that hears from it.

Reductions are deterministic and identical on every rank: each rank holds every contribution and
folds them in rank order 0, 1, ..., N-1, floats accumulated in float64 (integers in 64-bit with
wrap-around), then cast once to the data type. HIF8, FP8E8M0 and INT128 can be moved but not
reduced (HCCL_E_NOT_SUPPORT); FP8E4M3/FP8E5M2 reductions are emulated through float64.

A communicator of one rank never touches MPI, so single-process programs (and aclnn MC2 operators
on :data:`~acl_core.spec.collective.SELF_GROUP_NAME`) work without mpi4py. Streams are eager: an
operation has finished when its call returns.

Root info payload (after the shared header of :func:`acl_core.spec.collective.pack_root_info`),
little-endian: u32 world rank of the process that made it (where ranks meet), u32 MPI world size,
u32 its process id, 64 bytes of its host name (UTF-8, NUL-padded). Forming a communicator of N > 1
ranks: every rank but the maker's sends JOIN (its rank and N) to the maker's world rank; the maker
collects N-1 JOINs, checks the ranks are distinct and agree on N, and answers WELCOME with the
rank → world-rank table (or an error code); then every pair of ranks exchanges HELLO, which also
opens every MPI connection before any data moves. All of it within HCCL_CONNECT_TIMEOUT. A rank
table (HcclCommInitClusterInfo) maps rank_id i to MPI world rank i and skips JOIN/WELCOME.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from acl_core.errors import HcclError, HcclResult
from acl_core.spec.collective import (
    ELEMENT_BYTES,
    NUMPY_DTYPES,
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
from acl_reference.driver import ReferenceDriver
from acl_reference.mpi_transport import ANY, Header, Kind, Message, MpiWorld, launcher_world, mpi_world

ENGINE_NAME = "mpi"
_PAYLOAD = struct.Struct("<III64s")

NOT_REDUCIBLE = frozenset(
    {HcclDataType.HCCL_DATA_TYPE_HIF8, HcclDataType.HCCL_DATA_TYPE_FP8E8M0, HcclDataType.HCCL_DATA_TYPE_INT128}
)
"""Data types the reference moves but cannot reduce (no arithmetic for them here)."""


class Op:
    """Operation codes carried in headers, so ranks calling different collectives notice."""

    ALL_REDUCE = 1
    ALL_GATHER = 2
    BROADCAST = 3
    REDUCE_SCATTER = 4
    ALL_TO_ALL_V = 5
    BARRIER = 6


_OP_NAMES = {v: k.lower() for k, v in vars(Op).items() if not k.startswith("_")}


def _para(message: str) -> HcclError:
    return HcclError(HcclResult.HCCL_E_PARA, message)


def _timeout(message: str) -> HcclError:
    return HcclError(HcclResult.HCCL_E_TIMEOUT, message)


# ----------------------------------------------------------------------------- reductions
def reduce_in_rank_order(parts: Sequence[np.ndarray], dtype: HcclDataType, op: HcclReduceOp) -> np.ndarray:
    """Fold ``parts`` (one array per rank, rank order) with ``op``: floats in float64, integers in 64-bit, one cast."""
    np_dtype = NUMPY_DTYPES[dtype]
    if np_dtype is None or dtype in NOT_REDUCIBLE:
        raise HcclError(HcclResult.HCCL_E_NOT_SUPPORT, f"the reference cannot reduce {dtype.name}")
    if np_dtype.kind == "u":
        wide: np.dtype = np.dtype(np.uint64)
    elif np_dtype.kind == "i":
        wide = np.dtype(np.int64)
    else:
        wide = np.dtype(np.float64)
    fold: Callable[[np.ndarray, np.ndarray], np.ndarray] = {
        HcclReduceOp.HCCL_REDUCE_SUM: np.add,
        HcclReduceOp.HCCL_REDUCE_PROD: np.multiply,
        HcclReduceOp.HCCL_REDUCE_MAX: np.maximum,
        HcclReduceOp.HCCL_REDUCE_MIN: np.minimum,
    }[op]
    with np.errstate(all="ignore"):
        acc = parts[0].astype(wide)
        for part in parts[1:]:
            acc = fold(acc, part.astype(wide))
        return acc.astype(np_dtype)


def _typed(raw: bytes | bytearray | memoryview, dtype: HcclDataType) -> np.ndarray:
    np_dtype = NUMPY_DTYPES[dtype]
    if np_dtype is None:
        raise HcclError(HcclResult.HCCL_E_NOT_SUPPORT, f"the reference cannot compute with {dtype.name}")
    return np.frombuffer(raw, dtype=np_dtype)


# ----------------------------------------------------------------------------- communicators
class MpiCommunicator(EngineCommunicator):
    """One rank of a communicator of the MPI engine."""

    def __init__(
        self, uid: bytes, name: str, rank: int, world_ranks: Sequence[int], device: int, timeouts: Timeouts
    ) -> None:
        self.uid = uid
        self._name = name
        self._rank = rank
        self.world_ranks = tuple(world_ranks)
        self._device = device
        self.timeouts = timeouts
        self.seq = 0
        self.sent = [0] * len(self.world_ranks)
        self.received = [0] * len(self.world_ranks)
        self.failure: str | None = None
        self.destroyed = False

    @property
    def rank(self) -> int:
        """This process's rank."""
        return self._rank

    @property
    def size(self) -> int:
        """Number of ranks."""
        return len(self.world_ranks)

    @property
    def name(self) -> str:
        """The communicator's name."""
        return self._name

    @property
    def device(self) -> int:
        """The device it was made on."""
        return self._device

    def names(self) -> dict[int, str]:
        """World rank to "rank r" for error messages."""
        return {w: f"rank {r}" for r, w in enumerate(self.world_ranks)}

    def __repr__(self) -> str:
        return f"<MpiCommunicator {self._name} rank {self._rank}/{self.size}>"


# ----------------------------------------------------------------------------- the engine
def _stream_ordered(method: Callable[..., None]) -> Callable[..., None]:
    """A collective that, on a capturing stream, is recorded whole (read, exchange, write) as one task.

    Outside a capture it runs at the call: it reads its inputs once the stream's earlier work has
    run and enqueues its result. Captured, reading then would take the bytes of capture time, so
    the whole collective becomes a task of the capture and each replay reads its inputs afresh.
    """

    def collective(self: MpiEngine, *args: Any) -> None:
        stream = args[-1]
        if not self.driver.capturing(stream):
            method(self, *args)
            return
        self.driver.enqueue(stream, lambda: method(self, *args), f"collective {method.__name__}")

    collective.__name__ = collective.__qualname__ = method.__name__
    collective.__doc__ = method.__doc__
    return collective


class MpiEngine(CollectiveEngine):
    """HCCL on the reference backend: MPI between processes, reference device memory within one."""

    name = ENGINE_NAME

    def __init__(self, driver: ReferenceDriver) -> None:
        self.driver = driver
        self._lock = threading.RLock()
        self._table_uses: dict[bytes, int] = {}

    # ------------------------------------------------------------------ facts
    def max_ranks(self) -> int:
        """The MPI world size (from the launcher or a running MPI), or 1 outside mpiexec."""
        world = launcher_world()
        return world[1] if world else 1

    def supports(self, dtype: HcclDataType, *, reduction: bool) -> bool:
        """Every HcclDataType moves; all but HIF8, FP8E8M0 and INT128 reduce."""
        return dtype in ELEMENT_BYTES and not (reduction and dtype in NOT_REDUCIBLE)

    # ------------------------------------------------------------------ memory
    def _read(self, address: int, nbytes: int, stream: object) -> bytes:
        """Bytes of device memory once the work queued before the collective on ``stream`` has run."""
        self.driver.run_pending(stream)
        return self.driver.device_bytes(address, nbytes).tobytes()

    def _write(self, address: int, data: bytes | bytearray | memoryview | np.ndarray, stream: object) -> None:
        """Enqueue the store of a collective's result on ``stream``: it lands when the stream is synchronised."""
        raw = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data.view(np.uint8)
        if raw.size:
            target = self.driver.device_bytes(address, raw.size)
            flat = raw.reshape(-1).copy()

            def store() -> None:
                target[:] = flat

            self.driver.enqueue(stream, store, "collective result")

    # ------------------------------------------------------------------ communicators
    def create_root_info(self) -> bytes:
        """Root info naming this process (its MPI world rank) as where ranks meet."""
        world = launcher_world()
        if world is not None and world[1] > 1:
            w = mpi_world()
            world = (w.rank, w.size)
        rank, size = world or (0, 1)
        host = socket.gethostname().encode()[:64]
        payload = _PAYLOAD.pack(rank, size, os.getpid(), host)
        return pack_root_info(ENGINE_NAME, os.urandom(16), payload)

    def init_root_info(
        self, n_ranks: int, root_info: RootInfo, rank: int, device: int, timeouts: Timeouts
    ) -> EngineCommunicator:
        """Join (or, on the maker's process, gather) the communicator ``root_info`` describes."""
        if root_info.engine != ENGINE_NAME:
            raise _para(f"root info was made by the {root_info.engine!r} engine, not {ENGINE_NAME!r}")
        root_world, root_size, root_pid, root_host = _PAYLOAD.unpack_from(root_info.payload)
        if n_ranks == 1:
            return MpiCommunicator(root_info.uid, root_info.comm_name, 0, (0,), device, timeouts)
        with self._lock:
            world = mpi_world()
            with world.lock:
                self._check_fresh(world, root_info.uid)
                if root_size != world.size or root_world >= world.size:
                    raise _para(
                        f"root info comes from an MPI world of {root_size} processes, this one has {world.size}"
                    )
                if n_ranks > world.size:
                    raise _para(f"nRanks={n_ranks} exceeds the {world.size} processes mpiexec started")
                deadline = time.monotonic() + timeouts.connect_s
                if world.rank == root_world:
                    host = socket.gethostname().encode()[:64]
                    if root_pid != os.getpid() or root_host.rstrip(b"\0") != host:
                        raise _para("root info names this MPI rank as its maker, but another process made it")
                    world_ranks = self._gather_joins(world, root_info.uid, n_ranks, rank, deadline, timeouts)
                else:
                    world_ranks = self._join(world, root_info.uid, n_ranks, rank, root_world, deadline)
                comm = MpiCommunicator(root_info.uid, root_info.comm_name, rank, world_ranks, device, timeouts)
                self._hello(world, comm, deadline)
                return comm

    def init_rank_table(self, table: RankTable, rank: int, device: int, timeouts: Timeouts) -> EngineCommunicator:
        """Join the rank table's communicator: rank_id i is MPI world rank i."""
        use = self._table_uses.get(table.digest, 0)
        uid = bytes(a ^ b for a, b in zip(table.digest, use.to_bytes(16, "little")))
        if table.size == 1:
            self._table_uses[table.digest] = use + 1
            return MpiCommunicator(uid, WORLD_GROUP_NAME, 0, (0,), device, timeouts)
        with self._lock:
            world = mpi_world()
            with world.lock:
                if table.size > world.size:
                    raise _para(f"the rank table has {table.size} ranks; mpiexec started {world.size} processes")
                if rank != world.rank:
                    raise _para(
                        f"rank {rank} is MPI world rank {world.rank}: the reference maps rank_id i to world rank i"
                    )
                self._table_uses[table.digest] = use + 1
                comm = MpiCommunicator(uid, WORLD_GROUP_NAME, rank, range(table.size), device, timeouts)
                self._hello(world, comm, time.monotonic() + timeouts.connect_s)
                return comm

    def _check_fresh(self, world: MpiWorld, uid: bytes) -> None:
        if uid in world.retired:
            raise _para("this root info's communicator was already destroyed here; make a new root info")

    def _gather_joins(
        self, world: MpiWorld, uid: bytes, n_ranks: int, rank: int, deadline: float, timeouts: Timeouts
    ) -> tuple[int, ...]:
        what = "HcclCommInitRootInfo (waiting for ranks to join)"
        joins: list[Message] = []
        try:
            while len(joins) < n_ranks - 1:
                joins += world.wait([(uid, Kind.JOIN, 0, ANY)], [], deadline, what, {})
        except HcclError as exc:
            # tell whoever already joined, so they fail now rather than at their own deadline
            self._welcome(world, uid, [m.source for m in joins], int(HcclResult.HCCL_E_TIMEOUT), ())
            world.forget(uid)
            raise _timeout(
                f"{exc.message} (HCCL_CONNECT_TIMEOUT={timeouts.connect_s:g}s; "
                f"{len(joins)} of {n_ranks - 1} other ranks joined)"
            ) from None
        table: dict[int, int] = {rank: world.rank}
        problem = ""
        for m in joins:
            their_n, their_rank = m.header.count, m.header.rank
            if their_n != n_ranks:
                problem = f"world rank {m.source} joined with nRanks={their_n}, the maker's process has {n_ranks}"
            elif not 0 <= their_rank < n_ranks:
                problem = f"world rank {m.source} joined as rank {their_rank}, outside 0..{n_ranks - 1}"
            elif their_rank in table:
                problem = f"rank {their_rank} joined twice (world ranks {table[their_rank]} and {m.source})"
            else:
                table[their_rank] = m.source
        sources = [m.source for m in joins]
        if problem:
            self._welcome(world, uid, sources, int(HcclResult.HCCL_E_PARA), ())
            raise _para(problem)
        world_ranks = tuple(table[r] for r in range(n_ranks))
        self._welcome(world, uid, sources, 0, world_ranks)
        return world_ranks

    def _welcome(self, world: MpiWorld, uid: bytes, dests: Sequence[int], status: int, ranks: Sequence[int]) -> None:
        payload = np.asarray(ranks, dtype=np.int32).tobytes()
        sends = [world.post(d, Header(uid, Kind.WELCOME, aux=status, count=len(ranks)), payload) for d in dests]
        try:
            world.wait([], sends, time.monotonic() + 1.0, "HcclCommInitRootInfo (answering joins)", {})
        except HcclError:
            pass  # a joiner that cannot take its answer will time out on its own

    def _join(
        self, world: MpiWorld, uid: bytes, n_ranks: int, rank: int, root_world: int, deadline: float
    ) -> tuple[int, ...]:
        names = {root_world: f"the maker of the root info (world rank {root_world})"}
        join = world.post(root_world, Header(uid, Kind.JOIN, count=n_ranks, rank=rank))
        (answer,) = world.wait([(uid, Kind.WELCOME, 0, root_world)], [join], deadline, "HcclCommInitRootInfo", names)
        status = answer.header.aux
        if status == int(HcclResult.HCCL_E_TIMEOUT):
            raise _timeout("HcclCommInitRootInfo: not every rank joined within HCCL_CONNECT_TIMEOUT")
        if status:
            raise HcclError(status, "HcclCommInitRootInfo: the maker of the root info refused the ranks that joined")
        return tuple(int(w) for w in np.frombuffer(answer.payload, dtype=np.int32))

    def _hello(self, world: MpiWorld, comm: MpiCommunicator, deadline: float) -> None:
        me = comm.rank
        peers = [p for p in range(comm.size) if p != me]
        head = Header(comm.uid, Kind.HELLO, count=comm.size, rank=me)
        sends = [world.post(comm.world_ranks[p], head) for p in peers]
        wanted = [(comm.uid, Kind.HELLO, 0, comm.world_ranks[p]) for p in peers]
        try:
            hellos = world.wait(wanted, sends, deadline, "forming the communicator", comm.names())
        except HcclError as exc:
            world.forget(comm.uid)
            raise _timeout(f"{exc.message} (HCCL_CONNECT_TIMEOUT={comm.timeouts.connect_s:g}s)") from None
        for p, m in zip(peers, hellos):
            if m.header.count != comm.size or m.header.rank != p:
                world.forget(comm.uid)
                raise _para(f"rank {p} formed a communicator of {m.header.count} ranks, this one of {comm.size}")

    def destroy(self, comm: EngineCommunicator) -> None:
        """Forget the communicator locally; messages still arriving for it are dropped."""
        assert isinstance(comm, MpiCommunicator)
        comm.destroyed = True
        if comm.size > 1:
            world = mpi_world()
            with world.lock:
                world.forget(comm.uid)

    # ------------------------------------------------------------------ the exchange under every collective
    def _exchange(
        self,
        comm: MpiCommunicator,
        op: int,
        header: Callable[[int], Header],
        payload: Callable[[int], bytes | memoryview],
        check: Callable[[int, Header], str],
    ) -> dict[int, Message]:
        """Send each peer its header (stamped with this call's sequence number) and payload, receive one from each.

        HCCL_E_PARA when any peer's header disagrees with this rank's view of the call.

        ``check(peer, header)`` returns "" when the peer's header agrees with this rank's view of the call.
        """
        if comm.failure:
            raise _timeout(f"the communicator failed earlier and can no longer be used: {comm.failure}")
        seq = comm.seq
        comm.seq += 1
        if comm.size == 1:
            return {}
        me = comm.rank
        peers = [p for p in range(comm.size) if p != me]
        what = f"{_OP_NAMES[op]} #{seq} on {comm.name}"
        world = mpi_world()
        with world.lock:
            deadline = time.monotonic() + comm.timeouts.exec_s
            try:
                sends = [world.post(comm.world_ranks[p], replace(header(p), seq=seq), payload(p)) for p in peers]
                wanted = [(comm.uid, Kind.COLLECTIVE, seq, comm.world_ranks[p]) for p in peers]
                arrived = world.wait(wanted, sends, deadline, what, comm.names())
            except HcclError as exc:
                comm.failure = exc.message
                raise _timeout(f"{exc.message} (HCCL_EXEC_TIMEOUT={comm.timeouts.exec_s:g}s)") from None
        messages = dict(zip(peers, arrived))
        problems = []
        for p, m in messages.items():
            if m.header.op != op:
                problems.append(f"rank {p} called {_OP_NAMES.get(m.header.op, m.header.op)}")
            else:
                why = check(p, m.header)
                if why:
                    problems.append(f"rank {p} {why}")
        if problems:
            raise _para(f"{what}: ranks disagree: {'; '.join(problems)}")
        return messages

    @staticmethod
    def _head(comm: MpiCommunicator, op: int, **fields: int) -> Header:
        return Header(comm.uid, Kind.COLLECTIVE, op=op, rank=comm.rank, **fields)

    # ------------------------------------------------------------------ on host arrays (the MC2 kernels use these)
    def all_reduce_values(
        self, comm: EngineCommunicator, values: np.ndarray, dtype: HcclDataType, op: HcclReduceOp
    ) -> np.ndarray:
        """Every rank's ``values`` reduced in rank order (identical result on every rank)."""
        c = self._mine(comm)
        if not self.supports(dtype, reduction=True):
            raise HcclError(HcclResult.HCCL_E_NOT_SUPPORT, f"the reference cannot reduce {dtype.name}")
        data = np.ascontiguousarray(values).reshape(-1)
        head = self._head(c, Op.ALL_REDUCE, dtype=dtype, redop=op, count=data.size)
        raw = data.tobytes()

        def check(p: int, h: Header) -> str:
            return _disagree(h, dtype=dtype, redop=op, count=data.size)

        messages = self._exchange(c, Op.ALL_REDUCE, lambda p: head, lambda p: raw, check)
        parts = [data if r == c.rank else _typed(messages[r].payload, dtype) for r in range(c.size)]
        return reduce_in_rank_order(parts, dtype, op)

    def all_gather_values(self, comm: EngineCommunicator, raw: bytes, count: int, dtype: HcclDataType) -> list[bytes]:
        """Every rank's ``raw`` bytes (``count`` elements), in rank order."""
        c = self._mine(comm)
        head = self._head(c, Op.ALL_GATHER, dtype=dtype, count=count)

        def check(p: int, h: Header) -> str:
            return _disagree(h, dtype=dtype, count=count)

        messages = self._exchange(c, Op.ALL_GATHER, lambda p: head, lambda p: raw, check)
        return [raw if r == c.rank else bytes(messages[r].payload) for r in range(c.size)]

    def reduce_scatter_values(
        self, comm: EngineCommunicator, values: np.ndarray, dtype: HcclDataType, op: HcclReduceOp
    ) -> np.ndarray:
        """Block r of the rank-order reduction of every rank's ``values`` (size × block elements), on rank r."""
        c = self._mine(comm)
        if not self.supports(dtype, reduction=True):
            raise HcclError(HcclResult.HCCL_E_NOT_SUPPORT, f"the reference cannot reduce {dtype.name}")
        data = np.ascontiguousarray(values).reshape(c.size, -1)
        block = data.shape[1]
        head = self._head(c, Op.REDUCE_SCATTER, dtype=dtype, redop=op, count=block)

        def check(p: int, h: Header) -> str:
            return _disagree(h, dtype=dtype, redop=op, count=block)

        messages = self._exchange(c, Op.REDUCE_SCATTER, lambda p: head, lambda p: data[p].tobytes(), check)
        parts = [data[c.rank] if r == c.rank else _typed(messages[r].payload, dtype) for r in range(c.size)]
        return reduce_in_rank_order(parts, dtype, op)

    def _mine(self, comm: EngineCommunicator) -> MpiCommunicator:
        if not isinstance(comm, MpiCommunicator) or comm.destroyed:
            raise _para(f"{comm!r} is not a live communicator of the reference engine")
        return comm

    # ------------------------------------------------------------------ collectives on device memory
    @_stream_ordered
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
        """recv = rank-order reduction of every rank's send."""
        values = _typed(self._read(send, count * ELEMENT_BYTES[dtype], stream), dtype)
        self._write(recv, self.all_reduce_values(comm, values, dtype, op), stream)

    @_stream_ordered
    def all_gather(
        self, comm: EngineCommunicator, send: int, recv: int, send_count: int, dtype: HcclDataType, stream: object
    ) -> None:
        """recv = every rank's send in rank order."""
        raw = self._read(send, send_count * ELEMENT_BYTES[dtype], stream)
        self._write(recv, b"".join(self.all_gather_values(comm, raw, send_count, dtype)), stream)

    @_stream_ordered
    def broadcast(
        self, comm: EngineCommunicator, buf: int, count: int, dtype: HcclDataType, root: int, stream: object
    ) -> None:
        """buf = root's buf."""
        c = self._mine(comm)
        nbytes = count * ELEMENT_BYTES[dtype]
        raw = self._read(buf, nbytes, stream) if c.rank == root else b""
        head = self._head(c, Op.BROADCAST, dtype=dtype, count=count, aux=root)

        def check(p: int, h: Header) -> str:
            return _disagree(h, dtype=dtype, count=count, root=root)

        messages = self._exchange(c, Op.BROADCAST, lambda p: head, lambda p: raw, check)
        if c.rank != root:
            self._write(buf, messages[root].payload, stream)

    @_stream_ordered
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
        """recv = block ``rank`` of the rank-order reduction of every rank's send."""
        values = _typed(self._read(send, recv_count * comm.size * ELEMENT_BYTES[dtype], stream), dtype)
        self._write(recv, self.reduce_scatter_values(comm, values, dtype, op), stream)

    @_stream_ordered
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
        """Block p of send goes to rank p; rank p's block for this rank lands at recv_displs[p]."""
        c = self._mine(comm)
        size = ELEMENT_BYTES[dtype]
        me = c.rank
        if send_counts[me] != recv_counts[me]:
            raise _para(f"this rank sends itself {send_counts[me]} elements but expects {recv_counts[me]}")
        blocks = [self._read(send + send_displs[p] * size, send_counts[p] * size, stream) for p in range(c.size)]

        def head(p: int) -> Header:
            return self._head(c, Op.ALL_TO_ALL_V, dtype=dtype, count=send_counts[p], aux=recv_counts[p])

        def check(p: int, h: Header) -> str:
            if h.dtype != dtype:
                return f"uses {HcclDataType(h.dtype).name}, this rank {dtype.name}"
            if h.count != recv_counts[p]:
                return f"sends {h.count} elements here, this rank expects {recv_counts[p]}"
            if h.aux != send_counts[p]:
                return f"expects {h.aux} elements from this rank, which sends {send_counts[p]}"
            return ""

        messages = self._exchange(c, Op.ALL_TO_ALL_V, head, lambda p: blocks[p], check)
        for p in range(c.size):
            self._write(recv + recv_displs[p] * size, blocks[me] if p == me else messages[p].payload, stream)

    @_stream_ordered
    def barrier(self, comm: EngineCommunicator, stream: object) -> None:
        """Every rank has entered once this returns."""
        c = self._mine(comm)
        head = self._head(c, Op.BARRIER)
        self._exchange(c, Op.BARRIER, lambda p: head, lambda p: b"", lambda p, h: "")

    # ------------------------------------------------------------------ point to point
    @_stream_ordered
    def batch_send_recv(self, comm: EngineCommunicator, items: Sequence[SendRecvItem], stream: object) -> None:
        """Post every send, then take every receive (acknowledging each), then wait for the acknowledgements."""
        c = self._mine(comm)
        if c.failure:
            raise _timeout(f"the communicator failed earlier and can no longer be used: {c.failure}")
        if not items:
            return
        world = mpi_world()
        names = c.names()
        problems: list[str] = []
        with world.lock:
            deadline = time.monotonic() + c.timeouts.exec_s
            try:
                sends, acks = [], []
                for item in items:
                    if item.kind is HcclSendRecvType.HCCL_SEND:
                        seq = c.sent[item.peer]
                        c.sent[item.peer] += 1
                        raw = self._read(item.buf, item.count * ELEMENT_BYTES[item.dtype], stream)
                        head = Header(c.uid, Kind.P2P, seq=seq, dtype=item.dtype, count=item.count, rank=c.rank)
                        sends.append(world.post(c.world_ranks[item.peer], head, raw))
                        acks.append((c.uid, Kind.ACK, seq, c.world_ranks[item.peer]))
                for item in items:
                    if item.kind is not HcclSendRecvType.HCCL_RECV:
                        continue
                    seq = c.received[item.peer]
                    c.received[item.peer] += 1
                    key = (c.uid, Kind.P2P, seq, c.world_ranks[item.peer])
                    (m,) = world.wait([key], [], deadline, f"receive from rank {item.peer}", names)
                    ok = m.header.count == item.count and m.header.dtype == item.dtype
                    reply = Header(c.uid, Kind.ACK, seq=seq, dtype=item.dtype, count=item.count, aux=0 if ok else 1)
                    sends.append(world.post(c.world_ranks[item.peer], reply))
                    if ok:
                        self._write(item.buf, m.payload, stream)
                    else:
                        problems.append(
                            f"rank {item.peer} sent {m.header.count} elements of {HcclDataType(m.header.dtype).name}, "
                            f"this rank expected {item.count} of {item.dtype.name}"
                        )
                answers = world.wait(acks, sends, deadline, "send", names)
            except HcclError as exc:
                c.failure = exc.message
                raise _timeout(f"{exc.message} (HCCL_EXEC_TIMEOUT={c.timeouts.exec_s:g}s)") from None
        for ack in answers:
            if ack.header.aux:
                peer = names.get(ack.source, str(ack.source))
                problems.append(
                    f"{peer} expected {ack.header.count} elements of {HcclDataType(ack.header.dtype).name} "
                    "and refused what this rank sent"
                )
        if problems:
            raise _para("; ".join(problems))


def _disagree(h: Header, *, dtype: HcclDataType, count: int, redop: int | None = None, root: int | None = None) -> str:
    """How a peer's header differs from this rank's view of a collective ("" when it agrees)."""
    if h.dtype != dtype:
        return f"uses {HcclDataType(h.dtype).name}, this rank {dtype.name}"
    if h.count != count:
        return f"passes count {h.count}, this rank {count}"
    if redop is not None and h.redop != redop:
        return f"reduces with {HcclReduceOp(h.redop).name}, this rank with {HcclReduceOp(redop).name}"
    if root is not None and h.aux != root:
        return f"broadcasts from root {h.aux}, this rank from {root}"
    return ""


_engines: dict[int, MpiEngine] = {}
_engines_lock = threading.Lock()


def engine_for(driver: ReferenceDriver) -> MpiEngine:
    """The one MpiEngine of a reference driver (the backend and its MC2 kernels share it)."""
    with _engines_lock:
        engine = _engines.get(id(driver))
        if engine is None or engine.driver is not driver:
            engine = _engines[id(driver)] = MpiEngine(driver)
        return engine

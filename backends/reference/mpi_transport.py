"""Point-to-point messages between MPI processes for the reference collective engine, never blocking.

Every message the engine exchanges is one MPI message on ``MPI_COMM_WORLD`` with a reserved tag
(:data:`DEFAULT_TAG`, or ``ACL_HCCL_MPI_TAG``): a 64-byte :class:`Header` followed by the payload.
Nothing blocks inside MPI: sends are ``Isend``; arrivals are found with ``Improbe`` and fetched with
``Imrecv``; both are polled with ``Test`` against a deadline, so a peer that dies or never answers
costs at most that deadline. Arrivals are kept in a mailbox keyed by (communicator uid, kind,
sequence number, source), so messages of different communicators and operations never mix,
whatever order they arrive in.

mpi4py is imported on first use only. When this module is the first to start MPI it sets
``MPIR_CVAR_NO_COLLECTIVE_FINALIZE=1`` (unless already set): MPICH's ``MPI_Finalize`` otherwise
waits for every rank, forever if one died. If an operation timed out and MPI was started without
that setting, ``MPI_Finalize`` runs at exit under a watchdog of HCCL_CONNECT_TIMEOUT seconds, after
which the process ends with status 1 instead of hanging; see docs/COLLECTIVES.md.
"""

from __future__ import annotations

import atexit
import faulthandler
import os
import struct
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from acl_core.errors import HcclError, HcclResult
from acl_core.spec.collective import Timeouts

DEFAULT_TAG = 31_999
"""The MPI tag of engine traffic on MPI_COMM_WORLD (``ACL_HCCL_MPI_TAG`` overrides it)."""
TAG_ENV = "ACL_HCCL_MPI_TAG"
NO_COLLECTIVE_FINALIZE = "MPIR_CVAR_NO_COLLECTIVE_FINALIZE"
MAGIC = b"AHC1"
ANY = -1
"""A mailbox source that matches any sender."""


class Kind:
    """What a message is for."""

    JOIN = 1
    WELCOME = 2
    HELLO = 3
    COLLECTIVE = 4
    P2P = 5
    ACK = 6


_HEADER = struct.Struct("<4s16sBBBBqqqqi4x")
HEADER_BYTES = _HEADER.size  # 64


@dataclass(frozen=True)
class Header:
    """The fixed part of a message: whose it is, what it carries, and what the sender believes about the call."""

    uid: bytes
    kind: int
    seq: int = 0
    op: int = 0
    dtype: int = 0
    redop: int = 0
    count: int = 0
    aux: int = 0
    aux2: int = 0
    rank: int = -1

    def pack(self) -> bytes:
        """The 64 header bytes."""
        return _HEADER.pack(
            MAGIC,
            self.uid,
            self.kind,
            self.op,
            self.dtype,
            self.redop,
            self.seq,
            self.count,
            self.aux,
            self.aux2,
            self.rank,
        )

    @classmethod
    def unpack(cls, raw: bytes | bytearray | memoryview) -> Header | None:
        """Decode 64 bytes; None when they are not an engine header."""
        if len(raw) < HEADER_BYTES:
            return None
        magic, uid, kind, op, dtype, redop, seq, count, aux, aux2, rank = _HEADER.unpack_from(raw)
        if magic != MAGIC:
            return None
        return cls(uid, kind, seq, op, dtype, redop, count, aux, aux2, rank)


@dataclass(frozen=True)
class Message:
    """One arrived message: its MPI source (world rank), header and payload bytes."""

    source: int
    header: Header
    payload: memoryview


Key = tuple[bytes, int, int, int]
"""(uid, kind, seq, source world rank or ANY)."""


class _Send:
    """An Isend in flight and the buffer it reads (kept alive until it completes)."""

    __slots__ = ("buffer", "dest", "request")

    def __init__(self, request: Any, buffer: bytearray, dest: int) -> None:
        self.request = request
        self.buffer = buffer
        self.dest = dest


def launcher_world() -> tuple[int, int] | None:
    """(world rank, world size) from a running MPI or the launcher's environment, without starting MPI."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None:
        try:
            if mpi.Is_initialized() and not mpi.Is_finalized():
                return int(mpi.COMM_WORLD.Get_rank()), int(mpi.COMM_WORLD.Get_size())
        except Exception:
            pass
    for rank_var, size_var in (("PMI_RANK", "PMI_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")):
        rank, size = os.environ.get(rank_var, ""), os.environ.get(size_var, "")
        if rank.isdigit() and size.isdigit():
            return int(rank), int(size)
    return None


def _unavailable(message: str) -> HcclError:
    return HcclError(HcclResult.HCCL_E_UNAVAIL, message)


def _import_mpi() -> tuple[Any, bool]:
    """mpi4py.MPI, started with thread support if needed, and whether MPI_Finalize is safe after a lost peer."""
    first = "mpi4py.MPI" not in sys.modules
    if first:
        os.environ.setdefault(NO_COLLECTIVE_FINALIZE, "1")
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise _unavailable(
            f"communicators of more than one rank need mpi4py and an MPI ({exc}); pip install 'acl-core[mpi]' "
            "and launch with mpiexec"
        ) from None
    if MPI.Is_finalized():
        raise _unavailable("MPI was already finalized in this process")
    if not MPI.Is_initialized():
        MPI.Init_thread(MPI.THREAD_MULTIPLE)
    mpich = "MPICH" in MPI.Get_library_version()
    safe = mpich and os.environ.get(NO_COLLECTIVE_FINALIZE, "").strip().lower() in ("1", "true", "yes", "on")
    return MPI, safe


class MpiWorld:
    """This process's end of the engine's MPI traffic: posting, polling, the mailbox, failure bookkeeping."""

    def __init__(self) -> None:
        mpi, finalize_safe = _import_mpi()
        self.MPI = mpi
        self.comm = mpi.COMM_WORLD
        self.rank = int(self.comm.Get_rank())
        self.size = int(self.comm.Get_size())
        tag_ub = int(self.comm.Get_attr(mpi.TAG_UB) or 32767)
        raw_tag = os.environ.get(TAG_ENV, "").strip()
        self.tag = int(raw_tag) if raw_tag.isdigit() else DEFAULT_TAG
        if not 0 <= self.tag <= tag_ub:
            raise _unavailable(f"{TAG_ENV}={self.tag} is outside MPI's tag range [0, {tag_ub}]")
        self.finalize_safe = finalize_safe
        self.lock = threading.RLock()
        self._mailbox: dict[Key, Message] = {}
        self._incoming: list[tuple[Any, bytearray, int]] = []
        self._abandoned: list[_Send] = []
        self._broken: dict[int, str] = {}
        self.retired: set[bytes] = set()
        self.failed = False
        atexit.register(self._at_exit)

    # ------------------------------------------------------------------ sending
    def post(self, dest: int, header: Header, payload: bytes | bytearray | memoryview = b"") -> _Send:
        """Start sending header + payload to world rank ``dest``."""
        buffer = bytearray(HEADER_BYTES + len(payload))
        buffer[:HEADER_BYTES] = header.pack()
        buffer[HEADER_BYTES:] = payload
        try:
            request = self.comm.Isend([buffer, self.MPI.BYTE], dest, self.tag)
        except self.MPI.Exception as exc:
            self.failed = True
            raise self._lost(f"MPI refused a send to world rank {dest}: {exc}") from None
        return _Send(request, buffer, dest)

    # ------------------------------------------------------------------ receiving
    def _progress(self) -> bool:
        """Match every arrived message and complete finished receives; True if anything happened."""
        mpi = self.MPI
        moved = False
        while True:
            status = mpi.Status()
            message = self.comm.Improbe(mpi.ANY_SOURCE, self.tag, status)
            if message is None:
                break
            buffer = bytearray(status.Get_count(mpi.BYTE))
            self._incoming.append((message.Irecv([buffer, mpi.BYTE]), buffer, int(status.Get_source())))
            moved = True
        pending = []
        for request, buffer, source in self._incoming:
            try:
                done = request.Test()
            except mpi.Exception as exc:
                self._broken[source] = str(exc).splitlines()[0]
                self.failed = True
                moved = True
                continue
            if done:
                self._deliver(source, buffer)
                moved = True
            else:
                pending.append((request, buffer, source))
        self._incoming = pending
        return moved

    def _deliver(self, source: int, buffer: bytearray) -> None:
        header = Header.unpack(buffer)
        if header is None or header.uid in self.retired:
            return  # not ours (a foreign message on our tag) or for a destroyed communicator
        self._mailbox[(header.uid, header.kind, header.seq, source)] = Message(
            source, header, memoryview(buffer)[HEADER_BYTES:]
        )

    def _take(self, key: Key) -> Message | None:
        if key[3] != ANY:
            return self._mailbox.pop(key, None)
        for k in self._mailbox:
            if k[:3] == key[:3]:
                return self._mailbox.pop(k)
        return None

    def forget(self, uid: bytes) -> None:
        """Drop everything of a destroyed communicator, and whatever still arrives for it."""
        self.retired.add(uid)
        for k in [k for k in self._mailbox if k[0] == uid]:
            del self._mailbox[k]

    # ------------------------------------------------------------------ waiting
    def _lost(self, message: str) -> HcclError:
        return HcclError(HcclResult.HCCL_E_TIMEOUT, message)

    def wait(
        self, wanted: Sequence[Key], sends: Iterable[_Send], deadline: float, what: str, names: dict[int, str]
    ) -> list[Message]:
        """Poll until every wanted message arrived and every send completed; HCCL_E_TIMEOUT at ``deadline``.

        Returns the messages in the order of ``wanted``. ``names`` maps world ranks to how errors name
        them (e.g. "rank 3"). A broken MPI link to a needed peer fails at once with HCCL_E_TIMEOUT.
        """
        got: list[Message | None] = [None] * len(wanted)
        open_sends = list(sends)
        delay = 0.0
        while True:
            moved = self._progress()
            for i, key in enumerate(wanted):
                if got[i] is None:
                    got[i] = self._take(key)
            still = []
            for s in open_sends:
                try:
                    if not s.request.Test():
                        still.append(s)
                except self.MPI.Exception as exc:
                    self._abandon(open_sends)
                    self.failed = True
                    who = names.get(s.dest, f"world rank {s.dest}")
                    raise self._lost(f"{what}: MPI lost the link to {who}: {str(exc).splitlines()[0]}") from None
            open_sends = still
            missing = [wanted[i] for i, m in enumerate(got) if m is None]
            if not missing and not open_sends:
                return [m for m in got if m is not None]
            for key in missing:
                sources = (
                    self._broken
                    if key[3] == ANY
                    else ({key[3]: self._broken[key[3]]} if key[3] in self._broken else {})
                )
                if sources:
                    self._abandon(open_sends)
                    src, why = next(iter(sources.items()))
                    raise self._lost(f"{what}: MPI lost the link to {names.get(src, f'world rank {src}')}: {why}")
            if time.monotonic() >= deadline:
                self._abandon(open_sends)
                self.failed = True
                late = sorted(
                    {names.get(k[3], f"world rank {k[3]}") if k[3] != ANY else "a joining rank" for k in missing}
                )
                unsent = sorted({names.get(s.dest, f"world rank {s.dest}") for s in open_sends})
                parts = []
                if late:
                    parts.append(f"no message from {', '.join(late)}")
                if unsent:
                    parts.append(f"{', '.join(unsent)} did not take delivery")
                raise self._lost(f"{what} timed out: {'; '.join(parts)}")
            delay = 0.0 if moved else min(max(delay * 2, 2e-5), 2e-3)
            time.sleep(delay)

    def _abandon(self, sends: Iterable[_Send]) -> None:
        """Keep unfinished sends (and their buffers) alive for the rest of the process: MPI may still read them."""
        self._abandoned.extend(sends)

    # ------------------------------------------------------------------ exit
    def _at_exit(self) -> None:
        """After a timeout, finalize MPI under a watchdog: a dead peer would make MPICH's MPI_Finalize wait forever.

        The watchdog is faulthandler's C timer (MPI_Finalize may hold the GIL): after HCCL_CONNECT_TIMEOUT
        seconds it prints where the process waits and ends it with status 1.
        """
        if not self.failed or self.finalize_safe or self.MPI.Is_finalized():
            return
        limit = Timeouts.from_env().connect_s
        sys.stderr.write(
            f"acl-core hccl: an operation timed out earlier; MPI_Finalize gets {limit:g}s (HCCL_CONNECT_TIMEOUT) "
            f"before this process ends with status 1. Start MPI with {NO_COLLECTIVE_FINALIZE}=1 to avoid the wait.\n"
        )
        sys.stdout.flush()
        sys.stderr.flush()
        faulthandler.dump_traceback_later(limit, exit=True)
        try:
            self.MPI.Finalize()
        except Exception:
            pass
        faulthandler.cancel_dump_traceback_later()


_world: MpiWorld | None = None
_world_lock = threading.Lock()


def mpi_world() -> MpiWorld:
    """The process's MpiWorld, starting MPI on first use (HCCL_E_UNAVAIL without mpi4py)."""
    global _world
    with _world_lock:
        if _world is None:
            _world = MpiWorld()
        return _world


def mpi_started() -> bool:
    """True once this process's MpiWorld exists (MPI was started or joined by the engine)."""
    return _world is not None

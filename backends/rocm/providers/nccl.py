"""The collective library under the rocm backend's HCCL engine: NCCL (nvidia) or RCCL (amd), one C API.

:class:`CollectiveLibrary` is the provider-level seam: the few NCCL entry points the engine uses,
with plain ints for communicators, device addresses and streams. Every method returns the
``ncclResult_t`` (0 = ncclSuccess, 7 = ncclInProgress on a non-blocking communicator) or raises
:class:`NcclCallError` with it. Two implementations:

* :class:`Nccl4pyLibrary` -- nccl4py's low-level ``nccl.bindings.nccl``; only the binding layer is
  used, not ``nccl.core`` (which needs cuda-core 1.x). Its functions take nccl4py's ``Comm``
  object, which the class keeps per communicator address. The default for NCCL where nccl4py
  imports.
* :class:`CtypesLibrary` -- ctypes on ``libnccl.so.2`` (the ``nvidia-nccl-cu13`` wheel's copy, or the
  system's) or ``librccl.so.1``; RCCL exports the same symbols and struct layouts. NCCL's binding
  where nccl4py is not installed, and RCCL's always.

Both pass the single-rank GPU collective tests on the H200 (NCCL 2.28.9).
``ACL_NCCL_BINDING=ctypes|nccl4py`` forces one.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import os
import threading
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

NCCL_SUCCESS = 0
NCCL_IN_PROGRESS = 7
UNIQUE_ID_BYTES = 128
"""sizeof(ncclUniqueId) (NCCL_UNIQUE_ID_BYTES)."""

RESULT_NAMES = {
    0: "ncclSuccess",
    1: "ncclUnhandledCudaError",
    2: "ncclSystemError",
    3: "ncclInternalError",
    4: "ncclInvalidArgument",
    5: "ncclInvalidUsage",
    6: "ncclRemoteError",
    7: "ncclInProgress",
}


class NcclCallError(Exception):
    """An NCCL/RCCL call that failed: the call's name and its ncclResult_t."""

    def __init__(self, call: str, code: int, detail: str = "") -> None:
        self.call = call
        self.code = int(code)
        self.detail = detail
        name = RESULT_NAMES.get(self.code, f"ncclResult {self.code}")
        super().__init__(f"{call} failed: {name}" + (f" ({detail})" if detail else ""))


class CollectiveLibrary(ABC):
    """The NCCL C API as the engine needs it (communicators, streams and addresses are ints)."""

    name: str
    """"nccl" or "rccl": what Capabilities.collective_engine reports."""
    binding: str
    """How it is reached ("nccl4py", "ctypes")."""

    @abstractmethod
    def version(self) -> int:
        """ncclGetVersion: e.g. 22805 for 2.28.5 (major*10000 + minor*100 + patch)."""

    @abstractmethod
    def unique_id(self) -> bytes:
        """ncclGetUniqueId: 128 bytes every rank passes to :meth:`comm_init`."""

    @abstractmethod
    def comm_init(self, nranks: int, uid: bytes, rank: int, *, blocking: bool) -> tuple[int, int]:
        """ncclCommInitRankConfig: (communicator, ncclResult_t); ncclInProgress when non-blocking."""

    @abstractmethod
    def async_error(self, comm: int) -> int:
        """ncclCommGetAsyncError: the communicator's state (0, ncclInProgress, or an error)."""

    @abstractmethod
    def abort(self, comm: int) -> None:
        """ncclCommAbort (frees the communicator, whatever its state)."""

    @abstractmethod
    def destroy(self, comm: int) -> None:
        """ncclCommDestroy."""

    @abstractmethod
    def all_reduce(self, send: int, recv: int, count: int, dtype: int, op: int, comm: int, stream: int) -> int:
        """ncclAllReduce."""

    @abstractmethod
    def all_gather(self, send: int, recv: int, count: int, dtype: int, comm: int, stream: int) -> int:
        """ncclAllGather (``count`` elements from each rank)."""

    @abstractmethod
    def broadcast(self, send: int, recv: int, count: int, dtype: int, root: int, comm: int, stream: int) -> int:
        """ncclBroadcast."""

    @abstractmethod
    def reduce_scatter(self, send: int, recv: int, count: int, dtype: int, op: int, comm: int, stream: int) -> int:
        """ncclReduceScatter (``count`` = elements each rank receives)."""

    @abstractmethod
    def send(self, buf: int, count: int, dtype: int, peer: int, comm: int, stream: int) -> int:
        """ncclSend."""

    @abstractmethod
    def recv(self, buf: int, count: int, dtype: int, peer: int, comm: int, stream: int) -> int:
        """ncclRecv."""

    @abstractmethod
    def group_start(self) -> int:
        """ncclGroupStart."""

    @abstractmethod
    def group_end(self) -> int:
        """ncclGroupEnd (ncclInProgress for a non-blocking communicator still connecting)."""


# ----------------------------------------------------------------------------- ctypes
class _Config(ctypes.Structure):
    """The leading fields of ncclConfig_t as NCCL 2.14 defined them (later versions only append).

    NCCL reads ``size`` and ``version`` to know how much of the struct the caller filled; fields
    after ``netName`` keep their defaults.
    """

    _fields_ = [
        ("size", ctypes.c_size_t),
        ("magic", ctypes.c_uint),
        ("version", ctypes.c_uint),
        ("blocking", ctypes.c_int),
        ("cgaClusterSize", ctypes.c_int),
        ("minCTAs", ctypes.c_int),
        ("maxCTAs", ctypes.c_int),
        ("netName", ctypes.c_char_p),
    ]


_CONFIG_MAGIC = 0xCAFEBEEF
_CONFIG_VERSION = 21403  # NCCL_VERSION(2, 14, 3): the layout of _Config
_UNDEF_INT = -(2**31)  # NCCL_CONFIG_UNDEF_INT


def config_struct(blocking: bool) -> _Config:
    """NCCL_CONFIG_INITIALIZER with ``blocking`` set (what ncclCommInitRankConfig takes)."""
    return _Config(
        ctypes.sizeof(_Config), _CONFIG_MAGIC, _CONFIG_VERSION, 1 if blocking else 0, _UNDEF_INT, _UNDEF_INT, _UNDEF_INT
    )


class _UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * UNIQUE_ID_BYTES)]


class CtypesLibrary(CollectiveLibrary):
    """NCCL or RCCL through ctypes on its shared library."""

    binding = "ctypes"

    def __init__(self, path: str, name: str = "nccl") -> None:
        self.name = name
        self.path = path
        self.lib = ctypes.CDLL(path)
        vp, sz, i, p = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p
        signatures: dict[str, list[Any]] = {
            "ncclGetVersion": [ctypes.POINTER(ctypes.c_int)],
            "ncclGetUniqueId": [ctypes.POINTER(_UniqueId)],
            "ncclCommInitRankConfig": [ctypes.POINTER(vp), i, _UniqueId, i, ctypes.POINTER(_Config)],
            "ncclCommGetAsyncError": [vp, ctypes.POINTER(ctypes.c_int)],
            "ncclCommAbort": [vp],
            "ncclCommDestroy": [vp],
            "ncclAllReduce": [p, p, sz, i, i, vp, vp],
            "ncclAllGather": [p, p, sz, i, vp, vp],
            "ncclBroadcast": [p, p, sz, i, i, vp, vp],
            "ncclReduceScatter": [p, p, sz, i, i, vp, vp],
            "ncclSend": [p, sz, i, i, vp, vp],
            "ncclRecv": [p, sz, i, i, vp, vp],
            "ncclGroupStart": [],
            "ncclGroupEnd": [],
        }
        for fn, args in signatures.items():
            f = getattr(self.lib, fn)
            f.argtypes = args
            f.restype = ctypes.c_int

    def _call(self, fn: str, *args: Any, ok: tuple[int, ...] = (NCCL_SUCCESS,)) -> int:
        code = int(getattr(self.lib, fn)(*args))
        if code not in ok:
            raise NcclCallError(fn, code)
        return code

    def version(self) -> int:
        """ncclGetVersion."""
        v = ctypes.c_int(0)
        self._call("ncclGetVersion", ctypes.byref(v))
        return v.value

    def unique_id(self) -> bytes:
        """ncclGetUniqueId."""
        uid = _UniqueId()
        self._call("ncclGetUniqueId", ctypes.byref(uid))
        return bytes(ctypes.string_at(ctypes.addressof(uid), UNIQUE_ID_BYTES))

    def comm_init(self, nranks: int, uid: bytes, rank: int, *, blocking: bool) -> tuple[int, int]:
        """ncclCommInitRankConfig."""
        comm = ctypes.c_void_p(0)
        ident = _UniqueId()
        ctypes.memmove(ctypes.addressof(ident), uid, UNIQUE_ID_BYTES)
        config = config_struct(blocking)
        code = self._call(
            "ncclCommInitRankConfig",
            ctypes.byref(comm),
            nranks,
            ident,
            rank,
            ctypes.byref(config),
            ok=(NCCL_SUCCESS, NCCL_IN_PROGRESS),
        )
        return int(comm.value or 0), code

    def async_error(self, comm: int) -> int:
        """ncclCommGetAsyncError."""
        state = ctypes.c_int(0)
        self._call("ncclCommGetAsyncError", ctypes.c_void_p(comm), ctypes.byref(state))
        return state.value

    def abort(self, comm: int) -> None:
        """ncclCommAbort."""
        self._call("ncclCommAbort", ctypes.c_void_p(comm), ok=(NCCL_SUCCESS, NCCL_IN_PROGRESS))

    def destroy(self, comm: int) -> None:
        """ncclCommDestroy."""
        self._call("ncclCommDestroy", ctypes.c_void_p(comm), ok=(NCCL_SUCCESS, NCCL_IN_PROGRESS))

    _ASYNC = (NCCL_SUCCESS, NCCL_IN_PROGRESS)

    def all_reduce(self, send: int, recv: int, count: int, dtype: int, op: int, comm: int, stream: int) -> int:
        """ncclAllReduce."""
        return self._call("ncclAllReduce", send, recv, count, dtype, op, comm, stream or None, ok=self._ASYNC)

    def all_gather(self, send: int, recv: int, count: int, dtype: int, comm: int, stream: int) -> int:
        """ncclAllGather."""
        return self._call("ncclAllGather", send, recv, count, dtype, comm, stream or None, ok=self._ASYNC)

    def broadcast(self, send: int, recv: int, count: int, dtype: int, root: int, comm: int, stream: int) -> int:
        """ncclBroadcast."""
        return self._call("ncclBroadcast", send, recv, count, dtype, root, comm, stream or None, ok=self._ASYNC)

    def reduce_scatter(self, send: int, recv: int, count: int, dtype: int, op: int, comm: int, stream: int) -> int:
        """ncclReduceScatter."""
        return self._call("ncclReduceScatter", send, recv, count, dtype, op, comm, stream or None, ok=self._ASYNC)

    def send(self, buf: int, count: int, dtype: int, peer: int, comm: int, stream: int) -> int:
        """ncclSend."""
        return self._call("ncclSend", buf, count, dtype, peer, comm, stream or None, ok=self._ASYNC)

    def recv(self, buf: int, count: int, dtype: int, peer: int, comm: int, stream: int) -> int:
        """ncclRecv."""
        return self._call("ncclRecv", buf, count, dtype, peer, comm, stream or None, ok=self._ASYNC)

    def group_start(self) -> int:
        """ncclGroupStart."""
        return self._call("ncclGroupStart", ok=self._ASYNC)

    def group_end(self) -> int:
        """ncclGroupEnd."""
        return self._call("ncclGroupEnd", ok=self._ASYNC)


# ----------------------------------------------------------------------------- nccl4py
class Nccl4pyLibrary(CollectiveLibrary):
    """NCCL through nccl4py's generated low-level bindings (``nccl.bindings.nccl``, checked against 0.6.0).

    nccl4py's functions take its ``Comm`` wrapper, never an integer (an int is refused: "Cannot
    convert int to nccl.bindings.nccl.Comm"); ``int(comm)`` is the ncclComm_t address. The engine
    holds addresses, so this class keeps each ``Comm`` that ``comm_init_rank_scalable`` returned,
    by address, and hands that object to every call; an address it did not make is refused
    (ncclInvalidArgument) rather than wrapped blindly.

    nccl4py's status check lets ncclInProgress through silently and its calls return nothing, so a
    call's own ncclResult_t is not visible. For a non-blocking communicator the state NCCL documents
    for that case is the communicator's (ncclCommGetAsyncError: ncclInProgress until the call has
    been taken), so every call on a communicator returns that state; inside ncclGroupStart/End the
    calls return ncclSuccess and ncclGroupEnd returns the combined state of the group's communicators.
    """

    name = "nccl"
    binding = "nccl4py"

    def __init__(self, module: Any = None) -> None:
        self.n: Any = importlib.import_module("nccl.bindings.nccl") if module is None else module
        self._comms: dict[int, Any] = {}
        self._lock = threading.Lock()
        self._local = threading.local()
        self.version()  # loads libnccl: fail here, not at the first collective

    # ------------------------------------------------------------------ plumbing
    @staticmethod
    def _error(fn: str, exc: Exception) -> NcclCallError:
        status = getattr(exc, "status", None)
        if status is None and exc.args and isinstance(exc.args[0], int):
            status = exc.args[0]
        if status is None:
            return NcclCallError(f"nccl4py {fn}", 3, f"{type(exc).__name__}: {exc}")
        return NcclCallError(f"nccl4py {fn}", int(status))

    def _invoke(self, fn: str, *args: Any) -> Any:
        try:
            return getattr(self.n, fn)(*args)
        except Exception as exc:
            raise self._error(fn, exc) from None

    def _comm(self, handle: int, fn: str) -> Any:
        with self._lock:
            comm = self._comms.get(int(handle))
        if comm is None:
            raise NcclCallError(f"nccl4py {fn}", 4, f"communicator {int(handle):#x} was not made by this binding")
        return comm

    def _state(self, comm: Any) -> int:
        return int(self._invoke("comm_get_async_error", comm))

    def _group_comms(self) -> list[Any] | None:
        """The communicators used inside the current thread's open group, or None outside a group."""
        return getattr(self._local, "group", None)

    def _enqueue(self, fn: str, handle: int, *args: Any) -> int:
        """Call ``fn(*args, comm, stream)``-shaped entry points; the communicator's state (see the class docstring)."""
        comm = self._comm(handle, fn)
        *head, stream = args
        self._invoke(fn, *head, comm, int(stream))
        group = self._group_comms()
        if group is not None:
            group.append(comm)
            return NCCL_SUCCESS
        return self._state(comm)

    # ------------------------------------------------------------------ CollectiveLibrary
    def version(self) -> int:
        """get_version."""
        return int(self._invoke("get_version"))

    def unique_id(self) -> bytes:
        """get_unique_id."""
        raw = bytes(self._invoke("get_unique_id"))
        if len(raw) != UNIQUE_ID_BYTES:
            raise NcclCallError("nccl4py get_unique_id", 3, f"{len(raw)} bytes, not {UNIQUE_ID_BYTES}")
        return raw

    def comm_init(self, nranks: int, uid: bytes, rank: int, *, blocking: bool) -> tuple[int, int]:
        """comm_init_rank_scalable with one id (nccl.core's own way) and a Config whose blocking is set."""
        config = self.n.Config()
        config.blocking = 1 if blocking else 0
        comm = self._invoke("comm_init_rank_scalable", nranks, rank, 1, bytearray(uid), config.ptr)
        handle = int(comm)
        if handle == 0:
            return 0, NCCL_SUCCESS  # the engine refuses a null communicator
        with self._lock:
            self._comms[handle] = comm
        return handle, NCCL_SUCCESS if blocking else self._state(comm)

    def async_error(self, comm: int) -> int:
        """comm_get_async_error on the communicator's Comm."""
        return self._state(self._comm(comm, "comm_get_async_error"))

    def _release(self, fn: str, handle: int) -> None:
        comm = self._comm(handle, fn)
        try:
            self._invoke(fn, comm)
        finally:
            with self._lock:
                self._comms.pop(int(handle), None)

    def abort(self, comm: int) -> None:
        """comm_abort (the Comm is forgotten whatever the outcome)."""
        self._release("comm_abort", comm)

    def destroy(self, comm: int) -> None:
        """comm_destroy (the Comm is forgotten whatever the outcome)."""
        self._release("comm_destroy", comm)

    def all_reduce(self, send: int, recv: int, count: int, dtype: int, op: int, comm: int, stream: int) -> int:
        """all_reduce."""
        return self._enqueue("all_reduce", comm, send, recv, count, dtype, op, stream)

    def all_gather(self, send: int, recv: int, count: int, dtype: int, comm: int, stream: int) -> int:
        """all_gather."""
        return self._enqueue("all_gather", comm, send, recv, count, dtype, stream)

    def broadcast(self, send: int, recv: int, count: int, dtype: int, root: int, comm: int, stream: int) -> int:
        """broadcast."""
        return self._enqueue("broadcast", comm, send, recv, count, dtype, root, stream)

    def reduce_scatter(self, send: int, recv: int, count: int, dtype: int, op: int, comm: int, stream: int) -> int:
        """reduce_scatter."""
        return self._enqueue("reduce_scatter", comm, send, recv, count, dtype, op, stream)

    def send(self, buf: int, count: int, dtype: int, peer: int, comm: int, stream: int) -> int:
        """send."""
        return self._enqueue("send", comm, buf, count, dtype, peer, stream)

    def recv(self, buf: int, count: int, dtype: int, peer: int, comm: int, stream: int) -> int:
        """recv."""
        return self._enqueue("recv", comm, buf, count, dtype, peer, stream)

    def group_start(self) -> int:
        """group_start; the calls up to group_end are collected to report their state there."""
        self._invoke("group_start")
        depth = getattr(self._local, "depth", 0)
        if depth == 0:
            self._local.group = []
        self._local.depth = depth + 1
        return NCCL_SUCCESS

    def group_end(self) -> int:
        """group_end; at the outermost one, the group's combined state (an error, else ncclInProgress, else 0)."""
        depth = getattr(self._local, "depth", 0)
        comms = self._group_comms() or []
        self._local.depth = max(depth - 1, 0)
        if self._local.depth == 0:
            self._local.group = None
        self._invoke("group_end")
        if self._local.depth:
            return NCCL_SUCCESS
        states = [self._state(c) for c in {id(c): c for c in comms}.values()]
        errors = [s for s in states if s not in (NCCL_SUCCESS, NCCL_IN_PROGRESS)]
        if errors:
            return errors[0]
        return NCCL_IN_PROGRESS if NCCL_IN_PROGRESS in states else NCCL_SUCCESS


# ----------------------------------------------------------------------------- finding the library
def _wheel_library(package: str, filename: str) -> str | None:
    """``filename`` under the lib/ folder of an installed namespace package (e.g. nvidia.nccl)."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    for root in spec.submodule_search_locations or ():
        candidate = Path(root) / "lib" / filename
        if candidate.exists():
            return str(candidate)
    return None


def open_nccl(environ: dict[str, str] | None = None) -> tuple[CollectiveLibrary | None, str]:
    """(library, "") for NCCL, or (None, why not): nccl4py, else ctypes on libnccl.so.2; ACL_NCCL_BINDING forces one."""
    env = os.environ if environ is None else environ
    forced = env.get("ACL_NCCL_BINDING", "").strip().lower()
    reasons: list[str] = []
    if forced in ("", "nccl4py"):
        try:
            return Nccl4pyLibrary(), ""
        except Exception as exc:
            reasons.append(f"nccl4py: {type(exc).__name__}: {exc}")
    if forced in ("", "ctypes"):
        path = _wheel_library("nvidia.nccl", "libnccl.so.2") or "libnccl.so.2"
        try:
            return CtypesLibrary(path, "nccl"), ""
        except OSError as exc:
            reasons.append(f"ctypes {path}: {exc}")
    return None, "; ".join(reasons) or f"ACL_NCCL_BINDING={forced!r} names no binding"


def open_rccl() -> tuple[CollectiveLibrary | None, str]:
    """(library, "") for RCCL through ctypes on librccl.so.1 (untested: no AMD GPU here), or (None, why not)."""
    try:
        return CtypesLibrary("librccl.so.1", "rccl"), ""
    except OSError as exc:
        return None, f"librccl.so.1: {exc}"


__all__ = [
    "NCCL_IN_PROGRESS",
    "NCCL_SUCCESS",
    "RESULT_NAMES",
    "UNIQUE_ID_BYTES",
    "CollectiveLibrary",
    "CtypesLibrary",
    "Nccl4pyLibrary",
    "NcclCallError",
    "config_struct",
    "open_nccl",
    "open_rccl",
]

"""What every cuDNN frontend path shares: the loader, one handle per device, a graph LRU and the plan cache.

The frontend (module ``cudnn``, pip ``nvidia-cudnn-frontend``) is imported on first use, after
libcudnn 9 has been made loadable: the frontend's own loader looks in ``LD_LIBRARY_PATH`` and the
interpreter's site-packages, and when ``cuda.pathfinder`` is installed it first loads the library
from wherever the NVIDIA wheels put it. A missing package or library makes :meth:`CudnnGraphs.refusal`
say why, and the op takes another path. A subclass builds one graph per key (a frozen dataclass without
addresses); built graphs and refusals are kept in a small LRU. A cuDNN handle may not be used by two host
threads at once (and its stream is state), so a graph build, and setting the stream then executing, hold
one lock per instance; the workspace comes from stream-ordered allocation.

A built graph's execution plan may persist in the backend's plan cache (``backends/rocm/plan_cache.py``, the
subclass's :attr:`~CudnnGraphs.plan_kind`) through the frontend's ``serialize()``, keyed by the device's name
and architecture, the cuDNN and frontend versions, the subclass's recipe and every key field but the device
index; a later process loads it with ``deserialize()`` into a fresh graph and addresses its tensors by uid. A
stored plan that fails to deserialize, or whose execution raises, is logged, counted as refused and built
afresh. Persistence is opt-in (``ACL_PLAN_CACHE_CUDNN=1``: see :meth:`CudnnGraphs._persist`).
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Any, ClassVar, Final, Generic, TypeVar

from acl_core.tensor import AclTensor

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

GRAPH_LIMIT: Final = 32
"""Built graphs kept per instance (least recently used dropped first)."""
LOG = logging.getLogger("acl_rocm.plan_cache")
ENV_PERSIST = "ACL_PLAN_CACHE_CUDNN"
"""``1``: store cuDNN plans in the plan cache too (off by default: see :meth:`CudnnGraphs._persist`)."""

K = TypeVar("K")
TUNE_CALLS: Final = 3
"""Timed executions of each plan when a graph's plans are tuned (after one untimed warm-up each)."""


def load_frontend() -> Any:
    """Import the cuDNN frontend with libcudnn loaded (raises ImportError/OSError with the reason)."""
    try:
        pathfinder = importlib.import_module("cuda.pathfinder")
        pathfinder.load_nvidia_dynamic_lib("cudnn")  # the frontend's soname fallback then finds it
    except Exception:  # optional helper: the frontend's own search still runs
        pass
    module = importlib.import_module("cudnn")
    module.backend_version()  # raises when no libcudnn was loaded
    return module


@dataclass
class _Built:
    graph: Any
    tensors: dict[str, Any]
    """Variant-pack keys by role: the graph's tensors when built here, their uids when deserialised."""
    workspace: int
    restored: bool = False
    """Deserialised from the plan cache (an execution that raises then rebuilds it)."""
    plans: int = 0
    """Plans built to be timed (:meth:`CudnnGraphs._finish` with ``every_plan``); 0: the heuristic's one plan."""
    index: int | None = None
    """The plan executed (its index among ``plans``) once timed; None: the graph's own plan."""


class CudnnGraphs(Generic[K]):
    """cuDNN frontend graphs for one backend and one kind of call (built lazily, cached by key)."""

    plan_kind: ClassVar[str]
    """The plan cache kind of this subclass's serialised execution plans."""
    recipe: ClassVar[int]
    """Version of how the subclass's ``_build`` makes a graph: part of the stored plans' key."""
    roles: ClassVar[tuple[str, ...]]
    """Every variant-pack role a built graph names (their uids are stored with the plan)."""
    label: ClassVar[str]
    """What the log lines call these graphs ("SDPA", "convolution")."""

    def __init__(self, backend: RocmBackend, loader: Any = load_frontend) -> None:
        self.backend = backend
        self._loader = loader
        self._module: Any = None
        self._why: str | None = None
        self._loaded = False
        self._lock = threading.Lock()
        self._use = threading.Lock()
        """Held while a handle is used: a graph build, or set_stream then execute (the stream is handle state)."""
        self._handles: dict[int, Any] = {}
        self._graphs: OrderedDict[K, _Built | str] = OrderedDict()

    def refusal(self) -> str | None:
        """None when the frontend and libcudnn load on this platform, else why not."""
        if self.backend.provider.platform != "nvidia":
            return f"cuDNN is NVIDIA-only (platform {self.backend.provider.platform})"
        with self._lock:
            if not self._loaded:
                self._loaded = True
                try:
                    self._module = self._loader()
                except Exception as exc:  # any failure means "not here", with the reason
                    self._why = f"the cuDNN frontend did not load ({type(exc).__name__}: {exc})"
            return self._why

    def version(self) -> str:
        """The loaded libcudnn's version string (empty when not loaded)."""
        if self.refusal() is not None:
            return ""
        return str(self._module.backend_version_string())

    def graph(self, key: K) -> _Built | str:
        """The built graph for ``key``, or why cuDNN refused it (both cached)."""
        with self._lock:
            found = self._graphs.get(key)
            if found is not None:
                self._graphs.move_to_end(key)
                return found
        try:
            with self._use:
                built: _Built | str = self._restore(key) or self._build_and_store(key)
        except Exception as exc:  # unsupported graphs surface as exceptions
            built = f"cuDNN refused the graph ({type(exc).__name__}: {exc})"
        with self._lock:
            self._graphs[key] = built
            while len(self._graphs) > GRAPH_LIMIT:
                self._graphs.popitem(last=False)
        return built

    def _build(self, key: K) -> _Built:
        raise NotImplementedError

    def _plan_fields(self, key: K) -> dict[str, Any]:
        """Everything a stored plan depends on (the device by name and architecture, not by index)."""
        cudnn = self._module
        fields = {f.name: _plain(getattr(key, f.name)) for f in dataclasses.fields(key) if f.name != "device"}  # type: ignore[arg-type]
        return {
            "device": self.backend.provider.device_tag(key.device),  # type: ignore[attr-defined]
            "cudnn": str(cudnn.backend_version()),
            "frontend": str(getattr(cudnn, "__version__", "")),
            "recipe": self.recipe,
            "graph": fields,
        }

    def _persist(self) -> bool:
        """Whether plans go to disk: opt-in (``ACL_PLAN_CACHE_CUDNN=1``).

        On the H100 (2026-12-06, frontend 1.32, cuDNN 9.19) three pytest workers sharing one cache died of a
        segmentation fault inside the frontend's ``deserialize`` of an SDPA plan another process had stored, and a
        warm process refused one (``cuda_stream_is_capturing(fake_stream) failed with context is destroyed``):
        a crash cannot be caught, so the plans stay in memory unless asked for.
        """
        return str(getattr(self.backend, "environ", {}).get(ENV_PERSIST, "")).strip() == "1"

    def _restore(self, key: K) -> _Built | None:
        """The stored plan of ``key`` deserialised into a fresh graph, or None (absent, or refused and logged)."""
        cache = getattr(self.backend, "plans", None)
        if cache is None or cache.directory is None or not self._persist():
            return None
        try:
            fields = self._plan_fields(key)
        except Exception as exc:  # a frontend without these queries: nothing is persisted
            LOG.debug("cuDNN plans are not persisted: %s: %s", type(exc).__name__, exc)
            return None
        entry = cache.load(self.plan_kind, fields)
        if entry is None:
            return None
        try:
            uids = {name: int(entry.meta["uids"][name]) for name in self.roles}
            handle = self._handle()
            graph = self._module.pygraph(handle=handle)
            try:
                graph.deserialize(handle, entry.payload)
            except TypeError:  # a frontend that takes the list-of-byte-values form only
                graph.deserialize(handle, list(entry.payload))
            workspace = int(graph.get_workspace_size())
        except Exception as exc:  # another cuDNN build, a plan this device cannot run: build afresh
            cache.refused(self.plan_kind, f"{type(exc).__name__}: {exc}")
            return None
        LOG.debug("cuDNN %s plan loaded from %s", self.label, cache.directory)
        return _Built(graph, uids, workspace, restored=True)

    def _build_and_store(self, key: K) -> _Built:
        """Build the graph of ``key`` (counted as made) and store its serialised plan."""
        built = self._build(key)
        cache = getattr(self.backend, "plans", None)
        if cache is None:
            return built
        cache.made(self.plan_kind)
        if cache.directory is None or not self._persist() or built.plans:
            return built  # a tuned graph's plan is chosen at its first call: not stored
        try:
            fields = self._plan_fields(key)
            uids = {name: _uid(built.tensors[name]) for name in self.roles}
            try:
                blob = built.graph.serialize(as_bytes=True)
            except TypeError:  # a frontend whose serialize() only returns a list of byte values
                blob = built.graph.serialize()
            cache.store(self.plan_kind, fields, bytes(blob), {"uids": uids, "workspace": built.workspace})
        except Exception as exc:  # this plan cannot be serialised: it is kept in memory only
            LOG.debug("cuDNN %s plan not stored (%s: %s)", self.label, type(exc).__name__, exc)
        return built

    def _handle(self) -> Any:
        device = self.backend.provider.get_device()
        with self._lock:
            if device not in self._handles:
                self._handles[device] = self._module.create_handle()
            return self._handles[device]

    def _finish(
        self, g: Any, python_engines: tuple[str, ...], numeric_notes: tuple[str, ...] = (), every_plan: bool = False
    ) -> None:
        """Plan and build ``g`` on heuristics A then FALLBACK, without the named python engines and numeric notes.

        Python (CuTe DSL) engines import torch, so a graph only such an engine can run is refused (unless none
        are named). ``every_plan`` builds every supported plan (to be timed) instead of the first.
        """
        cudnn = self._module
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        if python_engines:
            g.deselect_engines(list(python_engines))
        notes = [getattr(cudnn.numerical_note, n) for n in numeric_notes if hasattr(cudnn.numerical_note, n)]
        if notes:
            g.deselect_numeric_notes(notes)
        g.check_support()
        if every_plan:
            g.build_plans(cudnn.build_plan_policy.ALL)
        else:
            g.build_plans()
        if python_engines and getattr(g, "selected_engine", None) is not None:
            raise RuntimeError("only a python engine (which needs torch) can run this graph")

    def _execute(self, built: _Built, pack: dict[Any, int], stream: int) -> bool:
        """Execute ``built`` on ``stream`` with a stream-ordered workspace; False (logged, counted) when a
        deserialised plan's execution raised."""
        provider = self.backend.provider
        handle = self._handle()
        workspace = provider.malloc_async(built.workspace, stream) if built.workspace else 0
        try:
            with self._use:  # another thread's set_stream must not land between these two
                self._module.set_stream(handle, stream)
                try:
                    if built.index is None:
                        built.graph.execute(pack, workspace, handle=handle)
                    else:
                        built.graph.execute_plan_at_index(pack, workspace, index=built.index, handle=handle)
                except Exception as exc:
                    if not built.restored:
                        raise
                    cache = getattr(self.backend, "plans", None)
                    if cache is not None:
                        cache.refused(self.plan_kind, f"its execution raised ({type(exc).__name__}: {exc})")
                    return False
        finally:
            if workspace:
                provider.free_async(workspace, stream)
        return True

    def _tune(self, built: _Built, pack: dict[Any, int], stream: int) -> None:
        """Time every plan of ``built`` on this call's operands and keep the fastest (``built.index``).

        Each plan runs once untimed, then :data:`TUNE_CALLS` times between two events on ``stream``; a plan whose
        execution raises is skipped. The times and plan names go to the debug log. The last execution is
        followed by the kept plan's own (the caller's), so the call's outputs are that plan's.
        """
        provider = self.backend.provider
        capturing = getattr(provider, "_capturing", None)
        if capturing is not None and capturing(stream):
            built.index = 0  # nothing may be waited on while the stream is captured: the heuristics' first plan
            LOG.debug("cuDNN %s: planned during stream capture, heuristics' first plan kept untimed", self.label)
            return
        handle = self._handle()
        workspace = provider.malloc_async(built.workspace, stream) if built.workspace else 0
        start, end = provider.event_create(), provider.event_create()
        times: dict[int, float] = {}
        try:
            with self._use:
                self._module.set_stream(handle, stream)
                for i in range(built.plans):
                    try:
                        built.graph.execute_plan_at_index(pack, workspace, index=i, handle=handle)
                        provider.event_record(start, stream)
                        for _ in range(TUNE_CALLS):
                            built.graph.execute_plan_at_index(pack, workspace, index=i, handle=handle)
                        provider.event_record(end, stream)
                        provider.event_synchronize(end)
                        times[i] = provider.event_elapsed_ms(start, end) / TUNE_CALLS
                    except Exception as exc:  # a plan that cannot run these operands: not a candidate
                        LOG.debug("cuDNN %s plan %d did not run (%s: %s)", self.label, i, type(exc).__name__, exc)
        finally:
            provider.event_destroy(start)
            provider.event_destroy(end)
            if workspace:
                provider.free_async(workspace, stream)
        if not times:
            raise RuntimeError(f"none of the {built.plans} cuDNN {self.label} plans ran")
        built.index = min(times, key=lambda i: times[i])
        names = {i: str(built.graph.get_plan_name_at_index(i)) for i in times}
        LOG.debug(
            "cuDNN %s: plan %d of %d kept (%s)", self.label, built.index, built.plans,
            ", ".join(f"{i} {names[i]} {ms:.3f} ms" for i, ms in sorted(times.items(), key=lambda t: t[1])),
        )  # fmt: skip

    def _rebuild(self, key: K, restored: _Built) -> _Built:
        """Replace a deserialised plan whose execution raised by a freshly built (and stored) one."""
        with self._use:
            built = self._build_and_store(key)
        with self._lock:
            if self._graphs.get(key) is restored:
                self._graphs[key] = built
        return built


def _plain(value: Any) -> Any:
    """A key field as JSON: enums as ints, tuples as lists, dataclasses as dicts (nested too)."""
    if isinstance(value, IntEnum):
        return int(value)
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return value


def _uid(tensor: Any) -> int:
    """A frontend tensor's uid (the python IR's ``uid`` attribute, or the classic ``get_uid()``)."""
    uid = getattr(tensor, "uid", None)
    return int(uid if uid is not None else tensor.get_uid())


def address(t: AclTensor) -> int:
    """The device address of a view's first element."""
    return t.data + t.offset * (t.dtype.info.storage_bits // 8)

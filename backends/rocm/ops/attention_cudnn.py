"""The cuDNN path of FlashAttentionScore on NVIDIA: cuDNN's fused SDPA through the cuDNN frontend graph API.

The frontend (module ``cudnn``, pip ``nvidia-cudnn-frontend``) is imported on first use, after
libcudnn 9 has been made loadable: the frontend's own loader looks in ``LD_LIBRARY_PATH`` and the
interpreter's site-packages, and when ``cuda.pathfinder`` is installed it first loads the library
from wherever the NVIDIA wheels put it. A missing package or library makes :meth:`CudnnSdpa.refusal`
say why, and the op takes another path. One graph per :class:`SdpaKey` (dtype, dims, strides, mask
kind, scale, device) is built once and kept in a small LRU; each call sets the backend's stream on
the cuDNN handle, takes the workspace from stream-ordered allocation, and passes device pointers as
ints. A cuDNN handle may not be used by two host threads at once (and its stream is state), so
building a graph and setting the stream then executing hold one lock per backend. cuDNN writes
the output in the caller's layout and the per-row max and sum of exponentials (its ``score_max`` /
``score_sum_exp``: the reference's softmaxMax / softmaxSum) into [B,N,Sq,1]
temporaries that one elementwise copy spreads over the eight columns of softmaxMaxOut / softmaxSumOut.
Only python-engine-free backend plans are used (the frontend's python engines need torch).

A built graph's execution plan persists in the backend's plan cache (``backends/rocm/plan_cache.py``,
kind ``cudnn_sdpa``) through the frontend's ``serialize()``, keyed by the device's name and architecture,
the cuDNN and frontend versions and every :class:`SdpaKey` field but the device index; a later process
loads it with ``deserialize()`` into a fresh graph and addresses its tensors by uid. A stored plan that fails to
deserialize, or whose execution raises, is logged, counted as refused and built afresh.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from acl_core.dtypes import DataType as D
from acl_core.errors import AclError, RtErrorCode
from acl_core.formats import Format
from acl_core.tensor import AclTensor, contiguous_strides

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

Strides = tuple[int, int, int, int]
GRAPH_LIMIT: Final = 32
"""Built SDPA graphs kept per backend (least recently used dropped first)."""
PYTHON_ENGINES: Final = ("sdpa_fwd_prefill",)
"""Name prefix of the frontend's python (CuTe DSL) SDPA engines, deselected: they import torch."""
PLAN_KIND: Final = "cudnn_sdpa"
"""The plan cache kind of serialised SDPA execution plans."""
SDPA_RECIPE: Final = 1
"""Version of how :meth:`CudnnSdpa._build` makes the graph (options, heuristics, deselected engines): part
of the stored plans' key, to be bumped whenever that changes."""
TENSORS: Final = ("q", "k", "v", "o", "max", "sum")
LOG = logging.getLogger("acl_rocm.plan_cache")
ENV_PERSIST = "ACL_PLAN_CACHE_CUDNN"
"""``1``: store cuDNN SDPA plans in the plan cache too (off by default: see :meth:`CudnnSdpa._persist`)."""


@dataclass(frozen=True)
class SdpaKey:
    """Everything one cuDNN SDPA graph depends on (no addresses: alignment is checked before routing)."""

    device: int
    dtype: D
    b: int
    nq: int
    nkv: int
    sq: int
    skv: int
    d: int
    q: Strides
    k: Strides
    v: Strides
    o: Strides
    mask: str
    scale: float


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


class CudnnSdpa:
    """cuDNN SDPA graphs for one backend (built lazily, cached by :class:`SdpaKey`)."""

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
        self._graphs: OrderedDict[SdpaKey, _Built | str] = OrderedDict()

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

    def graph(self, key: SdpaKey) -> _Built | str:
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

    def _plan_fields(self, key: SdpaKey) -> dict[str, Any]:
        """Everything a stored SDPA plan depends on (the device by name and architecture, not by index)."""
        cudnn = self._module
        fields = {f.name: getattr(key, f.name) for f in dataclasses.fields(key) if f.name != "device"}
        fields["dtype"] = int(key.dtype)
        for name in ("q", "k", "v", "o"):
            fields[name] = list(fields[name])
        return {
            "device": self.backend.provider.device_tag(key.device),
            "cudnn": str(cudnn.backend_version()),
            "frontend": str(getattr(cudnn, "__version__", "")),
            "recipe": SDPA_RECIPE,
            "graph": fields,
        }

    def _persist(self) -> bool:
        """Whether SDPA plans go to disk: opt-in (``ACL_PLAN_CACHE_CUDNN=1``).

        On the H100 (2026-12-06, frontend 1.32, cuDNN 9.19) three pytest workers sharing one cache died of a
        segmentation fault inside the frontend's ``deserialize`` of a plan another process had stored, and a
        warm process refused one (``cuda_stream_is_capturing(fake_stream) failed with context is destroyed``):
        a crash cannot be caught, so the plans stay in memory unless asked for.
        """
        return str(getattr(self.backend, "environ", {}).get(ENV_PERSIST, "")).strip() == "1"

    def _restore(self, key: SdpaKey) -> _Built | None:
        """The stored plan of ``key`` deserialised into a fresh graph, or None (absent, or refused and logged)."""
        cache = getattr(self.backend, "plans", None)
        if cache is None or cache.directory is None or not self._persist():
            return None
        try:
            fields = self._plan_fields(key)
        except Exception as exc:  # a frontend without these queries: nothing is persisted
            LOG.debug("cuDNN plans are not persisted: %s: %s", type(exc).__name__, exc)
            return None
        entry = cache.load(PLAN_KIND, fields)
        if entry is None:
            return None
        try:
            uids = {name: int(entry.meta["uids"][name]) for name in TENSORS}
            handle = self._handle()
            graph = self._module.pygraph(handle=handle)
            try:
                graph.deserialize(handle, entry.payload)
            except TypeError:  # a frontend that takes the list-of-byte-values form only
                graph.deserialize(handle, list(entry.payload))
            workspace = int(graph.get_workspace_size())
        except Exception as exc:  # another cuDNN build, a plan this device cannot run: build afresh
            cache.refused(PLAN_KIND, f"{type(exc).__name__}: {exc}")
            return None
        LOG.debug("cuDNN SDPA plan loaded from %s", cache.directory)
        return _Built(graph, uids, workspace, restored=True)

    def _build_and_store(self, key: SdpaKey) -> _Built:
        """Build the graph of ``key`` (counted as made) and store its serialised plan."""
        built = self._build(key)
        cache = getattr(self.backend, "plans", None)
        if cache is None:
            return built
        cache.made(PLAN_KIND)
        if cache.directory is None or not self._persist():
            return built
        try:
            fields = self._plan_fields(key)
            uids = {name: _uid(built.tensors[name]) for name in TENSORS}
            try:
                blob = built.graph.serialize(as_bytes=True)
            except TypeError:  # a frontend whose serialize() only returns a list of byte values
                blob = built.graph.serialize()
            cache.store(PLAN_KIND, fields, bytes(blob), {"uids": uids, "workspace": built.workspace})
        except Exception as exc:  # this plan cannot be serialised: it is kept in memory only
            LOG.debug("cuDNN SDPA plan not stored (%s: %s)", type(exc).__name__, exc)
        return built

    def _handle(self) -> Any:
        device = self.backend.provider.get_device()
        with self._lock:
            if device not in self._handles:
                self._handles[device] = self._module.create_handle()
            return self._handles[device]

    def _build(self, key: SdpaKey) -> _Built:
        cudnn = self._module
        handle = self._handle()
        io = cudnn.data_type.BFLOAT16 if key.dtype == D.ACL_BF16 else cudnn.data_type.HALF
        f32 = cudnn.data_type.FLOAT
        g = cudnn.pygraph(io_data_type=io, intermediate_data_type=f32, compute_data_type=f32, handle=handle)
        stat_dims = [key.b, key.nq, key.sq, 1]
        stat_strides = list(contiguous_strides(tuple(stat_dims)))
        t = {
            "q": g.tensor(name="q", dim=[key.b, key.nq, key.sq, key.d], stride=list(key.q), data_type=io),
            "k": g.tensor(name="k", dim=[key.b, key.nkv, key.skv, key.d], stride=list(key.k), data_type=io),
            "v": g.tensor(name="v", dim=[key.b, key.nkv, key.skv, key.d], stride=list(key.v), data_type=io),
            "max": g.tensor(name="max", dim=stat_dims, stride=stat_strides, data_type=f32),
            "sum": g.tensor(name="sum", dim=stat_dims, stride=stat_strides, data_type=f32),
        }
        # max and sum_exp without the log-sum-exp: cuDNN's composite softmax outputs one or the other
        options: dict[str, Any] = {"generate_stats": False, "attn_scale": key.scale, "name": "sdpa"}
        if key.mask == "top_left":
            options["use_causal_mask"] = True
        elif key.mask == "bottom_right":
            options["use_causal_mask_bottom_right"] = True
        o, _ = g.sdpa(t["q"], t["k"], t["v"], score_max=t["max"], score_sum_exp=t["sum"], **options)
        o.set_output(True).set_dim([key.b, key.nq, key.sq, key.d]).set_stride(list(key.o)).set_data_type(io)
        t["max"].set_output(True)
        t["sum"].set_output(True)
        t["o"] = o
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        g.deselect_engines(list(PYTHON_ENGINES))
        g.check_support()
        g.build_plans()
        if getattr(g, "selected_engine", None) is not None:
            raise RuntimeError("only a python engine (which needs torch) can run this graph")
        return _Built(g, t, int(g.get_workspace_size()))

    def run(self, built: _Built, key: SdpaKey, tensors: dict[str, AclTensor], stream: int) -> None:
        """Execute ``built`` on ``stream``: q/k/v in, out and the two [B,N,Sq,8] statistics out."""
        if not self._run_once(built, key, tensors, stream):  # a deserialised plan failed: built afresh, once
            self._run_once(self._rebuild(key, built), key, tensors, stream)

    def _run_once(self, built: _Built, key: SdpaKey, tensors: dict[str, AclTensor], stream: int) -> bool:
        """Execute ``built``; False (logged, counted) when a deserialised plan's execution raised."""
        provider = self.backend.provider
        handle = self._handle()
        stat_bytes = key.b * key.nq * key.sq * 4
        temps: list[int] = []
        try:
            for _ in range(2):  # the row max and the sum of exponentials, [B,N,Sq,1] each
                temps.append(provider.malloc_async(max(stat_bytes, 4), stream))
            workspace = provider.malloc_async(built.workspace, stream) if built.workspace else 0
            if workspace:
                temps.append(workspace)
            pack = _pack(built, tensors, temps)
            with self._use:  # another thread's set_stream must not land between these two
                self._module.set_stream(handle, stream)
                try:
                    built.graph.execute(pack, workspace, handle=handle)
                except Exception as exc:
                    if not built.restored:
                        raise
                    cache = getattr(self.backend, "plans", None)
                    if cache is not None:
                        cache.refused(PLAN_KIND, f"its execution raised ({type(exc).__name__}: {exc})")
                    return False
            for name, address in (("smax", temps[0]), ("ssum", temps[1])):
                self._spread(address, tensors[name], stream)
        finally:
            for address in reversed(temps):
                provider.free_async(address, stream)
        return True

    def _rebuild(self, key: SdpaKey, restored: _Built) -> _Built:
        """Replace a deserialised plan whose execution raised by a freshly built (and stored) one."""
        with self._use:
            built = self._build_and_store(key)
        with self._lock:
            if self._graphs.get(key) is restored:
                self._graphs[key] = built
        return built

    def _spread(self, address: int, stats: AclTensor, stream: int) -> None:
        """stats[b, n, s, c] = column[b, n, s] for the eight columns c (a broadcast elementwise copy)."""
        shape = tuple(stats.view_dims)
        b, n, s, _ = shape
        column = AclTensor(shape, D.ACL_FLOAT, (n * s, s, 1, 0), 0, Format.ACL_FORMAT_ND, (b, n, s, 1), address)
        self.backend.elementwise.convert(column, stats, stream)


def _pack(built: _Built, tensors: dict[str, AclTensor], temps: list[int]) -> dict[Any, int]:
    """The variant pack: q/k/v/o at the caller's addresses, the two statistics in ``temps``."""
    pack = {built.tensors[name]: _address(tensors[name]) for name in ("q", "k", "v", "o")}
    pack[built.tensors["max"]], pack[built.tensors["sum"]] = temps[:2]
    return pack


def _uid(tensor: Any) -> int:
    """A frontend tensor's uid (the python IR's ``uid`` attribute, or the classic ``get_uid()``)."""
    uid = getattr(tensor, "uid", None)
    return int(uid if uid is not None else tensor.get_uid())


def _address(t: AclTensor) -> int:
    return t.data + t.offset * (t.dtype.info.storage_bits // 8)


def refuse(why: str) -> AclError:
    """The error a forced cuDNN run raises when cuDNN cannot take the call."""
    return AclError(RtErrorCode.ACL_ERROR_RT_FEATURE_NOT_SUPPORT, f"cuDNN SDPA: {why}")

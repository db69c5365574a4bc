"""The cuDNN path of FlashAttentionScore on NVIDIA: cuDNN's fused SDPA through the cuDNN frontend graph API.

The frontend's loading, the handles and their lock, the graph LRU and the plan cache are
:mod:`acl_rocm.ops.cudnn_graphs`'s (a missing package or library makes :meth:`CudnnSdpa.refusal` say why,
and the op takes another path). One graph per :class:`SdpaKey` (dtype, dims, strides, mask kind, scale,
device); each call sets the backend's stream on the cuDNN handle, takes the workspace from stream-ordered
allocation, and passes device pointers as ints. cuDNN writes the output in the caller's layout and the
per-row max and sum of exponentials (its ``score_max`` / ``score_sum_exp``: the reference's softmaxMax /
softmaxSum) into [B,N,Sq,1] temporaries that one elementwise copy spreads over the eight columns of
softmaxMaxOut / softmaxSumOut. Only python-engine-free backend plans are used (the frontend's python
engines need torch). Plans persist (opt-in) under the plan cache kind ``cudnn_sdpa``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from acl_core.dtypes import DataType as D
from acl_core.errors import AclError, RtErrorCode
from acl_core.formats import Format
from acl_core.tensor import AclTensor, contiguous_strides
from acl_rocm.ops.cudnn_graphs import ENV_PERSIST as ENV_PERSIST
from acl_rocm.ops.cudnn_graphs import GRAPH_LIMIT as GRAPH_LIMIT
from acl_rocm.ops.cudnn_graphs import CudnnGraphs, _Built
from acl_rocm.ops.cudnn_graphs import load_frontend as load_frontend

Strides = tuple[int, int, int, int]
PYTHON_ENGINES: Final = ("sdpa_fwd_prefill",)
"""Name prefix of the frontend's python (CuTe DSL) SDPA engines, deselected: they import torch."""
PLAN_KIND: Final = "cudnn_sdpa"
"""The plan cache kind of serialised SDPA execution plans."""
SDPA_RECIPE: Final = 1
"""Version of how :meth:`CudnnSdpa._build` makes the graph (options, heuristics, deselected engines): part
of the stored plans' key, to be bumped whenever that changes."""
TENSORS: Final = ("q", "k", "v", "o", "max", "sum")


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


class CudnnSdpa(CudnnGraphs[SdpaKey]):
    """cuDNN SDPA graphs for one backend (built lazily, cached by :class:`SdpaKey`)."""

    plan_kind = PLAN_KIND
    tensor_names = TENSORS
    recipe = SDPA_RECIPE
    label = "cuDNN SDPA"

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
        stat_bytes = key.b * key.nq * key.sq * 4
        temps: list[int] = []
        try:
            for _ in range(2):  # the row max and the sum of exponentials, [B,N,Sq,1] each
                temps.append(provider.malloc_async(max(stat_bytes, 4), stream))
            workspace = provider.malloc_async(built.workspace, stream) if built.workspace else 0
            if workspace:
                temps.append(workspace)
            if not self._execute(built, _pack(built, tensors, temps), workspace, stream):
                return False
            for name, address in (("smax", temps[0]), ("ssum", temps[1])):
                self._spread(address, tensors[name], stream)
        finally:
            for address in reversed(temps):
                provider.free_async(address, stream)
        return True

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


def _address(t: AclTensor) -> int:
    return t.data + t.offset * (t.dtype.info.storage_bits // 8)


def refuse(why: str) -> AclError:
    """The error a forced cuDNN run raises when cuDNN cannot take the call."""
    return AclError(RtErrorCode.ACL_ERROR_RT_FEATURE_NOT_SUPPORT, f"cuDNN SDPA: {why}")

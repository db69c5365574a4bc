"""The cuDNN path of FlashAttentionScoreGrad on NVIDIA: cuDNN's fused SDPA backward through the frontend graph API.

:data:`PATH_ENV` picks the path: ``cudnn`` (the default) takes cuDNN's ``sdpa_backward`` graph wherever
:func:`grad_refusal` and cuDNN itself accept
the call (fp16/bf16, no pse, no sink, no explicit mask: none, top-left / bottom-right causal (sparseMode 2 / 3),
the bottom-right band of sparseMode 4 as cuDNN's diagonal bounds, GQA, head dims multiple of 8 up to 256,
every layout as strides with a unit head-dim stride, 16-byte aligned operands), else the composed path of
:mod:`acl_rocm.ops.attention_grad` (what AMD runs) with the reason on the debug logger ``acl_rocm.attention_grad``;
``blas`` keeps every call on the composed path; ``flash`` (opt-in) takes the portable fused kernels of
:mod:`acl_rocm.ops.attention_flash_grad` where they fit, else the composed path with the reason logged. The
frontend's loading, handles, graph LRU and plan cache are :mod:`acl_rocm.ops.cudnn_graphs`'s; plans persist (opt-in)
under the plan cache kind :data:`PLAN_KIND`.

cuDNN recomputes P from a log-sum-exp per row ([B,N,Sq,1] fp32): one elementwise launch (:data:`LSE`) forms it
from softmaxMax / softmaxSum's first column as ``max + log(sum)`` into a stream-ordered temporary, so
``exp(scale·s − lse)`` is the reference's ``exp(scale·s − max) / sum``; a row whose sum is not positive (nothing
kept) gets +inf, so its P is 0, and a non-finite max counts as 0, as the composed row kernel reads them. cuDNN
reads Q, K, V, O and dO and writes dQ, dK and dV in the caller's layouts and dtype (its dQ accumulates in fp32).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from acl_core.dtypes import DataType as D
from acl_core.errors import AclError, AclErrorCode
from acl_core.formats import Format
from acl_core.tensor import AclTensor, contiguous_strides
from acl_rocm.kernels.elementwise import ufunc
from acl_rocm.ops.attention import bnsd_strides
from acl_rocm.ops.attention_plan import cudnn_refusal
from acl_rocm.ops.cudnn_graphs import CudnnGraphs, _Built, address

Strides = tuple[int, int, int, int]
LOG = logging.getLogger("acl_rocm.attention_grad")
PATH_ENV: Final = "ACL_ATTENTION_GRAD_PATH"
PATHS: Final = ("blas", "cudnn", "flash")
DEFAULT_PATH: Final = "cudnn"
"""cuDNN where it fits, the composed BLAS path elsewhere. The default since an H100 run (2026-12-07 14:46,
results/RESULTS.md): `conformance rocm --full` of the four versions 0 failed and the GPU tier passed under it, and
beside torch's SDPA backward 0.99-1.01x its throughput (square causal calls as top-left, :data:`DEFAULT_SQUARE`).
Where cuDNN is absent (AMD) and the device has matrix instructions it means ``flash``: the portable fused kernels
(H100, 2026-12-07 16:25: GPU tier and conformance passed, 0.34x torch where the composed path gives 0.08x)."""
PLAN_ENV: Final = "ACL_ATTENTION_GRAD_CUDNN_PLAN"
PLANS: Final = ("heuristic", "tune", "tune-all")
DEFAULT_PLAN: Final = "heuristic"
"""The cuDNN path's plan: heuristics A's first (default); ``tune``: every plan built and timed on a signature's first
call, the fastest kept (opt-in: on the H100, 2026-12-07, it timed two plans and kept the heuristics' first, 0.875
against 1.976 ms); ``tune-all``: the frontend's python (CuTe DSL) engines
among them too (they import torch: a measurement, not a deployment choice)."""
SQUARE_ENV: Final = "ACL_ATTENTION_GRAD_CUDNN_SQUARE"
SQUARES: Final = ("bottom-right", "top-left")
DEFAULT_SQUARE: Final = "top-left"
"""How a square (Sq = Skv) bottom-right causal call (sparseMode 3) reaches cuDNN: as the top-left causal mask (the
default; the same keys there, the mask torch's ``is_causal`` uses) or as given. On the H100 cuDNN 9.19's kernel for
the bottom-right mask took 1.30 ms at B4 N32 S2048 D128 where the same engine took 0.74 ms for top-left (it did not
skip the masked tiles): 0.63x torch against 1.0x (2026-12-07, results/RESULTS.md)."""
PLAN_KIND: Final = "cudnn_sdpa_bwd"
"""The plan cache kind of serialised SDPA backward plans."""
TENSORS: Final = ("q", "k", "v", "o", "do", "stats", "dq", "dk", "dv")
PYTHON_ENGINES: Final = ("sdpa_bwd",)
"""Name part of the frontend's python (CuTe DSL) SDPA backward engines, deselected: they import torch."""
OPERANDS: Final = {
    "q": "query", "k": "keyIn", "v": "value", "o": "attentionInOptional", "do": "dy",
    "dq": "dqOut", "dk": "dkOut", "dv": "dvOut",
}  # fmt: skip
"""The graph's operands by role, and the op's argument of each."""
LSE = ufunc(
    "AttentionGradLse",
    "smax:F, ssum:F -> out:F",
    "ssum > F(0) ? (acl_isinf(smax) || acl_isnan(smax) ? F(0) : smax) + acl_log(ssum) : __uint_as_float(0x7f800000u)",
)
"""The log-sum-exp cuDNN's backward reads, from the forward's max and sum (+inf where the row kept nothing)."""


def grad_path(environ: Mapping[str, str]) -> str:
    """The :data:`PATH_ENV` setting (:data:`DEFAULT_PATH` unless set; a bad value: ACL_ERROR_INVALID_PARAM)."""
    return _choice(environ, PATH_ENV, PATHS, DEFAULT_PATH)


def grad_plan(environ: Mapping[str, str]) -> str:
    """The :data:`PLAN_ENV` setting (:data:`DEFAULT_PLAN` unless set; a bad value: ACL_ERROR_INVALID_PARAM)."""
    return _choice(environ, PLAN_ENV, PLANS, DEFAULT_PLAN)


def grad_square(environ: Mapping[str, str]) -> str:
    """The :data:`SQUARE_ENV` setting (:data:`DEFAULT_SQUARE` unless set; a bad value: ACL_ERROR_INVALID_PARAM)."""
    return _choice(environ, SQUARE_ENV, SQUARES, DEFAULT_SQUARE)


def _choice(environ: Mapping[str, str], name: str, choices: tuple[str, ...], default: str) -> str:
    value = (environ.get(name, "") or default).strip().lower()
    if value not in choices:
        raise AclError(AclErrorCode.ACL_ERROR_INVALID_PARAM, f"{name}={value!r}: not one of {choices}")
    return value


@dataclass(frozen=True)
class GradMask:
    """cuDNN's mask of a call: "none", "top_left" / "bottom_right" (causal) or "band" (bottom-right bounds)."""

    kind: str
    left: int | None = None
    """cuDNN's left bound (keys up to ``left - 1`` left of the diagonal); None: unbounded."""
    right: int | None = None
    """cuDNN's right bound (keys up to ``right`` right of the diagonal); None: unbounded."""


def grad_mask(mode: int, has_mask: bool, sq: int, skv: int, pre: int, nxt: int) -> GradMask | str:
    """The cuDNN mask equal to the call's mask and sparse mode, or why there is none.

    Sparse modes 2 and 3 are the forward's causal mappings (3 without fully masked rows: Sq <= Skv); mode 4
    keeps ``-pre <= j - i - (Skv - Sq) <= next``, cuDNN's bottom-right band with left bound ``pre + 1`` and right
    bound ``next`` (both at least 0, and no row without a key); modes 0 and 1 with a mask read it: refused.
    """
    if not has_mask:
        return GradMask("none")
    if mode == 2:
        return GradMask("top_left")
    if mode == 3:
        return "bottom-right causal with Sq > Skv (fully masked rows)" if sq > skv else GradMask("bottom_right")
    if mode == 4:
        if pre < 0 or nxt < 0:
            return f"a band with preTokens {pre} / nextTokens {nxt} (cuDNN's bounds are at least 0)"
        if nxt < sq - skv:
            return "a band whose first rows keep no key"
        reach = sq + skv  # a bound this far reaches every key: unbounded
        return GradMask("band", pre + 1 if pre < reach else None, nxt if nxt < reach else None)
    return f"sparseMode {mode} with a mask (cuDNN takes no mask tensor)"


def square_mask(mask: GradMask, sq: int, skv: int, square: str) -> GradMask:
    """``mask``, or top-left causal for a square bottom-right causal call under ``square`` = "top-left"."""
    if square == "top-left" and mask.kind == "bottom_right" and sq == skv:
        return GradMask("top_left")
    return mask


@dataclass(frozen=True)
class GradKey:
    """Everything one cuDNN SDPA backward graph depends on (no addresses: alignment is checked before routing)."""

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
    do: Strides
    dq: Strides
    dk: Strides
    dv: Strides
    mask: GradMask
    scale: float
    plan: str = DEFAULT_PLAN
    """:data:`PLAN_ENV`'s choice: a tuned graph is another graph (its plans built for timing)."""


def grad_refusal(
    tensors: Mapping[str, AclTensor],
    layout: str,
    dims: tuple[int, int, int, int, int, int],
    mask: GradMask | str,
    has_pse: bool,
    has_sink: bool,
) -> str | None:
    """Why cuDNN's SDPA backward cannot run this call exactly (None when it may: cuDNN itself has the last word).

    ``tensors`` by role (:data:`OPERANDS`), ``dims`` (B, Nq, Nkv, Sq, Skv, D); the dtype, pse, sink, head dim,
    stride and alignment rules are the forward's (:func:`~acl_rocm.ops.attention_plan.cudnn_refusal`).
    """
    q, sq, skv, d = tensors["q"], dims[3], dims[4], dims[5]
    strides = {OPERANDS[r]: bnsd_strides(t.strides, layout, d) for r, t in tensors.items()}
    addresses = {OPERANDS[r]: address(t) for r, t in tensors.items()}
    why = cudnn_refusal(q.dtype, d, 0, False, has_pse, sq, skv, strides, addresses, has_sink)
    if why is not None:
        return why
    if isinstance(mask, str):
        return mask
    return "an empty dimension" if min(dims) == 0 else None


def grad_key(
    device: int,
    tensors: Mapping[str, AclTensor],
    layout: str,
    dims: tuple[int, int, int, int, int, int],
    mask: GradMask,
    scale: float,
    plan: str = DEFAULT_PLAN,
) -> GradKey:
    """The graph key of a call :func:`grad_refusal` accepted."""
    b, nq, nkv, sq, skv, d = dims
    st = {role: bnsd_strides(t.strides, layout, d) for role, t in tensors.items()}
    return GradKey(
        device, tensors["q"].dtype, b, nq, nkv, sq, skv, d,
        st["q"], st["k"], st["v"], st["o"], st["do"], st["dq"], st["dk"], st["dv"], mask, scale, plan,
    )  # fmt: skip


class CudnnSdpaGrad(CudnnGraphs[GradKey]):
    """cuDNN SDPA backward graphs for one backend (built lazily, cached by :class:`GradKey`)."""

    plan_kind = PLAN_KIND
    recipe = 1
    roles = TENSORS
    label = "SDPA backward"

    def _build(self, key: GradKey) -> _Built:
        cudnn = self._module
        handle = self._handle()
        io = cudnn.data_type.BFLOAT16 if key.dtype == D.ACL_BF16 else cudnn.data_type.HALF
        f32 = cudnn.data_type.FLOAT
        g = cudnn.pygraph(io_data_type=io, intermediate_data_type=f32, compute_data_type=f32, handle=handle)
        query = [key.b, key.nq, key.sq, key.d]
        keys = [key.b, key.nkv, key.skv, key.d]
        stats = [key.b, key.nq, key.sq, 1]
        t = {
            "q": g.tensor(name="q", dim=query, stride=list(key.q), data_type=io),
            "k": g.tensor(name="k", dim=keys, stride=list(key.k), data_type=io),
            "v": g.tensor(name="v", dim=keys, stride=list(key.v), data_type=io),
            "o": g.tensor(name="o", dim=query, stride=list(key.o), data_type=io),
            "do": g.tensor(name="dO", dim=query, stride=list(key.do), data_type=io),
            "stats": g.tensor(name="stats", dim=stats, stride=list(contiguous_strides(tuple(stats))), data_type=f32),
        }
        options = _mask_options(cudnn, key.mask)
        dq, dk, dv = g.sdpa_backward(
            t["q"], t["k"], t["v"], t["o"], t["do"], t["stats"], attn_scale=key.scale, name="sdpa_bwd", **options
        )
        for role, tensor, dims in (("dq", dq, query), ("dk", dk, keys), ("dv", dv, keys)):
            tensor.set_output(True).set_dim(dims).set_stride(list(getattr(key, role))).set_data_type(io)
            t[role] = tensor
        if key.plan == DEFAULT_PLAN:
            self._finish(g, PYTHON_ENGINES)
            return _Built(g, t, int(g.get_workspace_size()))
        self._finish(g, () if key.plan == "tune-all" else PYTHON_ENGINES, every_plan=True)
        plans = int(g.get_execution_plan_count())
        workspace = max((int(g.get_workspace_size_plan_at_index(i)) for i in range(plans)), default=0)
        return _Built(g, t, workspace, plans=plans)

    def run(self, built: _Built, key: GradKey, tensors: dict[str, AclTensor], stream: int) -> None:
        """Execute ``built`` on ``stream``: the log-sum-exp from smax / ssum, then dQ, dK, dV."""
        if not self._run_once(built, key, tensors, stream):  # a deserialised plan failed: built afresh, once
            self._run_once(self._rebuild(key, built), key, tensors, stream)

    def _run_once(self, built: _Built, key: GradKey, tensors: dict[str, AclTensor], stream: int) -> bool:
        provider = self.backend.provider
        stats = provider.malloc_async(max(key.b * key.nq * key.sq * 4, 4), stream)
        try:
            self.lse(tensors["smax"], tensors["ssum"], stats, stream)
            pack = {built.tensors[role]: address(tensors[role]) for role in OPERANDS}
            pack[built.tensors["stats"]] = stats
            if built.plans and built.index is None:
                self._tune(built, pack, stream)
            return self._execute(built, pack, stream)
        finally:
            provider.free_async(stats, stream)

    def lse(self, smax: AclTensor, ssum: AclTensor, address: int, stream: int) -> None:
        """``lse[b, n, s] = max + log(sum)`` of the statistics' first column into the contiguous [B,N,Sq,1] fp32."""
        b, n, s, _ = smax.view_dims
        shape = (b, n, s, 1)
        out = AclTensor(shape, D.ACL_FLOAT, contiguous_strides(shape), 0, Format.ACL_FORMAT_ND, shape, address)
        ew = self.backend.elementwise
        tensors = [("smax", _column(smax)), ("ssum", _column(ssum)), ("out", out)]
        ew.enqueue(ew.instantiate(LSE.name, LSE, {"F": D.ACL_FLOAT}, tensors), stream)


def _mask_options(cudnn: Any, mask: GradMask) -> dict[str, Any]:
    """sdpa_backward's mask arguments: the forward's causal flags, or the diagonal band's alignment and bounds."""
    if mask.kind == "top_left":
        return {"use_causal_mask": True}
    if mask.kind == "bottom_right":
        return {"use_causal_mask_bottom_right": True}
    if mask.kind == "band":
        options: dict[str, Any] = {"diagonal_alignment": cudnn.diagonal_alignment.BOTTOM_RIGHT}
        if mask.left is not None:
            options["diagonal_band_left_bound"] = mask.left
        if mask.right is not None:
            options["diagonal_band_right_bound"] = mask.right
        return options
    return {}


def _column(stats: AclTensor) -> AclTensor:
    """The first of the eight columns of a [B,N,Sq,8] statistic, as a [B,N,Sq,1] view."""
    b, n, s, _ = stats.view_dims
    return replace(stats, view_dims=(b, n, s, 1))

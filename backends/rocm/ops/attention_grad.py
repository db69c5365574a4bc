"""FlashAttentionScoreGrad on the GPU, composed: the vendor GEMM for the five products, small kernels between.

Per :class:`~acl_rocm.ops.attention_plan.Chunk` (one batch, query heads sharing a GQA position, a block of query
rows, every key those rows may keep: a causal or band call skips the rest as the forward's BLAS path does) it
enqueues ``S = Q Kᵀ`` and ``dP = dO Vᵀ`` into fp32 temporaries, the row kernel
(:mod:`acl_rocm.kernels.attention_grad`: P and ``scale·P ∘ (dP − D)`` in fp32, ``D`` from the rows of dO and O),
then ``Pᵀ dO`` and ``dSᵀ Q`` into an fp32 partial added to the call's fp32 dV / dK accumulators ([B, Nkv, Skv, D]:
a GQA group's heads add into their key/value head) and ``dS K`` into the partial, stored into dqOut (a chunk's rows
see all their keys, so dQ is complete per chunk). Last, the accumulators are stored into dkOut / dvOut in their
dtype and layout, and with a sink the per-row terms are summed per head into dsinkOut. Inputs whose strides a GEMM
cannot read are first copied to contiguous [B, N, S, D] temporaries; fp16/bf16 calls also widen Q, K and dO to fp32
temporaries once, for the fp32 ``Pᵀ dO``, ``dS K`` and ``dSᵀ Q`` products (only ``Q Kᵀ`` and ``dO Vᵀ`` run in the
input dtype). Every temporary is a stream-ordered allocation freed after the call's work; nothing is read back to
the host. On NVIDIA a call cuDNN takes runs its fused SDPA backward instead (:mod:`acl_rocm.ops.attention_grad_cudnn`,
the default ``ACL_ATTENTION_GRAD_PATH=cudnn``; ``blas`` keeps this path); under ``=flash`` (opt-in) a call the portable
fused kernels take runs them (:mod:`acl_rocm.ops.attention_flash_grad`); the path is chosen once per signature and
logged.
"""

from __future__ import annotations

import ctypes
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from acl_core.backend import Kernel, Launch
from acl_core.dtypes import DataType as D
from acl_core.errors import AclError, AclnnError, AclnnStatus, RtErrorCode
from acl_core.tensor import AclTensor
from acl_rocm.driver import handle
from acl_rocm.kernels.attention_grad import (
    ELEMENT_THREADS,
    GRAD_THREADS,
    ElementMeta,
    GradKernel,
    GradRowsMeta,
    RopeGradMeta,
    Strides,
)
from acl_rocm.kernels.mma import hardware_layout
from acl_rocm.launch import KernelArgs, LaunchConfig
from acl_rocm.ops.attention import (
    ATTENTION_DTYPES,
    bnsd_strides,
    broadcast4,
    layout_dims,
    mask_strides,
    sink_of,
    window_bounds,
)
from acl_rocm.ops.attention_blas import Operand, rowmajor_gemm
from acl_rocm.ops.attention_flash_grad import CONFIG_ENV, FlashAttentionGrad
from acl_rocm.ops.attention_grad_cudnn import (
    LOG,
    OPERANDS,
    PATH_ENV,
    CudnnSdpaGrad,
    grad_key,
    grad_mask,
    grad_path,
    grad_plan,
    grad_refusal,
    grad_square,
    square_mask,
)
from acl_rocm.ops.attention_plan import BUDGET_BYTES, Chunk, plan_chunks
from acl_rocm.ops.binding import family_key, memo_plan
from acl_rocm.ops.elementwise import Prepared
from acl_rocm.ops.matmul import WORKSPACE_BYTES, blas_view

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

OPS: tuple[str, ...] = ("FlashAttentionScoreGrad", "RotaryPositionEmbeddingGrad")
_ZERO4: Strides = (0, 0, 0, 0)


def _item(dtype: D) -> int:
    return dtype.info.storage_bits // 8


def _address(t: AclTensor) -> int:
    return t.data + t.offset * _item(t.dtype)


def _contiguous(dims: tuple[int, int, int, int]) -> Strides:
    _, n, s, d = dims
    return n * s * d, s * d, d, 1


@dataclass(frozen=True)
class Side:
    """A [B, N, S, D] operand: the address of element 0, its dtype and its (batch, head, row, dim) strides."""

    address: int
    dtype: D
    strides: Strides

    def at(self, batch: int, head: int, row: int) -> int:
        """The address of row ``row`` of head ``head`` of batch ``batch``."""
        st = self.strides
        return self.address + (batch * st[0] + head * st[1] + row * st[2]) * _item(self.dtype)


@dataclass(frozen=True)
class GradProblem:
    """One call in (batch, head, row, dim) terms."""

    b: int
    nq: int
    nkv: int
    sq: int
    skv: int
    d: int
    dtype: D
    layout: str
    scale: float
    bounds: tuple[int, int, int] | None
    mask: AclTensor | None
    pse: AclTensor | None
    sink: AclTensor | None
    tensors: dict[str, AclTensor]

    @property
    def group(self) -> int:
        """Query heads per key/value head."""
        return self.nq // self.nkv


def _gemm_readable(dims: tuple[int, int, int, int], st: Strides, transposed: bool) -> bool:
    """Whether a GEMM reads every head's [S, D] (or [D, S]) matrix of a view with strides ``st`` as it is."""
    _, _, s, d = dims
    return (blas_view(d, s, st[3], st[2]) if transposed else blas_view(s, d, st[2], st[3])) is not None


class AttentionGradRunner:
    """Runs FlashAttentionScoreGrad launches on one backend."""

    def __init__(self, backend: RocmBackend, budget: int = BUDGET_BYTES) -> None:
        self.backend = backend
        self.budget = budget
        """Bytes of fp32 S and dP plus P and dS temporaries one chunk may hold."""
        self.cudnn = CudnnSdpaGrad(backend)
        self.flash = FlashAttentionGrad(backend)
        self.last_path: str | None = None
        """The path the latest newly planned FlashAttentionScoreGrad signature took ("blas", "cudnn" or "flash")."""

    def kernels(self) -> dict[str, Kernel]:
        """A kernel per op (FlashAttentionScoreGrad only where the platform has a GEMM)."""
        kernels: dict[str, Kernel] = {"RotaryPositionEmbeddingGrad": self.rope_grad}
        if self.backend.matmul.unavailable() is None:
            kernels["FlashAttentionScoreGrad"] = self.run
        return kernels

    def _function(self, inst: GradKernel) -> object:
        return self.backend.function(inst.source(), inst.kernel_name)

    def problem(self, launch: Launch) -> GradProblem:
        """The call's dims, mask / window, pse and sink, and its tensors by role."""
        args, plan = launch.args, launch.plan
        q = args["query"]
        assert isinstance(q, AclTensor)
        if q.dtype not in ATTENTION_DTYPES:
            raise AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, f"rocm FlashAttentionScoreGrad: {q.dtype.short}")
        layout, nq, nkv, mode = plan["layout"], plan["nq"], plan["nkv"], plan["mode"]
        b, _, sq, d = layout_dims(q.view_dims, layout, nq)
        skv = layout_dims(args["keyIn"].view_dims, layout, nkv)[2]
        mask = args["attenMaskOptional"]
        bounds = None if mask is None else window_bounds(mode, sq, skv, plan["pre"], plan["next"], skv - sq)
        names = {"q": "query", "k": "keyIn", "v": "value", "do": "dy", "o": "attentionInOptional"}
        names.update(smax="softmaxMaxOptional", ssum="softmaxSumOptional", dq="dqOut", dk="dkOut", dv="dvOut")
        if args.get("dsink") is not None:
            names["dsink"] = "dsink"
        return GradProblem(
            b=b,
            nq=nq,
            nkv=nkv,
            sq=sq,
            skv=skv,
            d=d,
            dtype=q.dtype,
            layout=layout,
            scale=float(args["scaleValue"]),
            bounds=bounds,
            mask=mask if mask is not None and mode in (0, 1) else None,
            pse=args["pseShiftOptional"],
            sink=sink_of(args) if args.get("dsink") is not None else None,
            tensors={role: args[name] for role, name in names.items()},
        )

    def chunks(self, p: GradProblem) -> list[Chunk]:
        """The call's chunks under this runner's temporary budget."""
        per_score = 16
        return plan_chunks(p.b, p.nq, p.nkv, p.sq, p.skv, p.bounds, per_score, self.budget)

    def run(self, launch: Launch) -> None:
        """Enqueue the whole backward on the launch's stream: the signature's path is chosen once (memo), then run."""
        path = grad_path(self.backend.environ)
        env = self.backend.environ
        choice = f"{grad_plan(env)}:{grad_square(env)}" if path == "cudnn" else ""
        if path == "flash":
            choice = env.get(CONFIG_ENV, "")
        key = family_key(self.backend, "attention_grad", path, choice)
        memo_plan(launch, key, lambda: self._route(launch, path))(handle(launch.stream))

    def _route(self, launch: Launch, path: str) -> Callable[[int], None]:
        """What enqueues the call: cuDNN's SDPA backward or the flash kernels where asked for and they fit, else the
        composed BLAS path."""
        p = self.problem(launch)
        plan = launch.plan
        why = f"{PATH_ENV}={path}"
        if path == "cudnn" and self.backend.provider.platform != "nvidia":
            if hardware_layout(self.backend.policy.arch) is not None:  # AMD: no cuDNN, the portable fused kernels
                path, why = "flash", f"no cuDNN on {self.backend.provider.platform}"
        if path == "flash":
            refused = self.flash.refusal(p)
            if refused is None:
                self._log(p, plan["mode"], "flash", "the fused flash backward kernels")
                return functools.partial(self.flash.enqueue, p, self._sink_sum)
            why = f"flash: {refused}"
        if path == "cudnn":
            has_mask = launch.args["attenMaskOptional"] is not None
            mask = grad_mask(plan["mode"], has_mask, p.sq, p.skv, plan["pre"], plan["next"])
            if not isinstance(mask, str):
                mask = square_mask(mask, p.sq, p.skv, grad_square(self.backend.environ))
            tensors = {role: p.tensors[role] for role in OPERANDS}
            dims = (p.b, p.nq, p.nkv, p.sq, p.skv, p.d)
            refused = self.cudnn.refusal() or grad_refusal(
                tensors, p.layout, dims, mask, p.pse is not None, p.sink is not None
            )
            if refused is None and not isinstance(mask, str):
                device = self.backend.provider.get_device()
                key = grad_key(device, tensors, p.layout, dims, mask, p.scale, grad_plan(self.backend.environ))
                built = self.cudnn.graph(key)
                if not isinstance(built, str):
                    self._log(p, plan["mode"], "cudnn", f"cuDNN {self.cudnn.version()}, mask {mask.kind}")
                    stats = {"smax": p.tensors["smax"], "ssum": p.tensors["ssum"]}
                    return functools.partial(self.cudnn.run, built, key, {**tensors, **stats})
                refused = built
            why = f"cuDNN: {refused}"
        self._log(p, plan["mode"], "blas", why)
        return functools.partial(self._run_blas, p)

    def _log(self, p: GradProblem, mode: int, path: str, why: str) -> None:
        """Record the path a signature took and say why on the debug logger."""
        self.last_path = path
        LOG.debug(
            "FlashAttentionScoreGrad %s %s B=%d N=%d/%d Sq=%d Skv=%d D=%d sparse=%d: %s path (%s)",
            p.dtype.short, p.layout, p.b, p.nq, p.nkv, p.sq, p.skv, p.d, mode, path, why,
        )  # fmt: skip

    def _run_blas(self, p: GradProblem, stream: int) -> None:
        """Enqueue the composed backward on ``stream`` (temporaries freed stream-ordered)."""
        provider = self.backend.provider
        buffers: list[int] = []

        def alloc(nbytes: int) -> int:
            buffers.append(provider.malloc_async(max(nbytes, 4), stream))
            return buffers[-1]

        try:
            sides = {role: self._side(p, role, alloc, stream) for role in ("q", "k", "v", "do", "dq")}
            for role in ("q", "k", "do"):
                sides[role + "32"] = sides[role] if p.dtype == D.ACL_FLOAT else self._widened(p, role, alloc, stream)
            chunks = self.chunks(p)
            scores = max((c.heads * c.rows * c.cols for c in chunks), default=0)
            part = max((c.heads * max(c.rows, c.cols) * p.d for c in chunks), default=0)
            temps = {
                "s": alloc(scores * 4),
                "dp": alloc(scores * 4),
                "p": alloc(scores * 4),
                "ds": alloc(scores * 4),
                "part": alloc(part * 4),
                "workspace": alloc(WORKSPACE_BYTES),
            }
            acc_bytes = p.b * p.nkv * p.skv * p.d * 4
            accs = {"dk": alloc(acc_bytes), "dv": alloc(acc_bytes)}
            for address in accs.values():
                provider.memset(address, 0, acc_bytes, stream)
            terms = alloc(p.b * p.nq * p.sq * 4) if p.sink is not None else 0
            for chunk in chunks:
                self._chunk(p, chunk, sides, temps, accs, terms, stream)
            kv_dims = (p.b, p.nkv, p.skv, p.d)
            for role in ("dk", "dv"):
                out = p.tensors[role]
                self._elements(
                    "store", out.dtype, kv_dims, accs[role], _contiguous(kv_dims), _address(out),
                    bnsd_strides(out.strides, p.layout, p.d), stream,
                )  # fmt: skip
            if p.sink is not None:
                self._sink_sum(p, terms, p.tensors["dsink"], stream)
        finally:
            for address in reversed(buffers):
                provider.free_async(address, stream)

    def _side(self, p: GradProblem, role: str, alloc: Any, stream: int) -> Side:
        """An operand as a GEMM reads it: the tensor itself, or a contiguous copy when its strides need one."""
        t = p.tensors[role]
        query_side = role in ("q", "do", "dq")
        dims = (p.b, p.nq if query_side else p.nkv, p.sq if query_side else p.skv, p.d)
        st = bnsd_strides(t.strides, p.layout, p.d)
        if role == "dq" or _gemm_readable(dims, st, role in ("k", "v")):
            return Side(_address(t), t.dtype, st)
        copy = alloc(math.prod(dims) * _item(t.dtype))
        self._elements("copy", t.dtype, dims, copy, _contiguous(dims), _address(t), st, stream)
        return Side(copy, t.dtype, _contiguous(dims))

    def _widened(self, p: GradProblem, role: str, alloc: Any, stream: int) -> Side:
        """An fp16/bf16 Q, K or dO widened to a contiguous fp32 temporary (for the fp32 P / dS products)."""
        t = p.tensors[role]
        query_side = role in ("q", "do")
        dims = (p.b, p.nq if query_side else p.nkv, p.sq if query_side else p.skv, p.d)
        wide = alloc(math.prod(dims) * 4)
        st = bnsd_strides(t.strides, p.layout, p.d)
        self._elements("widen", t.dtype, dims, wide, _contiguous(dims), _address(t), st, stream)
        return Side(wide, D.ACL_FLOAT, _contiguous(dims))

    # ------------------------------------------------------------------ one chunk
    def _chunk(
        self,
        p: GradProblem,
        c: Chunk,
        sides: dict[str, Side],
        temps: dict[str, int],
        accs: dict[str, int],
        terms: int,
        stream: int,
    ) -> None:
        group, d = p.group, p.d
        head0 = c.head0(group)
        block = c.rows * c.cols
        q, k, v, do = (sides[r] for r in ("q", "k", "v", "do"))

        def rows_of(side: Side, width: int = d) -> Operand:  # a query-side [rows, D] per chunk head
            st = side.strides
            return Operand(side.at(c.batch, head0, c.row0), side.dtype, c.rows, width, st[2], st[3], group * st[1])

        def keys_of(side: Side, transposed: bool) -> Operand:  # a key-side [cols, D] (or [D, cols]) per head
            st = side.strides
            address = side.at(c.batch, c.kv_head0, c.kv0)
            if transposed:
                return Operand(address, side.dtype, d, c.cols, st[3], st[2], st[1])
            return Operand(address, side.dtype, c.cols, d, st[2], st[3], st[1])

        def scratch(address: int, dtype: D, transposed: bool = False) -> Operand:  # [rows, cols] per chunk head
            if transposed:
                return Operand(address, dtype, c.cols, c.rows, 1, c.cols, block)
            return Operand(address, dtype, c.rows, c.cols, c.cols, 1, block)

        part_keys = Operand(temps["part"], D.ACL_FLOAT, c.cols, d, d, 1, c.cols * d)
        part_rows = Operand(temps["part"], D.ACL_FLOAT, c.rows, d, d, 1, c.rows * d)
        if c.cols > 0:
            self._gemm(rows_of(q), keys_of(k, True), scratch(temps["s"], D.ACL_FLOAT), c.heads, temps, stream)
            self._gemm(rows_of(do), keys_of(v, True), scratch(temps["dp"], D.ACL_FLOAT), c.heads, temps, stream)
        self._rows(p, c, head0, temps, terms, stream)
        acc_at = (c.batch * p.nkv * p.skv + c.kv_head0 * p.skv + c.kv0) * d * 4
        part_dims = (1, c.heads, c.cols, d)
        part_strides: Strides = (0, c.cols * d, d, 1)
        acc_strides: Strides = (0, p.skv * d, d, 1)
        if c.cols > 0:
            products = (
                ("dv", scratch(temps["p"], D.ACL_FLOAT, True), rows_of(sides["do32"])),
                ("dk", scratch(temps["ds"], D.ACL_FLOAT, True), rows_of(sides["q32"])),
            )
            for role, left, right in products:
                self._gemm(left, right, part_keys, c.heads, temps, stream)
                self._elements(
                    "add", D.ACL_FLOAT, part_dims, accs[role] + acc_at, acc_strides, temps["part"], part_strides, stream
                )
            ds = scratch(temps["ds"], D.ACL_FLOAT)
            self._gemm(ds, keys_of(sides["k32"], False), part_rows, c.heads, temps, stream)
        else:  # rows that keep no key: dQ = 0
            self.backend.provider.memset(temps["part"], 0, c.heads * c.rows * d * 4, stream)
        dq = sides["dq"]
        self._elements(
            "store", dq.dtype, (1, c.heads, c.rows, d), temps["part"], (0, c.rows * d, d, 1),
            dq.at(c.batch, head0, c.row0), (0, group * dq.strides[1], dq.strides[2], dq.strides[3]), stream,
        )  # fmt: skip

    def _rows(self, p: GradProblem, c: Chunk, head0: int, temps: dict[str, int], terms: int, stream: int) -> None:
        t = p.tensors
        meta = GradRowsMeta(
            s_head=c.rows * c.cols,
            s_row=c.cols,
            rows=c.rows,
            cols=c.cols,
            row0=c.row0,
            kv0=c.kv0,
            batch=c.batch,
            head0=head0,
            head_step=p.group,
            head_dim=p.d,
            mask=_ZERO4 if p.mask is None else mask_strides(p.mask.view_dims, p.mask.strides),
            pse=_ZERO4 if p.pse is None else broadcast4(p.pse.view_dims, p.pse.strides),
            smax=broadcast4(t["smax"].view_dims, t["smax"].strides),
            ssum=broadcast4(t["ssum"].view_dims, t["ssum"].strides),
            dout=self._bnsd(p, "do"),
            out=self._bnsd(p, "o"),
            terms=(p.nq * p.sq, p.sq, 1, 0),
            has_mask=int(p.mask is not None),
            has_pse=int(p.pse is not None),
            has_window=int(p.bounds is not None),
            win_lo=p.bounds[0] if p.bounds else 0,
            win_hi=p.bounds[1] if p.bounds else 0,
            shift=p.bounds[2] if p.bounds else 0,
            has_sink=int(p.sink is not None),
            sink_step=0 if p.sink is None else p.sink.strides[0],
        )
        values: list[Any] = [KernelArgs.index_array(meta.values(), "long long"), ctypes.c_double(p.scale)]
        for address in (
            temps["s"], temps["dp"], temps["p"], temps["ds"],
            0 if p.mask is None else _address(p.mask), 0 if p.pse is None else _address(p.pse),
            _address(t["smax"]), _address(t["ssum"]), _address(t["do"]), _address(t["o"]),
            0 if p.sink is None else _address(p.sink), terms,
        ):  # fmt: skip
            values.append(KernelArgs.pointer(address))
        inst = GradKernel("rows", p.dtype)
        config = LaunchConfig((c.rows, c.heads, 1), (GRAD_THREADS, 1, 1))
        self.backend.elementwise.launch_prepared(Prepared(self._function(inst), config, KernelArgs(values)), stream)

    def _bnsd(self, p: GradProblem, role: str) -> Strides:
        t = p.tensors[role]
        return bnsd_strides(t.strides, p.layout, p.d)

    # ------------------------------------------------------------------ helpers
    def _elements(
        self,
        kind: str,
        dtype: D,
        dims: tuple[int, int, int, int],
        acc: int,
        acc_strides: Strides,
        other: int,
        other_strides: Strides,
        stream: int,
    ) -> None:
        """One element kernel: "add" (acc += other), "store" (other = acc as ``dtype``) or "copy" (acc = other)."""
        count = math.prod(dims)
        if count == 0:
            return
        inst = GradKernel(kind, dtype)
        meta = ElementMeta(dims=dims, acc=acc_strides, other=other_strides, count=count)
        values: list[Any] = [KernelArgs.index_array(meta.values(), "long long")]
        values += [KernelArgs.pointer(acc), KernelArgs.pointer(other)]
        config = LaunchConfig((-(-count // ELEMENT_THREADS), 1, 1), (ELEMENT_THREADS, 1, 1))
        self.backend.elementwise.launch_prepared(Prepared(self._function(inst), config, KernelArgs(values)), stream)

    def _sink_sum(self, p: GradProblem, terms: int, dsink: AclTensor, stream: int) -> None:
        inst = GradKernel("sink")
        values: list[Any] = [ctypes.c_longlong(n) for n in (p.b, p.nq, p.sq, dsink.strides[0])]
        values += [KernelArgs.pointer(terms), KernelArgs.pointer(_address(dsink))]
        config = LaunchConfig((p.nq, 1, 1), (GRAD_THREADS, 1, 1))
        self.backend.elementwise.launch_prepared(Prepared(self._function(inst), config, KernelArgs(values)), stream)

    def _gemm(self, a: Operand, b: Operand, d: Operand, heads: int, temps: dict[str, int], stream: int) -> None:
        """``d[t] = a[t] @ b[t]`` for the chunk's heads, never TF32: the op has no cubeMathType to allow it."""
        call = rowmajor_gemm(a, b, d, heads)
        if call is None:  # every operand was made GEMM-readable above
            raise AclError(RtErrorCode.ACL_ERROR_RT_INTERNAL_ERROR, "attention backward: a chunk view does not map")
        self.backend.provider.gemm(call, temps["workspace"], WORKSPACE_BYTES, stream)

    # ------------------------------------------------------------------ RotaryPositionEmbeddingGrad
    def rope_grad(self, launch: Launch) -> None:
        """dxOut, one thread an element; with xOptional, dcosOut and dsinOut, one thread an element of cos."""
        args = launch.args
        dy, cos, sin, dx = (args[n] for n in ("dy", "cos", "sin", "dxOut"))
        x = args["xOptional"]
        stream = handle(launch.stream)
        count = math.prod(dy.view_dims)
        meta = RopeGradMeta(
            dims=_dims4(dy.view_dims),
            cos_dims=_dims4(cos.view_dims),
            dy=_strides4(dy),
            x=_ZERO4 if x is None else _strides4(x),
            cos=_strides4(cos, broadcast=True),
            sin=_strides4(sin, broadcast=True),
            dx=_strides4(dx),
            mode=int(args["mode"]),
            count=count,
        )
        self._rope_launch("rope_dx", dy.dtype, meta, (dy, cos, sin, dx), count, stream)
        if x is None:  # no dcos / dsin without x (CANN): their outputs are left untouched
            return
        dcos, dsin = args["dcosOut"], args["dsinOut"]
        cos_count = math.prod(cos.view_dims)
        meta = replace(meta, dcos=_strides4(dcos), dsin=_strides4(dsin), count=cos_count)
        self._rope_launch("rope_dcs", dy.dtype, meta, (dy, x, dcos, dsin), cos_count, stream)

    def _rope_launch(
        self, kind: str, dtype: D, meta: RopeGradMeta, tensors: tuple[AclTensor, ...], count: int, stream: int
    ) -> None:
        if count == 0:  # an empty dy: no dx element (dcos / dsin over empty dims still write their zeros)
            return
        values: list[Any] = [KernelArgs.index_array(meta.values(), "long long")]
        values += [KernelArgs.pointer(_address(t)) for t in tensors]
        config = LaunchConfig((-(-count // ELEMENT_THREADS), 1, 1), (ELEMENT_THREADS, 1, 1))
        function = self._function(GradKernel(kind, dtype))
        self.backend.elementwise.launch_prepared(Prepared(function, config, KernelArgs(values)), stream)


def _dims4(dims: tuple[int, ...]) -> Strides:
    """A rank-3 (TND) shape as rank 4 with a leading 1; rank 4 as it is."""
    d = (1, *dims) if len(dims) == 3 else tuple(dims)
    return d[0], d[1], d[2], d[3]


def _strides4(t: AclTensor, broadcast: bool = False) -> Strides:
    """``t``'s strides as rank 4 (a leading 0 for rank 3); ``broadcast``: its size-1 dims made stride 0."""
    st = tuple(0 if broadcast and n == 1 else s for n, s in zip(t.view_dims, t.strides))
    st = (0, *st) if len(st) == 3 else st
    return st[0], st[1], st[2], st[3]


RUNNER = AttentionGradRunner

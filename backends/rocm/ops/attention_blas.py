"""The BLAS path of FlashAttentionScore: S = Q K^T and O = P V through the vendor GEMM, softmax in a kernel.

Per :class:`~acl_rocm.ops.attention_plan.Chunk` (one batch, a run of query heads sharing a position in
their GQA group, a block of query rows, the keys that block's window reaches) it enqueues a strided
batched GEMM into an fp32 score temporary, the row-softmax kernel
(:mod:`acl_rocm.kernels.attention_softmax`, which also writes softmaxMax / softmaxSum) into a
probability temporary of the input dtype, and a second batched GEMM that writes the output rows in
place in the caller's layout. The two temporaries and the GEMM workspace are stream-ordered
allocations sized once per call for the largest chunk (at most :data:`BUDGET_BYTES` of scores and
probabilities); nothing is read back to the host. Works on any provider with a GEMM.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from acl_core.dtypes import DataType as D
from acl_core.errors import AclError, RtErrorCode
from acl_core.formats import Format
from acl_core.tensor import AclTensor
from acl_rocm.kernels.attention_softmax import (
    SOFTMAX_THREADS,
    SoftmaxInstance,
    SoftmaxMeta,
    Strides,
    softmax_source,
)
from acl_rocm.launch import KernelArgs, LaunchConfig
from acl_rocm.ops.attention_plan import BUDGET_BYTES, Chunk, chunk_bytes, plan_chunks
from acl_rocm.ops.elementwise import Prepared
from acl_rocm.ops.matmul import WORKSPACE_BYTES, blas_view
from acl_rocm.providers.base import GemmCall, Matrix

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend


@dataclass(frozen=True)
class Operand:
    """A row-major-logical (batched) matrix view: address of element 0, dtype, dims, strides in elements."""

    address: int
    dtype: D
    rows: int
    cols: int
    sr: int
    sc: int
    batch_stride: int = 0


def rowmajor_gemm(a: Operand, b: Operand, d: Operand, batch: int, fast_tf32: bool = False) -> GemmCall | None:
    """``d[i] = a[i] @ b[i]`` as one column-major GemmCall, or None when a view needs a copy first."""
    av = blas_view(a.rows, a.cols, a.sr, a.sc)
    bv = blas_view(b.rows, b.cols, b.sr, b.sc)
    dv = blas_view(d.rows, d.cols, d.sr, d.sc)
    if av is None or bv is None or dv is None or dv.transpose:
        return None
    many = batch > 1
    return GemmCall(
        a=Matrix(b.address, int(b.dtype), bv.rows, bv.cols, bv.ld, b.batch_stride if many else 0, bv.transpose),
        b=Matrix(a.address, int(a.dtype), av.rows, av.cols, av.ld, a.batch_stride if many else 0, av.transpose),
        d=Matrix(d.address, int(d.dtype), dv.rows, dv.cols, dv.ld, d.batch_stride if many else 0),
        batch=batch,
        fast_tf32=fast_tf32,
    )


@dataclass(frozen=True)
class BlasProblem:
    """Everything the BLAS path needs of one call (strides are (batch, head, row, dim) in elements)."""

    q: AclTensor
    k: AclTensor
    v: AclTensor
    out: AclTensor
    smax: AclTensor
    ssum: AclTensor
    mask: AclTensor | None
    pse: AclTensor | None
    qs: Strides
    ks: Strides
    vs: Strides
    os: Strides
    mask_strides: Strides
    pse_strides: Strides
    b: int
    nq: int
    nkv: int
    sq: int
    skv: int
    d: int
    scale: float
    bounds: tuple[int, int, int] | None
    sink: AclTensor | None = None
    """One fp32 logit per query head (FlashAttentionScoreV3), or None."""


def _item(dtype: D) -> int:
    return dtype.info.storage_bits // 8


def _address(t: AclTensor) -> int:
    return t.data + t.offset * _item(t.dtype)


def blas_refusal(p: BlasProblem, gemm_unavailable: str | None) -> str | None:
    """Why the BLAS path cannot run ``p`` (None when it can): no GEMM, or a view the GEMM cannot read."""
    if gemm_unavailable is not None:
        return gemm_unavailable
    views = {
        "query": blas_view(p.sq, p.d, p.qs[2], p.qs[3]),
        "key": blas_view(p.d, p.skv, p.ks[3], p.ks[2]),
        "value": blas_view(p.skv, p.d, p.vs[2], p.vs[3]),
    }
    for name, view in views.items():
        if view is None:
            return f"{name} strides need a copy before a GEMM"
    out = blas_view(p.sq, p.d, p.os[2], p.os[3])
    if out is None or out.transpose:
        return "attentionOutOut is not row-major per head"
    return None


class BlasAttention:
    """Runs :class:`BlasProblem` s through the provider's GEMM and the row-softmax kernel."""

    def __init__(self, backend: RocmBackend, budget: int = BUDGET_BYTES) -> None:
        self.backend = backend
        self.budget = budget

    def chunks(self, p: BlasProblem) -> list[Chunk]:
        """The call's chunks under this runner's temporary budget."""
        per_score = 4 + _item(p.q.dtype)
        return plan_chunks(p.b, p.nq, p.nkv, p.sq, p.skv, p.bounds, per_score, self.budget)

    def run(self, p: BlasProblem, stream: int) -> None:
        """Enqueue every chunk's GEMM, softmax and GEMM on ``stream`` (temporaries freed stream-ordered)."""
        provider = self.backend.provider
        chunks = self.chunks(p)
        scores = chunk_bytes(chunks)
        p_dtype = p.q.dtype
        s_buf = provider.malloc_async(max(scores, 1) * 4, stream)
        buffers = [s_buf]
        try:
            p_buf = provider.malloc_async(max(scores, 1) * _item(p_dtype), stream)
            buffers.append(p_buf)
            workspace = provider.malloc_async(WORKSPACE_BYTES, stream)
            buffers.append(workspace)
            inst = SoftmaxInstance(p_dtype)
            function = self.backend.function(softmax_source(inst), inst.kernel_name)
            for chunk in chunks:
                self._chunk(p, chunk, s_buf, p_buf, workspace, function, stream)
        finally:
            for address in reversed(buffers):
                provider.free_async(address, stream)

    def _chunk(
        self, p: BlasProblem, c: Chunk, s_buf: int, p_buf: int, workspace: int, function: object, stream: int
    ) -> None:
        group = p.nq // p.nkv
        head0 = c.head0(group)
        item = _item(p.q.dtype)
        tf32 = self.backend.policy.tf32_enabled and p.q.dtype == D.ACL_FLOAT
        block = c.rows * c.cols
        if c.cols > 0:
            q = Operand(
                _address(p.q) + (c.batch * p.qs[0] + head0 * p.qs[1] + c.row0 * p.qs[2]) * item,
                p.q.dtype, c.rows, p.d, p.qs[2], p.qs[3], group * p.qs[1],
            )  # fmt: skip
            kt = Operand(
                _address(p.k) + (c.batch * p.ks[0] + c.kv_head0 * p.ks[1] + c.kv0 * p.ks[2]) * item,
                p.k.dtype, p.d, c.cols, p.ks[3], p.ks[2], p.ks[1],
            )  # fmt: skip
            s = Operand(s_buf, D.ACL_FLOAT, c.rows, c.cols, c.cols, 1, block)
            self._gemm(rowmajor_gemm(q, kt, s, c.heads, tf32), workspace, stream)
        meta = SoftmaxMeta(
            s_head=block,
            s_row=c.cols,
            p_head=block,
            p_row=c.cols,
            rows=c.rows,
            cols=c.cols,
            row0=c.row0,
            kv0=c.kv0,
            batch=c.batch,
            head0=head0,
            head_step=group,
            mask=p.mask_strides,
            pse=p.pse_strides,
            smax=_stats_strides(p.smax),
            ssum=_stats_strides(p.ssum),
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
            s_buf,
            p_buf,
            0 if p.mask is None else _address(p.mask),
            0 if p.pse is None else _address(p.pse),
            _address(p.smax),
            _address(p.ssum),
            0 if p.sink is None else _address(p.sink),
        ):
            values.append(KernelArgs.pointer(address))
        config = LaunchConfig((c.rows, c.heads, 1), (SOFTMAX_THREADS, 1, 1))
        self.backend.elementwise.launch_prepared(Prepared(function, config, KernelArgs(values)), stream)
        out_offset = p.out.offset + c.batch * p.os[0] + head0 * p.os[1] + c.row0 * p.os[2]
        if c.cols == 0:  # nothing kept in these rows: zeros (the kernel wrote max -inf, sum 0, or the sink's)
            shape = (c.heads, c.rows, p.d)
            view = AclTensor(
                shape, p.out.dtype, (group * p.os[1], p.os[2], p.os[3]), out_offset, Format.ACL_FORMAT_ND, shape,
                p.out.data,
            )  # fmt: skip
            self.backend.elementwise.zero(view, stream)
            return
        probs = Operand(p_buf, p.q.dtype, c.rows, c.cols, c.cols, 1, block)
        v = Operand(
            _address(p.v) + (c.batch * p.vs[0] + c.kv_head0 * p.vs[1] + c.kv0 * p.vs[2]) * item,
            p.v.dtype, c.cols, p.d, p.vs[2], p.vs[3], p.vs[1],
        )  # fmt: skip
        o = Operand(p.out.data + out_offset * item, p.out.dtype, c.rows, p.d, p.os[2], p.os[3], group * p.os[1])
        self._gemm(rowmajor_gemm(probs, v, o, c.heads, tf32), workspace, stream)

    def _gemm(self, call: GemmCall | None, workspace: int, stream: int) -> None:
        if call is None:  # blas_refusal admitted the views; a chunk of them must map too
            raise AclError(RtErrorCode.ACL_ERROR_RT_INTERNAL_ERROR, "attention BLAS path: a chunk view does not map")
        self.backend.provider.gemm(call, workspace, WORKSPACE_BYTES, stream)


def _stats_strides(t: AclTensor) -> Strides:
    """(batch, head, row, copy) strides of a [B,N,Sq,8] statistics tensor."""
    s = t.strides
    return s[0], s[1], s[2], s[3]

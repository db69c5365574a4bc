"""Convolution on the GPU: im2col (or col2im for transposed) kernels around the provider's batched GEMM.

A plain convolution is, per chunk of (images, output positions), an im2col kernel into a
stream-ordered column buffer (converted to the GEMM dtype, HF32-rounded where ``cubeMathType`` asks),
one GEMM batched over the groups (``acc_g = W_g @ col_g``, fp32 results), and an epilogue kernel that
adds the bias and rounds once into the output's view. A transposed convolution gathers its input
chunk channel-major (the elementwise convert kernel), runs ``col_g = W_g^T @ x_g`` and lets col2im pull
each output element's contributions. Chunks keep the column buffer and its companions within
:data:`CHUNK_BYTES` (the smallest chunk, one output position or one output channel of one group, may
exceed it). ``cubeMathType`` acts on fp32 operands as it does for Matmul (1 and 3: HF32, 2: fp16).
Nothing passes through the host.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from acl_core.backend import Kernel, Launch
from acl_core.dtypes import DataType as D
from acl_core.formats import Format
from acl_core.spec.ops.matmul import operand_precision
from acl_core.spec.promotion import promote_types
from acl_core.tensor import AclTensor, contiguous_strides
from acl_rocm.driver import handle
from acl_rocm.kernels.convolution import Col2im, Epilogue, Im2col
from acl_rocm.launch import KernelArgs
from acl_rocm.ops.elementwise import Prepared
from acl_rocm.ops.matmul import WORKSPACE_BYTES, blas_view
from acl_rocm.ops.view_args import index_type, reach
from acl_rocm.providers.base import GemmCall, Matrix

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

CHUNK_BYTES = 256 << 20
"""Target size of one chunk's temporaries (column buffer, GEMM result, gathered input)."""


class Operand(NamedTuple):
    """A row-major-logical R×C matrix batch: address of its first element, dtype, strides in elements."""

    address: int
    dtype: D
    sr: int
    sc: int
    batch_stride: int


def gemm_call(m: int, n: int, k: int, a: Operand, b: Operand, d: Operand, batch: int, fast_tf32: bool) -> GemmCall:
    """The column-major GemmCall of ``D[i] = A[i] @ B[i]`` (A m×k, B k×n, D m×n, row-major terms)."""
    av, bv, dv = blas_view(m, k, a.sr, a.sc), blas_view(k, n, b.sr, b.sc), blas_view(m, n, d.sr, d.sc)
    assert av is not None and bv is not None and dv is not None and not dv.transpose, "a layout the BLAS cannot take"
    return GemmCall(
        a=Matrix(b.address, int(b.dtype), bv.rows, bv.cols, bv.ld, b.batch_stride, bv.transpose),
        b=Matrix(a.address, int(a.dtype), av.rows, av.cols, av.ld, a.batch_stride, av.transpose),
        d=Matrix(d.address, int(d.dtype), dv.rows, dv.cols, dv.ld, d.batch_stride),
        batch=batch,
        fast_tf32=fast_tf32,
    )


@dataclass(frozen=True)
class PlainChunks:
    """Chunks of a plain convolution: ``imgs`` images and ``pc`` output positions at a time."""

    imgs: int
    pc: int

    def chunks(self, batch: int, positions: int) -> list[tuple[int, int, int, int]]:
        """(first image, images, first position, positions) of every chunk, in order."""
        return [
            (n0, min(self.imgs, batch - n0), p0, min(self.pc, positions - p0))
            for n0 in range(0, batch, self.imgs)
            for p0 in range(0, positions, self.pc)
        ]


def plan_plain(
    batch: int, positions: int, c_in: int, kprod: int, c_out: int, gemm_bytes: int, budget: int
) -> PlainChunks:
    """Chunk sizes keeping im2col's columns (``c_in*kprod`` values) plus fp32 results (``c_out``) within ``budget``."""
    per_column = c_in * kprod * gemm_bytes + c_out * 4
    columns = max(1, budget // max(per_column, 1))
    if columns >= positions:
        return PlainChunks(max(1, min(batch, columns // positions)), positions)
    return PlainChunks(1, columns)


@dataclass(frozen=True)
class TransposedChunks:
    """Chunks of a transposed convolution: ``imgs`` images × ``gc`` groups × ``occ`` channels per group."""

    imgs: int
    gc: int
    occ: int

    def chunks(self, batch: int, groups: int, per_group: int) -> list[tuple[int, int, int, int, int, int]]:
        """(first image, images, first group, groups, first channel in group, channels) of every chunk."""
        return [
            (n0, min(self.imgs, batch - n0), g0, min(self.gc, groups - g0), o0, min(self.occ, per_group - o0))
            for n0 in range(0, batch, self.imgs)
            for g0 in range(0, groups, self.gc)
            for o0 in range(0, per_group, self.occ)
        ]


def plan_transposed(
    batch: int, groups: int, cg: int, ocg: int, kprod: int, lprod: int, gemm_bytes: int, budget: int
) -> TransposedChunks:
    """Chunk sizes keeping the fp32 columns and the gathered input chunk within ``budget``."""
    per_group = ocg * kprod * lprod * 4 + cg * lprod * gemm_bytes
    per_image = groups * per_group
    if per_image <= budget:
        return TransposedChunks(max(1, min(batch, budget // max(per_image, 1))), groups, ocg)
    if per_group <= budget:
        return TransposedChunks(1, max(1, budget // per_group), ocg)
    room = budget - cg * lprod * gemm_bytes
    return TransposedChunks(1, 1, max(1, min(ocg, room // max(kprod * lprod * 4, 1))))


def _itemsize(dtype: D) -> int:
    return dtype.info.storage_bits // 8


class ConvolutionRunner:
    """Turns Convolution Launches into im2col/col2im kernels, provider GEMMs and epilogues."""

    def __init__(self, backend: RocmBackend) -> None:
        self.backend = backend
        self.chunk_bytes = CHUNK_BYTES

    def kernels(self) -> dict[str, Kernel]:
        """Convolution, when the provider's GEMM works here."""
        if self.backend.provider.gemm_unavailable() is not None:
            return {}
        return {"Convolution": self.run}

    # ------------------------------------------------------------------ launching
    def _launch(self, kernel: Any, meta: Sequence[int], values: Sequence[Any], numel: int, stream: int) -> None:
        function = self.backend.function(kernel.source(), kernel.kernel_name)
        args = KernelArgs([KernelArgs.index_array(list(meta), kernel.index_type), *values])
        prepared = Prepared(function, self.backend.elementwise_config(numel, 1), args)
        self.backend.elementwise.launch_prepared(prepared, stream)

    def _gemm(self, call: GemmCall, stream: int) -> None:
        provider = self.backend.provider
        workspace = provider.malloc_async(WORKSPACE_BYTES, stream)
        try:
            provider.gemm(call, workspace, WORKSPACE_BYTES, stream)
        finally:
            provider.free_async(workspace, stream)

    def _temp(self, nbytes: int, stream: int, temps: list[int]) -> int:
        """A stream-ordered temporary, recorded in ``temps`` (freed by the caller, also when a later step fails)."""
        address = self.backend.provider.malloc_async(nbytes, stream)
        temps.append(address)
        return address

    def _dense(self, t: AclTensor, dtype: D, rounding: str | None, stream: int, temps: list[int]) -> int:
        """Address of ``t`` as a contiguous ``dtype`` tensor, converted into a temporary when it is not one already."""
        if t.dtype == dtype and rounding is None and tuple(t.strides) == contiguous_strides(t.view_dims):
            return t.data + t.offset * _itemsize(t.dtype)
        address = self.backend.provider.malloc_async(max(t.numel, 1) * _itemsize(dtype), stream)
        temps.append(address)
        shape = tuple(t.view_dims)
        dense = AclTensor(shape, dtype, contiguous_strides(shape), 0, Format.ACL_FORMAT_ND, shape, address)
        self.backend.elementwise.convert(t, dense, stream, rounding or "Cast")
        return address

    # ------------------------------------------------------------------ the op
    def run(self, launch: Launch) -> None:
        """Enqueue one convolution (plain or transposed) on the launch's stream."""
        args, plan = launch.args, launch.plan
        x, w, out = args["input"], args["weight"], args["output"]
        bias = args.get("bias")
        assert isinstance(x, AclTensor) and isinstance(w, AclTensor) and isinstance(out, AclTensor)
        assert bias is None or isinstance(bias, AclTensor)
        if out.numel == 0:
            return
        compute = promote_types(x.dtype, w.dtype)
        precision = operand_precision(compute, int(args["cubeMathType"]), "Convolution", strict=False)
        gdt = D.ACL_FLOAT16 if precision == "fp16" else compute
        fast = self.backend.policy.tf32_enabled and gdt == D.ACL_FLOAT and precision is None
        stream = handle(launch.stream)
        temps: list[int] = []
        try:
            rounding = "RoundHf32" if precision == "hf32" else None
            weight = self._dense(w, gdt, rounding, stream, temps)
            conv = _Conv.of(x, w, out, bias, plan)
            if plan["transposed"]:
                self._transposed(conv, x, weight, gdt, rounding, fast, stream, temps)
            else:
                self._plain(conv, x, weight, gdt, precision == "hf32", fast, stream)
        finally:
            for address in temps:
                self.backend.provider.free_async(address, stream)

    def _plain(self, c: _Conv, x: AclTensor, weight: int, gdt: D, hf32: bool, fast: bool, stream: int) -> None:
        provider = self.backend.provider
        positions = math.prod(c.sizes)
        ck = c.cg * c.kprod
        ocg = c.c_out // c.groups
        chunking = plan_plain(c.batch, positions, c.c_in, c.kprod, c.c_out, _itemsize(gdt), self.chunk_bytes)
        out_item = _itemsize(c.out.dtype)
        out_base = c.out.data + c.out.offset * out_item
        for n0, imgs, p0, pc in chunking.chunks(c.batch, positions):
            cols = imgs * pc
            chunk_temps: list[int] = []
            try:
                col = self._temp(max(c.c_in * c.kprod * cols, 1) * _itemsize(gdt), stream, chunk_temps)
                acc = self._temp(c.c_out * cols * 4, stream, chunk_temps)
                if ck == 0:
                    provider.memset(acc, 0, c.c_out * cols * 4, stream)
                else:
                    self.im2col(c, x, (n0, imgs, p0, pc), gdt, hf32, col, stream)
                    call = gemm_call(
                        ocg,
                        cols,
                        ck,
                        Operand(weight, gdt, ck, 1, ocg * ck),
                        Operand(col, gdt, cols, 1, ck * cols),
                        Operand(acc, D.ACL_FLOAT, cols, 1, ocg * cols),
                        c.groups,
                        fast,
                    )
                    self._gemm(call, stream)
                numel = c.c_out * cols
                epilogue = Epilogue(c.out.dtype, c.bias_dtype, c.spatial, index_type(numel, reach(c.out)))
                meta = [numel, pc, p0, imgs, c.c_out, c.out.strides[0], c.out.strides[1], c.bias_stride]
                meta += [*c.sizes, *c.out.strides[2:]]
                out_chunk = out_base + n0 * c.out.strides[0] * out_item
                self._launch(
                    epilogue, meta, [KernelArgs.pointer(acc), *c.bias_arg, KernelArgs.pointer(out_chunk)], numel, stream
                )
            finally:
                for address in chunk_temps:
                    provider.free_async(address, stream)

    def im2col(
        self, c: _Conv, x: AclTensor, chunk: tuple[int, int, int, int], gdt: D, hf32: bool, col: int, stream: int
    ) -> None:
        """The column buffer ``[C_in, Kprod, imgs, pc]`` (in ``gdt``) of one (first image, images, first position,
        positions) chunk of a plain convolution of ``x``."""
        n0, imgs, p0, pc = chunk
        numel = c.c_in * c.kprod * imgs * pc
        kernel = Im2col(x.dtype, gdt, c.spatial, index_type(max(numel, reach(x), imgs * pc)), hf32)
        meta = [numel, pc, p0, c.kprod, imgs, x.strides[0], x.strides[1]]
        meta += [*c.sizes, *c.kernel, *c.stride, *c.pad_begin, *c.dilation, *x.view_dims[2:]]
        meta += x.strides[2:]
        x_chunk = x.data + (x.offset + n0 * x.strides[0]) * _itemsize(x.dtype)
        self._launch(kernel, meta, [KernelArgs.pointer(x_chunk), KernelArgs.pointer(col)], numel, stream)

    def _transposed(
        self,
        c: _Conv,
        x: AclTensor,
        weight: int,
        gdt: D,
        rounding: str | None,
        fast: bool,
        stream: int,
        temps: list[int],
    ) -> None:
        provider = self.backend.provider
        spatial_in = tuple(x.view_dims[2:])
        lprod, oprod = math.prod(spatial_in), math.prod(c.sizes)
        ocg = c.c_out // c.groups
        gsize = _itemsize(gdt)
        chunking = plan_transposed(c.batch, c.groups, c.cg, ocg, c.kprod, lprod, gsize, self.chunk_bytes)
        out_item = _itemsize(c.out.dtype)
        out_base = c.out.data + c.out.offset * out_item
        for n0, imgs, g0, gc, o0, occ in chunking.chunks(c.batch, c.groups, ocg):
            cols = imgs * lprod
            rows = occ * c.kprod
            chunk_temps: list[int] = []
            try:
                col = self._temp(max(gc * rows * cols, 1) * 4, stream, chunk_temps)
                xg = self._temp(max(gc * c.cg * cols, 1) * gsize, stream, chunk_temps)
                if c.cg == 0:
                    provider.memset(col, 0, gc * rows * cols * 4, stream)
                else:
                    # input chunk [images, channels, *L] gathered channel-major: [channels, images, *L]
                    shape = (imgs, gc * c.cg, *spatial_in)
                    src = AclTensor(
                        shape,
                        x.dtype,
                        tuple(x.strides),
                        x.offset + n0 * x.strides[0] + g0 * c.cg * x.strides[1],
                        Format.ACL_FORMAT_ND,
                        shape,
                        x.data,
                    )
                    dst_strides = (lprod, imgs * lprod, *contiguous_strides(spatial_in))
                    dst = AclTensor(shape, gdt, dst_strides, 0, Format.ACL_FORMAT_ND, shape, xg)
                    self.backend.elementwise.convert(src, dst, stream, rounding or "Cast")
                    w_group = c.cg * ocg * c.kprod  # weight [C_in, OCg, *K]: W_g is cg × (ocg*kprod)
                    a_start = weight + ((g0 * w_group) + o0 * c.kprod) * gsize
                    call = gemm_call(
                        rows,
                        cols,
                        c.cg,
                        Operand(a_start, gdt, 1, ocg * c.kprod, w_group),
                        Operand(xg, gdt, cols, 1, c.cg * cols),
                        Operand(col, D.ACL_FLOAT, cols, 1, rows * cols),
                        gc,
                        fast,
                    )
                    self._gemm(call, stream)
                numel = imgs * gc * occ * oprod
                kernel = Col2im(c.out.dtype, c.bias_dtype, c.spatial, index_type(numel, gc * rows * cols, reach(c.out)))
                meta = [numel, oprod, occ, gc, imgs, c.kprod, lprod, ocg, g0, o0, c.out.strides[0], c.out.strides[1]]
                meta += [c.bias_stride, *c.sizes, *c.out.strides[2:], *c.kernel, *c.stride, *c.pad_begin]
                meta += [*c.dilation, *spatial_in]
                out_chunk = out_base + n0 * c.out.strides[0] * out_item
                self._launch(
                    kernel, meta, [KernelArgs.pointer(col), *c.bias_arg, KernelArgs.pointer(out_chunk)], numel, stream
                )
            finally:
                for address in chunk_temps:
                    provider.free_async(address, stream)


@dataclass(frozen=True)
class _Conv:
    """The geometry of one convolution call, read from the validated plan."""

    batch: int
    c_in: int
    c_out: int
    groups: int
    cg: int
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    pad_begin: tuple[int, ...]
    sizes: tuple[int, ...]
    out: AclTensor
    bias: AclTensor | None

    @classmethod
    def of(cls, x: AclTensor, w: AclTensor, out: AclTensor, bias: AclTensor | None, plan: dict[str, Any]) -> _Conv:
        """The geometry of a validated call."""
        groups = int(plan["groups"])
        return cls(
            batch=x.view_dims[0],
            c_in=x.view_dims[1],
            c_out=out.view_dims[1],
            groups=groups,
            cg=x.view_dims[1] // groups,
            kernel=tuple(w.view_dims[2:]),
            stride=tuple(plan["stride"]),
            dilation=tuple(plan["dilation"]),
            pad_begin=tuple(p[0] for p in plan["pads"]),
            sizes=tuple(plan["sizes"]),
            out=out,
            bias=bias,
        )

    @property
    def spatial(self) -> int:
        """Spatial rank (1, 2 or 3)."""
        return len(self.kernel)

    @property
    def kprod(self) -> int:
        """Kernel offsets per channel."""
        return math.prod(self.kernel)

    @property
    def bias_dtype(self) -> D | None:
        """The bias dtype, None without a bias."""
        return self.bias.dtype if self.bias is not None else None

    @property
    def bias_stride(self) -> int:
        """The bias's element stride (0 without a bias)."""
        return self.bias.strides[0] if self.bias is not None else 0

    @property
    def bias_arg(self) -> list[ctypes.c_void_p]:
        """The bias pointer argument, when there is a bias."""
        if self.bias is None:
            return []
        return [KernelArgs.pointer(self.bias.data + self.bias.offset * _itemsize(self.bias.dtype))]


RUNNER = ConvolutionRunner

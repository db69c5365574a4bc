"""ConvolutionBackward on the GPU: the forward family's im2col / col2im kernels and batched GEMMs, turned around.

With ``a`` the operand the convolution reads and ``b`` the one it writes (plain: ``a`` = input,
``b`` = gradOutput; transposed: the reverse, since a transposed convolution's input gradient is a
plain convolution of gradOutput):

* gradInput: a plain convolution's is the transposed convolution of gradOutput with the same weight
  (the forward runner's GEMM + col2im path), a transposed one's the plain convolution of gradOutput
  (its im2col + GEMM + epilogue path), both cropped to the input's size by the geometry;
* gradWeight: per chunk of (images, positions) of ``b``, the forward's im2col of ``a`` and a gather
  of ``b`` into ``[C_out, imgs, pc]``, then one GEMM batched over the groups, ``dW_g = b_g @ col_g^T``,
  into an fp32 slice; an elementwise kernel adds each chunk's slice to the running fp32 sum (in chunk
  order, two slices of memory whatever the chunk count) and, at the end, rounds once into gradWeight's view;
* gradBias: the reduction family's ``reduce`` row kernel summing gradOutput over every dim but the channel.

Everything stays on the device, stream-ordered; ``cubeMathType`` acts as for the forward op. On NVIDIA, by default
(``ACL_CONV_GRAD_PATH=cudnn``; ``gemm`` for the path above) gradInput and gradWeight run on cuDNN where
:func:`~acl_rocm.ops.conv_grad_cudnn.cudnn_refusal` and cuDNN's own support allow
(:mod:`acl_rocm.ops.conv_grad_cudnn`); the debug logger ``acl_rocm.conv_grad`` names each gradient's path and
why the GEMM path ran.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from acl_core.backend import Kernel, Launch
from acl_core.dtypes import DataType as D
from acl_core.spec.ops.matmul import operand_precision
from acl_core.spec.promotion import promote_types
from acl_core.tensor import AclTensor
from acl_rocm.driver import handle
from acl_rocm.kernels.conv_grad import GatherOut, SumParts
from acl_rocm.launch import KernelArgs
from acl_rocm.ops.conv_grad_cudnn import INPUTS, PATH_ENV, PATHS, CudnnConv, cudnn_refusal, dense_like, unknown_path
from acl_rocm.ops.convolution import (
    ConvolutionRunner,
    Operand,
    _Conv,
    _itemsize,
    gemm_call,
    plan_plain,
)
from acl_rocm.ops.reduction import bind
from acl_rocm.ops.view_args import index_type, reach

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

OP = "ConvolutionBackward"
LOG = logging.getLogger("acl_rocm.conv_grad")


def geometry(a: AclTensor, b: AclTensor, w: AclTensor, plan: dict[str, Any], out: AclTensor) -> _Conv:
    """The plain convolution that reads ``a`` and writes ``b``-shaped ``out`` with weight ``w``, per the plan."""
    groups = int(plan["groups"])
    return _Conv(
        batch=a.view_dims[0],
        c_in=a.view_dims[1],
        c_out=b.view_dims[1],
        groups=groups,
        cg=a.view_dims[1] // groups,
        kernel=tuple(w.view_dims[2:]),
        stride=tuple(plan["stride"]),
        dilation=tuple(plan["dilation"]),
        pad_begin=tuple(p[0] for p in plan["pads"]),
        sizes=tuple(b.view_dims[2:]),
        out=out,
        bias=None,
    )


class ConvolutionGradRunner:
    """Turns ConvolutionBackward Launches into the forward runner's kernels, GEMMs and row reductions."""

    def __init__(self, backend: RocmBackend) -> None:
        self.backend = backend
        self.cudnn = CudnnConv(backend)
        self.path_override: str | None = None
        """A path over ``ACL_CONV_GRAD_PATH``'s for calls made while set (tests, bench A/B)."""
        self.last_path: dict[str, str] = {}
        """The path each computed gradient of the latest call took ("cudnn dgrad", "cudnn wgrad hf32", "gemm", or
        "gemm (<why cuDNN refused the graph>)")."""

    def path(self) -> str:
        """The asked-for path: the override, else ``ACL_CONV_GRAD_PATH``, else "cudnn" (where it refuses: the GEMMs)."""
        value = self.path_override or str(self.backend.environ.get(PATH_ENV, "")).strip() or "cudnn"
        if value not in PATHS:
            raise unknown_path(value)
        return value

    def kernels(self) -> dict[str, Kernel]:
        """ConvolutionBackward, when the provider's GEMM works here."""
        if self.backend.provider.gemm_unavailable() is not None:
            return {}
        return {OP: self.run}

    @property
    def conv(self) -> ConvolutionRunner:
        """The forward family's runner (its kernels, GEMM wrapper, temporaries and chunk budget)."""
        runner: ConvolutionRunner = self.backend.convolution
        return runner

    def run(self, launch: Launch) -> None:
        """Enqueue the gradients outputMask asks for on the launch's stream."""
        args, plan = launch.args, launch.plan
        dy, x, w = args["gradOutput"], args["input"], args["weight"]
        assert isinstance(dy, AclTensor) and isinstance(x, AclTensor) and isinstance(w, AclTensor)
        want_input, want_weight, want_bias = plan["output_mask"]
        compute = promote_types(promote_types(dy.dtype, x.dtype), w.dtype)
        precision = operand_precision(compute, int(args["cubeMathType"]), OP, strict=False)
        gdt = D.ACL_FLOAT16 if precision == "fp16" else compute
        fast = self.backend.policy.tf32_enabled and gdt == D.ACL_FLOAT and precision is None
        hf32 = precision == "hf32"
        stream = handle(launch.stream)
        transposed = bool(plan["transposed"])
        a, b = (dy, x) if transposed else (x, dy)
        gx, gw, gb = (args.get(n) for n in ("gradInput", "gradWeight", "gradBias"))
        gx = gx if want_input and isinstance(gx, AclTensor) and gx.numel else None
        gw = gw if want_weight and isinstance(gw, AclTensor) and gw.numel else None
        path = self.path()
        why = self._cudnn_refusal(launch, path, precision, gx, gw)
        paths: dict[str, str] = {}
        temps: list[int] = []
        try:
            rounded: dict[int, AclTensor] = {}
            hf32_copy = (lambda t: self._hf32_copy(t, stream, temps, rounded)) if hf32 else None
            route = functools.partial(
                self._cudnn,
                plan=plan,
                tf32=fast,
                deterministic=path != "cudnn-nondet",
                stream=stream,
                why=why,
                paths=paths,
                hf32=hf32_copy,
            )
            if gx is not None and not route("fprop" if transposed else "dgrad", (dy, w, gx), "gradInput"):
                weight = self.conv._dense(w, gdt, "RoundHf32" if hf32 else None, stream, temps)
                c = geometry(dy, x, w, plan, gx)
                if transposed:
                    self.conv._plain(c, dy, weight, gdt, hf32, fast, stream)
                else:
                    rounding = "RoundHf32" if hf32 else None
                    self.conv._transposed(c, dy, weight, gdt, rounding, fast, stream, temps)
            if gw is not None and not route("wgrad", (a, b, gw), "gradWeight"):
                self._weight(geometry(a, b, w, plan, gw), a, b, gdt, hf32, fast, stream, temps)
            if want_bias and isinstance(gb, AclTensor) and gb.numel:
                self._sum(dy, gb, (1,), stream)
        finally:
            for address in temps:
                self.backend.provider.free_async(address, stream)
        self.last_path = paths
        if paths and LOG.isEnabledFor(logging.DEBUG):
            chosen = ", ".join(f"{name} {taken}" for name, taken in paths.items())
            shapes = (list(x.view_dims), list(w.view_dims))
            LOG.debug("%s %s x%s w%s: %s (%s)", OP, dy.dtype.short, *shapes, chosen, why or "cuDNN takes the call")

    def _cudnn_refusal(self, launch: Launch, path: str, precision: str | None, gx: Any, gw: Any) -> str | None:
        """Why the call's gradients take the GEMM path (None: they may try cuDNN)."""
        if not path.startswith("cudnn"):
            return f"{PATH_ENV}={path}"
        why = self.cudnn.refusal()
        if why is None:
            args, plan = launch.args, launch.plan
            tensors = {name: args[name] for name in INPUTS}
            tensors |= {name: t for name, t in (("gradInput", gx), ("gradWeight", gw)) if t is not None}
            padding = tuple(plan.get("output_padding", ()))
            why = cudnn_refusal(tensors, precision, bool(plan["transposed"]), tuple(plan["stride"]), padding)
        return None if why is None else f"cuDNN: {why}"

    def _cudnn(
        self,
        op: str,
        tensors: tuple[AclTensor, AclTensor, AclTensor],
        name: str,
        *,
        plan: dict[str, Any],
        tf32: bool,
        deterministic: bool,
        stream: int,
        why: str | None,
        paths: dict[str, str],
        hf32: Callable[[AclTensor], AclTensor] | None,
    ) -> bool:
        """Run one gradient's cuDNN graph when the call may and cuDNN builds it; record the path taken.

        ``hf32``: the operands go to cuDNN HF32-rounded in dense float32 copies (made once the graph is built), as the
        GEMM path rounds them; the graph then runs them in float32 without TF32.
        """
        paths[name] = "gemm"
        if why is not None:
            return False
        a, b, out = tensors
        operands = (a, b) if hf32 is None else (dense_like(a), dense_like(b))
        pads, stride, dilation = tuple(plan["pads"]), tuple(plan["stride"]), tuple(plan["dilation"])
        key = self.cudnn.key(op, *operands, out, pads, stride, dilation, tf32, deterministic)
        built = self.cudnn.graph(key)
        if isinstance(built, str):
            paths[name] = f"gemm ({built})"
            return False
        if hf32 is not None:
            a, b = hf32(a), hf32(b)
        self.cudnn.run(built, key, (a, b, out), stream)
        paths[name] = f"cudnn {op}" + (" hf32" if hf32 is not None else "")
        return True

    def _hf32_copy(self, t: AclTensor, stream: int, temps: list[int], made: dict[int, AclTensor]) -> AclTensor:
        """``t`` HF32-rounded into a dense float32 temporary, once per call (gradOutput serves both gradients)."""
        found = made.get(id(t))
        if found is None:
            at = self.conv._dense(t, D.ACL_FLOAT, "RoundHf32", stream, temps)
            found = made[id(t)] = dense_like(t, at)
        return found

    def _weight(
        self, c: _Conv, a: AclTensor, b: AclTensor, gdt: D, hf32: bool, fast: bool, stream: int, temps: list[int]
    ) -> None:
        """gradWeight of the plain convolution ``c`` reading ``a`` and writing ``b``: chunked GEMMs, then one sum."""
        gw = c.out
        positions = math.prod(c.sizes)
        ck, ocg = c.cg * c.kprod, c.c_out // c.groups
        gsize = _itemsize(gdt)
        chunks = plan_plain(c.batch, positions, c.c_in, c.kprod, c.c_out, gsize, self.conv.chunk_bytes)
        parts = chunks.chunks(c.batch, positions)
        if not parts or ck == 0:
            self.backend.elementwise.zero(gw, stream)
            return
        slice_elems = c.c_out * ck
        # two fp32 slices: the running sum and the latest chunk's GEMM result, added in chunk order
        partial = self.conv._temp(min(len(parts), 2) * slice_elems * 4, stream, temps)
        for index, (n0, imgs, p0, pc) in enumerate(parts):
            cols = imgs * pc
            chunk_temps: list[int] = []
            try:
                col = self.conv._temp(max(c.c_in * c.kprod * cols, 1) * gsize, stream, chunk_temps)
                gathered = self.conv._temp(max(c.c_out * cols, 1) * gsize, stream, chunk_temps)
                self.conv.im2col(c, a, (n0, imgs, p0, pc), gdt, hf32, col, stream)
                self._gather(c, b, (n0, imgs, p0, pc), gdt, hf32, gathered, stream)
                call = gemm_call(
                    ocg,
                    ck,
                    cols,
                    Operand(gathered, gdt, cols, 1, ocg * cols),
                    Operand(col, gdt, 1, cols, ck * cols),
                    Operand(partial + min(index, 1) * slice_elems * 4, D.ACL_FLOAT, ck, 1, ocg * ck),
                    c.groups,
                    fast,
                )
                self.conv._gemm(call, stream)
                if index:  # running sum += this chunk's slice, in place
                    self._sum_parts(partial, 2, slice_elems, partial, D.ACL_FLOAT, (slice_elems,), (1,), stream)
            finally:
                for address in chunk_temps:
                    self.backend.provider.free_async(address, stream)
        out = gw.data + gw.offset * _itemsize(gw.dtype)
        self._sum_parts(partial, 1, slice_elems, out, gw.dtype, tuple(gw.view_dims), tuple(gw.strides), stream)

    def _sum_parts(
        self,
        part: int,
        parts: int,
        slice_elems: int,
        out: int,
        dtype: D,
        shape: tuple[int, ...],
        strides: tuple[int, ...],
        stream: int,
    ) -> None:
        """``out`` (a view of ``shape``/``strides``) = the sum of ``parts`` fp32 slices at ``part``, rounded once."""
        extent = sum((d - 1) * abs(st) for d, st in zip(shape, strides) if d > 0)
        kernel = SumParts(dtype, len(shape), index_type(parts * slice_elems, extent))
        meta = [slice_elems, parts, slice_elems, *shape, *strides]
        self.conv._launch(kernel, meta, [KernelArgs.pointer(part), KernelArgs.pointer(out)], slice_elems, stream)

    def _gather(
        self, c: _Conv, b: AclTensor, chunk: tuple[int, int, int, int], gdt: D, hf32: bool, dst: int, stream: int
    ) -> None:
        """``dst[oc, img, pp] = b[n0 + img, oc, p0 + pp]`` in ``gdt``: one chunk of ``b`` in the GEMM's layout."""
        n0, imgs, p0, pc = chunk
        numel = c.c_out * imgs * pc
        kernel = GatherOut(b.dtype, gdt, c.spatial, index_type(numel, reach(b)), hf32)
        meta = [numel, pc, p0, imgs, b.strides[0], b.strides[1], *c.sizes, *b.strides[2:]]
        src = b.data + (b.offset + n0 * b.strides[0]) * _itemsize(b.dtype)
        self.conv._launch(kernel, meta, [KernelArgs.pointer(src), KernelArgs.pointer(dst)], numel, stream)

    def _sum(self, src: AclTensor, out: AclTensor, kept: tuple[int, ...], stream: int) -> None:
        """``out`` = ``src`` summed over every dim not in ``kept`` (fp32 accumulation, one rounding into ``out``)."""
        rows = self.backend.reduction
        inner = tuple(d for d in range(src.rank) if d not in kept)
        source = bind("self", src, [src.strides[d] for d in kept], [src.strides[d] for d in inner])
        target = bind("out", out, out.strides, (0,) * len(inner), write=True)
        options: list[tuple[str, str | int | bool]] = [("op", "sum"), ("dtype", int(src.dtype))]
        outer_shape = tuple(src.view_dims[d] for d in kept)
        inner_shape = tuple(src.view_dims[d] for d in inner)
        rows.enqueue(rows.plan(OP, "reduce", [source, target], outer_shape, inner_shape, D.ACL_FLOAT, options), stream)


RUNNER = ConvolutionGradRunner

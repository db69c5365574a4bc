"""AscendQuant(V3), AscendAntiQuant, DynamicQuant(V2) and DynamicMxQuant on the GPU, one launch each.

The rules (FLOAT32 arithmetic rounded per operation, round-half-even / ceil / floor / trunc with
saturation, AscendQuantV3's FLOAT8 overflow to NaN / Inf, DynamicQuant's zero rows, cumulative
``groupIndexOptional`` counts, asymmetric mode chosen by ``offsetOut``, DynamicMxQuant's OCP and
scaleAlg-1 E8M0 scales with NaN/Inf blocks at 0xFF) are the reference's
(:mod:`acl_reference.kernels.quant`); validation already refused what the spec does not implement.
Every tensor is read through its own view. Per-row and per-block reductions happen inside the one
kernel of each op; nothing passes through the host.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from acl_core.backend import Kernel, Launch
from acl_core.dtypes import DataType as D
from acl_core.tensor import AclTensor
from acl_rocm.kernels.quant import (
    ANTI_INPUTS,
    BLOCK_THREADS,
    LP_MODES,
    QUANT_OUTPUTS,
    ROUND_CODES,
    WIDE_FLOATS,
    AntiQuant,
    AscendQuant,
    DynamicMxQuant,
    DynamicQuant,
)
from acl_rocm.launch import KernelArgs, LaunchConfig, longs
from acl_rocm.ops.program import Program, Step, program_kernels
from acl_rocm.ops.sort import refuse
from acl_rocm.views import broadcast_strides

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

OPS: tuple[str, ...] = (
    "AscendQuant",
    "AscendQuantV3",
    "AscendAntiQuant",
    "DynamicQuant",
    "DynamicQuantV2",
    "DynamicMxQuant",
)
"""The aclnn operators this module runs."""

Shape = tuple[int, ...]


def _tensor(launch: Launch, name: str) -> AclTensor | None:
    t = launch.args.get(name)
    return t if isinstance(t, AclTensor) else None


def _need(launch: Launch, name: str) -> AclTensor:
    t = _tensor(launch, name)
    assert t is not None, name
    return t


def _ptr(t: AclTensor | None) -> ctypes.c_void_p:
    """The tensor's allocation (element offsets travel in Meta.base), or null."""
    return KernelArgs.pointer(t.data if t is not None else 0)


def param_strides(t: AclTensor, shape: Shape, axis: int | None) -> list[int]:
    """Strides of a scale/offset over ``shape``: a 1-D one runs along ``axis`` (size 1: everywhere), else broadcast."""
    if t.rank == 1:
        strides = [0] * len(shape)
        if axis is not None and t.shape[0] != 1:
            strides[axis] = t.strides[0]
        return strides
    return list(broadcast_strides(t.view_dims, t.strides, shape))


def _space(shape: Sequence[int], rows: list[list[int]]) -> tuple[Shape, list[list[int]]]:
    """A rank-0 space as one element (every stride 0)."""
    if len(shape):
        return tuple(shape), rows
    return (1,), [[0] for _ in rows]


class QuantRunner:
    """The quantisation operators (not the matmuls) on one backend."""

    def __init__(self, backend: RocmBackend) -> None:
        self.backend = backend

    def kernels(self) -> dict[str, Kernel]:
        """A kernel per op name."""
        return program_kernels(self.backend, "quant", {op: partial(self.plan, op) for op in OPS})

    # ------------------------------------------------------------------ helpers
    def _meta(self, n: int, shape: Shape, rows: list[list[int]], bases: list[int]) -> list[Any]:
        """The packed ``Meta`` followed by each row's base element offset."""
        values = [n, *shape, *(s for row in rows for s in row)]
        return [KernelArgs.index_array(values, "long long"), *longs(*bases)]

    def _step(self, prog: Program, kernel: Any, config: LaunchConfig, values: list[Any]) -> None:
        function = self.backend.function(kernel.source(), kernel.kernel_name)
        prog.steps.append(Step(function, config, tuple(values)))

    def _flat(self, n: int) -> LaunchConfig:
        return self.backend.elementwise_config(max(n, 1), 1)

    def _rows_config(self, rows: int, length: int) -> LaunchConfig:
        """One block per row: a power of two of threads, at least a warp, at most 256."""
        p = self.backend.properties
        block = max(p.warp_size, 1 << max(min(length, BLOCK_THREADS) - 1, 0).bit_length())
        block = min(block, BLOCK_THREADS)
        grid = min(max(rows, 1), p.compute_units * 16, p.max_grid_x)
        return LaunchConfig((grid, 1, 1), (block, 1, 1))

    def plan(self, op: str, launch: Launch) -> Program:
        """The launch of one call."""
        if op in ("AscendQuant", "AscendQuantV3"):
            return self._ascend_quant(op, launch)
        if op == "AscendAntiQuant":
            return self._anti_quant(op, launch)
        if op in ("DynamicQuant", "DynamicQuantV2"):
            return self._dynamic(op, launch)
        return self._mx(op, launch)

    # ------------------------------------------------------------------ ops
    def _ascend_quant(self, op: str, launch: Launch) -> Program:
        x, scale, offset, y = _need(launch, "x"), _need(launch, "scale"), _tensor(launch, "offset"), _need(launch, "y")
        if x.dtype not in WIDE_FLOATS or scale.dtype not in WIDE_FLOATS or y.dtype not in QUANT_OUTPUTS:
            raise refuse(op, f"{x.dtype.short} x, {scale.dtype.short} scale, {y.dtype.short} y")
        prog = Program()
        if y.numel == 0:
            return prog
        axis = int(launch.plan["axis"])
        xshape = tuple(x.view_dims)
        pack = 8 if y.dtype == D.ACL_INT32 else 1
        ss = param_strides(scale, xshape, axis)
        os_ = param_strides(offset, xshape, axis) if offset is not None else [0] * len(xshape)
        xs = list(x.strides)
        lasts = (xs[-1], ss[-1], os_[-1])
        rows = [xs, list(y.strides), ss, os_]
        for row in (rows[0], rows[2], rows[3]):
            row[-1] *= pack
        if offset is None:
            rows = rows[:3]
        shape = tuple(y.view_dims)
        kernel = AscendQuant(x.dtype, scale.dtype, offset is not None, y.dtype, len(shape))
        flags = [ctypes.c_int(ROUND_CODES[str(launch.args["roundMode"])]), ctypes.c_int(bool(launch.args["sqrtMode"]))]
        bases = [x.offset, y.offset, scale.offset] + ([offset.offset] if offset is not None else [])
        args = [*self._meta(y.numel, shape, rows, bases), _ptr(x), _ptr(scale), _ptr(offset), _ptr(y)]
        self._step(prog, kernel, self._flat(y.numel), [*args, *longs(*lasts), *flags])
        return prog

    def _anti_quant(self, op: str, launch: Launch) -> Program:
        x, scale, offset, y = _need(launch, "x"), _need(launch, "scale"), _tensor(launch, "offset"), _need(launch, "y")
        if x.dtype not in ANTI_INPUTS or y.dtype not in (D.ACL_FLOAT16, D.ACL_BF16):
            raise refuse(op, f"{x.dtype.short} x, {y.dtype.short} y")
        prog = Program()
        if y.numel == 0:
            return prog
        axis = launch.plan["axis"]
        shape = tuple(y.view_dims)
        ax = None if axis is None else len(shape) + int(axis)
        xs = list(x.strides)
        xl = 0
        if x.dtype == D.ACL_INT32:
            xl, xs[-1] = xs[-1], 0
        rows = [xs, list(y.strides), param_strides(scale, shape, ax)]
        if offset is not None:
            rows.append(param_strides(offset, shape, ax))
        space, rows = _space(shape, rows)
        kernel = AntiQuant(x.dtype, scale.dtype, offset is not None, y.dtype, len(space))
        bases = [x.offset, y.offset, scale.offset] + ([offset.offset] if offset is not None else [])
        args = [*self._meta(y.numel, space, rows, bases), _ptr(x), _ptr(scale), _ptr(offset), _ptr(y)]
        sqrt_mode = ctypes.c_int(bool(launch.args["sqrtMode"]))
        self._step(prog, kernel, self._flat(y.numel), [*args, *longs(xl), sqrt_mode])
        return prog

    def _dynamic(self, op: str, launch: Launch) -> Program:
        x, y, scale_out = _need(launch, "x"), _need(launch, "yOut"), _need(launch, "scaleOut")
        smooth, group = _tensor(launch, "smoothScalesOptional"), _tensor(launch, "groupIndexOptional")
        offset_out = _tensor(launch, "offsetOut")
        dst: D = launch.plan["dst"]
        symmetric = bool(launch.plan["symmetric"])
        if x.dtype not in (D.ACL_FLOAT16, D.ACL_BF16) or dst not in QUANT_OUTPUTS:
            raise refuse(op, f"{x.dtype.short} x to {dst.short}")
        prog = Program()
        outer = tuple(x.view_dims[:-1])
        rows_n = scale_out.numel
        if rows_n == 0:
            return prog
        c = x.view_dims[-1]
        strides = [list(x.strides[:-1]), list(y.strides[:-1]), list(scale_out.strides)]
        bases = [x.offset, y.offset, scale_out.offset]
        if not symmetric:
            assert offset_out is not None
            strides.append(list(offset_out.strides))
            bases.append(offset_out.offset)
        sc = sg = s0 = 0
        if smooth is not None:
            s0, sc = smooth.offset, smooth.strides[-1]
            sg = smooth.strides[0] if smooth.rank == 2 else 0
        gbase, gs, groups = (group.offset, group.strides[0], group.shape[0]) if group is not None else (0, 0, 0)
        kernel = DynamicQuant(x.dtype, dst, smooth is not None, group is not None, symmetric, len(outer))
        args: list[Any] = [*self._meta(rows_n, outer, strides, bases), _ptr(x), *longs(x.strides[-1], c)]
        args += [_ptr(smooth), *longs(sc, sg, s0), _ptr(group), *longs(gbase, gs, groups)]
        args += [_ptr(y), *longs(y.strides[-1]), _ptr(scale_out), _ptr(offset_out)]
        self._step(prog, kernel, self._rows_config(rows_n, c), args)
        return prog

    def _mx(self, op: str, launch: Launch) -> Program:
        x, y, mx = _need(launch, "x"), _need(launch, "yOut"), _need(launch, "mxscaleOut")
        axis, bs, dst = int(launch.plan["axis"]), int(launch.plan["blocksize"]), launch.plan["dst"]
        mode = str(launch.plan["mode"])
        if x.dtype not in WIDE_FLOATS or dst not in (D.ACL_FLOAT8_E4M3FN, D.ACL_FLOAT8_E5M2, D.ACL_FLOAT4_E2M1):
            raise refuse(op, f"{x.dtype.short} x to {dst.short}")
        prog = Program()
        n = x.view_dims[axis]
        blocks = -(-n // bs)
        pairs = -(-blocks // 2)
        space = list(x.view_dims)
        space[axis] = 2 * pairs
        total = 1
        for d in space:
            total *= d
        if total == 0:
            return prog
        xs, ys = list(x.strides), list(y.strides)
        xa, ya = xs[axis], ys[axis]
        xs[axis] *= bs
        ys[axis] *= bs
        ms = list(mx.strides[:-1])
        sa, sp = ms[axis], mx.strides[-1]
        ms[axis] = 0
        kernel = DynamicMxQuant(x.dtype, dst, int(launch.plan["alg"]), len(space), axis)
        meta = self._meta(total, tuple(space), [xs, ys, ms], [x.offset, y.offset, mx.offset])
        args = [*meta, _ptr(x), _ptr(y), _ptr(mx), *longs(n, bs, xa, ya, sa, sp), ctypes.c_int(LP_MODES[mode])]
        self._step(prog, kernel, self._flat(total), args)
        return prog


RUNNER = QuantRunner

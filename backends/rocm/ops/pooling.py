"""Pooling on the GPU: one kernel launch per call (:mod:`acl_rocm.kernels.pooling`), no temporaries, no host copies.

A forward op runs one thread per output element over its window; a backward op one thread per input
element gathering from the windows that cover it (deterministic, no atomics). The kernel, its launch
configuration and its packed arguments (the ``Meta`` struct and the tensors' addresses, which a
validated signature fixes) are planned once per signature and kept in ``launch.memo``; a repeated call
is one provider launch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from acl_core.backend import Kernel, Launch
from acl_core.dtypes import DataType as D
from acl_core.spec.ops.pooling import BY_NAME, GLOBAL, MAX_POOL, Geometry, Pool
from acl_core.tensor import AclTensor
from acl_rocm.driver import handle
from acl_rocm.kernels.pooling import PoolKernel
from acl_rocm.kernels.reduction import acc_dtype
from acl_rocm.launch import KernelArgs
from acl_rocm.ops.binding import family_key, memo_plan, named_kernels
from acl_rocm.ops.elementwise import Prepared
from acl_rocm.ops.reduction import bind, reduced_strides, split
from acl_rocm.ops.view_args import address, index_type, lead_strides, plane_meta, reach

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

OPS: tuple[str, ...] = (*sorted(BY_NAME), *sorted(GLOBAL), MAX_POOL)
"""The aclnn operators this module runs."""
ONNX_MAX_POOL = Pool(MAX_POOL, "", "max", 2, "strides", "pads", "out", "", frozenset(), indices_out="")
"""MaxPool as a row of the table: a 2-D max pool writing values only (its geometry holds the begin pads)."""


def plan_meta(geo: Geometry, read: AclTensor, written: AclTensor, indices: AclTensor | None) -> list[int]:
    """The kernel's Meta fields in order: ``n``, the scalars, then the per-dim rows (kernels.pooling.SCALARS / ROWS)."""
    s = geo.spatial
    is_ = lead_strides(indices, s) if indices is not None else (0, 0)
    istride = list(indices.strides[-s:]) if indices is not None else [0] * s
    meta = [*plane_meta(read, written, s, geo.lead[-1]), *is_, geo.divisor, int(geo.count_include_pad)]
    meta += [*geo.kernel, *geo.stride, *geo.pad, *geo.dilation, *geo.lengths, *geo.sizes]
    meta += [*read.strides[-s:], *written.strides[-s:], *istride]
    return meta


class PoolingRunner:
    """Turns pooling-family Launches into one kernel launch each."""

    def __init__(self, backend: RocmBackend) -> None:
        self.backend = backend

    def kernels(self) -> dict[str, Kernel]:
        """A kernel per pooling op."""
        return named_kernels(OPS, self._run)

    def _run(self, op: str, launch: Launch) -> None:
        bound = memo_plan(launch, family_key(self.backend, "pooling"), lambda: self._bound(op, launch))
        bound(handle(launch.stream))  # a signature holds the tensors' addresses: its launch is bound once

    def _bound(self, op: str, launch: Launch) -> Callable[[int], None]:
        if op in GLOBAL:
            prepared = self.plan_global(op, launch)
        else:
            prepared = self.plan(*BY_NAME.get(op, (ONNX_MAX_POOL, False)), launch)
        return self.backend.elementwise.bind(prepared)

    def plan_global(self, op: str, launch: Launch) -> Prepared | None:
        """A global pool: the reduction family's row kernel, one row per (n, c) plane (mean, or max with NaN)."""
        x, out = launch.args["self"], launch.args["out"]
        assert isinstance(x, AclTensor) and isinstance(out, AclTensor)
        mode = GLOBAL[op][0]
        dims = tuple(range(2, x.rank))
        outer_shape, inner_shape, xo, xi = split(x, dims)
        zeros = (0,) * len(inner_shape)
        bound = [bind("self", x, xo, xi), bind("out", out, reduced_strides(out, x.rank, (0, 1)), zeros, write=True)]
        acc = (
            acc_dtype([x.dtype, out.dtype])
            if mode == "mean"
            else (D.ACL_DOUBLE if x.dtype == D.ACL_DOUBLE else D.ACL_FLOAT)
        )
        options: list[tuple[str, str | int | bool]] = [("op", mode), ("dtype", int(x.dtype))]
        rows = self.backend.reduction
        return rows.prepare(rows.plan(op, "reduce", bound, outer_shape, inner_shape, acc, options))

    def plan(self, pool: Pool, backward: bool, launch: Launch) -> Prepared:
        """The kernel, its configuration and its packed arguments for one signature."""
        args = launch.args
        geo: Geometry = launch.plan["pool"]
        x = args["gradOutput" if backward else "self"]
        written = args[pool.backward_out if backward else pool.forward_out]
        named = "indices" if backward else pool.indices_out
        indices = args.get(named) if pool.kind == "max" and named else None
        assert isinstance(x, AclTensor) and isinstance(written, AclTensor)
        assert indices is None or isinstance(indices, AclTensor)
        meta = plan_meta(geo, x, written, indices)
        # adaptive windows multiply a position by a size: (o + 1)·L and (p + 1)·O must fit too
        products = [(n + 1) * o for n, o in zip(geo.lengths, geo.sizes)] if geo.adaptive else []
        extents = [meta[0], abs(geo.divisor), reach(x), reach(written), *products]
        extents += [reach(indices)] if indices is not None else []
        idx = index_type(*extents)
        mode = f"{pool.kind}_backward" if backward else pool.kind
        idt = indices.dtype if indices is not None else None
        kernel = PoolKernel(mode, geo.spatial, x.dtype, idx, idt, geo.rounding, geo.adaptive)
        function = self.backend.function(kernel.source(), kernel.kernel_name)
        # the kernel's parameter order: the read tensor, max backward's indices, the written one, max's indices
        tensors = [x, *([indices] if backward and indices is not None else []), written]
        tensors += [indices] if not backward and indices is not None else []
        values: list[Any] = [KernelArgs.index_array(meta, idx)]
        values += [KernelArgs.pointer(address(t)) for t in tensors if t is not None]
        return Prepared(function, self.backend.elementwise_config(meta[0], 1), KernelArgs(values))


RUNNER = PoolingRunner

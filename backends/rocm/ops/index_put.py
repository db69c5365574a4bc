"""IndexPutImpl on the GPU: ``selfRef[indices] = values`` (or ``+=`` with accumulate), deterministic.

Index values are range-checked on the device (the flag is reported as 161002 at synchronisation).
Every element of the indexed space gets its target offset; the (offset, C-order position) pairs are
sorted with the row sorter, and each run of equal targets is applied by one thread: the last value
in C order wins for plain assignment (the reference's rule for duplicate indices), and accumulate
adds the whole run in C order in the wide type, rounding once, exactly as the reference's
``np.add.at``. A heavily repeated target is summed serially by one thread (correct, not fast).
"""

from __future__ import annotations

import ctypes
import math
from typing import TYPE_CHECKING, Any

from acl_core.backend import Kernel, Launch
from acl_core.dtypes import DataType as D
from acl_core.spec.ops.movement import advanced_index_shape
from acl_core.spec.rules import broadcast_shapes
from acl_core.tensor import AclTensor
from acl_rocm.kernels.ctypes_map import SUPPORTED
from acl_rocm.kernels.index_put import Apply, Positions
from acl_rocm.kernels.movement import Check
from acl_rocm.launch import KernelArgs
from acl_rocm.ops.program import FLAG, Program, program_kernel
from acl_rocm.ops.sort import Sorter, address, refuse
from acl_rocm.views import broadcast_strides

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

OPS: tuple[str, ...] = ("IndexPutImpl",)
"""The aclnn operators this module runs."""


def _ll(*values: int) -> list[ctypes.c_longlong]:
    return [ctypes.c_longlong(int(v)) for v in values]


class IndexPutRunner:
    """IndexPutImpl on one backend."""

    def __init__(self, backend: RocmBackend) -> None:
        self.backend = backend
        self.sorter = Sorter(backend)

    def kernels(self) -> dict[str, Kernel]:
        """A kernel per op name."""
        return {"IndexPutImpl": program_kernel(self.backend, "index_put", "IndexPutImpl", self.plan)}

    def plan(self, launch: Launch) -> Program:
        """The launches of one call."""
        op = "IndexPutImpl"
        t, lst, v = launch.args["selfRef"], launch.args["indices"], launch.args["values"]
        assert isinstance(t, AclTensor) and isinstance(lst, tuple) and isinstance(v, AclTensor)
        if t.dtype not in SUPPORTED:
            raise refuse(op, f"a {t.dtype.short} selfRef")
        accumulate = bool(launch.args["accumulate"])
        prog = Program()
        entries = [(d, e) for d, e in enumerate(lst) if e.numel != 0]
        shape, _ = advanced_index_shape(t.view_dims, [tuple(e.view_dims) if e.numel else None for e in lst])
        total = math.prod(shape)
        if total == 0 or t.numel == 0:
            return prog
        s = self.sorter
        s.check_length(op, total)
        prog.report = f"{op}: indices holds a value outside its valid range"
        for d, e in entries:
            size = t.view_dims[d]
            meta = s.meta(e.numel, tuple(e.view_dims) or (1,), [tuple(e.strides) or (0,)])
            check = Check(e.dtype, max(e.rank, 1), "long long")
            args: list[Any] = [meta, KernelArgs.pointer(address(e)), *_ll(-size, size), FLAG]
            s.step(prog, check, s.flat_config(e.numel), args)
        positions = [d for d, _ in entries]
        kept = [d for d in range(t.rank) if d not in positions]
        if entries:
            block = broadcast_shapes(*(tuple(e.view_dims) for _, e in entries), names=("indices",))
            adjacent = positions == list(range(positions[0], positions[-1] + 1))
            before = [d for d in kept if d < positions[0]] if adjacent else []
            after = [d for d in kept if d > positions[-1]] if adjacent else kept
        else:
            block, before, after = (), [], kept
        nb = len(block)
        rows = [(*(t.strides[d] for d in before), *(0,) * nb, *(t.strides[d] for d in after))]
        for _, e in entries:
            inner = broadcast_strides(e.view_dims, e.strides, block)
            rows.append((*(0,) * len(before), *inner, *(0,) * len(after)))
        space = tuple(shape) or (1,)
        rows = [r or (0,) for r in rows]
        keys, pos = prog.temp(total * 8), prog.temp(total * 4)
        kernel = Positions(tuple(e.dtype for _, e in entries), len(space))
        args = [s.meta(total, space, rows), *(KernelArgs.pointer(address(e)) for _, e in entries)]
        for d, _ in entries:
            args += _ll(t.strides[d], t.view_dims[d])
        args += [keys, pos]
        s.step(prog, kernel, s.flat_config(total), args)
        keys, pos = s.sort_temp(prog, D.ACL_INT64, keys, pos, 1, total)
        value_strides = broadcast_strides(v.view_dims, v.strides, shape) or (0,)
        apply = Apply(t.dtype, len(space), accumulate)
        args = [s.meta(total, space, [value_strides]), keys, pos, KernelArgs.pointer(address(v))]
        args += [KernelArgs.pointer(address(t)), FLAG]
        s.step(prog, apply, s.flat_config(total), args)
        return prog


RUNNER = IndexPutRunner

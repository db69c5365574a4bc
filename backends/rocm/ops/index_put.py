"""IndexPutImpl on the GPU: ``selfRef[indices] = values`` (or ``+=`` with accumulate), deterministic.

Index values are range-checked on the device (the flag is reported as 161002 at synchronisation).
Every element of the indexed space gets its target offset; the (offset, C-order position) pairs are
sorted with the row sorter, and each run of equal targets is applied by one thread: the last value
in C order wins for plain assignment (the reference's rule for duplicate indices), and accumulate
adds the whole run in C order in the wide type, rounding once, exactly as the reference's
``np.add.at``. A heavily repeated target is summed serially by one thread (correct, not fast).

A bool mask (the other entries empty) needs no sort of targets, since it names each position once:
one thread per selfRef position puts the value when its mask element is true. Values with one entry
per true element first rank the mask on the device (the row sorter compacts true elements to the
front, C order kept) and check the count against values' size there (161002 at synchronisation).
A mask beside an int index, or two masks, are refused (161002 naming them).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from acl_core.backend import Kernel, Launch
from acl_core.dtypes import DataType as D
from acl_core.spec.ops.movement import advanced_index_shape
from acl_core.spec.rules import broadcast_shapes
from acl_core.tensor import AclTensor
from acl_rocm.kernels.ctypes_map import SUPPORTED
from acl_rocm.kernels.index_put import Apply, MaskKeys, MaskPut, MaskRank, Positions
from acl_rocm.kernels.movement import Check
from acl_rocm.launch import KernelArgs, longs
from acl_rocm.ops.program import FLAG, Program, program_kernels
from acl_rocm.ops.sort import Sorter, address, refuse
from acl_rocm.views import broadcast_strides

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

OPS: tuple[str, ...] = ("IndexPutImpl", "ScatterNdUpdate")
"""The aclnn operators this module runs (ScatterNdUpdate: IndexPutImpl of its index columns, no wrapping)."""


class IndexPutRunner:
    """IndexPutImpl on one backend."""

    def __init__(self, backend: RocmBackend) -> None:
        self.backend = backend
        self.sorter = Sorter(backend)

    def kernels(self) -> dict[str, Kernel]:
        """A kernel per op name."""
        return program_kernels(
            self.backend, "index_put", {"IndexPutImpl": self.plan, "ScatterNdUpdate": self.scatter_nd_plan}
        )

    def plan(self, launch: Launch) -> Program:
        """The launches of one call."""
        op = "IndexPutImpl"
        t, lst, v = launch.args["selfRef"], launch.args["indices"], launch.args["values"]
        assert isinstance(t, AclTensor) and isinstance(lst, tuple) and isinstance(v, AclTensor)
        if t.dtype not in SUPPORTED:
            raise refuse(op, f"a {t.dtype.short} selfRef")
        accumulate = bool(launch.args["accumulate"])
        if any(e.dtype == D.ACL_BOOL and e.numel for e in lst):
            return self._mask_plan(t, lst, v, accumulate)
        return self._index_plan(op, t, lst, v, accumulate, wrap=True)

    def scatter_nd_plan(self, launch: Launch) -> Program:
        """ScatterNdUpdate: varRef's leading dims indexed by the columns of indices (views, no copy), last wins."""
        op = "ScatterNdUpdate"
        t, idx, v = launch.args["varRef"], launch.args["indices"], launch.args["updates"]
        assert isinstance(t, AclTensor) and isinstance(idx, AclTensor) and isinstance(v, AclTensor)
        if t.dtype not in SUPPORTED:
            raise refuse(op, f"a {t.dtype.short} varRef")
        if idx.numel == 0:  # no index tuple: nothing is written
            return Program()
        lead, depth = tuple(idx.view_dims[:-1]), int(idx.view_dims[-1])
        columns = tuple(
            AclTensor(
                lead,
                idx.dtype,
                tuple(idx.strides[:-1]),
                idx.offset + d * idx.strides[-1],
                idx.format,
                tuple(idx.storage_dims),
                idx.data,
            )
            for d in range(depth)
        )
        return self._index_plan(op, t, columns, v, False, wrap=False)

    def _index_plan(
        self, op: str, t: AclTensor, lst: tuple[AclTensor, ...], v: AclTensor, accumulate: bool, *, wrap: bool
    ) -> Program:
        """Integer index tensors (``lst[d]`` indexing dim d, empty: the whole dim): check, sort targets, apply."""
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
            args: list[Any] = [meta, KernelArgs.pointer(address(e)), *longs(-size if wrap else 0, size), FLAG]
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
            args += longs(t.strides[d], t.view_dims[d])
        args += [keys, pos]
        s.step(prog, kernel, s.flat_config(total), args)
        keys, pos = s.sort_temp(prog, D.ACL_INT64, keys, pos, 1, total)
        value_strides = broadcast_strides(v.view_dims, v.strides, shape) or (0,)
        apply = Apply(t.dtype, len(space), accumulate)
        args = [s.meta(total, space, [value_strides]), keys, pos, KernelArgs.pointer(address(v))]
        args += [KernelArgs.pointer(address(t)), FLAG]
        s.step(prog, apply, s.flat_config(total), args)
        return prog

    def _mask_plan(self, t: AclTensor, lst: tuple[AclTensor, ...], v: AclTensor, accumulate: bool) -> Program:
        """One bool mask (the other entries whole dims): rank the true elements, then put through the mask."""
        op = "IndexPutImpl"
        masks = [(i, e) for i, e in enumerate(lst) if e.numel]
        if len(masks) != 1:
            raise refuse(op, "a bool mask beside other non-empty indices")
        first, mask = masks[0]
        r = mask.rank
        covered = range(first, first + r)
        prog = Program()
        args: list[Any]
        # the indexed shape: selfRef's with the mask's dims replaced by one dim of `count` elements
        vdims, vstrides = list(v.view_dims), list(v.strides)
        out_rank = t.rank - r + 1
        lead = out_rank - len(vdims)
        vdims, vstrides = [1] * lead + vdims, [0] * lead + vstrides
        expect = vdims[first]
        count_stride = vstrides[first] if expect != 1 else 0
        ranked = expect != 1
        rank = prog.temp(max(mask.numel, 1) * 4)
        s = self.sorter
        if ranked:
            s.check_length(op, mask.numel)
            prog.report = f"{op}: values has {expect} entries along the mask's dim, not its count of true elements"
            keys, pos = prog.temp(mask.numel * 8), prog.temp(mask.numel * 4)
            mdims = tuple(mask.view_dims)
            args = [s.meta(mask.numel, mdims, [mask.strides]), _ptr(mask), keys, pos]
            s.step(prog, MaskKeys(r), s.flat_config(mask.numel), args)
            keys, _ = s.sort_temp(prog, D.ACL_INT64, keys, pos, 1, mask.numel)
            args = [*longs(mask.numel), keys, rank, *longs(expect), FLAG]
            s.step(prog, MaskRank(), s.flat_config(mask.numel), args)
        if t.numel == 0:
            return prog
        contiguous = [math.prod(mask.view_dims[j + 1 :]) for j in range(r)]
        rows: list[list[int]] = [list(t.strides), [], [], []]
        for d in range(t.rank):
            inside = d in covered
            rows[1].append(mask.strides[d - first] if inside else 0)
            rows[3].append(contiguous[d - first] if inside else 0)
            if inside:
                rows[2].append(0)
            else:  # the values' dim for selfRef dim d: the count dim sits at `first`
                j = d if d < first else d - r + 1
                rows[2].append(vstrides[j] if vdims[j] != 1 else 0)
        kernel = MaskPut(t.dtype, t.rank, accumulate, ranked)
        args = [s.meta(t.numel, tuple(t.view_dims), rows), _ptr(mask), rank, *longs(count_stride)]
        args += [_ptr(v), _ptr(t), FLAG]
        s.step(prog, kernel, s.flat_config(t.numel), args)
        return prog


def _ptr(t: AclTensor) -> Any:
    return KernelArgs.pointer(address(t))


RUNNER = IndexPutRunner

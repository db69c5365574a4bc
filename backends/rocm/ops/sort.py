"""Topk, Sort and Argsort on the GPU, and the row sorter the MoE and index-put ops reuse.

A row is the elements along ``dim`` (the other dims are rows, each operand keeps its own strides).
Rows of up to one tile are sorted by one block in shared memory and written straight to the outputs
(one launch); longer rows are sorted tile by tile into a stream-ordered temporary, merged pass by
pass, and the first ``count`` positions of each row emitted. The order is the reference's: stable,
NaN above +Inf, -0.0 equal to 0.0; descending complements the keys and keeps ties in position order.
Topk always returns its values sorted (valid for ``sorted=false`` too). Nothing passes through the host.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, TypeAlias

from acl_core.backend import Kernel, Launch
from acl_core.dtypes import DataType as D
from acl_core.errors import AclnnError, AclnnStatus
from acl_core.tensor import AclTensor
from acl_rocm.kernels.ctypes_map import SUPPORTED
from acl_rocm.kernels.sort import BLOCK_THREADS, TILE, EmitSorted, MergePass, TileSort, key_type
from acl_rocm.launch import KernelArgs, LaunchConfig, longs
from acl_rocm.ops.program import Program, Step, Temp, program_kernels
from acl_rocm.ops.view_args import address as address  # the index-op runners import it from here

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

OPS: tuple[str, ...] = ("Argsort", "Sort", "Topk")
"""The aclnn operators this module runs."""

MAX_LENGTH = 2**31 - 2
"""Positions travel as 32-bit ints in the sort temporaries."""
BLOCKS_PER_UNIT = 8

Address: TypeAlias = int | Temp


def refuse(op: str, what: str) -> AclnnError:
    """161002 naming what the rocm kernels cannot do."""
    return AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, f"the rocm backend cannot run {op} with {what}")


def _ptr(a: Address) -> Any:
    return a if isinstance(a, Temp) else KernelArgs.pointer(a)


class Sorter:
    """Adds row-sorting launches to a :class:`Program` (``tile`` elements per shared-memory block)."""

    def __init__(self, backend: RocmBackend, tile: int = TILE) -> None:
        self.backend = backend
        self.tile = tile

    def step(self, prog: Program, kernel: Any, config: LaunchConfig, values: Sequence[Any]) -> None:
        """Record one launch of a generated kernel (an object with ``source()`` and ``kernel_name``)."""
        function = self.backend.function(kernel.source(), kernel.kernel_name)
        prog.steps.append(Step(function, config, tuple(values)))

    def meta(self, rows: int, shape: Sequence[int], strides: Sequence[Sequence[int]]) -> ctypes.Array[Any]:
        """The packed ``Meta`` (long long fields)."""
        return KernelArgs.index_array([rows, *shape, *(s for row in strides for s in row)], "long long")

    def flat_config(self, n: int) -> LaunchConfig:
        """A grid-stride launch over ``n`` items."""
        return self.backend.elementwise_config(max(n, 1), 1)

    def tile_config(self, segments: int, width: int) -> LaunchConfig:
        """One block per tile: whole warps, about a thread per two elements, at most 256."""
        p = self.backend.properties
        warp = p.warp_size
        block = min(BLOCK_THREADS, max(warp, -(-(width // 2) // warp) * warp))
        grid = min(max(segments, 1), p.compute_units * BLOCKS_PER_UNIT, p.max_grid_x)
        return LaunchConfig((grid, 1, 1), (block, 1, 1))

    def width(self, length: int) -> int:
        """The power of two a row (or its tiles) is padded to in shared memory."""
        return 1 << max(min(length, self.tile) - 1, 0).bit_length()

    def tiles(self, length: int) -> int:
        """Tiles per row."""
        return max(-(-length // self.tile), 1)

    def check_length(self, op: str, length: int) -> None:
        """161002 for rows too long for 32-bit positions."""
        if length > MAX_LENGTH:
            raise refuse(op, f"a row of {length} elements (at most {MAX_LENGTH})")

    def _tile_args(self, length: int, inner1: int, s0: int, s1: int, count: int, vs: int, ist: int) -> list[Any]:
        return [*longs(length, inner1, s0, s1, count, vs, ist, self.tiles(length)), ctypes.c_int(self.width(length))]

    def sort_tensor(
        self,
        prog: Program,
        dtype: D,
        descending: bool,
        src: Address,
        rows: int,
        outer_shape: Sequence[int],
        outer_strides: Sequence[int],
        length: int,
        inner: tuple[int, int, int] | None = None,
        nan_last: bool = False,
    ) -> tuple[Temp, Temp]:
        """Sort the rows of a strided tensor into temporaries: (keys, positions), rows × length each.

        ``inner`` is (inner1, s0, s1): a row's element j is at ``(j // inner1) * s0 + (j % inner1) * s1``.
        """
        inner1, s0, s1 = inner if inner is not None else (1, 1, 0)
        kernel = TileSort(dtype, descending, len(outer_shape), "tensor", "temp", nan_last=nan_last, tile=self.tile)
        keys, idx = self._buffers(prog, dtype, rows * length)
        values = [self.meta(rows, outer_shape, [outer_strides]), _ptr(src), keys, idx]
        values += self._tile_args(length, inner1, s0, s1, 0, 0, 0)
        self.step(prog, kernel, self.tile_config(rows * self.tiles(length), self.width(length)), values)
        return self._merge(prog, dtype, keys, idx, rows, length)

    def sort_temp(
        self, prog: Program, key_dtype: D, keys: Temp, idx: Temp, rows: int, length: int
    ) -> tuple[Temp, Temp]:
        """Sort (key, position) pairs already in temporaries (keys of ``key_type(key_dtype)``), rows × length."""
        kernel = TileSort(key_dtype, False, 1, "temp", "temp", tile=self.tile)
        out_keys, out_idx = self._buffers(prog, key_dtype, rows * length)
        values = [self.meta(rows, (1,), [(0,)]), keys, idx, out_keys, out_idx]
        values += self._tile_args(length, 1, 1, 0, 0, 0, 0)
        self.step(prog, kernel, self.tile_config(rows * self.tiles(length), self.width(length)), values)
        return self._merge(prog, key_dtype, out_keys, out_idx, rows, length)

    def _buffers(self, prog: Program, dtype: D, n: int) -> tuple[Temp, Temp]:
        size = 8 if key_type(dtype) == "unsigned long long" else 4
        return prog.temp(n * size), prog.temp(n * 4)

    def _merge(self, prog: Program, dtype: D, keys: Temp, idx: Temp, rows: int, length: int) -> tuple[Temp, Temp]:
        if length <= self.tile:
            return keys, idx
        total = rows * length
        other_keys, other_idx = self._buffers(prog, dtype, total)
        kernel = MergePass(key_type(dtype))
        run = self.tile
        while run < length:
            values = [self.meta(total, (1,), [(0,)]), keys, idx, other_keys, other_idx, *longs(length, run)]
            self.step(prog, kernel, self.flat_config(total), values)
            keys, idx, other_keys, other_idx = other_keys, other_idx, keys, idx
            run *= 2
        return keys, idx


class SortRunner:
    """Topk, Sort and Argsort on one backend."""

    def __init__(self, backend: RocmBackend) -> None:
        self.backend = backend
        self.sorter = Sorter(backend)

    def kernels(self) -> dict[str, Kernel]:
        """A kernel per op name."""
        return program_kernels(self.backend, "sort", {op: partial(self.plan, op) for op in OPS})

    def plan(self, op: str, launch: Launch) -> Program:
        """The launches of one call."""
        t = launch.args["self"]
        assert isinstance(t, AclTensor)
        if t.dtype not in SUPPORTED:
            raise refuse(op, f"a {t.dtype.short} self")
        if op == "Argsort":
            values, indices = None, launch.args["out"]
            descending, count = bool(launch.args["descending"]), None
        else:
            values, indices = launch.args["valuesOut"], launch.args["indicesOut"]
            if op == "Topk":
                descending, count = bool(launch.args["largest"]), int(launch.args["k"])
            else:
                descending, count = bool(launch.args["descending"]), None
        assert isinstance(indices, AclTensor) and (values is None or isinstance(values, AclTensor))
        prog = Program()
        outer: list[tuple[tuple[int, ...], tuple[int, ...]]]
        if t.rank == 0:
            rows, length, outer = 1, 1, [((1,), (0,)) for _ in range(3)]
            s0, vs, ist = 0, 0, 0
        else:
            dim: int = launch.plan["dim"]
            kept = [d for d in range(t.rank) if d != dim]
            shape = tuple(t.view_dims[d] for d in kept) or (1,)
            rows, length = math.prod(shape), t.view_dims[dim]

            def outer_of(x: AclTensor | None) -> tuple[tuple[int, ...], tuple[int, ...]]:
                strides = tuple(x.strides[d] for d in kept) if x is not None else ()
                return shape, strides or (0,) * len(shape)

            outer = [outer_of(t), outer_of(values), outer_of(indices)]
            s0 = t.strides[dim]
            vs = values.strides[dim] if values is not None else 0
            ist = indices.strides[dim]
        count = length if count is None else count
        if rows * length == 0 or count == 0:
            return prog
        self.sorter.check_length(op, length)
        shape = outer[0][0]
        strides = [s for _, s in outer]
        sorter = self.sorter
        if length <= sorter.tile:
            kernel = TileSort(
                t.dtype, descending, len(shape), "tensor", "outputs", values is not None, tile=sorter.tile
            )
            args: list[Any] = [sorter.meta(rows, shape, strides), KernelArgs.pointer(address(t))]
            if values is not None:
                args.append(KernelArgs.pointer(address(values)))
            args.append(KernelArgs.pointer(address(indices)))
            args += sorter._tile_args(length, 1, s0, 0, count, vs, ist)
            sorter.step(prog, kernel, sorter.tile_config(rows, sorter.width(length)), args)
            return prog
        _, idx = sorter.sort_tensor(prog, t.dtype, descending, address(t), rows, shape, strides[0], length, (1, s0, 0))
        emit = EmitSorted(t.dtype, len(shape), values is not None)
        args = [sorter.meta(rows, shape, strides), KernelArgs.pointer(address(t)), idx]
        if values is not None:
            args.append(KernelArgs.pointer(address(values)))
        args.append(KernelArgs.pointer(address(indices)))
        args += longs(length, 1, s0, 0, count, vs, ist)
        sorter.step(prog, emit, sorter.flat_config(rows * count), args)
        return prog


RUNNER = SortRunner

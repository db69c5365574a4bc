"""StridedSlice, StridedSliceAssignV2, the RepeatInterleave family and EmbeddingDenseBackward on the GPU.

Slices and integer repeats are strided views copied by the movement family's copy kernel: a slice narrows
each dim (a negative step runs backwards) and inserts or drops dims of one; a repeat count r splits out's
repeated dim into (n, r) with the source at stride 0 along r. A repeats tensor needs its counts, which live
on the device: they are scanned into start positions (checking each count and their total against outputSize,
161002 at synchronisation; ``kernels/index_shape.py``). By default (``ACL_REPEAT_ROWS=gather8,pdl,grid``) a block
scans a chunk of them and the scan fills a row index, then each out slice loads its source slice through it
(output-major, one store per load); ``rows`` scans in one block and stores each source slice into its group's out
slices (RepeatRows); ``search``: each output element finds its source by binary search over the starts.
RepeatInterleaveGrad sums each group's slices in float32 in order.

EmbeddingDenseBackward is deterministic: the indices are checked and sorted with their positions (the row
sorter, stable), and one block per weight row sums its run of grad rows in position order in float32,
rounding once (16 bytes of columns a thread where the rows are contiguous and aligned); each row finds its run
from bounds a small kernel marks in the sorted keys; rows no index names are written as zeros, the padding row
too. No atomics.
"""

from __future__ import annotations

import ctypes
import logging
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from acl_core.backend import Kernel, Launch
from acl_core.dtypes import DataType as D
from acl_core.tensor import AclTensor
from acl_rocm.driver import handle
from acl_rocm.kernels.ctypes_map import SUPPORTED
from acl_rocm.kernels.index_shape import (
    SCAN_THREADS,
    EmbedKeys,
    EmbedRows,
    GroupSum,
    RepeatChunks,
    RepeatGather,
    RepeatRows,
    RepeatScan,
    RowBounds,
)
from acl_rocm.launch import KernelArgs, LaunchConfig, longs
from acl_rocm.ops.binding import family_key, memo_plan, named_kernels
from acl_rocm.ops.movement import MovementProgram, View, itemsize, view_of
from acl_rocm.ops.program import FLAG, Program, Step, program_kernels
from acl_rocm.ops.sort import Sorter, address, refuse
from acl_rocm.views import broadcast_strides, coalesce

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

OPS: tuple[str, ...] = (
    "StridedSlice",
    "StridedSliceAssignV2",
    "RepeatInterleave",
    "RepeatInterleaveWithDim",
    "RepeatInterleaveInt",
    "RepeatInterleaveIntWithDim",
    "RepeatInterleaveTensor",
    "RepeatInterleaveGrad",
    "EmbeddingDenseBackward",
)
"""The aclnn operators this module runs."""

ROW_THREADS = 256
REPEAT_ENV = "ACL_REPEAT_ROWS"
"""``rows``: RepeatInterleave(WithDim) with a repeats tensor copies each source slice once into its
group's out slices (``kernels/index_shape.py`` RepeatRows) instead of a binary search over the starts per out element,
and every repeats-tensor op scans its counts in coalesced tiles (RepeatScan ``items``); ``search``: the search kernel
and the plain scan. On an H100 (2026-12-07, a 128 MiB bf16 [32768, 2048], rows x1..3) ``rows`` moved 1.83 TB/s, the
search 0.78, torch 2.47. ``blocks``: the counts scanned by chunks, a block each
(:class:`RepeatChunks`, two launches), then the ``rows`` copy; ``gather``: that scan also fills a row index and the
copy runs output-major, each out slice loading its source slice through the index (one store per load);
``gather8``: that with 8 items a lane in flight (a 4 KiB slice of 16-byte words a warp). A ``,pdl`` suffix on these
launches the chunk scan and the copy with programmatic stream serialization (each waits for its predecessor first;
both scans let their successor launch at once): the launch gaps overlap; ``,grid``: the copy's grid sized to its
units (each block one pass, no partial last wave of long grid-stride blocks) instead of 16 blocks a compute unit.
On the H100 (2026-12-07 13:03, the same shape) ``gather,grid`` 2.21 TB/s, ``gather,pdl,grid`` 2.31 and
``gather8,pdl,grid`` 2.31 against torch's 2.47-2.50 (0.90 / 0.93 / 0.93), ``rows`` 1.82 (0.74)."""
REPEAT_DEFAULT = "gather8,pdl,grid"
"""The :data:`REPEAT_ENV` setting when unset: the fastest on the H100 (0.93x torch), its GPU tier and conformance
passed there."""
CHUNKED = ("blocks", "gather", "gather8")
"""The :data:`REPEAT_ENV` settings that scan the counts by chunks."""
MAX_CHUNKS = 1024
"""The most chunks (blocks) of the chunked scan; longer counts take longer chunks (each block adds the totals
ahead of it, so their number stays small)."""
SCAN_ITEMS = 16
"""Counts a thread of the tiled scan (``ACL_REPEAT_ROWS=rows``) loads a tile."""
ROW_LANES = 32
"""The most threads that share one source slice of RepeatRows (a segment of ``lanes * ROW_UNROLL`` items each)."""
ROW_UNROLL = 4
"""Items each RepeatRows lane loads before its first store."""
ROW_BLOCKS_PER_UNIT = 16
"""RepeatRows' most blocks a compute unit (more units are taken in a grid-stride loop)."""
LOG = logging.getLogger("acl_rocm.index_shape")
WORD = 16
"""Bytes a copy moves per element where the views' last dims are contiguous, aligned and whole words."""


def strided_view(src: View, plan: Sequence[tuple[int, int, int]]) -> View:
    """``src`` narrowed to (start, length, step) along every dim."""
    for d, (start, length, step) in enumerate(plan):
        src = src.narrow(d, start, length, step)
    return src


def reshaped(view: View, shape: Sequence[int], sources: Sequence[int]) -> View:
    """``view`` with dims picked by ``sources`` (-1: a new dim of one); the dims left out must have size 1."""
    strides = tuple(0 if d < 0 else view.strides[d] for d in sources)
    return View(view.address, view.itemsize, tuple(shape), strides)


def repeated_views(src: View, dst: View, dim: int, repeats: int) -> tuple[View, View]:
    """(source, destination) of an integer repeat: dst's dim ``dim`` (n * r) split into (n, r), src at stride 0 on r.

    ``dim`` -1: self flattened (dst 1-d): a trailing r after all of self's dims, dst strided in C order.
    """
    if dim < 0:
        shape = (*src.shape, repeats)
        step = dst.strides[0] if dst.shape else 1
        strides: list[int] = []
        for n in reversed(shape):
            strides.insert(0, step)
            step *= n
        return View(src.address, src.itemsize, shape, (*src.strides, 0)), View(
            dst.address, dst.itemsize, shape, tuple(strides)
        )
    s = dst.strides[dim]
    shape = (*src.shape[: dim + 1], repeats, *src.shape[dim + 1 :])
    s_src = (*src.strides[: dim + 1], 0, *src.strides[dim + 1 :])
    s_dst = (*dst.strides[:dim], repeats * s, s, *dst.strides[dim + 1 :])
    return View(src.address, src.itemsize, shape, s_src), View(dst.address, dst.itemsize, shape, s_dst)


def _wide(shape: Sequence[int], strides: Sequence[int], address: int, item: int) -> tuple[tuple[int, ...], ...] | None:
    """(shape, strides) of a view in 16-byte words (its last dim contiguous and whole words, aligned), or None."""
    k = WORD // item if item < WORD and WORD % item == 0 else 0
    if not k or not shape or strides[-1] != 1 or shape[-1] % k or address % WORD or any(x % k for x in strides[:-1]):
        return None
    return (*shape[:-1], shape[-1] // k), (*(x // k for x in strides[:-1]), 1)


def widened(src: View, dst: View) -> tuple[View, View]:
    """The copy ``dst = src`` in 16-byte words where both views allow it (see :func:`_wide`), else as it is."""
    g = coalesce(dst.shape, [broadcast_strides(src.shape, src.strides, dst.shape), dst.strides])
    a = _wide(g.shape, g.strides[0], src.address, src.itemsize)
    b = _wide(g.shape, g.strides[1], dst.address, dst.itemsize)
    if a is None or b is None:
        return src, dst
    return View(src.address, WORD, a[0], a[1]), View(dst.address, WORD, b[0], b[1])


def _ptr(t: AclTensor) -> ctypes.c_void_p:
    return KernelArgs.pointer(address(t))


def _view_struct(shape: Sequence[int], strides: Sequence[int]) -> ctypes.Array[Any]:
    """The ``Src`` struct: shape then strides (``long long``), rank at least 1."""
    shape, strides = (tuple(shape), tuple(strides)) if shape else ((1,), (0,))
    return KernelArgs.index_array([*shape, *strides], "long long")


class IndexShapeRunner:
    """The ops of this module on one backend."""

    def __init__(self, backend: RocmBackend) -> None:
        self.backend = backend
        self.sorter = Sorter(backend)

    def kernels(self) -> dict[str, Kernel]:
        """A kernel per op name."""
        copies: dict[str, Callable[[str, Launch, MovementProgram], None]] = {
            "StridedSlice": self._strided_slice,
            "StridedSliceAssignV2": self._strided_slice_assign,
            "RepeatInterleaveInt": self._repeat_int,
            "RepeatInterleaveIntWithDim": self._repeat_int,
        }
        made = named_kernels(copies, lambda op, launch: self._copy(op, copies[op], launch))
        programs: dict[str, Callable[[Launch], Program]] = {
            "RepeatInterleave": self.repeat_plan,
            "RepeatInterleaveWithDim": self.repeat_plan,
            "RepeatInterleaveTensor": self.repeat_plan,
            "RepeatInterleaveGrad": self.grad_plan,
            "EmbeddingDenseBackward": self.embedding_plan,
        }
        return made | program_kernels(self.backend, "index_shape", programs, self._repeat_rows)

    # ------------------------------------------------------------------ copies through the movement family
    def _copy(self, op: str, method: Callable[[str, Launch, MovementProgram], None], launch: Launch) -> None:
        def record() -> MovementProgram:
            prog = MovementProgram()
            method(op, launch, prog)
            return prog

        prog = memo_plan(launch, family_key(self.backend, "index_shape"), record)
        self.backend.movement.run(prog, handle(launch.stream))

    def _strided_slice(self, op: str, launch: Launch, prog: MovementProgram) -> None:
        t, out = launch.args["self"], launch.args["out"]
        assert isinstance(t, AclTensor) and isinstance(out, AclTensor)
        if out.numel == 0:
            return
        part = strided_view(view_of(op, t), launch.plan["strided"])
        src, dst = widened(reshaped(part, out.view_dims, launch.plan["gather"]), view_of(op, out))
        self.backend.movement.copy(src, dst, prog)

    def _strided_slice_assign(self, op: str, launch: Launch, prog: MovementProgram) -> None:
        var, value = launch.args["varRef"], launch.args["inputValue"]
        assert isinstance(var, AclTensor) and isinstance(value, AclTensor)
        if value.numel == 0:
            return
        src, dst = widened(view_of(op, value), strided_view(view_of(op, var), launch.plan["strided"]))
        self.backend.movement.copy(src, dst, prog)

    def _repeat_int(self, op: str, launch: Launch, prog: MovementProgram) -> None:
        t, out = launch.args["self"], launch.args["out"]
        assert isinstance(t, AclTensor) and isinstance(out, AclTensor)
        if out.numel == 0:
            return
        src, dst = repeated_views(view_of(op, t), view_of(op, out), launch.plan["dim"], int(launch.args["repeats"]))
        self.backend.movement.copy(*widened(src, dst), prog)

    # ------------------------------------------------------------------ repeats on the device
    def _scan(self, prog: Program, repeats: AclTensor, count: int, expect: int, fill: bool = False) -> Any:
        """Launch the scan of ``count`` counts (one value broadcast when repeats holds one) into starts; ``fill``
        (the chunked scan only): also the row index of ``expect`` ints, returned as (starts, rows)."""
        starts = prog.temp((count + 1) * 8)
        stride = repeats.strides[0] if repeats.numel > 1 else 0
        variant, flags = self._setting()
        pdl = "pdl" in flags
        if variant in CHUNKED:
            tile = SCAN_ITEMS * SCAN_THREADS
            chunk = tile * max(1, -(-count // (tile * MAX_CHUNKS)))
            chunks = max(1, -(-count // chunk))  # one block even for no counts: it writes starts[0] and checks
            LOG.debug("%d counts scanned in %d chunks of %d%s", count, chunks, chunk, ", row index" if fill else "")
            totals = prog.temp(chunks * 8)
            rows: Any = prog.temp(expect * 4) if fill else KernelArgs.pointer(0)
            values = [_ptr(repeats), *longs(stride, count, expect), totals, starts, rows, FLAG]
            config = LaunchConfig((chunks, 1, 1), (SCAN_THREADS, 1, 1))
            # the first kernel after the flag's memset launches plainly (only kernels overlap); it lets the scan launch
            self._step(prog, RepeatChunks(repeats.dtype, SCAN_ITEMS, chunk, True, pdl=pdl), config, values)
            scan = RepeatChunks(repeats.dtype, SCAN_ITEMS, chunk, False, fill, pdl)
            self._step(prog, scan, config, values, pdl)
            return (starts, rows) if fill else starts
        values = [_ptr(repeats), *longs(stride, count, expect), starts, FLAG]
        items = SCAN_ITEMS if variant == "rows" else 0
        self._step(prog, RepeatScan(repeats.dtype, items), LaunchConfig((1, 1, 1), (SCAN_THREADS, 1, 1)), values)
        return starts

    def _step(self, prog: Program, kernel: Any, config: LaunchConfig, values: Sequence[Any], pdl: bool = False) -> None:
        """Record a launch; ``pdl``: with programmatic stream serialization where the provider offers it (the
        kernel waits for its predecessor before touching memory)."""
        if not pdl or self.backend.provider.programmatic_unavailable() is not None:
            self.sorter.step(prog, kernel, config, values)
            return
        function = self.backend.function(kernel.source(), kernel.kernel_name)
        prog.steps.append(Step(function, config, tuple(values), programmatic=True))

    def repeat_plan(self, launch: Launch) -> Program:
        """RepeatInterleave(WithDim) and RepeatInterleaveTensor: scan the counts, then gather through the starts."""
        op = launch.spec.name
        repeats, out = launch.args["repeats"], launch.args["out"]
        assert isinstance(repeats, AclTensor) and isinstance(out, AclTensor)
        prog = Program()
        size: int = launch.plan["size"]
        if size == 0:  # phase 1 made outputSize 0: nothing to check or write
            return prog
        total = int(launch.args["outputSize"])
        prog.report = f"{op}: repeats holds a negative count, or counts adding up to other than outputSize={total}"
        gather = self._setting()[0] in ("gather", "gather8") and op != "RepeatInterleaveTensor" and out.numel > 0
        gather = gather and size < 1 << 31 and total < 1 << 31
        rows: Any = None
        if gather:
            starts, rows = self._scan(prog, repeats, size, total, fill=True)
        else:
            starts = self._scan(prog, repeats, size, total)
        if out.numel == 0:
            return prog
        src_shape: tuple[int, ...] = (1,)
        src_strides: tuple[int, ...] = (0,)
        out_shape, out_strides = tuple(out.view_dims), tuple(out.strides)
        if op == "RepeatInterleaveTensor":
            src, inner = out, 1
            kernel = RepeatGather(0, len(out_shape), 1, numbering=out.dtype)
        else:
            src = launch.args["self"]
            assert isinstance(src, AclTensor)
            if src.dtype not in SUPPORTED:
                raise refuse(op, f"a {src.dtype.short} self")
            dim: int = launch.plan["dim"]
            inner = math.prod(src.view_dims[dim + 1 :]) if dim >= 0 else 1
            item = itemsize(op, src.dtype)
            src_shape, src_strides = tuple(src.view_dims) or (1,), tuple(src.strides) or (0,)
            wide_src = _wide(src_shape, src_strides, address(src), item) if dim >= 0 and inner > 1 else None
            wide_out = _wide(out_shape, out_strides, address(out), item) if wide_src is not None else None
            if wide_src is not None and wide_out is not None:  # rows of whole 16-byte words
                inner //= WORD // item
                (src_shape, src_strides), (out_shape, out_strides), item = wide_src, wide_out, WORD
            if self._setting()[0] in ("rows", *CHUNKED):
                views = (src_shape, src_strides, out_shape, out_strides)
                if self._rows_step(prog, launch, views, item, size, total, inner, starts, rows):
                    return prog
            kernel = RepeatGather(item, len(out_shape), len(src_shape))
        meta = self.sorter.meta(math.prod(out_shape), out_shape, [out_strides])
        values = [meta, _view_struct(src_shape, src_strides), _ptr(src), _ptr(out), starts]
        values += [*longs(size, total, inner), FLAG]
        self._step(prog, kernel, self.sorter.flat_config(math.prod(out_shape)), values)
        return prog

    def _repeat_rows(self) -> str | None:
        """The :data:`REPEAT_ENV` setting, :data:`REPEAT_DEFAULT` when unset (plans of each setting kept apart)."""
        return self.backend.environ.get(REPEAT_ENV, "").strip().lower() or REPEAT_DEFAULT

    def _setting(self) -> tuple[str, frozenset[str]]:
        """(the copy / scan choice, its suffixes: ``pdl``, ``grid``; the chunked settings only)."""
        name, *rest = (part.strip() for part in self._repeat_rows().split(","))  # type: ignore[union-attr]
        return name, frozenset(rest) if name in CHUNKED else frozenset()

    def _rows_step(
        self,
        prog: Program,
        launch: Launch,
        views: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]],
        item: int,
        groups: int,
        total: int,
        inner: int,
        starts: Any,
        rows: Any = None,
    ) -> bool:
        """Record RepeatRows (a source slice read once, stored into each of its group's out slices; with the row
        index ``rows``, output-major: each out slice loads its source slice); False, with the reason logged, where a
        slice is not one strided run in both views (the gather takes the call)."""
        op = launch.spec.name
        src_shape, src_strides, out_shape, out_strides = views
        dim: int = launch.plan["dim"]
        if dim >= 0:
            run = coalesce(src_shape[dim + 1 :], [src_strides[dim + 1 :], out_strides[dim + 1 :]])
            if run.ndim > 1:
                LOG.debug("%s: slices of %s are not one strided run; the gather path", op, src_shape[dim + 1 :])
                return False
            sis, dis = (run.strides[0][0], run.strides[1][0]) if run.ndim else (1, 1)
            jstride, outer = out_strides[dim], math.prod(src_shape[:dim])
            lead = coalesce(src_shape[:dim], [src_strides[:dim], out_strides[:dim]])
            direct = lead.ndim <= 1
            o_src, o_out = (lead.strides[0][0], lead.strides[1][0]) if lead.ndim else (0, 0)
            g_src = src_strides[dim]
        else:  # self flattened: a slice is one element, out is 1-D
            sis, dis, jstride, outer = 1, 1, out_strides[0], 1
            flat = coalesce(src_shape, [src_strides])
            direct, o_src, o_out = flat.ndim <= 1, 0, 0
            g_src = flat.strides[0][0] if flat.ndim else 0
        variant, flags = self._setting()
        pdl = "pdl" in flags
        unroll = 8 if variant == "gather8" else ROW_UNROLL
        lanes = 1
        while lanes < ROW_LANES and lanes * unroll < inner:
            lanes *= 2
        segs = -(-inner // (lanes * unroll))
        units = outer * (total if rows is not None else groups) * segs
        p = self.backend.properties
        cap = p.max_grid_x if "grid" in flags else p.compute_units * ROW_BLOCKS_PER_UNIT  # grid: a block per units
        grid = min(-(-units * lanes // ROW_THREADS), cap, p.max_grid_x)
        src, out = launch.args["self"], launch.args["out"]
        assert isinstance(src, AclTensor) and isinstance(out, AclTensor)
        if direct:  # a slice starts at o * stride[0] + g * stride[1]: no unravelling
            views = ((outer, groups), (o_src, g_src), (outer, total), (o_out, jstride))
        structs = [_view_struct(views[0], views[1]), _view_struct(views[2], views[3])]
        index = starts if rows is None else rows
        values = [*structs, _ptr(src), _ptr(out), index, *longs(groups, total, inner, segs, units, sis, dis, jstride)]
        values.append(FLAG)
        narrow = units * lanes + ROW_THREADS * grid < 1 << 31 and max(groups, total) < 1 << 31
        indexed = rows is not None
        kernel = RepeatRows(item, len(src_shape), len(out_shape), lanes, unroll, direct, narrow, indexed, pdl)
        LOG.debug(
            "%s: %d slices of %d %d-byte items, %d lanes a slice%s%s",
            *(op, outer * groups, inner, item, lanes, ", direct" if direct else "", ", indexed" if indexed else ""),
        )
        self._step(prog, kernel, LaunchConfig((max(grid, 1), 1, 1), (ROW_THREADS, 1, 1)), values, pdl)
        return True

    def grad_plan(self, launch: Launch) -> Program:
        """RepeatInterleaveGrad: scan the counts against the axis' size, then one float32 sum per out element."""
        op = "RepeatInterleaveGrad"
        y, repeats, out = launch.args["yGrad"], launch.args["repeats"], launch.args["out"]
        assert isinstance(y, AclTensor) and isinstance(repeats, AclTensor) and isinstance(out, AclTensor)
        axis: int = launch.plan["dim"]
        groups: int = launch.plan["repeat_groups"]
        length = y.view_dims[axis]
        prog = Program()
        prog.report = f"{op}: repeats holds a negative count, or its {groups} groups do not add up to {length}"
        starts = self._scan(prog, repeats, groups, length)
        if out.numel == 0:
            return prog
        inner = math.prod(y.view_dims[axis + 1 :])
        meta = self.sorter.meta(out.numel, tuple(out.view_dims) or (1,), [tuple(out.strides) or (0,)])
        kernel = GroupSum(y.dtype, max(out.rank, 1), y.rank)
        values = [meta, _view_struct(y.view_dims, y.strides), _ptr(y), _ptr(out), starts]
        values += [*longs(groups, length, inner), FLAG]
        self._step(prog, kernel, self.sorter.flat_config(out.numel), values)
        return prog

    # ------------------------------------------------------------------ embedding backward
    def embedding_plan(self, launch: Launch) -> Program:
        """Check and sort the indices with their positions, then one block per weight row sums its run."""
        op = "EmbeddingDenseBackward"
        grad, idx, out = launch.args["grad"], launch.args["indices"], launch.args["out"]
        assert isinstance(grad, AclTensor) and isinstance(idx, AclTensor) and isinstance(out, AclTensor)
        weights, hidden = out.view_dims
        n = idx.numel
        prog = Program()
        prog.report = f"{op}: indices holds a value outside [0, numWeights={weights})"
        s = self.sorter
        s.check_length(op, n)
        keys: Any = KernelArgs.pointer(0)
        pos: Any = KernelArgs.pointer(0)
        if n:
            keys, pos = prog.temp(n * 8), prog.temp(n * 4)
            g = coalesce(tuple(idx.view_dims), [tuple(idx.strides)])
            args = [s.meta(n, g.shape, [g.strides[0]]), _ptr(idx), *longs(weights), keys, pos, FLAG]
            s.step(prog, EmbedKeys(idx.dtype, g.ndim), s.flat_config(n), args)
            keys, pos = s.sort_temp(prog, D.ACL_INT64, keys, pos, 1, n)
        if out.numel == 0:
            return prog
        first, last = prog.temp(weights * 4), prog.temp(weights * 4)
        prog.zeroed += [(first, weights * 4), (last, weights * 4)]  # rows no index names: empty runs
        if n:
            s.step(prog, RowBounds(), s.flat_config(n), [keys, *longs(n), first, last, FLAG])
        lead = coalesce(tuple(grad.view_dims[:-1]), [tuple(grad.strides[:-1])])
        width = 16 // itemsize(op, grad.dtype)
        vector = (
            grad.strides[-1] == 1
            and out.strides[1] == 1
            and hidden % width == 0
            and address(grad) % 16 == 0
            and address(out) % 16 == 0
            and all(x % width == 0 for x in (out.strides[0], *lead.strides[0]))
        )
        p = self.backend.properties
        grid = min(weights, p.max_grid_x)
        lanes = -(-hidden // width) if vector else hidden
        block = min(ROW_THREADS, max(p.warp_size, -(-lanes // p.warp_size) * p.warp_size))
        values = [_view_struct(lead.shape, lead.strides[0]), _ptr(grad), *longs(grad.strides[-1]), _ptr(out)]
        values += [*longs(out.strides[0], out.strides[1]), first, last, pos, *longs(weights, hidden)]
        values += [*longs(launch.plan["padding"]), ctypes.c_int(int(bool(launch.args["scaleGradByFreq"]))), FLAG]
        s.step(prog, EmbedRows(grad.dtype, lead.ndim, vector), LaunchConfig((grid, 1, 1), (block, 1, 1)), values)
        return prog


RUNNER = IndexShapeRunner

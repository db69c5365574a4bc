"""The movement family on the GPU: every op is strided-view copies plus, for the index ops, index kernels.

A :class:`View` is a byte address and a shape and strides in elements (negative where it runs
backwards); slicing, selecting, permuting, flipping and tiling a view is arithmetic on the host, and
one generated copy kernel moves the elements (storage words of the element size: exact for every
dtype). Gathers (Embedding, IndexSelect, GatherV2, Gather, Index) are one ``Take`` kernel; Scatter is
pulled per output element and InplaceScatterUpdate pushed per updates element, deterministic and without
atomics. Index values are checked on the device before anything is written: a small one-dimensional
index (up to :data:`INLINE_CHECK_MAX` values: a decode step's token ids and positions) is checked by every
block of the gather or scatter itself, a larger one by a check kernel launched first; a bad value sets
the flag, no element is written, and the driver raises 161002 when the stream is synchronised. Nothing
passes through the host inside an op.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from acl_core.backend import Kernel, Launch
from acl_core.dtypes import DataType as D
from acl_core.errors import AclnnError, AclnnStatus
from acl_core.formats import Format
from acl_core.spec.kernel_args import Scalar
from acl_core.spec.ops.movement import advanced_index_shape
from acl_core.spec.rules import broadcast_shapes
from acl_core.tensor import AclTensor
from acl_rocm.driver import handle
from acl_rocm.kernels.ctypes_map import SUPPORTED
from acl_rocm.kernels.elementwise import UFUNCS
from acl_rocm.kernels.movement import Arange, Check, Copy, InlineChecks, Scatter, ScatterUpdate, Take, wide
from acl_rocm.launch import KernelArgs
from acl_rocm.ops.binding import family_key, memo_plan, named_kernels
from acl_rocm.ops.elementwise import Prepared
from acl_rocm.views import Geometry, broadcast_strides, coalesce, index_type

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

OPS: tuple[str, ...] = (
    "Arange",
    "Cat",
    "ConstantPadNd",
    "Embedding",
    "Expand",
    "Flip",
    "Gather",
    "GatherV2",
    "Index",
    "IndexSelect",
    "InplaceScatterUpdate",
    "Permute",
    "Repeat",
    "Scatter",
    "ScatterValue",
    "Slice",
    "SliceV2",
    "SplitTensor",
    "SplitWithSize",
    "Stack",
    "Tril",
    "Triu",
)
"""The aclnn operators this module runs (in-place twins run their base op's kernel)."""

_WIDE_CTYPES: dict[str, type[ctypes._SimpleCData]] = {
    "double": ctypes.c_double,
    "long long": ctypes.c_longlong,
    "unsigned long long": ctypes.c_ulonglong,
    "bool": ctypes.c_bool,
}


def _refuse(op: str, what: str) -> AclnnError:
    return AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, f"the rocm backend cannot run {op} with {what}")


def itemsize(op: str, dtype: D) -> int:
    """Bytes per element of ``dtype`` (161002 for sub-byte or unusual storage)."""
    bits = dtype.info.storage_bits
    if dtype.is_packed or bits % 8 or bits // 8 not in (1, 2, 4, 8, 16):
        raise _refuse(op, f"{dtype.short} tensors (sub-byte or unusual storage)")
    return bits // 8


@dataclass(frozen=True)
class View:
    """A strided view: the byte address of its first element, element size, shape and strides (in elements)."""

    address: int
    itemsize: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]

    @property
    def numel(self) -> int:
        """Elements in the view."""
        return math.prod(self.shape)

    def narrow(self, dim: int, start: int, length: int, step: int = 1) -> View:
        """Elements ``start, start + step, ...`` (``length`` of them) along ``dim``."""
        shape = list(self.shape)
        strides = list(self.strides)
        shape[dim] = length
        strides[dim] *= step
        return View(
            self.address + start * self.strides[dim] * self.itemsize, self.itemsize, tuple(shape), tuple(strides)
        )

    def select(self, dim: int, index: int) -> View:
        """The view at ``index`` along ``dim`` (one dimension fewer)."""
        return View(
            self.address + index * self.strides[dim] * self.itemsize,
            self.itemsize,
            self.shape[:dim] + self.shape[dim + 1 :],
            self.strides[:dim] + self.strides[dim + 1 :],
        )

    def permute(self, perm: Sequence[int]) -> View:
        """Dimensions reordered: new dimension i is old dimension ``perm[i]``."""
        return View(
            self.address, self.itemsize, tuple(self.shape[d] for d in perm), tuple(self.strides[d] for d in perm)
        )

    def flip(self, dims: Sequence[int]) -> View:
        """The view running backwards along ``dims``."""
        address, strides = self.address, list(self.strides)
        for d in dims:
            if self.shape[d] > 0:
                address += (self.shape[d] - 1) * strides[d] * self.itemsize
            strides[d] = -strides[d]
        return View(address, self.itemsize, self.shape, tuple(strides))


def view_of(op: str, t: AclTensor) -> View:
    """The view of an aclTensor."""
    size = itemsize(op, t.dtype)
    return View(t.data + t.offset * size, size, tuple(t.view_dims), tuple(t.strides))


def tile_views(src: View, dst: View, repeats: Sequence[int]) -> tuple[View, View]:
    """(source, destination) views of Repeat: an out dim of size r*n splits into (r, n), the source repeats along r."""
    lead = len(repeats) - len(src.shape)
    shape = (1,) * lead + src.shape
    sstrides = (0,) * lead + src.strides
    out_shape: list[int] = []
    out_strides: list[int] = []
    in_strides: list[int] = []
    for n, r, s_src, s_dst in zip(shape, repeats, sstrides, dst.strides):
        out_shape += [r, n]
        out_strides += [n * s_dst, s_dst]
        in_strides += [0, s_src]
    return (
        View(src.address, src.itemsize, tuple(out_shape), tuple(in_strides)),
        View(dst.address, dst.itemsize, tuple(out_shape), tuple(out_strides)),
    )


def _geometry_index_type(shape: Sequence[int], rows: Sequence[Sequence[int]], threads: int) -> str:
    """``int`` when the element count and every row's reach over ``shape`` fit in 32 bits, else ``long long``."""
    return index_type(Geometry(tuple(shape), tuple(tuple(r) for r in rows)), threads)


@functools.lru_cache(maxsize=4096)
def _source(kernel: Any) -> str:
    return str(kernel.source())


class MovementRunner:
    """Turns movement Launches into copy, check, take and scatter kernel launches on one backend."""

    def __init__(self, backend: RocmBackend) -> None:
        self.backend = backend

    def kernels(self) -> dict[str, Kernel]:
        """A kernel per op name."""
        return named_kernels(OPS, self._call)

    def _call(self, op: str, launch: Launch) -> None:
        prog = memo_plan(launch, family_key(self.backend, "movement"), lambda: self._record(op, launch))
        self.run(prog, handle(launch.stream))

    def _record(self, op: str, launch: Launch) -> MovementProgram:
        prog = MovementProgram()
        getattr(self, f"_{op.lower()}")(op, launch, prog)
        self._flush_checks(prog)  # a check no kernel took still runs
        return prog

    # ------------------------------------------------------------------ launching
    def run(self, prog: MovementProgram, stream: int) -> None:
        """Launch a recorded program on ``stream``, with a fresh device check flag when it has one."""
        with prog.lock:  # the flag slot is shared by the program's packed arguments
            flag = 0
            if prog.flag is not None:
                flag = self.backend.driver.check_flag(stream)
                prog.flag.value = flag
            try:
                for step in prog.steps:
                    self.backend.elementwise.launch_prepared(step, stream)
            except BaseException:
                if flag:
                    self.backend.driver.drop_check(stream, flag)
                raise
            finally:
                if prog.flag is not None:
                    prog.flag.value = 0  # the memo never holds this call's flag
            if flag:
                if prog.report is None:
                    self.backend.driver.drop_check(stream, flag)
                else:
                    self.backend.driver.defer_check(stream, flag, prog.report)

    def _launch(
        self, kernel: Any, meta: Sequence[int], idx: str, values: Sequence[Any], numel: int, prog: MovementProgram
    ) -> None:
        if prog.pending:  # the range checks asked for before this kernel: inside it when it can, else launched first
            inline = (
                self._inline_checks(prog.pending) if "checks" in getattr(kernel, "__dataclass_fields__", {}) else None
            )
            if inline is None:
                self._flush_checks(prog)
            else:
                kernel = dataclasses.replace(kernel, checks=InlineChecks(tuple(c.dtype for c in prog.pending)))
                values = [*values, *inline]
                prog.pending.clear()
        function = self.backend.function(_source(kernel), kernel.kernel_name)
        args = KernelArgs([KernelArgs.index_array(list(meta), idx), *values])
        prog.steps.append(Prepared(function, self.backend.elementwise_config(numel, 1), args))

    def _threads(self, numel: int) -> int:
        return self.backend.elementwise_config(max(numel, 1), 1).threads

    def copy(self, src: View, dst: View, prog: MovementProgram, mode: str = "copy", diagonal: int = 0) -> None:
        """``dst = src`` (broadcast to dst's shape); ``mode`` tril/triu zeroes outside a triangle of the last 2 dims."""
        if dst.numel == 0:
            return
        strides = broadcast_strides(src.shape, src.strides, dst.shape)
        if mode == "copy":
            g = coalesce(dst.shape, [strides, dst.strides])
        else:
            g = Geometry(dst.shape, (strides, dst.strides))
        idx = index_type(g, self._threads(g.numel))
        kernel = Copy(dst.itemsize, g.ndim, idx, mode)
        meta = [g.numel, *g.shape, *g.strides[0], *g.strides[1]]
        values: list[Any] = [KernelArgs.pointer(src.address), KernelArgs.pointer(dst.address)]
        if mode != "copy":
            values.append(ctypes.c_longlong(diagonal))
        self._launch(kernel, meta, idx, values, g.numel, prog)

    def convert(self, op: str, src: AclTensor, dst: View, dtype: D, prog: MovementProgram) -> None:
        """``dst = src`` where src's dtype differs from dst's: CANN's Cast through the elementwise kernels."""
        if dst.numel == 0:
            return
        target = AclTensor(dst.shape, dtype, dst.strides, 0, Format.ACL_FORMAT_ND, dst.shape, dst.address)
        ew = self.backend.elementwise
        prog.add(ew.prepare(ew.plan_convert(src, target)))

    def place(self, op: str, src: AclTensor, dst: View, dtype: D, prog: MovementProgram) -> None:
        """Copy src into the view dst of dtype ``dtype``, converting when the dtypes differ."""
        if src.dtype == dtype:
            self.copy(view_of(op, src), dst, prog)
        else:
            self.convert(op, src, dst, dtype, prog)

    def _flag(self, prog: MovementProgram) -> ctypes.c_void_p:
        assert prog.flag is None, "one check flag per call"
        prog.flag = ctypes.c_void_p(0)  # set to a fresh 4-byte allocation by every run
        return prog.flag

    def check(
        self, op: str, index: AclTensor, low: int, high: int, flag: ctypes.c_void_p, prog: MovementProgram
    ) -> None:
        """Set ``flag`` on the device when a value of ``index`` lies outside [low, high)."""
        size = index.dtype.info.storage_bits // 8
        address = index.data + index.offset * size
        self.check_view(index.dtype, address, index.view_dims, index.strides, low, high, flag, prog)

    def check_view(
        self,
        dtype: D,
        address: int,
        shape: Sequence[int],
        strides: Sequence[int],
        low: int,
        high: int,
        flag: ctypes.c_void_p,
        prog: MovementProgram,
    ) -> None:
        """Set ``flag`` when a value of the index view at ``address`` lies outside [low, high).

        The check runs before the program's next kernel writes: inside that kernel when it takes inline
        checks and the index is small and one-dimensional (no launch of its own), else as a Check launch.
        """
        if math.prod(shape) == 0:
            return
        prog.pending.append(PendingCheck(dtype, address, coalesce(shape, [strides]), low, high, flag))

    def _inline_checks(self, pending: Sequence[PendingCheck]) -> list[Any] | None:
        """The kernel arguments of ``pending`` run inline, or None when one is too large or not 1-D."""
        values: list[Any] = []
        for c in pending:
            if c.geometry.ndim != 1 or c.geometry.numel > INLINE_CHECK_MAX:
                return None
            values.append(KernelArgs.pointer(c.address))
            count, stride = c.geometry.numel, c.geometry.strides[0][0]
            values += [ctypes.c_longlong(v) for v in (count, stride, c.low, c.high)]
        return values

    def _flush_checks(self, prog: MovementProgram) -> None:
        """Launch the pending range checks as Check kernels."""
        pending, prog.pending = prog.pending, []
        for c in pending:
            g = c.geometry
            idx = index_type(g, self._threads(g.numel))
            meta = [g.numel, *g.shape, *g.strides[0]]
            values = [KernelArgs.pointer(c.address), ctypes.c_longlong(c.low), ctypes.c_longlong(c.high), c.flag]
            self._launch(Check(c.dtype, g.ndim, idx), meta, idx, values, g.numel, prog)

    def _report(self, op: str, flag: ctypes.c_void_p, prog: MovementProgram, what: str) -> None:
        prog.report = f"{op}: {what} holds a value outside its valid range"

    # ------------------------------------------------------------------ joining and splitting
    def _cat(self, op: str, launch: Launch, prog: MovementProgram) -> None:
        tensors = launch.args["tensors"]
        out = launch.args["out"]
        assert isinstance(tensors, tuple) and isinstance(out, AclTensor)
        used = [t for t in tensors if tuple(t.view_dims) != (0,)]
        if not used or out.numel == 0:
            return
        dim: int = launch.plan["dim"]
        dst = view_of(op, out)
        start = 0
        for t in used:
            n = t.view_dims[dim]
            self.place(op, t, dst.narrow(dim, start, n), out.dtype, prog)
            start += n

    def _stack(self, op: str, launch: Launch, prog: MovementProgram) -> None:
        tensors = launch.args["tensors"]
        out = launch.args["out"]
        assert isinstance(tensors, tuple) and isinstance(out, AclTensor)
        if out.numel == 0:
            return
        dim: int = launch.plan["dim"]
        dst = view_of(op, out)
        for i, t in enumerate(tensors):
            self.place(op, t, dst.select(dim, i), out.dtype, prog)

    def _split(self, op: str, launch: Launch, prog: MovementProgram) -> None:
        t = launch.args["self"]
        outs = launch.args["out"]
        assert isinstance(t, AclTensor) and isinstance(outs, tuple)
        dim: int = launch.plan["dim"]
        src = view_of(op, t)
        start = 0
        for piece, n in zip(outs, launch.plan["sizes"]):
            self.copy(src.narrow(dim, start, n), view_of(op, piece), prog)
            start += n

    _splittensor = _split
    _splitwithsize = _split

    # ------------------------------------------------------------------ views made concrete
    def _io(self, op: str, launch: Launch) -> tuple[AclTensor, AclTensor]:
        t, out = launch.args["self"], launch.args["out"]
        assert isinstance(t, AclTensor) and isinstance(out, AclTensor)
        return t, out

    def _permute(self, op: str, launch: Launch, prog: MovementProgram) -> None:
        t, out = self._io(op, launch)
        self.copy(view_of(op, t).permute(launch.plan["dims"]), view_of(op, out), prog)

    def _slice(self, op: str, launch: Launch, prog: MovementProgram) -> None:
        t, out = self._io(op, launch)
        src = view_of(op, t)
        for axis, (start, _end, step) in launch.plan["slices"].items():
            src = src.narrow(axis, start, out.view_dims[axis], step)
        self.copy(src, view_of(op, out), prog)

    _slicev2 = _slice

    def _expand(self, op: str, launch: Launch, prog: MovementProgram) -> None:
        t, out = self._io(op, launch)
        self.copy(view_of(op, t), view_of(op, out), prog)

    def _repeat(self, op: str, launch: Launch, prog: MovementProgram) -> None:
        t, out = self._io(op, launch)
        if out.numel == 0:
            return
        src, dst = tile_views(view_of(op, t), view_of(op, out), launch.args["repeats"])
        self.copy(src, dst, prog)

    def _constantpadnd(self, op: str, launch: Launch, prog: MovementProgram) -> None:
        t, out = self._io(op, launch)
        if out.numel == 0:
            return
        pairs: list[tuple[int, int]] = launch.plan["pairs"]
        if any(b > 0 or e > 0 for b, e in pairs):
            value = launch.args["value"]
            assert isinstance(value, Scalar)
            self.fill(op, out, value, prog)
        src, dst = view_of(op, t), view_of(op, out)
        for d, (n, (before, after)) in enumerate(zip(t.view_dims, pairs)):
            lo, hi = max(-before, 0), n - max(-after, 0)
            keep = max(hi - lo, 0)
            src = src.narrow(d, lo, keep)
            dst = dst.narrow(d, max(before, 0), keep)
        self.copy(src, dst, prog)

    def fill(self, op: str, out: AclTensor, value: Scalar, prog: MovementProgram) -> None:
        """Every element of ``out`` = value (converted to out's dtype by the elementwise fill)."""
        if out.dtype not in SUPPORTED:
            raise _refuse(op, f"a {out.dtype.short} pad value")
        ew = self.backend.elementwise
        tokens: dict[str, D | None] = {"T": None, "F": None, "B": D.ACL_BOOL, "O": out.dtype}
        u = UFUNCS["InplaceFillScalar"]
        prog.add(ew.prepare(ew.instantiate(op, u, tokens, [("selfRef", out)], [("value", value)])))

    def _triangle(self, op: str, launch: Launch, prog: MovementProgram) -> None:
        t, out = self._io(op, launch)
        mode = "tril" if op == "Tril" else "triu"
        self.copy(view_of(op, t), view_of(op, out), prog, mode, int(launch.args["diagonal"]))

    _tril = _triangle
    _triu = _triangle

    def _flip(self, op: str, launch: Launch, prog: MovementProgram) -> None:
        t, out = self._io(op, launch)
        self.copy(view_of(op, t).flip(launch.plan["dims"]), view_of(op, out), prog)

    def _arange(self, op: str, launch: Launch, prog: MovementProgram) -> None:
        out = launch.args["out"]
        assert isinstance(out, AclTensor)
        n = out.numel
        if n == 0:
            return
        if out.dtype not in SUPPORTED:
            raise _refuse(op, f"a {out.dtype.short} out")
        start, step = (launch.args[name] for name in ("start", "step"))
        assert isinstance(start, Scalar) and isinstance(step, Scalar)
        int64 = bool(launch.plan["int64"])
        stride = out.strides[0]
        idx = _geometry_index_type((n,), [(stride,)], self._threads(n))
        size = out.dtype.info.storage_bits // 8
        pointer = KernelArgs.pointer(out.data + out.offset * size)
        if int64:
            values: list[Any] = [pointer, ctypes.c_longlong(int(start.value)), ctypes.c_longlong(int(step.value))]  # type: ignore[arg-type]
        else:
            values = [pointer, ctypes.c_double(float(start.value)), ctypes.c_double(float(step.value))]  # type: ignore[arg-type]
        self._launch(Arange(out.dtype, int64, idx), [n, n, stride], idx, values, n, prog)

    # ------------------------------------------------------------------ gathers
    def take(
        self,
        op: str,
        src: View,
        out: AclTensor,
        src_row: Sequence[int],
        indices: Sequence[tuple[AclTensor, Sequence[int], int, int]],
        wrap: bool,
        flag: ctypes.c_void_p,
        prog: MovementProgram,
    ) -> None:
        """``out[p] = src[src_row . p + sum_k index_k[row_k . p] * dim_stride_k]`` for every out element p.

        ``indices`` holds (index tensor, its stride row over out's dims, self's stride on the dim it
        replaces, that dim's size).
        """
        if out.numel == 0:
            return
        dst = view_of(op, out)
        shape, out_row = dst.shape, dst.strides
        rows = [tuple(src_row), tuple(out_row), *(tuple(r) for _, r, _, _ in indices)]
        if not shape:  # a 0-d result is one element of a rank-1 space
            shape, rows = (1,), [(0,) for _ in rows]
        reach = [*rows, *((s * max(n - 1, 0),) for _, _, s, n in indices)]
        idx = _geometry_index_type(
            shape, [r + (0,) * (len(shape) - len(r)) for r in reach], self._threads(math.prod(shape))
        )
        kernel = Take(dst.itemsize, tuple(t.dtype for t, _, _, _ in indices), len(shape), idx, wrap)
        meta = [math.prod(shape), *shape, *(s for r in rows for s in r)]
        values: list[Any] = [KernelArgs.pointer(src.address), KernelArgs.pointer(dst.address)]
        for t, _, _, _ in indices:
            values.append(KernelArgs.pointer(t.data + t.offset * (t.dtype.info.storage_bits // 8)))
        for _, _, dim_stride, size in indices:
            values += [ctypes.c_longlong(dim_stride), ctypes.c_longlong(size)]
        values.append(flag)
        self._launch(kernel, meta, idx, values, math.prod(shape), prog)

    def _embedding(self, op: str, launch: Launch, prog: MovementProgram) -> None:
        w, ids, out = (launch.args[n] for n in ("weight", "indices", "out"))
        assert isinstance(w, AclTensor) and isinstance(ids, AclTensor) and isinstance(out, AclTensor)
        if ids.numel == 0:
            return
        src = view_of(op, w)
        flag = self._flag(prog)
        self.check(op, ids, 0, w.view_dims[0], flag, prog)
        k = ids.rank
        src_row = (0,) * k + (w.strides[1],)
        idx_row = (*ids.strides, 0)
        self.take(op, src, out, src_row, [(ids, idx_row, w.strides[0], w.view_dims[0])], False, flag, prog)
        self._report(op, flag, prog, "indices")

    def _select(self, op: str, launch: Launch, prog: MovementProgram) -> None:
        t, index, out = (launch.args[n] for n in ("self", "index", "out"))
        assert isinstance(t, AclTensor) and isinstance(index, AclTensor) and isinstance(out, AclTensor)
        if index.numel == 0:
            return
        v2 = op == "GatherV2"
        flag = self._flag(prog)
        src = view_of(op, t)
        if t.rank == 0:
            self.check(op, index, 0, 1, flag, prog)
            self.take(op, src, out, (0,), [(index, (0,), 0, 1)], False, flag, prog)
        else:
            dim: int = launch.plan["dim"]
            size = t.view_dims[dim]
            self.check(op, index, -size if v2 else 0, size, flag, prog)
            pre, post = t.strides[:dim], t.strides[dim + 1 :]
            middle = tuple(index.strides) if v2 else ((index.strides[0],) if index.rank else (0,))
            src_row = (*pre, *(0,) * len(middle), *post)
            idx_row = (*(0,) * len(pre), *middle, *(0,) * len(post))
            self.take(op, src, out, src_row, [(index, idx_row, t.strides[dim], size)], v2, flag, prog)
        self._report(op, flag, prog, "index")

    _indexselect = _select
    _gatherv2 = _select

    def _gather(self, op: str, launch: Launch, prog: MovementProgram) -> None:
        t, index, out = (launch.args[n] for n in ("self", "index", "out"))
        assert isinstance(t, AclTensor) and isinstance(index, AclTensor) and isinstance(out, AclTensor)
        if index.numel == 0:
            return
        flag = self._flag(prog)
        src = view_of(op, t)
        if t.rank == 0:
            self.check(op, index, 0, 1, flag, prog)
            self.take(op, src, out, (0,), [(index, (0,), 0, 1)], False, flag, prog)
        else:
            dim: int = launch.plan["dim"]
            size = t.view_dims[dim]
            self.check(op, index, 0, size, flag, prog)
            src_row = tuple(0 if d == dim else s for d, s in enumerate(t.strides))
            self.take(op, src, out, src_row, [(index, tuple(index.strides), t.strides[dim], size)], False, flag, prog)
        self._report(op, flag, prog, "index")

    def _index(self, op: str, launch: Launch, prog: MovementProgram) -> None:
        t, lst, out = (launch.args[n] for n in ("self", "indices", "out"))
        assert isinstance(t, AclTensor) and isinstance(lst, tuple) and isinstance(out, AclTensor)
        entries = [(d, e) for d, e in enumerate(lst) if e.numel != 0]
        src = view_of(op, t)
        if not entries:
            self.copy(src, view_of(op, out), prog)
            return
        flag = self._flag(prog)
        positions = [d for d, _ in entries]
        for d, e in entries:
            self.check(op, e, -t.view_dims[d], t.view_dims[d], flag, prog)
        block = broadcast_shapes(*(tuple(e.view_dims) for _, e in entries), names=("indices",))
        shape, _ = advanced_index_shape(t.view_dims, [tuple(e.view_dims) if e.numel else None for e in lst])
        assert tuple(shape) == tuple(out.view_dims)
        kept = [d for d in range(t.rank) if d not in positions]
        adjacent = positions == list(range(positions[0], positions[-1] + 1))
        nb = len(block)
        if adjacent:
            before = [d for d in kept if d < positions[0]]
            after = [d for d in kept if d > positions[-1]]
        else:
            before, after = [], kept
        src_row = (*(t.strides[d] for d in before), *(0,) * nb, *(t.strides[d] for d in after))
        rows = []
        for d, e in entries:
            inner = broadcast_strides(e.view_dims, e.strides, block)
            row = (*(0,) * len(before), *inner, *(0,) * len(after))
            rows.append((e, row, t.strides[d], t.view_dims[d]))
        self.take(op, src, out, src_row, rows, True, flag, prog)
        self._report(op, flag, prog, "indices")

    # ------------------------------------------------------------------ scatters
    def _scatter(self, op: str, launch: Launch, prog: MovementProgram) -> None:
        t, index, out = (launch.args[n] for n in ("self", "index", "out"))
        assert isinstance(t, AclTensor) and isinstance(index, AclTensor) and isinstance(out, AclTensor)
        with_value = op == "ScatterValue"
        for name, dt in (("self", t.dtype), ("out", out.dtype)):
            if dt not in SUPPORTED:
                raise _refuse(op, f"{name} of dtype {dt.short}")
        if index.numel == 0:
            if out.data != t.data or out.offset != t.offset or out.strides != t.strides:
                self.copy(view_of(op, t), view_of(op, out), prog)
            return
        if out.numel == 0:
            return
        dim: int = launch.plan["dim"] if t.rank else 0
        shape = tuple(t.view_dims) or (1,)
        size = shape[dim]
        flag = self._flag(prog)
        self.check(op, index, 0, size, flag, prog)

        def row(x: AclTensor) -> tuple[int, ...]:
            return tuple(x.strides) or (0,)

        extents = tuple(index.view_dims) or (1,)
        src_t = None if with_value else launch.args["src"]
        src_row = (0,) * len(shape) if src_t is None else row(src_t)
        rows = [row(t), row(out), row(index), src_row]
        idx = _geometry_index_type(shape, rows, self._threads(math.prod(shape)))
        kernel = Scatter(t.dtype, index.dtype, len(shape), idx, dim, int(launch.args["reduce"]), with_value)
        meta = [math.prod(shape), *shape, *(s for r in rows for s in r), *extents]
        values: list[Any] = [
            KernelArgs.pointer(view_of(op, t).address),
            KernelArgs.pointer(view_of(op, out).address),
            KernelArgs.pointer(index.data + index.offset * (index.dtype.info.storage_bits // 8)),
        ]
        if src_t is None:
            value = launch.args["value"]
            assert isinstance(value, Scalar)
            values.append(_wide_scalar(value, t.dtype))
        else:
            assert isinstance(src_t, AclTensor)
            values.append(KernelArgs.pointer(view_of(op, src_t).address))
        values.append(flag)
        self._launch(kernel, meta, idx, values, math.prod(shape), prog)
        self._report(op, flag, prog, "index")

    _scattervalue = _scatter

    def _inplacescatterupdate(self, op: str, launch: Launch, prog: MovementProgram) -> None:
        data, indices, updates = (launch.args[n] for n in ("data", "indices", "updates"))
        assert isinstance(data, AclTensor) and isinstance(indices, AclTensor) and isinstance(updates, AclTensor)
        axis: int = launch.plan["axis"]
        length = updates.view_dims[axis]
        room = data.view_dims[axis] - length + 1
        flag = self._flag(prog)
        size = indices.dtype.info.storage_bits // 8
        two = indices.rank == 2
        if two:
            rows, start = (indices.view_dims[0],), indices.data + indices.offset * size
            column = (indices.strides[0],)
            self.check_view(indices.dtype, start, rows, column, 0, data.view_dims[0], flag, prog)
            second = start + indices.strides[1] * size
            self.check_view(indices.dtype, second, rows, column, 0, room, flag, prog)
        else:
            self.check(op, indices, 0, room, flag, prog)
        batches = indices.view_dims[0] if indices.rank else 1
        row_stride = indices.strides[0] if indices.rank else 0
        column_stride = indices.strides[1] if two else 0
        d, u = view_of(op, data), view_of(op, updates)
        shape = u.shape  # pushed per updates element; data's offsets reach its whole extent
        reach = [u.strides, d.strides]
        idx = _geometry_index_type(d.shape, reach, self._threads(u.numel))
        kernel = ScatterUpdate(d.itemsize, indices.dtype, len(shape), idx, axis, two)
        meta = [u.numel, *shape, *u.strides, *d.strides]
        values: list[Any] = [
            KernelArgs.pointer(d.address),
            KernelArgs.pointer(u.address),
            KernelArgs.pointer(indices.data + indices.offset * size),
            ctypes.c_longlong(batches),
            ctypes.c_longlong(row_stride),
            ctypes.c_longlong(column_stride),
            ctypes.c_longlong(length),
            flag,
        ]
        self._launch(kernel, meta, idx, values, u.numel, prog)
        self._report(op, flag, prog, "indices")


INLINE_CHECK_MAX = 256
"""Index views of at most this many values are range-checked inside the kernel that uses them (every block
reads them all before it writes); larger ones by a Check launch of their own."""


@dataclass(frozen=True)
class PendingCheck:
    """A range check asked for while a program is built, placed when the next kernel is launched."""

    dtype: D
    address: int
    geometry: Geometry
    low: int
    high: int
    flag: ctypes.c_void_p


@dataclass
class MovementProgram:
    """One call's launches, recorded once per signature; the check flag is a slot each run fills."""

    steps: list[Prepared] = field(default_factory=list)
    flag: ctypes.c_void_p | None = None
    report: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    pending: list[PendingCheck] = field(default_factory=list)

    def add(self, prepared: Prepared | None) -> None:
        """Append a prepared launch (None launches nothing)."""
        if prepared is not None:
            self.steps.append(prepared)


def _wide_scalar(value: Scalar, dtype: D) -> ctypes._SimpleCData:
    """The scalar in the wide type the reference scatters ``dtype`` in (NumPy's astype of the value)."""
    kind = wide(dtype)
    v = value.value
    if isinstance(v, complex):
        v = v.real
    if kind == "double":
        return ctypes.c_double(float(v))
    if kind == "bool":
        return ctypes.c_bool(bool(v != 0))
    if isinstance(v, float):
        whole = math.trunc(v) if math.isfinite(v) else 0
    else:
        whole = int(v)
    if kind == "unsigned long long":
        return ctypes.c_ulonglong(whole & (2**64 - 1))
    return _WIDE_CTYPES[kind](whole)


RUNNER = MovementRunner

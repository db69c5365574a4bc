"""Construction and index movement ops on the GPU (issue 16): Range, Linspace, Eye, Diag, DiagFlat, OneHot,
Roll, Take, GatherNd and GatherV3.

They ride the movement family's machinery (:class:`~acl_rocm.ops.movement.MovementRunner`: strided
views, the copy and take kernels, the device check flag, programs recorded once per signature):

* Range is Arange's kernel (``start + i * step``; only its length differs). Linspace computes
  torch's symmetric formula in double with every product and sum rounded alone, as the reference
  does, and rounds once to out's dtype, so it matches the reference exactly.
* Eye, Diag and DiagFlat are word fills and copies through diagonal views: out's diagonal is a
  strided view of stride ``stride[0] + stride[1]``, and self's elements go there in C order.
* GatherNd is the movement ``Take`` with one index view per component of ``indices``' last dim;
  GatherV3 is ``Take`` with the batch dims shared between self and index.
* Take reads self in C order through its own kernel (the flat position unravelled over self's
  strides); Roll and OneHot have their own kernels too.

Index values are range-checked on the device (161002 at synchronisation). Every op but Take checks them before
any gather writes, so a bad index leaves ``out`` as it was; Take checks each index inside its gather by default
(:data:`TAKE_CHECK_ENV`), so after a failed Take ``out`` holds every element whose index was good.
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from acl_core.backend import Kernel, Launch
from acl_core.dtypes import DataType as D
from acl_core.errors import AclnnError, AclnnStatus
from acl_core.spec.kernel_args import Scalar
from acl_core.spec.ops.index_ops import diagonal_length
from acl_core.tensor import AclTensor, contiguous_strides
from acl_rocm.kernels.ctypes_map import SUPPORTED
from acl_rocm.kernels.index_ops import CheckVec, Fill, Linspace, OneHot, Roll, TakeFlat
from acl_rocm.launch import KernelArgs
from acl_rocm.ops.binding import named_kernels
from acl_rocm.ops.elementwise import Prepared
from acl_rocm.ops.movement import MovementProgram, MovementRunner, View, view_of
from acl_rocm.ops.sort import refuse
from acl_rocm.views import Geometry, coalesce, index_type

OPS: tuple[str, ...] = (
    "Range",
    "Linspace",
    "Eye",
    "Diag",
    "DiagFlat",
    "OneHot",
    "Roll",
    "Take",
    "GatherNd",
    "GatherV3",
)
"""The aclnn operators this module runs."""
LOG = logging.getLogger("acl_rocm.index_ops")
TAKE_CHECK_ENV = "ACL_TAKE_CHECK"
"""Take's index range check: ``fused`` (the default: each element checks its own index in the gather, which then reads
the indices once; a bad index fails the call with 161002, and ``out`` then holds every element whose index was good,
the others as they were), ``launch`` (a Check launch before the gather, so a bad index leaves ``out`` untouched, at
the cost of reading the indices twice) or ``vec`` (as ``launch``, its launch :class:`CheckVec`'s 16-byte loads where
the indices are contiguous int32/int64, else the Check launch, logged). ``fused`` is the default since the H100 run
of 2026-12-06 21:46 (results/RESULTS.md): 1.02-1.05x torch's time at 256 MiB where ``launch`` took 1.10-1.13x; CANN
documents no content for ``out`` after a failed call, and torch's CUDA take stops the context on a bad index."""
TAKE_CHECKS = ("launch", "vec", "fused")


def one_word(dtype: D) -> int:
    """The storage bits of the value 1 in ``dtype``."""
    np_dtype = dtype.numpy
    assert np_dtype is not None
    size = np.dtype(np_dtype).itemsize
    return int(np.ones((), np_dtype).view(f"u{size}"))


def _real(value: object) -> float:
    assert isinstance(value, Scalar)
    v = value.value
    return float(v.real if isinstance(v, complex) else v)


class IndexOpsRunner(MovementRunner):
    """Turns the construction and index movement Launches into fill, copy, check and gather launches."""

    def kernels(self) -> dict[str, Kernel]:
        """A kernel per op name."""
        return named_kernels(OPS, self._call)

    def take_check(self) -> str:
        """The :data:`TAKE_CHECK_ENV` setting (``fused`` unless set; bad values are refused)."""
        value = (self.backend.environ.get(TAKE_CHECK_ENV, "") or "fused").strip().lower()
        if value not in TAKE_CHECKS:
            raise AclnnError(
                AclnnStatus.ACLNN_ERR_PARAM_INVALID, f"{TAKE_CHECK_ENV}={value!r}: expected one of {TAKE_CHECKS}"
            )
        return value

    # ------------------------------------------------------------------ helpers
    def fill_word(self, op: str, dst: View, value: int, prog: MovementProgram) -> None:
        """Every element of the view ``dst`` = the storage word ``value``."""
        if dst.numel == 0:
            return
        if dst.itemsize > 8:
            raise refuse(op, f"{dst.itemsize}-byte elements")
        g = coalesce(dst.shape, [dst.strides])
        idx = index_type(g, self._threads(g.numel))
        meta = [g.numel, *g.shape, *g.strides[0]]
        values = [KernelArgs.pointer(dst.address), ctypes.c_uint64(value)]
        self._launch(Fill(dst.itemsize, g.ndim, idx), meta, idx, values, g.numel, prog)

    @staticmethod
    def diagonal(matrix: View, k: int, length: int) -> View:
        """The 1-d view of diagonal ``k`` of the 2-d view ``matrix``, ``length`` elements long."""
        s0, s1 = matrix.strides
        start = max(-k, 0) * s0 + max(k, 0) * s1
        return View(matrix.address + start * matrix.itemsize, matrix.itemsize, (length,), (s0 + s1,))

    # ------------------------------------------------------------------ construction
    _range = MovementRunner._arange

    def _linspace(self, op: str, launch: Launch, prog: MovementProgram) -> None:
        out = launch.args["out"]
        assert isinstance(out, AclTensor)
        n = out.numel
        if n == 0:
            return
        if out.dtype not in SUPPORTED:
            raise refuse(op, f"a {out.dtype.short} out")
        start, end = _real(launch.args["start"]), _real(launch.args["end"])
        step = (end - start) / (n - 1) if n > 1 else 0.0
        dst = view_of(op, out)
        idx = index_type(Geometry((n,), (dst.strides,)), self._threads(n))
        values: list[Any] = [KernelArgs.pointer(dst.address), *map(ctypes.c_double, (start, end, step))]
        values.append(ctypes.c_longlong(n))
        self._launch(Linspace(out.dtype, idx), [n, n, dst.strides[0]], idx, values, n, prog)

    def _eye(self, op: str, launch: Launch, prog: MovementProgram) -> None:
        out = launch.args["out"]
        assert isinstance(out, AclTensor)
        dst = view_of(op, out)
        self.fill_word(op, dst, 0, prog)
        self.fill_word(op, self.diagonal(dst, 0, min(dst.shape)), one_word(out.dtype), prog)

    def _diag(self, op: str, launch: Launch, prog: MovementProgram) -> None:
        t, out = self._io(op, launch)
        k = int(launch.args["diagonal"])
        src, dst = view_of(op, t), view_of(op, out)
        if op == "DiagFlat" or t.rank == 1:  # self (in C order) onto diagonal k of a zero matrix
            self.fill_word(op, dst, 0, prog)
            line = self.diagonal(dst, k, t.numel)
            along = tuple(s * line.strides[0] for s in contiguous_strides(t.view_dims))
            self.copy(src, View(line.address, line.itemsize, src.shape, along), prog)
        else:
            rows, cols = t.view_dims
            self.copy(self.diagonal(src, k, diagonal_length(rows, cols, k)), dst, prog)

    _diagflat = _diag

    def _onehot(self, op: str, launch: Launch, prog: MovementProgram) -> None:
        t, on, off, out = (launch.args[n] for n in ("self", "onValue", "offValue", "out"))
        assert isinstance(t, AclTensor) and isinstance(on, AclTensor) and isinstance(off, AclTensor)
        assert isinstance(out, AclTensor)
        if out.numel == 0:
            return
        axis: int = launch.plan["dim"]
        dst = view_of(op, out)
        self_row = (*t.strides[:axis], 0, *t.strides[axis:])
        g = Geometry(dst.shape, (dst.strides, self_row))
        idx = index_type(g, self._threads(g.numel))
        kernel = OneHot(t.dtype, dst.itemsize, g.ndim, idx, axis)
        meta = [g.numel, *g.shape, *g.strides[0], *g.strides[1]]
        pointers = [view_of(op, x).address for x in (t, on, off)] + [dst.address]
        self._launch(kernel, meta, idx, [KernelArgs.pointer(p) for p in pointers], g.numel, prog)

    # ------------------------------------------------------------------ movement
    def _roll(self, op: str, launch: Launch, prog: MovementProgram) -> None:
        t, out = launch.args["x"], launch.args["out"]
        assert isinstance(t, AclTensor) and isinstance(out, AclTensor)
        if out.numel == 0:
            return
        src, dst = view_of(op, t), view_of(op, out)
        shape, src_row, dst_row = src.shape or (1,), src.strides or (0,), dst.strides or (0,)
        shifts: list[tuple[int, int]] = launch.plan["shifts"]
        flat = shifts[0][0] == -1
        row = [0] * len(shape)
        for d, s in shifts:
            row[0 if flat else d] = s
        if not any(row):
            self.copy(src, dst, prog)
            return
        idx = index_type(Geometry(shape, (dst_row, src_row)), self._threads(math.prod(shape)))
        meta = [math.prod(shape), *shape, *dst_row, *src_row, *row]
        values = [KernelArgs.pointer(src.address), KernelArgs.pointer(dst.address)]
        self._launch(Roll(src.itemsize, len(shape), idx, flat), meta, idx, values, math.prod(shape), prog)

    def _take(self, op: str, launch: Launch, prog: MovementProgram) -> None:
        t, index, out = (launch.args[n] for n in ("self", "index", "out"))
        assert isinstance(t, AclTensor) and isinstance(index, AclTensor) and isinstance(out, AclTensor)
        if index.numel == 0:
            return
        flag = self._flag(prog)
        numel = t.numel
        setting = self.take_check()
        fused = setting == "fused"
        if setting == "vec" and self._check_vec(index, -numel, numel, flag, prog):
            pass
        elif not fused:
            if setting == "vec":
                LOG.debug("%s: %s indices not contiguous int32/int64: the Check launch", op, index.dtype.short)
            self.check(op, index, -numel, numel, flag, prog)
        src, dst = view_of(op, t), view_of(op, out)
        g = coalesce(dst.shape, [dst.strides, index.strides])
        gs = coalesce(src.shape, [src.strides])
        threads = self._threads(g.numel)
        wide = "long long" in (index_type(g, threads), index_type(gs, threads))
        idx = "long long" if wide else "int"
        nd = max(g.ndim, gs.ndim)
        pad, spad = (0,) * (nd - g.ndim), (0,) * (nd - gs.ndim)  # leading dims of size 1
        meta = [g.numel, *(1,) * (nd - g.ndim), *g.shape]
        meta += [*pad, *g.strides[0], *pad, *g.strides[1], *(1,) * (nd - gs.ndim), *gs.shape, *spad, *gs.strides[0]]
        kernel = TakeFlat(src.itemsize, index.dtype, nd, idx, fused)
        values: list[Any] = [KernelArgs.pointer(src.address), KernelArgs.pointer(dst.address)]
        values += [KernelArgs.pointer(view_of(op, index).address), ctypes.c_longlong(numel), flag]
        self._launch(kernel, meta, idx, values, g.numel, prog)
        self._report(op, flag, prog, "index")

    def _check_vec(self, index: AclTensor, low: int, high: int, flag: ctypes.c_void_p, prog: MovementProgram) -> bool:
        """Launch :class:`CheckVec` over ``index`` when it is contiguous int32/int64 (else False: nothing launched)."""
        g = coalesce(index.view_dims, [index.strides])
        if index.dtype not in (D.ACL_INT32, D.ACL_INT64) or g.ndim != 1 or g.strides[0][0] != 1:
            return False
        kernel = CheckVec(index.dtype)
        size = index.dtype.info.storage_bits // 8
        address = index.data + index.offset * size
        head = min((-address % 16) // size, g.numel)
        function = self.backend.function(kernel.source(), kernel.kernel_name)
        config = self.backend.elementwise_config(max(g.numel // kernel.per_vector, 1), CheckVec.UNROLL)
        values = [ctypes.c_longlong(g.numel), KernelArgs.pointer(address), ctypes.c_longlong(head)]
        values += [ctypes.c_longlong(low), ctypes.c_longlong(high), flag]
        prog.steps.append(Prepared(function, config, KernelArgs(values)))
        return True

    def _gathernd(self, op: str, launch: Launch, prog: MovementProgram) -> None:
        t, indices, out = (launch.args[n] for n in ("self", "indices", "out"))
        assert isinstance(t, AclTensor) and isinstance(indices, AclTensor) and isinstance(out, AclTensor)
        if out.numel == 0:
            return
        wrap = bool(launch.args["negativeIndexSupport"])
        k = indices.view_dims[-1]
        batch = indices.rank - 1
        flag = self._flag(prog)
        trailing = t.rank - k
        parts: list[tuple[AclTensor, Sequence[int], int, int]] = []
        for j in range(k):
            size = t.view_dims[j]
            component = dataclasses.replace(
                indices,
                view_dims=indices.view_dims[:-1],
                strides=indices.strides[:-1],
                offset=indices.offset + j * indices.strides[-1],
            )
            self.check(op, component, -size if wrap else 0, size, flag, prog)
            parts.append((component, (*component.strides, *(0,) * trailing), t.strides[j], size))
        src_row = (*(0,) * batch, *t.strides[k:])
        self.take(op, view_of(op, t), out, src_row, parts, wrap, flag, prog)
        self._report(op, flag, prog, "indices")

    def _gatherv3(self, op: str, launch: Launch, prog: MovementProgram) -> None:
        t, index, out = (launch.args[n] for n in ("self", "index", "out"))
        assert isinstance(t, AclTensor) and isinstance(index, AclTensor) and isinstance(out, AclTensor)
        if out.numel == 0:
            return
        dim: int = launch.plan["dim"]
        b = int(launch.args["batchDims"])
        size = t.view_dims[dim]
        flag = self._flag(prog)
        self.check(op, index, 0, size, flag, prog)
        after = t.rank - dim - 1
        src_row = (*t.strides[:dim], *(0,) * (index.rank - b), *t.strides[dim + 1 :])
        idx_row = (*index.strides[:b], *(0,) * (dim - b), *index.strides[b:], *(0,) * after)
        self.take(op, view_of(op, t), out, src_row, [(index, idx_row, t.strides[dim], size)], False, flag, prog)
        self._report(op, flag, prog, "index")


RUNNER = IndexOpsRunner

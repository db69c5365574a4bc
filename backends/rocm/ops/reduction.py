"""The reduction family on the GPU: row kernels over an ``outer × inner`` view of each call.

A reduction over ``dims`` makes the kept dimensions the rows and the reduced ones a row's elements;
Softmax, LogSoftmax, Cumsum and the arg-extrema reduce along one ``dim``. Every operand keeps its own
strides (views are read in place, never gathered), outputs take theirs from the kept positions
(``keepdim``) or in order. Nothing passes through the host; dtypes the kernels lack (complex) are
refused with 161002 before anything is enqueued.
"""

from __future__ import annotations

import ctypes
import logging
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from acl_core.backend import Kernel, Launch
from acl_core.dtypes import DataType as D
from acl_core.errors import AclnnError, AclnnStatus
from acl_core.formats import Format
from acl_core.tensor import AclTensor
from acl_rocm.driver import handle
from acl_rocm.kernels.ctypes_map import SUPPORTED, ctype
from acl_rocm.kernels.reduction import (
    BLOCK_THREADS,
    CACHED_KINDS,
    ROW_ELEMENTS,
    VECTOR_BYTES,
    RowCache,
    RowKernel,
    RowOperand,
    acc_dtype,
    generate,
    group_cache,
    int_acc,
    row_cache,
    warp_cache,
)
from acl_rocm.launch import KernelArgs, LaunchConfig
from acl_rocm.ops.binding import family_key, memo_plan, named_kernels
from acl_rocm.ops.elementwise import Prepared
from acl_rocm.ops.program import Program, Scratch, Step, Temp, run_program
from acl_rocm.views import Geometry, coalesce, index_type

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

OPS: tuple[str, ...] = (
    "Amax",
    "Amin",
    "ArgMax",
    "ArgMin",
    "Cummax",
    "Cummin",
    "Cumprod",
    "Cumsum",
    "LogSoftmax",
    "Max",
    "MaxDim",
    "MaxV2",
    "Mean",
    "MeanV2",
    "Min",
    "MinDim",
    "Prod",
    "ProdDim",
    "ReduceLogSum",
    "ReduceSum",
    "Softmax",
    "Std",
    "StdMeanCorrection",
    "Var",
    "VarCorrection",
    "VarMean",
)
"""The aclnn operators this module runs."""

LOG = logging.getLogger("acl_rocm.reduction")

ARGMAX_ENV = "ACL_ARGMAX_CONFIG"
"""The path of few long arg-extremum rows (decode's ArgMax): ``persist`` (the default: a block per slice, the
candidates and row counters in the stream's persistent scratch, zeroed once; the row's last block resets its
counter, so a call is the launch alone), ``split`` (the same launch, its scratch a stream-ordered temporary
whose counters are zeroed each call) or ``block`` (one 1024-thread block per row, 16-byte loads, no scratch).
Measured on an H100 (replayed graph, GPU us a call, beside torch's 9.0 / 11.0): [1,151936] persist 5.63,
split 7.65, block 22.2; [8,151936] persist 7.96."""
ARGMAX_DEFAULT = "persist"
ARGMAX_CONFIGS = ("split", "persist", "block")
ARG_SCRATCH = "arg"
"""The stream-scratch region of the ``persist`` arg path (its candidates must not land on other kernels' counters)."""
WIDE_ARG_THREADS = 1024
"""The block of the ``block`` arg path (one block per row)."""
WIDE_ARG_UNROLL = 4
"""Vectors each thread of the ``block`` path loads before comparing them."""

BLOCKS_PER_UNIT = 8
SPLIT_MIN_LENGTH = 8192
"""Rows at least this long, when there are fewer rows than compute units, take the split arg path."""
SLICE_ELEMENTS = 1024
"""Row elements per block of the split path's first pass (four per thread of a 256-thread block)."""
MAX_SLICES = 1024
PREFETCH_MAX = 8
"""The split path's elements per thread loaded before the first comparison (registers; more follow singly)."""
"""The most slices of one row (the second pass reduces them with one block)."""


def arg_slices(rows: int, length: int, units: int) -> int:
    """Slices per row of an arg-extremum call: 1 (a block per row) unless few rows are long (decode's
    ArgMax over a 151,936-entry vocabulary), then enough blocks to fill the device."""
    if rows >= units or length < SPLIT_MIN_LENGTH:
        return 1
    return max(1, min(MAX_SLICES, -(-length // SLICE_ELEMENTS), (units * BLOCKS_PER_UNIT) // rows))


def refuse(op: str, what: str) -> AclnnError:
    """161002 for a dtype the kernels lack."""
    return AclnnError(
        AclnnStatus.ACLNN_ERR_PARAM_INVALID,
        f"the rocm backend cannot run {op} with {what} (kernels support: "
        + ", ".join(sorted(d.short for d in SUPPORTED))
        + ")",
    )


@dataclass(frozen=True)
class Bound:
    """One operand of a call: the kernel operand, its tensor, and its strides over outer and inner dims."""

    operand: RowOperand
    tensor: AclTensor
    outer: tuple[int, ...]
    inner: tuple[int, ...]


@dataclass(frozen=True)
class RowPlan:
    """A row kernel with its launch configuration and argument values."""

    kernel: RowKernel
    config: LaunchConfig
    values: list[Any]


def bind(name: str, t: AclTensor, outer: Sequence[int], inner: Sequence[int], *, write: bool = False) -> Bound:
    """``t`` as kernel operand ``name`` with these strides."""
    return Bound(RowOperand(name, t.dtype, write), t, tuple(outer), tuple(inner))


def unit_vector(t: AclTensor, outer: Sequence[int], inner: Sequence[int], length: int, whole: bool = True) -> int:
    """Elements of ``t`` a row moves as one aligned access of at most 16 bytes: its row is one unit-stride run whose
    every start (address and ``outer`` strides) is aligned to the width (``whole``: the row length a multiple of it
    too); 1 when none is."""
    size = t.dtype.info.storage_bits // 8
    vec = max(1, VECTOR_BYTES // size)
    address = t.data + t.offset * size
    unit = len(inner) == 1 and inner[0] == 1
    while vec > 1 and not (
        unit and (length % vec == 0 or not whole) and address % (vec * size) == 0 and all(s % vec == 0 for s in outer)
    ):
        vec //= 2
    return vec


def row_config(rows: int, length: int, warp: int, units: int, max_grid: int, per_thread_rows: bool) -> LaunchConfig:
    """Block per row (whole warps, up to 256 threads, no wider than the row) or thread per row (scans)."""
    if per_thread_rows:
        block = min(BLOCK_THREADS, -(-rows // warp) * warp)
        grid = min(-(-rows // block), units * BLOCKS_PER_UNIT, max_grid)
    else:
        block = min(BLOCK_THREADS, max(warp, -(-length // warp) * warp))
        grid = min(rows, units * BLOCKS_PER_UNIT, max_grid)
    return LaunchConfig((max(grid, 1), 1, 1), (block, 1, 1))


def split(
    t: AclTensor, inner_dims: Sequence[int]
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(outer shape, inner shape, outer strides, inner strides) of ``t`` with ``inner_dims`` as a row."""
    inner_set = set(inner_dims)
    kept = [d for d in range(t.rank) if d not in inner_set]
    dims, strides = t.view_dims, t.strides
    return (
        tuple(dims[d] for d in kept),
        tuple(dims[d] for d in inner_dims),
        tuple(strides[d] for d in kept),
        tuple(strides[d] for d in inner_dims),
    )


def reduced_strides(out: AclTensor, rank: int, kept: Sequence[int]) -> tuple[int, ...]:
    """Strides of a reduction's output over the kept dims (keepdim or not; a one-element out broadcasts)."""
    if out.rank == len(kept):
        return tuple(out.strides)
    if out.rank == rank:
        return tuple(out.strides[d] for d in kept)
    if out.numel == 1:
        return (0,) * len(kept)
    raise ValueError(f"out of shape {list(out.view_dims)} does not hold the reduction over kept dims {list(kept)}")


def plan_cache(
    kind: str,
    length: int,
    bound: Sequence[Bound],
    outer: Geometry,
    inner: Geometry,
    acc: D,
    warp: int,
    grouped: int = 0,
    warps: int | None = None,
) -> RowCache | None:
    """The register-cached path of a call, or None (another kind, rows too long, or a row not one strided run).

    Operands whose row elements are unit-stride move a chunk of ``vec`` elements as one aligned access when
    the row length is a multiple of ``vec`` and every row start is aligned (address and outer strides); the
    width halves from 16 bytes of the widest such operand until the first operand qualifies, and the
    others join only where they qualify too (the rest are read one element at a time).
    """
    if kind not in CACHED_KINDS or inner.ndim != 1 or length < 1:
        return None
    unit = [k for k, b in enumerate(bound) if inner.strides[k][0] == 1 and length > 1]

    def aligned(k: int, vec: int) -> bool:
        t = bound[k].tensor
        size = t.dtype.info.storage_bits // 8
        return (t.data + t.offset * size) % (vec * size) == 0 and all(st % vec == 0 for st in outer.strides[k])

    vec = VECTOR_BYTES // max((bound[k].tensor.dtype.info.storage_bits // 8 for k in unit), default=VECTOR_BYTES)
    while vec > 1 and not (length % vec == 0 and unit and aligned(unit[0], vec)):
        vec //= 2
    vector = [bound[k].operand.name for k in unit if aligned(k, vec)] if vec > 1 else []
    halves = all(b.tensor.dtype in (D.ACL_FLOAT16, D.ACL_BF16) for b in bound if b.operand.name in ROW_ELEMENTS)
    if warps is not None:  # a block of warps a row (kernels/reduction.py warp_cache; 0: the count by width)
        return warp_cache(length, warp, D.ACL_FLOAT if halves else acc, vec, vector, warps)  # cached as float
    if grouped:  # ``grouped`` threads a block, a few lanes per row (kernels/reduction.py group_cache)
        return group_cache(length, warp, D.ACL_FLOAT if halves else acc, vec, vector, grouped)  # cached as float
    return row_cache(length, warp, acc, vec, vector)


class RowRunner:
    """Plans and launches row kernels on one backend (shared by the reduction and norm families)."""

    def __init__(self, backend: RocmBackend) -> None:
        self.backend = backend
        self._lock = threading.Lock()
        self._sources: dict[RowKernel, str] = {}
        self._interned: dict[RowKernel, RowKernel] = {}

    def source(self, kernel: RowKernel) -> str:
        """The generated source of ``kernel`` (generated once per process)."""
        src = self._sources.get(kernel)
        if src is None:
            src = generate(kernel)
            with self._lock:
                self._sources[kernel] = src
        return src

    def plan(
        self,
        op: str,
        kind: str,
        bound: Sequence[Bound],
        outer_shape: Sequence[int],
        inner_shape: Sequence[int],
        acc: D,
        options: Sequence[tuple[str, str | int | bool]] = (),
        scalars: Sequence[tuple[str, str, Any]] = (),
        per_thread_rows: bool = False,
        grouped: int = 0,
        warps: int | None = None,
    ) -> RowPlan | None:
        """The kernel, launch and argument values of one call (None when there are no rows).

        ``grouped`` (threads a block) asks for the grouped cached layout (a few lanes per row, several rows a
        block); ``warps`` (a warp count, 0: by width) the warps layout (a block of warps a row, loads before
        arithmetic, shuffles and at most one barrier); a row that fits neither takes the block-per-row layout."""
        for b in bound:
            if b.tensor.dtype not in SUPPORTED:
                raise refuse(op, f"{b.operand.name} of dtype {b.tensor.dtype.short}")
        rows = math.prod(outer_shape)
        if rows == 0:
            return None
        length = math.prod(inner_shape)
        outer = coalesce(outer_shape, [b.outer for b in bound])
        inner = coalesce(inner_shape, [b.inner for b in bound])
        p = self.backend.properties
        config = row_config(rows, length, p.warp_size, p.compute_units, p.max_grid_x, per_thread_rows)
        cache = plan_cache(kind, length, bound, outer, inner, acc, p.warp_size, grouped, warps)
        if cache is None and (grouped or warps is not None):
            layout = "grouped" if grouped else f"warps ({warps or 'by width'})"
            LOG.debug("%s: rows of %d do not fit the %s layout; a block per row", op, length, layout)
            cache = plan_cache(kind, length, bound, outer, inner, acc, p.warp_size)
        if cache is not None and cache.group:
            per_block = cache.block // cache.group
            grid = min(-(-rows // per_block), p.compute_units * BLOCKS_PER_UNIT, p.max_grid_x)
            config = LaunchConfig((max(grid, 1), 1, 1), (cache.block, 1, 1))
            options = (*options, *cache.options())
        elif cache is not None:
            config = LaunchConfig(config.grid, (cache.block, 1, 1))
            options = (*options, *cache.options())
        full = Geometry(outer.shape + inner.shape, tuple(o + i for o, i in zip(outer.strides, inner.strides)))
        kernel = RowKernel(
            kind=kind,
            operands=tuple(b.operand for b in bound),
            outer_nd=outer.ndim,
            inner_nd=inner.ndim,
            index_type=index_type(full, config.threads + rows + length),
            acc=acc,
            options=tuple(options),
            scalars=tuple((name, c) for name, c, _ in scalars),
        )
        meta = [rows, *full.shape, *(s for st in full.strides for s in st)]
        values: list[Any] = [KernelArgs.index_array(meta, kernel.index_type)]
        for b in bound:
            values.append(KernelArgs.pointer(b.tensor.data + b.tensor.offset * (b.tensor.dtype.info.storage_bits // 8)))
        for _, c, value in scalars:
            values.append(_SCALAR[c](value))
        return RowPlan(kernel, config, values)

    def prepare(self, planned: RowPlan | None) -> Prepared | None:
        """The loaded function, configuration and packed arguments of a planned row kernel."""
        if planned is None:
            return None
        kernel = self._interned.setdefault(planned.kernel, planned.kernel)
        function = self.backend.function(self.source(kernel), kernel.kernel_name)
        return Prepared(function, planned.config, KernelArgs(planned.values))

    def launch_prepared(self, prepared: Prepared | None, stream: int) -> None:
        """Launch a prepared row kernel on ``stream`` (the elementwise runner's launch: a Prepared is a Prepared)."""
        self.backend.elementwise.launch_prepared(prepared, stream)

    def enqueue(self, planned: RowPlan | None, stream: int) -> None:
        """Launch a planned row kernel on ``stream`` (compiling or loading it the first time)."""
        self.launch_prepared(self.prepare(planned), stream)


_SCALAR: dict[str, type[ctypes._SimpleCData]] = {"double": ctypes.c_double, "long long": ctypes.c_longlong}


_REDUCE_OPS = {"ReduceSum": "sum", "Mean": "mean", "MeanV2": "mean", "Amax": "max", "Amin": "min", "Max": "max"}
_REDUCE_OPS |= {"MaxV2": "max", "Min": "min", "ReduceLogSum": "sum"}
"""The row kernel's ``op`` of each reduction over dims (the rest: ``prod``)."""


def _tensor(launch: Launch, name: str) -> AclTensor:
    t = launch.args.get(name)
    assert isinstance(t, AclTensor), f"{launch.spec.name}: {name} is not a tensor"
    return t


def _optional(launch: Launch, name: str) -> AclTensor | None:
    t = launch.args.get(name)
    return t if isinstance(t, AclTensor) else None


def _dims(x: AclTensor, dims: Sequence[int]) -> tuple[int, ...]:
    """The reduced dims that exist (a 0-d tensor accepts dim 0 / -1 but has nothing to reduce), sorted."""
    return tuple(sorted(d for d in dims if d < x.rank))


def _supported(op: str, dtype: D) -> D:
    if dtype not in SUPPORTED:
        raise refuse(op, f"{dtype.short} computation")
    return dtype


def _compare_acc(dtype: D) -> D:
    """The exact value type extrema compare in (bool and small integers as int64)."""
    c = ctype(dtype)
    if c.kind == "float":
        return D.ACL_DOUBLE if dtype == D.ACL_DOUBLE else D.ACL_FLOAT
    return D.ACL_UINT64 if c.kind == "uint64" else D.ACL_INT64


class ReductionRunner(RowRunner):
    """Turns reduction-family Launches into row-kernel launches."""

    def __init__(self, backend: RocmBackend) -> None:
        super().__init__(backend)
        self.forced_arg: str | None = None
        """An :data:`ARGMAX_CONFIGS` path over :data:`ARGMAX_ENV` for calls made while set (tests, bench A/B)."""

    def kernels(self) -> dict[str, Kernel]:
        """A kernel per supported op name."""
        return named_kernels(OPS, self._run)

    def _run(self, op: str, launch: Launch) -> None:
        key = family_key(self.backend, "reduction", self.forced_arg)  # a forced arg path plans apart
        prepared = memo_plan(launch, key, lambda: self._prepared(op, launch))
        if isinstance(prepared, Program):
            run_program(self.backend, prepared, handle(launch.stream))
        else:
            self.launch_prepared(prepared, handle(launch.stream))

    def _prepared(self, op: str, launch: Launch) -> Program | Prepared | None:
        planned = self.plan_call(op, launch)
        return planned if isinstance(planned, Program) else self.prepare(planned)

    def plan_call(self, op: str, launch: Launch) -> RowPlan | Program | None:
        """The row kernel of one call (a one-launch program for the split arg path)."""
        if op in ("Cummax", "Cummin"):
            return self._cum_extremum(op, launch)
        if op in ("Softmax", "LogSoftmax", "Cumsum", "Cumprod"):
            return self._along(op, launch)
        if op in ("MaxDim", "MinDim", "ArgMax", "ArgMin"):
            return self._arg(op, launch)
        if op in ("Var", "VarCorrection", "VarMean", "Std", "StdMeanCorrection"):
            return self._moments(op, launch)
        return self._reduce(op, launch)

    # ------------------------------------------------------------------ over dims
    def _reduce(self, op: str, launch: Launch) -> RowPlan | None:
        logs = op == "ReduceLogSum"
        x, out = (
            (_tensor(launch, "data"), _tensor(launch, "reduce"))
            if logs
            else (_tensor(launch, "self"), _tensor(launch, "out"))
        )
        args, plan = launch.args, launch.plan
        dims = _dims(x, plan["dims"]) if "dims" in plan else tuple(range(x.rank))
        reduce_op = _REDUCE_OPS.get(op, "prod")
        if "dtype" in args and args["dtype"] is not None:
            dtype = _supported(op, D(args["dtype"]))
        else:
            dtype = x.dtype
        _supported(op, x.dtype)
        if reduce_op in ("max", "min"):
            acc = _compare_acc(dtype)
        elif reduce_op == "mean":
            acc = acc_dtype([dtype, out.dtype]) if ctype(dtype).kind == "float" else D.ACL_DOUBLE
        else:
            acc = int_acc(dtype)
            if ctype(acc).kind == "float":
                acc = acc_dtype([dtype, out.dtype])
        if x.numel == 0 and reduce_op in ("max", "min"):
            return None  # extrema of an empty tensor: the result is empty too (or, for Max, left untouched)
        outer_shape, inner_shape, xo, xi = split(x, dims)
        kept = [d for d in range(x.rank) if d not in set(dims)]
        bound = [
            bind("self", x, xo, xi),
            bind("out", out, reduced_strides(out, x.rank, kept), (0,) * len(inner_shape), write=True),
        ]
        options: list[tuple[str, str | int | bool]] = [("op", reduce_op), ("dtype", int(dtype))]
        if reduce_op == "mean":
            options.append(("round_to_dtype", True))
        if logs and not (args["noopWithEmptyAxes"] and not args["axes"]):  # the noop copy takes no log
            options.append(("log", True))
        return self.plan(op, "reduce", bound, outer_shape, inner_shape, acc, options)

    def _moments(self, op: str, launch: Launch) -> RowPlan | None:
        x = _tensor(launch, "self")
        dims = _dims(x, launch.plan["dims"])
        outer_shape, inner_shape, xo, xi = split(x, dims)
        kept = [d for d in range(x.rank) if d not in set(dims)]
        zeros = (0,) * len(inner_shape)
        first = {"VarMean": "varOut", "StdMeanCorrection": "stdOut"}.get(op, "out")
        out = _tensor(launch, first)
        bound = [bind("self", x, xo, xi), bind("out", out, reduced_strides(out, x.rank, kept), zeros, write=True)]
        mean = _optional(launch, "meanOut") if op in ("VarMean", "StdMeanCorrection") else None
        if mean is not None:
            bound.append(bind("mean", mean, reduced_strides(mean, x.rank, kept), zeros, write=True))
        acc = acc_dtype([b.tensor.dtype for b in bound])
        options = [("std", op in ("Std", "StdMeanCorrection"))]
        scalars = [("correction", "long long", int(launch.plan["correction"]))]
        return self.plan(op, "moments", bound, outer_shape, inner_shape, acc, options, scalars)

    # ------------------------------------------------------------------ along one dim
    def _along(self, op: str, launch: Launch) -> RowPlan | None:
        x, out = _tensor(launch, "input" if op == "Cumprod" else "self"), _tensor(launch, "out")
        dim = launch.plan["dim"]
        if x.rank == 0:  # a 0-d tensor is one row of one element
            x = _as_1d(x)
            out = _as_1d(out)
            dim = 0
        outer_shape, inner_shape, xo, xi = split(x, (dim,))
        _, _, oo, oi = split(out, (dim,))
        bound = [bind("self", x, xo, xi), bind("out", out, oo, oi, write=True)]
        if op in ("Cumsum", "Cumprod"):
            dtype = D(launch.args["dtype"])
            dtype = _supported(op, x.dtype if dtype == D.ACL_DT_UNDEFINED else dtype)
            acc = int_acc(dtype)
            if ctype(acc).kind == "float":
                acc = acc_dtype([dtype, out.dtype])
            return self.plan(
                op,
                "cumsum",
                bound,
                outer_shape,
                inner_shape,
                acc,
                [("dtype", int(dtype)), *((("op", "prod"),) if op == "Cumprod" else ())],
                per_thread_rows=True,
            )
        acc = acc_dtype([x.dtype, out.dtype])
        return self.plan(op, "softmax", bound, outer_shape, inner_shape, acc, [("log", op == "LogSoftmax")])

    def _cum_extremum(self, op: str, launch: Launch) -> RowPlan | None:
        """Cummax / Cummin: Cumsum's thread-per-row scan with a running extremum and its index."""
        x, values, indices = (_tensor(launch, n) for n in ("self", "valuesOut", "indicesOut"))
        dim = launch.plan["dim"]
        if x.rank == 0:
            x, values, indices, dim = _as_1d(x), _as_1d(values), _as_1d(indices), 0
        outer_shape, inner_shape, xo, xi = split(x, (dim,))
        bound = [bind("self", x, xo, xi)]
        for name, t in (("out", values), ("indices", indices)):
            _, _, to, ti = split(t, (dim,))
            bound.append(bind(name, t, to, ti, write=True))
        options: list[tuple[str, str | int | bool]] = [("largest", op == "Cummax")]
        return self.plan(
            op, "cumext", bound, outer_shape, inner_shape, _compare_acc(x.dtype), options, per_thread_rows=True
        )

    def _arg(self, op: str, launch: Launch) -> RowPlan | Program | None:
        x = _tensor(launch, "self")
        if x.numel == 0:
            return None
        dim = launch.plan["dim"]
        if x.rank == 0:
            x = _as_1d(x)
            dim = 0
        outer_shape, inner_shape, xo, xi = split(x, (dim,))
        kept = [d for d in range(x.rank) if d != dim]
        with_values = op in ("MaxDim", "MinDim")
        index_name = "indices" if with_values else "out"
        indices = _tensor(launch, index_name)
        bound = [bind("self", x, xo, xi)]
        if with_values:
            values = _tensor(launch, "out")
            bound.append(bind("out", values, reduced_strides(values, x.rank, kept), (0,), write=True))
        bound.append(bind("indices", indices, reduced_strides(indices, x.rank, kept), (0,), write=True))
        acc = _compare_acc(x.dtype)
        options: list[tuple[str, str | int | bool]] = [("largest", op not in ("ArgMin", "MinDim"))]
        rows, length = math.prod(outer_shape), math.prod(inner_shape)
        slices = arg_slices(rows, length, self.backend.properties.compute_units)
        if slices < 2:
            return self.plan(op, "arg", bound, outer_shape, inner_shape, acc, options)
        mode = self.argmax_mode()
        LOG.debug("%s over %d x %d: the %s arg path (%s)", op, rows, length, mode, ARGMAX_ENV)
        if mode == "block":
            return self._wide_arg(op, bound, outer_shape, inner_shape, acc, options)
        return self._split_arg(op, bound, outer_shape, inner_shape, acc, options, slices, persist=mode == "persist")

    def argmax_mode(self) -> str:
        """The :data:`ARGMAX_ENV` path of few long arg rows (``persist`` unless set; bad values are refused)."""
        value = self.forced_arg or self.backend.environ.get(ARGMAX_ENV, "").strip().lower() or ARGMAX_DEFAULT
        if value not in ARGMAX_CONFIGS:
            raise AclnnError(
                AclnnStatus.ACLNN_ERR_PARAM_INVALID,
                f"{ARGMAX_ENV}={value!r}: expected one of {', '.join(ARGMAX_CONFIGS)}",
            )
        return value

    def _wide_arg(
        self,
        op: str,
        bound: list[Bound],
        outer_shape: Sequence[int],
        inner_shape: Sequence[int],
        acc: D,
        options: list[tuple[str, str | int | bool]],
    ) -> RowPlan | None:
        """One 1024-thread block per row; rows that are one aligned unit-stride run load 16 bytes at a time."""
        x = bound[0]
        unit = len(inner_shape) == 1
        vec = unit_vector(x.tensor, x.outer, x.inner if unit else (0,), math.prod(inner_shape))
        wide = [*options, ("block", WIDE_ARG_THREADS), ("wide", vec), ("unroll", WIDE_ARG_UNROLL)]
        planned = self.plan(op, "arg", bound, outer_shape, inner_shape, acc, wide)
        if planned is None:
            return None
        return RowPlan(planned.kernel, LaunchConfig(planned.config.grid, (WIDE_ARG_THREADS, 1, 1)), planned.values)

    def _split_arg(
        self,
        op: str,
        bound: list[Bound],
        outer_shape: Sequence[int],
        inner_shape: Sequence[int],
        acc: D,
        options: list[tuple[str, str | int | bool]],
        slices: int,
        persist: bool = False,
    ) -> Program:
        """One launch: each block finds its slice's candidate; each row's last block combines them.

        The candidates and the per-row block counters live in one stream-ordered temporary whose
        counters are zeroed on the stream first (no host synchronisation: capturable, and every run or
        replay starts from zero). With ``persist`` they live in the stream's persistent scratch (region
        :data:`ARG_SCRATCH`, :meth:`RocmDriver.stream_scratch`: zeroed once per stream, per capture a buffer
        of its own zeroed off the captured stream, so planning allocates nothing and a first call inside a
        capture records nothing but the launch); the row's last block sets its counter back to zero, so a
        call enqueues the launch alone. Launches on one stream never overlap; two streams have two buffers.
        Every such call of the stream shares the region, so the counters of all of them sit in one area at
        its start (row r's at 4 r: rows here are fewer than the compute units) and the candidates after it,
        where no call's counter lies (otherwise one call's candidates would leave another's counter non-zero).
        """
        rows = math.prod(outer_shape)
        parts = rows * slices
        span = -(-math.prod(inner_shape) // slices)  # elements of one slice, as the kernel splits the row
        prog = Program()
        nbytes = parts * 16 + rows * 4  # 8-byte candidates, their int64 indices, uint32 counters
        where: tuple[Any, Any, Any]
        if persist:  # counters first, in an area no call's candidates reach (rows < compute units here)
            counters = -(-4 * max(rows, self.backend.properties.compute_units) // 256) * 256
            prog.scratch, prog.scratch_region = counters + parts * 16, ARG_SCRATCH
            where = (Scratch(counters), Scratch(counters + parts * 8), Scratch(0))
        else:
            values_at = prog.temp(nbytes)
            where = (values_at, Temp(values_at.slot, parts * 8), Temp(values_at.slot, parts * 16))
            prog.zeroed.append((where[2], rows * 4))
        flat = (0,) * len(outer_shape)

        def part(name: str, dtype: D) -> Bound:
            # a placeholder tensor: the kernel indexes candidates itself; its address is the temporary's
            placeholder = AclTensor((parts,), dtype, (1,), 0, Format.ACL_FORMAT_ND, (parts,), 0)
            return bind(name, placeholder, flat, (0,), write=True)

        planned = self.plan(
            op,
            "arg",
            [bound[0], part("part_v", acc), part("part_i", D.ACL_INT64), part("part_c", D.ACL_UINT32), *bound[1:]],
            outer_shape,
            inner_shape,
            acc,
            [
                *options,
                ("slices", slices),
                ("prefetch", min(PREFETCH_MAX, -(-span // BLOCK_THREADS))),
                *((("reset", True),) if persist else ()),
            ],
        )
        assert planned is not None  # rows > 0 here
        p = self.backend.properties
        grid = LaunchConfig((min(parts, p.max_grid_x), 1, 1), (BLOCK_THREADS, 1, 1))
        values: list[Any] = list(planned.values)
        values[2], values[3], values[4] = where
        kernel = self._interned.setdefault(planned.kernel, planned.kernel)
        function = self.backend.function(self.source(kernel), kernel.kernel_name)
        prog.steps.append(Step(function, grid, tuple(values)))
        return prog


def _as_1d(t: AclTensor) -> AclTensor:
    """A 0-d tensor as shape (1,)."""
    if t.rank:
        return t
    return AclTensor((1,), t.dtype, (1,), t.offset, t.format, t.storage_dims, t.data)


RUNNER = ReductionRunner

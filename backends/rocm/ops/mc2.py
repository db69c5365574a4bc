"""MC2 on the rocm backend: MatmulAllReduce(V2), AllGatherMatmul, MatmulReduceScatter as GEMM + NCCL, and
the expert-parallel MoeDistributeDispatch / MoeDistributeCombine (V1–V4) as NCCL all-gathers + routing kernels.

Each operator runs exactly the single operators its spec (:mod:`acl_core.spec.ops.mc2`) composes,
through this backend's own kernels, so the result equals that composition bit for bit:

* MatmulAllReduce: Mm (or Addmm with beta = alpha = 1 when there is a bias) on the 2-D view
  (b·s, k) of x1, then ncclAllReduce(sum) in place; V2 adds x3 in place (Add with alpha 1, out =
  self, as InplaceAdd runs) before the reduction.
* AllGatherMatmul: ncclAllGather of x1 into gatherOut (rank order along dim 0), then Mm.
* MatmulReduceScatter: Mm, then ncclReduceScatter(sum); rank r keeps row block r.

Everything is enqueued on the caller's stream: the GEMM, then the collective (NCCL waits for the
GEMM by stream order), with no host synchronisation. NCCL needs dense buffers, so a non-contiguous
x1 (AllGatherMatmul) or output (all three) goes through a stream-ordered dense temporary and an
on-device copy; an x1 whose leading dims do not fold into rows is copied the same way. ``group`` is
a communicator name, resolved as the reference resolves it (:func:`acl_core.hccl.resolve_group`),
so a communicator made with HcclCommInitRootInfo is found by its HcclGetCommName. The ops are
claimed only when the BLAS and the collective engine (NCCL/RCCL) are both available.

Expert parallelism exchanges what the reference exchanges (:mod:`acl_reference.kernels.mc2`), with one
ncclAllGather per array on the caller's stream, then decides on the device (no host synchronisation, no
device-to-host read, so both capture):

* Dispatch: x, expertIds, the active mask (expanded to [Bs, K] bytes; all ones without one) and, when
  given, expertScales are gathered; :class:`~acl_rocm.kernels.mc2.DispatchRoute` checks the ids and
  writes the tables and the received copies' positions; the MoE family's RangeGather copies the rows
  (RangeQuant quantises them for quantMode 2, with the copy's expert's smooth row) and the carried
  weights, zeros after the last.
* Combine: expandX, epSendCounts and (V2+) the first three int32 of each assistInfoForCombine row (all
  the reference reads) are gathered; :class:`~acl_rocm.kernels.mc2.CombineRows` checks the counts and
  finds each active copy's row, :class:`~acl_rocm.kernels.mc2.CombineSum` forms the weighted sum.

Ids out of range, tables that do not come from a dispatch and duplicate ids that overflow A are
refused through the driver's deferred device check (161002 at the next synchronisation, as Gather's
index checks are); the outputs of such a call are not meaningful (the tables are left unwritten).
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from acl_core.backend import Kernel, Launch
from acl_core.dtypes import DataType as D
from acl_core.errors import AclError, AclErrorCode, AclnnError, AclnnStatus, HcclError
from acl_core.formats import Format
from acl_core.spec.collective import ACL_TO_HCCL, CollectiveEngine, EngineCommunicator, HcclDataType, HcclReduceOp
from acl_core.spec.kernel_args import kernel_args
from acl_core.spec.ops import all_specs
from acl_core.spec.validate import validate
from acl_core.tensor import AclScalar, AclTensor, contiguous_strides
from acl_rocm.driver import handle
from acl_rocm.kernels.mc2 import SEGMENT, CombineRows, CombineSum
from acl_rocm.launch import KernelArgs, LaunchConfig, longs
from acl_rocm.ops.mc2_dispatch import ROUTE_BLOCK, DispatchPlan, dispatch_copies
from acl_rocm.ops.program import FLAG, Program, run_program

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

OPS: tuple[str, ...] = (
    "AllGatherMatmul",
    "MatmulAllReduce",
    "MatmulAllReduceV2",
    "MatmulReduceScatter",
    "MoeDistributeCombine",
    "MoeDistributeCombineV2",
    "MoeDistributeDispatch",
    "MoeDistributeDispatchV2",
)
BYTES = HcclDataType.HCCL_DATA_TYPE_UINT8
SUM = HcclReduceOp.HCCL_REDUCE_SUM
ROUTE_ENV = "ACL_MC2_ROUTE"
"""How MoeDistributeDispatch routes: ``block`` (one block builds every table: one launch, the decode case) or ``grid``
(three launches, the copies' scans spread over the GPU as (expert, rank, segment) units: prefill); unset: ``grid`` from
:data:`ROUTE_GRID_MIN` gathered copies (world x tokens x top-k). The tables are the same."""
ROUTES = ("block", "grid")
ROWS_ENV = "ACL_MC2_ROWS"
"""How MoeDistributeDispatch copies expandXOut's rows (quantMode 0): ``range`` (the default: the MoE family's
RangeGather, a thread per 16-byte word of the flat output, its row found by a 64-bit division per word) or ``row``
(:class:`~acl_rocm.kernels.mc2.DispatchRows`: a block a row at a time, the row's source found once). The rows are
the same."""
ROWS_CHOICES = ("range", "row")
ROUTE_GRID_MIN = 2048
"""Gathered copies from which the grid routing is the default: the one block's threads each scan about copies / 4 x 2
(64 experts, one rank), some 1,000 dependent steps here against the grid's two more launches (not measured yet)."""


def rows_view(t: AclTensor) -> AclTensor | None:
    """``t`` (…, c) as a 2-D (rows, c) view of the same storage, or None when its leading dims do not fold."""
    if t.rank == 2:
        return t
    dims, strides = t.view_dims, t.strides
    rows = math.prod(dims[:-1])
    row_stride = strides[-2]
    for i in range(t.rank - 2):
        if dims[i] != 1 and strides[i] != dims[i + 1] * strides[i + 1] and rows != 0:
            return None
    shape = (rows, dims[-1])
    return AclTensor(shape, t.dtype, (row_stride, strides[-1]), t.offset, t.format, t.storage_dims, t.data)


def dense(shape: tuple[int, ...], dtype: D, address: int) -> AclTensor:
    """A contiguous tensor of ``shape`` at ``address``."""
    return AclTensor(shape, dtype, contiguous_strides(shape), 0, Format.ACL_FORMAT_ND, shape, address)


def reshaped(t: AclTensor, shape: tuple[int, ...]) -> AclTensor:
    """The contiguous tensor ``t`` seen with another shape of the same element count."""
    assert t.is_contiguous and math.prod(shape) == t.numel
    return AclTensor(shape, t.dtype, contiguous_strides(shape), t.offset, t.format, t.storage_dims, t.data)


def start(t: AclTensor) -> int:
    """Device address of a tensor's first element."""
    return t.data + t.offset * (t.dtype.info.storage_bits // 8)


class _Scratch:
    """Stream-ordered device temporaries of one call, freed on the same stream when the call's work is enqueued."""

    def __init__(self, backend: RocmBackend, stream: int) -> None:
        self.provider = backend.provider
        self.stream = stream
        self.addresses: list[int] = []

    def tensor(self, shape: tuple[int, ...], dtype: D) -> AclTensor:
        """A dense temporary tensor."""
        nbytes = max(math.prod(shape), 1) * (dtype.info.storage_bits // 8)
        address = self.provider.malloc_async(nbytes, self.stream)
        self.addresses.append(address)
        return dense(shape, dtype, address)

    def free(self) -> None:
        """Free every temporary after the work already enqueued on the stream."""
        for address in self.addresses:
            self.provider.free_async(address, self.stream)
        self.addresses.clear()


class Mc2Runner:
    """The MC2 operators: this backend's GEMM kernels, then the collective engine, on the caller's stream."""

    def __init__(self, backend: RocmBackend) -> None:
        self.backend = backend
        self._specs = all_specs()
        self.forced_route: str | None = None
        """An :data:`ROUTE_ENV` setting over the environment's for calls made while set (tests, the bench's rows)."""
        self.route_segment = SEGMENT
        """Copies a grid routing unit scans (tests make it small so that a pair spans several units)."""
        self.forced_rows: str | None = None
        """An :data:`ROWS_ENV` setting over the environment's for calls made while set (tests, the bench's rows)."""

    def rows_copy(self) -> str:
        """How the dispatch copies expandXOut's rows: forced, else :data:`ROWS_ENV`, else ``range``."""
        value = (self.forced_rows or self.backend.environ.get(ROWS_ENV, "") or "range").strip().lower()
        if value not in ROWS_CHOICES:
            raise AclError(AclErrorCode.ACL_ERROR_INVALID_PARAM, f"{ROWS_ENV}={value!r}: not one of {ROWS_CHOICES}")
        return value

    def route(self, copies: int) -> str:
        """The dispatch routing for ``copies`` gathered copies: forced, else :data:`ROUTE_ENV`, else by size."""
        value = (self.forced_route or self.backend.environ.get(ROUTE_ENV, "")).strip().lower()
        if not value:
            return "grid" if copies >= ROUTE_GRID_MIN else "block"
        if value not in ROUTES:
            raise AclError(AclErrorCode.ACL_ERROR_INVALID_PARAM, f"{ROUTE_ENV}={value!r}: not one of {ROUTES}")
        return value

    def unavailable(self) -> str | None:
        """None when GEMM and collectives both work here, else why the MC2 ops are not claimed."""
        gemm = self.backend.matmul.unavailable()
        if gemm is not None:
            return f"no GEMM: {gemm}"
        if self.backend.collectives is None:
            opened = self.backend._collectives
            return f"no collective engine: {opened[1] if opened else 'not probed'}"
        return None

    def note(self) -> str:
        """The capabilities note: what runs the MC2 ops, or why they are not claimed."""
        why = self.unavailable()
        if why:
            return f"not claimed: {why}"
        return (
            "the single ops' GEMM kernels + the collective engine, one stream; MoeDistributeDispatch/Combine:"
            " ncclAllGather of every rank's data, then device-side routing kernels (no host synchronisation)"
        )

    def kernels(self) -> dict[str, Kernel]:
        """A kernel per MC2 op, or none when GEMM or collectives are missing."""
        if self.unavailable() is not None:
            return {}
        return {
            "MatmulAllReduce": self.matmul_all_reduce,
            "MatmulAllReduceV2": self.matmul_all_reduce,
            "AllGatherMatmul": self.all_gather_matmul,
            "MatmulReduceScatter": self.matmul_reduce_scatter,
            "MoeDistributeDispatch": self.moe_dispatch,
            "MoeDistributeDispatchV2": self.moe_dispatch,
            "MoeDistributeCombine": self.moe_combine,
            "MoeDistributeCombineV2": self.moe_combine,
        }

    # ------------------------------------------------------------------ plumbing
    def _single(self, op: str, stream: object, args: dict[str, Any]) -> None:
        """Run single operator ``op`` as its aclnn call would: validated, then this backend's kernel."""
        spec = self._specs[op]
        call = validate(spec, args, None)
        self.backend.kernels[spec.kernel_name](Launch(spec, kernel_args(spec, call.args), call.plan, 0, 0, stream))

    def _group(self, launch: Launch, param: str = "group") -> tuple[CollectiveEngine, EngineCommunicator]:
        from acl_core.hccl import resolve_group

        engine = self.backend.collectives
        name = launch.args[param]
        if engine is None:
            raise AclnnError(AclnnStatus.ACLNN_ERR_RUNTIME_ERROR, "the rocm backend has no collective engine")
        try:
            return engine, resolve_group(name, engine, self.backend.runtime.get_device())
        except HcclError as exc:
            raise AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, f"{param} {name!r}: {exc.message}") from None

    @staticmethod
    def _collective(what: str, fn: Callable[[], None]) -> None:
        try:
            fn()
        except HcclError as exc:
            raise AclnnError(AclnnStatus.ACLNN_ERR_RUNTIME_ERROR, f"{what} failed ({exc}): {exc.message}") from None

    def _rows(self, t: AclTensor, scratch: _Scratch, stream: int) -> AclTensor:
        """``t`` as (rows, c): a view when its dims fold, else a dense on-device copy."""
        view = rows_view(t)
        if view is not None:
            return view
        copy = scratch.tensor(t.view_dims, t.dtype)
        self.backend.elementwise.convert(t, copy, stream)
        return reshaped(copy, (math.prod(t.view_dims[:-1]), t.view_dims[-1]))

    def _dense_target(self, out: AclTensor, scratch: _Scratch) -> AclTensor:
        """``out`` itself when it is dense (NCCL writes it in place), else a dense temporary of its shape."""
        return out if out.is_contiguous else scratch.tensor(out.view_dims, out.dtype)

    # ------------------------------------------------------------------ operators
    def matmul_all_reduce(self, launch: Launch) -> None:
        """output = allreduce_sum(x1 @ x2 + bias [+ x3]): Mm/Addmm [+ Add in place], then ncclAllReduce in place."""
        args = launch.args
        x1, x2, bias, out = args["x1"], args["x2"], args.get("bias"), args["output"]
        x3 = args.get("x3")
        assert isinstance(x1, AclTensor) and isinstance(x2, AclTensor) and isinstance(out, AclTensor)
        engine, comm = self._group(launch)
        if out.numel == 0:
            return
        stream = handle(launch.stream)
        scratch = _Scratch(self.backend, stream)
        try:
            a = self._rows(x1, scratch, stream)
            target = self._dense_target(out, scratch)
            product = reshaped(target, (a.view_dims[0], x2.view_dims[1]))
            if bias is not None:
                one = AclScalar.create(1, D.ACL_FLOAT)  # Addmm's scalars: no bf16; 1 is exact in any
                addmm = {"self": bias, "mat1": a, "mat2": x2, "beta": one, "alpha": one, "out": product}
                self._single("Addmm", launch.stream, {**addmm, "cubeMathType": 0})
            else:
                self._single("Mm", launch.stream, {"self": a, "mat2": x2, "out": product, "cubeMathType": 0})
            if x3 is not None:
                add = {"self": target, "other": x3, "alpha": AclScalar.create(1, out.dtype), "out": target}
                self._single("Add", launch.stream, add)  # in place, as InplaceAdd runs it
            address, count = start(target), target.numel
            self._collective(
                "ncclAllReduce",
                lambda: engine.all_reduce(comm, address, address, count, ACL_TO_HCCL[out.dtype], SUM, launch.stream),
            )
            if target is not out:
                self.backend.elementwise.convert(target, out, stream)
        finally:
            scratch.free()

    def all_gather_matmul(self, launch: Launch) -> None:
        """gatherOut = ncclAllGather(x1); output = Mm(gatherOut, x2)."""
        args = launch.args
        x1, x2, out, gather_out = args["x1"], args["x2"], args["output"], args.get("gatherOut")
        assert isinstance(x1, AclTensor) and isinstance(x2, AclTensor) and isinstance(out, AclTensor)
        engine, comm = self._group(launch)
        if x1.numel == 0:
            return  # nothing to gather: output and gatherOut are empty (m = 0)
        stream = handle(launch.stream)
        scratch = _Scratch(self.backend, stream)
        try:
            send = x1 if x1.is_contiguous else scratch.tensor(x1.view_dims, x1.dtype)
            if send is not x1:
                self.backend.elementwise.convert(x1, send, stream)
            shape = (x1.view_dims[0] * comm.size, x1.view_dims[1])
            gathered = (
                gather_out
                if isinstance(gather_out, AclTensor) and gather_out.is_contiguous
                else scratch.tensor(shape, x1.dtype)
            )
            src, dst, count = start(send), start(gathered), send.numel
            self._collective(
                "ncclAllGather",
                lambda: engine.all_gather(comm, src, dst, count, ACL_TO_HCCL[x1.dtype], launch.stream),
            )
            if out.numel:
                self._single("Mm", launch.stream, {"self": gathered, "mat2": x2, "out": out, "cubeMathType": 0})
            if isinstance(gather_out, AclTensor) and gathered is not gather_out:
                self.backend.elementwise.convert(gathered, gather_out, stream)
        finally:
            scratch.free()

    def matmul_reduce_scatter(self, launch: Launch) -> None:
        """output = ncclReduceScatter_sum(Mm(x1, x2)): rank r keeps rows [r·m/N, (r+1)·m/N)."""
        args = launch.args
        x1, x2, out = args["x1"], args["x2"], args["output"]
        assert isinstance(x1, AclTensor) and isinstance(x2, AclTensor) and isinstance(out, AclTensor)
        engine, comm = self._group(launch)
        if out.numel == 0:
            return
        stream = handle(launch.stream)
        scratch = _Scratch(self.backend, stream)
        try:
            product = scratch.tensor((x1.view_dims[0], x2.view_dims[1]), out.dtype)
            self._single("Mm", launch.stream, {"self": x1, "mat2": x2, "out": product, "cubeMathType": 0})
            target = self._dense_target(out, scratch)
            src, dst, count = start(product), start(target), target.numel
            self._collective(
                "ncclReduceScatter",
                lambda: engine.reduce_scatter(comm, src, dst, count, ACL_TO_HCCL[out.dtype], SUM, launch.stream),
            )
            if target is not out:
                self.backend.elementwise.convert(target, out, stream)
        finally:
            scratch.free()

    # ------------------------------------------------------------------ expert parallelism
    def _dense(self, t: AclTensor, scratch: _Scratch, stream: int) -> AclTensor:
        """``t`` itself when contiguous, else a dense on-device copy (NCCL sends dense buffers)."""
        if t.is_contiguous:
            return t
        copy = scratch.tensor(t.view_dims, t.dtype)
        self.backend.elementwise.convert(t, copy, stream)
        return copy

    def _gather(
        self,
        engine: CollectiveEngine,
        comm: EngineCommunicator,
        send: AclTensor,
        scratch: _Scratch,
        stream_obj: object,
        as_bytes: bool = True,
    ) -> AclTensor:
        """Every rank's ``send`` (dense) stacked along a new leading dim of the world size, by ncclAllGather."""
        recv = scratch.tensor((comm.size, *send.view_dims), send.dtype)
        src, dst = start(send), start(recv)
        itemsize = send.dtype.info.storage_bits // 8
        count, kind = (send.numel * itemsize, BYTES) if as_bytes else (send.numel, ACL_TO_HCCL[send.dtype])
        if count:
            self._collective("ncclAllGather", lambda: engine.all_gather(comm, src, dst, count, kind, stream_obj))
        return recv

    def _program(self, prog: Program, kernel: Any, config: LaunchConfig, values: list[Any]) -> None:
        prog.steps.append(_step(self.backend, kernel, config, values))

    def moe_dispatch(self, launch: Launch) -> None:
        """MoeDistributeDispatch(V1–V4): all-gather x, ids, masks and weights; route on the device.

        Planned once per signature, routing and communicator (:class:`~acl_rocm.ops.mc2_dispatch.DispatchPlan`):
        a repeated call replays its packed launches over the stream's scratch."""
        engine, comm = self._group(launch, "groupEp")
        route, rows = self.route(dispatch_copies(launch, comm.size)), self.rows_copy()
        key = f"rocm.mc2.dispatch@{self.backend.provider.get_device()}:{route}:{rows}:{self.route_segment}"
        plan = launch.memo.get(key)
        if plan is None or plan.comm is not comm or plan.engine is not engine:
            plan = launch.memo[key] = DispatchPlan(self, launch, engine, comm, route, rows)
        plan.run(handle(launch.stream))

    def moe_combine(self, launch: Launch) -> None:
        """MoeDistributeCombine(V1–V4): all-gather expert outputs, counts and assist rows; sum on the device."""
        from acl_core.spec.ops.mc2 import ASSIST_PER_ROW, _names

        v1 = launch.spec.kernel_name == "MoeDistributeCombine"
        n = _names(v1)
        args = launch.args
        y, ids, table, counts = args["expandX"], args["expertIds"], args[n["assistIn"]], args["epSendCounts"]
        weights, mask, out = args["expertScales"], args.get(n["xActiveMask"]), args[n["xOut"]]
        assert isinstance(y, AclTensor) and isinstance(ids, AclTensor) and isinstance(table, AclTensor)
        assert isinstance(counts, AclTensor) and isinstance(weights, AclTensor) and isinstance(out, AclTensor)
        engine, comm = self._group(launch, "groupEp")
        world, me = comm.size, comm.rank
        bs, top_k = ids.view_dims
        rows, hidden = y.view_dims
        local = int(args["moeExpertNum"]) // world
        if world * rows >= 2**31:
            raise AclnnError(
                AclnnStatus.ACLNN_ERR_PARAM_INVALID,
                f"the rocm backend cannot combine {world}·{rows} expert rows (row numbers travel as int32)",
            )
        stream = handle(launch.stream)
        scratch = _Scratch(self.backend, stream)
        try:
            gy = self._gather(engine, comm, self._dense(y, scratch, stream), scratch, launch.stream, as_bytes=False)
            gcounts = self._gather(engine, comm, self._dense(counts, scratch, stream), scratch, launch.stream)
            gassist: AclTensor | None = None
            if not v1:  # the first three int32 of each row: (source rank, token, slot), all the reference reads
                st = table.strides[0]
                head = AclTensor(
                    (rows, 3),
                    D.ACL_INT32,
                    (ASSIST_PER_ROW * st, st),
                    table.offset,
                    table.format,
                    table.storage_dims,
                    table.data,
                )
                packed = scratch.tensor((rows, 3), D.ACL_INT32)
                if rows:
                    self.backend.elementwise.convert(head, packed, stream)
                gassist = self._gather(engine, comm, packed, scratch, launch.stream)
            m = mask if isinstance(mask, AclTensor) else None
            ms = (0, 0) if m is None else ((m.strides[0], 0) if m.rank == 1 else tuple(m.strides))
            prog = Program(
                report=f"{launch.spec.name}: epSendCounts, expertIds and the dispatch's "
                f"{n['assistIn']} do not describe the rows a dispatch sent"
            )
            found, bad = prog.temp(4 * bs * top_k), prog.temp(4)
            prog.zeroed.append((bad, 4))
            null = ctypes.c_void_p(0)
            values: list[Any] = [_p(gcounts), _p(gassist) if gassist is not None else null]
            values += [_p(ids) if v1 else null, _p(table) if v1 else null, _p(m) if m is not None else null]
            values += [found, bad, FLAG, *longs(world, me, local, bs, top_k, rows, *ids.strides, table.strides[0], *ms)]
            self._program(prog, CombineRows(v1), LaunchConfig((1, 1, 1), (ROUTE_BLOCK, 1, 1)), values)
            total = bs * hidden
            step = [_p(gy), _p(weights), found, _p(m) if m is not None else null, bad, _p(out)]
            step += longs(total, bs, top_k, hidden, *weights.strides, *ms, *out.strides)
            self._program(prog, CombineSum(y.dtype), self.backend.elementwise_config(max(total, 1), 1), step)
            run_program(self.backend, prog, stream)
        finally:
            scratch.free()


def _p(t: AclTensor) -> ctypes.c_void_p:
    return KernelArgs.pointer(start(t))


def _step(backend: RocmBackend, kernel: Any, config: LaunchConfig, values: list[Any]) -> Any:
    from acl_rocm.ops.program import Step

    return Step(backend.function(kernel.source(), kernel.kernel_name), config, tuple(values))


RUNNER = Mc2Runner

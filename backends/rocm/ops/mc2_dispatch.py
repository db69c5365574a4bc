"""MoeDistributeDispatch (V1–V4) on the rocm backend: one signature's launches planned once, replayed per call.

The first call of a signature (a :attr:`Launch.memo` entry, per device, routing and communicator) lays out
every device temporary of a call (the dense copies NCCL sends, the gathered ids, masks, weights and rows,
the routing tables) in the stream's persistent scratch (:meth:`RocmDriver.stream_scratch`, regions
:data:`TABLES_REGION` and :data:`ROWS_REGION`: the launches of one stream never overlap, so one buffer per
stream serves every call on it), loads the kernels and packs their arguments. A later call on the same
stream and scratch replays that binding: the mask conversion (or memset), the all-gathers, a fresh
check flag, the packed launches, the deferred check; nothing is allocated, packed or compiled, and
nothing waits for the device (so it captures). A stream (or a capture) whose scratch lies elsewhere gets
a binding of its own; a rebound executor revalidates and gets a fresh memo, so a plan never outlives the
addresses it packed.
"""

from __future__ import annotations

import copy
import ctypes
import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from acl_core.backend import Launch
from acl_core.dtypes import DataType as D
from acl_core.spec.collective import ACL_TO_HCCL, CollectiveEngine, EngineCommunicator, HcclDataType
from acl_core.tensor import AclTensor, contiguous_strides
from acl_rocm.kernels.mc2 import DispatchCount, DispatchPlace, DispatchRoute, DispatchRows, DispatchScan, grid_units
from acl_rocm.kernels.moe import RangeGather, RangeQuant
from acl_rocm.launch import KernelArgs, LaunchConfig, longs
from acl_rocm.ops.program import FLAG, Program

if TYPE_CHECKING:
    from acl_rocm.ops.mc2 import Mc2Runner

TABLES_REGION = "mc2.dispatch"
"""The stream scratch region of a dispatch's small temporaries (masks, gathered ids and weights, routing tables)."""
ROWS_REGION = "mc2.dispatch.rows"
"""The stream scratch region of a dispatch's gathered rows (kept apart: their size rounds up on its own)."""
ALIGN = 256
"""Bytes each temporary's offset is a multiple of (16-byte row copies need 16)."""
BINDINGS = 8
"""(stream, scratch) bindings a plan keeps before it starts over (streams and captures in use at once)."""
BYTES = HcclDataType.HCCL_DATA_TYPE_UINT8
ROUTE_BLOCK = 256
"""Threads of the one-block routing kernels (the sort family's launch bound)."""
ROWS_BLOCKS_PER_UNIT = 8
"""Blocks a compute unit of :class:`DispatchRows` (``ACL_MC2_ROWS=row``): 8 of 256 threads fill an H100 SM."""
LOG = logging.getLogger("acl_rocm.mc2")


class Layout:
    """Byte offsets of named temporaries in one scratch region, each :data:`ALIGN`-aligned."""

    def __init__(self) -> None:
        self.size = 0
        self.at: dict[str, int] = {}

    def take(self, name: str, nbytes: int) -> None:
        """Reserve ``nbytes`` (at least 1) for ``name``."""
        self.at[name] = self.size
        self.size += -(-max(int(nbytes), 1) // ALIGN) * ALIGN


def _dense(shape: tuple[int, ...], dtype: D, address: int) -> AclTensor:
    from acl_core.formats import Format

    return AclTensor(shape, dtype, contiguous_strides(shape), 0, Format.ACL_FORMAT_ND, shape, address)


def _start(t: AclTensor) -> int:
    return t.data + t.offset * (t.dtype.info.storage_bits // 8)


def _p(t: AclTensor) -> ctypes.c_void_p:
    return KernelArgs.pointer(_start(t))


@dataclass
class Binding:
    """One signature bound to a stream's scratch: host actions and packed launches, replayed by every call."""

    pre: list[Callable[[], None]]
    """Enqueue, in order, what comes before the routing kernels (mask bytes, dense copies, all-gathers)."""
    launches: list[tuple[object, LaunchConfig, KernelArgs]]
    flag: ctypes.c_void_p
    """The flag argument every launch that checks shares: set to the call's fresh flag before they launch."""
    report: str
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, runner: Mc2Runner, stream: int) -> None:
        """Enqueue one call on ``stream`` (no allocation, no packing, no wait)."""
        for action in self.pre:
            action()
        driver, provider = runner.backend.driver, runner.backend.provider
        flag = driver.check_flag(stream)
        try:
            with self.lock:  # the shared flag slot: one thread's launches at a time
                self.flag.value = flag
                for function, cfg, args in self.launches:
                    provider.launch(function, cfg.grid, cfg.block, cfg.shared_bytes, stream, args.address)
        except BaseException:
            driver.drop_check(stream, flag)
            raise
        driver.defer_check(stream, flag, self.report)


class DispatchPlan:
    """One MoeDistributeDispatch signature on one device, routing and communicator: its scratch and bindings."""

    def __init__(
        self,
        runner: Mc2Runner,
        launch: Launch,
        engine: CollectiveEngine,
        comm: EngineCommunicator,
        route: str,
        rows_copy: str = "range",
    ) -> None:
        from acl_core.spec.ops.mc2 import _names

        self.runner, self.engine, self.comm, self.route = runner, engine, comm, route
        self.rows_copy = rows_copy
        self.spec_name = launch.spec.name
        self.v1 = launch.spec.kernel_name == "MoeDistributeDispatch"
        self.n = _names(self.v1)
        # the tensors as planned: a later binding (another stream, a capture) packs these addresses even if a
        # caller re-points the shared tensor objects (aclSetRawTensorAddr gives that caller a plan of its own)
        self.args: dict[str, Any] = {k: copy.copy(v) if isinstance(v, AclTensor) else v for k, v in launch.args.items()}
        x, ids = self.args["x"], self.args["expertIds"]
        assert isinstance(x, AclTensor) and isinstance(ids, AclTensor)
        out_x = self.args[self.n["expandX"]]
        assert isinstance(out_x, AclTensor)
        self.world, self.me = comm.size, comm.rank
        self.bs, self.hidden = x.view_dims
        self.top_k = ids.view_dims[1]
        self.rows = out_x.view_dims[0]
        per = self.bs * self.top_k
        segs, units = grid_units(int(self.args["moeExpertNum"]) // self.world, self.world, per, runner.route_segment)
        self.segs, self.units = segs, units
        tables, rows = Layout(), Layout()
        tables.take("active", per)
        weights = self.args.get(self.n["expertScales"])
        for name, t in (("ids", ids), ("weights", weights)):
            if isinstance(t, AclTensor) and not t.is_contiguous:
                tables.take(f"dense_{name}", t.numel * (t.dtype.info.storage_bits // 8))
        tables.take("gid", 4 * self.world * per)
        tables.take("gmask", self.world * per)
        if isinstance(weights, AclTensor):
            tables.take("gw", 4 * self.world * per)
        for name, nbytes in (("bounds", 16), ("pos", 4 * self.rows), ("keys", 4 * self.rows)):
            tables.take(name, nbytes)
        if route == "grid":
            tables.take("starts", 4 * units)
            tables.take("state", 16)
        item = x.dtype.info.storage_bits // 8
        if not x.is_contiguous:
            rows.take("dense_x", x.numel * item)
        rows.take("gx", self.world * x.numel * item)
        self.tables, self.gathered = tables, rows
        self.bindings: dict[tuple[int, int, int], Binding] = {}

    def run(self, stream: int) -> None:
        """Enqueue one call on ``stream``, binding the plan to the stream's scratch the first time."""
        driver = self.runner.backend.driver
        tables = driver.stream_scratch(stream, self.tables.size, TABLES_REGION)
        rows = driver.stream_scratch(stream, self.gathered.size, ROWS_REGION)
        key = (stream, tables, rows)
        binding = self.bindings.get(key)
        if binding is None:
            if len(self.bindings) >= BINDINGS:
                self.bindings.clear()
            binding = self.bindings[key] = self.bind(stream, tables, rows)
        binding.run(self.runner, stream)

    # ------------------------------------------------------------------ binding
    def bind(self, stream: int, tables: int, rows: int) -> Binding:
        """The packed launches and host actions of this signature on ``stream`` with its scratch at these bases."""
        backend, args, n = self.runner.backend, self.args, self.n
        ew = backend.elementwise

        def at(name: str, shape: tuple[int, ...], dtype: D) -> AclTensor:
            base = rows if name in self.gathered.at else tables
            layout = self.gathered if name in self.gathered.at else self.tables
            return _dense(shape, dtype, base + layout.at[name])

        pre: list[Callable[[], None]] = []

        def convert(src: AclTensor, dst: AclTensor) -> None:
            prepared = ew.prepare(ew.plan_convert(src, dst))
            if prepared is not None:
                pre.append(lambda: ew.launch_prepared(prepared, stream))

        def dense(t: AclTensor, name: str) -> AclTensor:
            if t.is_contiguous:
                return t
            copy = at(f"dense_{name}", tuple(t.view_dims), t.dtype)
            convert(t, copy)
            return copy

        bs, top_k, world = self.bs, self.top_k, self.world
        x, ids = args["x"], args["expertIds"]
        mask, weights = args.get(n["xActiveMask"]), args.get(n["expertScales"])
        active = at("active", (bs, top_k), D.ACL_BOOL)
        if isinstance(mask, AclTensor):
            strides = (mask.strides[0], 0) if mask.rank == 1 else tuple(mask.strides)
            shaped = AclTensor((bs, top_k), D.ACL_BOOL, strides, mask.offset, mask.format, mask.storage_dims, mask.data)
            convert(shaped, active)
        elif active.numel:
            provider, address, count = backend.provider, active.data, active.numel
            pre.append(lambda: provider.memset(address, 1, count, stream))
        gather = self._gather(pre, stream)
        gx = gather(dense(x, "x"), at("gx", (world, *x.view_dims), x.dtype), False)
        gid = gather(dense(ids, "ids"), at("gid", (world, *ids.view_dims), ids.dtype), True)
        gmask = gather(active, at("gmask", (world, bs, top_k), D.ACL_BOOL), True)
        gw = None
        if isinstance(weights, AclTensor):
            gw = gather(dense(weights, "weights"), at("gw", (world, *weights.view_dims), weights.dtype), True)
        prog = self._program(gid, gmask, gx, gw, at)
        flag = ctypes.c_void_p(0)
        launches = [
            (s.function, s.config, KernelArgs([flag if v is FLAG else v for v in s.values])) for s in prog.steps
        ]
        assert prog.report is not None and not prog.temps
        return Binding(pre, launches, flag, prog.report)

    def _gather(self, pre: list[Callable[[], None]], stream: int) -> Callable[[AclTensor, AclTensor, bool], AclTensor]:
        """``gather(send, recv, as_bytes)``: appends to ``pre`` ncclAllGather of every rank's dense ``send`` into
        ``recv`` on ``stream`` (as bytes, or as ``send``'s dtype), returns ``recv``."""
        engine, comm, collective = self.engine, self.comm, self.runner._collective

        def gather(send: AclTensor, recv: AclTensor, as_bytes: bool) -> AclTensor:
            src, dst = _start(send), _start(recv)
            itemsize = send.dtype.info.storage_bits // 8
            count, kind = (send.numel * itemsize, BYTES) if as_bytes else (send.numel, ACL_TO_HCCL[send.dtype])
            if count:
                pre.append(
                    lambda: collective("ncclAllGather", lambda: engine.all_gather(comm, src, dst, count, kind, stream))
                )
            return recv

        return gather

    def _program(
        self,
        gid: AclTensor,
        gmask: AclTensor,
        gx: AclTensor,
        gw: AclTensor | None,
        at: Callable[[str, tuple[int, ...], D], AclTensor],
    ) -> Program:
        """The routing kernels and the row copies, every address absolute (the flag a :data:`FLAG`)."""
        from acl_rocm.ops.moe import MoeRunner

        args, n, v1 = self.args, self.n, self.v1
        backend = self.runner.backend
        world, me, bs, top_k, rows, hidden = self.world, self.me, self.bs, self.top_k, self.rows, self.hidden
        recv_counts, nums, assist = args[n["epRecvCounts"]], args[n["expertTokenNums"]], args[n["assist"]]
        out_x, dyn, carried = args[n["expandX"]], args.get(n["dynamicScales"]), args.get(n["expandScalesOut"])
        smooth = args.get(n["scales"])
        assert isinstance(recv_counts, AclTensor) and isinstance(nums, AclTensor) and isinstance(assist, AclTensor)
        assert isinstance(out_x, AclTensor)
        local = int(args["moeExpertNum"]) // world
        cumulative = int(args["expertTokenNumsType"]) == 0
        prog = Program(
            report=f"{self.spec_name}: an expertIds value outside [0, moeExpertNum) on some rank"
            " (or more copies for this rank's experts than expandXOut's rows)"
        )
        bounds, pos, keys = (_p(at(name, (1,), D.ACL_INT32)) for name in ("bounds", "pos", "keys"))
        per = bs * top_k
        vec = not v1 and assist.strides[0] == 1 and _start(assist) % 16 == 0  # the assist zeros as 16-byte words
        if self.route == "block":
            values: list[Any] = [_p(gid), _p(gmask), bounds, pos, keys, _p(recv_counts), _p(nums), _p(assist), FLAG]
            values += longs(world, me, local, bs, top_k, rows, cumulative)
            values += longs(recv_counts.strides[0], nums.strides[0], assist.strides[0])
            self._step(prog, DispatchRoute(v1, vec), LaunchConfig((1, 1, 1), (ROUTE_BLOCK, 1, 1)), values)
        else:
            segs, units = self.segs, self.units
            starts, state = _p(at("starts", (1,), D.ACL_INT32)), _p(at("state", (1,), D.ACL_INT32))
            grid = LaunchConfig((max(1, -(-units // ROUTE_BLOCK)), 1, 1), (ROUTE_BLOCK, 1, 1))
            count = [_p(gid), _p(gmask), starts, *longs(world, me, local, per, segs, units)]
            self._step(prog, DispatchCount(), grid, count)
            scan = [_p(gid), starts, bounds, _p(recv_counts), _p(nums), state, FLAG]
            scan += longs(world, local, per, rows, cumulative, recv_counts.strides[0], nums.strides[0], segs, units)
            self._step(prog, DispatchScan(), LaunchConfig((1, 1, 1), (ROUTE_BLOCK, 1, 1)), scan)
            place = [_p(gid), _p(gmask), starts, bounds, state, pos, keys, _p(assist)]
            place += longs(world, me, local, top_k, rows, per, assist.strides[0], segs, units)
            self._step(prog, DispatchPlace(v1, vec), grid, place)
        moe = MoeRunner(backend)
        flat_x = _dense((world * bs, hidden), gx.dtype, gx.data)
        if int(args["quantMode"]) == 2:
            assert isinstance(dyn, AclTensor)
            qs = smooth if isinstance(smooth, AclTensor) else None
            qs_strides = tuple(qs.strides) if qs is not None else (0, 0)
            step = [moe.sorter.meta(rows, (1,), [(0,)]), _p(flat_x), pos, bounds, keys]
            step += [_p(qs) if qs is not None else ctypes.c_void_p(0), ctypes.c_void_p(0), _p(out_x), _p(dyn)]
            step += longs(top_k, hidden, *flat_x.strides, *qs_strides, *out_x.strides, dyn.strides[0], 0)
            self._step(prog, RangeQuant(flat_x.dtype, False, qs is not None), moe._row_block(rows), step)
        elif not self._rows(prog, flat_x, out_x, pos, bounds):
            moe._range_gather(prog, flat_x, out_x, pos, bounds, top_k, hidden)
        if isinstance(carried, AclTensor) and gw is not None:
            step = [moe.sorter.meta(rows, (1,), [(0,)]), _p(gw), pos, bounds, _p(carried)]
            step += longs(1, 1, 1, 0, carried.strides[0], 0)
            self._step(prog, RangeGather(4), moe.sorter.flat_config(rows), step)
        return prog

    def _rows(self, prog: Program, x: AclTensor, out: AclTensor, pos: Any, bounds: Any) -> bool:
        """``ACL_MC2_ROWS=row``: expandXOut's rows by :class:`DispatchRows` (False: ``range``, or rows that are not
        contiguous runs, logged, which RangeGather copies)."""
        if self.rows_copy != "row":
            return False
        if x.strides[1] != 1 or out.strides[1] != 1:
            LOG.debug("%s: rows are not contiguous runs; ACL_MC2_ROWS=row copies them by RangeGather", self.spec_name)
            return False
        backend = self.runner.backend
        item = x.dtype.info.storage_bits // 8
        aligned = all(_start(t) % 16 == 0 and t.strides[0] * item % 16 == 0 for t in (x, out))
        word = 16 if aligned and self.hidden * item % 16 == 0 else item
        words, per_word = self.hidden * item // word, word // item
        p = backend.properties
        block = min(ROUTE_BLOCK, max(p.warp_size, -(-words // p.warp_size) * p.warp_size))
        grid = min(max(self.rows, 1), p.compute_units * ROWS_BLOCKS_PER_UNIT, p.max_grid_x)
        values: list[Any] = [_p(x), pos, bounds, _p(out)]
        values += longs(self.top_k, words, self.rows, x.strides[0] // per_word, out.strides[0] // per_word)
        self._step(prog, DispatchRows(word), LaunchConfig((grid, 1, 1), (block, 1, 1)), values)
        return True

    def _step(self, prog: Program, kernel: Any, config: LaunchConfig, values: list[Any]) -> None:
        from acl_rocm.ops.program import Step

        backend = self.runner.backend
        prog.steps.append(Step(backend.function(kernel.source(), kernel.kernel_name), config, tuple(values)))


def dispatch_copies(launch: Launch, world: int) -> int:
    """Gathered copies of a dispatch call (world × tokens × top-k): what its default routing is chosen by."""
    ids = launch.args["expertIds"]
    assert isinstance(ids, AclTensor)
    return world * math.prod(ids.view_dims)

"""The Foreach* operators on the GPU: every tensor of a list in one launch per :data:`SLOTS` tensors.

The host fills a slot table (addresses, sizes, scalars) that travels as the kernel's parameter
struct, so nothing but the launch crosses to the device. Non-contiguous views are gathered into
dense temporaries (and results scattered back) by the elementwise family's device copy. A device
``roundMode`` (ForeachRoundOffNumber) is checked by the kernel: a bad mode raises 161002 at the
stream's next synchronisation and writes nothing.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from acl_core.backend import Kernel, Launch
from acl_core.dtypes import DataType as D
from acl_core.errors import AclError, AclErrorCode
from acl_core.formats import Format
from acl_core.spec.ops.foreach import INT_LISTS, ROWS, Carrier, Row, int32_scalar
from acl_core.tensor import AclScalarList, AclTensor, AclTensorList, contiguous_strides
from acl_rocm.driver import handle
from acl_rocm.kernels.foreach import (
    BLOCK,
    FIELDS,
    NORM_MODES,
    SLOTS,
    ForeachKernel,
    NormKernel,
    Source,
    vector_width,
)
from acl_rocm.launch import KernelArgs, LaunchConfig
from acl_rocm.ops.binding import named_kernels
from acl_rocm.ops.elementwise import Prepared

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

ROW_BY_NAME: dict[str, Row] = {r.name: r for r in ROWS}
OPS: tuple[str, ...] = tuple(sorted(ROW_BY_NAME))
"""The Foreach operators this module runs."""
MAX_BLOCKS_PER_SLOT = 1024
"""Blocks a slot (one tensor of a list) takes at most, unless :data:`BLOCKS_ENV` says otherwise."""
BLOCKS_ENV = "ACL_FOREACH_BLOCKS"
"""The most blocks a slot takes (1 .. 65536; unset: :data:`MAX_BLOCKS_PER_SLOT`). Every block first finds its slot
(a scan of the table's first-block column, up to 31 steps, in every thread) and then walks its slot grid-stride,
so fewer blocks a slot spread that search over more elements a thread; the values are the same for any count."""
CONFIG_ENV = "ACL_FOREACH_CONFIG"
"""How a block finds its slot (tensor): ``grid2d`` (the default: the slot is ``blockIdx.y``, the grid as wide as the
slot with the most blocks, the others' extra blocks returning at once) or ``scan`` (a one-dimensional grid, every
thread scanning the table's first-block column). A thread moves one 16-byte vector of each operand a trip. H100
2026-12-06 18:15, ForeachAddList 64 x 4 MiB, acl / torch time f32 / f16 / bf16: grid2d 0.88 / 1.00 / 0.85, scan
1.05 / 1.51 / 1.16 (2 and 4 vectors a thread before any store measured no better and were removed). The values
are the same."""
CONFIGS = ("grid2d", "scan")
BLOCK_ALTERNATIVES = (128,)
"""Blocks-a-slot settings the ops bench times beside the default (ForeachAddList's extra rows)."""
PER_THREAD = 4


def _bits(value: float) -> int:
    """The bits of a double as a signed 64-bit table field."""
    return int(struct.unpack("<q", struct.pack("<d", value))[0])


def _f32(value: Any) -> float:
    real = complex(value).real
    return float(struct.unpack("<f", struct.pack("<f", real))[0]) if math.isfinite(real) else real


def _members(value: Any) -> list[AclTensor]:
    """The tensors of a launch's list argument (a tuple, or an aclTensorList)."""
    tensors = value.tensors if isinstance(value, AclTensorList) else value
    return [t for t in tensors if isinstance(t, AclTensor)]


def _address(t: AclTensor, index: int = 0) -> int:
    item = max(t.dtype.info.storage_bits // 8, 1)
    return t.data + (t.offset + index) * item


class ForeachRunner:
    """Turns Foreach Launches into multi-tensor kernel launches."""

    def __init__(self, backend: RocmBackend) -> None:
        self.backend = backend
        self.forced_blocks: int | None = None
        """Blocks a slot over :data:`BLOCKS_ENV` for calls made while set (the bench's rows)."""
        self.forced_config: str | None = None
        """A :data:`CONFIG_ENV` setting over the environment's for calls made while set (tests, the bench's rows)."""

    def blocks_per_slot(self) -> int:
        """The most blocks a slot takes: :attr:`forced_blocks`, else :data:`BLOCKS_ENV`, else the default."""
        if self.forced_blocks is not None:
            return self.forced_blocks
        setting = self.backend.environ.get(BLOCKS_ENV, "").strip()
        if not setting:
            return MAX_BLOCKS_PER_SLOT
        if not setting.isdigit() or not 1 <= int(setting) <= 65536:
            raise AclError(AclErrorCode.ACL_ERROR_INVALID_PARAM, f"{BLOCKS_ENV}={setting!r}: not an integer 1..65536")
        return int(setting)

    def config(self) -> str:
        """The :data:`CONFIG_ENV` choice (``grid2d`` unless set; bad values are refused)."""
        value = (self.forced_config or self.backend.environ.get(CONFIG_ENV, "") or "grid2d").strip().lower()
        if value not in CONFIGS:
            raise AclError(AclErrorCode.ACL_ERROR_INVALID_PARAM, f"{CONFIG_ENV}={value!r}: not one of {CONFIGS}")
        return value

    def block_alternatives(self) -> tuple[int, ...]:
        """Blocks-a-slot settings worth timing beside the default (the ops bench's extra ForeachAddList rows)."""
        return BLOCK_ALTERNATIVES

    def kernels(self) -> dict[str, Kernel]:
        """A kernel per Foreach operator."""
        return named_kernels(OPS, lambda op, launch: self.run(ROW_BY_NAME[op], launch))

    # ------------------------------------------------------------------ helpers
    def _temp_like(self, t: AclTensor, temps: list[int], stream: int) -> AclTensor:
        shape = tuple(t.view_dims)
        item = max(t.dtype.info.storage_bits // 8, 1)
        address = self.backend.provider.malloc_async(max(t.numel * item, 1), stream)
        temps.append(address)
        return AclTensor(shape, t.dtype, contiguous_strides(shape), 0, Format.ACL_FORMAT_ND, shape, address)

    def _dense_in(self, t: AclTensor, temps: list[int], stream: int) -> AclTensor:
        if t.is_contiguous:
            return t
        dense = self._temp_like(t, temps, stream)
        self.backend.elementwise.convert(t, dense, stream)
        return dense

    def _launch(
        self, kernel: Any, grid: int, values: Sequence[Any], stream: int, launched: list[Prepared], slots: int = 1
    ) -> None:
        function = self.backend.function(kernel.source_text(), kernel.kernel_name)
        prepared = Prepared(function, LaunchConfig((grid, slots, 1), (BLOCK, 1, 1)), KernelArgs(values))
        self.backend.elementwise.launch_prepared(prepared, stream)
        launched.append(prepared)

    def _memo_key(self) -> str:
        """Where a repeated signature keeps its launches: per device and per slot-walk setting."""
        return f"rocm.foreach@{self.backend.provider.get_device()}:{self.config()}:{self.blocks_per_slot()}"

    def _scalars(self, row: Row, launch: Launch, n: int, integer: bool) -> tuple[Source, D | None, list[int]]:
        """Where the scalar-like operand comes from, its device dtype, and one table field per entry."""
        name = row.scalar_param
        if row.formula == "unscale":
            inv = launch.args["invScale"]
            assert isinstance(inv, AclTensor)
            return "pointer", inv.dtype, [_address(inv)] * n
        if name is None or row.carrier is Carrier.NONE:
            return "none", None, [0] * n
        value = launch.args[name]
        if row.carrier is Carrier.SCALAR:
            field = int32_scalar(value.value) if integer or row.formula == "round" else _bits(_f32(value.value))
            return "value", None, [field] * n
        if row.carrier is Carrier.SCALAR_LIST:
            items = value.scalars if isinstance(value, AclScalarList) else value
            return "value", None, [int32_scalar(s.value) if integer else _bits(_f32(s.value)) for s in items]
        assert isinstance(value, AclTensor)
        if row.carrier is Carrier.PER_ENTRY:
            stride = value.strides[0] if value.rank else 0
            return "pointer", value.dtype, [_address(value, i * stride) for i in range(n)]
        return "pointer", value.dtype, [_address(value)] * n

    # ------------------------------------------------------------------ running
    def run(self, row: Row, launch: Launch) -> None:
        """Enqueue one Foreach call on its stream."""
        args = launch.args
        stream = handle(launch.stream)
        key = self._memo_key()
        replay = launch.memo.get(key)
        if replay is not None:  # a repeated signature: its packed launches as they were (the host path is most of
            for prepared in replay:  # a call's cost at optimizer-step sizes: 64 tensors took ~380 us to re-table)
                self.backend.elementwise.launch_prepared(prepared, stream)
            return
        provider = self.backend.provider
        inputs = []
        for name in row.lists:
            inputs.append(_members(args[name]))
        outs = _members(args[row.out or row.lists[0]])
        n = len(inputs[0])
        dtype = inputs[0][0].dtype
        integer = dtype in INT_LISTS
        source, sdtype, sfields = self._scalars(row, launch, n, integer)
        temps: list[int] = []
        launched: list[Prepared] = []
        flag = 0
        checked = False
        try:
            dense_in = [[self._dense_in(t, temps, stream) for t in lst] for lst in inputs]
            dense_out: list[AclTensor] = []
            scatter: list[tuple[AclTensor, AclTensor]] = []
            for o in outs:
                if o.is_contiguous:
                    dense_out.append(o)
                else:
                    d = self._temp_like(o, temps, stream)
                    dense_out.append(d)
                    scatter.append((d, o))
            check = row.formula == "round" and row.carrier is Carrier.TENSOR
            if check:
                flag = self.backend.driver.check_flag(stream)
            found = 0
            if row.formula == "unscale":
                fi = args["foundInf"]
                assert isinstance(fi, AclTensor)
                found = _address(fi)
            entries = [i for i in range(n) if outs[i].numel > 0]
            if row.formula == "norm":
                self._norm(row, launch, dense_in[0], dense_out, entries, sfields, stream, launched)
            else:
                kernel = ForeachKernel(row.formula, dtype, source, sdtype, check, self.config() != "scan")
                for k0 in range(0, len(entries), SLOTS):
                    chunk = entries[k0 : k0 + SLOTS]
                    self._chunk(kernel, chunk, dense_in, dense_out, sfields, flag, found, stream, launched)
            for d, o in scatter:
                self.backend.elementwise.convert(d, o, stream)
            if check:
                mode = "ForeachRoundOffNumber: roundMode is not one of [1, 2, 3, 4, 5, 6]"
                self.backend.driver.defer_check(stream, flag, mode)
                checked = True
            elif not temps:  # no per-call temporaries or check flag: the launches are a function of the signature
                launch.memo[key] = tuple(launched)
        finally:
            if flag and not checked:
                self.backend.driver.drop_check(stream, flag)
            for address in temps:
                provider.free_async(address, stream)

    def _table(self, slots: list[list[int]], total: int) -> Any:
        values = [len(slots), total]
        for f in range(len(FIELDS)):
            values += [s[f] for s in slots] + [0] * (SLOTS - len(slots))
        return KernelArgs.index_array(values, "long long")

    def _chunk(
        self,
        kernel: ForeachKernel,
        entries: list[int],
        ins: list[list[AclTensor]],
        outs: list[AclTensor],
        sfields: list[int],
        flag: int,
        found: int,
        stream: int,
        launched: list[Prepared],
    ) -> None:
        slots: list[list[int]] = []
        first = widest = 0
        per_thread = max(PER_THREAD, vector_width(kernel.dtype))  # whole 16-byte vectors a thread
        cap = self.blocks_per_slot()
        for i in entries:
            numel = outs[i].numel
            blocks = min(-(-numel // (BLOCK * per_thread)), cap)
            addr = [_address(lst[i]) for lst in ins] + [0] * (3 - len(ins))
            slots.append([numel, first, addr[0], addr[1], addr[2], _address(outs[i]), sfields[i]])
            first += blocks
            widest = max(widest, blocks)
        if not slots:
            return
        values = [self._table(slots, first), KernelArgs.pointer(flag), KernelArgs.pointer(found)]
        if kernel.grid2d:  # a row of blocks per slot, as wide as the slot with the most
            self._launch(kernel, widest, values, stream, launched, len(slots))
        else:
            self._launch(kernel, first, values, stream, launched)

    def _norm(
        self,
        row: Row,
        launch: Launch,
        ins: list[AclTensor],
        outs: list[AclTensor],
        entries: list[int],
        sfields: list[int],
        stream: int,
        launched: list[Prepared],
    ) -> None:
        p = _f32(launch.args["scalar"].value)
        if math.isinf(p):
            mode = NORM_MODES["max"] if p > 0 else NORM_MODES["min"]
        elif p == 0:
            mode = NORM_MODES["count"]
        else:
            mode = NORM_MODES["l1"] if p == 1 else NORM_MODES["l2"] if p == 2 else NORM_MODES["pow"]
        kernel = NormKernel(ins[0].dtype)
        for k0 in range(0, len(entries), SLOTS):
            chunk = entries[k0 : k0 + SLOTS]
            slots = [[ins[i].numel, 0, _address(ins[i]), 0, mode, _address(outs[i]), _bits(p)] for i in chunk]
            self._launch(kernel, len(slots), [self._table(slots, len(slots))], stream, launched)


RUNNER = ForeachRunner

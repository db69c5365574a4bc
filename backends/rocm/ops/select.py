"""Nonzero, NonzeroV2 and MaskedSelect on the GPU: a multi-block stream compaction, the count written back.

Three launches a call (``kernels/select.py``): each block counts the hits in its chunk of positions, one block
scans the block counts into first rows and stores the total in an 8-byte device word, then each block writes
its hits in position order from its first row. Nothing of the data comes to the host. The word is registered
with the runtime's view write-back (:mod:`acl_core.runtime.view_writeback`): after the host synchronises the
stream, the runtime copies the 8 bytes down and sets out's view shape; the word is then freed on the stream.
The ops refuse stream capture (the write-back is a host step no graph replay could repeat).
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from acl_core.backend import Kernel, Launch
from acl_core.errors import AclError, AclErrorCode
from acl_core.spec.ops.select import TRANSPOSED, nonzero_shape
from acl_core.spec.runtime import CopyDirection
from acl_core.tensor import AclTensor, contiguous_strides
from acl_rocm.driver import handle
from acl_rocm.kernels.select import BLOCK, BlockScan, Compact, Operand, vector_width
from acl_rocm.launch import KernelArgs, LaunchConfig, longs
from acl_rocm.ops.binding import family_key, memo_plan, named_kernels
from acl_rocm.ops.sort import address
from acl_rocm.views import broadcast_strides

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

OPS: tuple[str, ...] = (*TRANSPOSED, "MaskedSelect")
"""The aclnn operators this module runs."""
LOADS_ENV = "ACL_SELECT_LOADS"
DEFAULT_LOADS = "element"
"""``vec``: whole tiles of a contiguous, aligned test operand read by 8- / 16-byte loads; ``element``, the default: one
element a load. Both passed the GPU tier and conformance on an H100 (2026-12-07 16:25), where ``vec`` gained nothing
(Nonzero 847 against ``element``'s 865 GB/s, torch 760-787), so it stays opt-in."""
ITEMS = 8
"""Consecutive positions a thread of the scatter takes per tile (a tile is ``BLOCK * ITEMS`` positions)."""
BLOCKS_PER_UNIT = 4
"""The most blocks a compute unit (more positions make longer chunks, never more blocks)."""
MAX_BLOCKS = 4096
"""The most blocks of one call (the scan runs them in one block, a short run a thread)."""
WHY_NO_CAPTURE = "writes the selected count back into out's view shape at synchronisation, a host step"


@dataclass(frozen=True)
class Plan:
    """One signature's launches: the two compaction kernels, their fixed arguments, the grid."""

    count: object
    scatter: object
    scan: object
    blocks: int
    chunk: int
    meta: Any
    test: str
    value: str | None
    """The parameters read as the test and the value (their addresses are taken per call)."""
    out_row: int
    out_col: int


def _contiguous(shape: Sequence[int], strides: Sequence[int]) -> bool:
    return all(d == 1 or s == e for d, s, e in zip(shape, strides, contiguous_strides(shape)))


def _operand(t: AclTensor, shape: tuple[int, ...]) -> tuple[Operand, tuple[int, ...]]:
    strides = broadcast_strides(t.view_dims, t.strides, shape) if t.view_dims else (0,) * len(shape)
    item = t.dtype.info.storage_bits // 8
    return Operand(item, t.dtype.is_float, _contiguous(shape, strides)), strides


class SelectRunner:
    """The ops of this module on one backend."""

    capture_refused: dict[str, str] = {op: WHY_NO_CAPTURE for op in OPS}

    def __init__(self, backend: RocmBackend) -> None:
        self.backend = backend
        self.items = ITEMS
        """Positions a thread per tile (tests lower it so that tiny shapes span several blocks)."""

    def kernels(self) -> dict[str, Kernel]:
        """A kernel per op name."""
        return named_kernels(OPS, lambda _, launch: self.run(launch))

    def vectorized(self, launch: Launch) -> bool:
        """Whether the passes read whole tiles by vector loads: :data:`LOADS_ENV` says ``vec`` and the test operand is
        contiguous with its address aligned to the load."""
        setting = self.backend.environ.get(LOADS_ENV, "").strip().lower() or DEFAULT_LOADS
        if setting not in ("vec", "element"):
            raise AclError(AclErrorCode.ACL_ERROR_INVALID_PARAM, f"{LOADS_ENV}={setting!r}: expected vec or element")
        if setting == "element":
            return False
        t = launch.args["mask" if launch.spec.name == "MaskedSelect" else "self"]
        assert isinstance(t, AclTensor)
        shape = tuple(launch.plan["select_shape"]) or (1,)
        operand, _ = _operand(t, shape)
        return operand.contiguous and address(t) % vector_width(operand.item, self.items) == 0

    def plan(self, launch: Launch) -> Plan | None:
        """The launches of ``launch``'s signature; None when there are no positions."""
        op = launch.spec.name
        shape = tuple(launch.plan["select_shape"]) or (1,)  # a 0-d self is one position
        n = math.prod(shape)
        if n == 0:
            return None
        out = launch.args["out"]
        assert isinstance(out, AclTensor)
        if op == "MaskedSelect":
            test_t, value_t = launch.args["mask"], launch.args["self"]
            assert isinstance(test_t, AclTensor) and isinstance(value_t, AclTensor)
            test, test_strides = _operand(test_t, shape)
            value, value_strides = _operand(value_t, shape)
            kind: dict[str, Any] = {"value": value}
            out_row, out_col = out.strides[0], 0
        else:
            test_t, value_t = launch.args["self"], None
            assert isinstance(test_t, AclTensor)
            test, test_strides = _operand(test_t, shape)
            value_strides = (0,) * len(shape)
            kind = {"coords": test_t.rank}
            row, col = (1, 0) if TRANSPOSED[op] else (0, 1)
            out_row, out_col = out.strides[row], out.strides[col]
        tile = BLOCK * self.items
        limit = min(MAX_BLOCKS, max(1, self.backend.properties.compute_units * BLOCKS_PER_UNIT))
        chunk = -(-math.ceil(n / limit) // tile) * tile  # whole tiles a block
        blocks = -(-n // chunk)
        function = self.backend.function
        vec = self.vectorized(launch)
        kernels = [Compact(p, len(shape), test, items=self.items, vec=vec, **kind) for p in ("count", "scatter")]
        count, scatter = (function(k.source(), k.kernel_name) for k in kernels)
        scan = BlockScan()
        meta = KernelArgs.index_array([n, *shape, *test_strides, *value_strides], "long long")
        return Plan(
            count, scatter, function(scan.source(), scan.kernel_name), blocks, chunk, meta,
            "mask" if op == "MaskedSelect" else "self", "self" if op == "MaskedSelect" else None, out_row, out_col,
        )  # fmt: skip

    def run(self, launch: Launch) -> None:
        """Enqueue the compaction and register the count's write-back into out's view."""
        out = launch.args["out"]
        assert isinstance(out, AclTensor)
        key = family_key(self.backend, "select", self.items, self.vectorized(launch))
        plan = memo_plan(launch, key, lambda: self.plan(launch))
        op = launch.spec.name
        rows = 1 if op == "NonzeroV2" else 0  # the dim that shrinks
        shape = tuple(launch.plan["select_shape"])
        maximal = nonzero_shape(shape, TRANSPOSED[op]) if op in TRANSPOSED else (math.prod(shape),)
        writeback = self.backend.runtime.view_writeback
        if plan is None:
            dims = list(maximal)
            dims[rows] = 0
            writeback.defer(launch.stream, out, lambda: dims)
            return
        stream = handle(launch.stream)
        provider = self.backend.provider
        word = provider.malloc_async(8, stream)
        blocks = provider.malloc_async(8 * plan.blocks, stream)
        try:
            self._launch(plan, launch, stream, word, blocks)
        except BaseException:
            provider.free_async(word, stream)
            raise
        finally:
            provider.free_async(blocks, stream)

        def read() -> list[int]:
            total = ctypes.c_int64(0)
            self.backend.driver.copy(ctypes.addressof(total), word, 8, CopyDirection.DEVICE_TO_HOST, None)
            written = list(maximal)
            written[rows] = total.value
            return written

        writeback.defer(launch.stream, out, read, lambda: provider.free_async(word, stream))

    def _launch(self, plan: Plan, launch: Launch, stream: int, word: int, blocks: int) -> None:
        provider = self.backend.provider
        args = launch.args
        grid = LaunchConfig((plan.blocks, 1, 1), (BLOCK, 1, 1))
        one = LaunchConfig((1, 1, 1), (BLOCK, 1, 1))
        value = KernelArgs.pointer(address(args[plan.value]) if plan.value is not None else 0)
        test, out = KernelArgs.pointer(address(args[plan.test])), KernelArgs.pointer(address(args["out"]))
        head = [plan.meta, test, value, out]
        tail = [*longs(plan.out_row, plan.out_col, plan.chunk), KernelArgs.pointer(blocks)]
        steps = [
            (plan.count, grid, KernelArgs([*head, *tail])),
            (plan.scan, one, KernelArgs([KernelArgs.pointer(blocks), *longs(plan.blocks), KernelArgs.pointer(word)])),
            (plan.scatter, grid, KernelArgs([*head, *tail])),
        ]
        for function, cfg, args in steps:
            provider.launch(function, cfg.grid, cfg.block, cfg.shared_bytes, stream, args.address)


RUNNER = SelectRunner

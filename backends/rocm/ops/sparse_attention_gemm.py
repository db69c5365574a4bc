"""SparseFlashAttention's path choice and its GEMM path: gather the selected rows once, then two vendor GEMMs.

The block kernel (:mod:`acl_rocm.kernels.sparse_attention`, a block per (query row, query head)) reads each
selected key row once per query head and multiplies without matrix instructions: at DeepSeek-V3.2's decode
shape (128 heads sharing one MLA kv head) every head re-reads the same 2,048 rows of 576 dims. The GEMM path
(:mod:`acl_rocm.kernels.sparse_attention_gemm`) gathers each (query row, kv head)'s selected rows into a
stream-ordered temporary once, then runs ``S = Q·Kᵀ`` (fp32) and ``O = P·V`` (fp32; P as two 16-bit parts
stacked as rows of one GEMM) as strided batched GEMMs through the provider (cuBLASLt / hipBLASLt) around a
row-softmax kernel, and a store kernel writes O in the output's layout. It covers every layout, sparse mode,
length and statistics output the block kernel covers.

:data:`PATH_ENV` picks: ``gemm`` (the default) or ``block``. The GEMM path falls back to the block kernel, with the
reason on the debug logger, where the provider has no GEMM, where the call selects no slots, or where one
query row's temporaries would pass :data:`BUDGET_BYTES` (more rows run in chunks that fit). Each signature's
choice is logged once, when it is planned.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from acl_core.backend import Kernel, Launch
from acl_core.dtypes import DataType as D
from acl_core.errors import AclError, AclErrorCode, RtErrorCode
from acl_core.tensor import AclTensor
from acl_rocm.driver import handle
from acl_rocm.kernels.sparse_attention_gemm import (
    GATHER_SLOTS,
    GATHER_THREADS,
    QUERY_ROWS,
    SOFTMAX_THREADS,
    STORE_THREADS,
    SfaGemmInstance,
    padded,
    sfa_gemm_source,
)
from acl_rocm.launch import LaunchConfig
from acl_rocm.ops.attention_blas import Operand, rowmajor_gemm
from acl_rocm.ops.binding import family_key, memo_plan, named_kernel
from acl_rocm.ops.matmul import WORKSPACE_BYTES
from acl_rocm.ops.program import Enqueue, Program, Step, Temp, run_program
from acl_rocm.providers.base import GemmCall

if TYPE_CHECKING:
    from acl_rocm.ops.sparse_attention import SfaCall, SparseAttentionRunner

LOG = logging.getLogger("acl_rocm.sparse_attention")
PATH_ENV: Final = "ACL_SFA_PATH"
"""SparseFlashAttention's path: ``gemm`` (the default: gathered rows and two vendor GEMMs) or ``block`` (the block
kernel, a block per (query row, query head))."""
PATHS: Final = ("gemm", "block")
DEFAULT_PATH: Final = "gemm"
"""``gemm`` since its GPU tier and `conformance rocm --full --ops SparseFlashAttention` passed on an H100 (2026-12-07
03:32), where the decode row ran in 1.40x torch's time against the block kernel's 40.8x (results/RESULTS.md)."""
BUDGET_BYTES: Final = 1 << 30
"""The GEMM path's temporaries (gathered rows, scores, probabilities, GEMM workspace) at most: a call whose rows need
more runs in chunks of rows; one row over it takes the block kernel."""
_ALIGN: Final = 256
_NULL: Final = ctypes.c_void_p(0)


def sfa_path(environ: Mapping[str, str]) -> str:
    """The :data:`PATH_ENV` setting (:data:`DEFAULT_PATH` unless set; a bad value: ACL_ERROR_INVALID_PARAM)."""
    value = (environ.get(PATH_ENV, "") or DEFAULT_PATH).strip().lower()
    if value not in PATHS:
        raise AclError(AclErrorCode.ACL_ERROR_INVALID_PARAM, f"{PATH_ENV}={value!r}: not one of {PATHS}")
    return value


def _same_view(a: Any, b: Any) -> bool:
    """True when ``a`` and ``b`` are the same elements (``value`` passed as ``key``, as absorb mode does)."""
    if not (isinstance(a, AclTensor) and isinstance(b, AclTensor)):
        return False
    same = (a.data, a.offset, a.strides, a.view_dims, a.dtype) == (b.data, b.offset, b.strides, b.view_dims, b.dtype)
    return bool(same)


def _words(t: Any, vec: int) -> bool:
    """True when rows of ``t`` can be read ``vec`` elements at a time: unit last stride, other strides, offset and
    width multiples of ``vec``, storage aligned to ``vec`` elements (absent, or one element: True)."""
    if vec == 1 or not isinstance(t, AclTensor):
        return True
    item = t.dtype.info.storage_bits // 8
    strides = t.strides
    return bool(
        t.view_dims[-1] % vec == 0
        and strides[-1] == 1
        and all(s % vec == 0 for s in strides[:-1])
        and t.offset % vec == 0
        and t.data % (vec * item) == 0
    )


class GemmPath:
    """Plans SparseFlashAttention calls on the GEMM path (sources compiled once per instance)."""

    def __init__(self, runner: SparseAttentionRunner, budget: int = BUDGET_BYTES) -> None:
        self.runner = runner
        self.backend = runner.backend
        self.budget = budget
        """Bytes of temporaries a chunk of query rows may take (tests make it small: several chunks)."""

    def refusal(self, call: SfaCall) -> str | None:
        """Why ``call`` stays on the block kernel (None: the GEMM path takes it)."""
        why = self.backend.provider.gemm_unavailable()
        if why is not None:
            return f"no GEMM ({why})"
        m = call.meta
        if m.rows * m.n2 * m.group == 0 or self.slots(call) == 0 or m.d == 0:
            return "no slots to gather (or D = 0)"
        if self.temp_bytes(call, 1)[-1] > self.budget:
            return f"one query row's temporaries of {self.temp_bytes(call, 1)[-1]} bytes over {self.budget}"
        return None

    @staticmethod
    def slots(call: SfaCall) -> int:
        """Slots per (query row, kv head): entries read (min(count, ceil(cap / block))) times the block, padded."""
        m = call.meta
        entries = min(m.count, -(-m.cap // max(m.sparse_block, 1)))
        return padded(max(entries, 0) * m.sparse_block)

    def separate_v(self, call: SfaCall) -> bool:
        """True when ``value`` must be gathered apart from ``key``."""
        return not _same_view(call.tensors["value"], call.tensors["key"])

    def temp_bytes(self, call: SfaCall, rows: int) -> list[int]:
        """For a chunk of ``rows`` query rows: offsets of qc, kc, vc, toks, scores, probs (two parts), acc (two
        parts), the GEMM workspace, then the total (each 256-byte aligned)."""
        m = call.meta
        item = call.inst.dtype.info.storage_bits // 8
        n1, rn, cp, ep = m.n2 * m.group, rows * m.n2, self.slots(call), padded(m.d + m.dr)
        sizes = [
            rows * n1 * ep * item,
            rn * cp * ep * item,
            rn * cp * m.d * item if self.separate_v(call) else 0,
            rn * cp * 4,
            rows * n1 * cp * 4,
            2 * rows * n1 * cp * item,
            2 * rows * n1 * m.d * 4,
            WORKSPACE_BYTES,
        ]
        offsets, at = [], 0
        for size in sizes:
            offsets.append(at)
            at += -(-size // _ALIGN) * _ALIGN
        return [*offsets, at]

    def chunk_rows(self, call: SfaCall) -> int:
        """Query rows a chunk takes: all of them, or as many as :attr:`budget` holds (at least one)."""
        rows = call.meta.rows
        if self.temp_bytes(call, rows)[-1] <= self.budget:
            return rows
        lo, hi = 1, rows  # the largest count within the budget (the sizes grow with the rows)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if self.temp_bytes(call, mid)[-1] <= self.budget else (lo, mid - 1)
        return lo

    def instance(self, call: SfaCall) -> SfaGemmInstance:
        """The kernels' instance for ``call`` (16- or 4-byte copies where every gathered operand allows them)."""
        t, m = call.tensors, call.meta
        separate = self.separate_v(call)
        names = ("query", "key", "queryRope", "keyRope", *(("value",) if separate else ()))
        vec = next(n for n in (8, 2, 1) if all(_words(t[name], n) for name in names))
        return SfaGemmInstance(call.inst.dtype, m.d, m.dr, separate, vec)

    def _function(self, inst: SfaGemmInstance, which: str) -> object:
        return self.backend.function(sfa_gemm_source(inst, which), inst.name(which))

    def program(self, call: SfaCall) -> Program:
        """The check launch (where the call has lengths or a block table to check), then per chunk of query rows:
        the gather launch, GEMM ``S = Q·Kᵀ``, the softmax launch, GEMM ``O = P·V``, the store launch (one temporary,
        reused chunk after chunk)."""
        inst = self.instance(call)
        chunk = self.chunk_rows(call)
        off = self.temp_bytes(call, chunk)
        prog = self.runner.sfa_program(call)
        prog.temp(off[-1])
        temps = [Temp(0, o) for o in off[:-1]]
        for r0 in range(0, call.meta.rows, chunk):
            self._chunk(prog, call, inst, temps, r0, min(chunk, call.meta.rows - r0))
        return prog

    def _chunk(
        self, prog: Program, call: SfaCall, inst: SfaGemmInstance, temps: list[Temp], r0: int, rows: int
    ) -> None:
        m, p = call.meta, call.pointers
        dtype = inst.dtype
        n1, rn, cp, ep = m.n2 * m.group, rows * m.n2, self.slots(call), padded(m.d + m.dr)
        qc, kc, vc, toks, scores, probs, acc, workspace = temps
        flag = self.runner.sfa_flag(prog)
        first, count = ctypes.c_longlong(r0), ctypes.c_longlong(rows)
        kv_blocks = rn * -(-cp // GATHER_SLOTS)
        q_blocks = -(-(rows * n1) // QUERY_ROWS)
        gather = (
            call.packed, ctypes.c_longlong(cp), ctypes.c_longlong(kv_blocks), first, count,
            p["q"], p["k"], p["v"], p["qr"], p["kr"], p["idx"], p["lq"], p["lk"], p["table"],
            qc, kc, vc if inst.separate_v else _NULL, toks, flag,
        )  # fmt: skip
        config = LaunchConfig((kv_blocks + q_blocks, 1, 1), (GATHER_THREADS, 1, 1))
        prog.steps.append(Step(self._function(inst, "gather"), config, gather))

        def scores_gemm(base: int) -> GemmCall | None:
            q = Operand(base + qc.offset, dtype, m.group, ep, ep, 1, m.group * ep)
            kt = Operand(base + kc.offset, dtype, ep, cp, 1, ep, cp * ep)
            s = Operand(base + scores.offset, D.ACL_FLOAT, m.group, cp, cp, 1, m.group * cp)
            return rowmajor_gemm(q, kt, s, rn)

        def values_gemm(base: int) -> GemmCall | None:
            if inst.separate_v:
                v = Operand(base + vc.offset, dtype, cp, m.d, m.d, 1, cp * m.d)
            else:  # value is key: the first D columns of the gathered rows
                v = Operand(base + kc.offset, dtype, cp, m.d, ep, 1, cp * ep)
            stacked = 2 * m.group  # P's G rows then Plo's
            pr = Operand(base + probs.offset, dtype, stacked, cp, cp, 1, stacked * cp)
            o = Operand(base + acc.offset, D.ACL_FLOAT, stacked, m.d, m.d, 1, stacked * m.d)
            return rowmajor_gemm(pr, v, o, rn)

        none = LaunchConfig((1, 1, 1), (1, 1, 1))
        prog.steps.append(Step(self._gemm_step(scores_gemm, workspace.offset), none, ()))
        softmax = (
            call.packed, ctypes.c_longlong(cp), first, ctypes.c_double(call.scale), scores, toks, p["lq"], probs,
            p["smax"], p["ssum"], flag,
        )  # fmt: skip
        config = LaunchConfig((rows * n1, 1, 1), (SOFTMAX_THREADS, 1, 1))
        prog.steps.append(Step(self._function(inst, "softmax"), config, softmax))
        prog.steps.append(Step(self._gemm_step(values_gemm, workspace.offset), none, ()))
        config = LaunchConfig((rows * n1, 1, 1), (STORE_THREADS, 1, 1))
        store = (call.packed, first, acc, p["lq"], p["out"], flag)
        prog.steps.append(Step(self._function(inst, "store"), config, store))

    def _gemm_step(self, build: Callable[[int], GemmCall | None], workspace: int) -> Enqueue:
        """An Enqueue of the GEMM ``build(base)`` describes for the run's temporary at ``base``, bound through the
        provider's :meth:`gemm_launcher` (the last base's kept: the stream-ordered pool mostly hands the same address
        back)."""
        last: list[tuple[int, Callable[[int], None]]] = []
        where = Temp(0)

        def enqueue(resolve: Callable[[Any], Any], stream: int) -> None:
            base = _at(resolve, where)
            entry = last[0] if last else None
            if entry is None or entry[0] != base:
                call = build(base)
                if call is None:  # every operand is a dense row-major matrix: this cannot happen
                    raise AclError(
                        RtErrorCode.ACL_ERROR_RT_INTERNAL_ERROR, "SparseFlashAttention: a GEMM view not mapped"
                    )
                entry = (base, self.backend.provider.gemm_launcher(call, base + workspace, WORKSPACE_BYTES))
                last[:] = [entry]
            entry[1](stream)

        return Enqueue(enqueue)


def _at(resolve: Callable[[Any], Any], where: Temp) -> int:
    address = resolve(where).value
    assert address is not None
    return int(address)


def sfa_kernel(runner: SparseAttentionRunner) -> Kernel:
    """SparseFlashAttention's kernel: the signature planned once per device and path (``Launch.memo``), then run."""
    backend = runner.backend
    gemm = runner.sfa_gemm

    def plan(launch: Launch, path: str) -> Program:
        call = runner.sfa_call(launch)
        if path == "gemm":
            why = gemm.refusal(call)
            if why is None:
                m = call.meta
                LOG.debug(
                    "SparseFlashAttention: gemm path (%d rows x %d kv heads, chunks of %d, %d slots, group %d, "
                    "value %s)",
                    m.rows, m.n2, gemm.chunk_rows(call), gemm.slots(call), m.group,
                    "gathered apart" if gemm.separate_v(call) else "from the gathered keys",
                )  # fmt: skip
                return gemm.program(call)
            LOG.debug("SparseFlashAttention: block kernel (gemm path refused: %s)", why)
        else:
            LOG.debug("SparseFlashAttention: block kernel (%s=block)", PATH_ENV)
        return runner.sfa_block(call)

    def run(launch: Launch) -> None:
        path = sfa_path(backend.environ)
        key = family_key(backend, "sparse_attention", f"sfa-{path}")
        run_program(backend, memo_plan(launch, key, lambda: plan(launch, path)), handle(launch.stream))

    return named_kernel("SparseFlashAttention", run)

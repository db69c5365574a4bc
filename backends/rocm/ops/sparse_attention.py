"""The sparse-attention family on the GPU: LightningIndexer and SparseFlashAttention.

Each call is one program per signature (:mod:`acl_rocm.ops.program`), starting with the check kernel
of :mod:`acl_rocm.kernels.sparse_attention` (device lengths and block table, 161002 at
synchronisation; a SparseFlashAttention call with neither has nothing to check and skips it).
LightningIndexer: the score kernel writes every (query row, key head)'s scores over the key capacity into a
stream-ordered temporary, the row sorter (:class:`acl_rocm.ops.sort.Sorter`) orders each row descending with
ties to the lower key, and the emit kernel writes the first ``sparseCount`` (``ACL_LI_PATH=sort``; the default
``select`` path: the key-tile score kernel and a top-k select per row, :mod:`acl_rocm.kernels.lightning_indexer`).
SparseFlashAttention: by default the GEMM path of :mod:`acl_rocm.ops.sparse_attention_gemm` (the selected rows
gathered once, two vendor GEMMs around a softmax kernel; where it refuses, the block kernel); under
``ACL_SFA_PATH=block`` one attend launch, a block per (query row, query head).
The layouts are described to the kernels by strides (:func:`strides4`); nothing is read back to the host.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import threading
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from acl_core.backend import Kernel, Launch
from acl_core.dtypes import DataType as D
from acl_core.errors import AclnnError, AclnnStatus
from acl_core.tensor import AclTensor
from acl_rocm.kernels.attention import Strides
from acl_rocm.kernels.lightning_indexer import (
    SHARED_SORT,
    TILE_KEYS,
    TILE_THREADS,
    LiInstance,
    li_source,
    select_threads,
)
from acl_rocm.kernels.sparse_attention import (
    CHECK_THREADS,
    EMIT_THREADS,
    MAX_SHARED_FLOATS,
    SCORE_THREADS,
    SFA_THREADS,
    SaInstance,
    SaMeta,
    sa_source,
)
from acl_rocm.launch import KernelArgs, LaunchConfig
from acl_rocm.ops.program import FLAG, Program, Scratch, Step, program_kernel
from acl_rocm.ops.sort import Sorter
from acl_rocm.ops.sparse_attention_gemm import GemmPath, sfa_kernel

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

OPS: tuple[str, ...] = ("LightningIndexer", "SparseFlashAttention")
LOG = logging.getLogger("acl_rocm.sparse_attention")
LI_PATH_ENV = "ACL_LI_PATH"
"""LightningIndexer's path: ``select`` (the default: the key-tile score kernel, then a radix top-k select per
row), ``tiled`` (the key-tile scores, then the row sorter and emit kernel) or ``sort`` (a thread per key's
scores, the row sorter, the emit kernel: the first path). All three give the reference's indices bit for bit."""
LI_PATHS = ("select", "tiled", "sort")
KV_MODES = {"BSND": 0, "TND": 1, "PA_BSND": 2}
POINTER_NAMES = ("q", "k", "v", "qr", "kr", "idx", "lq", "lk", "table", "out", "smax", "ssum")
"""SparseFlashAttention's operand pointers, in the attend kernel's order."""
UNCHECKED_REGION = "sparse_attention.unchecked"
"""The stream scratch region whose first word (zeroed once, written by nothing) SparseFlashAttention's kernels read as
their flag where the call has no device lengths or block table to check."""


def _refuse(op: str, what: str) -> AclnnError:
    return AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, f"the rocm backend cannot run {op} with {what}")


def _p(t: Any) -> ctypes.c_void_p:
    if not isinstance(t, AclTensor):
        return ctypes.c_void_p(0)
    return KernelArgs.pointer(t.data + t.offset * (t.dtype.info.storage_bits // 8))


def strides4(t: AclTensor | None, leading: int) -> Strides:
    """(outer, row, head, last) strides: ``leading`` dims before the head (2: [B, S, N, ...], 1: [T, N, ...]).

    A tensor without a last dim (weights [B, S, N] / [T, N]) gets 0 there.
    """
    if t is None:
        return (0, 0, 0, 0)
    st = list(t.strides)
    if leading == 1:
        st = [0, *st]
    st += [0] * (4 - len(st))
    return st[0], st[1], st[2], st[3]


@functools.cache
def _li_source(inst: LiInstance, which: str) -> str:
    return li_source(inst, which)


class SparseAttentionRunner:
    """Turns LightningIndexer / SparseFlashAttention launches into programs."""

    def __init__(self, backend: RocmBackend) -> None:
        self.backend = backend
        self.sorter = Sorter(backend)
        self._lock = threading.Lock()
        self._sources: dict[tuple[SaInstance, str], str] = {}
        self.sfa_gemm = GemmPath(self)
        """SparseFlashAttention's GEMM path (its ``budget``: bytes of temporaries a chunk of query rows may take)."""

    def kernels(self) -> dict[str, Kernel]:
        """A kernel per op name."""
        return {
            "LightningIndexer": program_kernel(
                self.backend, "sparse_attention", "LightningIndexer", self._indexer, self.li_path
            ),
            "SparseFlashAttention": sfa_kernel(self),
        }

    def _function(self, inst: SaInstance, which: str) -> object:
        src = self._sources.get((inst, which))
        if src is None:
            src = sa_source(inst, which)
            with self._lock:
                self._sources[(inst, which)] = src
        return self.backend.function(src, inst.name(which))

    def _geometry(self, launch: Launch, key: AclTensor, lq: Any, lk: Any, table: Any, count: int) -> SaMeta:
        """The call's shared geometry (the plan's layouts and batch, the tensors' shapes)."""
        a, plan = launch.args, launch.plan
        q = a["query"]
        assert isinstance(q, AclTensor)
        q_tnd = plan["q_layout"] == "TND"
        mode = KV_MODES[plan["kv_layout"]]
        qd = q.view_dims
        n1 = qd[-2]
        kd = key.view_dims
        n2 = kd[-2]
        if mode == 2:
            assert isinstance(table, AclTensor)
            cap, block, blocks, cols = table.view_dims[1] * kd[1], kd[1], kd[0], table.view_dims[1]
        else:
            cap, block, blocks, cols = (kd[0] if mode == 1 else kd[1]), 1, 0, 0
        return SaMeta(
            batch=int(plan["batch"]),
            q_tnd=int(q_tnd),
            kv_mode=mode,
            s1=qd[0] if q_tnd else qd[1],
            cap=cap,
            block=block,
            blocks=blocks,
            n2=n2,
            group=n1 // n2,
            d=qd[-1],
            count=count,
            mode=int(a["sparseMode"]),
            has_lq=int(isinstance(lq, AclTensor)),
            has_lk=int(isinstance(lk, AclTensor)),
            lq_step=lq.strides[0] if isinstance(lq, AclTensor) else 0,
            lk_step=lk.strides[0] if isinstance(lk, AclTensor) else 0,
            table_cols=cols,
            rows=qd[0] if q_tnd else qd[0] * qd[1],
            q=strides4(q, 1 if q_tnd else 2),
            k=strides4(key, 1 if mode == 1 else 2),
            table=(table.strides[0], table.strides[1], 0, 0) if isinstance(table, AclTensor) else (0, 0, 0, 0),
        )

    def _check(self, prog: Program, inst: SaInstance, packed: Any, lq: Any, lk: Any, table: Any) -> None:
        config = LaunchConfig((1, 1, 1), (CHECK_THREADS, 1, 1))
        prog.steps.append(Step(self._function(inst, "check"), config, (packed, _p(lq), _p(lk), _p(table), FLAG)))

    # ------------------------------------------------------------------ LightningIndexer
    def li_path(self) -> str:
        """The :data:`LI_PATH_ENV` setting (``select`` unless set; other values are refused)."""
        value = (self.backend.environ.get(LI_PATH_ENV, "") or LI_PATHS[0]).strip().lower()
        if value not in LI_PATHS:
            why = f"{LI_PATH_ENV}={value!r}: expected one of {LI_PATHS}"
            raise AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, why)
        return value

    def _li_function(self, inst: LiInstance, which: str) -> object:
        return self.backend.function(_li_source(inst, which), inst.name(which))

    @staticmethod
    def _vec_keys(key: AclTensor, d: int) -> bool:
        """Whether the key rows can be read 16 bytes (8 dims) at a time: contiguous dims, aligned rows."""
        address = key.data + key.offset * (key.dtype.info.storage_bits // 8)
        strides = key.strides[:-1]
        return d % 8 == 0 and key.strides[-1] == 1 and all(st % 8 == 0 for st in strides) and address % 16 == 0

    def _indexer(self, launch: Launch) -> Program:
        a = launch.args
        q, key, w, out = a["query"], a["key"], a["weights"], a["sparseIndicesOut"]
        values = a["sparseValuesOut"] if a["returnValues"] else None
        lq, lk, table = a["actualSeqLengthsQueryOptional"], a["actualSeqLengthsKeyOptional"], a["blockTableOptional"]
        for t in (q, key, w, out):
            assert isinstance(t, AclTensor)
        count = int(a["sparseCount"])
        path = self.li_path()
        m = self._geometry(launch, key, lq, lk, table, count)
        if path == "sort" and (m.group * m.d > MAX_SHARED_FLOATS or m.group > MAX_SHARED_FLOATS // 16):
            why = f"{m.group} query heads per key head of D={m.d}"
            raise _refuse("LightningIndexer", f"{why} (shared memory holds {MAX_SHARED_FLOATS} floats, 512 heads)")
        lead = 1 if m.q_tnd else 2
        packed_meta = replace(m, w=strides4(w, lead), o=strides4(out, lead))
        if isinstance(values, AclTensor):
            packed_meta = replace(packed_meta, o2=strides4(values, lead), has_values=1)
        packed = KernelArgs.index_array(packed_meta.values(), "long long")
        inst = SaInstance(q.dtype, w.dtype, m.d, 0)
        prog = Program(report="LightningIndexer: actual lengths or block table out of range")
        self._check(prog, inst, packed, lq, lk, table)
        rows = m.rows * m.n2
        vec = self._vec_keys(key, m.d)
        loads = " (16-byte key loads)" if vec and path != "sort" else ""
        LOG.debug(
            "LightningIndexer %s rows=%d keys=%d heads=%d D=%d top %d: %s path%s",
            q.dtype.short, m.rows, m.cap, m.group, m.d, count, path, loads,
        )  # fmt: skip
        if rows == 0:
            return prog
        scores = prog.temp(rows * m.cap * 4)
        if path == "sort":
            tiles = -(-m.cap // SCORE_THREADS)
            config = LaunchConfig((rows * tiles, 1, 1), (SCORE_THREADS, 1, 1))
            values_s = (packed, _p(q), _p(key), _p(w), _p(lq), _p(lk), _p(table), scores, FLAG)
            prog.steps.append(Step(self._function(inst, "score"), config, values_s))
        else:
            fast = LiInstance(q.dtype, w.dtype, vec)
            config = LaunchConfig((rows * -(-m.cap // TILE_KEYS), 1, 1), (TILE_THREADS, 1, 1))
            values_s = (packed, _p(q), _p(key), _p(w), _p(lq), _p(lk), _p(table), scores, FLAG)
            if m.cap > 0:
                prog.steps.append(Step(self._li_function(fast, "tiled"), config, values_s))
            if path == "select":
                want = min(count, m.cap)
                size = 1 << max(want - 1, 0).bit_length()
                scratch: Any = prog.temp(rows * size * 8) if size > SHARED_SORT else ctypes.c_void_p(0)
                sel_config = LaunchConfig((rows, 1, 1), (select_threads(m.cap), 1, 1))
                args_sel = (packed, scores, _p(lq), _p(out), _p(values), scratch, FLAG)
                prog.steps.append(Step(self._li_function(fast, "select"), sel_config, args_sel))
                return prog
        self.sorter.check_length("LightningIndexer", m.cap)
        _, order = self.sorter.sort_tensor(prog, D.ACL_FLOAT, True, scores, rows, (rows,), (m.cap,), m.cap)
        emit_config = self.backend.elementwise_config(max(rows * count, 1), 1)
        emit_config = LaunchConfig(emit_config.grid, (EMIT_THREADS, 1, 1))
        args_e = (packed, scores, order, _p(lq), _p(out), _p(values), FLAG)
        prog.steps.append(Step(self._function(inst, "emit"), emit_config, args_e))
        return prog

    # ------------------------------------------------------------------ SparseFlashAttention
    def sfa_call(self, launch: Launch) -> SfaCall:
        """The call's geometry, packed meta and operand pointers (both SparseFlashAttention paths start here)."""
        a = launch.args
        q, key, v, idx, out = a["query"], a["key"], a["value"], a["sparseIndices"], a["attentionOutOut"]
        qr, kr = a["queryRope"], a["keyRope"]
        lq, lk, table = a["actualSeqLengthsQuery"], a["actualSeqLengthsKv"], a["blockTable"]
        smax = a["softmaxMaxOut"] if a["returnSoftmaxLse"] else None
        ssum = a["softmaxSumOut"] if a["returnSoftmaxLse"] else None
        for t in (q, key, v, idx, out):
            assert isinstance(t, AclTensor)
        m = self._geometry(launch, key, lq, lk, table, idx.view_dims[-1])
        lead = 1 if m.q_tnd else 2
        kv_lead = 1 if m.kv_mode == 1 else 2
        dr = qr.view_dims[-1] if isinstance(qr, AclTensor) else 0
        stats: Strides = (0, 0, 0, 0)
        if isinstance(smax, AclTensor):
            st = smax.strides  # [B, N2, S1, G] -> (b, n2, s, g); TND [N2, T1, G] -> (0, n2, t, g)
            stats = (st[0], st[1], st[2], st[3]) if not m.q_tnd else (0, st[0], st[1], st[2])
        meta = replace(
            m,
            dr=dr,
            sparse_block=int(a["sparseBlockSize"]),
            v=strides4(v, kv_lead),
            qr=strides4(qr if isinstance(qr, AclTensor) else None, lead),
            kr=strides4(kr if isinstance(kr, AclTensor) else None, kv_lead),
            o=strides4(out, lead),
            idx=strides4(idx, lead),
            stats=stats,
        )
        inst = SaInstance(q.dtype, q.dtype, m.d, dr)
        lengths = {"lq": lq, "lk": lk, "table": table}
        return SfaCall(
            meta=meta,
            packed=KernelArgs.index_array(meta.values(), "long long"),
            inst=inst,
            scale=float(a["scaleValue"]),
            tensors={"query": q, "key": key, "value": v, "queryRope": qr, "keyRope": kr, "out": out} | lengths,
            pointers=dict(zip(POINTER_NAMES, map(_p, (q, key, v, qr, kr, idx, lq, lk, table, out, smax, ssum)))),
        )

    def sfa_program(self, call: SfaCall) -> Program:
        """A program starting with the check kernel (the device lengths and block table), or, where the call has
        neither (the check could never fail), none: its kernels then read :meth:`sfa_flag`'s zero word (issue 16:
        the check launch, the flag's allocation and zeroing, and its read back at synchronisation were host time
        of every decode call)."""
        if not _checks(call.meta):
            return Program(scratch=4, scratch_region=UNCHECKED_REGION)
        prog = Program(report="SparseFlashAttention: actual lengths or block table out of range")
        t = call.tensors
        self._check(prog, call.inst, call.packed, t["lq"], t["lk"], t["table"])
        return prog

    def sfa_block(self, call: SfaCall) -> Program:
        """The block kernel's program: the check, then one attend launch, a block per (query row, query head)."""
        m, p = call.meta, call.pointers
        prog = self.sfa_program(call)
        blocks = m.rows * m.n2 * m.group
        if blocks == 0:
            return prog
        config = LaunchConfig((blocks, 1, 1), (SFA_THREADS, 1, 1))
        values_a = (call.packed, ctypes.c_double(call.scale), *(p[n] for n in POINTER_NAMES), self.sfa_flag(prog))
        prog.steps.append(Step(self._function(call.inst, "attend"), config, values_a))
        return prog

    @staticmethod
    def sfa_flag(prog: Program) -> Any:
        """The flag argument of ``prog``'s kernels: the run's checked flag, or the unchecked region's zero word."""
        return FLAG if prog.report is not None else Scratch(0)


def _checks(m: SaMeta) -> bool:
    """Whether the check kernel can set the flag: it reads device lengths (given, or TND's ends) or a block table."""
    return bool(m.q_tnd or m.kv_mode != 0 or m.has_lq or m.has_lk)


@dataclass(frozen=True)
class SfaCall:
    """One SparseFlashAttention signature as both paths see it."""

    meta: SaMeta
    packed: Any
    inst: SaInstance
    scale: float
    tensors: dict[str, Any]
    """query, key, value, queryRope, keyRope, out, lq, lk, table (the argument as given: None when absent)."""
    pointers: dict[str, ctypes.c_void_p]


RUNNER = SparseAttentionRunner

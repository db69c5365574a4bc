"""QuantMatmulV3 / V4 / V5 and WeightQuantBatchMatmulV2 on the GPU: operand kernels, one GEMM, an epilogue.

Three paths, chosen per call and reported (debug log line ``acl_rocm.quant_matmul``, ``last_path``):

* ``fp8-blaslt``: FLOAT8 operands (E4M3FN x E4M3FN; E5M2 x E5M2 has no cuBLASLt kernel) through the
  vendor BLAS's fp8 GEMM where the architecture has fp8 matrix hardware with OCP encodings (sm_89+).
  cuBLASLt takes fp8 only in the "TN" form with 16-byte leading dimensions, so an operand that is not
  K-major with k and its pitch multiples of 16 is first gathered (bytes unchanged, zero-padded) into
  one that is. A per-tensor scale with a bf16 / fp16 / fp32 output and nothing else to apply is
  handed to the BLAS as its A scale pointer and the GEMM writes ``out`` itself; otherwise the GEMM
  writes fp32 and the epilogue kernel applies per-channel / per-token scales, bias and the dtype.
* ``int8-blaslt``: INT8 x INT8 -> INT32 (exact) through the BLAS, in the same "TN" form, then the
  epilogue (dequantisation in double, integer outputs rounded half-to-even and saturated).
* ``dequant``: everything else (INT4, HiFloat8, E5M2 x E5M2, MXFP8 / MXFP4, weight antiquantisation,
  and the above where the BLAS has no kernel): each operand is decoded by the operand kernel into a
  bf16 (codes that bf16 holds exactly, MX block scales applied) or fp32 (antiquantised weights)
  temporary, then one bf16 / fp32 GEMM with fp32 accumulation and the epilogue. Integer products
  stay exact while partial sums stay below 2^24 (always for k <= 1024). With nothing left for the
  epilogue (no scale, bias or offset: MX without a bias), the GEMM writes ``out`` itself
  (``dequant-direct``), rounding its fp32 sums once as the epilogue would.

The operand and epilogue kernels are tiled (grid over k / rows / batch, resp. n / m / batch) and split
the batch index once per block: per-element 64-bit divisions once cost more than the GEMM at 16384^3.
An operand stored along rows rather than k is staged through shared memory, so both sides coalesce.

The native MX block-scaled GEMM (gfx950, sm_100+) is not implemented: MX always takes ``dequant``,
and ``MXFP8_FORCE_HW=1`` is refused (at backend start where the hardware has no MX instructions,
e.g. sm_90; per call where it has them). fp8 on gfx942 (fnuz encodings) takes ``dequant`` too.
Temporaries and the BLAS workspace are stream-ordered; nothing is read back to the host. The only host
data are the decode tables (LUT operands), uploaded once per device and dtype on first use.
"""

from __future__ import annotations

import ctypes
import logging
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from acl_core.backend import Kernel, Launch
from acl_core.dtypes import DataType as D
from acl_core.errors import AclError, AclErrorCode, RtErrorCode
from acl_core.spec.runtime import CopyDirection
from acl_core.tensor import AclTensor, contiguous_strides
from acl_rocm.arch import ENV_MX_FORCE
from acl_rocm.driver import handle
from acl_rocm.kernels.quant_matmul import (
    BATCH_DIMS,
    DECODABLE,
    EPI_ROWS,
    EPI_VEC,
    MX_PAIR_CHUNK,
    MX_PAIR_LOADS,
    THREADS,
    TILE_K,
    TILE_ROWS,
    EpilogueKernel,
    OperandKernel,
    ScaleKind,
    Store,
    decode_table,
    epilogue_source,
    load_kind,
    mx_pair_chunks_per_block,
    mx_pair_name,
    mx_pair_source,
    operand_source,
)
from acl_rocm.launch import KernelArgs
from acl_rocm.providers.base import GemmCall, Matrix
from acl_rocm.views import broadcast_strides, coalesce

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

LOG = logging.getLogger("acl_rocm.quant_matmul")
OPS: tuple[str, ...] = ("QuantMatmulV3", "QuantMatmulV4", "QuantMatmulV5", "WeightQuantBatchMatmulV2")
WORKSPACE_BYTES = 32 << 20
FP8 = frozenset({D.ACL_FLOAT8_E4M3FN, D.ACL_FLOAT8_E5M2})
HW_ALIGN = 16
MX_DECODE_ENV = "ACL_QMM_MX_DECODE"
"""How MX operands are decoded to bf16: ``tiled`` (default: the operand kernel, one launch per operand) or
``pair`` (both in one launch, 16-byte loads and stores, where the layout allows; else ``tiled``, logged)."""
MX_DECODES = ("tiled", "pair")
EPILOGUE_ENV = "ACL_QMM_EPILOGUE"
"""The int32 / fp32 epilogue: ``vec4`` (default: 4 columns a thread, 16-byte loads) or ``scalar`` (a column each)."""
EPILOGUES = ("scalar", "vec4")
MAX_GRID_YZ = 65535
"""Grid y / z limit (CUDA and HIP alike)."""
"""Bytes: cuBLASLt's fp8 / int8 kernels need 16-byte leading dimensions, k and n multiples of 16."""
_EXACT_IN_BF16 = frozenset({D.ACL_INT8, D.ACL_INT4, D.ACL_FLOAT8_E4M3FN, D.ACL_FLOAT8_E5M2, D.ACL_HIFLOAT8})
_EXACT_IN_BF16 |= {D.ACL_FLOAT4_E2M1, D.ACL_BF16}


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _itemsize(dtype: D) -> int:
    return max(dtype.info.storage_bits // 8, 1)


def _addr(t: AclTensor | None) -> int:
    """Byte address of a (byte-sized element) tensor's first element; 0 for an absent tensor."""
    return 0 if t is None else t.data + t.offset * _itemsize(t.dtype)


def _pad_batch(values: Sequence[int], fill: int) -> list[int]:
    return [fill] * (BATCH_DIMS - len(values)) + list(values)


@dataclass
class KOperand:
    """One GEMM operand seen K-major: ``rows`` (m for x1, n for x2) by ``k``, over a broadcast batch."""

    tensor: AclTensor
    batch_strides: tuple[int, ...]
    rows: int
    k: int
    row_stride: int
    k_stride: int
    scale: AclTensor | None = None
    """E8M0 block scales (MX) or an antiquant scale (with ``offset`` and ``group``)."""
    scale_strides: tuple[int, ...] = ()
    """(batch strides..., row, k-block, pair) of ``scale``."""
    offset: AclTensor | None = None
    offset_strides: tuple[int, ...] = ()
    group: int = 0


def k_operand(t: AclTensor, batch: Sequence[int], *, rows_last: bool) -> KOperand:
    """The K-major view of ``t``: rows are its last dim when ``rows_last`` (x2 untransposed, x1 transposed)."""
    dims, strides = list(t.view_dims), list(t.strides)
    bs = broadcast_strides(dims[:-2], strides[:-2], batch)
    if rows_last:
        return KOperand(t, bs, dims[-1], dims[-2], strides[-1], strides[-2])
    return KOperand(t, bs, dims[-2], dims[-1], strides[-2], strides[-1])


@dataclass
class Epilogue:
    """What the epilogue applies: parameters by role (scale, token, bias, offset) and the order of bias."""

    out: AclTensor
    scale: AclTensor | None = None
    token: AclTensor | None = None
    bias: AclTensor | None = None
    bias_first: bool = False
    offset: AclTensor | None = None

    @property
    def trivial(self) -> bool:
        """Nothing but a dtype conversion (and at most a per-tensor scale) is left to apply."""
        return self.token is None and self.bias is None and self.offset is None


@dataclass
class Job:
    """One quantised matmul: two operands, the shape, what the epilogue applies, and how the GEMM may run."""

    op: str
    x1: KOperand
    x2: KOperand
    batch: tuple[int, ...]
    m: int
    k: int
    n: int
    epilogue: Epilogue
    kind: str
    """"fp8", "int8", "mx" or "dequant" (what the operands are, before the path is chosen)."""
    decode_to: D = D.ACL_BF16


@dataclass
class _Temps:
    """Stream-ordered temporaries of one call, freed at its end."""

    provider: Any
    stream: int
    addresses: list[int] = field(default_factory=list)

    def alloc(self, nbytes: int) -> int:
        address = int(self.provider.malloc_async(max(nbytes, 1), self.stream))
        self.addresses.append(address)
        return address

    def release(self) -> None:
        for address in self.addresses:
            self.provider.free_async(address, self.stream)
        self.addresses.clear()


class QuantMatmulRunner:
    """QuantMatmulV3/V4/V5 and WeightQuantBatchMatmulV2 as operand kernels, one BLAS GEMM and an epilogue."""

    def __init__(self, backend: RocmBackend) -> None:
        self.backend = backend
        self._tables: dict[tuple[int, D], int] = {}
        self._lock = threading.Lock()
        self.last_path: str | None = None
        """The path the last call took: fp8-blaslt[-direct], int8-blaslt or dequant[-direct]."""
        self.hw_refused: dict[str, str] = {}
        """Hardware paths the BLAS refused on this device (path -> reason); later calls take ``dequant``."""

    # ------------------------------------------------------------------ claims and capabilities
    def unavailable(self) -> str | None:
        """None when the provider's GEMM works here, else why not."""
        return self.backend.provider.gemm_unavailable()

    def kernels(self) -> dict[str, Kernel]:
        """A kernel per op, or none when the BLAS library is missing."""
        if self.unavailable() is not None:
            return {}
        return {name: self.run for name in OPS}

    @property
    def fp8_hw(self) -> bool:
        """True when fp8 GEMMs run on fp8 matrix hardware here (OCP fp8 and a BLAS; fnuz is not wired)."""
        arch = self.backend.policy.arch
        return arch.fp8_matmul_hw and arch.fp8_format == "ocp" and self.unavailable() is None

    def path_note(self) -> str:
        """One line for the capability notes: which path each operand kind takes on this device."""
        fp8 = "fp8-blaslt (E4M3; E5M2 x E5M2 dequant)" if self.fp8_hw else "dequant"
        return f"fp8: {fp8}; int8: int8-blaslt; int4/hif8/MX/antiquant: dequant (bf16/fp32 GEMM)"

    # ------------------------------------------------------------------ entry
    def run(self, launch: Launch) -> None:
        """Enqueue one quantised matmul on the launch's stream."""
        job = self._job(launch)
        out = job.epilogue.out
        if out.numel == 0:
            return
        stream = handle(launch.stream)
        path = self._choose(job)
        if path in self.hw_refused:
            path = "dequant"
        if path != "dequant":
            try:
                self._run_hw(job, path, stream, launch)
                return
            except AclError as exc:
                if exc.code != RtErrorCode.ACL_ERROR_RT_FEATURE_NOT_SUPPORT:
                    raise
                self.hw_refused[path] = str(exc)
                LOG.warning("%s: the BLAS refused the %s path (%s); using dequant from now on", job.op, path, exc)
        self._run_dequant(job, stream)

    def _choose(self, job: Job) -> str:
        if job.kind == "mx":
            self._check_mx_policy(job.op)
            return "dequant"
        if job.kind == "fp8":
            both_e5m2 = job.x1.tensor.dtype == job.x2.tensor.dtype == D.ACL_FLOAT8_E5M2
            return "fp8-blaslt" if self.fp8_hw and not both_e5m2 else "dequant"
        if job.kind == "int8":
            return "int8-blaslt"
        return "dequant"

    def _check_mx_policy(self, op: str) -> None:
        """MXFP8_FORCE_HW=1 asks for the native MX GEMM, which is not implemented: refuse rather than emulate."""
        policy = self.backend.policy
        if policy.refusal is not None:  # the backend refuses to start with it; kept for a policy set later
            raise AclError(RtErrorCode.ACL_ERROR_RT_FEATURE_NOT_SUPPORT, policy.refusal)
        if policy.mx_use_hw and self.backend.environ.get(ENV_MX_FORCE, "").strip().lower() in (
            "1",
            "true",
            "yes",
            "on",
        ):
            raise AclError(
                RtErrorCode.ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                f"{op}: {ENV_MX_FORCE}=1 asks for the native MX GEMM of {policy.arch.name}, which acl-core does not "
                "implement yet; unset it to use the dequantise-then-GEMM path",
            )

    # ------------------------------------------------------------------ argument mapping
    def _job(self, launch: Launch) -> Job:
        op, args, plan = launch.spec.name, launch.args, launch.plan

        def t(name: str) -> AclTensor | None:
            value = args.get(name)
            return value if isinstance(value, AclTensor) else None

        if op == "WeightQuantBatchMatmulV2":
            return self._wqbmm_job(launch, t)
        x1, x2 = t("x1"), t("x2")
        out = t("out")
        assert x1 is not None and x2 is not None and out is not None
        t1, t2 = bool(args["transposeX1"]), bool(args["transposeX2"])
        batch = tuple(out.view_dims[:-2])
        a = k_operand(x1, batch, rows_last=t1)
        b = k_operand(x2, batch, rows_last=not t2)
        m, k, n = a.rows, a.k, b.rows
        if op == "QuantMatmulV5":
            s1, s2 = t("x1Scale"), t("x2Scale")
            assert s2 is not None
            if plan.get("mode") == "mx":
                assert s1 is not None
                a.scale, a.scale_strides = s1, mx_scale_strides(s1, len(batch), rows_first=not t1)
                b.scale, b.scale_strides = s2, mx_scale_strides(s2, len(batch), rows_first=t2)
                epi = Epilogue(out, bias=t("bias"))
                return Job(op, a, b, batch, m, k, n, epi, "mx")
            epi = Epilogue(out, scale=s2, token=s1, bias=t("bias"), offset=t("x2Offset"))
        else:
            epi = Epilogue(out, scale=t("scale"), token=t("pertokenScaleOptional"), bias=t("bias"), offset=t("offset"))
        if epi.bias is not None and epi.bias.dtype == D.ACL_INT32:
            epi.bias_first = True
        kind = {D.ACL_INT8: "int8"}.get(x1.dtype, "fp8" if x1.dtype in FP8 else "dequant")
        return Job(op, a, b, batch, m, k, n, epi, kind)

    def _wqbmm_job(self, launch: Launch, t: Any) -> Job:
        x, w, y = t("x"), t("weight"), t("y")
        scale, offset = t("antiquantScale"), t("antiquantOffsetOptional")
        assert x is not None and w is not None and y is not None and scale is not None
        a = k_operand(x, (), rows_last=False)
        b = k_operand(w, (), rows_last=True)
        group = int(launch.plan["group"])
        b.scale, b.offset, b.group = scale, offset, group
        b.scale_strides = _antiquant_strides(scale, b.rows, group)
        if offset is not None:
            b.offset_strides = _antiquant_strides(offset, b.rows, group)
        epi = Epilogue(y, scale=t("quantScaleOptional"), bias=t("biasOptional"), bias_first=True)
        epi.offset = t("quantOffsetOptional")
        return Job(launch.spec.name, a, b, (), a.rows, a.k, b.rows, epi, "dequant", decode_to=D.ACL_FLOAT)

    # ------------------------------------------------------------------ hardware paths
    def _run_hw(self, job: Job, path: str, stream: int, launch: Launch) -> None:
        provider = self.backend.provider
        memo_key = f"rocm.quant_matmul.direct@{provider.get_device()}"
        cached = launch.memo.get(memo_key)
        if isinstance(cached, GemmCall):
            self._gemm(cached, stream)
            self._report(job, "fp8-blaslt-direct")
            return
        temps = _Temps(provider, stream)
        try:
            count = math.prod(job.batch)
            k_pad = _round_up(job.k, HW_ALIGN)
            n_pad = _round_up(job.n, HW_ALIGN)
            a_mat = self._hw_operand(job.x1, job.batch, job.m, k_pad, temps)
            b_mat = self._hw_operand(job.x2, job.batch, n_pad, k_pad, temps)
            direct = self._direct_target(job, n_pad, count) if path == "fp8-blaslt" else None
            a_op = replace(b_mat, transpose=True)  # the "TN" form: x2 (k x n, column-major) transposed
            if direct is not None:
                d_mat, a_scale = direct
                call = GemmCall(a_op, a_mat, d_mat, count, a_scale=a_scale)
                self._gemm(call, stream)
                if not temps.addresses:
                    launch.memo[memo_key] = call  # a pure function of the signature: reused as it is
                self._report(job, "fp8-blaslt-direct")
                return
            acc = D.ACL_INT32 if path == "int8-blaslt" else D.ACL_FLOAT
            d_addr = temps.alloc(count * job.m * n_pad * 4)
            d_mat = Matrix(d_addr, int(acc), n_pad, job.m, n_pad, job.m * n_pad if count > 1 else 0)
            self._gemm(GemmCall(a_op, a_mat, d_mat, count), stream)
            self._epilogue(job, d_addr, "int32" if acc == D.ACL_INT32 else "f32", n_pad, stream)
            self._report(job, path)
        finally:
            temps.release()

    def _hw_operand(self, op: KOperand, batch: Sequence[int], rows_pad: int, k_pad: int, temps: _Temps) -> Matrix:
        """The operand as the "TN" GEMM needs it (k x rows, column-major): in place, or gathered byte for byte."""
        t = op.tensor
        count = math.prod(batch)
        stride = _uniform(batch, op.batch_strides)
        start = _addr(t)
        in_place = (
            op.k_stride == 1
            and op.k == k_pad
            and op.rows == rows_pad
            and (op.row_stride * _itemsize(t.dtype)) % HW_ALIGN == 0
            and op.row_stride >= op.k
            and start % HW_ALIGN == 0
            and stride is not None
            and (stride != 0 or count == 1)
        )
        if in_place:
            assert stride is not None
            return Matrix(start, int(t.dtype), op.k, op.rows, op.row_stride, stride if count > 1 else 0)
        address = temps.alloc(count * rows_pad * k_pad * _itemsize(t.dtype))
        self.enqueue_operand(op, batch, rows_pad, k_pad, "raw", address, temps.stream)
        return Matrix(address, int(t.dtype), k_pad, rows_pad, k_pad, rows_pad * k_pad if count > 1 else 0)

    def _direct_target(self, job: Job, n_pad: int, count: int) -> tuple[Matrix, int] | None:
        """(D = out, A scale pointer) when the fp8 GEMM can write ``out`` itself, else None."""
        scale = job.epilogue.scale
        if scale is None or scale.numel != 1:
            return None
        if scale.dtype not in (D.ACL_FLOAT, D.ACL_UINT64, D.ACL_INT64) or _addr(scale) % 4:
            return None
        target = self._direct_out(job, n_pad, count)
        return None if target is None else (target, _addr(scale))

    def _direct_out(self, job: Job, n_pad: int, count: int) -> Matrix | None:
        """``out`` as the GEMM's D when nothing but a dtype conversion (and a per-tensor scale) is left."""
        epi, out = job.epilogue, job.epilogue.out
        if not epi.trivial or n_pad != job.n:
            return None
        if out.dtype not in (D.ACL_BF16, D.ACL_FLOAT16, D.ACL_FLOAT) or out.view_dims[-1] != job.n:
            return None
        strides = list(out.strides)
        row, col = strides[-2], strides[-1]
        item = _itemsize(out.dtype)
        d_stride = _uniform(job.batch, strides[:-2])
        if col != 1 or row < job.n or (row * item) % HW_ALIGN or _addr(out) % HW_ALIGN or d_stride is None:
            return None
        return Matrix(_addr(out), int(out.dtype), job.n, job.m, row, d_stride if count > 1 else 0)

    # ------------------------------------------------------------------ dequantise then GEMM
    def _run_dequant(self, job: Job, stream: int) -> None:
        temps = _Temps(self.backend.provider, stream)
        try:
            count = math.prod(job.batch)
            decode = job.decode_to
            if decode == D.ACL_BF16 and not {job.x1.tensor.dtype, job.x2.tensor.dtype} <= _EXACT_IN_BF16:
                decode = D.ACL_FLOAT
            store: Store = "bf16" if decode == D.ACL_BF16 else "f32"
            k_pad = _round_up(job.k, 8)
            addresses = [temps.alloc(count * rows * k_pad * _itemsize(decode)) for rows in (job.m, job.n)]
            paired = self._mx_pair(job, decode, addresses, stream)
            mats = []
            for op, rows, address in ((job.x1, job.m, addresses[0]), (job.x2, job.n, addresses[1])):
                if not paired:
                    self.enqueue_operand(op, job.batch, rows, k_pad, store, address, stream)
                mats.append(Matrix(address, int(decode), k_pad, rows, k_pad, rows * k_pad if count > 1 else 0))
            a_mat, b_mat = mats
            suffix = " mx-pair" if paired else ""
            a_op = replace(b_mat, transpose=True)
            # cuBLASLt has no fp32 x fp32 -> 16-bit GEMM: fp32-decoded operands keep the epilogue unless out is fp32
            same = decode == D.ACL_BF16 or job.epilogue.out.dtype == D.ACL_FLOAT
            direct = self._direct_out(job, job.n, count) if job.epilogue.scale is None and same else None
            if direct is not None:  # the GEMM rounds its fp32 sums to out's dtype once, as the epilogue would
                self._gemm(GemmCall(a_op, a_mat, direct, count), stream)
                self._report(job, "dequant-direct" + suffix)
                return
            d_addr = temps.alloc(count * job.m * job.n * 4)
            d_mat = Matrix(d_addr, int(D.ACL_FLOAT), job.n, job.m, job.n, job.m * job.n if count > 1 else 0)
            self._gemm(GemmCall(a_op, a_mat, d_mat, count), stream)
            self._epilogue(job, d_addr, "f32", job.n, stream)
            self._report(job, "dequant" + suffix)
        finally:
            temps.release()

    def mx_decode(self) -> str:
        """``ACL_QMM_MX_DECODE`` (tiled or pair; anything else: ACL_ERROR_INVALID_PARAM)."""
        value = str(self.backend.environ.get(MX_DECODE_ENV, "") or "pair").strip().lower()
        if value not in MX_DECODES:
            expected = ", ".join(MX_DECODES)
            raise AclError(AclErrorCode.ACL_ERROR_INVALID_PARAM, f"{MX_DECODE_ENV}={value!r}: expected {expected}")
        return value

    def _mx_pair(self, job: Job, decode: D, addresses: Sequence[int], stream: int) -> bool:
        """Decode both MX operands in one launch of the pair kernel when chosen and the layout allows; else False."""
        if job.kind != "mx" or self.mx_decode() != "pair":
            return False
        why = mx_pair_refusal(job, decode)
        if why is not None:
            LOG.debug("%s: %s=pair not taken (%s): the tiled decode runs", job.op, MX_DECODE_ENV, why)
            return False
        dtype = job.x1.tensor.dtype
        load = load_kind(dtype)
        sides = (job.x1, job.x2)
        blocks = [_blocks(op.rows * (op.k // MX_PAIR_CHUNK), mx_pair_chunks_per_block()) for op in sides]
        meta = [op.rows for op in sides] + [op.k for op in sides] + [op.row_stride for op in sides]
        meta += [op.tensor.offset for op in sides]
        for i in range(3):  # the scale's row, k-block pair and pair element strides (after any batch strides)
            meta += [op.scale_strides[len(op.scale_strides) - 3 + i] for op in sides]
        meta.append(blocks[0])
        values = [
            KernelArgs.index_array(meta, "long long"),
            KernelArgs.pointer(job.x1.tensor.data),
            KernelArgs.pointer(job.x2.tensor.data),
            KernelArgs.pointer(_addr(job.x1.scale)),
            KernelArgs.pointer(_addr(job.x2.scale)),
            KernelArgs.pointer(self._table(dtype)),
            KernelArgs.pointer(self._table(D.ACL_FLOAT8_E8M0)),
            KernelArgs.pointer(addresses[0]),
            KernelArgs.pointer(addresses[1]),
        ]
        function = self.backend.function(mx_pair_source(load), mx_pair_name(load))
        self._launch(function, (blocks[0] + blocks[1], 1, 1), values, stream)
        return True

    # ------------------------------------------------------------------ kernels
    def _gemm(self, call: GemmCall, stream: int) -> None:
        provider = self.backend.provider
        workspace = provider.malloc_async(WORKSPACE_BYTES, stream)
        try:
            provider.gemm(call, workspace, WORKSPACE_BYTES, stream)
        finally:
            provider.free_async(workspace, stream)

    def prepare_capture(self) -> None:
        """Upload every decode table for the current device: the upload is a host copy a capture cannot hold."""
        tabled = [d for d in sorted(DECODABLE) if load_kind(d) in ("lut8", "lut4")]
        for dtype in (*tabled, D.ACL_FLOAT8_E8M0):
            self._table(dtype)

    def _table(self, dtype: D) -> int:
        """Device address of ``dtype``'s decode table (uploaded once per device)."""
        provider = self.backend.provider
        key = (provider.get_device(), dtype)
        with self._lock:
            address = self._tables.get(key)
            if address is None:
                values = decode_table(dtype)
                address = provider.malloc(values.nbytes)
                try:
                    data = int(values.ctypes.data)
                    provider.memcpy(address, data, values.nbytes, CopyDirection.HOST_TO_DEVICE, None)
                except BaseException:
                    provider.free(address)  # not cached yet: nothing else would ever free it
                    raise
                self._tables[key] = address
        return address

    def enqueue_operand(
        self, op: KOperand, batch: Sequence[int], rows_pad: int, k_pad: int, store: Store, out: int, stream: int
    ) -> None:
        """Decode ``op`` (scales applied) into [*batch, rows_pad, k_pad] at ``out``, K-major, zero-padded."""
        t = op.tensor
        raw = store == "raw"
        scale_kind: ScaleKind = "none"
        if op.scale is not None:
            scale_kind = "e8m0" if op.scale.dtype == D.ACL_FLOAT8_E8M0 else "affine"
        spec = OperandKernel(
            "raw" if raw else load_kind(t.dtype),
            store,
            scale_kind,
            op.scale.dtype if scale_kind == "affine" and op.scale is not None else None,
            op.offset is not None,
            transpose=op.k_stride != 1 and op.row_stride == 1 and op.rows > 1,
        )
        nb = len(batch)
        shape = [*_pad_batch(batch, 1), op.rows, op.k, rows_pad, k_pad]
        strides = [[*_pad_batch(op.batch_strides, 0), op.row_stride, op.k_stride, 0, 0]]
        for given, present in ((op.scale_strides, op.scale), (op.offset_strides, op.offset)):
            if present is None or not given:
                strides.append([0] * 8)
            else:
                strides.append([*_pad_batch(given[:nb], 0), *given[nb:], *([0] * (4 - len(given[nb:])))])
        count = math.prod(batch)
        lut = self._table(t.dtype) if spec.load in ("lut8", "lut4") else 0
        slut = self._table(D.ACL_FLOAT8_E8M0) if scale_kind == "e8m0" else 0
        group = op.group if op.group else max(op.k, 1)
        meta = [count, *shape, *(v for row in strides for v in row)]
        values = [
            KernelArgs.index_array(meta, "long long"),
            KernelArgs.pointer(t.data),
            KernelArgs.pointer(lut),
            KernelArgs.pointer(_addr(op.scale)),
            KernelArgs.pointer(slut),
            KernelArgs.pointer(_addr(op.offset)),
            ctypes.c_longlong(t.offset),
            ctypes.c_longlong(group),
            KernelArgs.pointer(out),
        ]
        function = self.backend.function(operand_source(spec), spec.kernel_name)
        self._launch(function, (_blocks(k_pad, TILE_K), _blocks(rows_pad, TILE_ROWS), count), values, stream)

    def _epilogue(self, job: Job, acc: int, acc_kind: str, ld: int, stream: int) -> None:
        self.enqueue_epilogue(job.epilogue, job.batch, job.m, job.n, acc, acc_kind, ld, stream)

    def enqueue_epilogue(
        self,
        epi: Epilogue,
        batch: tuple[int, ...],
        m: int,
        n: int,
        acc: int,
        acc_kind: str,
        ld: int,
        stream: int,
    ) -> None:
        """Apply ``epi`` to a dense accumulator [*batch, m, ld] ("f32" or "int32") at ``acc``, writing ``epi.out``."""
        out = epi.out
        spec = EpilogueKernel(
            "int32" if acc_kind == "int32" else "f32",
            out.dtype,
            epi.scale.dtype if epi.scale is not None else None,
            epi.token is not None,
            epi.bias.dtype if epi.bias is not None else None,
            epi.bias_first,
            epi.offset.dtype if epi.offset is not None else None,
        )
        nb = len(batch)
        if self.epilogue_choice() == "vec4":
            why = epilogue_vec_refusal(epi, batch, n, ld)
            if why is None:
                spec = replace(spec, vec=True)
            else:
                LOG.debug("%s=vec4 not taken (%s): the scalar epilogue runs", EPILOGUE_ENV, why)
        shape = [*_pad_batch(batch, 1), m, n]
        acc_strides = list(contiguous_strides((*_pad_batch(batch, 1), m, ld)))
        out_strides = [*_pad_batch(list(out.strides[:nb]), 0), out.strides[-2], out.strides[-1]]
        rows = [acc_strides, out_strides]
        rows.append(_n_vector(epi.scale))
        token = epi.token
        rows.append([0, 0, 0, 0, int(token.strides[0]) if token is not None and token.numel > 1 else 0, 0])
        rows.append(_bias_strides(epi.bias))
        rows.append(_n_vector(epi.offset))
        count = math.prod(batch)
        meta = [count, *shape, *(v for row in rows for v in row)]
        values = [
            KernelArgs.index_array(meta, "long long"),
            KernelArgs.pointer(acc),
            KernelArgs.pointer(_addr(epi.scale)),
            KernelArgs.pointer(_addr(epi.token)),
            KernelArgs.pointer(_addr(epi.bias)),
            KernelArgs.pointer(_addr(epi.offset)),
            ctypes.c_longlong(out.offset),
            KernelArgs.pointer(out.data),
        ]
        function = self.backend.function(epilogue_source(spec), spec.kernel_name)
        columns = THREADS * (EPI_VEC if spec.vec else 1)
        self._launch(function, (_blocks(n, columns), _blocks(m, EPI_ROWS), count), values, stream)

    def epilogue_choice(self) -> str:
        """``ACL_QMM_EPILOGUE`` (vec4, the default, or scalar; anything else: ACL_ERROR_INVALID_PARAM)."""
        value = str(self.backend.environ.get(EPILOGUE_ENV, "") or "vec4").strip().lower()
        if value not in EPILOGUES:
            expected = ", ".join(EPILOGUES)
            raise AclError(AclErrorCode.ACL_ERROR_INVALID_PARAM, f"{EPILOGUE_ENV}={value!r}: expected {expected}")
        return value

    def _launch(self, function: object, grid: tuple[int, int, int], values: list[Any], stream: int) -> None:
        """Launch a tiled kernel; y and z beyond the grid limit are looped over inside the kernel."""
        if 0 in grid:
            return
        x, y, z = grid
        args = KernelArgs(values)
        self.backend.provider.launch(
            function, (x, min(y, MAX_GRID_YZ), min(z, MAX_GRID_YZ)), (THREADS, 1, 1), 0, stream, args.address
        )

    def _report(self, job: Job, path: str) -> None:
        self.last_path = path
        if LOG.isEnabledFor(logging.DEBUG):
            shape = f"batch={list(job.batch)} m={job.m} k={job.k} n={job.n}"
            dtypes = f"{job.x1.tensor.dtype.short} @ {job.x2.tensor.dtype.short} -> {job.epilogue.out.dtype.short}"
            LOG.debug("%s: path=%s (%s, %s)", job.op, path, dtypes, shape)

    def close(self) -> None:
        """Free the decode tables."""
        with self._lock:
            for address in self._tables.values():
                try:
                    self.backend.provider.free(address)
                except AclError:
                    pass
            self._tables.clear()


def mx_pair_refusal(job: Job, decode: D) -> str | None:
    """Why the MX pair kernel cannot decode ``job`` (None: it can): one batch, one dtype, aligned K-major rows."""
    if decode != D.ACL_BF16 or math.prod(job.batch) != 1:
        return "a batch or a non-bf16 decode"
    dtypes = {job.x1.tensor.dtype, job.x2.tensor.dtype}
    if len(dtypes) != 1 or load_kind(job.x1.tensor.dtype) not in MX_PAIR_LOADS:
        return "operands of different or non-8/4-bit dtypes"
    per_byte = 2 if load_kind(job.x1.tensor.dtype) == "lut4" else 1
    for op in (job.x1, job.x2):
        t = op.tensor
        if op.scale is None or op.scale.dtype != D.ACL_FLOAT8_E8M0 or len(op.scale_strides) < 3:
            return "an operand without E8M0 block scales"
        if op.k_stride != 1 or op.k % 32 or op.row_stride < op.k:
            return "an operand not K-major, or k not a multiple of 32"
        if t.data % HW_ALIGN or t.offset % (HW_ALIGN * per_byte) or op.row_stride % (HW_ALIGN * per_byte):
            return "rows not 16-byte aligned"
        if op.rows * (op.k // MX_PAIR_CHUNK) + mx_pair_chunks_per_block() >= 1 << 31:
            return "more than 2^31 chunks"
    return None


def epilogue_vec_refusal(epi: Epilogue, batch: Sequence[int], n: int, ld: int) -> str | None:
    """Why the vector epilogue cannot write ``epi.out`` (None: it can): n, strides and bases multiples of EPI_VEC."""
    out = epi.out
    nb = len(batch)
    if n % EPI_VEC or ld % EPI_VEC or out.strides[-1] != 1:
        return "n or the accumulator's row not a multiple of 4, or out not contiguous along n"
    if any(s % EPI_VEC for s in (*out.strides[:nb], out.strides[-2], out.offset)):
        return "an out row or batch stride or offset not a multiple of 4"
    if out.data % (EPI_VEC * _itemsize(out.dtype)):
        return "out not aligned to 4 elements"
    return None


def _blocks(extent: int, tile: int) -> int:
    return -(-extent // tile)


def _uniform(batch: Sequence[int], strides: Sequence[int]) -> int | None:
    """The one stride walking the flattened batch, or None (a broadcast batch of more than one counts as 0)."""
    if math.prod(batch) <= 1:
        return 0
    g = coalesce(batch, [strides])
    return g.strides[0][0] if g.ndim == 1 else None


def mx_scale_strides(s: AclTensor, nb: int, *, rows_first: bool) -> tuple[int, ...]:
    """(batch strides, row, k-block pair, pair element) of an MX scale (*batch, rows | kb, kb | rows, 2)."""
    st = list(s.strides)
    assert s.rank == nb + 3, "the spec gives MX scales the output's batch dims"
    row, block = (st[-3], st[-2]) if rows_first else (st[-2], st[-3])
    return (*st[:nb], row, block, st[-1])


def _antiquant_strides(s: AclTensor, n: int, group: int) -> tuple[int, ...]:
    """(row = n, group) strides of an antiquant scale / offset: (1,), (n,), (1, n) or (groups, n)."""
    dims, st = list(s.view_dims), list(s.strides)
    row = st[-1] if dims[-1] == n and n > 1 else 0
    g = st[0] if group and len(dims) == 2 and dims[0] > 1 else 0
    return (row, g)


def _n_vector(t: AclTensor | None) -> list[int]:
    """Epilogue strides of a (1,) / (n,) / (1, n) parameter: along n only."""
    return [0, 0, 0, 0, 0, _last_stride(t)]


def _last_stride(t: AclTensor | None) -> int:
    return 0 if t is None or t.numel <= 1 else int(t.strides[-1])


def _bias_strides(t: AclTensor | None) -> list[int]:
    """(n,) / (1, n) bias along n; (batch, 1, n) along the single batch dim too."""
    if t is None:
        return [0] * 6
    batch = int(t.strides[0]) if t.rank == 3 and t.view_dims[0] > 1 else 0
    return [0, 0, 0, batch, 0, _last_stride(t) if t.view_dims[-1] > 1 else 0]


RUNNER = QuantMatmulRunner

"""Matmul, Mm and BatchMatMul through the vendor BLAS (cuBLASLt on nvidia, hipBLASLt on amd).

The op code is shared: it maps each operand's (batched, strided) view onto a column-major BLAS
matrix when it can (row-major or transposed, uniform batch stride) and otherwise first gathers it
into a contiguous device temporary with the elementwise kernels, which also apply the conversions
that ``cubeMathType`` and mixed fp16/fp32 inputs ask for (fp32 → HF32 rounding, fp32 → fp16).
Products accumulate in fp32 and are rounded once to the output's dtype. Temporaries and the BLAS
workspace are stream-ordered allocations; nothing passes through the host.
"""

from __future__ import annotations

import ctypes
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from acl_core.backend import Kernel, Launch
from acl_core.dtypes import DataType as D
from acl_core.errors import AclError, AclErrorCode, RtErrorCode
from acl_core.formats import Format
from acl_core.spec.ops.matmul import matmul_dtype
from acl_core.spec.rules import broadcast_shapes
from acl_core.tensor import AclTensor, contiguous_strides
from acl_rocm.driver import handle
from acl_rocm.kernels import gemv
from acl_rocm.kernels.elementwise import ufunc
from acl_rocm.launch import KernelArgs
from acl_rocm.ops.gemv_config import GEMV_CONFIG_ENV, PRESETS, NkPolicy, policy_for
from acl_rocm.ops.gemv_config import parse as parse_gemv_config
from acl_rocm.pdl import DEFAULT as PDL_DEFAULT
from acl_rocm.pdl import PDL_ENV
from acl_rocm.pdl import setting as pdl_setting
from acl_rocm.providers.base import GemmCall, Matrix
from acl_rocm.views import broadcast_strides, coalesce

LOG = logging.getLogger("acl_rocm.matmul")

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

OPS: tuple[str, ...] = ("BatchMatMul", "Matmul", "Mm")
SCALED_OPS: tuple[str, ...] = ("Addmm", "Baddbmm")
"""out = beta*self + alpha*(m1 @ m2): one GEMM into an fp32 temporary, then :data:`SCALED_ADD` (in-place twins too)."""
SCALED_ADD = ufunc(
    "ScaledAdd",
    "self:T, product:T, beta:T, alpha:T -> out:T",
    "r = alpha * product; if (beta != T(0)) r = r + beta * self;",
)
"""The epilogue of Addmm/Baddbmm; beta == 0 ignores self entirely (NaN/Inf there do not propagate)."""
WORKSPACE_BYTES = 32 << 20
_D_TYPES = {
    D.ACL_FLOAT: {D.ACL_FLOAT},
    D.ACL_FLOAT16: {D.ACL_FLOAT16, D.ACL_FLOAT},
    D.ACL_BF16: {D.ACL_BF16, D.ACL_FLOAT},
}
"""Output dtypes the BLAS writes directly for each operand dtype (fp32 accumulation)."""


GEMV_ENV = "ACL_GEMV"
"""``0`` never takes the GEMV kernel, ``1`` takes it wherever it fits, unset / ``auto``: where it is faster."""
GEMV_AUTO_MIN_WEIGHT = 1 << 18
"""Auto mode: the smallest weight (elements) worth the GEMV kernel; below it either path is launch-bound."""
GEMV_FMA_PER_S = 6.5e12
"""Auto mode's cost model: multiply-adds per second the GEMV kernel sustains once it is compute-bound (its fp32
FMAs; H200, 2026-12-04 decode bench: M = 16 over a 1024 × 151,936 weight in 376 µs)."""
BLAS_FLOOR_S = 25e-6
"""Auto mode's cost model: the BLAS path's fixed cost at small M (H200, same bench: 24–38 µs for weights of 2–3 M
elements, where both paths read the weight in a few µs)."""
WEIGHT_BYTES_PER_S = 3.7e12
"""Auto mode's cost model: the weight-streaming rate both paths reach on a large weight (same bench: 3.7–4.3 TB/s)."""


def gemv_pays(rows: int, k: int, n: int, itemsize: int) -> bool:
    """Auto mode: whether the GEMV kernel is expected to beat the BLAS GEMM for ``rows`` × [K, N].

    Both stream the weight once; the GEMV kernel then does ``rows·K·N`` multiply-adds on CUDA cores, the
    BLAS pays a fixed cost. At M = 1 the GEMV wins everywhere; at M = 8–16 it wins on the layer weights
    of a small model and loses on a vocabulary head (measured 168–376 µs against 83 µs).
    """
    stream = k * n * itemsize / WEIGHT_BYTES_PER_S
    gemv_s = max(stream, rows * k * n / GEMV_FMA_PER_S)
    return gemv_s <= max(BLAS_FLOOR_S, stream)


@dataclass(frozen=True)
class GemvCall:
    """A planned GEMV launch: the loaded kernel, its grid and packed arguments (addresses of this call)."""

    kernel: gemv.GemvKernel
    function: object
    grid: int
    args: KernelArgs
    policy: str = "-"
    """The nk shape policy it was planned with (``auto`` resolved to its preset); ``-`` for the kn layout."""


class BlasView(NamedTuple):
    """How a row-major-logical R×C matrix is handed to a column-major BLAS to mean its transpose."""

    rows: int
    cols: int
    ld: int
    transpose: bool


def blas_view(r: int, c: int, sr: int, sc: int) -> BlasView | None:
    """The column-major description of X^T for X (r×c, strides sr, sc), or None when X must be gathered."""
    if r == 1 and c == 1:
        return BlasView(1, 1, 1, False)
    if (sc == 1 or c == 1) and (r == 1 or sr >= max(c, 1)):
        return BlasView(c, r, sr if r > 1 else c, False)
    if (sr == 1 or r == 1) and (c == 1 or sc >= max(r, 1)):
        return BlasView(r, c, sc if c > 1 else r, True)
    return None


def uniform_batch_stride(batch: Sequence[int], strides: Sequence[int]) -> int | None:
    """The one stride that walks a row-major flattened ``batch`` index, or None when there is none."""
    if math.prod(batch) <= 1:
        return 0
    g = coalesce(batch, [strides])
    return g.strides[0][0] if g.ndim == 1 else None


@dataclass
class _Operand:
    """A batched matrix operand: a view over device memory with full-batch-aligned strides."""

    data: int
    dtype: D
    batch_strides: tuple[int, ...]
    rows: int
    cols: int
    sr: int
    sc: int
    offset: int = 0

    def tensor(self, batch: Sequence[int]) -> AclTensor:
        """The view as an aclTensor of shape (*batch, rows, cols) (strides may be 0 on broadcast dims)."""
        shape = (*batch, self.rows, self.cols)
        strides = (*self.batch_strides, self.sr, self.sc)
        return AclTensor(shape, self.dtype, strides, self.offset, Format.ACL_FORMAT_ND, shape, self.data)

    @property
    def start(self) -> int:
        """Address of the first element."""
        return self.data + self.offset * (self.dtype.info.storage_bits // 8)


def _split(t: AclTensor, vector_as: str) -> tuple[tuple[int, ...], tuple[int, ...], int, int, int, int]:
    """(batch dims, batch strides, rows, cols, row stride, col stride) of a matmul operand (1-D promoted)."""
    if t.rank == 1:
        if vector_as == "row":
            return (), (), 1, t.view_dims[0], 0, t.strides[0]
        return (), (), t.view_dims[0], 1, t.strides[0], 0
    return t.view_dims[:-2], t.strides[:-2], t.view_dims[-2], t.view_dims[-1], t.strides[-2], t.strides[-1]


class MatmulRunner:
    """Turns Matmul / Mm / BatchMatMul Launches into one BLAS call (plus gathers where views need them)."""

    def __init__(self, backend: RocmBackend) -> None:
        self.backend = backend
        self.forced_gemv: str | None = None
        """``on`` / ``off`` / ``auto`` over :data:`GEMV_ENV` for calls planned while set (the decode bench's A/B)."""
        self._policy: tuple[str, NkPolicy] | None = None
        self._pdl: tuple[str, str] | None = None

    def unavailable(self) -> str | None:
        """None when the provider's GEMM works here, else why not."""
        return self.backend.provider.gemm_unavailable()

    def kernels(self) -> dict[str, Kernel]:
        """A kernel per op, or none when the BLAS library is missing."""
        if self.unavailable() is not None:
            return {}
        return {**{name: self.run for name in OPS}, **{name: self.run_scaled for name in SCALED_OPS}}

    def run(self, launch: Launch) -> None:
        """Enqueue ``out = self @ mat2`` on the launch's stream (gathering every operand if the BLAS refuses a view)."""
        try:
            self._run(launch, dense=False)
        except AclError as exc:
            if exc.code != RtErrorCode.ACL_ERROR_RT_FEATURE_NOT_SUPPORT:
                raise
            self._run(launch, dense=True)

    def run_scaled(self, launch: Launch) -> None:
        """Enqueue ``out = beta*self + alpha*(m1 @ m2)`` (Addmm, Baddbmm and their in-place twins)."""
        args, plan = launch.args, launch.plan
        m1, m2 = ("mat1", "mat2") if "mat1" in args else ("batch1", "batch2")
        s, a, b, out = args["self"], args[m1], args[m2], args["out"]
        assert isinstance(s, AclTensor) and isinstance(a, AclTensor)
        assert isinstance(b, AclTensor) and isinstance(out, AclTensor)
        if out.numel == 0:
            return
        stream = handle(launch.stream)
        provider = self.backend.provider
        shape = tuple(out.view_dims)
        address = provider.malloc_async(math.prod(shape) * 4, stream)
        try:
            product = AclTensor(shape, D.ACL_FLOAT, contiguous_strides(shape), 0, Format.ACL_FORMAT_ND, shape, address)
            gemm_plan = {"compute": matmul_dtype(a.dtype, b.dtype, (m1, m2)), "precision": plan.get("precision")}
            self.run(Launch(launch.spec, {"self": a, "mat2": b, "out": product}, gemm_plan, 0, 0, launch.stream))
            compute: D = plan["compute"]
            tokens: dict[str, D | None] = {"T": compute, "F": compute, "B": D.ACL_BOOL, "O": out.dtype}
            ew = self.backend.elementwise
            planned = ew.instantiate(
                "ScaledAdd",
                SCALED_ADD,
                tokens,
                [("self", s), ("product", product), ("out", out)],
                [("beta", args["beta"]), ("alpha", args["alpha"])],
            )
            ew.enqueue(planned, stream)
        finally:
            provider.free_async(address, stream)

    def _run(self, launch: Launch, dense: bool) -> None:
        stream = handle(launch.stream)
        provider = self.backend.provider
        key = f"rocm.matmul@{provider.get_device()}"
        if not dense and isinstance(launch.memo.get(key), GemmCall):
            self._gemm(launch.memo[key], stream)  # a repeated signature: one BLAS call straight on its operands
            return
        if not dense and isinstance(launch.memo.get(key), GemvCall):
            self._gemv_launch(launch.memo[key], stream)
            return
        if not dense:
            found = self._gemv(launch)
            if found is not None:
                launch.memo[key] = found
                self._gemv_launch(found, stream)
                return
        call = self._plan(launch, dense, stream)
        if not dense:
            launch.memo[key] = call  # None: temporaries or nothing to do, planned again per call

    def _gemm(self, call: GemmCall, stream: int) -> None:
        """One GEMM with its BLAS workspace, a stream-ordered temporary of this call only."""
        provider = self.backend.provider
        workspace = provider.malloc_async(WORKSPACE_BYTES, stream)
        try:
            provider.gemm(call, workspace, WORKSPACE_BYTES, stream)
        finally:
            provider.free_async(workspace, stream)

    def _plan(self, launch: Launch, dense: bool, stream: int) -> GemmCall | None:
        """Enqueue the call's gathers, GEMM and conversion; the GemmCall when it ran on the operands directly."""
        args, plan = launch.args, launch.plan
        a, b, out = args["self"], args["mat2"], args["out"]
        assert isinstance(a, AclTensor) and isinstance(b, AclTensor) and isinstance(out, AclTensor)
        if out.numel == 0:
            return None
        ew = self.backend.elementwise
        a_batch, a_bs, m, k, a_sr, a_sc = _split(a, "row")
        b_batch, b_bs, k2, n, b_sr, b_sc = _split(b, "col")
        assert k == k2
        batch = broadcast_shapes(a_batch, b_batch)
        out_strides = list(out.strides)
        o_bs = tuple(out_strides[: len(batch)])
        tail = out_strides[len(batch) :]
        o_sr = tail.pop(0) if a.rank > 1 else 0
        o_sc = tail.pop(0) if b.rank > 1 else 0
        d_view = _Operand(out.data, out.dtype, o_bs, m, n, o_sr, o_sc, out.offset)
        if k == 0:
            ew.zero(out, stream)
            return None
        compute: D = plan["compute"]
        precision = plan.get("precision")
        gdt = D.ACL_FLOAT16 if precision == "fp16" else compute
        rounding = "RoundHf32" if precision == "hf32" else None
        temps: list[int] = []
        provider = self.backend.provider
        try:
            ops = [
                _Operand(a.data, a.dtype, broadcast_strides(a_batch, a_bs, batch), m, k, a_sr, a_sc, a.offset),
                _Operand(b.data, b.dtype, broadcast_strides(b_batch, b_bs, batch), k, n, b_sr, b_sc, b.offset),
            ]
            for i, op in enumerate(ops):
                if dense or not self._gemm_ready(op, batch, gdt, rounding):
                    ops[i] = self._gather(op, batch, gdt, rounding, stream, temps)
            count = math.prod(batch)
            out_view = blas_view(m, n, o_sr, o_sc)
            d_stride = uniform_batch_stride(batch, o_bs)
            target = d_view
            if dense or out.dtype not in _D_TYPES[gdt] or out_view is None or out_view.transpose or d_stride is None:
                dt = gdt if out.dtype == gdt else D.ACL_FLOAT
                address = provider.malloc_async(max(count * m * n, 1) * (dt.info.storage_bits // 8), stream)
                temps.append(address)
                target = _Operand(address, dt, contiguous_strides((*batch, m * n))[:-1], m, n, n, 1)
                d_stride = m * n if count > 1 else 0
            strides = [uniform_batch_stride(batch, op.batch_strides) for op in ops]
            m_eff, count_eff = m, count
            if count > 1 and strides[1] == 0 and _folds(ops[0], strides[0], m) and _folds(target, d_stride, m):
                m_eff, count_eff = m * count, 1  # a broadcast weight: one taller GEMM instead of a batch
            elif count > 1:
                for i, op in enumerate(ops):
                    if strides[i] == 0:  # a broadcast operand is repeated along the batch
                        ops[i] = self._gather(op, batch, gdt, None, stream, temps)
                        strides[i] = op.rows * op.cols
            a_op, b_op = ops
            a_stride, b_stride = strides
            assert a_stride is not None and b_stride is not None and d_stride is not None
            av = blas_view(m_eff, k, a_op.sr, a_op.sc)
            bv = blas_view(k, n, b_op.sr, b_op.sc)
            dv = blas_view(m_eff, n, target.sr, target.sc)
            assert av is not None and bv is not None and dv is not None and not dv.transpose
            call = GemmCall(
                a=Matrix(b_op.start, int(b_op.dtype), bv.rows, bv.cols, bv.ld, b_stride, bv.transpose),
                b=Matrix(a_op.start, int(a_op.dtype), av.rows, av.cols, av.ld, a_stride, av.transpose),
                d=Matrix(target.start, int(target.dtype), dv.rows, dv.cols, dv.ld, d_stride),
                batch=count_eff,
                fast_tf32=self.backend.policy.tf32_enabled and gdt == D.ACL_FLOAT and precision is None,
            )
            if LOG.isEnabledFor(logging.DEBUG):  # once per plan: a repeated signature reuses its GemmCall
                tf32 = ", TF32 (CANN_FAST_TF32=1)" if call.fast_tf32 else ""
                LOG.debug(
                    "%s: BLAS GEMM %s m=%d k=%d n=%d batch=%d%s",
                    launch.spec.name,
                    gdt.short,
                    m_eff,
                    k,
                    n,
                    count_eff,
                    tf32,
                )
            direct = not temps and target is d_view  # only then is the call a pure function of the signature
            self._gemm(call, stream)
            if target is not d_view:
                ew.convert(target.tensor(batch), d_view.tensor(batch), stream)
            return call if direct else None
        finally:
            for address in temps:
                provider.free_async(address, stream)

    def gemv_mode(self) -> str:
        """``off``, ``on`` or ``auto``: the :data:`GEMV_ENV` switch of this backend."""
        value = self.forced_gemv or self.backend.environ.get(GEMV_ENV, "auto").strip().lower()
        return {"0": "off", "off": "off", "1": "on", "on": "on"}.get(value, "auto")

    def gemv_policy(self) -> NkPolicy:
        """The nk GEMV kernel's shape policy (:data:`GEMV_CONFIG_ENV`); a bad setting raises ACL_ERROR_INVALID_PARAM."""
        setting = self.backend.environ.get(GEMV_CONFIG_ENV, "")
        if self._policy is None or self._policy[0] != setting:
            try:
                self._policy = (setting, parse_gemv_config(setting))
            except ValueError as exc:
                raise AclError(AclErrorCode.ACL_ERROR_INVALID_PARAM, f"{GEMV_CONFIG_ENV}={setting!r}: {exc}") from None
        return self._policy[1]

    def pdl_mode(self) -> str:
        """The GEMV kernels' programmatic dependent launch (``ACL_PDL``, :mod:`acl_rocm.pdl`): ``""``, ``l2``, ``regs``.

        Asked for where the provider has none (HIP, before sm_90), it is off, and the debug log says why;
        a value it does not know raises ACL_ERROR_INVALID_PARAM.
        """
        setting = self.backend.environ.get(PDL_ENV, PDL_DEFAULT)
        if self._pdl is None or self._pdl[0] != setting:
            try:
                mode = pdl_setting(self.backend.environ)
            except ValueError as exc:
                raise AclError(AclErrorCode.ACL_ERROR_INVALID_PARAM, str(exc)) from None
            why = self.backend.provider.programmatic_unavailable() if mode else None
            if why is not None:
                LOG.debug("%s=%s: GEMV kernels launch plainly: %s", PDL_ENV, setting, why)
                mode = ""
            self._pdl = (setting, mode)
        return self._pdl[1]

    def _gemv(self, launch: Launch) -> GemvCall | None:
        """The GEMV kernel's launch for this call when it fits and the switch allows it, else None."""
        mode = self.gemv_mode()
        if mode == "off":
            return None
        policy = self.gemv_policy()
        props = self.backend.properties
        plan = gemv_plan(launch, props.warp_size, props.compute_units, policy, pdl=self.pdl_mode())
        if plan is None:
            return None
        kernel, grid, values, (k, n), chosen = plan
        weight = k * n
        if mode == "auto" and (
            weight < GEMV_AUTO_MIN_WEIGHT or not gemv_pays(kernel.rows, k, n, kernel.dtype.info.storage_bits // 8)
        ):
            return None
        function = self.backend.function(gemv.generate(kernel), kernel.kernel_name)
        if LOG.isEnabledFor(logging.DEBUG):
            LOG.debug(
                "%s: GEMV kernel %s %s m=%d k=%d n=%d vec=%d tile=%d groups=%d ksplit=%d unroll=%d grid=%d block=%d "
                "loads=%s persist=%s pdl=%s (%s=%s, %s=%s)",
                launch.spec.name,
                kernel.layout,
                kernel.dtype.short,
                kernel.rows,
                k,
                n,
                kernel.vec,
                kernel.tile,
                kernel.groups,
                kernel.ksplit,
                kernel.unroll,
                grid,
                kernel.block,
                kernel.loads,
                kernel.persist,
                kernel.pdl or "off",
                GEMV_ENV,
                mode,
                GEMV_CONFIG_ENV,
                f"{policy.name}->{chosen}" if policy.name != chosen else chosen,
            )
        return GemvCall(kernel, function, grid, KernelArgs(values), chosen)

    def _gemv_launch(self, call: GemvCall, stream: int) -> None:
        block = (call.kernel.block, 1, 1)
        provider = self.backend.provider
        launch = provider.launch_programmatic if call.kernel.pdl else provider.launch  # only kernels that wait
        launch(call.function, (call.grid, 1, 1), block, 0, stream, call.args.address)

    def _gemm_ready(self, op: _Operand, batch: Sequence[int], gdt: D, rounding: str | None) -> bool:
        if op.dtype != gdt or rounding is not None:
            return False
        if blas_view(op.rows, op.cols, op.sr, op.sc) is None:
            return False
        return uniform_batch_stride(batch, op.batch_strides) is not None

    def _gather(
        self, op: _Operand, batch: Sequence[int], gdt: D, rounding: str | None, stream: int, temps: list[int]
    ) -> _Operand:
        count = math.prod(batch)
        address = self.backend.provider.malloc_async(
            max(count * op.rows * op.cols, 1) * (gdt.info.storage_bits // 8), stream
        )
        temps.append(address)
        dense = _Operand(
            address, gdt, contiguous_strides((*batch, op.rows * op.cols))[:-1], op.rows, op.cols, op.cols, 1
        )
        self.backend.elementwise.convert(op.tensor(batch), dense.tensor(batch), stream, rounding or "Cast")
        return dense


def _vec(size: int, extents: Sequence[int], addresses: Sequence[int]) -> int:
    """The widest vector (elements, at most 16 bytes) dividing every extent / stride and aligning every address."""
    vec = 16 // size
    while vec > 1 and not (all(e % vec == 0 for e in extents) and all(a % (vec * size) == 0 for a in addresses)):
        vec //= 2
    return vec


def gemv_plan(
    launch: Launch, warp: int, units: int, policy: NkPolicy = PRESETS["legacy"], pdl: str = ""
) -> tuple[gemv.GemvKernel, int, list[object], tuple[int, int], str] | None:
    """(kernel, grid, argument values, (K, N), the nk policy's name or ``-``) of the GEMV path for a
    Matmul/Mm/BatchMatMul call, or None when it does not fit: fp16/bf16 operands of one dtype computed in it,
    an fp32 or same-dtype output, at most :data:`gemv.MAX_ROWS` rows (a batch only where the weight is broadcast
    and the batch continues the rows), activation rows K-contiguous, and a weight with K or N contiguous.
    ``policy`` ``auto`` resolves per (M, N, K) (:func:`policy_for`); ``pdl``: the kernel's PDL mode."""
    args, plan = launch.args, launch.plan
    a, b, out = args["self"], args["mat2"], args["out"]
    assert isinstance(a, AclTensor) and isinstance(b, AclTensor) and isinstance(out, AclTensor)
    dtype = a.dtype
    if dtype not in gemv.INPUTS or b.dtype != dtype or out.dtype not in (dtype, D.ACL_FLOAT) or out.numel == 0:
        return None
    if plan["compute"] != dtype or plan.get("precision") not in (None, "fp16"):
        return None
    a_batch, a_bs, m, k, a_sr, a_sc = _split(a, "row")
    b_batch, b_bs, _, n, b_sr, b_sc = _split(b, "col")
    if k == 0:
        return None
    batch = broadcast_shapes(a_batch, b_batch)
    count = math.prod(batch)
    out_strides = list(out.strides)
    o_bs = tuple(out_strides[: len(batch)])
    tail = out_strides[len(batch) :]
    o_sr = tail.pop(0) if a.rank > 1 else 0
    o_sc = tail.pop(0) if b.rank > 1 else 0
    lda, ldo = a_sr, o_sr
    if count > 1:  # the batch folds into rows only over one broadcast weight
        if any(s for s, d in zip(broadcast_strides(b_batch, b_bs, batch), batch) if d > 1):
            return None
        sa = uniform_batch_stride(batch, broadcast_strides(a_batch, a_bs, batch))
        so = uniform_batch_stride(batch, o_bs)
        if sa is None or so is None or (m > 1 and (sa != m * a_sr or so != m * o_sr)):
            return None
        lda, ldo = (sa, so) if m == 1 else (a_sr, o_sr)
    rows = m * count
    if rows > gemv.MAX_ROWS or (a_sc != 1 and k > 1):
        return None
    size = dtype.info.storage_bits // 8
    a_at = a.data + a.offset * size
    w_at = b.data + b.offset * size
    o_at = out.data + out.offset * (out.dtype.info.storage_bits // 8)
    a_extents = [lda] if rows > 1 else []
    if b_sr == 1 or k == 1:
        ldw = b_sc
        vec = _vec(size, [k, *a_extents, *([ldw] if n > 1 else [])], [a_at, w_at])
        policy = policy_for(policy, rows, n, k)
        chosen = policy.name
        tile, ksplit, unroll = nk_shape(rows, k, n, vec, warp, units, policy)
        kernel = gemv.GemvKernel(
            "nk",
            dtype,
            out.dtype,
            rows,
            vec,
            tile=tile,
            ksplit=ksplit,
            unroll=unroll,
            block=policy.block,
            loads=policy.loads,
            persist=policy.persist > 0 or policy.grid > 0,
            pdl=pdl,
        )
        grid = nk_grid(tile, ksplit, n, warp, units, policy)
    elif b_sc == 1 or n == 1:
        ldw = b_sr
        vec = min(_vec(size, [n, *([ldw] if k > 1 else [])], [w_at]), 4 if rows > 8 else 8)
        groups, unroll = kn_shape(rows, k, n, vec, size, warp, units)
        kernel = gemv.GemvKernel("kn", dtype, out.dtype, rows, vec, groups=groups, unroll=unroll, pdl=pdl)
        grid = -(-n // (vec * groups))
        chosen = "-"
    else:
        return None
    c = ctypes.c_longlong
    values: list[object] = [
        KernelArgs.pointer(a_at),
        KernelArgs.pointer(w_at),
        KernelArgs.pointer(o_at),
        c(k),
        c(n),
        c(lda),
        c(ldw),
        c(ldo),
        c(o_sc),
    ]
    return kernel, grid, values, (k, n), chosen


GEMV_WARPS_PER_UNIT = 32
"""The nk kernel's target of resident warps per compute unit: enough 16-byte loads in flight to cover HBM latency."""
GEMV_MAX_UNROLL = 4
"""The most weight loads per lane and output the nk kernel issues before using the first."""


def nk_shape(
    rows: int, k: int, n: int, vec: int, warp: int, units: int, policy: NkPolicy = PRESETS["legacy"]
) -> tuple[int, int, int]:
    """(tile, ksplit, unroll) of the nk GEMV kernel for ``rows`` × weight [N, K] loaded ``vec`` elements at a time.

    A warp owns ``tile`` outputs (legacy rule: two from M = 2, so each activation element read and decoded
    serves two outputs; four would spill registers at M = 16 under nvcc 13 for sm_90); when the output
    tiles alone give the device fewer than ``policy.warps`` (:data:`GEMV_WARPS_PER_UNIT`) warps per compute
    unit, up to a block's warps share a tile and split K (never so far that a warp would have no chunk);
    each lane then issues up to ``unroll`` 16-byte weight loads per output before it uses the first, so
    the weight is read with most of it in flight at once.
    """
    chunks = -(-k // vec)
    budget = policy.budget_for(rows)  # 16-byte weight registers a lane holds: more rows, more accumulators
    per_block = max(1, policy.block // warp)
    tile = policy.tile or (2 if rows > 1 or -(-n // (2 * per_block)) >= 2 * units else 1)
    tiles = -(-n // tile)
    ksplit = 1
    while ksplit * 2 <= per_block and tiles * ksplit < units * policy.warps and ksplit * 2 * warp <= chunks:
        ksplit *= 2
    unroll = max(1, min(policy.unroll, budget // tile, -(-chunks // (ksplit * warp))))
    return tile, ksplit, unroll


def nk_grid(tile: int, ksplit: int, n: int, warp: int, units: int, policy: NkPolicy) -> int:
    """Blocks of the nk kernel: one per group of output tiles, or fewer where the policy caps the grid."""
    tiles = -(-n // tile)
    groups = -(-tiles // max(1, policy.block // warp // ksplit))
    if policy.persist:
        groups = min(groups, max(1, units * policy.persist))
    if policy.grid:
        groups = min(groups, max(1, policy.grid))
    return groups


GEMV_KN_SHARED_FLOATS = 1536
"""The kn kernel's bound on column groups × rows × vec (its shared memory: that many floats per 32-lane warp)."""


def kn_shape(rows: int, k: int, n: int, vec: int, size: int, warp: int, units: int) -> tuple[int, int]:
    """(groups, unroll) of the kn GEMV kernel for ``rows`` × weight [K, N] loaded ``vec`` elements at a time.

    A block owns ``groups`` column groups and splits K over its 256 threads' ``256 / groups`` rows: the
    fewest groups whose row segment fills a 32-byte sector, so a small N still spreads over many blocks
    (N = 1024: 64 blocks of 128 K splits, where 4-group blocks made 32); more groups only while the grid
    stays above 16 blocks per compute unit. Each thread issues up to ``unroll`` weight rows before use.
    """
    count = rows * vec
    groups = min(warp, max(1, 32 // (vec * size)))
    blocks = -(-n // (vec * groups))
    while groups * 2 <= warp and groups * 2 * count <= GEMV_KN_SHARED_FLOATS and blocks >= 32 * units:
        groups *= 2
        blocks = -(-n // (vec * groups))
    cap = 8 if count <= 8 else 4 if count <= 32 else 2  # weight registers beside rows × vec accumulators
    unroll = max(1, min(cap, -(-k // (gemv.GEMV_BLOCK // groups))))
    return groups, unroll


def _folds(op: _Operand, batch_stride: int | None, m: int) -> bool:
    """True when the batch of a row-major operand continues its rows (batch stride = m * row stride)."""
    return batch_stride is not None and op.sc == 1 and batch_stride == m * op.sr and op.sr >= op.cols


RUNNER = MatmulRunner

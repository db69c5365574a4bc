"""GroupedMatmulV5 on the GPU (float paths and MX): one grouped GEMM kernel over a device descriptor table.

The host describes every group it can (addresses, strides, host-known sizes) and fills a descriptor
table on the device through kernel arguments; a one-thread pass reads ``groupListOptional`` where the
groups come from it, checks it and numbers the output tiles; one tiled GEMM launch (fp32
accumulation, bias and one rounding in its epilogue) then computes every group
(:mod:`acl_rocm.kernels.grouped_matmul`). fp16 / bf16 operands (MX ones after decoding) take the
matrix-instruction kernel (:mod:`acl_rocm.kernels.grouped_matmul_mma`, path ``mma``), and so does the
grouped quantised ops' INT8 GEMM (exact INT32) where the matrix layer has an int8 instruction (NVIDIA
sm_80+); fp32 and INT8 elsewhere take the shared-memory SIMT kernel (path ``simt``), as every call does
with ``ACL_GMM_KERNEL=simt``. The path is reported on the debug logger ``acl_rocm.grouped_matmul`` and
in the runner's ``last_path``. A bad group list sets a device flag: nothing is written and
the driver raises 161002 when the stream is synchronised, as the movement family's index checks do.
Which paths exist (groupType -1, 0, 2; groupListType 0, 1; actType 0; of the quantised modes only MX
with M-axis groups) is decided by the spec, which refuses the others with 161002 before anything is
enqueued. MX operands are first decoded to bfloat16 with their block scales applied, by the quantised
matmuls' operand kernel (:meth:`QuantMatmulRunner.enqueue_operand`); the same grouped GEMM then runs
on them with its output in the caller's dtype. A repeated GroupedMatmulV5 call (one signature: the same addresses)
launches what its first call built (:meth:`GroupedMatmulRunner.repeatable`): a fresh table and check flag per call,
nothing planned, looked up or packed again.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TypeAlias

from acl_core.backend import Kernel, Launch
from acl_core.dtypes import DataType as D
from acl_core.errors import AclError, AclErrorCode
from acl_core.formats import Format
from acl_core.spec.ops.matmul import gmm_weight_transposed
from acl_core.tensor import AclTensor, contiguous_strides
from acl_rocm.driver import handle
from acl_rocm.kernels.grouped_matmul import (
    FIELDS,
    FILL_GROUPS,
    MODE_CHECK,
    MODE_HOST,
    MODE_K,
    MODE_M,
    TILE_M,
    TILE_N,
    GmmFill,
    GmmKernel,
    GmmPrep,
)
from acl_rocm.kernels.grouped_matmul_blaslt import GmmBlaslt
from acl_rocm.kernels.grouped_matmul_mma import ALTERNATIVES as MMA_ALTERNATIVES
from acl_rocm.kernels.grouped_matmul_mma import BASE as MMA_BASE
from acl_rocm.kernels.grouped_matmul_mma import BIAS_DTYPES as MMA_BIAS
from acl_rocm.kernels.grouped_matmul_mma import DEFAULT as MMA_DEFAULT
from acl_rocm.kernels.grouped_matmul_mma import DTYPES as MMA_DTYPES
from acl_rocm.kernels.grouped_matmul_mma import OUT_DTYPES as MMA_OUT
from acl_rocm.kernels.grouped_matmul_mma import GmmConfig, GmmMmaKernel, int8_fits, parse_config
from acl_rocm.kernels.grouped_matmul_wgmma import ALTERNATIVES as WGMMA_ALTERNATIVES
from acl_rocm.kernels.grouped_matmul_wgmma import DEFAULT as WGMMA_DEFAULT
from acl_rocm.kernels.grouped_matmul_wgmma import GmmWgmmaKernel, WgGmmConfig
from acl_rocm.kernels.grouped_matmul_wgmma import parse_config as parse_wgmma_config
from acl_rocm.kernels.grouped_matmul_wgmma import refusal as wgmma_refusal
from acl_rocm.kernels.mma import hardware_layout
from acl_rocm.launch import KernelArgs, LaunchConfig
from acl_rocm.ops import grouped_matmul_blaslt as blaslt
from acl_rocm.ops.binding import family_key, memo_plan
from acl_rocm.ops.elementwise import Prepared
from acl_rocm.ops.program import FLAG, Program, Step, Temp, run_program
from acl_rocm.ops.quant_matmul import k_operand, mx_scale_strides
from acl_rocm.views import coalesce

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

LOG = logging.getLogger("acl_rocm.grouped_matmul")
GMM_ENV = "ACL_GMM_KERNEL"
"""``simt`` keeps every grouped GEMM on the shared-memory SIMT kernel; unset (auto): fp16 / bf16 operands take the
warpgroup-MMA kernel on sm_90 (:data:`AUTO_WGMMA`) and the matrix-instruction kernel elsewhere where the architecture
has matrix instructions, INT8 (into INT32) where it has the layer's int8 one (NVIDIA sm_80+) while
:data:`INT8_AUTO_MMA` is on; ``mma``: the matrix-instruction kernel wherever it fits (the layer's software path
elsewhere); ``wgmma``: fp16 / bf16 operands on the warpgroup-MMA kernel
(:mod:`acl_rocm.kernels.grouped_matmul_wgmma`, sm_90 only), other calls and other devices as ``auto`` would, the
reason on the debug log and in ``last_refusal``; ``blaslt``: M-axis groups of a device list (fp16 / bf16, no bias)
through the provider's library grouped GEMM (cuBLASLt's device-sized one, :mod:`acl_rocm.ops.grouped_matmul_blaslt`;
opt-in until a GPU run has proven and timed it), other calls as ``auto`` would, the reason on the debug log and in
``last_refusal``."""
INT8_AUTO_MMA = True
"""Whether ``auto`` takes the int8 matrix kernel (NVIDIA m16n8k32). On since its GPU tier and `conformance rocm
--full` of the grouped int8 ops passed on an H100 (2026-12-07 03:32), where GroupedMatmulSwigluQuantV2's layer ran in
0.12x torch's time against the SIMT kernel's 1.51x (results/RESULTS.md); ``ACL_GMM_KERNEL=simt`` keeps the SIMT
kernel."""
AUTO_WGMMA = True
"""Whether ``auto`` takes the warpgroup-MMA kernel for fp16 / bf16 operands where it runs (sm_90). On since it was
faster than the mma.sync kernel in every row of two H100 runs (2026-12-07 08:38 and 17:38, results/RESULTS.md: 173 /
329 TFLOP/s at 16k / 32k rows against 163 / 226) after its GPU tier passed there (08:38); under this default
`conformance rocm --full --ops 'GroupedMatmul*'` passed on an H100 (19:09: 709 cases, 0 failed).
``ACL_GMM_KERNEL=mma`` keeps the mma.sync kernel."""
CONFIG_ENV = "ACL_GMM_CONFIG"
"""The matrix-instruction kernel's block shape: a name of :data:`~acl_rocm.kernels.grouped_matmul_mma.CONFIGS` or
``BMxBNxBK-wMxN-sS``; unset: :data:`~acl_rocm.kernels.grouped_matmul_mma.DEFAULT` (``base`` where the device's
shared memory is too small for it); an invalid setting fails the call (ACL_ERROR_INVALID_PARAM)."""
WGMMA_CONFIG_ENV = "ACL_GMM_WGMMA_CONFIG"
"""The warpgroup-MMA kernel's block shape under ``ACL_GMM_KERNEL=wgmma``:
``128x<bn>-s<stages>[-b<blocks>][-p][-m][-d][-sw]`` (:func:`~acl_rocm.kernels.grouped_matmul_wgmma.parse_config`);
unset: :data:`~acl_rocm.kernels.grouped_matmul_wgmma.DEFAULT`; an invalid setting fails the call
(ACL_ERROR_INVALID_PARAM)."""


V5_MESSAGE: Final = "GroupedMatmulV5: groupListOptional is inconsistent with the grouped axis"
"""The 161002 message of a GroupedMatmulV5 call whose device group list the group-list pass refused."""
_FILL: Final = GmmFill()
_Call: TypeAlias = tuple[Any, LaunchConfig, list[Any]]
"""One launch of a call: (kernel, configuration, argument values)."""


@functools.cache
def _prep_kernel(tile_m: int, tile_n: int) -> GmmPrep:
    """The group-list pass numbering ``tile_m`` × ``tile_n`` tiles (one instance: its name is hashed once)."""
    return GmmPrep(tile_m, tile_n)


@dataclass(frozen=True)
class _Repeat:
    """A GroupedMatmulV5 signature's launches, built once (:meth:`GroupedMatmulRunner.repeatable`)."""

    program: Program | None
    """The fills, the group-list pass and the GEMM over a per-run table (None: no groups, nothing launched)."""
    gemm: GroupedGemm
    groups: int
    grid: int
    refusal: str | None
    """The forced kernel's refusal when it was built (``last_refusal`` of every call that forces it)."""
    forced: bool = False
    """Whether the kernel switch forced a kernel (``wgmma``) whose refusal a call reports."""


def _itemsize(dtype: D) -> int:
    return dtype.info.storage_bits // 8


def _address(t: AclTensor, *index: int) -> int:
    """Byte address of element ``index`` (leading dimensions) of the view ``t``."""
    offset = t.offset + sum(i * s for i, s in zip(index, t.strides))
    return t.data + offset * _itemsize(t.dtype)


def tiles(rows: int, cols: int, tile_m: int = TILE_M, tile_n: int = TILE_N) -> int:
    """Output tiles of one rows × cols product (``tile_m`` × ``tile_n`` tiles)."""
    return -(-rows // tile_m) * -(-cols // tile_n)


GroupedGemm: TypeAlias = GmmKernel | GmmMmaKernel | GmmWgmmaKernel
"""The grouped GEMM kernels :meth:`GroupedMatmulRunner.execute` launches."""


@dataclass
class GroupPlan:
    """What one call launches: descriptor rows, the group-list mode and the grid's upper bound."""

    rows: list[dict[str, int]] = field(default_factory=list)
    mode: int = MODE_HOST
    axis: int = 0
    products: list[tuple[int, int, int]] = field(default_factory=list)
    """(rows, columns, groups): output blocks whose tile count bounds the grid; ``groups`` > 0 when the rows are
    cut among that many groups by the device group list (each group can add one partial row tile)."""
    copies: list[tuple[AclTensor, AclTensor]] = field(default_factory=list)
    """(temporary, destination) pairs copied after the GEMM (outputs whose rows have no single stride)."""

    def table(self) -> list[list[int]]:
        """The descriptor rows as int lists in :data:`FIELDS` order."""
        return [[row.get(name, 0) for name in FIELDS] for row in self.rows]

    def grid(self, tile_m: int, tile_n: int) -> int:
        """An upper bound of the output tiles (of ``tile_m`` × ``tile_n``) the device numbers: the GEMM's grid."""
        return sum((-(-r // tile_m) + g) * -(-c // tile_n) for r, c, g in self.products)


def _members(value: Any) -> tuple[AclTensor, ...]:
    return value if isinstance(value, tuple) else ()


def _row(x: int, w: int, out: int, bias: AclTensor | None, bias_index: Sequence[int], **rest: int) -> dict[str, int]:
    row = {"X": x, "W": w, "OUT": out, **rest}
    if bias is not None:
        row["BIAS"] = _address(bias, *bias_index)
        row["BSN"] = bias.strides[-1]
    return row


class GroupedMatmulRunner:
    """Turns GroupedMatmulV5 Launches into descriptor fills, the group-list pass and one grouped GEMM."""

    def __init__(self, backend: RocmBackend) -> None:
        self.backend = backend
        self.forced_kernel: str | None = None
        """``blaslt`` / ``wgmma`` / ``mma`` / ``simt`` / ``auto`` over :data:`GMM_ENV` for calls made while set (the
        bench's A/B)."""
        self.last_path: str | None = None
        """The grouped GEMM the last call ran: ``blaslt`` (the library's), ``wgmma`` (warpgroup MMA), ``mma`` (warp MMA)
        or ``simt``."""
        self.forced_config: str | None = None
        """A :data:`CONFIG_ENV` setting over the environment's for calls made while set (the bench's rows)."""
        self.last_config: str | None = None
        """The matrix-instruction kernel's configuration the last ``mma`` call launched."""
        self._fallback_logged: int | None = None
        """The shared-memory limit the default's fallback to the base configuration was last logged for."""
        self.forced_wgmma_config: str | None = None
        """A :data:`WGMMA_CONFIG_ENV` setting over the environment's for calls made while set (the bench's rows)."""
        self.last_refusal: str | None = None
        """Why the last call under ``ACL_GMM_KERNEL=wgmma`` / ``blaslt`` did not take that path (None: it did)."""

    def config(self) -> GmmConfig:
        """The matrix-instruction kernel's configuration (:data:`CONFIG_ENV`, or :attr:`forced_config`)."""
        setting = self.forced_config or self.backend.environ.get(CONFIG_ENV, "")
        if not setting.strip():
            limit = self.backend.properties.max_shared_memory
            if MMA_DEFAULT.shared_bytes <= limit:
                return MMA_DEFAULT
            if self._fallback_logged != limit:
                self._fallback_logged = limit
                LOG.debug(
                    "grouped GEMM: the default configuration %s needs %d B of shared memory, the device allows %d:"
                    " the base configuration instead",
                    MMA_DEFAULT,
                    MMA_DEFAULT.shared_bytes,
                    limit,
                )
            return MMA_BASE
        try:
            return parse_config(setting)
        except ValueError as exc:
            raise AclError(AclErrorCode.ACL_ERROR_INVALID_PARAM, f"{CONFIG_ENV}={setting!r}: {exc}") from None

    def default(self) -> str:
        """The configuration's name calls run without :data:`CONFIG_ENV` where the device's shared memory allows it."""
        return str(MMA_DEFAULT)

    def alternatives(self) -> tuple[str, ...]:
        """Configurations worth timing beside the default (the ops bench's extra GroupedMatmulV5 rows)."""
        return MMA_ALTERNATIVES

    def kernel_mode(self) -> str:
        """``mma``, ``simt``, ``wgmma``, ``blaslt`` or ``auto``: the :data:`GMM_ENV` switch of this backend."""
        value = self.forced_kernel or self.backend.environ.get(GMM_ENV, "auto").strip().lower()
        return value if value in ("mma", "simt", "wgmma", "blaslt") else "auto"

    def blaslt_unavailable(self) -> str | None:
        """Why the library's grouped GEMM cannot run on this backend's provider and device (None where it can)."""
        return self.backend.provider.grouped_gemm_unavailable()

    def _blaslt(
        self, p: GroupPlan, gemm: GroupedGemm, table: int, flag: int, temps: list[int], stream: int
    ) -> GmmBlaslt | None:
        """Enqueue the library's grouped GEMM for ``p`` (its report stand-in), or None, the reason logged and kept."""
        why = blaslt.refusal(p, gemm, self.blaslt_unavailable())
        if why is None:
            why = blaslt.enqueue(self, p, gemm, table, flag, temps, stream)
        if why is None:
            self.last_refusal = None
            return blaslt.report_gemm(gemm)
        if why != self.last_refusal:
            LOG.debug("grouped GEMM: %s=blaslt refused: %s; the kernel auto picks runs", GMM_ENV, why)
        self.last_refusal = why
        return None

    def wgmma_config(self) -> WgGmmConfig:
        """The warpgroup-MMA kernel's configuration (:data:`WGMMA_CONFIG_ENV`, or :attr:`forced_wgmma_config`)."""
        setting = self.forced_wgmma_config or self.backend.environ.get(WGMMA_CONFIG_ENV, "")
        if not setting.strip():
            return WGMMA_DEFAULT
        try:
            return parse_wgmma_config(setting)
        except ValueError as exc:
            raise AclError(AclErrorCode.ACL_ERROR_INVALID_PARAM, f"{WGMMA_CONFIG_ENV}={setting!r}: {exc}") from None

    def wgmma_alternatives(self) -> tuple[str, ...]:
        """The wgmma kernel's configurations worth timing (the default first), none where it cannot run here."""
        if self.wgmma_unavailable() is not None:
            return ()
        return (str(WGMMA_DEFAULT), *WGMMA_ALTERNATIVES)

    def wgmma_unavailable(self, operands: D = D.ACL_BF16, out: D = D.ACL_BF16, bias: D | None = None) -> str | None:
        """Why the wgmma kernel cannot run these dtypes on this device (None where it can)."""
        arch = self.backend.properties.arch
        return wgmma_refusal(operands, out, bias, arch, self.backend.provider.arch_specific(arch))

    def _wgmma(self, operands: D, bias: D | None, out: D, forced: bool = True) -> GmmWgmmaKernel | None:
        """The wgmma kernel for this call, or None; where the switch forced it (``forced``), the reason logged (once a
        reason) and kept."""
        why = self.wgmma_unavailable(operands, out, bias)
        config = self.wgmma_config() if why is None else None
        limit = self.backend.properties.max_shared_memory
        if config is not None and config.shared_bytes * config.blocks > limit:
            need = config.shared_bytes * config.blocks
            why = f"configuration {config} needs {need} B of shared memory, the device allows {limit}"
        if why is None and config is not None:
            self.last_refusal = None
            return GmmWgmmaKernel(operands, bias, out, config=config)
        if not forced:
            return None
        if why != self.last_refusal:
            LOG.debug("grouped GEMM: %s=wgmma refused: %s; the kernel auto picks runs", GMM_ENV, why)
        self.last_refusal = why
        return None

    def gemm(self, operands: D, bias: D | None, out: D) -> GroupedGemm:
        """The grouped GEMM for these dtypes: matrix instructions for fp16 / bf16 operands (MX decoded to bf16
        included) where the architecture has them and for INT8 into INT32 where it has the int8 one (``mma``
        forces them elsewhere too: the layer's software path) unless the switch says ``simt``; otherwise the
        SIMT kernel (fp32: no TF32)."""
        mode = self.kernel_mode()
        if mode == "blaslt":  # the kernel a call the library refuses runs (execute decides after planning)
            mode = "auto"
        if mode == "wgmma" or (mode == "auto" and AUTO_WGMMA):
            wgmma = self._wgmma(operands, bias, out, forced=mode == "wgmma")
            if wgmma is not None:
                return wgmma
            mode = "auto"
        layout = hardware_layout(self.backend.policy.arch)
        if operands == D.ACL_INT8:
            # INT8 x INT8 -> exact INT32: NVIDIA's m16n8k32 (layout 1) is the only int8 matrix instruction the
            # layer issues; AMD's MFMA / WMMA int8 forms are not used, so there auto keeps the SIMT kernel; and
            # auto takes it there while INT8_AUTO_MMA is on
            fits, hardware = out == D.ACL_INT32 and bias is None, layout == 1 and INT8_AUTO_MMA
        else:
            fits = operands in MMA_DTYPES and out in MMA_OUT and (bias is None or bias in MMA_BIAS)
            hardware = layout is not None
        if fits and (mode == "mma" or (mode == "auto" and hardware)):
            config = self.config()
            if operands == D.ACL_INT8 and not int8_fits(config):
                raise AclError(
                    AclErrorCode.ACL_ERROR_INVALID_PARAM, f"{CONFIG_ENV}: configuration {config} cannot multiply int8"
                )
            return GmmMmaKernel(operands, bias, out, config=config)
        return GmmKernel(operands, bias, out)

    def kernels(self) -> dict[str, Kernel]:
        """GroupedMatmulV5 (its own kernels: no BLAS needed)."""
        return {"GroupedMatmulV5": self.run}

    # ------------------------------------------------------------------ planning
    def plan(self, launch: Launch, temps: list[int], stream: int) -> GroupPlan:
        """The descriptor rows of one call (temporaries for outputs whose rows need a copy go to ``temps``)."""
        args, gmm = launch.args, launch.plan["gmm"]
        xs, ws = _members(args["x"]), _members(args["weight"])
        if gmm.get("mx"):
            xs, ws = self._mx_operands(launch, temps, stream)
        bias = _members(args.get("biasOptional"))
        outs = _members(args["out"])
        gt = int(gmm["group_type"])
        p = GroupPlan()
        if gt == -1:
            for i, (x, w, out) in enumerate(zip(xs, ws, outs)):
                self.independent(p, x, w, out, bias[i] if bias else None, temps, stream)
            return p
        if gt == 0:
            out = outs[0]
            n = out.view_dims[1]
            osr, osc = out.strides
            if len(xs) > 1:
                start = 0
                p.mode = MODE_CHECK if args.get("groupListOptional") is not None else MODE_HOST
                for i, (x, w) in enumerate(zip(xs, ws)):
                    m, k = x.view_dims
                    p.rows.append(
                        _row(
                            _address(x),
                            _address(w),
                            _address(out, start),
                            bias[i] if bias else None,
                            (),
                            M1=m,
                            K1=k,
                            N=n,
                            XSR=x.strides[0],
                            XSC=x.strides[1],
                            WSK=w.strides[0],
                            WSN=w.strides[1],
                            OSR=osr,
                            OSC=osc,
                        )
                    )
                    p.products.append((m, n, 0))
                    start += m
                p.axis = start
                return p
            x = xs[0]
            m, k = x.view_dims
            weights: list[tuple[AclTensor, tuple[int, ...]]]
            biases: list[tuple[AclTensor, tuple[int, ...]]]
            if gmm["weight_split"]:
                weights = [(w, ()) for w in ws]
                biases = [(b, ()) for b in bias] if bias else []
            else:
                weights = [(ws[0], (g,)) for g in range(ws[0].view_dims[0])]
                biases = [(bias[0], (g,)) for g in range(len(weights))] if bias else []
            for g, (w, at) in enumerate(weights):
                b, b_at = biases[g] if biases else (None, ())
                p.rows.append(
                    _row(
                        _address(x),
                        _address(w, *at),
                        _address(out),
                        b,
                        b_at,
                        K1=k,
                        N=n,
                        XSR=x.strides[0],
                        XSC=x.strides[1],
                        WSK=w.strides[-2],
                        WSN=w.strides[-1],
                        OSR=osr,
                        OSC=osc,
                    )
                )
            p.mode, p.axis = MODE_M, m
            p.products.append((m, n, len(weights)))
            return p
        x = xs[0]
        m, k = x.view_dims
        if gmm["single_out"]:
            out, w = outs[0], ws[0]
            groups, _, n = out.view_dims
            for g in range(groups):
                p.rows.append(
                    _row(
                        _address(x),
                        _address(w),
                        _address(out, g),
                        None,
                        (),
                        M1=m,
                        N=n,
                        XSR=x.strides[0],
                        XSC=x.strides[1],
                        WSK=w.strides[0],
                        WSN=w.strides[1],
                        OSR=out.strides[1],
                        OSC=out.strides[2],
                    )
                )
            p.mode, p.axis = MODE_K, k
            p.products += [(m, n, 0)] * groups
            return p
        start = 0
        for w, out in zip(ws, outs):
            kw, n = w.view_dims
            p.rows.append(
                _row(
                    _address(x) + start * x.strides[1] * _itemsize(x.dtype),
                    _address(w),
                    _address(out),
                    None,
                    (),
                    M1=m,
                    K1=kw,
                    N=n,
                    XSR=x.strides[0],
                    XSC=x.strides[1],
                    WSK=w.strides[0],
                    WSN=w.strides[1],
                    OSR=out.strides[0],
                    OSC=out.strides[1],
                )
            )
            p.products.append((m, n, 0))
            start += kw
        return p

    def m_groups(self, x: AclTensor, weights: Sequence[AclTensor], out: AclTensor) -> GroupPlan:
        """M-axis groups of one x [M, K] into one out [M, N]: group g multiplies by the [K, N] view ``weights[g]``.

        The rows of each group come from the device group list (:data:`MODE_M`), read by :meth:`execute`.
        """
        m, k = x.view_dims
        n = out.view_dims[1]
        p = GroupPlan(mode=MODE_M, axis=m)
        # the per-call host path of the grouped quantised ops (64 groups and more): x's and out's fields once
        common = {"X": _address(x), "OUT": _address(out), "K1": k, "N": n, "XSR": x.strides[0], "XSC": x.strides[1]}
        common |= {"OSR": out.strides[0], "OSC": out.strides[1]}
        for w in weights:
            p.rows.append({**common, "W": _address(w), "WSK": w.strides[0], "WSN": w.strides[1]})
        p.products.append((m, n, len(weights)))
        return p

    def independent(
        self,
        p: GroupPlan,
        x: AclTensor,
        w: AclTensor,
        out: AclTensor,
        bias: AclTensor | None,
        temps: list[int],
        stream: int,
    ) -> None:
        """One independent pair (groupType=-1): x [..., K] @ w [K, N] as rows × K, the leading dims merged into rows."""
        k, n = w.view_dims
        lead = tuple(x.view_dims[:-1])
        m = math.prod(lead)
        g = coalesce(lead, [x.strides[:-1], out.strides[:-1]])
        x_addr, out_addr = _address(x), _address(out)
        if g.ndim == 1:
            xsr, osr = g.strides[0][0], g.strides[1][0]
            xsc, osc = x.strides[-1], out.strides[-1]
        else:  # the leading dims have no single row stride: dense copies of x and of the result
            x_addr = self._dense_copy(x, temps, stream)
            shape = tuple(out.view_dims)
            out_addr = self._temp(out.numel * _itemsize(out.dtype), temps, stream)
            dense = AclTensor(shape, out.dtype, contiguous_strides(shape), 0, Format.ACL_FORMAT_ND, shape, out_addr)
            p.copies.append((dense, out))
            xsr, xsc, osr, osc = k, 1, n, 1
        p.rows.append(
            _row(
                x_addr,
                _address(w),
                out_addr,
                bias,
                (),
                M1=m,
                K1=k,
                N=n,
                XSR=xsr,
                XSC=xsc,
                WSK=w.strides[0],
                WSN=w.strides[1],
                OSR=osr,
                OSC=osc,
            )
        )
        p.products.append((m, n, 0))

    def _mx_operands(self, launch: Launch, temps: list[int], stream: int) -> tuple[tuple[AclTensor], tuple[AclTensor]]:
        """MX mode: x [M, K] and weight [g, K, N] decoded to bfloat16 with their E8M0 block scales applied.

        The quantised matmuls' operand kernel writes both K-major (weight as [g, N, K]); every MX code
        times a power of two is exact in bfloat16, so the grouped GEMM sees the exact dequantised values.
        """
        args = launch.args
        x, w = _members(args["x"])[0], _members(args["weight"])[0]
        token, scale = _members(args["perTokenScaleOptional"])[0], _members(args["scaleOptional"])[0]
        (m, k), (groups, _, n) = x.view_dims, w.view_dims
        a = k_operand(x, (), rows_last=False)
        a.scale, a.scale_strides = token, mx_scale_strides(token, 0, rows_first=True)
        b = k_operand(w, (groups,), rows_last=True)
        b.scale, b.scale_strides = scale, mx_scale_strides(scale, 1, rows_first=gmm_weight_transposed(w))
        decode = self.backend.quant_matmul.enqueue_operand
        x_addr = self._temp(m * k * 2, temps, stream)
        w_addr = self._temp(groups * n * k * 2, temps, stream)
        if m * k:
            decode(a, (), m, k, "bf16", x_addr, stream)
        if groups * n * k:
            decode(b, (groups,), n, k, "bf16", w_addr, stream)
        bf16, nd = D.ACL_BF16, Format.ACL_FORMAT_ND
        x_dense = AclTensor((m, k), bf16, (k, 1), 0, nd, (m, k), x_addr)
        w_dense = AclTensor((groups, k, n), bf16, (n * k, 1, k), 0, nd, (groups, n, k), w_addr)
        return (x_dense,), (w_dense,)

    def _temp(self, nbytes: int, temps: list[int], stream: int) -> int:
        address = self.backend.provider.malloc_async(max(nbytes, 1), stream)
        temps.append(address)
        return address

    def _dense_copy(self, t: AclTensor, temps: list[int], stream: int) -> int:
        shape = tuple(t.view_dims)
        address = self._temp(t.numel * _itemsize(t.dtype), temps, stream)
        dense = AclTensor(shape, t.dtype, contiguous_strides(shape), 0, Format.ACL_FORMAT_ND, shape, address)
        self.backend.elementwise.convert(t, dense, stream)
        return address

    # ------------------------------------------------------------------ launching
    def _function(self, kernel: Any, config: LaunchConfig) -> object:
        specific = getattr(kernel, "arch_specific", False)  # the wgmma kernel: sm_90a
        return self.backend.function(kernel.source(), kernel.kernel_name, config.shared_bytes, specific)

    def _launch(self, kernel: Any, config: LaunchConfig, values: Sequence[Any], stream: int) -> None:
        function = self._function(kernel, config)
        self.backend.elementwise.launch_prepared(Prepared(function, config, KernelArgs(values)), stream)

    def _fills(self, rows: list[list[int]], table: Any) -> list[_Call]:
        """The descriptor fills of ``rows`` into the table (``table``: its pointer argument or placeholder)."""
        calls: list[_Call] = []
        for g0 in range(0, len(rows), FILL_GROUPS):
            chunk = rows[g0 : g0 + FILL_GROUPS]
            meta = [len(chunk) * len(FIELDS), g0, len(chunk)]
            for f in range(len(FIELDS)):
                meta += [r[f] for r in chunk] + [0] * (FILL_GROUPS - len(chunk))
            config = self.backend.elementwise_config(meta[0], 1)
            calls.append((_FILL, config, [KernelArgs.index_array(meta, "long long"), table]))
        return calls

    def _prep(
        self, p: GroupPlan, gemm: GroupedGemm, group_list: AclTensor | None, list_type: int, table: Any, flag: Any
    ) -> tuple[_Call, bool]:
        """The group-list pass of ``p`` (``table`` / ``flag``: pointer arguments or placeholders), and whether it reads
        a device group list (a check to defer)."""
        has_list = group_list is not None and p.mode != MODE_HOST
        list_address = _address(group_list) if has_list and group_list is not None else 0
        list_stride = group_list.strides[0] if has_list and group_list is not None else 0
        meta = [1, len(p.rows), p.mode, list_type, p.axis, list_stride, int(has_list), 0]
        values = [KernelArgs.index_array(meta, "long long"), KernelArgs.pointer(list_address), table, flag]
        return (_prep_kernel(gemm.tile_m, gemm.tile_n), self.backend.elementwise_config(1, 1), values), has_list

    def _gemm_call(self, gemm: GroupedGemm, groups: int, grid: int, table: Any, flag: Any) -> _Call:
        """The grouped GEMM's launch over ``grid`` (the plan's tile bound) output tiles."""
        values = [KernelArgs.index_array([groups, 0, 0], "long long"), table, flag]
        shared = gemm.shared_bytes if isinstance(gemm, GmmMmaKernel | GmmWgmmaKernel) else 0
        if isinstance(gemm, GmmWgmmaKernel):  # persistent configurations: a block an SM walks the tiles
            grid = gemm.grid(grid, self.backend.properties.compute_units)
        return gemm, LaunchConfig((grid, 1, 1), (gemm.threads, 1, 1), shared), values

    def variant(self) -> str:
        """What picks a call's grouped GEMM besides its signature: the switches, settings and defaults (a repeated
        call's launches are kept per variant)."""
        env = self.backend.environ
        config = self.forced_config or env.get(CONFIG_ENV, "")
        wgmma = self.forced_wgmma_config or env.get(WGMMA_CONFIG_ENV, "")
        return f"{self.kernel_mode()}|{config}|{wgmma}|{int(AUTO_WGMMA)}{int(INT8_AUTO_MMA)}"

    def run(self, launch: Launch) -> None:
        """Enqueue one GroupedMatmulV5 call on the launch's stream (its launches built once per signature where
        they are the same every call: :meth:`repeatable`)."""
        stream = handle(launch.stream)
        key = family_key(self.backend, "grouped_matmul", self.variant())
        kept: _Repeat | None = memo_plan(launch, key, lambda: self.repeatable(launch, stream))
        if kept is None:
            self._run_once(launch, stream)
            return
        if kept.forced:
            self.last_refusal = kept.refusal
        if kept.program is None:  # no groups: nothing to launch
            return
        self._report(V5_MESSAGE, kept.gemm, kept.groups, kept.grid)
        run_program(self.backend, kept.program, stream)

    def _gemm_of(self, launch: Launch) -> GroupedGemm:
        bias = _members(launch.args.get("biasOptional"))
        dtype: D = launch.plan["compute"]
        operands = D.ACL_BF16 if launch.plan["gmm"].get("mx") else dtype  # MX: decoded to bf16
        return self.gemm(operands, bias[0].dtype if bias else None, dtype)

    def _run_once(self, launch: Launch, stream: int) -> None:
        """One call planned and enqueued from scratch (MX operands, dense copies, the library's GEMM)."""
        group_list = launch.args.get("groupListOptional")
        assert group_list is None or isinstance(group_list, AclTensor)
        self.execute(
            stream,
            lambda temps: self.plan(launch, temps, stream),
            self._gemm_of(launch),
            group_list,
            int(launch.args["groupListType"]),
            V5_MESSAGE,
        )

    def repeatable(self, launch: Launch, stream: int) -> _Repeat | None:
        """A signature's launches built once (issue 18: the plan, descriptor rows, kernel lookups and argument
        packing were most of a call's host time): the descriptor fills, the group-list pass and the GEMM as a
        program run every call with a fresh stream-ordered table and check flag. None where a call needs more than
        that: MX operands (decoded into temporaries each call), operands whose rows need dense copies, the
        library's GEMM (``blaslt``, which decides per call)."""
        args, gmm = launch.args, launch.plan["gmm"]
        if gmm.get("mx") or self.kernel_mode() == "blaslt":
            return None
        if int(gmm["group_type"]) == -1:
            for x, out in zip(_members(args["x"]), _members(args["out"])):
                lead = tuple(x.view_dims[:-1])
                if coalesce(lead, [x.strides[:-1], out.strides[:-1]]).ndim != 1:
                    return None  # dense copies of x and of the result: temporaries every call
        gemm = self._gemm_of(launch)
        temps: list[int] = []
        p = self.plan(launch, temps, stream)
        if temps or p.copies:  # not expected after the checks above; such a call is planned every time
            for address in temps:
                self.backend.provider.free_async(address, stream)
            return None
        refusal, forced = self.last_refusal, self.kernel_mode() == "wgmma"
        if not p.rows:
            return _Repeat(None, gemm, 0, 0, refusal, forced)
        group_list = args.get("groupListOptional")
        assert group_list is None or isinstance(group_list, AclTensor)
        rows = p.table()
        groups = len(rows)
        table: Any = Temp(0)
        calls = self._fills(rows, table)
        prep, has_list = self._prep(p, gemm, group_list, int(args["groupListType"]), table, FLAG)
        calls.append(prep)
        grid = p.grid(gemm.tile_m, gemm.tile_n)
        if grid:
            calls.append(self._gemm_call(gemm, groups, grid, table, FLAG))
        program = Program(report=V5_MESSAGE if has_list else None, flagged=True)
        program.temp((groups + 1) * len(FIELDS) * 8)
        for kernel, config, values in calls:
            program.steps.append(Step(self._function(kernel, config), config, tuple(values)))
        return _Repeat(program, gemm, groups, grid, refusal, forced)

    def execute(
        self,
        stream: int,
        planner: Callable[[list[int]], GroupPlan],
        gemm: GroupedGemm,
        group_list: AclTensor | None,
        list_type: int,
        message: str,
        after: Callable[[int], None] | None = None,
    ) -> None:
        """Enqueue a planned grouped GEMM: descriptor fills, the group-list pass, ``gemm`` and the output copies.

        ``planner`` gets the call's temporaries list (freed, stream-ordered, at the end) and returns the plan;
        a device group list (``group_list``, read where the plan's mode says) is checked at synchronisation.
        ``after(flag)`` enqueues what consumes the GEMM's output (an epilogue) before the temporaries are
        freed; ``flag`` is the device int a bad group list sets, so the epilogue can write nothing then.
        The kernel's path is reported (``last_path``, a debug line on ``acl_rocm.grouped_matmul``).
        """
        provider = self.backend.provider
        temps: list[int] = []
        flag = self.backend.driver.check_flag(stream)
        checked = False
        try:
            p = planner(temps)
            if not p.rows:
                return
            rows = p.table()
            groups = len(rows)
            table = self._temp((groups + 1) * len(FIELDS) * 8, temps, stream)
            table_arg, flag_arg = KernelArgs.pointer(table), KernelArgs.pointer(flag)
            for kernel, config, values in self._fills(rows, table_arg):
                self._launch(kernel, config, values, stream)
            (kernel, config, values), has_list = self._prep(p, gemm, group_list, list_type, table_arg, flag_arg)
            self._launch(kernel, config, values, stream)
            grid = p.grid(gemm.tile_m, gemm.tile_n)
            library = None
            if grid and self.kernel_mode() == "blaslt":
                library = self._blaslt(p, gemm, table, flag, temps, stream)
            self._report(message, gemm if library is None else library, groups, grid)
            if grid and library is None:
                self._launch(*self._gemm_call(gemm, groups, grid, table_arg, flag_arg), stream)
            for dense, out in p.copies:
                self.backend.elementwise.convert(dense, out, stream)
            if after is not None:
                after(flag)
            if has_list:
                self.backend.driver.defer_check(stream, flag, message)
                checked = True
        finally:
            if not checked:
                self.backend.driver.drop_check(stream, flag)
            for address in temps:
                provider.free_async(address, stream)

    def _report(self, message: str, gemm: GroupedGemm | GmmBlaslt, groups: int, grid: int) -> None:
        self.last_path = gemm.path
        self.last_config = str(gemm.config) if isinstance(gemm, GmmMmaKernel | GmmWgmmaKernel) else None
        if LOG.isEnabledFor(logging.DEBUG):
            out = gemm.dtype if gemm.out is None else gemm.out
            LOG.debug(
                "%s: path=%s (%s -> %s, bias %s, groups=%d, %dx%d tiles, grid<=%d, %s=%s, config %s)",
                message.split(":")[0],
                gemm.path,
                gemm.dtype.short,
                out.short,
                gemm.bias.short if gemm.bias is not None else "none",
                groups,
                gemm.tile_m,
                gemm.tile_n,
                grid,
                GMM_ENV,
                self.kernel_mode(),
                self.last_config or "n/a",
            )


RUNNER = GroupedMatmulRunner

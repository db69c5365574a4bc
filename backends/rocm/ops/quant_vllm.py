"""The quantisation operators vllm-ascend reaches, on the GPU (kernels: :mod:`acl_rocm.kernels.quant_vllm`).

Quantize, TransQuantParamV2, DynamicBlockQuantV2, ClippedSwiglu, DequantSwigluQuantV2,
RmsNormDynamicMxQuant, AddRmsNormDynamicMxQuant and FlatQuant (the V1 forms run their V2's kernels).
Every call is one recorded program (:mod:`acl_rocm.ops.program`): group counts become cumulative ends
in a stream-ordered temporary, FlatQuant's Kronecker products stay in one block's shared memory and
registers (slices of at most 5,632 elements) or go through two temporaries; nothing
passes through the host, so every op captures.

FlatQuant's kernel (``ACL_FLATQUANT_KERNEL``, or the runner's ``forced_flat``): ``auto`` (the default)
runs the token-tile kernel (:mod:`acl_rocm.kernels.flat_quant`; ``dmma16`` on NVIDIA, ``simt`` elsewhere) where it fits
and the per-slice kernels (``slice``) elsewhere; ``simt`` / ``dmma`` / ``dmma16`` force the token tile
with double register tiles / the f64 warp matrix instruction (m8n8k4; m16n8k4 on sm_90), ``slice`` the
per-slice kernels. A forced token tile
that does not fit runs ``slice``; each plan's path goes to the ``acl_rocm.quant_vllm`` debug logger.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from acl_core.backend import Kernel, Launch
from acl_core.dtypes import DataType as D
from acl_core.errors import AclError, AclErrorCode
from acl_core.spec.ops.quant_vllm import group_param_rows
from acl_core.tensor import AclTensor
from acl_rocm.kernels.flat_quant import KERNELS as TILE_KERNELS
from acl_rocm.kernels.flat_quant import FlatTile
from acl_rocm.kernels.prelude import PRELUDE
from acl_rocm.kernels.quant import BLOCK_THREADS, LP_MODES
from acl_rocm.kernels.quant_vllm import (
    FUSED_SLICE,
    GROUP_ENDS,
    BlockQuant,
    ClippedSwiglu,
    DequantSwigluQuant,
    FlatFused,
    FlatLeft,
    FlatRight,
    MxNorm,
    Quantize,
    TransQuantParam,
)
from acl_rocm.launch import KernelArgs, LaunchConfig, longs
from acl_rocm.ops.program import Program, Step, Temp, program_kernel
from acl_rocm.ops.quant import param_strides
from acl_rocm.views import broadcast_strides

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

OPS: tuple[str, ...] = (
    "Quantize",
    "TransQuantParamV2",
    "DynamicBlockQuantV2",
    "ClippedSwiglu",
    "DequantSwigluQuantV2",
    "RmsNormDynamicMxQuant",
    "AddRmsNormDynamicMxQuant",
    "FlatQuant",
)
"""The aclnn operators this module runs (DynamicBlockQuant and DequantSwigluQuant run their V2's kernels)."""

Shape = tuple[int, ...]
NULL = ctypes.c_void_p(0)
LOG = logging.getLogger("acl_rocm.quant_vllm")
FLAT_ENV = "ACL_FLATQUANT_KERNEL"
FLAT_CHOICES: tuple[str, ...] = ("auto", "slice", *TILE_KERNELS)
FLAT_AUTO = "simt"
"""The token tile ``auto`` runs where it fits off NVIDIA (simt: the one the CPU emulator runs as the GPU does)."""
FLAT_AUTO_NVIDIA = "dmma16"
"""``auto`` on NVIDIA: the f64 warp product (m16n8k4 pairs on sm_90, m8n8k4 on sm_80-89); on an H100 (2026-12-07)
0.48x torch's time at [16384, 64, 64] against simt's 0.80 and dmma's 0.58, every choice passing the GPU tier."""
"""FlatQuant's kernel choices (``ACL_FLATQUANT_KERNEL``): auto, the per-slice kernels, the token tiles."""


def _t(launch: Launch, name: str) -> AclTensor | None:
    t = launch.args.get(name)
    return t if isinstance(t, AclTensor) else None


def _need(launch: Launch, name: str) -> AclTensor:
    t = _t(launch, name)
    assert t is not None, name
    return t


def _ptr(t: AclTensor | None) -> ctypes.c_void_p:
    """The tensor's allocation (element offsets travel separately), or null."""
    return KernelArgs.pointer(t.data if t is not None else 0)


def _lead(values: Sequence[int], size: int, fill: int = 0) -> ctypes.Array[Any]:
    """A ``Lead`` struct of ``size`` long longs (unused entries ``fill``: 1 for a shape, 0 for strides)."""
    padded = [*values, *([fill] * (size - len(values)))]
    return KernelArgs.index_array(padded, "long long")


class DsqTensors(NamedTuple):
    """DequantSwigluQuant's tensors: x, its optional parameters (None: absent) and the two outputs."""

    x: AclTensor
    weight_scale: AclTensor | None
    activation_scale: AclTensor | None
    bias: AclTensor | None
    quant_scale: AclTensor | None
    quant_offset: AclTensor | None
    y: AclTensor
    scale: AclTensor


def _pow2_threads(work: int, warp: int) -> int:
    """A power-of-two block of at least a warp and at most BLOCK_THREADS threads for ``work`` items."""
    block = max(warp, 1 << max(min(work, BLOCK_THREADS) - 1, 0).bit_length())
    return min(block, BLOCK_THREADS)


class QuantVllmRunner:
    """The operators of :data:`OPS` on one backend."""

    def __init__(self, backend: RocmBackend) -> None:
        self.backend = backend
        self.forced_flat: str | None = None
        """FlatQuant's kernel for tests and the bench (None: ``ACL_FLATQUANT_KERNEL``, else ``auto``)."""
        self.flat_blocks: int | None = None
        """The token tile's grid at most (None: the device's resident blocks); tests make blocks loop over tokens."""
        self.flat_last_path: str | None = None
        """The path FlatQuant's last plan took (the bench's note)."""

    def kernels(self) -> dict[str, Kernel]:
        """A kernel per op name."""
        return {
            name: program_kernel(
                self.backend, "quant_vllm", name, self._planner(name), self.flat_choice if name == "FlatQuant" else None
            )
            for name in OPS
        }

    def flat_choice(self) -> str:
        """FlatQuant's kernel choice: ``forced_flat``, else ``ACL_FLATQUANT_KERNEL``, else ``auto``."""
        value = (self.forced_flat or self.backend.environ.get(FLAT_ENV, "") or "auto").strip().lower()
        if value not in FLAT_CHOICES:
            raise AclError(
                AclErrorCode.ACL_ERROR_INVALID_PARAM, f"{FLAT_ENV}={value!r}: expected one of {', '.join(FLAT_CHOICES)}"
            )
        return value

    def _planner(self, op: str) -> Any:
        plan = {
            "Quantize": self._quantize,
            "TransQuantParamV2": self._trans_quant_param,
            "DynamicBlockQuantV2": self._block_quant,
            "ClippedSwiglu": self._clipped_swiglu,
            "DequantSwigluQuantV2": self._dequant_swiglu_quant,
            "RmsNormDynamicMxQuant": self._mx_norm,
            "AddRmsNormDynamicMxQuant": self._mx_norm,
            "FlatQuant": self._flat_quant,
        }[op]
        return plan

    # ------------------------------------------------------------------ helpers
    def _step(self, prog: Program, kernel: Any, config: LaunchConfig, values: list[Any]) -> None:
        function = self.backend.function(kernel.source(), kernel.kernel_name)
        prog.steps.append(Step(function, config, tuple(values)))

    def _flat(self, n: int) -> LaunchConfig:
        return self.backend.elementwise_config(max(n, 1), 1)

    def _blocks(self, count: int, work: int) -> LaunchConfig:
        """One block per item (``count``, grid-strided past the device's limit), ``work`` elements each."""
        p = self.backend.properties
        grid = min(max(count, 1), p.compute_units * 32, p.max_grid_x)
        return LaunchConfig((grid, 1, 1), (_pow2_threads(work, p.warp_size), 1, 1))

    def _meta(self, n: int, shape: Shape, rows: list[list[int]], bases: list[int]) -> list[Any]:
        values = [n, *shape, *(s for row in rows for s in row)]
        return [KernelArgs.index_array(values, "long long"), *longs(*bases)]

    def _group_ends(self, prog: Program, counts: AclTensor, rows: int) -> Temp:
        """A temporary of cumulative group ends (int64 per group) computed on the stream from ``counts``."""
        ends = prog.temp(8 * counts.numel)
        function = self.backend.function(PRELUDE + GROUP_ENDS, "acl_quant_group_ends")
        wide = counts.dtype == D.ACL_INT64
        args: list[Any] = [_ptr(counts) if wide else NULL, NULL if wide else _ptr(counts)]
        args += [*longs(counts.offset, counts.strides[0], counts.numel, rows), ends]
        prog.steps.append(Step(function, LaunchConfig((1, 1, 1), (1, 1, 1)), tuple(args)))
        return ends

    # ------------------------------------------------------------------ ops
    def _quantize(self, launch: Launch) -> Program:
        x, scales, zp, out = _need(launch, "x"), _need(launch, "scales"), _t(launch, "zeroPoints"), _need(launch, "out")
        prog = Program()
        if out.numel == 0:
            return prog
        axis = launch.plan["axis"]
        shape = tuple(out.view_dims)
        rows = [list(x.strides), list(out.strides), param_strides(scales, shape, axis)]
        bases = [x.offset, out.offset, scales.offset]
        if zp is not None:
            rows.append(param_strides(zp, shape, axis))
            bases.append(zp.offset)
        kernel = Quantize(x.dtype, scales.dtype, zp.dtype if zp is not None else None, out.dtype, len(shape))
        args = [*self._meta(out.numel, shape, rows, bases), _ptr(x), _ptr(scales), _ptr(zp), _ptr(out)]
        self._step(prog, kernel, self._flat(out.numel), args)
        return prog

    def _trans_quant_param(self, launch: Launch) -> Program:
        scale, offset, out = _need(launch, "scale"), _t(launch, "offset"), _need(launch, "out")
        prog = Program()
        shape = tuple(out.view_dims)
        rows = [list(out.strides), list(broadcast_strides(scale.view_dims, scale.strides, shape))]
        bases = [out.offset, scale.offset]
        if offset is not None:
            rows.append(list(broadcast_strides(offset.view_dims, offset.strides, shape)))
            bases.append(offset.offset)
        kernel = TransQuantParam(offset is not None, len(shape))
        args = [*self._meta(out.numel, shape, rows, bases), _ptr(out), _ptr(scale), _ptr(offset)]
        self._step(prog, kernel, self._flat(out.numel), args)
        return prog

    def _block_quant(self, launch: Launch) -> Program:
        x, y, s = _need(launch, "x"), _need(launch, "yOut"), _need(launch, "scaleOut")
        rb, cb = launch.plan["block"]
        prog = Program()

        def strides(t: AclTensor) -> list[int]:
            st = list(t.strides)
            return [0, *st] if t.rank == 2 else st

        (m, n), batch = x.view_dims[-2:], (x.view_dims[0] if x.rank == 3 else 1)
        mb, nb = -(-m // rb), -(-n // cb)
        total = batch * mb * nb
        kernel = BlockQuant(x.dtype, y.dtype)
        args: list[Any] = [_ptr(x), *longs(x.offset, *strides(x)), _ptr(y), *longs(y.offset, *strides(y))]
        args += [_ptr(s), *longs(s.offset, *strides(s)), *longs(m, n, rb, cb, mb, nb, total)]
        args += [ctypes.c_float(float(launch.plan["dst_max"])), ctypes.c_float(float(launch.args["minScale"]))]
        self._step(prog, kernel, self._blocks(total, rb * cb), args)
        return prog

    def _clipped_swiglu(self, launch: Launch) -> Program:
        x, out, group = _need(launch, "x"), _need(launch, "out"), _t(launch, "groupIndexOptional")
        prog = Program()
        if out.numel == 0:
            return prog
        dim = int(launch.plan["axis"])
        shape = tuple(out.view_dims)
        after = 1
        for d in shape[dim + 1 :]:
            after *= d
        valid: Any = NULL
        if group is not None:
            ends = self._group_ends(prog, group, int(launch.plan["rows"]))
            valid = Temp(ends.slot, 8 * (group.numel - 1))
        kernel = ClippedSwiglu(x.dtype, len(shape), dim, bool(launch.args["interleaved"]))
        args = [*self._meta(out.numel, shape, [list(out.strides), list(x.strides)], [out.offset, x.offset])]
        args += [_ptr(out), _ptr(x), *longs(after, shape[dim]), valid]
        args += [ctypes.c_float(float(launch.args[n])) for n in ("alpha", "limit", "bias")]
        self._step(prog, kernel, self._flat(out.numel), args)
        return prog

    def _resolve(self, t: AclTensor | None, groups: int, quant: bool) -> list[Any]:
        """(pointer, base, per-group stride, per-column stride) of a DequantSwigluQuant parameter."""
        if t is None:
            return [NULL, *longs(0, 0, 0)]
        how = group_param_rows(t, groups) if quant else ("row" if t.rank == 2 else "whole")
        if how == "row":
            gs = t.strides[0] if t.shape[0] > 1 else 0
            cs = t.strides[1] if t.shape[1] > 1 else 0
        elif how == "group":
            gs, cs = t.strides[0], 0
        else:
            gs, cs = 0, t.strides[-1] if t.shape[-1] > 1 else 0
        return [_ptr(t), *longs(t.offset, gs, cs)]

    def _dequant_swiglu_quant(self, launch: Launch) -> Program:
        x, y, s = _need(launch, "x"), _need(launch, "yOut"), _need(launch, "scaleOut")
        names = ("weightScaleOptional", "activationScaleOptional", "biasOptional", "quantScaleOptional")
        ws, act, bias, qs = (_t(launch, n) for n in names)
        qo, group = _t(launch, "quantOffsetOptional"), _t(launch, "groupIndexOptional")
        plan = launch.plan
        rows = int(plan["rows"])
        prog = Program()
        groups = group.numel if group is not None else 1
        ends: Any = self._group_ends(prog, group, rows) if group is not None else NULL
        # the clamp, alpha and bias as the FLOAT32 values the reference computes with
        limit, alpha, bias_v = (ctypes.c_float(launch.args[n]).value for n in ("clampLimit", "gluAlpha", "gluBias"))
        self.record_dsq(
            prog,
            DsqTensors(x, ws, act, bias, qs, qo, y, s),
            ends,
            groups,
            rows,
            int(plan["swiglu"]),
            bool(plan["left"]),
            plan["mode"] == "dynamic",
            float(plan["dst_max"]),
            (limit, alpha, bias_v),
            NULL,
        )
        return prog

    def record_dsq(
        self,
        prog: Program,
        t: DsqTensors,
        ends: Any,
        groups: int,
        rows: int,
        swiglu: int,
        left: bool,
        dynamic: bool,
        dst_max: float,
        glu: tuple[float, float, float],
        flag: Any,
    ) -> None:
        """Record DequantSwigluQuant's kernel over ``t`` into ``prog``: ``ends`` (a Temp or pointer of
        ``groups`` cumulative int64 row ends, or NULL for one group), ``glu`` (clampLimit, gluAlpha, gluBias)
        and ``flag`` (a device int that, when set, makes the kernel write nothing; NULL for none)."""
        x, ws, act, bias, qs, qo, y, s = t
        hw = x.view_dims[-1] // 2
        lead = x.rank - 1
        kernel = DequantSwigluQuant(
            x.dtype,
            bias.dtype if bias is not None else None,
            act is not None,
            qs is not None,
            qo is not None,
            y.dtype,
            swiglu,
            left,
            dynamic,
            lead,
        )
        size = max(lead, 1)
        act_strides = list(act.strides[:lead]) if act is not None else [0] * lead
        args: list[Any] = [_ptr(x), *longs(x.offset, x.strides[-1])]
        args += self._resolve(ws, groups, quant=False) + self._resolve(bias, groups, quant=False)
        args += self._resolve(qs, groups, quant=True) + self._resolve(qo, groups, quant=True)
        args += [_ptr(act), *longs(act.offset if act is not None else 0), _ptr(y), *longs(y.offset, y.strides[-1])]
        args += [_ptr(s), *longs(s.offset)]
        args += [ends, *longs(groups)]
        args += longs(rows, hw)
        args += [_lead(x.view_dims[:lead], size, fill=1), _lead(x.strides[:lead], size), _lead(y.strides[:lead], size)]
        args += [_lead(s.strides[:lead], size), _lead(act_strides, size)]
        args += [ctypes.c_float(dst_max), *(ctypes.c_double(v) for v in glu), flag]
        if rows:
            self._step(prog, kernel, self._blocks(rows, hw), args)

    def _mx_norm(self, launch: Launch) -> Program:
        add = "x1" in launch.args
        x1 = _need(launch, "x1" if add else "x")
        x2 = _t(launch, "x2")
        gamma, beta, y = _need(launch, "gamma"), _t(launch, "beta"), _need(launch, "yOut")
        xout, mx, rstd = _t(launch, "xOut"), _need(launch, "mxscaleOut"), _t(launch, "rstdOut")
        want_rstd = bool(launch.args["outputRstd"]) and rstd is not None
        prog = Program()
        lead, n = x1.rank - 1, x1.view_dims[-1]
        rows = 1
        for d in x1.view_dims[:-1]:
            rows *= d
        if rows == 0:
            return prog
        size = max(lead, 1)
        kernel = MxNorm(x1.dtype, add, gamma.dtype, beta is not None, y.dtype, int(launch.plan["alg"]), want_rstd, lead)

        def lead_of(t: AclTensor | None) -> ctypes.Array[Any]:
            return _lead(list(t.strides[:lead]) if t is not None else [0] * lead, size)

        def last(t: AclTensor | None) -> int:
            return t.strides[-1] if t is not None and t.rank else 0

        args: list[Any] = [_ptr(x1), *longs(last(x1)), _ptr(x2), *longs(last(x2))]
        args += [_ptr(gamma), *longs(gamma.offset, last(gamma))]
        args += [_ptr(beta), *longs(beta.offset if beta else 0, last(beta))]
        args += [_ptr(y), *longs(last(y)), _ptr(xout), *longs(last(xout))]
        args += [_ptr(mx), *longs(mx.strides[-2], mx.strides[-1]), _ptr(rstd if want_rstd else None)]
        args += [*longs(rows, n), ctypes.c_double(float(launch.args["epsilon"]))]
        args += [ctypes.c_int(LP_MODES[str(launch.plan["mode"])]), _lead(x1.view_dims[:lead], size, fill=1)]
        rstd_t = rstd if want_rstd else None
        args += [lead_of(x1), lead_of(x2), lead_of(y), lead_of(xout), lead_of(mx), lead_of(rstd_t)]
        offs = [t.offset if t is not None else 0 for t in (x1, x2, y, xout, mx, rstd_t)]
        args += longs(*offs)
        self._step(prog, kernel, self._blocks(rows, n), args)
        return prog

    def _flat_tile(self, launch: Launch, m: int, n1: int, n2: int) -> FlatTile | None:
        """The token-tile kernel this call runs, or None (the per-slice kernels); the choice is logged."""
        x, out = _need(launch, "x"), _need(launch, "out")
        choice = self.flat_choice()
        auto = FLAT_AUTO_NVIDIA if self.backend.provider.platform == "nvidia" else FLAT_AUTO
        tile = FlatTile(x.dtype, out.dtype, n1, n2, auto if choice in ("auto", "slice") else choice)
        props = self.backend.properties
        why = "forced" if choice == "slice" else tile.fits(props.max_shared_memory, props.warp_size)
        path = f"token tile {tile.kernel}" if why is None else "per slice"
        self.flat_last_path = path
        LOG.debug("FlatQuant [%d, %d, %d] %s: %s (%s=%s)", m, n1, n2, x.dtype.short, path, FLAT_ENV, choice)
        if why is not None:
            LOG.debug("FlatQuant token tile %s not taken: %s", tile.kernel, why)
            return None
        return tile

    def _flat_quant(self, launch: Launch) -> Program:
        x, p1, p2 = _need(launch, "x"), _need(launch, "kroneckerP1"), _need(launch, "kroneckerP2")
        out, scale = _need(launch, "out"), _need(launch, "quantScale")
        m, n1, n2 = x.view_dims
        prog = Program()
        tile = self._flat_tile(launch, m, n1, n2)
        if tile is not None:
            args: list[Any] = [_ptr(x), *longs(x.offset, *x.strides), _ptr(p2), *longs(p2.offset, *p2.strides)]
            args += [_ptr(p1), *longs(p1.offset, *p1.strides), _ptr(out), *longs(out.offset, *out.strides)]
            args += [_ptr(scale), *longs(scale.offset, scale.strides[0], m)]
            args += [ctypes.c_float(float(launch.plan["dst_max"]))]
            p = self.backend.properties
            per_sm = max(1, min(2048 // tile.threads, (p.max_shared_memory + 1024) // (tile.shared_bytes + 1024)))
            grid = min(m, p.compute_units * per_sm, p.max_grid_x, self.flat_blocks or m)
            config = LaunchConfig((grid, 1, 1), (tile.threads, 1, 1), tile.shared_bytes)
            function = self.backend.function(tile.source(), tile.kernel_name, tile.shared_bytes)
            prog.steps.append(Step(function, config, tuple(args)))
            return prog
        if n1 * n2 <= FUSED_SLICE:  # one launch: x' in shared memory, x'' in registers
            per = -(-n1 * n2 // BLOCK_THREADS)
            per = -(-per // 8) * 8
            args = [_ptr(x), *longs(x.offset, *x.strides), _ptr(p2), *longs(p2.offset, *p2.strides)]
            args += [_ptr(p1), *longs(p1.offset, *p1.strides), _ptr(out), *longs(out.offset, *out.strides)]
            args += [_ptr(scale), *longs(scale.offset, scale.strides[0], m, n1, n2, per)]
            args += [ctypes.c_float(float(launch.plan["dst_max"]))]
            p = self.backend.properties
            config = LaunchConfig((min(m, p.compute_units * 32, p.max_grid_x), 1, 1), (BLOCK_THREADS, 1, 1))
            self._step(prog, FlatFused(x.dtype, out.dtype), config, args)
            return prog
        total = m * n1 * n2
        right = prog.temp(8 * total)
        rounded = prog.temp(4 * total)
        args = [_ptr(x), *longs(x.offset, *x.strides), _ptr(p2), *longs(p2.offset, *p2.strides), right]
        self._step(prog, FlatRight(x.dtype), self._flat(total), [*args, *longs(total, n1, n2)])
        kernel = FlatLeft(x.dtype, out.dtype)
        args = [_ptr(p1), *longs(p1.offset, *p1.strides), right, rounded, _ptr(out), *longs(out.offset, *out.strides)]
        args += [_ptr(scale), *longs(scale.offset, scale.strides[0], m, n1, n2)]
        args += [ctypes.c_float(float(launch.plan["dst_max"]))]
        self._step(prog, kernel, self._blocks(m, n1 * n2), args)
        return prog


RUNNER = QuantVllmRunner

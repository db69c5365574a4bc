"""The grouped quantised GEMMs on the GPU, composed from existing launches (kernels: :mod:`acl_rocm.kernels.gmm_quant`).

* GroupedMatmulSwigluQuantV2 (its NZ forms run its kernel): a FRACTAL_NZ weight is first gathered into
  a dense ND temporary by the layout family's NZ copy; float16 / bfloat16 or per-tensor-list weight
  scales are converted (exactly) into one FLOAT32 [E, N] temporary. The grouped GEMM's integer mode
  (:meth:`GroupedMatmulRunner.execute`, INT8 × INT8 into an exact INT32 temporary [M, N], the groups'
  rows read from the device group list; the matrix-instruction kernel where the runner's :meth:`gemm` picks it,
  i.e. NVIDIA sm_80+ unless ``ACL_GMM_KERNEL=simt``, else the SIMT kernel) is followed by one thread turning
  the group list into cumulative row ends and by DequantSwigluQuant's kernel (:meth:`QuantVllmRunner.record_dsq`): the
  dequantisation ``float32(acc) * w_scale[g] * x_scale``, SwiGLU in double and the per-row INT8
  quantisation, the very arithmetic the reference follows.
* QuantGroupedMatmulDequant (and WeightNZ): one block per row quantises x into an INT8 temporary with
  its FLOAT32 row scales, the same integer grouped GEMM multiplies it by each group's ``weight^T`` (a
  strided view, no copy for ND), and one thread per output element dequantises into the float16 ``out``.

A bad group list sets the grouped GEMM's device flag: the GEMM and both epilogues write nothing and
161002 is raised at synchronisation. Temporaries are stream-ordered and nothing is read back to the
host, so every call can be captured.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from acl_core.backend import Kernel, Launch
from acl_core.dtypes import DataType as D
from acl_core.formats import Format
from acl_core.nz import is_nz
from acl_core.spec.ops.gmm_quant import QUANT_MAX, members
from acl_core.tensor import AclTensor, contiguous_strides
from acl_rocm.driver import handle
from acl_rocm.kernels.gmm_quant import BLOCK_THREADS, GROUP_LIST_ENDS, Dequant, QuantRows
from acl_rocm.kernels.prelude import PRELUDE
from acl_rocm.launch import KernelArgs, LaunchConfig, launch_tensor, longs
from acl_rocm.ops.matmul_variants import view
from acl_rocm.ops.program import Program, Step, Temp, run_program
from acl_rocm.ops.quant_vllm import DsqTensors

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

ND = Format.ACL_FORMAT_ND
OPS: tuple[str, ...] = ("GroupedMatmulSwigluQuantV2", "QuantGroupedMatmulDequant")
"""The operators with kernels here (the NZ forms are versions of these and run their kernels)."""
NULL = ctypes.c_void_p(0)
SWIGLU_PLAIN = (7.0, 1.702, 1.0)
"""DequantSwigluQuant's clampLimit, gluAlpha, gluBias (unused by swigluMode 0, the plain SwiGLU)."""


def _optional(launch: Launch, name: str) -> AclTensor | None:
    t = launch.args.get(name)
    return t if isinstance(t, AclTensor) else None


def _dense(dims: Sequence[int], dtype: D, address: int) -> AclTensor:
    shape = tuple(dims)
    return AclTensor(shape, dtype, contiguous_strides(shape), 0, ND, shape, address)


class GmmQuantRunner:
    """The grouped quantised GEMMs, composed from the grouped GEMM, layout and quant_vllm runners."""

    def __init__(self, backend: RocmBackend) -> None:
        self.backend = backend

    def kernels(self) -> dict[str, Kernel]:
        """A kernel per op of :data:`OPS` (they need no BLAS)."""
        return {"GroupedMatmulSwigluQuantV2": self._swiglu_quant, "QuantGroupedMatmulDequant": self._dequant}

    # ------------------------------------------------------------------ helpers
    def _temp(self, nbytes: int, temps: list[int], stream: int) -> int:
        address = self.backend.provider.malloc_async(max(int(nbytes), 1), stream)
        temps.append(address)
        return address

    def _nd(self, w: AclTensor, temps: list[int], stream: int) -> AclTensor:
        """``w`` itself, or for a FRACTAL_NZ tensor a dense ND temporary holding its logical values."""
        if not is_nz(w.format):
            return w
        dense = _dense(w.view_dims, w.dtype, self._temp(max(math.prod(w.view_dims), 1), temps, stream))
        prog = Program()
        self.backend.layout.record_from_nz(prog, w, dense, dense.data)
        run_program(self.backend, prog, stream)
        return dense

    def _ends_step(self, prog: Program, group_list: AclTensor, groups: int, rows: int, cumulative: bool) -> Temp:
        """A temporary of cumulative int64 row ends from the device group list (one thread)."""
        ends = prog.temp(8 * groups)
        function = self.backend.function(PRELUDE + GROUP_LIST_ENDS, "acl_gmmq_group_ends")
        args: list[Any] = [KernelArgs.pointer(group_list.data)]
        args += [*longs(group_list.offset, group_list.strides[0], groups, rows), ctypes.c_int(int(cumulative)), ends]
        prog.steps.append(Step(function, LaunchConfig((1, 1, 1), (1, 1, 1)), tuple(args)))
        return ends

    def _step(self, prog: Program, kernel: Any, config: LaunchConfig, values: list[Any]) -> None:
        function = self.backend.function(kernel.source(), kernel.kernel_name)
        prog.steps.append(Step(function, config, tuple(values)))

    def _rows_config(self, rows: int, work: int) -> LaunchConfig:
        """One block per row (grid-strided past the device's limit), a power of two of threads."""
        p = self.backend.properties
        block = max(p.warp_size, 1 << max(min(work, BLOCK_THREADS) - 1, 0).bit_length())
        grid = min(max(rows, 1), p.compute_units * 32, p.max_grid_x)
        return LaunchConfig((grid, 1, 1), (min(block, BLOCK_THREADS), 1, 1))

    # ------------------------------------------------------------------ GroupedMatmulSwigluQuantV2
    def _weight_scales(
        self, scales: Sequence[AclTensor], groups: int, n: int, temps: list[int], stream: int
    ) -> AclTensor:
        """The weight scales as one FLOAT32 [E, N] tensor (the caller's own where it is one already)."""
        if len(scales) == 1 and scales[0].rank == 2 and scales[0].dtype == D.ACL_FLOAT:
            return scales[0]
        dense = _dense((groups, n), D.ACL_FLOAT, self._temp(4 * groups * n, temps, stream))
        if len(scales) == 1 and scales[0].rank == 2:
            self.backend.elementwise.convert(scales[0], dense, stream)
            return dense
        for g, s in enumerate(scales):
            self.backend.elementwise.convert(s, view(dense, (n,), (1,), g * n), stream)
        return dense

    def _swiglu_quant(self, launch: Launch) -> None:
        args, plan = launch.args, launch.plan["gmm_quant"]
        x, y, scale_out = (launch_tensor(launch, n) for n in ("x", "output", "outputScale"))
        x_scale, group_list = launch_tensor(launch, "xScale"), launch_tensor(launch, "groupList")
        m = x.view_dims[0]
        n = 2 * y.view_dims[1]
        groups = int(plan["groups"])
        if m == 0:
            return
        stream = handle(launch.stream)
        runner = self.backend.grouped_matmul
        temps: list[int] = []
        try:
            weights = [self._nd(w, temps, stream) for w in members(args["weight"])]
            if plan["weight_split"]:
                views = weights
            else:
                w = weights[0]
                views = [view(w, w.view_dims[1:], w.strides[1:], w.offset + g * w.strides[0]) for g in range(groups)]
            ws = self._weight_scales(members(args["weightScale"]), groups, n, temps, stream)
            acc = _dense((m, n), D.ACL_INT32, self._temp(4 * m * n, temps, stream))
            cumulative = int(plan["list_type"]) == 0

            def epilogue(flag: int) -> None:
                prog = Program()
                ends = self._ends_step(prog, group_list, groups, m, cumulative)
                tensors = DsqTensors(acc, ws, x_scale, None, None, None, y, scale_out)
                self.backend.quant_vllm.record_dsq(
                    prog, tensors, ends, groups, m, 0, True, True, QUANT_MAX, SWIGLU_PLAIN, KernelArgs.pointer(flag)
                )
                run_program(self.backend, prog, stream)

            runner.execute(
                stream,
                lambda _temps: runner.m_groups(x, views, acc),
                runner.gemm(D.ACL_INT8, None, D.ACL_INT32),
                group_list,
                int(plan["list_type"]),
                f"{launch.spec.name}: groupList is inconsistent with the rows of x",
                epilogue,
            )
        finally:
            for address in temps:
                self.backend.provider.free_async(address, stream)

    # ------------------------------------------------------------------ QuantGroupedMatmulDequant
    def _dequant(self, launch: Launch) -> None:
        plan = launch.plan["gmm_quant"]
        x, out = launch_tensor(launch, "x"), launch_tensor(launch, "out")
        ws, group_list = launch_tensor(launch, "weightScale"), launch_tensor(launch, "groupList")
        x_scale, smooth = _optional(launch, "xScaleOptional"), _optional(launch, "smoothScaleOptional")
        m, k = x.view_dims
        n = out.view_dims[1]
        groups = int(plan["groups"])
        packed = bool(plan["packed"])
        stream = handle(launch.stream)
        runner = self.backend.grouped_matmul
        temps: list[int] = []
        try:
            w = self._nd(launch_tensor(launch, "weight"), temps, stream)  # [g, n, k]
            xq = _dense((m, k), D.ACL_INT8, self._temp(m * k, temps, stream))
            row_scale = self._temp(4 * m, temps, stream)
            prog = Program()
            kernel = QuantRows(smooth is not None, None if x_scale is None else x_scale.dtype)
            values: list[Any] = [KernelArgs.pointer(x.data), *longs(x.offset, *x.strides)]
            if smooth is not None:
                values += [KernelArgs.pointer(smooth.data), *longs(smooth.offset, smooth.strides[0])]
            else:
                values += [NULL, *longs(0, 0)]
            if x_scale is not None:
                per_row = x_scale.strides[0] if plan["x_mode"] == "pertoken" else 0
                values += [KernelArgs.pointer(x_scale.data), *longs(x_scale.offset, per_row)]
            else:
                values += [NULL, *longs(0, 0)]
            values += [KernelArgs.pointer(xq.data), KernelArgs.pointer(row_scale), *longs(m, k)]
            self._step(prog, kernel, self._rows_config(m, k), values)
            run_program(self.backend, prog, stream)
            # group g: x_q [m, k] @ weight[g]^T, the [k, n] view of weight[g] [n, k]
            sg, sn, sk = w.strides
            views = [view(w, (k, n), (sk, sn), w.offset + g * sg) for g in range(groups)]
            acc = _dense((m, n), D.ACL_INT32, self._temp(4 * m * n, temps, stream))

            def epilogue(flag: int) -> None:
                epi = Program()
                ends = self._ends_step(epi, group_list, groups, m, cumulative=True)
                values = [KernelArgs.pointer(acc.data), KernelArgs.pointer(ws.data), *longs(ws.offset, *ws.strides)]
                values += [KernelArgs.pointer(row_scale), KernelArgs.pointer(out.data)]
                values += longs(out.offset, *out.strides)
                values += [ends, *longs(groups, m * n, n), KernelArgs.pointer(flag)]
                self._step(epi, Dequant(packed), self.backend.elementwise_config(m * n, 1), values)
                run_program(self.backend, epi, stream)

            runner.execute(
                stream,
                lambda _temps: runner.m_groups(xq, views, acc),
                runner.gemm(D.ACL_INT8, None, D.ACL_INT32),
                group_list,
                0,
                f"{launch.spec.name}: groupList is inconsistent with the rows of x",
                epilogue,
            )
        finally:
            for address in temps:
                self.backend.provider.free_async(address, stream)


RUNNER = GmmQuantRunner

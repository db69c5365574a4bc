"""The GEMM variants on the GPU, each composed from launches that exist (no GEMM kernel of their own).

* TransposeBatchMatMul: the permutes are strided views, so the call is one BatchMatMul / Matmul of the
  matmul family (cuBLASLt / hipBLASLt, or its gathers where a view has no BLAS form) straight into
  ``out``'s permuted view (batchSplitFactor's column blocks are a 4-D view of it). With ``scale`` the
  product goes to a float32 temporary laid out as (M, B*N) and the quantised matmuls' epilogue kernel
  scales, rounds and saturates it into the INT8 ``out``.
* TransposeQuantBatchMatMul: one QuantMatmulV5 call (per-token x1Scale, per-channel x2Scale) over the
  permuted views: the fp8 BLAS path where the device has one, else dequantise-then-GEMM.
* QuantMatmulWeightNz, WeightQuantBatchMatmulNz, GroupedMatmulWeightNz: the FRACTAL_NZ weight is
  gathered into a dense ND temporary by the layout family's NZ copy (stream-ordered), then the base
  operator's runner (QuantMatmulV5, WeightQuantBatchMatmulV2, GroupedMatmulV5) runs on it.
* GroupedMatmul (V1): its host group list sizes every group, so each group is one independent row of
  the grouped GEMM's descriptor table (:meth:`GroupedMatmulRunner.independent`) and one launch of
  its kernels computes all of them.

Nothing is read back to the host; temporaries are stream-ordered, so every call can be captured.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from acl_core.backend import Kernel, Launch
from acl_core.dtypes import DataType as D
from acl_core.formats import Format
from acl_core.spec.ops import get_spec
from acl_core.tensor import AclTensor, contiguous_strides
from acl_rocm.driver import handle
from acl_rocm.launch import launch_tensor
from acl_rocm.ops.grouped_matmul import GroupPlan
from acl_rocm.ops.program import Program, run_program
from acl_rocm.ops.quant_matmul import Epilogue

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

ND = Format.ACL_FORMAT_ND
OPS: tuple[str, ...] = (
    "TransposeBatchMatMul",
    "TransposeQuantBatchMatMul",
    "QuantMatmulWeightNz",
    "WeightQuantBatchMatmulNz",
    "GroupedMatmulWeightNz",
    "GroupedMatmul",
)


def view(t: AclTensor, dims: Sequence[int], strides: Sequence[int], offset: int | None = None) -> AclTensor:
    """Another view of ``t``'s storage (same data, dtype, format and storage dims)."""
    return AclTensor(
        tuple(dims), t.dtype, tuple(strides), t.offset if offset is None else offset, t.format, t.storage_dims, t.data
    )


def permute(t: AclTensor, perm: Sequence[int]) -> AclTensor:
    """The view whose dim i is dim perm[i] of ``t``."""
    return view(t, [t.view_dims[p] for p in perm], [t.strides[p] for p in perm])


def split_batch(t: AclTensor, parts: int) -> AclTensor:
    """A (B, R, C) view as (parts, B/parts, R, C)."""
    b, r, c = t.view_dims
    sb, sr, sc = t.strides
    return view(t, (parts, b // parts, r, c), (sb * (b // parts), sb, sr, sc))


def rows(t: AclTensor, start: int, end: int) -> AclTensor:
    """Rows [start, end) of a 2-D view."""
    return view(t, (end - start, t.view_dims[1]), t.strides, t.offset + start * t.strides[0])


def _members(value: Any) -> tuple[AclTensor, ...]:
    return value if isinstance(value, tuple) else ()


class MatmulVariantsRunner:
    """The GEMM variants, composed from the matmul, quant_matmul, grouped_matmul and layout runners."""

    def __init__(self, backend: RocmBackend) -> None:
        self.backend = backend

    def kernels(self) -> dict[str, Kernel]:
        """A kernel per op; none where the BLAS they compose is missing (GroupedMatmul needs none)."""
        kernels: dict[str, Kernel] = {
            "GroupedMatmul": self._grouped_v1,
            "GroupedMatmulWeightNz": self._grouped_nz,
        }
        if self.backend.matmul.unavailable() is None:
            kernels |= {
                "TransposeBatchMatMul": self._transpose_batch_matmul,
                "TransposeQuantBatchMatMul": self._transpose_quant_batch_matmul,
                "QuantMatmulWeightNz": self._quant_nz,
                "WeightQuantBatchMatmulNz": self._weight_quant_nz,
            }
        return kernels

    # ------------------------------------------------------------------ helpers
    def _launch_as(
        self, launch: Launch, op: str, args: dict[str, Any], plan: dict[str, Any], *, temporaries: bool = False
    ) -> Launch:
        """A call of ``op`` on the same stream. Its launch memo lives inside this call's (the same addresses),
        unless some of its tensors are ``temporaries`` of this call: then it gets a fresh one."""
        memo = {} if temporaries else launch.memo.setdefault(f"rocm.matmul_variants.{op}", {})
        return Launch(get_spec(op), args, plan, 0, 0, launch.stream, memo)

    def _dense_from_nz(self, src: AclTensor, stream: int, temps: list[int]) -> AclTensor:
        """A contiguous ND temporary holding NZ tensor ``src``'s logical values (its view dims)."""
        dims = tuple(src.view_dims)
        item = max(src.dtype.info.storage_bits // 8, 1)
        address = self.backend.provider.malloc_async(max(math.prod(dims), 1) * item, stream)
        temps.append(address)
        dense = AclTensor(dims, src.dtype, contiguous_strides(dims), 0, ND, dims, address)
        prog = Program()
        self.backend.layout.record_from_nz(prog, src, dense, address)
        run_program(self.backend, prog, stream)
        return dense

    def _free(self, temps: list[int], stream: int) -> None:
        for address in temps:
            self.backend.provider.free_async(address, stream)

    # ------------------------------------------------------------------ permuted batch matmuls
    def _transpose_batch_matmul(self, launch: Launch) -> None:
        args = launch.args
        out = launch_tensor(launch, "out")
        if out.numel == 0:
            return
        a = permute(launch_tensor(launch, "x1"), args["permX1"])  # (B, M, K)
        b = permute(launch_tensor(launch, "x2"), args["permX2"])  # (B, K, N)
        batch, m, _ = a.view_dims
        n = b.view_dims[2]
        plan = {"compute": launch.plan["compute"], "precision": launch.plan.get("precision")}
        scale = args.get("scale")
        if scale is None:
            split = int(args["batchSplitFactor"])
            if split == 1:
                y = permute(out, (1, 0, 2))  # out (M, B, N) as (B, M, N)
                self.backend.matmul.run(self._launch_as(launch, "BatchMatMul", {"self": a, "mat2": b, "out": y}, plan))
                return
            so0, so1, so2 = out.strides  # out (split, M, B/split*N): y[b, m, n] = out[b // c, m, (b % c)*N + n]
            y4 = view(out, (split, batch // split, m, n), (so0, n * so2, so1, so2))
            args4 = {"self": split_batch(a, split), "mat2": split_batch(b, split), "out": y4}
            self.backend.matmul.run(self._launch_as(launch, "Matmul", args4, plan))
            return
        assert isinstance(scale, AclTensor)
        stream = handle(launch.stream)
        provider = self.backend.provider
        temp = provider.malloc_async(max(m * batch * n, 1) * 4, stream)
        try:
            acc = AclTensor((batch, m, n), D.ACL_FLOAT, (n, batch * n, 1), 0, ND, (m, batch * n), temp)
            gemm = {"self": a, "mat2": b, "out": acc}
            self.backend.matmul.run(self._launch_as(launch, "BatchMatMul", gemm, plan, temporaries=True))
            target = view(out, (m, batch * n), (out.strides[0], out.strides[2]))  # out (M, 1, B*N)
            epilogue = Epilogue(target, scale=scale)
            self.backend.quant_matmul.enqueue_epilogue(epilogue, (), m, batch * n, temp, "f32", batch * n, stream)
        finally:
            provider.free_async(temp, stream)

    def _transpose_quant_batch_matmul(self, launch: Launch) -> None:
        out = launch_tensor(launch, "out")
        if out.numel == 0:
            return
        v5 = {
            "x1": permute(launch_tensor(launch, "x1"), (1, 0, 2)),  # (B, M, K)
            "x2": launch_tensor(launch, "x2"),  # (B, K, N)
            "x1Scale": launch_tensor(launch, "x1Scale"),
            "x2Scale": launch_tensor(launch, "x2Scale"),
            **dict.fromkeys(("yScale", "x1Offset", "x2Offset", "yOffset", "bias")),
            "transposeX1": False,
            "transposeX2": False,
            "groupSize": 0,
            "out": permute(out, (1, 0, 2)),  # (B, M, N)
        }
        self.backend.quant_matmul.run(self._launch_as(launch, "QuantMatmulV5", v5, {"mode": "tensor"}))

    # ------------------------------------------------------------------ FRACTAL_NZ weights
    def _quant_nz(self, launch: Launch) -> None:
        out = launch_tensor(launch, "out")
        if out.numel == 0:
            return
        stream = handle(launch.stream)
        temps: list[int] = []
        try:
            dense = self._dense_from_nz(launch_tensor(launch, "x2"), stream, temps)
            args = {**launch.args, "x2": dense}
            self.backend.quant_matmul.run(self._launch_as(launch, "QuantMatmulV5", args, launch.plan, temporaries=True))
        finally:
            self._free(temps, stream)

    def _weight_quant_nz(self, launch: Launch) -> None:
        y = launch_tensor(launch, "y")
        if y.numel == 0:
            return
        stream = handle(launch.stream)
        temps: list[int] = []
        try:
            dense = self._dense_from_nz(launch_tensor(launch, "weight"), stream, temps)
            args = {**launch.args, "weight": dense}
            call = self._launch_as(launch, "WeightQuantBatchMatmulV2", args, launch.plan, temporaries=True)
            self.backend.quant_matmul.run(call)
        finally:
            self._free(temps, stream)

    def _grouped_nz(self, launch: Launch) -> None:
        stream = handle(launch.stream)
        temps: list[int] = []
        try:
            weights = tuple(self._dense_from_nz(w, stream, temps) for w in _members(launch.args["weight"]))
            args = {k: v for k, v in launch.args.items() if k != "quantGroupSize"}
            call = self._launch_as(
                launch, "GroupedMatmulV5", {**args, "weight": weights}, launch.plan, temporaries=True
            )
            self.backend.grouped_matmul.run(call)
        finally:
            self._free(temps, stream)

    # ------------------------------------------------------------------ GroupedMatmul V1
    def _grouped_v1(self, launch: Launch) -> None:
        args = launch.args
        xs, ws, ys = _members(args["x"]), _members(args["weight"]), _members(args["y"])
        bias = _members(args.get("biasOptional"))
        ranges = launch.plan.get("row_groups")
        if len(xs) == 1 and ranges is not None:  # SMS / SMM: x's rows cut by the host group list
            xs = tuple(rows(xs[0], s, e) for s, e in ranges)
        if len(ys) == 1 and len(xs) > 1:  # SMS / MMS: one y, the groups' rows one after another
            starts = [0, *itertools.accumulate(x.view_dims[0] for x in xs)]
            ys = tuple(rows(ys[0], s, s + x.view_dims[0]) for s, x in zip(starts, xs))
        runner = self.backend.grouped_matmul
        stream = handle(launch.stream)

        def planner(temps: list[int]) -> GroupPlan:
            p = GroupPlan()
            for i, (x, w, y) in enumerate(zip(xs, ws, ys)):
                if y.numel:
                    runner.independent(p, x, w, y, bias[i] if bias else None, temps, stream)
            return p

        dtype: D = launch.plan["compute"]
        gemm = runner.gemm(dtype, bias[0].dtype if bias else None, dtype)
        runner.execute(stream, planner, gemm, None, 0, "GroupedMatmul")


RUNNER = MatmulVariantsRunner

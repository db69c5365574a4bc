"""NpuFormatCast (ND <-> FRACTAL_NZ), TransMatmulWeight and MatmulWeightNz on the GPU.

NpuFormatCast is one gather launch either way (zero padding on ND -> NZ). TransMatmulWeight tiles the
weight into a stream-ordered temporary, copies it back over the weight's storage on the stream and
then, as CANN does, rewrites the aclTensor itself (FRACTAL_NZ format, NZ storage dims); an allocation
too short for the NZ storage is refused with 161002 before anything runs. MatmulWeightNz gathers the
NZ weight into a dense ND temporary and runs the backend's matmul on it (available where the
provider's BLAS is).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from acl_core.backend import Kernel, Launch
from acl_core.errors import AclError, AclnnError, AclnnStatus
from acl_core.formats import Format
from acl_core.nz import M0, c0_for, nz_transposed
from acl_core.spec.ops.matmul import matmul_dtype
from acl_core.spec.runtime import CopyDirection
from acl_core.tensor import AclTensor, contiguous_strides
from acl_rocm.driver import handle
from acl_rocm.kernels.layout import NzCopy
from acl_rocm.launch import KernelArgs, launch_tensor, longs
from acl_rocm.ops.program import Program, Step, program_kernel, run_program

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

OPS: tuple[str, ...] = ("NpuFormatCast", "TransMatmulWeight", "MatmulWeightNz")
"""The aclnn operators this module runs (MatmulWeightNz only where the matmul family runs)."""


class LayoutRunner:
    """The private-format operators on one backend."""

    def __init__(self, backend: RocmBackend) -> None:
        self.backend = backend

    def kernels(self) -> dict[str, Kernel]:
        """A kernel per op name."""
        cast = program_kernel(self.backend, "layout", "NpuFormatCast", self._plan_format_cast)
        kernels: dict[str, Kernel] = {"NpuFormatCast": cast, "TransMatmulWeight": self._trans_weight}
        if self.backend.matmul.unavailable() is None:
            kernels["MatmulWeightNz"] = self._matmul_weight_nz
        return kernels

    # ------------------------------------------------------------------ the generic copy
    def record(
        self,
        prog: Program,
        *,
        to_nz: bool,
        nd: AclTensor,
        nd_address: int,
        nz_address: int,
        nz_base: int,
        logical: tuple[int, int],
        c0: int,
        transposed: bool = False,
    ) -> None:
        """Record one copy: ND view ``nd`` (its data at ``nd_address``) <-> NZ storage tiling a ``logical`` matrix."""
        dims = tuple(nd.view_dims)
        batch = dims[:-2]
        rows, cols = logical
        n1, c1 = -(-rows // M0), -(-cols // c0)
        total = math.prod(batch) * (c1 * n1 * M0 * c0 if to_nz else rows * cols)
        if total == 0:
            return
        kernel = NzCopy(nd.dtype.info.storage_bits, len(batch), to_nz, transposed)
        space = batch or (1,)
        bstrides = tuple(nd.strides[:-2]) or (0,)
        meta = KernelArgs.index_array([total, *space, *bstrides], "long long")
        pointers = [KernelArgs.pointer(nd_address), KernelArgs.pointer(nz_address)]
        scalars = longs(nd.offset, nz_base, rows, cols, c0, n1, c1, nd.strides[-2], nd.strides[-1])
        function = self.backend.function(kernel.source(), kernel.kernel_name)
        config = self.backend.elementwise_config(total, 1)
        prog.steps.append(Step(function, config, (meta, *pointers, *scalars)))

    # ------------------------------------------------------------------ ops
    def _plan_format_cast(self, launch: Launch) -> Program:
        src, dst = launch_tensor(launch, "srcTensor"), launch_tensor(launch, "dstTensor")
        prog = Program()
        if launch.plan["direction"] == "to_nz":
            dims = tuple(src.view_dims)
            c0 = c0_for(dst.dtype, dst.format)
            self.record(
                prog,
                to_nz=True,
                nd=src,
                nd_address=src.data,
                nz_address=dst.data,
                nz_base=dst.offset,
                logical=(dims[-2], dims[-1]),
                c0=c0,
            )
            return prog
        self.record_from_nz(prog, src, dst, dst.data)
        return prog

    def record_from_nz(self, prog: Program, src: AclTensor, nd: AclTensor, nd_address: int) -> None:
        """NZ tensor ``src`` (maybe a transposed view) into ND view ``nd``."""
        dims = tuple(src.view_dims)
        transposed = nz_transposed(src)
        logical = (dims[-1], dims[-2]) if transposed else (dims[-2], dims[-1])
        c0 = c0_for(src.dtype, src.format)
        self.record(
            prog,
            to_nz=False,
            nd=nd,
            nd_address=nd_address,
            nz_address=src.data,
            nz_base=src.offset,
            logical=logical,
            c0=c0,
            transposed=transposed,
        )

    def _trans_weight(self, launch: Launch) -> None:
        t = launch_tensor(launch, "mmWeightRef")
        if t.numel == 0:
            return
        c0: int = launch.plan["c0"]
        shape = tuple(launch.plan["nz_shape"])
        count = math.prod(shape)
        item = t.dtype.info.storage_bits // 8
        start = t.data + t.offset * item
        try:
            self.backend.runtime.device_range(start, count * item, "mmWeightRef's FRACTAL_NZ storage")
        except AclError as exc:
            raise AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, exc.message) from None
        stream = handle(launch.stream)
        provider = self.backend.provider
        temp = provider.malloc_async(count * item, stream)
        try:
            prog = Program()
            dims = tuple(t.view_dims)
            self.record(
                prog,
                to_nz=True,
                nd=t,
                nd_address=t.data,
                nz_address=temp,
                nz_base=0,
                logical=(dims[-2], dims[-1]),
                c0=c0,
            )
            run_program(self.backend, prog, stream)
            provider.memcpy(start, temp, count * item, CopyDirection.DEVICE_TO_DEVICE, stream)
        finally:
            provider.free_async(temp, stream)
        # CANN rewrites the aclTensor itself (aclnn_trans_matmul_weight.cpp: SetStorageShape / SetStorageFormat)
        t.storage_dims = shape
        t.format = Format.ACL_FORMAT_FRACTAL_NZ
        t.__dict__.pop("layout", None)  # the cached layout key describes the old ND storage

    def _matmul_weight_nz(self, launch: Launch) -> None:
        a, b, out = launch_tensor(launch, "self"), launch_tensor(launch, "mat2"), launch_tensor(launch, "out")
        if out.numel == 0:
            return
        stream = handle(launch.stream)
        provider = self.backend.provider
        dims = tuple(b.view_dims)
        item = b.dtype.info.storage_bits // 8
        temp = provider.malloc_async(max(math.prod(dims), 1) * item, stream)
        try:
            dense = AclTensor(dims, b.dtype, contiguous_strides(dims), 0, Format.ACL_FORMAT_ND, dims, temp)
            prog = Program()
            self.record_from_nz(prog, b, dense, temp)
            run_program(self.backend, prog, stream)
            plan: dict[str, Any] = {"compute": matmul_dtype(a.dtype, b.dtype, ("self", "mat2"))}
            plan["precision"] = launch.plan.get("precision")
            args = {"self": a, "mat2": dense, "out": out}
            self.backend.matmul.run(Launch(launch.spec, args, plan, 0, 0, launch.stream))
        finally:
            provider.free_async(temp, stream)


RUNNER = LayoutRunner

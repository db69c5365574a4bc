"""The optimizer family on the GPU: ApplyAdamW and ApplyAdamWV2, one launch of the AdamW step kernel.

The state tensors (var, m, v, grad and the amsgrad maximum) share one shape, so their strides coalesce
into one geometry; the hyper-parameters stay on the device (V1's tensors, V2's ``step``) or travel as
kernel arguments (V2's float attributes). Nothing passes through the host, so both capture.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any

from acl_core.backend import Kernel, Launch
from acl_core.tensor import AclTensor
from acl_rocm.kernels.optim import OPERANDS, V1_SCALARS, AdamW
from acl_rocm.launch import KernelArgs, launch_tensor
from acl_rocm.ops.program import Program, program_kernel
from acl_rocm.ops.sort import Sorter, address
from acl_rocm.views import coalesce

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

OPS: tuple[str, ...] = ("ApplyAdamW", "ApplyAdamWV2")
"""The aclnn operators this module runs."""
_MAX = {"ApplyAdamW": "maxGradNormOptional", "ApplyAdamWV2": "maxGradNormOptionalRef"}
_V2_FLOATS = ("lr", "weightDecay", "beta1", "beta2", "eps")


class OptimRunner:
    """ApplyAdamW and ApplyAdamWV2 on one backend."""

    def __init__(self, backend: RocmBackend) -> None:
        self.backend = backend
        self.sorter = Sorter(backend)

    def kernels(self) -> dict[str, Kernel]:
        """A kernel per op name."""
        return {name: program_kernel(self.backend, "optim", name, self._adamw) for name in OPS}

    def _adamw(self, launch: Launch) -> Program:
        op = launch.spec.name
        var = launch_tensor(launch, "varRef")
        vmax = launch.args.get(_MAX[op])
        amsgrad = bool(launch.args["amsgrad"]) and isinstance(vmax, AclTensor)
        state = [var, *(launch_tensor(launch, n) for n in ("mRef", "vRef", "grad"))]
        state.append(vmax if amsgrad and isinstance(vmax, AclTensor) else var)  # unread without amsgrad
        prog = Program()
        if var.numel == 0:
            return prog
        geometry = coalesce(var.view_dims, [t.strides for t in state])
        shape, strides = list(geometry.shape), [list(row) for row in geometry.strides]
        version = 2 if op == "ApplyAdamWV2" else 1
        if version == 1:
            scalars = [launch_tensor(launch, n) for n in V1_SCALARS]
        else:
            scalars = [launch_tensor(launch, "step")]
        kernel = AdamW(
            var.dtype,
            version,
            amsgrad,
            bool(launch.args["maximize"]),
            len(shape),
            tuple(t.dtype for t in scalars),
        )
        assert len(strides) == len(OPERANDS)
        args: list[Any] = [self.sorter.meta(var.numel, shape, strides)]
        args += [KernelArgs.pointer(address(t)) for t in state]
        args += [KernelArgs.pointer(address(t)) for t in scalars]
        if version == 2:
            args += [ctypes.c_float(float(launch.args[n])) for n in _V2_FLOATS]
        self.sorter.step(prog, kernel, self.sorter.flat_config(var.numel), args)
        return prog


RUNNER = OptimRunner

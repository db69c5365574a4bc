"""The optimizer family on the GPU: ApplyAdamW and ApplyAdamWV2, one launch of the AdamW step kernel.

The state tensors (var, m, v, grad and the amsgrad maximum) share one shape, so their strides coalesce
into one geometry; the hyper-parameters stay on the device (V1's tensors, V2's ``step``) or travel as
kernel arguments (V2's float attributes). Nothing passes through the host, so both capture.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any

from acl_core.backend import Kernel, Launch
from acl_core.errors import AclnnError, AclnnStatus
from acl_core.tensor import AclTensor
from acl_rocm.kernels.optim import OPERANDS, V1_SCALARS, AdamW
from acl_rocm.launch import KernelArgs, launch_tensor
from acl_rocm.ops.program import Program, program_kernels
from acl_rocm.ops.sort import Sorter, address
from acl_rocm.views import coalesce

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

OPS: tuple[str, ...] = ("ApplyAdamW", "ApplyAdamWV2")
"""The aclnn operators this module runs."""
_MAX = {"ApplyAdamW": "maxGradNormOptional", "ApplyAdamWV2": "maxGradNormOptionalRef"}
_V2_FLOATS = ("lr", "weightDecay", "beta1", "beta2", "eps")
CONFIG_ENV = "ACL_ADAMW_CONFIG"
"""The AdamW step's access pattern: ``scalar`` (a thread per element a trip) or ``vec`` (the default: ApplyAdamWV2 over
256 MiB at 1.07x torch's fused AdamW time against scalar's 1.41 on an H100, 2026-12-06; a thread per 4 elements a
trip, each operand one aligned access, every load of a trip before its stores, where the geometry is 1-D unit-stride
and the addresses allow; elsewhere ``scalar``). ``vecbits`` (the state widened to double in integer operations:
1.25x) was measured and dropped. The values are the same bit for bit."""
CONFIGS = ("scalar", "vec")
VEC_ELEMENTS = 4


class OptimRunner:
    """ApplyAdamW and ApplyAdamWV2 on one backend."""

    def __init__(self, backend: RocmBackend) -> None:
        self.backend = backend
        self.sorter = Sorter(backend)
        self.forced_config: str | None = None
        """A :data:`CONFIG_ENV` setting over the environment's for calls made while set (tests, bench A/B)."""

    def config(self) -> str:
        """The :data:`CONFIG_ENV` access pattern (``scalar`` unless set; bad values are refused)."""
        value = (self.forced_config or self.backend.environ.get(CONFIG_ENV, "") or "vec").strip().lower()
        if value not in CONFIGS:
            raise AclnnError(
                AclnnStatus.ACLNN_ERR_PARAM_INVALID, f"{CONFIG_ENV}={value!r}: expected one of {', '.join(CONFIGS)}"
            )
        return value

    def vector(self, shape: list[int], strides: list[list[int]], state: list[AclTensor]) -> int:
        """Elements a thread takes a trip: :data:`VEC_ELEMENTS` (2 for double) under ``vec`` on a 1-D unit-stride
        geometry whose every operand address is a multiple of the access, else 1."""
        if self.config() == "scalar" or len(shape) != 1 or any(row[0] != 1 for row in strides):
            return 1
        item = state[0].dtype.info.storage_bits // 8
        vec = min(VEC_ELEMENTS, 16 // max(item, 1))
        if vec <= 1 or any(address(t) % (vec * item) for t in state):
            return 1
        return vec

    def kernels(self) -> dict[str, Kernel]:
        """A kernel per op name."""
        return program_kernels(self.backend, "optim", dict.fromkeys(OPS, self._adamw), lambda: self.forced_config)

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
            self.vector(shape, strides, state),
        )
        assert len(strides) == len(OPERANDS)
        args: list[Any] = [self.sorter.meta(var.numel, shape, strides)]
        args += [KernelArgs.pointer(address(t)) for t in state]
        args += [KernelArgs.pointer(address(t)) for t in scalars]
        if version == 2:
            args += [ctypes.c_float(float(launch.args[n])) for n in _V2_FLOATS]
        self.sorter.step(prog, kernel, self.sorter.flat_config(max(var.numel // kernel.vec, 1)), args)
        return prog


RUNNER = OptimRunner

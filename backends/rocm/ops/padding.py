"""Padding on the GPU: one kernel launch per call (:mod:`acl_rocm.kernels.padding`), no temporaries, no host copies.

A forward op runs one thread per output element copying the input element it maps to; a backward op one
thread per input element gathering the gradients that read it (deterministic, no atomics). The kernel, its
launch configuration and its packed arguments are planned once per signature and kept in ``launch.memo``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from acl_core.backend import Kernel, Launch
from acl_core.spec.ops.padding import BY_NAME, Pad, PadGeometry
from acl_core.tensor import AclTensor
from acl_rocm.driver import handle
from acl_rocm.kernels.padding import PadKernel
from acl_rocm.launch import KernelArgs
from acl_rocm.ops.binding import family_key, memo_plan, named_kernels
from acl_rocm.ops.elementwise import Prepared
from acl_rocm.ops.view_args import address, index_type, plane_meta, reach

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

OPS: tuple[str, ...] = tuple(sorted(BY_NAME))
"""The aclnn operators this module runs."""


def plan_meta(geo: PadGeometry, read: AclTensor, written: AclTensor) -> list[int]:
    """The kernel's Meta fields in order: ``n``, the scalars, then the per-dim rows (kernels.padding.SCALARS / ROWS)."""
    s = geo.spatial
    meta = plane_meta(read, written, s, geo.lead[-1])
    meta += [*geo.before, *geo.after, *geo.lengths, *geo.sizes, *read.strides[-s:], *written.strides[-s:]]
    return meta


class PaddingRunner:
    """Turns padding-family Launches into one kernel launch each."""

    def __init__(self, backend: RocmBackend) -> None:
        self.backend = backend

    def kernels(self) -> dict[str, Kernel]:
        """A kernel per padding op."""
        return named_kernels(OPS, self._run)

    def _run(self, op: str, launch: Launch) -> None:
        key = family_key(self.backend, "padding")
        bound = memo_plan(launch, key, lambda: self.backend.elementwise.bind(self.plan(*BY_NAME[op], launch)))
        bound(handle(launch.stream))  # a signature holds the tensors' addresses: its launch is bound once

    def plan(self, pad: Pad, backward: bool, launch: Launch) -> Prepared | None:
        """The kernel, its configuration and its packed arguments for one signature (None: an empty batch)."""
        geo: PadGeometry = launch.plan["pad_geometry"]
        read = launch.args["gradOutput" if backward else "self"]
        written = launch.args["gradInput" if backward else "out"]
        assert isinstance(read, AclTensor) and isinstance(written, AclTensor)
        meta = plan_meta(geo, read, written)
        if meta[0] == 0:
            return None
        idx = index_type(meta[0], reach(read), reach(written))
        kernel = PadKernel(pad.mode, backward, geo.spatial, read.dtype, idx)
        function = self.backend.function(kernel.source(), kernel.kernel_name)
        values: list[Any] = [KernelArgs.index_array(meta, idx)]
        values += [KernelArgs.pointer(address(read)), KernelArgs.pointer(address(written))]
        return Prepared(function, self.backend.elementwise_config(meta[0], 1), KernelArgs(values))


RUNNER = PaddingRunner

"""The serving family on the GPU: ApplyTopKTopP and AttentionUpdate.

ApplyTopKTopP: the row sorter orders each row ascending (stable, NaN last, as the reference), a
check kernel flags a ``k`` outside ``[1, vocab]`` (161002 at synchronisation, nothing written), and
one block per row applies both filters from the sorted positions (:mod:`acl_rocm.kernels.serving`).
AttentionUpdate: one launch; the ``sp`` partial results' addresses and strides travel in a table.
Nothing passes through the host, so both capture.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any

from acl_core.backend import Kernel, Launch
from acl_core.tensor import AclTensor
from acl_rocm.kernels.serving import AttentionUpdate, TopKCheck, TopKTopP
from acl_rocm.launch import KernelArgs, LaunchConfig, launch_tensor, longs
from acl_rocm.ops.program import FLAG, Program, program_kernels
from acl_rocm.ops.sort import BLOCKS_PER_UNIT, Sorter, address

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

OPS: tuple[str, ...] = ("ApplyTopKTopP", "AttentionUpdate")
"""The aclnn operators this module runs."""


def _p(t: AclTensor) -> ctypes.c_void_p:
    return KernelArgs.pointer(address(t))


class ServingRunner:
    """ApplyTopKTopP and AttentionUpdate on one backend."""

    def __init__(self, backend: RocmBackend) -> None:
        self.backend = backend
        self.sorter = Sorter(backend)

    def kernels(self) -> dict[str, Kernel]:
        """A kernel per op name."""
        plans = {"ApplyTopKTopP": self._top_k_top_p, "AttentionUpdate": self._attention_update}
        return program_kernels(self.backend, "serving", plans)

    def _rows(self, rows: int) -> int:
        p = self.backend.properties
        return min(max(rows, 1), p.compute_units * BLOCKS_PER_UNIT, p.max_grid_x)

    def _top_k_top_p(self, launch: Launch) -> Program:
        logits, out = launch_tensor(launch, "logits"), launch_tensor(launch, "out")
        p, k = launch.args.get("p"), launch.args.get("k")
        prog = Program()
        batch, vocab = logits.view_dims
        if batch * vocab == 0:
            return prog
        s = self.sorter
        s.check_length("ApplyTopKTopP", vocab)
        s0, s1 = logits.strides
        _, pos = s.sort_tensor(prog, logits.dtype, False, address(logits), batch, (batch,), (s0,), vocab, (1, s1, 0))
        rows = s.meta(batch, (batch,), [(0,)])
        if isinstance(k, AclTensor):
            prog.report = f"ApplyTopKTopP: k values must lie in [1, {vocab}]"
            s.step(prog, TopKCheck(), s.flat_config(batch), [rows, _p(k), FLAG, *longs(k.strides[0], vocab)])
        else:
            prog.report = "ApplyTopKTopP: no k to check"  # the flag stays clear
        kernel = TopKTopP(logits.dtype, isinstance(k, AclTensor), isinstance(p, AclTensor))
        args: list[Any] = [rows, _p(logits), pos, _p(out), FLAG]
        if isinstance(k, AclTensor):
            args.append(_p(k))
        if isinstance(p, AclTensor):
            args.append(_p(p))
        k_stride = k.strides[0] if isinstance(k, AclTensor) else 0
        p_stride = p.strides[0] if isinstance(p, AclTensor) else 0
        args += longs(vocab, s0, s1, *out.strides, k_stride, p_stride)
        s.step(prog, kernel, LaunchConfig((self._rows(batch), 1, 1), (256, 1, 1)), args)
        return prog

    def _attention_update(self, launch: Launch) -> Program:
        lse, local = launch.args["lse"], launch.args["localOut"]
        out = launch_tensor(launch, "out")
        lse_out = launch.args.get("lseOut")
        assert isinstance(lse, tuple) and isinstance(local, tuple)
        prog = Program()
        rows, head_dim = out.view_dims
        if rows * head_dim == 0:
            return prog
        table: list[int] = []
        for a, o in zip(lse, local):
            table += [address(a), a.strides[0], address(o), *o.strides]
        s = self.sorter
        kernel = AttentionUpdate(out.dtype, len(lse), isinstance(lse_out, AclTensor))
        args: list[Any] = [s.meta(rows * head_dim, (1,), [(0,)]), KernelArgs.index_array(table, "long long"), _p(out)]
        if isinstance(lse_out, AclTensor):
            args.append(_p(lse_out))
        args += longs(head_dim, *out.strides, lse_out.strides[0] if isinstance(lse_out, AclTensor) else 0)
        s.step(prog, kernel, s.flat_config(rows * head_dim), args)
        return prog


RUNNER = ServingRunner

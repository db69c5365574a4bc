"""The linear-attention family on the GPU: RecurrentGatedDeltaRule.

One program per signature (:mod:`acl_rocm.ops.program`): the check kernel validates the device-side
lengths, accepted counts and slots into the run's flag (161002 at synchronisation), then the
recurrence kernel (:mod:`acl_rocm.kernels.linear_attention`) carries each state row through its
sequence in registers and writes ``out`` and the state after every token, unless the flag is set.
Every tensor is read through its strides; nothing is copied or read back to the host.
"""

from __future__ import annotations

import ctypes
import threading
from typing import TYPE_CHECKING, Any

from acl_core.backend import Kernel, Launch
from acl_core.tensor import AclTensor
from acl_rocm.kernels.linear_attention import (
    CHECK_THREADS,
    RGDR_THREADS,
    ROWS_PER_BLOCK,
    RgdrInstance,
    RgdrMeta,
    rgdr_source,
)
from acl_rocm.launch import KernelArgs, LaunchConfig
from acl_rocm.ops.program import FLAG, Program, Step, program_kernel

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

OPS: tuple[str, ...] = ("RecurrentGatedDeltaRule",)


def _address(t: AclTensor | None) -> ctypes.c_void_p:
    if t is None:
        return ctypes.c_void_p(0)
    return KernelArgs.pointer(t.data + t.offset * (t.dtype.info.storage_bits // 8))


class LinearAttentionRunner:
    """Turns RecurrentGatedDeltaRule launches into its check and recurrence kernels."""

    def __init__(self, backend: RocmBackend) -> None:
        self.backend = backend
        self._lock = threading.Lock()
        self._sources: dict[tuple[RgdrInstance, str], str] = {}

    def kernels(self) -> dict[str, Kernel]:
        """A kernel per op name."""
        return {"RecurrentGatedDeltaRule": program_kernel(self.backend, "linear_attention", "RGDR", self._plan)}

    def _function(self, inst: RgdrInstance, which: str) -> object:
        src = self._sources.get((inst, which))
        if src is None:
            src = rgdr_source(inst, which)
            with self._lock:
                self._sources[(inst, which)] = src
        return self.backend.function(src, inst.check_name if which == "check" else inst.step_name)

    def _plan(self, launch: Launch) -> Program:
        a = launch.args
        q, k, v, beta, state = (a[n] for n in ("query", "key", "value", "beta", "stateRef"))
        lens, slots, accepted, out = (a[n] for n in ("actualSeqLengths", "ssmStateIndices", "numAcceptedTokens", "out"))
        g, gk = a["g"], a["gk"]
        for t in (q, k, v, beta, state, lens, slots, accepted, out):
            assert isinstance(t, AclTensor)
        tokens, nk, dk = q.view_dims
        nv, dv = v.view_dims[1], v.view_dims[2]
        batch = lens.view_dims[0]
        row_blocks = -(-dv // ROWS_PER_BLOCK)
        zero3 = (0, 0, 0)
        g_st = g.strides if isinstance(g, AclTensor) else (0, 0)
        gk_st = gk.strides if isinstance(gk, AclTensor) else zero3
        meta = RgdrMeta(
            tokens, batch, nv, dv, state.view_dims[0], nv // nk, row_blocks,
            *q.strides, *k.strides, *v.strides, *beta.strides, *g_st, *gk_st, *state.strides, *out.strides,
            lens.strides[0], slots.strides[0], accepted.strides[0],
            int(isinstance(g, AclTensor)), int(isinstance(gk, AclTensor)),
        )  # fmt: skip
        packed = KernelArgs.index_array(meta.values(), "long long")
        inst = RgdrInstance(dk)
        prog = Program(
            report="RecurrentGatedDeltaRule: actualSeqLengths, numAcceptedTokens or ssmStateIndices out of range"
        )
        pointers = (_address(lens), _address(slots), _address(accepted))
        check = Step(
            self._function(inst, "check"), LaunchConfig((1, 1, 1), (CHECK_THREADS, 1, 1)), (packed, *pointers, FLAG)
        )
        prog.steps.append(check)
        values: tuple[Any, ...] = (
            packed,
            ctypes.c_double(float(a["scaleValue"])),
            *(_address(t) for t in (q, k, v, beta, g if isinstance(g, AclTensor) else None)),
            _address(gk if isinstance(gk, AclTensor) else None),
            _address(state),
            *pointers,
            _address(out),
            FLAG,
        )
        grid = batch * nv * row_blocks
        prog.steps.append(Step(self._function(inst, "step"), LaunchConfig((grid, 1, 1), (RGDR_THREADS, 1, 1)), values))
        return prog


RUNNER = LinearAttentionRunner

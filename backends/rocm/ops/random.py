"""The random family on the GPU: one launch per call, drawing the reference's Philox stream bit for bit.

Fills (InplaceUniform, InplaceNormal, Bernoulli and its in-place twin) and DropoutDoMask walk their
view in C order; DropoutGenMask(V2) writes a byte per thread; Multinomial runs a thread per draw
with replacement and a thread per row without (its chosen flags in a zeroed stream-ordered
temporary). Multinomial's weights are checked on the device: a negative, infinite or NaN weight, a
zero row, or too few positive weights without replacement set the flag reported as 161002 at
synchronisation. Its serial scan of a row is correct, not fast, for very long rows.
"""

from __future__ import annotations

import ctypes
import logging
from typing import TYPE_CHECKING

import numpy as np

from acl_core.backend import Kernel, Launch
from acl_core.dtypes import DataType as D
from acl_core.errors import AclError, AclErrorCode
from acl_core.spec.ops.random import fill_layout
from acl_core.tensor import AclTensor
from acl_rocm.kernels.random import NORMAL_TRIG, DoMask, Fill, GenMask, Multinomial, round_keys
from acl_rocm.launch import KernelArgs, launch_tensor, longs
from acl_rocm.ops.program import FLAG, Program, Step, program_kernels
from acl_rocm.ops.sort import address
from acl_rocm.views import coalesce

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

LOG = logging.getLogger("acl_rocm.random")
OPS: tuple[str, ...] = ("InplaceUniform", "InplaceNormal", "Bernoulli", "DropoutGenMask", "DropoutGenMaskV2")
OPS += ("DropoutDoMask", "Multinomial")
"""The kernels this module runs (InplaceBernoulli runs Bernoulli's)."""
TRIG_ENV = "ACL_RANDOM_NORMAL"
"""A packed InplaceNormal pair's transform: ``float32p`` (the default: Box–Muller in float32 with polynomials for
the library calls, four Philox blocks a thread; float32 and 16-bit outputs, float64 ones take ``split``, logged),
``split`` (double cos and sin: bit for bit the reference), ``sincos`` (one double call) or ``float32`` (Box–Muller in
float32 through the library calls); InplaceNormal's accuracy class holds for each (kernels/random.py's NORMAL_TRIG)."""
REFUSED = "Multinomial: self holds a negative, infinite or NaN weight, a zero row, or too few positive weights"
"""The 161002 message of Multinomial's device check."""


class AclRnd(ctypes.Structure):
    """The kernels' ``AclRnd``: the seed and offset as 32-bit halves."""

    _fields_ = [("seed_lo", ctypes.c_uint32), ("seed_hi", ctypes.c_uint32)]
    _fields_ += [("off_lo", ctypes.c_uint32), ("off_hi", ctypes.c_uint32)]


class AclRndKeys(ctypes.Structure):
    """The float32p kernels' ``AclRndKeys``: the 20 round keys (kernels/random.py round_keys) and the offset."""

    _fields_ = [("k", ctypes.c_uint32 * 20), ("off_lo", ctypes.c_uint32), ("off_hi", ctypes.c_uint32)]


def stream_keys(seed: int, offset: int) -> AclRndKeys:
    """The (seed, offset) argument of a kernel on precomputed round keys."""
    g = stream_args(seed, offset)
    return AclRndKeys((ctypes.c_uint32 * 20)(*round_keys(g.seed_lo, g.seed_hi)), g.off_lo, g.off_hi)


def stream_args(seed: int, offset: int) -> AclRnd:
    """The (seed, offset) argument of every kernel here (two's complement for negative int64 values)."""
    s, o = int(seed) % 2**64, int(offset) % 2**64
    return AclRnd(s & 0xFFFFFFFF, s >> 32, o & 0xFFFFFFFF, o >> 32)


class RandomRunner:
    """The random family on one backend."""

    def __init__(self, backend: RocmBackend) -> None:
        self.backend = backend
        self.forced_trig: str | None = None
        """A :data:`TRIG_ENV` setting over the environment's for calls planned while set (the bench's rows)."""

    def normal_trig(self) -> str:
        """How packed normal pairs take their sine and cosine (:data:`TRIG_ENV`; unset: the first of NORMAL_TRIG)."""
        value = (self.forced_trig or self.backend.environ.get(TRIG_ENV, "")).strip() or next(iter(NORMAL_TRIG))
        if value not in NORMAL_TRIG:
            raise AclError(
                AclErrorCode.ACL_ERROR_INVALID_PARAM, f"{TRIG_ENV}={value!r}: not one of {tuple(NORMAL_TRIG)}"
            )
        return value

    def trig_alternatives(self) -> tuple[str, ...]:
        """The :data:`TRIG_ENV` choices worth timing beside the default (the ops bench's extra InplaceNormal rows)."""
        return tuple(NORMAL_TRIG)[1:]

    def kernels(self) -> dict[str, Kernel]:
        """A kernel per op name."""
        plans = {
            "InplaceUniform": self._uniform,
            "InplaceNormal": self._normal,
            "Bernoulli": self._bernoulli,
            "DropoutGenMask": self._gen_mask,
            "DropoutGenMaskV2": self._gen_mask,
            "DropoutDoMask": self._do_mask,
            "Multinomial": self._multinomial,
        }
        return program_kernels(self.backend, "random", plans)

    def _meta(self, t: AclTensor, *others: AclTensor) -> tuple[ctypes.Array[ctypes.c_longlong], int]:
        """Meta over the coalesced geometry (a contiguous view is rank 1: no index unravel), and its rank."""
        geometry = coalesce(t.view_dims, [v.strides for v in (t, *others)])
        shape = tuple(geometry.shape) or (1,)
        rows = [tuple(row) or (0,) for row in geometry.strides]
        array = KernelArgs.index_array([t.numel, *shape, *(s for row in rows for s in row)], "long long")
        return array, len(shape)

    def _step(self, prog: Program, kernel: Fill | GenMask | DoMask | Multinomial, n: int, values: list[object]) -> None:
        function = self.backend.function(kernel.source(), kernel.kernel_name)
        prog.steps.append(Step(function, self.backend.elementwise_config(max(n, 1), 1), tuple(values)))

    def _fill(self, launch: Launch, name: str, kind: str, a: float, b: float) -> Program:
        t = launch_tensor(launch, name)
        prog = Program()
        if t.numel == 0:
            return prog
        meta, ndim = self._meta(t)
        layout = fill_layout() if kind in ("uniform", "normal") else "block"
        trig = self.normal_trig() if kind == "normal" and layout == "packed" else "split"
        if trig in ("float32", "float32p") and t.dtype == D.ACL_DOUBLE:
            LOG.debug("InplaceNormal float64: %s=%s is for float32 and 16-bit outputs; split taken", TRIG_ENV, trig)
            trig = "split"
        kernel = Fill(kind, t.dtype, ndim, layout, trig)
        seed, offset = launch.args["seed"], launch.args["offset"]
        g = stream_keys(seed, offset) if kernel.keyed else stream_args(seed, offset)
        values: list[object] = [meta, KernelArgs.pointer(address(t)), g, ctypes.c_double(a), ctypes.c_double(b)]
        self._step(prog, kernel, -(-t.numel // kernel.per_thread), values)
        return prog

    def _uniform(self, launch: Launch) -> Program:
        return self._fill(launch, "selfRef", "uniform", float(launch.args["from"]), float(launch.args["to"]))

    def _normal(self, launch: Launch) -> Program:
        mean, std = float(np.float32(launch.args["mean"])), float(np.float32(launch.args["std"]))
        return self._fill(launch, "selfRef", "normal", mean, std)

    def _bernoulli(self, launch: Launch) -> Program:
        prob = launch.args["prob"]
        return self._fill(launch, "out", "bernoulli", float(prob.value), 0.0)

    def _gen_mask(self, launch: Launch) -> Program:
        out = launch_tensor(launch, "out")
        prog = Program()
        if out.numel == 0:
            return prog
        numel = int(np.prod(launch.args["shape"], dtype=np.int64))
        g = stream_args(launch.args["seed"], launch.args["offset"])
        meta = KernelArgs.index_array([out.numel, out.numel, out.strides[0]], "long long")
        values: list[object] = [meta, KernelArgs.pointer(address(out)), g, *longs(numel)]
        values.append(ctypes.c_double(launch.plan["drop"]))
        self._step(prog, GenMask(), out.numel, values)
        return prog

    def _do_mask(self, launch: Launch) -> Program:
        x, mask, out = launch_tensor(launch, "self"), launch_tensor(launch, "mask"), launch_tensor(launch, "out")
        prog = Program()
        if x.numel == 0:
            return prog
        meta, ndim = self._meta(x, out)
        values: list[object] = [meta, KernelArgs.pointer(address(x)), KernelArgs.pointer(address(mask))]
        values += [*longs(mask.strides[0]), KernelArgs.pointer(address(out)), ctypes.c_float(launch.plan["scale"])]
        self._step(prog, DoMask(x.dtype, ndim), x.numel, values)
        return prog

    def _multinomial(self, launch: Launch) -> Program:
        x, out = launch_tensor(launch, "self"), launch_tensor(launch, "out")
        k, replacement = int(launch.args["numsamples"]), bool(launch.args["replacement"])
        prog = Program()
        n = x.view_dims[-1]
        rows = x.view_dims[0] if x.rank == 2 else 1
        if rows == 0:
            return prog
        rs, cs = (x.strides[0], x.strides[1]) if x.rank == 2 else (0, x.strides[0])
        os0, os1 = (out.strides[0], out.strides[1]) if out.rank == 2 else (0, out.strides[0])
        prog.report = REFUSED
        g = stream_args(launch.args["seed"], launch.args["offset"])
        values: list[object] = [g, KernelArgs.pointer(address(x)), KernelArgs.pointer(address(out)), FLAG]
        values += longs(rows, n, k, rs, cs, os0, os1)
        if not replacement:
            chosen = prog.temp(rows * n)
            prog.zeroed.append((chosen, rows * n))
            values.append(chosen)
        self._step(prog, Multinomial(x.dtype, replacement), rows * k if replacement else rows, values)
        return prog


RUNNER = RandomRunner

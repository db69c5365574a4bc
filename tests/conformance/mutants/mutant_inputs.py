"""Inputs too small and too narrow (issue 14 class 3): kernels right on small, tame, packed inputs only.

Each passes main's suite before the size tiers, special values, integer extremes, offset and
stride-0 layouts and negative-dim variants of ``acl_conformance.derived`` (largest elementwise
sample 2,145 elements, K at most 9, no subnormal, no NaN into Cast, no dim −2).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from acl_core.backend import Launch
from acl_core.spec.opspec import Role
from acl_core.tensor import AclTensor, contiguous_strides
from acl_reference.backend import ReferenceBackend
from acl_reference.call import RefCall
from tests.conformance.mutants import Mutant
from tests.conformance.planted import Kernel, replace_kernel


class _Patched(ReferenceBackend):
    """The reference with kernel ``op`` replaced by ``patch(original kernel, driver)``."""

    op = ""

    def __init__(self) -> None:
        super().__init__()
        replace_kernel(self, self.op, self.patch)

    def patch(self, original: Kernel) -> Kernel:
        """The defective kernel."""
        raise NotImplementedError


class _Rewritten(_Patched):
    """The reference kernel runs, then :meth:`rewrite` replaces some of what it wrote (the defect)."""

    def patch(self, original: Kernel) -> Kernel:
        driver = self.driver

        def kernel(launch: Launch) -> None:
            original(launch)
            self.rewrite(RefCall(launch, driver))

        return kernel

    def rewrite(self, k: RefCall) -> None:
        """Overwrite the outputs the defect gets wrong."""
        raise NotImplementedError


class PastBlockAddBackend(_Patched):
    """Add drops every element past 65,536 (a 16-bit element index): they keep whatever was there."""

    name = "mutant-add-past-64k"
    op = "Add"

    def patch(self, original: Kernel) -> Kernel:
        driver = self.driver

        def kernel(launch: Launch) -> None:
            k = RefCall(launch, driver)
            before = k.read("out").copy()
            original(launch)
            out = k.read("out").copy()
            if out.size > 65536:
                out.reshape(-1)[65536:] = before.reshape(-1)[65536:]
                k.write("out", out)

        return kernel


class LongRowSumBackend(_Rewritten):
    """ReduceSum over the last dim sums only the first 1,024 elements of a row (one block's worth)."""

    name = "mutant-reducesum-long-rows"
    op = "ReduceSum"

    def rewrite(self, k: RefCall) -> None:
        x = k.read("self")
        dims = tuple(int(d) % x.ndim for d in (k.value("dims") or ())) if x.ndim else ()
        if x.ndim and x.shape[-1] > 1024 and dims == (x.ndim - 1,):
            head = np.sum(x[..., :1024].astype(np.float64), axis=-1, keepdims=bool(k.value("keepDims")))
            k.write("out", head)


class LongKMmBackend(_Rewritten):
    """Mm accumulates only the first 256 of K (a split-K loop that stops after one slice)."""

    name = "mutant-mm-long-k"
    op = "Mm"

    def rewrite(self, k: RefCall) -> None:
        a, b = k.read("self", np.float64), k.read("mat2", np.float64)
        if a.shape[-1] > 256:
            k.write("out", a[..., :256] @ b[..., :256, :])


def _retensor(launch: Launch, change: Callable[[AclTensor], AclTensor | None]) -> Launch:
    """``launch`` with each input tensor replaced by ``change(tensor)`` where that gives one."""
    args = dict(launch.args)
    for p in launch.spec.params:
        t = args.get(p.name)
        if p.role is Role.IN and isinstance(t, AclTensor):
            args[p.name] = change(t) or t
    return dataclasses.replace(launch, args=args)


class IgnoresOffsetAddBackend(_Patched):
    """Add's flattened fast path for packed inputs of rank 2 or more reads from the start of the
    allocation, not from the view's offset (1-D views take another path; main's padded layout gives
    those an offset, never a packed multi-dim view one)."""

    name = "mutant-add-ignores-offset"
    op = "Add"

    def patch(self, original: Kernel) -> Kernel:
        def dense_at_zero(t: AclTensor) -> AclTensor | None:
            if t.offset and len(t.view_dims) >= 2 and t.strides == contiguous_strides(t.view_dims):
                return AclTensor.create(t.view_dims, t.dtype, t.strides, 0, t.format, t.storage_dims, t.data)
            return None

        return lambda launch: original(_retensor(launch, dense_at_zero))


class Stride0MulBackend(_Rewritten):
    """Mul takes an input with a zero stride for a packed one (it checks strides only for being sorted)."""

    name = "mutant-mul-stride0"
    op = "Mul"

    def rewrite(self, k: RefCall) -> None:
        tensors = {n: k[n] for n in ("self", "other")}
        if not any(0 in t.strides for t in tensors.values()):
            return
        values = {}
        for n, t in tensors.items():
            if 0 in t.strides:
                storage = k.read(n)[tuple(slice(0, 1) if s == 0 else slice(None) for s in t.strides)]
                values[n] = np.resize(storage.reshape(-1), t.view_dims)  # the storage read as if packed
            else:
                values[n] = k.read(n)
        k.write("out", values["self"] * values["other"])


class DimMinus2SoftmaxBackend(_Patched):
    """Softmax takes every negative dim for the last one (it special-cases dim < 0 as -1)."""

    name = "mutant-softmax-dim-minus-2"
    op = "Softmax"

    def patch(self, original: Kernel) -> Kernel:
        def kernel(launch: Launch) -> None:
            dim = launch.args["dim"]
            if isinstance(dim, int) and dim < -1:
                rank = len(launch.args["self"].view_dims)
                launch = dataclasses.replace(
                    launch, args={**launch.args, "dim": -1}, plan={**launch.plan, "dim": rank - 1}
                )
            original(launch)

        return kernel


class SaturatingAddBackend(_Rewritten):
    """Integer Add saturates at the dtype's limits, where CANN's (and C's unsigned) arithmetic wraps."""

    name = "mutant-add-saturates"
    op = "Add"

    def rewrite(self, k: RefCall) -> None:
        out = k.read("out")
        if out.dtype.kind not in "iu":
            return
        alpha = int(k.value("alpha") or 1)
        exact = k.read("self").astype(object) + alpha * k.read("other").astype(object)
        info = np.iinfo(out.dtype)
        k.write("out", np.clip(exact, info.min, info.max).astype(out.dtype))


class CastNanBackend(_Rewritten):
    """Cast turns NaN into 0 (a float-to-float cast done through an integer-rounding path)."""

    name = "mutant-cast-nan"
    op = "Cast"

    def rewrite(self, k: RefCall) -> None:
        x, out = k.read("self"), k.read("out")
        if x.dtype.kind == "f" and out.dtype.kind == "f" and np.isnan(x).any():
            fixed = out.copy()
            fixed[np.isnan(x.astype(np.float64))] = 0
            k.write("out", fixed)


class FlushSubnormalLogBackend(_Rewritten):
    """Log flushes subnormal inputs to zero (FTZ): log of a subnormal comes out -Inf."""

    name = "mutant-log-ftz"
    op = "Log"

    def rewrite(self, k: RefCall) -> None:
        x = k.read("self")
        if x.dtype.kind != "f":
            return
        tiny = np.finfo(x.dtype).tiny
        sub = (x != 0) & (np.abs(x) < tiny)
        if sub.any():
            out = k.read("out").copy()
            out[sub] = -np.inf
            k.write("out", out)


MUTANTS = [
    Mutant("add-past-64k", "inputs", "Add wrong past element 65,536", PastBlockAddBackend, ops="Add"),
    Mutant("reducesum-long-rows", "inputs", "ReduceSum wrong for rows over 1,024", LongRowSumBackend, ops="ReduceSum"),
    Mutant("mm-long-k", "inputs", "Mm wrong for K over 256", LongKMmBackend, ops="Mm"),
    Mutant(
        "add-ignores-offset",
        "inputs",
        "Add ignores a packed multi-dim input's view offset",
        IgnoresOffsetAddBackend,
        ops="Add",
    ),
    Mutant("mul-stride0", "inputs", "Mul reads a stride-0 input as packed", Stride0MulBackend, ops="Mul"),
    Mutant("softmax-dim-minus-2", "inputs", "Softmax wrong for dim -2", DimMinus2SoftmaxBackend, ops="Softmax"),
    Mutant("add-saturates", "inputs", "integer Add saturates instead of wrapping", SaturatingAddBackend, ops="Add"),
    Mutant("cast-nan", "inputs", "Cast maps NaN to 0", CastNanBackend, ops="Cast"),
    Mutant("log-ftz", "inputs", "Log flushes subnormal inputs to zero", FlushSubnormalLogBackend, ops="Log"),
]

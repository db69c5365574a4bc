"""The loss family on the GPU: pointwise losses as elementwise kernels, reduced ones through the row-sum kernel.

A loss with reduction 'none' and every backward op is one elementwise kernel (:mod:`acl_rocm.kernels.loss`)
writing the output's view directly; a mean's gradient divides by the term count in the kernel. A reduced
loss is a recorded program of two launches: the terms kernel computes each term (in double, rounded once
to the terms dtype) and sums its block's terms in double into one float64 partial per block (the
elementwise generator's ``reduce`` instance: the terms never go through memory), then the reduction
family's ``reduce`` row kernel sums the partials into the output (a mean dividing by the term count).
The terms dtype is float32 for the losses whose terms are never negative (an overflowed term there
means the result overflows too) and float64 for the others, where two opposite terms past float32's
range must cancel as they do in the reference. Nothing passes through the host.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from acl_core.backend import Kernel, Launch
from acl_core.dtypes import DataType as D
from acl_core.formats import Format
from acl_core.spec.kernel_args import Scalar
from acl_core.spec.ops.loss import MEAN, NONE, ROLES, ROW_OF, WRT_TARGET
from acl_core.spec.opspec import Kind
from acl_core.spec.rules import broadcast_shapes
from acl_core.tensor import AclTensor
from acl_rocm.driver import handle
from acl_rocm.kernels.elementwise import BLOCK_THREADS, UNROLL
from acl_rocm.kernels.loss import Variant, loss_ufunc
from acl_rocm.kernels.reduction import acc_dtype
from acl_rocm.ops.binding import family_key, memo_plan, named_kernels
from acl_rocm.ops.elementwise import Planned
from acl_rocm.ops.program import Program, Step, Temp, run_program
from acl_rocm.ops.reduction import Bound, bind, reduced_strides

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

OPS: tuple[str, ...] = tuple(sorted(ROW_OF))
"""The aclnn operators this module runs: every pointwise loss and its backward op."""

SLICE = BLOCK_THREADS * UNROLL
"""Terms one block of the summing terms kernel takes per trip of its grid-stride loop."""
ONE_SIGNED = frozenset({"MseLoss", "L1Loss", "SmoothL1Loss", "SoftMarginLoss"})
"""Losses whose terms are never negative: their terms may go to a float32 temporary."""


def terms_dtype(loss: str) -> D:
    """The temporary a reduced ``loss``'s terms go to (float32 where they share one sign, else float64)."""
    return D.ACL_FLOAT if loss in ONE_SIGNED else D.ACL_DOUBLE


def _contiguous(shape: Sequence[int]) -> tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def _placeholder(shape: Sequence[int], dtype: D) -> AclTensor:
    """A contiguous view at address 0 (a temporary's address replaces it in the recorded step)."""
    dims = tuple(shape)
    return AclTensor(dims, dtype, _contiguous(dims), 0, Format.ACL_FORMAT_ND, dims, 0)


class LossRunner:
    """Turns loss-family Launches into elementwise and row-sum kernel launches."""

    def __init__(self, backend: RocmBackend) -> None:
        self.backend = backend

    def kernels(self) -> dict[str, Kernel]:
        """A kernel per supported op name."""
        return named_kernels(OPS, self._run)

    def _run(self, op: str, launch: Launch) -> None:
        planned = memo_plan(launch, family_key(self.backend, "loss"), lambda: self.plan(op, launch))
        if isinstance(planned, Program):
            run_program(self.backend, planned, handle(launch.stream))
        else:
            planned(handle(launch.stream))

    def plan(self, op: str, launch: Launch) -> Program | Callable[[int], None]:
        """One call's work: a bound elementwise launch (none, backward) or a program (mean, sum)."""
        row, backward = ROW_OF[op]
        args = launch.args
        params = launch.spec.params
        tensors = [
            (p.name, args[p.name])
            for p in params
            if p.kind is Kind.TENSOR and not p.writes and isinstance(args.get(p.name), AclTensor)
        ]
        result = next(p.name for p in params if p.writes)
        out = args[result]
        assert isinstance(out, AclTensor)
        terms = broadcast_shapes(*(t.view_dims for name, t in tensors if ROLES[name] != "g"))
        count = math.prod(terms)
        reduction = int(args["reduction"])
        compute: D = launch.plan["compute"]
        scalars: list[tuple[str, Scalar | None]] = []
        if "beta" in args:
            scalars.append(("beta", Scalar(float(np.float32(args["beta"])), D.ACL_DOUBLE)))
        divide = backward and reduction == MEAN and count > 0  # a mean's gradient: g · ∂term / count
        if divide:
            scalars.append(("count", Scalar(float(count), D.ACL_DOUBLE)))
        roles = tuple((name, ROLES[name]) for name, _ in tensors)
        logt = bool(args.get("logTarget", False))
        ew = self.backend.elementwise
        if backward or reduction == NONE:
            u = loss_ufunc(Variant(row.name, backward, roles, result, divide, logt, op in WRT_TARGET))
            planned = ew.instantiate(op, u, _tokens(compute, out.dtype), [*tensors, (result, out)], scalars)
            return ew.bind(ew.prepare(planned))
        prog = Program()
        dtype = terms_dtype(row.name)
        size = dtype.info.storage_bits // 8
        mode = "mean" if reduction == MEAN else "sum"
        final = _into(out)
        if count == 0:  # no terms: the row kernel's empty sum (0) or mean (NaN)
            empty = bind("self", _placeholder((0,), dtype), (), (1,))
            self._sum(prog, op, empty, final, (), (0,), [prog.temp(size), None], mode, count)
            return prog
        u = loss_ufunc(Variant(row.name, False, roles, "terms", False, logt))
        workspace = _placeholder(terms, dtype)
        planned = ew.instantiate(op, u, _tokens(compute, dtype), [*tensors, ("terms", workspace)], scalars)
        assert planned is not None
        # the terms kernel sums its own terms: each block writes the double sum of the terms (each rounded to
        # the terms dtype, as a temporary would hold it) it computed, so the terms never go through memory
        config = self.backend.elementwise_config(count, UNROLL)
        inst = dataclasses.replace(planned.instance, reduce=True, vec=1, unroll=UNROLL)
        blocks = config.grid[0]
        partials = prog.temp(blocks * 8)
        prog.steps.append(self._step_of(Planned(inst, config, planned.values), {len(tensors): partials}))
        sums = _placeholder((blocks,), D.ACL_DOUBLE)
        self._sum(prog, op, bind("self", sums, (), (1,)), final, (), (blocks,), [partials, None], mode, count)
        return prog

    def _step_of(self, planned: Planned | None, temps: dict[int, Temp]) -> Step:
        """The recorded launch of an elementwise instance, tensors ``temps`` (by position) at temporaries."""
        assert planned is not None
        prepared = self.backend.elementwise.prepare(planned)
        assert prepared is not None
        values: list[Any] = list(planned.values)
        for k, where in temps.items():
            values[1 + k] = where
        return Step(prepared.function, prepared.config, tuple(values))

    def _sum(
        self,
        prog: Program,
        op: str,
        source: Bound,
        target: Bound,
        outer: tuple[int, ...],
        inner: tuple[int, ...],
        temps: list[Temp | None],
        mode: str,
        count: int,
    ) -> None:
        """Record one ``reduce`` row kernel: ``target`` = each row of ``source`` summed (or, mean, over ``count``)."""
        rows = self.backend.reduction
        acc = acc_dtype([source.tensor.dtype, target.tensor.dtype])
        options: list[tuple[str, str | int | bool]] = [("op", mode), ("dtype", int(source.tensor.dtype))]
        scalars = [("count", "double", float(count))] if mode == "mean" else []
        planned = rows.plan(op, "reduce", [source, target], outer, inner, acc, options, scalars)
        prepared = rows.prepare(planned)
        assert planned is not None and prepared is not None
        values: list[Any] = list(planned.values)
        for k, where in enumerate(temps):
            if where is not None:
                values[1 + k] = where
        prog.steps.append(Step(prepared.function, prepared.config, tuple(values)))


def _into(out: AclTensor) -> Bound:
    """The reduced output (0-d or ``[1]``) as the single row's target."""
    return bind("out", out, reduced_strides(out, 1, []), (0,), write=True)


def _tokens(compute: D, output: D) -> dict[str, D | None]:
    return {"T": compute, "O": output, "W": D.ACL_DOUBLE}


RUNNER = LossRunner

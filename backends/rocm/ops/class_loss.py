"""The class-index losses on the GPU: NLLLoss(2d), CrossEntropyLoss and their backward ops as row-kernel programs.

Each call is a :class:`~acl_rocm.ops.program.Program` recorded once per signature (``kernels/class_loss.py``):

* NLLLoss(2d): ``nll_rows`` (a thread per sample) writes each sample's term and weight (the loss itself for
  a batched 'none'), then ``class_total`` (one block) sums them into the loss (mean: divided by the total
  weight) and totalWeightOut; the per-sample values live in float64 temporaries;
* CrossEntropyLoss: ``ce_rows`` (a block per sample: the log-softmax in one online max/sum pass and one
  writing pass, then the smoothed term; by default the 16-byte vector kernel where rows allow, ``ACL_CE_ROWS``),
  then ``class_total``;
* the backward ops: ``nll_grad`` writes every element of the gradient (0 off the target class), reading
  the given totalWeight for a mean; CrossEntropyLossGrad runs ``weight_sums`` (one block: Σ w[t_n] and
  Σ w_c into a temporary) then ``ce_grad``;
* SoftmaxCrossEntropyWithLogits: ``softmax_xent`` alone (a block per row: loss and backprop together).

A target outside [0, C) other than ignoreIndex sets the program's device flag, which the driver reports as
161002 at synchronisation (no host round trip). Nothing passes through the host.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from acl_core.backend import Kernel, Launch
from acl_core.dtypes import DataType as D
from acl_core.spec.ops.class_loss import MEAN, NONE
from acl_core.tensor import AclTensor
from acl_rocm.kernels import class_loss as _kinds  # noqa: F401 - registers the row kinds
from acl_rocm.kernels.class_loss import FLAG_DTYPE
from acl_rocm.kernels.reduction import acc_dtype
from acl_rocm.launch import LaunchConfig
from acl_rocm.ops.loss import _placeholder
from acl_rocm.ops.program import FLAG, Program, Step, Temp, program_kernel
from acl_rocm.ops.reduction import Bound, RowPlan, RowRunner, bind, unit_vector

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

OPS: tuple[str, ...] = (
    "CrossEntropyLoss",
    "CrossEntropyLossGrad",
    "NLLLoss",
    "NLLLoss2d",
    "NLLLoss2dBackward",
    "NLLLossBackward",
    "SoftmaxCrossEntropyWithLogits",
)
"""The aclnn operators this module runs."""

Scalars = list[tuple[str, str, Any]]

LOG = logging.getLogger("acl_rocm.class_loss")
CE_ENV = "ACL_CE_ROWS"
"""``vec1024`` (the default) or ``vec``: CrossEntropyLoss's rows through the vector kernel (``kernels/class_loss.py``
``_ce_rows_vec``: 16-byte loads, one statistics pass, the writing pass in reverse); ``element``: the element kernel
(what rows the vector kernel cannot read take anyway). On an H100 (2026-12-07, [8192, 151936] bf16) ``vec1024`` read
2.11 TB/s, ``vec`` 1.95, the element kernel 0.99, torch's cross_entropy 1.52."""
CE_DEFAULT = "vec1024"
CE_BLOCK = 512
"""Threads of the vector kernel's block (a row each)."""
CE_CONFIGS = {"vec": CE_BLOCK, "vec1024": 1024}
"""The :data:`CE_ENV` values and their blocks (``vec1024``: one 1,024-thread block an SM, half the rows in flight of
``vec``'s two, so more of a row is still in L2 when its logProbOut pass reads it again)."""
CE_UNROLL = 4
"""Vectors each thread of the vector kernel loads before using them."""


def _t(launch: Launch, name: str) -> AclTensor | None:
    t = launch.args.get(name)
    return t if isinstance(t, AclTensor) else None


def _need(launch: Launch, name: str) -> AclTensor:
    t = _t(launch, name)
    assert t is not None, f"{launch.spec.name}: {name} is not a tensor"
    return t


def _class_dim(x: AclTensor) -> int:
    return 0 if x.rank == 1 else 1


def _sample_strides(t: AclTensor, x: AclTensor) -> tuple[int, ...]:
    """Strides of ``t`` over the samples (x's dims less the class axis): t's own, or zeros for a one-value t."""
    per_sample = x.rank - 1
    if t.rank == per_sample:
        return tuple(t.strides)
    return (0,) * per_sample


def _less_class(x: AclTensor) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(the per-sample dims, x's strides over them)."""
    c = _class_dim(x)
    keep = [d for d in range(x.rank) if d != c]
    return tuple(x.view_dims[d] for d in keep), tuple(x.strides[d] for d in keep)


def _contiguous(shape: Sequence[int]) -> tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


class ClassLossRunner(RowRunner):
    """Turns the class-index losses' Launches into row-kernel programs."""

    def __init__(self, backend: RocmBackend) -> None:
        super().__init__(backend)

    def kernels(self) -> dict[str, Kernel]:
        """A kernel per supported op name."""
        return {
            name: program_kernel(self.backend, "class_loss", name, self._planner(name), self._ce_rows) for name in OPS
        }

    def _ce_rows(self) -> str | None:
        """The :data:`CE_ENV` setting, ``vec1024`` when unset (plans under each setting are kept apart)."""
        return self.backend.environ.get(CE_ENV, "").strip().lower() or CE_DEFAULT

    def _planner(self, op: str) -> Any:
        def plan(launch: Launch) -> Program:
            if op == "SoftmaxCrossEntropyWithLogits":  # no class index: nothing to check on the device
                prog = Program()
                self._xent(prog, launch)
                return prog
            prog = Program(report=f"{op}: target values must lie in [0, C) or equal ignoreIndex")
            if op == "CrossEntropyLossGrad":
                self._ce_grad(prog, launch)
            elif op.endswith("Backward"):
                self._nll_grad(prog, launch)
            else:
                self._forward(prog, op, launch)
            return prog

        return plan

    # ------------------------------------------------------------------ helpers
    def _record(
        self,
        prog: Program,
        op: str,
        kind: str,
        bound: Sequence[Bound],
        outer: Sequence[int],
        inner: Sequence[int],
        options: Sequence[tuple[str, str | int | bool]],
        scalars: Scalars,
        temps: dict[str, Temp | object],
        acc: D,
        per_thread_rows: bool = False,
        block: int | None = None,
    ) -> None:
        planned = self.plan(op, kind, bound, outer, inner, acc, options, scalars, per_thread_rows)
        if planned is None:
            return
        if block is not None:
            planned = RowPlan(planned.kernel, LaunchConfig(planned.config.grid, (block, 1, 1)), planned.values)
        prepared = self.prepare(planned)
        assert prepared is not None
        values: list[Any] = list(planned.values)
        for k, b in enumerate(bound):
            if b.operand.name in temps:
                values[1 + k] = temps[b.operand.name]
        prog.steps.append(Step(prepared.function, prepared.config, tuple(values)))

    def _ce_vector(
        self, x: AclTensor, xs: Sequence[int], c_stride: Sequence[int], c: int, lp: AclTensor | None
    ) -> tuple[tuple[tuple[str, str | int | bool], ...], int | None]:
        """(options, block) of CrossEntropyLoss's rows: the vector kernel (:data:`CE_ENV` = ``vec``, where the logits'
        rows are aligned unit-stride runs of at least two vectors; logProbOut stored as vectors where its rows allow
        the same width) or the element kernel ((), None)."""
        block = CE_CONFIGS.get(self._ce_rows() or "")
        if block is None or lp is None:
            return (), None
        vec = unit_vector(x, xs, c_stride, c, whole=False)
        if vec < 2 or c < 2 * vec:
            LOG.debug("CrossEntropyLoss: logits rows of %d (strides %s, %s) not aligned vector runs", c, xs, c_stride)
            return (), None
        lpvec = unit_vector(lp, lp.strides[:-1], lp.strides[-1:], c, whole=False) >= vec
        LOG.debug("CrossEntropyLoss: vector rows of %d, %d elements a load, logProbOut %s", c, vec, lpvec)
        return (("block", block), ("vec", vec), ("unroll", CE_UNROLL), ("lpvec", lpvec)), block

    @staticmethod
    def _flag(rank_outer: int, rank_inner: int) -> Bound:
        return bind("flag", _placeholder((1,), FLAG_DTYPE), (0,) * rank_outer, (0,) * rank_inner, write=True)

    @staticmethod
    def _weight(w: AclTensor | None, outer: int, inner_stride: Sequence[int]) -> list[Bound]:
        return [] if w is None else [bind("w", w, (0,) * outer, tuple(inner_stride))]

    def _acc(self, *tensors: AclTensor | None) -> D:
        return acc_dtype([t.dtype for t in tensors if t is not None])

    # ------------------------------------------------------------------ forward
    def _forward(self, prog: Program, op: str, launch: Launch) -> None:
        ce = op == "CrossEntropyLoss"
        x = _need(launch, "input" if ce else "self")
        t = _need(launch, "target")
        w = _t(launch, "weightOptional" if ce else "weight")
        loss = _need(launch, "lossOut" if ce else "out")
        total = None if ce else _need(launch, "totalWeightOut")
        reduction = int(launch.plan["reduction"])
        samples, xs = _less_class(x)
        c = x.view_dims[_class_dim(x)]
        rows = math.prod(samples)
        n_out, c_stride = len(samples), (x.strides[_class_dim(x)],)
        direct = reduction == NONE and x.rank > 1  # a batched 'none': the terms are the loss
        term_t = loss if direct else _placeholder((max(rows, 1),), D.ACL_DOUBLE)
        tw_t = _placeholder(samples, D.ACL_DOUBLE)
        term_s = tuple(loss.strides) if direct else _contiguous(samples)
        tw_buf, term_buf = prog.temp(8 * max(rows, 1)), prog.temp(8 * max(rows, 1))
        bound = [
            bind("x", x, xs, c_stride),
            bind("t", t, _sample_strides(t, x), (0,)),
            *self._weight(w, n_out, (w.strides[0],) if w is not None else ()),
            bind("term", term_t, term_s, (0,), write=True),
            bind("tw", tw_t, _contiguous(samples), (0,), write=True),
        ]
        temps: dict[str, Temp | object] = {"tw": tw_buf, "flag": FLAG}
        if not direct:
            temps["term"] = term_buf
        scalars: Scalars = [("ignore", "long long", int(launch.args["ignoreIndex"]))]
        acc = self._acc(x, w)
        lp: AclTensor | None = None
        if ce:
            lp, lse0 = _need(launch, "logProbOut"), _need(launch, "lseForZlossOut")
            bound.insert(3, bind("lp", lp, (lp.strides[0],), (lp.strides[1],), write=True))
            bound.append(bind("lse0", lse0, tuple(lse0.strides), (0,), write=True))
            if direct:
                z = _need(launch, "zlossOut")
                bound.append(bind("z0", z, tuple(z.strides), (0,), write=True))
            scalars.append(("eps", "double", float(launch.args["labelSmoothing"])))
            kind = "ce_rows"
        else:
            kind = "nll_rows"
        bound.append(self._flag(n_out, 1))
        options, block = self._ce_vector(x, xs, c_stride, c, lp) if ce else ((), None)
        self._record(prog, op, kind, bound, samples, (c,), options, scalars, temps, acc, not ce, block)
        self._total(prog, op, launch, reduction, direct, rows, loss, total, term_buf, tw_buf, x.rank == 1)

    def _total(
        self,
        prog: Program,
        op: str,
        launch: Launch,
        reduction: int,
        direct: bool,
        rows: int,
        loss: AclTensor,
        total: AclTensor | None,
        term_buf: Temp,
        tw_buf: Temp,
        single: bool,
    ) -> None:
        """The one-block sum of the per-sample terms and weights into the reduced outputs."""
        n = max(rows, 0)
        bound = [bind("tw", _placeholder((max(n, 1),), D.ACL_DOUBLE), (), (1,))]
        temps: dict[str, Temp | object] = {"tw": tw_buf}
        if not direct:
            bound.insert(0, bind("term", _placeholder((max(n, 1),), D.ACL_DOUBLE), (), (1,)))
            temps["term"] = term_buf
            bound.append(bind("out", loss, (), (0,), write=True))
        z = _t(launch, "zlossOut")
        options: list[tuple[str, str | int | bool]] = [("mode", "mean" if reduction == MEAN else "sum")]
        if total is not None:
            bound.append(bind("total", total, (), (0,), write=True))
            options.append(("zero_total", direct and not single))
        else:
            bound.append(bind("total", _placeholder((1,), D.ACL_DOUBLE), (), (0,), write=True))
            temps["total"] = prog.temp(8)
        if z is not None and not direct:
            bound.append(bind("z0", z, (), (0,), write=True))
        self._record(prog, op, "class_total", bound, (), (n,), options, [], temps, D.ACL_DOUBLE)

    # ------------------------------------------------------------------ backward
    def _nll_grad(self, prog: Program, launch: Launch) -> None:
        op = launch.spec.name
        x, t, w = _need(launch, "self"), _need(launch, "target"), _need(launch, "weight")
        g, out = _need(launch, "gradOutput"), _need(launch, "out")
        reduction = int(launch.plan["reduction"])
        c = x.view_dims[_class_dim(x)]
        per_sample = reduction == NONE and x.rank > 1
        scalars: Scalars = [("ignore", "long long", int(launch.args["ignoreIndex"])), ("classes", "long long", c)]
        if x.rank <= 2:  # rows are samples, the class axis is the row
            outer = x.view_dims[:1] if x.rank == 2 else ()
            n = len(outer)
            g_outer = tuple(g.strides[:1]) if per_sample else (0,) * n
            bound = [
                bind("g", g, g_outer, (0,)),
                bind("t", t, tuple(t.strides[:1]) if n else (), (0,)),
                bind("w", w, (0,) * n, (w.strides[0],)),
                bind("out", out, tuple(out.strides[:n]), (out.strides[-1],), write=True),
            ]
            inner: tuple[int, ...] = (c,)
            layout = "j"
        else:  # [N, C, H, W]: a row per (sample, class) plane
            outer, inner = tuple(x.view_dims[:2]), tuple(x.view_dims[2:])
            n = 2
            gs = tuple(g.strides) if per_sample else (0, 0, 0)
            bound = [
                bind("g", g, (gs[0], 0), gs[1:]),
                bind("t", t, (t.strides[0], 0), tuple(t.strides[1:])),
                bind("w", w, (0, w.strides[0]), (0, 0)),
                bind("out", out, tuple(out.strides[:2]), tuple(out.strides[2:]), write=True),
            ]
            layout = "row"
        if reduction == MEAN:
            tot = _need(launch, "totalWeight")
            bound.append(bind("tot", tot, (0,) * n, (0,) * len(inner)))
        bound.append(self._flag(n, len(inner)))
        acc = self._acc(x, g)
        options = [("class_of", layout)]
        self._record(prog, op, "nll_grad", bound, outer, inner, options, scalars, {"flag": FLAG}, acc)

    def _ce_grad(self, prog: Program, launch: Launch) -> None:
        op = "CrossEntropyLossGrad"
        g, lp, t = _need(launch, "gradLoss"), _need(launch, "logProb"), _need(launch, "target")
        w, out = _t(launch, "weightOptional"), _need(launch, "out")
        reduction = int(launch.plan["reduction"])
        n, c = lp.view_dims
        ignore = ("ignore", "long long", int(launch.args["ignoreIndex"]))
        sums = prog.temp(16)
        ws = w.strides[0] if w is not None else 0
        pre = [
            bind("t", t, (), (t.strides[0],)),
            *([] if w is None else [bind("w", w, (), (0,))]),
            bind("sums", _placeholder((2,), D.ACL_DOUBLE), (), (0,), write=True),
            self._flag(0, 1),
        ]
        scalars: Scalars = [ignore, ("classes", "long long", c), ("wstride", "long long", ws)]
        temps: dict[str, Temp | object] = {"sums": sums, "flag": FLAG}
        self._record(prog, op, "weight_sums", pre, (), (max(n, 0),), (), scalars, temps, D.ACL_DOUBLE)
        bound = [
            bind("g", g, (g.strides[0],) if reduction == NONE else (0,), (0,)),
            bind("lp", lp, (lp.strides[0],), (lp.strides[1],)),
            bind("t", t, (t.strides[0],), (0,)),
            *self._weight(w, 1, (ws,)),
            bind("sums", _placeholder((2,), D.ACL_DOUBLE), (0,), (0,)),
            bind("out", out, (out.strides[0],), (out.strides[1],), write=True),
            self._flag(1, 1),
        ]
        main: Scalars = [ignore, ("eps", "double", float(launch.args["labelSmoothing"]))]
        options = [("mean", reduction == MEAN)]
        acc = self._acc(g, lp, w)
        self._record(prog, op, "ce_grad", bound, (n,), (c,), options, main, {"sums": sums, "flag": FLAG}, acc)

    def _xent(self, prog: Program, launch: Launch) -> None:
        x, y = _need(launch, "features"), _need(launch, "labels")
        loss, bp = _need(launch, "loss"), _need(launch, "backprop")
        bound = [
            bind("x", x, (x.strides[0],), (x.strides[1],)),
            bind("y", y, (y.strides[0],), (y.strides[1],)),
            bind("loss", loss, (loss.strides[0],), (0,), write=True),
            bind("bp", bp, (bp.strides[0],), (bp.strides[1],), write=True),
        ]
        op = "SoftmaxCrossEntropyWithLogits"
        self._record(prog, op, "softmax_xent", bound, (x.view_dims[0],), (x.view_dims[1],), (), [], {}, self._acc(x))


RUNNER = ClassLossRunner

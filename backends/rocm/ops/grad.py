"""The row backward ops on the GPU: SoftmaxBackward, LogSoftmaxBackward, the norm gradients, SwiGluGrad.

Each call is one or two row-kernel launches on the call's stream (``kernels/grad.py``), reading every
view in place through its strides: the softmax gradients and SwiGluGrad one launch; a norm gradient
one launch for dx (a block per row) and, where a weight gradient is asked for, one for dgamma /
dbeta together (a block per normalised element, walking the rows). Nothing passes through the host.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from acl_core.backend import Kernel, Launch
from acl_core.tensor import AclTensor
from acl_rocm.driver import handle
from acl_rocm.kernels import grad as _grad_kernels  # noqa: F401 - registers the grad kinds
from acl_rocm.kernels.reduction import acc_dtype
from acl_rocm.ops.binding import family_key, memo_plan, named_kernels
from acl_rocm.ops.reduction import Bound, RowPlan, RowRunner, bind, split

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

OPS: tuple[str, ...] = (
    "AddLayerNormGrad",
    "GroupNormBackward",
    "LayerNormBackward",
    "LogSoftmaxBackward",
    "RmsNormGrad",
    "SoftmaxBackward",
    "SwiGluGrad",
)
"""The aclnn operators this module runs."""

_ROW_NAMES: dict[str, dict[str, str]] = {
    "RmsNormGrad": {"dy": "dy", "x": "x", "rstd": "rstd", "weight": "gamma", "dx": "dxOut", "dgamma": "dgammaOut"},
    "LayerNormBackward": {
        "dy": "gradOut",
        "x": "input",
        "mean": "mean",
        "rstd": "rstd",
        "weight": "weightOptional",
        "dx": "gradInputOut",
        "dgamma": "gradWeightOut",
        "dbeta": "gradBiasOut",
    },
    "AddLayerNormGrad": {
        "dy": "dy",
        "x": "x1",
        "x2": "x2",
        "mean": "mean",
        "rstd": "rstd",
        "weight": "gamma",
        "dsum": "dsumOptional",
        "dx": "dxOut",
        "dgamma": "dgammaOut",
        "dbeta": "dbetaOut",
    },
}
"""Kernel operand → aclnn parameter of the LayerNorm-like gradients."""

_MASKED = {"LayerNormBackward": ("gradInputOut", "gradWeightOut", "gradBiasOut")}


def _t(launch: Launch, name: str | None) -> AclTensor | None:
    t = launch.args.get(name) if name else None
    return t if isinstance(t, AclTensor) else None


def _need(launch: Launch, name: str) -> AclTensor:
    t = _t(launch, name)
    assert t is not None, f"{launch.spec.name}: {name} is not a tensor"
    return t


def _shifted(t: AclTensor, dim: int, half: int) -> AclTensor:
    """The second half of ``t`` along ``dim`` as a view of ``half`` elements there (same storage)."""
    dims = list(t.view_dims)
    dims[dim] = half
    return AclTensor(
        tuple(dims), t.dtype, t.strides, t.offset + half * t.strides[dim], t.format, t.storage_dims, t.data
    )


def _needed(inputs: list[Bound], outs: list[Bound]) -> list[Bound]:
    """The weight-gradient kernel's inputs: dbeta alone needs only dy (the first)."""
    return inputs if any(b.operand.name == "dgamma" for b in outs) else inputs[:1]


class GradRunner(RowRunner):
    """Turns the backward ops' Launches into row-kernel launches."""

    def __init__(self, backend: RocmBackend) -> None:
        super().__init__(backend)

    def kernels(self) -> dict[str, Kernel]:
        """A kernel per supported op name."""
        return named_kernels(OPS, self._run)

    def _run(self, op: str, launch: Launch) -> None:
        key = family_key(self.backend, "grad")
        prepared = memo_plan(launch, key, lambda: [self.prepare(p) for p in self.plan_call(op, launch)])
        stream = handle(launch.stream)
        for step in prepared:
            self.launch_prepared(step, stream)

    def plan_call(self, op: str, launch: Launch) -> list[RowPlan | None]:
        """The row kernels of one call, in launch order."""
        if op in ("SoftmaxBackward", "LogSoftmaxBackward"):
            return [self._softmax(op, launch)]
        if op == "SwiGluGrad":
            return [self._swiglu(launch)]
        if op == "GroupNormBackward":
            return self._group_norm(launch)
        return self._row_norm(op, launch)

    def _plan(
        self,
        op: str,
        kind: str,
        bound: Sequence[Bound],
        outer: Sequence[int],
        inner: Sequence[int],
        options: Sequence[tuple[str, str | int | bool]] = (),
    ) -> RowPlan | None:
        acc = acc_dtype([b.tensor.dtype for b in bound])
        scalars: list[tuple[str, str, Any]] = []
        return self.plan(op, kind, bound, outer, inner, acc, options, scalars)

    def _softmax(self, op: str, launch: Launch) -> RowPlan | None:
        g, y, out = _need(launch, "gradOutput"), _need(launch, "output"), _need(launch, "out")
        if g.rank == 0:  # one row of one element
            g, y, out = (
                AclTensor((1,), t.dtype, (1,), t.offset, t.format, t.storage_dims, t.data) for t in (g, y, out)
            )
        dim = launch.plan["dim"] if launch.args["gradOutput"].rank else 0
        outer, inner, go, gi = split(g, (dim,))
        bound = [
            bind("g", g, go, gi),
            bind("y", y, *split(y, (dim,))[2:]),
            bind("out", out, *split(out, (dim,))[2:], write=True),
        ]
        return self._plan(op, "softmax_grad", bound, outer, inner, (("log", op == "LogSoftmaxBackward"),))

    def _swiglu(self, launch: Launch) -> RowPlan | None:
        g, x, out = _need(launch, "yGrad"), _need(launch, "x"), _need(launch, "out")
        dim = launch.plan["dim"]
        half = g.view_dims[dim]
        last = g.rank - 1

        def lay(t: AclTensor) -> tuple[tuple[int, ...], tuple[int, ...]]:
            return tuple(t.strides[:last]), (t.strides[last],)

        a, da = (
            AclTensor(g.view_dims, t.dtype, t.strides, t.offset, t.format, t.storage_dims, t.data) for t in (x, out)
        )
        b, db = _shifted(x, dim, half), _shifted(out, dim, half)
        bound = [
            bind("g", g, *lay(g)),
            bind("a", a, *lay(a)),
            bind("b", b, *lay(b)),
            bind("da", da, *lay(da), write=True),
            bind("db", db, *lay(db), write=True),
        ]
        return self._plan("SwiGluGrad", "swiglu_grad", bound, g.view_dims[:last], g.view_dims[last:])

    def _row_norm(self, op: str, launch: Launch) -> list[RowPlan | None]:
        """dx with rows = the leading dims; then dgamma / dbeta with rows = the normalised dims."""
        names = _ROW_NAMES[op]
        x = _need(launch, names["x"])
        lead = int(launch.plan["lead"])
        mask = launch.plan.get("output_mask", (True, True, True))
        rows, row = tuple(x.view_dims[:lead]), tuple(x.view_dims[lead:])
        zeros_row, zeros_rows = (0,) * len(row), (0,) * lead

        def like_x(t: AclTensor, transposed: bool = False) -> tuple[tuple[int, ...], tuple[int, ...]]:
            outer, inner = tuple(t.strides[:lead]), tuple(t.strides[lead:])
            return (inner, outer) if transposed else (outer, inner)

        def stat(t: AclTensor, transposed: bool = False) -> tuple[tuple[int, ...], tuple[int, ...]]:
            s = tuple(t.strides[:lead])  # [lead..., 1...] or [lead...]: the same leading strides
            return (zeros_row, s) if transposed else (s, zeros_row)

        def inputs(transposed: bool) -> list[Bound]:
            found = [bind("dy", _need(launch, names["dy"]), *like_x(_need(launch, names["dy"]), transposed))]
            for internal in ("x", "x2"):
                t = _t(launch, names.get(internal))
                if t is not None:
                    found.append(bind(internal, t, *like_x(t, transposed)))
            for internal in ("mean", "rstd"):
                t = _t(launch, names.get(internal))
                if t is not None:
                    found.append(bind(internal, t, *stat(t, transposed)))
            return found

        plans: list[RowPlan | None] = []
        dx = _t(launch, names["dx"])
        if mask[0] and dx is not None:
            bound = inputs(False)
            w = _t(launch, names["weight"])
            if w is not None:
                bound.append(bind("weight", w, zeros_rows, w.strides))
            dsum = _t(launch, names.get("dsum"))
            if dsum is not None:
                bound.append(bind("dsum", dsum, *like_x(dsum)))
            bound.append(bind("dx", dx, *like_x(dx), write=True))
            plans.append(self._plan(op, "norm_grad", bound, rows, row))
        outs = []
        for internal, wanted in (("dgamma", mask[1]), ("dbeta", mask[2])):
            t = _t(launch, names.get(internal))
            if wanted and t is not None:
                outs.append(bind(internal, t, t.strides, zeros_rows, write=True))
        if outs:
            plans.append(self._plan(op, "col_grad", [*_needed(inputs(True), outs), *outs], row, rows))
        return plans

    def _group_norm(self, launch: Launch) -> list[RowPlan | None]:
        """dx over (N, group) rows of (C/group, spatial…); dgamma / dbeta over (group, C/group) of (N, spatial…)."""
        x = _need(launch, "input")
        group = int(launch.args["group"])
        mask = launch.plan["output_mask"]
        n, c = x.view_dims[0], x.view_dims[1]
        per = c // group
        spatial = tuple(x.view_dims[2:])
        zs = (0,) * len(spatial)

        def like_x(t: AclTensor, transposed: bool = False) -> tuple[tuple[int, ...], tuple[int, ...]]:
            s = t.strides
            by_group = (s[1] * per, s[1])
            if transposed:
                return by_group, (s[0], *s[2:])
            return (s[0], by_group[0]), (s[1], *s[2:])

        def stat(t: AclTensor, transposed: bool = False) -> tuple[tuple[int, ...], tuple[int, ...]]:
            s0, s1 = t.strides
            return ((s1, 0), (s0, *zs)) if transposed else ((s0, s1), (0, *zs))

        def inputs(transposed: bool) -> list[Bound]:
            dy, xs = _need(launch, "gradOut"), x
            found = [bind("dy", dy, *like_x(dy, transposed)), bind("x", xs, *like_x(xs, transposed))]
            for name in ("mean", "rstd"):
                t = _need(launch, name)
                found.append(bind(name, t, *stat(t, transposed)))
            return found

        plans: list[RowPlan | None] = []
        dx = _t(launch, "gradInput")
        if mask[0] and dx is not None:
            w = _need(launch, "gamma")
            ws = w.strides[0]
            bound = [*inputs(False), bind("weight", w, (0, ws * per), (ws, *zs))]
            bound.append(bind("dx", dx, *like_x(dx), write=True))
            plans.append(self._plan("GroupNormBackward", "norm_grad", bound, (n, group), (per, *spatial)))
        outs = []
        for internal, name, wanted in (("dgamma", "gradGammaOut", mask[1]), ("dbeta", "gradBetaOut", mask[2])):
            t = _t(launch, name)
            if wanted and t is not None:
                st = t.strides[0]
                outs.append(bind(internal, t, (st * per, st), (0, *zs), write=True))
        if outs:
            bound = [*_needed(inputs(True), outs), *outs]
            plans.append(self._plan("GroupNormBackward", "col_grad", bound, (group, per), (n, *spatial)))
        return plans


RUNNER = GradRunner

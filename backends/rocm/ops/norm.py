"""The norm family on the GPU: LayerNorm, AddLayerNorm, RmsNorm, AddRmsNorm (+ its in-place twin), GroupNorm, BatchNorm.

Each call becomes one row kernel (``kernels/norm.py``): LayerNorm-like norms take the leading dims
as rows and the normalised trailing dims as a row; GroupNorm takes (N, group) as rows and (C/group,
spatial…) as a row; BatchNorm one row per channel over (N, spatial…). Weights, biases and statistics
are operands with their own strides over that space, so no view is gathered and nothing passes
through the host.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from acl_core.backend import Kernel, Launch
from acl_core.errors import AclnnError, AclnnStatus
from acl_core.tensor import AclTensor
from acl_rocm.driver import handle
from acl_rocm.kernels import norm as _norm_kernels  # noqa: F401 - registers the norm kinds
from acl_rocm.kernels.reduction import acc_dtype
from acl_rocm.ops.binding import family_key, memo_plan, named_kernels
from acl_rocm.ops.reduction import Bound, RowPlan, RowRunner, bind

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

ROWNORM_ENV = "ACL_ROWNORM_CONFIG"
"""The layout of RmsNorm-family rows that fit in registers: ``auto`` (the default: by row width, see
:func:`auto_layout`), ``block`` (a block per row, the block's shuffles and shared memory), ``group`` /
``groupN`` (a few lanes per row, several rows in N-thread blocks (default :data:`GROUP_THREADS`), reduced by
shuffles alone: no shared memory, no barrier; decode's short rows) or ``warps`` / ``warpsN`` (a block of N warps
a row, by default the fewest that keep a lane to 4 16-byte chunks: every load of x, x2 and gamma issued before
any arithmetic, a butterfly per warp, one shared-memory exchange and barrier when N > 1; decode's residual rows;
a ``-f`` suffix, ``warps-f`` / ``warps4-f``: rstd through the hardware's reciprocal square root, in double).
A row a layout cannot hold (too long for its registers, or not one strided run) takes ``block``'s kernel, logged
on ``acl_rocm.reduction``."""
GROUP_THREADS = 128
AUTO_GROUP_MAX = 128
"""The widest row ``auto`` gives the grouped layout (``group32``); wider rows take ``warps4``."""


def auto_layout(length: int) -> str:
    """The ``auto`` layout of rows ``length`` wide: ``group32`` up to :data:`AUTO_GROUP_MAX`, else ``warps4``.

    Measured on an H100 (2026-12-06, replayed graph, GPU us a call, torch beside): Qwen3's q/k-norm RmsNorm
    [1,16,128] group32 1.65 / group 1.70 / block 1.84 (torch 1.92), [8,16,128] group 1.76 / block 1.98; its
    AddRmsNorm rows [1,1024] warps4 1.69 / warps 1.90 / block 2.19 / group 3.14 (torch 3.40, 17:18), and the
    Qwen3-0.6B bf16 decode step 1.010 ms of kernels a token with warps4 against 1.053 with block (18:00, bf16
    parity passed under it). A row too wide for warps4's registers takes block's kernel (logged).
    """
    return "group32" if length <= AUTO_GROUP_MAX else "warps4"


OPS: tuple[str, ...] = ("AddLayerNorm", "AddRmsNorm", "BatchNorm", "GemmaRmsNorm", "GroupNorm", "LayerNorm", "RmsNorm")
"""The aclnn operators this module runs (InplaceAddRmsNorm runs AddRmsNorm's kernel)."""


def _t(launch: Launch, name: str) -> AclTensor | None:
    t = launch.args.get(name)
    return t if isinstance(t, AclTensor) else None


def _need(launch: Launch, name: str) -> AclTensor:
    t = _t(launch, name)
    assert t is not None, f"{launch.spec.name}: {name} is not a tensor"
    return t


def _lead(t: AclTensor, lead: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(outer strides, inner strides) of a tensor shaped like x (first ``lead`` dims are rows)."""
    return tuple(t.strides[:lead]), tuple(t.strides[lead:])


class NormRunner(RowRunner):
    """Turns norm-family Launches into row-kernel launches."""

    def __init__(self, backend: RocmBackend) -> None:
        super().__init__(backend)
        self.forced_layout: str | None = None
        """A :data:`ROWNORM_ENV` setting over the environment's for calls made while set (tests, bench A/B)."""

    def grouped_threads(self, length: int) -> int:
        """Threads a block of the grouped layout for rows ``length`` wide, or 0 for another layout."""
        return self.row_layout(length)[0]

    def row_layout(self, length: int) -> tuple[int, int | None]:
        """(threads a block of the grouped layout or 0, warps a row of the warps layout (0: by width) or None)
        for rows ``length`` wide (:data:`ROWNORM_ENV`; ``auto`` or unset: :func:`auto_layout`); (0, None): block."""
        value = (self.forced_layout or self.backend.environ.get(ROWNORM_ENV, "") or "auto").strip().lower()
        if value == "auto":
            value = auto_layout(length)
        if value == "block":
            return 0, None
        warp = self.backend.properties.warp_size
        warps = re.fullmatch(r"warps(\d*)(-f)?", value)
        if warps and (not warps.group(1) or 1 <= int(warps.group(1)) <= 1024 // warp):
            return 0, int(warps.group(1) or 0)
        match = re.fullmatch(r"group(\d*)", value)
        threads = int(match.group(1) or GROUP_THREADS) if match else 0
        if not match or threads < warp or threads > 1024 or threads % warp:
            raise AclnnError(
                AclnnStatus.ACLNN_ERR_PARAM_INVALID,
                f"{ROWNORM_ENV}={value!r}: expected auto, block, group or groupN (N a multiple of {warp}, "
                f"at most 1024), warps or warpsN (N from 1 to {1024 // warp}), optionally with -f",
            )
        return threads, None

    def fast_rsqrt(self) -> bool:
        """Whether the layout setting ends in ``-f`` (the warps layout's hardware reciprocal square root)."""
        value = (self.forced_layout or self.backend.environ.get(ROWNORM_ENV, "") or "auto").strip().lower()
        return value.endswith("-f")

    def kernels(self) -> dict[str, Kernel]:
        """A kernel per supported op name."""
        return named_kernels(OPS, self._run)

    def _run(self, op: str, launch: Launch) -> None:
        key = family_key(self.backend, "norm", self.forced_layout)  # a forced layout plans apart
        prepared = memo_plan(launch, key, lambda: self.prepare(self.plan_call(op, launch)))
        self.launch_prepared(prepared, handle(launch.stream))

    def plan_call(self, op: str, launch: Launch) -> RowPlan | None:
        """The row kernel of one call."""
        if op == "GroupNorm":
            return self._group_norm(launch)
        if op == "BatchNorm":
            return self._batch_norm(launch)
        return self._row_norm(op, launch)

    def _finish(
        self,
        op: str,
        kind: str,
        bound: Sequence[Bound],
        outer: Sequence[int],
        inner: Sequence[int],
        scalars: list[tuple[str, str, Any]],
        options: Sequence[tuple[str, str | int | bool]] = (),
    ) -> RowPlan | None:
        acc = acc_dtype([b.tensor.dtype for b in bound])
        grouped, warps = self.row_layout(math.prod(inner)) if kind == "rmsnorm" else (0, None)
        if warps is not None and self.fast_rsqrt():
            options = (*options, ("fast_rsqrt", True))
        return self.plan(op, kind, bound, outer, inner, acc, options, scalars, grouped=grouped, warps=warps)

    def _row_norm(self, op: str, launch: Launch) -> RowPlan | None:
        """LayerNorm, AddLayerNorm, RmsNorm, AddRmsNorm: rows are the dims before the normalised ones."""
        names = {
            "LayerNorm": (
                "input",
                None,
                "weightOptional",
                "biasOptional",
                "out",
                "meanOutOptional",
                "rstdOutOptional",
                None,
                "eps",
            ),
            "AddLayerNorm": ("x1", "x2", "gamma", "beta", "yOut", "meanOut", "rstdOut", "xOut", "epsilon"),
            "RmsNorm": ("x", None, "gamma", None, "yOut", None, "rstdOut", None, "epsilon"),
            "GemmaRmsNorm": ("x", None, "gamma", None, "yOut", None, "rstdOut", None, "epsilon"),
            "AddRmsNorm": ("x1", "x2", "gamma", None, "yOut", None, "rstdOut", "xOut", "epsilon"),
        }[op]
        x_name, x2_name, w_name, b_name, y_name, mean_name, rstd_name, xout_name, eps_name = names
        x = _need(launch, x_name)
        lead = x.rank - len(launch.plan["axes"])
        outer, inner = tuple(x.view_dims[:lead]), tuple(x.view_dims[lead:])
        zeros_in, zeros_out = (0,) * len(inner), (0,) * lead
        bound = [bind("x", x, *_lead(x, lead))]
        if x2_name is not None:
            bound.append(bind("x2", _need(launch, x2_name), *_lead(_need(launch, x2_name), lead)))
        if op == "AddLayerNorm":
            addend = _t(launch, "biasOptional")
            if addend is not None:
                if tuple(addend.view_dims) == tuple(x.view_dims):
                    bound.append(bind("addend", addend, *_lead(addend, lead)))
                else:
                    bound.append(bind("addend", addend, zeros_out, addend.strides))
        for internal, name in (("weight", w_name), ("shift", b_name)):
            t = _t(launch, name) if name else None
            if t is not None:
                bound.append(bind(internal, t, zeros_out, t.strides))
        bound.append(bind("y", _need(launch, y_name), *_lead(_need(launch, y_name), lead), write=True))
        for internal, name in (("mean", mean_name), ("rstd", rstd_name)):
            t = _t(launch, name) if name else None
            if t is not None:
                bound.append(bind(internal, t, t.strides[:lead], zeros_in, write=True))
        xout = _t(launch, xout_name) if xout_name else None
        if xout is not None and (op != "AddLayerNorm" or launch.args.get("additionalOutput")):
            bound.append(bind("xout", xout, *_lead(xout, lead), write=True))
        kind = "rmsnorm" if "Rms" in op else "layernorm"
        scalars: list[tuple[str, str, Any]] = [("eps", "double", float(launch.args[eps_name]))]
        return self._finish(op, kind, bound, outer, inner, scalars, (("gemma", True),) if op == "GemmaRmsNorm" else ())

    def _group_norm(self, launch: Launch) -> RowPlan | None:
        """Rows (N, group), a row (C/group, spatial…); gamma/beta by channel; stats [N, group]."""
        x = _need(launch, "self")
        group = int(launch.args["group"])
        n, c = x.view_dims[0], x.view_dims[1]
        per = c // group
        spatial = tuple(x.view_dims[2:])
        outer, inner = (n, group), (per, *spatial)

        def like_x(t: AclTensor) -> tuple[tuple[int, ...], tuple[int, ...]]:
            s = t.strides
            return (s[0], s[1] * per), (s[1], *s[2:])

        bound = [bind("x", x, *like_x(x))]
        for internal, name in (("weight", "gamma"), ("shift", "beta")):
            t = _t(launch, name)
            if t is not None:
                g = t.strides[0]
                bound.append(bind(internal, t, (0, g * per), (g, *(0 for _ in spatial))))
        bound.append(bind("y", _need(launch, "out"), *like_x(_need(launch, "out")), write=True))
        zeros_in = (0,) * len(inner)
        for internal, name in (("mean", "meanOut"), ("rstd", "rstdOut")):
            t = _need(launch, name)
            bound.append(bind(internal, t, tuple(t.strides), zeros_in, write=True))
        return self._finish(
            "GroupNorm", "layernorm", bound, outer, inner, [("eps", "double", float(launch.args["eps"]))]
        )

    def _batch_norm(self, launch: Launch) -> RowPlan | None:
        """One row per channel over (N, spatial…); running statistics updated in place when training."""
        x = _need(launch, "input")
        c = x.view_dims[1]
        inner = (x.view_dims[0], *x.view_dims[2:])

        def like_x(t: AclTensor) -> tuple[tuple[int, ...], tuple[int, ...]]:
            s = t.strides
            return (s[1],), (s[0], *s[2:])

        zeros_in = (0,) * len(inner)
        training = bool(launch.args["training"])
        bound = [
            bind("x", x, *like_x(x)),
            bind("y", _need(launch, "output"), *like_x(_need(launch, "output")), write=True),
        ]
        channel = [("weight", "weight", False), ("shift", "bias", False)]
        channel += [("running_mean", "runningMean", training), ("running_var", "runningVar", training)]
        channel += [("save_mean", "saveMean", True), ("save_invstd", "saveInvstd", True)]
        for internal, name, write in channel:
            t = _t(launch, name)
            if t is not None:
                bound.append(bind(internal, t, (t.strides[0],), zeros_in, write=write))
        acc = acc_dtype([b.tensor.dtype for b in bound])
        scalars = [("eps", "double", float(launch.args["eps"])), ("momentum", "double", float(launch.args["momentum"]))]
        return self.plan("BatchNorm", "batchnorm", bound, (c,), inner, acc, [("training", training)], scalars)


RUNNER = NormRunner

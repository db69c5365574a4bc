"""The fused add + RmsNorm + quantisation ops on the GPU: one ``rmsnormquant`` row kernel per call.

AddRmsNormQuantV2, AddRmsNormDynamicQuantV2 and AddRmsNormCast (their V1 forms run these kernels).
Rows are x1's dims before gamma's; gamma, beta, scales, zero points and smooth scales vary along the
row only, row scales and rstd across rows only. Outputs the documents call invalid ([1], zeroed) are
cleared with a device memset on the call's stream; nothing passes through the host.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from acl_core.backend import Kernel, Launch
from acl_core.dtypes import DataType as D
from acl_core.spec.ops.norm_quant import dynamic_outputs
from acl_core.tensor import AclTensor
from acl_rocm.driver import handle
from acl_rocm.kernels import norm_quant as _kernels  # noqa: F401 - registers the rmsnormquant kind
from acl_rocm.ops.binding import family_key, memo_plan, named_kernels
from acl_rocm.ops.elementwise import Prepared
from acl_rocm.ops.reduction import Bound, RowPlan, RowRunner, bind
from acl_rocm.ops.view_args import address

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

OPS: tuple[str, ...] = ("AddRmsNormCast", "AddRmsNormDynamicQuantV2", "AddRmsNormQuantV2")
"""The aclnn operators this module runs (AddRmsNormQuant and AddRmsNormDynamicQuant run their V2's kernels)."""

_ALONG_ROW = {
    "AddRmsNormQuantV2": (
        ("weight", "gamma"),
        ("shift", "betaOptional"),
        ("s1", "scales1"),
        ("s2", "scales2Optional"),
        ("z1", "zeroPoints1Optional"),
        ("z2", "zeroPoints2Optional"),
    ),
    "AddRmsNormDynamicQuantV2": (
        ("weight", "gamma"),
        ("shift", "betaOptional"),
        ("m1", "smoothScale1Optional"),
        ("m2", "smoothScale2Optional"),
    ),
    "AddRmsNormCast": (("weight", "gamma"),),
}
"""Per op: (internal operand, parameter) of the inputs that vary along the row only."""
_LIKE_X = {
    "AddRmsNormQuantV2": (("y1", "y1Out"), ("y2", "y2Out"), ("xout", "xOut"), ("rmsout", "rmsNormOut")),
    "AddRmsNormDynamicQuantV2": (("xout", "xOut"),),
    "AddRmsNormCast": (("yf", "y1Out"), ("yc", "y2Out"), ("xout", "xOut")),
}
"""Per op: (internal operand, parameter) of the outputs shaped like x1."""
_MODE = {"AddRmsNormQuantV2": "static", "AddRmsNormDynamicQuantV2": "dynamic", "AddRmsNormCast": "cast"}


def _t(launch: Launch, name: str) -> AclTensor | None:
    t = launch.args.get(name)
    return t if isinstance(t, AclTensor) else None


class NormQuantRunner(RowRunner):
    """Turns the fused norm-quant Launches into row-kernel launches (and memsets of invalid outputs)."""

    def __init__(self, backend: RocmBackend) -> None:
        super().__init__(backend)

    def kernels(self) -> dict[str, Kernel]:
        """A kernel per supported op name."""
        return named_kernels(OPS, self._run)

    def _run(self, op: str, launch: Launch) -> None:
        prepared, clear = memo_plan(launch, family_key(self.backend, "norm_quant"), lambda: self._prepared(op, launch))
        stream = handle(launch.stream)
        for at, nbytes in clear:
            self.backend.provider.memset(at, 0, nbytes, stream)
        self.launch_prepared(prepared, stream)

    def _prepared(self, op: str, launch: Launch) -> tuple[Prepared | None, list[tuple[int, int]]]:
        planned, clear = self.plan_call(op, launch)
        return self.prepare(planned), clear

    def plan_call(self, op: str, launch: Launch) -> tuple[RowPlan | None, list[tuple[int, int]]]:
        """The row kernel of one call and the (address, bytes) of the outputs to zero."""
        x = _t(launch, "x1")
        assert x is not None
        lead = x.rank - len(launch.plan["axes"])
        outer, inner = tuple(x.view_dims[:lead]), tuple(x.view_dims[lead:])
        zeros_out, zeros_in = (0,) * lead, (0,) * len(inner)

        def rows(t: AclTensor) -> tuple[tuple[int, ...], tuple[int, ...]]:
            return tuple(t.strides[:lead]), tuple(t.strides[lead:])

        bound: list[Bound] = [bind("x", x, *rows(x))]
        x2 = _t(launch, "x2")
        assert x2 is not None
        bound.append(bind("x2", x2, *rows(x2)))
        for internal, name in _ALONG_ROW[op]:
            t = _t(launch, name)
            if t is not None:
                bound.append(bind(internal, t, zeros_out, t.strides))
        for internal, name in _LIKE_X[op]:
            t = _t(launch, name)
            if t is not None:
                bound.append(bind(internal, t, *rows(t), write=True))
        clear: list[tuple[int, int]] = []
        if op == "AddRmsNormDynamicQuantV2":
            mask = launch.args.get("outputMaskOptional")
            smooth = (_t(launch, "smoothScale1Optional") is not None, _t(launch, "smoothScale2Optional") is not None)
            for i, ok in enumerate(dynamic_outputs(None if mask is None else tuple(mask), *smooth), start=1):
                y, scale = _t(launch, f"y{i}Out"), _t(launch, f"scale{i}Out")
                assert y is not None and scale is not None
                if ok:
                    bound.append(bind(f"y{i}", y, *rows(y), write=True))
                    # a row scale's dims are x1's leading dims
                    bound.append(bind(f"sc{i}", scale, tuple(scale.strides), zeros_in, write=True))
                else:
                    clear += [(address(y), 1), (address(scale), 4)]
        if op == "AddRmsNormCast":
            rstd = _t(launch, "rstdOut")
            assert rstd is not None
            bound.append(bind("rstd", rstd, rstd.strides[:lead], zeros_in, write=True))
        options: list[tuple[str, str | int | bool]] = [("mode", _MODE[op])]
        if op == "AddRmsNormQuantV2":
            options.append(("div", bool(launch.args["divMode"])))
        scalars: list[tuple[str, str, Any]] = [("eps", "double", float(launch.args["epsilon"]))]
        # float64 statistics whatever the dtypes: y rounded to float32 is then the reference's, so the
        # int8 outputs (compared exactly) agree but for a float32 value within 1e-16 of a rounding tie
        planned = self.plan(op, "rmsnormquant", bound, outer, inner, D.ACL_DOUBLE, options, scalars)
        return planned, clear


RUNNER = NormQuantRunner

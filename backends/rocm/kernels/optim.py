"""The AdamW step kernel (ApplyAdamW / ApplyAdamWV2): one thread per element, in place on var, m and v.

Every hyper-parameter is rounded to float32 (as the reference takes them) and the step is evaluated in
double; var, m, v (and V2's amsgrad maximum) are each rounded once to their dtype. ApplyAdamW reads
its one-element hyper-parameter tensors on the device; ApplyAdamWV2 takes lr, the betas, weight decay
and eps as kernel arguments and its ``step`` tensor on the device, so neither reads anything back.
Operands share one coalesced geometry (``Meta``); a one-dimensional one skips the index unravel.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.ctypes_map import ctype, load
from acl_rocm.kernels.movement import HELPERS, meta_struct, store_narrow, unique_name
from acl_rocm.kernels.prelude import PRELUDE

OPERANDS = ("var", "m", "v", "grad", "vmax")
"""Strided operands, in Meta's stride rows (``vmax``: the amsgrad maximum, when present)."""
V1_SCALARS = ("beta1Power", "beta2Power", "lr", "weightDecay", "beta1", "beta2", "eps")
"""ApplyAdamW's one-element hyper-parameter tensors, in kernel-parameter order."""
_DOUBLE = ctype(D.ACL_DOUBLE)


@dataclass(frozen=True)
class AdamW:
    """One specialisation: state dtype, the version, amsgrad / maximize, the scalar tensors' dtypes."""

    dtype: D
    version: int
    amsgrad: bool
    maximize: bool
    ndim: int
    scalar_dtypes: tuple[D, ...]
    """V1: the dtype of each of :data:`V1_SCALARS`; V2: ``(step's dtype,)``."""

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return unique_name("adamw", self)

    def params(self) -> list[str]:
        """Kernel parameters after ``Meta``: the state, grad, the maximum, then the hyper-parameters."""
        st = ctype(self.dtype).storage
        found = [f"{st}* var", f"{st}* m", f"{st}* v", f"const {st}* grad", f"{st}* vmax"]
        if self.version == 1:
            found += [f"const {ctype(dt).storage}* {name}" for name, dt in zip(V1_SCALARS, self.scalar_dtypes)]
        else:
            found.append(f"const {ctype(self.scalar_dtypes[0]).storage}* step")
            found += [f"const float {name}" for name in ("lr", "weightDecay", "beta1", "beta2", "eps")]
        return found

    def _hyper(self) -> list[str]:
        """C lines defining the double hyper-parameters and the two bias corrections."""
        if self.version == 1:
            return [
                *(
                    f"const double h_{name} = (double)(float)({load(f'{name}[0]', ctype(dt), _DOUBLE)});"
                    for name, dt in zip(V1_SCALARS, self.scalar_dtypes)
                ),
                "const double b1 = h_beta1, b2 = h_beta2, lr_ = h_lr, wd = h_weightDecay, eps_ = h_eps;",
                "const double bias1 = 1.0 - h_beta1Power, bias2 = 1.0 - h_beta2Power;",
            ]
        t = load("step[0]", ctype(self.scalar_dtypes[0]), _DOUBLE)
        return [
            "const double b1 = (double)beta1, b2 = (double)beta2, lr_ = (double)lr, wd = (double)weightDecay;",
            "const double eps_ = (double)eps;",
            f"const double t = (double)({t});",
            "const double bias1 = 1.0 - pow(b1, t), bias2 = 1.0 - pow(b2, t);",
        ]

    def source(self) -> str:
        """The complete kernel source."""
        c = ctype(self.dtype)

        def rd(name: str) -> str:
            return load(f"{name}[o_{name}]", c, _DOUBLE)

        if self.ndim == 1:
            offsets = [f"const long long o_{name} = i * m_.stride[{k}][0];" for k, name in enumerate(OPERANDS)]
        else:
            offsets = ["long long rest = i;", *(f"long long o_{name} = 0;" for name in OPERANDS)]
            offsets.append(f"for (int d = {self.ndim - 1}; d >= 0; --d) {{")
            offsets.append("  const long long c = rest % m_.shape[d]; rest /= m_.shape[d];")
            offsets.append("  " + " ".join(f"o_{n} += c * m_.stride[{k}][d];" for k, n in enumerate(OPERANDS)))
            offsets.append("}")
        g = f"-{rd('grad')}" if self.maximize else rd("grad")
        step = [
            *offsets,
            f"const double g = {g};",
            f"double p = {rd('var')} * (1.0 - lr_ * wd);",
            f"const double mt = b1 * {rd('m')} + (1.0 - b1) * g;",
            f"const double vt = b2 * {rd('v')} + (1.0 - b2) * g * g;",
        ]
        if self.amsgrad:
            step.append(f"const double vmx = {rd('vmax')};")
            step.append("const double vh = vmx != vmx || vt != vt ? vmx + vt : (vmx > vt ? vmx : vt);  // NaN wins")
        else:
            step.append("const double vh = vt;")
        step += [
            "p = p - (lr_ / bias1) * mt / (sqrt(vh) / sqrt(bias2) + eps_);",
            f"var[o_var] = {store_narrow('p', self.dtype)};",
            f"m[o_m] = {store_narrow('mt', self.dtype)};",
            f"v[o_v] = {store_narrow('vt', self.dtype)};",
        ]
        if self.amsgrad and self.version == 2:
            step.append(f"vmax[o_vmax] = {store_narrow('vh', self.dtype)};")
        body = [
            *self._hyper(),
            "const long long step_ = (long long)gridDim.x * blockDim.x;",
            "for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < m_.n; i += step_) {",
            *("  " + line for line in step),
            "}",
        ]
        meta = meta_struct("long long", self.ndim, len(OPERANDS))
        params = ", ".join(["const Meta m_", *self.params()])
        return "\n".join(
            [
                PRELUDE,
                HELPERS,
                f"// AdamW step (ApplyAdamW{'V2' if self.version == 2 else ''})",
                meta,
                f'extern "C" __global__ void __launch_bounds__(256) {self.kernel_name}({params}) {{',
                *("  " + line for line in body),
                "}",
                "",
            ]
        )

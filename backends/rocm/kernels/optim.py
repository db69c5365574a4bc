"""The AdamW step kernel (ApplyAdamW / ApplyAdamWV2): UNROLL elements per thread and trip, in place on var, m, v.

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
UNROLL = 4
"""Elements each thread takes per trip (their loads are in flight together)."""


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
        read = ["grad", "var", "m", "v", *(("vmax",) if self.amsgrad else ())]
        written = ["var", "m", "v", *(("vmax",) if self.amsgrad and self.version == 2 else ())]
        if self.ndim == 1:
            offsets = [f"const long long o_{name} = i * m_.stride[{k}][0];" for k, name in enumerate(OPERANDS)]
        else:
            offsets = ["long long rest = i;", *(f"long long o_{name} = 0;" for name in OPERANDS)]
            offsets.append(f"for (int d = {self.ndim - 1}; d >= 0; --d) {{")
            offsets.append("  const long long c = rest % m_.shape[d]; rest /= m_.shape[d];")
            offsets.append("  " + " ".join(f"o_{n} += c * m_.stride[{k}][d];" for k, n in enumerate(OPERANDS)))
            offsets.append("}")
        gather = [
            *offsets,
            *(f"x_{name}[u] = {load(f'{name}[o_{name}]', c, _DOUBLE)};" for name in read),
            *(f"w_{name}[u] = o_{name};" for name in written),
        ]
        step = [
            f"const double g = {'-' if self.maximize else ''}x_grad[u];",
            "double p = x_var[u] * (1.0 - lr_ * wd);",
            "const double mt = b1 * x_m[u] + (1.0 - b1) * g;",
            "const double vt = b2 * x_v[u] + (1.0 - b2) * g * g;",
        ]
        if self.amsgrad:
            step.append("const double vmx = x_vmax[u];")
            step.append("const double vh = vmx != vmx || vt != vt ? vmx + vt : (vmx > vt ? vmx : vt);  // NaN wins")
        else:
            step.append("const double vh = vt;")
        step += [
            "p = p - lr_b1 * mt / (sqrt(vh) / sqrt_b2 + eps_);",
            f"var[w_var[u]] = {store_narrow('p', self.dtype)};",
            f"m[w_m[u]] = {store_narrow('mt', self.dtype)};",
            f"v[w_v[u]] = {store_narrow('vt', self.dtype)};",
        ]
        if "vmax" in written:
            step.append(f"vmax[w_vmax[u]] = {store_narrow('vh', self.dtype)};")
        # UNROLL elements a block apart per trip: every load of all of them is issued before the first store
        # (var, m and v are written in place, so a load cannot move past a store of an earlier element)
        body = [
            *self._hyper(),
            "const double lr_b1 = lr_ / bias1, sqrt_b2 = sqrt(bias2);  // the same roundings, once per thread",
            f"const long long step_ = (long long)gridDim.x * blockDim.x * {UNROLL};",
            f"for (long long base = (long long)blockIdx.x * blockDim.x * {UNROLL} + threadIdx.x; base < m_.n;"
            " base += step_) {",
            *(f"  double x_{name}[{UNROLL}];" for name in read),
            *(f"  long long w_{name}[{UNROLL}];" for name in written),
            "  #pragma unroll",
            f"  for (int u = 0; u < {UNROLL}; ++u) {{",
            "    const long long i = base + (long long)u * blockDim.x;",
            "    if (i < m_.n) {",
            *("      " + line for line in gather),
            "    }",
            "  }",
            "  #pragma unroll",
            f"  for (int u = 0; u < {UNROLL}; ++u) {{",
            "    if (base + (long long)u * blockDim.x < m_.n) {",
            *("      " + line for line in step),
            "    }",
            "  }",
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

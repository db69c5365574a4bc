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
F2D_BITS = r"""
// float -> double in integer operations where the value is a normal number (the F2F instruction it replaces runs
// at a quarter of the double rate); zero, subnormals, inf and NaN take the conversion, out of line
__device__ __attribute__((noinline)) double fe_f2d_slow(float f) { return (double)f; }
ACL_DEV double fe_f2d_bits(float f) {
  const unsigned u = __float_as_uint(f), e = (u >> 23) & 0xffu;
  if (e == 0u || e == 0xffu) return fe_f2d_slow(f);  // zero, subnormal, inf, NaN
  const unsigned long long w = ((unsigned long long)(u & 0x80000000u) << 32) |
                               ((unsigned long long)(e + 896u) << 52) | ((unsigned long long)(u & 0x7fffffu) << 29);
  return __longlong_as_double((long long)w);
}
"""
"""The exact float -> double widening in integer operations (``ACL_ADAMW_CONFIG=vecbits``)."""


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
    vec: int = 1
    """Elements a thread takes per trip as one aligned access of each operand (``ACL_ADAMW_CONFIG=vec``: 4 on a
    1-D unit-stride geometry whose addresses allow it): every operand's vector is loaded before any is computed
    or stored, so a thread keeps 4x the bytes in flight; a tail past the last whole vector goes element by element.
    The math per element is the same double evaluation, so the values equal the one-element kernel's bit for bit."""
    bits: bool = False
    """``ACL_ADAMW_CONFIG=vecbits`` (with ``vec``): the vector loop widens float/fp16/bf16 state to double in integer
    operations where the values are normal (4 of the 7 F2F conversions an element took; exact, the same bits)."""

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

    def _update(self, reads: dict[str, str], writes: dict[str, str]) -> list[str]:
        """C lines of one element's step: ``reads`` are the operands' double values, ``writes`` their stores."""
        g = f"-{reads['grad']}" if self.maximize else reads["grad"]
        step = [
            f"const double g = {g};",
            f"double p = {reads['var']} * (1.0 - lr_ * wd);",
            f"const double mt = b1 * {reads['m']} + (1.0 - b1) * g;",
            f"const double vt = b2 * {reads['v']} + (1.0 - b2) * g * g;",
        ]
        if self.amsgrad:
            step.append(f"const double vmx = {reads['vmax']};")
            step.append("const double vh = vmx != vmx || vt != vt ? vmx + vt : (vmx > vt ? vmx : vt);  // NaN wins")
        else:
            step.append("const double vh = vt;")
        step += [
            "p = p - (lr_ / bias1) * mt / (sqrt(vh) / sqrt(bias2) + eps_);",
            f"{writes['var']} = {store_narrow('p', self.dtype)};",
            f"{writes['m']} = {store_narrow('mt', self.dtype)};",
            f"{writes['v']} = {store_narrow('vt', self.dtype)};",
        ]
        if self.amsgrad and self.version == 2:
            step.append(f"{writes['vmax']} = {store_narrow('vh', self.dtype)};")
        return step

    def _vector_lines(self) -> list[str]:
        """The whole vectors of a 1-D unit-stride geometry: all loads of a trip, then its elements; ``first`` after."""
        c = ctype(self.dtype)
        vt = f"AclVec<{c.storage}, {self.vec}>"
        used = [n for n in OPERANDS if n != "vmax" or self.amsgrad]
        written = ["var", "m", "v", *(["vmax"] if self.amsgrad and self.version == 2 else [])]
        if self.bits and self.dtype in (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16):
            reads = {n: f"fe_f2d_bits({c.decode.format(x=f'q_{n}.v[e]')})" for n in used}
        else:
            reads = {n: load(f"q_{n}.v[e]", c, _DOUBLE) for n in used}
        writes = {n: f"q_{n}.v[e]" for n in written}
        return [
            f"const long long nv = m_.n / {self.vec};",
            "const long long vstep = (long long)gridDim.x * blockDim.x;",
            "for (long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x; q < nv; q += vstep) {",
            *(f"  {'' if n in written else 'const '}{vt} q_{n} = reinterpret_cast<const {vt}*>({n})[q];" for n in used),
            "  #pragma unroll",
            f"  for (int e = 0; e < {self.vec}; ++e) {{",
            *("    " + line for line in self._update(reads, writes)),
            "  }",
            *(f"  reinterpret_cast<{vt}*>({n})[q] = q_{n};" for n in written),
            "}",
            f"const long long first = nv * {self.vec};",
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
        step = [*offsets, *self._update({n: rd(n) for n in OPERANDS}, {n: f"{n}[o_{n}]" for n in OPERANDS})]
        body = [*self._hyper(), *(self._vector_lines() if self.vec > 1 else ["const long long first = 0;"])]
        body += [
            "const long long step_ = (long long)gridDim.x * blockDim.x;",
            "for (long long i = first + (long long)blockIdx.x * blockDim.x + threadIdx.x; i < m_.n; i += step_) {",
            *("  " + line for line in step),
            "}",
        ]
        meta = meta_struct("long long", self.ndim, len(OPERANDS))
        params = ", ".join(["const Meta m_", *self.params()])
        return "\n".join(
            [
                PRELUDE,
                HELPERS,
                *([F2D_BITS] if self.bits else []),
                f"// AdamW step (ApplyAdamW{'V2' if self.version == 2 else ''})",
                meta,
                f'extern "C" __global__ void __launch_bounds__(256) {self.kernel_name}({params}) {{',
                *("  " + line for line in body),
                "}",
                "",
            ]
        )

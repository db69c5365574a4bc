"""HIP sources of the Foreach* operators: one multi-tensor kernel per (formula, list dtype, scalar source).

A launch covers up to :data:`SLOTS` tensors of a list, described by a table passed by value as the
kernel's parameter struct (element count, first block, the a/b/c/out addresses and the scalar-like
operand per slot); each slot owns a run of consecutive blocks that walk its elements grid-stride, in
16-byte vectors where the slot's addresses are aligned (then the tail element by element).
Formulas (keys of :data:`acl_core.spec.ops.foreach.FORMULAS`) are evaluated in double (long long
for int32 lists) and rounded once: fp16/bf16 results go through a round-to-odd float so that the
float-to-half rounding is the only one. ForeachNorm reduces each tensor in one block.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from typing import Final, Literal

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.ctypes_map import ctype
from acl_rocm.kernels.prelude import PRELUDE

SLOTS: Final = 32
"""Tensors per launch (the table is a kernel parameter: 7 fields of 8 bytes per slot)."""
BLOCK: Final = 256
VECTOR_BYTES: Final = 16
"""The widest access of the vector loop (one per operand and element group, where a slot is aligned)."""
FIELDS: Final = ("N", "FIRST", "A", "B", "C", "OUT", "S")
Source = Literal["none", "value", "pointer"]
"""Where the scalar-like operand comes from: nowhere, the table (its bits), or device memory (its address)."""

EXPRESSIONS: Final[dict[str, str]] = {
    "abs": "acl_abs(a)",
    "neg": "(-a)",
    "exp": "exp(a)",
    "log": "log(a)",
    "sqrt": "sqrt(a)",
    "reciprocal": "(1.0 / a)",
    "sin": "sin(a)",
    "cos": "cos(a)",
    "tanh": "tanh(a)",
    "sigmoid": "acl_sigmoid(a)",
    "erf": "erf(a)",
    "sign": "acl_sign(a)",
    "acos": "acos(a)",
    "asin": "asin(a)",
    "atan": "atan(a)",
    "cosh": "cosh(a)",
    "sinh": "sinh(a)",
    "tan": "tan(a)",
    "erfc": "erfc(a)",
    "expm1": "expm1(a)",
    "log10": "log10(a)",
    "log1p": "log1p(a)",
    "log2": "log2(a)",
    "copy": "a",
    "zero": "((W)0)",
    "add_list": "(a + s * b)",
    "sub_list": "(a - s * b)",
    "mul_list": "(a * b)",
    "div_list": "(a / b)",
    "max_list": "acl_maximum(a, b)",
    "min_list": "acl_minimum(a, b)",
    "pow_list": "pow(a, b)",
    "add_s": "(a + s)",
    "sub_s": "(a - s)",
    "mul_s": "(a * s)",
    "div_s": "(a / s)",
    "max_s": "acl_maximum(a, (W)s)",
    "min_s": "acl_minimum(a, (W)s)",
    "pow_s": "pow(a, s)",
    "pow_s_a": "pow(s, a)",
    "addcdiv": "(a + s * (b / c))",
    "addcmul": "(a + s * (b * c))",
    "lerp_list": "(a + c * (b - a))",
    "lerp_s": "(a + s * (b - a))",
    "round": "fe_round(a, (int)s)",
    "unscale": "(a * s)",
}
"""Each elementwise formula as a C expression of a, b, c (entries, type W) and s (the scalar-like operand)."""
NORM_MODES: Final = {"pow": 0, "l1": 1, "l2": 2, "max": 3, "min": 4, "count": 5}

_HELPERS: Final = r"""
// double -> float rounding to odd: a later float -> half/bf16 rounding is then the only one
ACL_DEV float fe_d2f_odd(double d) {
  float f = (float)d;
  if (d != d || (double)f == d) return f;
  unsigned u = __float_as_uint(f);
  if (fabs((double)f) > fabs(d)) u -= 1u;
  return __uint_as_float(u | 1u);
}
ACL_DEV double fe_round(double x, int mode) {
  switch (mode) {
    case 1: return rint(x);
    case 2: return floor(x);
    case 3: return ceil(x);
    case 4: return round(x);
    case 5: return trunc(x);
    default: return (x == x && fabs(x) > 1.79769313486231570815e+308) ? copysign(0.0, x) : x - trunc(x);
  }
}
"""


def _is_wide(dtype: D) -> bool:
    """True when the list computes in double (floats) rather than in its own or a 64-bit integer type."""
    return dtype.is_float


def work_type(formula: str, dtype: D) -> str:
    """The C type a formula computes in for a list of ``dtype``."""
    if formula in ("copy", "zero"):
        return ctype(dtype).storage
    return "double" if _is_wide(dtype) else "long long"


def decode(dtype: D, x: str, formula: str = "") -> str:
    """A stored element ``x`` of ``dtype`` as the work type."""
    c = ctype(dtype)
    if formula in ("copy", "zero"):
        return x
    body = (c.exact_decode or c.decode).format(x=x)
    return f"((double)({body}))" if dtype.is_float else f"((long long)({body}))"


def encode(dtype: D, v: str, formula: str = "") -> str:
    """The work-type value ``v`` stored as ``dtype`` (one rounding)."""
    c = ctype(dtype)
    if formula in ("copy", "zero"):
        return v
    if dtype == D.ACL_FLOAT:
        return f"((float)({v}))"
    if dtype == D.ACL_DOUBLE:
        return f"({v})"
    if dtype.is_float:
        return c.encode.format(v=f"fe_d2f_odd({v})")
    return f"(({c.storage})({v}))"


def _name(kind: str, key: object) -> str:
    return f"acl_foreach_{kind}_{hashlib.sha1(repr(key).encode()).hexdigest()[:12]}"


def _table() -> list[str]:
    return [
        f"struct Table {{ long long nslots; long long total; long long f[{len(FIELDS)}][{SLOTS}]; }};",
        *(f"#define F_{name} {i}" for i, name in enumerate(FIELDS)),
    ]


@dataclass(frozen=True)
class ForeachKernel:
    """One elementwise formula over the slots of a table, for a list dtype and a scalar source."""

    formula: str
    dtype: D
    source: Source = "none"
    scalar_dtype: D | None = None
    """The dtype of a scalar read from device memory."""
    check_mode: bool = False
    """Round with a device roundMode: a mode outside 1..6 sets the flag and nothing is written."""
    grid2d: bool = False
    """``ACL_FOREACH_CONFIG=grid2d``: the slot is ``blockIdx.y`` (blocks past the slot's own count return at once)
    instead of a scan of the table's first-block column in every thread; the elements and values are the same."""

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return _name(self.formula, self)

    def source_text(self) -> str:
        """The complete kernel source."""
        return _elementwise_source(self)


def _scalar_lines(k: ForeachKernel) -> list[str]:
    wide = _is_wide(k.dtype) or k.formula == "unscale"
    stype = "double" if wide else "long long"
    if k.source == "none":
        return [f"const {stype} s = 0;"]
    if k.source == "value":
        if wide and k.formula != "round":  # a roundMode travels as an integer field (ops/foreach.py _scalars)
            return ["const double s = __longlong_as_double(t.f[F_S][slot]);"]
        return ["const long long s = t.f[F_S][slot];"]
    assert k.scalar_dtype is not None
    sc = ctype(k.scalar_dtype)
    raw = (sc.exact_decode or sc.decode).format(x=f"(*(const {sc.storage}*)t.f[F_S][slot])")
    if k.formula == "unscale":
        return [f"const double s = (double)({raw});"]
    if wide and k.formula != "round":
        return [f"const double s = (double)(float)({raw});"]
    return [f"const long long s = (long long)({raw});"]


@functools.cache
def _source_of(k: ForeachKernel) -> str:
    st = ctype(k.dtype).storage
    w = work_type(k.formula, k.dtype)
    expr = EXPRESSIONS[k.formula]
    uses = _uses(expr)
    loads = [f"const W {r} = {decode(k.dtype, f'{r.upper()}[i]', k.formula)};" for r in "abc" if r in uses]
    guard = []
    if k.check_mode:
        guard = ["if (s < 1 || s > 6) { if (threadIdx.x == 0) *flag = 1; return; }"]
    found = []
    if k.formula == "unscale":
        found = ["if (a != a || fabs(a) > 1.79769313486231570815e+308) *found = 1.0f;"]
    if k.grid2d:  # blockIdx.y names the slot; blockIdx.x counts from the slot's first block
        find = [
            "const int slot = (int)blockIdx.y;",
            "const long long nb = (slot + 1 < t.nslots ? t.f[F_FIRST][slot + 1] : t.total) - t.f[F_FIRST][slot];",
            "if ((long long)blockIdx.x >= nb) return;  // a slot with fewer blocks than the grid's widest",
            "const long long b0 = 0;",
        ]
    else:
        find = [
            "int slot = 0;",
            "while (slot + 1 < t.nslots && (long long)blockIdx.x >= t.f[F_FIRST][slot + 1]) ++slot;",
            "const long long b0 = t.f[F_FIRST][slot];",
            "const long long nb = (slot + 1 < t.nslots ? t.f[F_FIRST][slot + 1] : t.total) - b0;",
        ]
    body = [
        *find,
        "const long long n = t.f[F_N][slot];",
        f"const {st}* A = (const {st}*)t.f[F_A][slot];",
        f"const {st}* B = (const {st}*)t.f[F_B][slot];",
        f"const {st}* C = (const {st}*)t.f[F_C][slot];",
        f"{st}* O = ({st}*)t.f[F_OUT][slot];",
        *_scalar_lines(k),
        *guard,
        "const long long step = nb * blockDim.x;",
        "const long long t0 = ((long long)blockIdx.x - b0) * blockDim.x + threadIdx.x;",
        *_vector_lines(k, uses),
        "for (long long i = done + t0; i < n; i += step) {",
        *("  " + line for line in loads),
        *("  " + line for line in found),
        f"  O[i] = {encode(k.dtype, expr, k.formula)};",
        "}",
    ]
    if "s" not in uses:
        body.append("(void)s;")
    return "\n".join(
        [
            PRELUDE,
            _HELPERS,
            f"// foreach {k.formula}",
            *_table(),
            f"typedef {w} W;",
            f'extern "C" __global__ void __launch_bounds__({BLOCK}) {k.kernel_name}(',
            "    const Table t, int* flag, float* found) {",
            *("  " + line for line in body),
            "  (void)flag; (void)found;",
            "}",
            "",
        ]
    )


def dtype_packed(dtype: D) -> bool:
    """True for sub-byte storage (no whole-element vectors)."""
    return dtype.info.storage_bits < 8


def vector_width(dtype: D) -> int:
    """Elements of ``dtype`` per 16-byte access of the vector loop."""
    return max(1, VECTOR_BYTES // max(dtype.info.storage_bits // 8, 1))


def _vector_lines(k: ForeachKernel, uses: set[str]) -> list[str]:
    """A slot whose a/b/c/out addresses are all 16-byte aligned walks whole vectors first (``done`` after it).

    One 16-byte load per operand per element group keeps 4 (fp32) to 8 (fp16/bf16) elements of each
    operand in flight per thread, where the element loop's loads wait behind the previous store (the
    output may alias an input); each element is decoded, computed and encoded exactly as the element loop does.
    """
    st = ctype(k.dtype).storage
    v = vector_width(k.dtype)
    if v == 1 or dtype_packed(k.dtype):
        return ["const long long done = 0;"]
    vt = f"AclVec<{st}, {v}>"
    expr = EXPRESSIONS[k.formula]
    roles = [r for r in "abc" if r in uses]
    aligned = " | ".join(f"(unsigned long long){r.upper()}" for r in (*roles, "o"))
    lines = [
        "long long done = 0;",
        f"if ((({aligned}) & {VECTOR_BYTES - 1}ull) == 0ull) {{",
        f"  const long long nv = n / {v};",
        "  for (long long q = t0; q < nv; q += step) {",
        *(f"    const {vt} q{r} = *reinterpret_cast<const {vt}*>({r.upper()} + q * {v});" for r in roles),
        f"    {vt} qo;",
        "    #pragma unroll",
        f"    for (int e = 0; e < {v}; ++e) {{",
        *(f"      const W {r} = {decode(k.dtype, f'q{r}.v[e]', k.formula)};" for r in roles),
    ]
    if k.formula == "unscale":
        lines.append("      if (a != a || fabs(a) > 1.79769313486231570815e+308) *found = 1.0f;")
    lines += [
        f"      qo.v[e] = {encode(k.dtype, expr, k.formula)};",
        "    }",
        f"    *reinterpret_cast<{vt}*>(O + q * {v}) = qo;",
        "  }",
        f"  done = nv * {v};",
        "}",
    ]
    return lines


def _elementwise_source(k: ForeachKernel) -> str:
    return _source_of(k)


def _uses(expr: str) -> set[str]:
    """The role letters an expression reads (a, b, c, s as whole identifiers)."""
    return set(re.findall(r"\b([abcs])\b", expr))


@dataclass(frozen=True)
class NormKernel:
    """ForeachNorm: one block per slot reduces |x| in double (the p-norm, max, min or count of non-zeros)."""

    dtype: D

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return _name("norm", self)

    def source_text(self) -> str:
        """The complete kernel source."""
        return _norm_source(self.dtype)


@functools.cache
def _norm_source(dtype: D) -> str:
    st = ctype(dtype).storage
    body = [
        "__shared__ double part[BLOCK];",
        "const int slot = blockIdx.x;",
        "const long long n = t.f[F_N][slot];",
        f"const {st}* A = (const {st}*)t.f[F_A][slot];",
        f"{st}* O = ({st}*)t.f[F_OUT][slot];",
        "const double p = __longlong_as_double(t.f[F_S][slot]);",
        "const int mode = (int)t.f[F_C][slot];",
        "double acc = mode == 4 ? __longlong_as_double(0x7ff0000000000000LL) : 0.0;  // +inf: NVRTC has no HUGE_VAL",
        "for (long long i = threadIdx.x; i < n; i += blockDim.x) {",
        f"  const double x = fabs({decode(dtype, 'A[i]')});",
        "  switch (mode) {",
        "    case 0: acc += pow(x, p); break;",
        "    case 1: acc += x; break;",
        "    case 2: acc += x * x; break;",
        "    case 3: acc = acl_maximum(acc, x); break;",
        "    case 4: acc = acl_minimum(acc, x); break;",
        "    default: acc += (x != 0.0) ? 1.0 : 0.0; break;",
        "  }",
        "}",
        "part[threadIdx.x] = acc;",
        "__syncthreads();",
        "for (int w = BLOCK / 2; w > 0; w >>= 1) {",
        "  if ((int)threadIdx.x < w) {",
        "    const double o = part[threadIdx.x + w];",
        "    double v = part[threadIdx.x];",
        "    if (mode == 3) v = acl_maximum(v, o); else if (mode == 4) v = acl_minimum(v, o); else v = v + o;",
        "    part[threadIdx.x] = v;",
        "  }",
        "  __syncthreads();",
        "}",
        "if (threadIdx.x == 0) {",
        "  double r = part[0];",
        "  if (mode == 0) r = pow(r, 1.0 / p); else if (mode == 2) r = sqrt(r);",
        f"  O[0] = {encode(dtype, 'r')};",
        "}",
    ]
    name = NormKernel(dtype).kernel_name
    return "\n".join(
        [
            PRELUDE,
            _HELPERS,
            "// foreach norm",
            f"#define BLOCK {BLOCK}",
            *_table(),
            f'extern "C" __global__ void __launch_bounds__({BLOCK}) {name}(',
            "    const Table t) {",
            *("  " + line for line in body),
            "}",
            "",
        ]
    )

"""Kernel generators of the quantisation operators vllm-ascend reaches (rules: :mod:`acl_core.spec.ops.quant_vllm`).

Each follows the reference (:mod:`acl_reference.kernels.quant_vllm`) operation for operation: FLOAT32
quantisation arithmetic rounded once per operation (the quant family's ``ACL_Q*`` macros, no FMA
contraction), SwiGLU, RmsNorm statistics and the Kronecker products in double, rounded once to float,
and the codecs of :mod:`acl_rocm.kernels.lowp`. Every tensor is addressed through its own view
(element offsets and strides), so padded, offset and transposed views work.

* ``Quantize`` / ``TransQuantParam``: one thread per output element (the quant family's ``Meta``).
* ``BlockQuant``: one block per quantisation block (a shared-memory max, NaN-propagating).
* ``ClippedSwiglu``: one thread per output element; rows past the groups' sum (a prologue kernel's count) are 0.
* ``DequantSwigluQuant``: one block per row; a prologue kernel turns group counts into cumulative ends,
  each row binary-searches its group; dynamic mode recomputes the row after its maximum. A non-null
  ``flag`` that is set (a composing op's failed device check) makes it write nothing.
* ``MxNorm``: one block per row: the sum of squares (double), then one thread per MX block of 32.
* ``FlatQuant``: one block per slice, ``x @ P2`` in shared memory as doubles and ``P1 @ x'`` in registers
  (``FlatFused``) where N1 * N2 fits (5,632); otherwise ``x @ P2`` into a double temporary, then one block
  per slice: ``P1 @ x'`` rounded to float into a float temporary, its maximum, and the INT4 quantisation.
  These are ``ACL_FLATQUANT_KERNEL=slice``; the token tiles (the default where they fit) are
  :mod:`acl_rocm.kernels.flat_quant`'s.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Final

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.quant import (
    BLOCK_THREADS,
    GRID_LOOP,
    MX_EMAX,
    MX_MAX,
    head,
    kernel_name,
    load,
    meta,
    offsets,
    source,
    storage,
)

U8 = D.ACL_UINT8
LONG: Final = "const long long"
REDUCE_MAX: Final = [
    "__syncthreads();",
    "for (unsigned half = blockDim.x / 2; half > 0; half >>= 1) {",
    "  if (threadIdx.x < half) red[threadIdx.x] = acl_q_max(red[threadIdx.x], red[threadIdx.x + half]);",
    "  __syncthreads();",
    "}",
]
"""Lines: the block's NaN-propagating maximum of ``red[threadIdx.x]`` into ``red[0]`` (a power-of-two block)."""


def c_storage(dtype: D) -> str:
    """The C element type (the quant family's, plus UINT8 and the 64-bit integers)."""
    extra = {U8: "unsigned char", D.ACL_UINT64: "unsigned long long", D.ACL_INT64: "long long"}
    return extra.get(dtype) or storage(dtype)


def c_load(dtype: D, ptr: str, at: str) -> str:
    """C expression: element ``at`` of ``ptr`` as a float (UINT8 and INT64 as well)."""
    if dtype in (U8, D.ACL_INT64):
        return f"(float){ptr}[{at}]"
    return load(dtype, ptr, at)


def store_int(dtype: D, ptr: str, at: str, value: str) -> str:
    """C statement: ``value`` rounded half to even and saturated into an INT8 / UINT8 / INT32 element (NaN to 0)."""
    lo, hi, ctype = {
        D.ACL_INT8: (-128.0, 127.0, "signed char"),
        U8: (0.0, 255.0, "unsigned char"),
        D.ACL_INT32: (-2147483648.0, 2147483647.0, "int"),
    }[dtype]
    return f"{ptr}[{at}] = ({ctype})acl_q_int((double)({value}), ACL_QR_RINT, {lo!r}, {hi!r});"


def store_float(dtype: D, ptr: str, at: str, value: str) -> str:
    """C statement: a float ``value`` into a FLOAT32 / FLOAT16 / BFLOAT16 element (one rounding)."""
    if dtype == D.ACL_FLOAT:
        return f"{ptr}[{at}] = (float)({value});"
    return f"{ptr}[{at}] = {'acl_f2h' if dtype == D.ACL_FLOAT16 else 'acl_f2b'}((float)({value}));"


SATURATING: Final[dict[D, str]] = {
    D.ACL_FLOAT8_E4M3FN: "acl_to_e4m3fn({v})",
    D.ACL_FLOAT8_E5M2: "acl_to_e5m2_sat({v})",
    D.ACL_HIFLOAT8: "acl_to_hif8(({v}) > 32768.0f ? 32768.0f : (({v}) < -32768.0f ? -32768.0f : ({v})))",
}
"""Saturating float encoders (HiFloat8 clamped to ±32768 first; NaN passes through the comparisons)."""
GOLDEN: Final[dict[D, str]] = {
    D.ACL_FLOAT8_E4M3FN: "acl_to_e4m3fn_ovf_nan({v})",
    D.ACL_FLOAT8_E5M2: "acl_to_e5m2({v})",
    D.ACL_HIFLOAT8: "acl_to_hif8({v})",
}
"""ml_dtypes' conversions (the goldens): E4M3FN overflow NaN, E5M2 overflow Inf; HiFloat8 overflow Inf."""


def _lines(body: list[str], indent: str = "  ") -> list[str]:
    return [indent + line for line in body]


@dataclass(frozen=True)
class Quantize:
    """out = round(x / scales [+ zeroPoints]) (Meta rows: 0 x, 1 out, 2 scales, 3 zeroPoints; space = out's view)."""

    x: D
    scale: D
    zero: D | None
    dst: D
    ndim: int

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("quantize", self)

    def source(self) -> str:
        """The complete kernel source."""
        rows = 4 if self.zero is not None else 3
        params = [*head(rows), f"const {c_storage(self.x)}* x", f"const {c_storage(self.scale)}* scales"]
        params += [f"const {c_storage(self.zero or D.ACL_FLOAT)}* zp", f"{c_storage(self.dst)}* out"]
        body = ["const long long step = (long long)gridDim.x * blockDim.x;", GRID_LOOP]
        body += _lines(offsets(self.ndim, rows, "q"))
        body.append(f"  float v = ACL_QDIV({c_load(self.x, 'x', 'o0')}, {c_load(self.scale, 'scales', 'o2')});")
        if self.zero is not None:
            body.append(f"  v = ACL_QADD(v, {c_load(self.zero, 'zp', 'o3')});")
        if self.dst in (D.ACL_INT8, U8, D.ACL_INT32):
            body.append("  " + store_int(self.dst, "out", "o1", "v"))
        elif self.dst == D.ACL_FLOAT8_E5M2:  # the golden clips to ±57344 and maps NaN to 0
            body.append("  out[o1] = acl_to_e5m2_sat(v != v ? 0.0f : v);")
        else:
            body.append(f"  out[o1] = {GOLDEN[self.dst].format(v='v')};")
        body.append("}")
        return source(
            f"Quantize {self.x.short} -> {self.dst.short}", meta(self.ndim, rows), self.kernel_name, params, body
        )


@dataclass(frozen=True)
class TransQuantParam:
    """out = packed(scale [, offset]) (Meta rows: 0 out, 1 scale, 2 offset; space = out's view)."""

    offset: bool
    ndim: int

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("transquant", self)

    def source(self) -> str:
        """The complete kernel source."""
        rows = 3 if self.offset else 2
        params = [*head(rows), "unsigned long long* out", "const float* scale", "const float* offset"]
        body = ["const long long step = (long long)gridDim.x * blockDim.x;", GRID_LOOP]
        body += _lines(offsets(self.ndim, rows, "q"))
        body.append(
            "  unsigned long long w = (unsigned long long)(__float_as_uint(scale[o1]) & 0xFFFFE000u) | (1ull << 46);"
        )
        if self.offset:
            body += [
                "  double o = rint((double)offset[o2]);",
                "  o = o != o ? 0.0 : (o < -256.0 ? -256.0 : (o > 255.0 ? 255.0 : o));",
                "  w = (w & 0x4000FFFFFFFFull) | (((unsigned long long)((long long)o) & 0x1FFull) << 37);",
            ]
        body += ["  out[o0] = w;", "}"]
        return source("TransQuantParamV2", meta(self.ndim, rows), self.kernel_name, params, body)


@dataclass(frozen=True)
class BlockQuant:
    """One block per (batch, block row, block column); strides ``(batch, row, col)`` per tensor, ``n`` blocks."""

    x: D
    dst: D

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("blockquant", self)

    def source(self) -> str:
        """The complete kernel source."""
        params = [f"const {c_storage(self.x)}* x", f"{LONG} x0", f"{LONG} xb", f"{LONG} xr", f"{LONG} xc"]
        params += [f"{c_storage(self.dst)}* y", f"{LONG} y0", f"{LONG} yb", f"{LONG} yr", f"{LONG} yc"]
        params += ["float* s", f"{LONG} s0", f"{LONG} sb", f"{LONG} sr", f"{LONG} sc"]
        params += [f"{LONG} m", f"{LONG} n", f"{LONG} rb", f"{LONG} cb", f"{LONG} mb", f"{LONG} nb", f"{LONG} total"]
        params += ["const float top", "const float min_scale"]
        if self.dst == D.ACL_INT8:
            put = store_int(D.ACL_INT8, "y", "yo", "q")
        else:
            put = f"y[yo] = {SATURATING[self.dst].format(v='q')};"
        body = [
            "__shared__ float red[256];",
            "__shared__ float block_scale;",
            "const float cap = ACL_QDIV(1.0f, min_scale);",
            "for (long long blk = blockIdx.x; blk < total; blk += gridDim.x) {",
            "  const long long bc = blk % nb, br = (blk / nb) % mb, b = blk / (nb * mb);",
            "  const long long r0 = br * rb, c0 = bc * cb;",
            "  const long long rows = m - r0 < rb ? m - r0 : rb, cols = n - c0 < cb ? n - c0 : cb;",
            "  float amax = 0.0f;",
            "  for (long long i = threadIdx.x; i < rows * cols; i += blockDim.x) {",
            "    const long long r = r0 + i / cols, c = c0 + i % cols;",
            f"    amax = acl_q_max(amax, fabsf({c_load(self.x, 'x', 'x0 + b * xb + r * xr + c * xc')}));",
            "  }",
            "  red[threadIdx.x] = amax;",
            *_lines(REDUCE_MAX),
            "  if (threadIdx.x == 0) {",
            "    float sv = ACL_QDIV(red[0], top);",
            "    if (sv <= 3.40282346638528859812e+38f && cap < sv) sv = cap;",
            "    block_scale = sv;",
            "    s[s0 + b * sb + br * sr + bc * sc] = sv;",
            "  }",
            "  __syncthreads();",
            "  const float sv = block_scale;",
            "  for (long long i = threadIdx.x; i < rows * cols; i += blockDim.x) {",
            "    const long long r = r0 + i / cols, c = c0 + i % cols;",
            f"    const float v = {c_load(self.x, 'x', 'x0 + b * xb + r * xr + c * xc')};",
            "    const float q = sv == 0.0f ? 0.0f : ACL_QDIV(v, sv);",
            "    const long long yo = y0 + b * yb + r * yr + c * yc;",
            "    " + put,
            "  }",
            "  __syncthreads();",
            "}",
        ]
        return source(f"DynamicBlockQuant {self.x.short} -> {self.dst.short}", "", self.kernel_name, params, body)


SWIGLU_HELPERS: Final = r"""
// min(a, hi) and clamp(b, -hi, hi) that keep a NaN operand (np.minimum / np.clip)
ACL_DEV double acl_sw_min(double a, double hi) { return a != a ? a : (a < hi ? a : hi); }
ACL_DEV double acl_sw_clip(double b, double hi) { return b != b ? b : (b < -hi ? -hi : (b > hi ? hi : b)); }
"""


@dataclass(frozen=True)
class ClippedSwiglu:
    """One thread per output element (Meta rows over out's view: 0 out, 1 x with x's strides), in double.

    Double, not float: the sigmoid's argument ``alpha·A`` rounded to float would carry an error of
    ``|alpha·A|`` half-ulps into ``exp``, past any small ulp bound for large negative ``A``.

    ``dim`` is the split dim, ``after`` the product of the dims after it, ``half`` half of x's ``dim``;
    the merged index of an output element is ``c * after + a``; its A and B elements are merged indices
    ``2j`` / ``2j + 1`` (interleaved) or ``j`` / ``j + half * after`` of x. Rows (the dims before ``dim``)
    at or past ``valid[0]`` are written with 0.
    """

    x: D
    ndim: int
    dim: int
    interleaved: bool

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("clippedswiglu", self)

    def source(self) -> str:
        """The complete kernel source."""
        st = c_storage(self.x)
        params = [*head(2), f"{st}* out", f"const {st}* x", f"{LONG} after", f"{LONG} half", "const long long* valid"]
        params += ["const float alpha", "const float limit", "const float bias"]
        nd, dim = self.ndim, self.dim
        body = [
            "const long long step = (long long)gridDim.x * blockDim.x;",
            "const long long rows_valid = valid == 0 ? (long long)1 << 62 : valid[0];",
            GRID_LOOP,
            "  long long rest = q, o0 = b0, row = 0, a = 0, c = 0, xpre = b1;",
            f"  long long coord[{nd}];",
            f"  for (int d = {nd - 1}; d >= 0; --d) {{ coord[d] = rest % m.shape[d]; rest /= m.shape[d]; }}",
            f"  for (int d = 0; d < {nd}; ++d) {{",
            "    o0 += coord[d] * m.stride[0][d];",
            f"    if (d < {dim}) {{ row = row * m.shape[d] + coord[d]; xpre += coord[d] * m.stride[1][d]; }}",
            f"    else if (d == {dim}) c = coord[d];",
            "    else a = a * m.shape[d] + coord[d];",
            "  }",
            "  if (row >= rows_valid) {",
            "    " + store_float(self.x, "out", "o0", "0.0f"),
            "    continue;",
            "  }",
            "  const long long j = c * after + a;",
            f"  long long ia = {'2 * j' if self.interleaved else 'j'};",
            f"  long long ib = {'2 * j + 1' if self.interleaved else 'j + half * after'};",
            "  long long xa = xpre, xb = xpre;",
            f"  xa += (ia / after) * m.stride[1][{dim}];",
            f"  xb += (ib / after) * m.stride[1][{dim}];",
            "  ia %= after; ib %= after;",
            f"  for (int d = {nd - 1}; d > {dim}; --d) {{",
            "    xa += (ia % m.shape[d]) * m.stride[1][d]; ia /= m.shape[d];",
            "    xb += (ib % m.shape[d]) * m.stride[1][d]; ib /= m.shape[d];",
            "  }",
            f"  const double va = acl_sw_min((double){c_load(self.x, 'x', 'xa')}, (double)limit);",
            f"  const double vb = acl_sw_clip((double){c_load(self.x, 'x', 'xb')}, (double)limit);",
            "  const double glu = va / (1.0 + exp(-((double)alpha * va)));",
            "  " + store_float(self.x, "out", "o0", "glu * (vb + (double)bias)"),
            "}",
        ]
        text = source(f"ClippedSwiglu {self.x.short} dim {dim}", meta(nd, 2), self.kernel_name, params, body)
        return text.replace('extern "C"', SWIGLU_HELPERS + '\nextern "C"', 1)


GROUP_ENDS: Final = r"""
extern "C" __global__ void __launch_bounds__(32) acl_quant_group_ends(const long long* counts, const int* counts32,
    const long long c0, const long long cs, const long long groups, const long long rows, long long* ends) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  long long total = 0;
  for (long long g = 0; g < groups; ++g) {
    const long long v = counts != 0 ? counts[c0 + g * cs] : (long long)counts32[c0 + g * cs];
    total += v > 0 ? v : 0;
    ends[g] = total < rows ? total : rows;
  }
}
"""
"""Cumulative group ends (negative counts as 0, capped at ``rows``) from INT64 or INT32 counts, one thread."""


@dataclass(frozen=True)
class DequantSwigluQuant:
    """One block per row of ``x`` viewed as (rows, 2H) through ``xr`` / ``xc`` strides (rows are flat).

    Row ``r``'s leading coordinates come from ``lead`` (the leading dims, up to 7) for x, y, scale and
    the activation scale. Parameters resolve per group: element ``base + g * gs + col * cs``.
    """

    x: D
    bias: D | None
    act: bool
    quant_scale: bool
    quant_offset: bool
    dst: D
    swiglu: int
    left: bool
    dynamic: bool
    lead: int

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("dsq", self)

    def _param(self, name: str) -> list[str]:
        return [f"const {'float' if name != 'bias' else c_storage(self.bias or D.ACL_FLOAT)}* {name}"] + [
            f"{LONG} {name}{k}" for k in ("0", "g", "c")
        ]

    def _y(self, col: str) -> list[str]:
        """Lines computing ``const float y`` for output column ``col`` (dequantise, then SwiGLU in double)."""
        mode = self.swiglu
        if mode == 1:
            g, li = f"2 * ({col})", f"2 * ({col}) + 1"
        elif self.left:
            g, li = col, f"({col}) + hw"
        else:
            g, li = f"({col}) + hw", col
        lines = [f"const double xg = dq({g});", f"const double xl = dq({li});"]
        if mode == 0:
            lines.append("const float yv = (float)(xg / (1.0 + exp(-xg)) * xl);")
        elif mode in (1, 2):
            lines += [
                "const double ga = acl_sw_min(xg, lim);",
                "const float yv = (float)(ga / (1.0 + exp(-(alpha * ga))) * (acl_sw_clip(xl, lim) + bias_v));",
            ]
        else:
            lines.append("const float yv = (float)(acl_sw_min(xg / (1.0 + exp(-xg)), lim) * acl_sw_clip(xl, lim));")
        return lines

    def _dequant(self) -> list[str]:
        """A lambda-free device helper, written inline as a macro: dq(col) -> float32 dequantised value as double."""
        if self.x != D.ACL_INT32:
            return [f"#define dq(col) ((double){c_load(self.x, 'x', 'xrow + (col) * xc')})"]
        xi = "x[xrow + (col) * xc]"
        if self.bias == D.ACL_INT32:
            xi = f"(int)((unsigned)({xi}) + (unsigned)bias[bias_row + (col) * biasc])"
        v = f"ACL_QMUL((float)({xi}), ws[ws_row + (col) * wsc])"
        if self.act:
            v = f"ACL_QMUL({v}, act_v)"
        if self.bias is not None and self.bias != D.ACL_INT32:
            v = f"ACL_QADD({v}, {c_load(self.bias, 'bias', 'bias_row + (col) * biasc')})"
        return [f"#define dq(col) ((double)({v}))"]

    def _put(self, value: str) -> str:
        at = "yrow + j * yc"
        if self.dst == D.ACL_INT8:
            return store_int(D.ACL_INT8, "y", at, value)
        if self.dst == D.ACL_FLOAT4_E2M1:
            return f"acl_nib_set(y, {at}, acl_to_fp4({value}));"
        return f"y[{at}] = {GOLDEN[self.dst].format(v=value)};"

    def source(self) -> str:
        """The complete kernel source."""
        lead = self.lead
        params = [f"const {c_storage(self.x)}* x", f"{LONG} x0", f"{LONG} xc"]
        params += [*self._param("ws"), *self._param("bias"), *self._param("qs"), *self._param("qo")]
        params += ["const float* act", f"{LONG} act0", f"{c_storage(self.dst)}* y", f"{LONG} y0", f"{LONG} yc"]
        params += ["float* s", f"{LONG} s0", "const long long* ends", f"{LONG} groups", f"{LONG} rows", f"{LONG} hw"]
        params += ["const Lead shape", "const Lead xs", "const Lead ys", "const Lead ss", "const Lead as_"]
        params += ["const float top", "const double lim", "const double alpha", "const double bias_v"]
        params += ["const int* flag"]
        put, zero = self._put("q"), self._put("0.0f")
        qs = "qs[qs_row + j * qsc]"
        qo = "qo[qo_row + j * qoc]"
        if self.dynamic:
            value = f"ACL_QMUL(yv, {qs})" if self.quant_scale else "yv"
        else:
            value = f"ACL_QDIV(yv, {qs})"
            if self.quant_offset:
                value = f"ACL_QADD({value}, {qo})"
        body = [
            "if (flag != 0 && *flag) return;  // a caller's device check failed (a bad group list): write nothing",
            *(["__shared__ float red[256];"] if self.dynamic else []),
            "__shared__ long long row_group;",
            *self._dequant(),
            "for (long long row = blockIdx.x; row < rows; row += gridDim.x) {",
            "  long long rest = row, xrow = x0, yrow = y0, srow = s0, arow = act0;",
            f"  for (int d = {lead - 1}; d >= 0; --d) {{",
            "    const long long c = rest % shape.v[d]; rest /= shape.v[d];",
            "    xrow += c * xs.v[d]; yrow += c * ys.v[d]; srow += c * ss.v[d]; arow += c * as_.v[d];",
            "  }",
            "  if (threadIdx.x == 0) {",
            "    long long lo = 0, hi = ends == 0 ? 0 : groups;",
            "    while (lo < hi) {",
            "      const long long mid = lo + ((hi - lo) >> 1);",
            "      if (ends[mid] <= row) lo = mid + 1; else hi = mid;",
            "    }",
            "    row_group = lo;",
            "  }",
            "  __syncthreads();",
            "  const long long g = row_group;",
            "  if (g >= groups) {",
            "    for (long long j = threadIdx.x; j < hw; j += blockDim.x) { " + zero + " }",
            "    if (threadIdx.x == 0) s[srow] = 0.0f;",
            "    __syncthreads();",
            "    continue;",
            "  }",
            "  const long long ws_row = ws0 + g * wsg, bias_row = bias0 + g * biasg;",
            "  const long long qs_row = qs0 + g * qsg, qo_row = qo0 + g * qog;",
            f"  const float act_v = {'act[arow]' if self.act else '1.0f'};",
            "  (void)act_v; (void)ws_row; (void)bias_row; (void)qs_row; (void)qo_row;",
            "  float sv = 0.0f;",
        ]
        if self.dynamic:
            body += [
                "  float amax = 0.0f;",
                "  for (long long j = threadIdx.x; j < hw; j += blockDim.x) {",
                *_lines(self._y("j"), "    "),
                f"    amax = acl_q_max(amax, fabsf({value}));",
                "  }",
                "  red[threadIdx.x] = amax;",
                *_lines(REDUCE_MAX),
                "  sv = red[0] > 0.0f ? ACL_QDIV(red[0], top) : 1.0f;",
                "  __syncthreads();",
            ]
        body += [
            "  if (threadIdx.x == 0) s[srow] = sv;",
            "  for (long long j = threadIdx.x; j < hw; j += blockDim.x) {",
            *_lines(self._y("j"), "    "),
            f"    const float q = {'ACL_QDIV(' + value + ', sv)' if self.dynamic else value};",
            "    " + put,
            "  }",
            "  __syncthreads();",
            "}",
            "#undef dq",
        ]
        struct = f"struct Lead {{ long long v[{max(lead, 1)}]; }};"
        text = source(
            f"DequantSwigluQuant {self.x.short} -> {self.dst.short} mode {self.swiglu}",
            struct,
            self.kernel_name,
            params,
            body,
        )
        return text.replace('extern "C"', SWIGLU_HELPERS + '\nextern "C"', 1)


@dataclass(frozen=True)
class MxNorm:
    """One block per row (rows flat over the leading dims of ``lead``); MX blocks of 32 along the last dim."""

    x: D
    add: bool
    gamma: D
    beta: bool
    dst: D
    alg: int
    rstd: bool
    lead: int

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("mxnorm", self)

    def _code(self) -> list[str]:
        """Lines: ``unsigned code`` of the block from ``amax`` (double) and ``special`` (DynamicMxQuant's)."""
        if self.alg == 0:
            return [
                "int e = -1000;",
                "if (amax > 0.0) { int ex; frexp(amax, &ex); e = ex - 1; }",
                f"int k = e - {MX_EMAX[self.dst]};",
                "k = k < -127 ? -127 : (k > 127 ? 127 : k);",
                "const unsigned code = special ? 255u : (unsigned)(k + 127);",
            ]
        return [
            f"const float ratio = (float)(amax / {MX_MAX[self.dst]!r});",
            "const unsigned bits = __float_as_uint(ratio);",
            "const unsigned ex = (bits >> 23) & 0xffu, mant = bits & 0x7fffffu;",
            "const bool up_normal = ex >= 1u && ex < 254u && mant > 0u;",
            "const unsigned up = (up_normal || (ex == 0u && mant > 0x400000u)) ? 1u : 0u;",
            "const unsigned code = (special || ex == 255u) ? 255u : ex + up;",
        ]

    def source(self) -> str:
        """The complete kernel source."""
        st, lead = c_storage(self.x), max(self.lead, 1)
        params = [f"const {st}* x1", f"{LONG} x1c", f"const {st}* x2", f"{LONG} x2c"]
        params += [f"const {c_storage(self.gamma)}* gamma", f"{LONG} g0", f"{LONG} gc"]
        params += [f"const {c_storage(self.gamma)}* beta", f"{LONG} b0", f"{LONG} bc"]
        params += [f"{c_storage(self.dst)}* y", f"{LONG} yc", f"{st}* xout", f"{LONG} xoc"]
        params += ["unsigned char* mx", f"{LONG} mxp", f"{LONG} mxs", "float* rstd_out"]
        params += [f"{LONG} rows", f"{LONG} n", "const double eps", "const int mode", "const Lead shape"]
        params += [
            "const Lead x1s",
            "const Lead x2s",
            "const Lead ys",
            "const Lead xos",
            "const Lead mxr",
            "const Lead rs",
        ]
        params += [f"{LONG} x1b", f"{LONG} x2b", f"{LONG} yb", f"{LONG} xob", f"{LONG} mxb", f"{LONG} rb"]
        xv = f"(double){c_load(self.x, 'x1', 'x1r + i * x1c')}"
        if self.add:
            xv += f" + (double){c_load(self.x, 'x2', 'x2r + i * x2c')}"
        gv = f"(double){c_load(self.gamma, 'gamma', 'g0 + i * gc')}"
        yv = f"(float)(v * rstd * {gv}" + (
            f" + (double){c_load(self.gamma, 'beta', 'b0 + i * bc')})" if self.beta else ")"
        )
        if self.dst == D.ACL_FLOAT4_E2M1:
            put = "acl_nib_set(y, yr + i * yc, acl_to_fp4_mode(qv, mode));"
        else:
            put = f"y[yr + i * yc] = {SATURATING[self.dst].format(v='qv')};"
        body = [
            "__shared__ double red_d[256];",
            "for (long long row = blockIdx.x; row < rows; row += gridDim.x) {",
            "  long long rest = row, x1r = x1b, x2r = x2b, yr = yb, xor_ = xob, mr = mxb, rr = rb;",
            f"  for (int d = {lead - 1}; d >= 0; --d) {{",
            "    const long long c = rest % shape.v[d]; rest /= shape.v[d];",
            "    x1r += c * x1s.v[d]; x2r += c * x2s.v[d]; yr += c * ys.v[d]; xor_ += c * xos.v[d];",
            "    mr += c * mxr.v[d]; rr += c * rs.v[d];",
            "  }",
            "  (void)x2r; (void)xor_; (void)rr;",
            "  double sq = 0.0;",
            "  for (long long i = threadIdx.x; i < n; i += blockDim.x) {",
            f"    const double v = {xv};",
            "    sq += v * v;",
            "  }",
            "  red_d[threadIdx.x] = sq;",
            "  __syncthreads();",
            "  for (unsigned half = blockDim.x / 2; half > 0; half >>= 1) {",
            "    if (threadIdx.x < half) red_d[threadIdx.x] += red_d[threadIdx.x + half];",
            "    __syncthreads();",
            "  }",
            "  const double rstd = 1.0 / sqrt(red_d[0] / (double)n + eps);",
            "  __syncthreads();",
        ]
        if self.rstd:
            body.append("  if (threadIdx.x == 0) rstd_out[rr] = (float)rstd;")
        body += [
            f"  const long long blocks = (n + {31}) / 32, slots = ((blocks + 1) / 2) * 2;",
            "  for (long long b = threadIdx.x; b < slots; b += blockDim.x) {",
            "    const long long at = mr + (b / 2) * mxp + (b % 2) * mxs;",
            "    if (b >= blocks) { mx[at] = 0; continue; }",
            "    const long long first = b * 32, last = first + 32 < n ? first + 32 : n;",
            "    double amax = 0.0;",
            "    bool special = false;",
            "    for (long long i = first; i < last; ++i) {",
            f"      const double v = {xv};",
        ]
        if self.add:
            body.append("      " + store_float(self.x, "xout", "xor_ + i * xoc", "v"))
        body += [
            f"      const double a = fabs((double){yv});",
            "      if (!(a <= 1.79769313486231570815e+308)) special = true;",
            "      else if (a > amax) amax = a;",
            "    }",
            *_lines(self._code(), "    "),
            "    mx[at] = (unsigned char)code;",
            "    const double scale = ldexp(1.0, (int)code - 127);",
            "    for (long long i = first; i < last; ++i) {",
            f"      const double v = {xv};",
            f"      const double qv = code == 255u ? 0.0 : (double){yv} / scale;",
            "      " + put,
            "    }",
            "  }",
            "  __syncthreads();",
            "}",
        ]
        struct = f"struct Lead {{ long long v[{lead}]; }};"
        name = "AddRmsNormDynamicMxQuant" if self.add else "RmsNormDynamicMxQuant"
        return source(f"{name} {self.x.short} -> {self.dst.short}", struct, self.kernel_name, params, body)


@dataclass(frozen=True)
class FlatRight:
    """x' = x[m] @ P2 in double, one thread per element of the (M, N1, N2) temporary (contiguous)."""

    x: D

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("flatright", self)

    def source(self) -> str:
        """The complete kernel source."""
        st = c_storage(self.x)
        params = [f"const {st}* x", f"{LONG} x0", f"{LONG} xm", f"{LONG} xi", f"{LONG} xj"]
        params += [f"const {st}* p", f"{LONG} p0", f"{LONG} pr", f"{LONG} pc", "double* t"]
        params += [f"{LONG} total", f"{LONG} n1", f"{LONG} n2"]
        body = [
            "const long long step = (long long)gridDim.x * blockDim.x;",
            "for (long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x; q < total; q += step) {",
            "  const long long j = q % n2, i = (q / n2) % n1, mm = q / (n1 * n2);",
            "  double acc = 0.0;",
            "  for (long long b = 0; b < n2; ++b)",
            f"    acc += (double){c_load(self.x, 'x', 'x0 + mm * xm + i * xi + b * xj')}"
            f" * (double){c_load(self.x, 'p', 'p0 + b * pr + j * pc')};",
            "  t[q] = acc;",
            "}",
        ]
        return source(f"FlatQuant x @ P2 {self.x.short}", "", self.kernel_name, params, body)


@dataclass(frozen=True)
class FlatLeft:
    """Per slice m (one block): x'' = P1 @ x' rounded to float (into ``f``), its maximum, INT4 / packed INT32 out."""

    x: D
    dst: D

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("flatleft", self)

    def source(self) -> str:
        """The complete kernel source."""
        st = c_storage(self.x)
        params = [f"const {st}* p", f"{LONG} p0", f"{LONG} pr", f"{LONG} pc", "const double* t", "float* f"]
        params += [f"{c_storage(self.dst)}* out", f"{LONG} o0", f"{LONG} om", f"{LONG} oi", f"{LONG} oj"]
        params += [
            "float* s",
            f"{LONG} s0",
            f"{LONG} sm",
            f"{LONG} mcount",
            f"{LONG} n1",
            f"{LONG} n2",
            "const float top",
        ]
        if self.dst == D.ACL_INT32:
            write = [
                "  for (long long w = threadIdx.x; w < n1 * (n2 / 8); w += blockDim.x) {",
                "    const long long i = w / (n2 / 8), j0 = (w % (n2 / 8)) * 8;",
                "    unsigned word = 0u;",
                "    for (int k = 0; k < 8; ++k) {",
                "      const float v = slice[i * n2 + j0 + k];",
                "      const float qv = sv == 0.0f ? 0.0f : ACL_QDIV(v, sv);",
                "      word |= ((unsigned)acl_q_int((double)qv, ACL_QR_RINT, -8.0, 7.0) & 0xfu) << (4 * k);",
                "    }",
                "    out[o0 + mm * om + i * oi + (j0 / 8) * oj] = (int)word;",
                "  }",
            ]
        else:
            write = [
                "  for (long long e = threadIdx.x; e < n1 * n2; e += blockDim.x) {",
                "    const long long i = e / n2, j = e % n2;",
                "    const float qv = sv == 0.0f ? 0.0f : ACL_QDIV(slice[e], sv);",
                "    acl_nib_set(out, o0 + mm * om + i * oi + j * oj,"
                " (unsigned char)(acl_q_int((double)qv, ACL_QR_RINT, -8.0, 7.0) & 0xf));",
                "  }",
            ]
        body = [
            "__shared__ float red[256];",
            "for (long long mm = blockIdx.x; mm < mcount; mm += gridDim.x) {",
            "  const double* src = t + mm * n1 * n2;",
            "  float* slice = f + mm * n1 * n2;",
            "  float amax = 0.0f;",
            "  for (long long e = threadIdx.x; e < n1 * n2; e += blockDim.x) {",
            "    const long long i = e / n2, j = e % n2;",
            "    double acc = 0.0;",
            f"    for (long long a = 0; a < n1; ++a) acc += (double){c_load(self.x, 'p', 'p0 + i * pr + a * pc')}"
            " * src[a * n2 + j];",
            "    const float v = (float)acc;",
            "    slice[e] = v;",
            "    amax = acl_q_max(amax, fabsf(v));",
            "  }",
            "  red[threadIdx.x] = amax;",
            *_lines(REDUCE_MAX),
            "  const float sv = ACL_QDIV(red[0], top);",
            "  if (threadIdx.x == 0) s[s0 + mm * sm] = sv;",
            *write,
            "  __syncthreads();",
            "}",
        ]
        return source(f"FlatQuant P1 @ x' {self.x.short} -> {self.dst.short}", "", self.kernel_name, params, body)


FUSED_SLICE: Final = 5632
"""The largest N1 * N2 FlatFused keeps in shared memory as doubles (44 KiB, under the 48 KiB static limit)."""
FUSED_PER: Final = 24
"""Elements of x'' per thread in FlatFused (256 threads, chunks a multiple of 8: 256 * 24 >= FUSED_SLICE)."""


@dataclass(frozen=True)
class FlatFused:
    """One block of 256 threads per slice m: x' = x[m] @ P2 (double, shared), x'' = P1 @ x' (float, registers).

    Each thread holds ``per`` consecutive elements of x'' (a multiple of 8, so packed INT32 words stay in
    one thread); the slice's maximum, the scale and the INT4 outputs follow without leaving the block.
    """

    x: D
    dst: D

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("flatfused", self)

    def source(self) -> str:
        """The complete kernel source."""
        st = c_storage(self.x)
        params = [f"const {st}* x", f"{LONG} x0", f"{LONG} xm", f"{LONG} xi", f"{LONG} xj"]
        params += [f"const {st}* p2", f"{LONG} q0", f"{LONG} qr", f"{LONG} qc"]
        params += [f"const {st}* p", f"{LONG} p0", f"{LONG} pr", f"{LONG} pc"]
        params += [f"{c_storage(self.dst)}* out", f"{LONG} o0", f"{LONG} om", f"{LONG} oi", f"{LONG} oj"]
        params += ["float* s", f"{LONG} s0", f"{LONG} sm", f"{LONG} mcount", f"{LONG} n1", f"{LONG} n2"]
        params += [f"{LONG} per", "const float top"]
        xv = c_load(self.x, "x", "x0 + mm * xm + i * xi + b * xj")
        pv2 = c_load(self.x, "p2", "q0 + b * qr + j * qc")
        pv1 = c_load(self.x, "p", "p0 + i * pr + a * pc")
        if self.dst == D.ACL_INT32:
            write = [
                "  for (long long k = 0; k + 8 <= per && first + k < total; k += 8) {",
                "    const long long e = first + k, i = e / n2, j0 = e % n2;",
                "    unsigned word = 0u;",
                "    for (int w = 0; w < 8; ++w) {",
                "      const float qv = sv == 0.0f ? 0.0f : ACL_QDIV(vals[k + w], sv);",
                "      word |= ((unsigned)acl_q_int((double)qv, ACL_QR_RINT, -8.0, 7.0) & 0xfu) << (4 * w);",
                "    }",
                "    out[o0 + mm * om + i * oi + (j0 / 8) * oj] = (int)word;",
                "  }",
            ]
        else:
            write = [
                "  for (long long k = 0; k < per && first + k < total; ++k) {",
                "    const long long e = first + k, i = e / n2, j = e % n2;",
                "    const float qv = sv == 0.0f ? 0.0f : ACL_QDIV(vals[k], sv);",
                "    acl_nib_set(out, o0 + mm * om + i * oi + j * oj,"
                " (unsigned char)(acl_q_int((double)qv, ACL_QR_RINT, -8.0, 7.0) & 0xf));",
                "  }",
            ]
        body = [
            f"__shared__ double xs[{FUSED_SLICE}];",
            "__shared__ float red[256];",
            "const long long total = n1 * n2, first = (long long)threadIdx.x * per;",
            "for (long long mm = blockIdx.x; mm < mcount; mm += gridDim.x) {",
            "  for (long long e = threadIdx.x; e < total; e += blockDim.x) {",
            "    const long long i = e / n2, j = e % n2;",
            "    double acc = 0.0;",
            f"    for (long long b = 0; b < n2; ++b) acc += (double){xv} * (double){pv2};",
            "    xs[e] = acc;",
            "  }",
            "  __syncthreads();",
            f"  float vals[{FUSED_PER}];",
            "  float amax = 0.0f;",
            "  for (long long k = 0; k < per && first + k < total; ++k) {",
            "    const long long e = first + k, i = e / n2, j = e % n2;",
            "    double acc = 0.0;",
            f"    for (long long a = 0; a < n1; ++a) acc += (double){pv1} * xs[a * n2 + j];",
            "    vals[k] = (float)acc;",
            "    amax = acl_q_max(amax, fabsf(vals[k]));",
            "  }",
            "  red[threadIdx.x] = amax;",
            *_lines(REDUCE_MAX),
            "  const float sv = ACL_QDIV(red[0], top);",
            "  if (threadIdx.x == 0) s[s0 + mm * sm] = sv;",
            *write,
            "  __syncthreads();",
            "}",
        ]
        return source(f"FlatQuant fused {self.x.short} -> {self.dst.short}", "", self.kernel_name, params, body)


__all__ = [
    "BLOCK_THREADS",
    "GROUP_ENDS",
    "BlockQuant",
    "ClippedSwiglu",
    "DequantSwigluQuant",
    "FlatFused",
    "FlatLeft",
    "FlatRight",
    "MxNorm",
    "Quantize",
    "TransQuantParam",
]

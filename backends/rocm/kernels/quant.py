"""Kernel generators of the quantisation family: AscendQuant(V3), AscendAntiQuant, DynamicQuant(V2), DynamicMxQuant.

Every tensor is read and written through its own view (``Meta``: the iteration space, one stride row
and one element base offset per tensor), so padded, offset and transposed views work; 4-bit tensors
are addressed by element (nibble) with :c:func:`acl_nib_get` / :c:func:`acl_nib_set`. Arithmetic
follows the reference exactly: FLOAT32 products, sums and quotients rounded once each (``__fmul_rn``
and friends, so no FMA contraction), integer results rounded by the op's mode and saturated (NaN to
0), float results encoded by the codecs of :mod:`acl_rocm.kernels.lowp`. DynamicQuant gives each row
to one block (a shared-memory max reduction, NaN-propagating like ``np.max``); DynamicMxQuant gives
each block of ``blocksize`` elements to one thread.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Final

from acl_core import lowp
from acl_core.dtypes import DataType as D
from acl_rocm.kernels.lowp import DECODER, LOWP_PRELUDE
from acl_rocm.kernels.prelude import PRELUDE

BLOCK_THREADS: Final = 256

HELPERS: Final = r"""
// single-rounding float32 arithmetic (no FMA contraction), as NumPy computes
#if defined(__HIPCC_RTC__) || defined(__HIP_DEVICE_COMPILE__) || defined(__CUDA_ARCH__)
#define ACL_QMUL(a, b) __fmul_rn((a), (b))
#define ACL_QADD(a, b) __fadd_rn((a), (b))
#define ACL_QSUB(a, b) __fsub_rn((a), (b))
#define ACL_QDIV(a, b) __fdiv_rn((a), (b))
#else
#define ACL_QMUL(a, b) ((float)((a) * (b)))
#define ACL_QADD(a, b) ((float)((a) + (b)))
#define ACL_QSUB(a, b) ((float)((a) - (b)))
#define ACL_QDIV(a, b) ((float)((a) / (b)))
#endif
#define ACL_QR_RINT 0
#define ACL_QR_CEIL 1
#define ACL_QR_FLOOR 2
#define ACL_QR_TRUNC 3
// round by mode, then saturate to [lo, hi]; NaN -> 0 (lowp.round_to_int + lowp.saturate_int)
ACL_DEV long long acl_q_int(double v, int mode, double lo, double hi) {
  if (v != v) return 0;
  v = mode == ACL_QR_RINT ? rint(v) : (mode == ACL_QR_CEIL ? ceil(v) : (mode == ACL_QR_FLOOR ? floor(v) : trunc(v)));
  v = v < lo ? lo : (v > hi ? hi : v);
  return (long long)v;
}
// maximum and minimum that return a NaN operand (np.max / np.min propagate NaN)
ACL_DEV float acl_q_max(float a, float b) { return a != a ? a : (b != b ? b : (a > b ? a : b)); }
ACL_DEV float acl_q_min(float a, float b) { return a != a ? a : (b != b ? b : (a < b ? a : b)); }
"""

ROUND_CODES: Final[dict[str, int]] = {"round": 0, "rint": 0, "ceil": 1, "floor": 2, "trunc": 3}
"""Integer rounding modes (the kernels' ``mode`` argument; ACL_QR_* in C)."""
LP_MODES: Final[dict[str, int]] = {"rint": 0, "round": 1, "floor": 2}
"""Small-float rounding modes of DynamicMxQuant (ACL_LP_* of the codecs)."""
FP8 = (D.ACL_FLOAT8_E4M3FN, D.ACL_FLOAT8_E5M2)
WIDE_FLOATS: Final = (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16)
QUANT_OUTPUTS: Final = frozenset({D.ACL_INT8, D.ACL_INT4, D.ACL_INT32, *FP8, D.ACL_HIFLOAT8})
ANTI_INPUTS: Final = frozenset({D.ACL_INT8, D.ACL_INT4, D.ACL_INT32, *FP8, D.ACL_HIFLOAT8})

_STORAGE: Final[dict[D, str]] = {
    D.ACL_FLOAT: "float",
    D.ACL_FLOAT16: "unsigned short",
    D.ACL_BF16: "unsigned short",
    D.ACL_INT8: "signed char",
    D.ACL_INT32: "int",
    D.ACL_INT4: "unsigned char",
    D.ACL_FLOAT4_E2M1: "unsigned char",
    D.ACL_FLOAT8_E4M3FN: "unsigned char",
    D.ACL_FLOAT8_E5M2: "unsigned char",
    D.ACL_FLOAT8_E8M0: "unsigned char",
    D.ACL_HIFLOAT8: "unsigned char",
}


def storage(dtype: D) -> str:
    """The C type a kernel addresses elements of ``dtype`` with (bytes for the 4-bit types)."""
    return _STORAGE[dtype]


def load(dtype: D, ptr: str, at: str) -> str:
    """C expression: element ``at`` of ``ptr`` as an exact float (every value of these types is a float32)."""
    if dtype == D.ACL_FLOAT:
        return f"{ptr}[{at}]"
    if dtype == D.ACL_FLOAT16:
        return f"acl_h2f_soft({ptr}[{at}])"
    if dtype == D.ACL_BF16:
        return f"acl_b2f({ptr}[{at}])"
    if dtype in (D.ACL_INT8, D.ACL_INT32):
        return f"(float){ptr}[{at}]"
    if dtype == D.ACL_INT4:
        return f"(float)acl_int4_to_i(acl_nib_get({ptr}, {at}))"
    if dtype == D.ACL_FLOAT4_E2M1:
        return f"acl_fp4_to_f(acl_nib_get({ptr}, {at}))"
    return f"{DECODER[dtype]}({ptr}[{at}])"


def store(dtype: D, ptr: str, at: str, value: str, mode: str, saturate: bool) -> str:
    """C statement: float ``value`` quantised into element ``at`` of ``ptr`` (integers by the C expression ``mode``)."""
    if dtype == D.ACL_INT8:
        return f"{ptr}[{at}] = (signed char)acl_q_int((double)({value}), {mode}, -128.0, 127.0);"
    if dtype == D.ACL_INT4:
        code = f"(unsigned char)(acl_q_int((double)({value}), {mode}, -8.0, 7.0) & 0xf)"
        return f"acl_nib_set({ptr}, {at}, {code});"
    if dtype == D.ACL_FLOAT8_E4M3FN:
        return f"{ptr}[{at}] = {'acl_to_e4m3fn' if saturate else 'acl_to_e4m3fn_ovf_nan'}({value});"
    if dtype == D.ACL_FLOAT8_E5M2:
        return f"{ptr}[{at}] = {'acl_to_e5m2_sat' if saturate else 'acl_to_e5m2'}({value});"
    if dtype == D.ACL_HIFLOAT8:
        return f"{ptr}[{at}] = acl_to_hif8({value});"
    if dtype == D.ACL_FLOAT16:
        return f"{ptr}[{at}] = acl_f2h({value});"
    if dtype == D.ACL_BF16:
        return f"{ptr}[{at}] = acl_f2b({value});"
    raise ValueError(f"no quantised store for {dtype.short}")


def meta(ndim: int, rows: int) -> str:
    """``Meta``: ``n``, ``shape[ndim]``, ``stride[rows][ndim]`` (``long long``); row r's element offset is ``b{r}``."""
    return f"struct Meta {{ long long n; long long shape[{ndim}]; long long stride[{rows}][{ndim}]; }};"


def head(rows: int) -> list[str]:
    """The first parameters of every kernel here: ``Meta`` and each row's base element offset."""
    return ["const Meta m", *(f"const long long b{r}" for r in range(rows))]


def offsets(ndim: int, rows: int, q: str, capture: int | None = None) -> list[str]:
    """C lines: ``o0..`` = element offsets of position ``q``; ``cap`` = its coordinate along dim ``capture``."""
    lines = [f"long long rest = {q};", *(f"long long o{r} = b{r};" for r in range(rows))]
    if capture is not None:
        lines.append("long long cap = 0;")
    lines.append(f"for (int d = {ndim - 1}; d >= 0; --d) {{")
    lines.append("  const long long c = rest % m.shape[d]; rest /= m.shape[d];")
    if capture is not None:
        lines.append(f"  if (d == {capture}) cap = c;")
    lines.append("  " + " ".join(f"o{r} += c * m.stride[{r}][d];" for r in range(rows)))
    lines.append("}")
    return lines


def kernel_name(kind: str, key: object) -> str:
    """A stable extern "C" name for a kernel of ``kind`` with parameters ``key``."""
    return f"acl_quant_{kind}_{hashlib.sha1(repr(key).encode()).hexdigest()[:12]}"


def source(comment: str, meta_struct: str, name: str, params: list[str], body: list[str]) -> str:
    """A complete kernel source: preludes, helpers, Meta, one kernel."""
    return "\n".join(
        [
            PRELUDE,
            LOWP_PRELUDE,
            HELPERS,
            f"// {comment}",
            meta_struct,
            f'extern "C" __global__ void __launch_bounds__({BLOCK_THREADS}) {name}(',
            "    " + ",\n    ".join(params) + ") {",
            *("  " + line for line in body),
            "}",
        ]
    )


GRID_LOOP: Final = "for (long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x; q < m.n; q += step) {"


@dataclass(frozen=True)
class AscendQuant:
    """y = quantise(x * scale (* scale) [+ offset]) (Meta rows: 0 x, 1 y, 2 scale, 3 offset; space = y's view).

    For INT32 output (8 packed INT4 per word) each position is one output word and reads eight x
    elements ``xl`` apart (scale ``sl`` and offset ``ol`` apart). The rounding mode (``ROUND_CODES``)
    and sqrtMode are arguments.
    """

    x: D
    scale: D
    offset: bool
    dst: D
    ndim: int

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("ascend", self)

    def _value(self, j: str) -> list[str]:
        s = load(self.scale, "scale", f"o2 + {j} * sl")
        lines = [
            f"const float xv = {load(self.x, 'x', f'o0 + {j} * xl')};",
            f"const float sv = {s};",
            "float v = sqrt_mode ? ACL_QMUL(xv, ACL_QMUL(sv, sv)) : ACL_QMUL(xv, sv);",
        ]
        if self.offset:
            lines.append(f"v = ACL_QADD(v, {load(self.scale, 'offset', f'o3 + {j} * ol')});")
        return lines

    def source(self) -> str:
        """The complete kernel source."""
        rows = 4 if self.offset else 3
        st = storage(self.scale)
        params = [*head(rows), f"const {storage(self.x)}* x", f"const {st}* scale", f"const {st}* offset"]
        params += [f"{storage(self.dst)}* y", "const long long xl", "const long long sl", "const long long ol"]
        params += ["const int mode", "const int sqrt_mode"]
        body = ["const long long step = (long long)gridDim.x * blockDim.x;", GRID_LOOP]
        body += ["  " + line for line in offsets(self.ndim, rows, "q")]
        if self.dst == D.ACL_INT32:
            body += [
                "  unsigned word = 0u;",
                "  for (int j = 0; j < 8; ++j) {",
                *("    " + line for line in self._value("j")),
                "    const long long c = acl_q_int((double)v, mode, -8.0, 7.0);",
                "    word |= ((unsigned)c & 0xfu) << (4 * j);",
                "  }",
                "  y[o1] = (int)word;",
            ]
        else:
            body += ["  " + line for line in self._value("0")]
            body.append("  " + store(self.dst, "y", "o1", "v", "mode", saturate=False))
        body.append("}")
        return source(
            f"AscendQuant {self.x.short} -> {self.dst.short}",
            meta(self.ndim, rows),
            self.kernel_name,
            params,
            body,
        )


@dataclass(frozen=True)
class AntiQuant:
    """y = (x [+ offset]) * scale (* scale) (Meta rows: 0 x, 1 y, 2 scale, 3 offset; space = y's view).

    An INT32 x holds 8 INT4 along its last dim: its row's last stride is 0 and element ``c`` of the
    last dim is nibble ``c % 8`` of word ``c / 8`` (``xl`` apart).
    """

    x: D
    scale: D
    offset: bool
    dst: D
    ndim: int

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("anti", self)

    def source(self) -> str:
        """The complete kernel source."""
        rows = 4 if self.offset else 3
        st = storage(self.scale)
        params = [*head(rows), f"const {storage(self.x)}* x", f"const {st}* scale", f"const {st}* offset"]
        params += [f"{storage(self.dst)}* y", "const long long xl", "const int sqrt_mode"]
        body = ["const long long step = (long long)gridDim.x * blockDim.x;", GRID_LOOP]
        body += ["  " + line for line in offsets(self.ndim, rows, "q")]
        if self.x == D.ACL_INT32:
            body += [
                f"  const long long last = q % m.shape[{self.ndim - 1}];",
                "  const unsigned word = (unsigned)x[o0 + (last / 8) * xl];",
                "  float v = (float)acl_int4_to_i((unsigned char)((word >> (4 * (last % 8))) & 0xfu));",
            ]
        else:
            body.append(f"  float v = {load(self.x, 'x', 'o0')};")
        if self.offset:
            body.append(f"  v = ACL_QADD(v, {load(self.scale, 'offset', 'o3')});")
        body.append(f"  const float sv = {load(self.scale, 'scale', 'o2')};")
        body.append("  v = ACL_QMUL(v, sv);")
        body.append("  if (sqrt_mode) v = ACL_QMUL(v, sv);")
        body += ["  " + store(self.dst, "y", "o1", "v", "ACL_QR_RINT", saturate=False), "}"]
        return source(
            f"AscendAntiQuant {self.x.short} -> {self.dst.short}",
            meta(self.ndim, rows),
            self.kernel_name,
            params,
            body,
        )


@dataclass(frozen=True)
class DynamicQuant:
    """Per-row dynamic quantisation, one block per row (Meta over the outer dims; rows: 0 x, 1 y, 2 scale, 3 offset).

    The row is ``c`` elements ``xl`` apart in x and ``yl`` apart in y (for INT32 output, ``c / 8``
    words). Smooth scales are ``sc`` apart; with ``grouped`` each row's group is the number of
    cumulative counts in ``gidx`` at most the row's flat index (clipped to the last group), found by
    binary search as ``np.searchsorted(side="right")``.
    """

    x: D
    dst: D
    smooth: bool
    grouped: bool
    symmetric: bool
    ndim: int

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("dynamic", self)

    def _value(self, at: str) -> str:
        xv = load(self.x, "x", f"o0 + ({at}) * xl")
        if not self.smooth:
            return xv
        return f"ACL_QMUL({xv}, {load(self.x, 'smooth', f'sbase + ({at}) * sc')})"

    def source(self) -> str:
        """The complete kernel source."""
        rows = 3 if self.symmetric else 4
        xs = storage(self.x)
        params = [*head(rows), f"const {xs}* x", "const long long xl", "const long long c"]
        params += [f"const {xs}* smooth", "const long long sc", "const long long sg", "const long long s0"]
        params += ["const int* gidx", "const long long gbase", "const long long gs", "const long long groups"]
        params += [f"{storage(self.dst)}* y", "const long long yl", "float* scale_out", "float* offset_out"]
        top, bottom = float(lowp.quant_max(self.dst)), float(lowp.quant_min(self.dst))
        body = [
            "__shared__ float red_hi[256];",
            "__shared__ float red_lo[256];",
            "__shared__ float row_scale, row_offset;",
            "for (long long row = blockIdx.x; row < m.n; row += gridDim.x) {",
            *("  " + line for line in offsets(self.ndim, rows, "row")),
            "  long long sbase = s0;",
        ]
        if self.grouped:
            body += [
                "  { long long lo = 0, hi = groups;",
                "    while (lo < hi) { const long long mid = lo + ((hi - lo) >> 1);",
                "      if ((long long)gidx[gbase + mid * gs] <= row) lo = mid + 1; else hi = mid; }",
                "    sbase += (lo < groups ? lo : groups - 1) * sg; }",
            ]
        body += [
            "  float hi = 0.0f, lo = 0.0f;" if self.symmetric else "  float hi = acl_lp_inf(1u), lo = acl_lp_inf(0u);",
            "  for (long long i = threadIdx.x; i < c; i += blockDim.x) {",
            f"    const float v = {self._value('i')};",
            "    hi = acl_q_max(hi, fabsf(v));"
            if self.symmetric
            else "    hi = acl_q_max(hi, v); lo = acl_q_min(lo, v);",
            "  }",
            "  red_hi[threadIdx.x] = hi; red_lo[threadIdx.x] = lo;",
            "  __syncthreads();",
            "  for (unsigned half = blockDim.x / 2; half > 0; half >>= 1) {",
            "    if (threadIdx.x < half) {",
            "      red_hi[threadIdx.x] = acl_q_max(red_hi[threadIdx.x], red_hi[threadIdx.x + half]);",
            "      red_lo[threadIdx.x] = acl_q_min(red_lo[threadIdx.x], red_lo[threadIdx.x + half]);",
            "    }",
            "    __syncthreads();",
            "  }",
            "  if (threadIdx.x == 0) {",
            "    float h = red_hi[0], l = red_lo[0];",
            "    if (c == 0) { h = 0.0f; l = 0.0f; }",
        ]
        if self.symmetric:
            body += [f"    row_scale = ACL_QDIV(h, {top!r}f);", "    row_offset = 0.0f;"]
        else:
            body += [
                f"    const float s = ACL_QDIV(ACL_QSUB(h, l), {top - bottom!r}f);",
                "    row_scale = s;",
                f"    row_offset = s == 0.0f ? 0.0f : ACL_QSUB({top!r}f, ACL_QDIV(h, s));",
                "    offset_out[o3] = row_offset;",
            ]
        body += [
            "    scale_out[o2] = row_scale;",
            "  }",
            "  __syncthreads();",
            "  const float s = row_scale, off = row_offset;",
        ]
        quot = "ACL_QDIV(v, s)" if self.symmetric else "ACL_QADD(ACL_QDIV(v, s), off)"
        if self.dst == D.ACL_INT32:
            body += [
                "  for (long long w = threadIdx.x; w < c / 8; w += blockDim.x) {",
                "    unsigned word = 0u;",
                "    for (int j = 0; j < 8; ++j) {",
                f"      const float v = {self._value('w * 8 + j')};",
                f"      const float qv = s == 0.0f ? 0.0f : {quot};",
                "      word |= ((unsigned)acl_q_int((double)qv, ACL_QR_RINT, -8.0, 7.0) & 0xfu) << (4 * j);",
                "    }",
                "    y[o1 + w * yl] = (int)word;",
                "  }",
            ]
        else:
            body += [
                "  for (long long i = threadIdx.x; i < c; i += blockDim.x) {",
                f"    const float v = {self._value('i')};",
                f"    const float qv = s == 0.0f ? 0.0f : {quot};",
                "    " + store(self.dst, "y", "o1 + i * yl", "qv", "ACL_QR_RINT", saturate=True),
                "  }",
            ]
        body += ["  __syncthreads();", "}"]
        kind = "symmetric" if self.symmetric else "asymmetric"
        return source(
            f"DynamicQuant {kind} {self.x.short} -> {self.dst.short}",
            meta(self.ndim, rows),
            self.kernel_name,
            params,
            body,
        )


MX_EMAX: Final[dict[D, int]] = {D.ACL_FLOAT8_E4M3FN: 8, D.ACL_FLOAT8_E5M2: 15, D.ACL_FLOAT4_E2M1: 2}
MX_MAX: Final[dict[D, float]] = {D.ACL_FLOAT8_E4M3FN: 448.0, D.ACL_FLOAT8_E5M2: 57344.0}


@dataclass(frozen=True)
class DynamicMxQuant:
    """One thread per block of ``blocksize`` along ``axis`` (Meta space: x's dims with ``axis`` -> 2 * pairs).

    Rows: 0 x and 1 y (``axis`` stride times the block size), 2 the scales without ``axis``; ``sa`` /
    ``sp`` are the scales' strides of the pair dim and the trailing 2. Blocks past the last real one
    only write their padding scale (code 0). The FLOAT4 rounding mode (``LP_MODES``) is an argument.
    """

    x: D
    dst: D
    alg: int
    ndim: int
    axis: int

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("mx", self)

    def _encode(self, value: str) -> str:
        if self.dst == D.ACL_FLOAT8_E4M3FN:
            return f"acl_to_e4m3fn({value})"
        if self.dst == D.ACL_FLOAT8_E5M2:
            return f"acl_to_e5m2_sat({value})"
        return f"acl_to_fp4_mode({value}, mode)"

    def source(self) -> str:
        """The complete kernel source."""
        params = [*head(3), f"const {storage(self.x)}* x", f"{storage(self.dst)}* y", "unsigned char* scales"]
        params += ["const long long n", "const long long bs", "const long long xa", "const long long ya"]
        params += ["const long long sa", "const long long sp", "const int mode"]
        if self.alg == 0:
            code = [
                "  int e = -1000;",  # amax == 0: log2 is -inf, clamped to code 0
                "  if (amax > 0.0) { int ex; frexp(amax, &ex); e = ex - 1; }",
                f"  int k = e - {MX_EMAX[self.dst]};",
                "  k = k < -127 ? -127 : (k > 127 ? 127 : k);",
                "  unsigned code = special ? 255u : (unsigned)(k + 127);",
            ]
        else:
            code = [
                f"  const float ratio = (float)(amax / {MX_MAX[self.dst]!r});",
                "  const unsigned bits = __float_as_uint(ratio);",
                "  const unsigned ex = (bits >> 23) & 0xffu, mant = bits & 0x7fffffu;",
                "  const bool up_normal = ex >= 1u && ex < 254u && mant > 0u;",
                "  const unsigned up = (up_normal || (ex == 0u && mant > 0x400000u)) ? 1u : 0u;",
                "  unsigned code = (special || ex == 255u) ? 255u : ex + up;",
            ]
        store_y = "acl_nib_set(y, o1 + i * ya, {v});" if self.dst == D.ACL_FLOAT4_E2M1 else "y[o1 + i * ya] = {v};"
        body = [
            "const long long step = (long long)gridDim.x * blockDim.x;",
            GRID_LOOP,
            *("  " + line for line in offsets(self.ndim, 3, "q", capture=self.axis)),
            "  const long long first = cap * bs;",
            "  const long long at = o2 + (cap / 2) * sa + (cap % 2) * sp;",
            "  if (first >= n) { scales[at] = 0; continue; }",
            "  const long long count = n - first < bs ? n - first : bs;",
            "  double amax = 0.0;",
            "  bool special = false;",
            "  for (long long i = 0; i < count; ++i) {",
            f"    const double v = fabs((double){load(self.x, 'x', 'o0 + i * xa')});",
            "    if (!(v <= 1.79769313486231570815e+308)) special = true;",  # NaN or Inf
            "    else if (v > amax) amax = v;",
            "  }",
            *code,
            "  scales[at] = (unsigned char)code;",
            "  const double scale = ldexp(1.0, (int)code - 127);",
            "  for (long long i = 0; i < count; ++i) {",
            f"    const double v = (double){load(self.x, 'x', 'o0 + i * xa')};",
            "    const double qv = code == 255u ? (v != v ? v : (double)acl_lp_nan(0u)) : v / scale;",
            "    " + store_y.format(v=self._encode("qv")),
            "  }",
            "}",
        ]
        return source(
            f"DynamicMxQuant {self.x.short} -> {self.dst.short} (scaleAlg {self.alg})",
            meta(self.ndim, 3),
            self.kernel_name,
            params,
            body,
        )

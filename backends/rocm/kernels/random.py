"""Kernel generators of the random family: Philox4x32-10 in HIP/CUDA-common C++, then the transforms.

:data:`PHILOX` is the generator and the counter layout of :mod:`acl_core.spec.ops.random` (element
index in the low 64 counter bits, offset in the high 64, key = seed), written once for every kernel
here; :class:`PhiloxBlocks` exposes it raw so tests can check it against Random123's vectors. The
float transforms call ``acl_rnd_mul`` / ``acl_rnd_add``: ``__dmul_rn`` / ``__dadd_rn`` on a device
compiler, which are never fused into a multiply-add, so each step rounds once, as NumPy's do (the
CPU emulator builds at -O0, where nothing is fused either). Every kernel walks its output in C order
of the view (``Meta``: shape and strides), element ``q`` drawing from block ``q``.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Final

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.ctypes_map import ctype
from acl_rocm.kernels.movement import HELPERS, load_wide, store_narrow
from acl_rocm.kernels.prelude import PRELUDE

BLOCK_THREADS: Final = 256
DIGITS: Final[dict[D, int]] = {D.ACL_FLOAT: 24, D.ACL_FLOAT16: 11, D.ACL_BF16: 8, D.ACL_DOUBLE: 53}
"""Significand digits of each float output: the bits a uniform value is made of (as the reference)."""

NORMAL_TRIG: Final = {
    "float32p": "float32 as :data:`FLOAT32P`: the same reductions as ``float32``, minimax polynomials for the library "
    "calls, four Philox blocks a thread; float32 and 16-bit outputs only (float64 ones take ``split``)",
    "split": "cos(θ) and sin(θ) as two calls (each reduces θ on its own)",
    "sincos": "one sincos(θ): the argument reduced once for both (float64, the same ulp bounds as cos and sin)",
    "float32": "Box–Muller in float32 on the same words (:data:`FLOAT32_PAIR`); float32 and 16-bit outputs only",
}
"""A packed normal pair's transform (``ACL_RANDOM_NORMAL``); the first is the default. H100 2026-12-06 18:53,
InplaceNormal float32 256 MiB, GPU time against torch's ``normal_``: float32p 1.10x (four blocks a thread; 1.13x
with two), float32 1.94x, sincos 2.30x, split 2.55x (bit for bit the reference's double transform); Philox alone
0.66x."""

FLOAT32P_BLOCKS: Final = 4
"""float32p's Philox blocks a thread by default: 8 float32 or 16-bit values, whole 16-byte stores (measured 1.10x
torch's time for float32 against 1.13x with the two blocks that fill one 16-byte store)."""

FLOAT32_PAIR: Final = [
    "const unsigned long long k1 = (((unsigned long long)w[1] << 32) | w[0]) >> 11;",
    "const unsigned long long k2 = (((unsigned long long)w[3] << 32) | w[2]) >> 11;",
    "// ln u1, u1 = (k1 + 1)·2^-53: below 1/2 logf of u1 rounded to float (|ln u1| > ln 2: the rounding costs",
    "// at most 1.45·2^-24 of it); from 1/2 log1pf(-(1 - u1)), 1 - u1 = (2^53 - 1 - k1)·2^-53 exact in integers",
    "// (the same 1.45 at most; near u1 = 1, where ln u1 -> 0, a rounded u1 would lose every digit)",
    "const float lg = k1 + 1 < (1ull << 52) ? logf((float)(k1 + 1) * 1.1102230246251565e-16f)",
    "                                       : log1pf(-(float)((1ull << 53) - 1 - k1) * 1.1102230246251565e-16f);",
    "const float rr = sqrtf(-2.0f * lg);",
    "// 2·u2 = k2·2^-52 = qt/2 + d: qt the nearest quarter turn, d in [-1/4, 1/4] exact in integers, so",
    "// sincospif(d) is accurate relative to each result, also where cos or sin of 2π·u2 is near 0",
    "const unsigned long long qt = (k2 + (1ull << 50)) >> 51;",
    "const float d = (float)((long long)k2 - (long long)(qt << 51)) * 2.220446049250313e-16f;",
    "float sd, cd;",
    "sincospif(d, &sd, &cd);",
    "const float cs = (qt & 1) ? ((qt & 2) ? sd : -sd) : ((qt & 2) ? -cd : cd);",
    "const float sn = (qt & 1) ? ((qt & 2) ? -cd : cd) : ((qt & 2) ? -sd : sd);",
    "const float v0 = fmaf((float)b, rr * cs, (float)a), v1 = fmaf((float)b, rr * sn, (float)a);",
]
"""C lines: a packed pair's two values ``v0`` (``r·cos θ``) and ``v1`` (``r·sin θ``) from block ``w`` in float32.

The uniforms are the family's (``u1 = (k1 + 1)·2^-53``, ``u2 = k2·2^-53``); their reductions (``1 - u1``, the
quarter turn of ``2π·u2``) are exact in integers, every other step one float32 rounding or one accurate library
call (``logf`` / ``log1pf`` / ``sincospif`` 1 ulp, ``sqrtf`` correctly rounded), ``mean + std·z`` one fused
rounding: ``z`` lies within 6.7·2^-24 of the double Box–Muller's relative to ``|z|`` by that count (the NumPy model
in tests/rocm/test_random_float32_cpu.py measures the arithmetic), inside InplaceNormal's accuracy class."""

LOG1P_COEFFS: Final = (
    -0.4999997615814209,
    0.3333389163017273,
    -0.2500348687171936,
    0.19966770708560944,
    -0.16523994505405426,
    0.1480439156293869,
    -0.1464654952287674,
    0.09565072506666183,
)
"""float32 ``P`` with ``log1p(s) ≈ s + s²·P(s)`` on ``s`` in [-0.30078125, 0.3984375] (Lawson-weighted least squares,
relative to log1p: 0.5·2^-24 before the coefficients' rounding to float32)."""
SINPI_COEFFS: Final = (3.1415927410125732, -5.167707920074463, 2.5497610569000244, -0.5890122056007385)
"""float32 ``S`` with ``sin(π·d) ≈ d·S(d²)`` on ``|d| <= 1/4`` (0.05·2^-24 relative before rounding)."""
COSPI_COEFFS: Final = (-4.93479061126709, 4.057651519775391, -1.3067059516906738)
"""float32 ``C`` with ``cos(π·d) ≈ 1 + d²·C(d²)`` on ``|d| <= 1/4`` (0.64·2^-24 relative before rounding)."""
LN2_F: Final = 0.6931471824645996
"""ln 2 rounded to float32 (relative error 0.046·2^-24, times ``e`` at most 53)."""
BIG_U1: Final = 0xB3000000
"""``w1 >= 179·2^24``: u1 > 179/256 = 0.69921875, where ``ln u1 = log1p(-(1 - u1))`` with 1 - u1 exact in integers."""


def _horner(x: str, coeffs: tuple[float, ...]) -> str:
    """C expression of ``c0 + x·(c1 + x·(...))`` as nested fmaf (coefficients as exact float literals)."""
    expr = f"{coeffs[-1]!r}f"
    for c in reversed(coeffs[:-1]):
        expr = f"fmaf({x}, {expr}, {c!r}f)"
    return expr


FLOAT32P: Final = "\n".join(
    [
        "// ---- float32p: Box–Muller in float32, the family's words and exact integer reductions, polynomials ----",
        "#if defined(__CUDA_ARCH__)",
        "// sqrtf's own correctly rounded fast path (rsqrt, then r = x·y corrected by (x - r²)·y/2) without its range",
        "// check and slow-path branch: x here is 0 or within [2^-52, 75], inside that path's range (x = 0: the rsqrt",
        "// of a tiny positive number leaves r = 0 exactly)",
        "__device__ __forceinline__ float acl_rnd_sqrt(float x) {",
        "  float y;",
        '  asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(fmaxf(x, 1e-30f)));',
        "  const float r = x * y, h = 0.5f * y;",
        "  return fmaf(fmaf(-r, r, x), h, r);",
        "}",
        "#else",
        "__device__ __forceinline__ float acl_rnd_sqrt(float x) { return sqrtf(x); }",
        "#endif",
        "__device__ __forceinline__ void acl_rnd_normal_f32p(const unsigned int w[4], float& z0, float& z1) {",
        "  const unsigned long long k1 = (((unsigned long long)w[1] << 32) | w[0]) >> 11;",
        "  // ln u1 = e·ln 2 + log1p(s). u1 > 179/256 (big): e = 0, s = -(1 - u1), 1 - u1 = (2^53 - 1 - k1)·2^-53",
        "  // exact in integers, rounded once; else u1 = (k1 + 1)·2^-53 rounded once = 2^e·(1 + s),",
        "  // 1 + s in [179/256, 179/128)",
        f"  const bool big = w[1] >= {BIG_U1:#x}u;",
        "  const float vf = (float)(big ? (1ull << 53) - 1 - k1 : k1 + 1);",
        "  const unsigned int ix = __float_as_uint(vf), tmp = ix - 0x3F330000u;",
        "  const float sm = __uint_as_float(ix - (tmp & 0xFF800000u)) - 1.0f;  // exact (Sterbenz)",
        "  const float s = big ? -vf * 1.1102230246251565e-16f : sm;",
        "  const int e = big ? 0 : (int)(tmp >> 23) - 53;  // vf >= 1: tmp >= 0",
        "  const float ef = __uint_as_float(0x4B400000u + (unsigned int)e) - 12582912.0f;  // exact for |e| < 2^22",
        f"  const float lg = fmaf(ef, {LN2_F!r}f, fmaf(s * s, {_horner('s', LOG1P_COEFFS)}, s));",
        "  const float rr = acl_rnd_sqrt(-2.0f * lg);",
        "  // 2·u2 = k2·2^-52 = qt/2 + d, qt the nearest quarter turn (the top bits of w3), d in [-1/4, 1/4] exact:",
        "  // 2^11·(k2 - qt·2^51) = (w3:w2 less its low 11 bits) - qt·2^62, w3 - qt·2^30 in [-2^29, 2^29) as int32",
        "  const unsigned int qt = ((w[3] >> 29) + 1u) >> 1;",
        "  const long long di = (long long)(((unsigned long long)(w[3] - (qt << 30)) << 32) | (w[2] & 0xFFFFF800u));",
        "  const float d = (float)di * 1.0842021724855044e-19f;  // 2^-63: (float)(k2 - qt·2^51)·2^-52 exactly",
        "  const float d2 = d * d;",
        f"  const float sd = d * {_horner('d2', SINPI_COEFFS)};",
        f"  const float cd = fmaf(d2, {_horner('d2', COSPI_COEFFS)}, 1.0f);",
        "  // θ = qt·π/2 + π·d: odd quarter turns swap the two, (qt + 1) & 2 negates the cosine, qt & 2 the sine",
        "  const bool odd = qt & 1u;",
        "  const float cs = __uint_as_float(__float_as_uint(odd ? sd : cd) ^ (((qt + 1u) & 2u) << 30));",
        "  const float sn = __uint_as_float(__float_as_uint(odd ? cd : sd) ^ ((qt & 2u) << 30));",
        "  z0 = rr * cs;",
        "  z1 = rr * sn;",
        "}",
        "",
    ]
)
"""The float32p transform (``ACL_RANDOM_NORMAL=float32p``): a block's standard pair ``z0 = r·cos θ``, ``z1 = r·sin θ``.

:data:`FLOAT32_PAIR`'s uniforms and exact integer reductions, the library calls replaced: ``ln u1`` by an exponent
split of the one rounded conversion and :data:`LOG1P_COEFFS` (near u1 = 1, s = -(1 - u1) keeps every digit),
``sinpi`` / ``cospi`` on the quarter-turn-reduced ``d`` by :data:`SINPI_COEFFS` / :data:`COSPI_COEFFS`; the square
root correctly rounded (on CUDA sqrtf's own fast path written out, without the range check its argument never
needs). Every step is one float32 rounding or fma, so tests/rocm/test_random_float32p_cpu.py's NumPy model follows
it bit for bit and bounds ``z`` against the true transform over a sweep and the reductions' edges."""

PHILOX: Final = r"""
// ---- Philox4x32-10 (Salmon et al. 2011, Random123) and the family's counter layout ----
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
__device__ __forceinline__ double acl_rnd_mul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ double acl_rnd_add(double a, double b) { return __dadd_rn(a, b); }
#else
__device__ __forceinline__ double acl_rnd_mul(double a, double b) { return a * b; }
__device__ __forceinline__ double acl_rnd_add(double a, double b) { return a + b; }
#endif
__device__ __forceinline__ void acl_philox4x32_10(unsigned int c[4], unsigned int k0, unsigned int k1) {
  for (int r = 0; r < 10; ++r) {
    if (r) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }
    const unsigned long long p0 = 0xD2511F53ull * (unsigned long long)c[0];
    const unsigned long long p1 = 0xCD9E8D57ull * (unsigned long long)c[2];
    const unsigned int n0 = (unsigned int)(p1 >> 32) ^ c[1] ^ k0;
    const unsigned int n2 = (unsigned int)(p0 >> 32) ^ c[3] ^ k1;
    c[0] = n0; c[1] = (unsigned int)p1; c[2] = n2; c[3] = (unsigned int)p0;
  }
}
// the four words of element q: counter (lo q, hi q, lo offset, hi offset), key (lo seed, hi seed)
struct AclRnd { unsigned int seed_lo; unsigned int seed_hi; unsigned int off_lo; unsigned int off_hi; };
__device__ __forceinline__ void acl_rnd_block(const AclRnd g, unsigned long long q, unsigned int w[4]) {
  w[0] = (unsigned int)q; w[1] = (unsigned int)(q >> 32); w[2] = g.off_lo; w[3] = g.off_hi;
  acl_philox4x32_10(w, g.seed_lo, g.seed_hi);
}
// k * 2^-53 in [0, 1) from the top 53 bits of hi:lo
__device__ __forceinline__ double acl_rnd_unit53(unsigned int lo, unsigned int hi) {
  return (double)((((unsigned long long)hi << 32) | lo) >> 11) * 1.1102230246251565404e-16;
}
"""

PHILOX_RK: Final = r"""
// ---- Philox4x32-10 on round keys the host computed (k[2r], k[2r + 1]: the key after r bumps, mod 2^32) ----
// The same words as acl_rnd_block; the keys sit in the kernel's parameter space, where an xor reads them as an
// operand instead of two adds a round recomputing them in registers.
struct AclRndKeys { unsigned int k[20]; unsigned int off_lo; unsigned int off_hi; };
__device__ __forceinline__ void acl_rnd_block_rk(const AclRndKeys& g, unsigned long long q, unsigned int c[4]) {
  c[0] = (unsigned int)q; c[1] = (unsigned int)(q >> 32); c[2] = g.off_lo; c[3] = g.off_hi;
  for (int r = 0; r < 10; ++r) {
    const unsigned long long p0 = 0xD2511F53ull * (unsigned long long)c[0];
    const unsigned long long p1 = 0xCD9E8D57ull * (unsigned long long)c[2];
    const unsigned int n0 = (unsigned int)(p1 >> 32) ^ c[1] ^ g.k[2 * r];
    const unsigned int n2 = (unsigned int)(p0 >> 32) ^ c[3] ^ g.k[2 * r + 1];
    c[0] = n0; c[1] = (unsigned int)p1; c[2] = n2; c[3] = (unsigned int)p0;
  }
}
"""


def round_keys(seed_lo: int, seed_hi: int) -> list[int]:
    """The 20 round keys of :data:`PHILOX_RK` (k0, k1 after r Weyl bumps, r = 0..9) of a 64-bit key's halves."""
    return [
        (k + r * bump) & 0xFFFFFFFF for r in range(10) for k, bump in ((seed_lo, 0x9E3779B9), (seed_hi, 0xBB67AE85))
    ]


def _name(kind: str, key: object) -> str:
    return f"acl_rnd_{kind}_{hashlib.sha1(repr(key).encode()).hexdigest()[:12]}"


def _source(comment: str, meta: str, name: str, params: list[str], body: list[str], extra: str = "") -> str:
    return "\n".join(
        [
            PRELUDE,
            HELPERS,
            PHILOX,
            extra,
            f"// random: {comment}",
            meta,
            f'extern "C" __global__ void __launch_bounds__({BLOCK_THREADS}) {name}(',
            "    " + ",\n    ".join(params) + ") {",
            *("  " + line for line in body),
            "}",
            "",
        ]
    )


def _meta(ndim: int, rows: int) -> str:
    return f"struct Meta {{ long long n; long long shape[{ndim}]; long long stride[{rows}][{ndim}]; }};"


def _offsets(ndim: int, rows: int) -> list[str]:
    """C lines giving ``o0..`` of C-order position ``q`` through Meta.

    The outermost dimension takes what is left of ``q`` undivided, so a rank-1 (coalesced) view costs one
    multiplication per operand: a 64-bit division and remainder per element cost more than the draw's
    arithmetic around them.
    """
    if ndim == 1:
        return [f"const long long o{r} = q * m.stride[{r}][0];" for r in range(rows)]
    lines = ["long long rest = q;", *(f"long long o{r} = 0;" for r in range(rows))]
    lines.append(f"for (int d = {ndim - 1}; d >= 0; --d) {{")
    lines.append("  const long long c = d == 0 ? rest : rest % m.shape[d]; if (d) rest /= m.shape[d];")
    lines.append("  " + " ".join(f"o{r} += c * m.stride[{r}][d];" for r in range(rows)))
    lines.append("}")
    return lines


_LOOP: Final = [
    "const long long step = (long long)gridDim.x * blockDim.x;",
    "for (long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x; q < m.n; q += step) {",
]


@dataclass(frozen=True)
class PhiloxBlocks:
    """Raw Philox4x32-10: ``out[4i..4i+3]`` = the block of counter ``ctr[4i..4i+3]`` under key ``key[2i..2i+1]``."""

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return _name("philox", self)

    def source(self) -> str:
        """The complete kernel source."""
        params = ["const Meta m", "const unsigned int* ctr", "const unsigned int* key", "unsigned int* out"]
        body = [
            *_LOOP,
            "  unsigned int c[4] = {ctr[4 * q], ctr[4 * q + 1], ctr[4 * q + 2], ctr[4 * q + 3]};",
            "  acl_philox4x32_10(c, key[2 * q], key[2 * q + 1]);",
            "  for (int j = 0; j < 4; ++j) out[4 * q + j] = c[j];",
            "}",
        ]
        return _source("raw Philox4x32-10 blocks", _meta(1, 1), self.kernel_name, params, body)


@dataclass(frozen=True)
class Fill:
    """selfRef / out filled by ``kind`` (uniform: a=from, b=to; normal: a=mean, b=std; bernoulli: a=p) over a view."""

    kind: str
    dtype: D
    ndim: int
    layout: str = "block"
    """The family's fill layout: ``block`` (a Philox block per element) or ``packed`` (uniform and normal)."""
    trig: str = "split"
    """How a packed normal pair takes ``cos θ`` and ``sin θ`` (:data:`NORMAL_TRIG`; float64 either way)."""
    blocks: int = 0
    """float32p's Philox blocks a thread (0: :data:`FLOAT32P_BLOCKS`; scripts/random_fill_bench.py times others)."""

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return _name(f"fill_{self.kind}", self)

    @property
    def per_block(self) -> int:
        """Elements drawn from one Philox block: 1 (``block``); ``packed``: 4 uniforms of <= 32 digits, else 2."""
        if self.layout == "block":
            return 1
        if self.layout != "packed" or self.kind not in ("uniform", "normal"):
            raise ValueError(f"no {self.layout!r} layout for a {self.kind} fill")
        return 4 if self.kind == "uniform" and DIGITS[self.dtype] <= 32 else 2

    @property
    def keyed(self) -> bool:
        """Whether the kernel takes ``AclRndKeys`` (precomputed round keys: float32p) instead of ``AclRnd``."""
        return self.kind == "normal" and self.layout == "packed" and self.trig == "float32p"

    @property
    def blocks_per_thread(self) -> int:
        """Philox blocks a thread draws per trip: float32p :data:`FLOAT32P_BLOCKS` (whole 16-byte stores), else 1."""
        if self.keyed:
            return self.blocks or FLOAT32P_BLOCKS
        return 1

    @property
    def per_thread(self) -> int:
        """Elements a thread writes per trip (the launch's unit)."""
        return self.per_block * self.blocks_per_thread

    def _packed_values(self) -> list[str]:
        """C lines setting ``s[t]``, the storage of element ``per_block·j + t``, from block ``j``'s words ``w``."""
        st = ctype(self.dtype).storage
        lines = [f"{st} s[{self.per_block}];"]
        if self.kind == "uniform":
            digits = DIGITS[self.dtype]
            lines.append(f"for (int t = 0; t < {self.per_block}; ++t) {{")
            if digits > 32:
                lines.append(
                    "  const unsigned long long k = (((unsigned long long)w[2 * t + 1] << 32) | w[2 * t]) >> 11;"
                )
            else:
                lines.append(f"  const unsigned int k = w[t] >> {32 - digits};")
            lines += [
                f"  const double u = (double)k * (1.0 / {float(2**digits)!r});",
                "  const double v = acl_rnd_add(a, acl_rnd_mul(u, b - a));",
                f"  s[t] = {store_narrow('v', self.dtype)};",
                f"  if ({load_wide('s[t]', self.dtype)} >= b) s[t] = {store_narrow('a', self.dtype)};",
                "}",
            ]
            return lines
        if self.trig not in NORMAL_TRIG:
            raise ValueError(f"no {self.trig!r} way to the normal pair's sine and cosine")
        if self.trig == "float32":
            if self.dtype == D.ACL_DOUBLE:
                raise ValueError("the float32 normal transform is for float32 and 16-bit outputs")
            return [
                *lines,
                *FLOAT32_PAIR,
                f"s[0] = {store_narrow('v0', self.dtype)};",
                f"s[1] = {store_narrow('v1', self.dtype)};",
            ]
        trig = (
            ["double sn, cs;", "sincos(th, &sn, &cs);"]
            if self.trig == "sincos"
            else ["const double cs = cos(th), sn = sin(th);"]
        )
        return [
            *lines,
            "const double u1 = acl_rnd_add(acl_rnd_unit53(w[0], w[1]), 1.1102230246251565404e-16);",
            "const double u2 = acl_rnd_unit53(w[2], w[3]);",
            "const double r = sqrt(-2.0 * log(u1)), th = acl_rnd_mul(6.283185307179586, u2);",
            *trig,
            "const double v0 = acl_rnd_add(a, acl_rnd_mul(b, r * cs));",
            "const double v1 = acl_rnd_add(a, acl_rnd_mul(b, r * sn));",
            f"s[0] = {store_narrow('v0', self.dtype)};",
            f"s[1] = {store_narrow('v1', self.dtype)};",
        ]

    def _packed_source(self) -> str:
        """Packed layout: a thread per ``blocks_per_thread`` Philox blocks, their elements stored as one vector where
        unit-stride and aligned (element ``per_block·j + t`` from block ``j`` either way)."""
        if self.keyed:
            return self._float32p_source()
        st = ctype(self.dtype).storage
        e = self.per_block
        params = ["const Meta m", f"{st}* out", "const AclRnd g", "const double a", "const double b"]
        store_each = [
            f"for (int t = 0; t < {e}; ++t) {{",
            "  const long long q = q0 + t;",
            "  if (q >= m.n) break;",
            *("  " + line for line in _offsets(self.ndim, 1)),
            "  out[o0] = s[t];",
            "}",
        ]
        body = [
            "const long long step = (long long)gridDim.x * blockDim.x;",
            f"const long long groups = (m.n + {e - 1}) / {e};",
            "for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < groups; j += step) {",
        ]
        body += [
            "  unsigned int w[4];",
            "  acl_rnd_block(g, (unsigned long long)j, w);",
            *("  " + line for line in self._packed_values()),
        ]
        body += [f"  const long long q0 = j * {e};"]
        if self.ndim == 1:
            vec = f"AclVec<{st}, {e}>"
            body += [
                f"  const bool whole = m.stride[0][0] == 1 && q0 + {e} <= m.n;",
                f"  if (whole && ((unsigned long long)(out + q0) % sizeof({vec})) == 0) {{",
                f"    {vec} x;",
                f"    for (int t = 0; t < {e}; ++t) x.v[t] = s[t];",
                f"    *reinterpret_cast<{vec}*>(out + q0) = x;",
                "    continue;",
                "  }",
            ]
        body += [*("  " + line for line in store_each), "}"]
        comment = f"{self.kind} fill of {self.dtype.short}, packed layout ({e} elements a block)"
        return _source(comment, _meta(self.ndim, 1), self.kernel_name, params, body)

    def _float32p_source(self) -> str:
        """float32p: ``blocks_per_thread`` blocks a thread on round keys precomputed by the host (AclRndKeys), a
        loop of whole groups stored as one vector without per-group checks where the view is unit-stride and
        aligned, then a checked loop for the rest (a tail, or every group of a strided view)."""
        if self.dtype == D.ACL_DOUBLE:
            raise ValueError("the float32 normal transform is for float32 and 16-bit outputs")
        st = ctype(self.dtype).storage
        e, nb = self.per_thread, self.blocks_per_thread
        vec = f"AclVec<{st}, {e}>"
        params = ["const Meta m", f"{st}* out", "const AclRndKeys g", "const double a", "const double b"]
        draws = [
            f"  {st} s[{e}];",
            f"  for (int h = 0; h < {nb}; ++h) {{  // independent chains side by side: instruction-level parallelism",
            "    unsigned int w[4];",
            f"    acl_rnd_block_rk(g, (unsigned long long)(j * {nb} + h), w);",
            "    float z0, z1;",
            "    acl_rnd_normal_f32p(w, z0, z1);",
            f"    s[2 * h] = {store_narrow('fmaf(fb, z0, fa)', self.dtype)};",
            f"    s[2 * h + 1] = {store_narrow('fmaf(fb, z1, fa)', self.dtype)};",
            "  }",
        ]
        body = [
            "const float fa = (float)a, fb = (float)b;",
            "const long long step = (long long)gridDim.x * blockDim.x;",
            "const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;",
            f"const long long groups = (m.n + {e - 1}) / {e};",
        ]
        if self.ndim == 1:
            body += [
                f"const bool unit = m.stride[0][0] == 1 && (unsigned long long)out % sizeof({vec}) == 0;",
                f"const long long whole = unit ? m.n / {e} : 0;",
                "for (long long j = first; j < whole; j += step) {",
                *draws,
                f"  {vec} x;",
                f"  for (int t = 0; t < {e}; ++t) x.v[t] = s[t];",
                f"  *reinterpret_cast<{vec}*>(out + j * {e}) = x;",
                "}",
            ]
        else:
            body.append("const long long whole = 0;")
        body += [
            "for (long long j = whole + first; j < groups; j += step) {",
            *draws,
            f"  for (int t = 0; t < {e}; ++t) {{",
            f"    const long long q = j * {e} + t;",
            "    if (q >= m.n) break;",
            *("    " + line for line in _offsets(self.ndim, 1)),
            "    out[o0] = s[t];",
            "  }",
            "}",
        ]
        comment = f"normal fill of {self.dtype.short}, packed layout, float32p ({nb} blocks a thread)"
        return _source(comment, _meta(self.ndim, 1), self.kernel_name, params, body, PHILOX_RK + FLOAT32P)

    def _value(self) -> list[str]:
        st = ctype(self.dtype).storage
        if self.kind == "uniform":
            digits = DIGITS[self.dtype]
            bits = "(((unsigned long long)w[1] << 32) | w[0]) >> 11" if digits > 32 else f"w[0] >> {32 - digits}"
            return [
                f"const double u = (double)({bits}) * (1.0 / {float(2**digits)!r});",
                "const double v = acl_rnd_add(a, acl_rnd_mul(u, b - a));",
                f"{st} s = {store_narrow('v', self.dtype)};",
                f"if ({load_wide('s', self.dtype)} >= b) s = {store_narrow('a', self.dtype)};",
            ]
        if self.kind == "normal":
            return [
                "const double u1 = acl_rnd_add(acl_rnd_unit53(w[0], w[1]), 1.1102230246251565404e-16);",
                "const double u2 = acl_rnd_unit53(w[2], w[3]);",
                "const double z = sqrt(-2.0 * log(u1)) * cos(acl_rnd_mul(6.283185307179586, u2));",
                "const double v = acl_rnd_add(a, acl_rnd_mul(b, z));",
                f"const {st} s = {store_narrow('v', self.dtype)};",
            ]
        if self.kind == "bernoulli":
            return [
                "const double v = (double)w[0] < a * 4294967296.0 ? 1.0 : 0.0;",
                f"const {st} s = {store_narrow('v', self.dtype)};",
            ]
        raise ValueError(f"unknown fill {self.kind!r}")

    def source(self) -> str:
        """The complete kernel source."""
        if self.per_block > 1:
            return self._packed_source()
        st = ctype(self.dtype).storage
        params = ["const Meta m", f"{st}* out", "const AclRnd g", "const double a", "const double b"]
        body = [
            *_LOOP,
            *("  " + line for line in _offsets(self.ndim, 1)),
            "  unsigned int w[4];",
            "  acl_rnd_block(g, (unsigned long long)q, w);",
            *("  " + line for line in self._value()),
            "  out[o0] = s;",
            "}",
        ]
        return _source(f"{self.kind} fill of {self.dtype.short}", _meta(self.ndim, 1), self.kernel_name, params, body)


@dataclass(frozen=True)
class GenMask:
    """One mask byte per thread: bit j of byte b keeps element 8b + j (< numel) unless its word is below drop·2^32."""

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return _name("gen_mask", self)

    def source(self) -> str:
        """The complete kernel source (Meta: n = bytes, stride[0][0] = the mask's stride)."""
        params = ["const Meta m", "unsigned char* out", "const AclRnd g", "const long long numel", "const double drop"]
        body = [
            *_LOOP,
            "  unsigned int byte = 0;",
            "  for (int j = 0; j < 8; ++j) {",
            "    const long long i = q * 8 + j;",
            "    if (i >= numel) break;",
            "    unsigned int w[4];",
            "    acl_rnd_block(g, (unsigned long long)i, w);",
            "    if (!((double)w[0] < drop * 4294967296.0)) byte |= 1u << j;",
            "  }",
            "  out[q * m.stride[0][0]] = (unsigned char)byte;",
            "}",
        ]
        return _source("dropout mask bits", _meta(1, 1), self.kernel_name, params, body)


@dataclass(frozen=True)
class DoMask:
    """out = self · (mask bit ? scale : 0) in float32 (Meta rows: 0 self, 1 out; the mask by its stride)."""

    dtype: D
    ndim: int

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return _name("do_mask", self)

    def source(self) -> str:
        """The complete kernel source."""
        c = ctype(self.dtype)
        params = ["const Meta m", f"const {c.storage}* x", "const unsigned char* mask", "const long long ms"]
        params += [f"{c.storage}* out", "const float scale"]
        body = [
            *_LOOP,
            *("  " + line for line in _offsets(self.ndim, 2)),
            "  const unsigned int bit = (mask[(q >> 3) * ms] >> (q & 7)) & 1u;",
            f"  const float v = {c.decode.format(x='x[o0]')};",
            "  const float r = v * (bit ? scale : 0.0f);",
            f"  out[o1] = {c.encode.format(v='r')};",
            "}",
        ]
        return _source(f"dropout apply to {self.dtype.short}", _meta(self.ndim, 2), self.kernel_name, params, body)


@dataclass(frozen=True)
class Multinomial:
    """Inverse-CDF draws on running double sums: a thread per draw (with replacement) or per row (without).

    Arguments: rows, categories n, draws k, self's row / column strides, out's row / draw strides;
    without replacement a zeroed ``rows x n`` byte temporary of chosen flags. Invalid weights set the flag.
    """

    dtype: D
    replacement: bool

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return _name("multinomial", self)

    def _check(self, row: str) -> list[str]:
        """C lines: ``total`` and ``positive`` of one row, the flag set (and return) when a weight is invalid."""
        load = load_wide(f"{row}[j * cs]", self.dtype)
        need = "positive < k" if not self.replacement else "false"
        return [
            "double total = 0.0; long long positive = 0;",
            "for (long long j = 0; j < n; ++j) {",
            f"  const double p = {load};",
            "  if (!(p >= 0.0) || isinf(p)) { *flag = 1; return; }",
            "  total += p; positive += p > 0.0;",
            "}",
            f"if (positive == 0 || {need}) {{ *flag = 1; return; }}",
        ]

    def source(self) -> str:
        """The complete kernel source."""
        st = ctype(self.dtype).storage
        load = load_wide("row[j * cs]", self.dtype)
        params = ["const AclRnd g", f"const {st}* self", "long long* out", "int* flag"]
        params += [f"const long long {v}" for v in ("rows", "n", "k", "rs", "cs", "os0", "os1")]
        if self.replacement:
            body = [
                "const long long step = (long long)gridDim.x * blockDim.x;",
                "for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < rows * k; e += step) {",
                "  const long long r = e / k, s = e % k;",
                f"  const {st}* row = self + r * rs;",
                *("  " + line for line in self._check("row")),
                "  unsigned int w[4];",
                "  acl_rnd_block(g, (unsigned long long)e, w);",
                "  const double target = acl_rnd_unit53(w[0], w[1]) * total;",
                "  double acc = 0.0; long long pick = -1, last = 0;",
                "  for (long long j = 0; j < n; ++j) {",
                f"    const double p = {load};",
                "    if (p > 0.0) last = j;",
                "    acc += p;",
                "    if (pick < 0 && target < acc) pick = j;",
                "  }",
                "  out[r * os0 + s * os1] = pick < 0 ? last : pick;",
                "}",
            ]
        else:
            params.append("unsigned char* chosen")
            body = [
                "const long long step = (long long)gridDim.x * blockDim.x;",
                "for (long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += step) {",
                f"  const {st}* row = self + r * rs;",
                "  unsigned char* taken = chosen + r * n;",
                *("  " + line for line in self._check("row")),
                "  for (long long s = 0; s < k; ++s) {",
                "    double live = 0.0;",
                "    for (long long j = 0; j < n; ++j) {",
                f"      if (!taken[j]) live += {load};",
                "    }",
                "    unsigned int w[4];",
                "    acl_rnd_block(g, (unsigned long long)(r * k + s), w);",
                "    const double target = acl_rnd_unit53(w[0], w[1]) * live;",
                "    double acc = 0.0; long long pick = -1, last = 0;",
                "    for (long long j = 0; j < n; ++j) {",
                "      if (taken[j]) continue;",
                f"      const double p = {load};",
                "      if (p > 0.0) last = j;",
                "      acc += p;",
                "      if (target < acc) { pick = j; break; }",
                "    }",
                "    if (pick < 0) pick = last;",
                "    taken[pick] = 1;",
                "    out[r * os0 + s * os1] = pick;",
                "  }",
                "}",
            ]
        mode = "with" if self.replacement else "without"
        return _source(f"multinomial {mode} replacement over {self.dtype.short}", "", self.kernel_name, params, body)

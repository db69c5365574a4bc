"""The C++ prelude every kernel starts with, and the compile options that configure it.

The source is HIP/CUDA-common: it uses only what both hipRTC and NVRTC provide without headers
(``__global__``, ``blockIdx``…, the device math library, ``__float_as_uint``…). The warp size and the
lane-mask width come in as defines (``ACL_WARP_SIZE``, ``ACL_LANE_MASK_BITS``), never as constants.
fp16 and bf16 are stored as raw 16-bit patterns and converted in software with round-to-nearest-even,
so no vendor half-precision header is needed and both platforms round identically.
"""

from __future__ import annotations

from typing import Final

PRELUDE: Final = r"""
// ---- acl-core prelude (HIP/CUDA common) ----
#ifndef ACL_WARP_SIZE
#error "ACL_WARP_SIZE must be defined by the compile options"
#endif
#ifndef ACL_LANE_MASK_BITS
#error "ACL_LANE_MASK_BITS must be defined by the compile options"
#endif
#if ACL_LANE_MASK_BITS == 64
typedef unsigned long long acl_lane_mask_t;
#else
typedef unsigned int acl_lane_mask_t;
#endif
#define ACL_DEV __device__ __forceinline__

// programmatic dependent launch (NVIDIA sm_90+): a kernel launched with programmatic stream serialization may
// start before its predecessor in the stream finishes; ACL_PDL_WAIT() blocks the calling thread until every
// prerequisite grid has completed and its memory is visible (nothing a predecessor wrote may be read, and
// nothing it reads may be written, before it), and returns at once in a kernel launched without the attribute.
// ACL_PDL_LAUNCH_DEPENDENTS() lets a programmatic successor be scheduled before this kernel ends (its wait
// still sees this whole kernel finished). Both compile to nothing on HIP, older GPUs and the CPU emulator.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define ACL_PDL_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
#define ACL_PDL_LAUNCH_DEPENDENTS() asm volatile("griddepcontrol.launch_dependents;" :::)
#else
#define ACL_PDL_WAIT() ((void)0)
#define ACL_PDL_LAUNCH_DEPENDENTS() ((void)0)
#endif

// N elements of T as one aligned access (N * sizeof(T) bytes: a 16-byte load or store for N * sizeof(T) == 16)
template <class T, int N> struct alignas(sizeof(T) * N) AclVec {
  T v[N];
};

// fp16 <-> fp32 in software, round to nearest even (overflow to inf, NaN stays NaN)
ACL_DEV float acl_h2f_soft(unsigned short h) {
  unsigned int sign = ((unsigned int)h & 0x8000u) << 16;
  unsigned int exponent = ((unsigned int)h >> 10) & 0x1fu;
  unsigned int mantissa = (unsigned int)h & 0x3ffu;
  if (exponent == 0x1fu) return __uint_as_float(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0u) return __uint_as_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  float magnitude = (float)mantissa * 5.9604644775390625e-8f;  // mantissa * 2^-24
  return sign ? -magnitude : magnitude;
}
ACL_DEV unsigned short acl_f2h_soft(float f) {
  unsigned int bits = __float_as_uint(f);
  unsigned int sign = (bits >> 16) & 0x8000u;
  unsigned int magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return (unsigned short)(sign | 0x7e00u);  // NaN (quiet)
  if (magnitude >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);  // >= 65520 rounds to inf
  unsigned int exponent = magnitude >> 23;
  if (exponent >= 113u) {  // normal half: |f| >= 2^-14
    unsigned int half = ((exponent - 112u) << 10) | ((magnitude >> 13) & 0x3ffu);
    unsigned int rest = magnitude & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) half += 1u;
    return (unsigned short)(sign | half);
  }
  if (exponent < 102u) return (unsigned short)sign;  // below half the smallest subnormal: +-0
  unsigned int full = (magnitude & 0x7fffffu) | 0x800000u;
  unsigned int shift = 126u - exponent;  // 14..24
  unsigned int half = full >> shift;
  unsigned int rest = full & ((1u << shift) - 1u);
  unsigned int midpoint = 1u << (shift - 1u);
  if (rest > midpoint || (rest == midpoint && (half & 1u))) half += 1u;
  return (unsigned short)(sign | half);
}

// bf16 <-> fp32, round to nearest even
ACL_DEV float acl_b2f(unsigned short b) { return __uint_as_float((unsigned int)b << 16); }
ACL_DEV unsigned short acl_f2b_soft(float f) {
  unsigned int bits = __float_as_uint(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return (unsigned short)(bits >> 16);
}

// the hardware's own conversions where the platform has them (same rounding, fewer instructions)
#if defined(__HIPCC_RTC__) || defined(__HIP_DEVICE_COMPILE__)
ACL_DEV float acl_h2f(unsigned short h) { return (float)__builtin_bit_cast(_Float16, h); }
ACL_DEV unsigned short acl_f2h(float f) { return __builtin_bit_cast(unsigned short, (_Float16)f); }
ACL_DEV unsigned short acl_f2b(float f) { return acl_f2b_soft(f); }
#elif defined(__CUDA_ARCH__)
ACL_DEV float acl_h2f(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
ACL_DEV unsigned short acl_f2h(float f) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
#if __CUDA_ARCH__ >= 800
ACL_DEV unsigned short acl_f2b(float f) {
  unsigned short b;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b) : "f"(f));
  return b;
}
#else
ACL_DEV unsigned short acl_f2b(float f) { return acl_f2b_soft(f); }
#endif
#else
ACL_DEV float acl_h2f(unsigned short h) { return acl_h2f_soft(h); }
ACL_DEV unsigned short acl_f2h(float f) { return acl_f2h_soft(f); }
ACL_DEV unsigned short acl_f2b(float f) { return acl_f2b_soft(f); }
#endif

// FLOAT32 rounded to HF32 / TF32: 10 explicit mantissa bits, nearest even; inf and NaN unchanged
ACL_DEV float acl_round_hf32(float x) {
  unsigned int bits = __float_as_uint(x);
  if ((bits & 0x7f800000u) == 0x7f800000u) return x;
  return __uint_as_float((bits + 0x0fffu + ((bits >> 13) & 1u)) & ~0x1fffu);
}

// float -> integer as CANN's Cast does it: NaN -> 0, truncate toward zero, saturate to the range
ACL_DEV long long acl_f2i(double v, double lo, double hi) {
  if (v != v) return 0;
  v = trunc(v);
  v = v < lo ? lo : (v > hi ? hi : v);
  return (long long)v;
}
ACL_DEV unsigned long long acl_f2u(double v, double hi) {
  if (v != v || v <= 0.0) return 0ull;
  v = trunc(v);
  return v > hi ? (unsigned long long)hi : (unsigned long long)v;
}

// predicates
ACL_DEV bool acl_isnan(float x) { return x != x; }
ACL_DEV bool acl_isnan(double x) { return x != x; }
ACL_DEV bool acl_isinf(float x) { return fabsf(x) > 3.40282346638528859812e+38f; }
ACL_DEV bool acl_isinf(double x) { return fabs(x) > 1.79769313486231570815e+308; }

// math, one name for float and double
ACL_DEV float acl_exp(float x) { return expf(x); }
ACL_DEV double acl_exp(double x) { return exp(x); }
ACL_DEV float acl_log(float x) { return logf(x); }
ACL_DEV double acl_log(double x) { return log(x); }
ACL_DEV float acl_sqrt(float x) { return sqrtf(x); }
ACL_DEV double acl_sqrt(double x) { return sqrt(x); }
ACL_DEV float acl_rsqrt(float x) { return 1.0f / sqrtf(x); }
ACL_DEV double acl_rsqrt(double x) { return 1.0 / sqrt(x); }
ACL_DEV float acl_sin(float x) { return sinf(x); }
ACL_DEV double acl_sin(double x) { return sin(x); }
ACL_DEV float acl_cos(float x) { return cosf(x); }
ACL_DEV double acl_cos(double x) { return cos(x); }
ACL_DEV float acl_tanh(float x) { return tanhf(x); }
ACL_DEV double acl_tanh(double x) { return tanh(x); }
ACL_DEV float acl_erf(float x) { return erff(x); }
ACL_DEV double acl_erf(double x) { return erf(x); }
// erf's inverse: the vendor's double erfinv on a GPU (CUDA: within 5 double ulps); the C library has none,
// so elsewhere (the CPU kernel emulator) Winitzki's approximation, then three Halley steps on erf (erfc
// near |x| = 1, where 1 - |x| is exact)
// float (fp16/bf16/fp32 compute) takes the vendor's erfinvf (CUDA: within 2 float ulps, the op's class),
// a few dozen float instructions instead of the double function's hundreds of double ones
#if defined(__CUDA_ARCH__) || defined(__HIPCC_RTC__) || defined(__HIP_DEVICE_COMPILE__)
ACL_DEV double acl_erfinv(double x) { return erfinv(x); }
ACL_DEV float acl_erfinv(float x) { return erfinvf(x); }
#else
ACL_DEV double acl_erfinv(double x) {
  const double a = fabs(x), lg = log((1.0 - a) * (1.0 + a));
  const double t = 2.0 / (3.14159265358979323846 * 0.147) + 0.5 * lg;
  double y = sqrt(sqrt(t * t - lg / 0.147) - t);
  if (a < 1.0) {
    for (int k = 0; k < 3; ++k) {
      const double f = a < 0.5 ? erf(y) - a : (1.0 - a) - erfc(y);
      y -= f / (1.1283791670955126 * exp(-y * y) + y * f);
    }
  }
  return copysign(y, x);
}
ACL_DEV float acl_erfinv(float x) { return (float)acl_erfinv((double)x); }
#endif
// GELU's erf form as 0.5·x·erfc(-x/√2): 0.5·x·(1 + erf(x/√2)) cancels for x < 0 (hundreds of ulps off
// at x = -4 in float32), erfc does not. float (and fp16/bf16, computed in float) evaluates it in double:
// x is exact there, and the double rounding of x/√2, which erfc's steep tail amplifies by 2t², is far
// below a float ulp; the result rounds once. double carries the rounding of t = -x/√2 as t_lo and
// applies it through erfc'(t) = -2/√π·e^(-t²).
ACL_DEV float acl_gelu_erf(float x) {
  double d = (double)x;
  return (float)(0.5 * d * erfc(d * -0.70710678118654752440));
}
ACL_DEV double acl_gelu_erf(double x) {
  const double c = 0.70710678118654752440, c_lo = -4.833646656726457e-17;  // c + c_lo = 1/√2
  double t = -x * c;
  double t_lo = acl_isinf(x) ? 0.0 : fma(-x, c, -t) - x * c_lo;
  double r = fma(-1.1283791670955126 * exp(-t * t), t_lo, erfc(t));
  return 0.5 * x * r;
}
ACL_DEV float acl_pow(float x, float y) { return powf(x, y); }
ACL_DEV double acl_pow(double x, double y) { return pow(x, y); }
// fp32: one exp and one correctly rounded division, no branch (a warp of mixed signs runs one path, and the
// result is within a few ulp for every x)
ACL_DEV float acl_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
// for results stored as fp16/bf16 only: the hardware exp2 and a fast reciprocal (~1e-6 relative error,
// far below a 16-bit ulp; 1 / inf is 0 on both paths)
ACL_DEV float acl_sigmoid_lowp(float x) {
#if defined(__CUDA_ARCH__)
  return __fdividef(1.0f, 1.0f + exp2f(x * -1.4426950408889634f));
#else
  return 1.0f / (1.0f + exp2f(x * -1.4426950408889634f));
#endif
}
ACL_DEV double acl_sigmoid(double x) { return x >= 0.0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x)); }

// rounding: integers are already whole
ACL_DEV float acl_floor(float x) { return floorf(x); }
ACL_DEV double acl_floor(double x) { return floor(x); }
ACL_DEV long long acl_floor(long long x) { return x; }
ACL_DEV float acl_ceil(float x) { return ceilf(x); }
ACL_DEV double acl_ceil(double x) { return ceil(x); }
ACL_DEV long long acl_ceil(long long x) { return x; }
ACL_DEV float acl_round(float x) { return rintf(x); }  // half to even, like numpy.round
ACL_DEV double acl_round(double x) { return rint(x); }
ACL_DEV long long acl_round(long long x) { return x; }

// a product rounded on its own, never fused into a following add (an intermediate the spec says is a value)
template <class T> ACL_DEV T acl_mul_rn(T a, T b) { return a * b; }
ACL_DEV float acl_mul_rn(float a, float b) { return __fmul_rn(a, b); }
ACL_DEV double acl_mul_rn(double a, double b) { return __dmul_rn(a, b); }

// sign, magnitude, extrema (NaN propagates like numpy.maximum)
ACL_DEV float acl_abs(float x) { return fabsf(x); }
ACL_DEV double acl_abs(double x) { return fabs(x); }
ACL_DEV long long acl_abs(long long x) { return x < 0 ? (long long)(0ull - (unsigned long long)x) : x; }
ACL_DEV float acl_sign(float x) { return x != x ? x : (float)((x > 0.0f) - (x < 0.0f)); }
ACL_DEV double acl_sign(double x) { return x != x ? x : (double)((x > 0.0) - (x < 0.0)); }
ACL_DEV long long acl_sign(long long x) { return (long long)((x > 0) - (x < 0)); }
ACL_DEV bool acl_sign(bool x) { return x; }
ACL_DEV float acl_maximum(float a, float b) { return (a != a || a > b) ? a : b; }
ACL_DEV double acl_maximum(double a, double b) { return (a != a || a > b) ? a : b; }
ACL_DEV long long acl_maximum(long long a, long long b) { return a > b ? a : b; }
ACL_DEV unsigned long long acl_maximum(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
ACL_DEV bool acl_maximum(bool a, bool b) { return a || b; }
ACL_DEV float acl_minimum(float a, float b) { return (a != a || a < b) ? a : b; }
ACL_DEV double acl_minimum(double a, double b) { return (a != a || a < b) ? a : b; }
ACL_DEV long long acl_minimum(long long a, long long b) { return a < b ? a : b; }
ACL_DEV unsigned long long acl_minimum(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
ACL_DEV bool acl_minimum(bool a, bool b) { return a && b; }

// division with rounding (integer division by zero gives 0, like numpy)
// 16/32-bit floats divide in double, as the reference does: a float32 quotient can round onto an integer or
// underflow to -0.0 (a tiny negative quotient, whose floor is -1)
ACL_DEV float acl_truncdiv(float a, float b) { return (float)trunc((double)a / (double)b); }
ACL_DEV double acl_truncdiv(double a, double b) { return trunc(a / b); }
ACL_DEV long long acl_truncdiv(long long a, long long b) {
  if (b == 0) return 0;
  if (b == -1) return (long long)(0ull - (unsigned long long)a);
  return a / b;
}
ACL_DEV float acl_floordiv(float a, float b) { return (float)floor((double)a / (double)b); }
ACL_DEV double acl_floordiv(double a, double b) { return floor(a / b); }
ACL_DEV long long acl_floordiv(long long a, long long b) {
  long long q = acl_truncdiv(a, b);
  if (b != 0 && b != -1 && (a % b != 0) && ((a < 0) != (b < 0))) q -= 1;
  return q;
}

// powers: integers wrap like numpy's int64 power; a negative exponent gives 0
ACL_DEV long long acl_pow(long long base, long long exponent) {
  if (exponent < 0) return 0;
  unsigned long long result = 1ull, b = (unsigned long long)base;
  unsigned long long e = (unsigned long long)exponent;
  while (e) {
    if (e & 1ull) result *= b;
    b *= b;
    e >>= 1;
  }
  return (long long)result;
}
// ---- end of prelude ----
"""


def compile_options(warp_size: int, lane_mask_bits: int | None = None, extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Options every kernel is compiled with: the prelude's defines, C++17, and ``extra``."""
    if warp_size not in (32, 64):
        raise ValueError(f"warp size must be 32 or 64, not {warp_size}")
    bits = warp_size if lane_mask_bits is None else lane_mask_bits
    return ("-std=c++17", f"-DACL_WARP_SIZE={warp_size}", f"-DACL_LANE_MASK_BITS={bits}", *extra)

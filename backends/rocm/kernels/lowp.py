"""Device codecs of the low-precision types (a C++ prelude piece), bit-exact with :mod:`acl_core.lowp`.

Every conversion is integer bit manipulation on the source's own bits (no vendor fp8 intrinsics, no
float arithmetic that could flush or canonicalise), so HIP and CUDA compile the same code and round the
same way. A source value is unpacked into sign, class and a normalised 64-bit significand
(:c:func:`acl_lp_unpack`, overloaded for float, double and the integer value types; integers go through
``double`` first because the reference reads every source as float64), then rounded once into the
target format.

Device functions other kernels may call (QuantMatmul and friends reuse them):

* ``unsigned acl_lp_minifloat(acl_lp_num, int mbits, int bias, unsigned maxcode, int overflow, int mode,
  unsigned nan_code, int sign_bit)``: any IEEE-like small float (subnormals, no implicit Inf);
  ``overflow`` is ``ACL_LP_SAT`` (clamp to ±max), ``ACL_LP_INF`` (±Inf code ``maxcode + 1``) or
  ``ACL_LP_NAN`` (NaN code); ``mode`` is ``ACL_LP_RINT`` / ``ROUND`` (ties away) / ``FLOOR`` / ``CEIL`` / ``TRUNC``.
* ``acl_to_e4m3fn``, ``acl_to_e4m3fn_ovf_nan``, ``acl_to_e5m2``, ``acl_to_e5m2_sat``, ``acl_to_fp4``,
  ``acl_to_fp4_mode``, ``acl_to_hif8``, ``acl_to_e8m0``, ``acl_to_int4``: encoders (overloaded on the
  value type), with the Cast rules of :func:`acl_core.lowp.cast_float8` unless the name says otherwise.
* ``acl_e4m3fn_to_f``, ``acl_e5m2_to_f``, ``acl_fp4_to_f``, ``acl_hif8_to_f``, ``acl_e8m0_to_f``,
  ``acl_int4_to_i``: exact decoders (every code of these types is a float32 value).
* ``acl_nib_get`` / ``acl_nib_set``: element ``i`` of a nibble-packed array (element 2k in the low nibble
  of byte k); the setter changes only its own four bits (word atomics), so neighbours may be written
  by other threads at the same time.
"""

from __future__ import annotations

from typing import Final

from acl_core.dtypes import DataType as D

LOWP_PRELUDE: Final = r"""
// ---- acl-core low-precision codecs (HIP/CUDA common, integer bit manipulation only) ----
#define ACL_LP_ZERO 0
#define ACL_LP_FINITE 1
#define ACL_LP_INFINITE 2
#define ACL_LP_NAN_CLASS 3
#define ACL_LP_RINT 0
#define ACL_LP_ROUND 1
#define ACL_LP_FLOOR 2
#define ACL_LP_CEIL 3
#define ACL_LP_TRUNC 4
#define ACL_LP_SAT 0
#define ACL_LP_INF 1
#define ACL_LP_NAN 2

// a number as sign, class and value = sig * 2^(exp - 63) with bit 63 of sig set (finite, non-zero)
struct acl_lp_num { unsigned sign; int cls; int exp; unsigned long long sig; };

ACL_DEV int acl_lp_clz64(unsigned long long v) {
  int n = 0;
  if (!(v >> 32)) { n += 32; v <<= 32; }
  if (!(v >> 48)) { n += 16; v <<= 16; }
  if (!(v >> 56)) { n += 8; v <<= 8; }
  if (!(v >> 60)) { n += 4; v <<= 4; }
  if (!(v >> 62)) { n += 2; v <<= 2; }
  if (!(v >> 63)) { n += 1; }
  return n;
}

ACL_DEV acl_lp_num acl_lp_unpack(double x) {
  union { double d; unsigned long long u; } pun;
  pun.d = x;
  const unsigned long long b = pun.u;
  acl_lp_num r;
  r.sign = (unsigned)(b >> 63);
  const int e = (int)((b >> 52) & 0x7ffull);
  const unsigned long long m = b & 0xfffffffffffffull;
  r.exp = 0;
  r.sig = 0ull;
  if (e == 0x7ff) { r.cls = m ? ACL_LP_NAN_CLASS : ACL_LP_INFINITE; return r; }
  if (e == 0 && m == 0ull) { r.cls = ACL_LP_ZERO; return r; }
  r.cls = ACL_LP_FINITE;
  if (e == 0) {
    const int lz = acl_lp_clz64(m);
    r.sig = m << lz;
    r.exp = -1011 - lz;
  } else {
    r.sig = (1ull << 63) | (m << 11);
    r.exp = e - 1023;
  }
  return r;
}
ACL_DEV acl_lp_num acl_lp_unpack(float x) {
  const unsigned b = __float_as_uint(x);
  acl_lp_num r;
  r.sign = b >> 31;
  const int e = (int)((b >> 23) & 0xffu);
  const unsigned long long m = (unsigned long long)(b & 0x7fffffu);
  r.exp = 0;
  r.sig = 0ull;
  if (e == 0xff) { r.cls = m ? ACL_LP_NAN_CLASS : ACL_LP_INFINITE; return r; }
  if (e == 0 && m == 0ull) { r.cls = ACL_LP_ZERO; return r; }
  r.cls = ACL_LP_FINITE;
  if (e == 0) {
    const int lz = acl_lp_clz64(m);
    r.sig = m << lz;
    r.exp = -86 - lz;
  } else {
    r.sig = (1ull << 63) | (m << 40);
    r.exp = e - 127;
  }
  return r;
}
// integers are read as float64 first, as the reference reads every source
ACL_DEV acl_lp_num acl_lp_unpack(long long x) { return acl_lp_unpack((double)x); }
ACL_DEV acl_lp_num acl_lp_unpack(unsigned long long x) { return acl_lp_unpack((double)x); }
ACL_DEV acl_lp_num acl_lp_unpack(bool x) { return acl_lp_unpack(x ? 1.0 : 0.0); }

// 1 when the magnitude rounds up, given the kept quotient q and how the dropped part compares with half
// (rc: 0 exact, 1 below half, 2 half, 3 above half)
ACL_DEV unsigned acl_lp_round_up(unsigned long long q, int rc, unsigned sign, int mode) {
  if (rc == 0) return 0u;
  switch (mode) {
    case ACL_LP_RINT: return (rc == 3 || (rc == 2 && (q & 1ull))) ? 1u : 0u;
    case ACL_LP_ROUND: return rc >= 2 ? 1u : 0u;
    case ACL_LP_FLOOR: return sign ? 1u : 0u;
    case ACL_LP_CEIL: return sign ? 0u : 1u;
    default: return 0u;
  }
}

// sig >> shift with the rounding class of the dropped bits (shift may exceed 63)
ACL_DEV unsigned long long acl_lp_shift(unsigned long long sig, int shift, int* rc) {
  if (shift <= 0) { *rc = 0; return sig; }
  if (shift > 64) { *rc = sig ? 1 : 0; return 0ull; }
  const unsigned long long q = shift == 64 ? 0ull : sig >> shift;
  const unsigned long long rem = shift == 64 ? sig : sig & ((1ull << shift) - 1ull);
  const unsigned long long half = 1ull << (shift - 1);
  *rc = rem == 0ull ? 0 : (rem < half ? 1 : (rem == half ? 2 : 3));
  return q;
}

// an IEEE-like small float with mbits mantissa bits and exponent bias `bias` (codes above maxcode are
// Inf / NaN or do not exist); the result carries its sign at bit sign_bit (zero keeps its sign)
ACL_DEV unsigned acl_lp_minifloat(acl_lp_num v, int mbits, int bias, unsigned maxcode, int overflow, int mode,
                                  unsigned nan_code, int sign_bit) {
  const unsigned sign = v.sign << sign_bit;
  if (v.cls == ACL_LP_NAN_CLASS) return nan_code;
  if (v.cls == ACL_LP_ZERO) return sign;
  unsigned long long code;
  if (v.cls == ACL_LP_INFINITE) {
    code = (unsigned long long)maxcode + 1ull;
  } else {
    const int emin = 1 - bias;
    int rc;
    if (v.exp >= emin) {
      const unsigned long long q = acl_lp_shift(v.sig, 63 - mbits, &rc);
      const unsigned long long rq = q + acl_lp_round_up(q, rc, v.sign, mode);
      if (v.exp > bias + 64) {
        code = (unsigned long long)maxcode + 1ull;
      } else {
        code = ((unsigned long long)(v.exp + bias - 1) << mbits) + rq;
      }
    } else {
      const unsigned long long q = acl_lp_shift(v.sig, 63 - mbits + (emin - v.exp), &rc);
      code = q + acl_lp_round_up(q, rc, v.sign, mode);
    }
  }
  if (code > (unsigned long long)maxcode) {
    if (overflow == ACL_LP_SAT) return sign | maxcode;
    if (overflow == ACL_LP_INF) return sign | (maxcode + 1u);
    return nan_code;
  }
  return sign | (unsigned)code;
}

// value of an IEEE-like small float code (no Inf / NaN handling: callers test those codes first)
ACL_DEV float acl_lp_minifloat_value(unsigned mag, unsigned sign, int mbits, int bias) {
  const unsigned e = mag >> mbits;
  const unsigned m = mag & ((1u << mbits) - 1u);
  unsigned bits;
  if (e == 0u) {
    if (m == 0u) {
      bits = 0u;
    } else {  // subnormal: m * 2^(1 - bias - mbits), renormalised for float32
      int shift = 0;
      while (!((m << shift) & (1u << mbits))) ++shift;
      const unsigned mm = (m << shift) & ((1u << mbits) - 1u);
      bits = ((unsigned)(1 - bias - shift + 127) << 23) | (mm << (23 - mbits));
    }
  } else {
    bits = ((unsigned)((int)e - bias + 127) << 23) | (m << (23 - mbits));
  }
  bits |= sign << 31;
  return __uint_as_float(bits);
}
ACL_DEV float acl_lp_nan(unsigned sign) {
  const unsigned bits = (sign << 31) | 0x7fc00000u;
  return __uint_as_float(bits);
}
ACL_DEV float acl_lp_inf(unsigned sign) {
  const unsigned bits = (sign << 31) | 0x7f800000u;
  return __uint_as_float(bits);
}

// FLOAT8_E4M3FN: bias 7, max 448 (0x7e), NaN 0x7f; Cast saturates finite overflow and Inf (PyTorch)
template <class V> ACL_DEV unsigned char acl_to_e4m3fn(V x) {
  const acl_lp_num v = acl_lp_unpack(x);
  return (unsigned char)acl_lp_minifloat(v, 3, 7, 0x7eu, ACL_LP_SAT, ACL_LP_RINT, (v.sign << 7) | 0x7fu, 7);
}
// the non-saturating conversion (CANN's golden, ml_dtypes): overflow and Inf become NaN
template <class V> ACL_DEV unsigned char acl_to_e4m3fn_ovf_nan(V x) {
  const acl_lp_num v = acl_lp_unpack(x);
  return (unsigned char)acl_lp_minifloat(v, 3, 7, 0x7eu, ACL_LP_NAN, ACL_LP_RINT, (v.sign << 7) | 0x7fu, 7);
}
ACL_DEV float acl_e4m3fn_to_f(unsigned char c) {
  const unsigned sign = (unsigned)c >> 7, mag = (unsigned)c & 0x7fu;
  return mag == 0x7fu ? acl_lp_nan(sign) : acl_lp_minifloat_value(mag, sign, 3, 7);
}
// FLOAT8_E5M2: bias 15, max 57344 (0x7b), Inf 0x7c, NaN 0x7e; Cast overflows to Inf (IEEE-like)
template <class V> ACL_DEV unsigned char acl_to_e5m2(V x) {
  const acl_lp_num v = acl_lp_unpack(x);
  return (unsigned char)acl_lp_minifloat(v, 2, 15, 0x7bu, ACL_LP_INF, ACL_LP_RINT, (v.sign << 7) | 0x7eu, 7);
}
template <class V> ACL_DEV unsigned char acl_to_e5m2_sat(V x) {
  const acl_lp_num v = acl_lp_unpack(x);
  return (unsigned char)acl_lp_minifloat(v, 2, 15, 0x7bu, ACL_LP_SAT, ACL_LP_RINT, (v.sign << 7) | 0x7eu, 7);
}
ACL_DEV float acl_e5m2_to_f(unsigned char c) {
  const unsigned sign = (unsigned)c >> 7, mag = (unsigned)c & 0x7fu;
  if (mag == 0x7cu) return acl_lp_inf(sign);
  return mag > 0x7cu ? acl_lp_nan(sign) : acl_lp_minifloat_value(mag, sign, 2, 15);
}
// FLOAT4_E2M1 (a 4-bit code): bias 1, max 6 (0x7), no Inf / NaN: saturates, NaN becomes +0
template <class V> ACL_DEV unsigned char acl_to_fp4_mode(V x, int mode) {
  return (unsigned char)acl_lp_minifloat(acl_lp_unpack(x), 1, 1, 0x7u, ACL_LP_SAT, mode, 0u, 3);
}
template <class V> ACL_DEV unsigned char acl_to_fp4(V x) { return acl_to_fp4_mode(x, ACL_LP_RINT); }
ACL_DEV float acl_fp4_to_f(unsigned char c) {
  return acl_lp_minifloat_value((unsigned)c & 0x7u, ((unsigned)c >> 3) & 1u, 1, 1);
}

// HiFloat8: code of 1.m * 2^e for e in [-22, 15] (denormal mode below 2^-15), m in stored bits
ACL_DEV int acl_hif8_width(int e) {
  const int mag = e < 0 ? -e : e;
  if (e < -15) return 0;
  return mag >= 8 ? 1 : (mag >= 4 ? 2 : 3);
}
ACL_DEV unsigned acl_hif8_code(int e, unsigned m) {
  if (e < -15) return (unsigned)(e + 23);
  const int mag = e < 0 ? -e : e;
  const int dot = mag == 0 ? 0 : (mag >= 8 ? 4 : (mag >= 4 ? 3 : (mag >= 2 ? 2 : 1)));
  const unsigned prefix[5] = {1u, 1u, 1u, 2u, 3u};
  const int plen[5] = {4, 3, 2, 2, 2};
  const int width = acl_hif8_width(e);
  const unsigned field = dot == 0 ? 0u : (((e < 0 ? 1u : 0u) << (dot - 1)) | (unsigned)(mag - (1 << (dot - 1))));
  return (prefix[dot] << (7 - plen[dot])) | (field << width) | m;
}
// nearest, ties away from zero; overflow to Inf (0x6f), underflow below 2^-23 to the unsigned zero, NaN 0x80
template <class V> ACL_DEV unsigned char acl_to_hif8(V x) {
  const acl_lp_num v = acl_lp_unpack(x);
  const unsigned sign = v.sign << 7;
  if (v.cls == ACL_LP_NAN_CLASS) return (unsigned char)0x80u;
  if (v.cls == ACL_LP_ZERO) return (unsigned char)0u;
  if (v.cls == ACL_LP_INFINITE || v.exp > 15) return (unsigned char)(sign | 0x6fu);
  if (v.exp < -23) return (unsigned char)0u;
  if (v.exp == -23) return (unsigned char)(sign | acl_hif8_code(-22, 0u));
  int e = v.exp;
  const int width = acl_hif8_width(e);
  unsigned long long q = v.sig >> (63 - width);
  q += (v.sig >> (62 - width)) & 1ull;  // the first dropped bit: ties and above round away
  if (q == (2ull << width)) {
    e += 1;
    if (e > 15) return (unsigned char)(sign | 0x6fu);
    return (unsigned char)(sign | acl_hif8_code(e, 0u));
  }
  return (unsigned char)(sign | acl_hif8_code(e, (unsigned)(q - (1ull << width))));
}
ACL_DEV float acl_hif8_to_f(unsigned char c) {
  const unsigned sign = (unsigned)c >> 7, mag = (unsigned)c & 0x7fu;
  if (c == 0x80u) return acl_lp_nan(0u);
  if (mag == 0u) return 0.0f;
  if (mag == 0x6fu) return acl_lp_inf(sign);
  int e;
  unsigned m;
  int width;
  if ((mag >> 3) == 0u) {  // denormal mode: 2^(m - 23)
    e = (int)(mag & 7u) - 23;
    m = 0u;
    width = 0;
  } else if ((mag >> 3) == 1u) {  // D = 0
    e = 0;
    m = mag & 7u;
    width = 3;
  } else if ((mag >> 4) == 1u) {  // D = 1
    e = ((mag >> 3) & 1u) ? -1 : 1;
    m = mag & 7u;
    width = 3;
  } else {
    const unsigned top = mag >> 5;  // 1: D = 2, 2: D = 3, 3: D = 4
    const int dot = (int)top + 1;
    width = 5 - dot;
    const unsigned field = (mag >> width) & ((1u << dot) - 1u);
    const int magnitude = (1 << (dot - 1)) + (int)(field & ((1u << (dot - 1)) - 1u));
    e = (field >> (dot - 1)) ? -magnitude : magnitude;
    m = mag & ((1u << width) - 1u);
  }
  const unsigned bits = (sign << 31) | ((unsigned)(e + 127) << 23) | (m << (23 - width));
  return __uint_as_float(bits);
}

// FLOAT8_E8M0 (2^(c - 127), 0xff NaN) as ml_dtypes converts: nearest with ties up in the exponent,
// below 2^-127 clamps to code 0; zero, negatives, Inf, NaN and overflow become 0xff
template <class V> ACL_DEV unsigned char acl_to_e8m0(V x) {
  const acl_lp_num v = acl_lp_unpack(x);
  if (v.cls != ACL_LP_FINITE || v.sign) return (unsigned char)0xffu;
  const int e = v.exp + (int)((v.sig >> 62) & 1ull) + 127;
  if (e < 0) return (unsigned char)0u;
  return (unsigned char)(e > 254 ? 0xffu : (unsigned)e);
}
ACL_DEV float acl_e8m0_to_f(unsigned char c) {
  if (c == 0xffu) return acl_lp_nan(0u);
  const unsigned bits = c == 0u ? 0x00400000u : ((unsigned)c << 23);  // code 0 is the float32 subnormal 2^-127
  return __uint_as_float(bits);
}

// INT4 (a 4-bit two's-complement code): Cast truncates toward zero, saturates to [-8, 7], NaN -> 0
ACL_DEV unsigned char acl_to_int4(double x) { return (unsigned char)(acl_f2i(x, -8.0, 7.0) & 0xf); }
ACL_DEV unsigned char acl_to_int4(float x) { return acl_to_int4((double)x); }
ACL_DEV unsigned char acl_to_int4(long long x) { return (unsigned char)((x < -8 ? -8 : (x > 7 ? 7 : x)) & 0xf); }
ACL_DEV unsigned char acl_to_int4(unsigned long long x) { return (unsigned char)(x > 7ull ? 7u : (unsigned)x); }
ACL_DEV unsigned char acl_to_int4(bool x) { return (unsigned char)(x ? 1u : 0u); }
ACL_DEV long long acl_int4_to_i(unsigned char c) { return (long long)(((int)(c & 0xfu) ^ 8) - 8); }

// nibble-packed arrays: element i in bits 4*(i&1) of byte i>>1
ACL_DEV unsigned char acl_nib_get(const unsigned char* p, long long i) {
  return (unsigned char)((p[i >> 1] >> ((i & 1) * 4)) & 0xfu);
}
ACL_DEV void acl_nib_set(unsigned char* p, long long i, unsigned char code) {
  const unsigned long long byte = (unsigned long long)(p + (i >> 1));
  unsigned* word = (unsigned*)(byte & ~3ull);
  const unsigned shift = (unsigned)((byte & 3ull) * 8ull + (unsigned long long)(i & 1) * 4ull);
#if defined(__HIPCC_RTC__) || defined(__HIP_DEVICE_COMPILE__) || defined(__CUDA_ARCH__)
  atomicAnd(word, ~(0xfu << shift));
  atomicOr(word, ((unsigned)code & 0xfu) << shift);
#else
  __atomic_fetch_and(word, ~(0xfu << shift), __ATOMIC_RELAXED);
  __atomic_fetch_or(word, ((unsigned)code & 0xfu) << shift, __ATOMIC_RELAXED);
#endif
}
// ---- end of low-precision codecs ----
"""

LOW_PRECISION: Final[frozenset[D]] = frozenset(
    {
        D.ACL_FLOAT8_E4M3FN,
        D.ACL_FLOAT8_E5M2,
        D.ACL_FLOAT8_E8M0,
        D.ACL_HIFLOAT8,
        D.ACL_FLOAT4_E2M1,
        D.ACL_INT4,
    }
)
"""The 8- and 4-bit types these codecs store (the Cast encoders are in :mod:`acl_rocm.kernels.ctypes_map`)."""

CAST_ENCODER: Final[dict[D, str]] = {
    D.ACL_FLOAT8_E4M3FN: "acl_to_e4m3fn",
    D.ACL_FLOAT8_E5M2: "acl_to_e5m2",
    D.ACL_FLOAT8_E8M0: "acl_to_e8m0",
    D.ACL_HIFLOAT8: "acl_to_hif8",
    D.ACL_FLOAT4_E2M1: "acl_to_fp4",
    D.ACL_INT4: "acl_to_int4",
}
"""The encoder Cast uses for each type (the rules of :func:`acl_core.lowp.cast_float8` and the reference's Cast)."""

DECODER: Final[dict[D, str]] = {
    D.ACL_FLOAT8_E4M3FN: "acl_e4m3fn_to_f",
    D.ACL_FLOAT8_E5M2: "acl_e5m2_to_f",
    D.ACL_FLOAT8_E8M0: "acl_e8m0_to_f",
    D.ACL_HIFLOAT8: "acl_hif8_to_f",
    D.ACL_FLOAT4_E2M1: "acl_fp4_to_f",
    D.ACL_INT4: "acl_int4_to_i",
}
"""The exact decoder of each type (float32 values; INT4 to a 64-bit integer)."""

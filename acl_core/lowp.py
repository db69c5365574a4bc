"""Low-precision number formats: codecs and rounding rules the reference and its tests share.

* **HiFloat8** (``ACL_HIFLOAT8``): Huawei's tapered 8-bit float, which NumPy and ml_dtypes lack;
  encoded and decoded here, values held as ``uint8`` bit patterns on the host.
* **FLOAT8 E4M3FN / E5M2, E8M0, FLOAT4 E2M1, INT4**: ml_dtypes types; this module adds the rounding
  and saturation rules operators need on top of ml_dtypes' plain conversions.
* **fnuz fp8** (``float8_e4m3fnuz`` / ``float8_e5m2fnuz``, the formats of AMD gfx942): no aclDataType;
  NumPy-side conversion helpers for backends that store fp8 that way.
* **Sub-byte packing**: two 4-bit elements per byte, element ``2k`` in the low nibble of byte ``k``
  (acl-core's convention, the one ``tensor_io`` uses; CANN's official nibble order is not documented
  in our sources), and eight INT4 per INT32 (element ``8k+i`` in bits ``4i..4i+3`` of word ``k``).

HiFloat8 layout (established from Huawei's opbase ``hifloat8.h`` / ``hifloat8.cpp`` and matching the
published description of HiF8: sign, prefix-coded *dot* field, exponent, mantissa)::

    bit 7       sign (0x80 with a zero magnitude is NaN; zero is unsigned: 0x00)
    bits 6..3   dot prefix, read MSB first:
                  0000  denormal mode: value = 2^(m - 23), m = bits 2..0 (m = 0 is zero)  -> 2^-22..2^-16
                  0001  D=0: exponent 0,        3 mantissa bits                          -> [1, 2)
                  001   D=1: 1 exponent bit,    3 mantissa bits, |e| = 1
                  01    D=2: 2 exponent bits,   3 mantissa bits, |e| in 2..3
                  10    D=3: 3 exponent bits,   2 mantissa bits, |e| in 4..7
                  11    D=4: 4 exponent bits,   1 mantissa bit,  |e| in 8..15
    exponent    sign-magnitude: the field's top bit is the exponent's sign, the magnitude's leading
                1 is implicit (|e| = 2^(D-1) + remaining bits)
    0x6F/0xEF   ±Inf (the code that would be 1.5 * 2^15); the largest finite value is 2^15 = 32768

Encoding rounds to nearest with ties away from zero (Huawei's "TA" rounding), which makes every
magnitude >= 1.25 * 2^15 = 40960 overflow to Inf and every magnitude in [2^-23, 2^-22) round up to
2^-22; magnitudes below 2^-23 become zero. Ascend hardware's other HiF8 rounding ("hybrid") is not
modelled.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Final

import ml_dtypes
import numpy as np
from numpy.typing import ArrayLike

from acl_core.dtypes import DataType

Array = np.ndarray

# ----------------------------------------------------------------------------- HiFloat8
HIFLOAT8_NAN: Final = 0x80
"""The one HiFloat8 NaN code."""
HIFLOAT8_INF: Final = 0x6F
"""+Inf; -Inf is ``0x80 | 0x6F``."""
HIFLOAT8_MAX: Final = 32768.0
"""Largest finite HiFloat8 magnitude (2^15)."""
HIFLOAT8_MIN_EXP: Final = -22
HIFLOAT8_MAX_EXP: Final = 15

_DOT_PREFIX = ((0, 0b0001, 4), (1, 0b001, 3), (2, 0b01, 2), (3, 0b10, 2), (4, 0b11, 2))
"""(D, prefix bits, prefix length) of the normal-mode dot field."""


def _dot_of(magnitude: int) -> int:
    """The dot value D whose exponent field holds ``|e| = magnitude`` (0 for e = 0)."""
    return 0 if magnitude == 0 else magnitude.bit_length()


def hifloat8_mantissa_bits(exponent: int) -> int:
    """Stored mantissa bits for a HiF8 value of binary exponent ``exponent`` (0 in denormal mode)."""
    mag = abs(exponent)
    if exponent < -15:
        return 0
    return (3, 3, 3, 2, 1)[_dot_of(mag)]


def _hifloat8_code(exponent: int, mantissa: int) -> int:
    """The positive code of 1.mantissa * 2^exponent (mantissa in stored bits; denormals: mantissa 0)."""
    if exponent < -15:
        return exponent + 23
    mag = abs(exponent)
    dot = _dot_of(mag)
    _, prefix, plen = _DOT_PREFIX[dot]
    width = hifloat8_mantissa_bits(exponent)
    field = 0 if dot == 0 else ((1 if exponent < 0 else 0) << (dot - 1)) | (mag - (1 << (dot - 1)))
    return (prefix << (7 - plen)) | (field << width) | mantissa


def _build_table() -> Array:
    table = np.full(256, np.nan)
    table[0] = 0.0
    for exponent in range(HIFLOAT8_MIN_EXP, HIFLOAT8_MAX_EXP + 1):
        width = hifloat8_mantissa_bits(exponent)
        for mantissa in range(1 << width):
            code = _hifloat8_code(exponent, mantissa)
            table[code] = math.ldexp(1.0 + mantissa / (1 << width), exponent)
    table[HIFLOAT8_INF] = np.inf
    table[128:] = -table[:128]
    table[HIFLOAT8_NAN] = np.nan
    return table


HIFLOAT8_TABLE: Final[Array] = _build_table()
"""The value of every HiFloat8 code (index = code), as float64."""


def hifloat8_decode(codes: Array | Iterable[int]) -> Array:
    """HiFloat8 bit patterns (uint8) to their float64 values."""
    return HIFLOAT8_TABLE[np.asarray(codes, dtype=np.uint8)]


def hifloat8_encode(values: Array | Iterable[float] | float) -> Array:
    """Float values to HiFloat8 codes (uint8), rounding to nearest with ties away from zero."""
    x = np.asarray(values, dtype=np.float64)
    flat = x.reshape(-1)
    out = np.zeros(flat.shape, dtype=np.uint8)
    sign = np.where(np.signbit(flat), 0x80, 0).astype(np.uint8)
    mag = np.abs(flat)
    frac, exp2 = np.frexp(mag)  # mag = frac * 2^exp2, frac in [0.5, 1)
    exponent = exp2.astype(np.int64) - 1
    significand = frac * 2.0  # in [1, 2)
    finite = np.isfinite(mag) & (mag > 0)
    for i in np.flatnonzero(finite):
        e = int(exponent[i])
        if e < HIFLOAT8_MIN_EXP - 1:
            continue  # underflow to zero (zero is unsigned)
        if e == HIFLOAT8_MIN_EXP - 1:
            e, q, width = HIFLOAT8_MIN_EXP, 0, 0  # [2^-23, 2^-22) rounds away from zero to 2^-22
        elif e > HIFLOAT8_MAX_EXP:
            out[i] = sign[i] | HIFLOAT8_INF
            continue
        else:
            width = hifloat8_mantissa_bits(e)
            q = math.floor(float(significand[i]) * (1 << width) + 0.5)  # ties away from zero
            if q == 2 << width:  # the significand rounded up to 2: next binade, mantissa 0
                e, q = e + 1, 0
                if e > HIFLOAT8_MAX_EXP:
                    out[i] = sign[i] | HIFLOAT8_INF
                    continue
            else:
                q -= 1 << width
        out[i] = sign[i] | _hifloat8_code(e, q)
    out[np.isinf(flat)] = sign[np.isinf(flat)] | HIFLOAT8_INF
    out[np.isnan(flat)] = HIFLOAT8_NAN
    return out.reshape(x.shape)


def hifloat8_round(values: Array | Iterable[float] | float) -> Array:
    """``values`` rounded to the nearest HiFloat8 value (float64), as encode-then-decode."""
    return hifloat8_decode(hifloat8_encode(values))


# ----------------------------------------------------------------------------- fp8, fp4, E8M0 via ml_dtypes
FP8_MAX: Final[dict[DataType, float]] = {
    DataType.ACL_FLOAT8_E4M3FN: 448.0,
    DataType.ACL_FLOAT8_E5M2: 57344.0,
    DataType.ACL_HIFLOAT8: HIFLOAT8_MAX,
    DataType.ACL_FLOAT4_E2M1: 6.0,
}
"""Largest finite magnitude of each low-precision float element type."""

MX_EMAX: Final[dict[DataType, int]] = {
    DataType.ACL_FLOAT8_E4M3FN: 8,
    DataType.ACL_FLOAT8_E5M2: 15,
    DataType.ACL_FLOAT4_E2M1: 2,
    DataType.ACL_FLOAT4_E1M2: 0,
}
"""emax of each MX element type: the exponent of its largest normal value (OCP MX v1.0 table)."""

INT_RANGE: Final[dict[DataType, tuple[int, int]]] = {
    DataType.ACL_INT8: (-128, 127),
    DataType.ACL_INT4: (-8, 7),
    DataType.ACL_INT32: (-(2**31), 2**31 - 1),
}


def quant_max(dtype: DataType) -> float:
    """The ``dtypeMax`` of a quantised output type (INT32 holds packed INT4, so 7)."""
    if dtype == DataType.ACL_INT32:
        return 7.0
    if dtype in INT_RANGE:
        return float(INT_RANGE[dtype][1])
    return FP8_MAX[dtype]


def quant_min(dtype: DataType) -> float:
    """The ``dtypeMin`` of a quantised output type (INT32 holds packed INT4, so -8)."""
    if dtype == DataType.ACL_INT32:
        return -8.0
    if dtype in INT_RANGE:
        return float(INT_RANGE[dtype][0])
    return -FP8_MAX[dtype]


def float_grid(dtype: DataType) -> Array:
    """Every finite non-negative value of a small float type, ascending (from its codes)."""
    if dtype == DataType.ACL_HIFLOAT8:
        values = HIFLOAT8_TABLE[:128]
    else:
        np_dtype = dtype.numpy
        assert np_dtype is not None and np_dtype.itemsize == 1, dtype
        codes = np.arange(16 if dtype.is_packed else 256, dtype=np.uint8)
        values = codes.view(np_dtype).astype(np.float64)
    values = values[np.isfinite(values) & (values >= 0)]
    return np.unique(values)


def round_to_float(values: Array, dtype: DataType, mode: str = "rint", *, saturate: bool = True) -> Array:
    """Round float64 ``values`` to representable values of a small float type (float64 result).

    ``mode``: ``rint`` (nearest, ties to even; ties away for HiFloat8, its only nearest mode),
    ``round`` (nearest, ties away from zero), ``floor`` (toward -inf), ``trunc`` (toward zero).
    ``saturate`` clamps finite overflow (and Inf) to ±max; otherwise overflow becomes Inf where the
    type has one and NaN where it has not. NaN stays NaN (types without NaN get 0).
    """
    x = np.asarray(values, dtype=np.float64)
    top = FP8_MAX[dtype]
    if saturate:
        x = np.where(np.isnan(x), x, np.clip(x, -top, top))
    if dtype == DataType.ACL_HIFLOAT8 and mode in ("rint", "round"):
        return hifloat8_round(x)
    if mode == "rint":
        np_dtype = dtype.numpy
        assert np_dtype is not None
        with np.errstate(over="ignore", invalid="ignore"):
            out = x.astype(np_dtype).astype(np.float64)
        if dtype.is_packed:  # FLOAT4_E2M1 has no NaN / Inf: ml_dtypes saturates them; keep NaN -> 0
            out = np.where(np.isnan(x), 0.0, out)
        return out
    grid = float_grid(dtype)
    mag = np.abs(x)
    idx = np.clip(np.searchsorted(grid, mag, side="right") - 1, 0, len(grid) - 1)  # grid[idx] <= mag
    lower = grid[idx]
    upper = grid[np.minimum(idx + 1, len(grid) - 1)]
    if mode == "trunc":
        chosen = lower
    elif mode == "floor":
        chosen = np.where(np.signbit(x) & (mag > lower), upper, lower)
    elif mode == "round":
        chosen = np.where(mag - lower >= upper - mag, upper, lower)
    else:
        raise ValueError(f"unknown rounding mode {mode!r}")
    chosen = np.where(mag > grid[-1], mag if not saturate else grid[-1], chosen)
    out = np.copysign(chosen, x)
    return np.where(np.isnan(x), np.nan if dtype != DataType.ACL_FLOAT4_E2M1 else 0.0, out)


def round_to_int(values: Array, mode: str = "round") -> Array:
    """Round float64 values to integers (float64): ``round`` = ties to even, ``ceil``/``floor``/``trunc``."""
    fn = {"round": np.rint, "rint": np.rint, "ceil": np.ceil, "floor": np.floor, "trunc": np.trunc}[mode]
    return np.asarray(fn(np.asarray(values, dtype=np.float64)))


def saturate_int(values: Array, dtype: DataType) -> Array:
    """Integers clipped to ``dtype``'s range (INT32 meaning packed INT4 is not handled here); NaN -> 0."""
    lo, hi = INT_RANGE[dtype]
    return np.clip(np.nan_to_num(np.asarray(values, dtype=np.float64), nan=0.0), lo, hi)


def cast_float8(values: Array, dtype: DataType) -> Array:
    """Values converted to an fp8/fp4 type as PyTorch converts them (float64 result).

    E4M3FN saturates (finite overflow and ±Inf become ±448, as torch's ``.to(float8_e4m3fn)``);
    E5M2 rounds to nearest even and overflows to ±Inf (IEEE-like); FLOAT4_E2M1 saturates to ±6 and
    maps NaN to 0 (it has no NaN); HiFloat8 rounds ties away and overflows to ±Inf.
    """
    if dtype == DataType.ACL_FLOAT8_E4M3FN:
        return round_to_float(values, dtype, "rint", saturate=True)
    if dtype == DataType.ACL_FLOAT4_E2M1:
        return round_to_float(values, dtype, "rint", saturate=True)
    if dtype == DataType.ACL_HIFLOAT8:
        return hifloat8_round(values)
    return round_to_float(values, dtype, "rint", saturate=False)


# ----------------------------------------------------------------------------- E8M0 scales
E8M0_NAN: Final = 0xFF
E8M0_BIAS: Final = 127


def e8m0_encode_exponent(exponent: Array) -> Array:
    """E8M0 codes of 2^exponent (exponent clamped to [-127, 127]; NaN exponent -> 0xFF)."""
    e = np.asarray(exponent, dtype=np.float64)
    codes = np.clip(np.nan_to_num(e, nan=0.0, posinf=127, neginf=-127), -127, 127) + E8M0_BIAS
    return np.where(np.isnan(e), E8M0_NAN, codes).astype(np.uint8)


def e8m0_decode(codes: ArrayLike) -> Array:
    """E8M0 codes (uint8) to float64 scale values 2^(code-127) (0xFF is NaN)."""
    c = np.asarray(codes, dtype=np.uint8).astype(np.float64)
    return np.where(c == E8M0_NAN, np.nan, np.ldexp(1.0, (c - E8M0_BIAS).astype(np.int64)))


def e8m0_array(codes: ArrayLike) -> Array:
    """E8M0 codes as an ml_dtypes ``float8_e8m0fnu`` array (the reference's host type for ACL_FLOAT8_E8M0)."""
    return np.asarray(codes, dtype=np.uint8).view(ml_dtypes.float8_e8m0fnu)


# ----------------------------------------------------------------------------- fnuz fp8 (gfx942)
FNUZ_TYPES: Final[dict[str, np.dtype]] = {
    "float8_e4m3fnuz": np.dtype(ml_dtypes.float8_e4m3fnuz),
    "float8_e5m2fnuz": np.dtype(ml_dtypes.float8_e5m2fnuz),
}
"""gfx942's fp8 formats: no Inf, no -0, one NaN (0x80), exponent bias one larger than OCP's."""


def to_fnuz(values: Array, kind: str, *, saturate: bool = True) -> Array:
    """Float values (or an OCP fp8 array) to a fnuz fp8 array, ties to even.

    ``saturate`` clamps finite overflow and ±Inf to ±max (the conversion MI300 kernels use for
    scaled fp8); otherwise they become NaN, the format's only special value.
    """
    dtype = FNUZ_TYPES[kind]
    x = np.asarray(values).astype(np.float64)
    if saturate:
        top = float(ml_dtypes.finfo(dtype).max)
        x = np.where(np.isnan(x), x, np.clip(x, -top, top))
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(dtype)


def from_fnuz(values: Array) -> Array:
    """A fnuz fp8 array (or its uint8 bit patterns with ``kind``) to float64."""
    return np.asarray(values).astype(np.float64)


def fnuz_from_bits(bits: Array, kind: str) -> Array:
    """Reinterpret uint8 bit patterns as a fnuz fp8 array."""
    return np.asarray(bits, dtype=np.uint8).view(FNUZ_TYPES[kind])


def ocp_to_fnuz(values: Array, kind: str | None = None, *, saturate: bool = True) -> Array:
    """An OCP fp8 array (float8_e4m3fn / float8_e5m2) converted to the matching fnuz format."""
    arr = np.asarray(values)
    name = arr.dtype.name
    target = kind or {"float8_e4m3fn": "float8_e4m3fnuz", "float8_e5m2": "float8_e5m2fnuz"}[name]
    return to_fnuz(arr, target, saturate=saturate)


# ----------------------------------------------------------------------------- sub-byte packing
def pack_nibbles(codes: Array) -> Array:
    """4-bit codes (uint8, low nibble used) packed two per byte, element 2k in the low nibble of byte k."""
    c = np.asarray(codes, dtype=np.uint8).reshape(-1) & 0x0F
    if c.size % 2:
        c = np.concatenate([c, np.zeros(1, np.uint8)])
    return (c[0::2] | (c[1::2] << 4)).astype(np.uint8)


def unpack_nibbles(packed: Array, count: int | None = None) -> Array:
    """The inverse of :func:`pack_nibbles`: one 4-bit code per uint8 (``count`` elements)."""
    p = np.asarray(packed, dtype=np.uint8).reshape(-1)
    out = np.empty(p.size * 2, dtype=np.uint8)
    out[0::2], out[1::2] = p & 0x0F, p >> 4
    return out if count is None else out[:count]


def int4_codes(values: Array) -> Array:
    """Signed integers in [-8, 7] as two's-complement 4-bit codes (uint8)."""
    return (np.asarray(values).astype(np.int64) & 0x0F).astype(np.uint8)


def int4_from_codes(codes: Array) -> Array:
    """4-bit two's-complement codes to int8 values in [-8, 7]."""
    c = np.asarray(codes, dtype=np.uint8).astype(np.int16) & 0x0F
    return np.where(c >= 8, c - 16, c).astype(np.int8)


def pack_int4_to_int32(values: Array) -> Array:
    """INT4 values (last dim a multiple of 8) packed eight per INT32, element 8k+i in bits 4i..4i+3."""
    v = np.asarray(values).astype(np.int64)
    if v.shape[-1] % 8:
        raise ValueError(f"last dim {v.shape[-1]} is not a multiple of 8")
    groups = (v & 0x0F).astype(np.uint64).reshape(*v.shape[:-1], v.shape[-1] // 8, 8)
    shifts = (4 * np.arange(8)).astype(np.uint64)
    words = np.bitwise_or.reduce(groups << shifts, axis=-1)
    return words.astype(np.uint32).view(np.int32)


def unpack_int32_to_int4(words: Array) -> Array:
    """The inverse of :func:`pack_int4_to_int32`: int8 values in [-8, 7], last dim times 8."""
    w = np.asarray(words).astype(np.int32).view(np.uint32).astype(np.uint64)
    shifts = (4 * np.arange(8)).astype(np.uint64)
    codes = ((w[..., None] >> shifts) & np.uint64(0x0F)).astype(np.uint8)
    return int4_from_codes(codes).reshape(*w.shape[:-1], w.shape[-1] * 8)


# ----------------------------------------------------------------------------- packed quant parameters
def decode_packed_scale(words: ArrayLike) -> Array:
    """Float32 scales carried in the low 32 bits of UINT64/INT64 quant parameters (aclnnTransQuantParam's format).

    TransQuantParam stores ``(float32_bits & 0xFFFFE000) | (1 << 46)`` with an optional 9-bit offset in
    bits 37..45; only the scale is read here.
    """
    w = np.asarray(words).astype(np.int64).view(np.uint64)
    return (w & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.float32).astype(np.float64)


def encode_packed_scale(scales: ArrayLike) -> Array:
    """Float scales in the UINT64 quant-parameter format (as aclnnTransQuantParam packs them, no offset)."""
    bits = np.asarray(scales, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return (bits & np.uint64(0xFFFFE000)) | np.uint64(1 << 46)


def encode_packed_param(scales: ArrayLike, offsets: ArrayLike | None = None) -> Array:
    """aclnnTransQuantParamV2's UINT64 words: :func:`encode_packed_scale`, plus an offset in bits 37..45.

    Each offset is rounded half to even (the family's ``round``) and clipped to [-256, 255] (NaN: 0);
    its 9-bit two's complement replaces bits 37..45 (``(word & 0x4000FFFFFFFF) | (offset & 0x1FF) << 37``).
    """
    words = encode_packed_scale(scales)
    if offsets is None:
        return words
    off = np.clip(np.rint(np.nan_to_num(np.asarray(offsets, np.float64), nan=0.0)), -256, 255).astype(np.int64)
    field = (off & 0x1FF).astype(np.uint64) << np.uint64(37)
    return (words & np.uint64(0x4000FFFFFFFF)) | field


def decode_packed_offset(words: ArrayLike) -> Array:
    """The 9-bit signed offsets in bits 37..45 of UINT64/INT64 quant parameters (int64)."""
    w = np.asarray(words).astype(np.int64).view(np.uint64)
    field = ((w >> np.uint64(37)) & np.uint64(0x1FF)).astype(np.int64)
    return np.where(field >= 256, field - 512, field)


__all__ = [
    "FNUZ_TYPES",
    "FP8_MAX",
    "HIFLOAT8_INF",
    "HIFLOAT8_MAX",
    "HIFLOAT8_NAN",
    "HIFLOAT8_TABLE",
    "MX_EMAX",
    "cast_float8",
    "decode_packed_offset",
    "decode_packed_scale",
    "e8m0_decode",
    "e8m0_encode_exponent",
    "encode_packed_param",
    "encode_packed_scale",
    "float_grid",
    "fnuz_from_bits",
    "from_fnuz",
    "hifloat8_decode",
    "hifloat8_encode",
    "hifloat8_round",
    "int4_codes",
    "int4_from_codes",
    "ocp_to_fnuz",
    "pack_int4_to_int32",
    "pack_nibbles",
    "quant_max",
    "quant_min",
    "round_to_float",
    "round_to_int",
    "to_fnuz",
    "unpack_int32_to_int4",
    "unpack_nibbles",
]

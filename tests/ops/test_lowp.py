"""Low-precision formats on the reference: HiFloat8, fp8/fp4/E8M0/INT4 rounding and packing, fnuz helpers, Cast."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
import torch

from acl_core import eager, lowp
from acl_core.dtypes import DataType as D
from acl_core.errors import AclnnError
from acl_core.spec.runtime import MemcpyKind
from tests.conftest import assert_close
from tests.ops.torch_ref import ref

# ----------------------------------------------------------------------------- HiFloat8
# Codes decoded by hand from the documented layout (sign | dot prefix | exponent | mantissa).
HIF8_HAND = {
    0x00: 0.0,
    0x01: 2.0**-22,  # denormal mode 0000, m=1: 2^(1-23)
    0x07: 2.0**-16,  # denormal mode, m=7
    0x08: 1.0,  # 0001: D=0, exponent 0, mantissa 000
    0x09: 1.125,  # mantissa 001 of 3 bits
    0x10: 2.0,  # 001 + exponent bit 0 (+1)
    0x18: 0.5,  # 001 + exponent bit 1 (-1)
    0x1F: 0.5 * 1.875,
    0x20: 4.0,  # 01: D=2, field 00 -> +2
    0x30: 0.25,  # 01, field 10 -> -2
    0x40: 16.0,  # 10: D=3, field 000 -> +4, 2 mantissa bits
    0x60: 256.0,  # 11: D=4, field 0000 -> +8, 1 mantissa bit
    0x6E: 32768.0,  # +15, mantissa 0: the largest finite value
    0x6F: math.inf,
    0x7F: 1.5 * 2.0**-15,  # -15, mantissa 1
    0x81: -(2.0**-22),
    0x88: -1.0,
    0xEF: -math.inf,
}


@pytest.mark.parametrize("code", sorted(HIF8_HAND), ids=hex)
def test_hifloat8_decodes_hand_computed_codes(code: int) -> None:
    assert lowp.hifloat8_decode([code])[0] == HIF8_HAND[code]


def test_hifloat8_special_codes() -> None:
    assert math.isnan(lowp.hifloat8_decode([0x80])[0])
    table = lowp.HIFLOAT8_TABLE
    finite = table[np.isfinite(table)]
    assert len(finite) == 253  # 256 codes minus NaN (0x80) and the two infinities
    assert len(np.unique(finite)) == 253  # every finite code is a distinct value (zero has one code)
    assert np.max(finite) == 32768.0 and np.min(np.abs(finite[finite != 0])) == 2.0**-22


def _nearest_ties_away(x: float) -> int:
    """Brute force: the code whose value is nearest to x, ties to the larger magnitude; Inf sits at 1.5 * 2^15."""
    table = lowp.HIFLOAT8_TABLE[:128].copy()
    table[lowp.HIFLOAT8_INF] = 1.5 * 2.0**15
    table[0x00] = 0.0
    mag = abs(x)
    dist = np.abs(table - mag)
    best = np.flatnonzero(dist == dist.min())
    code = int(best[np.argmax(table[best])])
    return code if code == 0 or x >= 0 else code | 0x80


def test_hifloat8_encode_is_nearest_with_ties_away() -> None:
    rng = np.random.default_rng(3)
    values = rng.standard_normal(400) * np.exp2(rng.uniform(-25, 17, 400))
    finite = np.sort(lowp.HIFLOAT8_TABLE[np.isfinite(lowp.HIFLOAT8_TABLE) & (lowp.HIFLOAT8_TABLE >= 0)])
    midpoints = (finite[1:] + finite[:-1]) / 2
    cases = np.concatenate([values, midpoints, -midpoints, np.nextafter(midpoints, 0)])
    got = lowp.hifloat8_encode(cases)
    want = np.array([_nearest_ties_away(float(v)) for v in cases], dtype=np.uint8)
    np.testing.assert_array_equal(got, want)


def test_hifloat8_encode_specials_and_boundaries() -> None:
    values = [np.nan, -0.0, 0.0, np.inf, -np.inf, 40960.0, 40959.99, 2.0**-23, -(2.0**-23), 0.99 * 2.0**-23, 1e30]
    want = [0x80, 0x00, 0x00, 0x6F, 0xEF, 0x6F, 0x6E, 0x01, 0x81, 0x00, 0x6F]
    np.testing.assert_array_equal(lowp.hifloat8_encode(values), want)


def test_hifloat8_round_trips_every_code() -> None:
    codes = np.arange(256, dtype=np.uint8)
    back = lowp.hifloat8_encode(lowp.hifloat8_decode(codes))
    np.testing.assert_array_equal(back[codes != 0x80], codes[codes != 0x80])
    assert back[0x80] == 0x80


def test_hifloat8_agrees_with_en_dtypes() -> None:
    import en_dtypes as en  # Huawei-affiliated NumPy dtypes used by CANN's test goldens (a dev dependency)

    codes = np.arange(256, dtype=np.uint8)
    np.testing.assert_array_equal(codes.view(en.hifloat8).astype(np.float64), lowp.HIFLOAT8_TABLE)
    x = np.random.default_rng(0).standard_normal(5000).astype(np.float32) * 300
    np.testing.assert_array_equal(x.astype(en.hifloat8).view(np.uint8), lowp.hifloat8_encode(x))


# ----------------------------------------------------------------------------- fp8 / fp4 / E8M0 / fnuz
FP8_TORCH = {D.ACL_FLOAT8_E4M3FN: torch.float8_e4m3fn, D.ACL_FLOAT8_E5M2: torch.float8_e5m2}
SPECIALS = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 1e6, -1e6, 448.0, 464.0, 57344.0, 61440.0, 2.0**-20])


@pytest.mark.parametrize("dtype", list(FP8_TORCH), ids=lambda d: d.short)
def test_cast_float8_matches_torch(dtype: D, rng: np.random.Generator) -> None:
    x = np.concatenate([rng.standard_normal(500) * np.exp2(rng.uniform(-12, 17, 500)), SPECIALS]).astype(np.float32)
    want = torch.from_numpy(x).to(FP8_TORCH[dtype]).float().numpy().astype(np.float64)
    np.testing.assert_array_equal(lowp.cast_float8(x, dtype), want)


def test_round_to_float_modes_on_fp4() -> None:
    x = np.array([0.25, 0.75, 1.25, 2.5, -2.5, 5.0, -5.5, 7.0, -0.2])
    assert list(lowp.round_to_float(x, D.ACL_FLOAT4_E2M1, "rint")) == [0.0, 1.0, 1.0, 2.0, -2.0, 4.0, -6.0, 6.0, -0.0]
    assert list(lowp.round_to_float(x, D.ACL_FLOAT4_E2M1, "round")) == [0.5, 1.0, 1.5, 3.0, -3.0, 6.0, -6.0, 6.0, -0.0]
    assert list(lowp.round_to_float(x, D.ACL_FLOAT4_E2M1, "floor")) == [0.0, 0.5, 1.0, 2.0, -3.0, 4.0, -6.0, 6.0, -0.5]


def test_e8m0_codes() -> None:
    np.testing.assert_array_equal(
        lowp.e8m0_encode_exponent([-200, -127, 0, 1, 127, 300, np.nan]), [0, 0, 127, 128, 254, 254, 255]
    )
    assert list(lowp.e8m0_decode([0, 127, 128])) == [2.0**-127, 1.0, 2.0]
    assert math.isnan(lowp.e8m0_decode([255])[0])
    np.testing.assert_array_equal(lowp.e8m0_array([127, 130]).astype(np.float64), [1.0, 8.0])


@pytest.mark.parametrize(
    "kind,tdt", [("float8_e4m3fnuz", torch.float8_e4m3fnuz), ("float8_e5m2fnuz", torch.float8_e5m2fnuz)]
)
def test_fnuz_helpers_match_torch(kind: str, tdt: torch.dtype, rng: np.random.Generator) -> None:
    x = np.concatenate([rng.standard_normal(300) * 50, [0.0, -0.0, np.nan, 1e6]]).astype(np.float32)
    plain = lowp.to_fnuz(x, kind, saturate=False)
    want = torch.from_numpy(x).to(tdt).float().numpy()
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(lowp.from_fnuz(plain), want.astype(np.float64))
    top = float(ml_dtypes.finfo(lowp.FNUZ_TYPES[kind]).max)
    assert lowp.from_fnuz(lowp.to_fnuz(np.array([1e6, -np.inf]), kind)).tolist() == [top, -top]
    assert (
        lowp.fnuz_from_bits([0x80], kind).astype(np.float64)[0]
        != lowp.fnuz_from_bits([0x80], kind).astype(np.float64)[0]
    )
    e4 = np.array([1.5, -3.0, 400.0], ml_dtypes.float8_e4m3fn)
    assert lowp.from_fnuz(lowp.ocp_to_fnuz(e4)).tolist() == [1.5, -3.0, 240.0]


# ----------------------------------------------------------------------------- packing
def test_nibble_order_is_low_nibble_first() -> None:
    np.testing.assert_array_equal(lowp.pack_nibbles([0x1, 0x2, 0x3]), [0x21, 0x03])
    np.testing.assert_array_equal(lowp.unpack_nibbles([0x21, 0x03], 3), [1, 2, 3])
    np.testing.assert_array_equal(lowp.int4_from_codes(lowp.int4_codes([-8, -1, 0, 7])), [-8, -1, 0, 7])


def test_int4_in_int32_packing() -> None:
    words = lowp.pack_int4_to_int32(np.array([[1, 2, 3, 4, 5, 6, 7, -8]]))
    assert words.dtype == np.int32 and int(words.view(np.uint32)[0, 0]) == 0x87654321
    np.testing.assert_array_equal(lowp.unpack_int32_to_int4(words), [[1, 2, 3, 4, 5, 6, 7, -8]])


def test_packed_quant_scale_is_transquantparams_format() -> None:
    words = lowp.encode_packed_scale([0.1, 3.0])
    assert int(words[0]) >> 46 == 1
    truncated = (np.array([0.1, 3.0], np.float32).view(np.uint32) & 0xFFFFE000).view(np.float32)
    np.testing.assert_array_equal(lowp.decode_packed_scale(words), truncated.astype(np.float64))


def test_device_packing_matches_the_documented_nibble_order() -> None:
    da = eager.to_device(np.array([1, -2, 3], ml_dtypes.int4), "reference")
    np.testing.assert_array_equal(da.storage_bytes()[:2], [0xE1, 0x03])


# ----------------------------------------------------------------------------- Cast
@pytest.mark.parametrize("dtype", list(FP8_TORCH), ids=lambda d: d.short)
def test_cast_to_and_from_float8_matches_torch(dtype: D, rng: np.random.Generator) -> None:
    x = np.concatenate([rng.uniform(-600, 600, 40), [np.nan, np.inf, -1e5]]).astype(np.float32)
    got = ref("Cast", self=x, dtype=int(dtype))["out"]
    want = torch.from_numpy(x).to(FP8_TORCH[dtype])
    assert got.dtype == dtype.numpy
    np.testing.assert_array_equal(got.astype(np.float64), want.float().numpy().astype(np.float64))
    back = ref("Cast", self=got, dtype=int(D.ACL_BF16))["out"]
    assert_close(back, want.to(torch.bfloat16).float().numpy(), atol=0, rtol=0)


def test_cast_to_e8m0_matches_torch() -> None:
    x = np.array([1.0, 2.0, 3.0, 0.3, 1e30, 5e-39], np.float32)
    got = ref("Cast", self=x, dtype=int(D.ACL_FLOAT8_E8M0))["out"]
    want = torch.from_numpy(x).to(torch.float8_e8m0fnu).float().numpy()
    np.testing.assert_array_equal(got.astype(np.float32), want)


def test_cast_fp4_and_int4() -> None:
    x = np.array([0.3, 0.8, -2.6, 5.2, 9.0, -7.7, np.nan], np.float32)
    got = ref("Cast", self=x, dtype=int(D.ACL_FLOAT4_E2M1))["out"]
    assert got.astype(np.float64).tolist() == [0.5, 1.0, -3.0, 6.0, 6.0, -6.0, 0.0]
    got = ref("Cast", self=x, dtype=int(D.ACL_INT4))["out"]
    assert got.astype(np.int64).tolist() == [0, 0, -2, 5, 7, -7, 0]  # truncation, saturation, NaN -> 0
    ints = np.array([-8, 7, 3], ml_dtypes.int4)
    assert ref("Cast", self=ints, dtype=int(D.ACL_INT32))["out"].tolist() == [-8, 7, 3]


def _hif8_device(codes: np.ndarray) -> eager.DeviceArray:
    """A HiFloat8 device tensor holding ``codes`` (HiFloat8 has no NumPy type, so through uint8 bytes)."""
    src = eager.to_device(np.asarray(codes, np.uint8), "reference")
    da = eager.DeviceArray(src.backend, src.shape, D.ACL_HIFLOAT8, src.storage_elems, storage_dims=src.shape)
    src.backend.runtime.memcpy(da.address, da.nbytes, src.address, src.nbytes, MemcpyKind.ACL_MEMCPY_DEVICE_TO_DEVICE)
    return da


def test_cast_to_and_from_hifloat8() -> None:
    x = np.array([[1.0625, -3.3, 40960.0, 1e-9], [0.5, np.nan, -0.0, 300.0]], np.float32)
    out = eager.empty(x.shape, D.ACL_HIFLOAT8, "reference")
    ref("Cast", self=x, dtype=int(D.ACL_HIFLOAT8), out=out)
    codes = out.storage_bytes()[: x.size].reshape(x.shape)
    np.testing.assert_array_equal(codes, lowp.hifloat8_encode(x))
    assert codes[0, 0] == 0x09 and codes[0, 2] == 0x6F  # 1.0625 ties away to 1.125; 40960 overflows
    back = ref("Cast", self=_hif8_device(codes), dtype=int(D.ACL_FLOAT))["out"]
    assert_close(back, lowp.hifloat8_decode(codes), atol=0, rtol=0)


def test_cast_rejects_types_the_reference_lacks() -> None:
    with pytest.raises(AclnnError) as info:
        ref("Cast", self=np.ones(2, np.float32), dtype=int(D.ACL_FLOAT4_E1M2))
    assert info.value.code == 161002

"""The device codecs of ``acl_rocm.kernels.lowp``, built with g++ and checked bit for bit against acl_core.lowp.

The C++ that the GPU compiles (the prelude and the low-precision prelude, unchanged) is built for the host
with the kernel emulator's shim and driven over every code (decoders), every float16 and bfloat16 bit
pattern, a million random float32 patterns, random float64 values, and the midpoints between adjacent
representable values with their neighbours (encoders). The oracle is the reference's own conversion for
each rule (ml_dtypes through ``acl_core.lowp``).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from acl_core import lowp
from acl_core.dtypes import DataType as D
from acl_rocm.kernels.lowp import LOWP_PRELUDE
from acl_rocm.kernels.prelude import PRELUDE
from tests.rocm.kernel_emulator import SHIM, available

DRIVER = r"""
extern "C" void enc_f(int which, int mode, const float* x, unsigned char* out, long n) {
  for (long i = 0; i < n; ++i) out[i] = ENCODE(x[i]);
}
extern "C" void enc_d(int which, int mode, const double* x, unsigned char* out, long n) {
  for (long i = 0; i < n; ++i) out[i] = ENCODE(x[i]);
}
extern "C" void enc_i(int which, int mode, const long long* x, unsigned char* out, long n) {
  for (long i = 0; i < n; ++i) out[i] = ENCODE(x[i]);
}
extern "C" void dec(int which, const unsigned char* c, float* out, long n) {
  for (long i = 0; i < n; ++i) {
    switch (which) {
      case 0: out[i] = acl_e4m3fn_to_f(c[i]); break;
      case 1: out[i] = acl_e5m2_to_f(c[i]); break;
      case 2: out[i] = acl_fp4_to_f(c[i]); break;
      case 3: out[i] = acl_hif8_to_f(c[i]); break;
      case 4: out[i] = acl_e8m0_to_f(c[i]); break;
      default: out[i] = (float)acl_int4_to_i(c[i]); break;
    }
  }
}
"""
ENCODE = (
    "(which == 0 ? acl_to_e4m3fn(x[i]) : which == 1 ? acl_to_e5m2(x[i]) : which == 2 ? acl_to_fp4(x[i]) : "
    "which == 3 ? acl_to_hif8(x[i]) : which == 4 ? acl_to_e8m0(x[i]) : which == 5 ? acl_to_int4(x[i]) : "
    "which == 6 ? acl_to_e4m3fn_ovf_nan(x[i]) : which == 7 ? acl_to_e5m2_sat(x[i]) : acl_to_fp4_mode(x[i], mode))"
)
CODEC = {
    "e4m3fn": 0,
    "e5m2": 1,
    "fp4": 2,
    "hif8": 3,
    "e8m0": 4,
    "int4": 5,
    "e4m3fn_nan": 6,
    "e5m2_sat": 7,
    "fp4_mode": 8,
}
MODES = {"rint": 0, "round": 1, "floor": 2, "trunc": 4}


@pytest.fixture(scope="module")
def lib() -> ctypes.CDLL:
    """The codecs built for the host."""
    reason = available()
    if reason:
        pytest.skip(reason)
    text = "#define ACL_WARP_SIZE 32\n#define ACL_LANE_MASK_BITS 32\n" + SHIM + PRELUDE + LOWP_PRELUDE
    text += DRIVER.replace("ENCODE(x[i])", ENCODE)
    build = Path(tempfile.gettempdir()) / f"acl-rocm-emulated-{os.getuid()}"
    build.mkdir(exist_ok=True)
    so = build / f"lowp-{hashlib.sha1(text.encode()).hexdigest()[:16]}.so"
    if not so.exists():
        src = build / f"lowp.{os.getpid()}.cpp"
        src.write_text(text)
        tmp = build / f"lowp.{os.getpid()}.so"
        cmd = ["g++", "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-w", str(src), "-o", str(tmp)]
        result = subprocess.run(cmd, capture_output=True, text=True)
        assert result.returncode == 0, result.stderr[-3000:]
        tmp.rename(so)
        src.unlink()
    return ctypes.CDLL(str(so))


def _encode(lib: ctypes.CDLL, codec: str, x: np.ndarray, mode: str = "rint") -> np.ndarray:
    fn = {np.dtype(np.float32): lib.enc_f, np.dtype(np.float64): lib.enc_d, np.dtype(np.int64): lib.enc_i}[x.dtype]
    x = np.ascontiguousarray(x)
    out = np.zeros(x.size, np.uint8)
    fn(
        ctypes.c_int(CODEC[codec]),
        ctypes.c_int(MODES[mode]),
        x.ctypes.data_as(ctypes.c_void_p),
        out.ctypes.data_as(ctypes.c_void_p),
        ctypes.c_long(x.size),
    )
    return out


def _decode(lib: ctypes.CDLL, codec: str, codes: np.ndarray) -> np.ndarray:
    codes = np.ascontiguousarray(codes, dtype=np.uint8)
    out = np.zeros(codes.size, np.float32)
    lib.dec(
        ctypes.c_int(CODEC[codec]),
        codes.ctypes.data_as(ctypes.c_void_p),
        out.ctypes.data_as(ctypes.c_void_p),
        ctypes.c_long(codes.size),
    )
    return out


def _bits(values: np.ndarray, np_type: object) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(values, np.float64).astype(np_type).view(np.uint8)


ORACLES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "e4m3fn": lambda v: _bits(lowp.cast_float8(v, D.ACL_FLOAT8_E4M3FN), ml_dtypes.float8_e4m3fn),
    "e5m2": lambda v: _bits(lowp.cast_float8(v, D.ACL_FLOAT8_E5M2), ml_dtypes.float8_e5m2),
    "fp4": lambda v: _bits(lowp.cast_float8(v, D.ACL_FLOAT4_E2M1), ml_dtypes.float4_e2m1fn),
    "hif8": lambda v: lowp.hifloat8_encode(v),
    "e8m0": lambda v: _bits(v, ml_dtypes.float8_e8m0fnu),
    "int4": lambda v: lowp.int4_codes(lowp.saturate_int(np.trunc(v), D.ACL_INT4)),
    "e4m3fn_nan": lambda v: _bits(
        lowp.round_to_float(v, D.ACL_FLOAT8_E4M3FN, "rint", saturate=False), ml_dtypes.float8_e4m3fn
    ),
    "e5m2_sat": lambda v: _bits(
        lowp.round_to_float(v, D.ACL_FLOAT8_E5M2, "rint", saturate=True), ml_dtypes.float8_e5m2
    ),
}
DECODED = {
    "e4m3fn": (256, lambda c: c.view(ml_dtypes.float8_e4m3fn).astype(np.float64)),
    "e5m2": (256, lambda c: c.view(ml_dtypes.float8_e5m2).astype(np.float64)),
    "fp4": (16, lambda c: c.view(ml_dtypes.float4_e2m1fn).astype(np.float64)),
    "hif8": (256, lowp.hifloat8_decode),
    "e8m0": (256, lowp.e8m0_decode),
    "int4": (16, lambda c: lowp.int4_from_codes(c).astype(np.float64)),
}


def _grid_probes(codec: str) -> np.ndarray:
    """Every representable value of the target, the midpoints between neighbours, and one ulp either side."""
    count, decode = DECODED["hif8" if codec == "hif8" else codec.split("_")[0]]
    values = decode(np.arange(count, dtype=np.uint8))
    values = np.unique(values[np.isfinite(values)])
    mids = (values[1:] + values[:-1]) / 2
    probes = np.concatenate([values, mids, values * 1.25, values * 1.5, values * 2, values / 2])
    probes = np.concatenate([probes, np.nextafter(probes, np.inf), np.nextafter(probes, -np.inf)])
    return np.concatenate([probes, -probes, [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e300, -1e300, 5e-324]])


def _all_16_bit_floats() -> np.ndarray:
    patterns = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    halves = patterns.view(np.float16).astype(np.float32)
    bf16 = (patterns.astype(np.uint32) << 16).view(np.float32)
    return np.concatenate([halves, bf16])


def _assert_codes(got: np.ndarray, want: np.ndarray, x: np.ndarray, what: str) -> None:
    bad = np.flatnonzero(got != want)
    if bad.size:
        sample = ", ".join(f"{x[i]!r}: got {got[i]:#04x} want {want[i]:#04x}" for i in bad[:8])
        raise AssertionError(f"{what}: {bad.size} of {x.size} differ ({sample})")


@pytest.mark.parametrize("codec", sorted(ORACLES))
def test_encoders_match_the_reference(lib: ctypes.CDLL, codec: str) -> None:
    rng = np.random.default_rng(6)
    oracle = ORACLES[codec]
    inputs32 = [
        _all_16_bit_floats(),
        rng.integers(0, 2**32, 1_000_000, dtype=np.uint64).astype(np.uint32).view(np.float32),
        _grid_probes(codec).astype(np.float32),
    ]
    for x in inputs32:
        _assert_codes(_encode(lib, codec, x), oracle(x.astype(np.float64)), x, f"{codec} from float32")
    doubles = np.concatenate(
        [
            _grid_probes(codec),
            rng.standard_normal(200_000) * np.exp2(rng.integers(-40, 40, 200_000)),
            rng.integers(0, 2**63, 100_000, dtype=np.int64).view(np.float64),
        ]
    )
    _assert_codes(_encode(lib, codec, doubles), oracle(doubles), doubles, f"{codec} from float64")
    ints = np.concatenate([np.arange(-70000, 70000, dtype=np.int64), rng.integers(-(2**62), 2**62, 10_000)])
    _assert_codes(_encode(lib, codec, ints), oracle(ints.astype(np.float64)), ints, f"{codec} from int64")


@pytest.mark.parametrize("mode", ["rint", "round", "floor", "trunc"])
def test_fp4_rounding_modes_match_round_to_float(lib: ctypes.CDLL, mode: str) -> None:
    rng = np.random.default_rng(7)
    x = np.concatenate([_grid_probes("fp4"), rng.uniform(-8, 8, 100_000)])
    want = _bits(lowp.round_to_float(x, D.ACL_FLOAT4_E2M1, mode, saturate=True), ml_dtypes.float4_e2m1fn)
    _assert_codes(_encode(lib, "fp4_mode", x, mode), want, x, f"fp4 {mode}")


@pytest.mark.parametrize("codec", sorted(DECODED))
def test_decoders_are_exact_on_every_code(lib: ctypes.CDLL, codec: str) -> None:
    count, decode = DECODED[codec]
    codes = np.arange(count, dtype=np.uint8)
    got = _decode(lib, codec, codes).astype(np.float64)
    want = decode(codes)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = ~np.isnan(want)
    np.testing.assert_array_equal(got[finite], want[finite])
    np.testing.assert_array_equal(np.signbit(got[finite]), np.signbit(want[finite]))


def test_every_code_survives_a_round_trip(lib: ctypes.CDLL) -> None:
    for codec, (count, _) in DECODED.items():
        codes = np.arange(count, dtype=np.uint8)
        back = _encode(lib, codec if codec != "e4m3fn" else "e4m3fn_nan", _decode(lib, codec, codes))
        keep = codes != (0x80 if codec == "hif8" else 0xFF if codec == "e8m0" else 0x100)
        if codec in ("e4m3fn", "e5m2"):
            keep &= ~np.isnan(_decode(lib, codec, codes))
        np.testing.assert_array_equal(back[keep], codes[keep], err_msg=codec)

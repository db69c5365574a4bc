"""The quantisation family against hand-computed cases, PyTorch integer matmuls and an independent OCP MX model."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
import torch

from acl_core import lowp
from acl_core.errors import AclnnError
from acl_core.spec.ops import quant
from tests.conftest import assert_close
from tests.ops.torch_ref import check_samples_and_errors, ref, to_torch


def _code(op: str, **args: object) -> int:
    with pytest.raises(AclnnError) as info:
        ref(op, **args)
    return int(info.value.code)


@pytest.mark.parametrize("spec", quant.SPECS, ids=lambda s: s.name)
def test_conformance_samples_run_and_error_samples_fail_as_declared(spec) -> None:  # type: ignore[no-untyped-def]
    check_samples_and_errors(spec, 7)


# ----------------------------------------------------------------------------- AscendQuant / AntiQuant
def test_ascend_quant_rounds_each_mode_and_saturates() -> None:
    x = np.array([[1.25, 2.5, -0.75, 100.0, -3.5, 0.5, 7.0, -70.0]], np.float32)
    base = {"x": x, "scale": np.array([2.0], np.float32), "offset": None, "sqrtMode": False, "dstType": 2}
    # x * 2 = 2.5, 5, -1.5, 200, -7, 1, 14, -140
    assert ref("AscendQuant", **base, roundMode="round")["y"].tolist() == [[2, 5, -2, 127, -7, 1, 14, -128]]
    assert ref("AscendQuant", **base, roundMode="floor")["y"].tolist() == [[2, 5, -2, 127, -7, 1, 14, -128]]
    assert ref("AscendQuant", **base, roundMode="ceil")["y"].tolist() == [[3, 5, -1, 127, -7, 1, 14, -128]]
    assert ref("AscendQuant", **base, roundMode="trunc")["y"].tolist() == [[2, 5, -1, 127, -7, 1, 14, -128]]
    sq = ref("AscendQuant", **{**base, "sqrtMode": True, "offset": np.array([1.0], np.float32)}, roundMode="round")
    assert sq["y"].tolist() == [[6, 11, -2, 127, -13, 3, 29, -128]]  # x * 4 + 1, ties to even


def test_ascend_quant_packs_int4_into_int32(rng: np.random.Generator) -> None:
    x = rng.uniform(-10, 10, (2, 16)).astype(np.float32)
    scale = np.ones(16, np.float32)
    args = {"x": x, "scale": scale, "offset": None, "sqrtMode": False, "roundMode": "round"}
    y4 = ref("AscendQuant", **args, dstType=29)["y"].astype(np.int64)
    np.testing.assert_array_equal(y4, np.clip(np.rint(x), -8, 7))
    y32 = ref("AscendQuant", **args, dstType=3)["y"]
    assert y32.shape == (2, 2) and y32.dtype == np.int32
    words = y32.view(np.uint32).astype(np.int64)
    for i in range(8):  # element 8k+i sits in bits 4i..4i+3 of word k
        nib = (words >> (4 * i)) & 0xF
        np.testing.assert_array_equal(np.where(nib >= 8, nib - 16, nib), y4[:, i::8])


def test_ascend_quant_v3_axis_and_float8() -> None:
    x = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], np.float16)
    col = np.array([[1.0], [10.0], [100.0]], np.float16)
    y = ref("AscendQuantV3", x=x, scale=col, offset=None, sqrtMode=False, roundMode="round", dstType=2, axis=-2)["y"]
    assert y.tolist() == [[1, 2], [30, 40], [127, 127]]
    big = np.array([[3.3, -1000.0, 0.01, 470.0]], np.float32)
    args = {"x": big, "scale": np.ones(4, np.float32), "offset": None, "sqrtMode": False, "roundMode": "round"}
    e5 = ref("AscendQuantV3", **args, dstType=35, axis=-1)["y"]
    np.testing.assert_array_equal(e5.astype(np.float32), torch.from_numpy(big).to(torch.float8_e5m2).float().numpy())
    e4 = ref("AscendQuantV3", **args, dstType=36, axis=-1)["y"].astype(np.float64)
    assert e4[0, 0] == 3.25 and e4[0, 2] == 0.009765625  # nearest-even, subnormal kept
    assert math.isnan(e4[0, 1]) and math.isnan(e4[0, 3])  # beyond 464: NaN, as CANN's golden (ml_dtypes) converts


def test_ascend_anti_quant_formula(rng: np.random.Generator) -> None:
    x = rng.integers(-128, 128, (3, 8)).astype(np.int8)
    scale = rng.uniform(0.1, 1, 8).astype(np.float32)
    offset = rng.uniform(-2, 2, 8).astype(np.float32)
    y = ref("AscendAntiQuant", x=x, scale=scale, offset=offset, dstType=1, sqrtMode=False)["y"]
    want = torch.from_numpy((x.astype(np.float32) + offset) * scale).half().numpy()
    np.testing.assert_array_equal(y, want)
    packed = lowp.pack_int4_to_int32(np.arange(-8, 8).reshape(1, 16))
    y = ref("AscendAntiQuant", x=packed, scale=np.array([2.0], np.float32), offset=None, dstType=27, sqrtMode=True)["y"]
    assert y.astype(np.float32).tolist() == [[4.0 * v for v in range(-8, 8)]]


# ----------------------------------------------------------------------------- DynamicQuant / V2
def test_dynamic_quant_matches_torch_formula(rng: np.random.Generator) -> None:
    x = rng.uniform(-6, 6, (5, 32)).astype(np.float16)
    smooth = rng.uniform(0.5, 2, 32).astype(np.float16)
    x[2] = 0
    got = ref("DynamicQuant", x=x, smoothScalesOptional=smooth)
    t = to_torch(x).float() * to_torch(smooth).float()
    scale = t.abs().amax(dim=-1) / 127
    y = torch.where(scale[:, None] == 0, 0.0, t / scale[:, None]).round()
    np.testing.assert_array_equal(got["scaleOut"], scale.numpy())
    np.testing.assert_array_equal(got["yOut"], y.to(torch.int8).numpy())
    assert (np.abs(got["yOut"]).max(axis=-1) == np.array([127, 127, 0, 127, 127])).all()


def test_dynamic_quant_to_float8_and_int4(rng: np.random.Generator) -> None:
    x = rng.uniform(-3, 3, (4, 16)).astype(np.float16)
    out = ref("DynamicQuant", x=x, yOut=np.zeros((4, 16), ml_dtypes.float8_e4m3fn), scaleOut=np.zeros(4, np.float32))
    rows = np.abs(x.astype(np.float32)).max(axis=-1)
    np.testing.assert_array_equal(out["scaleOut"], rows / np.float32(448))
    deq = out["yOut"].astype(np.float64) * out["scaleOut"][:, None]
    assert_close(deq, x.astype(np.float64), atol=0, rtol=2**-4)  # e4m3 keeps 3 mantissa bits
    i4 = ref("DynamicQuant", x=x, yOut=np.zeros((4, 16), ml_dtypes.int4), scaleOut=np.zeros(4, np.float32))["yOut"]
    assert i4.astype(np.int64).max() == 7 or i4.astype(np.int64).min() == -7


def test_dynamic_quant_v2_asymmetric_maps_row_range_onto_int8(rng: np.random.Generator) -> None:
    x = rng.uniform(-1, 5, (4, 32)).astype(np.float16)
    out = ref("DynamicQuantV2", x=x, dstType=2, offsetOut=np.zeros(4, np.float32))
    y = out["yOut"].astype(np.int64)
    assert (y.max(axis=-1) == 127).all() and (y.min(axis=-1) == -128).all()
    deq = (y - out["offsetOut"][:, None]) * out["scaleOut"][:, None]
    assert np.abs(deq - x.astype(np.float64)).max() <= out["scaleOut"].max() * 0.51


def test_dynamic_quant_v2_group_index_selects_smooth_rows() -> None:
    x = np.ones((4, 8), np.float16)
    smooth = np.array([[1.0] * 8, [2.0] * 8], np.float16)
    smooth[1, 0] = 4.0
    out = ref(
        "DynamicQuantV2", x=x, smoothScalesOptional=smooth, groupIndexOptional=np.array([1, 4], np.int32), dstType=2
    )
    one, four = np.float32(1) / np.float32(127), np.float32(4) / np.float32(127)
    assert out["scaleOut"].tolist() == [one, four, four, four]
    assert out["yOut"][1].tolist() == [127] + [64] * 7  # 2 / (4/127) = 63.5 -> 64 (ties to even)


# ----------------------------------------------------------------------------- DynamicMxQuant vs OCP MX
def _ocp_mx_block(values: list[float], emax: int, elem: np.dtype, elem_max: float) -> tuple[int, list[float]]:
    """OCP MX v1.0 section 6.3, written from the spec: X = 2^(floor(log2(max|V|)) - emax), P = clamp(V / X)."""
    amax = max(abs(v) for v in values)
    if math.isnan(amax) or math.isinf(amax):
        return 0xFF, [math.nan] * len(values)
    if amax == 0:
        shared = -127
    else:
        _mantissa, exponent = math.frexp(amax)  # amax = mantissa * 2^exponent, mantissa in [0.5, 1)
        shared = max(-127, min(127, exponent - 1 - emax))
    x = 2.0**shared
    quantised = []
    for v in values:
        p = min(max(v / x, -elem_max), elem_max)  # clamping normal numbers
        quantised.append(float(np.array(p).astype(elem).astype(np.float64)))  # round to nearest even
    return shared + 127, quantised


@pytest.mark.parametrize(
    "dst,elem,emax,top",
    [
        (36, ml_dtypes.float8_e4m3fn, 8, 448.0),
        (35, ml_dtypes.float8_e5m2, 15, 57344.0),
        (40, ml_dtypes.float4_e2m1fn, 2, 6.0),
    ],
)
def test_dynamic_mx_quant_matches_an_independent_ocp_implementation(dst, elem, emax, top) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((3, 70)) * np.exp2(rng.integers(-8, 9, (3, 1)))).astype(np.float32)
    x[1, 32:64] = 0.0  # a zero block
    x[2, 5] = 2.0**-130  # a subnormal-only region does not break the scale
    out = ref("DynamicMxQuant", x=x, axis=-1, dstType=dst, blocksize=32, scaleAlg=0)
    y, scales = out["yOut"].astype(np.float64), out["mxscaleOut"].view(np.uint8)
    assert scales.shape == (3, 2, 2)  # ceil(ceil(70/32)/2) = 2 pairs
    for r in range(3):
        for b in range(3):
            block = [float(v) for v in x[r, 32 * b : 32 * b + 32]]
            code, q = _ocp_mx_block(block, emax, elem, top)
            assert scales[r, b // 2, b % 2] == code
            np.testing.assert_array_equal(y[r, 32 * b : 32 * b + len(block)], q)
        assert scales[r, 1, 1] == 0  # padding scale


def test_dynamic_mx_quant_documented_example() -> None:
    x = np.array([[0, 8, 64, 512]], ml_dtypes.bfloat16)
    out = ref("DynamicMxQuant", x=x, axis=-1, roundModeOptional="rint", dstType=36, blocksize=32, scaleAlg=0)
    assert out["yOut"].view(np.uint8).tolist() == [[0, 72, 96, 120]]
    assert out["mxscaleOut"].view(np.uint8).tolist() == [[[128, 0]]]


def test_dynamic_mx_quant_non_tail_axis_interleaves_pairs_of_blocks() -> None:
    x = np.ones((128, 2), np.float32)
    for b in range(4):
        x[32 * b : 32 * b + 32, 0] = 2.0**b
    scales = ref("DynamicMxQuant", x=x, axis=0, dstType=36, blocksize=32, scaleAlg=0)["mxscaleOut"].view(np.uint8)
    assert scales.shape == (2, 2, 2)
    for b in range(4):  # block b of column 0 sits at [b // 2, 0, b % 2]: 2^b -> shared exponent b - 8
        assert scales[b // 2, 0, b % 2] == 127 + b - 8


def test_dynamic_mx_quant_special_blocks_and_scale_alg_1() -> None:
    x = np.zeros((1, 64), np.float32)
    x[0, 3] = np.nan
    x[0, 40:] = 3 * 448.0
    out = ref("DynamicMxQuant", x=x, axis=-1, dstType=36, blocksize=32, scaleAlg=1)
    codes = out["mxscaleOut"].view(np.uint8)
    assert codes[0, 0, 0] == 0xFF and np.isnan(out["yOut"][0, :32].astype(np.float64)).all()
    assert codes[0, 0, 1] == 129  # amax/448 = 3 -> exponent 1 with a mantissa -> rounded up to 2^2
    assert out["yOut"][0, 40].astype(np.float64) == 320.0  # 1344 / 4 = 336, a tie between 320 and 352: even


# ----------------------------------------------------------------------------- quantised matmuls
def _int_mm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """PyTorch's integer matmul in int32."""
    return (torch.from_numpy(a.astype(np.int32)) @ torch.from_numpy(b.astype(np.int32))).numpy().astype(np.float64)


def test_quant_matmul_v3_matches_torch_int32_matmul(rng: np.random.Generator) -> None:
    a, b = rng.integers(-128, 128, (5, 64)).astype(np.int8), rng.integers(-128, 128, (64, 7)).astype(np.int8)
    scale = rng.uniform(1e-4, 1e-3, 7).astype(np.float32)
    bias = rng.integers(-1000, 1000, 7).astype(np.int32)
    got = ref("QuantMatmulV3", x1=a, x2=b, scale=scale, offset=None, bias=bias, transposeX1=False, transposeX2=False)
    want = (_int_mm(a, b) + bias) * scale.astype(np.float64)
    assert got["out"].dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(got["out"], want.astype(ml_dtypes.bfloat16))
    packed = lowp.encode_packed_scale(scale).view(np.int64)
    off = rng.uniform(-5, 5, 7).astype(np.float32)
    out = ref(
        "QuantMatmulV3",
        x1=a.T.copy(),
        x2=b,
        scale=packed,
        offset=off,
        bias=None,
        transposeX1=True,
        transposeX2=False,
        out=np.zeros((5, 7), np.int8),
    )["out"]
    # TransQuantParam keeps the float32 scale's top 19 bits (sign, exponent, 10 mantissa bits): by hand, not
    # through lowp.decode_packed_scale, which the reference itself uses to read the scale
    truncated = (scale.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)
    np.testing.assert_array_equal(out, np.clip(np.rint(_int_mm(a, b) * truncated + off), -128, 127))


def test_quant_matmul_v4_per_token_and_int4(rng: np.random.Generator) -> None:
    a, b = rng.integers(-128, 128, (2, 3, 32)).astype(np.int8), rng.integers(-128, 128, (8, 32)).astype(np.int8)
    scale = rng.uniform(1e-3, 1e-2, 8).astype(np.float32)
    token = rng.uniform(0.5, 2, 3).astype(np.float32)
    bias = rng.standard_normal(8).astype(np.float32)
    got = ref(
        "QuantMatmulV4",
        x1=a,
        x2=b,
        scale=scale,
        offset=None,
        pertokenScaleOptional=token,
        bias=bias,
        transposeX1=False,
        transposeX2=True,
    )["out"]
    want = _int_mm(a, b.T) * scale * token[:, None] + bias
    assert_close(got.astype(np.float64), want.astype(ml_dtypes.bfloat16).astype(np.float64), atol=0, rtol=0)
    q1, q2 = rng.integers(-8, 8, (4, 16)), rng.integers(-8, 8, (16, 6))
    packed = lowp.encode_packed_scale(np.full(6, 0.5))
    got = ref(
        "QuantMatmulV4",
        x1=q1.astype(ml_dtypes.int4),
        x2=q2.astype(ml_dtypes.int4),
        scale=packed.view(np.int64),
        offset=None,
        pertokenScaleOptional=None,
        bias=None,
        transposeX1=False,
        transposeX2=False,
    )["out"]
    np.testing.assert_array_equal(got, (_int_mm(q1, q2) * 0.5).astype(np.float16))


def test_quant_matmul_v5_mx_matches_blockwise_dequantisation(rng: np.random.Generator) -> None:
    m, k, n = 3, 96, 4
    a = rng.uniform(-6, 6, (m, k)).astype(ml_dtypes.float8_e4m3fn)
    b = rng.uniform(-6, 6, (k, n)).astype(ml_dtypes.float8_e5m2)
    s1 = rng.integers(120, 135, (m, 2, 2)).astype(np.uint8)
    s2 = rng.integers(120, 135, (2, n, 2)).astype(np.uint8)
    out = ref(
        "QuantMatmulV5",
        x1=a,
        x2=b,
        x1Scale=lowp.e8m0_array(s1),
        x2Scale=lowp.e8m0_array(s2),
        yScale=None,
        x1Offset=None,
        x2Offset=None,
        yOffset=None,
        bias=None,
        transposeX1=False,
        transposeX2=False,
        groupSize=quant.MX_GROUP,
        out=np.zeros((m, n), np.float32),
    )["out"]
    want = np.zeros((m, n))
    for i in range(m):
        for j in range(n):
            for kk in range(k):
                blk = kk // 32  # scale of block blk: pair blk // 2, slot blk % 2
                sa = 2.0 ** (int(s1[i, blk // 2, blk % 2]) - 127)
                sb = 2.0 ** (int(s2[blk // 2, j, blk % 2]) - 127)
                want[i, j] += float(a[i, kk]) * sa * float(b[kk, j]) * sb
    assert_close(out, want.astype(np.float32), atol=0, rtol=1e-6)


def test_quant_matmul_v5_float8_per_token(rng: np.random.Generator) -> None:
    a = rng.uniform(-8, 8, (3, 16)).astype(ml_dtypes.float8_e4m3fn)
    b = rng.uniform(-8, 8, (16, 5)).astype(ml_dtypes.float8_e4m3fn)
    s1, s2 = rng.uniform(0.5, 2, 3).astype(np.float32), rng.uniform(0.5, 2, 5).astype(np.float32)
    out = ref(
        "QuantMatmulV5",
        x1=a,
        x2=b,
        x1Scale=s1,
        x2Scale=s2,
        yScale=None,
        x1Offset=None,
        x2Offset=None,
        yOffset=None,
        bias=None,
        transposeX1=False,
        transposeX2=False,
        groupSize=0,
        out=np.zeros((3, 5), np.float32),
    )["out"]
    ta = torch.from_numpy(a.astype(np.float32)).to(torch.float8_e4m3fn).double()
    tb = torch.from_numpy(b.astype(np.float32)).to(torch.float8_e4m3fn).double()
    want = (ta @ tb * torch.from_numpy(s2).double() * torch.from_numpy(s1).double()[:, None]).float().numpy()
    np.testing.assert_array_equal(out, want)


def test_weight_quant_batch_matmul_v2_per_channel_and_per_group(rng: np.random.Generator) -> None:
    x = rng.uniform(-1, 1, (4, 64)).astype(np.float16)
    w = rng.integers(-128, 128, (64, 6)).astype(np.int8)
    scale = rng.uniform(0.01, 0.02, 6).astype(np.float16)
    offset = rng.uniform(-3, 3, 6).astype(np.float16)
    none = {"quantScaleOptional": None, "quantOffsetOptional": None, "biasOptional": None}
    got = ref(
        "WeightQuantBatchMatmulV2",
        x=x,
        weight=w,
        antiquantScale=scale,
        antiquantOffsetOptional=offset,
        antiquantGroupSize=0,
        **none,
    )["y"]
    deq = (torch.from_numpy(w).double() + torch.from_numpy(offset).double()) * torch.from_numpy(scale).double()
    want = (torch.from_numpy(x).double() @ deq).half().numpy()
    np.testing.assert_array_equal(got, want)
    w4 = rng.integers(-8, 8, (64, 6))
    gscale = rng.uniform(0.05, 0.1, (2, 6)).astype(np.float16)
    got = ref(
        "WeightQuantBatchMatmulV2",
        x=x,
        weight=w4.astype(ml_dtypes.int4),
        antiquantScale=gscale,
        antiquantOffsetOptional=None,
        antiquantGroupSize=32,
        **none,
    )["y"]
    deq = w4 * np.repeat(gscale.astype(np.float64), 32, axis=0)
    assert_close(got, (x.astype(np.float64) @ deq).astype(np.float16).astype(np.float64), atol=0, rtol=0)


def test_weight_quant_int8_output(rng: np.random.Generator) -> None:
    x = rng.uniform(-1, 1, (2, 32)).astype(np.float16)
    w = rng.integers(-128, 128, (32, 4)).astype(np.int8)
    scale = np.full(4, 0.01, np.float16)
    got = ref(
        "WeightQuantBatchMatmulV2",
        x=x,
        weight=w,
        antiquantScale=scale,
        antiquantOffsetOptional=None,
        quantScaleOptional=lowp.encode_packed_scale(np.full(4, 8.0)),
        quantOffsetOptional=np.full(4, 1.0, np.float32),
        biasOptional=None,
        antiquantGroupSize=0,
    )["y"]
    acc = x.astype(np.float64) @ (w * scale.astype(np.float64))
    np.testing.assert_array_equal(got, np.clip(np.rint(acc * 8 + 1), -128, 127).astype(np.int8))


def test_quant_error_codes() -> None:
    x = np.ones((2, 64), ml_dtypes.bfloat16)
    assert _code("DynamicMxQuant", x=x, axis=-1, dstType=41, blocksize=32, scaleAlg=0) == 161002
    assert (
        _code(
            "AscendQuantV3",
            x=np.ones((2, 8), np.float32),
            scale=np.ones(8, np.float32),
            offset=None,
            sqrtMode=False,
            roundMode="hybrid",
            dstType=34,
            axis=-1,
        )
        == 161002
    )
    assert (
        _code(
            "QuantMatmulV3",
            x1=None,
            x2=np.ones((2, 2), np.int8),
            scale=np.ones(1, np.float32),
            offset=None,
            bias=None,
            transposeX1=False,
            transposeX2=False,
        )
        == 161001
    )

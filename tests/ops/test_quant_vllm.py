"""The quantisation operators vllm-ascend reaches, against PyTorch CPU expressions of the same math,
hand-computed cases and the family's own proven ops (DynamicMxQuant, QuantMatmulV3)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

from acl_core import eager, lowp
from acl_core.dtypes import DataType as D
from acl_core.spec.ops import quant_vllm
from tests.conftest import assert_close
from tests.ops.torch_ref import check_samples_and_errors, ref, to_torch

F32 = torch.float32


def _int(t: torch.Tensor, lo: int, hi: int) -> np.ndarray:
    """torch.round is half to even; saturate, NaN to 0."""
    return torch.nan_to_num(torch.round(t.double()), nan=0.0).clamp(lo, hi).to(torch.int64).numpy()


@pytest.mark.parametrize("spec", quant_vllm.SPECS, ids=lambda s: s.name)
def test_conformance_samples_run_and_error_samples_fail_as_declared(spec) -> None:  # type: ignore[no-untyped-def]
    check_samples_and_errors(spec, 7)


# ----------------------------------------------------------------------------- Quantize
@pytest.mark.parametrize("dst", [D.ACL_INT8, D.ACL_UINT8, D.ACL_INT32])
def test_quantize_matches_torch_quantize_per_channel(dst: D, rng: np.random.Generator) -> None:
    # power-of-two scales divide exactly, so torch's round(x / s) + zp equals round(x / s + zp) off ties
    x = rng.uniform(-40, 40, (6, 16)).astype(np.float32)
    scales = (2.0 ** rng.integers(-3, 3, 16)).astype(np.float32)
    zp = rng.integers(0, 20, 16).astype(np.int32)
    got = ref("Quantize", x=x, scales=scales, zeroPoints=zp, dtype=dst, axis=1)["out"]
    qtype = {D.ACL_INT8: torch.qint8, D.ACL_UINT8: torch.quint8, D.ACL_INT32: torch.qint32}[dst]
    q = torch.quantize_per_channel(
        torch.from_numpy(x), torch.from_numpy(scales).double(), torch.from_numpy(zp).long(), 1, qtype
    )
    np.testing.assert_array_equal(got, q.int_repr().numpy())


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32], ids=lambda d: np.dtype(d).name)
def test_quantize_is_the_golden_float32_expression(dtype: type, rng: np.random.Generator) -> None:
    x = rng.uniform(-6, 6, (3, 5, 8)).astype(dtype)
    scales = rng.uniform(0.01, 0.2, 5).astype(dtype)
    zp = rng.uniform(-3, 3, 5).astype(np.float32 if dtype == np.float32 else np.int8)
    if dtype == ml_dtypes.bfloat16:
        zp = zp.astype(ml_dtypes.bfloat16)
    got = ref("Quantize", x=x, scales=scales, zeroPoints=zp, dtype=D.ACL_INT8, axis=-2)["out"]
    v = to_torch(x).float() / to_torch(scales).float()[:, None] + to_torch(zp).float()[:, None]
    np.testing.assert_array_equal(got, _int(v, -128, 127))


def test_quantize_hand_computed_ties_and_float8() -> None:
    x = np.array([2.5, -2.5, 0.5, 1000.0, np.nan], np.float32)
    one = np.ones(1, np.float32)
    out = ref("Quantize", x=x, scales=one, zeroPoints=np.ones(1, np.int32), dtype=D.ACL_INT32, axis=0)["out"]
    assert out.tolist() == [4, -2, 2, 1001, 0]  # 3.5 -> 4, -1.5 -> -2, 1.5 -> 2 (half to even), NaN -> 0
    e4 = ref("Quantize", x=x, scales=one, zeroPoints=None, dtype=D.ACL_FLOAT8_E4M3FN, axis=0)["out"]
    assert e4.astype(np.float32)[:3].tolist() == [2.5, -2.5, 0.5] and np.isnan(e4.astype(np.float32)[3:]).all()
    e5 = ref("Quantize", x=x * 100, scales=one, zeroPoints=None, dtype=D.ACL_FLOAT8_E5M2, axis=0)["out"]
    want = torch.from_numpy(np.nan_to_num(np.clip(x * 100, -57344, 57344), nan=0.0)).to(torch.float8_e5m2)
    assert e5.astype(np.float32).tolist() == want.float().tolist()  # 1e5 saturates to 57344, NaN to 0


# ----------------------------------------------------------------------------- TransQuantParamV2
def test_trans_quant_param_v2_bits_by_hand() -> None:
    scale = np.array([1.0, -0.1, 3.0], np.float32)
    offset = np.array([2.5, -300.0, 7.4], np.float32)
    out = ref("TransQuantParamV2", scale=scale, offset=offset)["out"]
    bits = scale.view(np.uint32).astype(np.uint64) & np.uint64(0xFFFFE000)
    offsets = np.array([2, -256, 7]) & 0x1FF  # 2.5 -> 2 (half to even), -300 clipped to -256
    want = bits | np.uint64(1 << 46) | (offsets.astype(np.uint64) << np.uint64(37))
    np.testing.assert_array_equal(out, want)
    assert lowp.decode_packed_offset(out).tolist() == [2, -256, 7]
    np.testing.assert_array_equal(lowp.decode_packed_scale(out), (bits.astype(np.uint32)).view(np.float32))


def test_trans_quant_param_v2_feeds_quant_matmul_as_encode_packed_scale(rng: np.random.Generator) -> None:
    """The packed words QuantMatmulV3 decodes: TransQuantParamV2's equal the family's encoder (one codec)."""
    scale = rng.uniform(1e-3, 1e-2, 8).astype(np.float32)
    packed = ref("TransQuantParamV2", scale=scale, offset=None)["out"]
    np.testing.assert_array_equal(packed, lowp.encode_packed_scale(scale))
    x1 = rng.integers(-100, 100, (4, 32)).astype(np.int8)
    x2 = rng.integers(-100, 100, (32, 8)).astype(np.int8)
    args = {"x1": x1, "x2": x2, "offset": None, "bias": None, "transposeX1": False, "transposeX2": False}
    got = ref("QuantMatmulV3", scale=packed, **args)["out"]
    truncated = (scale.view(np.uint32) & 0xFFFFE000).view(np.float32)
    want = (x1.astype(np.float64) @ x2.astype(np.float64)) * truncated
    assert_close(got.astype(np.float32), want.astype(np.float16).astype(np.float32))


# ----------------------------------------------------------------------------- DynamicBlockQuant
def _torch_block_quant(x: torch.Tensor, rb: int, cb: int, top: float, min_scale: float) -> tuple:
    m, n = x.shape[-2:]
    pm, pn = -(-m // rb) * rb, -(-n // cb) * cb
    padded = torch.zeros((*x.shape[:-2], pm, pn), dtype=F32)
    padded[..., :m, :n] = x.float().abs()
    blocks = padded.reshape(*x.shape[:-2], pm // rb, rb, pn // cb, cb).amax(dim=(-3, -1))
    scale = blocks / torch.tensor(top, dtype=F32)
    cap = torch.tensor(1.0, dtype=F32) / torch.tensor(min_scale, dtype=F32)
    scale = torch.where(torch.isfinite(scale), torch.minimum(scale, cap), scale)
    full = scale.repeat_interleave(rb, -2).repeat_interleave(cb, -1)[..., :m, :n]
    y = torch.where(full == 0, torch.zeros_like(full), x.float() / full)
    return y, scale


@pytest.mark.parametrize("rb, cb", [(1, 128), (128, 128), (128, 64), (256, 192)])
def test_dynamic_block_quant_int8_matches_torch(rb: int, cb: int, rng: np.random.Generator) -> None:
    x = rng.uniform(-5, 5, (2, 300, 200)).astype(ml_dtypes.bfloat16)
    x[0, :rb, :cb] = 0  # a zero block: scale 0, y 0
    args = {"minScale": 0.0, "dstType": 2, "rowBlockSize": rb, "colBlockSize": cb}
    got = ref("DynamicBlockQuant", x=x, **args)
    y, scale = _torch_block_quant(to_torch(x), rb, cb, 127.0, 0.0)
    np.testing.assert_array_equal(got["scaleOut"], scale.numpy())
    np.testing.assert_array_equal(got["yOut"], _int(y, -128, 127))
    assert got["scaleOut"][0, 0, 0] == 0 and not got["yOut"][0, :rb, :cb].any()


@pytest.mark.parametrize("code, torch_dtype", [(35, torch.float8_e5m2), (36, torch.float8_e4m3fn)])
def test_dynamic_block_quant_fp8_and_min_scale_match_torch(code: int, torch_dtype: torch.dtype) -> None:
    rng = np.random.default_rng(code)
    x = rng.uniform(-30, 30, (64, 256)).astype(np.float32)
    for min_scale in (0.0, 50.0):  # 50: the scale is capped at 1/50, so large elements saturate
        args = {"minScale": min_scale, "dstType": code, "rowBlockSize": 1, "colBlockSize": 64, "dstTypeMax": 0.0}
        got = ref("DynamicBlockQuantV2", x=x, **args)
        top = 448.0 if code == 36 else 57344.0
        y, scale = _torch_block_quant(torch.from_numpy(x), 1, 64, top, min_scale)
        np.testing.assert_array_equal(got["scaleOut"], scale.numpy())
        want = y.clamp(-top, top).to(torch_dtype).float().numpy()  # the kernel's saturating conversion
        np.testing.assert_array_equal(got["yOut"].astype(np.float32), want)
    assert (np.abs(got["yOut"].astype(np.float32)) == top).sum() > 64


def test_dynamic_block_quant_hifloat8_with_dst_type_max(rng: np.random.Generator) -> None:
    x = rng.uniform(-8, 8, (4, 128)).astype(np.float16)
    y = eager.empty(x.shape, D.ACL_HIFLOAT8, "reference")
    args = {"minScale": 0.0, "roundModeOptional": "round", "dstType": 34, "rowBlockSize": 1, "colBlockSize": 128}
    rest = eager.run("DynamicBlockQuantV2", "reference", x=x, dstTypeMax=224.0, yOut=y, **args)
    codes = np.frombuffer(y.storage_bytes()[: x.size], np.uint8).reshape(x.shape)
    scale = (np.abs(x.astype(np.float32)).max(axis=1) / np.float32(224.0)).astype(np.float32)
    np.testing.assert_array_equal(rest["scaleOut"][:, 0], scale)
    want = lowp.hifloat8_encode((x.astype(np.float32) / scale[:, None]).astype(np.float64))
    np.testing.assert_array_equal(codes, want)
    assert np.abs(lowp.hifloat8_decode(codes)).max() == 224.0


# ----------------------------------------------------------------------------- ClippedSwiglu
def _torch_clipped(a: torch.Tensor, b: torch.Tensor, alpha: float, limit: float, bias: float) -> torch.Tensor:
    f = [float(np.float32(v)) for v in (alpha, limit, bias)]
    a = a.double().clamp(max=f[1])
    b = b.double().clamp(-f[1], f[1])
    return a * torch.sigmoid(f[0] * a) * (b + f[2])


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32], ids=lambda d: np.dtype(d).name)
def test_clipped_swiglu_matches_torch(interleaved: bool, dtype: type, rng: np.random.Generator) -> None:
    x = rng.uniform(-12, 12, (5, 4, 64)).astype(dtype)
    args = {"dim": -1, "alpha": 1.702, "limit": 7.0, "bias": 1.0, "interleaved": interleaved}
    got = ref("ClippedSwiglu", x=x, groupIndexOptional=None, **args)["out"]
    t = to_torch(x)
    a, b = (t[..., 0::2], t[..., 1::2]) if interleaved else (t[..., :32], t[..., 32:])
    want = _torch_clipped(a, b, 1.702, 7.0, 1.0).to(t.dtype)
    np.testing.assert_array_equal(np.asarray(got, np.float32), want.float().numpy())


def test_clipped_swiglu_merges_the_axes_after_dim_and_drops_rows_past_the_groups(rng: np.random.Generator) -> None:
    x = rng.uniform(-3, 3, (6, 4, 3)).astype(np.float32)  # dim 1: pre 6, cut 4, after 3
    groups = np.array([2, 1, 1], np.int64)
    args = {"dim": 1, "alpha": 1.0, "limit": 2.0, "bias": 0.5}
    for interleaved in (False, True):
        got = ref("ClippedSwiglu", x=x, groupIndexOptional=groups, interleaved=interleaved, **args)["out"]
        merged = torch.from_numpy(x).reshape(6, 12)
        a, b = (merged[:, 0::2], merged[:, 1::2]) if interleaved else (merged[:, :6], merged[:, 6:])
        want = _torch_clipped(a, b, 1.0, 2.0, 0.5).float().reshape(6, 2, 3).numpy()
        want[4:] = 0  # sum(groups) = 4 rows computed
        np.testing.assert_array_equal(got, want)


# ----------------------------------------------------------------------------- DequantSwigluQuant
def _torch_dsq(x: torch.Tensor, ws: torch.Tensor | None, act: torch.Tensor | None, bias: torch.Tensor | None,
               qs: torch.Tensor | None, qo: torch.Tensor | None, dynamic: bool, top: float) -> tuple:  # fmt: skip
    """The golden's math for one group (rows of 2H), float32 like the golden, the SwiGLU in float64."""
    if x.dtype == torch.int32:
        xi = x + bias if bias is not None and bias.dtype == torch.int32 else x
        xf = xi.float() * ws
        if act is not None:
            xf = xf * act.reshape(-1, 1)
        if bias is not None and bias.dtype != torch.int32:
            xf = xf + bias.float()
    else:
        xf = x.float()
    h = xf.shape[-1] // 2
    g, lin = xf[:, :h].double(), xf[:, h:].double()
    y = (g / (1 + torch.exp(-g)) * lin).float()
    if not dynamic:
        return y / qs + (qo if qo is not None else 0), torch.zeros(y.shape[0])
    v = y * qs if qs is not None else y
    rowmax = v.abs().amax(dim=-1)
    scale = torch.where(rowmax > 0, rowmax / torch.tensor(top, dtype=F32), torch.ones_like(rowmax))
    return v / scale[:, None], scale


def test_dequant_swiglu_quant_int32_dynamic_with_groups_matches_torch(rng: np.random.Generator) -> None:
    x = rng.integers(-2000, 2000, (10, 64)).astype(np.int32)
    counts = np.array([4, 0, 3], np.int64)  # rows 7..9 are past the groups: zero
    ws = rng.uniform(1e-3, 1e-2, (3, 64)).astype(np.float32)
    act = rng.uniform(0.5, 1.5, 10).astype(np.float32)
    bias = rng.integers(-100, 100, 64).astype(np.int32)
    qs = rng.uniform(0.5, 2, (3, 32)).astype(np.float32)
    args = {"x": x, "weightScaleOptional": ws, "activationScaleOptional": act, "biasOptional": bias}
    args |= {"quantScaleOptional": qs, "quantOffsetOptional": None, "groupIndexOptional": counts}
    args |= {"activateLeft": True, "quantModeOptional": "dynamic"}
    got = ref("DequantSwigluQuant", **args)
    t = torch.from_numpy
    for g, (lo, hi) in ((0, (0, 4)), (2, (4, 7))):
        q, scale = _torch_dsq(t(x[lo:hi]), t(ws[g]), t(act[lo:hi]), t(bias), t(qs[g]), None, dynamic=True, top=127.0)
        np.testing.assert_array_equal(got["scaleOut"][lo:hi], scale.numpy())
        np.testing.assert_array_equal(got["yOut"][lo:hi], _int(q, -128, 127))
    assert not got["yOut"][7:].any() and not got["scaleOut"][7:].any()


@pytest.mark.parametrize("left", [True, False])
def test_dequant_swiglu_quant_static_bf16_matches_torch(left: bool, rng: np.random.Generator) -> None:
    x = rng.uniform(-4, 4, (2, 3, 48)).astype(ml_dtypes.bfloat16)
    qs, qo = np.array([0.03], np.float32), np.array([1.5], np.float32)
    args = {"x": x, "weightScaleOptional": None, "activationScaleOptional": None, "biasOptional": None}
    args |= {"quantScaleOptional": qs, "quantOffsetOptional": qo, "groupIndexOptional": None}
    got = ref("DequantSwigluQuant", **args, activateLeft=left, quantModeOptional=None)
    t = to_torch(x).reshape(6, 48)
    if not left:
        t = torch.cat([t[:, 24:], t[:, :24]], dim=1)
    q, _ = _torch_dsq(t, None, None, None, torch.from_numpy(qs), torch.from_numpy(qo), dynamic=False, top=127.0)
    np.testing.assert_array_equal(got["yOut"].reshape(6, 24), _int(q, -128, 127))
    assert not got["scaleOut"].any()  # static mode: scaleOut written with 0


@pytest.mark.parametrize("mode", [1, 2, 3])
def test_dequant_swiglu_quant_v2_clipped_modes_match_torch(mode: int, rng: np.random.Generator) -> None:
    x = rng.uniform(-10, 10, (4, 32)).astype(np.float16)
    args = {"x": x, "weightScaleOptional": None, "activationScaleOptional": None, "biasOptional": None}
    args |= {"quantScaleOptional": None, "quantOffsetOptional": None, "groupIndexOptional": None}
    args |= {"activateLeft": True, "quantModeOptional": "dynamic", "dstType": 36, "roundModeOptional": None}
    args |= {"activateDim": -1, "swigluMode": mode, "clampLimit": 3.0, "gluAlpha": 1.702, "gluBias": 1.0}
    got = ref("DequantSwigluQuantV2", **args)
    t = torch.from_numpy(x).float()
    g, lin = (t[:, 0::2], t[:, 1::2]) if mode == 1 else (t[:, :16], t[:, 16:])
    if mode == 3:
        gate = (g.double() * torch.sigmoid(g.double())).clamp(max=3.0)
        y = (gate * lin.double().clamp(-3.0, 3.0)).float()
    else:
        y = _torch_clipped(g, lin, 1.702, 3.0, 1.0).float()
    scale = y.abs().amax(dim=-1) / torch.tensor(448.0, dtype=F32)
    np.testing.assert_array_equal(got["scaleOut"], scale.numpy())
    want = (y / scale[:, None]).to(torch.float8_e4m3fn).float().numpy()
    np.testing.assert_array_equal(got["yOut"].astype(np.float32), want)


# ----------------------------------------------------------------------------- (Add)RmsNormDynamicMxQuant
@pytest.mark.parametrize("add", [False, True])
@pytest.mark.parametrize("code, alg", [(36, 0), (35, 1), (40, 0)])
def test_mx_norm_is_torch_rms_norm_then_dynamic_mx_quant(add: bool, code: int, alg: int) -> None:
    rng = np.random.default_rng(code + alg)
    x1 = rng.standard_normal((3, 5, 80)).astype(np.float16)
    x2 = rng.standard_normal((3, 5, 80)).astype(np.float16)
    gamma, beta = rng.uniform(0.5, 2, 80).astype(np.float32), rng.standard_normal(80).astype(np.float32)
    inputs = {"x1": x1, "x2": x2} if add else {"x": x1}
    args = {"gamma": gamma, "beta": beta, "epsilon": 1e-6, "scaleAlg": alg, "roundMode": "rint", "dstType": code}
    got = ref("AddRmsNormDynamicMxQuant" if add else "RmsNormDynamicMxQuant", **inputs, **args, outputRstd=True)
    x = torch.from_numpy(x1).double() + (torch.from_numpy(x2).double() if add else 0)
    y = torch.rms_norm(x, [80], torch.from_numpy(gamma).double(), eps=1e-6) + torch.from_numpy(beta).double()
    mx = ref("DynamicMxQuant", x=y.float().numpy(), axis=-1, dstType=code, blocksize=32, scaleAlg=alg)
    np.testing.assert_array_equal(got["mxscaleOut"].view(np.uint8), mx["mxscaleOut"].view(np.uint8))
    np.testing.assert_array_equal(got["yOut"].view(np.uint8), mx["yOut"].view(np.uint8))
    rstd = 1 / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    assert_close(got["rstdOut"], rstd.float().numpy())
    if add:
        np.testing.assert_array_equal(got["xOut"], x.half().numpy())


def test_mx_norm_blocks_holding_inf_or_nan_get_scale_255_and_zero_elements() -> None:
    x = np.ones((2, 64), np.float16)
    x[0, 3] = np.inf
    x[1, 40] = np.nan
    args = {"gamma": np.ones(64, np.float16), "beta": None, "epsilon": 1e-6, "scaleAlg": 0, "roundMode": "rint"}
    got = ref("RmsNormDynamicMxQuant", x=x, **args, dstType=36, outputRstd=True)
    codes = got["mxscaleOut"].view(np.uint8)
    # row 0: rstd = 0, y = x * 0: NaN at the Inf, 0 elsewhere; row 1: rstd NaN, every y NaN
    assert codes[0, 0].tolist() == [255, 0] and codes[1, 0].tolist() == [255, 255]
    assert not got["yOut"].astype(np.float32).any() and not np.isnan(got["yOut"].astype(np.float32)).any()
    assert got["rstdOut"][0, 0] == 0 and np.isnan(got["rstdOut"][1, 0])


# ----------------------------------------------------------------------------- FlatQuant
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("clip", [1.0, 0.8])
def test_flat_quant_matches_torch_kronecker_product(dtype: type, clip: float, rng: np.random.Generator) -> None:
    x = rng.uniform(-2, 2, (6, 8, 16)).astype(dtype)
    p1 = rng.uniform(-1, 1, (8, 8)).astype(dtype)
    p2 = rng.uniform(-1, 1, (16, 16)).astype(dtype)
    got = ref("FlatQuant", x=x, kroneckerP1=p1, kroneckerP2=p2, clipRatio=clip)
    # the Kronecker form: x'' as rows of N1*N2 is x's rows times kron(P1, P2ᵀ)ᵀ (row-major vec(A X B))
    kron = torch.kron(to_torch(p1).double(), to_torch(p2).double().T.contiguous())
    rows = to_torch(x).double().reshape(6, -1) @ kron.T
    xpp = rows.reshape(6, 8, 16).float()
    scale = xpp.abs().amax(dim=(1, 2)) / torch.tensor(7.0 / clip, dtype=F32)
    np.testing.assert_array_equal(got["quantScale"], scale.numpy())
    q = _int(xpp / scale[:, None, None], -8, 7)
    np.testing.assert_array_equal(lowp.unpack_int32_to_int4(got["out"]), q)

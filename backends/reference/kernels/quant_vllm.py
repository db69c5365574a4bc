"""Reference kernels of the quantisation operators vllm-ascend reaches (rules: :mod:`acl_core.spec.ops.quant_vllm`).

Quantisation arithmetic runs in FLOAT32 as the quant family's references do; SwiGLU, RmsNorm and the
Kronecker products are float64, rounded once to FLOAT32 before they are quantised; float outputs
(ClippedSwiglu) are float64 rounded once into the output dtype.
"""

from __future__ import annotations

import numpy as np

from acl_core import lowp
from acl_core.dtypes import DataType as D
from acl_core.spec.ops.quant_vllm import MX_BLOCK, group_param_rows
from acl_core.tensor import AclTensor
from acl_reference.call import RefCall
from acl_reference.kernels import kernel
from acl_reference.kernels.norm import rms_rstd
from acl_reference.kernels.quant import _along, mx_shared_codes, store_quantised
from acl_reference.lowp_io import write_float

Array = np.ndarray
F32 = np.float32


def _present(k: RefCall, name: str) -> bool:
    return isinstance(k.args.get(name), AclTensor)


def _f32(value: float) -> np.float64:
    """A double attribute as the FLOAT32 the kernels compute with (as float64)."""
    return np.float64(np.float32(value))


def store_saturating_int(k: RefCall, name: str, values: Array) -> None:
    """Round half to even and saturate into output ``name``'s integer type (INT8, UINT8, INT32; NaN to 0)."""
    lo, hi = {D.ACL_INT8: (-128, 127), D.ACL_UINT8: (0, 255), D.ACL_INT32: (-(2**31), 2**31 - 1)}[k.dtype(name)]
    rounded = np.rint(np.nan_to_num(np.asarray(values, np.float64), nan=0.0))
    k.write(name, np.clip(rounded, lo, hi))


# ----------------------------------------------------------------------------- Quantize
@kernel("Quantize")
def quantize(k: RefCall) -> None:
    """out = round(x / scales + zeroPoints) in FLOAT32, into dtype."""
    x = k.read("x", F32)
    axis = k.plan["axis"]
    with np.errstate(all="ignore"):
        value = x / _along(k.read("scales", F32), x.ndim, axis)
        if _present(k, "zeroPoints"):
            value = value + _along(k.read("zeroPoints", F32), x.ndim, axis)
    value = value.astype(np.float64)
    dst: D = k.plan["dst"]
    if dst in (D.ACL_INT8, D.ACL_UINT8, D.ACL_INT32):
        store_saturating_int(k, "out", value)
    elif dst == D.ACL_FLOAT8_E5M2:  # the golden: clip to ±57344, NaN to 0, then round
        clipped = np.nan_to_num(np.clip(value, -57344.0, 57344.0), nan=0.0)
        write_float(k, "out", lowp.round_to_float(clipped, dst, "rint", saturate=True))
    elif dst == D.ACL_FLOAT8_E4M3FN:  # ml_dtypes: overflow and Inf become NaN
        write_float(k, "out", lowp.round_to_float(value, dst, "rint", saturate=False))
    else:  # HiFloat8: ties away from zero, overflow to Inf
        write_float(k, "out", lowp.hifloat8_round(value))


# ----------------------------------------------------------------------------- TransQuantParamV2
@kernel("TransQuantParamV2")
def trans_quant_param_v2(k: RefCall) -> None:
    """out = (scale bits & 0xFFFFE000) | 1 << 46, and round(offset) clipped to [-256, 255] in bits 37..45."""
    shape = k["out"].view_dims
    scale = np.broadcast_to(k.read("scale", F32), shape)
    offset = np.broadcast_to(k.read("offset", F32), shape) if _present(k, "offset") else None
    words = lowp.encode_packed_param(scale, offset)
    k.write("out", words.view(np.int64) if k.dtype("out") == D.ACL_INT64 else words)


# ----------------------------------------------------------------------------- DynamicBlockQuant(V2)
@kernel("DynamicBlockQuantV2")
def dynamic_block_quant(k: RefCall) -> None:
    """Per block: scale = min(amax / dtypeMax, 1 / minScale) in FLOAT32; y = x / scale, saturated into dstType."""
    x = k.read("x", F32)
    rb, cb = k.plan["block"]
    dst: D = k.plan["dst"]
    top = F32(k.plan["dst_max"])
    with np.errstate(divide="ignore"):
        cap = F32(1.0) / F32(k.value("minScale"))
    lead, (m, n) = x.shape[:-2], x.shape[-2:]
    mb, nb = -(-m // rb), -(-n // cb)
    padded = np.zeros((*lead, mb * rb, nb * cb), F32)
    padded[..., :m, :n] = np.abs(x)
    tiles = padded.reshape(*lead, mb, rb, nb, cb)
    amax = np.max(tiles, axis=(-3, -1))  # NaN propagates, as the kernel's bitwise maximum
    with np.errstate(all="ignore"):
        scale = (amax / top).astype(F32)
        scale = np.where(scale < np.inf, np.minimum(scale, cap), scale).astype(F32)
        full = np.repeat(np.repeat(scale, rb, axis=-2), cb, axis=-1)[..., :m, :n]
        y = np.where(full == 0, F32(0), x / full).astype(np.float64)
    k.write("scaleOut", scale)
    if dst == D.ACL_INT8:
        store_saturating_int(k, "yOut", y)
    else:
        write_float(k, "yOut", lowp.round_to_float(y, dst, str(k.plan["mode"]), saturate=True))


# ----------------------------------------------------------------------------- SwiGLU variants
def clipped_swiglu_values(a: Array, b: Array, alpha: float, limit: float, bias: float) -> Array:
    """min(a, limit)·sigmoid(alpha·min(a, limit))·(clip(b, ±limit) + bias) in float64."""
    with np.errstate(all="ignore"):
        a = np.minimum(a, limit)
        b = np.clip(b, -limit, limit)
        return a / (1.0 + np.exp(-alpha * a)) * (b + bias)


@kernel("ClippedSwiglu")
def clipped_swiglu(k: RefCall) -> None:
    """out = A·sigmoid(alpha·A)·(B + bias) over the halves (or even/odd elements) of the merged split axis."""
    x = k.read("x", np.float64)
    rows, axis = int(k.plan["rows"]), int(k.plan["axis"])
    xm = x.reshape(rows, int(np.prod(x.shape[axis:], dtype=np.int64)))
    if k.value("interleaved"):
        a, b = xm[:, 0::2], xm[:, 1::2]
    else:
        h = xm.shape[1] // 2
        a, b = xm[:, :h], xm[:, h:]
    alpha, limit, bias = (_f32(k.value(n)) for n in ("alpha", "limit", "bias"))
    y = clipped_swiglu_values(a, b, alpha, limit, bias)
    if _present(k, "groupIndexOptional"):
        counts = np.maximum(k.read("groupIndexOptional").astype(np.int64), 0)
        valid = min(int(counts.sum()), rows)
        y[valid:] = 0.0  # rows past sum(groupIndex): not computed by CANN, zero here
    k.write("out", y.reshape(k["out"].view_dims))


def _group_rows(k: RefCall, rows: int) -> tuple[Array, int]:
    """Each row's group (``groups`` for rows past the counts' sum) and the number of groups."""
    if not _present(k, "groupIndexOptional"):
        return np.zeros(rows, np.int64), 1
    counts = np.maximum(k.read("groupIndexOptional").astype(np.int64).reshape(-1), 0)
    ends = np.cumsum(counts)
    return np.searchsorted(ends, np.arange(rows), side="right"), counts.size


def _per_row(k: RefCall, name: str, group: Array, groups: int, quant: bool) -> Array | None:
    """Parameter ``name`` resolved for every row (rows, width) as the golden resolves it (None: absent)."""
    if not _present(k, name):
        return None
    t = k[name]
    values = k.read(name)
    g = np.minimum(group, groups - 1)
    how = group_param_rows(t, groups) if quant else ("row" if values.ndim == 2 else "whole")
    if how == "row":
        return values[g] if values.shape[0] > 1 else np.broadcast_to(values[0], (group.size, values.shape[1]))
    if how == "group":
        return values[g][:, None]
    return np.broadcast_to(values.reshape(1, -1), (group.size, values.size))


def _swiglu(k: RefCall, xf: Array) -> Array:
    """The SwiGLU of swigluMode over float32 dequantised rows, in float64."""
    mode, half = int(k.plan["swiglu"]), xf.shape[1] // 2
    x = xf.astype(np.float64)
    if mode == 1:
        glu, lin = x[:, 0::2], x[:, 1::2]
    elif k.plan["left"]:
        glu, lin = x[:, :half], x[:, half:]
    else:
        glu, lin = x[:, half:], x[:, :half]
    limit, alpha, bias = (_f32(k.value(n)) for n in ("clampLimit", "gluAlpha", "gluBias"))
    with np.errstate(all="ignore"):
        if mode == 0:
            return glu / (1.0 + np.exp(-glu)) * lin
        if mode in (1, 2):
            return clipped_swiglu_values(glu, lin, alpha, limit, bias)
        gate = np.minimum(glu / (1.0 + np.exp(-glu)), limit)
        return gate * np.clip(lin, -limit, limit)


@kernel("DequantSwigluQuantV2")
def dequant_swiglu_quant(k: RefCall) -> None:
    """Dequantise (FLOAT32), SwiGLU (float64, rounded to FLOAT32), quantise statically or dynamically (FLOAT32)."""
    x = k.read("x")
    rows, width = int(k.plan["rows"]), x.shape[-1]
    x2 = x.reshape(rows, width)
    group, groups = _group_rows(k, rows)
    with np.errstate(all="ignore"):
        if k.dtype("x") == D.ACL_INT32:
            bias = _per_row(k, "biasOptional", group, groups, quant=False)
            xi = x2.astype(np.int32)
            if bias is not None and k.dtype("biasOptional") == D.ACL_INT32:
                xi = xi + bias.astype(np.int32)  # int32 arithmetic, wrapping as the golden's
            ws = _per_row(k, "weightScaleOptional", group, groups, quant=False)
            assert ws is not None  # the rules require it for an int32 x
            xf = xi.astype(F32) * ws.astype(F32)
            if _present(k, "activationScaleOptional"):
                xf = xf * k.read("activationScaleOptional", F32).reshape(rows, 1)
            if bias is not None and k.dtype("biasOptional") != D.ACL_INT32:
                xf = xf + bias.astype(F32)
        else:
            xf = x2.astype(F32)
        y = _swiglu(k, xf).astype(F32)
        qs = _per_row(k, "quantScaleOptional", group, groups, quant=True)
        qo = _per_row(k, "quantOffsetOptional", group, groups, quant=True)
        if k.plan["mode"] == "static":
            value = y / qs.astype(F32) if qs is not None else y
            if qo is not None:
                value = value + qo.astype(F32)
            scale = np.zeros(rows, F32)
        else:
            value = y * qs.astype(F32) if qs is not None else y
            rowmax = np.max(np.abs(value), axis=-1) if value.shape[-1] else np.zeros(rows, F32)
            scale = np.where(rowmax > 0, rowmax / F32(k.plan["dst_max"]), F32(1.0)).astype(F32)
            value = value / scale[:, None]
    wide: Array = value.astype(np.float64)
    outside = group >= groups  # rows past the groups' counts: zero
    wide[outside] = 0.0
    scale[outside] = 0.0
    k.write("scaleOut", scale.reshape(k["scaleOut"].view_dims))
    shape = k["yOut"].view_dims
    dst: D = k.plan["dst"]
    if dst == D.ACL_INT8:
        store_saturating_int(k, "yOut", wide.reshape(shape))
    elif dst == D.ACL_HIFLOAT8:
        write_float(k, "yOut", lowp.hifloat8_round(wide).reshape(shape))
    else:  # FLOAT8 as ml_dtypes converts (overflow NaN / Inf); FLOAT4 saturates, NaN to 0
        q = lowp.round_to_float(wide, dst, "rint", saturate=dst == D.ACL_FLOAT4_E2M1)
        write_float(k, "yOut", q.reshape(shape))


# ----------------------------------------------------------------------------- (Add)RmsNormDynamicMxQuant
@kernel("RmsNormDynamicMxQuant", "AddRmsNormDynamicMxQuant")
def rms_norm_dynamic_mx_quant(k: RefCall) -> None:
    """y = x·rstd·gamma + beta (float64, rounded to FLOAT32); MX blocks of 32 along the last dim (NaN blocks: 0)."""
    add = "x1" in k.args
    with np.errstate(all="ignore"):
        x = k.read("x1", np.float64) + k.read("x2", np.float64) if add else k.read("x", np.float64)
    if add:
        k.write("xOut", x)
    rstd = rms_rstd(x, (x.ndim - 1,), float(k.value("epsilon")))
    with np.errstate(all="ignore"):
        y = x * rstd * k.read("gamma", np.float64)
        if _present(k, "beta"):
            y = y + k.read("beta", np.float64)
    y = y.astype(F32).astype(np.float64)
    if k["rstdOut"] is not None and k.value("outputRstd"):
        k.write("rstdOut", rstd)
    dst: D = k.plan["dst"]
    n = y.shape[-1]
    blocks = -(-n // MX_BLOCK)
    padded = np.zeros((*y.shape[:-1], blocks * MX_BLOCK))
    padded[..., :n] = y
    tiles = padded.reshape(*y.shape[:-1], blocks, MX_BLOCK)
    amax = np.max(np.abs(tiles), axis=-1) if tiles.size else np.zeros(tiles.shape[:-1])
    codes = mx_shared_codes(amax, dst, int(k.plan["alg"]))
    with np.errstate(all="ignore"):
        q = tiles / lowp.e8m0_decode(codes)[..., None]
    q = np.where((codes == lowp.E8M0_NAN)[..., None], 0.0, q)  # the documents: such blocks' y is 0
    q = lowp.round_to_float(q, dst, str(k.plan["mode"]), saturate=True)
    write_float(k, "yOut", q.reshape(padded.shape)[..., :n])
    pairs = -(-blocks // 2)
    scales = np.zeros((*codes.shape[:-1], pairs * 2), dtype=np.uint8)  # the even pad is code 0
    scales[..., :blocks] = codes
    k.write("mxscaleOut", lowp.e8m0_array(scales.reshape(*codes.shape[:-1], pairs, 2)))


# ----------------------------------------------------------------------------- FlatQuant
@kernel("FlatQuant")
def flat_quant(k: RefCall) -> None:
    """x'' = P1 @ x[m] @ P2 (float64, rounded to FLOAT32); scale = max|x''[m]| / (7 / clipRatio); int4 out."""
    x = k.read("x", np.float64)
    p1, p2 = k.read("kroneckerP1", np.float64), k.read("kroneckerP2", np.float64)
    xpp = np.matmul(p1, np.matmul(x, p2)).astype(F32)
    with np.errstate(all="ignore"):
        amax = np.max(np.abs(xpp), axis=(1, 2)) if xpp.size else np.zeros(x.shape[0], F32)
        scale = (amax / F32(k.plan["dst_max"])).astype(F32)
        q = np.where(scale[:, None, None] == 0, F32(0), xpp / scale[:, None, None])
    k.write("quantScale", scale)
    store_quantised(k, "out", q.astype(np.float64), "round", saturate_float=True)

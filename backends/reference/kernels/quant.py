"""Reference kernels of the quantisation family (see :mod:`acl_core.spec.ops.quant` for the rules).

Quantisation arithmetic runs in FLOAT32 as CANN's kernels and goldens do; matrix products are exact
(integer and 8-bit float products summed in float64), dequantisation and outputs are computed in
float64 and rounded once into the output type.
"""

from __future__ import annotations

import numpy as np

from acl_core import lowp
from acl_core.dtypes import DataType as D
from acl_core.tensor import AclTensor
from acl_reference.call import RefCall
from acl_reference.kernels import kernel
from acl_reference.lowp_io import read_float, write_float

Array = np.ndarray
FP8 = (D.ACL_FLOAT8_E4M3FN, D.ACL_FLOAT8_E5M2)


def _present(k: RefCall, name: str) -> bool:
    return isinstance(k.args.get(name), AclTensor)


def _along(values: Array, rank: int, axis: int | None) -> Array:
    """A 1-D parameter shaped to broadcast along ``axis`` of a rank-``rank`` tensor (N-D ones as they are)."""
    if values.ndim != 1 or rank == 0:
        return values
    shape = [1] * rank
    if axis is not None and values.size != 1:
        shape[axis] = values.size
    return values.reshape(shape)


def _scale(k: RefCall, name: str) -> Array:
    """A scale tensor as float64 (UINT64/INT64 quant parameters decoded to their FLOAT32 scale)."""
    if k.dtype(name) in (D.ACL_UINT64, D.ACL_INT64):
        return lowp.decode_packed_scale(k.read(name))
    return k.read(name, np.float64)


def store_quantised(k: RefCall, name: str, values: Array, mode: str, *, saturate_float: bool) -> None:
    """Round ``values`` into output ``name``'s type: integers by ``mode`` and saturated, floats to nearest."""
    dst = k.dtype(name)
    if dst in (D.ACL_INT8, D.ACL_INT4, D.ACL_INT32):
        rounded = lowp.round_to_int(values, mode)
        if dst == D.ACL_INT32:
            k.write(name, lowp.pack_int4_to_int32(lowp.saturate_int(rounded, D.ACL_INT4)))
        else:
            k.write(name, lowp.saturate_int(rounded, dst))
        return
    if dst == D.ACL_HIFLOAT8:
        write_float(k, name, np.asarray(values, dtype=np.float64))
        return
    write_float(k, name, lowp.round_to_float(values, dst, "rint", saturate=saturate_float))


# ----------------------------------------------------------------------------- AscendQuant / AntiQuant
@kernel("AscendQuant", "AscendQuantV3")
def ascend_quant(k: RefCall) -> None:
    """y = round(x * scale (* scale) + offset), in float32, into dstType."""
    x = k.read("x", np.float32)
    axis = k.plan["axis"]
    scale = _along(k.read("scale", np.float32), x.ndim, axis)
    with np.errstate(all="ignore"):
        value = x * (scale * scale) if k.value("sqrtMode") else x * scale
        if _present(k, "offset"):
            value = value + _along(k.read("offset", np.float32), x.ndim, axis)
    store_quantised(k, "y", value.astype(np.float64), k.value("roundMode"), saturate_float=False)


@kernel("AscendAntiQuant")
def ascend_anti_quant(k: RefCall) -> None:
    """y = (x + offset) * scale (* scale), in float32, into float16 / bfloat16."""
    if k.dtype("x") == D.ACL_INT32:
        x = lowp.unpack_int32_to_int4(k.read("x")).astype(np.float32)
    else:
        x = read_float(k, "x").astype(np.float32)
    axis = k.plan["axis"]
    scale = _along(k.read("scale", np.float32), x.ndim, axis)
    with np.errstate(all="ignore"):
        if _present(k, "offset"):
            x = x + _along(k.read("offset", np.float32), x.ndim, axis)
        value = x * scale
        if k.value("sqrtMode"):
            value = value * scale
    k.write("y", value)


# ----------------------------------------------------------------------------- DynamicQuant / V2
def _smoothed(k: RefCall) -> Array:
    x = k.read("x", np.float32)
    if not _present(k, "smoothScalesOptional"):
        return x
    smooth = k.read("smoothScalesOptional", np.float32)
    if smooth.ndim == 2:  # one row of smooth scales per group of rows (DynamicQuantV2 with groupIndex)
        rows = x.reshape(-1, x.shape[-1])
        if _present(k, "groupIndexOptional"):
            ends = k.read("groupIndexOptional").astype(np.int64)
            group = np.clip(np.searchsorted(ends, np.arange(rows.shape[0]), side="right"), 0, smooth.shape[0] - 1)
        else:
            group = np.zeros(rows.shape[0], dtype=np.int64)
        return (rows * smooth[group]).reshape(x.shape)
    return x * smooth


@kernel("DynamicQuant", "DynamicQuantV2")
def dynamic_quant(k: RefCall) -> None:
    """Per-row (per-token) dynamic quantisation, symmetric or (V2 with offsetOut) asymmetric."""
    value = _smoothed(k)
    dst: D = k.plan["dst"]
    top, bottom = np.float32(lowp.quant_max(dst)), np.float32(lowp.quant_min(dst))
    with np.errstate(all="ignore"):
        if k.plan["symmetric"]:
            amax = np.max(np.abs(value), axis=-1) if value.shape[-1] else np.zeros(value.shape[:-1], np.float32)
            scale = (amax / top).astype(np.float32)
            q = value / scale[..., None]
            q = np.where(scale[..., None] == 0, np.float32(0), q)
        else:
            hi = np.max(value, axis=-1) if value.shape[-1] else np.zeros(value.shape[:-1], np.float32)
            lo = np.min(value, axis=-1) if value.shape[-1] else np.zeros(value.shape[:-1], np.float32)
            scale = ((hi - lo) / (top - bottom)).astype(np.float32)
            offset = (top - hi / scale).astype(np.float32)
            offset = np.where(scale == 0, np.float32(0), offset)
            q = value / scale[..., None] + offset[..., None]
            q = np.where(scale[..., None] == 0, np.float32(0), q)
            k.write("offsetOut", offset)
    store_quantised(k, "yOut", q.astype(np.float64), "round", saturate_float=True)
    k.write("scaleOut", scale)


# ----------------------------------------------------------------------------- DynamicMxQuant
def mx_shared_codes(amax: Array, dst: D, algorithm: int) -> Array:
    """E8M0 codes of the block scales for block maxima ``amax`` (float64)."""
    special = ~np.isfinite(amax)
    if algorithm == 0:  # OCP MX: floor(log2(amax)) - emax, clamped to E8M0's range; NaN/Inf blocks -> NaN
        with np.errstate(divide="ignore", invalid="ignore"):
            exponent = np.floor(np.log2(np.where(special, 1.0, amax))) - lowp.MX_EMAX[dst]
        codes = np.clip(np.nan_to_num(exponent, neginf=-127.0), -127, 127) + lowp.E8M0_BIAS
        return np.where(special, lowp.E8M0_NAN, codes).astype(np.uint8)
    ratio = (amax / lowp.FP8_MAX[dst]).astype(np.float32)  # scaleAlg 1: amax / Amax(dtype), exponent rounded up
    bits = ratio.view(np.uint32)
    exponent = ((bits >> 23) & 0xFF).astype(np.int64)
    mantissa = (bits & 0x7FFFFF).astype(np.int64)
    up = ((exponent >= 1) & (exponent < 254) & (mantissa > 0)) | ((exponent == 0) & (mantissa > 0x400000))
    codes = exponent + up
    return np.where((exponent == 255) | special, lowp.E8M0_NAN, codes).astype(np.uint8)


@kernel("DynamicMxQuant")
def dynamic_mx_quant(k: RefCall) -> None:
    """Blocks of ``blocksize`` along ``axis`` share one power-of-two E8M0 scale; elements are rounded to dstType."""
    axis, bs, dst, mode, alg = (k.plan[key] for key in ("axis", "blocksize", "dst", "mode", "alg"))
    x = np.moveaxis(k.read("x", np.float64), axis, -1)
    n = x.shape[-1]
    blocks = -(-n // bs)
    padded = np.zeros((*x.shape[:-1], blocks * bs))
    padded[..., :n] = x
    tiles = padded.reshape(*x.shape[:-1], blocks, bs)
    amax = np.max(np.abs(tiles), axis=-1) if tiles.size else np.zeros(tiles.shape[:-1])
    codes = mx_shared_codes(amax, dst, alg)
    with np.errstate(all="ignore"):
        q = tiles / lowp.e8m0_decode(codes)[..., None]
    y = lowp.round_to_float(q, dst, mode, saturate=True).reshape(padded.shape)[..., :n]
    write_float(k, "yOut", np.moveaxis(y, -1, axis))
    pairs = -(-blocks // 2)
    scales = np.zeros((*codes.shape[:-1], pairs * 2), dtype=np.uint8)  # padding scales are code 0
    scales[..., :blocks] = codes
    scales = np.moveaxis(scales.reshape(*codes.shape[:-1], pairs, 2), -2, axis)
    k.write("mxscaleOut", lowp.e8m0_array(scales))


# ----------------------------------------------------------------------------- quantised matmuls
def _matrix(k: RefCall, name: str, transpose: bool) -> Array:
    values = read_float(k, name)
    return np.swapaxes(values, -1, -2) if transpose else values


def _dequantise_output(k: RefCall, acc: Array, scale: Array, token: Array | None, offset: Array | None) -> None:
    """Apply CANN's QuantMatmul output formulas (by bias dtype) to the exact product ``acc`` and store ``out``."""
    with np.errstate(all="ignore"):
        value = acc
        bias = k.read("bias", np.float64) if _present(k, "bias") else None
        int_bias = bias is not None and k.dtype("bias") == D.ACL_INT32
        if int_bias:
            value = value + bias
        value = value * scale
        if token is not None:
            value = value * token
        if bias is not None and not int_bias:
            value = value + bias
        if offset is not None:
            value = value + offset
    out = k.dtype("out")
    if out in (D.ACL_INT8, D.ACL_INT32):
        k.write("out", lowp.saturate_int(lowp.round_to_int(value), out))
    else:
        k.write("out", value)


@kernel("QuantMatmulV3", "QuantMatmulV4")
def quant_matmul(k: RefCall) -> None:
    """out = (x1 @ x2 [+ int32 bias]) * scale [* pertokenScale] [+ offset | + float bias]."""
    a = _matrix(k, "x1", bool(k.value("transposeX1")))
    b = _matrix(k, "x2", bool(k.value("transposeX2")))
    token = k.read("pertokenScaleOptional", np.float64)[:, None] if _present(k, "pertokenScaleOptional") else None
    offset = k.read("offset", np.float64) if _present(k, "offset") else None
    _dequantise_output(k, np.matmul(a, b), _scale(k, "scale"), token, offset)


def mx_expand(codes: Array, k_len: int) -> Array:
    """E8M0 scale codes (..., rows, kb, 2) to per-element float64 scales (..., rows, k)."""
    scales = lowp.e8m0_decode(codes).reshape(*codes.shape[:-2], codes.shape[-2] * 2)
    blocks = -(-k_len // 32)
    return np.repeat(scales[..., :blocks], 32, axis=-1)[..., :k_len]


@kernel("QuantMatmulV5")
def quant_matmul_v5(k: RefCall) -> None:
    """QuantMatmulV5's per-tensor / per-channel / per-token and MX modes."""
    quant_matmul_v5_with(k, None)


def quant_matmul_v5_with(k: RefCall, x2: Array | None) -> None:
    """QuantMatmulV5 with x2's values given (as its view holds them, e.g. read from FRACTAL_NZ) or read."""
    t1, t2 = bool(k.value("transposeX1")), bool(k.value("transposeX2"))
    a = _matrix(k, "x1", t1)
    if x2 is None:
        b = _matrix(k, "x2", t2)
    else:
        wide = x2.astype(np.float64)
        b = np.swapaxes(wide, -1, -2) if t2 else wide
    if k.plan["mode"] == "mx":
        kk = a.shape[-1]
        s1 = k.read("x1Scale").view(np.uint8)
        s2 = k.read("x2Scale").view(np.uint8)
        if t1:  # (..., kb, m, 2) -> (..., m, kb, 2)
            s1 = np.swapaxes(s1, -3, -2)
        if not t2:  # (..., kb, n, 2) -> (..., n, kb, 2)
            s2 = np.swapaxes(s2, -3, -2)
        with np.errstate(all="ignore"):
            left = a * mx_expand(s1, kk)
            right = b * np.swapaxes(mx_expand(s2, kk), -1, -2)
            value = np.matmul(left, right)
            if _present(k, "bias"):
                value = value + k.read("bias", np.float64)
        k.write("out", value)
        return
    token = k.read("x1Scale", np.float64).reshape(-1, 1) if _present(k, "x1Scale") else None
    offset = k.read("x2Offset", np.float64) if _present(k, "x2Offset") else None
    with np.errstate(all="ignore"):
        acc = np.matmul(a, b)
    _dequantise_output(k, acc, _scale(k, "x2Scale"), token, offset)


@kernel("WeightQuantBatchMatmulV2")
def weight_quant_batch_matmul_v2(k: RefCall) -> None:
    """y = x @ ((weight + antiquantOffset) * antiquantScale) + bias, optionally re-quantised to INT8."""
    weight_quant_batch_matmul_with(k, None)


def weight_quant_batch_matmul_with(k: RefCall, weight: Array | None) -> None:
    """WeightQuantBatchMatmulV2 with the weight's values given (e.g. read from FRACTAL_NZ) or read."""
    x = k.read("x", np.float64)
    w = read_float(k, "weight") if weight is None else weight.astype(np.float64)
    rows = w.shape[0]
    group = int(k.plan["group"])

    def expand(name: str) -> Array:
        values = k.read(name, np.float64)
        if group:
            return np.repeat(values, group, axis=0)[:rows]
        return values.reshape(1, -1)

    with np.errstate(all="ignore"):
        if _present(k, "antiquantOffsetOptional"):
            w = w + expand("antiquantOffsetOptional")
        w = w * expand("antiquantScale")
        y = x @ w
        if _present(k, "biasOptional"):
            y = y + k.read("biasOptional", np.float64).reshape(1, -1)
        if _present(k, "quantScaleOptional"):
            y = y * _scale(k, "quantScaleOptional").reshape(1, -1)
            if _present(k, "quantOffsetOptional"):
                y = y + k.read("quantOffsetOptional", np.float64).reshape(1, -1)
            k.write("y", lowp.saturate_int(lowp.round_to_int(y), D.ACL_INT8))
            return
    k.write("y", y)

"""Reference kernels of the grouped quantised GEMMs (rules: :mod:`acl_core.spec.ops.gmm_quant`).

The INT8 GEMMs are exact integer sums (int64 here); everything after them is FLOAT32, one rounding per
operation in the documented order, with SwiGLU in float64 rounded once to FLOAT32 (DequantSwigluQuant's
arithmetic, :mod:`acl_reference.kernels.quant_vllm`). Weights in FRACTAL_NZ are read back from their
storage (:func:`acl_reference.kernels.layout.nz_values`).
"""

from __future__ import annotations

import numpy as np

from acl_core import lowp
from acl_core.dtypes import DataType as D
from acl_core.nz import is_nz
from acl_core.spec.ops.gmm_quant import QUANT_MAX
from acl_core.tensor import AclTensor
from acl_reference import tensor_io
from acl_reference.call import RefCall
from acl_reference.kernels import kernel
from acl_reference.kernels.layout import nz_values
from acl_reference.kernels.matmul import group_sizes
from acl_reference.kernels.quant_vllm import store_saturating_int

Array = np.ndarray
F32 = np.float32


def _values(k: RefCall, t: AclTensor) -> Array:
    """A weight's logical values (read back from FRACTAL_NZ storage where it is NZ)."""
    return nz_values(k, t) if is_nz(t.format) else tensor_io.read(k.driver, t)


def _weights(k: RefCall) -> list[Array]:
    """The per-group [K, N] INT8 weights of GroupedMatmulSwigluQuantV2 as int64."""
    ws = [_values(k, t).astype(np.int64) for t in k["weight"]]
    return ws if k.plan["gmm_quant"]["weight_split"] else list(ws[0])


def _weight_scales(k: RefCall) -> list[Array]:
    """The per-group [N] weight scales, converted (exactly) to FLOAT32."""
    scales = [tensor_io.read(k.driver, t).astype(F32) for t in k["weightScale"]]
    return scales if k.plan["gmm_quant"]["weight_split"] else list(scales[0])


def swiglu_quant_rows(c: Array) -> tuple[Array, Array]:
    """Per-row SwiGLU (first half activated, float64, rounded once to FLOAT32) and dynamic INT8 quantisation.

    Returns (quantised values as float64, before rounding; FLOAT32 scales), DequantSwigluQuant's rules: a
    row whose maximum is 0 gets scale 1.
    """
    half = c.shape[1] // 2
    glu, lin = c[:, :half].astype(np.float64), c[:, half:].astype(np.float64)
    with np.errstate(all="ignore"):
        y = (glu / (1.0 + np.exp(-glu)) * lin).astype(F32)
        rowmax = np.max(np.abs(y), axis=-1) if half else np.zeros(c.shape[0], F32)
        scale = np.where(rowmax > 0, rowmax / F32(QUANT_MAX), F32(1.0)).astype(F32)
        value = y / scale[:, None]
    return value.astype(np.float64), scale


@kernel("GroupedMatmulSwigluQuantV2")
def grouped_matmul_swiglu_quant(k: RefCall) -> None:
    """Per group: exact INT8 GEMM, C = float32(acc) * w_scale * x_scale, SwiGLU, per-row INT8 quantisation."""
    x = k.read("x").astype(np.int64)
    m = x.shape[0]
    plan = k.plan["gmm_quant"]
    sizes = group_sizes(k.read("groupList"), int(plan["list_type"]), m, "M of x")
    ws, scales = _weights(k), _weight_scales(k)
    x_scale = k.read("xScale", F32)
    n = k["output"].view_dims[1] * 2
    value = np.zeros((m, n // 2), np.float64)
    out_scale = np.zeros(m, F32)  # rows past the groups: 0
    start = 0
    with np.errstate(all="ignore"):
        for size, w, s in zip(sizes, ws, scales):
            rows = slice(start, start + size)
            acc = x[rows] @ w  # exact
            c = (acc.astype(F32) * s) * x_scale[rows, None]
            value[rows], out_scale[rows] = swiglu_quant_rows(c)
            start += size
    k.write("outputScale", out_scale)
    store_saturating_int(k, "output", value)


def quantise_x(k: RefCall) -> tuple[Array, Array]:
    """QuantGroupedMatmulDequant's x_q (int64) and per-row FLOAT32 scale_x (smoothing, static or dynamic)."""
    x = k.read("x", F32)
    with np.errstate(all="ignore"):
        if isinstance(k["smoothScaleOptional"], AclTensor):
            x = x * k.read("smoothScaleOptional", F32)
        if k.plan["gmm_quant"]["x_mode"] == "dynamic":
            amax = np.max(np.abs(x), axis=-1)
            scale = (amax / F32(QUANT_MAX)).astype(F32)
            q = np.where(scale[:, None] == 0, F32(0), x / scale[:, None])
        else:
            given = k.read("xScaleOptional", F32)
            scale = np.broadcast_to(given, (x.shape[0],)).astype(F32)
            q = x / scale[:, None]
    xq = lowp.saturate_int(lowp.round_to_int(q.astype(np.float64), "rint"), D.ACL_INT8)
    return xq.astype(np.int64), scale


@kernel("QuantGroupedMatmulDequant")
def quant_grouped_matmul_dequant(k: RefCall) -> None:
    """x quantised to INT8, per group an exact GEMM with weight^T, dequantised in FLOAT32, rounded to FLOAT16."""
    xq, x_scale = quantise_x(k)
    w = _values(k, k["weight"]).astype(np.int64)  # [g, n, k]
    plan = k.plan["gmm_quant"]
    sizes = group_sizes(k.read("groupList"), 0, xq.shape[0], "M of x")
    if plan["packed"]:
        scales = lowp.decode_packed_scale(k.read("weightScale")).astype(F32)
    else:
        scales = k.read("weightScale", F32)
    out = np.zeros(k["out"].view_dims, np.float64)  # rows past the last group: 0
    start = 0
    with np.errstate(all="ignore"):
        for g, size in enumerate(sizes):
            rows = slice(start, start + size)
            v = (xq[rows] @ w[g].T).astype(F32) * scales[g]
            if not plan["packed"]:
                v = v * x_scale[rows, None]
            out[rows] = v
            start += size
    k.write("out", out)

"""Reference kernels of the fused add + RmsNorm + quantisation ops (rules: :mod:`acl_core.spec.ops.norm_quant`).

The residual sum and the norm are float64 (as AddRmsNorm's reference); ``y`` is rounded once to
FLOAT32 and quantised in FLOAT32 arithmetic, as the quant family's references do.
"""

from __future__ import annotations

import numpy as np

from acl_core import lowp
from acl_core.dtypes import DataType as D
from acl_core.spec.ops.norm_quant import dynamic_outputs
from acl_core.tensor import AclTensor
from acl_reference.call import RefCall
from acl_reference.kernels import kernel
from acl_reference.kernels.norm import rms_rstd

Array = np.ndarray


def _present(k: RefCall, name: str) -> bool:
    return isinstance(k.args.get(name), AclTensor)


def _norm(k: RefCall) -> tuple[Array, Array, Array]:
    """(x = x1 + x2, rstd, x * rstd * gamma), all float64."""
    with np.errstate(invalid="ignore", over="ignore"):
        x = k.read("x1", np.float64) + k.read("x2", np.float64)
    rstd = rms_rstd(x, k.plan["axes"], k.value("epsilon"))
    with np.errstate(invalid="ignore", over="ignore"):
        return x, rstd, x * rstd * k.read("gamma", np.float64)


def _with_beta(k: RefCall, normed: Array) -> Array:
    """y = normed + beta (when given), rounded once to float32."""
    with np.errstate(invalid="ignore", over="ignore"):
        y = normed + k.read("betaOptional", np.float64) if _present(k, "betaOptional") else normed
        return y.astype(np.float32)


def _int8(values: Array) -> Array:
    """Round half to even and saturate to INT8 (NaN to 0)."""
    return lowp.saturate_int(lowp.round_to_int(values.astype(np.float64), "round"), D.ACL_INT8)


@kernel("AddRmsNormQuantV2")
def add_rms_norm_quant_v2(k: RefCall) -> None:
    """y1Out/y2Out = int8(round(y * scales (y / scales in divMode) + zeroPoints)); xOut = x; rmsNormOut."""
    x, _, normed = _norm(k)
    y = _with_beta(k, normed)
    k.write("xOut", x)
    if k["rmsNormOut"] is not None:
        k.write("rmsNormOut", normed)
    pairs = (("y1Out", "scales1", "zeroPoints1Optional"), ("y2Out", "scales2Optional", "zeroPoints2Optional"))
    for out, scale_name, zero_name in pairs:
        if not _present(k, scale_name):
            k.write(out, 0)  # the second quantisation is off: CANN leaves y2Out undefined, acl-core zeroes it
            continue
        scale = k.read(scale_name, np.float32)
        with np.errstate(all="ignore"):
            q = y / scale if k.value("divMode") else y * scale
            if _present(k, zero_name):
                q = q + k.read(zero_name, np.float32)
        k.write(out, _int8(q))


@kernel("AddRmsNormDynamicQuantV2")
def add_rms_norm_dynamic_quant_v2(k: RefCall) -> None:
    """Per row: input = y * smoothScale; scale = max|input| / 127; yOut = int8(round(input / scale))."""
    x, _, normed = _norm(k)
    y = _with_beta(k, normed)
    k.write("xOut", x)
    smooth = ("smoothScale1Optional", "smoothScale2Optional")
    valid = dynamic_outputs(k.value("outputMaskOptional"), *(_present(k, n) for n in smooth))
    for i, (ok, smooth_name) in enumerate(zip(valid, smooth), start=1):
        if not ok:  # an invalid output ([1]): CANN leaves it undefined, acl-core zeroes it
            k.write(f"y{i}Out", 0)
            k.write(f"scale{i}Out", 0.0)
            continue
        with np.errstate(all="ignore"):
            value = y * k.read(smooth_name, np.float32) if _present(k, smooth_name) else y
            amax = np.max(np.abs(value), axis=-1) if value.shape[-1] else np.zeros(value.shape[:-1], np.float32)
            scale = (amax / np.float32(127)).astype(np.float32)
            q = np.where(scale[..., None] == 0, np.float32(0), value / scale[..., None])
        k.write(f"y{i}Out", _int8(q))
        k.write(f"scale{i}Out", scale)


@kernel("AddRmsNormCast")
def add_rms_norm_cast(k: RefCall) -> None:
    """y1Out = x * rstd * gamma in float32; y2Out = y1Out cast to x1's dtype; rstdOut; xOut = x."""
    x, rstd, normed = _norm(k)
    y1 = normed.astype(np.float32)
    k.write("y1Out", y1)
    k.write("y2Out", y1)
    k.write("rstdOut", rstd)
    k.write("xOut", x)

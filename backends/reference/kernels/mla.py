"""Reference kernel of the MLA family: MlaPrologV2WeightNz (V3 is a version of it; its scales pass through).

Every step runs in float64 and is rounded to bf16 where CANN's kernel stores its intermediates (after each
matmul, RmsNorm and ROPE; :mod:`acl_core.spec.ops.mla` gives the dataflow and its sources). The slots are
checked before anything is written (161002 for a value outside [0, BlockNum*BlockSize) other than -1).
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from acl_core.spec.ops.mla import place_rows, rms_norm, rope_pairs
from acl_reference.call import RefCall
from acl_reference.kernels import kernel
from acl_reference.kernels.kv_cache import checked_slots
from acl_reference.kernels.layout import read_nz

F64 = np.float64
BF16 = ml_dtypes.bfloat16


def _bf16(v: np.ndarray) -> np.ndarray:
    """``v`` rounded to bf16 (to nearest, ties to even) and widened back: a stored intermediate."""
    return np.asarray(v).astype(BF16).astype(F64)


def _scale(k: RefCall, name: str) -> float:
    """A V3 scale factor passed through to this kernel (1 for V2, which has none)."""
    value = k.args.get(name)
    return 1.0 if value is None else float(value)


@kernel("MlaPrologV2WeightNz")
def mla_prolog_v2_weight_nz(k: RefCall) -> None:
    """q^N, q^R and the paged-cache rows of c^KV and k^R, through CANN's bf16 intermediates."""
    x = k.read("tokenX", F64)
    lead = x.shape[:-1]
    tokens = math.prod(lead)
    x = x.reshape(tokens, x.shape[-1])
    wdq, wuqqr, wdkvkr = (read_nz(k, n).astype(F64) for n in ("weightDq", "weightUqQr", "weightDkvKr"))
    wuk = k.read("weightUk", F64)
    heads, d, hckv = wuk.shape
    dr = wdkvkr.shape[1] - hckv
    kv_cache, kr_cache = k.read("kvCacheRef"), k.read("krCacheRef")
    limit = kv_cache.shape[0] * kv_cache.shape[1]
    slots = checked_slots(k.read("cacheIndex").reshape(-1), limit, "cacheIndex") if limit else None
    cos = k.read("ropeCos", F64).reshape(tokens, dr)
    sin = k.read("ropeSin", F64).reshape(tokens, dr)

    cq = _bf16(x @ wdq)
    ckvkr = _bf16(x @ wdkvkr)
    gamma_cq = k.read("rmsnormGammaCq", F64)
    cqn = _bf16(rms_norm(cq, gamma_cq, float(k.value("rmsnormEpsilonCq")), _scale(k, "qcQrScale")))
    qcqr = _bf16(cqn @ wuqqr).reshape(tokens, heads, d + dr)
    query = np.einsum("thd,hdk->thk", qcqr[..., :d], wuk)
    query_rope = rope_pairs(qcqr[..., d:], cos[:, None, :], sin[:, None, :])
    if slots is not None:
        gamma_ckv = k.read("rmsnormGammaCkv", F64)
        kv = rms_norm(ckvkr[:, :hckv], gamma_ckv, float(k.value("rmsnormEpsilonCkv")), _scale(k, "kcScale"))
        kr = rope_pairs(ckvkr[:, hckv:], cos, sin)
        nz = bool(k.plan["mla_nz_cache"])
        k.write("kvCacheRef", place_rows(kv_cache, kv.astype(BF16), slots, nz))
        k.write("krCacheRef", place_rows(kr_cache, kr.astype(BF16), slots, nz))
    k.write("queryOut", query.reshape(*lead, heads, hckv))
    k.write("queryRopeOut", query_rope.reshape(*lead, heads, dr))

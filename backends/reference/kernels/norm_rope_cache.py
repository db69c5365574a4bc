"""Reference kernel of QkvRmsNormRopeCache (rules and choices: :mod:`acl_core.spec.ops.norm_rope_cache`).

The math runs in float64 and is rounded once into each 16-bit output; a quantised cache value is
``x`` rounded to FLOAT32, divided by its scale and shifted by its offset in FLOAT32, rounded half to
even and saturated. The index is checked before anything is written.
"""

from __future__ import annotations

import numpy as np

from acl_reference.call import RefCall
from acl_reference.kernels import kernel
from acl_reference.kernels.kv_cache import checked_slots

Array = np.ndarray
F64 = np.float64
PAD = -1


def rms_norm(x: Array, gamma: Array, epsilon: float) -> Array:
    """``x / sqrt(mean(x^2) + epsilon) * gamma`` over the last axis (float64)."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + epsilon) * gamma


def rope_half(y: Array, cos: Array, sin: Array) -> Array:
    """Half-and-half RoPE: ``y * cos + cat(-y2, y1) * sin`` (cos, sin broadcast over the head axis)."""
    half = y.shape[-1] // 2
    turned = np.concatenate([-y[..., half:], y[..., :half]], axis=-1)
    return y * cos + turned * sin


def quantise(x: Array, scale: Array, offset: Array | None) -> Array:
    """INT8 ``round(float32(x) / scale (+ offset))`` in FLOAT32, half to even, saturated, NaN to 0."""
    with np.errstate(all="ignore"):
        v = x.astype(np.float32) / scale.astype(np.float32)
        if offset is not None:
            v = v + offset.astype(np.float32)
        r = np.clip(np.rint(v), -128, 127)
    return np.where(np.isnan(r), 0, r).astype(np.int8)


def nz_scatter(cache: Array, rows: Array, slots: Array) -> Array:
    """A copy of PA_NZ ``cache [blocks, W / P, block_size, P]`` with token ``t``'s ``W`` values at ``slots[t]``."""
    result = np.array(cache)
    _blocks, pieces, block_size, p = result.shape
    for t, slot in enumerate(slots):
        if slot == PAD:
            continue
        result[slot // block_size, :, slot % block_size, :] = rows[t].reshape(pieces, p)
    return result


def nd_scatter(cache: Array, rows: Array, slots: Array) -> Array:
    """A copy of ND ``cache [blocks, block_size, N, D]`` with token ``t``'s ``N * D`` values at ``slots[t]``."""
    result = np.array(cache)
    block_size = result.shape[1]
    for t, slot in enumerate(slots):
        if slot != PAD:
            result[slot // block_size, slot % block_size] = rows[t].reshape(result.shape[2:])
    return result


@kernel("QkvRmsNormRopeCache")
def qkv_rms_norm_rope_cache(k: RefCall) -> None:
    """q, k normalised and rotated; q to qOut, k and v (quantised for INT8 caches) into the PA_NZ caches."""
    qkv = k.read("qkv", F64)
    nq, nk, nv = (int(v) for v in k.value("headNums"))
    d = int(k.value("qkvSize")[3])
    tokens = qkv.shape[0]
    heads = qkv.reshape(tokens, nq + nk + nv, d)
    q, key, v = heads[:, :nq], heads[:, nq : nq + nk], heads[:, nq + nk :]
    eps = float(k.value("epsilon"))
    cos, sin = k.read("cos", F64)[:, None, :], k.read("sin", F64)[:, None, :]
    q_out = rope_half(rms_norm(q, k.read("qGamma", F64), eps), cos, sin).reshape(tokens, nq * d)
    k_out = rope_half(rms_norm(key, k.read("kGamma", F64), eps), cos, sin).reshape(tokens, nk * d)
    v_out = v.reshape(tokens, nv * d)
    kc, vc = k.read("kCache"), k.read("vCache")
    nz = k.plan["qkv_cache_layout"] == "nz"
    block_size = kc.shape[2 if nz else 1]
    scatter = nz_scatter if nz else nd_scatter
    slots = checked_slots(k.read("index"), kc.shape[0] * block_size, "index (a cache slot)")
    rows = []
    for which, x, cache in (("k", k_out, kc), ("v", v_out, vc)):
        if cache.dtype == np.int8:
            scale = k.read(f"{which}ScaleOptional").reshape(-1)
            offset = k[f"{which}OffsetOptional"]
            off = None if offset is None else k.read(f"{which}OffsetOptional").reshape(-1)
            rows.append(quantise(x, scale, off))
        else:
            rows.append(x.astype(cache.dtype))  # rounded once into the cache dtype
    k.write("kCache", scatter(kc, rows[0], slots))
    k.write("vCache", scatter(vc, rows[1], slots))
    k.write("qOut", q_out)
    k.write("qOutBeforeQuant", q_out)
    k.write("kOutBeforeQuant", k_out)
    k.write("vOutBeforeQuant", v_out)

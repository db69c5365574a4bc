"""Reference kernels of the KV-cache family: paged scatters and gathers, KvRmsNormRopeCache, RopeWithSinCosCache.

Every index value (slots, block ids, lengths, positions) is checked before anything is written, and a
value outside its range raises 161002 at launch with the outputs untouched (the rules are in
:mod:`acl_core.spec.ops.kv_cache`). Copies move the stored values as they are (any dtype); the math
runs in float64 and is rounded once into the output's dtype.
"""

from __future__ import annotations

import numpy as np

from acl_core.errors import AclnnError, AclnnStatus
from acl_reference.call import RefCall
from acl_reference.kernels import kernel
from acl_reference.kernels.attention import rotate

Array = np.ndarray
F64 = np.float64
PAD = -1
"""The slot value of a padding token, whose row is skipped."""


def _refuse(message: str) -> AclnnError:
    return AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, message)


def checked_slots(values: Array, limit: int, what: str) -> Array:
    """``values`` as int64 slots in [0, limit) or -1 (padding); 161002 naming the first other value."""
    slots = np.asarray(values).astype(np.int64)
    bad = (slots < PAD) | (slots >= limit)
    if bad.any():
        raise _refuse(f"{what} holds {int(slots[bad].flat[0])}, outside [0, {limit}) and not -1 (padding)")
    return slots


def scatter_rows(cache: Array, rows: Array, slots: Array) -> Array:
    """A copy of ``cache [blocks, block_size, ...]`` with ``rows[t]`` at slot ``slots[t]`` (-1 skipped, last wins)."""
    result = np.array(cache, order="C")  # the slots count rows of the C-ordered cache
    flat = result.reshape(-1, *result.shape[2:])
    for t, slot in enumerate(slots):
        if slot != PAD:
            flat[slot] = rows[t]
    return result


# ----------------------------------------------------------------------------- ScatterPaKvCache
@kernel("ScatterPaKvCache")
def scatter_pa_kv_cache(k: RefCall) -> None:
    """keyCacheRef (and valueCacheRef) rows at slotMapping set to key's (and value's) token rows."""
    key_cache = k.read("keyCacheRef")
    slots = checked_slots(k.read("slotMapping"), key_cache.shape[0] * key_cache.shape[1], "slotMapping")
    key_out = scatter_rows(key_cache, k.read("key"), slots)
    if k.plan["with_value"]:
        value_out = scatter_rows(k.read("valueCacheRef"), k.read("value"), slots)
        k.write("valueCacheRef", value_out)
    k.write("keyCacheRef", key_out)


# ----------------------------------------------------------------------------- GatherPaKvCache
def sequence_starts(lens: Array, cumulative: bool) -> tuple[Array, Array]:
    """(start row, length) of each sequence; 161002 for a negative length or a cumulative list not from 0."""
    values = np.asarray(lens).astype(np.int64)
    if cumulative:
        if values[0] != 0:
            raise _refuse(f"seqLens is cumulative but starts at {int(values[0])}, not 0")
        lengths = np.diff(values)
    else:
        lengths = values
    if (lengths < 0).any():
        raise _refuse(f"seqLens gives sequence {int(np.argmax(lengths < 0))} a negative length")
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    return starts, lengths


@kernel("GatherPaKvCache")
def gather_pa_kv_cache(k: RefCall) -> None:
    """keyRef / valueRef rows of each sequence gathered from the caches through its block-table row."""
    kc, vc = k.read("keyCache"), k.read("valueCache")
    tables = k.read("blockTables").astype(np.int64)
    key, value = np.array(k.read("keyRef")), np.array(k.read("valueRef"))
    blocks, block_size = kc.shape[0], kc.shape[1]
    starts, lengths = sequence_starts(k.read("seqLens"), bool(k.value("isSeqLensCumsum")))
    offset_arg = k["seqOffsetOptional"]
    offsets = np.zeros(len(lengths), np.int64) if offset_arg is None else k.read("seqOffsetOptional").astype(np.int64)
    if (offsets < 0).any():
        raise _refuse(f"seqOffsetOptional holds {int(offsets[offsets < 0][0])}, a negative offset")
    rows = key.shape[0]
    width = tables.shape[1]
    plan: list[tuple[int, int, int]] = []  # (out row, block id, row in block) per token kept
    for b, (start, length) in enumerate(zip(starts, lengths)):
        kept = int(min(length, max(rows - start, 0)))
        first = int(offsets[b]) // block_size
        for t in range(kept):
            column = first + t // block_size
            if column >= width:
                raise _refuse(f"sequence {b} needs block-table column {column}; blockTables has {width}")
            block = int(tables[b, column])
            if not 0 <= block < blocks:
                raise _refuse(f"blockTables[{b}, {column}] holds {block}, outside [0, {blocks})")
            plan.append((int(start) + t, block, t % block_size))
    for row, block, within in plan:
        key[row] = kc[block, within]
        value[row] = vc[block, within]
    k.write("keyRef", key)
    k.write("valueRef", value)


# ----------------------------------------------------------------------------- KvRmsNormRopeCache
def kv_slots(index: Array, mode: str, b: int, s: int, block_size: int) -> Array:
    """Each token's (b, s) destination: a cache row (Norm: row in its batch's cache) or -1 (skipped)."""
    idx = index.astype(np.int64)
    if mode in ("norm", "paged"):
        return idx.reshape(b, s)
    per = -(-s // block_size)
    starts = idx.reshape(b, per)
    tokens = np.arange(s)
    first = starts[:, tokens // block_size]
    return np.where(first == PAD, PAD, (first // block_size) * block_size + tokens % block_size)


@kernel("KvRmsNormRopeCache")
def kv_rms_norm_rope_cache(k: RefCall) -> None:
    """RmsNorm of kv's first Dv elements and mode-3 RoPE of its last Dk, written to the caches at index."""
    kv = k.read("kv", F64)
    gamma, cos, sin = k.read("gamma", F64), k.read("cos", F64), k.read("sin", F64)
    dv = gamma.shape[0]
    b, _n, s, _d = kv.shape
    x, part = kv[..., :dv], kv[..., dv:]
    normed = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + k.value("epsilon")) * gamma
    straight, turned = rotate(part, 3)
    roped = straight * cos + turned * sin
    kc, vc = np.array(k.read("kCacheRef")), np.array(k.read("ckvCacheRef"))
    mode: str = k.plan["kv_cache_mode"]
    block_size = kc.shape[1]
    index = k.read("index")
    if mode == "norm":
        checked_slots(index, kc.shape[2], "index (a row of the batch's cache)")
    else:
        checked_slots(index, kc.shape[0] * block_size, "index (a cache slot)")
    slots = kv_slots(index, mode, b, s, block_size)
    # rounded once into the cache dtype, exactly as the outputs are written
    k_rows, v_rows = roped.astype(kc.dtype), normed.astype(vc.dtype)
    for bi in range(b):
        for si in range(s):
            slot = int(slots[bi, si])
            if slot == PAD:
                continue
            if mode == "norm":
                kc[bi, :, slot] = k_rows[bi, :, si]
                vc[bi, :, slot] = v_rows[bi, :, si]
            else:
                kc[slot // block_size, slot % block_size] = k_rows[bi, :, si]
                vc[slot // block_size, slot % block_size] = v_rows[bi, :, si]
    k.write("kCacheRef", kc)
    k.write("ckvCacheRef", vc)
    if k.value("isOutputKv"):
        k.write("kRopeOut", roped)
        k.write("cKvOut", normed)


# ----------------------------------------------------------------------------- RopeWithSinCosCache
def mrope_rows(columns: int, ends: list[int], interleaved: bool) -> Array:
    """The positions row each of the ``columns`` cos columns takes (all 0 in rope mode)."""
    j = np.arange(columns)
    if not ends:
        return np.zeros(columns, np.int64)
    if interleaved:
        sections = np.diff([0, *ends])
        rows = np.zeros(columns, np.int64)
        rows[(j % 3 == 1) & (j < 3 * sections[1])] = 1
        rows[(j % 3 == 2) & (j < 3 * sections[2])] = 2
        return rows
    return np.searchsorted(np.array(ends), j, side="right").astype(np.int64)


@kernel("RopeWithSinCosCacheV2")
def rope_with_sin_cos_cache(k: RefCall) -> None:
    """queryOut / keyOut: each head's first rotaryDim elements rotated with cos/sin from the cache at positions."""
    cache = k.read("cosSinCache", F64)
    max_len, rotary = cache.shape
    half = rotary // 2
    raw = k.read("positions").astype(np.int64)
    bad = (raw < 0) | (raw >= max_len)
    if bad.any():
        raise _refuse(f"positions holds {int(raw[bad].flat[0])}, outside [0, {max_len})")
    pos = raw.reshape(-1, raw.shape[-1])  # [rows, T]
    cols = mrope_rows(half, k.plan["rope_sections"], k.plan["rope_interleaved"])
    picked = cache[pos[cols, :].T, np.arange(half)]  # [T, half]: column j from row cols[j]'s position
    cos, sin = picked, cache[pos[cols, :].T, half + np.arange(half)]
    head = int(k.value("headSize"))
    neox = bool(k.value("isNeoxStyle"))
    for src, dst in (("queryIn", "queryOut"), ("keyIn", "keyOut")):
        x = k.read(src, F64)
        t = x.shape[0]
        heads = x.reshape(t, -1, head)
        rot = heads[..., :rotary]
        c, s = cos[:, None, :], sin[:, None, :]
        if neox:
            x1, x2 = rot[..., :half], rot[..., half:]
            turned = np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)
        else:
            x1, x2 = rot[..., 0::2], rot[..., 1::2]
            turned = np.stack([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1).reshape(rot.shape)
        result = np.concatenate([turned, heads[..., rotary:]], axis=-1)
        k.write(dst, result.reshape(x.shape))

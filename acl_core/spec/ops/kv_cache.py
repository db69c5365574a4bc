"""KV-cache family: paged KV-cache writes and reads, MLA's fused RmsNorm + RoPE + cache write, and the
rotary embedding fed from a cos/sin cache (issue 16: what vllm-ascend's ``reshape_and_cache``, MLA and
rotary layers reach).

Conventions and choices (where CANN's documents are silent, the choice is written here):

* A paged cache is ND ``[num_blocks, block_size, heads, head_dim]`` (cache mode "Norm"); slot ``s``
  is row ``s % block_size`` of block ``s // block_size``.
* Slot, index and position values are device data, so only a kernel sees them. A slot of -1 marks a
  padding token whose row is skipped (vLLM's PAD_SLOT_ID; CANN's kernels skip negative slots and
  KvRmsNormRopeCache documents -1). Any other value outside the documented range is refused with
  161002 by the kernel: at launch on the reference, at stream synchronisation on rocm (its device
  flag), and nothing is written. Repeated slots: CANN requires them unique ("correctness cannot be
  ensured"); the reference keeps the last token's row, rocm writes them in parallel, so which one lands
  there is unspecified (samples use unique slots).
* Shape errors use the code CANN's table gives for them: 561002 where it lists shape mismatches as
  tiling errors (KvRmsNormRopeCache, RopeWithSinCosCache, a key of rank other than 3 or 4), 161002
  elsewhere. Documented modes that are not implemented are refused with 161002 and a message naming
  the mode.

ScatterPaKvCache / ScatterPaCache (``reshape_and_cache``): cacheMode null or "Norm" and scatterMode null
or "None" (scenarios 2 and 6): ``key [T, N, Dk]`` and ``value [T, N, Dv]`` into caches
``[num_blocks, block_size, N, D]`` by ``slotMapping [T]``; a 0-d value and valueCacheRef scatter the key
alone (scenario 6). Refused: cacheMode "PA_NZ" (FRACTAL_NZ caches), scatterMode "Alibi" / "Rope" /
"Omni" (compressed KV: compressLens, compressSeqOffset and seqLens, and with them the 4-d keys of
scenario 3, must be null) and "Nct" (strided tokens: stridesOptional / offsetsOptional must be null).
ScatterPaCache is ScatterPaKvCache without a value (its cacheMode is reserved and takes no effect, as
CANN says); its FLOAT4_E2M1 / FLOAT4_E1M2 keys are not declared: two elements share a byte, which the
element-wise copy kernels do not address.

GatherPaKvCache: cacheMode "Norm" ("PA_NZ" refused). Sequence ``b`` (length ``len_b``, or
``seqLens[b+1] - seqLens[b]`` when isSeqLensCumsum) fills rows ``start_b .. start_b + len_b`` of keyRef and
valueRef (``start_b`` the lengths before it), token ``t`` from block
``blockTables[b, seqOffset[b] // block_size + t // block_size]``, row ``t % block_size`` (CANN's kernels:
the offset selects whole blocks). Rows at or past keyRef's first dim are dropped (CANN truncates the last
sequence); rows past the total are left as they were (keyRef and valueRef are in-out). Kernel errors
(161002): a negative length, a cumulative list not starting at 0, a negative seqOffset, a block-table
column past its width or a block id outside [0, num_blocks) (CANN zero-fills the last two; refusing is
this project's rule for index values).

KvRmsNormRopeCache: ``kv [Bkv, N=1, Skv, Dv + Dk]``; ``y = x / sqrt(mean(x^2) + epsilon) * gamma`` of the
first Dv elements goes to ckvCacheRef (and cKvOut), the last Dk are rotated de-interleaved
(``[x_even, x_odd] * cos + [-x_odd, x_even] * sin``, RotaryPositionEmbedding's mode 3) into kCacheRef (and
kRopeOut). cacheModeOptional "Norm" (caches ``[Bcache >= Bkv, N, Scache, D]``, ``index [Bkv, Skv]`` in
[-1, Scache)), "PA" / "PA_BNSD" (caches ``[num_blocks, block_size, N, D]``, ``index [Bkv * Skv]`` slots) and
"PA_BLK_BNSD" (``index [Bkv * ceil(Skv / block_size)]``: each holds the first slot of a block, token ``s``
goes to slot ``(index // block_size) * block_size + s % block_size``) are implemented; "PA_NZ" and
"PA_BLK_NZ" (FRACTAL_NZ caches) and quantised caches (INT8 / HIFLOAT8 / FLOAT8 caches with the scale and
offset tensors) are refused: the caches declare FLOAT16 / BFLOAT16 only and the four optional tensors must
be null. With isOutputKv false kRopeOut and cKvOut are not written (they may be null).

RopeWithSinCosCacheV2 (RopeWithSinCosCache is it with cacheMode 0): ``cos, sin`` are the two halves of
``cosSinCache[positions[t]]``; each head's first rotaryDim elements are rotated (isNeoxStyle: by halves,
else interleaved pairs), the rest pass through. mrope (positions ``[m, T]``, ``m`` = len(mropeSection)):
cos column ``j`` takes its position from row ``r(j)``: cacheMode 0 the section holding ``j``, cacheMode 1
rows 1 and 2 interleaved every third column over the first ``3 * mropeSection[1]`` /
``3 * mropeSection[2]`` columns (Qwen3-VL). Positions outside [0, maxSeqLen) are kernel errors (161002).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.errors import AclnnError, AclnnStatus
from acl_core.spec import samples as S
from acl_core.spec.accuracy import exact, table, with_accuracy
from acl_core.spec.opspec import (
    INVALID,
    TILING,
    Call,
    ErrorSample,
    IndexOf,
    Infos,
    OpSpec,
    OutInfo,
    Sample,
    bool_attr,
    float_attr,
    int_array,
    int_attr,
    invalid,
    nullptr,
    out,
    ref,
    string_attr,
    tensor,
)
from acl_core.spec.plan import declare as declare_plan
from acl_core.spec.rules import FLOATS, INDEX, same, tensor_arg
from acl_core.spec.version import Added, version_of
from acl_core.tensor import AclIntArray, AclTensor

FAMILY = "kv_cache"

declare_plan("with_value", "bool", "ScatterPaKvCache: whether a value is scattered beside the key", bool)
declare_plan(
    "kv_cache_mode",
    "'norm' | 'paged' | 'paged_blocks'",
    "KvRmsNormRopeCache's cache addressing: per-batch rows (Norm), one slot per token (PA, PA_BNSD) or one "
    "block start per block of tokens (PA_BLK_BNSD)",
    str,
    ("norm", "paged", "paged_blocks"),
)
declare_plan(
    "rope_sections",
    "list[int]",
    "RopeWithSinCosCache: the cumulative ends of mropeSection over the cos columns (empty: rope mode, one positions"
    " row)",
    list,
)
declare_plan(
    "rope_interleaved", "bool", "RopeWithSinCosCacheV2: cacheMode 1 (mrope rows interleaved every third column)", bool
)

HALF = frozenset({D.ACL_FLOAT16, D.ACL_BF16})
CACHE_DTYPES = frozenset(
    {
        D.ACL_FLOAT16,
        D.ACL_FLOAT,
        D.ACL_BF16,
        D.ACL_INT8,
        D.ACL_UINT8,
        D.ACL_INT16,
        D.ACL_UINT16,
        D.ACL_INT32,
        D.ACL_UINT32,
        D.ACL_HIFLOAT8,
        D.ACL_FLOAT8_E5M2,
        D.ACL_FLOAT8_E4M3FN,
    }
)
"""The element dtypes ScatterPaKvCache, ScatterPaCache and GatherPaKvCache document (copies: any of them)."""
SAMPLE_DTYPES = tuple(sorted((d for d in CACHE_DTYPES if d.numpy is not None), key=int))
"""The cache dtypes a NumPy sample can hold (HiFloat8 has no NumPy type: its codes are bytes on the host)."""


def tiling(message: str) -> AclnnError:
    """561002, the code CANN's tables give for these ops' shape errors."""
    return AclnnError(AclnnStatus.ACLNN_ERR_INNER_TILING_ERROR, message)


def _mode(value: str | None, default: str, implemented: Iterable[str], documented: Iterable[str], what: str) -> str:
    """The mode a string attribute names (null: ``default``); 161002 for an unknown or unimplemented mode."""
    mode = default if value is None else value
    if mode in implemented:
        return mode
    if mode in documented:
        raise invalid(f"{what} {mode!r} is not implemented (implemented: {', '.join(map(repr, implemented))})")
    raise invalid(f"{what} {mode!r} is unknown (CANN documents {', '.join(map(repr, documented))})")


def _absent(call: Call, names: Iterable[str], why: str) -> None:
    for name in names:
        if call.args.get(name) is not None:
            raise invalid(f"{name} must be null: {why}")


def _slot_shape(rng: np.random.Generator, tokens: int, slots: int, dtype: Any, pad: int = 0) -> np.ndarray:
    """``tokens`` distinct slots in [0, slots), the first ``pad`` of them -1 (padding tokens)."""
    chosen = rng.permutation(slots)[:tokens].astype(dtype)
    chosen[: min(pad, tokens)] = -1
    return chosen


# ----------------------------------------------------------------------------- ScatterPaKvCache
_SCATTER_CACHE_MODES = ("Norm", "PA_NZ")
_SCATTER_MODES = ("None", "Alibi", "Rope", "Omni", "Nct")


def _scatter_infer(call: Call) -> Infos:
    key, key_cache, slots = (tensor_arg(call, n) for n in ("key", "keyCacheRef", "slotMapping"))
    _mode(call.args.get("cacheModeOptional"), "Norm", ("Norm",), _SCATTER_CACHE_MODES, "cacheMode")
    _mode(call.args.get("scatterModeOptional"), "None", ("None",), _SCATTER_MODES, "scatterMode")
    compressed = ("compressLensOptional", "compressSeqOffsetOptional", "seqLensOptional")
    _absent(call, compressed, "the compressed scenarios (Alibi, Rope, Omni) are not implemented")
    _absent(call, ("stridesOptional", "offsetsOptional"), "they belong to scatterMode 'Nct', which is not implemented")
    if key.rank not in (3, 4):
        raise tiling(f"key must have rank 3 or 4, got shape {list(key.shape)}")
    if key.rank == 4:
        raise invalid(
            "a 4-d key belongs to the compressed scenario 3 (compressLens, seqLens), which is not implemented"
        )
    value = call.args.get("value")
    value_cache = call.args.get("valueCacheRef")
    with_value = value is not None and value.rank != 0
    if value is not None:
        if value.rank not in (0, 3):
            raise tiling(f"value must have rank 0 or 3 (as key), got shape {list(value.shape)}")
        if value.dtype != key.dtype:
            raise invalid(f"value has dtype {value.dtype.short}; it must match key's {key.dtype.short}")
        assert isinstance(value_cache, AclTensor)
        if value_cache.dtype != key.dtype:
            raise invalid(f"valueCacheRef has dtype {value_cache.dtype.short}; it must match key's {key.dtype.short}")
        if (value_cache.rank == 0) != (value.rank == 0):
            raise invalid("value and valueCacheRef must both be 0-d (key only) or both hold tensors")
    if key_cache.dtype != key.dtype:
        raise invalid(f"keyCacheRef has dtype {key_cache.dtype.short}; it must match key's {key.dtype.short}")
    t, n, _dk = key.shape
    if slots.rank != 1 or slots.shape[0] != t:
        raise invalid(f"slotMapping has shape {list(slots.shape)}; expected [{t}] (one slot per token of key)")
    pairs = [("key", key, "keyCacheRef", key_cache)]
    if with_value:
        assert isinstance(value, AclTensor) and isinstance(value_cache, AclTensor)
        if tuple(value.shape[:2]) != (t, n):
            raise invalid(f"value {list(value.shape)} must match key {list(key.shape)} in tokens and heads")
        pairs.append(("value", value, "valueCacheRef", value_cache))
    for name, x, cname, cache in pairs:
        if cache.rank != 4 or cache.shape[2] != n or cache.shape[3] != x.shape[2]:
            raise invalid(
                f"{cname} has shape {list(cache.shape)}; expected [num_blocks, block_size, {n}, {x.shape[2]}]"
                f" for {name}"
            )
    if with_value:
        assert isinstance(value_cache, AclTensor)
        if tuple(value_cache.shape[:2]) != tuple(key_cache.shape[:2]):
            raise invalid(
                f"valueCacheRef {list(value_cache.shape)} and keyCacheRef {list(key_cache.shape)} must have the same"
                " blocks and block size"
            )
    call.plan["with_value"] = with_value
    infos: dict[str, OutInfo | None] = {"keyCacheRef": same(key_cache.shape, key_cache.dtype), "valueCacheRef": None}
    if value_cache is not None:
        infos["valueCacheRef"] = same(value_cache.shape, value_cache.dtype)
    return infos


def _scatter_case(
    rng: np.random.Generator, dt: D, tokens: int, heads: int, dk: int, dv: int | None, blocks: int, bs: int, idx: Any
) -> dict[str, Any]:
    args: dict[str, Any] = {
        "key": S.array(rng, (tokens, heads, dk), dt),
        "keyCacheRef": S.array(rng, (blocks, bs, heads, dk), dt),
        "slotMapping": _slot_shape(rng, tokens, blocks * bs, idx, pad=1 if tokens > 3 else 0),
    }
    if dv is None:
        args |= {"value": S.array(rng, (), dt), "valueCacheRef": S.array(rng, (), dt)}
    else:
        args |= {
            "value": S.array(rng, (tokens, heads, dv), dt),
            "valueCacheRef": S.array(rng, (blocks, bs, heads, dv), dt),
        }
    return args


def _scatter_samples(rng: np.random.Generator) -> Iterable[Sample]:
    for i, dt in enumerate(SAMPLE_DTYPES):
        idx = np.int64 if i % 2 else np.int32
        yield Sample(_scatter_case(rng, dt, 6, 2, 8, 4, 3, 4, idx), f"{dt.short} k/v heads 2, 3 blocks of 4")
    for dt in (D.ACL_BF16, D.ACL_FLOAT16):
        args = _scatter_case(rng, dt, 37, 3, 24, 40, 16, 16, np.int64)
        args |= {"cacheModeOptional": "Norm", "scatterModeOptional": "None"}
        yield Sample(args, f"{dt.short} 37 tokens past a block, modes spelled out")
    yield Sample(_scatter_case(rng, D.ACL_FLOAT16, 5, 2, 16, None, 2, 8, np.int32), "fp16 key only (0-d value)")
    yield Sample(_scatter_case(rng, D.ACL_FLOAT, 0, 2, 8, 8, 2, 4, np.int64), "float32 no tokens")
    args = _scatter_case(rng, D.ACL_INT8, 4, 1, 32, 16, 2, 4, np.int32)
    args["slotMapping"] = np.array([-1, -1, -1, -1], np.int32)
    yield Sample(args, "int8 every token padding (-1)")


def _scatter_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    base = _scatter_case(rng, D.ACL_FLOAT16, 4, 2, 8, 8, 2, 4, np.int64)
    for mode in ("PA_NZ", "Paged"):
        yield ErrorSample({**base, "cacheModeOptional": mode}, INVALID, f"cacheMode {mode}")
    for mode in ("Alibi", "Rope", "Omni", "Nct", "Sparse"):
        yield ErrorSample({**base, "scatterModeOptional": mode}, INVALID, f"scatterMode {mode}")
    lens = np.array([4], np.int64)
    yield ErrorSample({**base, "compressLensOptional": lens}, INVALID, "compressLens given")
    yield ErrorSample({**base, "seqLensOptional": lens}, INVALID, "seqLens given")
    yield ErrorSample({**base, "stridesOptional": [1, 1]}, INVALID, "strides given")
    yield ErrorSample({**base, "key": base["key"][0]}, TILING, "2-d key")
    key4 = base["key"].reshape(1, 4, 2, 8)
    yield ErrorSample({**base, "key": key4, "value": key4.copy()}, INVALID, "4-d key (compressed scenario)")
    yield ErrorSample({**base, "value": base["value"][:3].copy()}, INVALID, "value has fewer tokens")
    yield ErrorSample({**base, "slotMapping": base["slotMapping"][:3].copy()}, INVALID, "slotMapping too short")
    yield ErrorSample({**base, "value": base["value"].astype(np.float32)}, INVALID, "value dtype differs")
    yield ErrorSample({**base, "keyCacheRef": base["keyCacheRef"][:, :, :1].copy()}, INVALID, "key cache heads")
    yield ErrorSample(
        {**base, "valueCacheRef": np.zeros((3, 4, 2, 8), np.float16)}, INVALID, "value cache has other blocks"
    )
    yield ErrorSample({**base, "valueCacheRef": np.zeros((), np.float16)}, INVALID, "0-d value cache for a value")
    yield ErrorSample({**base, "slotMapping": np.array([0, 1, 8, 2], np.int64)}, INVALID, "slot past the cache")
    yield ErrorSample({**base, "slotMapping": np.array([0, -2, 3, 2], np.int64)}, INVALID, "slot -2")


def _scatter_params(key_dtypes: frozenset[D]) -> tuple[Any, ...]:
    slot_mark = IndexOf("keyCacheRef", negative="pad", span=2)
    return (
        tensor("key", key_dtypes),
        ref("keyCacheRef", key_dtypes),
        tensor("slotMapping", INDEX, index_of=slot_mark),
        tensor("value", key_dtypes),
        ref("valueCacheRef", key_dtypes),
        tensor("compressLensOptional", INDEX, optional=True),
        tensor("compressSeqOffsetOptional", INDEX, optional=True),
        tensor("seqLensOptional", INDEX, optional=True),
        string_attr("cacheModeOptional", optional=True),
        string_attr("scatterModeOptional", optional=True),
        int_array("stridesOptional", optional=True),
        int_array("offsetsOptional", optional=True),
    )


SCATTER_PA_KV_CACHE = OpSpec(
    "ScatterPaKvCache",
    FAMILY,
    _scatter_params(CACHE_DTYPES),
    _scatter_infer,
    samples=_scatter_samples,
    error_samples=_scatter_errors,
    summary="key/value rows written into paged caches at slotMapping (reshape_and_cache; Norm mode)",
)


def _pa_cache_samples(rng: np.random.Generator) -> Iterable[Sample]:
    for i, dt in enumerate(SAMPLE_DTYPES):
        args = _scatter_case(rng, dt, 5, 2, 8, None, 3, 4, np.int64 if i % 2 else np.int32)
        yield Sample({k: args[k] for k in ("key", "keyCacheRef", "slotMapping")} | {"cacheMode": "Norm"}, dt.short)
    args = _scatter_case(rng, D.ACL_BF16, 41, 4, 32, None, 12, 16, np.int64)
    yield Sample({k: args[k] for k in ("key", "keyCacheRef", "slotMapping")} | {"cacheMode": "Norm"}, "bf16 41 tokens")


def _pa_cache_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    args = _scatter_case(rng, D.ACL_FLOAT16, 4, 2, 8, None, 2, 4, np.int64)
    base = {k: args[k] for k in ("key", "keyCacheRef", "slotMapping")} | {"cacheMode": "Norm"}
    yield ErrorSample({**base, "compressLensOptional": np.array([4], np.int64)}, INVALID, "compressLens given")
    yield ErrorSample({**base, "key": base["key"][0]}, TILING, "2-d key")
    yield ErrorSample({**base, "keyCacheRef": base["keyCacheRef"][..., :4].copy()}, INVALID, "cache head dim")
    yield ErrorSample({**base, "slotMapping": np.array([0, 1, 2, 8], np.int64)}, INVALID, "slot past the cache")


SCATTER_PA_CACHE = version_of(
    SCATTER_PA_KV_CACHE,
    "ScatterPaCache",
    (
        tensor("key", CACHE_DTYPES),
        ref("keyCacheRef", CACHE_DTYPES),
        tensor("slotMapping", INDEX, index_of=IndexOf("keyCacheRef", negative="pad", span=2)),
        "compressLensOptional",
        "compressSeqOffsetOptional",
        "seqLensOptional",
        "cacheMode",
    ),
    added={
        "cacheMode": Added(
            string_attr("cacheMode", optional=True), "is reserved (CANN: only ND caches; it takes no effect)", None
        )
    },
    fixed={
        "value": None,
        "valueCacheRef": None,
        "cacheModeOptional": None,
        "scatterModeOptional": None,
        "stridesOptional": None,
        "offsetsOptional": None,
    },
    samples=_pa_cache_samples,
    error_samples=_pa_cache_errors,
    summary="key rows written into a paged cache at slotMapping (ScatterPaKvCache without a value)",
)


# ----------------------------------------------------------------------------- GatherPaKvCache
def _gather_infer(call: Call) -> Infos:
    names = ("keyCache", "valueCache", "blockTables", "seqLens", "keyRef", "valueRef")
    kc, vc, tables, lens, key, value = (tensor_arg(call, n) for n in names)
    _mode(call.args.get("cacheMode"), "Norm", ("Norm",), ("Norm", "PA_NZ"), "cacheMode")
    for name, t in (("valueCache", vc), ("keyRef", key), ("valueRef", value)):
        if t.dtype != kc.dtype:
            raise invalid(f"{name} has dtype {t.dtype.short}; it must match keyCache's {kc.dtype.short}")
    for name, maybe in (("seqLens", lens), ("seqOffsetOptional", call.args.get("seqOffsetOptional"))):
        if maybe is not None and maybe.dtype != tables.dtype:
            raise invalid(f"{name} has dtype {maybe.dtype.short}; it must match blockTables' {tables.dtype.short}")
    if kc.rank != 4 or vc.rank != 4 or tuple(kc.shape[:3]) != tuple(vc.shape[:3]):
        raise invalid(
            f"keyCache {list(kc.shape)} and valueCache {list(vc.shape)} must be [num_blocks, block_size, heads, D]"
            " with the same blocks, block size and heads (cacheMode Norm)"
        )
    heads = kc.shape[2]
    for name, t, cache in (("keyRef", key, kc), ("valueRef", value, vc)):
        if t.rank != 3 or t.shape[1] != heads or t.shape[2] != cache.shape[3]:
            raise invalid(f"{name} has shape {list(t.shape)}; expected [num_tokens, {heads}, {cache.shape[3]}]")
    if key.shape[0] != value.shape[0]:
        raise invalid(f"keyRef {list(key.shape)} and valueRef {list(value.shape)} must have the same tokens")
    if tables.rank != 2:
        raise invalid(f"blockTables must be [batch, blocks], got shape {list(tables.shape)}")
    batch = tables.shape[0]
    want = batch + 1 if call.args["isSeqLensCumsum"] else batch
    if lens.rank != 1 or lens.shape[0] != want:
        raise invalid(
            f"seqLens has shape {list(lens.shape)}; expected [{want}] (isSeqLensCumsum "
            f"{str(bool(call.args['isSeqLensCumsum'])).lower()})"
        )
    offset = call.args.get("seqOffsetOptional")
    if offset is not None and (offset.rank != 1 or offset.shape[0] != batch):
        raise invalid(f"seqOffsetOptional has shape {list(offset.shape)}; expected [{batch}]")
    return {"keyRef": same(key.shape, key.dtype), "valueRef": same(value.shape, value.dtype)}


def _gather_case(
    rng: np.random.Generator,
    dt: D,
    lengths: list[int],
    *,
    heads: int = 2,
    dk: int = 8,
    dv: int = 4,
    bs: int = 4,
    width: int = 4,
    tokens: int | None = None,
    cumsum: bool = False,
    offsets: list[int] | None = None,
    idx: Any = np.int32,
) -> dict[str, Any]:
    batch = len(lengths)
    blocks = batch * width + 1
    tables = rng.permutation(blocks)[: batch * width].reshape(batch, width).astype(idx)
    total = sum(lengths)
    n = total if tokens is None else tokens
    lens = np.concatenate([[0], np.cumsum(lengths)]) if cumsum else np.array(lengths)
    args: dict[str, Any] = {
        "keyCache": S.array(rng, (blocks, bs, heads, dk), dt),
        "valueCache": S.array(rng, (blocks, bs, heads, dv), dt),
        "blockTables": tables,
        "seqLens": lens.astype(idx),
        "keyRef": S.array(rng, (n, heads, dk), dt),
        "valueRef": S.array(rng, (n, heads, dv), dt),
        "cacheMode": "Norm",
        "isSeqLensCumsum": cumsum,
    }
    if offsets is not None:
        args["seqOffsetOptional"] = np.array(offsets, idx)
    return args


def _gather_samples(rng: np.random.Generator) -> Iterable[Sample]:
    for i, dt in enumerate(SAMPLE_DTYPES):
        idx = np.int64 if i % 2 else np.int32
        yield Sample(_gather_case(rng, dt, [3, 5, 0, 7], idx=idx), f"{dt.short} four sequences")
    yield Sample(_gather_case(rng, D.ACL_FLOAT16, [2, 9, 4], cumsum=True), "fp16 cumulative lengths")
    yield Sample(
        _gather_case(rng, D.ACL_BF16, [3, 6], offsets=[5, 2], idx=np.int64), "bf16 seqOffset (whole blocks skipped)"
    )
    yield Sample(_gather_case(rng, D.ACL_FLOAT, [4, 6, 3], tokens=8), "float32 fewer rows than tokens: truncated")
    yield Sample(_gather_case(rng, D.ACL_INT8, [2, 3], tokens=9), "int8 more rows than tokens: the rest kept")
    big = _gather_case(rng, D.ACL_BF16, [45, 17, 64], heads=4, dk=32, dv=16, bs=16, width=4, idx=np.int64)
    yield Sample(big, "bf16 126 tokens, blocks of 16")
    yield Sample(_gather_case(rng, D.ACL_FLOAT16, [0, 0]), "fp16 empty sequences")


def _gather_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    base = _gather_case(rng, D.ACL_FLOAT16, [3, 5], idx=np.int32)
    yield ErrorSample({**base, "cacheMode": "PA_NZ"}, INVALID, "cacheMode PA_NZ")
    yield ErrorSample({**base, "cacheMode": "ND"}, INVALID, "unknown cacheMode")
    yield ErrorSample({**base, "seqLens": base["seqLens"].astype(np.int64)}, INVALID, "seqLens dtype")
    yield ErrorSample({**base, "isSeqLensCumsum": True}, INVALID, "cumulative list one short")
    yield ErrorSample({**base, "keyRef": base["keyRef"][:, :1].copy()}, INVALID, "keyRef heads")
    yield ErrorSample({**base, "valueRef": base["valueRef"][:4].copy()}, INVALID, "valueRef tokens")
    yield ErrorSample({**base, "blockTables": base["blockTables"][0].copy()}, INVALID, "1-d blockTables")
    yield ErrorSample({**base, "valueCache": base["valueCache"][:2].copy()}, INVALID, "value cache blocks")
    bad = base["blockTables"].copy()
    bad[1, 1] = base["keyCache"].shape[0]
    yield ErrorSample({**base, "blockTables": bad}, INVALID, "block id past the cache")
    bad = base["blockTables"].copy()
    bad[0, 0] = -1
    yield ErrorSample({**base, "blockTables": bad}, INVALID, "negative block id")
    yield ErrorSample({**base, "seqLens": np.array([3, -1], np.int32)}, INVALID, "negative length")
    long = _gather_case(rng, D.ACL_FLOAT16, [3, 17])  # 17 tokens need 5 blocks of 4; the table has 4 columns
    yield ErrorSample(long, INVALID, "sequence past the block table")
    yield ErrorSample(
        {**base, "seqOffsetOptional": np.array([0, 12], np.int32)}, INVALID, "seqOffset past the block table"
    )
    yield ErrorSample({**base, "seqOffsetOptional": np.array([-4, 0], np.int32)}, INVALID, "negative seqOffset")
    cum = _gather_case(rng, D.ACL_FLOAT16, [3, 5], cumsum=True)
    yield ErrorSample({**cum, "seqLens": np.array([1, 3, 8], np.int32)}, INVALID, "cumulative list not from 0")
    yield ErrorSample({**cum, "seqLens": np.array([0, 5, 3], np.int32)}, INVALID, "cumulative list decreasing")


GATHER_PA_KV_CACHE = OpSpec(
    "GatherPaKvCache",
    FAMILY,
    (
        tensor("keyCache", CACHE_DTYPES),
        tensor("valueCache", CACHE_DTYPES),
        tensor("blockTables", INDEX),
        tensor("seqLens", INDEX),
        ref("keyRef", CACHE_DTYPES),
        ref("valueRef", CACHE_DTYPES),
        tensor("seqOffsetOptional", INDEX, optional=True),
        string_attr("cacheMode", optional=True),
        bool_attr("isSeqLensCumsum", default=False),
    ),
    _gather_infer,
    samples=_gather_samples,
    error_samples=_gather_errors,
    summary="sequences gathered from paged key/value caches by block table into contiguous rows (Norm mode)",
)


# ----------------------------------------------------------------------------- KvRmsNormRopeCache
_KV_MODES = {"Norm": "norm", "PA": "paged", "PA_BNSD": "paged", "PA_BLK_BNSD": "paged_blocks"}
_KV_DOCUMENTED = ("Norm", "PA", "PA_BNSD", "PA_NZ", "PA_BLK_BNSD", "PA_BLK_NZ")


def kv_index_shape(mode: str, b: int, s: int, block_size: int) -> tuple[int, ...]:
    """The shape KvRmsNormRopeCache's index takes in cache mode ``mode`` (a plan value)."""
    if mode == "norm":
        return (b, s)
    if mode == "paged":
        return (b * s,)
    return (b * -(-s // block_size),)


def _kv_infer(call: Call) -> Infos:
    kv, gamma, cos, sin, index = (tensor_arg(call, n) for n in ("kv", "gamma", "cos", "sin", "index"))
    kc, vc = tensor_arg(call, "kCacheRef"), tensor_arg(call, "ckvCacheRef")
    name = _mode(call.args.get("cacheModeOptional"), "Norm", tuple(_KV_MODES), _KV_DOCUMENTED, "cacheMode")
    mode = _KV_MODES[name]
    quant = ("kRopeScaleOptional", "ckvScaleOptional", "kRopeOffsetOptional", "cKvOffsetOptional")
    _absent(call, quant, "quantised caches are not implemented")
    for pname, t in (("gamma", gamma), ("cos", cos), ("sin", sin), ("kCacheRef", kc), ("ckvCacheRef", vc)):
        if t.dtype != kv.dtype:
            raise invalid(f"{pname} has dtype {t.dtype.short}; it must match kv's {kv.dtype.short}")
    if kv.rank != 4:
        raise tiling(f"kv must be [Bkv, N, Skv, D], got shape {list(kv.shape)}")
    b, n, s, d = kv.shape
    if n != 1:
        raise tiling(f"kv has N={n} heads; KvRmsNormRopeCache supports N=1 only")
    if gamma.rank != 1 or cos.rank != 4:
        raise tiling(f"gamma must be [Dv] and cos [Bkv, 1, Skv|1, Dk], got {list(gamma.shape)} and {list(cos.shape)}")
    dv, dk = gamma.shape[0], cos.shape[3]
    if dv + dk != d or dk % 2 or dv == 0 or dk == 0:
        raise tiling(f"kv's D={d} must be gamma's Dv={dv} plus cos's Dk={dk}, with Dk even and both positive")
    if tuple(sin.shape) != tuple(cos.shape) or cos.shape[0] != b or cos.shape[1] != 1 or cos.shape[2] not in (1, s):
        raise tiling(
            f"cos {list(cos.shape)} and sin {list(sin.shape)} must both be [{b}, 1, {s}, {dk}] or [{b}, 1, 1, {dk}]"
        )
    if kc.rank != 4 or vc.rank != 4:
        raise tiling(f"kCacheRef {list(kc.shape)} and ckvCacheRef {list(vc.shape)} must have rank 4")
    if mode == "norm":
        if kc.shape[1] != n or vc.shape[1] != n or kc.shape[0] < b or tuple(vc.shape[:3]) != tuple(kc.shape[:3]):
            raise tiling(
                f"Norm caches must be [Bcache >= {b}, {n}, Scache, D] alike, got {list(kc.shape)} and {list(vc.shape)}"
            )
        block_size = 0
    else:
        if kc.shape[2] != n or tuple(vc.shape[:3]) != tuple(kc.shape[:3]):
            raise tiling(
                f"PA caches must be [num_blocks, block_size, {n}, D] alike, got {list(kc.shape)} and {list(vc.shape)}"
            )
        block_size = kc.shape[1]
        if block_size % 16:
            raise tiling(f"block_size {block_size} must be a multiple of 16 (16-bit caches) in cache mode {name}")
    if kc.shape[3] != dk or vc.shape[3] != dv:
        raise tiling(f"kCacheRef's last dim must be Dk={dk} and ckvCacheRef's Dv={dv}")
    want = kv_index_shape(mode, b, s, block_size)
    if tuple(index.shape) != want:
        raise tiling(f"index has shape {list(index.shape)}; cache mode {name} takes {list(want)}")
    call.plan["kv_cache_mode"] = mode
    infos: dict[str, OutInfo | None] = {
        "kCacheRef": same(kc.shape, kc.dtype),
        "ckvCacheRef": same(vc.shape, vc.dtype),
        "kRopeOut": None,
        "cKvOut": None,
    }
    if call.args["isOutputKv"]:
        for oname, width in (("kRopeOut", dk), ("cKvOut", dv)):
            if call.args.get(oname) is None and call.outputs_required:
                raise nullptr(f"isOutputKv is true but {oname} is null")
            infos[oname] = same((b, n, s, width), kv.dtype)
    return infos


def _kv_case(
    rng: np.random.Generator,
    dt: D,
    mode: str,
    b: int,
    s: int,
    dv: int,
    dk: int,
    *,
    cos_s: int | None = None,
    output: bool = True,
    blocks: int = 4,
    block_size: int = 16,
) -> dict[str, Any]:
    angles = rng.uniform(0, 2 * np.pi, size=(b, 1, s if cos_s is None else cos_s, dk))
    inner = _KV_MODES[mode]
    if inner == "norm":
        scache = s + 3
        kshape, vshape = (b + 1, 1, scache, dk), (b + 1, 1, scache, dv)
        index = np.stack([rng.permutation(scache)[:s] for _ in range(b)]).astype(np.int64)
    else:
        kshape, vshape = (blocks, block_size, 1, dk), (blocks, block_size, 1, dv)
        slots = blocks * block_size
        if inner == "paged":
            index = rng.permutation(slots)[: b * s].astype(np.int64)
        else:
            per = -(-s // block_size)
            index = (rng.permutation(blocks)[: b * per] * block_size).astype(np.int64)
    flat = index.reshape(-1)
    if flat.size > 2:
        flat[1] = -1
    return {
        "kv": S.array(rng, (b, 1, s, dv + dk), dt),
        "gamma": S.array(rng, (dv,), dt, low=-2, high=2),
        "cos": np.cos(angles).astype(dt.numpy),
        "sin": np.sin(angles).astype(dt.numpy),
        "index": index,
        "kCacheRef": S.array(rng, kshape, dt),
        "ckvCacheRef": S.array(rng, vshape, dt),
        "epsilon": 1e-5,
        "cacheModeOptional": mode,
        "isOutputKv": output,
    }


def _kv_samples(rng: np.random.Generator) -> Iterable[Sample]:
    for dt in (D.ACL_FLOAT16, D.ACL_BF16):
        yield Sample(_kv_case(rng, dt, "Norm", 2, 3, 32, 16), f"{dt.short} Norm")
        yield Sample(_kv_case(rng, dt, "PA", 5, 1, 48, 16), f"{dt.short} PA decode")
        yield Sample(_kv_case(rng, dt, "PA_BNSD", 2, 3, 32, 8, cos_s=1, output=False), f"{dt.short} PA_BNSD no kv out")
        yield Sample(_kv_case(rng, dt, "PA_BLK_BNSD", 2, 20, 16, 16, blocks=5), f"{dt.short} PA_BLK_BNSD")
    yield Sample(_kv_case(rng, D.ACL_BF16, "PA", 3, 1, 512, 64, blocks=2), "bf16 DeepSeek dims (512 + 64)")


def _kv_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    base = _kv_case(rng, D.ACL_FLOAT16, "PA", 2, 1, 32, 16)
    for mode in ("PA_NZ", "PA_BLK_NZ", "ND"):
        yield ErrorSample({**base, "cacheModeOptional": mode}, INVALID, f"cacheMode {mode}")
    scale = np.ones((16,), np.float32)
    yield ErrorSample({**base, "kRopeScaleOptional": scale}, INVALID, "quantisation scale")
    yield ErrorSample({**base, "kCacheRef": base["kCacheRef"].astype(np.int8)}, INVALID, "int8 cache")
    kv2 = np.concatenate([base["kv"], base["kv"]], axis=1)
    yield ErrorSample({**base, "kv": kv2}, TILING, "two heads")
    yield ErrorSample({**base, "gamma": base["gamma"][:30].copy()}, TILING, "gamma's Dv")
    odd = base["cos"][..., :15].copy()
    yield ErrorSample({**base, "cos": odd, "sin": odd.copy()}, TILING, "odd Dk")
    yield ErrorSample({**base, "index": base["index"][:1].copy()}, TILING, "index shape")
    yield ErrorSample({**base, "kCacheRef": base["kCacheRef"][:, :8].copy()}, TILING, "block size 8")
    yield ErrorSample({**base, "index": np.array([0, 64], np.int64)}, INVALID, "slot past the cache")
    yield ErrorSample({**base, "index": np.array([-2, 3], np.int64)}, INVALID, "slot -2")
    norm = _kv_case(rng, D.ACL_FLOAT16, "Norm", 2, 3, 32, 16)
    bad = norm["index"].copy()
    bad[1, 2] = norm["kCacheRef"].shape[2]
    yield ErrorSample({**norm, "index": bad}, INVALID, "Norm index past Scache")


KV_RMS_NORM_ROPE_CACHE = OpSpec(
    "KvRmsNormRopeCache",
    FAMILY,
    (
        tensor("kv", HALF),
        tensor("gamma", HALF),
        tensor("cos", HALF),
        tensor("sin", HALF),
        tensor("index", {D.ACL_INT64}),
        ref("kCacheRef", HALF),
        ref("ckvCacheRef", HALF),
        # CANN's FLOAT scales and offsets of quantised caches: they must stay null here, so they declare no
        # dtype set (as the versions' refused tensors): no value case could prove a FLOAT claim for them
        tensor("kRopeScaleOptional", None, optional=True),
        tensor("ckvScaleOptional", None, optional=True),
        tensor("kRopeOffsetOptional", None, optional=True),
        tensor("cKvOffsetOptional", None, optional=True),
        float_attr("epsilon", default=1e-5),
        string_attr("cacheModeOptional", optional=True),
        bool_attr("isOutputKv", default=False),
        out("kRopeOut", HALF, optional=True),
        out("cKvOut", HALF, optional=True),
    ),
    _kv_infer,
    samples=_kv_samples,
    error_samples=_kv_errors,
    summary="MLA: RmsNorm of kv's first Dv elements and de-interleaved RoPE of the last Dk, written to caches",
)


# ----------------------------------------------------------------------------- RopeWithSinCosCache(V2)
_MROPE_V2 = ((16, 24, 24), (24, 20, 20), (8, 12, 12), (16, 16, 16, 16))
_MROPE_V1 = ((16, 24, 24),)


def _rope_cache_infer(call: Call) -> Infos:
    pos, q, k, cache = (tensor_arg(call, n) for n in ("positions", "queryIn", "keyIn", "cosSinCache"))
    for name, t in (("keyIn", k), ("cosSinCache", cache)):
        if t.dtype != q.dtype:
            raise invalid(f"{name} has dtype {t.dtype.short}; it must match queryIn's {q.dtype.short}")
    for name, t in (("positions", pos), ("queryIn", q), ("keyIn", k), ("cosSinCache", cache)):
        if t.numel == 0:
            raise invalid(f"{name} is empty; empty tensors are not supported")
    if q.rank != 2 or k.rank != 2 or cache.rank != 2:
        raise tiling(
            f"queryIn, keyIn and cosSinCache must be 2-d, got {list(q.shape)}, {list(k.shape)}, {list(cache.shape)}"
        )
    head = call.args["headSize"]
    align = 16 if q.dtype == D.ACL_FLOAT else 32
    if head <= 0 or head % align:
        raise tiling(f"headSize={head} must be a positive multiple of {align} for {q.dtype.short}")
    rotary = cache.shape[1]
    if rotary > head or rotary % align:
        raise tiling(f"rotaryDim={rotary} (cosSinCache's last dim) must be a multiple of {align} and at most headSize")
    tokens = q.shape[0]
    for name, t in (("queryIn", q), ("keyIn", k)):
        if t.shape[0] != tokens or t.shape[1] % head:
            raise tiling(f"{name} has shape {list(t.shape)}; expected [{tokens}, heads * {head}]")
    sections_arg = call.args.get("mropeSection")
    cache_mode = int(call.args.get("cacheMode", 0))
    ends: list[int] = []
    if sections_arg is None:
        if pos.rank != 1 or pos.shape[0] != tokens:
            raise tiling(f"positions has shape {list(pos.shape)}; rope mode takes [{tokens}]")
    else:
        assert isinstance(sections_arg, AclIntArray)
        sections = tuple(int(v) for v in sections_arg.values)
        if sections not in _MROPE_V2:
            raise invalid(f"mropeSection {list(sections)} is not supported (CANN: {[list(s) for s in _MROPE_V2]})")
        if cache_mode == 1 and len(sections) == 4:
            raise invalid("cacheMode 1 (interleaved mrope) does not take 4 sections")
        if sum(sections) * 2 != rotary:
            raise tiling(f"mropeSection {list(sections)} must add up to rotaryDim/2 = {rotary // 2}")
        if tuple(pos.shape) != (len(sections), tokens):
            raise tiling(f"positions has shape {list(pos.shape)}; mrope takes [{len(sections)}, {tokens}]")
        ends = [int(v) for v in np.cumsum(sections)]
    call.plan["rope_sections"] = ends
    call.plan["rope_interleaved"] = cache_mode == 1 and bool(ends)
    return {"queryOut": same(q.shape, q.dtype), "keyOut": same(k.shape, k.dtype)}


def _rope_cache_case(
    rng: np.random.Generator,
    dt: D,
    *,
    tokens: int = 3,
    nq: int = 2,
    nk: int = 1,
    head: int = 64,
    rotary: int = 64,
    sections: tuple[int, ...] | None = None,
    neox: bool = True,
    cache_mode: int = 0,
    max_len: int = 16,
) -> dict[str, Any]:
    angles = rng.uniform(0, 2 * np.pi, size=(max_len, rotary // 2))
    cache = np.concatenate([np.cos(angles), np.sin(angles)], axis=-1).astype(dt.numpy)
    shape = (tokens,) if sections is None else (len(sections), tokens)
    return {
        "positions": rng.integers(0, max_len, size=shape).astype(np.int64),
        "queryIn": S.array(rng, (tokens, nq * head), dt),
        "keyIn": S.array(rng, (tokens, nk * head), dt),
        "cosSinCache": cache,
        "mropeSection": None if sections is None else list(sections),
        "headSize": head,
        "isNeoxStyle": neox,
        "cacheMode": cache_mode,
    }


def _rope_cache_samples(rng: np.random.Generator) -> Iterable[Sample]:
    for dt in (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16):
        for neox in (True, False):
            style = "neox" if neox else "gpt-j"
            yield Sample(_rope_cache_case(rng, dt, neox=neox), f"{dt.short} {style} rotaryDim = headSize")
            yield Sample(
                _rope_cache_case(rng, dt, head=96 if dt != D.ACL_FLOAT else 48, rotary=32, neox=neox),
                f"{dt.short} {style} partial rotary",
            )
        yield Sample(
            _rope_cache_case(rng, dt, head=128, rotary=128, sections=(16, 24, 24)), f"{dt.short} mrope [16,24,24]"
        )
    for sections, mode in (((24, 20, 20), 1), ((8, 12, 12), 0), ((16, 16, 16, 16), 0), ((16, 24, 24), 1)):
        rotary = 2 * sum(sections)
        args = _rope_cache_case(
            rng, D.ACL_BF16, head=128, rotary=rotary, sections=sections, cache_mode=mode, neox=False
        )
        yield Sample(args, f"bf16 gpt-j mrope {list(sections)} cacheMode {mode}")
    args = _rope_cache_case(rng, D.ACL_FLOAT16, tokens=37, nq=8, nk=2, head=128, rotary=128, max_len=64)
    yield Sample(args, "fp16 37 tokens 8/2 heads (blocks)")


def _rope_cache_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    base = _rope_cache_case(rng, D.ACL_FLOAT16)
    yield ErrorSample({**base, "headSize": 48}, TILING, "headSize not a multiple of 32")
    yield ErrorSample({**base, "headSize": 32}, TILING, "rotaryDim past headSize")
    yield ErrorSample({**base, "keyIn": base["keyIn"][:2].copy()}, TILING, "keyIn tokens")
    yield ErrorSample({**base, "queryIn": base["queryIn"][:, :96].copy()}, TILING, "queryIn not whole heads")
    yield ErrorSample({**base, "positions": base["positions"][:2].copy()}, TILING, "positions length")
    yield ErrorSample({**base, "cosSinCache": base["cosSinCache"].astype(np.float32)}, INVALID, "cache dtype")
    yield ErrorSample({**base, "mropeSection": [8, 8, 16]}, INVALID, "unsupported mropeSection")
    m = _rope_cache_case(rng, D.ACL_FLOAT16, head=128, rotary=128, sections=(16, 24, 24))
    yield ErrorSample({**m, "positions": m["positions"][0].copy()}, TILING, "mrope with 1-d positions")
    yield ErrorSample({**m, "mropeSection": [8, 12, 12]}, TILING, "sections against rotaryDim")
    yield ErrorSample({**base, "positions": np.array([0, 16, 1], np.int64)}, INVALID, "position past the cache")


ROPE_WITH_SIN_COS_CACHE_V2 = OpSpec(
    "RopeWithSinCosCacheV2",
    FAMILY,
    (
        tensor("positions", {D.ACL_INT64}, index_of=IndexOf("cosSinCache")),
        tensor("queryIn", FLOATS),
        tensor("keyIn", FLOATS),
        tensor("cosSinCache", FLOATS),
        int_array("mropeSection", optional=True),
        int_attr("headSize"),
        bool_attr("isNeoxStyle", default=True),
        int_attr("cacheMode", choices=(0, 1), default=0),
        out("queryOut", FLOATS),
        out("keyOut", FLOATS),
    ),
    _rope_cache_infer,
    samples=_rope_cache_samples,
    error_samples=_rope_cache_errors,
    summary="rotary embedding of query and key with cos/sin gathered from a cache by position (rope / mrope)",
)


def _v1_sections(call: Call) -> None:
    sections = call.args.get("mropeSection")
    if isinstance(sections, AclIntArray) and tuple(sections.values) not in _MROPE_V1:
        raise invalid(f"mropeSection {list(sections.values)} is not supported (CANN: [16, 24, 24])")


def _v1_case(args: dict[str, Any]) -> dict[str, Any] | None:
    sections = args.get("mropeSection")
    return None if sections is not None and tuple(sections) not in _MROPE_V1 else args


ROPE_WITH_SIN_COS_CACHE = version_of(
    ROPE_WITH_SIN_COS_CACHE_V2,
    "RopeWithSinCosCache",
    ("positions", "queryIn", "keyIn", "cosSinCache", "mropeSection", "headSize", "isNeoxStyle", "queryOut", "keyOut"),
    fixed={"cacheMode": 0},
    check=_v1_sections,
    adapt=_v1_case,
    summary="RopeWithSinCosCacheV2 with cacheMode 0 (mropeSection [16, 24, 24] only)",
)


# ----------------------------------------------------------------------------- declarations
SPECS: list[OpSpec] = with_accuracy(
    [
        SCATTER_PA_KV_CACHE,
        SCATTER_PA_CACHE,
        GATHER_PA_KV_CACHE,
        KV_RMS_NORM_ROPE_CACHE,
        ROPE_WITH_SIN_COS_CACHE_V2,
        ROPE_WITH_SIN_COS_CACHE,
    ],
    {
        "ScatterPaKvCache": exact("data movement: every cache row written is a copy of a key or value row"),
        "GatherPaKvCache": exact("data movement: every row gathered is a copy of a cache row"),
        "KvRmsNormRopeCache": table(
            "RmsNorm of the first Dv elements beside a rotation of the last Dk: the rotation negates half of x, so the"
            " magnitudes run cannot form its scale, and one class would have to cover both outputs"
        ),
        "RopeWithSinCosCacheV2": table(
            "x·cos + rotate(x)·sin: rotate negates half of x, so the magnitudes run (|inputs|) gives |x||cos| -"
            " |x'||sin|, not Σ|terms|; needs its own scale"
        ),
    },
)

"""The reference's KV-cache family (and the rotary versions and ScatterNdUpdate beside it) against torch.

Paged scatters are checked against torch's ``index_copy_`` on the flattened cache, GatherPaKvCache against
each sequence's blocks concatenated with torch indexing, KvRmsNormRopeCache and RopeWithSinCosCache against
the formulas of CANN's documents written here with torch in float64, InterleaveRope against its
reshape/transpose formula, ScatterNdUpdate against torch's ``index_put_``; plus the codes of the rules,
the refused modes (161002 naming the mode) and the index values only a kernel sees.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from acl_core import eager
from acl_core.errors import AclnnError
from acl_core.spec.ops import get_spec
from tests.conftest import assert_close
from tests.ops.torch_ref import to_numpy, to_torch

BF16 = ml_dtypes.bfloat16


def ref(op: str, **kwargs: Any) -> dict[str, Any]:
    """Run ``op`` on the reference with arguments by official name."""
    return eager.run(op, "reference", op_args=kwargs)


def refused(op: str, **kwargs: Any) -> AclnnError:
    with pytest.raises(AclnnError) as info:
        ref(op, **kwargs)
    return info.value


def f64(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.asarray(a).astype(np.float64))


# ----------------------------------------------------------------------------- ScatterPaKvCache / ScatterPaCache
def _torch_scatter(cache: np.ndarray, rows: np.ndarray, slots: np.ndarray) -> np.ndarray:
    """torch's index_copy_ of the non-padding rows into the cache seen as [slots, heads, dim]."""
    c = to_torch(cache).clone()
    flat = c.view(-1, *c.shape[2:])
    keep = slots >= 0
    flat.index_copy_(0, torch.from_numpy(slots[keep].astype(np.int64)), to_torch(rows)[torch.from_numpy(keep)])
    return to_numpy(c)


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32, np.int8], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_scatter_pa_kv_cache_is_index_copy_into_the_flattened_caches(dtype: Any, index_dtype: Any) -> None:
    rng = np.random.default_rng(5)
    blocks, bs, heads, dk, dv, tokens = 6, 8, 3, 16, 24, 20
    key = (rng.standard_normal((tokens, heads, dk)) * 3).astype(dtype)
    value = (rng.standard_normal((tokens, heads, dv)) * 3).astype(dtype)
    kc = (rng.standard_normal((blocks, bs, heads, dk)) * 3).astype(dtype)
    vc = (rng.standard_normal((blocks, bs, heads, dv)) * 3).astype(dtype)
    slots = rng.permutation(blocks * bs)[:tokens].astype(index_dtype)
    slots[[2, 11]] = -1  # padding tokens: skipped
    got = ref("ScatterPaKvCache", key=key, keyCacheRef=kc, slotMapping=slots, value=value, valueCacheRef=vc)
    np.testing.assert_array_equal(got["keyCacheRef"], _torch_scatter(kc, key, slots))
    np.testing.assert_array_equal(got["valueCacheRef"], _torch_scatter(vc, value, slots))


def test_scatter_pa_kv_cache_writes_slot_s_to_block_s_div_bs_row_s_mod_bs() -> None:
    key = np.arange(2 * 1 * 2, dtype=np.float32).reshape(2, 1, 2) + 1
    kc = np.zeros((3, 4, 1, 2), np.float32)
    got = ref(
        "ScatterPaKvCache",
        key=key,
        keyCacheRef=kc,
        slotMapping=np.array([9, 2]),
        value=np.zeros((), np.float32),
        valueCacheRef=np.zeros((), np.float32),
    )["keyCacheRef"]
    want = np.zeros_like(kc)
    want[2, 1, 0], want[0, 2, 0] = key[0, 0], key[1, 0]
    np.testing.assert_array_equal(got, want)


def test_scatter_pa_cache_is_the_key_half_of_scatter_pa_kv_cache(rng: np.random.Generator) -> None:
    key = rng.standard_normal((7, 2, 8)).astype(np.float16)
    kc = rng.standard_normal((4, 4, 2, 8)).astype(np.float16)
    slots = rng.permutation(16)[:7]
    got = ref("ScatterPaCache", key=key, keyCacheRef=kc, slotMapping=slots, cacheMode="Norm")["keyCacheRef"]
    np.testing.assert_array_equal(got, _torch_scatter(kc, key, slots))
    # the cache mode is reserved: it takes no effect
    other = ref("ScatterPaCache", key=key, keyCacheRef=kc, slotMapping=slots, cacheMode="anything")["keyCacheRef"]
    np.testing.assert_array_equal(other, got)


@pytest.mark.parametrize(
    ("attr", "mode"),
    [
        ("cacheModeOptional", "PA_NZ"),
        ("scatterModeOptional", "Alibi"),
        ("scatterModeOptional", "Rope"),
        ("scatterModeOptional", "Omni"),
        ("scatterModeOptional", "Nct"),
    ],
)
def test_unimplemented_scatter_modes_are_refused_naming_the_mode(attr: str, mode: str) -> None:
    args = _scatter_args()
    err = refused("ScatterPaKvCache", **args, **{attr: mode})
    assert err.code == 161002 and repr(mode) in str(err) and "not implemented" in str(err)


def _scatter_args() -> dict[str, Any]:
    key = np.ones((2, 1, 4), np.float16)
    return {
        "key": key,
        "keyCacheRef": np.zeros((2, 4, 1, 4), np.float16),
        "slotMapping": np.array([0, 5]),
        "value": key.copy(),
        "valueCacheRef": np.zeros((2, 4, 1, 4), np.float16),
    }


@pytest.mark.parametrize("slot", [8, -2, 100])
def test_a_slot_outside_the_cache_is_refused_at_launch_and_nothing_is_written(slot: int) -> None:
    args = _scatter_args()
    args["slotMapping"] = np.array([1, slot])
    cache = eager.to_device(args["keyCacheRef"], "reference")
    err = refused("ScatterPaKvCache", **{**args, "keyCacheRef": cache})
    assert err.code == 161002 and str(slot) in str(err)
    np.testing.assert_array_equal(cache.numpy(), args["keyCacheRef"])


def test_scatter_rank_and_shape_codes() -> None:
    args = _scatter_args()
    assert refused("ScatterPaKvCache", **{**args, "key": np.ones((2, 4), np.float16)}).code == 561002
    assert refused("ScatterPaKvCache", **{**args, "slotMapping": np.array([0])}).code == 161002
    assert refused("ScatterPaKvCache", **{**args, "compressLensOptional": np.array([1, 1])}).code == 161002


# ----------------------------------------------------------------------------- GatherPaKvCache
def _torch_gather(cache: np.ndarray, tables: np.ndarray, lengths: list[int], offsets: list[int]) -> list[torch.Tensor]:
    """Each sequence's rows: its blocks (from offset // block_size on) concatenated, the first ``length`` kept."""
    c = to_torch(cache)
    bs = c.shape[1]
    out = []
    for b, (n, off) in enumerate(zip(lengths, offsets)):
        picked = torch.from_numpy(tables[b, off // bs :].astype(np.int64))
        out.append(c[picked].reshape(-1, *c.shape[2:])[:n])
    return out


@pytest.mark.parametrize("cumulative", [False, True])
@pytest.mark.parametrize("with_offset", [False, True])
def test_gather_pa_kv_cache_concatenates_each_sequences_blocks(cumulative: bool, with_offset: bool) -> None:
    rng = np.random.default_rng(11)
    lengths, offsets = [5, 0, 9, 3], ([7, 0, 2, 13] if with_offset else [0, 0, 0, 0])
    blocks, bs, heads = 30, 4, 2
    kc = rng.standard_normal((blocks, bs, heads, 8)).astype(BF16)
    vc = rng.standard_normal((blocks, bs, heads, 6)).astype(BF16)
    tables = rng.permutation(blocks)[:28].reshape(4, 7).astype(np.int32)
    total = sum(lengths)
    lens = np.concatenate([[0], np.cumsum(lengths)]) if cumulative else np.array(lengths)
    key, value = np.zeros((total + 2, heads, 8), BF16), np.ones((total + 2, heads, 6), BF16)
    args = {
        "keyCache": kc,
        "valueCache": vc,
        "blockTables": tables,
        "seqLens": lens.astype(np.int32),
        "keyRef": key,
        "valueRef": value,
        "cacheMode": "Norm",
        "isSeqLensCumsum": cumulative,
    }
    if with_offset:
        args["seqOffsetOptional"] = np.array(offsets, np.int32)
    got = ref("GatherPaKvCache", **args)
    want_k = torch.cat(_torch_gather(kc, tables, lengths, offsets))
    want_v = torch.cat(_torch_gather(vc, tables, lengths, offsets))
    np.testing.assert_array_equal(got["keyRef"][:total], to_numpy(want_k))
    np.testing.assert_array_equal(got["valueRef"][:total], to_numpy(want_v))
    np.testing.assert_array_equal(got["keyRef"][total:], key[total:])  # rows past the sequences stay
    np.testing.assert_array_equal(got["valueRef"][total:], value[total:])


def test_gather_pa_kv_cache_truncates_at_the_rows_given() -> None:
    rng = np.random.default_rng(2)
    kc = rng.standard_normal((9, 4, 1, 4)).astype(np.float32)
    tables = np.arange(8, dtype=np.int64).reshape(2, 4)
    args = {
        "keyCache": kc,
        "valueCache": kc.copy(),
        "blockTables": tables,
        "seqLens": np.array([6, 6], np.int64),
        "keyRef": np.zeros((8, 1, 4), np.float32),
        "valueRef": np.zeros((8, 1, 4), np.float32),
        "cacheMode": "Norm",
        "isSeqLensCumsum": False,
    }
    got = ref("GatherPaKvCache", **args)["keyRef"]
    flat = kc.reshape(-1, 1, 4)
    np.testing.assert_array_equal(got[:6], flat[:6])  # sequence 0: blocks 0, 1
    np.testing.assert_array_equal(got[6:], flat[16:18])  # sequence 1: blocks 4.., cut after two rows


def test_gather_pa_kv_cache_refuses_bad_index_data_naming_it() -> None:
    spec = get_spec("GatherPaKvCache")
    assert spec.error_samples is not None
    kernel_only = {
        "block id past the cache",
        "negative block id",
        "negative length",
        "sequence past the block table",
        "seqOffset past the block table",
        "negative seqOffset",
        "cumulative list not from 0",
        "cumulative list decreasing",
    }
    seen = set()
    for case in spec.error_samples(np.random.default_rng(0)):
        err = refused("GatherPaKvCache", **case.args)
        assert err.code == case.code, case.note
        seen.add(case.note)
    assert kernel_only <= seen
    err = refused("GatherPaKvCache", **_first_gather_args(cacheMode="PA_NZ"))
    assert "'PA_NZ'" in str(err) and "not implemented" in str(err)


def _first_gather_args(**extra: Any) -> dict[str, Any]:
    spec = get_spec("GatherPaKvCache")
    assert spec.samples is not None
    return {**next(iter(spec.samples(np.random.default_rng(0)))).args, **extra}


# ----------------------------------------------------------------------------- KvRmsNormRopeCache
def _interleave_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """CANN's formula: x1 = x[..., ::2], x2 = x[..., 1::2]; cat(x1, x2) * cos + cat(-x2, x1) * sin."""
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.cat((x1, x2), -1) * cos + torch.cat((-x2, x1), -1) * sin


@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("mode", ["Norm", "PA", "PA_BNSD", "PA_BLK_BNSD"])
def test_kv_rms_norm_rope_cache_follows_cannss_formulas(dtype: Any, mode: str) -> None:
    rng = np.random.default_rng(3)
    b, s, dv, dk, blocks, bs = 2, 5, 32, 16, 3, 16
    kv = rng.uniform(-3, 3, (b, 1, s, dv + dk)).astype(dtype)
    gamma = rng.uniform(-2, 2, (dv,)).astype(dtype)
    angles = rng.uniform(0, 6.3, (b, 1, s, dk))
    cos, sin = np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)
    if mode == "Norm":
        kc, vc = np.zeros((b, 1, 8, dk), dtype), np.zeros((b, 1, 8, dv), dtype)
        index = np.array([[3, 0, -1, 7, 5], [1, 2, 3, 4, 5]], np.int64)
    elif mode == "PA_BLK_BNSD":
        kc, vc = np.zeros((blocks, bs, 1, dk), dtype), np.zeros((blocks, bs, 1, dv), dtype)
        index = np.array([32, 0], np.int64)  # batch 0 into block 2, batch 1 into block 0
    else:
        kc, vc = np.zeros((blocks, bs, 1, dk), dtype), np.zeros((blocks, bs, 1, dv), dtype)
        index = np.array([40, 3, 17, -1, 0, 5, 6, 7, 8, 47], np.int64)
    got = ref(
        "KvRmsNormRopeCache",
        kv=kv,
        gamma=gamma,
        cos=cos,
        sin=sin,
        index=index,
        kCacheRef=kc,
        ckvCacheRef=vc,
        epsilon=1e-5,
        cacheModeOptional=mode,
        isOutputKv=True,
    )
    x = f64(kv)
    normed = F.rms_norm(x[..., :dv], (dv,), f64(gamma), eps=1e-5)
    roped = _interleave_rope(x[..., dv:], f64(cos), f64(sin))
    assert_close(got["cKvOut"], normed.numpy().astype(dtype))
    assert_close(got["kRopeOut"], roped.numpy().astype(dtype))
    want_k, want_v = torch.zeros(f64(kc).shape, dtype=torch.float64), torch.zeros(f64(vc).shape, dtype=torch.float64)
    for bi in range(b):
        for si in range(s):
            if mode == "Norm":
                row = int(index[bi, si])
                if row >= 0:
                    want_k[bi, 0, row], want_v[bi, 0, row] = roped[bi, 0, si], normed[bi, 0, si]
                continue
            if mode == "PA_BLK_BNSD":
                slot = int(index[bi]) + si
            else:
                slot = int(index[bi * s + si])
            if slot >= 0:
                want_k[slot // bs, slot % bs, 0] = roped[bi, 0, si]
                want_v[slot // bs, slot % bs, 0] = normed[bi, 0, si]
    assert_close(got["kCacheRef"], want_k.numpy().astype(dtype))
    assert_close(got["ckvCacheRef"], want_v.numpy().astype(dtype))


def test_kv_rms_norm_rope_cache_refuses_the_nz_modes_and_quantisation() -> None:
    spec = get_spec("KvRmsNormRopeCache")
    assert spec.samples is not None
    args = next(iter(spec.samples(np.random.default_rng(0)))).args
    for mode in ("PA_NZ", "PA_BLK_NZ"):
        err = refused("KvRmsNormRopeCache", **{**args, "cacheModeOptional": mode})
        assert err.code == 161002 and repr(mode) in str(err) and "not implemented" in str(err)
    err = refused("KvRmsNormRopeCache", **{**args, "ckvScaleOptional": np.ones(1, np.float32)})
    assert err.code == 161002 and "quantised" in str(err)


def test_kv_rms_norm_rope_cache_without_output_kv_leaves_the_outputs() -> None:
    spec = get_spec("KvRmsNormRopeCache")
    assert spec.samples is not None
    args = next(iter(spec.samples(np.random.default_rng(0)))).args
    got = ref("KvRmsNormRopeCache", **{**args, "isOutputKv": False})
    assert "kRopeOut" not in got and "cKvOut" not in got
    with_out = ref("KvRmsNormRopeCache", **{**args, "isOutputKv": True})
    np.testing.assert_array_equal(got["kCacheRef"], with_out["kCacheRef"])


# ----------------------------------------------------------------------------- RopeWithSinCosCache
def _rope_cache_formula(args: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """CANN's documented formulas, in float64: gather, chunk, mrope sections, neox or GPT-J."""
    cache = f64(args["cosSinCache"])
    pos = torch.from_numpy(args["positions"])
    cos_sin = cache[pos]  # [T, R] or [m, T, R]
    cos, sin = cos_sin.chunk(2, dim=-1)
    sections = args.get("mropeSection")
    if sections is not None:
        if args.get("cacheMode", 0) == 1:
            c, s = cos[0].clone(), sin[0].clone()
            c[..., 1 : sections[1] * 3 : 3] = cos[1, ..., 1 : sections[1] * 3 : 3]
            c[..., 2 : sections[2] * 3 : 3] = cos[2, ..., 2 : sections[2] * 3 : 3]
            s[..., 1 : sections[1] * 3 : 3] = sin[1, ..., 1 : sections[1] * 3 : 3]
            s[..., 2 : sections[2] * 3 : 3] = sin[2, ..., 2 : sections[2] * 3 : 3]
            cos, sin = c, s
        else:
            cos = torch.cat([m[i] for i, m in enumerate(cos.split(list(sections), dim=-1))], dim=-1)
            sin = torch.cat([m[i] for i, m in enumerate(sin.split(list(sections), dim=-1))], dim=-1)
    head, rotary = args["headSize"], cache.shape[1]
    results = []
    for name in ("queryIn", "keyIn"):
        x = f64(args[name])
        heads = x.reshape(x.shape[0], -1, head)
        rot, rest = heads[..., :rotary], heads[..., rotary:]
        c, s = cos[:, None, :], sin[:, None, :]
        if args["isNeoxStyle"]:
            x1, x2 = torch.chunk(rot, 2, dim=-1)
            rot = torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)
        else:
            x1, x2 = rot[..., ::2], rot[..., 1::2]
            rot = torch.stack((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).flatten(-2)
        results.append(torch.cat((rot, rest), dim=-1).reshape(x.shape))
    return results[0], results[1]


@pytest.mark.parametrize("op", ["RopeWithSinCosCacheV2", "RopeWithSinCosCache"])
def test_rope_with_sin_cos_cache_follows_cannss_formulas(op: str) -> None:
    spec = get_spec(op)
    assert spec.samples is not None
    ran = 0
    for sample in spec.samples(np.random.default_rng(9)):
        got = ref(op, **sample.args)
        want_q, want_k = _rope_cache_formula(sample.args)
        dtype = sample.args["queryIn"].dtype
        assert_close(got["queryOut"], want_q.numpy().astype(dtype))
        assert_close(got["keyOut"], want_k.numpy().astype(dtype))
        ran += 1
    assert ran >= 10


def test_neox_rope_from_the_cache_equals_rotary_position_embedding_mode_0(rng: np.random.Generator) -> None:
    t, head = 4, 64
    cache = rng.uniform(-1, 1, (10, head)).astype(np.float32)
    pos = np.array([3, 0, 9, 3])
    q = rng.uniform(-2, 2, (t, 2 * head)).astype(np.float32)
    got = ref(
        "RopeWithSinCosCache",
        positions=pos,
        queryIn=q,
        keyIn=q[:, :head].copy(),
        cosSinCache=cache,
        mropeSection=None,
        headSize=head,
        isNeoxStyle=True,
    )["queryOut"]
    cos = np.concatenate([cache[pos, :32]] * 2, axis=-1)[:, None, None, :]  # [T, 1, 1, D] over BSND x
    sin = np.concatenate([cache[pos, 32:]] * 2, axis=-1)[:, None, None, :]
    x = q.reshape(t, 1, 2, head)
    want = ref(
        "RotaryPositionEmbedding",
        x=x,
        cos=np.broadcast_to(cos, (t, 1, 1, head)).copy(),
        sin=np.broadcast_to(sin, (t, 1, 1, head)).copy(),
        mode=0,
    )["out"]
    assert_close(got, want.reshape(t, 2 * head))


def test_rope_cache_rules() -> None:
    base = get_spec("RopeWithSinCosCacheV2").samples
    assert base is not None
    args = next(iter(base(np.random.default_rng(0)))).args
    args = {**args, "positions": np.array([0, 16, 2])}
    err = refused("RopeWithSinCosCacheV2", **args)
    assert err.code == 161002 and "16" in str(err)
    spec = get_spec("RopeWithSinCosCache")
    m = {
        **args,
        "positions": np.zeros((3, 3), np.int64),
        "mropeSection": [8, 12, 12],
        "cosSinCache": args["cosSinCache"],
    }
    assert refused("RopeWithSinCosCache", **m).code == 161002  # V1 takes [16, 24, 24] only
    assert spec.base == "RopeWithSinCosCacheV2"


# ------------------------------------------------------------------------- RotaryPositionEmbeddingV2 / InterleaveRope
def test_rotary_position_embedding_v2_without_rotate_is_v1(rng: np.random.Generator) -> None:
    x = rng.uniform(-2, 2, (2, 3, 4, 8)).astype(np.float32)
    angles = rng.uniform(0, 6.3, (1, 1, 4, 8))
    args = {"x": x, "cos": np.cos(angles).astype(np.float32), "sin": np.sin(angles).astype(np.float32)}
    for mode in (0, 1, 2, 3):
        got = ref("RotaryPositionEmbeddingV2", **args, mode=mode, rotate=None)["out"]
        np.testing.assert_array_equal(got, ref("RotaryPositionEmbedding", **args, mode=mode)["out"])
    err = refused("RotaryPositionEmbeddingV2", **args, mode=0, rotate=np.eye(8, dtype=np.float32))
    assert err.code == 161002 and "rotate" in str(err)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16], ids=lambda d: np.dtype(d).name)
def test_interleave_rope_follows_cannss_formula(dtype: Any, rng: np.random.Generator) -> None:
    b, n, s, d = 2, 3, 5, 64
    x = rng.uniform(-2, 2, (b, n, s, d)).astype(dtype)
    angles = rng.uniform(0, 6.3, (b, 1, s, d))
    cos, sin = np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)
    got = ref("InterleaveRope", x=x, cos=cos, sin=sin)["out"]
    q = f64(x).reshape(b, n, s, d // 2, 2).transpose(-1, -2).reshape(b, n, s, d)
    rotated = torch.cat((-q[..., d // 2 :], q[..., : d // 2]), dim=-1)
    assert_close(got, (q * f64(cos) + rotated * f64(sin)).numpy().astype(dtype))


def test_interleave_rope_shape_rules_are_tiling_errors(rng: np.random.Generator) -> None:
    x = rng.uniform(-1, 1, (1, 2, 3, 32)).astype(np.float32)
    c = rng.uniform(-1, 1, (1, 1, 3, 32)).astype(np.float32)
    assert refused("InterleaveRope", x=x, cos=c, sin=c).code == 561002


# ----------------------------------------------------------------------------- ScatterNdUpdate
@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16, np.int64, np.int8, np.bool_], ids=str)
def test_scatter_nd_update_is_index_put_of_the_index_tuples(dtype: Any, rng: np.random.Generator) -> None:
    var = (rng.standard_normal((5, 6, 7)) * 4).astype(dtype)
    picks = rng.permutation(30)[:8]
    idx = np.stack([picks // 6, picks % 6], axis=-1).reshape(2, 4, 2)
    upd = (rng.standard_normal((2, 4, 7)) * 4).astype(dtype)
    got = ref("ScatterNdUpdate", varRef=var, indices=idx, updates=upd)["varRef"]
    want = to_torch(var).clone()
    flat = torch.from_numpy(idx.reshape(-1, 2))
    want.index_put_((flat[:, 0], flat[:, 1]), to_torch(upd).reshape(8, 7))
    np.testing.assert_array_equal(got, to_numpy(want))


def test_scatter_nd_update_repeated_tuples_keep_the_last_update() -> None:
    var = np.zeros((3, 3), np.float32)
    idx = np.array([[1, 1], [0, 2], [1, 1]], np.int32)
    got = ref("ScatterNdUpdate", varRef=var, indices=idx, updates=np.array([1.0, 2.0, 3.0], np.float32))["varRef"]
    np.testing.assert_array_equal(got, [[0, 0, 2], [0, 3, 0], [0, 0, 0]])


def test_scatter_nd_update_refuses_negative_and_past_the_end_coordinates() -> None:
    var = np.zeros((3, 3), np.float32)
    for bad in (-1, 3):
        err = refused("ScatterNdUpdate", varRef=var, indices=np.array([[0, bad]]), updates=np.ones(1, np.float32))
        assert err.code == 161002 and str(bad) in str(err)

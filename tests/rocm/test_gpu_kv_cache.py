"""The KV-cache family, the rotary versions and ScatterNdUpdate on the GPU, against the reference (GPU tier).

Cases: the specs' own samples (every dtype, every implemented mode, padding slots, empty calls) in every
layout for the first of each op and contiguous for the rest; then realistic serving shapes: a decode
step's tokens x 8 heads written into a paged bf16 cache, a prefill's sequences gathered back
from it, DeepSeek's MLA write (kv_lora_rank 512 + rope 64, block 128), Llama's and Qwen2-VL's rotary
from a cos/sin cache; every error sample with the reference's code; device-only index errors reported
at synchronisation with the caches left as they were. ``ACL_ROCM_EMULATE=1`` runs it on the CPU (the
shapes are kept such that it takes well under a minute there).
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.errors import AclnnError
from acl_core.spec.ops import get_spec
from acl_rocm.ops import kv_cache as kv_ops
from tests.rocm.against_reference import assert_errors_match_reference, assert_matches_reference

pytestmark = pytest.mark.gpu

BF16 = ml_dtypes.bfloat16
OPS = sorted(
    [
        *kv_ops.OPS,
        "ScatterPaCache",
        "RopeWithSinCosCache",
        "ScatterNdUpdate",
        "InterleaveRope",
        "RotaryPositionEmbeddingV2",
    ]
)


def test_every_op_is_claimed(rocm: Backend) -> None:
    assert set(OPS) <= set(rocm.capabilities().ops)


@pytest.mark.parametrize("op", OPS)
def test_samples_match_reference(rocm: Backend, reference: Backend, op: str) -> None:
    spec = get_spec(op)
    assert spec.samples is not None
    samples = list(spec.samples(np.random.default_rng(2024)))
    assert samples
    for i, sample in enumerate(samples):
        layouts = eager.LAYOUTS[:4] if i == 0 else ("contiguous",)
        for layout in layouts:
            assert_matches_reference(rocm, reference, op, dict(sample.args), layout, sample.note)


@pytest.mark.parametrize("op", OPS)
def test_error_samples_match_reference_codes(rocm: Backend, reference: Backend, op: str) -> None:
    assert_errors_match_reference(rocm, reference, op)


def _decode_write(rng: np.random.Generator, blocks: int, tokens: int = 32, dim: int = 64) -> dict[str, Any]:
    heads, bs = 8, 16
    slots = rng.permutation(blocks * bs)[:tokens].astype(np.int64)
    slots[-3:] = -1  # padded batch entries
    return {
        "key": rng.standard_normal((tokens, heads, dim)).astype(BF16),
        "keyCacheRef": rng.standard_normal((blocks, bs, heads, dim)).astype(BF16),
        "slotMapping": slots,
        "value": rng.standard_normal((tokens, heads, dim)).astype(BF16),
        "valueCacheRef": rng.standard_normal((blocks, bs, heads, dim)).astype(BF16),
    }


@pytest.mark.parametrize("config", ["scalar", "vec", "row"])
def test_a_decode_step_writes_its_tokens_into_the_paged_cache(rocm: Backend, reference: Backend, config: str) -> None:
    """Under each ACL_KV_SCATTER_CONFIG (forced on the runner), 64 tokens of 8 x 128 as the ops bench writes them."""
    runner = rocm.runners["kv_cache"]  # type: ignore[attr-defined]
    runner.forced_scatter = config
    try:
        args = _decode_write(np.random.default_rng(1), blocks=96)
        assert_matches_reference(rocm, reference, "ScatterPaKvCache", args, "contiguous", f"{config} 32x8x64 bf16")
        args = _decode_write(np.random.default_rng(2), blocks=64, tokens=64, dim=128)
        assert_matches_reference(rocm, reference, "ScatterPaKvCache", args, "contiguous", f"{config} 64x8x128 bf16")
    finally:
        runner.forced_scatter = None


@pytest.mark.parametrize("config", ["scalar", "vec", "row"])
def test_each_scatter_config_refuses_a_bad_slot_and_writes_nothing(rocm: Backend, config: str) -> None:
    """A slot past the cache under each ACL_KV_SCATTER_CONFIG: 161002 at synchronisation, the caches untouched."""
    runner = rocm.runners["kv_cache"]  # type: ignore[attr-defined]
    runner.forced_scatter = config
    try:
        test_a_slot_past_the_cache_fails_at_synchronisation_and_writes_nothing(rocm)
    finally:
        runner.forced_scatter = None


def test_a_prefill_is_gathered_back_from_the_paged_cache(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(2)
    lengths, bs, heads, dim = [37, 70, 1, 19], 16, 2, 128
    width = 8
    blocks = len(lengths) * width
    tables = rng.permutation(blocks)[: len(lengths) * width].reshape(len(lengths), width).astype(np.int32)
    total = sum(lengths)
    args = {
        "keyCache": rng.standard_normal((blocks, bs, heads, dim)).astype(BF16),
        "valueCache": rng.standard_normal((blocks, bs, heads, dim)).astype(BF16),
        "blockTables": tables,
        "seqLens": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32),
        "keyRef": np.zeros((total, heads, dim), BF16),
        "valueRef": np.zeros((total, heads, dim), BF16),
        "seqOffsetOptional": np.array([0, 16, 32, 16], np.int32),
        "cacheMode": "Norm",
        "isSeqLensCumsum": True,
    }
    assert_matches_reference(rocm, reference, "GatherPaKvCache", args, "contiguous", "prefill of 127 tokens")


@pytest.mark.parametrize("mode", ["PA", "PA_BLK_BNSD"])
def test_deepseek_mla_kv_write(rocm: Backend, reference: Backend, mode: str) -> None:
    rng = np.random.default_rng(3)
    b, s, dv, dk, bs, blocks = (24, 1, 512, 64, 128, 8) if mode == "PA" else (2, 40, 512, 64, 128, 6)
    angles = rng.uniform(0, 2 * np.pi, (b, 1, s, dk))
    if mode == "PA":
        index = rng.permutation(blocks * bs)[: b * s].astype(np.int64)
    else:
        index = (rng.permutation(blocks)[: b * -(-s // bs)] * bs).astype(np.int64)
    args = {
        "kv": rng.uniform(-3, 3, (b, 1, s, dv + dk)).astype(BF16),
        "gamma": rng.uniform(-1, 1, (dv,)).astype(BF16),
        "cos": np.cos(angles).astype(BF16),
        "sin": np.sin(angles).astype(BF16),
        "index": index,
        "kCacheRef": rng.standard_normal((blocks, bs, 1, dk)).astype(BF16),
        "ckvCacheRef": rng.standard_normal((blocks, bs, 1, dv)).astype(BF16),
        "epsilon": 1e-6,
        "cacheModeOptional": mode,
        "isOutputKv": True,
    }
    assert_matches_reference(rocm, reference, "KvRmsNormRopeCache", args, "contiguous", f"{mode} 512+64")


@pytest.mark.parametrize(
    ("sections", "neox", "cache_mode"),
    [(None, True, 0), (None, False, 0), ((16, 24, 24), True, 0), ((24, 20, 20), False, 1)],
)
def test_serving_rotary_from_the_cos_sin_cache(
    rocm: Backend, reference: Backend, sections: tuple[int, ...] | None, neox: bool, cache_mode: int
) -> None:
    rng = np.random.default_rng(4)
    tokens, nq, nk, head, max_len = 12, 16, 4, 128, 4096
    rotary = head if sections is None else 2 * sum(sections)
    angles = rng.uniform(0, 2 * np.pi, (max_len, rotary // 2))
    shape = (tokens,) if sections is None else (len(sections), tokens)
    args = {
        "positions": rng.integers(0, max_len, shape).astype(np.int64),
        "queryIn": rng.standard_normal((tokens, nq * head)).astype(BF16),
        "keyIn": rng.standard_normal((tokens, nk * head)).astype(BF16),
        "cosSinCache": np.concatenate([np.cos(angles), np.sin(angles)], axis=-1).astype(BF16),
        "mropeSection": None if sections is None else list(sections),
        "headSize": head,
        "isNeoxStyle": neox,
        "cacheMode": cache_mode,
    }
    note = f"{tokens} tokens {nq}/{nk} heads, sections {sections}"
    assert_matches_reference(rocm, reference, "RopeWithSinCosCacheV2", args, "contiguous", note)


def test_interleave_rope_on_a_decode_batch(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((64, 16, 1, 64)).astype(BF16)
    angles = rng.uniform(0, 2 * np.pi, (64, 1, 1, 64))
    args = {"x": x, "cos": np.cos(angles).astype(BF16), "sin": np.sin(angles).astype(BF16)}
    assert_matches_reference(rocm, reference, "InterleaveRope", args, "contiguous", "64 x 16 heads")


def test_scatter_nd_update_of_cache_rows(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(6)
    var = rng.standard_normal((256, 2, 64)).astype(BF16)
    idx = rng.integers(0, 256, (40, 1)).astype(np.int64)  # repeats: the last update wins
    args = {"varRef": var, "indices": idx, "updates": rng.standard_normal((40, 2, 64)).astype(BF16)}
    assert_matches_reference(rocm, reference, "ScatterNdUpdate", args, "contiguous", "40 rows, repeats")


def test_a_slot_past_the_cache_fails_at_synchronisation_and_writes_nothing(rocm: Backend) -> None:
    rng = np.random.default_rng(7)
    args = _decode_write(rng, blocks=8, tokens=8, dim=16)
    args["slotMapping"][5] = 8 * 16
    caches = {n: eager.to_device(args.pop(n), rocm) for n in ("keyCacheRef", "valueCacheRef")}
    before = {n: a.numpy().copy() for n, a in caches.items()}
    with pytest.raises(AclnnError) as err:
        eager.run("ScatterPaKvCache", rocm, **args, **caches)
    assert err.value.code == 161002
    for name, array in caches.items():
        np.testing.assert_array_equal(array.numpy(), before[name])


def test_a_position_past_the_cache_fails_at_synchronisation(rocm: Backend) -> None:
    spec = get_spec("RopeWithSinCosCacheV2")
    assert spec.samples is not None
    args = dict(next(iter(spec.samples(np.random.default_rng(0)))).args)
    args["positions"] = args["positions"].copy()
    args["positions"][-1] = args["cosSinCache"].shape[0]
    with pytest.raises(AclnnError) as err:
        eager.run("RopeWithSinCosCacheV2", rocm, **args)
    assert err.value.code == 161002 and "positions" in str(err.value)

"""The split-KV decode path's arithmetic: how a cache is split, and which calls the path refuses (no device)."""

from __future__ import annotations

import pytest

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.attention_decode import MAX_SPLITS, MIN_CHUNK, SINGLE_SPLIT_KEYS, decode_splits
from acl_rocm.ops.attention_decode import decode_refusal


@pytest.mark.parametrize("capacity", [1, 31, 32, 33, 96, 128, 129, 1000, 4097, 32_768, 1 << 20])
@pytest.mark.parametrize(("batch", "kv_heads", "units"), [(1, 8, 132), (8, 8, 132), (1, 1, 304), (64, 8, 132)])
def test_splits_cover_the_cache_once_and_fill_the_device(capacity: int, batch: int, kv_heads: int, units: int) -> None:
    splits, chunk = decode_splits(batch, kv_heads, capacity, units)
    assert chunk % MIN_CHUNK == 0 and 1 <= splits <= MAX_SPLITS
    assert (splits - 1) * chunk < capacity <= splits * chunk  # every key in exactly one split, no empty split
    if capacity <= SINGLE_SPLIT_KEYS:  # a short cache: one split, no combine launch
        assert splits == 1
        return
    most = min(MAX_SPLITS, -(-capacity // MIN_CHUNK))
    # the grid fills the device, or the split count is within the factor 2 that 32-key granules may cost
    assert batch * kv_heads * splits >= units or 2 * splits >= most


def test_qwen3_decode_shape_takes_many_splits() -> None:
    splits, chunk = decode_splits(1, 8, 32_768, 132)
    assert (splits, chunk) == (64, 512)
    assert splits * 8 >= 3 * 132  # several resident blocks per compute unit


def test_refusals_name_the_reason() -> None:
    ok = ("IncreFlashAttention", D.ACL_BF16, 1, "none", 1, 1, 16, 8, 128, 32)
    assert decode_refusal(*ok) is None
    assert decode_refusal("FusedInferAttentionScore", *ok[1:]) is None
    cases = {
        "PromptFlashAttention": ("PromptFlashAttention", *ok[1:]),
        "float32": (ok[0], D.ACL_FLOAT, *ok[2:]),
        "query S 4": (*ok[:2], 4, *ok[3:]),
        "compressed mask": (*ok[:3], "compressed", *ok[4:]),
        "2 cache tensors": (*ok[:4], 2, *ok[5:]),
        "batch 300": (*ok[:5], 300, *ok[6:]),
        "head dim 320": (*ok[:8], 320, 32),
        "GQA group 16": (*ok[:6], 16, 1, 256, 32),
    }
    for want, args in cases.items():
        why = decode_refusal(*args)
        assert why is not None and want in why, (want, why)
    assert decode_refusal(*ok[:8], 64, 64) is None  # wave64: one dim per lane

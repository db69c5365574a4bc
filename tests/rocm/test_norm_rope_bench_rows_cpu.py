"""The ops bench's QkvRmsNormRopeCache rows on the fake provider: one row per ACL_QKV_ROPE_CONFIG choice at each
shape (two decode steps and a prefill), each forcing its choice on the runner while it runs and clearing it after."""

from __future__ import annotations

import dataclasses

import pytest

from acl_rocm.backend import RocmBackend
from acl_rocm.ops.norm_rope_cache import CONFIGS

torch = pytest.importorskip("torch")


def test_one_row_per_choice_and_shape(bench_rocm: RocmBackend) -> None:
    from acl_tools.bench import norm_rope_rows
    from acl_tools.bench.ops import SIZES, Suite

    sizes = dataclasses.replace(SIZES["small"], rounds=1, min_time=0.001)
    suite = Suite(bench_rocm, sizes, progress=lambda line: None, only={"QkvRmsNormRopeCache"})
    suite.device = torch.device("cpu")
    norm_rope_rows.run_cases(suite)
    rows = [(c.op, c.shape, c.status) for c in suite.cases]
    shapes = [f"{t} tok x 16/8/8 x 128" for t in (1, 8, 256)]
    nd = [("QkvRmsNormRopeCache PA_BNSD", s, "ok") for s in shapes[:2]]
    assert rows == [(f"QkvRmsNormRopeCache {c}", s, "ok") for s in shapes for c in CONFIGS] + nd
    assert bench_rocm.norm_rope_cache.forced is None  # type: ignore[attr-defined]
    names = " ".join(bench_rocm.provider.compiled)  # type: ignore[attr-defined]
    assert names.count("acl_qkv_norm_rope_") >= len(CONFIGS)

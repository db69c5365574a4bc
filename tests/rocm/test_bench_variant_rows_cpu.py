"""The ops bench's variant rows on the fake provider: InplaceNormal's ACL_RANDOM_NORMAL row and ForeachAddList's
ACL_FOREACH_BLOCKS rows, each forcing its setting on the runner while it runs and clearing it after."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest

from acl_core.dtypes import DataType as D
from acl_rocm.backend import RocmBackend
from acl_rocm.kernels.random import Fill

torch = pytest.importorskip("torch")


@pytest.fixture
def fake(bench_rocm: RocmBackend, monkeypatch: pytest.MonkeyPatch) -> Sequence[RocmBackend]:
    monkeypatch.delenv("ACL_RANDOM_LAYOUT", raising=False)
    return (bench_rocm,)


def _suite(backend: RocmBackend, only: set[str]) -> object:
    from acl_tools.bench.ops import SIZES, Suite

    sizes = dataclasses.replace(SIZES["small"], elementwise_bytes=1 << 16, rounds=1)
    suite = Suite(backend, sizes, progress=lambda line: None, only=only)
    suite.device = torch.device("cpu")
    return suite


def test_random_and_foreach_variant_rows(fake: Sequence[RocmBackend]) -> None:
    (backend,) = fake
    suite = _suite(backend, {"InplaceNormal", "ForeachAddList"})
    suite.random_fills()  # type: ignore[attr-defined]
    normal = [c for c in suite.cases if c.op == "InplaceNormal"]  # type: ignore[attr-defined]
    assert [c.status for c in normal] == ["ok", "ok", "ok", "ok"]
    assert normal[0].note == "ACL_RANDOM_LAYOUT=packed" and normal[1].note.endswith("ACL_RANDOM_NORMAL=split")
    assert [c.note.rsplit("=", 1)[-1] for c in normal[2:]] == ["sincos", "float32"]
    compiled = backend.provider.compiled  # type: ignore[attr-defined]
    assert Fill("normal", D.ACL_FLOAT, 1, "packed", "float32").kernel_name in compiled
    assert Fill("normal", D.ACL_FLOAT, 1, "packed", "float32p").kernel_name in compiled
    assert Fill("normal", D.ACL_FLOAT, 1, "packed", "sincos").kernel_name in compiled
    assert Fill("normal", D.ACL_FLOAT, 1, "packed", "split").kernel_name in compiled
    assert backend.runners["random"].forced_trig is None
    suite.foreach()  # type: ignore[attr-defined]
    rows = [c for c in suite.cases if c.op == "ForeachAddList"]  # type: ignore[attr-defined]
    assert [c.note for c in rows[:2]] == ["", "ACL_FOREACH_BLOCKS=128"] and {c.status for c in rows} == {"ok"}
    assert backend.foreach.forced_blocks is None  # type: ignore[attr-defined]
    assert [c.note for c in rows[:3]] == ["", "ACL_FOREACH_BLOCKS=128", "ACL_FOREACH_CONFIG=scan"] and len(rows) == 9
    assert backend.foreach.forced_config is None  # type: ignore[attr-defined]


def test_adamw_and_kv_scatter_variant_rows(fake: Sequence[RocmBackend]) -> None:
    """ApplyAdamWV2's ACL_ADAMW_CONFIG=vec row and ScatterPaKvCache's vec / row rows plan the forced kernel."""
    from acl_rocm.kernels.kv_cache import PagedScatter
    from acl_rocm.kernels.optim import AdamW

    (backend,) = fake
    suite = _suite(backend, {"ApplyAdamWV2", "ScatterPaKvCache"})
    suite.optimizer()  # type: ignore[attr-defined]
    suite.kv_cache()  # type: ignore[attr-defined]
    cases = suite.cases  # type: ignore[attr-defined]
    assert [(c.op, c.note, c.status) for c in cases] == [
        ("ApplyAdamWV2", "torch: _fused_adamw_", "ok"),
        ("ApplyAdamWV2", "torch: _fused_adamw_, ACL_ADAMW_CONFIG=scalar", "ok"),
        ("ScatterPaKvCache", "", "ok"),
        ("ScatterPaKvCache", "ACL_KV_SCATTER_CONFIG=vec", "ok"),
        ("ScatterPaKvCache", "ACL_KV_SCATTER_CONFIG=row", "ok"),
    ]
    compiled = backend.provider.compiled  # type: ignore[attr-defined]
    assert AdamW(D.ACL_FLOAT, 2, False, False, 1, (D.ACL_FLOAT,), 4).kernel_name in compiled
    assert PagedScatter(2, D.ACL_INT64, True, 8, True).kernel_name in compiled
    assert backend.runners["optim"].forced_config is None and backend.runners["kv_cache"].forced_scatter is None


def test_mish_and_take_env_rows(fake: Sequence[RocmBackend]) -> None:
    """ENV_ROWS: Mish float32 gets an ACL_MISH_CONFIG=libm row, Take an ACL_TAKE_CHECK=launch and =vec row per dtype;
    each plans its kernel under the setting, and the backend's environ is restored after every row."""
    from acl_rocm.kernels.activation import MISH_POLY

    (backend,) = fake
    before = dict(backend.environ)
    suite = _suite(backend, {"Mish", "Take"})
    suite.activations()  # type: ignore[attr-defined]
    mish = [(c.dtype, c.note, c.status) for c in suite.cases if c.op == "Mish"]  # type: ignore[attr-defined]
    assert mish[:2] == [("float32", "", "ok"), ("float32", "ACL_MISH_CONFIG=libm", "ok")] and len(mish) == 4
    sources = backend.runners["elementwise"]._sources.values()  # type: ignore[attr-defined]
    assert any(MISH_POLY in s for s in sources)
    suite.gathers()  # type: ignore[attr-defined]
    take = [c.note for c in suite.cases if c.op == "Take"]  # type: ignore[attr-defined]
    assert take == ["", "ACL_TAKE_CHECK=launch", "ACL_TAKE_CHECK=vec"] * 3
    assert {c.status for c in suite.cases} == {"ok"}  # type: ignore[attr-defined]
    assert any(n.startswith("acl_mv_check_vec") for n in backend.provider.compiled)  # type: ignore[attr-defined]
    assert dict(backend.environ) == before


def test_flat_quant_kernel_rows(fake: Sequence[RocmBackend]) -> None:
    """FlatQuant's row once by default, then once per forced ACL_FLATQUANT_KERNEL choice, each noting its path."""
    from acl_rocm.kernels.flat_quant import FlatTile
    from acl_tools.bench.quant_rows import flat_quant

    (backend,) = fake
    suite = _suite(backend, {"FlatQuant"})
    flat_quant(suite)  # type: ignore[arg-type]
    cases = suite.cases  # type: ignore[attr-defined]
    forced = [f"FlatQuant int4 {k} kernel" for k in ("slice", "simt", "dmma", "dmma16")]
    assert [c.op for c in cases] == ["FlatQuant int4", *forced]
    assert [c.note.split(";")[0] for c in cases] == [
        "path token tile dmma16",  # the fake provider is an NVIDIA one: auto takes dmma16 there
        "path per slice",
        "path token tile simt",
        "path token tile dmma",
        "path token tile dmma16",
    ]
    assert {c.status for c in cases} == {"ok"}
    compiled = backend.provider.compiled  # type: ignore[attr-defined]
    assert FlatTile(D.ACL_FLOAT16, D.ACL_INT32, 16, 32, "dmma").kernel_name in compiled
    assert backend.runners["quant_vllm"].forced_flat is None


def test_grouped_matmul_v5_wgmma_rows(fake: Sequence[RocmBackend]) -> None:
    """GroupedMatmulV5's forced-mma row beside the default (wgmma on sm_90) and SIMT ones, and a GroupedMatmulV5Wgmma
    row per wgmma configuration, each reporting the path and configuration that ran; the runner's settings cleared
    after."""
    from acl_rocm.kernels.grouped_matmul_wgmma import ALTERNATIVES, DEFAULT
    from acl_tools.bench import gemm_variants

    (backend,) = fake
    suite = _suite(backend, {"GroupedMatmulV5", "GroupedMatmulV5Wgmma"})
    gemm_variants.run_cases(suite)  # type: ignore[arg-type]
    rows = [(c.op, c.status, c.note.split(";")[0]) for c in suite.cases]  # type: ignore[attr-defined]
    assert rows[:4] == [  # the fake provider is an sm_90 one: auto takes the wgmma kernel there
        ("GroupedMatmulV5", "ok", "path wgmma"),
        ("GroupedMatmulV5 [N,K] weight", "ok", "path wgmma"),
        ("GroupedMatmulV5 simt kernel", "ok", "path simt"),
        ("GroupedMatmulV5 mma kernel", "ok", "path mma"),
    ]
    configs = (str(DEFAULT), *ALTERNATIVES)
    assert rows[4:] == [
        (f"GroupedMatmulV5 wgmma config {c}", "ok", f"ACL_GMM_WGMMA_CONFIG={c} (ran {c}, path wgmma)") for c in configs
    ]
    runner = backend.grouped_matmul  # type: ignore[attr-defined]
    assert runner.forced_kernel is None and runner.forced_wgmma_config is None


def test_cross_entropy_and_repeat_rows_env_rows(fake: Sequence[RocmBackend]) -> None:
    """CrossEntropyLoss's ACL_CE_ROWS=vec / element and RepeatInterleaveWithDim's ACL_REPEAT_ROWS=search / blocks /
    gather / gather8 rows beside the default ones (vec1024, rows), each planning its kernel under the setting; the
    environ restored after."""
    from acl_tools.bench import class_loss_rows, index_shape_rows

    (backend,) = fake
    before = dict(backend.environ)
    suite = _suite(backend, {"CrossEntropyLoss", "RepeatInterleave"})
    class_loss_rows.run_cases(suite)  # type: ignore[arg-type]
    index_shape_rows.run_cases(suite)  # type: ignore[arg-type]
    rows = [(c.op, c.note, c.status) for c in suite.cases if c.op != "RepeatInterleaveIntWithDim"]  # type: ignore[attr-defined]
    assert rows == [
        ("CrossEntropyLoss", "reduction mean", "ok"),
        ("CrossEntropyLoss", "reduction mean, ACL_CE_ROWS=vec", "ok"),
        ("CrossEntropyLoss", "reduction mean, ACL_CE_ROWS=element", "ok"),
        ("RepeatInterleaveWithDim", "", "ok"),
        ("RepeatInterleaveWithDim", "ACL_REPEAT_ROWS=search", "ok"),
        *(("RepeatInterleaveWithDim", f"ACL_REPEAT_ROWS={v}", "ok") for v in ("blocks", "gather", "gather,pdl,grid")),
    ]
    compiled = backend.provider.compiled  # type: ignore[attr-defined]
    assert any(n.startswith("acl_sort_repeat_rows_") for n in compiled)
    assert any(n.startswith("acl_sort_repeat_chunks_") for n in compiled)
    sources = backend.runners["class_loss"]._sources.values()  # type: ignore[attr-defined]
    assert any("block=512, vec=8" in s for s in sources) and any("block=1024, vec=8" in s for s in sources)
    assert dict(backend.environ) == before


def test_attention_grad_cudnn_row(fake: Sequence[RocmBackend]) -> None:
    """FlashAttentionScoreGrad's default row (cuDNN where it loads; the composed path here, where the frontend is
    absent), then one under ACL_ATTENTION_GRAD_PATH=blas and one under =flash (the fused kernels); the backend's
    environ is restored after."""
    (backend,) = fake
    before = dict(backend.environ)
    suite = _suite(backend, {"FlashAttentionScoreGrad"})
    suite.attention_grad()  # type: ignore[attr-defined]
    rows = [(c.note, c.status) for c in suite.cases]  # type: ignore[attr-defined]
    assert rows == [("", "ok"), ("ACL_ATTENTION_GRAD_PATH=blas", "ok"), ("ACL_ATTENTION_GRAD_PATH=flash", "ok")]
    assert backend.attention_grad.last_path == "flash"  # type: ignore[attr-defined]
    compiled = backend.provider.compiled  # type: ignore[attr-defined]
    assert any(n.startswith("acl_flash_grad_bf16_d64_") and n.endswith("_dkv") for n in compiled)
    assert dict(backend.environ) == before


def test_bench_env_rows_listed(fake: Sequence[RocmBackend], monkeypatch: pytest.MonkeyPatch) -> None:
    """``ACL_BENCH_ENV_ROWS`` (``;``-separated) replaces the table's settings: a sweep line times a few at a time."""
    from acl_tools.bench import index_shape_rows

    (backend,) = fake
    monkeypatch.setenv("ACL_BENCH_ENV_ROWS", "gather8; gather,grid ;")
    suite = _suite(backend, {"RepeatInterleave"})
    index_shape_rows.run_cases(suite)  # type: ignore[arg-type]
    rows = [c.note for c in suite.cases if c.op == "RepeatInterleaveWithDim"]  # type: ignore[attr-defined]
    assert rows == ["", "ACL_REPEAT_ROWS=gather8", "ACL_REPEAT_ROWS=gather,grid"]


def test_grouped_matmul_v5_blaslt_rows(bench_rocm: RocmBackend) -> None:
    """GroupedMatmulV5Blaslt: the default row and the library one (the fake provider offering a grouped GEMM), each
    naming the path that ran; without the binding the library row is left out; the runner's switch cleared after."""
    from acl_tools.bench import gemm_variants

    provider = bench_rocm.provider
    runner = bench_rocm.grouped_matmul  # type: ignore[attr-defined]
    for grouped, want in ((True, ["path wgmma", "path blaslt"]), (False, ["path wgmma"])):
        provider.grouped_blas = grouped  # type: ignore[attr-defined]
        suite = _suite(bench_rocm, {"GroupedMatmulV5Blaslt"})
        gemm_variants.run_cases(suite)  # type: ignore[arg-type]
        rows = [(c.op, c.status, c.note.split(";")[0]) for c in suite.cases]  # type: ignore[attr-defined]
        names = ["GroupedMatmulV5", "GroupedMatmulV5 blaslt kernel"][: len(want)]
        assert rows == [(name, "ok", note) for name, note in zip(names, want)]
        assert runner.forced_kernel is None

"""FlashAttentionScore's paths above the provider seam, on a CPU: selection, BLAS chunks, cuDNN graph cache.

The BLAS path runs for real on the host-memory fake: its GEMMs through the fake provider's float64
GEMM, its row-softmax kernel through a NumPy model of the generated kernel (:func:`_softmax_model`,
read from the packed launch arguments), with a tiny temporary budget so calls split into many chunks;
results are compared with the reference backend. cuDNN cannot run here: its refusal when the frontend
does not load, and its graph cache keys and LRU, are checked with stand-ins.
"""

from __future__ import annotations

import ctypes
import logging
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.errors import AclError, RtErrorCode
from acl_core.formats import Format
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.attention import compressed_mask
from acl_core.tensor import AclTensor, contiguous_strides
from acl_rocm.backend import RocmBackend
from acl_rocm.kernels.attention_softmax import (
    SOFTMAX_META_LEN,
    SOFTMAX_STRUCT,
    SOFTMAX_THREADS,
    SoftmaxInstance,
    SoftmaxMeta,
    softmax_source,
)
from acl_rocm.ops import attention_cudnn
from acl_rocm.ops.attention import window_bounds
from acl_rocm.ops.attention_cudnn import GRAPH_LIMIT, CudnnSdpa, SdpaKey, _Built
from acl_rocm.ops.attention_plan import (
    Chunk,
    choose_path,
    chunk_bytes,
    cudnn_mask,
    cudnn_refusal,
    is_large,
    key_range,
    plan_chunks,
)
from tests.conftest import assert_close
from tests.rocm.test_attention_cpu import ExecutingFake, _elementwise_model, _gather, _np, _scatter
from tests.rocm.test_attention_cpu import reference as reference

BNSD = (0, 0, 0, 1)


# ----------------------------------------------------------------------------- the softmax kernel model
def _softmax_model(name: str, grid: tuple[int, int, int], params: int) -> None:
    """The row-softmax kernel mirrored in NumPy: same strides, mask, window, pse, stats."""
    short = name.split("_")[3]
    dt = _np(next(d for d in D if d.short == short))
    table = (ctypes.c_void_p * 9).from_address(params)
    raw = list((ctypes.c_int64 * SOFTMAX_META_LEN).from_address(table[0]))
    m = SoftmaxMeta(*raw[:11], *(tuple(raw[11 + 4 * i : 15 + 4 * i]) for i in range(4)), *raw[27:])  # type: ignore[arg-type]
    scale = ctypes.c_double.from_address(table[1]).value
    s, p, mask, pse, smax, ssum, sink = (ctypes.c_void_p.from_address(table[i]).value or 0 for i in range(2, 9))
    f32 = np.dtype(np.float32)
    cols = np.arange(m.cols)
    j = m.kv0 + cols
    for t in range(grid[1]):
        for r in range(grid[0]):
            i, h, b = m.row0 + r, m.head0 + t * m.head_step, m.batch
            keep = np.ones(m.cols, bool)
            if m.has_mask:
                row = b * m.mask[0] + h * m.mask[1] + i * m.mask[2]
                keep &= _gather(mask, np.dtype(np.uint8), row + j * m.mask[3]) == 0
            if m.has_window:
                off = j - i - m.shift
                keep &= (off >= m.win_lo) & (off <= m.win_hi)
            x = _gather(s, f32, t * m.s_head + r * m.s_row + cols).astype(np.float64)
            if m.has_pse:
                x = x + _gather(pse, dt, b * m.pse[0] + h * m.pse[1] + i * m.pse[2] + j * m.pse[3])
            x = x * scale
            row_max = float(x[keep].max()) if keep.any() else -np.inf
            logit = float(_gather(sink, f32, np.array([h * m.sink_step]))[0]) if m.has_sink else -np.inf
            row_max = max(row_max, logit)
            e = np.where(keep, np.exp(np.where(keep, x - (row_max if row_max > -np.inf else 0.0), 0.0)), 0.0)
            total = float(e.sum()) + (math.exp(logit - row_max) if m.has_sink else 0.0)
            _scatter(p, dt, t * m.p_head + r * m.p_row + cols, e / total if total > 0 else e)
            eight = np.arange(8)
            _scatter(smax, f32, b * m.smax[0] + h * m.smax[1] + i * m.smax[2] + eight * m.smax[3], np.full(8, row_max))
            _scatter(ssum, f32, b * m.ssum[0] + h * m.ssum[1] + i * m.ssum[2] + eight * m.ssum[3], np.full(8, total))


class PathsFake(ExecutingFake):
    """The executing fake, plus the row-softmax kernel's model."""

    def launch(
        self,
        function: object,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_bytes: int,
        stream: int,
        params: int,
    ) -> None:
        name, _source = function  # type: ignore[misc]
        if name.startswith("acl_attn_softmax_"):
            assert block == (SOFTMAX_THREADS, 1, 1)
            _softmax_model(name, grid, params)
        else:
            super().launch(function, grid, block, shared_bytes, stream, params)


@pytest.fixture
def paths(tmp_path: Path) -> Iterator[tuple[RocmBackend, PathsFake]]:
    provider = PathsFake(blas=True)
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp_path)})
    backend.runtime.ensure_device(0)
    ew = backend.elementwise
    ew.enqueue = lambda planned, stream: None if planned is None else _elementwise_model(planned)  # type: ignore[method-assign]
    yield backend, provider


# ----------------------------------------------------------------------------- selection
def test_choose_path_prefers_cudnn_then_blas_for_large_calls() -> None:
    assert choose_path(large=False, blas_refusal=None, cudnn_refusal_reason=None)[0] == "kernel"
    assert choose_path(large=True, blas_refusal=None, cudnn_refusal_reason=None)[0] == "cudnn"
    path, why = choose_path(large=True, blas_refusal=None, cudnn_refusal_reason="fp32 inputs")
    assert path == "blas" and "fp32 inputs" in why
    path, why = choose_path(large=True, blas_refusal="no GEMM", cudnn_refusal_reason="no cuDNN")
    assert path == "kernel" and "no GEMM" in why and "no cuDNN" in why
    assert choose_path(large=False, blas_refusal=None, cudnn_refusal_reason="x", override="blas") == ("blas", "forced")
    with pytest.raises(ValueError, match="cudnn attention path cannot run this call: no cuDNN"):
        choose_path(large=True, blas_refusal=None, cudnn_refusal_reason="no cuDNN", override="cudnn")
    with pytest.raises(ValueError, match="unknown attention path"):
        choose_path(large=True, blas_refusal=None, cudnn_refusal_reason=None, override="numpy")


def test_large_means_both_sequences_long_and_enough_work() -> None:
    assert is_large(4, 32, 4096, 4096)
    assert not is_large(1, 1, 4096, 32)  # a short key side stays on the kernel
    assert not is_large(1, 2, 64, 64)  # too little work
    assert is_large(8, 16, 256, 256)


def test_cudnn_takes_only_the_cases_it_computes_exactly() -> None:
    st = {"query": (1024, 128, 32, 1)}
    aligned = {"query": 4096}

    def why(**kw: Any) -> str | None:
        args: dict[str, Any] = dict(
            dtype=D.ACL_BF16, head_dim=128, mode=3, has_mask=True, has_pse=False, sq=64, skv=64,
            strides=st, addresses=aligned,
        )  # fmt: skip
        args.update(kw)
        return cudnn_refusal(**args)

    assert why() is None
    assert why(mode=2, sq=80, skv=64) is None  # top-left causal never empties a row
    assert why(mode=0, has_mask=False) is None  # no mask: the sparse mode has no effect
    assert "float32" in str(why(dtype=D.ACL_FLOAT))
    assert "pse" in str(why(has_pse=True))
    assert "head dim 4" in str(why(head_dim=4))
    assert "head dim 512" in str(why(head_dim=512))
    assert "sparseMode 0 with a mask" in str(why(mode=0))
    assert "sparseMode 4" in str(why(mode=4))
    assert "Sq > Skv" in str(why(sq=65, skv=64))
    assert "strides" in str(why(strides={"key": (1024, 128, 1, 32)}))
    assert "strides" in str(why(strides={"key": (1024, 128, 36, 1)}))
    assert "16-byte" in str(why(addresses={"value": 4096 + 8}))
    assert cudnn_mask(3, True) == "bottom_right" and cudnn_mask(2, True) == "top_left"
    assert cudnn_mask(3, False) == "none"


# ----------------------------------------------------------------------------- chunk arithmetic
@pytest.mark.parametrize(
    ("b", "nq", "nkv", "sq", "skv", "mode", "pre", "nxt", "budget"),
    [
        (2, 4, 2, 37, 53, None, 0, 0, 6 * 37 * 53 * 2),
        (1, 3, 3, 40, 40, 3, 0, 0, 6 * 40 * 40),
        (2, 4, 1, 17, 9, 3, 0, 0, 6 * 10),  # Sq > Skv: leading rows keep no key
        (1, 2, 2, 33, 29, 4, 3, 2, 6 * 64),
        (1, 2, 2, 30, 30, 2, 0, 0, 1),  # a budget below one row: one row per chunk
    ],
)
def test_chunks_cover_every_row_once_within_the_budget(
    b: int, nq: int, nkv: int, sq: int, skv: int, mode: int | None, pre: int, nxt: int, budget: int
) -> None:
    bounds = None if mode is None else window_bounds(mode, sq, skv, pre, nxt, skv - sq)
    chunks = plan_chunks(b, nq, nkv, sq, skv, bounds, 6, budget, row_block=8)
    group = nq // nkv
    seen = np.zeros((b, nq, sq), int)
    for c in chunks:
        heads = [c.head0(group) + group * t for t in range(c.heads)]
        seen[c.batch, heads, c.row0 : c.row0 + c.rows] += 1
        if c.rows > 1 and c.heads * c.rows * c.cols > 0:
            assert c.heads * c.rows * c.cols * 6 <= max(budget, c.rows * c.cols * 6)
        if bounds is not None:  # every key the window keeps for these rows is inside [kv0, kv0+cols)
            i = np.arange(c.row0, c.row0 + c.rows)[:, None]
            off = np.arange(skv)[None, :] - i - bounds[2]
            kept = np.nonzero(((off >= bounds[0]) & (off <= bounds[1])).any(axis=0))[0]
            assert all(c.kv0 <= j < c.kv0 + c.cols for j in kept)
    np.testing.assert_array_equal(seen, 1)
    assert chunk_bytes(chunks) == max(c.heads * c.rows * c.cols for c in chunks)


def test_causal_row_blocks_skip_the_masked_half() -> None:
    bounds = window_bounds(3, 4096, 4096, 0, 0, 0)
    chunks = plan_chunks(1, 32, 32, 4096, 4096, bounds, 6)
    work = sum(c.heads * c.rows * c.cols for c in chunks)
    assert work < 0.57 * 32 * 4096 * 4096  # a bit over half of the dense product
    assert chunk_bytes(chunks) * 6 <= 1 << 30
    dense = plan_chunks(4, 32, 32, 4096, 4096, None, 6)
    assert all(c.cols == 4096 and c.kv0 == 0 for c in dense)
    assert chunk_bytes(dense) * 6 <= 1 << 30 and len({c.rows for c in dense}) == 1
    assert key_range(0, 10, 20, None) == (0, 20)
    assert key_range(10, 5, 20, (-3, 1, 0)) == (7, 16)
    assert Chunk(0, 1, 2, 3, 0, 1, 0, 1).head0(4) == 9


# ----------------------------------------------------------------------------- the BLAS path on the fake
def _bf16_tol(dtype: np.dtype) -> tuple[float, float]:
    """P is rounded to the input dtype before P V (as flash attention does): a few of its ulps."""
    eps = {np.dtype(np.float16): 2.0**-10, np.dtype(ml_dtypes.bfloat16): 2.0**-7}.get(dtype)
    return (1e-5, 1.3e-6) if eps is None else (4 * eps, 4 * eps)


@pytest.mark.parametrize("op", ["FlashAttentionScore", "FlashAttentionScoreV3"])
def test_blas_path_matches_the_reference_on_every_sample(
    paths: tuple[RocmBackend, PathsFake], reference: Backend, op: str
) -> None:
    """Every sample through the BLAS path (V3's: the sink joins the row softmax after the GEMM)."""
    backend, provider = paths
    runner = backend.attention  # type: ignore[attr-defined]
    runner.path_override = "blas"
    runner.blas.budget = 6 * 16  # many chunks: a few scores each
    spec = get_spec(op)
    assert spec.samples is not None
    sinks = 0
    for sample in spec.samples(np.random.default_rng(3)):
        sinks += sample.args.get("sinkOptional") is not None
        expected = eager.run(op, reference, op_args=sample.args)
        got = eager.run(op, backend, op_args=sample.args)
        assert runner.last_path == "blas", sample.note
        for name in ("attentionOutOut", "softmaxMaxOut", "softmaxSumOut"):
            atol, rtol = _bf16_tol(got[name].dtype) if name == "attentionOutOut" else (1e-5, 1.3e-6)
            try:
                assert_close(got[name], expected[name], atol=atol, rtol=rtol)
            except AssertionError as exc:
                raise AssertionError(f"[{sample.note}] {name}\n{exc}") from None
    assert len(provider.gemms) > 100  # the tiny budget really split the calls
    assert (sinks > 0) == (op == "FlashAttentionScoreV3")


def test_blas_path_refuses_views_a_gemm_cannot_read(paths: tuple[RocmBackend, PathsFake]) -> None:
    backend, _ = paths
    runner = backend.attention  # type: ignore[attr-defined]
    runner.path_override = "blas"
    sample = get_spec("FlashAttentionScore").samples(np.random.default_rng(3))  # type: ignore[misc]
    args = next(iter(sample)).args
    with pytest.raises(AclError) as info:
        eager.run("FlashAttentionScore", backend, layout="transposed", op_args=args)
    assert info.value.code == RtErrorCode.ACL_ERROR_RT_FEATURE_NOT_SUPPORT and "copy" in str(info.value)


def _causal_args(rng: np.random.Generator, b: int, n: int, s: int, d: int, dtype: Any) -> dict[str, Any]:
    q, k, v = (rng.uniform(-1, 1, (b, n, s, d)).astype(dtype) for _ in range(3))
    return {
        "query": q, "key": k, "value": v, "attenMaskOptional": compressed_mask(), "scaleValue": d**-0.5,
        "keepProb": 1.0, "preTokens": 2147483647, "nextTokens": 2147483647, "headNum": n,
        "inputLayout": "BNSD", "innerPrecise": 0, "sparseMode": 3,
    }  # fmt: skip


def test_large_calls_take_blas_when_cudnn_does_not_load(
    paths: tuple[RocmBackend, PathsFake], reference: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    backend, _provider = paths
    runner = backend.attention  # type: ignore[attr-defined]
    assert runner.cudnn.refusal() is not None  # no frontend on this machine
    caps = backend.capabilities().attention_path
    assert caps.startswith("flash kernel") and " > BLAS" in caps and "cuDNN" not in caps  # the fake is an sm_90
    assert caps.endswith("flash kernel for large Prompt / FusedInfer prefill") and "where forced" not in caps
    runner.cudnn.refusal = lambda: None  # as where the frontend loads: flash only where forced for FlashAttentionScore
    runner.cudnn.version = lambda: "9"
    with_cudnn = runner.describe_paths()
    assert with_cudnn.startswith("cuDNN SDPA 9")
    assert "flash kernel where forced (ACL_ATTENTION_PATH=flash)" in with_cudnn
    del runner.cudnn.refusal, runner.cudnn.version
    args = _causal_args(np.random.default_rng(1), 1, 2, 72, 8, np.float32)
    runner.blas.budget = 6 * 72 * 72
    runner.large_work = 2 * 72 * 72
    with caplog.at_level(logging.DEBUG, logger="acl_rocm.attention"):
        got = eager.run("FlashAttentionScore", backend, **args)
    assert runner.last_path == "blas"
    lines = [r.getMessage() for r in caplog.records if "path" in r.getMessage()]
    assert len(lines) == 1 and "blas path" in lines[0] and "cuDNN frontend did not load" in lines[0]
    expected = eager.run("FlashAttentionScore", reference, **args)
    for name in ("attentionOutOut", "softmaxMaxOut", "softmaxSumOut"):
        assert_close(got[name], expected[name])
    with pytest.raises(AclError, match="cuDNN frontend did not load"):
        runner.path_override = "cudnn"
        eager.run("FlashAttentionScore", backend, **args)


# ----------------------------------------------------------------------------- cuDNN refusal and cache
def test_cudnn_is_refused_cleanly_when_the_package_is_missing(paths: tuple[RocmBackend, PathsFake]) -> None:
    backend, _ = paths

    def missing() -> Any:
        raise ModuleNotFoundError("No module named 'cudnn'")

    sdpa = CudnnSdpa(backend, loader=missing)
    assert sdpa.refusal() == "the cuDNN frontend did not load (ModuleNotFoundError: No module named 'cudnn')"
    assert sdpa.refusal() is sdpa.refusal()  # probed once
    assert sdpa.version() == ""
    try:
        import cudnn  # noqa: F401
    except Exception:
        assert attention_cudnn.CudnnSdpa(backend).refusal() is not None
    backend.provider.platform = "amd"  # type: ignore[misc]
    assert "NVIDIA-only" in str(CudnnSdpa(backend, loader=missing).refusal())


def _key(**kw: Any) -> SdpaKey:
    base: dict[str, Any] = dict(
        device=0, dtype=D.ACL_BF16, b=1, nq=2, nkv=2, sq=64, skv=64, d=64, q=(8192, 4096, 64, 1),
        k=(8192, 4096, 64, 1), v=(8192, 4096, 64, 1), o=(8192, 4096, 64, 1), mask="none", scale=0.125,
    )  # fmt: skip
    base.update(kw)
    return SdpaKey(**base)


def test_cudnn_graphs_are_cached_per_key_with_an_lru(paths: tuple[RocmBackend, PathsFake]) -> None:
    backend, _ = paths
    sdpa = CudnnSdpa(backend, loader=lambda: object())
    built: list[SdpaKey] = []

    def build(key: SdpaKey) -> _Built:
        built.append(key)
        if key.d == 4:
            raise RuntimeError("cudnnGraphNotSupportedError: head dim")
        return _Built(graph=None, tensors={}, workspace=0)

    sdpa._build = build  # type: ignore[method-assign]
    first = sdpa.graph(_key())
    assert sdpa.graph(_key()) is first and len(built) == 1
    for change in ({"mask": "bottom_right"}, {"scale": 0.25}, {"o": (8192, 64, 128, 1)}, {"device": 1}, {"nkv": 1}):
        assert sdpa.graph(_key(**change)) is not first
    assert len(built) == 6
    refused = sdpa.graph(_key(d=4))
    assert isinstance(refused, str) and "head dim" in refused
    assert sdpa.graph(_key(d=4)) == refused and len(built) == 7  # a refusal is cached too
    for n in range(GRAPH_LIMIT):
        sdpa.graph(_key(sq=100 + n))
    sdpa.graph(_key())
    assert len(built) == 8 + GRAPH_LIMIT  # the first key was evicted and built again


def test_route_builds_an_address_free_key_and_falls_back_when_cudnn_refuses(
    paths: tuple[RocmBackend, PathsFake], reference: Backend
) -> None:
    backend, _ = paths
    runner = backend.attention  # type: ignore[attr-defined]
    keys: list[SdpaKey] = []
    runner.cudnn.refusal = lambda: None

    def graph(key: SdpaKey) -> str:
        keys.append(key)
        return "cuDNN refused the graph (test)"

    runner.cudnn.graph = graph
    runner.large_work = 1
    rng = np.random.default_rng(2)
    args = _causal_args(rng, 1, 2, 72, 8, ml_dtypes.bfloat16)
    got = eager.run("FlashAttentionScore", backend, **args)
    eager.run("FlashAttentionScore", backend, **{**args, "query": args["query"].copy()})
    assert runner.last_path == "blas" and len(keys) == 2 and keys[0] == keys[1]
    assert keys[0].mask == "bottom_right" and keys[0].q == (2 * 72 * 8, 72 * 8, 8, 1)
    assert keys[0].dtype == D.ACL_BF16 and keys[0].scale == 8**-0.5
    expected = eager.run("FlashAttentionScore", reference, **args)
    atol, rtol = _bf16_tol(np.dtype(ml_dtypes.bfloat16))
    assert_close(got["attentionOutOut"], expected["attentionOutOut"], atol=atol, rtol=rtol)


# ----------------------------------------------------------------------------- the kernel source
def test_softmax_source_declares_its_meta() -> None:
    assert SOFTMAX_STRUCT.count("long long") == 23 and SOFTMAX_META_LEN == 35
    inst = SoftmaxInstance(D.ACL_FLOAT16)
    src = softmax_source(inst)
    assert f"__launch_bounds__(THREADS) {inst.kernel_name}(" in src and "acl_h2f(" in src
    assert SoftmaxInstance(D.ACL_BF16).kernel_name != inst.kernel_name
    assert "float* __restrict__ p" in softmax_source(SoftmaxInstance(D.ACL_FLOAT))


def test_cudnn_statistics_spread_over_the_eight_columns(paths: tuple[RocmBackend, PathsFake]) -> None:
    backend, _ = paths
    column = np.arange(2 * 3 * 5, dtype=np.float32)
    stats = np.zeros((2, 3, 5, 8), np.float32)
    shape = stats.shape
    view = AclTensor(shape, D.ACL_FLOAT, contiguous_strides(shape), 0, Format.ACL_FORMAT_ND, shape, stats.ctypes.data)
    CudnnSdpa(backend)._spread(column.ctypes.data, view, 0)
    np.testing.assert_array_equal(stats, np.broadcast_to(column.reshape(2, 3, 5, 1), shape))

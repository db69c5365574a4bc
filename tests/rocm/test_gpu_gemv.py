"""The small-M GEMM (GEMV) kernel against the reference (GPU tier; issue 15 item 7).

Mm / Matmul with M ≤ 16 fp16 / bf16 rows take the GEMV kernel (``ACL_GEMV=1`` forces it here, so the
test does not depend on the auto threshold); the debug log proves which path ran. Both weight layouts
([N, K] used transposed — a Linear weight — and [K, N]), K and N odd (scalar loads) and powers of two
(16-byte loads), padded activation rows, a 3-D activation folded into rows over a broadcast weight, and
a captured GEMV replayed twice with its inputs changed in place. ``SMALL`` runs on the CPU kernel
emulator (``ACL_ROCM_EMULATE=1``); ``DECODE`` are Qwen3-0.6B's decode products for the GPU.
"""

from __future__ import annotations

import logging
import os
import re

import ml_dtypes
import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_rocm.backend import RocmBackend
from acl_rocm.ops.gemv_config import GEMV_CONFIG_ENV, PRESETS, parse
from tests.conftest import assert_close
from tests.rocm.gemm_tolerance import gemm_tolerance

pytestmark = pytest.mark.gpu

EMULATED = os.environ.get("ACL_ROCM_EMULATE") == "1"
ROWS = [1, 2, 7, 8, 16]
SMALL = [(64, 32), (67, 33)]
"""(K, N): powers of two (vectorised loads) and odd (one element at a time)."""
DECODE = [(1024, 2048), (1024, 151_936), (3072, 1024)]
DTYPES = [ml_dtypes.bfloat16, np.float16]


@pytest.fixture(scope="module")
def forced(rocm: Backend) -> RocmBackend:
    """The same device with the GEMV kernel forced on wherever it fits."""
    if rocm.matmul.unavailable() is not None:  # type: ignore[attr-defined]
        pytest.skip(rocm.matmul.unavailable())  # type: ignore[attr-defined]
    return RocmBackend(rocm.provider, {**os.environ, "ACL_GEMV": "1"})  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def forced_legacy(forced: RocmBackend) -> RocmBackend:
    """The GEMV kernel forced on in its ``legacy`` shape policy (whose split-K passes a test aims at)."""
    return RocmBackend(forced.provider, {**os.environ, "ACL_GEMV": "1", "ACL_GEMV_CONFIG": "legacy"})


def _operands(rng: np.random.Generator, m: int, k: int, n: int, dtype: type) -> tuple[np.ndarray, np.ndarray]:
    return rng.uniform(-1, 1, (m, k)).astype(dtype), rng.uniform(-1, 1, (k, n)).astype(dtype)


def _run_gemv(
    backend: RocmBackend, caplog: pytest.LogCaptureFixture, layout: str, op: str, a: np.ndarray, w: np.ndarray
) -> np.ndarray:
    """``a @ w`` on ``backend`` with the weight stored as [N, K] (``nk``) or [K, N] (``kn``); asserts the GEMV ran."""
    weight = eager.to_device(w, backend, layout="transposed" if layout == "nk" else "contiguous")
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="acl_rocm.matmul"):
        got = eager.run(op, backend, self=a, mat2=weight, cubeMathType=0)["out"]
    assert f"GEMV kernel {layout}" in caplog.text, caplog.text
    return got


def _check(got: np.ndarray, a: np.ndarray, w: np.ndarray, reference: Backend) -> None:
    expected = eager.run("Matmul", reference, self=a, mat2=w, cubeMathType=0)["out"]
    assert got.dtype == expected.dtype and got.shape == expected.shape
    atol, rtol = gemm_tolerance(expected, a.shape[-1])
    assert_close(got, expected, atol=atol, rtol=rtol)


def _shapes() -> list[tuple[int, int]]:
    return SMALL if EMULATED else SMALL + DECODE


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("layout", ["nk", "kn"])
@pytest.mark.parametrize("kn", _shapes(), ids=lambda s: f"k{s[0]}n{s[1]}")
@pytest.mark.parametrize("m", ROWS)
def test_gemv_matches_reference(forced, reference, caplog, m: int, kn: tuple[int, int], layout: str, dtype) -> None:
    k, n = kn
    a, w = _operands(np.random.default_rng(m * 7 + k), m, k, n, dtype)
    _check(_run_gemv(forced, caplog, layout, "Mm", a, w), a, w, reference)


@pytest.mark.parametrize("layout", ["nk", "kn"])
def test_gemv_padded_rows_and_folded_batch(forced, reference, caplog, layout: str) -> None:
    """Activation rows with an odd pitch (scalar loads) and a [2, 4, K] activation over a 2-D weight."""
    rng = np.random.default_rng(11)
    a, w = _operands(rng, 5, 64, 24, ml_dtypes.bfloat16)
    padded = eager.to_device(a, forced, layout="padded")
    weight = eager.to_device(w, forced, layout="transposed" if layout == "nk" else "contiguous")
    with caplog.at_level(logging.DEBUG, logger="acl_rocm.matmul"):
        got = eager.run("Mm", forced, self=padded, mat2=weight, cubeMathType=0)["out"]
    vec = "vec=1" if layout == "nk" else "vec=8"  # nk loads activation rows as vectors too; kn reads them singly
    assert f"GEMV kernel {layout} bf16 m=5 k=64 n=24 {vec}" in caplog.text, caplog.text
    _check(got, a, w, reference)
    x = rng.uniform(-1, 1, (2, 4, 64)).astype(np.float16)
    w16 = w.astype(np.float16)
    got = _run_gemv(forced, caplog, layout, "Matmul", x, w16)
    assert "m=8 k=64" in caplog.text
    _check(got, x, w16, reference)


SPLIT = [(1040, 24), (1031, 17)]
"""(K, N) where the nk kernel splits K over a block's warps with a partial last pass (16-byte and 2-byte loads)."""


@pytest.mark.parametrize("kn", SPLIT, ids=lambda s: f"k{s[0]}n{s[1]}")
@pytest.mark.parametrize("m", range(1, 17))
def test_gemv_nk_split_k_boundaries(forced_legacy, reference, caplog, m: int, kn: tuple[int, int]) -> None:
    """Every M from 1 to 16 over K split between warps, with lanes whose last unrolled loads fall past K."""
    k, n = kn
    a, w = _operands(np.random.default_rng(100 + m), m, k, n, ml_dtypes.bfloat16)
    got = _run_gemv(forced_legacy, caplog, "nk", "Mm", a, w)
    assert re.search(r"ksplit=[2-8] unroll=[2-4] ", caplog.text), caplog.text  # both split paths run
    _check(got, a, w, reference)


@pytest.mark.parametrize("m", [1, 5, 16])
def test_gemv_kn_unrolled_tail(forced, reference, caplog, m: int) -> None:
    """[K, N] weights whose K is no multiple of the splits times the unrolled loads (fp16, an fp32 output too)."""
    a, w = _operands(np.random.default_rng(200 + m), m, 1040, 24, np.float16)
    got = _run_gemv(forced, caplog, "kn", "Mm", a, w)
    assert re.search(r"unroll=[2-8] ", caplog.text), caplog.text
    _check(got, a, w, reference)
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="acl_rocm.matmul"):
        wide = eager.run("Mm", forced, self=a, mat2=w, cubeMathType=0, out_dtypes={"out": D.ACL_FLOAT})["out"]
    assert "GEMV kernel kn" in caplog.text, caplog.text
    assert wide.dtype == np.float32
    exact = a.astype(np.float64) @ w.astype(np.float64)
    np.testing.assert_allclose(wide, exact, atol=1e-4, rtol=1e-4)


def test_gemv_switch_off_and_rows_above_sixteen_take_the_blas(rocm, forced, caplog) -> None:
    """``ACL_GEMV=0`` and M = 17 run the vendor BLAS, and say so."""
    off = RocmBackend(rocm.provider, {**os.environ, "ACL_GEMV": "0"})  # type: ignore[attr-defined]
    rng = np.random.default_rng(2)
    for backend, m in ((off, 4), (forced, 17)):
        a, w = _operands(rng, m, 32, 16, ml_dtypes.bfloat16)
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="acl_rocm.matmul"):
            got = eager.run("Mm", backend, self=a, mat2=w, cubeMathType=0)["out"]
        assert "BLAS GEMM" in caplog.text and "GEMV" not in caplog.text, caplog.text
        exact = a.astype(np.float64) @ w.astype(np.float64)
        np.testing.assert_allclose(got.astype(np.float64), exact, atol=0.05, rtol=0.02)


def test_gemv_captures_and_replays_bit_for_bit(forced) -> None:
    """A GEMV Mm inside a captured graph, replayed twice with new inputs written in place, equals its eager runs."""
    from tests.rocm.capture_harness import OpCall, compare_replay

    if not forced.capabilities().stream_capture:
        pytest.fail(f"rocm does not capture here: {forced.capabilities().notes.get('stream_capture')}")
    rng = np.random.default_rng(4)
    a, w = _operands(rng, 8, 64, 40, ml_dtypes.bfloat16)
    calls = [OpCall(forced, "Mm", {"self": a, "mat2": w, "cubeMathType": 0})]
    stream = forced.runtime.create_stream()  # type: ignore[attr-defined]
    try:
        forced.driver.graph_destroy(compare_replay(calls, stream))
    finally:
        for c in calls:
            c.free()
        forced.runtime.destroy_stream(stream)  # type: ignore[attr-defined]


NK_CONFIGS = [
    *PRESETS,
    "legacy,grid=2",
    "row,block=64,grid=3",
    "deep,tile=4,grid=2",
]
"""``ACL_GEMV_CONFIG`` choices of the nk kernel: every preset, and grids capped below the tile groups (blocks loop)."""
NK_SHAPES = [(1040, 24), (1031, 17), (64, 67)]
"""(K, N): split K with partial passes (16-byte and 2-byte loads), and more tile groups than a capped grid."""
NK_DECODE = [(1024, 6144), (1024, 4096), (3072, 1024), (2048, 1024), (1024, 151_936)]
"""Qwen3-0.6B's decode weights [N, K] (gate_up, qkv, down, o, the vocabulary head)."""


@pytest.fixture(scope="module")
def configured(rocm: Backend) -> dict[str, RocmBackend]:
    """Backends with the GEMV kernel forced on, one per ``ACL_GEMV_CONFIG`` setting (made on first use)."""
    if rocm.matmul.unavailable() is not None:  # type: ignore[attr-defined]
        pytest.skip(rocm.matmul.unavailable())  # type: ignore[attr-defined]
    return {}


@pytest.mark.parametrize("kn", NK_SHAPES if EMULATED else NK_SHAPES + NK_DECODE, ids=lambda s: f"k{s[0]}n{s[1]}")
@pytest.mark.parametrize("m", [1, 3, 16] if EMULATED else [1, 8, 16])
@pytest.mark.parametrize("config", NK_CONFIGS)
def test_gemv_nk_config_matches_reference(rocm, configured, reference, caplog, config: str, m: int, kn) -> None:
    """Every nk shape policy (``ACL_GEMV_CONFIG``) within Matmul's accuracy class; capped grids really loop."""
    if config not in configured:
        env = {**os.environ, "ACL_GEMV": "1", GEMV_CONFIG_ENV: config}
        configured[config] = RocmBackend(rocm.provider, env)  # type: ignore[attr-defined]
    k, n = kn
    a, w = _operands(np.random.default_rng(300 + m * 7 + k + n), m, k, n, ml_dtypes.bfloat16)
    got = _run_gemv(configured[config], caplog, "nk", "Mm", a, w)
    policy = parse(config)
    found = re.search(r"tile=(\d+) groups=\d+ ksplit=(\d+) unroll=\d+ grid=(\d+) block=(\d+) loads=(\w+)", caplog.text)
    assert found is not None and f"{GEMV_CONFIG_ENV}={policy.name})" in caplog.text, caplog.text
    tile, ksplit, grid, block = (int(found.group(i)) for i in (1, 2, 3, 4))
    assert block == policy.block and found.group(5) == policy.loads
    if policy.grid:  # fewer blocks than tile groups: the grid-stride loop ran
        per_block = block // rocm.properties.warp_size // ksplit  # type: ignore[attr-defined]
        tiles = -(-n // tile)
        assert grid == policy.grid and grid < -(-tiles // per_block)
    _check(got, a, w, reference)
    again = _run_gemv(configured[config], caplog, "nk", "Mm", a, w)
    np.testing.assert_array_equal(again.view(np.uint16), got.view(np.uint16))  # deterministic: same bits again


PDL_MODES = ["1", "regs"]
"""``ACL_PDL`` settings beside ``0``: the L2-prefetch wait (``1`` = ``l2``) and the register-load wait."""
CHAIN_DIMS = (64, 96, 2) if EMULATED else (1024, 3072, 2)
"""(hidden, intermediate, layers) of the chain: Qwen3-0.6B's on a GPU (qkv [4096 x 1024], o [1024 x 4096],
gate_up [6144 x 1024], down [1024 x 3072]); tiny on the emulator."""


def _pdl_chain(backend: RocmBackend, m: int, seed: int) -> tuple[list[object], list[object]]:
    """Qwen3-shaped decode layers as linked device calls: RmsNorm -> qkv GEMV -> o GEMV -> RmsNorm -> gate_up GEMV
    -> SwiGlu -> down GEMV -> the next layer; each call reads the previous call's output on the device.
    Returns (calls, weights to free)."""
    from tests.rocm.capture_harness import OpCall

    hidden, inter, layers = CHAIN_DIMS
    rng = np.random.default_rng(seed)
    bf16 = ml_dtypes.bfloat16

    def weight(k: int, n: int) -> object:  # a Linear weight [N, K] used transposed: the nk kernel
        return eager.to_device((rng.uniform(-1, 1, (k, n)) / np.sqrt(k)).astype(bf16), backend, layout="transposed")

    calls: list[OpCall] = []
    weights: list[object] = []
    x: object = rng.uniform(-1, 1, (m, hidden)).astype(bf16)
    for _ in range(layers):
        w = [weight(hidden, 4 * hidden), weight(4 * hidden, hidden), weight(hidden, 2 * inter), weight(inter, hidden)]
        weights += w
        gammas = [rng.uniform(0.5, 1.5, (hidden,)).astype(bf16) for _ in range(2)]

        def step(op: str, **kwargs: object) -> object:
            calls.append(OpCall(backend, op, kwargs))
            out = "yOut" if op == "RmsNorm" else "out"
            return calls[-1].conv.arrays[out]

        n1 = step("RmsNorm", x=x, gamma=gammas[0], epsilon=1e-6)
        qkv = step("Mm", self=n1, mat2=w[0], cubeMathType=0)
        o = step("Mm", self=qkv, mat2=w[1], cubeMathType=0)
        n2 = step("RmsNorm", x=o, gamma=gammas[1], epsilon=1e-6)
        gu = step("Mm", self=n2, mat2=w[2], cubeMathType=0)
        s = step("SwiGlu", x=gu, dim=-1)
        x = step("Mm", self=s, mat2=w[3], cubeMathType=0)
    return calls, weights


@pytest.mark.parametrize("m", [1, 8])
@pytest.mark.parametrize("mode", PDL_MODES)
def test_gemv_pdl_chain_equals_plain_launches_bit_for_bit(rocm, caplog, mode: str, m: int) -> None:
    """``ACL_PDL`` on (GEMVs launched with programmatic stream serialization, overlapping the norm / SwiGlu / GEMV
    before them) computes the chain's every output bit for bit as ``ACL_PDL=0``, eagerly and captured + replayed
    (the graph keeps the programmatic edges)."""
    from tests.rocm.capture_harness import compare_replay, run_eager

    if rocm.matmul.unavailable() is not None:  # type: ignore[attr-defined]
        pytest.skip(rocm.matmul.unavailable())  # type: ignore[attr-defined]
    provider = rocm.provider  # type: ignore[attr-defined]
    env = {**os.environ, "ACL_GEMV": "1"}
    plain = RocmBackend(provider, {**env, "ACL_PDL": "0"})
    pdl = RocmBackend(provider, {**env, "ACL_PDL": mode})
    if not pdl.capabilities().stream_capture:
        pytest.fail(f"rocm does not capture here: {pdl.capabilities().notes.get('stream_capture')}")
    why = provider.programmatic_unavailable()
    if not EMULATED and why is not None:
        pytest.skip(f"no programmatic dependent launch here: {why}")
    before = len(getattr(provider, "programmatic_launches", []))
    results = []
    for backend in (plain, pdl):
        calls, weights = _pdl_chain(backend, m, seed=40 + m)
        stream = backend.runtime.create_stream()
        try:
            caplog.clear()
            with caplog.at_level(logging.DEBUG, logger="acl_rocm.matmul"):
                results.append([run_eager(calls, stream, v) for v in (0, 1)])
            want = "pdl=off" if backend is plain else f"pdl={'l2' if mode == '1' else mode}"
            assert caplog.text.count(want) >= 4 * CHAIN_DIMS[2], caplog.text  # every GEMV, in the asked mode
            backend.driver.graph_destroy(compare_replay(calls, stream))  # replays equal eager bit for bit
        finally:
            for c in calls:
                c.free()
            for w in weights:
                w.free()  # type: ignore[attr-defined]
            backend.runtime.destroy_stream(stream)
    if EMULATED:  # the emulator's provider records the attribute: only the PDL backend's GEMVs asked for it
        launched = provider.programmatic_launches[before:]
        assert launched and all(name.startswith("acl_gemv_") for name in launched), launched
    from tests.rocm.capture_harness import assert_bitwise

    for variant in (0, 1):
        assert_bitwise(results[1][variant], results[0][variant], f"ACL_PDL={mode} against 0, inputs {variant}")

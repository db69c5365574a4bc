"""The wgmma grouped GEMM (``kernels/grouped_matmul_wgmma.py``, sm_90a) on the CPU: layouts, selection, nvcc.

The kernel's copy mapping, shared layouts, descriptor strides, k16 steps and split offsets are checked against
:mod:`acl_rocm.kernels.wgmma`'s twins (the layouts its GPU tile tests ran) by computing the address the hardware reads
for every element; then the whole kernel runs on the CPU kernel emulator, whose wgmma is wgmma.py's software SS step
(each thread's accumulator elements from the descriptors' addresses, the same arithmetic as :func:`_read_address`):
every configuration, both weight layouts, the split / narrow tiles, K tails, the element path, every V5 sample. What
only a GPU proves: that the hardware reads the descriptors that way (the no-swizzle form ran in wgmma.py's tile tests)
and the asynchronous ordering (fences, commit / wait groups, the stage ring's reuse). The runner over the fake
provider must take the kernel under ``ACL_GMM_KERNEL=wgmma`` on an sm_90 only, compiled for ``sm_90a``, and fall back
to what ``auto`` picks with a logged reason elsewhere (sm_80, the stock emulator, fp32 operands, too little shared
memory); nvcc must build every configuration to sm_90a cubins without spills or serialised wgmma. The GPU tier is
``test_gpu_gmm_wgmma.py``.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import shutil
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from acl_core import eager
from acl_core.dtypes import DataType as D
from acl_core.errors import AclError, AclErrorCode
from acl_rocm.backend import RocmBackend
from acl_rocm.kernels.grouped_matmul_mma import GmmMmaKernel
from acl_rocm.kernels.grouped_matmul_wgmma import (
    ALTERNATIVES,
    BK,
    BM,
    DEFAULT,
    THREADS,
    GmmWgmmaKernel,
    WgGmmConfig,
    chunk_of,
    chunk_offset,
    element_offset,
    operand_desc,
    parse_config,
    split_offset,
    wgmma_ns,
)
from acl_rocm.kernels.prelude import compile_options
from acl_rocm.kernels.wgmma import interleaved_offset, swizzled_offset
from acl_rocm.providers.base import DeviceProperties
from tests.rocm.fake_provider import FakeProvider
from tests.rocm.gemm_tolerance import gemm_tolerance
from tests.rocm.kernel_emulator import EmulatedProvider, emulated_backend
from tests.rocm.test_gpu_grouped_matmul import _transposed_weight, moe_counts

OP = "GroupedMatmulV5"
BF16 = ml_dtypes.bfloat16
CONFIGS = (str(DEFAULT), *ALTERNATIVES)


def _twin(swizzle: bool) -> Callable[[int, int, int, int], int]:
    """wgmma.py's layout as f(row, col, rows, cols): the swizzled or the no-swizzle one its tile tests ran."""
    if swizzle:
        return lambda r, c, rows, cols: swizzled_offset(r, c, rows)
    return lambda r, c, rows, cols: interleaved_offset(r, c, cols)


def _tiles(bn: int) -> dict[str, tuple[int, int]]:
    """(rows, cols) of each staged operand: x K-major, the weight K-major (``nk``) or N-major (``kn``)."""
    return {"a": (BM, BK), "b_nk": (bn, BK), "b_kn": (BK, bn)}


# ----------------------------------------------------------------------------- layout twins
@pytest.mark.parametrize("swizzle", [False, True])
@pytest.mark.parametrize("bn", [128, 256])
def test_staged_layouts_are_wgmma_pys(swizzle: bool, bn: int) -> None:
    """Every element's offset is the twin's; chunks are 8 consecutive elements; the tile is covered once."""
    twin = _twin(swizzle)
    for rows, cols in _tiles(bn).values():
        offsets = [element_offset(r, c, rows, cols, swizzle) for r in range(rows) for c in range(cols)]
        assert sorted(offsets) == list(range(rows * cols))
        for r in range(rows):
            for c in range(cols):
                assert element_offset(r, c, rows, cols, swizzle) == twin(r, c, rows, cols)
            for ch in range(cols // 8):
                assert chunk_offset(r, ch, rows, cols, swizzle) % 8 == 0


@pytest.mark.parametrize("swizzle", [False, True])
@pytest.mark.parametrize("bn", [128, 256])
def test_copy_mapping(swizzle: bool, bn: int) -> None:
    """Copy i of a stage covers each chunk once; copy i + 256 is 256 / (cols / 8) rows further in the same chunk
    column at the destination step the kernel adds (WG_DSTEP); 8 consecutive copies store to 8 distinct 16-byte
    bank groups (conflict-free)."""
    for rows, cols in _tiles(bn).values():
        chunks = [chunk_of(i, cols, swizzle) for i in range(rows * cols // 8)]
        assert sorted(chunks) == [(r, c) for r in range(rows) for c in range(cols // 8)]
        step = THREADS // (cols // 8)
        dstep = step * 64 if swizzle else step * cols
        for i in range(rows * cols // 8 - THREADS):
            (r0, c0), (r1, c1) = chunks[i], chunks[i + THREADS]
            assert (r1, c1) == (r0 + step, c0)
            assert chunk_offset(r1, c1, rows, cols, swizzle) - chunk_offset(r0, c0, rows, cols, swizzle) == dstep
        for i in range(0, rows * cols // 8, 8):
            banks = {(chunk_offset(*chunks[j], rows, cols, swizzle) * 2 // 16) % 8 for j in range(i, i + 8)}
            assert len(banks) == 8


def _swz(byte: int) -> int:
    """The hardware's 128-byte swizzle on an address of a 1024-byte-aligned tile (bits 4-6 ^= bits 7-9)."""
    return byte ^ (((byte >> 7) & 7) << 4)


def _read_address(operand: str, bn: int, swizzle: bool, start: int, ks: int, r: int, kk: int) -> int:
    """The byte the hardware reads for element (row r along M / N, k kk of k16 step ks) of an operand whose
    descriptor starts at byte ``start`` (LBO, SBO and the step from :func:`operand_desc`)."""
    lbo, sbo, step = operand_desc(operand, bn, swizzle)
    base = start + 16 * step * ks
    if operand in ("a", "b_nk"):  # K-major: rows along M / N, K along the 16-byte rows
        if swizzle:
            return _swz(base + (r // 8) * sbo + (r % 8) * 128 + 2 * kk)
        return base + (r // 8) * sbo + (kk // 8) * lbo + (r % 8) * 16 + (kk % 8) * 2
    # N-major (imm-trans-b 1): r is the N index, kk the K index
    if swizzle:
        return _swz(base + (r // 64) * lbo + (kk // 8) * sbo + (kk % 8) * 128 + 2 * (r % 64))
    return base + (kk // 8) * lbo + (r // 8) * sbo + (kk % 8) * 16 + (r % 8) * 2


@pytest.mark.parametrize("swizzle", [False, True])
@pytest.mark.parametrize("bn", [128, 256])
def test_descriptors_read_the_staged_elements(swizzle: bool, bn: int) -> None:
    """For every k16 step of a 64-deep slice, each warpgroup's descriptors (x at its 64 rows; the weight at column 0,
    or at a split tile's ``w * wn`` through :func:`split_offset`) address exactly the element the copies staged there,
    for every wgmma N the configuration issues."""
    tiles = _tiles(bn)
    for ks in range(BK // 16):
        for wg in range(2):
            rows, cols = tiles["a"]
            start = 2 * wg * 64 * BK  # WG_A_WG elements
            for r in range(64):
                for kk in range(16):
                    want = 2 * element_offset(64 * wg + r, 16 * ks + kk, rows, cols, swizzle)
                    assert _read_address("a", bn, swizzle, start, ks, r, kk) == want
        for wn in wgmma_ns(WgGmmConfig(bn, 4, 1, swizzle)):
            for nk in (True, False):
                operand = "b_nk" if nk else "b_kn"
                rows, cols = tiles[operand]
                for wg in range(2 if 2 * wn <= bn else 1):
                    start = 2 * wg * split_offset(nk, wn, swizzle)
                    for n in range(wn):
                        for kk in range(16):
                            col, k = wg * wn + n, 16 * ks + kk
                            at = (
                                element_offset(col, k, rows, cols, swizzle)
                                if nk
                                else element_offset(k, col, rows, cols, swizzle)
                            )
                            assert _read_address(operand, bn, swizzle, start, ks, n, kk) == 2 * at, (operand, wn, wg)
    assert split_offset(True, 128, True) == element_offset(128, 0, 256, BK, True)
    assert split_offset(False, 64, False) == element_offset(0, 64, BK, 256, False)


# ----------------------------------------------------------------------------- configurations
def test_config_parsing_and_shared_memory() -> None:
    assert str(DEFAULT) == "128x256-s4-sw" and parse_config(" 128x256-S4-SW ") == DEFAULT
    assert DEFAULT.shared_bytes == 4 * (128 + 256) * 64 * 2 + 1024
    assert parse_config("128x128-s3-b2-sw") == WgGmmConfig(128, 3, 2, True)
    assert parse_config("128x256-s4").shared_bytes == 4 * 384 * 128
    assert parse_config("128x256-s4-p-sw") == WgGmmConfig(256, 4, 1, True, True)
    assert str(WgGmmConfig(128, 3, 2, False, True)) == "128x128-s3-b2-p"
    assert parse_config("128x256-s4-p-m-d-sw") == WgGmmConfig(256, 4, 1, True, True, True, True)
    assert parse_config("128x128-s3-b2-m") == WgGmmConfig(128, 3, 2, False, False, True)
    assert (DEFAULT.ahead, parse_config("128x256-s4-d-sw").ahead, parse_config("128x128-s3-d").ahead) == (2, 3, 2)
    for name in CONFIGS:
        config = parse_config(name)
        assert str(config) == name and config.shared_bytes * config.blocks <= 227 * 1024
    for bad in (
        "128x192-s4",
        "128x256-s2",
        "128x256-s5",
        "128x256-s4-b3",
        "64x256-s4",
        "128x256-s4-sw-p",
        "wg2k128",
        "128x128x32-w2x2-s4",
        "128x256-s4-d-m-sw",
        "128x256-s4-m-p-sw",
        "128x256-s4-sw-m",
        "128x256-s4-mm",
        "128x256-s4-x-sw",
    ):
        with pytest.raises(ValueError, match=r"wgmma grouped GEMM configuration|not 128x"):
            parse_config(bad)
    assert wgmma_ns(DEFAULT) == (64, 128, 256) and wgmma_ns(WgGmmConfig(128)) == (64, 128)
    with pytest.raises(ValueError, match="float16 / bfloat16"):
        GmmWgmmaKernel(D.ACL_FLOAT, None)
    with pytest.raises(ValueError, match="cannot write"):
        GmmWgmmaKernel(D.ACL_BF16, None, D.ACL_INT32)


# ----------------------------------------------------------------------------- selection (fake provider)
class ArchRecording(FakeProvider):
    """The fake provider, keeping the target each kernel was compiled for."""

    def compile(self, source: str, name: str, options: tuple[str, ...], arch: str) -> bytes:
        self.targets = {**getattr(self, "targets", {}), name: arch}
        return super().compile(source, name, options, arch)


def _backend(tmp_path: Path, arch: str = "sm_90", **env: str) -> tuple[RocmBackend, ArchRecording]:
    provider = ArchRecording(arch=arch, shared_opt_in=int(env.pop("opt_in", 232448)))
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp_path), "ACL_GMM_KERNEL": "wgmma", **env})
    backend.runtime.ensure_device(0)
    return backend, provider


def _moe_args(rng: np.random.Generator, dtype: object = BF16, n: int = 300, transposed: bool = False) -> dict:
    counts = np.array([70, 0, 129, 1, 96, 0, 300, 64], np.int64)
    return {
        "splitItem": 3,
        "groupType": 0,
        "groupListType": 1,
        "actType": 0,
        "x": [rng.uniform(-1, 1, (700, 64)).astype(dtype)],
        "weight": [rng.uniform(-1, 1, (8, 64, n)).astype(dtype)],
        "groupListOptional": counts,
    }


@pytest.mark.parametrize(
    "setting", ["", "128x256-s4", "128x128-s3-b2-sw", "128x256-s4-p-sw", "128x256-s4-m-d-sw", "128x256-s4-p-m-d-sw"]
)
def test_the_switch_compiles_it_for_sm_90a(tmp_path: Path, setting: str) -> None:
    backend, provider = _backend(tmp_path, ACL_GMM_WGMMA_CONFIG=setting)
    runner = backend.grouped_matmul
    eager.run(OP, backend, **_moe_args(np.random.default_rng(0)))
    config = parse_config(setting) if setting else DEFAULT
    assert runner.last_path == "wgmma" and runner.last_config == str(config) and runner.last_refusal is None
    gemm = provider.launches[-1]
    assert provider.targets[gemm.name] == "sm_90a"
    assert all(t == "sm_90" for name, t in provider.targets.items() if name != gemm.name)
    assert gemm.block == (256, 1, 1) and provider.dynamic_shared[gemm.name] == config.shared_bytes
    row_tiles = -(-700 // 128) + 8  # the host's bound: rows / 128 plus one partial tile a group
    tiles = row_tiles * -(-300 // config.bn)
    assert gemm.grid == (min(tiles, 132) if config.persistent else tiles, 1, 1)
    assert runner.wgmma_alternatives() == CONFIGS


def test_forced_kernel_and_config_override_the_environment(tmp_path: Path) -> None:
    backend, _ = _backend(tmp_path, ACL_GMM_KERNEL="mma")
    runner = backend.grouped_matmul
    args = _moe_args(np.random.default_rng(1))
    eager.run(OP, backend, **args)
    assert runner.last_path == "mma"
    runner.forced_kernel, runner.forced_wgmma_config = "wgmma", "128x128-s4-sw"
    try:
        eager.run(OP, backend, **args)
    finally:
        runner.forced_kernel = runner.forced_wgmma_config = None
    assert runner.last_path == "wgmma" and runner.last_config == "128x128-s4-sw"


@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_auto_takes_it_on_sm_90_quietly_elsewhere(tmp_path: Path, arch: str, caplog: pytest.LogCaptureFixture) -> None:
    """Unset switch: fp16 / bf16 groups on sm_90 run the wgmma kernel (AUTO_WGMMA); elsewhere, and for int8 or fp32,
    the kernel they ran before, with no refusal kept or logged (nothing was asked for)."""
    backend, _ = _backend(tmp_path, arch=arch, ACL_GMM_KERNEL="")
    runner = backend.grouped_matmul
    with caplog.at_level(logging.DEBUG, logger="acl_rocm.grouped_matmul"):
        eager.run(OP, backend, **_moe_args(np.random.default_rng(5)))
        assert runner.last_path == ("wgmma" if arch == "sm_90" else "mma") and runner.last_refusal is None
        eager.run(OP, backend, **_moe_args(np.random.default_rng(6), np.float32))
        assert runner.last_path == "simt" and runner.last_refusal is None
        assert isinstance(runner.gemm(D.ACL_INT8, None, D.ACL_INT32), GmmMmaKernel)
    assert "refused" not in caplog.text


@pytest.mark.parametrize("arch", ["sm_80", "sm_100"])
def test_other_archs_take_auto_with_a_logged_reason(
    tmp_path: Path, arch: str, caplog: pytest.LogCaptureFixture
) -> None:
    backend, provider = _backend(tmp_path, arch=arch)
    runner = backend.grouped_matmul
    with caplog.at_level(logging.DEBUG, logger="acl_rocm.grouped_matmul"):
        eager.run(OP, backend, **_moe_args(np.random.default_rng(2)))
    assert runner.last_path == "mma" and arch in (runner.last_refusal or "")
    assert f"ACL_GMM_KERNEL=wgmma refused: {runner.last_refusal}" in caplog.text
    assert "sm_90a" not in provider.targets.values() and runner.wgmma_alternatives() == ()


def test_fp32_and_small_shared_memory_are_refused(tmp_path: Path) -> None:
    backend, _ = _backend(tmp_path)
    runner = backend.grouped_matmul
    eager.run(OP, backend, **_moe_args(np.random.default_rng(3), np.float32))
    assert runner.last_path == "simt" and "float32" in (runner.last_refusal or "")
    assert not isinstance(runner.gemm(D.ACL_INT8, None, D.ACL_INT32), GmmWgmmaKernel)
    assert "int8" in (runner.last_refusal or "")
    small, _ = _backend(tmp_path, opt_in=str(DEFAULT.shared_bytes - 1))
    assert isinstance(small.grouped_matmul.gemm(D.ACL_BF16, None, D.ACL_BF16), GmmMmaKernel)
    assert "shared memory" in (small.grouped_matmul.last_refusal or "")


def test_invalid_config_is_a_typed_error(tmp_path: Path) -> None:
    backend, _ = _backend(tmp_path, ACL_GMM_WGMMA_CONFIG="128x192-s4")
    with pytest.raises(AclError, match="ACL_GMM_WGMMA_CONFIG") as info:
        eager.run(OP, backend, **_moe_args(np.random.default_rng(4)))
    assert info.value.code == AclErrorCode.ACL_ERROR_INVALID_PARAM


def test_the_emulator_refuses_it_and_runs_the_mma_kernel(tmp_path: Path) -> None:
    backend = emulated_backend(tmp_path, EmulatedProvider(blas=True))
    runner = backend.grouped_matmul
    runner.forced_kernel = "wgmma"
    args = _moe_args(np.random.default_rng(5), n=48)
    try:
        got = eager.run(OP, backend, **args)["out"][0]
    finally:
        runner.forced_kernel = None
    assert runner.last_path == "mma" and "sm_90" in (runner.last_refusal or "")
    x, w, counts = args["x"][0].astype(np.float64), args["weight"][0].astype(np.float64), args["groupListOptional"]
    ends = np.cumsum(counts)
    want = np.zeros((700, 48))
    for g, (s, e) in enumerate(zip([0, *ends[:-1]], ends)):
        want[s:e] = x[s:e] @ w[g]
    atol, rtol = gemm_tolerance(want[: ends[-1]].astype(BF16), 64)
    np.testing.assert_allclose(got[: ends[-1]].astype(np.float64), want[: ends[-1]], atol=atol, rtol=rtol)


# ----------------------------------------------------------------------------- the kernel on the emulator
class WgmmaEmulated(EmulatedProvider):
    """The kernel emulator claiming the sm_90a target (wgmma.py's software SS step stands in for the hardware's) on a
    device of 2 SMs, so that persistent blocks walk several tiles of different shapes."""

    def arch_specific(self, arch: str) -> str | None:
        return "sm_90a" if arch == "sm_90" else None

    def device_properties(self, index: int) -> DeviceProperties:
        return dataclasses.replace(super().device_properties(index), compute_units=2)


def _run_config(backend: RocmBackend, args: dict, w: np.ndarray, weight_layout: str, config: str) -> np.ndarray:
    """``args`` on the emulated wgmma kernel in ``config`` (the weight ``w`` stored [g, N, K] for ``nk``); its out."""
    keep = None
    if weight_layout == "nk":
        args["weight"], keep = _transposed_weight(backend, w)
    runner = backend.grouped_matmul
    runner.forced_wgmma_config = config
    try:
        got = eager.run(OP, backend, **args)["out"][0]
    finally:
        runner.forced_wgmma_config = None
    del keep
    assert runner.last_path == "wgmma" and runner.last_config == config
    return got


@pytest.fixture(scope="module")
def emulated_wgmma(tmp_path_factory: pytest.TempPathFactory) -> RocmBackend:
    backend: RocmBackend = emulated_backend(tmp_path_factory.mktemp("kc"), WgmmaEmulated(blas=True))
    backend.grouped_matmul.forced_kernel = "wgmma"
    return backend


ROWS = [0, 1, 63, 64, 65, 129, 0, 128]
"""Rows per group: empty, split tiles (at most 64 rows), full and partial 128-row tiles."""


@pytest.mark.parametrize("weight_layout", ["kn", "nk"])
@pytest.mark.parametrize(("k", "n", "dtype"), [(136, 320, "bf16"), (72, 100, "f16"), (64, 64, "bf16")])
@pytest.mark.parametrize("config", CONFIGS)
def test_the_kernel_on_the_emulator(
    emulated_wgmma: RocmBackend, config: str, k: int, n: int, dtype: str, weight_layout: str
) -> None:
    """Against NumPy's float64 product under a K-term sum's bound: K tails (136, 72), N tails on the n/2 and n/4 forms
    (320, 64 with bn 256), [g, K, N] rows off the 16-byte grid (N 100: the element path), a bias, both layouts;
    rows past the last group keep their sentinel."""
    rng = np.random.default_rng(k + n)
    dt = BF16 if dtype == "bf16" else np.float16
    m = sum(ROWS) + 5
    x, w = rng.uniform(-1, 1, (m, k)).astype(dt), rng.uniform(-1, 1, (len(ROWS), k, n)).astype(dt)
    bias = rng.uniform(-1, 1, (len(ROWS), n)).astype(np.float32 if dtype == "bf16" else np.float16)
    args = {**_moe_args(rng), "x": [x], "weight": [w], "biasOptional": [bias], "out": [np.full((m, n), -7, dt)]}
    args["groupListOptional"] = np.array(ROWS, np.int64)
    got = _run_config(emulated_wgmma, args, w, weight_layout, config)
    gemm = emulated_wgmma.provider.launches[-1]  # type: ignore[attr-defined]
    assert gemm.grid[0] == (2 * parse_config(config).blocks if "-p" in config else gemm.grid[0])
    want = np.full((m, n), np.nan)
    start = 0
    for g, rows in enumerate(ROWS):
        xs = x[start : start + rows].astype(np.float64)
        want[start : start + rows] = xs @ w[g].astype(np.float64) + bias[g].astype(np.float64)
        start += rows
    assert np.all(got[start:] == -7)
    atol, rtol = gemm_tolerance(want[:start].astype(dt), k)
    np.testing.assert_allclose(got[:start].astype(np.float64), want[:start], atol=atol, rtol=rtol)


@pytest.mark.parametrize("layout", ["contiguous", "padded", "transposed"])
def test_v5_samples_on_the_emulator(emulated_wgmma: RocmBackend, layout: str) -> None:
    """Every GroupedMatmulV5 sample with the kernel forced (fp16 / bf16 and MX groups on it, fp32 on the SIMT kernel)
    against the reference under the op's tolerance, in every layout (strided views: the element path)."""
    from acl_core.spec.ops import get_spec
    from tests.rocm.test_gpu_grouped_matmul import _check

    reference = __import__("acl_core").get_backend("reference")
    runner = emulated_wgmma.grouped_matmul
    for sample in get_spec(OP).samples(np.random.default_rng(7)):  # type: ignore[misc]
        runner.last_path = None
        _check(emulated_wgmma, reference, dict(sample.args), layout)
        if np.dtype(sample.args["x"][0].dtype) != np.float32:
            assert runner.last_path in ("wgmma", None), sample.note


WEIGHT_BOUND = ("128x256-s4-m-d-sw", "128x256-s4-p-m-d-sw", "128x128-s3-b2-m-d-sw")
"""The tile-order / copies-in-flight choices (``-m``, ``-d``; alone they are :data:`CONFIGS` rows): both, both on
persistent blocks, and on two 128-column blocks an SM with three stages (``-d``: two slices in flight, not one)."""


@pytest.mark.parametrize("layout", ["contiguous", "padded", "transposed"])
@pytest.mark.parametrize("config", WEIGHT_BOUND)
def test_v5_samples_under_the_weight_bound_choices(emulated_wgmma: RocmBackend, config: str, layout: str) -> None:
    """Every GroupedMatmulV5 sample with ``-m`` / ``-d`` forced, in every layout, against the reference."""
    from acl_core.spec.ops import get_spec
    from tests.rocm.test_gpu_grouped_matmul import _check

    reference = __import__("acl_core").get_backend("reference")
    runner = emulated_wgmma.grouped_matmul
    runner.forced_wgmma_config = config
    try:
        for sample in get_spec(OP).samples(np.random.default_rng(8)):  # type: ignore[misc]
            runner.last_path = None
            _check(emulated_wgmma, reference, dict(sample.args), layout)
            if np.dtype(sample.args["x"][0].dtype) != np.float32:
                assert runner.last_path in ("wgmma", None), sample.note
                assert runner.last_path is None or runner.last_config == config
    finally:
        runner.forced_wgmma_config = None


@pytest.mark.parametrize("weight_layout", ["kn", "nk"])
@pytest.mark.parametrize(
    "config", [str(DEFAULT), "128x256-s4-m-sw", "128x256-s4-d-sw", "128x256-s4-p-m-sw", *WEIGHT_BOUND]
)
def test_uneven_moe_lists_on_the_emulator(emulated_wgmma: RocmBackend, config: str, weight_layout: str) -> None:
    """An uneven MoE-shaped list (groups of 0 to several row tiles, one empty) at N 384 (a narrow N-tail tile at bn
    256) and K 200 (a K tail): every tile once, whatever its order; rows past the last group keep their sentinel."""
    rng = np.random.default_rng(11)
    counts = moe_counts(rng, 12, 900)
    counts[1] = 0
    rows = [int(c) for c in counts]
    k, n, m = 200, 384, sum(rows) + 3
    x, w = rng.uniform(-1, 1, (m, k)).astype(BF16), rng.uniform(-1, 1, (len(rows), k, n)).astype(BF16)
    args = {**_moe_args(rng), "x": [x], "weight": [w], "out": [np.full((m, n), -7, BF16)]}
    args["groupListOptional"] = np.array(rows, np.int64)
    got = _run_config(emulated_wgmma, args, w, weight_layout, config)
    ends = np.cumsum(rows)
    want = np.concatenate(
        [x[e - r : e].astype(np.float64) @ w[g].astype(np.float64) for g, (r, e) in enumerate(zip(rows, ends))]
    )
    assert np.all(got[ends[-1] :] == -7)
    atol, rtol = gemm_tolerance(want.astype(BF16), k)
    np.testing.assert_allclose(got[: ends[-1]].astype(np.float64), want, atol=atol, rtol=rtol)


# ----------------------------------------------------------------------------- nvcc
def _cubin(tmp_path: Path, kernel: GmmWgmmaKernel) -> str:
    """nvcc to an sm_90a cubin (ptxas checks the wgmma operands); ptxas' -v report."""
    path = tmp_path / f"{kernel.kernel_name}.cu"
    path.write_text(kernel.source())
    command = ["nvcc", "-cubin", "-arch=sm_90a", "-Xptxas", "-v", *compile_options(32), str(path)]
    done = subprocess.run(
        [*command, "-o", str(path.with_suffix(".cubin"))], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed here")
def test_every_configuration_builds_for_sm_90a(tmp_path: Path) -> None:
    """Every configuration in bf16, and the default in fp16 with an fp32 bias and output and in bf16 with a bf16 bias:
    no serialised wgmma (C7515 / C7518); no spills in one-tile-a-block shapes of one block an SM, a few dozen bytes at
    most in the others (``-b2``: 128 registers; ``-p``: the next tile set up beside the accumulators)."""
    kernels = [GmmWgmmaKernel(D.ACL_BF16, None, config=parse_config(c)) for c in (*CONFIGS, WEIGHT_BOUND[2])]
    kernels += [GmmWgmmaKernel(D.ACL_FLOAT16, D.ACL_FLOAT, D.ACL_FLOAT), GmmWgmmaKernel(D.ACL_BF16, D.ACL_BF16)]
    with ThreadPoolExecutor(2) as pool:
        reports = list(pool.map(lambda k: _cubin(tmp_path, k), kernels))
    for kernel, report in zip(kernels, reports):
        assert "serialized" not in report and "C75" not in report, report
        if kernel.config.blocks == 1 and not kernel.config.persistent:
            assert " 0 bytes spill stores" in report, report
        spilled = re.search(r"(\d+) bytes spill stores", report)
        assert spilled is not None and int(spilled.group(1)) <= 64, report

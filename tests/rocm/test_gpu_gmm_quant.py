"""The grouped quantised GEMMs on the GPU against the reference (GPU tier).

Every spec sample runs contiguous, padded and transposed with guarded outputs, then MoE-like cases
larger than a GEMM tile in every direction: uneven groups with empty ones, ND and FRACTAL_NZ weights,
weight lists, and sums past 2^24 (K = 1536 of ±127 · ±127, where a float32 accumulator would round)
that the exact integer GEMM must keep. INT8 outputs, their FLOAT32 scales and the FLOAT16 outputs are
compared byte for byte (the epilogues repeat the reference's float32 operations). Sizes keep
``ACL_ROCM_EMULATE=1`` (the CPU kernel emulator) under a minute.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

from acl_core.backend import Backend
from acl_core.nz import NzArray
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.gmm_quant import SPECS, qgmmd_case
from tests.rocm.test_gpu_quant import check

pytestmark = pytest.mark.gpu

OPS = [s.name for s in SPECS]


@pytest.mark.parametrize("op", OPS)
def test_every_sample(rocm: Backend, reference: Backend, op: str) -> None:
    assert op in rocm.capabilities().ops
    spec = get_spec(op)
    assert spec.samples is not None
    for sample in spec.samples(np.random.default_rng(29)):
        check(rocm, reference, op, dict(sample.args), sample.note)


def _gmmsq(rng: np.random.Generator, m: int, k: int, n: int, counts: list[int], **extra: Any) -> dict[str, Any]:
    groups = len(counts)
    return {
        "x": rng.integers(-127, 128, (m, k)).astype(np.int8),
        "weight": [rng.integers(-127, 128, (groups, k, n)).astype(np.int8)],
        "weightScale": [rng.uniform(0.5 / k, 2.0 / k, (groups, n)).astype(np.float32)],
        "weightAssistMatrix": None,
        "bias": None,
        "xScale": rng.uniform(1 / 128, 4 / 128, m).astype(np.float32),
        "smoothScale": None,
        "groupList": np.array(counts, np.int64),
        "dequantMode": 0,
        "dequantDtype": 28,
        "quantMode": 0,
        "groupListType": 1,
        "tuningConfig": None,
        **extra,
    }


def test_gmmsq_moe_shape(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(1)
    counts = [33, 0, 3, 52, 0, 17, 1, 18]  # 124 of 130 rows: six past the end
    args = _gmmsq(rng, 130, 96, 160, counts)
    check(rocm, reference, "GroupedMatmulSwigluQuantV2", args, "8 uneven groups, ND")
    w = args["weight"][0]
    nz = {**args, "weight": [NzArray(v) for v in w], "weightScale": list(args["weightScale"][0])}
    check(rocm, reference, "GroupedMatmulSwigluQuantWeightNzV2", nz, "8 NZ [K, N] weights")


def test_gmmsq_sums_past_2_24_stay_exact(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(2)
    args = _gmmsq(rng, 64, 1536, 64, [40, 24])
    args["x"][:8] = 127
    args["weight"][0][:, :, :8] = -127  # 1536 · 127 · 127 > 2^24: a float32 sum would round
    args["weight"][0][:, :, 32:40] = 127
    check(rocm, reference, "GroupedMatmulSwigluQuantV2", args, "K 1536, extreme values")


def test_qgmmd_larger(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(3)
    m, k, n = 100, 128, 96
    base = {
        "x": rng.uniform(-3, 3, (m, k)).astype(np.float16),
        "weight": rng.integers(-127, 128, (4, n, k)).astype(np.int8),
        "weightScale": rng.uniform(0.2 / k, 1.0 / k, (4, n)).astype(np.float32),
        "groupList": np.array([30, 30, 65, 97], np.int64),
        "biasOptional": None,
        "xScaleOptional": None,
        "xOffsetOptional": None,
        "smoothScaleOptional": rng.uniform(0.5, 1.5, k).astype(np.float16),
        "xQuantMode": "pertoken",
        "transposeWeight": True,
    }
    check(rocm, reference, "QuantGroupedMatmulDequant", base, "dynamic, smoothed, 4 groups")
    static = {**base, "xScaleOptional": rng.uniform(0.01, 0.03, m).astype(np.float32)}
    static["weight"] = NzArray(base["weight"])
    check(rocm, reference, "QuantGroupedMatmulDequantWeightNZ", static, "static pertoken, NZ")


EMULATED = os.environ.get("ACL_ROCM_EMULATE") == "1"
KERNEL_SHAPES = {
    # (rows, K, N of the GEMM, group counts): uneven groups with empty ones and rows past the last group. On the GPU
    # a MoE-like layer (groups over several 128-row tiles, K 1056: 1056 · 127 · 127 > 2^24; the reference bounds the
    # size), emulated, tile-crossing miniatures
    "gpu": (1024, 1056, 512, [0, 150, 49, 0, 277, 1, 320, 65, 0, 155]),
    "emulated": (200, 96, 160, [0, 131, 3, 0, 50]),
}


def _force(rocm: Backend, kernel: str) -> Any:
    runner = rocm.grouped_matmul  # type: ignore[attr-defined]
    runner.forced_kernel = kernel
    return runner


@pytest.mark.parametrize("kernel", ["mma", "simt"])
def test_gmmsq_each_integer_gemm_kernel(rocm: Backend, reference: Backend, kernel: str) -> None:
    """GroupedMatmulSwigluQuantV2 with ``ACL_GMM_KERNEL`` forced to each kernel: a [E, K, N] ND weight (the matrix
    kernel transposes its 4 x 4 byte blocks), then FRACTAL_NZ weights, then K off the 16-byte grid (byte loads)."""
    m, k, n, counts = KERNEL_SHAPES["emulated" if EMULATED else "gpu"]
    rng = np.random.default_rng(7)
    args = _gmmsq(rng, m, k, n, counts)
    args["x"][:4] = 127
    args["weight"][0][:, :, :4] = -127  # K · 127 · 127: the largest sums, exact in int32
    runner = _force(rocm, kernel)
    try:
        runner.last_path = None
        check(rocm, reference, "GroupedMatmulSwigluQuantV2", args, f"{kernel}: uneven groups, ND")
        assert runner.last_path == kernel
        w = args["weight"][0]
        nz = {**args, "weight": [NzArray(v) for v in w], "weightScale": list(args["weightScale"][0])}
        check(rocm, reference, "GroupedMatmulSwigluQuantWeightNzV2", nz, f"{kernel}: NZ [K, N] weights")
        ragged = _gmmsq(rng, m, k - 4, n, counts)
        check(rocm, reference, "GroupedMatmulSwigluQuantV2", ragged, f"{kernel}: K {k - 4}")
        assert runner.last_path == kernel
    finally:
        runner.forced_kernel = None


@pytest.mark.parametrize("kernel", ["mma", "simt"])
def test_qgmmd_each_integer_gemm_kernel(rocm: Backend, reference: Backend, kernel: str) -> None:
    """QuantGroupedMatmulDequant ([g, N, K] weight: both operands copied 16 bytes at a time) on each kernel."""
    m, k, n, counts = KERNEL_SHAPES["emulated" if EMULATED else "gpu"]
    rng = np.random.default_rng(8)
    args = qgmmd_case(rng, m, k, n, np.cumsum(counts).tolist())
    runner = _force(rocm, kernel)
    try:
        runner.last_path = None
        check(rocm, reference, "QuantGroupedMatmulDequant", args, f"{kernel}: uneven groups")
        assert runner.last_path == kernel
    finally:
        runner.forced_kernel = None


@pytest.mark.parametrize("config", ["base", "128x128x32-w2x4-s4-b2", "64x128x32-w2x2-s4-b3", "128x128x16-w2x4-s4"])
def test_gmmsq_matrix_kernel_configurations(rocm: Backend, reference: Backend, config: str) -> None:
    """The int8 matrix kernel under other ``ACL_GMM_CONFIG`` shapes (legacy loop, 8 warps: 8-row and 4-row units of
    the [K, N] weight, 64-row tiles), bit for bit."""
    m, k, n, counts = KERNEL_SHAPES["emulated" if EMULATED else "gpu"]
    args = _gmmsq(np.random.default_rng(9), m, k, n, counts)
    runner = _force(rocm, "mma")
    runner.forced_config = config
    try:
        runner.last_path = None
        check(rocm, reference, "GroupedMatmulSwigluQuantV2", args, f"config {config}")
        assert runner.last_path == "mma" and runner.last_config == config
    finally:
        runner.forced_kernel = runner.forced_config = None

"""The quantisation operators vllm-ascend reaches, on the GPU against the reference (GPU tier).

Every spec sample runs contiguous, padded and transposed with guarded outputs; larger cases cross many
blocks and rows (DynamicBlockQuant's 128x128 and 256x192 blocks over tails, DequantSwigluQuant rows
longer than a block with groups, MX norm rows of many MX blocks, FlatQuant slices of 512 and 6,144
elements: the fused and the two-step path, HiFloat8 outputs as raw bytes; the bench's [M, 64, 64] slices through
every ACL_FLATQUANT_KERNEL choice: the per-slice kernels and the simt / dmma / dmma16 token tiles).
Outputs are compared byte for byte, NaN positions as NaN (the host's default NaN sign differs from the GPU's), except
ClippedSwiglu, compared under its ulp class (the suite's own comparison).
Sizes keep ``ACL_ROCM_EMULATE=1`` (the CPU kernel emulator) under a minute.
"""

from __future__ import annotations

import os
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.quant_vllm import SPECS
from tests.rocm.against_reference import assert_matches_reference
from tests.rocm.test_gpu_quant import check

pytestmark = pytest.mark.gpu

OPS = [s.name for s in SPECS]


@pytest.mark.parametrize("op", OPS)
def test_every_sample(rocm: Backend, reference: Backend, op: str) -> None:
    assert op in rocm.capabilities().ops
    spec = get_spec(op)
    assert spec.samples is not None
    for sample in spec.samples(np.random.default_rng(23)):
        if op == "ClippedSwiglu":
            for layout in ("contiguous", "padded", "transposed"):
                assert_matches_reference(rocm, reference, op, dict(sample.args), layout, sample.note)
        else:
            check(rocm, reference, op, dict(sample.args), sample.note)


def _hif8(rocm: Backend, reference: Backend, op: str, args: dict[str, Any], out: str, shape: tuple) -> None:
    """``op`` writing a HiFloat8 ``out`` (no NumPy type) on both backends: codes and other outputs equal."""
    found = []
    for backend in (reference, rocm):
        y = eager.empty(shape, D.ACL_HIFLOAT8, backend)
        backend.runtime.memset(y.address, y.nbytes, eager.SENTINEL, y.nbytes)
        rest = eager.run(op, backend, **args, **{out: y})
        found.append((y.storage_bytes()[: int(np.prod(shape))].copy(), rest))
    (want, want_rest), (got, got_rest) = found
    np.testing.assert_array_equal(got, want, err_msg=f"{op} hifloat8 codes")
    for name, value in want_rest.items():
        np.testing.assert_array_equal(got_rest[name], value, err_msg=f"{op} {name}")


def test_quantize_large(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(1)
    x = rng.uniform(-300, 300, (33, 300)).astype(np.float32)
    x[3, :4] = [np.nan, np.inf, -np.inf, 1e30]
    scales = rng.uniform(0.05, 3, 300).astype(np.float32)
    zp = rng.integers(-20, 20, 300).astype(np.int32)
    for dst in (D.ACL_INT8, D.ACL_UINT8, D.ACL_INT32, D.ACL_FLOAT8_E4M3FN, D.ACL_FLOAT8_E5M2):
        args = {"x": x, "scales": scales, "zeroPoints": zp, "dtype": dst, "axis": -1}
        check(rocm, reference, "Quantize", args, f"to {dst.short}")
    args = {"x": x, "scales": scales, "zeroPoints": None, "dtype": D.ACL_HIFLOAT8, "axis": 1}
    _hif8(rocm, reference, "Quantize", args, "out", x.shape)


def test_dynamic_block_quant_large(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(2)
    x = rng.uniform(-50, 50, (270, 200)).astype(ml_dtypes.bfloat16)
    x[:128, :128] = 0
    x[200, 150] = np.nan
    for rb, cb, code in ((128, 128, 2), (1, 128, 36), (256, 192, 35), (512, 64, 2)):
        part = x[196:210] if rb == 1 else x  # per-row blocks: a block per row, fewer rows keep the emulator quick
        args = {"x": part, "minScale": 0.0, "dstType": code, "rowBlockSize": rb, "colBlockSize": cb}
        check(rocm, reference, "DynamicBlockQuant", args, f"{rb}x{cb} to {D(code).short}")
    x3 = rng.uniform(-5, 5, (2, 130, 140)).astype(np.float32)
    args = {"x": x3, "minScale": 100.0, "dstType": 36, "rowBlockSize": 128, "colBlockSize": 256, "dstTypeMax": 0.0}
    check(rocm, reference, "DynamicBlockQuantV2", args, "3-D, minScale capping")
    args = {"x": x3[:, :8], "minScale": 0.0, "roundModeOptional": "round", "dstType": 34, "rowBlockSize": 1}
    _hif8(rocm, reference, "DynamicBlockQuantV2", args | {"colBlockSize": 128, "dstTypeMax": 56.0}, "yOut", (2, 8, 140))


def test_clipped_swiglu_large(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(3)
    x = rng.uniform(-30, 30, (10, 6, 256)).astype(np.float16)
    groups = np.array([30, 0, 20], np.int64)
    for dim, inter in ((-1, True), (-1, False), (1, True)):
        args = {"x": x, "groupIndexOptional": groups, "dim": dim, "alpha": 1.702, "limit": 7.0, "bias": 1.0}
        assert_matches_reference(rocm, reference, "ClippedSwiglu", args | {"interleaved": inter}, "padded", "large")


def test_dequant_swiglu_quant_large(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(4)
    rows, width = 40, 600
    x = rng.integers(-30000, 30000, (rows, width)).astype(np.int32)
    counts = np.array([10, 20, 0, 5], np.int64)  # five rows past the groups
    args: dict[str, Any] = {"x": x, "weightScaleOptional": rng.uniform(1e-4, 1e-3, (4, width)).astype(np.float32)}
    args |= {"activationScaleOptional": rng.uniform(0.5, 2, rows).astype(np.float32)}
    args |= {"biasOptional": rng.uniform(-5, 5, (4, width)).astype(np.float32)}
    args |= {"quantScaleOptional": rng.uniform(0.5, 2, (4, width // 2)).astype(np.float32)}
    args |= {"quantOffsetOptional": None, "groupIndexOptional": counts, "activateLeft": False}
    args |= {"quantModeOptional": "dynamic"}
    check(rocm, reference, "DequantSwigluQuant", args, "int32 grouped dynamic")
    v2 = {"dstType": 36, "roundModeOptional": None, "activateDim": -1, "swigluMode": 1, "clampLimit": 7.0}
    v2 |= {"gluAlpha": 1.702, "gluBias": 1.0}
    check(rocm, reference, "DequantSwigluQuantV2", args | v2 | {"activateLeft": True}, "fp8 swigluMode 1")
    static = args | {"quantModeOptional": "static", "quantScaleOptional": np.array([0.5], np.float32)}
    static |= {"quantOffsetOptional": np.array([3.0], np.float32), "biasOptional": None, "groupIndexOptional": None}
    static["weightScaleOptional"] = args["weightScaleOptional"][0]
    check(rocm, reference, "DequantSwigluQuant", static, "int32 static")
    hif8 = static | v2 | {"dstType": 34, "roundModeOptional": "round", "swigluMode": 0}
    _hif8(rocm, reference, "DequantSwigluQuantV2", hif8, "yOut", (rows, width // 2))


@pytest.mark.parametrize("op", ["RmsNormDynamicMxQuant", "AddRmsNormDynamicMxQuant"])
def test_mx_norm_large(rocm: Backend, reference: Backend, op: str) -> None:
    rng = np.random.default_rng(5)
    shape = (12, 700)
    x1 = rng.standard_normal(shape).astype(ml_dtypes.bfloat16)
    x1[3, 7] = np.inf
    inputs = {"x1": x1, "x2": rng.standard_normal(shape).astype(ml_dtypes.bfloat16)} if "Add" in op else {"x": x1}
    gamma = rng.uniform(0.5, 1.5, shape[-1]).astype(np.float32)
    for code, alg, mode in ((36, 0, "rint"), (35, 1, "rint"), (40, 0, "floor")):
        args = {"gamma": gamma, "beta": gamma * 0.1, "epsilon": 1e-5, "scaleAlg": alg, "roundMode": mode}
        check(rocm, reference, op, inputs | args | {"dstType": code, "outputRstd": True}, f"{D(code).short}")


def test_flat_quant_large(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(6)
    for dtype in (np.float16, ml_dtypes.bfloat16):
        x = rng.uniform(-2, 2, (12, 16, 32)).astype(dtype)
        x[5] = 0
        p1 = rng.uniform(-1, 1, (16, 16)).astype(dtype)
        p2 = rng.uniform(-1, 1, (32, 32)).astype(dtype)
        args = {"x": x, "kroneckerP1": p1, "kroneckerP2": p2, "clipRatio": 0.9}
        check(rocm, reference, "FlatQuant", args, f"{np.dtype(dtype).name} int32")
        out = {"out": np.zeros(x.shape, ml_dtypes.int4), "quantScale": np.zeros(12, np.float32)}
        check(rocm, reference, "FlatQuant", args | out, f"{np.dtype(dtype).name} int4")
    # slices past the fused kernel's shared memory (N1 * N2 = 6,144): the two-step path
    x = rng.uniform(-2, 2, (3, 64, 96)).astype(np.float16)
    args = {"x": x, "kroneckerP1": rng.uniform(-1, 1, (64, 64)).astype(np.float16), "clipRatio": 1.0}
    args["kroneckerP2"] = rng.uniform(-1, 1, (96, 96)).astype(np.float16)
    check(rocm, reference, "FlatQuant", args, "two-step int32")


EMULATED = os.environ.get("ACL_ROCM_EMULATE") == "1"


@pytest.mark.parametrize("choice", ["slice", "simt", "dmma", "dmma16"])
def test_flat_quant_bench_shape_each_kernel(rocm: Backend, reference: Backend, choice: str) -> None:
    """The bench's slice shape [M, 64, 64] through each ACL_FLATQUANT_KERNEL choice, byte for byte.

    On the GPU 1,100 tokens outnumber the token tile's resident blocks (2 a multiprocessor), so blocks loop
    over tokens; on the emulator 5 tokens over a grid of 2 do the same.
    """
    runner = getattr(rocm, "runners", {}).get("quant_vllm")
    assert runner is not None and hasattr(runner, "forced_flat")
    runner.forced_flat, runner.flat_blocks = choice, (2 if EMULATED else None)
    rng = np.random.default_rng(16)
    m = 5 if EMULATED else 1100
    try:
        for dtype in (np.float16, ml_dtypes.bfloat16):
            x = rng.uniform(-2, 2, (m, 64, 64)).astype(dtype)
            x[1] = 0
            args = {"x": x, "kroneckerP1": rng.uniform(-1, 1, (64, 64)).astype(dtype), "clipRatio": 1.0}
            args["kroneckerP2"] = rng.uniform(-1, 1, (64, 64)).astype(dtype)
            check(rocm, reference, "FlatQuant", args, f"{choice} {np.dtype(dtype).name} int32")
            want = "per slice" if choice == "slice" else f"token tile {choice}"
            assert runner.flat_last_path == want
        out = {"out": np.zeros(x.shape, ml_dtypes.int4), "quantScale": np.zeros(m, np.float32)}
        check(rocm, reference, "FlatQuant", args | out, f"{choice} int4")
    finally:
        runner.forced_flat, runner.flat_blocks = None, None

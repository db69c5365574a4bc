"""AscendQuant(V3), AscendAntiQuant, DynamicQuant(V2) and DynamicMxQuant on the GPU against the reference
(GPU tier).

Every spec sample runs contiguous, padded and transposed with guarded outputs; larger tensors cross
many blocks (rows longer than a block, many MX blocks, packed 4-bit outputs written by neighbouring
threads); edge rows and blocks hold zeros, NaN, Inf, overflow and subnormals. Outputs are compared
byte for byte, with one allowance: where the reference holds a NaN that came out of float arithmetic
(``inf / inf`` in a DynamicQuant row with an Inf), its sign is the host CPU's default NaN (negative
on x86) while the GPU's is positive, so NaN outputs are compared as NaN, not by sign.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.spec.ops import get_spec
from acl_rocm.ops.quant import OPS

pytestmark = pytest.mark.gpu


def _nan(a: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iub" or a.dtype in (np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.float4_e2m1fn)):
        return np.zeros(a.shape, bool)
    return np.isnan(a.astype(np.float64))


def same(got: dict[str, Any], want: dict[str, Any], note: str) -> None:
    """Every output byte-equal, NaN positions equal (their signs excepted)."""
    assert set(got) == set(want), note
    for name, w in want.items():
        g = got[name]
        assert g.dtype == w.dtype and g.shape == w.shape, f"{note}: {name}"
        gn, wn = _nan(g).reshape(-1), _nan(w).reshape(-1)
        np.testing.assert_array_equal(gn, wn, err_msg=f"{note}: {name} NaN positions")
        item = w.dtype.itemsize
        gb = np.ascontiguousarray(g).view(np.uint8).reshape(-1, item)[~gn]
        wb = np.ascontiguousarray(w).view(np.uint8).reshape(-1, item)[~wn]
        bad = np.flatnonzero((gb != wb).any(axis=1))
        assert not bad.size, f"{note}: {name}: {bad.size} elements differ, first {bad[:6]}"


def check(rocm: Backend, reference: Backend, op: str, args: dict[str, Any], note: str) -> None:
    """``op`` on both backends, contiguous and through padded and transposed inputs (guarded outputs)."""
    for layout in ("contiguous", "padded", "transposed"):
        want = eager.run(op, reference, layout=layout, **args)  # the same placement (see test_quant_cpu.compare)
        same(eager.run(op, rocm, layout=layout, guard=True, **args), want, f"{op} {note} @{layout}")


@pytest.mark.parametrize("op", OPS)
def test_every_sample(rocm: Backend, reference: Backend, op: str) -> None:
    spec = get_spec(op)
    assert spec.samples is not None
    for sample in spec.samples(np.random.default_rng(17)):
        check(rocm, reference, op, sample.args, sample.note)


def _edges(x: np.ndarray) -> np.ndarray:
    x = x.copy()
    x[0] = 0
    x[1, 3] = np.inf
    x[2, 7] = np.nan
    x[3, :] = (x[3, :] * 1e-7).astype(x.dtype)
    x[4, 1] = -np.inf
    return x


@pytest.mark.parametrize("code", [2, 29, 3, 34, 35, 36])
def test_dynamic_quant_large_and_edges(rocm: Backend, reference: Backend, code: int) -> None:
    rng = np.random.default_rng(code)
    for dt in (np.float16, ml_dtypes.bfloat16):
        x = _edges(rng.uniform(-60000, 60000, (70, 1000)).astype(dt))
        if code == 34:  # HiFloat8 has no NumPy type: its codes are compared as raw bytes
            codes = []
            for backend in (reference, rocm):
                y = eager.empty(x.shape, D.ACL_HIFLOAT8, backend)
                backend.runtime.memset(y.address, y.nbytes, eager.SENTINEL, y.nbytes)  # no stale codes pass
                rest = eager.run("DynamicQuantV2", backend, x=x, dstType=code, yOut=y)
                codes.append({"yOut": y.storage_bytes()[: x.size], **rest})
            same(codes[1], codes[0], f"{np.dtype(dt).name} to hifloat8")
            continue
        check(rocm, reference, "DynamicQuantV2", {"x": x, "dstType": code}, f"{np.dtype(dt).name} rows")
        if code in (2, 29, 3):
            args = {"x": x, "dstType": code, "offsetOut": np.zeros(70, np.float32)}
            check(rocm, reference, "DynamicQuantV2", args, "asymmetric")
    x = rng.uniform(-3, 3, (64, 512)).astype(np.float16)
    smooth = rng.uniform(0.5, 2, (5, 512)).astype(np.float16)
    group = np.array([10, 10, 30, 50, 60], np.int32)
    args = {"x": x, "smoothScalesOptional": smooth, "groupIndexOptional": group, "dstType": 2}
    check(rocm, reference, "DynamicQuantV2", args, "grouped")
    check(rocm, reference, "DynamicQuant", {"x": x, "smoothScalesOptional": smooth[0]}, "smoothed")


@pytest.mark.parametrize("code", [36, 35, 40])
def test_mx_quant_large_and_edges(rocm: Backend, reference: Backend, code: int) -> None:
    rng = np.random.default_rng(code)
    for dt in (np.float32, np.float16, ml_dtypes.bfloat16):
        x = _edges(rng.uniform(-100, 100, (40, 1000)).astype(dt))
        x[5, :64] *= np.asarray(1e-30 if dt == np.float32 else 1e-4).astype(dt)
        algs = (0, 1) if code != 40 else (0,)
        modes = ("rint", "floor", "round") if code == 40 else ("rint",)
        for alg in algs:
            for mode in modes:
                for axis, bs in ((-1, 32), (-1, 64), (0, 32)):
                    if dt == np.float32 and bs != 32:  # float32 x supports blocksize 32 only
                        continue
                    args = {"x": x, "axis": axis, "dstType": code, "blocksize": bs, "scaleAlg": alg}
                    args["roundModeOptional"] = mode
                    check(rocm, reference, "DynamicMxQuant", args, f"{np.dtype(dt).name} {alg} {mode} {axis} {bs}")


def test_ascend_quant_large_and_edges(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(3)
    x = _edges(rng.uniform(-300, 300, (64, 256)).astype(np.float32))
    scale = rng.uniform(0.1, 4, 256).astype(np.float32)
    offset = rng.uniform(-2, 2, 256).astype(np.float32)
    for mode, code in (("round", 2), ("floor", 29), ("ceil", 3), ("trunc", 2)):
        args = {"x": x, "scale": scale, "offset": offset, "sqrtMode": False, "roundMode": mode, "dstType": code}
        check(rocm, reference, "AscendQuant", args, f"{mode} {code}")
    for code in (35, 36):
        args = {"x": x, "scale": scale, "offset": None, "sqrtMode": True, "roundMode": "round", "dstType": code}
        check(rocm, reference, "AscendQuantV3", args | {"axis": -1}, f"fp8 {code}")
    col = rng.uniform(0.1, 4, (64, 1)).astype(np.float32)
    args = {"x": x, "scale": col, "offset": None, "sqrtMode": False, "roundMode": "round", "dstType": 2, "axis": -2}
    check(rocm, reference, "AscendQuantV3", args, "axis -2")


def test_anti_quant_large(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(4)
    x8 = rng.integers(-128, 128, (300, 256)).astype(np.int8)
    x4 = rng.integers(-8, 8, (300, 256)).astype(ml_dtypes.int4)
    e4 = rng.uniform(-400, 400, (300, 256)).astype(ml_dtypes.float8_e4m3fn)
    scale = rng.uniform(1e-3, 1e3, 256).astype(np.float32)
    offset = rng.uniform(-2, 2, 256).astype(np.float32)
    for x in (x8, x4):
        for code in (1, 27):
            args = {"x": x, "scale": scale, "offset": offset, "dstType": code, "sqrtMode": True}
            check(rocm, reference, "AscendAntiQuant", args, f"{x.dtype} {code}")
    args = {"x": e4, "scale": scale, "offset": None, "dstType": 27, "sqrtMode": False}
    check(rocm, reference, "AscendAntiQuant", args, "fp8")

"""QuantMatmulV3/V4/V5 and WeightQuantBatchMatmulV2 on the GPU against the reference (GPU tier)."""

from __future__ import annotations

import logging
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from acl_core import eager, lowp
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.dtypes import from_numpy
from acl_core.eager import DeviceArray, to_device
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.quant import MX_GROUP
from acl_core.spec.runtime import CopyDirection
from acl_rocm.ops.quant_matmul import OPS
from acl_rocm.plan_cache import PlanCache
from acl_rocm.providers import blaslt_tune
from acl_rocm.providers.base import GemmCall
from tests.conftest import assert_close
from tests.rocm.fp8_accumulation import KS, measure
from tests.rocm.prefill import sentinel_outputs

pytestmark = pytest.mark.gpu
NONE = {"yScale": None, "x1Offset": None, "x2Offset": None, "yOffset": None}


def _needs_blas(rocm: Backend) -> None:
    reason = rocm.quant_matmul.unavailable()  # type: ignore[attr-defined]
    if reason is not None:
        pytest.skip(reason)


def _out(op: str, outs: dict) -> np.ndarray:
    return outs["y" if op == "WeightQuantBatchMatmulV2" else "out"]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_matches_reference(rocm: Backend, reference: Backend, op: str, layout: str) -> None:
    _needs_blas(rocm)
    samples = list(get_spec(op).samples(np.random.default_rng(7)))  # type: ignore[misc]
    assert samples
    for sample in samples:
        want = eager.run(op, reference, **sample.args)
        expected = _out(op, want)
        outs = sentinel_outputs(op, sample.args, want)  # the other layout's run left this result in memory
        got = _out(op, eager.run(op, rocm, layout=layout, **sample.args, **outs))
        path = rocm.quant_matmul.last_path  # type: ignore[attr-defined]
        assert got.dtype == expected.dtype and got.shape == expected.shape, sample.note
        try:
            assert_close(got, expected)
        except AssertionError as exc:
            raise AssertionError(f"{op} [{sample.note}] layout={layout} path={path}\n{exc}") from None


def _fp8_args(rng: np.random.Generator, m: int, k: int, n: int, *, t2: bool) -> dict:
    x1 = rng.uniform(-2, 2, (m, k)).astype(ml_dtypes.float8_e4m3fn)
    x2 = rng.uniform(-2, 2, (n, k) if t2 else (k, n)).astype(ml_dtypes.float8_e4m3fn)
    scale = lowp.encode_packed_scale([0.25]).view(np.int64)
    return (
        {"x1": x1, "x2": x2, "x1Scale": None, "x2Scale": scale, "bias": None, "groupSize": 0}
        | NONE
        | {
            "transposeX1": False,
            "transposeX2": t2,
        }
    )


@pytest.mark.parametrize("t2", [True, False])
def test_fp8_per_tensor_on_the_fp8_hardware(rocm: Backend, t2: bool) -> None:
    _needs_blas(rocm)
    args = _fp8_args(np.random.default_rng(1), 256, 512, 384, t2=t2)
    got = eager.run("QuantMatmulV5", rocm, **args)["out"]
    x1 = args["x1"].astype(np.float64)
    x2 = args["x2"].astype(np.float64)
    exact = 0.25 * (x1 @ (x2.T if t2 else x2))
    np.testing.assert_allclose(got.astype(np.float64), exact, rtol=1.6e-2, atol=1e-2)
    path = rocm.quant_matmul.last_path  # type: ignore[attr-defined]
    if rocm.capabilities().fp8_matmul_hw:
        # a per-tensor scale into a bf16/fp16/fp32 out needs no epilogue ("-direct") whether or not x2 (k, n)
        # was first gathered into the K-major form cuBLASLt's fp8 GEMM takes
        assert path == "fp8-blaslt-direct", path


def test_fp8_per_token_and_channel_scales_with_odd_shapes(rocm: Backend, reference: Backend) -> None:
    _needs_blas(rocm)
    rng = np.random.default_rng(2)
    args = _fp8_args(rng, 37, 200, 50, t2=False)
    args |= {
        "x1Scale": rng.uniform(0.5, 2, 37).astype(np.float32),
        "x2Scale": rng.uniform(0.5, 2, 50).astype(np.float32),
    }
    args |= {"bias": rng.standard_normal(50).astype(np.float32), "out": np.zeros((37, 50), np.float32)}
    got = eager.run("QuantMatmulV5", rocm, **args)["out"]
    expected = eager.run("QuantMatmulV5", reference, **args)["out"]
    # Hopper's fp8 tensor cores add products into a narrower-than-fp32 running sum between cuBLASLt's fp32
    # promotions (the H200 showed errors near 2^-13 of the magnitude sum): bound the error by 2^-10 of
    # sum |x1 s1| |x2 s2|, far below what a misapplied scale, bias or layout would cost
    x1 = np.abs(args["x1"].astype(np.float64)) * args["x1Scale"][:, None]
    x2 = np.abs(args["x2"].astype(np.float64)) * args["x2Scale"][None, :]
    np.testing.assert_array_less(np.abs(got - expected), 2.0**-10 * (x1 @ x2) + 1e-4)


@pytest.mark.parametrize("k", (*KS[:2], 128, *KS[2:]))
def test_fp8_error_stays_within_the_declared_accumulation_allowance(rocm: Backend, k: int) -> None:
    """Random signed fp8 calls stay within γ_(K+3)·M + extra·M + 1 ulp, ``extra`` the plugin's for this architecture.

    Where the plugin declares no allowance (not sm_90) the plain reduction bound must hold. The measured
    ``|err| / M`` is printed (``-s``) and recorded as a property; ``python -m tests.rocm.fp8_accumulation``
    prints the whole table, one-signed operands included.
    """
    _needs_blas(rocm)
    from acl_conformance.suite import plugin_accumulation_allowances
    from acl_core.plugin import get_registration

    caps = rocm.capabilities()
    found = measure(rocm, k)
    entries = [
        e
        for e in plugin_accumulation_allowances(rocm.name, get_registration(rocm.name))
        if e.matches("QuantMatmulV5", {D.ACL_FLOAT8_E4M3FN}, rocm.name, caps.architecture or "")
    ]
    extra = entries[0].extra if entries else 0.0
    print(f"{caps.architecture} fp8 K={k} path={found.path}: worst |err|/M {found.worst_err_over_m:.3g}")
    assert found.worst_excess_over_m <= extra, (found, extra)
    if entries:
        assert found.worst_err_over_m <= extra, f"measured {found.worst_err_over_m:.3g} > declared {extra:.3g}"


def test_int8_large_k_is_exact(rocm: Backend, reference: Backend) -> None:
    _needs_blas(rocm)
    rng = np.random.default_rng(3)
    args = {
        "x1": rng.integers(-128, 128, (64, 4096)).astype(np.int8),
        "x2": rng.integers(-128, 128, (4096, 96)).astype(np.int8),
        "scale": np.full(96, 1.0, np.float32),
        "offset": None,
        "bias": rng.integers(-1000, 1000, 96).astype(np.int32),
        "transposeX1": False,
        "transposeX2": False,
        "out": np.zeros((64, 96), np.int32),
    }
    got = eager.run("QuantMatmulV3", rocm, **args)["out"]
    expected = eager.run("QuantMatmulV3", reference, **args)["out"]
    np.testing.assert_array_equal(got, expected)
    assert rocm.quant_matmul.last_path == "int8-blaslt"  # type: ignore[attr-defined]


def test_mxfp8_fallback_matches_the_reference(rocm: Backend, reference: Backend) -> None:
    _needs_blas(rocm)
    rng = np.random.default_rng(4)
    m, k, n = 64, 256, 80
    args = {
        "x1": rng.uniform(-4, 4, (m, k)).astype(ml_dtypes.float8_e4m3fn),
        "x2": rng.uniform(-4, 4, (k, n)).astype(ml_dtypes.float8_e5m2),
        "x1Scale": lowp.e8m0_array(rng.integers(120, 134, (m, k // 64, 2))),
        "x2Scale": lowp.e8m0_array(rng.integers(120, 134, (k // 64, n, 2))),
        "bias": None,
        "groupSize": MX_GROUP,
        "transposeX1": False,
        "transposeX2": False,
    } | NONE
    got = eager.run("QuantMatmulV5", rocm, **args)["out"]
    expected = eager.run("QuantMatmulV5", reference, **args)["out"]
    assert_close(got, expected)
    assert rocm.quant_matmul.last_path == "dequant-direct"  # type: ignore[attr-defined]  # no bias: GEMM writes out
    assert not rocm.capabilities().mx_use_hw


def test_capabilities(rocm: Backend) -> None:
    caps = rocm.capabilities()
    arch = rocm.policy.arch  # type: ignore[attr-defined]
    assert set(OPS) <= set(caps.ops)
    assert caps.fp8_matmul_hw == (arch.fp8_matmul_hw and arch.fp8_format == "ocp")
    assert "quant_matmul" in caps.notes


def _mx_args(rng: np.random.Generator, dtype: object, m: int, k: int, n: int, *, t2: bool) -> dict:
    codes = (lambda: rng.integers(-6, 7, (m, k))) if dtype == ml_dtypes.float4_e2m1fn else None
    x1 = (codes() if codes else rng.uniform(-4, 4, (m, k))).astype(dtype)  # type: ignore[call-overload]
    x2_shape = (n, k) if t2 else (k, n)
    x2 = (rng.integers(-6, 7, x2_shape) if codes else rng.uniform(-4, 4, x2_shape)).astype(dtype)  # type: ignore[call-overload]
    return {
        "x1": x1,
        "x2": x2,
        "x1Scale": lowp.e8m0_array(rng.integers(120, 134, (m, k // 64, 2))),
        "x2Scale": lowp.e8m0_array(rng.integers(120, 134, (n, k // 64, 2) if t2 else (k // 64, n, 2))),
        "bias": None,
        "groupSize": MX_GROUP,
        "transposeX1": False,
        "transposeX2": t2,
    } | NONE


@pytest.mark.parametrize("dtype", [ml_dtypes.float8_e4m3fn, ml_dtypes.float4_e2m1fn], ids=["mxfp8", "mxfp4"])
@pytest.mark.parametrize("shape", [(64, 256, 80), (40, 192, 48)], ids=["k256", "k192"])
def test_mx_pair_decode_matches_the_tiled_one_bit_for_bit(
    rocm: Backend, reference: Backend, monkeypatch: pytest.MonkeyPatch, dtype: object, shape: tuple[int, int, int]
) -> None:
    """ACL_QMM_MX_DECODE=pair decodes both K-major operands in one launch: the same bf16 as the tiled decode."""
    _needs_blas(rocm)
    m, k, n = shape
    args = _mx_args(np.random.default_rng(11), dtype, m, k, n, t2=True)
    runner = rocm.quant_matmul  # type: ignore[attr-defined]
    provider = rocm.provider  # type: ignore[attr-defined]
    gemm = runner._gemm
    decoded: list[np.ndarray] = []

    def keep_operands(call: GemmCall, stream: int) -> None:  # the bf16 temporaries, read before they are freed
        provider.stream_synchronize(stream)
        for mat in (call.a, call.b):
            host = np.empty(mat.rows * mat.cols, dtype=np.uint16)
            provider.memcpy(int(host.ctypes.data), mat.address, host.nbytes, CopyDirection.DEVICE_TO_HOST, None)
            decoded.append(host)
        gemm(call, stream)

    monkeypatch.setattr(runner, "_gemm", keep_operands)
    outs = {}
    for choice in ("tiled", "pair"):
        monkeypatch.setattr(rocm, "environ", {**rocm.environ, "ACL_QMM_MX_DECODE": choice})
        outs[choice] = eager.run("QuantMatmulV5", rocm, **args)["out"]
        path = runner.last_path
        assert path == ("dequant-direct mx-pair" if choice == "pair" else "dequant-direct"), path
    tiled_x2, tiled_x1, pair_x2, pair_x1 = decoded
    np.testing.assert_array_equal(pair_x1, tiled_x1)  # the operands themselves: a k permutation shared by both
    np.testing.assert_array_equal(pair_x2, tiled_x2)  # sides would leave the product unchanged
    np.testing.assert_array_equal(outs["pair"].view(np.uint16), outs["tiled"].view(np.uint16))
    assert_close(outs["pair"], eager.run("QuantMatmulV5", reference, **args)["out"])


@pytest.mark.parametrize("dtype", [ml_dtypes.float8_e4m3fn, ml_dtypes.float4_e2m1fn], ids=["mxfp8", "mxfp4"])
def test_mx_pair_decode_reads_strided_rows_at_an_offset(
    rocm: Backend, reference: Backend, monkeypatch: pytest.MonkeyPatch, dtype: object
) -> None:
    """x1 a view with a row stride of k + 64 and an element offset of 32 (16-byte aligned): still the pair kernel."""
    _needs_blas(rocm)
    m, k, n, pad, offset = 24, 192, 40, 64, 32
    args = _mx_args(np.random.default_rng(13), dtype, m, k, n, t2=True)
    dtype_acl = from_numpy(np.dtype(dtype))  # type: ignore[call-overload]
    stride = k + pad
    big = np.zeros(offset + m * stride, dtype=dtype)  # type: ignore[call-overload]
    big[offset:].reshape(m, stride)[:, :k] = args["x1"]
    big[offset:].reshape(m, stride)[:, k:] = np.asarray(7.0 if dtype == ml_dtypes.float8_e4m3fn else 6.0, dtype)
    storage = to_device(big, rocm, dtype=dtype_acl)
    view = DeviceArray.adopt(rocm, (m, k), dtype_acl, (stride, 1), big.size, storage.address, lambda: None)
    view.offset = offset
    expected = eager.run("QuantMatmulV5", reference, **args)["out"]
    monkeypatch.setattr(rocm, "environ", {**rocm.environ, "ACL_QMM_MX_DECODE": "pair"})
    got = eager.run("QuantMatmulV5", rocm, **(args | {"x1": view}))["out"]
    assert rocm.quant_matmul.last_path == "dequant-direct mx-pair"  # type: ignore[attr-defined]
    assert_close(got, expected)
    view.free()
    storage.free()


@pytest.mark.parametrize("n", [276, 1028], ids=["n276", "n1028"])
def test_vec4_epilogue_matches_the_scalar_one_bit_for_bit(
    rocm: Backend, reference: Backend, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, n: int
) -> None:
    """ACL_QMM_EPILOGUE=vec4 (4 columns a thread, 16-byte accumulator loads): the scalar epilogue's bytes."""
    _needs_blas(rocm)
    rng = np.random.default_rng(14)
    args = {
        "x1": rng.integers(-128, 128, (2, 41, 136)).astype(np.int8),
        "x2": rng.integers(-128, 128, (n, 136)).astype(np.int8),
        "scale": rng.uniform(1e-3, 1e-2, n).astype(np.float32),
        "offset": None,
        "pertokenScaleOptional": rng.uniform(0.5, 2, 41).astype(np.float32),
        "bias": rng.uniform(-1, 1, n).astype(np.float32),
        "transposeX1": False,
        "transposeX2": True,
    }
    outs = {}
    for choice in ("scalar", "vec4"):
        monkeypatch.setattr(rocm, "environ", {**rocm.environ, "ACL_QMM_EPILOGUE": choice})
        with caplog.at_level(logging.DEBUG, logger="acl_rocm"):
            outs[choice] = eager.run("QuantMatmulV4", rocm, **args)["out"]
    assert "vec4 not taken" not in caplog.text  # n, strides and out's alignment allow the vector epilogue
    np.testing.assert_array_equal(outs["vec4"].view(np.uint16), outs["scalar"].view(np.uint16))
    assert_close(outs["vec4"], eager.run("QuantMatmulV4", reference, **args)["out"])


def test_mx_pair_decode_leaves_a_layout_it_cannot_take_to_the_tiled_one(
    rocm: Backend, reference: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    _needs_blas(rocm)
    monkeypatch.setattr(rocm, "environ", {**rocm.environ, "ACL_QMM_MX_DECODE": "pair"})
    args = _mx_args(np.random.default_rng(12), ml_dtypes.float8_e4m3fn, 32, 128, 48, t2=False)  # x2 N-major
    got = eager.run("QuantMatmulV5", rocm, **args)["out"]
    assert rocm.quant_matmul.last_path == "dequant-direct"  # type: ignore[attr-defined]
    assert_close(got, eager.run("QuantMatmulV5", reference, **args)["out"])
    monkeypatch.setattr(rocm, "environ", {**rocm.environ, "ACL_QMM_MX_DECODE": "fast"})
    with pytest.raises(Exception, match="ACL_QMM_MX_DECODE='fast'"):
        eager.run("QuantMatmulV5", rocm, **args)


@pytest.mark.parametrize("t2", [True, False], ids=["x2_kmajor", "x2_nmajor"])
def test_blaslt_tune_times_the_int8_gemm_and_stays_exact(
    rocm: Backend,
    reference: Backend,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
    t2: bool,
) -> None:
    """ACL_BLASLT_TUNE=1 on the nvidia provider: the candidates are timed once, the result stays exact."""
    _needs_blas(rocm)
    provider = rocm.provider  # type: ignore[attr-defined]
    if type(provider).__name__ != "NvidiaProvider":
        pytest.skip("ACL_BLASLT_TUNE is a cuBLASLt (nvidia provider) setting")
    monkeypatch.setenv("ACL_BLASLT_TUNE", "1")
    monkeypatch.setattr(blaslt_tune, "MIN_WORK", 1)
    monkeypatch.setattr(provider, "plan_cache", PlanCache(tmp_path))  # a fresh store: this process times
    rng = np.random.default_rng(5)
    m, k, n = 272, 320 + (16 if t2 else 0), 208  # shapes no other test plans (the in-process memo is per shape)
    args = {
        "x1": rng.integers(-128, 128, (m, k)).astype(np.int8),
        "x2": rng.integers(-128, 128, (n, k) if t2 else (k, n)).astype(np.int8),
        "scale": np.full(n, 1.0, np.float32),  # int32 out, unit scale: the integer products themselves
        "offset": None,
        "bias": None,
        "transposeX1": False,
        "transposeX2": t2,
        "out": np.zeros((m, n), np.int32),
    }
    with caplog.at_level(logging.DEBUG, logger="acl_rocm.plan_cache"):
        got = eager.run("QuantMatmulV3", rocm, **args)["out"]
    assert "cuBLASLt algorithm timed" in caplog.text
    assert rocm.quant_matmul.last_path == "int8-blaslt"  # type: ignore[attr-defined]
    np.testing.assert_array_equal(got, eager.run("QuantMatmulV3", reference, **args)["out"])

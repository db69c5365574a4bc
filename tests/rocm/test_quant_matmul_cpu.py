"""QuantMatmulV3/V4/V5 and WeightQuantBatchMatmulV2 of the rocm backend without a GPU.

The operand and epilogue kernels run on the CPU through ``kernel_emulator.py`` (g++) and the GEMM on
the fake provider's host BLAS, so every spec sample is compared with the reference; the fake provider
also shows which path (fp8 / int8 BLAS, dequant) each case takes, the "TN" layouts and 16-byte
leading dimensions handed to the BLAS, the capability flags, and the MXFP8_FORCE_HW refusals.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import acl_core
from acl_core import eager, lowp
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.errors import AclError, BackendUnavailableError, RtErrorCode
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.quant import MX_GROUP
from acl_rocm.backend import RocmBackend
from acl_rocm.kernels.quant_matmul import (
    EpilogueKernel,
    OperandKernel,
    decode_table,
    epilogue_source,
    mx_pair_source,
    operand_source,
)
from acl_rocm.ops.quant_matmul import OPS
from tests.conftest import assert_close
from tests.rocm.fake_provider import FakeProvider
from tests.rocm.kernel_emulator import EmulatedProvider, available


def _backend(tmp: Path, arch: str = "sm_90", env: dict[str, str] | None = None) -> tuple[RocmBackend, FakeProvider]:
    reason = available()
    if reason:
        pytest.skip(reason)
    build = Path(tempfile.gettempdir()) / f"acl-rocm-emulated-{os.getuid()}"
    build.mkdir(exist_ok=True)
    EmulatedProvider.build_dir = build
    provider = EmulatedProvider(blas=True, arch=arch)
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp), **(env or {})})
    backend.runtime.ensure_device(0)
    return backend, provider


@pytest.fixture(scope="module")
def emulated(tmp_path_factory: pytest.TempPathFactory) -> tuple[RocmBackend, FakeProvider]:
    return _backend(tmp_path_factory.mktemp("kc"))


@pytest.fixture(scope="module")
def reference() -> Backend:
    return acl_core.get_backend("reference")


def _samples(op: str) -> list:
    return list(get_spec(op).samples(np.random.default_rng(11)))  # type: ignore[misc]


def _run(backend: Backend, op: str, args: dict, layout: str = "contiguous") -> np.ndarray:
    outs = eager.run(op, backend, layout=layout, **args)
    return outs["y" if op == "WeightQuantBatchMatmulV2" else "out"]


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
@pytest.mark.parametrize("op", OPS)
def test_every_sample_matches_the_reference(emulated, reference: Backend, op: str, layout: str) -> None:
    backend, _provider = emulated
    samples = _samples(op)
    assert samples
    for sample in samples:
        expected = _run(reference, op, sample.args)
        got = _run(backend, op, sample.args, layout)
        assert got.dtype == expected.dtype and got.shape == expected.shape, sample.note
        try:
            assert_close(got, expected)
        except AssertionError as exc:
            path = backend.quant_matmul.last_path
            raise AssertionError(f"{op} [{sample.note}] layout={layout} path={path}\n{exc}") from None


def _paths(backend: RocmBackend, op: str) -> dict[str, str]:
    paths = {}
    for sample in _samples(op):
        _run(backend, op, sample.args)
        assert backend.quant_matmul.last_path is not None
        paths[sample.note] = backend.quant_matmul.last_path
    return paths


def test_paths_on_sm90(emulated) -> None:
    backend, provider = emulated
    v5 = _paths(backend, "QuantMatmulV5")
    # no native MX on Hopper; without a bias the bf16 GEMM writes out itself
    assert v5["MX float8_e4m3fn"] == v5["MX float8_e5m2"] == "dequant-direct"
    # both operands K-major and k a multiple of 32: the pair decode (the default) takes them in one launch
    assert v5["MX fp4, x2 transposed, k not a multiple of 64, float32 bias"] == "dequant mx-pair"
    assert v5["fp8 per-token and per-channel float32 scales"] == "fp8-blaslt"
    assert v5["fp8 per-tensor packed scale"] == "fp8-blaslt"  # n = 6: gathered to n_pad 16, not direct
    assert v5["int8 K-C"] == "int8-blaslt"
    v3 = _paths(backend, "QuantMatmulV3")
    assert v3["int4 operands"] == "dequant" and v3["int64 scale fp16"] == "int8-blaslt"
    # fp32-decoded weights into a 16-bit y: cuBLASLt has no such GEMM, so the epilogue rounds
    assert set(_paths(backend, "WeightQuantBatchMatmulV2").values()) == {"dequant"}
    provider.gemms.clear()
    _run(backend, "QuantMatmulV3", _samples("QuantMatmulV3")[0].args)
    (call,) = provider.gemms
    assert call.a.dtype == call.b.dtype == int(D.ACL_INT8) and call.d.dtype == int(D.ACL_INT32)
    assert call.a.transpose and not call.b.transpose  # the "TN" form
    assert call.a.ld % 16 == 0 and call.b.ld % 16 == 0 and call.a.cols % 16 == 0


def _fp8_square(rng: np.random.Generator, m: int, k: int, n: int, *, t2: bool) -> dict:
    x1 = rng.uniform(-4, 4, (m, k)).astype(ml_dtypes.float8_e4m3fn)
    x2 = rng.uniform(-4, 4, (n, k) if t2 else (k, n)).astype(ml_dtypes.float8_e4m3fn)
    none = {"yScale": None, "x1Offset": None, "x2Offset": None, "yOffset": None, "bias": None}
    return (
        {"x1": x1, "x2": x2, "x1Scale": None, "x2Scale": lowp.encode_packed_scale([0.5]).view(np.int64)}
        | none
        | {
            "groupSize": 0,
            "transposeX1": False,
            "transposeX2": t2,
        }
    )


def test_fp8_per_tensor_writes_out_directly_through_the_scale_pointer(emulated, reference: Backend) -> None:
    backend, provider = emulated
    args = _fp8_square(np.random.default_rng(2), 32, 64, 48, t2=True)
    provider.gemms.clear()
    provider.launches.clear()
    got = _run(backend, "QuantMatmulV5", args)
    assert backend.quant_matmul.last_path == "fp8-blaslt-direct"
    (call,) = provider.gemms
    assert call.a_scale != 0 and call.b_scale == 0 and call.d.dtype == int(D.ACL_BF16)
    assert call.a.dtype == int(D.ACL_FLOAT8_E4M3FN) and call.a.transpose and not call.b.transpose
    assert provider.launches == []  # x2 given as (n, k) is already K-major: no gather, no epilogue
    assert_close(got, _run(reference, "QuantMatmulV5", args))
    # x2 as (k, n) is not K-major: gathered into the TN layout by the byte-copy operand kernel
    args = _fp8_square(np.random.default_rng(3), 32, 64, 48, t2=False)
    provider.launches.clear()
    got = _run(backend, "QuantMatmulV5", args)
    # the source runs along n: the tile is staged in shared memory (the "_t" kernel) so both sides coalesce
    assert [launch.name for launch in provider.launches] == ["acl_qmm_operand_raw_raw_none_t"]
    assert_close(got, _run(reference, "QuantMatmulV5", args))


def test_fp8_with_k_not_a_multiple_of_16_is_padded(emulated, reference: Backend) -> None:
    backend, provider = emulated
    args = _fp8_square(np.random.default_rng(4), 5, 40, 24, t2=True)
    provider.gemms.clear()
    got = _run(backend, "QuantMatmulV5", args)
    (call,) = provider.gemms
    assert call.a.rows == 48 and call.b.rows == 48 and call.a.ld == 48  # k = 40 zero-padded to 48
    assert_close(got, _run(reference, "QuantMatmulV5", args))


def test_e5m2_pairs_take_the_dequant_path(emulated, reference: Backend) -> None:
    backend, provider = emulated
    rng = np.random.default_rng(5)
    args = _fp8_square(rng, 8, 32, 16, t2=False)
    args["x1"] = args["x1"].astype(np.float32).astype(ml_dtypes.float8_e5m2)
    args["x2"] = args["x2"].astype(np.float32).astype(ml_dtypes.float8_e5m2)
    provider.gemms.clear()
    got = _run(backend, "QuantMatmulV5", args)
    assert backend.quant_matmul.last_path == "dequant" and provider.gemms[0].a.dtype == int(D.ACL_BF16)
    assert_close(got, _run(reference, "QuantMatmulV5", args))


def test_batched_int8_with_a_broadcast_weight(emulated, reference: Backend) -> None:
    backend, _ = emulated
    rng = np.random.default_rng(6)
    args = {
        "x1": rng.integers(-128, 128, (2, 3, 5, 32)).astype(np.int8),
        "x2": rng.integers(-128, 128, (32, 16)).astype(np.int8),
        "scale": rng.uniform(1e-3, 1e-2, 16).astype(np.float32),
        "offset": None,
        "pertokenScaleOptional": rng.uniform(0.5, 2, 5).astype(np.float32),
        "bias": None,
        "transposeX1": False,
        "transposeX2": False,
    }
    got = _run(backend, "QuantMatmulV4", args)
    assert backend.quant_matmul.last_path == "int8-blaslt"
    assert_close(got, _run(reference, "QuantMatmulV4", args))


def test_operand_and_epilogue_tiles_cross_their_edges(emulated, reference: Backend) -> None:
    """Shapes crossing the operand kernel's 32 x 64 tile and the epilogue's 256-column, 8-row blocks."""
    backend, provider = emulated
    rng = np.random.default_rng(7)
    for t2 in (False, True):  # x2 along n (the staged, transposing kernel) and K-major (the direct one)
        args = {
            "x1": rng.integers(-128, 128, (2, 41, 136)).astype(np.int8),
            "x2": rng.integers(-128, 128, (270, 136) if t2 else (136, 270)).astype(np.int8),
            "scale": rng.uniform(1e-3, 1e-2, 270).astype(np.float32),
            "offset": None,
            "pertokenScaleOptional": rng.uniform(0.5, 2, 41).astype(np.float32),
            "bias": rng.uniform(-1, 1, 270).astype(np.float32),
            "transposeX1": False,
            "transposeX2": t2,
        }
        provider.launches.clear()
        got = _run(backend, "QuantMatmulV4", args)
        names = [launch.name for launch in provider.launches]
        assert any(name.endswith("_t") for name in names) == (not t2), names
        assert_close(got, _run(reference, "QuantMatmulV4", args))


def test_mx_dequant_path_logs_which_path_ran(emulated, caplog: pytest.LogCaptureFixture) -> None:
    backend, _ = emulated
    sample = _samples("QuantMatmulV5")[0]
    assert sample.args["groupSize"] == MX_GROUP
    with caplog.at_level(logging.DEBUG, logger="acl_rocm.quant_matmul"):
        _run(backend, "QuantMatmulV5", sample.args)
    assert any("path=dequant" in r.getMessage() and "QuantMatmulV5" in r.getMessage() for r in caplog.records)


def test_capabilities_on_sm90(emulated) -> None:
    backend, _ = emulated
    caps = backend.capabilities()
    assert caps.fp8_matmul_hw and not caps.mx_use_hw
    assert set(OPS) <= set(caps.ops)
    assert "fp8-blaslt" in caps.notes["quant_matmul"]


@pytest.mark.parametrize(("arch", "fp8"), [("sm_80", False), ("sm_89", True), ("sm_100", True)])
def test_fp8_capability_follows_the_architecture(tmp_path: Path, arch: str, fp8: bool) -> None:
    backend, _ = _backend(tmp_path, arch)
    assert backend.capabilities().fp8_matmul_hw is fp8
    assert not backend.capabilities().mx_use_hw


def test_fp8_on_an_arch_without_fp8_hardware_dequantises(tmp_path: Path, reference: Backend) -> None:
    backend, _provider = _backend(tmp_path, "sm_80")
    args = _fp8_square(np.random.default_rng(7), 16, 32, 16, t2=True)
    got = _run(backend, "QuantMatmulV5", args)
    assert backend.quant_matmul.last_path == "dequant"
    assert_close(got, _run(reference, "QuantMatmulV5", args))


def test_no_blas_no_claim(tmp_path: Path) -> None:
    backend = RocmBackend(FakeProvider(), {"ACL_KERNEL_CACHE": str(tmp_path)})
    caps = backend.capabilities()
    assert not set(OPS) & set(caps.ops) and not caps.fp8_matmul_hw


def test_mxfp8_force_hw_is_refused_on_sm90(tmp_path: Path) -> None:
    with pytest.raises(BackendUnavailableError) as err:
        RocmBackend(FakeProvider(blas=True), {"MXFP8_FORCE_HW": "1", "ACL_KERNEL_CACHE": str(tmp_path)})
    assert "MXFP8_FORCE_HW=1" in err.value.reason and "sm_90" in err.value.reason


def test_mxfp8_force_hw_is_refused_per_call_where_mx_hardware_exists(tmp_path: Path) -> None:
    backend, _ = _backend(tmp_path, "sm_100", {"MXFP8_FORCE_HW": "1"})
    assert backend.policy.mx_use_hw
    sample = _samples("QuantMatmulV5")[0]
    with pytest.raises(AclError) as err:
        _run(backend, "QuantMatmulV5", sample.args)
    assert "native MX GEMM" in str(err.value)


def test_a_blas_refusal_falls_back_to_dequant_and_is_recorded(tmp_path: Path, reference: Backend) -> None:
    backend, provider = _backend(tmp_path)
    original = provider.gemm

    def refuse_fp8(call, workspace, size, stream):  # type: ignore[no-untyped-def]
        if call.a.dtype == int(D.ACL_FLOAT8_E4M3FN):
            raise AclError(RtErrorCode.ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "cublasLtMatmulAlgoGetHeuristic: none")
        original(call, workspace, size, stream)

    provider.gemm = refuse_fp8  # type: ignore[method-assign]
    args = _fp8_square(np.random.default_rng(8), 16, 32, 16, t2=True)
    got = _run(backend, "QuantMatmulV5", args)
    assert backend.quant_matmul.last_path == "dequant" and "fp8-blaslt" in backend.quant_matmul.hw_refused
    assert_close(got, _run(reference, "QuantMatmulV5", args))


def test_decode_tables_agree_with_the_host_codecs() -> None:
    codes = np.arange(256, dtype=np.uint8)
    e4 = decode_table(D.ACL_FLOAT8_E4M3FN)
    np.testing.assert_array_equal(e4, codes.view(ml_dtypes.float8_e4m3fn).astype(np.float32))
    np.testing.assert_array_equal(decode_table(D.ACL_HIFLOAT8), lowp.hifloat8_decode(codes).astype(np.float32))
    assert decode_table(D.ACL_INT4)[:16].tolist() == [*range(8), *range(-8, 0)]
    assert decode_table(D.ACL_FLOAT4_E2M1)[:8].tolist() == [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    assert decode_table(D.ACL_FLOAT8_E8M0)[127] == 1.0 and np.isnan(decode_table(D.ACL_FLOAT8_E8M0)[255])


def test_kernel_sources_are_specialised() -> None:
    raw = operand_source(OperandKernel("raw", "raw"))
    assert "table[" not in raw and "__syncthreads" not in raw
    mx = operand_source(OperandKernel("lut8", "bf16", "e8m0"))
    assert "stable[sc[si]]" in mx and "acl_f2b(v)" in mx
    staged = operand_source(OperandKernel("lut8", "bf16", "e8m0", transpose=True))
    assert "tile[" in staged and "tile[" not in mx
    with pytest.raises(ValueError):
        operand_source(OperandKernel("raw", "bf16"))
    epi = epilogue_source(EpilogueKernel("int32", D.ACL_INT8, D.ACL_UINT64, bias=D.ACL_INT32, bias_first=True))
    body = epi.split("double v = (double)a0[i].v[j];", 1)[1]
    assert body.index("*)bias)") < body.index("*)scale)")  # an int32 bias is added before dequantisation
    assert "acl_f2i(rint(v), -128.0, 127.0)" in epi


def test_mx_pair_source_never_indexes_its_parameters_at_run_time() -> None:
    """A run-time index into the by-value meta (meta.k[side]) made ptxas copy it to a 120-byte stack per thread."""
    for load in ("lut8", "lut4"):
        source = mx_pair_source(load)  # type: ignore[arg-type]
        assert "[side]" not in source and "meta.k[1] : meta.k[0]" in source
        assert "out[c64] = r;" in source  # one 16-byte store per chunk, consecutive lanes consecutive chunks


@pytest.fixture(scope="module")
def emulated_vec(tmp_path_factory: pytest.TempPathFactory) -> tuple[RocmBackend, FakeProvider]:
    return _backend(tmp_path_factory.mktemp("kcv"), env={"ACL_QMM_EPILOGUE": "vec4"})


@pytest.fixture(scope="module")
def emulated_scalar(tmp_path_factory: pytest.TempPathFactory) -> tuple[RocmBackend, FakeProvider]:
    return _backend(tmp_path_factory.mktemp("kcs"), env={"ACL_QMM_EPILOGUE": "scalar"})


@pytest.mark.parametrize("op", OPS)
def test_vec4_epilogue_writes_what_the_scalar_one_writes(emulated_scalar, emulated_vec, op: str) -> None:
    """ACL_QMM_EPILOGUE=vec4: every sample bit-identical to the scalar epilogue; layouts it refuses run scalar."""
    scalar, _ = emulated_scalar
    vec, provider = emulated_vec
    provider.launches.clear()
    for sample in _samples(op):
        for layout in ("contiguous", "transposed"):
            want = _run(scalar, op, sample.args, layout)
            got = _run(vec, op, sample.args, layout)
            assert got.dtype == want.dtype and got.shape == want.shape, sample.note
            np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8), err_msg=sample.note)
    names = {launch.name for launch in provider.launches if "epilogue" in launch.name}
    if op in ("QuantMatmulV3", "QuantMatmulV4"):  # the V5 samples' n are not multiples of 4: scalar there
        assert any(name.endswith("_v4") for name in names), names


def test_vec4_epilogue_crosses_its_edges_bit_for_bit(emulated_scalar, emulated_vec, reference: Backend) -> None:
    """n = 276 (a partial 1024-column block), m = 41 (a partial 8-row block), a batch of 2, every parameter."""
    scalar, _ = emulated_scalar
    vec, provider = emulated_vec
    rng = np.random.default_rng(8)
    args = {
        "x1": rng.integers(-128, 128, (2, 41, 136)).astype(np.int8),
        "x2": rng.integers(-128, 128, (276, 136)).astype(np.int8),
        "scale": rng.uniform(1e-3, 1e-2, 276).astype(np.float32),
        "offset": None,
        "pertokenScaleOptional": rng.uniform(0.5, 2, 41).astype(np.float32),
        "bias": rng.uniform(-1, 1, 276).astype(np.float32),
        "transposeX1": False,
        "transposeX2": True,
    }
    provider.launches.clear()
    got = _run(vec, "QuantMatmulV4", args)
    assert any(launch.name.endswith("_v4") for launch in provider.launches)
    np.testing.assert_array_equal(got.view(np.uint16), _run(scalar, "QuantMatmulV4", args).view(np.uint16))
    assert_close(got, _run(reference, "QuantMatmulV4", args))
    with pytest.raises(Exception, match="ACL_QMM_EPILOGUE='wide'"):
        _run(_backend(Path(tempfile.mkdtemp()), env={"ACL_QMM_EPILOGUE": "wide"})[0], "QuantMatmulV4", args)

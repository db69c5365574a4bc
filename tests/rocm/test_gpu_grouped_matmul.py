"""GroupedMatmulV5 on the GPU (descriptor table + tiled grouped GEMM kernel), compared with the reference.

fp16 / bf16 groups run on the matrix-instruction kernel (path ``mma``), fp32 ones on the SIMT kernel.
``MOE`` is the MoE expert layer the matrix kernel is built for (64 uneven groups, K 2048, N 1408, bf16);
``ACL_ROCM_EMULATE=1`` (the CPU kernel emulator) shrinks it.
"""

from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import pytest

from acl_core import eager, lowp
from acl_core.backend import Backend
from acl_core.errors import AclnnError
from acl_core.formats import Format
from acl_core.spec.ops import get_spec
from acl_core.tensor import AclTensor, AclTensorList
from tests.conftest import assert_close
from tests.rocm.gemm_tolerance import gemm_tolerance
from tests.rocm.prefill import sentinel_outputs

pytestmark = pytest.mark.gpu
OP = "GroupedMatmulV5"
EMULATED = os.environ.get("ACL_ROCM_EMULATE") == "1"
MOE = (8, 300, 96, 136) if EMULATED else (64, 16384, 2048, 1408)
"""(groups, rows in all, K, N) of the MoE-shaped test."""


def _base(**extra: object) -> dict[str, object]:
    return {"splitItem": 0, "groupType": -1, "groupListType": 0, "actType": 0, **extra}


def _check(backend: Backend, reference: Backend, args: dict, layout: str = "contiguous", k: int = 0) -> None:
    """Each output against the reference: the conformance tolerance, or (``k``) that of a k-term product sum."""
    want = eager.run(OP, reference, **args)
    expected = want["out"]
    got = eager.run(OP, backend, layout=layout, **args, **sentinel_outputs(OP, args, want))["out"]
    assert len(got) == len(expected)
    for a, e in zip(got, expected):
        assert a.dtype == e.dtype and a.shape == e.shape
        if k:
            atol, rtol = gemm_tolerance(e, k)
            np.testing.assert_allclose(a.astype(np.float64), e.astype(np.float64), atol=atol, rtol=rtol)
        else:
            assert_close(a, e)


@pytest.mark.parametrize("layout", ["contiguous", "padded", "transposed"])
def test_samples_match_reference(rocm: Backend, reference: Backend, layout: str) -> None:
    for sample in get_spec(OP).samples(np.random.default_rng(7)):  # type: ignore[misc]
        try:
            _check(rocm, reference, dict(sample.args), layout)
        except AssertionError as exc:
            raise AssertionError(f"[{sample.note}] layout={layout}\n{exc}") from None


def _arr(rng: np.random.Generator, shape: tuple[int, ...], dtype: object) -> np.ndarray:
    return rng.uniform(-1, 1, shape).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
def test_moe_shaped_m_groups(rocm: Backend, reference: Backend, dtype: object) -> None:
    rng = np.random.default_rng(1)
    counts = np.array([130, 0, 257, 1, 64, 300, 77, 71], np.int64)  # 900 of 1000 rows
    bias_dt = np.float16 if dtype == np.float16 else np.float32
    args = _base(
        x=[_arr(rng, (1000, 256), dtype)],
        weight=[_arr(rng, (8, 256, 320), dtype)],
        biasOptional=[_arr(rng, (8, 320), bias_dt)],
        groupListOptional=counts,
        splitItem=3,
        groupType=0,
        groupListType=1,
        out=[np.zeros((1000, 320), dtype)],
    )
    _check(rocm, reference, args, k=256)
    args["groupListOptional"] = np.cumsum(counts)
    args["groupListType"] = 0
    _check(rocm, reference, args, k=256)


def test_weight_list_x_list_and_independent_products(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(2)
    dt = ml_dtypes.bfloat16
    weights = [_arr(rng, (128, 96), dt) for _ in range(20)]
    counts = rng.integers(0, 40, 20).astype(np.int64)
    args = _base(
        x=[_arr(rng, (int(counts.sum()) + 5, 128), dt)],
        weight=weights,
        groupListOptional=counts,
        splitItem=2,
        groupType=0,
        groupListType=1,
        out=[np.zeros((int(counts.sum()) + 5, 96), dt)],  # the 5 rows no group covers stay as given
    )
    _check(rocm, reference, args, k=128)
    xs = [_arr(rng, (int(c), 128), dt) for c in counts[:6]]
    _check(rocm, reference, _base(x=xs, weight=weights[:6], splitItem=2, groupType=0), k=128)
    pairs = _base(
        x=[_arr(rng, (210, 200), np.float32), _arr(rng, (129, 33), np.float32)],
        weight=[_arr(rng, (200, 65), np.float32), _arr(rng, (33, 300), np.float32)],
        biasOptional=[_arr(rng, (65,), np.float32), _arr(rng, (300,), np.float32)],
    )
    _check(rocm, reference, pairs, k=200)


def test_k_groups(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(3)
    args = _base(
        x=[_arr(rng, (150, 512), np.float16)],
        weight=[_arr(rng, (512, 130), np.float16)],
        groupListOptional=np.array([100, 100, 400, 512], np.int64),
        splitItem=2,
        groupType=2,
    )
    _check(rocm, reference, args, k=300)
    split = _base(
        x=[_arr(rng, (90, 300), np.float32)],
        weight=[_arr(rng, (100, 40), np.float32), _arr(rng, (150, 70), np.float32)],
        groupType=2,
    )
    _check(rocm, reference, split, k=150)


@pytest.mark.parametrize(
    ("group_list", "list_type"),
    [([3, 2, 6], 0), ([3, 6, 7], 0), ([3, -1, 4], 1), ([3, 3, 1], 1)],
)
def test_bad_group_lists_raise_161002(rocm: Backend, group_list: list[int], list_type: int) -> None:
    rng = np.random.default_rng(0)
    args = _base(
        x=[_arr(rng, (6, 4), np.float32)],
        weight=[_arr(rng, (3, 4, 2), np.float32)],
        groupListOptional=np.array(group_list, np.int64),
        splitItem=2,
        groupType=0,
        groupListType=list_type,
    )
    with pytest.raises(AclnnError) as err:
        eager.run(OP, rocm, **args)
    assert err.value.code == 161002
    good = {**args, "groupListOptional": np.array([3, 3, 0] if list_type else [3, 6, 6], np.int64)}
    eager.run(OP, rocm, **good)  # the stream is usable afterwards


# ----------------------------------------------------------------------------- MX mode
def _mx_args(rng: np.random.Generator, x_dt: object, w_dt: object, counts: list[int], k: int, n: int) -> dict:
    m, groups, kb = sum(counts) + 3, len(counts), -(-k // 64)  # 3 rows no group covers
    return _base(
        x=[rng.uniform(-6, 6, (m, k)).astype(x_dt)],
        weight=[rng.uniform(-6, 6, (groups, k, n)).astype(w_dt)],
        scaleOptional=[lowp.e8m0_array(rng.integers(118, 136, (groups, kb, n, 2)))],
        perTokenScaleOptional=[lowp.e8m0_array(rng.integers(118, 136, (m, kb, 2)))],
        groupListOptional=np.array(counts, np.int64),
        splitItem=2,
        groupType=0,
        groupListType=1,
    )


@pytest.mark.parametrize(
    ("x_dt", "w_dt", "out_dt"),
    [
        (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fn, ml_dtypes.bfloat16),
        (ml_dtypes.float8_e5m2, ml_dtypes.float8_e4m3fn, np.float32),
        (ml_dtypes.float4_e2m1fn, ml_dtypes.float4_e2m1fn, np.float16),
    ],
    ids=["e4m3-bf16", "e5m2xe4m3-f32", "fp4-f16"],
)
def test_mx_moe_shaped_m_groups(rocm: Backend, reference: Backend, x_dt: object, w_dt: object, out_dt: object) -> None:
    rng = np.random.default_rng(4)
    args = _mx_args(rng, x_dt, w_dt, [70, 0, 129, 1, 96], 288, 160)  # K = 4.5 blocks of 64
    if out_dt == np.float16:  # fp16 output: keep the products in range
        args["scaleOptional"] = [lowp.e8m0_array(rng.integers(120, 125, (5, 5, 160, 2)))]
        args["perTokenScaleOptional"] = [lowp.e8m0_array(rng.integers(120, 125, (299, 5, 2)))]
        args["biasOptional"] = [rng.standard_normal((5, 160)).astype(np.float32)]
    args["out"] = [np.full((299, 160), -7, out_dt)]  # the uncovered rows must keep it
    got, want = (eager.run(OP, b, **args)["out"][0] for b in (rocm, reference))
    _assert_mx_close(reference, args, got, want)


ROUNDING = {np.dtype(np.float32): 2.0**-24, np.dtype(np.float16): 2.0**-11, np.dtype(ml_dtypes.bfloat16): 2.0**-8}


def _assert_mx_close(reference: Backend, args: dict, got: np.ndarray, want: np.ndarray) -> None:
    """MX output within fp32 summation's error bound (k * 2^-24 * sum |x_i w_i|) plus two output roundings.

    The bound's sums come from the reference run on |x| and |weight| with the same scales; with E8M0
    scales spanning 2^±9 the terms of one sum differ by up to 2^36, so no fixed relative tolerance fits.
    """
    assert got.dtype == want.dtype and got.shape == want.shape
    magnitudes = {"x": [np.abs(args["x"][0])], "weight": [np.abs(args["weight"][0])], "biasOptional": None}
    zeros = [np.zeros(want.shape, np.float32)]
    bound = eager.run(OP, reference, **{**args, **magnitudes, "out": zeros})["out"][0].astype(np.float64)
    k = args["x"][0].shape[1]
    expected = want.astype(np.float64)
    # both sides round once to the output: their results may sit on either side of a midpoint, one ulp apart
    tolerance = k * 2.0**-24 * bound + 2 * ROUNDING[np.dtype(want.dtype)] * np.abs(expected)
    error = np.abs(got.astype(np.float64) - expected)
    worst = np.unravel_index(np.argmax(error - tolerance), error.shape)
    assert np.all(error <= tolerance), f"at {worst}: got {got[worst]}, want {want[worst]}, bound {tolerance[worst]}"


def _transposed_weight(backend: Backend, w: np.ndarray) -> tuple[AclTensorList, eager.DeviceArray]:
    """weight [g, K, N] as CANN's transposed view: stored [g, N, K]."""
    stored = eager.to_device(np.ascontiguousarray(np.swapaxes(w, 1, 2)), backend)
    g, k, n = w.shape
    view = AclTensor((g, k, n), stored.dtype, (n * k, 1, k), 0, Format.ACL_FORMAT_ND, (g, n, k), stored.address)
    return AclTensorList.create([view]), stored


def test_mx_transposed_weight(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(5)
    args = _mx_args(rng, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fn, [40, 25], 192, 48)
    w = args["weight"][0]
    plain = args["scaleOptional"]
    args["scaleOptional"] = [np.ascontiguousarray(np.swapaxes(plain[0], 1, 2))]  # [g, N, kb, 2]
    args["out"] = [np.zeros((68, 48), np.float32)]
    ref_w, _ref_storage = _transposed_weight(reference, w)  # the storages live as long as these names
    gpu_w, _gpu_storage = _transposed_weight(rocm, w)
    want = eager.run(OP, reference, **{**args, "weight": ref_w})["out"][0]
    got = eager.run(OP, rocm, **{**args, "weight": gpu_w})["out"][0]
    plain_args = {**args, "weight": [w], "scaleOptional": plain}
    np.testing.assert_array_equal(want, eager.run(OP, reference, **plain_args)["out"][0])
    _assert_mx_close(reference, plain_args, got, want)


# ----------------------------------------------------------------------------- the matrix-instruction kernel
def moe_counts(rng: np.random.Generator, groups: int, total: int) -> np.ndarray:
    """Rows per expert: a multinomial draw over uneven popularities (some experts get none)."""
    weights = rng.gamma(0.6, size=groups)
    return rng.multinomial(total, weights / weights.sum()).astype(np.int64)


GMM_CONFIGS = ("base", "128x128x32-w2x2-s4", "128x128x32-w2x4-s4-b2", "128x128x64-w2x4-s3-b2")
GMM_CONFIGS += ("128x256x32-w2x4-s4", "64x128x32-w2x2-s4-b3", "128x128x32-w2x2-s3", "128x128x32-w2x2-s5")
GMM_CONFIGS += ("128x128x64-w2x2-s3", "128x64x32-w2x2-s4")
"""The matrix kernel's configurations (``ACL_GMM_CONFIG``): kernels/grouped_matmul_mma.py's CONFIGS."""


@pytest.mark.parametrize("config", GMM_CONFIGS)
@pytest.mark.parametrize("weight_layout", ["kn", "nk"])
def test_moe_layer_on_the_matrix_kernel(rocm: Backend, reference: Backend, weight_layout: str, config: str) -> None:
    """64 experts of uneven M, K 2048, N 1408, bf16 in and out, in every block configuration: the op's accuracy
    class and a K-term sum's bound."""
    rng = np.random.default_rng(8)
    groups, m, k, n = MOE
    counts = moe_counts(rng, groups, m)
    counts[1] = 0  # at least one empty expert
    counts[0] += m - int(counts.sum())
    args = _base(
        x=[_arr(rng, (m, k), ml_dtypes.bfloat16)],
        weight=[_arr(rng, (groups, k, n), ml_dtypes.bfloat16)],
        groupListOptional=np.cumsum(counts),
        splitItem=3,
        groupType=0,
        groupListType=0,
        out=[np.full((m, n), np.nan, ml_dtypes.bfloat16)],  # every row is written
    )
    want = eager.run(OP, reference, **args)["out"][0]
    run_args = dict(args)
    keep = None
    if weight_layout == "nk":
        run_args["weight"], keep = _transposed_weight(rocm, args["weight"][0])
    runner = rocm.grouped_matmul  # type: ignore[attr-defined]
    runner.last_path = None
    runner.forced_kernel, runner.forced_config = "mma", config  # auto takes the wgmma kernel on sm_90
    try:
        got = eager.run(OP, rocm, **run_args)["out"][0]
    finally:
        runner.forced_kernel = runner.forced_config = None
    del keep
    assert runner.last_path == "mma" and runner.last_config == config
    assert got.dtype == want.dtype and got.shape == want.shape
    assert_close(got, want)
    atol, rtol = gemm_tolerance(want, k)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), atol=atol, rtol=rtol)

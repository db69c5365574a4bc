"""The wgmma grouped GEMM (``ACL_GMM_KERNEL=wgmma``, sm_90a) against the reference (GPU tier, sm_90 only).

Every GroupedMatmulV5 sample (contiguous, padded and transposed views: the 16-byte copy path and the element one) in
the default configuration, the no-swizzle one and the weight-bound choices (``-m`` row tiles fastest, ``-d`` a slice
more in flight). In every configuration the bench times: the tile shapes the kernel specialises (rows per group 0,
1, 63, 64, 65, 127, 128, 129: split, full and partial tiles; N 1,408 / 320 / 100 / 64: the n/2 and n/4 forms,
element copies; K with a tail past the last 64-deep slice), both weight layouts, bias in the op's dtypes; the MoE
expert layer itself (64 uneven groups with empty ones, K 2,048, N 1,408, bf16; rows past the last group must keep
their sentinel), also under ``128x256-s4-p-m-d-sw`` (not timed). In the default: the other grouped ops that reach
the fp16 / bf16 grouped GEMM (GroupedMatmul V1, GroupedMatmulWeightNz, MX mode, K groups) with the kernel forced.
Each case asserts that the wgmma kernel ran where it should.

Skipped on the CPU emulator (it cannot run wgmma PTX) and on devices other than sm_90, with the reason.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.spec.ops import get_spec
from acl_rocm.kernels.grouped_matmul_wgmma import ALTERNATIVES, DEFAULT
from tests.conftest import assert_close
from tests.rocm import test_gpu_grouped_matmul as v5
from tests.rocm import test_gpu_matmul_variants as variants
from tests.rocm.gemm_tolerance import gemm_tolerance

pytestmark = pytest.mark.gpu
OP = "GroupedMatmulV5"
CONFIGS = (str(DEFAULT), *ALTERNATIVES)
BF16 = ml_dtypes.bfloat16


@contextmanager
def forced(backend: Backend, config: str | None = None) -> Iterator[list[str]]:
    """The wgmma kernel forced (``config``: its block shape) while inside; yields the paths each grouped GEMM took."""
    runner = backend.grouped_matmul  # type: ignore[attr-defined]
    paths: list[str] = []
    report = runner._report

    def recording(message: str, gemm: Any, groups: int, grid: int) -> None:
        report(message, gemm, groups, grid)
        paths.append(gemm.path)

    runner.forced_kernel, runner.forced_wgmma_config, runner._report = "wgmma", config, recording
    try:
        yield paths
    finally:
        runner.forced_kernel = runner.forced_wgmma_config = None
        del runner._report


def _sixteen_bit(args: dict[str, Any]) -> bool:
    """Whether a call's grouped GEMM multiplies fp16 / bf16 (MX operands decode to bf16)."""
    x = args["x"][0]
    return np.dtype(x.dtype) != np.float32


@pytest.mark.parametrize("layout", ["contiguous", "padded", "transposed"])
@pytest.mark.parametrize("config", [str(DEFAULT), "128x256-s4", "128x256-s4-m-d-sw"])
def test_v5_samples(hopper: Backend, reference: Backend, config: str, layout: str) -> None:
    """Every sample: the dtype, bias, output and stride paths (the configurations differ in tiles and layouts, which
    the tile-shape and MoE tests cover in each; the samples run in the swizzled default and the no-swizzle layout)."""
    for sample in get_spec(OP).samples(np.random.default_rng(7)):  # type: ignore[misc]
        args = dict(sample.args)
        with forced(hopper, config) as paths:
            try:
                v5._check(hopper, reference, args, layout)
            except AssertionError as exc:
                raise AssertionError(f"[{sample.note}] config={config} layout={layout}\n{exc}") from None
        want = "wgmma" if _sixteen_bit(args) else "simt"
        assert set(paths) <= {want}, f"[{sample.note}] took {paths}"


def _groups_args(
    rng: np.random.Generator, counts: list[int], k: int, n: int, dtype: Any, bias: Any = None, uncovered: int = 5
) -> dict[str, Any]:
    m = sum(counts) + uncovered  # rows past the last group keep what out held
    args = v5._base(
        x=[v5._arr(rng, (m, k), dtype)],
        weight=[v5._arr(rng, (len(counts), k, n), dtype)],
        groupListOptional=np.array(counts, np.int64),
        splitItem=3,
        groupType=0,
        groupListType=1,
        out=[np.full((m, n), -7, dtype)],
    )
    if bias is not None:
        args["biasOptional"] = [v5._arr(rng, (len(counts), n), bias)]
    return args


def _run(backend: Backend, args: dict[str, Any], weight_layout: str) -> np.ndarray:
    run_args, keep = dict(args), None
    if weight_layout == "nk":
        run_args["weight"], keep = v5._transposed_weight(backend, args["weight"][0])
    got = eager.run(OP, backend, **run_args)["out"][0]
    del keep
    return got


def _compare(got: np.ndarray, want: np.ndarray, k: int, covered: int) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.all(got[covered:] == -7), "rows past the last group were written"
    atol, rtol = gemm_tolerance(want, k)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), atol=atol, rtol=rtol)


ROWS = [0, 1, 63, 64, 65, 0, 127, 128, 129, 200]
"""Rows per group: empty, split (<= 64), full and partial 128-row tiles."""


@pytest.mark.parametrize("weight_layout", ["kn", "nk"])
@pytest.mark.parametrize(("k", "n"), [(200, 1408), (2048, 320), (72, 100), (64, 64), (136, 256)])
@pytest.mark.parametrize("config", CONFIGS)
def test_tile_shapes(hopper: Backend, reference: Backend, config: str, k: int, n: int, weight_layout: str) -> None:
    """The specialised tiles (split, n/2, n/4), K tails and the element path (N 100: [g, K, N] rows not 16-byte
    aligned), bf16 without bias and fp16 with an fp16 bias."""
    rng = np.random.default_rng(k * n)
    for dtype, bias in ((BF16, None), (np.float16, np.float16)):
        args = _groups_args(rng, ROWS, k, n, dtype, bias)
        want = eager.run(OP, reference, **args)["out"][0]
        with forced(hopper, config) as paths:
            got = _run(hopper, args, weight_layout)
        assert paths == ["wgmma"]
        _compare(got, want, k, sum(ROWS))


@functools.cache
def _moe_case(groups: int, m: int, k: int, n: int) -> tuple[dict[str, Any], np.ndarray]:
    """The MoE layer's operands (uneven counts, two empty experts, 77 rows past the last group) and the reference's
    output (computed once for every configuration and layout)."""
    from acl_core import get_backend

    rng = np.random.default_rng(8)
    counts = v5.moe_counts(rng, groups, m - 77)
    counts[1] = counts[groups // 2] = 0
    counts[0] += m - 77 - int(counts.sum())
    args = _groups_args(rng, [int(c) for c in counts], k, n, BF16, uncovered=77)
    args["groupListOptional"] = np.cumsum(counts)  # cumulative ends
    args["groupListType"] = 0
    return args, eager.run(OP, get_backend("reference"), **args)["out"][0]


@pytest.mark.parametrize("weight_layout", ["kn", "nk"])
@pytest.mark.parametrize("config", [*CONFIGS, "128x256-s4-p-m-d-sw"])
def test_moe_layer(hopper: Backend, config: str, weight_layout: str) -> None:
    """64 experts of uneven M, K 2,048, N 1,408, bf16: the op's accuracy class and a K-term sum's bound."""
    groups, m, k, n = v5.MOE
    args, want = _moe_case(groups, m, k, n)
    with forced(hopper, config) as paths:
        got = _run(hopper, args, weight_layout)
    runner = hopper.grouped_matmul  # type: ignore[attr-defined]
    assert paths == ["wgmma"] and runner.last_config == config
    assert_close(got[: m - 77], want[: m - 77])
    _compare(got, want, k, m - 77)


OTHERS: dict[str, Callable[[Backend, Backend], None]] = {
    "v5 m groups fp16": lambda r, ref: v5.test_moe_shaped_m_groups(r, ref, np.float16),
    "v5 m groups bf16": lambda r, ref: v5.test_moe_shaped_m_groups(r, ref, BF16),
    "v5 weight list, x list, pairs": v5.test_weight_list_x_list_and_independent_products,
    "v5 k groups": v5.test_k_groups,
    "v5 mx e4m3 bf16": lambda r, ref: v5.test_mx_moe_shaped_m_groups(
        r, ref, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fn, BF16
    ),
    "v5 mx fp4 fp16": lambda r, ref: v5.test_mx_moe_shaped_m_groups(
        r, ref, ml_dtypes.float4_e2m1fn, ml_dtypes.float4_e2m1fn, np.float16
    ),
    "v5 mx transposed weight": v5.test_mx_transposed_weight,
    "GroupedMatmulWeightNz MoE": variants.test_moe_grouped_matmul_with_nz_weights,
    "GroupedMatmul V1 splitItem 2": lambda r, ref: variants.test_moe_grouped_matmul_v1(r, ref, 2),
    "GroupedMatmul V1 splitItem 0": lambda r, ref: variants.test_moe_grouped_matmul_v1(r, ref, 0),
}
"""The other grouped GEMM callers' GPU tests, rerun with the wgmma kernel forced."""


@pytest.mark.parametrize("case", list(OTHERS))
def test_other_grouped_calls(hopper: Backend, reference: Backend, case: str) -> None:
    with forced(hopper) as paths:
        OTHERS[case](hopper, reference)
    assert "wgmma" in paths and "mma" not in paths, paths


@pytest.mark.parametrize("op", ["GroupedMatmul", "GroupedMatmulWeightNz"])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_other_ops_samples(hopper: Backend, reference: Backend, op: str, layout: str) -> None:
    with forced(hopper) as paths:
        variants.test_samples_match_reference(hopper, reference, op, layout)
    assert "mma" not in paths, paths

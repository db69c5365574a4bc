"""The Foreach kernels' 16-byte vector loop (issue 16): when it is generated, and that it matches the element loop.

A slot whose a/b/c/out addresses are all 16-byte aligned walks whole vectors, then its tail element by
element; a misaligned slot (the ``offset`` layout: 37 elements in) takes the element loop alone. The
emulated runs (g++ on the CPU) cover lengths around a vector and a block, in fp32, fp16 and bf16, against
the reference under each op's class.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_rocm.kernels.foreach import ForeachKernel, vector_width
from tests.rocm.against_reference import assert_matches_reference

BF16 = np.dtype(ml_dtypes.bfloat16)
SIZES = [1, 7, 8, 9, 31, 33, 1029]


@pytest.mark.parametrize(("dtype", "width"), [(D.ACL_FLOAT, 4), (D.ACL_FLOAT16, 8), (D.ACL_BF16, 8), (D.ACL_DOUBLE, 2)])
def test_vector_loop_moves_16_bytes(dtype: D, width: int) -> None:
    assert vector_width(dtype) == width
    source = ForeachKernel("add_list", dtype, "value").source_text()
    assert f"const long long nv = n / {width};" in source and "for (long long i = done + t0; i < n;" in source


def test_unscale_flags_non_finite_values_in_the_vector_loop_too() -> None:
    source = ForeachKernel("unscale", D.ACL_FLOAT, "pointer", D.ACL_FLOAT).source_text()
    assert source.count("*found = 1.0f;") == 2


@pytest.mark.parametrize("config", ["scan", "grid2d"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16], ids=["fp32", "fp16", "bf16"])
def test_emulated_vector_and_element_loops_match_the_reference(
    emulated: Backend, reference: Backend, dtype: np.dtype, config: str
) -> None:
    """Under each ACL_FOREACH_CONFIG (forced on the runner) the members of unequal sizes match the reference."""
    runner = emulated.foreach  # type: ignore[attr-defined]
    runner.forced_config = config
    try:
        _vector_and_element_loops(emulated, reference, dtype)
    finally:
        runner.forced_config = None


def _vector_and_element_loops(emulated: Backend, reference: Backend, dtype: np.dtype) -> None:
    rng = np.random.default_rng(16)

    def members() -> list[np.ndarray]:
        return [rng.uniform(-2.0, 2.0, n).astype(np.float32).astype(dtype) for n in SIZES]

    cases = {
        "ForeachAddList": {"x1": members(), "x2": members(), "alpha": np.array([-0.5], np.float32)},
        "ForeachAddcmulScalarList": {
            "x1": members(),
            "x2": members(),
            "x3": members(),
            "scalars": rng.uniform(-2, 2, len(SIZES)).astype(np.float32),
        },
        "ForeachSqrt": {"x": [np.abs(m) for m in members()]},
    }
    for op, args in cases.items():
        for layout in ("contiguous", "offset"):
            assert_matches_reference(emulated, reference, op, args, layout, f"{dtype} sizes {SIZES}")


def _specials(dtype: np.dtype, rng: np.random.Generator, n: int) -> np.ndarray:
    """Values of ``dtype`` over its whole range: normal at every exponent, subnormal, zeros, inf, NaN."""
    info = np.finfo(dtype)
    bits = {2: np.uint16, 4: np.uint32}[np.dtype(dtype).itemsize]
    raw = rng.integers(0, np.iinfo(bits).max, n, dtype=np.uint64, endpoint=True).astype(bits).view(dtype)
    fixed = [0.0, -0.0, np.inf, -np.inf, np.nan, float(info.tiny), -float(info.tiny), float(info.max)]
    fixed += [float(info.smallest_subnormal), 1.0, -1.0, 3.0, float(info.eps)]
    out = raw.copy()
    out[: len(fixed)] = np.array(fixed, np.float64).astype(dtype)
    return out


@pytest.mark.parametrize("alpha", [1.0, -0.5, 1.0e-30, 7.0e30])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16], ids=["fp32", "fp16", "bf16"])
def test_grid2d_equals_the_scan_kernel_bit_for_bit(emulated: Backend, dtype: np.dtype, alpha: float) -> None:
    """ACL_FOREACH_CONFIG=grid2d on random bit patterns (every exponent, subnormals, zeros, inf, NaN) and alphas that
    push the double sums out of float's normal range gives the scan kernel's exact bits; 4099 elements cross
    blocks, 37 leave a tail."""
    config = "grid2d"
    from acl_core import eager

    runner = emulated.foreach  # type: ignore[attr-defined]
    rng = np.random.default_rng(61)
    sizes = [4099, 37]
    x1 = [_specials(dtype, rng, n) for n in sizes]
    x2 = [_specials(dtype, rng, n) for n in sizes]
    got = {}
    try:
        for choice in ("scan", config):
            runner.forced_config = choice
            result = eager.run("ForeachAddList", emulated, x1=x1, x2=x2, alpha=np.array([alpha], np.float32))
            got[choice] = [np.asarray(t) for t in result["out"]]
    finally:
        runner.forced_config = None
    for a, b in zip(got["scan"], got[config]):
        assert a.view(np.uint8).tobytes() == b.view(np.uint8).tobytes()


@pytest.mark.parametrize("config", ["scan", "grid2d"])
@pytest.mark.parametrize(("dtype", "half_ulp"), [(np.float16, 2.0**-11), (BF16, 2.0**-8)], ids=["fp16", "bf16"])
def test_a_sum_just_past_a_tie_rounds_up(emulated: Backend, config: str, dtype: np.dtype, half_ulp: float) -> None:
    """1 + alpha·1 with alpha = half an ulp of 1 + 2^-30: a float sum would drop the 2^-30 and tie to even (1.0);
    the round-to-odd float keeps it sticky, so the result is the next value up, as the reference's double gives."""
    from acl_core import eager

    runner = emulated.foreach  # type: ignore[attr-defined]
    ones = [np.ones(n, dtype) for n in (9, 16)]
    alpha = np.array([half_ulp + 2.0**-30], np.float32)
    runner.forced_config = config
    try:
        out = eager.run("ForeachAddList", emulated, x1=ones, x2=ones, alpha=alpha)["out"]
    finally:
        runner.forced_config = None
    for t in out:
        np.testing.assert_array_equal(np.asarray(t).astype(np.float64), 1.0 + 2 * half_ulp)

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

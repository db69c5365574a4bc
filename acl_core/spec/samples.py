"""Value generators for conformance cases: random data per dtype, special values, standard shapes."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from acl_core.dtypes import DataType as D


def array(
    rng: np.random.Generator,
    shape: Sequence[int],
    dtype: D,
    *,
    low: float = -4.0,
    high: float = 4.0,
    special: bool = False,
) -> np.ndarray:
    """Random values of ``dtype`` in [low, high); ``special`` mixes in NaN, ±Inf, ±0 and extremes."""
    shape = tuple(shape)
    np_dtype = dtype.numpy
    assert np_dtype is not None, dtype
    if dtype == D.ACL_BOOL:
        return rng.random(shape) < 0.5
    if dtype.is_integer:
        info = np.iinfo(np_dtype)
        lo, hi = max(int(low), info.min), min(int(high), info.max)
        if hi <= lo:
            hi = lo + 1
        values = rng.integers(lo, hi, size=shape, endpoint=True).astype(np_dtype)
        if special and values.size >= 2:
            flat = values.reshape(-1)
            flat[0], flat[-1] = info.max, info.min
        return values
    if dtype.is_complex:
        real = rng.uniform(low, high, size=shape) + 1j * rng.uniform(low, high, size=shape)
        return real.astype(np_dtype)
    values = rng.uniform(low, high, size=shape).astype(np_dtype)
    if special and values.size:
        specials = special_values(dtype)
        flat = values.reshape(-1)
        n = min(len(specials), flat.size)
        flat[:n] = specials[:n]
    return values


def special_values(dtype: D, *, subnormal: bool = False) -> np.ndarray:
    """NaN, ±Inf, ±0, the largest finite and the smallest normal value of a float dtype; with
    ``subnormal`` also the smallest and a mid-range subnormal (both signs), values near overflow and 1."""
    np_dtype = dtype.numpy
    assert np_dtype is not None
    info = np.finfo(np_dtype)
    vals = [np.nan, np.inf, -np.inf, 0.0, -0.0, float(info.max), -float(info.max), float(info.tiny)]
    if subnormal:
        smallest = float(info.smallest_subnormal)
        tiny, big = float(info.tiny), float(info.max)
        vals += [smallest, -smallest, tiny / 3, -tiny / 7, big / 2, -big * 0.75, 1.0, -float(info.eps)]
    with np.errstate(all="ignore"):
        return np.array(vals, dtype=np.float64).astype(np_dtype)


def integer_extremes(dtype: D) -> np.ndarray:
    """The extremes of an integer dtype and their neighbours, so that sums, differences and products overflow."""
    np_dtype = dtype.numpy
    assert np_dtype is not None
    info = np.iinfo(np_dtype)
    vals = [info.min, info.max, info.min + 1, info.max - 1, info.max // 2 + 1, info.min // 2]
    return np.array(vals, dtype=object).astype(np_dtype)


def positive(
    rng: np.random.Generator, shape: Sequence[int], dtype: D, low: float = 0.1, high: float = 4.0
) -> np.ndarray:
    """Random strictly positive values (for log, sqrt, division...)."""
    return array(rng, shape, dtype, low=low, high=high)


ELEMENTWISE_SHAPES: tuple[tuple[int, ...], ...] = ((), (0,), (7,), (2, 3, 4), (65, 33))
"""Shapes every elementwise case is tried at: 0-d, empty, 1-d, 3-d, and one not a multiple of anything."""

BROADCAST_PAIRS: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...] = (
    ((2, 3, 4), (2, 3, 4)),
    ((4, 1, 3), (1, 5, 3)),
    ((3, 4), (4,)),
    ((2, 3), ()),
    ((0, 3), (1, 3)),
)
"""Shape pairs that broadcast, empty and 0-d included."""

# Size tiers (acl_conformance.derived grows each operator's own samples to these). Where each boundary
# comes from, in the rocm backend (backends/rocm):
#   elementwise (kernels/elementwise.py): BLOCK_THREADS 256, UNROLL 4 (1024 elements a block trip),
#     VECTOR_BYTES 16 x VECTOR_UNROLL 2 (2048 float32 a block trip on the vector path), and the grid
#     capped at compute_units x blocks_per_unit 32 (launch.py), so past 132 x 32 x 1024 = 4,325,376
#     elements (an H200) the grid-stride loop takes a second trip;
#   rows (kernels/reduction.py, ops/reduction.py): BLOCK_THREADS 256, warps of 32 or 64, the
#     register-cached path up to CACHE_BLOCK 512 threads x 32 accumulators = 16,384 float32 a row,
#     rows spread over at most 8 blocks per unit (so 4,099 rows wrap the row loop); sort
#     (kernels/sort.py) sorts TILE 2048 keys per block, then merges;
#   GEMM (kernels/grouped_matmul.py): TILE_M 64 x TILE_N 64 tiles over TILE_K 16 slices; hipBLASLt /
#     cuBLAS choose their own tiles (64, 128 and 256 wide), so M/N/K straddle 16, 64, 128 and 256.
ELEMENTWISE_TIERS: tuple[int, ...] = (
    1, 31, 32, 33, 255, 256, 257, 1023, 1024, 1025, 2047, 2049, 4097, 65537, 1_048_577, 4_325_377,
)  # fmt: skip
"""Flat sizes each elementwise op runs at (full mode): odd sizes beside the block, vector and grid sizes."""
ELEMENTWISE_QUICK: frozenset[int] = frozenset({257, 65537})
"""The elementwise tiers quick mode keeps."""
ROW_TIERS: tuple[int, ...] = (1, 31, 33, 255, 257, 1024, 1025, 2049, 4097, 8193, 16385)
"""Row lengths of row-wise ops (full mode): one lane, a warp ±1, a block ±1, the sort tile, the cached path's end."""
ROW_QUICK: frozenset[int] = frozenset({33, 1025, 4097})
"""The row tiers quick mode keeps."""
MANY_ROWS = 4099
"""Rows of the many-rows tier: more rows than a grid's blocks (full mode)."""
GEMM_TIERS: tuple[tuple[int, int, int], ...] = (
    (17, 1025, 129),
    (1, 4096, 17),
    (64, 257, 2048),
    (129, 2048, 127),
    (128, 4096, 256),
    (1024, 1024, 1024),
)
"""(M, K, N) of the GEMM tiers (full mode): K and N in the thousands, odd sizes beside tile multiples."""
GEMM_QUICK: frozenset[tuple[int, int, int]] = frozenset({(17, 1025, 129)})
"""The GEMM tiers quick mode keeps."""

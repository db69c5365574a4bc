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


def special_values(dtype: D) -> np.ndarray:
    """NaN, ±Inf, ±0, the largest finite and the smallest normal value of a float dtype."""
    np_dtype = dtype.numpy
    assert np_dtype is not None
    info = np.finfo(np_dtype)
    vals = [np.nan, np.inf, -np.inf, 0.0, -0.0, float(info.max), -float(info.max), float(info.tiny)]
    return np.array(vals, dtype=np.float64).astype(np_dtype)


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

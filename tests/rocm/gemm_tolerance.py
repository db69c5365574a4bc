"""Tolerances for a product sum on the GPU against the reference, from what can honestly differ.

A float32 result differs by the order of its float32 additions: an error growing as sqrt(k). A float16 or
bfloat16 result is the float32 sum rounded once (or twice, where a bias is added after the product):
within 4 units of its own rounding, or 8 of the result's root mean square where the value is small. The
bound is not scaled by k: accumulating in the 16-bit type (a real bug) costs about sqrt(k) of its units.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

UNIT = {np.dtype(np.float16): 2.0**-11, np.dtype(ml_dtypes.bfloat16): 2.0**-8}
"""Unit roundoff of the 16-bit float types."""


def gemm_tolerance(expected: np.ndarray, k: int) -> tuple[float, float]:
    """(atol, rtol) for a ``k``-term product sum whose reference result is ``expected``."""
    unit = UNIT.get(np.dtype(expected.dtype))
    if unit is None:
        scale = 2e-5 * float(np.sqrt(k))
        return scale, scale
    rms = float(np.sqrt(np.mean(np.square(expected.astype(np.float64))))) if expected.size else 0.0
    return 8 * unit * rms, 4 * unit

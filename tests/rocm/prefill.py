"""Output arguments pre-filled with a sentinel, so a GPU run that writes nothing cannot pass on stale memory.

``eager.run`` allocates the outputs it is not given uninitialised, and cudaMalloc often hands back the
block just freed with its bytes intact: when a test runs the same operator twice (another input layout,
another path, the next parametrisation) the second run's outputs may already hold the first run's
results, and a kernel that wrote nothing would pass. Outputs built here are contiguous, like the ones
``eager.run`` allocates, so the path under test is the same; ``guard=True`` would fill them too but
makes them strided, which changes the paths some operators take (vector loads, cuBLASLt, cuDNN).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from acl_core.spec.ops import get_spec
from acl_core.spec.opspec import Role


def filled(like: np.ndarray) -> np.ndarray:
    """An array shaped and typed like ``like``: NaN for floating types, the type's minimum for integers."""
    dtype = np.dtype(like.dtype)
    if dtype.kind in "iu":
        return np.full(like.shape, np.iinfo(dtype).min, dtype)
    if dtype.kind == "b":
        return np.zeros(like.shape, dtype) if like.all() else np.ones(like.shape, dtype)
    value = np.full(like.shape, np.nan, np.float32).astype(dtype)
    assert np.isnan(value.astype(np.float64)).all(), f"{dtype} has no NaN to fill with"
    return value


def sentinel_outputs(op: str, args: Mapping[str, Any], expected: Mapping[str, Any]) -> dict[str, Any]:
    """``op``'s pure outputs that ``args`` does not give, filled (see :func:`filled`) in ``expected``'s shapes."""
    outs: dict[str, Any] = {}
    spec = get_spec(op)
    for p in spec.params:
        if p.role is not Role.OUT or args.get(p.name) is not None or p.name not in expected:
            continue
        if p.name in spec.writeback:  # allocated at its maximal size, which ``expected`` (written back) is not
            continue
        want = expected[p.name]
        outs[p.name] = [filled(w) for w in want] if isinstance(want, list) else filled(want)
    return outs

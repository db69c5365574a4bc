"""Reference kernels of the padding family: one index array per padded dim.

The forward op takes, dim after dim, the input positions every output position reads
(:func:`acl_core.spec.ops.padding.source_positions`); the backward op adds ``gradOutput`` back through the
same index arrays, dim after dim (the mapping is a product of per-dim mappings), in float64, rounding once.
"""

from __future__ import annotations

import numpy as np

from acl_core.spec.ops.padding import BY_NAME, PadGeometry, source_positions
from acl_reference.call import RefCall
from acl_reference.kernels import kernel

_FORWARD = sorted(name for name, (_, backward) in BY_NAME.items() if not backward)
_BACKWARD = sorted(name for name, (_, backward) in BY_NAME.items() if backward)


def _positions(geo: PadGeometry) -> list[tuple[int, np.ndarray]]:
    """(axis offset from the first padded dim, the source position of every output position) per padded dim."""
    return [(d, source_positions(geo.mode, *dims)) for d, dims in enumerate(zip(geo.lengths, geo.before, geo.after))]


@kernel(*_FORWARD)
def pad(k: RefCall) -> None:
    """Every output element is the input element its position maps to (mirrored, clamped or wrapped)."""
    geo: PadGeometry = k.plan["pad_geometry"]
    x = k.read("self")
    first = x.ndim - geo.spatial
    for d, src in _positions(geo):
        x = np.take(x, src, axis=first + d)
    k.write("out", x)


@kernel(*_BACKWARD)
def pad_backward(k: RefCall) -> None:
    """Every input element sums the gradients of the output positions that read it."""
    geo: PadGeometry = k.plan["pad_geometry"]
    g = k.read("gradOutput", np.float64)
    first = g.ndim - geo.spatial
    for d, src in _positions(geo):
        moved = np.moveaxis(g, first + d, 0)
        summed = np.zeros((geo.lengths[d], *moved.shape[1:]), np.float64)
        np.add.at(summed, src, moved)
        g = np.moveaxis(summed, 0, first + d)
    k.write("gradInput", g)

"""What a kernel needs of a view besides its strides: where it starts, how far it reaches, the index type
covering that, and (for the grid-stride kernels of kernels.grid_stride) an ``[N, C, spatial...]`` view's plane fields.
"""

from __future__ import annotations

import math

from acl_core.tensor import AclTensor
from acl_rocm.views import INT32_LIMIT


def address(t: AclTensor) -> int:
    """The byte address of a view's first element."""
    return t.data + t.offset * (t.dtype.info.storage_bits // 8)


def reach(t: AclTensor) -> int:
    """The largest element offset a view reaches from its first element."""
    return sum((d - 1) * abs(s) for d, s in zip(t.view_dims, t.strides) if d > 0)


def index_type(*extents: int) -> str:
    """``int`` where every extent (element counts, reaches, products) fits with room to spare, else ``long long``."""
    return "int" if max(extents, default=0) <= INT32_LIMIT // 2 else "long long"


def lead_strides(t: AclTensor, spatial: int) -> tuple[int, int]:
    """(N stride, C stride) of an ``[N, C, spatial...]`` view; an unbatched view's N stride is 0."""
    lead = t.strides[: len(t.view_dims) - spatial]
    return (lead[0], lead[1]) if len(lead) == 2 else (0, lead[0])


def plane_meta(read: AclTensor, written: AclTensor, spatial: int, channels: int) -> list[int]:
    """The Meta fields ``n``, ``P``, ``CH``, ``XS_N``, ``XS_C``, ``OS_N``, ``OS_C``: one thread per written element."""
    count, per_plane = math.prod(written.view_dims), math.prod(written.view_dims[-spatial:])
    return [count, per_plane, channels, *lead_strides(read, spatial), *lead_strides(written, spatial)]

"""Strided views as kernels see them: broadcast strides, merged dimensions, and the index type.

An elementwise kernel walks the output's elements in row-major order and finds each operand's
element through one stride vector per operand (in elements; 0 on broadcast dimensions). Adjacent
dimensions that every operand traverses contiguously are merged and size-1 dimensions dropped, so a
contiguous call becomes rank 1 and a padded or transposed one keeps only the dimensions it needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

INT32_LIMIT = 2**31 - 1


def broadcast_strides(shape: Sequence[int], strides: Sequence[int], out_shape: Sequence[int]) -> tuple[int, ...]:
    """``strides`` of a view of ``shape`` aligned to ``out_shape`` (broadcast dimensions get stride 0).

    Extra leading dimensions of the view must have size 1 (a one-element value may have any rank).
    """
    shape, strides = list(shape), list(strides)
    while len(shape) > len(out_shape):
        if shape[0] != 1:
            raise ValueError(f"shape {shape} does not broadcast to {list(out_shape)}")
        shape.pop(0)
        strides.pop(0)
    pad = len(out_shape) - len(shape)
    result = [0] * pad
    for d, (size, stride) in enumerate(zip(shape, strides)):
        target = out_shape[pad + d]
        if size == target:
            result.append(stride if size != 1 else 0)
        elif size == 1:
            result.append(0)
        else:
            raise ValueError(f"shape {shape} does not broadcast to {list(out_shape)}")
    return tuple(result)


@dataclass(frozen=True)
class Geometry:
    """A coalesced iteration space: shape and one stride vector per operand (at least rank 1)."""

    shape: tuple[int, ...]
    strides: tuple[tuple[int, ...], ...]

    @property
    def numel(self) -> int:
        """Elements visited."""
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def ndim(self) -> int:
        """Rank after coalescing (at least 1)."""
        return len(self.shape)

    def max_offset(self, operand: int) -> int:
        """Largest |element offset| operand ``operand`` reaches."""
        return sum((s - 1) * abs(st) for s, st in zip(self.shape, self.strides[operand]))

    def stride_class(self, operand: int) -> str:
        """``unit``, ``zero`` or ``any``: how a rank-1 operand advances."""
        if self.ndim != 1:
            return "any"
        stride = self.strides[operand][0]
        return "unit" if stride == 1 else "zero" if stride == 0 else "any"


def coalesce(shape: Sequence[int], strides: Sequence[Sequence[int]]) -> Geometry:
    """Drop size-1 dimensions and merge dimensions every operand walks contiguously."""
    dims = [d for d, s in enumerate(shape) if s != 1]
    new_shape: list[int] = []
    new_strides: list[list[int]] = [[] for _ in strides]
    for d in dims:
        if new_shape and all(new_strides[k][-1] == st[d] * shape[d] for k, st in enumerate(strides)):
            new_shape[-1] *= shape[d]
            for k, st in enumerate(strides):
                new_strides[k][-1] = st[d]
            continue
        new_shape.append(shape[d])
        for k, st in enumerate(strides):
            new_strides[k].append(st[d])
    if not new_shape:
        new_shape = [1]
        new_strides = [[0] for _ in strides]
    return Geometry(tuple(new_shape), tuple(tuple(s) for s in new_strides))


def index_type(geometry: Geometry, threads: int) -> str:
    """``int`` when every index and offset fits in 32 bits (with ``threads`` of slack), else ``long long``."""
    reach = max((geometry.max_offset(k) for k in range(len(geometry.strides))), default=0)
    if geometry.numel + threads <= INT32_LIMIT and reach <= INT32_LIMIT:
        return "int"
    return "long long"


def offsets(geometry: Geometry, operand: int) -> list[int]:
    """Element offsets of operand ``operand`` in visiting order (a host model of the kernel's index math)."""
    result = []
    for i in range(geometry.numel):
        rest, off = i, 0
        for d in range(geometry.ndim - 1, -1, -1):
            c = rest % geometry.shape[d] if d > 0 else rest
            rest //= geometry.shape[d]
            off += c * geometry.strides[operand][d]
        result.append(off)
    return result

"""Launch configurations and kernel argument packing, shared by every kernel and both platforms."""

from __future__ import annotations

import ctypes
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from acl_core.backend import Launch
from acl_core.tensor import AclTensor

GRID_LIMIT = 2**31 - 1
DEFAULT_DYNAMIC_SHARED = 48 * 1024
"""Shared memory (static plus dynamic) a block of any kernel may use without opting in (NVIDIA's default)."""


def longs(*values: int) -> list[ctypes.c_longlong]:
    """Kernel arguments of C type ``long long``."""
    return [ctypes.c_longlong(int(v)) for v in values]


def launch_tensor(launch: Launch, name: str) -> AclTensor:
    """The tensor argument ``name`` of a launch (one the spec makes non-null)."""
    t = launch.args[name]
    assert isinstance(t, AclTensor), name
    return t


@dataclass(frozen=True)
class LaunchConfig:
    """Grid and block dimensions, dynamic shared memory."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int = 0

    @property
    def threads(self) -> int:
        """Threads launched in all."""
        return math.prod(self.grid) * math.prod(self.block)


def elementwise_config(
    numel: int,
    *,
    warp_size: int,
    compute_units: int,
    block: int = 256,
    per_thread: int = 1,
    max_threads_per_block: int = 1024,
    blocks_per_unit: int = 32,
    max_grid: int = GRID_LIMIT,
) -> LaunchConfig:
    """A grid-stride launch for ``numel`` elements: whole warps per block, enough blocks to fill the device.

    Each thread takes ``per_thread`` elements per trip; the grid is ``ceil(numel / (block * per_thread))``
    capped at ``compute_units * blocks_per_unit`` (threads then loop). ``numel`` must be positive
    (empty tensors launch nothing).
    """
    if numel <= 0:
        raise ValueError("an empty elementwise op launches nothing")
    if warp_size <= 0 or block % warp_size or block > max_threads_per_block:
        raise ValueError(
            f"block {block} must be a multiple of the warp size {warp_size} and <= {max_threads_per_block}"
        )
    if per_thread < 1:
        raise ValueError(f"per_thread must be positive, not {per_thread}")
    blocks = min(-(-numel // (block * per_thread)), max(compute_units, 1) * blocks_per_unit, max_grid)
    return LaunchConfig((max(blocks, 1), 1, 1), (block, 1, 1))


class KernelArgs:
    """Kernel arguments packed as a ``void*[]`` of argument addresses (the cuLaunchKernel / hipModuleLaunchKernel form).

    Keeps every ctypes value alive for as long as the object lives.
    """

    def __init__(self, values: Sequence[Any]) -> None:
        self._values = list(values)
        self._pointers = (ctypes.c_void_p * max(len(self._values), 1))(*[ctypes.addressof(v) for v in self._values])

    @property
    def address(self) -> int:
        """The address of the ``void*[]``."""
        return ctypes.addressof(self._pointers)

    def __len__(self) -> int:
        return len(self._values)

    @staticmethod
    def pointer(address: int) -> ctypes.c_void_p:
        """A device pointer argument."""
        return ctypes.c_void_p(address)

    @staticmethod
    def index_array(values: Sequence[int], index_type: str) -> ctypes.Array[Any]:
        """A struct of same-typed index fields (the kernel's ``Meta``) as a ctypes array."""
        kind = ctypes.c_int32 if index_type == "int" else ctypes.c_int64
        return (kind * len(values))(*values)

"""Launch geometry: broadcast strides, dimension merging, index types, launch configurations, argument packing."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from acl_rocm.launch import KernelArgs, elementwise_config
from acl_rocm.views import Geometry, broadcast_strides, coalesce, index_type, offsets


def test_broadcast_strides() -> None:
    assert broadcast_strides((3, 4), (4, 1), (2, 3, 4)) == (0, 4, 1)
    assert broadcast_strides((4,), (1,), (3, 4)) == (0, 1)
    assert broadcast_strides((3, 1), (1, 1), (3, 5)) == (1, 0)
    assert broadcast_strides((), (), (2, 2)) == (0, 0)
    assert broadcast_strides((1, 1, 1), (1, 1, 1), (5,)) == (0,)
    with pytest.raises(ValueError):
        broadcast_strides((3,), (1,), (4,))
    with pytest.raises(ValueError):
        broadcast_strides((2, 5), (5, 1), (5,))


def test_contiguous_operands_collapse_to_rank_one() -> None:
    g = coalesce((2, 3, 4), [(12, 4, 1), (12, 4, 1), (0, 0, 0)])
    assert g.shape == (24,) and g.strides == ((1,), (1,), (0,))
    assert g.stride_class(0) == "unit" and g.stride_class(2) == "zero"


def test_transposed_and_broadcast_operands_keep_what_they_need() -> None:
    g = coalesce((4, 5), [(1, 4), (5, 1)])
    assert g.shape == (4, 5) and g.strides == ((1, 4), (5, 1))
    assert g.stride_class(0) == "any"
    g = coalesce((2, 1, 3), [(3, 3, 1), (0, 0, 1)])
    assert g.shape == (2, 3) and g.strides == ((3, 1), (0, 1))
    assert coalesce((), []).shape == (1,)
    assert coalesce((1, 1), [(5, 7)]).strides == ((0,),)


@pytest.mark.parametrize("seed", range(25))
def test_merging_preserves_every_element_offset(seed: int) -> None:
    rng = np.random.default_rng(seed)
    rank = int(rng.integers(1, 6))
    shape = tuple(int(s) for s in rng.integers(1, 5, rank))
    operands = []
    for _ in range(3):
        base = np.arange(int(np.prod(shape)) * 4).reshape(*shape, 4)[..., 0] if rng.random() < 0.5 else None
        if base is not None:
            strides = tuple(s // base.itemsize for s in base.strides)
        else:
            strides = tuple(int(s) * int(rng.integers(0, 2)) for s in np.cumprod((1, *shape[:0:-1]))[::-1])
        operands.append(strides)
    plain = Geometry(shape, tuple(operands))
    merged = coalesce(shape, operands)
    assert merged.ndim <= max(rank, 1)
    for k in range(len(operands)):
        assert offsets(merged, k) == offsets(plain, k)


def test_offsets_model_matches_numpy_strides() -> None:
    a = np.arange(60).reshape(3, 4, 5).transpose(2, 0, 1)[::2]
    strides = tuple(s // a.itemsize for s in a.strides)
    g = coalesce(a.shape, [strides])
    assert [int(np.arange(60)[o]) for o in offsets(g, 0)] == a.reshape(-1).tolist()


def test_index_type_switches_to_64_bit_when_needed() -> None:
    assert index_type(coalesce((1000,), [(1,)]), 1 << 20) == "int"
    assert index_type(coalesce((1 << 31,), [(1,)]), 256) == "long long"
    assert index_type(coalesce((3, 1 << 29), [(1 << 30, 1)]), 256) == "long long"
    assert index_type(coalesce((1 << 30,), [(1,)]), 1 << 30) == "long long"


def test_elementwise_config() -> None:
    c = elementwise_config(1000, warp_size=32, compute_units=132)
    assert c.block == (256, 1, 1) and c.grid == (4, 1, 1) and c.shared_bytes == 0
    c = elementwise_config(1 << 30, warp_size=64, compute_units=304, per_thread=4)
    assert c.grid == (304 * 32, 1, 1) and c.block[0] % 64 == 0
    assert elementwise_config(1, warp_size=32, compute_units=1).grid == (1, 1, 1)
    assert elementwise_config(1 << 30, warp_size=32, compute_units=10**9, max_grid=65535).grid[0] == 65535
    with pytest.raises(ValueError):
        elementwise_config(0, warp_size=32, compute_units=1)
    with pytest.raises(ValueError):
        elementwise_config(10, warp_size=64, compute_units=1, block=96)
    with pytest.raises(ValueError):
        elementwise_config(10, warp_size=32, compute_units=1, block=2048)


def test_kernel_args_are_a_void_pointer_array_of_argument_addresses() -> None:
    meta = KernelArgs.index_array([5, 2, 3], "int")
    ptr = KernelArgs.pointer(0xDEAD0000)
    alpha = ctypes.c_float(2.5)
    args = KernelArgs([meta, ptr, alpha])
    table = (ctypes.c_void_p * 3).from_address(args.address)
    assert [table[i] for i in range(3)] == [ctypes.addressof(meta), ctypes.addressof(ptr), ctypes.addressof(alpha)]
    assert list((ctypes.c_int32 * 3).from_address(table[0])) == [5, 2, 3]
    assert ctypes.c_void_p.from_address(table[1]).value == 0xDEAD0000
    assert ctypes.c_float.from_address(table[2]).value == 2.5
    assert ctypes.sizeof(KernelArgs.index_array([1, 2], "long long")) == 16 and len(args) == 3

"""Pooling on the GPU against the reference, under each op's accuracy class (max pools exact, averages a reduction).

Every sample in three layouts, every claimed dtype at ResNet-like and tile-crossing shapes, the max pools'
backward fed by rocm's own forward indices, and the backward ops run twice bit for bit (a gather, no atomics).
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.spec.ops.pooling import BY_NAME, GLOBAL
from tests.rocm.against_reference import (
    assert_errors_match_reference,
    assert_every_sample_matches,
    assert_matches_reference,
)

pytestmark = pytest.mark.gpu
DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16]
COLUMNS = ("note", "spatial", "shape", "kernel", "stride", "pad", "ceil")
SHAPES = [
    # (note, spatial rank, self shape, kernel, stride, padding, ceilMode)
    ("resnet stem pool", 2, (8, 64, 56, 56), [3], [2], [1], False),
    ("tile-crossing odd plane, ceilMode", 2, (3, 37, 33, 29), [3, 2], [2, 2], [1, 1], True),
    ("unbatched wide", 2, (96, 65, 127), [2], [], [0], False),
    ("3-D video", 3, (2, 16, 8, 28, 28), [3, 3, 3], [1, 2, 2], [1, 1, 1], False),
    ("3-D ceilMode", 3, (1, 24, 9, 17, 15), [2], [2], [1], True),
]


@pytest.mark.parametrize("op", [*sorted(BY_NAME), *sorted(GLOBAL), "MaxPool"])
def test_samples_and_errors_match_reference(rocm: Backend, reference: Backend, op: str) -> None:
    assert_every_sample_matches(rocm, reference, op)
    assert_errors_match_reference(rocm, reference, op)


def _attrs(op: str, kernel: list[int], stride: list[int], pad: list[int], ceil: bool) -> dict[str, Any]:
    pool, backward = BY_NAME[op]
    names = ("stride", "padding") if backward else (pool.stride, pool.padding)
    args: dict[str, Any] = {"kernelSize": kernel, names[0]: stride, names[1]: pad, "ceilMode": ceil}
    if pool.kind == "avg":
        args.update(countIncludePad=ceil, divisorOverride=0)
    else:
        args["dilation"] = [1]
    if pool.cube:
        args["cubeMathType"] = 0
    return args


def _ops(spatial: int, kind: str, adaptive: bool = False) -> tuple[str, str]:
    pool = next(p for p, _ in BY_NAME.values() if (p.spatial, p.kind, p.adaptive) == (spatial, kind, adaptive))
    return pool.name, pool.backward


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float16", "bfloat16"])
@pytest.mark.parametrize(
    ("note", "spatial", "shape", "kernel", "stride", "pad", "ceil"), SHAPES, ids=[s[0] for s in SHAPES]
)
@pytest.mark.parametrize("kind", ["avg", "max"])
def test_realistic_shapes(
    rocm: Backend, reference: Backend, kind: str, note: str, spatial: int, shape, kernel, stride, pad, ceil, dtype
) -> None:
    forward, backward = _ops(spatial, kind)
    rng = np.random.default_rng(17)
    x = rng.uniform(-3, 3, shape).astype(dtype)
    fwd_args = {"self": x, **_attrs(forward, kernel, stride, pad, ceil)}
    if kind == "max":
        fwd_args["indices"] = np.zeros(eager.run(forward, reference, **fwd_args)["indices"].shape, np.int64)
    assert_matches_reference(rocm, reference, forward, fwd_args, "contiguous", note)
    _backward(rocm, reference, forward, backward, fwd_args, _attrs(backward, kernel, stride, pad, ceil), note)


def _backward(
    rocm: Backend, reference: Backend, forward: str, backward: str, fwd_args: dict, attrs: dict, note: str
) -> None:
    """The backward op fed by rocm's forward (its indices too) matches the reference and repeats bit for bit."""
    pool, _ = BY_NAME[forward]
    x = fwd_args["self"]
    result = eager.run(forward, rocm, **fwd_args)
    grad = np.random.default_rng(9).uniform(-2, 2, result[pool.forward_out].shape).astype(x.dtype)
    bwd_args: dict[str, Any] = {"gradOutput": grad, "self": x, **attrs}
    if pool.kind == "max":
        bwd_args["indices"] = result[pool.indices_out]  # rocm's own choice of maxima
    assert_matches_reference(rocm, reference, backward, bwd_args, "contiguous", note)
    first = eager.run(backward, rocm, **bwd_args)
    second = eager.run(backward, rocm, **bwd_args)
    for name, value in first.items():
        np.testing.assert_array_equal(value.view(np.uint8), second[name].view(np.uint8), err_msg=f"{note}: {name}")


ADAPTIVE = [
    # (note, spatial rank, self shape, outputSize)
    ("resnet head to 1x1", 2, (32, 512, 7, 7), [1, 1]),
    ("odd plane to 7x7, overlapping", 2, (4, 33, 17, 23), [7, 7]),
    ("upsampling 5x6 to 9x11", 2, (3, 40, 5, 6), [9, 11]),
    ("3-D to 2x3x4", 3, (2, 16, 9, 14, 15), [2, 3, 4]),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float16", "bfloat16"])
@pytest.mark.parametrize(("note", "spatial", "shape", "size"), ADAPTIVE, ids=[a[0] for a in ADAPTIVE])
@pytest.mark.parametrize("kind", ["avg", "max"])
def test_adaptive_shapes(
    rocm: Backend, reference: Backend, kind: str, note: str, spatial: int, shape: tuple[int, ...], size, dtype
) -> None:
    forward, backward = _ops(spatial, kind, adaptive=True)
    pool, _ = BY_NAME[forward]
    x = np.random.default_rng(23).uniform(-3, 3, shape).astype(dtype)
    fwd_args: dict[str, Any] = {"self": x, "outputSize": size}
    if kind == "max":
        fwd_args[pool.indices_out] = np.zeros((*shape[:-spatial], *size), np.int64)
    assert_matches_reference(rocm, reference, forward, fwd_args, "contiguous", note)
    _backward(rocm, reference, forward, backward, fwd_args, {}, note)


GLOBAL_SHAPES = [(32, 2048, 7, 7), (8, 64, 112, 112), (2, 16, 8, 28, 28), (3, 5, 2, 3, 4, 5)]


@pytest.mark.parametrize("shape", GLOBAL_SHAPES, ids=[str(list(s)) for s in GLOBAL_SHAPES])
@pytest.mark.parametrize("op", sorted(GLOBAL))
def test_global_pools_at_realistic_shapes(rocm: Backend, reference: Backend, op: str, shape: tuple[int, ...]) -> None:
    from acl_core.spec.ops import get_spec

    for p in get_spec(op).params[:1]:
        for dtype in sorted(p.dtypes or (), key=int):
            x = np.random.default_rng(31).uniform(-3, 3, shape).astype(dtype.numpy)
            assert_matches_reference(rocm, reference, op, {"self": x}, "contiguous", f"{dtype.short} {list(shape)}")


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "int32", "int64", "float16", "bfloat16", "float32"])
def test_onnx_max_pool_at_a_resnet_stem(rocm: Backend, reference: Backend, dtype: str) -> None:
    rng = np.random.default_rng(41)
    np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    if np.dtype(np_dtype).kind in "iu":
        info = np.iinfo(np_dtype)
        x = rng.integers(info.min, info.max, (8, 64, 112, 112), dtype=np_dtype, endpoint=True)
    else:
        x = rng.uniform(-3, 3, (8, 64, 112, 112)).astype(np_dtype)
    attrs = {"kernelShape": [3], "strides": [2], "autoPad": 0, "pads": [1, 1, 0, 0], "dilations": [1], "ceilMode": 1}
    assert_matches_reference(rocm, reference, "MaxPool", {"self": x, **attrs}, "contiguous", f"{dtype} stem")

"""StridedSlice, StridedSliceAssignV2, the RepeatInterleave family and EmbeddingDenseBackward on the GPU.

Against the reference under each op's accuracy class (exact for the copies, the reduction class for the two
backward ops): the spec's samples in three layouts, every claimed dtype, shapes that cross blocks and the scan's
256-count tiles, realistic embedding shapes (vocabulary 32000, hidden 1024, tokens that repeat), and the error
cases (device-only counts and indices through the flag). EmbeddingDenseBackward must also be deterministic: two
runs agree bit for bit. The opt-in RepeatRows path (``ACL_REPEAT_ROWS=rows``: the tiled scan, a source slice
copied once) runs the samples, errors, every dtype and the bench's [32768, 2048] rows; so do the opt-in chunked
scans (``blocks``, ``gather``, ``gather8``, ``,pdl``, ``,grid``), with zero counts around a huge one and 5 million
counts. ``ACL_ROCM_EMULATE=1`` runs it on the CPU (slow: the realistic shapes dominate).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.index_shape import EMBEDDING_INDEX
from acl_core.spec.rules import FLOATS
from acl_rocm.ops.index_shape import OPS
from tests.rocm.against_reference import (
    assert_errors_match_reference,
    assert_every_sample_matches,
    assert_matches_reference,
)
from tests.rocm.switched import switched

pytestmark = pytest.mark.gpu
NO_MASKS = {"beginMask": 0, "endMask": 0, "ellipsisMask": 0, "newAxisMask": 0, "shrinkAxisMask": 0}


def _claimed(rocm: Backend, op: str) -> list[D]:
    return sorted(rocm.capabilities().op_dtypes[op])


def _values(rng: np.random.Generator, shape: tuple[int, ...], dt: D) -> np.ndarray:
    np_dt = dt.numpy
    assert np_dt is not None
    if dt == D.ACL_BOOL:
        return rng.integers(0, 2, shape).astype(np.bool_)
    if dt.is_float:
        return rng.standard_normal(shape).astype(np.float32).astype(np_dt)
    return rng.integers(0, 100, shape).astype(np_dt)


@pytest.mark.parametrize("op", OPS)
def test_samples_match_the_reference(rocm: Backend, reference: Backend, op: str) -> None:
    assert_every_sample_matches(rocm, reference, op)


@pytest.mark.parametrize("op", OPS)
def test_errors_match_the_reference(rocm: Backend, reference: Backend, op: str) -> None:
    assert_errors_match_reference(rocm, reference, op)


def test_strided_slice_every_claimed_dtype(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(1)
    for dt in _claimed(rocm, "StridedSlice"):
        x = _values(rng, (64, 1000, 33), dt)
        args: dict[str, Any] = {"self": x, "begin": [60, -3, 1], "end": [-100, 5, 33], "strides": [-3, -7, 2]}
        assert_matches_reference(rocm, reference, "StridedSlice", {**args, **NO_MASKS}, "padded", f"{dt.short}")
        masks = {**NO_MASKS, "ellipsisMask": 1, "shrinkAxisMask": 2, "newAxisMask": 4}
        args = {"self": x, "begin": [0, 17, 0], "end": [0, 18, 0], "strides": [1, 1, 1]}
        assert_matches_reference(rocm, reference, "StridedSlice", {**args, **masks}, "contiguous", f"{dt.short} ...")


def test_strided_slice_assign_every_claimed_dtype(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(2)
    for dt in _claimed(rocm, "StridedSliceAssignV2"):
        var = _values(rng, (512, 777), dt)
        value = _values(rng, (170, 700), dt)  # rows 2, 5, ..., 509
        args = {"varRef": var, "inputValue": value, "begin": [-510, 77], "end": [1000, 777], "strides": [3, 1]}
        assert_matches_reference(rocm, reference, "StridedSliceAssignV2", args, "transposed", dt.short)


@pytest.mark.parametrize("op", ["RepeatInterleave", "RepeatInterleaveWithDim", "RepeatInterleaveInt"])
def test_repeats_every_claimed_dtype_across_scan_tiles(rocm: Backend, reference: Backend, op: str) -> None:
    rng = np.random.default_rng(3)
    for dt in _claimed(rocm, op):
        x = _values(rng, (3000, 17), dt)
        if op == "RepeatInterleaveInt":
            args: dict[str, Any] = {"self": x, "repeats": 3, "outputSize": 3 * x.size}
        elif op == "RepeatInterleave":
            reps = rng.integers(0, 4, (x.size,))
            args = {"self": x, "repeats": reps, "outputSize": int(reps.sum())}
        else:
            reps = rng.integers(0, 5, (3000,)).astype(np.int32)
            args = {"self": x, "repeats": reps, "dim": 0, "outputSize": int(reps.sum())}
        assert_matches_reference(rocm, reference, op, args, "padded", dt.short)
    x = _values(rng, (40, 3000, 2), D.ACL_BF16)
    args = {"self": x, "repeats": 2, "dim": 1, "outputSize": 6000}
    assert_matches_reference(rocm, reference, "RepeatInterleaveIntWithDim", args, "transposed", "bf16 dim 1")


def test_repeat_interleave_tensor_and_grad_at_size(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(4)
    for np_dt in (np.int32, np.int64):
        reps = rng.integers(0, 6, (100_003,)).astype(np_dt)
        args: dict[str, Any] = {"repeats": reps, "outputSize": int(reps.sum())}
        assert_matches_reference(rocm, reference, "RepeatInterleaveTensor", args, "contiguous", np.dtype(np_dt).name)
    for dt in sorted(FLOATS & set(_claimed(rocm, "RepeatInterleaveGrad"))):
        reps = rng.integers(0, 9, (1000,))
        y = _values(rng, (8, int(reps.sum()), 64), dt)
        args = {"yGrad": y, "repeats": reps, "axis": 1}
        assert_matches_reference(rocm, reference, "RepeatInterleaveGrad", args, "padded", dt.short)


@pytest.mark.parametrize("scale", [False, True])
def test_embedding_backward_realistic_shapes(rocm: Backend, reference: Backend, scale: bool) -> None:
    rng = np.random.default_rng(5)
    for dt in sorted(FLOATS & set(_claimed(rocm, "EmbeddingDenseBackward"))):
        tokens = rng.integers(0, 32000, (4, 1024)).astype(np.int64)
        tokens[:, :100] = 7  # a hot token: a long run in one row
        grad = _values(rng, (4, 1024, 1024), dt)
        args = {"grad": grad, "indices": tokens, "numWeights": 32000, "paddingIdx": 0, "scaleGradByFreq": scale}
        assert_matches_reference(rocm, reference, "EmbeddingDenseBackward", args, "contiguous", dt.short)


def test_embedding_backward_every_index_dtype_and_determinism(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(6)
    grad = _values(rng, (3000, 96), D.ACL_BF16)
    for dt in sorted(EMBEDDING_INDEX & set(_claimed(rocm, "EmbeddingDenseBackward"))):
        idx = rng.integers(0, 2 if dt == D.ACL_BOOL else 90, (3000,)).astype(dt.numpy)
        args = {"grad": grad, "indices": idx, "numWeights": 97, "paddingIdx": 2**64 - 1, "scaleGradByFreq": True}
        assert_matches_reference(rocm, reference, "EmbeddingDenseBackward", args, "padded", dt.short)
    idx = rng.integers(0, 3, (3000,))
    args = {"grad": grad, "indices": idx, "numWeights": 5, "paddingIdx": 4, "scaleGradByFreq": False}
    first = eager.run("EmbeddingDenseBackward", rocm, **args)["out"]
    again = eager.run("EmbeddingDenseBackward", rocm, **args)["out"]
    np.testing.assert_array_equal(first.view(np.uint16), again.view(np.uint16))


@pytest.mark.parametrize("op", ["RepeatInterleave", "RepeatInterleaveWithDim", "RepeatInterleaveTensor"])
def test_repeat_rows_samples_and_errors(rocm: Backend, reference: Backend, op: str) -> None:
    """``ACL_REPEAT_ROWS=rows`` (opt-in): the tiled scan and RepeatRows on the spec's samples and error cases."""
    with switched(rocm, "ACL_REPEAT_ROWS", "rows"):
        for sample in get_spec(op).samples(np.random.default_rng(2026)):  # type: ignore[misc]
            for layout in ("contiguous", "padded", "transposed", "offset"):
                assert_matches_reference(rocm, reference, op, dict(sample.args), layout, sample.note)
        assert_errors_match_reference(rocm, reference, op)


REPEAT_ROW_SHAPES = [
    ((32768, 2048), 0, "contiguous"),  # the bench's rows: 16-byte words, two 32-lane segments a row
    ((1000, 2047), 0, "offset"),  # odd rows, an unaligned start: item copies
    ((8, 300, 130), 1, "contiguous"),  # outer dims, 130-item slices: more than one 128-item segment
    ((8, 300, 136), 1, "transposed"),  # strided slices
    ((70000, 3), 0, "padded"),  # 3-item slices (1 lane), counts across many scan tiles
]


@pytest.mark.parametrize(("shape", "dim", "layout"), REPEAT_ROW_SHAPES)
def test_repeat_rows_at_size(rocm: Backend, reference: Backend, shape: tuple, dim: int, layout: str) -> None:
    rng = np.random.default_rng(shape[-1])
    x = _values(rng, shape, D.ACL_BF16)
    reps = rng.integers(0 if shape[0] < 32768 else 1, 4, shape[dim])
    args = {"self": x, "repeats": reps, "dim": dim, "outputSize": int(reps.sum())}
    with switched(rocm, "ACL_REPEAT_ROWS", "rows"):
        assert_matches_reference(rocm, reference, "RepeatInterleaveWithDim", args, layout, f"{shape} dim {dim}")


def test_repeat_rows_every_dtype_and_the_tiled_scan(rocm: Backend, reference: Backend) -> None:
    """Every claimed dtype (items of 1 to 8 bytes, 16-byte words), then the Tensor and Grad ops' tiled scans."""
    rng = np.random.default_rng(5)
    with switched(rocm, "ACL_REPEAT_ROWS", "rows"):
        for op in ("RepeatInterleave", "RepeatInterleaveWithDim"):
            for dt in _claimed(rocm, op):
                x = _values(rng, (3000, 17) if op == "RepeatInterleave" else (3000, 64), dt)
                if op == "RepeatInterleave":
                    reps = rng.integers(0, 4, (x.size,))
                    args: dict[str, Any] = {"self": x, "repeats": reps, "outputSize": int(reps.sum())}
                else:
                    reps = rng.integers(0, 5, (3000,)).astype(np.int32)
                    args = {"self": x, "repeats": reps, "dim": 0, "outputSize": int(reps.sum())}
                for layout in ("contiguous", "padded"):
                    assert_matches_reference(rocm, reference, op, args, layout, dt.short)
        reps = rng.integers(0, 6, (100_003,))
        args = {"repeats": reps, "outputSize": int(reps.sum())}
        assert_matches_reference(rocm, reference, "RepeatInterleaveTensor", args, "contiguous", "100003 counts")
        reps = rng.integers(0, 9, (1000,))
        y = _values(rng, (8, int(reps.sum()), 64), D.ACL_FLOAT)
        args = {"yGrad": y, "repeats": reps, "axis": 1}
        assert_matches_reference(rocm, reference, "RepeatInterleaveGrad", args, "padded", "float32")


CHUNKED = ("blocks", "gather", "gather8", "gather,pdl", "gather,grid", "gather8,pdl,grid")
"""``ACL_REPEAT_ROWS`` settings of the chunked scan (opt-in): with the source-major copy, or the row index and the
output-major copy (4 or 8 items a lane; programmatic launches; the copy's grid sized to its slices)."""


@pytest.mark.parametrize("variant", CHUNKED)
@pytest.mark.parametrize(
    "op", ["RepeatInterleave", "RepeatInterleaveWithDim", "RepeatInterleaveTensor", "RepeatInterleaveGrad"]
)
def test_chunked_samples_and_errors(rocm: Backend, reference: Backend, op: str, variant: str) -> None:
    """The chunked scan (and its row index) on the spec's samples and error cases, every layout."""
    with switched(rocm, "ACL_REPEAT_ROWS", variant):
        for sample in get_spec(op).samples(np.random.default_rng(2026)):  # type: ignore[misc]
            for layout in ("contiguous", "padded", "transposed", "offset"):
                assert_matches_reference(rocm, reference, op, dict(sample.args), layout, sample.note)
        assert_errors_match_reference(rocm, reference, op)


@pytest.mark.parametrize("variant", CHUNKED)
@pytest.mark.parametrize(("shape", "dim", "layout"), REPEAT_ROW_SHAPES)
def test_chunked_at_size(rocm: Backend, reference: Backend, shape: tuple, dim: int, layout: str, variant: str) -> None:
    rng = np.random.default_rng(shape[-1])
    x = _values(rng, shape, D.ACL_BF16)
    reps = rng.integers(0 if shape[0] < 32768 else 1, 4, shape[dim])
    args = {"self": x, "repeats": reps, "dim": dim, "outputSize": int(reps.sum())}
    with switched(rocm, "ACL_REPEAT_ROWS", variant):
        assert_matches_reference(rocm, reference, "RepeatInterleaveWithDim", args, layout, f"{shape} dim {dim}")


@pytest.mark.parametrize("variant", CHUNKED)
def test_chunked_zero_huge_and_many_counts(rocm: Backend, reference: Backend, variant: str) -> None:
    """Zero counts around one huge count (its row index filled by one thread), all-zero runs across chunk edges,
    and 5 million counts (more than 1,024 chunks of 4,096: longer chunks)."""
    rng = np.random.default_rng(8)
    x = _values(rng, (6, 256), D.ACL_BF16)
    reps = np.array([0, 100_000, 0, 1, 0, 5])
    args: dict[str, Any] = {"self": x, "repeats": reps, "dim": 0, "outputSize": int(reps.sum())}
    with switched(rocm, "ACL_REPEAT_ROWS", variant):
        assert_matches_reference(rocm, reference, "RepeatInterleaveWithDim", args, "contiguous", "huge count")
        reps = rng.integers(0, 3, 20_000)
        reps[4000:12300] = 0
        x = _values(rng, (20_000, 64), D.ACL_FLOAT16)
        args = {"self": x, "repeats": reps, "dim": 0, "outputSize": int(reps.sum())}
        assert_matches_reference(rocm, reference, "RepeatInterleaveWithDim", args, "padded", "zero runs")
        x = _values(rng, (5_000_000,), D.ACL_INT32)
        reps = rng.integers(0, 3, x.size)
        args = {"self": x, "repeats": reps, "outputSize": int(reps.sum())}
        assert_matches_reference(rocm, reference, "RepeatInterleave", args, "contiguous", "5M counts")
        args = {"repeats": reps, "outputSize": int(reps.sum())}
        assert_matches_reference(rocm, reference, "RepeatInterleaveTensor", args, "contiguous", "5M counts")

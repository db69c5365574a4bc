"""Padding on the GPU against the reference, under each op's accuracy class (forward exact, backward a reduction).

Every sample and error sample; every claimed dtype of every op at a realistic and a tile-crossing shape
(pads of up to L - 1, so mirrors overlap), forward and backward; the backward ops run twice bit for bit
(a gather, no atomics).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.spec.ops.padding import BY_NAME, PADS, Pad
from tests.rocm.against_reference import (
    assert_errors_match_reference,
    assert_every_sample_matches,
    assert_matches_reference,
)

pytestmark = pytest.mark.gpu
SHAPES: dict[int, list[tuple[str, tuple[int, ...], list[int]]]] = {
    # (note, self shape, padding); padding as torch orders it: the last dim first
    1: [("audio frames", (16, 256, 1000), [5, 7]), ("unbatched odd, pads of L - 1", (37, 9), [8, 8])],
    2: [("resnet-like 56x56 pad 3", (8, 64, 56, 56), [3, 3, 3, 3]), ("odd plane", (3, 37, 33, 29), [28, 1, 0, 32])],
    3: [("video", (2, 16, 8, 28, 28), [2, 2, 2, 2, 1, 1]), ("unbatched odd", (5, 7, 9, 11), [10, 3, 0, 8, 6, 1])],
}


def _array(rng: np.random.Generator, shape: tuple[int, ...], dtype: D) -> np.ndarray:
    if dtype == D.ACL_BOOL:
        return rng.integers(0, 2, shape).astype(np.bool_)
    if not dtype.is_float:
        info = np.iinfo(dtype.numpy)
        return rng.integers(info.min, info.max, shape, dtype=dtype.numpy, endpoint=True)
    return rng.uniform(-3, 3, shape).astype(dtype.numpy)


@pytest.mark.parametrize("op", sorted(BY_NAME))
def test_samples_and_errors_match_reference(rocm: Backend, reference: Backend, op: str) -> None:
    assert_every_sample_matches(rocm, reference, op)
    assert_errors_match_reference(rocm, reference, op)


@pytest.mark.parametrize("pad", PADS, ids=lambda p: p.name)
def test_every_dtype_at_realistic_shapes(rocm: Backend, reference: Backend, pad: Pad) -> None:
    rng = np.random.default_rng(17)
    for note, shape, padding in SHAPES[pad.spatial]:
        for dtype in sorted(pad.dtypes, key=int):
            x = _array(rng, shape, dtype)
            args: dict[str, Any] = {"self": x, "padding": padding}
            assert_matches_reference(rocm, reference, pad.name, args, "contiguous", f"{dtype.short} {note}")
            if dtype not in pad.backward_dtypes:
                continue
            out = eager.run(pad.name, rocm, **args)["out"]
            grad = rng.uniform(-2, 2, out.shape).astype(out.dtype)
            bwd: dict[str, Any] = {"gradOutput": grad, "self": x, "padding": padding}
            assert_matches_reference(rocm, reference, pad.backward, bwd, "contiguous", f"{dtype.short} {note}")
            first = eager.run(pad.backward, rocm, **bwd)["gradInput"]
            second = eager.run(pad.backward, rocm, **bwd)["gradInput"]
            np.testing.assert_array_equal(first.view(np.uint8), second.view(np.uint8), err_msg=note)

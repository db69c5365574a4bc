"""Nonzero, NonzeroV2 and MaskedSelect on the GPU against the reference (exact: the count, the order, every value).

Every sample and error sample; every claimed dtype at 16M positions, sparse (1%) and dense (60%) by turns, an
empty result and a full one; outputs given at their maximal size and pre-filled, so rows the kernels do not
write cannot pass. The count reaches out's view shape only at synchronisation (checked through the C-shaped
front end), and phase 2 copies nothing through the host.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.spec.ops.select import MASKED_DTYPES, NONZERO_DTYPES, TRANSPOSED, nonzero_shape, sparse
from tests.ops.select_writeback import nonzero_writeback
from tests.rocm.against_reference import assert_errors_match_reference, assert_every_sample_matches
from tests.rocm.prefill import filled

pytestmark = pytest.mark.gpu
SHAPE = (4096, 4096)
"""16M positions."""


def _check(rocm: Backend, reference: Backend, op: str, args: dict[str, Any], out: np.ndarray, note: str) -> None:
    want = eager.run(op, reference, **args)["out"]
    got = eager.run(op, rocm, **args, out=filled(out))["out"]
    assert got.dtype == want.dtype and got.shape == want.shape, f"{op} [{note}]: {got.shape} vs {want.shape}"
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8), err_msg=f"{op} [{note}]")


@pytest.fixture(scope="module")
def rng() -> Iterator[np.random.Generator]:
    yield np.random.default_rng(16)


@pytest.mark.parametrize("op", [*TRANSPOSED, "MaskedSelect"])
def test_samples_and_errors_match_reference(rocm: Backend, reference: Backend, op: str) -> None:
    assert_every_sample_matches(rocm, reference, op)
    assert_errors_match_reference(rocm, reference, op)


@pytest.mark.parametrize("op", list(TRANSPOSED))
def test_nonzero_every_dtype_at_16m(rocm: Backend, reference: Backend, rng: np.random.Generator, op: str) -> None:
    for i, dt in enumerate(sorted(NONZERO_DTYPES, key=int)):
        density = 0.01 if i % 2 else 0.6
        x = sparse(rng, SHAPE, dt, density)
        out = np.zeros(nonzero_shape(SHAPE, TRANSPOSED[op]), np.int64)
        _check(rocm, reference, op, {"self": x}, out, f"{dt.short} density {density}")


def test_nonzero_empty_full_strided_and_high_rank(rocm: Backend, reference: Backend, rng: np.random.Generator) -> None:
    cases = {
        "all zero": np.zeros(SHAPE, np.float32),
        "all non-zero": np.ones(SHAPE, np.float16),
        "strided": sparse(rng, (2048, 8192), D.ACL_FLOAT, 0.3)[:, ::2],
        "rank 8": sparse(rng, (2, 3, 4, 5, 6, 7, 8, 9), D.ACL_INT32, 0.5),
        "0-d": np.float32(2.0),
    }
    for note, x in cases.items():
        _check(rocm, reference, "Nonzero", {"self": x}, np.zeros(nonzero_shape(x.shape, False), np.int64), note)


def test_masked_select_every_dtype_at_16m(rocm: Backend, reference: Backend, rng: np.random.Generator) -> None:
    for i, dt in enumerate(sorted(MASKED_DTYPES, key=int)):
        x = sparse(rng, SHAPE, dt, 0.9)
        density = 0.01 if i % 2 else 0.6
        mask = rng.random(SHAPE if i % 3 else (SHAPE[0], 1)) < density
        if i % 4 == 1:
            mask = mask.astype(np.uint8)
        out = np.zeros(x.size, x.dtype)
        _check(rocm, reference, "MaskedSelect", {"self": x, "mask": mask}, out, f"{dt.short} density {density}")
    x = sparse(rng, SHAPE, D.ACL_BF16, 1.0)
    for note, mask in {"empty": np.zeros(SHAPE, bool), "full": np.ones((1, SHAPE[1]), bool)}.items():
        _check(rocm, reference, "MaskedSelect", {"self": x, "mask": mask}, np.zeros(x.size, x.dtype), note)


def test_count_is_written_back_at_synchronisation(rocm: Backend, rocm_under_test: str) -> None:
    x = sparse(np.random.default_rng(3), SHAPE, D.ACL_FLOAT, 0.05)
    before, after, rows = nonzero_writeback(rocm, x, rocm_under_test)
    want = np.argwhere(x)
    assert before == [x.size, 2] and after == [len(want), 2]
    np.testing.assert_array_equal(rows, want)

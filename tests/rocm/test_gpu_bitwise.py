"""The bitwise, shift, clamp-variant and Addcmul / Addcdiv ops on the GPU against the NumPy reference (GPU tier).

Every op of acl_core.spec.ops.bitwise and acl_core.spec.ops.pointwise_ternary (in-place twins included):
every spec sample under the op's accuracy class, contiguous, padded and transposed; every error sample
refused with the reference's code; and each claimed dtype at a large, tile-crossing shape (a broadcast
row against a [1031, 1029] tensor, so the strided path and the vector path's scalar tail both run).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.spec.ops import bitwise, get_spec, pointwise_ternary
from acl_core.spec.ops.pointwise_ternary import ADDC, CLAMPS
from tests.rocm.against_reference import (
    assert_errors_match_reference,
    assert_every_sample_matches,
    assert_matches_reference,
)

pytestmark = pytest.mark.gpu

OPS = sorted(s.name for s in (*bitwise.SPECS, *pointwise_ternary.SPECS))
SHAPE = (1031, 1029)


@pytest.mark.parametrize("op", OPS)
def test_every_sample_matches_the_reference(rocm: Backend, reference: Backend, op: str) -> None:
    assert_every_sample_matches(rocm, reference, op)


@pytest.mark.parametrize("op", [op for op in OPS if get_spec(op).error_samples is not None])
def test_errors_match_the_reference(rocm: Backend, reference: Backend, op: str) -> None:
    assert_errors_match_reference(rocm, reference, op)


def _values(rng: np.random.Generator, shape: tuple[int, ...], dt: D, *, count: bool = False) -> np.ndarray:
    if dt == D.ACL_BOOL:
        return rng.random(shape) < 0.5
    if dt.is_integer:
        info = np.iinfo(dt.numpy)
        if count:
            return rng.integers(max(info.min, -3), info.bits + 3, size=shape, endpoint=True).astype(dt.numpy)
        return rng.integers(info.min, info.max, size=shape, dtype=dt.numpy, endpoint=True)
    return rng.uniform(-8, 8, shape).astype(dt.numpy)


def _large_cases() -> list[tuple[str, D, dict[str, Any]]]:
    cases: list[tuple[str, D, dict[str, Any]]] = []
    rng = np.random.default_rng(7)
    for row in bitwise.ROWS:
        shift = row.operator in ("lshift", "rshift")
        for dt in sorted(row.dtypes):
            b: object = 3 if row.scalar else _values(rng, SHAPE[1:], dt, count=shift)
            cases.append((row.name, dt, {row.a: _values(rng, SHAPE, dt), row.b: b}))
    for dt in sorted(bitwise.NOT):
        cases.append(("BitwiseNot", dt, {"self": _values(rng, SHAPE, dt)}))
    for c in CLAMPS:
        for dt in sorted(pointwise_ternary.CLAMP_SELF):
            args: dict[str, Any] = {"self": _values(rng, SHAPE, dt)}
            for name, value in ((c.lower, 1 if dt == D.ACL_UINT8 else -2), (c.upper, 3)):
                if name:
                    args[name] = _values(rng, SHAPE[1:], dt) if c.tensors else value
            cases.append((c.name, dt, args))
    for op, dtypes in ADDC.items():
        for dt in sorted(dtypes):
            t2 = np.abs(_values(rng, SHAPE[1:], dt)) + (1 if dt.is_integer else 0.5)
            value = 0.25 if dt.is_float else 3
            args = {"self": _values(rng, SHAPE, dt), "tensor1": _values(rng, SHAPE, dt), "tensor2": t2, "value": value}
            cases.append((op, dt, args))
    return cases


LARGE = _large_cases()


@pytest.mark.parametrize(("op", "dtype", "args"), LARGE, ids=[f"{op}-{dt.short}" for op, dt, _ in LARGE])
def test_every_claimed_dtype_at_a_large_shape(
    rocm: Backend, reference: Backend, op: str, dtype: D, args: dict[str, Any]
) -> None:
    assert op in rocm.capabilities().ops and get_spec(op).params[0].dtypes
    for layout in ("contiguous", "transposed"):
        assert_matches_reference(rocm, reference, op, args, layout, f"{dtype.short} {list(SHAPE)}")

"""Shared fixtures: the reference backend, a fresh runtime state, tolerances for comparisons."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from acl_core.dtypes import DataType
from acl_core.spec import plan as plan_schema

plan_schema.CHECKING = True  # every validation in the tests checks its plan against the declared schema

CANN_FACTS_DIR = Path(__file__).resolve().parent / "data" / "cann"
"""CANN facts copied into the repository (tests/data/cann/README.md says from where)."""

# Absolute/relative tolerance by the dtype a result is stored in (the reference computes in float64).
TOLERANCE = {
    np.dtype(np.float64): (1e-12, 1e-10),
    np.dtype(np.float32): (1e-5, 1e-5),
    np.dtype(np.float16): (1e-3, 1e-3),
}


def tolerance(dtype: np.dtype) -> tuple[float, float]:
    """(atol, rtol) for results of ``dtype``; bf16 and 8-bit floats get their precision's worth."""
    dtype = np.dtype(dtype)
    if dtype in TOLERANCE:
        return TOLERANCE[dtype]
    if dtype.name == "bfloat16":
        return (1e-2, 1e-2)
    if dtype.kind == "V" or dtype.name.startswith("float8"):
        return (1.25e-1, 1.25e-1)
    return (0.0, 0.0)


def assert_close(
    actual: np.ndarray, expected: np.ndarray, *, atol: float | None = None, rtol: float | None = None
) -> None:
    """Compare a result with an independent expectation, NaN equal to NaN, in float64."""
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.shape == tuple(expected.shape), f"shape {actual.shape} != {tuple(expected.shape)}"
    a_tol, r_tol = tolerance(actual.dtype)
    if actual.dtype.kind in "biu" or actual.dtype == np.bool_:
        np.testing.assert_array_equal(actual, expected)
        return
    np.testing.assert_allclose(
        actual.astype(np.complex128 if actual.dtype.kind == "c" else np.float64),
        np.asarray(expected).astype(np.complex128 if actual.dtype.kind == "c" else np.float64),
        atol=a_tol if atol is None else atol,
        rtol=r_tol if rtol is None else rtol,
        equal_nan=True,
    )


@pytest.fixture
def rng() -> np.random.Generator:
    """A seeded generator (tests are deterministic)."""
    return np.random.default_rng(1234)


@pytest.fixture(scope="session")
def cann_facts_dir() -> Path:
    """tests/data/cann: the official prototypes and level-2 names the contract is checked against."""
    return CANN_FACTS_DIR


__all__ = ["DataType", "assert_close", "tolerance"]

"""Comparing one backend's outputs with the reference's: dtype, shape, then values under a tolerance."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from acl_conformance.tolerances import Tolerance
from acl_core.dtypes import DataType, from_numpy

ToleranceFor = Callable[[DataType], Tolerance]
Detail = dict[str, Any]


@dataclass
class Mismatch:
    """What differed in one output (``kind`` is ``missing``, ``dtype``, ``shape`` or ``value``)."""

    output: str
    kind: str
    message: str
    detail: Detail = field(default_factory=dict)


def _acl_dtype(arr: np.ndarray) -> DataType | None:
    try:
        return from_numpy(arr.dtype)
    except ValueError:
        return None


def _wide(arr: np.ndarray) -> np.ndarray:
    return arr.astype(np.complex128 if arr.dtype.kind == "c" else np.float64)


def compare_array(name: str, actual: Any, expected: np.ndarray, tolerance_for: ToleranceFor) -> Mismatch | None:
    """None when ``actual`` matches ``expected``: same dtype and shape, values within tolerance, NaN for NaN."""
    actual = np.asarray(actual)
    if actual.dtype != expected.dtype:
        return Mismatch(name, "dtype", f"{name}: dtype {actual.dtype} where the reference gives {expected.dtype}")
    if actual.shape != expected.shape:
        return Mismatch(
            name, "shape", f"{name}: shape {list(actual.shape)} where the reference gives {list(expected.shape)}"
        )
    if actual.size == 0:
        return None
    dtype = _acl_dtype(expected)
    if dtype is None or not (dtype.is_float or dtype.is_complex):
        bad = actual != expected
        count = int(np.count_nonzero(bad))
        if count == 0:
            return None
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        detail: Detail = {
            "mismatched": count,
            "total": int(actual.size),
            "first_index": list(index),
            "actual": actual[index].item(),
            "expected": expected[index].item(),
            "tolerance": "exact",
        }
        return Mismatch(
            name,
            "value",
            f"{name}: {count}/{actual.size} elements differ (exact comparison); "
            f"first at {list(index)}: {_fmt(actual[index])} vs {_fmt(expected[index])}",
            _jsonable(detail),
        )
    tol = tolerance_for(dtype)
    a, e = _wide(actual), _wide(expected)
    a_nan, e_nan = np.isnan(a), np.isnan(e)
    a_inf, e_inf = np.isinf(a), np.isinf(e)
    finite = ~(a_nan | e_nan | a_inf | e_inf)
    with np.errstate(all="ignore"):
        abs_err = np.where(finite, np.abs(a - e), 0.0)
        # Relative error where it means something: |expected| above atol (tiny values are atol's domain).
        significant = finite & (np.abs(e) > max(tol.atol, np.finfo(np.float64).tiny))
        rel_err = np.where(significant, abs_err / np.abs(np.where(significant, e, 1)), 0.0)
        bad = (a_nan != e_nan) | ((a_inf | e_inf) & ~(a_nan | e_nan) & (a != e))
        bad |= finite & (abs_err > tol.atol + tol.rtol * np.abs(e))
    count = int(np.count_nonzero(bad))
    if count == 0:
        return None
    index = tuple(int(i) for i in np.argwhere(bad)[0])
    max_abs = float(abs_err.max()) if abs_err.size else 0.0
    max_rel = float(rel_err.max()) if rel_err.size else 0.0
    nan_mismatch = int(np.count_nonzero(a_nan != e_nan))
    detail = {
        "mismatched": count,
        "total": int(actual.size),
        "max_abs_error": max_abs,
        "max_rel_error": max_rel,
        "nan_mismatches": nan_mismatch,
        "first_index": list(index),
        "actual": _scalar(a[index]),
        "expected": _scalar(e[index]),
        "tolerance": tol.describe(),
    }
    extra = f", {nan_mismatch} NaN where the other is not" if nan_mismatch else ""
    return Mismatch(
        name,
        "value",
        f"{name}: {count}/{actual.size} elements outside {tol.describe()}; max abs error {max_abs:.3g}, "
        f"max rel error {max_rel:.3g}{extra}; first at {list(index)}: {_fmt(a[index])} vs {_fmt(e[index])}",
        _jsonable(detail),
    )


def _fmt(value: Any) -> str:
    """A NumPy scalar as plain text (``0.01``, ``-3``, ``True``, ``nan``)."""
    item = np.asarray(value).item()
    return repr(item) if isinstance(item, (float, complex)) else str(item)


def _scalar(value: Any) -> Any:
    value = complex(value) if np.iscomplexobj(value) else float(value)
    if isinstance(value, complex):
        return str(value)
    return value if np.isfinite(value) else str(value)


def _jsonable(detail: Detail) -> Detail:
    """The detail with NumPy scalars as Python values and non-finite floats as strings (strict JSON)."""
    out: Detail = {}
    for key, value in detail.items():
        if isinstance(value, np.generic):
            value = value.item()
        if isinstance(value, float) and not np.isfinite(value):
            value = str(value)
        out[key] = value
    return out


def compare_outputs(actual: dict[str, Any], expected: dict[str, Any], tolerance_for: ToleranceFor) -> list[Mismatch]:
    """Every difference between two ``eager.run`` results (outputs by official name; lists element-wise)."""
    problems: list[Mismatch] = []
    for name, exp in expected.items():
        if name not in actual:
            problems.append(Mismatch(name, "missing", f"{name}: the backend returned no such output"))
            continue
        act = actual[name]
        if isinstance(exp, list):
            if not isinstance(act, list) or len(act) != len(exp):
                got = len(act) if isinstance(act, list) else "a single tensor"
                problems.append(Mismatch(name, "shape", f"{name}: {got} tensors where the reference gives {len(exp)}"))
                continue
            for i, (a, e) in enumerate(zip(act, exp)):
                m = compare_array(f"{name}[{i}]", a, e, tolerance_for)
                if m:
                    problems.append(m)
        else:
            m = compare_array(name, act, exp, tolerance_for)
            if m:
                problems.append(m)
    for name in actual:
        if name not in expected:
            problems.append(Mismatch(name, "missing", f"{name}: returned by the backend but not by the reference"))
    return problems

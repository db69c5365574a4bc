"""Comparing one backend's outputs with the reference's: dtype, shape, then values under a tolerance."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np

from acl_conformance.tolerances import Tolerance
from acl_core.dtypes import DataType, from_numpy
from acl_core.spec.accuracy import PRECISION

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


def _ordinal(arr: np.ndarray) -> np.ndarray:
    """Each float as its position on the format's number line (int64): adjacent values differ by 1, ±0 are 0."""
    if arr.dtype.itemsize in (2, 4, 8):
        bits = arr.view(np.dtype(f"i{arr.dtype.itemsize}")).astype(np.int64)
        magnitude = bits & np.int64(np.iinfo(np.dtype(f"i{arr.dtype.itemsize}")).max)
        return np.where(bits < 0, -magnitude, magnitude)
    # the 8/6/4-bit formats: rank among every finite value the format has
    every = np.arange(256, dtype=np.uint8).view(arr.dtype).astype(np.float64)
    line = np.unique(every[np.isfinite(every)])
    return np.searchsorted(line, np.where(np.isfinite(arr.astype(np.float64)), arr.astype(np.float64), 0.0)).astype(
        np.int64
    )


def _real_parts(arr: np.ndarray) -> np.ndarray:
    """A complex array as its real and imaginary parts (a trailing axis of 2); a real one unchanged."""
    if arr.dtype.kind == "c":
        part = np.float32 if arr.dtype.itemsize == 8 else np.float64
        return np.ascontiguousarray(arr).view(part).reshape(*arr.shape, 2)
    return arr


def ulp_distance(actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """How many representable values of the (shared) dtype lie between each pair; complex: the worse part.

    Meaningful where both are finite; ±0 are 0 apart (signed zero is compared separately).
    """
    a, e = _real_parts(np.asarray(actual)), _real_parts(np.asarray(expected))
    dist = np.abs(_ordinal(a) - _ordinal(e))
    return dist.max(axis=-1) if np.asarray(actual).dtype.kind == "c" else dist


def ulp_size(expected: np.ndarray, dtype: DataType) -> np.ndarray:
    """One ulp of ``dtype`` at each value of ``expected`` (float64; the smallest subnormal step at 0)."""
    info = ml_dtypes.finfo(expected.dtype) if expected.dtype.kind == "V" else np.finfo(_real_parts(expected).dtype)
    step = float(info.smallest_subnormal)
    e = np.abs(_real_parts(expected).astype(np.float64))
    if e.ndim > expected.ndim:
        e = e.max(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        exponent = np.floor(np.log2(np.where(e > 0, e, 1.0)))
    return np.maximum(np.exp2(exponent - int(info.nmant)), step)


def fractional_ulps(actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """``|actual - expected|`` in ulps of ``expected``'s (narrower) dtype at each element; complex: the worse part.

    Fractional, since ``actual`` (in a wider dtype) may hold bits ``expected``'s dtype lacks: an exact
    class still needs 0, so a float32 op computed in float64 into a float64 output fails it.
    """
    parts = _real_parts(np.asarray(expected))
    step = ulp_size(parts, DataType.ACL_FLOAT)  # the step comes from ``parts``' own dtype
    wide = _real_parts(np.asarray(actual)).astype(np.float64)
    dist = np.abs(wide - parts.astype(np.float64)) / step
    return dist.max(axis=-1) if np.asarray(expected).dtype.kind == "c" else dist


def _even(arr: np.ndarray) -> np.ndarray:
    """True where a 16-bit float's last significand bit is 0."""
    return (arr.view(np.uint16) & 1) == 0


def worst_ulp(actual: np.ndarray, expected: np.ndarray) -> int:
    """The largest ulp distance over elements where both are finite (0 when there is none)."""
    a, e = np.asarray(actual), np.asarray(expected)
    if a.dtype != e.dtype or a.shape != e.shape or a.size == 0 or a.dtype.kind not in "fcV":
        return 0
    both = np.isfinite(_wide(a)) & np.isfinite(_wide(e))
    if not both.any():
        return 0
    return int(ulp_distance(a, e)[both].max())


def measured_dtype(output: DataType, compute: DataType | None) -> DataType:
    """The dtype a float output's error is measured in: ``compute`` where it is the narrower float, else ``output``.

    An op that rounds once in its computation dtype and writes a wider output only widens that
    result (a float32 Pow into a float64 ``out`` holds a float32 value), so its error is one of
    ``compute``: measured in ``output``'s ulps one float32 ulp reads 2^29. A computation as wide as
    the output (float64 Pow) is measured in the output's ulps, so computing it narrower still fails.
    """
    if compute is None or output.is_complex != compute.is_complex:
        return output
    narrow, wide = PRECISION.get(compute), PRECISION.get(output)
    if narrow is None or wide is None or narrow >= wide or compute.numpy is None:
        return output
    return compute


def compare_array(
    name: str,
    actual: Any,
    expected: np.ndarray,
    tolerance_for: ToleranceFor,
    magnitude: np.ndarray | None = None,
    compute: DataType | None = None,
) -> Mismatch | None:
    """None when ``actual`` matches ``expected``: same dtype and shape, values within tolerance, NaN for NaN.

    ``magnitude`` is the reference's result on the absolute values of the inputs (the ``M`` of a
    reduction class); float outputs report their worst ulp error. ``compute``, the dtype a
    single-rounding op computes in, makes a wider output's error measured in its ulps
    (:func:`measured_dtype`, :func:`fractional_ulps`).
    """
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
    measured = measured_dtype(dtype, compute)
    tol = tolerance_for(measured)
    a, e = _wide(actual), _wide(expected)
    a_nan, e_nan = np.isnan(a), np.isnan(e)
    a_inf, e_inf = np.isinf(a), np.isinf(e)
    finite = ~(a_nan | e_nan | a_inf | e_inf)
    widened = ""
    with np.errstate(all="ignore"):
        if measured == dtype:
            in_actual, in_expected = actual, expected
            dist = np.where(finite, ulp_distance(actual, expected), 0)
        else:
            in_actual, in_expected = actual.astype(measured.numpy), expected.astype(measured.numpy)
            dist = np.where(finite, fractional_ulps(actual, in_expected), 0.0)
            widened = f" (measured in {measured.short} ulps, the dtype the op computes in)"
        abs_err = np.where(finite, np.abs(a - e), 0.0)
        # Relative error where it means something: |expected| above atol (tiny values are atol's domain).
        significant = finite & (np.abs(e) > max(tol.atol, np.finfo(np.float64).tiny))
        rel_err = np.where(significant, abs_err / np.abs(np.where(significant, e, 1)), 0.0)
        bad = (a_nan != e_nan) | ((a_inf | e_inf) & ~(a_nan | e_nan) & (a != e))
        bad |= finite & _outside(tol, in_actual, in_expected, dist, abs_err, e, measured, magnitude)
        unbounded = _overflowing(tol, magnitude, e.shape)
        bad &= ~unbounded
        zero_sign = np.zeros(actual.shape, bool)
        if tol.signed_zero and dtype.is_float:
            zero_sign = finite & (a == 0) & (e == 0) & (np.signbit(a) != np.signbit(e))
            bad |= zero_sign
    count = int(np.count_nonzero(bad))
    if count == 0:
        return None
    index = tuple(int(i) for i in np.argwhere(bad)[0])
    max_abs = float(abs_err.max()) if abs_err.size else 0.0
    max_rel = float(rel_err.max()) if rel_err.size else 0.0
    max_ulp = int(np.ceil(dist.max())) if dist.size else 0
    nan_mismatch = int(np.count_nonzero(a_nan != e_nan))
    sign_mismatch = int(np.count_nonzero(zero_sign))
    detail = {
        "mismatched": count,
        "total": int(actual.size),
        "max_abs_error": max_abs,
        "max_rel_error": max_rel,
        "max_ulp_error": max_ulp,
        "nan_mismatches": nan_mismatch,
        "signed_zero_mismatches": sign_mismatch,
        "first_index": list(index),
        "actual": _scalar(a[index]),
        "expected": _scalar(e[index]),
        "tolerance": tol.describe(),
        "overflowing": int(np.count_nonzero(unbounded)),
        "measured_in": measured.short,
    }
    extra = f", {nan_mismatch} NaN where the other is not" if nan_mismatch else ""
    extra += f", {sign_mismatch} zeros of the wrong sign" if sign_mismatch else ""
    return Mismatch(
        name,
        "value",
        f"{name}: {count}/{actual.size} elements outside {tol.describe()}{widened}; worst error {max_ulp} ulp, "
        f"max abs error {max_abs:.3g}, max rel error {max_rel:.3g}{extra}; first at {list(index)}: "
        f"{_fmt_signed(a[index])} vs {_fmt_signed(e[index])}",
        _jsonable(detail),
    )


def _outside(
    tol: Tolerance,
    actual: np.ndarray,
    expected: np.ndarray,
    dist: np.ndarray,
    abs_err: np.ndarray,
    e: np.ndarray,
    dtype: DataType,
    magnitude: np.ndarray | None,
) -> np.ndarray:
    """Where a finite element is farther from the reference's than the tolerance allows."""
    if tol.kind == "exact":
        bad = dist != 0
        if dtype in _SIXTEEN_BIT:
            # computed in float32 then rounded: a float32 midpoint goes to the even neighbour
            bad &= ~((dist == 1) & _even(actual))
        return bad
    if tol.kind == "ulp":
        return dist > tol.ulps
    if tol.kind == "reduction":
        m = np.zeros(e.shape) if magnitude is None else np.abs(_wide(np.asarray(magnitude)))
        if m.dtype.kind == "c":
            m = np.abs(m)
        with np.errstate(all="ignore"):
            finite_m = np.where(np.isfinite(m), m, np.inf)
            allowed = (tol.gamma + tol.extra) * finite_m + tol.ulps * ulp_size(expected, dtype)
        return abs_err > allowed
    return abs_err > tol.atol + tol.rtol * np.abs(e)


def _overflowing(tol: Tolerance, magnitude: np.ndarray | None, shape: tuple[int, ...]) -> np.ndarray:
    """Where a reduction's finite terms alone sum past the format (``M`` infinite): uncompared.

    There the result depends on the order of the additions (``max + max - max`` is ``inf`` or ``max``,
    and ``inf - inf`` is NaN), so no single answer is right; the count goes into the detail.
    """
    if tol.kind != "reduction" or magnitude is None:
        return np.zeros(shape, bool)
    m = np.asarray(magnitude)
    if m.shape != shape:
        return np.zeros(shape, bool)
    return ~np.isfinite(np.abs(_wide(m)))


_SIXTEEN_BIT = frozenset({DataType.ACL_FLOAT16, DataType.ACL_BF16})


def _fmt_signed(value: Any) -> str:
    """As :func:`_fmt`, but a negative zero reads ``-0.0``."""
    item = np.asarray(value).item()
    if isinstance(item, float) and item == 0 and np.signbit(item):
        return "-0.0"
    return _fmt(value)


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


def compare_outputs(
    actual: dict[str, Any],
    expected: dict[str, Any],
    tolerance_for: ToleranceFor,
    magnitudes: dict[str, Any] | None = None,
    compute: DataType | None = None,
) -> list[Mismatch]:
    """Every difference between two ``eager.run`` results (outputs by official name; lists element-wise).

    ``magnitudes`` (same structure as ``expected``) are the reduction class's ``M`` per output;
    ``compute`` as for :func:`compare_array`.
    """
    problems: list[Mismatch] = []
    mags = magnitudes or {}
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
            mag = mags.get(name)
            for i, (a, e) in enumerate(zip(act, exp)):
                m = compare_array(f"{name}[{i}]", a, e, tolerance_for, _nth(mag, i), compute)
                if m:
                    problems.append(m)
        else:
            m = compare_array(name, act, exp, tolerance_for, _shaped(mags.get(name), exp), compute)
            if m:
                problems.append(m)
    for name in actual:
        if name not in expected:
            problems.append(Mismatch(name, "missing", f"{name}: returned by the backend but not by the reference"))
    return problems


def bound_ratio(
    actual: dict[str, Any], expected: dict[str, Any], tolerance_for: ToleranceFor, magnitudes: dict[str, Any] | None
) -> float:
    """The worst ``|actual - expected| / (gamma·M + ulps·ulp)`` over float outputs under a reduction tolerance.

    0 where no output has one (or no ``M``); elements that are not finite on either side are left out.
    """
    worst = 0.0
    mags = magnitudes or {}
    for name, exp in expected.items():
        act = actual.get(name)
        if isinstance(exp, list):
            pairs = [(a, e, _nth(mags.get(name), i)) for i, (a, e) in enumerate(zip(act or [], exp))]
        else:
            pairs = [(act, exp, _shaped(mags.get(name), exp))]
        for a, e, m in pairs:
            worst = max(worst, _ratio(a, np.asarray(e), tolerance_for, m))
    return worst


def _ratio(actual: Any, expected: np.ndarray, tolerance_for: ToleranceFor, magnitude: np.ndarray | None) -> float:
    dtype = _acl_dtype(expected)
    if actual is None or magnitude is None or dtype is None or not dtype.is_float or expected.size == 0:
        return 0.0
    tol = tolerance_for(dtype)
    if tol.kind != "reduction" or np.shape(actual) != expected.shape:
        return 0.0
    a, e, m = _wide(np.asarray(actual)), _wide(expected), np.abs(_wide(np.asarray(magnitude)))
    finite = np.isfinite(a) & np.isfinite(e) & np.isfinite(m)
    if not finite.any():
        return 0.0
    with np.errstate(all="ignore"):
        bound = tol.gamma * m + tol.ulps * ulp_size(expected, dtype)
        return float(np.max(np.abs(a - e)[finite] / bound[finite]))


def _nth(mags: Any, i: int) -> np.ndarray | None:
    if isinstance(mags, list) and i < len(mags):
        return np.asarray(mags[i])
    return None


def _shaped(mag: Any, exp: Any) -> np.ndarray | None:
    """``mag`` as an array when it matches ``exp``'s shape (a magnitude run that went elsewhere is ignored)."""
    if mag is None or isinstance(mag, list):
        return None
    mag = np.asarray(mag)
    return mag if mag.shape == np.asarray(exp).shape else None


def worst_ulps(actual: dict[str, Any], expected: dict[str, Any], compute: DataType | None = None) -> dict[str, int]:
    """The worst ulp error of each float output (list outputs as ``name[i]``; see :func:`measured_dtype`)."""
    found: dict[str, int] = {}
    for name, exp in expected.items():
        act = actual.get(name)
        pairs = (
            [(f"{name}[{i}]", a, e) for i, (a, e) in enumerate(zip(act, exp))]
            if isinstance(exp, list) and isinstance(act, list)
            else [(name, act, exp)]
        )
        for label, a, e in pairs:
            if a is not None and np.asarray(e).dtype.kind in "fcV" and _acl_dtype(np.asarray(e)) is not None:
                dt = _acl_dtype(np.asarray(e))
                if dt is not None and (dt.is_float or dt.is_complex):
                    found[label] = _worst_measured(np.asarray(a), np.asarray(e), measured_dtype(dt, compute))
    return found


def _worst_measured(actual: np.ndarray, expected: np.ndarray, measured: DataType) -> int:
    """:func:`worst_ulp`, in ulps of ``measured`` where that is narrower than their dtype (rounded up)."""
    if actual.dtype != expected.dtype or measured.numpy is None or np.dtype(measured.numpy) == expected.dtype:
        return worst_ulp(actual, expected)
    both = np.isfinite(_wide(actual)) & np.isfinite(_wide(expected))
    if actual.shape != expected.shape or not both.any():
        return 0
    with np.errstate(all="ignore"):
        dist = fractional_ulps(actual, expected.astype(measured.numpy))
    return int(np.ceil(dist[both].max()))

"""The pointwise math ops (acl_core.spec.ops.pointwise_math) on the GPU against the NumPy reference (GPU tier).

Table-driven over the spec's rows: each op at each of a few dtypes on a small vector that holds the
float specials (NaN, ±Inf, ±0, the extremes) or the integer extremes, in every sample setting, checked
within the op's accuracy class (exact ops bit for bit); each in-place twin once. The derived conformance
cases and tests/rocm/test_gpu_elementwise.py run the specs' full samples.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.spec import samples as S
from acl_core.spec.accuracy import accuracy_of
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.pointwise_math import MISC, TRANSCENDENTAL, TWINS

pytestmark = pytest.mark.gpu

DTYPES = (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16, D.ACL_DOUBLE, D.ACL_INT32, D.ACL_INT64)
N = 37


def _values(dt: D, low: float, high: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = S.array(rng, (N,), dt, low=low, high=high)
    if dt.is_float:
        specials = S.special_values(dt, subnormal=True)
        x[: len(specials)] = specials
    elif dt.is_integer:
        extremes = S.integer_extremes(dt)
        x[: len(extremes)] = extremes
    return x


def _cases() -> Iterator[tuple[str, str, dict[str, Any]]]:
    for r in TRANSCENDENTAL:
        for dt in (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_DOUBLE, D.ACL_INT32):
            yield r.name, dt.short, {r.x: _values(dt, r.low, r.high, 0)}
    for dt in (D.ACL_FLOAT, D.ACL_BF16, D.ACL_DOUBLE):
        yield "Atan2", dt.short, {"self": _values(dt, -4, 4, 1), "other": _values(dt, -4, 4, 2)[::-1].copy()}
    for m in MISC:
        spec = get_spec(m.name)
        for dt in DTYPES:
            if dt not in (spec.params[0].dtypes or ()):
                continue
            for k, setting in enumerate(m.settings):
                args: dict[str, Any] = dict(setting)
                for j, name in enumerate(m.inputs):
                    args[name] = _values(dt, m.low, m.high, j)
                if len(m.inputs) == 2 and dt.is_float:  # some pairs close, some equal
                    a, b = args[m.inputs[0]], args[m.inputs[1]]
                    b[N // 2 :] = (a[N // 2 :].astype(np.float64) * (1 + 1e-3 * (np.arange(N - N // 2) % 3))).astype(
                        b.dtype
                    )
                yield m.name, f"{dt.short} setting {k}", args


CASES = list(_cases())


def _ulps(got: np.ndarray, want: np.ndarray) -> float:
    g, w = got.astype(np.float64), want.astype(np.float64)
    with np.errstate(all="ignore"):
        same = (g == w) | (np.isnan(g) & np.isnan(w))
        spacing = np.spacing(np.abs(want)).astype(np.float64)
        err = np.where(same, 0.0, np.abs(g - w) / spacing)
    return float(np.nanmax(np.where(np.isnan(err), np.inf, err))) if err.size else 0.0


def _check(op: str, got: np.ndarray, want: np.ndarray, note: str, args: dict | None = None) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, note
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want, err_msg=note)
        return
    acc = accuracy_of(get_spec(op))
    assert acc is not None
    if acc.kind == "composite":  # LogAddExp: an error relative to |max(a, b)| + 2 (a few roundings of it)
        scale = acc.scale_of(args or {}, {"out": want}) if acc.scale_of else {}
        eps = float(np.finfo(want.dtype).eps) if want.dtype.itemsize >= 4 else 2.0**-7
        with np.errstate(invalid="ignore"):
            bad = np.abs(got.astype(np.float64) - want.astype(np.float64)) > 8 * eps * scale["out"]
        bad &= ~(np.isnan(got.astype(np.float64)) & np.isnan(want.astype(np.float64)))
        bad &= got.astype(np.float64) != want.astype(np.float64)
        assert not bad.any(), note
        return
    # 16-bit results may be one rounding apart (double rounding through float32)
    bound = {8: acc.float64_ulps, 4: acc.float32_ulps}.get(want.dtype.itemsize, 1.0)
    err = _ulps(got, want)
    assert err <= bound, f"{note}: {err} ulps"
    if acc.signed_zero:
        zero = want.astype(np.float64) == 0
        np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(want[zero]), err_msg=f"{note}: signed zeros")


@pytest.mark.parametrize(("op", "note", "args"), CASES, ids=[f"{op}-{note}" for op, note, _ in CASES])
def test_matches_reference_within_its_class(rocm: Backend, reference: Backend, op: str, note: str, args: dict) -> None:
    want = eager.run(op, reference, **args)
    got = eager.run(op, rocm, **args)
    for name, value in want.items():
        _check(op, np.asarray(got[name]), np.asarray(value), f"{op} {note} {name}", args)


@pytest.mark.parametrize("op", sorted(TWINS))
def test_inplace_twin_matches_reference(rocm: Backend, reference: Backend, op: str) -> None:
    base = get_spec(op)
    settings = {m.name: dict(m.settings[-1]) for m in MISC}.get(op, {})
    args: dict[str, Any] = {TWINS[op]: _values(D.ACL_FLOAT, -0.9, 0.9, 3), **settings}
    if op == "Atan2":
        args["other"] = _values(D.ACL_FLOAT, -2, 2, 4)
    want = eager.run(f"Inplace{op}", reference, **args)[TWINS[op]]
    got = eager.run(f"Inplace{op}", rocm, **args)[TWINS[op]]
    _check(base.name, np.asarray(got), np.asarray(want), f"Inplace{op}")

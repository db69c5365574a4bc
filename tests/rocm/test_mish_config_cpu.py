"""ACL_MISH_CONFIG=poly: Mish's float32 body without the double exp and division, and its error bound.

``poly`` (``activation.MISH_POLY``) takes e^x as 2^k·p(x - k·ln2) with a degree-7 Taylor polynomial and
n/(n + 2) from a float reciprocal and one double Newton step, then rounds x·q once to float32. A NumPy
model of that arithmetic (its fused multiply-adds taken as a product and a sum, each rounded: a larger
error than the kernel's) measures the distance to mish(x) over a sweep of every 509th float32 bit pattern
(both signs, the whole range) and dense grids at the branch edges: within 0.7 ulp of the true value,
inside Mish's 1.5-ulp class. The emulated kernel (g++) meets the class against the reference on the same
edges and random values; a bad setting is a typed error; fp16/bf16 results keep their float body.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from acl_conformance.compare import ulp_distance
from acl_core import eager
from acl_core.backend import Backend
from acl_core.errors import AclnnError
from acl_rocm.backend import RocmBackend
from acl_rocm.kernels.activation import MISH_POLY
from tests.rocm.fake_provider import FakeProvider

EDGES = [np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-30, -1e-30, 20.0, 20.000002, 19.999998, -120.0, -120.00001, -119.99999]


def mish_model(x32: np.ndarray) -> np.ndarray:
    """The ``poly`` body's arithmetic in NumPy (float32 in, float32 out)."""
    x = x32.astype(np.float64)
    with np.errstate(invalid="ignore"):
        out = np.where(x32 > 20, x32, x32 * np.float32(0.0)).astype(np.float32)
    live = (x32 <= 20) & (x32 >= -120)
    xs = x[live]
    k = np.rint(xs * 1.4426950408889634)
    t = xs - k * 0.69314718055994531
    p = np.full_like(xs, 1.0 / 5040.0)
    for c in (1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0):
        p = p * t + c
    e = np.ldexp(p, k.astype(np.int64))
    n = e * (e + 2.0)
    d = n + 2.0
    y = (np.float32(1.0) / d.astype(np.float32)).astype(np.float64)
    q0 = n * y
    q = (n - d * q0) * y + q0
    out[live] = (xs * q).astype(np.float32)
    return out


def _true_mish(x32: np.ndarray) -> np.ndarray:
    """mish(x) in float64 (a few float64 ulps from the true value: nothing at float32's scale)."""
    x = x32.astype(np.float64)
    with np.errstate(over="ignore"):
        return x * np.tanh(np.log1p(np.exp(x)))


def _ulps_from_truth(got32: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """|got - truth| in ulps of float32 at the true value (subnormal spacing below the normal range)."""
    mag = np.maximum(np.abs(truth), np.float64(np.finfo(np.float32).tiny))
    ulp = np.ldexp(1.0, np.frexp(mag)[1] - 24)
    return np.abs(got32.astype(np.float64) - truth) / ulp


def _sweep() -> np.ndarray:
    every = np.arange(0, 1 << 32, 509, dtype=np.uint64).astype(np.uint32).view(np.float32)
    dense = [np.linspace(a, b, 20001, dtype=np.float32) for a, b in ((-121, -86), (-2, 2), (19, 21))]
    x = np.concatenate([every, *dense, np.array(EDGES[3:], np.float32)])
    return x[np.isfinite(x)]


def test_model_is_within_the_class_over_the_float_range() -> None:
    worst = 0.0
    for chunk in np.array_split(_sweep(), 8):
        got, truth = mish_model(chunk), _true_mish(chunk)
        big = np.abs(truth) > np.finfo(np.float32).max  # none: mish(x) <= x
        assert not big.any()
        worst = max(worst, float(_ulps_from_truth(got, truth).max()))
    assert worst <= 0.7, f"worst {worst} ulp"


def test_model_signs_and_non_finite() -> None:
    x = np.array([np.inf, -np.inf, np.nan, -200.0, -0.0, 0.0, 25.0], np.float32)
    got = mish_model(x)
    assert np.isinf(got[0]) and np.isnan(got[1]) and np.isnan(got[2])
    assert got[3] == 0 and np.signbit(got[3]) and np.signbit(got[4]) and not np.signbit(got[5]) and got[6] == 25


def _backend(tmp_path: Path, setting: str) -> tuple[RocmBackend, FakeProvider]:
    provider = FakeProvider()
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp_path / setting), "ACL_MISH_CONFIG": setting})
    backend.runtime.ensure_device(0)
    return backend, provider


def _sources(tmp_path: Path, setting: str, dtype: type) -> list[str]:
    """The elementwise sources one Mish call over ``dtype`` generates under ``ACL_MISH_CONFIG=setting``."""
    backend, _ = _backend(tmp_path / np.dtype(dtype).name, setting)
    eager.run("Mish", backend, self=np.linspace(-3, 3, 64).astype(dtype))
    return list(backend.runners["elementwise"]._sources.values())  # type: ignore[attr-defined]


def test_poly_body_only_for_float32_results(tmp_path: Path) -> None:
    for dtype, expect in ((np.float32, True), (np.float16, False)):
        assert any(MISH_POLY in s for s in _sources(tmp_path, "poly", dtype)) == expect
    assert not any(MISH_POLY in s for s in _sources(tmp_path / "libm", "libm", np.float32))
    assert any(MISH_POLY in s for s in _sources(tmp_path / "unset", "", np.float32))  # the default


def test_a_bad_setting_is_refused(tmp_path: Path) -> None:
    backend, _ = _backend(tmp_path, "fast")
    with pytest.raises(AclnnError) as err:
        eager.run("Mish", backend, self=np.zeros(4, np.float32))
    assert err.value.code == 161002


@pytest.mark.parametrize("setting", ["libm", "poly"])
def test_emulated_float32_within_class(
    emulated: Backend, reference: Backend, monkeypatch: pytest.MonkeyPatch, setting: str
) -> None:
    monkeypatch.setattr(emulated, "environ", {**emulated.environ, "ACL_MISH_CONFIG": setting})  # type: ignore[attr-defined]
    rng = np.random.default_rng(16)
    x = np.concatenate(
        [
            np.array(EDGES, np.float32),
            (rng.standard_normal(1500) * 8).astype(np.float32),
            rng.uniform(-125, -80, 300).astype(np.float32),
            rng.uniform(15, 25, 100).astype(np.float32),
            np.ldexp(np.float32(1), np.arange(-149, 128, 7)).astype(np.float32) * np.float32(-1),
        ]
    )
    want = eager.run("Mish", reference, self=x)["out"]
    got = eager.run("Mish", emulated, self=x)["out"]
    assert np.array_equal(np.isnan(got), np.isnan(want))
    finite = np.isfinite(got) & np.isfinite(want)
    assert np.array_equal(got[~finite & ~np.isnan(got)], want[~finite & ~np.isnan(want)])
    assert np.array_equal(np.signbit(got[got == 0]), np.signbit(want[got == 0]))
    assert int(ulp_distance(got[finite], want[finite]).max()) <= 1  # the class's 1.5 + 0.5, rounded down
    if setting == "poly":
        np.testing.assert_array_equal(got, mish_model(x))  # the model is the kernel's arithmetic, bar fma

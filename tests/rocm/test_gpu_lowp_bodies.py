"""Float bodies for 16-bit results and Erfinv's float function on the GPU (issue 16), against the reference.

Every fp16 and every bf16 bit pattern goes through Mish, SiluBackward (with gradients of both signs and,
in bf16, 1e30 times a sigmoid that is subnormal in float) and Erfinv (|x| <= 1); float32 takes random
values and the same edges. Each finite result must be within the op's class of the reference: 1 ulp
for 16-bit results, the class's float32 bound (Mish and SiluBackward 1.5, Erfinv 2.5 ulp) rounded down.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from acl_conformance.compare import ulp_distance
from acl_core import eager
from acl_core.backend import Backend

pytestmark = pytest.mark.gpu

BF16 = np.dtype(ml_dtypes.bfloat16)


def _all_values(dtype: np.dtype) -> np.ndarray:
    if np.dtype(dtype).itemsize == 2:
        return np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(dtype)
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(1 << 16) * 8).astype(np.float32)
    edges = [np.inf, -np.inf, np.nan, 0.0, -0.0, 20.0, -80.0, -80.5, -87.5, -90.0, -104.0, -1.2785, -1.28]
    return np.concatenate([np.array(edges, np.float32), x, np.linspace(-1.35, -1.2, 4096, dtype=np.float32)])


def _check(op: str, got: np.ndarray, want: np.ndarray, bound: int) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    g, w = got.astype(np.float32), want.astype(np.float32)
    assert np.array_equal(np.isnan(g), np.isnan(w)), f"{op}: NaN positions differ"
    finite = np.isfinite(g) & np.isfinite(w)
    inf = ~np.isnan(g) & ~finite
    assert np.array_equal(g[inf], w[inf]), f"{op}: infinities differ"
    dist = ulp_distance(got[finite], want[finite])
    k = int(dist.argmax()) if dist.size else 0
    worst = int(dist[k]) if dist.size else 0
    assert worst <= bound, f"{op} {got.dtype}: worst {worst} ulp: {got[finite][k]} vs {want[finite][k]}"


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16], ids=["fp32", "fp16", "bf16"])
def test_float_bodies_within_class(rocm: Backend, reference: Backend, dtype: np.dtype) -> None:
    x = _all_values(dtype)
    big = 1e30 if dtype is BF16 else 2.0
    grad = np.where(np.arange(x.size) % 2 == 0, big, -0.75).astype(np.float32).astype(dtype)
    unit = x[np.abs(x.astype(np.float32)) <= 1.0]
    cases = {
        "Mish": ({"self": x}, 1),
        "SiluBackward": ({"gradOutput": grad, "self": x}, 1),
        "Erfinv": ({"self": unit}, 2 if dtype is np.float32 else 1),
    }
    for op, (args, bound) in cases.items():
        want = eager.run(op, reference, **args)
        got = eager.run(op, rocm, **args)
        for name, value in want.items():
            _check(op, got[name], value, bound)


@pytest.mark.parametrize("config", ["libm", "poly"])
def test_mish_float32_configs_within_class(
    rocm: Backend, reference: Backend, monkeypatch: pytest.MonkeyPatch, config: str
) -> None:
    """ACL_MISH_CONFIG forced on the backend: every 4099th float32 bit pattern (both signs, every exponent; on the
    emulator every 1048573rd) plus the edges, each within the 1.5-ulp class of the reference (1 ulp, rounded down)."""
    import os

    monkeypatch.setattr(rocm, "environ", {**rocm.environ, "ACL_MISH_CONFIG": config})  # type: ignore[attr-defined]
    stride = 1048573 if os.environ.get("ACL_ROCM_EMULATE") == "1" else 4099
    every = np.arange(0, 1 << 32, stride, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x = np.concatenate([_all_values(np.float32), every, np.array([-120.0, -120.00001, 20.000002], np.float32)])
    want = eager.run("Mish", reference, self=x)["out"]
    got = eager.run("Mish", rocm, self=x)["out"]
    _check("Mish", got, want, 1)
    zero = want == 0
    assert np.array_equal(np.signbit(got[zero]), np.signbit(want[zero])), "Mish: signed zeros differ"

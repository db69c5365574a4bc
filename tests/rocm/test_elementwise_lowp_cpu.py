"""Float bodies for 16-bit results (issue 16): which kernels take them, and that they stay within the op's class.

Mish and SiluBackward evaluate in double for float32 results and in float where every result is stored
as fp16/bf16 (``activation.LOWP``); Erfinv calls a float erfinv for float compute. The emulated runs
(g++ on the CPU) put each body on the inputs where a float evaluation is weakest: SiluBackward's
zero of ``1 + x(1 - s)`` near x = -1.2785 (every fp16 value there), large gradients times a subnormal
sigmoid below x = -80 (bf16), Mish's underflowing exp, the non-finite values.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from acl_conformance.compare import ulp_distance
from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_rocm.kernels.activation import LOWP
from acl_rocm.kernels.elementwise import UFUNCS, Instance, Operand, generate, lowp_results

BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = [np.float32, np.float16, BF16]


def _instance(op: str, storage: D) -> Instance:
    u = UFUNCS[op]
    operands = [Operand(name, storage, D.ACL_FLOAT, True, False, "unit") for name, _ in u.inputs]
    operands.append(Operand(u.output[0], storage, D.ACL_FLOAT, False, True, "unit"))
    return Instance(u, tuple(operands), (), (), D.ACL_FLOAT, 1, "int")


def _kernel_body(op: str, storage: D) -> str:
    return generate(_instance(op, storage)).split("// ---- end of prelude")[-1]


@pytest.mark.parametrize("op", sorted(LOWP))
def test_float_body_only_where_every_result_is_16_bit(op: str) -> None:
    for storage in (D.ACL_FLOAT16, D.ACL_BF16):
        assert lowp_results(_instance(op, storage))
        assert LOWP[op] in _kernel_body(op, storage)
    single = _kernel_body(op, D.ACL_FLOAT)
    assert LOWP[op] not in single and single.count(UFUNCS[op].body) == 2  # comment and code: the double body


def test_erfinv_calls_the_float_function_for_float_compute() -> None:
    body = _kernel_body("Erfinv", D.ACL_FLOAT)
    assert "const float self" in body and "r = acl_erfinv(self);" in body


def _grid(dtype: np.dtype, low: float, high: float) -> np.ndarray:
    """Every value of ``dtype`` in [low, high] (low < high, same sign)."""
    a, b = np.array([low, high], dtype).view(np.uint16 if np.dtype(dtype).itemsize == 2 else np.uint32)
    lo, hi = sorted((int(a), int(b)))
    bits = np.arange(lo, hi + 1, dtype=np.uint16 if np.dtype(dtype).itemsize == 2 else np.uint32)
    return bits.view(dtype)


def _inputs(dtype: np.dtype) -> np.ndarray:
    rng = np.random.default_rng(16)
    specials = [np.inf, -np.inf, np.nan, 0.0, -0.0, 20.0, 20.5, -20.0, -79.0, -80.0, -80.5, -87.5, -90.0, -104.0]
    if np.dtype(dtype).itemsize == 2:
        near_zero_of_f = _grid(dtype, -1.35, -1.2)  # SiluBackward's cancellation
    else:
        near_zero_of_f = np.linspace(-1.35, -1.2, 160, dtype=np.float32)
    parts = [
        np.array(specials, np.float32).astype(dtype),
        near_zero_of_f.astype(dtype),
        (rng.standard_normal(700) * 6).astype(np.float32).astype(dtype),
        rng.uniform(-110, -60, 200).astype(np.float32).astype(dtype),
    ]
    return np.concatenate(parts)


def _within_one_ulp(op: str, got: np.ndarray, want: np.ndarray, bound: float) -> None:
    assert got.dtype == want.dtype
    nan = np.isnan(got.astype(np.float32))
    assert np.array_equal(nan, np.isnan(want.astype(np.float32))), f"{op}: NaN positions differ"
    finite = np.isfinite(got.astype(np.float32)) & np.isfinite(want.astype(np.float32))
    inf = ~nan & ~finite
    assert np.array_equal(got[inf], want[inf]), f"{op}: infinities differ"
    dist = ulp_distance(got[finite], want[finite])
    worst = int(dist.max()) if dist.size else 0
    assert worst <= bound, f"{op}: worst {worst} ulp at {got[finite][dist.argmax()]} vs {want[finite][dist.argmax()]}"


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "fp16", "bf16"])
def test_emulated_bodies_within_class(emulated: Backend, reference: Backend, dtype: np.dtype) -> None:
    x = _inputs(dtype)
    grad = np.where(np.arange(x.size) % 3 == 0, 1e30 if dtype is BF16 else 3.0, -0.75).astype(np.float32)
    cases = {
        "Mish": {"self": x},
        "SiluBackward": {"gradOutput": grad.astype(dtype), "self": x},
        "Erfinv": {"self": np.concatenate([x / np.array(128, dtype), np.array([1, -1, 0.9999, -0.5], dtype)])},
    }
    for op, args in cases.items():
        want = eager.run(op, reference, **args)
        got = eager.run(op, emulated, **args)
        name = next(iter(want))
        # float32: the class's n + 0.5 (Mish/SiluBackward 1, Erfinv 2) rounded down; 16-bit: 1 ulp
        bound = (2 if op == "Erfinv" else 1) if dtype is np.float32 else 1
        _within_one_ulp(op, got[name], want[name], bound)

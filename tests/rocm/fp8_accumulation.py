"""How far a backend's fp8 QuantMatmulV5 lands from the exact result, in units of ``M`` (GPU-side measurement).

The conformance suite compares an fp8 QuantMatmulV5 under the reduction class: ``|err| ≤ γ_n·M + 1 ulp``
with ``n = K + 3`` float32 roundings and ``M = |x1|·|x2|·|x1Scale|·|x2Scale| + |bias|``. A backend whose
matrix instruction keeps a shorter accumulator than float32 (Hopper's fp8 MMA) declares an
``AccumulationAllowance``: ``γ_n·M + extra·M + 1 ulp`` on its architecture. This measures what such an
allowance has to cover: the worst ``|err| / M`` (and the part beyond the plain bound) over random fp8
calls with float32 per-token / per-channel scales, a float32 bias and a float32 output (so the output
rounding hides nothing), at several K. ``python -m tests.rocm.fp8_accumulation [backend]`` prints one
JSON line per (operands, K); scripts/gpu_run.sh runs it so each H200 run records the figure.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from typing import Any

import ml_dtypes
import numpy as np

from acl_core import eager
from acl_core.backend import Backend

KS = (16, 64, 256, 1024, 4096)
"""The reduction lengths measured."""
U32 = 2.0**-24
NONE = {"yScale": None, "x1Offset": None, "x2Offset": None, "yOffset": None}


@dataclass(frozen=True)
class Measured:
    """The worst figures over the calls of one (operands, K)."""

    operands: str
    k: int
    calls: int
    path: str
    worst_err_over_m: float
    """max |err| / M: what ``extra`` must cover where γ_n·M is negligible."""
    worst_excess_over_m: float
    """max (|err| - γ_n·M - 1 ulp) / M: the part only an allowance covers (≤ 0: within the plain bound)."""
    worst_err_over_bound: float
    """max |err| / (γ_n·M + 1 ulp): the plain reduction bound's ratio (≤ 1 passes without an allowance)."""


def fp8_call(rng: np.random.Generator, m: int, k: int, n: int, *, one_signed: bool) -> dict[str, Any]:
    """QuantMatmulV5 arguments: E4M3 x E4M3, float32 per-token and per-channel scales, float32 bias and out."""
    low, high = (0.25, 8.0) if one_signed else (-8.0, 8.0)
    return {
        "x1": rng.uniform(low, high, (m, k)).astype(ml_dtypes.float8_e4m3fn),
        "x2": rng.uniform(low, high, (k, n)).astype(ml_dtypes.float8_e4m3fn),
        "x1Scale": rng.uniform(0.5, 2.0, m).astype(np.float32),
        "x2Scale": rng.uniform(0.5, 2.0, n).astype(np.float32),
        "bias": rng.uniform(low, high, n).astype(np.float32),
        "transposeX1": False,
        "transposeX2": False,
        "groupSize": 0,
        "out": np.zeros((m, n), np.float32),
    } | NONE


def exact_and_magnitude(args: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """The exact result (float64) and ``M = |x1|·|x2|·|x1Scale|·|x2Scale| + |bias|``."""
    a, b = args["x1"].astype(np.float64), args["x2"].astype(np.float64)
    s = args["x1Scale"].astype(np.float64)[:, None] * args["x2Scale"].astype(np.float64)[None, :]
    bias = args["bias"].astype(np.float64)
    return (a @ b) * s + bias, (np.abs(a) @ np.abs(b)) * np.abs(s) + np.abs(bias)


def ratios(out: np.ndarray, exact: np.ndarray, magnitude: np.ndarray, k: int) -> tuple[float, float, float]:
    """(max |err|/M, max excess/M, max |err|/bound) for one float32 result under γ_(K+3)·M + 1 ulp."""
    steps = k + 3
    gamma = steps * U32 / (1 - steps * U32)
    err = np.abs(out.astype(np.float64) - exact)
    ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    plain = gamma * magnitude + ulp
    return float(np.max(err / magnitude)), float(np.max((err - plain) / magnitude)), float(np.max(err / plain))


def measure(
    backend: Backend, k: int, *, one_signed: bool = False, calls: int = 3, m: int = 96, n: int = 80, seed: int = 0
) -> Measured:
    """The worst figures of ``calls`` random fp8 QuantMatmulV5 calls of depth ``k`` on ``backend``."""
    rng = np.random.default_rng([seed, k, int(one_signed)])
    worst = (0.0, -np.inf, 0.0)
    path = ""
    for _ in range(calls):
        args = fp8_call(rng, m, k, n, one_signed=one_signed)
        out = np.asarray(eager.run("QuantMatmulV5", backend, op_args=args)["out"])
        path = str(getattr(getattr(backend, "quant_matmul", None), "last_path", "") or "")
        exact, magnitude = exact_and_magnitude(args)
        worst = tuple(max(w, r) for w, r in zip(worst, ratios(out, exact, magnitude, k)))  # type: ignore[assignment]
    return Measured("one-signed" if one_signed else "signed", k, calls, path, *worst)


def main(argv: list[str]) -> int:
    """Print one JSON line per (operands, K) for the backend named in ``argv`` (default rocm)."""
    import acl_core

    backend = acl_core.get_backend(argv[0] if argv else "rocm")
    caps = backend.capabilities()
    print(json.dumps({"backend": backend.name, "architecture": caps.architecture, "device": caps.device_name}))
    for one_signed in (False, True):
        for k in KS:
            print(json.dumps(asdict(measure(backend, k, one_signed=one_signed))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Cases for capability flags with an observable contract: TF32 (``tf32_enabled``) on fp32 GEMM.

``tf32_enabled`` (CANN_FAST_TF32=1 on TF32-class hardware) lets an fp32 GEMM whose ``cubeMathType``
keeps the dtype (0 KEEP_DTYPE, 4 USE_FP32_ADD) round its matrix operands to TF32. So:

* every value case of such a call on a backend claiming ``tf32_enabled`` is compared with the
  reference computing it with ``cubeMathType=3`` (USE_HF32: operands rounded to 10 mantissa bits),
  not with the fp32 result (:func:`tf32_args`);
* one **flag** case per GEMM in :data:`TF32_OPS` runs a product long enough (K = 512) that TF32
  rounding is two orders of magnitude above fp32's: claiming TF32, the error must be TF32's (within
  its bound and visible); not claiming it, no TF32 rounding may show.
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING, Any

import numpy as np

from acl_core import eager
from acl_core.dtypes import DataType as D
from acl_core.errors import AclCoreError
from acl_core.spec.ops.matmul import KEEP_DTYPE, USE_FP32_ADD, USE_HF32, round_to_hf32
from acl_core.spec.opspec import Kind, OpSpec

if TYPE_CHECKING:
    from acl_conformance.cases import Case
    from acl_conformance.runner import Outcome, Runner

TF32_OPS = ("Mm",)
"""GEMMs that get a TF32 flag case (one is enough to prove the flag; the value cases cover the rest)."""
TF32_NOTE = "fp32 GEMM follows tf32_enabled"
SHAPE = (64, 512, 48)
"""M, K, N of the flag case: K long enough that TF32's 2^-11 operand rounding dwarfs fp32's 2^-24."""
CUBE = "cubeMathType"


def tf32_args(spec: OpSpec, args: dict[str, Any]) -> dict[str, Any] | None:
    """``args`` with ``cubeMathType=USE_HF32`` when a TF32-enabled backend may run this call on TF32, else None."""
    if not any(p.name == CUBE for p in spec.params):
        return None
    if int(args.get(CUBE, KEEP_DTYPE)) not in (KEEP_DTYPE, USE_FP32_ADD):
        return None
    floats = [
        v
        for p in spec.params
        if p.kind is Kind.TENSOR and p.writes is False
        for v in [args.get(p.name)]
        if isinstance(v, np.ndarray) and v.dtype.kind == "f"
    ]
    if not floats or any(v.dtype != np.float32 for v in floats):
        return None
    return {**args, CUBE: USE_HF32}


def operands(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The flag case's fp32 operands (seeded by the suite seed)."""
    rng = np.random.default_rng([seed, zlib.crc32(b"tf32")])
    m, k, n = SHAPE
    return rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)


def run_tf32(runner: Runner, case: Case) -> Outcome:
    """The TF32 flag case of ``case.op``: the fp32 GEMM's error class must match ``tf32_enabled``."""
    skipped = runner.gate(case, {D.ACL_FLOAT})
    if skipped:
        return skipped
    a, b = operands(runner.catalog.seed)
    try:
        out = np.asarray(eager.run(case.op, runner.backend, self=a, mat2=b, cubeMathType=KEEP_DTYPE)["out"])
    except AclCoreError as exc:
        return runner._fail(case, "claim", f"the backend rejects an fp32 {case.op} it claims: {exc}")
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    exact = a64 @ b64
    magnitude = np.abs(a64) @ np.abs(b64)
    tf32_error = float(np.abs(round_to_hf32(a).astype(np.float64) @ round_to_hf32(b).astype(np.float64) - exact).max())
    error = np.abs(out.astype(np.float64) - exact)
    worst = float(error.max()) if error.size else 0.0
    detail = {"max_error": worst, "tf32_emulation_error": tf32_error, "tf32_enabled": runner.caps.tf32_enabled}
    if runner.caps.tf32_enabled:
        bound = (2.0**-9 + SHAPE[1] * 2.0**-23) * magnitude
        if not np.all(error <= bound):
            return runner._fail(case, "value", f"error {worst:.3g} exceeds TF32's bound (2^-9 of |a|@|b|)", detail)
        if worst < tf32_error / 4:
            return runner._fail(
                case,
                "flag",
                f"capabilities claim tf32_enabled but no TF32 rounding shows: error {worst:.3g} where TF32 "
                f"rounding gives {tf32_error:.3g} (the fp32 path ran)",
                detail,
            )
    elif worst > tf32_error / 16:
        return runner._fail(
            case,
            "flag",
            f"capabilities do not claim tf32_enabled but the fp32 {case.op} error {worst:.3g} is TF32-class "
            f"(TF32 rounding gives {tf32_error:.3g}; fp32 is over 100x smaller at K={SHAPE[1]})",
            detail,
        )
    return runner._pass(case)

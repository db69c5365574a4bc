"""Cases for capability flags with an observable contract: ``tf32_enabled``, ``fp8_matmul_hw``, ``mx_use_hw``.

``tf32_enabled`` (CANN_FAST_TF32=1 on TF32-class hardware) lets an fp32 GEMM whose ``cubeMathType``
keeps the dtype (0 KEEP_DTYPE, 4 USE_FP32_ADD) round its matrix operands to TF32. So:

* every value case of such a call on a backend claiming ``tf32_enabled`` is compared with the
  reference computing it with ``cubeMathType=3`` (USE_HF32: operands rounded to 10 mantissa bits),
  not with the fp32 result (:func:`tf32_args`);
* one **flag** case per GEMM in :data:`TF32_OPS` runs a product long enough (K = 512) that TF32
  rounding is two orders of magnitude above fp32's: claiming TF32, the error must be TF32's (within
  its bound and visible); not claiming it, no TF32 rounding may show.

``fp8_matmul_hw`` (fp8 GEMM on fp8 matrix hardware) claims the fp8 path: FLOAT8 operands taken as
they are and products accumulated in float32. One **flag** case per op in :data:`FP8_OPS` runs a
one-signed E4M3 product with K = 4096 (so ``|a|@|b|`` is the result itself and no cancellation hides
an accumulator's error) and requires float32 accumulation's bound, ``γ_(K+3)·|y| + 1 ulp``: a path
accumulating in a 16-bit type stagnates or overflows far past it. A backend not claiming the flag
runs the same case (CANN's emulated path accumulates in float32 too).

``mx_use_hw`` (the native microscaling GEMM is used) is checked against the architecture the
capabilities report (:func:`acl_core.hardware.has_mx_instructions`): claimed on an architecture
without MX matrix instructions, or one not known to have them, it is refused.
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING, Any

import numpy as np

from acl_core import eager
from acl_core.dtypes import DataType as D
from acl_core.errors import AclCoreError
from acl_core.hardware import has_mx_instructions
from acl_core.spec.ops.matmul import KEEP_DTYPE, USE_FP32_ADD, USE_HF32, round_to_hf32
from acl_core.spec.opspec import Kind, OpSpec

if TYPE_CHECKING:
    from acl_conformance.cases import Case
    from acl_conformance.runner import Outcome, Runner
    from acl_conformance.tolerances import FlagAllowance

TF32_OPS = ("Mm",)
"""GEMMs that get a TF32 flag case (one is enough to prove the flag; the value cases cover the rest)."""
TF32_NOTE = "fp32 GEMM follows tf32_enabled"
SHAPE = (64, 512, 48)
"""M, K, N of the flag case: K long enough that TF32's 2^-11 operand rounding dwarfs fp32's 2^-24."""
CUBE = "cubeMathType"
FP8_OPS = ("QuantMatmulV5",)
"""GEMMs with an fp8 per-token / per-channel mode that get the fp8 flag case."""
FP8_NOTE = "fp8 GEMM accumulates in float32"
FP8_SHAPE = (32, 4096, 40)
"""M, K, N of the fp8 case: K long enough that a 16-bit accumulator's error is orders above float32's."""
MX_OPS = ("QuantMatmulV5", "GroupedMatmulV5")
"""Operators with an MX mode; each carries the ``mx_use_hw`` claim case."""
MX_NOTE = "mx_use_hw matches the architecture"


def notes(op: str) -> list[str]:
    """The flag case notes of ``op``, in the order they run."""
    return [note for note, ops in ((TF32_NOTE, TF32_OPS), (FP8_NOTE, FP8_OPS), (MX_NOTE, MX_OPS)) if op in ops]


def run(runner: Runner, case: Case) -> Outcome:
    """Run one flag case, by its note."""
    if case.note == TF32_NOTE:
        return run_tf32(runner, case)
    if case.note == FP8_NOTE:
        return run_fp8(runner, case)
    if case.note == MX_NOTE:
        return run_mx(runner, case)
    raise ValueError(f"unknown flag case {case.note!r}")


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


def fp8_operands(seed: int) -> dict[str, np.ndarray]:
    """The fp8 case's arguments: one-signed E4M3 operands, float32 per-token and per-channel scales."""
    import ml_dtypes

    rng = np.random.default_rng([seed, zlib.crc32(b"fp8")])
    m, k, n = FP8_SHAPE
    return {
        "x1": rng.uniform(0.25, 4.0, (m, k)).astype(ml_dtypes.float8_e4m3fn),
        "x2": rng.uniform(0.25, 4.0, (k, n)).astype(ml_dtypes.float8_e4m3fn),
        "x1Scale": rng.uniform(0.5, 2.0, m).astype(np.float32),
        "x2Scale": rng.uniform(0.5, 2.0, n).astype(np.float32),
    }


def run_fp8(runner: Runner, case: Case) -> Outcome:
    """The fp8 flag case of ``case.op``: an fp8 GEMM's error must be float32 accumulation's."""
    claimed = runner.caps.fp8_matmul_hw
    if claimed and not runner.caps.op_claim(case.op) & {D.ACL_FLOAT8_E4M3FN, D.ACL_FLOAT8_E5M2}:
        return runner._fail(
            case, "flag", f"capabilities claim fp8_matmul_hw but {case.op} claims no FLOAT8 dtype (no fp8 GEMM runs)"
        )
    skipped = runner.gate(case, {D.ACL_FLOAT8_E4M3FN, D.ACL_FLOAT})
    if skipped:
        return skipped
    args = fp8_operands(runner.catalog.seed)
    m, k, n = FP8_SHAPE
    none = {"yScale": None, "x1Offset": None, "x2Offset": None, "yOffset": None, "bias": None}
    call: dict[str, Any] = {**args, **none, "transposeX1": False, "transposeX2": False, "groupSize": 0}
    call["out"] = np.zeros((m, n), np.float32)
    try:
        out = np.asarray(eager.run(case.op, runner.backend, op_args=call)["out"])
    except AclCoreError as exc:
        return runner._fail(case, "claim", f"the backend rejects an fp8 {case.op} it claims: {exc}")
    scale = args["x1Scale"].astype(np.float64)[:, None] * args["x2Scale"].astype(np.float64)[None, :]
    exact = (args["x1"].astype(np.float64) @ args["x2"].astype(np.float64)) * scale
    u = 2.0**-24
    steps = k + 3  # K - 1 additions, the two scale products, the final rounding to float32
    bound = steps * u / (1 - steps * u) * np.abs(exact) + np.spacing(np.abs(exact).astype(np.float32)).astype(
        np.float64
    )
    with np.errstate(invalid="ignore"):
        error = np.abs(out.astype(np.float64) - exact)
    worst = float(np.nanmax(error)) if error.size and not np.all(np.isnan(error)) else float("nan")
    ratio = float(np.nanmax(error / bound)) if error.size and not np.all(np.isnan(error)) else float("nan")
    detail: dict[str, Any] = {"max_error": worst, "worst_error_over_bound": ratio, "fp8_matmul_hw": claimed, "k": k}
    if not np.all(error <= bound):  # NaN and Inf fail too
        allowance = runner.flag_allowance(case)
        allowed = allowance is not None and bool(np.all(np.isfinite(error))) and ratio <= allowance.factor
        if allowance is not None and allowed:
            return allowed_outcome(
                case, f"fp8 {case.op} error {ratio:.3g}x float32 accumulation's bound", detail, allowance
            )
        path = "the fp8 hardware path it claims" if claimed else "its fp8 path"
        beyond = f"; past the {allowance.factor:g}x the plugin allows on {allowance.architecture}" if allowance else ""
        return runner._fail(
            case,
            "flag",
            f"fp8 {case.op} error {worst:.3g} is {ratio:.3g}x float32 accumulation's bound (γ_{steps}·|y| + 1 ulp) "
            f"at K={k}: {path} does not accumulate in float32{beyond}",
            detail,
        )
    return runner._pass(case)


def allowed_outcome(case: Case, what: str, detail: dict[str, Any], allowance: FlagAllowance) -> Outcome:
    """A flag case passed only under ``allowance``: passed, with the allowance in its message and detail."""
    from acl_conformance.runner import Outcome

    detail = {**detail, "allowance": allowance.describe(), "allowance_factor": allowance.factor}
    message = f"{what}: allowed by {allowance.describe()}"
    return Outcome(case.op, case.family, case.kind, case.case_id, "passed", message, "", detail)


def run_mx(runner: Runner, case: Case) -> Outcome:
    """The MX claim case: ``mx_use_hw`` may be claimed only on an architecture with MX matrix instructions."""
    caps = runner.caps
    if not caps.mx_use_hw:
        return runner._pass(case)
    has = has_mx_instructions(caps.architecture)
    if has:
        return runner._pass(case)
    why = "has no MX matrix instructions" if has is False else "is not known to have MX matrix instructions"
    return runner._fail(
        case,
        "flag",
        f"capabilities claim mx_use_hw (native MX GEMM) but the architecture they report, "
        f"{caps.architecture!r} ({caps.device_name}), {why} (gfx950 or sm_100+)",
        {"architecture": caps.architecture, "mx_use_hw": True},
    )

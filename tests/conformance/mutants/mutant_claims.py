"""Capability claims a backend does not honour (issue 14 class 6): flags and formats the suite must check.

Before, nothing read ``tf32_enabled`` and ``formats=()`` still ran every ND case, so a backend could
claim either way and pass. Now the TF32 flag case checks the fp32 GEMM's error class against the
flag, the fp8 flag case requires float32 accumulation of an fp8 GEMM, the MX claim case checks
``mx_use_hw`` against the reported architecture, and a case whose tensor formats the backend does
not claim is skipped, so a backend claiming no formats proves nothing and fails "claimed, unproven".
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from acl_core.backend import Launch
from acl_core.capabilities import Capabilities
from acl_core.spec.ops.matmul import round_to_hf32
from acl_reference.backend import ReferenceBackend
from acl_reference.call import RefCall
from acl_reference.kernels import quant as quant_kernels
from tests.conformance.mutants import Mutant


class Tf32ClaimedBackend(ReferenceBackend):
    """Claims TF32 for fp32 GEMM (CANN_FAST_TF32=1 on TF32 hardware) but its GEMM computes fp32 exactly."""

    name = "mutant-tf32-claimed"

    def capabilities(self) -> Capabilities:
        """The reference's capabilities, with TF32 claimed."""
        return super().capabilities().model_copy(update={"tf32_hw": True, "tf32_enabled": True})


class Tf32UnclaimedBackend(ReferenceBackend):
    """Rounds fp32 Mm operands to TF32 (as CANN_FAST_TF32 would) without claiming tf32_enabled.

    Not in :data:`MUTANTS`: the old suite's fp32 tolerance already caught it; tests/conformance/
    test_claims.py checks that the TF32 flag case names it.
    """

    name = "mutant-tf32-unclaimed"

    def __init__(self) -> None:
        super().__init__()
        original = self._kernels["Mm"]
        driver = self.driver

        def mm(launch: Launch) -> None:
            k = RefCall(launch, driver)
            a, b = k.read("self"), k.read("mat2")
            if a.dtype != np.float32 or b.dtype != np.float32 or int(launch.args["cubeMathType"]) not in (0, 4):
                original(launch)
                return
            a, b = round_to_hf32(a), round_to_hf32(b)
            product = a.astype(np.float64) @ b.astype(np.float64)
            k.write("out", product.astype(k.read("out").dtype))

        self._kernels["Mm"] = mm


class NoFormatsBackend(ReferenceBackend):
    """Claims no tensor formats at all (formats=()) yet computes ND tensors."""

    name = "mutant-no-formats"

    def capabilities(self) -> Capabilities:
        """The reference's capabilities with an empty formats claim."""
        return super().capabilities().model_copy(update={"formats": ()})


MUTANTS = [
    Mutant("tf32-claimed", "claims", "claims TF32 but its fp32 GEMM is exact fp32", Tf32ClaimedBackend, ops="Mm"),
    Mutant("no-formats", "claims", "formats=() while computing ND tensors", NoFormatsBackend, ops="Abs"),
]


class Fp8HalfAccumulatorBackend(ReferenceBackend):
    """Claims fp8_matmul_hw, and its fp8 QuantMatmulV5 path accumulates the products in float16.

    The defect of an fp8 matrix path wired with the f16-accumulate instruction variant (a 16-bit
    accumulator) instead of the f32 one.
    The suite on main let it through: the fp8 value samples have K <= 64 and bf16 outputs under the
    quant family's dtype table, and nothing read ``fp8_matmul_hw``.
    """

    name = "mutant-fp8-half-accumulator"

    def __init__(self) -> None:
        super().__init__()
        original = self._kernels["QuantMatmulV5"]
        driver = self.driver

        def planted(launch: Launch) -> None:
            k = RefCall(launch, driver)
            fp8 = k.read("x1").dtype in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2)
            scales = all(launch.args.get(n) is not None for n in ("x1Scale", "x2Scale"))
            if launch.plan["mode"] == "mx" or not fp8 or not scales or k.read("x2Scale").dtype != np.float32:
                original(launch)
                return
            t1, t2 = bool(k.value("transposeX1")), bool(k.value("transposeX2"))
            a, b = quant_kernels._matrix(k, "x1", t1), quant_kernels._matrix(k, "x2", t2)
            acc = np.zeros((*a.shape[:-1], b.shape[-1]), np.float16)
            for i in range(a.shape[-1]):
                acc = (acc.astype(np.float64) + a[..., i : i + 1] * b[..., i : i + 1, :]).astype(np.float16)
            token = k.read("x1Scale", np.float64).reshape(-1, 1)
            quant_kernels._dequantise_output(k, acc.astype(np.float64), quant_kernels._scale(k, "x2Scale"), token, None)

        self._kernels["QuantMatmulV5"] = planted

    def capabilities(self) -> Capabilities:
        """The reference's capabilities, with the fp8 matrix hardware path claimed."""
        return super().capabilities().model_copy(update={"fp8_matmul_hw": True})


class MxWithoutInstructionsBackend(ReferenceBackend):
    """Claims mx_use_hw (native MX GEMM) while reporting gfx942 (CDNA3), which has no MX instructions."""

    name = "mutant-mx-without-instructions"

    def capabilities(self) -> Capabilities:
        """The reference's capabilities on a reported gfx942, with mx_use_hw claimed."""
        return super().capabilities().model_copy(update={"mx_use_hw": True, "architecture": "gfx942"})


MUTANTS += [
    Mutant(
        "fp8-half-accumulator",
        "claims",
        "claims fp8_matmul_hw; its fp8 GEMM accumulates in fp16",
        Fp8HalfAccumulatorBackend,
        ops="QuantMatmulV5",
    ),
    Mutant(
        "mx-without-instructions",
        "claims",
        "claims mx_use_hw on a gfx942, which has no MX instructions",
        MxWithoutInstructionsBackend,
        ops="GroupedMatmulV5",
    ),
]

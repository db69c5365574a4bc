"""Capability claims a backend does not honour (issue 14 class 6): flags and formats the suite must check.

Before, nothing read ``tf32_enabled`` and ``formats=()`` still ran every ND case, so a backend could
claim either way and pass. Now the TF32 flag case checks the fp32 GEMM's error class against the
flag, and a case whose tensor formats the backend does not claim is skipped, so a backend claiming
no formats proves nothing and fails "claimed, unproven".
"""

from __future__ import annotations

import numpy as np

from acl_core.backend import Launch
from acl_core.capabilities import Capabilities
from acl_core.spec.ops.matmul import round_to_hf32
from acl_reference.backend import ReferenceBackend
from acl_reference.call import RefCall
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

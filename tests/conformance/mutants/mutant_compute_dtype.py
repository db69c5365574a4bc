"""Results computed in a dtype other than CANN's computation dtype (issue 14 class 1, compute-dtype rounding)."""

from __future__ import annotations

import numpy as np

from acl_core.backend import Launch
from acl_core.dtypes import DataType
from acl_reference.backend import ReferenceBackend
from acl_reference.call import RefCall
from tests.conformance.mutants import Mutant


class WideComputeMulBackend(ReferenceBackend):
    """Mul of float32 inputs into a float64 output computed in float64 (skipping the float32 rounding CANN does)."""

    name = "mutant-mul-wide-compute"

    def __init__(self) -> None:
        super().__init__()
        original = self._kernels["Mul"]
        driver = self.driver

        def mutated(launch: Launch) -> None:
            original(launch)
            k = RefCall(launch, driver)
            if k.dtype("out") == DataType.ACL_DOUBLE and k.plan["compute"] == DataType.ACL_FLOAT:
                k.write("out", k.read("self", np.float64) * k.read("other", np.float64))

        self._kernels["Mul"] = mutated


MUTANTS = [
    # the reference itself did this before it rounded to plan["compute"]: the suite could not see it
    Mutant(
        "mul-wide-compute",
        "tolerance",
        "float32 Mul into float64 out computed in float64",
        WideComputeMulBackend,
        ops="Mul",
    ),
]

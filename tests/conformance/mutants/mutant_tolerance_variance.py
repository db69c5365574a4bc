"""A variance accumulated in a 16-bit type: inside the old per-dtype table, outside its class (issue 14 class 1)."""

from __future__ import annotations

import numpy as np

from acl_core.backend import Launch
from acl_core.dtypes import DataType
from acl_reference.backend import ReferenceBackend
from acl_reference.call import RefCall
from tests.conformance.mutants import Mutant


class Bf16VarianceBackend(ReferenceBackend):
    """Std of a bf16 tensor sums its squared deviations in bf16, one element at a time (no float32 accumulator)."""

    name = "mutant-std-bf16-accumulator"

    def __init__(self) -> None:
        super().__init__()
        original = self._kernels["Std"]
        driver = self.driver

        def mutated(launch: Launch) -> None:
            original(launch)
            k = RefCall(launch, driver)
            if k.dtype("out") != DataType.ACL_BF16 or k.dtype("self") != DataType.ACL_BF16:
                return
            x = k.read("self").astype(np.float64)
            axes = tuple(sorted({d % x.ndim for d in k.plan["dims"]})) if x.ndim else ()
            n = int(np.prod([x.shape[a] for a in axes])) if axes else 1
            if not axes or n <= k.plan["correction"]:
                return
            bf16 = k.read("out").dtype.type
            mean = np.mean(x, axis=axes, keepdims=True)
            with np.errstate(all="ignore"):
                terms = ((x - mean) ** 2).astype(bf16)
                moved = np.moveaxis(terms, axes, tuple(range(len(axes))))
                rows = moved.reshape(-1, *moved.shape[len(axes) :])
                total = np.zeros(rows.shape[1:], bf16)
                for term in rows:
                    total = (total.astype(np.float32) + term.astype(np.float32)).astype(bf16)
                std = np.sqrt(total.astype(np.float64) / (n - k.plan["correction"]))
            k.write("out", std.reshape(k.read("out").shape))

        self._kernels["Std"] = mutated


MUTANTS = [
    Mutant("std-bf16-accumulator", "tolerance", "Std sums bf16 squares in bf16", Bf16VarianceBackend, ops="Std"),
]

"""Errors only a kernel can see: index values out of range (class 4 of issue 14).

Phase 1 cannot read device memory, so an index value outside its dimension is refused by the kernel
(161002 at launch on the reference, at stream synchronisation on rocm). A backend whose kernel skips
or loosens that check passes every case the shared validator decides.
"""

from __future__ import annotations

import numpy as np

from acl_core.backend import Launch
from acl_reference.backend import ReferenceBackend
from acl_reference.call import RefCall
from acl_reference.kernels.movement import checked_index
from tests.conformance.mutants import Mutant


class GatherWrapsNegativeBackend(ReferenceBackend):
    """Gather counts negative index values from the end (as GatherV2 does) where aclnnGather refuses them."""

    name = "mutant-gather-wraps-negative"

    def __init__(self) -> None:
        super().__init__()
        driver = self.driver

        def gather(launch: Launch) -> None:
            k = RefCall(launch, driver)
            x = k.read("self")
            dim: int = k.plan["dim"]
            raw = k.read("index")
            if x.ndim == 0:
                k.write("out", x)
                return
            idx = checked_index(raw, x.shape[dim], "index", negative=True)
            corner = tuple(slice(None) if d == dim else slice(0, n) for d, n in enumerate(raw.shape))
            k.write("out", np.take_along_axis(x[corner], idx, axis=dim))

        self._kernels["Gather"] = gather


MUTANTS = [
    Mutant(
        "gather-wraps-negative",
        "kernel errors",
        "Gather accepts negative index values (wrapping them) where the contract refuses them",
        GatherWrapsNegativeBackend,
        ops="Gather",
    ),
]

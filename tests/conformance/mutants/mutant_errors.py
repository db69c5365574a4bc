"""Errors only a kernel can see: index values out of range (class 4 of issue 14).

Phase 1 cannot read device memory, so an index value outside its dimension is refused by the kernel
(161002 at launch on the reference, at stream synchronisation on rocm). A backend whose kernel skips
or loosens that check passes every case the shared validator decides.
"""

from __future__ import annotations

import numpy as np

from acl_core.backend import Launch
from acl_core.errors import AclnnError
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


class GroupedMatmulIgnoresBadGroupListBackend(ReferenceBackend):
    """GroupedMatmulV5 never checks its group list's values: a bad list leaves the output unwritten, no error."""

    name = "mutant-gmm-ignores-group-list"

    def __init__(self) -> None:
        super().__init__()
        original = self._kernels["GroupedMatmulV5"]

        def unchecked(launch: Launch) -> None:
            try:
                original(launch)
            except AclnnError:
                pass  # the defect: the device kernel has no check, so nothing reports the bad list

        self._kernels["GroupedMatmulV5"] = unchecked


MUTANTS = [
    Mutant(
        "gather-wraps-negative",
        "kernel errors",
        "Gather accepts negative index values (wrapping them) where the contract refuses them",
        GatherWrapsNegativeBackend,
        ops="Gather",
    ),
    Mutant(
        "gmm-ignores-group-list",
        "kernel errors",
        "GroupedMatmulV5 accepts negative, decreasing or oversized group lists without an error",
        GroupedMatmulIgnoresBadGroupListBackend,
        ops="GroupedMatmulV5",
    ),
]

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


class MoeFinalizeTrustsIndicesBackend(ReferenceBackend):
    """MoeFinalizeRouting trusts its routing indices: no range check, so NumPy wraps negatives silently.

    The suite on main let it through: MoeFinalizeRouting's indices had no ``index_of`` mark, and its
    written error samples hold no out-of-range index value.
    """

    name = "mutant-moe-finalize-trusts-indices"

    def __init__(self) -> None:
        super().__init__()
        driver = self.driver

        def finalize(launch: Launch) -> None:
            k = RefCall(launch, driver)
            expanded, bias = k.read("expandedX", np.float64), k.read("bias", np.float64)
            scales = k.read("scales", np.float64)
            dest = k.read("expandedRowIdx").astype(np.int64)
            experts = k.read("expandedExpertIdx").astype(np.int64)
            rows, top = scales.shape
            gathered = expanded[dest.reshape(top, rows).T]
            result = k.read("x1", np.float64) + np.einsum("rk,rkh->rh", scales, gathered + bias[experts])
            if k["x2Optional"] is not None:
                result = result + k.read("x2Optional", np.float64)
            k.write("out", result)

        self._kernels["MoeFinalizeRouting"] = finalize


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
    Mutant(
        "moe-finalize-trusts-indices",
        "kernel errors",
        "MoeFinalizeRouting reads expandedRowIdx / expandedExpertIdx without a range check",
        MoeFinalizeTrustsIndicesBackend,
        ops="MoeFinalizeRouting",
    ),
]

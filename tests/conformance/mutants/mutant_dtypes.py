"""Defects confined to one dtype an op claims but no hand-written sample uses (issue 14 class 2).

Today's samples give Add no float64 and Gather no float16; a backend-wide dtype claim let such a
kernel through. Each (op, dtype) pair a backend claims must now run a value case (derived from the
op's samples when none is written), so these fail.
"""

from __future__ import annotations

import numpy as np

from acl_core.backend import Launch
from acl_core.dtypes import DataType as D
from acl_reference.backend import ReferenceBackend
from acl_reference.call import RefCall
from tests.conformance.mutants import Mutant


class Float64AddBackend(ReferenceBackend):
    """Add's float64 dispatch entry points at the copy kernel: out = self, other and alpha ignored."""

    name = "mutant-float64-add"

    def __init__(self) -> None:
        super().__init__()
        original = self._kernels["Add"]
        driver = self.driver

        def add(launch: Launch) -> None:
            original(launch)
            k = RefCall(launch, driver)
            if launch.args["out"].dtype == D.ACL_DOUBLE:
                k.write("out", np.broadcast_to(k.read("self"), k.read("out").shape))

        self._kernels["Add"] = add


class Float16GatherBackend(ReferenceBackend):
    """Gather's float16 path copies with a one-element skew (the 2-byte case of a byte-offset table is off by one)."""

    name = "mutant-float16-gather"

    def __init__(self) -> None:
        super().__init__()
        original = self._kernels["Gather"]
        driver = self.driver

        def gather(launch: Launch) -> None:
            original(launch)
            k = RefCall(launch, driver)
            if launch.args["out"].dtype == D.ACL_FLOAT16:
                out = k.read("out")
                k.write("out", np.roll(out, 1) if out.size > 1 else out + 1)

        self._kernels["Gather"] = gather


MUTANTS = [
    Mutant("float64-add", "dtypes", "Add wrong only in float64 (no sample used float64)", Float64AddBackend, ops="Add"),
    Mutant(
        "float16-gather",
        "dtypes",
        "Gather wrong only for float16 (no sample used float16)",
        Float16GatherBackend,
        ops="Gather",
    ),
]

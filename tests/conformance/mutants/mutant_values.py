"""Plain wrong values: the baseline every suite catches (kept so the harness always has a member)."""

from __future__ import annotations

from acl_core.backend import Launch
from acl_reference.backend import ReferenceBackend
from acl_reference.call import RefCall
from tests.conformance.mutants import Mutant


class SwappedSubBackend(ReferenceBackend):
    """Sub computes other - alpha * self instead of self - alpha * other (operands swapped)."""

    name = "mutant-swapped-sub"

    def __init__(self) -> None:
        super().__init__()
        original = self._kernels["Sub"]
        driver = self.driver

        def swapped(launch: Launch) -> None:
            original(launch)
            k = RefCall(launch, driver)
            k.write("out", -k.read("out"))

        self._kernels["Sub"] = swapped


MUTANTS = [
    Mutant(
        "swapped-sub",
        "values",
        "Sub negated (operands swapped when alpha is 1)",
        SwappedSubBackend,
        ops="Sub",
    ),
]

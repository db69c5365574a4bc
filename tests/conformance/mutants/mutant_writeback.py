"""Data-sized outputs (Nonzero, MaskedSelect): a wrong written-back count, a wrong order, no write-back at all."""

from __future__ import annotations

import numpy as np

from acl_core.backend import Launch
from acl_core.capabilities import Capabilities
from acl_core.runtime.view_writeback import set_view_dims
from acl_core.tensor import AclTensor
from acl_reference.backend import ReferenceBackend
from acl_reference.call import RefCall
from tests.conformance.mutants import Mutant


class _Mutated(ReferenceBackend):
    """The reference with ``op``'s kernel followed by :meth:`mutate`."""

    op = ""

    def __init__(self) -> None:
        super().__init__()
        original = self._kernels[self.op]
        driver = self.driver

        def mutated(launch: Launch) -> None:
            original(launch)
            self.mutate(RefCall(launch, driver))

        self._kernels[self.op] = mutated

    def mutate(self, k: RefCall) -> None:
        """Change what the reference kernel wrote (its out view already written back)."""


class ShortCountBackend(_Mutated):
    """MaskedSelect writes back one element fewer than it selected."""

    name = "mutant-masked-select-short-count"
    op = "MaskedSelect"

    def mutate(self, k: RefCall) -> None:
        out = k.args["out"]
        assert isinstance(out, AclTensor)
        if out.view_dims[0]:
            set_view_dims(out, (out.view_dims[0] - 1,))


class ReversedBackend(_Mutated):
    """Nonzero lists the right coordinates last to first."""

    name = "mutant-nonzero-reversed"
    op = "Nonzero"

    def mutate(self, k: RefCall) -> None:
        k.write("out", k.read("out")[::-1])


class NoWritebackBackend(ReferenceBackend):
    """Nonzero writes its rows but leaves out's view at the maximal shape (zeros past the count)."""

    name = "mutant-nonzero-no-writeback"

    def __init__(self) -> None:
        super().__init__()
        driver = self.driver

        def kernel(launch: Launch) -> None:
            k = RefCall(launch, driver)
            x = k.read("self")
            rows = np.argwhere(x) if x.ndim else np.zeros((int(x != 0), 0), np.int64)
            full = np.zeros(k.args["out"].view_dims, np.int64)
            full[: len(rows)] = rows
            k.write("out", full)

        self._kernels["Nonzero"] = kernel


class CapturesNonzeroBackend(ReferenceBackend):
    """Nonzero is captured like any op (its refusal missing from the capabilities, so the runtime records it)."""

    name = "mutant-nonzero-captured"

    def capabilities(self) -> Capabilities:
        """The reference's, without the capture refusals."""
        return super().capabilities().model_copy(update={"capture_refused_ops": ()})


MUTANTS = [
    Mutant("masked-select-short-count", "values", "one element fewer written back", ShortCountBackend, "MaskedSelect"),
    Mutant("nonzero-reversed", "values", "coordinates in reverse order", ReversedBackend, "Nonzero"),
    Mutant("nonzero-no-writeback", "values", "out's view shape never written back", NoWritebackBackend, "Nonzero"),
    Mutant(
        "nonzero-captured", "runtime", "a capturing stream records Nonzero", CapturesNonzeroBackend, "Nonzero", "full"
    ),
]

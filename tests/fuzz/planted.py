"""Backends with one planted defect in one kernel, to prove the fuzzer sees each class of failure.

``python -m tests.fuzz --backend fuzz-plant-spill --ops Abs`` must report a corruption, and so on:
test_fuzz.py runs each. The defect sits in :data:`PLANTED_OP`'s kernel only, after it computed.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import acl_core
from acl_core.backend import BackendRegistration, Kernel, Launch
from acl_core.plugin import hookimpl
from acl_reference.backend import ReferenceBackend

PLANTED_OP = "Abs"


def _spill(backend: ReferenceBackend, launch: Launch) -> None:
    out = launch.args["out"]
    if out.numel:
        _, end = out.byte_span()
        buffer, at = backend.driver.device_buffer(end)  # the byte just past the view: a canary
        buffer[at] ^= 0xFF


def _crash(backend: ReferenceBackend, launch: Launch) -> None:
    raise TypeError("planted: a kernel that breaks on its arguments")


def _hang(backend: ReferenceBackend, launch: Launch) -> None:
    while True:
        time.sleep(0.01)


def _leak(backend: ReferenceBackend, launch: Launch) -> None:
    backend.runtime.malloc(64)  # never freed


DEFECTS: dict[str, tuple[Callable[[ReferenceBackend, Launch], None], str]] = {
    "spill": (_spill, "corruption"),
    "crash": (_crash, "internal"),
    "hang": (_hang, "hang"),
    "leak": (_leak, "leak"),
}
"""Planted defect -> (what the kernel does after computing, the verdict the fuzzer must give)."""


def _backend_class(defect: str) -> type[ReferenceBackend]:
    act = DEFECTS[defect][0]

    class Planted(ReferenceBackend):
        name = f"fuzz-plant-{defect}"

        def __init__(self) -> None:
            super().__init__()
            original: Kernel = self._kernels[PLANTED_OP]

            def kernel(launch: Launch) -> None:
                original(launch)
                act(self, launch)

            self._kernels[PLANTED_OP] = kernel

    Planted.__doc__ = f"The reference with {PLANTED_OP}'s kernel planted with a {defect} defect."
    return Planted


class _Plugin:
    @hookimpl
    def acl_core_backends(self) -> list[BackendRegistration]:
        return [
            BackendRegistration(f"fuzz-plant-{d}", _backend_class(d), priority=-100, summary=f"planted {d}")
            for d in DEFECTS
        ]


def register() -> None:
    """Offer the planted backends in this process."""
    acl_core.register_plugin(_Plugin(), "fuzz-planted")

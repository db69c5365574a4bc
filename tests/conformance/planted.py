"""Planting a kernel in a reference backend: the one shape every mutant and GPU-style test backend shares."""

from __future__ import annotations

from collections.abc import Callable

from acl_core.backend import Launch
from acl_reference.backend import ReferenceBackend
from acl_reference.call import RefCall

Kernel = Callable[[Launch], None]

PLANTED_PRIORITY = -1
"""Below the reference's 0: a test backend registered in-process must never become the process default
(a front-end call in a later test on the same worker would otherwise reach it, not the reference)."""


def replace_kernel(backend: ReferenceBackend, op: str, make: Callable[[Kernel], Kernel]) -> None:
    """Replace ``op``'s kernel on ``backend`` with ``make(original kernel)``."""
    backend._kernels[op] = make(backend._kernels[op])


def compute_when(backend: ReferenceBackend, op: str, fn: Callable[[RefCall], bool]) -> None:
    """Let ``fn`` compute ``op`` where it applies (it returns True); the reference kernel runs otherwise."""
    driver = backend.driver

    def make(original: Kernel) -> Kernel:
        def kernel(launch: Launch) -> None:
            if not fn(RefCall(launch, driver)):
                original(launch)

        return kernel

    replace_kernel(backend, op, make)

"""Planting a kernel in a reference backend: the one shape every mutant and GPU-style test backend shares."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from acl_core import register_plugin
from acl_core.backend import BackendRegistration, Launch
from acl_core.plugin import hookimpl
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


class PlantedPlugin:
    """A plugin offering test backends, every one registered at :data:`PLANTED_PRIORITY`."""

    def __init__(self, registrations: list[BackendRegistration]) -> None:
        self.registrations = [dataclasses.replace(r, priority=PLANTED_PRIORITY) for r in registrations]

    @hookimpl
    def acl_core_backends(self) -> list[BackendRegistration]:
        """The planted backends."""
        return self.registrations


def register_planted(plugin_name: str, registrations: list[BackendRegistration]) -> None:
    """Register test backends in this process under ``plugin_name``, below the reference's priority."""
    register_plugin(PlantedPlugin(registrations), plugin_name)

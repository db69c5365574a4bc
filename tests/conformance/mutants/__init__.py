"""Planted-defect backends: the reference with one realistic defect each, to prove the suite catches it.

Each module ``mutant_<class>.py`` here defines ``MUTANTS``, a list of :class:`Mutant`: a backend
class (usually a :class:`~acl_reference.backend.ReferenceBackend` subclass with one kernel or one
driver call changed), the defect class it stands for, and the conformance selection that must catch
it. ``tests/conformance/test_mutants.py`` runs every mutant at several seeds and requires a failure
at each, while the reference passes the same selection. A mutant the suite lets through is a hole
in the suite, never a reason to drop the mutant.

Modules are discovered by name, so adding a class of defects is adding one file.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass

from acl_core import register_plugin
from acl_core.backend import Backend, BackendRegistration
from acl_core.plugin import hookimpl
from tests.conformance.planted import PLANTED_PRIORITY

SEEDS: tuple[int, ...] = (0, 1, 2)
"""Every mutant must be caught at each of these suite seeds."""


@dataclass(frozen=True)
class Mutant:
    """One planted defect: ``backend`` builds it, ``ops`` and ``mode`` select the cases that must catch it."""

    name: str
    defect_class: str
    description: str
    backend: Callable[[], Backend]
    ops: str
    mode: str = "quick"

    @property
    def backend_name(self) -> str:
        """The name it is registered under: ``mutant-<name>``."""
        return f"mutant-{self.name}"


def all_mutants() -> list[Mutant]:
    """Every mutant of every ``mutant_*`` module of this package, in module then declaration order."""
    found: list[Mutant] = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name.startswith("mutant_"):
            module = importlib.import_module(f"{__name__}.{info.name}")
            found.extend(module.MUTANTS)
    for m in found:
        declared = getattr(m.backend, "name", m.backend_name)
        assert declared == m.backend_name, f"{m.name}: its backend class is named {declared!r}, not {m.backend_name!r}"
    names = [m.name for m in found]
    duplicates = {n for n in names if names.count(n) > 1}
    assert not duplicates, f"mutant names must be unique: {sorted(duplicates)}"
    return found


class _MutantPlugin:
    """Offers every mutant as a backend, as a third-party plugin would through its entry point."""

    @hookimpl
    def acl_core_backends(self) -> list[BackendRegistration]:
        """One registration per mutant."""
        return [
            BackendRegistration(
                name=m.backend_name, factory=m.backend, summary=m.description, priority=PLANTED_PRIORITY
            )
            for m in all_mutants()
        ]


_PLUGIN = _MutantPlugin()


def register() -> None:
    """Register the mutants in this process (idempotent)."""
    register_plugin(_PLUGIN, "conformance-mutants")

"""Entry point of the reference backend (group ``acl_core.backends``, name ``reference``)."""

from __future__ import annotations

from collections.abc import Sequence

from acl_core.backend import Backend, BackendRegistration
from acl_core.plugin import hookimpl


def _create() -> Backend:
    from acl_reference.backend import ReferenceBackend

    return ReferenceBackend()


@hookimpl
def acl_core_backends() -> Sequence[BackendRegistration]:
    """The reference backend: always available, lowest priority of the real backends."""
    return [
        BackendRegistration(
            name="reference",
            factory=_create,
            priority=0,
            summary="NumPy oracle on the host CPU (float64 where it helps)",
        )
    ]

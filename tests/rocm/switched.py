"""A backend's environment switch set for the length of a ``with`` block (the vector / opt-in kernel paths)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from acl_core.backend import Backend


@contextmanager
def switched(backend: Backend, name: str, value: str) -> Iterator[Backend]:
    """``backend`` with ``name=value`` in its environ inside the block; the previous environ restored after."""
    saved = backend.environ  # type: ignore[attr-defined]
    backend.environ = {**saved, name: value}  # type: ignore[attr-defined]
    try:
        yield backend
    finally:
        backend.environ = saved  # type: ignore[attr-defined]

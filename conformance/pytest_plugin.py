"""pytest plugin of the conformance suite (``pytest --acl-backend NAME``)."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--acl-backend``."""
    parser.addoption(
        "--acl-backend", action="store", default=None, help="acl-core backend to prove against the reference"
    )

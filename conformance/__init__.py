"""acl-core's conformance suite: proves any backend against the NumPy reference.

``acl_conformance.run("mybackend", mode="quick")`` runs every case the operator specs declare on the
backend and on the reference and returns a :class:`Report`; ``acl-core conformance NAME`` and
``pytest --acl-backend NAME`` are the two front ends over the same :class:`Session`.
"""

from __future__ import annotations

from acl_conformance.cases import Case, Catalog
from acl_conformance.expectations import Expectation, ExpectationError
from acl_conformance.report import Report, validate_report
from acl_conformance.runner import Outcome, Runner
from acl_conformance.suite import MODES, Session, default_report_dir, run

__all__ = [
    "MODES",
    "Case",
    "Catalog",
    "Expectation",
    "ExpectationError",
    "Outcome",
    "Report",
    "Runner",
    "Session",
    "default_report_dir",
    "run",
    "validate_report",
]

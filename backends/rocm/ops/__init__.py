"""Operator code of the HIP backend, one module per family: from a validated Launch to kernel launches."""

from __future__ import annotations

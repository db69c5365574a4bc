"""Operators of the reduction family (being declared)."""

from __future__ import annotations

from acl_core.spec.opspec import OpSpec

SPECS: list[OpSpec] = []

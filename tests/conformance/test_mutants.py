"""The suite proves itself: every planted-defect backend fails conformance at every seed; the reference passes."""

from __future__ import annotations

import pytest

from acl_conformance import run
from tests.conformance.mutants import SEEDS, Mutant, all_mutants, register

MUTANTS = all_mutants()


@pytest.fixture(scope="module", autouse=True)
def _mutant_backends() -> None:
    register()


def _failures(report: object) -> list[str]:
    return [f"{o.op}[{o.case}] {o.failure}: {o.message}" for o in report.failed]  # type: ignore[attr-defined]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_suite_catches_the_planted_defect(mutant: Mutant, seed: int) -> None:
    report = run(mutant.backend_name, mode=mutant.mode, ops=mutant.ops, seed=seed)
    assert report.failed, f"{mutant.name} ({mutant.defect_class}: {mutant.description}) passed at seed {seed}"


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("selection", sorted({(m.ops, m.mode) for m in MUTANTS}), ids=lambda s: f"{s[1]}:{s[0]}")
def test_reference_passes_every_mutant_selection(selection: tuple[str, str], seed: int) -> None:
    ops, mode = selection
    report = run("reference", mode=mode, ops=ops, seed=seed)
    assert report.ok, _failures(report)[:5]

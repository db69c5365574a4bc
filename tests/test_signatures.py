"""Every declared operator's parameters match the official prototype in aclnn-signatures.tsv."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from acl_core.spec.ops import all_specs

SUPPLEMENT = Path(__file__).parent / "data" / "signatures-from-notes.tsv"
"""Prototypes absent from aclnn-signatures.tsv, transcribed from cann-contract-notes.md (source column cites it)."""


def _official(cann_facts_dir: Path, path: Path | None = None) -> dict[str, list[tuple[str, str]]]:
    table: dict[str, list[tuple[str, str]]] = {}
    with open(path or cann_facts_dir / "aclnn-signatures.tsv", encoding="utf-8") as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            name = row["name"]
            if not name.endswith("GetWorkspaceSize"):
                continue
            params = []
            for raw in row["parameters"].split(","):
                raw = raw.strip()
                if not raw:
                    continue
                match = re.match(r"^(.*?)([A-Za-z_][A-Za-z0-9_]*)$", raw)
                assert match, raw
                c_type = normalise(match.group(1))
                params.append((match.group(2), c_type))
            table[name[len("aclnn") : -len("GetWorkspaceSize")]] = params[:-2]  # drop workspaceSize, executor
    return table


def normalise(c_type: str) -> str:
    """A C type without const qualifiers and spaces: 'const aclTensor *' -> 'aclTensor*'."""
    c_type = re.sub(r"\bconst\b", "", c_type)
    return re.sub(r"\s+", "", c_type)


@pytest.fixture(scope="module")
def official(cann_facts_dir: Path) -> dict[str, list[tuple[str, str]]]:
    table = _official(cann_facts_dir)
    table.update(_official(cann_facts_dir, SUPPLEMENT))
    return table


NEWER = "newer than the level-2 catalogue"
"""What a supplement row's source says when its page is newer than aclnn-level2-names.txt (it cites the page)."""


def test_supplement_only_fills_gaps_of_the_official_table(cann_facts_dir: Path) -> None:
    official = _official(cann_facts_dir)
    level2 = set((cann_facts_dir / "aclnn-level2-names.txt").read_text(encoding="utf-8").split())
    with open(SUPPLEMENT, encoding="utf-8") as fh:
        sources = {row["name"]: row["source"] for row in csv.DictReader(fh, delimiter="\t")}
    for name in _official(cann_facts_dir, SUPPLEMENT):
        assert name not in official, f"{name} is in aclnn-signatures.tsv; drop it from the supplement"
        source = sources[f"aclnn{name}GetWorkspaceSize"]
        if NEWER in source:  # a page after the catalogue's release: it must name the document it came from
            assert re.search(r"hicann/[\w-]+:\S+\.md \(commit [0-9a-f]{7}", source), source
            assert f"aclnn{name}" not in level2, f"aclnn{name} is in the catalogue; drop '{NEWER}'"
            continue
        assert f"aclnn{name}" in level2, f"aclnn{name} is not a CANN level-2 API"


@pytest.mark.parametrize("name", sorted(all_specs()))
def test_parameters_match_official_prototype(name: str, official: dict[str, list[tuple[str, str]]]) -> None:
    spec = all_specs()[name]
    assert name in official, f"aclnn{name} is not an official operator"
    ours = [(p.name, normalise(p.c_type)) for p in spec.params]
    assert ours == official[name], f"aclnn{name}: declared {ours}, official {official[name]}"

"""Error cases only a kernel can see, generated from the spec's index marks (issue 14 class 4)."""

from __future__ import annotations

import re

import numpy as np

from acl_conformance.cases import Catalog
from acl_core.spec.ops import all_specs


def _index_cases(op: str) -> list[str]:
    catalog = Catalog(all_specs(), ops=op)
    return [c.case_id for c in catalog.all_cases() if c.kind == "error" and " value " in c.case_id]


def test_every_index_parameter_gets_past_the_end_and_below_the_start_cases() -> None:
    marked = [(s.name, p) for s in all_specs().values() for p in s.params if p.index_of is not None]
    every = {"Gather", "GatherV2", "IndexSelect", "Embedding", "Scatter", "ScatterValue", "InplaceScatter"}
    every |= {"InplaceScatterValue", "InplaceScatterUpdate", "MoeFinalizeRouting", "Index", "IndexPutImpl"}
    assert every <= {op for op, _ in marked}
    for op, param in marked:
        ids = [i for i in _index_cases(op) if re.match(rf"error:{param.name}(\[\d+\])? value -?\d+ ", i)]
        assert any("past the end" in i for i in ids), (op, param.name, ids)
        assert any("below the start" in i for i in ids), (op, param.name, ids)


def test_a_list_of_indices_gets_cases_for_its_first_integer_entry() -> None:
    ids = _index_cases("IndexPutImpl")
    assert any(i.startswith("error:indices[0] value -") and i.endswith("below the start") for i in ids), ids


def test_an_in_place_twin_indexes_selfref() -> None:
    (param,) = [p for p in all_specs()["InplaceScatter"].params if p.index_of is not None]
    assert param.index_of is not None and param.index_of.of == "selfRef"


def test_negative_values_follow_the_ops_semantics() -> None:
    # Gather refuses -1; GatherV2 wraps negatives, so only -size-1 lies below its start
    assert "error:index value -1 below the start" in _index_cases("Gather")
    assert any(
        i.startswith("error:index value -") and i != "error:index value -1 below the start"
        for i in _index_cases("GatherV2")
    )


def test_importing_one_kernel_family_first_leaves_every_kernel_registered() -> None:
    import subprocess
    import sys

    code = (
        "import acl_reference.kernels.movement\n"
        "from acl_reference.kernels import all_kernels\n"
        "assert 'Add' in all_kernels() and 'Gather' in all_kernels()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_group_lists_get_negative_oversized_and_non_monotone_cases_for_each_layout() -> None:
    marked = [s.name for s in all_specs().values() for p in s.params if p.group_list_type is not None]
    assert "GroupedMatmulV5" in marked
    ids = [c.case_id for c in Catalog(all_specs(), ops="GroupedMatmulV5").all_cases() if c.kind == "error"]
    for layout in (0, 1):
        assert f"error:groupListOptional with a negative entry (groupListType {layout})" in ids
        assert f"error:groupListOptional covering more than the axis (groupListType {layout})" in ids
    assert "error:groupListOptional not monotone (groupListType 0)" in ids  # counts have no order to break


def test_padding_slot_marks_accept_minus_one_and_count_over_two_dims() -> None:
    # slotMapping indexes [num_blocks, block_size] together, and -1 is a padding token the kernel skips
    ids = _index_cases("ScatterPaKvCache")
    spec = all_specs()["ScatterPaKvCache"]
    sample = next(iter(spec.samples(np.random.default_rng(0))))  # type: ignore[misc]
    blocks, block_size = sample.args["keyCacheRef"].shape[:2]
    assert f"error:slotMapping value {blocks * block_size} past the end" in ids, ids
    assert "error:slotMapping value -2 below the start" in ids, ids

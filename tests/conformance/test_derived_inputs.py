"""Derived conformance inputs (issue 14 class 3): tiers, special values, dims, attributes, offset and stride-0 views."""

from __future__ import annotations

import numpy as np
import pytest

from acl_conformance.cases import Catalog
from acl_core import eager
from acl_core.spec import samples as S
from acl_core.spec.ops import all_specs


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog(all_specs(), seed=0, ops="Add,Mul,Cast,Softmax,ReduceSum,Mm,LayerNorm")


def test_offset_layout_places_a_packed_view_inside_a_larger_allocation() -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    da = eager.to_device(x, "reference", layout="offset")
    t = da.tensor()
    assert (t.offset, t.strides) == (eager.VIEW_OFFSET, (4, 1))
    assert da.storage_elems > x.size + eager.VIEW_OFFSET - 1
    np.testing.assert_array_equal(da.numpy(), x)
    head = da.storage_bytes().view(np.float32)[: x.size]
    assert not np.array_equal(head.reshape(3, 4), x)  # a kernel ignoring the offset reads other values


def test_expanded_layout_gives_broadcast_views_stride_0_and_leaves_others_packed() -> None:
    row = np.arange(4, dtype=np.float32)
    x = np.broadcast_to(row[:, None], (4, 3))
    da = eager.to_device(x, "reference", layout="expanded")
    assert da.tensor().strides == (1, 0)
    assert da.storage_elems == 4
    np.testing.assert_array_equal(da.numpy(), x)
    out = eager.run("Add", "reference", layout="expanded", self=x, other=np.ones((4, 3), np.float32), alpha=1.0)
    np.testing.assert_array_equal(out["out"], x + 1)
    plain = eager.to_device(np.ones((2, 3), np.float32), "reference", layout="expanded")
    assert plain.tensor().strides == (3, 1)


def _notes(catalog: Catalog, op: str, quick: bool | None = None) -> list[str]:
    return [d.note for d in catalog.op(op).derived if quick is None or d.quick == quick]


def test_elementwise_tiers_cross_block_and_grid_sizes(catalog: Catalog) -> None:
    quick = _notes(catalog, "Add", quick=True)
    assert any(f"tier [{n}]" in q for q in quick for n in S.ELEMENTWISE_QUICK)
    full = _notes(catalog, "Add")
    assert all(any(f"tier [{n}]" in f for f in full) for n in S.ELEMENTWISE_TIERS)
    assert max(S.ELEMENTWISE_TIERS) > 4_000_000 and 65537 in S.ELEMENTWISE_QUICK
    ops = catalog.op("Add")
    index = len(ops.samples) + next(i for i, d in enumerate(ops.derived) if d.note.endswith("tier [65537]"))
    sample = ops.sample(index)
    assert {a.shape for a in (sample.args["self"], sample.args["other"])} == {(65537,)}


def test_row_and_gemm_tiers(catalog: Catalog) -> None:
    rows = _notes(catalog, "ReduceSum", quick=True)
    assert any("row tier 1025" in n for n in rows)
    ops = catalog.op("ReduceSum")
    i = next(i for i, d in enumerate(ops.derived) if "row tier 4097" in d.note)
    sample = ops.sample(len(ops.samples) + i)
    assert sample.args["self"].shape[-1] == 4097 and sample.args["dims"] == [-1]
    norm = catalog.op("LayerNorm")
    assert any("row tier 4097" in d.note for d in norm.derived)  # normalizedShape follows the row
    gemm = _notes(catalog, "Mm", quick=True)
    assert any("K=1025" in n for n in gemm)
    assert any("K=4096" in n for n in _notes(catalog, "Mm"))


def test_special_values_reach_every_float_input_and_cast(catalog: Catalog) -> None:
    ops = catalog.op("Add")
    base = len(ops.samples)
    found = [ops.sample(base + i) for i, d in enumerate(ops.derived) if "every float input" in d.note]
    assert found
    f32 = next(s for s in found if s.args["self"].dtype == np.float32)
    for name in ("self", "other"):
        a = f32.args[name]
        assert np.isnan(a).any() and np.isinf(a).any(), name
    assert any(
        ((s.args["self"] != 0) & (np.abs(s.args["self"]) < np.finfo(np.float32).tiny)).any()
        for s in found
        if s.args["self"].dtype == np.float32
    )
    cast = catalog.op("Cast")
    casts = [cast.sample(len(cast.samples) + i) for i, d in enumerate(cast.derived) if "every float input" in d.note]
    assert any(np.isnan(s.args["self"].astype(np.float64)).any() for s in casts)


def test_integer_extremes_overflow(catalog: Catalog) -> None:
    ops = catalog.op("Add")
    ints = [ops.sample(len(ops.samples) + i) for i, d in enumerate(ops.derived) if "integer extremes" in d.note]
    i32 = next(s for s in ints if s.args["self"].dtype == np.int32)
    assert np.iinfo(np.int32).max in i32.args["self"] and np.iinfo(np.int32).min in i32.args["other"]


def test_every_negative_dim_and_multi_dim_both_keepdims(catalog: Catalog) -> None:
    soft = _notes(catalog, "Softmax")
    assert {"dim=-1", "dim=-2", "dim=-3"} <= {n.rsplit(" ", 1)[-1] for n in soft}
    red = _notes(catalog, "ReduceSum")
    assert any("dims=[-1, -3] keepDims=False" in n for n in red)
    assert any("dims=[-1, -3] keepDims=True" in n for n in red)


def test_quick_keeps_one_layout_per_sample_with_offset_and_expanded_in_rotation(catalog: Catalog) -> None:
    cases = [c for c in catalog.all_cases() if c.op == "Add" and c.kind == "value"]
    layouts = {c.layout for c in cases if c.quick}
    assert {"offset", "expanded", "padded", "transposed"} <= layouts
    for i in range(len(catalog.op("Add").samples)):
        assert sum(1 for c in cases if c.sample == i and c.quick and c.layout != "contiguous") <= 1

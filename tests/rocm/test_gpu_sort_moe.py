"""Topk, Sort, Argsort, IndexPutImpl and the MoE family on the GPU, against the NumPy reference (GPU tier).

Every sample of each op runs in every layout (contiguous, padded, transposed) with guard bytes;
sorts and index puts must match exactly (stable order, NaN above +Inf, duplicates: last wins or
all summed in C order), MoE results within the conformance tolerance. Extra cases cover ties, NaN
and ±Inf, -0.0, k = 1 and k = row length, rows longer than one shared-memory tile (the merge
path), many rows, 64-bit keys, duplicate indices in bulk, long gating rows, and device-side index
errors reported as 161002 at synchronisation.
"""

from __future__ import annotations

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.dtypes import from_numpy
from acl_core.errors import AclnnError
from acl_core.spec import samples as S
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.moe import distinct_logits, routing_indices
from acl_rocm.kernels.sort import TILE
from tests.conftest import assert_close

pytestmark = pytest.mark.gpu

EXACT = ("Topk", "Sort", "Argsort", "IndexPutImpl")
OPS = (*EXACT, "MoeGatingTopKSoftmax", "MoeInitRouting", "MoeFinalizeRouting")


def _dtypes(args: dict) -> set[D]:
    found = set()
    for v in args.values():
        for a in v if isinstance(v, list) else [v]:
            if isinstance(a, np.ndarray):
                found.add(from_numpy(a.dtype))
    return found


def _check(rocm: Backend, reference: Backend, op: str, args: dict, note: str, layouts: tuple[str, ...]) -> None:
    want = eager.run(op, reference, op_args=args)
    for layout in layouts:
        got = eager.run(op, rocm, layout=layout, op_args=args, guard=True)
        assert got.keys() == want.keys()
        for name, value in want.items():
            g = got[name]
            where = f"{op} [{note}] {layout} {name}"
            assert g.dtype == value.dtype and g.shape == value.shape, where
            if op in EXACT:
                np.testing.assert_array_equal(g, value, err_msg=where)
            else:
                try:
                    assert_close(g, value)
                except AssertionError as exc:
                    raise AssertionError(f"{where}\n{exc}") from None


@pytest.mark.parametrize("op", OPS)
def test_every_sample_matches_the_reference(rocm: Backend, reference: Backend, op: str) -> None:
    assert op in rocm.capabilities().ops
    spec = get_spec(op)
    assert spec.samples is not None
    claimed = set(rocm.capabilities().dtypes)
    ran = 0
    for sample in spec.samples(np.random.default_rng(2024)):
        assert _dtypes(sample.args) <= claimed, sample.note
        _check(rocm, reference, op, dict(sample.args), sample.note, eager.LAYOUTS)
        ran += 1
    assert ran


def _special(rng: np.random.Generator, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    x = rng.integers(-4, 5, shape).astype(dtype)  # few distinct values: many ties
    if np.dtype(dtype).kind == "f":
        flat = x.reshape(-1)
        n = flat.size
        for i, v in enumerate((np.nan, np.inf, -np.inf, -0.0, np.nan)):
            flat[(i * 7919) % n] = v
    return x


SORT_DTYPES = [np.float32, np.float16, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint64]
LENGTHS = [1, 2, 7, 64, 1000, TILE, TILE + 1, 3 * TILE + 5, 40000]


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("dtype", SORT_DTYPES, ids=[np.dtype(d).name for d in SORT_DTYPES])
def test_sort_argsort_topk_rows(rocm: Backend, reference: Backend, dtype: type, length: int) -> None:
    rng = np.random.default_rng(length)
    rows = 3 if length > TILE else 17
    x = _special(rng, (rows, length), dtype)
    layouts = ("contiguous", "transposed")
    if dtype is not np.float64:  # Sort refuses float64 (CANN's Sort dtypes)
        for descending in (False, True):
            args = {"self": x, "stable": True, "dim": 1, "descending": descending}
            _check(rocm, reference, "Sort", args, f"{length} desc={descending}", layouts)
            _check(rocm, reference, "Argsort", {"self": x, "dim": -1, "descending": descending}, f"{length}", layouts)
    for k in sorted({1, min(5, length), length}):
        for largest in (True, False):
            args = {"self": x, "k": k, "dim": 1, "largest": largest, "sorted": True}
            _check(rocm, reference, "Topk", args, f"{length} k={k} largest={largest}", layouts)


def test_sort_along_a_leading_dim_and_bf16(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(1)
    x = _special(rng, (TILE + 300, 3, 2), np.float32)
    _check(rocm, reference, "Sort", {"self": x, "stable": True, "dim": 0, "descending": True}, "dim 0", eager.LAYOUTS)
    b = S.array(rng, (100, 3), D.ACL_BF16, special=True)
    top = {"self": b, "k": 7, "dim": 0, "largest": False, "sorted": True}
    _check(rocm, reference, "Topk", top, "bf16", ("padded",))
    bools = rng.random((5, 3000)) < 0.5
    _check(rocm, reference, "Sort", {"self": bools, "stable": True, "dim": 1, "descending": True}, "bool", ("padded",))


@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int8, np.int32, np.int64, np.bool_])
def test_index_put_duplicates(rocm: Backend, reference: Backend, dtype: type, accumulate: bool) -> None:
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((50, 9)) * 3).astype(dtype)
    idx = rng.integers(-50, 50, 20000).astype(np.int64)  # ~400 copies per row: long runs, multi-tile sort
    values = (rng.standard_normal((20000, 9)) * 3).astype(dtype)
    args = {"selfRef": x, "indices": [idx], "values": values, "accumulate": accumulate, "unsafe": True}
    # float sums too must equal the reference bit for bit: duplicates are added in C order, one rounding each
    _check(rocm, reference, "IndexPutImpl", args, f"dup accumulate={accumulate}", ("contiguous", "transposed"))


def test_index_put_two_indices(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 4, 5)).astype(np.float32)
    rows = rng.integers(-6, 6, (30, 1)).astype(np.int32)
    cols = rng.integers(0, 5, (1, 8)).astype(np.int64)
    empty = np.zeros(0, np.int64)
    for accumulate in (False, True):
        for indices in ([rows, empty, cols], [empty, rows % 4, cols]):
            args = {"selfRef": x, "indices": indices, "values": np.float32(2.5), "accumulate": accumulate}
            _check(rocm, reference, "IndexPutImpl", {**args, "unsafe": True}, f"acc={accumulate}", eager.LAYOUTS)


@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put_bool_mask(rocm: Backend, reference: Backend, accumulate: bool) -> None:
    rng = np.random.default_rng(6)
    x = rng.standard_normal((3, 300, 40)).astype(np.float16)
    mask = rng.random((300, 40)) < 0.3  # 12,000 mask elements: a multi-tile rank sort
    none = np.zeros(0, np.int64)
    for values in (rng.standard_normal((3, int(mask.sum()))), np.array([2.5])):
        args = {"selfRef": x, "indices": [none, mask], "values": values.astype(np.float16), "accumulate": accumulate}
        _check(rocm, reference, "IndexPutImpl", {**args, "unsafe": True}, f"mask acc={accumulate}", eager.LAYOUTS)


def test_moe_pipeline_at_scale(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(4)
    for rows, experts, k in ((300, 8, 2), (64, 128, 8), (16, 4096, 4), (5, 5000, 1)):
        x = distinct_logits(rng, rows, experts).astype(np.float32)
        finished = rng.random(rows) < 0.2
        _check(rocm, reference, "MoeGatingTopKSoftmax", {"x": x, "k": k, "finishedOptional": finished}, "", ("padded",))
    expert, row = routing_indices(rng, 700, 16, 4)  # 2800 copies: more than a tile
    x = rng.standard_normal((700, 32)).astype(np.float16)
    for active in (0, 300, 700):
        args = {"x": x, "rowIdx": row, "expertIdx": expert, "activeNum": active}
        _check(rocm, reference, "MoeInitRouting", args, f"active={active}", ("contiguous", "transposed"))
    expanded = eager.run("MoeInitRouting", reference, x=x, rowIdx=row, expertIdx=expert, activeNum=700)
    args = {
        "expandedX": rng.standard_normal((2800, 32)).astype(np.float16),
        "x1": x,
        "x2Optional": x,
        "bias": rng.standard_normal((16, 32)).astype(np.float16),
        "scales": rng.random((700, 4)).astype(np.float16),
        "expandedRowIdx": expanded["expandedRowIdxOut"],
        "expandedExpertIdx": expert,
    }
    _check(rocm, reference, "MoeFinalizeRouting", args, "700 rows", eager.LAYOUTS)


def test_device_index_errors(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(5)
    cases = []
    x = rng.standard_normal((3, 4)).astype(np.float32)
    cases.append(("IndexPutImpl", {"selfRef": x, "indices": [np.array([0, -4])], "values": np.float32(1.0)}))
    expert, row = routing_indices(rng, 4, 6, 2)
    row[2, 1] = 99
    y = rng.standard_normal((4, 3)).astype(np.float32)
    cases.append(("MoeInitRouting", {"x": y, "rowIdx": row, "expertIdx": expert, "activeNum": 4}))
    for op, args in cases:
        if op == "IndexPutImpl":
            args = {**args, "accumulate": False, "unsafe": True}
        for backend in (reference, rocm):
            with pytest.raises(AclnnError) as err:
                eager.run(op, backend, op_args=args)
            assert err.value.code == 161002, f"{op} on {backend.name}"

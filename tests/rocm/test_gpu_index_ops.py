"""Range, Linspace, Eye, Diag, DiagFlat, OneHot, Roll, Take, GatherNd and GatherV3 on the GPU, against the reference.

Every op is exact on rocm (copies, and one rounding of the reference's double formula for Range and
Linspace), so results are compared bit for bit: the spec's samples in every layout (contiguous,
padded, transposed, offset, expanded), every claimed dtype, sizes that cross block boundaries,
negative dims, and bad index values, which fail with the reference's 161002 through the device
flag and leave the output as it was. ``ACL_ROCM_EMULATE=1`` runs it on the CPU (slow: modest shapes).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.dtypes import from_numpy
from acl_core.errors import AclCoreError, AclnnError
from acl_core.spec.ops import get_spec
from acl_rocm.ops.index_ops import OPS

pytestmark = pytest.mark.gpu


def _dtypes(args: dict) -> set[D]:
    return {from_numpy(a.dtype) for a in args.values() if isinstance(a, np.ndarray)}


def _same(note: str, got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, note
    np.testing.assert_array_equal(got, want, err_msg=note)


def _compare(rocm: Backend, reference: Backend, op: str, args: dict[str, Any], note: str, layout: str = "") -> None:
    want = eager.run(op, reference, op_args=args)
    for lay in [layout] if layout else eager.LAYOUTS:
        got = eager.run(op, rocm, layout=lay, op_args=args, guard=True)
        assert got.keys() == want.keys()
        for name, value in want.items():
            _same(f"{op} [{note}] {lay} {name}", got[name], value)


def _claimed(rocm: Backend, op: str) -> list[D]:
    return sorted(rocm.capabilities().op_dtypes[op])


def _values(rng: np.random.Generator, shape: tuple[int, ...], dt: D) -> np.ndarray:
    np_dt = dt.numpy
    assert np_dt is not None
    if dt == D.ACL_BOOL:
        return rng.integers(0, 2, shape).astype(np.bool_)
    if dt.is_float:
        return rng.standard_normal(shape).astype(np_dt)
    return rng.integers(0, 100, shape).astype(np_dt)


def test_every_op_is_claimed(rocm: Backend) -> None:
    assert set(OPS) <= set(rocm.capabilities().ops)


@pytest.mark.parametrize("op", OPS)
def test_samples_match_reference(rocm: Backend, reference: Backend, op: str) -> None:
    spec = get_spec(op)
    assert spec.samples is not None
    claimed = set(_claimed(rocm, op))
    ran = 0
    for sample in spec.samples(np.random.default_rng(2024)):
        if not _dtypes(sample.args) <= claimed | {D.ACL_INT32, D.ACL_INT64, D.ACL_UINT8}:
            continue
        _compare(rocm, reference, op, sample.args, sample.note)
        ran += 1
    assert ran > 0


@pytest.mark.parametrize("op", OPS)
def test_error_samples_match_reference_codes(rocm: Backend, reference: Backend, op: str) -> None:
    spec = get_spec(op)
    for case in spec.error_samples(np.random.default_rng(5)) if spec.error_samples else []:
        with pytest.raises(AclCoreError) as want:
            eager.run(op, reference, op_args=case.args)
        with pytest.raises(AclCoreError) as got:
            eager.run(op, rocm, op_args=case.args)
        assert got.value.code == want.value.code, f"{op} [{case.note}]: {got.value.message}"


# ----------------------------------------------------------------------------- every claimed dtype
def test_construction_every_claimed_out_dtype(rocm: Backend, reference: Backend) -> None:
    for dt in _claimed(rocm, "Range"):
        args = {"start": -3, "end": 300, "step": 1, "out": np.zeros((304,), dt.numpy)}
        _compare(rocm, reference, "Range", args, dt.short, "padded")
    for dt in _claimed(rocm, "Linspace"):
        # 333 steps cross a block boundary; the ratio 1/332 is inexact in binary
        args = {"start": -1.0, "end": 120.0, "steps": 333, "out": np.zeros((333,), dt.numpy)}
        _compare(rocm, reference, "Linspace", args, dt.short, "padded")
    for dt in _claimed(rocm, "Eye"):
        _compare(rocm, reference, "Eye", {"n": 17, "m": 23, "out": np.zeros((17, 23), dt.numpy)}, dt.short, "padded")


def test_linspace_matches_the_double_formula_exactly(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(3)
    for _ in range(4):
        start, end = (float(v) for v in rng.standard_normal(2) * 1e3)
        for steps in (2, 3, 257, 1001):
            args = {"start": start, "end": end, "steps": steps, "out": np.zeros((steps,), np.float64)}
            _compare(rocm, reference, "Linspace", args, f"{start}..{end} in {steps}", "contiguous")


@pytest.mark.parametrize("op", ["Diag", "DiagFlat", "Roll", "Take", "GatherNd", "GatherV3"])
def test_every_claimed_dtype(rocm: Backend, reference: Backend, op: str) -> None:
    rng = np.random.default_rng(11)
    for dt in _claimed(rocm, op):
        x = _values(rng, (6, 7), dt)
        if op in ("Diag", "DiagFlat"):
            args: dict[str, Any] = {"self": x, "diagonal": -2}
        elif op == "Roll":
            args = {"x": x, "shifts": [3, -2], "dims": [1, -2]}
        elif op == "Take":
            args = {"self": x, "index": rng.integers(-42, 42, (5, 3))}
        elif op == "GatherNd":
            idx = np.stack([rng.integers(-6, 6, (4,)), rng.integers(-7, 7, (4,))], axis=-1)
            args = {"self": x, "indices": idx, "negativeIndexSupport": True}
        else:
            args = {"self": x, "dim": -1, "index": rng.integers(0, 7, (3, 2)), "batchDims": 0, "mode": 0}
        _compare(rocm, reference, op, args, dt.short, "transposed")


def test_one_hot_every_claimed_pair(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(12)
    for value_dt in _claimed(rocm, "OneHot"):
        np_dt = value_dt.numpy
        on, off = np.array([5, 1], np_dt), np.array([2], np_dt)
        for index_dt in (np.uint8, np.int32, np.int64):
            idx = rng.integers(0, 9, (3, 4)).astype(index_dt)
            args = {"self": idx, "numClasses": 7, "onValue": on, "offValue": off, "axis": 1}
            _compare(rocm, reference, "OneHot", args, f"{value_dt.short} from {np.dtype(index_dt)}", "padded")


# ----------------------------------------------------------------------------- sizes, views, dims
def test_odd_sizes_cross_block_boundaries(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(13)
    x = rng.standard_normal((37, 29)).astype(np.float32)
    _compare(rocm, reference, "Take", {"self": x, "index": rng.integers(-1073, 1073, (613,))}, "613 takes")
    _compare(rocm, reference, "Roll", {"x": x, "shifts": [-5, 400], "dims": [-1, 0]}, "two dims")
    _compare(rocm, reference, "Roll", {"x": x, "shifts": [517], "dims": []}, "flat")
    _compare(rocm, reference, "DiagFlat", {"self": x[:3], "diagonal": 3}, "87 on a diagonal")
    _compare(rocm, reference, "Diag", {"self": x, "diagonal": -4}, "diagonal of a tall matrix")
    idx = np.stack([rng.integers(0, 37, (301,)), rng.integers(-29, 29, (301,))], axis=-1).astype(np.int32)
    _compare(rocm, reference, "GatherNd", {"self": x, "indices": idx, "negativeIndexSupport": True}, "301 pairs")
    x3 = rng.standard_normal((5, 33, 7)).astype(np.float16)
    args = {"self": x3, "dim": 1, "index": rng.integers(0, 33, (5, 61)), "batchDims": 1, "mode": 1}
    _compare(rocm, reference, "GatherV3", args, "batched, 61 per batch")
    on, off = np.array([1.0], np.float32), np.array([0.0], np.float32)
    args = {"self": rng.integers(-1, 12, (31, 9)), "numClasses": 11, "onValue": on, "offValue": off, "axis": 0}
    _compare(rocm, reference, "OneHot", args, "axis 0, values out of range give off")


def test_views_with_an_offset_and_expanded_inputs(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(14)
    row = rng.standard_normal((1, 9)).astype(np.float32)
    wide = np.broadcast_to(row, (5, 9))  # laid out with stride 0 in the "expanded" layout
    _compare(rocm, reference, "Take", {"self": wide, "index": np.array([[0, 44], [-1, 13]])}, "expanded self")
    _compare(rocm, reference, "Roll", {"x": wide, "shifts": [2, 3], "dims": [0, 1]}, "expanded x")
    _compare(rocm, reference, "DiagFlat", {"self": wide, "diagonal": -1}, "expanded, flattened")
    index = np.broadcast_to(np.array([[3], [0], [4]]), (3, 6))
    args = {"self": wide, "dim": 0, "index": index, "batchDims": 0, "mode": 0}
    _compare(rocm, reference, "GatherV3", args, "expanded index")
    idx = np.broadcast_to(np.array([[1, -2]]), (4, 2))
    _compare(rocm, reference, "GatherNd", {"self": wide, "indices": idx, "negativeIndexSupport": True}, "expanded")


def test_negative_dims(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(15)
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    _compare(rocm, reference, "Roll", {"x": x, "shifts": [1, -7, 2], "dims": [-1, -3, -1]}, "negative dims")
    args = {"self": x, "dim": -2, "index": np.array([[3, 0], [-0, 2]]), "batchDims": 0, "mode": 0}
    _compare(rocm, reference, "GatherV3", args, "dim -2")
    on, off = np.array([7], np.int8), np.array([-1], np.int8)
    args = {"self": np.array([[0, 2], [1, 3]], np.int32), "numClasses": 3, "onValue": on, "offValue": off, "axis": -1}
    _compare(rocm, reference, "OneHot", args, "axis -1")


def test_gather_nd_one_index_vector_and_trailing_slices(rocm: Backend, reference: Backend) -> None:
    x = np.random.default_rng(16).standard_normal((4, 5, 6)).astype(np.float32)
    for idx in (np.array([3, -1, 2]), np.array([1, 4]), np.array([[[2], [0]], [[3], [1]]], np.int32)):
        args = {"self": x, "indices": idx, "negativeIndexSupport": True}
        _compare(rocm, reference, "GatherNd", args, f"indices {idx.shape}")


# ----------------------------------------------------------------------------- bad index values
BAD: list[tuple[str, dict[str, Any], str]] = [
    ("Take", {"index": np.array([[0, 12]])}, "past numel"),
    ("Take", {"index": np.array([1, -13])}, "below -numel"),
    ("GatherNd", {"indices": np.array([[0, 1], [3, 0]]), "negativeIndexSupport": True}, "past dim 0"),
    ("GatherNd", {"indices": np.array([[0, -1]]), "negativeIndexSupport": False}, "negative, unsupported"),
    ("GatherNd", {"indices": np.array([[0, -5]]), "negativeIndexSupport": True}, "below -size"),
    ("GatherV3", {"dim": 1, "index": np.array([[0, 4]]), "batchDims": 0, "mode": 0}, "past the end"),
    ("GatherV3", {"dim": -1, "index": np.array([2, -1]), "batchDims": 0, "mode": 1}, "negative"),
]


@pytest.mark.parametrize(("op", "args", "note"), BAD, ids=[f"{op}-{note}" for op, _, note in BAD])
def test_bad_index_values_fail_and_leave_the_output_untouched(
    rocm: Backend, reference: Backend, op: str, args: dict[str, Any], note: str
) -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    call = {"self": x, **args}
    key = "index" if "index" in call else "indices"
    good = {**call, key: np.zeros_like(call[key])}
    expected = eager.run(op, reference, op_args=good)["out"]
    with pytest.raises(AclnnError) as want:
        eager.run(op, reference, op_args=call)
    out = eager.to_device(np.full(expected.shape, 7.0, np.float32), rocm)
    with pytest.raises(AclnnError) as got:
        eager.run(op, rocm, op_args={**call, "out": out})
    assert got.value.code == want.value.code == 161002
    untouched = np.full(expected.shape, 7.0, np.float32)
    if op == "Take" and rocm.runners["index_ops"].take_check() == "fused":  # type: ignore[attr-defined]
        # ACL_TAKE_CHECK=fused: the elements with good indices are written, the bad ones are left as they were
        flat, n = np.asarray(call[key]).reshape(-1), x.size
        ok = (flat >= -n) & (flat < n)
        untouched.reshape(-1)[ok] = x.reshape(-1)[flat[ok]]
    np.testing.assert_array_equal(out.numpy(), untouched)
    eager.run(op, rocm, op_args={**good, "out": out})  # the backend is usable after the error
    np.testing.assert_array_equal(out.numpy(), expected)


@pytest.mark.parametrize("setting", ["launch", "vec", "fused"])
def test_take_check_settings(rocm: Backend, reference: Backend, monkeypatch: pytest.MonkeyPatch, setting: str) -> None:
    """ACL_TAKE_CHECK forced on the backend: Take is exact in every layout (offset views put ``vec``'s first
    values before a 16-byte boundary; strided ones take the Check launch), and a bad index anywhere (before the
    first whole vector, inside, in the tail) fails with 161002, leaving ``out`` as it was (``fused``: good
    elements may be written)."""
    monkeypatch.setattr(rocm, "environ", {**rocm.environ, "ACL_TAKE_CHECK": setting})  # type: ignore[attr-defined]
    assert rocm.runners["index_ops"].take_check() == setting  # type: ignore[attr-defined]
    rng = np.random.default_rng(33)
    x = rng.standard_normal(777).astype(np.float32)
    for n in (1, 3, 37, 1029):
        for dt in (np.int64, np.int32):
            index = rng.integers(-777, 777, n).astype(dt)
            _compare(rocm, reference, "Take", {"self": x, "index": index}, f"{setting} {n} {dt.__name__}")
    for where in (0, 1, 2, 500, 1027, 1028):
        for dt in (np.int64, np.int32):
            index = rng.integers(-777, 777, 1029).astype(dt)
            index[where] = 777 if where % 2 else -778
            out = eager.to_device(np.full(1029, 7.0, np.float32), rocm)
            with pytest.raises(AclnnError) as got:
                eager.run("Take", rocm, op_args={"self": x, "index": index, "out": out})
            assert got.value.code == 161002
            want = np.full(1029, 7.0, np.float32)
            if setting == "fused":  # a good element is written or (once its block sees the flag) left; a bad one left
                ok = (index >= -777) & (index < 777)
                want[ok] = np.where(out.numpy()[ok] == 7.0, 7.0, x[index[ok]])
            _same(f"{setting}: bad index at {where}", out.numpy(), want)

"""The reference's data-movement ops against PyTorch's CPU results, hand-computed cases and error codes."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from acl_core import acl, aclnn, eager
from acl_core.errors import AclnnError
from acl_core.spec.ops import all_specs
from tests.conftest import assert_close
from tests.ops.exact import data, fails, same
from tests.ops.torch_ref import ref, to_numpy, to_torch

BF16 = ml_dtypes.bfloat16
DTYPES = [np.float32, np.float16, BF16, np.int32, np.int8, np.bool_]
IDX = [np.int32, np.int64]


# ----------------------------------------------------------------------------- gathers
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("idx_dtype", IDX, ids=lambda d: np.dtype(d).name)
def test_embedding_matches_torch(dtype: type, idx_dtype: type, rng: np.random.Generator) -> None:
    w = data(rng, (7, 3), dtype)
    idx: np.ndarray = rng.integers(0, 7, size=(2, 5)).astype(idx_dtype)
    got = ref("Embedding", weight=w, indices=idx)["out"]
    tw, ti = to_torch(w), torch.from_numpy(idx).long()
    same(got, F.embedding(ti, tw) if dtype in (np.float32, np.float16) else tw[ti])


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_index_select_and_gather_v2_match_torch(dtype: type, dim: int, rng: np.random.Generator) -> None:
    x = data(rng, (4, 5, 3), dtype)
    n = x.shape[dim]
    idx = rng.integers(0, n, size=(6,)).astype(np.int32)
    tx = to_torch(x)
    same(ref("IndexSelect", self=x, dim=dim, index=idx)["out"], torch.index_select(tx, dim, torch.from_numpy(idx)))
    idx2 = rng.integers(-n, n, size=(2, 3)).astype(np.int64)  # GatherV2 keeps the index shape and wraps negatives
    key = (slice(None),) * (dim % 3) + (torch.from_numpy(idx2),)
    same(ref("GatherV2", self=x, dim=dim, index=idx2)["out"], tx[key])


def test_index_select_zero_d_and_empty(rng: np.random.Generator) -> None:
    x0 = np.array(2.5, np.float32)
    same(
        ref("IndexSelect", self=x0, dim=0, index=np.array([0]))["out"],
        torch.from_numpy(x0).index_select(0, torch.tensor([0])),
    )
    x = data(rng, (3, 4), np.float32)
    got = ref("IndexSelect", self=x, dim=1, index=np.zeros((0,), np.int64))["out"]
    same(got, torch.from_numpy(x).index_select(1, torch.zeros(0, dtype=torch.long)))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gather_matches_torch(dtype: type, dim: int, rng: np.random.Generator) -> None:
    x = data(rng, (4, 5, 3), dtype)
    shape = [3, 4, 2]  # smaller than self off the gather dim, larger along it
    shape[dim] = 7
    idx = rng.integers(0, x.shape[dim], size=shape).astype(np.int64)
    same(ref("Gather", self=x, dim=dim, index=idx)["out"], torch.gather(to_torch(x), dim, torch.from_numpy(idx)))


# ----------------------------------------------------------------------------- advanced indexing
NONE = np.zeros((0,), np.int64)  # CANN's marker for "this dimension is not indexed"


def torch_key(indices: list[np.ndarray]) -> tuple[Any, ...]:
    """The torch key for CANN-style indices: an empty entry is a whole-dimension slice, a bool one a mask."""
    return tuple(
        slice(None) if i.size == 0 else torch.from_numpy(i) if i.dtype == np.bool_ else torch.from_numpy(i).long()
        for i in indices
    )


INDEX_CASES = {
    "one dim": lambda r: [r.integers(-4, 4, size=(2, 3))],
    "broadcast pair": lambda r: [r.integers(0, 4, size=(2, 1)), r.integers(-5, 5, size=(3,)).astype(np.int32)],
    "whole first dim": lambda r: [NONE, r.integers(0, 5, size=(2, 2))],
    "separated by a slice": lambda r: [r.integers(0, 4, size=(3,)), NONE, r.integers(0, 3, size=(1,))],
    "all three": lambda r: [r.integers(0, 4, size=(2,)), r.integers(0, 5, size=(2,)), r.integers(0, 3, size=(2,))],
}


@pytest.mark.parametrize("case", sorted(INDEX_CASES))
@pytest.mark.parametrize("dtype", [np.float32, BF16, np.int64, np.bool_], ids=lambda d: np.dtype(d).name)
def test_index_matches_torch_advanced_indexing(case: str, dtype: type, rng: np.random.Generator) -> None:
    x = data(rng, (4, 5, 3), dtype)
    indices = [np.asarray(i) for i in INDEX_CASES[case](rng)]
    same(ref("Index", self=x, indices=indices)["out"], to_torch(x)[torch_key(indices)])


@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int8, np.bool_], ids=lambda d: np.dtype(d).name)
def test_index_put_impl_matches_torch(accumulate: bool, dtype: type, rng: np.random.Generator) -> None:
    x = data(rng, (5, 4, 3), dtype)
    if accumulate:  # duplicates (and a negative alias of row 2) must all be added
        indices: list[np.ndarray] = [np.array([2, 0, 2, -3], np.int64), np.array([1, 1, 1, 1], np.int32)]
    else:  # distinct positions: plain assignment of duplicates has no defined order
        indices = [np.array([4, 0, 1], np.int64), np.array([3, 3, 0], np.int64)]
    values = data(rng, (3,), dtype)  # broadcast over the indexed block [n, 3]
    got = ref("IndexPutImpl", selfRef=x, indices=indices, values=values, accumulate=accumulate, unsafe=False)
    want = torch.from_numpy(x.copy()).index_put_(torch_key(indices), torch.from_numpy(values), accumulate=accumulate)
    same(got["selfRef"], want)


def test_index_put_accumulate_by_hand() -> None:
    x = np.zeros(4, np.float32)
    got = ref(
        "IndexPutImpl",
        selfRef=x,
        indices=[np.array([1, 1, 3, 1])],
        values=np.array([1, 2, 4, 8], np.float32),
        accumulate=True,
        unsafe=True,
    )
    same(got["selfRef"], np.array([0, 11, 0, 4], np.float32))
    # without accumulate, the reference settles duplicates deterministically: the last one wins
    got = ref(
        "IndexPutImpl",
        selfRef=x,
        indices=[np.array([1, 1, 3, 1])],
        values=np.array([1, 2, 4, 8], np.float32),
        accumulate=False,
        unsafe=True,
    )
    same(got["selfRef"], np.array([0, 8, 0, 4], np.float32))


def test_index_put_with_whole_dims_and_slices(rng: np.random.Generator) -> None:
    x = data(rng, (3, 4, 2), np.float16)
    indices = [NONE, np.array([0, 3]), np.array([[1], [0]])]
    got = ref("IndexPutImpl", selfRef=x, indices=indices, values=np.array(7, np.float16), accumulate=False, unsafe=True)
    want = torch.from_numpy(x.copy())
    want[torch_key(indices)] = 7
    same(got["selfRef"], want)


MASK_CASES = {
    "mask of rows": lambda r: [r.random(5) < 0.5],
    "mask over two dims": lambda r: [r.random((5, 4)) < 0.5],
    "whole dim, then a mask": lambda r: [NONE, r.random((4, 3)) < 0.5],
    "int index, then a mask": lambda r: [r.integers(-5, 5, size=(1,)), r.random(4) < 0.5],
    "mask, then an int index": lambda r: [r.random(5) < 0.5, NONE, r.integers(0, 3, size=(1,)).astype(np.int32)],
    "all-false mask": lambda r: [np.zeros((5, 4), np.bool_)],
}


@pytest.mark.parametrize("case", sorted(MASK_CASES))
@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, BF16, np.int64, np.bool_], ids=lambda d: np.dtype(d).name)
def test_index_put_bool_masks_match_torch(case: str, accumulate: bool, dtype: type, rng: np.random.Generator) -> None:
    x = data(rng, (5, 4, 3), dtype)
    indices = [np.asarray(i) for i in MASK_CASES[case](rng)]
    key = torch_key(indices)
    block = to_torch(x)[key].shape  # torch's own reading of the mask: its true elements, in C order
    for shape in (tuple(block), tuple(block[-1:])):  # a value per element, and one row broadcast
        values = data(rng, shape, dtype)
        got = ref("IndexPutImpl", selfRef=x, indices=indices, values=values, accumulate=accumulate, unsafe=False)
        want = to_torch(x.copy())
        if accumulate:
            want[key] += to_torch(values)  # no duplicates: a mask names each element at most once
        else:
            want[key] = to_torch(values)
        same(got["selfRef"], want)


def test_index_put_mask_errors(rng: np.random.Generator) -> None:
    x = data(rng, (3, 4), np.float32)
    mask = np.array([True, False, True])  # two rows
    for values in (data(rng, (3, 4), np.float32), data(rng, (1, 3), np.float32)):
        fails(161002, "IndexPutImpl", selfRef=x, indices=[mask], values=values, accumulate=False, unsafe=True)
    ones = np.ones((2, 4), np.float32)
    ok = ref("IndexPutImpl", selfRef=x, indices=[mask], values=ones, accumulate=False, unsafe=True)
    same(ok["selfRef"], np.where(mask[:, None], np.float32(1), x))
    for bad in ([mask[:2]], [np.array(True)], [mask, np.ones((4, 1), np.bool_)], [np.ones((3, 4, 1), np.bool_)]):
        fails(161002, "IndexPutImpl", selfRef=x, indices=bad, values=x[:1, :1], accumulate=False, unsafe=True)


# ----------------------------------------------------------------------------- scatters
REDUCE = {0: None, 1: "add", 2: "multiply"}


@pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter")
@pytest.mark.parametrize("reduce", [0, 1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("dim", [0, -1])
def test_scatter_matches_torch(reduce: int, dtype: type, dim: int, rng: np.random.Generator) -> None:
    x = data(rng, (4, 5), dtype)
    src = data(rng, (6, 6), dtype)
    n = x.shape[dim]
    rows = [rng.permutation(n)[:3] for _ in range(4 if dim % 2 else 5)]
    idx = np.stack(rows, axis=0 if dim % 2 else 1).astype(np.int64)  # no repeat along dim: one answer
    if reduce:  # add and multiply count every duplicate, so any index will do
        idx = rng.integers(0, n, size=idx.shape).astype(np.int32)
    kwargs: dict[str, Any] = {"reduce": REDUCE[reduce]} if reduce else {}
    tx, ti, ts = torch.from_numpy(x), torch.from_numpy(idx).long(), torch.from_numpy(src)
    got = ref("Scatter", self=x, dim=dim, index=idx, src=src, reduce=reduce)["out"]
    same(got, torch.scatter(tx, dim, ti, ts, **kwargs))
    got_in = ref("InplaceScatter", selfRef=x, dim=dim, index=idx, src=src, reduce=reduce)["selfRef"]
    same(got_in, got)
    value_got = ref("ScatterValue", self=x, dim=dim, index=idx, value=3, reduce=reduce)["out"]
    same(value_got, tx.scatter(dim, ti, 3, **kwargs))
    inplace_value = ref("InplaceScatterValue", selfRef=x, dim=dim, index=idx, value=3, reduce=reduce)["selfRef"]
    same(inplace_value, value_got)


@pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter")
def test_scatter_bool_and_low_precision(rng: np.random.Generator) -> None:
    x = data(rng, (3, 4), np.bool_)
    idx = np.array([[0, 0, 2], [1, 1, 1]], np.int64)
    src = data(rng, (2, 3), np.bool_)
    got = ref("Scatter", self=x, dim=1, index=idx, src=src, reduce=1)["out"]
    same(got, torch.from_numpy(x).scatter(1, torch.from_numpy(idx), torch.from_numpy(src), reduce="add"))
    xb = data(rng, (3, 4), BF16)
    srcb = data(rng, (3, 4), BF16)
    idxb = np.stack([rng.permutation(4) for _ in range(3)]).astype(np.int64)
    got = ref("Scatter", self=xb, dim=1, index=idxb, src=srcb, reduce=0)["out"]
    same(got, to_torch(xb).scatter(1, torch.from_numpy(idxb), to_torch(srcb)))


def test_inplace_scatter_update_by_hand() -> None:
    # the documented example: data [1,1,2,8] with rows of 1s and 2s; index 1 on axis -2 gets the 3s
    data_ = np.array([[[[1] * 8, [2] * 8]]], np.float32)
    got = ref(
        "InplaceScatterUpdate", data=data_, indices=np.array([1]), updates=np.full((1, 1, 1, 8), 3, np.float32), axis=-2
    )["data"]
    same(got, np.array([[[[1] * 8, [3] * 8]]], np.float32))
    # 2-d indices pick (batch, offset); a run of 2 along the last axis
    d = np.zeros((3, 5), np.int32)
    got = ref(
        "InplaceScatterUpdate",
        data=d,
        indices=np.array([[2, 3], [0, 0]], np.int64),
        updates=np.array([[7, 8], [5, 6]], np.int32),
        axis=1,
    )["data"]
    same(got, np.array([[5, 6, 0, 0, 0], [0, 0, 0, 0, 0], [0, 0, 0, 7, 8]], np.int32))
    # a 0-d index is the 1-d case with one batch
    got = ref(
        "InplaceScatterUpdate", data=d, indices=np.array(2, np.int32), updates=np.array([[9, 9]], np.int32), axis=-1
    )["data"]
    same(got, np.array([[0, 0, 9, 9, 0], [0] * 5, [0] * 5], np.int32))


def test_inplace_scatter_update_matches_slice_assignment(rng: np.random.Generator) -> None:
    d = data(rng, (4, 3, 6, 2), BF16)
    upd = data(rng, (3, 3, 2, 2), BF16)
    offsets = np.array([4, 0, 2], np.int64)
    got = ref("InplaceScatterUpdate", data=d, indices=offsets, updates=upd, axis=2)["data"]
    want = to_torch(d).clone()
    for i, off in enumerate(offsets):
        want[i, :, off : off + 2] = to_torch(upd)[i]
    same(got, want)


# ----------------------------------------------------------------------------- joining and splitting
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_cat_and_stack_match_torch(dtype: type, rng: np.random.Generator) -> None:
    parts = [data(rng, (2, n, 3), dtype) for n in (1, 4, 2)]
    tparts = [to_torch(p) for p in parts]
    same(ref("Cat", tensors=parts, dim=1)["out"], torch.cat(tparts, 1))
    same(ref("Cat", tensors=parts, dim=-2)["out"], torch.cat(tparts, -2))
    equal = [data(rng, (2, 3), dtype) for _ in range(3)]
    tequal = [to_torch(p) for p in equal]
    for dim in (0, 1, 2, -1, -3):
        same(ref("Stack", tensors=equal, dim=dim)["out"], torch.stack(tequal, dim))


def test_cat_promotes_and_skips_legacy_empty(rng: np.random.Generator) -> None:
    a, b = data(rng, (2, 3), np.int32), data(rng, (1, 3), np.float16)
    same(ref("Cat", tensors=[a, b], dim=0)["out"], torch.cat([torch.from_numpy(a), torch.from_numpy(b)]))
    e = np.zeros((0,), np.float32)
    same(
        ref("Cat", tensors=[a.astype(np.float32), e], dim=1)["out"],
        torch.cat([torch.from_numpy(a.astype(np.float32)), torch.from_numpy(e)], 1),
    )
    same(ref("Stack", tensors=[np.array(1.5, np.float32)] * 2, dim=0)["out"], np.array([1.5, 1.5], np.float32))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_split_tensor_and_split_with_size_match_torch(dtype: type, rng: np.random.Generator) -> None:
    x = data(rng, (3, 7), dtype)
    tx = to_torch(x)
    for sections, dim in ((3, 1), (1, 0), (9, -1), (7, -1)):
        got = ref("SplitTensor", self=x, splitSections=sections, dim=dim)["out"]
        want = torch.split(tx, sections, dim)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            same(g, w)
    got = ref("SplitWithSize", self=x, splitSize=[2, 0, 5], dim=-1)["out"]
    want = torch.split(tx, [2, 0, 5], -1)
    assert len(got) == 3
    for g, w in zip(got, want):
        same(g, w)


def test_split_of_an_empty_dim_gives_one_empty_piece() -> None:
    got = ref("SplitTensor", self=np.zeros((0, 2), np.float32), splitSections=2, dim=0)["out"]
    assert [g.shape for g in got] == [t.shape for t in torch.split(torch.zeros(0, 2), 2, 0)]


# ----------------------------------------------------------------------------- views made concrete
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_permute_expand_repeat_flip_match_torch(dtype: type, rng: np.random.Generator) -> None:
    x = data(rng, (2, 3, 4), dtype)
    tx = to_torch(x)
    for dims in ([2, 0, 1], [-1, 1, -3], [0, 1, 2]):
        same(ref("Permute", self=x, dims=dims)["out"], tx.permute(*dims))
    col = data(rng, (3, 1), dtype)
    same(ref("Expand", self=col, size=[2, 3, 4])["out"], to_torch(col).expand(2, 3, 4))
    same(ref("Expand", self=col, size=[-1, 5])["out"], to_torch(col).expand(-1, 5))
    same(ref("Repeat", self=x, repeats=[2, 1, 1, 3])["out"], tx.repeat(2, 1, 1, 3))
    same(ref("Repeat", self=x, repeats=[1, 0, 2])["out"], tx.repeat(1, 0, 2))
    for dims in ([0], [-1, 1], [0, 1, 2], []):
        same(ref("Flip", self=x, dims=dims)["out"], torch.flip(tx, dims))


@pytest.mark.parametrize("dtype", [np.float32, BF16, np.uint8, np.bool_], ids=lambda d: np.dtype(d).name)
def test_slice_matches_python_slicing_with_steps(dtype: type, rng: np.random.Generator) -> None:
    x = data(rng, (5, 9), dtype)
    tx = to_torch(x)
    for start, end, step in ((1, 8, 3), (-4, 100, 1), (4, 2, 1), (-100, -2, 2), (0, 9, 4)):
        same(ref("Slice", self=x, dim=1, start=start, end=end, step=step)["out"], tx[:, start:end:step])
        same(ref("Slice", self=x, dim=-2, start=start, end=end, step=step)["out"], tx[start:end:step])


def test_slice_v2_follows_its_documented_clamping_which_is_python_slicing(rng: np.random.Generator) -> None:
    x = data(rng, (5, 4), np.int32)
    tx = torch.from_numpy(x)
    for start in range(-7, 8):
        for end in range(-7, 8):
            got = ref("SliceV2", self=x, starts=[start], ends=[end], axes=[0], steps=[2])["out"]
            same(got, tx[start:end:2])
    got = ref("SliceV2", self=x, starts=[1, -3], ends=[4, 100], axes=[-1, 0], steps=[2, 1])["out"]
    same(got, tx[-3:100, 1:4:2])


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16, np.int32, np.bool_], ids=lambda d: np.dtype(d).name)
def test_constant_pad_matches_torch(dtype: type, rng: np.random.Generator) -> None:
    x = data(rng, (2, 3, 4), dtype)
    tx = to_torch(x)
    value = True if dtype is np.bool_ else 5
    for pad in ([1, 2], [1, 2, 0, 1], [-1, 2, 1, -2], [0, 0, 1, 1, 2, 0], []):
        got = ref("ConstantPadNd", self=x, pad=pad, value=value)["out"]
        same(got, F.pad(tx, pad, value=value))


def test_constant_pad_value_is_converted_to_self_dtype() -> None:
    x = np.ones((2, 2), np.int32)
    same(ref("ConstantPadNd", self=x, pad=[1, 1], value=1.75)["out"], F.pad(torch.from_numpy(x), [1, 1], value=1.75))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("diagonal", [0, 2, -1, -5, 9])
def test_tril_triu_match_torch(dtype: type, diagonal: int, rng: np.random.Generator) -> None:
    x = data(rng, (2, 4, 5), dtype)
    tx = to_torch(x)
    same(ref("Tril", self=x, diagonal=diagonal)["out"], torch.tril(tx, diagonal))
    same(ref("Triu", self=x, diagonal=diagonal)["out"], torch.triu(tx, diagonal))
    same(ref("InplaceTril", selfRef=x, diagonal=diagonal)["selfRef"], torch.tril(tx, diagonal))
    same(ref("InplaceTriu", selfRef=x, diagonal=diagonal)["selfRef"], torch.triu(tx, diagonal))


ARANGE = [(0, 10, 3), (5, -3, -2), (0.5, 2.0, 0.25), (-1.0, 1.0, 0.3), (0, 1, 0.1), (2, 2, 1), (1.5, -2.5, -0.5)]


@pytest.mark.parametrize(("start", "end", "step"), ARANGE)
def test_arange_matches_torch(start: float, end: float, step: float) -> None:
    got = ref("Arange", start=start, end=end, step=step)["out"]
    same(got, torch.arange(start, end, step))
    n = got.shape[0]
    for dtype, tdtype in ((np.float16, torch.float16), (BF16, torch.bfloat16), (np.float64, torch.float64)):
        out = ref("Arange", start=start, end=end, step=step, out=np.zeros((n,), dtype))["out"]
        assert_close(out, to_numpy(torch.arange(start, end, step, dtype=tdtype)))
    if all(float(v).is_integer() for v in (start, end, step)):
        out = ref("Arange", start=start, end=end, step=step, out=np.zeros((n,), np.int32))["out"]
        same(out, torch.arange(start, end, step, dtype=torch.int32))


def test_arange_length_is_ceil_of_the_span_over_step() -> None:
    assert ref("Arange", start=0, end=10, step=3)["out"].tolist() == [0, 3, 6, 9]
    assert ref("Arange", start=0, end=9, step=3)["out"].tolist() == [0, 3, 6]
    assert ref("Arange", start=1.0, end=0.0, step=-0.4)["out"].shape == (3,)


def test_arange_into_integers_follows_cann_not_torch() -> None:
    # CANN checks the bounds truncated to int64; an int64 out is computed from them (0, 1, 2, 3), an int32 out
    # in double and then truncated (0.5, 2, 3.5, 5 -> 0, 2, 3, 5); torch would cast the bounds first for both
    kwargs = {"start": 0.5, "end": 6.0, "step": 1.5}
    assert ref("Arange", **kwargs, out=np.zeros(4, np.int64))["out"].tolist() == [0, 1, 2, 3]
    assert ref("Arange", **kwargs, out=np.zeros(4, np.int32))["out"].tolist() == [0, 2, 3, 5]
    fails(161002, "Arange", start=0.0, end=1.0, step=0.25, out=np.zeros(4, np.int32))  # step truncates to 0
    fails(161002, "Arange", start=0.0, end=1.0, step=1e-50)  # a float32 out: the step rounds to 0 in float32


# ----------------------------------------------------------------------------- layouts
@pytest.mark.parametrize("layout", ["padded", "transposed"])
def test_strided_views_give_the_same_results(layout: str, rng: np.random.Generator) -> None:
    x = data(rng, (4, 6), np.float32)
    idx = rng.integers(0, 6, size=(4, 3)).astype(np.int64)
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("Gather", {"self": x, "dim": 1, "index": idx}, "out"),
        ("Index", {"self": x, "indices": [idx[:, 0] % 4, idx[:, 1]]}, "out"),
        ("Scatter", {"self": x, "dim": 1, "index": idx, "src": x, "reduce": 1}, "out"),
        ("Tril", {"self": x, "diagonal": 1}, "out"),
        ("Permute", {"self": x, "dims": [1, 0]}, "out"),
        ("ConstantPadNd", {"self": x, "pad": [1, -1, 2, 0], "value": 0.5}, "out"),
        (
            "IndexPutImpl",
            {"selfRef": x, "indices": [idx[:, 0] % 4], "values": x[:1], "accumulate": True, "unsafe": False},
            "selfRef",
        ),
    ]
    for op, kwargs, result in cases:
        want = ref(op, **kwargs)[result]
        same(eager.run(op, "reference", layout=layout, **kwargs)[result], want)


# ----------------------------------------------------------------------------- errors
def test_out_of_range_index_values_are_refused_at_launch() -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    fails(161002, "Embedding", weight=x, indices=np.array([3]))
    fails(161002, "Embedding", weight=x, indices=np.array([-1]))
    fails(161002, "IndexSelect", self=x, dim=1, index=np.array([4]))
    fails(161002, "IndexSelect", self=x, dim=1, index=np.array([-1]))
    fails(161002, "GatherV2", self=x, dim=1, index=np.array([-5]))
    fails(161002, "Gather", self=x, dim=0, index=np.array([[3]]))
    fails(161002, "Index", self=x, indices=[np.array([0]), np.array([4])])
    fails(161002, "Index", self=x, indices=[np.array([-4])])
    fails(161002, "IndexPutImpl", selfRef=x, indices=[np.array([5])], values=x[:1], accumulate=True, unsafe=True)
    fails(161002, "Scatter", self=x, dim=1, index=np.array([[4]]), src=x, reduce=1)
    fails(161002, "ScatterValue", self=x, dim=0, index=np.array([[-1]]), value=1, reduce=0)
    fails(161002, "InplaceScatterUpdate", data=x, indices=np.array([0, 3, 0]), updates=x[:, :2], axis=1)
    fails(161002, "InplaceScatterUpdate", data=x, indices=np.array([[3, 0]]), updates=x[:1], axis=1)
    err = fails(161002, "Index", self=x, indices=[np.array([1, 7])])
    assert "7" in err.message


def test_failed_in_place_ops_leave_memory_untouched() -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    cases = [
        (
            "IndexPutImpl",
            "selfRef",
            {"indices": [np.array([0, 1, 9])], "values": np.ones(4, np.float32), "accumulate": False, "unsafe": True},
        ),
        ("InplaceScatter", "selfRef", {"dim": 1, "index": np.array([[0, 1, 4]]), "src": x, "reduce": 0}),
        (
            "InplaceScatterUpdate",
            "data",
            {"indices": np.array([0, 1, 3]), "updates": np.ones((3, 2), np.float32), "axis": 1},
        ),
    ]
    for op, target, kwargs in cases:
        spec = all_specs()[op]
        dev = eager.to_device(x, "reference")
        keep = []  # the device arrays must outlive the call
        args: dict[str, object] = {target: dev.tensor()}
        for name, value in kwargs.items():
            if isinstance(value, np.ndarray):
                keep.append(eager.to_device(value, "reference"))
                args[name] = keep[-1].tensor()
            elif isinstance(value, list):
                keep.extend(eager.to_device(v, "reference") for v in value)
                args[name] = aclnn.aclCreateTensorList([a.tensor() for a in keep[-len(value) :]])
            else:
                args[name] = value
        size, executor, ret = getattr(aclnn, f"aclnn{op}GetWorkspaceSize")(**args)
        assert ret == 0, aclnn.aclGetRecentErrMsg()
        # the indices are data on the device: the launch is accepted, the kernel refuses at synchronisation
        assert getattr(aclnn, f"aclnn{op}")(None, size, executor, None) == 0
        assert acl.rt.synchronize_stream(None) == 161002
        np.testing.assert_array_equal(dev.numpy(), x, err_msg=f"{op} wrote before refusing its index")
        assert spec.name == op


def test_bad_dims_and_shapes_are_refused_in_phase_one() -> None:
    x = np.zeros((3, 4), np.float32)
    fails(161002, "IndexSelect", self=x, dim=2, index=np.array([0]))
    fails(161002, "Gather", self=x, dim=-3, index=np.zeros((1, 1), np.int64))
    fails(161002, "Gather", self=x, dim=0, index=np.zeros((1, 5), np.int64))
    fails(161002, "Index", self=x, indices=[np.array([0, 1]), np.array([0, 1, 2])])
    fails(161002, "Index", self=x, indices=[np.array([0])] * 3)
    fails(161002, "Index", self=x, indices=[np.array([0.0], np.float32)])
    fails(
        161002,
        "IndexPutImpl",
        selfRef=x,
        indices=[np.array([0])],
        values=np.zeros(4, np.float16),
        accumulate=False,
        unsafe=True,
    )
    fails(161002, "Scatter", self=x, dim=0, index=np.zeros((1, 1), np.int64), src=x, reduce=3)
    fails(161002, "Scatter", self=x, dim=0, index=np.zeros((4, 1), np.int64), src=x[:1], reduce=0)
    fails(161002, "Cat", tensors=[x, np.zeros((3, 5), np.float32)], dim=0)
    fails(161002, "Cat", tensors=[x, x], dim=2)
    fails(161002, "Stack", tensors=[x, x.T], dim=0)
    fails(161002, "SplitTensor", self=x, splitSections=0, dim=0)
    fails(161002, "SplitWithSize", self=x, splitSize=[1, 2], dim=1)
    fails(161002, "Permute", self=x, dims=[1, 1])
    fails(161002, "Slice", self=x, dim=0, start=0, end=2, step=0)
    fails(161002, "SliceV2", self=x, starts=[0], ends=[1], axes=[0], steps=[-1])
    fails(161002, "Expand", self=x, size=[3, 5])
    fails(161002, "Repeat", self=x, repeats=[2])
    fails(161002, "ConstantPadNd", self=x, pad=[1, 1, 1], value=0)
    fails(161002, "ConstantPadNd", self=x, pad=[-3, -2], value=0)
    fails(161002, "Tril", self=np.zeros(4, np.float32), diagonal=0)
    fails(161002, "Flip", self=x, dims=[0, -2])
    fails(161002, "InplaceScatterUpdate", data=x, indices=np.array([0]), updates=x[:1], axis=0)
    fails(161002, "Arange", start=0, end=5, step=0)
    fails(161002, "Arange", start=5, end=0, step=1)
    fails(161002, "Arange", start=0, end=5, step=1, out=np.zeros((4,), np.int64))
    fails(161002, "Arange", start=0, end=float("nan"), step=1)


def test_wrong_out_shapes_and_dtypes_are_refused() -> None:
    x = np.zeros((3, 4), np.float32)
    fails(161002, "IndexSelect", self=x, dim=0, index=np.array([0]), out=np.zeros((2, 4), np.float32))
    fails(161002, "Permute", self=x, dims=[1, 0], out=np.zeros((4, 3), np.float16))
    fails(161002, "Arange", start=0, end=3, step=1, out=np.zeros((3,), np.int8))


# ----------------------------------------------------------------------------- declared conformance cases
MOVEMENT = sorted(n for n, s in all_specs().items() if s.family == "movement")


@pytest.mark.parametrize("op", MOVEMENT)
def test_declared_samples_run_and_error_samples_fail_with_their_code(op: str) -> None:
    spec = all_specs()[op]
    assert spec.samples is not None and spec.error_samples is not None, f"{op} declares no conformance cases"
    rng = np.random.default_rng(7)
    notes = []
    for sample in spec.samples(rng):
        notes.append(sample.note)
        ref(op, **sample.args)
    assert notes and len(set(notes)) == len(notes), f"{op}: sample notes must name distinct cases"
    for bad in spec.error_samples(rng):
        with pytest.raises(AclnnError) as exc:
            ref(op, **bad.args)
        assert exc.value.code == bad.code, f"{op} {bad.note}: {exc.value.message}"


def test_every_requested_operator_and_twin_is_declared() -> None:
    wanted = {
        "Embedding",
        "IndexSelect",
        "Gather",
        "GatherV2",
        "Index",
        "IndexPutImpl",
        "InplaceScatterUpdate",
        "Scatter",
        "InplaceScatter",
        "Cat",
        "Stack",
        "SplitTensor",
        "SplitWithSize",
        "Permute",
        "Slice",
        "SliceV2",
        "Expand",
        "Repeat",
        "ConstantPadNd",
        "Tril",
        "InplaceTril",
        "Triu",
        "InplaceTriu",
        "Arange",
        "Flip",
    }
    assert wanted <= set(MOVEMENT)


@pytest.mark.parametrize("dtype", [np.uint16, np.uint32, np.uint64, np.complex64, np.complex128], ids=str)
def test_wide_and_complex_storage_is_moved_bit_exactly(dtype: type, rng: np.random.Generator) -> None:
    info = np.iinfo(dtype) if np.dtype(dtype).kind == "u" else None
    if info is not None:  # the extremes must survive: nothing may pass through a narrower or signed type
        x = rng.integers(0, info.max, size=(3, 4), dtype=dtype, endpoint=True)
        x[0, 0] = info.max
    else:
        x = (rng.standard_normal((3, 4)) + 1j * rng.standard_normal((3, 4))).astype(dtype)
    same(ref("Permute", self=x, dims=[1, 0])["out"], x.T)
    same(ref("Flip", self=x, dims=[-1])["out"], x[:, ::-1])
    same(ref("Cat", tensors=[x, x[:1]], dim=0)["out"], np.concatenate([x, x[:1]]))
    same(ref("Index", self=x, indices=[np.array([2, 0]), np.array([3, 3])])["out"], x[[2, 0], [3, 3]])
    same(ref("Gather", self=x, dim=1, index=np.array([[3, 0]]))["out"], x[:1, [3, 0]])
    same(ref("Tril", self=x, diagonal=0)["out"], np.tril(x))
    same(ref("ConstantPadNd", self=x, pad=[1, 0], value=0)["out"], np.pad(x, [(0, 0), (1, 0)]))

"""Reference kernels of the movement family: NumPy indexing and copies, index values checked first.

Every kernel that takes index tensors checks their values against the bounds before it computes or
writes anything, and raises 161002 when one is out of range: nothing outside the outputs is read or
written, and on failure the outputs are left untouched.
"""

from __future__ import annotations

import numpy as np

from acl_core.errors import AclnnError, AclnnStatus
from acl_reference.call import RefCall
from acl_reference.kernels import kernel
from acl_reference.tensor_io import cast, wide

Array = np.ndarray


def checked_index(values: Array, size: int, what: str, *, negative: bool = False) -> Array:
    """``values`` as int64 positions in [0, size); negatives count from the end when ``negative``.

    Raises 161002 naming the first offending value when one lies outside the accepted range.
    """
    idx = np.asarray(values).astype(np.int64)
    low = -size if negative else 0
    bad = (idx < low) | (idx >= size)
    if bad.any():
        raise AclnnError(
            AclnnStatus.ACLNN_ERR_PARAM_INVALID,
            f"{what} holds {int(idx[bad].flat[0])}, outside the valid range [{low}, {size})",
        )
    return np.where(idx < 0, idx + size, idx)


def assign_last(target: Array, positions: Array, values: Array) -> None:
    """``target.flat[positions] = values`` where, for repeated positions, the last in C order wins."""
    assert target.flags.c_contiguous, "positions count elements in C order"
    pos = positions.reshape(-1)
    vals = np.broadcast_to(values, positions.shape).reshape(-1)
    # np.unique keeps each value's first occurrence; on the reversed list that is the original last one
    _, first_in_reversed = np.unique(pos[::-1], return_index=True)
    keep = pos.size - 1 - first_in_reversed
    target.reshape(-1)[pos[keep]] = vals[keep]


# ----------------------------------------------------------------------------- gathers
@kernel("Embedding")
def embedding(k: RefCall) -> None:
    """out = weight[indices] (whole rows)."""
    weight = k.read("weight")
    idx = checked_index(k.read("indices"), weight.shape[0], "indices")
    k.write("out", weight[idx])


@kernel("IndexSelect", "GatherV2")
def index_select(k: RefCall) -> None:
    """Slices of self along dim at the given positions (GatherV2 keeps the index's shape, and wraps negatives)."""
    x = k.read("self")
    dim: int = k.plan["dim"]
    v2 = k.launch.spec.name == "GatherV2"
    if x.ndim == 0:
        checked_index(k.read("index"), 1, "index")
        k.write("out", x)
        return
    raw = k.read("index")
    idx = checked_index(raw if v2 else raw.reshape(-1), x.shape[dim], "index", negative=v2)
    k.write("out", np.take(x, idx, axis=dim))


@kernel("Gather")
def gather(k: RefCall) -> None:
    """out[p] = self[p with p[dim] replaced by index[p]] (torch.gather)."""
    x = k.read("self")
    dim: int = k.plan["dim"]
    if x.ndim == 0:
        checked_index(k.read("index"), 1, "index")
        k.write("out", x)
        return
    raw = k.read("index")
    idx = checked_index(raw, x.shape[dim], "index")
    # index may be smaller than self off the gather dim: only that corner of self takes part
    corner = tuple(slice(None) if d == dim else slice(0, n) for d, n in enumerate(raw.shape))
    k.write("out", np.take_along_axis(x[corner], idx, axis=dim))


def advanced_key(k: RefCall, list_name: str, shape: tuple[int, ...]) -> tuple[slice | Array, ...]:
    """The NumPy key for ``self[indices]``: an empty entry takes its whole dim, the others are checked.

    A bool mask stands for the coordinates of its true elements (``np.nonzero``), one per dim it covers.
    """
    key: list[slice | Array] = []
    for i, raw in enumerate(k.read_list(list_name)):
        if raw.size == 0:
            key.append(slice(None))
        elif raw.dtype == np.bool_:
            key += np.nonzero(raw)
        else:
            key.append(checked_index(raw, shape[len(key)], f"{list_name}[{i}]", negative=True))
    return tuple(key)


@kernel("Index")
def index(k: RefCall) -> None:
    """out = self[indices] with advanced indexing (NumPy's placement rules are torch's)."""
    x = k.read("self")
    k.write("out", x[advanced_key(k, "indices", x.shape)])


# ----------------------------------------------------------------------------- scatters
@kernel("IndexPutImpl")
def index_put(k: RefCall) -> None:
    """selfRef[indices] = values, or += values when accumulate (duplicates then all count)."""
    dtype = k.dtype("selfRef")
    # a private C-ordered copy (positions below count in C order); nothing is written until the end
    x = np.array(k.read("selfRef", wide(dtype)), order="C")
    key = advanced_key(k, "indices", x.shape)
    try:  # with bool masks, whether the shapes agree depends on how many elements are true
        positions = np.arange(x.size).reshape(x.shape)[key]
        values = np.broadcast_to(k.read("values", wide(dtype)), positions.shape)
    except (IndexError, ValueError) as exc:
        raise AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, f"values and indices disagree: {exc}") from None
    if k.value("accumulate"):
        np.add.at(x.reshape(-1), positions.reshape(-1), values.reshape(-1))
    else:
        assign_last(x, positions, values)
    k.write("selfRef", x)


@kernel("ScatterNdUpdate")
def scatter_nd_update(k: RefCall) -> None:
    """varRef[tuple(indices[i])] = updates[i] for every index tuple i in C order (the last repeat wins)."""
    x = np.array(k.read("varRef"), order="C")
    raw = k.read("indices").astype(np.int64)
    depth = raw.shape[-1]
    tuples = raw.reshape(-1, depth)
    columns = [checked_index(tuples[:, d], x.shape[d], f"indices[..., {d}]") for d in range(depth)]
    if tuples.shape[0] and x.size:
        rows = np.ravel_multi_index(columns, x.shape[:depth])
        target = x.reshape(int(np.prod(x.shape[:depth])), -1)
        width = target.shape[1]
        positions = rows[:, None] * width + np.arange(width)
        assign_last(target, positions, k.read("updates").reshape(rows.size, width))
    k.write("varRef", x)


@kernel("InplaceScatterUpdate")
def scatter_update(k: RefCall) -> None:
    """Each updates batch i is copied into data at a batch and an offset along axis given by indices."""
    data = np.array(k.read("data"))
    updates = k.read("updates")
    axis: int = k.plan["axis"]
    raw = k.read("indices").astype(np.int64)
    length = updates.shape[axis]
    room = data.shape[axis] - length + 1  # the offsets that keep the whole run inside data
    if raw.ndim == 2:
        batches = checked_index(raw[:, 0], data.shape[0], "indices[:, 0]")
        offsets = checked_index(raw[:, 1], room, f"indices[:, 1] (offsets for runs of {length})")
    else:
        batches = np.arange(updates.shape[0])
        offsets = checked_index(raw.reshape(-1), room, f"indices (offsets for runs of {length})")
    for i, (b, off) in enumerate(zip(batches, offsets)):
        target: list[slice | int] = [slice(None)] * data.ndim
        target[0] = int(b)
        target[axis] = slice(int(off), int(off) + length)
        data[tuple(target)] = updates[i]
    k.write("data", data)


@kernel("Scatter", "ScatterValue")
def scatter(k: RefCall) -> None:
    """out = self with src (or value) scattered along dim at index: reduce 0 replaces, 1 adds, 2 multiplies."""
    dtype = k.dtype("self")
    x = np.array(k.read("self", wide(dtype)), order="C")  # positions below count in C order
    dim: int = k.plan["dim"]
    raw = k.read("index")
    if raw.size:
        size = x.shape[dim] if x.ndim else 1
        idx = checked_index(raw, size, "index")
        if k.launch.spec.name == "Scatter":
            corner = tuple(slice(0, n) for n in raw.shape)
            values = k.read("src", wide(dtype))[corner]
        else:
            values = np.broadcast_to(np.asarray(k.value("value")).astype(x.dtype), raw.shape)
        if x.ndim == 0:
            positions = np.zeros(raw.shape, np.int64)
        else:
            coords = list(np.indices(raw.shape))
            coords[dim] = idx
            positions = np.ravel_multi_index(tuple(coords), x.shape)
        reduce = k.value("reduce")
        flat = x.reshape(-1)  # a view, since x is C-contiguous
        if reduce == 0:
            assign_last(x, positions, values)
        elif reduce == 1:
            np.add.at(flat, positions.reshape(-1), values.reshape(-1))
        else:
            np.multiply.at(flat, positions.reshape(-1), values.reshape(-1))
    k.write("out", x)


# ----------------------------------------------------------------------------- joining and splitting
@kernel("Cat", computed=True)
def cat(k: RefCall) -> None:
    """Concatenation along dim in the promoted dtype (1-d empty members are skipped, as torch does)."""
    arrays = k.read_list("tensors", wide(k.plan.get("compute", k["tensors"][0].dtype)))
    used = [a for a in arrays if a.shape != (0,)]
    if not used:
        return  # the output is the empty [0]
    k.write("out", np.concatenate(used, axis=k.plan["dim"]))


@kernel("Stack", computed=True)
def stack(k: RefCall) -> None:
    """The tensors joined along a new dimension dim."""
    arrays = k.read_list("tensors", wide(k.plan["compute"]))
    k.write("out", np.stack(arrays, axis=k.plan["dim"]))


@kernel("SplitTensor", "SplitWithSize")
def split(k: RefCall) -> None:
    """Consecutive pieces of self along dim, of the sizes the output rule worked out."""
    x = k.read("self")
    dim: int = k.plan["dim"]
    pieces, start = [], 0
    for n in k.plan["sizes"]:
        pieces.append(np.take(x, np.arange(start, start + n), axis=dim))
        start += n
    k.write_list("out", pieces)


# ----------------------------------------------------------------------------- views made concrete
@kernel("Permute")
def permute(k: RefCall) -> None:
    """out = self with its dimensions reordered."""
    k.write("out", np.transpose(k.read("self"), k.plan["dims"]))


@kernel("Slice", "SliceV2")
def slice_(k: RefCall) -> None:
    """out = self[start:end:step] on each sliced axis (bounds already clamped by the output rule)."""
    x = k.read("self")
    key = [slice(None)] * x.ndim
    for axis, (start, end, step) in k.plan["slices"].items():
        key[axis] = slice(start, end, step)
    k.write("out", x[tuple(key)])


@kernel("Expand")
def expand(k: RefCall) -> None:
    """self broadcast to size."""
    out = k["out"]
    k.write("out", np.broadcast_to(k.read("self"), tuple(out.shape)))


@kernel("Repeat")
def repeat(k: RefCall) -> None:
    """self tiled repeats times along each dimension (torch.Tensor.repeat)."""
    reps = tuple(k.value("repeats"))
    x = k.read("self")
    x = x.reshape((1,) * (len(reps) - x.ndim) + x.shape)
    k.write("out", np.tile(x, reps))


@kernel("ConstantPadNd")
def constant_pad(k: RefCall) -> None:
    """self surrounded by value (negative pads crop)."""
    out = k["out"]
    x = k.read("self")
    result = np.empty(tuple(out.shape), dtype=x.dtype)
    result[...] = cast(np.asarray(k.value("value")), k.dtype("self"))
    src, dst = [], []
    for n, (before, after) in zip(x.shape, k.plan["pairs"]):
        lo, hi = max(-before, 0), n - max(-after, 0)
        keep = max(hi - lo, 0)
        src.append(slice(lo, lo + keep))
        dst.append(slice(max(before, 0), max(before, 0) + keep))
    result[tuple(dst)] = x[tuple(src)]
    k.write("out", result)


@kernel("Tril", "Triu")
def triangle(k: RefCall) -> None:
    """The lower (Tril) or upper (Triu) triangle of the last two dims from diagonal; the rest is zero."""
    x = k.read("self")
    diagonal = k.value("diagonal")
    rows = np.arange(x.shape[-2])[:, None]
    cols = np.arange(x.shape[-1])[None, :]
    keep = cols - rows <= diagonal if k.launch.spec.name == "Tril" else cols - rows >= diagonal
    k.write("out", np.where(keep, x, np.zeros((), x.dtype)))


@kernel("Flip")
def flip(k: RefCall) -> None:
    """self reversed along dims."""
    x = k.read("self")
    dims = k.plan["dims"]
    k.write("out", np.flip(x, axis=dims) if x.ndim and dims else x)


@kernel("Arange")
def arange(k: RefCall) -> None:
    """out[i] = start + i * step: in int64 from truncated bounds for an int64 out, in double otherwise."""
    n = k["out"].shape[0]
    start, step = k.value("start"), k.value("step")
    if k.plan["int64"]:
        values = int(start) + int(step) * np.arange(n, dtype=np.int64)
    else:
        values = float(start) + float(step) * np.arange(n, dtype=np.float64)
    k.write("out", values)

"""Reference kernels of strided slicing, repeat-interleave and EmbeddingDenseBackward (spec: ops/index_shape.py).

Slices index NumPy arrays with the plan's (start, length, step) per dim; repeats are ``np.repeat``; the two
backward ops sum in float64 and round once. Device-only facts (repeat counts, index values) are checked
before anything is written (161002).
"""

from __future__ import annotations

import numpy as np

from acl_core.errors import AclnnError, AclnnStatus
from acl_reference.call import RefCall
from acl_reference.kernels import kernel
from acl_reference.kernels.movement import checked_index

Array = np.ndarray


def _refuse(message: str) -> AclnnError:
    return AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, message)


def _slices(plan: list[tuple[int, int, int]]) -> tuple[slice, ...]:
    """NumPy slices taking ``length`` elements from ``start`` every ``step`` (negative steps run backwards)."""
    out = []
    for start, length, step in plan:
        stop: int | None = start + length * step
        if stop is not None and stop < 0:
            stop = None  # running backwards past element 0
        out.append(slice(start, stop, step))
    return tuple(out)


@kernel("StridedSlice")
def strided_slice(k: RefCall) -> None:
    """self sliced per dim, shrunk dims dropped, new axes inserted where the spec names them."""
    x = k.read("self")
    part = x[_slices(k.plan["strided"])]
    gather: list[int] = k.plan["gather"]
    kept = sorted(g for g in gather if g >= 0)
    shrunk = tuple(d for d in range(x.ndim) if d not in kept)
    part = part.reshape([n for d, n in enumerate(part.shape) if d not in shrunk])
    k.write("out", part.reshape(k["out"].view_dims))


@kernel("StridedSliceAssignV2")
def strided_slice_assign(k: RefCall) -> None:
    """varRef's slice = inputValue."""
    var = np.array(k.read("varRef"))
    var[_slices(k.plan["strided"])] = k.read("inputValue")
    k.write("varRef", var)


def _counts(k: RefCall, size: int) -> Array:
    """The repeat count of each of ``size`` elements (a scalar or single value broadcast), checked non-negative."""
    if k.launch.spec.name in ("RepeatInterleaveInt", "RepeatInterleaveIntWithDim"):
        reps = np.full(size, int(k.value("repeats")), np.int64)
    else:
        raw = k.read("repeats").astype(np.int64).reshape(-1)
        reps = np.broadcast_to(raw, (size,)) if raw.size == 1 else raw
    if (reps < 0).any():
        raise _refuse(f"repeats holds the negative count {int(reps[reps < 0][0])}")
    return np.asarray(reps)


@kernel("RepeatInterleave", "RepeatInterleaveWithDim", "RepeatInterleaveInt", "RepeatInterleaveIntWithDim")
def repeat_interleave(k: RefCall) -> None:
    """np.repeat along dim (self flattened without one); the counts must add up to outputSize."""
    x = k.read("self")
    dim: int = k.plan["dim"]
    if dim < 0:
        x, dim = x.reshape(-1), 0
    reps = _counts(k, x.shape[dim])
    total = int(reps.sum())
    if total != int(k.value("outputSize")):
        raise _refuse(f"the repeat counts add up to {total}, not to outputSize={k.value('outputSize')}")
    k.write("out", np.repeat(x, reps, axis=dim))


@kernel("RepeatInterleaveTensor")
def repeat_interleave_tensor(k: RefCall) -> None:
    """i repeated repeats[i] times, for every i."""
    reps = _counts(k, k["repeats"].numel)
    if int(reps.sum()) != int(k.value("outputSize")):
        raise _refuse(f"repeats adds up to {int(reps.sum())}, not to outputSize={k.value('outputSize')}")
    k.write("out", np.repeat(np.arange(reps.size), reps))


@kernel("RepeatInterleaveGrad")
def repeat_interleave_grad(k: RefCall) -> None:
    """Each group of repeats[g] consecutive slices of yGrad along axis summed (float64, one rounding)."""
    y = k.read("yGrad", np.float64)
    axis: int = k.plan["dim"]
    groups: int = k.plan["repeat_groups"]
    reps = _counts(k, groups)
    if int(reps.sum()) != y.shape[axis]:
        raise _refuse(f"{groups} groups of repeats add up to {int(reps.sum())}, not to yGrad's {y.shape[axis]}")
    starts = np.concatenate([[0], np.cumsum(reps)])
    moved = np.moveaxis(y, axis, 0)
    sums = np.stack([moved[starts[g] : starts[g + 1]].sum(axis=0) for g in range(groups)]) if groups else None
    shape = (*y.shape[:axis], groups, *y.shape[axis + 1 :])
    result = np.moveaxis(sums, 0, axis) if sums is not None else np.zeros(shape)
    k.write("out", result.reshape(k["out"].view_dims))


@kernel("EmbeddingDenseBackward")
def embedding_dense_backward(k: RefCall) -> None:
    """out[w] = sum of grad's rows whose index is w (scaled by 1 / count with scaleGradByFreq); padding's row 0."""
    g = k.read("grad", np.float64)
    rows = g.reshape(-1, g.shape[-1])
    weights = int(k.value("numWeights"))
    idx = checked_index(k.read("indices").astype(np.int64).reshape(-1), weights, "indices")
    scale = np.ones(idx.size)
    if k.value("scaleGradByFreq"):
        scale = 1.0 / np.bincount(idx, minlength=weights)[idx]
    keep = idx != k.plan["padding"]
    total = np.zeros((weights, rows.shape[1]))
    np.add.at(total, idx[keep], rows[keep] * scale[keep, None])
    k.write("out", total)

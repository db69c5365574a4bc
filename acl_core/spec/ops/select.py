"""Data-sized selection (issue 16): Nonzero, NonzeroV2 and MaskedSelect, whose output size comes from the data.

The caller allocates ``out`` at the largest size the call can need; the op writes the real size back into
out's view shape, read with ``aclGetViewShape`` after synchronising the stream
(:mod:`acl_core.runtime.view_writeback`; docs/RUNTIME.md). Before that synchronisation the view shape reads as
created (the maximal shape). Strides and offset are kept, so the written elements are the leading rows /
columns of out's view. These ops refuse stream capture (107041, as ops whose phase 2 needs the host): a replay
could not write a host-side shape back. That is the simplest honest choice; torch_npu does not capture them
either (their output size syncs the host).

* Nonzero: out is ``[self.numel, self.rank]`` INT64; row i holds the coordinates of the i-th non-zero element
  of self in C order (torch.nonzero). Written back: ``[N, rank]``.
* NonzeroV2: the transposed layout ``[self.rank, self.numel]`` (torch_npu's ``npu_nonzero_aclnn``); column i
  holds the i-th element's coordinates. Written back: ``[rank, N]``.
* MaskedSelect: self and mask broadcast; out is 1-D of the broadcast size and self's dtype; it receives, in C
  order of the broadcast shape, the elements of self where mask is true. Written back: ``[N]``.

Choices where the CANN pages are silent or differ from torch:

* "Non-zero" is ``x != 0``: NaN counts, -0.0 does not (torch's rule). A UINT8 mask is read as ``mask != 0``
  (the page asks for 0 or 1 only; any other value is taken as true, not checked).
* out must have exactly the maximal shape (an out shrunk by an earlier call's write-back is refused, 161002).
  Non-contiguous out is accepted for all three (a superset of the Nonzero / MaskedSelect pages, which list
  out as contiguous only): the write-back keeps out's strides.
* MaskedSelect's out dtype must equal self's (torch's rule; the page lists the same dtypes for both). The
  dtypes are the Ascend 950 list (UINT16 / UINT32 / UINT64 as well). Nonzero declares the page's full list;
  the A2/A3 limit of every dim within int32 is not adopted (indices are int64 throughout).
* A 0-d self: Nonzero's out is ``[1, 0]`` and is written back ``[N, 0]`` with N = 1 when self is non-zero
  (torch's shape); NonzeroV2's is ``[0, 1]``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.formats import Format
from acl_core.spec import samples as S
from acl_core.spec.accuracy import exact
from acl_core.spec.opspec import INVALID, Call, ErrorSample, Infos, OpSpec, Param, Sample, out, tensor
from acl_core.spec.plan import declare as declare_plan
from acl_core.spec.rules import broadcast_shapes, same, tensor_arg

FAMILY = "select"
ND = frozenset({Format.ACL_FORMAT_ND})
_COMMON = frozenset(
    {
        D.ACL_FLOAT,
        D.ACL_FLOAT16,
        D.ACL_BF16,
        D.ACL_DOUBLE,
        D.ACL_INT8,
        D.ACL_UINT8,
        D.ACL_INT16,
        D.ACL_INT32,
        D.ACL_INT64,
        D.ACL_BOOL,
    }
)
NONZERO_DTYPES = _COMMON | {D.ACL_UINT16, D.ACL_UINT32, D.ACL_UINT64}
"""self's dtypes of Nonzero and NonzeroV2 (their pages' lists)."""
MASKED_DTYPES = NONZERO_DTYPES
"""self's and out's dtypes of MaskedSelect (the page's Ascend 950 list)."""
MASK_DTYPES = frozenset({D.ACL_BOOL, D.ACL_UINT8})

declare_plan("select_shape", "tuple[int, ...]", "the shape an index or mask runs over (MaskedSelect: broadcast)", tuple)

TRANSPOSED: dict[str, bool] = {"Nonzero": False, "NonzeroV2": True}
"""Nonzero-style ops: whether out is ``[rank, N]`` (True) or ``[N, rank]``."""


def nonzero_shape(shape: tuple[int, ...], transposed: bool) -> tuple[int, int]:
    """out's maximal shape for a self of ``shape``."""
    numel, rank = math.prod(shape), len(shape)
    return (rank, numel) if transposed else (numel, rank)


def _infer_nonzero(transposed: bool) -> Callable[[Call], Infos]:
    def infer(call: Call) -> Infos:
        x = tensor_arg(call, "self")
        call.plan["select_shape"] = tuple(x.shape)
        return {"out": same(nonzero_shape(tuple(x.shape), transposed), D.ACL_INT64)}

    return infer


def _infer_masked(call: Call) -> Infos:
    x, mask = tensor_arg(call, "self"), tensor_arg(call, "mask")
    shape = broadcast_shapes(x.shape, mask.shape, names=("self", "mask"))
    call.plan["select_shape"] = shape
    return {"out": same((math.prod(shape),), x.dtype)}


# ----------------------------------------------------------------------------- conformance cases
_SHAPES: tuple[tuple[int, ...], ...] = ((3, 5), (2, 3, 4), (7,), (40, 33), (2, 1, 3, 2), ())
_DENSITIES = (0.3, 0.0, 1.0, 0.05, 0.6, 0.5)


def sparse(rng: np.random.Generator, shape: tuple[int, ...], dtype: D, density: float) -> np.ndarray:
    """Random ``dtype`` values of ``shape`` of which about ``density`` are non-zero (floats mix in NaN and -0.0)."""
    values = S.array(rng, shape, dtype, low=1, high=9)
    keep = rng.random(shape) < density
    if dtype.is_float and values.size >= 3:
        flat = values.reshape(-1)
        flat[0] = np.nan  # non-zero
        keep.reshape(-1)[0] = True
        flat[1] = -0.0  # zero
    return np.where(keep, values, np.zeros((), values.dtype)).astype(values.dtype)


def _nonzero_samples(rng: np.random.Generator) -> Iterable[Sample]:
    dtypes = sorted(NONZERO_DTYPES, key=int)
    for i, dt in enumerate(dtypes):
        shape, density = _SHAPES[i % len(_SHAPES)], _DENSITIES[i % len(_DENSITIES)]
        yield Sample({"self": sparse(rng, shape, dt, density)}, f"{dt.short} {list(shape)} density {density}")
    yield Sample({"self": np.zeros((3, 0, 2), np.float32)}, "float32 [3, 0, 2] empty")
    yield Sample({"self": sparse(rng, (600,), D.ACL_FLOAT, 0.5)}, "float32 [600] crossing blocks")


def _masked_samples(rng: np.random.Generator) -> Iterable[Sample]:
    dtypes = sorted(MASKED_DTYPES, key=int)
    pairs = [((3, 5), (3, 5)), ((2, 3, 4), (3, 1)), ((4, 1), (1, 6)), ((40, 33), (40, 33)), ((), (2, 3)), ((7,), ())]
    for i, dt in enumerate(dtypes):
        xs, ms = pairs[i % len(pairs)]
        density = _DENSITIES[i % len(_DENSITIES)]
        mdt = D.ACL_UINT8 if i % 3 == 2 else D.ACL_BOOL
        mask = (rng.random(ms) < density).astype(mdt.numpy)
        args = {"self": S.array(rng, xs, dt, special=dt.is_float), "mask": mask}
        yield Sample(args, f"{dt.short} self {list(xs)} {mdt.short} mask {list(ms)} density {density}")
    yield Sample({"self": np.ones((0, 3), np.float32), "mask": np.ones((1, 3), bool)}, "float32 [0, 3] empty")


def _errors_nonzero(transposed: bool) -> Callable[[np.random.Generator], Iterable[ErrorSample]]:
    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = sparse(rng, (3, 4), D.ACL_FLOAT, 0.5)
        rows, cols = nonzero_shape((3, 4), transposed)
        yield ErrorSample({"self": x, "out": np.zeros((rows, cols), np.int32)}, INVALID, "out not INT64")
        small = (rows, cols - 1) if transposed else (rows - 1, cols)
        yield ErrorSample({"self": x, "out": np.zeros(small, np.int64)}, INVALID, "out below the maximal size")
        yield ErrorSample({"self": x, "out": np.zeros((rows * cols,), np.int64)}, INVALID, "out of rank 1")
        yield ErrorSample({"self": x.astype(np.complex64)}, INVALID, "a complex self")

    return errors


def _errors_masked(rng: np.random.Generator) -> Iterable[ErrorSample]:
    x = S.array(rng, (3, 4), D.ACL_FLOAT)
    mask = rng.random((3, 4)) < 0.5

    def good(**over: Any) -> dict[str, Any]:
        return {"self": x, "mask": mask} | over

    yield ErrorSample(good(mask=mask.astype(np.int32)), INVALID, "an INT32 mask")
    yield ErrorSample(good(mask=rng.random((2, 4)) < 0.5), INVALID, "shapes that do not broadcast")
    yield ErrorSample(good(out=np.zeros((11,), np.float32)), INVALID, "out below the broadcast size")
    yield ErrorSample(good(out=np.zeros((3, 4), np.float32)), INVALID, "out not 1-D")
    yield ErrorSample(good(out=np.zeros((12,), np.float16)), INVALID, "out's dtype differs from self's")


# ----------------------------------------------------------------------------- specs
_ACCURACY = exact("a selection: every output is an index or an input element")


def _nonzero(name: str) -> OpSpec:
    transposed = TRANSPOSED[name]
    params: tuple[Param, ...] = (
        tensor("self", NONZERO_DTYPES, formats=ND),
        out("out", {D.ACL_INT64}, formats=ND, max_rank=2),
    )
    layout = "[rank, N]" if transposed else "[N, rank]"
    return OpSpec(
        name,
        FAMILY,
        params,
        _infer_nonzero(transposed),
        samples=_nonzero_samples,
        error_samples=_errors_nonzero(transposed),
        summary=f"coordinates of self's non-zero elements, {layout}, the size written back into out's view",
        accuracy=_ACCURACY,
        writeback=("out",),
    )


SPECS: list[OpSpec] = [
    *(_nonzero(name) for name in TRANSPOSED),
    OpSpec(
        "MaskedSelect",
        FAMILY,
        (
            tensor("self", MASKED_DTYPES, formats=ND),
            tensor("mask", MASK_DTYPES, formats=ND),
            out("out", MASKED_DTYPES, formats=ND, max_rank=1),
        ),
        _infer_masked,
        samples=_masked_samples,
        error_samples=_errors_masked,
        summary="self's elements where mask is true (broadcast), the count written back into out's view",
        accuracy=_ACCURACY,
        writeback=("out",),
    ),
]

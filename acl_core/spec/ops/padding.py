"""The padding family (issue 16): reflection, replication and circular padding over 1, 2 or 3 trailing dims, and
each one's backward op.

Declared from one table (:data:`PADS`): each row is a forward op (``self``, ``padding``, ``out``) and its
backward twin (``gradOutput``, ``self``, ``padding``, ``gradInput``), names as in
tests/data/cann/aclnn-signatures.tsv. An ``s``-D op pads the last ``s`` dims of a tensor of rank ``s + 1``
(unbatched, ``[C, ...]``) or ``s + 2`` (``[N, C, ...]``), format ND. ``padding`` holds ``2·s`` values as
torch orders them: (left, right) of the last dim first, then the dim before it (``[left, right, top, bottom,
front, back]``). Output dim ``L + before + after``; output position ``o`` reads input ``j = o - before``
mapped into ``[0, L)``:

* reflection: mirrored about the edge elements without repeating them (``-j``, or ``2·(L - 1) - j``);
* replication: clamped to the nearest edge element;
* circular: wrapped (``j mod L``), torch's ``mode="circular"``.

A backward op gives every input element the sum of the ``gradOutput`` elements whose position read it.

Choices and limits, from the CANN pages where they speak: every pad value must be ``0 <= pad < L`` of its
dim, for all three modes (the pages say ``< L``; torch also allows a replication pad of any size and a
circular pad of ``L``, CANN does not); negative pads (torch crops) are refused. Of the empty inputs only an
empty batch (``N = 0`` at rank ``s + 2``: an empty output, nothing launched) is taken, as the pages say. Dtypes
are the Atlas A2/A3 lists: reflection forward BOOL, INT8, UINT8, INT16, INT32, INT64, FLOAT16, BFLOAT16,
FLOAT32, DOUBLE; replication the same without BOOL; circular FLOAT16, BFLOAT16, FLOAT32, INT8, INT32;
reflection and replication backward FLOAT16, BFLOAT16, FLOAT32, DOUBLE; circular backward FLOAT16,
BFLOAT16, FLOAT32. COMPLEX64 / COMPLEX128 (listed for reflection and replication) are not declared: the
GPU kernels have no complex element type yet. ReflectionPad2dBackward's page limits bf16 pads to 7 on
its hardware; that limit is not adopted (the gather has none). Sums of the backward ops run in float32
(float64 for DOUBLE).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.formats import Format
from acl_core.spec import samples as S
from acl_core.spec.accuracy import Accuracy, exact, reduction
from acl_core.spec.opspec import (
    INVALID,
    Call,
    ErrorSample,
    Infos,
    OpSpec,
    Param,
    Sample,
    int_array,
    invalid,
    out,
    tensor,
)
from acl_core.spec.plan import declare as declare_plan
from acl_core.spec.rules import same, tensor_arg
from acl_core.tensor import AclIntArray

FAMILY = "padding"
MODES = ("reflect", "replicate", "circular")
_F32, _F16, _BF16, _F64 = D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16, D.ACL_DOUBLE
_INTS = frozenset({D.ACL_INT8, D.ACL_UINT8, D.ACL_INT16, D.ACL_INT32, D.ACL_INT64})
_FLOATS = frozenset({_F16, _BF16, _F32})


@dataclass(frozen=True)
class PadGeometry:
    """One validated padding call, per padded dim (outermost first)."""

    mode: str
    before: tuple[int, ...]
    after: tuple[int, ...]
    lengths: tuple[int, ...]
    """The input's padded-dim sizes."""
    lead: tuple[int, ...]
    """The dims before the padded ones (``[N, C]`` or ``[C]``)."""

    @property
    def spatial(self) -> int:
        """Number of padded dims."""
        return len(self.lengths)

    @property
    def sizes(self) -> tuple[int, ...]:
        """The output's padded-dim sizes."""
        return tuple(n + b + a for n, b, a in zip(self.lengths, self.before, self.after))


declare_plan(
    "pad_geometry", "PadGeometry", "a padding call's geometry (acl_core.spec.ops.padding.PadGeometry)", PadGeometry
)


@dataclass(frozen=True)
class Pad:
    """One row of the table: a forward padding op and its backward twin."""

    prefix: str
    mode: str
    spatial: int
    dtypes: frozenset[D]
    backward_dtypes: frozenset[D]

    @property
    def name(self) -> str:
        """The forward op's name."""
        return f"{self.prefix}Pad{self.spatial}d"

    @property
    def backward(self) -> str:
        """The backward op's name."""
        return f"{self.name}Backward"


_REPLICATE_DTYPES = _FLOATS | _INTS | {_F64}
_ROWS = (
    ("Reflection", "reflect", (1, 2, 3), _REPLICATE_DTYPES | {D.ACL_BOOL}, _FLOATS | {_F64}),
    ("Replication", "replicate", (1, 2, 3), _REPLICATE_DTYPES, _FLOATS | {_F64}),
    ("Circular", "circular", (2, 3), _FLOATS | {D.ACL_INT8, D.ACL_INT32}, _FLOATS),
)
PADS: tuple[Pad, ...] = tuple(
    Pad(prefix, mode, s, frozenset(fwd), frozenset(bwd)) for prefix, mode, ranks, fwd, bwd in _ROWS for s in ranks
)
"""Every declared padding op pair."""

BY_NAME: dict[str, tuple[Pad, bool]] = {p.name: (p, False) for p in PADS} | {p.backward: (p, True) for p in PADS}
"""Operator name to (its row, whether it is the backward op)."""


# ----------------------------------------------------------------------------- geometry
def source_positions(mode: str, length: int, before: int, after: int) -> np.ndarray:
    """The input position each output position of one dim reads (pads below ``length``)."""
    j = np.arange(-before, length + after)
    if mode == "reflect":
        return (length - 1) - np.abs((length - 1) - np.abs(j))
    if mode == "replicate":
        return np.clip(j, 0, length - 1)
    return j % length


def geometry(call: Call, pad: Pad) -> PadGeometry:
    """The call's padding geometry, 161002 where CANN refuses it."""
    x = tensor_arg(call, "self")
    s = pad.spatial
    if x.rank not in (s + 1, s + 2):
        raise invalid(f"self has rank {x.rank}; a {s}-D pad takes rank {s + 1} or {s + 2}")
    if x.numel == 0 and (x.rank != s + 2 or 0 in x.shape[1:]):
        raise invalid(f"self {list(x.shape)} is empty; padding takes an empty batch (N = 0) only")
    arr = call.args.get("padding")
    values = tuple(int(v) for v in arr.values) if isinstance(arr, AclIntArray) else ()
    if len(values) != 2 * s:
        raise invalid(f"padding has {len(values)} values; a {s}-D pad takes {2 * s}")
    lengths = tuple(x.shape[-s:])
    # padding lists (before, after) pairs from the last dim backwards
    before = tuple(values[2 * (s - 1 - d)] for d in range(s))
    after = tuple(values[2 * (s - 1 - d) + 1] for d in range(s))
    for b, a, n in zip(before, after, lengths):
        if min(b, a) < 0 or max(b, a) >= n:
            raise invalid(f"padding {list(values)} must hold values >= 0 and below self's sizes {list(lengths)}")
    return PadGeometry(pad.mode, before, after, lengths, tuple(x.shape[:-s]))


def _infer(pad: Pad, backward: bool) -> Callable[[Call], Infos]:
    def infer(call: Call) -> Infos:
        geo = geometry(call, pad)
        call.plan["pad_geometry"] = geo
        x = tensor_arg(call, "self")
        padded = (*geo.lead, *geo.sizes)
        if not backward:
            return {"out": same(padded, x.dtype)}
        grad = tensor_arg(call, "gradOutput")
        if tuple(grad.shape) != padded:
            raise invalid(f"gradOutput has shape {list(grad.shape)}; the forward's output is {list(padded)}")
        if grad.dtype != x.dtype:
            raise invalid(f"gradOutput is {grad.dtype.short} but self is {x.dtype.short}; they must agree")
        return {"gradInput": same(tuple(x.shape), x.dtype)}

    return infer


# ----------------------------------------------------------------------------- conformance cases
_CASES: dict[int, tuple[tuple[tuple[int, ...], tuple[int, ...], str], ...]] = {
    # (self shape, padding, note); pads up to L - 1 so that both mirrors of a dim overlap
    1: (
        ((2, 3, 7), (2, 3), ""),
        ((4, 5), (4, 1), "unbatched"),
        ((1, 2, 3), (2, 2), "pads of L - 1"),
        ((2, 2, 4), (0, 0), "no pad"),
    ),
    2: (
        ((2, 3, 5, 6), (1, 2, 3, 0), ""),
        ((3, 4, 7), (6, 3, 2, 3), "unbatched"),
        ((1, 2, 3, 4), (3, 3, 2, 2), "pads of L - 1"),
        ((1, 1, 1, 5), (2, 1, 0, 0), "a dim of 1"),
    ),
    3: (
        ((1, 2, 3, 4, 5), (1, 2, 0, 3, 2, 1), ""),
        ((2, 3, 4, 3), (2, 1, 1, 2, 0, 2), "unbatched"),
        ((1, 1, 2, 3, 3), (2, 2, 2, 2, 1, 1), "pads of L - 1"),
    ),
}


def _dtype_cycle(dtypes: frozenset[D]) -> list[D]:
    """Floats first (float32, float16, bfloat16), then the rest by enum value."""
    first = [dt for dt in (_F32, _F16, _BF16) if dt in dtypes]
    return first + sorted(dtypes - set(first), key=int)


def _padded(shape: tuple[int, ...], padding: tuple[int, ...]) -> tuple[int, ...]:
    s = len(padding) // 2
    sizes = [n + padding[2 * (s - 1 - d)] + padding[2 * (s - 1 - d) + 1] for d, n in enumerate(shape[-s:])]
    return (*shape[:-s], *sizes)


def _samples(pad: Pad, backward: bool) -> Callable[[np.random.Generator], Iterable[Sample]]:
    dtypes = _dtype_cycle(pad.backward_dtypes if backward else pad.dtypes)

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        cases = _CASES[pad.spatial]
        count = max(len(cases), len(dtypes))
        for i in range(count):
            shape, padding, note = cases[i % len(cases)]
            dt = dtypes[i % len(dtypes)]
            args: dict[str, Any] = {"self": S.array(rng, shape, dt, special=dt.is_float and not backward)}
            args["padding"] = list(padding)
            if backward:
                args["gradOutput"] = S.array(rng, _padded(shape, padding), dt, low=-2, high=2)
            text = " ".join([dt.short, str(list(shape)), f"padding {list(padding)}", *([note] if note else [])])
            yield Sample(args, text)
        shape, padding, _ = cases[0]
        empty = (0, *shape[1:])
        args = {"self": np.zeros(empty, np.float32), "padding": list(padding)}
        if backward:
            args["gradOutput"] = np.zeros(_padded(empty, padding), np.float32)
        yield Sample(args, f"float32 {list(empty)} empty batch")

    return gen


def _errors(pad: Pad, backward: bool) -> Callable[[np.random.Generator], Iterable[ErrorSample]]:
    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        shape, padding, _ = _CASES[pad.spatial][0]
        s = pad.spatial

        def good(**over: Any) -> dict[str, Any]:
            args: dict[str, Any] = {"self": S.array(rng, shape, _F32), "padding": list(padding)}
            if backward:
                args["gradOutput"] = S.array(rng, _padded(shape, padding), _F32)
            return args | over

        yield ErrorSample(good(padding=[*list(padding), 1, 1]), INVALID, "padding for one more dim")
        yield ErrorSample(good(padding=list(padding)[:-1]), INVALID, "padding of odd length")
        yield ErrorSample(good(padding=[-1, *list(padding)[1:]]), INVALID, "negative pad")
        yield ErrorSample(good(padding=[shape[-1], *list(padding)[1:]]), INVALID, "pad as large as the dim")
        top = [0] * (2 * s)
        top[-1] = shape[-s]
        yield ErrorSample(good(padding=top), INVALID, "outermost pad as large as its dim")
        yield ErrorSample(good(self=S.array(rng, shape[-s:], _F32)), INVALID, "self without a channel dim")
        yield ErrorSample(good(self=S.array(rng, (1, *shape), _F32)), INVALID, "self of rank s + 3")
        empty = (*shape[:-1], 0)
        yield ErrorSample(good(self=np.zeros(empty, np.float32)), INVALID, "self empty along a padded dim")
        unbatched = np.zeros((0, *shape[2:]), np.float32)
        yield ErrorSample(good(self=unbatched), INVALID, "unbatched self with no channels")
        wrong = (*shape[:-1], shape[-1] + 1)
        if backward:
            yield ErrorSample(good(gradOutput=S.array(rng, wrong, _F32)), INVALID, "gradOutput of the wrong shape")
            grad16 = S.array(rng, _padded(shape, padding), _F16)
            yield ErrorSample(good(gradOutput=grad16), INVALID, "gradOutput's dtype differs from self's")
            yield ErrorSample(good(gradInput=np.zeros(wrong, np.float32)), INVALID, "gradInput of the wrong shape")
        else:
            yield ErrorSample(good(out=np.zeros(wrong, np.float32)), INVALID, "out of the wrong shape")
            yield ErrorSample(good(out=np.zeros(_padded(shape, padding), np.float16)), INVALID, "out's dtype differs")

    return errors


# ----------------------------------------------------------------------------- accuracy and specs
def _gathered(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> int:
    """A bound on the gradients one input element sums: per dim, at most ``before + after + 1``."""
    values = [int(v) for v in args.get("padding") or []]
    return math.prod(b + a + 1 for b, a in zip(values[0::2], values[1::2])) if values else 1


def _accuracy(backward: bool) -> Accuracy:
    if not backward:
        return exact("a copy: every output is an input element")
    return reduction(length_of=_gathered, reason="each input's gradient sums the outputs that read it, in float32")


def _params(pad: Pad, backward: bool) -> tuple[Param, ...]:
    s, nd = pad.spatial, frozenset({Format.ACL_FORMAT_ND})
    dtypes = pad.backward_dtypes if backward else pad.dtypes
    rank: dict[str, Any] = {"min_rank": s + 1, "max_rank": s + 2, "formats": nd}
    head = [tensor("gradOutput", dtypes, **rank)] if backward else []
    head += [tensor("self", dtypes, **rank), int_array("padding")]
    return (*head, out("gradInput" if backward else "out", dtypes, max_rank=s + 2, formats=nd))


def _spec(pad: Pad, backward: bool) -> OpSpec:
    summary = f"{pad.mode} padding of the last {pad.spatial} dim{'s' if pad.spatial > 1 else ''}"
    return OpSpec(
        pad.backward if backward else pad.name,
        FAMILY,
        _params(pad, backward),
        _infer(pad, backward),
        samples=_samples(pad, backward),
        error_samples=_errors(pad, backward),
        summary=summary + (" backward (the input's gradient)" if backward else ""),
        accuracy=_accuracy(backward),
    )


SPECS: list[OpSpec] = [_spec(p, b) for p in PADS for b in (False, True)]

"""Bitwise and shift operators (issue 16): And / Or / Xor of two tensors or a tensor and a scalar, Not, shifts.

Every operator is one row of :data:`ROWS` (its official tensor names, whether the second operand is an
aclScalar, its dtypes, its in-place twin); the reference (``acl_reference.kernels.bitwise``) and the
rocm bodies (``acl_rocm.kernels.bitwise``) are keyed by the row's ``operator``. Family ``elementwise``:
the elementwise kernels, size tiers and the exact class apply. Integers are exact; on BOOL the
operators are logical (``&`` and, ``|`` or, ``^`` xor, Not is logical not), as the pages say.

Dtype promotion: two tensors follow the tensor-tensor table (``promote_types``: int8 with uint8 is int16,
a 16/32/64-bit unsigned type combines only with itself); a tensor with an aclScalar follows the tensor-scalar
rule (``promote_with_scalar``: an integer scalar keeps the tensor's dtype, a bool tensor with an integer
scalar computes in int64, a float scalar gives float32, which no bitwise op supports: 161002). The result
is computed in that dtype and then converted to ``out`` (any dtype the page lists that it may be cast to).
An integer scalar is first converted to the computation dtype (two's-complement wrap, as CANN converts the
scalar to a tensor of that dtype).

Choices where the pages are silent:

* dtypes: each op declares the list of its own page (the Ascend 950 row, the widest: UINT32/UINT64 for
  Or and Xor, UINT16 for And, Not without UINT16).
* LeftShifts (tensor << aclScalar) promotes like the other tensor-scalar ops (the scalar keeps the tensor's
  dtype; CANN's op_api promotes with the scalar's own dtype, which would make every Python int compute in
  int64 and refuse UINT16/32/64 tensors).
* Shift counts: RightShift clamps the count to [0, width - 1] (the page: a negative count acts as 0; CANN's
  AI CPU and vector kernels clamp a count past the width to width - 1, so a signed value fills with its
  sign bit and an unsigned one keeps its top bit: uint8 200 >> 9 is 1, where torch gives 0). LeftShift and
  LeftShifts give 0 for a count that is negative or at least the width (torch's rule; the page only
  guarantees counts below the width) and otherwise shift the two's-complement bits, wrapping to the width.
  ``width`` is the computation dtype's bit count.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.spec import samples as S
from acl_core.spec.ops.elementwise import FAMILY, tensor_scalar, tensor_tensor
from acl_core.spec.opspec import (
    INVALID,
    Call,
    ErrorGen,
    ErrorSample,
    Infos,
    OpSpec,
    Sample,
    SampleGen,
    inplace_twin,
    invalid,
    out,
    tensor,
)
from acl_core.spec.rules import COMPLEX, FLOATS64, SIGNED, same, tensor_arg

UNSIGNED_WIDE = frozenset({D.ACL_UINT16, D.ACL_UINT32, D.ACL_UINT64})
BASE = SIGNED | {D.ACL_UINT8, D.ACL_BOOL}
"""BOOL, INT8/16/32/64 and UINT8: every bitwise page lists them."""
AND = BASE | {D.ACL_UINT16}
OR_XOR = BASE | UNSIGNED_WIDE
SHIFT = SIGNED | {D.ACL_UINT8} | UNSIGNED_WIDE
NOT = BASE
INT_OUT = OR_XOR
"""The tensor pages' outputs: BOOL and every integer type (And's too, though its inputs stop at UINT16)."""
SCALAR_OUT = OR_XOR | FLOATS64 | COMPLEX
"""Or/Xor scalar pages' outputs: any dtype an integer result casts to (AndScalar lists no UINT32/64, complex)."""

OPERATORS: dict[str, str] = {"and": "&", "or": "|", "xor": "^", "lshift": "<<", "rshift": ">>"}
"""Each binary row's operator (keys of the reference's and the rocm bodies' tables)."""


@dataclass(frozen=True)
class Binary:
    """One binary operator: ``a`` ⊕ ``b`` into ``out``; ``scalar``: ``b`` is an aclScalar."""

    name: str
    operator: str
    dtypes: frozenset[D]
    out_dtypes: frozenset[D]
    scalar: bool = False
    a: str = "self"
    b: str = "other"
    twin: str | None = None
    """The official name of the twin's in-out tensor (``Inplace<name>``), None: no twin."""


ROWS: tuple[Binary, ...] = (
    Binary("BitwiseAndTensor", "and", AND, INT_OUT, twin="selfRef"),
    Binary("BitwiseAndTensorOut", "and", AND, INT_OUT, twin="self"),
    Binary("BitwiseAndScalar", "and", AND, AND | FLOATS64, True, twin="selfRef"),
    Binary("BitwiseOrTensor", "or", OR_XOR, OR_XOR, twin="selfRef"),
    Binary("BitwiseOrScalar", "or", OR_XOR, SCALAR_OUT, True, twin="selfRef"),
    Binary("BitwiseXorTensor", "xor", OR_XOR, OR_XOR | FLOATS64 | COMPLEX, twin="selfRef"),
    Binary("BitwiseXorScalar", "xor", OR_XOR, SCALAR_OUT, True, twin="selfRef"),
    Binary("LeftShift", "lshift", SHIFT, SHIFT, b="shiftBits"),
    Binary("LeftShifts", "lshift", SHIFT, SHIFT, True, b="shiftBits"),
    Binary("RightShift", "rshift", SHIFT, SHIFT, a="input", b="shiftBits"),
)
"""Every binary bitwise and shift operator."""

SAMPLE_DTYPES = (D.ACL_BOOL, D.ACL_INT8, D.ACL_UINT8, D.ACL_INT16, D.ACL_INT32, D.ACL_INT64, *sorted(UNSIGNED_WIDE))
"""Every dtype a row declares is sampled."""
FULL_PAIRS = frozenset({D.ACL_BOOL, D.ACL_INT32, D.ACL_UINT8})
"""Dtypes sampled at every broadcast pair (0-d and empty included); the others at two (both broadcast; a 0-d other)."""


def _operand(rng: np.random.Generator, shape: tuple[int, ...], dt: D, shift: bool, count: bool) -> np.ndarray:
    """Values of ``dt``: full-range bits (extremes included); shift counts in [-2, width + 2]."""
    if dt == D.ACL_BOOL:
        return S.array(rng, shape, dt)
    info = np.iinfo(dt.numpy)
    if shift and count:
        width = info.bits
        return S.array(rng, shape, dt, low=max(info.min, -2), high=width + 2)
    values = rng.integers(info.min, info.max, size=shape, dtype=dt.numpy, endpoint=True)
    if values.size >= 2:
        flat = values.reshape(-1)
        flat[0], flat[-1] = info.max, info.min
    return values


def _samples(row: Binary) -> SampleGen:
    shift = row.operator in ("lshift", "rshift")
    dtypes = [d for d in SAMPLE_DTYPES if d in row.dtypes]

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in dtypes:
            if row.scalar:
                values: tuple[object, ...] = (3, 9, -1) if shift else (True, 5, -3, 300)
                for k, shape in enumerate(S.ELEMENTWISE_SHAPES):
                    # every value at the largest shape, one value (in turn) at each other shape
                    for v in values if shape == S.ELEMENTWISE_SHAPES[-1] else values[k % len(values) :][:1]:
                        if dt == D.ACL_BOOL and not isinstance(v, bool) and v != 5:
                            continue  # a bool tensor with an int scalar computes in int64: one value covers it
                        args = {row.a: _operand(rng, shape, dt, shift, False), row.b: v}
                        yield Sample(args, f"{dt.short} {list(shape)} with {v!r}")
                continue
            for sa, sb in S.BROADCAST_PAIRS if dt in FULL_PAIRS else S.BROADCAST_PAIRS[1::2]:
                args = {row.a: _operand(rng, sa, dt, shift, False), row.b: _operand(rng, sb, dt, shift, True)}
                yield Sample(args, f"{dt.short} {list(sa)}⊕{list(sb)}")
        if not row.scalar:  # mixed dtypes: promotion (int8 ⊕ uint8 → int16; bool ⊕ int32 → int32)
            pairs = [(D.ACL_INT8, D.ACL_UINT8), (D.ACL_INT32, D.ACL_INT8)]
            if D.ACL_BOOL in row.dtypes:
                pairs.append((D.ACL_BOOL, D.ACL_INT32))
            for da, db in pairs:
                args = {row.a: _operand(rng, (3, 4), da, shift, False), row.b: _operand(rng, (4,), db, shift, True)}
                yield Sample(args, f"mixed {da.short}⊕{db.short}")
            a = _operand(rng, (2, 5), D.ACL_INT8, shift, False)
            b = _operand(rng, (2, 5), D.ACL_INT8, shift, True)
            yield Sample({row.a: a, row.b: b, "out": np.zeros((2, 5), np.int64)}, "int8 into an int64 out")

    return gen


def _errors(row: Binary) -> ErrorGen:
    def gen(rng: np.random.Generator) -> Iterable[ErrorSample]:
        a = S.array(rng, (2, 3), D.ACL_INT32)
        b: object = 3 if row.scalar else S.array(rng, (2, 3), D.ACL_INT32)
        if row.scalar:
            yield ErrorSample({row.a: a, row.b: 1.5}, INVALID, "a float scalar (computes in float32)")
        else:
            yield ErrorSample({row.a: a, row.b: S.array(rng, (4, 3), D.ACL_INT32)}, INVALID, "no broadcast")
            yield ErrorSample(
                {row.a: S.array(rng, (3,), D.ACL_UINT16), row.b: S.array(rng, (3,), D.ACL_INT32)},
                INVALID,
                "uint16 with int32 (no common dtype)",
            )
        yield ErrorSample({row.a: a, row.b: b, "out": np.zeros((3, 3), np.int32)}, INVALID, "out of the wrong shape")
        if D.ACL_BOOL in row.out_dtypes:
            yield ErrorSample({row.a: a, row.b: b, "out": np.zeros((2, 3), np.bool_)}, INVALID, "int32 into bool")

    return gen


def _binary(row: Binary) -> OpSpec:
    if row.scalar:
        base = tensor_scalar(row.name, row.dtypes, t=row.a, s=row.b, out_dtypes=row.out_dtypes)

        def infer(call: Call) -> Infos:
            infos = base.infer(call)
            if call.plan["compute"] not in row.dtypes:
                raise invalid(f"{row.name} computes in {call.plan['compute'].short}, which it does not support")
            return infos

        spec = replace(base, infer=infer)
    else:
        spec = tensor_tensor(row.name, row.dtypes, a=row.a, b=row.b, out_dtypes=row.out_dtypes)
    return replace(spec, samples=_samples(row), error_samples=_errors(row))


def _bitwise_not() -> OpSpec:
    params = (tensor("self", NOT), out("out", NOT))

    def infer(call: Call) -> Infos:
        t = tensor_arg(call, "self")
        call.plan["compute"] = t.dtype
        return {"out": same(t.shape, t.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in (d for d in SAMPLE_DTYPES if d in NOT):
            for shape in S.ELEMENTWISE_SHAPES:
                yield Sample({"self": _operand(rng, shape, dt, False, False)}, f"{dt.short} {list(shape)}")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = S.array(rng, (2, 3), D.ACL_INT32)
        yield ErrorSample({"self": x, "out": np.zeros((2, 3), np.int64)}, INVALID, "out of another dtype")

    return OpSpec("BitwiseNot", FAMILY, params, infer, alias_ok=True, samples=gen, error_samples=errors)


def _twin_samples(base: OpSpec, ref_name: str, a: str) -> SampleGen:
    """The base's samples whose result has ``a``'s shape and dtype (an in-place result must fit ``a``)."""

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for s in base.samples(rng) if base.samples else ():
            target = s.args[a]
            if "out" in s.args or not isinstance(target, np.ndarray):
                continue
            other = s.args["other"]
            shape = np.broadcast_shapes(target.shape, np.shape(other))
            same_dtype = not isinstance(other, np.ndarray) or other.dtype == target.dtype
            widened = target.dtype == np.bool_ and not isinstance(other, (bool, np.ndarray))
            if shape == target.shape and same_dtype and not widened:
                yield replace(s, args={ref_name if k == a else k: v for k, v in s.args.items()})

    return gen


_base: list[OpSpec] = [*(_binary(r) for r in ROWS), _bitwise_not()]
_by_name = {s.name: s for s in _base}
_twins = [
    inplace_twin(
        _by_name[r.name],
        ref_name=r.twin,
        self_name=r.a,
        samples=_twin_samples(_by_name[r.name], r.twin, r.a),
    )
    for r in ROWS
    if r.twin
]

SPECS: list[OpSpec] = [*_base, *_twins]

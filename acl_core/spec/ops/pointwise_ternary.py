"""Clamp variants and Addcmul / Addcdiv (issue 16): pointwise ops of a tensor and up to two bounds or factors.

The clamp rows of :data:`CLAMPS` name each bound's official parameter, whether bounds are aclScalars
(the tensor-scalar promotion of Clamp) or tensors (broadcast with ``self``, tensor-tensor promotion), and
the in-place twin. :data:`ADDC` holds Addcmul and Addcdiv. The reference formulas live in
``acl_reference.kernels.pointwise_ternary`` and the device bodies in ``acl_rocm.kernels.pointwise_ternary``.
Family ``elementwise``.

Choices where the pages are silent or disagree with torch:

* Clamp order: ``min(max(x, lo), hi)``, torch's and the existing Clamp's, so ``hi`` wins when ``lo > hi``
  (the clip_by_value_v2 pages write ``max(min(x, hi), lo)``, where ``lo`` would win). NaN as torch: a NaN
  element, or a NaN bound, gives NaN; the sign of a zero result is unspecified (max/min of ±0).
* ClampTensor with one bound null clamps on the other; both null is 161001, as the page says (Clamp
  itself reports 161002 there, as declared before).
* Addcmul / Addcdiv compute ``self + value·t1·t2`` / ``self + value·(t1/t2)`` in the promoted dtype of the
  three tensors (fp16/bf16 in float32, as CANN's kernel); ``value`` is rounded to float32 for float32 and
  narrower calls (CANN keeps a float32 value for fp16/bf16), to float64 for float64; a float ``value`` with
  an integer computation is 161002 (not castable). Integer Addcmul wraps in its dtype. The order is torch's
  CUDA kernels' (``(value·t1)·t2``; ``t1/t2`` first), each intermediate a value of the computation type: one
  that overflows is infinite even where ``value`` would scale it back, one that underflows is 0 (CANN's pages
  are silent).
* Addcdiv's page lists INT64 too; it is not declared: CANN runs integer Addcdiv on the AI CPU, whose
  rounding of ``t1/t2`` is documented nowhere, and torch refuses integer addcdiv.
* Accuracy: Addcmul and Addcdiv are three roundings in float32 (float64 for float64), measured against
  ``|self| + |value·t1·t2|`` (the sum may cancel), i.e. a composite class of 3 steps; integers are exact.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.spec import samples as S
from acl_core.spec.accuracy import Accuracy, composite, exact
from acl_core.spec.ops.elementwise import FAMILY
from acl_core.spec.opspec import (
    INVALID,
    NULLPTR,
    Call,
    ErrorGen,
    ErrorSample,
    Infos,
    OpSpec,
    Param,
    Sample,
    SampleGen,
    inplace_twin,
    invalid,
    nullptr,
    out,
    scalar,
    tensor,
)
from acl_core.spec.promotion import promote_types, promote_with_scalar
from acl_core.spec.rules import FLOATS64, INTEGERS, REAL, REAL_BOOL, broadcast_shapes, castable, tensor_arg
from acl_core.tensor import AclScalar

CLAMP_SELF = REAL
"""FLOAT16, FLOAT, DOUBLE, BFLOAT16, INT8/16/32/64, UINT8 (BOOL only as a bound)."""


@dataclass(frozen=True)
class Clamp:
    """One clamp operator: its lower / upper bound parameters (None: none) and how they are passed."""

    name: str
    lower: str | None
    upper: str | None
    tensors: bool
    twin: str | None = None


CLAMPS: tuple[Clamp, ...] = (
    Clamp("ClampMin", "clipValueMin", None, False),
    Clamp("ClampMax", None, "clipValueMax", False, twin="selfRef"),
    Clamp("ClampTensor", "clipValueMin", "clipValueMax", True),
    Clamp("ClampMinTensor", "clipValueMin", None, True, twin="selfRef"),
    Clamp("ClampMaxTensor", None, "max", True, twin="selfRef"),
)
"""Every clamp variant (Clamp itself is declared in the elementwise family)."""


def _bounds(row: Clamp) -> list[str]:
    return [b for b in (row.lower, row.upper) if b]


def _clamp_infer(row: Clamp) -> Any:
    def infer(call: Call) -> Infos:
        t = tensor_arg(call, "self")
        present = [b for b in _bounds(row) if call.args.get(b) is not None]
        if not present:
            raise nullptr(f"{row.name}: {' and '.join(_bounds(row))} cannot all be null")
        compute, shape = t.dtype, tuple(t.shape)
        if row.tensors:
            bounds = [tensor_arg(call, b) for b in present]
            shape = broadcast_shapes(t.shape, *(bt.shape for bt in bounds), names=("self", *present))
            for bt in bounds:
                compute = promote_types(compute, bt.dtype)
        else:
            for name in present:
                s = call.args[name]
                assert isinstance(s, AclScalar)
                compute = promote_with_scalar(compute, s.dtype)
        if compute not in CLAMP_SELF:
            raise invalid(f"{row.name} computes in {compute.short}, which it does not support")
        call.plan["compute"] = compute
        return {"out": castable(shape, compute)}

    return infer


CLAMP_SAMPLE_DTYPES = (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16, D.ACL_DOUBLE, D.ACL_INT32, D.ACL_INT8, D.ACL_UINT8)


def _clamp_samples(row: Clamp) -> SampleGen:
    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in CLAMP_SAMPLE_DTYPES:
            special = dt.is_float
            if not row.tensors:
                for j, shape in enumerate(S.ELEMENTWISE_SHAPES):
                    x = S.array(rng, shape, dt, special=special)
                    bounds = (1, -1.5, 2.5) if dt.is_float else ((1, 5) if dt == D.ACL_UINT8 else (1, -2, 5))
                    # every bound at the largest shape, one (in turn) at each other shape
                    chosen = bounds if shape == S.ELEMENTWISE_SHAPES[-1] else bounds[j % len(bounds) :][:1]
                    for bound in chosen:
                        args: dict[str, object] = {"self": x, **{b: bound for b in _bounds(row)}}
                        yield Sample(args, f"{dt.short} {list(shape)} bound {bound!r}")
                continue
            for sx, sb in S.BROADCAST_PAIRS if dt in (D.ACL_FLOAT, D.ACL_INT32) else S.BROADCAST_PAIRS[1::2]:
                args = {"self": S.array(rng, sx, dt, special=special)}
                if row.lower:
                    args[row.lower] = S.array(rng, sb, dt, low=-3.0, high=0.0)
                if row.upper:
                    args[row.upper] = S.array(rng, sb, dt, low=0.0, high=3.0)
                yield Sample(args, f"{dt.short} {list(sx)}⊕{list(sb)}")
        if row.tensors:
            names = _bounds(row)
            x = S.array(rng, (4, 5), D.ACL_FLOAT, special=True)
            nan = np.array([np.nan, 0.5, -np.inf, np.inf, 1.0], np.float32)
            yield Sample({"self": x, **{b: nan for b in names}}, "float32 with NaN and infinite bounds")
            yield Sample(
                {"self": S.array(rng, (3, 4), D.ACL_INT32), **{b: S.array(rng, (4,), D.ACL_BOOL) for b in names}},
                "int32 with bool bounds",
            )
            yield Sample(
                {"self": S.array(rng, (3, 4), D.ACL_INT32), **{b: S.array(rng, (4,), D.ACL_FLOAT16) for b in names}},
                "int32 with float16 bounds (computes in float16)",
            )
            if len(names) == 2:
                lo, hi = (S.array(rng, (6,), D.ACL_FLOAT, low=a, high=b) for a, b in ((1, 2), (-2, -1)))
                yield Sample({"self": S.array(rng, (6,), D.ACL_FLOAT), names[0]: lo, names[1]: hi}, "lower > upper")
                for absent in names:
                    present = {b: S.array(rng, (5,), D.ACL_FLOAT16) for b in names}
                    present[absent] = None  # type: ignore[assignment]
                    yield Sample({"self": S.array(rng, (2, 5), D.ACL_FLOAT16), **present}, f"{absent} null")
        else:
            yield Sample(
                {"self": S.array(rng, (3, 4), D.ACL_INT32), **{b: 1.5 for b in _bounds(row)}},
                "int32 with a float bound (computes in float32)",
            )
            yield Sample({"self": S.array(rng, (5,), D.ACL_FLOAT), **{b: np.nan for b in _bounds(row)}}, "a NaN bound")

    return gen


def _clamp_errors(row: Clamp) -> ErrorGen:
    def gen(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = S.array(rng, (2, 3), D.ACL_FLOAT)
        bound: object = S.array(rng, (2, 3), D.ACL_FLOAT) if row.tensors else 1.0
        names = _bounds(row)
        full = {"self": x, **{b: bound for b in names}}
        yield ErrorSample({**full, "out": np.zeros((2, 3), np.int32)}, INVALID, "a float result into int32")
        yield ErrorSample(
            {"self": S.array(rng, (2, 3), D.ACL_BOOL), **{b: True if not row.tensors else bound for b in names}},
            INVALID,
            "a bool self",
        )
        if row.tensors:
            yield ErrorSample({"self": x, **{b: S.array(rng, (4, 3), D.ACL_FLOAT) for b in names}}, INVALID, "shapes")
            if len(names) == 2:
                yield ErrorSample({"self": x, **{b: None for b in names}}, NULLPTR, "both bounds null")

    return gen


def _clamp(row: Clamp) -> OpSpec:
    params: list[Param] = [tensor("self", CLAMP_SELF)]
    both = row.lower is not None and row.upper is not None
    for b in _bounds(row):
        params.append(tensor(b, REAL_BOOL, optional=both) if row.tensors else scalar(b))
    params.append(out("out", CLAMP_SELF))
    return OpSpec(
        row.name,
        FAMILY,
        tuple(params),
        _clamp_infer(row),
        alias_ok=True,
        samples=_clamp_samples(row),
        error_samples=_clamp_errors(row),
        accuracy=_CLAMP_ACCURACY,
    )


_CLAMP_ACCURACY = exact("a selection of self or a bound; the sign of a zero result is unspecified", signed_zero=False)


# ----------------------------------------------------------------------------- Addcmul / Addcdiv
ADDCMUL = FLOATS64 | (INTEGERS - {D.ACL_INT16})
"""FLOAT, FLOAT16, DOUBLE, BFLOAT16, INT32, INT64, INT8, UINT8 (the page's list)."""
ADDCDIV = FLOATS64
"""The page's list less INT64 (see the module docstring)."""
ADDC: dict[str, frozenset[D]] = {"Addcmul": ADDCMUL, "Addcdiv": ADDCDIV}
_TENSORS = ("self", "tensor1", "tensor2")


def value_in(compute: D, value: float | int | complex) -> Any:
    """``value`` as the kernel uses it: float32 for float32 and narrower, float64 for float64, else int."""
    if compute == D.ACL_DOUBLE:
        return float(value.real if isinstance(value, complex) else value)
    if compute.is_float:
        return float(np.float32(value.real if isinstance(value, complex) else value))
    return int(value.real if isinstance(value, complex) else value)


def _addc_infer(name: str, dtypes: frozenset[D]) -> Any:
    def infer(call: Call) -> Infos:
        ts = [tensor_arg(call, n) for n in _TENSORS]
        shape = broadcast_shapes(*(t.shape for t in ts), names=_TENSORS)
        compute = promote_types(ts[0].dtype, promote_types(ts[1].dtype, ts[2].dtype))
        if compute not in dtypes:
            raise invalid(f"{name} computes in {compute.short}, which it does not support")
        value = call.args["value"]
        assert isinstance(value, AclScalar)
        if value.dtype.is_complex or (not compute.is_float and (value.dtype.is_float or value.dtype == D.ACL_BOOL)):
            raise invalid(f"value of dtype {value.dtype.short} cannot be cast to {compute.short}")
        call.plan["compute"] = compute
        return {"out": castable(shape, compute)}

    return infer


def addc_scale(name: str) -> Any:
    """``S = |self| + |value·t1·t2|`` (``|value·t1/t2|`` for Addcdiv): the terms the result may cancel."""

    def scale(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> dict[str, Any]:
        x = args["self"] if "self" in args else args["selfRef"]  # the in-place twin's args
        a, b, c = (np.asarray(v).astype(np.float64) for v in (x, args["tensor1"], args["tensor2"]))
        v = abs(float(np.real(args["value"])))
        with np.errstate(all="ignore"):
            term = np.abs(b * c) if name == "Addcmul" else np.abs(b / c)
            return {n: np.abs(a) + v * term for n in outputs}

    return scale


def _addc_accuracy(name: str) -> Accuracy:
    return composite(
        steps=3,
        length_of=lambda args, outputs: 1,
        scale_of=addc_scale(name),
        reason="three roundings in float32 (float64 for float64): the product or quotient, the scaling by"
        " value, the sum with self, which may cancel (a bound relative to |self| + |value·t1∘t2|)",
    )


ADDC_SAMPLE_DTYPES = (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16, D.ACL_DOUBLE, D.ACL_INT32, D.ACL_INT64, D.ACL_INT8)


def _addc_samples(name: str, dtypes: frozenset[D]) -> SampleGen:
    shapes = (((2, 3, 4), (2, 3, 4), (2, 3, 4)), ((4, 1, 3), (1, 5, 3), (3,)), ((3, 4), (4,), ()), ((0, 3),) * 3)

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in (d for d in ADDC_SAMPLE_DTYPES if d in dtypes):
            for k, combo in enumerate(shapes):
                args: dict[str, object] = {}
                for n, shape in zip(_TENSORS, combo):
                    if n == "tensor2" and name == "Addcdiv":
                        args[n] = S.positive(rng, shape, dt)
                    else:
                        args[n] = S.array(rng, shape, dt, special=dt.is_float and n == "self")
                for value in (0.5, -3) if dt.is_float else (2, -3):
                    yield Sample({**args, "value": value}, f"{dt.short} shapes {k} value {value}")
        x = S.array(rng, (2, 3), D.ACL_FLOAT16)
        t = S.array(rng, (2, 3), D.ACL_FLOAT)
        yield Sample({"self": x, "tensor1": t, "tensor2": S.positive(rng, (3,), D.ACL_BF16), "value": 0.1}, "mixed")
        if name == "Addcdiv":
            z = np.array([0.0, -0.0, 1.0], np.float32)
            num = np.array([1.0, 1.0, 0.0], np.float32)
            yield Sample({"self": np.ones(3, np.float32), "tensor1": num, "tensor2": z, "value": 1.0}, "division by 0")

    return gen


def _addc_errors(name: str) -> ErrorGen:
    def gen(rng: np.random.Generator) -> Iterable[ErrorSample]:
        f = S.array(rng, (2, 3), D.ACL_FLOAT)
        base = {"self": f, "tensor1": f, "tensor2": f, "value": 1.0}
        yield ErrorSample({**base, "tensor2": S.array(rng, (4, 3), D.ACL_FLOAT)}, INVALID, "shapes")
        yield ErrorSample({**base, "out": np.zeros((2, 3), np.int32)}, INVALID, "a float result into int32")
        yield ErrorSample({**base, "value": 1j}, INVALID, "a complex value")
        if name == "Addcmul":
            i = S.array(rng, (2, 3), D.ACL_INT32)
            yield ErrorSample({"self": i, "tensor1": i, "tensor2": i, "value": 0.5}, INVALID, "a float value, int32")
            i8, u8 = S.array(rng, (3,), D.ACL_INT8), S.array(rng, (3,), D.ACL_UINT8)
            yield ErrorSample({"self": i8, "tensor1": u8, "tensor2": u8, "value": 1}, INVALID, "computes in int16")

    return gen


def _addc(name: str, dtypes: frozenset[D]) -> OpSpec:
    params = (*(tensor(n, dtypes) for n in _TENSORS), scalar("value"), out("out", dtypes))
    return OpSpec(
        name,
        FAMILY,
        params,
        _addc_infer(name, dtypes),
        alias_ok=True,
        samples=_addc_samples(name, dtypes),
        error_samples=_addc_errors(name),
        accuracy=_addc_accuracy(name),
    )


def _twin_samples(base: OpSpec) -> SampleGen:
    """The base's samples whose result keeps ``self``'s shape and dtype (an in-place result must fit it)."""

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for s in base.samples(rng) if base.samples else ():
            x = s.args["self"]
            if "out" in s.args or not isinstance(x, np.ndarray):
                continue
            others = [v for k, v in s.args.items() if k != "self" and isinstance(v, np.ndarray)]
            shape = np.broadcast_shapes(x.shape, *(v.shape for v in others))
            if shape == x.shape and all(v.dtype == x.dtype for v in others) and not _widens(s.args, x):
                yield replace(s, args={("selfRef" if k == "self" else k): v for k, v in s.args.items()})

    return gen


def _widens(args: Mapping[str, Any], x: np.ndarray) -> bool:
    """True when a float scalar bound would make an integer self compute in float32."""
    return x.dtype.kind in "iu" and any(isinstance(v, float) for v in args.values())


_base: list[OpSpec] = [*(_clamp(r) for r in CLAMPS), *(_addc(n, d) for n, d in ADDC.items())]
_by_name = {s.name: s for s in _base}
TWINS: dict[str, str] = {**{r.name: r.twin for r in CLAMPS if r.twin}, "Addcmul": "selfRef", "Addcdiv": "selfRef"}
"""Ops with an aclnnInplace twin, and the official name of its in-out tensor."""
_twins = [inplace_twin(_by_name[op], ref_name=ref, samples=_twin_samples(_by_name[op])) for op, ref in TWINS.items()]

SPECS: list[OpSpec] = [*_base, *_twins]

"""Value cases for every declared dtype of every tensor input: derived from an op's own samples by casting.

An operator's spec declares, per tensor parameter, the dtypes it accepts; its hand-written samples
use a few of them. For each declared (parameter, dtype) pair no sample uses, :func:`derive` takes a
sample that has that parameter, casts every tensor of the parameter's dtype that may hold the new
one (so operands that must agree keep agreeing), leaves the outputs to the op's output rule (so
its promotion / out-dtype rule decides them) and keeps the first candidate the op's own shared
validation accepts. Values stay meaningful across the cast: floats become integers by rounding
(clipped to the type), unsigned types take magnitudes, bool takes the sign (x > 0).

An op opts out of one dtype (or of all, ``"*"``) in :data:`OPT_OUTS` with the reason; the suite
reports those pairs as unproven by design, never silently.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.dtypes import from_numpy
from acl_core.errors import AclCoreError
from acl_core.spec.opspec import Kind, OpSpec, OutInfo, Role, Sample

DERIVED = "derived from"
"""Marks a derived sample's note: ``"int8 self, derived from <base note>"`` (its dtype comes first)."""

OPT_OUTS: dict[str, dict[str, str]] = {
    "TransMatmulWeight": {
        "uint8": "it rewrites its own allocation into FRACTAL_NZ, whose size depends on the dtype's C0 "
        "(aclnnCalculateMatmulWeightSize): a sample's allocation cast to a 1-byte dtype is too short",
    },
}
"""Per operator, dtype short name (or ``"*"``) to the reason no value case can be derived for it."""


def _is_tensor_input(p: Any) -> bool:
    return p.kind in (Kind.TENSOR, Kind.TENSOR_LIST) and p.role is not Role.OUT


def _arrays(value: Any) -> list[np.ndarray]:
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, np.ndarray)]
    return [value] if isinstance(value, np.ndarray) else []


def covered(spec: OpSpec, samples: Sequence[Sample]) -> dict[str, set[D]]:
    """Per tensor input parameter, the dtypes the samples give it."""
    found: dict[str, set[D]] = {p.name: set() for p in spec.params if _is_tensor_input(p)}
    for s in samples:
        for name in found:
            for arr in _arrays(s.args.get(name)):
                found[name].add(from_numpy(arr.dtype))
    return found


def opt_out(op: str, dtype: D) -> str | None:
    """The reason ``op`` gives for not deriving ``dtype`` cases, if it opted out."""
    reasons = OPT_OUTS.get(op, {})
    return reasons.get(dtype.short) or reasons.get("*")


def cast_values(arr: np.ndarray, dtype: D) -> np.ndarray:
    """``arr`` as ``dtype`` with values that stay meaningful (rounded, clipped, magnitudes, sign)."""
    fmt = getattr(arr, "acl_format", None)
    result = _cast(np.asarray(arr), dtype)
    if fmt is not None:  # a value placed in a private format (NzArray) keeps it
        from acl_core.nz import NzArray

        return NzArray(result, fmt)
    return result


def _cast(arr: np.ndarray, dtype: D) -> np.ndarray:
    target = dtype.numpy
    assert target is not None
    src = arr.dtype
    with np.errstate(all="ignore"):
        if dtype is D.ACL_BOOL:
            return np.asarray(arr > 0 if src.kind in "fiuV" else arr != 0).astype(target)
        if dtype.is_complex:
            return np.asarray(arr).astype(np.complex128 if src.kind == "c" else np.float64).astype(target)
        if src.kind == "c":
            arr = np.real(arr)
        if not dtype.is_float:
            info = np.iinfo(target)
            values = np.asarray(arr).astype(np.float64)
            values = np.nan_to_num(np.rint(values), nan=0.0, posinf=info.max, neginf=info.min)
            if info.min == 0:
                values = np.abs(values)
            return np.clip(values, info.min, info.max).astype(target)
        return np.asarray(arr).astype(np.float64 if src.kind == "V" else src).astype(target)


def _scalar_as(value: Any, dtype: D) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    if dtype is D.ACL_BOOL:
        return bool(value > 0)
    if not dtype.is_float and not dtype.is_complex:
        return round(value)
    return value


def _candidates(spec: OpSpec, sample: Sample, name: str, dtype: D) -> Iterator[dict[str, Any]]:
    """Argument sets that move parameter ``name`` of ``sample`` to ``dtype`` (its dtype group moves along)."""
    base = _arrays(sample.args.get(name))
    if not base or any(from_numpy(a.dtype).is_packed for a in base):
        return
    source = base[0].dtype
    args: dict[str, Any] = {}
    for p in spec.params:
        value = sample.args.get(p.name)
        if p.role is Role.OUT and value is None:
            continue  # the output rule decides the result dtype
        if p.kind in (Kind.TENSOR, Kind.TENSOR_LIST) and (p.dtypes is None or dtype in p.dtypes):
            if isinstance(value, np.ndarray) and value.dtype == source:
                value = cast_values(value, dtype)
            elif isinstance(value, list) and value and all(isinstance(v, np.ndarray) for v in value):
                value = [cast_values(v, dtype) if v.dtype == source else v for v in value]
        if value is not None or p.name in sample.args:
            args[p.name] = value
    yield args
    scalars = {p.name: _scalar_as(args[p.name], dtype) for p in spec.params if p.kind is Kind.SCALAR and p.name in args}
    if any(scalars[k] is not args[k] for k in scalars):
        yield {**args, **scalars}


def _placeholder(value: Any, slot: list[int]) -> Any:
    """An aclTensor describing ``value`` at a distinct fake address (validation reads no memory)."""
    from acl_core.formats import Format
    from acl_core.tensor import AclTensor

    if not isinstance(value, np.ndarray) or hasattr(value, "acl_format"):
        return value  # scalars and private-format values go through eager's own conversion
    slot[0] += 1
    return AclTensor.create(
        value.shape, from_numpy(value.dtype), None, 0, Format.ACL_FORMAT_ND, value.shape, slot[0] << 40
    )


def _plain(value: Any) -> bool:
    """An array placed in a plain format (not an NzArray)."""
    return isinstance(value, np.ndarray) and not hasattr(value, "acl_format")


def _check(spec: OpSpec, args: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """(refusal message or None, output infos): the op's shared validation and output rule on ``args``."""
    refusal, infos, _ = checked_sample(spec, args)
    return refusal, infos


def checked_sample(spec: OpSpec, args: dict[str, Any]) -> tuple[str | None, dict[str, Any], dict[str, Any]]:
    """(refusal message or None, output infos, the validated call's plan): :func:`_check` with the plan.

    Tensors are described at fake addresses and validated without a runtime, so no memory is touched;
    missing outputs are described from the output rule, as ``eager.run`` allocates them.
    """
    from acl_core import eager
    from acl_core.plugin import get_backend
    from acl_core.spec.validate import check_inputs, validate
    from acl_core.tensor import AclTensorList

    slot = [0]
    placed: dict[str, Any] = {}
    for p in spec.params:
        value = args.get(p.name)
        if p.kind is Kind.TENSOR:
            value = _placeholder(value, slot)
        elif p.kind is Kind.TENSOR_LIST and isinstance(value, list) and all(_plain(v) for v in value):
            value = AclTensorList.create([_placeholder(v, slot) for v in value])  # private formats: eager places them
        if p.name in args:
            placed[p.name] = value
    conv = eager._Arguments(get_backend("reference"), "contiguous")
    infos: dict[str, Any] = {}
    plan: dict[str, Any] = {}
    try:
        converted = conv.convert(spec, placed)
        infos = dict(check_inputs(spec, converted, None, outputs_required=False).plan["outputs"])
        for p in spec.params:
            info = infos.get(p.name)
            if p.role is not Role.OUT or converted.get(p.name) is not None or info is None:
                continue
            if isinstance(info, list):
                converted[p.name] = AclTensorList.create([_empty(i.shape, i.dtype, slot) for i in info])
            else:
                converted[p.name] = _empty(info.shape, info.dtype, slot)
        plan = validate(spec, converted, None).plan
    except AclCoreError as exc:
        return exc.message, infos, plan
    finally:
        conv.free()
    return None, infos, plan


def _empty(shape: tuple[int, ...], dtype: D, slot: list[int]) -> Any:
    from acl_core.formats import Format
    from acl_core.tensor import AclTensor

    slot[0] += 1
    return AclTensor.create(shape, dtype, None, 0, Format.ACL_FORMAT_ND, shape, slot[0] << 40)


def _by_size(samples: Sequence[Sample]) -> list[Sample]:
    """Samples to derive from, richest first: no empty tensors, then most elements (up to 4096)."""

    def key(s: Sample) -> tuple[bool, int]:
        arrays = [a for v in s.args.values() for a in _arrays(v)]
        return (any(a.size == 0 for a in arrays), -min(sum(a.size for a in arrays), 4096))

    return sorted(samples, key=key)


def derive(spec: OpSpec, samples: Sequence[Sample]) -> tuple[list[Sample], dict[D, str]]:
    """Derived samples for the declared (tensor, dtype) pairs ``samples`` leave uncovered, and why others cannot be.

    Inputs are cast (with their dtype group); an output dtype its rule lets the caller choose
    ("castable", "listed") is given as an explicit output of that dtype. The second result maps each
    declared dtype that stays uncovered to the reason: an opt-out, a dtype with no NumPy form, or the
    refusal of the op's own validation for every candidate.
    """
    if not samples:
        return [], {}
    have = covered(spec, samples)
    ordered = _by_size(samples)
    made: list[Sample] = []
    why: dict[D, str] = {}

    def wanted(declared: frozenset[D] | None, got: set[D]) -> list[D]:
        return [] if declared is None else sorted(declared - got)

    for p in spec.params:
        if not _is_tensor_input(p):
            continue
        for dtype in wanted(p.dtypes, have[p.name]):
            reason = _unusable(spec, dtype)
            found = None if reason else _first_valid(spec, ordered, p.name, dtype, why)
            if found is not None:
                made.append(found)
                for q, dts in covered(spec, [found]).items():
                    have[q] |= dts
            elif reason:
                why.setdefault(dtype, reason)
    outs = [p for p in spec.params if p.role is Role.OUT and p.kind is Kind.TENSOR and p.dtypes is not None]
    if outs:
        infos = [(s, _check(spec, s.args)[1]) for s in ordered[:OUT_SAMPLES]]
        for p in outs:
            got = {i.dtype for _, inf in infos if isinstance(i := inf.get(p.name), OutInfo)}
            got |= {from_numpy(a.dtype) for s in samples for a in _arrays(s.args.get(p.name))}
            got |= {from_numpy(a.dtype) for s in made for a in _arrays(s.args.get(p.name))}
            for dtype in wanted(p.dtypes, got):
                reason = _unusable(spec, dtype)
                found = None if reason else _explicit_out(spec, infos, p.name, dtype, why)
                if found is not None:
                    made.append(found)
                elif reason:
                    why.setdefault(dtype, reason)
    covered_now = {d for dts in covered(spec, [*samples, *made]).values() for d in dts}
    covered_now |= {from_numpy(a.dtype) for s in made for p in outs for a in _arrays(s.args.get(p.name))}
    return made, {d: r for d, r in why.items() if d not in covered_now}


OUT_SAMPLES = 16
"""How many samples (richest first) are asked for their output dtypes when deriving output-dtype cases."""


def _unusable(spec: OpSpec, dtype: D) -> str | None:
    reason = opt_out(spec.name, dtype)
    if reason:
        return f"opted out: {reason}"
    if dtype.numpy is None or dtype.is_packed:
        return f"{dtype.short} has no plain NumPy form to cast samples to (packed or host-less)"
    return None


def _first_valid(spec: OpSpec, samples: Sequence[Sample], name: str, dtype: D, why: dict[D, str]) -> Sample | None:
    for sample in samples:
        for args in _candidates(spec, sample, name, dtype):
            refusal, _ = _check(spec, args)
            if refusal is None:
                note = sample.note or "sample"
                return replace(sample, args=args, note=f"{dtype.short} {name}, {DERIVED} {note}")
            why.setdefault(dtype, f"the op's validation refuses every call derived from its samples: {refusal}")
    return None


def _explicit_out(
    spec: OpSpec, infos: list[tuple[Sample, dict[str, Any]]], name: str, dtype: D, why: dict[D, str]
) -> Sample | None:
    np_dtype = dtype.numpy
    assert np_dtype is not None
    for sample, inf in infos:
        info = inf.get(name)
        if not isinstance(info, OutInfo) or info.dtype_rule == "same":
            continue
        args = {**sample.args, name: np.zeros(info.shape, np_dtype)}
        refusal, _ = _check(spec, args)
        if refusal is None:
            return replace(sample, args=args, note=f"{dtype.short} {name}, {DERIVED} {sample.note or 'sample'}")
        why.setdefault(dtype, f"the op's validation refuses every derived output dtype: {refusal}")
    why.setdefault(dtype, f"the output rule fixes {name}'s dtype from the inputs, and no input derivation reaches it")
    return None

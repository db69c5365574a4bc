"""Samples derived from each operator's own, so every operator gets the inputs a GPU kernel gets wrong.

From an operator's declared samples (its values already respect the operator's domain) this module
derives, by rule rather than by hand:

* **size tiers** (:func:`size_tiers`): elementwise ops and pointwise losses (:data:`FLAT_FAMILIES`; a
  loss once per ``reduction``) at the flat sizes of
  :data:`acl_core.spec.samples.ELEMENTWISE_TIERS`, row-wise ops (the reduction and norm families)
  with rows of :data:`~acl_core.spec.samples.ROW_TIERS` and many rows, GEMMs (a ``self`` @ ``mat2``
  operator) at the (M, K, N) of :data:`~acl_core.spec.samples.GEMM_TIERS`. Values are resampled
  from the sample's own, so a tier stays in the operator's domain;
* **values** (:func:`value_tiers`): every float input of an elementwise, reduction or norm op with
  NaN, ±Inf, ±0, subnormals, the largest finite value and values near overflow (a loss's inputs and
  targets too); every integer input
  of an elementwise op with its dtype's extremes, so overflow happens (the reference defines it:
  NumPy's two's-complement wrap-around, as CANN's integer kernels do);
* **dims** (:func:`dim_variants`): every negative dim −1 … −rank of an operator's ``dim``/``axis``
  attribute, and for a dims array every single dim and every pair, with keepdim true and false;
* **attributes** (:func:`attribute_combinations`): the product of every choice-valued and bool
  attribute's declared values when small, each value once otherwise;
* **stride-0 inputs** (:func:`expanded`): the sample with its float inputs made constant along their
  innermost axis longer than 1 and held as NumPy broadcast views, placed with stride 0 by the ``expanded`` layout.

Dims and attribute variants are candidates: the reference runs each once (small) and those it
refuses are dropped, since a combination the contract refuses is not a value case (error parity has
its own cases).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.dtypes import from_numpy
from acl_core.errors import AclCoreError
from acl_core.spec import samples as S
from acl_core.spec.opspec import Kind, OpSpec, Role, Sample

FLAT_FAMILIES = frozenset({"elementwise", "loss"})
"""Families whose ops work element by element over broadcast inputs (a loss then maybe sums the terms): they get
flat size tiers, which cross every block, vector and grid boundary (and a reduced loss's slices)."""
ROW_FAMILIES = frozenset({"reduction", "norm"})
"""Families whose kernels work a row at a time (a block per row): they get row tiers."""
VALUE_FAMILIES = frozenset({"elementwise", "reduction", "norm", "loss"})
"""Families whose every float input gets the special values (other families' float inputs are scales,
weights or positions, where NaN tells nothing a value case checks)."""
DIM_INTS = frozenset({"dim", "axis"})
DIM_ARRAYS = frozenset({"dim", "dims", "axes"})
MAX_PRODUCT = 16
"""Attribute combinations: the whole product when it has at most this many members, else each value once."""


@dataclass(frozen=True)
class Derived:
    """One derived sample, made by ``make`` when a case needs it (a size tier holds millions of elements,
    so none is kept longer than its case): ``quick`` when quick mode runs it; ``check``: a candidate
    kept only when the reference accepts it."""

    note: str
    quick: bool
    make: Callable[[], Sample] = field(compare=False)
    check: bool = False

    @staticmethod
    def of(sample: Sample, quick: bool, check: bool = False) -> Derived:
        """A derived sample already made (small)."""
        return Derived(sample.note, quick, lambda: sample, check)


Rng = Callable[[int], np.random.Generator]
"""The generator of a derived sample, by a number unique within the operator (results never depend on order)."""


def derive(spec: OpSpec, samples: Sequence[Sample], rng: Rng) -> list[Derived]:
    """Every derived sample of ``spec`` (size tiers, values, dims, attributes; stride-0 ones come apart)."""
    found: list[Derived] = []
    found.extend(size_tiers(spec, samples, rng))
    found.extend(value_tiers(spec, samples, rng(0)))
    found.extend(dim_variants(spec, samples))
    found.extend(attribute_combinations(spec, samples))
    return found


def accepted(spec: OpSpec, derived: Sequence[Derived]) -> list[Derived]:
    """``derived`` without the candidates the reference refuses (each candidate runs once, small)."""
    from acl_core import eager
    from acl_core.plugin import get_backend

    kept = []
    reference = None
    for d in derived:
        if d.check:
            reference = reference or get_backend("reference")
            try:
                eager.run(spec.name, reference, op_args=d.make().args)
            except AclCoreError:
                continue
            except Exception:  # not a refusal: keep it, so that its case reports what happened
                pass
        kept.append(d)
    return kept


# ------------------------------------------------------------------------------------------ helpers
def _arrays(
    spec: OpSpec, args: dict[str, Any], roles: frozenset[Role] | None = None
) -> Iterator[tuple[str, int | None]]:
    """(parameter, list index or None) for each NumPy array a sample passes to a tensor (list) parameter."""
    for p in spec.params:
        if roles is not None and p.role not in roles:
            continue
        value = args.get(p.name)
        if p.kind is Kind.TENSOR and isinstance(value, np.ndarray):
            yield p.name, None
        elif p.kind is Kind.TENSOR_LIST and isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                if isinstance(v, np.ndarray):
                    yield p.name, i


def _get(args: dict[str, Any], key: tuple[str, int | None]) -> np.ndarray:
    name, i = key
    return args[name] if i is None else args[name][i]


def _put(args: dict[str, Any], key: tuple[str, int | None], value: np.ndarray) -> None:
    name, i = key
    if i is None:
        args[name] = value
    else:
        items = list(args[name])
        items[i] = value
        args[name] = items


def _dtype(a: np.ndarray) -> D | None:
    try:
        return from_numpy(a.dtype)
    except (KeyError, ValueError, TypeError):
        return None


def _primary(spec: OpSpec, args: dict[str, Any]) -> tuple[str, int | None] | None:
    return next(iter(_arrays(spec, args, frozenset({Role.IN, Role.INOUT}))), None)


def _prefer_f32(spec: OpSpec, samples: Sequence[Sample], ok: Any) -> Sample | None:
    """The first sample ``ok`` accepts whose primary tensor is float32, else the first ``ok`` accepts."""
    fits = [s for s in samples if ok(s)]
    for s in fits:
        key = _primary(spec, s.args)
        if key is not None and _get(s.args, key).dtype == np.float32:
            return s
    return fits[0] if fits else None


def _resample_flat(rng: np.random.Generator, a: np.ndarray, n: int) -> np.ndarray:
    flat = np.ascontiguousarray(a).reshape(-1)
    return flat[rng.integers(0, flat.size, n)]


def _jitter(rng: np.random.Generator, a: np.ndarray) -> np.ndarray:
    """Break the ties resampling makes (a row-wise arg-max or sort must not meet a tie it may order freely)."""
    dt = _dtype(a)
    if dt is None or not dt.is_float or dt.numpy is None or a.dtype.itemsize < 2:
        return a
    with np.errstate(all="ignore"):
        out = (a.astype(np.float64) * (1.0 + rng.random(a.shape) * 2.0**-6)).astype(a.dtype)
    return np.where(np.isfinite(a), out, a)


# ------------------------------------------------------------------------------------------ size tiers
def size_tiers(spec: OpSpec, samples: Sequence[Sample], rng: Rng) -> list[Derived]:
    """The tiers of :data:`~acl_core.spec.samples` that fit the operator's shape rule (by family)."""
    if spec.family in FLAT_FAMILIES:
        return _flat_tiers(spec, samples, rng)
    if spec.family in ROW_FAMILIES:
        return _row_tiers(spec, samples, rng)
    names = {p.name for p in spec.params}
    if spec.family == "matmul" and {"self", "mat2"} <= names and "mat1" not in names:
        return _gemm_tiers(spec, samples, rng)
    return []


def _flat_tiers(spec: OpSpec, samples: Sequence[Sample], rng: Rng) -> list[Derived]:
    """Flat tiers of an elementwise op (from a sample whose arrays share one shape) or of a loss (any sample
    without empty arrays: its tensors broadcast, so each one of rank ≥ 1 becomes the tier's length, a 0-d
    gradOutput stays 0-d)."""
    loss = spec.family != "elementwise"

    def ok(s: Sample) -> bool:
        arrays = [_get(s.args, k) for k in _arrays(spec, s.args)]
        if loss:
            return any(a.ndim >= 1 for a in arrays) and all(a.size >= 1 for a in arrays)
        return bool(arrays) and all(a.ndim >= 1 and a.size >= 2 and a.shape == arrays[0].shape for a in arrays)

    found: list[Derived] = []
    for k, group in enumerate(_by_reduction(spec, samples)):
        base = _prefer_f32(spec, group, ok)
        if base is None:
            continue

        def make(n: int, note: str, sample: Sample = base, k: int = k) -> Sample:
            g = rng(n + k * REDUCTION_SEEDS)
            args = dict(sample.args)
            for key in _arrays(spec, args):
                if _get(args, key).ndim >= 1:
                    _put(args, key, _resample_flat(g, _get(args, key), n))
            return Sample(args, note, sample.tolerance)

        notes = [(n, f"{base.note} tier [{n}]") for n in S.ELEMENTWISE_TIERS]
        found += [Derived(note, n in S.ELEMENTWISE_QUICK, functools.partial(make, n, note)) for n, note in notes]
    return found


REDUCTION_SEEDS = 10_000_000
"""Generator numbers per ``reduction`` value of the flat tiers (past the largest tier, so none repeats)."""


def _by_reduction(spec: OpSpec, samples: Sequence[Sample]) -> list[list[Sample]]:
    """``samples`` grouped by their ``reduction`` attribute in declared order (one group when the op has none)."""
    param = next((p for p in spec.params if p.name == "reduction" and p.kind is Kind.INT and p.choices), None)
    if param is None:
        return [list(samples)]
    return [[s for s in samples if s.args.get("reduction") == value] for value in param.choices or ()]


def _reduces_last(spec: OpSpec, s: Sample, rank: int) -> bool:
    for p in spec.params:
        value = s.args.get(p.name)
        if p.kind is Kind.INT and p.name in DIM_INTS and isinstance(value, int):
            return value in (-1, rank - 1)
        if p.kind is Kind.INT_ARRAY and p.name in DIM_ARRAYS and isinstance(value, (list, tuple)):
            return not value or any(int(v) in (-1, rank - 1) for v in value)
    return True


def _row_tiers(spec: OpSpec, samples: Sequence[Sample], rng: Rng) -> list[Derived]:
    def ok(s: Sample) -> bool:
        key = _primary(spec, s.args)
        if key is None:
            return False
        x = _get(s.args, key)
        dt = _dtype(x)
        arrays = [_get(s.args, k) for k in _arrays(spec, s.args)]
        return (
            x.ndim >= 2
            and dt is not None
            and dt.is_float
            and all(a.size > 0 for a in arrays)
            and _reduces_last(spec, s, x.ndim)
        )

    base = _prefer_f32(spec, samples, ok)
    if base is None:
        return []
    key = _primary(spec, base.args)
    assert key is not None
    x = _get(base.args, key)
    length, rows, rank = x.shape[-1], x.shape[0], x.ndim
    sample = base

    def long_rows(n: int, note: str) -> Sample:
        g = rng(n)
        pick = g.integers(0, length, n)
        args = dict(sample.args)
        for k in _arrays(spec, args):
            a = _get(args, k)
            if a.ndim >= 1 and a.shape[-1] == length:
                _put(args, k, _jitter(g, np.take(a, pick, axis=-1)))
        for p in spec.params:
            value = args.get(p.name)
            if p.kind is Kind.INT and p.name in DIM_INTS and isinstance(value, int):
                args[p.name] = -1  # the row: the last dim alone
            elif p.kind is Kind.INT_ARRAY and p.name in DIM_ARRAYS and isinstance(value, (list, tuple)):
                args[p.name] = [-1]
            elif p.kind is Kind.INT_ARRAY and isinstance(value, (list, tuple)) and value and value[-1] == length:
                args[p.name] = [*value[:-1], n]  # a shape attribute naming the row (LayerNorm's normalizedShape)
        return Sample(args, note, sample.tolerance)

    def many_rows(note: str) -> Sample:
        g = rng(-1)
        pick = g.integers(0, rows, S.MANY_ROWS)
        args = dict(sample.args)
        for k in _arrays(spec, args):
            a = _get(args, k)
            if a.ndim == rank and a.shape[0] == rows:
                _put(args, k, np.take(a, pick, axis=0))
        return Sample(args, note, sample.tolerance)

    found = []
    for n in S.ROW_TIERS:
        note = f"{base.note} row tier {n}"
        found.append(Derived(note, n in S.ROW_QUICK, functools.partial(long_rows, n, note), check=True))
    note = f"{base.note} {S.MANY_ROWS} rows"
    found.append(Derived(note, False, functools.partial(many_rows, note), check=True))
    return found


def _gemm_tiers(spec: OpSpec, samples: Sequence[Sample], rng: Rng) -> list[Derived]:
    def ok(s: Sample) -> bool:
        a, b = s.args.get("self"), s.args.get("mat2")
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.ndim >= 2
            and a.ndim == b.ndim
            and a.dtype == b.dtype
            and a.size > 0
            and b.size > 0
        )

    base = _prefer_f32(spec, samples, ok)
    if base is None:
        return []
    a = base.args["self"]
    dt = from_numpy(a.dtype)
    batch = tuple(1 if n > 1 else n for n in a.shape[:-2])  # keep the rank, not the batch (work stays bounded)
    sample = base

    def make(i: int, note: str) -> Sample:
        g = rng(i)
        m, k, n = S.GEMM_TIERS[i]
        args = {
            **sample.args,
            "self": S.array(g, (*batch, m, k), dt, low=-1, high=1),
            "mat2": S.array(g, (*batch, k, n), dt, low=-1, high=1),
        }
        return Sample(args, note, sample.tolerance)

    found = []
    for i, (m, k, n) in enumerate(S.GEMM_TIERS):
        note = f"{base.note} gemm tier M={m} K={k} N={n}"
        found.append(Derived(note, (m, k, n) in S.GEMM_QUICK, functools.partial(make, i, note)))
    return found


# ------------------------------------------------------------------------------------------ values
def value_tiers(spec: OpSpec, samples: Sequence[Sample], rng: np.random.Generator) -> list[Derived]:
    """Special float values in every float input, integer extremes in every integer input (per dtype)."""
    found: list[Derived] = []
    if spec.family not in VALUE_FAMILIES and spec.name != "Cast":
        return found
    done: set[D] = set()
    roomiest = sorted(samples, key=lambda s: -min((_get(s.args, k).size for k in _arrays(spec, s.args)), default=0))
    for s in roomiest:
        key = _primary(spec, s.args)
        if key is None:
            continue
        dt = _dtype(_get(s.args, key))
        inputs = list(_arrays(spec, s.args, frozenset({Role.IN})))
        if dt is None or dt in done or dt.is_packed or not inputs:
            continue
        target = s.args.get("dtype") if spec.name == "Cast" else None
        if target is not None and not D(int(target)).is_float:
            continue  # CANN leaves NaN/Inf to an integer undefined: Cast gets specials only into float dtypes
        if dt.is_float and dt.numpy is not None and np.dtype(dt.numpy).itemsize >= 2:
            kind = "NaN/Inf/±0/subnormal/max in every float input"
        elif dt.is_integer and spec.family == "elementwise":
            kind = "integer extremes in every integer input"
        else:
            continue
        args = dict(s.args)
        changed = False
        for j, k in enumerate(inputs):
            a = np.array(_get(args, k))
            adt = _dtype(a)
            if adt is None or a.size == 0 or adt.is_float != dt.is_float or adt.is_integer != dt.is_integer:
                continue
            if adt.is_packed or (a.dtype.itemsize < 2 and adt.is_float):
                continue
            pool = S.special_values(adt, subnormal=True) if adt.is_float else S.integer_extremes(adt)
            flat = a.reshape(-1)
            vals = np.roll(pool, j)[: flat.size]
            flat[rng.permutation(flat.size)[: vals.size]] = vals
            _put(args, k, flat.reshape(a.shape))
            changed = True
        if changed:
            done.add(dt)
            found.append(Derived.of(Sample(args, f"{s.note} {kind}", s.tolerance), True, check=True))
    return found


# ------------------------------------------------------------------------------------------ dims
def dim_variants(spec: OpSpec, samples: Sequence[Sample]) -> list[Derived]:
    """Every negative dim of a ``dim`` attribute; single dims and pairs of a dims array, keepdim both ways."""
    int_dim = next((p for p in spec.params if p.kind is Kind.INT and p.name in DIM_INTS), None)
    arr_dim = next((p for p in spec.params if p.kind is Kind.INT_ARRAY and p.name in DIM_ARRAYS), None)
    keep = next((p for p in spec.params if p.kind is Kind.BOOL and p.name.lower().startswith("keep")), None)
    if int_dim is None and arr_dim is None:
        return []
    found: list[Derived] = []
    ranks: set[int] = set()
    for s in samples:
        key = _primary(spec, s.args)
        if key is None:
            continue
        x = _get(s.args, key)
        if x.ndim == 0 or x.ndim in ranks or x.size == 0:
            continue
        ranks.add(x.ndim)
        r = x.ndim
        if int_dim is not None and isinstance(s.args.get(int_dim.name), int):
            for d in range(-1, -r - 1, -1):
                args = {**s.args, int_dim.name: d}
                found.append(Derived.of(Sample(args, f"{s.note} {int_dim.name}={d}", s.tolerance), True, check=True))
        if arr_dim is not None and isinstance(s.args.get(arr_dim.name), (list, tuple)):
            sets = [[-i] for i in range(1, r + 1)] + [[-i, -j] for i, j in itertools.combinations(range(1, r + 1), 2)]
            keeps: list[bool | None] = [True, False] if keep is not None else [None]
            for dims, kd in itertools.product(sets, keeps):
                args = {**s.args, arr_dim.name: dims}
                label = f"{s.note} {arr_dim.name}={dims}"
                if keep is not None and kd is not None:
                    args[keep.name] = kd
                    label += f" {keep.name}={kd}"
                found.append(Derived.of(Sample(args, label, s.tolerance), len(dims) > 1 or kd is False, check=True))
    return found


# ------------------------------------------------------------------------------------------ attributes
def _values(p: Any) -> list[Any] | None:
    if p.kind is Kind.BOOL and not p.name.lower().startswith("keep"):
        return [False, True]
    if p.kind in (Kind.INT, Kind.STRING) and p.choices:
        if p.kind is Kind.INT and p.name.lower().endswith("type"):  # a dtype: one the host can hold
            return [v for v in p.choices if v not in _DTYPE_VALUES or D(v).numpy is not None]
        return list(p.choices)
    return None


_DTYPE_VALUES = frozenset(int(d) for d in D)


def attribute_combinations(spec: OpSpec, samples: Sequence[Sample]) -> list[Derived]:
    """The declared attribute values of ``spec`` on its first sample: the product if small, else each once."""
    base = next((s for s in samples if all(_get(s.args, k).size > 0 for k in _arrays(spec, s.args))), None)
    if base is None:
        return []
    axes = [(p.name, v) for p in spec.params if (v := _values(p)) is not None]
    if not axes:
        return []
    names = [n for n, _ in axes]
    total = 1
    for _, v in axes:
        total *= len(v)
    if total <= MAX_PRODUCT:
        combos = [dict(zip(names, c)) for c in itertools.product(*(v for _, v in axes))]
    else:
        combos = [{n: v} for n, vs in axes for v in vs]
    found = []
    for combo in combos:
        if all(base.args.get(n, object()) == v for n, v in combo.items()):
            continue
        label = " ".join(f"{n}={v!r}" for n, v in combo.items())
        found.append(
            Derived.of(Sample({**base.args, **combo}, f"{base.note} {label}", base.tolerance), True, check=True)
        )
    return found


# ------------------------------------------------------------------------------------------ stride 0
def expanded(spec: OpSpec, sample: Sample) -> Sample | None:
    """``sample`` with each float input (every input of an elementwise op) constant along its last
    axis longer than 1, held as a NumPy broadcast view; None when no input has such an axis."""
    if spec.family == "layout":  # private formats: their storage is the format, never a broadcast view
        return None
    args = dict(sample.args)
    changed = False
    for k in _arrays(spec, args, frozenset({Role.IN})):
        a = _get(args, k)
        dt = _dtype(a)
        if hasattr(a, "acl_format"):  # a private format's storage is the format, never a broadcast view
            continue
        if dt is None or dt.is_packed or a.size == 0 or not (dt.is_float or spec.family == "elementwise"):
            continue
        axis = next((i for i in reversed(range(a.ndim)) if a.shape[i] > 1), None)  # innermost: the fast axis
        if axis is None:
            continue
        _put(args, k, np.broadcast_to(np.take(a, [0], axis=axis), a.shape))
        changed = True
    return Sample(args, sample.note, sample.tolerance) if changed else None

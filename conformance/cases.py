"""Conformance cases, generated from the operator specs: values, error parity, and the Hypothesis tier.

Every declared operator yields

* one **value** case per sample and layout: contiguous, plus the non-contiguous placements of
  :data:`acl_core.eager.LAYOUTS` that change something for that sample (quick mode keeps one of
  them per sample, alternating deterministically; full mode keeps all);
* **error** cases: the spec's own ``error_samples`` and generic invalid calls derived from the
  parameters (a required handle passed as null → 161001; a tensor of a dtype outside its declared
  set → 161002; an output of the wrong shape → 161002; an input whose device allocation is too
  short for its view → 161002);
* one **claim** case: every dtype the backend claims for the op (among those the op declares) is
  used by at least one quick value case that runs; a claimed pair without one fails as
  "claimed, unproven" (value cases for uncovered declared dtypes are derived by
  :mod:`acl_conformance.dtype_cover`, so the reference proves every pair it claims);
* **flag** cases (:mod:`acl_conformance.flags`): Mm's fp32 error class follows ``tf32_enabled``,
  QuantMatmulV5's fp8 GEMM accumulates in float32 (``fp8_matmul_hw``'s path), and the MX ops check
  ``mx_use_hw`` against the reported architecture;
* in full mode, **hypothesis** cases: new values (and, for elementwise ops, new shapes) drawn
  around a few representative samples.

Samples are drawn from a generator seeded by the suite seed and the operator's name, so a case's
data never depends on which other operators are declared or selected.
"""

from __future__ import annotations

import functools
import math
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any

import numpy as np

from acl_conformance import derived, dtype_cover, flags
from acl_conformance.runtime_cases import catalog_cases, selected_cases
from acl_core.dtypes import DataType as D
from acl_core.dtypes import from_numpy
from acl_core.errors import AclnnStatus
from acl_core.formats import Format
from acl_core.spec.opspec import ErrorSample, IndexOf, Kind, OpSpec, Role, Sample

if TYPE_CHECKING:
    from acl_core.backend import Backend

NULLPTR = int(AclnnStatus.ACLNN_ERR_PARAM_NULLPTR)
INVALID = int(AclnnStatus.ACLNN_ERR_PARAM_INVALID)
TILING = int(AclnnStatus.ACLNN_ERR_INNER_TILING_ERROR)
SHAPE_CODES = (INVALID, TILING)
"""CANN reports shape problems as 161002, or for many ops as 561002 (tiling); the reference decides which."""
NON_CONTIGUOUS: tuple[str, ...] = ("padded", "transposed", "offset", "expanded")
"""The placements of :data:`acl_core.eager.LAYOUTS` besides contiguous."""
HYPOTHESIS_SAMPLES_PER_OP = 4
"""How many representative samples (distinct dtype/rank signatures) per op the Hypothesis tier grows."""
HYPOTHESIS_EXAMPLES = 25
"""Examples Hypothesis draws around each of them (full mode)."""
PLACEMENT_DEPENDENT: dict[str, str] = {
    "TransMatmulWeight": "rewrites its storage in place into FRACTAL_NZ order: what its ND view then shows "
    "depends on where the view sits in storage, so a placed case is compared with the reference placed alike",
}
"""Operators whose visible result depends on the storage placement of their tensors, with the reason.

Their non-contiguous cases compare the backend with the reference run under the same placement,
not with the reference's contiguous result.
"""
BAD_DTYPES: tuple[D, ...] = (
    D.ACL_COMPLEX128,
    D.ACL_UINT64,
    D.ACL_UINT32,
    D.ACL_UINT16,
    D.ACL_INT16,
    D.ACL_DOUBLE,
    D.ACL_UINT8,
    D.ACL_INT8,
    D.ACL_BOOL,
    D.ACL_FLOAT16,
    D.ACL_FLOAT,
    D.ACL_INT32,
    D.ACL_INT64,
)
"""Where a wrong dtype for a parameter is picked from: the first one its declared set lacks."""

CLAIM_NOTE = "claimed dtypes proven"
"""The note of each op's claim case (its id is ``claim:claimed dtypes proven``)."""

Args = dict[str, Any]
Builder = Callable[["Backend", "dict[str, Any] | None"], tuple[Args, list[Any]]]
"""Makes an error case's arguments on one backend, given the reference's outputs of the base sample."""


@dataclass(frozen=True)
class ErrorPlan:
    """How to make one invalid call, and the codes it may fail with (empty: parity with the reference only)."""

    build: Builder
    expected: tuple[int, ...]
    gate: tuple[D, ...]
    via_c: bool = False
    base_sample: int | None = None


@dataclass(frozen=True)
class Case:
    """One conformance case: ``case_id`` is unique within ``op``; expectation patterns match it."""

    op: str
    family: str
    kind: str
    case_id: str
    note: str
    sample: int = -1
    layout: str = "contiguous"
    quick: bool = True
    error: ErrorPlan | None = field(default=None, compare=False)

    @property
    def label(self) -> str:
        """``Op[case]`` for messages."""
        return f"{self.op}[{self.case_id}]"


CAPTURE_QUICK_SHARE = 5
"""Quick mode keeps the first capture case of one operator in this many (by a hash of its name)."""


def _seed(seed: int, op: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(op.encode())])


def _as_array(value: Any) -> np.ndarray | None:
    """The array a tensor argument becomes: NumPy arrays as they are, NumPy and Python scalars as 0-d arrays."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, (np.generic, bool, int, float, complex)):
        return np.asarray(value)  # what acl_core.eager places for it
    return None


def tensor_arrays(spec: OpSpec, args: Args) -> Iterator[tuple[str, np.ndarray]]:
    """(parameter, array) for every value a sample passes to a tensor or tensor-list parameter.

    0-d NumPy scalars and Python numbers count as the 0-d arrays they are placed as, so they are
    gated by dtype like any tensor (a ``bool`` scalar is a bool tensor).
    """
    for p in spec.params:
        value = args.get(p.name)
        if p.kind is Kind.TENSOR:
            arr = _as_array(value)
            if arr is not None:
                yield p.name, arr
        elif p.kind is Kind.TENSOR_LIST and isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                arr = _as_array(v)
                if arr is not None:
                    yield f"{p.name}[{i}]", arr


def arg_formats(spec: OpSpec, args: Args) -> set[Format]:
    """The aclFormats a call's tensors are placed in: ND unless a value names its own (NzArray)."""
    return {Format(int(getattr(arr, "acl_format", Format.ACL_FORMAT_ND))) for _, arr in tensor_arrays(spec, args)}


def arg_dtypes(spec: OpSpec, args: Args) -> set[D]:
    """The aclDataTypes a call's tensors (and dtype attributes) use."""
    found: set[D] = set()
    for _, arr in tensor_arrays(spec, args):
        found.add(from_numpy(arr.dtype))
    for p in spec.params:
        if p.kind is Kind.DTYPE and args.get(p.name) is not None and int(args[p.name]) != D.ACL_DT_UNDEFINED:
            found.add(D(int(args[p.name])))  # ACL_DT_UNDEFINED (Cumprod's "input's own dtype") names no dtype
    return found


def _meaningful_layouts(spec: OpSpec, args: Args) -> list[str]:
    """The non-contiguous layouts that place at least one input differently from contiguous."""
    arrays = [a for _, a in tensor_arrays(spec, args) if a.size > 0 and not from_numpy(a.dtype).is_packed]
    layouts = []
    if any(a.ndim >= 1 for a in arrays):
        layouts.append("padded")
    if any(a.ndim >= 2 for a in arrays):
        layouts.append("transposed")
    if arrays:
        layouts.append("offset")
    return layouts


def _signature(spec: OpSpec, args: Args) -> tuple[Any, ...]:
    arrays = tuple((name, str(a.dtype), a.ndim) for name, a in tensor_arrays(spec, args))
    others = tuple((k, type(v).__name__) for k, v in sorted(args.items()) if not isinstance(v, (np.ndarray, list)))
    return arrays + others


class OpCases:
    """One operator's samples and error samples, generated once from a seeded generator."""

    def __init__(self, spec: OpSpec, seed: int) -> None:
        self.spec = spec
        self.samples: list[Sample] = list(spec.samples(_seed(seed, spec.name))) if spec.samples else []
        self.written = len(self.samples)
        """Samples from the spec; those after them are derived for uncovered dtypes (contiguous cases only)."""
        covering, self.underivable = dtype_cover.derive(spec, self.samples)
        """Declared dtypes no sample covers and none could be derived for, with the reason."""
        self.samples += covering
        self.error_samples: list[ErrorSample] = (
            list(spec.error_samples(_seed(seed + 1, spec.name))) if spec.error_samples else []
        )
        key = [seed + 2, zlib.crc32(spec.name.encode())]
        self.derived: list[derived.Derived] = derived.accepted(
            spec, derived.derive(spec, self.samples[: self.written], lambda n: np.random.default_rng([*key, n % 2**32]))
        )
        """Samples derived from the spec's (size tiers, values, dims, attributes): indices after ``samples``."""
        self.expanded: dict[int, Sample] = {}
        """Each sample's stride-0 twin (its ``expanded`` case), by sample index."""
        for i, s in enumerate(self.samples[: self.written]):
            twin = derived.expanded(spec, s)
            if twin is not None:
                self.expanded[i] = twin

    def sample(self, index: int, layout: str = "contiguous") -> Sample:
        """Sample ``index``: the spec's own, then the derived ones (made afresh), or a stride-0 twin."""
        if layout == "expanded" and index in self.expanded:
            return self.expanded[index]
        if index < len(self.samples):
            return self.samples[index]
        return self.derived[index - len(self.samples)].make()

    def cases(self) -> list[Case]:
        """Every case of this op (full mode); ``quick`` marks the quick subset."""
        spec = self.spec
        found: list[Case] = []
        seen: dict[str, int] = {}

        def add(kind: str, note: str, suffix: str = "", **kw: Any) -> None:
            base = f"{kind}:{note}" if kind != "value" else note
            key = base + suffix
            n = seen.get(key, 0) + 1
            seen[key] = n
            case_id = key if n == 1 else f"{base} #{n}{suffix}"
            found.append(Case(spec.name, spec.family, kind, case_id, note, **kw))

        notes = [s.note or f"sample {i}" for i, s in enumerate(self.samples)]
        for i, (sample, note) in enumerate(zip(self.samples, notes)):
            add("value", note, "@contiguous", sample=i)
            layouts = (
                _meaningful_layouts(spec, sample.args) + (["expanded"] if i in self.expanded else [])
                if i < self.written
                else []
            )
            for j, layout in enumerate(layouts):
                add("value", note, f"@{layout}", sample=i, layout=layout, quick=(j == i % len(layouts)))
        for i, d in enumerate(self.derived, len(self.samples)):
            add("value", d.note, "@contiguous", sample=i, quick=d.quick)
        # captured and replayed twice with new inputs (acl_conformance.capture_cases): quick keeps a sample
        quick_capture = zlib.crc32(spec.name.encode()) % CAPTURE_QUICK_SHARE == 0
        for i in range(len(self.samples) + len(self.derived)):
            note = notes[i] if i < len(self.samples) else self.derived[i - len(self.samples)].note
            add("capture", note, sample=i, quick=quick_capture and i == 0)
        for es in self.error_samples:
            plan = ErrorPlan(_fixed(es.args), (es.code,), tuple(sorted(arg_dtypes(spec, es.args))))
            add("error", es.note or "error sample", error=plan)
        for note, plan in self._generic_errors():
            add("error", note, error=plan)
        for i in self._hypothesis_samples():
            add("hypothesis", notes[i], sample=i, quick=False)
        for note in flags.notes(spec.name):
            add("flag", note)
        add("claim", CLAIM_NOTE)
        return found

    # -------------------------------------------------------------------------------- generic errors
    def _base_index(self) -> int | None:
        for i, s in enumerate(self.samples):
            arrays = [a for _, a in tensor_arrays(self.spec, s.args)]
            if arrays and all(a.size >= 2 for a in arrays):
                return i
        return 0 if self.samples else None

    def _generic_errors(self) -> Iterator[tuple[str, ErrorPlan]]:
        index = self._base_index()
        if index is None:
            return
        spec, base = self.spec, self.samples[index].args
        gate = tuple(sorted(arg_dtypes(spec, base)))
        for p in spec.params:
            if not p.kind.is_handle or p.optional:
                continue
            if p.role is Role.OUT:
                build = _out_replaced(spec, base, p.name, lambda v: None)
                yield f"{p.name}=null", ErrorPlan(build, (NULLPTR,), gate, True, index)
            else:
                yield f"{p.name}=null", ErrorPlan(_replaced(base, p.name, None), (NULLPTR,), gate, False, index)
        for p in spec.params:
            if p.kind not in (Kind.TENSOR, Kind.TENSOR_LIST) or p.dtypes is None:
                continue
            bad = next((d for d in BAD_DTYPES if d not in p.dtypes), None)
            if bad is None:
                continue
            note = f"{p.name} as {bad.short}"
            if p.role is Role.OUT:
                if not p.optional:
                    build = _out_replaced(spec, base, p.name, functools.partial(_cast, dtype=bad))
                    yield note, ErrorPlan(build, (INVALID,), gate, False, index)
            elif isinstance(base.get(p.name), (np.ndarray, list)):
                yield note, ErrorPlan(_replaced(base, p.name, _cast(base[p.name], bad)), (INVALID,), gate, False, index)
        for p in spec.params:
            if p.role is Role.OUT and p.kind is Kind.TENSOR and not p.optional:
                build = _out_replaced(spec, base, p.name, _wrong_shape)
                yield f"{p.name} of a wrong shape", ErrorPlan(build, SHAPE_CODES, gate, False, index)
        yield from self._index_errors()
        for p in spec.params:
            value = base.get(p.name)
            if p.role is not Role.OUT and p.kind is Kind.TENSOR and isinstance(value, np.ndarray):
                if value.size >= 2 and not from_numpy(value.dtype).is_packed:
                    yield (
                        f"{p.name} allocation too short",
                        ErrorPlan(_short(base, p.name), (INVALID,), gate, False, index),
                    )
                    break

    def _index_errors(self) -> Iterator[tuple[str, ErrorPlan]]:
        """Index values only a kernel sees: one past the end, and below the accepted start.

        Generated for every parameter marked ``index_of`` from the first sample whose index is not
        empty and whose indexed tensor has the indexed dimension; one element of the index changes.
        """
        for p in self.spec.params:
            mark = p.index_of
            if mark is None:
                continue
            for i, sample in enumerate(self.samples):
                found = _indexed_entry(sample.args, p.name, mark)
                if found is None:
                    continue
                entry, size = found
                low = {"wrap": -size - 1, "pad": -2}.get(mark.negative, -1)
                gate = tuple(sorted(arg_dtypes(self.spec, sample.args)))
                label = p.name if entry is None else f"{p.name}[{entry}]"
                for what, value in (("past the end", size), ("below the start", low)):
                    plan = ErrorPlan(
                        _replaced(sample.args, p.name, _with_last(sample.args[p.name], entry, value)),
                        (INVALID,),
                        gate,
                        False,
                        i,
                    )
                    yield f"{label} value {value} {what}", plan
                break
        for p in self.spec.params:
            if p.group_list_type is None:
                continue
            layouts_done: set[int] = set()  # one base sample per layout
            for i, sample in enumerate(self.samples):
                values = sample.args.get(p.name)
                layout = sample.args.get(p.group_list_type)
                if not isinstance(values, np.ndarray) or values.ndim != 1 or values.size < 2 or layout not in (0, 1):
                    continue
                if layout in layouts_done:
                    continue
                layouts_done.add(int(layout))
                gate = tuple(sorted(arg_dtypes(self.spec, sample.args)))
                for what, bad in _bad_group_lists(values, int(layout)):
                    plan = ErrorPlan(_replaced(sample.args, p.name, bad), (INVALID,), gate, False, i)
                    yield f"{p.name} {what} (groupListType {layout})", plan

    # -------------------------------------------------------------------------------- hypothesis
    def _hypothesis_samples(self) -> list[int]:
        chosen: list[int] = []
        seen: set[tuple[Any, ...]] = set()
        for i, s in enumerate(self.samples[: self.written]):
            arrays = [a for _, a in tensor_arrays(self.spec, s.args)]
            if not arrays or any(a.size == 0 for a in arrays):
                continue
            sig = _signature(self.spec, s.args)
            if sig in seen:
                continue
            seen.add(sig)
            chosen.append(i)
            if len(chosen) == HYPOTHESIS_SAMPLES_PER_OP:
                break
        return chosen


def _bad_group_lists(values: np.ndarray, layout: int) -> Iterator[tuple[str, np.ndarray]]:
    """Group lists a kernel must refuse: a negative entry, past the grouped axis, and (cumulative) decreasing."""
    negative = values.copy()
    negative[0] = -1
    yield "with a negative entry", negative
    past = values.copy()
    past[-1] += 1 << 20  # far past any axis a sample has: the groups cover more rows than exist
    yield "covering more than the axis", past
    if layout == 0:
        decreasing = values.copy()
        decreasing[0] = values[-1] + 1
        yield "not monotone", decreasing


def _indexed_entry(args: Args, name: str, mark: IndexOf) -> tuple[int | None, int] | None:
    """(entry, size): which list entry (None: the tensor itself) to change, and the length it indexes."""
    if not mark.each:
        size = _indexed_size(args, name, mark)
        return None if size is None else (None, size)
    entries, target = args.get(name), args.get(mark.of)
    if not isinstance(entries, (list, tuple)) or not isinstance(target, np.ndarray):
        return None
    for j, e in enumerate(entries):
        if isinstance(e, np.ndarray) and e.dtype.kind in "iu" and e.size and j < target.ndim:
            return j, int(target.shape[j])
    return None


def _with_last(value: Any, entry: int | None, new: int) -> Any:
    """``value`` (a tensor, or a list with ``entry`` changed) with its last element set to ``new``."""
    if entry is None:
        changed = np.array(value, copy=True)
        changed.reshape(-1)[-1] = new
        return changed
    items = list(value)
    items[entry] = np.array(items[entry], copy=True)
    items[entry].reshape(-1)[-1] = new
    return items


def _indexed_size(args: Args, name: str, mark: IndexOf) -> int | None:
    """The length of the dimension that ``args[name]`` indexes; None when the sample cannot show it."""
    index, target = args.get(name), args.get(mark.of)
    if not isinstance(index, np.ndarray) or index.size == 0 or not isinstance(target, np.ndarray):
        return None
    if target.ndim == 0 or target.size == 0:
        return None
    dim = int(args.get(mark.dim, 0)) if mark.dim else mark.axis
    if not -target.ndim <= dim < target.ndim:
        return None
    dim %= target.ndim
    if dim + mark.span > target.ndim:
        return None
    return math.prod(int(n) for n in target.shape[dim : dim + mark.span])


# ------------------------------------------------------------------------------------ builders
def _fixed(args: Args) -> Builder:
    def build(backend: Backend, ref: dict[str, Any] | None) -> tuple[Args, list[Any]]:
        return dict(args), []

    return build


def _replaced(args: Args, name: str, value: Any) -> Builder:
    def build(backend: Backend, ref: dict[str, Any] | None) -> tuple[Args, list[Any]]:
        return {**args, name: value}, []

    return build


def _cast(value: Any, dtype: D) -> Any:
    np_dtype = dtype.numpy
    assert np_dtype is not None
    with np.errstate(all="ignore"):
        if isinstance(value, (list, tuple)):
            return [np.asarray(v).astype(np_dtype) for v in value]
        return np.asarray(value).astype(np_dtype)


def sentinel_outputs(spec: OpSpec, outputs: dict[str, Any]) -> Args:
    """Explicit output arrays shaped like ``outputs`` and filled with 77 (so unwritten elements show)."""

    def fill(like: Any) -> np.ndarray:
        like = np.asarray(like)
        with np.errstate(all="ignore"):
            return np.full(like.shape, 77).astype(like.dtype)

    found: Args = {}
    for p in spec.params:
        if p.role is Role.OUT and p.name in outputs:
            value = outputs[p.name]
            found[p.name] = [fill(v) for v in value] if isinstance(value, list) else fill(value)
    return found


def _out_replaced(spec: OpSpec, args: Args, name: str, make: Callable[[Any], Any]) -> Builder:
    """Every output given explicitly (from the reference's), output ``name`` replaced by ``make(its value)``."""

    def build(backend: Backend, ref: dict[str, Any] | None) -> tuple[Args, list[Any]]:
        assert ref is not None
        outs = sentinel_outputs(spec, ref)
        return {**args, **outs, name: make(outs.get(name))}, []

    return build


def _wrong_shape(value: Any) -> np.ndarray:
    good = np.asarray(value)
    shape = (good.shape[0] + 1, *good.shape[1:]) if good.ndim else (2,)
    return np.zeros(shape, good.dtype)


def _short(args: Args, name: str) -> Builder:
    def build(backend: Backend, ref: dict[str, Any] | None) -> tuple[Args, list[Any]]:
        from acl_core import eager
        from acl_core.tensor import AclTensor

        value = np.asarray(args[name])
        dtype = from_numpy(value.dtype)
        short = eager.to_device(value.reshape(-1)[: value.size // 2], backend)
        tensor = AclTensor.create(value.shape, dtype, None, 0, short.format, value.shape, short.address)
        return {**args, name: tensor}, [short]

    return build


class Catalog:
    """Every case of the selected operators, generated once per process (cheap: no op runs here)."""

    def __init__(self, specs: dict[str, OpSpec], *, seed: int = 0, ops: str | Sequence[str] | None = None) -> None:
        self.seed = seed
        self.all_specs = specs
        self.patterns = _patterns(ops)
        chosen = [s for s in specs.values() if selected(s, self.patterns)]
        self.specs = {s.name: s for s in sorted(chosen, key=_family_order)}
        self._ops: dict[str, OpCases] = {}
        self._cases: list[Case] | None = None

    def op(self, name: str) -> OpCases:
        """The samples of operator ``name`` (generated on first use)."""
        if name not in self._ops:
            self._ops[name] = OpCases(self.specs[name], self.seed)
        return self._ops[name]

    def sample(self, op: str, index: int, layout: str = "contiguous") -> Sample:
        """Sample ``index`` of ``op`` (see :meth:`OpCases.sample`)."""
        return self.op(op).sample(index, layout)

    def all_cases(self) -> list[Case]:
        """Every case of every selected op, full mode (quick cases are flagged)."""
        if self._cases is None:
            self._cases = [c for name in self.specs for c in self.op(name).cases()]
            self._cases += catalog_cases(self.patterns, Case)
        return self._cases

    def cases(self, mode: str) -> list[Case]:
        """The cases one mode runs: ``quick`` (the flagged subset) or ``full`` (all)."""
        if mode not in ("quick", "full"):
            raise ValueError(f"mode must be 'quick' or 'full', not {mode!r}")
        return [c for c in self.all_cases() if mode == "full" or c.quick]

    def ops_without_samples(self) -> list[str]:
        """Selected operators whose spec declares no samples (nothing proves their values)."""
        return [name for name in self.specs if not self.op(name).samples]

    def filtered_out(self, op_pattern: str) -> bool:
        """True when ``op_pattern`` names only declared ops that this run's --ops selection left out."""
        if op_pattern.startswith("runtime"):
            return not any(selected_cases(self.patterns)) and any(selected_cases((op_pattern,)))
        hits = [s for n, s in self.all_specs.items() if fnmatchcase(n, op_pattern)]
        return bool(hits) and not any(s.name in self.specs for s in hits)


def _family_order(spec: OpSpec) -> tuple[int, str, str]:
    from acl_core.spec.ops import FAMILIES

    rank = FAMILIES.index(spec.family) if spec.family in FAMILIES else len(FAMILIES)
    return rank, spec.family, spec.name


def _patterns(ops: str | Sequence[str] | None) -> tuple[str, ...]:
    if ops is None:
        return ()
    items: Iterable[str] = ops.split(",") if isinstance(ops, str) else ops
    return tuple(p.strip() for p in items if p.strip())


def selected(spec: OpSpec, patterns: Sequence[str]) -> bool:
    """True when ``spec`` is chosen by ``patterns`` (fnmatch on the op name or its family; none: all)."""
    if not patterns:
        return True
    return any(fnmatchcase(spec.name, p) or fnmatchcase(spec.family, p) for p in patterns)

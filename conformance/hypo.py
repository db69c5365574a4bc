"""The Hypothesis tier (full mode): new values around a representative sample, backend against reference.

Each array keeps its sample's dtype. Values are drawn from the range the sample's ordinary values
span (the spec chose that range: positive for logarithms, away from zero for divisors); special
values the sample used (NaN, ±Inf, ±0, extremes) stay possible. Outside the elementwise family,
integer tensors keep the sample's values: there they are indices, group sizes or lengths whose
constraints a random draw would break. For elementwise operators whose
tensors all share one shape, the shape is drawn too (same rank, small dimensions). The layout is
drawn from :data:`acl_core.eager.LAYOUTS`. Examples are bounded and derandomized, shrinking is off:
a run takes the same, bounded time every time. Hypothesis also draws constants it finds in the
project's imported modules, which would make a case's draws depend on what else the process ran (a
lone rerun of a failing case would draw other inputs than the full run): :func:`_provider` names a
provider that draws Hypothesis's own constants only, where the installed Hypothesis allows it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np

from acl_conformance.cases import HYPOTHESIS_EXAMPLES, Case, arg_dtypes, arg_formats
from acl_core.dtypes import DataType as D
from acl_core.dtypes import from_numpy
from acl_core.eager import LAYOUTS
from acl_core.errors import AclCoreError
from acl_core.nz import NzArray
from acl_core.spec.opspec import Kind, OpSpec
from acl_core.spec.samples import special_values

if TYPE_CHECKING:
    from hypothesis import strategies as st

    from acl_conformance.runner import Outcome, Runner

MAX_DIM = 9
"""Largest dimension a varied elementwise shape may draw."""


class _Found(Exception):
    """Raised inside a Hypothesis example to stop at the first disagreement and carry it out."""

    def __init__(self, failure: str, message: str, detail: dict[str, Any]) -> None:
        super().__init__(message)
        self.failure, self.message, self.detail = failure, message, detail


SMALL = 64
"""Arrays up to this many elements get every element from Hypothesis; larger ones a seeded fill plus
a few elements Hypothesis places (so example size, and time, stay bounded)."""


@dataclass(frozen=True)
class _Domain:
    """Where one array's new values come from: [lo, hi] plus the special values its sample used."""

    dtype: D
    lo: float
    hi: float
    extras: tuple[Any, ...]


def _domain(arr: np.ndarray) -> _Domain:
    dtype = from_numpy(arr.dtype)
    if dtype == D.ACL_BOOL:
        return _Domain(dtype, 0, 1, ())
    if dtype.is_integer:
        info = ml_dtypes.iinfo(arr.dtype)  # NumPy's iinfo knows no int4
        flat = [int(v) for v in arr.reshape(-1)]
        ordinary = [v for v in flat if v not in (info.min, info.max)]
        lo, hi = (min(ordinary), max(ordinary)) if ordinary else (max(info.min, -4), min(info.max, 4))
        return _Domain(dtype, lo, hi, tuple(sorted({v for v in flat if v in (info.min, info.max)})))
    if dtype.is_complex:
        parts = np.concatenate([arr.real.reshape(-1), arr.imag.reshape(-1)]).astype(np.float64)
        finite = parts[np.isfinite(parts)]
        lo_c, hi_c = (float(finite.min()), float(finite.max())) if finite.size else (-4.0, 4.0)
        return _Domain(dtype, lo_c, hi_c, ())
    wide = arr.astype(np.float64).reshape(-1)
    specials = special_values(dtype).astype(np.float64)
    extreme = [float(v) for v in specials if np.isfinite(v) and v != 0]
    ordinary_f = wide[np.isfinite(wide) & ~np.isin(wide, extreme)]
    lo_f, hi_f = (float(ordinary_f.min()), float(ordinary_f.max())) if ordinary_f.size else (-4.0, 4.0)
    present = [float(v) for v in specials if (np.isnan(v) and np.isnan(wide).any()) or (v != 0 and (wide == v).any())]
    return _Domain(dtype, lo_f, hi_f, tuple(present))


def _elements(dom: _Domain) -> st.SearchStrategy[Any]:
    from hypothesis import strategies as st

    if dom.dtype == D.ACL_BOOL:
        return st.booleans()
    base: st.SearchStrategy[Any]
    if dom.dtype.is_integer:
        base = st.integers(int(dom.lo), int(dom.hi))
    else:
        real = st.floats(dom.lo, dom.hi, allow_nan=False, allow_infinity=False)
        base = st.builds(complex, real, real) if dom.dtype.is_complex else real
    return st.one_of(base, st.sampled_from(dom.extras)) if dom.extras else base


def _fill(dom: _Domain, count: int, seed: int) -> np.ndarray:
    """``count`` values of the domain from a seeded NumPy generator (in a wide dtype)."""
    gen = np.random.default_rng(seed)
    if dom.dtype == D.ACL_BOOL:
        return gen.random(count) < 0.5
    if dom.dtype.is_integer:
        return gen.integers(int(dom.lo), int(dom.hi), size=count, endpoint=True).astype(object)
    values = gen.uniform(dom.lo, dom.hi, size=count)
    if dom.dtype.is_complex:
        return values + 1j * gen.uniform(dom.lo, dom.hi, size=count)
    return values


def _array(draw: Any, arr: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    from hypothesis import strategies as st

    dom = _domain(arr)
    count = int(np.prod(shape)) if shape else 1
    if count <= SMALL:
        values = np.array(draw(st.lists(_elements(dom), min_size=count, max_size=count)), dtype=object)
    else:
        values = _fill(dom, count, draw(st.integers(0, 2**32 - 1))).astype(object)
        planted = draw(st.lists(st.tuples(st.integers(0, count - 1), _elements(dom)), max_size=8))
        for index, value in planted:
            values[index] = value
    with np.errstate(all="ignore"):
        if dom.dtype == D.ACL_BOOL:
            drawn = values.astype(np.bool_).reshape(shape)
        elif dom.dtype.is_integer:
            drawn = values.astype(arr.dtype).reshape(shape)
        else:
            wide = values.astype(np.complex128 if dom.dtype.is_complex else np.float64)
            drawn = wide.astype(arr.dtype).reshape(shape)
    # an NZ-placed sample stays NZ-placed: as a plain array it would be an ND tensor, a different call
    return NzArray(drawn, arr.acl_format) if isinstance(arr, NzArray) else drawn


def _varies_shape(spec: OpSpec, args: dict[str, Any]) -> tuple[int, ...] | None:
    """The common shape to vary, for elementwise ops whose tensors all share one (rank ≥ 1)."""
    if spec.family != "elementwise":
        return None
    shapes = set()
    for p in spec.params:
        value = args.get(p.name)
        if p.kind is Kind.TENSOR_LIST and value is not None:
            return None
        if p.kind is Kind.TENSOR and isinstance(value, np.ndarray):
            shapes.add(value.shape)
    if len(shapes) != 1:
        return None
    (shape,) = shapes
    return shape if len(shape) >= 1 else None


def _structural(value: Any) -> bool:
    """True for integer tensors (and lists of them): outside elementwise ops they are indices, group sizes..."""
    arrays = value if isinstance(value, (list, tuple)) else [value]
    return bool(arrays) and all(isinstance(a, np.ndarray) and from_numpy(a.dtype).is_integer for a in arrays)


def draw_args(draw: Any, spec: OpSpec, args: dict[str, Any]) -> dict[str, Any]:
    """New arguments like ``args``: same dtypes, new values, and maybe a new common shape."""
    from hypothesis import strategies as st

    base_shape = _varies_shape(spec, args)
    new_shape = None
    if base_shape is not None:
        new_shape = tuple(draw(st.integers(1, min(MAX_DIM, max(2, d + 2)))) for d in base_shape)
    drawn: dict[str, Any] = dict(args)
    keep_ints = spec.family != "elementwise"
    for p in spec.params:
        value = args.get(p.name)
        if keep_ints and _structural(value):
            continue
        if p.kind is Kind.TENSOR and isinstance(value, np.ndarray):
            drawn[p.name] = _array(draw, value, new_shape if new_shape is not None else value.shape)
        elif p.kind is Kind.TENSOR_LIST and isinstance(value, (list, tuple)):
            drawn[p.name] = [_array(draw, v, v.shape) if isinstance(v, np.ndarray) else v for v in value]
    return drawn


PROVIDER = "acl-conformance"
"""The name :func:`_provider` registers its Hypothesis backend under."""


@functools.cache
def _provider() -> str:
    """The Hypothesis backend to draw with: one blind to the imported modules' constants, else Hypothesis's own."""
    try:
        from hypothesis.internal.conjecture import providers as hp
        from hypothesis.internal.conjecture.choice import choice_constraints_key, choice_permitted

        builtin: Any = hp.GLOBAL_CONSTANTS
        base: Any = hp.HypothesisProvider
    except (ImportError, AttributeError):  # a Hypothesis without module constants or alternative backends
        return "hypothesis"
    pools: dict[Any, tuple[Any, ...]] = {}

    class ModuleBlindProvider(base):
        """Hypothesis's provider, drawing its built-in constants only (never the imported modules')."""

        def _maybe_draw_constant(self, choice_type: Any, constraints: Any, *, p: float = 0.05) -> Any:
            if self._random.random() > p:
                return None
            key = (choice_type, choice_constraints_key(choice_type, constraints))
            if key not in pools:
                pools[key] = tuple(c for c in builtin.set_for_type(choice_type) if choice_permitted(c, constraints))
            return self._random.choice(pools[key]) if pools[key] else None

    hp.AVAILABLE_PROVIDERS[PROVIDER] = ModuleBlindProvider
    return PROVIDER


def run_hypothesis(runner: Runner, case: Case) -> Outcome:
    """Draw bounded, derandomized examples around one sample and compare backend with reference on each."""
    from hypothesis import HealthCheck, Phase, Verbosity, given, settings
    from hypothesis import strategies as st
    from hypothesis.errors import Flaky

    from acl_core import eager

    spec = runner.spec(case.op)
    sample = runner.catalog.sample(case.op, case.sample)
    ref = runner.reference_outputs(case.op, case.sample)
    if ref.outputs is None:
        return runner._fail(case, "reference", f"the reference rejects this sample: {ref.error}")
    from acl_conformance.runner import _output_dtypes

    skipped = runner.gate(
        case, arg_dtypes(spec, sample.args) | _output_dtypes(ref.outputs), arg_formats(spec, sample.args)
    )
    if skipped:
        return skipped
    examples = {"run": 0, "rejected": 0}
    allowed: list[tuple[Any, float]] = []  # (accumulation allowance, worst error over the bound) per example

    @st.composite
    def calls(draw: Any) -> tuple[dict[str, Any], str]:
        return draw_args(draw, spec, sample.args), draw(st.sampled_from(LAYOUTS))

    @settings(
        max_examples=HYPOTHESIS_EXAMPLES,
        derandomize=True,
        backend=_provider(),
        database=None,
        deadline=None,
        phases=(Phase.explicit, Phase.generate),
        verbosity=Verbosity.quiet,
        report_multiple_bugs=False,
        suppress_health_check=list(HealthCheck),
    )
    @given(calls())
    def check(call: tuple[dict[str, Any], str]) -> None:
        args, layout = call
        examples["run"] += 1
        try:
            expected = eager.run(case.op, runner.reference, op_args=args)
        except AclCoreError as exc:
            examples["rejected"] += 1
            try:
                eager.run(case.op, runner.backend, layout=layout, op_args=args)
            except AclCoreError as mine:
                if mine.code == exc.code:
                    return
                raise _Found(
                    "code", f"error code {mine.code} where the reference returns {exc.code}", _shapes(args)
                ) from None
            raise _Found("code", f"the backend accepts a call the reference rejects ({exc})", _shapes(args)) from None
        verdict = runner.judge(case, args, layout, expected, sample)
        if verdict is not None:
            failure, message, detail = verdict
            drawn = {"drawn": _values(args), "layout": layout}
            raise _Found(failure, f"{message} (drawn inputs {_shapes(args)}, layout {layout})", {**detail, **drawn})
        if runner.last_allowance is not None:
            allowed.append(runner.last_allowance)

    try:
        check()
    except _Found as found:
        detail = {**found.detail, "examples_run": examples["run"]}
        return runner._fail(case, found.failure, found.message, detail)
    except Flaky as exc:
        first = _first_found(exc)
        message = "the same inputs gave a disagreement once and agreement on replay (nondeterministic results)"
        if first is not None:
            message += f"; first: {first.message}"
        return runner._fail(case, "flaky", message, {"examples_run": examples["run"]})
    if examples["run"] == examples["rejected"]:  # nothing was compared: no evidence either way
        outcome = runner._skip(case, f"all {examples['run']} drawn examples were invalid calls on both backends")
    elif allowed:  # some example passed only under the plugin's accumulation allowance: say so
        allowance, ratio = max(allowed, key=lambda found: found[1])
        outcome = runner.allowed_outcome(case, ratio, allowance)
        outcome.message += f" ({len(allowed)} of {examples['run']} examples needed it)"
    else:
        outcome = runner._pass(case)
    outcome.detail = {**outcome.detail, "examples_run": examples["run"], "rejected_by_both": examples["rejected"]}
    return outcome


def _first_found(exc: BaseException) -> _Found | None:
    """The first disagreement inside an exception (group)."""
    if isinstance(exc, _Found):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        found = _first_found(inner)
        if found is not None:
            return found
    return None


DRAWN_ELEMENTS = 512
"""Failing examples whose inputs hold at most this many elements in all keep their values in the report."""


def _values(args: dict[str, Any]) -> dict[str, Any] | None:
    """A failing example's inputs, exactly (floats as ``float.hex``, so -0.0, NaN and Inf survive JSON), when small."""
    arrays = {k: v for k, v in args.items() if isinstance(v, np.ndarray)}
    if sum(v.size for v in arrays.values()) > DRAWN_ELEMENTS:
        return None
    out: dict[str, Any] = {}
    for k, v in args.items():
        if isinstance(v, np.ndarray):
            flat = v.reshape(-1)
            if v.dtype.kind == "c":
                values: list[Any] = [repr(complex(x)) for x in flat]
            elif v.dtype.kind in "fV":  # NumPy and ml_dtypes floats
                values = [float(x).hex() for x in flat.astype(np.float64)]
            else:
                values = flat.tolist()
            out[k] = {"dtype": str(v.dtype), "shape": list(v.shape), "values": values}
        elif isinstance(v, (bool, int, str)) or v is None:
            out[k] = v
        elif isinstance(v, float):
            out[k] = v.hex()
        else:
            out[k] = repr(v)
    return out


def _shapes(args: dict[str, Any]) -> dict[str, Any]:
    return {k: f"{v.dtype}{list(v.shape)}" for k, v in args.items() if isinstance(v, np.ndarray)}

"""How accurate an operator's result must be: its accuracy class, declared in its spec.

The conformance suite compares a backend's result with the reference's, which computes in float64
(or exactly, for integers) and rounds once to the output dtype: for an exactly rounded operation the
reference's result *is* the exactly rounded one. A class says how far from it a correct
implementation may land, measured in units in the last place (ulps) of the output dtype:

- :func:`exact` — add, sub, mul, div, sqrt, casts, copies, comparisons, selection, data movement,
  integer ops: bit-exact (0 ulp), with one allowance: a 16-bit float result that a backend computes
  in float32 and then rounds may land on the even neighbour of a float32 midpoint (double rounding).
  Signed zero is compared where the operation defines it.
- :func:`ulp` — transcendental and fused ops: within ``n`` ulps of the true value in float32 (CUDA's
  published float32 bounds are the ceiling), ``f64`` ulps in float64; a 16-bit result computed in
  float32 is allowed the float32 error plus its own rounding, in its own ulps.
- :func:`reduction` — sums, means, products, GEMMs: ``|actual - expected| <= γ_n·M + 1 ulp`` where
  ``γ_n = n·u / (1 - n·u)`` is the standard bound for ``n`` operations in the accumulation type
  (unit roundoff ``u``; float32 at least, float64 for float64 results), ``M`` is the operator applied
  to the absolute values of its float inputs (``Σ|x_i|`` for a sum, ``|A|·|B|`` for a GEMM) and the
  1 ulp covers the output rounding of both sides. A backend that accumulates in a 16-bit type
  exceeds it at every realistic length.
- :func:`composite` — row ops built from a reduction and elementwise steps (softmax, norms): the
  reduction bound with ``n`` the row length plus ``steps`` elementwise roundings, ``γ_{n+steps}·S +
  1 ulp``, where ``S`` is the op's first-order error scale per output element (:data:`ScaleFn`):
  ``|y|`` where every term is positive (softmax's sum of exponentials, RmsNorm's sum of squares),
  more where a subtraction amplifies the statistics' error (LayerNorm's ``x - mean``, softmax's
  ``x - max`` fed to ``exp``). 16-bit accumulation exceeds it for the same reason as a reduction's.
- :func:`table` — no class yet: the per-dtype table of ``acl_conformance.tolerances`` applies.
- :func:`by_call` — the class depends on the call's operands (QuantMatmulV5: ``reduction`` for fp8
  operands, ``table`` for integer ones): ``pick(args)`` chooses one of the declared ``choices`` (each
  of the kinds above) per case. The suite resolves it wherever it has a call's arguments
  (:meth:`Accuracy.resolve`, :func:`accuracy_of` with ``args``); :attr:`Accuracy.classes` lists
  what it may resolve to.

An op without an ``accuracy`` takes its in-place base's, else its family's default
(:data:`FAMILY_DEFAULTS`); an op with neither is compared under the table.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from acl_core.dtypes import DataType as D

if TYPE_CHECKING:
    from acl_core.spec.opspec import OpSpec

KINDS = ("exact", "ulp", "reduction", "composite", "table", "by_call")
RESOLVED_KINDS = KINDS[:-1]
"""The kinds a case is compared under: a ``by_call`` class resolves to one of them per call."""

LengthFn = Callable[[Mapping[str, Any], Mapping[str, Any]], int]
"""The reduction length of one case, from its arguments and the reference's outputs."""

ScaleFn = Callable[[Mapping[str, Any], Mapping[str, Any]], dict[str, Any]]
"""A composite op's error scale ``S``: per output name, an array of its shape (from arguments and reference outputs)."""

PickFn = Callable[[Mapping[str, Any]], "Accuracy"]
"""A ``by_call`` class's choice for one call, from its arguments (one of the class's ``choices``)."""

PRECISION: dict[D, int] = {
    D.ACL_DOUBLE: 53,
    D.ACL_FLOAT: 24,
    D.ACL_FLOAT16: 11,
    D.ACL_BF16: 8,
    D.ACL_COMPLEX64: 24,
    D.ACL_COMPLEX128: 53,
}
"""Significand bits (the implicit one included) of the float types an ulp bound is stated for."""


@dataclass(frozen=True)
class Accuracy:
    """An operator's accuracy class (build one with :func:`exact`, :func:`ulp`, :func:`reduction`,
    :func:`composite`, :func:`table` or :func:`by_call`)."""

    kind: str
    reason: str
    float32_ulps: float = 0.0
    float64_ulps: float = 0.0
    signed_zero: bool = True
    accumulate: D = D.ACL_FLOAT
    length_of: LengthFn | None = None
    scale_of: ScaleFn | None = None
    steps: int = 0
    pick: PickFn | None = None
    choices: tuple[Accuracy, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"accuracy kind must be one of {KINDS}, not {self.kind!r}")
        if not self.reason.strip():
            raise ValueError("an accuracy class needs a reason")
        if self.kind == "by_call":
            if self.pick is None or not self.choices:
                raise ValueError("a by_call class needs a pick function and the classes it may choose")
            if any(c.kind == "by_call" for c in self.choices):
                raise ValueError("a by_call class chooses among resolved classes, not other by_call ones")
        elif self.pick is not None or self.choices:
            raise ValueError("only a by_call class has a pick function and choices")
        if self.float32_ulps < 0 or self.float64_ulps < 0:
            raise ValueError("an ulp bound cannot be negative")
        if self.steps < 0:
            raise ValueError("a composite class cannot have a negative number of steps")

    @property
    def classes(self) -> tuple[Accuracy, ...]:
        """What this class may resolve to: its ``choices`` for a ``by_call`` class, else itself."""
        return self.choices or (self,)

    def resolve(self, args: Mapping[str, Any]) -> Accuracy:
        """The class one call with ``args`` is compared under (``pick(args)`` for ``by_call``, else itself)."""
        if self.kind != "by_call":
            return self
        assert self.pick is not None
        chosen = self.pick(args)
        if not any(chosen is c for c in self.choices):
            raise ValueError(f"a by_call class picked {chosen.describe()}, which is not among its declared choices")
        return chosen

    def bound_ulps(self, dtype: D) -> float:
        """The largest error against the true value, in ulps of ``dtype``, for a ``ulp`` class."""
        p = PRECISION.get(dtype)
        if p is None:
            return 0.5  # formats without a stated bound: the result must be the rounded one
        if p >= 53:
            return self.float64_ulps
        if p >= 24:
            return self.float32_ulps
        # computed in float32, then rounded once to the 16-bit output
        return 0.5 + self.float32_ulps * 2.0 ** (p - 24)

    def unit_roundoff(self, dtype: D) -> float:
        """``u`` of the accumulation for outputs of ``dtype``: the wider of ``accumulate`` and ``dtype``."""
        p = max(PRECISION.get(self.accumulate, 24), PRECISION.get(dtype, 24))
        return 2.0**-p

    def gamma(self, n: int, dtype: D) -> float:
        """γ_n = n·u / (1 - n·u) for ``n`` accumulations of outputs of ``dtype`` (inf when n·u ≥ 1)."""
        nu = max(n, 1) * self.unit_roundoff(dtype)
        return math.inf if nu >= 1 else nu / (1 - nu)

    def describe(self) -> str:
        """One line for reports."""
        if self.kind == "ulp":
            return f"ulp class ({self.float32_ulps:g} ulp float32, {self.float64_ulps:g} ulp float64)"
        if self.kind == "reduction":
            return f"reduction class (γ_n·M in ≥{self.accumulate.short} plus 1 ulp)"
        if self.kind == "composite":
            return f"composite class (γ_(n+{self.steps})·S in ≥{self.accumulate.short} plus 1 ulp)"
        if self.kind == "by_call":
            kinds = " or ".join(dict.fromkeys(c.kind for c in self.choices))
            return f"by-call class ({kinds}, chosen by the call's operands)"
        return f"{self.kind} class"


def exact(reason: str = "exactly rounded: one rounding of the exact result", *, signed_zero: bool = True) -> Accuracy:
    """Bit-exact (16-bit double rounding through float32 allowed); ``signed_zero`` False where ±0 is unspecified."""
    return Accuracy("exact", reason, signed_zero=signed_zero)


def ulp(float32: float, *, float64: float | None = None, reason: str = "", signed_zero: bool = True) -> Accuracy:
    """Within ``float32`` ulps in float32 (and ``float64`` ulps in float64, default the same) of the true value."""
    why = reason or f"{float32:g} ulp in float32 (CUDA's published bound for the float32 function)"
    return Accuracy("ulp", why, float(float32), float(float32 if float64 is None else float64), signed_zero=signed_zero)


def reduction(
    *, length_of: LengthFn | None = None, accumulate: D = D.ACL_FLOAT, reason: str = "", signed_zero: bool = False
) -> Accuracy:
    """γ_n·M plus 1 ulp, with ``n`` from ``length_of`` (default: input elements per output element)."""
    why = reason or f"n roundings in at least {accumulate.short}: the standard γ_n·Σ|terms| bound"
    return Accuracy("reduction", why, signed_zero=signed_zero, accumulate=accumulate, length_of=length_of)


def composite(
    *,
    steps: int,
    length_of: LengthFn | None = None,
    scale_of: ScaleFn | None = None,
    accumulate: D = D.ACL_FLOAT,
    reason: str = "",
    signed_zero: bool = False,
) -> Accuracy:
    """γ_(n+steps)·S plus 1 ulp: a row reduction of length ``n`` then ``steps`` roundings, ``S`` from ``scale_of``.

    ``scale_of`` defaults to :func:`relative_scale` (``S = |y|``), right where every reduced term
    has one sign and no subtraction follows.
    """
    why = reason or f"a row reduction in at least {accumulate.short}, then {steps} elementwise roundings"
    return Accuracy(
        "composite",
        why,
        signed_zero=signed_zero,
        accumulate=accumulate,
        length_of=length_of,
        scale_of=scale_of,
        steps=steps,
    )


def table(reason: str) -> Accuracy:
    """No class: the per-dtype table applies (``reason`` says why no class fits yet)."""
    return Accuracy("table", reason, signed_zero=False)


def by_call(pick: PickFn, choices: Iterable[Accuracy], reason: str) -> Accuracy:
    """A class chosen per call: ``pick(args)`` returns one of ``choices`` (resolved kinds only).

    For an op whose accuracy depends on its operands' dtypes or mode (QuantMatmulV5: fp8 operands
    accumulate in float32 and the magnitudes run forms ``M``; integer operands cannot form it). The
    suite resolves it with each case's arguments; ``choices`` lets the coverage test see every kind.
    """
    return Accuracy("by_call", reason, signed_zero=False, pick=pick, choices=tuple(choices))


EXACT = exact()

FAMILY_DEFAULTS: dict[str, Accuracy] = {
    "elementwise": EXACT,
    "movement": exact("data movement: every element is a copy of an input element"),
    "layout": exact("a storage-format change: every element is a copy of an input element"),
}
"""Family-wide classes; an op whose family's default is wrong declares its own ``accuracy``."""


def accuracy_of(spec: OpSpec, args: Mapping[str, Any] | None = None) -> Accuracy | None:
    """The class of ``spec``: its own, else its in-place base's, else its family's default (None: the table).

    With ``args`` (one call's arguments) a ``by_call`` class is resolved to the class that call is
    compared under; without, it is returned as declared (see :attr:`Accuracy.classes`).
    """
    found = _declared(spec)
    return found.resolve(args) if found is not None and args is not None else found


def _declared(spec: OpSpec) -> Accuracy | None:
    if spec.accuracy is not None:
        return spec.accuracy
    if spec.base is not None:
        from acl_core.spec.ops import get_spec

        base = get_spec(spec.base)
        if base.accuracy is not None:
            return base.accuracy
    return FAMILY_DEFAULTS.get(spec.family)


def elements_per_output(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> int:
    """The default reduction length: the largest input's element count over the smallest output's."""
    sizes_in = [int(getattr(v, "size", 1)) for v in args.values() if hasattr(v, "dtype") and hasattr(v, "shape")]
    sizes_out = [int(getattr(v, "size", 1)) for v in outputs.values() if hasattr(v, "size")]
    biggest = max(sizes_in, default=1)
    smallest = max(min(sizes_out, default=1), 1)
    return max(biggest // smallest, 1)


def with_accuracy(specs: Iterable[OpSpec], classes: Mapping[str, Accuracy]) -> list[OpSpec]:
    """``specs`` with each op named in ``classes`` given that class (a family's per-op entries)."""
    from dataclasses import replace

    found = list(specs)
    unknown = set(classes) - {s.name for s in found}
    if unknown:
        raise KeyError(f"accuracy classes for undeclared ops: {sorted(unknown)}")
    return [replace(s, accuracy=classes[s.name]) if s.name in classes else s for s in found]


def dim_length(tensor: str = "self", dim: str = "dim") -> LengthFn:
    """A reduction length: the size of ``tensor`` along the attribute ``dim`` (a scan's length)."""

    def length(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> int:
        shape = getattr(args.get(tensor), "shape", ())
        if not shape:
            return 1
        return int(shape[int(args.get(dim, -1)) % len(shape)])

    return length


def input_elements(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> int:
    """A conservative reduction length: every input element (for scatters, where duplicates accumulate)."""
    return max(sum(int(v.size) for v in args.values() if hasattr(v, "dtype") and hasattr(v, "size")), 1)


def last_dim(tensor: str, extra: int = 0) -> LengthFn:
    """A GEMM's reduction length: the last dim of its first operand ``tensor`` (K), plus ``extra`` epilogue steps."""

    def length(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> int:
        shape = getattr(args.get(tensor), "shape", ())
        return (int(shape[-1]) if shape else 1) + extra

    return length


def relative_scale(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> dict[str, Any]:
    """``S = |y|`` for every output: a relative bound (sums of one-signed terms, products, roots)."""
    return {name: np.abs(_wide(value)) for name, value in outputs.items() if _is_float_array(value)}


def _wide(value: Any) -> np.ndarray:
    return np.asarray(value).astype(np.float64)


def _is_float_array(value: Any) -> bool:
    return hasattr(value, "dtype") and np.asarray(value).dtype.kind in "fV"


def softmax_scale(log: bool) -> ScaleFn:
    """Softmax's ``S = |y|·(1 + |x - max|)``; LogSoftmax's ``S = 1 + |x - max| + |y|`` (along ``dim``).

    ``exp`` turns the rounding of ``x - max`` (``u·|x - max|``) into a relative error of ``y``;
    the sum's relative error γ_n becomes LogSoftmax's absolute error through the log.
    """

    def scale(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> dict[str, Any]:
        x = _wide(args["self"])
        y = np.abs(_wide(outputs["out"]))
        if x.ndim == 0 or x.size == 0:
            shifted = np.zeros(x.shape)
        else:
            with np.errstate(all="ignore"):
                shifted = np.abs(x - np.max(x, axis=int(args["dim"]) % x.ndim, keepdims=True))
        with np.errstate(all="ignore"):
            return {"out": 1.0 + shifted + y if log else y * (1.0 + shifted)}

    return scale


def layer_norm_scale(
    x_name: str,
    axes_of: Callable[[Mapping[str, Any]], int],
    weight: str,
    bias: str,
    out_name: str,
    *,
    accumulate: D = D.ACL_FLOAT,
) -> ScaleFn:
    """LayerNorm's error scale, with ``c = E[x²] / (var + eps)`` the variance's condition number.

    ``out``: ``|y - b|·c + |b| + |w|·rstd·E|x|`` (the mean's error ``γ_n·E|x|`` passes through
    ``x - mean`` scaled by ``|w|·rstd``; the variance's, relative ``γ_n·c``, through rstd);
    a mean output ``E|x|``; an rstd output ``rstd·c``. ``axes_of`` gives the number of trailing
    normalised dims; ``eps`` is read from the ``eps`` or ``epsilon`` argument. The variance
    family's overflow rule (:func:`variance_scale`) applies: a row whose squared deviations add up
    past the accumulation type (float32 for 16-bit and float32 results) gets ``S = inf`` in ``out``
    and rstd (its variance is infinite there, rstd 0), so they are uncompared and counted as overflowing.
    """

    def scale(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> dict[str, Any]:
        x = _wide(args[x_name])
        k = axes_of(args)
        axes = tuple(range(x.ndim - k, x.ndim))
        eps = float(args.get("eps", args.get("epsilon", 0.0)))
        found: dict[str, Any] = {}
        with np.errstate(all="ignore"):
            mean_abs = np.mean(np.abs(x), axis=axes, keepdims=True) if x.size else np.zeros(x.shape)
            var = np.var(x, axis=axes, keepdims=True) if x.size else np.zeros(x.shape)
            square = np.mean(x * x, axis=axes, keepdims=True) if x.size else np.zeros(x.shape)
            cond = np.maximum(square / (var + eps), 1.0)
            rstd = 1.0 / np.sqrt(var + eps)
            ordinary = np.where(np.isfinite(x), x, 0.0)
            if x.size:
                centred = ordinary - np.mean(ordinary, axis=axes, keepdims=True)
                deviations = np.sum(centred * centred, axis=axes, keepdims=True)
            else:
                deviations = np.zeros(x.shape)
            w = np.abs(_wide(args[weight])) if args.get(weight) is not None else 1.0
            b = _wide(args[bias]) if args.get(bias) is not None else 0.0
            for name, value in outputs.items():
                if not _is_float_array(value):
                    continue
                y = _wide(value)
                if name == out_name:
                    s = np.abs(y - b) * cond + np.abs(b) + w * rstd * mean_abs
                elif "mean" in name.lower():
                    s = mean_abs
                elif "rstd" in name.lower():
                    s = rstd * cond
                else:
                    s = np.abs(y)
                if name == out_name or "rstd" in name.lower():
                    s = np.where(deviations > _accumulation_max(value, accumulate), np.inf, s)
                found[name] = np.broadcast_to(s, y.shape) if s.size else np.zeros(y.shape)
        return found

    return scale


def trailing_elements(tensor: str) -> LengthFn:
    """A norm's row length: the element count of ``tensor`` (gamma's shape is the normalised trailing dims)."""

    def length(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> int:
        return max(int(getattr(args.get(tensor), "size", 1)), 1)

    return length


def _accumulation_max(value: Any, accumulate: D) -> float:
    """The largest finite value of the type an output of ``value``'s dtype accumulates in (the wider one)."""
    wide = np.asarray(value).dtype == np.float64 or PRECISION.get(accumulate, 24) >= 53
    return float(np.finfo(np.float64 if wide else np.float32).max)


def variance_scale(*, root: bool, correction: str = "correction", accumulate: D = D.ACL_FLOAT) -> ScaleFn:
    """Var/Std's error scale over ``self`` reduced along ``dim``, with ``N`` the reduced count, ``c`` the correction.

    A variance (one- or two-pass) is within ``γ_n·v`` of the true one, ``v = Σx²/(N-c) =
    var·cond`` (``cond`` the variance's condition number, which covers ``x - mean``'s cancellation);
    a standard deviation (``root``) has half its variance's relative error plus the root's rounding,
    ``S = std·(cond/2 + 1)``; a mean output has ``E|x|``. Rows whose squared deviations (the terms of
    the sum) add up past the accumulation type (float32 for 16-bit and float32 results) get ``S =
    inf``: as under the reduction class's overflow rule they are uncompared and counted as
    overflowing. Non-finite inputs take no part (their rows are compared as NaN / Inf positions).
    ``correction`` names the argument holding ``c`` (a bool for ``unbiased``).
    """

    def scale(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> dict[str, Any]:
        x = _wide(args["self"])
        x = np.where(np.isfinite(x), x, 0.0)
        dims = args.get("dim")
        axes = tuple(range(x.ndim)) if not dims or x.ndim == 0 else tuple(sorted({int(d) % x.ndim for d in dims}))
        count = math.prod(x.shape[a] for a in axes)
        divisor = max(count - int(args.get(correction, 0) or 0), 1)
        with np.errstate(all="ignore"):
            if x.size:
                mean = np.mean(x, axis=axes, keepdims=True)
                deviations = np.sum((x - mean) ** 2, axis=axes, keepdims=True)
                v = np.sum(x * x, axis=axes, keepdims=True) / divisor
                mean_abs = np.mean(np.abs(x), axis=axes, keepdims=True)
            else:
                deviations = v = mean_abs = np.zeros(tuple(1 if i in axes else n for i, n in enumerate(x.shape)))
            var = deviations / divisor
            cond = np.maximum(v / np.where(var > 0, var, 1.0), 1.0)
            found: dict[str, Any] = {}
            for name, value in outputs.items():
                if not _is_float_array(value):
                    continue
                y = np.asarray(value)
                if "mean" in name.lower():
                    s = mean_abs
                else:
                    s = np.sqrt(var) * (cond / 2 + 1) if root else v
                    s = np.where(deviations > _accumulation_max(y, accumulate), np.inf, s)
                found[name] = np.reshape(s, y.shape) if s.size == y.size else np.zeros(y.shape)
        return found

    return scale


def conv_length(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> int:
    """A convolution's reduction length: input channels per group times the kernel's taps, plus the bias."""
    shape = tuple(int(n) for n in getattr(args.get("weight"), "shape", ()))
    if len(shape) < 2:
        return 1
    taps = math.prod(shape[2:])
    groups = max(int(args.get("groups", 1) or 1), 1)
    channels = shape[0] // groups if args.get("transposed") else shape[1]
    return max(channels * taps, 1) + 1


def top_k_softmax_scale(x_name: str, y_name: str) -> ScaleFn:
    """A softmax-then-top-k's ``S = |y|·(1 + range(x))`` along the last axis (``range`` = max - min of the row).

    As :func:`softmax_scale`, with ``|x - max|`` of the chosen elements bounded by the row's range
    (the chosen experts are not needed to state the bound).
    """

    def scale(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> dict[str, Any]:
        x = _wide(args[x_name])
        y = np.abs(_wide(outputs[y_name]))
        if x.size == 0 or y.size == 0:
            return {y_name: np.zeros(y.shape)}
        finite = np.isfinite(x)
        with np.errstate(all="ignore"):
            high = np.max(np.where(finite, x, -np.inf), axis=-1, keepdims=True)
            spread = high - np.min(np.where(finite, x, np.inf), axis=-1, keepdims=True)
        spread = np.where(np.isfinite(spread), spread, 0.0)
        if spread.size * y.shape[-1] == y.size:
            spread = spread.reshape(*y.shape[:-1], 1)
        return {y_name: y * (1.0 + spread)}

    return scale


def summed_input(scale: ScaleFn, terms: tuple[str, ...], name: str = "x") -> ScaleFn:
    """``scale`` with an extra argument ``name``: the sum of the tensor arguments ``terms`` (absent ones skipped).

    For fused ops that normalise a sum (AddLayerNorm's ``x1 + x2 + bias``): the sum's own rounding is
    one more elementwise step of the composite class.
    """

    def summed(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> dict[str, Any]:
        present = [_wide(args[t]) for t in terms if args.get(t) is not None]
        with np.errstate(all="ignore"):
            total = sum(present[1:], present[0]) if present else np.zeros(())
        return scale({**args, name: total}, outputs)

    return summed


def group_norm_scale() -> ScaleFn:
    """GroupNorm's error scale: :func:`layer_norm_scale` over each (sample, group) row of ``self`` [N, C, *].

    A row is the group's ``C/group`` channels times their spatial elements; ``gamma`` and ``beta``
    are per channel, spread over the row; ``meanOut`` and ``rstdOut`` are [N, group]. A group whose
    squared deviations overflow float32 is uncompared in ``out`` and ``rstdOut`` (the variance rule).
    """
    inner = layer_norm_scale("x", lambda args: 1, "w", "b", "out")

    def scale(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> dict[str, Any]:
        x = _wide(args["self"])
        groups = max(int(args.get("group", 1)), 1)
        if x.ndim < 2 or x.size == 0 or x.shape[1] % groups:
            return {n: np.zeros(np.shape(v)) for n, v in outputs.items() if _is_float_array(v)}
        n, c = x.shape[0], x.shape[1]
        spatial = x.size // (n * c)

        def per_channel(name: str) -> np.ndarray | None:
            value = args.get(name)
            if value is None:
                return None
            return np.broadcast_to(_wide(value).reshape(c, 1), (c, spatial)).reshape(groups, -1)

        rows = {"x": x.reshape(n, groups, -1), "w": per_channel("gamma"), "b": per_channel("beta"), "eps": args["eps"]}
        shaped = {
            name: np.asarray(v).reshape(n, groups, -1)
            for name, v in outputs.items()
            if _is_float_array(v) and np.size(v) % (n * groups) == 0
        }
        found = inner(rows, shaped)
        return {name: np.reshape(s, np.shape(outputs[name])) for name, s in found.items()}

    return scale

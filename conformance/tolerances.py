"""The conformance suite's tolerances: the op's accuracy class first, then the table, and the lookup.

A float output is compared in ulps of its dtype under the op's accuracy class
(:mod:`acl_core.spec.accuracy`: ``exact``, ``ulp``, ``reduction``, ``composite``), or as
``|actual - expected| <= atol + rtol * |expected|`` under the per-dtype table for ops without a
class. Either way NaN positions must match (payload free) and an infinity must meet the same
infinity; classes that define it compare the sign of zero. The tolerance is looked up in four steps,
each later step replacing the earlier answer when it applies:

1. the op's accuracy class; else :data:`DTYPE_DEFAULTS`, by the dtype the output is stored in;
2. the sample's own ``Sample.tolerance``, when the op's spec declares one for that case;
3. :data:`OP_OVERRIDES` — by operator name (and optionally dtype);
4. :data:`BACKEND_OVERRIDES` — by backend, operator and dtype.

Integer and bool outputs are always compared exactly. Every entry carries the reason it exists:
an override that loosens a comparison must say why it is right to accept that difference.

Two bounded loosenings exist for hardware limits, each declared by a backend's plugin for one
architecture and reported whenever it lets a case pass: :class:`FlagAllowance` (a flag case's bound
times a factor) and :class:`AccumulationAllowance` (a reduction-class value case's bound plus
``extra·M``: a matrix instruction's accumulator shorter than the class's).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase

from acl_core.dtypes import DataType as D
from acl_core.spec.accuracy import Accuracy


@dataclass(frozen=True)
class Tolerance:
    """What a float output may differ by, where it came from, and why it is what it is.

    ``kind`` is ``table`` (``atol``/``rtol``), ``exact`` (0 ulp; 16-bit double rounding allowed),
    ``ulp`` (at most ``ulps`` from the reference's result) or ``reduction`` (``gamma·M + ulps`` ulp;
    ``(gamma + extra)·M + ulps`` ulp under an :class:`AccumulationAllowance`).
    """

    atol: float
    rtol: float
    source: str
    reason: str
    kind: str = "table"
    ulps: float = 0.0
    gamma: float = 0.0
    signed_zero: bool = False
    extra: float = 0.0

    def describe(self) -> str:
        """One line for reports, e.g. ``atol=…, rtol=… (source)`` or ``≤ 2 ulp (Exp ulp class)``."""
        zero = ", signed zero" if self.signed_zero else ""
        if self.kind == "exact":
            return f"0 ulp{zero} ({self.source})"
        if self.kind == "ulp":
            return f"≤ {self.ulps:g} ulp{zero} ({self.source})"
        if self.kind == "reduction" and self.extra:
            return (
                f"γ_n·M + {self.extra:.3g}·M + {self.ulps:g} ulp with γ_n={self.gamma:.3g}{zero} "
                f"({self.source}, with an accumulation allowance)"
            )
        if self.kind == "reduction":
            return f"γ_n·M + {self.ulps:g} ulp with γ_n={self.gamma:.3g}{zero} ({self.source})"
        return f"atol={self.atol:g}, rtol={self.rtol:g} ({self.source})"


@dataclass(frozen=True)
class Override:
    """One loosening (or tightening): ``op`` and ``backend`` are fnmatch patterns; ``dtypes`` None means all."""

    op: str
    atol: float
    rtol: float
    reason: str
    dtypes: frozenset[D] | None = None
    backend: str = "*"

    def matches(self, op: str, dtype: D, backend: str) -> bool:
        """True when this entry applies to ``op`` computing ``dtype`` results on ``backend``."""
        return (
            fnmatchcase(op, self.op)
            and fnmatchcase(backend, self.backend)
            and (self.dtypes is None or dtype in self.dtypes)
        )


def _on_hardware(entry: FlagAllowance | AccumulationAllowance, backend: str, architecture: str) -> bool:
    """True when an allowance's backend and architecture patterns match (an unreported architecture never does)."""
    return fnmatchcase(backend, entry.backend) and bool(architecture) and fnmatchcase(architecture, entry.architecture)


def _hardware_problems(where: str, entry: FlagAllowance | AccumulationAllowance) -> list[str]:
    """What every allowance needs: a reason, and an architecture narrower than every device."""
    problems = []
    if not entry.reason.strip():
        problems.append(f"{where} has no reason")
    if not entry.architecture.strip("*? "):
        problems.append(f"{where} names no architecture ({entry.architecture!r} matches every device)")
    return problems


MAX_FLAG_FACTOR = 4.0
"""The most a :class:`FlagAllowance` may loosen a flag case's bound: past it, the path is not the one claimed."""


@dataclass(frozen=True)
class FlagAllowance:
    """A plugin's bounded loosening of one flag case's error bound on one architecture: a hardware limit.

    The case passes when its worst error is at most ``factor`` times the bound, on a backend whose
    ``Capabilities.architecture`` matches ``architecture`` (fnmatch; it must name one, a bare ``*``
    is refused). ``measured`` is the ratio seen on that hardware and ``reason`` says why the limit
    is the hardware's; both go into the report whenever the allowance lets a case pass.
    ``op`` and ``case`` (the flag case's note) are fnmatch patterns.
    """

    op: str
    case: str
    architecture: str
    factor: float
    measured: float
    reason: str
    backend: str = "*"

    def matches(self, op: str, note: str, backend: str, architecture: str) -> bool:
        """True when it applies to flag case ``note`` of ``op`` on ``backend`` reporting ``architecture``."""
        return fnmatchcase(op, self.op) and fnmatchcase(note, self.case) and _on_hardware(self, backend, architecture)

    def describe(self) -> str:
        """One line for reports: where it applies, how far, what was measured, why."""
        return (
            f"{self.backend}/{self.op} [{self.case}] on {self.architecture}: up to {self.factor:g}x the bound "
            f"(measured {self.measured:g}x): {self.reason}"
        )


def check_allowances(entries: Sequence[FlagAllowance]) -> list[str]:
    """Problems with flag allowances (no reason, no architecture, a factor past :data:`MAX_FLAG_FACTOR`)."""
    problems = []
    for entry in entries:
        where = f"flag allowance {entry.backend}/{entry.op} [{entry.case}]"
        problems += _hardware_problems(where, entry)
        if not 1.0 < entry.factor <= MAX_FLAG_FACTOR:
            problems.append(f"{where} has factor {entry.factor:g}; it must be above 1 and at most {MAX_FLAG_FACTOR:g}")
        if not 0.0 < entry.measured <= entry.factor:
            problems.append(f"{where} records measured {entry.measured:g}x, outside (0, factor {entry.factor:g}]")
    return problems


MAX_ACCUMULATION_EXTRA = 2.0**-11
"""The most an :class:`AccumulationAllowance` may add to a reduction bound, as a fraction of ``M``: 2^-11.

That is fp16's unit roundoff: an allowance may hide no more than one fp16 rounding of the magnitude
sum. Simulated round-to-nearest running sums of E4M3 products (operands uniform in ±8, K = 16 and 64,
4096 outputs): a bf16 accumulator (u = 2^-8) errs by more than 2^-11·M at about two thirds of the
outputs (median 2^-10.3), so it fails any case of a few outputs under any allowance; an fp16 one
(u = 2^-11) at about 1% of signed outputs (a short signed case may miss it) and at a quarter to most
one-signed ones (its error grows as K·u there); the flag case (one-signed, K = 4096, no accumulation
allowance) catches it by orders. Hopper's fp8 MMA (rocm on the H200) measured 2^-12.6 of ``M`` on
signed operands, inside the cap with room.
"""


@dataclass(frozen=True)
class AccumulationAllowance:
    """A plugin's bounded loosening of reduction-class value cases on one architecture: a short MMA accumulator.

    A value or Hypothesis case of an op matching ``op`` (fnmatch) whose call's class resolves to
    ``reduction`` and which reads an input tensor of one of ``dtypes`` passes, on a backend whose
    ``Capabilities.architecture`` matches ``architecture`` (fnmatch; a bare ``*`` is refused), when
    ``|actual - expected| ≤ γ_n·M + extra·M + 1 ulp``: the matrix instruction keeps fewer significand
    bits than the class's accumulation type, an error proportional to ``M`` whatever ``n``.
    ``extra`` is above 0 and at most :data:`MAX_ACCUMULATION_EXTRA`; ``measured`` is the worst
    ``|err|/M`` seen on that hardware, in (0, ``extra``]; ``reason`` says why the limit is the
    hardware's. A case within the plain bound passes as ever; one that passes only under the
    allowance says so in its message, its detail and a report warning.
    """

    op: str
    dtypes: frozenset[D]
    architecture: str
    extra: float
    measured: float
    reason: str
    backend: str = "*"

    def matches(self, op: str, operands: set[D] | frozenset[D], backend: str, architecture: str) -> bool:
        """True when it applies to a call of ``op`` reading ``operands`` on ``backend`` reporting ``architecture``."""
        return (
            fnmatchcase(op, self.op) and bool(self.dtypes & set(operands)) and _on_hardware(self, backend, architecture)
        )

    def describe(self) -> str:
        """One line for reports: where it applies, how far, what was measured, why."""
        dtypes = ", ".join(sorted(d.short for d in self.dtypes))
        return (
            f"{self.backend}/{self.op} ({dtypes} operands) on {self.architecture}: γ_n·M + {self.extra:.3g}·M "
            f"(measured {self.measured:.3g}·M): {self.reason}"
        )


def check_accumulation_allowances(entries: Sequence[AccumulationAllowance]) -> list[str]:
    """Problems with accumulation allowances (no reason, dtype or architecture; ``extra`` past the cap...)."""
    problems = []
    for entry in entries:
        where = f"accumulation allowance {entry.backend}/{entry.op}"
        problems += _hardware_problems(where, entry)
        if not entry.dtypes:
            problems.append(f"{where} names no operand dtype")
        if not 0.0 < entry.extra <= MAX_ACCUMULATION_EXTRA:
            problems.append(
                f"{where} has extra {entry.extra:g}; it must be above 0 and at most 2^-11 "
                f"({MAX_ACCUMULATION_EXTRA:g}) of M"
            )
        if not 0.0 < entry.measured <= entry.extra:
            problems.append(f"{where} records measured {entry.measured:g}, outside (0, extra {entry.extra:g}]")
    return problems


_ULP = "one unit in the last place of the format (eps) relative, its smallest subnormal absolute"
DTYPE_DEFAULTS: dict[D, Tolerance] = {
    # PyTorch's torch.testing defaults, used across PyTorch for CPU-vs-accelerator comparisons.
    D.ACL_DOUBLE: Tolerance(1e-7, 1e-7, "float64 default", "torch.testing default for float64"),
    D.ACL_FLOAT: Tolerance(1e-5, 1.3e-6, "float32 default", "torch.testing default for float32 (about 11 ulp)"),
    D.ACL_FLOAT16: Tolerance(1e-5, 1e-3, "float16 default", "torch.testing default for float16 (about 1 ulp)"),
    D.ACL_BF16: Tolerance(1e-5, 1.6e-2, "bf16 default", "torch.testing default for bfloat16 (about 2 ulp)"),
    D.ACL_COMPLEX64: Tolerance(1e-5, 1.3e-6, "complex64 default", "as float32, per component magnitude"),
    D.ACL_COMPLEX128: Tolerance(1e-7, 1e-7, "complex128 default", "as float64, per component magnitude"),
    # The 8/6/4-bit formats: a result that rounds the other way is one step of the format apart.
    D.ACL_FLOAT8_E4M3FN: Tolerance(2.0**-9, 0.125, "float8_e4m3fn default", _ULP),
    D.ACL_FLOAT8_E5M2: Tolerance(2.0**-16, 0.25, "float8_e5m2 default", _ULP),
    D.ACL_FLOAT8_E8M0: Tolerance(0.0, 1.0, "float8_e8m0 default", "powers of two only: one step is a factor 2"),
    D.ACL_FLOAT6_E3M2: Tolerance(0.0625, 0.25, "float6_e3m2 default", _ULP),
    D.ACL_FLOAT6_E2M3: Tolerance(0.125, 0.125, "float6_e2m3 default", _ULP),
    D.ACL_FLOAT4_E2M1: Tolerance(0.5, 0.5, "float4_e2m1 default", _ULP),
}
"""Per-dtype defaults: the fallback for ops whose accuracy class is ``table`` (or that have none).

Dtypes absent here (integers, bool) compare exactly."""

OP_OVERRIDES: tuple[Override, ...] = ()
"""Per-operator overrides, for every backend. Add ``Override(op, atol, rtol, reason, dtypes)``.

None is needed: how close an op must be is its accuracy class, declared in its spec. An entry here
replaces the class with an atol/rtol pair, so it is for an op whose class cannot state its bound.
"""

BACKEND_OVERRIDES: tuple[Override, ...] = ()
"""Per-backend overrides (``backend`` set): a device's documented accuracy, e.g. fast transcendental units."""

EXACT = Tolerance(0.0, 0.0, "exact", "integer and bool results have one right answer")


def from_class(op: str, dtype: D, accuracy: Accuracy, length: int = 1) -> Tolerance | None:
    """The tolerance an accuracy class gives outputs of ``dtype`` (None for the ``table`` class).

    The reference's result is itself rounded once (within 0.5 ulp of the true value), so a class's
    bound against the true value allows that much more against the reference.
    """
    if accuracy.kind == "by_call":
        raise ValueError(f"{op}'s by_call class must be resolved with the call's arguments first")
    source = f"{op} {accuracy.kind} class"
    if accuracy.kind == "exact":
        return Tolerance(0.0, 0.0, source, accuracy.reason, "exact", signed_zero=accuracy.signed_zero)
    if accuracy.kind == "ulp":
        ulps = accuracy.bound_ulps(dtype) + 0.5
        return Tolerance(0.0, 0.0, source, accuracy.reason, "ulp", ulps, signed_zero=accuracy.signed_zero)
    if accuracy.kind == "reduction":
        gamma = accuracy.gamma(length, dtype)
        return Tolerance(0.0, 0.0, source, accuracy.reason, "reduction", 1.0, gamma, accuracy.signed_zero)
    if accuracy.kind == "composite":
        # the reduction's formula, over the row and the elementwise steps after it; M is the op's scale S
        gamma = accuracy.gamma(length + accuracy.steps, dtype)
        return Tolerance(0.0, 0.0, source, accuracy.reason, "reduction", 1.0, gamma, accuracy.signed_zero)
    return None


def lookup(
    op: str,
    dtype: D,
    backend: str,
    sample_tolerance: tuple[float, float] | None = None,
    *,
    accuracy: Accuracy | None = None,
    length: int = 1,
    op_overrides: Sequence[Override] = OP_OVERRIDES,
    backend_overrides: Sequence[Override] = BACKEND_OVERRIDES,
) -> Tolerance:
    """The tolerance for one output: class (else dtype default) → sample's own → per-op → per-backend.

    ``length`` is the case's reduction length (for a ``reduction`` or ``composite`` class). The last match wins.
    """
    if not (dtype.is_float or dtype.is_complex):
        return EXACT
    tol = from_class(op, dtype, accuracy, length) if accuracy is not None else None
    if tol is None:
        tol = DTYPE_DEFAULTS.get(dtype) or Tolerance(0.0, 0.0, f"{dtype.short} exact", "no default for this dtype")
    if sample_tolerance is not None:
        atol, rtol = sample_tolerance
        tol = Tolerance(atol, rtol, f"{op} sample", "declared by the case in the op's spec")
    for entry in op_overrides:
        if entry.matches(op, dtype, backend):
            tol = Tolerance(entry.atol, entry.rtol, f"{entry.op} override", entry.reason)
    for entry in backend_overrides:
        if entry.matches(op, dtype, backend):
            tol = Tolerance(entry.atol, entry.rtol, f"{entry.backend}/{entry.op} override", entry.reason)
    return tol


def check_table(entries: Sequence[Override]) -> list[str]:
    """Problems with override entries (an empty reason, negative tolerances); empty when the table is sound."""
    problems = []
    for entry in entries:
        if not entry.reason.strip():
            problems.append(f"override for {entry.backend}/{entry.op} has no reason")
        if entry.atol < 0 or entry.rtol < 0:
            problems.append(f"override for {entry.backend}/{entry.op} has a negative tolerance")
    return problems

"""The one tolerance table of the conformance suite, and the lookup that reads it.

A float output is compared as ``|actual - expected| <= atol + rtol * |expected|`` (in float64 or
complex128; NaN must meet NaN and an infinity the same infinity). The pair is looked up in four
steps, each later step replacing the earlier answer when it applies:

1. :data:`DTYPE_DEFAULTS` — by the dtype the output is stored in;
2. the sample's own ``Sample.tolerance``, when the op's spec declares one for that case;
3. :data:`OP_OVERRIDES` — by operator name (and optionally dtype);
4. :data:`BACKEND_OVERRIDES` — by backend, operator and dtype.

Integer and bool outputs are always compared exactly. Every entry carries the reason it exists:
an override that loosens a comparison must say why it is right to accept that difference.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase

from acl_core.dtypes import DataType as D


@dataclass(frozen=True)
class Tolerance:
    """An (atol, rtol) pair, where it came from, and why it is what it is."""

    atol: float
    rtol: float
    source: str
    reason: str

    def describe(self) -> str:
        """One line for reports: ``atol=…, rtol=… (source)``."""
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
"""Per-dtype defaults. Dtypes absent here (integers, bool) compare exactly."""

OP_OVERRIDES: tuple[Override, ...] = ()
"""Per-operator overrides, for every backend. Add ``Override(op, atol, rtol, reason, dtypes)``.

None is needed yet: each elementwise result is one correctly-rounded operation away from the
reference's float64 value, which the defaults cover. Reductions and matmul accumulate in another
order on other hardware; their families add entries here with the reason (e.g. summation order).
"""

BACKEND_OVERRIDES: tuple[Override, ...] = ()
"""Per-backend overrides (``backend`` set): a device's documented accuracy, e.g. fast transcendental units."""

EXACT = Tolerance(0.0, 0.0, "exact", "integer and bool results have one right answer")


def lookup(
    op: str,
    dtype: D,
    backend: str,
    sample_tolerance: tuple[float, float] | None = None,
    *,
    op_overrides: Sequence[Override] = OP_OVERRIDES,
    backend_overrides: Sequence[Override] = BACKEND_OVERRIDES,
) -> Tolerance:
    """The tolerance for one output: dtype default → sample's own → per-op → per-backend (last match wins)."""
    if not (dtype.is_float or dtype.is_complex):
        return EXACT
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

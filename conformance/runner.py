"""Running one case on the backend under test and on the reference, and judging the difference.

The runner never looks at a backend's name to decide anything: an op missing from
``capabilities().ops``, a case using a dtype the op does not claim (``capabilities().op_claim``)
or a tensor format missing from ``capabilities().formats`` is skipped with that reason; a case the
capabilities claim must then behave as on the reference.
"""

from __future__ import annotations

import time
import traceback
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from acl_conformance import flags, tolerances
from acl_conformance.cases import (
    PLACEMENT_DEPENDENT,
    Case,
    Catalog,
    ErrorPlan,
    arg_dtypes,
    arg_formats,
    sentinel_outputs,
    tensor_arrays,
)
from acl_conformance.compare import Mismatch, ToleranceFor, bound_ratio, compare_outputs, worst_ulps
from acl_conformance.expectations import Expectation
from acl_conformance.runtime_cases import run_case as run_runtime_case
from acl_core import eager
from acl_core.backend import Backend
from acl_core.capabilities import declared_dtypes
from acl_core.dtypes import DataType as D
from acl_core.dtypes import from_numpy
from acl_core.eager import to_scalar
from acl_core.errors import AclCoreError, AclnnStatus, code_name
from acl_core.formats import Format
from acl_core.spec.accuracy import PRECISION, Accuracy, accuracy_of, elements_per_output, relative_scale
from acl_core.spec.opspec import Kind, OpSpec, Role, Sample
from acl_core.tensor import (
    AclBoolArray,
    AclFloatArray,
    AclIntArray,
    AclScalarList,
    AclTensor,
    AclTensorList,
)

STATUSES = ("passed", "failed", "skipped", "xfailed", "xpassed")
INNER = int(AclnnStatus.ACLNN_ERR_INNER)
Outputs = dict[str, Any]


@dataclass
class Outcome:
    """What happened to one case. ``failure`` classifies a failed case (value, dtype, shape, code...)."""

    op: str
    family: str
    kind: str
    case: str
    status: str
    message: str = ""
    failure: str = ""
    detail: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    expectation: str = ""

    def to_json(self) -> dict[str, Any]:
        """A plain dict for the JSON report."""
        data = {
            "op": self.op,
            "family": self.family,
            "kind": self.kind,
            "case": self.case,
            "status": self.status,
            "message": self.message,
            "failure": self.failure,
            "detail": self.detail,
            "seconds": round(self.seconds, 6),
        }
        if self.expectation:
            data["expectation"] = self.expectation
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Outcome:
        """The inverse of :meth:`to_json`."""
        return cls(
            op=data["op"],
            family=data["family"],
            kind=data["kind"],
            case=data["case"],
            status=data["status"],
            message=data.get("message", ""),
            failure=data.get("failure", ""),
            detail=dict(data.get("detail", {})),
            seconds=float(data.get("seconds", 0.0)),
            expectation=data.get("expectation", ""),
        )


def apply_expectation(outcome: Outcome, entry: Expectation | None) -> Outcome:
    """The outcome seen through an expectation entry: a failure it expects becomes xfailed, a pass xpassed."""
    if entry is None or entry.status != "xfail":
        return outcome
    if outcome.status == "failed":
        return replace(outcome, status="xfailed", expectation=entry.reason)
    if outcome.status == "passed":
        return replace(
            outcome,
            status="xpassed",
            message=f"expected to fail ({entry.reason}) but passed; the entry {entry.source} may be stale",
            expectation=entry.reason,
        )
    return outcome


@dataclass
class _RefResult:
    outputs: Outputs | None
    error: AclCoreError | None


def _attempt(fn: Callable[[], Any]) -> tuple[int, str]:
    """(code, message) of a call: 0 on success, the CANN code of an AclCoreError, 561000 for a crash."""
    try:
        fn()
    except AclCoreError as exc:
        return exc.code, exc.message
    except Exception as exc:
        return INNER, f"crashed with {type(exc).__name__}: {exc}\n{traceback.format_exc()}"
    return 0, ""


class ValidatorOnly(Backend):
    """The reference with every kernel a no-op: a call it refuses was refused by the shared validator.

    Used to classify error cases mechanically: a refusal decided in phase 1 (acl_core's validator,
    the same code for every backend) is a ``contract`` case and proves nothing about a backend.
    """

    def __init__(self, reference: Backend) -> None:
        self._reference = reference
        self.name = f"{reference.name}-validator"
        self._kernels: dict[str, Any] = {name: _no_kernel for name in reference.kernels}

    @property
    def driver(self) -> Any:
        """The reference's driver."""
        return self._reference.driver

    @property
    def runtime(self) -> Any:
        """The reference's runtime (so its allocations are valid here)."""
        return self._reference.runtime

    @property
    def kernels(self) -> Mapping[str, Any]:
        """A no-op for every reference kernel."""
        return self._kernels

    def capabilities(self) -> Any:
        """The reference's."""
        return self._reference.capabilities()

    def launch(self, call: Any) -> None:
        """Nothing runs: only phase 1 decides."""


def _no_kernel(call: Any) -> None:
    """A kernel that does nothing."""


def _cause_traceback(exc: BaseException) -> dict[str, str]:
    """``{"traceback": ...}`` of the Python exception behind an acl error (a crashed kernel's, wrapped as 561000)."""
    cause = exc.__cause__
    if cause is None or isinstance(cause, AclCoreError):
        return {}
    return {"traceback": "".join(traceback.format_exception(type(cause), cause, cause.__traceback__))}


def _describe_code(code: int) -> str:
    return "success (no error)" if code == 0 else f"{code_name(code)} ({code})"


class Runner:
    """Runs cases of a :class:`Catalog` on ``backend`` and compares with ``reference``."""

    def __init__(
        self,
        backend: Backend,
        reference: Backend,
        catalog: Catalog,
        *,
        op_overrides: Sequence[tolerances.Override] = tolerances.OP_OVERRIDES,
        backend_overrides: Sequence[tolerances.Override] = tolerances.BACKEND_OVERRIDES,
        flag_allowances: Sequence[tolerances.FlagAllowance] = (),
        accumulation_allowances: Sequence[tolerances.AccumulationAllowance] = (),
    ) -> None:
        self.backend = backend
        self.flag_allowances = tuple(flag_allowances)
        self.accumulation_allowances = tuple(accumulation_allowances)
        self.reference = reference
        self.catalog = catalog
        self.caps = backend.capabilities()
        self._ops = frozenset(self.caps.ops)
        self._formats = frozenset(self.caps.formats)
        self._op_overrides = op_overrides
        self._backend_overrides = backend_overrides
        self._ref_cache: OrderedDict[tuple[str, int], _RefResult] = OrderedDict()
        self.last_worst_ulps: dict[str, int] = {}
        """The worst ulp error per float output of the last judged call that passed (for the report)."""
        self.last_allowance: tuple[tolerances.AccumulationAllowance, float] | None = None
        """The accumulation allowance the last judged call passed under only, with its worst error over the bound."""
        self._magnitude_cache: OrderedDict[tuple[str, int], tuple[dict[str, Any], Outputs | None]] = OrderedDict()
        self._by_op: dict[str, list[Case]] | None = None
        self.not_run: Callable[[Case], bool] = lambda case: False
        """True for a case that will not run whatever the capabilities say (the session's skip expectations)."""
        self._validator: ValidatorOnly | None = None

    # ------------------------------------------------------------------------------------ public
    def run(self, case: Case) -> Outcome:
        """Run one case (expectations not applied) and time it."""
        start = time.perf_counter()
        try:
            if case.kind == "runtime":
                outcome = run_runtime_case(self, case)
            elif case.op not in self._ops:
                outcome = self._skip(case, f"not claimed: capabilities.ops lacks {case.op}")
            elif case.kind == "value":
                outcome = self._value(case)
            elif case.kind == "error":
                outcome = self._error(case)
            elif case.kind == "flag":
                outcome = flags.run(self, case)
            elif case.kind == "claim":
                outcome = self._claim(case)
            elif case.kind == "capture":
                from acl_conformance.capture_cases import run_capture_case

                outcome = run_capture_case(self, case)
            elif case.kind == "hypothesis":
                from acl_conformance.hypo import run_hypothesis

                outcome = run_hypothesis(self, case)
            else:
                raise ValueError(f"unknown case kind {case.kind!r}")
        except Exception as exc:  # a defect in the suite or the backend must not stop the run
            outcome = self._fail(
                case, "crash", f"the suite crashed: {type(exc).__name__}: {exc}", {"traceback": traceback.format_exc()}
            )
        outcome.seconds = time.perf_counter() - start
        return outcome

    def spec(self, op: str) -> OpSpec:
        """The spec of ``op``."""
        return self.catalog.specs[op]

    def reference_outputs(self, op: str, index: int, sample: Sample | None = None) -> _RefResult:
        """The reference's outputs for sample ``index`` of ``op`` (contiguous; cached for the spec's own
        samples, which error and Hypothesis cases reuse). ``sample`` is given for a derived sample or a
        stride-0 twin: run, never cached (a size tier's outputs are large)."""
        key = (op, index)
        if sample is None and key in self._ref_cache:
            self._ref_cache.move_to_end(key)
            return self._ref_cache[key]
        cache = sample is None
        sample = sample or self.catalog.sample(op, index)
        try:
            result = _RefResult(eager.run(op, self.reference, op_args=sample.args), None)
        except AclCoreError as exc:
            result = _RefResult(None, exc)
        if not cache:
            return result
        self._ref_cache[key] = result
        if len(self._ref_cache) > 256:
            self._ref_cache.popitem(last=False)
        return result

    def unclaimed_dtypes(self, op: str, dtypes: set[D]) -> list[D]:
        """The dtypes among ``dtypes`` that the capabilities do not claim for ``op``."""
        claim = self.caps.op_claim(op)
        return sorted(d for d in dtypes if d not in claim)

    def accuracy(self, op: str, args: Mapping[str, Any] | None = None) -> Accuracy | None:
        """The accuracy class of ``op`` (its spec's, its base's or its family's; None: the table).

        With ``args``, a ``by_call`` class is resolved to the one that call is compared under.
        """
        return accuracy_of(self.spec(op), args)

    def tolerance_for(
        self, op: str, sample: Sample, length: int = 1, args: Mapping[str, Any] | None = None
    ) -> Callable[[D], tolerances.Tolerance]:
        """The tolerance lookup for outputs of one call of ``op`` (reduction length ``length``) on this backend.

        ``args`` are the call's arguments (default the sample's): they resolve a ``by_call`` class.
        """
        accuracy = self.accuracy(op, sample.args if args is None else args)

        def lookup(dtype: D) -> tolerances.Tolerance:
            return tolerances.lookup(
                op,
                dtype,
                self.backend.name,
                sample.tolerance,
                accuracy=accuracy,
                length=length,
                op_overrides=self._op_overrides,
                backend_overrides=self._backend_overrides,
            )

        return lookup

    def magnitudes(self, op: str, args: dict[str, Any]) -> Outputs | None:
        """The reference's outputs for ``args`` with every float input replaced by its absolute value.

        For a sum or a GEMM that is ``Σ|terms|`` per output, the ``M`` of the reduction class's bound.
        None when the reference refuses those arguments (the bound then has no ``M`` term).
        """
        key = (op, id(args))
        hit = self._magnitude_cache.get(key)
        if hit is not None and hit[0] is args:
            return hit[1]
        absolute = {name: _absolute(value) for name, value in args.items()}
        try:
            result: Outputs | None = eager.run(op, self.reference, op_args=absolute)
        except AclCoreError:
            result = None
        self._magnitude_cache[key] = (args, result)
        if len(self._magnitude_cache) > 64:
            self._magnitude_cache.popitem(last=False)
        return result

    def _bound_inputs(self, op: str, args: dict[str, Any], expected: Outputs) -> tuple[int, Outputs | None]:
        """(reduction length, magnitudes; a composite: its scale S) of one case under a bound class; else (1, None)."""
        accuracy = self.accuracy(op, args)
        if accuracy is None or accuracy.kind not in ("reduction", "composite"):
            return 1, None
        length_of = accuracy.length_of or elements_per_output
        if accuracy.kind == "composite":
            scale_of = accuracy.scale_of or relative_scale
            return length_of(args, expected), scale_of(args, expected)
        return length_of(args, expected), self.magnitudes(op, args)

    def rounding_dtype(self, op: str, args: dict[str, Any], expected: Outputs) -> D | None:
        """The dtype a single-rounding op (exact or ulp class) rounds its result in, where an output may be wider.

        That is ``plan["compute"]`` (float32 for an integer computation with a float result): CANN's
        kernel computes there and a wider output only widens the result. None for other classes
        (a GEMM's ``compute`` is its operands' dtype, not where it accumulates) and where no float
        output is wider than every float input.
        """
        accuracy = self.accuracy(op, args)
        if accuracy is None or accuracy.kind not in ("exact", "ulp") or not _may_widen(args, expected):
            return None
        from acl_conformance.dtype_cover import checked_sample
        from acl_core.spec.rules import float_result

        refusal, _, plan = checked_sample(self.spec(op), args)
        compute = plan.get("compute")
        return float_result(compute) if refusal is None and isinstance(compute, D) else None

    def flag_allowance(self, case: Case) -> tolerances.FlagAllowance | None:
        """The plugin's allowance for flag case ``case`` on the architecture the capabilities report, if any."""
        for entry in self.flag_allowances:
            if entry.matches(case.op, case.note, self.backend.name, self.caps.architecture or ""):
                return entry
        return None

    def accumulation_allowance(self, op: str, args: Mapping[str, Any]) -> tolerances.AccumulationAllowance | None:
        """The plugin's accumulation allowance for a call of ``op`` with ``args``, if any applies.

        Only under a ``reduction`` class (resolved for this call), for a call reading an input tensor
        of one of the entry's dtypes, on the architecture the capabilities report.
        """
        if not self.accumulation_allowances:
            return None
        accuracy = self.accuracy(op, args)
        if accuracy is None or accuracy.kind != "reduction":
            return None
        spec = self.spec(op)
        outputs = {p.name for p in spec.params if p.role is Role.OUT}
        operands = {from_numpy(arr.dtype) for name, arr in tensor_arrays(spec, dict(args)) if name not in outputs}
        for entry in self.accumulation_allowances:
            if entry.matches(op, operands, self.backend.name, self.caps.architecture or ""):
                return entry
        return None

    def gate(self, case: Case, dtypes: set[D], formats: set[Format] | None = None) -> Outcome | None:
        """A skipped outcome when the case uses a dtype the op does not claim or a format the backend does not.

        An error case may use a dtype the op does not declare at all (the shared validator refuses it
        before any claim matters): such a dtype needs only the backend-wide claim.
        """
        if case.kind == "error":
            declared = declared_dtypes(self.spec(case.op))
            if declared is not None:
                dtypes = {d for d in dtypes if d in declared or d not in self.caps.dtypes}
        missing = self.unclaimed_dtypes(case.op, dtypes)
        if missing:
            wide = [d.short for d in missing if d not in self.caps.dtypes]
            where = f"dtypes lacks {', '.join(wide)}" if wide else ""
            narrow = [d.short for d in missing if d in self.caps.dtypes]
            if narrow:
                where += ("; " if where else "") + f"op_dtypes[{case.op}] lacks {', '.join(narrow)}"
            return self._skip(case, f"not claimed: capabilities.{where}")
        lacking = sorted(f for f in formats or () if f not in self._formats)
        if lacking:
            return self._skip(case, f"not claimed: capabilities.formats lacks {', '.join(f.name for f in lacking)}")
        return None

    def placed_call(self, backend: Backend, op: str, args: dict[str, Any], layout: str, shapes: Outputs) -> Outputs:
        """Run ``op`` on ``backend`` with inputs placed as ``layout``, guarded against writes it does not own.

        Contiguous and transposed cases give the outputs that layout too (filled with 77, shaped like
        ``shapes``); padded cases, and outputs whose view shape the op writes back (allocated at the output rule's
        maximal shape), let ``eager.run(guard=True)`` allocate outputs inside sentinel-filled
        storage with gaps, so a write beside the view is caught. Inputs are always snapshotted:
        changing one is caught as well.
        """
        spec = self.spec(op)
        if layout != "padded" and not spec.writeback:  # a written-back output is allocated at its maximal size
            args = {**args, **sentinel_outputs(spec, shapes)}
        return eager.run(op, backend, layout=layout, op_args=args, guard=True)

    def run_on_backend(self, op: str, args: dict[str, Any], layout: str, expected: Outputs) -> Outputs:
        """Run ``op`` on the backend under test (see :meth:`placed_call`)."""
        return self.placed_call(self.backend, op, args, layout, expected)

    def judge(
        self, case: Case, args: dict[str, Any], layout: str, expected: Outputs, sample: Sample
    ) -> tuple[str, str, dict[str, Any]] | None:
        """(failure kind, message, detail) when the backend's result differs from ``expected``; else None.

        ``expected`` is the reference's contiguous result. For an operator in
        :data:`~acl_conformance.cases.PLACEMENT_DEPENDENT`, a non-contiguous case is compared with the
        reference run under the same placement instead. A non-contiguous call the backend refuses
        passes when the reference refuses it under that placement with the same code.
        """
        self.last_worst_ulps = {}
        self.last_allowance = None
        if layout != "contiguous" and case.op in PLACEMENT_DEPENDENT:
            try:
                expected = self.placed_call(self.reference, case.op, args, layout, expected)
            except AclCoreError as exc:
                expected_error: AclCoreError | None = exc
            else:
                expected_error = None
            if expected_error is not None:
                return self._refusal_parity(case.op, args, layout, expected, expected_error)
        try:
            actual = self.run_on_backend(case.op, args, layout, expected)
        except AclCoreError as exc:
            if layout != "contiguous":
                try:
                    self.placed_call(self.reference, case.op, args, layout, expected)
                except AclCoreError as ref_exc:
                    if ref_exc.code == exc.code:
                        return None  # both refuse this placement, with the same code
            return (
                "claim",
                f"the backend rejects a call its capabilities claim, with {_describe_code(exc.code)}: "
                f"{exc.message}; the reference computes it",
                {"backend_code": exc.code, "backend_message": exc.message, **_cause_traceback(exc)},
            )
        except eager.OutOfBoundsWrite as exc:
            return ("write", f"the backend wrote to memory it does not own: {exc}", {})
        except Exception as exc:
            return ("crash", f"the backend crashed: {type(exc).__name__}: {exc}", {"traceback": traceback.format_exc()})
        length, magnitudes = self._bound_inputs(case.op, args, expected)
        compute = self.rounding_dtype(case.op, args, expected)
        tolerance = self.tolerance_for(case.op, sample, length, args)
        problems = compare_outputs(actual, expected, tolerance, magnitudes, compute)
        allowance = self.accumulation_allowance(case.op, args) if problems and magnitudes is not None else None
        if allowance is not None:
            widened = _with_extra(tolerance, allowance.extra)
            if not compare_outputs(actual, expected, widened, magnitudes, compute):
                # outside the class's bound, within the plugin's allowance: passes, and says so
                self.last_worst_ulps = worst_ulps(actual, expected, compute)
                self.last_allowance = (allowance, bound_ratio(actual, expected, tolerance, magnitudes))
                return None
        if not problems:
            self.last_worst_ulps = worst_ulps(actual, expected, compute)
            return None
        detail = _detail(problems)
        detail["worst_ulp"] = worst_ulps(actual, expected, compute)
        message = "; ".join(m.message for m in problems)
        if allowance is not None:
            message += (
                f"; past the plugin's accumulation allowance on {allowance.architecture} too "
                f"(γ_n·M + {allowance.extra:.3g}·M)"
            )
            detail["accumulation_allowance_exceeded"] = allowance.describe()
        return (problems[0].kind, message, detail)

    def allowed_outcome(self, case: Case, ratio: float, allowance: tolerances.AccumulationAllowance) -> Outcome:
        """A value or Hypothesis case that passed only under ``allowance`` (worst error ``ratio`` x the class's bound).

        Passed, with the allowance in its message and detail (the report turns it into a warning).
        """
        detail = {
            "allowance": allowance.describe(),
            "allowance_extra": allowance.extra,
            "worst_error_over_bound": ratio,
        }
        message = (
            f"outside the reduction class's bound (worst error {ratio:.3g}x γ_n·M + 1 ulp), within γ_n·M + "
            f"{allowance.extra:.3g}·M: allowed by {allowance.describe()}"
        )
        return Outcome(case.op, case.family, case.kind, case.case_id, "passed", message, "", detail)

    def _refusal_parity(
        self, op: str, args: dict[str, Any], layout: str, shapes: Outputs, ref_exc: AclCoreError
    ) -> tuple[str, str, dict[str, Any]] | None:
        """The reference refuses this placement: the backend must refuse it with the same code."""
        try:
            self.run_on_backend(op, args, layout, shapes)
        except AclCoreError as exc:
            if exc.code == ref_exc.code:
                return None
            code = exc.code
        except Exception as exc:
            return ("crash", f"the backend crashed: {type(exc).__name__}: {exc}", {"traceback": traceback.format_exc()})
        else:
            code = 0
        return (
            "code",
            f"{layout} placement: {_describe_code(code)} where the reference refuses it with "
            f"{_describe_code(ref_exc.code)} ({ref_exc.message})",
            {"backend_code": code, "reference_code": ref_exc.code},
        )

    # ------------------------------------------------------------------------------------ kinds
    def _value(self, case: Case) -> Outcome:
        own = case.sample < len(self.catalog.op(case.op).samples) and case.layout != "expanded"
        sample = self.catalog.sample(case.op, case.sample, case.layout)
        ref = self.reference_outputs(case.op, case.sample, None if own else sample)
        if ref.outputs is None:
            assert ref.error is not None
            return self._fail(case, "reference", f"the reference rejects this sample: {ref.error}")
        spec = self.spec(case.op)
        skipped = self.gate(
            case, arg_dtypes(spec, sample.args) | _output_dtypes(ref.outputs), arg_formats(spec, sample.args)
        )
        if skipped:
            return skipped
        expected = ref.outputs
        if self.caps.tf32_enabled and (hf32 := flags.tf32_args(spec, sample.args)) is not None:
            expected = eager.run(case.op, self.reference, op_args=hf32)  # TF32 claimed: TF32's result is right
        verdict = self.judge(case, sample.args, case.layout, expected, sample)
        if verdict is None:
            if self.last_allowance is not None:
                passed = self.allowed_outcome(case, self.last_allowance[1], self.last_allowance[0])
            else:
                passed = self._pass(case)
            if self.last_worst_ulps:
                passed.detail = {**passed.detail, "worst_ulp": self.last_worst_ulps}
            return passed
        return self._fail(case, *verdict)

    def proven_dtypes(self, op: str) -> set[D]:
        """Every dtype some quick value case of ``op`` runs with on this backend (inputs and outputs, all claimed)."""
        spec = self.spec(op)
        proven: set[D] = set()
        if self._by_op is None:
            self._by_op = {}
            for c in self.catalog.all_cases():
                self._by_op.setdefault(c.op, []).append(c)
        for c in self._by_op.get(op, []):
            if c.kind != "value" or not c.quick or self.not_run(c):
                continue
            sample = self.catalog.sample(op, c.sample)
            ref = self.reference_outputs(op, c.sample)
            if ref.outputs is None:
                continue
            dtypes = arg_dtypes(spec, sample.args) | _output_dtypes(ref.outputs)
            if self.unclaimed_dtypes(op, dtypes) or not arg_formats(spec, sample.args) <= self._formats:
                continue
            proven |= dtypes
        return proven

    def _claim(self, case: Case) -> Outcome:
        """Fail "claimed, unproven" when a dtype the op claims (and declares) runs in no value case."""
        spec = self.spec(case.op)
        declared = {d for p in spec.params if p.kind in (Kind.TENSOR, Kind.TENSOR_LIST) for d in p.dtypes or ()}
        required = self.caps.op_claim(case.op) & declared
        missing = sorted(required - self.proven_dtypes(case.op))
        underivable = self.catalog.op(case.op).underivable
        opted = {d.short: underivable[d] for d in missing if d in underivable}
        unproven = [d.short for d in missing if d.short not in opted]
        if unproven:
            return self._fail(
                case,
                "unproven",
                f"claimed, unproven: {case.op} claims {', '.join(unproven)} but no value case runs "
                f"{'it' if len(unproven) == 1 else 'them'} (claims: capabilities.op_claim)",
                {"unproven": unproven, "opted_out": opted},
            )
        outcome = self._pass(case)
        if opted:
            outcome.message = "no case can exist: " + "; ".join(f"{d}: {r}" for d, r in opted.items())
        return outcome

    def _error(self, case: Case) -> Outcome:
        plan = case.error
        assert plan is not None
        ref_outputs: Outputs | None = None
        if plan.base_sample is not None:
            ref = self.reference_outputs(case.op, plan.base_sample)
            if ref.outputs is None:
                return self._fail(
                    case, "reference", f"the reference rejects the valid call this case alters: {ref.error}"
                )
            ref_outputs = ref.outputs
        skipped = self.gate(case, set(plan.gate))
        if skipped:
            return skipped
        ref_code, ref_msg = self._invalid_call(self.reference, case, plan, ref_outputs)
        code, msg = self._invalid_call(self.backend, case, plan, ref_outputs)
        detail = {
            "expected_codes": list(plan.expected),
            "reference_code": ref_code,
            "backend_code": code,
            "reference_message": ref_msg,
            "backend_message": msg,
        }
        if plan.expected and ref_code not in plan.expected:
            return self._fail(
                case,
                "reference",
                f"the reference returns {_describe_code(ref_code)} where the case expects "
                f"{' or '.join(_describe_code(c) for c in plan.expected)} ({ref_msg or 'it accepted the call'})",
                detail,
            )
        if ref_code and self._decided_by_validator(case, plan, ref_outputs, ref_code):
            case = replace(case, kind="contract")
        if code != ref_code:
            return self._fail(
                case,
                "code",
                f"error code {_describe_code(code)} where the reference returns {_describe_code(ref_code)}"
                + (f"; backend said: {msg}" if msg else ""),
                detail,
            )
        return self._pass(case)

    def _decided_by_validator(self, case: Case, plan: ErrorPlan, ref_outputs: Outputs | None, ref_code: int) -> bool:
        """True when the reference's refusal comes from phase 1 alone (the shared validator)."""
        if self._validator is None:
            self._validator = ValidatorOnly(self.reference)
        code, _ = self._invalid_call(self._validator, case, plan, ref_outputs)
        return code == ref_code

    def _invalid_call(
        self, backend: Backend, case: Case, plan: ErrorPlan, ref_outputs: Outputs | None
    ) -> tuple[int, str]:
        keep: list[Any] = []

        def call() -> None:
            args, made = plan.build(backend, ref_outputs)
            keep.extend(made)
            if plan.via_c:
                invoke_c(self.spec(case.op), backend, args, keep)
            else:
                eager.run(case.op, backend, op_args=args)

        try:
            return _attempt(call)
        finally:
            for item in keep:
                free = getattr(item, "free", None)
                if free is not None:
                    free()

    # ------------------------------------------------------------------------------------ outcomes
    def _pass(self, case: Case) -> Outcome:
        return Outcome(case.op, case.family, case.kind, case.case_id, "passed")

    def _skip(self, case: Case, reason: str) -> Outcome:
        return Outcome(case.op, case.family, case.kind, case.case_id, "skipped", reason)

    def _fail(self, case: Case, failure: str, message: str, detail: dict[str, Any] | None = None) -> Outcome:
        return Outcome(case.op, case.family, case.kind, case.case_id, "failed", message, failure, detail or {})


def _with_extra(tolerance: ToleranceFor, extra: float) -> ToleranceFor:
    """``tolerance`` with ``extra·M`` added to every reduction bound it gives (table and other kinds unchanged)."""

    def lookup(dtype: D) -> tolerances.Tolerance:
        found = tolerance(dtype)
        return replace(found, extra=extra) if found.kind == "reduction" else found

    return lookup


def _detail(problems: list[Mismatch]) -> dict[str, Any]:
    first = problems[0]
    return {"output": first.output, **first.detail, "outputs_differing": [m.output for m in problems]}


def _absolute(value: Any) -> Any:
    """A float array (or list of them) as its absolute values, NaN and ±Inf as 0; anything else unchanged.

    Non-finite inputs are left out of ``M``: where the reference's result is finite none took part,
    and an ``M`` that is still infinite then says the finite terms alone overflow the format.
    """
    if isinstance(value, list):
        return [_absolute(v) for v in value]
    if isinstance(value, np.ndarray) and value.dtype.kind in "fcV":
        wide = np.complex128 if value.dtype.kind == "c" else np.float64
        magnitude = np.empty_like(value, dtype=np.float64)  # keeps a subclass: an NzArray keeps its placement
        np.abs(value.astype(wide), out=magnitude)
        magnitude[~np.isfinite(magnitude)] = 0.0
        return magnitude.astype(value.dtype)
    return value


def _output_dtypes(outputs: Outputs) -> set[D]:
    found: set[D] = set()
    for value in outputs.values():
        for arr in value if isinstance(value, list) else [value]:
            found.add(from_numpy(np.asarray(arr).dtype))
    return found


# ------------------------------------------------------------------------------------ the C path
def _handle(kind: Kind, value: Any, backend: Backend, keep: list[Any]) -> Any:
    if value is None:
        return None
    if kind is Kind.TENSOR:
        if isinstance(value, AclTensor):
            return value
        place = getattr(value, "acl_to_device", None)  # a value in a private format (acl_core.nz.NzArray)
        da = place(backend) if place is not None else eager.to_device(np.asarray(value), backend)
        keep.append(da)
        return da.tensor()
    if kind is Kind.TENSOR_LIST:
        return AclTensorList.create([_handle(Kind.TENSOR, v, backend, keep) for v in value])
    if kind is Kind.SCALAR:
        return to_scalar(value)
    if kind is Kind.SCALAR_LIST:
        return AclScalarList.create([to_scalar(v) for v in value])
    if kind is Kind.INT_ARRAY:
        return AclIntArray.create(value)
    if kind is Kind.FLOAT_ARRAY:
        return AclFloatArray.create(value)
    if kind is Kind.BOOL_ARRAY:
        return AclBoolArray.create(value)
    return value


def invoke_c(spec: OpSpec, backend: Backend, args: dict[str, Any], keep: list[Any]) -> None:
    """Both aclnn phases with exactly these arguments (None stays a null handle; outputs are not allocated)."""
    from acl_core.aclnn import execute, get_workspace_size

    backend.runtime.ensure_device()
    handles = {p.name: _handle(p.kind, args.get(p.name, p.default), backend, keep) for p in spec.params}
    size, executor = get_workspace_size(spec, [], handles, backend=backend)
    runtime = backend.runtime
    workspace = runtime.malloc(size) if size else 0
    try:
        stream = runtime.create_stream()
        try:
            execute(spec, workspace, size, executor, stream)
            runtime.synchronize_stream(stream)
        finally:
            runtime.destroy_stream(stream)
    finally:
        if workspace:
            runtime.free(workspace)


def _float_precisions(values: Any) -> list[int]:
    """Significand bits of every float or complex array among ``values`` (lists searched; 0 for formats without one)."""
    found: list[int] = []
    for value in values:
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, np.ndarray) and item.dtype.kind in "fcV":
                try:
                    found.append(PRECISION.get(from_numpy(item.dtype), 0))
                except ValueError:
                    continue
    return found


def _may_widen(args: Mapping[str, Any], expected: Outputs) -> bool:
    """True when some float output is wider than every float input (or there is no float input)."""
    outs = _float_precisions(expected.values())
    return bool(outs) and max(outs) > min(_float_precisions(args.values()), default=0)

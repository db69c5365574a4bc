"""Per-operator claims: phase 1 refuses what a backend does not claim, and conformance proves what it does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from acl_conformance import Session
from acl_conformance.cases import CLAIM_NOTE, Case, arg_dtypes, arg_formats
from acl_conformance.dtype_cover import DERIVED
from acl_conformance.tolerances import Override
from acl_core import eager, register_plugin, unregister_backend
from acl_core.backend import BackendRegistration
from acl_core.capabilities import Capabilities, declared_dtypes
from acl_core.dtypes import DataType as D
from acl_core.errors import AclCoreError
from acl_core.formats import Format
from acl_core.nz import NzArray
from acl_core.plugin import hookimpl
from acl_core.spec.ops import all_specs, get_spec
from acl_core.spec.opspec import Sample
from acl_reference.backend import ReferenceBackend
from tests.conformance.planted import PLANTED_PRIORITY

CLAIM = f"claim:{CLAIM_NOTE}"


class _NarrowBackend(ReferenceBackend):
    """The reference, claiming Add, Abs and LogicalNot without float64 and bool, and (optionally) no ND format."""

    name = "claims-narrow"
    formats: tuple[Format, ...] | None = None

    def __init__(self) -> None:
        super().__init__()
        self.launched: list[str] = []
        for op in ("Add", "Abs"):
            original = self._kernels[op]

            def kernel(launch, original=original, op=op):  # type: ignore[no-untyped-def]
                self.launched.append(op)
                original(launch)

            self._kernels[op] = kernel

    def capabilities(self) -> Capabilities:
        caps = super().capabilities()
        narrowed = {
            op: tuple(d for d in caps.op_dtypes[op] if d not in (D.ACL_DOUBLE, D.ACL_BOOL))
            for op in ("Add", "Abs", "LogicalNot")
        }
        update: dict[str, object] = {"op_dtypes": {**caps.op_dtypes, **narrowed}}
        if self.formats is not None:
            update["formats"] = self.formats
        return caps.model_copy(update=update)


class _NoNdBackend(_NarrowBackend):
    name = "claims-no-nd"
    formats = (Format.ACL_FORMAT_FRACTAL_NZ,)


def test_phase_one_refuses_an_unclaimed_dtype_before_any_kernel_runs() -> None:
    backend = _NarrowBackend()
    a = np.ones((2, 3))
    with pytest.raises(AclCoreError) as info:
        eager.run("Add", backend, self=a, other=a, alpha=1.0)
    assert info.value.code == 161002
    assert "aclnnAdd: backend claims-narrow does not claim dtype float64 for self" in info.value.message
    assert backend.launched == []
    out = eager.run("Add", backend, self=a.astype(np.float32), other=a.astype(np.float32), alpha=1.0)["out"]
    assert np.array_equal(out, 2 * np.ones((2, 3), np.float32)) and backend.launched == ["Add"]


def test_phase_one_refuses_an_unclaimed_format() -> None:
    backend = _NoNdBackend()
    with pytest.raises(AclCoreError) as info:
        eager.run("Abs", backend, self=np.ones(3, np.float32))
    assert info.value.code == 161002 and "does not claim format ACL_FORMAT_ND for self" in info.value.message
    assert backend.launched == []


def test_the_dtype_gate_sees_zero_d_numpy_and_python_scalars() -> None:
    spec = get_spec("Abs")
    assert arg_dtypes(spec, {"self": np.bool_(True)}) == {D.ACL_BOOL}
    assert arg_dtypes(spec, {"self": np.float16(2)}) == {D.ACL_FLOAT16}
    assert arg_dtypes(spec, {"self": 2.5}) == {D.ACL_DOUBLE}
    assert arg_formats(get_spec("Abs"), {"self": NzArray(np.ones((16, 16), np.float16))}) == {
        Format.ACL_FORMAT_FRACTAL_NZ
    }


def test_a_zero_d_bool_scalar_case_is_skipped_on_a_backend_not_claiming_bool() -> None:
    session = Session(_NarrowBackend(), ops="LogicalNot")
    ops = session.catalog.op("LogicalNot")
    ops.samples.append(Sample({"self": np.bool_(True)}, "bool [] as a NumPy scalar"))
    case = Case("LogicalNot", "elementwise", "value", "bool []", "bool []", sample=len(ops.samples) - 1)
    outcome = session.runner.run(case)
    assert outcome.status == "skipped" and "op_dtypes[LogicalNot] lacks bool" in outcome.message


def test_every_declared_input_dtype_gets_a_value_case_or_a_reason() -> None:
    session = Session("reference")
    for name, spec in session.catalog.specs.items():
        ops = session.catalog.op(name)
        if not ops.samples:
            continue
        used = {d for s in ops.samples for d in arg_dtypes(spec, s.args)}
        for p in spec.params:
            if p.role.value == "out" or p.dtypes is None or p.kind.name not in ("TENSOR", "TENSOR_LIST"):
                continue
            missing = {d for d in p.dtypes - used if d not in ops.underivable}
            assert not missing, f"{name}.{p.name}: no value case for {sorted(d.short for d in missing)}"


def test_add_and_gather_get_the_dtypes_their_samples_lacked() -> None:
    session = Session("reference", ops="Add,Gather")
    notes: dict[str, list[str]] = {}
    for c in session.cases():
        if DERIVED in c.case_id:
            notes.setdefault(c.op, []).append(c.case_id)
    assert any(n.startswith("float64 self") for n in notes["Add"]) and any(n.startswith("int8") for n in notes["Add"])
    assert any(n.startswith("float16 self") for n in notes["Gather"])
    assert declared_dtypes(all_specs()["Add"]) is not None


def test_the_reference_proves_every_pair_it_claims() -> None:
    report = Session("reference", ops="Add,Gather,Cast,Sort").run()
    claims = [o for o in report.outcomes if o.kind == "claim"]
    assert len(claims) == 4 and all(o.status == "passed" for o in claims), [o.message for o in claims]


def test_a_claimed_pair_whose_cases_are_all_skipped_fails_claimed_unproven(tmp_path: Path) -> None:
    path = tmp_path / "skip.toml"
    path.write_text('[[expect]]\nop = "Add"\ncase = "*float64*"\nstatus = "skip"\nreason = "testing"\n')
    report = Session("reference", ops="Add", expectations=path).run()
    (failed,) = report.failed
    assert failed.case == CLAIM and failed.failure == "unproven"
    assert failed.message.startswith("claimed, unproven: Add claims float64")


def test_a_backend_claiming_no_formats_proves_nothing() -> None:
    report = Session(_NoNdBackend(), ops="Abs").run()
    assert all(o.status == "skipped" for o in report.outcomes if o.kind == "value")
    assert any("capabilities.formats lacks ACL_FORMAT_ND" in o.message for o in report.outcomes)
    assert [o.case for o in report.failed] == [CLAIM]


class _ShippingPlugin:
    """A third-party plugin that ships its own expectations and tolerance overrides."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @hookimpl
    def acl_core_backends(self) -> list[BackendRegistration]:
        return [
            BackendRegistration(
                name="claims-shipping",
                factory=_Shipping,
                expectations=self.path,
                tolerance_overrides=(Override("Abs", 1e-3, 1e-3, "this device's abs is approximate"),),
                priority=PLANTED_PRIORITY,
            )
        ]


class _Shipping(ReferenceBackend):
    name = "claims-shipping"


def test_a_plugin_ships_its_expectations_and_tolerance_overrides(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text('[[expect]]\nop = "Abs"\ncase = "*float64*"\nstatus = "skip"\nreason = "plugin says so"\n')
    register_plugin(_ShippingPlugin(path), "claims-shipping")
    try:
        session = Session("claims-shipping", ops="Abs")
        assert session.expectations_file == str(path) and session.entries[0].reason == "plugin says so"
        (override,) = session.plugin_overrides
        assert override.backend == "claims-shipping" and override.op == "Abs"
        tol = session.runner.tolerance_for("Abs", session.catalog.sample("Abs", 0))(D.ACL_FLOAT)
        assert tol.atol == 1e-3 and "claims-shipping" in tol.source
        other = Session("reference", ops="Abs")
        assert other.runner.tolerance_for("Abs", other.catalog.sample("Abs", 0))(D.ACL_FLOAT).atol != 1e-3
    finally:
        unregister_backend("claims-shipping")


def test_tf32_flag_case_catches_tf32_rounding_without_the_claim() -> None:
    from tests.conformance.mutants.mutant_claims import Tf32UnclaimedBackend

    report = Session(Tf32UnclaimedBackend(), ops="Mm").run()
    flag = [o for o in report.failed if o.kind == "flag"]
    assert len(flag) == 1 and "do not claim tf32_enabled" in flag[0].message


def test_tf32_claimed_compares_fp32_gemm_values_with_tf32_results() -> None:
    from tests.conformance.mutants.mutant_claims import Tf32ClaimedBackend

    report = Session(Tf32ClaimedBackend(), ops="Mm").run()
    assert {o.kind for o in report.failed} == {"flag", "value"}, "exact fp32 results differ from TF32's"
    values = [o for o in report.failed if o.kind == "value"]
    assert all("float32" in o.case for o in values)
    (flag,) = [o for o in report.failed if o.kind == "flag"]
    assert "no TF32 rounding shows" in flag.message


class _ArchBackend(ReferenceBackend):
    """The reference reporting another architecture, with mx_use_hw claimed."""

    name = "claims-arch"
    architecture = "gfx950"

    def capabilities(self) -> Capabilities:
        """The reference's capabilities on ``architecture`` with mx_use_hw claimed."""
        return super().capabilities().model_copy(update={"mx_use_hw": True, "architecture": self.architecture})


def _mx_flag(backend: ReferenceBackend) -> list[str]:
    report = Session(backend, ops="GroupedMatmulV5", case="flag:*").run()
    assert report.totals()["passed"] + len(report.failed) >= 1, "the MX claim case must run"
    return [o.message for o in report.failed if o.kind == "flag"]


def test_mx_use_hw_is_accepted_where_the_architecture_has_mx_instructions() -> None:
    assert _mx_flag(_ArchBackend()) == []


@pytest.mark.parametrize("arch", ["gfx942", "sm_90", "x86_64", "gfx9999"])
def test_mx_use_hw_is_refused_without_mx_instructions(arch: str) -> None:
    backend = _ArchBackend()
    backend.architecture = arch
    (message,) = _mx_flag(backend)
    assert f"'{arch}'" in message and "MX matrix instructions" in message
    assert ("not known to have" in message) is (arch == "gfx9999")


def test_fp8_flag_case_requires_float32_accumulation() -> None:
    from tests.conformance.mutants.mutant_claims import Fp8HalfAccumulatorBackend

    report = Session(Fp8HalfAccumulatorBackend(), ops="QuantMatmulV5", case="flag:*").run()
    (flag,) = [o for o in report.failed if o.kind == "flag"]
    assert "float32 accumulation's bound" in flag.message and flag.detail["fp8_matmul_hw"] is True


def test_fp8_matmul_hw_without_an_fp8_claim_fails() -> None:
    class _NoFp8(ReferenceBackend):
        name = "claims-fp8-no-dtype"

        def capabilities(self) -> Capabilities:
            caps = super().capabilities()
            narrowed = {**caps.op_dtypes, "QuantMatmulV5": (D.ACL_INT8, D.ACL_FLOAT16, D.ACL_BF16, D.ACL_FLOAT)}
            return caps.model_copy(update={"fp8_matmul_hw": True, "op_dtypes": narrowed})

    report = Session(_NoFp8(), ops="QuantMatmulV5", case="flag:*").run()
    assert any("claims no FLOAT8 dtype" in o.message for o in report.failed)


def test_the_claims_table_names_every_capabilities_field() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "conformance.md").read_text(encoding="utf-8")
    table = doc[doc.index("**Flags.**") : doc.index("## Tolerances")]
    missing = [f for f in Capabilities.model_fields if f"`{f}`" not in table]
    assert not missing, f"docs/conformance.md's claims table lacks {missing}"

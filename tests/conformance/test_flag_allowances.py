"""A plugin's bounded flag allowance: rocm's fp8 QuantMatmulV5 case on sm_90 (Hopper's fp8 MMA accumulator).

The H200 measured 1.83x float32 accumulation's bound in the fp8 flag case. rocm ships a
:class:`FlagAllowance` of 2x for sm_90 only, so: 1.83x passes on sm_90 (and says so in the report);
2.5x still fails there; another architecture, or a backend without the entry, fails at 1.83x.
The backends here are the reference with its fp8 flag-case result moved by a chosen multiple of the bound.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from acl_conformance import Session
from acl_conformance.flags import FP8_NOTE, FP8_SHAPE
from acl_conformance.suite import plugin_allowances
from acl_conformance.tolerances import FlagAllowance, check_allowances
from acl_core.backend import BackendRegistration, Launch
from acl_core.capabilities import Capabilities
from acl_core.plugin import get_backend, get_registration
from acl_reference.backend import ReferenceBackend
from acl_reference.call import RefCall
from acl_rocm.plugin import conformance_entries
from tests.conformance.planted import register_planted


class Fp8Accumulator(ReferenceBackend):
    """Claims fp8_matmul_hw on ``architecture``; its fp8 flag-case GEMM is ``ratio`` times the bound off."""

    name = "fp8-accumulator"
    architecture = "sm_90"
    ratio = 1.83

    def __init__(self) -> None:
        super().__init__()
        original = self._kernels["QuantMatmulV5"]
        driver = self.driver

        def planted(launch: Launch) -> None:
            original(launch)
            k = RefCall(launch, driver)
            x1 = k.read("x1")
            if x1.dtype != ml_dtypes.float8_e4m3fn or x1.shape[-1] != FP8_SHAPE[1]:
                return
            steps = FP8_SHAPE[1] + 3
            gamma = steps * 2.0**-24 / (1 - steps * 2.0**-24)
            # one-signed products: the accumulator's error is relative, ``ratio`` times γ_(K+3)
            k.write("out", k.read("out", np.float64) * (1 + self.ratio * gamma))

        self._kernels["QuantMatmulV5"] = planted

    def capabilities(self) -> Capabilities:
        """The reference's, with the fp8 matrix path claimed on ``architecture``."""
        return super().capabilities().model_copy(update={"fp8_matmul_hw": True, "architecture": self.architecture})


def _variant(name: str, arch: str) -> type[Fp8Accumulator]:
    return type(f"Fp8On{arch}", (Fp8Accumulator,), {"name": name, "architecture": arch})


# name: (architecture, ships rocm's entries)
VARIANTS = {
    "fp8-hopper": ("sm_90", True),
    "fp8-blackwell": ("sm_100", True),
    "fp8-mi300": ("gfx942", True),
    "fp8-hopper-bare": ("sm_90", False),
}


@pytest.fixture(scope="module", autouse=True)
def _registered() -> None:
    registrations = [
        BackendRegistration(
            name=name,
            factory=_variant(name, arch),
            summary=f"fp8 accumulator on {arch}",
            tolerance_overrides=conformance_entries if ships else (),
        )
        for name, (arch, ships) in VARIANTS.items()
    ]
    register_planted("fp8-allowance", registrations)


def _flag(name: str, ratio: float) -> tuple[Any, Any]:
    backend = get_backend(name)
    assert isinstance(backend, Fp8Accumulator)
    backend.ratio = ratio
    report = Session(backend, ops="QuantMatmulV5", case=f"flag:{FP8_NOTE}").run()
    (outcome,) = report.outcomes
    return outcome, report


def test_rocm_ships_one_bounded_allowance_for_sm_90() -> None:
    (entry,) = [e for e in conformance_entries() if isinstance(e, FlagAllowance)]
    assert (entry.op, entry.case, entry.architecture) == ("QuantMatmulV5", FP8_NOTE, "sm_90")
    assert entry.factor == 2.0 and entry.measured == 1.83 and "FAST_ACCUM" in entry.reason
    assert check_allowances([entry]) == []


def test_1_83x_passes_on_sm_90_under_the_allowance_and_the_report_says_so() -> None:
    outcome, report = _flag("fp8-hopper", 1.83)
    assert outcome.status == "passed", outcome.message
    assert 1.75 < outcome.detail["worst_error_over_bound"] < 1.9
    assert "measured 1.83x" in outcome.detail["allowance"] and "allowed by" in outcome.message
    (line,) = [w for w in report.warnings if "flag allowance" in w]
    assert "QuantMatmulV5" in line and "sm_90" in line and "measured 1.83x" in line and "FAST_ACCUM" in line
    assert report.ok


def test_within_the_bound_needs_no_allowance() -> None:
    outcome, report = _flag("fp8-hopper", 0.5)
    assert outcome.status == "passed" and "allowance" not in outcome.detail
    assert not [w for w in report.warnings if "flag allowance" in w]


def test_2_5x_still_fails_on_sm_90() -> None:
    outcome, _ = _flag("fp8-hopper", 2.5)
    assert outcome.status == "failed" and outcome.kind == "flag"
    assert "past the 2x the plugin allows on sm_90" in outcome.message


@pytest.mark.parametrize("name", ["fp8-blackwell", "fp8-mi300", "fp8-hopper-bare"])
def test_1_83x_fails_on_another_architecture_or_without_the_entry(name: str) -> None:
    outcome, _ = _flag(name, 1.83)
    assert outcome.status == "failed" and "does not accumulate in float32" in outcome.message
    assert "allowance" not in outcome.detail


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"factor": 5.0}, "at most 4"),
        ({"factor": 1.0}, "above 1"),
        ({"architecture": "*"}, "names no architecture"),
        ({"reason": " "}, "no reason"),
        ({"measured": 2.5}, "outside (0, factor"),
    ],
)
def test_an_unbounded_allowance_is_refused(change: dict[str, Any], problem: str) -> None:
    base = {"op": "QuantMatmulV5", "case": FP8_NOTE, "architecture": "sm_90", "factor": 2.0, "measured": 1.8}
    entry = FlagAllowance(**{**base, "reason": "a hardware limit", **change})
    registration = BackendRegistration(name="x", factory=Fp8Accumulator, tolerance_overrides=(entry,))
    with pytest.raises(ValueError, match=problem.replace("(", r"\(")):
        plugin_allowances("x", registration)


def test_the_rocm_registration_ships_the_entry_lazily() -> None:
    registration = get_registration("rocm")
    assert registration is not None and callable(registration.tolerance_overrides)
    (entry,) = plugin_allowances("rocm", registration)
    assert entry.backend == "rocm" and entry.architecture == "sm_90"

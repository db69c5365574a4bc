"""Launch.plan has a declared schema (issue 14): a rule writing an undeclared key or type fails in tests."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from acl_core.dtypes import DataType as D
from acl_core.spec import plan as plan_schema
from acl_core.spec.ops import all_specs, get_spec
from acl_core.spec.opspec import Call
from acl_core.spec.plan import PLAN_KEYS, PlanSchemaError, check_plan, declare
from acl_core.spec.validate import check_inputs
from acl_core.tensor import AclScalar, AclTensor


def _add_args() -> dict[str, object]:
    t = AclTensor.create((2,), D.ACL_FLOAT, None, 0, 2, None, 0x1000)
    o = AclTensor.create((2,), D.ACL_FLOAT, None, 0, 2, None, 0x2000)
    return {"self": t, "other": t, "alpha": AclScalar.create(1.0, D.ACL_FLOAT), "out": o}


def test_the_tests_run_with_the_check_on() -> None:
    assert plan_schema.CHECKING


def test_an_undeclared_plan_key_fails_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = get_spec("Add")
    real = spec.infer

    def infer(call: Call) -> object:
        infos = real(call)
        call.plan["promoted"] = D.ACL_FLOAT  # a key no rule declares
        return infos

    bad = dataclasses.replace(spec, infer=infer)
    with pytest.raises(PlanSchemaError, match="'promoted' is not declared"):
        check_inputs(bad, _add_args(), None)
    check_inputs(spec, _add_args(), None)  # the real rule passes


def test_a_value_of_the_wrong_type_or_outside_the_choices_fails() -> None:
    with pytest.raises(PlanSchemaError, match="compute"):
        check_plan("Add", {"compute": "float32"})
    with pytest.raises(PlanSchemaError, match="precision"):
        check_plan("Mm", {"precision": "tf32"})
    check_plan("Mm", {"precision": "hf32", "compute": D.ACL_FLOAT})


def test_a_key_declared_twice_differently_is_refused() -> None:
    declare("compute", PLAN_KEYS["compute"].type_doc, PLAN_KEYS["compute"].meaning, D)  # the same again: fine
    with pytest.raises(PlanSchemaError, match="declared twice"):
        declare("compute", "int", "something else", int)


def test_every_declared_key_has_a_type_and_a_meaning() -> None:
    assert {"outputs", "compute", "precision"} <= set(PLAN_KEYS)
    assert all(k.type_doc and k.meaning and k.accepts for k in PLAN_KEYS.values())


def test_every_operators_sample_plans_conform() -> None:
    from tools.kernels_doc import sample_plans

    seen: set[str] = set()
    for name, spec in sorted(all_specs().items()):
        for plan in sample_plans(spec, np.random.default_rng(0)):
            check_plan(name, plan)
            seen |= set(plan)
    assert "compute" in seen and "precision" in seen

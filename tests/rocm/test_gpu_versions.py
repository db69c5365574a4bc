"""Operator versions (acl_core/spec/ops/versions.py) on the GPU, compared with the NumPy reference (GPU tier).

A version runs its base's GPU kernel through the argument mapping, so rocm claims it exactly when it
claims the base; every sample must agree with the reference's result for the version within the
conformance tolerances, and with rocm's own result for the base on the mapped arguments bit for bit.
The attention-family versions need a real GPU: the CPU kernel emulator runs 1-D blocks and generated
Meta structs only, which the attention and rotary kernels are not (their op code is checked above the
provider seam by tests/rocm/test_attention_cpu.py instead).
"""

from __future__ import annotations

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import from_numpy
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.versions import SPECS
from acl_core.spec.opspec import Kind
from conformance.tolerances import lookup
from tests.conftest import assert_close

pytestmark = pytest.mark.gpu

VERSIONS = [s.name for s in SPECS]


def _base_args(op: str, args: dict) -> tuple[str, dict]:
    spec = get_spec(op)
    assert spec.base is not None and spec.base_args is not None
    base = get_spec(spec.base)
    outputs = {p.name for p in base.outputs}
    lists = {p.name for p in base.params if p.kind is Kind.TENSOR_LIST}
    mapped = {k: [v] if k in lists and isinstance(v, np.ndarray) else v for k, v in spec.base_args(dict(args)).items()}
    return spec.base, {k: v for k, v in mapped.items() if not (k in outputs and v is None)}


@pytest.mark.parametrize("op", VERSIONS)
def test_version_matches_reference_and_its_base(rocm: Backend, reference: Backend, op: str) -> None:
    spec = get_spec(op)
    assert spec.base is not None and spec.base_args is not None
    assert (op in rocm.capabilities().ops) == (spec.base in rocm.capabilities().ops)
    if op not in rocm.capabilities().ops:
        pytest.skip(f"{op}'s base {spec.base} is not claimed here")
    assert spec.samples is not None
    names = {p.name for p in spec.outputs}
    base_name = {v: k for k, v in spec.base_args({n: n for n in names}).items() if v in names}
    for sample in spec.samples(np.random.default_rng(2024)):
        expected = eager.run(op, reference, op_args=sample.args)
        got = eager.run(op, rocm, guard=True, op_args=sample.args)
        base, args = _base_args(op, sample.args)
        via_base = eager.run(base, rocm, op_args=args)
        assert got.keys() == expected.keys(), sample.note
        for name, value in expected.items():
            triples = (
                zip(got[name], value, via_base[base_name[name]], strict=True)
                if isinstance(value, list)
                else [(got[name], value, via_base[base_name[name]])]
            )
            for g, w, b in triples:
                tol = lookup(op, from_numpy(w.dtype), "rocm", sample.tolerance)
                assert_close(g, w, atol=tol.atol, rtol=tol.rtol)
                np.testing.assert_array_equal(g, b, err_msg=f"{op} [{sample.note}] {name}")

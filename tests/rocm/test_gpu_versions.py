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
from acl_core.spec.version import PASSTHROUGH
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
    through = set(PASSTHROUGH[op].values())
    return spec.base, {k: v for k, v in mapped.items() if not ((k in outputs or k in through) and v is None)}


def _beyond_base(op: str, args: dict) -> bool:
    """Whether a sample uses what the version implements beyond its base (a sink): compared with the reference only."""
    return any(args.get(p) is not None and np.size(args[p]) for p in PASSTHROUGH[op])


def _as_base_lays_out(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """[T,N,8] statistics (softmaxOutLayout 'same_as_input') in the base's [N,T,8] layout."""
    if got.shape != want.shape and got.ndim == 3 and got.shape == (want.shape[1], want.shape[0], want.shape[2]):
        return np.ascontiguousarray(got.transpose(1, 0, 2))
    return got


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
        assert got.keys() == expected.keys(), sample.note
        beyond = _beyond_base(op, sample.args)
        if not beyond:
            base, args = _base_args(op, sample.args)
            via_base = eager.run(base, rocm, op_args=args)
        for name, value in expected.items():
            if name == "softmaxOutOut":  # reserved: neither backend writes it
                continue
            triples = (
                zip(got[name], value, [None] * len(value) if beyond else via_base[base_name[name]], strict=True)
                if isinstance(value, list)
                else [(got[name], value, None if beyond else via_base[base_name[name]])]
            )
            for g, w, b in triples:
                tol = lookup(op, from_numpy(w.dtype), "rocm", sample.tolerance)
                try:
                    assert_close(g, w, atol=tol.atol, rtol=tol.rtol)
                except AssertionError as exc:
                    raise AssertionError(f"{op} [{sample.note}] {name}\n{exc}") from None
                if b is not None:
                    np.testing.assert_array_equal(_as_base_lays_out(g, b), b, err_msg=f"{op} [{sample.note}] {name}")

"""One GPU-tier check shared by the family tests: an op on rocm against the reference, under its accuracy class
(a ``table`` op under the per-dtype default, as the suite's ``lookup`` gives it).

The comparison is the suite's own (``compare_outputs`` with the op's declared class and reduction length), and
rocm's outputs start as sentinels (``tests.rocm.prefill``) so a kernel that writes nothing cannot pass.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

from acl_conformance.compare import compare_outputs
from acl_conformance.runner import _absolute
from acl_conformance.tolerances import lookup
from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.dtypes import from_numpy
from acl_core.errors import AclCoreError
from acl_core.spec.accuracy import accuracy_of, elements_per_output, relative_scale
from acl_core.spec.ops import get_spec
from tests.rocm.prefill import sentinel_outputs


def class_problems(op: str, args: dict[str, Any], actual: dict[str, Any], expected: dict[str, Any]) -> list[Any]:
    """The mismatches of ``actual`` against ``expected`` under ``op``'s accuracy class, as the suite computes them."""
    accuracy = accuracy_of(get_spec(op), args)  # a by_call class resolved for this call
    assert accuracy is not None
    length = (accuracy.length_of or elements_per_output)(args, expected)
    scale = None
    if accuracy.kind == "composite":
        scale = (accuracy.scale_of or relative_scale)(args, expected)
    elif accuracy.kind == "reduction":  # M: the reference on the inputs' absolute values, as the suite forms it
        try:
            scale = eager.run(op, "reference", op_args={name: _absolute(value) for name, value in args.items()})
        except AclCoreError:  # the reference refuses those arguments: no M term, as in the suite
            scale = None

    def tolerance(dtype: D) -> Any:
        return lookup(op, dtype, "rocm", accuracy=accuracy, length=length)  # the table where the class is one

    return compare_outputs(actual, expected, tolerance, scale)


def assert_matches_reference(
    rocm: Backend, reference: Backend, op: str, args: dict[str, Any], layout: str, note: str
) -> None:
    """Run ``op`` on both backends (rocm with ``layout``) and fail on any output outside the op's class."""
    expected = eager.run(op, reference, layout="contiguous", **args)
    outs = sentinel_outputs(op, args, expected)
    actual = eager.run(op, rocm, layout=layout, **args, **outs)
    assert actual.keys() == expected.keys()
    for name, value in expected.items():
        got = actual[name]
        pairs = zip(got, value) if isinstance(value, list) else [(got, value)]
        if isinstance(value, list):
            assert isinstance(got, list) and len(got) == len(value), f"{op} [{note}]: {name} has {len(got)} tensors"
        for a, e in pairs:
            assert a.dtype == e.dtype, f"{op} [{note}]: {name} dtype {a.dtype} != {e.dtype}"
            assert a.shape == e.shape, f"{op} [{note}]: {name} shape {a.shape} != {e.shape}"
    problems = class_problems(op, args, actual, expected)
    assert not problems, f"{op} [{note}] layout={layout}: " + "; ".join(p.message for p in problems)


def assert_every_sample_matches(rocm: Backend, reference: Backend, op: str, emulated_stride: int = 3) -> None:
    """``op`` is claimed and every sample matches the reference contiguous, padded and transposed.

    On the CPU emulator (``ACL_ROCM_EMULATE=1``) only every ``emulated_stride``-th sample runs all three
    layouts, the rest contiguous only (the emulator runs a fiber per GPU thread).
    """
    assert op in rocm.capabilities().ops
    emulated = os.environ.get("ACL_ROCM_EMULATE") == "1"
    for i, sample in enumerate(get_spec(op).samples(np.random.default_rng(2026))):  # type: ignore[misc]
        full = not emulated or i % emulated_stride == 0
        for layout in ("contiguous", "padded", "transposed") if full else ("contiguous",):
            assert_matches_reference(rocm, reference, op, dict(sample.args), layout, sample.note)


def assert_errors_match_reference(rocm: Backend, reference: Backend, op: str) -> None:
    """Every error sample of ``op`` is refused by both backends with the code the sample states."""
    spec = get_spec(op)
    assert spec.error_samples is not None
    for case in spec.error_samples(np.random.default_rng(1)):
        codes = []
        for backend in (reference, rocm):
            with pytest.raises(AclCoreError) as err:
                eager.run(op, backend, **case.args)
            codes.append(getattr(err.value, "code", None))
        assert codes[0] == codes[1] == int(case.code), f"{op} [{case.note}]: {codes}"


def compare_run(
    backend: Backend,
    reference: Backend,
    op: str,
    args: dict[str, Any],
    layout: str,
    note: str,
    exact: Any = (),
    prefill: bool = False,
) -> None:
    """One call on ``backend`` (placed in ``layout``) against the reference: same outputs, dtypes and shapes,
    values within ``assert_close`` (bit for bit for the outputs named in ``exact``); with ``prefill`` the
    backend's outputs start as sentinels (another layout's run may have left the result in memory)."""
    from tests.conftest import assert_close

    want = eager.run(op, reference, **args)
    outs = sentinel_outputs(op, args, want) if prefill else {}
    got = eager.run(op, backend, layout=layout, **args, **outs)
    assert got.keys() == want.keys()
    for name, value in want.items():
        where = f"{op} [{note}] layout={layout}: {name}"
        assert got[name].dtype == value.dtype and got[name].shape == value.shape, where
        if name in exact:
            np.testing.assert_array_equal(got[name], value, err_msg=where)
            continue
        try:
            assert_close(got[name], value)
        except AssertionError as exc:
            raise AssertionError(f"{where}\n{exc}") from None


def sample_dtypes(args: dict[str, Any]) -> set[D]:
    """The dtypes a sample names: its arrays' and its ``dtype`` argument's (unless undefined: the input's own)."""
    found = {from_numpy(v.dtype) for v in args.values() if isinstance(v, np.ndarray)}
    if "dtype" in args and D(args["dtype"]) != D.ACL_DT_UNDEFINED:
        found.add(D(args["dtype"]))
    return found

"""Every movement op the rocm backend claims, run on the GPU and compared with the NumPy reference (GPU tier).

Copies must be bit-exact, so results are compared exactly (NaN where NaN), for every sample, with
inputs contiguous, padded (offset and gaps) and transposed; error samples must fail with the
reference's code (out-of-range index values through the device flag, at synchronisation).
"""

from __future__ import annotations

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.dtypes import from_numpy
from acl_core.errors import AclCoreError, AclnnError
from acl_core.spec.ops import all_specs, get_spec
from acl_rocm.ops.movement import OPS

pytestmark = pytest.mark.gpu

MOVEMENT = sorted(n for n, s in all_specs().items() if s.family == "movement" and s.kernel_name in OPS)


def _dtypes(args: dict) -> set[D]:
    found = set()
    for v in args.values():
        for a in v if isinstance(v, list) else [v]:
            if isinstance(a, np.ndarray):
                found.add(from_numpy(a.dtype))
    return found


def _same(note: str, got: object, want: object) -> None:
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), note
        for g, w in zip(got, want):
            _same(note, g, w)
        return
    assert isinstance(got, np.ndarray) and isinstance(want, np.ndarray)
    assert got.dtype == want.dtype and got.shape == want.shape, note
    np.testing.assert_array_equal(got, want, err_msg=note)


@pytest.mark.parametrize("op", MOVEMENT)
def test_matches_reference(rocm: Backend, reference: Backend, op: str) -> None:
    spec = get_spec(op)
    assert spec.samples is not None
    claimed = set(rocm.capabilities().dtypes)
    ran = 0
    for sample in spec.samples(np.random.default_rng(2024)):
        if not _dtypes(sample.args) <= claimed:
            continue
        want = eager.run(op, reference, op_args=sample.args)
        for layout in eager.LAYOUTS:
            got = eager.run(op, rocm, layout=layout, op_args=sample.args, guard=True)
            assert got.keys() == want.keys()
            for name, value in want.items():
                _same(f"{op} [{sample.note}] {layout} {name}", got[name], value)
        ran += 1
    assert ran > 0


@pytest.mark.parametrize("op", MOVEMENT)
def test_error_samples_match_reference_codes(rocm: Backend, reference: Backend, op: str) -> None:
    spec = get_spec(op)
    for case in spec.error_samples(np.random.default_rng(5)) if spec.error_samples else []:
        with pytest.raises(AclCoreError) as want:
            eager.run(op, reference, op_args=case.args)
        with pytest.raises(AclCoreError) as got:
            eager.run(op, rocm, op_args=case.args)
        assert got.value.code == want.value.code, f"{op} [{case.note}]: {got.value.message}"


def test_out_of_range_index_leaves_the_output_untouched(rocm: Backend) -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = eager.to_device(np.full((2, 4), 7.0, np.float32), rocm)
    with pytest.raises(AclnnError) as err:
        eager.run("IndexSelect", rocm, self=x, dim=0, index=np.array([0, 3]), out=out)
    assert err.value.code == 161002
    np.testing.assert_array_equal(out.numpy(), np.full((2, 4), 7.0, np.float32))
    eager.run("IndexSelect", rocm, self=x, dim=0, index=np.array([2, 0]), out=out)
    np.testing.assert_array_equal(out.numpy(), x[[2, 0]])


def test_large_expand_uses_64_bit_indices(rocm: Backend) -> None:
    a = np.arange(3, dtype=np.int8).reshape(3, 1)
    n = (1 << 31) // 3 + 7
    out = eager.run("Expand", rocm, self=a, size=[3, n])["out"]
    assert out.shape == (3, n)
    np.testing.assert_array_equal(out[:, 0], [0, 1, 2])
    np.testing.assert_array_equal(out[:, -1], [0, 1, 2])
    assert int(out.astype(np.int64).sum()) == 3 * n

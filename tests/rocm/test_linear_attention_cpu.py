"""RecurrentGatedDeltaRule above the provider seam, on a CPU: its check and recurrence kernels in the emulator.

Every sample runs contiguous and under the suite's other layouts (padded, transposed: the kernels read
every tensor through its strides) and must agree with the reference under the op's class; every error
sample is refused with the reference's code (device-data rules at synchronisation), and a refused call
leaves stateRef and out as they were. ``tests/rocm/test_gpu_linear_attention.py`` is the GPU tier.
"""

from __future__ import annotations

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.errors import AclnnError
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.linear_attention import rgdr_case
from acl_rocm.kernels.linear_attention import RgdrInstance, rgdr_source
from tests.rocm.against_reference import assert_errors_match_reference, assert_matches_reference

OP = "RecurrentGatedDeltaRule"
SAMPLES = list(get_spec(OP).samples(np.random.default_rng(11)))  # type: ignore[misc]


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.note)
def test_every_sample_matches_the_reference(emulated: Backend, reference: Backend, sample) -> None:  # type: ignore[no-untyped-def]
    assert OP in emulated.capabilities().ops
    for layout in ("contiguous", "padded", "transposed"):
        assert_matches_reference(emulated, reference, OP, sample.args, layout, sample.note)


def test_error_samples_are_refused_like_the_reference(emulated: Backend, reference: Backend) -> None:
    assert_errors_match_reference(emulated, reference, OP)


def test_a_refused_call_writes_nothing(emulated: Backend) -> None:
    args = rgdr_case(np.random.default_rng(4), (2, 1), 1, 2, 16, 8, blocks=5)
    state = eager.to_device(args["stateRef"], emulated)
    out = eager.to_device(np.full((3, 2, 8), 7.0, args["value"].dtype), emulated)
    bad = {**args, "stateRef": state, "out": out, "numAcceptedTokens": np.array([3, 1], np.int32)}
    with pytest.raises(AclnnError) as err:
        eager.run(OP, emulated, op_args=bad)
    assert err.value.code == 161002
    np.testing.assert_array_equal(state.numpy(), args["stateRef"])
    np.testing.assert_array_equal(out.numpy(), np.full((3, 2, 8), 7.0, args["value"].dtype))
    eager.run(OP, emulated, op_args={**bad, "numAcceptedTokens": np.array([2, 1], np.int32)})  # usable again
    assert not np.array_equal(state.numpy(), args["stateRef"])


def test_sources_name_their_kernels() -> None:
    inst = RgdrInstance(128)
    step, check = rgdr_source(inst, "step"), rgdr_source(inst, "check")
    assert f"{inst.step_name}(" in step and "#define DK 128" in step and "ACL_SHFL_XOR" in step
    assert f"{inst.check_name}(" in check and "*flag = 1" in check
    assert RgdrInstance(64).step_name != inst.step_name

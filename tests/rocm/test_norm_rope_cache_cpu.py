"""QkvRmsNormRopeCache above the provider seam, on the CPU.

The generated kernel runs in the g++ kernel emulator on host memory: every sample against the reference
under the op's class (integer caches exactly), contiguous and transposed (the element-by-element path),
under every ``ACL_QKV_ROPE_CONFIG`` choice; every error sample with the reference's code; a slot only the
device sees is refused at synchronisation and leaves the caches as they were, inline and through the
Check launch of a long index; the call is one launch for a short index.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.errors import AclCoreError, AclnnError
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.norm_rope_cache import case
from acl_rocm.backend import RocmBackend
from acl_rocm.ops import norm_rope_cache as ops
from acl_rocm.ops import program
from tests.rocm.against_reference import assert_matches_reference

OP = "QkvRmsNormRopeCache"


@pytest.fixture
def forced(emulated: RocmBackend) -> Iterator[ops.NormRopeCacheRunner]:
    runner = emulated.norm_rope_cache  # type: ignore[attr-defined]
    yield runner
    runner.forced = None


def test_the_op_is_claimed(emulated: RocmBackend) -> None:
    assert OP in emulated.capabilities().ops


def test_every_sample_matches_the_reference_when_emulated(emulated: RocmBackend, reference: Backend) -> None:
    spec = get_spec(OP)
    assert spec.samples is not None
    for sample in spec.samples(np.random.default_rng(2024)):
        for layout in ("contiguous", "transposed"):
            assert_matches_reference(emulated, reference, OP, dict(sample.args), layout, sample.note)


@pytest.mark.parametrize("config", ops.CONFIGS)
def test_every_config_matches_the_reference(
    emulated: RocmBackend, reference: Backend, forced: ops.NormRopeCacheRunner, config: str
) -> None:
    forced.forced = config
    rng = np.random.default_rng(9)
    for args, note in (
        (case(rng, D.ACL_BF16, 3, 1, (4, 2, 2), pad=1), "bf16 16-bit caches"),
        (case(rng, D.ACL_FLOAT16, 2, 2, (2, 1, 1), block_size=32, k_int8=True, v_int8=True, asym=True), "int8"),
        (case(rng, D.ACL_BF16, 3, 1, (2, 1, 1), block_size=3, k_int8=True, mode="PA_BNSD"), "ND int8 k"),
    ):
        for layout in ("contiguous", "transposed"):
            assert_matches_reference(emulated, reference, OP, args, layout, f"{config} {note}")


def test_a_bad_config_is_refused(emulated: RocmBackend, forced: ops.NormRopeCacheRunner) -> None:
    forced.forced = "g64"
    with pytest.raises(AclnnError) as err:
        eager.run(OP, emulated, **case(np.random.default_rng(1), D.ACL_FLOAT16, 1, 1, (1, 1, 1)))
    assert err.value.code == 161002 and ops.CONFIG_ENV in str(err.value)


def test_error_samples_give_the_reference_codes(emulated: RocmBackend, reference: Backend) -> None:
    spec = get_spec(OP)
    assert spec.error_samples is not None
    for sample in spec.error_samples(np.random.default_rng(1)):
        codes = []
        for backend in (reference, emulated):
            with pytest.raises(AclCoreError) as err:
                eager.run(OP, backend, **sample.args)
            codes.append(getattr(err.value, "code", None))
        assert codes == [sample.code, sample.code], f"[{sample.note}]: {codes}"


@pytest.mark.parametrize("tokens", [3, 300])  # inline check / a Check launch first
def test_a_refused_slot_leaves_the_caches_as_they_were(emulated: RocmBackend, tokens: int) -> None:
    rng = np.random.default_rng(4)
    args = case(rng, D.ACL_FLOAT16, 1, tokens, (1, 1, 1), pad=0)
    slots = args["kCache"].shape[0] * args["kCache"].shape[2]
    args["index"][tokens // 2] = slots
    kc, vc = args.pop("kCache"), args.pop("vCache")
    caches = [eager.to_device(c, emulated) for c in (kc, vc)]
    with pytest.raises(AclnnError) as err:
        eager.run(OP, emulated, kCache=caches[0], vCache=caches[1], **args)
    assert err.value.code == 161002 and "index" in str(err.value)
    np.testing.assert_array_equal(caches[0].numpy(), kc)
    np.testing.assert_array_equal(caches[1].numpy(), vc)


def test_a_long_index_is_checked_then_written(emulated: RocmBackend, reference: Backend) -> None:
    args = case(np.random.default_rng(8), D.ACL_BF16, 2, 150, (1, 1, 1), pad=5)
    assert_matches_reference(emulated, reference, OP, args, "contiguous", "300 tokens: a Check launch first")


@pytest.mark.parametrize(("tokens", "launches"), [(8, 1), (300, 2)])
def test_launches_per_call(emulated: RocmBackend, monkeypatch: pytest.MonkeyPatch, tokens: int, launches: int) -> None:
    """A decode step (a short index) is one launch; a long index adds its Check launch."""
    args = case(np.random.default_rng(3), D.ACL_BF16, tokens, 1, (2, 1, 1), pad=0)
    seen: list[int] = []
    original = program.run_program

    def counting(backend: Any, prog: program.Program, stream: Any) -> None:
        seen.append(len(prog.steps))
        original(backend, prog, stream)

    monkeypatch.setattr(program, "run_program", counting)
    eager.run(OP, emulated, **args)
    assert seen == [launches]

"""QkvRmsNormRopeCache on the GPU, against the reference (GPU tier).

Cases: the spec's own samples (fp16 / bf16, 16-bit and INT8 caches, symmetric and asymmetric, padding and
shuffled slots, several blocks, a long index checked by its own launch) in every layout for the first and
contiguous for the rest; Qwen3-0.6B's decode step (Nq 16, Nk = Nv 8, D 128, bf16, batch 1 and 8) under every
``ACL_QKV_ROPE_CONFIG`` choice, with 16-bit and INT8 caches, PA_NZ and ND (PA_BNSD); a prefill of 256 tokens;
every error sample with the reference's code; a device-only index error reported at synchronisation with the
caches left as they were; the decode call captured and replayed bit for bit. ``ACL_ROCM_EMULATE=1`` runs it on the CPU.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import acl_core
from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.errors import AclnnError
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.norm_rope_cache import case
from acl_rocm.ops import norm_rope_cache as ops
from tests.ops.test_norm_rope_cache import c_shaped
from tests.rocm.against_reference import assert_errors_match_reference, assert_matches_reference
from tests.rocm.capture_harness import OpCall, compare_replay

pytestmark = pytest.mark.gpu

OP = "QkvRmsNormRopeCache"
QWEN3 = (16, 8, 8)


@pytest.fixture
def runner(rocm: Backend) -> Iterator[ops.NormRopeCacheRunner]:
    r = rocm.norm_rope_cache  # type: ignore[attr-defined]
    yield r
    r.forced = None


def test_the_op_is_claimed(rocm: Backend) -> None:
    assert OP in rocm.capabilities().ops


def test_samples_match_reference(rocm: Backend, reference: Backend) -> None:
    spec = get_spec(OP)
    assert spec.samples is not None
    for i, sample in enumerate(spec.samples(np.random.default_rng(2024))):
        for layout in eager.LAYOUTS[:4] if i == 0 else ("contiguous",):
            assert_matches_reference(rocm, reference, OP, dict(sample.args), layout, sample.note)


@pytest.mark.parametrize("config", ops.CONFIGS)
@pytest.mark.parametrize("batch", [1, 8])
@pytest.mark.parametrize("int8", [False, True])
@pytest.mark.parametrize("mode", ["PA_NZ", "PA_BNSD"])
def test_qwen3_decode(
    rocm: Backend, reference: Backend, runner: ops.NormRopeCacheRunner, config: str, batch: int, int8: bool, mode: str
) -> None:
    runner.forced = config
    rng = np.random.default_rng(batch)
    size = 32 if int8 else 16
    args = case(
        rng, D.ACL_BF16, batch, 1, QWEN3, block_size=size, blocks=batch + 3, k_int8=int8, v_int8=int8, mode=mode
    )
    assert_matches_reference(rocm, reference, OP, args, "contiguous", f"Qwen3 decode batch {batch} {config} {mode}")


def test_prefill(rocm: Backend, reference: Backend) -> None:
    args = case(np.random.default_rng(3), D.ACL_BF16, 2, 128, QWEN3, block_size=128, blocks=3, pad=2)
    assert_matches_reference(rocm, reference, OP, args, "contiguous", "prefill of 256 tokens (Check launch first)")


def test_error_samples_match_reference_codes(rocm: Backend, reference: Backend) -> None:
    assert_errors_match_reference(rocm, reference, OP)


def test_a_refused_slot_leaves_the_caches_as_they_were(rocm: Backend) -> None:
    args = case(np.random.default_rng(4), D.ACL_BF16, 8, 1, QWEN3, blocks=9, pad=0)
    args["index"][5] = -7
    kc, vc = args.pop("kCache"), args.pop("vCache")
    caches = [eager.to_device(c, rocm) for c in (kc, vc)]
    with pytest.raises(AclnnError) as err:
        eager.run(OP, rocm, kCache=caches[0], vCache=caches[1], **args)
    assert err.value.code == 161002
    np.testing.assert_array_equal(caches[0].numpy().view(np.uint16), kc.view(np.uint16))
    np.testing.assert_array_equal(caches[1].numpy().view(np.uint16), vc.view(np.uint16))


def test_decode_replays_bit_for_bit(rocm: Backend) -> None:
    args = case(np.random.default_rng(5), D.ACL_BF16, 8, 1, QWEN3, blocks=9)
    call = OpCall(rocm, OP, args)
    stream = rocm.runtime.create_stream()
    try:
        graph = compare_replay([call], stream)
        rocm.driver.graph_destroy(graph)  # type: ignore[attr-defined]
    finally:
        call.free()
        rocm.runtime.destroy_stream(stream)


def test_the_c_front_end_leaves_null_before_quant_outputs_alone(
    rocm: Backend, rocm_under_test: str, reference: Backend
) -> None:
    """Null BeforeQuant outputs: the caches and qOut as with them (the kernel skips the null pointers)."""
    acl_core.use_backend(rocm_under_test)  # the front end's process backend (the fixture resets it after)
    args = case(np.random.default_rng(12), D.ACL_BF16, 8, 1, QWEN3, blocks=9, k_int8=False, v_int8=False)
    with_outputs = c_shaped(rocm, args, True)
    without = c_shaped(rocm, args, False)
    for name in ("qOut", "kCache", "vCache"):
        np.testing.assert_array_equal(without[name].view(np.uint16), with_outputs[name].view(np.uint16), err_msg=name)
    want = eager.run(OP, reference, **args)
    assert set(with_outputs) == {"qOut", "kCache", "vCache", "qOutBeforeQuant", "kOutBeforeQuant", "vOutBeforeQuant"}
    v_rows = with_outputs["vOutBeforeQuant"].view(np.uint16)
    np.testing.assert_array_equal(v_rows, want["vOutBeforeQuant"].view(np.uint16))

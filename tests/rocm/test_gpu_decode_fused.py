"""The decode kernel's ACL_DECODE_CONFIG choices (GPU tier): one launch (fused), split policies, tiles, eager K/V.

Each choice against the reference (a decode mask over the cache tail, lse, a sink); the fused kernel's output
bit for bit equal to the two-kernel path's under the same split policy (the same combine arithmetic); the
fused kernel captured and replayed (its counters go back to zero, so every replay combines again); and one
launch per call. ``use_config`` sets the choice on the backend under test (the environment is not read).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from tests.conftest import assert_close
from tests.rocm.decode_cases import decode_args, fia_v5_args, run_decode, split_count

pytestmark = pytest.mark.gpu

EMULATED = os.environ.get("ACL_ROCM_EMULATE") == "1"
CONFIGS = (
    "two",
    "fused",
    "fused,eager,kpw=16",
    "fused,chunk=8,kpw=4,bpu=8",
    "two,eager,bpu=1",
    "fused,dbuf",
    "two,dbuf,kpw=4,chunk=16",
)
"""Today's path, the one-launch path, and split policies / tiles the bench times (each must be right)."""


@pytest.mark.parametrize("config", CONFIGS)
def test_each_config_matches_the_reference(rocm: Backend, reference: Backend, decode: object, config: str) -> None:
    """A Qwen3-like call (16/8 heads over the whole capacity, the unwritten tail masked), then FIA with lse."""
    decode.use_config(config)  # type: ignore[attr-defined]
    rng = np.random.default_rng(17)
    skv = 150 if EMULATED else 32_768
    d = 32 if EMULATED else 128
    nq, nkv = (4, 2) if EMULATED else (16, 8)
    assert split_count(rocm, config, 2, nkv, skv) > 1, "the cache must take several splits"
    args = decode_args(rng, "bfloat16", 2, nq, nkv, skv, d)
    filled = np.array([skv // 2 + 5, skv])
    args["attenMask"] = (np.arange(skv)[None, :] >= filled[:, None])[:, None, None, :]
    expected = eager.run("IncreFlashAttention", reference, **args)
    got = eager.run("IncreFlashAttention", rocm, **args)
    assert rocm.attention.last_path == "decode"  # type: ignore[attr-defined]
    assert_close(got["attentionOut"], expected["attentionOut"], atol=1.6e-2, rtol=1.6e-2)
    fia = fia_v5_args(rng, args, nq, nkv, rng.uniform(size=(2, skv)) < 0.25)
    fia["attenMaskOptional"][1] = True  # batch 1 keeps no key: the sink alone
    expected = eager.run("FusedInferAttentionScoreV5", reference, **fia)
    got = eager.run("FusedInferAttentionScoreV5", rocm, **fia)
    for name, value in expected.items():
        assert_close(got[name], value, atol=2e-3 if name == "attentionOut" else 1e-4, rtol=2e-3)


@pytest.mark.parametrize("policy", ["", "chunk=8,kpw=4", "eager,kpw=16", "dbuf"])
def test_fused_is_bit_identical_to_two_kernels(rocm: Backend, decode: object, policy: str) -> None:
    """Same splits, same partials, same combine code: the one launch writes the very bits the two launches do."""
    rng = np.random.default_rng(23)
    skv = 130 if EMULATED else 8192
    args = decode_args(rng, "float16", 3, 8, 2, skv, 64)
    args["attenMask"] = rng.uniform(size=(3, 1, 1, skv)) < 0.1
    args["actualSeqLengths"] = [skv, skv - 41, 1]
    outs = []
    for path in ("two", "fused"):
        decode.use_config(f"{path},{policy}")  # type: ignore[attr-defined]
        outs.append(eager.run("IncreFlashAttention", rocm, **args)["attentionOut"])
    assert split_count(rocm, f"two,{policy}", 3, 2, skv) > 1
    assert np.array_equal(outs[0].view(np.uint16), outs[1].view(np.uint16)), "fused differs from split + combine"


def test_fused_is_one_launch(rocm: Backend, decode: object) -> None:
    """The fused plan has one step and no per-run temporary; the two-kernel plan two steps and its temporary."""
    rng = np.random.default_rng(5)
    call = run_decode(rocm, "IncreFlashAttention", decode_args(rng, "bfloat16", 1, 16, 8, 96, 128))[1]
    for path, steps in (("two", 2), ("fused", 1)):
        decode.use_config(path)  # type: ignore[attr-defined]
        prog = decode.plan(call)  # type: ignore[attr-defined]
        assert decode.splits(call)[0] > 1  # type: ignore[attr-defined]
        assert len(prog.steps) == steps, path
        assert (prog.scratch > 0, bool(prog.temps)) == ((True, False) if path == "fused" else (False, True))


@pytest.mark.parametrize("config", ["fused", "fused,eager,chunk=16", "fused,dbuf,bpu=8"])
def test_fused_captures_and_replays(rocm: Backend, decode: object, config: str) -> None:
    """Captured once, replayed with the mask changed: each replay combines (its counters were left at zero)."""
    from tests.rocm.capture_harness import replays_like_eager

    if not rocm.capabilities().stream_capture:
        pytest.fail(f"rocm does not capture here: {rocm.capabilities().notes.get('stream_capture')}")
    decode.use_config(config)  # type: ignore[attr-defined]
    rng = np.random.default_rng(29)
    skv = 130 if EMULATED else 4096
    args = decode_args(rng, "bfloat16", 2, 4, 2, skv, 64)
    args["attenMask"] = np.arange(skv)[None, :] >= np.array([[skv // 3], [skv - 1]])
    replays_like_eager(rocm, "IncreFlashAttention", args)


def test_fused_on_two_streams(rocm: Backend, reference: Backend, decode: object) -> None:
    """The same plans enqueued on two streams at once: each stream has its own scratch (partials, counters).

    The same call runs on both streams with nothing ordering them (equal inputs: the racing output writes
    agree), so a shared counter or partial would show as a wrong result on the GPU.
    """
    from tests.rocm.capture_harness import OpCall

    decode.use_config("fused")  # type: ignore[attr-defined]
    rt = rocm.runtime  # type: ignore[attr-defined]
    rng = np.random.default_rng(31)
    skv = 120 if EMULATED else 8192
    calls = [OpCall(rocm, "IncreFlashAttention", decode_args(rng, "bfloat16", 1, 4, 2, skv, 64)) for _ in range(2)]
    streams = [rt.create_stream(), rt.create_stream()]
    try:
        for c in calls:
            c.fill(0)
        for _ in range(3):
            for i, c in enumerate(calls):
                c.enqueue(c.prepare(), streams[i % 2])  # one signature: one plan, on either stream
                c.enqueue(c.prepare(), streams[(i + 1) % 2])
        for s in streams:
            rt.synchronize_stream(s)
        for c in calls:
            expected = eager.run("IncreFlashAttention", reference, **c.kwargs)
            assert_close(c.outputs()["attentionOut[0]"], expected["attentionOut"], atol=1.6e-2, rtol=1.6e-2)
    finally:
        for c in calls:
            c.free()
        for s in streams:
            rt.destroy_stream(s)

"""The short-cache decode kernel (ACL_DECODE_CONFIG block / auto, GPU tier): one launch, a block per (batch, kv head).

Against the reference in the operator's accuracy class (the tolerances of test_gpu_decode_attention.py: its
rows are combined in another order than the split path's, so it is not bit-identical to it): dtypes, head dims
64/128/256 (and one that is not a whole 16-byte vector), GQA groups 1-8, per-head and broadcast masks, actual
lengths, lse and a sink; each block / tile / eager choice; ``auto`` picks the block kernel up to its threshold
and the split path past it; a group the kernel does not cover falls back to the split path with a log line;
captured and replayed with the mask changed. ``use_config`` sets the choice on the backend under test.
"""

from __future__ import annotations

import logging
import os

import ml_dtypes
import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_tools.bench.decode import SHORT_CONFIGS
from tests.rocm.decode_cases import assert_outputs_close, decode_args, fia_v5_args, run_decode, split_count

pytestmark = pytest.mark.gpu

EMULATED = os.environ.get("ACL_ROCM_EMULATE") == "1"
BLOCK_CONFIGS = (
    "block",
    "block,bthreads=128,brows=2",
    "block,beager=0",
    "block,bthreads=512,brows=4",
    "block,bthreads=64,brows=16,beager=0",
    "block,bheads=1",
)
"""The block kernel's choices the bench times (each must be right)."""


def _steps(decode: object, rocm: Backend, args: dict) -> int:
    """Launches in the plan of ``args``'s call under the configuration in force."""
    prog = decode.plan(run_decode(rocm, "IncreFlashAttention", args)[1])  # type: ignore[attr-defined]
    return len(prog.steps)


def _check(rocm: Backend, reference: Backend, op: str, args: dict, note: str) -> None:
    expected = eager.run(op, reference, **args)
    got = eager.run(op, rocm, **args)
    assert rocm.attention.last_path == "decode", note  # type: ignore[attr-defined]
    assert_outputs_close(got, expected, str(np.dtype(args["query"].dtype)), note)


SHAPES = (
    [("bfloat16", 64, 2, 4), ("float16", 32, 1, 2), ("bfloat16", 40, 4, 4), ("float16", 64, 8, 8)]
    if EMULATED
    else [(dt, d, g, 8) for dt in ("float16", "bfloat16") for d in (64, 128, 256) for g in (1, 2, 4, 8)]
)
"""(dtype, head dim, GQA group, kv heads); D 40 is no whole 16-byte vector a lane (scalar loads, idle lanes)."""


@pytest.mark.parametrize(("dtype", "d", "group", "nkv"), SHAPES)
def test_block_kernel_matches_the_reference(
    rocm: Backend, reference: Backend, decode: object, dtype: str, d: int, group: int, nkv: int
) -> None:
    """IFA with per-batch lengths and a per-head mask over the unwritten tail, then FIA V5 with lse and a sink."""
    decode.use_config("block")  # type: ignore[attr-defined]
    rng = np.random.default_rng(d * 10 + group)
    skv = 37 if EMULATED else 128
    b = 2
    args = decode_args(rng, dtype, b, nkv * group, nkv, skv, d)
    args["actualSeqLengths"] = [skv, skv - 11]
    mask = rng.uniform(size=(b, nkv * group, 1, skv)) < 0.2
    mask[0, 0] = True  # a head that keeps no key: zeros, lse +inf
    args["attenMask"] = mask
    _check(rocm, reference, "IncreFlashAttention", args, f"IFA block {dtype} D{d} G{group}")
    assert _steps(decode, rocm, args) == 1
    fia = {
        "query": args["query"],
        "key": args["key"],
        "value": args["value"],
        "attenMaskOptional": rng.uniform(size=(b, skv)) < 0.25,  # broadcast over the heads
        "numHeads": nkv * group,
        "scaleValue": args["scaleValue"],
        "inputLayout": "BSND",
        "numKeyValueHeads": nkv,
        "softmaxLseFlag": True,
        "learnableSinkOptional": rng.uniform(-2, 2, nkv * group).astype(ml_dtypes.bfloat16),
    }
    fia["attenMaskOptional"][1] = True  # batch 1 keeps no key: the sink alone
    _check(rocm, reference, "FusedInferAttentionScoreV5", fia, f"FIA V5 block {dtype} D{d} G{group}")
    plain = {k: v for k, v in fia.items() if k not in ("learnableSinkOptional", "attenMaskOptional")}
    plain["attenMask"] = fia["attenMaskOptional"]
    _check(rocm, reference, "FusedInferAttentionScore", plain, f"FIA lse block {dtype} D{d} G{group}")


@pytest.mark.parametrize("config", BLOCK_CONFIGS)
def test_each_block_choice_matches_the_reference(
    rocm: Backend, reference: Backend, decode: object, config: str
) -> None:
    """A Qwen3-like call (16/8 heads, the whole capacity under a mask hiding its tail) under each choice."""
    decode.use_config(config)  # type: ignore[attr-defined]
    rng = np.random.default_rng(41)
    skv, d, nq, nkv = (70, 64, 4, 2) if EMULATED else (1024, 128, 16, 8)
    args = decode_args(rng, "bfloat16", 2, nq, nkv, skv, d, layout="BNSD")
    filled = np.array([skv // 2 + 5, skv])
    args["attenMask"] = (np.arange(skv)[None, :] >= filled[:, None])[:, None, None, :]
    _check(rocm, reference, "IncreFlashAttention", args, config)
    assert _steps(decode, rocm, args) == 1


def test_auto_takes_the_block_kernel_up_to_its_threshold(rocm: Backend, reference: Backend, decode: object) -> None:
    """``auto=N``: N keys in one launch of the block kernel, N + 1 on the split path (split + combine)."""
    from acl_rocm.kernels.attention_decode import decode_splits

    n = 64 if EMULATED else 2048
    decode.use_config(f"auto={n}")  # type: ignore[attr-defined]
    rng = np.random.default_rng(43)
    for skv, steps in ((n, 1), (n + 1, 2)):
        args = decode_args(rng, "bfloat16", 1, 4, 2, skv, 64)
        _check(rocm, reference, "IncreFlashAttention", args, f"auto={n} Skv {skv}")
        assert decode_splits(1, 2, skv, rocm.properties.compute_units)[0] > 1  # type: ignore[attr-defined]
        assert _steps(decode, rocm, args) == steps, skv


def test_a_group_the_block_kernel_does_not_cover_takes_the_split_path(
    rocm: Backend, reference: Backend, decode: object, caplog: pytest.LogCaptureFixture
) -> None:
    """GQA group 16 (128 query values a lane): the split path, and the debug log says why."""
    decode.use_config("block")  # type: ignore[attr-defined]
    args = decode_args(np.random.default_rng(47), "float16", 1, 16, 1, 40, 32)
    with caplog.at_level(logging.DEBUG, logger="acl_rocm.attention"):
        _check(rocm, reference, "IncreFlashAttention", args, "group 16")
    assert "not the short-cache block kernel (GQA group 16" in caplog.text
    assert "splits of" in caplog.text


def test_block_kernel_captures_and_replays_with_a_changed_mask(rocm: Backend, decode: object) -> None:
    """The one launch captured once; each replay reads the mask on the device, so it equals its eager run."""
    from tests.rocm.capture_harness import replays_like_eager

    if not rocm.capabilities().stream_capture:
        pytest.fail(f"rocm does not capture here: {rocm.capabilities().notes.get('stream_capture')}")
    decode.use_config("auto")  # type: ignore[attr-defined]
    rng = np.random.default_rng(53)
    skv = 50 if EMULATED else 128
    args = decode_args(rng, "bfloat16", 2, 4, 2, skv, 64)
    args["attenMask"] = np.arange(skv)[None, :] >= np.array([[skv // 3], [skv - 1]])
    assert _steps(decode, rocm, args) == 1
    replays_like_eager(rocm, "IncreFlashAttention", args)


@pytest.mark.parametrize(
    "config", ["two,wide", "two,wide,bthreads=128,brows=4,beager=0", "two,wide,chunk=8,bpu=8", "two,wide,bheads=1"]
)
def test_wide_split_blocks_match_the_reference(rocm: Backend, reference: Backend, decode: object, config: str) -> None:
    """``two,wide``: the split path's blocks in the short-cache layout, partials to the combine kernel (2 launches)."""
    decode.use_config(config)  # type: ignore[attr-defined]
    rng = np.random.default_rng(59)
    skv, d, nq, nkv = (150, 64, 4, 2) if EMULATED else (32_768, 128, 16, 8)
    assert split_count(rocm, config, 2, nkv, skv) > 1
    args = decode_args(rng, "bfloat16", 2, nq, nkv, skv, d)
    args["actualSeqLengths"] = [skv, skv // 2 + 3]
    args["attenMask"] = rng.uniform(size=(2, nq, 1, skv)) < 0.3
    _check(rocm, reference, "IncreFlashAttention", args, config)
    assert _steps(decode, rocm, args) == 2
    fia = fia_v5_args(rng, args, nq, nkv, rng.uniform(size=(2, skv)) < 0.25)
    fia["attenMaskOptional"][1] = True  # batch 1 keeps no key: the sink alone
    _check(rocm, reference, "FusedInferAttentionScoreV5", fia, f"{config} FIA V5")


PDL_CONFIGS = ("block,bpdl", "block,bpdl,bheads=0", "block,bpdl,bthreads=128,beager=0")
"""``bpdl``: the launch programmatic, with one query head a block, the whole GQA group, the mask-first loads."""


@pytest.mark.parametrize("config", PDL_CONFIGS)
def test_pdl_blocks_in_one_launch(rocm: Backend, reference: Backend, decode: object, config: str) -> None:
    """``bpdl``: the Qwen3 decode shape (the capacity under a per-head mask hiding the unwritten tail, uneven
    actual lengths, a head that keeps no key), IFA then FIA V5 with lse and a sink, one launch, run twice."""
    decode.use_config(config)  # type: ignore[attr-defined]
    rng = np.random.default_rng(67)
    skv, d, nq, nkv = (70, 64, 4, 2) if EMULATED else (128, 128, 16, 8)
    b = 2
    args = decode_args(rng, "bfloat16", b, nq, nkv, skv, d, layout="BNSD")
    args["actualSeqLengths"] = [skv, skv - 9]
    filled = np.array([skv * 3 // 4, skv // 2 - 3])
    mask = np.broadcast_to((np.arange(skv)[None, :] >= filled[:, None])[:, None, None, :], (b, nq, 1, skv)).copy()
    mask |= rng.uniform(size=mask.shape) < 0.1
    mask[1, 0] = True  # a head that keeps no key: zeros, lse +inf
    args["attenMask"] = mask
    for rerun in range(2):
        _check(rocm, reference, "IncreFlashAttention", args, f"{config} run {rerun}")
    assert _steps(decode, rocm, args) == 1
    fia = fia_v5_args(rng, args, nq, nkv, mask, "BNSD")
    for rerun in range(2):
        _check(rocm, reference, "FusedInferAttentionScoreV5", fia, f"{config} FIA V5 run {rerun}")


@pytest.mark.parametrize("config", ["auto", *SHORT_CONFIGS])
def test_each_benched_short_decode_config_matches_the_reference(
    rocm: Backend, reference: Backend, decode: object, config: str
) -> None:
    """Each ``ACL_DECODE_CONFIG`` setting the short-decode rows time (tools/bench/decode.py's SHORT_CONFIGS, beside
    the default) at their shape: FIA BSND, batch 1 and 8, 16/8 heads, D 128, 96 of 128 keys under a [B,1,1,C]
    mask (a smaller case on the emulator), in one launch."""
    decode.use_config(config)  # type: ignore[attr-defined]
    rng = np.random.default_rng(79)
    (cap, filled), d, nq, nkv = ((48, 37), 64, 4, 2) if EMULATED else ((128, 96), 128, 16, 8)
    for b in (1, 2) if EMULATED else (1, 8):
        args = decode_args(rng, "bfloat16", b, nq, nkv, cap, d)
        fia = {k: v for k, v in args.items() if k not in ("key", "value")}
        fia |= {"key": args["key"], "value": args["value"]}
        fia["attenMask"] = np.broadcast_to(np.arange(cap) >= filled, (b, 1, 1, cap)).copy()
        _check(rocm, reference, "FusedInferAttentionScore", fia, f"{config} B{b}")
        assert _steps(decode, rocm, args) == 1


@pytest.mark.parametrize("config", ["auto", "auto,bpdl"])
def test_short_decode_capture_and_replay_with_a_changed_mask(rocm: Backend, decode: object, config: str) -> None:
    """The short-cache kernel captured once, plainly and under ``bpdl`` (the programmatic launch captured into the
    graph on sm_90+), replays like its eager run."""
    from tests.rocm.capture_harness import replays_like_eager

    if not rocm.capabilities().stream_capture:
        pytest.fail(f"rocm does not capture here: {rocm.capabilities().notes.get('stream_capture')}")
    decode.use_config(config)  # type: ignore[attr-defined]
    rng = np.random.default_rng(73)
    skv = 50 if EMULATED else 128
    args = decode_args(rng, "bfloat16", 2, 4, 2, skv, 64)
    args["attenMask"] = np.arange(skv)[None, :] >= np.array([[skv // 3], [skv - 1]])
    assert _steps(decode, rocm, args) == 1
    replays_like_eager(rocm, "IncreFlashAttention", args)


@pytest.mark.parametrize("bheads", [1, 2, 8])
def test_blocks_sharing_a_kv_head(rocm: Backend, reference: Backend, decode: object, bheads: int) -> None:
    """``bheads=N``: N of a kv head's query heads a block (group 4: 4 or 2 blocks a kv head; 8 is the whole group)."""
    decode.use_config(f"block,bheads={bheads}")  # type: ignore[attr-defined]
    rng = np.random.default_rng(61 + bheads)
    skv, d = (45, 32) if EMULATED else (128, 128)
    args = decode_args(rng, "float16", 2, 8, 2, skv, d)
    args["actualSeqLengths"] = [skv - 7, skv]
    args["attenMask"] = rng.uniform(size=(2, 8, 1, skv)) < 0.3
    _check(rocm, reference, "IncreFlashAttention", args, f"bheads={bheads}")
    assert _steps(decode, rocm, args) == 1
    fia = {
        "query": args["query"],
        "key": args["key"],
        "value": args["value"],
        "attenMask": rng.uniform(size=(2, skv)) < 0.25,
        "numHeads": 8,
        "scaleValue": args["scaleValue"],
        "inputLayout": "BSND",
        "numKeyValueHeads": 2,
        "softmaxLseFlag": True,
    }
    _check(rocm, reference, "FusedInferAttentionScore", fia, f"bheads={bheads} lse")


@pytest.mark.parametrize("config", ["two", "two,wide", "two,bpu=8", "two,wide,bpu=8", "two,kpw=16"])
def test_each_benched_decode_config_matches_the_reference(
    rocm: Backend, reference: Backend, decode: object, config: str
) -> None:
    """Each ``ACL_DECODE_CONFIG`` setting the decode bench times as its own row (tools/bench/decode.py's
    DECODE_CONFIGS, beside the default two-kernel path) at the bench's shape: batch 1, GQA 16/8, D 128, 32k keys
    (a smaller cache on the emulator), uneven actual length."""
    from acl_tools.bench.decode import DECODE_CONFIGS

    assert config == "two" or config in DECODE_CONFIGS
    decode.use_config(config)  # type: ignore[attr-defined]
    rng = np.random.default_rng(61)
    skv, d, nq, nkv = (300, 64, 4, 2) if EMULATED else (32_768, 128, 16, 8)
    args = decode_args(rng, "bfloat16", 1, nq, nkv, skv, d)
    args["actualSeqLengths"] = [skv - 5]
    _check(rocm, reference, "IncreFlashAttention", args, config)

"""The pipelined split decode kernel (``ACL_DECODE_CONFIG=...,pipe``: K / V tiles staged by cp.async) (GPU tier).

Each pipe setting against the reference on a Qwen3-like call (the unwritten cache tail masked) and on FIA with
lse and a sink; every dtype x head dim x GQA ratio it covers over lengths that cross tiles and splits, with
per-batch actual lengths; BSH / BNSD views; calls it does not cover (a head dim that is not a multiple of 64, a
GQA group too large for its registers) routed to the register-tile split kernel and still right; and a captured
call replayed with its mask changed. ``use_config`` sets the choice on the backend under test.
"""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_rocm.kernels.attention_decode import decode_splits
from tests.rocm.decode_cases import assert_outputs_close, decode_args, fia_v5_args, run_decode, split_count

pytestmark = pytest.mark.gpu

EMULATED = os.environ.get("ACL_ROCM_EMULATE") == "1"
CONFIGS = ("two,pipe", "two,pipe=2,pkeys=32", "two,pipe,pbpu=4", "fused,pipe,pbpu=8", "two,pipe=8,chunk=16")
"""The decode bench's pipe rows (tools/bench/decode.py's PIPE_CONFIGS), the one-launch ending with more splits, and
more stages than fit (clamped to what fits: 5 at D 128, 4 at D 64) over chunks of one stage."""


def _run(rocm: Backend, decode: object, op: str, args: dict) -> tuple[dict, int]:
    """``op`` on rocm, and the pipeline stages its decode call took (0: the register-tile split kernel)."""
    got, call = run_decode(rocm, op, args)
    stages = decode.pipe_stages(call)  # type: ignore[attr-defined]
    line = decode.describe(call)  # type: ignore[attr-defined]
    assert (f"pipelined ({stages} cp.async stages" in line) == (stages > 0), line
    return got, stages


def _check(rocm: Backend, reference: Backend, decode: object, op: str, args: dict, note: str) -> int:
    expected = eager.run(op, reference, **args)
    got, stages = _run(rocm, decode, op, args)
    assert_outputs_close(got, expected, str(np.dtype(args["query"].dtype)), note)
    return stages


def test_every_benched_pipe_row_is_tested_here() -> None:
    """Each pipe setting the decode bench times as a row is one of :data:`CONFIGS` (checked at the bench's shape)."""
    from acl_tools.bench.decode import DECODE_CONFIGS

    benched = {c for c in DECODE_CONFIGS if "pipe" in c}
    assert benched and benched <= set(CONFIGS)


@pytest.mark.parametrize("config", CONFIGS)
def test_each_pipe_config_matches_the_reference(rocm: Backend, reference: Backend, decode: object, config: str) -> None:
    """A Qwen3-like call (16/8 heads, the unwritten tail masked), then FIA V5 with lse, a sink and a random mask."""
    decode.use_config(config)  # type: ignore[attr-defined]
    rng = np.random.default_rng(31)
    skv = 150 if EMULATED else 32_768
    d = 64 if EMULATED else 128
    nq, nkv = (4, 2) if EMULATED else (16, 8)
    assert split_count(rocm, config, 2, nkv, skv) > 1, "the cache must take several splits"
    args = decode_args(rng, "bfloat16", 2, nq, nkv, skv, d)
    filled = np.array([skv // 2 + 5, skv])
    args["attenMask"] = (np.arange(skv)[None, :] >= filled[:, None])[:, None, None, :]
    assert _check(rocm, reference, decode, "IncreFlashAttention", args, config) >= 2, "not the pipelined kernel"
    fia = fia_v5_args(rng, args, nq, nkv, rng.uniform(size=(2, skv)) < 0.25)
    fia["attenMaskOptional"][1] = True  # batch 1 keeps no key: the sink alone
    assert _check(rocm, reference, decode, "FusedInferAttentionScoreV5", fia, f"{config} FIA") >= 2


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("ratio", [1, 2, 4])
def test_pipe_kernel_matches_reference(
    rocm: Backend, reference: Backend, decode: object, dtype: str, d: int, ratio: int
) -> None:
    """Per-batch lengths that end inside a tile and a split; GQA 4 at D 256 (128 values a lane) is routed."""
    decode.use_config("two,pipe")  # type: ignore[attr-defined]
    rng = np.random.default_rng(d * 10 + ratio)
    nkv = 2
    lengths = [1, 37, 200] if EMULATED else [1, 37, 4097, 32_768]
    for skv in lengths:
        chunk = decode_splits(2, nkv, skv, rocm.properties.compute_units)[1]  # type: ignore[attr-defined]
        act = [skv, max(0, min(skv, chunk + 1) - (skv % 2))]
        args = decode_args(rng, dtype, 2, nkv * ratio, nkv, skv, d, actualSeqLengths=act)
        stages = _check(rocm, reference, decode, "IncreFlashAttention", args, f"{dtype} D{d} G{ratio} Skv{skv} {act}")
        assert (stages >= 2) == (ratio * d // 8 <= 64), f"D{d} G{ratio}: {stages} stages"


def test_pipe_on_bsh_and_bnsd_views(rocm: Backend, reference: Backend, decode: object) -> None:
    """The same call through BSH, BSND and BNSD views (row strides of H, N*D and D elements), lengths at split edges."""
    decode.use_config("two,pipe,chunk=32")  # type: ignore[attr-defined]
    rng = np.random.default_rng(3)
    skv = 160 if EMULATED else 8192
    chunk = decode_splits(3, 2, skv, rocm.properties.compute_units, min_chunk=32)[1]  # type: ignore[attr-defined]
    assert chunk < skv, "the cache must take several splits"
    act = [chunk - 1, chunk, chunk + 1]
    for layout in ("BSH", "BSND", "BNSD"):
        args = decode_args(rng, "bfloat16", 3, 4, 2, skv, 64, layout, actualSeqLengths=act)
        assert _check(rocm, reference, decode, "IncreFlashAttention", args, f"{layout} act {act}") >= 2


def test_calls_pipe_does_not_cover_take_the_split_kernel(
    rocm: Backend, reference: Backend, decode: object, caplog: pytest.LogCaptureFixture
) -> None:
    """A head dim of 48 (not whole 64-dim runs): the register-tile split kernel, a debug line saying why."""
    decode.use_config("two,pipe")  # type: ignore[attr-defined]
    args = decode_args(np.random.default_rng(12), "bfloat16", 2, 4, 2, 150 if EMULATED else 4096, 48)
    with caplog.at_level(logging.DEBUG, logger="acl_rocm.attention"):
        assert _check(rocm, reference, decode, "IncreFlashAttention", args, "D48") == 0
    assert "not the pipelined split kernel (head dim 48" in caplog.text


def test_pipe_captures_and_replays_with_a_changed_mask(rocm: Backend, decode: object) -> None:
    """Captured once (split + combine), replayed with the mask changed in place: each replay equals its eager run."""
    from tests.rocm.capture_harness import replays_like_eager

    if not rocm.capabilities().stream_capture:
        pytest.fail(f"rocm does not capture here: {rocm.capabilities().notes.get('stream_capture')}")
    decode.use_config("two,pipe")  # type: ignore[attr-defined]
    rng = np.random.default_rng(29)
    skv = 130 if EMULATED else 4096
    args = decode_args(rng, "bfloat16", 2, 4, 2, skv, 64)
    args["attenMask"] = np.arange(skv)[None, :] >= np.array([[skv // 3], [skv - 1]])
    replays_like_eager(rocm, "IncreFlashAttention", args)


def test_fused_pipe_is_bit_identical_to_two_kernel_pipe(rocm: Backend, decode: object) -> None:
    """Same splits, same pipelined partials, same combine code: one launch writes the very bits two launches do."""
    rng = np.random.default_rng(23)
    skv = 130 if EMULATED else 8192
    args = decode_args(rng, "float16", 3, 8, 2, skv, 64)
    args["attenMask"] = rng.uniform(size=(3, 1, 1, skv)) < 0.1
    args["actualSeqLengths"] = [skv, skv - 41, 1]
    outs = []
    for path in ("two", "fused"):
        decode.use_config(f"{path},pipe,chunk=16")  # type: ignore[attr-defined]
        got, stages = _run(rocm, decode, "IncreFlashAttention", args)
        assert stages >= 2, path
        outs.append(got["attentionOut"])
    assert split_count(rocm, "two,chunk=16", 3, 2, skv) > 1
    assert np.array_equal(outs[0].view(np.uint16), outs[1].view(np.uint16)), "fused differs from split + combine"

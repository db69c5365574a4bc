"""The split-KV decode path's opt-in items (``pdyn``, ``pskip``, ``pmma``, ``pcomb``, ``ppdl``) against the reference
(GPU tier).

Each setting the ``DecodeSplit`` bench rows time (:data:`~acl_tools.bench.decode.SPLIT_OPT_CONFIGS`, its masked and
second-run settings) on a Qwen3-like call with the unwritten tail masked and on FIA V5 with lse, a sink and a random
mask; ``pcomb`` bit for bit against the plain combine (two kernels and fused); ``pskip`` on a cache masked past its
filled part (and a mask it cannot stage: still right); ``pdyn`` stages beyond 48 KiB; ``pmma`` over every dtype, head
dim and GQA ratio with lengths ending inside sub-tiles, tiles and splits; captured ``ppdl,pcomb`` calls replayed with
their mask changed in place.
"""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from tests.rocm.decode_cases import assert_outputs_close, decode_args, fia_v5_args, run_decode, tail_masked_args

pytestmark = pytest.mark.gpu

EMULATED = os.environ.get("ACL_ROCM_EMULATE") == "1"
CONFIGS = (
    "two,pipe,pcomb",
    "two,pipe,pcomb,ppdl",
    "fused,pipe,pcomb,ppdl",
    "two,pipe=8,pkeys=32,pdyn,pbpu=1,pcomb,ppdl",
    "two,pipe=6,pkeys=32,pdyn,pbpu=2,pcomb,ppdl",
    "fused,pipe=8,pkeys=32,pdyn,pbpu=1,pcomb,ppdl",
    "two,pipe=12,pkeys=16,pdyn,pbpu=2,pcomb,ppdl",
    "two,pipe,pskip,pcomb,ppdl",
    "two,pipe=3,pkeys=64,pmma,pbpu=2,pcomb,ppdl",
    "fused,pipe=3,pkeys=64,pmma,pbpu=2,pcomb,ppdl",
    "two,pipe=2,pkeys=64,pmma,pbpu=3,pcomb,ppdl",
    "fused,pipe=4,pkeys=64,pmma,pbpu=1,pcomb,ppdl",
    "two,pipe=3,pkeys=64,pmma,pskip,pbpu=2,pcomb,ppdl",
    "two,pipe=3,pkeys=64,pmma",
    "two,pipe=4,pkeys=64,pmma,pbpu=1,pcomb,ppdl",
    "auto,pipe,bpdl",
    "auto,pipe,bpdl,pskip",
    "auto,pipe=3,pkeys=64,pmma,bpdl",
    "auto,pipe=3,pkeys=64,pmma,bpdl,pskip",
)
"""Every ``ACL_DECODE_CONFIG`` with the new items the decode bench times (checked below)."""


def _run(rocm: Backend, decode: object, op: str, args: dict) -> tuple[dict, str]:
    """``op`` on rocm, and the path line of its decode call."""
    got, call = run_decode(rocm, op, args)
    return got, decode.describe(call)  # type: ignore[attr-defined]


def _check(rocm: Backend, reference: Backend, decode: object, op: str, args: dict, note: str) -> str:
    expected = eager.run(op, reference, **args)
    got, line = _run(rocm, decode, op, args)
    assert_outputs_close(got, expected, str(np.dtype(args["query"].dtype)), f"{note}: {line}")
    return line


def test_every_benched_row_is_tested_here() -> None:
    from acl_tools.bench.decode import MASKED_SPLIT_CONFIGS, SPLIT_MORE_CONFIGS, SPLIT_OPT_CONFIGS

    assert set(SPLIT_OPT_CONFIGS) | set(MASKED_SPLIT_CONFIGS) | set(SPLIT_MORE_CONFIGS) <= set(CONFIGS)


@pytest.mark.parametrize("config", CONFIGS)
def test_each_config_matches_the_reference(rocm: Backend, reference: Backend, decode: object, config: str) -> None:
    """A Qwen3-like call (the unwritten tail masked, per-batch fill), then FIA V5 with lse, a sink, a random mask."""
    if EMULATED:  # the emulated cache (200 keys) is short: `auto` would put it on the short-cache kernel
        config = config.replace("auto,", "auto=64,")
    decode.use_config(config)  # type: ignore[attr-defined]
    rng = np.random.default_rng(41)
    args, nq, nkv = tail_masked_args(rng, rocm, config, EMULATED)
    skv = args["key"][0].shape[1]
    line = _check(rocm, reference, decode, "IncreFlashAttention", args, config)
    assert "pipelined" in line and ("masked rows not copied" in line) == ("pskip" in config), line
    assert ("matrix units" in line) == ("pmma" in config), line
    fia = fia_v5_args(rng, args, nq, nkv, rng.uniform(size=(2, skv)) < 0.25)
    fia["attenMaskOptional"][1] = True  # batch 1 keeps no key: the sink alone
    _check(rocm, reference, decode, "FusedInferAttentionScoreV5", fia, f"{config} FIA")


@pytest.mark.parametrize("path", ["two", "fused"])
def test_pcomb_is_bit_identical_to_the_plain_combine(rocm: Backend, decode: object, path: str) -> None:
    """Same splits, same partials: pcomb's combine writes the very bits (output and lse) the plain combine does: FIA
    with a sink, a mask and per-batch lengths (one batch keeps nothing), then bf16 IFA; over the pipelined kernel
    and the register-tile one (GQA 4 at an odd head dim: a dim a thread)."""
    rng = np.random.default_rng(5)
    skv = 160 if EMULATED else 8192
    for nq, d, pipe in ((8, 64, ",pipe"), (8, 33, "")):
        ifa = decode_args(rng, "bfloat16", 3, nq, 2, skv, d, actualSeqLengths=[skv, skv - 37, 1])
        fia = fia_v5_args(rng, ifa, nq, 2, rng.uniform(size=(3, skv)) < 0.2)
        fia["actualSeqLengthsKvOptional"] = [skv, skv - 37, 1]
        fia["attenMaskOptional"][2] = True
        for op, args in (("FusedInferAttentionScoreV5", fia), ("IncreFlashAttention", ifa)):
            outs = []
            for comb in ("", ",pcomb"):
                decode.use_config(f"{path}{pipe},chunk=16{comb}")  # type: ignore[attr-defined]
                got, line = _run(rocm, decode, op, args)
                assert ("pipelined" in line) == bool(pipe), line
                outs.append({k: v.view(np.uint8) for k, v in got.items()})
            for name, value in outs[0].items():
                assert np.array_equal(value, outs[1][name]), f"{path} {op} D{d}{pipe}: {name} differs under pcomb"


def test_pskip_reads_only_the_kept_part_and_stays_right(
    rocm: Backend, reference: Backend, decode: object, caplog: pytest.LogCaptureFixture
) -> None:
    """A cache masked past its filled part per batch (and a random hole pattern): right under pskip; a mask whose
    rows are not whole 4-byte words (an odd capacity) keeps every row's copy, with a debug line saying why."""
    decode.use_config("two,pipe,pskip,chunk=16")  # type: ignore[attr-defined]
    rng = np.random.default_rng(17)
    skv = 256 if EMULATED else 16_384
    for ratio, d in ((1, 64), (4, 64), (2, 128)):
        args = decode_args(rng, "float16", 3, 2 * ratio, 2, skv, d)
        filled = np.array([5, skv // 2 + 3, skv])
        hidden = np.arange(skv)[None, :] >= filled[:, None]
        hidden[2] |= rng.uniform(size=skv) < 0.6
        args["attenMask"] = hidden[:, None, None, :]
        line = _check(rocm, reference, decode, "IncreFlashAttention", args, f"G{ratio} D{d}")
        assert "masked rows not copied" in line, line
    args = decode_args(rng, "bfloat16", 2, 4, 2, skv - 1, 64)
    args["attenMask"] = (np.arange(skv - 1) >= skv // 3)[None, None, None, :].repeat(2, 0)
    with caplog.at_level(logging.DEBUG, logger="acl_rocm.attention"):
        line = _check(rocm, reference, decode, "IncreFlashAttention", args, "odd capacity")
    assert "masked rows not copied" not in line and "pskip off (mask rows not whole 4-byte words" in caplog.text


def test_pdyn_takes_stages_past_48_kib(rocm: Backend, reference: Backend, decode: object) -> None:
    """pipe=8 of 64 keys at D 128 (256 KiB asked): clamped to what the opt-in maximum holds, above 48 KiB."""
    decode.use_config("two,pipe=8,pkeys=64,pdyn,chunk=64")  # type: ignore[attr-defined]
    rng = np.random.default_rng(9)
    skv = 300 if EMULATED else 8192
    args = decode_args(rng, "bfloat16", 2, 4, 2, skv, 128, actualSeqLengths=[skv, skv - 70])
    line = _check(rocm, reference, decode, "IncreFlashAttention", args, "pdyn")
    stages = int(line.split("pipelined (")[1].split(" ")[0])
    assert stages * 2 * 64 * 128 * 2 > 48 * 1024, line


def test_ppdl_pcomb_captures_and_replays_with_a_changed_mask(rocm: Backend, decode: object) -> None:
    """Captured once (programmatic split + combine, partials in the stream scratch), replayed with the mask changed
    in place: each replay equals its eager run; pskip's staged mask too."""
    from tests.rocm.capture_harness import replays_like_eager

    if not rocm.capabilities().stream_capture:
        pytest.fail(f"rocm does not capture here: {rocm.capabilities().notes.get('stream_capture')}")
    rng = np.random.default_rng(29)
    skv = 132 if EMULATED else 4096
    for config in ("two,pipe,pcomb,ppdl", "fused,pipe,pskip,pcomb,ppdl"):
        decode.use_config(config)  # type: ignore[attr-defined]
        args = decode_args(rng, "bfloat16", 2, 4, 2, skv, 64)
        args["attenMask"] = np.arange(skv)[None, :] >= np.array([[skv // 3], [skv - 1]])
        replays_like_eager(rocm, "IncreFlashAttention", args)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("ratio", [1, 2, 8])
def test_pmma_matches_the_reference(
    rocm: Backend, reference: Backend, decode: object, dtype: str, d: int, ratio: int
) -> None:
    """Every dtype x head dim x GQA ratio (8 too: past the lane layout's registers), per-batch lengths that end
    inside a sub-tile, a tile and a split; 32-key stages (warps without a sub-tile) and a random mask through pskip's
    staged bytes too."""
    rng = np.random.default_rng(d * 10 + ratio)
    nkv = 2
    lengths = [1, 37, 200] if EMULATED else [1, 37, 4097, 32_768]
    for config in ("two,pipe=3,pkeys=64,pmma", "two,pipe=2,pkeys=32,pmma,pskip,chunk=32"):
        decode.use_config(config)  # type: ignore[attr-defined]
        for skv in lengths:
            act = [skv, max(0, skv - 17 - skv % 5)]
            args = decode_args(rng, dtype, 2, nkv * ratio, nkv, skv, d, actualSeqLengths=act)
            if "pskip" in config and skv % 4 == 0:
                args["attenMask"] = (rng.uniform(size=(2, skv)) < 0.3)[:, None, None, :]
            line = _check(rocm, reference, decode, "IncreFlashAttention", args, f"{config} {dtype} D{d} G{ratio} {act}")
            assert "matrix units" in line, line

"""The split-KV decode kernel of IncreFlashAttention / FusedInferAttentionScore against the reference (GPU tier).

Every dtype x head dim x GQA ratio, cache lengths that cross split boundaries (1, odd lengths, a
chunk +- 1), per-batch actual lengths, a decode mask, each layout, and FusedInferAttentionScore's
softmaxLse; a captured call replayed with its decode mask changed on the device, and a task group
re-issued with new actualSeqLengths. ``SMALL`` keeps the CPU kernel emulator (``ACL_ROCM_EMULATE=1``)
to seconds; the GPU adds decode's real shapes (Qwen3-0.6B: 16/8 heads, D 128, up to 32k keys).
"""

from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.errors import AclnnError
from acl_rocm.kernels.attention_decode import decode_splits
from tests.conftest import assert_close
from tests.rocm.decode_cases import assert_outputs_close, decode_args

pytestmark = pytest.mark.gpu

EMULATED = os.environ.get("ACL_ROCM_EMULATE") == "1"


def _check(rocm: Backend, reference: Backend, op: str, args: dict, note: str) -> None:
    runner = rocm.attention  # type: ignore[attr-defined]
    expected = eager.run(op, reference, **args)
    got = eager.run(op, rocm, **args)
    assert runner.last_path == "decode", note
    assert_outputs_close(got, expected, str(np.dtype(args["query"].dtype)), note)


def _chunk(rocm: Backend, b: int, nkv: int, skv: int) -> int:
    return decode_splits(b, nkv, skv, rocm.properties.compute_units)[1]  # type: ignore[attr-defined]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("ratio", [1, 2, 4])
def test_decode_kernel_matches_reference(rocm: Backend, reference: Backend, dtype: str, d: int, ratio: int) -> None:
    rng = np.random.default_rng(d * 10 + ratio)
    nkv = 2
    lengths = [1, 37, 200] if EMULATED else [1, 37, 4097, 32_768]
    for skv in lengths:
        chunk = _chunk(rocm, 2, nkv, skv)
        act = [skv, max(0, min(skv, chunk + 1) - (skv % 2))]
        args = decode_args(rng, dtype, 2, nkv * ratio, nkv, skv, d, actualSeqLengths=act)
        _check(rocm, reference, "IncreFlashAttention", args, f"{dtype} D{d} G{ratio} Skv{skv} act {act}")


def test_lengths_around_split_boundaries(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(3)
    skv = 160 if EMULATED else 8192
    chunk = _chunk(rocm, 3, 2, skv)
    assert chunk < skv, "the cache must take several splits"
    act = [chunk - 1, chunk, chunk + 1]
    for layout in ("BSH", "BSND", "BNSD"):
        args = decode_args(rng, "bfloat16", 3, 4, 2, skv, 64, layout, actualSeqLengths=act)
        _check(rocm, reference, "IncreFlashAttention", args, f"{layout} act {act}")


def test_decode_mask_and_fused_infer_lse(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(4)
    skv = 150 if EMULATED else 5000
    args = decode_args(rng, "float16", 2, 4, 2, skv, 128)
    mask = rng.uniform(size=(2, 1, 1, skv)) < 0.3
    mask[1] = True  # batch 1 keeps no key: zeros and an lse of +inf
    _check(rocm, reference, "IncreFlashAttention", {**args, "attenMask": mask}, "decode mask")
    fia = {
        "query": args["query"],
        "key": args["key"],
        "value": args["value"],
        "attenMask": mask[:, 0, 0, :],
        "actualSeqLengthsKv": [skv - 3, skv],
        "numHeads": 4,
        "scaleValue": args["scaleValue"],
        "inputLayout": "BSND",
        "numKeyValueHeads": 2,
        "softmaxLseFlag": True,
    }
    _check(rocm, reference, "FusedInferAttentionScore", fia, "FIA decode with lse")


def test_a_mask_hiding_the_unwritten_cache_tail(rocm: Backend, reference: Backend) -> None:
    """Qwen3's decode: the views span the whole capacity and the mask hides positions not yet written.

    Whole tiles of masked keys load no K / V; the filled lengths put the edge inside a warp's tile, on
    a tile edge, inside a split and on a split edge, so both the skipped and the partly kept tiles run.
    """
    rng = np.random.default_rng(9)
    skv = 200 if EMULATED else 8192
    chunk = _chunk(rocm, 4, 2, skv)
    filled = [1, 8, min(skv, chunk + 3), min(skv, 2 * chunk)]
    args = decode_args(rng, "bfloat16", 4, 4, 2, skv, 64)
    mask = np.arange(skv)[None, :] >= np.array(filled)[:, None]  # True: masked
    args["attenMask"] = mask[:, None, None, :]
    _check(rocm, reference, "IncreFlashAttention", args, f"cache tail masked past {filled}")


def test_fused_infer_v5_learnable_sink_on_the_decode_path(rocm: Backend, reference: Backend) -> None:
    """The sink joins the combined (max, sum) where the output is written: one split and several."""
    rng = np.random.default_rng(8)
    for skv in (20, 150 if EMULATED else 6000):
        args = decode_args(rng, "bfloat16", 2, 4, 2, skv, 64, "BNSD")
        mask = rng.uniform(size=(2, skv)) < 0.2
        mask[1] = True  # nothing kept in batch 1: zeros, and the sink alone gives lse = sink
        fia = {
            "query": args["query"],
            "key": args["key"],
            "value": args["value"],
            "attenMaskOptional": mask,
            "numHeads": 4,
            "scaleValue": args["scaleValue"],
            "inputLayout": "BNSD",
            "numKeyValueHeads": 2,
            "softmaxLseFlag": True,
            "learnableSinkOptional": rng.uniform(-2, 2, 4).astype(ml_dtypes.bfloat16),
        }
        splits = decode_splits(2, 2, skv, rocm.properties.compute_units)[0]  # type: ignore[attr-defined]
        _check(rocm, reference, "FusedInferAttentionScoreV5", fia, f"FIA V5 sink, Skv {skv}, {splits} splits")


def test_the_path_switch(rocm: Backend, reference: Backend) -> None:
    runner = rocm.attention  # type: ignore[attr-defined]
    args = decode_args(np.random.default_rng(5), "bfloat16", 1, 4, 2, 40, 64)
    try:
        if not EMULATED:  # the row kernel's 3-d grid is beyond the emulator (1-d grids only)
            runner.path_override = "kernel"
            eager.run("IncreFlashAttention", rocm, **args)
            assert runner.last_path == "kernel"
        runner.path_override = "decode"
        _check(rocm, reference, "IncreFlashAttention", args, "forced decode")
        per_batch = decode_args(np.random.default_rng(6), "bfloat16", 2, 4, 2, 40, 48)
        per_batch["key"] = [per_batch["key"][0][i : i + 1] for i in range(2)]  # a cache tensor per batch
        per_batch["value"] = [per_batch["value"][0][i : i + 1] for i in range(2)]
        with pytest.raises(AclnnError, match="2 cache tensors") as info:
            eager.run("IncreFlashAttention", rocm, **per_batch)
        assert int(info.value.code) == 161002
    finally:
        runner.path_override = None


def test_decode_captures_and_replays_with_a_changed_mask(rocm: Backend) -> None:
    """The split and combine launches (and their stream-ordered temporary) captured once; each replay reads
    the mask (the cache positions) on the device, so a replay with a changed mask equals its eager run."""
    from tests.rocm.capture_harness import replays_like_eager

    if not rocm.capabilities().stream_capture:
        pytest.fail(f"rocm does not capture here: {rocm.capabilities().notes.get('stream_capture')}")
    rng = np.random.default_rng(8)
    skv = 130 if EMULATED else 4096
    args = decode_args(rng, "bfloat16", 2, 4, 2, skv, 64)
    args["attenMask"] = np.arange(skv)[None, :] >= np.array([[skv // 3], [skv - 1]])
    replays_like_eager(rocm, "IncreFlashAttention", args)


def test_a_task_group_update_swaps_in_new_actual_lengths(rocm: Backend, reference: Backend) -> None:
    """vllm-ascend's way: the decode call captured in a task group, then re-issued with new actualSeqLengths
    through aclmdlRICaptureTaskUpdate*; the replay runs the new lengths (same launches, new arguments)."""
    from acl_core.spec.runtime import CaptureMode
    from tests.rocm.capture_harness import OpCall, write

    rt = rocm.runtime  # type: ignore[attr-defined]
    skv = 140 if EMULATED else 4096
    base = decode_args(np.random.default_rng(11), "float16", 2, 4, 2, skv, 64)
    old, new = [skv // 2, 3], [skv, skv - 37]
    group = OpCall(rocm, "IncreFlashAttention", {**base, "actualSeqLengths": old})
    update = OpCall(rocm, "IncreFlashAttention", {**base, "actualSeqLengths": new})
    stream, other = rt.create_stream(), rt.create_stream()
    try:
        for c in (group, update):
            c.fill(0)
        p_group = group.prepare()
        rt.ri_capture_begin(stream, int(CaptureMode.ACL_MODEL_RI_CAPTURE_MODE_RELAXED))
        rt.ri_capture_task_grp_begin(stream)
        group.enqueue(p_group, stream)
        handle = rt.ri_capture_task_grp_end(stream)
        model = rt.ri_capture_end(stream)
        p_update = update.prepare()
        rt.ri_capture_task_update_begin(other, handle)
        update.enqueue(p_update, other)
        rt.ri_capture_task_update_end(other)
        for c in (group, update):
            out = c.conv.arrays["attentionOut"]
            write(out, np.zeros(out.nbytes, np.uint8))  # type: ignore[arg-type]
        rt.ri_execute_async(model, stream)
        rt.synchronize_stream(stream)
        expected = eager.run("IncreFlashAttention", reference, **{**base, "actualSeqLengths": new})
        assert_close(update.outputs()["attentionOut[0]"], expected["attentionOut"], atol=2e-3, rtol=2e-3)
        assert not group.outputs()["attentionOut[0]"].any(), "the replaced launches must not run"
        rt.ri_destroy(model)
    finally:
        for c in (group, update):
            c.free()
        rt.destroy_stream(stream)
        rt.destroy_stream(other)


def test_every_decode_sample_of_the_spec(rocm: Backend, reference: Backend) -> None:
    """IncreFlashAttention's own samples that the decode path takes (one cache tensor; D 8, so lanes past D
    hold zeros), contiguous, padded and transposed (strided loads). FusedInferAttentionScore's decode
    samples hold a cache tensor per batch (the row kernel's case); test_decode_mask_and_fused_infer_lse
    covers it."""
    from acl_core.dtypes import from_numpy
    from acl_core.spec.ops import get_spec
    from conformance.tolerances import lookup

    op = "IncreFlashAttention"
    runner = rocm.attention  # type: ignore[attr-defined]
    spec = get_spec(op)
    assert spec.samples is not None
    ran = 0
    runner.path_override = "decode"
    try:
        for sample in spec.samples(np.random.default_rng(2024)):
            expected = eager.run(op, reference, op_args=sample.args)
            for layout in ("contiguous", "padded", "transposed"):
                try:
                    got = eager.run(op, rocm, layout=layout, guard=True, op_args=sample.args)
                except AclnnError as exc:
                    assert "decode attention path forced" in str(exc), exc
                    break
                ran += 1
                for name, value in expected.items():
                    tol = lookup(op, from_numpy(value.dtype), "rocm", sample.tolerance)
                    assert_close(got[name], value, atol=tol.atol, rtol=tol.rtol)
    finally:
        runner.path_override = None
    assert ran, f"no sample of {op} took the decode path"

"""Paged KV (page attention) on the GPU: IncreFlashAttentionV4 and FusedInferAttentionScoreV4 over block pools.

Against the reference in the decode path's accuracy (test_gpu_decode_attention.py's tolerances): Qwen3-shaped
decode (16/8 heads, D 128, lengths crossing many 128-token blocks, uneven per batch, shuffled tables) in every
pool form (BnBsH, BnNBsD, NZ) under each ``ACL_PAGED_DECODE`` choice, with the split kernel's fused and
double-buffered configurations; paged prefill (query S 16, rightDownCausal) through the gather; a table entry
outside the pool fails at synchronisation (161002); paged decode captured and replayed with the pool (keys,
values and query) changed in place.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.errors import AclnnError
from acl_core.spec.ops.attention import FIA_DEFAULTS, FIA_PAGED_NAMES, IFA_PAGED_NAMES, compressed_mask, paged_case
from acl_rocm.kernels.attention_paged import PAGED_MODES
from tests.conftest import assert_close

pytestmark = pytest.mark.gpu

EMULATED = os.environ.get("ACL_ROCM_EMULATE") == "1"
TOL = {D.ACL_FLOAT16: (2e-3, 2e-3), D.ACL_BF16: (1.6e-2, 1.6e-2)}
"""The decode path's accuracy (test_gpu_decode_attention.py's TOL); lse to 1e-4 absolute."""
NQ, NKV, DIM = (4, 2, 64) if EMULATED else (16, 8, 128)
LENGTHS = (70, 33) if EMULATED else (4097, 1000, 32_768 - 5)
BLOCK = 16 if EMULATED else 128


@pytest.fixture(params=PAGED_MODES)
def mode(rocm: Backend, request: pytest.FixtureRequest) -> Iterator[str]:
    runner = rocm.attention  # type: ignore[attr-defined]
    runner.use_paged_mode(request.param)
    yield request.param
    runner.use_paged_mode(None)
    runner.decode.use_config(None)


def _check(rocm: Backend, reference: Backend, op: str, args: dict, dtype: D, note: str) -> None:
    want = eager.run(op, reference, op_args=args)
    got = eager.run(op, rocm, op_args=args)
    atol, rtol = TOL[dtype]
    for name, value in want.items():
        assert got[name].shape == value.shape, f"{note} {name}"
        assert_close(got[name], value, atol=atol if name == "attentionOut" else 1e-4, rtol=rtol)


def _fia(args: dict) -> dict:
    """A base FusedInferAttentionScore case's arguments under V4's names."""
    names = {"blockTable": "blockTableOptional", "actualSeqLengthsKv": "actualSeqLengthsKvOptional",
             "actualSeqLengths": "actualSeqLengthsOptional", "attenMask": "attenMaskOptional"}  # fmt: skip
    return {names.get(k, k): v for k, v in args.items()}


@pytest.mark.parametrize("dtype", [D.ACL_FLOAT16, D.ACL_BF16])
@pytest.mark.parametrize("form", ["BnBsH", "BnNBsD", "NZ"])
def test_paged_decode_matches_the_reference(rocm: Backend, reference: Backend, mode: str, dtype: D, form: str) -> None:
    rng = np.random.default_rng(hash((form, dtype.short)) % 1000)
    fia = paged_case(rng, dtype, "BNSD", form, NQ, NKV, 1, LENGTHS, DIM, BLOCK, FIA_PAGED_NAMES,
                     **{**FIA_DEFAULTS, "blockSize": BLOCK, "softmaxLseFlag": True})  # fmt: skip
    _check(rocm, reference, "FusedInferAttentionScoreV4", _fia(fia), dtype, f"FIA {form} {mode}")
    if form != "NZ":
        ifa = paged_case(rng, dtype, "BNSD" if form == "BnNBsD" else "BSH", form, NQ, NKV, 1, LENGTHS, DIM, BLOCK,
                         IFA_PAGED_NAMES, innerPrecise=1)  # fmt: skip
        _check(rocm, reference, "IncreFlashAttentionV4", ifa, dtype, f"IFA {form} {mode}")


@pytest.mark.parametrize("paged", ["tile", "direct"])
@pytest.mark.parametrize("config", ["fused", "two,dbuf", "two,eager,kpw=4"])
def test_direct_paged_decode_under_each_split_configuration(
    rocm: Backend, reference: Backend, config: str, paged: str
) -> None:
    runner = rocm.attention  # type: ignore[attr-defined]
    runner.use_paged_mode(paged)
    runner.decode.use_config(config)
    try:
        rng = np.random.default_rng(7)
        args = paged_case(rng, D.ACL_BF16, "BNSD", "NZ", NQ, NKV, 1, LENGTHS, DIM, BLOCK, FIA_PAGED_NAMES,
                          **{**FIA_DEFAULTS, "blockSize": BLOCK})  # fmt: skip
        _check(rocm, reference, "FusedInferAttentionScore", args, D.ACL_BF16, f"NZ {config} {paged}")
    finally:
        runner.use_paged_mode(None)
        runner.decode.use_config(None)


TILE_BLOCK = 32 if EMULATED else 128
"""blockSize of the tile tests: a whole number of every kernel's key tiles (the short-cache kernel's at D 64: 32)."""


@pytest.mark.parametrize(
    ("config", "lengths", "kernel"),
    [
        ("auto", (200, 77), "short-cache block kernel"),
        ("two", LENGTHS, "splits of"),
        ("two,wide", LENGTHS, "in the short-cache layout"),
        ("fused,dbuf", LENGTHS, "splits of"),
        ("two,eager,kpw=16", LENGTHS, "splits of"),
    ],
    ids=["block", "two", "wide", "fused-dbuf", "eager-kpw16"],
)
@pytest.mark.parametrize("form", ["BnBsH", "BnNBsD", "NZ"])
def test_tile_paged_decode_reads_a_table_entry_a_tile(
    rocm: Backend,
    reference: Backend,
    config: str,
    lengths: tuple[int, ...],
    kernel: str,
    form: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``ACL_PAGED_DECODE=tile`` in every decode kernel (short-cache, its keys over 4 blocks, split, split in the
    short-cache layout, fused with double buffering, eager with 16-key tiles) over each pool form: one table entry
    a tile (the path line)."""
    runner = rocm.attention  # type: ignore[attr-defined]
    runner.use_paged_mode("tile")
    runner.decode.use_config(config)
    try:
        rng = np.random.default_rng(19)
        layout = "BSH" if form == "BnBsH" else "BNSD"
        args = paged_case(rng, D.ACL_FLOAT16, layout, form, NQ, NKV, 1, lengths, DIM, TILE_BLOCK, FIA_PAGED_NAMES,
                          **{**FIA_DEFAULTS, "blockSize": TILE_BLOCK, "softmaxLseFlag": True})  # fmt: skip
        with caplog.at_level("DEBUG", logger="acl_rocm.attention"):
            _check(rocm, reference, "FusedInferAttentionScore", args, D.ACL_FLOAT16, f"{form} {config}")
        assert kernel in caplog.text and "a table entry a tile" in caplog.text, caplog.text[-2000:]
    finally:
        runner.use_paged_mode(None)
        runner.decode.use_config(None)


def test_paged_prefill_matches_the_reference(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(11)
    sq = 5 if EMULATED else 16
    args = paged_case(rng, D.ACL_BF16, "BSND", "BnNBsD", NQ, NKV, sq, LENGTHS[:2], DIM, BLOCK, FIA_PAGED_NAMES,
                      **{**FIA_DEFAULTS, "blockSize": BLOCK})  # fmt: skip
    args |= {"attenMask": compressed_mask(), "sparseMode": 3, "actualSeqLengths": [sq, sq - 2], "softmaxLseFlag": True}
    _check(rocm, reference, "FusedInferAttentionScore", args, D.ACL_BF16, "paged prefill")


def test_a_table_entry_past_the_pool_fails_at_synchronisation(rocm: Backend, mode: str) -> None:
    rng = np.random.default_rng(13)
    args = paged_case(rng, D.ACL_FLOAT16, "BNSD", "BnNBsD", NQ, NKV, 1, LENGTHS[:2], DIM, BLOCK, FIA_PAGED_NAMES,
                      **{**FIA_DEFAULTS, "blockSize": BLOCK})  # fmt: skip
    args["blockTable"][1, 1] = args["key"][0].shape[0] + 5
    with pytest.raises(AclnnError) as info:
        eager.run("FusedInferAttentionScore", rocm, op_args=args)
    assert info.value.code == 161002


def test_paged_decode_captures_and_replays(rocm: Backend, mode: str) -> None:
    """Captured once; a replay reads the table and the pool on the device (changed in place between replays)."""
    from tests.rocm.capture_harness import replays_like_eager

    if not rocm.capabilities().stream_capture:
        pytest.fail(f"rocm does not capture here: {rocm.capabilities().notes.get('stream_capture')}")
    rng = np.random.default_rng(17)
    args = paged_case(rng, D.ACL_BF16, "BNSD", "BnNBsD", NQ, NKV, 1, LENGTHS[:2], DIM, BLOCK, FIA_PAGED_NAMES,
                      **{**FIA_DEFAULTS, "blockSize": BLOCK})  # fmt: skip
    replays_like_eager(rocm, "FusedInferAttentionScore", args)

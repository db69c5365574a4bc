"""The flash attention kernel (``ACL_ATTENTION_PATH=flash``) against the reference (GPU tier).

FlashAttentionScore forced onto the flash path: every head dim it has (64, 128, 256), bf16 and fp16,
causal (top-left and bottom-right) and not, GQA, lengths that are not multiples of the tiles, explicit
masks with fully masked rows, band windows, padded / transposed layouts (the element-load path), a
sink (FlashAttentionScoreV3), and a prefill size. Outputs are pre-filled with NaN so a kernel that
writes nothing fails. ``ACL_ROCM_EMULATE=1`` runs it on the CPU kernel emulator at small sizes; the GPU
runs realistic ones.
"""

from __future__ import annotations

import os
import zlib

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.errors import AclError
from acl_core.spec.ops.attention import _to_layout, compressed_mask
from tests.conftest import assert_close
from tests.rocm.prefill import sentinel_outputs
from tests.rocm.test_gpu_attention import _fa_args

pytestmark = pytest.mark.gpu

EMULATED = os.environ.get("ACL_ROCM_EMULATE") == "1"
EPS = {"float16": 2.0**-10, "bfloat16": 2.0**-7}
STATS_TOL = 1e-5
"""softmaxMax / softmaxSum: fp32 scores and sums against the reference's float64 (the BLAS path's bound)."""


def _args(
    rng: np.random.Generator,
    dtype: str,
    layout: str,
    b: int,
    n: int,
    nkv: int,
    sq: int,
    skv: int,
    d: int,
    mode: int,
    **extra: object,
) -> dict:
    """FlashAttentionScore arguments (the attention tier's builder) with ``extra`` on top."""
    return _fa_args(rng, dtype, layout, b, n, nkv, sq, skv, d, mode) | extra


def check_flash(
    rocm: Backend,
    reference: Backend,
    args: dict,
    note: str,
    op: str = "FlashAttentionScore",
    layout: str = "contiguous",
) -> None:
    """Run ``op`` on the flash path (forced) and compare every output with the reference."""
    runner = rocm.attention  # type: ignore[attr-defined]
    expected = eager.run(op, reference, **args)
    runner.path_override = "flash"
    try:
        outs = sentinel_outputs(op, args, expected) if layout == "contiguous" else {}
        got = eager.run(op, rocm, layout=layout, **args, **outs)
        assert runner.last_path == "flash", note
    finally:
        runner.path_override = None
    eps = EPS[str(np.dtype(args["query"].dtype))]
    for name, want in expected.items():
        if name == "softmaxOutOut":
            continue
        tol = 4 * eps if name in ("attentionOutOut", "attentionOut") else STATS_TOL
        try:
            assert_close(got[name], want, atol=tol, rtol=tol)
        except AssertionError as exc:
            raise AssertionError(f"flash [{note}] {name}\n{exc}") from None


def _rng(*key: object) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("mode", [0, 3])
def test_flash_matches_reference(rocm: Backend, reference: Backend, dtype: str, d: int, mode: int) -> None:
    sq, skv = (70, 90) if EMULATED else (1000, 1250)
    args = _args(_rng(dtype, d, mode), dtype, "BSND", 2 if not EMULATED else 1, 4, 2, sq, skv, d, mode)
    check_flash(rocm, reference, args, f"{dtype} D{d} sparse {mode} GQA 4/2 Sq={sq} Skv={skv}")


def block_shapes() -> list[tuple[int, str]]:
    """(head dim, config) of every entry of the flash kernel's table and every alternative the bench times."""
    from acl_rocm.kernels.attention_flash import ALTERNATIVES, CONFIGS

    shapes = {(d, str(config)) for (d, _dtype, _layout), config in CONFIGS.items()}
    shapes |= {(d, str(config)) for d, configs in ALTERNATIVES.items() for config in configs}
    return sorted(shapes)


@pytest.mark.parametrize(("d", "config"), block_shapes())
def test_flash_block_shapes(rocm: Backend, reference: Backend, d: int, config: str) -> None:
    """Each block shape (ACL_FLASH_CONFIG) on causal rows crossing tile edges, and on a mask with a window."""
    flash = rocm.attention.flash  # type: ignore[attr-defined]
    flash.use_config(f"{d}={config}")
    try:
        rng = _rng("shape", d, config)
        sq, skv = (90, 110) if EMULATED else (1100, 1300)
        args = _args(rng, "bfloat16", "BSND", 1, 2, 1, sq, skv, d, 3)
        check_flash(rocm, reference, args, f"D{d} {config} causal")
        assert str(flash.last_instance.config) == config
        mask = rng.uniform(size=(1, 1, sq, skv)) < 0.3
        args = _args(rng, "float16", "BNSD", 1, 2, 2, sq, skv, d, 0, attenMaskOptional=mask, preTokens=40, nextTokens=7)
        check_flash(rocm, reference, args, f"D{d} {config} mask + window")
    finally:
        flash.use_config(None)


@pytest.mark.parametrize("config", ["w4m1k64s2", "w4m1k64s2-f", "w4m1k64s2-efiu", "w4m1k64s1-fi"])
def test_flash_inner_loops_under_negative_and_zero_scales(rocm: Backend, reference: Backend, config: str) -> None:
    """The folded scale (``-f``: |scale| in the FMA, its sign put into Q) keeps a negative and a zero scale exact,
    on causal rows and on an explicit mask with a window (the ``-u`` masked softmax; ``-i`` with one stage and two)."""
    flash = rocm.attention.flash  # type: ignore[attr-defined]
    flash.use_config(f"64={config}")
    try:
        rng = _rng("scale", config)
        sq, skv = (70, 100) if EMULATED else (700, 1000)
        for scale in (-0.3, 0.0):
            args = _args(rng, "bfloat16", "BNSD", 1, 2, 1, sq, skv, 64, 3, scaleValue=scale)
            check_flash(rocm, reference, args, f"{config} causal, scale {scale}")
            assert str(flash.last_instance.config) == config
        mask = rng.uniform(size=(1, 1, sq, skv)) < 0.3
        mask[:, :, 3, :] = True  # a fully masked row
        args = _args(rng, "float16", "BNSD", 1, 2, 2, sq, skv, 64, 0, attenMaskOptional=mask, preTokens=30)
        args |= {"nextTokens": 5, "scaleValue": -0.2}
        check_flash(rocm, reference, args, f"{config} mask + window, scale -0.2")
    finally:
        flash.use_config(None)


@pytest.mark.parametrize("layout", ["BNSD", "BSH", "SBH"])
def test_flash_layouts_and_strided_views(rocm: Backend, reference: Backend, layout: str) -> None:
    sq, skv = (40, 70) if EMULATED else (300, 520)
    args = _args(_rng(layout), "bfloat16", layout, 2, 2, 1, sq, skv, 64, 2)
    check_flash(rocm, reference, args, f"{layout} causal top-left")
    for view in ("padded", "transposed"):  # strides the 16-byte chunk copies cannot take: element loads
        check_flash(rocm, reference, args, f"{layout} {view}", layout=view)


def test_flash_masks_windows_and_empty_rows(rocm: Backend, reference: Backend) -> None:
    rng = _rng("masks")
    sq, skv = (50, 70) if EMULATED else (400, 450)
    base = _args(rng, "float16", "BSND", 2, 2, 2, sq, skv, 64, 0)
    mask = rng.uniform(size=(2, 1, sq, skv)) < 0.3
    mask[:, :, 7, :] = True  # a fully masked row: zeros, max -inf, sum 0
    cases = {
        "sparse 0 mask + window": {**base, "attenMaskOptional": mask, "preTokens": 40, "nextTokens": 5},
        "sparse 1 mask": {**base, "attenMaskOptional": mask, "sparseMode": 1},
        "sparse 4 band": {**base, "attenMaskOptional": compressed_mask(), "sparseMode": 4, "preTokens": 9,
                          "nextTokens": 3},
        "sparse 3 Sq > Skv (empty rows)": _args(rng, "float16", "BSND", 1, 2, 2, skv, sq, 64, 3),
        "sparse 2 Sq < Skv": _args(rng, "bfloat16", "BSND", 1, 2, 1, sq, skv, 128, 2),
    }  # fmt: skip
    for note, args in cases.items():
        check_flash(rocm, reference, args, note)


def test_flash_with_a_sink(rocm: Backend, reference: Backend) -> None:
    rng = _rng("sink")
    sq = 60 if EMULATED else 700
    args = _args(rng, "bfloat16", "BNSD", 1, 4, 2, sq, sq, 64, 3, pseType=1)
    args["sinkOptional"] = rng.uniform(-2, 2, 4).astype(np.float32)
    check_flash(rocm, reference, args, "causal + sink", op="FlashAttentionScoreV3")


def test_flash_refuses_what_it_cannot_run(rocm: Backend) -> None:
    runner = rocm.attention  # type: ignore[attr-defined]
    rng = _rng("refuse")
    cases = {
        "float32 inputs": _args(rng, "float32", "BNSD", 1, 2, 2, 32, 32, 64, 0),
        "head dim 96 ": _args(rng, "bfloat16", "BNSD", 1, 2, 2, 32, 32, 96, 0),
        "pse": {
            **_args(rng, "bfloat16", "BNSD", 1, 2, 2, 32, 32, 64, 0),
            "realShiftOptional": rng.uniform(-1, 1, (1, 2, 32, 32)).astype("bfloat16"),
        },
    }
    runner.path_override = "flash"
    try:
        for why, args in cases.items():
            with pytest.raises(AclError, match=f"flash attention path cannot run this call: .*{why}"):
                eager.run("FlashAttentionScore", rocm, **args)
    finally:
        runner.path_override = None


@pytest.mark.skipif(EMULATED, reason="a prefill size: seconds on a GPU, hours on the emulator")
@pytest.mark.parametrize(("d", "sq"), [(128, 4096), (64, 1024)])
def test_flash_at_prefill_size(rocm: Backend, reference: Backend, d: int, sq: int) -> None:
    args = _args(_rng("prefill", d), "bfloat16", "BNSD", 1, 4, 4, sq, sq, d, 3)
    check_flash(rocm, reference, args, f"bf16 causal {sq} D={d}")


def _inference(rng: np.random.Generator, dtype: str, layout: str, n: int, nkv: int, s: int, d: int) -> dict:
    """PromptFlashAttention arguments: one prompt of ``s`` tokens against itself (b = 2)."""

    def make(heads: int) -> np.ndarray:
        return _to_layout(rng.uniform(-1, 1, (2, heads, s, d)), layout).astype(np.dtype(dtype))

    return {
        "query": make(n),
        "key": make(nkv),
        "value": make(nkv),
        "numHeads": n,
        "scaleValue": 1 / np.sqrt(d),
        "inputLayout": layout,
        "numKeyValueHeads": nkv,
    }


@pytest.mark.parametrize("d", [64, 128])
def test_prompt_and_fused_infer_prefill_on_flash(rocm: Backend, reference: Backend, d: int) -> None:
    """Issue 18 names PromptFlashAttention and FusedInferAttentionScore's prefill beside FlashAttentionScore."""
    rng = _rng("inference", d)
    s = 45 if EMULATED else 1500
    causal = np.triu(np.ones((s, s), bool), 1)  # True: masked
    prompt = _inference(rng, "bfloat16", "BNSD", 4, 2, s, d)
    check_flash(rocm, reference, prompt, f"PFA D{d} no mask", op="PromptFlashAttention")
    prompt |= {"attenMask": causal, "actualSeqLengths": [s, s - 7], "preTokens": 2147483647, "nextTokens": 0}
    check_flash(rocm, reference, prompt, f"PFA D{d} causal mask, act {s - 7}", op="PromptFlashAttention")
    fia = _inference(rng, "float16", "BSND", 4, 4, s, d)
    fia |= {"key": [fia["key"]], "value": [fia["value"]]}  # FusedInferAttentionScore takes tensor lists
    fia |= {"attenMask": causal, "sparseMode": 0, "softmaxLseFlag": True, "actualSeqLengthsKv": [s, s - 3]}
    check_flash(rocm, reference, fia, f"FIA D{d} causal, lse", op="FusedInferAttentionScore")


def test_inference_ops_refuse_flash_where_it_cannot_run(rocm: Backend) -> None:
    runner = rocm.attention  # type: ignore[attr-defined]
    args = _inference(_rng("refuse-inference"), "bfloat16", "BNSD", 2, 2, 16, 96)
    runner.path_override = "flash"
    try:
        with pytest.raises(AclError, match="flash path forced: head dim 96"):
            eager.run("PromptFlashAttention", rocm, **args)
    finally:
        runner.path_override = None

"""FlashAttentionScoreGrad's flash path (``ACL_ATTENTION_GRAD_PATH=flash``, opt-in) on the GPU (GPU tier).

Every sample of every version with the switch on under the op's accuracy class (the samples the kernels take run them;
fp32, D 8 and pse fall back to the composed path), contiguous, padded and transposed; tile-crossing shapes against the
reference normwise (causal, band, an explicit mask with a fully masked row, GQA, a sink, BSND / BNSD / BSH, fp16 / bf16,
D 64 / 96 / 128); the bench's large shapes (B2 N8 S1024, D 128 causal, GQA 8/2, D 64) against the composed path on the
same device, normwise; and determinism (two runs bit for bit). Each asserts the flash path ran.
``ACL_ROCM_EMULATE=1`` runs the samples on the CPU kernel emulator.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.spec.ops.attention import compressed_mask
from acl_rocm.ops.attention_grad_cudnn import PATH_ENV
from tests.conftest import assert_close
from tests.rocm.against_reference import assert_every_sample_matches
from tests.rocm.test_gpu_attention_grad import OPS, REL, _as_bnsd, _as_bsh, _call, _check

pytestmark = pytest.mark.gpu


@pytest.fixture
def flash_grad(rocm: Backend, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The backward's runner with ``ACL_ATTENTION_GRAD_PATH=flash`` on ``rocm``."""
    monkeypatch.setattr(rocm, "environ", {**rocm.environ, PATH_ENV: "flash"})  # type: ignore[attr-defined]
    runner = rocm.attention_grad  # type: ignore[attr-defined]
    runner.flash.last_instance = None
    return runner


@pytest.mark.parametrize("op", [op for op in OPS if op.startswith("FlashAttentionScoreGrad")])
def test_every_sample_under_the_flash_path(rocm: Backend, reference: Backend, flash_grad: Any, op: str) -> None:
    assert_every_sample_matches(rocm, reference, op)
    assert flash_grad.flash.last_instance is not None, "no sample ran the flash kernels"


SHAPES = {
    "causal top-left BNSD GQA 8/2 300x300 D128": (
        (1, 8, 2, 300, 300, 128), {"attenMaskOptional": compressed_mask(), "sparseMode": 2}, _as_bnsd),
    "causal bottom-right BSND 200x333 D64": (
        (2, 4, 4, 200, 333, 64), {"attenMaskOptional": compressed_mask(), "sparseMode": 3}, None),
    "band BSH 300x420 D64 pre 64 next 16": (
        (2, 4, 4, 300, 420, 64),
        {"attenMaskOptional": compressed_mask(), "sparseMode": 4, "preTokens": 64, "nextTokens": 16}, _as_bsh),
    "no mask BSND GQA 4/1 257x129 D128": ((1, 4, 1, 257, 129, 128), {}, None),
    "no mask BSND 100x90 D96": ((1, 2, 2, 100, 90, 96), {}, None),
    "sink causal BSND GQA 8/2 300x300 D64": (
        (1, 8, 2, 300, 300, 64),
        {"sink": np.linspace(-2, 2, 8).astype(np.float32), "attenMaskOptional": compressed_mask(), "sparseMode": 2},
        None),
}  # fmt: skip


@pytest.mark.parametrize("case", list(SHAPES))
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["float16", "bf16"])
def test_flash_path_matches_the_reference(
    rocm: Backend, reference: Backend, flash_grad: Any, case: str, dtype: Any
) -> None:
    dims, extra, relayout = SHAPES[case]
    op, args = _call(np.random.default_rng(21), dtype, *dims, **extra)
    if relayout is not None:
        args = relayout(args)
    flash_grad.last_path = None
    _check(rocm, reference, op, args, f"flash {case}")
    assert flash_grad.last_path == "flash", case


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["float16", "bf16"])
def test_flash_path_with_an_explicit_mask(rocm: Backend, reference: Backend, flash_grad: Any, dtype: Any) -> None:
    rng = np.random.default_rng(22)
    mask = rng.uniform(size=(2, 1, 300, 420)) < 0.3
    mask[:, :, 17, :] = True  # fully masked rows: dQ 0 there
    op, args = _call(rng, dtype, 2, 4, 2, 300, 420, 64, attenMaskOptional=mask, preTokens=60, nextTokens=7)
    flash_grad.last_path = None
    _check(rocm, reference, op, args, "flash sparse 0 mask + window GQA 4/2")
    assert flash_grad.last_path == "flash"


LARGE = {
    "B2 N8 S1024 D128 causal": ((2, 8, 8, 1024, 1024, 128), True),
    "B2 N8/2 S1024 D128 causal GQA": ((2, 8, 2, 1024, 1024, 128), True),
    "B2 N8 S1024 D64 causal": ((2, 8, 8, 1024, 1024, 64), True),
    "B2 N8 S1024 D64 no mask": ((2, 8, 8, 1024, 1024, 64), False),
}


@pytest.mark.parametrize("case", list(LARGE))
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["float16", "bf16"])
def test_large_shapes_against_the_composed_path(
    rocm: Backend, flash_grad: Any, monkeypatch: pytest.MonkeyPatch, case: str, dtype: Any
) -> None:
    dims, causal = LARGE[case]
    extra = {"attenMaskOptional": compressed_mask(), "sparseMode": 3} if causal else {}
    op, args = _call(np.random.default_rng(23), dtype, *dims, **extra)
    args = _as_bnsd(args)
    flash_grad.last_path = None
    flash = eager.run(op, rocm, **args)
    assert flash_grad.last_path == "flash"
    again = eager.run(op, rocm, **args)
    for name, value in flash.items():  # deterministic: no atomics, every element written once
        assert np.array_equal(np.asarray(value).view(np.uint16), np.asarray(again[name]).view(np.uint16)), name
    monkeypatch.setattr(rocm, "environ", {**rocm.environ, PATH_ENV: "blas"})  # type: ignore[attr-defined]
    composed = eager.run(op, rocm, **args)
    assert flash_grad.last_path == "blas"
    for name, value in composed.items():
        c = np.asarray(value, np.float64)
        rel = REL[np.dtype(dtype)]
        scale = float(np.max(np.abs(c), initial=1e-30))
        assert_close(np.asarray(flash[name]), value, atol=rel * scale, rtol=rel)

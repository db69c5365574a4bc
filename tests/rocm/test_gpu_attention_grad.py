"""FlashAttentionScoreGrad (and V2-V4) and RotaryPositionEmbeddingGrad on the GPU, against the reference (GPU tier).

Every sample of every version under the op's accuracy class (fp16/bf16: the float32 bound plus P's and dS's
roundings to the input type, what fused flash backwards do), contiguous,
padded and transposed; then tile-crossing shapes in every dtype (hundreds of rows and keys, D 64/128, GQA,
causal, band, a full mask with fully masked rows, pse, a sink) compared normwise: at hundreds of keys the
GPU's fp32 GEMMs and the reference's float64 sums differ by fp32's rounding of the largest terms, which an
elementwise relative check cannot grant where dS's terms cancel. Outputs start as sentinels, so a kernel
that writes nothing cannot pass. RotaryPositionEmbeddingGrad also runs at a prefill's size in every mode and dtype
under its class. ``ACL_ROCM_EMULATE=1`` runs the samples on the CPU kernel emulator.

The first tests force the composed path (``ACL_ATTENTION_GRAD_PATH=blas``: what AMD runs, and NVIDIA where cuDNN
refuses a call). The ``cudnn`` tests force ``ACL_ATTENTION_GRAD_PATH=cudnn`` (cuDNN's SDPA backward, the NVIDIA
default) and assert it ran:
causal (top-left and bottom-right), no mask, the sparseMode 4 band, GQA, D 64 / 128, BSND / BNSD / BSH, fp16 and
bf16, under the same normwise bounds (the band xfails where the installed cuDNN refuses its graph: the composed path
then ran, and was checked); then every sample under the op's class with that path on (the samples it
cannot take fall back to the composed path), the check that decides whether it may become the default; and the
bench's causal layout with ``ACL_ATTENTION_GRAD_CUDNN_PLAN=tune`` (every plan timed, the fastest kept), its square
bottom-right mask as given and as top-left (``ACL_ATTENTION_GRAD_CUDNN_SQUARE``, top-left the default), under the
same normwise bound and the op's class.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.spec.ops import all_specs
from acl_core.spec.ops.attention import UNBOUNDED, compressed_mask
from acl_rocm.ops.attention_grad import GradProblem
from acl_rocm.ops.attention_grad_cudnn import PATH_ENV, PLAN_ENV, SQUARE_ENV
from tests.conftest import assert_close
from tests.rocm.against_reference import assert_every_sample_matches, assert_matches_reference, class_problems
from tests.rocm.prefill import sentinel_outputs

pytestmark = pytest.mark.gpu

OPS = sorted(n for n, s in all_specs().items() if s.family == "attention_grad")
REL = {np.dtype(np.float32): 2e-5, np.dtype(np.float16): 4e-3, np.dtype(ml_dtypes.bfloat16): 2e-2}
"""Normwise bound per output dtype: a few of its roundings of the output's largest magnitude."""


@pytest.fixture
def composed(rocm: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    """The composed (BLAS) path on ``rocm`` for the test's duration."""
    monkeypatch.setattr(rocm, "environ", {**rocm.environ, PATH_ENV: "blas"})  # type: ignore[attr-defined]


@pytest.mark.usefixtures("composed")
@pytest.mark.parametrize("op", OPS)
def test_every_sample_matches_the_reference(rocm: Backend, reference: Backend, op: str) -> None:
    assert_every_sample_matches(rocm, reference, op)


def _call(
    rng: np.random.Generator, dtype: Any, b: int, nq: int, nkv: int, sq: int, skv: int, d: int, **extra: Any
) -> tuple[str, dict[str, Any]]:
    """A BSND backward call with the reference forward's statistics and output."""
    q, k, v, dy = (
        rng.uniform(-1, 1, (b, s, n, d)).astype(dtype) for n, s in ((nq, sq), (nkv, skv), (nkv, skv), (nq, sq))
    )
    sink = extra.pop("sink", None)
    attrs = {"scaleValue": 1 / np.sqrt(d), "keepProb": 1.0, "preTokens": UNBOUNDED, "nextTokens": UNBOUNDED}
    attrs |= {"headNum": nq, "inputLayout": "BSND", "innerPrecise": 0, "sparseMode": 0, **extra}
    pse = attrs.pop("pse", None)
    forward = "FlashAttentionScoreV3" if sink is not None else "FlashAttentionScore"
    fwd_sink = {"sinkOptional": sink} if sink is not None else {}
    fwd = eager.run(forward, "reference", query=q, key=k, value=v, realShiftOptional=pse, **attrs, **fwd_sink)
    args = {"query": q, "keyIn": k, "value": v, "dy": dy, "pseShiftOptional": pse, **attrs}
    args |= {"softmaxMaxOptional": fwd["softmaxMaxOut"], "softmaxSumOptional": fwd["softmaxSumOut"]}
    args |= {"attentionInOptional": fwd["attentionOutOut"]}
    if sink is not None:
        args["sinkInOptional"] = sink
    return ("FlashAttentionScoreGradV3" if sink is not None else "FlashAttentionScoreGrad"), args


def _check(rocm: Backend, reference: Backend, op: str, args: dict[str, Any], note: str) -> None:
    expected = eager.run(op, reference, **args)
    actual = eager.run(op, rocm, **args, **sentinel_outputs(op, args, expected))
    for name, value in expected.items():
        got = actual[name]
        assert got.dtype == value.dtype and got.shape == value.shape, f"{note}: {name}"
        e = value.astype(np.float64)
        scale = float(np.max(np.abs(e), initial=1e-30))
        rel = REL.get(got.dtype, 2e-5)
        try:
            assert_close(got, value, atol=rel * scale, rtol=rel)
        except AssertionError as exc:
            raise AssertionError(f"{op} [{note}] {name}\n{exc}") from None


DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16]


@pytest.mark.usefixtures("composed")
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float16", "bf16"])
def test_causal_gqa_across_many_row_blocks(rocm: Backend, reference: Backend, dtype: Any) -> None:
    op, args = _call(np.random.default_rng(1), dtype, 1, 8, 2, 1100, 1300, 128)
    args |= {"attenMaskOptional": compressed_mask(), "sparseMode": 3}  # key window: row blocks skip keys
    _check(rocm, reference, op, args, "causal 1100x1300 D=128 GQA 8/2")


@pytest.mark.usefixtures("composed")
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float16", "bf16"])
def test_masks_band_pse_and_sink(rocm: Backend, reference: Backend, dtype: Any) -> None:
    rng = np.random.default_rng(2)
    mask = rng.uniform(size=(2, 1, 300, 420)) < 0.3
    mask[:, :, 17, :] = True  # fully masked rows: dQ 0 there
    cases = {
        "sparse 0 mask + window": {"attenMaskOptional": mask, "preTokens": 60, "nextTokens": 7},
        "sparse 4 band": {"attenMaskOptional": compressed_mask(), "sparseMode": 4, "preTokens": 33, "nextTokens": 5},
        "pse": {"pse": rng.uniform(-1, 1, (2, 4, 300, 420)).astype(dtype)},
        "sink": {"sink": rng.uniform(-3, 3, 4).astype(np.float32), "attenMaskOptional": mask},
    }
    for note, extra in cases.items():
        op, args = _call(rng, dtype, 2, 4, 4, 300, 420, 64, **extra)
        _check(rocm, reference, op, args, note)


@pytest.mark.usefixtures("composed")
def test_a_small_budget_gives_the_same_gradients(rocm: Backend, reference: Backend) -> None:
    runner = rocm.attention_grad  # type: ignore[attr-defined]
    op, args = _call(np.random.default_rng(3), ml_dtypes.bfloat16, 1, 4, 2, 700, 700, 64)
    args |= {"attenMaskOptional": compressed_mask(), "sparseMode": 2}
    saved = runner.budget
    runner.budget = 1 << 20  # a few dozen rows of one head per chunk
    try:
        assert len(runner.chunks(_problem(args))) > 20
        _check(rocm, reference, op, args, "1 MiB budget")
    finally:
        runner.budget = saved


def _problem(args: dict[str, Any]) -> GradProblem:
    """The runner's view of a BSND call's dims and causal window (enough to plan its chunks)."""
    b, sq, nq, d = args["query"].shape
    skv, nkv = args["keyIn"].shape[1:3]
    return GradProblem(b, nq, nkv, sq, skv, d, D.ACL_BF16, "BSND", 0.0, (-(sq + skv), 0, 0), None, None, None, {})


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float16", "bf16"])
def test_rope_grad_at_prefill_size(rocm: Backend, reference: Backend, mode: int, dtype: Any) -> None:
    rng = np.random.default_rng(mode)
    dy, x = (rng.uniform(-2, 2, (2, 1024, 16, 128)).astype(dtype) for _ in range(2))
    angles = rng.uniform(0, 2 * np.pi, (1, 1024, 1, 128))
    args = {"dy": dy, "cos": np.cos(angles).astype(dtype), "sin": np.sin(angles).astype(dtype), "xOptional": x}
    assert_matches_reference(rocm, reference, "RotaryPositionEmbeddingGrad", {**args, "mode": mode}, "contiguous",
                             f"BSND 2x1024x16x128 mode {mode}")  # fmt: skip


# ----------------------------------------------------------------------------- the cuDNN path (opt-in)
@pytest.fixture
def cudnn_grad(rocm: Backend, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The backward's runner with ``ACL_ATTENTION_GRAD_PATH=cudnn`` on ``rocm`` (skipped where cuDNN is absent)."""
    runner = rocm.attention_grad  # type: ignore[attr-defined]
    why = runner.cudnn.refusal()
    if why is not None:
        pytest.skip(f"no cuDNN here: {why}")
    monkeypatch.setattr(rocm, "environ", {**rocm.environ, PATH_ENV: "cudnn"})  # type: ignore[attr-defined]
    return runner


def _as_bnsd(args: dict[str, Any]) -> dict[str, Any]:
    """A BSND call of :func:`_call` laid out as BNSD."""
    out = dict(args, inputLayout="BNSD")
    for name in ("query", "keyIn", "value", "dy", "attentionInOptional"):
        out[name] = np.ascontiguousarray(np.swapaxes(args[name], 1, 2))
    return out


def _as_bsh(args: dict[str, Any]) -> dict[str, Any]:
    """A BSND call of :func:`_call` laid out as BSH."""
    out = dict(args, inputLayout="BSH")
    for name in ("query", "keyIn", "value", "dy", "attentionInOptional"):
        b, s, n, d = args[name].shape
        out[name] = args[name].reshape(b, s, n * d)
    return out


CUDNN_CASES = {
    "causal bottom-right BNSD GQA 8/2 1024x1024 D128": (
        (1, 8, 2, 1024, 1024, 128), {"attenMaskOptional": compressed_mask(), "sparseMode": 3}, _as_bnsd),
    "causal top-left BSND GQA 4/1 520x384 D128": (
        (1, 4, 1, 520, 384, 128), {"attenMaskOptional": compressed_mask(), "sparseMode": 2}, None),
    "no mask BSND 384x512 D64": ((2, 4, 4, 384, 512, 64), {}, None),
    "band BSND 300x420 D64 pre 64 next 16": (
        (2, 4, 4, 300, 420, 64),
        {"attenMaskOptional": compressed_mask(), "sparseMode": 4, "preTokens": 64, "nextTokens": 16}, None),
    "causal bottom-right BSH 256x256 D128": (
        (2, 4, 4, 256, 256, 128), {"attenMaskOptional": compressed_mask(), "sparseMode": 3}, _as_bsh),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CUDNN_CASES))
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["float16", "bf16"])
def test_cudnn_path_matches_the_reference(
    rocm: Backend, reference: Backend, cudnn_grad: Any, case: str, dtype: Any
) -> None:
    dims, extra, relayout = CUDNN_CASES[case]
    op, args = _call(np.random.default_rng(11), dtype, *dims, **extra)
    if relayout is not None:
        args = relayout(args)
    cudnn_grad.last_path = None
    _check(rocm, reference, op, args, f"cudnn {case}")
    refused = [why for why in cudnn_grad.cudnn._graphs.values() if isinstance(why, str)]
    if cudnn_grad.last_path != "cudnn" and case.startswith("band") and refused:
        pytest.xfail(f"this cuDNN refuses the band's graph (the composed path ran, correctly): {refused[0]}")
    assert cudnn_grad.last_path == "cudnn", f"{case}: the cuDNN path did not run ({refused or 'see the debug log'})"


def test_every_sample_under_the_cudnn_path(rocm: Backend, reference: Backend, cudnn_grad: Any) -> None:
    assert_every_sample_matches(rocm, reference, "FlashAttentionScoreGrad")
    built = [b for b in cudnn_grad.cudnn._graphs.values() if not isinstance(b, str)]
    assert built, "no sample ran on cuDNN"


@pytest.mark.parametrize("square", ["bottom-right", "top-left"])
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["float16", "bf16"])
def test_cudnn_tuned_plan_matches_the_reference(
    rocm: Backend, reference: Backend, cudnn_grad: Any, monkeypatch: pytest.MonkeyPatch, dtype: Any, square: str
) -> None:
    switches = {PLAN_ENV: "tune", SQUARE_ENV: square}
    monkeypatch.setattr(rocm, "environ", {**rocm.environ, **switches})  # type: ignore[attr-defined]
    op, args = _call(np.random.default_rng(12), dtype, 1, 8, 8, 1024, 1024, 128)
    args = _as_bnsd(args | {"attenMaskOptional": compressed_mask(), "sparseMode": 3})  # the bench row's layout
    cudnn_grad.last_path = None
    _check(rocm, reference, op, args, f"cudnn tuned causal BNSD 1024x1024 D128, square as {square}")
    assert cudnn_grad.last_path == "cudnn"
    tuned = [b for b in cudnn_grad.cudnn._graphs.values() if not isinstance(b, str) and b.plans]
    assert tuned and all(b.index is not None for b in tuned)
    expected = eager.run(op, reference, **args)
    actual = eager.run(op, rocm, **args)
    problems = class_problems(op, args, actual, expected)
    assert not problems, "; ".join(p.message for p in problems)

"""FlashAttentionScoreGrad's fp16/bf16 class is a real bound on what every fused flash backward computes.

A float64 simulation of that backward (:func:`flash_backward`: S, P (through the log-sum-exp), dP, D and dS in
float32; P rounded to the 16-bit input type before dV = Pᵀ·dO, dS rounded before dQ = scale·dS·K and
dK = scale·dSᵀ·Q, dS formed from P or from its rounding) must sit inside the class on every fp16/bf16 sample of the
four versions and on larger, peaked and masked calls; its error before the outputs' own rounding, over the class's
``γ·S16``, is the ratio reported (below 1 everywhere, and not far below: the bound is not vacuous). The class's
model backend (P and dS rounded, tests/conformance/mutants/mutant_attention_grad.py) passes the suite's full mode;
the defects it must still catch are that module's mutants (tests/conformance/test_mutants.py runs them).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from acl_conformance import run
from acl_core import eager
from acl_core.dtypes import DataType as D
from acl_core.dtypes import from_numpy
from acl_core.spec.accuracy import accuracy_of
from acl_core.spec.ops import attention as A
from acl_core.spec.ops import attention_grad as G
from acl_core.spec.ops import get_spec
from tests.conformance.mutants.mutant_attention_grad import FlashNumericsBackend
from tests.rocm.against_reference import class_problems

VERSIONS = ("FlashAttentionScoreGrad", "FlashAttentionScoreGradV2", "FlashAttentionScoreGradV3",
            "FlashAttentionScoreGradV4")  # fmt: skip
F32 = np.float32


def _f32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, np.float64).astype(F32).astype(np.float64)


def flash_backward(args: dict[str, Any], ds_from_rounded_p: bool = False, exact: bool = False) -> dict[str, Any]:
    """dQ, dK, dV in float64 (unrounded) as a fused flash backward forms them; ``exact``: no rounding at all."""
    layout, nq = str(args["inputLayout"]), int(args["headNum"])
    sixteen = np.asarray(args["query"]).dtype
    fl32 = (lambda x: x) if exact else _f32
    fl16 = (lambda x: x) if exact else (lambda x: np.asarray(x).astype(sixteen).astype(np.float64))
    q = G._bnsd(args["query"], layout, nq)
    d = q.shape[-1]
    nkv = np.shape(args["keyIn"])[-1] // d if layout in ("BSH", "SBH") else 0
    k, v = G._bnsd(args["keyIn"], layout, nkv), G._bnsd(args["value"], layout, nkv)
    do, o = G._bnsd(args["dy"], layout, nq), G._bnsd(args["attentionInOptional"], layout, nq)
    group = nq // k.shape[1]
    kx, vx = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scale = float(args["scaleValue"])
    s = np.einsum("bnqd,bnkd->bnqk", q, kx)
    if args.get("pseShiftOptional") is not None:
        s = s + np.asarray(args["pseShiftOptional"], np.float64)
    row_max = np.asarray(args["softmaxMaxOptional"], np.float64)[..., :1]
    row_sum = np.asarray(args["softmaxSumOptional"], np.float64)[..., :1]
    keep = G._keep(args, q.shape[2], k.shape[2]) & (row_sum > 0)
    with np.errstate(all="ignore"):
        lse = fl32(np.where(np.isfinite(row_max), row_max, 0.0) + fl32(np.log(np.where(row_sum > 0, row_sum, 1.0))))
        p = fl32(np.where(keep, np.exp(fl32(scale * fl32(s)) - lse), 0.0))
    p16 = fl16(p)
    dp = fl32(np.einsum("bnqd,bnkd->bnqk", do, vx))
    delta = fl32(np.einsum("bnqd,bnqd->bnq", do, o))[..., None]
    ds16 = fl16(fl32((p16 if ds_from_rounded_p else p) * fl32(dp - delta)))
    kv_shape = (q.shape[0], k.shape[1], group, *k.shape[2:])
    grads = {
        "dqOut": scale * np.einsum("bnqk,bnkd->bnqd", ds16, kx),
        "dkOut": (scale * np.einsum("bnqk,bnqd->bnkd", ds16, q)).reshape(kv_shape).sum(axis=2),
        "dvOut": np.einsum("bnqk,bnqd->bnkd", p16, do).reshape(kv_shape).sum(axis=2),
    }
    return {name: G._layout(g, layout) for name, g in grads.items()}


def _half_samples() -> list[tuple[str, str, dict[str, Any]]]:
    """Every fp16/bf16 sample of the four versions, then larger calls: causal GQA, peaked scores, a mask, pse."""
    found = [
        (op, s.note, dict(s.args))
        for op in VERSIONS
        for s in get_spec(op).samples(np.random.default_rng(0))  # type: ignore[misc]
        if np.asarray(s.args["query"]).dtype != F32
    ]
    rng = np.random.default_rng(7)
    for dt in (D.ACL_FLOAT16, D.ACL_BF16):
        causal = A._fa_case(rng, dt, "BSND", 1, 4, 2, 96, 96, 64, attenMaskOptional=A.compressed_mask(), sparseMode=2)
        found.append(("FlashAttentionScoreGrad", f"{dt.short} causal GQA 96x96 D64", G.grad_case(rng, causal)))
        peaked = A._fa_case(rng, dt, "BNSD", 1, 2, 2, 40, 70, 32, scaleValue=2.0)  # P spans into fp16's subnormals
        found.append(("FlashAttentionScoreGrad", f"{dt.short} peaked scores", G.grad_case(rng, peaked)))
        mask = rng.uniform(size=(1, 2, 24, 50)) < 0.4
        masked = A._fa_case(rng, dt, "BNSD", 1, 2, 2, 24, 50, 16, attenMaskOptional=mask, preTokens=30, nextTokens=3)
        found.append(("FlashAttentionScoreGrad", f"{dt.short} mask and window", G.grad_case(rng, masked)))
        pse = rng.uniform(-2, 2, (1, 2, 20, 30)).astype(dt.numpy)
        with_pse = A._fa_case(rng, dt, "BNSD", 1, 2, 2, 20, 30, 16, realShiftOptional=pse)
        found.append(("FlashAttentionScoreGrad", f"{dt.short} pse", G.grad_case(rng, with_pse)))
    return found


HALF = _half_samples()


def test_half_calls_take_the_16bit_composite_class_and_float32_calls_keep_theirs() -> None:
    for op in VERSIONS:
        for s in get_spec(op).samples(np.random.default_rng(0)):  # type: ignore[misc]
            f32 = np.asarray(s.args["query"]).dtype == F32
            assert accuracy_of(get_spec(op), s.args) is (G._GRAD_F32 if f32 else G._GRAD_16), (op, s.note)


def test_the_16bit_scale_contains_the_float32_one() -> None:
    for op, note, args in HALF[:20]:
        expected = eager.run(op, "reference", **args)
        s32, s16 = G._grad_scale(args, expected), G._grad_scale_16(args, expected)
        assert s32.keys() == s16.keys()
        assert all(np.all(s16[n] >= s32[n]) for n in s32), note


def _ratio(op: str, args: dict[str, Any], actual: dict[str, Any], expected: dict[str, Any]) -> float:
    """max |actual − exact| / (γ·S16) over dQ, dK, dV: the share of the class's bound the roundings use."""
    accuracy = accuracy_of(get_spec(op), args)
    assert accuracy is G._GRAD_16 and accuracy.length_of is not None
    reference = eager.run(op, "reference", **args)
    scale = G._grad_scale_16(args, reference)
    gamma = accuracy.gamma(
        accuracy.length_of(args, reference) + accuracy.steps, from_numpy(np.dtype(args["query"].dtype))
    )
    with np.errstate(all="ignore"):
        ratios = [np.abs(actual[n] - expected[n]) / (gamma * scale[n]) for n in expected]
    return max(float(np.max(np.where(np.isfinite(r), r, 0.0), initial=0.0)) for r in ratios)


@pytest.mark.parametrize("ds_from_rounded_p", [False, True], ids=["dS from P", "dS from rounded P"])
def test_a_flash_backward_sits_inside_the_class(ds_from_rounded_p: bool) -> None:
    worst: dict[str, float] = {}
    for op, note, args in HALF:
        simulated = flash_backward(args, ds_from_rounded_p)
        reference = eager.run(op, "reference", **args)
        rounded = {**reference, **{n: v.astype(reference[n].dtype) for n, v in simulated.items()}}
        problems = class_problems(op, args, rounded, reference)
        assert not problems, f"{op} [{note}]: " + "; ".join(p.message for p in problems)
        worst[note] = _ratio(op, args, simulated, flash_backward(args, exact=True))
    print("worst share of γ·S16 used by P's and dS's roundings:", {n: round(r, 3) for n, r in worst.items()})
    assert max(worst.values()) < 1.0
    assert max(worst.values()) > 0.3  # the bound is near what the roundings can reach, not vacuous


def test_the_flash_numerics_model_passes_the_full_suite() -> None:
    report = run(FlashNumericsBackend(), mode="full", ops="FlashAttentionScoreGrad*", seed=0)
    assert report.ok, [f"{o.op}[{o.case}]: {o.message}" for o in report.failed][:5]

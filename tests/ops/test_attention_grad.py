"""The reference's attention backward against torch autograd of an eager float64 attention.

The forward runs on the reference (FlashAttentionScore / V3 for sinks) to give the saved statistics and
output, the backward on the reference; torch differentiates ``softmax(scale·(QKᵀ + pse) masked)·V``
written here independently (GQA by repeat_interleave, masks as boolean keep arrays, a sink as one more
logit without a value row). Plus the CANN error codes the family docstring promises.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from acl_core import eager
from acl_core.errors import AclnnError
from acl_core.spec.ops import all_specs
from acl_core.spec.ops.attention import UNBOUNDED, compressed_mask
from tests.conftest import assert_close
from tests.ops.test_attention import from_layout, to_layout

GRAD_OPS = sorted(s.name for s in all_specs().values() if s.family == "attention_grad")


def _torch_grads(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    dout: np.ndarray,
    keep: np.ndarray,
    scale: float,
    pse: np.ndarray | None = None,
    sink: np.ndarray | None = None,
) -> tuple[np.ndarray, ...]:
    """dq, dk, dv (and dsink) of masked softmax attention on [B,N,S,D] float64 tensors, by autograd."""
    tq, tk, tv = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (q, k, v))
    group = q.shape[1] // k.shape[1]
    scores = tq @ tk.repeat_interleave(group, dim=1).transpose(-1, -2)
    if pse is not None:
        scores = scores + torch.tensor(pse, dtype=torch.float64)
    scores = (scale * scores).masked_fill(~torch.tensor(keep), float("-inf"))
    ts = None
    if sink is not None:
        ts = torch.tensor(sink, dtype=torch.float64, requires_grad=True)
        column = ts[None, :, None, None].expand(*scores.shape[:3], 1)
        probs = torch.softmax(torch.cat([scores, column], dim=-1), dim=-1)[..., :-1]
    else:
        probs = torch.nan_to_num(torch.softmax(scores, dim=-1))  # fully masked rows: zeros
    out = probs @ tv.repeat_interleave(group, dim=1)
    out.backward(torch.tensor(dout, dtype=torch.float64))
    grads = [t.grad.numpy() for t in (tq, tk, tv)]  # type: ignore[union-attr]
    if ts is not None:
        grads.append(ts.grad.numpy())  # type: ignore[union-attr]
    return tuple(grads)


def _run(
    layout: str,
    b: int,
    nq: int,
    nkv: int,
    sq: int,
    skv: int,
    d: int,
    keep: np.ndarray,
    sink: bool = False,
    pse: bool = False,
    **attrs: Any,
) -> None:
    rng = np.random.default_rng(sq * 7 + skv)
    q, k, v, dout = (
        rng.uniform(-2, 2, (b, n, s, d)).astype(np.float32) for n, s in ((nq, sq), (nkv, skv), (nkv, skv), (nq, sq))
    )
    shift = rng.uniform(-1, 1, (b, nq, sq, skv)).astype(np.float32) if pse else None
    sinks = rng.uniform(-3, 3, nq).astype(np.float32) if sink else None
    scale = 0.37
    common = {
        "query": to_layout(q, layout),
        "value": to_layout(v, layout),
        "scaleValue": scale,
        "headNum": nq,
        "inputLayout": layout,
        "preTokens": attrs.pop("preTokens", UNBOUNDED),
        "nextTokens": attrs.pop("nextTokens", UNBOUNDED),
        **attrs,
    }
    forward = "FlashAttentionScoreV3" if sink else "FlashAttentionScore"
    fwd_extra = {"sinkOptional": sinks} if sink else {}
    fwd = eager.run(
        forward,
        "reference",
        key=to_layout(k, layout),
        realShiftOptional=shift,
        **common,
        **fwd_extra,
    )
    grad = "FlashAttentionScoreGradV3" if sink else "FlashAttentionScoreGrad"
    back_extra = {"sinkInOptional": sinks} if sink else {}
    got = eager.run(
        grad,
        "reference",
        keyIn=to_layout(k, layout),
        dy=to_layout(dout, layout),
        pseShiftOptional=shift,
        softmaxMaxOptional=fwd["softmaxMaxOut"],
        softmaxSumOptional=fwd["softmaxSumOut"],
        attentionInOptional=fwd["attentionOutOut"],
        **common,
        **back_extra,
    )
    expected = _torch_grads(q, k, v, dout, keep, scale, shift, None if sinks is None else sinks.astype(np.float64))
    for name, want in zip(("dqOut", "dkOut", "dvOut"), expected):
        heads = nq if name == "dqOut" else nkv
        assert_close(from_layout(got[name], layout, heads), want, atol=1e-5, rtol=1e-5)
    if sink:
        assert_close(got["dsinkOut"], expected[3], atol=1e-5, rtol=1e-5)


def _band(sq: int, skv: int, lo: int, hi: int, shift: int = 0) -> np.ndarray:
    off = np.arange(skv)[None, :] - np.arange(sq)[:, None] - shift
    return (off >= lo) & (off <= hi)


@pytest.mark.parametrize("layout", ["BSH", "SBH", "BSND", "BNSD"])
def test_dense_matches_autograd_in_every_layout(layout: str) -> None:
    _run(layout, 2, 4, 2, 5, 7, 8, np.ones((5, 7), bool))


def test_mqa_with_pse_matches_autograd() -> None:
    _run("BNSD", 1, 4, 1, 4, 6, 8, np.ones((4, 6), bool), pse=True)


def test_full_mask_with_a_fully_masked_row_matches_autograd() -> None:
    mask = np.random.default_rng(1).random((6, 9)) < 0.4
    mask[2] = True
    _run("BSND", 2, 2, 2, 6, 9, 8, ~mask, attenMaskOptional=mask, innerPrecise=2)


@pytest.mark.parametrize(
    ("mode", "sq", "skv", "keep"),
    [
        (2, 5, 8, _band(5, 8, -99, 0)),
        (3, 5, 8, _band(5, 8, -99, 0, 3)),
        (3, 8, 5, _band(8, 5, -99, 0, -3)),
        (4, 9, 7, _band(9, 7, -2, 1, -2)),
    ],
)
def test_sparse_modes_match_autograd(mode: int, sq: int, skv: int, keep: np.ndarray) -> None:
    extra = {"preTokens": 2, "nextTokens": 1} if mode == 4 else {}
    _run("BSH", 1, 2, 2, sq, skv, 8, keep, attenMaskOptional=compressed_mask(), sparseMode=mode, **extra)


def test_sink_gradient_matches_autograd() -> None:
    mask = np.zeros((5, 6), bool)
    mask[1] = True  # a row with only the sink: its dq is 0, its dsink term p_sink·D = 1·0
    _run("BNSD", 2, 4, 2, 5, 6, 8, ~mask, sink=True, attenMaskOptional=mask)


# ----------------------------------------------------------------------------- errors
@pytest.mark.parametrize("op", GRAD_OPS)
def test_samples_run_and_errors_carry_their_codes(op: str) -> None:
    spec = all_specs()[op]
    assert spec.samples is not None and spec.error_samples is not None
    rng = np.random.default_rng(3)
    for s in spec.samples(rng):
        eager.run(op, "reference", op_args=dict(s.args))
    for case in spec.error_samples(rng):
        with pytest.raises(AclnnError) as info:
            eager.run(op, "reference", op_args=dict(case.args))
        assert int(info.value.code) == case.code, case.note


# ----------------------------------------------------------------------------- RotaryPositionEmbeddingGrad
def _torch_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mode: int) -> torch.Tensor:
    """RotaryPositionEmbedding's forward written here: (x in the mode's order)·cos + (its rotation)·sin."""
    if mode == 0:
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat([-x2, x1], dim=-1) * sin
    if mode == 1:
        turned = torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)
        return x * cos + turned * sin
    if mode == 2:
        x1, x2, x3, x4 = x.chunk(4, dim=-1)
        return x * cos + torch.cat([-x2, x1, -x4, x3], dim=-1) * sin
    evens, odds = x[..., 0::2], x[..., 1::2]
    return torch.cat([evens, odds], dim=-1) * cos + torch.cat([-odds, evens], dim=-1) * sin


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
@pytest.mark.parametrize(
    ("xs", "cs"), [((2, 3, 5, 8), (1, 1, 5, 8)), ((2, 5, 3, 8), (2, 5, 1, 8)), ((6, 2, 8), (6, 1, 8))]
)
def test_rope_grad_matches_autograd(mode: int, xs: tuple[int, ...], cs: tuple[int, ...]) -> None:
    rng = np.random.default_rng(mode)
    x, dy = (rng.uniform(-2, 2, xs).astype(np.float32) for _ in range(2))
    angles = rng.uniform(0, 2 * np.pi, cs)
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    got = eager.run("RotaryPositionEmbeddingGrad", "reference", dy=dy, cos=cos, sin=sin, xOptional=x, mode=mode)
    tx, tc, ts = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (x, cos, sin))
    _torch_rope(tx, tc, ts, mode).backward(torch.tensor(dy, dtype=torch.float64))
    for name, t in (("dxOut", tx), ("dcosOut", tc), ("dsinOut", ts)):
        assert_close(got[name], t.grad.numpy(), atol=1e-5, rtol=1e-5)  # type: ignore[union-attr]


def test_rope_grad_without_x_leaves_dcos_and_dsin_untouched() -> None:
    rng = np.random.default_rng(9)
    dy = rng.uniform(-1, 1, (1, 2, 4, 8)).astype(np.float32)
    cos = sin = np.full((1, 1, 4, 8), 0.5, np.float32)
    sentinel = np.full((1, 1, 4, 8), 7.0, np.float32)
    got = eager.run(
        "RotaryPositionEmbeddingGrad", "reference", dy=dy, cos=cos, sin=sin, mode=0, dcosOut=sentinel, dsinOut=sentinel
    )
    assert (got["dcosOut"] == 7.0).all() and (got["dsinOut"] == 7.0).all()
    assert got["dxOut"].shape == dy.shape

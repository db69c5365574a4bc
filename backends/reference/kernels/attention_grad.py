"""Reference kernels of the attention backward (FlashAttentionScoreGrad and its versions, RotaryPositionEmbeddingGrad).

P is recomputed from Q, K, the forward's keep rules (:func:`fa_keep`) and the saved statistics, then
``dV = Pᵀ dO``, ``dP = dO Vᵀ``, ``D = rowsum(dO ∘ O)``, ``dS = P ∘ (dP − D)``, ``dQ = scale·dS K`` and
``dK = scale·dSᵀ Q``, summed over each GQA group for dK and dV (the family docstring in
:mod:`acl_core.spec.ops.attention_grad` states the rules).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from acl_reference.call import RefCall
from acl_reference.kernels import kernel
from acl_reference.kernels.attention import F64, fa_keep, from_bnsd, rotate, to_bnsd

Array = np.ndarray


def probabilities(scores: Array, keep: Array, row_max: Array, row_sum: Array) -> Array:
    """``exp(scores − max) / sum`` where kept and the row's sum is positive, 0 elsewhere ([..., Sq, Skv])."""
    live = keep & (row_sum > 0)[..., None]
    safe_max = np.where(np.isfinite(row_max), row_max, 0.0)[..., None]
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(np.where(live, scores - safe_max, -np.inf))
    return np.where(live, e / np.where(row_sum > 0, row_sum, 1.0)[..., None], 0.0)


Rounding = Callable[[Array], Array]
"""What a backward does to an intermediate before its next product (the reference: nothing)."""


def _exact(x: Array) -> Array:
    return x


@dataclass(frozen=True)
class GradCall:
    """One backward call's operands in float64 [B,N,S,·] (K and V repeated per query head) and its P's inputs."""

    layout: str
    q: Array
    kx: Array
    vx: Array
    dout: Array
    out: Array
    scores: Array
    """QKᵀ (+ pse), before the scale."""
    scale: float
    keep: Array
    row_max: Array
    row_sum: Array
    kv_shape: tuple[int, ...]
    """[B, Nkv, group, Skv, D]: dK and dV before the group sum."""

    def probabilities(self, keep: Array | None = None) -> Array:
        """P from the statistics (``keep`` in place of the call's mask where given)."""
        return probabilities(self.scale * self.scores, self.keep if keep is None else keep, self.row_max, self.row_sum)


def grad_call(k: RefCall) -> GradCall:
    """The operands of one FlashAttentionScoreGrad call, read in float64."""
    plan = k.plan
    layout, nq, nkv = plan["layout"], plan["nq"], plan["nkv"]
    q = to_bnsd(k.read("query", F64), layout, nq)
    key = to_bnsd(k.read("keyIn", F64), layout, nkv)
    value = to_bnsd(k.read("value", F64), layout, nkv)
    group = nq // nkv
    kx, vx = np.repeat(key, group, axis=1), np.repeat(value, group, axis=1)  # query head h reads kv head h // group
    scores = np.einsum("bnqd,bnkd->bnqk", q, kx)
    if k["pseShiftOptional"] is not None:
        scores = scores + k.read("pseShiftOptional", F64)
    keep = np.broadcast_to(fa_keep(k, q.shape[2], key.shape[2]), scores.shape)
    return GradCall(
        layout, q, kx, vx,
        to_bnsd(k.read("dy", F64), layout, nq), to_bnsd(k.read("attentionInOptional", F64), layout, nq),
        scores, k.value("scaleValue"), keep,
        k.read("softmaxMaxOptional", F64)[..., 0], k.read("softmaxSumOptional", F64)[..., 0],
        (q.shape[0], nkv, group, *key.shape[2:]),
    )  # fmt: skip


def grad_products(c: GradCall, p: Array, rounded: Rounding = _exact) -> dict[str, Array]:
    """dS, dQ, dK, dV (per query head) and D from P, ``rounded`` applied to P before dV and to dS before dQ / dK."""
    dp = np.einsum("bnqd,bnkd->bnqk", c.dout, c.vx)
    delta = np.einsum("bnqd,bnqd->bnq", c.dout, c.out)
    ds = rounded(p * (dp - delta[..., None]))
    return {
        "ds": ds,
        "dq": c.scale * np.einsum("bnqk,bnkd->bnqd", ds, c.kx),
        "dk": c.scale * np.einsum("bnqk,bnqd->bnkd", ds, c.q),
        "dv": np.einsum("bnqk,bnqd->bnkd", rounded(p), c.dout),
        "delta": delta,
    }


def write_grads(k: RefCall, c: GradCall, grads: dict[str, Array]) -> None:
    """dqOut, dkOut, dvOut (dK and dV summed over each GQA group) and dsink where the call has a sink."""
    k.write("dqOut", from_bnsd(grads["dq"], c.layout))
    k.write("dkOut", from_bnsd(grads["dk"].reshape(c.kv_shape).sum(axis=2), c.layout))
    k.write("dvOut", from_bnsd(grads["dv"].reshape(c.kv_shape).sum(axis=2), c.layout))
    sink = k.args.get("sink")
    if sink is not None and sink.numel and k.args.get("dsink") is not None:
        row_max, row_sum = c.row_max, c.row_sum
        logit = k.read("sink", F64)[None, :, None]
        with np.errstate(over="ignore", invalid="ignore"):
            p_sink = np.where(row_sum > 0, np.exp(logit - row_max) / np.where(row_sum > 0, row_sum, 1.0), 0.0)
        k.write("dsink", -(p_sink * grads["delta"]).sum(axis=(0, 2)))


@kernel("FlashAttentionScoreGrad")
def flash_attention_score_grad(k: RefCall) -> None:
    """dqOut, dkOut, dvOut (and dsink with a sink) of one training attention call; dpseOut is left untouched."""
    c = grad_call(k)
    write_grads(k, c, grad_products(c, c.probabilities()))


def _unrotate(u: Array, mode: int) -> Array:
    """``Rᵀ u`` for the rotation R of RotaryPositionEmbedding's modes 0-2 (R is a signed pairing: Rᵀ = −R)."""
    return -rotate(u, mode)[1]


def _deinterleave(x: Array) -> Array:
    """Mode 3's order: x's even elements, then its odd ones (what the forward rotates by half)."""
    return np.concatenate([x[..., 0::2], x[..., 1::2]], axis=-1)


def _interleave(u: Array) -> Array:
    """The inverse of :func:`_deinterleave`."""
    half = u.shape[-1] // 2
    out = np.empty_like(u)
    out[..., 0::2], out[..., 1::2] = u[..., :half], u[..., half:]
    return out


@kernel("RotaryPositionEmbeddingGrad")
def rotary_position_embedding_grad(k: RefCall) -> None:
    """dx = dy·cos + Rᵀ(dy·sin); with x, dcos = Σ dy·x' and dsin = Σ dy·R(x') over cos's broadcast dims."""
    dy, cos, sin = (k.read(n, F64) for n in ("dy", "cos", "sin"))
    mode = k.value("mode")
    if mode == 3:  # the forward rotates x's de-interleaved order by half; the gradient interleaves back
        dx = _interleave(dy * cos + _unrotate(dy * sin, 0))
    else:
        dx = dy * cos + _unrotate(dy * sin, mode)
    k.write("dxOut", dx)
    if k["xOptional"] is None:
        return  # CANN computes no dcos / dsin without x: they are left untouched
    straight, turned = rotate(k.read("xOptional", F64), mode)
    axes = tuple(i for i, (c, n) in enumerate(zip(cos.shape, dy.shape)) if c == 1 and n != 1)
    k.write("dcosOut", (dy * straight).sum(axis=axes, keepdims=True))
    k.write("dsinOut", (dy * turned).sum(axis=axes, keepdims=True))

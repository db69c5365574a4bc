"""Attention backward (issue 16): FlashAttentionScoreGrad and its versions V2, V3, V4; RotaryPositionEmbeddingGrad.

The backward of :mod:`acl_core.spec.ops.attention`'s FlashAttentionScore (and V2/V3/V4). It takes the
forward's inputs, ``dy`` (dO), the forward's saved statistics ``softmaxMax`` / ``softmaxSum`` ([B,N,Sq,8]
float32, the value repeated 8 times) and its output ``attentionIn`` (O), and returns dQ, dK, dV:

* P is recomputed from Q, K, the mask and the statistics: ``P = exp(scale·(QKᵀ + pse) − max) / sum`` where
  the mask keeps the pair, 0 elsewhere and in rows whose sum is 0 (the forward's fully masked rows).
* ``dV = Pᵀ·dO``, ``dP = dO·Vᵀ``, ``D = rowsum(dO ∘ O)``, ``dS = P ∘ (dP − D)``, ``dQ = scale·dS·K``,
  ``dK = scale·dSᵀ·Q``; GQA sums dK and dV over the query heads of a group.
* Everything the forward validates is validated alike (it runs the forward's rules on the mapped call):
  layouts BSH/SBH/BSND/BNSD, GQA/MQA, sparseMode 0-4 with the forward's masks and windows, pse
  ([B|1,N,Sq|1,Skv], before the scale), keepProb 1 only (dropout and dropMask are refused, as in the forward:
  acl-core has no dropout mask contract), prefix modes 5/6 refused.

Choices where CANN's documents are silent:

* softmaxMaxOptional, softmaxSumOptional and attentionInOptional are required (161001 when null): the
  backward is defined by them (CANN's kernel reads them; recomputing the forward is not implemented).
  They must be [B,N,Sq,8] float32 (copy 0 is read) and query's shape and dtype; dy likewise.
* softmaxInOptional is reserved (accepted, not read); dpseOut is reserved (accepted, left untouched).
* The statistics are taken as given: a backward called with statistics of another forward computes the
  formula above with them (so P need not sum to 1); max = -inf or sum = 0 marks a row with nothing kept.
* V2 adds ``pseType`` (1, the default: pse before the scale, the base's; 0 only without pse; 2/3 generate
  ALiBi and are refused) and qStartIdx/kvStartIdx (they position that ALiBi: refused).
* V3 adds ``sinkInOptional`` ([headNum] float32, the forward V3's sink) and ``dsinkOut`` ([headNum] float32):
  with a sink the statistics include it (the forward's rule), P's denominator has it, and
  ``dsink[h] = −Σ_{b,i} p_sink·D`` (``p_sink = exp(sink − max) / sum``); without one dsinkOut is left
  untouched. CANN's dsink is non-deterministic by default; the reference and rocm sum it in a fixed order.
* V4 is V2's rules with V4's parameters: queryRope/keyRope (MLA's split rope), the FP8 dequant scales
  (dScaleQ/K/V/Dy/O), the TND lengths (actualSeqQLen/KvLen: inputLayout TND is refused by its choices),
  qStartIdx/kvStartIdx and the reserved sinkInOptional must be null, dqRopeOut/dkRopeOut too; outDtype 0 or 1
  (it names the FP8 mode's output); seed and offset only seed dropout, which must be off; softmaxInLayout and
  dsinkOut are reserved (accepted, ignored / left untouched).
* Accuracy: a float32 call is held to the composite bound of its products (:func:`_grad_scale`); an fp16/bf16
  call to that bound plus the first-order effect of rounding P and dS to the input type before the second
  products, as every fused flash backward does (:func:`_grad_scale_16`); RotaryPositionEmbeddingGrad stays
  under the table (its reason below). Not declared here: the varlen (TND) backwards,
  FlashAttentionUnpaddingScoreGrad and its versions.

RotaryPositionEmbeddingGrad is the backward of RotaryPositionEmbedding (``y = x·cos + R(x)·sin``, R the mode's
rotation: 0 half, 1 interleave, 2 quarter, 3 interleave-half): ``dx = dy·cos + Rᵀ(dy·sin)`` (mode 3 through
its de-interleave), ``dcos = Σ dy·x'`` and ``dsin = Σ dy·R(x')`` over the dims where cos/sin broadcast (x' the
rotated-into order, x itself for modes 0-2). Its rules are the forward's on ``dy`` (modes 0-3, 561002 for a bad
mode or shape, cos and sin of one shape broadcasting to dy's with the same D); xOptional must be dy's shape
and dtype. Choices where CANN is silent: without xOptional dcosOut and dsinOut are left untouched (CANN: not
computed); the broadcast sums are formed in float64 on the reference and in double on the GPU, then rounded once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.dtypes import from_numpy
from acl_core.spec.accuracy import PRECISION, by_call, composite, table, with_accuracy
from acl_core.spec.ops import attention as A
from acl_core.spec.opspec import (
    INVALID,
    NULLPTR,
    Call,
    ErrorSample,
    Infos,
    OpSpec,
    Sample,
    float_attr,
    int_array,
    int_attr,
    invalid,
    nullptr,
    out,
    string_attr,
    tensor,
)
from acl_core.spec.rules import FLOATS, same, tensor_arg
from acl_core.spec.version import Added, version_of

FAMILY = "attention_grad"
_FORWARD = next(s for s in A.SPECS if s.name == "FlashAttentionScore")
_TO_FORWARD = {"keyIn": "key", "pseShiftOptional": "realShiftOptional"}
"""The backward's names of the forward's inputs, where they differ."""
_FORWARD_ARGS = (
    "query", "keyIn", "value", "pseShiftOptional", "dropMaskOptional", "paddingMaskOptional", "attenMaskOptional",
    "prefixOptional", "scaleValue", "keepProb", "preTokens", "nextTokens", "headNum", "inputLayout", "innerPrecise",
    "sparseMode",
)  # fmt: skip


# ----------------------------------------------------------------------------- rules
def _params() -> tuple[Any, ...]:
    return (
        tensor("query", FLOATS, min_rank=3, max_rank=4),
        tensor("keyIn", FLOATS, min_rank=3, max_rank=4),
        tensor("value", FLOATS, min_rank=3, max_rank=4),
        tensor("dy", FLOATS, min_rank=3, max_rank=4),
        tensor("pseShiftOptional", FLOATS, optional=True),
        tensor("dropMaskOptional", {D.ACL_UINT8}, optional=True),
        tensor("paddingMaskOptional", optional=True),
        tensor("attenMaskOptional", A.FA_MASK_DTYPES, optional=True, min_rank=2, max_rank=4),
        tensor("softmaxMaxOptional", {D.ACL_FLOAT}, optional=True, min_rank=4, max_rank=4),
        tensor("softmaxSumOptional", {D.ACL_FLOAT}, optional=True, min_rank=4, max_rank=4),
        tensor("softmaxInOptional", optional=True),
        tensor("attentionInOptional", FLOATS, optional=True, min_rank=3, max_rank=4),
        int_array("prefixOptional", optional=True),
        float_attr("scaleValue"),
        float_attr("keepProb", default=1.0),
        int_attr("preTokens", default=A.UNBOUNDED),
        int_attr("nextTokens", default=A.UNBOUNDED),
        int_attr("headNum"),
        string_attr("inputLayout", choices=A.FA_LAYOUTS, default="BSH"),
        int_attr("innerPrecise", default=0),
        int_attr("sparseMode", default=0),
        out("dqOut", FLOATS),
        out("dkOut", FLOATS),
        out("dvOut", FLOATS),
        out("dpseOut", optional=True),
    )


def _grad_infer(call: Call) -> Infos:
    """The forward's rules on the mapped call, then dy / attentionIn / the statistics against query."""
    forward = Call(_FORWARD, {_TO_FORWARD.get(n, n): call.args.get(n) for n in _FORWARD_ARGS})
    infos = _FORWARD.infer(forward)
    call.plan.update(forward.plan)
    q, k, v = tensor_arg(call, "query"), tensor_arg(call, "keyIn"), tensor_arg(call, "value")
    stats = infos["softmaxMaxOut"]
    assert stats is not None and not isinstance(stats, list)
    for name in ("softmaxMaxOptional", "softmaxSumOptional", "attentionInOptional"):
        if call.args.get(name) is None:
            raise nullptr(f"{name} is null; the backward recomputes P from the forward's statistics and output")
    for name in ("dy", "attentionInOptional"):
        t = tensor_arg(call, name)
        if tuple(t.shape) != tuple(q.shape) or t.dtype != q.dtype:
            want = f"{q.dtype.short} {list(q.shape)}"
            raise invalid(f"{name} is {t.dtype.short} {list(t.shape)}; it must be query's {want}")
    for name in ("softmaxMaxOptional", "softmaxSumOptional"):
        t = tensor_arg(call, name)
        if tuple(t.shape) != stats.shape:
            raise invalid(f"{name} has shape {list(t.shape)}; expected [B,N,Sq,8] = {list(stats.shape)}")
    return {
        "dqOut": same(q.shape, q.dtype),
        "dkOut": same(k.shape, k.dtype),
        "dvOut": same(v.shape, v.dtype),
        "dpseOut": None,
    }


# ----------------------------------------------------------------------------- samples
def _bnsd(x: np.ndarray, layout: str, heads: int) -> np.ndarray:
    """A query/key/value array in ``layout`` as float64 [B,N,S,D]."""
    x = np.asarray(x, dtype=np.float64)
    if layout == "BNSD":
        return x
    if layout == "BSND":
        return x.transpose(0, 2, 1, 3)
    bsh = x if layout == "BSH" else x.transpose(1, 0, 2)
    b, s, h = bsh.shape
    return bsh.reshape(b, s, heads, h // heads).transpose(0, 2, 1, 3)


def _saved(fwd: Mapping[str, Any], sink: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(max, sum, out) of a forward's sample, taken over every key (the mask ignored).

    An upper bound of the masked statistics, so the recomputed P stays in [0, 1] as the forward's does;
    the backward is a function of whatever statistics it is given (see the family docstring).
    """
    layout, nq = fwd["inputLayout"], fwd["headNum"]
    q = _bnsd(fwd["query"], layout, nq)
    d = q.shape[-1]
    kv_heads = np.shape(fwd["key"])[-1] // d if layout in ("BSH", "SBH") else 0
    k, v = _bnsd(fwd["key"], layout, kv_heads), _bnsd(fwd["value"], layout, kv_heads)
    group = nq // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scores = np.einsum("bnqd,bnkd->bnqk", q, k)
    if fwd.get("realShiftOptional") is not None:
        scores = scores + np.asarray(fwd["realShiftOptional"], np.float64)
    scores = fwd["scaleValue"] * scores
    row_max = scores.max(axis=-1)
    if sink is not None:
        row_max = np.maximum(row_max, sink.astype(np.float64)[None, :, None])
    e = np.exp(scores - row_max[..., None])
    row_sum = e.sum(axis=-1) + (0.0 if sink is None else np.exp(sink[None, :, None] - row_max))
    attention = np.einsum("bnqk,bnkd->bnqd", e / row_sum[..., None], v)
    return row_max, row_sum, attention


def _layout(x: np.ndarray, layout: str) -> np.ndarray:
    """A [B,N,S,D] array laid out as ``layout`` (the forward's sample helper)."""
    return A._to_layout(x, layout)


def grad_case(rng: np.random.Generator, fwd: Mapping[str, Any], sink: np.ndarray | None = None) -> dict[str, Any]:
    """A backward call of a forward sample: its inputs renamed, dy random, the saved statistics and output."""
    dtype = np.asarray(fwd["query"]).dtype
    row_max, row_sum, attention = _saved(fwd, sink)
    args = {_BACK.get(n, n): value for n, value in fwd.items() if n not in _FORWARD_OUTS}
    args["dy"] = rng.uniform(-1.0, 1.0, size=np.shape(fwd["query"])).astype(dtype)
    args["softmaxMaxOptional"] = np.repeat(row_max[..., None], 8, axis=-1).astype(np.float32)
    args["softmaxSumOptional"] = np.repeat(row_sum[..., None], 8, axis=-1).astype(np.float32)
    args["attentionInOptional"] = _layout(attention, fwd["inputLayout"]).astype(dtype)
    return args


_BACK = {v: k for k, v in _TO_FORWARD.items()}
_FORWARD_OUTS = ("softmaxMaxOut", "softmaxSumOut", "softmaxOutOut", "attentionOutOut")


def _grad_samples(rng: np.random.Generator) -> Iterable[Sample]:
    assert _FORWARD.samples is not None
    for s in _FORWARD.samples(rng):
        yield Sample(grad_case(rng, s.args), s.note)
    f32 = D.ACL_FLOAT
    fwd = A._fa_case(rng, f32, "BNSD", 1, 2, 2, 4, 5, 8)
    args = grad_case(rng, fwd)
    for name, value in (("softmaxMaxOptional", -np.inf), ("softmaxSumOptional", 0.0)):
        args[name][0, 1, 2] = value  # a row the forward found fully masked: P = 0, so dQ = 0 there
    yield Sample(args, "a row with max -inf and sum 0")
    yield Sample(
        grad_case(rng, A._fa_case(rng, D.ACL_BF16, "BSND", 1, 4, 2, 33, 40, 16, scaleValue=0.3)),
        "bf16 GQA 4/2, Sq=33 Skv=40 D=16",
    )
    fwd = A._fa_case(rng, f32, "BNSD", 1, 2, 2, 6, 6, 8)
    yield Sample({**grad_case(rng, fwd), "softmaxInOptional": np.zeros((1, 2, 6, 8), np.float32)}, "softmaxIn given")


def _grad_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    base = grad_case(rng, A._fa_case(rng, D.ACL_FLOAT, "BNSD", 1, 4, 2, 4, 6, 8))
    for name in ("softmaxMaxOptional", "softmaxSumOptional", "attentionInOptional"):
        yield ErrorSample({**base, name: None}, NULLPTR, f"{name} null")
    yield ErrorSample({**base, "dy": base["dy"][..., :4].copy()}, INVALID, "dy not query's shape")
    yield ErrorSample({**base, "dy": base["dy"].astype(np.float16)}, INVALID, "dy not query's dtype")
    yield ErrorSample(
        {**base, "attentionInOptional": base["attentionInOptional"][:, :2].copy()}, INVALID, "attentionIn shape"
    )
    yield ErrorSample(
        {**base, "softmaxSumOptional": base["softmaxSumOptional"][..., :1].copy()}, INVALID, "softmaxSum not [B,N,Sq,8]"
    )
    yield ErrorSample({**base, "keepProb": 0.9}, INVALID, "dropout is not supported")
    yield ErrorSample({**base, "dropMaskOptional": np.ones(8, np.uint8)}, INVALID, "dropMask is refused")
    yield ErrorSample({**base, "sparseMode": 5}, INVALID, "prefix sparse mode not implemented")
    yield ErrorSample({**base, "headNum": 3}, INVALID, "headNum differs from query's N")
    yield ErrorSample({**base, "attenMaskOptional": np.zeros((4, 5), bool)}, INVALID, "mask shape")


@dataclass(frozen=True)
class _Terms:
    """The float64 quantities both classes' scales are built from, in [B,N,S,·] with K and V repeated per group."""

    layout: str
    scale: float
    q: np.ndarray
    kx: np.ndarray
    dout: np.ndarray
    kv_shape: tuple[int, ...]
    p: np.ndarray
    """P from the call's statistics (0 where masked or in a row that kept nothing)."""
    dp_delta: np.ndarray
    """dP − D."""
    delta: np.ndarray
    m_dp: np.ndarray
    """|dO||V|ᵀ + rowsum|dO∘O|: the scale of dP − D's error."""
    e_s: np.ndarray
    """scale·|Q||K|ᵀ (+|pse|): the scores' error scale, a relative error of P."""
    row_max: np.ndarray
    row_sum: np.ndarray


def _terms(args: Mapping[str, Any]) -> _Terms:
    """P, dP − D and the error scales of the scores and of dP − D, recomputed in float64 from the call."""
    layout, nq = str(args["inputLayout"]), int(args["headNum"])
    q = _bnsd(args["query"], layout, nq)
    d = q.shape[-1]
    nkv = np.shape(args["keyIn"])[-1] // d if layout in ("BSH", "SBH") else 0
    key, value = _bnsd(args["keyIn"], layout, nkv), _bnsd(args["value"], layout, nkv)
    dout, out = _bnsd(args["dy"], layout, nq), _bnsd(args["attentionInOptional"], layout, nq)
    group = nq // key.shape[1]
    kx, vx = np.repeat(key, group, axis=1), np.repeat(value, group, axis=1)
    scale = float(args["scaleValue"])
    scores = np.einsum("bnqd,bnkd->bnqk", q, kx)
    e_s = scale * np.einsum("bnqd,bnkd->bnqk", np.abs(q), np.abs(kx))
    pse = args.get("pseShiftOptional")
    if pse is not None:
        scores = scores + np.asarray(pse, np.float64)
        e_s = e_s + np.abs(np.asarray(pse, np.float64))
    row_max = np.asarray(args["softmaxMaxOptional"], np.float64)[..., :1]
    row_sum = np.asarray(args["softmaxSumOptional"], np.float64)[..., :1]
    keep = _keep(args, q.shape[2], key.shape[2]) & (row_sum > 0)
    with np.errstate(all="ignore"):
        p = np.exp(np.where(keep, scale * scores - np.where(np.isfinite(row_max), row_max, 0.0), -np.inf))
        p = p / np.where(row_sum > 0, row_sum, 1.0)
    dp = np.einsum("bnqd,bnkd->bnqk", dout, vx)
    delta = np.einsum("bnqd,bnqd->bnq", dout, out)[..., None]
    m_dp = (
        np.einsum("bnqd,bnkd->bnqk", np.abs(dout), np.abs(vx))
        + np.einsum("bnqd,bnqd->bnq", np.abs(dout), np.abs(out))[..., None]
    )
    kv_shape = (q.shape[0], key.shape[1], group, *key.shape[2:])
    return _Terms(layout, scale, q, kx, dout, kv_shape, p, dp - delta, delta, m_dp, e_s, row_max, row_sum)


def _products(t: _Terms, m_ds: np.ndarray, m_p: np.ndarray) -> dict[str, np.ndarray]:
    """dQ, dK, dV's scales in the call's layout from per-element bounds on dS (``m_ds``) and on P (``m_p``)."""
    scales = {
        "dqOut": t.scale * np.einsum("bnqk,bnkd->bnqd", m_ds, np.abs(t.kx)),
        "dkOut": (t.scale * np.einsum("bnqk,bnqd->bnkd", m_ds, np.abs(t.q))).reshape(t.kv_shape).sum(axis=2),
        "dvOut": np.einsum("bnqk,bnqd->bnkd", m_p, np.abs(t.dout)).reshape(t.kv_shape).sum(axis=2),
    }
    return {name: _layout(v, t.layout) for name, v in scales.items()}


def _float32_scales(t: _Terms, e_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(dS's, P's) first-order float32 error scales, with ``e_s`` P's relative error scale."""
    return t.p * (np.abs(t.dp_delta) * (1.0 + e_s) + t.m_dp), t.p * (1.0 + e_s)


def _grad_scale(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> dict[str, Any]:
    """First-order error scales of dQ, dK, dV (and dsink) of a float32 call, P recomputed from the given statistics.

    ``S`` (scores) carries ``e_S = scale·|Q||K|ᵀ (+|pse|)`` into P as a relative error, ``dP − D`` carries
    ``|dO||V|ᵀ + rowsum|dO∘O|``; so ``dS = P∘(dP − D)`` is off by ``P∘(|dP − D|·e_S + that) + |dS|`` (its own
    rounding), and each output is its product's scale: ``scale·M_dS·|K|``, ``scale·M_dSᵀ·|Q|``, ``(P∘(1 + e_S))ᵀ|dO|``.
    P is the one the call's statistics give (above 1 where they do not match Q and K, as a stride-0 case's).
    """
    t = _terms(args)
    return _products(t, *_float32_scales(t, t.e_s)) | _dsink_scale(args, outputs, t)


def _dsink_scale(args: Mapping[str, Any], outputs: Mapping[str, Any], t: _Terms) -> dict[str, Any]:
    """dsink's scale ``Σ p_sink·(|D| + rowsum|dO∘O|)`` where the call has a sink and asks for dsinkOut."""
    sink = args.get("sinkInOptional")
    if sink is None or "dsinkOut" not in outputs:
        return {}
    row_max, row_sum = t.row_max, t.row_sum
    with np.errstate(all="ignore"):
        p_sink = np.where(row_sum > 0, np.exp(np.asarray(sink, np.float64)[None, :, None, None] - row_max), 0.0)
        p_sink = p_sink / np.where(row_sum > 0, row_sum, 1.0)
    o_abs = np.abs(_bnsd(args["attentionInOptional"], t.layout, int(args["headNum"])))
    m_delta = np.abs(t.delta) + np.einsum("bnqd,bnqd->bnq", np.abs(t.dout), o_abs)[..., None]
    return {"dsinkOut": (p_sink * m_delta).sum(axis=(0, 2, 3))}


_SMALLEST_NORMAL = {D.ACL_FLOAT16: 2.0**-14, D.ACL_BF16: 2.0**-126}


def _grad_scale_16(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> dict[str, Any]:
    """The fp16/bf16 scale: what every fused flash backward computes, bounded to first order.

    The model (FlashAttention-2/3, cuDNN's and torch's SDPA backwards): S = QKᵀ, dP = dO·Vᵀ and
    D = rowsum(dO∘O) in fp32 from the 16-bit inputs; P = exp(scale·S − lse) (or exp(scale·S − max) / sum) in
    fp32; P₁₆ = fl16(P) and dV = P₁₆ᵀ·dO; dS = P∘(dP − D) (P or P₁₆) in fp32, dS₁₆ = fl16(dS), dQ = scale·dS₁₆·K
    and dK = scale·dS₁₆ᵀ·Q, all accumulated in fp32 and rounded once to the output. With u = 2^-p of the input
    type (fp16 2^-11, bf16 2^-8) and τ its smallest normal (fp16 2^-14, bf16 2^-126), a rounding fl16(x) is off
    by at most u·|x| where |x| >= τ and by at most |x| below τ (round to nearest into the subnormals, or flushed
    to 0), so:

    * |P₁₆ − P| <= r_P = u·P + [P < 2τ]·P, P the exact one (the float32 P is off from it by a relative error far
      below 1/2, so it is under τ only where P < 2τ);
    * |dS₁₆ − dS| <= r_dS = u·(|dS| + E) + r_P·|dP − D| + [|dS| < τ + E]·(|dS| + E), E = γ·M_dS the float32 class's
      bound on the computed dS's error (so |computed dS| <= |dS| + E), r_P·|dP − D| where dS is formed from P₁₆;
    * they reach the outputs linearly: dV by r_Pᵀ·|dO|, dQ by scale·r_dS·|K|, dK by scale·r_dSᵀ·|Q| (GQA groups
      summed), on top of the float32 class's first-order scale, whose P error scale e_S also takes the log-sum-exp's
      roundings (2·(|max| + |log sum|): lse = max + log sum rounded, then scale·S − lse rounded).

    The bound per output element is ``γ·S32 + R + 1 ulp`` (R the sum above, γ = γ_(n+6) the class's own); it is
    returned as one composite scale ``S16 = S32 + R/γ``, so the suite's ``γ·S16 + 1 ulp`` is exactly that. dsink
    (V3) has no 16-bit intermediate: it keeps its float32 scale.
    """
    t = _terms(args)
    dtype = from_numpy(np.asarray(args["query"]).dtype)
    u, tiny = 2.0 ** -PRECISION[dtype], _SMALLEST_NORMAL[dtype]
    gamma = _GRAD_16.gamma(_grad_length(args, outputs) + _GRAD_16.steps, dtype)
    with np.errstate(all="ignore"):
        log_sum = np.abs(np.log(np.where(t.row_sum > 0, t.row_sum, 1.0)))
    lse = np.where(np.isfinite(t.row_max), np.abs(t.row_max), 0.0) + log_sum
    m_ds, m_p = _float32_scales(t, t.e_s + 2.0 * lse)
    ds = np.abs(t.p * t.dp_delta)
    err_ds = gamma * m_ds  # what the float32 steps may leave in the dS that gets rounded
    r_p = u * t.p + np.where(t.p < 2.0 * tiny, t.p, 0.0)
    r_ds = u * (ds + err_ds) + r_p * np.abs(t.dp_delta) + np.where(ds < tiny + err_ds, ds + err_ds, 0.0)
    rounded = _products(t, r_ds, r_p)
    found = {name: v + rounded[name] / gamma for name, v in _products(t, m_ds, m_p).items()}
    return found | _dsink_scale(args, outputs, t)


def _keep(args: Mapping[str, Any], sq: int, skv: int) -> np.ndarray:
    """The keys each query row keeps ([B|1, N|1, Sq, Skv]): the mask, then the sparse mode's geometry."""
    keep = np.ones((1, 1, sq, skv), dtype=bool)
    mask = args.get("attenMaskOptional")
    if mask is not None:
        mode = int(args["sparseMode"])
        if mode in (0, 1):
            keep = ~A.as_4d(np.asarray(mask) != 0)
        geo = A.sparse_keep(mode, sq, skv, int(args["preTokens"]), int(args["nextTokens"]), skv - sq)
        if geo is not None:
            keep = keep & geo
    return keep


def _grad_length(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> int:
    """The longest sum of one output element: D (the scores), Skv (dQ, D) or Sq·group (dK, dV, dsink)."""
    layout, nq = str(args["inputLayout"]), int(args["headNum"])
    q = _bnsd(args["query"], layout, nq)
    d = q.shape[-1]
    nkv = np.shape(args["keyIn"])[-1] // d if layout in ("BSH", "SBH") else 0
    key = _bnsd(args["keyIn"], layout, nkv)
    group = nq // key.shape[1]
    return int(max(d, key.shape[2], q.shape[0] * q.shape[2] * group))


_GRAD_F32 = composite(
    steps=6,
    length_of=_grad_length,
    scale_of=_grad_scale,
    reason="float32 products and row sums of P = softmax(QKᵀ) with dO, V, Q and K (dS = P∘(dP − D) cancels):"
    " the first-order scale of each output (_grad_scale)",
)
_GRAD_16 = composite(
    steps=6,
    length_of=_grad_length,
    scale_of=_grad_scale_16,
    reason="fp16/bf16: the float32 bound, plus P and dS rounded to the input type before the second products"
    " (FlashAttention's, cuDNN's and torch's fused backwards) (_grad_scale_16 derives the bound)",
)
_GRAD_CLASS = by_call(
    lambda args: _GRAD_F32 if np.asarray(args["query"]).dtype == np.float32 else _GRAD_16,
    (_GRAD_F32, _GRAD_16),
    "float32 under the composite bound of its products; fp16/bf16 under that bound plus P's and dS's roundings to"
    " the input type",
)
_BASE = OpSpec(
    "FlashAttentionScoreGrad",
    FAMILY,
    _params(),
    _grad_infer,
    samples=_grad_samples,
    error_samples=_grad_errors,
    summary="training attention backward (dq, dk, dv) from the forward's statistics and output",
)


# ----------------------------------------------------------------------------- versions
_HEAD = (
    "query", "keyIn", "value", "dy", "pseShiftOptional", "dropMaskOptional", "paddingMaskOptional",
    "attenMaskOptional", "softmaxMaxOptional", "softmaxSumOptional", "softmaxInOptional", "attentionInOptional",
)  # fmt: skip
_ATTRS = ("scaleValue", "keepProb", "preTokens", "nextTokens", "headNum", "inputLayout")
_GRADS = ("dqOut", "dkOut", "dvOut")
_ALIBI = "(it positions the ALiBi bias generated inside the op, pseType 2/3) is not implemented"
_PSE_TYPE = Added(int_attr("pseType", default=1), "", neutral=None)


def _absent(name: str, why: str, make: Any = tensor) -> Added:
    """An added optional handle that must stay null."""
    return Added(make(name, None, optional=True) if make in (tensor, out) else make(name, optional=True), why)


_STARTS = {
    "qStartIdxOptional": _absent("qStartIdxOptional", _ALIBI, int_array),
    "kvStartIdxOptional": _absent("kvStartIdxOptional", _ALIBI, int_array),
}


def _pse_type(call: Call) -> None:
    """pseType 1 adds the pse before the scale, as the base does; 0 adds it after; 2/3 generate ALiBi."""
    kind = call.args["pseType"]
    if kind not in (0, 1):
        raise invalid(f"{call.spec.name}: pseType={kind} (ALiBi generated inside the op) is not implemented")
    if kind == 0 and call.args["pseShiftOptional"] is not None:
        raise invalid(f"{call.spec.name}: pseType=0 adds pseShiftOptional after the scale, which is not implemented")


def _pse_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    samples = list(_grad_samples(rng))
    with_pse = next(s for s in samples if s.args.get("pseShiftOptional") is not None)
    yield ErrorSample({**with_pse.args, "pseType": 0}, INVALID, "pseType 0 with pseShiftOptional")
    yield ErrorSample({**samples[0].args, "pseType": 2}, INVALID, "pseType 2: generated ALiBi")


def _chain(*makers: Any) -> Any:
    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        for make in makers:
            yield from make(rng)

    return errors


_V2 = version_of(
    _BASE,
    "FlashAttentionScoreGradV2",
    (*_HEAD, "prefixOptional", *_STARTS, *_ATTRS, "innerPrecise", "sparseMode", "pseType", *_GRADS, "dpseOut"),
    added={**_STARTS, "pseType": _PSE_TYPE},
    check=_pse_type,
    more_errors=_pse_errors,
    summary="FlashAttentionScoreGrad with pseType 1 (pse before the scale, the base's) or 0 without pse",
)


def _sink_check(call: Call) -> None:
    _pse_type(call)
    A.check_sink(call, "sinkInOptional", int(call.args["headNum"]))


def _sink_outputs(call: Call, infos: Infos) -> Infos:
    """dsinkOut is [headNum] float32 with a sink, left untouched without one."""
    sink = call.args.get("sinkInOptional")
    has = sink is not None and sink.numel > 0
    return {**infos, "dsinkOut": same((int(call.args["headNum"]),), D.ACL_FLOAT) if has else None}


def _sink_samples(rng: np.random.Generator) -> Iterable[Sample]:
    """V2's samples, plus every third forward sample again with a sink (its statistics include the sink)."""
    yield from _V2.samples(rng) if _V2.samples else ()
    assert _FORWARD.samples is not None
    for i, s in enumerate(_FORWARD.samples(rng)):
        if i % 3 == 0:
            sink = rng.uniform(-3.0, 3.0, size=int(s.args["headNum"])).astype(np.float32)
            yield Sample({**grad_case(rng, s.args, sink), "sinkInOptional": sink}, f"{s.note}, sink")


def _sink_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    first = next(iter(_grad_samples(rng)))
    wrong = np.zeros(int(first.args["headNum"]) + 1, np.float32)
    yield ErrorSample({**first.args, "sinkInOptional": wrong}, INVALID, "sinkInOptional not [headNum]")


_SINK = Added(
    tensor("sinkInOptional", {D.ACL_FLOAT}, optional=True, max_rank=1),
    "the per-head sink logit: implemented, see the family docstring",
    neutral=None,
)
_DSINK = Added(out("dsinkOut", {D.ACL_FLOAT}, optional=True, max_rank=1), "", neutral=None)


def _v3() -> OpSpec:
    spec = version_of(
        _BASE,
        "FlashAttentionScoreGradV3",
        (*_HEAD, "sinkInOptional", "prefixOptional", *_STARTS, *_ATTRS, "innerPrecise", "sparseMode", "pseType",
         *_GRADS, "dpseOut", "dsinkOut"),
        added={**_STARTS, "pseType": _PSE_TYPE, "sinkInOptional": _SINK, "dsinkOut": _DSINK},
        passthrough={"sinkInOptional": "sink", "dsinkOut": "dsink"},
        check=_sink_check,
        outputs=_sink_outputs,
        more_errors=_chain(_pse_errors, _sink_errors),
        summary="FlashAttentionScoreGradV2 with sinkInOptional and its gradient dsinkOut",
    )  # fmt: skip
    return replace(spec, samples=_sink_samples)


_QUANT = "FP8 attention (the dScale dequantisation scales) is not implemented"
_ROPE = "(MLA's split rope) is not implemented"
_TND = "is for inputLayout TND, which FlashAttentionScoreGradV4 does not run here"
_V4_ADDED = {
    "sinkInOptional": _absent("sinkInOptional", "is reserved in FlashAttentionScoreGradV4 (CANN: not used currently)"),
    "queryRopeOptional": _absent("queryRopeOptional", _ROPE),
    "keyRopeOptional": _absent("keyRopeOptional", _ROPE),
    **{n: _absent(n, _QUANT) for n in ("dScaleQOptional", "dScaleKOptional", "dScaleVOptional", "dScaleDyOptional",
                                       "dScaleOOptional")},
    "actualSeqQLenOptional": _absent("actualSeqQLenOptional", _TND, int_array),
    "actualSeqKvLenOptional": _absent("actualSeqKvLenOptional", _TND, int_array),
    **_STARTS,
    "softmaxInLayout": Added(string_attr("softmaxInLayout", optional=True), "", neutral=None),
    "pseType": _PSE_TYPE,
    "seed": Added(int_attr("seed", default=0), "", neutral=None),
    "offset": Added(int_attr("offset", default=0), "", neutral=None),
    "outDtype": Added(
        int_attr("outDtype", default=0),
        "must be 0 (fp16) or 1 (bf16): it only names the output of the FP8 mode, which is not implemented",
        neutral=(0, 1),
        refused=2,
    ),
    "dqRopeOut": _absent("dqRopeOut", _ROPE, out),
    "dkRopeOut": _absent("dkRopeOut", _ROPE, out),
    "dsinkOut": Added(out("dsinkOut", optional=True), "", neutral=None),
}  # fmt: skip


def _v4() -> OpSpec:
    return version_of(
        _BASE,
        "FlashAttentionScoreGradV4",
        (*_HEAD, "sinkInOptional", "queryRopeOptional", "keyRopeOptional", "dScaleQOptional", "dScaleKOptional",
         "dScaleVOptional", "dScaleDyOptional", "dScaleOOptional", "prefixOptional", "actualSeqQLenOptional",
         "actualSeqKvLenOptional", *_STARTS, *_ATTRS, "softmaxInLayout", "innerPrecise", "sparseMode", "pseType",
         "seed", "offset", "outDtype", *_GRADS, "dqRopeOut", "dkRopeOut", "dpseOut", "dsinkOut"),
        added=_V4_ADDED,
        check=_pse_type,
        more_errors=_pse_errors,
        summary="FlashAttentionScoreGradV2's rules with V4's parameters (seed/offset only seed dropout, which is off)",
    )  # fmt: skip


# ----------------------------------------------------------------------------- RotaryPositionEmbeddingGrad
_ROPE_FORWARD = next(s for s in A.SPECS if s.name == "RotaryPositionEmbedding")


def _rope_grad_infer(call: Call) -> Infos:
    """The forward's rules on dy; x (when given) is dy's shape and dtype; dcos / dsin are cos's shape."""
    dy, cos = tensor_arg(call, "dy"), tensor_arg(call, "cos")
    forward = Call(_ROPE_FORWARD, {"x": dy, "cos": cos, "sin": call.args["sin"], "mode": call.args["mode"]})
    _ROPE_FORWARD.infer(forward)
    call.plan.update(forward.plan)
    x = call.args.get("xOptional")
    if x is not None and (tuple(x.shape) != tuple(dy.shape) or x.dtype != dy.dtype):
        want = f"{dy.dtype.short} {list(dy.shape)}"
        raise invalid(f"xOptional is {x.dtype.short} {list(x.shape)}; it must be dy's {want}")
    stats = same(cos.shape, dy.dtype) if x is not None else None
    return {"dxOut": same(dy.shape, dy.dtype), "dcosOut": stats, "dsinOut": stats}


def _rope_grad_samples(rng: np.random.Generator) -> Iterable[Sample]:
    assert _ROPE_FORWARD.samples is not None
    for s in _ROPE_FORWARD.samples(rng):
        x = s.args["x"]
        dy = rng.uniform(-2.0, 2.0, size=x.shape).astype(x.dtype)
        yield Sample({"dy": dy, "cos": s.args["cos"], "sin": s.args["sin"], "xOptional": x, "mode": s.args["mode"]},
                     s.note)  # fmt: skip


def _rope_grad_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    assert _ROPE_FORWARD.error_samples is not None
    for case in _ROPE_FORWARD.error_samples(rng):
        args = {("dy" if k == "x" else k): v for k, v in case.args.items()}
        yield ErrorSample(args, case.code, case.note)
    base = next(iter(_rope_grad_samples(rng))).args
    yield ErrorSample({**base, "xOptional": base["xOptional"][..., :4].copy()}, INVALID, "x not dy's shape")


_ROPE_GRAD_TABLE = table(
    "dx = dy·cos + Rᵀ(dy·sin) and dsin = Σ dy·R(x): the rotation negates half of its operand, so the magnitudes"
    " run (|inputs|) gives differences, not Σ|terms| (RotaryPositionEmbedding's reason); needs its own scale"
)

_ROPE_GRAD = OpSpec(
    "RotaryPositionEmbeddingGrad",
    FAMILY,
    (
        tensor("dy", FLOATS, min_rank=3, max_rank=4),
        tensor("cos", FLOATS, min_rank=3, max_rank=4),
        tensor("sin", FLOATS, min_rank=3, max_rank=4),
        tensor("xOptional", FLOATS, optional=True, min_rank=3, max_rank=4),
        int_attr("mode", default=0),
        out("dxOut", FLOATS),
        out("dcosOut", FLOATS),
        out("dsinOut", FLOATS),
    ),
    _rope_grad_infer,
    samples=_rope_grad_samples,
    error_samples=_rope_grad_errors,
    summary="rotary embedding backward: dx, and dcos / dsin summed over cos's broadcast dims",
)

SPECS: list[OpSpec] = with_accuracy(
    [_BASE, _V2, _v3(), _v4(), _ROPE_GRAD],
    {
        **{f"FlashAttentionScoreGrad{v}": _GRAD_CLASS for v in ("", "V2", "V3", "V4")},
        "RotaryPositionEmbeddingGrad": _ROPE_GRAD_TABLE,
    },
)

"""Decode-time helpers of inference engines: ApplyTopKTopP (sampling filter) and AttentionUpdate (split-KV combine).

ApplyTopKTopP filters each row of ``logits`` [batch, vocab] as CANN's formula does: sort ascending
(stable), keep the values not below the k-th largest (ties with it are kept), softmax what is kept,
accumulate the probabilities from the smallest up and mask every position whose running sum is at
most ``1 - p`` (the largest is always kept); masked positions become -Inf in ``out``, the others keep
their logit bit for bit. ``p`` and ``k`` are each optional (not both): without ``k`` nothing is cut
by rank, without ``p`` nothing by probability.

The top-p test compares computed sums with a threshold, so one ulp of ``exp`` could flip a position
between two backends. It is therefore decided on quantities every backend computes bit for bit:

* the weight of kept value ``v`` is ``e = ranking_exp(v - m)`` (``m`` the row's largest, and ``e = 1``
  where ``v == m``, so +Inf logits share the mass; ``ranking_exp`` is the +, -, ×, rint evaluation of
  ``acl_reference.kernels.moe``), quantised to ``q = floor(e·2^40)`` (NaN weighs 0);
* the running sums ``C`` of ``q`` are integers (exact in any order) and the row total is ``S``;
* position ``j`` is masked when ``double(C_j) <= (1 - p)·double(S)``, each step rounded once.

This differs from the real-valued formula by at most ``vocab·2^-40`` of probability (1.4e-7 for a
151,936-token vocabulary), below a float32 ulp of the sums CANN itself accumulates. Rows hold at most
2^23 entries (so ``S`` fits in 63 bits); more is refused with 161002. ``k`` outside ``[1, vocab]``
is data only a kernel sees: 161002 when the operator runs (at synchronisation on a GPU). ``p`` is
used as given (outside [0, 1] it keeps everything or only the largest). A row holding NaN sorts it
last (largest); its weight is 0.

AttentionUpdate combines ``sp`` partial attention results (context-parallel or split-KV decode):
``lse_max = max_i lse_i``, ``lse_m = lse_max + log Σ_i exp(lse_i - lse_max)``, ``out = Σ_i O_i ·
exp(lse_i - lse_m)``, and ``lseOut = lse_m`` when ``updateType`` is 1. ``lse`` entries are FLOAT
[N], ``localOut`` entries [N, headDim] of one dtype shared with ``out``; ``sp`` in [1, 16], ``headDim``
in [8, 512] and a multiple of 8 (CANN's constraints); every violation, and ``lseOut`` given with
``updateType`` 0 or missing with 1, is 161002. Rows whose lse are all -Inf give NaN, as the formula.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.spec import samples as S
from acl_core.spec.accuracy import Accuracy, composite, exact, with_accuracy
from acl_core.spec.opspec import (
    INVALID,
    NULLPTR,
    Call,
    ErrorSample,
    Infos,
    OpSpec,
    Sample,
    int_attr,
    invalid,
    nullptr,
    out,
    tensor,
    tensor_list,
)
from acl_core.spec.rules import FLOATS, same, tensor_arg
from acl_core.tensor import AclTensor, AclTensorList

FAMILY = "serving"
MAX_VOCAB = 1 << 23
"""ApplyTopKTopP's longest row: 2^23 weights of at most 2^40 sum below 2^63."""
TOP_P_BITS = 40
"""Fractional bits of ApplyTopKTopP's quantised weights."""
_DTYPES = (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16)


# ----------------------------------------------------------------------------- ApplyTopKTopP
def _top_k_top_p_infer(call: Call) -> Infos:
    logits = tensor_arg(call, "logits")
    p, k = call.args.get("p"), call.args.get("k")
    if p is None and k is None:
        raise nullptr("p and k are both null (at least one filter is needed)")
    if logits.rank != 2:
        raise invalid(f"logits must be 2-D (batch, vocab), not {list(logits.shape)}")
    batch, vocab = logits.shape
    if isinstance(p, AclTensor):
        if p.dtype != logits.dtype:
            raise invalid(f"p has dtype {p.dtype.short}; logits has {logits.dtype.short}")
        if tuple(p.shape) != (batch,):
            raise invalid(f"p has shape {list(p.shape)}; expected [{batch}]")
    if isinstance(k, AclTensor) and tuple(k.shape) != (batch,):
        raise invalid(f"k has shape {list(k.shape)}; expected [{batch}]")
    if vocab > MAX_VOCAB:
        raise invalid(f"logits rows of {vocab} entries exceed {MAX_VOCAB} (the exact top-p sums' range)")
    return {"out": same((batch, vocab), logits.dtype)}


def _top_k_top_p_samples(rng: np.random.Generator) -> Iterable[Sample]:
    for dt in _DTYPES:
        logits = S.array(rng, (4, 50), dt, low=-3, high=3)
        p = np.array([0.9, 0.5, 0.0, 1.0], dt.numpy)
        k = np.array([5, 50, 1, 20], np.int32)
        yield Sample({"logits": logits, "p": p, "k": k}, f"{dt.short} top-k and top-p")
    logits = S.array(rng, (3, 3000), D.ACL_FLOAT, low=-8, high=8)  # more than one sort tile
    yield Sample({"logits": logits, "p": np.array([0.8, 0.95, 0.3], np.float32), "k": None}, "top-p only, 3000 entries")
    yield Sample({"logits": logits, "p": None, "k": np.array([1, 2999, 40], np.int32)}, "top-k only, 3000 entries")
    ties = np.repeat(np.array([[0.0, 1.0, 2.0, 2.0, 3.0, 3.0]], np.float32), 3, axis=0)
    args = {"logits": ties, "p": np.array([0.5, 0.99, 0.7], np.float32), "k": np.array([3, 1, 6], np.int32)}
    yield Sample(args, "tied logits: ties with the k-th largest are kept")
    special = np.array([[0.0, -np.inf, 1.0, -np.inf], [np.inf, 2.0, np.inf, -1.0]], np.float32)
    yield Sample(
        {"logits": special, "p": np.array([0.6, 0.4], np.float32), "k": np.array([4, 3], np.int32)}, "infinite logits"
    )
    yield Sample({"logits": np.zeros((0, 8), np.float32), "p": np.zeros(0, np.float32), "k": None}, "no rows")


def _top_k_top_p_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    logits = S.array(rng, (2, 10), D.ACL_FLOAT)
    base = {"logits": logits, "p": np.array([0.5, 0.9], np.float32), "k": np.array([3, 4], np.int32)}
    yield ErrorSample({**base, "p": None, "k": None}, NULLPTR, "p and k both null")
    yield ErrorSample({**base, "p": np.array([0.5, 0.9], np.float16)}, INVALID, "p of another dtype")
    yield ErrorSample({**base, "k": np.array([3, 4, 5], np.int32)}, INVALID, "k of another length")
    yield ErrorSample({**base, "logits": S.array(rng, (2, 10, 1), D.ACL_FLOAT)}, INVALID, "3-D logits")
    yield ErrorSample({**base, "k": np.array([0, 4], np.int32)}, INVALID, "k = 0 (when the operator runs)")
    yield ErrorSample(
        {**base, "k": np.array([3, 11], np.int32)}, INVALID, "k above the vocabulary (when the operator runs)"
    )


_ApplyTopKTopP = OpSpec(
    "ApplyTopKTopP",
    FAMILY,
    (
        tensor("logits", FLOATS),
        tensor("p", FLOATS, optional=True),
        tensor("k", {D.ACL_INT32}, optional=True),
        out("out", FLOATS),
    ),
    _top_k_top_p_infer,
    samples=_top_k_top_p_samples,
    error_samples=_top_k_top_p_errors,
    summary="mask logits outside the top-k and the top-p nucleus to -Inf",
)


# ----------------------------------------------------------------------------- AttentionUpdate
MAX_SP = 16


def _tensors(call: Call, name: str) -> tuple[AclTensor, ...]:
    value = call.args[name]
    assert isinstance(value, AclTensorList), name
    return tuple(value.tensors)


def _attention_update_infer(call: Call) -> Infos:
    lse, local = _tensors(call, "lse"), _tensors(call, "localOut")
    update = int(call.args["updateType"])
    if update not in (0, 1):
        raise invalid(f"updateType={update} must be 0 or 1")
    if not 1 <= len(lse) <= MAX_SP or len(local) != len(lse):
        raise invalid(
            f"lse and localOut must hold the same number (sp, 1..{MAX_SP}) of tensors: {len(lse)}, {len(local)}"
        )
    first = local[0]
    if first.rank != 2:
        raise invalid(f"localOut[0] must be 2-D (rows, headDim), not {list(first.shape)}")
    rows, head_dim = first.shape
    if not (8 <= head_dim <= 512 and head_dim % 8 == 0):
        raise invalid(f"headDim={head_dim} must be a multiple of 8 in [8, 512]")
    for i, (a, o) in enumerate(zip(lse, local)):
        if tuple(a.shape) != (rows,):
            raise invalid(f"lse[{i}] has shape {list(a.shape)}; expected [{rows}]")
        if tuple(o.shape) != (rows, head_dim) or o.dtype != first.dtype:
            raise invalid(
                f"localOut[{i}] is {o.dtype.short} {list(o.shape)};"
                f" localOut[0] is {first.dtype.short} [{rows}, {head_dim}]"
            )
    lse_out = call.args.get("lseOut")
    if update == 0 and lse_out is not None:
        raise invalid("lseOut must be null when updateType is 0")
    if update == 1 and lse_out is None and call.outputs_required:
        raise invalid("lseOut is null but updateType is 1")
    return {
        "out": same((rows, head_dim), first.dtype),
        "lseOut": same((rows,), D.ACL_FLOAT) if update == 1 else None,
    }


def attention_update_args(rng: np.random.Generator, sp: int, rows: int, head_dim: int, dt: D, update: int) -> dict:
    """Arguments of an AttentionUpdate call: ``sp`` partial results of ``rows`` rows."""
    lse = [S.array(rng, (rows,), D.ACL_FLOAT, low=-6, high=6) for _ in range(sp)]
    local = [S.array(rng, (rows, head_dim), dt, low=-2, high=2) for _ in range(sp)]
    return {"lse": lse, "localOut": local, "updateType": update}


def _attention_update_samples(rng: np.random.Generator) -> Iterable[Sample]:
    for dt in _DTYPES:
        yield Sample(attention_update_args(rng, 2, 6, 16, dt, 1), f"{dt.short} sp=2 with lseOut")
    yield Sample(attention_update_args(rng, 1, 5, 8, D.ACL_FLOAT, 0), "sp=1")
    yield Sample(attention_update_args(rng, 16, 3, 128, D.ACL_BF16, 1), "sp=16, headDim 128")
    args = attention_update_args(rng, 3, 4, 512, D.ACL_FLOAT16, 0)
    args["lse"][1][:2] = -np.inf  # a partial result that saw no key
    yield Sample(args, "headDim 512, empty partials")
    yield Sample(attention_update_args(rng, 2, 0, 64, D.ACL_FLOAT, 1), "no rows")


def _attention_update_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    base = attention_update_args(rng, 2, 4, 16, D.ACL_FLOAT, 0)
    yield ErrorSample({**base, "updateType": 2}, INVALID, "updateType 2")
    yield ErrorSample({**base, "lseOut": np.zeros(4, np.float32)}, INVALID, "lseOut with updateType 0")
    yield ErrorSample({**base, "localOut": base["localOut"][:1]}, INVALID, "lists of different lengths")
    wide = attention_update_args(rng, 2, 4, 12, D.ACL_FLOAT, 0)
    yield ErrorSample(wide, INVALID, "headDim 12")
    big = attention_update_args(rng, 17, 2, 8, D.ACL_FLOAT, 0)
    yield ErrorSample(big, INVALID, "sp=17")
    mixed = {**base, "localOut": [base["localOut"][0], base["localOut"][1].astype(np.float16)]}
    yield ErrorSample(mixed, INVALID, "localOut of mixed dtypes")
    yield ErrorSample({**base, "lse": [base["lse"][0], base["lse"][1][:3]]}, INVALID, "lse of another length")


_AttentionUpdate = OpSpec(
    "AttentionUpdate",
    FAMILY,
    (
        tensor_list("lse", {D.ACL_FLOAT}),
        tensor_list("localOut", FLOATS),
        int_attr("updateType"),
        out("out", FLOATS),
        out("lseOut", {D.ACL_FLOAT}, optional=True),
    ),
    _attention_update_infer,
    samples=_attention_update_samples,
    error_samples=_attention_update_errors,
    summary="combine partial attention outputs by their log-sum-exp",
)


def _sp_length(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> int:
    """AttentionUpdate's summed terms per output: one per partial result."""
    return max(len(args.get("lse") or ()), 1)


def _attention_update_scale(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> dict[str, Any]:
    """Error scales: ``Σ_i |O_i|·w_i·(2 + |lse_i - lse_m|)`` for out (exp's condition), ``|lse_m| + 2`` for lseOut."""
    lse = np.stack([np.asarray(a, np.float64) for a in args["lse"]])
    local = np.stack([np.asarray(o, np.float64) for o in args["localOut"]])
    with np.errstate(all="ignore"):
        top = lse.max(axis=0)
        m = top + np.log(np.exp(lse - top).sum(axis=0))
        w = np.exp(lse - m)
        spread = np.where(np.isfinite(lse - m), np.abs(lse - m), 0.0)
        scale = (np.abs(local) * (w * (2.0 + spread))[..., None]).sum(axis=0)
    result: dict[str, Any] = {"out": np.where(np.isfinite(scale), scale, 0.0)}
    if outputs.get("lseOut") is not None:
        result["lseOut"] = np.where(np.isfinite(m), np.abs(m), 0.0) + 2.0
    return result


ACCURACY: dict[str, Accuracy] = {
    "ApplyTopKTopP": exact("a filter: every out element is its logit or -Inf"),
    "AttentionUpdate": composite(
        steps=6,
        length_of=_sp_length,
        scale_of=_attention_update_scale,
        reason="max, Σ exp, log, then Σ O_i·exp(lse_i - lse_m) over the sp partial results",
    ),
}
"""Accuracy classes of the serving family."""

SPECS: list[OpSpec] = with_accuracy([_ApplyTopKTopP, _AttentionUpdate], ACCURACY)

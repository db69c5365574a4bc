"""Linear attention: RecurrentGatedDeltaRule (Qwen3-Next's gated delta-net, the decode / MTP recurrence).

``T`` tokens of ``B`` packed sequences (``actualSeqLengths``: ``L_b`` tokens each, in order), ``Nk``
query/key heads, ``Nv`` value heads (a multiple of ``Nk``: value head ``h`` reads query/key head
``h // (Nv / Nk)``), key dim ``Dk`` and value dim ``Dv``. ``stateRef`` is a pool of ``BlockNum``
states ``S`` of [Nv, Dv, Dk]. For each sequence ``b`` (tokens ``t0 .. t0 + L_b - 1``) and value head
``h`` the recurrence starts from ``stateRef[ssmStateIndices[t0 + numAcceptedTokens[b] - 1], h]`` and
for each token ``t`` of the sequence, in order:

* ``S <- S · exp(g[t, h])`` and, with ``gk``, each column ``j`` of S times ``exp(gk[t, h, j])``;
* ``S <- S + beta[t, h] · (v[t, h] - S k[t]) k[t]ᵀ`` (the delta rule; k, q the head's key and query);
* ``out[t, h] = S (scaleValue · q[t])`` and ``stateRef[ssmStateIndices[t], h] = S``.

That is CANN's formula (``S_t = α_t S_{t-1} + β_t (v_t - α_t S_{t-1} k_t) k_tᵀ``, ``o = S_t q_t / √d_k``
with ``α = e^g`` and ``scaleValue`` for ``1/√d_k``); ``g`` null means ``α = 1``, ``gk`` (the newer
document's per-column decay ``α_k = e^{gk}``) null means no column decay. Where the documents are
silent the vendor's own test golden (ops-transformer's recurrent_gated_delta_rule_golden.py) decided:
the initial state's slot (above), the state written after every token, the carried state kept in
full precision between the tokens of one sequence (here float64 in the reference, float32 on the
GPU), ``q`` not normalised inside the op.

Checked when the operator runs (device data; 161002 at launch on the reference, at synchronisation
on the GPU, nothing written): every ``L_b`` in [1, 8] (CANN's limit) and their sum equal to ``T``;
``1 <= numAcceptedTokens[b] <= L_b``; ``0 <= ssmStateIndices[t] < BlockNum``. Two sequences naming
one state slot (one writes what the other reads) give an unspecified result, as on CANN.
Dimensions: ``Nk, Nv, Dk, Dv <= 256`` (CANN's limits); empty tensors are refused.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.spec.accuracy import table, with_accuracy
from acl_core.spec.opspec import (
    INVALID,
    Call,
    ErrorSample,
    IndexOf,
    Infos,
    OpSpec,
    Sample,
    float_attr,
    invalid,
    out,
    ref,
    tensor,
)
from acl_core.spec.rules import same, tensor_arg

FAMILY = "linear_attention"
BF16 = frozenset({D.ACL_BF16})
I32 = frozenset({D.ACL_INT32})
MAX_DIM = 256
"""CANN's limit on Nk, Nv, Dk and Dv."""
MAX_SEQ = 8
"""CANN's limit on each sequence's length (L_i <= 8: decode with multi-token prediction)."""


def _shape(call: Call, name: str, want: tuple[int, ...]) -> None:
    t = call.args.get(name)
    if t is not None and tuple(t.shape) != want:
        raise invalid(f"{name} has shape {list(t.shape)}; expected {list(want)}")


def _rgdr_infer(call: Call) -> Infos:
    q, k, v, beta, state = (tensor_arg(call, n) for n in ("query", "key", "value", "beta", "stateRef"))
    lengths, indices, accepted = (
        tensor_arg(call, n) for n in ("actualSeqLengths", "ssmStateIndices", "numAcceptedTokens")
    )
    for name, t in (("query", q), ("key", k), ("value", v), ("stateRef", state), ("actualSeqLengths", lengths)):
        if t.numel == 0:
            raise invalid(f"{name} is empty (shape {list(t.shape)}); empty tensors are not supported")
    t_len, nk, dk = q.shape
    if tuple(k.shape) != tuple(q.shape):
        raise invalid(f"key has shape {list(k.shape)}; it must equal query's {list(q.shape)}")
    if v.shape[0] != t_len:
        raise invalid(f"value holds {v.shape[0]} tokens; query holds T={t_len}")
    nv, dv = v.shape[1], v.shape[2]
    if nv % nk:
        raise invalid(f"value heads Nv={nv} must be a multiple of key heads Nk={nk}")
    for label, size in (("Nk", nk), ("Nv", nv), ("Dk", dk), ("Dv", dv)):
        if size > MAX_DIM:
            raise invalid(f"{label}={size} is above {MAX_DIM}")
    if state.shape[1:] != (nv, dv, dk):
        raise invalid(
            f"stateRef has shape {list(state.shape)}; expected [BlockNum, Nv, Dv, Dk] = [*, {nv}, {dv}, {dk}]"
        )
    _shape(call, "beta", (t_len, nv))
    _shape(call, "g", (t_len, nv))
    _shape(call, "gk", (t_len, nv, dk))
    _shape(call, "ssmStateIndices", (t_len,))
    b = lengths.shape[0]
    _shape(call, "numAcceptedTokens", (b,))
    del beta, indices, accepted
    return {"out": same((t_len, nv, dv), D.ACL_BF16), "stateRef": same(state.shape, D.ACL_BF16)}


def _bf16(rng: np.random.Generator, shape: tuple[int, ...], low: float = -1.0, high: float = 1.0) -> np.ndarray:
    from ml_dtypes import bfloat16

    return rng.uniform(low, high, size=shape).astype(bfloat16)


def _unit_rows(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """bf16 vectors of unit L2 norm along the last axis (as Qwen3-Next feeds q and k)."""
    from ml_dtypes import bfloat16

    x = rng.standard_normal(shape)
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(bfloat16)


def rgdr_case(
    rng: np.random.Generator,
    lengths: tuple[int, ...],
    nk: int,
    nv: int,
    dk: int,
    dv: int,
    *,
    blocks: int | None = None,
    accepted: tuple[int, ...] | None = None,
    g: bool = True,
    gk: bool = False,
    scale: float | None = None,
) -> dict[str, Any]:
    """One RecurrentGatedDeltaRule call: distinct state slots per token, drawn from a pool of ``blocks``."""
    t_len = sum(lengths)
    pool = blocks if blocks is not None else t_len + 2
    slots = rng.permutation(pool)[:t_len].astype(np.int32)
    args: dict[str, Any] = {
        "query": _unit_rows(rng, (t_len, nk, dk)),
        "key": _unit_rows(rng, (t_len, nk, dk)),
        "value": _bf16(rng, (t_len, nv, dv)),
        "beta": _bf16(rng, (t_len, nv), 0.0, 1.0),
        "stateRef": _bf16(rng, (pool, nv, dv, dk)),
        "actualSeqLengths": np.array(lengths, np.int32),
        "ssmStateIndices": slots,
        "numAcceptedTokens": np.array(accepted if accepted is not None else [1] * len(lengths), np.int32),
        "scaleValue": float(scale if scale is not None else dk**-0.5),
    }
    if g:
        args["g"] = rng.uniform(-1.0, 0.0, size=(t_len, nv)).astype(np.float32)
    if gk:
        args["gk"] = rng.uniform(-0.5, 0.0, size=(t_len, nv, dk)).astype(np.float32)
    return args


def _rgdr_samples(rng: np.random.Generator) -> Iterable[Sample]:
    yield Sample(rgdr_case(rng, (1,), 1, 1, 8, 8), "one decode token")
    yield Sample(rgdr_case(rng, (1, 1, 1, 1), 2, 4, 32, 16), "four decode tokens, GVA 2")
    yield Sample(rgdr_case(rng, (2, 3), 2, 2, 48, 20, accepted=(2, 1)), "MTP lengths 2 and 3, accepted 2 and 1")
    yield Sample(rgdr_case(rng, (3, 1, 2), 1, 2, 64, 33, accepted=(3, 1, 2), gk=True), "column decay gk")
    yield Sample(rgdr_case(rng, (2,), 2, 2, 16, 16, g=False), "no decay (g null)")
    yield Sample(rgdr_case(rng, (8, 1), 1, 1, 100, 40, accepted=(5, 1), blocks=12), "L=8, Dk across warps")
    yield Sample(rgdr_case(rng, (1, 2), 1, 3, 24, 65, scale=1.0, blocks=40), "Dv across row blocks, scale 1")


def _rgdr_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    base = rgdr_case(rng, (2, 1), 2, 4, 16, 8, accepted=(1, 1))
    yield ErrorSample({**base, "key": base["key"][:, :1].copy()}, INVALID, "key heads differ from query's")
    yield ErrorSample({**base, "value": base["value"][:, :3].copy()}, INVALID, "Nv not a multiple of Nk")
    yield ErrorSample({**base, "stateRef": base["stateRef"][..., :8].copy()}, INVALID, "stateRef's Dk differs")
    yield ErrorSample({**base, "beta": base["beta"][:2].copy()}, INVALID, "beta of the wrong shape")
    yield ErrorSample({**base, "numAcceptedTokens": np.ones(3, np.int32)}, INVALID, "numAcceptedTokens not [B]")
    yield ErrorSample({**base, "actualSeqLengths": np.array([1, 1], np.int32)}, INVALID, "lengths do not sum to T")
    yield ErrorSample({**base, "numAcceptedTokens": np.array([0, 1], np.int32)}, INVALID, "no accepted token")
    yield ErrorSample({**base, "numAcceptedTokens": np.array([3, 1], np.int32)}, INVALID, "more accepted than L")
    nine = rgdr_case(rng, (9,), 1, 1, 8, 8)
    yield ErrorSample(nine, INVALID, "a sequence longer than 8")
    wide = rgdr_case(rng, (1,), 1, 1, 264, 8)
    yield ErrorSample(wide, INVALID, "Dk above 256")


SPECS: list[OpSpec] = with_accuracy(
    [
        OpSpec(
            "RecurrentGatedDeltaRule",
            FAMILY,
            (
                tensor("query", BF16, min_rank=3, max_rank=3),
                tensor("key", BF16, min_rank=3, max_rank=3),
                tensor("value", BF16, min_rank=3, max_rank=3),
                tensor("beta", BF16, min_rank=2, max_rank=2),
                ref("stateRef", BF16, max_rank=4),
                tensor("actualSeqLengths", I32, min_rank=1, max_rank=1),
                tensor("ssmStateIndices", I32, min_rank=1, max_rank=1, index_of=IndexOf("stateRef")),
                tensor("g", {D.ACL_FLOAT}, optional=True, min_rank=2, max_rank=2),
                tensor("gk", {D.ACL_FLOAT}, optional=True, min_rank=3, max_rank=3),
                tensor("numAcceptedTokens", I32, min_rank=1, max_rank=1),
                float_attr("scaleValue", c_type="float"),
                out("out", BF16, max_rank=3),
            ),
            _rgdr_infer,
            samples=_rgdr_samples,
            error_samples=_rgdr_errors,
            summary="gated delta-rule recurrence over packed short sequences, states in a slot pool",
        )
    ],
    {
        "RecurrentGatedDeltaRule": table(
            "a recurrence: S_t = α S + β (v - α S k) kᵀ subtracts, so the magnitudes run (|inputs|) bounds"
            " nothing, and the error of the state written after each token compounds over the sequence"
        )
    },
)

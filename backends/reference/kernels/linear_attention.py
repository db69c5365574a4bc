"""Reference kernels of the linear-attention family: RecurrentGatedDeltaRule in float64.

The rules are documented in :mod:`acl_core.spec.ops.linear_attention`.
"""

from __future__ import annotations

import numpy as np

from acl_core.errors import AclnnError, AclnnStatus
from acl_core.spec.ops.linear_attention import MAX_SEQ
from acl_reference.call import RefCall
from acl_reference.kernels import kernel

F64 = np.float64


def _launch_error(message: str) -> AclnnError:
    return AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, f"RecurrentGatedDeltaRule: {message}")


def check_sequences(lengths: np.ndarray, accepted: np.ndarray, slots: np.ndarray, tokens: int, blocks: int) -> None:
    """The device-data rules (161002): lengths in [1, 8] summing to T, accepted in [1, L], slots in the pool."""
    if np.any(lengths < 1) or np.any(lengths > MAX_SEQ):
        raise _launch_error(f"actualSeqLengths must lie in [1, {MAX_SEQ}]; got {lengths.tolist()}")
    if int(lengths.sum()) != tokens:
        raise _launch_error(f"actualSeqLengths sum to {int(lengths.sum())}, but the inputs hold T={tokens} tokens")
    if np.any(accepted < 1) or np.any(accepted > lengths):
        raise _launch_error(f"numAcceptedTokens must lie in [1, actualSeqLengths]; got {accepted.tolist()}")
    if np.any(slots < 0) or np.any(slots >= blocks):
        raise _launch_error(f"ssmStateIndices must lie in [0, {blocks - 1}] (BlockNum = {blocks})")


@kernel("RecurrentGatedDeltaRule")
def recurrent_gated_delta_rule(k: RefCall) -> None:
    """Each sequence's state, from its accepted slot, through its tokens; out and every token's state written."""
    q, key, v = (k.read(n, F64) for n in ("query", "key", "value"))
    beta = k.read("beta", F64)
    state = k.read("stateRef", F64)
    lengths = k.read("actualSeqLengths").astype(np.int64)
    slots = k.read("ssmStateIndices").astype(np.int64)
    accepted = k.read("numAcceptedTokens").astype(np.int64)
    tokens, nk, _ = q.shape
    nv = v.shape[1]
    check_sequences(lengths, accepted, slots, tokens, state.shape[0])
    alpha = np.ones((tokens, nv)) if k["g"] is None else np.exp(k.read("g", F64))
    column = None if k["gk"] is None else np.exp(k.read("gk", F64))
    group = nv // nk
    q = np.repeat(q, group, axis=1) * float(k.value("scaleValue"))  # value head h reads key head h // group
    key = np.repeat(key, group, axis=1)
    out = np.zeros(v.shape)
    written = state.copy()
    start = 0
    for length, first in zip(lengths.tolist(), accepted.tolist()):
        s = state[slots[start + first - 1]].copy()  # [Nv, Dv, Dk]
        for t in range(start, start + length):
            s = s * alpha[t][:, None, None]
            if column is not None:
                s = s * column[t][:, None, :]
            x = np.einsum("hij,hj->hi", s, key[t])
            s = s + np.einsum("hi,hj->hij", beta[t][:, None] * (v[t] - x), key[t])
            out[t] = np.einsum("hij,hj->hi", s, q[t])
            written[slots[t]] = s
        start += length
    k.write("out", out)
    k.write("stateRef", written)

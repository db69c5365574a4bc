"""RecurrentGatedDeltaRule's reference against the document's other form of the recurrence, in torch float64.

CANN writes the update two ways: ``S_t = S_{t-1} (α_t (I - β_t k_t k_tᵀ)) + β_t v_t k_tᵀ`` and the
expanded ``α_t S_{t-1} + β_t (v_t - α_t S_{t-1} k_t) k_tᵀ``; the reference computes the second, the
tests here the first (a matrix product per token), plus hand-made cases for the slot rules.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from acl_core import eager
from acl_core.errors import AclnnError
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.linear_attention import rgdr_case

OP = "RecurrentGatedDeltaRule"


def _t(x: Any) -> torch.Tensor:
    return torch.from_numpy(np.asarray(x).astype(np.float64))


def matrix_form(args: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(out, stateRef) by ``S (α diag(e^{gk}) (I - β k kᵀ)) + β v kᵀ`` per token, in torch float64."""
    q, k, v, beta, state = (_t(args[n]) for n in ("query", "key", "value", "beta", "stateRef"))
    tokens, nk, dk = q.shape
    nv = v.shape[1]
    group = nv // nk
    g = _t(args["g"]) if args.get("g") is not None else torch.zeros(tokens, nv, dtype=torch.float64)
    gk = _t(args["gk"]) if args.get("gk") is not None else torch.zeros(tokens, nv, dk, dtype=torch.float64)
    slots = [int(s) for s in args["ssmStateIndices"]]
    out = torch.zeros(v.shape, dtype=torch.float64)
    written = state.clone()
    start = 0
    for length, first in zip(args["actualSeqLengths"].tolist(), args["numAcceptedTokens"].tolist()):
        s = state[slots[start + first - 1]].clone()
        for t in range(start, start + length):
            for h in range(nv):
                kk, qq = k[t, h // group], q[t, h // group] * args["scaleValue"]
                decay = torch.exp(g[t, h]) * torch.diag(torch.exp(gk[t, h]))
                s[h] = s[h] @ (decay - beta[t, h] * (decay @ torch.outer(kk, kk))) + beta[t, h] * torch.outer(
                    v[t, h], kk
                )
                out[t, h] = s[h] @ qq
            written[slots[t]] = s
        start += length
    return out.numpy(), written.numpy()


def _run(args: dict[str, Any]) -> dict[str, np.ndarray]:
    return eager.run(OP, "reference", op_args=args)


@pytest.mark.parametrize("sample", list(get_spec(OP).samples(np.random.default_rng(5))), ids=lambda s: s.note)  # type: ignore[misc]
def test_every_sample_matches_the_matrix_form(sample: Any) -> None:
    got = _run(sample.args)
    out, state = matrix_form(sample.args)
    # both sides compute in float64 and round once to bf16: one bf16 step where a value sits on a rounding edge
    np.testing.assert_allclose(got["out"].astype(np.float64), out, rtol=2**-7, atol=1e-6)
    np.testing.assert_allclose(got["stateRef"].astype(np.float64), state, rtol=2**-7, atol=1e-6)


def test_the_initial_state_comes_from_the_last_accepted_token_slot() -> None:
    rng = np.random.default_rng(1)
    args = rgdr_case(rng, (3,), 1, 1, 8, 4, accepted=(2,), blocks=5)
    args["ssmStateIndices"] = np.array([4, 0, 2], np.int32)
    args["beta"] = np.zeros_like(args["beta"])  # no update: each token's state is the decayed initial one
    args.pop("g")
    got = _run(args)
    initial = args["stateRef"][0].astype(np.float64)  # slot of token 1 (numAcceptedTokens 2)
    for t, slot in enumerate((4, 0, 2)):
        np.testing.assert_array_equal(got["stateRef"][slot].astype(np.float64), initial)
        q = args["query"][t].astype(np.float64) * args["scaleValue"]
        want = np.einsum("hij,hj->hi", initial, q)
        np.testing.assert_allclose(got["out"][t].astype(np.float64), want, rtol=2**-7, atol=1e-6)
    untouched = [1, 3]
    np.testing.assert_array_equal(got["stateRef"][untouched], args["stateRef"][untouched])


def test_a_full_update_with_beta_one_stores_the_value_along_the_key() -> None:
    """β = 1, α = 1 and a unit key: S k = v after the step (the delta rule's defining property)."""
    rng = np.random.default_rng(2)
    args = rgdr_case(rng, (1,), 1, 2, 16, 8, g=False)
    args["beta"] = np.ones_like(args["beta"])
    got = _run(args)
    state = got["stateRef"][args["ssmStateIndices"][0]].astype(np.float64)
    k = args["key"][0, 0].astype(np.float64)
    k = k / np.linalg.norm(k)  # the bf16 key is unit up to its rounding
    np.testing.assert_allclose(state @ k, args["value"][0].astype(np.float64), atol=3e-2)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"actualSeqLengths": np.array([2, 2], np.int32)}, "sum to 4"),
        ({"actualSeqLengths": np.array([3, 0], np.int32)}, "[1, 8]"),
        ({"numAcceptedTokens": np.array([3, 1], np.int32)}, "numAcceptedTokens"),
        ({"ssmStateIndices": np.array([0, 1, 5], np.int32)}, "BlockNum = 5"),
        ({"ssmStateIndices": np.array([0, -1, 2], np.int32)}, "ssmStateIndices"),
    ],
)
def test_device_data_rules_are_161002(change: dict[str, Any], message: str) -> None:
    args = rgdr_case(np.random.default_rng(3), (2, 1), 1, 1, 8, 8, blocks=5)
    with pytest.raises(AclnnError) as err:
        _run({**args, **change})
    assert err.value.code == 161002 and message in str(err.value)


def test_samples_run_and_error_samples_fail_as_declared() -> None:
    spec = get_spec(OP)
    assert spec.samples is not None and spec.error_samples is not None
    rng = np.random.default_rng(7)
    notes = [s.note for s in spec.samples(rng)]
    assert len(notes) == len(set(notes))
    for err in spec.error_samples(rng):
        with pytest.raises(AclnnError) as info:
            _run(err.args)
        assert int(info.value.code) == err.code, err.note

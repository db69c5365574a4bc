"""The reference's ApplyTopKTopP and AttentionUpdate against PyTorch formulations of CANN's formulas, and codes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from acl_core.dtypes import DataType as D
from acl_core.errors import AclnnError
from acl_core.spec.ops.serving import attention_update_args
from tests.conftest import assert_close
from tests.ops.torch_ref import ref, to_numpy, to_torch

INVALID = 161002


def code_of(op: str, **kwargs: object) -> int:
    """The CANN status a reference call fails with (the test fails if it succeeds)."""
    with pytest.raises(AclnnError) as exc:
        ref(op, **kwargs)
    return exc.value.code


# ----------------------------------------------------------------------------- ApplyTopKTopP
def top_k_top_p_torch(logits: torch.Tensor, p: torch.Tensor | None, k: torch.Tensor | None) -> torch.Tensor:
    """The documented formula with torch's sort / softmax / cumsum, in float64 (vLLM's formulation)."""
    values, order = torch.sort(logits.double(), dim=-1, descending=False, stable=True)
    if k is not None:
        threshold = values.gather(1, (values.shape[1] - k.long())[:, None])
        values = values.masked_fill(values < threshold, float("-inf"))
    if p is not None:
        running = values.softmax(dim=-1).cumsum(dim=-1)
        cut = running <= 1 - p.double()[:, None]
        cut[:, -1] = False
        values = values.masked_fill(cut, float("-inf"))
    return torch.empty_like(values).scatter_(1, order, values).to(logits.dtype)


@pytest.mark.parametrize("which", ["both", "p only", "k only"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["float32", "float16"])
def test_apply_top_k_top_p_matches_torch(dtype: type, which: str, rng: np.random.Generator) -> None:
    batch, vocab = 6, 1000
    logits = (rng.standard_normal((batch, vocab)) * 3).astype(dtype)
    p = rng.uniform(0.05, 0.95, batch).astype(dtype) if which != "k only" else None
    k = rng.integers(1, vocab + 1, batch).astype(np.int32) if which != "p only" else None
    got = ref("ApplyTopKTopP", logits=logits, p=p, k=k)["out"]
    want = top_k_top_p_torch(to_torch(logits), None if p is None else to_torch(p), None if k is None else to_torch(k))
    np.testing.assert_array_equal(got, to_numpy(want))
    kept = np.isfinite(got)
    assert kept.any(axis=1).all()  # every row keeps its largest
    np.testing.assert_array_equal(got[kept], logits[kept])


def test_apply_top_k_top_p_by_hand() -> None:
    logits = np.float32([[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]])  # CANN's documented example
    got = ref("ApplyTopKTopP", logits=logits, p=np.float32([0.2, 0.4, 0.6]), k=np.int32([1, 2, 3]))["out"]
    e = np.exp([0.0, 1.0, 2.0])  # row 2: top-3 keeps 10, 11, 12; running sums from the smallest vs 1 - 0.6
    assert (np.cumsum(e / e.sum()) <= 1 - 0.6).tolist() == [True, True, False]
    e = np.exp([0.0, 1.0])  # row 1: top-2 keeps 7, 8; 7's probability 0.27 <= 1 - 0.4
    assert (np.cumsum(e / e.sum()) <= 1 - 0.4).tolist() == [True, False]
    inf = -np.inf
    np.testing.assert_array_equal(got, [[inf, inf, inf, 4], [inf, inf, inf, 8], [inf, inf, inf, 12]])


def test_apply_top_k_keeps_ties_with_the_kth_value() -> None:
    logits = np.float32([[3.0, 1.0, 3.0, 2.0, 3.0]])
    got = ref("ApplyTopKTopP", logits=logits, p=None, k=np.int32([2]))["out"]
    np.testing.assert_array_equal(got, [[3.0, -np.inf, 3.0, -np.inf, 3.0]])


def test_apply_top_p_shares_the_mass_of_infinite_logits() -> None:
    logits = np.float32([[np.inf, 0.0, np.inf, -1.0], [-np.inf, -np.inf, -np.inf, -np.inf]])
    got = ref("ApplyTopKTopP", logits=logits, p=np.float32([0.6, 0.3]), k=None)["out"]
    # row 0: the two +Inf share the mass (0.5 each); running sums 0, 0, 0.5, 1 against 1 - 0.6 keep both
    # row 1: every entry equals the largest (-Inf): equal weights 1/4, running sums 1/4 ... 1 against 0.7
    np.testing.assert_array_equal(got[0], [np.inf, -np.inf, np.inf, -np.inf])
    np.testing.assert_array_equal(got[1], [-np.inf] * 4)


def test_apply_top_k_top_p_codes(rng: np.random.Generator) -> None:
    logits = rng.standard_normal((2, 10)).astype(np.float32)
    assert code_of("ApplyTopKTopP", logits=logits, p=None, k=None) == 161001
    assert code_of("ApplyTopKTopP", logits=logits, p=np.float16([0.5, 0.5]), k=None) == INVALID
    assert code_of("ApplyTopKTopP", logits=logits, p=None, k=np.int32([0, 3])) == INVALID
    assert code_of("ApplyTopKTopP", logits=logits, p=None, k=np.int32([11, 3])) == INVALID


# ----------------------------------------------------------------------------- AttentionUpdate
@pytest.mark.parametrize("sp", [1, 2, 5, 16])
@pytest.mark.parametrize("dtype", [D.ACL_FLOAT, D.ACL_BF16], ids=["float32", "bf16"])
def test_attention_update_matches_torch_logsumexp(sp: int, dtype: D, rng: np.random.Generator) -> None:
    args = attention_update_args(rng, sp, 9, 32, dtype, 1)
    got = ref("AttentionUpdate", **args)
    lse = torch.stack([torch.from_numpy(a).double() for a in args["lse"]])
    local = torch.stack([to_torch(o).double() for o in args["localOut"]])
    lse_m = torch.logsumexp(lse, dim=0)
    want = (local * torch.exp(lse - lse_m)[..., None]).sum(0)
    assert_close(got["out"], to_numpy(want.to(to_torch(args["localOut"][0]).dtype)))
    assert_close(got["lseOut"], lse_m.float().numpy())


def test_attention_update_of_equal_partials_is_their_value(rng: np.random.Generator) -> None:
    o = rng.standard_normal((4, 8)).astype(np.float32)
    lse = np.float32([0.5, -1.0, 3.0, 2.0])
    got = ref("AttentionUpdate", lse=[lse, lse, lse], localOut=[o, o, o], updateType=1)
    assert_close(got["out"], o)
    assert_close(got["lseOut"], (lse.astype(np.float64) + np.log(3)).astype(np.float32))


def test_attention_update_codes(rng: np.random.Generator) -> None:
    args = attention_update_args(rng, 2, 3, 8, D.ACL_FLOAT, 0)
    assert code_of("AttentionUpdate", **{**args, "updateType": 3}) == INVALID
    assert code_of("AttentionUpdate", **{**args, "lseOut": np.zeros(3, np.float32)}) == INVALID
    assert code_of("AttentionUpdate", **attention_update_args(rng, 2, 3, 20, D.ACL_FLOAT, 0)) == INVALID
    assert code_of("AttentionUpdate", **attention_update_args(rng, 17, 3, 8, D.ACL_FLOAT, 0)) == INVALID

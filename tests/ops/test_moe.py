"""The reference's MoE routing ops against PyTorch, hand-written formulations of CANN's formulas, and codes."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
import torch

from acl_core.dtypes import DataType as D
from acl_core.dtypes import from_numpy
from acl_core.errors import AclnnError
from acl_core.formats import Format
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.moe import distinct_logits, init_v2_args, routing_indices, unpermute_args
from acl_core.spec.validate import check_inputs
from acl_core.tensor import AclTensor
from acl_reference.kernels.moe import ranking_exp, tree_sum
from tests.conftest import assert_close
from tests.ops.torch_ref import check_samples_and_errors, ref, to_numpy, to_torch

BF16 = ml_dtypes.bfloat16
DTYPES = [np.float32, np.float16, BF16]
TILING = 561002
INVALID = 161002


def code_of(op: str, **kwargs: object) -> int:
    """The CANN status a reference call fails with (the test fails if it succeeds)."""
    with pytest.raises(AclnnError) as exc:
        ref(op, **kwargs)
    return exc.value.code


# ----------------------------------------------------------------------------- MoeGatingTopKSoftmax
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(6, 8), (2, 3, 16)], ids=str)
def test_gating_matches_torch_softmax_topk(shape: tuple[int, ...], dtype: type, rng: np.random.Generator) -> None:
    rows, experts = int(np.prod(shape[:-1])), shape[-1]
    x = distinct_logits(rng, rows, experts).reshape(shape).astype(dtype)
    k = 3
    got = ref("MoeGatingTopKSoftmax", x=x, k=k)
    probs = torch.softmax(to_torch(x).double(), dim=-1)
    values, experts_t = torch.topk(probs, k, dim=-1)
    assert got["yOut"].dtype == np.dtype(dtype)
    assert_close(got["yOut"], to_numpy(values.to(to_torch(x).dtype)))
    np.testing.assert_array_equal(got["expertIdxOut"], experts_t.numpy().astype(np.int32))
    # rowIdx as the document builds it: arange(numRows*k) reshaped [k, numRows] and transposed
    want_rows = torch.arange(rows * k, dtype=torch.int32).reshape(k, rows).T.reshape(*shape[:-1], k)
    np.testing.assert_array_equal(got["rowIdxOut"], want_rows.numpy())
    assert got["expertIdxOut"].dtype == np.int32 and got["rowIdxOut"].dtype == np.int32


def test_gating_row_index_formula_by_hand() -> None:
    x = np.array([[0.1, 1.1, 2.1, 3.1], [4.1, 5.1, 6.1, 7.1], [8.1, 9.1, 10.1, 11.1]], np.float32)
    got = ref("MoeGatingTopKSoftmax", x=x, k=2)
    np.testing.assert_array_equal(got["rowIdxOut"], [[0, 3], [1, 4], [2, 5]])  # rowIdx[i][j] = j*numRows + i
    np.testing.assert_array_equal(got["expertIdxOut"], [[3, 2]] * 3)
    e = np.exp(np.array([3.0, 2.0, 1.0, 0.0]))  # each row is the same logits shifted: softmax is shift-invariant
    assert_close(got["yOut"], np.tile(e[:2] / e.sum(), (3, 1)))


def test_finished_rows_get_expert_number_e_but_keep_their_values(rng: np.random.Generator) -> None:
    x = distinct_logits(rng, 5, 6).astype(np.float32)
    finished = np.array([True, False, False, True, False])
    got = ref("MoeGatingTopKSoftmax", x=x, k=2, finishedOptional=finished)
    plain = ref("MoeGatingTopKSoftmax", x=x, k=2)
    np.testing.assert_array_equal(got["expertIdxOut"][finished], np.full((2, 2), 6))
    np.testing.assert_array_equal(got["expertIdxOut"][~finished], plain["expertIdxOut"][~finished])
    assert_close(got["yOut"], plain["yOut"])
    np.testing.assert_array_equal(got["rowIdxOut"], plain["rowIdxOut"])


def test_gating_k_at_the_edges(rng: np.random.Generator) -> None:
    x = distinct_logits(rng, 3, 4).astype(np.float32)
    everything = ref("MoeGatingTopKSoftmax", x=x, k=4)
    assert_close(everything["yOut"].sum(axis=-1), np.ones(3))
    assert sorted(everything["expertIdxOut"][0]) == [0, 1, 2, 3]
    nothing = ref("MoeGatingTopKSoftmax", x=x, k=0)
    assert nothing["yOut"].shape == (3, 0) and nothing["rowIdxOut"].shape == (3, 0)


def test_gating_ties_go_to_the_lower_expert() -> None:
    got = ref("MoeGatingTopKSoftmax", x=np.array([[1.0, 3.0, 3.0, 3.0]], np.float32), k=2)
    np.testing.assert_array_equal(got["expertIdxOut"], [[1, 2]])


def _exp_tie() -> tuple[float, float]:
    """A float32 maximum and a tiny float32 logit whose float64 probabilities (``exp(x - max)``) this NumPy rounds to
    one double while the exact ones differ: exp's slope is about 0.5 there, so neighbouring inputs often tie, but
    which pairs tie depends on the build's exp (its SIMD path), so the pair is searched for, not fixed."""
    tiny = 2.0**-53  # one ulp of a float64 near 0.67 below the maximum
    top = np.float32(0.6722354)
    for _ in range(256):
        if np.exp(np.float64(0.0) - np.float64(top)) == np.exp(np.float64(tiny) - np.float64(top)):
            return float(top), tiny
        top = np.nextafter(top, np.float32(1))
    raise AssertionError("no exp rounding tie near 0.67 in 256 float32 steps")


def test_gating_ranks_by_the_logits_where_exp_rounding_would_tie() -> None:
    # expert 0 (logit 0) and expert 3 (logit tiny) below the maximum: their float64 probabilities round to the same
    # double, the exact ones differ, so the larger logit (expert 3) must come first
    top, tiny = _exp_tie()
    x = np.zeros((1, 8), np.float32)
    x[0, 3], x[0, 5] = tiny, top
    np.testing.assert_array_equal(ref("MoeGatingTopKSoftmax", x=x, k=3)["expertIdxOut"], [[5, 3, 0]])


def test_gating_rows_of_nan_probabilities_keep_expert_order() -> None:
    x = np.float32([[0.5, np.nan, 2.0, 1.0], [1.0, np.inf, 3.0, 2.0], [-np.inf] * 4, [1.0, -np.inf, 3.0, -np.inf]])
    out = ref("MoeGatingTopKSoftmax", x=x, k=3)
    np.testing.assert_array_equal(out["expertIdxOut"], [[0, 1, 2], [0, 1, 2], [0, 1, 2], [2, 0, 1]])
    assert np.isnan(out["yOut"][:3]).all() and not np.isnan(out["yOut"][3]).any()


def test_gating_errors_use_the_documented_codes(rng: np.random.Generator) -> None:
    x = distinct_logits(rng, 4, 8).astype(np.float32)
    assert code_of("MoeGatingTopKSoftmax", x=x, k=9) == TILING
    assert code_of("MoeGatingTopKSoftmax", x=x, k=-2) == TILING
    assert code_of("MoeGatingTopKSoftmax", x=np.zeros((2, 1100), np.float32), k=1025) == TILING
    assert code_of("MoeGatingTopKSoftmax", x=x, k=2, finishedOptional=np.zeros((4, 1), bool)) == TILING
    assert code_of("MoeGatingTopKSoftmax", x=x.astype(np.float64), k=2) == INVALID
    assert code_of("MoeGatingTopKSoftmax", x=x[0], k=2) == INVALID
    assert ref("MoeGatingTopKSoftmax", x=np.zeros((1, 1100), np.float32), k=1024)["yOut"].shape == (1, 1024)


# ----------------------------------------------------------------------------- MoeInitRouting
def init_routing_by_loops(x: np.ndarray, row_idx: np.ndarray, expert_idx: np.ndarray, active: int) -> tuple:
    """The documented formula with plain loops: visit experts in increasing order, rows in row-major order."""
    rows, k = expert_idx.shape
    flat_experts, flat_rows = expert_idx.reshape(-1).tolist(), row_idx.reshape(-1).tolist()
    sorted_experts, sorted_rows = [], []
    for e in sorted(set(flat_experts)):
        for pos, ex in enumerate(flat_experts):
            if ex == e:
                sorted_experts.append(ex)
                sorted_rows.append(flat_rows[pos])
    expanded_row = [0] * (rows * k)
    for i, r in enumerate(sorted_rows):
        expanded_row[r] = i
    n = min(rows, active) * k
    expanded_x = np.array([x[r % rows] for r in sorted_rows[:n]]).reshape(n, x.shape[1])
    return expanded_x, np.array(expanded_row), np.array(sorted_experts)


def test_init_routing_documented_example() -> None:
    x = np.array([[0.1] * 4, [0.2] * 4, [0.3] * 4], np.float32)
    expert = np.array([[1, 2], [0, 1], [0, 2]], np.int32)
    row = np.array([[0, 3], [1, 4], [2, 5]], np.int32)
    got = ref("MoeInitRouting", x=x, rowIdx=row, expertIdx=expert, activeNum=3)
    np.testing.assert_array_equal(got["expandedExpertIdxOut"], [0, 0, 1, 1, 2, 2])
    np.testing.assert_array_equal(got["expandedRowIdxOut"], [2, 0, 1, 4, 3, 5])
    np.testing.assert_array_equal(got["expandedXOut"], x[[1, 2, 0, 1, 0, 2]])


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("active", [7, 3, 0, 50])
def test_init_routing_matches_the_formula(active: int, dtype: type, rng: np.random.Generator) -> None:
    expert, row = routing_indices(rng, 7, 5, 3)
    x = rng.standard_normal((7, 4)).astype(dtype)
    got = ref("MoeInitRouting", x=x, rowIdx=row, expertIdx=expert, activeNum=active)
    want_x, want_rows, want_experts = init_routing_by_loops(x, row, expert, active)
    assert got["expandedXOut"].dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got["expandedXOut"], want_x.astype(dtype))
    np.testing.assert_array_equal(got["expandedRowIdxOut"], want_rows)
    np.testing.assert_array_equal(got["expandedExpertIdxOut"], want_experts)


def test_init_routing_keeps_row_major_order_within_an_expert() -> None:
    # token 0 reaches expert 5 as its second choice (rowIdx 2), token 1 as its first (rowIdx 1)
    expert = np.array([[3, 5], [5, 3]], np.int32)
    row = np.array([[0, 2], [1, 3]], np.int32)
    got = ref("MoeInitRouting", x=np.eye(2, dtype=np.float32), rowIdx=row, expertIdx=expert, activeNum=2)
    np.testing.assert_array_equal(got["expandedExpertIdxOut"], [3, 3, 5, 5])
    np.testing.assert_array_equal(got["expandedXOut"], np.eye(2)[[0, 1, 0, 1]])
    np.testing.assert_array_equal(got["expandedRowIdxOut"], [0, 3, 2, 1])


def test_init_routing_errors(rng: np.random.Generator) -> None:
    expert, row = routing_indices(rng, 4, 6, 2)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    assert code_of("MoeInitRouting", x=x, rowIdx=row, expertIdx=expert, activeNum=-1) == TILING
    assert code_of("MoeInitRouting", x=x[None], rowIdx=row, expertIdx=expert, activeNum=4) == TILING
    assert code_of("MoeInitRouting", x=x, rowIdx=row.T.copy(), expertIdx=expert, activeNum=4) == TILING
    assert code_of("MoeInitRouting", x=x, rowIdx=row, expertIdx=expert.astype(np.float32), activeNum=4) == INVALID
    bad_rows = row.copy()
    bad_rows[0, 0] = bad_rows[0, 1]  # a repeated rowIdx: not a permutation, found when the op runs
    with pytest.raises(AclnnError) as exc:
        ref("MoeInitRouting", x=x, rowIdx=bad_rows, expertIdx=expert, activeNum=4)
    assert exc.value.code == INVALID and "exactly once" in exc.value.message


# ----------------------------------------------------------------------------- MoeFinalizeRouting
def finalize_by_loops(
    expanded_x: np.ndarray,
    x1: np.ndarray,
    x2: np.ndarray | None,
    bias: np.ndarray,
    scales: np.ndarray,
    expanded_row: np.ndarray,
    expert: np.ndarray,
) -> np.ndarray:
    """out(i,j) = x1 + x2 + Σ_k scales[i,k] * (expandedX[expandedRowIdx[i + k*numRows], j] + bias[expert[i,k], j])."""
    rows, hidden = x1.shape
    top = scales.shape[1]
    out = np.zeros((rows, hidden))
    for i in range(rows):
        for j in range(hidden):
            acc = float(x1[i, j]) + (float(x2[i, j]) if x2 is not None else 0.0)
            for kk in range(top):
                src = expanded_row[i + kk * rows]
                acc += float(scales[i, kk]) * (float(expanded_x[src, j]) + float(bias[expert[i, kk], j]))
            out[i, j] = acc
    return out


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("with_x2", [True, False])
def test_finalize_matches_the_formula(with_x2: bool, dtype: type, rng: np.random.Generator) -> None:
    rows, top, hidden, experts = 5, 3, 4, 6
    expert, _ = routing_indices(rng, rows, experts, top)
    expanded_row = rng.permutation(rows * top).astype(np.int32)
    args = {
        "expandedX": rng.standard_normal((rows * top, hidden)).astype(dtype),
        "x1": rng.standard_normal((rows, hidden)).astype(dtype),
        "x2Optional": rng.standard_normal((rows, hidden)).astype(dtype) if with_x2 else None,
        "bias": rng.standard_normal((experts, hidden)).astype(dtype),
        "scales": rng.uniform(0, 1, (rows, top)).astype(dtype),
        "expandedRowIdx": expanded_row,
        "expandedExpertIdx": expert,
    }
    got = ref("MoeFinalizeRouting", **args)["out"]
    want = finalize_by_loops(
        args["expandedX"],
        args["x1"],
        args["x2Optional"],
        args["bias"],
        args["scales"],
        expanded_row,
        expert,
    )
    assert got.dtype == np.dtype(dtype)
    assert_close(got, want)


def test_finalize_errors(rng: np.random.Generator) -> None:
    expert, _ = routing_indices(rng, 3, 4, 2)
    args = {
        "expandedX": np.zeros((6, 5), np.float32),
        "x1": np.zeros((3, 5), np.float32),
        "bias": np.zeros((4, 5), np.float32),
        "scales": np.ones((3, 2), np.float32),
        "expandedRowIdx": np.arange(6, dtype=np.int32),
        "expandedExpertIdx": expert,
    }
    assert ref("MoeFinalizeRouting", **args)["out"].shape == (3, 5)
    assert code_of("MoeFinalizeRouting", **{**args, "bias": np.zeros((4, 6), np.float32)}) == INVALID
    assert code_of("MoeFinalizeRouting", **{**args, "x1": np.zeros((3, 5), np.float16)}) == INVALID
    assert code_of("MoeFinalizeRouting", **{**args, "expandedX": np.zeros((5, 5), np.float32)}) == INVALID
    assert code_of("MoeFinalizeRouting", **{**args, "expandedRowIdx": np.arange(6, dtype=np.int64)}) == INVALID
    assert code_of("MoeFinalizeRouting", **{**args, "scales": None}) == 161001
    with pytest.raises(AclnnError) as exc:
        ref("MoeFinalizeRouting", **{**args, "expandedRowIdx": np.array([0, 1, 2, 3, 4, 6], np.int32)})
    assert exc.value.code == INVALID and "expandedRowIdx" in exc.value.message
    with pytest.raises(AclnnError) as exc:
        ref("MoeFinalizeRouting", **{**args, "expandedExpertIdx": np.full((3, 2), 4, np.int32)})
    assert exc.value.code == INVALID and "expandedExpertIdx" in exc.value.message


# ----------------------------------------------------------------------------- the pipeline
def test_gate_route_compute_combine_equals_the_direct_mixture(rng: np.random.Generator) -> None:
    """Gating → InitRouting → per-expert GEMM (GroupedMatmulV5) → FinalizeRouting equals Σ_j p_ij (x_i W_e + b_e)."""
    rows, hidden, experts, top, width = 6, 4, 5, 2, 4
    x = rng.standard_normal((rows, hidden)).astype(np.float32)
    logits = distinct_logits(rng, rows, experts).astype(np.float32)
    weights = rng.standard_normal((experts, hidden, width)).astype(np.float32)
    bias = rng.standard_normal((experts, width)).astype(np.float32)
    gate = ref("MoeGatingTopKSoftmax", x=logits, k=top)
    routed = ref("MoeInitRouting", x=x, rowIdx=gate["rowIdxOut"], expertIdx=gate["expertIdxOut"], activeNum=rows)
    counts = np.bincount(routed["expandedExpertIdxOut"], minlength=experts).astype(np.int64)
    ffn = ref(
        "GroupedMatmulV5",
        x=[routed["expandedXOut"]],
        weight=[weights],
        groupListOptional=counts,
        splitItem=2,
        groupType=0,
        groupListType=1,
        actType=0,
    )["out"][0]
    got = ref(
        "MoeFinalizeRouting",
        expandedX=ffn,
        x1=np.zeros((rows, width), np.float32),
        bias=bias,
        scales=gate["yOut"],
        expandedRowIdx=routed["expandedRowIdxOut"],
        expandedExpertIdx=gate["expertIdxOut"],
    )["out"]
    probs = torch.softmax(torch.from_numpy(logits).double(), dim=-1)
    p, chosen = torch.topk(probs, top, dim=-1)
    want = np.zeros((rows, width))
    for i in range(rows):
        for j in range(top):
            e = int(chosen[i, j])
            want[i] += float(p[i, j]) * (x[i].astype(np.float64) @ weights[e] + bias[e])
    assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "op",
    [
        "MoeGatingTopKSoftmax",
        "MoeInitRouting",
        "MoeFinalizeRouting",
        "MoeInitRoutingV2",
        "MoeInitRoutingV3",
        "MoeTokenPermuteGrad",
        "MoeTokenUnpermuteGrad",
        "MoeGatingTopKBackward",
    ],
)
def test_conformance_samples_run_and_error_samples_fail_as_declared(op: str) -> None:
    check_samples_and_errors(get_spec(op), 11)


# ----------------------------------------------------------------------------- exact ranking arithmetic
def test_ranking_exp_is_within_two_ulps_of_exp() -> None:
    t = np.concatenate([np.linspace(-708, 709, 200001), np.float64([0.0, -0.0, 1e-300, -1e-17, 0.5, 1.0])])
    got, want = ranking_exp(t), np.exp(t)
    ulps = np.abs(got - want) / np.spacing(want)
    assert ulps.max() <= 2, ulps.max()
    assert ranking_exp(np.float64([0.0]))[0] == 1.0
    edges = ranking_exp(np.float64([709.5, np.inf, -708.5, -np.inf, np.nan]))
    np.testing.assert_array_equal(edges[:4], [np.inf, np.inf, 0.0, 0.0])
    assert np.isnan(edges[4])


def test_tree_sum_adds_halves_in_a_fixed_order() -> None:
    v = np.float64([[1e16, 1.0, -1e16, 1.0]])
    # (1e16 + -1e16) + (1 + 1) = 2, where left to right loses the first 1
    assert tree_sum(v)[0] == 2.0 and ((1e16 + 1.0) - 1e16) + 1.0 == 1.0
    odd = np.arange(7, dtype=np.float64)[None]  # padded with a zero to 8
    assert tree_sum(odd)[0] == 21.0 and tree_sum(np.zeros((3, 0))).tolist() == [0.0, 0.0, 0.0]


# ----------------------------------------------------------------------------- MoeGatingTopK
def gating_golden(
    x: np.ndarray,
    bias: np.ndarray | None,
    k: int,
    k_group: int,
    groups: int,
    mode: int,
    renorm: int,
    norm_type: int,
    scaling: float,
    eps: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CANN's documented formula in torch float64: norm, + bias, group scores, masked top-k, renorm, scale."""
    t = torch.from_numpy(x.astype(np.float64))
    norm = torch.sigmoid(t) if norm_type == 1 else torch.softmax(t, dim=-1)
    value = norm if bias is None else norm + torch.from_numpy(bias.astype(np.float64))
    rows = t.shape[0]
    grouped = value.reshape(rows, groups, -1)
    score = grouped.amax(-1) if mode == 0 else torch.topk(grouped, 2, dim=-1).values.sum(-1)
    chosen = torch.sort(score, dim=-1, descending=True, stable=True).indices[:, :k_group]
    keep = torch.zeros(rows, groups, dtype=torch.bool)
    keep[torch.arange(rows)[:, None], chosen] = True
    masked = torch.where(keep[..., None], grouped, float("-inf")).reshape(rows, -1)
    experts = torch.sort(masked, dim=-1, descending=True, stable=True).indices[:, :k]
    y = torch.gather(norm, 1, experts)
    if norm_type == 1 or renorm == 1:
        y = y / (y.sum(-1, keepdim=True) + eps)
    return (y * scaling).numpy(), experts.numpy(), norm.numpy()


GATING_CASES = {
    "softmax": dict(k=4, kGroup=1, groupCount=1, groupSelectMode=0, renorm=0, normType=0),
    "softmax renorm, groups by max": dict(k=3, kGroup=2, groupCount=4, groupSelectMode=0, renorm=1, normType=0),
    "sigmoid, groups by top-2 sum": dict(k=8, kGroup=4, groupCount=8, groupSelectMode=1, renorm=0, normType=1),
}


@pytest.mark.parametrize("bias", [False, True], ids=["no bias", "bias"])
@pytest.mark.parametrize("case", list(GATING_CASES))
def test_gating_top_k_matches_the_documented_formula(case: str, bias: bool, rng: np.random.Generator) -> None:
    attrs = GATING_CASES[case]
    rows, experts = 6, 64
    x = distinct_logits(rng, rows, experts).astype(np.float32) / 4
    b = (rng.permutation(experts) / experts * 0.3).astype(np.float32) if bias else None
    got = ref("MoeGatingTopK", x=x, biasOptional=b, outFlag=True, routedScalingFactor=2.5, eps=1e-20, **attrs)
    y, idx, norm = gating_golden(
        x,
        b,
        attrs["k"],
        attrs["kGroup"],
        attrs["groupCount"],
        attrs["groupSelectMode"],
        attrs["renorm"],
        attrs["normType"],
        2.5,
        float(np.float32(1e-20)),
    )
    np.testing.assert_array_equal(got["expertIdxOut"], idx)
    assert_close(got["yOut"], y.astype(np.float32))
    assert_close(got["outOut"], norm.astype(np.float32))


def test_gating_top_k_groups_by_hand() -> None:
    # 2 groups of 3: group 1 has the larger top-2 sum (0.9 + 0.8) though group 0 has the maximum (1.0)
    x = np.float32([[4.0, -3.0, -3.0, 2.0, 1.5, -1.0]])
    sig = 1 / (1 + np.exp(-x.astype(np.float64)))
    common = dict(
        x=x, k=2, kGroup=1, groupCount=2, renorm=0, normType=1, outFlag=True, routedScalingFactor=1.0, eps=0.0
    )
    by_sum = ref("MoeGatingTopK", groupSelectMode=1, **common)
    np.testing.assert_array_equal(by_sum["expertIdxOut"], [[3, 4]])
    assert_close(by_sum["yOut"], (sig[:, [3, 4]] / sig[:, [3, 4]].sum()).astype(np.float32))
    by_max = ref("MoeGatingTopK", groupSelectMode=0, **common)
    np.testing.assert_array_equal(by_max["expertIdxOut"], [[0, 1]])


def test_gating_top_k_ties_go_to_the_lower_number() -> None:
    x = np.float32([[1.0, 2.0, 2.0, 1.0, 2.0, 2.0]])
    attrs = dict(renorm=0, normType=1, outFlag=False, routedScalingFactor=1.0, eps=1e-20)
    got = ref("MoeGatingTopK", x=x, k=3, kGroup=1, groupCount=2, groupSelectMode=1, **attrs)
    np.testing.assert_array_equal(got["expertIdxOut"], [[1, 2, 0]])  # equal groups: group 0 first
    got = ref("MoeGatingTopK", x=x, k=4, kGroup=2, groupCount=2, groupSelectMode=0, **attrs)
    np.testing.assert_array_equal(got["expertIdxOut"], [[1, 2, 4, 5]])


def test_gating_top_k_without_bias_ranks_by_the_logits() -> None:
    # sigmoid(40) and sigmoid(41) are both 1.0 in float64: the larger logit must still come first
    x = np.float32([[40.0, 41.0, -1.0, 0.0]])
    got = ref(
        "MoeGatingTopK",
        x=x,
        k=2,
        kGroup=1,
        groupCount=1,
        groupSelectMode=0,
        renorm=0,
        normType=1,
        outFlag=False,
        routedScalingFactor=1.0,
        eps=1e-20,
    )
    np.testing.assert_array_equal(got["expertIdxOut"], [[1, 0]])


def test_gating_top_k_codes(rng: np.random.Generator) -> None:
    x = distinct_logits(rng, 2, 16).astype(np.float32)
    attrs = dict(
        k=2,
        kGroup=1,
        groupCount=1,
        groupSelectMode=0,
        renorm=0,
        normType=0,
        outFlag=False,
        routedScalingFactor=1.0,
        eps=1e-20,
    )
    assert code_of("MoeGatingTopK", x=x, **{**attrs, "k": 0}) == TILING
    assert code_of("MoeGatingTopK", x=x, **{**attrs, "groupCount": 3}) == TILING
    assert code_of("MoeGatingTopK", x=x, **{**attrs, "normType": 2}) == TILING
    assert code_of("MoeGatingTopK", x=x[None], **attrs) == TILING
    assert code_of("MoeGatingTopK", x=x, biasOptional=np.zeros(16, np.float16), **attrs) == INVALID


# ----------------------------------------------------------------------------- MoeGatingTopKBackward
def _sigmoid_gating_grad(logits: np.ndarray, idx: np.ndarray, grad_y: np.ndarray, scaling: float, eps: float) -> Any:
    """d(loss)/d(logits) by autograd through MoeGatingTopK's sigmoid forward: s·sel/(Σ sel + eps), sel = σ(x)[idx]."""
    x = torch.from_numpy(logits.astype(np.float64)).requires_grad_()
    chosen = torch.sigmoid(x).gather(1, torch.from_numpy(idx.astype(np.int64)))
    y = scaling * chosen / (chosen.sum(dim=1, keepdim=True) + eps)
    (grad,) = torch.autograd.grad(y, x, torch.from_numpy(grad_y.astype(np.float64)))
    return grad.numpy()


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize(("rows", "experts", "k"), [(7, 256, 8), (4, 8, 2), (3, 16, 16)], ids=str)
def test_gating_top_k_backward_is_the_sigmoid_forwards_gradient(
    rows: int, experts: int, k: int, dtype: type, rng: np.random.Generator
) -> None:
    logits = rng.uniform(-4, 4, (rows, experts))
    x_norm = (1.0 / (1.0 + np.exp(-logits))).astype(np.float32)
    idx = np.stack([rng.permutation(experts)[:k] for _ in range(rows)]).astype(np.int32)
    grad_y = rng.uniform(-2, 2, (rows, k)).astype(dtype)
    got = ref(
        "MoeGatingTopKBackward",
        xNorm=x_norm,
        gradY=grad_y,
        expertIdx=idx,
        renorm=0,
        normType=1,
        routedScalingFactor=2.5,
        eps=1e-20,
    )["out"]
    assert got.dtype == np.dtype(dtype) and got.shape == (rows, experts)
    # the gradient through the float64 sigmoid of the logits differs from the float32 xNorm's by ~1e-7 relative
    want = _sigmoid_gating_grad(np.log(x_norm / (1.0 - x_norm)).astype(np.float64), idx, grad_y, 2.5, 1e-20)
    tol = {np.float32: 2e-6, np.float16: 2e-3, BF16: 1.6e-2}[dtype]
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol * np.abs(want).max())
    unchosen = np.ones((rows, experts), bool)
    np.put_along_axis(unchosen, idx.astype(np.int64), False, axis=1)
    assert (got[unchosen] == 0).all()


def test_gating_top_k_backward_adds_repeated_experts_and_ignores_renorm(rng: np.random.Generator) -> None:
    x_norm = rng.uniform(0.05, 0.95, (2, 6)).astype(np.float32)
    grad_y = rng.uniform(-1, 1, (2, 3)).astype(np.float32)
    idx = np.array([[4, 4, 1], [0, 2, 5]], np.int32)
    attrs = dict(normType=1, routedScalingFactor=1.5, eps=1e-6)
    got = ref("MoeGatingTopKBackward", xNorm=x_norm, gradY=grad_y, expertIdx=idx, renorm=0, **attrs)["out"]
    again = ref("MoeGatingTopKBackward", xNorm=x_norm, gradY=grad_y, expertIdx=idx, renorm=1, **attrs)["out"]
    np.testing.assert_array_equal(got, again)
    x = x_norm.astype(np.float64)[0]
    d = 2 * x[4] + x[1] + float(np.float32(1e-6))
    g = 1.5 * grad_y.astype(np.float64)[0]
    beta = (x[4] * g[0] + x[4] * g[1] + x[1] * g[2]) / d
    want4 = x[4] * (1 - x[4]) * ((g[0] - beta) + (g[1] - beta)) / d
    np.testing.assert_allclose(got[0, 4], want4, rtol=1e-6)
    assert got[0, 0] == 0 and got[0, 2] == 0


def test_gating_top_k_backward_codes(rng: np.random.Generator) -> None:
    x_norm = rng.uniform(0.1, 0.9, (3, 8)).astype(np.float32)
    base = dict(xNorm=x_norm, gradY=np.ones((3, 2), np.float32), renorm=0, normType=1, routedScalingFactor=1.0)
    for bad in ([[0, 8], [1, 2], [3, 4]], [[0, 1], [-1, 2], [3, 4]]):
        assert code_of("MoeGatingTopKBackward", expertIdx=np.array(bad, np.int32), eps=1e-20, **base) == INVALID
    good = np.array([[0, 1], [2, 3], [4, 5]], np.int32)
    assert code_of("MoeGatingTopKBackward", expertIdx=good, eps=1e-20, **{**base, "normType": 0}) == INVALID
    assert code_of("MoeGatingTopKBackward", expertIdx=good, eps=1e-20, out=np.zeros((3, 8), np.float16), **base) == (
        INVALID
    )


# ----------------------------------------------------------------------------- MoeTokenPermute / Unpermute
@pytest.mark.parametrize("num_out", [0, 7, -5, 1000, -1000])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_token_permute_matches_torch(num_out: int, index_dtype: type, rng: np.random.Generator) -> None:
    tokens = rng.standard_normal((11, 3, 2)).astype(np.float32)
    indices = rng.integers(0, 5, (11, 3)).astype(index_dtype)  # many equal experts
    got = ref("MoeTokenPermute", tokens=tokens, indices=indices, numOutTokens=num_out, paddedMode=False)
    order = torch.argsort(torch.from_numpy(indices.astype(np.int64)).reshape(-1), stable=True)
    kept = order[:num_out] if num_out else order
    want = torch.index_select(torch.from_numpy(tokens), 0, kept // 3)
    np.testing.assert_array_equal(got["permuteTokensOut"], want.numpy())
    np.testing.assert_array_equal(got["sortedIndicesOut"], torch.argsort(order).numpy())
    assert got["sortedIndicesOut"].dtype == np.int32


def test_token_permute_documented_example() -> None:
    x = np.float32([[0.1] * 4, [0.2] * 4, [0.3] * 4])
    got = ref("MoeTokenPermute", tokens=x, indices=np.int32([[1, 2], [0, 1], [0, 2]]), numOutTokens=0, paddedMode=False)
    np.testing.assert_array_equal(got["sortedIndicesOut"], [2, 4, 0, 3, 1, 5])
    np.testing.assert_array_equal(got["permuteTokensOut"], x[[1, 2, 0, 1, 0, 2]])


def test_token_permute_refuses_experts_out_of_range_when_it_runs() -> None:
    for bad in (-1, 16777215):
        with pytest.raises(AclnnError) as exc:
            ref(
                "MoeTokenPermute",
                tokens=np.ones((2, 2), np.float32),
                indices=np.int64([[0, bad], [1, 2]]),
                numOutTokens=0,
                paddedMode=False,
            )
        assert exc.value.code == INVALID


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_token_unpermute_matches_torch(dtype: type, rng: np.random.Generator) -> None:
    args = unpermute_args(rng, 7, 3, 5, from_numpy(np.dtype(dtype)), D.ACL_FLOAT)
    got = ref("MoeTokenUnpermute", **args)["out"]
    t = to_torch(args["permutedTokens"]).double()
    gathered = torch.index_select(t, 0, torch.from_numpy(args["sortedIndices"].astype(np.int64))).reshape(7, 3, 5)
    want = (gathered * torch.from_numpy(args["probsOptional"]).double()[..., None]).sum(1)
    assert got.dtype == np.dtype(dtype)
    assert_close(got, to_numpy(want.to(to_torch(args["permutedTokens"]).dtype)))


def test_permute_then_unpermute_restores_the_tokens(rng: np.random.Generator) -> None:
    tokens = rng.standard_normal((9, 4)).astype(np.float32)
    indices = rng.integers(0, 6, (9, 2)).astype(np.int32)
    fwd = ref("MoeTokenPermute", tokens=tokens, indices=indices, numOutTokens=0, paddedMode=False)
    probs = np.full((9, 2), 0.5, np.float32)
    back = ref(
        "MoeTokenUnpermute",
        permutedTokens=fwd["permuteTokensOut"],
        sortedIndices=fwd["sortedIndicesOut"],
        probsOptional=probs,
        paddedMode=False,
        restoreShapeOptional=None,
    )
    np.testing.assert_array_equal(back["out"], tokens)  # 0.5·t + 0.5·t, exact


def test_token_unpermute_codes(rng: np.random.Generator) -> None:
    args = unpermute_args(rng, 4, 2, 3, D.ACL_FLOAT, D.ACL_FLOAT)
    assert code_of("MoeTokenUnpermute", **{**args, "paddedMode": True}) == INVALID
    assert code_of("MoeTokenUnpermute", **{**args, "probsOptional": np.ones((4, 3), np.float32)}) == TILING
    bad = args["sortedIndices"].copy()
    bad[0] = 8
    assert code_of("MoeTokenUnpermute", **{**args, "sortedIndices": bad}) == INVALID


# ----------------------------------------------------------------------------- MoeTokenPermuteGrad / UnpermuteGrad
@pytest.mark.parametrize("num_out", [0, 13, -9])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_token_permute_grad_is_torch_autograd_of_the_forward(
    num_out: int, dtype: type, rng: np.random.Generator
) -> None:
    tokens = rng.standard_normal((8, 5)).astype(dtype)
    indices = rng.integers(0, 4, (8, 3)).astype(np.int32)  # many equal experts: stable order matters
    fwd = ref("MoeTokenPermute", tokens=tokens, indices=indices, numOutTokens=num_out, paddedMode=False)
    kept = fwd["permuteTokensOut"].shape[0]
    grad = rng.standard_normal((kept, 5)).astype(dtype)
    got = ref(
        "MoeTokenPermuteGrad",
        permutedOutputGrad=grad,
        sortedIndices=fwd["sortedIndicesOut"],
        numTopk=3,
        paddedMode=False,
    )["out"]
    x = torch.from_numpy(tokens.astype(np.float64)).requires_grad_()
    order = torch.argsort(torch.from_numpy(indices.astype(np.int64)).reshape(-1), stable=True)[:kept]
    torch.index_select(x, 0, order // 3).backward(torch.from_numpy(grad.astype(np.float64)))
    assert got.dtype == np.dtype(dtype)
    assert x.grad is not None
    np.testing.assert_array_equal(got, x.grad.numpy().astype(dtype))  # float64 sums of ≤ 3 terms, rounded once


def test_token_permute_grad_documented_example() -> None:
    grad = np.float32([[1, 2], [3, 4]])
    order = np.int32([0, 1])
    got = ref("MoeTokenPermuteGrad", permutedOutputGrad=grad, sortedIndices=order, numTopk=2, paddedMode=False)
    np.testing.assert_array_equal(got["out"], [[4, 6]])  # the page's example: one token, top-2


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("with_probs", [True, False])
def test_token_unpermute_grad_is_torch_autograd_of_the_forward(
    dtype: type, with_probs: bool, rng: np.random.Generator
) -> None:
    d = from_numpy(np.dtype(dtype))
    args = unpermute_args(rng, 7, 3 if with_probs else 1, 5, d, d if with_probs else None)
    rows = 7 if with_probs else 7 * 1
    grad = rng.standard_normal((rows, 5)).astype(dtype)
    got = ref("MoeTokenUnpermuteGrad", **args, unpermutedTokensGrad=grad)
    t = to_torch(args["permutedTokens"]).double().requires_grad_()
    index = torch.from_numpy(args["sortedIndices"].astype(np.int64))
    picked = torch.index_select(t, 0, index).reshape(rows, -1, 5)
    if with_probs:
        p = to_torch(args["probsOptional"]).double().requires_grad_()
        out = (picked * p[..., None]).sum(1)
    else:
        out = picked.sum(1)
    out.backward(torch.from_numpy(grad.astype(np.float64)))
    assert t.grad is not None
    np.testing.assert_array_equal(got["permutedTokensGradOut"], t.grad.numpy().astype(dtype))  # exact products
    if with_probs:
        assert p.grad is not None
        assert got["probsGradOut"].dtype == np.dtype(dtype)
        assert_close(got["probsGradOut"], p.grad.numpy().astype(dtype))
    else:
        assert "probsGradOut" not in got or got["probsGradOut"] is None


def test_token_unpermute_grad_documented_example() -> None:
    ones = np.ones((3, 2), np.float32)
    args = {"permutedTokens": ones, "unpermutedTokensGrad": np.ones((1, 2), np.float32)}
    args |= {"sortedIndices": np.int32([0, 1, 2]), "probsOptional": np.ones((1, 3), np.float32)}
    got = ref("MoeTokenUnpermuteGrad", **args, paddedMode=False, restoreShapeOptional=None)
    np.testing.assert_array_equal(got["permutedTokensGradOut"], ones)
    np.testing.assert_array_equal(got["probsGradOut"], [[2, 2, 2]])  # each a sum over hidden 2


def test_token_unpermute_grad_keeps_float32_probs_beside_bf16_tokens(rng: np.random.Generator) -> None:
    args = unpermute_args(rng, 4, 2, 6, D.ACL_BF16, D.ACL_FLOAT)
    grad = rng.standard_normal((4, 6)).astype(BF16)
    got = ref("MoeTokenUnpermuteGrad", **args, unpermutedTokensGrad=grad)
    assert got["permutedTokensGradOut"].dtype == np.dtype(BF16)
    assert got["probsGradOut"].dtype == np.float32
    tokens = args["permutedTokens"].astype(np.float64)[args["sortedIndices"]].reshape(4, 2, 6)
    want = np.einsum("th,tkh->tk", grad.astype(np.float64), tokens).astype(np.float32)
    np.testing.assert_array_equal(got["probsGradOut"], want)  # one rounding of the float64 dot product


def test_token_unpermute_grad_probs_grad_out_is_required_only_with_probs() -> None:
    def handle(shape: tuple[int, ...], dtype: D, address: int) -> AclTensor:
        return AclTensor.create(shape, dtype, None, 0, Format.ACL_FORMAT_ND, None, address)

    args: dict[str, object] = {
        "permutedTokens": handle((6, 3), D.ACL_FLOAT, 0x1000),
        "unpermutedTokensGrad": handle((3, 3), D.ACL_FLOAT, 0x2000),
        "sortedIndices": handle((6,), D.ACL_INT32, 0x3000),
        "probsOptional": handle((3, 2), D.ACL_FLOAT16, 0x4000),
        "paddedMode": False,
        "restoreShapeOptional": None,
        "permutedTokensGradOut": handle((6, 3), D.ACL_FLOAT, 0x5000),
        "probsGradOut": None,
    }
    spec = get_spec("MoeTokenUnpermuteGrad")
    with pytest.raises(AclnnError) as exc:
        check_inputs(spec, dict(args), None)
    assert exc.value.code == 161001
    outputs = check_inputs(spec, {**args, "probsGradOut": handle((3, 2), D.ACL_FLOAT16, 0x6000)}, None)
    assert outputs.plan["outputs"]["probsGradOut"].dtype == D.ACL_FLOAT16  # probs' dtype, not the tokens'
    plain = {**args, "probsOptional": None, "unpermutedTokensGrad": handle((6, 3), D.ACL_FLOAT, 0x2000)}
    assert check_inputs(spec, plain, None).plan["outputs"]["probsGradOut"] is None  # null is fine without probs


def test_token_grads_codes(rng: np.random.Generator) -> None:
    args = unpermute_args(rng, 4, 2, 3, D.ACL_FLOAT, D.ACL_FLOAT)
    args["unpermutedTokensGrad"] = np.ones((4, 3), np.float32)
    assert code_of("MoeTokenUnpermuteGrad", **{**args, "paddedMode": True}) == INVALID
    repeated = args["sortedIndices"].copy()
    repeated[repeated == 3] = 5
    assert code_of("MoeTokenUnpermuteGrad", **{**args, "sortedIndices": repeated}) == INVALID
    past = args["sortedIndices"].copy()
    past[past == 7] = 8
    assert code_of("MoeTokenUnpermuteGrad", **{**args, "sortedIndices": past}) == INVALID
    assert code_of("MoeTokenUnpermuteGrad", **{**args, "unpermutedTokensGrad": np.ones((4, 3), np.float16)}) == INVALID
    grad = {"permutedOutputGrad": np.ones((8, 3), np.float32), "sortedIndices": np.arange(8, dtype=np.int32)}
    assert code_of("MoeTokenPermuteGrad", **grad, numTopk=3, paddedMode=False) == TILING
    assert code_of("MoeTokenPermuteGrad", **grad, numTopk=2, paddedMode=True) == INVALID
    bad = {**grad, "sortedIndices": np.int32([0, 1, 2, 3, 4, 5, 6, -1])}
    assert code_of("MoeTokenPermuteGrad", **bad, numTopk=2, paddedMode=False) == INVALID


# ----------------------------------------------------------------------------- MoeInitRoutingV2
def test_init_routing_v2_documented_drop_pad_example() -> None:
    x = np.float32([[0.1] * 4, [0.2] * 4, [0.3] * 4])
    args = init_v2_args(np.random.default_rng(0), 3, 2, 4, 3, D.ACL_FLOAT, dropPadMode=1, expertCapacity=2)
    args |= {"x": x, "expertIdx": np.int32([[1, 2], [0, 1], [0, 2]]), "expertTokensBeforeCapacityFlag": True}
    got = ref("MoeInitRoutingV2", **args)
    np.testing.assert_array_equal(got["expandedRowIdxOut"], [2, 4, 0, 3, 1, 5])
    np.testing.assert_array_equal(got["expandedXOut"], x[[[1, 2], [0, 1], [0, 2]]])
    np.testing.assert_array_equal(got["expertTokensBeforeCapacityOut"], [2, 2, 2])


def test_init_routing_v2_drops_past_capacity_and_pads_with_zeros() -> None:
    x = np.arange(8, dtype=np.float32).reshape(4, 2) + 1
    expert = np.int32([[0], [0], [0], [2]])  # three tokens for expert 0, capacity 2: token 2 dropped
    args = init_v2_args(np.random.default_rng(0), 4, 1, 2, 3, D.ACL_FLOAT, dropPadMode=1, expertCapacity=2)
    got = ref("MoeInitRoutingV2", **{**args, "x": x, "expertIdx": expert, "expertTokensBeforeCapacityFlag": True})
    np.testing.assert_array_equal(got["expandedRowIdxOut"], [0, 1, -1, 4])
    np.testing.assert_array_equal(got["expandedXOut"].reshape(6, 2), [x[0], x[1], [0, 0], [0, 0], x[3], [0, 0]])
    np.testing.assert_array_equal(got["expertTokensBeforeCapacityOut"], [3, 0, 1])


@pytest.mark.parametrize("flag", [1, 2])
@pytest.mark.parametrize("active", [0, 5, 100])
def test_init_routing_v2_dropless_matches_torch(active: int, flag: int, rng: np.random.Generator) -> None:
    args = init_v2_args(rng, 9, 3, 4, 6, D.ACL_FLOAT, activeNum=active, expertTokensCountOrCumsumFlag=flag)
    got = ref("MoeInitRoutingV2", **args)
    flat = torch.from_numpy(np.asarray(args["expertIdx"]).astype(np.int64)).reshape(-1)
    order = torch.argsort(flat, stable=True)
    kept = min(active, 27) if active else 27
    np.testing.assert_array_equal(got["expandedXOut"], args["x"][order[:kept].numpy() // 3])
    np.testing.assert_array_equal(got["expandedRowIdxOut"], torch.argsort(order).numpy())
    counts = torch.bincount(flat, minlength=6)
    np.testing.assert_array_equal(got["expertTokensCountOrCumsumOut"], (counts.cumsum(0) if flag == 1 else counts))


def test_init_routing_v2_codes(rng: np.random.Generator) -> None:
    args = init_v2_args(rng, 4, 2, 3, 6, D.ACL_FLOAT, expertTokensCountOrCumsumFlag=1)
    assert code_of("MoeInitRoutingV2", **{**args, "dropPadMode": 2}) == TILING
    assert code_of("MoeInitRoutingV2", **{**args, "expertNum": 0}) == TILING
    bad = np.asarray(args["expertIdx"]).copy()
    bad[0, 0] = 6
    assert code_of("MoeInitRoutingV2", **{**args, "expertIdx": bad}) == INVALID
    # without counts or drop/pad, experts past expertNum are allowed (only >= 0 is required)
    fine = ref("MoeInitRoutingV2", **{**args, "expertIdx": bad, "expertTokensCountOrCumsumFlag": 0})
    assert fine["expandedRowIdxOut"].shape == (8,)


# ----------------------------------------------------------------------------- MoeInitRoutingV3
def _v3(rng: np.random.Generator, rows: int, k: int, hidden: int, experts: int, **attrs: object) -> dict:
    from acl_core.spec.ops.moe import init_v3_args

    return init_v3_args(rng, rows, k, hidden, experts, D.ACL_FLOAT, **attrs)


def test_init_routing_v3_range_gather_and_scatter_by_hand() -> None:
    x = np.float32([[1, 1], [2, 2], [3, 3]])
    expert = np.int32([[1, 3], [0, 2], [2, 1]])  # flat: 1 3 0 2 2 1; sorted: 0(2) 1(0) 1(5) 2(3) 2(4) 3(1)
    args = _v3(np.random.default_rng(0), 3, 2, 2, 4, activeExpertRangeOptional=[1, 3])
    args |= {"x": x, "expertIdx": expert, "expertTokensNumType": 1}
    got = ref("MoeInitRoutingV3", **args)
    # routed copies (experts 1 and 2) in sorted order: flat 0, 5, 3, 4
    np.testing.assert_array_equal(got["expandedRowIdxOut"], [0, -1, -1, 2, 3, 1])
    np.testing.assert_array_equal(got["expandedXOut"][:4], x[[0, 2, 1, 2]])
    np.testing.assert_array_equal(got["expandedXOut"][4:], 0)  # rows past the routed copies: zeros
    np.testing.assert_array_equal(got["expertTokensCountOrCumsumOut"], [2, 2])
    scatter = ref("MoeInitRoutingV3", **{**args, "rowIdxType": 1, "expertTokensNumType": 0})
    np.testing.assert_array_equal(scatter["expandedRowIdxOut"], [0, 5, 3, 4, 1, 2])  # then expert 3, then expert 0
    np.testing.assert_array_equal(scatter["expertTokensCountOrCumsumOut"], [2, 4])
    active = ref("MoeInitRoutingV3", **{**args, "activeNum": 3})
    np.testing.assert_array_equal(active["expandedXOut"], x[[0, 2, 1]])


def test_init_routing_v3_key_value_counts_by_hand() -> None:
    expert = np.int32([[5, 1], [5, 2], [1, 7]])
    args = _v3(np.random.default_rng(0), 3, 2, 2, 8, expertTokensNumType=2, activeExpertRangeOptional=[1, 6])
    got = ref("MoeInitRoutingV3", **{**args, "expertIdx": expert})
    want = np.zeros((8, 2), np.int64)
    want[:3] = [[1, 2], [2, 1], [5, 2]]  # then the (0, 0) row that ends the list, zeros after
    np.testing.assert_array_equal(got["expertTokensCountOrCumsumOut"], want)


@pytest.mark.parametrize("kind", [0, 1])
def test_init_routing_v3_without_range_or_quantisation_is_v2(kind: int, rng: np.random.Generator) -> None:
    args = _v3(rng, 9, 3, 5, 6, expertTokensNumType=kind, activeNum=11)
    got = ref("MoeInitRoutingV3", **args)
    v2 = init_v2_args(rng, 9, 3, 5, 6, D.ACL_FLOAT, activeNum=11, expertTokensCountOrCumsumFlag=1 if kind == 0 else 2)
    want = ref("MoeInitRoutingV2", **{**v2, "x": args["x"], "expertIdx": args["expertIdx"]})
    for name in ("expandedXOut", "expandedRowIdxOut", "expertTokensCountOrCumsumOut"):
        np.testing.assert_array_equal(got[name], want[name].astype(got[name].dtype), err_msg=name)
    drop = {"dropPadMode": 1, "expertCapacity": 2}
    got = ref("MoeInitRoutingV3", **{**args, **drop, "expertTokensNumType": 1})
    want = ref(
        "MoeInitRoutingV2",
        **{
            **v2,
            **drop,
            "x": args["x"],
            "expertIdx": args["expertIdx"],
            "expertTokensCountOrCumsumFlag": 0,
            "expertTokensBeforeCapacityFlag": True,
        },
    )
    np.testing.assert_array_equal(got["expandedXOut"], want["expandedXOut"])
    np.testing.assert_array_equal(got["expandedRowIdxOut"], want["expandedRowIdxOut"])
    np.testing.assert_array_equal(got["expertTokensCountOrCumsumOut"], want["expertTokensBeforeCapacityOut"])


def test_init_routing_v3_static_int8_by_hand() -> None:
    x = np.float32([[0.5, -1.0, 2.25], [100.0, -100.0, 0.0]])
    args = _v3(np.random.default_rng(0), 2, 1, 3, 2, quantMode=0, rowIdxType=1)
    args |= {"x": x, "expertIdx": np.int32([[1], [0]])}
    args |= {"scaleOptional": np.float32([2.0]), "offsetOptional": np.float32([0.5])}
    got = ref("MoeInitRoutingV3", **args)
    # row 1 first (expert 0): 200.5 and -199.5 saturate; row 0: 1.5 -> 2, -1.5 -> -2 (half to even), 5.0
    np.testing.assert_array_equal(got["expandedXOut"], np.int8([[127, -128, 0], [2, -2, 5]]))
    assert "expandedScaleOut" not in got
    # the steps are float16's: 0.1 * 3 rounds to 0.2998 in float16, + 0.2 = 0.4998 -> 0 (0.5000000x in float64)
    fine = ref(
        "MoeInitRoutingV3",
        **{
            **args,
            "x": np.float32([[0.1, 0, 0], [0, 0, 0]]),
            "scaleOptional": np.float32([3]),
            "offsetOptional": np.float32([0.2]),
        },
    )
    assert fine["expandedXOut"][1, 0] == 0
    assert np.rint(np.float64(np.float32(0.1)) * 3 + np.float64(np.float32(0.2))) == 1


@pytest.mark.parametrize("smooth", [False, True])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_init_routing_v3_dynamic_int8_matches_torch(smooth: bool, dtype: type, rng: np.random.Generator) -> None:
    args = _v3(rng, 8, 2, 40, 6, quantMode=1, activeExpertRangeOptional=[1, 5])
    x = (rng.standard_normal((8, 40)) * 4).astype(dtype)
    scale = rng.uniform(0.5, 2, (4, 40)).astype(np.float32) if smooth else None
    got = ref("MoeInitRoutingV3", **{**args, "x": x, "scaleOptional": scale})
    flat = torch.from_numpy(np.asarray(args["expertIdx"]).astype(np.int64)).reshape(-1)
    order = torch.argsort(flat, stable=True)
    routed = order[(flat[order] >= 1) & (flat[order] < 5)]
    v = to_torch(x).float()[routed // 2]
    if scale is not None:
        v = v * torch.from_numpy(scale)[flat[routed] - 1]
    s = v.abs().amax(dim=-1) / 127
    q = torch.round(v / s[:, None]).clamp(-128, 127).to(torch.int8)
    n = routed.numel()
    np.testing.assert_array_equal(got["expandedXOut"][:n], q.numpy())
    np.testing.assert_array_equal(got["expandedScaleOut"][:n], s.numpy())
    np.testing.assert_array_equal(got["expandedXOut"][n:], 0)


def test_init_routing_v3_dynamic_zero_row_has_zero_scale_and_codes() -> None:
    args = _v3(np.random.default_rng(0), 2, 1, 4, 2, quantMode=1)
    got = ref(
        "MoeInitRoutingV3",
        **{**args, "x": np.float32([[0, 0, 0, 0], [1, -2, 4, 0]]), "expertIdx": np.int32([[0], [1]])},
    )
    np.testing.assert_array_equal(got["expandedXOut"], np.int8([[0, 0, 0, 0], [32, -64, 127, 0]]))
    np.testing.assert_array_equal(got["expandedScaleOut"], np.float32([0, 4 / 127]))


def test_init_routing_v3_codes(rng: np.random.Generator) -> None:
    args = _v3(rng, 4, 2, 3, 6)
    assert code_of("MoeInitRoutingV3", **{**args, "quantMode": 3}) == INVALID  # MXFP8: not implemented
    assert code_of("MoeInitRoutingV3", **{**args, "quantMode": 5}) == TILING
    assert code_of("MoeInitRoutingV3", **{**args, "activeExpertRangeOptional": [4, 2]}) == TILING
    assert code_of("MoeInitRoutingV3", **{**args, "quantMode": 0}) == 161001
    with pytest.raises(AclnnError, match="MXFP8"):
        ref("MoeInitRoutingV3", **{**args, "quantMode": 2})
    # experts outside [0, expertNum) are simply not routed
    bad = np.asarray(args["expertIdx"]).copy()
    bad[0] = [-3, 99]
    got = ref("MoeInitRoutingV3", **{**args, "expertIdx": bad})
    assert (got["expandedRowIdxOut"][:2] == -1).all() and got["expertTokensCountOrCumsumOut"].sum() == 6

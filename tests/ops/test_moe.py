"""The reference's MoE routing ops against PyTorch, hand-written formulations of CANN's formulas, and codes."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

from acl_core.errors import AclnnError
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.moe import distinct_logits, routing_indices
from tests.conftest import assert_close
from tests.ops.torch_ref import ref, to_numpy, to_torch

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


def test_gating_ranks_by_the_logits_where_exp_rounding_would_tie() -> None:
    # 0 and 2**-52 below a maximum of 0.6722354: NumPy's exp rounds both probabilities to the same
    # double, the exact ones differ, so the larger logit (expert 3) must come first.
    x = np.zeros((1, 8), np.float32)
    x[0, 3], x[0, 5] = 2.0**-52, 0.6722354
    top = np.float64(x[0, 5])
    assert np.exp(np.float64(x[0, 0]) - top) == np.exp(np.float64(x[0, 3]) - top)
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


@pytest.mark.parametrize("op", ["MoeGatingTopKSoftmax", "MoeInitRouting", "MoeFinalizeRouting"])
def test_conformance_samples_run_and_error_samples_fail_as_declared(op: str) -> None:
    spec = get_spec(op)
    rng = np.random.default_rng(11)
    assert spec.samples is not None and spec.error_samples is not None
    for sample in spec.samples(rng):
        assert ref(op, **sample.args), sample.note
    for bad in spec.error_samples(rng):
        with pytest.raises(AclnnError) as exc:
            ref(op, **bad.args)
        assert exc.value.code == bad.code, f"{op} {bad.note}: {exc.value}"

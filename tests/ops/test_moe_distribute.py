"""The reference's expert-parallel MC2 operators on one rank (acl_core_self): hand-computed layouts and codes.

The multi-rank behaviour (2 and 4 MPI ranks) is proven by tests/hccl/test_moe_distribute.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from acl_core.dtypes import DataType as D
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.mc2 import ASSIST_PER_ROW, combine_args, dispatch_args
from tests.ops.torch_ref import check_samples_and_errors, ref

OPS = [f"MoeDistribute{kind}{v}" for kind in ("Dispatch", "Combine") for v in ("", "V2", "V3", "V4")]


def test_dispatch_groups_rows_by_expert_then_token_by_hand() -> None:
    x = np.float16([[1, 1], [2, 2], [3, 3]])
    ids = np.int32([[2, 0], [0, 1], [1, 2]])
    args = dispatch_args(np.random.default_rng(0), 3, 2, 2, 3, D.ACL_FLOAT16) | {"x": x, "expertIds": ids}
    got = ref("MoeDistributeDispatchV2", **{**args, "expertScalesOptional": np.float32([[1, 2], [3, 4], [5, 6]])})
    # expert 0: tokens 0, 1; expert 1: tokens 1, 2; expert 2: tokens 0, 2  (A = 3 tokens x min(3, 2) = 6 rows)
    np.testing.assert_array_equal(got["expandXOut"], x[[0, 1, 1, 2, 0, 2]])
    np.testing.assert_array_equal(got["expandScalesOut"], [2, 3, 4, 5, 1, 6])
    np.testing.assert_array_equal(got["epRecvCountsOut"], [2, 4, 6])
    np.testing.assert_array_equal(got["expertTokenNumsOut"], [2, 4, 6])
    assist = got["assistInfoForCombineOut"].reshape(6, ASSIST_PER_ROW)
    np.testing.assert_array_equal(assist[:, :3], [[0, 0, 1], [0, 1, 0], [0, 1, 1], [0, 2, 0], [0, 0, 0], [0, 2, 1]])
    assert not assist[:, 3:].any()
    v1 = dispatch_args(np.random.default_rng(0), 3, 2, 2, 3, D.ACL_FLOAT16, v1=True) | {"x": x, "expertIds": ids}
    got = ref("MoeDistributeDispatch", **{**v1, "expertTokenNumsType": 1})
    np.testing.assert_array_equal(got["expandIdx"], [0, 0, 1, 0, 1, 1])  # n-th token of this rank per expert
    np.testing.assert_array_equal(got["expertTokenNums"], [2, 2, 2])


def test_masked_tokens_are_not_sent_and_combine_to_zero() -> None:
    rng = np.random.default_rng(1)
    args = dispatch_args(rng, 4, 3, 2, 4, D.ACL_BF16)
    mask = np.array([True, True, False, False])
    got = ref("MoeDistributeDispatchV2", **{**args, "xActiveMaskOptional": mask})
    assert int(got["epRecvCountsOut"][-1]) == 4
    assert not np.asarray(got["expandXOut"][4:], np.float64).any()
    back = ref(
        "MoeDistributeCombineV2",
        **combine_args(rng, 4, 3, 2, 4, D.ACL_BF16, mask=mask)
        | {
            "expandX": got["expandXOut"],
            "expertIds": args["expertIds"],
            "assistInfoForCombine": got["assistInfoForCombineOut"],
            "epSendCounts": got["epRecvCountsOut"],
            "expertScales": np.full((4, 2), 0.5, np.float32),
        },
    )["xOut"]
    np.testing.assert_array_equal(back[:2], args["x"][:2])  # two copies weighted 0.5: the token itself
    assert not np.asarray(back[2:], np.float64).any()


def test_dynamic_int8_matches_the_float32_formula() -> None:
    rng = np.random.default_rng(2)
    args = dispatch_args(rng, 4, 16, 2, 4, D.ACL_FLOAT16, quantMode=2)
    smooth = rng.uniform(0.5, 2, (4, 16)).astype(np.float32)
    got = ref("MoeDistributeDispatchV2", **{**args, "scalesOptional": smooth})
    ids = np.asarray(args["expertIds"])
    rows = [(e, i) for e in range(4) for i in range(4) if e in ids[i]]
    v = np.stack([np.asarray(args["x"][i], np.float32) * smooth[e] for e, i in rows])
    scale = (np.abs(v).max(axis=1) / np.float32(127)).astype(np.float32)
    np.testing.assert_array_equal(got["expandXOut"][:8], np.rint(v / scale[:, None]).astype(np.int8))
    np.testing.assert_array_equal(got["dynamicScalesOut"][:8], scale)


@pytest.mark.parametrize("op", [*OPS, "MatmulReduceScatterV2"])
def test_conformance_samples_run_and_error_samples_fail_as_declared(op: str) -> None:
    check_samples_and_errors(get_spec(op), 11)


def test_v1_combine_refuses_an_active_expert_id_outside_the_domain() -> None:
    """The id selects the expert rank's counts: one of E (or negative) is 161002, not an index error or a wrap."""
    from acl_core.errors import AclnnError

    args = combine_args(np.random.default_rng(3), 4, 8, 2, 4, D.ACL_FLOAT16, v1=True)
    for bad in (4, -1):
        ids = np.asarray(args["expertIds"]).copy()
        ids[1, 1] = bad
        with pytest.raises(AclnnError) as err:
            ref("MoeDistributeCombine", **{**args, "expertIds": ids})
        assert err.value.code == 161002 and "not an expert" in str(err.value)
    ids[1, 1] = 9  # an inactive copy's id is not read
    mask = np.ones((4, 2), bool)
    mask[1, 1] = False
    ref("MoeDistributeCombine", **{**args, "expertIds": ids, "xActiveMask": mask})

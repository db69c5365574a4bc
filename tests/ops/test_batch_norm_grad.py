"""The reference's BatchNorm backward ops against torch's native_batch_norm_backward (float64, CPU).

CPU torch has no batch_norm_backward_reduce / batch_norm_backward_elemt (CUDA only), so the SyncBatchNorm
pair is checked through the identity they exist for: on one process, ReduceBackward's sums fed to
ElemtBackward with the count of the batch give native_batch_norm_backward's training gradients.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from acl_core.dtypes import DataType as D
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.batch_norm_grad import bn_case
from tests.conftest import assert_close
from tests.ops.torch_ref import check_samples_and_errors, ref

SHAPES = [(6, 5), (4, 3, 7), (2, 3, 4, 5), (2, 2, 3, 2, 3)]


def _t(a: Any) -> torch.Tensor | None:
    return None if a is None else torch.from_numpy(np.asarray(a).astype(np.float64))


def torch_backward(args: dict[str, Any]) -> dict[str, np.ndarray]:
    """native_batch_norm_backward in float64 (a null weight as ones, null running statistics as 0 and 1)."""
    c = np.shape(args["input"])[1]
    w = _t(args["weight"]) if args["weight"] is not None else torch.ones(c, dtype=torch.float64)
    rm = _t(args["runningMean"]) if args["runningMean"] is not None else torch.zeros(c, dtype=torch.float64)
    rv = _t(args["runningVar"]) if args["runningVar"] is not None else torch.ones(c, dtype=torch.float64)
    gx, gw, gb = torch.ops.aten.native_batch_norm_backward(
        _t(args["gradOut"]), _t(args["input"]), w, rm, rv, _t(args["saveMean"]), _t(args["saveInvstd"]),
        bool(args["training"]), float(args["eps"]), [True, True, True],
    )  # fmt: skip
    return {"gradInput": gx.numpy(), "gradWeight": gw.numpy(), "gradBias": gb.numpy()}


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("dtype", [D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16], ids=lambda d: d.short)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_batch_norm_backward_matches_torch(shape: tuple[int, ...], dtype: D, training: bool) -> None:
    args = bn_case(np.random.default_rng(len(shape)), shape, dtype, training)
    got, want = ref("BatchNormBackward", **args), torch_backward(args)
    for name in ("gradInput", "gradWeight", "gradBias"):
        assert got[name].dtype == np.dtype(dtype.numpy)
        assert_close(got[name], want[name])


def test_conformance_samples_match_torch() -> None:
    for case in get_spec("BatchNormBackward").samples(np.random.default_rng(0)):  # type: ignore[misc]
        if np.size(case.args["input"]) == 0:  # CPU torch divides by the zero count (SIGFPE): checked below
            continue
        got, want = ref("BatchNormBackward", **case.args), torch_backward(case.args)
        for name, wanted in zip(("gradInput", "gradWeight", "gradBias"), case.args["outputMask"]):
            if wanted:
                assert_close(got[name], want[name]), case.note


@pytest.mark.parametrize("dtype", [D.ACL_FLOAT, D.ACL_FLOAT16], ids=lambda d: d.short)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_reduce_then_elemt_is_torch_training_backward(shape: tuple[int, ...], dtype: D) -> None:
    args = bn_case(np.random.default_rng(3), shape, dtype, True, stat_dt=D.ACL_FLOAT)
    want = torch_backward(args)
    common = {"gradOut": args["gradOut"], "input": args["input"], "mean": args["saveMean"]}
    common |= {"invstd": args["saveInvstd"], "weight": args["weight"]}
    sums = ref("BatchNormReduceBackward", **common, inputG=True, weightG=True, biasG=True)
    assert_close(sums["gradWeight"], want["gradWeight"].astype(np.float32))
    assert_close(sums["gradBias"], want["gradBias"].astype(np.float32))
    count = np.array([int(np.prod(shape)) // shape[1]], np.int32)
    got = ref("BatchNormElemtBackward", **common, sumDy=sums["sumDy"], sumDyXmu=sums["sumDyXmu"], counter=count)
    assert_close(got["gradInput"], want["gradInput"])


def test_elemt_sums_the_counter() -> None:
    # the same call with the count split over three processes gives the same gradient
    args = bn_case(np.random.default_rng(5), (4, 3, 6), D.ACL_FLOAT, True)
    common = {k: args[k] for k in ("gradOut", "input", "weight")} | {"mean": args["saveMean"]}
    common |= {"invstd": args["saveInvstd"], "sumDy": np.arange(3, dtype=np.float32)}
    common |= {"sumDyXmu": np.ones(3, np.float32)}
    one = ref("BatchNormElemtBackward", **common, counter=np.array([24], np.int32))["gradInput"]
    split = ref("BatchNormElemtBackward", **common, counter=np.array([[10.0, 8.0], [6.0, 0.0]], np.float32))
    np.testing.assert_array_equal(one, split["gradInput"])


def test_empty_batch_gives_zero_parameter_gradients() -> None:
    args = bn_case(np.random.default_rng(0), (0, 3, 4), D.ACL_FLOAT, True)
    got = ref("BatchNormBackward", **args)
    assert got["gradInput"].shape == (0, 3, 4)
    np.testing.assert_array_equal(got["gradWeight"], np.zeros(3, np.float32))
    np.testing.assert_array_equal(got["gradBias"], np.zeros(3, np.float32))


@pytest.mark.parametrize("op", ["BatchNormBackward", "BatchNormReduceBackward", "BatchNormElemtBackward"])
def test_samples_and_errors(op: str) -> None:
    check_samples_and_errors(get_spec(op))

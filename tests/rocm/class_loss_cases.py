"""CrossEntropyLoss cases for its vector row kernel (``ACL_CE_ROWS=vec``), shared by the CPU and GPU tiers."""

from __future__ import annotations

from typing import Any

import numpy as np

from acl_core import eager
from acl_core.backend import Backend
from tests.rocm.against_reference import class_problems
from tests.rocm.offset_views import empty_placed, rows_placed
from tests.rocm.switched import switched


def vector_rows_case(
    backend: Backend,
    n: int,
    c: int,
    dtype: Any,
    stride: int,
    offset: int,
    lp_offset: int,
    eps: float,
    rng: np.random.Generator,
    config: str = "vec",
) -> None:
    """CrossEntropyLoss through the vector row kernel (``ACL_CE_ROWS=config``) on logits rows ``stride`` apart starting
    ``offset`` into their allocation, logProbOut ``lp_offset`` into its own; compared with the reference."""
    x = rng.uniform(-6, 6, (n, c))
    x[0, 3] = -np.inf  # a thread's first element -inf: exp(-inf - -inf) must not reach the sum
    x[-1, 0] = -np.inf  # a masked first logit: the smoothing sums' shift must stay finite
    t = np.where(rng.random(n) < 0.25, 2, rng.integers(0, c, n)).astype(np.int64)
    t[-1] = 1  # the masked row counts (2 is ignored)
    args: dict[str, Any] = {
        "target": t,
        "weightOptional": rng.uniform(0.2, 2, c).astype(np.float32) if eps else None,
        "reductionOptional": "none" if eps else "mean",
        "ignoreIndex": 2,
        "labelSmoothing": eps,
        "lseSquareScaleForZloss": 0.0,
        "input": x.astype(dtype),
        "returnZloss": False,
    }
    expected = eager.run("CrossEntropyLoss", "reference", **args)
    with switched(backend, "ACL_CE_ROWS", config):
        placed = {
            **args,
            "input": rows_placed(backend, args["input"], stride, offset),
            "logProbOut": empty_placed(backend, (n, c), np.dtype(args["input"].dtype), lp_offset),
        }
        actual = {**eager.run("CrossEntropyLoss", backend, **placed), "logProbOut": placed["logProbOut"].numpy()}
    problems = class_problems("CrossEntropyLoss", args, actual, expected)
    assert not problems, "CrossEntropyLoss: " + "; ".join(p.message for p in problems)
    for name in ("lossOut", "logProbOut"):  # the class comparison lets a NaN stand for an infinity: these may not
        got, want = np.asarray(actual[name], np.float64), np.asarray(expected[name], np.float64)
        assert np.array_equal(np.isnan(got), np.isnan(want)), f"CrossEntropyLoss: {name} NaN where the reference is not"

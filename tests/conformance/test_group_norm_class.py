"""GroupNorm's composite class: a float32 GPU-style GroupNorm meets it (overflowing groups uncompared, as
the variance family's), and a variance accumulated in bf16 fails it (the H200's bf16 rstd failure)."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from acl_conformance.compare import compare_outputs
from acl_conformance.tolerances import from_class
from acl_core import eager
from acl_core.dtypes import DataType as D
from acl_core.spec.accuracy import accuracy_of
from acl_core.spec.ops import get_spec

BF16 = ml_dtypes.bfloat16


def _args(x: np.ndarray, group: int, rng: np.random.Generator) -> dict[str, Any]:
    c = x.shape[1]
    return {
        "self": x,
        "gamma": rng.uniform(0.5, 1.5, c).astype(x.dtype),
        "beta": rng.uniform(-1, 1, c).astype(x.dtype),
        "N": x.shape[0],
        "C": c,
        "HxW": int(np.prod(x.shape[2:])),
        "group": group,
        "eps": 1e-5,
    }


def _sequential(terms: np.ndarray, acc: type) -> np.ndarray:
    """Σ over the last axis one term at a time, every partial sum rounded to ``acc`` (the worst order)."""
    total = np.zeros(terms.shape[:-1], acc)
    with np.errstate(over="ignore", invalid="ignore"):
        for i in range(terms.shape[-1]):
            total = (total.astype(np.float32) + terms[..., i].astype(np.float32)).astype(acc)
    return total.astype(np.float32)


def _gpu_style(args: dict[str, Any], variance_acc: type) -> dict[str, np.ndarray]:
    """GroupNorm two-pass in float32 (a block per group), the variance's sum accumulated in ``variance_acc``."""
    x = np.asarray(args["self"])
    n, c, group = args["N"], args["C"], args["group"]
    rows = x.astype(np.float32).reshape(n, group, -1)
    length = np.float32(rows.shape[-1])
    with np.errstate(over="ignore", invalid="ignore"):
        mean = _sequential(rows, np.float32) / length
        centred = rows - mean[..., None]
        var = _sequential(centred * centred, variance_acc) / length
        rstd = np.float32(1) / np.sqrt(var + np.float32(args["eps"]))
        y = (centred * rstd[..., None]).reshape(x.shape)
        per_channel = (1, c) + (1,) * (x.ndim - 2)
        y = y * args["gamma"].astype(np.float32).reshape(per_channel) + args["beta"].astype(np.float32).reshape(
            per_channel
        )
    out = x.dtype.type
    return {"out": y.astype(out), "meanOut": mean.astype(out), "rstdOut": rstd.astype(out)}


def _problems(args: dict[str, Any], actual: dict[str, np.ndarray]) -> list[Any]:
    expected = eager.run("GroupNorm", "reference", **args)
    accuracy = accuracy_of(get_spec("GroupNorm"))
    assert accuracy is not None and accuracy.kind == "composite"
    assert accuracy.length_of is not None and accuracy.scale_of is not None
    length = accuracy.length_of(args, expected)
    scale = accuracy.scale_of(args, expected)

    def tolerance(dtype: D) -> Any:
        return from_class("GroupNorm", dtype, accuracy, length)

    return compare_outputs(actual, expected, tolerance, scale)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16], ids=lambda d: np.dtype(d).name)
def test_a_float32_group_norm_meets_the_class(seed: int, dtype: type) -> None:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((2, 8, 16, 16)) * 3 + 2).astype(dtype)
    args = _args(x, 4, rng)
    assert _problems(args, _gpu_style(args, np.float32)) == []


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_a_bf16_variance_accumulator_fails_the_class(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((2, 8, 16, 16)) + 1).astype(BF16)
    args = _args(x, 4, rng)
    problems = _problems(args, _gpu_style(args, BF16))
    assert problems and {p.output for p in problems} >= {"rstdOut"}, [p.message for p in problems]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_groups_whose_squares_overflow_float32_are_uncompared_and_counted(seed: int) -> None:
    # group 1 of sample 0 holds bf16's largest value: its float32 variance is inf (rstd 0, as rocm gave),
    # the reference's float64 one finite (rstd 1.5e-38); the other groups are ordinary
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 6, 4, 3)).astype(BF16)
    x[0, 2, 1, 1] = ml_dtypes.finfo(BF16).max
    args = _args(x, 3, rng)
    actual = _gpu_style(args, np.float32)
    assert actual["rstdOut"][0, 1] == 0
    expected = eager.run("GroupNorm", "reference", **args)
    assert expected["rstdOut"][0, 1] > 0
    assert _problems(args, actual) == []
    wrong = {k: v.copy() for k, v in actual.items()}
    wrong["rstdOut"][1, 2] *= BF16(2)  # an ordinary group wrong: still a failure, the overflowing one counted
    problems = _problems(args, wrong)
    assert [p.output for p in problems] == ["rstdOut"]
    assert problems[0].detail["mismatched"] == 1 and problems[0].detail["overflowing"] == 1

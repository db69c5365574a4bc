"""Row ops whose row statistic is accumulated in the 16-bit input type (issue 14 class 1, composite ops).

Each keeps a wide accumulator for float32/float64 inputs (so those results are right) and, like a
kernel templated on ``acc_t = scalar_t``, sums the row in bf16 for bf16 inputs (bf16 because the
table's bf16 rtol, 1.6e-2, is 2–4 ulp: float16's 1e-3 already catches a float16 accumulator). RmsNorm is
the two-kernel kind: a statistics kernel (float32, right) writes rstdOut, and the normalising kernel
recomputes the row sum in bf16. (LayerNorm's counterpart is no mutant here: main's table already
catches it, as ``x - mean`` amplifies the mean's error.) The per-dtype table's 16-bit rtol lets that through;
the composite class (γ_(n+steps)·S in float32 plus one ulp of the output) does not.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from acl_core.backend import Launch
from acl_core.dtypes import DataType
from acl_reference.backend import ReferenceBackend
from acl_reference.call import RefCall
from tests.conformance.mutants import Mutant


def _running_sum(terms: np.ndarray, axes: Sequence[int], dtype: np.dtype) -> np.ndarray:
    """Σ over ``axes`` one term at a time, each partial sum rounded to ``dtype`` (a 16-bit accumulator), dims kept."""
    axes = tuple(sorted(a % terms.ndim for a in axes))
    kept = tuple(1 if i in axes else n for i, n in enumerate(terms.shape))
    moved = np.moveaxis(terms.astype(dtype), axes, tuple(range(len(axes))))
    rows = moved.reshape(-1, *moved.shape[len(axes) :])
    total = np.zeros(rows.shape[1:], dtype)
    for term in rows:
        # a 16-bit add is a float32 add rounded back (what GPUs' half arithmetic gives)
        wide = np.float32 if dtype.itemsize == 2 else dtype
        total = (total.astype(wide) + term.astype(wide)).astype(dtype)
    return total.astype(np.float64).reshape(kept)


def _accumulator(k: RefCall, name: str) -> np.dtype:
    """bf16 for a bf16 input (the defect), float64 otherwise (exact enough to be right)."""
    dt = k.read(name).dtype
    return dt if k.dtype(name) == DataType.ACL_BF16 else np.dtype(np.float64)


class HalfRowSumSoftmaxBackend(ReferenceBackend):
    """Softmax sums exp(x - max) in the 16-bit input type."""

    name = "mutant-softmax-16bit-row-sum"

    def __init__(self) -> None:
        super().__init__()

        def softmax(launch: Launch) -> None:
            k = RefCall(launch, self.driver)
            x = k.read("self", np.float64)
            if x.size == 0 or x.ndim == 0:
                k.write("out", np.exp(x - x) if x.size else x)
                return
            dim = k.plan["dim"]
            with np.errstate(all="ignore"):
                e = np.exp(x - np.max(x, axis=dim, keepdims=True))
                k.write("out", e / _running_sum(e, (dim,), _accumulator(k, "self")))

        self._kernels["Softmax"] = softmax


class HalfSumOfSquaresRmsNormBackend(ReferenceBackend):
    """RmsNorm sums x² in the 16-bit input type."""

    name = "mutant-rmsnorm-16bit-row-sum"

    def __init__(self) -> None:
        super().__init__()
        original = self._kernels["RmsNorm"]

        def rms_norm(launch: Launch) -> None:
            k = RefCall(launch, self.driver)
            x = k.read("x", np.float64)
            acc = _accumulator(k, "x")
            if x.size == 0 or acc.itemsize != 2:
                original(launch)
                return
            axes = k.plan["axes"]
            n = int(np.prod([x.shape[a] for a in axes]))
            original(launch)  # the statistics kernel: rstdOut is right
            with np.errstate(all="ignore"):
                rstd = 1.0 / np.sqrt(_running_sum(x * x, axes, acc) / n + k.value("epsilon"))
                k.write("yOut", x * rstd * k.read("gamma", np.float64))

        self._kernels["RmsNorm"] = rms_norm


MUTANTS = [
    Mutant(
        "softmax-16bit-row-sum",
        "tolerance",
        "Softmax sums a bf16 row in bf16",
        HalfRowSumSoftmaxBackend,
        ops="Softmax",
    ),
    Mutant(
        "rmsnorm-16bit-row-sum",
        "tolerance",
        "RmsNorm normalises with a bf16 sum of squares",
        HalfSumOfSquaresRmsNormBackend,
        ops="RmsNorm",
    ),
]

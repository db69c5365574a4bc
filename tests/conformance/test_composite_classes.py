"""Composite accuracy classes (softmax, norms): a float32 GPU-style implementation meets them.

The bound must be one a correct kernel meets: this backend computes Softmax, LogSoftmax, RmsNorm
and LayerNorm the way a GPU kernel does, every step in float32 with the row summed one element at a
time (the worst order), LayerNorm's variance by the one-pass ``E[x²] - E[x]²`` (the cheapest
correct formula, the one the variance's condition number in the scale is for).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from acl_conformance import run
from acl_conformance.tolerances import from_class
from acl_core.backend import BackendRegistration
from acl_core.dtypes import DataType as D
from acl_core.spec.accuracy import accuracy_of, composite, layer_norm_scale, softmax_scale
from acl_core.spec.ops import get_spec
from acl_reference.backend import ReferenceBackend
from acl_reference.call import RefCall
from tests.conformance.planted import compute_when, register_planted

_F32 = np.float32


def _row_sum(x: np.ndarray, axes: Sequence[int]) -> np.ndarray:
    """Σ over ``axes`` in float32, one element at a time, dims kept."""
    axes = tuple(sorted(a % x.ndim for a in axes))
    kept = tuple(1 if i in axes else n for i, n in enumerate(x.shape))
    moved = np.moveaxis(x.astype(_F32), axes, tuple(range(len(axes))))
    rows = moved.reshape(-1, *moved.shape[len(axes) :])
    total = np.zeros(rows.shape[1:], _F32)
    for term in rows:
        total = total + term
    return total.reshape(kept)


class Float32RowOpsBackend(ReferenceBackend):
    """The reference, with Softmax, LogSoftmax, RmsNorm and LayerNorm computed in float32 like a GPU kernel."""

    name = "float32-row-ops"

    def __init__(self) -> None:
        super().__init__()
        for op, fn in (
            ("Softmax", self._softmax),
            ("LogSoftmax", self._log_softmax),
            ("RmsNorm", self._rms_norm),
            ("LayerNorm", self._layer_norm),
        ):
            compute_when(self, op, fn)

    @staticmethod
    def _float32_input(k: RefCall, name: str) -> np.ndarray | None:
        """The input as float32 when it is a finite float32/16-bit array with elements (else the reference runs)."""
        if k.dtype(name) not in (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16) or not k[name].numel:
            return None
        x = k.read(name).astype(_F32)
        return x if x.ndim and np.isfinite(x).all() else None

    def _softmax(self, k: RefCall, log: bool = False) -> bool:
        x = self._float32_input(k, "self")
        if x is None:
            return False
        dim = k.plan["dim"]
        shifted = x - np.max(x, axis=dim, keepdims=True)
        total = _row_sum(np.exp(shifted), (dim,))
        k.write("out", shifted - np.log(total) if log else np.exp(shifted) / total)
        return True

    def _log_softmax(self, k: RefCall) -> bool:
        return self._softmax(k, log=True)

    def _rms_norm(self, k: RefCall) -> bool:
        x = self._float32_input(k, "x")
        if x is None:
            return False
        axes = k.plan["axes"]
        n = _F32(np.prod([x.shape[a] for a in axes]))
        rstd = _F32(1) / np.sqrt(_row_sum(x * x, axes) / n + _F32(k.value("epsilon")))
        k.write("yOut", x * rstd * k.read("gamma").astype(_F32))
        k.write("rstdOut", rstd)
        return True

    def _layer_norm(self, k: RefCall) -> bool:
        x = self._float32_input(k, "input")
        if x is None:
            return False
        axes = k.plan["axes"]
        n = _F32(np.prod([x.shape[a] for a in axes]))
        mean = _row_sum(x, axes) / n
        var = np.maximum(_row_sum(x * x, axes) / n - mean * mean, _F32(0))  # one pass
        rstd = _F32(1) / np.sqrt(var + _F32(k.value("eps")))
        y = (x - mean) * rstd
        if k["weightOptional"] is not None:
            y = y * k.read("weightOptional").astype(_F32)
        if k["biasOptional"] is not None:
            y = y + k.read("biasOptional").astype(_F32)
        k.write("out", y)
        k.write("meanOutOptional", mean)
        k.write("rstdOutOptional", rstd)
        return True


@pytest.fixture(scope="module", autouse=True)
def _registered() -> None:
    registration = BackendRegistration(
        name=Float32RowOpsBackend.name, factory=Float32RowOpsBackend, summary="float32 row ops like a GPU"
    )
    register_planted("float32-row-ops", [registration])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_float32_implementation_meets_the_composite_classes(seed: int) -> None:
    report = run(Float32RowOpsBackend.name, ops="Softmax,LogSoftmax,RmsNorm,LayerNorm", seed=seed)
    assert report.ok, [f"{o.op}[{o.case}]: {o.message}" for o in report.failed][:5]


def test_the_row_ops_declare_composite_classes() -> None:
    for op in ("Softmax", "LogSoftmax", "RmsNorm", "AddRmsNorm", "InplaceAddRmsNorm", "LayerNorm"):
        accuracy = accuracy_of(get_spec(op))
        assert accuracy is not None and accuracy.kind == "composite", op


def test_a_composite_bound_grows_with_the_row_and_its_steps() -> None:
    acc = composite(steps=4)
    short, long = (from_class("Op", D.ACL_FLOAT, acc, n) for n in (8, 4096))
    assert short is not None and long is not None and short.kind == long.kind == "reduction"
    assert short.gamma == pytest.approx(12 * 2.0**-24, rel=1e-6)
    assert long.gamma > 300 * short.gamma
    # a bf16 output is still bounded in float32's unit roundoff: a bf16 accumulator cannot meet it
    bf16 = from_class("Op", D.ACL_BF16, acc, 8)
    assert bf16 is not None and bf16.gamma == short.gamma


def test_softmax_scale_covers_the_shift_rounding() -> None:
    x = np.array([[0.0, -10.0, 1.0]])
    y = np.array([[0.25, 1e-5, 0.7]])
    s = softmax_scale(log=False)({"self": x, "dim": 1}, {"out": y})["out"]
    np.testing.assert_allclose(s, y * (1 + np.array([[1.0, 11.0, 0.0]])))
    log = softmax_scale(log=True)({"self": x, "dim": 1}, {"out": np.log(y)})["out"]
    np.testing.assert_allclose(log, 1 + np.array([[1.0, 11.0, 0.0]]) + np.abs(np.log(y)))


def test_layer_norm_scale_has_the_variance_condition_number() -> None:
    x = np.array([[1000.0, 1001.0]])  # mean 1000.5, var 0.25: E[x²]/var ≈ 4e6
    scale = layer_norm_scale("input", lambda a: 1, "w", "b", "out")
    s = scale({"input": x, "eps": 0.0}, {"out": np.array([[-1.0, 1.0]]), "meanOut": np.array([[1000.5]])})
    assert s["out"].shape == (1, 2) and s["out"].min() > 4e6
    np.testing.assert_allclose(s["meanOut"], [[1000.5]])

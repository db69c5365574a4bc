"""The loss family above the provider seam, on a CPU: its generated kernels run in the kernel emulator.

A few cases per loss (every reduction, forward and backward, the one- and two-pass sums, a 16-bit
dtype, broadcast weights) compared with the reference under the op's accuracy class, and the generated
bodies checked directly. ``tests/rocm/test_gpu_loss.py`` is the full GPU tier.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.spec.ops.loss import MEAN, NONE, POINTWISE, SUM, WRT_TARGET, params_of
from acl_rocm.kernels.loss import BODIES, Variant, loss_ufunc
from acl_rocm.ops.loss import SLICE, terms_dtype
from tests.rocm.against_reference import class_problems


def _check(backend: Backend, op: str, args: dict[str, Any]) -> None:
    expected = eager.run(op, "reference", **args)
    problems = class_problems(op, args, eager.run(op, backend, **args), expected)
    assert not problems, f"{op} {args.get('reduction')}: " + "; ".join(p.message for p in problems)


def _args(
    row: Any, backward: bool, shape: tuple[int, ...], dtype: Any, reduction: int, seed: int, op: str = ""
) -> dict:
    rng = np.random.default_rng(seed)
    params = params_of(op) if op else row.backward if backward else row.forward
    args: dict[str, Any] = {"reduction": reduction, **row.values[-1]}
    for p in params:
        if p.writes or p.kind.name != "TENSOR":
            continue
        if p.name in ("gradOutput", "gradOut"):
            args[p.name] = rng.uniform(-1, 2, shape if reduction == NONE else ()).astype(dtype)
            continue
        low, high = row.ranges.get(p.name, (-4.0, 4.0))
        weight = p.name in ("weight", "weightOptional", "posWeightOptional")
        args[p.name] = rng.uniform(low, high, shape[-1:] if weight else shape).astype(dtype)
    return args


@pytest.mark.parametrize("row", POINTWISE, ids=lambda r: r.name)
def test_every_loss_and_gradient_matches_the_reference(emulated: Backend, row: Any) -> None:
    for reduction in (NONE, MEAN, SUM):
        for backward in (False, True):
            op = row.backward_name if backward else row.name
            _check(emulated, op, _args(row, backward, (2, 3, 5), np.float32, reduction, reduction))


@pytest.mark.parametrize("op", sorted(WRT_TARGET))
def test_the_target_gradients_match_the_reference(emulated: Backend, op: str) -> None:
    row = next(r for r in POINTWISE if r.target_name == op)
    for reduction in (NONE, MEAN, SUM):
        args = _args(row, True, (2, 3, 5), np.float32, reduction, reduction + 7, op)
        _check(emulated, op, args)
        if "posWeightOptional" in args:  # without the pos weight: -w·x
            _check(emulated, op, {**args, "posWeightOptional": None})
        if "logTarget" in args:
            _check(emulated, op, {**args, "logTarget": not args["logTarget"], "target": np.abs(args["target"]) + 0.1})


@pytest.mark.parametrize("reduction", [MEAN, SUM], ids=["mean", "sum"])
def test_the_two_pass_sum_with_a_partial_slice_in_float16(emulated: Backend, reduction: int) -> None:
    for row in (POINTWISE[0], POINTWISE[-1]):  # a float32 temporary (MseLoss) and a float64 one (KlDiv)
        _check(emulated, row.name, _args(row, False, (2 * SLICE + 7,), np.float16, reduction, 3))


@pytest.mark.parametrize("op", ["L1LossBackward", "SmoothL1LossBackward"])
def test_the_gradient_at_a_tie_of_signed_zeros_is_signed_by_the_incoming_gradient(emulated: Backend, op: str) -> None:
    # -0.0 - +0.0 is -0.0, whose sign is +0 (as NumPy's and torch's sign): the result's zero takes gradOutput's sign
    x = np.array([-0.0, 0.0, -0.0, 0.0], np.float32)
    t = np.array([0.0, -0.0, -0.0, 0.0], np.float32)
    g = np.array([2.0, -2.0, -1.0, 1.0], np.float32)
    args: dict[str, Any] = {"gradOutput": g, "self": x, "target": t, "reduction": NONE}
    if op == "SmoothL1LossBackward":  # beta 0 is L1's gradient
        args = {"gradOut": g, "self": x, "target": t, "reduction": NONE, "beta": 0.0}
    got = eager.run(op, emulated, **args)["gradInput"]
    assert list(np.signbit(got)) == [False, True, True, False] and not got.any()
    _check(emulated, op, args)


def test_bodies_read_by_role_and_take_float64_scalars() -> None:
    assert set(BODIES) == {r.name for r in POINTWISE}
    u = loss_ufunc(Variant("SmoothL1Loss", True, (("gradOut", "g"), ("self", "x"), ("target", "t")), "gradInput", True))
    assert u.signature == "gradOut:T, self:T, target:T, beta:W, count:W -> gradInput:O"
    assert "q = q * g;" in u.body and "q = q / count;" in u.body
    bce = loss_ufunc(Variant("BinaryCrossEntropy", False, (("self", "x"), ("target", "t")), "out"))
    assert "double w = 1.0;" in bce.body and "count" not in bce.signature and "beta" not in bce.signature
    assert terms_dtype("MseLoss") == D.ACL_FLOAT and terms_dtype("KlDiv") == D.ACL_DOUBLE


def test_a_reduced_loss_sums_its_terms_in_the_terms_kernel() -> None:
    """The terms kernel keeps no term in memory: each block adds its terms (as float32 would hold them) in double."""
    from acl_rocm.kernels.elementwise import Instance, Operand, generate

    u = loss_ufunc(Variant("MseLoss", False, (("self", "x"), ("target", "t")), "terms"))
    operands = (
        Operand("self", D.ACL_FLOAT16, D.ACL_FLOAT, True, False, "unit"),
        Operand("target", D.ACL_FLOAT16, D.ACL_FLOAT, True, False, "unit"),
        Operand("terms", D.ACL_FLOAT, D.ACL_FLOAT, False, True, "unit"),
    )
    inst = Instance(u, operands, (), (), D.ACL_FLOAT, 1, "int", reduce=True)
    source = generate(inst).split("// ---- end of prelude")[-1]
    assert "double* p_terms" in source and "p_terms[w" not in source
    assert "acc += (double)(((double)(r)));" in source  # r: the term rounded to float32 (the result type)
    assert "p_terms[blockIdx.x] = acl_sum[0];" in source
    with pytest.raises(ValueError):
        generate(Instance(u, operands, (), (), D.ACL_FLOAT, 1, "int", vec=4, reduce=True))

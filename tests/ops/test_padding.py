"""The padding family's reference against torch.nn.functional.pad (reflect / replicate / circular) and its autograd."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from acl_core import eager
from acl_core.dtypes import DataType as D
from acl_core.errors import AclnnError
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.padding import BY_NAME, PADS, Pad
from tests.ops.torch_ref import check_samples_and_errors

TORCH_MODE = {"reflect": "reflect", "replicate": "replicate", "circular": "circular"}
CASES = {
    1: [((2, 3, 7), [2, 3]), ((4, 5), [4, 1]), ((1, 2, 3), [2, 2])],
    2: [((2, 3, 5, 6), [1, 2, 3, 0]), ((3, 4, 7), [6, 3, 2, 3]), ((1, 1, 1, 5), [2, 1, 0, 0])],
    3: [((1, 2, 3, 4, 5), [1, 2, 0, 3, 2, 1]), ((2, 3, 4, 3), [2, 1, 1, 2, 0, 2])],
}


def _ref(op: str, **args: Any) -> dict[str, np.ndarray]:
    return eager.run(op, "reference", **args)


@pytest.mark.parametrize("pad", PADS, ids=lambda p: p.name)
def test_forward_and_backward_match_torch(pad: Pad) -> None:
    rng = np.random.default_rng(0)
    wide = D.ACL_DOUBLE in pad.backward_dtypes
    dtype, tol = (np.float64, 1e-12) if wide else (np.float32, 1e-6)  # circular pads declare no float64
    for shape, padding in CASES[pad.spatial]:
        x = rng.standard_normal(shape).astype(dtype)
        t = torch.from_numpy(x).requires_grad_(True)
        want = F.pad(t, padding, mode=TORCH_MODE[pad.mode])
        got = _ref(pad.name, self=x, padding=padding)["out"]
        np.testing.assert_array_equal(got, want.detach().numpy())
        g = rng.standard_normal(tuple(want.shape)).astype(dtype)
        want.backward(torch.from_numpy(g))
        assert t.grad is not None
        grad = _ref(pad.backward, gradOutput=g, self=x, padding=padding)["gradInput"]
        np.testing.assert_allclose(grad, t.grad.numpy(), rtol=tol, atol=tol)


def test_cann_page_examples() -> None:
    x = np.arange(9, dtype=np.float32).reshape(1, 1, 3, 3)
    reflect = _ref("ReflectionPad2d", self=x, padding=[2, 2, 2, 2])["out"][0, 0]
    np.testing.assert_array_equal(reflect[0], [8, 7, 6, 7, 8, 7, 6])
    circular = _ref("CircularPad2d", self=x, padding=[2, 2, 2, 2])["out"][0, 0]
    np.testing.assert_array_equal(circular[0], [4, 5, 3, 4, 5, 3, 4])
    replicate = _ref("ReplicationPad2d", self=x, padding=[2, 2, 2, 2])["out"][0, 0]
    np.testing.assert_array_equal(replicate[3], [3, 3, 3, 4, 5, 5, 5])
    g = _ref(
        "ReflectionPad1dBackward",
        gradOutput=np.ones((1, 7), np.float32),
        self=np.ones((1, 5), np.float32),
        padding=[1, 1],
    )
    np.testing.assert_array_equal(g["gradInput"], [[1, 2, 1, 2, 1]])


def test_integer_and_bool_copies_are_exact() -> None:
    x = np.array([[[np.iinfo(np.int64).max, -3, np.iinfo(np.int64).min]]], np.int64)
    got = _ref("ReflectionPad1d", self=x, padding=[2, 1])["out"]
    np.testing.assert_array_equal(got, x[..., [2, 1, 0, 1, 2, 1]])
    b = np.array([[[True, False, False]]])
    np.testing.assert_array_equal(_ref("ReflectionPad1d", self=b, padding=[1, 0])["out"], b[..., [1, 0, 1, 2]])


@pytest.mark.parametrize(
    ("op", "padding"),
    [("ReflectionPad2d", [3, 0, 0, 0]), ("ReplicationPad2d", [0, 0, 0, 3]), ("CircularPad2d", [-1, 0, 0, 0])],
)
def test_pads_outside_cann_range_are_refused(op: str, padding: list[int]) -> None:
    x = np.zeros((1, 2, 3, 3), np.float32)
    with pytest.raises(AclnnError) as err:
        _ref(op, self=x, padding=padding)
    assert err.value.code == 161002


def test_table_declares_sixteen_ops() -> None:
    assert len(BY_NAME) == 16


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_samples_run_and_errors_fail(name: str) -> None:
    check_samples_and_errors(get_spec(name))


def test_an_empty_batch_gives_an_empty_output_and_other_empty_inputs_are_refused() -> None:
    got = _ref("CircularPad2d", self=np.zeros((0, 2, 3, 4), np.float32), padding=[1, 2, 0, 2])["out"]
    assert got.shape == (0, 2, 5, 7)
    grad = np.zeros((0, 2, 5, 7), np.float32)
    back = _ref("CircularPad2dBackward", gradOutput=grad, self=np.zeros((0, 2, 3, 4), np.float32), padding=[1, 2, 0, 2])
    assert back["gradInput"].shape == (0, 2, 3, 4)
    with pytest.raises(AclnnError) as err:
        _ref("ReflectionPad2d", self=np.zeros((0, 3, 4), np.float32), padding=[1, 1, 1, 1])
    assert err.value.code == 161002

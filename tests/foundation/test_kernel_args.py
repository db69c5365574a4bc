"""A kernel receives every argument in one normalised form (issue 14: typed Launch arguments)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from acl_core import acl, aclnn
from acl_core.aclnn import get_workspace_size
from acl_core.backend import Launch
from acl_core.dtypes import DataType as D
from acl_core.plugin import get_backend
from acl_core.spec.kernel_args import KERNEL_TYPES, Scalar, kernel_args, kernel_value
from acl_core.spec.ops import all_specs, get_spec
from acl_core.spec.opspec import Kind, Param
from acl_core.spec.version import PASSTHROUGH
from acl_core.tensor import AclIntArray, AclScalar, AclScalarList, AclTensor, AclTensorList
from tests.fuzz.op_cases import build_call, pick_sample

_PYTHON = {"int": int, "float": float, "bool": bool, "str": str, "DataType": D}


def _conforms(p: Param, value: Any) -> bool:
    """True when ``value`` has the kernel type :data:`KERNEL_TYPES` declares for ``p``'s kind."""
    if value is None:
        return True
    kind = p.kind
    if kind is Kind.TENSOR:
        return type(value) is AclTensor
    if kind is Kind.SCALAR:
        return type(value) is Scalar and isinstance(value.dtype, D)
    if kind in (Kind.TENSOR_LIST, Kind.SCALAR_LIST, Kind.INT_ARRAY, Kind.FLOAT_ARRAY, Kind.BOOL_ARRAY):
        member = {
            Kind.TENSOR_LIST: AclTensor,
            Kind.SCALAR_LIST: Scalar,
            Kind.INT_ARRAY: int,
            Kind.FLOAT_ARRAY: float,
            Kind.BOOL_ARRAY: bool,
        }[kind]
        return type(value) is tuple and all(type(v) is member for v in value)
    return type(value) is _PYTHON[KERNEL_TYPES[kind]] or (kind is Kind.DTYPE and isinstance(value, D))


def test_each_handle_kind_is_unwrapped_once() -> None:
    spec = get_spec("Add")
    t = AclTensor.create((2,), D.ACL_FLOAT, None, 0, 2, None, 0x1000)
    got = kernel_args(spec, {"self": t, "other": t, "alpha": AclScalar.create(2, D.ACL_INT64), "out": t})
    assert got["self"] is t and got["alpha"] == Scalar(2, D.ACL_INT64) and type(got["alpha"].value) is int
    tl = AclTensorList.create([t, t])
    cat = kernel_args(get_spec("Cat"), {"tensors": tl, "dim": 0, "out": t})
    assert cat["tensors"] == (t, t) and type(cat["tensors"]) is tuple
    dims = kernel_args(get_spec("ReduceSum"), {"self": t, "dim": AclIntArray.create([0, -1]), "keepDim": True})
    assert dims["dim"] == (0, -1) and dims["keepDim"] is True
    scalars = AclScalarList.create([AclScalar.create(1.5, D.ACL_FLOAT16), AclScalar.create(True, D.ACL_BOOL)])
    assert kernel_value(scalars) == (Scalar(1.5, D.ACL_FLOAT16), Scalar(True, D.ACL_BOOL))


def test_the_kernel_of_a_variant_receives_its_base_ops_names_in_kernel_form() -> None:
    spec = get_spec("InplaceAdd")
    t = AclTensor.create((2,), D.ACL_FLOAT, None, 0, 2, None, 0x1000)
    got = kernel_args(spec, {"selfRef": t, "other": t, "alpha": AclScalar.create(1.0, D.ACL_FLOAT)})
    assert got["self"] is t and got["out"] is t and got["alpha"] == Scalar(1.0, D.ACL_FLOAT)


@pytest.fixture
def device() -> None:
    assert acl.init() in (0, 100002)  # ACL_ERROR_REPEAT_INITIALIZE when an earlier test initialised
    assert acl.rt.set_device(0) == 0


def test_a_launch_carries_the_normalised_arguments(device: None, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = get_backend()
    seen: list[Launch] = []
    real = backend.launch
    monkeypatch.setattr(backend, "launch", lambda launch: (seen.append(launch), real(launch))[1])
    spec = get_spec("Cat")
    _, sample = pick_sample(spec, np.random.default_rng(0), 0)
    built = build_call(spec, sample, backend)
    try:
        ws, ex = get_workspace_size(spec, [built.args[n] for n in spec.param_names])
        aclnn.execute(spec, None, ws, ex, None)
    finally:
        built.free()
    (launch,) = seen
    assert type(launch.args["tensors"]) is tuple and all(type(t) is AclTensor for t in launch.args["tensors"])
    assert type(launch.args["dim"]) is int


@pytest.mark.parametrize("name", sorted(n for n, s in all_specs().items() if s.samples))
def test_every_operators_kernel_receives_only_declared_kernel_types(device: None, name: str) -> None:
    spec = get_spec(name)
    _, sample = pick_sample(spec, np.random.default_rng(0), 0)
    backend = get_backend()
    built = build_call(spec, sample, backend)
    try:
        _, ex = get_workspace_size(spec, [built.args[n] for n in spec.param_names])
        kernel = get_spec(spec.kernel_name)
        through = set(
            PASSTHROUGH.get(name, {}).values()
        )  # a version's parameters its base's kernels read (tensor or attr)
        assert set(ex.kernel_args) == set(kernel.param_names) | through
        assert all(
            ex.kernel_args[n] is None or type(ex.kernel_args[n]) in (AclTensor, float, int, bool) for n in through
        )
        wrong = {
            p.name: type(ex.kernel_args[p.name]).__name__
            for p in kernel.params
            if not _conforms(p, ex.kernel_args[p.name])
        }
        assert not wrong, f"{name}: arguments not in their kernel form: {wrong}"
    finally:
        built.free()

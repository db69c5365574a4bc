"""The reference's pooling ops against torch.nn.functional (avg_pool2d, max_pool2d with indices, autograd)."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from acl_core.errors import AclnnError
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.pooling import BY_NAME, GLOBAL, INDEX_DTYPES, Pool
from tests.conftest import assert_close
from tests.ops.torch_ref import check_samples_and_errors, ref

BF16 = ml_dtypes.bfloat16
AVG = {2: F.avg_pool2d, 3: F.avg_pool3d}
MAX = {2: F.max_pool2d, 3: F.max_pool3d}
ADAPTIVE_AVG = {2: F.adaptive_avg_pool2d, 3: F.adaptive_avg_pool3d}
ADAPTIVE_MAX = {2: F.adaptive_max_pool2d, 3: F.adaptive_max_pool3d}


def _f64(a: np.ndarray, grad: bool = False) -> torch.Tensor:
    return torch.from_numpy(np.asarray(a).astype(np.float64)).requires_grad_(grad)


def _torch_pool(pool: Pool, args: dict[str, Any], backward: bool) -> Any:
    """torch's function of ``pool`` with the call's attributes bound (adaptive: the output size)."""
    if pool.adaptive:
        fn = (ADAPTIVE_AVG if pool.kind == "avg" else ADAPTIVE_MAX)[pool.spatial]
        size = list(np.shape(args["gradOutput"])[-pool.spatial :]) if backward else list(args["outputSize"])
        return lambda x, **kw: fn(x, size, **kw)
    fn = (AVG if pool.kind == "avg" else MAX)[pool.spatial]
    kw = _torch_args(pool, args, backward)
    return lambda x, **more: fn(x, **kw, **more)


def _torch_args(pool: Pool, args: dict[str, Any], backward: bool) -> dict[str, Any]:
    """torch's keyword arguments for a call's attributes."""
    stride = args["stride" if backward else pool.stride]
    kw: dict[str, Any] = {
        "kernel_size": args["kernelSize"] if len(args["kernelSize"]) > 1 else args["kernelSize"][0],
        "stride": (stride if len(stride) > 1 else stride[0]) if stride else None,
        "padding": (lambda p: p if len(p) > 1 else p[0])(args["padding" if backward else pool.padding]),
        "ceil_mode": bool(args["ceilMode"]),
    }
    if pool.kind == "avg":
        kw["count_include_pad"] = bool(args["countIncludePad"])
        kw["divisor_override"] = int(args["divisorOverride"]) or None
    else:
        dil = args["dilation"]
        kw["dilation"] = dil if len(dil) > 1 else dil[0]
    return kw


def _rounded(pool: Pool, args: dict[str, Any], name: str) -> np.ndarray:
    """An operand as cubeMathType leaves it (float32 to HF32 or float16), as float64."""
    from acl_reference.kernels.matmul import reduce_precision

    cube = int(args.get("cubeMathType", 0))
    precision = {1: "hf32", 2: "fp16", 3: "hf32"}.get(cube) if pool.cube else None
    return reduce_precision(np.asarray(args[name]), precision)


def _check_forward(name: str, args: dict[str, Any], note: str) -> None:
    pool, _ = BY_NAME[name]
    got = ref(name, **args)
    x = _f64(_rounded(pool, args, "self"))
    fn = _torch_pool(pool, args, False)
    if pool.kind == "avg":
        expected = fn(x).numpy()
        assert_close(got[pool.forward_out], expected.astype(args["self"].dtype))
        return
    values, indices = fn(x, return_indices=True)
    assert_close(got[pool.forward_out], values.numpy().astype(args["self"].dtype))
    np.testing.assert_array_equal(got[pool.indices_out], indices.numpy(), err_msg=note)


def _check_backward(name: str, args: dict[str, Any], note: str) -> None:
    pool, _ = BY_NAME[name]
    x = _f64(args["self"], grad=True)
    fn = _torch_pool(pool, args, True)
    grad = _f64(_rounded(pool, args, "gradOutput"))
    call = dict(args)
    if pool.kind == "avg":
        fn(x).backward(grad)
    else:
        y, idx = fn(x, return_indices=True)
        y.backward(grad)
        call["indices"] = idx.numpy().astype(np.asarray(args["indices"]).dtype)  # torch's own choice of maxima
    got = ref(name, **call)[pool.backward_out]
    assert x.grad is not None
    assert_close(got, x.grad.numpy().astype(args["self"].dtype))


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_every_sample_matches_torch(name: str) -> None:
    _, backward = BY_NAME[name]
    spec = get_spec(name)
    assert spec.samples is not None
    for sample in spec.samples(np.random.default_rng(11)):
        (_check_backward if backward else _check_forward)(name, dict(sample.args), sample.note)


@pytest.mark.parametrize("name", sorted(GLOBAL))
def test_global_pools_match_torch_mean_and_amax(name: str) -> None:
    spec = get_spec(name)
    assert spec.samples is not None
    for sample in spec.samples(np.random.default_rng(11)):
        x = np.asarray(sample.args["self"])
        t = _f64(x)
        dims = tuple(range(2, x.ndim))
        expected = t.mean(dim=dims, keepdim=True) if GLOBAL[name][0] == "mean" else t.amax(dim=dims, keepdim=True)
        got = ref(name, **sample.args)["out"]
        assert got.dtype == x.dtype, sample.note
        assert_close(got, expected.numpy().astype(x.dtype))


def test_max_pool_matches_torch_on_explicitly_padded_input() -> None:
    spec = get_spec("MaxPool")
    assert spec.samples is not None
    for sample in spec.samples(np.random.default_rng(11)):
        args = sample.args
        x = np.asarray(args["self"])
        if x.dtype == np.int64 and (x.max() > 1 << 52 or x.min() < -(1 << 52)):
            continue  # the int64 extremes: checked exactly below
        pads = list(args["pads"]) or [0]
        if len(pads) == 4:  # [top, left, bottom, right]
            top, left, bottom, right = pads
        else:
            top = bottom = pads[0]
            left = right = pads[-1]
        padded = F.pad(_f64(x), (left, right, top, bottom), value=-np.inf)
        kernel = args["kernelShape"] * (3 - len(args["kernelShape"]))
        stride = (args["strides"] or [1]) * (3 - len(args["strides"] or [1]))
        expected = F.max_pool2d(padded, kernel, stride, ceil_mode=bool(args["ceilMode"])).numpy()
        assert_close(ref("MaxPool", **args)["out"], expected.astype(x.dtype))


def test_max_pool_keeps_int64_exact() -> None:
    top, low = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    x = np.array([[[[top, top - 1, 3], [low, top - 1, -1], [0, low, top]]]], np.int64)
    args = {"kernelShape": [2], "strides": [1], "autoPad": 0, "pads": [], "dilations": [1], "ceilMode": 0}
    got = ref("MaxPool", self=x, **args)["out"]
    np.testing.assert_array_equal(got, [[[[top, top - 1], [top - 1, top]]]])


@pytest.mark.parametrize("name", sorted(BY_NAME) + sorted(GLOBAL) + ["MaxPool"])
def test_samples_run_and_errors_fail_with_their_codes(name: str) -> None:
    check_samples_and_errors(get_spec(name))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16])
@pytest.mark.parametrize("ceil", [False, True])
def test_resnet_like_geometry_and_ceil_mode(dtype: Any, ceil: bool) -> None:
    rng = np.random.default_rng(5)
    x = rng.uniform(-2, 2, (2, 3, 13, 10)).astype(dtype)
    common = {"self": x, "kernelSize": [3], "ceilMode": ceil}
    for include in (False, True):
        _check_forward(
            "AvgPool2d",
            {
                **common,
                "strides": [2],
                "paddings": [1],
                "countIncludePad": include,
                "divisorOverride": 0,
                "cubeMathType": 0,
            },
            "avg",
        )
    _check_forward("MaxPool2dWithIndices", {**common, "stride": [2], "padding": [1], "dilation": [1]}, "max")


def test_ties_take_the_first_maximum_and_nan_wins() -> None:
    x = np.array([[[[1, 3, 3], [3, 0, 2], [np.nan, 1, np.nan]]]], np.float32)
    got = ref("MaxPool2dWithIndices", self=x, kernelSize=[2], stride=[1], padding=[0], dilation=[1], ceilMode=False)
    np.testing.assert_array_equal(got["indices"][0, 0], [[1, 1], [6, 8]])  # first 3; the last NaN of a window
    assert np.isnan(got["out"][0, 0, 1]).all()
    _, torch_idx = F.max_pool2d(torch.from_numpy(x), 2, 1, return_indices=True)
    np.testing.assert_array_equal(got["indices"], torch_idx.numpy())


def test_all_negative_infinity_window_points_at_its_first_input() -> None:
    x = np.full((1, 1, 3, 3), -np.inf, np.float32)
    got = ref("MaxPool2dWithIndices", self=x, kernelSize=[3], stride=[2], padding=[1], dilation=[1], ceilMode=False)
    _, torch_idx = F.max_pool2d(torch.from_numpy(x), 3, 2, 1, return_indices=True)
    np.testing.assert_array_equal(got["indices"], torch_idx.numpy())
    assert (got["out"] == -np.inf).all()


@pytest.mark.parametrize("idt", INDEX_DTYPES)
def test_backward_refuses_an_index_outside_the_plane(idt: Any) -> None:
    x = np.zeros((1, 1, 4, 4), np.float32)
    g = np.ones((1, 1, 2, 2), np.float32)
    bad = np.array([[[[0, 1], [2, 16]]]], idt.numpy)
    with pytest.raises(AclnnError) as info:
        ref(
            "MaxPool2dWithIndicesBackward",
            gradOutput=g,
            self=x,
            indices=bad,
            kernelSize=[2],
            stride=[2],
            padding=[0],
            dilation=[1],
            ceilMode=False,
        )
    assert info.value.code == 161002

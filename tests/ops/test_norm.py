"""The reference's norm family against PyTorch's CPU results and independently computed statistics."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from acl_core import eager
from acl_core.aclnn import execute, get_workspace_size
from acl_core.dtypes import DataType
from acl_core.errors import AclnnError
from acl_core.plugin import get_backend
from acl_core.spec.ops import all_specs, get_spec
from acl_core.tensor import AclIntArray
from tests.conftest import assert_close
from tests.ops.torch_ref import ref, to_numpy, to_torch

BF16 = ml_dtypes.bfloat16
DTYPES = [np.float32, np.float16, BF16]
NORM_OPS = sorted(name for name, spec in all_specs().items() if spec.family == "norm")


def _f64(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.asarray(a).astype(np.float64))


def _stats(x: torch.Tensor, dims: tuple[int, ...], eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and rstd computed by torch in float64 (population variance), kept dims."""
    var, mean = torch.var_mean(x.double(), dim=dims, keepdim=True, correction=0)
    return mean, torch.rsqrt(var + eps)


# ----------------------------------------------------------------------------- LayerNorm
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_layer_norm_matches_torch(dtype: type, rng: np.random.Generator) -> None:
    x = rng.standard_normal((3, 5, 12)).astype(dtype)
    w = rng.uniform(0.5, 1.5, 12).astype(dtype)
    b = rng.standard_normal(12).astype(dtype)
    got = ref("LayerNorm", input=x, normalizedShape=[12], weightOptional=w, biasOptional=b, eps=1e-5)
    want = F.layer_norm(to_torch(x), [12], to_torch(w), to_torch(b), eps=1e-5)
    assert got["out"].dtype == np.dtype(dtype)
    assert_close(got["out"], to_numpy(want))
    mean, rstd = _stats(to_torch(x), (-1,), 1e-5)
    assert got["meanOutOptional"].shape == (3, 5, 1)
    assert_close(got["meanOutOptional"], mean.numpy())
    assert_close(got["rstdOutOptional"], rstd.numpy())


def test_layer_norm_over_several_dims_matches_torch_native(rng: np.random.Generator) -> None:
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32) * 3 + 1
    w = rng.uniform(0.5, 1.5, (4, 5)).astype(np.float32)
    b = rng.standard_normal((4, 5)).astype(np.float32)
    got = ref("LayerNorm", input=x, normalizedShape=[4, 5], weightOptional=w, biasOptional=b, eps=1e-6)
    out, mean, rstd = torch.ops.aten.native_layer_norm(to_torch(x), [4, 5], to_torch(w), to_torch(b), 1e-6)
    assert_close(got["out"], out.numpy())
    assert got["meanOutOptional"].shape == (2, 3, 1, 1)
    assert_close(got["meanOutOptional"], mean.numpy())
    assert_close(got["rstdOutOptional"], rstd.numpy())


def test_layer_norm_without_affine_and_with_float32_stats(rng: np.random.Generator) -> None:
    x = rng.standard_normal((4, 9)).astype(np.float16)
    backend = get_backend("reference")
    # the statistics may be wider than the input: CANN casts them to their outputs' dtype
    mean_out, rstd_out = (eager.empty((4, 1), DataType.ACL_FLOAT, backend) for _ in range(2))
    got = ref("LayerNorm", input=x, normalizedShape=[9], eps=1e-5, meanOutOptional=mean_out, rstdOutOptional=rstd_out)
    mean, rstd = _stats(to_torch(x), (-1,), 1e-5)
    assert mean_out.numpy().dtype == np.float32
    assert_close(mean_out.numpy(), mean.numpy())
    assert_close(rstd_out.numpy(), rstd.numpy())
    assert_close(got["out"], F.layer_norm(to_torch(x).float(), [9], eps=1e-5).half().numpy())


def test_layer_norm_bf16_input_with_float32_affine(rng: np.random.Generator) -> None:
    x = rng.standard_normal((2, 16)).astype(BF16)
    w = rng.uniform(0.5, 1.5, 16).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    got = ref("LayerNorm", input=x, normalizedShape=[16], weightOptional=w, biasOptional=b, eps=1e-5)
    want = F.layer_norm(_f64(x), [16], _f64(w), _f64(b), eps=1e-5)
    assert got["out"].dtype == BF16
    assert_close(got["out"], want.numpy())


def test_layer_norm_empty_inputs() -> None:
    got = ref("LayerNorm", input=np.zeros((0, 8), np.float32), normalizedShape=[8], eps=1e-5)
    assert got["out"].shape == (0, 8) and got["meanOutOptional"].shape == (0, 1)
    # rows with nothing to normalise: CANN writes mean 0 and rstd NaN
    got = ref("LayerNorm", input=np.zeros((3, 0), np.float32), normalizedShape=[0], eps=1e-5)
    assert_close(got["meanOutOptional"], np.zeros((3, 1)))
    assert np.isnan(got["rstdOutOptional"]).all()


def test_layer_norm_propagates_nan_to_its_row_only() -> None:
    x = np.array([[1.0, np.nan, 2.0], [1.0, 2.0, 3.0]], np.float32)
    got = ref("LayerNorm", input=x, normalizedShape=[3], eps=1e-5)["out"]
    assert np.isnan(got[0]).all()
    assert_close(got[1], F.layer_norm(torch.from_numpy(x[1:]), [3], eps=1e-5).numpy()[0])


def test_layer_norm_strided_views_give_the_same_result(rng: np.random.Generator) -> None:
    x = rng.standard_normal((6, 7)).astype(np.float32)
    want = ref("LayerNorm", input=x, normalizedShape=[7], eps=1e-5)
    for layout in ("padded", "transposed"):
        got = ref("LayerNorm", input=x, normalizedShape=[7], eps=1e-5, layout=layout)
        for name in want:
            assert_close(got[name], want[name], atol=0, rtol=0)


# ----------------------------------------------------------------------------- AddLayerNorm
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_add_layer_norm_matches_layer_norm_of_the_sum(dtype: type, rng: np.random.Generator) -> None:
    x1, x2 = (rng.standard_normal((2, 3, 10)).astype(dtype) for _ in range(2))
    bias = rng.standard_normal(10).astype(dtype)
    g = rng.uniform(0.5, 1.5, 10).astype(dtype)
    be = rng.standard_normal(10).astype(dtype)
    got = ref("AddLayerNorm", x1=x1, x2=x2, gamma=g, beta=be, biasOptional=bias, epsilon=1e-5, additionalOutput=True)
    x = _f64(x1) + _f64(x2) + _f64(bias)
    want = F.layer_norm(x, [10], _f64(g), _f64(be), eps=1e-5)
    mean, rstd = _stats(x, (-1,), 1e-5)
    assert got["yOut"].dtype == np.dtype(dtype) and got["meanOut"].dtype == np.float32
    assert_close(got["yOut"], want.numpy())
    assert_close(got["meanOut"], mean.numpy())
    assert_close(got["rstdOut"], rstd.numpy())
    assert_close(got["xOut"], x.numpy())


def test_add_layer_norm_mixed_dtypes_give_float32(rng: np.random.Generator) -> None:
    x1 = rng.standard_normal((3, 6)).astype(np.float16)
    x2 = rng.standard_normal((3, 6)).astype(np.float32)
    g, be = np.ones(6, np.float32), np.zeros(6, np.float32)
    got = ref("AddLayerNorm", x1=x1, x2=x2, gamma=g, beta=be, epsilon=1e-5, additionalOutput=False)
    assert got["yOut"].dtype == np.float32
    assert "xOut" not in got  # additionalOutput=false: no residual output
    assert_close(got["yOut"], F.layer_norm(_f64(x1) + _f64(x2), [6], eps=1e-5).numpy())


# ----------------------------------------------------------------------------- RmsNorm
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_rms_norm_matches_torch(dtype: type, rng: np.random.Generator) -> None:
    x = rng.standard_normal((2, 3, 4, 8)).astype(dtype)
    g = rng.uniform(0.5, 1.5, 8).astype(dtype)
    got = ref("RmsNorm", x=x, gamma=g, epsilon=1e-6)
    want = torch.rms_norm(to_torch(x).float(), [8], to_torch(g).float(), eps=1e-6)
    assert got["yOut"].dtype == np.dtype(dtype)
    assert_close(got["yOut"], to_numpy(want.to(to_torch(x).dtype)))
    # rstdOut is float32 with x's rank and the normalised dims kept as 1: [2, 3, 4, 8] -> [2, 3, 4, 1]
    assert got["rstdOut"].dtype == np.float32 and got["rstdOut"].shape == (2, 3, 4, 1)
    rstd = torch.rsqrt(_f64(x).square().mean(dim=-1, keepdim=True) + 1e-6)
    assert_close(got["rstdOut"], rstd.numpy())


def test_rms_norm_over_two_dims_with_float32_gamma(rng: np.random.Generator) -> None:
    x = rng.standard_normal((2, 3, 4, 8)).astype(np.float16)
    g = rng.uniform(0.5, 1.5, (4, 8)).astype(np.float32)
    got = ref("RmsNorm", x=x, gamma=g, epsilon=1e-5)
    assert got["rstdOut"].shape == (2, 3, 1, 1)
    want = torch.rms_norm(_f64(x), [4, 8], _f64(g), eps=1e-5)
    assert_close(got["yOut"], want.numpy())
    assert_close(got["rstdOut"], torch.rsqrt(_f64(x).square().mean(dim=(-2, -1), keepdim=True) + 1e-5).numpy())


def test_rms_norm_hand_computed() -> None:
    x = np.array([[3.0, 4.0], [0.0, 0.0]], np.float32)
    got = ref("RmsNorm", x=x, gamma=np.array([1.0, 2.0], np.float32), epsilon=0.0)
    # row 0: rms = sqrt((9 + 16) / 2) = 5 / sqrt(2); row 1: rms = 0 -> rstd = inf, 0 * inf = NaN
    assert_close(got["rstdOut"][0], np.array([np.sqrt(2) / 5]))
    assert_close(got["yOut"][0], np.array([3.0, 8.0]) * np.sqrt(2) / 5)
    assert np.isinf(got["rstdOut"][1]).all()


# ----------------------------------------------------------------------------- AddRmsNorm
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_add_rms_norm_outputs(dtype: type, rng: np.random.Generator) -> None:
    x1, x2 = (rng.standard_normal((4, 16)).astype(dtype) for _ in range(2))
    g = rng.uniform(0.5, 1.5, 16).astype(dtype)
    got = ref("AddRmsNorm", x1=x1, x2=x2, gamma=g, epsilon=1e-6)
    x = _f64(x1) + _f64(x2)
    assert_close(got["xOut"], (to_torch(x1).float() + to_torch(x2).float()).to(to_torch(x1).dtype).float().numpy())
    assert_close(got["yOut"], torch.rms_norm(x, [16], _f64(g), eps=1e-6).numpy())
    assert got["rstdOut"].dtype == np.float32 and got["rstdOut"].shape == (4, 1)
    assert_close(got["rstdOut"], torch.rsqrt(x.square().mean(dim=-1, keepdim=True) + 1e-6).numpy())


# ----------------------------------------------------------------------------- GroupNorm
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize(("shape", "group"), [((2, 6, 4, 3), 3), ((3, 4, 5), 2), ((2, 4), 4), ((1, 4, 2, 2, 2), 1)])
def test_group_norm_matches_torch(dtype: type, shape: tuple[int, ...], group: int, rng: np.random.Generator) -> None:
    x = rng.standard_normal(shape).astype(dtype) * 2 + 0.5
    c, hxw = shape[1], int(np.prod(shape[2:]))
    g = rng.uniform(0.5, 1.5, c).astype(dtype)
    b = rng.standard_normal(c).astype(dtype)
    got = ref("GroupNorm", self=x, gamma=g, beta=b, N=shape[0], C=c, HxW=hxw, group=group, eps=1e-5)
    # torch in float64: its float32 kernel loses digits when a group's variance is ~0 (one element per group)
    assert got["out"].dtype == np.dtype(dtype)
    assert_close(got["out"], F.group_norm(_f64(x), group, _f64(g), _f64(b), 1e-5).numpy())
    _, mean, rstd = torch.ops.aten.native_group_norm(_f64(x), None, None, shape[0], c, hxw, group, 1e-5)
    assert got["meanOut"].shape == (shape[0], group) and got["meanOut"].dtype == np.dtype(dtype)
    assert_close(got["meanOut"], mean.numpy())
    assert_close(got["rstdOut"], rstd.numpy())


def test_group_norm_without_affine_and_empty(rng: np.random.Generator) -> None:
    x = rng.standard_normal((2, 4, 6)).astype(np.float32)
    got = ref("GroupNorm", self=x, N=2, C=4, HxW=6, group=2, eps=1e-5)
    assert_close(got["out"], F.group_norm(torch.from_numpy(x), 2, eps=1e-5).numpy())
    empty = ref("GroupNorm", self=np.zeros((0, 4, 3), np.float32), N=0, C=4, HxW=3, group=2, eps=1e-5)
    assert empty["out"].shape == (0, 4, 3) and empty["meanOut"].shape == (0, 2)
    no_space = ref("GroupNorm", self=np.zeros((2, 4, 0), np.float32), N=2, C=4, HxW=0, group=2, eps=1e-5)
    assert_close(no_space["meanOut"], np.zeros((2, 2)))
    assert np.isnan(no_space["rstdOut"]).all()


# ----------------------------------------------------------------------------- BatchNorm
def _bn_case(rng: np.random.Generator, shape: tuple[int, ...], dtype: type) -> dict[str, np.ndarray]:
    c = shape[1]
    return {
        "input": (rng.standard_normal(shape) * 2 + 1).astype(dtype),
        "weight": rng.uniform(0.5, 1.5, c).astype(dtype),
        "bias": rng.standard_normal(c).astype(dtype),
        "runningMean": rng.uniform(-1, 1, c).astype(np.float32),
        "runningVar": rng.uniform(0.5, 2, c).astype(np.float32),
    }


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (4, 3), (2, 3, 2, 2, 3)])
def test_batch_norm_inference_matches_torch(dtype: type, shape: tuple[int, ...], rng: np.random.Generator) -> None:
    a = _bn_case(rng, shape, dtype)
    got = ref("BatchNorm", **a, training=False, momentum=0.1, eps=1e-5)
    want = F.batch_norm(
        _f64(a["input"]),
        _f64(a["runningMean"]),
        _f64(a["runningVar"]),
        _f64(a["weight"]),
        _f64(a["bias"]),
        training=False,
        eps=1e-5,
    )
    assert got["output"].dtype == np.dtype(dtype)
    assert_close(got["output"], want.numpy())
    assert "saveMean" not in got  # inference writes no batch statistics
    assert_close(got["runningMean"], a["runningMean"], atol=0, rtol=0)  # and leaves the running ones alone


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_batch_norm_training_matches_torch(dtype: type, rng: np.random.Generator) -> None:
    a = _bn_case(rng, (4, 3, 5), dtype)
    got = ref("BatchNorm", **a, training=True, momentum=0.1, eps=1e-5)
    rm, rv = _f64(a["runningMean"]), _f64(a["runningVar"])
    want = F.batch_norm(_f64(a["input"]), rm, rv, _f64(a["weight"]), _f64(a["bias"]), True, 0.1, 1e-5)
    assert_close(got["output"], want.numpy())
    # torch updated rm / rv in place with the unbiased batch variance
    assert_close(got["runningMean"], rm.numpy())
    assert_close(got["runningVar"], rv.numpy())
    _, save_mean, save_invstd = torch.ops.aten.native_batch_norm(
        _f64(a["input"]), None, None, None, None, True, 0.1, 1e-5
    )
    assert_close(got["saveMean"], save_mean.numpy())
    assert_close(got["saveInvstd"], save_invstd.numpy())


def test_batch_norm_without_optional_tensors(rng: np.random.Generator) -> None:
    x = rng.standard_normal((3, 2, 4)).astype(np.float32)
    inference = ref("BatchNorm", input=x, training=False, momentum=0.1, eps=1e-5)
    # no running statistics: CANN substitutes mean 0 and variance 1
    assert_close(inference["output"], x / np.sqrt(1 + 1e-5))
    training = ref("BatchNorm", input=x, training=True, momentum=0.1, eps=1e-5)
    assert_close(training["output"], F.batch_norm(torch.from_numpy(x), None, None, training=True, eps=1e-5).numpy())


def test_batch_norm_empty_batch(rng: np.random.Generator) -> None:
    a = _bn_case(rng, (0, 3, 4), np.float32)
    got = ref("BatchNorm", **a, training=True, momentum=0.1, eps=1e-5)
    assert got["output"].shape == (0, 3, 4)
    assert_close(got["saveMean"], np.zeros(3))
    assert np.isnan(got["saveInvstd"]).all()
    assert_close(got["runningVar"], a["runningVar"], atol=0, rtol=0)


# ----------------------------------------------------------------------------- errors
def _c_args(op: str, kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, eager.DeviceArray]]:
    """Arguments for the C-shaped phase 1: arrays on the reference device, lists as aclIntArray."""
    backend = get_backend("reference")
    arrays: dict[str, eager.DeviceArray] = {}
    args: dict[str, Any] = {}
    for p in get_spec(op).params:
        v = kwargs.get(p.name)
        if isinstance(v, np.ndarray):
            arrays[p.name] = eager.to_device(v, backend)
            args[p.name] = arrays[p.name].tensor()
        elif isinstance(v, list):
            args[p.name] = AclIntArray.create(v)
        else:
            args[p.name] = v
    return args, arrays


def _phase1_code(op: str, **kwargs: Any) -> int:
    args, _ = _c_args(op, kwargs)
    with pytest.raises(AclnnError) as exc:
        get_workspace_size(get_spec(op), [], args, backend=get_backend("reference"))
    return exc.value.code


def test_required_outputs_are_161001() -> None:
    x = np.ones((2, 8), np.float32)
    g = np.ones(8, np.float32)
    y = np.zeros((2, 8), np.float32)
    stat = np.zeros((2, 1), np.float32)
    common = {"x1": x, "x2": x, "gamma": g, "beta": g, "epsilon": 1e-5, "yOut": y, "meanOut": stat, "rstdOut": stat}
    assert _phase1_code("AddLayerNorm", **common, additionalOutput=True) == 161001
    assert _phase1_code("AddRmsNorm", x1=x, x2=x, gamma=g, epsilon=1e-6, yOut=y, rstdOut=stat) == 161001
    bn = {"input": np.ones((2, 3), np.float32), "training": True, "momentum": 0.1, "eps": 1e-5}
    assert _phase1_code("BatchNorm", **bn, output=np.zeros((2, 3), np.float32)) == 161001
    assert _phase1_code("LayerNorm", input=x, normalizedShape=None, eps=1e-5, out=y) == 161001


def test_null_optional_outputs_are_skipped(rng: np.random.Generator) -> None:
    x = rng.standard_normal((3, 8)).astype(np.float32)
    y = np.zeros((3, 8), np.float32)
    args, arrays = _c_args("LayerNorm", {"input": x, "normalizedShape": [8], "eps": 1e-5, "out": y})
    backend = get_backend("reference")
    spec = get_spec("LayerNorm")
    size, executor = get_workspace_size(spec, [], args, backend=backend)
    execute(spec, 0, size, executor, None)
    assert_close(arrays["out"].numpy(), F.layer_norm(torch.from_numpy(x), [8], eps=1e-5).numpy())
    # AddRmsNorm with neither rstdOut nor xOut: only yOut is written
    args, arrays = _c_args("AddRmsNorm", {"x1": x, "x2": x, "gamma": np.ones(8, np.float32), "epsilon": 0.0, "yOut": y})
    spec = get_spec("AddRmsNorm")
    size, executor = get_workspace_size(spec, [], args, backend=backend)
    execute(spec, 0, size, executor, None)
    assert_close(arrays["yOut"].numpy(), torch.rms_norm(torch.from_numpy(2 * x), [8], eps=0.0).numpy())


@pytest.mark.parametrize("op", NORM_OPS)
def test_error_samples_fail_with_their_code(op: str) -> None:
    spec = get_spec(op)
    assert spec.error_samples is not None, f"{op} declares no error samples"
    cases = list(spec.error_samples(np.random.default_rng(0)))
    assert cases
    for case in cases:
        with pytest.raises(AclnnError) as exc:
            ref(op, **case.args)
        assert exc.value.code == case.code, f"{op}: {case.note}: {exc.value.message}"


@pytest.mark.parametrize("op", NORM_OPS)
def test_conformance_samples_run_and_fill_every_output(op: str) -> None:
    spec = get_spec(op)
    assert spec.samples is not None
    cases = list(spec.samples(np.random.default_rng(0)))
    dtypes = {np.asarray(v).dtype for c in cases for v in c.args.values() if isinstance(v, np.ndarray)}
    first = next(p for p in spec.params if p.dtypes)
    declared = {d.numpy for d in first.dtypes or () if d.is_float}
    assert declared and declared <= dtypes, f"{op}: declared {declared}, sampled {dtypes}"
    for case in cases:
        got = ref(op, **case.args)
        for name, value in got.items():
            finite_inputs = all(
                np.isfinite(np.asarray(v, np.float64)).all() for v in case.args.values() if isinstance(v, np.ndarray)
            )
            if finite_inputs and value.size and name not in ("rstdOutOptional", "saveInvstd", "rstdOut"):
                assert np.isfinite(value.astype(np.float64)).all(), f"{op} {case.note}: {name} not finite"


def test_specific_shape_errors() -> None:
    x = np.ones((2, 3, 4), np.float32)
    with pytest.raises(AclnnError, match="trailing"):
        ref("LayerNorm", input=x, normalizedShape=[3], eps=1e-5)
    with pytest.raises(AclnnError, match="divisible"):
        ref("GroupNorm", self=x, N=2, C=3, HxW=4, group=2, eps=1e-5)
    with pytest.raises(AclnnError, match="epsilon"):
        ref("AddRmsNorm", x1=x, x2=x, gamma=np.ones(4, np.float32), epsilon=-1.0)
    with pytest.raises(AclnnError, match="channel"):
        ref("BatchNorm", input=x, weight=np.ones(4, np.float32), training=False, momentum=0.1, eps=1e-5)


def test_inplace_add_rms_norm_overwrites_both_inputs() -> None:
    rng = np.random.default_rng(5)
    x1, x2 = (rng.standard_normal((3, 8)).astype(np.float32) for _ in range(2))
    gamma = rng.standard_normal(8).astype(np.float32)
    got = eager.run("InplaceAddRmsNorm", "reference", x1Ref=x1, x2Ref=x2, gamma=gamma, epsilon=1e-6)
    x = torch.from_numpy(x1) + torch.from_numpy(x2)
    want_y = torch.rms_norm(x, [8], torch.from_numpy(gamma), 1e-6)
    np.testing.assert_allclose(got["x1Ref"], want_y.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["x2Ref"], x.numpy(), rtol=0, atol=0)
    rstd = 1 / torch.sqrt((x.double() ** 2).mean(-1, keepdim=True) + 1e-6)
    np.testing.assert_allclose(got["rstdOut"], rstd.numpy(), rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, "bfloat16"])
def test_gemma_rms_norm_matches_torch(dtype: object) -> None:
    """yOut = x * rsqrt(mean(x²) + eps) * (1 + gamma), torch in float64 on the same rounded inputs."""
    rng = np.random.default_rng(21)
    x = rng.uniform(-3, 3, (3, 4, 32)).astype(np.dtype(dtype))
    gamma = rng.uniform(-1, 1, (32,)).astype(np.dtype(dtype))
    got = ref("GemmaRmsNorm", x=x, gamma=gamma, epsilon=1e-6)
    xt, gt = to_torch(x).double(), to_torch(gamma).double()
    rstd = torch.rsqrt(xt.pow(2).mean(-1, keepdim=True) + 1e-6)
    want = (xt * rstd * (1 + gt)).to(to_torch(x).dtype)
    tol = 1e-6 if dtype == np.float32 else 1e-2
    np.testing.assert_allclose(got["yOut"].astype(np.float64), to_numpy(want).astype(np.float64), rtol=tol, atol=tol)
    np.testing.assert_allclose(got["rstdOut"], rstd.numpy().astype(np.float32), rtol=1e-6)
    plain = ref(
        "RmsNorm", x=x, gamma=(gamma.astype(np.float64) + 1).astype(np.float32).astype(np.dtype(dtype)), epsilon=1e-6
    )
    if dtype == np.float32:  # 1 + gamma is exact in float32 only up to its rounding: compare to RmsNorm loosely
        np.testing.assert_allclose(got["yOut"], plain["yOut"], rtol=1e-6, atol=1e-6)

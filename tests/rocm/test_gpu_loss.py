"""Every loss op the rocm backend claims, run on the GPU and compared with the reference under its class (GPU tier).

Cases: the op specs' own samples (every dtype, reduction none/mean/sum, broadcasting, 0-d and empty inputs,
optional weights, NaN/Inf), contiguous and, every fourth sample, as padded, transposed and offset views;
then long losses whose term counts cross the block, the slice (:data:`acl_rocm.ops.loss.SLICE`) and the
two-pass boundary, broadcast (stride-0) inputs, a ``[1]`` result, the error cases, and a check that no
loss copies through the host.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import acl_core
from acl_core import aclnn, eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.loss import MEAN, NONE, POINTWISE, ROW_OF, SUM, params_of
from acl_core.spec.opspec import Kind
from acl_core.tensor import AclTensor
from acl_rocm.ops import loss as loss_ops
from acl_rocm.ops.loss import SLICE
from tests.rocm.against_reference import assert_errors_match_reference, assert_matches_reference, class_problems
from tests.rocm.capture_harness import replays_like_eager

pytestmark = pytest.mark.gpu

OPS = sorted(loss_ops.OPS)
BF16 = ml_dtypes.bfloat16


@pytest.mark.parametrize("op", OPS)
def test_matches_reference(rocm: Backend, reference: Backend, op: str) -> None:
    samples = list(get_spec(op).samples(np.random.default_rng(2024)))  # type: ignore[misc]
    assert samples, f"{op} produced no samples"
    for i, sample in enumerate(samples):
        assert_matches_reference(rocm, reference, op, dict(sample.args), "contiguous", sample.note)
        if i % 4 == 0:
            for layout in ("padded", "transposed", "offset"):
                assert_matches_reference(rocm, reference, op, dict(sample.args), layout, sample.note)


def test_every_loss_is_claimed(rocm: Backend) -> None:
    assert set(ROW_OF) == set(OPS)
    assert set(OPS) <= set(rocm.capabilities().ops)


def _loss_args(op: str, shape: tuple[int, ...], dtype: Any, reduction: int, rng: np.random.Generator) -> dict:
    """Inputs of ``op`` at ``shape`` in its declared domain (weights over the last dim, gradOutput as required)."""
    row, _ = ROW_OF[op]
    params = params_of(op)
    args: dict[str, Any] = {"reduction": reduction, **row.values[-1]}
    for p in params:
        if p.writes or p.kind is not Kind.TENSOR:
            continue
        if p.name in ("gradOutput", "gradOut"):
            g_shape = shape if reduction == NONE else ()
            args[p.name] = rng.uniform(-1.0, 2.0, g_shape).astype(np.float32).astype(dtype)
            continue
        low, high = row.ranges.get(p.name, (-4.0, 4.0))
        at = shape[-1:] if p.name in ("weight", "weightOptional", "posWeightOptional") else shape
        args[p.name] = rng.uniform(low, high, at).astype(np.float32).astype(dtype)
    return args


LONG = [3 * SLICE - 1, SLICE, SLICE + 1, 257, 33 * 1025]
"""Term counts: a partial last slice, exactly one slice (one pass), one past it, a block ±1, many slices."""


@pytest.mark.parametrize("reduction", [NONE, MEAN, SUM], ids=["none", "mean", "sum"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16], ids=["f32", "f16", "bf16"])
def test_long_losses_cross_the_block_and_slice_boundaries(
    rocm: Backend, reference: Backend, reduction: int, dtype: Any
) -> None:
    rng = np.random.default_rng(reduction * 10 + np.dtype(dtype).itemsize)
    for k, row in enumerate(POINTWISE):
        n = LONG[k % len(LONG)]
        for op in (row.name, row.backward_name):
            args = _loss_args(op, (n,), dtype, reduction, rng)
            assert_matches_reference(rocm, reference, op, args, "contiguous", f"[{n}] {np.dtype(dtype).name}")


@pytest.mark.parametrize("op", [r.name for r in POINTWISE])
def test_broadcast_inputs_and_stride0_views(rocm: Backend, reference: Backend, op: str) -> None:
    rng = np.random.default_rng(5)
    for reduction in (NONE, MEAN, SUM):
        args = _loss_args(op, (3, 1, 1500), np.float32, reduction, rng)
        target = "target"
        args[target] = rng.uniform(*ROW_OF[op][0].ranges.get(target, (-4.0, 4.0)), (1, 4, 1500)).astype(np.float32)
        for layout in ("contiguous", "expanded", "transposed"):
            assert_matches_reference(rocm, reference, op, args, layout, f"broadcast reduction {reduction}")


@pytest.mark.parametrize("reduction", [MEAN, SUM], ids=["mean", "sum"])
def test_a_one_element_result_and_an_empty_loss(rocm: Backend, reference: Backend, reduction: int) -> None:
    rng = np.random.default_rng(9)
    args = _loss_args("MseLoss", (5000,), np.float16, reduction, rng)
    assert_matches_reference(
        rocm, reference, "MseLoss", {**args, "out": np.zeros((1,), np.float16)}, "contiguous", "[1] out"
    )
    empty = {"self": np.zeros((0, 3), np.float32), "target": np.zeros((0, 3), np.float32), "reduction": reduction}
    got = eager.run("SmoothL1Loss", rocm, **empty, beta=1.0)["result"]
    assert got.shape == () and (np.isnan(got) if reduction == MEAN else got == 0.0)


def test_a_16bit_accumulator_would_fail_the_class() -> None:
    # the class tells a float32-summed reduced loss from a 16-bit-summed one (what the rocm path must not do)
    rng = np.random.default_rng(3)
    n = 3 * SLICE
    x, t = (rng.uniform(-0.1, 0.1, n).astype(np.float16) for _ in range(2))
    args = {"self": x, "target": t, "reduction": SUM}
    expected = eager.run("MseLoss", "reference", **args)
    total = np.float16(0)
    for v in ((x.astype(np.float32) - t.astype(np.float32)) ** 2).astype(np.float16):
        total = np.float16(total + v)
    assert np.isfinite(total) and np.isfinite(expected["out"])
    assert class_problems("MseLoss", args, {"out": np.asarray(total)}, expected)


@pytest.mark.parametrize("op", OPS)
def test_errors_match_the_reference(rocm: Backend, reference: Backend, op: str) -> None:
    assert_errors_match_reference(rocm, reference, op)


@pytest.fixture
def front_end(rocm: Backend, rocm_under_test: str) -> Iterator[Backend]:
    """``rocm`` as the process's backend for the front ends, for one test."""
    acl_core.use_backend(rocm_under_test)
    yield rocm


def test_losses_never_copy_through_the_host(front_end: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    rt = front_end.runtime  # type: ignore[attr-defined]
    n = 3 * SLICE + 5  # the two-pass path
    x, t, out = rt.malloc(n * 4), rt.malloc(n * 4), rt.malloc(4)
    tx = AclTensor.create((n,), D.ACL_FLOAT, (1,), 0, 2, (n,), x)
    tt = AclTensor.create((n,), D.ACL_FLOAT, (1,), 0, 2, (n,), t)
    tout = AclTensor.create((), D.ACL_FLOAT, (), 0, 2, (), out)
    rt.memset(x, n * 4, 0x3F, n * 4)  # every float is 0x3F3F3F3F (~0.748)
    rt.memset(t, n * 4, 0, n * 4)
    provider = front_end.provider  # type: ignore[attr-defined]

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("a loss copied memory through the runtime")

    try:
        size, executor, ret = aclnn.aclnnMseLossGetWorkspaceSize(tx, tt, SUM, tout)
        assert ret == 0, aclnn.aclGetRecentErrMsg()
        monkeypatch.setattr(provider, "memcpy", forbidden)
        assert aclnn.aclnnMseLoss(None, size, executor, None) == 0, aclnn.aclGetRecentErrMsg()
        rt.synchronize_device()
    finally:
        monkeypatch.undo()
        host = np.empty(1, np.float32)
        rt.register_host(host.ctypes.data, host.nbytes, host)
        rt.memcpy(host.ctypes.data, host.nbytes, out, 4, 2)
        rt.unregister(host.ctypes.data)
        for p in (x, t, out):
            rt.free(p)
    value = float(np.frombuffer(b"\x3f" * 4, np.float32)[0])
    np.testing.assert_allclose(host[0], np.float32(value * value * n), rtol=1e-6)


@pytest.mark.parametrize("reduction", [MEAN, SUM], ids=["mean", "sum"])
def test_a_reduced_loss_replays_bit_for_bit(rocm: Backend, reduction: int) -> None:
    # the two-pass program (stream-ordered temporaries, a zeroed tail) under stream capture
    if not rocm.capabilities().stream_capture:
        pytest.skip(f"no stream capture: {rocm.capabilities().notes.get('stream_capture')}")
    rng = np.random.default_rng(11)
    args = _loss_args("BinaryCrossEntropyWithLogits", (2 * SLICE + 3,), np.float32, reduction, rng)
    replays_like_eager(rocm, "BinaryCrossEntropyWithLogits", args)

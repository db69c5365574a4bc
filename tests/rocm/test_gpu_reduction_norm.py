"""Every reduction and norm op the rocm backend claims, run on the GPU and compared with the NumPy reference (GPU tier).

Cases come from the op specs' own samples (every dtype, keepdim, 0-d, empty tensors and rows,
NaN/Inf, ties), run contiguous and, every third sample, as padded and transposed views; then long
rows (several warps per row, more rows than blocks, 64-bit sums) and a check that no op copies
through the host.
"""

from __future__ import annotations

import numpy as np
import pytest

from acl_core import aclnn, eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.errors import AclnnError
from acl_core.spec.ops import all_specs, get_spec
from acl_core.tensor import AclIntArray, AclTensor
from acl_rocm.ops import norm as norm_ops
from acl_rocm.ops import reduction as reduction_ops
from tests.conftest import assert_close
from tests.rocm.against_reference import compare_run, sample_dtypes

pytestmark = pytest.mark.gpu

CLAIMED = sorted(set(reduction_ops.OPS) | set(norm_ops.OPS))
OPS = sorted(n for n, s in all_specs().items() if s.kernel_name in CLAIMED)


@pytest.mark.parametrize("op", OPS)
def test_matches_reference(rocm: Backend, reference: Backend, op: str) -> None:
    samples = list(get_spec(op).samples(np.random.default_rng(2024)))  # type: ignore[misc]
    assert samples, f"{op} produced no samples"
    claimed = set(rocm.capabilities().dtypes)
    for i, sample in enumerate(samples):
        if not sample_dtypes(sample.args) <= claimed:
            with pytest.raises(AclnnError) as err:
                eager.run(op, rocm, **sample.args)
            assert err.value.code == 161002, sample.note
            continue
        compare_run(rocm, reference, op, dict(sample.args), "contiguous", sample.note, prefill=True)
        if i % 3 == 0:
            for layout in ("padded", "transposed"):
                compare_run(rocm, reference, op, dict(sample.args), layout, sample.note, prefill=True)


def test_claimed_ops_are_in_the_capabilities(rocm: Backend) -> None:
    assert set(OPS) <= set(rocm.capabilities().ops)


LONG: list[tuple[str, dict]] = [
    ("Softmax", {"self": (3000, 1000), "dim": -1}),
    ("LogSoftmax", {"self": (700, 33), "dim": 0}),
    ("ReduceSum", {"self": (64, 100_000), "dims": [1], "keepDims": False, "dtype": 0}),
    ("Mean", {"self": (50, 60, 70), "dim": [0, 2], "keepDim": True, "dtype": 0}),
    ("ArgMax", {"self": (500, 2000), "dim": 1, "keepdim": False}),
    ("MaxDim", {"self": (2000, 300), "dim": 0, "keepdim": True}),
    ("VarMean", {"self": (100, 5000), "dim": [1], "correction": 1, "keepdim": False}),
    ("Cumsum", {"self": (40, 3000), "dim": 1, "dtype": 0}),
    ("LayerNorm", {"input": (4096, 1024), "normalizedShape": [1024], "eps": 1e-5}),
    ("RmsNorm", {"x": (4096, 4096), "gamma": (4096,), "epsilon": 1e-6}),
    ("GroupNorm", {"self": (8, 64, 32, 32), "N": 8, "C": 64, "HxW": 1024, "group": 8, "eps": 1e-5}),
    ("BatchNorm", {"input": (16, 32, 28, 28), "training": True, "momentum": 0.1, "eps": 1e-5}),
]


@pytest.mark.parametrize(("op", "shapes"), LONG, ids=[op for op, _ in LONG])
def test_long_rows(rocm: Backend, reference: Backend, op: str, shapes: dict) -> None:
    rng = np.random.default_rng(11)
    args = {k: rng.integers(-3, 4, v).astype(np.float32) if isinstance(v, tuple) else v for k, v in shapes.items()}
    if op == "BatchNorm":
        args["runningMean"] = np.zeros(32, np.float32)
        args["runningVar"] = np.ones(32, np.float32)
    compare_run(rocm, reference, op, args, "contiguous", "long rows", prefill=True)


def test_int64_sum_wraps_like_the_reference(rocm: Backend, reference: Backend) -> None:
    x = np.full((3, 5000), 2**62, np.int64)
    args = {"self": x, "dims": [1], "keepDims": False, "dtype": int(D.ACL_INT64)}
    np.testing.assert_array_equal(
        eager.run("ReduceSum", rocm, **args)["out"], eager.run("ReduceSum", reference, **args)["out"]
    )


def test_reductions_never_copy_through_the_host(rocm: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    rt = rocm.runtime  # type: ignore[attr-defined]
    n = 4096
    a = rt.malloc(n * 4)
    out = rt.malloc(4 * 4)
    ta = AclTensor.create((4, n // 4), D.ACL_FLOAT, (n // 4, 1), 0, 2, (4, n // 4), a)
    tout = AclTensor.create((4,), D.ACL_FLOAT, (1,), 0, 2, (4,), out)
    rt.memset(a, n * 4, 0x3F, n * 4)  # every float is 0x3F3F3F3F
    provider = rocm.provider  # type: ignore[attr-defined]

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("an op copied memory through the runtime")

    try:
        dims = AclIntArray.create([1])
        size, executor, ret = aclnn.aclnnReduceSumGetWorkspaceSize(ta, dims, False, int(D.ACL_FLOAT), tout)
        assert ret == 0 and size == 0
        monkeypatch.setattr(provider, "memcpy", forbidden)
        assert aclnn.aclnnReduceSum(None, 0, executor, None) == 0
        rt.synchronize_device()
    finally:
        monkeypatch.undo()
        host = np.empty(4, np.float32)
        rt.register_host(host.ctypes.data, host.nbytes, host)
        rt.memcpy(host.ctypes.data, host.nbytes, out, 16, 2)
        rt.unregister(host.ctypes.data)
        rt.free(a)
        rt.free(out)
    value = float(np.frombuffer(b"\x3f" * 4, np.float32)[0])
    np.testing.assert_allclose(host, np.full(4, value * (n // 4), np.float32), rtol=1e-6)


ROW_DTYPES = [np.float32, np.float16, np.dtype("bfloat16")]
ROW_SHAPES = [(64, 8192), (33, 8191), (16, 12288), (8, 20000), (7, 3), (5, 1)]
"""Register-cached rows with whole vectors, an odd length (scalar chunks), 24 halves a thread, rows too long
for the cache (the three-pass path), tiny rows and one-element rows."""


def _row_args(op: str, shape: tuple[int, int], dtype: object, rng: np.random.Generator) -> dict:
    x = (rng.standard_normal(shape) * 3).astype(np.float32).astype(dtype)
    w = rng.standard_normal(shape[1]).astype(np.float32).astype(dtype)
    if op in ("Softmax", "LogSoftmax"):
        return {"self": x, "dim": -1}
    if op == "LayerNorm":
        b = rng.standard_normal(shape[1]).astype(np.float32).astype(dtype)
        return {"input": x, "normalizedShape": [shape[1]], "weightOptional": w, "biasOptional": b, "eps": 1e-5}
    if op == "AddRmsNorm":
        return {"x1": x, "x2": x[::-1].copy(), "gamma": w, "epsilon": 1e-6}
    return {"x": x, "gamma": w, "epsilon": 1e-6}


@pytest.mark.parametrize("dtype", ROW_DTYPES, ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "LayerNorm", "RmsNorm", "AddRmsNorm"])
def test_cached_rows_every_length_and_layout(rocm: Backend, reference: Backend, op: str, dtype: object) -> None:
    rng = np.random.default_rng(5)
    for shape in ROW_SHAPES:
        args = _row_args(op, shape, dtype, rng)
        for layout in ("contiguous", "padded", "transposed"):
            compare_run(rocm, reference, op, dict(args), layout, f"rows {shape}", prefill=True)


@pytest.mark.parametrize("offset", [1, 2, 4])
@pytest.mark.parametrize("op", ["Softmax", "LayerNorm", "RmsNorm"])
def test_cached_rows_on_misaligned_inputs(rocm: Backend, reference: Backend, op: str, offset: int) -> None:
    """x starting 1, 2 or 4 elements into its allocation: narrower vectors or scalar chunks, same values."""
    from tests.rocm.offset_views import placed

    rng = np.random.default_rng(offset)
    for dtype in ROW_DTYPES:
        args = _row_args(op, (16, 4096), dtype, rng)
        name = {"Softmax": "self", "LayerNorm": "input", "RmsNorm": "x"}[op]
        expected = eager.run(op, reference, **args)
        x = placed(rocm, args[name], offset)
        try:
            actual = eager.run(op, rocm, **{**args, name: x})
        finally:
            x.free()
        assert actual.keys() == expected.keys()
        for key, value in expected.items():
            assert_close(actual[key], value)


DECODE_ROWS = [(16, 128), (8, 128), (1, 1024), (8, 1024), (5, 128), (37, 100), (3, 3), (9, 1)]
"""q/k-norm heads, the residual row at batch 1 and 8, rows not filling a block's groups, a row of 25
4-element chunks, tiny rows (scalar chunks, one lane a row)."""


@pytest.mark.parametrize("layout", ["block", "group", "group32", "group256", "warps", "warps1", "warps2", "warps4-f"])
@pytest.mark.parametrize("op", ["RmsNorm", "AddRmsNorm"])
def test_row_norm_layouts_at_decode_shapes(rocm: Backend, reference: Backend, op: str, layout: str) -> None:
    """ACL_ROWNORM_CONFIG: every layout gives the reference's result (y, rstd, and AddRmsNorm's x1 + x2), bf16
    and fp32, contiguous and as padded views (scalar chunks), whatever the row count."""
    runner = rocm.runners["norm"]  # type: ignore[attr-defined]
    runner.forced_layout = layout
    try:
        rng = np.random.default_rng(11)
        for dtype in (np.dtype("bfloat16"), np.float32):
            for shape in DECODE_ROWS:
                args = _row_args(op, shape, dtype, rng)
                for view in ("contiguous", "padded"):
                    compare_run(rocm, reference, op, dict(args), view, f"{layout} rows {shape}", prefill=True)
    finally:
        runner.forced_layout = None


WIDE_DECODE_ROWS = [(1, 1024), (3, 2048), (1, 4096), (8, 8192), (2, 1000)]
"""Decode's residual rows of 1-8 rows, 1,024-8,192 wide (a width the lanes do not cover exactly last)."""


def _rms_family_args(op: str, shape: tuple[int, int], dtype: object, rng: np.random.Generator) -> dict:
    x = (rng.standard_normal(shape) * 3).astype(np.float32).astype(dtype)
    w = rng.standard_normal(shape[1]).astype(np.float32).astype(dtype)
    x2 = rng.standard_normal(shape).astype(np.float32).astype(dtype)
    if op == "AddRmsNorm":
        return {"x1": x, "x2": x2, "gamma": w, "epsilon": 1e-6}
    if op == "InplaceAddRmsNorm":
        return {"x1Ref": x, "x2Ref": x2, "gamma": w, "epsilon": 1e-6}
    return {"x": x, "gamma": w, "epsilon": 1e-6}


@pytest.mark.parametrize("layout", ["warps", "warps1", "warps8", "warps-f", "block"])
@pytest.mark.parametrize("op", ["AddRmsNorm", "InplaceAddRmsNorm", "RmsNorm", "GemmaRmsNorm"])
def test_warps_layout_on_wide_decode_rows(rocm: Backend, reference: Backend, op: str, layout: str) -> None:
    """ACL_ROWNORM_CONFIG=warps[N][-f] (a block of warps a row, loads before arithmetic) at decode's residual
    widths gives the reference's y, rstd and x1 + x2 for fp32, fp16 and bf16, contiguous and padded (scalar
    chunks), in place too; warps1 on fp32 8,192-wide rows exceeds a warp's registers and takes block's kernel."""
    runner = rocm.runners["norm"]  # type: ignore[attr-defined]
    runner.forced_layout = layout
    try:
        rng = np.random.default_rng(17)
        for dtype in ROW_DTYPES:
            for shape in WIDE_DECODE_ROWS:
                args = _rms_family_args(op, shape, dtype, rng)
                for view in ("contiguous", "padded"):
                    compare_run(
                        rocm, reference, op, dict(args), view, f"{layout} {np.dtype(dtype)} rows {shape}", prefill=True
                    )
    finally:
        runner.forced_layout = None


def test_row_norm_layout_setting_is_checked(rocm: Backend) -> None:
    """A bad ACL_ROWNORM_CONFIG is refused with 161002, not run with some other layout."""
    runner = rocm.runners["norm"]  # type: ignore[attr-defined]
    for bad in ("warp", "group7", "group4096", "warps0", "warps33", "warps-x"):
        runner.forced_layout = bad
        try:
            with pytest.raises(AclnnError) as err:
                eager.run("RmsNorm", rocm, x=np.ones((2, 8), np.float32), gamma=np.ones(8, np.float32), epsilon=1e-6)
            assert err.value.code == 161002 and "ACL_ROWNORM_CONFIG" in str(err.value)
        finally:
            runner.forced_layout = None

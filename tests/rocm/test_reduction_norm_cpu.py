"""The reduction and norm families above the provider seam, on a CPU.

The generated row kernels are built with g++ against a small shim (``kernel_emulator.py``: one
a fiber per GPU thread, barriers for ``__syncthreads`` and warp shuffles) and run on host memory,
so every sample of every claimed op is compared with the reference, contiguous and as padded /
transposed views, without a GPU. The source structure, the launch shape and the accumulator choices
are checked directly; the sources are compiled with nvcc where it is installed.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.errors import AclnnError
from acl_core.spec.ops import all_specs, get_spec
from acl_rocm.backend import RocmBackend
from acl_rocm.kernels.ctypes_map import SUPPORTED
from acl_rocm.kernels.reduction import RowKernel, RowOperand, acc_dtype, generate, int_acc
from acl_rocm.ops import norm as norm_ops
from acl_rocm.ops import reduction as reduction_ops
from acl_rocm.ops.program import Scratch
from acl_rocm.ops.reduction import row_config
from acl_rocm.providers.base import DeviceProperties
from tests.rocm.against_reference import compare_run, sample_dtypes
from tests.rocm.fake_provider import FakeProvider
from tests.rocm.kernel_emulator import EmulatedProvider, emulated_backend

CLAIMED = sorted(set(reduction_ops.OPS) | set(norm_ops.OPS))
OPS = sorted(n for n, s in all_specs().items() if s.kernel_name in CLAIMED)


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> tuple[RocmBackend, FakeProvider]:
    provider = FakeProvider()
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp_path_factory.mktemp("kc"))})
    backend.runtime.ensure_device(0)
    return backend, provider


LAYOUTS_BY_NEIGHBOUR = frozenset({"Min", "MinDim", "MaxV2", "MeanV2", "ReduceLogSum", "Cumprod", "InplaceCumprod"})
"""Rows of a kernel whose strided layouts the neighbour op proves (Max, MaxDim, Amax, Mean, ReduceSum, Cumsum: the
same source up to its ``op`` option); they run contiguous here to keep the emulator's compile budget."""


@pytest.mark.parametrize("op", OPS)
def test_every_sample_matches_the_reference_when_emulated(emulated: RocmBackend, reference: Backend, op: str) -> None:
    samples = list(get_spec(op).samples(np.random.default_rng(2024)))  # type: ignore[misc]
    assert samples
    for i, sample in enumerate(samples):
        if not sample_dtypes(sample.args) <= SUPPORTED:
            with pytest.raises(AclnnError) as err:
                eager.run(op, emulated, **sample.args)
            assert err.value.code == 161002, sample.note
            continue
        compare_run(emulated, reference, op, dict(sample.args), "contiguous", sample.note)
        if i % 3 == 0 and op not in LAYOUTS_BY_NEIGHBOUR:
            for layout in ("padded", "transposed"):
                compare_run(emulated, reference, op, dict(sample.args), layout, sample.note)


def test_claimed_ops_are_in_the_capabilities(fake: tuple[RocmBackend, FakeProvider]) -> None:
    backend, _ = fake
    ops = set(backend.capabilities().ops)
    assert set(CLAIMED) <= ops and "InplaceAddRmsNorm" in ops


def test_a_transposed_sum_is_one_launch_with_the_views_strides(fake: tuple[RocmBackend, FakeProvider]) -> None:
    backend, provider = fake
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    provider.launches.clear()
    eager.run("ReduceSum", backend, layout="transposed", self=x, dims=[1], keepDims=False, dtype=0)
    launches = [launch for launch in provider.launches if "acl_row_reduce" in launch.name]
    assert len(launches) == 1 and len(provider.launches) == 1  # no gather, no elementwise pass
    launch = launches[0]
    assert launch.block[0] % 32 == 0 and launch.grid[0] <= 8  # 8 rows of 3: a warp each
    meta = np.frombuffer(launch.args[0], np.int32)
    assert meta[0] == 8  # rows: the kept dims 2 × 4


def test_launch_shape() -> None:
    assert row_config(10, 3, 32, 132, 2**31 - 1, False).block == (32, 1, 1)
    assert row_config(10, 1000, 32, 132, 2**31 - 1, False).block == (256, 1, 1)
    assert row_config(10, 70, 64, 132, 2**31 - 1, False).block == (128, 1, 1)
    assert row_config(10**6, 8, 32, 4, 2**31 - 1, False).grid == (32, 1, 1)
    assert row_config(1, 0, 32, 4, 2**31 - 1, False).block == (32, 1, 1)
    scan = row_config(100, 5, 32, 4, 2**31 - 1, True)
    assert scan.block == (128, 1, 1) and scan.grid == (1, 1, 1)


def test_accumulators() -> None:
    assert acc_dtype([D.ACL_FLOAT16, D.ACL_BF16]) == D.ACL_FLOAT
    assert acc_dtype([D.ACL_FLOAT16, D.ACL_FLOAT]) == D.ACL_DOUBLE
    assert int_acc(D.ACL_INT8) == D.ACL_INT64 and int_acc(D.ACL_UINT64) == D.ACL_UINT64
    assert int_acc(D.ACL_BOOL) == D.ACL_INT64 and int_acc(D.ACL_DOUBLE) == D.ACL_DOUBLE


def _kernel(kind: str, **options: object) -> RowKernel:
    operands = (RowOperand("self", D.ACL_FLOAT16), RowOperand("out", D.ACL_FLOAT16, True))
    opts = tuple(sorted((k, v) for k, v in options.items()))
    return RowKernel(kind, operands, 1, 1, "int", D.ACL_FLOAT, opts)  # type: ignore[arg-type]


def test_source_structure() -> None:
    src = generate(_kernel("reduce", op="sum", dtype=int(D.ACL_FLOAT16)))
    assert "struct Meta { int n; int shape[2]; int stride[2][2]; };" in src
    assert "__shfl_down_sync" in src and "__shfl_down(" in src and "ACL_WARP_SIZE / 2" in src
    assert "typedef float acc_t;" in src and "acl_h2f(p_self[o[0]])" in src
    assert "__launch_bounds__(256)" in src and "__restrict__" not in src  # in-place twins alias
    operands = (RowOperand("self", D.ACL_INT32), RowOperand("indices", D.ACL_INT64, True))
    arg = generate(RowKernel("arg", operands, 1, 1, "int", D.ACL_INT64, (("largest", True),)))
    assert "acl_arg_better" in arg and "if (at < 0) return true;" in arg


def test_in_place_add_rms_norm_reads_before_it_writes(fake: tuple[RocmBackend, FakeProvider]) -> None:
    """The block layout (forced: ``auto`` gives rows this short the grouped one, whose in-place runs the emulated
    samples check) reads the whole row into registers before its block reduction, and writes after it."""
    backend, provider = fake
    x = np.ones((2, 8), np.float32)
    provider.launches.clear()
    backend.runners["norm"].forced_layout = "block"
    try:
        eager.run("InplaceAddRmsNorm", backend, x1Ref=x, x2Ref=x, gamma=np.ones(8, np.float32), epsilon=1e-6)
    finally:
        backend.runners["norm"].forced_layout = None
    source = provider.launches[-1].source
    assert "cache_t cx[" in source  # a short row: kept in registers, so the row is read before any write
    after_reads = source.rsplit("acl_block_reduce(", 1)[1]
    assert "p_x[" not in after_reads and "p_x +" not in after_reads and "p_x2" not in after_reads
    assert after_reads.index("p_y") < after_reads.index("p_xout")


def test_long_rows_keep_the_three_pass_path(fake: tuple[RocmBackend, FakeProvider]) -> None:
    backend, provider = fake
    provider.launches.clear()
    eager.run("RmsNorm", backend, x=np.ones((2, 20000), np.float32), gamma=np.ones(20000, np.float32), epsilon=1e-6)
    source = provider.launches[-1].source
    assert "cx[" not in source and "__launch_bounds__(256)" in source


@pytest.mark.parametrize(
    ("dtype", "length", "layout", "vec", "block"),
    [
        (np.float32, 8192, "contiguous", 4, 512),
        (np.float16, 8192, "contiguous", 8, 512),
        (np.float16, 8191, "contiguous", 1, 512),
        (np.float16, 8192, "padded", 1, 512),  # rows 2 * 8192 + 1 apart: no aligned vectors
        (np.float32, 5, "contiguous", 1, 32),
    ],
)
def test_cached_rows_launch_shape_and_vectors(
    fake: tuple[RocmBackend, FakeProvider], dtype: type, length: int, layout: str, vec: int, block: int
) -> None:
    backend, provider = fake
    provider.launches.clear()
    eager.run("Softmax", backend, layout=layout, self=np.ones((3, length), dtype), dim=-1)
    launch = provider.launches[-1]
    assert launch.block == (block, 1, 1) and f"__launch_bounds__({block})" in launch.source
    storage = "float" if dtype == np.float32 else "unsigned short"
    assert (f"AclVec<{storage}, {vec}>" in launch.source) == (vec > 1)
    assert "acl_exp_row(cx[" in launch.source


def test_float64_softmax_keeps_the_float64_exp(fake: tuple[RocmBackend, FakeProvider]) -> None:
    backend, provider = fake
    provider.launches.clear()
    eager.run("Softmax", backend, self=np.ones((3, 64), np.float64), dim=-1)
    source = provider.launches[-1].source
    assert "cx[" in source and "acl_exp(cx[" in source and "acl_exp_row(cx[" not in source


def test_16_bit_rows_normalise_in_float_even_with_float32_statistics() -> None:
    from acl_rocm.kernels.reduction import cache_dtype

    ops = (RowOperand("x", D.ACL_FLOAT16), RowOperand("y", D.ACL_FLOAT16, True), RowOperand("rstd", D.ACL_FLOAT, True))
    kernel = RowKernel("rmsnorm", ops, 1, 1, "int", D.ACL_DOUBLE, (("block", 32), ("chunks", 1), ("vec", 1)))
    assert cache_dtype(kernel) == D.ACL_FLOAT
    src = generate(kernel)
    assert "typedef float cache_t;" in src and "typedef double acc_t;" in src and "q += (acc_t)cx[" in src
    wide = dataclasses.replace(kernel, operands=(RowOperand("x", D.ACL_FLOAT), *ops[1:]))
    assert cache_dtype(wide) == D.ACL_DOUBLE


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_sources_compile_with_nvcc(fake: tuple[RocmBackend, FakeProvider], tmp_path: Path) -> None:
    backend, provider = fake
    provider.launches.clear()
    rng = np.random.default_rng(0)
    for op in ("Softmax", "ReduceSum", "ArgMin", "VarMean", "Cumsum", "AddLayerNorm", "AddRmsNorm", "BatchNorm"):
        sample = next(iter(get_spec(op).samples(rng)))  # type: ignore[misc]
        eager.run(op, backend, **sample.args)
    sources = {launch.name: launch.source for launch in provider.launches}
    assert len(sources) >= 8
    for name, source in sources.items():
        path = tmp_path / f"{name}.cu"
        path.write_text(source)
        cmd = ["nvcc", "-arch=sm_90", "--ptx", *backend.options, "-o", str(tmp_path / f"{name}.ptx"), str(path)]
        result = subprocess.run(cmd, capture_output=True, text=True)
        assert result.returncode == 0, f"{name}:\n{result.stderr[-3000:]}"


class _SmallWave64(EmulatedProvider):
    """An emulated wave64 device with one compute unit: rows outnumber blocks, rows span several warps."""

    def device_properties(self, index: int) -> DeviceProperties:
        return dataclasses.replace(super().device_properties(index), compute_units=1)


LONG_ROWS: list[tuple[str, dict]] = [
    ("Softmax", {"self": (20, 300), "dim": -1}),
    ("LogSoftmax", {"self": (300, 20), "dim": 0}),
    ("ReduceSum", {"self": (20, 300), "dims": [1], "keepDims": True, "dtype": 0}),
    ("Amax", {"self": (20, 300), "dim": [1], "keepDim": False}),
    ("ArgMin", {"self": (20, 300), "dim": 1, "keepdim": False}),
    ("VarMean", {"self": (20, 300), "dim": [1], "correction": 1, "keepdim": False}),
    ("Cumsum", {"self": (300, 20), "dim": 0, "dtype": 0}),
    ("LayerNorm", {"input": (20, 300), "normalizedShape": [300], "eps": 1e-5}),
    ("RmsNorm", {"x": (20, 300), "gamma": (300,), "epsilon": 1e-6}),
    ("GemmaRmsNorm", {"x": (20, 300), "gamma": (300,), "epsilon": 1e-6}),
]


@pytest.mark.parametrize(("op", "shapes"), LONG_ROWS, ids=[op for op, _ in LONG_ROWS])
def test_long_rows_on_a_wave64_device(
    emulated: RocmBackend, reference: Backend, tmp_path: Path, op: str, shapes: dict
) -> None:
    backend = RocmBackend(_SmallWave64(arch="gfx942", warp_size=64), {"ACL_KERNEL_CACHE": str(tmp_path)})
    backend.runtime.ensure_device(0)
    assert "-DACL_WARP_SIZE=64" in backend.options
    rng = np.random.default_rng(7)
    args = {k: rng.integers(-3, 4, v).astype(np.float32) if isinstance(v, tuple) else v for k, v in shapes.items()}
    compare_run(backend, reference, op, args, "contiguous", "long rows, wave64")


class _TwoUnits(EmulatedProvider):
    """An emulated device with two compute units: one long row splits into few, long slices."""

    def device_properties(self, index: int) -> DeviceProperties:
        return dataclasses.replace(super().device_properties(index), compute_units=2)


@pytest.mark.parametrize("plant", ["late_max", "nan", "ties"])
def test_split_argmax_slices_longer_than_the_prefetch(reference: Backend, tmp_path: Path, plant: str) -> None:
    """Slices of 2,500 elements: each thread's first 8 are loaded ahead, the rest walked singly; the first
    index still wins ties and the first NaN still wins, wherever they fall."""
    length = 40_000
    slices = reduction_ops.arg_slices(1, length, 2)
    span = -(-length // slices)
    assert span > reduction_ops.PREFETCH_MAX * reduction_ops.BLOCK_THREADS, "the tail loop must run"
    backend = emulated_backend(tmp_path, _TwoUnits())
    x = np.random.default_rng(3).integers(-50, 50, (1, length)).astype(np.float32)
    tail = span + reduction_ops.PREFETCH_MAX * reduction_ops.BLOCK_THREADS + 5  # in slice 1, past the prefetch
    if plant == "late_max":
        x[0, tail] = 99
    elif plant == "nan":
        x[0, [tail, length - 1]] = np.nan  # the tail loop's NaN is the first
        x[0, 7] = 99
    else:
        x[0, [tail, span + 3, length - 1]] = 99  # the earliest is the prefetched one of slice 1
    args = {"self": x.astype(ml_dtypes.bfloat16), "dim": -1, "keepdim": False}
    expected = eager.run("ArgMax", reference, **args)["out"]
    np.testing.assert_array_equal(eager.run("ArgMax", backend, **args)["out"], expected)


@pytest.mark.parametrize(
    ("layout", "shape", "grid", "block", "group"),
    [
        ("block", (16, 128), 16, 32, None),  # a block per row, 16 threads busy
        ("group", (16, 128), 2, 128, 16),  # 16 lanes a row, 8 rows a 128-thread block
        ("group32", (16, 128), 8, 32, 16),
        ("group", (1, 1024), 1, 128, 32),  # one warp a row: 4 chunks of 8 a lane
        ("group", (8, 1024), 2, 128, 32),
        ("block", (1, 1024), 1, 64, None),
        ("auto", (16, 128), 8, 32, 16),  # q/k-norm rows: group32 (measured 1.65 us vs block 1.84)
        ("auto", (1, 1024), 1, 128, None),  # AddRmsNorm rows: warps4 (1.69 us vs block 2.19, group 3.14)
        (None, (16, 128), 8, 32, 16),  # unset: auto
        (None, (8, 1024), 8, 128, None),
    ],
)
def test_row_norm_layout_launch_shapes(
    fake: tuple[RocmBackend, FakeProvider],
    layout: str | None,
    shape: tuple[int, int],
    grid: int,
    block: int,
    group: int | None,
) -> None:
    """ACL_ROWNORM_CONFIG picks the launch: a block per row, or G lanes a row with several rows a block (bf16);
    ``auto`` (also when unset) by row width."""
    backend, provider = fake
    assert norm_ops.ROWNORM_ENV not in backend.environ
    runner = backend.runners["norm"]
    runner.forced_layout = layout
    try:
        x = np.ones(shape, ml_dtypes.bfloat16)
        provider.launches.clear()
        eager.run("RmsNorm", backend, x=x, gamma=np.ones(shape[1], ml_dtypes.bfloat16), epsilon=1e-6)
        (launched,) = [k for k in provider.launches if "rmsnorm" in k.name]
    finally:
        runner.forced_layout = None
    assert (launched.grid[0], launched.block[0]) == (grid, block)
    assert (f"group={group}" in launched.source) == (group is not None)
    if group:
        assert "__syncthreads" not in launched.source.split(launched.name)[1]  # shuffles alone


RMS_FAMILY = ("AddRmsNorm", "GemmaRmsNorm", "InplaceAddRmsNorm", "RmsNorm")


@pytest.mark.parametrize("layout", ["warps", "warps1", "warps4-f"])
@pytest.mark.parametrize("op", RMS_FAMILY)
def test_every_rms_sample_matches_the_reference_on_the_warps_layout(
    emulated: RocmBackend, reference: Backend, op: str, layout: str
) -> None:
    """ACL_ROWNORM_CONFIG=warps, warps1, warps4-f forced over the RmsNorm family's samples (every dtype, empty and
    long rows, padded and transposed views): the reference's values, whichever kernel a row takes."""
    runner = emulated.runners["norm"]
    runner.forced_layout = layout
    try:
        samples = list(get_spec(op).samples(np.random.default_rng(2024)))  # type: ignore[misc]
        assert samples
        for i, sample in enumerate(samples):
            if not sample_dtypes(sample.args) <= SUPPORTED:
                continue
            compare_run(emulated, reference, op, dict(sample.args), "contiguous", f"{layout} {sample.note}")
            if i % 3 == 0:
                for view in ("padded", "transposed"):
                    compare_run(emulated, reference, op, dict(sample.args), view, f"{layout} {sample.note}")
    finally:
        runner.forced_layout = None


@pytest.mark.parametrize(
    ("layout", "shape", "dtype", "block", "barriers"),
    [
        ("warps", (1, 1024), "bf16", 32, 0),  # one warp, 4 16-byte chunks a lane: shuffles alone
        ("warps", (8, 8192), "bf16", 256, 2),  # 8 warps: one exchange (+ the next-row barrier, not taken at 8)
        ("warps", (1, 1024), "fp32", 64, 2),  # fp32: 4-element chunks, 2 warps
        ("warps1", (2, 1024), "bf16", 32, 0),
        ("warps4", (1, 1024), "bf16", 128, 2),
        ("warps4-f", (1, 4096), "fp16", 128, 2),
    ],
)
def test_warps_layout_launch_and_source(
    fake: tuple[RocmBackend, FakeProvider], layout: str, shape: tuple[int, int], dtype: str, block: int, barriers: int
) -> None:
    """The warps layout: a block of W warps per row (grid = rows), every operand's chunks loaded before the first
    arithmetic line, 16-byte stores of y and xout, ``__syncthreads`` only for W > 1; ``-f`` the fast rsqrt."""
    backend, provider = fake
    runner = backend.runners["norm"]
    runner.forced_layout = layout
    np_dtype = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16, "fp32": np.float32}[dtype]
    try:
        x = np.ones(shape, np_dtype)
        provider.launches.clear()
        eager.run("AddRmsNorm", backend, x1=x, x2=x, gamma=np.ones(shape[1], np_dtype), epsilon=1e-6)
        (launched,) = [k for k in provider.launches if "rmsnorm" in k.name]
    finally:
        runner.forced_layout = None
    assert (launched.grid[0], launched.block[0]) == (shape[0], block)
    body = launched.source.split(launched.name)[1]
    assert f"warps={block // 32}" in launched.source and body.count("__syncthreads") == barriers
    first_math = body.index("qk[k] +=")
    assert all(body.index(f"r_{n}[k] = ") < first_math for n in ("x", "x2", "weight"))
    assert "reinterpret_cast<AclVec" in body.split("rstd_c")[-1]  # vector stores of y and xout
    assert ("acl_rsqrt_fast(" in body) == layout.endswith("-f")


def test_warps_layout_falls_back_to_block_where_a_row_does_not_fit(
    fake: tuple[RocmBackend, FakeProvider], caplog: pytest.LogCaptureFixture
) -> None:
    """warps1 on an fp32 row of 8,192 (64 chunks a lane) takes block's kernel, and says so on the debug logger;
    LayerNorm keeps block's kernel under any ACL_ROWNORM_CONFIG."""
    backend, provider = fake
    runner = backend.runners["norm"]
    runner.forced_layout = "warps1"
    try:
        provider.launches.clear()
        with caplog.at_level("DEBUG", logger="acl_rocm.reduction"):
            x = np.ones((1, 8192), np.float32)
            eager.run("RmsNorm", backend, x=x, gamma=np.ones(8192, np.float32), epsilon=1e-6)
        (launched,) = [k for k in provider.launches if "rmsnorm" in k.name]
        assert "warps=" not in launched.source and "acl_block_reduce(q, add)" in launched.source
        assert any("do not fit the warps" in r.getMessage() for r in caplog.records)
    finally:
        runner.forced_layout = None


def test_decode_bench_times_every_row_norm_layout(fake: tuple[RocmBackend, FakeProvider]) -> None:
    """``acl-core bench --suite decode`` forces each ACL_ROWNORM_CONFIG value of its list as a row: every one is a
    valid setting, and the warps layouts (with and without -f) are among them."""
    from acl_tools.bench import decode

    backend, _ = fake
    runner = backend.runners["norm"]
    runner_key, attr, values = decode.VARIANTS[norm_ops.ROWNORM_ENV]
    assert runner_key == "norm" and attr == "forced_layout"
    assert {"block", "group32", "warps", "warps-f"} <= set(values)
    try:
        for value in values:
            runner.forced_layout = value
            _grouped, warps = runner.row_layout(1024)
            assert (warps is not None) == value.startswith("warps") and runner.fast_rsqrt() == value.endswith("-f")
    finally:
        runner.forced_layout = None


def test_long_arg_rows_default_to_persist_in_a_scratch_region_of_their_own(
    fake: tuple[RocmBackend, FakeProvider], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unset ACL_ARGMAX_CONFIG: persist (measured 5.63 us vs split 7.65); its program has no temporary and nothing
    but the launch, its scratch the stream's ``arg`` region (its candidates would land on the decode attention's
    counters in the shared region); ``split`` keeps a zeroed temporary; a bad value is 161002."""
    from acl_core import aclnn

    backend, _provider = fake
    runner = backend.runners["reduction"]
    assert reduction_ops.ARGMAX_ENV not in backend.environ and runner.argmax_mode() == "persist"
    rows, length = 2, 20_000
    parts = rows * reduction_ops.arg_slices(rows, length, backend.properties.compute_units)
    assert parts > rows
    programs: list = []
    real = reduction_ops.run_program
    monkeypatch.setattr(reduction_ops, "run_program", lambda b, p, s: (programs.append(p), real(b, p, s))[1])
    x = eager.to_device(np.zeros((rows, length), np.float32), backend)
    out = eager.empty((rows,), D.ACL_INT64, backend)
    spec = get_spec("ArgMax")
    try:
        for mode in (None, "split"):
            runner.forced_arg = mode
            try:
                _, executor = aclnn.get_workspace_size(spec, (x.tensor(), -1, False, out.tensor()), None, backend)
                aclnn.execute(spec, None, 0, executor, None)
            finally:
                runner.forced_arg = None
    finally:
        x.free()
        out.free()
    persist, split = programs
    assert len(persist.steps) == 1 and not persist.temps and not persist.zeroed
    counters = -(-4 * backend.properties.compute_units // 256) * 256  # every call's counters, then candidates
    assert persist.scratch == counters + parts * 16
    assert [v.offset for v in persist.steps[0].values if isinstance(v, Scratch)] == [counters, counters + parts * 8, 0]
    assert persist.scratch_region == reduction_ops.ARG_SCRATCH != ""
    assert len(split.steps) == 1 and split.temps and split.zeroed and not split.scratch
    runner.forced_arg = "fastest"
    try:
        with pytest.raises(AclnnError):
            runner.argmax_mode()
    finally:
        runner.forced_arg = None

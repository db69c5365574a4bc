"""StridedSlice, StridedSliceAssignV2, the RepeatInterleave family and EmbeddingDenseBackward on rocm, on the CPU.

Every spec sample runs through the real op code with the generated kernels built by g++ (``kernel_emulator.py``)
and is compared with the reference under the op's accuracy class (exact for the copies), contiguous, padded and
transposed, with sentinel-filled outputs; every error sample is refused with the reference's code (device-only
facts, repeat counts and index values, through the flag at synchronisation) and a bad device value leaves the
output unwritten; calls replay bit for bit under stream capture. The view arithmetic of integer repeats is
checked against NumPy on the host.
"""

from __future__ import annotations

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.errors import AclnnError
from acl_core.spec.ops import get_spec
from acl_rocm.backend import RocmBackend
from acl_rocm.ops.index_shape import OPS, repeated_views
from acl_rocm.ops.movement import View
from tests.rocm.against_reference import assert_errors_match_reference, assert_matches_reference
from tests.rocm.capture_harness import OpCall, compare_replay
from tests.rocm.fake_provider import FakeProvider
from tests.rocm.switched import switched


def test_rocm_claims_every_op(tmp_path_factory: pytest.TempPathFactory) -> None:
    backend = RocmBackend(FakeProvider(), {"ACL_KERNEL_CACHE": str(tmp_path_factory.mktemp("kc"))})
    backend.runtime.ensure_device(0)
    caps = backend.capabilities()
    assert set(OPS) <= set(caps.ops)
    assert {d.short for d in caps.op_dtypes["EmbeddingDenseBackward"]} == {"bf16", "float16", "float32", "float64"} | {
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "bool",
    }


@pytest.mark.parametrize("op", OPS)
def test_every_sample_matches_the_reference(emulated: Backend, reference: Backend, op: str) -> None:
    spec = get_spec(op)
    assert spec.samples is not None
    for i, sample in enumerate(spec.samples(np.random.default_rng(2026))):
        layouts = ("contiguous", "padded", "transposed") if i % 3 == 0 else ("contiguous",)
        for layout in layouts:
            assert_matches_reference(emulated, reference, op, dict(sample.args), layout, sample.note)


@pytest.mark.parametrize("op", OPS)
def test_errors_match_the_reference(emulated: Backend, reference: Backend, op: str) -> None:
    assert_errors_match_reference(emulated, reference, op)


@pytest.mark.parametrize(
    "op,args",
    [
        ("RepeatInterleaveWithDim", {"self": np.ones((2, 3), np.float32), "repeats": np.array([1, 2, 0]), "dim": 1}),
        ("RepeatInterleaveWithDim", {"self": np.ones((2, 3), np.float32), "repeats": np.array([3, -1, 2]), "dim": 1}),
        (
            "EmbeddingDenseBackward",
            {"grad": np.ones((3, 4), np.float32), "indices": np.array([0, 9, 1]), "numWeights": 2},
        ),
    ],
)
def test_a_bad_device_value_fails_and_leaves_out_unwritten(emulated: Backend, op: str, args: dict) -> None:
    if op == "EmbeddingDenseBackward":
        args = {**args, "paddingIdx": 0, "scaleGradByFreq": False}
        out = eager.empty((2, 4), D.ACL_FLOAT, emulated)
    else:
        args = {**args, "outputSize": 4}
        out = eager.empty((2, 4), D.ACL_FLOAT, emulated)
    emulated.runtime.memset(out.address, out.nbytes, eager.SENTINEL, out.nbytes)
    before = out.storage_bytes().copy()
    with pytest.raises(AclnnError) as err:
        eager.run(op, emulated, **args, out=out)
    assert err.value.code == 161002
    np.testing.assert_array_equal(out.storage_bytes(), before)


def test_calls_replay_under_capture(emulated: RocmBackend) -> None:
    """Scan, sort and flag programs and the view copies, captured once and replayed with new inputs."""
    calls = []
    for op in ("StridedSlice", "RepeatInterleaveWithDim", "RepeatInterleaveGrad", "EmbeddingDenseBackward"):
        sample = next(iter(get_spec(op).samples(np.random.default_rng(3))))
        calls.append(OpCall(emulated, op, dict(sample.args)))
    stream = emulated.runtime.create_stream()
    try:
        graph = compare_replay(calls, stream)
        emulated.driver.graph_destroy(graph)
    finally:
        for c in calls:
            c.free()
        emulated.runtime.destroy_stream(stream)


def test_embedding_backward_sums_each_row_in_position_order(emulated: Backend, reference: Backend) -> None:
    """Many rows on one index in float32: the emulated kernel's sum must equal the reference's bit for bit
    after one rounding when the terms are exact halves (no rounding inside the sum), and the order is fixed."""
    rng = np.random.default_rng(9)
    idx = rng.integers(0, 3, (700,))
    grad = (rng.integers(-64, 64, (700, 8)) / 2).astype(np.float32)  # 16-byte rows: the vector path
    args = {"grad": grad, "indices": idx, "numWeights": 5, "paddingIdx": 2, "scaleGradByFreq": False}
    got = eager.run("EmbeddingDenseBackward", emulated, **args)["out"]
    want = eager.run("EmbeddingDenseBackward", reference, **args)["out"]
    np.testing.assert_array_equal(got, want)
    assert not got[2].any() and not got[3:].any()


@pytest.mark.parametrize("dim", [-1, 0, 1, 2])
def test_integer_repeat_views_match_numpy(dim: int) -> None:
    x = np.arange(24).reshape(2, 3, 4)
    src = View(0, 8, x.shape, tuple(s // 8 for s in x.strides))
    n = x.size if dim < 0 else x.shape[dim]
    out_shape = (n * 3,) if dim < 0 else tuple(n * 3 if d == dim else m for d, m in enumerate(x.shape))
    out = np.zeros(out_shape, np.int64)
    dst = View(0, 8, out.shape, tuple(s // 8 for s in out.strides))
    s, d = repeated_views(src, dst, dim, 3)
    flat_src, flat_dst = x.reshape(-1), out.reshape(-1)
    for coords in np.ndindex(*s.shape):
        flat_dst[np.dot(coords, d.strides)] = flat_src[np.dot(coords, s.strides)]
    np.testing.assert_array_equal(out, np.repeat(x.reshape(-1) if dim < 0 else x, 3, axis=0 if dim < 0 else dim))


REPEAT_ROWS = [
    ((6, 64), 0, "bfloat16"),  # 16-byte words, 8 a slice
    ((5, 300), 0, "float32"),  # words contiguous; padded / transposed / offset views item by item
    ((3, 7, 5), 1, "int32"),  # outer dims, a 5-item slice (2 lanes)
    ((4, 9), 1, "float16"),  # one item a slice
    ((3, 5), None, "int64"),  # self flattened
    ((4, 3, 130), 1, "bfloat16"),  # a slice longer than one segment of 32 lanes x 4 items
    ((4500, 2), 0, "float32"),  # counts across the tiled scan's 4,096-count tiles (the chunked scan's blocks)
    ((4, 3, 5, 6), 2, "int16"),  # transposed: leading dims that do not coalesce (slices found by unravelling)
]


ROW_VARIANTS = ("rows", "blocks", "gather", "gather8", "gather,pdl", "gather8,grid")
"""The ``ACL_REPEAT_ROWS`` settings that copy slices (RepeatRows): the one-block tiled scan, the chunked scan, and the
chunked scan with its row index and the output-major copy (programmatic launches too)."""


@pytest.mark.parametrize("variant", ROW_VARIANTS)
@pytest.mark.parametrize(("shape", "dim", "dtype"), REPEAT_ROWS)
def test_repeat_rows_match_the_reference(
    emulated: Backend,
    reference: Backend,
    caplog: pytest.LogCaptureFixture,
    shape: tuple,
    dim: int | None,
    dtype: str,
    variant: str,
) -> None:
    """``ACL_REPEAT_ROWS=rows`` (the tiled scan and a source slice copied once into its group's out slices),
    ``blocks`` (the chunked scan) and ``gather`` (its row index, each out slice loading its source)."""
    import logging

    import ml_dtypes  # noqa: F401 - registers the bfloat16 NumPy dtype

    rng = np.random.default_rng(len(shape) + shape[-1])
    x = rng.standard_normal(shape).astype(np.float32).astype(dtype)
    reps = rng.integers(0, 4, x.size if dim is None else shape[dim]).astype(np.int64)
    op = "RepeatInterleave" if dim is None else "RepeatInterleaveWithDim"
    args = {"self": x, "repeats": reps, "outputSize": int(reps.sum()), **({} if dim is None else {"dim": dim})}
    layouts = ("contiguous", "padded", "transposed", "offset") if x.size < 2000 else ("contiguous",)
    with switched(emulated, "ACL_REPEAT_ROWS", variant), caplog.at_level(logging.DEBUG, "acl_rocm.index_shape"):
        for layout in layouts:
            assert_matches_reference(emulated, reference, op, dict(args), layout, f"{shape} dim {dim}")
    tail = ", indexed" if variant.startswith("gather") else ""
    assert "lanes a slice, direct" + tail in caplog.text  # the contiguous layout's slices start at o * s0 + g * s1
    if len(shape) == 4:
        assert f"lanes a slice{tail}\n" in caplog.text  # the transposed one's leading dims are unravelled


@pytest.mark.parametrize("variant", ["blocks", "gather"])
def test_chunked_scan_crosses_tiles_and_chunks(
    emulated: Backend,
    reference: Backend,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    variant: str,
) -> None:
    """Counts over several chunks and, with one chunk allowed, several tiles of one chunk; zero counts and one
    large count among them (the row index filled across chunk edges)."""
    import logging

    import acl_rocm.ops.index_shape as module

    rng = np.random.default_rng(5)
    reps = rng.integers(0, 3, 9000).astype(np.int64)
    reps[4095], reps[4096], reps[8191:8200] = 0, 700, 0
    x = rng.integers(-100, 100, (9000, 1)).astype(np.int32)
    args = {"self": x, "repeats": reps, "dim": 0, "outputSize": int(reps.sum())}
    for most in (module.MAX_CHUNKS, 1):  # 3 chunks of one tile; 1 chunk of 3 tiles
        monkeypatch.setattr(module, "MAX_CHUNKS", most)
        with switched(emulated, "ACL_REPEAT_ROWS", variant), caplog.at_level(logging.DEBUG, "acl_rocm.index_shape"):
            assert_matches_reference(
                emulated, reference, "RepeatInterleaveWithDim", dict(args), "contiguous", str(most)
            )
        chunks = "3 chunks of 4096" if most > 1 else "1 chunks of 12288"
        assert f"9000 counts scanned in {chunks}" in caplog.text


@pytest.mark.parametrize("variant", ROW_VARIANTS)
@pytest.mark.parametrize(
    "op", ["RepeatInterleave", "RepeatInterleaveWithDim", "RepeatInterleaveTensor", "RepeatInterleaveGrad"]
)
def test_repeat_rows_samples_and_errors_match_the_reference(
    emulated: Backend, reference: Backend, op: str, variant: str
) -> None:
    with switched(emulated, "ACL_REPEAT_ROWS", variant):
        for sample in get_spec(op).samples(np.random.default_rng(7)):  # type: ignore[misc]
            for layout in ("contiguous", "padded", "transposed"):
                assert_matches_reference(emulated, reference, op, dict(sample.args), layout, sample.note)
        assert_errors_match_reference(emulated, reference, op)


@pytest.mark.parametrize("suffix", ["", ",pdl"])
def test_chunked_launches_are_programmatic_only_with_pdl(emulated: Backend, suffix: str) -> None:
    """``gather,pdl``: the chunk scan and the copy launched programmatically (each waits first; the totals, after the
    flag's memset, plainly); plain ``gather``: none."""
    provider = emulated.provider  # type: ignore[attr-defined]
    provider.programmatic_launches.clear()
    args = {"self": np.ones((40, 8), np.float32), "repeats": np.arange(40) % 3, "dim": 0, "outputSize": 39}
    with switched(emulated, "ACL_REPEAT_ROWS", "gather" + suffix):
        eager.run("RepeatInterleaveWithDim", emulated, **args)
    names = provider.programmatic_launches
    assert [n.split("_")[3] for n in names] == (["chunks", "rows"] if suffix else [])


@pytest.mark.parametrize("variant", ROW_VARIANTS)
def test_repeat_rows_bad_counts_leave_out_unwritten(emulated: Backend, variant: str) -> None:
    for reps in (np.array([1, 2, 0]), np.array([3, -1, 2])):
        args = {"self": np.ones((2, 3), np.float32), "repeats": reps, "dim": 1, "outputSize": 4}
        out = eager.empty((2, 4), D.ACL_FLOAT, emulated)
        emulated.runtime.memset(out.address, out.nbytes, eager.SENTINEL, out.nbytes)
        before = out.storage_bytes().copy()
        with switched(emulated, "ACL_REPEAT_ROWS", variant), pytest.raises(AclnnError) as err:
            eager.run("RepeatInterleaveWithDim", emulated, **args, out=out)
        assert err.value.code == 161002
        np.testing.assert_array_equal(out.storage_bytes(), before)

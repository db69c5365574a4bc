"""Decode-shape kernels on the GPU, compared with the NumPy reference (GPU tier; issue 15 item 7).

ArgMax / ArgMin / MaxDim over a few long rows take the split path (one launch: a block per slice of a
row, and the row's last block to finish combines the slices' candidates): the first index wins ties,
a NaN beats every number, and the result must not depend on where the slice boundaries fall. ``SMALL``
crosses those boundaries at sizes the CPU kernel emulator runs in seconds (``ACL_ROCM_EMULATE=1``);
``REAL`` is decode's own shape (Qwen3's 151,936-entry vocabulary, batch 1 and 8) for the GPU.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from acl_core import aclnn, eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.spec.ops import get_spec
from acl_rocm.ops import reduction as reduction_ops

pytestmark = pytest.mark.gpu

EMULATED = os.environ.get("ACL_ROCM_EMULATE") == "1"
VOCAB = 151_936

SMALL = [(1, 8192), (1, 8193), (1, 12_345), (3, 9000), (8, 9217)]
"""(rows, length): the shortest split row, one element past a slice, a ragged last slice, several rows,
eight rows one past nine slices."""
REAL = [(1, VOCAB), (8, VOCAB)]


def _slices(rocm: Backend, rows: int, length: int) -> int:
    return reduction_ops.arg_slices(rows, length, rocm.properties.compute_units)  # type: ignore[attr-defined]


def _row(rng: np.random.Generator, shape: tuple[int, int], dtype: type, plant: str) -> np.ndarray:
    """Values with many ties (small integers) and, per ``plant``, the extreme placed where slices meet."""
    x = rng.integers(-50, 50, shape).astype(np.float32)
    length = shape[1]
    if plant == "ties":  # the same maximum at both ends of a slice boundary and at the row's end
        span = -(-length // max(2, length // reduction_ops.SLICE_ELEMENTS))
        for at in (span - 1, span, length - 1):
            x[:, min(at, length - 1)] = 99
    elif plant == "nan":  # NaN beats the maximum; the first NaN wins
        x[:, length // 2] = 99
        x[:, length - 3] = np.nan
        x[:, length - 1] = np.nan
    return x.astype(dtype)


def _check(rocm: Backend, reference: Backend, op: str, x: np.ndarray) -> None:
    args = {"self": x, "dim": -1, "keepdim": False}
    expected = eager.run(op, reference, **args)
    actual = eager.run(op, rocm, **args)
    assert actual.keys() == expected.keys()
    for name, value in expected.items():
        np.testing.assert_array_equal(actual[name], value, err_msg=f"{op} {name} rows x length {x.shape}")


def _sizes() -> list[tuple[int, int]]:
    return SMALL if EMULATED else SMALL + REAL


@pytest.fixture(params=reduction_ops.ARGMAX_CONFIGS)
def arg_path(rocm: Backend, request: pytest.FixtureRequest) -> Iterator[str]:
    """Each path of few long arg rows (``ACL_ARGMAX_CONFIG``), forced for the test's calls."""
    runner = rocm.runners["reduction"]  # type: ignore[attr-defined]
    runner.forced_arg = request.param
    try:
        yield request.param
    finally:
        runner.forced_arg = None


@pytest.mark.parametrize("shape", _sizes(), ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("plant", ["ties", "nan", "random"])
def test_split_argmax_matches_reference(
    rocm: Backend, reference: Backend, shape: tuple[int, int], plant: str, arg_path: str
) -> None:
    assert _slices(rocm, *shape) > 1, "these shapes are meant to take the split path"
    rng = np.random.default_rng(7)
    for dtype in (ml_dtypes.bfloat16, np.float16, np.float32):
        _check(rocm, reference, "ArgMax", _row(rng, shape, dtype, plant))


@pytest.mark.parametrize("op", ["ArgMin", "MaxDim"])
def test_split_argmin_and_maxdim(rocm: Backend, reference: Backend, op: str, arg_path: str) -> None:
    rng = np.random.default_rng(3)
    for plant in ("ties", "nan"):
        x = _row(rng, (2, 10_000), np.float32, plant)
        _check(rocm, reference, op, -x if op == "ArgMin" else x)


def test_split_argmax_integers(rocm: Backend, reference: Backend, arg_path: str) -> None:
    x = np.random.default_rng(5).integers(-(2**40), 2**40, (1, 9001)).astype(np.int64)
    x[0, [100, 4000, 9000]] = 2**41  # ties at three slices
    _check(rocm, reference, "ArgMax", x)


@pytest.mark.parametrize("offset", [1, 3])
def test_arg_paths_on_misaligned_and_strided_rows(
    rocm: Backend, reference: Backend, arg_path: str, offset: int
) -> None:
    """A row starting off a 16-byte boundary and a column-strided row: narrower or scalar loads, same result."""
    from tests.rocm.offset_views import placed

    rng = np.random.default_rng(offset)
    x = _row(rng, (1, 9000), ml_dtypes.bfloat16, "ties")
    expected = eager.run("ArgMax", reference, self=x, dim=-1, keepdim=False)
    placed_x = placed(rocm, x, offset)
    try:
        actual = eager.run("ArgMax", rocm, self=placed_x, dim=-1, keepdim=False)
    finally:
        placed_x.free()
    np.testing.assert_array_equal(actual["out"], expected["out"])
    t = _row(rng, (9000, 2), np.float32, "random")
    t[[10, 8000], 0] = 500.0  # the first of two maxima along dim 0
    expected = eager.run("ArgMax", reference, self=t, dim=0, keepdim=False)
    actual = eager.run("ArgMax", rocm, self=t, dim=0, keepdim=False)
    np.testing.assert_array_equal(actual["out"], expected["out"])


def _watch(provider: Any, monkeypatch: pytest.MonkeyPatch, names: Iterable[str], log: list[str]) -> None:
    """Log each named provider call (the outermost only: a method calling another logs once), and each call of a
    bound launcher (``provider.launcher``'s callable, which the NVIDIA provider enqueues without :meth:`launch`)
    as ``launch``."""
    depth = [0]

    def wrap(name: str, real: Any) -> Any:
        def logged(*args: object, **kwargs: object) -> object:
            if not depth[0]:
                log.append(name)
            depth[0] += 1
            try:
                return real(*args, **kwargs)
            finally:
                depth[0] -= 1

        return logged

    for name in names:
        real = getattr(provider, name)
        if name == "launcher":
            monkeypatch.setattr(provider, name, lambda *a, _real=real, **k: wrap("launch", _real(*a, **k)))
        else:
            monkeypatch.setattr(provider, name, wrap(name, real))


def test_persist_and_block_paths_enqueue_one_launch_alone(rocm: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    """ACL_ARGMAX_CONFIG=persist / block: after the first call (which plans), a call is one launch, with no
    allocation, memset or free on the stream (issue 15: no per-call scratch)."""
    provider = rocm.provider  # type: ignore[attr-defined]
    runner = rocm.runners["reduction"]  # type: ignore[attr-defined]
    watched = ("launcher", "launch", "malloc_async", "memset", "free_async", "malloc", "free")
    for mode in ("persist", "block"):
        runner.forced_arg = mode
        try:
            values = np.arange(20_000, dtype=np.float32)
            values[[777, 15_000]] = 20_000
            x = eager.to_device(values[None, :], rocm)
            try:
                out = eager.empty((1,), D.ACL_INT64, rocm)
                log: list[str] = []
                _watch(provider, monkeypatch, watched, log)  # before planning: a plan binds its launchers
                spec = get_spec("ArgMax")
                size, executor = aclnn.get_workspace_size(spec, (x.tensor(), -1, False, out.tensor()), None, rocm)
                assert size == 0
                executor.repeatable = True
                aclnn.execute(spec, None, 0, executor, None)  # plans (persist: its scratch, zeroed once)
                rocm.runtime.synchronize_device()  # type: ignore[attr-defined]
                assert "launch" in log, f"{mode}: the planning call launched nothing the watch saw: {log}"
                log.clear()
                for _ in range(3):
                    aclnn.execute(spec, None, 0, executor, None)
                monkeypatch.undo()
                rocm.runtime.synchronize_device()  # type: ignore[attr-defined]
                assert log == ["launch"] * 3, f"{mode}: {log}"
                assert int(out.numpy()[0]) == 777, mode
                out.free()
            finally:
                x.free()
        finally:
            runner.forced_arg = None


def test_split_path_is_one_launch_and_no_host_work(rocm: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    """A split ArgMax is one launch after a stream-ordered allocation and an async memset of its block
    counters: no copy, no synchronisation (so nothing stops stream capture); the temporary is freed on
    the stream."""
    provider = rocm.provider  # type: ignore[attr-defined]
    log: list[str] = []
    _watch(
        provider,
        monkeypatch,
        [n for n in dir(provider) if not n.startswith("_") and callable(getattr(provider, n))],
        log,
    )
    values = np.arange(20_000, dtype=np.float32)
    values[[777, 15_000]] = 20_000  # the first of two maxima, in different slices
    runner = rocm.runners["reduction"]  # type: ignore[attr-defined]
    runner.forced_arg = "split"  # whatever ACL_ARGMAX_CONFIG says
    try:
        got = eager.run("ArgMax", rocm, self=values[None, :], dim=-1, keepdim=False)
    finally:
        runner.forced_arg = None
    monkeypatch.undo()
    assert int(got["out"][0]) == 777
    launches = [i for i, name in enumerate(log) if name == "launch"]
    assert len(launches) == 1, log
    first = log.index("malloc_async")
    assert "memset" in log[first : launches[0]], log
    between = set(log[first : launches[-1] + 1]) - {"launch", "malloc_async", "get_device", "memset"}
    assert not between, f"host work inside the op: {sorted(between)}"
    assert "free_async" in log[launches[-1] :]


def test_split_argmax_captures_and_replays_bit_for_bit(rocm: Backend, arg_path: str) -> None:
    """Each long-row arg path inside a captured graph (split: a counter memset, one launch, a stream-ordered
    temporary; persist: the launch alone, its counters reset by the kernel for the next replay; block: one
    launch), replayed with its logits changed in place, equals its eager runs; batch 1 and several rows."""
    from tests.rocm.capture_harness import OpCall, compare_replay

    if not rocm.capabilities().stream_capture:
        pytest.fail(f"rocm does not capture here: {rocm.capabilities().notes.get('stream_capture')}")
    rng = np.random.default_rng(9)
    calls = [
        OpCall(
            rocm, "ArgMax", {"self": _row(rng, (1, 12_345), ml_dtypes.bfloat16, "ties"), "dim": -1, "keepdim": False}
        ),
        OpCall(rocm, "MaxDim", {"self": _row(rng, (3, 9000), np.float32, "nan"), "dim": 1, "keepdim": True}),
    ]
    stream = rocm.runtime.create_stream()  # type: ignore[attr-defined]
    try:
        rocm.driver.graph_destroy(compare_replay(calls, stream))  # type: ignore[attr-defined]
    finally:
        for c in calls:
            c.free()
        rocm.runtime.destroy_stream(stream)  # type: ignore[attr-defined]


@pytest.mark.parametrize("rope", ["scalar", "vec"])
def test_rope_paths_at_decode_shapes(rocm: Backend, reference: Backend, rope: str) -> None:
    """ACL_ROPE_CONFIG: q [B,1,16,128] and k [B,1,8,128] rotated in place (batch 1 and 8, bf16 and fp16) and
    RotaryPositionEmbedding's half mode on padded views (vec narrows or falls back) match the reference."""
    from tests.conftest import assert_close

    runner = rocm.runners["attention"]  # type: ignore[attr-defined]
    runner.forced_rope = rope
    rng = np.random.default_rng(4)
    try:
        for b, dtype in ((1, ml_dtypes.bfloat16), (8, ml_dtypes.bfloat16), (2, np.float16)):
            q, k = (rng.standard_normal((b, 1, n, 128)).astype(dtype) for n in (16, 8))
            cos, sin = (rng.standard_normal((b, 1, 1, 128)).astype(dtype) for _ in range(2))
            args = {"queryRef": q, "keyRef": k, "cos": cos, "sin": sin, "layout": 1}
            got = eager.run("ApplyRotaryPosEmb", rocm, op_args=args)
            want = eager.run("ApplyRotaryPosEmb", reference, op_args=args)
            for name in ("queryRef", "keyRef"):
                assert_close(got[name], want[name])
        x = rng.standard_normal((3, 5, 2, 24)).astype(ml_dtypes.bfloat16)
        cos, sin = (rng.standard_normal((1, 5, 1, 24)).astype(ml_dtypes.bfloat16) for _ in range(2))
        args = {"x": x, "cos": cos, "sin": sin, "mode": 0}
        want = eager.run("RotaryPositionEmbedding", reference, **args)
        for layout in ("contiguous", "padded", "transposed"):
            got = eager.run("RotaryPositionEmbedding", rocm, layout=layout, **args)
            assert_close(got["out"], want["out"])
    finally:
        runner.forced_rope = None


def test_rope_vec_width_follows_the_views(rocm: Backend) -> None:
    """ACL_ROPE_CONFIG=vec rotates 8 bf16 pairs a thread at decode's shapes, narrows for a misaligned start, and
    keeps a pair a thread for modes other than half and under ``scalar``."""
    from acl_rocm.ops.attention import rope_meta
    from tests.rocm.offset_views import placed

    runner = rocm.runners["attention"]  # type: ignore[attr-defined]
    rng = np.random.default_rng(2)
    arrays = [
        eager.to_device(rng.standard_normal(shape).astype(ml_dtypes.bfloat16), rocm)
        for shape in ((1, 1, 16, 128), (1, 1, 1, 128), (1, 1, 1, 128))
    ]
    shifted = placed(rocm, rng.standard_normal((1, 1, 16, 128)).astype(ml_dtypes.bfloat16), 2)
    try:
        q, cos, sin = (a.tensor() for a in arrays)
        part = [(rope_meta(q, cos, sin, q, 0), (q, cos, sin, q))]
        for forced, mode, want in (("vec", 0, 8), ("vec", 1, 1), ("scalar", 0, 1)):
            runner.forced_rope = forced
            assert runner._rope_vec(mode, part) == want, (forced, mode)
        runner.forced_rope = "vec"
        s = shifted.tensor()
        assert runner._rope_vec(0, [(rope_meta(s, cos, sin, s, 0), (s, cos, sin, s))]) == 2  # 4-byte aligned
    finally:
        runner.forced_rope = None
        for a in (*arrays, shifted):
            a.free()


def _written(call: object, variant: int) -> np.ndarray:
    """The logits the capture harness wrote for input set ``variant`` (its own bytes, as the kernel read them)."""
    ((_, raw),) = call.variants[variant]  # type: ignore[attr-defined]
    x = call.kwargs["self"]  # type: ignore[attr-defined]
    return np.frombuffer(np.ascontiguousarray(raw).tobytes(), x.dtype).reshape(x.shape)


@pytest.mark.parametrize("mode", ["persist", "split"])
def test_arg_path_first_planned_inside_a_capture(rocm: Backend, reference: Backend, mode: str) -> None:
    """The Qwen3 runner's order: the first call of a signature is made while the decode step is captured, so
    the plan is made inside the capture (persist once allocated and zeroed its scratch there: 107031). The
    graph replayed twice with the logits changed in place equals the reference each time, and eager runs after
    it (the stream's own scratch) agree with the replays bit for bit; batch 1 and five rows, in one capture (one
    scratch region: neither call's candidates may land on the other's counters)."""
    from tests.rocm.capture_harness import OpCall, assert_bitwise, capture, replay, run_eager

    if not rocm.capabilities().stream_capture:
        pytest.fail(f"rocm does not capture here: {rocm.capabilities().notes.get('stream_capture')}")
    runner = rocm.runners["reduction"]  # type: ignore[attr-defined]
    driver = rocm.driver  # type: ignore[attr-defined]
    planned: list[bool] = []
    real_plan = runner._split_arg

    def watched(*args: object, **kwargs: object) -> object:
        planned.append(bool(driver._capture_of))
        return real_plan(*args, **kwargs)

    runner._split_arg = watched
    runner.forced_arg = mode
    rng = np.random.default_rng(41)
    shapes = [((1, 11_111), ml_dtypes.bfloat16, "ties"), ((5, 8_321), np.float32, "nan")]  # used by no other test
    calls = [OpCall(rocm, "ArgMax", {"self": _row(rng, s, t, p), "dim": -1, "keepdim": False}) for s, t, p in shapes]
    for c in calls:  # the second input set: every row rotated by one element (the harness leaves bf16 as it is)
        ((da, raw),) = c.variants[0]
        c.variants[1] = [(da, np.roll(raw, da.dtype.info.storage_bits // 8))]
        assert not np.array_equal(_written(c, 0), _written(c, 1))
    stream = rocm.runtime.create_stream()  # type: ignore[attr-defined]
    try:
        graph = capture(calls, stream)
        try:
            assert planned == [True, True], f"not planned inside the capture: {planned}"
            for variant in (0, 1):
                got = replay(calls, graph, stream, variant)
                for c, g in zip(calls, got):
                    x = _written(c, variant)
                    want = eager.run("ArgMax", reference, self=x, dim=-1, keepdim=False)["out"]
                    np.testing.assert_array_equal(g["out[0]"], want, err_msg=f"{mode} replay {variant}")
                assert_bitwise(run_eager(calls, stream, variant), got, f"{mode} eager after replay {variant}")
        finally:
            driver.graph_destroy(graph)
    finally:
        runner._split_arg = real_plan
        runner.forced_arg = None
        for c in calls:
            c.free()
        rocm.runtime.destroy_stream(stream)  # type: ignore[attr-defined]


def test_persist_arg_path_on_two_streams(rocm: Backend, reference: Backend) -> None:
    """One persist plan enqueued on two streams with nothing ordering them: each stream has its own scratch, so
    neither stream's blocks count in the other's row counters; three rounds with changed logits (a counter
    left non-zero or a combine over the other stream's candidates shows as a stale or wrong index)."""
    from tests.rocm.capture_harness import OpCall

    runner = rocm.runners["reduction"]  # type: ignore[attr-defined]
    runner.forced_arg = "persist"
    rt = rocm.runtime  # type: ignore[attr-defined]
    rng = np.random.default_rng(43)
    call = OpCall(rocm, "ArgMax", {"self": _row(rng, (2, 9_999), np.float32, "ties"), "dim": -1, "keepdim": False})
    streams = [rt.create_stream(), rt.create_stream()]
    try:
        for r in range(3):
            call.fill(r % 2)
            for _ in range(2):
                for s in streams:
                    call.enqueue(call.prepare(), s)  # one signature: one plan, on either stream
            for s in streams:
                rt.synchronize_stream(s)
            x = _written(call, r % 2)
            want = eager.run("ArgMax", reference, self=x, dim=-1, keepdim=False)["out"]
            np.testing.assert_array_equal(call.outputs()["out[0]"], want, err_msg=f"round {r}")
    finally:
        runner.forced_arg = None
        call.free()
        for s in streams:
            rt.destroy_stream(s)

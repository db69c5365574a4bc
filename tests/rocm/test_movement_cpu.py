"""The movement family above the provider seam, on the CPU.

A host model of each generated movement kernel (the same index arithmetic, written again in Python
over the packed launch arguments) runs every launch the fake provider records, so every sample of
the claimed ops goes through the real op code (views, strides, checks, deferred flags) and is
compared with the NumPy reference, contiguous, padded and transposed. Launches of elementwise kernels
(pad fill, dtype conversion) are not modelled: those samples are left to the GPU tier. View
arithmetic is checked against NumPy on random views; generated sources are compiled by nvcc where
it is installed.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from acl_core import eager
from acl_core.dtypes import DataType as D
from acl_core.errors import AclCoreError, AclnnError
from acl_core.spec.ops import all_specs, get_spec
from acl_rocm.backend import RocmBackend
from acl_rocm.kernels import movement as mk
from acl_rocm.kernels.prelude import compile_options
from acl_rocm.ops import movement as mv
from tests.rocm.fake_provider import FakeProvider

MOVEMENT = sorted(n for n, s in all_specs().items() if s.family == "movement" and s.kernel_name in mv.OPS)


# ----------------------------------------------------------------------------- host model of the kernels
class Unmodelled(Exception):
    """A launch of a kernel the model does not execute (an elementwise helper)."""


def _read(address: int, dtype: np.dtype) -> Any:
    return np.frombuffer(ctypes.string_at(address, dtype.itemsize), dtype)[0]


def _write(address: int, value: Any, dtype: np.dtype) -> None:
    data = np.asarray(value).astype(dtype).tobytes()
    ctypes.memmove(address, data, len(data))


def _ptr(raw: bytes) -> int:
    return int.from_bytes(raw, "little")


def _ll(raw: bytes) -> int:
    return int(np.frombuffer(raw, np.int64)[0])


def _np(dtype: D) -> np.dtype:
    assert dtype.numpy is not None
    return np.dtype(dtype.numpy)


def _wide(value: Any, dtype: D) -> Any:
    kind = mk.wide(dtype)
    return {"double": np.float64, "long long": np.int64, "unsigned long long": np.uint64, "bool": np.bool_}[kind](value)


def _elements(kernel: Any, args: list[bytes], rows: int, ndim: int) -> tuple[list[tuple[int, ...]], np.ndarray]:
    """Each element's coordinates, and its offsets per row (the kernel's unravel and dot products)."""
    meta = np.frombuffer(args[0], np.int32 if kernel.index_type == "int" else np.int64).astype(np.int64)
    n, shape = int(meta[0]), tuple(int(s) for s in meta[1 : 1 + ndim])
    strides = meta[1 + ndim : 1 + ndim + rows * ndim].reshape(rows, ndim)
    coords = [tuple(int(x) for x in np.unravel_index(i, shape)) for i in range(n)]
    offsets = np.array([strides @ np.array(c) for c in coords]).reshape(n, rows)
    return coords, offsets


def _blocked(kernel: Any, args: list[bytes], flag_at: int) -> bool:
    """The flag guard of a kernel that takes it: True when set, after running the kernel's inline checks
    (args after the flag: per check pointer, count, stride, low, high), which set it on a bad value."""
    flag = _ptr(args[flag_at])
    checks = getattr(kernel, "checks", None)
    for j, dtype in enumerate(checks.dtypes if checks is not None else ()):
        base = flag_at + 1 + 5 * j
        pointer, count, stride, low, high = _ptr(args[base]), *(_ll(a) for a in args[base + 1 : base + 5])
        dt = _np(dtype)
        if any(not low <= int(_read(pointer + q * stride * dt.itemsize, dt)) < high for q in range(count)):
            _write(flag, 1, np.dtype(np.int32))
    return bool(_read(flag, np.dtype(np.int32)))


def run_model(kernel: Any, args: list[bytes]) -> None:
    """Execute one movement kernel launch on host memory."""
    if isinstance(kernel, mk.Copy):
        coords, offs = _elements(kernel, args, 2, kernel.ndim)
        src, dst, size = _ptr(args[1]), _ptr(args[2]), kernel.itemsize
        diagonal = _ll(args[3]) if kernel.mode != "copy" else 0
        for c, (o0, o1) in zip(coords, offs):
            keep = True
            if kernel.mode != "copy":
                delta = c[-1] - c[-2]
                keep = delta <= diagonal if kernel.mode == "tril" else delta >= diagonal
            data = ctypes.string_at(src + int(o0) * size, size) if keep else bytes(size)
            ctypes.memmove(dst + int(o1) * size, data, size)
    elif isinstance(kernel, mk.Check):
        _, offs = _elements(kernel, args, 1, kernel.ndim)
        index, low, high, flag = _ptr(args[1]), _ll(args[2]), _ll(args[3]), _ptr(args[4])
        dt = _np(kernel.index)
        for (o0,) in offs:
            v = int(_read(index + int(o0) * dt.itemsize, dt))
            if v < low or v >= high:
                _write(flag, 1, np.dtype(np.int32))
    elif isinstance(kernel, mk.Take):
        k = len(kernel.indices)
        if _blocked(kernel, args, 3 + 3 * k):
            return
        _, offs = _elements(kernel, args, 2 + k, kernel.ndim)
        src, dst, size = _ptr(args[1]), _ptr(args[2]), kernel.itemsize
        pointers = [_ptr(a) for a in args[3 : 3 + k]]
        extra = [(_ll(args[3 + k + 2 * j]), _ll(args[4 + k + 2 * j])) for j in range(k)]
        for row in offs:
            at, ok = int(row[0]), True
            for j, (pointer, dt_acl) in enumerate(zip(pointers, kernel.indices)):
                dt = _np(dt_acl)
                v = int(_read(pointer + int(row[2 + j]) * dt.itemsize, dt))
                stride, n = extra[j]
                if kernel.wrap and v < 0:
                    v += n
                ok = ok and 0 <= v < n
                at += v * stride
            if ok:
                ctypes.memmove(dst + int(row[1]) * size, ctypes.string_at(src + at * size, size), size)
    elif isinstance(kernel, mk.Scatter):
        if _blocked(kernel, args, 5):
            return
        meta = np.frombuffer(args[0], np.int32 if kernel.index_type == "int" else np.int64).astype(np.int64)
        nd = kernel.ndim
        extents = meta[1 + nd + 4 * nd : 1 + nd + 5 * nd]
        coords, offs = _elements(kernel, args, 5, nd)
        strides = meta[1 + nd : 1 + nd + 5 * nd].reshape(5, nd)
        dt, it = _np(kernel.dtype), _np(kernel.index)
        self_p, out_p, index_p = _ptr(args[1]), _ptr(args[2]), _ptr(args[3])
        dim = kernel.dim
        for c, row in zip(coords, offs):
            acc = _wide(_read(self_p + int(row[0]) * dt.itemsize, dt), kernel.dtype)
            if all(c[d] < extents[d] for d in range(nd) if d != dim):
                for j in range(int(extents[dim])):
                    at_index = int(row[2]) + (j - c[dim]) * int(strides[2][dim])
                    if int(_read(index_p + at_index * it.itemsize, it)) != c[dim]:
                        continue
                    if kernel.with_value:
                        kind = mk.wide(kernel.dtype)
                        raw = args[4][: 1 if kind == "bool" else 8]
                        value = np.frombuffer(
                            raw,
                            {"double": np.float64, "long long": np.int64, "unsigned long long": np.uint64}.get(
                                kind, np.bool_
                            ),
                        )[0]
                    else:
                        at_src = int(row[3]) + (j - c[dim]) * int(strides[3][dim])
                        value = _wide(_read(_ptr(args[4]) + at_src * dt.itemsize, dt), kernel.dtype)
                    if kernel.reduce == 0:
                        acc = value
                    elif kernel.reduce == 1:
                        acc = (acc or value) if isinstance(acc, np.bool_) else acc + value
                    else:
                        acc = (acc and value) if isinstance(acc, np.bool_) else acc * value
            _write(out_p + int(row[1]) * dt.itemsize, acc, dt)
    elif isinstance(kernel, mk.ScatterUpdate):  # pushed per updates element (row 0 updates, row 1 data)
        if _blocked(kernel, args, 8):
            return
        coords, offs = _elements(kernel, args, 2, kernel.ndim)
        meta = np.frombuffer(args[0], np.int32 if kernel.index_type == "int" else np.int64).astype(np.int64)
        nd = kernel.ndim
        dstrides = meta[1 + nd + nd : 1 + nd + 2 * nd]
        data, updates, indices = _ptr(args[1]), _ptr(args[2]), _ptr(args[3])
        batches, row_stride, column_stride, length = (_ll(a) for a in args[4:8])
        it, size, axis = _np(kernel.index), kernel.itemsize, kernel.axis

        def target(b: int) -> tuple[int, int]:
            first = int(_read(indices + b * row_stride * it.itemsize, it))
            if not kernel.two_columns:
                return b, first
            return first, int(_read(indices + (b * row_stride + column_stride) * it.itemsize, it))

        for c, (o0, o1) in zip(coords, offs):
            batch, offset = target(c[0])
            at = offset + c[axis]
            later = (target(j) for j in range(c[0] + 1, batches))
            if any(b == batch and start <= at < start + length for b, start in later):
                continue  # a later batch writes this element: the last one wins
            to = int(o1) + (batch - c[0]) * int(dstrides[0]) + offset * int(dstrides[axis])
            ctypes.memmove(data + to * size, ctypes.string_at(updates + int(o0) * size, size), size)
    elif isinstance(kernel, mk.Arange):
        _, offs = _elements(kernel, args, 1, 1)
        out, dt = _ptr(args[1]), _np(kernel.dtype)
        for i, (o0,) in enumerate(offs):
            if kernel.int64:
                value: Any = np.int64(_ll(args[2]) + i * _ll(args[3]))
            else:
                start, step = (float(np.frombuffer(a, np.float64)[0]) for a in args[2:4])
                value = np.float64(start) + np.float64(i) * np.float64(step)
                if dt.kind in "iu":
                    info = np.iinfo(dt)
                    value = np.clip(np.trunc(value), info.min, info.max)
            _write(out + int(o0) * dt.itemsize, value, dt)
    else:
        raise Unmodelled(type(kernel).__name__)


class ModelProvider(FakeProvider):
    """The fake provider, executing movement kernels with the host model as they are launched."""

    kernels: dict[str, Any] = {}

    def launch(self, function: object, grid: Any, block: Any, shared_bytes: int, stream: int, params: int) -> None:
        super().launch(function, grid, block, shared_bytes, stream, params)
        launched = self.launches[-1]
        kernel = self.kernels.get(launched.name)
        if kernel is None:
            raise Unmodelled(launched.name)
        run_model(kernel, launched.args)


@pytest.fixture
def model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RocmBackend:
    kernels: dict[str, Any] = {}
    original = mv._source

    def recording(kernel: Any) -> str:
        kernels[kernel.kernel_name] = kernel
        return original(kernel)

    monkeypatch.setattr(mv, "_source", recording)
    provider = ModelProvider()
    provider.kernels = kernels
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp_path)})
    backend.runtime.ensure_device(0)
    return backend


def _same(op: str, note: str, got: Any, want: Any) -> None:
    if isinstance(want, list):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _same(op, note, g, w)
        return
    assert got.dtype == want.dtype and got.shape == want.shape, f"{op} [{note}]"
    np.testing.assert_array_equal(got, want, err_msg=f"{op} [{note}]")


@pytest.mark.parametrize("op", MOVEMENT)
def test_every_sample_matches_the_reference_through_the_kernel_model(model: RocmBackend, op: str) -> None:
    reference = __import__("acl_core").get_backend("reference")
    spec = get_spec(op)
    assert spec.samples is not None
    compared = 0
    for sample in spec.samples(np.random.default_rng(7)):
        want = eager.run(op, reference, op_args=sample.args)
        for layout in eager.LAYOUTS:
            try:
                got = eager.run(op, model, layout=layout, op_args=sample.args)
            except Unmodelled:
                break  # an elementwise helper ran: the GPU tier checks this sample
            for name, value in want.items():
                _same(op, f"{sample.note} {layout} {name}", got[name], value)
            compared += 1
    if op not in ("ConstantPadNd",):
        assert compared > 0, f"no sample of {op} ran through the model"


@pytest.mark.parametrize("op", MOVEMENT)
def test_error_samples_fail_with_the_reference_code(model: RocmBackend, op: str) -> None:
    reference = __import__("acl_core").get_backend("reference")
    spec = get_spec(op)
    for case in spec.error_samples(np.random.default_rng(3)) if spec.error_samples else []:
        with pytest.raises(AclCoreError) as want:
            eager.run(op, reference, op_args=case.args)
        try:
            eager.run(op, model, op_args=case.args)
        except Unmodelled:
            continue
        except AclCoreError as exc:
            assert exc.code == want.value.code == case.code, f"{op} [{case.note}]"
            continue
        pytest.fail(f"{op} [{case.note}]: accepted a call the reference refuses with {want.value.code}")


def test_an_out_of_range_index_writes_nothing_and_is_reported_at_synchronisation(model: RocmBackend) -> None:
    weight = np.arange(12, dtype=np.float32).reshape(4, 3)
    with pytest.raises(AclnnError) as err:
        eager.run("Embedding", model, weight=weight, indices=np.array([1, 4], np.int64))
    assert err.value.code == 161002 and "Embedding" in err.value.message
    take = [launch for launch in model.provider.launches if "_take_" in launch.name]
    assert len(take) == 1  # it ran, saw the flag and wrote nothing (the model returns before any write)
    assert all(not e.active for e in model.driver._eager.values())  # the flag was read, its slab handed out again
    out = eager.run("Embedding", model, weight=weight, indices=np.array([3, 0], np.int32))["out"]
    np.testing.assert_array_equal(out, weight[[3, 0]])


# ----------------------------------------------------------------------------- view arithmetic vs NumPy
def _gather(buffer: np.ndarray, view: mv.View) -> np.ndarray:
    base = buffer.ctypes.data
    out = np.empty(view.shape, buffer.dtype)
    for c in np.ndindex(*view.shape):
        offset = (view.address - base) // view.itemsize + sum(i * s for i, s in zip(c, view.strides))
        out[c] = buffer[offset]
    return out


@pytest.mark.parametrize("seed", range(20))
def test_view_arithmetic_matches_numpy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    rank = int(rng.integers(1, 4))
    shape = tuple(int(n) for n in rng.integers(1, 5, rank))
    buffer = np.arange(int(np.prod(shape)) * 3, dtype=np.int64)
    base = buffer[: int(np.prod(shape))].reshape(shape)
    view = mv.View(buffer.ctypes.data, 8, shape, tuple(s // 8 for s in base.strides))
    arr = base
    for _ in range(3):
        kind = rng.integers(0, 4)
        d = int(rng.integers(0, arr.ndim)) if arr.ndim else 0
        if kind == 0 and arr.ndim:
            n = arr.shape[d]
            start = int(rng.integers(0, n))
            step = int(rng.integers(1, 3))
            length = len(range(start, n, step))
            view = view.narrow(d, start, length, step)
            arr = arr[(slice(None),) * d + (slice(start, n, step),)]
        elif kind == 1 and arr.ndim:
            perm = [int(p) for p in rng.permutation(arr.ndim)]
            view, arr = view.permute(perm), np.transpose(arr, perm)
        elif kind == 2 and arr.ndim:
            dims = [d]
            view, arr = view.flip(dims), np.flip(arr, dims)
        elif arr.ndim > 1:
            i = int(rng.integers(0, arr.shape[d]))
            view, arr = view.select(d, i), np.take(arr, i, axis=d)
        np.testing.assert_array_equal(_gather(buffer, view), arr)


@pytest.mark.parametrize("reps", [(2, 3), (1, 2, 1), (3, 1, 2), (2, 0)])
def test_repeat_views_tile_like_numpy(reps: tuple[int, ...]) -> None:
    x = np.arange(6, dtype=np.int64).reshape(2, 3)
    src = mv.View(x.ctypes.data, 8, (2, 3), (3, 1))
    expected = np.tile(x.reshape((1,) * (len(reps) - 2) + x.shape), reps)
    out = np.zeros(expected.size * 2 + 1, np.int64)  # a strided out: every other element
    from acl_core.tensor import contiguous_strides

    dst = mv.View(out.ctypes.data, 8, expected.shape, tuple(2 * s for s in contiguous_strides(expected.shape)))
    a, b = mv.tile_views(src, dst, reps)
    assert _gather(x.reshape(-1), a).shape == b.shape
    np.testing.assert_array_equal(_gather(x.reshape(-1), a).reshape(expected.shape), expected)
    np.testing.assert_array_equal(_gather(out, b).reshape(-1), out[: 2 * expected.size : 2])


# ----------------------------------------------------------------------------- generated sources
KERNELS = [
    mk.Copy(4, 3, "int"),
    mk.Copy(16, 2, "long long"),
    mk.Copy(2, 3, "int", "tril"),
    mk.Copy(1, 2, "int", "triu"),
    mk.Check(D.ACL_INT32, 2, "int"),
    mk.Take(8, (D.ACL_INT64, D.ACL_INT32), 3, "int", True),
    mk.Scatter(D.ACL_FLOAT16, D.ACL_INT64, 2, "int", 1, 1, False),
    mk.Scatter(D.ACL_BOOL, D.ACL_INT32, 2, "int", 0, 2, True),
    mk.Scatter(D.ACL_BF16, D.ACL_INT64, 2, "long long", 1, 0, True),
    mk.ScatterUpdate(4, D.ACL_INT64, 4, "int", 2, True),
    mk.Arange(D.ACL_FLOAT16, False, "int"),
    mk.Arange(D.ACL_INT32, False, "int"),
    mk.Arange(D.ACL_INT64, True, "long long"),
]


def test_sources_name_each_instance_once_and_guard_on_the_flag() -> None:
    names = [k.kernel_name for k in KERNELS]
    assert len(set(names)) == len(names)
    for k in KERNELS:
        src = k.source()
        assert f"__launch_bounds__(256) {k.kernel_name}(" in src
        assert f"struct Meta {{ {k.index_type} n;" in src
        assert ("if (*flag) return;" in src) == isinstance(k, (mk.Take, mk.Scatter, mk.ScatterUpdate))
        assert "__restrict__" not in src  # in-place twins alias source and destination
    assert "__dmul_rn" in mk.Arange(D.ACL_DOUBLE, False, "int").source()  # no fused multiply-add


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed here")
def test_sources_compile_with_nvcc(tmp_path: Path) -> None:
    for k in KERNELS:
        path = tmp_path / f"{k.kernel_name}.cu"
        path.write_text(k.source())
        options = [o for o in compile_options(32) if o.startswith("-D") or o.startswith("-std")]
        done = subprocess.run(
            ["nvcc", "-ptx", "-arch=sm_90", *options, str(path), "-o", str(path.with_suffix(".ptx"))],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr


def test_scatter_update_kernel_pushes_updates_and_the_last_batch_wins(emulated: RocmBackend) -> None:
    """The generated InplaceScatterUpdate kernel itself (g++ emulator): a one-token write into a long cache,
    and two-column indices whose runs overlap in one data batch (the later batch wins, as in the reference)."""
    reference = __import__("acl_core").get_backend("reference")
    rng = np.random.default_rng(11)
    cache = rng.standard_normal((4, 300, 2, 8)).astype(np.float32)
    token = rng.standard_normal((4, 1, 2, 8)).astype(np.float32)
    overlapping = np.array([[1, 3], [0, 7], [1, 4], [1, 2]], np.int64)  # runs of 3 in batch 1: 3-5, 4-6, 2-4
    cases = [
        {"data": cache, "indices": np.array([299, 17, 0, 150], np.int64), "updates": token, "axis": 1},
        {
            "data": cache[:, :12],
            "indices": overlapping,
            "updates": rng.standard_normal((4, 3, 2, 8)).astype(np.float32),
            "axis": 1,
        },
    ]
    for args in cases:
        want = eager.run("InplaceScatterUpdate", reference, **args)["data"]
        for layout in ("contiguous", "transposed"):
            got = eager.run("InplaceScatterUpdate", emulated, layout=layout, **args)["data"]
            np.testing.assert_array_equal(got, want, err_msg=layout)


def test_small_index_checks_run_inside_the_kernel_and_large_ones_launch_first(model: RocmBackend) -> None:
    provider = model.provider
    table = np.arange(40, dtype=np.float32).reshape(10, 4)

    def kernels(index: np.ndarray) -> list[str]:
        before = len(provider.launches)
        eager.run("Embedding", model, weight=table, indices=index)
        return [x.name.split("_")[2] for x in provider.launches[before:]]

    assert kernels(np.array([3, 9, 0], np.int64)) == ["take"]  # the check runs in the gather's blocks
    large = np.arange(mv.INLINE_CHECK_MAX + 1, dtype=np.int64) % 10
    assert kernels(large) == ["check", "take"]
    for index in (np.array([3, 10], np.int64), np.full(mv.INLINE_CHECK_MAX + 1, 10, np.int64)):
        with pytest.raises(AclnnError) as err:  # reported at synchronisation, nothing written
            eager.run("Embedding", model, weight=table, indices=index)
        assert err.value.code == 161002

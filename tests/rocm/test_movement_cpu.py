"""The movement family above the provider seam, on the CPU.

A host model of each generated movement kernel (:mod:`tests.rocm.movement_model`: the same index
arithmetic, written again in Python over the packed launch arguments) runs every launch the fake
provider records, so every sample of the claimed ops goes through the real op code (views, strides,
checks, deferred flags) and is compared with the NumPy reference, contiguous, padded and transposed.
Launches of elementwise kernels (pad fill, dtype conversion) are not modelled: those samples are left
to the GPU tier. View arithmetic is checked against NumPy on random views; generated sources are
compiled by nvcc where it is installed.
"""

from __future__ import annotations

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
from tests.rocm.movement_model import Unmodelled

MOVEMENT = sorted(n for n, s in all_specs().items() if s.family == "movement" and s.kernel_name in mv.OPS)


def _same(op: str, note: str, got: Any, want: Any) -> None:
    if isinstance(want, list):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _same(op, note, g, w)
        return
    assert got.dtype == want.dtype and got.shape == want.shape, f"{op} [{note}]"
    np.testing.assert_array_equal(got, want, err_msg=f"{op} [{note}]")


@pytest.mark.parametrize("op", MOVEMENT)
def test_every_sample_matches_the_reference_through_the_kernel_model(movement_model: RocmBackend, op: str) -> None:
    reference = __import__("acl_core").get_backend("reference")
    spec = get_spec(op)
    assert spec.samples is not None
    compared = 0
    for sample in spec.samples(np.random.default_rng(7)):
        want = eager.run(op, reference, op_args=sample.args)
        for layout in eager.LAYOUTS:
            try:
                got = eager.run(op, movement_model, layout=layout, op_args=sample.args)
            except Unmodelled:
                break  # an elementwise helper ran: the GPU tier checks this sample
            for name, value in want.items():
                _same(op, f"{sample.note} {layout} {name}", got[name], value)
            compared += 1
    if op not in ("ConstantPadNd",):
        assert compared > 0, f"no sample of {op} ran through the model"


@pytest.mark.parametrize("op", MOVEMENT)
def test_error_samples_fail_with_the_reference_code(movement_model: RocmBackend, op: str) -> None:
    reference = __import__("acl_core").get_backend("reference")
    spec = get_spec(op)
    for case in spec.error_samples(np.random.default_rng(3)) if spec.error_samples else []:
        with pytest.raises(AclCoreError) as want:
            eager.run(op, reference, op_args=case.args)
        try:
            eager.run(op, movement_model, op_args=case.args)
        except Unmodelled:
            continue
        except AclCoreError as exc:
            assert exc.code == want.value.code == case.code, f"{op} [{case.note}]"
            continue
        pytest.fail(f"{op} [{case.note}]: accepted a call the reference refuses with {want.value.code}")


def test_an_out_of_range_index_writes_nothing_and_is_reported_at_synchronisation(movement_model: RocmBackend) -> None:
    weight = np.arange(12, dtype=np.float32).reshape(4, 3)
    with pytest.raises(AclnnError) as err:
        eager.run("Embedding", movement_model, weight=weight, indices=np.array([1, 4], np.int64))
    assert err.value.code == 161002 and "Embedding" in err.value.message
    take = [launch for launch in movement_model.provider.launches if "_take_" in launch.name]
    assert len(take) == 1  # it ran, saw the flag and wrote nothing (the model returns before any write)
    eager_slabs = movement_model.driver._eager.values()
    assert all(not e.active for e in eager_slabs)  # the flag was read, its slab handed out again
    out = eager.run("Embedding", movement_model, weight=weight, indices=np.array([3, 0], np.int32))["out"]
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


def test_small_index_checks_run_inside_the_kernel_and_large_ones_launch_first(movement_model: RocmBackend) -> None:
    provider = movement_model.provider
    table = np.arange(40, dtype=np.float32).reshape(10, 4)

    def kernels(index: np.ndarray) -> list[str]:
        before = len(provider.launches)
        eager.run("Embedding", movement_model, weight=table, indices=index)
        return [x.name.split("_")[2] for x in provider.launches[before:]]

    assert kernels(np.array([3, 9, 0], np.int64)) == ["take"]  # the check runs in the gather's blocks
    large = np.arange(mv.INLINE_CHECK_MAX + 1, dtype=np.int64) % 10
    assert kernels(large) == ["check", "take"]
    for index in (np.array([3, 10], np.int64), np.full(mv.INLINE_CHECK_MAX + 1, 10, np.int64)):
        with pytest.raises(AclnnError) as err:  # reported at synchronisation, nothing written
            eager.run("Embedding", movement_model, weight=table, indices=index)
        assert err.value.code == 161002

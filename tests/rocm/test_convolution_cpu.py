"""Convolution on the rocm backend above the provider seam, on a CPU.

The im2col / epilogue / col2im kernels are built with g++ (``kernel_emulator.py``) and run on host
memory; the fake provider's host BLAS computes the GEMMs from the exact GemmCalls the op issues. So
every spec sample is compared with the reference, the chunking is exercised with a tiny budget, and
the chunk plans and cubeMathType handling are checked directly.
"""

from __future__ import annotations

import ctypes
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.spec.ops import get_spec
from acl_rocm.backend import RocmBackend
from acl_rocm.kernels.convolution import Col2im, Epilogue, Im2col
from acl_rocm.ops.convolution import PlainChunks, TransposedChunks, plan_plain, plan_transposed
from tests.conftest import assert_close
from tests.rocm.fake_provider import FakeProvider
from tests.rocm.kernel_emulator import EmulatedProvider, available


@pytest.fixture
def emulated(tmp_path: Path) -> tuple[RocmBackend, EmulatedProvider]:
    """A backend whose kernels run on the CPU and whose GEMMs run on the host BLAS stand-in."""
    reason = available()
    if reason:
        pytest.skip(reason)
    build = Path(tempfile.gettempdir()) / f"acl-rocm-emulated-{os.getuid()}"
    build.mkdir(exist_ok=True)
    EmulatedProvider.build_dir = build
    provider = EmulatedProvider(blas=True)
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp_path)})
    backend.runtime.ensure_device(0)
    return backend, provider


def _compare(backend: Backend, reference: Backend, args: dict, layout: str = "contiguous", note: str = "") -> None:
    expected = eager.run("Convolution", reference, **args)["output"]
    actual = eager.run("Convolution", backend, layout=layout, **args)["output"]
    assert actual.dtype == expected.dtype, note
    try:
        assert_close(actual, expected)
    except AssertionError as exc:
        raise AssertionError(f"{note} layout={layout}\n{exc}") from None


def test_every_sample_matches_the_reference_when_emulated(emulated, reference: Backend) -> None:
    backend, _ = emulated
    samples = list(get_spec("Convolution").samples(np.random.default_rng(7)))  # type: ignore[misc]
    for i, sample in enumerate(samples):
        _compare(backend, reference, dict(sample.args), note=sample.note)
        if i % 4 == 0:
            _compare(backend, reference, dict(sample.args), "transposed", sample.note)


@pytest.mark.parametrize("transposed", [False, True])
def test_small_chunks_give_the_same_result(emulated, reference: Backend, transposed: bool) -> None:
    backend, provider = emulated
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, (3, 4, 5, 6)).astype(np.float32)
    w = rng.uniform(-1, 1, (4, 2, 3, 2)).astype(np.float32)
    args = {
        "input": x,
        "weight": w,
        "bias": rng.uniform(-1, 1, (4,)).astype(np.float32),
        "stride": [2, 1],
        "padding": [1, 1],
        "dilation": [1, 2],
        "transposed": transposed,
        "outputPadding": [1, 0] if transposed else [0, 0],
        "groups": 2,
        "cubeMathType": 0,
    }
    backend.convolution.chunk_bytes = 300  # a few columns (or one channel of one group) at a time
    provider.gemms.clear()
    _compare(backend, reference, args, note=f"transposed={transposed}")
    assert len(provider.gemms) > 3  # one GEMM per chunk
    assert all(g.batch in (1, 2) for g in provider.gemms)


def test_plain_chunk_plan() -> None:
    # 10 input values per column (2 channels x 5 offsets, fp32) + 3 fp32 results = 52 bytes per column
    assert plan_plain(4, 100, 2, 5, 3, 4, 52 * 250) == PlainChunks(2, 100)  # two whole images
    assert plan_plain(4, 100, 2, 5, 3, 4, 52 * 30) == PlainChunks(1, 30)  # 30 positions of one image
    assert plan_plain(4, 100, 2, 5, 3, 4, 1) == PlainChunks(1, 1)  # never less than one column
    assert PlainChunks(1, 30).chunks(2, 70) == [
        (0, 1, 0, 30),
        (0, 1, 30, 30),
        (0, 1, 60, 10),
        (1, 1, 0, 30),
        (1, 1, 30, 30),
        (1, 1, 60, 10),
    ]
    assert plan_plain(4, 100, 2, 5, 3, 4, 256 << 20) == PlainChunks(4, 100)


def test_transposed_chunk_plan() -> None:
    # one group: 3 channels x 4 offsets x 10 positions fp32 columns (480 B) + 2 channels x 10 fp16 inputs (40 B)
    per_group = 3 * 4 * 10 * 4 + 2 * 10 * 2
    assert plan_transposed(5, 2, 2, 3, 4, 10, 2, 2 * per_group * 2) == TransposedChunks(2, 2, 3)
    assert plan_transposed(5, 2, 2, 3, 4, 10, 2, per_group) == TransposedChunks(1, 1, 3)
    assert plan_transposed(5, 2, 2, 3, 4, 10, 2, 40 + 160 * 2) == TransposedChunks(1, 1, 2)
    assert plan_transposed(5, 2, 2, 3, 4, 10, 2, 1) == TransposedChunks(1, 1, 1)
    assert TransposedChunks(1, 1, 2).chunks(1, 2, 3) == [
        (0, 1, 0, 1, 0, 2),
        (0, 1, 0, 1, 2, 1),
        (0, 1, 1, 1, 0, 2),
        (0, 1, 1, 1, 2, 1),
    ]


def _im2col_model(x: np.ndarray, kernel, stride, pads, dilation, sizes) -> np.ndarray:
    """The kernel's index arithmetic in NumPy: col[c, kpos, img, p] for the whole output range."""
    n, c = x.shape[:2]
    padded = np.pad(x, [(0, 0), (0, 0), *pads])
    col = np.zeros((c, int(np.prod(kernel)), n, int(np.prod(sizes))), x.dtype)
    for kpos, k in enumerate(np.ndindex(*kernel)):
        for p, o in enumerate(np.ndindex(*sizes)):
            at = tuple(oi * s + ki * d for oi, s, ki, d in zip(o, stride, k, dilation))
            col[:, kpos, :, p] = padded[(slice(None), slice(None), *at)].T
    return col


def test_im2col_kernel_matches_its_numpy_model(emulated) -> None:
    backend, provider = emulated
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (2, 3, 5, 4)).astype(np.float32)
    kernel, stride, pads, dilation = (2, 3), (2, 1), ((1, 0), (2, 1)), (2, 1)
    sizes = tuple(
        (x.shape[2 + i] + sum(pads[i]) - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1 for i in range(2)
    )
    expected = _im2col_model(x, kernel, stride, pads, dilation, sizes)
    xd = provider.malloc(x.nbytes)
    col = provider.malloc(expected.nbytes)
    ctypes.memmove(xd, x.ctypes.data, x.nbytes)
    k = Im2col(D.ACL_FLOAT, D.ACL_FLOAT, 2, "int")
    positions = int(np.prod(sizes))
    meta = [expected.size, positions, 0, 6, 2, 60, 20, *sizes, *kernel, *stride, *(p[0] for p in pads), *dilation]
    meta += [5, 4, 4, 1]
    backend.convolution._launch(k, meta, [ctypes.c_void_p(xd), ctypes.c_void_p(col)], expected.size, 0)
    got = np.frombuffer((ctypes.c_char * expected.nbytes).from_address(col), np.float32)
    np.testing.assert_array_equal(got.reshape(expected.shape), expected)


def test_cube_math_type_sets_the_gemm_operands(emulated, reference: Backend) -> None:
    backend, provider = emulated
    rng = np.random.default_rng(1)
    args = {
        "input": rng.uniform(-1, 1, (1, 2, 5, 5)).astype(np.float32),
        "weight": rng.uniform(-1, 1, (3, 2, 2, 2)).astype(np.float32),
        "bias": None,
        "stride": [1, 1],
        "padding": [0, 0],
        "dilation": [1, 1],
        "transposed": False,
        "outputPadding": [0, 0],
        "groups": 1,
    }
    for cube, dtype, marker in ((0, D.ACL_FLOAT, None), (1, D.ACL_FLOAT, "(HF32)"), (2, D.ACL_FLOAT16, None)):
        provider.gemms.clear()
        provider.launches.clear()
        got = eager.run("Convolution", backend, **args, cubeMathType=cube)["output"]
        expected = eager.run("Convolution", reference, **args, cubeMathType=0)["output"]
        assert [(g.a.dtype, g.b.dtype, g.d.dtype) for g in provider.gemms] == [(dtype, dtype, D.ACL_FLOAT)]
        im2col = [launch for launch in provider.launches if "im2col" in launch.name]
        assert len(im2col) == 1 and (marker is None) == ("(HF32)" not in im2col[0].source)
        assert_close(got, expected, atol=2e-2, rtol=2e-2)  # down-precision operands: HF32/fp16 rounding


def test_not_claimed_without_blas(tmp_path: Path) -> None:
    backend = RocmBackend(FakeProvider(), {"ACL_KERNEL_CACHE": str(tmp_path)})
    assert "Convolution" not in backend.capabilities().ops
    with_blas = RocmBackend(FakeProvider(blas=True), {"ACL_KERNEL_CACHE": str(tmp_path)})
    assert "Convolution" in with_blas.capabilities().ops


def test_kernel_sources_name_their_dtypes() -> None:
    assert "acl_f2h" in Im2col(D.ACL_FLOAT, D.ACL_FLOAT16, 2, "int").source()
    assert "acl_round_hf32" in Im2col(D.ACL_FLOAT, D.ACL_FLOAT, 1, "int", True).source()
    assert "bias[oc * BS]" in Epilogue(D.ACL_BF16, D.ACL_FLOAT, 3, "long long").source()
    assert "bias" not in Col2im(D.ACL_FLOAT, None, 2, "int").source().split("extern")[1]
    names = {Im2col(D.ACL_FLOAT, D.ACL_FLOAT, s, "int").kernel_name for s in (1, 2, 3)}
    assert len(names) == 3

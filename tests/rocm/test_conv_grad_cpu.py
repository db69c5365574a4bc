"""ConvolutionBackward on the rocm backend above the provider seam, on a CPU.

The im2col / col2im / gather kernels and the row reductions are built with g++ (``kernel_emulator.py``)
and run on host memory; the fake provider's host BLAS computes the GEMMs from the exact GemmCalls the
op issues. Every spec sample is compared with the reference under the op's accuracy class, and the
chunked weight gradient (partials summed by one row kernel) is exercised with a tiny budget.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.spec.ops import get_spec
from acl_rocm.kernels.conv_grad import GatherOut
from tests.conftest import assert_close
from tests.rocm.test_convolution_cpu import emulated  # noqa: F401 - the fixture
from tests.rocm.test_gpu_conv_grad import compare, grad_args


def test_every_sample_matches_the_reference_when_emulated(emulated, reference: Backend) -> None:  # noqa: F811
    backend, _ = emulated
    for i, sample in enumerate(get_spec("ConvolutionBackward").samples(np.random.default_rng(7))):  # type: ignore[misc]
        compare(backend, reference, dict(sample.args), "transposed" if i % 4 == 1 else "contiguous", sample.note)


@pytest.mark.parametrize("transposed", [False, True])
def test_small_chunks_give_the_same_gradients(emulated, reference: Backend, transposed: bool) -> None:  # noqa: F811
    backend, provider = emulated
    rng = np.random.default_rng(3)
    args = grad_args(
        rng, (3, 4, 5, 6), (4, 2, 3, 2), np.float32, stride=[2, 1], padding=[1, 1], dilation=[1, 2], groups=2,
        transposed=transposed, out_pad=[1, 0] if transposed else None,
    )  # fmt: skip
    backend.convolution.chunk_bytes = 300  # a few columns at a time: several partial slices to sum
    provider.gemms.clear()
    provider.launches.clear()
    compare(backend, reference, args, note=f"transposed={transposed}")
    assert len(provider.gemms) > 6  # gradInput's and gradWeight's chunks
    assert sum("sum_parts" in launch.name for launch in provider.launches) > 2  # a running sum, then the rounding
    assert all(g.batch in (1, 2) for g in provider.gemms)


def test_masked_outputs_are_not_computed(emulated, reference: Backend) -> None:  # noqa: F811
    backend, provider = emulated
    args = grad_args(np.random.default_rng(4), (2, 3, 4, 4), (2, 3, 3, 3), np.float32, stride=[1, 1], padding=[1, 1])
    args["outputMask"] = [False, False, True]
    provider.gemms.clear()
    got = eager.run("ConvolutionBackward", backend, **args)
    assert not provider.gemms and set(got) == {"gradBias"}
    assert_close(got["gradBias"], eager.run("ConvolutionBackward", reference, **args)["gradBias"])


def test_gather_kernel_reads_a_strided_view(emulated) -> None:  # noqa: F811
    backend, provider = emulated
    rng = np.random.default_rng(0)
    y = rng.uniform(-1, 1, (3, 4, 5, 6)).astype(np.float32)  # the chunk: images 1..2, positions 7..18
    view = y.transpose(0, 1, 3, 2)  # [N, C, 6, 5] read through strides
    flat = view.reshape(3, 4, 30)[1:3, :, 7:19]
    expected = np.ascontiguousarray(flat.transpose(1, 0, 2)).astype(np.float16)
    src, dst = provider.malloc(y.nbytes), provider.malloc(expected.nbytes)
    ctypes.memmove(src, y.ctypes.data, y.nbytes)
    kernel = GatherOut(D.ACL_FLOAT, D.ACL_FLOAT16, 2, "int")
    meta = [expected.size, 12, 7, 2, 120, 30, 6, 5, 1, 6]
    backend.convolution._launch(kernel, meta, [ctypes.c_void_p(src + 120 * 4), ctypes.c_void_p(dst)], expected.size, 0)
    got = np.frombuffer((ctypes.c_char * expected.nbytes).from_address(dst), np.float16)
    np.testing.assert_array_equal(got.reshape(expected.shape), expected)


def test_hf32_gather_rounds() -> None:
    def body(hf32: bool) -> str:
        return GatherOut(D.ACL_FLOAT, D.ACL_FLOAT, 2, "int", hf32).source().split("extern")[-1]

    assert "acl_round_hf32" in body(True) and "acl_round_hf32" not in body(False)


def test_claimed_only_with_a_blas(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from acl_rocm.backend import RocmBackend
    from tests.rocm.fake_provider import FakeProvider

    assert (
        "ConvolutionBackward" not in RocmBackend(FakeProvider(), {"ACL_KERNEL_CACHE": str(tmp_path)}).capabilities().ops
    )
    with_blas = RocmBackend(FakeProvider(blas=True), {"ACL_KERNEL_CACHE": str(tmp_path)})
    assert "ConvolutionBackward" in with_blas.capabilities().ops

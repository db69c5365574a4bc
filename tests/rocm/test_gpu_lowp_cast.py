"""Cast to and from FLOAT8 E4M3FN / E5M2 / E8M0, FLOAT4 E2M1, HiFloat8 and INT4 on the GPU, byte for byte
against the reference (GPU tier).

Every code of every low-precision type is decoded into the wide types and each other low-precision type;
wide sources (float32, float16, bfloat16, float64, int64: random values, the midpoints between fp8 / HiF8
values, NaN of both signs, ±Inf, overflow, subnormals) are encoded into every low-precision type; Cast's
own low-precision samples run contiguous, padded and transposed with guards; a large tensor crosses many
blocks so packed-nibble writes of neighbouring threads race for the same bytes.
"""

from __future__ import annotations

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.spec.ops import get_spec
from acl_rocm.kernels.lowp import LOW_PRECISION
from tests.rocm.test_lowp_cast_cpu import CODES, _same, _wide_values, cast_bytes, codes_on

pytestmark = pytest.mark.gpu

WIDE = (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16, D.ACL_DOUBLE, D.ACL_INT32, D.ACL_INT8)


@pytest.mark.parametrize("src", sorted(LOW_PRECISION), ids=lambda d: d.short)
def test_every_code_decodes_and_re_encodes(rocm: Backend, reference: Backend, src: D) -> None:
    codes = np.arange(CODES[src], dtype=np.uint8)
    for dst in (*WIDE, *sorted(LOW_PRECISION)):
        if dst == src:
            continue
        want = cast_bytes(reference, codes_on(reference, codes, src), dst)
        got = cast_bytes(rocm, codes_on(rocm, codes, src), dst)
        _same(got, want, dst, f"{src.short} -> {dst.short}")


@pytest.mark.parametrize(
    "src", [D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16, D.ACL_DOUBLE, D.ACL_INT64], ids=lambda d: d.short
)
def test_wide_sources_encode_bit_exactly(rocm: Backend, reference: Backend, src: D) -> None:
    np_dtype = src.numpy
    assert np_dtype is not None
    with np.errstate(invalid="ignore", over="ignore"):
        values = _wide_values(np.random.default_rng(12))
        x = (np.clip(np.nan_to_num(values), -(2**62), 2**62) if src == D.ACL_INT64 else values).astype(np_dtype)
    for dst in sorted(LOW_PRECISION):
        _same(cast_bytes(rocm, x, dst), cast_bytes(reference, x, dst), dst, f"{src.short} -> {dst.short}")


def test_low_precision_cast_samples(rocm: Backend, reference: Backend) -> None:
    samples = list(get_spec("Cast").samples(np.random.default_rng(2024)))  # type: ignore[misc]
    low = [s for s in samples if any(t.short in s.note for t in LOW_PRECISION)]
    assert low
    for sample in low:
        want = eager.run("Cast", reference, **sample.args)["out"]
        for layout in ("contiguous", "padded", "transposed"):
            got = eager.run("Cast", rocm, layout=layout, guard=True, **sample.args)["out"]
            assert got.dtype == want.dtype, sample.note
            np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8), err_msg=f"{sample.note} {layout}")


@pytest.mark.parametrize("dst", [D.ACL_FLOAT4_E2M1, D.ACL_INT4, D.ACL_FLOAT8_E4M3FN], ids=lambda d: d.short)
def test_large_tensors_across_many_blocks(rocm: Backend, reference: Backend, dst: D) -> None:
    x = np.random.default_rng(5).uniform(-9, 9, (1037, 1029)).astype(np.float32)
    for layout in ("contiguous", "padded", "transposed"):
        got = eager.run("Cast", rocm, layout=layout, guard=True, self=x, dtype=int(dst))["out"]
        want = eager.run("Cast", reference, self=x, dtype=int(dst))["out"]
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8), err_msg=layout)

"""Cast to and from the 8- and 4-bit types on the rocm backend, its kernels run on the CPU emulator.

The generated elementwise kernels (with the low-precision codecs and nibble-packed loads and stores) are
built with g++ through ``kernel_emulator.py`` and compared byte for byte with the reference backend:
every code of every low-precision type decoded into the wide types and re-encoded into the others, wide
sources (random, NaN of both signs, Inf, overflow, subnormals, ties) encoded into every low-precision
type, every sample of Cast's spec, and packed outputs written through padded views with guards.
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from acl_core import eager, lowp
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.spec.ops import get_spec
from acl_core.spec.runtime import MemcpyKind
from acl_rocm.backend import RocmBackend
from acl_rocm.kernels.elementwise import Instance
from acl_rocm.kernels.lowp import LOW_PRECISION
from acl_rocm.ops.elementwise import Planned
from tests.conftest import assert_close
from tests.rocm.fake_provider import FakeProvider

WIDE = (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16, D.ACL_INT32)
CODES = {dt: 16 if dt in (D.ACL_FLOAT4_E2M1, D.ACL_INT4) else 256 for dt in LOW_PRECISION}


def codes_on(backend: Backend, codes: np.ndarray, dtype: D) -> eager.DeviceArray:
    """A device tensor of ``dtype`` holding raw codes (packed two per byte for the 4-bit types)."""
    c = np.asarray(codes, np.uint8).reshape(-1)
    raw = lowp.pack_nibbles(c) if dtype.info.storage_bits == 4 else c
    src = eager.to_device(raw, backend)
    da = eager.DeviceArray(src.backend, (c.size,), dtype, c.size, storage_dims=(c.size,))
    backend.runtime.memcpy(da.address, da.nbytes, src.address, src.nbytes, MemcpyKind.ACL_MEMCPY_DEVICE_TO_DEVICE)
    src.free()
    return da


def cast_bytes(backend: Backend, x: np.ndarray | eager.DeviceArray, dst: D) -> np.ndarray:
    """Cast ``x`` to ``dst`` on ``backend``; the output's raw storage (4-bit codes unpacked)."""
    shape = x.shape
    out = eager.empty(shape, dst, backend)
    backend.runtime.memset(out.address, out.nbytes, eager.SENTINEL, out.nbytes)  # no stale result passes
    eager.run("Cast", backend, self=x, dtype=int(dst), out=out)
    raw = out.storage_bytes()
    count = int(np.prod(shape))
    if dst.info.storage_bits == 4:
        return lowp.unpack_nibbles(raw, count)
    return raw[: count * dst.info.storage_bits // 8]


def _same(got: np.ndarray, want: np.ndarray, dst: D, note: str) -> None:
    if dst in LOW_PRECISION or dst in (D.ACL_INT32, D.ACL_INT8):
        bad = np.flatnonzero(got != want)
        assert not bad.size, f"{note}: {bad.size} bytes differ, first at {bad[:8]}: {got[bad[:8]]} != {want[bad[:8]]}"
        return
    np_dtype = dst.numpy
    assert np_dtype is not None
    g, w = got.view(np_dtype).astype(np.float64), want.view(np_dtype).astype(np.float64)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=note)
    keep = ~np.isnan(w)
    np.testing.assert_array_equal(g[keep], w[keep], err_msg=note)
    np.testing.assert_array_equal(np.signbit(g[keep]), np.signbit(w[keep]), err_msg=note)


@pytest.mark.parametrize("src", sorted(LOW_PRECISION), ids=lambda d: d.short)
def test_every_code_decodes_and_re_encodes_like_the_reference(
    emulated: RocmBackend, reference: Backend, src: D
) -> None:
    codes = np.arange(CODES[src], dtype=np.uint8)
    targets = (*WIDE, D.ACL_FLOAT8_E4M3FN if src != D.ACL_FLOAT8_E4M3FN else D.ACL_FLOAT4_E2M1)
    for dst in targets:
        if dst == src:
            continue
        want = cast_bytes(reference, codes_on(reference, codes, src), dst)
        got = cast_bytes(emulated, codes_on(emulated, codes, src), dst)
        _same(got, want, dst, f"{src.short} -> {dst.short}")


def _wide_values(rng: np.random.Generator) -> np.ndarray:
    grid = np.concatenate([lowp.HIFLOAT8_TABLE[:128], np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn)])
    grid = grid.astype(np.float64)
    grid = grid[np.isfinite(grid)]
    mids = np.concatenate([(grid[1:] + grid[:-1]) / 2, grid * 1.5, grid * 1.25])
    special = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 448.0, 464.0, 465.0, 57344.0, 61440.0, 1e6, 6.0, 7.0]
    values = np.concatenate([grid, mids, special, rng.standard_normal(3000) * np.exp2(rng.integers(-30, 20, 3000))])
    return np.concatenate([values, -values])


@pytest.mark.parametrize("src", [D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_DOUBLE, D.ACL_INT64], ids=lambda d: d.short)
def test_wide_sources_encode_like_the_reference(emulated: RocmBackend, reference: Backend, src: D) -> None:
    rng = np.random.default_rng(11)
    np_dtype = src.numpy
    assert np_dtype is not None
    with np.errstate(invalid="ignore", over="ignore"):
        values = _wide_values(rng)
        x = (np.clip(np.nan_to_num(values), -(2**62), 2**62) if src == D.ACL_INT64 else values).astype(np_dtype)
    for dst in sorted(LOW_PRECISION):
        _same(cast_bytes(emulated, x, dst), cast_bytes(reference, x, dst), dst, f"{src.short} -> {dst.short}")


def test_every_low_precision_cast_sample_matches_the_reference(emulated: RocmBackend, reference: Backend) -> None:
    """Cast's samples with an 8- or 4-bit side (the wide ones are the elementwise family's, proven on the GPU)."""
    samples = list(get_spec("Cast").samples(np.random.default_rng(2024)))  # type: ignore[misc]
    low = [s for s in samples if any(t.short in s.note for t in LOW_PRECISION)]
    assert len(low) == 2 * (len(LOW_PRECISION) - 1)  # to and from each type but HiFloat8 (no NumPy type)
    for sample in low:
        for layout in ("contiguous", "padded"):
            expected = eager.run("Cast", reference, **sample.args)
            actual = eager.run("Cast", emulated, layout=layout, guard=True, **sample.args)
            got, want = actual["out"], expected["out"]
            assert got.dtype == want.dtype, sample.note
            if want.dtype.itemsize == 1 and want.dtype.kind == "V":
                np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8), err_msg=sample.note)
            else:
                assert_close(got.astype(np.float64), want.astype(np.float64), atol=0, rtol=0)


@pytest.mark.parametrize("dst", [D.ACL_FLOAT4_E2M1, D.ACL_INT4], ids=lambda d: d.short)
def test_packed_outputs_through_offset_and_strided_views(emulated: RocmBackend, reference: Backend, dst: D) -> None:
    """Odd offsets and strides put neighbouring nibbles in other views: the guard catches a clobbered one."""
    x = np.random.default_rng(3).uniform(-7, 7, (5, 7)).astype(np.float32)
    for layout in ("padded", "transposed"):
        got = eager.run("Cast", emulated, layout=layout, guard=True, self=x, dtype=int(dst))["out"]
        want = eager.run("Cast", reference, self=x, dtype=int(dst))["out"]
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8), err_msg=layout)


def test_low_precision_casts_take_the_exact_scalar_path(tmp_path: Path) -> None:
    provider = FakeProvider()
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp_path)})
    backend.runtime.ensure_device(0)
    assert LOW_PRECISION <= set(backend.capabilities().dtypes)
    planned: list[Planned] = []
    original = backend.elementwise.prepare
    backend.elementwise.prepare = lambda p: planned.append(p) or original(p)  # type: ignore[assignment,method-assign,func-returns-value]
    eager.run("Cast", backend, self=np.ones(64, np.float16), dtype=int(D.ACL_FLOAT4_E2M1))
    inst: Instance = planned[-1].instance
    assert inst.exact and inst.result == D.ACL_FLOAT16  # the encoder reads the fp16 bits, as they are
    assert getattr(inst, "vec", 1) == 1  # never the vector path (where the elementwise family has one)
    source = backend.elementwise.source(inst)
    assert "acl_h2f_soft(" in source and "acl_nib_set(p_out" in source and "acl_to_fp4(r)" in source
    eager.run("Cast", backend, self=np.ones(64, np.float16), dtype=int(D.ACL_FLOAT))
    assert not planned[-1].instance.exact and "acl_lp_unpack" not in backend.elementwise.source(planned[-1].instance)

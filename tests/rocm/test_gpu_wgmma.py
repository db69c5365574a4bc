"""The wgmma (sm_90a) primitives and flash kernel against NumPy and the reference (GPU tier, sm_90 only).

First the primitive: one warpgroup computes ``D[64 x N] = A[64 x 16 k] B`` (N 64 / 128, bf16 / fp16, A by
descriptor or from registers, B K-major or N-major, one or two k16 steps) on small integers, so the fp32
result is exact and any difference is a layout error; the assertion prints which rows and columns are
wrong, which right rows they hold, and whether B's descriptor works with LBO and SBO read the other way.
Then the flash kernel (``ACL_FLASH_CONFIG=wg2k128`` / ``wg1k64``, and the warp-specialised ``w`` shapes with
ping-pong ``o``, the flash path forced) against the
reference under the flash path's accuracy class: causal (both corners) and not, GQA / MQA, lengths that
are not multiples of the tiles, Sq > Skv (empty rows), a band window, negative and zero scales, a sink,
BSND and BNSD, D 64 and 128, bf16 and fp16, and the bench's prefill shapes.

Skipped on the CPU emulator (it cannot run wgmma PTX) and on devices other than sm_90, with the reason.
"""

from __future__ import annotations

import ctypes
import zlib

import ml_dtypes
import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_rocm.kernels.attention_wgmma import CANDIDATES, DEFAULTS, WgmmaInstance
from acl_rocm.kernels.wgmma import tile_kernel_name, tile_source
from acl_rocm.launch import KernelArgs
from tests.rocm.test_attention_wgmma_cpu import SWIZZLED_TILE_CASES, TILE_CASES
from tests.rocm.test_gpu_flash_attention import _args, check_flash

pytestmark = pytest.mark.gpu


def _rng(*key: object) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def _span(values: list[int]) -> str:
    """Sorted integers as ranges: ``0-7, 16-23``."""
    out: list[str] = []
    for v in sorted(values):
        if out and int(out[-1].rsplit("-", 1)[-1]) == v - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{v}"
        else:
            out.append(str(v))
    return ", ".join(out)


def mismatch(got: np.ndarray, want: np.ndarray) -> str:
    """Which elements of a 64 x N result are wrong: rows, columns, samples, and which right rows / columns they hold."""
    bad = np.argwhere(got != want)
    if bad.size == 0:
        return "no mismatch"
    rows, cols = sorted({int(r) for r in bad[:, 0]}), sorted({int(c) for c in bad[:, 1]})
    lines = [f"{len(bad)} of {got.size} wrong; rows {_span(rows)}; columns {_span(cols)}"]
    lines.append("samples (row, col, got, want): " + ", ".join(
        f"({r}, {c}, {got[r, c]:g}, {want[r, c]:g})" for r, c in bad[:6]))  # fmt: skip
    blocks = (got != want).reshape(8, 8, -1, 8).sum(axis=(1, 3))  # wrong elements per 8 x 8 block (of 64)
    lines.append("wrong per 8x8 block (block rows down, block columns across):")
    lines += [" ".join(f"{int(x):2d}" for x in row) for row in blocks]
    if not np.any(got):
        lines.append("the result is all zeros (nothing written, or the product never ran)")
    held_rows = {r: [int(w) for w in np.flatnonzero((want == got[r]).all(axis=1))] for r in rows[:8]}
    lines.append("wrong rows equal to right rows: " + str({r: w for r, w in held_rows.items() if w}))
    held_cols = {c: [int(w) for w in np.flatnonzero((want.T == got[:, c]).all(axis=1))] for c in cols[:8]}
    lines.append("wrong columns equal to right columns: " + str({c: w for c, w in held_cols.items() if w}))
    return "\n".join(lines)


def run_tile(
    rocm: Backend,
    n: int,
    bf16: bool,
    form: str,
    tb: int,
    ks: int,
    a: np.ndarray,
    b: np.ndarray,
    lbo: int,
    sbo: int,
    swizzle: bool = False,
) -> np.ndarray:
    """The tile kernel's 64 x n fp32 result for A (64 x 16 ks) and B (K x n) as fp16/bf16 (B^T given where tb is 0)."""
    dt = ml_dtypes.bfloat16 if bf16 else np.float16
    a_dev = eager.to_device(np.ascontiguousarray(a.astype(dt)), rocm)
    b_dev = eager.to_device(np.ascontiguousarray((b if tb else b.T).astype(dt)), rocm)
    out = eager.to_device(np.full((64, n), np.nan, np.float32), rocm)
    name = tile_kernel_name(n, bf16, form, tb, ks, swizzle)
    source = tile_source(n, bf16, form, tb, ks, swizzle)
    function = rocm.function(source, name, 0, arch_specific=True)  # type: ignore[attr-defined]
    values = [KernelArgs.pointer(x.address) for x in (a_dev, b_dev, out)] + [ctypes.c_int(lbo), ctypes.c_int(sbo)]
    args = KernelArgs(values)
    rocm.provider.launch(function, (1, 1, 1), (128, 1, 1), 0, 0, args.address)  # type: ignore[attr-defined]
    rocm.provider.synchronize_device()  # type: ignore[attr-defined]
    return np.asarray(out.numpy(), np.float32)


def _check_tile(hopper: Backend, n: int, bf16: bool, form: str, tb: int, ks: int, swizzle: bool) -> None:
    """The tile kernel against NumPy on small integers; on a mismatch, the map and the LBO/SBO swap hint."""
    rng = _rng("tile", n, bf16, form, tb, ks, swizzle)
    kd = 16 * ks
    a = rng.integers(-8, 9, (64, kd)).astype(np.float32)
    b = rng.integers(-8, 9, (kd, n)).astype(np.float32)
    want = a @ b  # |sums| <= 128 * 64: exact in fp32, and every input exact in fp16 and bf16
    if swizzle:  # K-major: LBO unused, SBO the next 8 rows; N-major: LBO the next 64 columns, SBO the next 8 K rows
        lbo, sbo = (kd * 128, 1024) if tb else (16, 1024)
    else:
        lbo, sbo = (n * 16, 128) if tb else (128, kd * 16)
    got = run_tile(hopper, n, bf16, form, tb, ks, a, b, lbo, sbo, swizzle)
    if not np.array_equal(got, want):
        swapped = run_tile(hopper, n, bf16, form, tb, ks, a, b, sbo, lbo, swizzle)
        hint = "matches" if np.array_equal(swapped, want) else "does not match either"
        layout = "128B swizzle" if swizzle else "no swizzle"
        pytest.fail(
            f"wgmma {form} m64n{n}k16 x{ks} {'bf16' if bf16 else 'f16'} B {'N' if tb else 'K'}-major, {layout} "
            f"(LBO {lbo}, SBO {sbo}):\n{mismatch(got, want)}\nwith B's LBO and SBO swapped the result {hint}"
        )


@pytest.mark.parametrize(("n", "bf16", "form", "tb", "ks"), TILE_CASES)
def test_wgmma_tile_matches_numpy(hopper: Backend, n: int, bf16: bool, form: str, tb: int, ks: int) -> None:
    """One warpgroup's m64n``n``k16 steps: exact on small integers; a layout error names its pattern."""
    _check_tile(hopper, n, bf16, form, tb, ks, False)


@pytest.mark.parametrize(("n", "bf16", "form", "tb", "ks"), SWIZZLED_TILE_CASES)
def test_wgmma_swizzled_tile_matches_numpy(hopper: Backend, n: int, bf16: bool, form: str, tb: int, ks: int) -> None:
    """The same in the 128-byte-swizzled layout (K 128: the k16 step crossing into the second column block)."""
    _check_tile(hopper, n, bf16, form, tb, ks, True)


# ----------------------------------------------------------------------------- the flash kernel
def check_wgmma(rocm: Backend, reference: Backend, config: str, d: int, args: dict, note: str, op: str = "") -> None:
    """``op`` (FlashAttentionScore) on the wgmma kernel of shape ``config`` at head dim ``d``, against the reference."""
    flash = rocm.attention.flash  # type: ignore[attr-defined]
    flash.use_config(f"{d}={config}")
    try:
        check_flash(rocm, reference, args, f"wgmma {config} {note}", op=op or "FlashAttentionScore")
        inst = flash.last_instance
        assert isinstance(inst, WgmmaInstance), f"{note}: the mma.sync kernel ran ({flash.last_refusal})"
        assert str(inst.config) == config
    finally:
        flash.use_config(None)


CASES = [
    # dtype, d, mode, config, layout, b, n, nkv, sq, skv
    ("bfloat16", 128, 3, "wg2k128", "BSND", 2, 4, 2, 1000, 1250),  # causal bottom-right, GQA, ragged tiles
    ("bfloat16", 128, 3, "wg2k128p", "BSND", 2, 4, 2, 1000, 1250),
    ("float16", 128, 0, "wg2k128", "BNSD", 1, 2, 2, 700, 900),  # no mask
    ("float16", 128, 0, "wg2k128p", "BNSD", 1, 2, 2, 700, 900),
    ("bfloat16", 64, 2, "wg2k128", "BNSD", 2, 4, 1, 777, 777),  # causal top-left, MQA
    ("bfloat16", 64, 2, "wg2k128p", "BNSD", 2, 4, 1, 777, 777),
    ("float16", 64, 3, "wg2k128", "BSND", 1, 4, 2, 300, 530),
    ("float16", 64, 3, "wg1k64", "BNSD", 1, 4, 2, 300, 530),
    ("float16", 64, 3, "wg1k64p", "BNSD", 1, 4, 2, 300, 530),
    ("bfloat16", 128, 0, "wg1k64", "BSND", 1, 2, 1, 190, 250),
    ("bfloat16", 128, 0, "wg1k64p", "BSND", 1, 2, 1, 190, 250),
    ("bfloat16", 64, 0, "wg2k128", "BNSD", 1, 2, 2, 50, 70),  # less than one tile each way
    ("bfloat16", 64, 0, "wg2k128p", "BNSD", 1, 2, 2, 50, 70),
    ("float16", 128, 3, "wg2k128", "BNSD", 1, 2, 2, 900, 400),  # Sq > Skv: empty rows (zeros, max -inf)
    ("float16", 128, 3, "wg2k128p", "BNSD", 1, 2, 2, 900, 400),
    ("bfloat16", 64, 3, "wg2k64b2p", "BSND", 1, 4, 2, 610, 610),
    ("float16", 64, 0, "wg2k64b2", "BNSD", 1, 2, 1, 333, 444),
    ("bfloat16", 128, 3, "wg1k64p", "BSND", 1, 2, 2, 130, 130),  # two tiles: the pipeline's shortest full run
    # the 128-byte-swizzled layout (suffix s)
    ("bfloat16", 128, 3, "wg2k128s", "BSND", 2, 4, 2, 1000, 1250),
    ("bfloat16", 128, 3, "wg2k128ps", "BSND", 2, 4, 2, 1000, 1250),
    ("float16", 128, 0, "wg2k128ps", "BNSD", 1, 2, 2, 700, 900),
    ("bfloat16", 64, 2, "wg2k128s", "BNSD", 2, 4, 1, 777, 777),
    ("bfloat16", 64, 2, "wg2k128ps", "BNSD", 2, 4, 1, 777, 777),
    ("float16", 64, 3, "wg1k64s", "BNSD", 1, 4, 2, 300, 530),
    ("bfloat16", 128, 0, "wg1k64ps", "BSND", 1, 2, 1, 190, 250),
    ("bfloat16", 64, 0, "wg2k128ps", "BNSD", 1, 2, 2, 50, 70),
    ("float16", 128, 3, "wg2k128s", "BNSD", 1, 2, 2, 900, 400),
    ("bfloat16", 64, 3, "wg2k64b2ps", "BSND", 1, 4, 2, 610, 610),
    ("float16", 64, 0, "wg2k64b2s", "BNSD", 1, 2, 1, 333, 444),
    # three K/V buffers (suffix x3)
    ("bfloat16", 128, 3, "wg2k128sx3", "BSND", 2, 4, 2, 1000, 1250),
    ("float16", 64, 0, "wg2k128sx3", "BNSD", 1, 2, 2, 50, 70),  # one tile
    ("bfloat16", 64, 3, "wg2k64b2sx3", "BSND", 1, 4, 2, 610, 610),
    ("float16", 128, 0, "wg2k64sx3", "BNSD", 1, 2, 1, 200, 130),  # three tiles: every buffer once
    ("bfloat16", 128, 0, "wg2k64sx3", "BSND", 1, 2, 1, 100, 128),  # two tiles
    ("float16", 128, 3, "wg2k128x3", "BNSD", 1, 2, 2, 900, 400),  # no swizzle; empty rows
    # warp-specialised (suffix w: a producer warpgroup, mbarriers, setmaxnreg; o: ping-pong; p: intra-warpgroup)
    ("bfloat16", 128, 3, "wg2k128w", "BSND", 2, 4, 2, 1000, 1250),
    ("bfloat16", 128, 3, "wg2k128wp", "BSND", 2, 4, 2, 1000, 1250),
    ("bfloat16", 128, 3, "wg2k128wop", "BSND", 2, 4, 2, 1000, 1250),
    ("bfloat16", 128, 3, "wg2k128wops", "BSND", 2, 4, 2, 1000, 1250),
    ("bfloat16", 128, 3, "wg2k128wopsx3", "BSND", 2, 4, 2, 1000, 1250),
    ("bfloat16", 128, 3, "wg2k128wopx3", "BSND", 2, 4, 2, 1000, 1250),
    ("float16", 128, 0, "wg2k128wop", "BNSD", 1, 2, 2, 700, 900),  # no mask
    ("float16", 128, 0, "wg2k128wpx3", "BNSD", 1, 2, 2, 700, 900),
    ("bfloat16", 64, 2, "wg2k128wop", "BNSD", 2, 4, 1, 777, 777),  # causal top-left, MQA
    ("bfloat16", 64, 2, "wg2k128wopsx3", "BNSD", 2, 4, 1, 777, 777),
    ("float16", 64, 3, "wg2k64wops", "BSND", 1, 4, 2, 300, 530),  # 64-key tiles
    ("bfloat16", 64, 0, "wg2k128wop", "BNSD", 1, 2, 2, 50, 70),  # one tile: the ring's shortest run
    ("bfloat16", 128, 0, "wg2k128w", "BNSD", 1, 2, 2, 50, 70),
    ("float16", 128, 3, "wg2k128wops", "BNSD", 1, 2, 2, 900, 400),  # Sq > Skv: blocks with no tile
    ("float16", 64, 3, "wg2k128wopsx3", "BNSD", 1, 2, 2, 900, 400),
    ("bfloat16", 128, 0, "wg2k64wop", "BSND", 1, 2, 1, 200, 130),  # three tiles: every stage once (x2: wraps)
    ("bfloat16", 64, 0, "wg2k64wopx3", "BSND", 1, 2, 1, 200, 260),  # five tiles over three stages
    ("float16", 64, 3, "wg3k128wop", "BSND", 1, 4, 2, 610, 610),  # three consumers (spills: not benched)
    # issue 18 (D 64): blocks longest first across the grid (l; batches and heads > 1 so the order is exercised),
    # 3-4 warpgroups a block (192 / 256 query rows), 3-4 one-warpgroup blocks a multiprocessor
    ("bfloat16", 64, 3, "wg2k64b2psl", "BSND", 2, 4, 2, 1000, 1250),  # causal bottom-right, GQA, ragged tiles
    ("float16", 64, 2, "wg2k64b2sl", "BNSD", 2, 4, 1, 777, 777),  # causal top-left, MQA
    ("bfloat16", 64, 3, "wg4k64sl", "BSND", 2, 4, 2, 1000, 1250),
    ("float16", 64, 0, "wg4k64psl", "BNSD", 1, 2, 2, 700, 900),  # no mask
    ("bfloat16", 64, 2, "wg4k64psl", "BNSD", 2, 3, 1, 1100, 1100),  # 5 tiles of 256, the last ragged
    ("bfloat16", 64, 2, "wg3k64sl", "BNSD", 2, 4, 1, 777, 777),
    ("bfloat16", 64, 3, "wg3k64psl", "BSND", 1, 4, 2, 610, 610),
    ("float16", 64, 3, "wg3k128sl", "BNSD", 1, 2, 2, 900, 400),  # Sq > Skv: empty rows
    ("bfloat16", 64, 0, "wg3k128sl", "BNSD", 1, 2, 2, 50, 70),  # one tile; two of three warpgroups past the rows
    ("bfloat16", 64, 3, "wg1k64b4psl", "BSND", 2, 4, 2, 1000, 1250),
    ("float16", 64, 3, "wg1k64b4sl", "BNSD", 1, 4, 2, 300, 530),
    ("bfloat16", 64, 2, "wg1k128b3sl", "BNSD", 2, 4, 1, 777, 777),
    ("bfloat16", 64, 3, "wg2k128sl", "BSND", 2, 4, 2, 1000, 1250),
    ("bfloat16", 64, 3, "wg2k64b2slx3", "BSND", 2, 4, 2, 1000, 1250),
    # the D 64 default since 2026-12-07 14:50: no mask, top-left MQA, Sq > Skv, one tile
    ("float16", 64, 0, "wg2k64b2slx3", "BNSD", 1, 2, 2, 700, 900),
    ("bfloat16", 64, 2, "wg2k64b2slx3", "BNSD", 2, 4, 1, 777, 777),
    ("float16", 64, 3, "wg2k64b2slx3", "BNSD", 1, 2, 2, 900, 400),
    ("bfloat16", 64, 0, "wg2k64b2slx3", "BNSD", 1, 2, 2, 50, 70),
    ("bfloat16", 128, 3, "wg2k128sl", "BSND", 2, 4, 2, 1000, 1250),
    ("float16", 128, 0, "wg2k128psl", "BNSD", 1, 2, 2, 700, 900),
    ("bfloat16", 128, 3, "wg2k128wopsl", "BSND", 2, 4, 2, 1000, 1250),  # the warp-specialised kernel's order too
]


@pytest.mark.parametrize(("dtype", "d", "mode", "config", "layout", "b", "n", "nkv", "sq", "skv"), CASES)
def test_wgmma_flash_matches_reference(
    hopper: Backend,
    reference: Backend,
    dtype: str,
    d: int,
    mode: int,
    config: str,
    layout: str,
    b: int,
    n: int,
    nkv: int,
    sq: int,
    skv: int,
) -> None:
    args = _args(_rng("wg", dtype, d, mode, config, sq), dtype, layout, b, n, nkv, sq, skv, d, mode)
    check_wgmma(hopper, reference, config, d, args, f"{dtype} D{d} sparse {mode} {layout} {n}/{nkv} {sq}x{skv}")


@pytest.mark.parametrize("d", [64, 128])
def test_wgmma_flash_windows_scales_and_sink(hopper: Backend, reference: Backend, d: int) -> None:
    configs = ("wg2k128", "wg2k128p", "wg2k128ps", "wg2k128sx3", "wg2k128w", "wg2k128wop", "wg2k128wopsx3")
    _windows_scales_and_sink(hopper, reference, d, configs)


@pytest.mark.parametrize("d", sorted(CANDIDATES))
def test_issue18_windows_scales_and_sink(hopper: Backend, reference: Backend, d: int) -> None:
    """Issue 18's shapes (``CANDIDATES``) under a band window, negative and zero scales and a sink."""
    _windows_scales_and_sink(hopper, reference, d, tuple(str(c) for c in CANDIDATES[d]))


def _windows_scales_and_sink(hopper: Backend, reference: Backend, d: int, configs: tuple[str, ...]) -> None:
    """A band window, scales -0.3 and 0 under the causal mask, and a sink, for each of ``configs`` at ``d``."""
    rng = _rng("wg-more", d)
    for config in configs:
        band = _args(rng, "float16", "BSND", 1, 2, 2, 600, 650, d, 4, preTokens=150, nextTokens=20)
        check_wgmma(hopper, reference, config, d, band, "sparse 4 band 150/20")
        for scale in (-0.3, 0.0):
            args = _args(rng, "bfloat16", "BNSD", 1, 2, 1, 400, 500, d, 3, scaleValue=scale)
            check_wgmma(hopper, reference, config, d, args, f"causal, scale {scale}")
        sink = _args(rng, "bfloat16", "BNSD", 1, 4, 2, 500, 500, d, 3, pseType=1)
        sink["sinkOptional"] = rng.uniform(-2, 2, 4).astype(np.float32)
        check_wgmma(hopper, reference, config, d, sink, "causal + sink", op="FlashAttentionScoreV3")


def test_wgmma_setting_with_a_mask_runs_the_mma_sync_kernel(hopper: Backend, reference: Backend) -> None:
    flash = hopper.attention.flash  # type: ignore[attr-defined]
    rng = _rng("wg-mask")
    mask = rng.uniform(size=(1, 1, 300, 300)) < 0.3
    args = _args(rng, "bfloat16", "BNSD", 1, 2, 2, 300, 300, 128, 0, attenMaskOptional=mask)
    flash.use_config("wg2k128")
    try:
        check_flash(hopper, reference, args, "wg2k128 setting, explicit mask")
        assert not isinstance(flash.last_instance, WgmmaInstance) and "mask" in (flash.last_refusal or "")
    finally:
        flash.use_config(None)


@pytest.mark.parametrize(("d", "sq"), [(128, 4096), (64, 1024)])
def test_wgmma_flash_at_prefill_size(hopper: Backend, reference: Backend, d: int, sq: int) -> None:
    """The bench's lengths and head dims (two heads), every shape the bench times there."""
    args = _args(_rng("wg-prefill", d), "bfloat16", "BNSD", 1, 2, 2, sq, sq, d, 3)
    for config in DEFAULTS[d]:
        check_wgmma(hopper, reference, str(config), d, args, f"bf16 causal {sq}")


@pytest.mark.parametrize(("d", "sq"), [(128, 4096), (64, 1024)])
def test_issue18_candidates_at_prefill_size(hopper: Backend, reference: Backend, d: int, sq: int) -> None:
    """The bench's lengths and head dims with 2 batches x 2 heads, so the longest-first order spans heads and
    batches, for every shape of ``CANDIDATES``."""
    args = _args(_rng("wg-prefill-18", d), "bfloat16", "BNSD", 2, 2, 2, sq, sq, d, 3)
    for config in CANDIDATES[d]:
        check_wgmma(hopper, reference, str(config), d, args, f"bf16 causal {sq}, 2 x 2 heads")

"""The flash attention path on the CPU: its place in the path choice, its refusals, and the kernel on the emulator.

The kernel runs on the CPU kernel emulator (``kernel_emulator.py``) in each warp matrix layout
(1: NVIDIA's, 2: CDNA's 64-lane, 3: RDNA3's, 4: RDNA4's; the emulator takes the software matrix path
in that layout's fragments), so the row bookkeeping an AMD GPU would run is checked here too.
:func:`acl_key_range` (the device twin of ``attention_plan.key_range``) is compared with the Python
function on a grid of windows, and the flash sources compile under nvcc for sm_90 and sm_80.
"""

from __future__ import annotations

import ctypes
import logging
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.errors import AclError, AclErrorCode
from acl_rocm.kernels.attention_flash import (
    ALTERNATIVES,
    HEAD_DIMS,
    SHARED_LIMIT,
    FlashConfig,
    FlashInstance,
    config_for,
    flash_instance,
    flash_source,
    parse_overrides,
)
from acl_rocm.kernels.prelude import PRELUDE, compile_options
from acl_rocm.ops.attention_flash import flash_refusal
from acl_rocm.ops.attention_plan import KEY_RANGE_SOURCE, choose_path, key_range
from tests.rocm import kernel_emulator
from tests.rocm.fake_provider import FakeProvider
from tests.rocm.kernel_emulator import EmulatedProvider, emulated_backend
from tests.rocm.test_gpu_flash_attention import _args, _rng, check_flash


@dataclass
class LayoutProvider(EmulatedProvider):
    """The emulated provider compiling kernels in warp matrix layout ``layout`` (its warp size goes with it)."""

    layout: int = 1

    def options_for(self, source: str) -> list[str]:
        return [*super().options_for(source), f"-DACL_MMA_LAYOUT={self.layout}"]


def _backend(tmp_path_factory: pytest.TempPathFactory, layout: int, arch: str = "sm_90") -> Backend:
    provider = LayoutProvider(blas=True, warp_size=64 if layout == 2 else 32, layout=layout, arch=arch)
    return emulated_backend(tmp_path_factory.mktemp(f"flash-l{layout}"), provider)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def reference() -> Backend:
    import acl_core

    return acl_core.get_backend("reference")


# ----------------------------------------------------------------------------- the path choice
def test_choose_path_puts_flash_between_cudnn_and_blas() -> None:
    ok = {"blas_refusal": None, "flash_refusal_reason": None}
    assert choose_path(large=True, cudnn_refusal_reason="no cuDNN", **ok) == ("flash", "large call; cuDNN: no cuDNN")
    assert choose_path(large=True, cudnn_refusal_reason=None, **ok)[0] == "cudnn"
    assert choose_path(large=False, cudnn_refusal_reason="no cuDNN", **ok)[0] == "kernel"
    path, why = choose_path(large=True, cudnn_refusal_reason="x", flash_slow="no matrix instructions", **ok)
    assert path == "blas" and "flash: no matrix instructions" in why
    path, why = choose_path(large=True, blas_refusal=None, cudnn_refusal_reason="x", flash_refusal_reason="pse")
    assert path == "blas" and "flash: pse" in why
    forced = choose_path(large=False, cudnn_refusal_reason="x", flash_slow="slow", override="flash", **ok)
    assert forced == ("flash", "forced")  # forcing runs it where it is correct but not preferred
    with pytest.raises(ValueError, match="flash attention path cannot run this call: head dim 96"):
        refused = {**ok, "flash_refusal_reason": "head dim 96"}
        choose_path(large=True, cudnn_refusal_reason="x", override="flash", **refused)


def test_flash_refusals() -> None:
    assert flash_refusal(D.ACL_BF16, 128, False) is None and flash_refusal(D.ACL_FLOAT16, 64, False) is None
    assert "float32" in str(flash_refusal(D.ACL_FLOAT, 128, False))
    assert "head dim 80" in str(flash_refusal(D.ACL_BF16, 80, False))
    assert "pse" in str(flash_refusal(D.ACL_BF16, 128, True))


def test_instances_fit_shared_memory() -> None:
    for d in HEAD_DIMS:
        for dtype in (D.ACL_BF16, D.ACL_FLOAT16):
            inst = flash_instance(dtype, d, None, True)
            assert inst.shared_bytes <= SHARED_LIMIT and f"#define HEAD_DIM {d}" in flash_source(inst)
            small = flash_instance(dtype, d, None, True, max_shared=64 * 1024)  # an AMD GPU's 64 KiB of LDS
            assert small.shared_bytes <= 64 * 1024 and small.stages == (1 if inst.shared_bytes > 64 * 1024 else 2)
    # short calls take 64-row blocks where the table gives two m-tiles (D 64 off NVIDIA's layout)
    assert flash_instance(D.ACL_BF16, 64, None, True, rows=64, layout=None).mtiles == 1
    assert flash_instance(D.ACL_BF16, 64, None, True, rows=65, layout=None).mtiles == 2
    assert flash_instance(D.ACL_BF16, 64, None, True, rows=65).mtiles == 1  # NVIDIA: one measured faster
    # NVIDIA's D 128 entry (two m-tiles, Q in shared memory: 68 KiB) on smaller devices: one stage (52 KiB), then
    # the layout-independent entry (34 KiB); short calls take one m-tile of it
    fits = {m: flash_instance(D.ACL_BF16, 128, None, True, max_shared=m).config for m in (SHARED_LIMIT, 65536, 49152)}
    assert [str(c) for c in fits.values()] == ["w4m2k32s2q-efiu", "w4m2k32s1q-efiu", "w4m1k64s1"]
    assert str(flash_instance(D.ACL_BF16, 128, None, True, rows=64).config) == "w4m1k32s2q-efiu"
    with pytest.raises(ValueError, match="shared memory"):
        flash_source(FlashInstance(D.ACL_BF16, 256, warps=8, block_keys=256, stages=2))


def _fake_backend(tmp_path: Path, opt_in: int) -> Backend:
    from acl_rocm.backend import RocmBackend

    backend = RocmBackend(FakeProvider(blas=True, shared_opt_in=opt_in), {"ACL_KERNEL_CACHE": str(tmp_path)})
    backend.runtime.ensure_device(0)
    return backend


def test_tiles_above_48k_opt_into_dynamic_shared_memory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """D 128's entry takes 68 KiB: the kernel is opted in once; a 64 KiB device gets one stage (52 KiB, opted in
    too), a 48 KiB one the layout-independent entry (34 KiB), each fallback named on the debug line (the mma.sync
    table's: the sm_90 wgmma default is set aside)."""
    monkeypatch.setattr("acl_rocm.ops.attention_flash.WGMMA_TABLE", {})
    args = _args(_rng("opt-in"), "bfloat16", "BNSD", 1, 2, 2, 200, 200, 128, 3)
    for opt_in, shape, nbytes in (
        (232448, "w4m2k32s2q_efiu", 69632),
        (65536, "w4m2k32s1q_efiu", 52224),
        (49152, "w4m1k64s1", 0),
    ):
        backend = _fake_backend(tmp_path / str(opt_in), opt_in)
        provider = backend.provider
        runner = backend.attention  # type: ignore[attr-defined]
        runner.path_override = "flash"
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="acl_rocm.attention"):
            eager.run("FlashAttentionScore", backend, **args)
        (name,) = [launch.name for launch in provider.launches if launch.name.startswith("acl_flash")]
        assert f"_{shape}_" in name
        assert provider.dynamic_shared == ({name: nbytes} if nbytes else {})
        fallback = [r for r in caplog.records if "needs more shared memory" in r.getMessage()]
        assert len(fallback) == (0 if opt_in == 232448 else 1), opt_in
    with pytest.raises(AclError, match="needs 300000 bytes of shared memory"):
        backend.function(flash_source(flash_instance(D.ACL_BF16, 64, None, True)), "x", dynamic_shared=300000)


def test_large_calls_take_flash_without_cudnn_and_blas_without_matrix_instructions(
    tmp_path_factory: pytest.TempPathFactory, reference: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    args = _args(_rng("default"), "bfloat16", "BNSD", 1, 2, 2, 72, 72, 64, 3)
    for arch, want in (("sm_90", "flash"), ("sm_75", "blas")):
        backend = _backend(tmp_path_factory, 1, arch)
        runner = backend.attention  # type: ignore[attr-defined]
        assert runner.cudnn.refusal() is not None  # no frontend here: "cuDNN absent"
        runner.large_work = 1
        with caplog.at_level(logging.DEBUG, logger="acl_rocm.attention"):
            eager.run("FlashAttentionScore", backend, **args)
        assert runner.last_path == want
        line = [r.getMessage() for r in caplog.records if "path" in r.getMessage()][-1]
        assert f"{want} path" in line, line
        if want == "blas":
            assert "no warp matrix instructions on sm_75" in line
            check_flash(backend, reference, args, "forced flash on sm_75: the software matrix path")


def test_large_prompt_prefill_takes_flash_whether_or_not_cudnn_loads(
    tmp_path_factory: pytest.TempPathFactory, reference: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    from tests.rocm.test_gpu_flash_attention import _inference

    args = _inference(_rng("prompt-default"), "bfloat16", "BNSD", 2, 2, 72, 64)  # 64+ rows: "large"
    for arch, cudnn, want in (("sm_90", False, "flash"), ("sm_90", True, "flash"), ("sm_75", False, "kernel")):
        backend = _backend(tmp_path_factory, 1, arch)
        runner = backend.attention  # type: ignore[attr-defined]
        runner.large_work = 1
        if cudnn:  # as where the frontend loads: cuDNN runs FlashAttentionScore, not these operators
            runner.cudnn.refusal = lambda: None
        with caplog.at_level(logging.DEBUG, logger="acl_rocm.attention"):
            got = eager.run("PromptFlashAttention", backend, **args)["attentionOut"]
        assert runner.last_path == want, (arch, cudnn)
        line = [r.getMessage() for r in caplog.records if "PromptFlashAttention" in r.getMessage()][-1]
        assert f"{want} path" in line, line
        want_out = eager.run("PromptFlashAttention", reference, **args)["attentionOut"]
        np.testing.assert_allclose(got.astype(np.float32), want_out.astype(np.float32), atol=2**-5, rtol=2**-5)


def test_forced_flash_refusal_is_typed(tmp_path_factory: pytest.TempPathFactory) -> None:
    backend = _backend(tmp_path_factory, 1)
    runner = backend.attention  # type: ignore[attr-defined]
    runner.path_override = "flash"
    try:
        with pytest.raises(AclError, match="FlashAttentionScore: the flash attention path cannot run this call"):
            eager.run("FlashAttentionScore", backend, **_args(_rng("f32"), "float32", "BNSD", 1, 1, 1, 16, 16, 64, 0))
    finally:
        runner.path_override = None


# ----------------------------------------------------------------------------- the kernel in each layout
@pytest.mark.parametrize("layout", [2, 3, 4])
def test_flash_in_every_matrix_layout(
    tmp_path_factory: pytest.TempPathFactory, reference: Backend, layout: int
) -> None:
    backend = _backend(tmp_path_factory, layout)
    rng = _rng("layout", layout)
    check_flash(backend, reference, _args(rng, "bfloat16", "BSND", 1, 2, 1, 40, 75, 64, 3), f"layout {layout}")
    mask = rng.uniform(size=(1, 1, 33, 50)) < 0.3
    mask[:, :, 5, :] = True
    args = _args(rng, "float16", "BNSD", 1, 2, 2, 33, 50, 128, 0, attenMaskOptional=mask, preTokens=20, nextTokens=4)
    check_flash(backend, reference, args, f"layout {layout} mask + window, fp16 D128")
    flash = backend.attention.flash  # type: ignore[attr-defined]
    flash.use_config("w4m1k32s1-efiu")  # the new inner loops too
    try:
        check_flash(backend, reference, args | {"scaleValue": -0.25}, f"layout {layout} -efiu, a negative scale")
    finally:
        flash.use_config(None)


# ----------------------------------------------------------------------------- the key range twin
KEY_RANGE_KERNEL = r"""
extern "C" __global__ void key_ranges(const long long* cases, long long* out, int count) {
  for (int c = threadIdx.x; c < count; c += blockDim.x) {
    const long long* x = cases + 7 * c;
    acl_key_range(x[0], x[1], x[2], x[3], x[4], x[5], x[6], out + 2 * c, out + 2 * c + 1);
  }
}
"""


def test_key_range_twin_matches_python(tmp_path_factory: pytest.TempPathFactory) -> None:
    if kernel_emulator.available():
        pytest.skip(str(kernel_emulator.available()))
    if EmulatedProvider.build_dir is None:
        EmulatedProvider.build_dir = tmp_path_factory.mktemp("key-range")
    cases: list[tuple[int, ...]] = []
    for bounds in (None, (-(300), 0, 0), (-(300), 0, 37), (-9, 3, 0), (-9, 3, -20), (-5, 40, 12)):
        for row0, rows, skv in ((0, 64, 100), (64, 64, 100), (128, 0, 100), (30, 1, 7), (200, 64, 150)):
            lo, hi, shift = bounds if bounds is not None else (0, 0, 0)
            cases.append((row0, rows, skv, int(bounds is not None), lo, hi, shift))
    flat = np.array(cases, dtype=np.int64)
    out = np.full(2 * len(cases), -99, dtype=np.int64)
    options = ["-DACL_WARP_SIZE=32", "-DACL_LANE_MASK_BITS=32"]
    lib = kernel_emulator._library(PRELUDE + KEY_RANGE_SOURCE + KEY_RANGE_KERNEL, "key_ranges", options)
    holders = [ctypes.c_void_p(flat.ctypes.data), ctypes.c_void_p(out.ctypes.data), ctypes.c_int(len(cases))]
    params = (ctypes.c_void_p * 3)(*(ctypes.addressof(h) for h in holders))
    lib.emu_launch(*(ctypes.c_uint(1),) * 3, ctypes.c_uint(32), ctypes.cast(params, ctypes.c_void_p))
    for n, (row0, rows, skv, has, lo, hi, shift) in enumerate(cases):
        want = key_range(row0, rows, skv, (lo, hi, shift) if has else None)
        assert (out[2 * n], out[2 * n + 1]) == want, cases[n]


# ----------------------------------------------------------------------------- block shapes
def test_flash_config_parsing_and_table() -> None:
    assert str(FlashConfig.parse(" w4m2k32s2 ")) == "w4m2k32s2"
    assert FlashConfig.parse("w4m2k32s2q") == FlashConfig(4, 2, 32, 2, qsmem=True)
    q = flash_instance(D.ACL_BF16, 128, None, True, override=FlashConfig(4, 2, 32, 2, qsmem=True))
    assert q.shared_bytes == (128 + 2 * 2 * 32) * 136 * 2 and "#define QSMEM 1" in flash_source(q)
    assert parse_overrides("w8m1k64s2") == {None: FlashConfig(8, 1, 64, 2)}
    assert parse_overrides("128=w4m2k32s2, 64=w4m1k64s1") == {
        128: FlashConfig(4, 2, 32, 2),
        64: FlashConfig(4, 1, 64, 1),
    }
    assert parse_overrides("") == {}
    fast = FlashConfig.parse("w4m1k64s2-ufe")  # inner-loop flags, kept sorted
    assert fast == FlashConfig(4, 1, 64, 2, inner="efu") and str(fast) == "w4m1k64s2-efu"
    src = flash_source(flash_instance(D.ACL_BF16, 64, None, True, override=FlashConfig.parse("w4m1k64s2-efiou")))
    assert all(f"#define {k} 1" in src for k in ("FAST_EXP", "FOLD", "SPLIT", "INTERLEAVE"))
    plain = flash_source(flash_instance(D.ACL_BF16, 64, None, True, override=FlashConfig(4, 1, 64, 2)))
    assert "#define MIN_BLOCKS 3" in src and "#define MIN_BLOCKS 2" in plain
    assert all(f"#define {k} 0" in plain for k in ("FAST_EXP", "FOLD", "SPLIT", "INTERLEAVE"))
    for bad, why in (
        ("w4m2k32", "is not"),
        ("w4m3k64s1", "m-tiles"),
        ("w4m1k48s1", "keys"),
        ("96=w4m1k64s1", "head dim"),
        ("w4m1k64s2-ez", "inner-loop flags"),
        ("w4m1k64s2-ee", "inner-loop flags"),
    ):
        with pytest.raises(ValueError, match=why):
            parse_overrides(bad)
    for d in HEAD_DIMS:  # NVIDIA (cp.async) takes two K/V stages; AMD layouts and the software path one
        assert config_for(d, D.ACL_BF16, 1).stages == 2
        assert all(config_for(d, D.ACL_FLOAT16, layout).stages == 1 for layout in (2, 3, 4, None))
    # NVIDIA's entries: the measured best (H100, 2026-12-06: D 128 209 TFLOP/s vs 180, D 64 120 vs 101)
    assert str(config_for(128, D.ACL_BF16, 1)) == "w4m2k32s2q-efiu"
    assert str(config_for(64, D.ACL_FLOAT16, 1)) == "w4m1k64s2-efiu"
    for d, configs in ALTERNATIVES.items():  # the bench times each beside the entry, never the entry again
        assert config_for(d, D.ACL_BF16, 1) not in configs and len(set(configs)) == len(configs)
    wide = FlashConfig(8, 2, 128, 2)
    assert flash_instance(D.ACL_BF16, 64, None, True, rows=16, override=wide).config == wide  # as given, even short
    with pytest.raises(ValueError, match=r"needs \d+ bytes of shared memory"):
        flash_instance(D.ACL_BF16, 256, None, True, max_shared=64 * 1024, override=wide)


def test_invalid_flash_config_setting_is_a_typed_error(tmp_path: Path) -> None:
    backend = _fake_backend(tmp_path, 232448)
    runner = backend.attention  # type: ignore[attr-defined]
    runner.path_override = "flash"
    args = _args(_rng("bad-config"), "bfloat16", "BNSD", 1, 2, 2, 100, 100, 256, 3)
    for setting, why in (("w4m2", "is not w<warps>"), ("256=w8m2k128s2", "needs 270336 bytes")):
        runner.flash.use_config(setting)
        with pytest.raises(AclError, match=why) as info:
            eager.run("FlashAttentionScore", backend, **args)
        assert info.value.code == AclErrorCode.ACL_ERROR_INVALID_PARAM


# ----------------------------------------------------------------------------- nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed here")
@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_flash_sources_compile_with_nvcc(tmp_path: Path, arch: str) -> None:
    from tests.rocm.test_gpu_flash_attention import block_shapes

    instances = [flash_instance(D.ACL_BF16, d, None, True) for d in HEAD_DIMS]
    shapes = [flash_instance(D.ACL_BF16, d, None, True, override=FlashConfig.parse(c)) for d, c in block_shapes()]
    instances += [inst for inst in shapes if inst not in instances]
    instances.append(flash_instance(D.ACL_FLOAT16, 128, D.ACL_FLOAT, False))  # element loads, an fp32 sink
    instances.append(flash_instance(D.ACL_BF16, 64, D.ACL_BF16, True))  # a bf16 sink (FusedInferAttentionScoreV5)
    for n, inst in enumerate(instances):
        path = tmp_path / f"f{n}.cu"
        path.write_text(flash_source(inst))
        done = subprocess.run(
            ["nvcc", "-ptx", f"-arch={arch}", *compile_options(32), str(path), "-o", str(tmp_path / f"f{n}.ptx")],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        ptx = (tmp_path / f"f{n}.ptx").read_text()
        assert "mma.sync.aligned.m16n8k16" in ptx and "ldmatrix" in ptx
        assert ("cp.async.cg.shared.global" in ptx) == inst.vec
        assert ("ex2.approx.ftz.f32" in ptx) == ("e" in inst.inner)  # the fast exp2 only where asked for

"""The wgmma flash kernel (sm_90a) on the CPU: its layout bookkeeping, its selection and refusals, and nvcc.

Nothing here runs a wgmma (the whole kernel runs on the emulator in ``test_attention_wgmma_emulated_cpu.py``, through
wgmma.py's software steps): the fragment-ownership and descriptor twins are checked
against each other and against the no-swizzle layout; the backend over the fake provider (an sm_90) must
compile the kernel for ``sm_90a`` only when ``ACL_FLASH_CONFIG`` names a wgmma shape, and fall back to the
mma.sync kernel with a logged reason where it cannot run (an explicit mask, head dim 256, another arch, the
emulator); nvcc must build every instance and the tile kernels to sm_90a cubins (ptxas checks the wgmma
operands there, which ``-ptx`` alone would not). The GPU tier (``test_gpu_wgmma.py``) runs them.
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
from dataclasses import replace as dataclass_replace
from pathlib import Path

import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.errors import AclError, AclErrorCode
from acl_rocm.compiler import KernelCache
from acl_rocm.kernels.attention_wgmma import (
    _HELPERS,
    CANDIDATES,
    DEFAULTS,
    WgmmaConfig,
    WgmmaInstance,
    block_of,
    wgmma_flash_source,
    wgmma_refusal,
)
from acl_rocm.kernels.attention_wgmma_ws import PRODUCER_REGS, consumer_regs, ws_flash_source
from acl_rocm.kernels.prelude import compile_options
from acl_rocm.kernels.wgmma import (
    a_owner,
    acc_owner,
    desc_fields,
    interleaved_offset,
    kmajor_step,
    make_desc,
    swizzled_offset,
    tile_kernel_name,
    tile_regions,
    tile_source,
)
from acl_rocm.ops.attention_flash import parse_setting
from tests.rocm import ws_protocol
from tests.rocm.fake_provider import FakeProvider
from tests.rocm.test_gpu_flash_attention import _args, _rng

TILE_CASES = [(n, bf16, form, tb, ks) for n in (64, 128) for bf16 in (True, False) for form in ("ss", "rs")
              for tb in (0, 1) for ks in (1, 2)]  # fmt: skip
"""(N, bf16, form, trans_b, k16 steps) of the tile kernels the GPU tier runs."""
SWIZZLED_TILE_CASES = [(n, bf16, form, tb, ks) for n in (64, 128) for bf16 in (True, False) for form in ("ss", "rs")
                       for tb in (0, 1) for ks in (1, 4, 8) if n == 64 or ks < 8]  # fmt: skip
"""The same in the 128-byte-swizzled layout (K 64: one column block; K 128: two, the step crossing blocks)."""


# ----------------------------------------------------------------------------- layout twins
@pytest.mark.parametrize("n", [8, 64, 128, 256])
def test_accumulator_ownership_covers_the_tile_once(n: int) -> None:
    owners = [acc_owner(t, i) for t in range(128) for i in range(n // 2)]
    assert sorted(owners) == [(r, c) for r in range(64) for c in range(n)]
    for t in range(128):  # a row's elements live in the 4 lanes of one quad: the softmax's two xor shuffles
        rows = {acc_owner(t, i)[0] for i in range(n // 2)}
        assert rows == {16 * (t // 32) + (t % 32) // 4, 16 * (t // 32) + (t % 32) // 4 + 8}


def test_a_fragment_ownership_and_p_reuse() -> None:
    owners = [a_owner(t, r, h) for t in range(128) for r in range(4) for h in range(2)]
    assert sorted(owners) == [(r, k) for r in range(64) for k in range(16)]
    # accumulator elements 8 kk .. 8 kk + 7, packed in pairs in order, are the A fragment of k-block kk (P)
    for t in range(128):
        for kk in range(4):
            for r in range(4):
                for h in range(2):
                    row, col = acc_owner(t, 8 * kk + 2 * r + h)
                    assert (row, col - 16 * kk) == a_owner(t, r, h)


@pytest.mark.parametrize("cols", [16, 64, 128])
def test_descriptor_strides_describe_the_interleaved_layout(cols: int) -> None:
    """Element (row, col) of a tile sits at start + core-matrix strides + its place in the core matrix: LBO along K
    and SBO along M/N, K-major (rows M/N, columns K) and N-major (rows K, columns N) alike."""
    rows = 32
    offsets = sorted(interleaved_offset(r, c, cols) for r in range(rows) for c in range(cols))
    assert offsets == list(range(rows * cols))
    k_major = make_desc(4096, 128, cols * 16)  # Q / K
    n_major = make_desc(4096, cols * 16, 128)  # V
    assert desc_fields(k_major) == {"start": 4096, "lbo": 128, "sbo": cols * 16, "base_offset": 0, "swizzle": 0}
    assert desc_fields(n_major)["lbo"] == cols * 16 and desc_fields(n_major)["sbo"] == 128
    for r in range(rows):
        for c in range(cols):
            byte = 2 * interleaved_offset(r, c, cols)
            f = desc_fields(k_major)  # rows along M/N (SBO), columns along K (LBO); inside: 16-byte rows
            assert byte == (c // 8) * f["lbo"] + (r // 8) * f["sbo"] + (r % 8) * 16 + (c % 8) * 2
            f = desc_fields(n_major)  # rows along K (LBO), columns along N (SBO); inside: 8 K rows of 8 N
            assert byte == (r // 8) * f["lbo"] + (c // 8) * f["sbo"] + (r % 8) * 16 + (c % 8) * 2
    assert make_desc(0x40000 + 256, 128, 256) == make_desc(256, 128, 256)  # 18 address bits, as the hardware


@pytest.mark.parametrize("cols", [64, 128])
def test_swizzled_offsets_and_descriptor_steps(cols: int) -> None:
    """The 128-byte swizzle: a bijection; row r's chunk c at chunk c ^ (r % 8) of its 128-byte row; atoms of 8 rows
    1024 bytes (SBO) apart; a K-major k16 step what the hardware computes from the advanced start address (address
    bits 4-6 XOR bits 7-9 of a 1024-byte-aligned tile); N-major: LBO the next 64 columns, SBO the next 8 rows."""
    rows = 128
    offsets = sorted(swizzled_offset(r, c, rows) for r in range(rows) for c in range(cols))
    assert offsets == list(range(rows * cols))

    def swz(byte: int) -> int:  # the hardware's 128B pattern on a 1024-byte-aligned tile
        return byte ^ (((byte >> 7) & 7) << 4)

    k_major = make_desc(8192, 16, 1024, 1)
    assert desc_fields(k_major) == {"start": 8192, "lbo": 16, "sbo": 1024, "base_offset": 0, "swizzle": 1}
    for kk in range(cols // 16):  # K-major (Q, K): rows along M/N, columns along K
        start = desc_fields(k_major + kmajor_step(kk, rows, True))["start"] - 8192
        for r in range(rows):
            for c in range(16):  # element (r, 16 kk + c) where the descriptor of step kk reads it
                canonical = start + (r // 8) * 1024 + (r % 8) * 128 + 2 * c
                assert swz(canonical) == 2 * swizzled_offset(r, 16 * kk + c, rows)
    n_major = make_desc(8192, rows * 128, 1024, 1)  # V: rows along K, columns along N
    f = desc_fields(n_major)
    for r in range(rows):
        for c in range(cols):
            canonical = (c // 64) * f["lbo"] + (r // 8) * f["sbo"] + (r % 8) * 128 + 2 * (c % 64)
            assert swz(canonical) == 2 * swizzled_offset(r, c, rows)
    assert kmajor_step(5, rows, False) == 80 and kmajor_step(5, rows, True) == rows * 8 + 2


# ----------------------------------------------------------------------------- configs and selection
def test_config_parsing() -> None:
    assert str(WgmmaConfig.parse("wg2k128")) == "wg2k128" and WgmmaConfig.parse(" wg1k64 ") == WgmmaConfig(1, 64)
    for bad in ("wg5k128", "wg2k32", "wg2", "w4m1k64s2"):
        with pytest.raises(ValueError, match="wg"):
            WgmmaConfig.parse(bad)
    setting = parse_setting("128=wg2k128,64=w4m1k64s2-efiu")
    assert setting[128] == WgmmaConfig(2, 128) and str(setting[64]) == "w4m1k64s2-efiu"
    assert parse_setting("wg1k64") == {None: WgmmaConfig(1, 64)}
    with pytest.raises(ValueError, match="head dim"):
        parse_setting("96=wg2k128")
    assert WgmmaInstance(D.ACL_BF16, 128).shared_bytes == (128 + 4 * 128) * 128 * 2
    assert str(WgmmaConfig.parse("wg2k64b2")) == "wg2k64b2" and WgmmaConfig.parse("wg2k64b1") == WgmmaConfig(2, 64)
    assert (
        WgmmaConfig.parse("wg2k64b2p") == WgmmaConfig(2, 64, 2, True) and str(WgmmaConfig(1, 64, 1, True)) == "wg1k64p"
    )
    with pytest.raises(ValueError, match="at most 4 warpgroups"):
        WgmmaConfig.parse("wg2k64b3")
    assert WgmmaConfig.parse("wg2k64b2ps") == WgmmaConfig(2, 64, 2, True, True)
    assert str(WgmmaConfig(2, 128, swizzle=True)) == "wg2k128s" and str(WgmmaConfig.parse("wg2k128ps")) == "wg2k128ps"
    with pytest.raises(ValueError, match="wg"):
        WgmmaConfig.parse("wg2k128sp")
    swizzled = WgmmaInstance(D.ACL_BF16, 128, swizzle=True)
    assert swizzled.shared_bytes == (128 + 4 * 128) * 128 * 2 + 1024
    assert "_wg2k128s_" in swizzled.kernel_name and swizzled.kernel_name != WgmmaInstance(D.ACL_BF16, 128).kernel_name
    assert {str(c) for c in DEFAULTS[64]} >= {"wg2k128s", "wg2k128ps", "wg2k64b2ps", "wg2k128sx3", "wg2k64b2sx3"}
    assert WgmmaConfig.parse("wg2k128sx3") == WgmmaConfig(2, 128, 1, False, True, 3) and str(
        WgmmaConfig(2, 64, 2, stages=3)
    ) == ("wg2k64b2x3")
    assert WgmmaConfig.parse("wg2k128x2") == WgmmaConfig(2, 128)
    for bad in ("wg2k128psx3", "wg2k128sx4", "wg2k128x3s"):
        with pytest.raises(ValueError, match="wg"):
            WgmmaConfig.parse(bad)
    assert WgmmaInstance(D.ACL_BF16, 128, swizzle=True, stages=3).shared_bytes == (128 + 6 * 128) * 256 + 1024
    with pytest.raises(ValueError, match="no wgmma flash kernel"):
        wgmma_flash_source(WgmmaInstance(D.ACL_BF16, 128, pipelined=True, stages=3))
    for d, configs in DEFAULTS.items():
        for c in configs:
            inst = c.instance(D.ACL_BF16, d)
            assert inst.config == c and inst.shared_bytes * c.blocks <= 227 * 1024
    with pytest.raises(ValueError, match="2 blocks a multiprocessor"):
        wgmma_flash_source(WgmmaInstance(D.ACL_BF16, 128, None, 2, 128, 2))  # 2 x 160 KiB


def test_issue_18_shapes_parse_and_fit() -> None:
    """``l`` (longest first across the grid), 3-4 warpgroups a block, 3-4 blocks of one; at most 4 warpgroups a
    multiprocessor (128 registers a thread), the shared memory of every candidate's blocks within the limit."""
    longest = WgmmaConfig.parse("wg2k64b2psl")
    assert longest == WgmmaConfig(2, 64, 2, True, True, longest=True) and str(longest) == "wg2k64b2psl"
    assert str(WgmmaConfig.parse("wg2k128wopsl")) == "wg2k128wopsl" and str(WgmmaConfig.parse("wg2k64b2slx3")) == (
        "wg2k64b2slx3"
    )
    assert WgmmaConfig.parse("wg4k64sl").instance(D.ACL_BF16, 64).threads == 512
    assert WgmmaConfig.parse("wg1k64b4s").blocks == 4 and WgmmaConfig.parse("wg3k128s").groups == 3
    for bad in ("wg2k64ls", "wg4k64b2", "wg3k64b2", "wg1k64b5", "wg4k128wop"):
        with pytest.raises(ValueError, match="wg"):
            WgmmaConfig.parse(bad)
    plain = WgmmaInstance(D.ACL_BF16, 64, None, 2, 64, 2, True, True)
    assert plain.kernel_name != dataclass_replace(plain, longest=True).kernel_name
    for d, configs in CANDIDATES.items():
        for c in configs:
            inst = c.instance(D.ACL_BF16, d)
            assert inst.config == c and (inst.shared_bytes + 1024) * c.blocks <= 228 * 1024
            assert "#define LONGEST 1" in wgmma_flash_source(inst)
    assert "#define LONGEST 0" in wgmma_flash_source(plain)


@pytest.mark.parametrize(("tiles", "heads"), [(8, 128), (6, 5), (1, 3), (4, 1)])
def test_block_order_twin_and_device_code(tmp_path: Path, tiles: int, heads: int) -> None:
    """Both orders visit every (batch x head, query tile) once, each head's longest tile first; ``l`` hands out
    every head's tile q before any tile q - 1. ``wg_block`` (the device code, built with g++) gives the same pairs."""
    blocks = tiles * heads
    for longest in (False, True):
        order = [block_of(x, tiles, blocks, longest) for x in range(blocks)]
        assert sorted(order) == [(bh, qt) for bh in range(heads) for qt in range(tiles)]
        for bh in range(heads):
            assert [qt for b, qt in order if b == bh] == list(range(tiles - 1, -1, -1))
        if longest:
            assert [qt for _, qt in order] == sorted((qt for _, qt in order), reverse=True)
    if shutil.which("g++") is None:
        pytest.skip("no g++ for the device code")
    found = re.search(r"ACL_DEV void wg_block\(.*?\n}\n", _HELPERS, re.S)
    assert found is not None
    for longest in (0, 1):
        program = (
            "#include <stdio.h>\n#define ACL_DEV inline\n"
            f"#define LONGEST {longest}\n"
            "struct dim3 { unsigned x; } blockIdx, gridDim;\nstruct FlashGrid { long long sq, heads, tiles; };\n"
            + found.group(0)
            + f"int main() {{ FlashGrid g{{0, 0, {tiles}}}; gridDim.x = {blocks};\n"
            f"  for (unsigned x = 0; x < {blocks}; ++x) {{ long long bh, qt; blockIdx.x = x; wg_block(g, bh, qt);\n"
            '    printf("%lld %lld\\n", bh, qt); } }\n'
        )
        src, exe = tmp_path / f"order{longest}.cpp", tmp_path / f"order{longest}"
        src.write_text(program)
        subprocess.run(["g++", "-O0", str(src), "-o", str(exe)], check=True, capture_output=True)
        out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split("\n")
        pairs = [tuple(map(int, line.split())) for line in out if line]
        assert pairs == [block_of(x, tiles, blocks, bool(longest)) for x in range(blocks)]


@pytest.mark.parametrize("groups", [1, 2, 3, 4])
@pytest.mark.parametrize("d", [64, 128])
def test_swizzled_q_of_every_warpgroup_in_a_wider_block(groups: int, d: int) -> None:
    """A block of 64-``groups`` Q rows (192 and 256 included): warpgroup w's descriptor (base + 64 x 64 w elements,
    1024-byte aligned) and its k16 steps over ``BR`` rows read exactly its rows 64 w .. 64 w + 63, and the K tiles
    after Q start 1024-byte aligned."""
    rows = 64 * groups

    def swz(byte: int) -> int:
        return byte ^ (((byte >> 7) & 7) << 4)

    assert (rows * d * 2) % 1024 == 0  # K's base
    for wg in range(groups):
        base = 2 * 64 * 64 * wg  # Q_WG_OFFSET in bytes
        assert base % 1024 == 0
        for kk in range(d // 16):
            start = base + 16 * kmajor_step(kk, rows, True)
            for r in range(64):
                for c in range(16):
                    canonical = start + (r // 8) * 1024 + (r % 8) * 128 + 2 * c
                    assert swz(canonical) == 2 * swizzled_offset(64 * wg + r, 16 * kk + c, rows)


def test_warp_specialised_configs() -> None:
    """Suffixes w (producer warpgroup), o (ping-pong, with w and p); their instances, shared memory and registers."""
    c = WgmmaConfig.parse("wg2k128wopsx3")
    assert c == WgmmaConfig(2, 128, 1, True, True, 3, True, True) and str(c) == "wg2k128wopsx3"
    assert str(WgmmaConfig(2, 128, specialised=True)) == "wg2k128w" and WgmmaConfig.parse("wg3k64wp").groups == 3
    assert WgmmaConfig.parse("wg2k128wpx3").stages == 3  # x3 with p: only warp-specialised
    for bad in ("wg2k128o", "wg2k128wo", "wg1k128wop", "wg2k128b2w", "wg5k128", "wg2k128ow", "wg2k128px3"):
        with pytest.raises(ValueError, match="wg"):
            WgmmaConfig.parse(bad)
    inst = c.instance(D.ACL_BF16, 128)
    assert inst.config == c and inst.threads == 384 and inst.rows == 128
    assert inst.shared_bytes == (128 + 6 * 128) * 256 + 1024 + 8 * 13 <= 227 * 1024
    assert WgmmaConfig.parse("wg2k128").instance(D.ACL_BF16, 128).threads == 256
    assert consumer_regs(2) == 232 and consumer_regs(3) == 152 and PRODUCER_REGS == 40
    assert 128 * PRODUCER_REGS + 2 * 128 * consumer_regs(2) <= 65536
    src = wgmma_flash_source(c.instance(D.ACL_FLOAT16, 64, D.ACL_FLOAT))
    assert "setmaxnreg_dec<40>" in src and "setmaxnreg_inc<232>" in src and "#define PINGPONG 1" in src
    assert "__launch_bounds__(KTHREADS, 1)" in src and "#define STAGES 3" in src
    with pytest.raises(ValueError, match="warp-specialised"):
        ws_flash_source(WgmmaInstance(D.ACL_BF16, 128, None, 2, 128, 1, False, False, 2, True, True))  # o without p
    with pytest.raises(ValueError, match="shared memory"):
        ws_flash_source(WgmmaConfig.parse("wg3k128wpsx3").instance(D.ACL_BF16, 128))
    ws = {str(c) for c in DEFAULTS[128] if c.specialised}
    assert ws == {"wg2k128w", "wg2k128wp", "wg2k128wop", "wg2k128wops", "wg2k128wopx3", "wg2k128wopsx3"}
    assert {str(c) for c in DEFAULTS[64] if c.specialised} == ws - {"wg2k128w", "wg2k128wp"}


@pytest.mark.parametrize(("pipelined", "pingpong", "consumers"), [(False, False, 2), (True, False, 2), (True, True, 2),
                                                                  (True, True, 3)])  # fmt: skip
@pytest.mark.parametrize("stages", [2, 3])
def test_warp_specialised_signalling_twin(pipelined: bool, pingpong: bool, consumers: int, stages: int) -> None:
    """The kernel's mbarrier / named-barrier protocol (tests/rocm/ws_protocol.py) under random schedules: no deadlock,
    every slot read holding the expected K or V tile, none refilled while held, every phase completed once a use."""
    for tiles in range(0, 8):
        for seed in range(25):
            ws_protocol.run(tiles, stages, consumers, pipelined, pingpong, seed % 5 == 0, seed)


def test_the_twin_finds_a_broken_ring_and_needs_no_flush_for_liveness() -> None:
    """Without consumer 0's first turn handed to it the ring deadlocks; the producer's early signal (before an empty
    wait) only shortens the consumers' wait: with K and V on their own slots the loops finish without it."""
    with pytest.raises(AssertionError, match="deadlock"):
        ws_protocol.run(3, 2, 2, True, True, False, 0, prearrive=False)
    for seed in range(20):
        ws_protocol.run(6, 2, 2, True, True, False, seed, flush=False)


def test_refusals() -> None:
    assert wgmma_refusal(D.ACL_BF16, 128, "sm_90", True, False) is None
    assert "sm_90" in (wgmma_refusal(D.ACL_BF16, 128, "sm_100", True, False) or "")
    assert "sm_90" in (wgmma_refusal(D.ACL_BF16, 128, "sm_80", True, False) or "")
    assert "float32" in (wgmma_refusal(D.ACL_FLOAT, 128, "sm_90", True, False) or "")
    assert "head dim 256" in (wgmma_refusal(D.ACL_BF16, 256, "sm_90", True, False) or "")
    assert "mask" in (wgmma_refusal(D.ACL_FLOAT16, 64, "sm_90", True, True) or "")
    assert "16-byte" in (wgmma_refusal(D.ACL_FLOAT16, 64, "sm_90", False, False) or "")


class ArchRecording(FakeProvider):
    """The fake provider, keeping the target each kernel was compiled for."""

    def compile(self, source: str, name: str, options: tuple[str, ...], arch: str) -> bytes:
        self.targets = {**getattr(self, "targets", {}), name: arch}
        return super().compile(source, name, options, arch)


def _backend(tmp_path: Path, arch: str = "sm_90", setting: str = "") -> Backend:
    from acl_rocm.backend import RocmBackend

    env = {"ACL_KERNEL_CACHE": str(tmp_path), "ACL_FLASH_CONFIG": setting}
    backend = RocmBackend(ArchRecording(blas=True, arch=arch), env)
    backend.runtime.ensure_device(0)
    backend.attention.path_override = "flash"  # type: ignore[attr-defined]
    return backend


@pytest.mark.parametrize(
    ("d", "dtype", "config"),
    [
        (128, "bfloat16", "wg2k128"),
        (64, "float16", "wg2k128"),
        (128, "float16", "wg2k128sx3"),
        (64, "bfloat16", "wg2k128ps"),
        (128, "bfloat16", "wg2k128wop"),
        (64, "float16", "wg2k128wopsx3"),
        (64, "bfloat16", "wg2k64b2psl"),  # issue 18's D 64 shapes: longest first, 4 / 3 warpgroups, 4 blocks of 1
        (64, "float16", "wg4k64sl"),
        (64, "bfloat16", "wg3k128sl"),
        (64, "bfloat16", "wg1k64b4psl"),
        (128, "bfloat16", "wg2k128sl"),
    ],
)
def test_a_wgmma_setting_compiles_it_for_sm_90a(tmp_path: Path, d: int, dtype: str, config: str) -> None:
    backend = _backend(tmp_path, setting=f"{d}={config}")
    flash = backend.attention.flash  # type: ignore[attr-defined]
    eager.run("FlashAttentionScore", backend, **_args(_rng("wg", d), dtype, "BNSD", 1, 4, 2, 200, 300, d, 3))
    inst = flash.last_instance
    assert isinstance(inst, WgmmaInstance) and str(inst.config) == config and flash.last_refusal is None
    targets = backend.provider.targets  # type: ignore[attr-defined]
    assert targets[inst.kernel_name] == "sm_90a"
    assert all(t == "sm_90" for name, t in targets.items() if name != inst.kernel_name)
    launch = [lc for lc in backend.provider.launches if lc.name == inst.kernel_name][-1]  # type: ignore[attr-defined]
    threads = 128 * (inst.groups + int(inst.specialised))  # a producer warpgroup beside the consumers
    tiles = -(-200 // inst.rows)  # 200 rows: 2 tiles of 128 (1 of 192 / 256, 4 of 64), 4 heads
    assert launch.block == (threads, 1, 1) and launch.grid == (tiles * 4, 1, 1)
    opted = backend.provider.dynamic_shared  # type: ignore[attr-defined]  # opted in above 48 KiB only
    assert opted.get(inst.kernel_name, inst.shared_bytes if inst.shared_bytes <= 48 * 1024 else 0) == inst.shared_bytes
    # the bench times it on sm_90 (issue 18's candidates where ACL_BENCH_FLASH_CONFIGS names them)
    assert config in flash.alternatives(d) or WgmmaConfig.parse(config) in CANDIDATES[d]


def test_calls_it_cannot_run_take_the_mma_sync_kernel_with_a_logged_reason(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    backend = _backend(tmp_path, setting="wg2k128")
    flash = backend.attention.flash  # type: ignore[attr-defined]
    rng = _rng("wg-refuse")
    mask = rng.uniform(size=(1, 1, 100, 100)) < 0.3
    cases = {
        "an explicit mask": _args(rng, "bfloat16", "BNSD", 1, 2, 2, 100, 100, 128, 0, attenMaskOptional=mask),
        "head dim 256": _args(rng, "bfloat16", "BNSD", 1, 2, 2, 100, 100, 256, 3),
    }
    with caplog.at_level(logging.DEBUG, logger="acl_rocm.attention"):
        for why, args in cases.items():
            eager.run("FlashAttentionScore", backend, **args)
            assert not isinstance(flash.last_instance, WgmmaInstance), why
            assert why in (flash.last_refusal or ""), flash.last_refusal
            assert f"ACL_FLASH_CONFIG=wg2k128 refused: {flash.last_refusal}" in caplog.text


@pytest.mark.parametrize(("d", "config"), [(128, "wg2k128ps"), (64, "wg2k64b2slx3")])
def test_it_is_the_sm_90_default_at_head_dims_64_and_128(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, d: int, config: str
) -> None:
    backend = _backend(tmp_path, setting="")
    flash = backend.attention.flash  # type: ignore[attr-defined]
    rng = _rng("wg-default", d)
    eager.run("FlashAttentionScore", backend, **_args(rng, "bfloat16", "BSND", 1, 4, 2, 200, 300, d, 3))
    inst = flash.last_instance
    assert isinstance(inst, WgmmaInstance) and str(inst.config) == config
    mask = rng.uniform(size=(1, 1, 100, 100)) < 0.3
    with caplog.at_level(logging.DEBUG, logger="acl_rocm.attention"):
        eager.run("FlashAttentionScore", backend, **_args(rng, "bfloat16", "BNSD", 1, 2, 2, 100, 100, d, 0,
                                                          attenMaskOptional=mask))  # fmt: skip
    assert not isinstance(flash.last_instance, WgmmaInstance)
    assert f"the sm_90 table's {config} refused: an explicit mask" in caplog.text


@pytest.mark.parametrize("arch", ["sm_80", "sm_100"])
def test_other_archs_refuse_it(tmp_path: Path, arch: str) -> None:
    backend = _backend(tmp_path, arch=arch, setting="wg2k128")
    flash = backend.attention.flash  # type: ignore[attr-defined]
    assert flash.wgmma_unavailable() is not None and not any(c.startswith("wg") for c in flash.alternatives(128))
    eager.run("FlashAttentionScore", backend, **_args(_rng("arch"), "bfloat16", "BNSD", 1, 2, 2, 100, 100, 128, 3))
    assert not isinstance(flash.last_instance, WgmmaInstance)
    assert arch in (flash.last_refusal or "")


def test_the_emulator_refuses_it(tmp_path: Path) -> None:
    from tests.rocm.kernel_emulator import EmulatedProvider, emulated_backend

    backend = emulated_backend(tmp_path, EmulatedProvider(blas=True))
    flash = backend.attention.flash  # type: ignore[attr-defined]
    assert "sm_90a" in (flash.wgmma_unavailable() or "")


def test_arch_specific_targets(tmp_path: Path) -> None:
    assert FakeProvider().arch_specific("sm_90") == "sm_90a" and FakeProvider().arch_specific("sm_80") is None
    calls: list[str] = []
    cache = KernelCache(lambda s, n, o, a: calls.append(a) or b"x", "sm_90", "v", "nvidia", None)
    assert cache.key("src", ()) != cache.key("src", (), "sm_90a")
    cache.image("src", "k", ())
    cache.image("src", "k", (), "sm_90a")
    cache.image("src", "k", (), "sm_90a")  # from memory
    assert calls == ["sm_90", "sm_90a"]
    backend = _backend(tmp_path, arch="sm_80")
    with pytest.raises(AclError, match="arch-specific target") as info:
        backend.function('extern "C" __global__ void __launch_bounds__(1) k() {}', "k", 0, arch_specific=True)  # type: ignore[attr-defined]
    assert info.value.code == 207000


# ----------------------------------------------------------------------------- nvcc
def _cubin(tmp_path: Path, name: str, source: str) -> str:
    """nvcc to an sm_90a cubin (ptxas runs: wgmma operands are checked); ptxas' -v report."""
    path = tmp_path / f"{name}.cu"
    path.write_text(source)
    done = subprocess.run(
        ["nvcc", "-cubin", "-arch=sm_90a", "-Xptxas", "-v", *compile_options(32), str(path), "-o", str(tmp_path / "k")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed here")
def test_wgmma_flash_sources_build_for_sm_90a_without_spills(tmp_path: Path) -> None:
    instances = [
        c.instance(dtype, d, sink)
        for dtype, sink in ((D.ACL_BF16, None), (D.ACL_FLOAT16, D.ACL_FLOAT))
        for d, configs in DEFAULTS.items()
        for c in configs
    ]
    for n, inst in enumerate(instances):
        report = _cubin(tmp_path, f"f{n}", wgmma_flash_source(inst))
        assert " 0 bytes spill stores" in report, report
        assert "serialized" not in report and "warning" not in report, report  # no serialised wgmma pipeline


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed here")
@pytest.mark.parametrize("d", sorted(CANDIDATES))
def test_issue_18_candidates_build_for_sm_90a_without_spills(tmp_path: Path, d: int) -> None:
    for dtype, sink in ((D.ACL_BF16, None), (D.ACL_FLOAT16, D.ACL_FLOAT)):
        for n, config in enumerate(CANDIDATES[d]):
            report = _cubin(tmp_path, f"c{n}", wgmma_flash_source(config.instance(dtype, d, sink)))
            assert " 0 bytes spill stores" in report, report
            assert "serialized" not in report and "warning" not in report, report


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed here")
def test_wgmma_tile_kernels_build_for_sm_90a(tmp_path: Path) -> None:
    for n, bf16, form, tb, ks in TILE_CASES[::3]:  # a third of them: each N, dtype, form and transposition
        report = _cubin(tmp_path, tile_kernel_name(n, bf16, form, tb, ks), tile_source(n, bf16, form, tb, ks))
        assert " 0 bytes spill stores" in report, report
    for n, bf16, form, tb, ks in SWIZZLED_TILE_CASES[::5]:
        name = tile_kernel_name(n, bf16, form, tb, ks, True)
        report = _cubin(tmp_path, name, tile_source(n, bf16, form, tb, ks, True))
        assert " 0 bytes spill stores" in report, report


@pytest.mark.parametrize("swizzle", [False, True])
def test_tile_operands_stay_inside_their_shared_regions(swizzle: bool) -> None:
    """Every element the tile kernel stages lands inside its operand's region (K 16 swizzled overran A's into B's
    and past the array: an illegal address on the H100, 2026-12-07)."""
    for n, _, _, tb, ks in SWIZZLED_TILE_CASES if swizzle else TILE_CASES:
        kd = 16 * ks
        a_elems, b_elems = tile_regions(n, tb, ks, swizzle)
        b_rows, b_cols = (kd, n) if tb else (n, kd)

        def at(r: int, c: int, rows: int, cols: int) -> int:
            return swizzled_offset(r, c, rows) if swizzle else interleaved_offset(r, c, cols)

        assert max(at(r, c, 64, kd) for r in range(64) for c in range(kd)) < a_elems, (n, tb, ks)
        assert max(at(r, c, b_rows, b_cols) for r in range(b_rows) for c in range(b_cols)) < b_elems, (n, tb, ks)


def test_tile_source_refuses_what_it_lacks() -> None:
    with pytest.raises(ValueError, match="no wgmma tile kernel"):
        tile_source(64, True, "sr", 0, 1)
    with pytest.raises(ValueError, match="no wgmma tile kernel"):
        tile_source(64, True, "ss", 0, 8)  # K 128 only swizzled
    with pytest.raises(ValueError, match="static shared memory"):
        tile_source(128, True, "ss", 0, 8, True)


def test_invalid_wgmma_setting_is_a_typed_error(tmp_path: Path) -> None:
    backend = _backend(tmp_path, setting="wg5k128")
    with pytest.raises(AclError, match="warpgroups 1-4") as info:
        eager.run("FlashAttentionScore", backend, **_args(_rng("bad"), "bfloat16", "BNSD", 1, 2, 2, 100, 100, 128, 3))
    assert info.value.code == AclErrorCode.ACL_ERROR_INVALID_PARAM

"""ACL_DECODE_CONFIG's parsing and split policies, and the stream scratch the fused decode kernel counts in."""

from __future__ import annotations

import ctypes

import pytest

from acl_core.errors import AclError
from acl_core.spec.runtime import CaptureMode
from acl_rocm.driver import SCRATCH_MIN, RocmDriver
from acl_rocm.kernels.attention_decode import (
    AUTO_BLOCK_KEYS,
    BLOCK_ALWAYS,
    BLOCK_HEADS,
    BLOCK_ROWS,
    BLOCK_THREADS,
    BLOCKS_PER_UNIT,
    DEFAULT_DECODE_SETTING,
    KEYS_PER_WARP,
    MAX_SPLITS,
    MIN_CHUNK,
    PIPE_BLOCKS_PER_UNIT,
    PIPE_STAGES,
    DecodeConfig,
    DecodeInstance,
    decode_source,
    decode_splits,
    parse_decode_config,
)
from acl_rocm.kernels.attention_decode_block import (
    BlockInstance,
    block_rows,
    block_source,
    block_threads,
    lanes_per_row,
)
from acl_rocm.ops.attention_decode import DecodeAttention
from tests.rocm.fake_provider import FakeProvider


def test_the_default_is_auto_over_the_two_kernel_path() -> None:
    """Empty: caches up to AUTO_BLOCK_KEYS on the short-cache block kernel, longer ones on split + combine."""
    cfg = parse_decode_config("")
    assert cfg == DecodeConfig()
    assert (cfg.fused, cfg.blocks_per_unit, cfg.min_chunk, cfg.kpw, cfg.eager, cfg.block) == (
        False,
        BLOCKS_PER_UNIT,
        MIN_CHUNK,
        KEYS_PER_WARP,
        False,
        AUTO_BLOCK_KEYS,
    )
    assert str(cfg) == (
        f"two,auto={AUTO_BLOCK_KEYS},bpu={BLOCKS_PER_UNIT},chunk={MIN_CHUNK},kpw={KEYS_PER_WARP}"
        f",bthreads={BLOCK_THREADS},brows={BLOCK_ROWS},beager=1,bheads={BLOCK_HEADS}"
    )
    assert (
        parse_decode_config("bheads=0").bheads == 0
        and parse_decode_config(str(parse_decode_config("bheads=0"))).bheads == 0
    )
    assert cfg.takes_block(AUTO_BLOCK_KEYS) and not cfg.takes_block(AUTO_BLOCK_KEYS + 1)
    assert not cfg.takes_block(0)


def test_the_path_words() -> None:
    """two / fused: every cache on that split path; block: every cache on the block kernel; auto[=N]: by length."""
    assert parse_decode_config("two").block == 0 and not parse_decode_config("two").takes_block(1)
    assert parse_decode_config("fused") == DecodeConfig(fused=True, block=0)
    assert parse_decode_config("fused,auto=96") == DecodeConfig(fused=True, block=96)
    assert parse_decode_config("auto=96,fused").block == 0  # the last word wins
    blk = parse_decode_config("block,bthreads=512,brows=4,beager=0")
    assert blk == DecodeConfig(block=BLOCK_ALWAYS, bthreads=512, brows=4, beager=False)
    assert blk.takes_block(10**9) and str(blk).startswith("two,block,")
    assert parse_decode_config("auto").block == AUTO_BLOCK_KEYS
    assert parse_decode_config("two,wide") == DecodeConfig(block=0, wide=True)
    assert parse_decode_config("block,bheads=1").bheads == 1 and "bheads=1" in str(parse_decode_config("bheads=1"))
    with pytest.raises(ValueError, match="wide with fused"):
        parse_decode_config("fused,wide")
    for text in (
        "block,bthreads=128",
        "auto=100,brows=2",
        "fused,auto",
        "two,kpw=4",
        "two,wide,bthreads=128",
        "auto,bheads=2",
    ):
        cfg = parse_decode_config(text)
        assert parse_decode_config(str(cfg)) == cfg, text


@pytest.mark.parametrize(
    "bad", ["auto=0", "auto=x", "bthreads=96", "bthreads=1024", "brows=3", "bheads=3", "beager=2", "blocks"]
)
def test_bad_block_items_are_named(bad: str) -> None:
    with pytest.raises(ValueError, match=bad.split("=")[0]):
        parse_decode_config(f"block,{bad}")


def test_block_kernel_shape_rules() -> None:
    """Lanes a row (16 bytes a lane), threads shrunk to fit the shared partials, rows cut for registers."""
    assert [lanes_per_row(d) for d in (8, 32, 40, 64, 128, 200, 256)] == [1, 4, 8, 8, 16, 32, 32]
    assert block_threads(256, 32, 2, 128) == 256 and block_threads(512, 32, 2, 128) == 512
    assert block_threads(512, 32, 8, 128) == 256  # 8 warps x 8 heads x 128 dims x 4 bytes = 32 KiB
    assert block_threads(256, 32, 8, 256) == 128 and block_threads(64, 64, 8, 256) == 64  # one warp at least
    assert block_rows(8, 2) == 8 and block_rows(8, 8) == 2 and block_rows(16, 1, 256) == 8
    assert block_rows(8, 2, 512) == 4 and block_rows(8, 2, 1024) == 2 and block_rows(1, 8, 1024) == 1


def test_block_source_names_its_shape() -> None:
    from acl_core.dtypes import DataType as D

    inst = BlockInstance(D.ACL_BF16, 128, 2, True, threads=512, rows=4, eager=False)
    src = block_source(inst)
    for line in ("#define THREADS 512", "#define LPR 16", "#define ROWS 4", "#define EAGER_KV 0", "#define GROUP 2"):
        assert line in src
    assert inst.name.startswith("acl_decode_block_bf16_d128_g2_") and inst.name in src
    assert BlockInstance(D.ACL_BF16, 128, 2, True).name != inst.name


def test_every_item_parses_and_round_trips() -> None:
    cfg = parse_decode_config(" fused, bpu=8 ,chunk=16,kpw=16,eager")
    assert cfg == DecodeConfig(fused=True, blocks_per_unit=8, min_chunk=16, kpw=16, eager=True, block=0)
    assert parse_decode_config(str(cfg)) == cfg
    cfg = parse_decode_config("two,dbuf,kpw=4")
    assert cfg == DecodeConfig(kpw=4, dbuf=True, block=0) and parse_decode_config(str(cfg)) == cfg
    assert parse_decode_config("fused,two,eager=1,eager=0") == DecodeConfig(block=0)  # the last word wins


@pytest.mark.parametrize(
    "bad", ["fast", "bpu=0", "bpu=65", "chunk=12", "chunk=4", "kpw=32", "kpw=x", "eager=2", "dbuf=2", "dbuf,kpw=16"]
)
def test_bad_items_are_named(bad: str) -> None:
    with pytest.raises(ValueError, match=bad.split("=")[0].split(",")[0]):
        parse_decode_config(f"fused,{bad}")


def test_an_invalid_environment_setting_raises_at_plan_time() -> None:
    class Holder:
        environ = {"ACL_DECODE_CONFIG": "fused,kpw=3"}

    planner = DecodeAttention(Holder())  # type: ignore[arg-type]
    with pytest.raises(AclError, match="ACL_DECODE_CONFIG='fused,kpw=3'") as info:
        _ = planner.config
    assert int(info.value.code) == 100000  # ACL_ERROR_INVALID_PARAM
    planner.use_config("fused")
    assert planner.config.fused and planner.config_key.startswith("fused")


def test_the_backend_runs_the_measured_default_where_nothing_is_set() -> None:
    """ACL_DECODE_CONFIG unset or empty: DEFAULT_DECODE_SETTING (the pipelined split kernel at PIPE_BLOCKS_PER_UNIT
    blocks a unit, the short-cache kernel launched programmatically); a setting of one's own starts plain."""

    class Holder:
        environ: dict[str, str] = {}

    planner = DecodeAttention(Holder())  # type: ignore[arg-type]
    cfg = planner.config
    assert cfg == parse_decode_config(DEFAULT_DECODE_SETTING)
    assert (cfg.pipe, cfg.pipe_bpu, cfg.bpdl, cfg.block) == (PIPE_STAGES, PIPE_BLOCKS_PER_UNIT, True, AUTO_BLOCK_KEYS)
    Holder.environ["ACL_DECODE_CONFIG"] = ""
    planner.use_config(None)
    assert planner.config == cfg
    Holder.environ["ACL_DECODE_CONFIG"] = "two"
    planner.use_config(None)
    assert (planner.config.pipe, planner.config.bpdl) == (0, False)
    pbpu = parse_decode_config("auto,pipe,pbpu=3")
    assert pbpu.pipe_bpu == 3 and parse_decode_config(str(pbpu)) == pbpu


@pytest.mark.parametrize("capacity", [1, 7, 8, 9, 96, 1000, 32_768])
@pytest.mark.parametrize(("bpu", "chunk"), [(1, 8), (4, 32), (8, 16), (64, 64)])
def test_policies_cover_the_cache_once(capacity: int, bpu: int, chunk: int) -> None:
    splits, size = decode_splits(1, 8, capacity, 132, bpu, chunk)
    assert size % chunk == 0 and 1 <= splits <= MAX_SPLITS
    assert (splits - 1) * size < capacity <= splits * size


def test_short_cache_policy_gives_more_blocks() -> None:
    """The Qwen3-0.6B decode (96 keys, 8 KV heads): 32-key chunks give 24 blocks, 8-key chunks 96."""
    assert decode_splits(1, 8, 96, 132) == (3, 32)
    assert decode_splits(1, 8, 96, 132, 4, 8) == (12, 8)


def test_fused_source_counts_and_resets() -> None:
    from acl_core.dtypes import DataType as D

    fused = decode_source(DecodeInstance(D.ACL_BF16, 128, 2, True, kpw=16, fused=True, eager=True), "split")
    assert "#define FUSED 1" in fused and "#define KPW 16" in fused and "#define EAGER_KV 1" in fused
    assert "ACL_ATOMIC_INC(counters" in fused and "counters[b * m.nkv + hk] = 0u" in fused
    two = DecodeInstance(D.ACL_BF16, 128, 2, True)
    assert "#define FUSED 0" in decode_source(two, "split") and two.split_name.startswith("acl_decode_split_")
    assert DecodeInstance(D.ACL_BF16, 128, 2, True, fused=True).split_name.startswith("acl_decode_fused_")


def test_bpdl_parses_round_trips_and_is_named_when_bad() -> None:
    """``bpdl[=0|1]``: in the setting's text only when on (the default's text is unchanged)."""
    assert parse_decode_config("auto,bpdl").bpdl and "bpdl" in str(parse_decode_config("auto,bpdl"))
    assert not parse_decode_config("auto,bpdl=0").bpdl and "bpdl" not in str(DecodeConfig())
    cfg = parse_decode_config("block,bpdl,bheads=0")
    assert parse_decode_config(str(cfg)) == cfg
    for bad in ("bpdl=2", "bsplit=4"):  # bsplit was removed (2026-12-07): named as unknown
        with pytest.raises(ValueError, match=bad.split("=")[0]):
            parse_decode_config(f"block,{bad}")


def test_block_source_waits_only_when_programmatic() -> None:
    """A ``bpdl`` instance waits on its predecessor before its first global read and triggers its successor right
    after; a plain one does neither."""
    from acl_core.dtypes import DataType as D

    plain = BlockInstance(D.ACL_BF16, 128, 1, True, share=2, rows=2)
    pdl = block_source(BlockInstance(D.ACL_BF16, 128, 1, True, share=2, rows=2, pdl=True))
    # the wait comes before the first global read (the query row), the trigger right after it
    assert pdl.index("ACL_PDL_WAIT();") < pdl.index("ACL_PDL_LAUNCH_DEPENDENTS();") < pdl.index("const st* q_row")
    assert "ACL_PDL_WAIT();" not in block_source(plain)
    assert plain.name != BlockInstance(D.ACL_BF16, 128, 1, True, share=2, rows=2, pdl=True).name


def _zeroed(address: int, nbytes: int) -> bool:
    return not any(ctypes.string_at(address, nbytes))


def test_stream_scratch_is_per_stream_zeroed_and_grows() -> None:
    provider = FakeProvider()
    driver = RocmDriver(provider)
    a, b = provider.stream_create(), provider.stream_create()
    sa = driver.stream_scratch(a, 100)
    assert _zeroed(sa, SCRATCH_MIN)
    assert driver.stream_scratch(a, SCRATCH_MIN) == sa  # the stream's launches share it
    sb = driver.stream_scratch(b, 100)
    assert sb != sa  # another stream's launches may overlap: their own
    ctypes.memset(sa, 7, 16)
    grown = driver.stream_scratch(a, SCRATCH_MIN + 1)
    assert grown not in (sa, sb) and _zeroed(grown, 2 * SCRATCH_MIN)
    assert sa in provider._buffers  # kept: launches still queued may use it
    driver.destroy_stream(a)
    assert sa not in provider._buffers and grown not in provider._buffers
    assert sb in provider._buffers
    driver.destroy_stream(b)
    assert sb not in provider._buffers


def test_a_capture_has_its_own_scratch_freed_with_its_graph() -> None:
    provider = FakeProvider(capture=True)
    driver = RocmDriver(provider)
    s = provider.stream_create()
    eager = driver.stream_scratch(s, 64)
    driver.capture_begin(s, CaptureMode.ACL_MODEL_RI_CAPTURE_MODE_RELAXED)
    captured = driver.stream_scratch(s, 64)
    assert captured != eager and _zeroed(captured, SCRATCH_MIN)
    assert driver.stream_scratch(s, 64) == captured
    graph = driver.capture_end(s)
    assert driver.stream_scratch(s, 64) == eager  # eager again after the capture
    assert captured in provider._buffers
    driver.graph_destroy(graph)
    assert captured not in provider._buffers and eager in provider._buffers
    driver.destroy_stream(s)


def test_scratch_regions_are_separate_buffers() -> None:
    """A region (the arg path's ``arg``) is a buffer of its own on the stream and in a capture, so one family's
    data never lands on another's counters; destroying the stream frees every region's buffer."""
    provider = FakeProvider(capture=True)
    driver = RocmDriver(provider)
    s = provider.stream_create()
    shared, arg = driver.stream_scratch(s, 64), driver.stream_scratch(s, 64, "arg")
    assert arg != shared and _zeroed(arg, SCRATCH_MIN)
    assert driver.stream_scratch(s, 128, "arg") == arg and driver.stream_scratch(s, 128) == shared
    driver.capture_begin(s, CaptureMode.ACL_MODEL_RI_CAPTURE_MODE_RELAXED)
    captured = driver.stream_scratch(s, 64, "arg")
    assert captured not in (arg, shared) and _zeroed(captured, SCRATCH_MIN)
    assert driver.stream_scratch(s, 64) not in (arg, shared, captured)
    graph = driver.capture_end(s)
    assert driver.stream_scratch(s, 64, "arg") == arg
    driver.graph_destroy(graph)
    assert captured not in provider._buffers
    driver.destroy_stream(s)
    assert arg not in provider._buffers and shared not in provider._buffers


def test_page_tiles_rules_and_sources() -> None:
    """``ACL_PAGED_DECODE=tile``: a tile of keys reads one table entry only where no tile crosses a page (blockSize
    and, with several splits, the chunk multiples of the tile's keys); its sources read the table once a tile (a
    tile ahead) and no longer per key row, while dense and per-row sources do not change."""
    from acl_core.dtypes import DataType as D
    from acl_rocm.kernels.attention_decode import DecodeInstance, decode_source, page_tiles

    assert page_tiles(128, 8, 64, 512) and page_tiles(16, 16, 1, 40)
    assert not page_tiles(16, 32, 1, 0) and not page_tiles(128, 16, 3, 40) and not page_tiles(128, 0, 1, 0)
    for kwargs in ({}, {"dbuf": True}, {"eager": True}, {"fused": True}):
        per_row = decode_source(DecodeInstance(D.ACL_BF16, 128, 2, True, paged="rows", **kwargs), "split")  # type: ignore[arg-type]
        tiled = decode_source(DecodeInstance(D.ACL_BF16, 128, 2, True, paged="rows", ptile=True, **kwargs), "split")  # type: ignore[arg-type]
        assert "dec_page(k_head" in per_row and "page_tile(" not in per_row
        assert "dec_page(k_head" not in tiled and "page_tile(" in tiled
    for span in (8, 2):
        src = block_source(BlockInstance(D.ACL_BF16, 64, 1, True, paged="nz", ptile=span))
        assert f"#define PSPAN {span}" in src and "dec_page(k_head" not in src and "kb[t / PSPAN]" in src
    plain = block_source(BlockInstance(D.ACL_BF16, 64, 1, True, paged="nz"))
    assert "page_tile(" not in plain and "dec_page(k_head" in plain


@pytest.mark.parametrize("programmatic", [True, False])
def test_bpdl_launches_the_block_kernel_programmatically(
    tmp_path: object, programmatic: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """``bpdl``: the short-cache kernel (whose source waits) is the call's one programmatic launch; a provider
    without it launches plainly and the debug log says why; without ``bpdl`` nothing is programmatic."""
    import logging

    import numpy as np

    from acl_core import eager
    from acl_rocm.backend import RocmBackend

    for setting, want in (("auto,bpdl", programmatic), ("auto", False)):
        provider = FakeProvider(programmatic=programmatic)
        backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp_path), "ACL_DECODE_CONFIG": setting})
        backend.runtime.ensure_device(0)
        rng = np.random.default_rng(3)
        q, k = (rng.uniform(-1, 1, s).astype(np.float16) for s in ((1, 1, 64), (1, 40, 32)))
        args = {"query": q, "key": [k], "value": [k], "numHeads": 2, "scaleValue": 0.125, "inputLayout": "BSH"}
        args["numKeyValueHeads"] = 1
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="acl_rocm.attention"):
            eager.run("IncreFlashAttention", backend, **args)
        names = [c.name for c in provider.launches if c.name.startswith("acl_decode_block_")]
        assert len(names) == 1, [c.name for c in provider.launches]
        assert provider.programmatic_launches == (names if want else []), setting
        assert ("launched plainly" in caplog.text) == (setting == "auto,bpdl" and not programmatic), caplog.text

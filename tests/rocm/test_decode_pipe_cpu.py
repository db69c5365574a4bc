"""``ACL_DECODE_CONFIG``'s pipe items, the pipelined split kernel's coverage and stage rules, and its source."""

from __future__ import annotations

import pytest

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.attention_decode import (
    PIPE_KEYS,
    PIPE_SMEM,
    PIPE_STAGES,
    DecodeConfig,
    DecodeInstance,
    decode_source,
    parse_decode_config,
)
from acl_rocm.kernels.attention_decode_pipe import pipe_covers, pipe_stages


def test_pipe_items_parse_and_round_trip() -> None:
    cfg = parse_decode_config("two,pipe")
    assert cfg == DecodeConfig(block=0, pipe=PIPE_STAGES, pkeys=PIPE_KEYS)
    assert parse_decode_config(str(cfg)) == cfg and "pipe=4,pkeys=16" in str(cfg)
    cfg = parse_decode_config("fused,pipe=2,pkeys=32,bpu=2")
    assert (cfg.fused, cfg.pipe, cfg.pkeys, cfg.blocks_per_unit) == (True, 2, 32, 2)
    assert parse_decode_config(str(cfg)) == cfg
    assert parse_decode_config("two,pipe,pipe=0") == DecodeConfig(block=0)  # the last word wins
    assert parse_decode_config("").pipe == 0, "a setting starts from the plain kernels (unlike the backend default)"


@pytest.mark.parametrize("bad", ["pipe=5", "pipe=1", "pipe=x", "pkeys=8", "pkeys=48", "pipe,wide"])
def test_bad_pipe_items_are_named(bad: str) -> None:
    with pytest.raises(ValueError, match=bad.split("=")[0].split(",")[-1]):
        parse_decode_config(f"two,{bad}")


def test_what_the_pipelined_kernel_covers() -> None:
    assert pipe_covers(128, 2, 2) is None and pipe_covers(64, 8, 2) is None and pipe_covers(256, 2, 2) is None
    assert "head dim 96" in str(pipe_covers(96, 2, 2)) and "head dim 320" in str(pipe_covers(320, 1, 2))
    assert "GQA group 4" in str(pipe_covers(256, 4, 2)) and "4-byte" in str(pipe_covers(128, 2, 4))


def test_stages_are_clamped_to_the_shared_budget() -> None:
    assert pipe_stages(4, 16, 128, 2, PIPE_SMEM) == 4  # 32 KiB
    assert pipe_stages(8, 16, 128, 2, PIPE_SMEM) == 5  # 8 KiB a stage
    assert pipe_stages(4, 16, 256, 2, PIPE_SMEM) == 2
    assert pipe_stages(2, 64, 128, 2, PIPE_SMEM) == 1  # under two: the op keeps the register-tile kernel


def test_pipe_source_and_names() -> None:
    plain = DecodeInstance(D.ACL_BF16, 128, 2, True)
    piped = DecodeInstance(D.ACL_BF16, 128, 2, True, pipe=4, pkeys=16)
    src, base = decode_source(piped, "split"), decode_source(plain, "split")
    assert "acl_cp_async16(" in src and "#define PIPE_STAGES 4" in src and "#define PIPE_KEYS 16" in src
    assert "acl_cp_async16(" not in base and "pipe_raw" not in base and piped.split_name != plain.split_name
    assert "dec_keep(" not in src.split(piped.split_name)[1], "the pipelined body replaces the register tiles"
    fused = decode_source(DecodeInstance(D.ACL_BF16, 128, 2, True, fused=True, pipe=3, pkeys=32), "split")
    assert "#define FUSED 1" in fused and "ACL_ATOMIC_INC" in fused and "#define PIPE_KEYS 32" in fused

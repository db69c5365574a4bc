"""``ACL_DECODE_CONFIG``'s split-path items (``pdyn``, ``pskip``, ``pmma``, ``pcomb``, ``ppdl``): parsing, what each
puts in the kernel sources, the stage budget, and what the planner launches (on the fake provider)."""

from __future__ import annotations

import hashlib

import pytest

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.attention_decode import DecodeConfig, DecodeInstance, decode_source, parse_decode_config
from acl_rocm.kernels.attention_decode_pipe import pipe_covers, pipe_dynamic_bytes, pipe_mask_covers, pipe_pitch
from acl_rocm.kernels.prelude import PRELUDE

PLAIN_SOURCES = {
    # sha1[:10] of the split / combine sources of instances without the new items (unchanged by them), the shared
    # prelude left out (it grows for other kernels: acl_mul_rn, 2026-12-07, changed no decode line)
    "register": ("a1959978c1", "d175854e10"),
    "pipe": ("0f20d1f28a", "3d66b9684e"),
}


def _digest(inst: DecodeInstance, which: str) -> str:
    source = decode_source(inst, which)
    assert PRELUDE in source
    return hashlib.sha1(source.replace(PRELUDE, "").encode()).hexdigest()[:10]


def test_items_parse_and_round_trip() -> None:
    cfg = parse_decode_config("two,pipe=3,pkeys=64,pmma,pskip,pcomb,ppdl,pdyn")
    assert (cfg.pdyn, cfg.pskip, cfg.pmma, cfg.pcomb, cfg.ppdl) == (True,) * 5
    assert parse_decode_config(str(cfg)) == cfg
    cfg = parse_decode_config("fused,pcomb,ppdl")  # the combine and the launches: any split path
    assert cfg.pcomb and cfg.ppdl and not cfg.pipe and parse_decode_config(str(cfg)) == cfg
    assert parse_decode_config("two,pipe=16,pdyn").pipe == 16
    assert parse_decode_config("two,pipe,pcomb,pcomb=0") == DecodeConfig(block=0, pipe=4)


@pytest.mark.parametrize("item", ["pdyn", "pskip", "pmma"])
def test_pipe_items_need_pipe(item: str) -> None:
    with pytest.raises(ValueError, match=f"{item} without pipe"):
        parse_decode_config(f"two,{item}")


def test_instances_without_the_items_keep_their_sources() -> None:
    """The default kernels' sources (and names) are byte-identical to what they were before these items."""
    plain = DecodeInstance(D.ACL_BF16, 128, 2, True)
    piped = DecodeInstance(D.ACL_BF16, 128, 2, True, pipe=4, pkeys=16)
    assert (_digest(plain, "split"), _digest(plain, "combine")) == PLAIN_SOURCES["register"]
    assert (_digest(piped, "split"), _digest(piped, "combine")) == PLAIN_SOURCES["pipe"]


def test_what_each_item_puts_in_the_sources() -> None:
    base = {"pipe": 4, "pkeys": 64}
    dyn = decode_source(DecodeInstance(D.ACL_BF16, 128, 2, True, dyn=True, **base), "split")
    assert "extern __shared__ AclVec<unsigned, 4> pipe_raw[];" in dyn
    skip = decode_source(DecodeInstance(D.ACL_BF16, 128, 2, True, skip=True, **base), "split")
    assert "cp.async.ca.shared.global" in skip and "pipe_mask_copy(PIPE_SLOT(" in skip and "pipe_kept(" in skip
    mma = decode_source(DecodeInstance(D.ACL_BF16, 128, 2, True, mma=True, dyn=True, **base), "split")
    assert "acl_mma<true>(acc[n], pa, vb);" in mma and "#define PIPE_PITCH (HEAD_DIM + 8)" in mma
    assert "acl_mma<false>" in decode_source(DecodeInstance(D.ACL_FLOAT16, 64, 4, True, mma=True, **base), "split")
    comb = DecodeInstance(D.ACL_BF16, 128, 2, True, comb=True, fused=True)
    assert "dec_combine_heads(m, (const volatile float*)part" in decode_source(comb, "split")
    assert "dec_combine_heads(m, part, out, lse, sink" in decode_source(comb, "combine")
    pdl = DecodeInstance(D.ACL_BF16, 128, 2, True, pdl=True)
    for which in ("split", "combine"):
        body = decode_source(pdl, which).split("__global__")[1].split(") {", 1)[1]  # the kernel's body
        first_read = min(i for i in (body.find("threadIdx"), body.find("dec_combine")) if i >= 0)
        assert body.index("ACL_PDL_WAIT();") < body.index("ACL_PDL_LAUNCH_DEPENDENTS();") < first_read


def test_pitch_dynamic_bytes_and_coverage() -> None:
    assert pipe_pitch(128, False) == 128 and pipe_pitch(128, True) == 136
    inst = DecodeInstance(D.ACL_BF16, 128, 2, True, pipe=3, pkeys=64, dyn=True, mma=True)
    assert pipe_dynamic_bytes(inst) == 3 * 2 * 64 * 136 * 2
    assert pipe_dynamic_bytes(DecodeInstance(D.ACL_BF16, 128, 2, True, pipe=4, pkeys=16)) == 0
    assert pipe_covers(128, 8, 2) is not None and pipe_covers(128, 8, 2, mma=True) is None
    assert "16 rows" in str(pipe_covers(64, 32, 2, mma=True))
    assert pipe_mask_covers((4096, 0, 0, 1), 4096, 256) is None
    assert "key stride" in str(pipe_mask_covers((1, 0, 0, 4096), 4096, 256))
    assert "4-byte words" in str(pipe_mask_covers((4095, 0, 0, 1), 4095, 256))
    assert "4-byte words" in str(pipe_mask_covers((4096, 0, 0, 1), 4096, 258))


def test_the_planner_launches_what_the_items_say(tmp_path: object) -> None:
    """On the fake provider: pmma passes its dynamic bytes (opted in past 48 KiB), ppdl makes both launches
    programmatic, pcomb puts the partials in the stream's scratch (no temporary); without them, as before."""
    import numpy as np

    from acl_core import eager
    from acl_rocm.backend import RocmBackend
    from tests.rocm.decode_cases import decode_args
    from tests.rocm.fake_provider import FakeProvider

    provider = FakeProvider()
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp_path)})
    backend.runtime.ensure_device(0)
    runner = backend.attention  # type: ignore[attr-defined]
    calls: list[object] = []
    real = runner._decode_call

    def spy(launch: object) -> object:
        found = real(launch)
        calls.append(found[0])
        return found

    runner._decode_call = spy
    eager.run("IncreFlashAttention", backend, **decode_args(np.random.default_rng(1), "bfloat16", 1, 16, 8, 4096, 128))
    decode = runner.decode
    decode.use_config("two,pipe=3,pkeys=64,pmma,pcomb,ppdl")
    prog = decode.plan(calls[-1])
    split, combine = prog.steps
    assert split.config.shared_bytes == 3 * 2 * 64 * 136 * 2
    assert provider.dynamic_shared[split.function[0]] == split.config.shared_bytes
    assert split.programmatic and combine.programmatic
    assert not prog.temps and prog.scratch > 0 and prog.scratch_region == "decode-partials"
    # dynamic bytes under 48 KiB beside large static ones (GQA 8: the warps' merge) are opted in too: a launch
    # without the attribute may pass only 48 KiB less the static bytes (CUDA_ERROR_INVALID_VALUE on the H100)
    eager.run("IncreFlashAttention", backend, **decode_args(np.random.default_rng(2), "float16", 2, 16, 2, 4097, 128))
    decode.use_config("two,pipe=2,pkeys=32,pmma,pskip,chunk=32")
    split, _ = decode.plan(calls[-1]).steps
    assert 0 < split.config.shared_bytes <= 49152
    assert provider.dynamic_shared[split.function[0]] == split.config.shared_bytes
    decode.use_config("two,pipe")
    split, combine = (prog := decode.plan(calls[-1])).steps
    assert split.config.shared_bytes == 0 and not (split.programmatic or combine.programmatic) and prog.temps

"""Shared pieces of the decode-attention GPU-tier tests: call arguments, the accuracy check, split counts."""

from __future__ import annotations

from collections.abc import Mapping

import ml_dtypes
import numpy as np

from acl_core.backend import Backend
from acl_core.spec.ops.attention import _to_layout
from acl_rocm.kernels.attention_decode import decode_splits, parse_decode_config
from tests.conftest import assert_close

TOL = {"float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2)}
"""The decode path's accuracy on attentionOut (atol, rtol) by dtype; lse to 1e-4 absolute."""


def decode_args(
    rng: np.random.Generator,
    dtype: str,
    b: int,
    nq: int,
    nkv: int,
    skv: int,
    d: int,
    layout: str = "BSND",
    **extra: object,
) -> dict:
    """IncreFlashAttention arguments: one query token, a ``skv``-key cache, uniform values in [-1, 1)."""

    def make(heads: int, s: int) -> np.ndarray:
        return _to_layout(rng.uniform(-1, 1, (b, heads, s, d)), layout).astype(np.dtype(dtype))

    return {
        "query": make(nq, 1),
        "key": [make(nkv, skv)],
        "value": [make(nkv, skv)],
        "numHeads": nq,
        "scaleValue": 1 / np.sqrt(d),
        "inputLayout": layout,
        "numKeyValueHeads": nkv,
        **extra,
    }


def assert_outputs_close(
    got: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray], dtype: str, note: str
) -> None:
    """Every output of a decode call within :data:`TOL` of the reference's (lse within 1e-4)."""
    atol, rtol = TOL[dtype]
    for name, value in expected.items():
        assert got[name].shape == value.shape, f"{note} {name}"
        assert_close(got[name], value, atol=atol if name == "attentionOut" else 1e-4, rtol=rtol)


def split_count(rocm: Backend, config: str, b: int, nkv: int, skv: int) -> int:
    """Splits the split-KV path cuts a (b, nkv, skv) cache into under ``config``."""
    cfg = parse_decode_config(config)
    units = rocm.properties.compute_units  # type: ignore[attr-defined]
    return decode_splits(b, nkv, skv, units, cfg.blocks_per_unit, cfg.min_chunk)[0]


def fia_v5_args(
    rng: np.random.Generator, args: Mapping[str, object], nq: int, nkv: int, mask: np.ndarray, layout: str = "BSND"
) -> dict:
    """FusedInferAttentionScoreV5 over ``args``'s decode call in fp16, with ``mask``, softmaxLse and a sink a head."""
    key, value = args["key"], args["value"]
    assert isinstance(key, list) and isinstance(value, list)
    return {
        "query": np.asarray(args["query"]).astype(np.float16),
        "key": [key[0].astype(np.float16)],
        "value": [value[0].astype(np.float16)],
        "attenMaskOptional": mask,
        "numHeads": nq,
        "scaleValue": args["scaleValue"],
        "inputLayout": layout,
        "numKeyValueHeads": nkv,
        "softmaxLseFlag": True,
        "learnableSinkOptional": rng.uniform(-2, 2, nq).astype(ml_dtypes.bfloat16),
    }


def run_decode(rocm: Backend, op: str, args: Mapping[str, object]) -> tuple[dict, object]:
    """``op`` on rocm's decode path: its outputs and the DecodeCall the attention runner planned (the last)."""
    from acl_core import eager

    runner = rocm.attention  # type: ignore[attr-defined]
    calls: list[object] = []
    real = runner._decode_call

    def spy(launch: object) -> object:
        found = real(launch)
        if found[0] is not None:
            calls.append(found[0])
        return found

    runner._decode_call = spy
    try:
        got = eager.run(op, rocm, **args)
    finally:
        del runner._decode_call
    assert runner.last_path == "decode" and calls, f"{op} did not take the decode path"
    return got, calls[-1]


def tail_masked_args(
    rng: np.random.Generator, rocm: Backend, config: str, emulated: bool, d_emulated: int = 64
) -> tuple[dict, int, int]:
    """A Qwen3-like bf16 IncreFlashAttention call under ``config``: B2, 16/8 heads (4/2 emulated), D 128, a 32k cache
    (200 keys emulated) whose unwritten tail is masked per batch; (args, nq, nkv). Asserts several splits."""
    skv = 200 if emulated else 32_768
    d = d_emulated if emulated else 128
    nq, nkv = (4, 2) if emulated else (16, 8)
    assert split_count(rocm, config, 2, nkv, skv) > 1, "the cache must take several splits"
    args = decode_args(rng, "bfloat16", 2, nq, nkv, skv, d)
    filled = np.array([skv // 3 + 5, skv])
    args["attenMask"] = (np.arange(skv)[None, :] >= filled[:, None])[:, None, None, :]
    return args, nq, nkv

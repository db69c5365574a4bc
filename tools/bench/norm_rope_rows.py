"""Rows of the ops suite for QkvRmsNormRopeCache, beside torch's composition of the same work.

Qwen3-0.6B's attention prologue (Nq 16, Nk = Nv 8, D 128, bf16, PA_NZ caches of 128-token blocks): a decode
step of 1 and 8 tokens (latency-bound: in us a call; ``--kernels`` adds the GPU time a call) and a prefill of 4096
tokens (``--sizes full``; 256 in the small size; GB/s over the bytes read and written). On rocm each row runs once per
``ACL_QKV_ROPE_CONFIG`` choice (the runner's choice forced for the row, the op labelled with it). torch: ``rms_norm``
of the q and k heads, the half-and-half rotation as its expression, and ``index_put_`` of the k and v rows into
the caches seen token-major (``permute(0, 2, 1, 3)`` of the NZ layout) at the slots' (block, row) pairs, computed
once outside the timing as the ScatterPaKvCache row does; -1 slots dropped the same way. Two more decode rows
write ND caches (cacheMode PA_BNSD, the Qwen3 runner's layout; torch's ``index_put_`` on them as they are).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from acl_core import aclnn
from acl_core.dtypes import DataType as D
from acl_core.eager import empty, to_device

if TYPE_CHECKING:
    from acl_tools.bench.ops import Suite

OPS: tuple[str, ...] = ("QkvRmsNormRopeCache",)
"""The ``--only`` names of these rows."""

HEADS = (16, 8, 8)
"""Qwen3-0.6B's query, key and value heads."""
HEAD_DIM, BLOCK_SIZE = 128, 128
DECODE_TOKENS = (1, 8)


def _configs(suite: Suite) -> tuple[Any, tuple[str | None, ...]]:
    """The rocm runner and its choices, or (None, (None,)) on a backend without them."""
    runner = getattr(suite.backend, "norm_rope_cache", None)
    if runner is None or not hasattr(runner, "forced"):
        return None, (None,)
    from acl_rocm.ops.norm_rope_cache import CONFIGS

    return runner, tuple(CONFIGS)


def run_cases(suite: Suite) -> None:
    """Add every row (only where ``--only`` lets it run)."""
    if not suite.wanted("QkvRmsNormRopeCache"):
        return
    prefill = 4096 if suite.sizes.norm[0] >= 8192 else 256
    for tokens in (*DECODE_TOKENS, prefill):
        _row(suite, tokens, decode=tokens in DECODE_TOKENS)
    for tokens in DECODE_TOKENS:  # the Qwen3 runner's ND caches (PA_BNSD), the runner's own choice of lanes
        _row(suite, tokens, decode=True, nd=True)


def _row(suite: Suite, tokens: int, decode: bool, nd: bool = False) -> None:
    from acl_tools.bench.ops import Case

    torch = suite.torch
    nq, nk, nv = HEADS
    d, bs, dtype = HEAD_DIM, BLOCK_SIZE, D.ACL_BF16
    b, s = (tokens, 1) if decode else (1, tokens)  # decode: a batch of one-token steps; prefill: one sequence
    blocks = 2 * b * -(-s // bs) + 4
    slots = suite.rng.permutation(blocks * bs)[:tokens].astype(np.int64)
    if tokens > 2:
        slots[-1] = -1  # a padding token
    width = (nq + nk + nv) * d
    cache_shape = (blocks, bs, nk, d) if nd else (blocks, nk * d // 16, bs, 16)

    def acl() -> tuple[Callable[[], None], Any]:
        args: dict[str, Any] = {
            "qkv": suite.array((tokens, width), dtype),
            "qGamma": suite.array((d,), dtype),
            "kGamma": suite.array((d,), dtype),
            "cos": suite.array((tokens, d), dtype),
            "sin": suite.array((tokens, d), dtype),
            "index": to_device(slots, suite.backend),
            "qOut": empty((tokens, nq * d), dtype, suite.backend),
            "kCache": empty(cache_shape, dtype, suite.backend),
            "vCache": empty(cache_shape, dtype, suite.backend),
            "qkvSize": aclnn.aclCreateIntArray([b, s, nq + nk + nv, d]),
            "headNums": aclnn.aclCreateIntArray([nq, nk, nv]),
            "epsilon": 1e-6,
            "cacheModeOptional": "PA_BNSD" if nd else "PA_NZ",
        }
        return suite.prepared("QkvRmsNormRopeCache", args)

    def torch_fn() -> Callable[[], object]:
        qkv = suite.tensor((tokens, nq + nk + nv, d), dtype)
        qg, kg = suite.tensor((d,), dtype), suite.tensor((d,), dtype)
        cos, sin = suite.tensor((tokens, 1, d), dtype), suite.tensor((tokens, 1, d), dtype)
        kc = torch.empty(cache_shape, dtype=torch.bfloat16, device=suite.device)
        vc = torch.empty_like(kc)
        keep = torch.from_numpy(slots >= 0).to(suite.device)
        kept = torch.from_numpy(slots[slots >= 0]).to(suite.device)
        blk, row = kept // bs, kept % bs
        if nd:  # [blocks, bs, N, D] as it is
            k_rows, v_rows, piece = kc, vc, (nk, d)
        else:  # [blocks, bs, W/16, 16] views of the NZ caches
            k_rows, v_rows, piece = kc.permute(0, 2, 1, 3), vc.permute(0, 2, 1, 3), (nk * d // 16, 16)
        half = d // 2
        rms_norm = torch.nn.functional.rms_norm

        def rope(y: Any) -> Any:
            return y * cos + torch.cat((-y[..., half:], y[..., :half]), dim=-1) * sin

        def run() -> object:
            q = rope(rms_norm(qkv[:, :nq], (d,), weight=qg, eps=1e-6))
            k = rope(rms_norm(qkv[:, nq : nq + nk], (d,), weight=kg, eps=1e-6))
            v = qkv[:, nq + nk :]
            k_rows.index_put_((blk, row), k[keep].reshape(-1, *piece))
            v_rows.index_put_((blk, row), v[keep].reshape(-1, *piece))
            return q.reshape(tokens, nq * d)

        return run

    runner, configs = (None, (None,)) if nd else _configs(suite)
    kept = int((slots >= 0).sum())
    nbytes = 2 * (tokens * width + 2 * tokens * d + 2 * d + tokens * nq * d + kept * (nk + nv) * d) + tokens * 8
    label = f"{tokens} tok x {nq}/{nk}/{nv} x {d}"
    for config in configs:
        op = "QkvRmsNormRopeCache" + (" PA_BNSD" if nd else "") + ("" if config is None else f" {config}")
        if runner is not None:
            runner.forced = config
        try:
            if decode:
                case = Case(op, label, dtype.short, "us/call", 1.0, note="torch: rms_norm x2, rope, index_put_ x2")
                suite.case(case, acl, torch_fn, "QkvRmsNormRopeCache")  # not interleaved: --kernels profiles it
            else:
                case = Case(op, label, dtype.short, "GB/s", nbytes, note="torch: rms_norm x2, rope, index_put_ x2")
                suite.case(case, acl, torch_fn, "QkvRmsNormRopeCache")
        finally:
            if runner is not None:
                runner.forced = None

"""Which aclnn attention operator computes prefill and decode, and the exact arguments each one takes.

The declared specs decide what is possible: PromptFlashAttention, IncreFlashAttention and
FusedInferAttentionScore take FLOAT16 / BFLOAT16 only (as in CANN), so FLOAT32 runs both phases
through FlashAttentionScore, whose decode call (one query row) needs no mask at all.

Causal masking, for a prefill of S new tokens after ``start`` cached ones (query row i may see keys
j <= start + i):

* ``fa`` / ``fia``: sparseMode 3 (rightDownCausal) with the compressed 2048x2048 mask CANN asks for.
* ``pfa``: a full boolean mask (True = masked) read through a view of a [C, C] causal table at row
  ``start``, with nextTokens = start saying the same thing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from acl_core.dtypes import DataType
from acl_tools.qwen3.device import tensor_list

UNBOUNDED = 2147483647
"""preTokens / nextTokens meaning "no bound" (INT32_MAX)."""
COMPRESSED_MASK = 2048
PREFILL_OPS = ("fa", "pfa", "fia")
DECODE_OPS = ("fa", "ifa", "fia")
OP_NAMES = {
    "fa": "FlashAttentionScore",
    "pfa": "PromptFlashAttention",
    "ifa": "IncreFlashAttention",
    "fia": "FusedInferAttentionScore",
}
HALF = (DataType.ACL_FLOAT16, DataType.ACL_BF16)


@dataclass(frozen=True)
class AttentionChoice:
    """The operators used for prefill and for decode."""

    prefill: str
    decode: str

    def describe(self) -> dict[str, str]:
        """The aclnn operator names, for reports."""
        return {"prefill": OP_NAMES[self.prefill], "decode": OP_NAMES[self.decode]}


def choose(dtype: DataType, prefill: str | None = None, decode: str | None = None) -> AttentionChoice:
    """The default operators for ``dtype`` (half: FA + IFA; fp32: FA + FA), checked against the specs.

    Prefill is FlashAttentionScore in every dtype (torch_npu's npu_fusion_attention, the prefill call of
    vllm-ascend): on rocm a large causal FA call runs cuDNN's fused SDPA, where PromptFlashAttention runs
    the one-block-per-query-row kernel (the 512-token prefill measured at 0.49x transformers ran PFA).
    """
    half = dtype in HALF
    p = prefill or "fa"
    d = decode or ("ifa" if half else "fa")
    if p not in PREFILL_OPS:
        raise ValueError(f"prefill attention {p!r} is not one of {PREFILL_OPS}")
    if d not in DECODE_OPS:
        raise ValueError(f"decode attention {d!r} is not one of {DECODE_OPS}")
    for phase, op in (("prefill", p), ("decode", d)):
        if op != "fa" and not half:
            raise ValueError(
                f"{OP_NAMES[op]} ({phase}) is declared for float16/bf16 only, as in CANN; "
                f"{dtype.short} uses FlashAttentionScore ('fa')"
            )
    return AttentionChoice(p, d)


@dataclass
class AttentionCall:
    """Everything an attention call needs besides the operator choice."""

    query: Any
    key: Any
    value: Any
    out: Any
    heads: int
    kv_heads: int
    scale: float
    start: int
    new: int
    stats: tuple[Any, Any] | None = None
    mask: Any = None
    """Prefill: the compressed mask (fa, fia) or the causal view for rows start.. (pfa). Decode: None, or a
    [B, 1, 1, C] mask of the cache positions not yet written (True = masked) when the key/value views span
    the whole capacity C, so that the call's shapes do not move with the position."""


def prefill_args(op: str, c: AttentionCall) -> tuple[str, Sequence[Any]]:
    """(operator name, arguments in official order) of a causal prefill of ``c.new`` tokens after ``c.start``."""
    if op == "fa":
        assert c.stats is not None
        return OP_NAMES[op], (
            c.query, c.key, c.value, None, None, None, c.mask, None,
            c.scale, 1.0, UNBOUNDED, 0, c.heads, "BSND", 0, 3,
            c.stats[0], c.stats[1], None, c.out,
        )  # fmt: skip
    if op == "pfa":
        return OP_NAMES[op], (
            c.query, c.key, c.value, None, c.mask, None,
            c.heads, c.scale, UNBOUNDED, c.start, "BSND", c.kv_heads, c.out,
        )  # fmt: skip
    return OP_NAMES["fia"], _fia(c, c.mask, 3)


def decode_args(op: str, c: AttentionCall) -> tuple[str, Sequence[Any]]:
    """(operator name, arguments) of one decode step: one query row that sees every cached key ``c.mask`` leaves."""
    if op == "fa":
        assert c.stats is not None
        return OP_NAMES[op], (
            c.query, c.key, c.value, None, None, None, c.mask, None,
            c.scale, 1.0, UNBOUNDED, UNBOUNDED, c.heads, "BSND", 0, 0,
            c.stats[0], c.stats[1], None, c.out,
        )  # fmt: skip
    if op == "ifa":
        return OP_NAMES[op], (
            c.query, tensor_list([c.key]), tensor_list([c.value]), None, c.mask, None,
            c.heads, c.scale, "BSND", c.kv_heads, c.out,
        )  # fmt: skip
    return OP_NAMES["fia"], _fia(c, c.mask, 0)


def _fia(c: AttentionCall, mask: Any, sparse_mode: int) -> tuple[Any, ...]:
    return (
        c.query, tensor_list([c.key]), tensor_list([c.value]), None, mask, None, None,
        None, None, None, None, None, None, None, None, None, None,
        c.heads, c.scale, UNBOUNDED, 0, "BSND", c.kv_heads, sparse_mode, 0, 0, 0, False,
        c.out, None,
    )  # fmt: skip

"""Qwen3 on the aclnn contract: prefill and KV-cached decode, every step an aclnn operator on a stream.

One decoder layer, for B sequences of S new tokens starting at cache position ``start``; ``n`` holds the
layer's normalised input, left there by the previous layer's last operator (layer 0: aclnnRmsNorm)::

    qkv  = n @ [Wq; Wk; Wv]^T                              aclnnMm (one GEMM, weights concatenated at load)
    q, k = RmsNorm over each head of qkv's q / k part      aclnnRmsNorm (q_norm, k_norm; strided views)
    q    = rope(q);  cache.k[start:start+S] = rope(k)      aclnnRotaryPositionEmbedding mode 0 (rotate_half)
    cache.v[start:start+S] = v                             aclnnInplaceCopy (strided views)
    a    = causal GQA attention(q, cache.k, cache.v)       see attention.py
    h   += a @ Wo^T;  n = RmsNorm(h, post_attention_layernorm)       aclnnMm, aclnnInplaceAddRmsNorm
    g    = n @ [Wgate; Wup]^T                              aclnnMm (one GEMM)
    h   += SwiGlu(g) @ Wdown^T;  n = RmsNorm(h, next norm)           aclnnSwiGlu, aclnnMm, aclnnInplaceAddRmsNorm

where the next norm is the next layer's input_layernorm, or after the last layer the final ``norm``;
``logits = n @ lm_head^T`` (the embedding matrix when tied; a prefill that keeps one row per sequence
reads a strided view of the last rows). The residual sum InplaceAddRmsNorm normalises is its exact one
(CANN's AddRmsNorm), not h rounded to the model dtype first.
then ``logits = RmsNorm(h, norm) @ lm_head^T`` (the embedding matrix when tied). Greedy decoding picks
the next token with aclnnArgMax on the device and feeds it straight back to aclnnEmbedding; sampling
copies the logits (aclnnCast to float32 first) to the host. The decode step never moves a buffer: the
cache position is an int64 tensor on the device (one per sequence) that the step reads and advances
(aclnnInplaceAdds); the cos/sin rows are gathered at it (aclnnEmbedding on the tables), q and k are
rotated in place by one aclnnApplyRotaryPosEmb where the head dim is one it takes (64, 128), k and v
are put at it in the cache by one aclnnScatterPaKvCache (the cache [B, C, N, D] as B blocks of C slots;
slot i*C + pos, one aclnnAdd a step past batch 1), and attention reads the whole (zeroed) cache under a
mask of the positions past it (aclnnGtTensor against 0..C-1). So every decode operator is a repeatable
executor made once per generation and a token costs no phase 1 — the step a stream capture can record.
The prefill's activations and executors are kept too, per prompt length in the decode state
(:class:`PrefillPlan`): a repeated prefill shape launches them with no phase 1.
cos/sin are precomputed per position on the host at load time (float32, as transformers does) and
copied to the device; nothing else is computed on the host.
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from acl_core.dtypes import DataType
from acl_tools.qwen3.attention import (
    COMPRESSED_MASK,
    UNBOUNDED,
    AttentionCall,
    AttentionChoice,
    choose,
    decode_args,
    prefill_args,
)
from acl_tools.qwen3.capture import CapturedStep, can_capture, refused
from acl_tools.qwen3.config import Qwen3Config, parse_dtype
from acl_tools.qwen3.device import (
    ACL_MEMCPY_DEVICE_TO_DEVICE,
    ACL_MEMCPY_DEVICE_TO_HOST,
    ACL_MEMCPY_HOST_TO_DEVICE,
    Buffer,
    DeviceError,
    Prepared,
    Session,
    int_array,
    scalar,
    tensor_list,
)
from acl_tools.qwen3.sampling import Sampling, sample
from acl_tools.qwen3.weights import Weights, load_weights

F32 = DataType.ACL_FLOAT
I64 = DataType.ACL_INT64
BOOL = DataType.ACL_BOOL
KEEP_DTYPE = 0
"""cubeMathType 0: matrix products in the operands' own precision."""

Args = Sequence[Any]
StepFn = Callable[[int], tuple[str, Args]]


def rope_tables(config: Qwen3Config, positions: int) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin [positions, head_dim] in float32: inv_freq = theta^(-2i/D), angles duplicated per half."""
    d = config.head_dim
    inv_freq = np.float32(1.0) / (
        np.float32(config.rope_theta) ** (np.arange(0, d, 2, dtype=np.float32) / np.float32(d))
    )
    freqs = np.arange(positions, dtype=np.float32)[:, None] * inv_freq[None, :]
    angles = np.concatenate([freqs, freqs], axis=-1)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


PROLOGUE_ENV = "ACL_QWEN3_PROLOGUE"
PROLOGUES = ("auto", "split", "fused", "nz")
NZ_BLOCK = 128
"""BlockSize of the ``nz`` runner's PA_NZ caches (a multiple of 16 both QkvRmsNormRopeCache and
FusedInferAttentionScore's page attention take at head dim 128); the capacity is rounded up to it."""
I32 = DataType.ACL_INT32


def prologue_mode(value: str | None, config: Qwen3Config, dtype: DataType) -> str:
    """How a decode step turns qkv into the rotated q and the new cache rows (``ACL_QWEN3_PROLOGUE`` when None).

    ``auto`` (the default): ``fused`` where the operator runs (16-bit models with head dim 128), else ``split``.
    ``split``: RmsNorm on q, RmsNorm on k, one ApplyRotaryPosEmb, one ScatterPaKvCache.
    ``fused``: one QkvRmsNormRopeCache (16-bit models with head dim 128, the operator's only one). Measured on
    an H100 (2026-12-06 18:00, Qwen3-0.6B bf16, batch 1, replayed): 1.010 ms of kernels a token against
    ``split``'s 1.197 (13:05); ``nz`` 1.056 (its page attention reads the NZ cache slower); bf16 parity passed
    under ``fused`` and ``nz``.
    ``nz``: CANN's documented contract end to end: PA_NZ caches written by QkvRmsNormRopeCache (prefill and
    decode) and read by FusedInferAttentionScore's page attention (same model limits as ``fused``).
    A ValueError names why ``fused`` / ``nz`` cannot run rather than running something else.
    """
    mode = (os.environ.get(PROLOGUE_ENV, "") if value is None else value).strip().lower() or "auto"
    if mode not in PROLOGUES:
        raise ValueError(f"{PROLOGUE_ENV}={mode!r} is none of {', '.join(PROLOGUES)}")
    fits = config.head_dim == 128 and dtype in (DataType.ACL_FLOAT16, DataType.ACL_BF16)
    if mode == "auto":
        return "fused" if fits else "split"
    if mode != "split" and not fits:
        raise ValueError(
            f"{PROLOGUE_ENV}={mode} needs head dim 128 and float16/bf16 (QkvRmsNormRopeCache's only ones); "
            f"this model has head dim {config.head_dim} in {dtype.short}"
        )
    return mode


class KVCache:
    """Per-layer key and value caches [B, C, Nkv, D] (BSND), filled from position 0 up.

    With ``block`` (the ``nz`` prologue) they are CANN's PA_NZ caches instead: [B * C / block, Nkv * D / 16,
    block, 16], the capacity rounded up to a multiple of ``block``, sequence b owning blocks b*C/block ..
    (slot b * C + position), with the block table [B, C / block] int32 FusedInferAttentionScore reads, made once.
    """

    def __init__(
        self, session: Session, config: Qwen3Config, batch: int, capacity: int, dtype: DataType, block: int = 0
    ) -> None:
        if block:
            capacity = -(-capacity // block) * block
        self.batch, self.capacity, self.block = batch, capacity, block
        self.nkv, self.d = config.num_key_value_heads, config.head_dim
        self.table: Buffer | None = None
        if block:
            per_seq = capacity // block
            shape = [batch * per_seq, self.nkv * self.d // 16, block, 16]
            self.table = session.alloc([batch, per_seq], I32)
            session.upload(self.table, np.arange(batch * per_seq, dtype=np.int32).reshape(batch, per_seq))
        else:
            shape = [batch, capacity, self.nkv, self.d]
        self.k = [session.alloc(shape, dtype) for _ in range(config.num_hidden_layers)]
        self.v = [session.alloc(shape, dtype) for _ in range(config.num_hidden_layers)]

    def nz_views(self, layer: int) -> tuple[Any, Any]:
        """Layer ``layer``'s PA_NZ caches as FIA's NZ key/value (blocks, Nkv, D/16, block, 16): the same bytes."""
        blocks, bs = self.k[layer].shape[0], self.block
        shape = [blocks, self.nkv, self.d // 16, bs, 16]
        strides = [self.nkv * self.d * bs, self.d * bs, bs * 16, 16, 1]
        return self.k[layer].view(shape, strides, 0), self.v[layer].view(shape, strides, 0)

    def _view(self, buf: Buffer, start: int, count: int) -> Any:
        row = self.nkv * self.d
        return buf.view([self.batch, count, self.nkv, self.d], [self.capacity * row, row, self.d, 1], start * row)

    def k_view(self, layer: int, start: int, count: int) -> Any:
        """Positions [start, start + count) of layer ``layer``'s keys as a [B, count, Nkv, D] view."""
        return self._view(self.k[layer], start, count)

    def v_view(self, layer: int, start: int, count: int) -> Any:
        """Positions [start, start + count) of layer ``layer``'s values."""
        return self._view(self.v[layer], start, count)

    def buffers(self) -> list[Buffer]:
        """Every cache buffer (zeroed before a generation)."""
        return [*self.k, *self.v]

    def owned(self) -> list[Buffer]:
        """Every buffer to free: the caches and the block table."""
        return [*self.buffers(), *([self.table] if self.table is not None else [])]


class Activations:
    """The device buffers (and their aclTensor views) of one forward pass over B x S tokens."""

    def __init__(
        self,
        runner: Qwen3Runner,
        batch: int,
        seq: int,
        *,
        all_logits: bool,
        cos: Any = None,
        sin: Any = None,
        capacity: int = 0,
    ) -> None:
        s, c, dt = runner.session, runner.config, runner.dtype
        b, t = batch, batch * seq
        nq, nkv, d, h, w = c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.hidden_size, c.qkv_size
        self.batch, self.seq = batch, seq
        self.ids = s.alloc([b, seq], I64)
        self.h = s.alloc([t, h], dt)
        self.rstd = s.alloc([t, 1], F32)
        self.qkv = s.alloc([t, w], dt)
        self.qn = s.alloc([b, seq, nq, d], dt)
        self.kn = s.alloc([b, seq, nkv, d], dt)
        self.rstd_q = s.alloc([b, seq, nq, 1], F32)
        self.rstd_k = s.alloc([b, seq, nkv, 1], F32)
        self.qr = s.alloc([b, seq, nq, d], dt)
        self.attn = s.alloc([b, seq, nq, d], dt)
        self.o = s.alloc([t, h], dt)
        """Each GEMM's output that joins the residual, then (InplaceAddRmsNorm) the next normalised input."""
        self.gu = s.alloc([t, 2 * c.intermediate_size], dt)
        self.act = s.alloc([t, c.intermediate_size], dt)
        self.stats = (s.alloc([b, nq, seq, 8], F32), s.alloc([b, nq, seq, 8], F32))
        rows = t if all_logits else b
        self.logits = s.alloc([rows, c.vocab_size], dt)
        self.logits32 = self.logits if dt == F32 else s.alloc([rows, c.vocab_size], F32)
        self.step_rope: tuple[Buffer, Buffer] | None = None
        self.pos: Buffer | None = None
        self.slot_base: Buffer | None = None
        self.slots: Buffer | None = None
        self.one: Any = None
        if cos is None:  # decode: the position lives on the device; cos/sin rows and the mask are gathered from it
            self.step_rope = (s.alloc([1, 1, 1, d], dt), s.alloc([1, 1, 1, d], dt))
            cos, sin = self.step_rope[0].tensor(), self.step_rope[1].tensor()
            self.pos = s.alloc([b], I64)
            """Each sequence's cache position of the token fed in (all equal: prompts share one length)."""
            self.keys = s.alloc([capacity], I64)
            """0 .. capacity-1, compared with pos to mask the cache positions not yet written."""
            self.mask = s.alloc([b, capacity], BOOL)
            self.kr = s.alloc([b, 1, nkv, d], dt)
            """rope(k) of the new token, before ScatterPaKvCache puts it at pos in the cache."""
            if b > 1:  # ScatterPaKvCache's slot of sequence i is i * capacity + pos[i] (batch 1: pos itself)
                self.slot_base = s.alloc([b], I64)
                """0, C, 2C, ... (uploaded with keys)."""
                self.slots = s.alloc([b], I64)
                self.one = scalar(1, I64)
        self.nz_prefill = runner.prologue == "nz" and self.pos is None
        if self.nz_prefill:  # QkvRmsNormRopeCache over all B*S tokens: per-token cos/sin rows and slots
            self.tok_pos = s.alloc([t], I64)
            """Each token's position (t % S), uploaded once; cos_t / sin_t are gathered from it."""
            self.tok_slots = s.alloc([t], I64)
            """Each token's cache slot b * C + s, uploaded once per prefill plan."""
            self.cos_t, self.sin_t = s.alloc([t, d], dt), s.alloc([t, d], dt)
            self.vn = s.alloc([b, seq, nkv, d], dt)
            """v as the operator copies it out (vOutBeforeQuant), FlashAttentionScore's value."""
        self.cos, self.sin = cos, sin
        head = [b, seq, nq, d]
        strides = [seq * w, w, d, 1]
        self.q_part = self.qkv.view(head, strides, 0)
        self.k_part = self.qkv.view([b, seq, nkv, d], strides, nq * d)
        self.v_part = self.qkv.view([b, seq, nkv, d], strides, (nq + nkv) * d)
        self.h_bsh = self.h.view([b, seq, h])
        self.attn_flat = self.attn.view([t, nq * d])
        self.n_rows = self.o.tensor() if all_logits else self.o.view([b, h], [seq * h, 1], (seq - 1) * h)
        """The final norm's rows lm_head reads: every token's, or each sequence's last."""
        v = c.vocab_size
        self.last_logits = self.logits.view([b, v], [seq * v, 1], (seq - 1) * v) if all_logits else self.logits.tensor()
        self.last_logits32 = (
            self.logits32.view([b, v], [seq * v, 1], (seq - 1) * v) if all_logits else self.logits32.tensor()
        )
        self.all_logits = all_logits

    def buffers(self) -> list[Buffer]:
        """Every buffer this pass allocated (to free them together)."""
        found = [v for v in vars(self).values() if isinstance(v, Buffer)]
        found += list(self.stats) + list(self.step_rope or ())
        return list({id(b): b for b in found}.values())


@dataclass
class Generation:
    """What :meth:`Qwen3Runner.generate` produced, with its timings."""

    tokens: np.ndarray
    """[B, N] generated ids (prompt excluded)."""
    prefill_seconds: float
    """From the prompt ids on the device (earlier work finished) to the first new tokens computed and the
    stream synchronised: the span transformers' and the torch runner's prefill timings cover too."""
    decode_seconds: float
    prompt_tokens: int
    decode_steps: int
    logits: list[np.ndarray] = field(default_factory=list)
    """Per generated token, the float32 logits [B, V] it was chosen from (when asked for)."""
    decode_validations: int = 0
    """aclnn phase-1 calls the decode steps made (repeatable executors are validated once)."""
    decode_launches: int = 0
    """aclnn phase-2 calls the decode steps made (replayed: the ones made while capturing the step)."""
    replayed: bool = False
    """Whether the decode steps were replays of one captured step (aclmdlRIExecuteAsync)."""
    decode_replays: int = 0
    """aclmdlRIExecuteAsync calls the decode steps made."""
    decode_ops: dict[str, int] = field(default_factory=dict)
    """:attr:`decode_launches` per operator name."""
    decode_captures: int = 0
    """Captures this generation made (0 when it replayed the capture a previous one of its shape left)."""
    prefill_enqueue_seconds: float = 0.0
    """The part of :attr:`prefill_seconds` spent enqueuing the prefill's operators (both phases on the host);
    close to prefill_seconds when the prefill is host-bound, small beside it when the device is the bound."""
    prefill_validations: int = 0
    """aclnn phase-1 calls the prefill made (0 when it launched the executors an earlier prefill of its shape
    validated: see :class:`PrefillPlan`)."""
    prefill_builds: int = 0
    """Prefill plans this generation validated (0 when it reused the one its (batch, capacity, prompt length) kept)."""
    first_token_clock: float = 0.0
    """``time.monotonic()`` once the first new token was computed (system-wide on Linux: a parent process
    subtracts its own reading to get the time from process start to first token)."""

    @property
    def prefill_tokens_per_s(self) -> float:
        """Prompt tokens (all sequences) processed per second, up to the first new token."""
        return self.prompt_tokens / self.prefill_seconds if self.prefill_seconds > 0 else float("inf")

    @property
    def decode_tokens_per_s(self) -> float:
        """Tokens (all sequences) produced per second by the decode steps after the first token."""
        made = self.decode_steps * self.tokens.shape[0]
        return made / self.decode_seconds if self.decode_seconds > 0 else float("nan")


class Qwen3Runner:
    """A Qwen3 checkpoint resident on a backend's device, run through aclnn (see the module doc)."""

    def __init__(
        self,
        model_dir: str | Path,
        *,
        backend: str | None = None,
        dtype: str = "fp32",
        prefill_attention: str | None = None,
        decode_attention: str | None = None,
        cube_math_type: int = KEEP_DTYPE,
        progress: Callable[[int, int], None] | None = None,
        decode_cache_size: int = 4,
        prologue: str | None = None,
    ) -> None:
        self.model_dir = Path(model_dir)
        self.config = Qwen3Config.from_dir(self.model_dir)
        self.dtype_name = dtype
        self.dtype = parse_dtype(dtype)
        self.prologue = prologue_mode(prologue, self.config, self.dtype)
        """How decode turns qkv into q and the cache rows (``ACL_QWEN3_PROLOGUE`` when None): see prologue_mode."""
        self.attention: AttentionChoice = choose(self.dtype, prefill_attention, decode_attention)
        self.cube_math_type = cube_math_type
        self.session = Session(backend)
        try:
            t0 = time.perf_counter()
            self.weights: Weights = load_weights(self.session, self.model_dir, self.config, self.dtype, progress)
            self.session.synchronize()
            self.load_seconds = time.perf_counter() - t0
            self.positions = 0
            self.cos: Buffer | None = None
            self.sin: Buffer | None = None
            self.compressed_mask: Buffer | None = None
            self.causal: Buffer | None = None
            self.causal_side = 0
            self.decode_cache_size = decode_cache_size
            """Decode states (KV cache, executors, capture) kept for later generations of the same shape."""
            self._decode: OrderedDict[tuple[int, int, DataType, bool], DecodeState] = OrderedDict()
        except BaseException:
            self.session.close()
            raise

    def attention_ops(self) -> dict[str, str]:
        """The aclnn attention operators each phase runs, for reports (``nz`` decodes through FIA's page attention)."""
        ops = self.attention.describe()
        if self.prologue == "nz":
            ops["decode"] = "FusedInferAttentionScore (PA_NZ page attention)"
        return ops

    @property
    def backend_name(self) -> str:
        """The backend the runner computes on."""
        return str(self.session.backend.name)

    def close(self) -> None:
        """Free everything on the device."""
        try:
            self.clear_decode_cache()
        finally:
            self.session.close()

    def __enter__(self) -> Qwen3Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ tables
    def _reserve(self, positions: int, prefill: int) -> None:
        """cos/sin tables for ``positions`` positions, and the causal mask a prefill of ``prefill`` keys needs."""
        s = self.session
        if positions > self.positions:
            cap = max(positions, 2 * self.positions, 64)
            cos, sin = rope_tables(self.config, cap)
            for old in (self.cos, self.sin):
                if old is not None:
                    s.release(old)
            self.cos = s.alloc([cap, self.config.head_dim], self.dtype)
            self.sin = s.alloc([cap, self.config.head_dim], self.dtype)
            s.upload(self.cos, cos.astype(self.dtype.numpy))
            s.upload(self.sin, sin.astype(self.dtype.numpy))
            self.positions = cap
        if self.attention.prefill == "pfa" and prefill > self.causal_side:
            side = max(prefill, 2 * self.causal_side, 64)
            if self.causal is not None:
                s.release(self.causal)
            self.causal = s.alloc([side, side], BOOL)  # True above the diagonal: key j > query i is masked
            s.upload(self.causal, np.triu(np.ones((side, side), dtype=bool), k=1))
            self.causal_side = side
        if self.attention.prefill in ("fa", "fia") and self.compressed_mask is None:
            self.compressed_mask = s.alloc([COMPRESSED_MASK, COMPRESSED_MASK], BOOL)
            s.upload(self.compressed_mask, np.triu(np.ones((COMPRESSED_MASK, COMPRESSED_MASK), dtype=bool), k=1))

    def _rope_views(self, start: int, count: int) -> tuple[Any, Any]:
        assert self.cos is not None and self.sin is not None
        d = self.config.head_dim
        shape = [1, count, 1, d]
        strides = [count * d, d, d, 1]
        return self.cos.view(shape, strides, start * d), self.sin.view(shape, strides, start * d)

    # ------------------------------------------------------------------ the program
    def _attention(self, layer: int, a: Activations, kv: KVCache, start: int, prefill: bool) -> tuple[str, Args]:
        c = self.config
        count = start + a.seq
        call = AttentionCall(
            query=(a.qn if not prefill and self._rope_pair() else a.qr).tensor(),
            key=kv.k_view(layer, 0, count),
            value=kv.v_view(layer, 0, count),
            out=a.attn.tensor(),
            heads=c.num_attention_heads,
            kv_heads=c.num_key_value_heads,
            scale=float(c.head_dim) ** -0.5,
            start=start,
            new=a.seq,
            stats=(a.stats[0].tensor(), a.stats[1].tensor()),
        )
        if not prefill:
            assert a.pos is not None
            cap = kv.capacity
            call.key, call.value = kv.k_view(layer, 0, cap), kv.v_view(layer, 0, cap)
            call.start = cap - 1
            call.mask = a.mask.view([a.batch, 1, 1, cap])
            return decode_args(self.attention.decode, call)
        if self.attention.prefill == "pfa":
            assert self.causal is not None
            side = self.causal_side
            call.mask = (  # a padded [side, side] mask may stand for [S, S]; later starts take rows start..
                self.causal.tensor() if start == 0 else self.causal.view([a.seq, count], [side, 1], start * side)
            )
        else:
            assert self.compressed_mask is not None
            call.mask = self.compressed_mask.tensor()
        return prefill_args(self.attention.prefill, call)

    def _layer(self, i: int, a: Activations, kv: KVCache, prefill: bool) -> list[tuple[str, Args] | StepFn]:
        """Layer ``i``'s operators in order: fixed (name, args) pairs, or functions of the start position."""
        c, lw = self.config, self.weights.layers[i]
        eps, cube = c.rms_norm_eps, self.cube_math_type
        seq = a.seq
        if prefill:
            cache: list[tuple[str, Args] | StepFn] = [
                lambda start: ("RotaryPositionEmbedding", (a.kn.tensor(), a.cos, a.sin, 0, kv.k_view(i, start, seq))),
                lambda start: ("InplaceCopy", (kv.v_view(i, start, seq), a.v_part)),
                lambda start: self._attention(i, a, kv, start, prefill),
            ]
        else:  # every buffer fixed, the position read on the device: one executor per operator, made once
            assert a.pos is not None and a.step_rope is not None
            pos = a.pos.tensor()
            if self._rope_pair():  # q and k rotated in place by one launch
                d = c.head_dim
                cos, sin = (row.view([a.batch, 1, 1, d], [0, d, d, 1]) for row in a.step_rope)
                rope: list[tuple[str, Args] | StepFn] = [
                    ("ApplyRotaryPosEmb", (a.qn.tensor(), a.kn.tensor(), cos, sin, 1))
                ]
                k_rot = a.kn
            else:
                rope = [
                    ("RotaryPositionEmbedding", (a.qn.tensor(), a.cos, a.sin, 0, a.qr.tensor())),
                    ("RotaryPositionEmbedding", (a.kn.tensor(), a.cos, a.sin, 0, a.kr.tensor())),
                ]
                k_rot = a.kr
            slots = pos if a.slots is None else a.slots.tensor()
            b, nkv, d = a.batch, c.num_key_value_heads, c.head_dim
            tokens = [b, nkv, d]  # the new token's k and v rows, [T = B, N, D]
            k_new = k_rot.view(tokens)
            v_new = a.qkv.view(tokens, [c.qkv_size, d, 1], (c.num_attention_heads + nkv) * d)
            cache = [  # k and v into the cache ([B, C, N, D] as B blocks of C slots) by one launch
                *rope,
                ("ScatterPaKvCache", (k_new, kv.k[i].tensor(), slots, v_new, kv.v[i].tensor()) + (None,) * 7),
                self._attention(i, a, kv, 0, prefill),
            ]
        if prefill:
            cache.insert(0, ("RotaryPositionEmbedding", (a.qn.tensor(), a.cos, a.sin, 0, a.qr.tensor())))
        n = a.o.tensor()
        norms: list[tuple[str, Args] | StepFn] = [
            ("RmsNorm", (a.q_part, lw.q_norm.tensor(), eps, a.qn.tensor(), a.rstd_q.tensor())),
            ("RmsNorm", (a.k_part, lw.k_norm.tensor(), eps, a.kn.tensor(), a.rstd_k.tensor())),
        ]
        if not prefill and self.prologue == "fused":  # norms, rope and the cache rows in one launch
            norms, cache = [self._qkv_prologue(i, a, kv, "PA_BNSD")], [self._attention(i, a, kv, 0, prefill)]
        if self.prologue == "nz":  # CANN's contract: PA_NZ caches, QkvRmsNormRopeCache, FIA page attention
            norms, cache = [self._qkv_prologue(i, a, kv, "PA_NZ")], [self._nz_attention(i, a, kv)]
        return [
            ("Mm", (n, lw.qkv.t, a.qkv.tensor(), cube)),
            *norms,
            *cache,
            ("Mm", (a.attn_flat, lw.o.t, a.o.tensor(), cube)),
            ("InplaceAddRmsNorm", (a.o.tensor(), a.h.tensor(), lw.post_norm.tensor(), eps, a.rstd.tensor())),
            ("Mm", (n, lw.gate_up.t, a.gu.tensor(), cube)),
            ("SwiGlu", (a.gu.tensor(), -1, a.act.tensor())),
            ("Mm", (a.act.tensor(), lw.down.t, a.o.tensor(), cube)),
        ]

    def _qkv_prologue(self, i: int, a: Activations, kv: KVCache, cache_mode: str) -> tuple[str, Args]:
        """QkvRmsNormRopeCache of a decode step or (``nz``) of a whole start-0 prefill.

        ``cache_mode``: "PA_NZ" (``nz``'s PA_NZ caches) or "PA_BNSD" (``fused``: the ND caches [B, C, N, D] read as
        B blocks of C slots, this project's extension of the operator). Decode: q into qn, k and v into slot
        b * C + pos. Prefill: every token (slots uploaded once per plan),
        q into qr, and k (normalised, rotated) and v also out into kn / vn for the prefill's attention.
        """
        c, lw = self.config, self.weights.layers[i]
        b, seq, nq, nkv, d = a.batch, a.seq, c.num_attention_heads, c.num_key_value_heads, c.head_dim
        t = b * seq
        if a.nz_prefill:
            cos, sin, slots = a.cos_t.tensor(), a.sin_t.tensor(), a.tok_slots.tensor()
            q_out = a.qr.view([t, nq * d])
            before: tuple[Any, ...] = (None, a.kn.view([t, nkv * d]), a.vn.view([t, nkv * d]))
        else:
            assert a.pos is not None and a.step_rope is not None
            cos, sin = (row.view([b, d], [0, 1]) for row in a.step_rope)
            slots = a.pos.tensor() if a.slots is None else a.slots.tensor()
            q_out, before = a.qn.view([b, nq * d]), (None, None, None)
        return "QkvRmsNormRopeCache", (
            a.qkv.tensor(), lw.q_norm.tensor(), lw.k_norm.tensor(), cos, sin, slots,
            q_out, kv.k[i].tensor(), kv.v[i].tensor(), None, None, None, None,
            int_array([b, seq, nq + 2 * nkv, d]), int_array([nq, nkv, nkv]), c.rms_norm_eps, cache_mode,
            *before,
        )  # fmt: skip

    def _nz_attention(self, i: int, a: Activations, kv: KVCache) -> tuple[str, Args]:
        """The ``nz`` runner's attention: a start-0 prefill reads kn / vn (the prologue's k and v outputs)
        through the prefill operator; decode reads the PA_NZ caches through FusedInferAttentionScore's
        page attention (the fixed block table, every length the capacity, the mask of unwritten positions)."""
        c = self.config
        if a.nz_prefill:
            call = AttentionCall(
                query=a.qr.tensor(), key=a.kn.tensor(), value=a.vn.tensor(), out=a.attn.tensor(),
                heads=c.num_attention_heads, kv_heads=c.num_key_value_heads, scale=float(c.head_dim) ** -0.5,
                start=0, new=a.seq, stats=(a.stats[0].tensor(), a.stats[1].tensor()),
            )  # fmt: skip
            if self.attention.prefill == "pfa":
                assert self.causal is not None
                call.mask = self.causal.tensor()
            else:
                assert self.compressed_mask is not None
                call.mask = self.compressed_mask.tensor()
            return prefill_args(self.attention.prefill, call)
        assert kv.table is not None
        cap = kv.capacity
        key, value = kv.nz_views(i)
        return "FusedInferAttentionScore", (
            a.qn.tensor(), tensor_list([key]), tensor_list([value]), None, a.mask.view([a.batch, 1, 1, cap]),
            None, int_array([cap] * a.batch), None, None, None, None, None, None, None, kv.table.tensor(),
            None, None, c.num_attention_heads, float(c.head_dim) ** -0.5, UNBOUNDED, 0, "BSND",
            c.num_key_value_heads, 0, 0, kv.block, 0, False, a.attn.tensor(), None,
        )  # fmt: skip

    def _nz_upload(self, a: Activations, kv: KVCache) -> None:
        """A prefill plan's per-token positions and cache slots (sequence b's token s: slot b * C + s)."""
        b, seq = a.batch, a.seq
        self.session.upload(a.tok_pos, np.tile(np.arange(seq, dtype=np.int64), b))
        slots = np.arange(b, dtype=np.int64)[:, None] * kv.capacity + np.arange(seq, dtype=np.int64)[None, :]
        self.session.upload(a.tok_slots, slots.reshape(-1))

    def _rope_pair(self) -> bool:
        """Whether decode rotates q and k with one ApplyRotaryPosEmb (CANN takes head dims 64 and 128 only)."""
        return self.config.head_dim in (64, 128)

    def _program(self, a: Activations, kv: KVCache, prefill: bool) -> list[tuple[str, Args] | StepFn]:
        """The whole forward pass: embedding, every layer, final norm and lm_head."""
        w, eps = self.weights, self.config.rms_norm_eps
        items: list[tuple[str, Args] | StepFn] = [("Embedding", (w.embed.tensor(), a.ids.tensor(), a.h_bsh))]
        if a.nz_prefill:  # each token's cos/sin row, gathered at its position
            assert self.cos is not None and self.sin is not None
            for table, rows in ((self.cos, a.cos_t), (self.sin, a.sin_t)):
                items.append(("Embedding", (table.tensor(), a.tok_pos.tensor(), rows.tensor())))
        if not prefill:  # this step's cos/sin rows and the mask of the unwritten cache positions, from pos
            assert a.pos is not None and a.step_rope is not None and self.cos is not None and self.sin is not None
            first = a.pos.view([1, 1], [1, 1], 0)
            d = self.config.head_dim
            for table, row in ((self.cos, a.step_rope[0]), (self.sin, a.step_rope[1])):
                items.append(("Embedding", (table.tensor(), first, row.view([1, 1, d]))))
            items.append(("GtTensor", (a.keys.tensor(), a.pos.view([a.batch, 1]), a.mask.tensor())))
            if a.slots is not None:  # the cache slot of each sequence's new token (ScatterPaKvCache)
                assert a.slot_base is not None
                items.append(("Add", (a.pos.tensor(), a.slot_base.tensor(), a.one, a.slots.tensor())))
        layers = self.weights.layers
        items.append(("RmsNorm", (a.h.tensor(), layers[0].input_norm.tensor(), eps, a.o.tensor(), a.rstd.tensor())))
        for i in range(len(layers)):
            items += self._layer(i, a, kv, prefill)
            gamma = layers[i + 1].input_norm if i + 1 < len(layers) else w.norm
            items.append(("InplaceAddRmsNorm", (a.o.tensor(), a.h.tensor(), gamma.tensor(), eps, a.rstd.tensor())))
        items.append(("Mm", (a.n_rows, w.lm_head.t, a.logits.tensor(), self.cube_math_type)))
        return items

    def _run_program(self, items: list[tuple[str, Args] | StepFn], start: int) -> None:
        run = self.session.run
        for item in items:
            op, args = item(start) if callable(item) else item
            run(op, *args)

    # ------------------------------------------------------------------ public passes
    def forward_logits(self, prompts: Sequence[Sequence[int]]) -> np.ndarray:
        """Prefill logits [B, S, V] in float32 for equal-length prompts (a fresh cache, all positions)."""
        ids = _as_ids(prompts)
        b, seq = ids.shape
        self._reserve(seq, seq)
        s = self.session
        kv = KVCache(s, self.config, b, seq, self.dtype, self._block())
        cos, sin = self._rope_views(0, seq)
        a = Activations(self, b, seq, all_logits=True, cos=cos, sin=sin)
        try:
            if a.nz_prefill:
                self._nz_upload(a, kv)
            s.upload(a.ids, ids)
            self._run_program(self._program(a, kv, prefill=True), 0)
            if a.logits32 is not a.logits:
                s.run("Cast", a.logits.tensor(), int(F32), a.logits32.tensor())
            return s.download(a.logits32).reshape(b, seq, self.config.vocab_size)
        finally:
            s.release(*a.buffers(), *kv.owned())

    def clear_decode_cache(self) -> None:
        """Free every cached decode state (KV cache, executors, capture)."""
        while self._decode:
            _, state = self._decode.popitem()
            state.release(self.session)

    def _decode_state(self, batch: int, capacity: int, greedy: bool) -> DecodeState:
        """The decode state of (batch, capacity, dtype, greedy), made (and the oldest evicted) when missing.

        A state whose cos/sin tables were reallocated since (a larger capacity came) is made afresh: its
        executors read the old tables.
        """
        key = (batch, capacity, self.dtype, greedy)
        state = self._decode.pop(key, None)
        if state is not None and state.tables != (self.cos, self.sin):
            state.release(self.session)
            state = None
        if state is None:
            while self._decode and len(self._decode) >= max(self.decode_cache_size, 1):
                _, old = self._decode.popitem(last=False)
                old.release(self.session)
            s = self.session
            kv = KVCache(s, self.config, batch, capacity, self.dtype, self._block())
            dec = Activations(self, batch, 1, all_logits=False, capacity=kv.capacity)
            state = DecodeState(key, kv, dec, (self.cos, self.sin), scalar(1, I64))
        self._decode[key] = state  # most recently used last
        return state

    def _block(self) -> int:
        """The caches' BlockSize: NZ_BLOCK for the ``nz`` prologue's PA_NZ caches, 0 (dense ND) otherwise."""
        return NZ_BLOCK if self.prologue == "nz" else 0

    def _build_plan(self, state: DecodeState) -> None:
        """Validate the decode step's executors (every buffer fixed; the position read on the device)."""
        dec = state.dec
        state.drop_plan()
        items = self._program(dec, state.kv, prefill=False)
        if state.key[3]:  # greedy: the next ids straight into the ids the next step's Embedding reads
            items.append(("ArgMax", (dec.last_logits, -1, False, dec.ids.view([dec.batch]))))
        assert dec.pos is not None
        items.append(("InplaceAdds", (dec.pos.tensor(), state.step_one, state.step_one)))  # the next position
        state.plan, state.workspace = self._stable_plan(items)

    def _stable_plan(self, items: Sequence[tuple[str, Args] | StepFn], start: int = 0) -> tuple[list[Prepared], int]:
        """Repeatable executors of ``items`` (position-dependent ones at ``start``), validated until the
        workspace stops moving (a move leaves the executors made before it stale); with the workspace mark."""
        s = self.session
        while True:
            before = s.workspace_moves
            made: list[Prepared] = []
            try:
                for item in items:
                    op, args = item(start) if callable(item) else item
                    made.append(s.prepare(op, *args))
            except BaseException:
                for p in made:
                    p.release()
                raise
            if s.workspace_moves == before:
                return made, before
            for p in made:
                p.release()

    def _prefill_state(self, state: DecodeState, plen: int) -> PrefillPlan:
        """The prefill of ``plen`` tokens into ``state``'s cache, kept per length (its activations made once)."""
        found = state.prefills.get(plen)
        if found is None:
            cos, sin = self._rope_views(0, plen)
            act = Activations(self, state.kv.batch, plen, all_logits=False, cos=cos, sin=sin)
            if act.nz_prefill:
                self._nz_upload(act, state.kv)
            found = state.prefills[plen] = PrefillPlan(act)
        return found

    def _prefill_ready(self, state: DecodeState, found: PrefillPlan) -> list[Prepared]:
        """``found``'s executors, validated when missing or stale, else the kept ones.

        The activations stay allocated, so every executor reads the same memory at the next prefill of that
        shape, which launches them with no phase 1. Validated afresh when the workspace moved or the mask
        they read was reallocated since (the cos/sin tables: a new decode state, see :meth:`_decode_state`).
        """
        mask = self.causal if self.attention.prefill == "pfa" else self.compressed_mask
        if found.plan is None or found.workspace != self.session.workspace_moves or found.mask is not mask:
            found.drop_plan()
            a = found.act
            items = self._program(a, state.kv, prefill=True)
            if state.key[3]:  # greedy: the first new ids straight into the ids the decode step's Embedding reads
                items.append(("ArgMax", (a.last_logits, -1, False, state.dec.ids.view([a.batch]))))
            found.plan, found.workspace = self._stable_plan(items, 0)
            found.mask = mask
            found.builds += 1
        return found.plan

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int,
        sampling: Sampling | None = None,
        *,
        stop_on_eos: bool = False,
        eos_token_ids: Sequence[int] | None = None,
        keep_logits: bool = False,
        replay: bool | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> Generation:
        """Generate ``max_new_tokens`` per prompt (greedy when ``sampling`` is None); prompts share one length.

        With ``stop_on_eos`` generation ends once every sequence has produced an EOS id (the
        checkpoint's, or ``eos_token_ids``); ``keep_logits`` keeps each step's float32 logits.
        ``replay`` (default: where the backend captures streams) captures the decode step once with
        ``acl.mdl`` and replays it per token; False launches its executors one by one (eager). The KV
        cache, the decode executors and the capture are kept per (batch, capacity = prompt + new
        tokens, dtype, greedy or not) for the next call of the same shape (:meth:`clear_decode_cache`).
        """
        ids = _as_ids(prompts)
        b, plen = ids.shape
        if max_new_tokens < 1:
            raise ValueError("max_new_tokens must be at least 1")
        c, s = self.config, self.session
        replay_asked = bool(replay)
        if replay is None:
            replay = can_capture(s)
        capacity = plen + max_new_tokens
        self._reserve(capacity, plen)
        rng = np.random.default_rng(sampling.seed) if sampling is not None else None
        eos = np.array(c.eos_token_ids if eos_token_ids is None else list(eos_token_ids), dtype=np.int64)
        state = self._decode_state(b, capacity, sampling is None)
        kv, dec = state.kv, state.dec
        builds0 = state.prefills[plen].builds if plen in state.prefills else 0
        prefill = self._prefill_state(state, plen)
        pre = prefill.act
        out = s.alloc([max_new_tokens, b], I64)
        ids_ptr, ids_host = s.host("ids", b * 8)
        tok_ptr, tok_host = s.host("tokens", max_new_tokens * b * 8)
        log_ptr, log_host = s.host("logits", b * c.vocab_size * 4)
        kept: list[np.ndarray] = []
        done = np.zeros(b, dtype=bool)
        captures = 0

        def host_logits(a: Activations) -> np.ndarray:
            if a.logits32 is not a.logits:
                s.run("Cast", a.last_logits, int(F32), a.last_logits32)
            s.copy_async(log_ptr, a.logits32.ptr, b * c.vocab_size * 4, ACL_MEMCPY_DEVICE_TO_HOST)
            s.synchronize()
            return log_host[: b * c.vocab_size * 4].view(np.float32).reshape(b, c.vocab_size).copy()

        def choose_next(a: Activations, step: int) -> None:
            """Put the next ids into dec.ids (greedy: the decode plan's own ArgMax did) and record them in out[step]."""
            if sampling is None:  # the prefill plan's ArgMax, or the decode plan's, wrote dec.ids
                if keep_logits:
                    kept.append(host_logits(a))
            else:
                logits = host_logits(a)
                if keep_logits:
                    kept.append(logits)
                assert rng is not None
                ids_host[: b * 8] = sample(logits, sampling, rng).view(np.uint8)
                s.copy_async(dec.ids.ptr, ids_ptr, b * 8, ACL_MEMCPY_HOST_TO_DEVICE)
            s.copy_async(out.ptr + step * b * 8, dec.ids.ptr, b * 8, ACL_MEMCPY_DEVICE_TO_DEVICE)

        def enqueue() -> None:
            for p in state.plan or ():  # all repeatable executors
                p()

        def ready(replaying: bool) -> None:
            """A plan validated since the workspace last moved, and captured when replaying."""
            nonlocal captures
            if state.plan is None or state.workspace != s.workspace_moves:
                self._build_plan(state)
            if replaying and state.captured is None:
                state.captured = CapturedStep(s, enqueue)
                captures += 1

        def check_eos(step: int) -> bool:
            if not (stop_on_eos and eos.size):
                return False
            s.copy_async(tok_ptr, out.ptr + step * b * 8, b * 8, ACL_MEMCPY_DEVICE_TO_HOST)
            s.synchronize()
            done[:] |= np.isin(tok_host[: b * 8].view(np.int64), eos)
            return bool(done.all())

        try:
            assert dec.pos is not None
            for buf in kv.buffers():  # decode attention spans the whole capacity: masked rows must not be NaN garbage
                s.run("InplaceZero", buf.tensor())
            s.upload(dec.keys, np.arange(kv.capacity, dtype=np.int64))
            if dec.slot_base is not None:
                s.upload(dec.slot_base, np.arange(b, dtype=np.int64) * kv.capacity)
            s.upload(dec.pos, np.full(b, plen, dtype=np.int64))  # the first decode step feeds position plen
            s.upload(pre.ids, ids)  # the prompt on the device, and the zeroing done, before the clock starts:
            s.synchronize()  # transformers and the torch runner time their prefill from ids already there too
            pv0 = s.validations
            t0 = time.perf_counter()
            for p in self._prefill_ready(state, prefill):  # validated at the first prefill of this shape only
                p()
            t_enq = time.perf_counter()
            choose_next(pre, 0)
            stopped = check_eos(0)
            s.synchronize()
            t1 = time.perf_counter()
            first_token_clock = time.monotonic()
            prefill_validations = s.validations - pv0
            steps, replays = 0, 0
            v0, l0, ops0 = s.validations, s.launches, s.launched.copy()
            if not stopped and max_new_tokens > 1:
                ready(False)
                assert state.plan is not None
                names = [p.name for p in state.plan]
                if replay and refused(s, names):
                    if replay_asked:  # asked for: say which operator stops it
                        raise DeviceError(
                            f"backend {self.backend_name} refuses to capture {', '.join(refused(s, names))} "
                            "(capabilities().capture_refused_ops); pass --eager"
                        )
                    replay = False  # the default: eager, and Generation.replayed says so
                for step in range(1, max_new_tokens):
                    ready(replay)  # memory changed under the executors: validated (and captured) afresh
                    if replay:
                        assert state.captured is not None
                        state.captured.replay()
                        replays += 1
                    else:
                        enqueue()
                    choose_next(dec, step)
                    steps += 1
                    if progress is not None:
                        progress(step, max_new_tokens - 1)
                    if check_eos(step):
                        break
            s.copy_async(tok_ptr, out.ptr, (steps + 1) * b * 8, ACL_MEMCPY_DEVICE_TO_HOST)
            s.synchronize()
            t2 = time.perf_counter()
            tokens = tok_host[: (steps + 1) * b * 8].view(np.int64).reshape(steps + 1, b).T.copy()
            return Generation(
                tokens,
                t1 - t0,
                t2 - t1,
                b * plen,
                steps,
                kept,
                s.validations - v0,
                s.launches - l0,
                bool(replay) and steps > 0,
                replays,
                dict(s.launched - ops0),
                captures,
                t_enq - t0,
                prefill_validations,
                prefill.builds - builds0,
                first_token_clock,
            )
        except BaseException:  # a failed step may leave the state half made: drop it
            self._decode.pop(state.key, None)
            state.release(s)
            raise
        finally:
            if out.ptr:
                s.release(out)


@dataclass
class DecodeState:
    """What the decode steps of one (batch, capacity, dtype, greedy) reuse across generations."""

    key: tuple[int, int, DataType, bool]
    kv: KVCache
    dec: Activations
    tables: tuple[Buffer | None, Buffer | None]
    """The cos/sin tables the executors read (made afresh when the runner reallocates them)."""
    step_one: Any
    plan: list[Prepared] | None = None
    workspace: int = -1
    """Session.workspace_moves when the plan was validated."""
    captured: CapturedStep | None = None
    prefills: dict[int, PrefillPlan] = field(default_factory=dict)
    """Per prompt length: the prefill into this state's cache (activations and executors kept)."""

    def drop_plan(self) -> None:
        """Destroy the decode capture and executors (the buffers and the prefill plans stay)."""
        if self.captured is not None:
            self.captured.destroy()
            self.captured = None
        for p in self.plan or ():
            p.release()
        self.plan = None

    def release(self, session: Session) -> None:
        """Destroy the plans and free the buffers."""
        self.drop_plan()
        for prefill in self.prefills.values():
            prefill.release(session)
        self.prefills.clear()
        session.release(*[buf for buf in (*self.dec.buffers(), *self.kv.owned()) if buf.ptr])


@dataclass
class PrefillPlan:
    """The prefill of one prompt length into a decode state's cache: activations kept, executors repeatable."""

    act: Activations
    plan: list[Prepared] | None = None
    workspace: int = -1
    """Session.workspace_moves when the plan was validated."""
    mask: Buffer | None = None
    """The attention mask buffer the executors read (validated afresh when the runner reallocates it)."""
    builds: int = 0
    """Times the executors were validated (the counted cache: 1 after any number of prefills of one shape)."""

    def drop_plan(self) -> None:
        """Destroy the executors (the activations stay)."""
        for p in self.plan or ():
            p.release()
        self.plan = None

    def release(self, session: Session) -> None:
        """Destroy the executors and free the activations."""
        self.drop_plan()
        session.release(*[buf for buf in self.act.buffers() if buf.ptr])


def _as_ids(prompts: Sequence[Sequence[int]]) -> np.ndarray:
    rows = [list(p) for p in prompts]
    if not rows or not rows[0]:
        raise ValueError("at least one non-empty prompt is needed")
    if any(len(r) != len(rows[0]) for r in rows):
        raise ValueError("prompts in one batch must have the same length (padding is not implemented)")
    return np.array(rows, dtype=np.int64)

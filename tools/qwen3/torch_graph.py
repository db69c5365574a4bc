"""The fair competitor: a plain PyTorch Qwen3 with a static KV cache whose decode step is a CUDA graph.

The same checkpoint and the same arithmetic as transformers (RMSNorm in float32, rope tables in
float32 cast to the compute dtype, SDPA attention), written without transformers so that every decode
step has fixed shapes and fixed buffers: the cache is [B, C, Nkv, D] per layer, the position is a
device tensor, attention masks the keys past it. On a CUDA device the decode step (embedding of the
previous token through ArgMax into the same token buffer) is captured once per (batch, capacity)
with ``torch.cuda.CUDAGraph`` and replayed per token; elsewhere (the CPU tests) it runs eagerly.

Only this module and hf.py import torch, and only when used.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from acl_tools.qwen3.config import Qwen3Config
from acl_tools.qwen3.hf import TORCH_DTYPES, _torch


@dataclass
class TorchGeneration:
    """Greedy tokens [B, N] and the prefill / decode seconds of one :meth:`TorchGraphRunner.generate`."""

    tokens: np.ndarray
    prefill_seconds: float
    decode_seconds: float
    graph: bool
    """Whether the decode steps were CUDA-graph replays."""


class TorchGraphRunner:
    """A Qwen3 checkpoint in plain PyTorch on ``device``; greedy decode replayed from a CUDA graph there."""

    def __init__(self, model_dir: str | Path, dtype: str = "bf16", device: str = "cpu") -> None:
        torch = _torch()
        from safetensors.torch import load_file

        self.torch = torch
        self.config = c = Qwen3Config.from_dir(model_dir)
        self.device = torch.device(device)
        self.dtype = getattr(torch, TORCH_DTYPES[dtype])
        raw: dict[str, Any] = {}
        for f in sorted(Path(model_dir).glob("*.safetensors")):
            raw.update(load_file(str(f)))
        w = {k: v.to(self.device, self.dtype) for k, v in raw.items()}
        self.embed = w["model.embed_tokens.weight"]
        self.lm_head = self.embed if c.tie_word_embeddings else w["lm_head.weight"]
        self.norm = w["model.norm.weight"]
        self.layers = []
        for i in range(c.num_hidden_layers):
            p = f"model.layers.{i}."
            a, m = p + "self_attn.", p + "mlp."
            self.layers.append(
                {
                    "in_norm": w[p + "input_layernorm.weight"],
                    "post_norm": w[p + "post_attention_layernorm.weight"],
                    "qkv": torch.cat([w[a + "q_proj.weight"], w[a + "k_proj.weight"], w[a + "v_proj.weight"]]),
                    "q_norm": w[a + "q_norm.weight"],
                    "k_norm": w[a + "k_norm.weight"],
                    "o": w[a + "o_proj.weight"],
                    "gate_up": torch.cat([w[m + "gate_proj.weight"], w[m + "up_proj.weight"]]),
                    "down": w[m + "down_proj.weight"],
                }
            )
        self.graphs: dict[tuple[int, int], Any] = {}
        self.use_graph = self.device.type == "cuda"

    # ------------------------------------------------------------------ the arithmetic
    def _rms(self, x: Any, weight: Any) -> Any:
        torch = self.torch
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.config.rms_norm_eps)
        return weight * x32.to(x.dtype)

    def _rope_tables(self, capacity: int) -> tuple[Any, Any]:
        torch, d = self.torch, self.config.head_dim
        inv = 1.0 / (self.config.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        freqs = torch.arange(capacity, dtype=torch.float32)[:, None] * inv[None, :]
        angles = torch.cat([freqs, freqs], -1)
        return angles.cos().to(self.device, self.dtype), angles.sin().to(self.device, self.dtype)

    @staticmethod
    def _rotate(x: Any, cos: Any, sin: Any) -> Any:
        half = x.shape[-1] // 2
        rotated = x.new_empty(x.shape)
        rotated[..., :half] = -x[..., half:]
        rotated[..., half:] = x[..., :half]
        return x * cos + rotated * sin

    def _forward(self, state: _State, ids: Any, pos: Any, mask: Any) -> Any:
        """Logits of the last position for ``ids`` [B, S] at cache positions ``pos`` [S] (writes the cache)."""
        torch, c = self.torch, self.config
        f = torch.nn.functional
        b, s = ids.shape
        nq, nkv, d = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        h = f.embedding(ids, self.embed)
        cos = state.cos.index_select(0, pos)[None, :, None, :]
        sin = state.sin.index_select(0, pos)[None, :, None, :]
        for i, lw in enumerate(self.layers):
            qkv = self._rms(h, lw["in_norm"]) @ lw["qkv"].T
            q, k, v = qkv.split([nq * d, nkv * d, nkv * d], -1)
            q = self._rotate(self._rms(q.view(b, s, nq, d), lw["q_norm"]), cos, sin)
            k = self._rotate(self._rms(k.view(b, s, nkv, d), lw["k_norm"]), cos, sin)
            state.k[i].index_copy_(1, pos, k)
            state.v[i].index_copy_(1, pos, v.view(b, s, nkv, d))
            attn = f.scaled_dot_product_attention(
                q.transpose(1, 2),
                state.k[i].transpose(1, 2),
                state.v[i].transpose(1, 2),
                attn_mask=mask,
                scale=d**-0.5,
                enable_gqa=True,
            )
            h = h + attn.transpose(1, 2).reshape(b, s, nq * d) @ lw["o"].T
            gate, up = (self._rms(h, lw["post_norm"]) @ lw["gate_up"].T).chunk(2, -1)
            h = h + (f.silu(gate) * up) @ lw["down"].T
        return self._rms(h[:, -1], self.norm) @ self.lm_head.T

    def _mask(self, pos: Any, capacity: int) -> Any:
        """[1, 1, S, C]: query at cache position pos[i] sees keys 0..pos[i]."""
        keys = self.torch.arange(capacity, device=self.device)
        return (keys[None, :] <= pos[:, None])[None, None]

    # ------------------------------------------------------------------ generation
    def _state(self, batch: int, capacity: int) -> _State:
        key = (batch, capacity)
        if key not in self.graphs:
            self.graphs[key] = _State(self, batch, capacity)
        state: _State = self.graphs[key]
        return state

    def generate(self, prompts: Sequence[Sequence[int]], new_tokens: int) -> TorchGeneration:
        """Greedy ``new_tokens`` per prompt (equal lengths); decode replays the step's CUDA graph on a GPU."""
        torch = self.torch
        ids = torch.tensor([list(p) for p in prompts], dtype=torch.long, device=self.device)
        b, plen = ids.shape
        state = self._state(b, plen + new_tokens)
        out = torch.empty(b, new_tokens, dtype=torch.long, device=self.device)
        with torch.inference_mode():
            self._sync()
            t0 = time.perf_counter()
            pos = torch.arange(plen, device=self.device)
            logits = self._forward(state, ids, pos, self._mask(pos, state.capacity))
            state.token.copy_(logits.argmax(-1, keepdim=True))
            out[:, 0:1].copy_(state.token)
            state.pos.fill_(plen)
            self._sync()
            t1 = time.perf_counter()
            for step in range(1, new_tokens):
                state.step()
                out[:, step : step + 1].copy_(state.token)
            self._sync()
            t2 = time.perf_counter()
        return TorchGeneration(out.cpu().numpy(), t1 - t0, t2 - t1, state.graph is not None)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)


class _State:
    """One (batch, capacity)'s static buffers: the KV cache, the token and position tensors, the captured step."""

    def __init__(self, runner: TorchGraphRunner, batch: int, capacity: int) -> None:
        torch, c = runner.torch, runner.config
        self.runner, self.capacity = runner, capacity
        shape = (batch, capacity, c.num_key_value_heads, c.head_dim)
        kw = {"device": runner.device, "dtype": runner.dtype}
        self.k = [torch.zeros(shape, **kw) for _ in range(c.num_hidden_layers)]
        self.v = [torch.zeros(shape, **kw) for _ in range(c.num_hidden_layers)]
        self.cos, self.sin = runner._rope_tables(capacity)
        self.token = torch.zeros(batch, 1, dtype=torch.long, device=runner.device)
        self.pos = torch.zeros(1, dtype=torch.long, device=runner.device)
        self.graph: Any = None
        if runner.use_graph:
            self._capture()

    def _eager_step(self) -> None:
        """One decode step on the static buffers: the token at self.pos in, the next token into self.token."""
        r = self.runner
        logits = r._forward(self, self.token, self.pos, r._mask(self.pos, self.capacity))
        self.token.copy_(logits.argmax(-1, keepdim=True))
        self.pos.add_(1)

    def _capture(self) -> None:
        torch = self.runner.torch
        saved = (self.token.clone(), self.pos.clone())
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.inference_mode(), torch.cuda.stream(side):
            for _ in range(2):  # warm-up outside capture (cuBLAS handles, workspaces), as PyTorch asks
                self._eager_step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.inference_mode(), torch.cuda.graph(graph):
            self._eager_step()
        self.token.copy_(saved[0])
        self.pos.copy_(saved[1])
        for buf in (*self.k, *self.v):
            buf.zero_()
        self.graph = graph

    def step(self) -> None:
        """Run one decode step: replay the graph, or the eager step where there is none."""
        if self.graph is not None:
            self.graph.replay()
        else:
            self._eager_step()

"""The transformers side: writing random Qwen3 checkpoints, and the reference answers parity and bench use.

Only this module imports torch and transformers, and only when one of its functions is called.
"""

from __future__ import annotations

import copy
import inspect
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from acl_core.extras import require

TINY: dict[str, Any] = {
    "vocab_size": 256,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 2048,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
    "initializer_range": 0.1,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
}
"""The small test model. initializer_range 0.1 (not transformers' 0.02) so that the layers, not just the
tied embedding, decide the next token: with 0.02 a random model mostly repeats its last input."""

QWEN3_0_6B: dict[str, Any] = {
    "vocab_size": 151936,
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "max_position_embeddings": 40960,
    "max_window_layers": 28,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
    "initializer_range": 0.02,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "use_sliding_window": False,
    "sliding_window": None,
    "hidden_act": "silu",
    "bos_token_id": 151643,
    "eos_token_id": 151645,
}
"""Qwen/Qwen3-0.6B's config.json, field for field (its weights are not reproduced: they are random here)."""

PRESETS = {"tiny": (TINY, "float32"), "qwen3-0.6b": (QWEN3_0_6B, "bfloat16")}
"""Preset name -> (configuration, dtype the checkpoint is saved in)."""

TORCH_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def _torch() -> Any:
    """torch, once torch and transformers are known to be installed (MissingExtra names the extra otherwise)."""
    require("torch", "transformers", purpose="the transformers side of acl-core qwen3")
    import torch

    return torch


def make_checkpoint(
    out_dir: str | Path,
    *,
    preset: str = "tiny",
    seed: int = 0,
    tied: bool | None = None,
    dtype: str | None = None,
    norm_jitter: float = 0.2,
    overrides: dict[str, Any] | None = None,
) -> Path:
    """Write a random Qwen3 checkpoint (config.json + model.safetensors) with transformers.

    The tiny preset also gets a byte-level tokenizer (ids = UTF-8 bytes), so ``--prompt`` text works.

    Every RMSNorm weight (input/post-attention/final, q_norm, k_norm) is set to 1 + ``norm_jitter`` * N(0, 1)
    instead of transformers' ones, so a runner that ignored one of them would fail parity.
    """
    torch = _torch()
    from transformers import Qwen3Config, Qwen3ForCausalLM

    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; expected one of {', '.join(PRESETS)}")
    fields, saved = PRESETS[preset]
    fields = dict(fields)
    if tied is not None:
        fields["tie_word_embeddings"] = tied
    fields.update(overrides or {})  # e.g. another head_dim, for paths a preset's shape does not take
    torch_dtype = getattr(torch, TORCH_DTYPES.get(dtype or "", saved))
    torch.manual_seed(seed)
    config = Qwen3Config(**fields)
    model = Qwen3ForCausalLM(config).eval()
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                noise = torch.randn(param.shape, generator=generator)
                param.copy_(1.0 + norm_jitter * noise)
    model = model.to(torch_dtype)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    if fields["vocab_size"] == 256:
        byte_tokenizer().save_pretrained(str(out))
    return out


def _byte_symbols() -> dict[int, str]:
    """Byte -> the printable character byte-level BPE shows it as (printable bytes stand for themselves)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    symbols = {b: chr(b) for b in printable}
    shifted = (b for b in range(256) if b not in symbols)
    for n, b in enumerate(shifted):
        symbols[b] = chr(256 + n)
    return symbols


def byte_tokenizer() -> Any:
    """A tokenizer whose 256 ids are the UTF-8 bytes of the text (for the tiny checkpoint's ``--prompt``)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {sym: b for b, sym in _byte_symbols().items()}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok)


def load_model(model_dir: str | Path, dtype: str, device: str = "cpu", attention: str = "eager") -> Any:
    """transformers' Qwen3ForCausalLM for ``model_dir`` in ``dtype`` with ``attention`` (eager), on ``device``."""
    torch = _torch()
    from transformers import Qwen3ForCausalLM

    torch_dtype = getattr(torch, TORCH_DTYPES[dtype])
    import transformers

    major, minor = (int(v) for v in transformers.__version__.split(".")[:2])
    key = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"  # renamed in transformers 4.56
    cls: Any = Qwen3ForCausalLM
    model = cls.from_pretrained(str(model_dir), **{key: torch_dtype, "attn_implementation": attention})
    return model.to(device).eval()  # not .to(dtype): that would also round the float32 rope inv_freq buffer


def prefill_logits(model: Any, prompts: Sequence[Sequence[int]]) -> np.ndarray:
    """transformers' logits [B, S, V] as float32 for equal-length prompts."""
    torch = _torch()
    device = next(model.parameters()).device
    ids = torch.tensor([list(p) for p in prompts], dtype=torch.long, device=device)
    with torch.inference_mode():
        logits = model(input_ids=ids).logits
    return logits.float().cpu().numpy()


def greedy_generate(model: Any, prompts: Sequence[Sequence[int]], new_tokens: int) -> np.ndarray:
    """transformers' greedy ``generate`` of exactly ``new_tokens`` per prompt (EOS does not stop it): [B, N]."""
    torch = _torch()
    device = next(model.parameters()).device
    ids = torch.tensor([list(p) for p in prompts], dtype=torch.long, device=device)
    saved = model.generation_config
    config = copy.deepcopy(saved)  # the checkpoint's own defaults, minus EOS (generate merges unset fields
    config.eos_token_id = None  # back from model.generation_config, so the model's own copy is swapped)
    config.do_sample = False
    config.temperature = config.top_k = config.top_p = None
    config.max_new_tokens = new_tokens
    if config.pad_token_id is None:
        config.pad_token_id = 0
    model.generation_config = config
    try:
        with torch.inference_mode():
            out = model.generate(ids, attention_mask=torch.ones_like(ids))
    finally:
        model.generation_config = saved
    tokens = out[:, ids.shape[1] :].cpu().numpy()
    if tokens.shape[1] != new_tokens:
        raise RuntimeError(f"transformers generated {tokens.shape[1]} tokens, not {new_tokens}")
    return tokens


def timed_generate(model: Any, prompts: Sequence[Sequence[int]], new_tokens: int) -> tuple[float, float]:
    """(prefill seconds, decode seconds) of greedy decoding with transformers' own KV cache.

    The prefill forward pass yields the first token; ``new_tokens - 1`` one-token forward passes follow,
    each reusing the cache the previous one returned.
    """
    torch = _torch()
    device = next(model.parameters()).device
    params = inspect.signature(model.forward).parameters
    cache_kw = "cache" if "cache" in params else "past_key_values"

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    ids = torch.tensor([list(p) for p in prompts], dtype=torch.long, device=device)
    with torch.inference_mode():
        sync()
        t0 = time.perf_counter()
        out = model(input_ids=ids, use_cache=True)
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        sync()
        t1 = time.perf_counter()
        for _ in range(new_tokens - 1):
            cache = getattr(out, "cache", None)  # transformers 5; 4 calls it past_key_values
            if cache is None:
                cache = out.past_key_values
            out = model(input_ids=nxt, use_cache=True, **{cache_kw: cache})
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        sync()
        t2 = time.perf_counter()
    return t1 - t0, t2 - t1


def tokenizer(model_dir: str | Path) -> Any:
    """The checkpoint's tokenizer (transformers' AutoTokenizer), or None when it ships none."""
    directory = Path(model_dir)
    if not any((directory / f).exists() for f in ("tokenizer.json", "tokenizer_config.json", "vocab.json")):
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(directory))

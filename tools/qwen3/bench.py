"""Prefill and decode throughput of the runner beside transformers (eager attention) on the same device."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from acl_tools.qwen3 import hf
from acl_tools.qwen3.model import Qwen3Runner
from acl_tools.qwen3.progress import Report


def _rates(batch: int, prompt_len: int, new_tokens: int, prefill_s: float, decode_s: float) -> dict[str, float]:
    decode_made = batch * (new_tokens - 1)
    return {
        "prefill_s": prefill_s,
        "decode_s": decode_s,
        "prefill_tok_s": batch * prompt_len / prefill_s if prefill_s > 0 else float("nan"),
        "decode_tok_s": decode_made / decode_s if decode_s > 0 and decode_made else float("nan"),
    }


def run(
    model_dir: str | Path,
    *,
    backend: str | None = None,
    dtype: str = "fp32",
    batches: Sequence[int] = (1, 8),
    prompt_len: int = 32,
    new_tokens: int = 32,
    with_transformers: bool = True,
    hf_device: str | None = None,
    seed: int = 0,
    repeat: int = 3,
    progress: Report | None = None,
) -> dict[str, Any]:
    """Time greedy generation per batch size on the runner, then on transformers; tokens/s side by side.

    Decode tokens/s counts the tokens after the first (which prefill produces). Each side runs a short
    warm-up generation first, then ``repeat`` timed ones; the median prefill and decode times count.
    """
    if new_tokens < 2:
        raise ValueError("new_tokens must be at least 2 (decode needs a step after the prefill token)")
    if repeat < 1:
        raise ValueError("repeat must be at least 1")
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    total = len(batches) * (repeat + 1) * (2 if with_transformers else 1)
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total)

    t0 = time.perf_counter()
    with Qwen3Runner(model_dir, backend=backend, dtype=dtype) as runner:
        caps = runner.session.backend.capabilities()
        vocab = runner.config.vocab_size
        prompts = {b: rng.integers(0, vocab, size=(b, prompt_len)).tolist() for b in batches}
        for b in batches:
            runner.generate(prompts[b], 2)
            tick()
            runs = []
            for _ in range(repeat):
                runs.append(runner.generate(prompts[b], new_tokens))
                tick()
            prefill_s = float(np.median([g.prefill_seconds for g in runs]))
            decode_s = float(np.median([g.decode_seconds for g in runs]))
            rows.append({"batch": b, "acl": _rates(b, prompt_len, new_tokens, prefill_s, decode_s)})
        info = {
            "backend": runner.backend_name,
            "platform": caps.platform.value,
            "device": caps.device_name,
            "attention": runner.attention.describe(),
            "load_s": runner.load_seconds,
            "weights_bytes": runner.weights.nbytes(),
        }
    device = hf_device or ("cpu" if info["platform"] == "cpu" else "cuda")
    if with_transformers:
        model = hf.load_model(model_dir, dtype, device)
        for row in rows:
            b = row["batch"]
            hf.timed_generate(model, prompts[b], 2)
            tick()
            times = []
            for _ in range(repeat):
                times.append(hf.timed_generate(model, prompts[b], new_tokens))
                tick()
            prefill_s = float(np.median([t[0] for t in times]))
            decode_s = float(np.median([t[1] for t in times]))
            row["transformers"] = _rates(b, prompt_len, new_tokens, prefill_s, decode_s)
            row["acl_over_transformers"] = {
                k: row["acl"][k] / row["transformers"][k] if row["transformers"][k] else float("nan")
                for k in ("prefill_tok_s", "decode_tok_s")
            }
    return {
        "model": str(model_dir),
        "dtype": dtype,
        "prompt_len": prompt_len,
        "new_tokens": new_tokens,
        "repeat": repeat,
        **info,
        "transformers_device": device if with_transformers else None,
        "rows": rows,
        "seconds": time.perf_counter() - t0,
    }

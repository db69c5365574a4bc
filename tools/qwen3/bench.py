"""Prefill and decode throughput of the runner beside transformers (eager) and a PyTorch CUDA-graph runner.

The three run one after another in one process on the same device and the same prompts: acl-core,
transformers eager attention with its own KV cache, and :mod:`acl_tools.qwen3.torch_graph` (a static
KV cache whose decode step is replayed from a ``torch.cuda.CUDAGraph``; eager on the CPU). A prefill
of one ``prefill_len``-token prompt is timed on each side, and on a CUDA device the GPU kernel time per
decode token of acl-core at batch 1 is measured with torch.profiler (CUPTI sees every kernel of the
process, whoever launched it).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from acl_tools.bench.kernel_profile import device_timeline, trace_events
from acl_tools.qwen3 import hf
from acl_tools.qwen3.model import Qwen3Runner
from acl_tools.qwen3.progress import Report

SIDES = ("acl", "transformers", "torch_graph")


def _rates(batch: int, prompt_len: int, new_tokens: int, prefill_s: float, decode_s: float) -> dict[str, float]:
    decode_made = batch * (new_tokens - 1)
    return {
        "prefill_s": prefill_s,
        "decode_s": decode_s,
        "prefill_tok_s": batch * prompt_len / prefill_s if prefill_s > 0 else float("nan"),
        "decode_tok_s": decode_made / decode_s if decode_s > 0 and decode_made else float("nan"),
    }


def _median(runs: Sequence[tuple[float, float]]) -> tuple[float, float]:
    return float(np.median([r[0] for r in runs])), float(np.median([r[1] for r in runs]))


def kernel_time(work: Callable[[], Any]) -> dict[str, Any] | None:
    """GPU kernels ``work()`` ran (torch.profiler's CUDA activity): count, summed seconds, busy seconds (the union
    of device activity: kernels overlapping under programmatic dependent launch count once), timeline; None
    without CUDA."""
    events = trace_events(work)
    if events is None:
        return None
    kernels = [e for e in events if e.get("cat") == "kernel"]
    timeline = device_timeline(events)
    return {
        "kernels": float(len(kernels)),
        "kernel_s": sum(float(e.get("dur", 0.0)) for e in kernels) * 1e-6,
        "busy_s": float(timeline["busy_s"]),
        "timeline": timeline,
    }


def decode_kernel_time(
    runner: Qwen3Runner, prompt: Sequence[int], new_tokens: int, replay: bool | None = None
) -> dict[str, Any] | None:
    """acl-core's GPU kernel time and kernel count per decode token at batch 1: a generation of
    ``new_tokens`` less a prefill-only one (same prompt), divided by the ``new_tokens - 1`` decode steps.
    ``kernel_ms_per_token`` sums kernel durations (a kernel launched with programmatic dependent launch counts
    the time it waits for its predecessor too); ``busy_ms_per_token`` is the device's busy time (the union of
    its activity), the same subtraction; ``timeline`` describes the whole generation (span, busy time, top
    kernels, widest gaps)."""
    full = kernel_time(lambda: runner.generate([prompt], new_tokens, replay=replay))
    if full is None:
        return None
    prefill = kernel_time(lambda: runner.generate([prompt], 1))
    assert prefill is not None
    steps = new_tokens - 1
    return {
        "decode_steps": steps,
        "kernel_ms_per_token": (full["kernel_s"] - prefill["kernel_s"]) / steps * 1e3,
        "busy_ms_per_token": (full["busy_s"] - prefill["busy_s"]) / steps * 1e3,
        "kernels_per_token": (full["kernels"] - prefill["kernels"]) / steps,
        "timeline": full["timeline"],
    }


def run(
    model_dir: str | Path,
    *,
    backend: str | None = None,
    dtype: str = "fp32",
    batches: Sequence[int] = (1, 8),
    prompt_len: int = 32,
    new_tokens: int = 32,
    prefill_len: int = 512,
    with_transformers: bool = True,
    with_torch_graph: bool = True,
    hf_device: str | None = None,
    seed: int = 0,
    repeat: int = 3,
    replay: bool | None = None,
    prefill_attention: str | None = None,
    decode_attention: str | None = None,
    progress: Report | None = None,
) -> dict[str, Any]:
    """Time greedy generation per batch size on the runner, then transformers, then the PyTorch graph runner.

    Decode tokens/s counts the tokens after the first (which prefill produces). Each side runs a short
    warm-up generation first, then ``repeat`` timed ones; the median prefill and decode times count.
    ``replay`` is the runner's (default: replay the captured decode step where the backend captures).
    ``prefill_len`` > 0 adds a batch-1 prefill of that many tokens on each side (``prefill`` in the report),
    with the share of acl-core's prefill time spent enqueuing on the host (``acl_enqueue_share``).
    ``prefill_attention`` / ``decode_attention`` pick the runner's attention operators (default by dtype).
    """
    if new_tokens < 2:
        raise ValueError("new_tokens must be at least 2 (decode needs a step after the prefill token)")
    if repeat < 1:
        raise ValueError("repeat must be at least 1")
    if prefill_len < 0:
        raise ValueError("prefill_len must be >= 0 (0: no long-prefill timing)")
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    sides = 1 + int(with_transformers) + int(with_torch_graph)
    total = (len(batches) * (repeat + 1) + (repeat + 1 if prefill_len else 0)) * sides
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total)

    def timed(gen: Callable[[Sequence[Sequence[int]], int], tuple[float, float]], b: int) -> tuple[float, float]:
        gen(prompts[b], new_tokens)  # the timed runs' shape: a runner that keeps its decode capture reuses it
        tick()
        runs = []
        for _ in range(repeat):
            runs.append(gen(prompts[b], new_tokens))
            tick()
        return _median(runs)

    def timed_prefill(gen: Callable[[Sequence[Sequence[int]], int], tuple[float, float]]) -> float:
        gen(long_prompt, 1)
        tick()
        runs = []
        for _ in range(repeat):
            runs.append(gen(long_prompt, 1))
            tick()
        return _median(runs)[0]

    t0 = time.perf_counter()
    prefill: dict[str, Any] = {"prompt_len": prefill_len} if prefill_len else {}
    with Qwen3Runner(
        model_dir, backend=backend, dtype=dtype, prefill_attention=prefill_attention, decode_attention=decode_attention
    ) as runner:
        caps = runner.session.backend.capabilities()
        vocab = runner.config.vocab_size
        prompts = {b: rng.integers(0, vocab, size=(b, prompt_len)).tolist() for b in batches}
        long_prompt = rng.integers(0, vocab, size=(1, prefill_len)).tolist() if prefill_len else []

        replayed: list[bool] = []
        enqueue_share: list[float] = []
        validations: list[int] = []

        def acl(p: Sequence[Sequence[int]], n: int) -> tuple[float, float]:
            g = runner.generate(p, n, replay=replay)
            if n > 1:
                replayed.append(g.replayed)
            enqueue_share.append(g.prefill_enqueue_seconds / g.prefill_seconds if g.prefill_seconds > 0 else 0.0)
            validations.append(g.prefill_validations)
            return g.prefill_seconds, g.decode_seconds

        for b in batches:
            rows.append({"batch": b, "acl": _rates(b, prompt_len, new_tokens, *timed(acl, b))})
        if prefill_len:
            enqueue_share.clear()
            validations.clear()
            prefill["acl_tok_s"] = prefill_len / timed_prefill(acl)
            prefill["acl_enqueue_share"] = float(np.median(enqueue_share))
            # phase-1 calls of the timed prefills (the warm-up validated the kept executors: 0 expected)
            prefill["acl_prefill_validations"] = max(validations[1:], default=0)
        platform = caps.platform.value
        profiled = None
        if platform != "cpu":  # a GPU backend: its kernels, as CUPTI records them
            profiled = decode_kernel_time(runner, prompts[batches[0]][0], new_tokens, replay)
        info = {
            "backend": runner.backend_name,
            "platform": platform,
            "device": caps.device_name,
            "attention": runner.attention_ops(),
            "prologue": runner.prologue,
            "load_s": runner.load_seconds,
            "weights_bytes": runner.weights.nbytes(),
            "acl_decode_kernels_batch1": profiled,
            "acl_decode_replayed": all(replayed),
        }
    device = hf_device or ("cpu" if platform == "cpu" else "cuda")
    if with_transformers:
        model = hf.load_model(model_dir, dtype, device)

        def transformers(p: Sequence[Sequence[int]], n: int) -> tuple[float, float]:
            return hf.timed_generate(model, p, n)

        for row in rows:
            row["transformers"] = _rates(row["batch"], prompt_len, new_tokens, *timed(transformers, row["batch"]))
        if prefill_len:
            prefill["transformers_tok_s"] = prefill_len / timed_prefill(transformers)
        del model
    graph_used = None
    if with_torch_graph:
        from acl_tools.qwen3.torch_graph import TorchGraphRunner

        competitor = TorchGraphRunner(model_dir, dtype, device)
        graph_used = competitor.use_graph

        def torch_graph(p: Sequence[Sequence[int]], n: int) -> tuple[float, float]:
            g = competitor.generate(p, n)
            return g.prefill_seconds, g.decode_seconds

        for row in rows:
            row["torch_graph"] = _rates(row["batch"], prompt_len, new_tokens, *timed(torch_graph, row["batch"]))
        if prefill_len:
            prefill["torch_graph_tok_s"] = prefill_len / timed_prefill(torch_graph)
        del competitor
    for row in rows:
        for other in SIDES[1:]:
            if other in row:
                row[f"acl_over_{other}"] = {
                    k: row["acl"][k] / row[other][k] if row[other][k] else float("nan")
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
        "torch_graph_device": device if with_torch_graph else None,
        "torch_graph_cuda_graph": graph_used,
        "rows": rows,
        "prefill": prefill or None,
        "seconds": time.perf_counter() - t0,
    }

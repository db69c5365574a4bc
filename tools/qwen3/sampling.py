"""Choosing the next token from the final logits on the host: temperature, top-k, top-p, a seeded generator.

The filters run in Hugging Face's order (temperature, then top-k, then top-p); top-p keeps the
smallest set of most probable tokens whose mass reaches ``top_p`` (at least one token).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Sampling:
    """Sampling parameters; ``top_k=0`` and ``top_p=1`` switch those filters off."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.temperature > 0:
            raise ValueError(f"temperature must be positive, got {self.temperature} (use greedy decoding instead)")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


def probabilities(logits: np.ndarray, params: Sampling) -> np.ndarray:
    """Next-token probabilities [B, V] after temperature, top-k and top-p (filtered tokens get 0)."""
    scores = np.asarray(logits, dtype=np.float64) / params.temperature
    vocab = scores.shape[-1]
    if 0 < params.top_k < vocab:
        kth = np.partition(scores, vocab - params.top_k, axis=-1)[:, vocab - params.top_k]
        scores = np.where(scores < kth[:, None], -np.inf, scores)
    scores = scores - scores.max(axis=-1, keepdims=True)
    probs = np.exp(scores)
    probs /= probs.sum(axis=-1, keepdims=True)
    if params.top_p < 1.0:
        order = np.argsort(-probs, axis=-1, kind="stable")
        ranked = np.take_along_axis(probs, order, axis=-1)
        before = np.cumsum(ranked, axis=-1) - ranked  # mass of the strictly more probable tokens
        keep_ranked = before < params.top_p
        keep_ranked[:, 0] = True
        keep = np.zeros_like(keep_ranked)
        np.put_along_axis(keep, order, keep_ranked, axis=-1)
        probs = np.where(keep, probs, 0.0)
        probs /= probs.sum(axis=-1, keepdims=True)
    return probs


def sample(logits: np.ndarray, params: Sampling, rng: np.random.Generator) -> np.ndarray:
    """One token id per row of ``logits`` [B, V], drawn from :func:`probabilities` with ``rng``."""
    probs = probabilities(logits, params)
    cdf = np.cumsum(probs, axis=-1)
    draws = rng.random(probs.shape[0]) * cdf[:, -1]
    picks = np.array([np.searchsorted(row, u, side="right") for row, u in zip(cdf, draws)], dtype=np.int64)
    return np.minimum(picks, probs.shape[-1] - 1)

"""Host-side sampling: the filters keep exactly the tokens they should, and draws follow the probabilities."""

from __future__ import annotations

import numpy as np
import pytest

from acl_tools.qwen3.sampling import Sampling, probabilities, sample

LOGITS = np.log(np.array([[0.5, 0.2, 0.15, 0.1, 0.05]]))


def test_no_filter_is_the_softmax():
    np.testing.assert_allclose(probabilities(LOGITS, Sampling()), [[0.5, 0.2, 0.15, 0.1, 0.05]], rtol=1e-12)


def test_temperature_sharpens_and_flattens():
    cold = probabilities(LOGITS, Sampling(temperature=0.5))
    p = np.array([0.5, 0.2, 0.15, 0.1, 0.05]) ** 2
    np.testing.assert_allclose(cold[0], p / p.sum(), rtol=1e-12)
    hot = probabilities(LOGITS, Sampling(temperature=100.0))
    assert hot.max() - hot.min() < 0.01


def test_top_k_keeps_the_k_most_probable():
    p = probabilities(LOGITS, Sampling(top_k=2))
    np.testing.assert_allclose(p, [[0.5 / 0.7, 0.2 / 0.7, 0, 0, 0]], rtol=1e-12)


@pytest.mark.parametrize(
    ("top_p", "kept"), [(0.45, 1), (0.55, 2), (0.69, 2), (0.75, 3), (0.84, 3), (0.9, 4), (0.97, 5), (1e-9, 1)]
)
def test_top_p_keeps_the_smallest_set_reaching_the_mass(top_p, kept):
    p = probabilities(LOGITS, Sampling(top_p=top_p))
    assert (p[0] > 0).sum() == kept
    np.testing.assert_allclose(p.sum(), 1.0)


def test_draws_follow_the_probabilities():
    rng = np.random.default_rng(0)
    logits = np.repeat(LOGITS, 20000, axis=0)
    counts = np.bincount(sample(logits, Sampling(), rng), minlength=5) / 20000
    np.testing.assert_allclose(counts, [0.5, 0.2, 0.15, 0.1, 0.05], atol=0.01)


def test_filtered_tokens_are_never_drawn():
    rng = np.random.default_rng(1)
    picks = sample(np.repeat(LOGITS, 5000, axis=0), Sampling(top_k=3, top_p=0.6), rng)
    assert set(picks.tolist()) == {0, 1}


@pytest.mark.parametrize("bad", [{"temperature": 0}, {"top_k": -1}, {"top_p": 0}, {"top_p": 1.5}])
def test_invalid_parameters_are_refused(bad):
    with pytest.raises(ValueError):
        Sampling(**bad)

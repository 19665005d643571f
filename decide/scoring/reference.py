"""The oracle: every candidate runs as its own full sequence through the unmodified model."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..prompts import TokenizedQuestion
from ..runtime import mx
from . import ScoreResult


def candidate_log_likelihood(model, prompt: Sequence[int], candidate: Sequence[int]) -> float:
    """Σ_t log p(candidate_t | prompt, candidate_<t) from one plain forward of prompt + candidate."""
    sequence = [*prompt, *candidate]
    logits = model(mx.array(sequence[:-1], dtype=mx.int32)[None])[0, len(prompt) - 1 :]
    return summed_log_probs(logits, candidate)


def score_reference(model, questions: Sequence[TokenizedQuestion]) -> ScoreResult:
    result = ScoreResult()
    for q in questions:
        lls = [candidate_log_likelihood(model, q.prompt, c) for c in q.candidates]
        result.log_likelihoods.append(np.array(lls, dtype=np.float64))
        result.computed_tokens += sum(len(q.prompt) + len(c) - 1 for c in q.candidates)
    return result


def summed_log_probs(logits: mx.array, tokens: Sequence[int]) -> float:
    """Σ_t log softmax(logits[t])[tokens[t]], normalized in float64.

    MLX's float32 logsumexp over a 50k vocabulary is off by up to ~3e-4 on CPU; an oracle cannot be.
    """
    x = np.asarray(logits.astype(mx.float32), dtype=np.float64)
    top = x.max(axis=-1, keepdims=True)
    lse = top[:, 0] + np.log(np.exp(x - top).sum(axis=-1))
    return float((x[np.arange(len(tokens)), np.asarray(tokens)] - lse).sum())

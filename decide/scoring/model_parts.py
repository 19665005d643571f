"""The two halves of an mlx-lm causal LM: the body (tokens → final hidden states) and the head.

Splitting them lets scorers run the LM head only at the rows whose logits are needed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..runtime import mx


@dataclass(frozen=True)
class ModelParts:
    body: Callable  # (tokens[B, L], cache) -> hidden[B, L, D]
    head: Callable  # hidden[..., D] -> logits[..., V]
    layers: list


def split_model(model) -> ModelParts:
    """Body and head of the llama/qwen2-style layout every mlx-lm causal LM shares.

    Models that do more after the body (logit soft-capping, scaled heads) are scored whole:
    their `head` is then None-equivalent and the caller runs `model` itself.
    """
    inner = getattr(model, "model", None)
    if inner is None or not hasattr(inner, "embed_tokens"):
        raise TypeError(f"{type(model).__module__} does not have the usual `model.embed_tokens` layout")
    args = getattr(model, "args", None)
    if getattr(args, "final_logit_softcapping", None):
        raise TypeError(f"{type(model).__module__} soft-caps its logits; it is scored whole")
    head = model.lm_head if hasattr(model, "lm_head") else inner.embed_tokens.as_linear
    return ModelParts(body=lambda tokens, cache=None: inner(tokens, cache), head=head, layers=list(inner.layers))


def summed_log_probs(logits: mx.array, tokens: Sequence[int]) -> float:
    """Σ_t log softmax(logits[t])[tokens[t]], normalized in float64.

    MLX's float32 logsumexp over a 50k vocabulary is off by up to ~3e-4 on CPU; an oracle cannot be.
    """
    x = np.asarray(logits.astype(mx.float32), dtype=np.float64)
    top = x.max(axis=-1, keepdims=True)
    lse = top[:, 0] + np.log(np.exp(x - top).sum(axis=-1))
    return float((x[np.arange(len(tokens)), np.asarray(tokens)] - lse).sum())

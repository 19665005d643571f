"""Per question: the prompt's KV once, then the candidates batched on top of it.

The candidates (minus their last token, whose logits nothing reads) run as one right-padded
batch over copies of the prompt's KV: under the causal mask a candidate's tokens never see
the padding after them. Models whose cache is not a plain KVCache (sliding windows, state
space layers) score one candidate at a time, trimming its tokens off the cache after it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from mlx_lm.models.cache import KVCache, make_prompt_cache, trim_prompt_cache

from ..prompts import TokenizedQuestion
from ..runtime import mx
from . import ScoreResult
from .adapter import ModelParts
from .reference import summed_log_probs

MAX_BATCH_ROWS = 256  # padded candidate tokens per batched forward; bounds the [rows, vocab] logits
MAX_BATCH_KV_BYTES = 256 << 20  # the prompt's KV copied once per batch row


def score_question(parts: ModelParts, model, q: TokenizedQuestion) -> tuple[np.ndarray, int]:
    """(log-likelihood per candidate, tokens computed including batch padding)."""
    cache = make_prompt_cache(model)
    hidden = parts.body(mx.array(q.prompt, dtype=mx.int32)[None], cache)
    first_row = parts.head(hidden[0, -1:])
    mx.eval(first_row, [c.state for c in cache])
    lls = np.array([summed_log_probs(first_row, c) if len(c) == 1 else np.nan for c in q.candidates])
    longer = [i for i, c in enumerate(q.candidates) if len(c) > 1]
    computed = len(q.prompt)
    if all(type(c) is KVCache for c in cache):
        max_batch = max(1, MAX_BATCH_KV_BYTES // max(1, sum(c.keys.nbytes + c.values.nbytes for c in cache)))
        for chunk in _chunks(longer, [len(q.candidates[i]) - 1 for i in longer], max_batch):
            computed += _score_batch(parts, cache, first_row, [q.candidates[i] for i in chunk], lls, chunk)
    else:
        for i in longer:
            lls[i] = _score_alone(parts, cache, first_row, q.candidates[i])
            computed += len(q.candidates[i]) - 1
    return lls, computed


def _score_batch(parts: ModelParts, cache, first_row: mx.array, cands, lls: np.ndarray, slots) -> int:
    width = max(len(c) for c in cands) - 1
    tokens = np.zeros((len(cands), width), dtype=np.int32)
    for b, c in enumerate(cands):
        tokens[b, : len(c) - 1] = c[:-1]
    batch_cache = [_tiled(c, len(cands)) for c in cache]
    rows = parts.head(parts.body(mx.array(tokens), batch_cache))
    mx.eval(rows)
    for b, (c, slot) in enumerate(zip(cands, slots)):
        lls[slot] = summed_log_probs(mx.concatenate([first_row, rows[b, : len(c) - 1]], axis=0), c)
    return tokens.size


def _tiled(cache: KVCache, batch: int) -> KVCache:
    keys, values = cache.keys[..., : cache.offset, :], cache.values[..., : cache.offset, :]
    out = KVCache()
    out.state = (mx.repeat(keys, batch, axis=0), mx.repeat(values, batch, axis=0), cache.offset)
    return out


def _score_alone(parts: ModelParts, cache, first_row: mx.array, cand: Sequence[int]) -> float:
    hidden = parts.body(mx.array(cand[:-1], dtype=mx.int32)[None], cache)
    ll = summed_log_probs(mx.concatenate([first_row, parts.head(hidden[0])], axis=0), cand)
    trim_prompt_cache(cache, len(cand) - 1)
    return ll


def _chunks(items: list[int], widths: list[int], max_batch: int) -> list[list[int]]:
    """Consecutive runs of at most max_batch items whose padded size (count × widest) stays within MAX_BATCH_ROWS."""
    chunks: list[list[int]] = []
    widest = 0
    for item, width in zip(items, widths):
        grown = len(chunks[-1]) + 1 if chunks else 0
        if chunks and grown <= max_batch and max(widest, width) * grown <= MAX_BATCH_ROWS:
            chunks[-1].append(item)
            widest = max(widest, width)
        else:
            chunks.append([item])
            widest = width
    return chunks


def score_prompt_once(parts: ModelParts, model, questions: Sequence[TokenizedQuestion]) -> ScoreResult:
    result = ScoreResult()
    for q in questions:
        lls, computed = score_question(parts, model, q)
        result.log_likelihoods.append(lls)
        result.computed_tokens += computed
    return result

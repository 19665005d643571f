"""Per question: the prompt's KV once, then each candidate on top of it.

Works with any mlx-lm model whose cache can be trimmed: after a candidate is scored its
tokens are trimmed off the cache, so the prompt's KV is computed once and never copied.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from mlx_lm.models.cache import make_prompt_cache, trim_prompt_cache

from ..prompts import TokenizedQuestion
from ..runtime import mx
from . import ScoreResult
from .model_parts import ModelParts, summed_log_probs


def score_question(parts: ModelParts, model, q: TokenizedQuestion) -> np.ndarray:
    cache = make_prompt_cache(model)
    hidden = parts.body(mx.array(q.prompt, dtype=mx.int32)[None], cache)
    first_row = parts.head(hidden[0, -1:])
    mx.eval(first_row, [c.state for c in cache])
    lls = []
    for cand in q.candidates:
        rows = first_row
        if len(cand) > 1:
            hidden = parts.body(mx.array(cand[:-1], dtype=mx.int32)[None], cache)
            rows = mx.concatenate([first_row, parts.head(hidden[0])], axis=0)
        lls.append(summed_log_probs(rows, cand))
        trim_prompt_cache(cache, len(cand) - 1)
    return np.array(lls, dtype=np.float64)


def score_prompt_once(parts: ModelParts, model, questions: Sequence[TokenizedQuestion]) -> ScoreResult:
    result = ScoreResult()
    for q in questions:
        result.log_likelihoods.append(score_question(parts, model, q))
        result.computed_tokens += len(q.prompt) + sum(len(c) - 1 for c in q.candidates)
    return result

"""Greedy text generation over a growing conversation, its K/V kept in mlx-lm's cache between turns.

decide never generates an answer (every answer is a scored option); this writes the example
inputs of decide/quality/examples.py. Greedy, so the same conversation always gets the same text
from the same model and precision.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Generator, Sequence

from mlx_lm.models.cache import can_trim_prompt_cache, make_prompt_cache, trim_prompt_cache

from ..runtime import mx


class GreedyWriter:
    """Continues token sequences greedily; each call reuses the K/V of the longest start it shares with what was
    fed before (a conversation's earlier turns), so a turn computes only its new tokens and its reply."""

    def __init__(self, model, stop_tokens: Sequence[int], max_tokens: int) -> None:
        self.model = model
        self.stop_tokens = frozenset(stop_tokens)
        self.max_tokens = max_tokens
        self.cache = make_prompt_cache(model)
        self.fed: list[int] = []  # the tokens whose K/V the cache holds, in order
        self.computed = 0  # tokens fed through the model so far

    def continue_from(
        self,
        tokens: Sequence[int],
        finished: Callable[[list[int]], bool] = lambda written: False,
        not_first: Collection[int] = (),
    ) -> Generator[None, None, list[int]]:
        """Returns the greedy continuation of `tokens`, up to max_tokens, without the stop token that ended it; also
        ended as soon as `finished(its tokens so far)`. Its first token is the likeliest not in `not_first`. Yields
        after each token but the last, its model call done: a step (a server writes between requests)."""
        logits = self._feed(list(tokens))[0, -1]
        if not_first:
            logits[mx.array(sorted(not_first))] = -mx.inf
        written: list[int] = []
        while len(written) < self.max_tokens:
            token = int(mx.argmax(logits).item())  # the model call runs here (MLX evaluates lazily)
            if token in self.stop_tokens:
                break
            written.append(token)
            if finished(written) or len(written) == self.max_tokens:
                break
            yield None
            logits = self._feed([*self.fed, token])[0, -1]
        return written

    def _feed(self, tokens: list[int]) -> mx.array:
        """Logits after `tokens`: the cache trimmed to their shared start with what it holds, the rest fed."""
        shared = 0
        for a, b in zip(self.fed, tokens):
            if a != b:
                break
            shared += 1
        shared = min(shared, len(tokens) - 1)  # at least one token is fed, for its logits
        if len(self.fed) > shared and can_trim_prompt_cache(self.cache):
            trim_prompt_cache(self.cache, len(self.fed) - shared)
        elif len(self.fed) > shared:  # a cache that cannot drop its end (a sliding window) starts again
            self.cache, shared = make_prompt_cache(self.model), 0
        new = tokens[shared:]
        logits = self.model(mx.array([new], dtype=mx.int32), cache=self.cache)
        self.fed, self.computed = tokens, self.computed + len(new)
        return logits

"""Greedy text generation with mlx-lm's batch generator.

decide never generates an answer (every answer is a scored option); this writes the example
inputs of decide/quality/examples.py. Greedy and one call per question, so the same question
always gets the same text from the same model and precision.
"""

from __future__ import annotations

from collections.abc import Sequence

from mlx_lm.generate import BatchGenerator


def generate(model, prompts: Sequence[Sequence[int]], stop_tokens: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Each prompt's greedy continuation, up to `max_tokens` tokens, without the stop token that ended it."""
    if not prompts:
        return []
    generator = BatchGenerator(
        model,
        stop_tokens=[[t] for t in stop_tokens],
        completion_batch_size=len(prompts),
        prefill_batch_size=len(prompts),
    )
    try:
        uids = generator.insert([list(p) for p in prompts], [max_tokens] * len(prompts))
        written: dict[int, list[int]] = {uid: [] for uid in uids}
        while responses := generator.next_generated():
            for r in responses:
                if r.finish_reason != "stop":
                    written[r.uid].append(int(r.token))
    finally:
        generator.close()
    return [written[uid] for uid in uids]

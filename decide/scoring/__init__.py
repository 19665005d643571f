"""Protocol-free scoring: token sequences in, per-candidate log-likelihoods out.

Three scorers answer the same question with the same numbers:
- `reference`: every candidate its own full forward pass (the oracle, kept forever);
- `prompt_once`: per question, the prompt once, then each candidate on top of its KV;
- `trie`: all questions and candidates of a request in one tree-masked forward.

adapter/ holds every assumption about a model's internals and the kernels the trie engine runs on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class ScoreResult:
    """Per question, one log-likelihood per candidate (float64).

    A scorer may shift all of a question's log-likelihoods by the same constant (a
    normalizer that cancels in the softmax); only differences within a question matter.
    """

    log_likelihoods: list[np.ndarray] = field(default_factory=list)
    # Per question, where the scorer keeps them: the hidden states at its last prompt token (the answer position)
    # of the model's readout layers, by layer number (1-based; the last one as the body outputs it, normed).
    hidden: list[dict[int, np.ndarray] | None] = field(default_factory=list)
    computed_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0

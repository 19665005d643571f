"""What a scoring path computes, counted honestly, and the FLOPs that follows.

    FLOPs = 2 · (non-embedding params) · tokens       every token through the layers
          + 2 · hidden · vocab · head_rows            the LM head, only at the rows it is applied to
          + 4 · layers · heads · head_dim · keys      QKᵀ and AV: each query against each key it sees, per layer

A query sees exactly `position + 1` keys in every exact scorer (causal prefix, or the cached
prefix plus its ancestors-or-self in the forest, whose depth is its position), so `keys` is the
sum of (position + 1) over the computed tokens. Masked-out keys that a dense kernel still
multiplies are not counted: they are waste, not work.

The reference and prompt-once paths are fixed oracles, so their work follows from the token
sequences; the trie engine changes, so its work is counted at run time by wrapping the body
and head it calls (`counting_parts`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from mlx.utils import tree_flatten

from decide.prompts import TokenizedQuestion
from decide.runtime import mx
from decide.scoring.adapter.hooks import Positions


@dataclass
class Work:
    tokens: int = 0  # through the layers
    head_rows: int = 0
    keys: int = 0  # Σ over computed tokens of the keys each attends to

    def add(self, tokens: int, offset: int = 0, head_rows: int = 0) -> None:
        """`tokens` consecutive causal tokens after `offset` cached ones."""
        self.tokens += tokens
        self.keys += tokens * offset + tokens * (tokens + 1) // 2
        self.head_rows += head_rows

    def reset(self) -> None:
        self.tokens = self.head_rows = self.keys = 0

    def flops(self, shape: ModelShape) -> float:
        return (
            2.0 * shape.layer_params * self.tokens
            + 2.0 * shape.hidden * shape.vocab * self.head_rows
            + 4.0 * shape.layers * shape.heads * shape.head_dim * self.keys
        )


@dataclass(frozen=True)
class ModelShape:
    layer_params: int  # parameters of the transformer layers and final norm (no embedding, no head)
    hidden: int
    vocab: int
    heads: int
    head_dim: int
    layers: int

    @classmethod
    def of(cls, model) -> ModelShape:
        args = model.args
        inner = model.model
        params = sum(v.size for module in (*inner.layers, inner.norm) for _, v in tree_flatten(module.parameters()))
        heads = args.num_attention_heads
        head_dim = getattr(args, "head_dim", None) or args.hidden_size // heads
        return cls(int(params), args.hidden_size, args.vocab_size, heads, head_dim, len(inner.layers))


def reference_work(questions: Sequence[TokenizedQuestion]) -> Work:
    """One plain forward of prompt + candidate[:-1] per candidate; the head runs at every position."""
    work = Work()
    for q in questions:
        for c in q.candidates:
            n = len(q.prompt) + len(c) - 1
            work.add(n, head_rows=n)
    return work


def prompt_once_work(questions: Sequence[TokenizedQuestion]) -> Work:
    """The prompt once (head at its last row), then each candidate[:-1] on its KV (head at every row)."""
    work = Work()
    for q in questions:
        p = len(q.prompt)
        work.add(p, head_rows=1)
        for c in q.candidates:
            work.add(len(c) - 1, offset=p, head_rows=len(c) - 1)
    return work


def trie_minimum(questions: Sequence[TokenizedQuestion]) -> int:
    """Tokens an exact scorer must compute: the distinct proper prefixes of all prompt + candidate sequences."""
    root: dict = {}
    count = 0

    def walk(node: dict, tokens: Sequence[int]) -> dict:
        nonlocal count
        for t in tokens:
            if t not in node:
                node[t] = {}
                count += 1
            node = node[t]
        return node

    for q in questions:
        end = walk(root, q.prompt[:-1])
        for c in q.candidates:
            walk(end, (q.prompt[-1], *c[:-1]))
    return count


def counting_parts(parts, work: Work):
    """`parts` with a body and head that add what they compute to `work`."""

    def body(tokens: mx.array, cache=None):
        batch, length = tokens.shape
        offset = cache[0].offset if cache else 0
        if isinstance(offset, Positions):
            offset = offset.tokens
        if isinstance(offset, mx.array):  # a forest: per-token positions, each sees position + 1 keys
            work.tokens += batch * length
            work.keys += batch * int(mx.sum(offset.astype(mx.int64) + 1).item())
        else:
            for _ in range(batch):
                work.add(length, offset=int(offset))
        return parts.body(tokens, cache)

    def head(hidden: mx.array) -> mx.array:
        work.head_rows += hidden.size // hidden.shape[-1]
        return parts.head(hidden)

    return replace(parts, body=body, head=head)

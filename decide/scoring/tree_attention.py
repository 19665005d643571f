"""Tree-masked attention inside stock mlx-lm models, without forking model files.

Two hooks make a packed forest of tokens look like one sequence to the model:

- each attention's `rope` is wrapped by `PositionalRoPE`: an int offset behaves exactly as
  before, an int array gives every token its own position (its depth in the forest);
- `ForestCache` stands in for the layer's KV cache: its `offset` is that position array, it
  prepends the cached prefix's K/V without touching them, and `make_mask` returns the
  ancestor-or-self mask, so node i sees the prefix and its own ancestors only.

Installing is checked numerically on the real model (`self_test`): a model whose attention
does not route through these hooks is left alone and scored by the prompt-once path.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import NamedTuple

import mlx.nn as nn
import numpy as np

from ..runtime import mx
from . import fast_kernels

log = logging.getLogger("decide.scoring")


class PositionalRoPE(nn.Module):
    """A model's own RoPE, applied per token when given an array of positions."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def __call__(self, x: mx.array, offset=0) -> mx.array:
        if fast_kernels.is_enabled() and (out := fast_kernels.rope_tables.rotate(self.inner, x, offset)) is not None:
            return out
        if isinstance(offset, mx.array) and offset.ndim == 1:
            # Lay the L tokens along the batch axis: RoPE takes one offset per batch row.
            # (B=1, H, L, D) -> (L, H, 1, D) -> rotate -> back.
            return self.inner(x.transpose(2, 1, 0, 3), offset=offset).transpose(2, 1, 0, 3)
        return self.inner(x, offset=offset)


@dataclass(frozen=True)
class Block:
    """One segment's columns of the attended K/V: its cached prefix, then its `nodes` forest nodes.

    The first `chain` nodes continue the prefix (its uncached tail, computed in this pass): a causal run
    that every later node of the block sees whole, as it sees the cached prefix."""

    prefix: list[tuple[mx.array, mx.array]] | None  # per layer, None when the segment has no cached prefix
    prefix_len: int
    nodes: int
    chain: int = 0

    @property
    def width(self) -> int:
        return self.prefix_len + self.nodes


class Span(NamedTuple):
    """Rows [r0, r1) of a pass attending to columns [c0, c1): causally (row r0 sees the columns up to c0 +
    `causal`), or under the tree mask with the first `shared` columns seen by every row."""

    r0: int
    r1: int
    c0: int
    c1: int
    causal: int | None
    shared: int


class ForestCache:
    """A layer's view of the blocks' columns: per block, its cached prefix K/V, then its nodes' new K/V.

    Its `offset` is the per-node position array; `make_mask` returns the block-diagonal ancestor mask.
    `fresh` keeps the pass's new (K, V), from which a block's chain is stored as a prefix."""

    def __init__(self, layer: int, blocks: list[Block], positions: mx.array, mask: mx.array, spans, span_masks) -> None:
        self.layer = layer
        self.blocks = blocks
        self.positions = positions
        self.mask = mask
        # For fast_kernels: each Span attends alone, with its mask as a causal offset or a 0 / -inf bias.
        self.spans = spans
        self.span_masks = span_masks
        self.fresh: tuple[mx.array, mx.array] | None = None

    @property
    def offset(self) -> mx.array:
        return self.positions

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        self.fresh = (keys, values)
        if len(self.blocks) == 1 and self.blocks[0].prefix is None:
            return keys, values
        ks, vs, start = [], [], 0
        for b in self.blocks:
            if b.prefix is not None:
                pk, pv = b.prefix[self.layer]
                ks.append(pk)
                vs.append(pv)
            ks.append(keys[:, :, start : start + b.nodes])
            vs.append(values[:, :, start : start + b.nodes])
            start += b.nodes
        return mx.concatenate(ks, axis=2), mx.concatenate(vs, axis=2)

    def make_mask(self, N: int, return_array: bool = False, window_size: int | None = None) -> mx.array:
        return self.mask


def attention_modules(layers: list) -> list:
    return [getattr(layer, "self_attn", None) or getattr(layer, "attention", None) for layer in layers]


def install(layers: list) -> bool:
    """Wrap every attention's rope (idempotent). False when some layer has no `rope` to wrap."""
    attns = attention_modules(layers)
    if any(a is None or not isinstance(getattr(a, "rope", None), nn.Module) for a in attns):
        return False
    for a in attns:
        if not isinstance(a.rope, PositionalRoPE):
            a.rope = PositionalRoPE(a.rope)
    return True


def uninstall(layers: list) -> None:
    for a in attention_modules(layers):
        if a is not None and isinstance(getattr(a, "rope", None), PositionalRoPE):
            a.rope = a.rope.inner


def forest_mask(blocks: list[Block], ancestors: list[np.ndarray]) -> mx.array:
    """bool[N, Σ width]: a block's nodes see its prefix and their own ancestors-or-self, nothing of other blocks."""
    n = sum(b.nodes for b in blocks)
    full = np.zeros((n, sum(b.width for b in blocks)), dtype=np.bool_)
    row = col = 0
    for b, anc in zip(blocks, ancestors, strict=True):
        full[row : row + b.nodes, col : col + b.prefix_len] = True
        full[row : row + b.nodes, col + b.prefix_len : col + b.prefix_len + b.nodes] = anc
        row, col = row + b.nodes, col + b.width
    return mx.array(full)


def block_spans(blocks: list[Block]) -> list[Span]:
    """Per block with nodes: its chain's rows (causal), then its other rows (tree mask, prefix and chain shared)."""
    spans, row, col = [], 0, 0
    for b in blocks:
        if b.chain:
            spans.append(Span(row, row + b.chain, col, col + b.prefix_len + b.chain, b.prefix_len, 0))
        if b.nodes > b.chain:
            spans.append(Span(row + b.chain, row + b.nodes, col, col + b.width, None, b.prefix_len + b.chain))
        row, col = row + b.nodes, col + b.width
    return spans


@dataclass(frozen=True)
class ForestPass:
    hidden: mx.array  # final hidden states [N, D] of the pass's nodes
    caches: list[ForestCache]

    def chain_kv(self, index: int) -> list[tuple[mx.array, mx.array]]:
        """Per layer, the new (K, V) of block `index`'s chain."""
        blocks = self.caches[0].blocks
        start = sum(b.nodes for b in blocks[:index])
        stop = start + blocks[index].chain
        return [(c.fresh[0][:, :, start:stop], c.fresh[1][:, :, start:stop]) for c in self.caches]


def forest_forward(
    body, n_layers: int, tokens: np.ndarray, positions: np.ndarray, blocks: list[Block], mask
) -> ForestPass:
    """The packed forest nodes of `blocks` through the model, each block on top of its own prefix K/V."""
    pos = mx.array(positions.astype(np.int32))
    spans = block_spans(blocks)
    span_masks = [
        s.causal if s.causal is not None else fast_kernels.additive_bias(mask[s.r0 : s.r1, s.c0 : s.c1]) for s in spans
    ]
    caches = [ForestCache(i, blocks, pos, mask, spans, span_masks) for i in range(n_layers)]
    return ForestPass(body(mx.array(tokens.astype(np.int32))[None], caches)[0], caches)


def self_test(parts, model, fast: bool = False, tolerance: float = 1e-3, bf16_attention: bool = False) -> bool:
    """Does a two-branch forest give the same hidden states as plain forwards of each branch, within
    `tolerance` of their largest value? (A wiring fault is off by the order of that value.)

    With `fast`, the forest runs on fast_kernels (the plain forwards always run stock), with
    `bf16_attention` attention's products in bfloat16."""
    rng = np.random.default_rng(0)
    vocab = int(parts.head(mx.zeros((1, parts_hidden_size(parts, model)))).shape[-1])
    stem = rng.integers(0, vocab, 5).tolist()
    a, b = rng.integers(0, vocab, 3).tolist(), rng.integers(0, vocab, 2).tolist()
    tokens = np.array(stem + a + b)
    parents = list(range(-1, 4)) + [4, 5, 6] + [4, 8]
    positions = np.array([0, 1, 2, 3, 4, 5, 6, 7, 5, 6])
    anc = np.zeros((10, 10), dtype=np.bool_)
    for i in range(10):
        j = i
        while j >= 0:
            anc[i, j] = True
            j = parents[j]
    with fast_kernels.enabled(bf16_attention) if fast else contextlib.nullcontext():
        blocks = [Block(None, 0, len(tokens))]
        got = forest_forward(
            parts.body, len(parts.layers), tokens, positions, blocks, forest_mask(blocks, [anc])
        ).hidden
    want_a = parts.body(mx.array(stem + a)[None])[0]
    want_b = parts.body(mx.array(stem + b)[None])[0]
    want = mx.concatenate([want_a, want_b[5:]], axis=0)
    err = float(mx.abs(got.astype(mx.float32) - want.astype(mx.float32)).max())
    scale = float(mx.abs(want.astype(mx.float32)).max()) or 1.0
    ok = err <= tolerance * scale
    if not ok:
        kernels = "fast" if fast else "stock"
        log.info("tree attention self-test failed with %s kernels (max error %.3g of %.3g)", kernels, err, scale)
    return ok


def parts_hidden_size(parts, model) -> int:
    args = getattr(model, "args", None)
    size = getattr(args, "hidden_size", None)
    if size is None:
        raise TypeError("model args have no hidden_size")
    return int(size)

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
        if isinstance(offset, mx.array) and offset.ndim == 1:
            # Lay the L tokens along the batch axis: RoPE takes one offset per batch row.
            # (B=1, H, L, D) -> (L, H, 1, D) -> rotate -> back.
            return self.inner(x.transpose(2, 1, 0, 3), offset=offset).transpose(2, 1, 0, 3)
        return self.inner(x, offset=offset)


class ForestCache:
    """A layer's view of (cached prefix K/V) + (the forest being computed now)."""

    def __init__(
        self, prefix: tuple[mx.array, mx.array] | None, positions: mx.array, mask: mx.array, bias: mx.array
    ) -> None:
        self.prefix = prefix
        self.positions = positions
        self.mask = mask
        self.bias = bias  # the mask as 0 / -inf, for fast_kernels.attention

    @property
    def offset(self) -> mx.array:
        return self.positions

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        if self.prefix is None:
            return keys, values
        pk, pv = self.prefix
        return mx.concatenate([pk, keys], axis=2), mx.concatenate([pv, values], axis=2)

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


def forest_mask(ancestors: np.ndarray, prefix_len: int) -> mx.array:
    """bool[N, prefix_len + N]: every node sees the whole prefix, then its ancestors-or-self."""
    n = ancestors.shape[0]
    full = np.ones((n, prefix_len + n), dtype=np.bool_)
    full[:, prefix_len:] = ancestors
    return mx.array(full)


def forest_hidden(
    body, n_layers: int, tokens: np.ndarray, positions: np.ndarray, mask: mx.array, prefix_kv
) -> mx.array:
    """Final hidden states [N, D] of the packed forest on top of the prefix K/V (or none)."""
    pos = mx.array(positions.astype(np.int32))
    bias = fast_kernels.additive_bias(mask)
    caches = [ForestCache(None if prefix_kv is None else prefix_kv[i], pos, mask, bias) for i in range(n_layers)]
    return body(mx.array(tokens.astype(np.int32))[None], caches)[0]


def self_test(parts, model, fast: bool = False) -> bool:
    """Does a two-branch forest give the same hidden states as plain forwards of each branch?

    With `fast`, the forest runs on fast_kernels (the plain forwards always run stock)."""
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
    with fast_kernels.enabled() if fast else contextlib.nullcontext():
        got = forest_hidden(parts.body, len(parts.layers), tokens, positions, forest_mask(anc, 0), None)
    want_a = parts.body(mx.array(stem + a)[None])[0]
    want_b = parts.body(mx.array(stem + b)[None])[0]
    want = mx.concatenate([want_a, want_b[5:]], axis=0)
    err = float(mx.abs(got.astype(mx.float32) - want.astype(mx.float32)).max())
    scale = float(mx.abs(want.astype(mx.float32)).max()) or 1.0
    ok = err <= 1e-3 * scale
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

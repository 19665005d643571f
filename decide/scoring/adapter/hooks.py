"""The hooks that let a forest pass steer a stock mlx-lm model, installed once per model.

Each hook acts only on what a pass's cache (forest_pass.py) hands it and otherwise calls the stock
code unchanged, so the reference scorer runs mlx-lm's own model on the same object:

- rope: every attention's `rope` is wrapped by `PositionalRoPE`; given `Positions` (a pass cache's
  `offset`) it rotates each token at its own position with the pass's backend, else it is the model's;
- attention: the `scaled_dot_product_attention` name the model's module imported from mlx-lm is
  replaced; with a pass cache it runs the backend's kernel once per span of the cache (span
  splitting: each block of a merged pass attends alone, so merging changes no bit);
- layers: every decoder layer gets `PassLayer` mixed into its class; with a pass cache a llama-style
  pre-norm SwiGLU layer runs its silu product on the backend (a layer of another shape keeps its own),
  and any layer keeps its output at the rows the cache taps (a readout's hidden states).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import NamedTuple

import mlx.nn as nn

from ...runtime import mx
from .kernels import additive_bias

SWIGLU_LAYER = {"self_attn", "mlp", "input_layernorm", "post_attention_layernorm"}
SWIGLU_MLP = {"gate_proj", "up_proj", "down_proj"}


class Positions(NamedTuple):
    """A pass's per-token positions and the rope kernel that applies them."""

    tokens: mx.array  # int32[L]
    rope: Callable  # (rope module, x, positions) -> rotated x


class PositionalRoPE(nn.Module):
    """A model's own RoPE, applied per token when given `Positions`."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def __call__(self, x: mx.array, offset=0) -> mx.array:
        if isinstance(offset, Positions):
            return offset.rope(self.inner, x, offset.tokens)
        return self.inner(x, offset=offset)


class PassLayer:
    """Mixed into the class of every decoder layer (a class swap, not a wrapper: model code reads attributes
    of its layers). With a pass cache (one that names a backend):
    - a layer h = x + attn(norm(x)); out = h + down(silu(gate(norm(h))) · up(norm(h))) (`swiglu`) runs its
      silu product on the pass's backend; a layer of another shape runs its own code;
    - the output rows the cache's `tap_rows` name are kept in `cache.tapped`."""

    swiglu = False

    def __call__(self, x: mx.array, *args, **kwargs) -> mx.array:
        cache = kwargs.get("cache", args[1] if len(args) > 1 else None)
        backend = getattr(cache, "backend", None)
        if backend is None or not self.swiglu:
            out = super().__call__(x, *args, **kwargs)
        else:
            h = x + self.self_attn(self.input_layernorm(x), args[0] if args else kwargs.get("mask"), cache)
            y, mlp = self.post_attention_layernorm(h), self.mlp
            if backend.mlp is not None:
                out = h + backend.mlp(mlp, y)
            else:
                out = h + mlp.down_proj(backend.silu_product(mlp.gate_proj(y), mlp.up_proj(y)))
        rows = getattr(cache, "tap_rows", None)
        if rows is not None:
            cache.tapped = out[0, rows]
        return out


@functools.cache
def _hooked(cls: type, swiglu: bool) -> type:
    return type(cls.__name__, (PassLayer, cls), {"__module__": cls.__module__, "swiglu": swiglu})


def attention_modules(layers: list) -> list:
    return [getattr(layer, "self_attn", None) or getattr(layer, "attention", None) for layer in layers]


def is_swiglu_block(layer: nn.Module) -> bool:
    """Has `layer` the llama/qwen2 layout `PassLayer.swiglu` assumes? (The self-test checks the arithmetic.)"""
    mlp = getattr(layer, "mlp", None)
    return (
        set(layer.children()) == SWIGLU_LAYER
        and isinstance(mlp, nn.Module)
        and set(mlp.children()) == SWIGLU_MLP
        and hasattr(sys.modules.get(type(mlp).__module__), "swiglu")
    )


def install(inner: nn.Module) -> bool:
    """Install the hooks into the model body `inner` (idempotent). False when an attention has no rope."""
    attns = attention_modules(inner.layers)
    if any(a is None or not isinstance(getattr(a, "rope", None), nn.Module) for a in attns):
        return False
    for a in attns:
        if not isinstance(a.rope, PositionalRoPE):
            a.rope = PositionalRoPE(a.rope)
    module = sys.modules.get(type(attns[0]).__module__)
    stock = getattr(module, "scaled_dot_product_attention", None)
    if callable(stock) and not hasattr(stock, "stock"):
        module.scaled_dot_product_attention = _attention_hook(stock)
    for layer in inner.layers:
        if not isinstance(layer, PassLayer):
            layer.__class__ = _hooked(type(layer), is_swiglu_block(layer))
    return True


def uninstall(inner: nn.Module) -> None:
    """Take the rope and layer hooks out of `inner` (the attention hook is inert without a pass cache)."""
    for layer in inner.layers:
        if isinstance(layer, PassLayer):
            layer.__class__ = type(layer).__bases__[1]
    for a in attention_modules(inner.layers):
        if a is not None and isinstance(getattr(a, "rope", None), PositionalRoPE):
            a.rope = a.rope.inner


def causal_mask(mask, length: int, span: int) -> mx.array | int | None:
    """An attention kernel's mask for the mask mlx-lm builds from a causal cache; None when it is another kind."""
    if mask is None:
        return span - 1 if length == 1 else None
    if isinstance(mask, str):
        return span - length if mask == "causal" else None
    return additive_bias(mask) if mask.dtype == mx.bool_ else None


def _attention_hook(stock: Callable) -> Callable:
    def scaled_dot_product_attention(queries, keys, values, cache, scale, mask, sinks=None):
        backend = getattr(cache, "backend", None)
        spans = getattr(cache, "spans", None)
        fits = backend is not None and sinks is None
        if fits and spans is None and (causal := causal_mask(mask, queries.shape[2], keys.shape[2])) is not None:
            return backend.attention(queries, keys, values, scale, causal, 0)
        if not fits or spans is None:
            return stock(queries, keys, values, cache=cache, scale=scale, mask=mask, sinks=sinks)
        outs = [
            backend.attention(
                queries[:, :, s.r0 : s.r1], keys[:, :, s.c0 : s.c1], values[:, :, s.c0 : s.c1], scale, m, s.shared
            )
            for s, m in zip(spans, cache.span_masks)
        ]
        return outs[0] if len(outs) == 1 else mx.concatenate(outs, axis=2)

    scaled_dot_product_attention.stock = stock
    return scaled_dot_product_attention

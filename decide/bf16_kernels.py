"""Native bfloat16 kernels of the trie engine's forward (decide._onednn): pure functions, numpy in and out.

`attention` is decide._native.attention (csrc/kernels.cpp: tiles of query rows, an online softmax in
float32, a forest's own keys summed in order) with its two products, q·kᵀ and p·v, as bf16 × bf16 →
float32-accumulate GEMMs through oneDNN (csrc/bf16_gemm.cpp): q · scale, k, v and the softmax
numerators are rounded to bf16. Measured on a 2-core AMD EPYC (avx512_bf16): 1.5-2x the float32
kernel on 176-2,000 causal tokens of SmolLM2's shape.
"""

from __future__ import annotations

import numpy as np

from . import bf16


def attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    scale: float,
    bias: np.ndarray | None,
    causal_offset: int = 0,
    shared: int = 0,
) -> np.ndarray:
    """softmax(q kᵀ · scale + mask) v with bf16 products: the arguments of decide._native.attention
    (q float32 [heads, length, dim], k and v [kv_heads, span, dim]; bias [length, span] of 0 / -inf
    with keys [0, shared) seen by every query, or None for a causal mask at `causal_offset`)."""
    return bf16._native().attention(q, k, v, scale, bias, causal_offset, shared)

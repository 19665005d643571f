"""Where the trie path's time goes: `python -m bench.profile [case] [--warm]` (default: standard, cold).

1. Phases of one request, timed by wrapping the trie engine's steps (each lazy MLX result is
   evaluated inside its phase, so the forward is attributed to the step that builds it).
2. Per-op times of one layer of the forest forward, on the real pass's shapes and the model's own
   layer-0 modules, each op evaluated alone (median of a few runs), times the number of layers.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace

import decide.runtime  # noqa: F401  (BLAS before mlx)
import decide.scoring.trie as trie_module
from decide.core import Decider, DeciderOptions
from decide.models import load_model
from decide.runtime import mx

from . import config
from .cases import CASES

PHASES = ("build_forest", "forest_mask", "forest_hidden", "row_logsumexp", "pair_logits", "candidate_scores")


class PhaseTimer:
    """Wraps callables so that their wall time (results evaluated) is summed per name."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.masks: list[mx.array] = []  # the mask of each forest pass: bool[nodes, prefix + nodes]

    def wrap(self, name: str, fn: Callable) -> Callable:
        def timed(*args, **kwargs):
            start = time.perf_counter()
            out = fn(*args, **kwargs)
            if isinstance(out, mx.array):
                mx.eval(out)
            self.seconds[name] += time.perf_counter() - start
            if name == "forest_hidden":
                self.masks.append(next(a for a in args if isinstance(a, mx.array) and a.ndim == 2))
            return out

        return timed


def profile_phases(decider: Decider, request, warm: bool) -> PhaseTimer:
    timer = PhaseTimer()
    saved = {name: getattr(trie_module, name) for name in PHASES if hasattr(trie_module, name)}
    scorer = decider.trie
    parts, prefix, tokenize = scorer.parts, scorer._prefix, decider.prompts.tokenize
    try:
        for name, fn in saved.items():
            setattr(trie_module, name, timer.wrap(name, fn))
        scorer.parts = replace(parts, head=timer.wrap("head", parts.head))
        scorer._prefix = timer.wrap("prefix (causal)", prefix)
        decider.prompts.tokenize = timer.wrap("tokenize", tokenize)
        decider.decide(request)  # warm-up (and fills the prefix cache for --warm)
        timer.seconds.clear()
        timer.masks.clear()
        if not warm:
            scorer.cache.clear()
        start = time.perf_counter()
        decider.decide(request)
        timer.seconds["total"] = time.perf_counter() - start
    finally:
        for name, fn in saved.items():
            setattr(trie_module, name, fn)
        scorer.parts, scorer._prefix = parts, prefix
        del decider.prompts.tokenize  # back to the class attribute
    return timer


def median_seconds(fn: Callable[[], object], reps: int = 5) -> float:
    mx.eval(fn())
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        mx.eval(fn())
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def layer_ops(layer, mask: mx.array) -> dict[str, Callable[[], mx.array]]:
    """One decoder layer's ops on a forest pass with this mask (bool[nodes, prefix + nodes]).

    Inputs are random but the mask is the pass's own: a fused attention's speed depends on the mask's
    pattern (a random one is ~1.6x slower than a structured one).
    """
    nodes, keys = mask.shape
    attn, mlp = layer.self_attn, layer.mlp
    d = layer.input_layernorm.weight.shape[0]
    h, hkv = attn.n_heads, attn.n_kv_heads
    hd = attn.q_proj.weight.shape[0] // h
    inter = mlp.gate_proj.weight.shape[0]
    key = mx.random.key(0)
    x = mx.random.normal((1, nodes, d), key=key)
    q = mx.random.normal((1, h, nodes, hd), key=key)
    k = mx.random.normal((1, hkv, keys, hd), key=key)
    v = mx.random.normal((1, hkv, keys, hd), key=key)
    k_new = mx.random.normal((1, hkv, nodes, hd), key=key)
    prefix_k = k[:, :, : keys - nodes]
    scores = mx.where(mask, mx.random.normal((1, h, nodes, keys), key=key), -float("inf"))
    g = mx.random.normal((1, nodes, inter), key=key)
    positions = mx.arange(keys - nodes, keys)
    mx.eval(x, q, k, v, k_new, mask, scores, g, positions)
    k_rep = mx.repeat(k, h // hkv, axis=1)
    mx.eval(k_rep)
    return {
        "rms_norm x2": lambda: mx.stack([layer.input_layernorm(x), layer.post_attention_layernorm(x)]),
        "q/k/v projections": lambda: [attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)],
        "rope q+k (per-token positions)": lambda: [attn.rope(q, offset=positions), attn.rope(k_new, offset=positions)],
        "prefix K/V concat": lambda: [mx.concatenate([prefix_k, k_new], axis=2)] * 2,
        "sdpa (masked, fused)": lambda: mx.fast.scaled_dot_product_attention(q, k, v, scale=attn.scale, mask=mask),
        "  of which QK^T + AV matmuls": lambda: (q @ k_rep.swapaxes(-1, -2)) @ k_rep,
        "  of which softmax (exp)": lambda: mx.softmax(scores, axis=-1),
        "  (exp alone)": lambda: mx.exp(scores),
        "  (a multiply, same tensor)": lambda: scores * scores,
        "o projection": lambda: attn.o_proj(x),
        "MLP gate+up matmuls": lambda: [mlp.gate_proj(x), mlp.up_proj(x)],
        "MLP silu(gate) * up": lambda: g * mx.sigmoid(g) * g,  # nn.silu(gate) * up
        "MLP down matmul": lambda: mlp.down_proj(g),
        "residual adds x2": lambda: [x + x, x + x],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", nargs="?", default="standard", choices=list(CASES))
    parser.add_argument("--warm", action="store_true", help="keep the prefix cache (default: cleared first)")
    args = parser.parse_args()
    loaded = load_model(config.model())
    decider = Decider(loaded, DeciderOptions(scorer="trie"))
    if decider.trie is None:
        raise SystemExit(f"{loaded.model_id}: the trie engine does not fit this model")
    timer = profile_phases(decider, CASES[args.case].build(), args.warm)
    total = timer.seconds.pop("total")
    print(f"{loaded.model_id}, case {args.case} ({'warm' if args.warm else 'cold'}): one request {total:.3f} s")
    for name, s in sorted(timer.seconds.items(), key=lambda kv: -kv[1]):
        print(f"  {name:<20} {s:8.3f} s  {100 * s / total:5.1f}%")
    print(f"  {'other':<20} {total - sum(timer.seconds.values()):8.3f} s")
    if not timer.masks:
        return
    mask = max(timer.masks, key=lambda m: m.size)
    nodes, keys = mask.shape
    layers = decider.trie.parts.layers
    print(f"\nper-op, largest forest pass: {nodes} nodes x {keys} keys, x {len(layers)} layers (each op alone):")
    ops = {name: median_seconds(fn) * len(layers) for name, fn in layer_ops(layers[0], mask).items()}
    total_ops = sum(s for name, s in ops.items() if not name.startswith("  "))
    for name, s in ops.items():
        print(f"  {name:<32} {s * 1e3:9.1f} ms  {100 * s / total_ops:5.1f}%")
    print(
        f"  {'sum (layers)':<32} {total_ops * 1e3:9.1f} ms   vs forest_hidden {timer.seconds['forest_hidden'] * 1e3:.1f} ms"
    )
    elements = len(layers) * layers[0].self_attn.n_heads * nodes * keys
    rates = {name.strip(" ()"): elements / ops[name] / 1e6 for name in ("  (exp alone)", "  (a multiply, same tensor)")}
    print("  element rates: " + ", ".join(f"{name} {rate:,.0f} M/s" for name, rate in rates.items()))


if __name__ == "__main__":
    main()

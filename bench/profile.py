"""Where the trie path's time goes: `python -m bench.profile [case] [--warm]` (default: standard, cold).

1. Phases of one request, timed by wrapping the trie engine's steps (each lazy MLX result is
   evaluated inside its phase, so the forward is attributed to the step that builds it).
2. Per-op times of the same request: every projection, norm, RoPE, attention and SwiGLU call of
   every layer is evaluated on its own (inputs first), so the sum exceeds the plain run by the syncs.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace

import decide.runtime  # noqa: F401  (BLAS before mlx)
import decide.scoring.trie as trie_module
from decide.core import Decider
from decide.models import load_model
from decide.runtime import mx

from . import config
from .cases import CASES
from .harness import ENGINE_ONLY, as_served

PHASES = ("build_forest", "forest_mask", "forest_forward", "row_logsumexp", "pair_logits", "candidate_scores")


class PhaseTimer:
    """Wraps callables so that their wall time (results evaluated) is summed per name."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    def wrap(self, name: str, fn: Callable, eval_inputs: bool = False) -> Callable:
        def timed(*args, **kwargs):
            if eval_inputs:
                mx.eval([a for a in args if isinstance(a, mx.array)])
            start = time.perf_counter()
            out = fn(*args, **kwargs)
            mx.eval(getattr(out, "hidden", out))
            self.seconds[name] += time.perf_counter() - start
            return out

        return timed


def profile_phases(decider: Decider, request, warm: bool) -> PhaseTimer:
    timer = PhaseTimer()
    saved = {name: getattr(trie_module, name) for name in PHASES}
    scorer = decider.trie
    parts, extend, tokenize = scorer.parts, scorer._extend, decider.prompts.tokenize
    try:
        for name, fn in saved.items():
            setattr(trie_module, name, timer.wrap(name, fn))
        scorer.parts = replace(parts, head=timer.wrap("head", parts.head))
        scorer._extend = timer.wrap("prefix, own forward", extend)
        decider.prompts.tokenize = timer.wrap("tokenize", tokenize)
        run_once(decider, request, warm, timer)
    finally:
        for name, fn in saved.items():
            setattr(trie_module, name, fn)
        scorer.parts = parts
        del scorer._extend, decider.prompts.tokenize  # back to the class attributes
    return timer


def profile_ops(decider: Decider, request, warm: bool) -> PhaseTimer:
    """Per op kind, summed over layers: the model's own modules and the backend's kernels, each evaluated alone."""
    timer = PhaseTimer()
    scorer = decider.trie
    parts = scorer.parts
    kernels = {name: getattr(parts.backend, name) for name in ("attention", "silu_product", "rope")}
    saved = {}
    for layer in parts.layers:
        attn, mlp = layer.self_attn, layer.mlp
        for owner, names in (
            (attn, ("q_proj", "k_proj", "v_proj", "o_proj")),
            (mlp, ("gate_proj", "up_proj", "down_proj")),
        ):
            for name in names:
                saved[(id(owner), name)] = (owner, name, getattr(owner, name))
        for name in ("input_layernorm", "post_attention_layernorm"):
            saved[(id(layer), name)] = (layer, name, getattr(layer, name))
    try:
        for owner, name, fn in saved.values():
            label = "rms_norm" if name.endswith("layernorm") else name
            setattr(owner, name, timer.wrap(label, fn, eval_inputs=True))
        timed = {name: timer.wrap(name, fn, eval_inputs=True) for name, fn in kernels.items()}
        # mlp=None: the MLP through its (timed) layers, not whole on numpy buffers (kernels.onednn_mlp)
        scorer.parts = replace(parts, backend=replace(parts.backend, mlp=None, **timed))
        run_once(decider, request, warm, timer)
    finally:
        for owner, name, fn in saved.values():
            setattr(owner, name, fn)
        scorer.parts = parts
    return timer


def run_once(decider: Decider, request, warm: bool, timer: PhaseTimer) -> None:
    decider.decide(request)  # warm-up (and fills the prefix cache for --warm)
    timer.seconds.clear()
    if not warm:
        decider.trie.cache.clear()
    start = time.perf_counter()
    decider.decide(request)
    timer.seconds["total"] = time.perf_counter() - start


def report(title: str, timer: PhaseTimer) -> None:
    total = timer.seconds.pop("total")
    print(f"{title}: one request {total:.3f} s")
    for name, s in sorted(timer.seconds.items(), key=lambda kv: -kv[1]):
        print(f"  {name:<30} {s:8.3f} s  {100 * s / total:5.1f}%")
    print(f"  {'other':<30} {total - sum(timer.seconds.values()):8.3f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", nargs="?", default="standard", choices=list(CASES))
    parser.add_argument("--warm", action="store_true", help="keep the prefix cache (default: cleared first)")
    args = parser.parse_args()
    as_served()
    loaded = load_model(config.model())
    decider = Decider(loaded, ENGINE_ONLY(scorer="trie"))
    if decider.trie is None:
        raise SystemExit(f"{loaded.model_id}: the trie engine does not fit this model")
    request = CASES[args.case].build()
    title = f"{loaded.model_id}, case {args.case} ({'warm' if args.warm else 'cold'})"
    report(f"{title}, phases", profile_phases(decider, request, args.warm))
    report(f"\n{title}, ops (each evaluated alone)", profile_ops(decider, request, args.warm))


if __name__ == "__main__":
    main()

"""The model adapter: everything decide assumes about an mlx-lm model's internals, in one folder.

- `split_model`: the body (tokens → final hidden states) and the head, so scorers run the LM head
  only at the rows whose logits are needed;
- hooks.py: per-token RoPE positions, the attention and MLP hooks, span splitting;
- forest_pass.py: the per-layer caches through which a forest (or causal) pass steers those hooks;
- backends.py / kernels.py: which kernels serve a pass, chosen once at load;
- `adapt`: splits, installs the hooks, checks them numerically (`self_test`) and says which scorer
  the model gets: the trie engine, or (with one log line saying why) prompt-once or the reference.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from mlx_lm.models.cache import KVCache, make_prompt_cache

from ...runtime import mx
from . import backends, hooks
from .backends import Backend
from .forest_pass import Block, forest_forward, forest_mask

log = logging.getLogger("decide.scoring")


READOUT_DEPTHS = (1 / 2, 5 / 8, 3 / 4, 7 / 8)  # besides the final layer's (normed) output


@dataclass(frozen=True)
class ModelParts:
    body: Callable  # (tokens[B, L], cache) -> hidden[B, L, D]
    head: Callable  # hidden[..., D] -> logits[..., V]
    layers: list
    hidden_size: int
    backend: Backend  # the kernels of forest and causal passes

    @property
    def readout_layers(self) -> tuple[int, ...]:
        """The layers (1-based) whose output at the answer position the trie engine keeps for fitted readouts:
        some deep middle ones (a middle layer's state often separates a task's answers better than the
        last, which is shaped to predict the next token) and the last, as the body outputs it (normed)."""
        n = len(self.layers)
        return (*sorted({max(1, round(n * d)) for d in READOUT_DEPTHS} - {n}), n)


class Unsupported(Exception):
    """The model's layout is not one the adapter can split or tree-score (the message says why)."""


def split_model(model, backend: Backend) -> ModelParts:
    """Body and head of the llama/qwen2-style layout mlx-lm causal LMs share. Raises Unsupported for
    models that do more after the body (logit soft-capping) or are laid out otherwise."""
    inner = getattr(model, "model", None)
    if inner is None or not hasattr(inner, "embed_tokens") or not isinstance(getattr(inner, "layers", None), list):
        raise Unsupported(f"{type(model).__module__} does not have the usual `model.embed_tokens` layout")
    args = getattr(model, "args", None)
    if getattr(args, "final_logit_softcapping", None):
        raise Unsupported(f"{type(model).__module__} soft-caps its logits")
    head = model.lm_head if hasattr(model, "lm_head") else inner.embed_tokens.as_linear
    size = getattr(args, "hidden_size", None)
    if not isinstance(size, int):
        raise Unsupported(f"{type(model).__module__} states no hidden_size")
    return ModelParts(lambda tokens, cache=None: inner(tokens, cache), head, list(inner.layers), size, backend)


@dataclass(frozen=True)
class Adapted:
    parts: ModelParts | None  # None: the model runs whole (reference scorer)
    tree: bool  # the trie engine may score it
    scorer: str  # the scorer `auto` means for it: trie, prompt_once or reference


def adapt(model, backend: Backend, model_id: str, tolerance: float = 1e-3) -> Adapted:
    """Split `model`, install the hooks and self-test them with `backend` (then with `mlx`, if `backend`
    fails); logs one line when the model cannot be tree-scored, saying which scorer it gets and why."""
    try:
        parts = split_model(model, backend)
    except Unsupported as exc:
        log.warning("%s: %s; every candidate runs through the whole model (reference scorer)", model_id, exc)
        return Adapted(None, False, "reference")
    why = _why_not_tree(model)
    if why is None and backend.name != "mlx" and not self_test(parts, tolerance):
        log.warning("%s: the %s kernels fail the self-test; forest passes run stock MLX ops", model_id, backend.name)
        parts = split_model(model, backends.mlx())
    if why is None and not self_test(parts, tolerance):
        why = "its attention does not route through the tree-attention hooks (self-test failed)"
    if why is not None:
        hooks.uninstall(model.model)
        log.warning("%s: %s; the prompt-once scorer runs it", model_id, why)
        return Adapted(parts, False, "prompt_once")
    log.info("%s: trie engine on the %s kernel backend", model_id, parts.backend.name)
    return Adapted(parts, True, "trie")


def _why_not_tree(model) -> str | None:
    """Why a forest pass cannot stand in for this model's caches, or None when it can (hooks installed)."""
    kinds = {type(c).__name__ for c in make_prompt_cache(model)}
    if kinds != {KVCache.__name__}:
        return f"its layers keep {', '.join(sorted(kinds))} caches (sliding windows or recurrent state)"
    if not hooks.install(model.model):
        return "some attention layer has no `rope` module"
    return None


def self_test(parts: ModelParts, tolerance: float = 1e-3) -> bool:
    """Does a two-branch forest give the same hidden states as plain forwards of each branch, within
    `tolerance` of their largest value? (A wiring fault is off by the order of that value.)"""
    rng = np.random.default_rng(0)
    try:
        vocab = int(parts.head(mx.zeros((1, parts.hidden_size))).shape[-1])
        stem = rng.integers(0, vocab, 5).tolist()
        a, b = rng.integers(0, vocab, 3).tolist(), rng.integers(0, vocab, 2).tolist()
        tokens = np.array(stem + a + b)
        parents = [-1, 0, 1, 2, 3, 4, 5, 6, 4, 8]
        positions = np.array([0, 1, 2, 3, 4, 5, 6, 7, 5, 6])
        anc = np.zeros((10, 10), dtype=np.bool_)
        for i in range(10):
            j = i
            while j >= 0:
                anc[i, j] = True
                j = parents[j]
        blocks = [Block(None, 0, len(tokens))]
        mask = forest_mask(blocks, [anc])
        got = forest_forward(parts.body, len(parts.layers), tokens, positions, blocks, mask, parts.backend).hidden
        want_a = parts.body(mx.array(stem + a)[None])[0]
        want_b = parts.body(mx.array(stem + b)[None])[0]
        want = mx.concatenate([want_a, want_b[5:]], axis=0).astype(mx.float32)
        err = float(mx.abs(got.astype(mx.float32) - want).max())
    except Exception as exc:  # noqa: BLE001 - any failure of a hook means the model does not fit it
        log.info("tree attention self-test raised %s: %s", type(exc).__name__, exc)
        return False
    scale = float(mx.abs(want).max()) or 1.0
    if err > tolerance * scale:
        log.info("tree attention self-test on %s: max error %.3g of %.3g", parts.backend.name, err, scale)
        return False
    return True

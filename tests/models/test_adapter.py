"""The model adapter (decide/scoring/adapter): the trie engine on stock MLX kernels (the `mlx` backend, span
splitting included) equals the reference scorer; a model it cannot tree-score falls back with one log line and
still answers as the reference does; its hooks leave every other call of the model stock."""

from __future__ import annotations

import json
import logging
import shutil
import sys
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mlx_lm.models import gemma3_text
from scoring_cases import assert_same_answers, requests

from decide.core import Decider, DeciderOptions
from decide.models import load_model
from decide.request import DecisionRequest, Question
from decide.runtime import mx
from decide.scoring.adapter import adapt, backends, hooks
from decide.scoring.trie import TrieOptions

SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
REQUEST = DecisionRequest.of(
    "I was charged twice.",
    [Question.predicate("Is this a refund request?"), Question.choice("Which team?", ["billing", "sales", "legal"])],
)


@pytest.fixture(scope="module")
def reference(tiny_model):
    return Decider(tiny_model, DeciderOptions(scorer="reference"))


@pytest.fixture(scope="module")
def stock_trie(tiny_model):
    """The trie engine on the mlx backend, with passes small enough that requests of several inputs merge."""
    return Decider(tiny_model, DeciderOptions(scorer="trie", backend="mlx", trie=TrieOptions(max_nodes=96)))


def test_the_mlx_backend_can_be_chosen_and_the_cpu_one_is_the_default(stock_trie, tiny_model):
    assert stock_trie.parts.backend.name == "mlx"
    assert Decider(tiny_model).parts.backend.name == "cpu-float32"
    with pytest.raises(ValueError, match="unknown kernel backend"):
        Decider(tiny_model, DeciderOptions(backend="tpu"))


def test_a_llama_layout_gets_every_hook(tiny_model, stock_trie):
    for layer in tiny_model.model.model.layers:
        assert (
            isinstance(layer, hooks.PassLayer)
            and layer.swiglu
            and isinstance(layer.self_attn.rope, hooks.PositionalRoPE)
        )
    module = sys.modules[type(tiny_model.model.model.layers[0].self_attn).__module__]
    assert hasattr(module.scaled_dot_product_attention, "stock")


@SETTINGS
@given(batch=st.lists(requests(max_questions=4), min_size=1, max_size=3))
def test_tree_scoring_on_stock_kernels_equals_the_reference(stock_trie, reference, batch):
    stock_trie.trie.cache.clear()
    for got, request in zip(stock_trie.decide_batch(batch), batch):  # merged passes: one span per block
        assert_same_answers(got, reference.decide(request), 1e-4, 1e-3)


def test_the_hooks_leave_plain_calls_of_the_model_stock(tiny_model, stock_trie):
    tokens = mx.array(np.arange(3, 40, dtype=np.int32))[None]
    hooked = np.asarray(tiny_model.model(tokens))
    hooks.uninstall(tiny_model.model.model)
    try:
        assert np.array_equal(np.asarray(tiny_model.model(tokens)), hooked)
    finally:
        assert hooks.install(tiny_model.model.model)


@pytest.fixture(scope="module")
def sliding_window_model(tiny_model, tmp_path_factory):
    """A random 2-layer gemma3 whose first layer attends through a sliding window (a RotatingKVCache)."""
    folder = tmp_path_factory.mktemp("tiny-gemma3")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(f"{tiny_model.source}/{name}", folder / name)
    config = {
        "model_type": "gemma3_text",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "head_dim": 16,
        "num_key_value_heads": 2,
        "vocab_size": tiny_model.config["vocab_size"],
        "sliding_window": 1024,
        "sliding_window_pattern": 2,
        "query_pre_attn_scalar": 16,
    }
    (folder / "config.json").write_text(json.dumps(config))
    gemma3_text.Model(gemma3_text.ModelArgs.from_dict(config)).save_weights(str(folder / "model.safetensors"))
    return load_model(str(folder), progress=False)


def test_a_model_it_cannot_tree_score_gets_prompt_once_with_one_log_line(sliding_window_model, caplog):
    with caplog.at_level(logging.INFO, logger="decide"):
        decider = Decider(sliding_window_model)
    lines = [r.getMessage() for r in caplog.records if r.name == "decide.scoring"]
    assert len(lines) == 1 and "RotatingKVCache" in lines[0] and "prompt-once" in lines[0]
    assert decider.options.scorer == "prompt_once" and decider.trie is None
    want = Decider(sliding_window_model, DeciderOptions(scorer="reference")).decide(REQUEST)
    assert_same_answers(decider.decide(REQUEST), want, 1e-4, 1e-3)


def test_kernels_that_fail_the_self_test_give_way_to_stock_ops(tiny_model, caplog):
    broken = replace(backends.cpu_float32(), silu_product=lambda gate, up: gate * up)
    with caplog.at_level(logging.WARNING, logger="decide"):
        adapted = adapt(tiny_model.model, broken, "tiny")
    assert adapted.tree and adapted.parts.backend.name == "mlx"
    assert "cpu-float32 kernels fail the self-test" in caplog.text

"""A model the trie engine cannot split (gemma2 soft-caps its logits after the head) still loads and
answers: every candidate runs through the whole model (the reference scorer), with a log line saying so."""

from __future__ import annotations

import json
import logging
import shutil

import numpy as np
import pytest
from mlx_lm.models import gemma2

from decide.core import Decider, DeciderOptions
from decide.errors import InvalidRequest
from decide.models import load_model
from decide.request import DecisionRequest, Question


@pytest.fixture(scope="module")
def soft_capped(tiny_model, tmp_path_factory):
    """A random 2-layer gemma2 with the tiny model's tokenizer, as an mlx-lm folder."""
    folder = tmp_path_factory.mktemp("tiny-gemma2")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(f"{tiny_model.source}/{name}", folder / name)
    config = {
        "model_type": "gemma2",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "head_dim": 16,
        "rms_norm_eps": 1e-6,
        "vocab_size": tiny_model.config["vocab_size"],
        "num_key_value_heads": 2,
        "max_position_embeddings": 2048,
        "final_logit_softcapping": 30.0,
    }
    (folder / "config.json").write_text(json.dumps(config))
    gemma2.Model(gemma2.ModelArgs.from_dict(config)).save_weights(str(folder / "model.safetensors"))
    return load_model(str(folder), progress=False)


REQUEST = DecisionRequest.of(
    "I was charged twice.",
    [Question.predicate("Is this a refund request?"), Question.choice("Which team?", ["billing", "sales", "legal"])],
)


def test_a_soft_capped_model_is_scored_whole(soft_capped, caplog):
    with caplog.at_level(logging.WARNING, logger="decide"):
        decider = Decider(soft_capped)
    assert decider.options.scorer == "reference" and decider.trie is None
    assert "soft-caps its logits" in caplog.text and "reference scorer" in caplog.text
    decision = decider.decide(REQUEST)
    assert [len(a.probabilities) for a in decision.answers] == [2, 3]
    assert all(np.isclose(sum(a.probabilities), 1.0) for a in decision.answers)


def test_the_fast_scorers_say_they_cannot_run_it(soft_capped):
    with pytest.raises(InvalidRequest, match="cannot run model"):
        Decider(soft_capped, DeciderOptions(scorer="prompt_once")).decide(REQUEST)

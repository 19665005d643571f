"""Training-free calibration against a slow obvious reference, on the tiny random model."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from decide.core import Decider, DeciderOptions
from decide.prompts import render_prompt
from decide.quality import calibration
from decide.request import DecisionRequest, Question, Text
from decide.runtime import mx
from decide.scoring.reference import score_reference

QUESTIONS = [
    Question.choice("Which team should take it?", [("billing", "money"), ("technical", None), ("sales", "buy")]),
    Question.predicate("Is this a refund request?"),
    Question.score("How angry is the customer?", ["calm", "annoyed", "angry", "furious"]),
]
TEXTS = ["I was charged twice, refund me.", "The app crashes at start.", "Do you sell gift cards?"]
SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def deciders(tiny_model):
    return {m: Decider(tiny_model, DeciderOptions(calibration=m)) for m in calibration.METHODS}


def reference_lls(decider: Decider, text: str, q: Question) -> np.ndarray:
    """One full forward per candidate (the scoring oracle)."""
    [tokenized] = decider.prompts.tokenize(DecisionRequest.of(text, [q]))
    return score_reference(decider.loaded.model, [tokenized]).log_likelihoods[0]


def reference_probabilities(decider: Decider, text: str, q: Question, method: str) -> np.ndarray:
    """Zhao et al.'s recipe written out: p(x) / mean over content-free c of p(c), renormalized (in logs, since
    the tiny random model's probabilities underflow); for `temperature`, softmax(lls / T) with T = k / the
    perplexity of p(""), the empty input's answer distribution."""

    def log_p(t: str) -> np.ndarray:
        lls = reference_lls(decider, t, q)
        return lls - np.logaddexp.reduce(lls)

    free = calibration.CONTENT_FREE[method]
    x = log_p(text)
    if calibration.BY_NAME[method].adjust is calibration.temper:  # `examples` too (its prompts: test_quality_examples)
        prior = np.exp(log_p(""))
        entropy = -sum(p * np.log(p) for p in prior if p > 0)
        x = reference_lls(decider, text, q) / (len(prior) / np.exp(entropy))
    elif free:
        x = x - np.logaddexp.reduce([log_p(c) for c in free], axis=0)
    return np.exp(x - np.logaddexp.reduce(x))


@pytest.mark.parametrize("method", calibration.METHODS)
@SETTINGS
@given(text=st.sampled_from(TEXTS), qi=st.integers(0, len(QUESTIONS) - 1))
def test_each_calibration_equals_its_slow_reference(deciders, method, text, qi):
    q = QUESTIONS[qi]
    got = deciders[method].decide(text, [q]).answers[0].probabilities
    want = reference_probabilities(deciders[method], text, q, method)
    # Four scorings' float32 noise (1e-5 each on this model, see test_scoring.NOISE) meet in one answer.
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)


def test_none_is_the_plain_softmax_of_the_log_likelihoods(deciders):
    answer = deciders["none"].decide(TEXTS[0], QUESTIONS).answers
    for a in answer:
        lls = np.asarray(a.log_likelihoods)
        assert a.probabilities == tuple(float(x) for x in np.exp(lls - lls.max()) / np.exp(lls - lls.max()).sum())


def test_calibration_changes_probabilities_not_log_likelihoods(deciders):
    plain = deciders["none"].decide(TEXTS[1], QUESTIONS).answers
    calibrated = deciders["contextual"].decide(TEXTS[1], QUESTIONS).answers
    for a, b in zip(plain, calibrated):
        np.testing.assert_allclose(a.log_likelihoods, b.log_likelihoods, atol=1e-4)
    assert any(not np.allclose(a.probabilities, b.probabilities, atol=1e-3) for a, b in zip(plain, calibrated))


def test_a_prior_is_computed_once_per_question_and_then_cached(tiny_model):
    decider = Decider(tiny_model, DeciderOptions(calibration="contextual"))
    first = decider.decide(TEXTS[0], QUESTIONS[:2])
    assert len(decider.calibrator.priors) == 2
    again = decider.decide(TEXTS[0], QUESTIONS[:2])
    assert len(decider.calibrator.priors) == 2
    assert again.usage.computed_tokens < first.usage.computed_tokens
    for a, b in zip(again.answers, first.answers):
        np.testing.assert_allclose(a.probabilities, b.probabilities, atol=1e-4)


def test_the_prior_cache_is_bounded_least_recent_first_out():
    cache = calibration.PriorCache(size=2)
    a, b, c = QUESTIONS
    cache.put("contextual", a, np.ones(3))
    cache.put("contextual", b, np.ones(2))
    cache.get("contextual", a)
    cache.put("contextual", c, np.ones(4))
    assert [cache.get("contextual", q) is not None for q in (a, b, c)] == [True, False, True]


def test_examples_written_after_a_question_was_asked_without_them_replace_its_prior():
    """A server answers a new question before its examples are written (tempered by the prior of the prompt without
    them); that prior no longer holds once they are."""
    q = Question.predicate("Is it urgent?")
    calibrator = calibration.Calibrator("examples")
    calibrator.learn(q, [[-0.1, -2.5]])
    assert calibrator.missing([q]) == []
    calibrator.learn_examples(q, ())
    assert [asked for asked, _ in calibrator.missing([q])] == [q]


def test_batched_answers_equal_single_ones(deciders):
    decider = deciders["contextual"]
    batch = decider.decide_batch([DecisionRequest.of(t, QUESTIONS) for t in TEXTS])
    for text, decision in zip(TEXTS, batch):
        alone = decider.decide(text, QUESTIONS)
        for a, b in zip(decision.answers, alone.answers):
            np.testing.assert_allclose(a.probabilities, b.probabilities, atol=1e-4)  # float32 noise, as above


def test_an_unknown_method_is_refused_with_the_choices(tiny_model):
    with pytest.raises(ValueError, match="contextual"):
        Decider(tiny_model, DeciderOptions(calibration="magic"))


def layer_states(inner, ids: list[int]) -> dict[int, np.ndarray]:
    """Every layer's output at the last token, by a plain causal run of the stock layers (the last one normed)."""
    h = inner.embed_tokens(mx.array(ids, dtype=mx.int32)[None])
    states = {}
    for number, layer in enumerate(inner.layers, 1):
        h = layer(h, "causal", None)
        states[number] = h[0, -1]
    states[len(inner.layers)] = inner.norm(h)[0, -1]
    return {n: np.asarray(s.astype(mx.float32)) for n, s in states.items()}


def test_the_hidden_states_are_the_readout_layers_outputs_at_the_last_prompt_token(deciders):
    """The trie pass's extra outputs against a plain causal forward of the prompt."""
    decider = deciders["none"]
    layers = decider.parts.readout_layers
    assert layers[-1] == len(decider.parts.layers) and len(layers) > 1
    for text in TEXTS:
        got = decider.decide(text, QUESTIONS).answers
        for q, answer in zip(QUESTIONS, got):
            ids = decider.loaded.tokenizer.encode(render_prompt(decider.loaded.tokenizer, (Text(text),), q))
            want = layer_states(decider.loaded.model.model, ids)
            assert sorted(answer.hidden) == list(layers)
            for layer in layers:
                np.testing.assert_allclose(answer.hidden[layer], want[layer], rtol=1e-4, atol=1e-4)


def test_temperature_keeps_the_ranking_and_never_sharpens(deciders):
    for text in TEXTS:
        plain = deciders["none"].decide(text, QUESTIONS).answers
        tempered = deciders["temperature"].decide(text, QUESTIONS).answers
        for a, b in zip(plain, tempered):
            assert np.argsort(a.probabilities).tolist() == np.argsort(b.probabilities).tolist()
            assert max(b.probabilities) <= max(a.probabilities) + 1e-6


def test_temperature_is_one_for_a_uniform_prior_and_k_for_a_certain_one():
    lls = np.array([-1.0, -2.0, -4.0])
    np.testing.assert_allclose(calibration.temper(lls, np.log(np.full(3, 1 / 3))), lls)
    np.testing.assert_allclose(calibration.temper(lls, np.log([1 - 2e-12, 1e-12, 1e-12])), lls / 3, rtol=1e-9)


def test_batch_calibration_divides_out_the_mean_distribution_of_the_set():
    from decide.quality.evaluate import Scored, probabilities

    rng = np.random.default_rng(0)
    lls = [rng.normal(size=4) * 3 for _ in range(20)]
    scored = Scored("q", QUESTIONS[2], [0] * 20, lls, [None] * 20)
    softmaxes = [np.exp(x) / np.exp(x).sum() for x in lls]
    mean = np.mean(softmaxes, axis=0)
    want = [(p / mean) / (p / mean).sum() for p in softmaxes]
    np.testing.assert_allclose(probabilities(scored, "batch", {}), want, atol=1e-12)

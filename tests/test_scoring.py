"""The fast scorers against the reference scorer (the oracle), on the tiny random model."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from scoring_cases import assert_same_answers, requests, trie_minimum

from decide.core import Decider, DeciderOptions
from decide.errors import ContextLengthExceeded, ModelNotFound, UnsupportedInput
from decide.request import DecisionRequest, Image, Question, Text
from decide.scoring.trie import TrieOptions

# The tiny random model's log-likelihoods are ~100x a real model's, and float32 noise from a
# different packing (other questions, other passes) grows with them: 1e-5 here, 1e-6 on smollm.
NOISE = 1e-5
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def deciders(tiny_model):
    """Three deciders over one loaded model; the trie one with a fresh cache per use (see `cold`)."""
    return {name: Decider(tiny_model, DeciderOptions(scorer=name)) for name in ("reference", "prompt_once", "trie")}


def cold(decider: Decider) -> Decider:
    decider.trie.cache.clear()
    return decider


def test_the_tiny_model_gets_the_trie_engine(deciders):
    assert deciders["trie"].trie is not None
    assert Decider(deciders["trie"].loaded).options.scorer == "trie"


@SETTINGS
@given(request=requests())
def test_fast_scorers_equal_the_reference(deciders, request):
    want = deciders["reference"].decide(request)
    assert_same_answers(deciders["prompt_once"].decide(request), want, 1e-4, 1e-3)
    assert_same_answers(cold(deciders["trie"]).decide(request), want, 1e-4, 1e-3)


@SETTINGS
@given(request=requests(max_questions=8, max_options=12))
def test_cutting_into_passes_changes_nothing(deciders, request):
    whole = cold(deciders["trie"]).decide(request)
    small = Decider(deciders["trie"].loaded, DeciderOptions(scorer="trie", trie=TrieOptions(max_nodes=24)))
    assert_same_answers(small.decide(request), whole, NOISE)


@SETTINGS
@given(request=requests())
def test_warm_answers_equal_cold_answers(deciders, request):
    trie = cold(deciders["trie"])
    first = trie.decide(request)
    again = trie.decide(request)
    assert_same_answers(again, first, NOISE)
    assert again.usage.cached_tokens == first.usage.cache_write_tokens + first.usage.cached_tokens
    assert again.usage.computed_tokens <= first.usage.computed_tokens


@SETTINGS
@given(request=requests(max_questions=5), extra=requests(max_questions=3))
def test_reordering_and_adding_questions_moves_nothing(deciders, request, extra):
    trie = deciders["trie"]
    base = cold(trie).decide(request)
    shuffled = DecisionRequest(request.input, (*extra.questions, *reversed(request.questions)))
    moved = cold(trie).decide(shuffled)
    n = len(request.questions)
    for i, a in enumerate(base.answers):
        b = moved.answers[len(extra.questions) + n - 1 - i]
        assert a.probabilities == pytest.approx(b.probabilities, abs=NOISE)


@SETTINGS
@given(request=requests())
def test_a_cold_trie_computes_exactly_the_trie_minimum(deciders, request):
    """In one pass (a budget no request here exceeds), nothing is computed twice."""
    trie = Decider(deciders["trie"].loaded, DeciderOptions(scorer="trie", trie=TrieOptions(max_nodes=1 << 16)))
    tokenized = [q for q in trie.prompts.tokenize(request) if len(q.candidates) > 1]
    result = trie.decide(request)
    assert result.usage.computed_tokens == trie_minimum(tokenized)


def test_usage_counts(deciders):
    request = DecisionRequest.of("hello", [Question.predicate("Is it?"), Question.choice("which", ["a", "b", "c"])])
    tokenized = deciders["trie"].prompts.tokenize(request)
    usage = cold(deciders["trie"]).decide(request).usage
    assert usage.input_tokens == sum(len(q.prompt) + sum(map(len, q.candidates)) for q in tokenized)
    assert usage.cached_tokens == 0 and usage.cache_write_tokens > 0
    assert deciders["trie"].decide(request).usage.cached_tokens == usage.cache_write_tokens


def test_one_option_questions_never_reach_the_model(deciders):
    request = DecisionRequest.of("x", [Question.choice("only", ["a"]), Question.score("one", ["lvl"])])
    for d in deciders.values():
        result = d.decide(request)
        assert [a.probabilities for a in result.answers] == [(1.0,), (1.0,)]
        assert result.usage.computed_tokens == 0
        assert result.answers[0].confidence == 1.0 and result.answers[1].score == 0.0


def test_a_prompt_longer_than_the_context_is_refused_before_scoring(deciders):
    d = Decider(replace(deciders["trie"].loaded, context_length=64))
    with pytest.raises(ContextLengthExceeded, match="context"):
        d.decide("word " * 200, [Question.predicate("long?")])


def test_images_are_refused_by_a_text_model_with_their_path(deciders):
    request = DecisionRequest((Text("see"), Image(b"\x89PNG\r\n\x1a\n")), (Question.predicate("cat?"),))
    with pytest.raises(UnsupportedInput) as e:
        deciders["trie"].decide(request)
    assert e.value.path == ("input", 1)


def test_an_unknown_model_is_a_typed_error():
    with pytest.raises(ModelNotFound):
        Decider.load("no-such-model-anywhere")

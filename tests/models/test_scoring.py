"""The fast scorers against the reference scorer (the oracle), on the tiny random model."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from scoring_cases import assert_same_answers, questions, requests, texts, trie_minimum

from decide.core import Decider, DeciderOptions
from decide.errors import ContextLengthExceeded, ModelNotFound, UnsupportedInput
from decide.request import DecisionRequest, Image, Question, Text
from decide.scoring import ScoreResult, prompt_once
from decide.scoring.prefix_cache import Hit
from decide.scoring.trie import TrieOptions, TrieScorer

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


@settings(SETTINGS, max_examples=10)
@given(request=requests(max_questions=3, max_options=12))
def test_prompt_once_batches_chunks_and_the_unbatched_fallback_agree(deciders, request, monkeypatch):
    """Small batch bounds (many chunks) and the one-at-a-time path for caches it cannot tile: the same numbers."""
    batched = deciders["prompt_once"].decide(request)
    with monkeypatch.context() as m:
        m.setattr(prompt_once, "MAX_BATCH_ROWS", 3)
        assert_same_answers(deciders["prompt_once"].decide(request), batched, NOISE)
        m.setattr(prompt_once, "KVCache", type("OtherCache", (), {}))
        alone = deciders["prompt_once"].decide(request)
    assert_same_answers(alone, batched, NOISE)
    assert alone.usage.computed_tokens <= batched.usage.computed_tokens  # padding is computed too, and counted


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
@given(request=requests())
def test_a_prefix_computed_inside_the_forest_pass_is_the_prefix_computed_alone(deciders, request):
    """A cold prefix runs as the forest's first nodes (a causal chain); the K/V stored from that pass are the
    K/V of a causal forward of the prefix on its own (up to the BLAS: for a few rows it sums in another order)."""
    decider = cold(deciders["trie"])
    scorer = decider.trie
    tokenized = [q for q in decider.prompts.tokenize(request) if len(q.candidates) > 1]
    if not tokenized:
        return
    decider.decide(request)
    prefix = scorer._prefix_tokens(tokenized)
    hit = scorer.cache.lookup(prefix)
    assert hit.length == len(prefix)
    alone = TrieScorer(scorer.parts, "alone", scorer.options)._extend(prefix, Hit(0, None), ScoreResult([]))
    for (k, v), (k_alone, v_alone) in zip(hit.kv or [], alone):
        np.testing.assert_allclose(np.asarray(k), np.asarray(k_alone), rtol=0, atol=NOISE)
        np.testing.assert_allclose(np.asarray(v), np.asarray(v_alone), rtol=0, atol=NOISE)


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


@SETTINGS
@given(
    batch=st.lists(requests(max_questions=4), min_size=1, max_size=4),
    repeats=st.lists(st.integers(0, 3), max_size=3),
    max_nodes=st.sampled_from([48, 1024]),
)
def test_a_merged_batch_answers_each_request_as_if_alone(deciders, batch, repeats, max_nodes):
    """Requests with other inputs share passes, requests with the same input share one forest; some repeat."""
    batch += [batch[i % len(batch)] for i in repeats]
    trie = Decider(deciders["trie"].loaded, DeciderOptions(scorer="trie", trie=TrieOptions(max_nodes=max_nodes)))
    merged = trie.decide_batch(batch)
    cold_merged = sum(d.usage.computed_tokens for d in merged)
    cold(trie)
    solo = [trie.decide(r) for r in batch]  # one after the other, from the same cold cache as the batch
    for a, b in zip(merged, solo):
        assert_same_answers(a, b, NOISE)  # each block attends alone; only the row count of the matmuls changes
        assert a.usage.input_tokens == b.usage.input_tokens
    if max_nodes == 1024:  # one pass per prefix: the batch computes at most what solo runs of its distinct requests do
        assert cold_merged <= sum(cold(trie).decide(r).usage.computed_tokens for r in set(batch))


@SETTINGS
@given(text=texts, asked=st.lists(questions(), min_size=2, max_size=4))
def test_requests_about_the_same_input_compute_its_start_once(deciders, text, asked):
    """Each request's prefix ends in its own question, so no two are equal; a cold batch still computes the
    start they share once (but for the part of it after its last whole cache block) and answers as if alone."""
    trie = Decider(deciders["trie"].loaded, DeciderOptions(scorer="trie", trie=TrieOptions(max_nodes=1 << 16)))
    document = "A long shared document about the weather, the sea and the hills. " * 4 + text
    batch = [DecisionRequest.of(document, [q]) for q in dict.fromkeys(asked) if len(q.options) > 1]
    assume(batch)  # one-option questions never reach the model
    merged = cold(trie).decide_batch(batch)
    tokenized = [q for r in batch for q in trie.prompts.tokenize(r)]
    least, block = trie_minimum(tokenized), trie.options.trie.block
    assert least <= sum(d.usage.computed_tokens for d in merged) <= least + (block - 1) * (len(batch) - 1)
    for request, answer in zip(batch, merged):
        assert_same_answers(answer, cold(trie).decide(request), NOISE)
        assert answer.usage.cached_tokens + answer.usage.computed_tokens <= answer.usage.input_tokens


def test_a_shared_start_is_not_counted_as_a_cache_lookup(deciders):
    """/metrics counts the lookups of requests' prefixes, not the engine's for the start they share."""
    trie = Decider(deciders["trie"].loaded, DeciderOptions(scorer="trie", calibration="none"))
    document = "A long shared document about the weather, the sea and the hills. " * 6
    batch = [
        DecisionRequest.of(document, [Question.predicate(f"Is the text about {w}?")]) for w in ("rain", "sun", "fog")
    ]
    prefixes = {trie.trie._prefix_tokens(trie.prompts.tokenize(r)) for r in batch}
    cache = cold(trie).trie.cache
    before = cache.lookups
    merged = trie.decide_batch(batch)
    assert cache.lookups - before == len(prefixes) > 1
    assert sum(d.usage.computed_tokens for d in merged) < sum(d.usage.input_tokens for d in merged)


def test_a_repeated_request_in_a_batch_is_computed_once(deciders):
    request = DecisionRequest.of("hello there", [Question.predicate("Is it?"), Question.choice("which", ["a", "b"])])
    first, again = cold(deciders["trie"]).decide_batch([request, request])
    assert again.usage.computed_tokens == 0 and first.usage.computed_tokens > 0
    assert again.usage.cached_tokens == first.usage.cache_write_tokens > 0
    assert first.answers == again.answers


def test_a_bad_request_in_a_batch_gets_its_error_and_the_others_their_answers(deciders):
    good = DecisionRequest.of("fine", [Question.predicate("ok?")])
    bad = DecisionRequest((Text("see"), Image(b"\x89PNG\r\n\x1a\n")), (Question.predicate("cat?"),))
    a, b, c = deciders["trie"].decide_batch([good, bad, good])
    assert isinstance(b, UnsupportedInput) and a.answers == c.answers


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

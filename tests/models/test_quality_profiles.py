"""Fitted profiles on the tiny model: they round-trip, apply to their own question only, refuse other models, and
show their demonstrations before the input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from decide.core import Decider, DeciderOptions
from decide.prompts import Demonstration, TokenizedQuestion, render_prompt
from decide.quality.data import load
from decide.quality.evaluate import evaluate, score
from decide.quality.fit import choose_demonstrations, fit_profile
from decide.quality.profile import Entry, Profile, ProfileError, model_fingerprint, question_key
from decide.request import DecisionRequest, Question, Text
from decide.scoring.reference import score_reference

TEAM = {"type": "choice", "instructions": "Which team?", "criteria": {"billing": "money", "technical": None}}


def line(state: str, labels: dict) -> str:
    return json.dumps({"state": state, "questions": {"team": TEAM}, "labels": labels})


@pytest.fixture(scope="module")
def fitted(tiny_model, tmp_path_factory):
    """A bias profile of TEAM fitted on the tiny model from 24 labels (the random model's answers are noise)."""
    rows = [
        line(f"ticket {i} about {'money' if i % 2 else 'a crash'}", {"team": ["technical", "billing"][i % 2]})
        for i in range(24)
    ]
    path = tmp_path_factory.mktemp("fit") / "train.jsonl"
    path.write_text("\n".join(rows) + "\n")
    decider = Decider(tiny_model, DeciderOptions(calibration="none"))
    profile = fit_profile(decider, score(decider, load(path), progress=False))
    folder = profile.save(tmp_path_factory.mktemp("profile"))
    return decider, folder


def test_a_profile_round_trips_and_applies_to_its_question_only(tiny_model, fitted):
    decider, folder = fitted
    profile = Profile.load(folder)
    team = Question.choice("Which team?", [("billing", "money"), ("technical", None)])
    other = Question.choice("Which team?", [("billing", None), ("technical", None)])
    assert list(profile.entries) == [question_key(team)] and profile.entry(other) is None
    with_profile = Decider(tiny_model, DeciderOptions(calibration="none", profile=folder))
    plain, got = decider.decide("a refund please", [team, other]), with_profile.decide("a refund please", [team, other])
    entry = profile.entry(team)
    np.testing.assert_allclose(
        got.answers[0].probabilities, entry.probabilities(plain.answers[0].log_likelihoods, None), atol=1e-6
    )
    assert got.answers[1].probabilities == pytest.approx(plain.answers[1].probabilities, abs=1e-6)


def test_a_profile_from_another_model_is_refused(tiny_qwen2_gguf_path, fitted, tmp_path):
    _, folder = fitted
    with pytest.raises(ProfileError, match="fitted on model .* not on .*fit it again"):
        Decider.load(str(tiny_qwen2_gguf_path), profile=folder, cache_dir=tmp_path, progress=False)


def test_a_missing_profile_says_how_to_make_one(tiny_model, tmp_path):
    with pytest.raises(ProfileError, match="no profile in .*decide fit"):
        Decider(tiny_model, DeciderOptions(profile=tmp_path))


def shown_profile(decider: Decider, demonstrations: tuple[Demonstration, ...]) -> Profile:
    profile = Profile(decider.model_id, model_fingerprint(decider.loaded))
    profile.entries[question_key(TEAM_Q)] = Entry.unfitted(TEAM_Q, demonstrations)
    return profile


TEAM_Q = Question.choice("Which team?", [("billing", "money"), ("technical", None)])
SHOWN = (Demonstration("my card was charged twice", 0), Demonstration("the app crashes on start", 1))


def test_demonstrations_are_scored_as_the_reference_scores_their_prompt(tiny_model):
    """A profile that shows demonstrations: its question is asked after them (the trie engine against one full
    forward per candidate of the prompt rendered by hand); a question it does not know keeps the plain prompt."""
    plain = Decider(tiny_model, DeciderOptions(calibration="none"))
    shown = plain.with_profile(shown_profile(plain, SHOWN))
    other = Question.predicate("Is it urgent?")
    got = shown.decide("a refund please", [TEAM_Q, other])
    tok = tiny_model.tokenizer
    prompt = tok.encode(render_prompt(tok, (Text("a refund please"),), TEAM_Q, SHOWN))
    candidates = tuple(tuple(tok.encode(t)) for t in plain.prompts.candidate_texts(TEAM_Q))
    [want] = score_reference(tiny_model.model, [TokenizedQuestion(tuple(prompt), candidates)]).log_likelihoods
    # The trie engine leaves out normalizers that cancel in the softmax: compare within the question.
    np.testing.assert_allclose(np.diff(got.answers[0].log_likelihoods), np.diff(want), atol=1e-3)
    before = plain.decide("a refund please", [TEAM_Q, other])
    assert not np.allclose(np.diff(got.answers[0].log_likelihoods), np.diff(before.answers[0].log_likelihoods))
    np.testing.assert_allclose(got.answers[1].probabilities, before.answers[1].probabilities, atol=1e-5)
    # The copy shares the model and caches but not the profile.
    assert plain.calibrator.profile is None and shown.loaded is plain.loaded and shown.trie is plain.trie


def test_demonstrations_round_trip_and_a_bad_one_is_refused(tiny_model, tmp_path):
    decider = Decider(tiny_model, DeciderOptions(calibration="none"))
    folder = shown_profile(decider, SHOWN).save(tmp_path / "p")
    assert Profile.load(folder).demonstrations(TEAM_Q) == SHOWN
    body = json.loads((folder / "profile.json").read_text())
    body["questions"][question_key(TEAM_Q)]["demonstrations"][0]["option"] = 2
    (folder / "profile.json").write_text(json.dumps(body))
    with pytest.raises(ProfileError, match="demonstration's option is not one of its 2"):
        Profile.load(folder)


def examples(n: int, tmp_path) -> list:
    rows = [
        line(f"ticket {i} {'about money' * (1 + i % 3)}", {"team": ["technical", "billing"][i % 2]}) for i in range(n)
    ]
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join(rows) + "\n")
    return load(path)


def test_fit_chooses_short_seeded_demonstrations_of_every_option(tmp_path):
    data = examples(40, tmp_path)
    shown = choose_demonstrations(data)
    [(question, picks)] = shown.items()
    assert question == TEAM_Q and len(picks) == 8
    assert sorted(d.option for _, d in picks) == [0] * 4 + [1] * 4
    median = np.median([len(ex.request.input[0].text) for ex in data])
    for i, d in picks:
        assert d.input == data[i].request.input[0].text and len(d.input) <= median
        assert d.option == data[i].labels[0]
    assert choose_demonstrations(data) == shown  # seeded
    assert choose_demonstrations(data, 0) == {} and choose_demonstrations(data[:19]) == {}
    assert [d.option for _, d in choose_demonstrations(data, 3)[TEAM_Q]].count(0) >= 1


def test_eval_measures_a_demonstrating_profile_on_its_own_prompts(tiny_model, tmp_path):
    """`profile` comes from the prompts with demonstrations, every other mode from the plain ones."""
    data = examples(12, tmp_path)
    plain = Decider(tiny_model, DeciderOptions(calibration="none"))
    profile = shown_profile(plain, SHOWN)
    table, groups = evaluate(plain.with_profile(profile), data, ["none", "profile"], profile)
    shown = plain.with_profile(profile)
    want = [shown.decide(ex.request).answers[0].probabilities for ex in data]
    np.testing.assert_allclose(table["team"]["profile"][1], want, atol=1e-6)
    before = [plain.decide(ex.request).answers[0].probabilities for ex in data]
    np.testing.assert_allclose(table["team"]["none"][1], before, atol=1e-6)


def test_a_request_mixing_shown_and_plain_questions_is_scored_in_parts_the_cache_keeps(tiny_model):
    """Each set of demonstrations starts its own prompts: the request is scored in one part per set, each part's
    shared start (demonstrations, input) is cached, and every answer equals its question asked alone."""
    decider = Decider(tiny_model, DeciderOptions(calibration="none")).with_profile(None)
    decider.trie.cache.clear()
    shown = decider.with_profile(shown_profile(decider, SHOWN))
    questions = [Question.predicate("Is it urgent?"), TEAM_Q, Question.score("Mood?", ["calm", "angry"])]
    first = shown.decide("a refund please", questions)
    for q, answer in zip(questions, first.answers):
        alone = shown.decide("a refund please", [q]).answers[0]
        np.testing.assert_allclose(answer.probabilities, alone.probabilities, atol=1e-5)
    again = shown.decide("a refund please", questions)
    demo_prompt = shown.prompts.tokenize(DecisionRequest.of("a refund please", [TEAM_Q]))[0].prompt
    block = decider.trie.options.block
    assert again.usage.cached_tokens >= len(demo_prompt) - 2 * block
    plain_again = shown.decide("a refund please", [questions[0], questions[2]])  # question blocks: never cached
    demo_candidates = sum(map(len, shown.prompts.tokenize(DecisionRequest.of("x", [TEAM_Q]))[0].candidates))
    assert again.usage.computed_tokens - plain_again.usage.computed_tokens <= 2 * block + demo_candidates

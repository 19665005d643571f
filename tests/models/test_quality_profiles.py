"""Fitted profiles on the tiny model: they round-trip, apply to their own question only, and refuse other models."""

from __future__ import annotations

import json

import numpy as np
import pytest

from decide.core import Decider, DeciderOptions
from decide.quality.data import load
from decide.quality.evaluate import score
from decide.quality.fit import fit_profile
from decide.quality.profile import Profile, ProfileError, question_key
from decide.request import Question

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

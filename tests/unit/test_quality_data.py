"""Labelled JSONL and profiles: clear errors with line numbers; a profile applies to its questions only."""

from __future__ import annotations

import json
import re

import pytest

from decide.quality.data import DataError, load

TEAM = {"type": "choice", "instructions": "Which team?", "criteria": {"billing": "money", "technical": None}}
URGENT = {"type": "noul", "instructions": "Is it urgent?"}
MOOD = {"type": "score", "instructions": "How angry?", "criteria": ["calm", "annoyed", "angry"]}


def line(state: str = "I was charged twice", labels: dict | None = None, **questions) -> str:
    questions = questions or {"team": TEAM}
    return json.dumps({"state": state, "questions": questions, "labels": labels or {"team": "billing"}})


def write(tmp_path, lines: list[str]):
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_labels_become_option_indices(tmp_path):
    path = write(
        tmp_path,
        [
            line(team=TEAM, urgent=URGENT, mood=MOOD, labels={"team": "technical", "urgent": True, "mood": 2}),
            "",
            line(team=TEAM, mood=MOOD, labels={"mood": "annoyed"}),
        ],
    )
    first, second = load(path)
    assert (first.line, first.ids, first.labels) == (1, ("team", "urgent", "mood"), (1, 1, 2))
    assert (second.line, second.labels) == (3, (None, 1))


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ('{"state": "x", "questions": ', "data.jsonl:2: not valid JSON"),
        (line(labels={"team": "sales"}), "data.jsonl:2: question 'team': label 'sales' is not one of its options"),
        (line(urgent=URGENT, labels={"urgent": "yes"}), "data.jsonl:2: question 'urgent' is yes/no"),
        (line(mood=MOOD, labels={"mood": 3}), "data.jsonl:2: question 'mood': label 3 is not a level index 0..2"),
        (line(labels={"other": "billing"}), "data.jsonl:2: label for unknown question 'other'"),
        (line(team={"type": "choice", "criteria": {}}), "data.jsonl:2: questions.team"),
        ("[1, 2]", 'data.jsonl:2: expected an object with "state", "questions" and "labels"'),
    ],
)
def test_a_bad_line_is_named_with_its_number(tmp_path, bad, message):
    with pytest.raises(DataError, match=re.escape("/" + message)):
        load(write(tmp_path, [line(), bad]))


def test_an_empty_file_says_what_it_expected(tmp_path):
    with pytest.raises(DataError, match="no examples"):
        load(write(tmp_path, [""]))

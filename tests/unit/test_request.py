"""The internal request model refuses what no protocol may send, with typed errors."""

import pytest

from decide.errors import InvalidRequest
from decide.request import DEFAULT_FALSE, DEFAULT_TRUE, DecisionRequest, Image, Option, Question, Text


def test_predicate_options_are_false_then_true_with_default_descriptions():
    q = Question.predicate("Is it raining?")
    assert q.options == (Option(False, DEFAULT_FALSE), Option(True, DEFAULT_TRUE))


def test_choice_accepts_strings_booleans_and_described_options():
    q = Question.choice("pick", ["a", True, ("b", "the b one"), Option("", None)])
    assert [o.value for o in q.options] == ["a", True, "b", ""]
    assert q.options[2].description == "the b one"


def test_a_string_and_a_boolean_of_the_same_spelling_are_different_choices():
    q = Question.choice("pick", ["true", True])
    assert len(q.options) == 2


@pytest.mark.parametrize(
    "build,path,code",
    [
        (lambda: Question.choice("pick", []), ("options",), "array_below_min_length"),
        (lambda: Question.choice("pick", ["a", "a"]), ("options", 1, "value"), "invalid_value"),
        (lambda: Question.choice("pick", [str(i) for i in range(256)]), ("options",), "array_above_max_length"),
        (lambda: Question.choice("pick", [1.5]), ("options", 0, "value"), "invalid_type"),
        (lambda: Question.choice("pick", [float("nan")]), ("options", 0, "value"), "invalid_value"),
        (lambda: Question.score("how much", [True, False]), ("options", 0, "value"), "invalid_type"),
        (lambda: Question("nope", "x", (Option("a"),)), ("kind",), "invalid_value"),
        (lambda: Question.choice(3, ["a"]), ("instructions",), "invalid_type"),
        (lambda: Question.choice("pick", [("a", 7)]), ("options", 0, "description"), "invalid_type"),
        (lambda: DecisionRequest.of("text", []), ("questions",), "array_below_min_length"),
        (lambda: DecisionRequest((Image(b""),), (Question.predicate("x"),)), ("input", 0), "invalid_image"),
    ],
)
def test_bad_input_raises_a_typed_error_with_a_path(build, path, code):
    with pytest.raises(InvalidRequest) as e:
        build()
    assert e.value.path == path
    assert e.value.code == code
    assert e.value.message


def test_images_are_listed_with_their_paths():
    img = Image(b"\x89PNG....")
    r = DecisionRequest((Text("a"), img), (Question.predicate("x", attachments=[Text("Image reference: 1"), img]),))
    assert [path for path, _ in r.images] == [("input", 1), ("questions", 0, "attachments", 1)]

"""What is kept of a written example's reply (`cleaned`), and when writing it can stop (`finished`)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from decide.quality import examples


def test_cleaning_keeps_the_first_paragraph_without_enclosing_quotes():
    assert examples.cleaned('  "Great film!"  \n\nThis input is positive because...') == "Great film!"
    assert examples.cleaned("'It broke.'") == "It broke."
    assert examples.cleaned('"Who wrote Hamlet?') == "Who wrote Hamlet?"
    assert examples.cleaned("\n\n") == ""


def test_cleaning_drops_a_leading_label_and_enclosing_emphasis():
    assert examples.cleaned("**Question:** What is the capital of France?") == "What is the capital of France?"
    assert examples.cleaned("Input: It broke again.") == "It broke again."
    assert examples.cleaned('**"What does NASA stand for?"**') == "What does NASA stand for?"
    assert examples.cleaned("*Refund my order.*") == "Refund my order."
    assert examples.cleaned("The fix: restart it.") == "The fix: restart it."  # a label is one word, first
    explained = "\"Who is the author of 'Emma'? \"\nThis input clearly asks for a person."
    assert examples.cleaned(explained) == "Who is the author of 'Emma'?"
    assert examples.cleaned("\u201cIt broke.\u201d") == "It broke."


def test_writing_stops_once_the_paragraph_ends_or_a_quoted_input_closes_at_a_line_end():
    assert examples.finished("It broke.\n\nThis input")
    assert examples.finished('"Who wrote Hamlet?"\nThis input')
    assert examples.finished('  "Who wrote Hamlet?" \n')
    assert not examples.finished("\n\nIt broke.")
    assert not examples.finished('"Who wrote Hamlet?"')
    assert not examples.finished("It broke.\nThen it")  # an unquoted input may go on for lines
    assert not examples.finished('**"Who wrote Hamlet?"**\nThis')  # whether the emphasis encloses it is not known yet


PIECES = ['"', "'", "`", "\u201c", "\u201d", "\n", "\n\n", " ", "\t", "**", "_", "Input:", "Who", "is", "it?", "x"]
replies = st.lists(st.sampled_from(PIECES), max_size=14).map("".join)


@given(replies, replies)
def test_what_is_written_after_a_finished_reply_never_changes_the_example(written, more):
    if examples.finished(written):
        assert examples.cleaned(written + more) == examples.cleaned(written)

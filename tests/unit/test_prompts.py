"""The specified prompt and candidate texts (the chat template, the answer headers, each candidate as JSON
plus end of turn), exactly."""

import jinja2
import pytest

from decide.errors import UnsupportedInput
from decide.prompts import Demonstration, json_value, question_block, render_prompt, turn_ending, user_turn
from decide.request import Image, Option, Question, Text

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
GLM = "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"


class TemplateTokenizer:
    """Just enough of a chat tokenizer to render templates."""

    def __init__(self, template: str, eos: str = "</s>") -> None:
        self.template = jinja2.Environment().from_string(template)
        self.eos_token = eos

    def apply_chat_template(self, messages, add_generation_prompt=True):
        return self.template.render(messages=messages, add_generation_prompt=add_generation_prompt)


def test_json_values_are_compact_and_unescaped():
    assert [json_value(v) for v in (True, False, "billing", "caf\u00e9 \U0001f3af", "", 'a"b')] == [
        "true",
        "false",
        '"billing"',
        '"caf\u00e9 \U0001f3af"',
        '""',
        '"a\\"b"',
    ]


def test_choice_block():
    q = Question.choice("Which team?", [Option("billing", "Money matters"), Option("sales", None), Option(True, "")])
    assert question_block(q) == (
        "Evaluate the preceding input.\n"
        "Question: Which team?\n"
        "Allowed answers:\n"
        '"billing" \u2014 Money matters\n'
        '"sales"\n'
        "true\n"
        "Answer with exactly one of the JSON values above. Do not explain."
    )


def test_score_block_says_the_order_and_predicate_lists_false_first():
    s = question_block(Question.score("How angry?", ["calm", "angry"]))
    assert "Allowed answers (ordered from lowest to highest):\n" in s
    p = question_block(Question.predicate("Refund?"))
    assert "false \u2014 The answer is no; the condition is false.\ntrue \u2014 The answer is yes;" in p


def test_user_turn_is_input_blank_line_block():
    q = Question.predicate("Refund?")
    assert user_turn((Text("Hello"), Text(" there")), q) == "Hello there\n\n" + question_block(q)


def test_demonstrations_make_a_series_the_task_first_then_inputs_and_answers():
    q = Question.score("How angry?", ["calm", "angry"])
    shown = (Demonstration("Thanks!", 0), Demonstration("This is the third time!!", 1))
    task = question_block(q, "Evaluate each input that follows, one at a time.")
    assert task.startswith("Evaluate each input that follows, one at a time.\nQuestion: How angry?\n")
    assert render_prompt(TemplateTokenizer(CHATML), (Text("Hello"),), q, shown) == (
        f'<|im_start|>user\n{task}\n\nThanks!<|im_end|>\n<|im_start|>assistant\n"calm"<|im_end|>\n'
        '<|im_start|>user\nThis is the third time!!<|im_end|>\n<|im_start|>assistant\n"angry"<|im_end|>\n'
        "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
    )
    assert render_prompt(TemplateTokenizer(CHATML), (Text("Hello"),), q) == (
        f"<|im_start|>user\nHello\n\n{question_block(q)}<|im_end|>\n<|im_start|>assistant\n"
    )


def test_a_series_keeps_the_question_attachments_with_the_task_and_refuses_images():
    q = Question.predicate("Is this the logo?", attachments=[Text("Image reference: 1")])
    rendered = render_prompt(TemplateTokenizer(CHATML), (Text("Hello"),), q, (Demonstration("Hi", 1),))
    assert "Do not explain.Image reference: 1\n\nHi<|im_end|>" in rendered
    with pytest.raises(UnsupportedInput):
        render_prompt(TemplateTokenizer(CHATML), (Image(b"\x89PNG\r\n\x1a\n"),), q, (Demonstration("Hi", 1),))


def test_images_are_refused_for_text_models():
    with pytest.raises(UnsupportedInput):
        user_turn((Image(b"\x89PNG"),), Question.predicate("x"))


@pytest.mark.parametrize(
    "template,eos,ending",
    [
        (CHATML, "<|im_end|>", "<|im_end|>"),
        (GLM, "<|endoftext|>", "<|user|>"),
        ("{{ raise_me() }}", "</s>", "</s>"),  # a template that fails falls back to EOS
        ("{% for m in messages %}{{ m['content'] }}{% endfor %}", "</s>", "</s>"),  # no marker after the turn
    ],
)
def test_turn_ending(template, eos, ending):
    markers = [eos, "<|im_start|>", "<|im_end|>", "<|user|>", "<|assistant|>"]
    assert turn_ending(TemplateTokenizer(template, eos), markers) == ending

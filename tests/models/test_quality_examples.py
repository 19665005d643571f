"""Written examples (`examples` calibration) against slow obvious references, on a tiny random model (the
qwen2-arch one: the llama one's greedy text is newlines only, which leaves nothing to show)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from decide.core import Decider, DeciderOptions, finish, stop_markers
from decide.prompts import Demonstration, TokenizedQuestion, render_prompt
from decide.quality import examples
from decide.request import DecisionRequest, Question, Text
from decide.runtime import mx
from decide.scoring import ScoreResult
from decide.scoring.generate import GreedyWriter
from decide.scoring.reference import score_reference

TEAM = Question.choice("Which team should take it?", [("billing", "money"), ("technical", None), ("sales", "buy")])
REFUND = Question.predicate("Is this a refund request?")
TEXTS = ["I was charged twice, refund me.", "The app crashes at start."]


@pytest.fixture
def decider(tiny_qwen2_model) -> Decider:
    return Decider(tiny_qwen2_model, DeciderOptions(calibration="examples"))


def greedy_reference(model, prompt: list[int], stops: list[int], max_tokens: int, not_first=()) -> list[int]:
    """One full forward of the whole sequence per written token, its argmax appended (no cache, no batch); the
    first token the argmax of those not in `not_first`."""
    ids = list(prompt)
    for _ in range(max_tokens):
        logits = np.array(model(mx.array([ids]))[0, -1].astype(mx.float32))
        if len(ids) == len(prompt):
            logits[list(not_first)] = -np.inf
        token = int(np.argmax(logits))
        if token in stops:
            break
        ids.append(token)
    return ids[len(prompt) :]


def test_the_writer_continues_each_sequence_as_a_greedy_full_forward_would(tiny_qwen2_model):
    """Sequences that share a start, one that extends an earlier one and one that shares nothing, through one
    writer (its cache trimmed and reused between calls) against a full forward per token."""
    tok = tiny_qwen2_model.tokenizer
    stops = examples.writing_stops(tok, stop_markers(tok))
    first = tok.encode(examples.writing_prompt(tok, [], examples.writing_request(TEAM, 0)))
    writer = GreedyWriter(tiny_qwen2_model.model, stops, 12)
    got = finish(writer.continue_from(first))
    assert got == greedy_reference(tiny_qwen2_model.model, first, stops, 12) and got
    for tokens in (first + got[:5] + first[-7:], first[:40] + tok.encode("another start"), tok.encode("fresh")):
        assert finish(writer.continue_from(tokens)) == greedy_reference(tiny_qwen2_model.model, tokens, stops, 12)
    assert writer.computed < 2 * len(first) + 3 * 12 + 20  # the shared starts were not computed again
    assert finish(writer.continue_from(first, finished=lambda written: len(written) == 3)) == got[:3]
    other = finish(writer.continue_from(first, not_first={got[0]}))
    assert other == greedy_reference(tiny_qwen2_model.model, first, stops, 12, {got[0]}) and other[0] != got[0]


def test_each_question_is_written_for_and_checked_once(decider):
    first = decider.decide(TEXTS[0], [TEAM, REFUND])
    assert decider.calibrator.unwritten([TEAM, REFUND]) == []
    shown = {q: decider.calibrator.demonstrations(q) for q in (TEAM, REFUND)}
    again = decider.decide(TEXTS[0], [TEAM, REFUND])
    assert {q: decider.calibrator.demonstrations(q) for q in (TEAM, REFUND)} == shown
    assert again.usage.computed_tokens < first.usage.computed_tokens
    for a, b in zip(first.answers, again.answers):
        np.testing.assert_allclose(a.probabilities, b.probabilities, atol=1e-4)


def reference_answer(decider: Decider, q: Question, d: Demonstration, shown: list[Demonstration]) -> int | None:
    """The example asked with `shown` shown, every candidate its own full forward: the best answer (None if empty)."""
    if not d.input:
        return None
    tok = decider.loaded.tokenizer
    prompt = tuple(tok.encode(render_prompt(tok, (Text(d.input),), q, shown)))
    candidates = tuple(tuple(tok.encode(t)) for t in decider.prompts.candidate_texts(q))
    lls = score_reference(decider.loaded.model, [TokenizedQuestion(prompt, candidates)]).log_likelihoods[0]
    return int(np.argmax(lls))


def reference_examples(decider: Decider, q: Question) -> tuple[Demonstration, ...]:
    """The conversation written token by token with a full forward each; each example asked with the others shown;
    for up to REWRITES rounds, those answered otherwise written again (told how they were answered), each asked with
    the kept ones shown; kept where answered as written, none unless all options but one keep theirs (two at
    least)."""
    tok = decider.loaded.tokenizer
    stops = examples.writing_stops(tok, stop_markers(tok))
    chat: list[dict] = []
    firsts: dict[int, set[int]] = {k: set() for k in range(len(q.options))}

    def ask(k: int, request: str) -> Demonstration:
        prompt = tok.encode(examples.writing_prompt(tok, chat, request))
        ids = greedy_reference(decider.loaded.model, prompt, stops, examples.MAX_TOKENS, firsts[k])
        firsts[k].update(ids[:1])
        text = examples.cleaned(tok.decode(ids))
        repeated = any(" ".join(text.lower().split()) == " ".join(t["content"].lower().split()) for t in chat[1::2])
        chat.extend([{"role": "user", "content": request}, {"role": "assistant", "content": text}])
        return Demonstration("" if repeated else text, k)

    n = len(q.options)
    again = [examples.NEXT.format(target=examples.target(q, k)) for k in range(n)] * (examples.ROUNDS - 1)
    requests = [examples.writing_request(q, k) for k in range(n)] + again
    written = [ask(i % n, r) for i, r in enumerate(requests)]
    answered = [reference_answer(decider, q, d, [x for x in written if x is not d and x.input]) for d in written]
    for _ in range(examples.REWRITES):
        kept = [d for d, a in zip(written, answered) if a == d.option]
        wrong = [i for i, (d, a) in enumerate(zip(written, answered)) if a != d.option]
        for i in wrong:
            written[i] = ask(written[i].option, examples.rewriting_request(q, written[i].option, answered[i]))
        for i in wrong:
            answered[i] = reference_answer(decider, q, written[i], kept)
    kept = [d for d, a in zip(written, answered) if a == d.option]
    return tuple(kept) if len({d.option for d in kept}) >= max(2, n - 1) else ()


@pytest.mark.parametrize("q", [TEAM, REFUND], ids=["choice", "predicate"])
def test_the_examples_are_the_models_greedy_replies_in_one_conversation_that_it_answers_as_written(
    decider, q, monkeypatch
):
    monkeypatch.setattr(examples, "MAX_TOKENS", 12)  # a random model never stops: the reference's cost is the length
    decider.decide(TEXTS[0], [q])
    assert decider.calibrator.demonstrations(q) == reference_examples(decider, q)


class PlantedConversation:
    """Writes "ticket K" for option K, then "ticket K again" (and again) when told it was answered otherwise."""

    def __init__(self, q: Question) -> None:
        self.q = q
        self.told: list[tuple[int, int | None]] = []
        self.texts = [f"ticket {k}" for k in range(len(q.options))]

        self.writer = SimpleNamespace(computed=0)

    def requests(self) -> list[tuple[int, str]]:
        return [(k, f"an input for {k}") for k in range(len(self.q.options))]

    def ask(self, option: int, request: str):
        yield None
        return self.texts[option]

    def rewrite(self, option: int, answered: int | None):
        self.told.append((option, answered))
        self.texts[option] += " again"
        yield None
        return self.texts[option]


def planted(decider, monkeypatch, *rounds: list[int]) -> None:
    """The model answers the examples of each check with the next of `rounds` (5 nats on the answer)."""
    answers = iter([a for r in rounds for a in r])

    def score_many(requests):
        k = len(requests[0][0].candidates)
        return [ScoreResult([np.eye(k)[next(answers)] * 5], [None]) for _ in requests]

    monkeypatch.setattr(decider, "_score_many", score_many)


def test_the_check_asks_each_example_with_the_examples_given(decider, monkeypatch):
    shown = tuple(Demonstration(f"ticket {k}", k) for k in range(3))
    asked = []
    monkeypatch.setattr(
        decider, "_score_many", lambda r: asked.extend(r) or [ScoreResult([np.eye(3)[2]], [None])] * len(r)
    )
    empty = Demonstration("", 1)
    asking = decider._check(TEAM, [(shown[1], (shown[0], shown[2])), (empty, shown), (shown[0], ())])
    assert finish(asking)[0] == [2, None, 2]
    tok = decider.loaded.tokenizer
    assert list(asked[0][0].prompt) == tok.encode(render_prompt(tok, (Text("ticket 1"),), TEAM, (shown[0], shown[2])))
    assert list(asked[1][0].prompt) == tok.encode(render_prompt(tok, (Text("ticket 0"),), TEAM))


def test_an_example_answered_otherwise_is_written_again_with_how_it_was_answered(decider, monkeypatch):
    planted(decider, monkeypatch, [0, 2, 2], [1])
    conversation = PlantedConversation(TEAM)
    kept, _ = finish(decider._written_and_checked(conversation))
    assert conversation.told == [(1, 2)]
    assert kept == (Demonstration("ticket 0", 0), Demonstration("ticket 1 again", 1), Demonstration("ticket 2", 2))


def test_the_check_keeps_what_the_model_answers_as_written_unless_two_answers_lose_theirs(decider, monkeypatch):
    """After REWRITES rounds, the rule on planted answers (a random model answers almost everything alike); an
    example kept once stays kept."""
    rewrites = examples.REWRITES
    planted(decider, monkeypatch, [0, 2, 2], *[[2]] * rewrites)
    conversation = PlantedConversation(TEAM)
    kept, _ = finish(decider._written_and_checked(conversation))
    assert conversation.told == [(1, 2)] * rewrites
    assert [d.option for d in kept] == [0, 2]
    planted(decider, monkeypatch, [1, 1, 1], *[[1, 1]] * rewrites)
    assert finish(decider._written_and_checked(PlantedConversation(TEAM)))[0] == ()
    four = Question.choice("Which team?", ["billing", "technical", "sales", "legal"])
    planted(decider, monkeypatch, [0, 1, 2, 2], *[[2]] * rewrites)
    assert [d.option for d in finish(decider._written_and_checked(PlantedConversation(four)))[0]] == [0, 1, 2]
    planted(decider, monkeypatch, [0, 1, 1, 1], *[[1, 1]] * rewrites)
    assert finish(decider._written_and_checked(PlantedConversation(four)))[0] == ()
    planted(decider, monkeypatch, [3, 1, 1, 1], [0, 2, 0], *[[2]] * (rewrites - 1))  # 0 and 2 join, 3 never
    conversation = PlantedConversation(four)
    assert [d.option for d in finish(decider._written_and_checked(conversation))[0]] == [0, 1, 2]
    assert conversation.told[:4] == [(0, 3), (2, 1), (3, 1), (3, 0)] and len(conversation.told) == 2 + rewrites


def test_rewriting_tells_the_model_how_its_input_was_answered():
    request = examples.rewriting_request(TEAM, 0, 1)
    assert 'you wrote for "billing" (money) would be judged "technical"' in request
    assert examples.rewriting_request(TEAM, 2, None) == examples.writing_request(TEAM, 2)  # it came out empty
    stars = Question.score("How much did they like it?", ["1", "2", "3"])
    assert 'clearly "2" (level 2 of 3, counted from the lowest)' in examples.writing_request(stars, 1)


def test_answers_equal_the_reference_scorer_on_the_series_prompt_tempered_by_its_empty_input(decider):
    """Each candidate's own full forward on the prompt that shows the written examples; T from the same prompt
    asked about the empty input (the `temperature` recipe)."""
    shown = (Demonstration("Refund my order.", 0), Demonstration("It crashes.", 1), Demonstration("Buy 3 seats.", 2))
    decider.calibrator.learn_examples(TEAM, shown)  # as written (a random model's would not pass the check)
    got = decider.decide(TEXTS[1], [TEAM]).answers[0].probabilities
    tok = decider.loaded.tokenizer

    def lls(text: str) -> np.ndarray:
        prompt = tok.encode(render_prompt(tok, (Text(text),), TEAM, shown))
        [tokenized] = decider.prompts.tokenize(DecisionRequest.of(text, [TEAM]))
        assert list(tokenized.prompt) == prompt
        return score_reference(decider.loaded.model, [tokenized]).log_likelihoods[0]

    prior = np.exp(lls("") - np.logaddexp.reduce(lls("")))
    temperature = len(prior) / np.exp(-np.sum(prior * np.log(prior)))
    x = lls(TEXTS[1]) / temperature
    np.testing.assert_allclose(got, np.exp(x - np.logaddexp.reduce(x)), atol=1e-4)


def test_questions_it_does_not_write_for_are_asked_plainly(decider, tiny_qwen2_model):
    many = Question.choice("Which code?", [f"c{i}" for i in range(examples.MAX_OPTIONS + 1)])
    attached = Question.predicate("Does it match the note?", attachments=(Text("note: refunds"),))
    plain = Decider(tiny_qwen2_model, DeciderOptions(calibration="temperature"))
    got = decider.decide(TEXTS[0], [many, attached]).answers
    want = plain.decide(TEXTS[0], [many, attached]).answers
    assert decider.calibrator.demonstrations(many) == () == decider.calibrator.demonstrations(attached)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.probabilities, b.probabilities, atol=1e-4)


def test_a_request_prepared_before_its_examples_were_written_is_asked_with_them(decider):
    request = DecisionRequest.of(TEXTS[1], [TEAM])
    early = decider.prepare(request)
    assert early.shown == ((),)
    shown = (Demonstration("Refund my order.", 0), Demonstration("It crashes.", 1))
    decider.calibrator.learn_examples(TEAM, shown)
    [answer] = decider.decide_batch([early])
    [again] = decider.decide_batch([decider.prepare(request)])
    assert decider.prepare(request).shown == (shown,)
    np.testing.assert_allclose(answer.answers[0].probabilities, again.answers[0].probabilities, atol=1e-4)
    assert answer.usage.input_tokens == again.usage.input_tokens > early.input_tokens


class ScriptedWriter:
    """Replies with the next of `texts`, as GreedyWriter.continue_from would with the model's tokens."""

    def __init__(self, tokenizer, texts: list[str]) -> None:
        self.tokenizer, self.texts = tokenizer, iter(texts)

    def continue_from(self, tokens, finished, not_first=()):
        yield None
        return self.tokenizer.encode(next(self.texts))


def test_an_input_the_conversation_wrote_before_comes_out_empty_and_is_written_again(decider):
    """A small model told to write "different from the inputs above" can write the same text again (SST-5: two
    levels with one review): an example of two answers teaches neither."""
    tok = decider.loaded.tokenizer
    texts = ["Refund my order.", "It crashes.", "Input: refund my  order.", "Buy seats."]
    conversation = examples.Conversation(tok, ScriptedWriter(tok, texts), REFUND)
    assert [Demonstration(finish(conversation.ask(k, r)), k) for k, r in conversation.requests()] == [
        Demonstration("Refund my order.", 0),
        Demonstration("It crashes.", 1),
        Demonstration("", 0),
        Demonstration("Buy seats.", 1),
    ]
    assert conversation.chat[5]["content"] == "refund my  order."  # the model sees what it wrote
    again = examples.Conversation(tok, ScriptedWriter(tok, ["It crashes.", "It crashes."]), REFUND)
    assert finish(again.rewrite(1, 0)) == "It crashes." and finish(again.rewrite(1, 0)) == ""


def test_written_examples_do_not_replace_a_profiles_demonstrations(decider):
    from decide.quality.profile import Entry, Profile, model_fingerprint, question_key

    shown = (Demonstration("Refund my order.", 1),)
    entries = {question_key(REFUND): Entry.unfitted(REFUND, shown)}
    fitted = decider.with_profile(Profile(decider.model_id, model_fingerprint(decider.loaded), entries))
    fitted.decide(TEXTS[0], [REFUND, TEAM])
    assert fitted.calibrator.demonstrations(REFUND) == shown
    assert fitted.calibrator.unwritten([REFUND, TEAM]) == []  # TEAM written for, REFUND never


def test_eval_measures_examples_on_their_own_run_with_the_answers_the_library_gives(tiny_qwen2_model):
    import json

    from decide.quality.data import parse_line
    from decide.quality.evaluate import evaluate

    wire = {"type": "choice", "instructions": "Which team should take it?", "criteria": {"billing": "money"}}
    wire["criteria"] |= {"technical": None, "sales": "buy"}
    lines = [{"state": t, "questions": {"team": wire}, "labels": {"team": "billing"}} for t in TEXTS]
    labelled = [parse_line(json.dumps(x), n) for n, x in enumerate(lines, 1)]
    plain = Decider(tiny_qwen2_model, DeciderOptions(calibration="none"))
    table, groups = evaluate(plain, labelled, ["none", "examples"], progress=False)
    library = Decider(tiny_qwen2_model, DeciderOptions(calibration="examples"))
    want = [library.decide(ex.request).answers[0].probabilities for ex in labelled]
    np.testing.assert_allclose(table["team"]["examples"][1], want, atol=1e-4)
    none = [plain.decide(ex.request).answers[0].probabilities for ex in labelled]
    np.testing.assert_allclose(table["team"]["none"][1], none, atol=1e-4)
    assert plain.calibrator.method == "none" and groups[0].question == labelled[0].request.questions[0]


def test_threads_asking_a_new_question_at_once_write_its_examples_once(decider, monkeypatch):
    import threading

    calls = []
    requests = examples.Conversation.requests
    monkeypatch.setattr(examples.Conversation, "requests", lambda self: calls.append(self.q) or requests(self))
    threads = [threading.Thread(target=decider.decide, args=(t, [TEAM, REFUND])) for t in TEXTS * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(calls, key=str) == sorted([TEAM, REFUND], key=str)


def test_on_an_ordered_scale_an_example_answered_a_neighbouring_level_is_kept(decider, monkeypatch):
    scale = Question.score("How urgent is it?", ["low", "medium", "high", "critical"])
    assert examples.as_written(scale, 1, 0) and examples.as_written(scale, 1, 2) and examples.as_written(scale, 1, 1)
    assert not examples.as_written(scale, 0, 2) and not examples.as_written(scale, 1, None)
    assert not examples.as_written(TEAM, 0, 1)  # options without an order: only the option itself
    planted(decider, monkeypatch, [1, 0, 1, 1], *[[1]] * examples.REWRITES)
    conversation = PlantedConversation(scale)
    assert [d.option for d in finish(decider._written_and_checked(conversation))[0]] == [0, 1, 2]
    assert conversation.told == [(3, 1)] * examples.REWRITES


def test_written_a_step_at_a_time_the_examples_are_those_written_at_once(tiny_qwen2_model, monkeypatch):
    """A server writes a step (a token, or a check) between requests; a request that does not wait finishes the
    writing a step-wise one began. Either way the examples are those of the library's first request."""
    monkeypatch.setattr(examples, "MAX_TOKENS", 8)
    monkeypatch.setattr(examples, "as_written", lambda q, option, answered: answered is not None)  # keep them all
    at_once = Decider(tiny_qwen2_model, DeciderOptions(calibration="examples"))
    at_once.decide(TEXTS[0], [TEAM, REFUND])
    stepped = Decider(tiny_qwen2_model, DeciderOptions(calibration="examples"))
    steps = 1
    while stepped.write_examples_step([TEAM]):
        steps += 1
    # the random model writes to MAX_TOKENS: a step after each token but the last, and one per check
    assert steps >= examples.ROUNDS * len(TEAM.options) * (examples.MAX_TOKENS - 1)
    for _ in range(5):
        stepped.write_examples_step([REFUND])
    assert stepped.unwritten_examples([TEAM, REFUND]) == [REFUND]
    stepped.decide(TEXTS[0], [REFUND])
    for q in (TEAM, REFUND):
        assert stepped.calibrator.demonstrations(q) == at_once.calibrator.demonstrations(q) != ()

"""The engine: bounded queue, cross-request batches, deadlines, lost clients, background loading."""

from __future__ import annotations

import threading
import time

import pytest
from fake_decider import FakeDecider

from decide.errors import ContextLengthExceeded
from decide.request import DecisionRequest, Question
from decide.server.engine import Engine, EngineOptions, Work, estimate_tokens
from decide.server.errors import Overloaded, Unavailable

FAR = 1e9  # a deadline that never passes


def request(text: str, n_questions: int = 1) -> DecisionRequest:
    questions = [Question.choice(f"Which team, {i}?", ["billing", "technical", "sales"]) for i in range(n_questions)]
    return DecisionRequest.of(text, questions)


def work(r: DecisionRequest, tokens: int = 10) -> Work:
    return Work(r, tokens, exact=True)


def deadline(seconds: float = FAR) -> float:
    return time.monotonic() + seconds


class Observed:
    def __init__(self) -> None:
        self.rejected_list: list[str] = []
        self.dropped_list: list[str] = []
        self.batch_sizes: list[int] = []
        self.followed_count = 0

    def rejected(self, reason: str) -> None:
        self.rejected_list.append(reason)

    def dropped(self, job, reason: str) -> None:
        self.dropped_list.append(reason)

    def batch(self, jobs, seconds: float) -> None:
        self.batch_sizes.append(len(jobs))

    def followed(self, job) -> None:
        self.followed_count += 1


def held_engine(**options) -> tuple[Engine, FakeDecider, Observed]:
    """An engine whose fake decider holds every batch at a gate until the test opens it."""
    decider = FakeDecider()
    decider.gate = threading.Event()
    seen = Observed()
    engine = Engine(EngineOptions(**options), decider=decider, observer=seen).start()
    return engine, decider, seen


def occupy(engine: Engine, decider: FakeDecider):
    """Submit one job and wait until the engine is running it (held at the gate)."""
    first = engine.submit(work(request("occupying the engine")), deadline())
    assert decider.entered.wait(10)
    return first


# ---------------------------------------------------------------- admission


def test_full_queue_is_refused_at_once() -> None:
    engine, decider, seen = held_engine(max_pending=2)
    occupy(engine, decider)
    queued = [engine.submit(work(request(f"waiting {i}")), deadline()) for i in range(2)]
    with pytest.raises(Overloaded) as refused:
        engine.submit(work(request("one too many")), deadline())
    assert refused.value.retry_after == 1 and seen.rejected_list == ["queue_full"]
    decider.gate.set()
    assert all(engine.wait(j).answers for j in queued)
    engine.stop()


def test_queued_requests_are_merged_into_one_batch_within_the_budget() -> None:
    engine, decider, seen = held_engine(max_pending=16, batch_max_tokens=30, batch_max_questions=100)
    first = occupy(engine, decider)
    jobs = [engine.submit(work(request(f"ticket {i}"), tokens=10), deadline()) for i in range(7)]
    decider.gate.set()
    decisions = [engine.wait(j) for j in [first, *jobs]]
    # 30 tokens per batch: the 7 queued jobs of 10 tokens go 3 + 3 + 1, in order
    assert decider.batches == [1, 3, 3, 1] and seen.batch_sizes == [1, 3, 3, 1]
    assert [j.batch_size for j in jobs] == [3, 3, 3, 3, 3, 3, 1]
    for j, d in zip(jobs, decisions[1:]):
        assert d == FakeDecider().decide(j.work.request)
    engine.stop()


def test_the_question_budget_limits_batches_too_and_a_big_request_runs_alone() -> None:
    engine, decider, _ = held_engine(batch_max_tokens=10_000, batch_max_questions=4)
    occupy(engine, decider)
    sizes = [3, 1, 1, 9, 2]
    jobs = [engine.submit(work(request(f"t{i}", n)), deadline()) for i, n in enumerate(sizes)]
    decider.gate.set()
    for j in jobs:
        engine.wait(j)
    assert decider.batches == [1, 2, 1, 1, 1]  # [3+1], [1] (9 would not fit), [9] alone, [2]
    engine.stop()


def test_an_expired_request_never_runs() -> None:
    engine, decider, seen = held_engine()
    occupy(engine, decider)
    late = engine.submit(work(request("too late")), deadline(0.05))
    on_time = engine.submit(work(request("on time")), deadline())
    with pytest.raises(Unavailable) as dropped:
        engine.wait(late)  # returns once the deadline passes, while the engine is still busy
    assert (dropped.value.code, dropped.value.retry_after) == ("queue_timeout", 1)
    decider.gate.set()
    assert engine.wait(on_time).answers
    assert "too late" not in [r.input[0].text for r in decider.calls]
    assert seen.dropped_list == ["deadline"] and late.state == "dropped"
    engine.stop()


def test_a_request_whose_deadline_passes_in_the_queue_is_dropped_by_the_engine() -> None:
    engine, decider, seen = held_engine()
    occupy(engine, decider)
    late = engine.submit(work(request("nobody waits for me")), deadline(0.01))
    time.sleep(0.05)
    decider.gate.set()
    assert late.done.wait(10) and late.state == "dropped"
    assert seen.dropped_list == ["deadline"]
    assert "nobody waits for me" not in [r.input[0].text for r in decider.calls]
    engine.stop()


def test_a_request_whose_client_left_never_runs() -> None:
    engine, decider, seen = held_engine()
    occupy(engine, decider)
    connected = {"gone": True}
    gone = engine.submit(work(request("hung up")), deadline(), alive=lambda: not connected["gone"])
    kept = engine.submit(work(request("still here")), deadline())
    decider.gate.set()
    assert engine.wait(kept).answers
    assert gone.done.wait(10) and gone.state == "dropped" and seen.dropped_list == ["client_gone"]
    assert [r.input[0].text for r in decider.calls] == ["occupying the engine", "still here"]
    engine.stop()


def test_a_waiting_request_notices_its_client_left_and_frees_its_slot() -> None:
    engine, decider, seen = held_engine(max_pending=1)
    occupy(engine, decider)
    connected = {"gone": False}
    job = engine.submit(work(request("leaving")), deadline(), alive=lambda: not connected["gone"])
    waiter = threading.Thread(target=lambda: pytest.raises(Unavailable, engine.wait, job, 0.01))
    waiter.start()
    connected["gone"] = True
    waiter.join(10)
    assert job.state == "dropped" and engine.queue_depth == 0
    engine.submit(work(request("takes the freed slot")), deadline())  # no Overloaded
    decider.gate.set()
    engine.stop()


# ---------------------------------------------------------------- equal requests


def texts(decider: FakeDecider) -> list[str]:
    return [r.input[0].text for r in decider.calls]


def test_an_equal_request_follows_the_running_one_and_gets_its_answer() -> None:
    engine, decider, seen = held_engine()
    first = occupy(engine, decider)
    again = engine.submit(work(request("occupying the engine")), deadline())
    other = engine.submit(work(request("occupying the engine", n_questions=2)), deadline())  # not equal
    assert (again.state, other.state, engine.queue_depth) == ("following", "queued", 1)
    decider.gate.set()
    assert engine.wait(again) is engine.wait(first)
    assert engine.wait(other) != engine.wait(first)
    assert texts(decider) == ["occupying the engine"] * 2 and seen.followed_count == 1
    assert again.batch_size == first.batch_size == 1 and again.queue_seconds == 0
    assert 0 < again.compute_seconds <= first.compute_seconds
    engine.stop()


def test_equal_queued_requests_are_computed_once() -> None:
    engine, decider, seen = held_engine()
    occupy(engine, decider)
    jobs = [engine.submit(work(request("asked three times")), deadline()) for _ in range(3)]
    assert [j.state for j in jobs] == ["queued", "following", "following"] and engine.queue_depth == 1
    decider.gate.set()
    answers = [engine.wait(j) for j in jobs]
    assert answers[0].answers and all(a is answers[0] for a in answers)
    assert texts(decider) == ["occupying the engine", "asked three times"] and decider.batches == [1, 1]
    engine.stop()


def test_a_follower_keeps_a_queued_request_whose_own_client_left_or_expired() -> None:
    engine, decider, seen = held_engine()
    occupy(engine, decider)
    gone = engine.submit(work(request("first attempt")), deadline(0.01), alive=lambda: False)
    retry = engine.submit(work(request("first attempt")), deadline())
    time.sleep(0.05)
    decider.gate.set()
    assert engine.wait(retry).answers and engine.wait(gone) is engine.wait(retry)
    assert texts(decider) == ["occupying the engine", "first attempt"] and seen.dropped_list == []
    engine.stop()


def test_a_request_no_one_waits_for_is_dropped_with_its_followers() -> None:
    engine, decider, seen = held_engine()
    occupy(engine, decider)
    jobs = [engine.submit(work(request("abandoned")), deadline(), alive=lambda: False) for _ in range(2)]
    decider.gate.set()
    for job in jobs:
        with pytest.raises(Unavailable):
            engine.wait(job)
    assert [j.state for j in jobs] == ["dropped", "dropped"] and seen.dropped_list == ["client_gone"]
    assert "abandoned" not in texts(decider)
    engine.stop()


def test_a_request_equal_to_a_finished_one_is_computed_again() -> None:
    engine, decider, _ = held_engine()
    decider.gate.set()
    first = engine.submit(work(request("twice, one after the other")), deadline())
    engine.wait(first)
    second = engine.submit(work(request("twice, one after the other")), deadline())
    assert second.state != "following"
    assert engine.wait(second).answers and texts(decider) == ["twice, one after the other"] * 2
    engine.stop()


# ---------------------------------------------------------------- failures


class Exploding(FakeDecider):
    """Fails any batch that holds the request with input "boom"."""

    def decide_batch(self, requests):
        if any(getattr(r, "request", r).input[0].text == "boom" for r in requests):
            raise RuntimeError("kernel panic")
        return super().decide_batch(requests)


def test_a_failing_request_does_not_fail_the_others_in_its_batch() -> None:
    decider = Exploding()
    engine = Engine(decider=decider)
    jobs = [engine.submit(work(request(t)), deadline()) for t in ("fine", "boom", "also fine")]
    engine.start()  # all three are queued before the engine runs: one batch
    assert engine.wait(jobs[0]).answers and engine.wait(jobs[2]).answers
    with pytest.raises(RuntimeError, match="kernel panic"):
        engine.wait(jobs[1])
    assert decider.batches == [1, 1]  # the merged batch failed; the good ones then ran alone
    engine.stop()


def test_a_typed_error_stays_in_its_slot() -> None:
    decider = FakeDecider(context_chars=200)
    engine = Engine(decider=decider)
    short, long = request("ok"), request("x" * 500)
    jobs = [engine.submit(work(r), deadline()) for r in (short, long)]
    engine.start()
    assert engine.wait(jobs[0]).answers
    with pytest.raises(ContextLengthExceeded):
        engine.wait(jobs[1])
    assert decider.batches == [2]
    engine.stop()


# ---------------------------------------------------------------- loading


def test_loading_in_the_background_then_ready() -> None:
    release = threading.Event()
    decider = FakeDecider()

    def load() -> FakeDecider:
        release.wait(10)
        return decider

    engine = Engine(load=load).start()
    assert engine.phase == "loading"
    with pytest.raises(Unavailable) as loading:
        engine.submit(work(request("early")), deadline())
    assert loading.value.code == "model_loading"
    release.set()
    while engine.phase == "loading":
        time.sleep(0.01)
    assert engine.phase == "ready" and engine.ready_decider() is decider
    assert engine.wait(engine.submit(engine.prepare(request("now")), deadline())).answers
    engine.stop()


def test_a_failed_load_is_reported_and_handed_to_the_callback() -> None:
    failures: list[BaseException] = []

    def load():
        raise FileNotFoundError("no such model: /nowhere.gguf")

    engine = Engine(load=load, on_load_error=failures.append).start()
    engine._thread.join(10)
    assert engine.phase == "failed" and "/nowhere.gguf" in engine.load_error
    assert isinstance(failures[0], FileNotFoundError)
    with pytest.raises(Unavailable) as failed:
        engine.ready_decider()
    assert failed.value.code == "model_load_failed"


def test_prepare_uses_the_deciders_count_or_an_estimate() -> None:
    r = request("I was charged twice. " * 20, n_questions=3)
    exact = Engine(decider=FakeDecider()).prepare(r)
    assert exact.exact and exact.tokens == FakeDecider().prepare(r).input_tokens

    class NoPrepare:
        model_id, supports_images, info = "x", False, {}

    estimated = Engine(decider=NoPrepare()).prepare(r)
    assert not estimated.exact and estimated.tokens == estimate_tokens(r)
    assert estimate_tokens(request("a" * 400, 2)) > estimate_tokens(request("a", 2)) > estimate_tokens(request("a", 1))


# ---------------------------------------------------------------- examples written between batches


class Writing(FakeDecider):
    """A fake whose questions need `steps` writing steps each before their examples are written; it records the
    order of steps and batches in `log`, and asks a question after examples once they are written."""

    def __init__(self, steps: int = 3, step_seconds: float = 0.02) -> None:
        super().__init__()
        self.steps, self.step_seconds = steps, step_seconds
        self.left: dict[Question, int] = {}
        self.log: list[tuple] = []

    def unwritten_examples(self, questions):
        return [q for q in dict.fromkeys(questions) if self.left.get(q, self.steps) > 0]

    def write_examples_step(self, questions=()):
        q = self.unwritten_examples(questions)[0]
        time.sleep(self.step_seconds)
        self.left[q] = self.left.get(q, self.steps) - 1
        self.log.append(("step", q.instructions))
        return bool(self.unwritten_examples(questions))

    def decide_batch(self, requests, *, write_examples=True):
        assert not write_examples, "the engine writes examples between batches, not inside one"
        plain = [r.request if hasattr(r, "request") else r for r in requests]
        self.log.append(("batch", [(r.input[0].text, bool(self.unwritten_examples(r.questions))) for r in plain]))
        return super().decide_batch(requests)


def writing_engine(wait_s: float, **fake) -> tuple[Engine, Writing]:
    decider = Writing(**fake)
    return Engine(EngineOptions(writing_wait_s=wait_s), decider=decider).start(), decider


def started_writing(decider: Writing) -> None:
    while not decider.log:
        time.sleep(0.01)


def asked(decider: Writing, text: str) -> list[bool]:
    """For each batch that held the request with input `text`: whether it was asked without its examples."""
    return [plain for kind, *rest in decider.log if kind == "batch" for t, plain in rest[0] if t == text]


def test_a_request_waits_for_its_new_questions_examples_written_a_step_at_a_time() -> None:
    engine, decider = writing_engine(FAR, steps=3)
    assert engine.wait(engine.submit(work(request("first")), deadline())).answers
    assert [kind for kind, *_ in decider.log] == ["step", "step", "step", "batch"]
    assert asked(decider, "first") == [False]
    engine.stop()


def test_a_request_past_its_writing_wait_is_answered_without_examples_and_writing_goes_on() -> None:
    engine, decider = writing_engine(0.0, steps=4, step_seconds=0.05)
    assert engine.wait(engine.submit(work(request("at once")), deadline())).answers
    assert asked(decider, "at once") == [True]
    for _ in range(200):  # the engine, idle, writes the rest
        if not decider.unwritten_examples(request("x").questions):
            break
        time.sleep(0.02)
    assert [kind for kind, *_ in decider.log].count("step") == 4
    assert engine.wait(engine.submit(work(request("later")), deadline())).answers
    assert asked(decider, "later") == [False]
    engine.stop()


def test_other_requests_are_answered_between_the_steps_of_a_long_writing() -> None:
    engine, decider = writing_engine(FAR, steps=30, step_seconds=0.05)
    new = engine.submit(work(request("a new question")), deadline())
    started_writing(decider)
    known = DecisionRequest.of("meanwhile", [Question.choice("Known?", ["a", "b"])])
    decider.left[known.questions[0]] = 0
    assert engine.wait(engine.submit(work(known), deadline())).answers
    assert not new.done.is_set() and engine.running == engine.waiting_for_examples == 1  # still waiting for them
    assert engine.examples_to_write == 1
    assert engine.wait(new).answers and asked(decider, "a new question") == [False]
    assert engine.examples_to_write == engine.waiting_for_examples == 0
    kinds = [kind for kind, *_ in decider.log]
    assert kinds.index("batch") < kinds.index("step", kinds.index("batch")) < len(kinds) - 1
    engine.stop()


def test_a_retry_follows_a_request_that_waits_for_its_examples() -> None:
    engine, decider = writing_engine(FAR, steps=20, step_seconds=0.05)
    first = engine.submit(work(request("same")), deadline())
    started_writing(decider)
    retry = engine.submit(work(request("same")), deadline())
    assert retry.state == "following"
    assert engine.wait(retry) is engine.wait(first)
    assert asked(decider, "same") == [False]
    engine.stop()


def test_a_failed_writing_step_is_logged_and_the_request_still_answered(caplog) -> None:
    decider = Writing(steps=2)

    def broken(questions=()):
        decider.left.update({q: 0 for q in questions})  # as the core does: that question is asked plainly now
        raise RuntimeError("writer crashed")

    decider.write_examples_step = broken
    engine = Engine(EngineOptions(writing_wait_s=FAR), decider=decider).start()
    assert engine.wait(engine.submit(work(request("still answered")), deadline())).answers
    assert "writer crashed" in caplog.text
    engine.stop()

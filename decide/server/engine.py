"""The engine: one thread per process owns the decider and drains a bounded queue.

    request thread ── prepare (validate, tokenize, context check) ── submit ──► queue (≤ max_pending)
                                                                      full: Overloaded (429) at once
                   same request already queued or running: follow that job (one computation)
    engine thread  ◄── take the oldest job + whatever else fits the batch budget
                   ──► drop jobs whose deadline passed or whose client left: they never run
                   ──► set aside jobs whose questions wait for written examples (until their wait ends)
                   ──► decider.decide_batch([...]) ──► each job's slot: Decision | DecideError
                   ──► one step of writing examples (a model call), the set-aside jobs' questions first

The engine thread also loads the decider, so a server answers /health while a model converts.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from ..answers import Decision
from ..errors import DecideError
from ..request import DecisionRequest, Text
from .errors import Overloaded, Unavailable

log = logging.getLogger("decide.server.engine")

Phase = Literal["loading", "ready", "failed"]
Outcome = Decision | BaseException


class DeciderLike(Protocol):
    """What the server needs of decide.core.Decider. An optional `prepare(request)` that validates
    and tokenizes (raising ContextLengthExceeded) and returns an object with `input_tokens` lets
    the server refuse a request before it queues and budget batches in real tokens."""

    model_id: str
    supports_images: bool
    info: dict

    def decide_batch(self, requests: Sequence[Any]) -> list[Decision | DecideError]: ...


class WritingDecider(DeciderLike, Protocol):
    """A decider whose calibration has the model write examples for new questions (decide.core.Decider): the
    engine writes them a step at a time between batches, so that no request waits minutes behind the writing."""

    def unwritten_examples(self, questions: Sequence[Any]) -> list[Any]: ...
    def write_examples_step(self, questions: Sequence[Any] = ()) -> bool: ...
    def decide_batch(self, requests: Sequence[Any], *, write_examples: bool = True) -> list[Decision | DecideError]: ...


@dataclass(frozen=True)
class EngineOptions:
    max_pending: int = 32  # jobs waiting (not running); one more is refused
    batch_max_tokens: int = 8192  # input tokens merged into one decide_batch call
    batch_max_questions: int = 64  # questions merged into one decide_batch call
    retry_after_s: int = 1
    writing_wait_s: float = 2.0  # how long a job waits for its new questions' examples; then asked without them


@dataclass(frozen=True)
class Work:
    """A request ready to queue: `tokens` are its input tokens, exact when the decider prepared it."""

    request: DecisionRequest
    tokens: int
    exact: bool
    prepared: Any = None  # what decider.prepare returned: decide_batch takes it instead of the request

    @property
    def runnable(self) -> Any:
        return self.request if self.prepared is None else self.prepared

    @property
    def questions(self) -> int:
        return len(self.request.questions)


class Job:
    """One queued request. States: queued → running → done, or queued → dropped; a request equal to
    one already queued or running is `following` it and ends with it (an SDK's retry of a request
    that timed out on its side gets the first attempt's answer instead of computing it again)."""

    def __init__(self, work: Work, deadline: float, alive: Callable[[], bool], writing_wait: float = 0.0) -> None:
        self.work = work
        self.deadline = deadline  # time.monotonic() after which it must not start
        self.writing_wait = writing_wait  # seconds it may wait, once taken, for its questions' examples
        self.examples_until = 0.0  # set when it is taken
        self.alive = alive  # False once the client has hung up
        self.state = "queued"
        self.enqueued = time.monotonic()
        self.started: float | None = None
        self.finished: float | None = None
        self.batch_size = 0
        self.outcome: Outcome | None = None
        self.done = threading.Event()
        self.followers: list[Job] = []

    def finish(self, outcome: Outcome, state: str) -> list[Job]:
        """Set the outcome of this job and of its followers; the jobs to wake (caller holds the lock)."""
        self.outcome, self.state = outcome, state
        self.finished = self.finished or time.monotonic()
        for f in self.followers:
            f.outcome, f.state, f.finished, f.batch_size = outcome, state, self.finished, self.batch_size
            f.started = max(self.started, f.enqueued) if self.started else None  # it waited for the start only
        return [self, *self.followers]

    @property
    def queue_seconds(self) -> float:
        return (self.started or self.finished or time.monotonic()) - self.enqueued

    @property
    def compute_seconds(self) -> float:
        return (self.finished - self.started) if self.started and self.finished else 0.0


class EngineObserver:
    """Told of refusals, drops and batches (server.metrics.Metrics is one); this one ignores them."""

    def rejected(self, reason: str) -> None:
        pass

    def dropped(self, job: Job, reason: str) -> None:
        pass

    def batch(self, jobs: list[Job], seconds: float) -> None:
        pass

    def followed(self, job: Job) -> None:
        pass


class Engine:
    def __init__(
        self,
        options: EngineOptions | None = None,
        *,
        decider: DeciderLike | None = None,
        load: Callable[[], DeciderLike] | None = None,
        observer: EngineObserver | None = None,
        on_load_error: Callable[[BaseException], None] | None = None,
    ) -> None:
        assert decider is not None or load is not None, "an engine needs a decider or a way to load one"
        self.options = options or EngineOptions()
        self.decider = decider
        self.phase: Phase = "ready" if decider is not None else "loading"
        self.load_error: str | None = None
        self.load_started = time.monotonic()
        self._load = load
        self._on_load_error = on_load_error
        self.observer = observer or EngineObserver()
        self._queue: deque[Job] = deque()
        self._batch: list[Job] = []  # the jobs being decided now
        self._waiting: list[Job] = []  # taken, waiting for their questions' examples (state "running")
        self._to_write: list[Any] = []  # questions whose examples are being written, in the order seen
        self._cond = threading.Condition()
        self._stopping = False
        self._parking = False
        self._parked = threading.Event()
        self._thread = threading.Thread(target=self._main, name="decide-engine", daemon=True)

    # ------------------------------------------------------------ request-thread side

    def start(self) -> Engine:
        self._thread.start()
        atexit.register(self._park)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(timeout)

    def _park(self, timeout: float = 10.0) -> None:
        """At exit: the engine thread finishes its step and then waits forever. A process that exits while it is
        inside MLX (writing examples, which it does when idle) aborted in C++ ("terminate called without an active
        exception"), and so did one whose engine thread ended as the interpreter finalized."""
        if not self._thread.is_alive():
            return
        with self._cond:
            self._parking = True
            self._cond.notify_all()
        self._parked.wait(timeout)

    @property
    def queue_depth(self) -> int:
        return len(self._queue)

    @property
    def running(self) -> int:
        return len(self._batch) + len(self._waiting)

    @property
    def waiting_for_examples(self) -> int:
        return len(self._waiting)

    @property
    def examples_to_write(self) -> int:
        """Questions seen whose examples are being written, a step at a time between batches."""
        return len(self.decider.unwritten_examples(list(self._to_write))) if self._writes() else 0

    def ready_decider(self) -> DeciderLike:
        """The decider, or Unavailable (503) while it loads or after it failed to."""
        if self.phase == "ready" and self.decider is not None:
            return self.decider
        retry = self.options.retry_after_s
        if self.phase == "failed":
            raise Unavailable(f"the model failed to load: {self.load_error}", "model_load_failed", retry)
        raise Unavailable("the model is still loading; retry shortly", "model_loading", retry)

    def prepare(self, request: DecisionRequest) -> Work:
        """Validate and count `request` before it queues (context overflow is raised here when the decider can)."""
        decider = self.ready_decider()
        prepare = getattr(decider, "prepare", None)
        if prepare is None:
            return Work(request, estimate_tokens(request), exact=False)
        prepared = prepare(request)
        return Work(request, int(prepared.input_tokens), exact=True, prepared=prepared)

    def submit(
        self, work: Work, deadline: float, alive: Callable[[], bool] = lambda: True, writing_wait: float | None = None
    ) -> Job:
        """Queue `work`, or raise Overloaded at once when max_pending jobs already wait. `writing_wait`: seconds it may
        wait for examples of its new questions (default: the engine's writing_wait_s)."""
        self.ready_decider()
        job = Job(work, deadline, alive, self.options.writing_wait_s if writing_wait is None else writing_wait)
        with self._cond:
            if (leader := self._same(work.request)) is not None:
                job.state = "following"
                leader.followers.append(job)
                self.observer.followed(job)
                return job
            if len(self._queue) >= self.options.max_pending:
                self.observer.rejected("queue_full")
                raise Overloaded(self.options.retry_after_s)
            self._queue.append(job)
            self._cond.notify()
        return job

    def _same(self, request: DecisionRequest) -> Job | None:
        """A queued or running job of an equal request (caller holds the lock)."""
        return next((j for j in (*self._batch, *self._waiting, *self._queue) if j.work.request == request), None)

    def wait(self, job: Job, poll: float = 0.25) -> Decision:
        """The job's decision (or its error, raised). A job still queued at its deadline, or whose
        client is gone (and no follower's is still waiting), is taken off the queue and never runs."""
        while not job.done.wait(self._slice(job, poll)):
            if reason := self._stale(job):
                self._drop_if_queued(job, reason)
        if isinstance(job.outcome, BaseException):
            raise job.outcome
        assert job.outcome is not None, "a finished job holds a decision or an error"
        return job.outcome

    @staticmethod
    def _slice(job: Job, poll: float) -> float:
        left = job.deadline - time.monotonic()
        return poll if left <= 0 else min(poll, left)

    def _drop_if_queued(self, job: Job, reason: str) -> None:
        with self._cond:
            if job.state == "queued":
                self._queue.remove(job)
                self._drop(job, reason)

    def _drop(self, job: Job, reason: str) -> None:
        """Finish a job that never ran, and its followers (caller holds the lock)."""
        message = (
            "the request waited in the queue past its deadline; retry shortly"
            if reason == "deadline"
            else "the client closed the connection"
        )
        woken = job.finish(Unavailable(message, "queue_timeout", self.options.retry_after_s), "dropped")
        self.observer.dropped(job, reason)
        for j in woken:
            j.done.set()

    # ------------------------------------------------------------ engine-thread side

    def _main(self) -> None:
        if self.decider is None and not self._load_decider():
            return
        while (batch := self._take(block=not self._writing_left())) is not None:
            self._run(self._set_aside(batch))
            self._write_step()
            self._run(self._waited())
        if self._parking:
            self._parked.set()
            threading.Event().wait()

    def _load_decider(self) -> bool:
        assert self._load is not None
        try:
            decider = self._load()
        except Exception as exc:
            self.load_error = str(exc) or type(exc).__name__
            self.phase = "failed"
            log.critical("the model failed to load: %s", self.load_error, exc_info=exc)
            if self._on_load_error is not None:
                self._on_load_error(exc)
            return False
        self.decider = decider
        self.phase = "ready"
        log.info("model %s ready after %.1f s", decider.model_id, time.monotonic() - self.load_started)
        return True

    def _take(self, block: bool = True) -> list[Job] | None:
        """Block for work (unless `block` is False); then take queued jobs in order while they fit the batch budget."""
        with self._cond:
            while block and not self._queue and not self._stopping and not self._parking:
                self._cond.wait()
            if self._stopping or self._parking:
                return None
            batch: list[Job] = []
            tokens = questions = 0
            while self._queue:
                job = self._queue[0]
                if batch and not self._fits(tokens + job.work.tokens, questions + job.work.questions):
                    break
                self._queue.popleft()
                if reason := self._stale(job):
                    self._drop(job, reason)
                    continue
                job.state, job.started = "running", time.monotonic()
                batch.append(job)
                tokens += job.work.tokens
                questions += job.work.questions
            self._batch = batch
            return batch

    def _fits(self, tokens: int, questions: int) -> bool:
        return tokens <= self.options.batch_max_tokens and questions <= self.options.batch_max_questions

    @staticmethod
    def _stale(job: Job) -> str | None:
        """Why no one waits for `job` any more: its deadline passed or its client left, and the same
        holds for each of its followers; None while someone waits."""
        reasons = [Engine._gone(j) for j in (job, *job.followers)]
        return None if None in reasons else reasons[0]

    @staticmethod
    def _gone(job: Job) -> str | None:
        if time.monotonic() >= job.deadline:
            return "deadline"
        return None if job.alive() else "client_gone"

    # ------------------------------------------------------------ examples written between batches

    def _writes(self) -> bool:
        """Whether the decider's examples are written here, between batches (a WritingDecider)."""
        return hasattr(self.decider, "write_examples_step")

    def _set_aside(self, batch: list[Job]) -> list[Job]:
        """The jobs of `batch` to run now; those with questions whose examples are not written yet wait for them
        (for their writing_wait), and those questions are written later, a step between batches."""
        if not self._writes():
            return batch
        now, ready, waiting = time.monotonic(), [], []
        for job in batch:
            new = self.decider.unwritten_examples(job.work.request.questions)
            self._to_write = list(dict.fromkeys([*self._to_write, *new]))
            if new and job.writing_wait > 0:
                job.examples_until = now + job.writing_wait
                waiting.append(job)
            else:
                ready.append(job)
        with self._cond:
            self._batch, self._waiting = ready, self._waiting + waiting
        return ready

    def _writing_left(self) -> bool:
        return bool(self._waiting or self._to_write)

    def _write_step(self) -> None:
        """One model call of writing: the examples of the waiting jobs' questions first, then of any seen."""
        if not self._writing_left():
            return
        questions = [q for job in self._waiting for q in job.work.request.questions] + self._to_write
        try:
            left = self.decider.write_examples_step(questions)
        except Exception as exc:  # the decider asks that question without examples from now on
            log.error("writing examples failed: %r", exc, exc_info=exc)
            left = True
        if not left:
            self._to_write = []

    def _waited(self) -> list[Job]:
        """The waiting jobs whose examples are written, or whose wait is over: to run now (asked without the
        examples still unwritten)."""
        now = time.monotonic()
        done = [
            job
            for job in self._waiting
            if now >= job.examples_until or not self.decider.unwritten_examples(job.work.request.questions)
        ]
        with self._cond:
            self._waiting = [job for job in self._waiting if job not in done]
            self._batch = done
        return done

    # ------------------------------------------------------------ deciding

    def _run(self, batch: list[Job]) -> None:
        if not batch:
            return
        started = time.monotonic()
        outcomes = self._decide([job.work.runnable for job in batch])
        finished = time.monotonic()
        with self._cond:  # no job may start following one of these after it was woken
            woken = []
            for job, outcome in zip(batch, outcomes):
                job.finished, job.batch_size = finished, len(batch)
                woken += job.finish(outcome, "done")
            self._batch = []
        self.observer.batch(batch, finished - started)
        for job in woken:
            job.done.set()

    def _decide(self, requests: list[Any]) -> list[Outcome]:
        """decide_batch; if a merged batch fails as a whole, each request runs alone, so one bad
        request cannot fail the others."""
        assert self.decider is not None
        try:
            if self._writes():  # the examples of new questions are written between batches (_write_step)
                outcomes: list[Any] = list(self.decider.decide_batch(requests, write_examples=False))
            else:
                outcomes = list(self.decider.decide_batch(requests))
        except Exception as exc:
            if len(requests) == 1:
                return [exc]
            log.warning("a batch of %d requests failed (%r); running them one by one", len(requests), exc)
            return [self._decide([r])[0] for r in requests]
        if len(outcomes) != len(requests):
            message = f"decide_batch answered {len(outcomes)} slots for {len(requests)} requests"
            return [RuntimeError(message) for _ in requests]
        return outcomes


def estimate_tokens(request: DecisionRequest) -> int:
    """About 4 characters a token, the input counted once per question as the prompts repeat it.
    Used only to budget batches when the decider cannot count exactly."""
    input_chars = sum(len(p.text) for p in request.input if isinstance(p, Text))
    total = 0
    for q in request.questions:
        options = sum(len(str(o.value)) + len(o.description or "") + 8 for o in q.options)
        total += (input_chars + len(q.instructions) + options) // 4 + 48
    return total


def conversion_progress() -> dict | None:
    """The running model conversion's progress bar, if any (the converter reports through tqdm)."""
    from tqdm import tqdm

    bars = [b for b in list(getattr(tqdm, "_instances", ())) if getattr(b, "total", None)]
    if not bars:
        return None
    bar = bars[-1]
    return {
        "phase": str(bar.desc),
        "done": int(bar.n),
        "total": int(bar.total),
        "fraction": round(bar.n / bar.total, 4),
    }

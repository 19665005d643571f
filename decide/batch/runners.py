"""Answering rows: in this process (one decide_batch per chunk of rows) or through a server's HTTP API.

Both yield `[(row, record), ...]` lists in input order, where a record is
`{"answers", "usage", "error"}`: the protocol's response fields, or an error for a bad row.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import DecideError
from .questions import BadRow, QuestionSet, error_record

if TYPE_CHECKING:
    from ..core import Decider

Answered = list[tuple[int, dict]]
RETRY_STATUSES = {408, 409, 429, 500, 502, 503, 504}
ROW_STATUSES = {400, 413, 422}  # this row's fault: an error record; any other status stops the run


def answer_texts(decider: Decider, questions: QuestionSet, texts: Sequence) -> list[dict]:
    """One record per text; the good rows share one `decide_batch` call (one trie, one prefix cache)."""
    records: list[dict | None] = [None] * len(texts)
    parsed = {}
    for i, text in enumerate(texts):
        try:
            parsed[i] = questions.parse(text)
        except BadRow as e:
            records[i] = error_record(e)
    outcomes = decider.decide_batch([p.request for p in parsed.values()])
    for (i, p), outcome in zip(parsed.items(), outcomes):
        failed = isinstance(outcome, DecideError)
        records[i] = error_record(outcome) if failed else questions.render(outcome, p)
    return records


def in_process(
    decider: Decider, questions: QuestionSet, texts: dict[int, object], batch_size: int
) -> Iterator[Answered]:
    rows = list(texts)
    for start in range(0, len(rows), batch_size):
        chunk = rows[start : start + batch_size]
        yield list(zip(chunk, answer_texts(decider, questions, [texts[r] for r in chunk])))


class ServerError(Exception):
    """The server refuses every row (a wrong key, URL or model) or kept failing past the retries."""


@dataclass(frozen=True)
class Client:
    """One decision request per row, retried like the SDKs: 408/409/429/5xx and connection errors,
    after the server's Retry-After (or retry-after-ms), else exponential backoff."""

    url: str
    questions: QuestionSet
    api_key: str | None = None
    retries: int = 8
    timeout: float = 600.0
    backoff: float = 0.5
    max_wait: float = 30.0

    def answer(self, text: object) -> dict:
        try:
            self.questions.parse(text)  # a row the server would refuse is not sent
        except BadRow as e:
            return error_record(e)
        data = json.dumps(self.questions.body(text), ensure_ascii=False).encode()
        for attempt in range(self.retries + 1):
            status, payload, wait = self._post(data, attempt)
            if status == 200:
                return {"answers": payload["answers"], "usage": payload["usage"], "error": None}
            if status in ROW_STATUSES:
                return {"answers": None, "usage": None, "error": _http_error(status, payload)}
            if status is not None and status not in RETRY_STATUSES:
                raise ServerError(f"{self.url} refused the request ({_describe(status, payload)})")
            if attempt < self.retries:
                time.sleep(wait)
        raise ServerError(f"{self.url} still fails after {self.retries} retries ({_describe(status, payload)})")

    def _post(self, data: bytes, attempt: int) -> tuple[int | None, object, float]:
        """(status or None when unreachable, body, seconds to wait before a retry)."""
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.url.rstrip("/") + self.questions.route, data, headers, method="POST")
        backoff = min(self.max_wait, self.backoff * 2**attempt)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                return r.status, json.loads(r.read()), 0.0
        except urllib.error.HTTPError as e:
            return e.code, _json_or_text(e.read()), _retry_after(e.headers) or backoff
        except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
            return None, str(getattr(e, "reason", e)), backoff


def _retry_after(headers) -> float | None:
    for name, scale in (("retry-after-ms", 1e-3), ("Retry-After", 1.0)):
        try:
            return float(headers.get(name)) * scale
        except (TypeError, ValueError):
            continue
    return None


def _json_or_text(raw: bytes) -> object:
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")


def _http_error(status: int, payload: object) -> dict:
    error = payload.get("error") if isinstance(payload, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    return {"type": code or f"http_{status}", "message": _describe(status, payload), "status": status}


def _describe(status: int | None, payload: object) -> str:
    """The server's own message: OpenAI's error.message, System One's detail (message or entries)."""
    if isinstance(payload, dict):
        detail = payload.get("detail")
        if isinstance(payload.get("error"), dict):
            payload = payload["error"].get("message")
        elif isinstance(detail, dict):
            payload = detail.get("message")
        elif isinstance(detail, list):
            payload = "; ".join(f"{'.'.join(map(str, d.get('loc', [])))}: {d.get('msg')}" for d in detail)
    return f"{status or 'unreachable'}: {payload}"


def over_http(client: Client, texts: dict[int, object], concurrency: int) -> Iterator[Answered]:
    """`concurrency` requests in flight; answers come back in input order (a kill loses only those in flight)."""
    pool = ThreadPoolExecutor(concurrency, thread_name_prefix="decide-batch")
    pending: deque[tuple[int, Future]] = deque()
    try:
        for row, text in texts.items():
            pending.append((row, pool.submit(client.answer, text)))
            if len(pending) >= 2 * concurrency:
                yield _drain(pending)
        while pending:
            yield _drain(pending)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def _drain(pending: deque) -> Answered:
    """The oldest answer (waiting for it) and every answer after it that is already done."""
    row, future = pending.popleft()
    out = [(row, future.result())]
    while pending and pending[0][1].done():
        row, future = pending.popleft()
        out.append((row, future.result()))
    return out

"""Decisions over a Ray Dataset: a callable class for `Dataset.map_batches`, one model per actor.

    import ray
    from decide.ray import DecideBatch

    ds = ray.data.read_parquet("s3://bucket/tickets/")
    answered = ds.map_batches(
        DecideBatch,
        fn_constructor_kwargs={"model": "smollm2-135m", "questions": json.load(open("questions.json"))},
        # and "options": DeciderOptions(precision=..., calibration=..., profile=...) where not the defaults
        compute=ray.data.ActorPoolStrategy(size=4),   # 4 actors, each with its own copy of the model
                                                      # (Ray before 2.51: concurrency=4)
        batch_size=16,
        batch_format="pandas",    # or "pyarrow"
    )

Each output row is the input row with `answers`, `usage` and `error` added (the protocol's
response fields as JSON text, or the reason a row could not be answered); the text column is kept.
Needs `pip install 'mlx-decide[ray]'`; the server never imports this module.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .batch.questions import QuestionSet
from .batch.runners import Answered, answer_texts

if TYPE_CHECKING:
    from .core import DeciderOptions

ANSWER_FIELDS = ("answers", "usage", "error")


class DecideBatch:
    """`map_batches` callable: loads the model once in the actor, answers a batch per call."""

    def __init__(
        self, questions: Any, model: str | None = None, text_field: str = "text", options: DeciderOptions | None = None
    ) -> None:
        from .core import Decider

        self.questions = questions if isinstance(questions, QuestionSet) else QuestionSet.from_json(questions)
        self.text_field = text_field
        self.decider = Decider.load(model, options, progress=False)

    def __call__(self, batch: Any) -> Any:
        texts = _column(batch, self.text_field)
        records = answer_texts(self.decider, self.questions, texts)
        columns = {name: [_json(r[name]) for r in records] for name in ANSWER_FIELDS}
        return _with_columns(batch, columns)


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False)


def _column(batch: Any, name: str) -> list:
    if hasattr(batch, "column_names") and hasattr(batch, "to_pylist"):  # pyarrow.Table
        return batch.column(name).to_pylist()
    if hasattr(batch, "to_dict"):  # pandas.DataFrame
        return batch[name].tolist()
    return list(batch[name])  # dict of numpy arrays


def _with_columns(batch: Any, columns: dict[str, list]) -> Any:
    if hasattr(batch, "column_names") and hasattr(batch, "to_pylist"):
        import pyarrow as pa

        for name, values in columns.items():
            batch = batch.append_column(name, pa.array(values, pa.string()))
        return batch
    if hasattr(batch, "to_dict"):
        return batch.assign(**columns)
    import numpy as np

    return {**batch, **{name: np.array(values, dtype=object) for name, values in columns.items()}}


def on_ray(
    address: str | None,
    model: str | None,
    options: DeciderOptions | None,
    questions: QuestionSet,
    texts: dict[int, object],
    actors: int,
    batch_size: int,
) -> Iterator[Answered]:
    """`decide batch --ray`: the rows through `DecideBatch` actors, answers streamed back in input order."""
    import ray

    if not ray.is_initialized():
        local = {"include_dashboard": False} if address is None else {}
        ray.init(address=address, log_to_driver=False, **local)
    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True
    ctx.enable_progress_bars = False
    ds = ray.data.from_items([{"row": row, "text": text} for row, text in texts.items()])
    answered = ds.map_batches(
        DecideBatch,
        fn_constructor_kwargs={"questions": questions, "model": model, "options": options},
        compute=ray.data.ActorPoolStrategy(size=actors),
        batch_size=batch_size,
        batch_format="pyarrow",
    )
    return _stream(answered)


def _stream(answered) -> Iterator[Answered]:
    for batch in answered.iter_batches(batch_format="pyarrow", batch_size=None):
        rows = batch.column("row").to_pylist()
        fields = {name: batch.column(name).to_pylist() for name in ANSWER_FIELDS}
        yield [(row, {name: _parsed(fields[name][i]) for name in ANSWER_FIELDS}) for i, row in enumerate(rows)]


def _parsed(text: str | None) -> Any:
    return None if text is None else json.loads(text)

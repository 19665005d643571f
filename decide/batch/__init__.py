"""`decide batch`: decisions over whole files (JSONL, CSV, Parquet), in process, via a server, or on Ray."""

from .questions import QuestionSet
from .runners import answer_texts

__all__ = ["QuestionSet", "answer_texts"]

"""Where answers go, so that a killed run resumes where it stopped and never leaves a corrupt OUTPUT.

Every answered row is appended to a journal as one JSON line carrying its input row index
(`row`), written whole and fsync'd before the next rows are taken; rerunning reads the journal,
truncates a torn last line (the only damage a kill can do to an append-only file), and skips
the rows it holds.

- OUTPUT.jsonl *is* the journal: rows in input order, the input's other columns inline.
- OUTPUT.parquet is assembled from OUTPUT.parquet.journal.jsonl when every row is answered
  (written beside it, then renamed over it), and the journal is removed. The input's other
  columns are taken from the input at assembly, so Parquet types survive. A rerun after that
  starts a new journal from the finished file's rows.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .table import Rows, file_format, import_parquet

ANSWER_FIELDS = ("answers", "usage", "error")


class OutputError(ValueError):
    """OUTPUT cannot be written or resumed; the message says what to do."""


def check_output(path: str | Path) -> str:
    fmt = file_format(path, "OUTPUT")
    if fmt == "csv":
        raise OutputError(f"OUTPUT {path}: write .jsonl or .parquet (answers are nested objects)")
    if fmt == "parquet":
        import_parquet()
    return fmt


class Journal:
    """An append-only JSONL file of answer records, each with its row index."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.done = self._recover()
        self._file = None

    def _recover(self) -> set[int]:
        if not self.path.exists():
            return set()
        data = self.path.read_bytes()
        complete = data[: data.rfind(b"\n") + 1]
        if len(complete) < len(data):  # a line torn by a kill: drop it, its row runs again
            with self.path.open("r+b") as f:
                f.truncate(len(complete))
                os.fsync(f.fileno())
        done = set()
        for n, line in enumerate(complete.splitlines(), 1):
            try:
                row = json.loads(line)["row"]
            except (ValueError, KeyError, TypeError):
                raise OutputError(
                    f"{self.path} line {n} is not a decide batch record; choose another OUTPUT or move this file"
                ) from None
            done.add(row)
        return done

    def append(self, records: Iterable[dict]) -> None:
        if self._file is None:
            self._file = self.path.open("ab")
        data = b"".join(json.dumps(r, ensure_ascii=False, default=str).encode() + b"\n" for r in records)
        self._file.write(data)
        self._file.flush()
        os.fsync(self._file.fileno())

    def records(self) -> list[dict]:
        with self.path.open("rb") as f:
            return [json.loads(line) for line in f]

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class Output:
    """OUTPUT in either format: which rows are done, where new answers go, and the final assembly."""

    def __init__(self, path: str | Path, rows: Rows, text_field: str) -> None:
        self.path = Path(path)
        self.format = check_output(path)
        self.rows = rows
        self.text_field = text_field
        if self.format == "parquet":
            journal = self.path.with_name(self.path.name + ".journal.jsonl")
            if not journal.exists() and self.path.exists():
                _journal_from_parquet(self.path, journal)
            self.journal = Journal(journal)
        else:
            self.journal = Journal(self.path)
        beyond = [r for r in self.journal.done if not 0 <= r < len(rows.records)]
        if beyond:
            raise OutputError(
                f"{self.path} holds row {max(beyond)} but the input has {len(rows.records)} rows: "
                "it is the output of another input; choose another OUTPUT"
            )

    @property
    def done(self) -> set[int]:
        return self.journal.done

    def write(self, answered: list[tuple[int, dict]]) -> None:
        """Append answered rows (each `(row, {answers, usage, error})`)."""
        self.journal.append(self._record(row, answer) for row, answer in answered)
        self.journal.done.update(row for row, _ in answered)

    def _record(self, row: int, answer: dict) -> dict:
        if self.format == "parquet":
            return {"row": row, **answer}
        return {"row": row, **self._passthrough(row), **answer}

    def _passthrough(self, row: int) -> dict[str, Any]:
        return {k: v for k, v in self.rows.records[row].items() if k != self.text_field}

    def finish(self) -> None:
        """Close the journal; for Parquet, assemble OUTPUT from it (in input order) and remove it."""
        self.journal.close()
        if self.format == "parquet" and self.journal.path.exists():
            self._assemble()

    def _assemble(self) -> None:
        pq = import_parquet()
        import pyarrow as pa

        error_type = pa.struct([("type", pa.string()), ("message", pa.string()), ("status", pa.int64())])
        records = sorted(self.journal.records(), key=lambda r: r["row"])
        index = [r["row"] for r in records]
        if self.rows.table is not None:
            table = self.rows.table.drop_columns([self.text_field]).take(index)
        else:
            columns = [c for c in self.rows.columns if c != self.text_field]  # JSONL rows may lack some
            table = pa.table({c: [self.rows.records[i].get(c) for i in index] for c in columns})
        table = table.append_column("row", pa.array(index, pa.int64()))
        for name in ANSWER_FIELDS:
            kind = error_type if name == "error" else None  # typed even when no row failed
            table = table.append_column(name, pa.array([r[name] for r in records], kind))
        partial = self.path.with_name(self.path.name + ".partial")
        pq.write_table(table, partial)
        with partial.open("rb") as f:
            os.fsync(f.fileno())
        os.replace(partial, self.path)
        self.journal.path.unlink()


def _journal_from_parquet(parquet: Path, journal: Path) -> None:
    pq = import_parquet()
    try:
        table = pq.read_table(parquet, columns=["row", *ANSWER_FIELDS])
    except Exception as e:  # pyarrow raises several types for a file that is not ours
        raise OutputError(f"{parquet} is not a decide batch output ({e}); choose another OUTPUT") from None
    seeded = Journal(journal)
    seeded.append(table.to_pylist())
    seeded.close()

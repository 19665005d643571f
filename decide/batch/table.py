"""Reading the input rows: JSONL, CSV or Parquet, read whole and checked before any compute."""

from __future__ import annotations

import csv
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}
OUTPUT_FIELDS = ("row", "answers", "usage", "error")
PYARROW_MISSING = "Parquet needs pyarrow: pip install 'mlx-decide[batch]'"


class InputError(ValueError):
    """The input file cannot be used; the message says where and what to do."""


@dataclass(frozen=True)
class Rows:
    """The input's rows as dicts, in file order, and its Arrow table when it was Parquet."""

    records: list[dict[str, Any]]
    columns: list[str]
    table: Any = None  # pyarrow.Table for a Parquet input (types kept for a Parquet output)


def file_format(path: str | Path, role: str) -> str:
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise InputError(f"{role} {path}: unknown format {suffix or '(no extension)'!r}; use .jsonl, .csv or .parquet")
    return FORMATS[suffix]


def read_rows(path: str | Path, text_field: str) -> Rows:
    fmt = file_format(path, "INPUT")
    try:
        rows = {"jsonl": _jsonl, "csv": _csv, "parquet": _parquet}[fmt](Path(path))
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror or e}") from None
    _check_columns(path, rows.columns, text_field)
    return rows


def _jsonl(path: Path) -> Rows:
    records, columns = [], {}
    with path.open("rb") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise InputError(f"{path} line {n}: not valid JSON ({getattr(e, 'msg', e)})") from None
            if not isinstance(record, dict):
                raise InputError(f"{path} line {n}: expected a JSON object per line, got {type(record).__name__}")
            records.append(record)
            columns.update(dict.fromkeys(record))
    return Rows(records, list(columns))


def _csv(path: Path) -> Rows:
    try:
        with path.open(encoding="utf-8-sig", newline="") as f:
            reader = csv.DictReader(f)
            columns = list(reader.fieldnames or [])
            records = []
            for record in reader:
                if None in record:
                    raise InputError(
                        f"{path} line {reader.line_num}: {len(columns) + len(record[None])} fields "
                        f"but the header has {len(columns)}; quote fields that contain commas"
                    )
                records.append(record)
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8 text; convert it (e.g. iconv -t utf-8)") from None
    except csv.Error as e:
        raise InputError(f"{path}: malformed CSV ({e})") from None
    if not columns:
        raise InputError(f"{path}: empty CSV file (a header line is required)")
    return Rows(records, columns)


def _parquet(path: Path) -> Rows:
    pq = import_parquet()
    import pyarrow as pa

    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, pa.ArrowIOError) as e:
        raise InputError(f"{path} is not a readable Parquet file ({e})") from None
    return Rows(table.to_pylist(), table.column_names, table)


def import_parquet():
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError(PYARROW_MISSING) from None
    return pq


def _check_columns(path: str | Path, columns: list[str], text_field: str) -> None:
    if text_field not in columns:
        shown = ", ".join(columns[:20]) or "none"
        raise InputError(f"{path} has no column {text_field!r} (columns: {shown}); name the text with --text-field")
    clash = [c for c in columns if c in OUTPUT_FIELDS and c != text_field]
    if clash:
        raise InputError(f"{path}: column {clash[0]!r} would clash with the output's own {clash[0]!r}; rename it")


def select(n: int, limit: int | None = None, sample: int | None = None, seed: int = 0) -> list[int]:
    """Row indices to answer, in input order: a seeded sample of `sample` rows, then the first `limit`."""
    rows = sorted(random.Random(seed).sample(range(n), min(sample, n))) if sample is not None else range(n)
    return list(rows)[:limit] if limit is not None else list(rows)
